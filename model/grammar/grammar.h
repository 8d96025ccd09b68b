/* model/grammar/grammar.h — grammar-constrained decoding: GBNF grammars (llama.cpp's notation),
 * an incremental matcher per choice, and the token mask that keeps a sampler inside the grammar.
 *
 * Three objects:
 *   model_grammar  a compiled GBNF grammar: immutable, reference-counted, shared by every choice
 *                  of every request that uses it (any thread may read it).
 *   model_gvocab   the vocabulary as byte strings in a trie (built once per tokenizer; immutable,
 *                  any thread may read it).
 *   model_gmatch   one choice's parser state (a set of pushdown stacks over the grammar's
 *                  elements, as in an Earley-style recognizer without the chart) plus its mask
 *                  cache; one thread at a time.
 *
 * The mask (which tokens may come next) is computed by walking the vocabulary trie once with the
 * matcher's state, cutting every subtree whose prefix the grammar already refuses; a state's
 * mask is cached, keyed by the interned state, so that a state that recurs (inside a JSON string,
 * between the members of an object at the same depth: most steps of a structured output) costs
 * a copy of the bitset and no parsing (the xgrammar observation: most steps' masks were seen
 * before). A state not seen before does not walk the whole trie: per grammar and vocabulary,
 * tables built once (model_grammar_prepare) hold, for each grammar position with the part of
 * the stack below it that a token cannot get past without matching something, the tokens it
 * accepts or refuses whatever the rest of the stack is; a new mask ORs those sets and walks only
 * the trie subtrees of tokens that reach the rest of the stack (xgrammar's context-independent
 * tokens). Transitions (state, code point) -> state are memoized.
 *
 * Text is matched as Unicode code points; a token may end inside a UTF-8 sequence, and it is
 * allowed when some completion of that sequence can still match (the pending bytes are part of
 * the state). Bad grammars are refused at compile time with a message: syntax errors (with the
 * line), undefined rules, a missing root, left recursion (a rule that can reach itself without
 * consuming a character: the matcher would never finish expanding it), and a root that can never
 * finish. Work per token is bounded (MODEL_GRAMMAR_MAX_EXPAND); a matcher that exceeds a bound
 * reports an error instead of hanging.
 */
#ifndef TANDEM_MODEL_GRAMMAR_H
#define TANDEM_MODEL_GRAMMAR_H
#include <stddef.h>
#include <stdint.h>

#define MODEL_GRAMMAR_MAX_TEXT (1 << 20)     /* bytes of GBNF text accepted */
#define MODEL_GRAMMAR_MAX_ELEMS (1 << 20)    /* compiled elements (repetition counts expand) */
#define MODEL_GRAMMAR_MAX_REPEAT 1000        /* the m and n of x{m,n} */
#define MODEL_GRAMMAR_MAX_EXPAND (1 << 18)   /* expansion steps per code point */
#define MODEL_GRAMMAR_MAX_NODES (1 << 23)    /* stack nodes per matcher (~64 MiB) */

typedef struct model_grammar model_grammar;
typedef struct model_gvocab model_gvocab;
typedef struct model_gmatch model_gmatch;

/* ---------------------------------------------------------------- grammars */

/* Compiles GBNF text (len bytes, need not be NUL-terminated) whose start rule is root (NULL:
 * "root"). NULL with a one-line message in err on a bad grammar or out of memory. The caller
 * holds one reference. */
model_grammar *model_grammar_new(const char *text, size_t len, const char *root, char *err,
                                 size_t errlen);
/* Another reference (any thread); returns g. */
model_grammar *model_grammar_ref(model_grammar *g);
/* Drops a reference; the last frees it. NULL is ignored. */
void model_grammar_unref(model_grammar *g);
int model_grammar_n_rules(const model_grammar *g);

/* The built-in grammar of response_format {"type": "json_object"}: one JSON object (RFC 8259),
 * at most one space between tokens. A static string. */
const char *model_grammar_json_object(void);

/* ---------------------------------------------------------------- vocabularies */

/* The n_vocab tokens' byte strings: bytes[i] (lens[i] bytes; may be NULL when lens[i] == 0).
 * never[i] != 0 marks a token the grammar never allows (special and control tokens); eos ids
 * are allowed exactly when the grammar may end. strip_first_space: the detokenizer drops one
 * leading space of a generation's text (SentencePiece's Strip decoder), so a first token's
 * leading space is no text. Copies what it needs. NULL when out of memory. */
model_gvocab *model_gvocab_new(int n_vocab, const char *const *bytes, const size_t *lens,
                               const uint8_t *never, const int32_t *eos_ids, int n_eos,
                               int strip_first_space);
/* Another reference (any thread; a task that prepares tables off the event loop holds one);
 * returns v. model_gvocab_free drops one; the last frees it. */
model_gvocab *model_gvocab_ref(const model_gvocab *v);
void model_gvocab_free(model_gvocab *v);

/* Precomputes g's tables for vocabulary v (gram_ctx.c: per grammar position, the tokens it
 * accepts or refuses whatever lies below it on the stack), so that a new state's mask ORs
 * bitsets and walks only the few trie subtrees that depend on the rest of the stack. Bounded
 * work and memory (a grammar past the bounds keeps whole-trie walks for the states the tables do
 * not cover). The first mask that needs them builds them anyway; calling this first (off the
 * event loop: tens of ms at a 128K vocabulary) keeps that cost out of the first tokens. Any
 * thread; once per (g, v); v must outlive g's use with it. */
void model_grammar_prepare(model_grammar *g, const model_gvocab *v);
/* 1 when g's tables for v are built (or were found too large to build): any thread, no wait. */
int model_grammar_prepared(model_grammar *g, const model_gvocab *v);
typedef struct model_gprep_stats {
    int keys;       /* positions with their known stack part, tabled */
    long fronts;    /* trie subtrees left to run time, over all keys */
    long visits;    /* trie nodes walked to build them */
    long bytes;     /* the tables' size */
    double build_ms;
} model_gprep_stats;
/* The tables' figures (prepares them first). */
void model_grammar_prepare_stats(model_grammar *g, const model_gvocab *v, model_gprep_stats *st);
int model_gvocab_size(const model_gvocab *v);
/* Nodes in the trie (for the benchmark's report). */
int model_gvocab_trie_nodes(const model_gvocab *v);

/* ---------------------------------------------------------------- matchers */

/* A matcher at the start of g for vocabulary v (both must outlive it; it takes a reference on
 * g). NULL when out of memory, or when the grammar's start passes the matcher's bounds
 * (MODEL_GRAMMAR_MAX_EXPAND, MODEL_GRAMMAR_MAX_NODES). model_gmatch_new_why: the same, with why
 * in why (when why is not NULL). */
model_gmatch *model_gmatch_new(model_grammar *g, const model_gvocab *v);
model_gmatch *model_gmatch_new_why(model_grammar *g, const model_gvocab *v, char *why,
                                   size_t whylen);
/* The text continues one whose decode keeps the next token's leading space (a completion after a
 * prompt with text: "\u2581named" after "...a big dog" is " named"): the first token's space is
 * text to the grammar, as any later token's (the vocabulary's strip_first_space is for a text of
 * its own). Before the first token. */
void model_gmatch_keep_first_space(model_gmatch *m);
void model_gmatch_free(model_gmatch *m);
/* How the matcher's masks use the grammar's tables (model_grammar_prepare):
 *   MODEL_GMATCH_TABLES_BUILD (the default): a mask that can use them builds them when they do
 *     not exist and no other thread is building them (else it walks the whole trie meanwhile);
 *   MODEL_GMATCH_TABLES_READY: used when built, never built here (a thread that must not spend
 *     tens of ms on them: the event loop);
 *   MODEL_GMATCH_TABLES_OFF: never used (tests: the reference the tables are checked against). */
enum { MODEL_GMATCH_TABLES_OFF, MODEL_GMATCH_TABLES_READY, MODEL_GMATCH_TABLES_BUILD };
void model_gmatch_set_tables(model_gmatch *m, int how);

/* The tokens that may come next, as a bitset of model_gvocab_size bits (bit i of word i/64)
 * owned by the matcher, valid until its next call. Returns the number of allowed tokens (0:
 * none: the grammar cannot continue with this vocabulary), or -1 on an error (a bound passed,
 * out of memory). cached (may be NULL) is set to 1 when the mask came from the cache. */
int model_gmatch_mask(model_gmatch *m, const uint64_t **mask, int *cached);
/* Sets every logit the grammar refuses to -inf. Returns the number allowed, or -1 as above. */
int model_gmatch_apply(model_gmatch *m, float *logits, int n_vocab);
/* Feeds the chosen token. 0; -1 when the grammar refuses it (the state is unchanged) or on an
 * error. An eos id is accepted when the grammar may end (and ends it). */
int model_gmatch_accept(model_gmatch *m, int32_t token);
/* Feeds text directly (tests): 0, or -1 when refused (the state is then unchanged). */
int model_gmatch_accept_bytes(model_gmatch *m, const char *s, size_t n);
/* 1 when the text so far is a complete sentence of the grammar. */
int model_gmatch_can_end(const model_gmatch *m);
/* 1 when nothing may follow (complete, and no character can extend it). */
int model_gmatch_done(const model_gmatch *m);
/* The last error's message ("" when none). */
const char *model_gmatch_error(const model_gmatch *m);

/* Tests and benchmarks: the number of distinct parser states, cached masks, and mask
 * computations that missed the cache, so far. */
void model_gmatch_stats(const model_gmatch *m, int *states, int *masks, long *misses);
/* Tests and benchmarks: masks computed by walking the whole trie because the grammar's tables
 * (model_grammar_prepare) had no entry for some stack of the state. */
long model_gmatch_fallbacks(const model_gmatch *m);

#endif

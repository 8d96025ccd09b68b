/* model/grammar/gram_matcher.h — a matcher's layout, shared by the files of model/grammar/ only:
 * gram_match.c (stacks, states, transitions, feeding), gram_mask.c (token masks and their caches),
 * gram_ctx.c (the per-position token classes precomputed once per grammar and vocabulary).
 *
 * A stack is a chain of nodes (pos, parent): pos the grammar element to match next (a CHAR on
 * top, a continuation below). Node 0 is the empty stack (the text may end there). A matcher
 * that classifies tokens for gram_ctx.c also holds the context node: a stand-in for "whatever
 * lies below the part of the stack that is known" (pos GRAM_POS_CTX); a stack that pops into it
 * has left what the classification can decide alone. Ordinary matchers never make one. */
#ifndef TANDEM_MODEL_GRAM_MATCHER_H
#define TANDEM_MODEL_GRAM_MATCHER_H
#include "model/grammar/gram_int.h"

#define GRAM_POS_CTX (-2) /* the context node's pos */

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct gstate {
    int64_t off;
    int32_t len, mask;
    uint32_t hash;
    uint8_t accept; /* holds the empty stack */
    uint8_t ctx;    /* holds the context node (classifying matchers only) */
    int32_t *ascii; /* [128] the state after each ASCII character + 2 (1: refused, 0: not known
                       yet); a mask's trie walk is mostly ASCII bytes, and an array lookup is what
                       makes a cold mask cheap */
} gstate;

typedef struct memo_e {
    uint64_t key; /* (state + 1) << 32 | code point; 0: empty slot */
    int32_t next;
} memo_e;

/* A walk position: a state and, inside a UTF-8 sequence, its code point so far. */
typedef struct wpos {
    int32_t sid;
    uint32_t cp;
    int8_t need, len;
} wpos;

struct model_gmatch {
    model_grammar *g;
    const model_gvocab *v;
    gnode *nodes;
    int n_nodes, cap_nodes;
    int32_t *node_ht;
    uint32_t node_ht_cap;
    gstate *states;
    int n_states, cap_states;
    int32_t *sdata;
    int64_t n_sdata, cap_sdata;
    int32_t *state_ht;
    uint32_t state_ht_cap;
    memo_e *memo;
    uint32_t memo_cap, memo_n;
    uint64_t *masks; /* n_masks cached masks of v->words words */
    int n_masks, cap_masks;
    uint64_t *scratch;
    wpos *walk; /* [max_depth + 1] */
    /* expansion scratch */
    int32_t *work;
    int n_work, cap_work;
    int32_t *out;
    int n_out, cap_out;
    uint64_t *seen; /* (pos, parent) keys of this step, with a stamp */
    uint32_t *seen_stamp;
    uint32_t seen_cap, stamp;
    long steps, misses, fallbacks;
    int failed;
    wpos cur;
    int first, ended;
    int tables; /* MODEL_GMATCH_TABLES_* */
    char err[160];
    int32_t *kbuf, *kout, *koff; /* canonical key scratch */
    int cap_kbuf, cap_kout, cap_koff;
    int32_t *sbuf; /* a state's stacks (gram_ptab_mask) */
    int cap_sbuf;
};

/* gram_match.c */
int gram_fail(model_gmatch *m, const char *msg);
int gram_grow(void **p, int *cap, size_t elem, int need);
uint64_t gram_mix(uint64_t x);
/* The id of node (pos, parent), made when new; -1 on an error (m->failed set). */
int32_t gram_node_get(model_gmatch *m, int32_t pos, int32_t parent);
/* The id of the state holding the n node ids of v (sorted and deduplicated in place); -1 on an
 * error. */
int32_t gram_intern(model_gmatch *m, int32_t *v, int n);
/* One byte from *in into *out: 1, 0 when refused, -1 on an error. */
int gram_step_byte(model_gmatch *m, const wpos *in, uint8_t b, wpos *out);
/* A matcher with no stacks yet (gram_ctx.c builds its own); NULL when out of memory. */
model_gmatch *gram_match_alloc(model_grammar *g, const model_gvocab *v);

/* gram_mask.c */
/* Every token's verdict from walk position start over the whole trie, into mask (v->words
 * words, cleared first). first: the generation's first step (the stripped space). 0, or -1 on
 * an error. */
int gram_mask_full(model_gmatch *m, wpos start, int first, uint64_t *mask);
/* Walks the subtrees of the trie nodes front[0..n) (preorder, none inside another) from the
 * single-stack state sid, setting the bits of the tokens allowed below each node (not those
 * ending at it) in mask. 0, or -1 on an error. */
int gram_mask_fronts(model_gmatch *m, int32_t sid, const int32_t *front, int n, uint64_t *mask);

/* gram_ctx.c */
typedef struct gram_ptab gram_ptab;
/* Builds the tables of grammar g for vocabulary v (next: the list it will head). NULL only when
 * out of memory; a grammar too large for tables gets one that is not ready. */
gram_ptab *gram_ptab_build(model_grammar *g, const model_gvocab *v, gram_ptab *next);
gram_ptab *gram_ptab_next(const gram_ptab *t);
const model_gvocab *gram_ptab_vocab(const gram_ptab *t);
int gram_ptab_ready(const gram_ptab *t);
/* The grammar's tables for vocabulary v; NULL when they are not built (yet: how says whether to
 * build them now, MODEL_GMATCH_TABLES_BUILD: unless another thread is; READY: no; 3: build or
 * wait for the thread building them) or could not be (too large, out of memory). */
const gram_ptab *gram_ptab_get(model_grammar *g, const model_gvocab *v, int how);
void gram_ptab_free(gram_ptab *t);
/* ORs what the tables decide for the stacks of state sid into mask and walks the rest.
 * 1 done; 0 when some stack has no entry (the caller walks the whole trie); -1 on an error. */
int gram_ptab_mask(const gram_ptab *t, model_gmatch *m, int32_t sid, uint64_t *mask);

#endif

/* model/tok/tok_internal.h — the tokenizer's internal types, shared by model/tok_*.c only.
 *
 * Memory plan: everything a model_tok owns is built once by model_tok_load() and never written
 * again, so encode/decode from many threads need no locks. Strings live in an arena (stable
 * pointers). Each encode call has its own scratch (tok_work): piece text, the BPE symbol list and
 * heap, a word->ids cache, PCRE2 match data; it is freed when the call returns. */
#ifndef TANDEM_MODEL_TOK_INTERNAL_H
#define TANDEM_MODEL_TOK_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/tok/tokenizer.h"
#include "proto/buf.h"
#include "proto/utf8.h"
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- limits (every size from a file
 * or a caller is checked against these before anything is allocated) */
/* The largest public tokenizer.json files are ~35 MB (262k-entry vocabularies); 512 MiB bounds
 * memory while leaving room. */
#define TOK_MAX_FILE_BYTES ((size_t)512 << 20)
/* tokenizer_config.json holds a few chat templates (KBs); 64 MiB is generous. */
#define TOK_MAX_CONFIG_BYTES ((size_t)64 << 20)
/* Real vocabularies are <= 262,144 entries; ids must also fit the int32 API with room. */
#define TOK_MAX_VOCAB (1 << 22)
/* Longest real token strings are a few hundred bytes (runs of spaces or '=' in code vocabularies). */
#define TOK_MAX_TOKEN_BYTES 4096
/* Llama-3 has 280,147 merges, the largest known files ~1M. */
#define TOK_MAX_MERGES (1 << 23)
#define TOK_MAX_ADDED (1 << 20)
#define TOK_MAX_PATTERN_BYTES 65536
#define TOK_MAX_STEPS 64 /* normalizer / pre-tokenizer / decoder / processor steps */
#define TOK_MAX_INPUT_BYTES ((size_t)1 << 30)
#define TOK_MAX_TEMPLATE_IDS 256

/* ------------------------------------------------------------ containers (model/tok/tok_util.c)
 * Byte buffers are proto/buf.h's proto_buf; UTF-8 is proto/utf8.h's. */
typedef struct tok_ids {
    int32_t *p;
    size_t len, cap;
} tok_ids;
int model_tok_ids_put(tok_ids *v, const int32_t *ids, size_t n);
void model_tok_ids_free(tok_ids *v);

/* Arena of NUL-terminated strings with stable addresses, freed all at once. */
typedef struct tok_arena {
    struct tok_arena_block *head;
} tok_arena;
char *model_tok_arena_dup(tok_arena *a, const char *s, size_t n);
void model_tok_arena_free(tok_arena *a);

uint64_t model_tok_hash(const void *p, size_t n);
/* The same from a start the caller picks: a table that a client's text fills (the per-call word
 * cache) starts from a random one (model_tok_hash_seed), so that no list of words made offline
 * collides in it. */
uint64_t model_tok_hash_from(uint64_t seed, const void *p, size_t n);
/* A random start for model_tok_hash_from (getrandom; a varying fallback where it fails). */
uint64_t model_tok_hash_seed(void);

/* Byte string -> int32 (open addressing). Keys are not copied: they must outlive the map. */
typedef struct tok_map {
    uint32_t *slot; /* 0: empty, else entry index + 1 */
    size_t mask;
    const char **key;
    uint32_t *klen;
    int32_t *val;
    size_t n, cap;
} tok_map;
int model_tok_map_init(tok_map *m, size_t expected);
/* Inserts or replaces; 0 / -1 on OOM or when full (more than `expected` keys). */
int model_tok_map_put(tok_map *m, const char *key, size_t klen, int32_t val);
int32_t model_tok_map_get(const tok_map *m, const char *key, size_t klen); /* -1: absent */
void model_tok_map_free(tok_map *m);

/* Mixes all 64 bits of a pair key into the low bits (the table index): many pairs share one side,
 * so a plain multiplicative hash of (a << 32 | b) would crowd them into a few slots. */
static inline uint64_t model_tok_pair_hash(uint64_t k)
{
    k *= 0x9E3779B97F4A7C15ull;
    k ^= k >> 32;
    k *= 0xBF58476D1CE4E5B9ull;
    return k ^ (k >> 29);
}

/* (left id, right id) -> (rank, merged id). */
typedef struct tok_pairs {
    uint64_t *key; /* (a << 32 | b) + 1; 0: empty */
    uint32_t *rank;
    int32_t *merged;
    size_t mask, n;
} tok_pairs;
int model_tok_pairs_init(tok_pairs *p, size_t expected);
int model_tok_pairs_put(tok_pairs *p, int32_t a, int32_t b, uint32_t rank, int32_t merged);
/* 1 and *rank, *merged when the pair merges, else 0. */
static inline int model_tok_pairs_get(const tok_pairs *p, int32_t a, int32_t b, uint32_t *rank,
                                      int32_t *merged)
{
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (size_t i = (size_t)model_tok_pair_hash(k) & p->mask;; i = (i + 1) & p->mask) {
        if (p->key[i] == k) {
            *rank = p->rank[i];
            *merged = p->merged[i];
            return 1;
        }
        if (p->key[i] == 0) return 0;
    }
}
void model_tok_pairs_free(tok_pairs *p);

/* ---------------------------------------------------------------- regex (model/tok/tok_regex.c) */
/* tokenizers compiles patterns with Oniguruma; we use PCRE2 (UTF, UCP, MULTILINE as Oniguruma's
 * ^ and $ are line anchors), after rewriting the few escapes whose meaning differs: \s and \S
 * become the White_Space property, \w the Unicode word class (Alphabetic, M, Nd, Pc,
 * Join_Control), \uHHHH becomes \x{HHHH}. literal: the pattern is a plain string. */
typedef struct tok_re {
    pcre2_code *code;
} tok_re;
int model_tok_re_compile(tok_re *re, const char *pat, size_t len, int literal, char *err,
                         size_t errlen);
/* Next match in s[0..len) at or after start: 1 with [*ms, *me), 0 when none, -1 on a matcher
 * error. md must come from model_tok_re_match_data(). */
int model_tok_re_find(const tok_re *re, pcre2_match_data *md, const char *s, size_t len,
                      size_t start, size_t *ms, size_t *me);
pcre2_match_data *model_tok_re_match_data(void);
void model_tok_re_free(tok_re *re);

/* ---------------------------------------------------------------- pipeline steps */
enum tok_norm_kind {
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_STRIP,
};
typedef struct tok_norm {
    enum tok_norm_kind kind;
    char *str; /* Prepend text / Replace content (arena) */
    size_t str_len;
    tok_re re;       /* Replace pattern */
    uint32_t one_cp; /* Replace: the pattern's character when it is a String of one, else 0 */
    int left, right; /* Strip */
} tok_norm;

enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};
enum tok_pre_kind {
    TOK_PRE_SPLIT,      /* Split, and Digits/Whitespace/WhitespaceSplit/Punctuation as patterns */
    TOK_PRE_BYTE_LEVEL, /* prefix space + GPT-2 regex; the byte mapping is the model's byte mode */
    TOK_PRE_METASPACE,
};
enum { TOK_PREPEND_NEVER, TOK_PREPEND_FIRST, TOK_PREPEND_ALWAYS };
typedef struct tok_pre {
    enum tok_pre_kind kind;
    tok_re re; /* Split pattern; ByteLevel: the GPT-2 pattern when use_regex */
    enum tok_split_behavior behavior;
    int invert;
    int add_prefix_space, use_regex; /* ByteLevel */
    char repl[8];                    /* Metaspace replacement, UTF-8 */
    size_t repl_len;
    int prepend; /* TOK_PREPEND_* */
    int split;   /* Metaspace */
} tok_pre;

enum tok_dec_kind {
    TOK_DEC_REPLACE,
    TOK_DEC_METASPACE,
    TOK_DEC_STRIP,
    TOK_DEC_BYTE_FALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_BYTE_LEVEL,
};
typedef struct tok_dec {
    enum tok_dec_kind kind;
    int joined; /* runs after a Fuse/ByteLevel: its input is one string arriving in chunks */
    tok_re re;  /* Replace */
    char *content;
    size_t content_len;
    char repl[8]; /* Metaspace replacement, UTF-8 */
    size_t repl_len;
    int prepend; /* Metaspace: the first token drops its replacement chars */
    uint32_t strip_cp; /* Strip */
    size_t strip_start, strip_stop;
} tok_dec;

typedef struct tok_added {
    const char *content; /* arena */
    uint32_t len;
    const char *norm; /* content through the normalizer (normalized tokens), arena */
    uint32_t norm_len;
    int32_t id;
    uint8_t single_word, lstrip, rstrip, normalized, special;
} tok_added;

/* Byte trie over added-token patterns; leftmost-longest matching, like tokenizers' Aho-Corasick. */
typedef struct tok_trie {
    int32_t *child, *sibling, *term; /* per node: first child, next sibling, added index or -1 */
    uint8_t *label;
    size_t n, cap;
    uint8_t first[256]; /* bytes that start some pattern */
    int empty;          /* no patterns */
} tok_trie;

/* ---------------------------------------------------------------- the tokenizer */
#define TOK_F_ADDED 1
#define TOK_F_SPECIAL 2

struct model_tok {
    tok_arena arena;
    int32_t n_ids;     /* one past the largest id */
    const char **piece; /* by id; NULL: no token */
    uint32_t *piece_len;
    uint8_t *flags; /* TOK_F_* */

    /* BPE model */
    tok_map vocab; /* model vocabulary */
    tok_pairs merges;
    int32_t unk_id; /* -1: none */
    int fuse_unk, byte_fallback, ignore_merges;
    const char *cont_prefix, *eow_suffix; /* NULL when absent or empty */
    size_t cont_prefix_len, eow_suffix_len;
    int32_t byte_fb_id[256]; /* "<0xNN>" ids, -1 when absent */
    int32_t cp_id[0x800];    /* char mode fast path: code point < 0x800 -> id (-2: look up) */
    int byte_mode;           /* pre-tokenizer ends in ByteLevel: pieces are raw bytes */
    int32_t byte_id[256];    /* byte mode: id of the byte's mapped char, -1 when absent */
    tok_map bvocab;          /* byte mode: token as raw bytes -> id (ignore_merges) */
    int spm_split;           /* a word may be cut before every U+2581 that follows another char */

    /* added tokens */
    tok_added *added;
    size_t n_added;
    tok_map added_map; /* content -> id */
    tok_trie raw_trie, norm_trie;
    /* Escaping (model/tok/tok_escape.c): every special token's raw content, whichever trie it is
     * matched by; the shortest such content (the escaping's growth bound), and whether a special
     * is matched after the normalizer (its literal ranges then need mapping through it).
     * esc_refusal: why the escaping cannot keep this vocabulary's specials out of text (a
     * special made of ASCII digits, which a marker could hold; a normalized special whose
     * normalizer can turn other text into it: model/tok/tok_load.c); "" when it can. */
    tok_trie spec_trie;
    uint32_t spec_min_len;
    int spec_normalized;
    int spec_json_plain; /* every special's bytes stand as they are in compact JSON (no quote,
                            backslash or control byte): a context's text can be searched raw */
    char esc_refusal[192];

    /* pipeline */
    tok_norm *norm;
    int n_norm;
    tok_pre *pre;
    int n_pre;
    tok_dec *dec;
    int n_dec;
    int has_decoder; /* no decoder: tokens joined with spaces */
    int32_t *pp_prefix, *pp_suffix; /* special ids around the sequence (add_special) */
    size_t n_prefix, n_suffix;
    char pp_desc[64]; /* the file's post-processor type, for special_note */
    char special_note[512];

    /* tokenizer_config.json */
    const char *bos_token, *eos_token, *chat_template;
    int32_t bos_id, eos_id;
    int clean_up_spaces; /* clean_up_tokenization_spaces: transformers' decode post-pass */
};

/* A byte range of an encode's text that holds a special token's string as text (an escaped
 * literal, model/tok/tok_escape.c): a special added token's match that overlaps it is skipped,
 * as tokenizers skips special tokens under encode_special_tokens (split_special_tokens), while
 * the range is pre-tokenized with the text around it. Sorted, not overlapping. */
typedef struct tok_lit {
    size_t a, b;
} tok_lit;

/* model/tok/tok_encode.c: model_tok_encode with literal ranges (lits may be NULL when nl is 0).
 * text must be valid UTF-8 when nl > 0 (the ranges are its offsets). */
int model_tok_encode_lits(const model_tok *t, const char *text, size_t len, int add_special,
                          const tok_lit *lits, size_t nl, int32_t **ids_out, size_t *n_out);
/* The longest pattern of tr that starts at s[i] (its term, -1 when none; its end in *end). */
int32_t model_tok_trie_longest(const tok_trie *tr, const char *s, size_t n, size_t i, size_t *end);

/* ---------------------------------------------------------------- per-call encode scratch */
typedef struct tok_sym {
    int32_t id, prev, next;
} tok_sym;
typedef struct tok_heap_ent {
    uint32_t rank, pos;
    int32_t id;
} tok_heap_ent;
typedef struct tok_cache {
    uint64_t *hash; /* 0: empty */
    uint32_t *key_off, *key_len, *ids_off, *ids_len;
    size_t mask, n;
    proto_buf keys;
    tok_ids ids;
    uint64_t seed; /* its hash's start, random per call (model_tok_hash_seed): a client's words
                      fill it, and a fixed start let a list made offline collide (one 576 KB
                      request: 2 s of linear probing instead of 0.07) */
} tok_cache;

typedef struct tok_work {
    const model_tok *t;
    tok_ids out;
    proto_buf text; /* piece text, used as a stack */
    proto_buf tmp;
    pcre2_match_data *md;
    tok_sym *sym;
    size_t sym_cap;
    tok_heap_ent *heap;
    size_t heap_len, heap_cap;
    tok_cache cache;
    int use_cache;
    int failed;
} tok_work;

/* model/tok/tok_pipeline.c: normalizer, pre_tokenizer, decoder, post_processor of a tokenizer.json
 * root object (a json_t *; void here to keep jansson out of this header). */
int model_tok_load_pipeline(model_tok *t, void *root, char *err, size_t errlen);
/* Sets the ids add_special puts before and after the text. 0 / -1 (OOM). */
int model_tok_set_post(model_tok *t, const int32_t *pre, size_t npre, const int32_t *suf, size_t nsuf);

/* model/tok/tok_load.c */
int model_tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t term);
void model_tok_trie_free(tok_trie *tr);

/* model/tok/tok_norm.c: runs the normalizer steps over s[0..n), result in out (replaced). */
int model_tok_normalize(const model_tok *t, const char *s, size_t n, proto_buf *out);
/* The same without Prepend steps: the text that follows a cut inside one span (an escaped
 * literal's pieces are normalized one by one to find where the literal lands). */
int model_tok_normalize_inner(const model_tok *t, const char *s, size_t n, proto_buf *out);
/* Unicode predicates tokenizers uses around added tokens (Rust's char::is_whitespace and regex \w). */
int model_tok_cp_is_space(uint32_t cp);
int model_tok_cp_is_word(uint32_t cp);

/* model/tok/tok_pretok.c: pre-tokenizes w->text[off..off+len) and BPE-encodes every piece into
 * w->out. */
int model_tok_pretokenize(tok_work *w, size_t off, size_t len, int at_origin);

/* model/tok/tok_bpe.c: BPE of one pre-tokenized piece (raw bytes in byte mode), ids into w->out. */
int model_tok_bpe(tok_work *w, const char *s, size_t n);
void model_tok_work_free(tok_work *w);

/* model/tok/tok_pretok.c */
extern const char *const model_tok_gpt2_pattern;
/* ByteLevel's byte -> char map (GPT-2's bytes_to_unicode): code point for byte b. */
uint32_t model_tok_byte_char(uint8_t b);
/* Inverse: byte for code point cp, -1 when cp is not in the map. */
int model_tok_char_byte(uint32_t cp);

#endif

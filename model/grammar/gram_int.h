/* model/grammar/gram_int.h — the compiled grammar's layout, shared by the files of
 * model/grammar/ only.
 *
 * A grammar is one flat array of elements. Rule r's alternatives follow each other from
 * rule_start[r]: each is a sequence of CHAR and REF elements ended by ALT (another alternative
 * follows) or END (the rule's last). A CHAR element matches one code point against its ranges
 * (ranges[2k], ranges[2k+1] inclusive; negated: any code point outside them). A REF element
 * stands for a rule. */
#ifndef TANDEM_MODEL_GRAM_INT_H
#define TANDEM_MODEL_GRAM_INT_H
#include "model/grammar/grammar.h"
#include <stdatomic.h>

enum { GRAM_END, GRAM_ALT, GRAM_CHAR, GRAM_REF };

typedef struct gram_elem {
    uint8_t kind;
    uint8_t neg;      /* CHAR: matches what is outside the ranges */
    int32_t a;        /* CHAR: first range pair; REF: rule id */
    int32_t b;        /* CHAR: number of range pairs */
    uint64_t ascii[2];/* CHAR: the code points 0..127 it matches, as bits */
} gram_elem;

struct model_grammar {
    atomic_int refs;
    gram_elem *el;
    int n_el;
    uint32_t *ranges; /* pairs */
    int n_ranges;
    int n_rules;
    int32_t *rule_start; /* [n_rules] */
    int32_t *alt_off;    /* [n_rules + 1]: rule r's alternatives are alts[alt_off[r]..alt_off[r+1]) */
    int32_t *alts;       /* the first element of each alternative */
    char **names;        /* [n_rules] */
    int root;
    struct gram_shared *shared; /* masks every matcher of this grammar shares (gram_match.c); NULL: none */
};

/* The shared mask cache (gram_match.c): made with the grammar, freed with it. */
struct gram_shared *gram_shared_new(void);
void gram_shared_free(struct gram_shared *s);

/* The vocabulary trie: nodes in preorder, node 0 the root (the empty prefix). Node i's subtree
 * is [i, end[i]); the tokens whose bytes end at node i are toks[tok_off[i]..tok_off[i+1]). */
struct model_gvocab {
    atomic_int refs;
    int n_vocab, words; /* words: 64-bit words of a mask */
    int n_nodes, max_depth;
    uint8_t *byte;
    uint16_t *depth;
    int32_t *end;
    int32_t *tok_off, *toks;
    uint8_t *never;     /* [n_vocab] */
    char *blob;         /* every token's bytes, token i at blob[off[i]..off[i+1]) */
    uint32_t *off;
    int32_t *eos;
    int n_eos, strip;
};

#define GRAM_MAX_TOKEN_BYTES 1024 /* longer tokens are never allowed (no real vocabulary has one) */

/* 1 when CHAR element e matches code point c. */
static inline int gram_char_match(const model_grammar *g, const gram_elem *e, uint32_t c)
{
    if (c < 128) return (int)(e->ascii[c >> 6] >> (c & 63) & 1);
    int in = 0;
    const uint32_t *r = e->b > 0 ? g->ranges + 2 * e->a : NULL; /* "[^]": no ranges at all */
    for (int i = 0; i < e->b; i++)
        if (c >= r[2 * i] && c <= r[2 * i + 1]) {
            in = 1;
            break;
        }
    return in ^ e->neg;
}

/* 1 when CHAR element e matches some code point in [lo, hi]. */
int gram_char_match_range(const model_grammar *g, const gram_elem *e, uint32_t lo, uint32_t hi);

/* The checks after parsing (gram_check.c): left recursion, a root that cannot finish. 0, or -1
 * with the message in err. */
int gram_check(const model_grammar *g, char *err, size_t errlen);
/* out[r] = 1 when rule r matches the empty text (out: n_rules bytes, zeroed by the caller). */
void gram_nullable(const model_grammar *g, uint8_t *out);

#endif

/* model/grammar/gram_ctx.c — the tokens a grammar position decides alone, precomputed once per
 * grammar and vocabulary (xgrammar's split of context-independent and context-dependent tokens,
 * in our matcher's terms).
 *
 * A stack's verdict on a token depends on the whole stack only when the token's bytes run past
 * the end of what the top of the stack can match by itself. The "key" of a stack is its top
 * position and the continuations below it down to the first one that must match a character
 * before it can end (the suffix of its alternative is not nullable): a token cannot pop past
 * that continuation without matching something there, so the key alone decides every token that
 * stays within it. Below the key lies the context (or the empty stack, when the key reaches the
 * bottom: the key then knows everything). For each key that the grammar can produce, one walk of
 * the whole vocabulary trie from the key's stack over a context node (gram_matcher.h) sorts the
 * tokens into
 *   - accepted: matched within the key (a pop into the context exactly at the token's end counts:
 *     popping into any real continuation leaves a non-empty state);
 *   - rejected: refused before the context was reached;
 *   - open: the trie nodes at which the stack first popped into the context with bytes still to
 *     come (their subtrees, the "front" nodes), which the matcher walks at run time from the real
 *     stack.
 * A state's mask is then the OR of its stacks' accepted sets plus the walks of their open
 * subtrees: inside a JSON string a stack accepts ~all tokens without a quote from a bitset and
 * walks only the subtrees after a closing quote.
 *
 * Which keys exist: a stack inside rule r sits on a continuation from CONT(r) — the position after
 * a reference to r that is not last in its alternative, or, through a reference last in its
 * alternative (a tail call: no continuation is pushed), whatever sits below the caller's stacks
 * (CONT of the caller), or the empty stack for the root. The keys are enumerated from every CHAR
 * position through CONT until the stopping continuation (or PTAB_MAX_KEY_LEN positions: a
 * shorter key is still sound, it only leaves more open).
 *
 * Bounds: PTAB_MAX_KEYS keys, PTAB_MAX_VISITS trie nodes walked in all, PTAB_MAX_BYTES of tables;
 * past a bound the remaining keys have no entry and a state with such a stack walks the whole
 * trie (the old way: the same bits, just slower). Storage is adaptive per key: the accepted
 * tokens as a list of ids when that is smaller than a bitset of the vocabulary, else the bitset. */
#include "model/grammar/gram_matcher.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PTAB_MAX_KEYS (1 << 14)
#define PTAB_MAX_KEY_LEN 16
/* trie nodes walked while building: ~30 ns each here, so ~1 s for a pathological grammar; the
 * JSON grammar takes ~3M at a 128K vocabulary */
#define PTAB_MAX_VISITS (32l << 20)
#define PTAB_MAX_BYTES ((size_t)128 << 20)
#define KEY_ROOT (-1) /* a key's last position when the empty stack lies below it */

typedef struct pentry {
    int32_t key_off, klen;
    uint32_t hash;
    int32_t n_acc;   /* accepted tokens */
    int8_t bitset;   /* accepted as a bitset (else a list of ids) */
    int64_t acc_off; /* into bits (words) or lists (ids) */
    int64_t front_off;
    int32_t n_front;
} pentry;

struct gram_ptab {
    const model_gvocab *v;
    gram_ptab *next;
    int ready;
    uint8_t *nonnull; /* [n_el] the rest of the alternative from element i must match a character */
    pentry *e;
    int n_e, cap_e;
    int32_t *keys;
    int n_keys, cap_keys;
    int32_t *ht; /* entry + 1 */
    uint32_t ht_cap;
    uint64_t *bits;
    int64_t n_bits, cap_bits;
    int32_t *lists;
    int64_t n_lists, cap_lists;
    int32_t *fronts;
    int64_t n_fronts, cap_fronts;
    long visits;
    size_t bytes;
    double build_ms;
};

static int grow64(void **p, int64_t *cap, size_t elem, int64_t need)
{
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static uint32_t key_hash(const int32_t *k, int n)
{
    uint64_t h = 0x2545f4914f6cdd1dull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = gram_mix(h ^ (uint32_t)k[i]);
    return (uint32_t)h;
}

static const pentry *lookup(const gram_ptab *t, const int32_t *k, int n, uint32_t hash)
{
    for (uint32_t h = hash & (t->ht_cap - 1);; h = (h + 1) & (t->ht_cap - 1)) {
        int32_t i = t->ht[h] - 1;
        if (i < 0) return NULL;
        const pentry *e = &t->e[i];
        if (e->hash == hash && e->klen == n && !memcmp(t->keys + e->key_off, k, sizeof *k * (size_t)n)) return e;
    }
}

/* ---------------------------------------------------------------- keys */

/* What the enumeration needs: rule of each element, CONT per rule (computed on demand). */
typedef struct kenum {
    const model_grammar *g;
    gram_ptab *t;
    int32_t *rule_of;
    int32_t **cont; /* [n_rules] positions, KEY_ROOT for the empty stack; NULL: not yet */
    int32_t *n_cont;
    int32_t *direct_off, *direct; /* per rule: continuations of its non-tail references */
    int32_t *tail_off, *tail;     /* per rule: the rules that reference it last in an alternative */
    int32_t *mark, stamp;
    int32_t *stack;
    long work;
    int32_t **out; /* keys found: out_keys[n] */
    int n_out, cap_out;
    int over;
} kenum;

/* CONT(r): DFS over tail callers, collecting their direct continuations. */
static const int32_t *cont_of(kenum *k, int r, int *n)
{
    const model_grammar *g = k->g;
    if (k->cont[r]) {
        *n = k->n_cont[r];
        return k->cont[r];
    }
    k->stamp++;
    int sp = 0, cnt = 0, cap = 16;
    int32_t *c = malloc(sizeof *c * (size_t)cap);
    if (!c) return NULL;
    k->stack[sp++] = r;
    k->mark[r] = k->stamp;
    while (sp > 0) {
        int x = k->stack[--sp];
        int extra = x == g->root;
        int need = cnt + (k->direct_off[x + 1] - k->direct_off[x]) + extra;
        if (need > cap) {
            while (cap < need) cap *= 2;
            int32_t *q = realloc(c, sizeof *c * (size_t)cap);
            if (!q) {
                free(c);
                return NULL;
            }
            c = q;
        }
        for (int i = k->direct_off[x]; i < k->direct_off[x + 1]; i++) c[cnt++] = k->direct[i];
        if (extra) c[cnt++] = KEY_ROOT;
        k->work += 1 + k->tail_off[x + 1] - k->tail_off[x];
        for (int i = k->tail_off[x]; i < k->tail_off[x + 1]; i++)
            if (k->mark[k->tail[i]] != k->stamp) {
                k->mark[k->tail[i]] = k->stamp;
                k->stack[sp++] = k->tail[i];
            }
    }
    /* unique (a continuation can come through two callers) */
    for (int i = 1; i < cnt; i++) {
        int32_t v = c[i];
        int j = i - 1;
        for (; j >= 0 && c[j] > v; j--) c[j + 1] = c[j];
        c[j + 1] = v;
        k->work += i - j;
    }
    int u = 0;
    for (int i = 0; i < cnt; i++)
        if (!u || c[i] != c[u - 1]) c[u++] = c[i];
    k->cont[r] = c;
    k->n_cont[r] = u;
    *n = u;
    return c;
}

static int emit(kenum *k, const int32_t *key, int n)
{
    if (k->n_out >= PTAB_MAX_KEYS) {
        k->over = 1;
        return -1;
    }
    if (k->n_out == k->cap_out) {
        int cap = k->cap_out ? 2 * k->cap_out : 256;
        int32_t **q = realloc(k->out, sizeof *q * (size_t)cap);
        if (!q) return -1;
        k->out = q;
        k->cap_out = cap;
    }
    int32_t *c = malloc(sizeof *c * (size_t)(n + 1));
    if (!c) return -1;
    c[0] = n;
    memcpy(c + 1, key, sizeof *key * (size_t)n);
    k->out[k->n_out++] = c;
    return 0;
}

/* Every key that starts with key[0..n) whose last position lies in rule r. */
static int extend(kenum *k, int32_t *key, int n, int r)
{
    int nc;
    const int32_t *c = cont_of(k, r, &nc);
    if (!c || ++k->work > 64l * PTAB_MAX_KEYS) return -1;
    int real = 0;
    for (int i = 0; i < nc; i++) {
        if (c[i] != KEY_ROOT) {
            real = 1;
            continue;
        }
        key[n] = KEY_ROOT;
        if (emit(k, key, n + 1)) return -1;
    }
    if (!real) return 0;
    if (n == PTAB_MAX_KEY_LEN) return emit(k, key, n);
    for (int i = 0; i < nc; i++) {
        int32_t q = c[i];
        if (q == KEY_ROOT) continue;
        key[n] = q;
        if (k->t->nonnull[q] ? emit(k, key, n + 1) : extend(k, key, n + 1, k->rule_of[q])) return -1;
    }
    return 0;
}

/* The key of the stack whose top is node id in m (the rule extend() follows), into k; its
 * length. */
static int stack_key(const gram_ptab *t, const model_gmatch *m, int32_t id, int32_t *k)
{
    int n = 0;
    k[n++] = m->nodes[id].pos;
    for (int32_t p = m->nodes[id].parent;; p = m->nodes[p].parent) {
        if (p == 0) {
            k[n++] = KEY_ROOT;
            break;
        }
        if (n == PTAB_MAX_KEY_LEN) break;
        int32_t q = m->nodes[p].pos;
        k[n++] = q;
        if (t->nonnull[q]) break;
    }
    return n;
}

static void kenum_free(kenum *k)
{
    if (k->cont)
        for (int r = 0; r < k->g->n_rules; r++) free(k->cont[r]);
    for (int i = 0; i < k->n_out; i++) free(k->out[i]);
    free(k->out);
    free(k->cont);
    free(k->n_cont);
    free(k->rule_of);
    free(k->direct_off);
    free(k->direct);
    free(k->tail_off);
    free(k->tail);
    free(k->mark);
    free(k->stack);
}

/* Fills t->nonnull and k->out with every key; 0, or -1 (too many, out of memory). */
static int enumerate(kenum *k, const model_grammar *g, gram_ptab *t)
{
    int R = g->n_rules, E = g->n_el;
    memset(k, 0, sizeof *k);
    k->g = g;
    k->t = t;
    uint8_t *nullable = calloc((size_t)R, 1);
    t->nonnull = calloc((size_t)E + 1, 1);
    k->rule_of = malloc(sizeof(int32_t) * (size_t)(E + 1));
    k->cont = calloc((size_t)R, sizeof *k->cont);
    k->n_cont = calloc((size_t)R, sizeof *k->n_cont);
    k->direct_off = calloc((size_t)R + 2, sizeof(int32_t));
    k->tail_off = calloc((size_t)R + 2, sizeof(int32_t));
    k->direct = malloc(sizeof(int32_t) * (size_t)(E + 1));
    k->tail = malloc(sizeof(int32_t) * (size_t)(E + 1));
    k->mark = calloc((size_t)R, sizeof(int32_t));
    k->stack = malloc(sizeof(int32_t) * (size_t)(R + 1));
    if (!nullable || !t->nonnull || !k->rule_of || !k->cont || !k->n_cont || !k->direct_off || !k->tail_off ||
        !k->direct || !k->tail || !k->mark || !k->stack) {
        free(nullable);
        return -1;
    }
    gram_nullable(g, nullable);
    for (int r = 0; r < R; r++) {
        int last = r + 1 < R ? g->rule_start[r + 1] : E;
        for (int i = g->rule_start[r]; i < last; i++) k->rule_of[i] = r;
    }
    for (int i = E - 1; i >= 0; i--) {
        const gram_elem *e = &g->el[i];
        if (e->kind == GRAM_END || e->kind == GRAM_ALT) t->nonnull[i] = 0;
        else t->nonnull[i] = e->kind == GRAM_CHAR || !nullable[e->a] || t->nonnull[i + 1];
    }
    free(nullable);
    /* references: counts, then offsets, then fill */
    for (int i = 0; i < E; i++) {
        if (g->el[i].kind != GRAM_REF) continue;
        int k1 = g->el[i + 1].kind, r = g->el[i].a;
        if (k1 == GRAM_END || k1 == GRAM_ALT) k->tail_off[r + 2]++;
        else k->direct_off[r + 2]++;
    }
    for (int r = 0; r < R; r++) {
        k->tail_off[r + 2] += k->tail_off[r + 1];
        k->direct_off[r + 2] += k->direct_off[r + 1];
    }
    for (int i = 0; i < E; i++) {
        if (g->el[i].kind != GRAM_REF) continue;
        int k1 = g->el[i + 1].kind, r = g->el[i].a;
        if (k1 == GRAM_END || k1 == GRAM_ALT) k->tail[k->tail_off[r + 1]++] = k->rule_of[i];
        else k->direct[k->direct_off[r + 1]++] = i + 1;
    }
    int32_t key[PTAB_MAX_KEY_LEN + 1];
    for (int i = 0; i < E; i++) {
        if (g->el[i].kind != GRAM_CHAR) continue;
        key[0] = i;
        if (extend(k, key, 1, k->rule_of[i])) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- classification */

/* One key's walk over the whole trie in the classifying matcher m; appends its entry. 0, 1 when
 * a bound stopped it (no entry), -1 on an error. */
static int classify(gram_ptab *t, model_gmatch *m, const int32_t *key, int n, uint64_t *acc)
{
    const model_gvocab *v = t->v;
    int32_t below;
    int last = n - 1;
    if (key[last] == KEY_ROOT) {
        below = 0;
        last--;
    } else {
        below = gram_node_get(m, GRAM_POS_CTX, -1);
    }
    for (int i = last; i >= 0 && below >= 0; i--) below = gram_node_get(m, key[i], below);
    if (below < 0) return -1;
    int32_t top = below;
    int32_t sid = gram_intern(m, &top, 1);
    if (sid < 0) return -1;
    memset(acc, 0, sizeof *acc * (size_t)v->words);
    int64_t front0 = t->n_fronts;
    wpos *w = m->walk;
    w[0] = (wpos){sid, 0, 0, 0};
    long visits = 0;
    for (int i = 1; i < v->n_nodes;) {
        int d = v->depth[i];
        int ok = gram_step_byte(m, &w[d - 1], v->byte[i], &w[d]);
        visits++;
        if (ok < 0) return -1;
        if (!ok) {
            i = v->end[i];
            continue;
        }
        for (int k = v->tok_off[i]; k < v->tok_off[i + 1]; k++) acc[v->toks[k] >> 6] |= 1ull << (v->toks[k] & 63);
        if (m->states[w[d].sid].ctx && v->end[i] > i + 1) {
            if (grow64((void **)&t->fronts, &t->cap_fronts, sizeof *t->fronts, t->n_fronts + 1)) return -1;
            t->fronts[t->n_fronts++] = i;
            i = v->end[i];
            continue;
        }
        i++;
    }
    t->visits += visits;
    int n_acc = 0;
    for (int i = 0; i < v->words; i++) n_acc += __builtin_popcountll(acc[i]);
    int bitset = (size_t)n_acc * sizeof(int32_t) > sizeof(uint64_t) * (size_t)v->words;
    size_t bytes = bitset ? sizeof(uint64_t) * (size_t)v->words : sizeof(int32_t) * (size_t)n_acc;
    bytes += sizeof(int32_t) * (size_t)(t->n_fronts - front0) + sizeof(pentry) + sizeof(int32_t) * (size_t)n;
    if (t->bytes + bytes > PTAB_MAX_BYTES) {
        t->n_fronts = front0;
        return 1;
    }
    pentry e = {0};
    e.n_acc = n_acc;
    e.bitset = (int8_t)bitset;
    if (bitset) {
        if (grow64((void **)&t->bits, &t->cap_bits, sizeof *t->bits, t->n_bits + v->words)) return -1;
        e.acc_off = t->n_bits;
        memcpy(t->bits + t->n_bits, acc, sizeof *acc * (size_t)v->words);
        t->n_bits += v->words;
    } else {
        if (grow64((void **)&t->lists, &t->cap_lists, sizeof *t->lists, t->n_lists + n_acc)) return -1;
        e.acc_off = t->n_lists;
        for (int wd = 0; wd < v->words; wd++)
            for (uint64_t b = acc[wd]; b; b &= b - 1) t->lists[t->n_lists++] = wd * 64 + __builtin_ctzll(b);
    }
    e.front_off = front0;
    e.n_front = (int32_t)(t->n_fronts - front0);
    if (gram_grow((void **)&t->keys, &t->cap_keys, sizeof *t->keys, t->n_keys + n) ||
        gram_grow((void **)&t->e, &t->cap_e, sizeof *t->e, t->n_e + 1))
        return -1;
    e.key_off = t->n_keys;
    e.klen = n;
    e.hash = key_hash(key, n);
    memcpy(t->keys + t->n_keys, key, sizeof *key * (size_t)n);
    t->n_keys += n;
    t->e[t->n_e++] = e;
    t->bytes += bytes;
    return 0;
}

/* ---------------------------------------------------------------- tables */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

gram_ptab *gram_ptab_build(model_grammar *g, const model_gvocab *v, gram_ptab *next)
{
    double t0 = now_ms();
    gram_ptab *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->v = v;
    t->next = next;
    kenum k;
    model_gmatch *m = NULL;
    uint64_t *acc = NULL;
    int rc = enumerate(&k, g, t);
    if (rc == 0) {
        m = gram_match_alloc(g, v);
        acc = malloc(sizeof *acc * (size_t)v->words);
        uint32_t cap = 64;
        while (cap < 2u * (uint32_t)k.n_out + 2) cap *= 2;
        t->ht = calloc(cap, sizeof *t->ht);
        t->ht_cap = cap;
        if (!m || !acc || !t->ht) rc = -1;
    }
    for (int i = 0; rc == 0 && i < k.n_out; i++) {
        if (t->visits > PTAB_MAX_VISITS) break; /* the rest walk the trie at run time */
        int r = classify(t, m, k.out[i] + 1, k.out[i][0], acc);
        if (r < 0) rc = -1;
        /* the classifying matcher's tables grow with every key; a fresh one keeps them small */
        if (rc == 0 && m->n_nodes > (1 << 20)) {
            model_gmatch_free(m);
            if (!(m = gram_match_alloc(g, v))) rc = -1;
        }
    }
    if (rc == 0) {
        for (int i = 0; i < t->n_e; i++) {
            uint32_t h = t->e[i].hash & (t->ht_cap - 1);
            while (t->ht[h]) h = (h + 1) & (t->ht_cap - 1);
            t->ht[h] = i + 1;
        }
        t->ready = 1;
    }
    kenum_free(&k);
    model_gmatch_free(m);
    free(acc);
    t->build_ms = now_ms() - t0;
    return t;
}

void gram_ptab_free(gram_ptab *t)
{
    if (!t) return;
    free(t->nonnull);
    free(t->e);
    free(t->keys);
    free(t->ht);
    free(t->bits);
    free(t->lists);
    free(t->fronts);
    free(t);
}

gram_ptab *gram_ptab_next(const gram_ptab *t)
{
    return t->next;
}

const model_gvocab *gram_ptab_vocab(const gram_ptab *t)
{
    return t->v;
}

int gram_ptab_ready(const gram_ptab *t)
{
    return t->ready;
}

int gram_ptab_mask(const gram_ptab *t, model_gmatch *m, int32_t sid, uint64_t *mask)
{
    const model_gvocab *v = m->v;
    int n = m->states[sid].len;
    if (gram_grow((void **)&m->sbuf, &m->cap_sbuf, sizeof *m->sbuf, n)) return gram_fail(m, "out of memory");
    memcpy(m->sbuf, m->sdata + m->states[sid].off, sizeof *m->sbuf * (size_t)n);
    int32_t key[PTAB_MAX_KEY_LEN + 1];
    /* every stack must have its entry before anything is walked (else the caller walks the trie) */
    for (int i = 0; i < n; i++) {
        int32_t id = m->sbuf[i];
        if (m->nodes[id].pos < 0) continue;
        int kn = stack_key(t, m, id, key);
        if (!lookup(t, key, kn, key_hash(key, kn))) return 0;
    }
    for (int i = 0; i < n; i++) {
        int32_t id = m->sbuf[i];
        if (m->nodes[id].pos < 0) continue;
        int kn = stack_key(t, m, id, key);
        const pentry *e = lookup(t, key, kn, key_hash(key, kn));
        if (e->bitset) {
            const uint64_t *b = t->bits + e->acc_off;
            for (int w = 0; w < v->words; w++) mask[w] |= b[w];
        } else if (e->n_acc) { /* (none: t->lists may be NULL, and NULL + 0 is undefined) */
            const int32_t *l = t->lists + e->acc_off;
            for (int k = 0; k < e->n_acc; k++) mask[l[k] >> 6] |= 1ull << (l[k] & 63);
        }
        if (!e->n_front) continue;
        int32_t s1 = gram_intern(m, &id, 1);
        if (s1 < 0 || gram_mask_fronts(m, s1, t->fronts + e->front_off, e->n_front, mask)) return -1;
    }
    return 1;
}

void model_grammar_prepare_stats(model_grammar *g, const model_gvocab *v, model_gprep_stats *st)
{
    memset(st, 0, sizeof *st);
    const gram_ptab *t = gram_ptab_get(g, v, 3);
    if (!t) return;
    st->keys = t->n_e;
    st->visits = t->visits;
    st->bytes = (long)t->bytes;
    st->build_ms = t->build_ms;
    for (int i = 0; i < t->n_e; i++) st->fronts += t->e[i].n_front;
}

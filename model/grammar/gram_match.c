/* model/grammar/gram_match.c — one choice's parser state and its token masks.
 *
 * Memory plan. A parser state is a set of stacks; a stack is a chain of nodes (pos, parent)
 * where pos is the grammar element to match next (a CHAR on top, a continuation below) and
 * node 0 is the empty stack (the text so far may end here). Nodes are hash-consed: one id per
 * distinct (pos, parent), so two equal stacks are one id and a state is a sorted array of ids,
 * itself interned (one id per distinct state). Everything grows in the matcher's own tables and
 * lives as long as it; the tables are bounded (MODEL_GRAMMAR_MAX_NODES nodes; the transition
 * memo and the mask cache are dropped and refilled when they pass their caps).
 *
 * Expansion: after a CHAR matches, the rest of its alternative is expanded until every stack
 * has a CHAR on top again: a REF pushes its continuation (not when the continuation is the end
 * of the alternative: a tail call, so right recursion keeps stacks flat) and starts each of the
 * rule's alternatives; the end of an alternative pops to the parent. A visited set per step
 * keeps this linear in the distinct (pos, parent) pairs; gram_check's left-recursion test
 * guarantees it ends; MODEL_GRAMMAR_MAX_EXPAND bounds it anyway.
 *
 * Sharing. Node and state ids are the matcher's own, so its mask cache serves only itself. A
 * state's mask is a function of its stacks' position chains (and the vocabulary), so masks are
 * also kept in the grammar, keyed by that canonical form (the chains, sorted), under a mutex:
 * a request that repeats a schema (the daemon caches compiled grammars by text) or the n choices
 * of one request find the masks its predecessors computed (xgrammar's point: the mask work is
 * paid once per grammar state, not once per token). */
#include "model/grammar/gram_int.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MASK_CACHE_BYTES (16u << 20) /* per matcher: ~1000 masks at a 128K vocabulary */
#define SHARED_CACHE_BYTES (64u << 20) /* per grammar: ~4000 masks at a 128K vocabulary */
#define MAX_KEY 4096                   /* int32s of a state's canonical key worth sharing */
#define MEMO_MAX (1u << 22)          /* transition memo entries before it is dropped */

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct gstate {
    int64_t off;
    int32_t len, mask;
    uint32_t hash;
    uint8_t accept; /* holds the empty stack */
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
    long steps, misses;
    int failed;
    wpos cur;
    int first, ended;
    char err[160];
    int32_t *kbuf, *kout, *koff; /* canonical key scratch */
    int cap_kbuf, cap_kout, cap_koff;
};

/* ---------------------------------------------------------------- the grammar's shared masks */

typedef struct shared_e {
    uint64_t hash;
    const void *vocab;
    int32_t *key;
    uint32_t klen;
    uint64_t *mask;
} shared_e;

struct gram_shared {
    pthread_mutex_t mu;
    shared_e *tab;
    uint32_t cap, n;
    size_t bytes;
};

struct gram_shared *gram_shared_new(void)
{
    struct gram_shared *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cap = 256;
    if (!(s->tab = calloc(s->cap, sizeof *s->tab))) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

void gram_shared_free(struct gram_shared *s)
{
    if (!s) return;
    for (uint32_t i = 0; i < s->cap; i++) {
        free(s->tab[i].key);
        free(s->tab[i].mask);
    }
    free(s->tab);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static int fail(model_gmatch *m, const char *msg)
{
    if (!m->failed) snprintf(m->err, sizeof m->err, "%s", msg);
    m->failed = 1;
    return -1;
}

static int grow(void **p, int *cap, size_t elem, int need)
{
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, elem * (size_t)c);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---------------------------------------------------------------- nodes */

static int rehash_nodes(model_gmatch *m)
{
    uint32_t cap = m->node_ht_cap ? 2 * m->node_ht_cap : 1024;
    int32_t *ht = calloc(cap, sizeof *ht);
    if (!ht) return -1;
    for (int i = 1; i < m->n_nodes; i++) {
        uint32_t h = (uint32_t)mix((uint64_t)(uint32_t)m->nodes[i].pos << 32 | (uint32_t)m->nodes[i].parent) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = i + 1;
    }
    free(m->node_ht);
    m->node_ht = ht;
    m->node_ht_cap = cap;
    return 0;
}

static int32_t node_get(model_gmatch *m, int32_t pos, int32_t parent)
{
    uint32_t h = (uint32_t)mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) & (m->node_ht_cap - 1);
    for (;; h = (h + 1) & (m->node_ht_cap - 1)) {
        int32_t id = m->node_ht[h] - 1;
        if (id < 0) break;
        if (m->nodes[id].pos == pos && m->nodes[id].parent == parent) return id;
    }
    if (m->n_nodes >= MODEL_GRAMMAR_MAX_NODES) return fail(m, "grammar: the parser's stacks passed their bound");
    if (grow((void **)&m->nodes, &m->cap_nodes, sizeof *m->nodes, m->n_nodes + 1)) return fail(m, "out of memory");
    int32_t id = m->n_nodes++;
    m->nodes[id].pos = pos;
    m->nodes[id].parent = parent;
    if ((uint32_t)m->n_nodes * 2 > m->node_ht_cap) {
        if (rehash_nodes(m)) return fail(m, "out of memory");
    } else {
        m->node_ht[h] = id + 1;
    }
    return id;
}

/* ---------------------------------------------------------------- states */

static uint32_t state_hash(const int32_t *v, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint32_t)v[i]);
    return (uint32_t)h;
}

static int rehash_states(model_gmatch *m)
{
    uint32_t cap = m->state_ht_cap ? 2 * m->state_ht_cap : 256;
    int32_t *ht = calloc(cap, sizeof *ht);
    if (!ht) return -1;
    for (int i = 0; i < m->n_states; i++) {
        uint32_t h = m->states[i].hash & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = i + 1;
    }
    free(m->state_ht);
    m->state_ht = ht;
    m->state_ht_cap = cap;
    return 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The id of the state holding the n node ids of v (sorted and deduplicated here). */
static int32_t intern(model_gmatch *m, int32_t *v, int n)
{
    if (n > 1) {
        qsort(v, (size_t)n, sizeof *v, cmp_i32);
        int k = 1;
        for (int i = 1; i < n; i++)
            if (v[i] != v[k - 1]) v[k++] = v[i];
        n = k;
    }
    uint32_t hash = state_hash(v, n), h = hash & (m->state_ht_cap - 1);
    for (;; h = (h + 1) & (m->state_ht_cap - 1)) {
        int32_t id = m->state_ht[h] - 1;
        if (id < 0) break;
        const gstate *s = &m->states[id];
        if (s->hash == hash && s->len == n && !memcmp(m->sdata + s->off, v, sizeof *v * (size_t)n)) return id;
    }
    if (m->n_sdata + n > m->cap_sdata) {
        int64_t cap = m->cap_sdata ? 2 * m->cap_sdata : 1024;
        while (cap < m->n_sdata + n) cap *= 2;
        if (cap > (int64_t)MODEL_GRAMMAR_MAX_NODES * 4) return fail(m, "grammar: the parser's states passed their bound");
        int32_t *d = realloc(m->sdata, sizeof *d * (size_t)cap);
        if (!d) return fail(m, "out of memory");
        m->sdata = d;
        m->cap_sdata = cap;
    }
    if (grow((void **)&m->states, &m->cap_states, sizeof *m->states, m->n_states + 1)) return fail(m, "out of memory");
    int32_t id = m->n_states++;
    gstate *s = &m->states[id];
    s->off = m->n_sdata;
    s->len = n;
    s->hash = hash;
    s->mask = -1;
    s->ascii = NULL;
    s->accept = n > 0 && v[0] == 0;
    memcpy(m->sdata + m->n_sdata, v, sizeof *v * (size_t)n);
    m->n_sdata += n;
    if ((uint32_t)m->n_states * 2 > m->state_ht_cap) {
        if (rehash_states(m)) return fail(m, "out of memory");
    } else {
        m->state_ht[h] = id + 1;
    }
    return id;
}

/* ---------------------------------------------------------------- expansion */

/* 1 when (pos, parent) was met before in this step; records it otherwise. */
static int seen(model_gmatch *m, int32_t pos, int32_t parent)
{
    if ((uint32_t)m->n_work * 2 + 64 > m->seen_cap || m->steps * 2 + 64 > (long)m->seen_cap) {
        /* grow (rare): rebuild empty; at worst a pair is expanded twice, which the dedup of the
         * resulting state absorbs */
        uint32_t cap = m->seen_cap ? 2 * m->seen_cap : 1024;
        uint64_t *k = calloc(cap, sizeof *k);
        uint32_t *st = calloc(cap, sizeof *st);
        if (!k || !st) {
            free(k);
            free(st);
            return 0;
        }
        free(m->seen);
        free(m->seen_stamp);
        m->seen = k;
        m->seen_stamp = st;
        m->seen_cap = cap;
    }
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    uint32_t h = (uint32_t)mix(key) & (m->seen_cap - 1);
    for (;; h = (h + 1) & (m->seen_cap - 1)) {
        if (m->seen_stamp[h] != m->stamp) break;
        if (m->seen[h] == key) return 1;
    }
    m->seen[h] = key;
    m->seen_stamp[h] = m->stamp;
    return 0;
}

static int push_work(model_gmatch *m, int32_t pos, int32_t parent)
{
    if (grow((void **)&m->work, &m->cap_work, sizeof *m->work, m->n_work + 2)) return fail(m, "out of memory");
    m->work[m->n_work++] = pos;
    m->work[m->n_work++] = parent;
    return 0;
}

static int push_out(model_gmatch *m, int32_t id)
{
    if (grow((void **)&m->out, &m->cap_out, sizeof *m->out, m->n_out + 1)) return fail(m, "out of memory");
    m->out[m->n_out++] = id;
    return 0;
}

/* Expands (pos, parent) into m->out's stacks (each with a CHAR on top, or the empty one). */
static int expand(model_gmatch *m, int32_t pos, int32_t parent)
{
    const model_grammar *g = m->g;
    if (push_work(m, pos, parent)) return -1;
    while (m->n_work > 0) {
        parent = m->work[--m->n_work];
        pos = m->work[--m->n_work];
        if (seen(m, pos, parent)) continue;
        if (++m->steps > MODEL_GRAMMAR_MAX_EXPAND) return fail(m, "grammar: too much work for one character");
        const gram_elem *e = &g->el[pos];
        if (e->kind == GRAM_CHAR) {
            int32_t id = node_get(m, pos, parent);
            if (id < 0 || push_out(m, id)) return -1;
        } else if (e->kind == GRAM_REF) {
            int k = g->el[pos + 1].kind;
            int32_t np = parent;
            if (k != GRAM_END && k != GRAM_ALT && (np = node_get(m, pos + 1, parent)) < 0) return -1;
            for (int a = g->alt_off[e->a]; a < g->alt_off[e->a + 1]; a++)
                if (push_work(m, g->alts[a], np)) return -1;
        } else if (parent == 0) {
            if (push_out(m, 0)) return -1;
        } else {
            if (push_work(m, m->nodes[parent].pos, m->nodes[parent].parent)) return -1;
        }
    }
    return 0;
}

static void step_begin(model_gmatch *m)
{
    m->n_out = 0;
    m->n_work = 0;
    m->steps = 0;
    if (++m->stamp == 0) {
        if (m->seen_stamp) memset(m->seen_stamp, 0, sizeof *m->seen_stamp * m->seen_cap);
        m->stamp = 1;
    }
}

/* ---------------------------------------------------------------- transitions */

static int memo_put(model_gmatch *m, uint64_t key, int32_t next)
{
    if ((m->memo_n + 1) * 2 > m->memo_cap) {
        uint32_t cap = m->memo_cap ? 2 * m->memo_cap : 4096;
        memo_e *t;
        if (cap > MEMO_MAX) { /* drop it all and start again */
            cap = m->memo_cap;
            memset(m->memo, 0, sizeof *m->memo * cap);
            m->memo_n = 0;
            t = m->memo;
        } else {
            t = calloc(cap, sizeof *t);
            if (!t) return 0; /* not memoized: still correct */
            for (uint32_t i = 0; i < m->memo_cap; i++) {
                if (!m->memo[i].key) continue;
                uint32_t h = (uint32_t)mix(m->memo[i].key) & (cap - 1);
                while (t[h].key) h = (h + 1) & (cap - 1);
                t[h] = m->memo[i];
            }
            free(m->memo);
        }
        m->memo = t;
        m->memo_cap = cap;
    }
    uint32_t h = (uint32_t)mix(key) & (m->memo_cap - 1);
    while (m->memo[h].key) h = (h + 1) & (m->memo_cap - 1);
    m->memo[h].key = key;
    m->memo[h].next = next;
    m->memo_n++;
    return 0;
}

/* The state after code point cp in state sid: its id, -1 when refused, -2 on an error. */
static int32_t advance(model_gmatch *m, int32_t sid, uint32_t cp)
{
    if (cp < 128 && m->states[sid].ascii && m->states[sid].ascii[cp]) return m->states[sid].ascii[cp] - 2;
    uint64_t key = (uint64_t)(uint32_t)(sid + 1) << 32 | cp;
    if (m->memo_cap) {
        uint32_t h = (uint32_t)mix(key) & (m->memo_cap - 1);
        for (; m->memo[h].key; h = (h + 1) & (m->memo_cap - 1))
            if (m->memo[h].key == key) return m->memo[h].next;
    }
    const model_grammar *g = m->g;
    step_begin(m);
    const gstate *s = &m->states[sid];
    for (int i = 0; i < s->len; i++) {
        int32_t id = m->sdata[m->states[sid].off + i];
        if (id == 0) continue;
        int32_t pos = m->nodes[id].pos;
        if (gram_char_match(g, &g->el[pos], cp) && expand(m, pos + 1, m->nodes[id].parent)) return -2;
    }
    int32_t next = m->n_out ? intern(m, m->out, m->n_out) : -1;
    if (next < -1) return -2;
    if (next == -1 && m->failed) return -2;
    if (cp < 128) {
        gstate *st = &m->states[sid];
        if (!st->ascii) st->ascii = calloc(128, sizeof *st->ascii);
        if (st->ascii) {
            st->ascii[cp] = next + 2;
            return next;
        }
    }
    memo_put(m, key, next);
    return next;
}

/* 1 when some code point in [lo, hi] can come next in state sid. */
static int possible(const model_gmatch *m, int32_t sid, uint32_t lo, uint32_t hi)
{
    const gstate *s = &m->states[sid];
    for (int i = 0; i < s->len; i++) {
        int32_t id = m->sdata[s->off + i];
        if (id && gram_char_match_range(m->g, &m->g->el[m->nodes[id].pos], lo, hi)) return 1;
    }
    return 0;
}

/* One byte from *in into *out: 1, 0 when refused, -1 on an error. */
static int step_byte(model_gmatch *m, const wpos *in, uint8_t b, wpos *out)
{
    *out = *in;
    if (in->need) {
        if ((b & 0xC0) != 0x80) return 0;
        out->cp = in->cp << 6 | (b & 0x3F);
        out->need = (int8_t)(in->need - 1);
    } else if (b < 0x80) {
        out->cp = b;
        out->need = 0;
        out->len = 1;
    } else if ((b & 0xE0) == 0xC0) {
        out->cp = b & 0x1F;
        out->need = 1;
        out->len = 2;
    } else if ((b & 0xF0) == 0xE0) {
        out->cp = b & 0x0F;
        out->need = 2;
        out->len = 3;
    } else if ((b & 0xF8) == 0xF0) {
        out->cp = b & 0x07;
        out->need = 3;
        out->len = 4;
    } else {
        return 0;
    }
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (out->need) {
        int sh = 6 * out->need;
        uint32_t lo = out->cp << sh, hi = lo | ((1u << sh) - 1);
        if (lo < min_of_len[out->len]) lo = min_of_len[out->len];
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (lo > hi) return 0;
        /* surrogates are no characters: only the parts of [lo, hi] outside D800-DFFF count */
        if (lo < 0xD800 && possible(m, in->sid, lo, hi < 0xD7FF ? hi : 0xD7FF)) return 1;
        if (hi > 0xDFFF && possible(m, in->sid, lo > 0xE000 ? lo : 0xE000, hi)) return 1;
        return 0;
    }
    if (out->cp < min_of_len[out->len] || out->cp > 0x10FFFF || (out->cp >= 0xD800 && out->cp <= 0xDFFF)) return 0;
    int32_t next = advance(m, in->sid, out->cp);
    if (next == -2) return -1;
    if (next < 0) return 0;
    out->sid = next;
    out->cp = 0;
    out->len = 0;
    return 1;
}

/* ---------------------------------------------------------------- masks */

static int popcount_mask(const uint64_t *w, int n)
{
    int c = 0;
    for (int i = 0; i < n; i++) c += __builtin_popcountll(w[i]);
    return c;
}

static int cmp_chain(const int32_t *a, const int32_t *b)
{
    if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
    for (int i = 1; i <= a[0]; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* The canonical key of state sid in m->kout: each stack as [depth, positions top to bottom],
 * the stacks sorted. 0, or -1 when it is too large to share (or memory ran out). */
static int state_key(model_gmatch *m, int32_t sid, uint32_t *klen)
{
    const gstate *s = &m->states[sid];
    int n = 0;
    if (grow((void **)&m->koff, &m->cap_koff, sizeof *m->koff, s->len + 1)) return -1;
    for (int i = 0; i < s->len; i++) {
        m->koff[i] = n;
        int start = n++;
        for (int32_t id = m->sdata[s->off + i]; id; id = m->nodes[id].parent) {
            if (n >= MAX_KEY || grow((void **)&m->kbuf, &m->cap_kbuf, sizeof *m->kbuf, n + 2)) return -1;
            m->kbuf[n++] = m->nodes[id].pos;
        }
        if (grow((void **)&m->kbuf, &m->cap_kbuf, sizeof *m->kbuf, n + 1)) return -1;
        m->kbuf[start] = n - start - 1;
    }
    /* insertion sort of the stacks (a state holds few) */
    for (int i = 1; i < s->len; i++) {
        int32_t o = m->koff[i];
        int j = i - 1;
        for (; j >= 0 && cmp_chain(m->kbuf + m->koff[j], m->kbuf + o) > 0; j--) m->koff[j + 1] = m->koff[j];
        m->koff[j + 1] = o;
    }
    if (grow((void **)&m->kout, &m->cap_kout, sizeof *m->kout, n + 1)) return -1;
    int k = 0;
    for (int i = 0; i < s->len; i++) {
        const int32_t *c = m->kbuf + m->koff[i];
        memcpy(m->kout + k, c, sizeof *c * (size_t)(c[0] + 1));
        k += c[0] + 1;
    }
    *klen = (uint32_t)k;
    return 0;
}

static uint64_t key_hash(const int32_t *k, uint32_t n)
{
    uint64_t h = 0x51ed270b27a4d3c1ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = mix(h ^ (uint32_t)k[i]);
    return h;
}

/* 1 with the mask copied into dst when the grammar has it for this vocabulary. */
static int shared_get(model_gmatch *m, const int32_t *key, uint32_t klen, uint64_t hash, uint64_t *dst)
{
    struct gram_shared *s = m->g->shared;
    int found = 0;
    pthread_mutex_lock(&s->mu);
    for (uint32_t h = (uint32_t)hash & (s->cap - 1); s->tab[h].key; h = (h + 1) & (s->cap - 1)) {
        shared_e *e = &s->tab[h];
        if (e->hash == hash && e->vocab == (const void *)m->v && e->klen == klen &&
            !memcmp(e->key, key, sizeof *key * klen)) {
            memcpy(dst, e->mask, sizeof *dst * (size_t)m->v->words);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

static void shared_put(model_gmatch *m, const int32_t *key, uint32_t klen, uint64_t hash, const uint64_t *mask)
{
    struct gram_shared *s = m->g->shared;
    size_t mbytes = sizeof *mask * (size_t)m->v->words, kbytes = sizeof *key * klen;
    pthread_mutex_lock(&s->mu);
    if (s->bytes + mbytes + kbytes > SHARED_CACHE_BYTES) goto out; /* full: later states are computed */
    if ((s->n + 1) * 2 > s->cap) {
        uint32_t cap = s->cap * 2;
        shared_e *t = calloc(cap, sizeof *t);
        if (!t) goto out;
        for (uint32_t i = 0; i < s->cap; i++) {
            if (!s->tab[i].key) continue;
            uint32_t h = (uint32_t)s->tab[i].hash & (cap - 1);
            while (t[h].key) h = (h + 1) & (cap - 1);
            t[h] = s->tab[i];
        }
        free(s->tab);
        s->tab = t;
        s->cap = cap;
    }
    uint32_t h = (uint32_t)hash & (s->cap - 1);
    for (; s->tab[h].key; h = (h + 1) & (s->cap - 1))
        if (s->tab[h].hash == hash && s->tab[h].vocab == (const void *)m->v && s->tab[h].klen == klen &&
            !memcmp(s->tab[h].key, key, kbytes))
            goto out; /* another matcher put it first */
    shared_e e = {hash, m->v, malloc(kbytes ? kbytes : 1), klen, malloc(mbytes)};
    if (!e.key || !e.mask) {
        free(e.key);
        free(e.mask);
        goto out;
    }
    memcpy(e.key, key, kbytes);
    memcpy(e.mask, mask, mbytes);
    s->tab[h] = e;
    s->n++;
    s->bytes += mbytes + kbytes;
out:
    pthread_mutex_unlock(&s->mu);
}

static int compute(model_gmatch *m, wpos start, int first, uint64_t *mask)
{
    const model_gvocab *v = m->v;
    memset(mask, 0, sizeof *mask * (size_t)v->words);
    wpos *w = m->walk;
    w[0] = start;
    m->misses++;
    for (int i = 1; i < v->n_nodes;) {
        int d = v->depth[i];
        uint8_t b = v->byte[i];
        int ok, no_text = 0;
        if (first && v->strip && d == 1 && b == ' ') {
            /* the stripped space: no text, so a token that is only this space makes no progress
             * (allowing it could lead a grammar that no token can start into a dead end) */
            w[1] = w[0];
            ok = 1;
            no_text = 1;
        } else {
            ok = step_byte(m, &w[d - 1], b, &w[d]);
        }
        if (ok < 0) return -1;
        if (!ok) {
            i = v->end[i];
            continue;
        }
        for (int k = no_text ? v->tok_off[i + 1] : v->tok_off[i]; k < v->tok_off[i + 1]; k++)
            mask[v->toks[k] >> 6] |= 1ull << (v->toks[k] & 63);
        i++;
    }
    if (!start.need && m->states[start.sid].accept)
        for (int k = 0; k < v->n_eos; k++)
            if (v->eos[k] >= 0 && v->eos[k] < v->n_vocab) mask[v->eos[k] >> 6] |= 1ull << (v->eos[k] & 63);
    return 0;
}

int model_gmatch_mask(model_gmatch *m, const uint64_t **mask, int *cached)
{
    if (cached) *cached = 0;
    if (m->failed) return -1;
    const model_gvocab *v = m->v;
    if (m->ended) {
        memset(m->scratch, 0, sizeof *m->scratch * (size_t)v->words);
        *mask = m->scratch;
        return 0;
    }
    /* Only whole-character states at a step other than the first are cached (the first step's
     * mask depends on the stripped space; a pending UTF-8 sequence is rare). */
    int cacheable = !m->cur.need && !(m->first && v->strip);
    gstate *s = &m->states[m->cur.sid];
    if (cacheable && s->mask >= 0) {
        if (cached) *cached = 1;
        *mask = m->masks + (size_t)s->mask * (size_t)v->words;
        return popcount_mask(*mask, v->words);
    }
    uint64_t *dst = m->scratch;
    if (cacheable) {
        if (m->n_masks == m->cap_masks) {
            /* full: forget every cached mask (states keep their ids) */
            for (int i = 0; i < m->n_states; i++) m->states[i].mask = -1;
            m->n_masks = 0;
        }
        dst = m->masks + (size_t)m->n_masks * (size_t)v->words;
    }
    uint32_t klen = 0;
    uint64_t hash = 0;
    int share = cacheable && m->g->shared && state_key(m, m->cur.sid, &klen) == 0;
    if (share) hash = key_hash(m->kout, klen);
    if (share && shared_get(m, m->kout, klen, hash, dst)) {
        m->states[m->cur.sid].mask = m->n_masks++;
        if (cached) *cached = 1;
        *mask = dst;
        return popcount_mask(dst, v->words);
    }
    if (compute(m, m->cur, m->first, dst)) return -1;
    if (share) shared_put(m, m->kout, klen, hash, dst);
    if (cacheable) m->states[m->cur.sid].mask = m->n_masks++;
    *mask = dst;
    return popcount_mask(dst, v->words);
}

int model_gmatch_apply(model_gmatch *m, float *logits, int n_vocab)
{
    const uint64_t *mask;
    int n = model_gmatch_mask(m, &mask, NULL);
    if (n < 0) return -1;
    int lim = n_vocab < m->v->n_vocab ? n_vocab : m->v->n_vocab;
    for (int w = 0; w * 64 < lim; w++) {
        uint64_t bits = mask[w];
        if (bits == ~0ull) continue;
        int hi = (w + 1) * 64 < lim ? (w + 1) * 64 : lim;
        for (int i = w * 64; i < hi; i++)
            if (!(bits >> (i & 63) & 1)) logits[i] = -INFINITY;
    }
    for (int i = lim; i < n_vocab; i++) logits[i] = -INFINITY;
    return n;
}

/* ---------------------------------------------------------------- feeding */

static int feed(model_gmatch *m, const char *s, size_t n, int first, wpos *w)
{
    size_t i = 0;
    if (first && m->v->strip && n && s[0] == ' ') i = 1;
    for (; i < n; i++) {
        wpos nx;
        int ok = step_byte(m, w, (uint8_t)s[i], &nx);
        if (ok <= 0) return ok < 0 ? -1 : -2;
        *w = nx;
    }
    return 0;
}

int model_gmatch_accept(model_gmatch *m, int32_t token)
{
    const model_gvocab *v = m->v;
    if (m->failed || m->ended || token < 0 || token >= v->n_vocab) return -1;
    for (int k = 0; k < v->n_eos; k++)
        if (v->eos[k] == token) {
            if (m->cur.need || !m->states[m->cur.sid].accept) return -1;
            m->ended = 1;
            return 0;
        }
    if (v->never[token]) return -1;
    wpos w = m->cur;
    if (feed(m, v->blob + v->off[token], v->off[token + 1] - v->off[token], m->first, &w)) return -1;
    m->cur = w;
    m->first = 0;
    return 0;
}

int model_gmatch_accept_bytes(model_gmatch *m, const char *s, size_t n)
{
    if (m->failed || m->ended) return -1;
    wpos w = m->cur;
    if (feed(m, s, n, 0, &w)) return -1;
    m->cur = w;
    if (n) m->first = 0;
    return 0;
}

int model_gmatch_can_end(const model_gmatch *m)
{
    return !m->failed && !m->cur.need && m->states[m->cur.sid].accept;
}

int model_gmatch_done(const model_gmatch *m)
{
    return m->ended || (model_gmatch_can_end(m) && m->states[m->cur.sid].len == 1);
}

const char *model_gmatch_error(const model_gmatch *m)
{
    return m->err;
}

void model_gmatch_stats(const model_gmatch *m, int *states, int *masks, long *misses)
{
    if (states) *states = m->n_states;
    if (masks) *masks = m->n_masks;
    if (misses) *misses = m->misses;
}

/* ---------------------------------------------------------------- life */

model_gmatch *model_gmatch_new(model_grammar *g, const model_gvocab *v)
{
    model_gmatch *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = model_grammar_ref(g);
    m->v = v;
    m->first = 1;
    m->cap_masks = (int)(MASK_CACHE_BYTES / (sizeof(uint64_t) * (size_t)v->words));
    if (m->cap_masks < 4) m->cap_masks = 4;
    m->masks = malloc(sizeof(uint64_t) * (size_t)v->words * (size_t)m->cap_masks);
    m->scratch = malloc(sizeof(uint64_t) * (size_t)v->words);
    m->walk = malloc(sizeof *m->walk * (size_t)(v->max_depth + 2));
    m->nodes = malloc(sizeof *m->nodes * 64);
    m->cap_nodes = 64;
    if (!m->masks || !m->scratch || !m->walk || !m->nodes || rehash_nodes(m) || rehash_states(m)) goto fail;
    m->nodes[0].pos = -1;
    m->nodes[0].parent = -1;
    m->n_nodes = 1;
    step_begin(m);
    for (int a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++)
        if (expand(m, g->alts[a], 0)) goto fail;
    int32_t sid = intern(m, m->out, m->n_out);
    if (sid < 0) goto fail;
    m->cur.sid = sid;
    return m;
fail:
    model_gmatch_free(m);
    return NULL;
}

void model_gmatch_free(model_gmatch *m)
{
    if (!m) return;
    model_grammar_unref(m->g);
    for (int i = 0; i < m->n_states; i++) free(m->states[i].ascii);
    free(m->nodes);
    free(m->node_ht);
    free(m->states);
    free(m->sdata);
    free(m->state_ht);
    free(m->memo);
    free(m->masks);
    free(m->scratch);
    free(m->walk);
    free(m->work);
    free(m->out);
    free(m->seen);
    free(m->seen_stamp);
    free(m->kbuf);
    free(m->kout);
    free(m->koff);
    free(m);
}

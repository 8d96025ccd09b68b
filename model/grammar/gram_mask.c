/* model/grammar/gram_mask.c — a matcher's token masks: the cache of the masks of states met
 * before, the grammar's shared cache, and the two ways to compute a new one.
 *
 * A new mask. With the grammar's per-position tables for this vocabulary (gram_ctx.c: built once,
 * bounded), each stack of the state contributes the tokens its position accepts whatever lies
 * below it (a bitset or list OR-ed in), and only the trie subtrees the tables left open (tokens
 * that leave the known part of the stack) are walked, from that stack alone. Without tables (too
 * large a grammar, a stack the tables do not know, the first step of a tokenizer that strips the
 * first space, a pending UTF-8 sequence) the whole trie is walked from the state, cutting every
 * subtree whose prefix the grammar refuses. Both give the same bits (tests/model/test_grammar.c
 * compares them over random walks).
 *
 * Sharing. Node and state ids are the matcher's own, so its mask cache serves only itself. A
 * state's mask is a function of its stacks' position chains (and the vocabulary), so masks are
 * also kept in the grammar, keyed by that canonical form (the chains, sorted), under a mutex:
 * a request that repeats a schema (the daemon caches compiled grammars by text) or the n choices
 * of one request find the masks its predecessors computed (xgrammar's point: the mask work is
 * paid once per grammar state, not once per token). */
#include "model/grammar/gram_matcher.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHARED_CACHE_BYTES (64u << 20) /* per grammar: ~4000 masks at a 128K vocabulary */
#define MAX_KEY 4096                   /* int32s of a state's canonical key worth sharing */

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
    pthread_mutex_t prep_mu;       /* held while tables are built */
    _Atomic(gram_ptab *) ptabs;    /* per vocabulary, a list; published built */
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
    pthread_mutex_init(&s->prep_mu, NULL);
    atomic_init(&s->ptabs, NULL);
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
    for (gram_ptab *t = atomic_load(&s->ptabs), *nx; t; t = nx) {
        nx = gram_ptab_next(t);
        gram_ptab_free(t);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->prep_mu);
    free(s);
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
    if (gram_grow((void **)&m->koff, &m->cap_koff, sizeof *m->koff, s->len + 1)) return -1;
    for (int i = 0; i < s->len; i++) {
        m->koff[i] = n;
        int start = n++;
        for (int32_t id = m->sdata[s->off + i]; id; id = m->nodes[id].parent) {
            if (n >= MAX_KEY || gram_grow((void **)&m->kbuf, &m->cap_kbuf, sizeof *m->kbuf, n + 2)) return -1;
            m->kbuf[n++] = m->nodes[id].pos;
        }
        if (gram_grow((void **)&m->kbuf, &m->cap_kbuf, sizeof *m->kbuf, n + 1)) return -1;
        m->kbuf[start] = n - start - 1;
    }
    /* insertion sort of the stacks (a state holds few) */
    for (int i = 1; i < s->len; i++) {
        int32_t o = m->koff[i];
        int j = i - 1;
        for (; j >= 0 && cmp_chain(m->kbuf + m->koff[j], m->kbuf + o) > 0; j--) m->koff[j + 1] = m->koff[j];
        m->koff[j + 1] = o;
    }
    if (gram_grow((void **)&m->kout, &m->cap_kout, sizeof *m->kout, n + 1)) return -1;
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
    for (uint32_t i = 0; i < n; i++) h = gram_mix(h ^ (uint32_t)k[i]);
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

int gram_mask_full(model_gmatch *m, wpos start, int first, uint64_t *mask)
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
            ok = gram_step_byte(m, &w[d - 1], b, &w[d]);
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
    return 0;
}

int gram_mask_fronts(model_gmatch *m, int32_t sid, const int32_t *front, int n, uint64_t *mask)
{
    const model_gvocab *v = m->v;
    wpos *w = m->walk;
    w[0] = (wpos){sid, 0, 0, 0};
    /* w[0..valid] follow the path to the previous front node, whose prefix is prev */
    int valid = 0;
    const char *prev = NULL;
    for (int f = 0; f < n; f++) {
        int node = front[f], d = v->depth[node];
        /* the node's prefix: the first d bytes of any token in its subtree (the first one) */
        int32_t tok = v->toks[v->tok_off[node]];
        const char *pb = v->blob + v->off[tok];
        int k = 0;
        if (prev)
            while (k < valid && k < d && pb[k] == prev[k]) k++;
        for (; k < d; k++) {
            int ok = gram_step_byte(m, &w[k], (uint8_t)pb[k], &w[k + 1]);
            if (ok < 0) return -1;
            if (!ok) break; /* cannot happen for a front node the tables found; kept safe */
        }
        prev = pb;
        valid = k;
        if (k < d) continue;
        for (int i = node + 1; i < v->end[node];) {
            int di = v->depth[i];
            int ok = gram_step_byte(m, &w[di - 1], v->byte[i], &w[di]);
            if (ok < 0) return -1;
            if (!ok) {
                i = v->end[i];
                continue;
            }
            for (int t = v->tok_off[i]; t < v->tok_off[i + 1]; t++) mask[v->toks[t] >> 6] |= 1ull << (v->toks[t] & 63);
            i++;
        }
        /* the subtree walk overwrote w[] below depth d only: the path to node stays valid */
    }
    return 0;
}

static gram_ptab *ptab_find(struct gram_shared *s, const model_gvocab *v)
{
    gram_ptab *t = atomic_load_explicit(&s->ptabs, memory_order_acquire);
    for (; t && gram_ptab_vocab(t) != v; t = gram_ptab_next(t)) {}
    return t;
}

const gram_ptab *gram_ptab_get(model_grammar *g, const model_gvocab *v, int how)
{
    struct gram_shared *s = g->shared;
    if (!s || how == MODEL_GMATCH_TABLES_OFF) return NULL;
    gram_ptab *f = ptab_find(s, v);
    if (f || how == MODEL_GMATCH_TABLES_READY) return f && gram_ptab_ready(f) ? f : NULL;
    if (how == MODEL_GMATCH_TABLES_BUILD) {
        if (pthread_mutex_trylock(&s->prep_mu)) return NULL; /* being built: walk the trie meanwhile */
    } else {
        pthread_mutex_lock(&s->prep_mu);
    }
    gram_ptab *t = atomic_load_explicit(&s->ptabs, memory_order_acquire);
    for (; t && gram_ptab_vocab(t) != v; t = gram_ptab_next(t)) {}
    if (!t) {
        /* built once; a grammar too large for tables gets an empty one (not ready): masks then
         * walk the whole trie, and the build is not tried again */
        t = gram_ptab_build(g, v, atomic_load_explicit(&s->ptabs, memory_order_relaxed));
        if (t) atomic_store_explicit(&s->ptabs, t, memory_order_release);
    }
    pthread_mutex_unlock(&s->prep_mu);
    return t && gram_ptab_ready(t) ? t : NULL;
}

void model_grammar_prepare(model_grammar *g, const model_gvocab *v)
{
    gram_ptab_get(g, v, 3);
}

int model_grammar_prepared(model_grammar *g, const model_gvocab *v)
{
    return !g->shared || ptab_find(g->shared, v) != NULL;
}

void model_gmatch_set_tables(model_gmatch *m, int how)
{
    m->tables = how;
}

/* A new mask for walk position cur into dst. */
static int compute(model_gmatch *m, wpos cur, int first, uint64_t *dst)
{
    const model_gvocab *v = m->v;
    int done = 0;
    if (!cur.need && !(first && v->strip) && m->tables != MODEL_GMATCH_TABLES_OFF) {
        const gram_ptab *t = gram_ptab_get(m->g, v, m->tables);
        if (t) {
            m->misses++;
            memset(dst, 0, sizeof *dst * (size_t)v->words);
            done = gram_ptab_mask(t, m, cur.sid, dst);
            if (done < 0) return -1;
            if (!done) m->misses--, m->fallbacks++;
        }
    }
    if (!done && gram_mask_full(m, cur, first, dst)) return -1;
    if (!cur.need && m->states[cur.sid].accept)
        for (int k = 0; k < v->n_eos; k++)
            if (v->eos[k] >= 0 && v->eos[k] < v->n_vocab) dst[v->eos[k] >> 6] |= 1ull << (v->eos[k] & 63);
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
    /* a mask is mostly whole words of 0 (refused) or of 1 (allowed): those cost a vectorized
     * fill or nothing; a mixed word visits its refused bits only */
    int full = lim / 64;
    for (int w = 0; w < full; w++) {
        uint64_t off = ~mask[w];
        float *row = logits + (size_t)w * 64;
        if (!off) continue;
        if (off == ~0ull) {
            for (int i = 0; i < 64; i++) row[i] = -INFINITY;
            continue;
        }
        for (; off; off &= off - 1) row[__builtin_ctzll(off)] = -INFINITY;
    }
    for (int i = full * 64; i < lim; i++)
        if (!(mask[i >> 6] >> (i & 63) & 1)) logits[i] = -INFINITY;
    for (int i = lim; i < n_vocab; i++) logits[i] = -INFINITY;
    return n;
}


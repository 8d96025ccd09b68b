/* model/grammar/gram_match.c — one choice's parser state: stacks, states, transitions, feeding
 * (its token masks: gram_mask.c).
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
 * guarantees it ends; MODEL_GRAMMAR_MAX_EXPAND bounds it anyway. A pop into the context node
 * (gram_matcher.h) stops there: the stack stays as that node, which no character matches. */
#include "model/grammar/gram_matcher.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMO_MAX (1u << 22)          /* transition memo entries before it is dropped */
#define MASK_CACHE_BYTES (16u << 20) /* per matcher: ~1000 masks at a 128K vocabulary */

uint64_t gram_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

int gram_fail(model_gmatch *m, const char *msg)
{
    if (!m->failed) snprintf(m->err, sizeof m->err, "%s", msg);
    m->failed = 1;
    return -1;
}

int gram_grow(void **p, int *cap, size_t elem, int need)
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
        uint32_t h = (uint32_t)gram_mix((uint64_t)(uint32_t)m->nodes[i].pos << 32 | (uint32_t)m->nodes[i].parent) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = i + 1;
    }
    free(m->node_ht);
    m->node_ht = ht;
    m->node_ht_cap = cap;
    return 0;
}

int32_t gram_node_get(model_gmatch *m, int32_t pos, int32_t parent)
{
    uint32_t h = (uint32_t)gram_mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) & (m->node_ht_cap - 1);
    for (;; h = (h + 1) & (m->node_ht_cap - 1)) {
        int32_t id = m->node_ht[h] - 1;
        if (id < 0) break;
        if (m->nodes[id].pos == pos && m->nodes[id].parent == parent) return id;
    }
    if (m->n_nodes >= MODEL_GRAMMAR_MAX_NODES) return gram_fail(m, "grammar: the parser's stacks passed their bound");
    if (gram_grow((void **)&m->nodes, &m->cap_nodes, sizeof *m->nodes, m->n_nodes + 1)) return gram_fail(m, "out of memory");
    int32_t id = m->n_nodes++;
    m->nodes[id].pos = pos;
    m->nodes[id].parent = parent;
    if ((uint32_t)m->n_nodes * 2 > m->node_ht_cap) {
        if (rehash_nodes(m)) return gram_fail(m, "out of memory");
    } else {
        m->node_ht[h] = id + 1;
    }
    return id;
}

/* ---------------------------------------------------------------- states */

static uint32_t state_hash(const int32_t *v, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = gram_mix(h ^ (uint32_t)v[i]);
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
int32_t gram_intern(model_gmatch *m, int32_t *v, int n)
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
        if (cap > (int64_t)MODEL_GRAMMAR_MAX_NODES * 4) return gram_fail(m, "grammar: the parser's states passed their bound");
        int32_t *d = realloc(m->sdata, sizeof *d * (size_t)cap);
        if (!d) return gram_fail(m, "out of memory");
        m->sdata = d;
        m->cap_sdata = cap;
    }
    if (gram_grow((void **)&m->states, &m->cap_states, sizeof *m->states, m->n_states + 1)) return gram_fail(m, "out of memory");
    int32_t id = m->n_states++;
    gstate *s = &m->states[id];
    s->off = m->n_sdata;
    s->len = n;
    s->hash = hash;
    s->mask = -1;
    s->ascii = NULL;
    s->accept = n > 0 && v[0] == 0;
    s->ctx = 0;
    for (int i = 0; i < n && !s->ctx; i++) s->ctx = v[i] > 0 && m->nodes[v[i]].pos == GRAM_POS_CTX;
    memcpy(m->sdata + m->n_sdata, v, sizeof *v * (size_t)n);
    m->n_sdata += n;
    if ((uint32_t)m->n_states * 2 > m->state_ht_cap) {
        if (rehash_states(m)) return gram_fail(m, "out of memory");
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
    uint32_t h = (uint32_t)gram_mix(key) & (m->seen_cap - 1);
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
    if (gram_grow((void **)&m->work, &m->cap_work, sizeof *m->work, m->n_work + 2)) return gram_fail(m, "out of memory");
    m->work[m->n_work++] = pos;
    m->work[m->n_work++] = parent;
    return 0;
}

static int push_out(model_gmatch *m, int32_t id)
{
    if (gram_grow((void **)&m->out, &m->cap_out, sizeof *m->out, m->n_out + 1)) return gram_fail(m, "out of memory");
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
        if (++m->steps > MODEL_GRAMMAR_MAX_EXPAND) return gram_fail(m, "grammar: too much work for one character");
        const gram_elem *e = &g->el[pos];
        if (e->kind == GRAM_CHAR) {
            int32_t id = gram_node_get(m, pos, parent);
            if (id < 0 || push_out(m, id)) return -1;
        } else if (e->kind == GRAM_REF) {
            int k = g->el[pos + 1].kind;
            int32_t np = parent;
            if (k != GRAM_END && k != GRAM_ALT && (np = gram_node_get(m, pos + 1, parent)) < 0) return -1;
            for (int a = g->alt_off[e->a]; a < g->alt_off[e->a + 1]; a++)
                if (push_work(m, g->alts[a], np)) return -1;
        } else if (parent == 0 || m->nodes[parent].pos == GRAM_POS_CTX) {
            if (push_out(m, parent)) return -1;
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
                uint32_t h = (uint32_t)gram_mix(m->memo[i].key) & (cap - 1);
                while (t[h].key) h = (h + 1) & (cap - 1);
                t[h] = m->memo[i];
            }
            free(m->memo);
        }
        m->memo = t;
        m->memo_cap = cap;
    }
    uint32_t h = (uint32_t)gram_mix(key) & (m->memo_cap - 1);
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
        uint32_t h = (uint32_t)gram_mix(key) & (m->memo_cap - 1);
        for (; m->memo[h].key; h = (h + 1) & (m->memo_cap - 1))
            if (m->memo[h].key == key) return m->memo[h].next;
    }
    const model_grammar *g = m->g;
    step_begin(m);
    const gstate *s = &m->states[sid];
    for (int i = 0; i < s->len; i++) {
        int32_t id = m->sdata[m->states[sid].off + i];
        int32_t pos = m->nodes[id].pos;
        if (pos < 0) continue; /* the empty stack, the context */
        if (gram_char_match(g, &g->el[pos], cp) && expand(m, pos + 1, m->nodes[id].parent)) return -2;
    }
    int32_t next = m->n_out ? gram_intern(m, m->out, m->n_out) : -1;
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
        if (m->nodes[id].pos >= 0 && gram_char_match_range(m->g, &m->g->el[m->nodes[id].pos], lo, hi)) return 1;
    }
    return 0;
}

/* One byte from *in into *out: 1, 0 when refused, -1 on an error. */
int gram_step_byte(model_gmatch *m, const wpos *in, uint8_t b, wpos *out)
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

/* ---------------------------------------------------------------- feeding */

static int feed(model_gmatch *m, const char *s, size_t n, int first, wpos *w)
{
    size_t i = 0;
    if (first && m->v->strip && n && s[0] == ' ') i = 1;
    for (; i < n; i++) {
        wpos nx;
        int ok = gram_step_byte(m, w, (uint8_t)s[i], &nx);
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

long model_gmatch_fallbacks(const model_gmatch *m)
{
    return m->fallbacks;
}

/* ---------------------------------------------------------------- life */

model_gmatch *gram_match_alloc(model_grammar *g, const model_gvocab *v)
{
    model_gmatch *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = model_grammar_ref(g);
    m->v = v;
    m->first = 1;
    m->scratch = malloc(sizeof(uint64_t) * (size_t)v->words);
    m->walk = malloc(sizeof *m->walk * (size_t)(v->max_depth + 2));
    m->nodes = malloc(sizeof *m->nodes * 64);
    m->cap_nodes = 64;
    if (!m->scratch || !m->walk || !m->nodes || rehash_nodes(m) || rehash_states(m)) {
        model_gmatch_free(m);
        return NULL;
    }
    m->nodes[0].pos = -1;
    m->nodes[0].parent = -1;
    m->n_nodes = 1;
    return m;
}

model_gmatch *model_gmatch_new(model_grammar *g, const model_gvocab *v)
{
    return model_gmatch_new_why(g, v, NULL, 0);
}

model_gmatch *model_gmatch_new_why(model_grammar *g, const model_gvocab *v, char *why,
                                   size_t whylen)
{
    if (why && whylen) snprintf(why, whylen, "out of memory");
    model_gmatch *m = gram_match_alloc(g, v);
    if (!m) return NULL;
    m->tables = MODEL_GMATCH_TABLES_BUILD;
    m->cap_masks = (int)(MASK_CACHE_BYTES / (sizeof(uint64_t) * (size_t)v->words));
    if (m->cap_masks < 4) m->cap_masks = 4;
    m->masks = malloc(sizeof(uint64_t) * (size_t)v->words * (size_t)m->cap_masks);
    if (!m->masks) goto fail;
    step_begin(m);
    for (int a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++)
        if (expand(m, g->alts[a], 0)) goto fail;
    int32_t sid = gram_intern(m, m->out, m->n_out);
    if (sid < 0) goto fail;
    m->cur.sid = sid;
    return m;
fail:
    if (why && whylen && m->failed) snprintf(why, whylen, "%s", m->err);
    model_gmatch_free(m);
    return NULL;
}

void model_gmatch_keep_first_space(model_gmatch *m)
{
    m->first = 0; /* the first token is fed and masked like any later one */
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
    free(m->sbuf);
    free(m);
}

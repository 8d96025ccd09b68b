/* model/tok/tok_util.c — containers for the tokenizer (see model/tok/tok_internal.h). */
#include "model/tok/tok_internal.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---------------------------------------------------------------- id vectors */
int model_tok_ids_put(tok_ids *v, const int32_t *ids, size_t n)
{
    if (n > (SIZE_MAX / sizeof(int32_t)) / 4 - v->len) return -1;
    if (v->len + n > v->cap) {
        size_t cap = v->cap ? v->cap : 64;
        while (cap < v->len + n) cap *= 2;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    if (n) memcpy(v->p + v->len, ids, n * sizeof *ids);
    v->len += n;
    return 0;
}

void model_tok_ids_free(tok_ids *v)
{
    free(v->p);
    v->p = NULL;
    v->len = v->cap = 0;
}

/* ---------------------------------------------------------------- arena */
struct tok_arena_block {
    struct tok_arena_block *next;
    size_t used, cap;
    char data[];
};

char *model_tok_arena_dup(tok_arena *a, const char *s, size_t n)
{
    if (n > TOK_MAX_FILE_BYTES) return NULL;
    struct tok_arena_block *b = a->head;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20); /* 1 MiB blocks: few mallocs */
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    char *p = b->data + b->used;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    b->used += n + 1;
    return p;
}

void model_tok_arena_free(tok_arena *a)
{
    for (struct tok_arena_block *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    a->head = NULL;
}

/* ---------------------------------------------------------------- hashing */
static inline uint64_t mix64(uint64_t x)
{
    /* splitmix64's finalizer: cheap and good enough for open addressing */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

uint64_t model_tok_hash(const void *p, size_t n)
{
    return model_tok_hash_from(0x243F6A8885A308D3ull, p, n);
}

uint64_t model_tok_hash_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        struct timespec ts; /* early boot: still varies by call and process */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)&s);
    }
    return s;
}

uint64_t model_tok_hash_from(uint64_t seed, const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = seed ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = mix64(h ^ v);
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    return mix64(h ^ v ^ 0x9E3779B97F4A7C15ull);
}

/* ---------------------------------------------------------------- string map */
int model_tok_map_init(tok_map *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    if (expected > TOK_MAX_VOCAB * 2u) return -1;
    size_t slots = 16;
    while (slots < expected * 2 + 2) slots *= 2; /* load factor <= 1/2 */
    m->slot = calloc(slots, sizeof *m->slot);
    m->cap = expected + 1;
    m->key = malloc(m->cap * sizeof *m->key);
    m->klen = malloc(m->cap * sizeof *m->klen);
    m->val = malloc(m->cap * sizeof *m->val);
    if (!m->slot || !m->key || !m->klen || !m->val) {
        model_tok_map_free(m);
        return -1;
    }
    m->mask = slots - 1;
    return 0;
}

int model_tok_map_put(tok_map *m, const char *key, size_t klen, int32_t val)
{
    if (klen > UINT32_MAX) return -1;
    for (size_t i = model_tok_hash(key, klen) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t e = m->slot[i];
        if (!e) {
            if (m->n >= m->cap) return -1;
            m->key[m->n] = key;
            m->klen[m->n] = (uint32_t)klen;
            m->val[m->n] = val;
            m->slot[i] = (uint32_t)++m->n;
            return 0;
        }
        e--;
        if (m->klen[e] == klen && memcmp(m->key[e], key, klen) == 0) {
            m->val[e] = val;
            return 0;
        }
    }
}

int32_t model_tok_map_get(const tok_map *m, const char *key, size_t klen)
{
    if (!m->slot) return -1;
    for (size_t i = model_tok_hash(key, klen) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t e = m->slot[i];
        if (!e) return -1;
        e--;
        if (m->klen[e] == klen && memcmp(m->key[e], key, klen) == 0) return m->val[e];
    }
}

void model_tok_map_free(tok_map *m)
{
    free(m->slot);
    free(m->key);
    free(m->klen);
    free(m->val);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- pair map */
int model_tok_pairs_init(tok_pairs *p, size_t expected)
{
    memset(p, 0, sizeof *p);
    if (expected > TOK_MAX_MERGES) return -1;
    size_t slots = 16;
    while (slots < expected * 2 + 2) slots *= 2;
    p->key = calloc(slots, sizeof *p->key);
    p->rank = malloc(slots * sizeof *p->rank);
    p->merged = malloc(slots * sizeof *p->merged);
    if (!p->key || !p->rank || !p->merged) {
        model_tok_pairs_free(p);
        return -1;
    }
    p->mask = slots - 1;
    return 0;
}

/* A pair listed twice keeps its last rank: tokenizers collects the merges into a hash map, where
 * the later entry overwrites the earlier. */
int model_tok_pairs_put(tok_pairs *p, int32_t a, int32_t b, uint32_t rank, int32_t merged)
{
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (size_t i = (size_t)model_tok_pair_hash(k) & p->mask;; i = (i + 1) & p->mask) {
        if (p->key[i] == 0 || p->key[i] == k) {
            if (p->key[i] == 0) {
                if (p->n + 1 > (p->mask + 1) / 2) return -1;
                p->n++;
            }
            p->key[i] = k;
            p->rank[i] = rank;
            p->merged[i] = merged;
            return 0;
        }
    }
}

void model_tok_pairs_free(tok_pairs *p)
{
    free(p->key);
    free(p->rank);
    free(p->merged);
    memset(p, 0, sizeof *p);
}

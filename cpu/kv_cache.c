/* cpu/kv_cache.c — the CPU device's block pool and block tables (see kv_cache.h). */
#include "cpu/kv_cache.h"
#include <stdlib.h>
#include <string.h>

int cpu_kv_pool_init(cpu_kv_pool *p, int n_layers, int kv_dim)
{
    memset(p, 0, sizeof *p);
    p->n_layers = n_layers;
    p->kv_dim = kv_dim;
    p->block_floats = (size_t)n_layers * CPU_KV_BLOCK * kv_dim;
    p->run_floats = (size_t)CPU_KV_BLOCK * kv_dim;
    return pthread_mutex_init(&p->mu, NULL) ? -1 : 0;
}

void cpu_kv_pool_deinit(cpu_kv_pool *p)
{
    free(p->k_arena);
    free(p->v_arena);
    free(p->k);
    free(p->v);
    free(p->ref);
    free(p->free_ids);
    pthread_mutex_destroy(&p->mu);
    memset(p, 0, sizeof *p);
}

int cpu_kv_pool_in_use(cpu_kv_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->in_use;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Under the lock: an id with fresh storage and reference 1, or -1. */
/* Under the lock: the arenas grown to hold cap ids per layer. Each layer's region is copied to
 * its place in the new arenas, and every id's pointer moves with it. */
static int grow_arenas(cpu_kv_pool *p, int cap)
{
    size_t lf = (size_t)cap * p->run_floats, bytes = lf * (size_t)p->n_layers * sizeof(float);
    bytes = (bytes + 4095) / 4096 * 4096; /* aligned_alloc wants a multiple of the alignment */
    float *k = aligned_alloc(4096, bytes), *v = k ? aligned_alloc(4096, bytes) : NULL;
    float **kp = v ? realloc(p->k, cap * sizeof *kp) : NULL;
    if (kp) p->k = kp;
    float **vp = kp ? realloc(p->v, cap * sizeof *vp) : NULL;
    if (vp) p->v = vp;
    int32_t *r = vp ? realloc(p->ref, cap * sizeof *r) : NULL;
    if (r) p->ref = r;
    int32_t *f = r ? realloc(p->free_ids, cap * sizeof *f) : NULL;
    if (!f) {
        free(k);
        free(v);
        return -1;
    }
    p->free_ids = f;
    size_t used = (size_t)p->n_ids * p->run_floats;
    for (int l = 0; l < p->n_layers && used; l++) {
        memcpy(k + l * lf, p->k_arena + l * p->layer_floats, used * sizeof(float));
        memcpy(v + l * lf, p->v_arena + l * p->layer_floats, used * sizeof(float));
    }
    free(p->k_arena);
    free(p->v_arena);
    p->k_arena = k;
    p->v_arena = v;
    p->layer_floats = lf;
    p->cap = cap;
    for (int id = 0; id < cap; id++) {
        p->k[id] = k + (size_t)id * p->run_floats;
        p->v[id] = v + (size_t)id * p->run_floats;
    }
    return 0;
}

/* Under the lock: an id with reference 1, or -1. */
static int32_t block_new(cpu_kv_pool *p)
{
    if (!p->n_free && p->n_ids == p->cap && grow_arenas(p, p->cap ? p->cap * 2 : 64) < 0) return -1;
    int32_t id = p->n_free ? p->free_ids[--p->n_free] : p->n_ids++;
    p->ref[id] = 1;
    p->in_use++;
    return id;
}

/* Under the lock. */
static void block_unref(cpu_kv_pool *p, int32_t id)
{
    if (--p->ref[id] > 0) return;
    p->free_ids[p->n_free++] = id;
    p->in_use--;
}

static int blocks_for(int capacity)
{
    return (capacity + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK;
}

/* Entries [from, t->n) fresh; on failure everything the table holds is released. */
static int fill_fresh(cpu_kv_pool *p, cpu_kv_table *t, int from)
{
    pthread_mutex_lock(&p->mu);
    int i = from;
    for (; i < t->n; i++)
        if ((t->blocks[i] = block_new(p)) < 0) break;
    if (i < t->n)
        for (int j = 0; j < i; j++) block_unref(p, t->blocks[j]);
    pthread_mutex_unlock(&p->mu);
    if (i == t->n) return 0;
    free(t->blocks);
    t->blocks = NULL;
    t->n = 0;
    return -1;
}

int cpu_kv_table_new(cpu_kv_pool *p, int capacity, cpu_kv_table *t)
{
    t->n = blocks_for(capacity);
    t->blocks = malloc((t->n ? t->n : 1) * sizeof *t->blocks);
    if (!t->blocks) return -1;
    return fill_fresh(p, t, 0);
}

int cpu_kv_table_fork(cpu_kv_pool *p, const cpu_kv_table *src, int n_tokens, int capacity,
                      cpu_kv_table *t)
{
    int shared = blocks_for(n_tokens);
    t->n = blocks_for(capacity);
    if (shared > t->n || shared > src->n) return -1;
    t->blocks = malloc((t->n ? t->n : 1) * sizeof *t->blocks);
    if (!t->blocks) return -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < shared; i++) {
        t->blocks[i] = src->blocks[i];
        p->ref[src->blocks[i]]++;
    }
    pthread_mutex_unlock(&p->mu);
    return fill_fresh(p, t, shared);
}

void cpu_kv_table_free(cpu_kv_pool *p, cpu_kv_table *t)
{
    pthread_mutex_lock(&p->mu);
    /* last block first: the free list is a stack, so the next table gets these ids back in
     * ascending order, its positions in ascending addresses of each layer's arena */
    for (int i = t->n - 1; i >= 0; i--) block_unref(p, t->blocks[i]);
    pthread_mutex_unlock(&p->mu);
    free(t->blocks);
    t->blocks = NULL;
    t->n = 0;
}

int cpu_kv_table_writable(cpu_kv_pool *p, cpu_kv_table *t, int pos0, int n)
{
    if (n <= 0) return 0;
    int st = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = pos0 / CPU_KV_BLOCK; i <= (pos0 + n - 1) / CPU_KV_BLOCK && i < t->n; i++) {
        int32_t old = t->blocks[i];
        if (p->ref[old] == 1) continue;
        int32_t id = block_new(p);
        if (id < 0) {
            st = -1;
            break;
        }
        /* the whole block, every layer: rows past the shared length are not read, but copying
         * them keeps this one memcpy */
        for (int l = 0; l < p->n_layers; l++) {
            memcpy(p->k[id] + l * p->layer_floats, p->k[old] + l * p->layer_floats, p->run_floats * sizeof(float));
            memcpy(p->v[id] + l * p->layer_floats, p->v[old] + l * p->layer_floats, p->run_floats * sizeof(float));
        }
        block_unref(p, old);
        t->blocks[i] = id;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* cpu/kv_cache.c — the CPU device's block pool and block tables (see kv_cache.h). */
#include "cpu/kv_cache.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The most address space one arena reserves (32 TiB, a quarter of x86-64's user half): a budget
 * past it takes the arenas that grow by copying. */
#define ARENA_RESERVE_MAX ((size_t)1 << 45)

static void free_arenas(cpu_kv_pool *p);

/* The arenas of max_ids blocks reserved as address space (no memory until a page is written):
 * they never move, and growing takes no copy. Only a budget the machine's memory holds is
 * reserved: unreserved, an allocation past memory is refused (ACCEL_ERR_NOMEM), where a page
 * written past it in a reservation would end the process. 0, or -1 (a budget larger than
 * physical memory or than ARENA_RESERVE_MAX, or an mmap refused, e.g. under strict overcommit
 * or an address-space limit): the arenas then grow by copying. */
static int reserve_arenas(cpu_kv_pool *p)
{
    if (!p->run_floats || !p->n_layers) return -1;
    size_t per_id = p->run_floats * (size_t)p->n_layers * sizeof(float);
    if ((size_t)p->max_ids > ARENA_RESERVE_MAX / per_id) return -1;
    size_t bytes = ((size_t)p->max_ids * per_id + 4095) / 4096 * 4096;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    /* K and V together within physical memory */
    if (pages <= 0 || page <= 0 || bytes > (size_t)pages * (size_t)page / 2) return -1;
    void *k = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (k == MAP_FAILED) return -1;
    void *v = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (v == MAP_FAILED) {
        munmap(k, bytes);
        return -1;
    }
    p->k_arena = k;
    p->v_arena = v;
    p->reserved = bytes;
    p->layer_floats = (size_t)p->max_ids * p->run_floats;
    return 0;
}

int cpu_kv_pool_init(cpu_kv_pool *p, int n_layers, int kv_dim, int max_ids, int reserve)
{
    memset(p, 0, sizeof *p);
    p->n_layers = n_layers;
    p->kv_dim = kv_dim;
    p->max_ids = max_ids > 0 ? max_ids : 1;
    p->block_floats = (size_t)n_layers * CPU_KV_BLOCK * kv_dim;
    p->run_floats = (size_t)CPU_KV_BLOCK * kv_dim;
    if (reserve) reserve_arenas(p); /* or they grow by copying */
    if (pthread_mutex_init(&p->mu, NULL) == 0) return 0;
    free_arenas(p);
    return -1;
}

static void free_arenas(cpu_kv_pool *p)
{
    if (p->reserved) {
        munmap(p->k_arena, p->reserved);
        munmap(p->v_arena, p->reserved);
    } else {
        free(p->k_arena);
        free(p->v_arena);
    }
    p->k_arena = p->v_arena = NULL;
    p->reserved = 0;
}

void cpu_kv_pool_deinit(cpu_kv_pool *p)
{
    free_arenas(p);
    free(p->k);
    free(p->v);
    free(p->ref);
    free(p->hold);
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

void cpu_kv_pool_usage(cpu_kv_pool *p, int *total, int *used, int *cached)
{
    pthread_mutex_lock(&p->mu);
    *total = p->max_ids;
    *used = p->in_use;
    *cached = p->cached;
    pthread_mutex_unlock(&p->mu);
}

/* Under the lock: the pool grown to hold cap ids. Reserved arenas (reserve_arenas) stay where
 * they are: only the per-id arrays grow. Otherwise each layer's region is copied to its place in
 * new arenas, and every id's pointer moves with it. */
static int grow_arenas(cpu_kv_pool *p, int cap)
{
    size_t lf = p->reserved ? p->layer_floats : (size_t)cap * p->run_floats;
    float *k = p->k_arena, *v = p->v_arena;
    if (!p->reserved) {
        size_t bytes = lf * (size_t)p->n_layers * sizeof(float);
        bytes = (bytes + 4095) / 4096 * 4096; /* aligned_alloc wants a multiple of the alignment */
        k = aligned_alloc(4096, bytes);
        v = k ? aligned_alloc(4096, bytes) : NULL;
        if (!v) {
            free(k);
            return -1;
        }
    }
    float **kp = realloc(p->k, cap * sizeof *kp);
    if (kp) p->k = kp;
    float **vp = kp ? realloc(p->v, cap * sizeof *vp) : NULL;
    if (vp) p->v = vp;
    int32_t *r = vp ? realloc(p->ref, cap * sizeof *r) : NULL;
    if (r) p->ref = r;
    int32_t *h = r ? realloc(p->hold, cap * sizeof *h) : NULL;
    if (h) p->hold = h;
    int32_t *f = h ? realloc(p->free_ids, cap * sizeof *f) : NULL;
    if (!f) {
        if (!p->reserved) {
            free(k);
            free(v);
        }
        return -1;
    }
    p->free_ids = f;
    if (!p->reserved) {
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
    }
    p->cap = cap;
    for (int id = 0; id < cap; id++) {
        p->k[id] = k + (size_t)id * p->run_floats;
        p->v[id] = v + (size_t)id * p->run_floats;
    }
    return 0;
}

/* Under the lock: is id counted as cached (referenced, by holders only)? */
static int is_cached(const cpu_kv_pool *p, int32_t id)
{
    return p->ref[id] > 0 && p->ref[id] == p->hold[id];
}

/* Under the lock: an id with reference 1 (not a holder's), or -1 at the budget or out of
 * memory. */
static int32_t block_new(cpu_kv_pool *p)
{
    if (p->in_use >= p->max_ids) return -1;
    if (!p->n_free && p->n_ids == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        if (cap > p->max_ids) cap = p->max_ids;
        if (cap <= p->cap || grow_arenas(p, cap) < 0) return -1;
    }
    int32_t id = p->n_free ? p->free_ids[--p->n_free] : p->n_ids++;
    p->ref[id] = 1;
    p->hold[id] = 0;
    p->in_use++;
    return id;
}

/* Under the lock: one more reference (a holder's when holder). */
static void block_ref(cpu_kv_pool *p, int32_t id, int holder)
{
    p->cached -= is_cached(p, id);
    p->ref[id]++;
    p->hold[id] += holder;
    p->cached += is_cached(p, id);
}

/* Under the lock. */
static void block_unref(cpu_kv_pool *p, int32_t id, int holder)
{
    p->cached -= is_cached(p, id);
    p->hold[id] -= holder;
    if (--p->ref[id] > 0) {
        p->cached += is_cached(p, id);
        return;
    }
    p->free_ids[p->n_free++] = id;
    p->in_use--;
}

static int blocks_for(int capacity)
{
    return (capacity + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK;
}

int cpu_kv_table_new(cpu_kv_pool *p, int capacity, cpu_kv_table *t)
{
    (void)p;
    t->n = 0;
    t->holder = 0;
    t->max_n = blocks_for(capacity);
    t->blocks = malloc((t->max_n ? t->max_n : 1) * sizeof *t->blocks);
    return t->blocks ? 0 : -1;
}

int cpu_kv_table_fork(cpu_kv_pool *p, const cpu_kv_table *src, int n_tokens, int capacity,
                      cpu_kv_table *t)
{
    int shared = blocks_for(n_tokens);
    if (shared > blocks_for(capacity) || shared > src->n) return -1;
    if (cpu_kv_table_new(p, capacity, t)) return -1;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < shared; i++) {
        t->blocks[i] = src->blocks[i];
        block_ref(p, src->blocks[i], 0);
    }
    pthread_mutex_unlock(&p->mu);
    t->n = shared;
    return 0;
}

void cpu_kv_table_free(cpu_kv_pool *p, cpu_kv_table *t)
{
    pthread_mutex_lock(&p->mu);
    /* last block first: the free list is a stack, so the next table gets these ids back in
     * ascending order, its positions in ascending addresses of each layer's arena */
    for (int i = t->n - 1; i >= 0; i--) block_unref(p, t->blocks[i], t->holder);
    pthread_mutex_unlock(&p->mu);
    free(t->blocks);
    t->blocks = NULL;
    t->n = t->max_n = 0;
}

void cpu_kv_table_hold(cpu_kv_pool *p, cpu_kv_table *t)
{
    if (t->holder) return;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < t->n; i++) {
        int32_t id = t->blocks[i];
        p->cached -= is_cached(p, id);
        p->hold[id]++;
        p->cached += is_cached(p, id);
    }
    t->holder = 1;
    pthread_mutex_unlock(&p->mu);
}

void cpu_kv_table_shrink(cpu_kv_pool *p, cpu_kv_table *t, int len)
{
    int keep = blocks_for(len);
    pthread_mutex_lock(&p->mu);
    while (t->n > keep) block_unref(p, t->blocks[--t->n], t->holder);
    pthread_mutex_unlock(&p->mu);
}

/* Under the lock: block id's rows, every layer, copied into block dst. */
static void copy_block(cpu_kv_pool *p, int32_t dst, int32_t src)
{
    for (int l = 0; l < p->n_layers; l++) {
        memcpy(p->k[dst] + l * p->layer_floats, p->k[src] + l * p->layer_floats,
               p->run_floats * sizeof(float));
        memcpy(p->v[dst] + l * p->layer_floats, p->v[src] + l * p->layer_floats,
               p->run_floats * sizeof(float));
    }
}

int cpu_kv_table_prepare(cpu_kv_pool *p, cpu_kv_table *t, int pos0, int n)
{
    if (n <= 0) return 0;
    int need = blocks_for(pos0 + n), first = pos0 / CPU_KV_BLOCK;
    if (need > t->max_n || first > t->n) return -1;
    int32_t copies_s[64], olds_s[64], *copies = copies_s, *olds = olds_s;
    int span = (need < t->n ? need : t->n) - first;
    if (span > 64) {
        copies = malloc(2 * (size_t)span * sizeof *copies);
        if (!copies) return -1;
        olds = copies + span;
    }
    int n_copy = 0, n0 = t->n, st = 0;
    pthread_mutex_lock(&p->mu);
    /* shared blocks the write falls in: a private copy each (taken before the table changes,
     * so that a failure leaves it as it was) */
    for (int i = first; i < n0 && i < need; i++) {
        int32_t old = t->blocks[i];
        if (p->ref[old] == 1) continue;
        int32_t id = block_new(p);
        if (id < 0) {
            st = -1;
            break;
        }
        copy_block(p, id, old); /* rows past the shared length are copied too: one memcpy */
        copies[n_copy] = id;
        olds[n_copy++] = i;
    }
    while (!st && t->n < need) {
        int32_t id = block_new(p);
        if (id < 0) st = -1;
        else t->blocks[t->n++] = id;
    }
    if (st) {
        while (t->n > n0) block_unref(p, t->blocks[--t->n], 0);
        for (int c = 0; c < n_copy; c++) block_unref(p, copies[c], 0);
    } else {
        for (int c = 0; c < n_copy; c++) {
            block_unref(p, t->blocks[olds[c]], t->holder);
            t->blocks[olds[c]] = copies[c];
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (copies != copies_s) free(copies);
    return st;
}

size_t cpu_kv_block_floats(const cpu_kv_pool *p)
{
    return p->block_floats;
}

void cpu_kv_block_save(const cpu_kv_pool *p, const cpu_kv_table *t, int i, float *dst)
{
    int32_t id = t->blocks[i];
    for (int l = 0; l < p->n_layers; l++) {
        memcpy(dst + l * p->run_floats, p->k[id] + l * p->layer_floats, p->run_floats * sizeof(float));
        memcpy(dst + p->block_floats + l * p->run_floats, p->v[id] + l * p->layer_floats,
               p->run_floats * sizeof(float));
    }
}

void cpu_kv_block_load(cpu_kv_pool *p, cpu_kv_table *t, int i, const float *src)
{
    int32_t id = t->blocks[i];
    for (int l = 0; l < p->n_layers; l++) {
        memcpy(p->k[id] + l * p->layer_floats, src + l * p->run_floats, p->run_floats * sizeof(float));
        memcpy(p->v[id] + l * p->layer_floats, src + p->block_floats + l * p->run_floats,
               p->run_floats * sizeof(float));
    }
}

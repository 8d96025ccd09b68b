/* fpga/kv_pool.c — the card's KV block ids (see kv_pool.h). */
#include "fpga/kv_pool.h"
#include <stdlib.h>
#include <string.h>

int fpga_kv_pool_init(fpga_kv_pool *p, int n_blocks, int group)
{
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0 || group <= 0) return -1;
    p->ref = calloc((size_t)n_blocks, sizeof *p->ref);
    p->href = calloc((size_t)n_blocks, sizeof *p->href);
    if (!p->ref || !p->href || pthread_mutex_init(&p->mu, NULL)) {
        free(p->ref);
        free(p->href);
        memset(p, 0, sizeof *p);
        return -1;
    }
    p->n_blocks = n_blocks;
    p->group = group;
    return 0;
}

void fpga_kv_pool_deinit(fpga_kv_pool *p)
{
    if (!p->ref) return;
    free(p->ref);
    free(p->href);
    pthread_mutex_destroy(&p->mu);
    memset(p, 0, sizeof *p);
}

void fpga_kv_pool_usage(fpga_kv_pool *p, int *total, int *used, int *cached)
{
    pthread_mutex_lock(&p->mu);
    *total = p->n_blocks;
    *used = p->used;
    *cached = p->cached;
    pthread_mutex_unlock(&p->mu);
}

int fpga_kv_pool_free_count(fpga_kv_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->n_blocks - p->used;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Under the lock: one reference more (holder or not), the counts kept. */
static void ref1(fpga_kv_pool *p, uint32_t id, int holder)
{
    int was_cached = p->ref[id] > 0 && p->ref[id] == p->href[id];
    if (p->ref[id]++ == 0) p->used++;
    if (holder) p->href[id]++;
    int is_cached = p->ref[id] == p->href[id];
    p->cached += is_cached - was_cached;
}

static void unref1(fpga_kv_pool *p, uint32_t id, int holder)
{
    if (p->ref[id] <= 0) return; /* a bug in the caller; never go negative */
    int was_cached = p->ref[id] == p->href[id];
    if (holder && p->href[id] > 0) p->href[id]--;
    if (--p->ref[id] == 0) {
        p->used--;
        if (id < (uint32_t)p->lowest) p->lowest = (int)id;
    }
    int is_cached = p->ref[id] > 0 && p->ref[id] == p->href[id];
    p->cached += is_cached - was_cached;
}

int fpga_kv_pool_take(fpga_kv_pool *p, int n, uint32_t *out)
{
    if (n <= 0) return 0;
    pthread_mutex_lock(&p->mu);
    if (p->n_blocks - p->used < n) {
        pthread_mutex_unlock(&p->mu);
        return -1;
    }
    int k = 0;
    for (int id = p->lowest; id < p->n_blocks && k < n; id++)
        if (!p->ref[id]) {
            ref1(p, (uint32_t)id, 0);
            out[k++] = (uint32_t)id;
        }
    while (p->lowest < p->n_blocks && p->ref[p->lowest]) p->lowest++;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void fpga_kv_pool_ref(fpga_kv_pool *p, const uint32_t *ids, int n, int holder)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < n; i++) ref1(p, ids[i], holder);
    pthread_mutex_unlock(&p->mu);
}

void fpga_kv_pool_unref(fpga_kv_pool *p, const uint32_t *ids, int n, int holder)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < n; i++) unref1(p, ids[i], holder);
    pthread_mutex_unlock(&p->mu);
}

void fpga_kv_pool_hold(fpga_kv_pool *p, const uint32_t *ids, int n)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < n; i++) {
        uint32_t id = ids[i];
        int was_cached = p->ref[id] > 0 && p->ref[id] == p->href[id];
        p->href[id]++;
        int is_cached = p->ref[id] == p->href[id];
        p->cached += is_cached - was_cached;
    }
    pthread_mutex_unlock(&p->mu);
}

int fpga_kv_pool_shared(fpga_kv_pool *p, uint32_t id)
{
    pthread_mutex_lock(&p->mu);
    int s = p->ref[id] > 1;
    pthread_mutex_unlock(&p->mu);
    return s;
}

int fpga_kv_pool_take_supers(fpga_kv_pool *p, int k)
{
    if (k <= 0) return -1;
    pthread_mutex_lock(&p->mu);
    const int G = p->group, supers = p->n_blocks / G; /* whole superblocks only */
    int run = 0, first = -1;
    for (int j = supers - 1; j >= 0 && first < 0; j--) {
        int all_free = 1;
        for (int i = 0; i < G && all_free; i++) all_free = !p->ref[j * G + i];
        run = all_free ? run + 1 : 0;
        if (run == k) first = j;
    }
    for (int id = first * G; first >= 0 && id < (first + k) * G; id++) ref1(p, (uint32_t)id, 0);
    pthread_mutex_unlock(&p->mu);
    return first;
}

void fpga_kv_pool_give_supers(fpga_kv_pool *p, int first, int k)
{
    if (first < 0) return;
    pthread_mutex_lock(&p->mu);
    for (int id = first * p->group; id < (first + k) * p->group; id++) unref1(p, (uint32_t)id, 0);
    pthread_mutex_unlock(&p->mu);
}

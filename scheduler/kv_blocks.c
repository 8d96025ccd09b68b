/* scheduler/kv_blocks.c — the KV store's bookkeeping (see kv_blocks.h).
 *
 * Memory plan: one array per field over all slots, device blocks first (0 .. n_blocks-1), then
 * host-tier slots (n_blocks .. n_blocks+n_host-1), so that a cached block's metadata moves
 * between tiers by copying one slot's fields. Free device blocks and free host slots are stacks;
 * idle cached blocks of each tier are doubly linked LRU lists (oldest at the head); the prefix
 * index is a chained hash table over the slots. Every structure is sized at creation: no call
 * allocates except a sequence's block table and the op list. */
#include "scheduler/kv_blocks.h"
#include <stdlib.h>
#include <string.h>

enum { ST_FREE, ST_USED, ST_IDLE, ST_HOST };

struct sched_kv {
    sched_kv_cfg cfg;
    int bt, nd, nh, total;
    int *refs;            /* device blocks only */
    unsigned char *state;
    unsigned char *cached; /* in the prefix index */
    uint64_t *hash, *serial, *parent_serial;
    int32_t *toks;        /* bt ids per slot (cached slots) */
    int *lru_prev, *lru_next; /* sentinels: total (device list), total + 1 (host list) */
    int *hnext;           /* hash chain */
    int *buckets;
    uint64_t mask;
    int *free_dev, n_free_dev;
    int *free_host, n_free_host;
    int idle_dev, idle_host;
    uint64_t next_serial;
    sched_kv_stats st;
};

/* ---------------------------------------------------------------- hashing */

static uint64_t mix(uint64_t x)
{
    /* splitmix64's finaliser: every input bit reaches every output bit */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t sched_kv_hash(uint64_t parent, uint64_t salt, const int32_t *ids, int n)
{
    uint64_t h = mix(parent ^ mix(salt ^ 0x6b76ULL));
    for (int i = 0; i < n; i++) h = mix(h ^ (uint32_t)ids[i]);
    return h ? h : 1; /* 0 means "no parent" */
}

/* ---------------------------------------------------------------- ops */

static int op_add(sched_kv_ops *ops, enum sched_kv_op_kind k, int32_t src, int32_t dst, int tokens)
{
    if (!ops) return 0;
    if (ops->n == ops->cap) {
        int cap = ops->cap ? ops->cap * 2 : 16;
        sched_kv_op *p = realloc(ops->op, sizeof *p * (size_t)cap);
        if (!p) {
            ops->oom = 1;
            return -1;
        }
        ops->op = p;
        ops->cap = cap;
    }
    ops->op[ops->n++] = (sched_kv_op){k, src, dst, tokens};
    return 0;
}

void sched_kv_ops_reset(sched_kv_ops *ops)
{
    ops->n = 0;
    ops->oom = 0;
}

void sched_kv_ops_deinit(sched_kv_ops *ops)
{
    free(ops->op);
    memset(ops, 0, sizeof *ops);
}

/* ---------------------------------------------------------------- lists and index */

static void lru_unlink(sched_kv *kv, int s)
{
    kv->lru_next[kv->lru_prev[s]] = kv->lru_next[s];
    kv->lru_prev[kv->lru_next[s]] = kv->lru_prev[s];
    if (s < kv->nd) kv->idle_dev--;
    else kv->idle_host--;
}

static void lru_push_tail(sched_kv *kv, int s)
{
    int head = s < kv->nd ? kv->total : kv->total + 1;
    int last = kv->lru_prev[head];
    kv->lru_next[last] = s;
    kv->lru_prev[s] = last;
    kv->lru_next[s] = head;
    kv->lru_prev[head] = s;
    if (s < kv->nd) kv->idle_dev++;
    else kv->idle_host++;
}

static int lru_oldest(const sched_kv *kv, int host)
{
    int head = host ? kv->total + 1 : kv->total;
    int s = kv->lru_next[head];
    return s == head ? -1 : s;
}

static void index_add(sched_kv *kv, int s)
{
    uint64_t b = kv->hash[s] & kv->mask;
    kv->hnext[s] = kv->buckets[b];
    kv->buckets[b] = s;
    kv->cached[s] = 1;
}

static void index_del(sched_kv *kv, int s)
{
    if (!kv->cached[s]) return;
    int *p = &kv->buckets[kv->hash[s] & kv->mask];
    while (*p != s) p = &kv->hnext[*p];
    *p = kv->hnext[s];
    kv->cached[s] = 0;
}

/* The cached slot holding exactly this block: same hash, same token ids, same parent. */
static int index_find(const sched_kv *kv, uint64_t h, const int32_t *ids, uint64_t parent_serial)
{
    for (int s = kv->buckets[h & kv->mask]; s >= 0; s = kv->hnext[s]) {
        if (kv->hash[s] == h && kv->parent_serial[s] == parent_serial &&
            !memcmp(kv->toks + (size_t)s * kv->bt, ids, sizeof(int32_t) * (size_t)kv->bt))
            return s;
    }
    return -1;
}

/* Moves a cached block's identity from slot a to slot b (index and metadata). */
static void move_identity(sched_kv *kv, int a, int b)
{
    index_del(kv, a);
    kv->hash[b] = kv->hash[a];
    kv->serial[b] = kv->serial[a];
    kv->parent_serial[b] = kv->parent_serial[a];
    memcpy(kv->toks + (size_t)b * kv->bt, kv->toks + (size_t)a * kv->bt, sizeof(int32_t) * (size_t)kv->bt);
    index_add(kv, b);
}

/* ---------------------------------------------------------------- allocation */

static int dev_available(const sched_kv *kv)
{
    return kv->n_free_dev + kv->idle_dev;
}

/* A host slot for a block being swapped out: a free one, else the least recently used cached
 * one is dropped. -1 without a host tier (or with every slot pinned). */
static int host_slot(sched_kv *kv)
{
    if (kv->n_free_host) return kv->free_host[--kv->n_free_host];
    int v = lru_oldest(kv, 1);
    if (v < 0) return -1;
    lru_unlink(kv, v);
    index_del(kv, v);
    kv->state[v] = ST_FREE;
    kv->st.dropped++;
    return v;
}

/* One device block with refs 1: a free one, else the least recently used idle cached block,
 * whose content moves to the host tier when there is room (a KV_OP_SWAP_OUT). -1 when none. */
static int dev_alloc(sched_kv *kv, sched_kv_ops *ops)
{
    int b;
    if (kv->n_free_dev) {
        b = kv->free_dev[--kv->n_free_dev];
    } else {
        b = lru_oldest(kv, 0);
        if (b < 0) return -1;
        lru_unlink(kv, b);
        kv->st.evictions++;
        int h = kv->nh ? host_slot(kv) : -1;
        if (h >= 0) {
            if (op_add(ops, KV_OP_SWAP_OUT, b, h - kv->nd, kv->bt) < 0) {
                /* cannot tell the worker to save it: drop it instead (nothing is wrong, only
                 * less is cached) */
                kv->state[h] = ST_FREE;
                kv->free_host[kv->n_free_host++] = h;
                index_del(kv, b);
                kv->st.dropped++;
            } else {
                move_identity(kv, b, h);
                kv->state[h] = ST_HOST;
                lru_push_tail(kv, h);
                kv->st.swaps_out++;
            }
        } else {
            index_del(kv, b);
            kv->st.dropped++;
        }
    }
    kv->state[b] = ST_USED;
    kv->refs[b] = 1;
    kv->cached[b] = 0;
    kv->serial[b] = ++kv->next_serial;
    return b;
}

static void dev_unref(sched_kv *kv, int b)
{
    if (--kv->refs[b] > 0) return;
    if (kv->cached[b]) {
        kv->state[b] = ST_IDLE;
        lru_push_tail(kv, b);
    } else {
        kv->state[b] = ST_FREE;
        kv->free_dev[kv->n_free_dev++] = b;
    }
}

static int seq_reserve(sched_kv_seq *s, int n)
{
    if (n <= s->cap) return 0;
    int cap = s->cap ? s->cap : 8;
    while (cap < n) cap *= 2;
    int32_t *p = realloc(s->blocks, sizeof *p * (size_t)cap);
    if (!p) return -1;
    s->blocks = p;
    s->cap = cap;
    return 0;
}

/* ---------------------------------------------------------------- public */

sched_kv *sched_kv_new(const sched_kv_cfg *cfg)
{
    if (cfg->block_tokens <= 0 || cfg->block_tokens > 65536 || cfg->n_blocks <= 0 || cfg->n_host < 0 ||
        (long long)cfg->n_blocks + cfg->n_host > (1 << 28))
        return NULL;
    sched_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->cfg = *cfg;
    kv->bt = cfg->block_tokens;
    kv->nd = cfg->n_blocks;
    kv->nh = cfg->n_host;
    kv->total = kv->nd + kv->nh;
    size_t t = (size_t)kv->total;
    uint64_t nb = 16;
    while (nb < 2 * (uint64_t)t) nb *= 2;
    kv->mask = nb - 1;
    kv->refs = calloc(t, sizeof *kv->refs);
    kv->state = calloc(t, 1);
    kv->cached = calloc(t, 1);
    kv->hash = calloc(t, sizeof *kv->hash);
    kv->serial = calloc(t, sizeof *kv->serial);
    kv->parent_serial = calloc(t, sizeof *kv->parent_serial);
    kv->toks = calloc(t * (size_t)kv->bt, sizeof *kv->toks);
    kv->lru_prev = calloc(t + 2, sizeof(int));
    kv->lru_next = calloc(t + 2, sizeof(int));
    kv->hnext = calloc(t, sizeof(int));
    kv->buckets = malloc(sizeof(int) * nb);
    kv->free_dev = malloc(sizeof(int) * (size_t)kv->nd);
    kv->free_host = malloc(sizeof(int) * (size_t)(kv->nh ? kv->nh : 1));
    if (!kv->refs || !kv->state || !kv->cached || !kv->hash || !kv->serial || !kv->parent_serial ||
        !kv->toks || !kv->lru_prev || !kv->lru_next || !kv->hnext || !kv->buckets || !kv->free_dev ||
        !kv->free_host) {
        sched_kv_free(kv);
        return NULL;
    }
    for (uint64_t i = 0; i < nb; i++) kv->buckets[i] = -1;
    for (int i = 0; i < 2; i++) kv->lru_prev[kv->total + i] = kv->lru_next[kv->total + i] = kv->total + i;
    /* free stacks popped from the end: block 0 first */
    for (int i = 0; i < kv->nd; i++) kv->free_dev[i] = kv->nd - 1 - i;
    kv->n_free_dev = kv->nd;
    for (int i = 0; i < kv->nh; i++) kv->free_host[i] = kv->total - 1 - i;
    kv->n_free_host = kv->nh;
    return kv;
}

void sched_kv_free(sched_kv *kv)
{
    if (!kv) return;
    free(kv->refs);
    free(kv->state);
    free(kv->cached);
    free(kv->hash);
    free(kv->serial);
    free(kv->parent_serial);
    free(kv->toks);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv->hnext);
    free(kv->buckets);
    free(kv->free_dev);
    free(kv->free_host);
    free(kv);
}

int sched_kv_block_tokens(const sched_kv *kv)
{
    return kv->bt;
}

int sched_kv_blocks_for(const sched_kv *kv, int n)
{
    return n <= 0 ? 0 : (int)(((long long)n + kv->bt - 1) / kv->bt);
}

int sched_kv_can_fit(const sched_kv *kv, int n)
{
    return n >= 0 && sched_kv_blocks_for(kv, n) <= dev_available(kv);
}

int sched_kv_begin(sched_kv *kv, sched_kv_seq *s, const int32_t *ids, int n, int no_cache,
                   sched_kv_ops *ops)
{
    memset(s, 0, sizeof *s);
    s->no_cache = no_cache || !kv->cfg.prefix_cache;
    if (s->no_cache || n <= 1) return 0;
    kv->st.queries_tokens += (uint64_t)n;
    int max_full = (n - 1) / kv->bt;
    if (seq_reserve(s, max_full > 0 ? max_full : 1) < 0) return -1;
    /* walk the chain: each block must match its hash, its ids and its parent exactly */
    uint64_t parent = 0, pserial = 0;
    int matched = 0;
    int host_pinned = 0;
    for (int k = 0; k < max_full; k++) {
        uint64_t h = sched_kv_hash(parent, kv->cfg.salt, ids + (size_t)k * kv->bt, kv->bt);
        int slot = index_find(kv, h, ids + (size_t)k * kv->bt, pserial);
        if (slot < 0) break;
        /* pin it: a device block gets a reference (out of the LRU), a host one leaves the host
         * LRU so that no allocation below drops it */
        if (slot < kv->nd) {
            if (kv->state[slot] == ST_IDLE) {
                lru_unlink(kv, slot);
                kv->state[slot] = ST_USED;
                kv->refs[slot] = 0;
            }
            kv->refs[slot]++;
        } else {
            lru_unlink(kv, slot);
            host_pinned++;
        }
        s->blocks[matched++] = slot;
        parent = h;
        pserial = kv->serial[slot];
    }
    /* bring host blocks back: one device block each; stop at the first that does not fit */
    int keep = matched;
    for (int k = 0; k < matched; k++) {
        int slot = s->blocks[k];
        if (slot < kv->nd) continue;
        int d = k < keep ? dev_alloc(kv, ops) : -1;
        if (d >= 0 && op_add(ops, KV_OP_SWAP_IN, slot - kv->nd, d, kv->bt) < 0) {
            kv->refs[d] = 1;
            dev_unref(kv, d);
            d = -1;
        }
        if (d < 0) {
            if (k < keep) keep = k;
            /* back to the host LRU, cached as before */
            lru_push_tail(kv, slot);
            continue;
        }
        move_identity(kv, slot, d);
        kv->state[slot] = ST_FREE;
        kv->free_host[kv->n_free_host++] = slot;
        s->blocks[k] = d;
        kv->st.host_hit_tokens += (uint64_t)kv->bt;
    }
    (void)host_pinned;
    /* release what lies past the first block that could not come back (its host blocks went
     * back to the host LRU above) */
    for (int k = keep; k < matched; k++)
        if (s->blocks[k] < kv->nd) dev_unref(kv, s->blocks[k]);
    s->n_blocks = keep;
    s->n_tokens = s->n_cached = keep * kv->bt;
    s->n_committed = keep;
    s->last_hash = keep ? kv->hash[s->blocks[keep - 1]] : 0;
    kv->st.hit_tokens += (uint64_t)s->n_cached;
    return s->n_cached;
}

int sched_kv_grow(sched_kv *kv, sched_kv_seq *s, int n_tokens, sched_kv_ops *ops)
{
    if (n_tokens < s->n_tokens) return -1;
    int want = sched_kv_blocks_for(kv, n_tokens);
    int add = want - s->n_blocks;
    int last = s->n_blocks - 1;
    int fill = s->n_tokens - last * kv->bt; /* positions used in the last block */
    int cow = n_tokens > s->n_tokens && last >= 0 && fill < kv->bt && kv->refs[s->blocks[last]] > 1;
    if (add + cow > dev_available(kv)) return -1;
    if (seq_reserve(s, want) < 0) return -1;
    if (cow) {
        int nb = dev_alloc(kv, ops);
        if (nb < 0 || op_add(ops, KV_OP_COPY, s->blocks[last], nb, fill) < 0) {
            if (nb >= 0) dev_unref(kv, nb);
            return -1;
        }
        dev_unref(kv, s->blocks[last]);
        s->blocks[last] = nb;
        kv->st.cow_copies++;
    }
    for (int i = 0; i < add; i++) {
        int b = dev_alloc(kv, ops);
        if (b < 0) return -1; /* cannot happen: counted above */
        s->blocks[s->n_blocks++] = b;
    }
    s->n_tokens = n_tokens;
    return 0;
}

void sched_kv_commit(sched_kv *kv, sched_kv_seq *s, const int32_t *ids, int n)
{
    if (s->no_cache) return;
    if (n > s->n_tokens) n = s->n_tokens;
    int full = n / kv->bt;
    for (int k = s->n_committed; k < full; k++) {
        int b = s->blocks[k];
        uint64_t pserial = k ? kv->serial[s->blocks[k - 1]] : 0;
        uint64_t h = sched_kv_hash(s->last_hash, kv->cfg.salt, ids + (size_t)k * kv->bt, kv->bt);
        if (kv->cached[b]) { /* reused from the cache, or shared with a fork that committed it */
            s->last_hash = kv->hash[b];
            s->n_committed = k + 1;
            continue;
        }
        if (index_find(kv, h, ids + (size_t)k * kv->bt, pserial) >= 0) {
            /* another sequence published the same block first: ours stays private, and so do
             * the blocks after it (their parent is not the published one) */
            s->no_cache = 1;
            return;
        }
        kv->hash[b] = h;
        kv->parent_serial[b] = pserial;
        memcpy(kv->toks + (size_t)b * kv->bt, ids + (size_t)k * kv->bt, sizeof(int32_t) * (size_t)kv->bt);
        index_add(kv, b);
        s->last_hash = h;
        s->n_committed = k + 1;
    }
}

int sched_kv_fork(sched_kv *kv, const sched_kv_seq *src, sched_kv_seq *dst)
{
    memset(dst, 0, sizeof *dst);
    if (seq_reserve(dst, src->n_blocks ? src->n_blocks : 1) < 0) return -1;
    memcpy(dst->blocks, src->blocks, sizeof(int32_t) * (size_t)src->n_blocks);
    for (int i = 0; i < src->n_blocks; i++) kv->refs[src->blocks[i]]++;
    dst->n_blocks = src->n_blocks;
    dst->n_tokens = src->n_tokens;
    dst->n_cached = src->n_cached;
    dst->last_hash = src->last_hash;
    dst->n_committed = src->n_committed;
    dst->no_cache = src->no_cache;
    return 0;
}

void sched_kv_end(sched_kv *kv, sched_kv_seq *s)
{
    for (int i = 0; i < s->n_blocks; i++) dev_unref(kv, s->blocks[i]);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

void sched_kv_preempt(sched_kv *kv, sched_kv_seq *s)
{
    sched_kv_end(kv, s);
}

void sched_kv_get_stats(const sched_kv *kv, sched_kv_stats *st)
{
    *st = kv->st;
    st->n_blocks = kv->nd;
    st->free = kv->n_free_dev;
    st->cached_idle = kv->idle_dev;
    st->n_host = kv->nh;
    st->host_used = kv->nh - kv->n_free_host;
}

int sched_kv_refs(const sched_kv *kv, int32_t block)
{
    return block >= 0 && block < kv->nd ? kv->refs[block] : -1;
}

long sched_kv_live_refs(const sched_kv *kv)
{
    long n = 0;
    for (int i = 0; i < kv->nd; i++) n += kv->refs[i];
    return n;
}

/* cpu/kv_cache.h — the CPU device's KV cache in fixed-size blocks: one pool of blocks per device,
 * a block table per sequence, reference counts, copy-on-write of a shared block.
 *
 * Block size: CPU_KV_BLOCK = 16 positions. Why 16:
 *   - small enough that a sequence's partial last block wastes little (at most 15 positions, and
 *     a forked prompt copies at most 16 rows on its first write);
 *   - large enough that a block's rows are a contiguous run for the attention loop: 16 keys of
 *     one layer are 16 * kv_dim floats one after another (4 KiB to 64 KiB for real shapes), so
 *     the per-block pointer lookup is amortized over 16 dot products;
 *   - a power of two that divides 128, so the block tables line up with FlexPrefill's 128-token
 *     blocks (8 of ours per sparse block), and its whole blocks are what the prefix cache
 *     (scheduler/sched_pcache.h) names and shares: a prompt's reuse is cut at 16 positions.
 *
 * Layout: one arena for K and one for V, (n_layers, cap, CPU_KV_BLOCK, kv_dim), page-aligned (cap
 * is max_ids when the arenas are reserved, below): block id b's rows of layer l are the
 * CPU_KV_BLOCK * kv_dim floats at
 *   k[b] + l * layer_floats      (k[b] = k_arena + b * CPU_KV_BLOCK * kv_dim)
 * so position p of a sequence with table `blocks` is cpu_kv_row(). A sequence whose blocks are
 * consecutive ids (the usual case: tables take fresh ids in order, and give them back so that the
 * next table gets them in order again) has each layer's keys in one contiguous run, as the
 * contiguous cache had. (The first paged layout, one malloc per block holding every layer, left a
 * layer's keys in 4 KiB runs 16 KiB apart and cost decode 6 % at 1K and 14 % at 8K keys:
 * BENCHMARKS.md.) One block id covers all layers, so one table (and one reference count) serves
 * the whole model, as a shared prefix is shared in every layer at once.
 *
 * Memory plan: the arenas are address space reserved for max_ids blocks (the device's KV budget
 * in blocks; MAP_NORESERVE), so that memory is taken only as pages are first written and nothing
 * ever moves. Where that reservation is refused (a budget past physical memory or 32 TiB, strict
 * overcommit) they
 * grow by doubling the number of ids (each layer's region copied to its new place, every id's
 * pointer moved: every doubling copies all the ids so far into fresh pages, so that a sequence
 * that grows the pool is copied once more in all and faults in twice its pages), never past
 * max_ids. A freed id's rows stay in the arena for the next table (rows past a sequence's length
 * are never read, so nothing is zeroed). The pool is the device's accounting (accel.h, "Paged
 * devices"): a table takes blocks as its sequence grows (cpu_kv_table_prepare) and the pool
 * refuses past max_ids in use. Ids referenced only by holder tables (prefix-cache holders,
 * accel_seq_hold) are counted apart as cached: evictable by freeing their holders.
 *
 * Threads: the pool's mutex guards ids, storage and counts, so sequences may be created and
 * freed from any thread; the k/v arrays (and arenas that are not reserved) are only reallocated
 * when an id is handed out, which accel.h's rule (calls on one device never overlap) keeps apart
 * from a forward pass reading them. */
#ifndef TANDEM_CPU_KV_CACHE_H
#define TANDEM_CPU_KV_CACHE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CPU_KV_BLOCK 16

typedef struct cpu_kv_pool {
    pthread_mutex_t mu;
    int n_layers, kv_dim;
    size_t block_floats; /* floats of K (or of V) in one block: n_layers * CPU_KV_BLOCK * kv_dim */
    size_t run_floats;   /* one layer's rows of one block: CPU_KV_BLOCK * kv_dim */
    size_t layer_floats; /* distance between a block's rows of layer l and l + 1: cap * run_floats,
                            or max_ids * run_floats when reserved */
    float *k_arena, *v_arena; /* (n_layers, cap or max_ids, CPU_KV_BLOCK, kv_dim), page-aligned */
    size_t reserved;     /* bytes of each arena's reservation (mmap), or 0: they grow (malloc) */
    float **k, **v;      /* per id (cap of them): the block's layer-0 rows in the arenas */
    int32_t *ref;        /* per id: references (tables holding it) */
    int32_t *hold;       /* per id: of which from holder tables */
    int32_t *free_ids;   /* ids handed out before and free now */
    int n_free, n_ids, cap; /* n_ids: ids ever handed out (the high-water mark) */
    int max_ids;         /* the budget: ids in use at most */
    int in_use;          /* ids with ref > 0 */
    int cached;          /* ids with ref > 0 whose every reference is a holder's */
} cpu_kv_pool;

/* A sequence's view of the pool: blocks[i] holds positions [i * CPU_KV_BLOCK, (i + 1) *
 * CPU_KV_BLOCK); n entries cover the positions prepared so far (at most max_n: its capacity). */
typedef struct cpu_kv_table {
    int32_t *blocks;
    int n, max_n;
    int holder; /* a prefix-cache holder's (cpu_kv_table_hold) */
} cpu_kv_table;

/* max_ids: the most blocks in use at once (> 0). reserve 1: the arenas reserved as address space
 * where the system lets them be (the device's choice); 0: they grow by copying. 0, or -1 out of
 * memory. */
int cpu_kv_pool_init(cpu_kv_pool *p, int n_layers, int kv_dim, int max_ids, int reserve);
/* Frees every block's storage (tables still pointing into it must not be used). */
void cpu_kv_pool_deinit(cpu_kv_pool *p);
int cpu_kv_pool_in_use(cpu_kv_pool *p);
/* The pool's ids: the budget, in use, cached (any thread). */
void cpu_kv_pool_usage(cpu_kv_pool *p, int *total, int *used, int *cached);

/* An empty table for up to `capacity` positions (no block taken yet). 0, or -1. */
int cpu_kv_table_new(cpu_kv_pool *p, int capacity, cpu_kv_table *t);
/* A table for up to `capacity` positions whose blocks holding positions [0, n_tokens) are src's
 * (one more reference each; a partial last block is shared too and copied on the first write
 * of either side). n_tokens <= capacity and within src's blocks. 0, or -1. */
int cpu_kv_table_fork(cpu_kv_pool *p, const cpu_kv_table *src, int n_tokens, int capacity,
                      cpu_kv_table *t);
/* Drops the table's references (a block's storage goes with its last one). */
void cpu_kv_table_free(cpu_kv_pool *p, cpu_kv_table *t);
/* Marks the table a holder's: its references count as a holder's from now on. */
void cpu_kv_table_hold(cpu_kv_pool *p, cpu_kv_table *t);
/* Before positions [pos0, pos0 + n) are written: the table grows to cover them (fresh blocks),
 * and every block they fall in that another table also references is replaced by a copy of it
 * (copy-on-write). 0, or -1 when the pool cannot supply the blocks (past max_ids, or out of
 * memory): the blocks this call took are given back, the table is as it was. */
int cpu_kv_table_prepare(cpu_kv_pool *p, cpu_kv_table *t, int pos0, int n);
/* Gives back the blocks past the first ceil(len / CPU_KV_BLOCK). */
void cpu_kv_table_shrink(cpu_kv_pool *p, cpu_kv_table *t, int len);
/* Floats of K and V in one block, all layers: the host tier's unit (cpu_kv_block_save). */
size_t cpu_kv_block_floats(const cpu_kv_pool *p);
/* Block i's K then V rows, layer by layer, to dst (2 * block_floats floats); from src. */
void cpu_kv_block_save(const cpu_kv_pool *p, const cpu_kv_table *t, int i, float *dst);
void cpu_kv_block_load(cpu_kv_pool *p, cpu_kv_table *t, int i, const float *src);

/* The K (or V) row of position pos in layer l. */
static inline float *cpu_kv_row(float *const *store, const cpu_kv_pool *p, const cpu_kv_table *t,
                                int layer, int pos)
{
    return store[t->blocks[pos / CPU_KV_BLOCK]] + (size_t)layer * p->layer_floats +
           (size_t)(pos % CPU_KV_BLOCK) * p->kv_dim;
}

#endif

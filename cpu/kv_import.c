/* cpu/kv_import.c — see kv_import.h. */
#include "cpu/kv_import.h"
#include "cpu/kv_quant.h"
#include "proto/kv_wire.h"

typedef struct {
    cpu_kv_pool *p;
    const cpu_kv_table *t;
    const proto_kv_layer *c;
    int bad; /* a run's dequantize refused its shape or arrays (any thread sets it: atomics) */
} import_job;

/* The chunk's token where run r starts (the first run may be a block's tail). */
static int run_start(int pos0, int r)
{
    int off = pos0 % CPU_KV_BLOCK;
    if (!off || !r) return r * CPU_KV_BLOCK;
    return CPU_KV_BLOCK - off + (r - 1) * CPU_KV_BLOCK;
}

/* Runs [r0, r1): each block's rows of K and V (the chunk's tokens are whole rows of values and
 * scales). */
static void import_runs(void *ctx, int r0, int r1, int thread)
{
    import_job *j = ctx;
    const proto_kv_layer *c = j->c;
    for (int r = r0; r < r1; r++) {
        int t = run_start(c->pos0, r), p = c->pos0 + t, n = CPU_KV_BLOCK - p % CPU_KV_BLOCK;
        if (n > c->n_tokens - t) n = c->n_tokens - t;
        size_t qo = proto_kv_value_bytes(c->dtype, t, c->n_kv_heads, c->head_dim);
        size_t so = proto_kv_scale_count(c->dtype, t, c->n_kv_heads, c->head_dim);
        if (cpu_kv_dequantize(c->dtype, c->k + qo, c->k_scale + so, n, c->n_kv_heads, c->head_dim,
                              cpu_kv_row(j->p->k, j->p, j->t, c->layer, p)) ||
            cpu_kv_dequantize(c->dtype, c->v + qo, c->v_scale + so, n, c->n_kv_heads, c->head_dim,
                              cpu_kv_row(j->p->v, j->p, j->t, c->layer, p))) {
            __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

int cpu_kv_import_rows(cpu_kv_pool *p, const cpu_kv_table *t, cpu_pool *pool,
                       const proto_kv_layer *c)
{
    if (c->n_tokens <= 0) return 0;
    /* refused before any row is written: arrays, shape, and the pool's row width */
    if (!c->k || !c->v || !c->k_scale || !c->v_scale ||
        proto_kv_shape_check(c->dtype, 1, c->n_kv_heads, c->head_dim) ||
        c->n_kv_heads * c->head_dim != p->kv_dim)
        return -1;
    /* the first run, if it is a block's tail */
    int head = (CPU_KV_BLOCK - c->pos0 % CPU_KV_BLOCK) % CPU_KV_BLOCK;
    if (head > c->n_tokens) head = c->n_tokens;
    int runs = (head > 0) + (c->n_tokens - head + CPU_KV_BLOCK - 1) / CPU_KV_BLOCK;
    import_job j = {p, t, c, 0};
    cpu_pool_for(pool, runs, 8, import_runs, &j);
    return __atomic_load_n(&j.bad, __ATOMIC_RELAXED) ? -1 : 0;
}

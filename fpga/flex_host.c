/* fpga/flex_host.c — packing and one attention-layer run of the FAST-Prefill kernels (see
 * fpga/flex_host.h). Buffers are allocated in the memory group the xclbin connects each port to;
 * the inputs travel with one write + sync each, the results come back with one sync each. */
#include "fpga/flex_host.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BS FPGA_FLEX_BS

static uint64_t nblocks(int n)
{
    return ((uint64_t)n + BS - 1) / BS;
}

uint64_t fpga_flex_q_bytes(int n, int n_heads, int d)
{
    return (uint64_t)n_heads * nblocks(n) * fpga_flex_qblock_bytes(d);
}

uint64_t fpga_flex_kv_bytes(int n, int n_kv_heads, int d)
{
    return (uint64_t)n_kv_heads * nblocks(n) * fpga_flex_kvblock_bytes(d);
}

static void quant_row(const float *x, int d, uint8_t *blk, int i)
{
    fpga_flex_quant_row(x, d, blk, i);
}

static void dequant_row(const uint8_t *blk, int d, int i, float *x)
{
    float s;
    memcpy(&s, blk + (size_t)BS * d + 4 * (size_t)i, 4);
    const int8_t *q = (const int8_t *)blk + (size_t)i * d;
    for (int e = 0; e < d; e++) x[e] = (float)q[e] * s;
}

void fpga_flex_pack_q(const float *q, size_t q_stride, int n, int H, int d, uint8_t *out)
{
    const uint64_t qb = fpga_flex_qblock_bytes(d), nb = nblocks(n);
    memset(out, 0, fpga_flex_q_bytes(n, H, d));
    for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++)
            quant_row(q + (size_t)t * q_stride + (size_t)h * d, d,
                      out + ((uint64_t)h * nb + t / BS) * qb, t % BS);
}

void fpga_flex_pack_kv(const float *k, const float *v, size_t kv_stride, int n, int Hk, int d,
                       uint8_t *out)
{
    const uint64_t qb = fpga_flex_qblock_bytes(d), kvb = 2 * qb, nb = nblocks(n);
    memset(out, 0, fpga_flex_kv_bytes(n, Hk, d));
    for (int g = 0; g < Hk; g++)
        for (int t = 0; t < n; t++) {
            uint8_t *blk = out + ((uint64_t)g * nb + t / BS) * kvb;
            size_t off = (size_t)t * kv_stride + (size_t)g * d;
            quant_row(k + off, d, blk, t % BS);
            quant_row(v + off, d, blk + qb, t % BS);
        }
}

void fpga_flex_unpack_q(const uint8_t *p, int n, int H, int d, float *q)
{
    const uint64_t qb = fpga_flex_qblock_bytes(d), nb = nblocks(n);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < n; t++)
            dequant_row(p + ((uint64_t)h * nb + t / BS) * qb, d, t % BS,
                        q + ((size_t)t * H + h) * d);
}

void fpga_flex_unpack_kv(const uint8_t *p, int n, int Hk, int d, float *k, float *v)
{
    const uint64_t qb = fpga_flex_qblock_bytes(d), nb = nblocks(n);
    for (int g = 0; g < Hk; g++)
        for (int t = 0; t < n; t++) {
            const uint8_t *blk = p + ((uint64_t)g * nb + t / BS) * 2 * qb;
            dequant_row(blk, d, t % BS, k + ((size_t)t * Hk + g) * d);
            dequant_row(blk + qb, d, t % BS, v + ((size_t)t * Hk + g) * d);
        }
}

void fpga_flex_opts_default(fpga_flex_opts *o, int d)
{
    *o = (fpga_flex_opts){.gamma = 0.9f, .tau = 0.1f, .min_blocks = 8, .max_blocks = 0,
                          .window = 16};
    /* FAST-Prefill's cache is 16 MB (Sec. V-C1); half of it hot (the paper does not split it) */
    o->cache_blocks = (int)((16u << 20) / fpga_flex_kvblock_bytes(d));
    if (o->cache_blocks > FPGA_FLEX_MAX_CACHE) o->cache_blocks = FPGA_FLEX_MAX_CACHE;
    o->hot_blocks = o->cache_blocks / 2;
}

void fpga_flex_result_free(fpga_flex_result *r)
{
    if (!r) return;
    free(r->row_ptr);
    free(r->col);
    free(r->info);
    free(r->out);
    memset(r, 0, sizeof *r);
}

enum { B_Q, B_KV, B_SCRATCH, B_ROWS, B_COL, B_INFO, B_JOBS, B_OUT, B_STATS, B_N };

typedef struct ctx {
    fpga_xrt *x;
    xrtDeviceHandle dev;
    xuid_t uuid;
    xrtKernelHandle sigu, sau;
    xrtBufferHandle bo[B_N];
} ctx;

static int alloc_bo(ctx *c, xrtKernelHandle k, int argno, uint64_t size, int dev_only, int slot)
{
    uint32_t group;
    int rc = fpga_xrt_kernel_group(c->x, k, argno, &group);
    if (rc) return rc;
    return fpga_xrt_bo_alloc(c->x, c->dev, size ? size : 4096,
                             dev_only ? XCL_BO_FLAGS_DEV_ONLY : XCL_BO_FLAGS_NONE, group,
                             &c->bo[slot]);
}

static int put(ctx *c, int slot, const void *src, uint64_t n, fpga_flex_result *res)
{
    int rc = fpga_xrt_bo_write(c->x, c->bo[slot], src, n, 0);
    if (!rc) rc = fpga_xrt_bo_sync(c->x, c->bo[slot], XCL_BO_SYNC_BO_TO_DEVICE, n, 0);
    res->h2d_bytes += n;
    res->h2d_ns += fpga_xrt_emu_model_sync_ns(c->x, n);
    return rc;
}

static int get(ctx *c, int slot, void *dst, uint64_t n)
{
    int rc = fpga_xrt_bo_sync(c->x, c->bo[slot], XCL_BO_SYNC_BO_FROM_DEVICE, n, 0);
    return rc ? rc : fpga_xrt_bo_read(c->x, c->bo[slot], dst, n, 0);
}

/* Sets arguments (GLOBAL slots, then u32 scalars), runs, waits, fetches the emulator's stats. */
static int launch(ctx *c, xrtKernelHandle k, const int *slots, int n_bo, const uint32_t *u,
                  int n_u, fpga_emu_run_stats *st)
{
    xrtRunHandle r;
    int rc = fpga_xrt_run_open(c->x, k, &r);
    if (rc) return rc;
    for (int i = 0; !rc && i < n_bo; i++) rc = fpga_xrt_run_set_bo(c->x, r, i, c->bo[slots[i]]);
    for (int i = 0; !rc && i < n_u; i++) rc = fpga_xrt_run_set_u32(c->x, r, n_bo + i, u[i]);
    if (!rc) rc = fpga_xrt_run_start(c->x, r);
    if (!rc) rc = fpga_xrt_run_wait(c->x, r, 0, NULL);
    if (!rc && fpga_xrt_is_emulator(c->x)) rc = fpga_xrt_emu_run_stats(c->x, r, st);
    fpga_xrt_run_close(c->x, r);
    return rc;
}

int fpga_flex_attention(fpga_xrt *x, xrtDeviceHandle dev, const fpga_flex_opts *o,
                        const uint8_t *qpack, const uint8_t *kvpack, int n, int H, int Hk, int d,
                        fpga_flex_result *res)
{
    memset(res, 0, sizeof *res);
    if (n < 2 * BS || n > FPGA_FLEX_MAX_TOKENS || H < 1 || H > FPGA_FLEX_MAX_HEADS || Hk < 1 ||
        H % Hk || H / Hk > FPGA_FLEX_MAX_GROUP || d < 1 || d > FPGA_FLEX_MAX_D)
        return ACCEL_ERR_INVALID;
    const uint64_t nb = nblocks(n), rows_bytes = (uint64_t)H * (nb + 1) * 4;
    const uint64_t col_bytes = fpga_flex_col_capacity(n, H) * 4;
    res->n = n;
    res->n_heads = H;
    res->n_blocks = (int)nb;
    ctx c = {.x = x, .dev = dev};
    int rc = fpga_xrt_xclbin_uuid(x, dev, c.uuid);
    if (!rc) rc = fpga_xrt_kernel_open(x, dev, c.uuid, "flex_sigu", 0, &c.sigu);
    if (!rc) rc = fpga_xrt_kernel_open(x, dev, c.uuid, "flex_sau", 0, &c.sau);
    if (rc) return rc;
    res->row_ptr = malloc(rows_bytes);
    res->info = calloc((size_t)H, sizeof *res->info);
    res->out = o->schedule_only ? NULL : malloc((size_t)n * H * d * 4);
    if (!res->row_ptr || !res->info || (!o->schedule_only && !res->out)) {
        rc = ACCEL_ERR_NOMEM;
        goto done;
    }
    if ((rc = alloc_bo(&c, c.sigu, 0, fpga_flex_q_bytes(n, H, d), 0, B_Q)) ||
        (rc = alloc_bo(&c, c.sigu, 1, fpga_flex_kv_bytes(n, Hk, d), 0, B_KV)) ||
        (rc = alloc_bo(&c, c.sigu, 2, fpga_flex_sigu_scratch_bytes(n, H, Hk, d), 1, B_SCRATCH)) ||
        (rc = alloc_bo(&c, c.sigu, 3, rows_bytes, 0, B_ROWS)) ||
        (rc = alloc_bo(&c, c.sigu, 4, col_bytes, 0, B_COL)) ||
        (rc = alloc_bo(&c, c.sigu, 5, (uint64_t)H * sizeof(fpga_flex_head_info), 0, B_INFO)) ||
        (rc = alloc_bo(&c, c.sau, 4, col_bytes, 1, B_JOBS)) ||
        (rc = alloc_bo(&c, c.sau, 5, (uint64_t)H * nb * fpga_flex_oblock_bytes(d), o->schedule_only,
                       B_OUT)) ||
        (rc = alloc_bo(&c, c.sau, 6, sizeof(fpga_flex_sau_stats), 0, B_STATS)))
        goto done;
    if ((rc = put(&c, B_Q, qpack, fpga_flex_q_bytes(n, H, d), res)) ||
        (rc = put(&c, B_KV, kvpack, fpga_flex_kv_bytes(n, Hk, d), res)))
        goto done;
    uint64_t nnz;
    if (o->index_row_ptr) {
        nnz = o->index_row_ptr[(uint64_t)H * (nb + 1) - 1];
        if (nnz > fpga_flex_col_capacity(n, H)) {
            rc = ACCEL_ERR_INVALID;
            goto done;
        }
        memcpy(res->row_ptr, o->index_row_ptr, rows_bytes);
        if ((rc = put(&c, B_ROWS, o->index_row_ptr, rows_bytes, res)) ||
            (rc = put(&c, B_COL, o->index_col, nnz * 4, res)))
            goto done;
        res->col = malloc(nnz ? nnz * 4 : 4);
        if (!res->col) {
            rc = ACCEL_ERR_NOMEM;
            goto done;
        }
        memcpy(res->col, o->index_col, nnz * 4);
    } else {
        const int slots[] = {B_Q, B_KV, B_SCRATCH, B_ROWS, B_COL, B_INFO};
        const uint32_t u[] = {(uint32_t)n, (uint32_t)H, (uint32_t)Hk, (uint32_t)d,
                              fpga_flex_bits(o->gamma), fpga_flex_bits(o->tau),
                              (uint32_t)o->min_blocks,
                              (uint32_t)(o->max_blocks > 0 ? o->max_blocks : (int)nb),
                              (uint32_t)o->gqa_interleave};
        if ((rc = launch(&c, c.sigu, slots, 6, u, 9, &res->sigu_run))) goto done;
        res->sigu_ran = 1;
        if ((rc = get(&c, B_ROWS, res->row_ptr, rows_bytes)) ||
            (rc = get(&c, B_INFO, res->info, (uint64_t)H * sizeof *res->info)))
            goto done;
        nnz = res->row_ptr[(uint64_t)H * (nb + 1) - 1];
        res->col = malloc(nnz ? nnz * 4 : 4);
        if (!res->col) {
            rc = ACCEL_ERR_NOMEM;
            goto done;
        }
        if (nnz && (rc = get(&c, B_COL, res->col, nnz * 4))) goto done;
    }
    {
        const int slots[] = {B_Q, B_KV, B_ROWS, B_COL, B_JOBS, B_OUT, B_STATS};
        const uint32_t u[] = {(uint32_t)n, (uint32_t)H, (uint32_t)Hk, (uint32_t)d,
                              (uint32_t)o->gqa_interleave, (uint32_t)o->cache_blocks,
                              (uint32_t)o->hot_blocks, (uint32_t)o->window,
                              (uint32_t)(o->schedule_only ? 1 : 0)};
        if ((rc = launch(&c, c.sau, slots, 7, u, 9, &res->sau_run))) goto done;
        if ((rc = get(&c, B_STATS, &res->sau, sizeof res->sau))) goto done;
        if (!o->schedule_only) {
            /* (n_heads, nb, 128, d) on the card -> (n, n_heads, d) */
            const uint64_t ob = (uint64_t)H * nb * fpga_flex_oblock_bytes(d);
            float *tmp = malloc(ob);
            if (!tmp) {
                rc = ACCEL_ERR_NOMEM;
                goto done;
            }
            rc = get(&c, B_OUT, tmp, ob);
            for (int h = 0; !rc && h < H; h++)
                for (int t = 0; t < n; t++)
                    memcpy(res->out + ((size_t)t * H + h) * d,
                           tmp + ((size_t)h * nb * BS + t) * d, (size_t)d * 4);
            free(tmp);
        }
    }
done:
    for (int i = 0; i < B_N; i++)
        if (c.bo[i]) fpga_xrt_bo_free(x, c.bo[i]);
    if (c.sigu) fpga_xrt_kernel_close(x, c.sigu);
    if (c.sau) fpga_xrt_kernel_close(x, c.sau);
    if (rc) fpga_flex_result_free(res);
    return rc;
}

void fpga_xattn_result_free(fpga_xattn_result *r)
{
    if (!r) return;
    free(r->row_ptr);
    free(r->col);
    memset(r, 0, sizeof *r);
}

int fpga_xattn_index(fpga_xrt *x, xrtDeviceHandle dev, const fpga_xattn_params *p,
                     const uint8_t *qpack, const uint8_t *kvpack, int n, int q0, int H, int Hk,
                     int d, fpga_xattn_result *res)
{
    memset(res, 0, sizeof *res);
    if (n < 1 || q0 < 0 || !fpga_xattn_ok((uint32_t)n, (uint32_t)q0, (uint32_t)H, (uint32_t)Hk,
                                         (uint32_t)d, p))
        return ACCEL_ERR_INVALID;
    const uint64_t nb = nblocks(n), rows_bytes = (uint64_t)H * (nb + 1) * 4;
    const uint64_t col_bytes = fpga_flex_col_capacity(n, H) * 4;
    res->n = n;
    res->n_heads = H;
    res->n_blocks = (int)nb;
    ctx c = {.x = x, .dev = dev};
    xrtKernelHandle k = NULL;
    int rc = fpga_xrt_xclbin_uuid(x, dev, c.uuid);
    if (!rc) rc = fpga_xrt_kernel_open(x, dev, c.uuid, "xattn_est", 0, &k);
    if (rc) return rc;
    fpga_flex_result tmp = {0}; /* put() counts what it ships */
    res->row_ptr = malloc(rows_bytes);
    if (!res->row_ptr) rc = ACCEL_ERR_NOMEM;
    if (!rc && !(rc = alloc_bo(&c, k, 0, fpga_flex_q_bytes(n, H, d), 0, B_Q)) &&
        !(rc = alloc_bo(&c, k, 1, fpga_flex_kv_bytes(n, Hk, d), 0, B_KV)) &&
        !(rc = alloc_bo(&c, k, 2, rows_bytes, 0, B_ROWS)) &&
        !(rc = alloc_bo(&c, k, 3, col_bytes, 0, B_COL)) &&
        !(rc = put(&c, B_Q, qpack, fpga_flex_q_bytes(n, H, d), &tmp)))
        rc = put(&c, B_KV, kvpack, fpga_flex_kv_bytes(n, Hk, d), &tmp);
    if (!rc) {
        const int slots[] = {B_Q, B_KV, B_ROWS, B_COL};
        const uint32_t u[] = {(uint32_t)n, (uint32_t)q0, (uint32_t)H, (uint32_t)Hk, (uint32_t)d,
                              p->method, p->stride, p->thr_lo, p->thr_hi, p->tri_lo, p->tri_hi};
        rc = launch(&c, k, slots, 4, u, 11, &res->run);
    }
    if (!rc) rc = get(&c, B_ROWS, res->row_ptr, rows_bytes);
    if (!rc) {
        const uint64_t nnz = res->row_ptr[(uint64_t)H * (nb + 1) - 1];
        res->col = malloc(nnz ? nnz * 4 : 4);
        if (!res->col) rc = ACCEL_ERR_NOMEM;
        else if (nnz) rc = get(&c, B_COL, res->col, nnz * 4);
    }
    for (int i = 0; i < B_N; i++)
        if (c.bo[i]) fpga_xrt_bo_free(x, c.bo[i]);
    fpga_xrt_kernel_close(x, k);
    if (rc) fpga_xattn_result_free(res);
    return rc;
}

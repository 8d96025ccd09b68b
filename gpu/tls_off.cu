/* gpu/tls_off.cu — AsyncTLS decode with the KV offloaded to host memory (issue 23; the card's
 * form: fpga/, sparse/tls_pipe.h).
 *
 * A sequence asked to (sparse_tls_params.offload = 1) leaves the KV pool at its first decode
 * step (sparse or not: the scheduler commits only its resident part once its prompt is in,
 * accel_info.offload_any): positions [0, n) are copied out of its pool blocks, the sparse
 * layers' K/V (layers from gpu_tls_dense_layers on) into pages of the engine's pinned host pool
 * (taken when the engine opens, mapped into the device's address space: gpu_tls_hpool in
 * gpu/tls.cuh), enough for its whole capacity, the dense layers' into device memory of its own
 * (a contiguous cache: layer, KV head, position, hd); then its pool blocks are released. A page
 * holds 128 positions of the sparse layers, laid out as a KV pool block with K and V side by side
 * per layer and KV head (the 128 K rows, then the 128 V rows: a key's V 32 KiB after its K, not
 * 7.9 MB as in a pool block's K-then-V order, which TANDEM_TLS_HLAYOUT=far keeps for an A/B; the
 * kernels see the pool block's formula with cap = 2 x 128 and v = k + 128 rows), so the view of
 * them goes through a block table of pages like a pool sequence's. With the side-by-side layout
 * the 96K batches with offloaded rows took 3-13 % less time per step (BENCHMARKS.md, "The host
 * pool's mapping and layout"). The pool's memory is anonymous memory with huge pages advised,
 * cudaHostRegister'ed (TANDEM_TLS_HPOOL picks another kind of gpu/tls_hmem.cuh: VMM host memory
 * measured no faster). Too few free pages: the sequence stays in the KV pool (all or none; the
 * scheduler counts the pool across requests, accel_info.offload_bytes).
 * From then on the engine hands the kernels two views of it (gpu_seq_dev): `lo` for the dense
 * layers (map zero: row = position) and `hi` for the sparse ones (the pages' table) (forward.cu:
 * md.seqs / md.seqs2), and every kernel works unchanged:
 *   - the QKV kernels write the new key and value of a sparse layer straight into host memory
 *     (512 bytes per layer and KV head at head_dim 128);
 *   - the summaries (level-1 max / min, level-2 labels) stay on the device, as for every sparse
 *     sequence: both selections read no host memory except the newest key row (its label);
 *   - the sparse attention reads only the token_budget selected positions' K and V rows from
 *     host memory, in place, over PCIe (each row one 256-byte run at head_dim 128, read as two
 *     whole 128-byte lines by a warp: gpu/tls_split.cu), no block cache: on random-weight
 *     models a third of the kept level-1 blocks are new each step (BENCHMARKS.md), so the
 *     difference-only block transfer of the paper moves ~2.6x more than the selected tokens
 *     themselves (1,024 x 512 bytes per layer and KV head against ~0.33 x 128 blocks x 32 KiB);
 *   - the row cache: a slot per selected key of each sparse layer and KV head (token_budget
 *     slots, up to GPU_TLS_RC_MAX) in device memory beside the dense layers, holding the K / V
 *     rows the attention read at the steps before; the three-kernel form (gpu/tls_split.cu, the
 *     larger batches) gives each key of the new list the slot that holds it (read from device
 *     memory) or a slot whose key left the list (read over PCIe, then kept there), so only the
 *     keys newly selected cross the link (the one-kernel form reads every key over PCIe and
 *     leaves the cache as it was: still valid). A truncation empties it (its positions get new
 *     rows). TANDEM_TLS_ROWCACHE=0 in the environment turns it off (every key over PCIe, the
 *     path before it) for an A/B comparison. Device memory: 514 bytes per slot at head_dim 128,
 *     126 MB per sequence at budget 1,024 over 30 layers x 8 KV heads;
 *   - the dense layers attend from device memory (2 of 32 layers of Llama-3-8B: 1/16 of the KV).
 * The same kernels on the same values: an offloaded sequence decodes bit for bit as it would
 * from the pool (tests/gpu/test_tls_gpu.c). What it cannot do any more: prefill, fork, export,
 * host-tier block save/load (ACCEL_ERR_UNSUPPORTED); truncation and decode work. */
#include "gpu/tls.cuh"
#include "gpu/tls_hmem.cuh"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- the host pool */

namespace
{
double mono_s()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
} // namespace

int gpu_tls_hpool_open(gpu_engine *e, size_t bytes)
{
    const gpu_dims &d = e->d;
    const int Ls = d.L - gpu_tls_off_split(e);
    if (!e->tls || Ls <= 0) return ACCEL_OK; /* nothing would go there */
    const size_t page = 2 * (size_t)Ls * d.n_kv * GPU_KV_BLOCK * d.hd * sizeof(h16);
    const size_t np = bytes / page;
    if (np < 1) return ACCEL_OK;
    if (np > (size_t)1 << 30) return ACCEL_ERR_INVALID;
    gpu_tls_hpool *hp = (gpu_tls_hpool *)calloc(1, sizeof *hp);
    pthread_mutex_t *mu = (pthread_mutex_t *)malloc(sizeof *mu);
    int *ids = (int *)malloc(np * sizeof(int));
    if (!hp || !mu || !ids || pthread_mutex_init(mu, NULL)) {
        free(hp), free(mu), free(ids);
        return ACCEL_ERR_NOMEM;
    }
    hp->mu = mu;
    hp->free_ids = ids;
    hp->page_bytes = page;
    hp->npages = hp->nfree = (int)np;
    hp->bytes = np * page;
    for (int i = 0; i < (int)np; i++) ids[i] = (int)np - 1 - i; /* page 0 on top */
    /* the memory (gpu/tls_hmem.cu): TANDEM_TLS_HPOOL's kind (none other where it fails), else
     * anonymous memory with huge pages advised, pinned by cudaHostRegister; where that fails,
     * one cudaHostAlloc */
    const double t0 = mono_s();
    const char *asked = getenv("TANDEM_TLS_HPOOL"); /* an asked kind or none */
    const int kind = gpu_hmem_kind_env(GPU_HMEM_REGISTER);
    gpu_hmem m;
    int bad = gpu_hmem_alloc(kind, hp->bytes, e->index, &m);
    if (bad && !(asked && *asked) && kind != GPU_HMEM_HOSTALLOC)
        bad = gpu_hmem_alloc(GPU_HMEM_HOSTALLOC, hp->bytes, e->index, &m);
    hp->open_s = mono_s() - t0;
    if (bad) {
        gpu_tls_hpool_close(hp);
        return ACCEL_ERR_NOMEM;
    }
    hp->h = m.kind == GPU_HMEM_VMM ? m.d : m.h; /* VMM memory: no host mapping (h only non-NULL) */
    hp->dptr = (h16 *)m.d;
    hp->registered = m.kind;
    e->tls->hp = hp;
    return ACCEL_OK;
}

void gpu_tls_hpool_close(gpu_tls_hpool *hp)
{
    if (!hp) return;
    if (hp->h) {
        gpu_hmem m;
        memset(&m, 0, sizeof m);
        m.kind = hp->registered;
        m.h = m.kind == GPU_HMEM_VMM ? NULL : hp->h;
        m.d = m.kind == GPU_HMEM_VMM ? hp->h : (char *)hp->dptr;
        m.bytes = hp->bytes;
        gpu_hmem_free(&m);
    }
    pthread_mutex_destroy((pthread_mutex_t *)hp->mu);
    free(hp->mu);
    free(hp->free_ids);
    free(hp);
}

int gpu_tls_hpool_take(gpu_tls_hpool *hp, int n, int *ids)
{
    if (n <= 0) return ACCEL_OK;
    if (!hp) return ACCEL_ERR_NOMEM;
    pthread_mutex_lock((pthread_mutex_t *)hp->mu);
    const int ok = hp->nfree >= n;
    for (int i = 0; ok && i < n; i++) ids[i] = hp->free_ids[--hp->nfree];
    pthread_mutex_unlock((pthread_mutex_t *)hp->mu);
    return ok ? ACCEL_OK : ACCEL_ERR_NOMEM;
}

void gpu_tls_hpool_give(gpu_tls_hpool *hp, int n, const int *ids)
{
    if (!hp || n <= 0) return;
    pthread_mutex_lock((pthread_mutex_t *)hp->mu);
    for (int i = n - 1; i >= 0; i--) hp->free_ids[hp->nfree++] = ids[i];
    pthread_mutex_unlock((pthread_mutex_t *)hp->mu);
}

/* ---------------------------------------------------------------- moving a sequence out */

/* positions [0, n) of every layer from the pool (sq) into lo (layers < split) / hi */
__global__ void __launch_bounds__(256)
    tls_off_copy_k(gpu_seq_dev sq, gpu_seq_dev lo, gpu_seq_dev hi, int split, int n_kv, int hd,
                   int n)
{
    const int j = blockIdx.x, g = blockIdx.y, l = blockIdx.z;
    const gpu_seq_dev &d = l >= split ? hi : lo;
    const int p0 = j * GPU_KV_BLOCK, p1 = min(p0 + GPU_KV_BLOCK, n);
    const int vec = hd / 8; /* 16-byte pieces of a row */
    const size_t head = (size_t)l * n_kv + g;
    for (int i = threadIdx.x; i < (p1 - p0) * vec; i += blockDim.x) {
        const int p = p0 + i / vec, c = (i % vec) * 8;
        const size_t src = (head * sq.cap + (size_t)gpu_kv_row(sq.map, p)) * hd + c;
        const size_t dst = (head * d.cap + (size_t)gpu_kv_row(d.map, p)) * hd + c;
        *(uint4 *)(d.k + dst) = *(const uint4 *)(sq.k + src);
        *(uint4 *)(d.v + dst) = *(const uint4 *)(sq.v + src);
    }
}

void gpu_tls_off_free(gpu_engine *e, gpu_tls_kv *t)
{
    if (t->off_np) gpu_tls_hpool_give(e->tls ? e->tls->hp : NULL, t->off_np, t->off_pages);
    free(t->off_pages);
    t->off_pages = NULL;
    t->off_np = 0;
    gpu_tls_mem_give(e, t->off_d, &t->off_lend);
    t->off_d = NULL;
    t->off = 0;
    t->rc_slots = 0;
    t->rc_t0 = NULL;
    t->rc_r0 = NULL;
}

int gpu_tls_offload(gpu_engine *e, gpu_kv *kv, gpu_tls_kv *t, int n)
{
    const gpu_dims &d = e->d;
    const int split = gpu_tls_off_split(e), Ls = d.L - split;
    if (t->off || kv->holder || d.hd % 8 || n < 0 || n > kv->cap) return ACCEL_ERR_INVALID;
    gpu_tls_hpool *hp = e->tls ? e->tls->hp : NULL;
    const int np = Ls > 0 ? (kv->cap + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK : 0;
    if (np && !hp) return ACCEL_ERR_NOMEM; /* no host pool: it stays */
    const size_t row = (size_t)d.n_kv * kv->cap * d.hd; /* h16 of one layer's K */
    const size_t db = (2 * (size_t)split * row * sizeof(h16) + 255) / 256 * 256;
    const size_t tb = ((size_t)np * sizeof(int) + 255) / 256 * 256;
    /* the row cache: a slot per selected key of each sparse layer and KV head */
    const int S = np && t->token_budget <= GPU_TLS_RC_MAX ? t->token_budget : 0;
    const size_t rlh = (size_t)Ls * d.n_kv * S;
    const size_t rcb = rlh * 2 * d.hd * sizeof(h16), rct = rlh * sizeof(int);
    int *pages = np ? (int *)malloc(tb) : NULL;
    if (np && !pages) return ACCEL_ERR_NOMEM;
    if (gpu_tls_hpool_take(hp, np, pages)) {
        free(pages);
        return ACCEL_ERR_NOMEM;
    }
    void *dv = NULL;
    gpu_lend dl;
    memset(&dl, 0, sizeof dl);
    /* the dense layers' memory and the table from the pool, while the sequence holds its blocks */
    if (db + tb + rcb + rct && gpu_tls_mem_take(e, db + tb + rcb + rct, &dv, &dl)) {
        gpu_tls_hpool_give(hp, np, pages);
        free(pages);
        return ACCEL_ERR_NOMEM;
    }
    int *tbl = (int *)((char *)dv + db);
    if (np) GPU_CHECK(cudaMemcpyAsync(tbl, pages, (size_t)np * sizeof(int), cudaMemcpyHostToDevice, e->compute));
    t->rc_slots = S;
    t->rc_reset = 0;
    t->rc_r0 = S ? (h16 *)((char *)dv + db + tb) : NULL;
    t->rc_t0 = S ? (int *)((char *)dv + db + tb + rcb) : NULL;
    if (S) GPU_CHECK(cudaMemsetAsync(t->rc_t0, 0xff, rct, e->compute)); /* every slot empty (-1) */
    t->off_pages = pages;
    t->off_np = np;
    t->off_d = dv;
    t->off_lend = dl;
    memset(&t->lo, 0, sizeof t->lo);
    memset(&t->hi, 0, sizeof t->hi);
    t->lo.k = (h16 *)dv;
    t->lo.v = (h16 *)dv + (size_t)split * row;
    t->lo.cap = kv->cap;
    if (np && gpu_tls_off_near()) {
        /* hi, K and V side by side: in a page, layer l's KV head g holds its 128 positions' K
         * rows, then their V rows (64 KiB at head_dim 128), at ((l - split) * n_kv + g) * 2 *
         * 128 rows: the pool block's formula with cap = 2 x 128 and v = k + 128 rows */
        const size_t prow = (size_t)d.n_kv * 2 * GPU_KV_BLOCK * d.hd;
        t->hi.k = hp->dptr - (ptrdiff_t)((size_t)split * prow);
        t->hi.v = t->hi.k + (size_t)GPU_KV_BLOCK * d.hd;
        t->hi.cap = 2 * GPU_KV_BLOCK;
    } else if (np) {
        /* hi: a page is a KV pool block over layers split .. L-1; layer l's rows at (l - split) */
        const size_t prow = (size_t)d.n_kv * GPU_KV_BLOCK * d.hd;
        t->hi.k = hp->dptr - (ptrdiff_t)((size_t)split * prow);
        t->hi.v = t->hi.k + (size_t)Ls * prow;
        t->hi.cap = GPU_KV_BLOCK;
    }
    if (np) {
        t->hi.map.tbl = tbl;
        t->hi.map.bstride = 2ll * Ls * d.n_kv * GPU_KV_BLOCK;
        t->hi.map.nblocks = hp->npages;
    }
    const gpu_seq_dev sq = gpu_kv_seq_dev(e, kv);
    const int nblk = (n + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK;
    if (nblk) {
        tls_off_copy_k<<<dim3(nblk, d.n_kv, d.L), 256, 0, e->compute>>>(sq, t->lo, t->hi, split,
                                                                        d.n_kv, d.hd, n);
        GPU_LAUNCHED();
    }
    GPU_CHECK(cudaStreamSynchronize(e->compute));
    /* the pool's blocks go back (the summaries stay valid: the same keys) */
    const int valid = t->valid;
    t->off = 1; /* gpu_kv_truncate's tls hook leaves the summaries to this */
    GPU_TRY(gpu_kv_truncate(e, kv, 0));
    t->valid = valid;
    t->off_want = 0;
    unsigned long long c0[5] = {0, 0, 0, 0, 0};
    if (t->mem) GPU_CHECK(cudaMemcpy(c0, t->dev.cnt, sizeof c0, cudaMemcpyDeviceToHost));
    t->cnt0_off = c0[0];
    t->hit0_off = c0[4];
    return ACCEL_OK;
}

int gpu_tls_off_near(void)
{
    const char *v = getenv("TANDEM_TLS_HLAYOUT"); /* "far": the pool block's layout (A/B) */
    return !(v && !strcmp(v, "far"));
}

int gpu_kv_offloaded(const gpu_kv *kv)
{
    return kv->tls && kv->tls->off;
}

int gpu_kv_off_seqs(const gpu_kv *kv, gpu_seq_dev *lo, gpu_seq_dev *hi)
{
    if (!gpu_kv_offloaded(kv)) return 0;
    if (lo) *lo = kv->tls->lo;
    if (hi) *hi = kv->tls->hi;
    return 1;
}

int gpu_tls_off_split(const gpu_engine *e)
{
    const int l = gpu_tls_dense_layers(e);
    return e->tls && l < e->d.L ? l : e->d.L;
}

/* gpu/tls_off.cu — AsyncTLS decode with the KV offloaded to host memory (issue 23; the card's
 * form: fpga/, sparse/tls_pipe.h).
 *
 * A sequence asked to (sparse_tls_params.offload = 1) leaves the KV pool at its first decode
 * step (sparse or not: the scheduler commits only its resident part once its prompt is in,
 * accel_info.offload_any): positions [0, n) are copied out of its pool blocks, the sparse layers' K/V (layers from
 * gpu_tls_dense_layers on) into pinned host memory mapped into the device's address space, the
 * dense layers' into device memory of its own, each as a contiguous cache (layer, KV head,
 * position, hd) for the sequence's whole capacity; then its pool blocks are released. From then
 * on the engine hands the kernels two views of it (gpu_seq_dev with a zero map: row = position):
 * `lo` for the dense layers and `hi` for the sparse ones (forward.cu: md.seqs / md.seqs2), and
 * every kernel works unchanged:
 *   - the QKV kernels write the new key and value of a sparse layer straight into host memory
 *     (512 bytes per layer and KV head at head_dim 128);
 *   - the summaries (level-1 max / min, level-2 labels) stay on the device, as for every sparse
 *     sequence: both selections read no host memory except the newest key row (its label);
 *   - the sparse attention reads only the token_budget selected positions' K and V rows from
 *     host memory, in place, over PCIe (each row one 256-byte run at head_dim 128): no resident
 *     block cache and no copies. On random-weight models 61-75 % of the kept level-1 blocks are
 *     new each step (BENCHMARKS.md), so the difference-only block transfer of the paper moves
 *     ~2.6x more than the selected tokens themselves (1,024 x 512 bytes per layer and KV head
 *     against ~0.3 x 128 blocks x 32 KiB); a block cache wins only when selections repeat.
 *   - the dense layers attend from device memory (2 of 32 layers of Llama-3-8B: 1/16 of the KV).
 * The same kernels on the same values: an offloaded sequence decodes bit for bit as it would
 * from the pool (tests/gpu/test_tls_gpu.c). What it cannot do any more: prefill, fork, export,
 * host-tier block save/load (ACCEL_ERR_UNSUPPORTED); truncation and decode work. */
#include "gpu/tls.cuh"

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
        const size_t dst = (head * d.cap + (size_t)p) * hd + c;
        *(uint4 *)(d.k + dst) = *(const uint4 *)(sq.k + src);
        *(uint4 *)(d.v + dst) = *(const uint4 *)(sq.v + src);
    }
}

void gpu_tls_off_free(gpu_engine *e, gpu_tls_kv *t)
{
    if (t->off_h) cudaFreeHost(t->off_h);
    gpu_tls_mem_give(e, t->off_d, &t->off_lend);
    t->off_h = t->off_d = NULL;
    t->off = 0;
}

int gpu_tls_offload(gpu_engine *e, gpu_kv *kv, gpu_tls_kv *t, int n)
{
    const gpu_dims &d = e->d;
    const int split = gpu_tls_off_split(e);
    if (t->off || kv->holder || d.hd % 8 || n < 0 || n > kv->cap) return ACCEL_ERR_INVALID;
    const size_t row = (size_t)d.n_kv * kv->cap * d.hd; /* h16 of one layer's K */
    const size_t hb = 2 * (size_t)(d.L - split) * row * sizeof(h16);
    const size_t db = 2 * (size_t)split * row * sizeof(h16);
    void *h = NULL, *dv = NULL, *hd_ptr = NULL;
    gpu_lend dl;
    memset(&dl, 0, sizeof dl);
    /* the dense layers' memory from the pool, while the sequence still holds its blocks */
    if (db && gpu_tls_mem_take(e, db, &dv, &dl)) return ACCEL_ERR_NOMEM;
    cudaError_t ce = cudaHostAlloc(&h, hb ? hb : 16, cudaHostAllocMapped | cudaHostAllocPortable);
    if (ce == cudaSuccess) ce = cudaHostGetDevicePointer(&hd_ptr, h, 0);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        if (h) cudaFreeHost(h);
        gpu_tls_mem_give(e, dv, &dl);
        return ACCEL_ERR_NOMEM;
    }
    t->off_h = h;
    t->off_d = dv;
    t->off_lend = dl;
    /* hi: layer l at (l - split) of the host buffer; the views never touch the other's layers */
    h16 *hk = (h16 *)hd_ptr - (ptrdiff_t)split * row;
    memset(&t->lo, 0, sizeof t->lo);
    memset(&t->hi, 0, sizeof t->hi);
    t->lo.k = (h16 *)dv;
    t->lo.v = (h16 *)dv + (size_t)split * row;
    t->hi.k = hk;
    t->hi.v = hk + (size_t)(d.L - split) * row;
    t->lo.cap = t->hi.cap = kv->cap;
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
    unsigned long long c0 = 0;
    if (t->mem) GPU_CHECK(cudaMemcpy(&c0, t->dev.cnt, sizeof c0, cudaMemcpyDeviceToHost));
    t->cnt0_off = c0;
    return ACCEL_OK;
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

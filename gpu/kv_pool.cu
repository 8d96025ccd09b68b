/* gpu/kv_pool.cu — the engine's paged KV: one pool of GPU_KV_BLOCK-position blocks, a block
 * table per sequence (gpu_kv), reference counts, copy-on-write (gpu/engine.cuh has the layout
 * and why the block is 128 positions).
 *
 * Memory: the pool's ids are kv_budget / block_bytes (accel_info's kv_blocks_total); their
 * address range is reserved at open (CUDA virtual memory management: cuMemAddressReserve) and
 * backed by physical memory in chunks as ids are first handed out (cuMemCreate + cuMemMap), so an
 * engine takes device memory as its sequences grow, as the per-sequence cudaMalloc did (two
 * engines on one GPU, the lab's and the serving plugin's, both open). Chunks stay mapped (a freed
 * block is the next one taken). Without the driver's VMM entry points the whole pool is one
 * cudaMalloc at open.
 *
 * Tables: each gpu_kv keeps its block ids on the host (the accounting) and a device copy the
 * kernels read (gpu_seq_dev.map.tbl, through the per-call metadata, so a captured decode graph
 * reads the current table). Changed entries go up through a pinned stage on the compute stream,
 * in order with the kernels that read them; copy-on-write is one device-to-device copy of the
 * block (a block is contiguous). Host state is guarded by a mutex (kv_usage from any thread);
 * the device work of every entry is queued on e->compute, which accel.h's one-caller rule keeps
 * in order. */
#include "gpu/engine.cuh"
#include "gpu/tls.cuh" /* an offloaded sequence (gpu/tls_off.cu) */
#include "gpu/vmm.cuh"
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdlib.h>

#define STAGE_ENTRIES 8192
#define CHUNK_MIN (64ull << 20) /* bytes mapped at a time (at least one block) */
#define LEND_CHUNK_MAX (256ull << 20) /* ... unless whole blocks fit a chunk at most this big */

static void *entry(const char *name, unsigned ver)
{
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &f, ver, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        f = NULL;
    cudaGetLastError();
    return f;
}

const gpu_vmm_fns &gpu_vmm()
{
    static const gpu_vmm_fns v = [] {
        gpu_vmm_fns x;
        x.reserve = (PFN_cuMemAddressReserve_v10020)entry("cuMemAddressReserve", 10020);
        x.afree = (PFN_cuMemAddressFree_v10020)entry("cuMemAddressFree", 10020);
        x.create = (PFN_cuMemCreate_v10020)entry("cuMemCreate", 10020);
        x.release = (PFN_cuMemRelease_v10020)entry("cuMemRelease", 10020);
        x.map = (PFN_cuMemMap_v10020)entry("cuMemMap", 10020);
        x.unmap = (PFN_cuMemUnmap_v10020)entry("cuMemUnmap", 10020);
        x.access = (PFN_cuMemSetAccess_v10020)entry("cuMemSetAccess", 10020);
        x.gran = (PFN_cuMemGetAllocationGranularity_v10020)entry("cuMemGetAllocationGranularity", 10020);
        x.attr = (PFN_cuDeviceGetAttribute_v2000)entry("cuDeviceGetAttribute", 2000);
        x.ok = x.reserve && x.afree && x.create && x.release && x.map && x.unmap && x.access &&
               x.gran && x.attr;
        return x;
    }();
    return v;
}

static CUmemAllocationProp vmm_prop(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static pthread_mutex_t *mu(const gpu_engine *e)
{
    return (pthread_mutex_t *)e->pool.mu;
}

int gpu_pool_open(gpu_engine *e)
{
    gpu_kv_pool &p = e->pool;
    memset(&p, 0, sizeof p);
    p.mu = malloc(sizeof(pthread_mutex_t));
    if (!p.mu) return ACCEL_ERR_NOMEM;
    pthread_mutex_init(mu(e), NULL);
    p.block_bytes = (size_t)GPU_KV_BLOCK * e->kv_per_token;
    uint64_t total = p.block_bytes ? e->kv_budget / p.block_bytes : 0;
    if (total > (1u << 30)) total = 1u << 30;
    p.total = (int)total;
    p.ref = (int *)calloc(p.total + 1, sizeof(int));
    p.live = (int *)calloc(p.total + 1, sizeof(int));
    p.free_ids = (int *)calloc(p.total + 1, sizeof(int));
    if (!p.ref || !p.live || !p.free_ids) return ACCEL_ERR_NOMEM;
    GPU_CHECK(cudaMallocHost((void **)&p.stage_h, STAGE_ENTRIES * sizeof(int)));
    p.stage_cap = STAGE_ENTRIES;
    if (p.total == 0) return ACCEL_OK;
    const gpu_vmm_fns &f = gpu_vmm();
    if (f.ok && !getenv("TANDEM_GPU_NO_VMM")) {
        CUmemAllocationProp prop = vmm_prop(e->index);
        size_t gran = 0;
        if (f.gran(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS && gran) {
            /* chunks of whole blocks where that is small (lcm of block and granularity): a chunk
             * whose blocks are all free can be lent (gpu_pool_lend) */
            unsigned long long a = p.block_bytes, b = gran;
            while (b) {
                unsigned long long r = a % b;
                a = b;
                b = r;
            }
            const unsigned long long lcm = p.block_bytes / a * gran;
            unsigned long long chunk = CHUNK_MIN > p.block_bytes ? CHUNK_MIN : p.block_bytes;
            chunk = (chunk + gran - 1) / gran * gran;
            if (lcm <= LEND_CHUNK_MAX) {
                chunk = lcm;
                p.ipc = (int)(lcm / p.block_bytes);
            }
            unsigned long long bytes = (unsigned long long)p.total * p.block_bytes;
            bytes = (bytes + chunk - 1) / chunk * chunk;
            CUdeviceptr va = 0;
            if (f.reserve(&va, bytes, gran, 0, 0) == CUDA_SUCCESS) {
                p.va = va;
                p.va_bytes = bytes;
                p.chunk_bytes = chunk;
                p.chunks = (unsigned long long *)calloc(bytes / chunk, sizeof(unsigned long long));
                if (!p.chunks) return ACCEL_ERR_NOMEM;
                p.base = (h16 *)va;
                p.vmm = 1;
                return ACCEL_OK;
            }
        }
    }
    cudaError_t ce = cudaMalloc((void **)&p.base, (size_t)p.total * p.block_bytes);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        p.base = NULL;
        p.total = 0; /* no pool: every growth is NOMEM */
        return ACCEL_OK;
    }
    p.mapped = p.total;
    return ACCEL_OK;
}

void gpu_pool_close(gpu_engine *e)
{
    gpu_kv_pool &p = e->pool;
    if (p.vmm) {
        const gpu_vmm_fns &f = gpu_vmm();
        for (int i = 0; i < p.n_chunks; i++) {
            f.unmap(p.va + (unsigned long long)i * p.chunk_bytes, p.chunk_bytes);
            f.release(p.chunks[i]);
        }
        f.afree(p.va, p.va_bytes);
    } else if (p.base) {
        cudaFree(p.base);
    }
    free(p.chunks);
    free(p.ref);
    free(p.live);
    free(p.free_ids);
    if (p.stage_h) cudaFreeHost(p.stage_h);
    if (p.mu) {
        pthread_mutex_destroy(mu(e));
        free(p.mu);
    }
    memset(&p, 0, sizeof p);
}

/* Memory behind ids [0, ids): NOMEM when the device has no more (nothing else changes). */
static int grow(gpu_engine *e, int ids)
{
    gpu_kv_pool &p = e->pool;
    if (ids <= p.mapped) return ACCEL_OK;
    if (!p.vmm || ids > p.total) return ACCEL_ERR_NOMEM;
    const gpu_vmm_fns &f = gpu_vmm();
    CUmemAllocationProp prop = vmm_prop(e->index);
    while (p.mapped < ids) {
        const unsigned long long at = (unsigned long long)p.n_chunks * p.chunk_bytes;
        if (at + p.chunk_bytes > p.va_bytes) return ACCEL_ERR_NOMEM;
        CUmemGenericAllocationHandle h;
        CUresult r = f.create(&h, p.chunk_bytes, &prop, 0);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) return ACCEL_ERR_NOMEM;
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "tandem cuda: cuMemCreate failed (CUresult %d)\n", (int)r);
            return ACCEL_ERR_DEVICE;
        }
        r = f.map(p.va + at, p.chunk_bytes, 0, h, 0);
        CUmemAccessDesc a;
        memset(&a, 0, sizeof a);
        a.location = prop.location;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (r == CUDA_SUCCESS) r = f.access(p.va + at, p.chunk_bytes, &a, 1);
        if (r != CUDA_SUCCESS) {
            f.unmap(p.va + at, p.chunk_bytes);
            f.release(h);
            fprintf(stderr, "tandem cuda: mapping the KV pool failed (CUresult %d)\n", (int)r);
            return r == CUDA_ERROR_OUT_OF_MEMORY ? ACCEL_ERR_NOMEM : ACCEL_ERR_DEVICE;
        }
        p.chunks[p.n_chunks++] = h;
        unsigned long long m = (at + p.chunk_bytes) / p.block_bytes;
        p.mapped = m > (unsigned long long)p.total ? p.total : (int)m;
    }
    return ACCEL_OK;
}

/* An id's references change by dref (all) and dlive (non-holders'); the counts follow. */
static void acct(gpu_kv_pool &p, int id, int dref, int dlive)
{
    int r = p.ref[id], l = p.live[id];
    p.used -= r > 0;
    p.cached -= r > 0 && l == 0;
    r += dref;
    l += dlive;
    p.ref[id] = r;
    p.live[id] = l;
    p.used += r > 0;
    p.cached += r > 0 && l == 0;
    if (r == 0) p.free_ids[p.n_free++] = id;
}

/* An id (the caller checked there is one and grew the memory): freed ones first. */
static int take(gpu_kv_pool &p)
{
    int id = p.n_free ? p.free_ids[--p.n_free] : p.next_id++;
    acct(p, id, 1, 1);
    return id;
}

/* The stage is free once what it holds has landed: gpu_finish (every entry's normal end) and the
 * syncs below clear stage_n after the compute stream is done. An entry that returned early (an
 * error between its reserve and its gpu_finish) leaves stage_n set and its table copies maybe
 * still queued behind its kernels; they read the pinned stage when they run, so the next entry
 * waits for them before it writes the stage again (an error path's cost only). */
int gpu_kv_stage_reset(gpu_engine *e)
{
    if (e->pool.stage_n) GPU_CHECK(cudaStreamSynchronize(e->compute));
    e->pool.stage_n = 0;
    return ACCEL_OK;
}

/* Entries [a, b) of kv's table to its device copy (compute stream, through the pinned stage). */
static int upload(gpu_engine *e, gpu_kv *kv, int a, int b)
{
    gpu_kv_pool &p = e->pool;
    while (a < b) {
        if (p.stage_n == p.stage_cap) { /* the stage is full: what it holds has to land first */
            GPU_CHECK(cudaStreamSynchronize(e->compute));
            p.stage_n = 0;
        }
        int n = b - a < p.stage_cap - p.stage_n ? b - a : p.stage_cap - p.stage_n;
        int *st = p.stage_h + p.stage_n;
        memcpy(st, kv->blk + a, n * sizeof(int));
        GPU_CHECK(cudaMemcpyAsync(kv->tbl_d + a, st, n * sizeof(int), cudaMemcpyHostToDevice,
                                  e->compute));
        p.stage_n += n;
        a += n;
    }
    return ACCEL_OK;
}

static int blocks_for(long long positions)
{
    return (int)((positions + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK);
}

static int reserve_locked(gpu_engine *e, int count, gpu_kv *const *kvs, const int *pos0,
                          const int *n)
{
    gpu_kv_pool &p = e->pool;
    long long need = 0;
    for (int i = 0; i < count; i++) {
        const gpu_kv *kv = kvs[i];
        if (kv->holder || pos0[i] < 0 || n[i] < 0 || (long long)pos0[i] + n[i] > kv->cap)
            return ACCEL_ERR_INVALID;
        if (n[i] == 0 || gpu_kv_offloaded(kv)) continue; /* host memory: its whole capacity */
        const int hi = blocks_for((long long)pos0[i] + n[i]);
        if (hi > kv->n) need += hi - kv->n;
        for (int j = pos0[i] / GPU_KV_BLOCK; j < hi && j < kv->n; j++)
            need += p.ref[kv->blk[j]] > 1; /* shared: written into a copy */
    }
    if (need == 0) return ACCEL_OK;
    if (need > (long long)p.n_free + (p.total - p.next_id)) return ACCEL_ERR_NOMEM;
    const long long fresh = need - p.n_free;
    if (fresh > 0) GPU_TRY(grow(e, p.next_id + (int)fresh));
    for (int i = 0; i < count; i++) {
        gpu_kv *kv = kvs[i];
        if (n[i] == 0 || gpu_kv_offloaded(kv)) continue;
        const int hi = blocks_for((long long)pos0[i] + n[i]);
        int lo_ch = hi, hi_ch = 0;
        for (int j = pos0[i] / GPU_KV_BLOCK; j < hi && j < kv->n; j++) {
            const int old = kv->blk[j];
            if (p.ref[old] <= 1) continue;
            const int id = take(p);
            GPU_CHECK(cudaMemcpyAsync((char *)p.base + (size_t)id * p.block_bytes,
                                      (const char *)p.base + (size_t)old * p.block_bytes,
                                      p.block_bytes, cudaMemcpyDeviceToDevice, e->compute));
            acct(p, old, -1, -1);
            kv->blk[j] = id;
            lo_ch = j < lo_ch ? j : lo_ch;
            hi_ch = j + 1;
        }
        for (int j = kv->n; j < hi; j++) {
            kv->blk[j] = take(p);
            lo_ch = j < lo_ch ? j : lo_ch;
            hi_ch = j + 1;
        }
        if (hi > kv->n) kv->n = hi;
        if (lo_ch < hi_ch) GPU_TRY(upload(e, kv, lo_ch, hi_ch));
    }
    return ACCEL_OK;
}

int gpu_kv_reserve(gpu_engine *e, int count, gpu_kv *const *kvs, const int *pos0, const int *n)
{
    pthread_mutex_lock(mu(e));
    int st = reserve_locked(e, count, kvs, pos0, n);
    pthread_mutex_unlock(mu(e));
    return st;
}

gpu_seq_dev gpu_kv_seq_dev(const gpu_engine *e, const gpu_kv *kv)
{
    const gpu_dims &d = e->d;
    gpu_seq_dev s;
    if (gpu_kv_off_seqs(kv, &s, NULL)) return s; /* offloaded: the dense layers' view */
    s.k = e->pool.base;
    s.v = e->pool.base + (size_t)d.L * d.n_kv * GPU_KV_BLOCK * d.hd;
    s.cap = GPU_KV_BLOCK;
    s.pad_ = 0;
    s.map.tbl = kv->tbl_d;
    s.map.bstride = 2ll * d.L * d.n_kv * GPU_KV_BLOCK;
    s.map.nblocks = e->pool.total;
    s.map.pad_ = 0;
    return s;
}

/* ---------------------------------------------------------------- lending
 * A buffer a call needs for its duration (the sparse prefill's workspace) is taken from the
 * pool's blocks, so it counts against the same budget as KV: whole chunks whose blocks are all
 * free (lowest first; chunks past the mapped ones are mapped as the pool would map them) leave
 * circulation, counted as used, and their physical memory is mapped a second time at a new
 * contiguous address range; gpu_pool_unlend clears it, unmaps it and gives the blocks back. */

int gpu_pool_lend(gpu_engine *e, size_t bytes, gpu_lend *l)
{
    memset(l, 0, sizeof *l);
    gpu_kv_pool &p = e->pool;
    if (!p.vmm || !p.ipc) return ACCEL_ERR_UNSUPPORTED;
    const gpu_vmm_fns &f = gpu_vmm();
    const int K = bytes ? (int)((bytes + p.chunk_bytes - 1) / p.chunk_bytes) : 1;
    const int nch = p.total / p.ipc;
    if (K > nch) return ACCEL_ERR_NOMEM;
    l->chunk = (int *)malloc(sizeof(int) * K);
    if (!l->chunk) return ACCEL_ERR_NOMEM;
    pthread_mutex_lock(mu(e));
    int got = 0;
    for (int c = 0; c < nch && got < K; c++) {
        int ok = 1;
        for (int j = c * p.ipc; ok && j < (c + 1) * p.ipc; j++) ok = j >= p.next_id || p.ref[j] == 0;
        if (ok) l->chunk[got++] = c;
    }
    const int top = got == K ? (l->chunk[K - 1] + 1) * p.ipc : 0;
    int st = got < K ? ACCEL_ERR_NOMEM : grow(e, top);
    if (!st) {
        for (int i = 0; i < K; i++)
            for (int j = l->chunk[i] * p.ipc; j < (l->chunk[i] + 1) * p.ipc; j++) acct(p, j, 1, 1);
        int k = 0; /* the free stack without them; ids they skip past next_id onto it */
        for (int i = 0; i < p.n_free; i++)
            if (p.ref[p.free_ids[i]] == 0) p.free_ids[k++] = p.free_ids[i];
        p.n_free = k;
        for (int j = p.next_id; j < top; j++)
            if (p.ref[j] == 0) p.free_ids[p.n_free++] = j;
        if (top > p.next_id) p.next_id = top;
    }
    pthread_mutex_unlock(mu(e));
    if (st) {
        free(l->chunk);
        l->chunk = NULL;
        return st;
    }
    l->n = K;
    l->bytes = (unsigned long long)K * p.chunk_bytes;
    CUdeviceptr va = 0;
    CUresult r = f.reserve(&va, l->bytes, 0, 0, 0);
    int mapped = 0;
    while (r == CUDA_SUCCESS && mapped < K) {
        r = f.map(va + (unsigned long long)mapped * p.chunk_bytes, p.chunk_bytes, 0,
                  p.chunks[l->chunk[mapped]], 0);
        if (r == CUDA_SUCCESS) mapped++;
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc a;
        memset(&a, 0, sizeof a);
        a.location = vmm_prop(e->index).location;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = f.access(va, l->bytes, &a, 1);
    }
    l->va = va;
    if (r != CUDA_SUCCESS) {
        l->n = mapped; /* those to unmap */
        gpu_pool_unlend(e, l);
        fprintf(stderr, "tandem cuda: mapping a lent buffer failed (CUresult %d)\n", (int)r);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? ACCEL_ERR_NOMEM : ACCEL_ERR_DEVICE;
    }
    l->ptr = (void *)va;
    return ACCEL_OK;
}

void gpu_pool_unlend(gpu_engine *e, gpu_lend *l)
{
    if (!l->chunk) return;
    gpu_kv_pool &p = e->pool;
    const gpu_vmm_fns &f = gpu_vmm();
    /* the blocks go back zeroed: a partial block's rows past its length are read, masked with
     * weight 0, by the attention kernels, so they must hold finite numbers, which KV always is
     * and a workspace's floats and indices, read as h16, are not (0 * NaN is NaN) */
    if (l->ptr && (cudaMemsetAsync(l->ptr, 0, l->bytes, e->compute) != cudaSuccess ||
                   cudaStreamSynchronize(e->compute) != cudaSuccess)) {
        fprintf(stderr, "tandem cuda: clearing a lent buffer failed\n");
        cudaGetLastError();
    }
    for (int i = 0; i < l->n; i++) f.unmap(l->va + (unsigned long long)i * p.chunk_bytes, p.chunk_bytes);
    if (l->va) f.afree(l->va, l->bytes);
    /* every chunk taken goes back (l->n may count fewer: those mapped) */
    const int K = (int)(l->bytes / p.chunk_bytes);
    pthread_mutex_lock(mu(e));
    for (int i = 0; i < K; i++)
        for (int j = l->chunk[i] * p.ipc; j < (l->chunk[i] + 1) * p.ipc; j++) acct(p, j, -1, -1);
    pthread_mutex_unlock(mu(e));
    free(l->chunk);
    memset(l, 0, sizeof *l);
}

/* ---------------------------------------------------------------- gpu.h entries */

int gpu_kv_new(gpu_engine *e, int capacity, gpu_kv **out)
{
    *out = NULL;
    if (capacity <= 0) return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(e->index));
    gpu_kv *kv = (gpu_kv *)calloc(1, sizeof *kv);
    if (!kv) return ACCEL_ERR_NOMEM;
    kv->cap = capacity;
    kv->nslots = blocks_for(capacity);
    kv->blk = (int *)calloc(kv->nslots, sizeof(int));
    cudaError_t ce = kv->blk ? cudaMalloc((void **)&kv->tbl_d, kv->nslots * sizeof(int))
                             : cudaErrorMemoryAllocation;
    if (ce != cudaSuccess) {
        free(kv->blk);
        free(kv);
        if (ce == cudaErrorMemoryAllocation) { /* an admission answer, not a fault */
            cudaGetLastError();
            return ACCEL_ERR_NOMEM;
        }
        return gpu_cuda_status(ce, "cudaMalloc(block table)", __FILE__, __LINE__);
    }
    *out = kv;
    return ACCEL_OK;
}

void gpu_kv_free(gpu_engine *e, gpu_kv *kv)
{
    if (!kv) return;
    cudaSetDevice(e->index);
    gpu_kv_loads_drop(e, kv); /* host-tier loads into it not made yet: not needed */
    pthread_mutex_lock(mu(e));
    for (int j = kv->n - 1; j >= 0; j--) acct(e->pool, kv->blk[j], -1, kv->holder ? 0 : -1);
    pthread_mutex_unlock(mu(e));
    gpu_kv_tls_release(e, kv); /* its summaries' lent blocks, its offloaded KV */
    gpu_kv_tls_free(kv);
    cudaFree(kv->tbl_d);
    free(kv->blk);
    free(kv);
}

int gpu_kv_fork(gpu_engine *e, gpu_kv *src, int n_tokens, int capacity, gpu_kv **out)
{
    *out = NULL;
    if (n_tokens < 0 || n_tokens > src->cap || n_tokens > capacity) return ACCEL_ERR_INVALID;
    const int nb = blocks_for(n_tokens);
    if (gpu_kv_offloaded(src)) return ACCEL_ERR_UNSUPPORTED; /* no pool blocks to share */
    if (nb > src->n) return ACCEL_ERR_INVALID;
    GPU_TRY(gpu_kv_loads_settle(e));
    gpu_kv *kv;
    GPU_TRY(gpu_kv_new(e, capacity, &kv));
    pthread_mutex_lock(mu(e));
    for (int j = 0; j < nb; j++) {
        kv->blk[j] = src->blk[j];
        acct(e->pool, kv->blk[j], 1, 1);
    }
    kv->n = nb;
    pthread_mutex_unlock(mu(e));
    cudaError_t ce = nb ? cudaMemcpyAsync(kv->tbl_d, src->tbl_d, nb * sizeof(int),
                                          cudaMemcpyDeviceToDevice, e->compute)
                        : cudaSuccess;
    if (ce != cudaSuccess) {
        gpu_kv_free(e, kv);
        return gpu_cuda_status(ce, "cudaMemcpyAsync(fork table)", __FILE__, __LINE__);
    }
    gpu_kv_tls_fork(kv, src);
    *out = kv;
    return ACCEL_OK;
}

int gpu_kv_truncate(gpu_engine *e, gpu_kv *kv, int len)
{
    if (len < 0 || len > kv->cap) return ACCEL_ERR_INVALID;
    GPU_TRY(gpu_kv_loads_settle(e));
    const int keep = blocks_for(len);
    pthread_mutex_lock(mu(e));
    for (int j = kv->n - 1; j >= keep; j--) acct(e->pool, kv->blk[j], -1, kv->holder ? 0 : -1);
    if (keep < kv->n) kv->n = keep;
    pthread_mutex_unlock(mu(e));
    gpu_kv_tls_truncate(e, kv, len);
    return ACCEL_OK;
}

int gpu_kv_hold(gpu_engine *e, gpu_kv *kv)
{
    pthread_mutex_lock(mu(e));
    if (!kv->holder) {
        for (int j = 0; j < kv->n; j++) acct(e->pool, kv->blk[j], 0, -1);
        kv->holder = 1;
    }
    pthread_mutex_unlock(mu(e));
    return ACCEL_OK;
}

void gpu_kv_usage(gpu_engine *e, int *total, int *used, int *cached)
{
    pthread_mutex_lock(mu(e));
    *total = e->pool.total;
    *used = e->pool.used;
    *cached = e->pool.cached;
    pthread_mutex_unlock(mu(e));
}

uint64_t gpu_kv_block_bytes(const gpu_engine *e)
{
    return e->pool.block_bytes;
}

int gpu_kv_block_save(gpu_engine *e, gpu_kv *kv, int block, void *dst)
{
    if (block < 0 || block >= kv->n || !dst) return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(e->index));
    GPU_TRY(gpu_kv_loads_settle(e));
    const gpu_kv_pool &p = e->pool;
    GPU_CHECK(cudaMemcpyAsync(dst, (const char *)p.base + (size_t)kv->blk[block] * p.block_bytes,
                              p.block_bytes, cudaMemcpyDeviceToHost, e->compute));
    GPU_CHECK(cudaStreamSynchronize(e->compute));
    return ACCEL_OK;
}

/* gpu/test/tls_off_test_api.cu — what the offload's transfers cost over this machine's PCIe
 * (bench_gpu --tls-offload, through dlsym; the test library only): the ways an AsyncTLS step can
 * bring host-resident KV to the device, each on the same pinned host buffer (4 GiB, mapped):
 *   out[0] rows:   a kernel reading `rows` random K rows and their V rows (hd h16 each, one warp
 *                  per row, 8 bytes a lane: the sparse attention's loads) in place: GB/s of rows
 *   out[1] blocks: a kernel reading `blocks` random runs of 64 x hd h16 (the K, or the V, of one
 *                  level-1 block of one layer and KV head: contiguous) into device memory: GB/s
 *   out[2] copies: the same blocks by the copy engine, one cudaMemcpyAsync per run on one
 *                  stream (what a host-driven prefetch of the difference issues): GB/s
 *   out[3] bulk:   one 256 MiB cudaMemcpyAsync host to device (the link's rate): GB/s
 *   out[4 .. 7]:   microseconds of one round of each (rows, blocks, copies, bulk)
 * Medians of reps rounds. */
#include "gpu/engine.cuh"
#include <algorithm>
#include <time.h>
#include <stdlib.h>
#include <vector>

extern "C" int gpu_tls_bench_pcie(int hd, int rows, int blocks, int reps, double *out);

namespace
{
__global__ void rows_k(const h16 *k, const h16 *v, const unsigned *idx, int n, int hd, float *sink)
{
    const int lane = threadIdx.x & 31, w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    float acc = 0.0f;
    for (int i = w; i < n; i += nw) {
        const size_t r = (size_t)idx[i] * hd;
        for (int c = lane * 4; c < hd; c += 128) {
            uint2 a = *(const uint2 *)(k + r + c), b = *(const uint2 *)(v + r + c);
            acc += __uint_as_float(a.x ^ b.y) + __uint_as_float(a.y ^ b.x);
        }
    }
    if (acc == 1.2345f) sink[0] = acc; /* never: keeps the loads */
}

__global__ void blocks_k(const h16 *src, const unsigned *idx, int n, size_t run, h16 *dst)
{
    const size_t vec = run / 8; /* uint4 pieces of one run */
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const uint4 *s = (const uint4 *)(src + (size_t)idx[i] * run);
        uint4 *d = (uint4 *)(dst + (size_t)i * run);
        for (size_t j = threadIdx.x; j < vec; j += blockDim.x) d[j] = s[j];
    }
}

double med(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
} // namespace

int gpu_tls_bench_pcie(int hd, int rows, int blocks, int reps, double *out)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        cudaGetLastError();
        return ACCEL_ERR_NOT_FOUND;
    }
    if (hd < 32 || hd > 1024 || hd % 32 || rows < 1 || rows > (1 << 24) || blocks < 1 ||
        blocks > (1 << 20) || reps < 1 || reps > 100)
        return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(0));
    const size_t bytes = (size_t)4 << 30, half = bytes / 2 / sizeof(h16); /* K half, V half */
    const size_t run = (size_t)64 * hd, n_rows = half / hd, n_runs = 2 * half / run;
    char *h = NULL;
    h16 *hd_ptr = NULL, *dst = NULL;
    unsigned *ridx = NULL, *bidx = NULL;
    float *sink = NULL;
    cudaStream_t s = NULL;
    std::vector<unsigned> ri(rows), bi(blocks);
    unsigned x = 12345u;
    for (int i = 0; i < rows; i++)
        x = x * 1664525u + 1013904223u, ri[i] = (unsigned)((x >> 4) % n_rows);
    for (int i = 0; i < blocks; i++)
        x = x * 1664525u + 1013904223u, bi[i] = (unsigned)((x >> 4) % n_runs);
    int st = ACCEL_OK;
    std::vector<double> t[4];
    cudaError_t ce = cudaHostAlloc((void **)&h, bytes, cudaHostAllocMapped);
    if (!ce) memset(h, 1, bytes);
    if (!ce) ce = cudaHostGetDevicePointer((void **)&hd_ptr, h, 0);
    if (!ce)
        ce = cudaMalloc((void **)&dst,
                        std::max((size_t)blocks * run, (size_t)256 << 20) * sizeof(h16));
    if (!ce) ce = cudaMalloc((void **)&ridx, rows * sizeof(unsigned));
    if (!ce) ce = cudaMalloc((void **)&bidx, blocks * sizeof(unsigned));
    if (!ce) ce = cudaMalloc((void **)&sink, sizeof(float));
    if (!ce) ce = cudaMemcpy(ridx, ri.data(), rows * sizeof(unsigned), cudaMemcpyHostToDevice);
    if (!ce) ce = cudaMemcpy(bidx, bi.data(), blocks * sizeof(unsigned), cudaMemcpyHostToDevice);
    if (!ce) ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int r = -1; r < reps && !ce; r++) { /* r = -1: warm-up */
        for (int m = 0; m < 4 && !ce; m++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            if (m == 0) rows_k<<<1056, 256, 0, s>>>(hd_ptr, hd_ptr + half, ridx, rows, hd, sink);
            if (m == 1) blocks_k<<<1056, 256, 0, s>>>(hd_ptr, bidx, blocks, run, dst);
            if (m == 2)
                for (int i = 0; i < blocks && !ce; i++)
                    ce = cudaMemcpyAsync(dst + (size_t)i * run, hd_ptr + (size_t)bi[i] * run,
                                         run * sizeof(h16), cudaMemcpyHostToDevice, s);
            if (m == 3) ce = cudaMemcpyAsync(dst, h, (size_t)256 << 20, cudaMemcpyHostToDevice, s);
            if (!ce) ce = cudaGetLastError();
            if (!ce) ce = cudaStreamSynchronize(s);
            clock_gettime(CLOCK_MONOTONIC, &b);
            if (r >= 0)
                t[m].push_back((double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9);
        }
    }
    if (ce) {
        st = gpu_cuda_status(ce, "pcie bench", __FILE__, __LINE__);
    } else {
        const double by[4] = {(double)rows * hd * 2 * 2, (double)blocks * run * 2,
                              (double)blocks * run * 2, (double)(256 << 20)};
        for (int m = 0; m < 4; m++) {
            const double sec = med(t[m]);
            out[m] = by[m] / sec / 1e9;
            out[4 + m] = sec * 1e6;
        }
    }
    if (s) cudaStreamDestroy(s);
    void *dv[] = {dst, ridx, bidx, sink};
    for (void *p : dv)
        if (p) cudaFree(p);
    if (h) cudaFreeHost(h);
    return st;
}

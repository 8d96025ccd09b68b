/* gpu/test/tls_hmem_test_api.cu — which mapping of host memory lets a kernel read scattered
 * K / V rows over PCIe fastest (bench_gpu --tls-hostmap, through dlsym; the test library only).
 * Each kind of gpu/tls_hmem.cuh in turn (register: what the offload's host pool has used,
 * register4k: the same without huge pages, hostalloc, vmm: CU_MEM_LOCATION_TYPE_HOST memory),
 * `gib` GiB of it, read by one kernel as the sparse attention reads an offloaded row's keys (one
 * warp per key, 8 bytes a lane, its K row then its V row, hd h16 each), in eight patterns of
 * `keys` keys each:
 *   0 seq        consecutive keys, K and V side by side (a stream: the kernel's link rate)
 *   1 rand_far   uniformly random rows, V half the buffer after K (gpu_tls_bench_pcie's rows)
 *   2 rand_adj   uniformly random keys, K and V side by side (one 2 x hd run)
 *   3 clu_pool   the engine's selection in the host pool's page layout (gpu/tls_off.cu): pages of
 *                128 positions over Ls layers x n_kv heads, all K then all V (V 7.9 MB after K at
 *                Llama-3-8B's shape); per layer and KV head, keys / (Ls x n_kv) keys, 8 random
 *                positions in each of that many / 8 random level-1 blocks of 64 positions
 *   4 clu_near   the same selection in the layout with K and V side by side per layer and head
 *                (128 K rows, then 128 V rows: V 32 KiB after K; TANDEM_TLS_HLAYOUT=near)
 *   5 clu_adj    the same selection with each position's K and V adjacent (one 2 x hd run)
 *   6 win_512m   as rand_adj inside the first 512 MiB (ten times what the device's L2 holds), and
 *   7 win_2g     inside the first 2 GiB: how the rate falls as the keys spread over more pages
 * out[kind * 12 + p]: GB/s of pattern p (median of reps rounds after one warm-up); out[kind * 12
 * + 8]: seconds to allocate and map, + 9: the VMM chunk (bytes), + 10: AnonHugePages kB while
 * held, + 11: 1 if the kind could be allocated. 0, or an error for the parameters / a failed
 * read. */
#include "gpu/engine.cuh"
#include "gpu/tls_hmem.cuh"
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

extern "C" int gpu_tls_bench_hostmap(int hd, int Ls, int n_kv, int keys, int gib, int reps,
                                     double *out);

namespace
{
enum { NPAT = 8 };

__global__ void keys_k(const char *base, const unsigned long long *ko,
                       const unsigned long long *vo, int n, int hd, float *sink)
{
    const int lane = threadIdx.x & 31, w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int nw = (gridDim.x * blockDim.x) >> 5;
    float acc = 0.0f;
    for (int i = w; i < n; i += nw) {
        const h16 *k = (const h16 *)(base + ko[i]), *v = (const h16 *)(base + vo[i]);
        for (int c = lane * 4; c < hd; c += 128) {
            uint2 a = *(const uint2 *)(k + c), b = *(const uint2 *)(v + c);
            acc += __uint_as_float(a.x ^ b.y) + __uint_as_float(a.y ^ b.x);
        }
    }
    if (acc == 1.2345f) sink[0] = acc; /* never: keeps the loads */
}

double now_s()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

long anon_huge_kb()
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

struct lcg {
    unsigned long long x;
    unsigned long long next(unsigned long long n) /* [0, n) */
    {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return (x >> 17) % n;
    }
};

/* byte offsets of each key's K and V row for pattern p in `bytes` of memory */
void pattern(int p, int hd, int Ls, int n_kv, int keys, size_t bytes,
             std::vector<unsigned long long> &ko, std::vector<unsigned long long> &vo)
{
    const size_t row = (size_t)hd * 2, blk = 128;
    const size_t page = 2 * (size_t)Ls * n_kv * blk * row, npages = bytes / page;
    const size_t P = npages * blk; /* positions the clustered layouts hold */
    const int G = Ls * n_kv, per = keys / G > 8 ? keys / G / 8 * 8 : 8;
    lcg r = {0x9e3779b97f4a7c15ull + (unsigned long long)p};
    ko.assign(keys, 0), vo.assign(keys, 0);
    size_t b0 = 0; /* the clustered patterns' current level-1 block */
    for (int i = 0; i < keys; i++) {
        if (p == 0) {
            ko[i] = (size_t)i * 2 * row % (bytes - 2 * row), vo[i] = ko[i] + row;
            continue;
        }
        if (p == 1) {
            const size_t half = bytes / 2 / row * row, x = r.next(half / row);
            ko[i] = x * row, vo[i] = half + x * row;
            continue;
        }
        if (p == 2 || p == 6 || p == 7) {
            const size_t w = p == 2 ? bytes : p == 6 ? (size_t)512 << 20 : (size_t)2 << 30;
            ko[i] = r.next(w / (2 * row)) * 2 * row, vo[i] = ko[i] + row;
            continue;
        }
        /* clustered: group h = (layer, KV head); 8 keys per level-1 block of 64 positions */
        const int h = (i / per) % G;
        if (i % 8 == 0) b0 = r.next(P / 64) * 64;
        const size_t pos = b0 + r.next(64), pg = pos / blk, pr = pos % blk;
        if (p == 3) {
            ko[i] = pg * page + ((size_t)h * blk + pr) * row;
            vo[i] = ko[i] + (size_t)G * blk * row;
        } else if (p == 4) {
            ko[i] = pg * page + ((size_t)h * 2 * blk + pr) * row;
            vo[i] = ko[i] + blk * row;
        } else {
            ko[i] = pg * page + ((size_t)h * blk + pr) * 2 * row;
            vo[i] = ko[i] + row;
        }
    }
}
} // namespace

int gpu_tls_bench_hostmap(int hd, int Ls, int n_kv, int keys, int gib, int reps, double *out)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        cudaGetLastError();
        return ACCEL_ERR_NOT_FOUND;
    }
    if (hd < 32 || hd > 1024 || hd % 32 || Ls < 1 || Ls > 1024 || n_kv < 1 || n_kv > 1024 ||
        keys < 64 || keys > (1 << 24) || gib < 2 || gib > 256 || reps < 1 || reps > 100 ||
        (size_t)gib << 30 < 4 * 2 * (size_t)Ls * n_kv * 128 * hd * 2)
        return ACCEL_ERR_INVALID;
    GPU_CHECK(cudaSetDevice(0));
    GPU_CHECK(cudaFree(0));
    const size_t bytes = (size_t)gib << 30;
    std::vector<unsigned long long> ko[NPAT], vo[NPAT];
    for (int p = 0; p < NPAT; p++) pattern(p, hd, Ls, n_kv, keys, bytes, ko[p], vo[p]);
    unsigned long long *kd = NULL, *vd = NULL;
    float *sink = NULL;
    cudaStream_t s = NULL;
    cudaError_t ce = cudaMalloc((void **)&kd, NPAT * (size_t)keys * 8);
    if (!ce) ce = cudaMalloc((void **)&vd, NPAT * (size_t)keys * 8);
    if (!ce) ce = cudaMalloc((void **)&sink, sizeof(float));
    for (int p = 0; p < NPAT && !ce; p++) {
        ce = cudaMemcpy(kd + (size_t)p * keys, ko[p].data(), (size_t)keys * 8, cudaMemcpyHostToDevice);
        if (!ce) ce = cudaMemcpy(vd + (size_t)p * keys, vo[p].data(), (size_t)keys * 8, cudaMemcpyHostToDevice);
    }
    if (!ce) ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    memset(out, 0, sizeof(double) * 12 * GPU_HMEM_KINDS);
    static const int order[GPU_HMEM_KINDS] = {GPU_HMEM_REGISTER, GPU_HMEM_REGISTER_4K,
                                              GPU_HMEM_HOSTALLOC, GPU_HMEM_VMM};
    for (int oi = 0; oi < GPU_HMEM_KINDS && !ce; oi++) {
        const int kind = order[oi];
        double *o = out + kind * 12;
        const long thp0 = anon_huge_kb();
        const double t0 = now_s();
        gpu_hmem m;
        if (gpu_hmem_alloc(kind, bytes, 0, &m)) continue; /* o[11] stays 0: not available */
        o[8] = now_s() - t0, o[9] = (double)m.gran, o[11] = 1;
        const long thp1 = anon_huge_kb();
        o[10] = thp0 >= 0 && thp1 >= 0 ? (double)(thp1 - thp0) : -1;
        ce = cudaMemsetAsync(m.d, 1, bytes, s);
        if (!ce) ce = cudaStreamSynchronize(s);
        for (int p = 0; p < NPAT && !ce; p++) {
            std::vector<double> t;
            for (int rr = -1; rr < reps && !ce; rr++) {
                const double a = now_s();
                keys_k<<<1056, 256, 0, s>>>(m.d, kd + (size_t)p * keys, vd + (size_t)p * keys, keys,
                                            hd, sink);
                ce = cudaGetLastError();
                if (!ce) ce = cudaStreamSynchronize(s);
                if (rr >= 0) t.push_back(now_s() - a);
            }
            if (ce) break;
            std::sort(t.begin(), t.end());
            o[p] = (double)keys * 2 * hd * 2 / t[t.size() / 2] / 1e9;
        }
        gpu_hmem_free(&m);
    }
    const int st = ce ? gpu_cuda_status(ce, "hostmap bench", __FILE__, __LINE__) : ACCEL_OK;
    if (s) cudaStreamDestroy(s);
    void *dv[] = {kd, vd, sink};
    for (void *p : dv)
        if (p) cudaFree(p);
    return st;
}

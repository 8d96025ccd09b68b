// gpu/gpu_flex_cut.cu — the coverage cut of FlexPrefill's budgets on the whole GPU.
//
// The cut answers "sorted descending, how many values does the cumulative sum keep within the
// limit" without sorting: the radix selection of fpga/kernels/flex_select.c (the float bits of a
// value >= 0 order like the value), 8 bits per level from the top. A level is two launches:
//   cut_hist    grid (blocks of 8192 elements, segments): the elements that match the prefix
//               chosen so far, counted and summed per 8-bit bucket. Lanes of a warp that hit the
//               same bucket are combined first (match_any; the lowest lane adds for the group), so
//               a bucket that holds most values costs one shared atomic per warp, not 32; the
//               block's buckets then go to the segment's histogram with one global atomic each.
//   cut_choose  one CTA per segment (the buckets staged in shared memory), one thread walks the
//               buckets from the top while they fit under the limit,
//               the first that does not becomes the next 8 bits of the prefix; at the last level
//               the values equal to it are taken one by one while they fit (count, in closed
//               form).
// Sums are integers (fixed point, 2^-40 per unit, each value clamped to [0, 1] and rounded to
// nearest): the atomics give the same total in any order, so the cut is the same from run to
// run, and with m <= 2^22 values per segment the 64-bit sums cannot overflow. Against the double
// cumulative sum of a sort (cpu/flex_index.c) a value moves by at most 4.5e-13, so the two differ
// only where the sum at the cut lies that close to the limit.
// (One block per segment with double atomics, the first form, took 13 ms for ten 1M-value maps:
// the atomics of a crowded bucket serialise.)
#include "gpu/gpu_flex_common.cuh"

#define CUT_THREADS 256
#define CUT_PER_BLOCK 8192
#define CUT_LEVELS 4
#define CUT_ONE 0x1p40
#define CUT_MAX_M (1ll << 22)

struct cut_state {
    uint32_t prefix, mask;
    int done, all;
    unsigned long long acc, count, take;
};

struct cut_hist {
    unsigned long long sum[256];
    unsigned int cnt[256];
};

static __device__ __forceinline__ unsigned long long cut_fx(float v)
{
    if (!(v > 0)) return 0; // 0, negatives and NaN carry no mass
    if (v >= 1) return (unsigned long long)CUT_ONE;
    return __double2ull_rn((double)v * CUT_ONE);
}

static __device__ __forceinline__ const float *cut_segment(const float *xa, const float *xb,
                                                           long long m, int s, int paired, int *head)
{
    if (paired) {
        *head = s >> 1;
        return (s & 1 ? xb : xa) + (size_t)(s >> 1) * m;
    }
    *head = s;
    return xa + (size_t)s * m;
}

__global__ void __launch_bounds__(CUT_THREADS)
    cut_hist_kernel(const float *xa, const float *xb, long long m, int paired,
                    const gpu_flex_head *heads, int level, const cut_state *state, cut_hist *hist)
{
    __shared__ unsigned long long ssum[256];
    __shared__ unsigned int scnt[256];
    __shared__ unsigned long long lanefx[CUT_THREADS];
    const int s = blockIdx.y;
    int h;
    const float *x = cut_segment(xa, xb, m, s, paired, &h);
    if (heads && !heads[h].query_aware) return;
    const cut_state st = state[s];
    if (st.done) return;
    const long long b0 = (long long)blockIdx.x * CUT_PER_BLOCK;
    if (b0 >= m) return;
    const long long b1 = b0 + CUT_PER_BLOCK < m ? b0 + CUT_PER_BLOCK : m;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        ssum[b] = 0;
        scnt[b] = 0;
    }
    __syncthreads();
    const int shift = 24 - 8 * level, lane = threadIdx.x & 31;
    unsigned long long *mine = lanefx + (threadIdx.x & ~31);
    for (long long base = b0; base < b1; base += blockDim.x) { // same trip count for every lane
        const long long i = base + threadIdx.x;
        int bin = 256; // no bucket
        unsigned long long fx = 0;
        if (i < b1) {
            const float v = x[i];
            const uint32_t u = gf_bits(v);
            if ((u & st.mask) == st.prefix) {
                bin = (int)(u >> shift & 255u);
                fx = cut_fx(v);
            }
        }
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        mine[lane] = fx;
        __syncwarp();
        if (bin < 256 && lane == __ffs(peers) - 1) {
            unsigned long long sum = 0;
            for (unsigned p = peers; p; p &= p - 1) sum += mine[__ffs(p) - 1];
            atomicAdd(&scnt[bin], (unsigned)__popc(peers));
            atomicAdd(&ssum[bin], sum);
        }
        __syncwarp();
    }
    __syncthreads();
    cut_hist *g = hist + (size_t)s * CUT_LEVELS + level;
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (scnt[b]) {
            atomicAdd(&g->cnt[b], scnt[b]);
            atomicAdd(&g->sum[b], ssum[b]);
        }
}

// One CTA per segment: the segment's 256 buckets are read into shared memory by 256 threads at
// once (the first form walked them from global memory with one thread, a dependent L2 load per
// bucket: 20-70 us a launch), then one thread walks them from the top as before.
__global__ void __launch_bounds__(256)
    cut_choose_kernel(int S, int paired, const gpu_flex_head *heads, unsigned long long limit,
                      int level, cut_state *state, const cut_hist *hist, gf_cut *out)
{
    __shared__ unsigned long long bsum[256];
    __shared__ unsigned int bcnt[256];
    const int s = blockIdx.x;
    if (s >= S) return;
    const int h = paired ? s >> 1 : s;
    if (heads && !heads[h].query_aware) return;
    if (state[s].done) return;
    const cut_hist *g = hist + (size_t)s * CUT_LEVELS + level;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        bsum[b] = g->sum[b];
        bcnt[b] = g->cnt[b];
    }
    __syncthreads();
    if (threadIdx.x) return;
    cut_state st = state[s];
    const int shift = 24 - 8 * level;
    int b = 255;
    for (; b >= 0; b--) {
        if (!bcnt[b]) continue;
        if (st.acc + bsum[b] <= limit) {
            st.acc += bsum[b];
            st.count += bcnt[b];
            continue;
        }
        break;
    }
    if (b < 0) {
        st.all = 1;
        st.done = 1;
    } else {
        st.prefix |= (uint32_t)b << shift;
        st.mask |= 255u << shift;
        if (level == CUT_LEVELS - 1) {
            // every value left in bucket b is the float with these bits: take while it fits
            const unsigned long long v = cut_fx(__uint_as_float(st.prefix)), n = bcnt[b];
            const unsigned long long fit = v ? (limit - st.acc) / v : n;
            st.take = fit < n ? fit : n;
            st.acc += st.take * v;
            st.count += st.take;
            st.done = 1;
        }
    }
    state[s] = st;
    if (st.done) {
        gf_cut r;
        r.all = st.all;
        r.bits = st.all ? 0 : st.prefix;
        r.take = st.take;
        r.count = st.count;
        out[s] = r;
    }
}

static size_t cut_align(size_t b)
{
    return (b + 255) / 256 * 256;
}

size_t gf_cut_scratch_bytes(int S)
{
    return cut_align(sizeof(cut_state) * S) + sizeof(cut_hist) * CUT_LEVELS * S;
}

int gf_cut_run(const float *x_a, const float *x_b, long long m, int S, int paired, double limit,
               const gpu_flex_head *heads, void *scratch, gf_cut *out, cudaStream_t st)
{
    if (m < 1 || m > CUT_MAX_M || S < 1 || !(limit >= 0) || limit > (double)CUT_MAX_M)
        return GPU_FLEX_ERR_INVALID;
    cut_state *state = (cut_state *)scratch;
    cut_hist *hist = (cut_hist *)((char *)scratch + cut_align(sizeof(cut_state) * S));
    GF_CHECK(cudaMemsetAsync(scratch, 0, gf_cut_scratch_bytes(S), st));
    // an integer sum fits under the limit exactly when it is <= floor(limit * 2^40)
    const unsigned long long lim = (unsigned long long)floor(limit * CUT_ONE);
    const dim3 grid((unsigned)((m + CUT_PER_BLOCK - 1) / CUT_PER_BLOCK), (unsigned)S);
    for (int level = 0; level < CUT_LEVELS; level++) {
        cut_hist_kernel<<<grid, CUT_THREADS, 0, st>>>(x_a, x_b, m, paired, heads, level, state,
                                                       hist);
        GF_LAUNCHED();
        cut_choose_kernel<<<S, 256, 0, st>>>(S, paired, heads, lim, level, state, hist, out);
        GF_LAUNCHED();
    }
    return 0;
}

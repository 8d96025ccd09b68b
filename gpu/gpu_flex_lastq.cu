// gpu/gpu_flex_lastq.cu — FlexPrefill's two last-q passes (gpu/gpu_flex_index.cu's streamed
// estimate) on mma.sync with the scores kept in registers. Interface: gpu/gpu_flex_lastq.cuh.
//
// The first form (lastq_kernel, WMMA) ran at 69-80 TFLOP/s, 7-8x off its floor (BENCHMARKS.md,
// "FlexPrefill's chunk, kernel by kernel"): synchronous key loads, every warp reloading the same
// fragments from shared memory, scores stored to shared memory and walked by a scalar loop with
// 4-way bank conflicts. This one is built like the prefill kernel (gpu/attn_prefill.cu):
//   - one CTA of 4 warps per (head, chunk of 1024 keys); heads run fastest in the grid, so the
//     heads of a GQA group read the same key tiles at the same time (from L2);
//   - the 128 query rows are loaded once (cp.async -> shared -> ldmatrix) and kept as A
//     fragments, 32 rows per warp (two m16 tiles: each K fragment loaded feeds two MMAs);
//   - 64-key tiles double-buffered with cp.async (tile i + 1 loads while tile i computes);
//   - stats pass: per-thread running max / sum of exp2 over its own columns, the 4 lanes of a
//     row combined once at the end of the chunk (a fixed butterfly: every lane gets the same
//     bits);
//   - sums pass: the normalised weights formed in registers; column sums of the warp's 32 rows by
//     a butterfly over the 8 row lanes, the 4 warps' partials added in warp order; diagonal sums
//     first inside each thread (its 4 rows are 8 apart and its columns 8 apart, so its 64 values
//     lie on 22 diagonals: summed in registers), those partials written once to shared memory
//     (32 virtual rows of 88, float2 stores, conflict-free pitch) and walked with every lane of a
//     warp on the same virtual row (consecutive diagonals, consecutive addresses).
// Every sum has a fixed order, so the result is the same from run to run; the order differs from
// lastq_kernel's (and from the CPU reference's double sums), which moves the vectors by float32
// rounding only: the tests' documented ties (tests/gpu/test_flex_gpu.c) cover both forms.
#include "gpu/gpu_flex_lastq.cuh"
#include "gpu/mma.cuh"

#define LQ_BS     GF_LASTQ_BS
#define LQ_KCHUNK GF_LASTQ_KCHUNK
#define LQ_SUB    64  // keys per tile
#define LQ_WARPS  4
#define LQ_DIAGS  (LQ_BS + LQ_SUB - 1) // diagonals a tile touches
#define LQ_DK     11  // a thread's diagonal partials per column parity: k = nt - half - 2 mt + 3
#define LQ_DC     (8 * LQ_DK) // columns of the partials array (88)
#define LQ_LDD    104 // its row pitch in floats (= 8 mod 32: a float2 store's 16 lanes on distinct banks)

template <int D> struct lq_smem {
    static constexpr int ROW = D + 8; // h16 per key row (16 bytes of padding: ldmatrix banks)
    static constexpr size_t k = (size_t)2 * LQ_SUB * ROW * 2; // 2 stages; Q's rows at the start
    static constexpr size_t p = (size_t)LQ_WARPS * 8 * LQ_LDD * 4; // 32 virtual rows
    static constexpr size_t sl = (size_t)(LQ_KCHUNK + LQ_BS) * 4;
    static constexpr size_t col = (size_t)LQ_WARPS * LQ_SUB * 4;
    static constexpr size_t bytes(bool acc) { return k + (acc ? p + sl + col : 0); }
};
static_assert(2 * LQ_SUB == LQ_BS, "Q's 128 rows are staged in the two key stages");
static_assert(LQ_WARPS * 32 == LQ_BS, "a warp owns 32 of the 128 rows");

template <int D, bool ACCUM>
__global__ void __launch_bounds__(LQ_WARPS * 32, 3) lastq_mma_kernel(gf_lastq_args a)
{
    typedef lq_smem<D> L;
    constexpr int ROW = L::ROW, CH = D / 8, KS = D / 16, NT = LQ_SUB / 8, NTH = LQ_WARPS * 32;
    extern __shared__ __align__(16) unsigned char lq_smem_raw[];
    h16 *sK = (h16 *)lq_smem_raw;
    float *sP = (float *)(lq_smem_raw + L::k);
    float *sl = (float *)(lq_smem_raw + L::k + L::p);
    float *colpart = (float *)(lq_smem_raw + L::k + L::p + L::sl);

    const int h = blockIdx.x, chunk = blockIdx.y, nch = gridDim.y, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31, gq = lane >> 2, t4 = lane & 3;
    const int n = a.n, H = a.H;
    const int g = gf_kv_head(h, H, a.Hk, a.interleave);
    const int c0 = chunk * LQ_KCHUNK;
    const int keys = n - c0 < LQ_KCHUNK ? n - c0 : LQ_KCHUNK;
    const int nsub = (keys + LQ_SUB - 1) / LQ_SUB;

    // the last 128 query rows of head h, through the key stages, into A fragments
    for (int c = tid; c < LQ_BS * CH; c += NTH) {
        const int r = c / CH, ch = c % CH;
        gpu_cp_async16(sK + r * ROW + ch * 8, a.q + ((size_t)(n - LQ_BS + r) * H + h) * D + ch * 8,
                       true);
    }
    gpu_cp_async_commit();
    gpu_cp_async_wait<0>();
    __syncthreads();
    const int jm = lane >> 3, li = lane & 7; // ldmatrix: which 8x8 matrix this lane addresses
    unsigned qa[2][KS][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
            gpu_ldmatrix_x4(qa[mt][kk],
                            sK + (warp * 32 + mt * 16 + li + (jm % 2) * 8) * ROW + kk * 16 + (jm / 2) * 8);
    __syncthreads(); // every warp holds its rows before the key tiles overwrite them

    const h16 *kh = a.k + (size_t)g * a.k_head;
    auto load_k = [&](int sub, int buf) {
        h16 *dst = sK + buf * LQ_SUB * ROW;
        const int j0 = c0 + sub * LQ_SUB;
        for (int c = tid; c < LQ_SUB * CH; c += NTH) {
            const int r = c / CH, ch = c % CH, j = j0 + r;
            const bool ok = j < n;
            const h16 *src = ok ? kh + (size_t)gf_kv_row(a.tbl, a.bstride, j) * a.k_tok + ch * 8 : a.k;
            gpu_cp_async16(dst + r * ROW + ch * 8, src, ok);
        }
    };

    // this thread's rows: ri = 2 mt + half -> row warp * 32 + mt * 16 + gq + 8 half
    float m[4], l[4], mrow[4], il[4];
#pragma unroll
    for (int ri = 0; ri < 4; ri++) {
        m[ri] = -INFINITY;
        l[ri] = 0.f;
        mrow[ri] = il[ri] = 0.f;
        if (ACCUM) {
            const int row = warp * 32 + (ri >> 1) * 16 + gq + (ri & 1) * 8;
            mrow[ri] = a.m2[h * LQ_BS + row];
            il[ri] = a.inv_l[h * LQ_BS + row];
        }
    }
    if (ACCUM)
        for (int i = tid; i < LQ_KCHUNK + LQ_BS; i += NTH) sl[i] = 0.f;

    // the key-block means (stats pass, one head per KV group): keys ascending, float32, as
    // avg_k_kernel sums them (the same bits); thread e owns dimension e
    const bool do_avg = !ACCUM && a.avg_k &&
                        (a.interleave ? h < a.Hk : h % (H / a.Hk) == 0) && tid < D;
    float ksum = 0.f;

    load_k(0, 0);
    gpu_cp_async_commit();
    for (int sub = 0; sub < nsub; sub++) {
        const int buf = sub & 1;
        if (sub + 1 < nsub) {
            load_k(sub + 1, buf ^ 1);
            gpu_cp_async_commit();
            gpu_cp_async_wait<1>();
        } else {
            gpu_cp_async_wait<0>();
        }
        __syncthreads();
        const h16 *cK = sK + buf * LQ_SUB * ROW;
        if (do_avg) {
            const int j0 = c0 + sub * LQ_SUB;
            for (int r = 0; r < LQ_SUB && j0 + r < n; r++) ksum += h16_to(cK[r * ROW + tid]);
            if ((sub & 1) || sub + 1 == nsub) { // the 128-key block is complete
                const int b = j0 / LQ_BS, nb = (n + LQ_BS - 1) / LQ_BS;
                const int j1 = (b + 1) * LQ_BS < n ? (b + 1) * LQ_BS : n;
                a.avg_k[((size_t)g * nb + b) * D + tid] = ksum / (float)(j1 - b * LQ_BS);
                ksum = 0.f;
            }
        }
        float s[2][NT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                unsigned b[4];
                gpu_ldmatrix_x4(b, cK + ((nt + jm / 2) * 8 + li) * ROW + kk * 16 + (jm % 2) * 8);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    gpu_mma_h16(s[mt][nt], qa[mt][kk], b[0], b[1]);
                    gpu_mma_h16(s[mt][nt + 1], qa[mt][kk], b[2], b[3]);
                }
            }
        }

        // log2-scaled scores; the corner-causal mask (key j > the row's position) on the tiles
        // that reach the last 128 positions (keys past n are there too: zeros, masked)
        const int j0 = c0 + sub * LQ_SUB;
        const bool edge = j0 + LQ_SUB - 1 > n - LQ_BS;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = s[mt][nt][e] * a.scale_log2;
                    if (edge) {
                        const int j = j0 + nt * 8 + 2 * t4 + (e & 1);
                        const int t_row = n - LQ_BS + warp * 32 + mt * 16 + gq + (e >> 1) * 8;
                        if (j > t_row) v = -INFINITY;
                    }
                    s[mt][nt][e] = v;
                }

        if (!ACCUM) {
#pragma unroll
            for (int ri = 0; ri < 4; ri++) {
                const int mt = ri >> 1, e0 = (ri & 1) * 2;
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][e0], s[mt][nt][e0 + 1]));
                if (mx > -INFINITY) {
                    if (mx > m[ri]) {
                        l[ri] *= exp2f(m[ri] - mx);
                        m[ri] = mx;
                    }
                    float acc = 0.f;
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
                        acc += exp2f(s[mt][nt][e0] - m[ri]) + exp2f(s[mt][nt][e0 + 1] - m[ri]);
                    l[ri] += acc;
                }
            }
        } else {
            // the normalised weights (masked: exp2(-inf) = 0)
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int ri = mt * 2 + (e >> 1);
                        s[mt][nt][e] = exp2f(s[mt][nt][e] - mrow[ri]) * il[ri];
                    }
            // diagonal partials in registers: the thread's rows are r0 + {0, 8, 16, 24} (half,
            // mt) and its columns 8 nt + 2 t4 + e1, so value (mt, nt, half, e1) lies on the same
            // diagonal as its other rows' values at nt - half - 2 mt = const: 64 values -> 22
            // sums (rows ascending), written as virtual row 8 warp + gq, column 8 k + 2 t4 + e1
            {
                float dk[LQ_DK][2];
#pragma unroll
                for (int k = 0; k < LQ_DK; k++) dk[k][0] = dk[k][1] = 0.f;
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) dk[nt - (e >> 1) - 2 * mt + 3][e & 1] += s[mt][nt][e];
                float *drow = sP + (warp * 8 + gq) * LQ_LDD + 2 * t4;
#pragma unroll
                for (int k = 0; k < LQ_DK; k++) *(float2 *)(drow + 8 * k) = make_float2(dk[k][0], dk[k][1]);
            }
            // column sums of the warp's 32 rows (its 4 rows, then the 8 row lanes by butterfly)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e1 = 0; e1 < 2; e1++) {
                    float cs = ((s[0][nt][e1] + s[0][nt][2 + e1]) + s[1][nt][e1]) + s[1][nt][2 + e1];
                    cs += __shfl_xor_sync(0xffffffffu, cs, 4);
                    cs += __shfl_xor_sync(0xffffffffu, cs, 8);
                    cs += __shfl_xor_sync(0xffffffffu, cs, 16);
                    if (gq == 0) colpart[warp * LQ_SUB + nt * 8 + 2 * t4 + e1] = cs;
                }
            __syncthreads();
            if (tid < LQ_SUB) {
                const float v = ((colpart[tid] + colpart[LQ_SUB + tid]) + colpart[2 * LQ_SUB + tid]) +
                                colpart[3 * LQ_SUB + tid];
                const int j = j0 + tid;
                if (j < n) a.vert[(size_t)h * n + j] = v * (1.0f / LQ_BS);
            }
            // diagonal tt = col - row + 127 of this tile: the partials of virtual rows v = 8 w + gq
            // ascending (a fixed order), column c = tt - 103 + 32 w + gq; a warp's lanes read the
            // same virtual row (consecutive diagonals: consecutive addresses)
#pragma unroll
            for (int pass = 0; pass < 2; pass++) {
                const int wt0 = (tid & ~31) + pass * NTH, tt = tid + pass * NTH;
                if (wt0 >= LQ_DIAGS) break;
                float acc = 0.f;
#pragma unroll 8
                for (int v = 0; v < LQ_WARPS * 8; v++) {
                    const int c = tt - (LQ_BS - 1 - 3 * 8) + 32 * (v >> 3) + (v & 7);
                    if (c >= 0 && c < LQ_DC) acc += sP[v * LQ_LDD + c];
                }
                if (tt < LQ_DIAGS) sl[sub * LQ_SUB + tt] += acc;
            }
        }
        __syncthreads(); // the stage and the partials are free for the next tile
    }

    if (!ACCUM) {
        // the 4 lanes of each row: a butterfly, every lane ends with the same (m, l)
#pragma unroll
        for (int ri = 0; ri < 4; ri++) {
#pragma unroll
            for (int o = 1; o <= 2; o <<= 1) {
                const float m1 = __shfl_xor_sync(0xffffffffu, m[ri], o);
                const float l1 = __shfl_xor_sync(0xffffffffu, l[ri], o);
                const float mm = fmaxf(m[ri], m1);
                l[ri] = mm > -INFINITY ? l[ri] * exp2f(m[ri] - mm) + l1 * exp2f(m1 - mm) : 0.f;
                m[ri] = mm;
            }
            if (t4 == 0) {
                const int row = warp * 32 + (ri >> 1) * 16 + gq + (ri & 1) * 8;
                a.partial[((size_t)h * nch + chunk) * LQ_BS + row] = make_float2(m[ri], l[ri]);
            }
        }
    } else {
        for (int i = tid; i < LQ_KCHUNK + LQ_BS - 1; i += NTH) {
            if (i < LQ_BS - 1) {
                a.carry_a[((size_t)h * nch + chunk) * LQ_BS + i] = sl[i];
            } else if (i < LQ_KCHUNK) {
                const int t = c0 + i;
                if (t < n) a.slash[(size_t)h * n + t] = sl[i] * (1.0f / LQ_BS);
            } else {
                a.carry_b[((size_t)h * nch + chunk) * LQ_BS + (i - LQ_KCHUNK)] = sl[i];
            }
        }
    }
}

template <int D, bool ACCUM> static int lastq_launch(const gf_lastq_args *a, cudaStream_t st)
{
    const size_t smem = lq_smem<D>::bytes(ACCUM);
    GF_CHECK(cudaFuncSetAttribute(lastq_mma_kernel<D, ACCUM>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)a->H, (unsigned)((a->n + LQ_KCHUNK - 1) / LQ_KCHUNK));
    lastq_mma_kernel<D, ACCUM><<<grid, LQ_WARPS * 32, smem, st>>>(*a);
    GF_LAUNCHED();
    return 0;
}

int gf_lastq_mma(int d, int accum, const gf_lastq_args *a, cudaStream_t st)
{
    if (a->n < 2 * LQ_BS) return GPU_FLEX_ERR_INVALID;
    if (d == 64) return accum ? lastq_launch<64, true>(a, st) : lastq_launch<64, false>(a, st);
    if (d == 128) return accum ? lastq_launch<128, true>(a, st) : lastq_launch<128, false>(a, st);
    return GPU_FLEX_ERR_INVALID;
}

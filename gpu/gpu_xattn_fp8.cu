// gpu/gpu_xattn_fp8.cu — XAttention's antidiagonal estimate scored in FP8 (e4m3) on Hopper's
// wgmma, opt-in (gpu/gpu_xattn_fp8.h says what and why; the reference: cpu_xattn_index_build_ex
// with fp8 1). Per call, the pre-pass and then one of the estimates:
//   - xattn_fp8_amax_kernel: each head's largest magnitude (queries of the chunk per query head,
//     all n keys per KV head, through the paged cache's block table), as float bits by atomicMax;
//   - xattn_fp8_quant_kernel: Q_r and K_r (gpu/gpu_xattn.cu's definitions: Q_r[i][t d + e] =
//     Q[i S + S - 1 - t][e], K_r[j][t d + e] = K[j S + t][e], zeros past n) times 2^e of their head
//     (cpu_xattn_fp8_exp's rule), converted to e4m3 (round to nearest even, satfinite), written
//     row-major in rows of L8 = S d rounded up to 128 bytes (the padding zeros) — once per call,
//     so the estimate reads plain contiguous rows;
//   - xattn_fp8_ws_kernel<true> (GPU_XATTN_FP8_WS, what gpu_tune xattn_fp8=1 runs): warp-
//     specialized, the copy engine loading each stage, two consumer warpgroups, each 128-wide
//     chunk's partial product promoted to fp32 (its comment below says why), key splits;
//     xattn_fp8_ws_kernel<false> (_WS_RAW) the same accumulating in the tensor cores;
//   - xattn_fp8_kernel (_WG): gpu/gpu_xattn_wg.cu's estimate (its comment has the structure: one
//     CTA = 128 reshaped query rows, two warpgroups, key tiles of 256, a 4-stage cp.async ring in
//     the 128-byte swizzle two stages ahead, one wgmma group in flight, the softmax and block sums
//     in registers, the fold at the end) with 128-wide reduction chunks (one 128-byte row is 128
//     e4m3 values) multiplied as 2 x 4 wgmma m64n128k32 e4m3 x e4m3 -> f32, accumulating in the
//     tensor cores; no key splits.
// Each multiplies the logits by the scale times 2^-(e_q + e_k). Measured (H200, 128K): BENCHMARKS.md,
// "XAttention's estimate in FP8".
extern "C" { // sparse/sparse.h is a C header without guards of its own
#include "sparse/sparse.h"
}
#include "gpu/gpu_xattn_fp8.h"
#include "gpu/gpu_xattn_impl.cuh"
#include "gpu/mma.cuh"
#include "gpu/tma.cuh"
#include "gpu/wgmma.cuh"
#include <cudaTypedefs.h>
#include <cuda_fp8.h>
#include <math.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define XW_SM90A 1
#endif

#define X8K 128 // reduction chunk: one 128-byte swizzled row of e4m3

// cpu_xattn_fp8_exp (cpu/xattn.c), the same arithmetic: amax * 2^e in (224, 448]
__host__ __device__ static inline int f8_exp(float amax)
{
    if (!(amax > 0.f) || isinf(amax)) return 0;
    int e = 8 - ilogbf(amax);
    if (ldexpf(amax, e) > 448.f) e--;
    return e;
}

__device__ __forceinline__ unsigned char f8_cvt(float x)
{
    return (unsigned char)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

// D (64x128, f32) = A (shared, K-major, e4m3) x B (shared, K-major, e4m3) over k32, + D when
// accumulate != 0 (PTX: wgmma.mma_async ... .e4m3.e4m3 has no transpose operands).
__device__ __forceinline__ void f8_wgmma_m64n128k32(float *d, uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
                 "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
                 "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
                 "}, %64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
                   "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
                   "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
                   "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
                   "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
                   "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

// A warpgroup's 64 x 128 product of one reduction chunk (128 e4m3 wide) as 4 m64n128k32 into p,
// from zero, waited for: the partial product that the promoted kernels add to fp32 accumulators.
__device__ __forceinline__ void f8_chunk_part(float (&p)[64], const unsigned char *cA,
                                              const unsigned char *cB)
{
    gpu_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        f8_wgmma_m64n128k32(p, gpu_wgmma_desc_sw128(cA + kk * 32, 16, 1024),
                            gpu_wgmma_desc_sw128(cB + kk * 32, 16, 1024), kk > 0);
    gpu_wgmma_commit();
    gpu_wgmma_wait<0>();
    gpu_wgmma_fence_regs<64>(p);
}

// A warpgroup's 64 x 256 product of reduction chunk kc (128 e4m3 wide) as 2 x 4 m64n128k32;
// committed as one group, not waited for (xw_chunk_mma's fp8 twin: a k32 step of e4m3 is 32 bytes,
// as a k16 step of bf16, so the descriptors are the same).
__device__ __forceinline__ void f8_chunk_mma(float (&acc0)[64], float (&acc1)[64],
                                             const unsigned char *cA, const unsigned char *cB, int kc)
{
    gpu_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const uint64_t da = gpu_wgmma_desc_sw128(cA + kk * 32, 16, 1024);
        const int accum = kc > 0 || kk > 0;
        f8_wgmma_m64n128k32(acc0, da, gpu_wgmma_desc_sw128(cB + kk * 32, 16, 1024), accum);
        f8_wgmma_m64n128k32(acc1, da, gpu_wgmma_desc_sw128(cB + 128 * 128 + kk * 32, 16, 1024),
                            accum);
    }
    gpu_wgmma_commit();
}

// ---------------------------------------------------------------- the pre-pass

// The h16 row of head hh (query heads first, then KV heads) at position-row t (queries: row t of
// the chunk; keys: position t, through the block table), element e.
__device__ __forceinline__ const h16 *f8_src(const xargs &a, int hh, int t, int e)
{
    if (hh < a.H) return a.q + (size_t)t * a.q_tok + (size_t)hh * a.D + e;
    return a.k + (size_t)(hh - a.H) * a.k_head + (size_t)xw_key_row(a.tbl, a.bstride, t) * a.k_tok + e;
}

__global__ void __launch_bounds__(256) xattn_fp8_amax_kernel(xargs a, unsigned *amax)
{
    const int hh = blockIdx.y, vpr = a.D / 8;
    const int rows = hh < a.H ? a.n - a.q_pos0 : a.n;
    const long long total = (long long)rows * vpr;
    float m = 0.f;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < total;
         v += (long long)gridDim.x * blockDim.x) {
        const int t = (int)(v / vpr), e = (int)(v - (long long)t * vpr) * 8;
        const uint4 raw = *(const uint4 *)f8_src(a, hh, t, e);
        const h16 *hv = (const h16 *)&raw;
#pragma unroll
        for (int x = 0; x < 8; x++) m = fmaxf(m, fabsf(h16_to(hv[x])));
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0 && m > 0.f) atomicMax(&amax[hh], __float_as_uint(m));
}

__global__ void __launch_bounds__(256) xattn_fp8_quant_kernel(xargs a, unsigned char *q8,
                                                              unsigned char *k8)
{
    const int hh = blockIdx.y, isq = hh < a.H, ppr = a.L8 / 16;
    const int rows = isq ? a.nq8 : a.nrs;
    const int sh = f8_exp(__uint_as_float(a.amax[hh]));
    const long long total = (long long)rows * ppr;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < total;
         v += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(v / ppr), k0 = (int)(v - (long long)r * ppr) * 16;
        const int t = k0 / a.D, e = k0 - t * a.D;
        uint4 out = make_uint4(0, 0, 0, 0);
        if (t < a.S) {
            const int pos = isq ? (a.i0 + r) * a.S + a.S - 1 - t : r * a.S + t;
            if (pos < a.n) {
                const h16 *src = f8_src(a, hh, isq ? pos - a.q_pos0 : pos, e);
                const uint4 r0 = ((const uint4 *)src)[0], r1 = ((const uint4 *)src)[1];
                const h16 *h0 = (const h16 *)&r0, *h1 = (const h16 *)&r1;
                unsigned char *o = (unsigned char *)&out;
#pragma unroll
                for (int x = 0; x < 8; x++) {
                    o[x] = f8_cvt(ldexpf(h16_to(h0[x]), sh));
                    o[8 + x] = f8_cvt(ldexpf(h16_to(h1[x]), sh));
                }
            }
        }
        unsigned char *dst = isq ? q8 + ((size_t)hh * a.nq8 + r) * a.L8
                                 : k8 + ((size_t)(hh - a.H) * a.nrs + r) * a.L8;
        *(uint4 *)(dst + k0) = out;
    }
}

// ---------------------------------------------------------------- the estimate

static constexpr size_t f8_smem()
{
    return (size_t)XWST * (XW_A + XW_B) + 2 * XWM * sizeof(float) + 1024;
}

__global__ void __launch_bounds__(256, 1) xattn_fp8_kernel(xargs a)
{
#ifdef XW_SM90A
    extern __shared__ __align__(1024) unsigned char f8_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)f8_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sA = sm, *sB = sm + XWST * XW_A;
    float *mfin = (float *)(sB + XWST * XW_B), *linv = mfin + XWM;

    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int warp = (tid / 32) % 4, lane = tid % 32;
    const int tl = a.ntl - 1 - (int)blockIdx.y, h = blockIdx.x;
    const int g = a.interleave ? h % a.Hk : h / (a.H / a.Hk);
    const int ibase = a.i0 + (a.tile0 + tl) * XWM;
    const int ilast = min(ibase + XWM, a.nrs) - 1;
    const int S = a.S, n = a.n, L8 = a.L8;
    const int KC = L8 / X8K;
    const int steps = (ilast / XWN + 1) * KC;

    /* the loader: thread tid copies piece pc of rows r0 + 32 it (Q_r: 4 rows, K_r: 8) */
    const int pc = tid & 7, r0 = tid >> 3;
    const int swz = (pc ^ (r0 & 7)) << 4;
    const unsigned char *baseA[4];
    bool okA[4];
#pragma unroll
    for (int it = 0; it < 4; it++) {
        const int i = ibase + r0 + 32 * it;
        okA[it] = i < a.nrs;
        baseA[it] = okA[it] ? a.q8 + ((size_t)h * a.nq8 + (i - a.i0)) * L8 + pc * 16 : a.q8;
    }
    const unsigned char *kgb = a.k8 + (size_t)g * a.nrs * L8 + pc * 16;
    auto load = [&](int st) {
        const int buf = st % XWST, kt = st / KC, kc = st - kt * KC;
        unsigned char *dA = sA + buf * XW_A + swz, *dB = sB + buf * XW_B + swz;
#pragma unroll
        for (int it = 0; it < 4; it++)
            gpu_cp_async16(dA + (r0 + 32 * it) * 128, okA[it] ? baseA[it] + kc * X8K : a.q8, okA[it]);
#pragma unroll
        for (int it = 0; it < 8; it++) {
            const int j = kt * XWN + r0 + 32 * it;
            const bool vb = j < a.nrs;
            gpu_cp_async16(dB + (r0 + 32 * it) * 128, vb ? kgb + (size_t)j * L8 + kc * X8K : a.k8, vb);
        }
    };

    const int rw = wg * 64 + warp * 16 + lane / 4;
    const int iA = ibase + rw, iB = iA + 8;
    const bool okR0 = iA < a.nrs, okR1 = iB < a.nrs;
    const size_t prow = ((size_t)h * a.ntl + tl) * XWM + rw;
    const int wlo = ibase + wg * 64;
    const int rpb = a.rpb, gpb = rpb / 8, lg = __ffs(gpb) - 1, nb = a.nb, nkt = a.nkt;
    /* the logit scale with the operands' powers of two taken back */
    const int eq = f8_exp(__uint_as_float(a.amax[h])), ek = f8_exp(__uint_as_float(a.amax[a.H + g]));
    const float sc = a.scale_log2 * ldexpf(1.f, -(eq + ek));
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float acc0[64], acc1[64];
#pragma unroll
    for (int x = 0; x < 64; x++) acc0[x] = acc1[x] = 0.f;

#pragma unroll
    for (int s = 0; s < XWST - 2; s++) {
        if (s < steps) load(s);
        gpu_cp_async_commit();
    }
    const int ntile = steps / KC;
    for (int kt = 0; kt < ntile; kt++) {
        for (int kc = 0; kc < KC; kc++) {
            const int st = kt * KC + kc;
            gpu_cp_async_wait<XWST - 3>();
            gpu_fence_proxy_async();
            __syncthreads();
            if (st + XWST - 2 < steps) load(st + XWST - 2);
            gpu_cp_async_commit();
            const unsigned char *cA = sA + (st % XWST) * XW_A + wg * 64 * 128;
            const unsigned char *cB = sB + (st % XWST) * XW_B;
            f8_chunk_mma(acc0, acc1, cA, cB, kc);
            gpu_wgmma_wait<1>();
        }
        gpu_wgmma_wait<0>();
        gpu_wgmma_fence_regs<64>(acc0);
        gpu_wgmma_fence_regs<64>(acc1);
        xw_tile_end(
            acc0, acc1, S, n, rpb, gpb, lg, sc, kt, wlo, iA, iB, okR0, okR1, lane, m0, m1, l0, l1,
            [&](int J, int r8, float v) { a.P[(prow + r8) * nb + J] = v; },
            [&](int r8, float m) { a.Mt[(prow + r8) * nkt + kt] = m; });
    }
    xw_rows_final(mfin, linv, rw, lane, okR0, okR1, m0, m1, l0, l1);
    __syncthreads();

    const int tpb = XWM / rpb;
    const size_t p0 = ((size_t)h * a.ntl + tl) * XWM;
    for (int qb = 0; qb < tpb; qb++) {
        const int I = ibase / rpb + qb;
        if ((long long)I * rpb >= a.nrs) break;
        float *dst = a.A + ((size_t)h * (nb - a.q0) + (I - a.q0)) * nb;
        for (int J = tid; J <= I; J += 256) {
            const int kt = (int)((long long)J * rpb / XWN);
            float s = 0.f;
            for (int r = qb * rpb; r < (qb + 1) * rpb; r++) {
                if (ibase + r >= a.nrs) break;
                s += a.P[(p0 + r) * nb + J] * exp2f(a.Mt[(p0 + r) * nkt + kt] - mfin[r]) * linv[r];
            }
            dst[J] = s;
        }
    }
#endif
}

// ---------------------------------------------------------------- the estimate, warp-specialized

// The same estimate with the copy engine: one thread of a producer warpgroup loads each stage's
// Q_r chunk (128 rows x 128 bytes) and K_r chunk (256 x 128) with two TMA copies (3-D tensor maps
// (L8, rows, head) over the pre-pass's buffers, 128-byte swizzled: the layout the descriptors
// read; rows past a head's end arrive as zeros) onto the stage's "full" barrier, once its "empty"
// barrier says both consumers' wgmmas of the chunk it held are done; two consumer warpgroups (64
// rows each) only wait, multiply and free slots (gpu/gpu_xattn_ws.cu's consumers: no block-wide
// barrier; P and Mt row-minor), and split a query tile's keys over CTAs as that kernel does (grid
// z; the splits' (max, sum) to a.ML, merged and folded by gpu_xattn_fold_launch).
// PROMOTE: Hopper's tensor cores accumulate FP8 products in D with a narrower alignment than fp32
// (DeepSeek-V3's report: about 14 bits kept; measured here, 2026-11-29: block masses off the
// CPU's FP8 scoring by up to 1.3 % of the row mass over S d = 2048 without it); the promoted
// kernel takes each chunk's 128-wide partial product from zero (4 wgmma k32, per 128 keys), waits
// for it and adds it to fp32 accumulators in registers — the fix DeepSeek-V3 describes — at the
// cost of the wgmmas' overlap within a warpgroup.
#define X8_THREADS 384

static constexpr size_t f8ws_smem()
{
    return (size_t)XWST * (XW_A + XW_B) + 2 * XWM * sizeof(float) + 2 * XWST * 8 + 1024;
}

template <bool PROMOTE>
__global__ void __launch_bounds__(X8_THREADS, 1)
    xattn_fp8_ws_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                        xargs a)
{
#ifdef XW_SM90A
    extern __shared__ __align__(1024) unsigned char f8_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)f8_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *sA = sm, *sB = sm + XWST * XW_A;
    float *mfin = (float *)(sB + XWST * XW_B), *linv = mfin + XWM;
    const uint32_t bars = gpu_smem_addr(linv + XWM);
#define X8_FULL(s) (bars + 8 * (s))
#define X8_EMPTY(s) (bars + 8 * (XWST + (s)))

    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int tl = a.ntl - 1 - (int)blockIdx.y, h = blockIdx.x;
    const int g = a.interleave ? h % a.Hk : h / (a.H / a.Hk);
    const int ibase = a.i0 + (a.tile0 + tl) * XWM;
    const int ilast = min(ibase + XWM, a.nrs) - 1;
    const int S = a.S, n = a.n;
    const int KC = a.L8 / X8K;
    const int sp = blockIdx.z, kt_lo = sp * a.kps, kt_hi = min(ilast / XWN + 1, kt_lo + a.kps);
    const int ntile = kt_hi > kt_lo ? kt_hi - kt_lo : 0, steps = ntile * KC;
    const size_t pt = (size_t)h * a.ntl + tl;

    if (tid == 0) {
        for (int s = 0; s < XWST; s++) {
            gpu_mbar_init(X8_FULL(s), 1);  /* the producer's expect_tx */
            gpu_mbar_init(X8_EMPTY(s), 8); /* lane 0 of each consumer warp */
        }
        gpu_mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tq) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tk) : "memory");
            for (int st = 0; st < steps; st++) {
                const int s = st % XWST, kt = kt_lo + st / KC, kc = st % KC;
                gpu_mbar_wait(X8_EMPTY(s), ((st / XWST) & 1) ^ 1);
                gpu_mbar_expect_tx(X8_FULL(s), XW_A + XW_B);
                gpu_tma_load_3d(gpu_smem_addr(sA + s * XW_A), &tq, kc * X8K, ibase - a.i0, h, X8_FULL(s));
                gpu_tma_load_3d(gpu_smem_addr(sB + s * XW_B), &tk, kc * X8K, kt * XWN, g, X8_FULL(s));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");

    const int cw = wg - 1, ct = tid - 128, warp = (ct / 32) % 4, lane = tid % 32;
    const bool lane0 = lane == 0;
    const int rw = cw * 64 + warp * 16 + lane / 4;
    const int iA = ibase + rw, iB = iA + 8;
    const bool okR0 = iA < a.nrs, okR1 = iB < a.nrs;
    const int wlo = ibase + cw * 64;
    const int rpb = a.rpb, gpb = rpb / 8, lg = __ffs(gpb) - 1, nb = a.nb, nkt = a.nkt;
    float *Pt = a.P + pt * nb * XWM, *Mtt = a.Mt + pt * nkt * XWM;
    const int eq = f8_exp(__uint_as_float(a.amax[h])), ek = f8_exp(__uint_as_float(a.amax[a.H + g]));
    const float sc = a.scale_log2 * ldexpf(1.f, -(eq + ek));
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float acc0[64], acc1[64];
#pragma unroll
    for (int x = 0; x < 64; x++) acc0[x] = acc1[x] = 0.f;

    for (int kt = kt_lo; kt < kt_hi; kt++) {
        if (PROMOTE) {
            float p[64];
#pragma unroll
            for (int x = 0; x < 64; x++) acc0[x] = acc1[x] = 0.f;
            for (int kc = 0; kc < KC; kc++) {
                const int st = (kt - kt_lo) * KC + kc, s = st % XWST;
                gpu_mbar_wait(X8_FULL(s), (st / XWST) & 1);
                const unsigned char *cA = sA + s * XW_A + cw * 64 * 128;
                const unsigned char *cB = sB + s * XW_B;
                f8_chunk_part(p, cA, cB);
#pragma unroll
                for (int x = 0; x < 64; x++) acc0[x] += p[x];
                f8_chunk_part(p, cA, cB + 128 * 128);
                gpu_mbar_arrive_if(X8_EMPTY(s), lane0); /* both halves read: the slot is free */
#pragma unroll
                for (int x = 0; x < 64; x++) acc1[x] += p[x];
            }
        } else {
            for (int kc = 0; kc < KC; kc++) {
                const int st = (kt - kt_lo) * KC + kc, s = st % XWST;
                gpu_mbar_wait(X8_FULL(s), (st / XWST) & 1);
                const unsigned char *cA = sA + s * XW_A + cw * 64 * 128;
                const unsigned char *cB = sB + s * XW_B;
                f8_chunk_mma(acc0, acc1, cA, cB, kc);
                gpu_wgmma_wait<1>();
                gpu_mbar_arrive_if(X8_EMPTY((st + XWST - 1) % XWST), lane0 && kc > 0);
            }
            gpu_wgmma_wait<0>();
            gpu_wgmma_fence_regs<64>(acc0);
            gpu_wgmma_fence_regs<64>(acc1);
            gpu_mbar_arrive_if(X8_EMPTY(((kt - kt_lo) * KC + KC - 1) % XWST), lane0);
        }
        xw_tile_end(
            acc0, acc1, S, n, rpb, gpb, lg, sc, kt, wlo, iA, iB, okR0, okR1, lane, m0, m1, l0, l1,
            [&](int J, int r8, float v) { Pt[(size_t)J * XWM + rw + r8] = v; },
            [&](int r8, float m) { Mtt[(size_t)kt * XWM + rw + r8] = m; });
    }
    if (a.nsplit > 1) {
        if ((lane & 3) == 0) {
            float2 *ml = (float2 *)a.ML + (pt * a.nsplit + sp) * XWM;
            ml[rw] = okR0 ? make_float2(m0, l0) : make_float2(-INFINITY, 0.f);
            ml[rw + 8] = okR1 ? make_float2(m1, l1) : make_float2(-INFINITY, 0.f);
        }
        return;
    }
    xw_rows_final(mfin, linv, rw, lane, okR0, okR1, m0, m1, l0, l1);
    gpu_bar_sync(1, 256);
    /* the fold (gpu/gpu_xattn_ws.cu's xw_fold: P and Mt row-minor) */
    const int tpb = XWM / rpb;
    for (int qb = 0; qb < tpb; qb++) {
        const int I = ibase / rpb + qb;
        if ((long long)I * rpb >= a.nrs) break;
        float *dst = a.A + ((size_t)h * (nb - a.q0) + (I - a.q0)) * nb;
        for (int J = ct; J <= I; J += 256) {
            const int kt = (int)((long long)J * rpb / XWN);
            const float *pj = Pt + (size_t)J * XWM, *mj = Mtt + (size_t)kt * XWM;
            float s = 0.f;
            for (int r = qb * rpb; r < (qb + 1) * rpb; r++) {
                if (ibase + r >= a.nrs) break;
                s += pj[r] * exp2f(mj[r] - mfin[r]) * linv[r];
            }
            dst[J] = s;
        }
    }
#undef X8_FULL
#undef X8_EMPTY
#endif
}

// ---------------------------------------------------------------- host

/* cuTensorMapEncodeTiled from the driver, looked up once through the runtime (no -lcuda) */
static PFN_cuTensorMapEncodeTiled_v12000 f8_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = NULL;
        cudaGetLastError();
        return (PFN_cuTensorMapEncodeTiled_v12000)f;
    }();
    return fn;
}

/* bytes (L8, rows, heads), boxes of (128, box_rows, 1), 128-byte swizzled, zeros outside */
static int f8_map(CUtensorMap *m, const void *base, int L8, int rows, int heads, int box_rows)
{
    const cuuint64_t dims[3] = {(cuuint64_t)L8, (cuuint64_t)rows, (cuuint64_t)heads};
    const cuuint64_t strides[2] = {(cuuint64_t)L8, (cuuint64_t)L8 * rows};
    const cuuint32_t box[3] = {X8K, (cuuint32_t)box_rows, 1}, es[3] = {1, 1, 1};
    const CUresult r = f8_encoder()(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, (void *)base, dims, strides,
                                    box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r == CUDA_SUCCESS) return 0;
    fprintf(stderr, "gpu_xattn_fp8: cuTensorMapEncodeTiled failed (CUresult %d)\n", (int)r);
    return GPU_FLEX_ERR_DEVICE;
}

static size_t f8_r256(size_t b)
{
    return (b + 255) / 256 * 256;
}

int gpu_xattn_fp8_usable(const gpu_xattn_ws *w, int rpb, int nsplit)
{
    if (!w->fp8 || w->d % 16 || !gpu_xattn_wg_usable(rpb)) return 0;
    if (w->fp8 != GPU_XATTN_FP8_WG) return f8_encoder() != NULL;
    return nsplit == 1; /* the 256-thread kernel does not split keys */
}

/* the buffers' parts for stride S: Q_r (H, nq8, L8), K_r (Hk, nrs, L8), amax (H + Hk) */
static void f8_parts(int n, int pos0, int H, int Hk, int D, int S, size_t *qb, size_t *kb, size_t *ab)
{
    const size_t L8 = ((size_t)S * D + X8K - 1) / X8K * X8K, nrs = ((size_t)n + S - 1) / S;
    *qb = f8_r256((size_t)H * (nrs - (size_t)pos0 / S) * L8);
    *kb = f8_r256((size_t)Hk * nrs * L8);
    *ab = f8_r256((size_t)(H + Hk) * sizeof(unsigned));
}

extern "C" size_t gpu_xattn_fp8_bytes(int n, int pos0, int H, int Hk, int D)
{
    size_t most = 0;
    for (int S = 1; S <= 16; S *= 2) { /* the strides of block 128 that the estimate takes */
        size_t qb, kb, ab;
        f8_parts(n, pos0, H, Hk, D, S, &qb, &kb, &ab);
        if (qb + kb + ab > most) most = qb + kb + ab;
    }
    return most;
}

extern "C" int gpu_xattn_ws_fp8_at(gpu_xattn_ws *w, int on, void *mem, size_t bytes)
{
    if (!w || !mem || on < 0 || on > GPU_XATTN_FP8_WS_RAW) return GPU_FLEX_ERR_INVALID;
    if (w->f8 && !w->f8_borrowed) cudaFree(w->f8);
    w->fp8 = on;
    w->f8 = (unsigned char *)mem;
    w->f8_bytes = bytes;
    w->f8_borrowed = 1;
    return 0;
}

int gpu_xattn_fp8_prep(gpu_xattn_ws *w, xargs &a, cudaStream_t st)
{
    a.L8 = (a.S * a.D + X8K - 1) / X8K * X8K;
    a.nq8 = a.nrs - a.i0;
    size_t qb, kb, ab;
    f8_parts(a.n, a.q_pos0, a.H, a.Hk, a.D, a.S, &qb, &kb, &ab);
    const size_t need = qb + kb + ab;
    if (need > w->f8_bytes && w->f8_borrowed) return 1;
    if (need > w->f8_bytes) {
        if (w->f8) cudaFree(w->f8); /* synchronous: no kernel still reads it */
        w->f8 = NULL;
        w->f8_bytes = 0;
        const cudaError_t e = cudaMalloc(&w->f8, need);
        if (e != cudaSuccess) {
            cudaGetLastError();
            w->f8 = NULL;
            return e == cudaErrorMemoryAllocation ? GPU_FLEX_ERR_NOMEM : GPU_FLEX_ERR_DEVICE;
        }
        w->f8_bytes = need;
    }
    unsigned char *q8 = w->f8, *k8 = q8 + qb;
    unsigned *amax = (unsigned *)(k8 + kb);
    a.q8 = q8;
    a.k8 = k8;
    a.amax = amax;
    GF_CHECK(cudaMemsetAsync(amax, 0, (size_t)(a.H + a.Hk) * sizeof(unsigned), st));
    const int heads = a.H + a.Hk;
    xattn_fp8_amax_kernel<<<dim3(64, heads), 256, 0, st>>>(a, amax);
    GF_LAUNCHED();
    xattn_fp8_quant_kernel<<<dim3(128, heads), 256, 0, st>>>(a, q8, k8);
    GF_LAUNCHED();
    return 0;
}

int gpu_xattn_fp8_launch(const gpu_xattn_ws *w, const xargs &a, cudaStream_t st)
{
    if (w->fp8 != GPU_XATTN_FP8_WG) {
        CUtensorMap tq, tk;
        int rc = f8_map(&tq, a.q8, a.L8, a.nq8, a.H, XWM);
        if (!rc) rc = f8_map(&tk, a.k8, a.L8, a.nrs, a.Hk, XWN);
        if (rc) return rc;
        const size_t smem = f8ws_smem();
        const dim3 grid(a.H, a.ntl, a.nsplit);
        if (w->fp8 == GPU_XATTN_FP8_WS) {
            GF_CHECK(cudaFuncSetAttribute(xattn_fp8_ws_kernel<true>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            xattn_fp8_ws_kernel<true><<<grid, X8_THREADS, smem, st>>>(tq, tk, a);
        } else {
            GF_CHECK(cudaFuncSetAttribute(xattn_fp8_ws_kernel<false>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            xattn_fp8_ws_kernel<false><<<grid, X8_THREADS, smem, st>>>(tq, tk, a);
        }
        GF_LAUNCHED();
        return a.nsplit > 1 ? gpu_xattn_fold_launch(a, st) : 0;
    }
    const size_t smem = f8_smem();
    GF_CHECK(cudaFuncSetAttribute(xattn_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
    xattn_fp8_kernel<<<dim3(a.H, a.ntl), 256, smem, st>>>(a);
    GF_LAUNCHED();
    return 0;
}

extern "C" int gpu_xattn_ws_fp8(gpu_xattn_ws *w, int on)
{
    if (!w || on < 0 || on > GPU_XATTN_FP8_WS_RAW) return GPU_FLEX_ERR_INVALID;
    w->fp8 = on;
    if (!on && w->f8 && !w->f8_borrowed) {
        cudaFree(w->f8);
        w->f8 = NULL;
        w->f8_bytes = 0;
    }
    return 0;
}

extern "C" int gpu_xattn_ws_fp8_used(const gpu_xattn_ws *w)
{
    return w && w->fp8_used;
}

// ---------------------------------------------------------------- the conversion, for the tests

__global__ void xattn_fp8_cvt_kernel(const float *in, int sh, unsigned char *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f8_cvt(ldexpf(in[i], sh));
}

extern "C" int gpu_xattn_fp8_convert_host(int device, const float *in, int shift, uint8_t *out, int n)
{
    if (n < 1 || !in || !out) return GPU_FLEX_ERR_INVALID;
    if (cudaSetDevice(device) != cudaSuccess) {
        cudaGetLastError();
        return GPU_FLEX_ERR_DEVICE;
    }
    float *di = NULL;
    unsigned char *dout = NULL;
    int rc = 0;
    if (cudaMalloc(&di, (size_t)n * sizeof(float)) != cudaSuccess || cudaMalloc(&dout, (size_t)n) != cudaSuccess ||
        cudaMemcpy(di, in, (size_t)n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        rc = GPU_FLEX_ERR_DEVICE;
    if (!rc) {
        xattn_fp8_cvt_kernel<<<(n + 255) / 256, 256>>>(di, shift, dout, n);
        if (cudaGetLastError() != cudaSuccess || cudaMemcpy(out, dout, (size_t)n, cudaMemcpyDeviceToHost) != cudaSuccess)
            rc = GPU_FLEX_ERR_DEVICE;
    }
    cudaGetLastError();
    if (di) cudaFree(di);
    if (dout) cudaFree(dout);
    return rc;
}

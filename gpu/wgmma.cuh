/* gpu/wgmma.cuh — Hopper's warpgroup MMA (wgmma, sm_90a only) for the attention kernel: the
 * shared-memory matrix descriptor, the ordering instructions, and the h16 m64nNk16 shapes it
 * uses. PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate".
 *
 * Shared-memory operands here use the no-swizzle ("interleave") canonical layout: the matrix is
 * cut into core matrices of 8 rows x 16 bytes, each stored as 128 contiguous bytes (row r of the
 * core matrix at byte 16 r). A descriptor gives the start address and two strides, in bytes:
 *   K-major operand (K contiguous inside a core-matrix row), layout ((8,m),(T,2k)):((1T,SBO),(1,LBO)):
 *     LBO = distance between core matrices adjacent along K, SBO = along M (or N);
 *   MN-major operand (M or N contiguous inside a row), layout ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)):
 *     SBO = distance between core matrices adjacent along M/N, LBO = along K.
 * Descriptor bits: [0,14) address >> 4, [16,30) LBO >> 4, [32,46) SBO >> 4, [62,64) swizzle (0;
 * 1 for the 128-byte swizzle, gpu_wgmma_desc_sw128).
 *
 * Order of use: operands written to shared memory by ordinary or cp.async stores need
 * fence.proxy.async before the barrier that publishes them (wgmma reads through the async proxy);
 * wgmma.fence before the first wgmma that reads registers written by ordinary code; commit_group
 * and wait_group before the accumulators are read. gpu_wgmma_fence_regs keeps the compiler from
 * moving accesses of the accumulator registers across those points. */
#ifndef TANDEM_GPU_WGMMA_CUH
#define TANDEM_GPU_WGMMA_CUH
#include <stdint.h>

__device__ __forceinline__ uint64_t gpu_wgmma_desc(const void *smem, uint32_t lbo, uint32_t sbo)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
}

__device__ __forceinline__ void gpu_fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void gpu_wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void gpu_wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void gpu_wgmma_wait0()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* wait until at most N of this warpgroup's committed groups are still in flight */
template <int N> __device__ __forceinline__ void gpu_wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* 128-byte swizzled operand (descriptor bits [62,64) = 1): rows of 128 bytes whose 16-byte
 * chunks are permuted, chunk c of row r stored at chunk c ^ (r % 8), in atoms of 8 rows (1024
 * bytes, 1024-aligned) -- what the copy engine writes with CU_TENSOR_MAP_SWIZZLE_128B.
 *   K-major: SBO = bytes between 8-row groups along M/N (1024 for packed rows); LBO unused (a
 *     k16 step, 32 bytes, never leaves the 128-byte row); step along K by moving the start
 *     address 32 bytes within the row.
 *   MN-major: 64 M/N elements per 128-byte row, K rows at 128 bytes; LBO = bytes between the
 *     64-wide M/N blocks, SBO = bytes between 8-row groups along K. */
__device__ __forceinline__ uint64_t gpu_wgmma_desc_sw128(const void *smem, uint32_t lbo, uint32_t sbo)
{
    return gpu_wgmma_desc(smem, lbo, sbo) | (1ull << 62);
}
template <int N> __device__ __forceinline__ void gpu_wgmma_fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* D (64x128, f32) = A (shared, K-major) x B (shared, K-major), + D when accumulate != 0.
 * One warpgroup; A is 64 x 16, B is 16 x 128 (both described by gpu_wgmma_desc). */
__device__ __forceinline__ void gpu_wgmma_ss_m64n128(float *d, uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." GPU_H16_PTX "." GPU_H16_PTX " {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
                 "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
                 "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
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

/* D (64x128, f32) += A (registers: the m16n8k16 A fragment of each warp's 16 rows) x B (shared,
 * MN-major, i.e. transposed: B's 128 columns are contiguous in each row of 16). */
__device__ __forceinline__ void gpu_wgmma_rs_m64n128_tb(float *d, const unsigned a[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." GPU_H16_PTX "." GPU_H16_PTX " {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
                 "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
                 "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
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
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* D (64x64, f32) = A (shared, K-major) x B (shared, K-major), + D when accumulate != 0. */
__device__ __forceinline__ void gpu_wgmma_ss_m64n64(float *d, uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." GPU_H16_PTX "." GPU_H16_PTX " {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
                   "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
                   "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
}

#endif

/* gpu/mma.cuh — the few PTX instructions the attention kernels are built from (sm_80+):
 * asynchronous 16-byte global->shared copies, ldmatrix, and the h16 tensor-core MMA
 * m16n8k16 with float32 accumulators. Fragment layouts (PTX ISA, "mma.m16n8k16"): lane l holds
 *   A (16x16, row-major): a0 (row l/4, cols 2(l%4)+{0,1}), a1 (row +8), a2 (cols +8), a3 (both)
 *   B (16x8, k x n):      b0 (k 2(l%4)+{0,1}, n l/4), b1 (k +8)
 *   C (16x8):             c0,c1 (row l/4, cols 2(l%4)+{0,1}), c2,c3 (row +8)
 * Two adjacent C tiles of a row block are exactly one A fragment (FlashAttention-2's trick for
 * feeding P back into the tensor cores without shared memory). */
#ifndef TANDEM_GPU_MMA_CUH
#define TANDEM_GPU_MMA_CUH
#include "gpu/h16.cuh"

/* 16 bytes global -> shared, asynchronous; valid == false writes 16 zero bytes (src unread). */
__device__ __forceinline__ void gpu_cp_async16(void *smem, const void *gmem, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void gpu_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void gpu_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void gpu_ldmatrix_x4(unsigned r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void gpu_ldmatrix_x4_trans(unsigned r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* c += a · b */
__device__ __forceinline__ void gpu_mma_h16(float c[4], const unsigned a[4], unsigned b0,
                                             unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." GPU_H16_PTX "." GPU_H16_PTX ".f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a · b, the m16n8k8 shape: a = {a0 (row l/4, k 2(l%4)+{0,1}), a1 (row +8)}, b = (k 2(l%4)+{0,1}, n l/4) */
__device__ __forceinline__ void gpu_mma_h16_k8(float c[4], unsigned a0, unsigned a1, unsigned b0)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." GPU_H16_PTX "." GPU_H16_PTX ".f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

/* Two floats as an h16x2 register: lo in the low half (the lower column of a fragment pair). */
__device__ __forceinline__ unsigned gpu_pack_h16(float lo, float hi)
{
    h16x2 v = h16x2_from(lo, hi);
    return *(unsigned *)&v;
}

#endif

/* gpu/tma.cuh — Hopper's copy engine (TMA: cp.async.bulk.tensor) and the shared-memory
 * transaction barriers (mbarrier) that its copies complete on, for the warp-specialized attention
 * kernel (gpu/attn_prefill_ws.cu). PTX ISA 8.x: "cp.async.bulk.tensor", "mbarrier".
 *
 * Protocol: a barrier is initialized once with the number of arrivals one phase needs
 * (gpu_mbar_init, then gpu_mbar_init_fence and a block-wide barrier before anyone uses it). A
 * producer announces the bytes the phase will receive (gpu_mbar_expect_tx, which is also its
 * arrival) and issues the copies naming the barrier; the phase completes when every arrival came
 * and every byte landed. Waiters spin on the parity of the phase they want (gpu_mbar_wait): phase
 * k of a barrier has parity k & 1; waiting on parity 1 of a fresh barrier returns at once (the
 * "previous" phase counts as complete), which lets a producer pass its first wait on a free slot.
 * All addresses are shared-memory (32-bit) addresses; the copies' tensor maps live in kernel
 * parameter space (__grid_constant__) and are named by their generic address. */
#ifndef TANDEM_GPU_TMA_CUH
#define TANDEM_GPU_TMA_CUH
#include <cuda.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t gpu_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void gpu_mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* after the inits, before the block-wide barrier that publishes them (also to the copy engine) */
__device__ __forceinline__ void gpu_mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void gpu_mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void gpu_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* arrive only where pred holds, without a branch (a branch between a wgmma and its wait makes
 * ptxas serialize the wgmmas) */
__device__ __forceinline__ void gpu_mbar_arrive_if(uint32_t bar, bool pred)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n"
                 ::"r"(bar), "r"((int)pred) : "memory");
}
__device__ __forceinline__ void gpu_mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* box of a 2-D / 3-D tensor map at element coordinates (c0 innermost) -> shared dst */
__device__ __forceinline__ void gpu_tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                                uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void gpu_tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                                int c2, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void gpu_tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                                int c2, int c3, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}

/* named barriers 1..15 (0 is __syncthreads'): sync waits, arrive only counts */
__device__ __forceinline__ void gpu_bar_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void gpu_bar_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void gpu_bar_arrive_if(int id, int threads, bool pred)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p bar.arrive %0, %1;\n}\n"
                 ::"r"(id), "r"(threads), "r"((int)pred) : "memory");
}

#endif

/* gpu/h16.cuh — h16, the 16-bit float type the CUDA plugin keeps weights, activations and the KV
 * cache in, and everything that names it (conversions, the PTX operand type, the cuBLAS and TMA
 * data types).
 *
 * One source, two builds (Makefile): libtandem_cuda.so with bf16, and libtandem_cuda_f16.so with
 * fp16 (compiled with -DGPU_H16_F16). bf16 checkpoints take the bf16 build (their values need
 * its range: fp16 stops at 65504); float32 and fp16 checkpoints take the fp16 one by default
 * (devices/cuda_plugin.c, --gpu-dtype): fp16 keeps 10 mantissa bits against bf16's 7, so
 * every weight, normalized activation, Q/K/V and cached key or value is rounded 8x more finely —
 * an fp16 checkpoint is uploaded exactly instead of losing 3 bits, and a float32 one loses 13
 * bits instead of 16. The arithmetic (float32 accumulation everywhere, float32 residual) is the
 * same in both builds; only where values are rounded to 16 bits differs.
 *
 * Host code converts with h16_bits_host / h16_float_host (model/dtype.c's round-to-nearest-even
 * conversions, which give the device conversions' bits). */
#ifndef TANDEM_GPU_H16_CUH
#define TANDEM_GPU_H16_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
extern "C" {
#include "model/ckpt/model.h"
}

#ifdef GPU_H16_F16
typedef __half h16;
typedef __half2 h16x2;
#define GPU_H16_NAME "fp16"
#define GPU_H16_PTX "f16"                             /* mma / wgmma operand type */
#define GPU_H16_CUDA CUDA_R_16F                       /* cuBLAS */
#define GPU_H16_TMA CU_TENSOR_MAP_DATA_TYPE_FLOAT16   /* cuTensorMapEncodeTiled */
#define GPU_H16_MODEL_DTYPE MODEL_DTYPE_F16           /* checkpoint tensors uploaded as they are */
static __device__ __forceinline__ h16 h16_from(float f) { return __float2half_rn(f); }
static __device__ __forceinline__ float h16_to(h16 h) { return __half2float(h); }
static __device__ __forceinline__ h16x2 h16x2_from(float lo, float hi)
{
    return __floats2half2_rn(lo, hi);
}
static __device__ __forceinline__ float2 h16x2_to(h16x2 v) { return __half22float2(v); }
static inline uint16_t h16_bits_host(float f) { return model_f32_to_f16(f); }
static inline float h16_float_host(uint16_t b) { return model_f16_to_f32(b); }
#else
typedef __nv_bfloat16 h16;
typedef __nv_bfloat162 h16x2;
#define GPU_H16_NAME "bf16"
#define GPU_H16_PTX "bf16"
#define GPU_H16_CUDA CUDA_R_16BF
#define GPU_H16_TMA CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
#define GPU_H16_MODEL_DTYPE MODEL_DTYPE_BF16
static __device__ __forceinline__ h16 h16_from(float f) { return __float2bfloat16(f); }
static __device__ __forceinline__ float h16_to(h16 h) { return __bfloat162float(h); }
static __device__ __forceinline__ h16x2 h16x2_from(float lo, float hi)
{
    return __floats2bfloat162_rn(lo, hi);
}
static __device__ __forceinline__ float2 h16x2_to(h16x2 v) { return __bfloat1622float2(v); }
static inline uint16_t h16_bits_host(float f) { return model_f32_to_bf16(f); }
static inline float h16_float_host(uint16_t b) { return model_bf16_to_f32(b); }
#endif

#endif

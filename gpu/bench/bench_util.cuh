/* gpu/bench/bench_util.cuh — what the standalone GPU benchmark tools share: CK(call) exits with
 * the CUDA error and its place (a tool, not the engine: the engine returns statuses). */
#ifndef TANDEM_GPU_BENCH_UTIL_CUH
#define TANDEM_GPU_BENCH_UTIL_CUH
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));           \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#endif

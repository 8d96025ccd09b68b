/* Helpers for the CUDA tests: opening the cuda device (or skipping: CI has no GPU), and the
 * single-op entry points of the test library beside each plugin (gpu/test/test_api.cu, in
 * $BUILD/libtandem_cuda_test.so and _f16_test.so) looked up with dlsym. */
#ifndef TANDEM_TESTS_GPU_UTIL_H
#define TANDEM_TESTS_GPU_UTIL_H
#include "model/ckpt/model.h"
#include "scheduler/accel.h"
#include <stdint.h>

typedef struct gpu_ops {
    const char *(*h16)(void); /* "bf16" or "fp16": the build's 16-bit type (gpu/h16.cuh) */
    int f16;                  /* h16 is fp16 */
    double ulp;               /* half the spacing of h16 numbers at 1: 2^-8 (bf16), 2^-11 (fp16) */
    int (*device_count)(void);
    int (*rmsnorm)(int T, int H, const float *x, const float *w, float eps, float *out);
    int (*rope)(int T, int n_heads, int n_kv, int hd, const float *qkv, const float *bias,
                const int *pos, const float *inv_freq, float *q, float *k, float *v);
    int (*swiglu)(int T, int I, const float *gu, float *h);
    int (*gemm)(int T, int N, int K, const float *x, const float *w, float *out);
    /* gpu/test/test_api.cu gpu_test_gemm_candidate: cuBLASLt candidate cand of the shape */
    int (*gemm_candidate)(int T, int N, int K, int ldc, int out_f32, int beta, const float *x,
                          const float *w, const float *c, int cand, float *out, int *n_cands,
                          int *splitk);
    /* gpu/test/test_api.cu gpu_test_gemm_small: gpu_gemm with gemm_small=rows_max */
    int (*gemm_small)(int rows_max, int sms, int T, int N, int K, int ldc, int out_f32, int beta,
                      const float *x, const float *w, const float *c, float *out);
    /* gpu/test/test_api.cu gpu_test_gemm_swiglu: gate/up + SwiGLU in the small-T kernel */
    int (*gemm_swiglu)(int rows_max, int sms, int T, int I, int K, const float *x, const float *w,
                       float *h);
    int (*attention)(int kernel, int T, int pos0, int n_heads, int n_kv, int hd, int window,
                     const float *q, const float *k, const float *v, float *out);
    int (*kv_quantize)(int dtype, int T, int n_kv, int hd, const float *x, unsigned char *q,
                       unsigned short *scales);
    int (*attention_sparse)(int kernel, int T, int pos0, int n_heads, int n_kv, int hd,
                            const float *q, const float *k, const float *v,
                            const int32_t *row_ptr, const int32_t *col, int nb, float *out);
    int (*decode_fused)(int fused, int H, int n_heads, int n_kv, int hd, int I, int pos,
                        const float *x, const float *attn_norm, const float *ffn_norm,
                        const float *w_qkv, const float *bias, const float *inv_freq,
                        const float *w_gu, float eps, float *q, float *k, float *v, float *h);
    int (*argmax)(int rows, int V, const float *x, int32_t *out); /* gpu/logits.cu */
} gpu_ops;

/* The plugin's two builds: 0 libtandem_cuda.so (bf16), 1 libtandem_cuda_f16.so (fp16). */
#define TG_BUILDS 2

/* Loads the build's test library, $BUILD/libtandem_cuda_test.so or _f16_test.so (BUILD defaults
 * to build; it loads its plugin beside it), and its entry points. Returns NULL with a reason in
 * why when it is missing or no CUDA device is present: skip then. */
const gpu_ops *tg_ops_build(int build, char *why, size_t n);
/* tg_ops_build(0: the bf16 build) */
const gpu_ops *tg_ops(char *why, size_t n);
/* Round every value to the build's h16 (what its kernels read), in place. */
void tg_round(const gpu_ops *o, float *x, size_t n);
/* Runs fn(ops) on each build (a failure names the build); skips when no build has a device. */
#define TG_EACH_BUILD(fn)                                                                          \
    do {                                                                                           \
        char why_[256];                                                                            \
        const gpu_ops *o0_ = tg_ops_build(0, why_, sizeof why_);                                   \
        if (!o0_) SKIP("%s", why_);                                                                \
        for (int b_ = 0; b_ < TG_BUILDS; b_++) {                                                   \
            const gpu_ops *o_ = tg_ops_build(b_, why_, sizeof why_);                               \
            if (!o_) {                                                                             \
                t_fail(__FILE__, __LINE__, "build %d: %s", b_, why_);                              \
                continue;                                                                          \
            }                                                                                      \
            int f0_ = t_failed();                                                                  \
            fn(o_);                                                                                \
            if (t_failed() != f0_) fprintf(stderr, "  (above: the %s build)\n", o_->h16());        \
        }                                                                                          \
    } while (0)

/* model_load + devices_open("cuda", opts). 1 when CUDA is absent (the caller skips, reason in why),
 * 0 on success, -1 after reporting a failure. opts may be NULL. */
int tg_open(const char *dir, const accel_opts *opts, model **m, accel_dev **d, char *why, size_t n);

/* Deterministic test data: uniform in [-a, a). */
void tg_fill(float *x, size_t n, float a, uint32_t seed);
/* Token ids: BOS then pseudo-random ids < vocab. */
int32_t *tg_ids(int n, int vocab, uint32_t seed);
/* n (at most 256) sequences of lens[i] pseudo-random tokens (seeds seed + i) prefilled twice on
 * d, then `steps` tokens decoded: one copy in batches of n (the logits into page-locked memory
 * from accel_host_alloc when pinned, as the scheduler's, else malloc'ed), the other one sequence
 * at a time. Logits of
 * every (step, sequence) go to batched and single (n * steps rows of vocab each). Returns 0, or -1
 * after reporting a failed call. */
int tg_batched_vs_single(accel_dev *d, int vocab, int n, const int *lens, int steps, uint32_t seed,
                         int pinned, float *batched, float *single);
/* tools/mkmodel --out $TMP/name args, then tg_open(opts). Returns as tg_open; -1 also when
 * mkmodel fails. */
int tg_open_mkmodel(const char *args, const char *name, const accel_opts *opts, model **m,
                    accel_dev **d, char *why, size_t n);
/* The lab plugin's path ($BUILD/lab/libtandem_cuda.so, make gpu-lab: gpu/bench/'s variants) into
 * path: 0 when it is there, -1 when not built. */
int tg_lab_plugin(char *path, size_t n);
/* Mean KL(p || q) in nats and top-1 agreement between rows of logits a (reference) and b. */
void tg_compare(const float *a, const float *b, int rows, int vocab, double *mean_kl,
                double *top1, double *max_abs);

#endif

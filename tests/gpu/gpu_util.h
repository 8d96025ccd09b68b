/* Helpers for the CUDA tests: opening the cuda device (or skipping: CI has no GPU), and the
 * plugin's single-op entry points (gpu/test_api.cu) looked up with dlsym. */
#ifndef TANDEM_TESTS_GPU_UTIL_H
#define TANDEM_TESTS_GPU_UTIL_H
#include "model/model.h"
#include "scheduler/accel.h"
#include <stdint.h>

typedef struct gpu_ops {
    int (*device_count)(void);
    int (*rmsnorm)(int T, int H, const float *x, const float *w, float eps, float *out);
    int (*rope)(int T, int n_heads, int n_kv, int hd, const float *qkv, const float *bias,
                const int *pos, const float *inv_freq, float *q, float *k, float *v);
    int (*swiglu)(int T, int I, const float *gu, float *h);
    int (*gemm)(int T, int N, int K, const float *x, const float *w, float *out);
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
} gpu_ops;

/* Loads $BUILD/libtandem_cuda.so (BUILD defaults to build) and its entry points. Returns NULL
 * with a reason in why when the plugin is missing or no CUDA device is present: skip then. */
const gpu_ops *tg_ops(char *why, size_t n);

/* model_load + accel_open("cuda", opts). 1 when CUDA is absent (the caller skips, reason in why),
 * 0 on success, -1 after reporting a failure. opts may be NULL. */
int tg_open(const char *dir, const accel_opts *opts, model **m, accel_dev **d, char *why, size_t n);

/* Deterministic test data: uniform in [-a, a). */
void tg_fill(float *x, size_t n, float a, uint32_t seed);
/* Round every value to bf16 (the GPU's input precision), in place. */
void tg_round_bf16(float *x, size_t n);
/* Token ids: BOS then pseudo-random ids < vocab. */
int32_t *tg_ids(int n, int vocab, uint32_t seed);
/* n sequences of lens[i] pseudo-random tokens (seeds seed + i) prefilled twice on d, then
 * `steps` tokens decoded: one copy in batches of n, the other one sequence at a time. Logits of
 * every (step, sequence) go to batched and single (n * steps rows of vocab each). Returns 0, or -1
 * after reporting a failed call. */
int tg_batched_vs_single(accel_dev *d, int vocab, int n, const int *lens, int steps, uint32_t seed,
                         float *batched, float *single);
/* tools/mkmodel --out $TMP/name args, then tg_open (env=val set first when env). Returns as
 * tg_open; -1 also when mkmodel fails. */
int tg_open_mkmodel(const char *args, const char *name, const char *env, const char *val,
                    model **m, accel_dev **d, char *why, size_t n);
/* Mean KL(p || q) in nats and top-1 agreement between rows of logits a (reference) and b. */
void tg_compare(const float *a, const float *b, int rows, int vocab, double *mean_kl,
                double *top1, double *max_abs);

#endif

#include "tests/gpu/gpu_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <dlfcn.h>

const gpu_ops *tg_ops(char *why, size_t n)
{
    static gpu_ops ops;
    const char *b = getenv("BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/libtandem_cuda.so", b && *b ? b : "build");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "no CUDA plugin (%s)", path);
        return NULL;
    }
#define SYM(field, name)                                                                           \
    *(void **)&ops.field = dlsym(h, name);                                                         \
    if (!ops.field) {                                                                              \
        snprintf(why, n, "%s lacks %s", path, name);                                               \
        return NULL;                                                                               \
    }
    SYM(device_count, "gpu_test_device_count")
    SYM(rmsnorm, "gpu_test_rmsnorm")
    SYM(rope, "gpu_test_rope")
    SYM(swiglu, "gpu_test_swiglu")
    SYM(gemm, "gpu_test_gemm")
    SYM(attention, "gpu_test_attention")
    SYM(kv_quantize, "gpu_test_kv_quantize")
    SYM(attention_sparse, "gpu_test_attention_sparse")
    SYM(decode_fused, "gpu_test_decode_fused")
#undef SYM
    if (ops.device_count() <= 0) {
        snprintf(why, n, "no CUDA device");
        return NULL;
    }
    return &ops;
}

int tg_open(const char *dir, const accel_opts *opts, model **m, accel_dev **d, char *why, size_t n)
{
    char err[512];
    *m = model_load(dir, err, sizeof err);
    if (!*m) {
        t_fail(__FILE__, __LINE__, "model_load(%s): %s", dir, err);
        return -1;
    }
    accel_opts o = {0};
    if (opts) o = *opts;
    *d = accel_open("cuda", *m, &o, err, sizeof err);
    if (!*d) {
        snprintf(why, n, "no CUDA device (%s)", err);
        model_free(*m);
        *m = NULL;
        return 1;
    }
    return 0;
}

void tg_fill(float *x, size_t n, float a, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        x[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * a;
    }
}

void tg_round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = model_bf16_to_f32(model_f32_to_bf16(x[i]));
}

int32_t *tg_ids(int n, int vocab, uint32_t seed)
{
    int32_t *ids = malloc(n * sizeof *ids);
    uint32_t x = 2463534242u + seed;
    ids[0] = 1;
    for (int i = 1; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        ids[i] = (int32_t)(x % (uint32_t)vocab);
    }
    return ids;
}

void tg_compare(const float *a, const float *b, int rows, int vocab, double *mean_kl,
                double *top1, double *max_abs)
{
    double kl = 0, agree = 0, mx = 0;
    for (int r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * vocab, *y = b + (size_t)r * vocab;
        double lx = t_logsumexp(x, vocab), ly = t_logsumexp(y, vocab), k = 0;
        for (int i = 0; i < vocab; i++) {
            double px = x[i] - lx, py = y[i] - ly;
            k += exp(px) * (px - py);
            double d = fabs((double)x[i] - y[i]);
            if (d > mx || d != d) mx = d != d ? INFINITY : d;
        }
        kl += k;
        agree += t_argmax(x, vocab) == t_argmax(y, vocab);
    }
    *mean_kl = kl / rows;
    *top1 = agree / rows;
    *max_abs = mx;
}

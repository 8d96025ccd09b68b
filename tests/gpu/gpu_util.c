#include "tests/gpu/gpu_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include "devices/devices.h"
#include <dlfcn.h>
#include <unistd.h>

/* the test libraries beside each plugin (gpu/test/, linked against it: the Makefile) */
static const char *const builds[TG_BUILDS] = {"libtandem_cuda_test.so", "libtandem_cuda_f16_test.so"};

const gpu_ops *tg_ops_build(int build, char *why, size_t n)
{
    static gpu_ops ops[TG_BUILDS];
    gpu_ops *o = &ops[build];
    const char *b = getenv("BUILD");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", b && *b ? b : "build", builds[build]);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "no CUDA test library (%s)", path);
        return NULL;
    }
#define SYM(field, name)                                                                           \
    *(void **)&o->field = dlsym(h, name);                                                          \
    if (!o->field) {                                                                               \
        snprintf(why, n, "%s lacks %s", path, name);                                               \
        return NULL;                                                                               \
    }
    SYM(h16, "gpu_test_h16")
    SYM(device_count, "gpu_test_device_count")
    SYM(rmsnorm, "gpu_test_rmsnorm")
    SYM(rope, "gpu_test_rope")
    SYM(swiglu, "gpu_test_swiglu")
    SYM(gemm, "gpu_test_gemm")
    SYM(gemm_candidate, "gpu_test_gemm_candidate")
    SYM(gemm_small, "gpu_test_gemm_small")
    SYM(gemm_swiglu, "gpu_test_gemm_swiglu")
    SYM(attention, "gpu_test_attention")
    SYM(kv_quantize, "gpu_test_kv_quantize")
    SYM(attention_sparse, "gpu_test_attention_sparse")
    SYM(decode_fused, "gpu_test_decode_fused")
    SYM(argmax, "gpu_test_argmax")
#undef SYM
    if (o->device_count() <= 0) {
        snprintf(why, n, "no CUDA device");
        return NULL;
    }
    o->f16 = strcmp(o->h16(), "fp16") == 0;
    o->ulp = o->f16 ? 1.0 / 2048 : 1.0 / 256;
    return o;
}

const gpu_ops *tg_ops(char *why, size_t n)
{
    return tg_ops_build(0, why, n);
}

void tg_round(const gpu_ops *o, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = o->f16 ? model_f16_to_f32(model_f32_to_f16(x[i]))
                      : model_bf16_to_f32(model_f32_to_bf16(x[i]));
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
    *d = devices_open("cuda", *m, &o, err, sizeof err);
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

int tg_batched_vs_single(accel_dev *d, int vocab, int n, const int *lens, int steps, uint32_t seed,
                         int pinned, float *batched, float *single)
{
    enum { MAXN = 256 }; /* the GPU's decode batch bound (GPU_MAX_BATCH) */
    if (n < 1 || n > MAXN) return -1;
    accel_seq **bs = calloc(n, sizeof *bs), **ss = calloc(n, sizeof *ss);
    int32_t **ids = calloc(n, sizeof *ids), *tok = calloc(n, sizeof *tok);
    const size_t lbytes = sizeof(float) * n * vocab;
    float *lg = pinned ? accel_host_alloc(d, lbytes) : malloc(lbytes);
    int rc = bs && ss && ids && tok && lg ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        ids[i] = tg_ids(lens[i] + steps, vocab, seed + i);
        accel_prefill_req q = {.ids = ids[i], .n = lens[i]};
        if (accel_seq_new(d, lens[i] + steps, &bs[i]) || accel_seq_new(d, lens[i] + steps, &ss[i]))
            rc = -1;
        q.seq = bs[i];
        if (!rc && accel_prefill(d, &q)) rc = -1;
        q.seq = ss[i];
        if (!rc && accel_prefill(d, &q)) rc = -1;
    }
    for (int step = 0, rows = 0; !rc && step < steps; step++) {
        for (int i = 0; i < n; i++) tok[i] = ids[i][lens[i] + step];
        if (accel_decode(d, n, bs, tok, lg)) rc = -1;
        for (int i = 0; !rc && i < n; i++, rows++) {
            memcpy(batched + (size_t)rows * vocab, lg + (size_t)i * vocab, sizeof(float) * vocab);
            if (accel_decode(d, 1, &ss[i], &tok[i], single + (size_t)rows * vocab)) rc = -1;
        }
    }
    if (rc) fprintf(stderr, "  tg_batched_vs_single: a prefill or decode call failed\n");
    for (int i = 0; i < n; i++) {
        if (bs && bs[i]) accel_seq_free(d, bs[i]);
        if (ss && ss[i]) accel_seq_free(d, ss[i]);
        if (ids) free(ids[i]);
    }
    if (lg && pinned) accel_host_free(d, lg);
    else free(lg);
    free(bs), free(ss), free(ids), free(tok);
    return rc;
}

int tg_open_mkmodel(const char *args, const char *name, const accel_opts *opts, model **m,
                    accel_dev **d, char *why, size_t n)
{
    char dir[512];
    if (t_mkmodel(args, name, dir, sizeof dir)) return -1;
    return tg_open(dir, opts, m, d, why, n);
}

int tg_lab_plugin(char *path, size_t n)
{
    snprintf(path, n, "%s/lab/libtandem_cuda.so", t_build_dir());
    return access(path, R_OK) == 0 ? 0 : -1;
}

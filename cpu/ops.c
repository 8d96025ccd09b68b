/* cpu/ops.c — see ops.h for the arithmetic each op fixes. */
#include "cpu/ops.h"
#include "model/ckpt/numerics.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
#define ROWS 4       /* rows of W computed together (they share the loads of x) */
#define ROW_BLOCK 16 /* rows converted to float32 at once for 16-bit weights */

/* The 16 lanes as a GCC/clang vector: lane-wise arithmetic exactly as written, mapped to one
 * AVX-512 or two AVX2 registers (or four SSE ones) by the compiler. */
typedef float v16f __attribute__((vector_size(LANES * sizeof(float))));
/* GCC and clang note that returning a v16f has another ABI without AVX-512: load16 is static
 * and inlined, so no call between objects carries one (finish16 takes its vector by pointer) */
#pragma GCC diagnostic ignored "-Wpsabi"

static inline v16f load16(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float tree16(float *acc)
{
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* The tail (fewer than 16 elements left) goes through a plain array: element-wise work that the
 * compiler can keep in registers, unlike per-lane inserts into a vector. */
static inline float finish16(const v16f *v, const float *a, const float *b, int rest)
{
    float acc[LANES];
    memcpy(acc, v, sizeof acc);
    for (int l = 0; l < rest; l++) acc[l] += a[l] * b[l]; /* lane (j+l) % 16 == l */
    return tree16(acc);
}

static inline __attribute__((always_inline)) float dot_n(const float *a, const float *b, int n)
{
    v16f acc = {0};
    int j = 0;
    for (; j + LANES <= n; j += LANES) acc += load16(a + j) * load16(b + j);
    return finish16(&acc, a + j, b + j, n - j);
}

float cpu_dot(const float *a, const float *b, int n)
{
    /* the common head sizes get a copy of the same arithmetic with n known to the compiler */
    switch (n) {
    case 8: return dot_n(a, b, 8);
    case 16: return dot_n(a, b, 16);
    case 32: return dot_n(a, b, 32);
    case 64: return dot_n(a, b, 64);
    case 128: return dot_n(a, b, 128);
    default: return dot_n(a, b, n);
    }
}

/* ROWS dot products against one x; per row the same arithmetic as cpu_dot. */
static inline void dot_rows(const float *const *w, const float *x, int n, float *out)
{
    v16f acc[ROWS] = {{0}};
    int j = 0;
    for (; j + LANES <= n; j += LANES) {
        v16f xv = load16(x + j);
        for (int r = 0; r < ROWS; r++) acc[r] += load16(w[r] + j) * xv;
    }
    for (int r = 0; r < ROWS; r++) out[r] = finish16(&acc[r], w[r] + j, x + j, n - j);
}

void cpu_rmsnorm(float *out, const float *x, const model_tensor *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * model_tensor_get(w, i, 0);
}

/* Per-thread scratch for 16-bit weight rows converted to float32 (lives as long as the thread). */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
struct scratch {
    float *buf;
    size_t cap;
};
static void scratch_free(void *p)
{
    struct scratch *s = p;
    free(s->buf);
    free(s);
}
static void scratch_init(void)
{
    pthread_key_create(&scratch_key, scratch_free);
}
static float *scratch_get(size_t n)
{
    pthread_once(&scratch_once, scratch_init);
    struct scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return NULL;
        pthread_setspecific(scratch_key, s);
    }
    if (s->cap < n) {
        float *nb = realloc(s->buf, n * sizeof(float));
        if (!nb) return NULL;
        s->buf = nb;
        s->cap = n;
    }
    return s->buf;
}

struct mm_ctx {
    float *out;
    const float *x;
    int T, N, K;
    const model_tensor *w, *bias;
};

static void mm_range(void *vctx, int begin, int end, int thread)
{
    (void)thread;
    struct mm_ctx *c = vctx;
    const int K = c->K, N = c->N;
    float *conv = NULL;
    if (c->w->dtype != MODEL_DTYPE_F32) conv = scratch_get((size_t)ROW_BLOCK * K);
    for (int r0 = begin; r0 < end; r0 += ROW_BLOCK) {
        int nr = end - r0 < ROW_BLOCK ? end - r0 : ROW_BLOCK;
        const float *rows[ROW_BLOCK];
        for (int i = 0; i < nr; i++) {
            if (conv) {
                model_row_f32(c->w, r0 + i, conv + (size_t)i * K);
                rows[i] = conv + (size_t)i * K;
            } else {
                rows[i] = (const float *)c->w->data + (size_t)(r0 + i) * K;
            }
        }
        for (int t = 0; t < c->T; t++) {
            const float *x = c->x + (size_t)t * K;
            float *o = c->out + (size_t)t * N + r0;
            int i = 0;
            for (; i + ROWS <= nr; i += ROWS) dot_rows(rows + i, x, K, o + i);
            for (; i < nr; i++) o[i] = cpu_dot(rows[i], x, K);
        }
    }
    if (c->bias && c->bias->data)
        for (int t = 0; t < c->T; t++)
            for (int r = begin; r < end; r++)
                c->out[(size_t)t * N + r] += model_tensor_get(c->bias, r, 0);
}

void cpu_matmul(cpu_pool *p, float *out, const float *x, int T, const model_tensor *w,
                const model_tensor *bias)
{
    struct mm_ctx c = {out, x, T, (int)w->shape[0], (int)w->shape[1], w, bias};
    /* Below ~64K multiply-adds per thread a wake-up costs more than it saves. */
    long long work = (long long)c.N * c.K * T;
    int grain = work < (1 << 16) ? c.N : ROW_BLOCK * 2;
    if (p)
        cpu_pool_for(p, c.N, grain, mm_range, &c);
    else
        mm_range(&c, 0, c.N, 0);
}

void cpu_rope(float *x, int n_heads, int hd, const float *cs, const float *sn)
{
    int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
        }
    }
}

void cpu_softmax(float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void cpu_swiglu(float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++) g[i] = cpu_silu(g[i]) * u[i];
}

void cpu_attend(float *out, const float *q, const float *k, const float *v, int n_keys, int stride,
                int hd, float scale, float *scores)
{
    for (int j = 0; j < n_keys; j++) scores[j] = cpu_dot(q, k + (size_t)j * stride, hd) * scale;
    cpu_softmax(scores, n_keys);
    float acc[1024]; /* head_dim <= 1024 (config bound) */
    memset(acc, 0, sizeof(float) * hd);
    for (int j = 0; j < n_keys; j++) {
        const float *vj = v + (size_t)j * stride;
        float s = scores[j];
        for (int i = 0; i < hd; i++) acc[i] += s * vj[i];
    }
    memcpy(out, acc, sizeof(float) * hd);
}

void cpu_attend_blocks(float *out, const float *q, float *const *k_blocks, float *const *v_blocks,
                       const int32_t *table, int block, size_t off, int first, int n_keys,
                       int stride, int hd, float scale, float *scores)
{
    /* cpu_attend's three loops, each walking the keys in position order one block's contiguous
     * run at a time: every score, the softmax and every accumulation see the same operands in
     * the same order, hence the same bits */
    const int end = first + n_keys;
    for (int p = first, j = 0; p < end;) {
        const int r = p % block, n = block - r < end - p ? block - r : end - p;
        const float *k = k_blocks[table[p / block]] + off + (size_t)r * stride;
        for (int i = 0; i < n; i++) scores[j + i] = cpu_dot(q, k + (size_t)i * stride, hd) * scale;
        p += n;
        j += n;
    }
    cpu_softmax(scores, n_keys);
    float acc[1024]; /* head_dim <= 1024 (config bound) */
    memset(acc, 0, sizeof(float) * hd);
    for (int p = first, j = 0; p < end;) {
        const int r = p % block, n = block - r < end - p ? block - r : end - p;
        const float *v = v_blocks[table[p / block]] + off + (size_t)r * stride;
        for (int i = 0; i < n; i++) {
            const float *vj = v + (size_t)i * stride;
            float s = scores[j + i];
            for (int e = 0; e < hd; e++) acc[e] += s * vj[e];
        }
        p += n;
        j += n;
    }
    memcpy(out, acc, sizeof(float) * hd);
}

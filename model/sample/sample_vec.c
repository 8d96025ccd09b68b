/* model/sample/sample_vec.c — vectorized passes over a row of logits (see sample_vec.h). */
#include "model/sample/sample_vec.h"
/* Results must not depend on the compiler fusing a*b+c (see sample_vec.h): no contraction. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <float.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif
#include <math.h>
#include <string.h>

/* Without AVX these 32-byte vectors live in SSE register pairs; every function taking or returning
 * one is static and inlined, so the ABI note GCC gives about such signatures does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
#define VEC_INLINE static inline __attribute__((always_inline))

/* A portable build (no -march=native) would run these loops as SSE2 pairs; on x86-64 with
 * glibc, also compile an AVX2 copy of each entry point and pick one at load time (ifunc).
 * Both copies do the same IEEE operations in the same order: the results are identical. */
#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GLIBC__)
#define VEC_API __attribute__((target_clones("avx2", "default")))
#else
#define VEC_API
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

enum { L = 8 };

VEC_INLINE v8f load(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

VEC_INLINE void store(float *p, v8f v)
{
    memcpy(p, &v, sizeof v);
}

/* A tail of fewer than 8 values, padded with `pad`. */
VEC_INLINE v8f load_tail(const float *p, int n, float pad)
{
    float t[L];
    for (int i = 0; i < L; i++) t[i] = i < n ? p[i] : pad;
    return load(t);
}

VEC_INLINE v8f splat(float x)
{
    return (v8f){x, x, x, x, x, x, x, x};
}

/* Lane-wise select: m is all-ones / all-zeros per lane. */
VEC_INLINE v8f blend(v8i m, v8f a, v8f b)
{
    return (v8f)(((v8i)a & m) | ((v8i)b & ~m));
}

/* Whether any lane of a comparison result is set: one vptest with AVX, else a shuffle-or
 * reduction (GCC would otherwise extract the eight lanes one by one). */
VEC_INLINE int any(v8i m)
{
#if defined(__AVX__)
    return !_mm256_testz_si256((__m256i)m, (__m256i)m);
#else
    m |= __builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3);
    m |= __builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5);
    m |= __builtin_shufflevector(m, m, 1, 0, 3, 2, 5, 4, 7, 6);
    return m[0] != 0;
#endif
}

/* Adds the 8 lanes of v to 8 double lanes (one conversion with AVX-512, two with AVX2). */
VEC_INLINE void acc_d(v8d *acc, v8f v)
{
    *acc += __builtin_convertvector(v, v8d);
}

/* The lanes' total, in a fixed order. */
VEC_INLINE double sum_d(const v8d *acc)
{
    const v8d a = *acc;
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

VEC_INLINE v8f vexp(v8f x)
{
    /* Constants: log2(e); ln2 split as 355/512 (exact, 9 bits, so n * hi is exact for |n| <= 126)
     * plus the float nearest ln2 - 355/512; 1.5 * 2^23 rounds to the nearest integer when added. */
    const v8f zero = splat(0.0f), lo_lim = splat(-87.33654f);
    v8i under = x < lo_lim; /* below the normal range (and -inf): 0 */
    x = blend(x > zero, zero, x);
    x = blend(under, zero, x);
    const v8f magic = splat(12582912.0f);
    v8f t = x * splat(1.44269502f);
    t = t + magic;
    v8f n = t - magic; /* round(x / ln2), an integer in [-126, 0] */
    v8f r = x - n * splat(0.693359375f);
    r = r - n * splat(-2.12194442e-4f);
    /* e^r by Horner on 1 + r + r^2/2! + ... + r^7/7!, one rounding per step. */
    v8f p = splat(1.98412698e-4f);
    p = p * r;
    p = p + splat(1.38888889e-3f);
    p = p * r;
    p = p + splat(8.33333333e-3f);
    p = p * r;
    p = p + splat(4.16666667e-2f);
    p = p * r;
    p = p + splat(1.66666667e-1f);
    p = p * r;
    p = p + splat(0.5f);
    p = p * r;
    p = p + splat(1.0f);
    p = p * r;
    p = p + splat(1.0f);
    /* times 2^n: build the float 2^n from its exponent bits (n + 127 >= 1: a normal number). */
    v8i e = (__builtin_convertvector(n, v8i) + 127) << 23;
    v8f y = p * (v8f)e;
    return blend(under, zero, y);
}

VEC_API void model_vec_exp(const float *x, float *y, int n)
{
    int i = 0;
    for (; i + L <= n; i += L) store(y + i, vexp(load(x + i)));
    if (i < n) {
        float t[L];
        store(t, vexp(load_tail(x + i, n - i, 0.0f)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof *y);
    }
}

/* Max and a NaN/+inf flag, four vectors per step so that the compare-select chains overlap. */
VEC_API static float row_max(const float *l, int n, int *bad_out)
{
    const v8f ninf = splat(-INFINITY), pinf = splat(INFINITY);
    v8f m[4] = {ninf, ninf, ninf, ninf};
    v8i bad = {0};
    int i = 0;
    for (; i + 4 * L <= n; i += 4 * L)
        for (int k = 0; k < 4; k++) {
            v8f v = load(l + i + k * L);
            bad |= (v != v) | (v == pinf);
            m[k] = blend(v > m[k], v, m[k]);
        }
    for (; i < n; i += L) {
        v8f v = i + L <= n ? load(l + i) : load_tail(l + i, n - i, -INFINITY);
        bad |= (v != v) | (v == pinf);
        m[0] = blend(v > m[0], v, m[0]);
    }
    for (int k = 1; k < 4; k++) m[0] = blend(m[k] > m[0], m[k], m[0]);
    float r = -INFINITY;
    for (int j = 0; j < L; j++) r = m[0][j] > r ? m[0][j] : r;
    *bad_out = any(bad);
    return r;
}

VEC_API model_vec_scan model_vec_scan_row(float *l, int n)
{
    int bad;
    float mx = row_max(l, n, &bad);
    if (bad) {
        /* NaN would poison every comparison and sum: -inf (never chosen). +inf becomes FLT_MAX
         * so that logit - max stays a number. Rare (a faulty model): fix the row, scan again. */
        for (int j = 0; j < n; j++) {
            if (l[j] != l[j]) l[j] = -INFINITY;
            else if (l[j] == INFINITY) l[j] = FLT_MAX;
        }
        mx = row_max(l, n, &bad);
    }
    model_vec_scan s = {mx, -1};
    if (mx == -INFINITY) return s;
    /* The first position holding the max (the lowest id on ties). */
    const v8f vm = splat(mx);
    int i = 0;
    for (; i + L <= n; i += L)
        if (any(load(l + i) == vm)) break;
    for (; i < n; i++)
        if (l[i] == mx) break;
    s.argmax = i;
    return s;
}

VEC_API int32_t model_vec_argmax_clean(const float *l, int n)
{
    int bad;
    float mx = row_max(l, n, &bad);
    if (bad) return -2;
    if (mx == -INFINITY) return -1;
    const v8f vm = splat(mx);
    int i = 0;
    for (; i + L <= n; i += L)
        if (any(load(l + i) == vm)) break;
    for (; i < n; i++)
        if (l[i] == mx) break;
    return i;
}

VEC_API double model_vec_weights(const float *l, int n, float m, float inv_t, float min_w, float *w)
{
    const v8f vm = splat(m), vt = splat(inv_t), vmin_w = splat(min_w), zero = splat(0.0f);
    v8d acc[4] = {{0}, {0}, {0}, {0}}; /* four chains: the adds' latency overlaps */
    int i = 0;
    for (; i + 4 * L <= n; i += 4 * L)
        for (int k = 0; k < 4; k++) {
            v8f y = vexp((load(l + i + k * L) - vm) * vt);
            y = blend(y < vmin_w, zero, y);
            store(w + i + k * L, y);
            acc_d(&acc[k], y);
        }
    for (; i < n; i += L) {
        v8f y = vexp(((i + L <= n ? load(l + i) : load_tail(l + i, n - i, -INFINITY)) - vm) * vt);
        y = blend(y < vmin_w, zero, y);
        if (i + L <= n) {
            store(w + i, y);
        } else {
            float t[L];
            store(t, y);
            memcpy(w + i, t, (size_t)(n - i) * sizeof *w);
        }
        acc_d(&acc[0], y);
    }
    acc[0] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    return sum_d(&acc[0]);
}

VEC_API double model_vec_weights_ids(const float *l, const int32_t *ids, int n, float m, float inv_t,
                             float *w)
{
    const v8f vm = splat(m), vt = splat(inv_t);
    v8d acc[1] = {{0}};
    for (int i = 0; i < n; i += L) {
        float x[L], y[L];
        int k = n - i < L ? n - i : L;
        for (int j = 0; j < L; j++) x[j] = j < k ? l[ids[i + j]] : -INFINITY;
        v8f v = vexp((load(x) - vm) * vt);
        store(y, v);
        for (int j = 0; j < k; j++) w[ids[i + j]] = y[j];
        acc_d(acc, v);
    }
    return sum_d(acc);
}

VEC_API int model_vec_collect_ge(const float *x, int n, float th, int32_t *out)
{
    const v8f vt = splat(th);
    int m = 0, i = 0;
    for (; i + L <= n; i += L) {
        if (!any(load(x + i) >= vt)) continue;
        for (int j = i; j < i + L; j++) { /* branch-free: hits are unpredictable */
            out[m] = j;
            m += x[j] >= th;
        }
    }
    for (; i < n; i++)
        if (x[i] >= th) out[m++] = i;
    return m;
}

/* Inserts (x[i], i) into the sorted top list when it belongs there. */
static inline void top_insert(const float *x, int i, int k, int *m, int32_t *ids, float *vals)
{
    float v = x[i];
    if (v == -INFINITY || (*m == k && !(v > vals[k - 1]))) return;
    /* After every equal value already present: earlier (lower) ids win ties. */
    int j = *m < k ? (*m)++ : k - 1;
    while (j > 0 && vals[j - 1] < v) {
        vals[j] = vals[j - 1];
        ids[j] = ids[j - 1];
        j--;
    }
    vals[j] = v;
    ids[j] = i;
}

VEC_API int model_vec_topn(const float *x, int n, int k, int32_t *ids, float *vals)
{
    int m = 0, i = 0;
    if (k <= 0) return 0;
    for (; i < n && m < k; i++) top_insert(x, i, k, &m, ids, vals);
    for (; i + L <= n; i += L) {
        if (m == k && !any(load(x + i) > splat(vals[k - 1]))) continue;
        for (int j = i; j < i + L; j++) top_insert(x, j, k, &m, ids, vals);
    }
    for (; i < n; i++) top_insert(x, i, k, &m, ids, vals);
    return m;
}

/* Min-heap of k floats: h[0] is the smallest, i.e. the current k-th largest. */
static void heap_down(float *h, int k, int i)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= k) return;
        if (c + 1 < k && h[c + 1] < h[c]) c++;
        if (!(h[c] < h[i])) return;
        float t = h[c];
        h[c] = h[i];
        h[i] = t;
        i = c;
    }
}

VEC_API float model_vec_kth(const float *l, int n, int k, float *heap)
{
    int filled = 0, i = 0;
    /* Fill with the first k finite values, then heapify. */
    for (; i < n && filled < k; i++)
        if (l[i] > -INFINITY) heap[filled++] = l[i];
    if (filled < k) return -INFINITY;
    for (int j = k / 2 - 1; j >= 0; j--) heap_down(heap, k, j);
    for (; i + L <= n; i += L) {
        if (!any(load(l + i) > splat(heap[0]))) continue;
        for (int j = i; j < i + L; j++)
            if (l[j] > heap[0]) {
                heap[0] = l[j];
                heap_down(heap, k, 0);
            }
    }
    for (; i < n; i++)
        if (l[i] > heap[0]) {
            heap[0] = l[i];
            heap_down(heap, k, 0);
        }
    return heap[0];
}

VEC_API int32_t model_vec_draw(const float *w, int n, double u)
{
    enum { B = 64 }; /* block: 8 vectors */
    double acc = 0;
    int i = 0;
    for (; i + B <= n; i += B) {
        v8d a[1] = {{0}};
        for (int j = 0; j < B; j += L) acc_d(a, load(w + i + j));
        double s = sum_d(a);
        if (acc + s > u) break; /* the token is in this block */
        acc += s;
    }
    for (; i < n; i++) {
        acc += w[i];
        if (acc > u) return i;
    }
    return -1;
}

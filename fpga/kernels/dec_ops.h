/* fpga/kernels/dec_ops.h — the fp32 special-function steps and the KV attention datapath that
 * the decode kernel (decode.c) and the prefill kernel (prefill.c) share, so that a prompt
 * prefilled on the card computes, for every position, exactly what decoding it one token at a
 * time would: the same RMSNorm, RoPE, SiLU, KV quantization and the same attention arithmetic
 * in the same order (fpga/kernels/dec_math.h holds the integer units).
 *
 * No memory accounting here: the callers charge their own commands (a decode step reads each
 * KV part once for its one query; a prefill chunk reads it once for all its queries).
 * Static inline, stdint + expf/sqrtf: what the special-function unit computes. */
#ifndef TANDEM_FPGA_DEC_OPS_H
#define TANDEM_FPGA_DEC_OPS_H
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_math.h"
#include <math.h>

/* out = x / rms(x) * w (n values; out may be x) */
static inline void fpga_kd_rmsnorm(float *out, const float *x, const float *w, uint32_t n,
                                   float eps)
{
    float ss = 0.0f;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

/* transformers' rotate_half pairing (i, i + hd/2), as cpu_rope */
static inline void fpga_kd_rope(float *v, uint32_t nh, uint32_t hd, const float *cs,
                                const float *sn)
{
    uint32_t half = hd / 2;
    for (uint32_t h = 0; h < nh; h++) {
        float *p = v + (uint64_t)h * hd;
        for (uint32_t i = 0; i < half; i++) {
            float a = p[i], b = p[i + half];
            p[i] = a * cs[i] - b * sn[i];
            p[i + half] = b * cs[i] + a * sn[i];
        }
    }
}

/* g <- silu(g) * u over n values */
static inline void fpga_kd_swiglu(float *g, const float *u, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

/* The KV tile of (layer l, head h, part, tile) of the sequence kv maps. */
static inline uint8_t *fpga_kd_tile(uint8_t *const *ch, const fpga_dec_desc *d,
                                    const fpga_dec_kvmap *kv, uint32_t l, uint32_t h,
                                    uint32_t part, uint32_t tile)
{
    return ch[fpga_dec_stream_ch(d, l, h, part)] + fpga_dec_kv_tile_off(d, kv, l, h, part, tile);
}

/* Position pos's K and V (kvd floats each, heads in order), quantized exactly as proto/kv.h
 * says, into its row of the layer's tiles. */
static inline void fpga_kd_kv_store(uint8_t *const *ch, const fpga_dec_desc *d,
                                    const fpga_dec_kvmap *kv, uint32_t l, const float *k,
                                    const float *v, uint32_t pos)
{
    const uint32_t hd = d->head_dim;
    uint32_t part, tile, row;
    fpga_dec_pos_where(d, pos, &part, &tile, &row);
    int8_t q[FPGA_DEC_MAX_HEAD_DIM];
    for (uint32_t h = 0; h < d->n_kv_heads; h++) {
        uint8_t *t = fpga_kd_tile(ch, d, kv, l, h, part, tile);
        for (int which = 0; which < 2; which++) {
            const float *x = (which ? v : k) + (uint64_t)h * hd;
            uint16_t s = fpga_km_kv_quant(x, hd, q);
            memcpy(t + (which ? fpga_dec_tile_v(hd, row) : fpga_dec_tile_k(hd, row)), q, hd);
            memcpy(t + (which ? fpga_dec_tile_vs(hd, row) : fpga_dec_tile_ks(hd, row)), &s, 2);
        }
    }
}

/* The state of one decode attention (fpga_kd_attend, fpga_kd_attend_sel) for the `group` query
 * heads of one KV head: the heads' queries (fp32, or int8 with a scale per head under
 * FPGA_DEC_F_QINT8), the running state of the whole (g*) and of the current part (p*): an online
 * softmax (max m, sum l, output o) each. */
typedef struct fpga_kd_att {
    uint32_t hd, group;
    int qint8;
    const float *qg;
    float gm[FPGA_DEC_MAX_HEADS], gl[FPGA_DEC_MAX_HEADS], pm[FPGA_DEC_MAX_HEADS],
        pl[FPGA_DEC_MAX_HEADS], qs[FPGA_DEC_MAX_HEADS];
    float go[FPGA_DEC_MAX_QDIM], po[FPGA_DEC_MAX_QDIM];
    int8_t q8[FPGA_DEC_MAX_QDIM];
} fpga_kd_att;

static inline void fpga_kd_att_init(fpga_kd_att *a, const fpga_dec_desc *d, const float *qg)
{
    a->hd = d->head_dim;
    a->group = d->n_heads / d->n_kv_heads;
    a->qint8 = (d->flags & FPGA_DEC_F_QINT8) != 0;
    a->qg = qg;
    for (uint32_t g = 0; g < a->group; g++) {
        a->gm[g] = -INFINITY;
        a->gl[g] = 0.0f;
        for (uint32_t i = 0; i < a->hd; i++) a->go[g * a->hd + i] = 0.0f;
        if (a->qint8) fpga_km_act_quant(qg + g * a->hd, 0, a->hd, 0, a->q8 + g * a->hd, &a->qs[g]);
    }
}

static inline void fpga_kd_att_part_begin(fpga_kd_att *a)
{
    for (uint32_t g = 0; g < a->group; g++) {
        a->pm[g] = -INFINITY;
        a->pl[g] = 0.0f;
        for (uint32_t i = 0; i < a->hd; i++) a->po[g * a->hd + i] = 0.0f;
    }
}

/* A tile's K rows krow[0..n) as floats, element-major: kt[i][k] = krow[k][i] (int8 -> float is
 * exact), i < hd. What the attention's q.k runs on (fpga_kd_att_tile). */
static inline void fpga_kd_kt_fill_c(float (*kt)[FPGA_DEC_TILE], const int8_t *const *krow,
                                     uint32_t n, uint32_t hd)
{
    for (uint32_t k = 0; k < n; k++)
        for (uint32_t i = 0; i < hd; i++) kt[i][k] = (float)krow[k][i];
}

#if defined(__SYNTHESIS__) || !defined(__SSE2__)
#define fpga_kd_kt_fill fpga_kd_kt_fill_c
#else
#include <emmintrin.h>
/* On the emulator (x86: SSE2 is the baseline), a whole tile's 16 rows 16 elements at a time:
 * the 16 x 16 bytes transposed in registers (four rounds of interleaves), then each element's
 * 16 values widened to floats — instead of 16 x hd scalar converts and strided stores (half of
 * the attention's time at one query head a KV head). The same floats: the tests compare it
 * with fpga_kd_kt_fill_c (tests/fpga/test_fpga_att_tile.c). */
static inline void fpga_kd_kt_fill(float (*kt)[FPGA_DEC_TILE], const int8_t *const *krow,
                                   uint32_t n, uint32_t hd)
{
    if (n != FPGA_DEC_TILE || hd % 16) {
        fpga_kd_kt_fill_c(kt, krow, n, hd);
        return;
    }
    for (uint32_t i0 = 0; i0 < hd; i0 += 16) {
        __m128i a[16], b[16];
        for (int k = 0; k < 16; k++)
            a[k] = _mm_loadu_si128((const __m128i *)(const void *)(krow[k] + i0));
        /* round r interleaves rows 2^r apart at 2^r-byte grain; after four, a[j] holds element
         * i0 + rev(j) of rows 0..15 in row order (rev: j's 4 bits reversed) */
        for (int k = 0; k < 8; k++) {
            b[2 * k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
            b[2 * k + 1] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
        }
        for (int k = 0; k < 4; k++)
            for (int h = 0; h < 2; h++) {
                a[4 * k + h] = _mm_unpacklo_epi16(b[4 * k + h], b[4 * k + h + 2]);
                a[4 * k + h + 2] = _mm_unpackhi_epi16(b[4 * k + h], b[4 * k + h + 2]);
            }
        for (int k = 0; k < 2; k++)
            for (int h = 0; h < 4; h++) {
                b[8 * k + h] = _mm_unpacklo_epi32(a[8 * k + h], a[8 * k + h + 4]);
                b[8 * k + h + 4] = _mm_unpackhi_epi32(a[8 * k + h], a[8 * k + h + 4]);
            }
        for (int h = 0; h < 8; h++) {
            a[h] = _mm_unpacklo_epi64(b[h], b[h + 8]);
            a[h + 8] = _mm_unpackhi_epi64(b[h], b[h + 8]);
        }
        static const uint8_t rev[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
        for (int j = 0; j < 16; j++) {
            /* int8 -> int16 -> int32 by sign-propagating shifts, then floats */
            __m128i lo = _mm_srai_epi16(_mm_unpacklo_epi8(a[j], a[j]), 8);
            __m128i hi = _mm_srai_epi16(_mm_unpackhi_epi8(a[j], a[j]), 8);
            float *o = kt[i0 + rev[j]];
            _mm_storeu_ps(o, _mm_cvtepi32_ps(_mm_srai_epi32(_mm_unpacklo_epi16(lo, lo), 16)));
            _mm_storeu_ps(o + 4, _mm_cvtepi32_ps(_mm_srai_epi32(_mm_unpackhi_epi16(lo, lo), 16)));
            _mm_storeu_ps(o + 8, _mm_cvtepi32_ps(_mm_srai_epi32(_mm_unpacklo_epi16(hi, hi), 16)));
            _mm_storeu_ps(o + 12, _mm_cvtepi32_ps(_mm_srai_epi32(_mm_unpackhi_epi16(hi, hi), 16)));
        }
    }
}
#endif

/* Rows rows[0..n) of tile tl (rows NULL: rows 0..n-1), in order, into the part's state. */
static inline void fpga_kd_att_tile(fpga_kd_att *a, const fpga_dec_desc *d, const uint8_t *tl,
                                    const uint32_t *rows, uint32_t n)
{
    const uint32_t hd = a->hd;
    const int8_t *krow[FPGA_DEC_TILE];
    for (uint32_t k = 0; k < n; k++)
        krow[k] = (const int8_t *)(tl + fpga_dec_tile_k(hd, rows ? rows[k] : k));
    /* fp32 q.k: the tile's K rows once as floats, element-major (kt[i][k]; int8 -> float is
     * exact), shared by the group's heads. Each row's sum still runs over i in order (the same
     * float result), but the rows' sums advance together, one element at a time: a vector of
     * sums, not a gathered row at a time. (The rows loop's bound is n, not FPGA_DEC_TILE: with a
     * constant 16 gcc unrolls it whole and vectorizes the element loop instead, in-order
     * reductions, x4 slower.) Under HLS kt is a tile's K held on chip, 16 KiB at head_dim 256
     * (a real design would partition it by rows: 16 sums a cycle), filled once a tile. */
    float kt[FPGA_DEC_MAX_HEAD_DIM][FPGA_DEC_TILE];
    if (!a->qint8) fpga_kd_kt_fill(kt, krow, n, hd);
    for (uint32_t g = 0; g < a->group; g++) {
        float s[FPGA_DEC_TILE], mt = -INFINITY;
        if (!a->qint8) {
            const float *q = a->qg + g * hd;
            for (uint32_t k = 0; k < n; k++) s[k] = 0.0f;
            for (uint32_t i = 0; i < hd; i++)
                for (uint32_t k = 0; k < n; k++) s[k] += q[i] * kt[i][k];
        }
        for (uint32_t k = 0; k < n; k++) {
            const uint32_t r = rows ? rows[k] : k;
            uint16_t ks;
            memcpy(&ks, tl + fpga_dec_tile_ks(hd, r), 2);
            float dot = s[k];
            if (a->qint8) {
                int32_t acc = 0;
                for (uint32_t i = 0; i < hd; i++) acc += (int32_t)a->q8[g * hd + i] * krow[k][i];
                dot = (float)acc * a->qs[g];
            }
            s[k] = dot * fpga_km_f16_to_f32(ks) * d->attn_scale;
            if (s[k] > mt) mt = s[k];
        }
        if (mt > a->pm[g]) {
            float f = expf(a->pm[g] - mt);
            a->pl[g] *= f;
            for (uint32_t i = 0; i < hd; i++) a->po[g * hd + i] *= f;
            a->pm[g] = mt;
        }
        for (uint32_t k = 0; k < n; k++) {
            const uint32_t r = rows ? rows[k] : k;
            const int8_t *vr = (const int8_t *)(tl + fpga_dec_tile_v(hd, r));
            uint16_t vs;
            memcpy(&vs, tl + fpga_dec_tile_vs(hd, r), 2);
            float p = expf(s[k] - a->pm[g]);
            a->pl[g] += p;
            float w = p * fpga_km_f16_to_f32(vs);
            /* restrict: a char-typed vr may alias anything, which kept this loop scalar on the
             * emulator (each element's product and sum are the same either way) */
            float *restrict po = a->po + g * hd;
            const int8_t *restrict v8 = vr;
            for (uint32_t i = 0; i < hd; i++) po[i] += w * (float)v8[i];
        }
    }
}

/* The part's state merged into the whole's (parts merge in part order: flash-decoding). */
static inline void fpga_kd_att_part_end(fpga_kd_att *a)
{
    const uint32_t hd = a->hd;
    for (uint32_t g = 0; g < a->group; g++) {
        float m = a->pm[g] > a->gm[g] ? a->pm[g] : a->gm[g];
        float fa = expf(a->gm[g] - m), fb = expf(a->pm[g] - m);
        a->gl[g] = a->gl[g] * fa + a->pl[g] * fb;
        for (uint32_t i = 0; i < hd; i++)
            a->go[g * hd + i] = a->go[g * hd + i] * fa + a->po[g * hd + i] * fb;
        a->gm[g] = m;
    }
}

static inline void fpga_kd_att_out(const fpga_kd_att *a, float *out)
{
    for (uint32_t g = 0; g < a->group; g++) {
        float inv = a->gl[g] > 0.0f ? 1.0f / a->gl[g] : 0.0f;
        for (uint32_t i = 0; i < a->hd; i++) out[g * a->hd + i] = a->go[g * a->hd + i] * inv;
    }
}

/* Attention of the `group` query heads of KV head kh (qg: group * hd floats) over positions
 * 0..pos of layer l (through the map kv), into out (group * hd). Each part keeps an online
 * softmax (m, l, o) over its tiles in order; the parts merge in part order (flash-decoding).
 * q . k is fp32 x int8, or with FPGA_DEC_F_QINT8 int8 x int8 after a per-head quantization of
 * q. Returns the MACs. */
static inline uint64_t fpga_kd_attend(uint8_t *const *ch, const fpga_dec_desc *d,
                                      const fpga_dec_kvmap *kv, uint32_t l, uint32_t kh,
                                      const float *qg, uint32_t pos, float *out)
{
    fpga_kd_att a;
    fpga_kd_att_init(&a, d, qg);
    uint64_t macs = 0;
    for (uint32_t b = 0; b < d->kv_parts; b++) {
        uint32_t nt = fpga_dec_part_used_tiles(d, pos + 1, b);
        if (!nt) continue;
        fpga_kd_att_part_begin(&a);
        for (uint32_t t = 0; t < nt; t++) {
            const uint8_t *tl = fpga_kd_tile(ch, d, kv, l, kh, b, t);
            uint32_t p0 = (t * d->kv_parts + b) * FPGA_DEC_TILE;
            uint32_t rows = pos + 1 - p0 < FPGA_DEC_TILE ? pos + 1 - p0 : FPGA_DEC_TILE;
            fpga_kd_att_tile(&a, d, tl, NULL, rows);
            macs += 2ull * rows * a.hd * a.group;
        }
        fpga_kd_att_part_end(&a);
    }
    fpga_kd_att_out(&a, out);
    return macs;
}

/* fpga_kd_attend over the listed positions only: sel[0..nsel) ascending, each <= pos. The same
 * arithmetic in the same order (parts in order, each part's tiles in order, the rows of a tile
 * in order) with the rows not listed left out, so that a list of every position 0..pos gives
 * the same bits as fpga_kd_attend. A part with no listed row takes no part in the merge.
 * Returns the MACs. */
static inline uint64_t fpga_kd_attend_sel(uint8_t *const *ch, const fpga_dec_desc *d,
                                          const fpga_dec_kvmap *kv, uint32_t l, uint32_t kh,
                                          const float *qg, const uint32_t *sel, uint32_t nsel,
                                          float *out)
{
    const uint32_t P = d->kv_parts;
    fpga_kd_att a;
    fpga_kd_att_init(&a, d, qg);
    uint64_t macs = 0;
    for (uint32_t b = 0; b < P; b++) {
        int any = 0;
        fpga_kd_att_part_begin(&a);
        /* the listed positions of part b, tile by tile (ascending positions: ascending tiles) */
        for (uint32_t e = 0; e < nsel;) {
            const uint32_t T = sel[e] / FPGA_DEC_TILE;
            if (T % P != b) {
                e++;
                continue;
            }
            uint32_t rows[FPGA_DEC_TILE], nr = 0;
            while (e < nsel && sel[e] / FPGA_DEC_TILE == T) rows[nr++] = sel[e++] % FPGA_DEC_TILE;
            fpga_kd_att_tile(&a, d, fpga_kd_tile(ch, d, kv, l, kh, b, T / P), rows, nr);
            any = 1;
            macs += 2ull * nr * a.hd * a.group;
        }
        if (any) fpga_kd_att_part_end(&a);
    }
    fpga_kd_att_out(&a, out);
    return macs;
}

#endif

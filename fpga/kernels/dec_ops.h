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

/* Attention of the `group` query heads of KV head kh (qg: group * hd floats) over positions
 * 0..pos of layer l (through the map kv), into out (group * hd). Each part keeps an online softmax (m, l, o) over its
 * tiles in order; the parts merge in part order (flash-decoding). q . k is fp32 x int8, or with
 * FPGA_DEC_F_QINT8 int8 x int8 after a per-head quantization of q. Returns the MACs. */
static inline uint64_t fpga_kd_attend(uint8_t *const *ch, const fpga_dec_desc *d,
                                      const fpga_dec_kvmap *kv, uint32_t l, uint32_t kh,
                                      const float *qg, uint32_t pos, float *out)
{
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads;
    const int qint8 = (d->flags & FPGA_DEC_F_QINT8) != 0;
    float gm[FPGA_DEC_MAX_HEADS], gl[FPGA_DEC_MAX_HEADS], pm[FPGA_DEC_MAX_HEADS],
        pl[FPGA_DEC_MAX_HEADS], qs[FPGA_DEC_MAX_HEADS];
    float go[FPGA_DEC_MAX_QDIM], po[FPGA_DEC_MAX_QDIM];
    int8_t q8[FPGA_DEC_MAX_QDIM];
    uint64_t macs = 0;
    for (uint32_t g = 0; g < group; g++) {
        gm[g] = -INFINITY;
        gl[g] = 0.0f;
        for (uint32_t i = 0; i < hd; i++) go[g * hd + i] = 0.0f;
        if (qint8) fpga_km_act_quant(qg + g * hd, 0, hd, 0, q8 + g * hd, &qs[g]);
    }
    for (uint32_t b = 0; b < d->kv_parts; b++) {
        uint32_t nt = fpga_dec_part_used_tiles(d, pos + 1, b);
        if (!nt) continue;
        for (uint32_t g = 0; g < group; g++) {
            pm[g] = -INFINITY;
            pl[g] = 0.0f;
            for (uint32_t i = 0; i < hd; i++) po[g * hd + i] = 0.0f;
        }
        for (uint32_t t = 0; t < nt; t++) {
            const uint8_t *tl = fpga_kd_tile(ch, d, kv, l, kh, b, t);
            uint32_t p0 = (t * d->kv_parts + b) * FPGA_DEC_TILE;
            uint32_t rows = pos + 1 - p0 < FPGA_DEC_TILE ? pos + 1 - p0 : FPGA_DEC_TILE;
            for (uint32_t g = 0; g < group; g++) {
                float s[FPGA_DEC_TILE], mt = -INFINITY;
                for (uint32_t r = 0; r < rows; r++) {
                    const int8_t *kr = (const int8_t *)(tl + fpga_dec_tile_k(hd, r));
                    uint16_t ks;
                    memcpy(&ks, tl + fpga_dec_tile_ks(hd, r), 2);
                    float dot;
                    if (qint8) {
                        int32_t acc = 0;
                        for (uint32_t i = 0; i < hd; i++) acc += (int32_t)q8[g * hd + i] * kr[i];
                        dot = (float)acc * qs[g];
                    } else {
                        dot = 0.0f;
                        for (uint32_t i = 0; i < hd; i++) dot += qg[g * hd + i] * (float)kr[i];
                    }
                    s[r] = dot * fpga_km_f16_to_f32(ks) * d->attn_scale;
                    if (s[r] > mt) mt = s[r];
                }
                if (mt > pm[g]) {
                    float f = expf(pm[g] - mt);
                    pl[g] *= f;
                    for (uint32_t i = 0; i < hd; i++) po[g * hd + i] *= f;
                    pm[g] = mt;
                }
                for (uint32_t r = 0; r < rows; r++) {
                    const int8_t *vr = (const int8_t *)(tl + fpga_dec_tile_v(hd, r));
                    uint16_t vs;
                    memcpy(&vs, tl + fpga_dec_tile_vs(hd, r), 2);
                    float p = expf(s[r] - pm[g]);
                    pl[g] += p;
                    float w = p * fpga_km_f16_to_f32(vs);
                    for (uint32_t i = 0; i < hd; i++) po[g * hd + i] += w * (float)vr[i];
                }
            }
            macs += 2ull * rows * hd * group;
        }
        /* merge this part into the head's state */
        for (uint32_t g = 0; g < group; g++) {
            float m = pm[g] > gm[g] ? pm[g] : gm[g];
            float fa = expf(gm[g] - m), fb = expf(pm[g] - m);
            gl[g] = gl[g] * fa + pl[g] * fb;
            for (uint32_t i = 0; i < hd; i++)
                go[g * hd + i] = go[g * hd + i] * fa + po[g * hd + i] * fb;
            gm[g] = m;
        }
    }
    for (uint32_t g = 0; g < group; g++) {
        float inv = gl[g] > 0.0f ? 1.0f / gl[g] : 0.0f;
        for (uint32_t i = 0; i < hd; i++) out[g * hd + i] = go[g * hd + i] * inv;
    }
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
    const uint32_t hd = d->head_dim, group = d->n_heads / d->n_kv_heads, P = d->kv_parts;
    const int qint8 = (d->flags & FPGA_DEC_F_QINT8) != 0;
    float gm[FPGA_DEC_MAX_HEADS], gl[FPGA_DEC_MAX_HEADS], pm[FPGA_DEC_MAX_HEADS],
        pl[FPGA_DEC_MAX_HEADS], qs[FPGA_DEC_MAX_HEADS];
    float go[FPGA_DEC_MAX_QDIM], po[FPGA_DEC_MAX_QDIM];
    int8_t q8[FPGA_DEC_MAX_QDIM];
    uint64_t macs = 0;
    for (uint32_t g = 0; g < group; g++) {
        gm[g] = -INFINITY;
        gl[g] = 0.0f;
        for (uint32_t i = 0; i < hd; i++) go[g * hd + i] = 0.0f;
        if (qint8) fpga_km_act_quant(qg + g * hd, 0, hd, 0, q8 + g * hd, &qs[g]);
    }
    for (uint32_t b = 0; b < P; b++) {
        int any = 0;
        for (uint32_t g = 0; g < group; g++) {
            pm[g] = -INFINITY;
            pl[g] = 0.0f;
            for (uint32_t i = 0; i < hd; i++) po[g * hd + i] = 0.0f;
        }
        /* the listed positions of part b, tile by tile (ascending positions: ascending tiles) */
        for (uint32_t e = 0; e < nsel;) {
            const uint32_t T = sel[e] / FPGA_DEC_TILE;
            if (T % P != b) {
                e++;
                continue;
            }
            uint32_t rows[FPGA_DEC_TILE], nr = 0;
            while (e < nsel && sel[e] / FPGA_DEC_TILE == T) rows[nr++] = sel[e++] % FPGA_DEC_TILE;
            const uint8_t *tl = fpga_kd_tile(ch, d, kv, l, kh, b, T / P);
            any = 1;
            for (uint32_t g = 0; g < group; g++) {
                float s[FPGA_DEC_TILE], mt = -INFINITY;
                for (uint32_t k = 0; k < nr; k++) {
                    const uint32_t r = rows[k];
                    const int8_t *kr = (const int8_t *)(tl + fpga_dec_tile_k(hd, r));
                    uint16_t ks;
                    memcpy(&ks, tl + fpga_dec_tile_ks(hd, r), 2);
                    float dot;
                    if (qint8) {
                        int32_t acc = 0;
                        for (uint32_t i = 0; i < hd; i++) acc += (int32_t)q8[g * hd + i] * kr[i];
                        dot = (float)acc * qs[g];
                    } else {
                        dot = 0.0f;
                        for (uint32_t i = 0; i < hd; i++) dot += qg[g * hd + i] * (float)kr[i];
                    }
                    s[k] = dot * fpga_km_f16_to_f32(ks) * d->attn_scale;
                    if (s[k] > mt) mt = s[k];
                }
                if (mt > pm[g]) {
                    float f = expf(pm[g] - mt);
                    pl[g] *= f;
                    for (uint32_t i = 0; i < hd; i++) po[g * hd + i] *= f;
                    pm[g] = mt;
                }
                for (uint32_t k = 0; k < nr; k++) {
                    const uint32_t r = rows[k];
                    const int8_t *vr = (const int8_t *)(tl + fpga_dec_tile_v(hd, r));
                    uint16_t vs;
                    memcpy(&vs, tl + fpga_dec_tile_vs(hd, r), 2);
                    float p = expf(s[k] - pm[g]);
                    pl[g] += p;
                    float w = p * fpga_km_f16_to_f32(vs);
                    for (uint32_t i = 0; i < hd; i++) po[g * hd + i] += w * (float)vr[i];
                }
            }
            macs += 2ull * nr * hd * group;
        }
        if (!any) continue;
        for (uint32_t g = 0; g < group; g++) {
            float m = pm[g] > gm[g] ? pm[g] : gm[g];
            float fa = expf(gm[g] - m), fb = expf(pm[g] - m);
            gl[g] = gl[g] * fa + pl[g] * fb;
            for (uint32_t i = 0; i < hd; i++)
                go[g * hd + i] = go[g * hd + i] * fa + po[g * hd + i] * fb;
            gm[g] = m;
        }
    }
    for (uint32_t g = 0; g < group; g++) {
        float inv = gl[g] > 0.0f ? 1.0f / gl[g] : 0.0f;
        for (uint32_t i = 0; i < hd; i++) out[g * hd + i] = go[g * hd + i] * inv;
    }
    return macs;
}

#endif

/* fpga/kernels/tls_select.c — AsyncTLS's two selection levels for one query group on the card:
 * the same positions as the CPU reference (sparse/tls.h's sparse_tls_select), bit for bit.
 *
 * One run selects for one (layer, KV head) group of one sequence: level 1 scores every block
 * from its channel max / min (the aggregated query [Q+ Q-] times [M; m]) and keeps the
 * block_budget best; level 2 scores the tokens of the kept blocks from their 4-bit labels
 * (mean query over the group, on the calibrated channels) and keeps the token_budget best. The
 * arithmetic is the reference's: 8-lane dot products reduced pairwise, head sums in head order,
 * no FMA contraction (ISO C, and `#pragma HLS` kept the order). The top-k is a radix select on
 * order-preserving integer keys (higher score first, NaN last, -0 as +0), then an index-order
 * sweep that keeps ties by lower index: the reference's order, in streaming passes an HLS
 * pipeline can run (four 256-bin histograms per level instead of a sort).
 *
 * Inputs, all in the `data` buffer at the offsets given (float32 unless said):
 *   q        (G, head_dim)            the group's queries
 *   ch       (r) u16                  the calibrated channels of the group
 *   summ     (nb, 2, head_dim)        per block: max row, then min row
 *   code     (n_keys, r / 2) bytes    4-bit labels, channel 2i low nibble
 *   lmin, lstep (n_keys)              each label's offset and step
 * Output `out`: u32 count, then count int32 positions, ascending.
 *
 *   arg 0 data global, 1 out global, 2 q_off, 3 ch_off, 4 summ_off, 5 code_off, 6 lmin_off,
 *   7 lstep_off (u64), 8 n_keys, 9 head_dim, 10 G, 11 r, 12 block_size, 13 block_budget,
 *   14 token_budget (u32). */
#include "fpga/kernels/tls_kernel.h"
#include <string.h>

/* The top-k: four radix passes and the sweep, each streaming the scores at TLS_SCAN_LANES a
 * cycle (a 512-bit beat of fp32). */
#define TLS_TOPK_PASSES 5
#define TLS_SCAN_LANES 16


static float dot8(const float *a, const float *b, uint32_t n)
{
    float acc[8] = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    for (int w = 4; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* order-preserving key: larger float -> larger key; NaN -> 0 (last); -0 -> +0 */
static uint32_t key_of(float f)
{
    uint32_t b;
    if (f == 0.0f) f = 0.0f;
    memcpy(&b, &f, 4);
    if (f != f) return 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* keep[i] = 1 for the k best of score[0 .. n-1]; returns min(k, n) */
static uint32_t topk(const float *score, uint32_t n, uint32_t k, uint8_t *keep)
{
    if (k >= n) {
        for (uint32_t i = 0; i < n; i++) keep[i] = 1;
        return n;
    }
    /* radix select of the k-th largest key, 8 bits at a time from the top */
    uint32_t prefix = 0, mask = 0, need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t hist[256] = {0};
        for (uint32_t i = 0; i < n; i++) {
#pragma HLS PIPELINE II = 1
            uint32_t key = key_of(score[i]);
            if ((key & mask) == prefix) hist[(key >> shift) & 255]++;
        }
        uint32_t d = 255;
        while (hist[d] < need) need -= hist[d--];
        prefix |= d << shift;
        mask |= 255u << shift;
    }
    /* prefix is the k-th key; `need` of the keys equal to it are kept (lowest indices) */
    uint32_t taken = 0;
    for (uint32_t i = 0; i < n; i++) {
#pragma HLS PIPELINE II = 1
        uint32_t key = key_of(score[i]);
        uint8_t in = key > prefix || (key == prefix && need > 0);
        if (key == prefix && need > 0) need--;
        keep[i] = in;
        taken += in;
    }
    return taken;
}

uint32_t tls_level1(const float *q, const uint8_t *summ, uint32_t nb, uint32_t hd, uint32_t G,
                    uint32_t block_budget, uint32_t lanes, uint8_t *keep)
{
    float qp[TLS_K_MAX_HD], qn[TLS_K_MAX_HD], row[TLS_K_MAX_HD];
    float score[TLS_K_MAX_BLOCKS];
    if (nb <= block_budget) {
        for (uint32_t b = 0; b < nb; b++) keep[b] = 1;
        return nb;
    }
    for (uint32_t c = 0; c < hd; c++) qp[c] = qn[c] = 0.0f;
    for (uint32_t h = 0; h < G; h++)
        for (uint32_t c = 0; c < hd; c++) {
            float x = q[h * hd + c];
            if (x > 0.0f) qp[c] += x;
            else qn[c] += x;
        }
    fpga_k_read(summ, (uint64_t)nb * 2 * hd * 4);
    for (uint32_t b = 0; b < nb; b++) {
        const uint8_t *s = summ + (uint64_t)b * 2 * hd * 4;
        memcpy(row, s, (size_t)hd * 4);
        float a = dot8(qp, row, hd);
        memcpy(row, s + (size_t)hd * 4, (size_t)hd * 4);
        score[b] = a + dot8(qn, row, hd);
    }
    fpga_k_cycles((uint64_t)nb * 2 * hd / lanes + TLS_TOPK_PASSES * (uint64_t)nb / TLS_SCAN_LANES);
    return topk(score, nb, block_budget, keep);
}

uint32_t tls_level2(const float *q, const uint16_t *ch, const uint8_t *code_base,
                    const uint8_t *lmin_base, const uint8_t *lstep_base, uint32_t n_keys,
                    uint32_t hd, uint32_t G, uint32_t r, uint32_t token_budget, uint32_t lanes,
                    int32_t *cand, uint32_t C)
{
    if (C <= token_budget) return C;
    float score[TLS_K_MAX_CAND_PIPE];
    uint8_t keep[TLS_K_MAX_CAND_PIPE];
    float qsel[TLS_K_MAX_HD], codes[TLS_K_MAX_HD], qsum = 0.0f;
    for (uint32_t i = 0; i < r; i++) {
        float a = 0.0f;
        for (uint32_t h = 0; h < G; h++) a += q[h * hd + ch[i]];
        qsel[i] = a / (float)G;
        qsum += qsel[i];
    }
    fpga_k_read(code_base, (uint64_t)n_keys * (r / 2));
    fpga_k_read(lmin_base, (uint64_t)n_keys * 4);
    fpga_k_read(lstep_base, (uint64_t)n_keys * 4);
    for (uint32_t j = 0; j < C; j++) {
        const uint8_t *code = code_base + (uint64_t)cand[j] * (r / 2);
        for (uint32_t i = 0; i < r; i += 2) {
            codes[i] = (float)(code[i / 2] & 15);
            codes[i + 1] = (float)(code[i / 2] >> 4);
        }
        float lo, st;
        memcpy(&lo, lmin_base + (uint64_t)cand[j] * 4, 4);
        memcpy(&st, lstep_base + (uint64_t)cand[j] * 4, 4);
        score[j] = st * dot8(qsel, codes, r) + lo * qsum;
    }
    fpga_k_cycles((uint64_t)C * r / lanes + TLS_TOPK_PASSES * (uint64_t)C / TLS_SCAN_LANES);
    topk(score, C, token_budget, keep);
    uint32_t n = 0;
    for (uint32_t j = 0; j < C; j++)
        if (keep[j]) cand[n++] = cand[j];
    return n;
}

uint32_t tls_select_unit(const float *q, const uint16_t *ch, const uint8_t *summ,
                         const uint8_t *code_base, const uint8_t *lmin_base,
                         const uint8_t *lstep_base, uint32_t n_keys, uint32_t hd, uint32_t G,
                         uint32_t r, uint32_t bs, uint32_t block_budget, uint32_t token_budget,
                         uint32_t lanes, int32_t *cand)
{
    const uint32_t nb = (n_keys + bs - 1) / bs;
    uint8_t keep[TLS_K_MAX_BLOCKS];
    tls_level1(q, summ, nb, hd, G, block_budget, lanes, keep);
    uint32_t C = 0;
    for (uint32_t b = 0; b < nb; b++)
        for (uint32_t t = b * bs; keep[b] && t < (b + 1) * bs && t < n_keys; t++) cand[C++] = (int32_t)t;
    return tls_level2(q, ch, code_base, lmin_base, lstep_base, n_keys, hd, G, r, token_budget,
                      lanes, cand, C);
}

void tls_select(const uint8_t *data, uint8_t *out, uint64_t q_off, uint64_t ch_off,
                uint64_t summ_off, uint64_t code_off, uint64_t lmin_off, uint64_t lstep_off,
                uint32_t n_keys, uint32_t hd, uint32_t G, uint32_t r, uint32_t bs,
                uint32_t block_budget, uint32_t token_budget)
{
#pragma HLS INTERFACE m_axi port = data offset = slave bundle = gmem0
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem1
    float q[TLS_K_MAX_G * TLS_K_MAX_HD];
    int32_t cand[TLS_K_MAX_CAND];
    uint16_t ch[TLS_K_MAX_HD];
    fpga_k_read(data + q_off, (uint64_t)G * hd * 4);
    memcpy(q, data + q_off, (size_t)G * hd * 4);
    fpga_k_read(data + ch_off, (uint64_t)r * 2);
    memcpy(ch, data + ch_off, (size_t)r * 2);
    uint32_t n = tls_select_unit(q, ch, data + summ_off, data + code_off, data + lmin_off,
                                 data + lstep_off, n_keys, hd, G, r, bs, block_budget,
                                 token_budget, 16, cand);
    fpga_k_write(out, 4 + (uint64_t)n * 4);
    memcpy(out, &n, 4);
    memcpy(out + 4, cand, (size_t)n * 4);
}

static int tls_select_adapter(const fpga_kargs *a)
{
    const fpga_k_arg *data = &a->a[0], *out = &a->a[1];
    uint64_t q_off = a->a[2].u, ch_off = a->a[3].u, summ_off = a->a[4].u, code_off = a->a[5].u,
             lmin_off = a->a[6].u, lstep_off = a->a[7].u;
    uint32_t n = (uint32_t)a->a[8].u, hd = (uint32_t)a->a[9].u, G = (uint32_t)a->a[10].u,
             r = (uint32_t)a->a[11].u, bs = (uint32_t)a->a[12].u, bb = (uint32_t)a->a[13].u,
             tb = (uint32_t)a->a[14].u;
    if (n < 1 || hd < 2 || hd > TLS_K_MAX_HD || G < 1 || G > TLS_K_MAX_G || r < 2 || r % 2 ||
        r > hd || (bs != 16 && bs != 32 && bs != 64 && bs != 128) || bb < 1 || tb < 1)
        return -1;
    uint64_t nb = ((uint64_t)n + bs - 1) / bs;
    if (nb > TLS_K_MAX_BLOCKS || (uint64_t)(bb < nb ? bb : nb) * bs > TLS_K_MAX_CAND) return -1;
    if (!fpga_k_range_ok(q_off, (uint64_t)G * hd * 4, data->size) ||
        !fpga_k_range_ok(ch_off, (uint64_t)r * 2, data->size) ||
        !fpga_k_range_ok(summ_off, nb * 2 * hd * 4, data->size) ||
        !fpga_k_range_ok(code_off, (uint64_t)n * (r / 2), data->size) ||
        !fpga_k_range_ok(lmin_off, (uint64_t)n * 4, data->size) ||
        !fpga_k_range_ok(lstep_off, (uint64_t)n * 4, data->size) ||
        !fpga_k_range_ok(0, 4 + (uint64_t)(tb < n ? tb : n) * 4, out->size))
        return -1;
    const uint8_t *ch = (const uint8_t *)data->ptr + ch_off;
    for (uint32_t i = 0; i < r; i++)
        if ((uint32_t)(ch[2 * i] | ch[2 * i + 1] << 8) >= hd) return -1;
    tls_select(data->ptr, out->ptr, q_off, ch_off, summ_off, code_off, lmin_off, lstep_off, n, hd,
               G, r, bs, bb, tb);
    return 0;
}

const fpga_k_desc fpga_k_tls_select_desc = {
    .name = "tls_select",
    .n_args = 15,
    .kinds = {FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U64, FPGA_K_ARG_U64, FPGA_K_ARG_U64,
              FPGA_K_ARG_U64, FPGA_K_ARG_U64, FPGA_K_ARG_U64, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32},
    .run = tls_select_adapter,
};

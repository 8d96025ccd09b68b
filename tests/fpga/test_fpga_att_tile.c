/* The decode attention's tile step (fpga/kernels/dec_ops.h fpga_kd_att_tile), as the emulator
 * runs it, against the same arithmetic written a row at a time: each row's q.k summed over the
 * elements in order (fp32 x int8, or int8 x int8 in int32 under FPGA_DEC_F_QINT8), scaled, the
 * tile's max taken, the state rescaled once, then each row's exp and V added in row order. The
 * kernel computes the rows' sums side by side (K converted to floats once a tile, element-major)
 * so that the emulator runs them as vectors; that reorders nothing inside a sum, so the part's
 * state must come out bit for bit — over head sizes, groups, full and partial tiles, listed rows,
 * and several tiles in one part (the rescaling path). */
#include "fpga/kernels/dec_ops.h"
#include "tests/test.h"
#include <stdint.h>

/* the part's state of one query head, a row at a time */
typedef struct {
    float m, l, o[FPGA_DEC_MAX_HEAD_DIM];
} ref_head;

static void ref_tile(ref_head *h, const fpga_dec_desc *d, const float *q, const int8_t *q8,
                     float qs, int qint8, const uint8_t *tl, const uint32_t *rows, uint32_t n)
{
    const uint32_t hd = d->head_dim;
    float s[FPGA_DEC_TILE], mt = -INFINITY;
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t r = rows ? rows[k] : k;
        const int8_t *kr = (const int8_t *)(tl + fpga_dec_tile_k(hd, r));
        float dot = 0.0f;
        if (qint8) {
            int32_t acc = 0;
            for (uint32_t i = 0; i < hd; i++) acc += (int32_t)q8[i] * kr[i];
            dot = (float)acc * qs;
        } else {
            for (uint32_t i = 0; i < hd; i++) dot += q[i] * (float)kr[i];
        }
        uint16_t ks;
        memcpy(&ks, tl + fpga_dec_tile_ks(hd, r), 2);
        s[k] = dot * fpga_km_f16_to_f32(ks) * d->attn_scale;
        if (s[k] > mt) mt = s[k];
    }
    if (mt > h->m) {
        float f = expf(h->m - mt);
        h->l *= f;
        for (uint32_t i = 0; i < hd; i++) h->o[i] *= f;
        h->m = mt;
    }
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t r = rows ? rows[k] : k;
        const int8_t *vr = (const int8_t *)(tl + fpga_dec_tile_v(hd, r));
        uint16_t vs;
        memcpy(&vs, tl + fpga_dec_tile_vs(hd, r), 2);
        float p = expf(s[k] - h->m);
        h->l += p;
        float w = p * fpga_km_f16_to_f32(vs);
        for (uint32_t i = 0; i < hd; i++) h->o[i] += w * (float)vr[i];
    }
}

static uint32_t rnd(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*x >> 33);
}

enum { TILES = 5 };
static fpga_kd_att g_a;
static ref_head g_ref[4];
static uint8_t g_tiles[TILES][32 * FPGA_DEC_MAX_HEAD_DIM + 64];
static float g_q[4 * FPGA_DEC_MAX_HEAD_DIM];

/* TILES random tiles of one part through the kernel's step and the reference; the last tile
 * has its first `last` rows, or `last` of its rows listed. The heads whose state differs. */
static int one_case(uint64_t *seed, int qint8, uint32_t hd, uint32_t group, uint32_t last,
                    int listed)
{
    fpga_dec_desc d;
    memset(&d, 0, sizeof d);
    d.head_dim = hd;
    d.n_kv_heads = 2;
    d.n_heads = 2 * group;
    d.attn_scale = 1.0f / sqrtf((float)hd);
    d.flags = qint8 ? FPGA_DEC_F_QINT8 : 0;
    for (int t = 0; t < TILES; t++) {
        for (size_t i = 0; i < sizeof g_tiles[t]; i++) g_tiles[t][i] = (uint8_t)rnd(seed);
        for (uint32_t r = 0; r < FPGA_DEC_TILE; r++) { /* scales 2^-8 .. 2^-6 */
            uint16_t ks = (uint16_t)(0x1c00 + rnd(seed) % 0x800),
                     vs = (uint16_t)(0x1c00 + rnd(seed) % 0x800);
            memcpy(g_tiles[t] + fpga_dec_tile_ks(hd, r), &ks, 2);
            memcpy(g_tiles[t] + fpga_dec_tile_vs(hd, r), &vs, 2);
        }
    }
    for (uint32_t i = 0; i < group * hd; i++)
        g_q[i] = ((float)(rnd(seed) % 20001) - 10000.0f) / 2500.0f;
    uint32_t rows[FPGA_DEC_TILE];
    for (uint32_t k = 0; k < last; k++) rows[k] = k * FPGA_DEC_TILE / last;
    fpga_kd_att_init(&g_a, &d, g_q);
    fpga_kd_att_part_begin(&g_a);
    for (uint32_t g = 0; g < group; g++) {
        g_ref[g].m = -INFINITY;
        g_ref[g].l = 0.0f;
        for (uint32_t i = 0; i < hd; i++) g_ref[g].o[i] = 0.0f;
    }
    for (int t = 0; t < TILES; t++) {
        const uint32_t *rl = t == TILES - 1 && listed ? rows : NULL;
        uint32_t n = t == TILES - 1 ? last : FPGA_DEC_TILE;
        fpga_kd_att_tile(&g_a, &d, g_tiles[t], rl, n);
        for (uint32_t g = 0; g < group; g++)
            ref_tile(&g_ref[g], &d, g_q + g * hd, g_a.q8 + g * hd, g_a.qs[g], qint8, g_tiles[t], rl,
                     n);
    }
    int bad = 0;
    for (uint32_t g = 0; g < group; g++) {
        CHECK(isfinite(g_a.pl[g]) && g_a.pl[g] > 0.0f);
        bad += fpga_km_f2u(g_a.pm[g]) != fpga_km_f2u(g_ref[g].m) ||
               fpga_km_f2u(g_a.pl[g]) != fpga_km_f2u(g_ref[g].l) ||
               memcmp(g_a.po + g * hd, g_ref[g].o, hd * sizeof(float)) != 0;
    }
    return bad;
}

TEST(fpga_att_tile_equals_row_at_a_time)
{
    static const uint32_t hds[] = {128, 64, 48, 2};
    uint64_t seed = 7;
    int cases = 0, failed = 0;
    for (int qint8 = 0; qint8 < 2; qint8++)
        for (unsigned h = 0; h < sizeof hds / sizeof hds[0]; h++)
            for (uint32_t group = 1; group <= 4; group *= 4)
                for (uint32_t last = 1; last <= FPGA_DEC_TILE; last++)
                    for (int listed = 0; listed < 2; listed++, cases++)
                        if (one_case(&seed, qint8, hds[h], group, last, listed) && failed++ < 5)
                            t_fail(__FILE__, __LINE__,
                                   "qint8 %d hd %u group %u last %u listed %d: the state differs",
                                   qint8, hds[h], group, last, listed);
    CHECK_EQ(cases, 2 * 4 * 2 * FPGA_DEC_TILE * 2);
}

/* The K tile as floats, element-major: the emulator's x86 path (16 x 16 bytes transposed in
 * registers) against the plain loop, every head size the layout takes a multiple of 16 of, and
 * the ones it leaves to the loop. */
TEST(fpga_kt_fill_equals_plain_loop)
{
    static float a[FPGA_DEC_MAX_HEAD_DIM][FPGA_DEC_TILE], b[FPGA_DEC_MAX_HEAD_DIM][FPGA_DEC_TILE];
    static int8_t rows[FPGA_DEC_TILE][FPGA_DEC_MAX_HEAD_DIM + 1];
    static const uint32_t hds[] = {16, 32, 48, 64, 128, 256, 8, 2, 24};
    uint64_t seed = 11;
    for (int k = 0; k < FPGA_DEC_TILE; k++)
        for (int i = 0; i <= FPGA_DEC_MAX_HEAD_DIM; i++) rows[k][i] = (int8_t)rnd(&seed);
    rows[3][5] = -128, rows[7][0] = 127, rows[15][15] = -1; /* the ends of the range */
    const int8_t *krow[FPGA_DEC_TILE];
    for (int k = 0; k < FPGA_DEC_TILE; k++)
        krow[k] = rows[(k * 7) % FPGA_DEC_TILE] + (k % 2); /* odd addresses */
    for (unsigned h = 0; h < sizeof hds / sizeof hds[0]; h++)
        for (uint32_t n = 1; n <= FPGA_DEC_TILE; n++) {
            const uint32_t hd = hds[h];
            memset(a, 0xa5, sizeof a);
            memset(b, 0xa5, sizeof b);
            fpga_kd_kt_fill(a, krow, n, hd);
            fpga_kd_kt_fill_c(b, krow, n, hd);
            for (uint32_t i = 0; i < hd; i++)
                CHECK_MSG(!memcmp(a[i], b[i], n * sizeof(float)), "hd %u n %u element %u", hd, n,
                          i);
            CHECK_EQ(a[hd - 1][n - 1], (float)krow[n - 1][hd - 1]);
        }
}

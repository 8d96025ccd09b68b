/* The decode kernel attending only selected positions (fpga/kernels/dec_ops.h fpga_kd_attend_sel,
 * dec_step.h fpga_kd_step_attention_sel: AsyncTLS's token sets on the card):
 *  - a table listing every position of every (layer, KV head), or marking every list dense,
 *    gives the dense step's logits bit for bit, step after step;
 *  - a sparse table (the first layers dense, the others a sink + a recent window) reads fewer
 *    bytes and takes less modeled time than the dense step, and changes the logits; the same
 *    table twice gives the same logits (scattered single positions cost a command per tile:
 *    on stories260K's 320-byte tiles that is more than the bytes saved, as on the hardware);
 *  - a malformed table (a position past the step, not ascending, a count above the capacity)
 *    is refused before the run (ACCEL_ERR_INVALID), and the card decodes on. */
#include "devices/devices.h"
#include "fpga/kernels/dec_layout.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill_all(uint32_t *t, int L, int Hk, uint32_t cap, int pos)
{
    for (int i = 0; i < L * Hk; i++) {
        uint32_t *list = t + (size_t)i * (cap + 1);
        list[0] = (uint32_t)pos + 1;
        for (int p = 0; p <= pos; p++) list[1 + p] = (uint32_t)p;
    }
}

/* layers < dense_layers dense; the others: positions 0..15, one in 37 (per head), the last 32 */
static void fill_sparse(uint32_t *t, int L, int Hk, uint32_t cap, int pos, int dense_layers,
                        int scatter)
{
    for (int l = 0; l < L; l++)
        for (int h = 0; h < Hk; h++) {
            uint32_t *list = t + ((size_t)l * Hk + h) * (cap + 1);
            if (l < dense_layers) {
                list[0] = FPGA_DEC_SEL_DENSE;
                continue;
            }
            uint32_t n = 0;
            for (int p = 0; p <= pos; p++)
                if (p < 16 || (scatter && p % 37 == h) || p > pos - 32) list[1 + n++] = (uint32_t)p;
            list[0] = n;
        }
}

TEST(fpga_decode_selected_positions)
{
    model *m;
    accel_dev *f;
    if (tf_open("fpga-emu", 8, &m, &f)) return;
    enum { N = 300, STEPS = 4 };
    const int V = m->cfg.vocab, L = m->cfg.n_layers, Hk = m->cfg.n_kv_heads;
    const uint32_t cap = N + STEPS;
    int32_t *ids = malloc(sizeof *ids * (N + STEPS));
    for (int i = 0; i < N + STEPS; i++) ids[i] = (int32_t)((i * 29 + 3) % V);
    uint32_t *table = malloc(sizeof *table * (size_t)L * Hk * (cap + 1));
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *c = malloc(sizeof(float) * V);
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(f, N + STEPS, &sa) == 0 && accel_seq_new(f, N + STEPS, &sb) == 0);
    accel_prefill_req r = {.seq = sa, .ids = ids, .n = N};
    REQUIRE(accel_prefill(f, &r) == 0);
    r.seq = sb;
    REQUIRE(accel_prefill(f, &r) == 0);
    fpga_card *card = fpga_dev_card(f);
    for (int s = 0; s < STEPS; s++) {
        const int pos = N + s;
        REQUIRE(accel_decode(f, 1, &sa, &ids[pos], a) == 0);
        const fpga_emu_run_stats dense = card->last_dec;
        if (s % 2 == 0) {
            fill_all(table, L, Hk, cap, pos);
        } else {
            for (int i = 0; i < L * Hk; i++) table[(size_t)i * (cap + 1)] = FPGA_DEC_SEL_DENSE;
        }
        REQUIRE(fpga_dev_select_next(f, table, cap) == 0);
        REQUIRE(accel_decode(f, 1, &sb, &ids[pos], b) == 0);
        CHECK_MSG(memcmp(a, b, sizeof(float) * V) == 0, "step %d: every position listed != dense", s);
        if (s % 2) /* the same KV reads, plus one count per list */
            CHECK_EQ(card->last_dec.bytes_read, dense.bytes_read + 4ull * L * Hk);
    }
    /* a sparse table: fewer bytes, less time, other logits; the same again gives the same bits */
    const int pos = N + STEPS - 1;
    accel_seq *sc, *sd;
    REQUIRE(accel_seq_new(f, N + STEPS, &sc) == 0 && accel_seq_new(f, N + STEPS, &sd) == 0);
    r = (accel_prefill_req){.seq = sc, .ids = ids, .n = pos};
    REQUIRE(accel_prefill(f, &r) == 0);
    r.seq = sd;
    REQUIRE(accel_prefill(f, &r) == 0);
    REQUIRE(accel_decode(f, 1, &sc, &ids[pos], a) == 0);
    const fpga_emu_run_stats dense = card->last_dec;
    fill_sparse(table, L, Hk, cap, pos, 2, 0);
    REQUIRE(fpga_dev_select_next(f, table, cap) == 0);
    REQUIRE(accel_decode(f, 1, &sd, &ids[pos], b) == 0);
    const fpga_emu_run_stats sparse = card->last_dec;
    CHECK(sparse.bytes_read < dense.bytes_read);
    /* exactly: the dense reads, less the tiles no listed row lies in, plus the lists */
    {
        const fpga_dec_desc *dd = &card->desc;
        const uint64_t tile = 32ull * (dd->head_dim + 2);
        uint64_t unread = 0, lists = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < Hk; h++) {
                const uint32_t *list = table + ((size_t)l * Hk + h) * (cap + 1);
                if (list[0] == FPGA_DEC_SEL_DENSE) {
                    lists += 4;
                    continue;
                }
                lists += 4ull * (1 + list[0]);
                uint32_t tiles = (uint32_t)(pos + 1 + FPGA_DEC_TILE - 1) / FPGA_DEC_TILE, hit = 0;
                for (uint32_t t = 0; t < tiles; t++) {
                    int any = 0;
                    for (uint32_t e = 0; e < list[0] && !any; e++) any = list[1 + e] / FPGA_DEC_TILE == t;
                    hit += (uint32_t)any;
                }
                unread += (uint64_t)(tiles - hit) * tile;
            }
        CHECK_EQ(sparse.bytes_read, dense.bytes_read - unread + lists);
    }
    /* the modeled time need not drop on this model: its 320-byte tiles cost less than a memory
     * command, and the io channel carries the lists (BENCHMARKS.md prices a 7B shape) */
    CHECK(memcmp(a, b, sizeof(float) * V) != 0);
    accel_seq_truncate(f, sd, pos);
    REQUIRE(fpga_dev_select_next(f, table, cap) == 0);
    REQUIRE(accel_decode(f, 1, &sd, &ids[pos], c) == 0);
    CHECK(memcmp(b, c, sizeof(float) * V) == 0);

    /* malformed tables fail the run */
    for (int k = 0; k < 3; k++) {
        accel_seq_truncate(f, sd, pos);
        fill_sparse(table, L, Hk, cap, pos, 0, 1);
        uint32_t *list = table + (cap + 1) * 3;
        if (k == 0) list[list[0]] = (uint32_t)pos + 1;         /* past the step */
        if (k == 1) list[2] = list[1];                         /* not ascending */
        if (k == 2) list[0] = cap + 1;                         /* above the capacity */
        REQUIRE(fpga_dev_select_next(f, table, cap) == 0);
        CHECK_EQ(accel_decode(f, 1, &sd, &ids[pos], c), ACCEL_ERR_INVALID);
    }
    accel_seq_truncate(f, sd, pos);
    CHECK_EQ(accel_decode(f, 1, &sd, &ids[pos], c), 0); /* the selection was consumed: dense */
    CHECK(memcmp(a, c, sizeof(float) * V) == 0);
    CHECK(fpga_dev_select_next(f, table, 1u << 30) != 0); /* does not fit the io */
    accel_seq_free(f, sa);
    accel_seq_free(f, sb);
    accel_seq_free(f, sc);
    accel_seq_free(f, sd);
    free(ids), free(table), free(a), free(b), free(c);
    accel_free(f);
    model_free(m);
}

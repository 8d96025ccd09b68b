/* kv_scatter's arguments as the emulated card's kernel checks them (fpga/kernels/kv_scatter.c,
 * kv_scatter_adapter) before it writes a byte: the host (fpga/card.c fpga_card_scatter) never
 * sends bad ones, so they are set here by hand on the card's own run. Each bad set — a block
 * count of 0 or past FPGA_DEC_SCATTER_IDS, a piece longer than its blocks, a block id past the
 * pool, an unknown pool, a layer past the model, more positions than the slots take, a slot
 * size that is not whole words or past the slot's BO, a slab of no tiles or too short, a slab
 * inside the image — ends the run in ERROR, the emulator stays up, and a good run on the same
 * card completes after them (its report in slot 0's last 64 bytes). */
#include "fpga/kernels/dec_layout.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"

/* layer, pos0, n, per, kv_off, part_tiles, stage_bytes, paged, n_ids; ids[0] the table's first */
typedef struct sc_args {
    const char *what;
    uint32_t layer, pos0, n, per;
    uint64_t kv_off;
    uint32_t part_tiles;
    uint64_t stage_bytes;
    uint32_t paged, n_ids, id0;
} sc_args;

/* The run's state after it ends (ERT_CMD_STATE_*), or -1 when it could not be started. */
static int sc_run(fpga_card *c, const sc_args *a)
{
    xrtRunHandle r = c->r_sc[0];
    uint8_t *tab = c->stage_host[0][0] + fpga_dec_stage_table_off(FPGA_CARD_STAGE_BYTES);
    for (uint32_t i = 0; i < FPGA_DEC_SCATTER_IDS; i++) {
        uint32_t id = i ? i : a->id0;
        memcpy(tab + 4 * i, &id, 4);
    }
    if (fpga_xrt_bo_sync(c->x, c->stage[0][0], XCL_BO_SYNC_BO_TO_DEVICE, 4 * FPGA_DEC_SCATTER_IDS,
                         fpga_dec_stage_table_off(FPGA_CARD_STAGE_BYTES)) ||
        fpga_xrt_run_set_u32(c->x, r, 36, a->layer) || fpga_xrt_run_set_u32(c->x, r, 37, a->pos0) ||
        fpga_xrt_run_set_u32(c->x, r, 38, a->n) || fpga_xrt_run_set_u32(c->x, r, 39, a->per) ||
        fpga_xrt_run_set_u64(c->x, r, 40, a->kv_off) ||
        fpga_xrt_run_set_u32(c->x, r, 41, a->part_tiles) ||
        fpga_xrt_run_set_u64(c->x, r, 42, a->stage_bytes) ||
        fpga_xrt_run_set_u32(c->x, r, 43, a->paged) ||
        fpga_xrt_run_set_u32(c->x, r, 44, a->n_ids) || fpga_xrt_run_start(c->x, r))
        return -1;
    enum ert_cmd_state s = ERT_CMD_STATE_NEW;
    (void)fpga_xrt_run_wait(c->x, r, 120000, &s); /* tiny runs; TSan is slow */
    return (int)s;
}

TEST(fpga_scatter_refuses_bad_arguments)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu:0", 8, &m, &d)) return;
    fpga_card *c = fpga_dev_card(d);
    const uint32_t T = fpga_dec_kv_block_tokens(&c->desc), L = c->desc.n_layers;
    const uint64_t pool = fpga_card_pool_lo(c), S = FPGA_CARD_STAGE_BYTES;
    /* the first block id past the pool: whole superblocks between the pool's start and the
     * bank's end (fpga_dec_kvmap_ok) */
    fpga_dec_kvmap km;
    uint32_t id0 = 0;
    fpga_dec_kvmap_paged(&c->desc, &c->lo, pool, &id0, 1, &km);
    REQUIRE(km.super_bytes > 0);
    const uint64_t first_bad = (c->bank_bytes - pool) / km.super_bytes * km.group;
    REQUIRE(T >= 2 && first_bad > 2 && first_bad < 0xfffffff0u);
    const uint32_t blocks = (uint32_t)first_bad;
    const uint32_t slab = c->desc.kv_parts * FPGA_DEC_TILE; /* the positions of one tile a part */
    fpga_emu_card_stats before, after;
    REQUIRE(fpga_xrt_emu_card_stats(c->x, c->dev, &before) == 0);
    const sc_args good = {"good", 0, 0, 4, 1, pool, 0, S, 1, 1, 0};
    const sc_args bad[] = {
        {"no blocks", 0, 0, 4, 1, pool, 0, S, 1, 0, 0},
        {"blocks past FPGA_DEC_SCATTER_IDS", 0, 0, 4, 1, pool, 0, S, 1, FPGA_DEC_SCATTER_IDS + 1,
         0},
        {"a piece longer than its blocks", 0, T - 1, 2, 1, pool, 0, S, 1, 1, 0},
        {"a block id past the pool", 0, 0, 4, 1, pool, 0, S, 1, 1, blocks},
        {"a block id far past the pool", 0, 0, 4, 1, pool, 0, S, 1, 1, 0xfffffff0u},
        {"an unknown pool", 0, 0, 4, 1, pool, 0, S, 4, 1, 0},
        {"a layer past the model", L, 0, 4, 1, pool, 0, S, 1, 1, 0},
        {"no positions", 0, 0, 0, 1, pool, 0, S, 1, 1, 0},
        {"more positions than the slots take", 0, 0, 5, 1, pool, 0, S, 1, 1, 0},
        {"a slot size not in whole words", 0, 0, 4, 1, pool, 0, S - 2, 1, 1, 0},
        {"a slot size past the slot's BO", 0, 0, 4, 1, pool, 0, 2 * S, 1, 1, 0},
        {"a slot size smaller than its tail", 0, 0, 4, 1, pool, 0, 64, 1, 1, 0},
        {"a slab of no tiles", 0, 0, 4, 1, pool, 0, S, 0, 0, 0},
        {"a slab too short for the piece", 0, 0, slab + 1, slab + 1, pool, 1, S, 0, 0, 0},
        {"a slab inside the image", 0, 0, 4, 1, 0, 1, S, 0, 0, 0},
        {"a slab past the bank", 0, 0, 4, 1, fpga_card_pool_hi(c), 1, S, 0, 0, 0},
    };
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < nbad; i++)
        CHECK_MSG(sc_run(c, &bad[i]) == ERT_CMD_STATE_ERROR, "%s: not refused", bad[i].what);
    /* the card goes on: a good piece completes and reports */
    CHECK_EQ(sc_run(c, &good), ERT_CMD_STATE_COMPLETED);
    const sc_args last_block = {"the pool's last block", 0, 0, 4, 1, pool, 0, S, 1, 1, blocks - 1};
    CHECK_EQ(sc_run(c, &last_block), ERT_CMD_STATE_COMPLETED);
    uint32_t report[4];
    CHECK_EQ(fpga_xrt_bo_sync(c->x, c->stage[0][0], XCL_BO_SYNC_BO_FROM_DEVICE, 64, S - 64), 0);
    CHECK_EQ(fpga_xrt_bo_read(c->x, c->stage[0][0], report, sizeof report, S - 64), 0);
    CHECK_EQ(report[0], FPGA_DEC_STAGE_REPORT_MAGIC);
    CHECK_EQ(report[3], 4);
    REQUIRE(fpga_xrt_emu_card_stats(c->x, c->dev, &after) == 0);
    CHECK_EQ(after.runs_failed - before.runs_failed, (uint64_t)nbad);
    accel_free(d);
    model_free(m);
}

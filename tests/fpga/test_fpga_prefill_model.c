/* fpga/pf_model.c prices the prefill kernel's runs from the layouts alone; the benchmark uses it
 * for 7B / 8B prompts. Here it must equal, command for command, what the emulator measured while
 * the real kernel ran: every mode, chunks of every size, positions inside and across tiles and
 * parts, with and without the kvf / qf blocks, GQA (stories260K) and MHA (tiny-llama2-mha), W8
 * and W4. The costs do not depend on the values, so the runs go straight to the card. */
#include "fpga/pf_model.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdlib.h>

static void runs(const char *model_dir, int wbits)
{
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    model *m;
    accel_dev *d;
    if (tf_open_dir(model_dir, "fpga-emu", wbits, &m, &d)) return;
    fpga_card *c = fpga_dev_card(d);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 400, &s) == 0);
    int32_t id = 1;
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    REQUIRE(accel_prefill(d, &(accel_prefill_req){.seq = s, .ids = &id, .n = 1, .logits = lg}) ==
            0);
    uint64_t ws_off;
    fpga_dec_kvmap km; /* the runs below address a slab of 400 positions at the pool's bottom */
    REQUIRE(fpga_dev_seq_kvmap(d, s, &km) == 0);
    const uint64_t kv_off = km.base;
    const uint32_t part_tiles = fpga_dec_part_tiles(400, c->desc.kv_parts);
    REQUIRE(fpga_dev_last_prefill(d, NULL, &ws_off, NULL, NULL) == 0);
    const uint32_t L = m->cfg.n_layers, kvf = FPGA_PF_F_KVF, sp = FPGA_PF_F_KVF | FPGA_PF_F_SPARSE;
    const struct {
        uint32_t mode, layer, pos0, n, r0, r1;
    } cases[] = {
        {FPGA_PF_DENSE | kvf, 0, 0, 300, 0, 300},         /* 3 chunks, the last partial */
        {FPGA_PF_DENSE, L - 1, 37, 100, 0, 100},          /* after existing KV, off tile */
        {FPGA_PF_DENSE | kvf, 1 % L, 130, 260, 128, 256}, /* rows of a later chunk only */
        {FPGA_PF_QKV | sp, 2 % L, 0, 300, 0, 300},
        {FPGA_PF_POST | sp, 3 % L, 0, 300, 0, 300},
        {FPGA_PF_HEAD | kvf, 0, 0, 300, 299, 300},
        {FPGA_PF_HEAD, 0, 11, 5, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REQUIRE(fpga_card_pf_run(c, cases[i].mode, cases[i].layer, cases[i].pos0, cases[i].n,
                                 cases[i].r0, cases[i].r1, kv_off, part_tiles, ws_off, 0) == 0);
        fpga_dec_cost mc;
        REQUIRE(fpga_pf_model_run(&c->desc, cases[i].mode, cases[i].layer, cases[i].pos0,
                                  cases[i].n, cases[i].r0, cases[i].r1, &mc) == 0);
        char what[128];
        snprintf(what, sizeof what, "%s W%d case %zu", model_dir, wbits, i);
        tf_same_cost(&mc, &c->last_pf, what);
    }
    fpga_dec_cost mc;
    CHECK_EQ(fpga_pf_model_run(&c->desc, FPGA_PF_ATTN | sp, 0, 0, 300, 0, 300, &mc), -1);
    accel_seq_free(d, s);
    free(lg);
    accel_free(d);
    model_free(m);
}

TEST(fpga_cost_model_equals_emulator_prefill)
{
    runs("models/stories260K", 8);
    runs("models/stories260K", 4);
    runs("models/tiny-llama2-mha", 8);
}

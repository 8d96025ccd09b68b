/* fpga/dec_model.c prices the kernels from the layout alone; the benchmarks use it for shapes
 * too large to run. Here it must equal, command for command, what the emulator measured while
 * the real kernels ran: decode steps at positions around tile and part boundaries (W8 and W4,
 * GQA and MHA) and every scatter run of a many-piece import. */
#include "fpga/dec_model.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <stdlib.h>

static void steps(const char *model_dir, int wbits)
{
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1); /* the costs do not depend on the values */
    model *m;
    accel_dev *d;
    if (tf_open_dir(model_dir, "fpga-emu", wbits, &m, &d)) return;
    fpga_card *c = fpga_dev_card(d);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *s;
    const int n = 140; /* crosses tiles (16) and parts (8 x 16 = 128 for stories260K) */
    REQUIRE(accel_seq_new(d, n, &s) == 0);
    for (int p = 0; p < n; p++) {
        int32_t id = (p * 37 + 1) % m->cfg.vocab;
        REQUIRE(accel_decode(d, 1, &s, &id, lg) == 0);
        if (p < 3 || p % 16 == 15 || p % 16 == 0 || p == n - 1) {
            fpga_dec_cost mc;
            fpga_dec_model_step_paged(&c->desc, (uint32_t)p, 0, &mc); /* first sequence: ids 0.. */
            char what[160];
            snprintf(what, sizeof what, "%s pos %d", model_dir, p);
            tf_same_cost(&mc, &c->last_dec, what);
        }
    }
    accel_seq_free(d, s);
    free(lg);
    accel_free(d);
    model_free(m);
}

TEST(fpga_cost_model_equals_emulator_decode)
{
    steps("models/stories260K", 8);
    steps("models/stories260K", 4);
    steps("models/tiny-llama2-mha", 8);
}

TEST(fpga_cost_model_equals_emulator_scatter)
{
    model *m;
    accel_dev *d;
    char err[256];
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    accel_opts oc = {.threads = 1};
    accel_dev *cpu = devices_open("cpu", m, &oc, err, sizeof err);
    REQUIRE(cpu);
    /* 45 positions in pieces of 11 (one block); 300 in pieces of 150, each spanning two of the
     * 128-position blocks (one run a piece, the block table read from slot 0) */
    const int nts[2] = {45, 300}, pieces[2] = {11, 150};
    fpga_card *c = fpga_dev_card(d);
    REQUIRE(fpga_dec_kv_block_tokens(&c->desc) == 128);
    uint64_t model_ns = 0, runs = 0, sc_runs0 = c->sc_runs, sc_ns0 = c->sc_modeled_ns;
    int g = 0;
    for (int k = 0; k < 2; k++) {
        const int NT = nts[k], PIECE = pieces[k];
        int32_t ids[300];
        for (int i = 0; i < NT; i++) ids[i] = (i * 29 + 1) % m->cfg.vocab;
        tf_kv kv;
        REQUIRE(tf_cpu_kv(cpu, ids, NT, NULL, &kv) == 0);
        c->piece_limit = PIECE;
        accel_seq *s;
        REQUIRE(accel_seq_new(d, 320, &s) == 0);
        /* pieces alternating between the two staging groups; the import's landed CRCs checked */
        CHECK_EQ(tf_import(d, s, &kv), 0);
        for (int l = 0; l < m->cfg.n_layers; l++)
            for (int t0 = 0; t0 < NT; t0 += PIECE) {
                int n = NT - t0 < PIECE ? NT - t0 : PIECE;
                int per = (n + FPGA_DEC_STAGE_SLOTS - 1) / FPGA_DEC_STAGE_SLOTS;
                int ch[FPGA_DEC_STAGE_SLOTS];
                for (int j = 0; j < FPGA_DEC_STAGE_SLOTS; j++)
                    ch[j] = 1 + g * FPGA_DEC_STAGE_SLOTS + j;
                fpga_dec_cost mc;
                fpga_dec_model_scatter(&c->desc, (uint32_t)l, (uint32_t)t0, (uint32_t)n,
                                       (uint32_t)per, ch, 1, 0, &mc);
                model_ns += mc.modeled_ns;
                runs++;
                g ^= 1;
            }
        accel_seq_free(d, s);
        tf_kv_free(&kv);
    }
    CHECK_EQ(c->sc_runs - sc_runs0, runs);
    CHECK_EQ(c->sc_modeled_ns - sc_ns0, model_ns);
    accel_free(cpu);
    accel_free(d);
    model_free(m);
}

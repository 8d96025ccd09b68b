/* AsyncTLS with the KV in the card's DDR4 (fpga/BANKS.md "DDR4", fpga/kernels/tls_dec.h
 * "offload"): a sequence whose KV lives in the emulated DDR4 banks, decoded through the staggered
 * pipeline from a resident cache of level-1 blocks in HBM, against references it was not
 * written into:
 *  - the same sequence kept in HBM and decoded through the same pipeline (the card's in-HBM
 *    sparse decode): logits, selections and the pipeline's counts equal bit for bit, step after
 *    step, across a new block (the kernel arithmetic is the same; only where the tiles are read
 *    from differs);
 *  - the CPU reference of the pipeline (sparse/tls_pipe.h, sparse_tls_pipe_step) on the card's
 *    own queries and KV: the same attended positions per (layer, KV head) and the same number
 *    of blocks moved;
 *  - where the bytes went: the offloaded sequence took no HBM KV block, and its decode runs read
 *    DDR4 (or host memory, the tier past it);
 *  - after a truncation both choose anew and stay equal;
 *  - dense decode of an offloaded sequence (its tiles read straight from DDR4) equals a dense
 *    card decoding the same KV from HBM, bit for bit.
 * The prompt's KV comes from a CPU prefill through the wire format (kv_scatter into DDR4,
 * kv_check reading it back there). */
#include "devices/devices.h"
#include "devices/tls_calib.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/tls_dec.h"
#include "sparse/tls_pipe.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A card opened with the tier and pipeline settings it reads at open. */
static accel_dev *open_card(const model *m, const char *name, const char *spec, const char *chan,
                            const char *tier, const char *stagger)
{
    accel_opts o = {.weight_bits = 8, .decode_sparse = spec, .sparse_channels = chan};
    char err[512];
    tf_cache_env();
    setenv("TANDEM_FPGA_KV_TIER", tier, 1);
    setenv("TANDEM_FPGA_TLS_STAGGER", stagger, 1);
    accel_dev *d = devices_open(name, m, &o, err, sizeof err);
    unsetenv("TANDEM_FPGA_KV_TIER");
    unsetenv("TANDEM_FPGA_TLS_STAGGER");
    if (!d) t_fail(__FILE__, __LINE__, "open %s %s: %s", name, spec ? spec : "", err);
    return d;
}

/* The pipeline reference for step n - 1 on the card's KV (read from `card`) and queries q:
 * every sparse group's attended positions against the card's table; *moved: blocks fetched. */
static int pipe_check(accel_dev *card, accel_seq *s, sparse_tls_pipe *pipe,
                      const sparse_tls_params *p, const model_channels *ch, const model *m, int n,
                      const uint32_t *table, const float *q, int64_t *moved)
{
    const int L = m->cfg.n_layers, Hk = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    const int H = m->cfg.n_heads, G = H / Hk, tb = p->token_budget;
    sparse_tls_seq *ts = tf_tls_keys(card, s, m, p, ch, n);
    if (!ts) return 1;
    float *fw = malloc(sizeof(float) * sparse_tls_pipe_work_floats(p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_pipe_work_ints(p, n)),
            *ref = malloc(sizeof(int32_t) * n);
    int bad = 0;
    *moved = 0;
    for (int l = p->dense_layers; l < L; l++)
        for (int g = 0; g < Hk; g++) {
            const uint32_t *list = table + ((size_t)l * Hk + g) * (tb + 1);
            const float *qg = q + ((size_t)l * H + (size_t)g * G) * hd;
            int mv = 0;
            int cnt = sparse_tls_pipe_step(pipe, p, ts, l, g, qg, G, (size_t)hd, n, ref, fw, iw, &mv);
            *moved += mv;
            int same = (int)list[0] == cnt;
            for (int e = 0; same && e < cnt; e++) same = (int32_t)list[1 + e] == ref[e];
            if (!same && bad++ < 3)
                t_fail(__FILE__, __LINE__, "n %d layer %d head %d: card %u positions, cpu %d", n, l,
                       g, list[0], cnt);
        }
    sparse_tls_seq_free(ts);
    free(fw), free(iw), free(ref);
    return bad;
}

/* tier: TANDEM_FPGA_KV_TIER of the offloading card; tier_bank: its bank past HBM (0: DDR4's
 * two, 2: host memory) */
static void offload_run(const char *tier, int tier_bank)
{
    char err[512];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    const char *chan = t_tls_channels(m, "fpga_ddr_ch.bin");
    REQUIRE(chan);
    /* stories260K: 4 KV heads x 8 parts fill the 32 channels; a level-1 block of 128 positions
     * is one tile of every part */
    const char *spec = "asynctls,block_size=128,block_budget=2,token_budget=40,dense_layers=1,"
                       "dense_below=0";
    accel_dev *hbm = open_card(m, "fpga-emu:0", spec, chan, "hbm", "1");
    accel_dev *ddr = open_card(m, "fpga-emu:1", spec, chan, tier, "0");
    accel_opts oc = {0};
    accel_dev *cpu = devices_open("cpu", m, &oc, err, sizeof err);
    REQUIRE(hbm && ddr && cpu);
    sparse_tls_params p;
    int on, chan_set;
    REQUIRE(sparse_tls_parse(spec, m->cfg.head_dim, &p, &on, &chan_set, err, sizeof err) == 0);
    model_channels ch;
    REQUIRE(model_channels_load(chan, &ch, err, sizeof err) == 0);
    p.channels = ch.r;
    enum { N = 378, STEPS = 9 }; /* crosses into a new level-1 block at 384 */
    const int V = m->cfg.vocab, L = m->cfg.n_layers, Hk = m->cfg.n_kv_heads;
    int32_t *ids = malloc(sizeof *ids * (N + STEPS));
    for (int i = 0; i < N + STEPS; i++) ids[i] = (int32_t)((i * 31 + 7) % V);
    ids[0] = 1;
    tf_kv kv;
    REQUIRE(tf_cpu_kv(cpu, ids, N, NULL, &kv) == 0);
    accel_info info;
    accel_get_info(ddr, &info);
    const int hbm_used0 = info.kv_blocks_used;
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(hbm, N + STEPS, &sa) == 0 && accel_seq_new(ddr, N + STEPS, &sb) == 0);
    REQUIRE(tf_import(hbm, sa, &kv) == 0);
    REQUIRE(tf_import(ddr, sb, &kv) == 0);
    /* the offloaded sequence's KV took no block of the HBM pool (its decode runs read DDR4,
     * below); the in-HBM one did */
    accel_get_info(ddr, &info);
    CHECK_EQ(info.kv_blocks_used, hbm_used0);
    accel_get_info(hbm, &info);
    CHECK(info.kv_blocks_used > 0);

    sparse_tls_pipe *pipe = sparse_tls_pipe_new(&p, L, Hk, N + STEPS);
    REQUIRE(pipe);
    REQUIRE(fpga_dev_tls_report(hbm, 1, NULL, NULL) == 0 && fpga_dev_tls_report(ddr, 1, NULL, NULL) == 0);
    const size_t tsz = (size_t)L * Hk * (p.token_budget + 1);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    uint32_t *ta = malloc(sizeof(uint32_t) * tsz), *tb = malloc(sizeof(uint32_t) * tsz);
    float *qa = malloc(sizeof(float) * L * m->cfg.n_heads * m->cfg.head_dim);
    float *qb = malloc(sizeof(float) * L * m->cfg.n_heads * m->cfg.head_dim);
    int64_t moved_ref = 0;
    uint64_t ddr_read = 0;
    for (int s = 0; s < STEPS; s++) {
        REQUIRE(accel_decode(hbm, 1, &sa, &ids[N + s], a) == 0);
        REQUIRE(accel_decode(ddr, 1, &sb, &ids[N + s], b) == 0);
        CHECK(memcmp(a, b, sizeof(float) * V) == 0);
        REQUIRE(fpga_dev_tls_report(hbm, 1, ta, qa) == 0);
        REQUIRE(fpga_dev_tls_report(ddr, 1, tb, qb) == 0);
        CHECK(memcmp(ta, tb, sizeof(uint32_t) * tsz) == 0);
        int64_t mv = 0;
        CHECK_EQ(pipe_check(hbm, sa, pipe, &p, &ch, m, N + s + 1, ta, qa, &mv), 0);
        moved_ref += mv;
        fpga_card *card = fpga_dev_card(ddr);
        fpga_emu_run_stats rs;
        if (card && fpga_xrt_emu_run_stats(card->x, card->r_dec, &rs) == 0)
            ddr_read += rs.ext_bytes[tier_bank] + (tier_bank ? 0 : rs.ext_bytes[1]);
    }
    accel_decode_stats da, db;
    REQUIRE(accel_seq_decode_stats(hbm, sa, &da) == 0 && accel_seq_decode_stats(ddr, sb, &db) == 0);
    CHECK_EQ(da.blocks_new, db.blocks_new);
    CHECK_EQ(da.blocks_kept, db.blocks_kept);
    CHECK_EQ(da.keys_read, db.keys_read);
    CHECK_EQ(db.blocks_new, moved_ref);
    CHECK_EQ(db.blocks_kept, pipe->baseline);
    CHECK(db.keys_read < db.keys_total);
    CHECK(ddr_read > 0);
    CHECK(moved_ref > 0 && pipe->fetched > 0);
    CHECK(db.blocks_new < db.blocks_kept); /* only the difference moved */

    /* a truncation back into the prompt: both forget the pipeline and choose anew, alike */
    REQUIRE(accel_seq_truncate(hbm, sa, N + 2) == 0 && accel_seq_truncate(ddr, sb, N + 2) == 0);
    for (int s = 2; s < 5; s++) {
        REQUIRE(accel_decode(hbm, 1, &sa, &ids[N + s], a) == 0);
        REQUIRE(accel_decode(ddr, 1, &sb, &ids[N + s], b) == 0);
        CHECK(memcmp(a, b, sizeof(float) * V) == 0);
    }

    /* dense from DDR4 == dense from HBM: the same imported KV, decode_sparse off */
    accel_seq *sc, *sd;
    accel_dev *dense = hbm;
    REQUIRE(accel_seq_new(dense, N + 2, &sc) == 0 && accel_seq_new(ddr, N + 2, &sd) == 0);
    REQUIRE(accel_seq_decode_sparse(ddr, sd, NULL) == 0 && accel_seq_decode_sparse(dense, sc, NULL) == 0);
    REQUIRE(tf_import(dense, sc, &kv) == 0);
    REQUIRE(tf_import(ddr, sd, &kv) == 0);
    for (int s = 0; s < 2; s++) {
        REQUIRE(accel_decode(dense, 1, &sc, &ids[N + s], a) == 0);
        REQUIRE(accel_decode(ddr, 1, &sd, &ids[N + s], b) == 0);
        CHECK(memcmp(a, b, sizeof(float) * V) == 0);
    }
    accel_seq_free(dense, sc);
    accel_seq_free(ddr, sd);
    sparse_tls_pipe_free(pipe);
    model_channels_free(&ch);
    accel_seq_free(hbm, sa);
    accel_seq_free(ddr, sb);
    tf_kv_free(&kv);
    free(ids), free(a), free(b), free(ta), free(tb), free(qa), free(qb);
    accel_free(hbm);
    accel_free(ddr);
    accel_free(cpu);
    model_free(m);
}

TEST(fpga_tls_ddr_offload_equals_hbm_and_cpu_pipeline)
{
    offload_run("ddr", 0);
}

/* the same with the KV in host memory (HOST[0], over PCIe): DDR4 is not the only slower tier */
TEST(fpga_tls_host_offload_equals_hbm_and_cpu_pipeline)
{
    offload_run("host", 2);
}

/* What the card tells the scheduler about the DDR4 tier (accel_info: offload_bytes, resident_*)
 * against the arena the card builds for such a sequence (fpga/kernels/tls_dec.h,
 * fpga_tls_arena_of): the resident cache of a full-length sequence within 10 % of its bytes. */
TEST(fpga_tls_ddr_describes_its_resident_cache)
{
    char err[512];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    const char *chan = t_tls_channels(m, "fpga_ddr_ch.bin");
    REQUIRE(chan);
    const char *spec = "asynctls,block_size=128,block_budget=2,token_budget=40,dense_layers=1,"
                       "dense_below=0";
    accel_dev *card = open_card(m, "fpga-emu:0", spec, chan, "auto", "0");
    accel_dev *plain = open_card(m, "fpga-emu:1", NULL, NULL, "auto", "0");
    REQUIRE(card && plain);
    accel_info info;
    accel_get_info(plain, &info);
    CHECK_EQ(info.offload_bytes, 0); /* no channel file: no sparse decode, no offload */
    accel_get_info(card, &info);
    /* the DDR4 pool (most of 32 GiB) and the host memory one (16 GiB) */
    CHECK(info.offload_bytes >= 32ull << 30);
    CHECK(info.offload_bytes <= 48ull << 30);
    CHECK_EQ(info.resident_default_blocks, 2);
    const fpga_card *c = fpga_dev_card(card);
    const uint32_t cap = (uint32_t)m->cfg.max_pos;
    fpga_tls_io io = {.block_size = 128, .block_budget = 2, .r = 4, .dense_layers = 1, .cap = cap,
                      .stagger = 1, .offload = 1};
    fpga_tls_arena a;
    fpga_tls_arena_of(&c->desc, &io, &a);
    const double arena = (double)a.chan_bytes * FPGA_DEC_CH;
    const double said = (double)cap * info.resident_per_token + 4.0 * info.resident_per_block;
    CHECK_MSG(said >= 0.9 * arena && said <= 1.1 * arena, "described %.0f bytes, the arena %.0f",
              said, arena);
    accel_free(card);
    accel_free(plain);
    model_free(m);
}

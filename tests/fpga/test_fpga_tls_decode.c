/* AsyncTLS sparse decode on the emulated card (decode_sparse asynctls: fpga/kernels/tls_dec.h in
 * the decode run, fpga/tls_card.c on the host) against references it was not written into:
 *  - budgets that cover the context: the selection keeps every position and the card's logits
 *    equal the dense card's bit for bit, step after step (after a card prefill: the run brings
 *    the prompt's summaries up to date itself);
 *  - small budgets: every (layer, KV head)'s selected positions equal the CPU reference's
 *    (sparse/tls.h sparse_tls_select) run on the card's own queries of that step and on summaries
 *    built by sparse_tls_put from the KV the card holds (int8 x fp16 scale), step after step;
 *    the logits move away from dense; accel_seq_decode_stats counts exactly the keys attended;
 *  - a missing channel file stops the device from opening with a message naming the command. */
#include "devices/devices.h"
#include "devices/tls_calib.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/tls_dec.h"
#include "sparse/tls.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel_dev *open_card(const model *m, const char *name, const char *spec, const char *chan)
{
    accel_opts o = {.weight_bits = 8, .decode_sparse = spec, .sparse_channels = chan};
    char err[512];
    tf_cache_env();
    accel_dev *d = devices_open(name, m, &o, err, sizeof err);
    if (!d) t_fail(__FILE__, __LINE__, "open %s %s: %s", name, spec ? spec : "", err);
    return d;
}

static int32_t *ids_of(int n, int V)
{
    int32_t *ids = malloc(sizeof *ids * n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 31 + 7) % V);
    ids[0] = 1;
    return ids;
}

TEST(fpga_tls_decode_every_position_kept_equals_dense)
{
    char err[512];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    const char *chan = t_tls_channels(m, "fpga_ch.bin");
    REQUIRE(chan);
    accel_dev *dense = open_card(m, "fpga-emu:0", NULL, NULL);
    accel_dev *tls = open_card(m, "fpga-emu:1",
                               "asynctls,block_size=16,block_budget=64,token_budget=4096,"
                               "dense_layers=0,dense_below=0", chan);
    REQUIRE(dense && tls);
    enum { N = 200, STEPS = 5 };
    const int V = m->cfg.vocab;
    int32_t *ids = ids_of(N + STEPS, V);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(dense, N + STEPS, &sa) == 0 && accel_seq_new(tls, N + STEPS, &sb) == 0);
    accel_prefill_req r = {.seq = sa, .ids = ids, .n = N};
    REQUIRE(accel_prefill(dense, &r) == 0);
    r.seq = sb;
    REQUIRE(accel_prefill(tls, &r) == 0);
    for (int s = 0; s < STEPS; s++) {
        REQUIRE(accel_decode(dense, 1, &sa, &ids[N + s], a) == 0);
        REQUIRE(accel_decode(tls, 1, &sb, &ids[N + s], b) == 0);
        CHECK_MSG(memcmp(a, b, sizeof(float) * V) == 0, "step %d: every position kept != dense", s);
    }
    /* truncated and decoded again: the summaries of the cut block are rebuilt */
    REQUIRE(accel_seq_truncate(dense, sa, N + 1) == 0 && accel_seq_truncate(tls, sb, N + 1) == 0);
    REQUIRE(accel_decode(dense, 1, &sa, &ids[3], a) == 0);
    REQUIRE(accel_decode(tls, 1, &sb, &ids[3], b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * V) == 0);
    accel_seq_free(dense, sa);
    accel_seq_free(tls, sb);
    free(ids), free(a), free(b);
    accel_free(dense);
    accel_free(tls);
    model_free(m);
}

/* The reference's selection on the card's KV and queries. */
static int compare_step(accel_dev *card, accel_seq *s, const sparse_tls_params *p,
                        const model_channels *ch, const model *m, int pos, const uint32_t *table,
                        const float *q)
{
    const int L = m->cfg.n_layers, Hk = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    const int H = m->cfg.n_heads, G = H / Hk, n = pos + 1, tb = p->token_budget;
    sparse_tls_seq *ts = tf_tls_keys(card, s, m, p, ch, n);
    if (!ts) return 1;
    float *fw = malloc(sizeof(float) * sparse_tls_work_floats(p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_work_ints(p, n)), *pos_ref = malloc(sizeof(int32_t) * n);
    int bad = 0, sparse_lists = 0;
    for (int l = 0; l < L; l++)
        for (int g = 0; g < Hk; g++) {
            const uint32_t *list = table + ((size_t)l * Hk + g) * (tb + 1);
            if (sparse_tls_dense(p, l, n)) {
                bad += list[0] != FPGA_DEC_SEL_DENSE;
                continue;
            }
            const float *qg = q + ((size_t)l * H + (size_t)g * G) * hd;
            int cnt = sparse_tls_select(p, ts, l, g, qg, G, (size_t)hd, n, pos_ref, fw, iw, NULL);
            int same = (int)list[0] == cnt;
            for (int e = 0; same && e < cnt; e++) same = (int32_t)list[1 + e] == pos_ref[e];
            if (!same && bad++ < 3)
                t_fail(__FILE__, __LINE__, "pos %d layer %d head %d: card %u positions, cpu %d", pos, l,
                       g, list[0], cnt);
            sparse_lists += cnt < n;
        }
    CHECK(sparse_lists > 0);
    sparse_tls_seq_free(ts);
    free(fw), free(iw), free(pos_ref);
    return bad;
}

TEST(fpga_tls_decode_selection_equals_cpu_reference)
{
    char err[512];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    const char *chan = t_tls_channels(m, "fpga_ch.bin");
    REQUIRE(chan);
    const char *spec = "asynctls,block_size=16,block_budget=4,token_budget=24,dense_layers=1,"
                       "dense_below=0";
    accel_dev *dense = open_card(m, "fpga-emu:0", NULL, NULL);
    accel_dev *tls = open_card(m, "fpga-emu:1", spec, chan);
    REQUIRE(dense && tls);
    sparse_tls_params p;
    int on, chan_set;
    REQUIRE(sparse_tls_parse(spec, m->cfg.head_dim, &p, &on, &chan_set, err, sizeof err) == 0);
    model_channels ch;
    REQUIRE(model_channels_load(chan, &ch, err, sizeof err) == 0);
    p.channels = ch.r;
    enum { N = 180, STEPS = 3 };
    const int V = m->cfg.vocab, L = m->cfg.n_layers, Hk = m->cfg.n_kv_heads;
    int32_t *ids = ids_of(N + STEPS, V);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    uint32_t *table = malloc(sizeof(uint32_t) * L * Hk * (p.token_budget + 1));
    float *q = malloc(sizeof(float) * L * m->cfg.n_heads * m->cfg.head_dim);
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(dense, N + STEPS, &sa) == 0 && accel_seq_new(tls, N + STEPS, &sb) == 0);
    accel_prefill_req r = {.seq = sa, .ids = ids, .n = N};
    REQUIRE(accel_prefill(dense, &r) == 0);
    r.seq = sb;
    REQUIRE(accel_prefill(tls, &r) == 0);
    REQUIRE(fpga_dev_tls_report(tls, 1, NULL, NULL) == 0);
    int differ = 0;
    int64_t read_before = 0, total_before = 0;
    for (int s = 0; s < STEPS; s++) {
        REQUIRE(accel_decode(dense, 1, &sa, &ids[N + s], a) == 0);
        REQUIRE(accel_decode(tls, 1, &sb, &ids[N + s], b) == 0);
        differ += memcmp(a, b, sizeof(float) * V) != 0;
        REQUIRE(fpga_dev_tls_report(tls, 1, table, q) == 0);
        CHECK_EQ(compare_step(tls, sb, &p, &ch, m, N + s, table, q), 0);
        /* usage: the keys this step attended (the lists' counts, dense ones every key) */
        accel_decode_stats ds;
        REQUIRE(accel_seq_decode_stats(tls, sb, &ds) == 0);
        int64_t read = 0;
        for (int i = 0; i < L * Hk; i++) {
            const uint32_t c = table[(size_t)i * (p.token_budget + 1)];
            read += c == FPGA_DEC_SEL_DENSE ? N + s + 1 : (int64_t)c;
        }
        CHECK_EQ(ds.keys_read - read_before, read);
        CHECK_EQ(ds.keys_total - total_before, (int64_t)L * Hk * (N + s + 1));
        CHECK_EQ(ds.steps, s + 1);
        read_before = ds.keys_read;
        total_before = ds.keys_total;
    }
    CHECK(differ > 0);
    model_channels_free(&ch);
    accel_seq_free(dense, sa);
    accel_seq_free(tls, sb);
    free(ids), free(a), free(b), free(table), free(q);
    accel_free(dense);
    accel_free(tls);

    /* a missing channel file: a clear error at open */
    char missing[512];
    snprintf(missing, sizeof missing, "%s/none.bin", t_tmpdir());
    accel_opts o = {.weight_bits = 8, .decode_sparse = "asynctls", .sparse_channels = missing};
    CHECK(!devices_open("fpga-emu:0", m, &o, err, sizeof err) && strstr(err, "calibrate-channels"));
    model_free(m);
}

/* Per sequence (accel_seq_decode_sparse, the request's choice): a card with decode_sparse off
 * but the channel file at hand turns it on for one sequence only; budgets past the card's
 * selection unit are refused (the sequence stays dense); NULL turns it off again. */
TEST(fpga_tls_decode_per_sequence)
{
    char err[512];
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    const char *chan = t_tls_channels(m, "fpga_ch.bin");
    REQUIRE(chan);
    accel_dev *f = open_card(m, "fpga-emu:0", "off", chan);
    REQUIRE(f);
    enum { N = 150 };
    const int V = m->cfg.vocab;
    int32_t *ids = ids_of(N + 2, V);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    accel_seq *sa, *sb;
    REQUIRE(accel_seq_new(f, N + 2, &sa) == 0 && accel_seq_new(f, N + 2, &sb) == 0);
    accel_prefill_req r = {.seq = sa, .ids = ids, .n = N};
    REQUIRE(accel_prefill(f, &r) == 0);
    r.seq = sb;
    REQUIRE(accel_prefill(f, &r) == 0);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.token_budget = 20000;
    CHECK_EQ(accel_seq_decode_sparse(f, sb, &p), ACCEL_ERR_UNSUPPORTED);
    p.token_budget = 24;
    p.block_budget = 4;
    p.dense_below = 0;
    REQUIRE(accel_seq_decode_sparse(f, sb, &p) == 0);
    REQUIRE(accel_decode(f, 1, &sa, &ids[N], a) == 0);
    REQUIRE(accel_decode(f, 1, &sb, &ids[N], b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * V) != 0); /* sparse (block 64 of the device: dense_layers 2) */
    REQUIRE(accel_seq_decode_sparse(f, sb, NULL) == 0);
    REQUIRE(accel_decode(f, 1, &sa, &ids[N + 1], a) == 0);
    REQUIRE(accel_decode(f, 1, &sb, &ids[N + 1], b) == 0);
    accel_seq_free(f, sa);
    accel_seq_free(f, sb);
    free(ids), free(a), free(b);
    accel_free(f);
    model_free(m);
}

/* KV import into an emulated card: the CPU prefills and exports its int8 KV, the chunks travel
 * through the wire format, accel_kv_import ships them through the staging slots and kv_scatter
 * puts them into the decode kernel's tiles; the tiles read back through a kernel are exactly the
 * bytes the CPU quantized. Corrupt chunks (bad values, or bytes changed on the card) fail the
 * import cleanly and never reach the decode kernel. */
#include "fpga/kernels/dec_layout.h"
#include "devices/devices.h"
#include "fpga/card.h"
#include "model/ckpt/golden.h"
#include "proto/kv_wire.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include <stdlib.h>

enum { NT = 37 };

static void prompt(int32_t *ids, int n, int vocab)
{
    uint32_t s = 7;
    ids[0] = 1;
    for (int i = 1; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        ids[i] = (int32_t)((s >> 8) % (uint32_t)vocab);
    }
}

typedef struct wire_ctx {
    accel_dev *d;
    accel_seq *s;
    int imported;
} wire_ctx;

static int on_chunk(void *ctx, const proto_kv_header *h, const proto_kv_layer *c,
                    const proto_kv_chunk_info *info)
{
    (void)h;
    (void)info;
    wire_ctx *w = ctx;
    int st = accel_kv_import(w->d, w->s, c);
    if (!st) w->imported++;
    return st;
}

/* Serializes k into a wire stream (header + one chunk per layer). */
static uint8_t *to_wire(const model *m, const tf_kv *k, int n_tokens, size_t *len)
{
    proto_kv_header h = {.n_layers = m->cfg.n_layers, .n_kv_heads = m->cfg.n_kv_heads,
                         .head_dim = m->cfg.head_dim, .n_tokens = n_tokens, .pos0 = 0,
                         .dtype = PROTO_KV_INT8, .block_tokens = 16};
    memcpy(h.fingerprint, m->fingerprint, 32);
    size_t cap = PROTO_KV_HEADER_BYTES;
    for (int i = 0; i < k->n_chunks; i++) cap += proto_kv_chunk_bytes(&h, &k->chunks[i]);
    uint8_t *b = malloc(cap);
    proto_kv_header_write(&h, b);
    size_t at = PROTO_KV_HEADER_BYTES;
    for (int i = 0; i < k->n_chunks; i++) at += (size_t)proto_kv_chunk_write(&h, &k->chunks[i], b + at, cap - at);
    *len = at;
    return b;
}

static int feed(accel_dev *d, accel_seq *s, const model *m, const uint8_t *b, size_t n, int *imported)
{
    proto_kv_expect e = {.fingerprint = m->fingerprint, .n_layers = m->cfg.n_layers,
                         .n_kv_heads = m->cfg.n_kv_heads, .head_dim = m->cfg.head_dim,
                         .max_tokens = 512, .max_pos = 512};
    wire_ctx w = {d, s, 0};
    proto_kv_reader *r = proto_kv_reader_new(&e, on_chunk, &w);
    int st = proto_kv_reader_feed(r, b, n);
    if (!st) st = proto_kv_reader_finish(r);
    proto_kv_reader_free(r);
    *imported = w.imported;
    return st;
}

/* The bytes of position p, layer l, KV head h as the decode kernel's tiles hold them. */
static void read_row(accel_dev *d, accel_seq *s, int l, int h, int p, uint8_t *k, uint8_t *v,
                     uint16_t *ks, uint16_t *vs)
{
    fpga_card *c = fpga_dev_card(d);
    uint32_t part, tile, row, uch;
    fpga_dec_pos_where(&c->desc, (uint32_t)p, &part, &tile, &row);
    uint64_t t = tf_tile_off(d, s, (uint32_t)l, (uint32_t)h, (uint32_t)(p - (int)row), &uch);
    int ch = (int)uch;
    uint32_t hd = c->desc.head_dim;
    CHECK_EQ(fpga_card_read_bank(c, ch, t + fpga_dec_tile_k(hd, row), k, hd), 0);
    CHECK_EQ(fpga_card_read_bank(c, ch, t + fpga_dec_tile_v(hd, row), v, hd), 0);
    CHECK_EQ(fpga_card_read_bank(c, ch, t + fpga_dec_tile_ks(hd, row), ks, 2), 0);
    CHECK_EQ(fpga_card_read_bank(c, ch, t + fpga_dec_tile_vs(hd, row), vs, 2), 0);
}

/* What each test starts from: the card (W8A8) and a CPU beside it on one model, the prompt's
 * NT + 1 ids, the CPU's exported KV of the first NT, and a logits buffer. */
typedef struct fixture {
    model *m;
    accel_dev *d, *cpu;
    int32_t ids[NT + 1];
    tf_kv kv;
    float *lg;
} fixture;

static int fx_open(fixture *f, const char *card)
{
    char err[256];
    memset(f, 0, sizeof *f);
    if (tf_open(card, 8, &f->m, &f->d)) return -1;
    accel_opts oc = {.threads = 1};
    f->cpu = devices_open("cpu", f->m, &oc, err, sizeof err);
    f->lg = malloc(sizeof(float) * f->m->cfg.vocab);
    prompt(f->ids, NT + 1, f->m->cfg.vocab);
    if (!f->cpu || !f->lg || tf_cpu_kv(f->cpu, f->ids, NT, NULL, &f->kv)) {
        t_fail(__FILE__, __LINE__, "cpu: %s", f->cpu ? "KV export" : err);
        return -1;
    }
    return 0;
}

static void fx_close(fixture *f)
{
    free(f->lg);
    tf_kv_free(&f->kv);
    accel_free(f->cpu);
    accel_free(f->d);
    model_free(f->m);
}

/* After a failed import: the card is healthy, and the intact KV imports and decodes. */
static void imports_clean_after(fixture *f)
{
    accel_info info;
    accel_get_info(f->d, &info);
    CHECK_EQ(info.health, ACCEL_HEALTH_OK);
    accel_seq *s;
    REQUIRE(accel_seq_new(f->d, 64, &s) == 0);
    CHECK_EQ(tf_import(f->d, s, &f->kv), 0);
    CHECK_EQ(accel_decode(f->d, 1, &s, &f->ids[0], f->lg), 0);
    accel_seq_free(f->d, s);
}

/* The card closed and opened again as card (TANDEM_EMU_FAULT is read when a card is made). */
static int fx_reopen(fixture *f, const char *card)
{
    char err[256];
    accel_free(f->d);
    accel_opts o = {.weight_bits = 8};
    f->d = devices_open(card, f->m, &o, err, sizeof err);
    if (!f->d) t_fail(__FILE__, __LINE__, "%s: %s", card, err);
    return f->d ? 0 : -1;
}

TEST(fpga_kv_import_round_trip_into_tiles)
{
    fixture f;
    if (fx_open(&f, "fpga-emu")) return;
    const model *m = f.m;
    accel_dev *d = f.d;
    const tf_kv *kv = &f.kv;
    CHECK_EQ(kv->n_chunks, m->cfg.n_layers);
    /* pieces of 7 positions: 6 pieces per layer, slots of 2/2/2/1, both staging groups */
    fpga_dev_card(d)->piece_limit = 7;
    size_t n;
    uint8_t *wire = to_wire(m, kv, NT, &n);
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    int imported = 0;
    CHECK_EQ(feed(d, s, m, wire, n, &imported), 0);
    CHECK_EQ(imported, m->cfg.n_layers);
    CHECK_EQ(accel_seq_len(d, s), NT);
    const int H = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    int mismatches = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const proto_kv_layer *c = &kv->chunks[l];
        for (int p = 0; p < NT; p++)
            for (int h = 0; h < H; h++) {
                uint8_t k[256], v[256];
                uint16_t ks, vs;
                read_row(d, s, l, h, p, k, v, &ks, &vs);
                size_t r = (size_t)p * H + h;
                mismatches += memcmp(k, c->k + r * hd, hd) != 0 || memcmp(v, c->v + r * hd, hd) != 0 ||
                              ks != c->k_scale[r] || vs != c->v_scale[r];
            }
    }
    CHECK_EQ(mismatches, 0);
    /* a decode step appends position NT and leaves the imported ones as they were */
    CHECK_EQ(accel_decode(d, 1, &s, &f.ids[NT], f.lg), 0);
    CHECK_EQ(accel_seq_len(d, s), NT + 1);
    uint8_t k[256], v[256];
    uint16_t ks, vs;
    read_row(d, s, 2, 1, 5, k, v, &ks, &vs);
    CHECK(memcmp(k, kv->chunks[2].k + (5 * H + 1) * hd, hd) == 0 && ks == kv->chunks[2].k_scale[5 * H + 1]);
    read_row(d, s, 2, 1, NT, k, v, &ks, &vs);
    int maxq = 0;
    for (int i = 0; i < hd; i++) {
        CHECK((int8_t)k[i] != -128);
        maxq = abs((int8_t)k[i]) > maxq ? abs((int8_t)k[i]) : maxq;
    }
    CHECK(ks != 0 && maxq == 127); /* the new row obeys proto/kv.h: its amax maps to 127 */
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.health, ACCEL_HEALTH_OK);
    free(wire);
    accel_seq_free(d, s);
    fx_close(&f);
}

TEST(fpga_kv_import_corrupt_chunk_rejected)
{
    fixture f;
    if (fx_open(&f, "fpga-emu")) return;
    const model *m = f.m;
    accel_dev *d = f.d;
    tf_kv *kv = &f.kv;
    /* an int8 value proto/kv.h never produces (-128), in layer 2 */
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    ((uint8_t *)kv->chunks[2].k)[40] = 0x80;
    CHECK_EQ(tf_import(d, s, kv), ACCEL_ERR_CORRUPT);
    CHECK_EQ(accel_seq_len(d, s), 0);
    CHECK_EQ(accel_decode(d, 1, &s, &f.ids[0], f.lg), ACCEL_ERR_CORRUPT);
    accel_seq_free(d, s);
    ((uint8_t *)kv->chunks[2].k)[40] = 0x05;
    /* a NaN scale */
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    uint16_t keep = kv->chunks[4].v_scale[3];
    ((uint16_t *)kv->chunks[4].v_scale)[3] = 0x7e00;
    CHECK_EQ(tf_import(d, s, kv), ACCEL_ERR_CORRUPT);
    accel_seq_free(d, s);
    ((uint16_t *)kv->chunks[4].v_scale)[3] = keep;
    /* a flipped bit on the wire: the reader's CRC stops the chunk before any import */
    size_t n;
    uint8_t *wire = to_wire(m, kv, NT, &n);
    wire[n - 100] ^= 0x10;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    int imported = 0;
    CHECK_EQ(feed(d, s, m, wire, n, &imported), PROTO_KV_ERR_CRC);
    CHECK_EQ(imported, m->cfg.n_layers - 1);
    CHECK_EQ(accel_seq_len(d, s), 0);
    accel_seq_free(d, s);
    imports_clean_after(&f);
    free(wire);
    fx_close(&f);
}

/* A bit flipped in HBM between the host's sync and the scatter kernel (the emulator's fault
 * injection, on the staging slot the kernel reads): the kernel's CRC report differs from the
 * host's, the import fails, the sequence refuses to decode, the device stays healthy. */
TEST(fpga_kv_import_bitflip_on_card_detected)
{
    fixture f;
    if (fx_open(&f, "fpga-emu:1")) return;
    fpga_emu_card_stats cs;
    REQUIRE(tf_card_stats(f.d, &cs) == 0);
    uint64_t runs_at_open = cs.runs_started; /* the weight upload's copies */
    /* the second scatter run (layer 1's piece) gets a flipped bit in its first staging slot */
    char spec[128];
    snprintf(spec, sizeof spec, "card=1,run=%llu,kind=bitflip,byte=3,bit=6",
             (unsigned long long)runs_at_open + 2);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    REQUIRE(fx_reopen(&f, "fpga-emu:1") == 0);
    accel_seq *s;
    REQUIRE(accel_seq_new(f.d, 64, &s) == 0);
    CHECK_EQ(tf_import(f.d, s, &f.kv), ACCEL_ERR_CORRUPT);
    CHECK_EQ(accel_decode(f.d, 1, &s, &f.ids[0], f.lg), ACCEL_ERR_CORRUPT);
    accel_seq_free(f.d, s);
    /* the fault hit one run only: the same KV imports cleanly now */
    imports_clean_after(&f);
    fx_close(&f);
}

/* A bit flipped in the card's HBM after the KV landed (the emulator's fault injection, in the
 * bank BO of layer 0's tiles, before the last layer's scatter run: the "bitflip in a
 * shipped KV buffer" where it does harm). The staging slots and their CRC reports are intact;
 * only the check of the complete run against the producer's CRCs (kv_check reading the tiles
 * back) sees it: the import fails, the sequence refuses to decode. Then the producer's CRC
 * itself: a chunk changed on the host after its CRC was computed fails the same way, and the
 * right CRCs import and decode. */
TEST(fpga_kv_import_flip_in_hbm_after_landing_detected)
{
    fixture f;
    if (fx_open(&f, "fpga-emu:1")) return;
    const model *m = f.m;
    accel_dev *d = f.d;
    tf_kv *kv = &f.kv;
    const int L = m->cfg.n_layers;
    fpga_emu_card_stats cs;
    REQUIRE(tf_card_stats(d, &cs) == 0);
    uint64_t runs_at_open = cs.runs_started;
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    /* one scatter run per layer (37 positions are one piece): run L is the last layer's */
    char spec[160];
    tf_kv_flip_spec(d, s, 0, 5, 1, 3, 6, runs_at_open + (uint64_t)L, 4, spec, sizeof spec);
    accel_seq_free(d, s);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    REQUIRE(fx_reopen(&f, "fpga-emu:1") == 0);
    d = f.d;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    CHECK_EQ(tf_import(d, s, kv), ACCEL_ERR_CORRUPT);
    /* the flip is real: layer 0, position 5, head 1 holds K value 3 with bit 6 changed */
    const int H = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    uint8_t k[256], v[256];
    uint16_t ks, vs;
    read_row(d, s, 0, 1, 5, k, v, &ks, &vs);
    const uint8_t *want = kv->chunks[0].k + (size_t)(5 * H + 1) * hd;
    CHECK_EQ(k[3], (uint8_t)(want[3] ^ 0x40));
    CHECK(memcmp(k, want, 3) == 0 && memcmp(k + 4, want + 4, (size_t)hd - 4) == 0);
    CHECK_EQ(accel_decode(d, 1, &s, &f.ids[NT], f.lg), ACCEL_ERR_CORRUPT);
    accel_seq_free(d, s);
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.health, ACCEL_HEALTH_OK); /* one bad import: the scheduler decides */
    /* the producer's CRCs: layer 3 changed after its CRC was computed (a valid value, so only
     * the CRC can tell) -> caught once the run is on the card */
    uint32_t crc[64];
    REQUIRE(kv->n_chunks <= 64);
    for (int l = 0; l < kv->n_chunks; l++) crc[l] = proto_kv_payload_crc(&kv->chunks[l]);
    uint8_t *k3 = (uint8_t *)kv->chunks[3].k;
    k3[7] = k3[7] == 5 ? 6 : 5;
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    int st = 0;
    for (int l = 0; l < kv->n_chunks && !st; l++) st = accel_kv_import_crc(d, s, &kv->chunks[l], crc[l]);
    CHECK_EQ(st, ACCEL_ERR_CORRUPT);
    CHECK_EQ(accel_seq_len(d, s), 0);
    accel_seq_free(d, s);
    /* with the CRCs of what is sent, the KV imports and decodes */
    for (int l = 0; l < kv->n_chunks; l++) crc[l] = proto_kv_payload_crc(&kv->chunks[l]);
    REQUIRE(accel_seq_new(d, 64, &s) == 0);
    st = 0;
    for (int l = 0; l < kv->n_chunks && !st; l++) st = accel_kv_import_crc(d, s, &kv->chunks[l], crc[l]);
    CHECK_EQ(st, 0);
    CHECK_EQ(accel_seq_len(d, s), NT);
    CHECK_EQ(accel_decode(d, 1, &s, &f.ids[NT], f.lg), 0);
    accel_seq_free(d, s);
    fpga_card *c = fpga_dev_card(d);
    CHECK_EQ(c->check_runs, 3); /* one per complete run of positions; the first two differed */
    fx_close(&f);
}

/* The production path (prompt on the CPU, its KV imported, continuation on the card) against
 * the card decoding everything itself: both close to the CPU and to each other. Their KV
 * differs only by where the floats came from (CPU float32 vs. the card's W8A8). */
TEST(fpga_decode_imported_vs_from_empty)
{
    fixture f;
    if (fx_open(&f, "fpga-emu")) return;
    const model *m = f.m;
    accel_dev *d = f.d, *cpu = f.cpu;
    char err[256];
    model_golden *g = model_golden_load("tests/data/golden/stories260K/lily.json", m->cfg.vocab,
                                        err, sizeof err);
    REQUIRE(g);
    const int V = m->cfg.vocab, steps = 40;
    tf_kv kv;
    REQUIRE(tf_cpu_kv(cpu, g->ids, g->n_ids, NULL, &kv) == 0);
    accel_seq *si, *se, *sc;
    REQUIRE(accel_seq_new(d, g->n_ids + steps, &si) == 0 && accel_seq_new(d, g->n_ids + steps, &se) == 0);
    REQUIRE(accel_seq_new(cpu, g->n_ids + steps, &sc) == 0);
    CHECK_EQ(tf_import(d, si, &kv), 0);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V), *c = malloc(sizeof(float) * V);
    for (int p = 0; p < g->n_ids; p++) {
        REQUIRE(accel_decode(d, 1, &se, &g->ids[p], b) == 0);
        REQUIRE(accel_decode(cpu, 1, &sc, &g->ids[p], c) == 0);
    }
    double kl_ie = 0, kl_ci = 0, kl_ce = 0;
    for (int k = 0; k < steps; k++) {
        const int32_t *id = &g->greedy_ids[k];
        REQUIRE(accel_decode(d, 1, &si, id, a) == 0);
        REQUIRE(accel_decode(d, 1, &se, id, b) == 0);
        REQUIRE(accel_decode(cpu, 1, &sc, id, c) == 0);
        kl_ie += tf_kl(a, b, V);
        kl_ci += tf_kl(c, a, V);
        kl_ce += tf_kl(c, b, V);
    }
    /* each path within the W8A8 bound of the CPU (see test_fpga_kernel.c), and the two paths
     * closer than that to each other's sum */
    CHECK_MSG(kl_ci / steps <= 0.005, "imported path: mean KL %.5f", kl_ci / steps);
    CHECK_MSG(kl_ce / steps <= 0.005, "from-empty path: mean KL %.5f", kl_ce / steps);
    CHECK_MSG(kl_ie / steps <= 0.01, "imported vs from-empty: mean KL %.5f", kl_ie / steps);
    CHECK_EQ(accel_seq_len(d, si), g->n_ids + steps);
    free(a);
    free(b);
    free(c);
    accel_seq_free(d, si);
    accel_seq_free(d, se);
    accel_seq_free(cpu, sc);
    tf_kv_free(&kv);
    model_golden_free(g);
    fx_close(&f);
}

/* fpga_card_chunk_valid (the host's check before shipping a chunk to a card) finds one bad
 * value or scale wherever it lies: at either edge of its 4 KiB runs, in the last partial run,
 * in K or V, a negative, infinite or NaN scale; a chunk of every other value passes. */
TEST(fpga_card_chunk_valid_finds_each_bad_byte)
{
    enum { T = 70, H = 2, HD = 64 }; /* 8,960 value bytes a side: two whole runs and a part */
    static uint8_t k[T * H * HD], v[T * H * HD];
    static uint16_t ks[T * H], vs[T * H];
    for (size_t i = 0; i < sizeof k; i++)
        k[i] = v[i] = (uint8_t)(i * 7 + 1) == 0x80 ? 0x7f : (uint8_t)(i * 7 + 1);
    for (int i = 0; i < T * H; i++) ks[i] = vs[i] = (uint16_t)(0x2000 + i);
    proto_kv_layer c = {0, 0, T, H, HD, PROTO_KV_INT8, k, v, ks, vs};
    CHECK(fpga_card_chunk_valid(&c));
    const size_t at[] = {0, 1, 4095, 4096, 8191, 8192, sizeof k - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        for (int side = 0; side < 2; side++) {
            uint8_t *p = side ? v : k, keep = p[at[i]];
            p[at[i]] = 0x80;
            CHECK_MSG(!fpga_card_chunk_valid(&c), "byte %zu of %c", at[i], side ? 'V' : 'K');
            p[at[i]] = keep;
        }
    const uint16_t bad[] = {0x8000, 0xa000, 0x7c00, 0x7e00, 0xfc00};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int j = 0; j < T * H; j += T * H - 1) {
            uint16_t keep = ks[j];
            ks[j] = bad[i];
            CHECK_MSG(!fpga_card_chunk_valid(&c), "K scale %d = %04x", j, bad[i]);
            ks[j] = keep, keep = vs[j], vs[j] = bad[i];
            CHECK_MSG(!fpga_card_chunk_valid(&c), "V scale %d = %04x", j, bad[i]);
            vs[j] = keep;
        }
    CHECK(fpga_card_chunk_valid(&c));
    c.v_scale = NULL;
    CHECK(!fpga_card_chunk_valid(&c));
}

/* The channel sidecar (model/ckpt/tls_channels.h): round trip, every refusal of its reader, and
 * `tandem calibrate-channels` writing a file the reader takes for the model it ran on. */
#include "model/ckpt/tls_channels.h"
#include "proto/crc32c.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdlib.h>

static void fix_crc(uint8_t *b, size_t n)
{
    uint32_t c = proto_crc32c(0, b, n - 4);
    for (int i = 0; i < 4; i++) b[n - 4 + i] = (uint8_t)(c >> (8 * i));
}

TEST(tls_channels_round_trip_and_refusals)
{
    uint16_t idx[2 * 3 * 4] = {0, 2, 5, 7, 1, 3, 4, 6, 0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 0, 7, 8, 9};
    model_channels c = {.n_layers = 2, .n_kv_heads = 3, .head_dim = 10, .r = 4,
                        .calib_tokens = 777, .idx = idx};
    size_t n;
    uint8_t *b = model_channels_encode(&c, &n);
    REQUIRE(b && n == 36 + 2 * 24);
    model_channels o;
    char err[200];
    REQUIRE(model_channels_parse(b, n, &o, err, sizeof err) == 0);
    CHECK(o.n_layers == 2 && o.n_kv_heads == 3 && o.head_dim == 10 && o.r == 4 &&
          o.calib_tokens == 777 && memcmp(o.idx, idx, sizeof idx) == 0);
    model_channels_free(&o);
    struct {
        size_t at;
        uint8_t val;
        int fix;
        const char *says;
    } bad[] = {
        {0, 'X', 1, "magic"},          {8, 2, 1, "version"},      {12, 0, 1, "n_layers"},
        {16, 0, 1, "n_kv_heads"},      {20, 1, 1, "head_dim"},     {24, 3, 1, "channels"},
        {24, 12, 1, "channels"},       {12, 3, 1, "size"},         {40, 9, 0, "CRC"},
        {32 + 2, 0, 1, "ascending"},   {32 + 46, 10, 1, "range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *x = malloc(n);
        memcpy(x, b, n);
        x[bad[i].at] = bad[i].val;
        if (bad[i].fix) fix_crc(x, n);
        err[0] = 0;
        CHECK_MSG(model_channels_parse(x, n, &o, err, sizeof err) < 0 && strstr(err, bad[i].says),
                  "case %zu: \"%s\"", i, err);
        free(x);
    }
    CHECK(model_channels_parse(b, n - 1, &o, err, sizeof err) < 0);
    CHECK(model_channels_parse(b, 10, &o, err, sizeof err) < 0);
    char path[512];
    snprintf(path, sizeof path, "%s/c.bin", t_tmpdir());
    REQUIRE(model_channels_save(path, &c, err, sizeof err) == 0);
    REQUIRE(model_channels_load(path, &o, err, sizeof err) == 0);
    CHECK(memcmp(o.idx, idx, sizeof idx) == 0);
    model_channels_free(&o);
    snprintf(path, sizeof path, "%s/none.bin", t_tmpdir());
    CHECK(model_channels_load(path, &o, err, sizeof err) < 0 && strstr(err, "none.bin"));
    free(b);
}

TEST(tls_channels_cli_writes_a_file_for_the_model)
{
    char cmd[2048], path[512], err[256];
    snprintf(path, sizeof path, "%s/stories.bin", t_tmpdir());
    snprintf(cmd, sizeof cmd, "%s/tandem calibrate-channels --model models/stories260K --out %s "
                              "--channels 4 --seqs 2 --len 32 >/dev/null", t_build_dir(), path);
    REQUIRE(t_run(cmd, err, sizeof err) == 0);
    model_channels o;
    REQUIRE(model_channels_load(path, &o, err, sizeof err) == 0);
    model *m = model_load("models/stories260K", err, sizeof err);
    REQUIRE(m);
    CHECK(model_channels_match(&o, &m->cfg, err, sizeof err) == 0);
    CHECK(o.r == 4 && o.calib_tokens == 64);
    model_free(m);
    model_channels_free(&o);
    snprintf(cmd, sizeof cmd, "%s/tandem calibrate-channels --model models/stories260K --out %s "
                              "--channels 5 2>/dev/null", t_build_dir(), path);
    CHECK(t_run(cmd, NULL, 0) == 2);
    /* on ids of the caller's choice: 100 ids make 3 sequences of 32 */
    char idp[512];
    snprintf(idp, sizeof idp, "%s/ids.txt", t_tmpdir());
    FILE *f = fopen(idp, "w");
    REQUIRE(f);
    for (int i = 0; i < 100; i++) fprintf(f, "%d%s", i == 0 ? 1 : (i * 37 + 11) % 500 + 3, i < 99 ? "," : "\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/tandem calibrate-channels --model models/stories260K --out %s "
                              "--channels 4 --len 32 --ids-file %s >/dev/null", t_build_dir(), path, idp);
    REQUIRE(t_run(cmd, err, sizeof err) == 0);
    REQUIRE(model_channels_load(path, &o, err, sizeof err) == 0);
    CHECK_EQ(o.calib_tokens, 96);
    model_channels_free(&o);
    f = fopen(idp, "w");
    REQUIRE(f);
    fprintf(f, "1,2,999\n"); /* 999: outside stories260K's 512 */
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/tandem calibrate-channels --model models/stories260K --out %s "
                              "--len 3 --ids-file %s 2>/dev/null", t_build_dir(), path, idp);
    CHECK(t_run(cmd, NULL, 0) != 0);
}

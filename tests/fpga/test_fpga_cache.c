/* The weight image cache: a miss builds and stores, a hit loads the same bytes without
 * quantizing, a corrupt / truncated / tampered file is rejected and rebuilt, other settings
 * get their own file, and a device opened from the cache decodes exactly like one built fresh. */
#include "devices/devices.h"
#include "fpga/image_cache.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void flip(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    if (fd < 0 || pread(fd, &b, 1, at) != 1) {
        t_fail(__FILE__, __LINE__, "cannot open %s", path);
        if (fd >= 0) close(fd);
        return;
    }
    b ^= 0x20;
    if (pwrite(fd, &b, 1, at) != 1) t_fail(__FILE__, __LINE__, "cannot write %s", path);
    close(fd);
}

TEST(fpga_image_cache_hit_miss_corrupt)
{
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/cache", t_tmpdir());
    setenv("TANDEM_CACHE_DIR", dir, 1);
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    fpga_quant_opts q;
    fpga_quant_opts_default(&q, 8, m->cfg.hidden);
    REQUIRE(fpga_quant_opts_parse(&q, "calib=2x32", err, sizeof err) == 0);
    fpga_image_report *rep = calloc(1, sizeof *rep);
    fpga_image_file f;
    /* miss: built, stored */
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK_EQ(f.cached, 1);
    CHECK_EQ(rep->calib_tokens, 64);
    CHECK(strncmp(f.path, dir, strlen(dir)) == 0);
    char path[1100];
    snprintf(path, sizeof path, "%s", f.path);
    size_t bytes = (size_t)FPGA_DEC_CH * f.lo.image_bytes;
    uint64_t sec = f.lo.image_bytes;
    uint8_t *saved = malloc(bytes);
    memcpy(saved, f.data, bytes);
    fpga_image_release(&f);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (size_t)st.st_size == 4096 + bytes);
    /* hit: nothing quantized, the same bytes */
    memset(rep, 0, sizeof *rep);
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 1);
    CHECK_EQ(rep->calib_tokens, 0);
    CHECK(memcmp(f.data, saved, bytes) == 0);
    fpga_image_release(&f);
    /* a flipped byte in channel 3's section: rejected, rebuilt (the build is deterministic) */
    flip(path, 4096 + 3 * sec + 100);
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK(strstr(f.why, "section checksum") != NULL);
    CHECK(memcmp(f.data, saved, bytes) == 0);
    fpga_image_release(&f);
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 1);
    fpga_image_release(&f);
    /* a tampered header, then a truncated file */
    flip(path, 20);
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK(strstr(f.why, "header") != NULL || strstr(f.why, "key") != NULL);
    fpga_image_release(&f);
    CHECK(truncate(path, 4096 + bytes - 1) == 0);
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK(strstr(f.why, "size") != NULL);
    CHECK(memcmp(f.data, saved, bytes) == 0);
    fpga_image_release(&f);
    /* other settings: another file */
    fpga_quant_opts q4;
    fpga_quant_opts_default(&q4, 4, m->cfg.hidden);
    REQUIRE(fpga_quant_opts_parse(&q4, "calib=2x32", err, sizeof err) == 0);
    REQUIRE(fpga_image_get(m, &q4, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK(strcmp(f.path, path) != 0);
    fpga_image_release(&f);
    /* no cache */
    setenv("TANDEM_CACHE_DIR", "off", 1);
    REQUIRE(fpga_image_get(m, &q, devices_fpga_calib(), NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(f.cached, 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK(memcmp(f.data, saved, bytes) == 0);
    fpga_image_release(&f);
    /* no float reference handed in: calibration is refused, never silently skipped; with it
     * turned off the image builds without one */
    CHECK(fpga_image_get(m, &q, NULL, NULL, &f, rep, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "no float reference") != NULL, "%s", err);
    fpga_quant_opts q0 = q;
    REQUIRE(fpga_quant_opts_parse(&q0, "calib=0", err, sizeof err) == 0);
    REQUIRE(fpga_image_get(m, &q0, NULL, NULL, &f, rep, err, sizeof err) == 0);
    CHECK_EQ(rep->calib_tokens, 0);
    fpga_image_release(&f);
    /* no temporary files left behind */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c tmp", dir);
    FILE *p = popen(cmd, "r");
    int ntmp = -1;
    if (p) {
        if (fscanf(p, "%d", &ntmp) != 1) ntmp = -1;
        pclose(p);
    }
    CHECK_EQ(ntmp, 0);
    free(saved);
    free(rep);
    model_free(m);
}

TEST(fpga_device_from_cache_decodes_the_same)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cache", t_tmpdir());
    setenv("TANDEM_CACHE_DIR", dir, 1);
    setenv("TANDEM_FPGA_QUANT", "calib=2x32", 1);
    model *m;
    accel_dev *d;
    float out[2][512];
    int32_t ids[3] = {1, 403, 395};
    for (int run = 0; run < 2; run++) {
        if (tf_open("fpga-emu", 8, &m, &d)) return;
        const char *path;
        CHECK_EQ(fpga_dev_image_cached(d, &path), run);
        CHECK(strncmp(path, dir, strlen(dir)) == 0);
        REQUIRE(m->cfg.vocab == 512);
        accel_seq *s;
        REQUIRE(accel_seq_new(d, 8, &s) == 0);
        for (int i = 0; i < 3; i++) REQUIRE(accel_decode(d, 1, &s, &ids[i], out[run]) == 0);
        accel_seq_free(d, s);
        accel_free(d);
        model_free(m);
    }
    CHECK(memcmp(out[0], out[1], sizeof out[0]) == 0);
}

static model_config shape(int layers, int hidden, int heads, int kv_heads, int head_dim, int inter,
                          int vocab)
{
    model_config c = {.hidden = hidden,
                      .n_layers = layers,
                      .n_heads = heads,
                      .n_kv_heads = kv_heads,
                      .head_dim = head_dim,
                      .intermediate = inter,
                      .vocab = vocab};
    return c;
}

/* Which shapes a card calibrates by default (fpga_image_calib_cost against
 * FPGA_IMAGE_CALIB_MAX_COST): the cost is the sum over the matrices, each priced by hand here as
 * rows x K x (K + 2,560), and the LM head's rows count (a parameter count left them out: a
 * model of 46M layer parameters with Llama-3's vocabulary calibrated for 5.5 minutes at every
 * first open). */
TEST(fpga_image_calib_cost_prices_shapes)
{
    /* stories15M's shape: QKV 864 x 288, O 288 x 288, gate+up 1536 x 288, down 288 x 768; head
     * 32000 x 288 */
    model_config s15 = shape(6, 288, 6, 6, 48, 768, 32000);
    double want =
        6.0 * (864.0 * 288 * 2848 + 288.0 * 288 * 2848 + 1536.0 * 288 * 2848 + 288.0 * 768 * 3328) +
        32000.0 * 288 * 2848;
    CHECK(fabs(fpga_image_calib_cost(&s15) - want) < 1e-9 * want);
    CHECK(fpga_image_calib_cost(&s15) < FPGA_IMAGE_CALIB_MAX_COST); /* ~44e9: ~40 s, calibrated */
    /* the hand-over bench's model: Llama-3-8B's KV shape on a 256-wide trunk, 128K vocabulary */
    model_config bench = shape(32, 256, 8, 8, 128, 512, 128256);
    want = 32.0 * (3072.0 * 256 * 2816 + 256.0 * 1024 * 3584 + 1024.0 * 256 * 2816 +
                   256.0 * 512 * 3072) +
           128256.0 * 256 * 2816;
    CHECK(fabs(fpga_image_calib_cost(&bench) - want) < 1e-9 * want);
    CHECK(fpga_image_calib_cost(&bench) > FPGA_IMAGE_CALIB_MAX_COST);
    const model_config on[] = {shape(5, 64, 8, 4, 8, 172, 512),      /* stories260K */
                               shape(2, 128, 4, 4, 32, 352, 32000)}; /* tiny-llama2-mha */
    for (int i = 0; i < 2; i++) CHECK(fpga_image_calib_cost(&on[i]) < FPGA_IMAGE_CALIB_MAX_COST);
    const model_config off[] = {shape(30, 576, 9, 3, 64, 1536, 49152),       /* SmolLM-135M */
                                shape(32, 4096, 32, 32, 128, 11008, 32000),  /* Llama-2-7B */
                                shape(32, 4096, 32, 8, 128, 14336, 128256)}; /* Llama-3-8B */
    for (int i = 0; i < 3; i++) CHECK(fpga_image_calib_cost(&off[i]) > FPGA_IMAGE_CALIB_MAX_COST);
}

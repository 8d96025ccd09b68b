/* What the weight image cache trusts: its key covers every byte of the weights (an edit in
 * place, anywhere, with the shapes and even the file time kept, is a miss), its directory must
 * be the user's own and closed to others, and its temporary file is created, never opened
 * where a file or link already is. Reading every byte is done once per loaded model, however
 * many cards open on it. */
#include "fpga/image_cache.h"
#include "devices/devices.h"
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int get(const model *m, const char *dir, fpga_image_file *f)
{
    char err[256];
    fpga_quant_opts q;
    fpga_quant_opts_default(&q, 8, m->cfg.hidden);
    if (fpga_quant_opts_parse(&q, "calib=0", err, sizeof err) ||
        fpga_image_get(m, &q, NULL, dir, f, NULL, err, sizeof err)) {
        t_fail(__FILE__, __LINE__, "%s", err);
        return -1;
    }
    return 0;
}

/* The file offset of tensor `name`'s data in a safetensors file (0 if not found). */
static long tensor_at(const char *path, const char *name)
{
    FILE *fp = fopen(path, "rb");
    uint64_t n = 0;
    long at = 0;
    if (!fp || fread(&n, 8, 1, fp) != 1 || n > (1u << 24)) goto out;
    char *h = calloc(1, n + 1);
    if (fread(h, 1, n, fp) == n) {
        char *p = strstr(h, name), *o = p ? strstr(p, "\"data_offsets\"") : NULL;
        long a;
        if (o && sscanf(o, "\"data_offsets\":[%ld", &a) == 1) at = 8 + (long)n + a;
    }
    free(h);
out:
    if (fp) fclose(fp);
    return at;
}

/* TF_MODEL copied into dir (600 bytes), its safetensors file's path into st_path (700), and a
 * cache directory's path into cdir (600), all under the test's own folder. 0 or -1. */
static int model_copy(char *dir, char *cdir, char *st_path)
{
    char cmd[1400];
    snprintf(dir, 600, "%s/model", t_tmpdir());
    snprintf(cdir, 600, "%s/cache", t_tmpdir());
    snprintf(st_path, 700, "%s/model.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp -r %s '%s'", TF_MODEL, dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The 4-byte weights at bytes [lo, hi) of layer 0's gate projection in the safetensors file
 * path negated in place (the sign bit of an F32, or of every other 16-bit, weight). 0 or -1. */
static int negate_weights(const char *path, long lo, long hi)
{
    long at = tensor_at(path, "model.layers.0.mlp.gate_proj.weight");
    int fd = at > 0 ? open(path, O_RDWR) : -1, ok = fd >= 0;
    for (long off = lo; ok && off < hi; off += 4) {
        uint8_t b;
        ok = pread(fd, &b, 1, at + off + 3) == 1;
        b ^= 0x80;
        ok = ok && pwrite(fd, &b, 1, at + off + 3) == 1;
    }
    if (fd >= 0) close(fd);
    return ok ? 0 : -1;
}

/* 64 weights of layer 0's gate projection negated, bytes 6144..6400 of it: outside the 4 KiB
 * windows at its start, middle (about 20 KiB) and end that the key once sampled. */
TEST(fpga_image_cache_key_covers_every_byte)
{
    char dir[600], cdir[600], st_path[700], err[256];
    REQUIRE(model_copy(dir, cdir, st_path) == 0);
    model *m = model_load(dir, err, sizeof err);
    REQUIRE(m);
    fpga_image_file f;
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.cached, 1);
    char first[1100];
    snprintf(first, sizeof first, "%s", f.path);
    fpga_image_release(&f);
    model_free(m);
    struct stat st;
    REQUIRE(stat(st_path, &st) == 0);
    CHECK(negate_weights(st_path, 6144, 6400) == 0);
    struct timespec ts[2] = {st.st_atim, st.st_mtim}; /* the file's time as it was */
    CHECK(utimensat(AT_FDCWD, st_path, ts, 0) == 0);
    m = model_load(dir, err, sizeof err);
    REQUIRE(m);
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.from_cache, 0);
    CHECK(strcmp(f.path, first) != 0);
    fpga_image_release(&f);
    model_free(m);
}

/* A link where the temporary file would go must not be followed (before: the image was written
 * through it, over whatever it named); a directory others may write or another user owns is
 * not used at all. */
TEST(fpga_image_cache_dir_and_temp_file_are_safe)
{
    char cdir[600], err[256], link[1200], victim[700];
    snprintf(cdir, sizeof cdir, "%s/cache", t_tmpdir());
    snprintf(victim, sizeof victim, "%s/victim", t_tmpdir());
    model *m = model_load(TF_MODEL, err, sizeof err);
    REQUIRE(m);
    fpga_image_file f;
    REQUIRE(get(m, cdir, &f) == 0);
    char path[1100];
    snprintf(path, sizeof path, "%s", f.path);
    fpga_image_release(&f);
    REQUIRE(unlink(path) == 0);
    FILE *v = fopen(victim, "w");
    REQUIRE(v);
    fputs("precious", v);
    fclose(v);
    /* the old name, and the first few of the new ones */
    snprintf(link, sizeof link, "%s.tmp.%ld", path, (long)getpid());
    CHECK(symlink(victim, link) == 0);
    for (int i = 0; i < 4; i++) {
        snprintf(link, sizeof link, "%s.tmp.%ld.%d", path, (long)getpid(), i);
        CHECK(symlink(victim, link) == 0);
    }
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.cached, 1);
    fpga_image_release(&f);
    struct stat st;
    CHECK(stat(victim, &st) == 0 && st.st_size == 8);
    CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
    /* open to the group or to everyone: refused, the image built in memory */
    REQUIRE(chmod(cdir, 0777) == 0);
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.cached, 0);
    CHECK_MSG(strstr(f.why, "writable by others") != NULL, "why: %s", f.why);
    fpga_image_release(&f);
    REQUIRE(chmod(cdir, 0770) == 0);
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.cached, 0);
    fpga_image_release(&f);
    REQUIRE(chmod(cdir, 0700) == 0);
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.from_cache, 1);
    fpga_image_release(&f);
    /* another user's (only root can make one) */
    if (geteuid() == 0 && chown(cdir, 65534, 65534) == 0) {
        REQUIRE(get(m, cdir, &f) == 0);
        CHECK_EQ(f.cached, 0);
        CHECK_MSG(strstr(f.why, "another user") != NULL, "why: %s", f.why);
        fpga_image_release(&f);
    }
    model_free(m);
}

/* The key reads every byte of the weights once for a loaded model however many cards open on it
 * (before: each card read them all again, about 0.13 s a GB); another model object — a copy
 * with weights negated — is read anew and keys differently; and once the last card on a model
 * has closed, its weights are read again (it may have been freed since, and another model
 * loaded at its address). */
TEST(fpga_image_key_reads_the_weights_once_per_model)
{
    char dir[600], cdir[600], st_path[700], err[256];
    REQUIRE(model_copy(dir, cdir, st_path) == 0);
    REQUIRE(negate_weights(st_path, 0, 256) == 0);
    model *m = model_load(TF_MODEL, err, sizeof err), *m2 = model_load(dir, err, sizeof err);
    REQUIRE(m && m2);
    unsetenv("TANDEM_EMU_FAULT");
    accel_opts o = {.weight_bits = 8, .threads = 1, .cache_dir = cdir};
    const uint64_t r0 = fpga_image_weights_read();
    accel_dev *c0 = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    REQUIRE(c0);
    CHECK_EQ(fpga_image_weights_read() - r0, 1);
    accel_dev *c1 = devices_open("fpga-emu:1", m, &o, err, sizeof err);
    REQUIRE(c1);
    CHECK_EQ(fpga_image_weights_read() - r0, 1); /* the second card on m: no weight read */
    const char *p0, *p1;
    CHECK_EQ(fpga_dev_image_cached(c1, &p1), 1);
    CHECK_EQ(fpga_dev_image_cached(c0, &p0), 0);
    CHECK(strcmp(p0, p1) == 0);
    accel_free(c1);
    c1 = devices_open("fpga-emu:1", m2, &o, err, sizeof err);
    REQUIRE(c1);
    CHECK_EQ(fpga_image_weights_read() - r0, 2); /* another model: read */
    CHECK_EQ(fpga_dev_image_cached(c1, &p1), 0);
    CHECK(strcmp(p0, p1) != 0);
    accel_free(c1);
    accel_free(c0);
    c0 = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    REQUIRE(c0);
    CHECK_EQ(fpga_image_weights_read() - r0, 3); /* no card held m in between: read again */
    accel_free(c0);
    model_free(m2);
    model_free(m);
}

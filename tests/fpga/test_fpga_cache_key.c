/* What the weight image cache trusts: its key covers every byte of the weights (an edit in
 * place, anywhere, with the shapes and even the file time kept, is a miss), its directory must
 * be the user's own and closed to others, and its temporary file is created, never opened
 * where a file or link already is. */
#include "fpga/image_cache.h"
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

/* 64 weights of layer 0's gate projection negated, bytes 6144..6400 of it: outside the 4 KiB
 * windows at its start, middle (about 20 KiB) and end that the key once sampled. */
TEST(fpga_image_cache_key_covers_every_byte)
{
    char dir[600], cdir[600], st_path[700], cmd[1400], err[256];
    snprintf(dir, sizeof dir, "%s/model", t_tmpdir());
    snprintf(cdir, sizeof cdir, "%s/cache", t_tmpdir());
    snprintf(cmd, sizeof cmd, "cp -r %s '%s'", TF_MODEL, dir);
    REQUIRE(system(cmd) == 0);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    model *m = model_load(dir, err, sizeof err);
    REQUIRE(m);
    fpga_image_file f;
    REQUIRE(get(m, cdir, &f) == 0);
    CHECK_EQ(f.cached, 1);
    char first[1100];
    snprintf(first, sizeof first, "%s", f.path);
    fpga_image_release(&f);
    model_free(m);
    long at = tensor_at(st_path, "model.layers.0.mlp.gate_proj.weight");
    REQUIRE(at > 0);
    struct stat st;
    REQUIRE(stat(st_path, &st) == 0);
    int fd = open(st_path, O_RDWR);
    REQUIRE(fd >= 0);
    for (long off = 6144; off < 6400; off += 4) {
        uint8_t b;
        CHECK(pread(fd, &b, 1, at + off + 3) == 1);
        b ^= 0x80; /* the sign of an F32 (or of every other 16-bit) weight */
        CHECK(pwrite(fd, &b, 1, at + off + 3) == 1);
    }
    close(fd);
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

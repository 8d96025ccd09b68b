/* Tests for the cuda plugin's choice of 16-bit format (devices/cuda_plugin.c): AUTO by the
 * checkpoint's dtype (the float32 stories260K -> fp16; an in-memory model with bfloat16
 * projections -> bf16), the parser, and where the plugin is looked for: a temporary directory
 * stands in for the binary's, holding empty files named like the plugins (only their presence
 * matters before dlopen). No GPU needed. */
#include "tests/test.h"
#include "tests/util.h"
#include "devices/devices.h"
#include "scheduler/accel.h"
#include <sys/stat.h>
#include <unistd.h>

#define BF16_SO "libtandem_cuda.so"
#define F16_SO "libtandem_cuda_f16.so"

/* A model of one layer whose tensors are all of dtype t (no data: only dtypes are read). */
static void fake_model(model *m, model_layer *l, enum model_dtype t)
{
    memset(m, 0, sizeof *m);
    memset(l, 0, sizeof *l);
    m->cfg.n_layers = 1;
    m->layers = l;
    m->embed.dtype = m->lm_head.dtype = t;
    l->wq.dtype = l->wk.dtype = l->wv.dtype = l->wo.dtype = t;
    l->w_gate.dtype = l->w_up.dtype = l->w_down.dtype = t;
}

static void touch(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(t_write_file(p, "", 0) == 0);
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

TEST(gpu_half_parse)
{
    enum accel_gpu_half h = ACCEL_GPU_HALF_BF16;
    CHECK(accel_gpu_half_parse("auto", &h) == 0 && h == ACCEL_GPU_HALF_AUTO);
    CHECK(accel_gpu_half_parse("bf16", &h) == 0 && h == ACCEL_GPU_HALF_BF16);
    CHECK(accel_gpu_half_parse("fp16", &h) == 0 && h == ACCEL_GPU_HALF_F16);
    const char *bad[] = {"", "f16", "FP16", "bf16 ", "fp32", "fp8", "half"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h = ACCEL_GPU_HALF_F16;
        CHECK_MSG(accel_gpu_half_parse(bad[i], &h) == -1, "'%s' parsed", bad[i]);
        CHECK_EQ(h, ACCEL_GPU_HALF_F16); /* untouched */
    }
    CHECK(accel_gpu_half_parse(NULL, &h) == -1);
    /* the names are what the parser takes */
    enum accel_gpu_half all[] = {ACCEL_GPU_HALF_AUTO, ACCEL_GPU_HALF_BF16, ACCEL_GPU_HALF_F16};
    for (size_t i = 0; i < 3; i++) {
        CHECK(accel_gpu_half_parse(accel_gpu_half_name(all[i]), &h) == 0);
        CHECK_EQ(h, all[i]);
    }
}

TEST(gpu_half_auto_by_checkpoint_dtype)
{
    char err[512];
    model *m = model_load("models/stories260K", err, sizeof err);
    REQUIRE(m);
    CHECK_EQ(m->layers[0].wq.dtype, MODEL_DTYPE_F32);
    CHECK_STR(devices_cuda_plugin(m, ACCEL_GPU_HALF_AUTO), F16_SO);
    CHECK_EQ(accel_gpu_half_resolve(m, ACCEL_GPU_HALF_AUTO), ACCEL_GPU_HALF_F16);
    /* an explicit choice wins over the dtype */
    CHECK_STR(devices_cuda_plugin(m, ACCEL_GPU_HALF_BF16), BF16_SO);
    CHECK_STR(devices_cuda_plugin(m, ACCEL_GPU_HALF_F16), F16_SO);
    model_free(m);

    model fm;
    model_layer l;
    fake_model(&fm, &l, MODEL_DTYPE_BF16);
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_AUTO), BF16_SO);
    CHECK_EQ(accel_gpu_half_resolve(&fm, ACCEL_GPU_HALF_AUTO), ACCEL_GPU_HALF_BF16);
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_F16), F16_SO);
    fake_model(&fm, &l, MODEL_DTYPE_F16);
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_AUTO), F16_SO);
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_BF16), BF16_SO);
    /* the projections decide, not the embedding (a bf16 checkpoint with an fp32 embedding) */
    fake_model(&fm, &l, MODEL_DTYPE_BF16);
    fm.embed.dtype = MODEL_DTYPE_F32;
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_AUTO), BF16_SO);
    /* no layers: the embedding decides */
    fm.cfg.n_layers = 0;
    fm.layers = NULL;
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_AUTO), F16_SO);
    fm.embed.dtype = MODEL_DTYPE_BF16;
    CHECK_STR(devices_cuda_plugin(&fm, ACCEL_GPU_HALF_AUTO), BF16_SO);
    /* no model: the bf16 build, the one that existed before the choice */
    CHECK_STR(devices_cuda_plugin(NULL, ACCEL_GPU_HALF_AUTO), BF16_SO);
}

/* devices_cuda_plugin_find into the test's path / err buffers (sizes as declared below) */
static int find(const char *dir, const model *m, enum accel_gpu_half h, char path[1200],
                char err[1024])
{
    return devices_cuda_plugin_find(dir, m, h, path, 1200, err, 1024);
}

TEST(gpu_half_plugin_find)
{
    model f32, bf16;
    model_layer l32, lbf;
    fake_model(&f32, &l32, MODEL_DTYPE_F32);
    fake_model(&bf16, &lbf, MODEL_DTYPE_BF16);
    char dir[600], path[1200], err[1024];
    snprintf(dir, sizeof dir, "%s/bin", t_tmpdir());
    REQUIRE(mkdir(dir, 0700) == 0);

    /* nothing installed: the chosen file is named */
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_AUTO, path, err), ACCEL_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err, F16_SO) && strstr(err, "nor " BF16_SO) && strstr(err, dir), "%s", err);
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_F16, path, err), ACCEL_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err, F16_SO) && !strstr(err, BF16_SO), "%s", err);
    CHECK_EQ(find(dir, &bf16, ACCEL_GPU_HALF_AUTO, path, err), ACCEL_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err, BF16_SO) && !strstr(err, F16_SO), "%s", err);

    /* only the bf16 build */
    touch(dir, BF16_SO);
    err[0] = 0;
    CHECK_EQ(find(dir, &bf16, ACCEL_GPU_HALF_AUTO, path, err), 0);
    CHECK(ends_with(path, "/bin/" BF16_SO));
    /* AUTO on a float32 checkpoint falls back, and says so */
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_AUTO, path, err), 1);
    CHECK(ends_with(path, "/bin/" BF16_SO));
    CHECK_MSG(strstr(err, F16_SO) && strstr(err, "bf16") && !strchr(err, '\n'), "%s", err);
    /* an explicit fp16 never does: the message names the file and the way to bf16 */
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_F16, path, err), ACCEL_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err, F16_SO) && strstr(err, "--gpu-dtype bf16"), "%s", err);
    CHECK_EQ(find(dir, &bf16, ACCEL_GPU_HALF_F16, path, err), ACCEL_ERR_NOT_FOUND);
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_BF16, path, err), 0);
    CHECK(ends_with(path, "/bin/" BF16_SO));

    /* the fp16 build installed under ../lib/tandem (make install's layout) */
    char lib[700];
    snprintf(lib, sizeof lib, "%s/lib", t_tmpdir());
    REQUIRE(mkdir(lib, 0700) == 0);
    snprintf(lib, sizeof lib, "%s/lib/tandem", t_tmpdir());
    REQUIRE(mkdir(lib, 0700) == 0);
    touch(lib, F16_SO);
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_AUTO, path, err), 0);
    CHECK(ends_with(path, "/bin/../lib/tandem/" F16_SO));
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_F16, path, err), 0);
    /* beside the binary beats ../lib/tandem */
    touch(dir, F16_SO);
    CHECK_EQ(find(dir, &f32, ACCEL_GPU_HALF_AUTO, path, err), 0);
    CHECK(ends_with(path, "/bin/" F16_SO));
    /* and a bf16 checkpoint still gets the bf16 build */
    CHECK_EQ(find(dir, &bf16, ACCEL_GPU_HALF_AUTO, path, err), 0);
    CHECK(ends_with(path, "/bin/" BF16_SO));
}

/* devices_open("cuda") goes through the same search from the binary's directory; an explicit
 * lib_path is taken as given. */
TEST(gpu_half_open_errors)
{
    model fm;
    model_layer l;
    fake_model(&fm, &l, MODEL_DTYPE_F32);
    char err[1024];
    accel_opts o = {.lib_path = "/nonexistent/libmine.so", .gpu_half = ACCEL_GPU_HALF_F16};
    CHECK(devices_open("cuda:0", &fm, &o, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, "/nonexistent/libmine.so") && !strstr(err, F16_SO), "%s", err);
    char f16[600];
    snprintf(f16, sizeof f16, "%s/" F16_SO, t_build_dir());
    if (access(f16, F_OK) == 0) SKIP("%s is built: its absence cannot be tested here", f16);
    o = (accel_opts){.gpu_half = ACCEL_GPU_HALF_F16};
    CHECK(devices_open("cuda:0", &fm, &o, err, sizeof err) == NULL);
    CHECK_MSG(strstr(err, F16_SO), "%s", err);
}

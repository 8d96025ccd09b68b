/* tests/devices/test_plugin_abi.c — the host refuses a CUDA plugin built from another tree
 * (gpu/plugin.h: GPU_PLUGIN_ABI) before calling into it. The plugins here are tiny shared
 * libraries compiled by the test whose gpu_plugin_open aborts: reaching it fails the test. */
#include "devices/devices.h"
#include "gpu/plugin.h"
#include "plugin_abi.h"
#include "tests/test.h"
#include "tests/util.h"

/* Compiles a fake plugin exporting gpu_plugin_open (which aborts) and, when abi is not NULL, the
 * stamp abi. Returns its path, or NULL (the test skips: no C compiler). */
static const char *fake_plugin(const char *name, const char *abi)
{
    static char so[4][512];
    static int n;
    char src[512], cmd[2048];
    snprintf(src, sizeof src, "%s/%s.c", t_tmpdir(), name);
    char *path = so[n++ % 4];
    snprintf(path, 512, "%s/%s.so", t_tmpdir(), name);
    char text[512];
    int len = snprintf(text, sizeof text,
                       "#include <stdlib.h>\n%s%s%s"
                       "void *gpu_plugin_open(void) { abort(); }\n",
                       abi ? "const char gpu_plugin_abi[] = \"" : "", abi ? abi : "",
                       abi ? "\";\n" : "");
    if (t_write_file(src, text, (size_t)len)) return NULL;
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -o %s %s", path, src);
    return t_run(cmd, NULL, 0) == 0 ? path : NULL;
}

static void expect_refused(const char *lib, const char *why)
{
    model *m = NULL;
    accel_dev *cpu = NULL;
    if (t_open("models/stories260K", "cpu", &m, &cpu)) return;
    accel_opts o = {.lib_path = lib};
    char err[1024] = "";
    accel_dev *d = devices_open("cuda", m, &o, err, sizeof err);
    CHECK_MSG(d == NULL, "a plugin %s was opened", why);
    CHECK_MSG(strstr(err, "another source tree") && strstr(err, "rebuild"), "%s: %s", why, err);
    CHECK_MSG(strstr(err, GPU_PLUGIN_ABI) != NULL, "the message names this binary's stamp: %s",
              err);
    accel_free(d);
    accel_free(cpu);
    model_free(m);
}

TEST(plugin_abi_unstamped_refused)
{
    const char *lib = fake_plugin("unstamped", NULL);
    if (!lib) SKIP("no C compiler to build a fake plugin");
    expect_refused(lib, "without a stamp");
}

TEST(plugin_abi_other_tree_refused)
{
    char other[sizeof GPU_PLUGIN_ABI];
    snprintf(other, sizeof other, "%s", GPU_PLUGIN_ABI);
    other[0] = other[0] == '0' ? '1' : '0'; /* one hex digit off */
    const char *lib = fake_plugin("other", other);
    if (!lib) SKIP("no C compiler to build a fake plugin");
    expect_refused(lib, "with another tree's stamp");
}

/* A prefix of the stamp is not the stamp (the comparison includes the terminator). */
TEST(plugin_abi_prefix_refused)
{
    char prefix[sizeof GPU_PLUGIN_ABI];
    snprintf(prefix, sizeof prefix, "%.8s", GPU_PLUGIN_ABI);
    const char *lib = fake_plugin("prefix", prefix);
    if (!lib) SKIP("no C compiler to build a fake plugin");
    expect_refused(lib, "with a prefix of the stamp");
}

/* The plugin this tree built carries this tree's stamp: opening it gets past the check (on a
 * machine without a GPU it then fails for that reason, not for the stamp). */
TEST(plugin_abi_own_plugin_accepted)
{
    char lib[512];
    snprintf(lib, sizeof lib, "%s/libtandem_cuda.so", t_build_dir());
    FILE *f = fopen(lib, "rb");
    if (!f) SKIP("%s not built (no nvcc)", lib);
    fclose(f);
    model *m = NULL;
    accel_dev *cpu = NULL;
    if (t_open("models/stories260K", "cpu", &m, &cpu)) return;
    accel_opts o = {.lib_path = lib};
    char err[1024] = "";
    accel_dev *d = devices_open("cuda", m, &o, err, sizeof err);
    CHECK_MSG(d || !strstr(err, "another source tree"), "own plugin refused: %s", err);
    accel_free(d);
    accel_free(cpu);
    model_free(m);
}

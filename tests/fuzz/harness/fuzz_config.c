/* tests/fuzz/harness/fuzz_config.c — libFuzzer harness for the daemon's configuration
 * (daemon/config.c dmn_config_load): the config file, the flags and the environment, the three
 * layers a key comes from.
 *
 * Input: byte 0 mod 3 picks the layer the rest feeds — 0: the config file (written to the
 * harness's scratch directory and named with --config); 1: flags, the rest cut at NUL bytes into
 * argv words; 2: environment entries ("TANDEM_PORT=8080"), cut the same way. Words that would
 * print and stop (--help, -h, --print-config) or name another file (--config, TANDEM_CONFIG) are
 * dropped, so that the harness reads no file it did not write. Promises checked: a refusal (-1)
 * has a message; an accepted configuration passes the checks dmn_config_load promises to have
 * made (gpu_dtype parses, the sparse method's parameters check, a card's run watchdog fires before
 * systemd's); every string a key holds is freed by dmn_config_deinit (LeakSanitizer). */
#include "daemon/config.h"
#include "scheduler/accel.h"
#include "tests/fuzz/harness/harness_util.h"
#include <string.h>

#define MAX_WORDS 64

static int dropped(const char *w)
{
    return !strcmp(w, "--help") || !strcmp(w, "-h") || !strcmp(w, "--print-config") ||
           !strncmp(w, "--config", 8) || !strncmp(w, "TANDEM_CONFIG", 13);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    const int mode = data[0] % 3;
    const uint8_t *rest = data + 1;
    size_t rn = n - 1;
    char *words[MAX_WORDS + 4] = {"serve"};
    char *envp[MAX_WORDS + 1] = {NULL};
    char *text = NULL;
    int argc = 1, nenv = 0;
    if (mode == 0) {
        const char *dir = fuzz_tmpdir();
        words[argc++] = "--config";
        words[argc++] = (char *)fuzz_write(dir, "tandem.conf", rest, rn);
    } else {
        /* the words in one NUL-terminated copy */
        text = fuzz_strndup(rest, rn);
        char *p = text, *end = text + rn;
        while (p <= end && argc < MAX_WORDS && nenv < MAX_WORDS) {
            size_t len = strlen(p);
            if (!dropped(p)) {
                if (mode == 1)
                    words[argc++] = p;
                else
                    envp[nenv++] = p;
            }
            p += len + 1;
        }
    }
    words[argc] = NULL;
    envp[nenv] = NULL;
    dmn_config c;
    char err[512];
    err[0] = 0;
    int rc = dmn_config_load(&c, argc, words, envp, err, sizeof err);
    CHECK(rc == 0 || rc == -1);
    if (rc < 0) {
        CHECK(err[0]);
    } else {
        enum accel_gpu_half half;
        CHECK(accel_gpu_half_parse(c.gpu_dtype, &half) == 0);
        sparse_params sp;
        const char *bad;
        char why[160];
        CHECK(dmn_config_sparse(&c, -1, &sp) == 0);
        CHECK(sparse_params_check(&sp, why, sizeof why, &bad) == 0);
        CHECK(!strstr(c.devices, "fpga") || c.fpga_run_timeout_ms < c.watchdog_stall * 1000);
    }
    dmn_config_deinit(&c);
    free(text);
    return 0;
}

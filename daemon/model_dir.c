/* daemon/model_dir.c — see model_dir.h. */
#include "daemon/model_dir.h"
#include "devices/exe_dir.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int dmn_is_model_dir(const char *dir)
{
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%.*s/config.json", PATH_MAX, dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int dmn_bundled_model(char *out, size_t n)
{
    char exe[PATH_MAX];
    devices_exe_dir(exe, sizeof exe);
    /* build/tandem, build/san/tandem (a checkout), bin/tandem (installed under a prefix) */
    static const char *const rel[] = {"%s/../models/stories260K", "%s/../../models/stories260K",
                                      "%s/../share/tandem/models/stories260K"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX + 64], real[PATH_MAX];
        snprintf(cand, sizeof cand, rel[i], exe);
        if (dmn_is_model_dir(cand)) {
            snprintf(out, n, "%s", realpath(cand, real) ? real : cand);
            return 0;
        }
    }
    snprintf(out, n, "%s", exe);
    return -1;
}

void dmn_default_model(char *out, size_t n)
{
    const char *env = getenv("TANDEM_MODEL");
    if (env && *env)
        snprintf(out, n, "%s", env);
    else if (dmn_bundled_model(out, n) != 0)
        snprintf(out, n, "models/stories260K");
}

/* devices/exe_dir.c — see exe_dir.h. */
#include "devices/exe_dir.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int devices_exe_dir(char *out, size_t n)
{
    char buf[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
    char *slash = k > 0 ? (buf[k] = 0, strrchr(buf, '/')) : NULL;
    if (slash) {
        *slash = 0;
        if ((size_t)snprintf(out, n, "%s", slash == buf ? "/" : buf) < n) return 0;
    }
    snprintf(out, n, ".");
    return -1;
}

int devices_lib_find_in(const char *dir, const char *name, char *path, size_t n)
{
    static const char *const fmts[] = {"%s/%s", "%s/../lib/tandem/%s"};
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        snprintf(path, n, fmts[i], dir, name);
        if (access(path, F_OK) == 0) return 0;
    }
    snprintf(path, n, fmts[0], dir, name);
    return -1;
}

int devices_lib_find(const char *name, char *path, size_t n)
{
    char dir[PATH_MAX];
    devices_exe_dir(dir, sizeof dir);
    return devices_lib_find_in(dir, name, path, n);
}

/* tests/fuzz/harness/harness_util.c — see harness_util.h. */
#include "tests/fuzz/harness/harness_util.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[512];

static void rm_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) fuzz_unlink(tmpdir, e->d_name);
        closedir(d);
    }
    rmdir(tmpdir);
}

const char *fuzz_tmpdir(void)
{
    if (tmpdir[0]) return tmpdir;
    const char *base = getenv("TMPDIR");
    struct stat st;
    if (!base || !*base)
        base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/tandem-fuzz.XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(rm_tmpdir);
    return tmpdir;
}

const char *fuzz_write(const char *dir, const char *name, const void *data, size_t n)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(data, 1, n, fp) != n) || fclose(fp)) {
        perror(path);
        abort();
    }
    return path;
}

void fuzz_unlink(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

void fuzz_split(const uint8_t *data, size_t n, const uint8_t **head, size_t *head_n,
                const uint8_t **tail, size_t *tail_n)
{
    const uint8_t *z = n ? memchr(data, 0, n) : NULL;
    *head = data;
    *head_n = z ? (size_t)(z - data) : n;
    *tail = z ? z + 1 : NULL;
    *tail_n = z ? n - *head_n - 1 : 0;
}

char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = 0;
    return s;
}

/* daemon/cli.c — see cli.h. */
#include "daemon/cli.h"
#include "devices/devices.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *dmn_opt(int *i, int argc, char **argv, const char *name, int *bad)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != 0) return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "tandem: %s needs a value\n", name);
        *bad = 1;
        return NULL;
    }
    return argv[++*i];
}

int dmn_flag(int i, char **argv, const char *name)
{
    return strcmp(argv[i], name) == 0;
}

int dmn_parse_ids(const char *s, int32_t **ids, size_t *n, char *err, size_t errlen)
{
    size_t cap = 64, cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        if (*p < '0' || *p > '9') {
            snprintf(err, errlen, "bad token id at \"%.12s\"", p);
            free(v);
            return -1;
        }
        errno = 0;
        char *end;
        long long x = strtoll(p, &end, 10);
        if (errno || x > INT32_MAX || (*end && !strchr(", \t\r\n", *end))) {
            snprintf(err, errlen, "bad token id at \"%.12s\"", p);
            free(v);
            return -1;
        }
        if (cnt == DMN_MAX_IDS) {
            snprintf(err, errlen, "more than %d ids", DMN_MAX_IDS);
            free(v);
            return -1;
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    *ids = v;
    *n = cnt;
    return 0;
}

int dmn_parse_int(const char *name, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "tandem: %s must be an integer in [%ld, %ld]\n", name, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int dmn_parse_float(const char *name, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tandem: %s must be a number in [%g, %g]\n", name, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int dmn_parse_gpu_dtype(const char *s, enum accel_gpu_half *out)
{
    if (accel_gpu_half_parse(s, out) == 0) return 0;
    fprintf(stderr, "tandem: --gpu-dtype must be auto, bf16 or fp16, got '%s'\n", s);
    return -1;
}

int dmn_sampling_opt(int *i, int argc, char **argv, model_sampling *s, int *bad)
{
    const char *v;
    double x;
    long t;
    if ((v = dmn_opt(i, argc, argv, "--temperature", bad))) {
        if (dmn_parse_float("--temperature", v, 0, 2, &x)) return -1;
        s->temperature = (float)x;
    } else if ((v = dmn_opt(i, argc, argv, "--top-p", bad))) {
        if (dmn_parse_float("--top-p", v, 0, 1, &x)) return -1;
        s->top_p = (float)x;
    } else if ((v = dmn_opt(i, argc, argv, "--min-p", bad))) {
        if (dmn_parse_float("--min-p", v, 0, 1, &x)) return -1;
        s->min_p = (float)x;
    } else if ((v = dmn_opt(i, argc, argv, "--top-k", bad))) {
        if (dmn_parse_int("--top-k", v, -1, 1 << 24, &t)) return -1;
        s->top_k = (int)t;
    } else if ((v = dmn_opt(i, argc, argv, "--seed", bad))) {
        if (dmn_parse_int("--seed", v, 0, 0x7fffffffffffffffL, &t)) return -1;
        s->seed = (uint64_t)t;
        s->has_seed = 1;
    } else {
        return 0;
    }
    return 1;
}

int dmn_open_model(const char *dir, const char *device, const accel_opts *opts, model **m,
                   accel_dev **d)
{
    char err[1024];
    *m = model_load(dir, err, sizeof err);
    if (!*m) {
        fprintf(stderr, "tandem: %s\n", err);
        return -1;
    }
    *d = devices_open(device, *m, opts, err, sizeof err);
    if (!*d) {
        fprintf(stderr, "tandem: %s\n", err);
        model_free(*m);
        *m = NULL;
        return -1;
    }
    return 0;
}

int dmn_help(int i, char **argv)
{
    return !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
}

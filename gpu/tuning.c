/* gpu/tuning.c — see tuning.h. */
#include "gpu/tuning.h"
#include "gpu/gpu.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest pass chunk= may ask for: its activations (~160 KB per token for an 8B-shaped
 * model) stay within a few GB of device memory. */
#define CHUNK_MAX 65536

void gpu_tuning_default(gpu_tuning *t)
{
    *t = (gpu_tuning){
        .chunk = 8192, /* the GEMMs at full rate, an 8B model's activations near 1.3 GB */
        .graphs = 1,
        .attn = GPU_ATTN_AUTO,
        .sparse_attn = GPU_ATTN_AUTO,
        .gemv = 1,
        .fused = 1,
        .pdl = 1,
        .decode_two = 0,
        .decode_cluster = 2048, /* where it beats the split form (gpu/KERNELS.md) */
        .decode_mma = 1,
        .decode_rows = 1,
        .logits_chunks = 4,
        .prune = 1,
        .load_overlap = 1,
        .argmax = 1,
        .gemm_tune = GPU_GEMM_TUNE_ON,
        .gemm_small = 8, /* where it beats cuBLAS (gpu/KERNELS.md) */
        .prefill_split = 1,
        .xattn_fp8 = 0,
        .profile = 0,
        .chain_trace = 0,
    };
}

static int int_in(const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi) return -1;
    *out = (int)n;
    return 0;
}

static int pick(const char *v, int allow_wgmma, int *out)
{
    static const char *const names[] = {"auto", "mma4", "mma8", "wgmma"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, names[i]) && (i != GPU_ATTN_WGMMA || allow_wgmma)) {
            *out = i;
            return 0;
        }
    return -1;
}

/* One key=value; 0, or -1 with the reason in err. */
static int set_one(gpu_tuning *t, const char *k, const char *v, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        size_t off;
    } flags[] = {
        {"graphs", offsetof(gpu_tuning, graphs)},   {"gemv", offsetof(gpu_tuning, gemv)},
        {"fused", offsetof(gpu_tuning, fused)},     {"pdl", offsetof(gpu_tuning, pdl)},
        {"decode_mma", offsetof(gpu_tuning, decode_mma)}, {"prune", offsetof(gpu_tuning, prune)},
        {"decode_rows", offsetof(gpu_tuning, decode_rows)},
        {"load_overlap", offsetof(gpu_tuning, load_overlap)}, {"argmax", offsetof(gpu_tuning, argmax)},
        {"prefill_split", offsetof(gpu_tuning, prefill_split)},
        {"xattn_fp8", offsetof(gpu_tuning, xattn_fp8)},
        {"profile", offsetof(gpu_tuning, profile)}, {"chain_trace", offsetof(gpu_tuning, chain_trace)},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(k, flags[i].name)) {
            if (!int_in(v, 0, 1, (int *)((char *)t + flags[i].off))) return 0;
            snprintf(err, errlen, "gpu_tune: %s must be 0 or 1, got '%.32s'", k, v);
            return -1;
        }
    if (!strcmp(k, "chunk")) {
        if (!int_in(v, GPU_MAX_BATCH, CHUNK_MAX, &t->chunk)) return 0;
        snprintf(err, errlen, "gpu_tune: chunk must be a token count in [%d, %d], got '%.32s'",
                 GPU_MAX_BATCH, CHUNK_MAX, v);
        return -1;
    }
    if (!strcmp(k, "offload_pool_mb")) {
        if (!int_in(v, 0, 1 << 24, &t->offload_pool_mb)) return 0;
        snprintf(err, errlen, "gpu_tune: offload_pool_mb must be MiB in [0, %d], got '%.32s'",
                 1 << 24, v);
        return -1;
    }
    if (!strcmp(k, "gemm_small")) {
        if (!int_in(v, 0, GPU_GEMM_SMALL_MAX, &t->gemm_small)) return 0;
        snprintf(err, errlen, "gpu_tune: gemm_small must be a row count in [0, %d] (0 or 1: off), got '%.32s'",
                 GPU_GEMM_SMALL_MAX, v);
        return -1;
    }
    if (!strcmp(k, "logits_chunks")) {
        if (!int_in(v, 1, GPU_LOGIT_CHUNKS_MAX, &t->logits_chunks)) return 0;
        snprintf(err, errlen, "gpu_tune: logits_chunks must be in [1, %d], got '%.32s'",
                 GPU_LOGIT_CHUNKS_MAX, v);
        return -1;
    }
    if (!strcmp(k, "attn")) {
        if (!pick(v, 1, &t->attn)) return 0;
        snprintf(err, errlen, "gpu_tune: attn must be auto, mma4, mma8 or wgmma, got '%.32s'", v);
        return -1;
    }
    if (!strcmp(k, "sparse_attn")) {
        if (!pick(v, 0, &t->sparse_attn)) return 0;
        snprintf(err, errlen, "gpu_tune: sparse_attn must be auto, mma4 or mma8, got '%.32s'", v);
        return -1;
    }
    if (!strcmp(k, "gemm_tune")) {
        static const char *const modes[] = {"0", "1", "log", "force"};
        for (int i = 0; i < 4; i++)
            if (!strcmp(v, modes[i])) {
                t->gemm_tune = i;
                return 0;
            }
        snprintf(err, errlen, "gpu_tune: gemm_tune must be 0, 1, log or force, got '%.32s'", v);
        return -1;
    }
    if (!strcmp(k, "decode_attn")) {
        if (!strcmp(v, "one") || !strcmp(v, "two")) {
            t->decode_two = v[1] == 'w';
            return 0;
        }
        snprintf(err, errlen, "gpu_tune: decode_attn must be one or two, got '%.32s'", v);
        return -1;
    }
    if (!strcmp(k, "decode_cluster")) {
        if (!int_in(v, 0, 1 << 20, &t->decode_cluster)) return 0;
        snprintf(err, errlen, "gpu_tune: decode_cluster must be 0 (off) or a key count, got '%.32s'",
                 v);
        return -1;
    }
    snprintf(err, errlen, "gpu_tune: unknown key '%.32s' (the keys: gpu/tuning.h)", k);
    return -1;
}

int gpu_tuning_parse(gpu_tuning *t, const char *spec, char *err, size_t errlen)
{
    if (!spec) return 0;
    char item[96];
    for (const char *p = spec; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && (*p == ' ' || *p == '\t')) p++, n--;
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n >= sizeof item) {
            snprintf(err, errlen, "gpu_tune: item too long: '%.32s...'", p);
            return -1;
        }
        memcpy(item, p, n);
        item[n] = 0;
        p = comma ? comma + 1 : p + strlen(p);
        if (!n) continue; /* "", "a=1,,b=0", a trailing comma */
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "gpu_tune: '%s' is not key=value", item);
            return -1;
        }
        *eq = 0;
        if (set_one(t, item, eq + 1, err, errlen)) return -1;
    }
    return 0;
}

int gpu_tuning_read(gpu_tuning *t, const char *spec, char *err, size_t errlen)
{
    gpu_tuning_default(t);
    /* the environment only where the opener hands no settings over: tests, benchmarks */
    return gpu_tuning_parse(t, spec ? spec : getenv("TANDEM_GPU_TUNE"), err, errlen);
}

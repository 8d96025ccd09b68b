/* tools/flex_fpga_bench.c — the FAST-Prefill kernels on the emulated U280: KV cache hit rate,
 * HBM traffic with and without the cache, and modeled TTFT, against FAST-Prefill's reported 65%
 * hit rate (Sec. V-C1).
 *
 *   build/flex_fpga_bench [--model 1b|3b|8b] [--tokens 4096,8192,...] [--kind structured]
 *                         [--sigu-max 32768] [--window 16] [--cache-mib 16] [--threads 2]
 *
 * For each length: synthetic Q/K/V of one attention layer (cpu/flex_synth.h) are packed W8A8;
 * the SIGU runs on the emulator up to --sigu-max tokens (above that the CPU reference builds
 * the same index from the dequantized inputs, and the SIGU's modeled time is scaled from the
 * largest length it ran: its sweeps are linear in n); the SAU runs in schedule-only mode
 * (cache, traffic and cycle accounting without the arithmetic). Modeled TTFT = layers x
 * (SIGU + SAU + the layer's dense projections and FFN on the hybrid MPU at 12,288 int8
 * MACs/cycle, 225 MHz) — every layer priced like the measured one; embeddings, the LM head and
 * host transfers left out. The dense-attention line prices full causal attention on the same
 * MPU (2 n^2 d H / 2 MACs per layer). */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "cpu/pool.h"
#include "fpga/flex_host.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    const char *name;
    int layers, heads, kv_heads, dim, hidden, inter;
} shape;

/* Llama-3.2-1B / 3B (FAST-Prefill's models, config.json of meta-llama) and Llama-3-8B. */
static const shape shapes[] = {
    {"llama-3.2-1b", 16, 32, 8, 64, 2048, 8192},
    {"llama-3.2-3b", 28, 24, 8, 128, 3072, 8192},
    {"llama-3-8b", 32, 32, 8, 128, 4096, 14336},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* int8 MACs of one layer's projections + FFN per token (embedding/LM head excluded). */
static double layer_macs_per_token(const shape *s)
{
    double qo = 2.0 * s->hidden * s->heads * s->dim, kv = 2.0 * s->hidden * s->kv_heads * s->dim;
    return qo + kv + 3.0 * s->hidden * s->inter;
}

static double mpu_seconds(double macs)
{
    return macs / FPGA_FLEX_MPU_MACS / FPGA_U280_KERNEL_HZ;
}

int main(int argc, char **argv)
{
    const shape *sh = &shapes[0];
    const char *tokens = "4096,8192,16384,32768";
    enum cpu_flex_synth_kind kind = CPU_FLEX_SYNTH_STRUCTURED;
    int sigu_max = 32768, window = 16, threads = 2;
    double cache_mib = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--model")) {
            sh = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                if (strstr(shapes[k].name, v)) sh = &shapes[k];
            if (!sh) {
                fprintf(stderr, "flex_fpga_bench: unknown model %s (1b, 3b, 8b)\n", v);
                return 2;
            }
        } else if (!strcmp(o, "--tokens")) tokens = v;
        else if (!strcmp(o, "--kind")) {
            int k = cpu_flex_synth_kind_parse(v);
            if (k < 0) return fprintf(stderr, "flex_fpga_bench: unknown kind %s\n", v), 2;
            kind = (enum cpu_flex_synth_kind)k;
        } else if (!strcmp(o, "--sigu-max")) sigu_max = atoi(v);
        else if (!strcmp(o, "--window")) window = atoi(v);
        else if (!strcmp(o, "--threads")) threads = atoi(v);
        else if (!strcmp(o, "--cache-mib")) cache_mib = atof(v);
        else return fprintf(stderr, "flex_fpga_bench: unknown option %s\n", o), 2;
    }
    if (window < 1 || window > FPGA_FLEX_MAX_WINDOW || threads < 1 || threads > 64 ||
        !(cache_mib >= 0 && cache_mib < 64)) {
        fprintf(stderr, "flex_fpga_bench: window 1..%d, threads 1..64, cache below 64 MiB\n",
                FPGA_FLEX_MAX_WINDOW);
        return 2;
    }
    char err[256];
    fpga_xrt *x = fpga_xrt_new("build/libxrt_emu.so", err, sizeof err);
    xrtDeviceHandle dev;
    if (!x || fpga_xrt_device_open(x, 0, &dev)) {
        fprintf(stderr, "flex_fpga_bench: %s\n", x ? fpga_xrt_error() : err);
        return 1;
    }
    cpu_pool *pool = cpu_pool_new(threads);
    const int H = sh->heads, G = sh->kv_heads, d = sh->dim;
    printf("## FAST-Prefill on the emulated U280: %s (%d layers, %d heads, %d KV heads, d %d), "
           "%s inputs\n\n", sh->name, sh->layers, H, G, d, cpu_flex_synth_kind_name(kind));
    printf("KV cache %.0f MiB, window %d query blocks; hit rate = hits / (window, KV block) uses.\n\n",
           cache_mib, window);
    printf("| n | density | index by | hit rate (hot / cold) | KV MiB with cache | without | "
           "row-major gather | SIGU ms | SAU ms (mem / compute) | layer linear ms | TTFT s | "
           "dense-attention TTFT s |\n|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|---:|\n");
    double sigu_ms_per_token = 0;
    for (const char *s = tokens; *s;) {
        char *end;
        long n = strtol(s, &end, 10);
        if (end == s || n < 256 || n > FPGA_FLEX_MAX_TOKENS) {
            fprintf(stderr, "flex_fpga_bench: bad length list at %s\n", s);
            return 2;
        }
        s = *end == ',' ? end + 1 : end;
        float *q = malloc(sizeof(float) * n * H * d), *k = malloc(sizeof(float) * n * G * d),
              *v = malloc(sizeof(float) * n * G * d);
        uint8_t *qp = malloc(fpga_flex_q_bytes((int)n, H, d)),
                *kvp = malloc(fpga_flex_kv_bytes((int)n, G, d));
        if (!q || !k || !v || !qp || !kvp) {
            fprintf(stderr, "flex_fpga_bench: out of memory at n %ld\n", n);
            return 1;
        }
        cpu_flex_synth syn = {kind, (int)n, H, G, d, FPGA_FLEX_BS, 5};
        cpu_flex_synth_rows(&syn, 0, (int)n, q, k, v);
        fpga_flex_pack_q(q, (size_t)H * d, (int)n, H, d, qp);
        fpga_flex_pack_kv(k, v, (size_t)G * d, (int)n, G, d, kvp);
        fpga_flex_opts o;
        fpga_flex_opts_default(&o, d);
        o.window = window;
        o.cache_blocks = (int)(cache_mib * 1048576 / fpga_flex_kvblock_bytes(d));
        if (o.cache_blocks > FPGA_FLEX_MAX_CACHE) o.cache_blocks = FPGA_FLEX_MAX_CACHE;
        o.hot_blocks = o.cache_blocks / 2;
        o.schedule_only = 1;
        uint32_t *rp = NULL, *col = NULL;
        const int nb = (int)((n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS);
        int by_sigu = n <= sigu_max;
        if (!by_sigu) {
            /* the CPU reference on the dequantized inputs: the SIGU's sets (tests/fpga) */
            fpga_flex_unpack_q(qp, (int)n, H, d, q);
            fpga_flex_unpack_kv(kvp, (int)n, G, d, k, v);
            sparse_flex_params cp;
            sparse_flex_params_default(&cp);
            cpu_flex_qkv xq = {(int)n, H, G, d, q, (size_t)H * d, k, v, (size_t)G * d, 0};
            cpu_flex_index *ix;
            if (cpu_flex_index_build(pool, &cp, &xq, &ix)) return 1;
            rp = malloc(sizeof(uint32_t) * H * (nb + 1));
            col = malloc(sizeof(uint32_t) * (ix->nnz ? ix->nnz : 1));
            for (size_t i = 0; i < (size_t)H * (nb + 1); i++) rp[i] = (uint32_t)ix->row_ptr[i];
            for (int64_t i = 0; i < ix->nnz; i++) col[i] = (uint32_t)ix->col[i];
            cpu_flex_index_free(ix);
            o.index_row_ptr = rp;
            o.index_col = col;
        }
        free(q);
        free(k);
        free(v);
        double t0 = now_s();
        fpga_flex_result r;
        int rc = fpga_flex_attention(x, dev, &o, qp, kvp, (int)n, H, G, d, &r);
        double wall = now_s() - t0;
        if (rc) {
            fprintf(stderr, "flex_fpga_bench: n %ld: %s (%s)\n", n, accel_strerror(rc),
                    fpga_xrt_error());
            return 1;
        }
        const uint64_t nnz = r.row_ptr[(size_t)H * (nb + 1) - 1];
        const double density = (double)nnz / ((double)H * nb * (nb + 1) / 2);
        double sigu_ms = r.sigu_run.modeled_ns / 1e6;
        if (r.sigu_ran) sigu_ms_per_token = sigu_ms / n;
        else sigu_ms = sigu_ms_per_token * n; /* scaled from the largest SIGU run */
        const fpga_flex_sau_stats *st = &r.sau;
        const double sau_ms = r.sau_run.modeled_ns / 1e6;
        const double lin_ms = mpu_seconds(layer_macs_per_token(sh) * n) * 1e3;
        const double ttft = sh->layers * (sigu_ms + sau_ms + lin_ms) / 1e3;
        const double dense_attn_s = mpu_seconds((double)H * n * n * d); /* 2 x n^2 d / 2 */
        const double dense_ttft = sh->layers * (dense_attn_s + lin_ms / 1e3);
        printf("| %ld | %.4f | %s | %.1f%% (%.1f / %.1f) | %.1f | %.1f | %.1f | %.1f%s | %.1f "
               "(%.1f / %.1f) | %.1f | %.2f | %.2f |\n",
               n, density, by_sigu ? "SIGU" : "cpu ref",
               100.0 * st->hits / (st->accesses ? st->accesses : 1),
               100.0 * st->hot_hits / (st->accesses ? st->accesses : 1),
               100.0 * st->cold_hits / (st->accesses ? st->accesses : 1), st->kv_bytes / 1048576.0,
               st->kv_bytes_nocache / 1048576.0, st->kv_bytes_naive / 1048576.0, sigu_ms,
               r.sigu_ran ? "" : "*", sau_ms, r.sau_run.mem_ns / 1e6, r.sau_run.compute_ns / 1e6,
               lin_ms, ttft, dense_ttft);
        fprintf(stderr, "n %ld: emulator wall %.1f s, jobs %llu, accesses %llu, admitted hot %llu "
                "cold %llu, bypassed %llu, evicted live %llu\n", n, wall,
                (unsigned long long)st->jobs, (unsigned long long)st->accesses,
                (unsigned long long)st->admitted_hot, (unsigned long long)st->admitted_cold,
                (unsigned long long)st->bypassed, (unsigned long long)st->evicted_live);
        fflush(stdout);
        fpga_flex_result_free(&r);
        free(rp);
        free(col);
        free(qp);
        free(kvp);
    }
    printf("\n* scaled from the largest length the SIGU ran on the emulator (linear in n).\n");
    fpga_xrt_device_close(x, dev);
    fpga_xrt_free(x);
    cpu_pool_free(pool);
    return 0;
}

/* tools/xattn_fpga_bench.c — the card's XAttention estimator (fpga/kernels/xattn_est.c) priced
 * by its timing model (fpga/xattn_model.c, checked equal to the emulator's charges by
 * tests/fpga/test_xattn_card.c) per layer, next to dense causal attention on the same MPU / SFU
 * (the prefill kernel's DENSE attention) — BENCHMARKS.md "XAttention on the card".
 *
 *   build/xattn_fpga_bench [--lens 8192,32768,131072] [--strides 8,16]
 *
 * The CSR written is priced at every causal block (an upper bound: what the selection keeps
 * only shortens the writes, which are < 0.01 % of the bytes). Shapes: Llama-3.2-1B (FAST-
 * Prefill's model: 32 heads, 8 KV heads, d 64) and Llama-3-8B (32 / 8 / 128). */
#include "fpga/xattn_model.h"
#include "fpga/xrt/u280.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name;
    uint32_t H, Hk, d;
} shape;

static int parse_list(const char *s, uint32_t *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > FPGA_FLEX_MAX_TOKENS) return -1;
        out[n++] = (uint32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    uint32_t lens[8] = {8192, 32768, 131072}, strides[8] = {8, 16};
    int nl = 3, ns = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lens") && i + 1 < argc) nl = parse_list(argv[++i], lens, 8);
        else if (!strcmp(argv[i], "--strides") && i + 1 < argc) ns = parse_list(argv[++i], strides, 8);
        else {
            fprintf(stderr, "usage: %s [--lens N,N,...] [--strides S,S,...]\n", argv[0]);
            return 2;
        }
        if (nl < 1 || ns < 1) {
            fprintf(stderr, "bad list\n");
            return 2;
        }
    }
    const shape shapes[] = {{"Llama-3.2-1B", 32, 8, 64}, {"Llama-3-8B", 32, 8, 128}};
    printf("| model | n | S | estimator ms/layer | compute ms | memory ms | K read GiB | int8 GMAC "
           "| on-chip logits KiB | dense attention ms/layer | estimator / dense |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int li = 0; li < nl; li++)
            for (int sj = 0; sj < ns; sj++) {
                const shape *sh = &shapes[si];
                const uint32_t n = lens[li], S = strides[sj];
                fpga_xattn_params p = {.method = FPGA_XATTN_METHOD_XATTN, .stride = S};
                fpga_xattn_f64_bits(0.9, &p.thr_lo, &p.thr_hi);
                if (!fpga_xattn_ok(n, 0, sh->H, sh->Hk, sh->d, &p)) {
                    printf("| %s | %u | %u | outside the unit's bounds |\n", sh->name, n, S);
                    continue;
                }
                const uint64_t nb = (n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
                fpga_xattn_cost c;
                fpga_xattn_model(n, 0, sh->H, sh->Hk, sh->d, &p, sh->H * nb * (nb + 1) / 2, &c);
                const double dense_ms = (double)fpga_xattn_dense_attn_cycles(n, 0, sh->H, sh->d) /
                                        FPGA_U280_KERNEL_HZ * 1e3;
                const double kib = (double)(FPGA_FLEX_BS / S) * ((n + S - 1) / S) * 4 / 1024;
                printf("| %s | %u | %u | %.2f | %.2f | %.2f | %.2f | %.1f | %.0f | %.1f | %.1f %% |\n",
                       sh->name, n, S, c.ns / 1e6, c.compute_ns / 1e6, c.mem_ns / 1e6,
                       (double)c.read_bytes / (1u << 30), (double)c.macs / 1e9, kib, dense_ms,
                       100.0 * (c.ns / 1e6) / dense_ms);
            }
    return 0;
}

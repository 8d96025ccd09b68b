/* tools/tls_fpga_bench.c — AsyncTLS decode on the emulated card at a long context: a dense card
 * and a card with decode_sparse asynctls (every layer sparse) decode the same imported KV
 * (random int8 values, fp16 scales), and the emulator's timing model prices each step; the
 * per-layer difference then prices a full-depth model (BENCHMARKS.md "AsyncTLS on the card").
 *
 *   build/tls_fpga_bench --model DIR --channels FILE [--ctx 32768] [--steps 2]
 *                        [--spec asynctls,...] [--full-layers 32] [--dense-layers 2] [--offload]
 *
 * DIR: a checkpoint of the real shape with few layers (tools/mkmodel --preset llama2-7b
 * --layers 2 --max-pos 40960), W4A8 on the card. Step 1 of the sparse card also summarizes the
 * imported positions (its arena starts empty); the last step is the steady state. Full depth:
 * fpga_dec_model_step_paged for the dense model of full_layers layers, plus (full_layers -
 * dense_layers) times the measured per-layer change of memory, compute and stall time
 * (decode is memory-bound and each layer's reads are spread over the 32 channels alike).
 *
 * --offload: the sparse card keeps the sequence's KV in its DDR4 (fpga/BANKS.md "DDR4"): its
 * HBM pool is capped at the full-depth model's pool scaled to this model's layers (what a
 * U280 holding the whole model leaves per layer), so the sequence does not fit HBM and goes
 * to DDR4, decoded by the staggered pipeline from a resident cache. Full depth then takes the
 * HBM side as above and the DDR4 side (fetches, appends, summary reads) as its own memory: the
 * busier of the two, as the emulator's timing model does within a run. The spec's
 * dense_layers must be 0 here (every emulated layer sparse); --dense-layers prices the full
 * model's dense layers from a resident copy of their KV (the dense model's per-layer cost). */
#include "devices/devices.h"
#include "fpga/backend.h"
#include "fpga/dec_model.h"
#include "fpga/kernels/tls_dec.h"
#include "sparse/tls.h"
#include "fpga/kernels/dec_math.h"
#include "model/ckpt/model.h"
#include "proto/kv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel_dev *open_card(const model *m, const char *name, const char *spec, const char *chan,
                           uint64_t mem_limit)
{
    accel_opts o = {.weight_bits = 4, .decode_sparse = spec, .sparse_channels = chan,
                    .mem_limit = mem_limit};
    char err[512];
    accel_dev *d = devices_open(name, m, &o, err, sizeof err);
    if (!d) fprintf(stderr, "%s: %s\n", name, err);
    return d;
}

/* positions [0, ctx) of every layer: int8 values in -127..127, fp16 scales near 0.02 */
static int fill(accel_dev *d, accel_seq *s, const model_config *c, int ctx)
{
    enum { PIECE = 2048 };
    const int Hk = c->n_kv_heads, hd = c->head_dim;
    uint8_t *k = malloc((size_t)PIECE * Hk * hd), *v = malloc((size_t)PIECE * Hk * hd);
    uint16_t *ks = malloc(sizeof *ks * PIECE * Hk), *vs = malloc(sizeof *vs * PIECE * Hk);
    if (!k || !v || !ks || !vs) return -1;
    uint64_t x = 88172645463325252ull;
    int st = 0;
    for (int p0 = 0; p0 < ctx && !st; p0 += PIECE)
        for (int l = 0; l < c->n_layers && !st; l++) {
            const int n = ctx - p0 < PIECE ? ctx - p0 : PIECE;
            for (size_t i = 0; i < (size_t)n * Hk * hd; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                k[i] = (uint8_t)(int8_t)((int)(x % 255) - 127);
                v[i] = (uint8_t)(int8_t)((int)((x >> 20) % 255) - 127);
            }
            for (int i = 0; i < n * Hk; i++) ks[i] = vs[i] = fpga_km_f32_to_f16(0.02f);
            proto_kv_layer ch = {.layer = l, .pos0 = p0, .n_tokens = n, .n_kv_heads = Hk,
                                 .head_dim = hd, .dtype = PROTO_KV_INT8, .k = k, .v = v,
                                 .k_scale = ks, .v_scale = vs};
            st = accel_kv_import(d, s, &ch);
        }
    free(k), free(v), free(ks), free(vs);
    return st;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *chan = NULL;
    const char *spec = "asynctls,block_size=64,block_budget=128,token_budget=1024,dense_layers=0";
    int ctx = 32768, steps = 2, full_layers = 32, dense_layers = 2, offload = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--offload")) {
            offload = 1;
            continue;
        }
        if (!v) break;
        if (!strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--channels")) chan = v;
        else if (!strcmp(a, "--spec")) spec = v;
        else if (!strcmp(a, "--ctx")) ctx = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--full-layers")) full_layers = atoi(v);
        else if (!strcmp(a, "--dense-layers")) dense_layers = atoi(v);
        else break;
        i++;
    }
    if (!dir || !chan || ctx < 1024 || ctx > 1 << 20 || steps < 1 || steps > 16 ||
        full_layers < 1 || full_layers > 256 || dense_layers < 0 || dense_layers > full_layers) {
        fprintf(stderr, "usage: %s --model DIR --channels FILE [--ctx N] [--steps N] [--spec S] "
                        "[--full-layers N] [--dense-layers N]\n", argv[0]);
        return 2;
    }
    char err[512];
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    setenv("TANDEM_FPGA_QUANT", "calib=0", 0);
    accel_dev *dense = open_card(m, "fpga-emu:0", NULL, NULL, 0);
    if (!dense) return 1;
    const model_config *c = &m->cfg;
    fpga_card *cd = fpga_dev_card(dense);
    /* the full-depth card: its weight image, what HBM leaves for KV, the sequence's KV */
    fpga_dec_desc full = cd->desc;
    full.n_layers = (uint32_t)full_layers;
    fpga_dec_layout lof;
    fpga_dec_layout_of(&full, &lof);
    const uint64_t pool_full = lof.image_bytes < cd->bank_bytes
                                   ? (cd->bank_bytes - lof.image_bytes) * FPGA_DEC_CH : 0;
    const uint64_t kv_full = (uint64_t)ctx * 2ull * full_layers * c->n_kv_heads * (c->head_dim + 2);
    uint64_t cap = 0;
    if (offload) {
        /* the resident cache and summaries of the full model (fpga/kernels/tls_dec.h) */
        sparse_tls_params tp;
        int on, cs;
        if (sparse_tls_parse(spec, c->head_dim, &tp, &on, &cs, err, sizeof err) || !on) {
            fprintf(stderr, "--spec: %s\n", err);
            return 2;
        }
        tp.channels = 32;
        tp.dense_layers = dense_layers;
        fpga_tls_io io = {.block_size = (uint32_t)tp.block_size,
                          .block_budget = (uint32_t)tp.block_budget, .r = 32,
                          .dense_layers = (uint32_t)dense_layers,
                          .cap = (uint32_t)(ctx + steps + 127) / 128 * 128, .stagger = 1,
                          .offload = 1};
        fpga_tls_arena ar;
        fpga_tls_arena_of(&full, &io, &ar);
        printf("full depth (%d layers): weight image %.2f GiB, HBM left for KV %.2f GiB; the "
               "sequence's KV %.2f GiB (%s HBM); the resident cache, summaries and labels "
               "%.2f GiB (%s)\n",
               full_layers, lof.image_bytes * 32.0 / (1 << 30), pool_full / 1073741824.0,
               kv_full / 1073741824.0, kv_full > pool_full ? "does not fit" : "fits",
               ar.chan_bytes * 32.0 / (1 << 30),
               ar.chan_bytes * 32 <= pool_full ? "fits" : "DOES NOT FIT: the step runs dense from DDR4");
        cap = (uint64_t)((double)pool_full * c->n_layers / full_layers);
    }
    accel_dev *tls = open_card(m, "fpga-emu:1", spec, chan, cap);
    if (!tls) return 1;
    accel_seq *sd, *st;
    if (accel_seq_new(dense, ctx + steps, &sd) || accel_seq_new(tls, ctx + steps, &st) ||
        fill(dense, sd, c, ctx) || fill(tls, st, c, ctx)) {
        fprintf(stderr, "filling %d positions failed\n", ctx);
        return 1;
    }
    float *lg = malloc(sizeof(float) * c->vocab);
    fpga_card *ct = fpga_dev_card(tls);
    fpga_emu_run_stats a = {0}, b = {0};
    accel_decode_stats ds0 = {0}, dlast = {0};
    printf("| step | dense ms | dense MiB read | sparse ms | sparse MiB read (HBM + DDR4) | DDR4 MiB "
           "| DDR4 ms | blocks fetched / chosen |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < steps; i++) {
        int32_t id = (i * 17 + 5) % c->vocab;
        if (accel_decode(dense, 1, &sd, &id, lg) || accel_decode(tls, 1, &st, &id, lg)) {
            fprintf(stderr, "decode failed\n");
            return 1;
        }
        a = cd->last_dec;
        b = ct->last_dec;
        accel_decode_stats ds = {0};
        accel_seq_decode_stats(tls, st, &ds);
        printf("| %d | %.3f | %.1f | %.3f | %.1f | %.1f | %.3f | %lld / %lld |\n", i + 1,
               a.modeled_ns / 1e6, a.bytes_read / 1048576.0, b.modeled_ns / 1e6,
               b.bytes_read / 1048576.0,
               (b.ext_bytes[0] + b.ext_bytes[1] + b.ext_bytes[2]) / 1048576.0, b.ext_ns / 1e6, (long long)(ds.blocks_new - ds0.blocks_new),
               (long long)(ds.blocks_kept - ds0.blocks_kept));
        dlast = (accel_decode_stats){.blocks_new = ds.blocks_new - ds0.blocks_new,
                                     .blocks_kept = ds.blocks_kept - ds0.blocks_kept};
        ds0 = ds;
    }
    /* full depth: the dense model of full_layers, plus the sparse layers' measured change */
    fpga_dec_cost dm, d2;
    const uint32_t pos = (uint32_t)(ctx + steps - 1);
    fpga_dec_model_step_paged(&full, pos, 0, &dm);
    fpga_dec_model_step_paged(&cd->desc, pos, 0, &d2);
    const double L = c->n_layers, k = full_layers - dense_layers;
    /* the HBM side: the busiest pseudo-channel (mem_ns is the DDR4 bank's when that is busier) */
    const double cmd_ns = FPGA_U280_CMD_CYCLES / FPGA_U280_KERNEL_HZ * 1e9;
    double hbm_b = 0;
    for (int ch = 0; ch < FPGA_U280_HBM_BANKS; ch++) {
        double t = b.chan_bytes[ch] / (FPGA_U280_HBM_PC_BPS * FPGA_U280_HBM_UTIL) * 1e9 +
                   b.chan_cmds[ch] * cmd_ns;
        hbm_b = t > hbm_b ? t : hbm_b;
    }
    const double dmem = (hbm_b - a.mem_ns) / L, dcomp = ((double)b.compute_ns - a.compute_ns) / L,
                 dstall = ((double)b.stall_ns - a.stall_ns) / L, dddr = (double)b.ext_ns / L;
    double mem = dm.mem_ns + k * dmem;
    const double comp = dm.compute_ns + k * dcomp;
    if (k * dddr > mem) mem = k * dddr;
    const double sparse = dm.overhead_ns + (mem > comp ? mem : comp) + dm.stall_ns + k * dstall;
    printf("\nmodel check: the dense %d-layer step %.3f ms emulated, %.3f ms by fpga_dec_model\n",
           c->n_layers, a.modeled_ns / 1e6, d2.modeled_ns / 1e6);
    printf("per sparse layer: memory %+.3f ms, compute %+.3f ms, stall %+.3f ms\n", dmem / 1e6,
           dcomp / 1e6, dstall / 1e6);
    if (offload) {
        const double hbm_full = dm.mem_ns + k * dmem;
        const double hidden = dm.overhead_ns + (hbm_full > comp ? hbm_full : comp) + dm.stall_ns +
                              k * dstall;
        const double turn = dlast.blocks_kept ? (double)dlast.blocks_new / dlast.blocks_kept : 0;
        printf("per sparse layer: DDR4 / host memory %.3f ms (full depth %.2f ms, overlapped with HBM's %.2f ms)\n",
               dddr / 1e6, k * dddr / 1e6, hbm_full / 1e6);
        printf("last step: %.1f %% of the chosen blocks were new (fetched); with every fetch "
               "hidden the step is %.2f ms/token, which holds up to ~%.0f %% new per step\n",
               100 * turn, hidden / 1e6, k * dddr > 0 ? 100 * turn * hbm_full / (k * dddr) : 100.0);
        printf("dense with its KV in DDR4 (sparse decode off): >= %.1f ms/token (%.2f GiB of KV at "
               "2 x %.1f GB/s x %.2f)\n",
               kv_full / (FPGA_U280_DDR_BANKS * FPGA_U280_DDR_BPS * FPGA_U280_DDR_UTIL) * 1e3,
               kv_full / 1073741824.0, FPGA_U280_DDR_BPS / 1e9, FPGA_U280_DDR_UTIL);
    }
    printf("%d layers at %d positions: dense %.2f ms/token (its KV in HBM, %s), "
           "AsyncTLS%s (%d dense layers) %.2f ms/token\n",
           full_layers, ctx, dm.modeled_ns / 1e6,
           kv_full > pool_full ? "if it fitted: it does not" : "it fits",
           offload ? " with the KV past HBM (DDR4, or host memory: TANDEM_FPGA_KV_TIER=host)" : "", dense_layers, sparse / 1e6);
    accel_seq_free(dense, sd);
    accel_seq_free(tls, st);
    accel_free(dense);
    accel_free(tls);
    model_free(m);
    free(lg);
    return 0;
}

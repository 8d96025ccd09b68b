/* tools/tls_fpga_bench.c — AsyncTLS decode on the emulated card at a long context: a dense card
 * and a card with decode_sparse asynctls (every layer sparse) decode the same imported KV
 * (random int8 values, fp16 scales), and the emulator's timing model prices each step; the
 * per-layer difference then prices a full-depth model (BENCHMARKS.md "AsyncTLS on the card").
 *
 *   build/tls_fpga_bench --model DIR --channels FILE [--ctx 32768] [--steps 2]
 *                        [--spec asynctls,...] [--full-layers 32] [--dense-layers 2]
 *
 * DIR: a checkpoint of the real shape with few layers (tools/mkmodel --preset llama2-7b
 * --layers 2 --max-pos 40960), W4A8 on the card. Step 1 of the sparse card also summarizes the
 * imported positions (its arena starts empty); the last step is the steady state. Full depth:
 * fpga_dec_model_step_paged for the dense model of full_layers layers, plus (full_layers -
 * dense_layers) times the measured per-layer change of memory, compute and stall time
 * (decode is memory-bound and each layer's reads are spread over the 32 channels alike). */
#include "devices/devices.h"
#include "fpga/backend.h"
#include "fpga/dec_model.h"
#include "fpga/kernels/dec_math.h"
#include "model/ckpt/model.h"
#include "proto/kv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static accel_dev *open_card(const model *m, const char *name, const char *spec, const char *chan)
{
    accel_opts o = {.weight_bits = 4, .decode_sparse = spec, .sparse_channels = chan};
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
    int ctx = 32768, steps = 2, full_layers = 32, dense_layers = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
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
    accel_dev *dense = open_card(m, "fpga-emu:0", NULL, NULL);
    accel_dev *tls = open_card(m, "fpga-emu:1", spec, chan);
    if (!dense || !tls) return 1;
    const model_config *c = &m->cfg;
    accel_seq *sd, *st;
    if (accel_seq_new(dense, ctx + steps, &sd) || accel_seq_new(tls, ctx + steps, &st) ||
        fill(dense, sd, c, ctx) || fill(tls, st, c, ctx)) {
        fprintf(stderr, "filling %d positions failed\n", ctx);
        return 1;
    }
    float *lg = malloc(sizeof(float) * c->vocab);
    fpga_card *cd = fpga_dev_card(dense), *ct = fpga_dev_card(tls);
    fpga_emu_run_stats a = {0}, b = {0};
    printf("| step | dense ms | dense MiB read | sparse ms | sparse MiB read |\n|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < steps; i++) {
        int32_t id = (i * 17 + 5) % c->vocab;
        if (accel_decode(dense, 1, &sd, &id, lg) || accel_decode(tls, 1, &st, &id, lg)) {
            fprintf(stderr, "decode failed\n");
            return 1;
        }
        a = cd->last_dec;
        b = ct->last_dec;
        printf("| %d | %.3f | %.1f | %.3f | %.1f |\n", i + 1, a.modeled_ns / 1e6,
               a.bytes_read / 1048576.0, b.modeled_ns / 1e6, b.bytes_read / 1048576.0);
    }
    /* full depth: the dense model of full_layers, plus the sparse layers' measured change */
    fpga_dec_desc full = cd->desc;
    full.n_layers = (uint32_t)full_layers;
    fpga_dec_cost dm, d2;
    const uint32_t pos = (uint32_t)(ctx + steps - 1);
    fpga_dec_model_step_paged(&full, pos, 0, &dm);
    fpga_dec_model_step_paged(&cd->desc, pos, 0, &d2);
    const double L = c->n_layers, k = full_layers - dense_layers;
    const double dmem = ((double)b.mem_ns - a.mem_ns) / L, dcomp = ((double)b.compute_ns - a.compute_ns) / L,
                 dstall = ((double)b.stall_ns - a.stall_ns) / L;
    const double mem = dm.mem_ns + k * dmem, comp = dm.compute_ns + k * dcomp;
    const double sparse = dm.overhead_ns + (mem > comp ? mem : comp) + dm.stall_ns + k * dstall;
    printf("\nmodel check: the dense %d-layer step %.3f ms emulated, %.3f ms by fpga_dec_model\n",
           c->n_layers, a.modeled_ns / 1e6, d2.modeled_ns / 1e6);
    printf("per sparse layer: memory %+.3f ms, compute %+.3f ms, stall %+.3f ms\n", dmem / 1e6,
           dcomp / 1e6, dstall / 1e6);
    printf("%d layers at %d positions: dense %.2f ms/token (its KV in HBM, if it fitted), "
           "AsyncTLS (%d dense layers) %.2f ms/token\n",
           full_layers, ctx, dm.modeled_ns / 1e6, dense_layers, sparse / 1e6);
    accel_seq_free(dense, sd);
    accel_seq_free(tls, st);
    accel_free(dense);
    accel_free(tls);
    model_free(m);
    free(lg);
    return 0;
}

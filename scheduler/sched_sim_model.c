/* scheduler/sched_sim_model.c — shapes, hardware profiles and the pricing formulas of
 * sched_sim_model.h. */
#include "scheduler/sched_sim_model.h"
#include "fpga/u280.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Model shapes (the models' config.json). */
static const sched_sim_shape shapes[] = {
    /* meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters, MHA */
    {"llama2-7b", 6.738e9, 32, 32, 32, 128, 4096},
    /* meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters, GQA 32/8 */
    {"llama3-8b", 8.030e9, 32, 32, 8, 128, 8192},
};

#define ALL_CAPS (ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT)
#define CARD_CAPS (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT)

/* Hardware profiles. GLITCHES' decode latencies are averages over 512 decode steps after a
 * 1536-token prompt: the calibration context is their mean, 1536 + 255.5 ~ 1792. */
static const sched_sim_hw hws[] = {
    {"a100", ACCEL_KIND_CUDA, ALL_CAPS, 256, "llama2-7b", 1536, 0.17585, 1792, 0.02426, 0, 0,
     80e9, 16, 16, 25e9, 10e-6, 17000,
     "GLITCHES Table I (HF transformers FP16, LLaMA2-7B [1536,512]: prefill 175.85 ms, decode "
     "24.26 ms/token), Table II ($17,000); 80 GB and PCIe Gen4 x16 at 25 GB/s assumed"},
    {"v100s", ACCEL_KIND_CUDA, ALL_CAPS, 256, "llama2-7b", 1536, 0.39880, 1792, 0.02952, 0, 0,
     32e9, 16, 16, 12e9, 10e-6, 12000,
     "GLITCHES Table I (prefill 398.80 ms, decode 29.52 ms/token), Table II ($12,000); PCIe "
     "Gen3 x16 at 12 GB/s assumed"},
    {"h100-hf", ACCEL_KIND_CUDA, ALL_CAPS, 256, "llama3-8b", 4096, 0.124, 4096, 0.050, 0, 0,
     80e9, 16, 16, 55e9, 10e-6, 30000,
     "DESIGN.md's probe of HF transformers bf16 on an H100, Llama-3-8B: prefill 4K 124 ms, "
     "decode 50 ms/token (context taken as 4K); pinned PCIe Gen5 55 GB/s (DESIGN.md); price "
     "$30,000 assumed"},
    /* seq_s: (7.630 - 4.457) / 31 ms per further sequence at 32 x 1024 tokens, less the 1024
     * positions of KV each adds at the calibrated bandwidth (about 0.044 ms) */
    {"h200-tandem", ACCEL_KIND_CUDA, ALL_CAPS, 256, "llama3-8b", 4096, 0.1026, 1024, 0.004456,
     0, 0.058e-3, 141e9, 16, 16, 55.3e9, 10e-6, 35000,
     "tandem's CUDA backend measured on an H200 (tests/gpu/logs/2026-11-21-h200-final: "
     "Llama-3-8B shape, prefill 4096 tokens 102.6 ms, decode 4.456 ms/token after 1024, batch "
     "32 7.63 ms/step, pinned D2H 55.3 GB/s); 141 GB; price $35,000 assumed"},
    {"u280", ACCEL_KIND_FPGA, CARD_CAPS | ACCEL_CAP_PREFILL, 1, "llama2-7b", 1536, 5.0012, 1792,
     0.0215, 0, 0, (double)FPGA_U280_HBM_BYTES, 4, 8, FPGA_U280_PCIE_BPS,
     FPGA_U280_SYNC_OVERHEAD_NS * 1e-9, 8000,
     "GLITCHES Table I (FlightLLM-based W4A8 with prefetching: prefill 5001.20 ms, decode "
     "21.50 ms/token), Table II ($8,000); 8 GiB HBM, PCIe per fpga/u280.h"},
    {"u280-tandem", ACCEL_KIND_FPGA, CARD_CAPS | ACCEL_CAP_PREFILL, 1, "llama2-7b", 1536, 3.720,
     1792, 0.01027,
     FPGA_U280_RUN_OVERHEAD_NS * 1e-9 + 0.546e-3, 0, (double)FPGA_U280_HBM_BYTES, 4, 8,
     FPGA_U280_PCIE_BPS, FPGA_U280_SYNC_OVERHEAD_NS * 1e-9, 8000,
     "tandem's own decode kernel in the emulator's timing model (fpga/dec_model.c on branch "
     "fpga2, tools/fpga_decode_bench: LLaMA2-7B W4A8 g128 at context 1792 = 10.27 ms/token "
     "with host syncs, of which 0.05 ms run overhead + 0.546 ms serial stalls are fixed); "
     "prefill: fpga/kernels/prefill.c's cost model, LLaMA2-7B 1536 tokens dense in 3,720 ms "
     "(fpga/PREFILL.md, tools/fpga_prefill_bench)"},
};

#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])
#define NHWS (int)(sizeof hws / sizeof hws[0])

const sched_sim_shape *sched_sim_shape_at(int i)
{
    return i >= 0 && i < NSHAPES ? &shapes[i] : NULL;
}

const sched_sim_hw *sched_sim_hw_at(int i)
{
    return i >= 0 && i < NHWS ? &hws[i] : NULL;
}

const sched_sim_shape *sched_sim_shape_find(const char *name)
{
    for (int i = 0; i < NSHAPES; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

const sched_sim_hw *sched_sim_hw_find(const char *name)
{
    for (int i = 0; i < NHWS; i++)
        if (!strcmp(hws[i].name, name)) return &hws[i];
    return NULL;
}

/* Bytes of weights a device streams per decode step. A card's 4-bit weights carry 5 % of
 * group scales and zero points (GLITCHES Sec. IV: "about 4~6% of the weights"); 8-bit ones one
 * scale per row (negligible). */
static double weight_bytes(const sched_sim_shape *s, int bits)
{
    double b = s->params * bits / 8.0;
    return bits < 8 ? b * 1.05 : b;
}

/* KV bytes of one position: fp16 K and V on a GPU; int8 plus one fp16 scale per head
 * (proto/kv.h) on a card. */
static uint64_t kv_bytes(const sched_sim_shape *s, int bits)
{
    uint64_t per_head = bits >= 16 ? 2ull * s->head_dim : (uint64_t)s->head_dim + 2;
    return 2ull * s->n_layers * s->n_kv_heads * per_head;
}

double sched_sim_prefill_flops(const sched_sim_shape *s, double n, double pos0)
{
    double attn = 4.0 * s->n_layers * (double)s->n_heads * s->head_dim * n * (pos0 + n / 2);
    return 2.0 * s->params * n + attn;
}

void sched_sim_dev_calibrate_prefill(sched_sim_dev_model *d, const sched_sim_shape *s,
                                     double tokens, double seconds)
{
    double t = seconds - d->fixed_s;
    d->prefill_flops = tokens > 0 && t > 0 ? sched_sim_prefill_flops(s, tokens, 0) / t : 0;
}

void sched_sim_dev_calibrate_decode(sched_sim_dev_model *d, const sched_sim_shape *s,
                                    double ctx, double seconds)
{
    double t = seconds - d->fixed_s;
    double bytes = weight_bytes(s, d->hw->weight_bits) + ctx * (double)kv_bytes(s, d->hw->kv_bits);
    d->decode_bps = t > 0 ? bytes / t : 0;
}

int sched_sim_dev_init(sched_sim_dev_model *d, const sched_sim_hw *hw, const sched_sim_shape *s,
                       int max_running, int index, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    const sched_sim_shape *cal = sched_sim_shape_find(hw->cal_shape);
    if (!cal) {
        snprintf(err, errlen, "%s: unknown calibration shape %s", hw->name, hw->cal_shape);
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s:%d", hw->name, index);
    d->hw = hw;
    d->kind = hw->kind;
    d->caps = hw->caps;
    d->max_batch = hw->max_batch;
    d->max_running = max_running > 0 ? max_running : hw->kind == ACCEL_KIND_FPGA ? hw->max_batch : 256;
    d->fixed_s = hw->fixed_s;
    d->seq_s = hw->seq_s;
    d->params = s->params;
    d->weight_bytes = weight_bytes(s, hw->weight_bits);
    d->kv_bytes_per_token = kv_bytes(s, hw->kv_bits);
    d->n_layers = s->n_layers;
    d->attn_dim = s->n_heads * s->head_dim;
    d->link_bps = hw->link_bps;
    d->link_s = hw->link_s;
    /* 10 % of the memory for activations and workspace. */
    double kv = hw->mem_bytes * 0.9 - d->weight_bytes;
    if (kv <= 0) {
        snprintf(err, errlen, "%s: %s's %.1f GB of weights do not fit %.1f GB", d->name, s->name,
                 d->weight_bytes / 1e9, hw->mem_bytes / 1e9);
        return -1;
    }
    d->mem_kv = (uint64_t)kv;
    sched_sim_dev_calibrate_prefill(d, cal, hw->cal_prefill_tokens, hw->cal_prefill_s);
    if (!d->prefill_flops) d->caps &= ~(unsigned)ACCEL_CAP_PREFILL;
    sched_sim_dev_calibrate_decode(d, cal, hw->cal_decode_ctx, hw->cal_decode_s);
    if (!d->decode_bps) {
        snprintf(err, errlen, "%s: unusable decode calibration", d->name);
        return -1;
    }
    return 0;
}

double sched_sim_prefill_s(const sched_sim_dev_model *d, int n, int pos0)
{
    if (n <= 0) return 0;
    double attn = 4.0 * d->n_layers * (double)d->attn_dim * n * (pos0 + n / 2.0);
    double flops = 2.0 * d->params * n + attn;
    return d->fixed_s + (d->prefill_flops > 0 ? flops / d->prefill_flops : 1e9);
}

double sched_sim_decode_s(const sched_sim_dev_model *d, int batch, long long sum_ctx)
{
    if (batch <= 0) return 0;
    double mem = (d->weight_bytes + (double)sum_ctx * (double)d->kv_bytes_per_token) / d->decode_bps;
    /* a large batch turns compute-bound: 2 FLOPs per weight per sequence at the prefill rate */
    double comp = d->prefill_flops > 0 ? 2.0 * d->params * batch / d->prefill_flops : 0;
    return d->fixed_s + (mem > comp ? mem : comp) + (batch - 1) * d->seq_s;
}

static double hop(const sched_sim_dev_model *d, double bytes)
{
    return d->link_bps > 0 ? d->link_s + bytes / d->link_bps : 0;
}

double sched_sim_ship_s(const sched_sim_dev_model *from, const sched_sim_dev_model *to,
                        double bytes)
{
    return hop(from, bytes) + hop(to, bytes);
}

int sched_sim_model_build(sched_sim_model *m, const char *node, const char *shape,
                          int gpu_max_running, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    const sched_sim_shape *s = sched_sim_shape_find(shape);
    if (!s) {
        snprintf(err, errlen, "unknown model shape '%s' (llama2-7b, llama3-8b)", shape);
        return -1;
    }
    m->shape = *s;
    char buf[256];
    if (strlen(node) >= sizeof buf) {
        snprintf(err, errlen, "node spec too long");
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", node);
    int per_kind[8] = {0};
    char *save = NULL;
    for (char *t = strtok_r(buf, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        long count = 1;
        char *x = strchr(t, 'x');
        if (x && x > t && strspn(t, "0123456789") == (size_t)(x - t)) {
            count = strtol(t, NULL, 10);
            t = x + 1;
        }
        const sched_sim_hw *hw = sched_sim_hw_find(t);
        if (!hw) {
            snprintf(err, errlen, "unknown device profile '%s' (see tandem simulate --list)", t);
            return -1;
        }
        if (count < 1 || m->n_devs + count > SCHED_BOOK_MAX_DEVICES) {
            snprintf(err, errlen, "a node holds 1 to %d devices", SCHED_BOOK_MAX_DEVICES);
            return -1;
        }
        for (long i = 0; i < count; i++) {
            int mr = hw->kind == ACCEL_KIND_FPGA ? 0 : gpu_max_running;
            if (sched_sim_dev_init(&m->dev[m->n_devs], hw, s, mr, per_kind[hw->kind]++, err, errlen))
                return -1;
            m->n_devs++;
        }
    }
    if (!m->n_devs) {
        snprintf(err, errlen, "empty node spec");
        return -1;
    }
    return 0;
}

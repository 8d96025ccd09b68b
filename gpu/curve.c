/* gpu/curve.c — the CUDA device's decode curve scaled from the H200's (gpu/curve.h). */
#include "gpu/curve.h"
#include <string.h>

double gpu_curve_weight_bytes(int hidden, int n_layers, int n_heads, int n_kv_heads, int head_dim,
                              int intermediate, int vocab, int elem_bytes)
{
    double h = hidden, q = (double)n_heads * head_dim, kv = (double)n_kv_heads * head_dim;
    double layer = h * q * 2 + h * kv * 2 + 3.0 * h * intermediate; /* q, o; k, v; gate, up, down */
    return ((double)n_layers * layer + (double)vocab * h) * elem_bytes;
}

double gpu_mem_bps(int mem_clock_khz, int bus_bits)
{
    if (mem_clock_khz <= 0 || bus_bits <= 0) return 0;
    return 2.0 * mem_clock_khz * 1e3 * bus_bits / 8.0;
}

int gpu_decode_curve(double weight_bytes, double kv_bytes_per_token, double mem_bps,
                     int max_batch, accel_decode_curve *out)
{
    memset(out, 0, sizeof *out);
    if (!(weight_bytes > 0) || !(kv_bytes_per_token > 0) || !(mem_bps > 0) || max_batch <= 0)
        return -1;
    static const int rb[GPU_REF_N] = GPU_REF_BATCH;
    static const double rt[GPU_REF_N] = GPU_REF_TOK_S;
    const double w_ref = gpu_curve_weight_bytes(GPU_REF_SHAPE, 2);
    const double kv_ref = 2.0 * 32 * 8 * 128 * 2; /* Llama-3-8B: K and V, 32 layers x 8 x 128, bf16 */
    const double speed = GPU_REF_MEM_BPS / mem_bps, ctx = GPU_REF_CTX;
    for (int i = 0; i < GPU_REF_N && out->n < ACCEL_CURVE_MAX; i++) {
        double b = rb[i], t_ref = rb[i] / rt[i];
        if (rb[i] > max_batch) {
            if (i == 0) break;
            /* max_batch between two points: the reference's step there, linear in the batch */
            double b0 = rb[i - 1], t0 = rb[i - 1] / rt[i - 1];
            t_ref = t0 + (t_ref - t0) * (max_batch - b0) / (b - b0);
            b = max_batch;
        }
        double bytes = weight_bytes + b * ctx * kv_bytes_per_token;
        double bytes_ref = w_ref + b * ctx * kv_ref;
        out->batch[out->n] = (int)b;
        out->step_s[out->n++] = t_ref * bytes / bytes_ref * speed;
        if ((int)b >= max_batch) break;
    }
    out->ctx = ctx;
    out->s_per_pos = kv_bytes_per_token / (GPU_REF_KV_BPS / speed);
    return 0;
}

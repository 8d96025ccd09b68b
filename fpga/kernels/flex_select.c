/* fpga/kernels/flex_select.c — radix coverage cut and streaming top-k (see flex_select.h). */
#include "fpga/kernels/flex_select.h"

flex_cut flex_cover_cut(const float *x, uint64_t n, double limit)
{
    uint32_t cnt[256];
    double sum[256];
#pragma HLS ARRAY_PARTITION variable = cnt cyclic factor = 16
    flex_cut cut = {0, 0, 0, 0};
    double acc = 0;
    uint32_t prefix = 0, mask = 0;
    for (int level = 0; level < 4; level++) {
        const int shift = 24 - 8 * level;
        for (int b = 0; b < 256; b++) {
            cnt[b] = 0;
            sum[b] = 0;
        }
        fpga_k_read(x, n * 4);
        fpga_k_cycles(n / FPGA_FLEX_SCAN_LANES + 256);
        for (uint64_t i = 0; i < n; i++) {
#pragma HLS PIPELINE II = 1
            uint32_t u = fpga_flex_bits(x[i]);
            if ((u & mask) != prefix) continue;
            int b = (int)(u >> shift & 255u);
            cnt[b]++;
            sum[b] += x[i];
        }
        int b = 255;
        for (; b >= 0; b--) {
            if (!cnt[b]) continue;
            if (acc + sum[b] <= limit) {
                acc += sum[b];
                cut.count += cnt[b];
                continue;
            }
            break;
        }
        if (b < 0) {
            cut.all = 1;
            return cut;
        }
        prefix |= (uint32_t)b << shift;
        mask |= 255u << shift;
        if (level == 3) {
            /* cnt[b] equal values v: take them one at a time while the sum stays <= limit */
            const double v = fpga_flex_f32(prefix);
            cut.bits = prefix;
            for (uint32_t t = 0; t < cnt[b]; t++) {
                if (acc + v > limit) break;
                acc += v;
                cut.take++;
                cut.count++;
            }
        }
    }
    return cut;
}

void flex_top_k(const float *v, int n, int k, int32_t *sel, float *cand)
{
    int have = 0;
    for (int i = 0; i < n; i++) {
#pragma HLS PIPELINE II = 1
        /* a later index never beats an equal earlier one: strictly greater to displace */
        if (have == k && !(v[i] > cand[k - 1])) continue;
        int p = have < k ? have++ : k - 1;
        while (p > 0 && v[i] > cand[p - 1]) {
            cand[p] = cand[p - 1];
            sel[p] = sel[p - 1];
            p--;
        }
        cand[p] = v[i];
        sel[p] = i;
    }
    fpga_k_cycles((uint64_t)n);
}

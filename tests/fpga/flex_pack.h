/* tests/fpga/flex_pack.h — synthetic prefill inputs as the card's FAST-Prefill units read them:
 * cpu_flex_synth rows packed into the card's int8 Q and KV layouts (fpga/flex_host.h), and the
 * same rows dequantized back, so a CPU reference sees exactly the values the card computes on. */
#ifndef TANDEM_TESTS_FPGA_FLEX_PACK_H
#define TANDEM_TESTS_FPGA_FLEX_PACK_H
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include <stdint.h>

typedef struct tf_packed {
    int n, H, Hk, d;
    uint8_t *q, *kv;     /* the card's layouts */
    float *qf, *kf, *vf; /* dequantized, (n, heads, d) */
} tf_packed;

/* n positions of `kind` (seed), H query heads, Hk KV heads, head_dim d, FPGA_FLEX_BS blocks. */
void tf_packed_synth(tf_packed *p, int n, int H, int Hk, int d, enum cpu_flex_synth_kind kind,
                     uint64_t seed);
void tf_packed_free(tf_packed *p);
/* The reference's view of p: queries from position q_pos0 on, keys from 0. */
cpu_flex_qkv tf_packed_view(const tf_packed *p, int q_pos0);

#endif

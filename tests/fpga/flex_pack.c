#include "tests/fpga/flex_pack.h"
#include "fpga/flex_host.h"
#include <stdlib.h>

void tf_packed_synth(tf_packed *p, int n, int H, int Hk, int d, enum cpu_flex_synth_kind kind,
                     uint64_t seed)
{
    *p = (tf_packed){.n = n, .H = H, .Hk = Hk, .d = d};
    float *q = malloc(sizeof(float) * n * H * d), *k = malloc(sizeof(float) * n * Hk * d),
          *v = malloc(sizeof(float) * n * Hk * d);
    cpu_flex_synth s = {kind, n, H, Hk, d, FPGA_FLEX_BS, seed};
    cpu_flex_synth_rows(&s, 0, n, q, k, v);
    p->q = malloc(fpga_flex_q_bytes(n, H, d));
    p->kv = malloc(fpga_flex_kv_bytes(n, Hk, d));
    fpga_flex_pack_q(q, (size_t)H * d, n, H, d, p->q);
    fpga_flex_pack_kv(k, v, (size_t)Hk * d, n, Hk, d, p->kv);
    fpga_flex_unpack_q(p->q, n, H, d, q);
    fpga_flex_unpack_kv(p->kv, n, Hk, d, k, v);
    p->qf = q;
    p->kf = k;
    p->vf = v;
}

void tf_packed_free(tf_packed *p)
{
    free(p->q);
    free(p->kv);
    free(p->qf);
    free(p->kf);
    free(p->vf);
}

cpu_flex_qkv tf_packed_view(const tf_packed *p, int q_pos0)
{
    return (cpu_flex_qkv){p->n, p->H, p->Hk, p->d, p->qf + (size_t)q_pos0 * p->H * p->d,
                          (size_t)p->H * p->d, p->kf, p->vf, (size_t)p->Hk * p->d, q_pos0};
}

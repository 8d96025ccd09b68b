/* fpga/tls_model.c — AsyncTLS on a U280 with the KV in DDR4, priced (see tls_model.h). */
#include "fpga/tls_model.h"
#include <string.h>

void fpga_tls_model_step(const fpga_dec_desc *d, const fpga_tls_model_in *in, fpga_tls_cost *out)
{
    memset(out, 0, sizeof *out);
    const uint64_t L = d->n_layers, Hk = d->n_kv_heads, hd = d->head_dim, bs = in->block_size;
    const uint64_t nb = (in->context + bs - 1) / bs;
    const uint64_t kept = nb < in->block_budget ? nb : in->block_budget;
    uint64_t cand = kept * bs < in->context ? kept * bs : in->context;
    uint32_t attended = in->token_budget < in->context ? in->token_budget : in->context;
    /* the decode run over the attended tokens, and the dense one over all of them */
    fpga_dec_cost c;
    fpga_dec_model_step(d, attended - 1, &c);
    out->attend_ns = (double)c.modeled_ns;
    fpga_dec_model_step(d, in->context - 1, &c);
    out->dense_ns = (double)c.modeled_ns;
    /* the selection run: per group the summaries of every block and the labels of the kept
     * blocks' tokens, one command each, groups dealt over the channels */
    memset(&c, 0, sizeof c);
    const uint64_t label = in->channels / 2 + 4;
    for (uint64_t i = 0; i < L * Hk; i++) {
        fpga_dec_model_charge(&c, (int)(i % FPGA_DEC_CH), nb * 2 * hd * 2, 0);
        fpga_dec_model_charge(&c, (int)((i + 16) % FPGA_DEC_CH), cand * label, 0);
    }
    fpga_dec_model_price(&c);
    out->select_ns = (double)c.modeled_ns;
    /* the fetch: changed blocks' int8 K and V with their fp16 scales (one per token and head) */
    const uint64_t tok_bytes = 2 * (hd + 2);
    double eff = in->ddr_eff > 0 ? in->ddr_eff : 0.8;
    /* a context within the block budget is resident whole after the first step */
    double moved = nb > in->block_budget ? in->fetch_frac * (double)kept : 0.0;
    out->fetch_bytes = (uint64_t)(moved * (double)(L * Hk) * (double)(bs * tok_bytes));
    out->fetch_ns = (double)out->fetch_bytes / (FPGA_U280_DDR4_PEAK_GBPS * eff);
    double run = out->attend_ns + out->select_ns;
    out->modeled_ns = run > out->fetch_ns ? run : out->fetch_ns;
    out->kv_bytes = (uint64_t)in->context * L * Hk * tok_bytes;
    out->resident_bytes = L * Hk * ((kept + 1) * bs * tok_bytes + nb * 2 * hd * 2) +
                          (uint64_t)in->context * L * Hk * label;
}

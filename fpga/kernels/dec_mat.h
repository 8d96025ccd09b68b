/* fpga/kernels/dec_mat.h — the quantized matrix products of the decode, batched decode and
 * prefill kernels: y_v = M x_v for a few activation vectors x_v (one for a decode step, one per
 * sequence of a batch, one per row of a prefill chunk).
 *
 * Every matrix is split by output rows over the 32 HBM channels (dec_layout.h), and each
 * channel's engine streams its rows (values, then scales) in one command and applies each row
 * to every vector. On the emulator the channels are fpga_k_parallel iterations (the card's
 * engines run at once; the emulator's threads, fpga/emu/emu_par.c): each writes only its own
 * slice of the outputs, each output is fpga_km_row_dot's, so the threads change no bits.
 * Static inline: one copy per kernel, as HLS wants. */
#ifndef TANDEM_FPGA_DEC_MAT_H
#define TANDEM_FPGA_DEC_MAT_H
#include "fpga/kernels/dec_layout.h"
#include "fpga/kernels/dec_math.h"
#include "fpga/kernels/kernel.h"

/* One activation vector's group scales (fpga_km_act_quant's). */
#define FPGA_DEC_XS_LEN (FPGA_DEC_MAX_K / FPGA_DEC_MIN_GROUP + 1)

typedef struct fpga_kd_mat_job {
    uint8_t *const *ch; /* the 32 channels */
    const fpga_dec_mat *m;
    uint64_t off;                 /* the matrix's offset in every channel */
    uint32_t nv, agroup;          /* vectors; activation group */
    int8_t (*xq)[FPGA_DEC_MAX_K]; /* read only (C has no const for them without casts) */
    float (*xs)[FPGA_DEC_XS_LEN];
    float *const *y; /* y[v]: vector v's outputs, m->rows of them */
} fpga_kd_mat_job;

/* Channel ch's engine: its rows applied to every vector, one output a cycle (a perfect loop nest
 * that HLS flattens into one pipeline: a decode step's rows, a batch's or a prefill chunk's
 * vectors of a row after another). */
static inline void fpga_kd_mat_chan_run(const fpga_kd_mat_job *j, uint32_t ch)
{
    const fpga_dec_mat *m = j->m;
    const uint32_t n = fpga_dec_rows_in(m, ch), nv = j->nv;
    if (!n) return;
    const uint8_t *base = j->ch[ch] + j->off;
    const uint8_t *sc = base + fpga_dec_scale_off(m, n);
    const uint64_t r0 = (uint64_t)ch * m->rpc;
    for (uint32_t r = 0; r < n; r++) {
#pragma HLS LOOP_FLATTEN
        for (uint32_t v = 0; v < nv; v++) {
#pragma HLS PIPELINE II = 1
            j->y[v][r0 + r] =
                fpga_km_row_dot(base + (uint64_t)r * m->row_bytes, sc + (uint64_t)r * m->srow_bytes,
                                m->bits, m->group, m->k, j->xq[v], j->xs[v], j->agroup);
        }
    }
}

#ifndef __SYNTHESIS__
/* The same as an fpga_k_parallel iteration (the emulator's threads). */
static inline void fpga_kd_mat_chan(void *ctx, uint32_t ch)
{
    fpga_kd_mat_chan_run(ctx, ch);
}
#endif

/* y[v] = M x_v for v < nv (x_v quantized in xq[v] / xs[v]) with each channel's read, one
 * command; y_hbm: the outputs lie in HBM (the logits), each engine's slice of each a write
 * command. The compute cycles and the phase's stalls are the caller's (its MAC array). */
static inline void fpga_kd_mat_apply(uint8_t *const *ch, const fpga_dec_mat *m, uint64_t off,
                                     uint32_t nv, int8_t (*xq)[FPGA_DEC_MAX_K],
                                     float (*xs)[FPGA_DEC_XS_LEN], uint32_t agroup, float *const *y,
                                     int y_hbm)
{
    uint64_t bytes = 0;
    for (uint32_t c = 0; c < FPGA_DEC_CH; c++) {
        uint32_t n = fpga_dec_rows_in(m, c);
        if (!n) continue;
        fpga_k_read(ch[c] + off, fpga_dec_stream_bytes(m, n));
        bytes += fpga_dec_stream_bytes(m, n);
        if (y_hbm)
            for (uint32_t v = 0; v < nv; v++) fpga_k_write(y[v] + (uint64_t)c * m->rpc, 4ull * n);
    }
    fpga_kd_mat_job j = {
        .ch = ch, .m = m, .off = off, .nv = nv, .agroup = agroup, .xq = xq, .xs = xs, .y = y};
#ifdef __SYNTHESIS__
    (void)bytes;
    for (uint32_t c = 0; c < FPGA_DEC_CH; c++) {
#pragma HLS UNROLL
        fpga_kd_mat_chan_run(&j, c);
    }
#else
    /* the work: the weights read once a vector (a chunk's T rows are T times a step's MACs) */
    fpga_k_parallel(FPGA_DEC_CH, fpga_kd_mat_chan, &j, bytes * nv);
#endif
}

#endif

/* fpga/quant.h — how the weight image is quantized: the settings, and the per-matrix
 * algorithms the image builder (fpga/image.c) runs.
 *
 * Settings (fpga_quant_opts) come from accel_opts.weight_bits and, for tuning, a spec string
 * (the TANDEM_FPGA_QUANT environment variable), "key=value,..." with keys
 *   wbits=8|4       layer matrices: int8 per-row scales, or int4 per-group fp16 scales; resets
 *                   every other setting to that width's defaults (so it goes first)
 *   wgroup=N        int4 group along K (even, >= 8)
 *   head=8|4        lm_head bits (default 8: as GPTQ/AWQ keep the head at higher precision)
 *   hgroup=N        lm_head int4 group
 *   agroup=N        activation quantization group along K (0: one scale per token)
 *   qint8=0|1       attention q quantized per head to int8 (q.k in int32)
 *   smooth=off|A|search  SmoothQuant migration strength alpha in [0,1], or searched per matrix
 *                   over a grid by the error of the simulated kernel on calibration inputs
 *   clip=0|1        error-minimising scales: per row / group, the clipping ratio that
 *                   minimises the activation-weighted squared error (AWQ/GPTQ-style search)
 *   gptq=0|1|2      GPTQ error feedback (Frantar et al. 2022) with the calibration Hessian;
 *                   2: in act-order (columns by decreasing E[x^2], static group scales)
 *   calib=SxT       S sequences of T tokens sampled from the model itself (seeded) through the
 *                   CPU backend; 0 turns calibration off (smooth, weighted clip, gptq need it)
 *   seed=N          calibration sampling seed
 * The canonical string of the settings (fpga_quant_opts_str) is part of the image cache key.
 *
 * Threads: pure functions over caller memory; any thread. */
#ifndef TANDEM_FPGA_QUANT_H
#define TANDEM_FPGA_QUANT_H
#include <stddef.h>
#include <stdint.h>

typedef struct fpga_quant_opts {
    int hidden; /* the model's width, which the defaults depend on */
    int wbits, wgroup, head_bits, head_group, agroup, qint8;
    int smooth_mode; /* 0 off, 1 fixed alpha, 2 search */
    float alpha;
    int clip, gptq;
    int calib_seqs, calib_len;
    uint64_t seed;
} fpga_quant_opts;

/* The defaults for weight_bits 8 or 4 and a model of width `hidden` (the best settings
 * measured on stories260K, fpga/QUANT.md; groups scale with the width: activations in groups of
 * hidden/8 within [8, 128], int4 weights in groups of hidden/2 within [32, 128], so a 4096-wide
 * model gets the usual 128). */
void fpga_quant_opts_default(fpga_quant_opts *q, int weight_bits, int hidden);
/* Applies a spec over q. 0, or -1 with a message naming the bad key. */
int fpga_quant_opts_parse(fpga_quant_opts *q, const char *spec, char *err, size_t errlen);
/* Canonical text of every setting (for the cache key and logs). */
void fpga_quant_opts_str(const fpga_quant_opts *q, char *out, size_t n);

/* A quantized matrix before packing: rows x k values (int8: -127..127; int4: -8..7) and
 * scales (one per row, or one per group already rounded to fp16). group 0: per row (int8). */
typedef struct fpga_qmat {
    int rows, k, bits, group, ngroups;
    int grouped;   /* fp16 scales per group (the layout's group != 0), else one fp32 per row */
    int8_t *q;     /* rows * k */
    float *scale;  /* rows * ngroups (ngroups = 1 for int8) */
} fpga_qmat;

int fpga_qmat_init(fpga_qmat *m, int rows, int k, int bits, int group);
void fpga_qmat_free(fpga_qmat *m);

/* Quantizes w (rows x k, row-major). h: the K x K calibration Hessian sum x x^T of the inputs
 * (double; NULL: none); clip: search the clipping ratio per row/group (weighted by diag(h)
 * when given); gptq: GPTQ error feedback (needs h). w is not modified. 0, or -1 out of memory. */
int fpga_quant_matrix(const float *w, const double *h, int clip, int gptq, fpga_qmat *out);

/* Packs row r of a quantized matrix as the kernel reads it (dec_layout.h): values into
 * vals (k bytes, or k/2 for int4) and scales into sc (fp32, or fp16 per group). */
void fpga_qmat_pack_row(const fpga_qmat *m, int r, uint8_t *vals, uint8_t *sc);

/* Output error of the kernel's product on calibration inputs: x (n x k, float) times mul (may
 * be NULL) quantized with agroup, against the float reference y_ref (n x rows). Returns the sum
 * of squared errors. Scratch is allocated inside; -1 when out of memory. */
double fpga_qmat_sim_error(const fpga_qmat *m, const float *x, const float *mul, int n, int agroup,
                           const float *y_ref);

#endif

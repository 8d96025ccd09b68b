/* fpga/calib.h — what the weight image's calibration runs on, handed in by whoever opens a card.
 *
 * Calibration (fpga/image.c) needs the model's own text and each quantized matrix's float input
 * as the kernel will see it: a float reference forward. fpga/ names no other backend, so it does
 * not call one: the composition root (devices/) hands the CPU reference's two entries in
 * (cpu/calib.h says what they compute), and asserts at compile time that its projection order
 * is the card's FPGA_DEC_QKV .. FPGA_DEC_LM (fpga/kernels/dec_layout.h).
 *
 * Without a reference (NULL) an image can only be built with calibration off
 * (TANDEM_FPGA_QUANT=calib=0): asking for it otherwise is an error, never a silent change of
 * the quantized weights. */
#ifndef TANDEM_FPGA_CALIB_H
#define TANDEM_FPGA_CALIB_H
#include "model/ckpt/model.h"
#include <stddef.h>
#include <stdint.h>

/* x: (T, K) inputs of matrix `mat` (FPGA_DEC_QKV .. FPGA_DEC_LM of dec_layout.h) of `layer`
 * (n_layers for the LM head), valid during the call. A non-zero return stops the run. */
typedef int (*fpga_calib_fn)(void *ctx, int layer, int mat, const float *x, int T, int K);

typedef struct fpga_calib_ref {
    /* Samples n_seqs x len ids into ids with seed. 0, or -1 with a message. */
    int (*ids)(const model *m, int n_seqs, int len, uint64_t seed, int32_t *ids, char *err,
               size_t errlen);
    /* Runs the float forward over n_seqs sequences of len ids, calling fn with each matrix's
     * input. 0, fn's status, or -1 out of memory. */
    int (*run)(const model *m, const int32_t *ids, int n_seqs, int len, fpga_calib_fn fn,
               void *ctx);
} fpga_calib_ref;

#endif

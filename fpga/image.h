/* fpga/image.h — the card's weight image: a checkpoint quantized into the layout of
 * fpga/kernels/dec_layout.h (descriptor, per-channel slices of every matrix with their scales,
 * per-layer fp32 vectors), built on the host at model load and uploaded once per card.
 *
 * The image is 32 channel sections of layout.image_bytes each, channel c at c * image_bytes;
 * section c is what goes to the bottom of bank BO c. Building it runs the calibration and the
 * quantizers of fpga/quant.h (seconds for stories260K; minutes to hours for a 7B model with
 * calibration on, which is why fpga/image_cache.h keeps it on disk).
 *
 * Threads: the caller's (plus a calibration pool); the model is only read. */
#ifndef TANDEM_FPGA_IMAGE_H
#define TANDEM_FPGA_IMAGE_H
#include "fpga/calib.h"
#include "fpga/kernels/dec_layout.h"
#include "fpga/quant.h"
#include "model/ckpt/model.h"
#include <stddef.h>

/* Bumped whenever the builder's output for the same inputs changes (an algorithm or layout
 * change): it is part of the image cache key. */
#define FPGA_IMAGE_BUILDER_VERSION 1

/* The descriptor for model m with settings q. 0, or -1 with a message when the card cannot run
 * this model (a shape past the kernel's bounds, sliding-window attention). */
int fpga_image_desc(const model *m, const fpga_quant_opts *q, fpga_dec_desc *d, char *err,
                    size_t errlen);
/* The same from a configuration alone (tools pricing shapes they have no checkpoint of). */
int fpga_image_desc_cfg(const model_config *c, const fpga_quant_opts *q, fpga_dec_desc *d,
                        char *err, size_t errlen);

/* What a calibrated build of a model of shape c costs the host, an estimate in units of about a
 * multiply-add: per quantized matrix of rows x K, rows x K x (K + 256 tokens x 10 strengths) —
 * GPTQ's column updates (rows x K^2 / 2 MACs, each dearer than a MAC in its scalar loop) and the
 * smoothing search's simulated products — the LM head's vocabulary rows included; the Cholesky
 * (K^3), the Hessian and the sampling are left out. Fitted to two builds on one core of the
 * development VM, within 1.6x: stories15M's shape 4.4e10 in ~40 s, the hand-over bench's model
 * 2.3e11 in ~5.5 minutes (fpga/QUANT.md). Pure. Past FPGA_IMAGE_CALIB_MAX_COST (about a minute) a
 * card's default is no calibration (fpga/backend.c): stories260K and stories15M's shape calibrate;
 * a small model with Llama-3's 128K vocabulary (5.5 minutes), SmolLM-135M's or a 7B shape do not.
 */
double fpga_image_calib_cost(const model_config *c);
#define FPGA_IMAGE_CALIB_MAX_COST 6e10

/* What the builder chose, for logs and the quality report. */
typedef struct fpga_image_report {
    int calib_tokens;
    float alpha[FPGA_DEC_MAX_LAYERS + 1][FPGA_DEC_NMAT]; /* smoothing strength (-1: none) */
    double err_before[FPGA_DEC_NMAT], err_after[FPGA_DEC_NMAT]; /* simulated output SSE:
                                                           no smoothing vs. chosen */
} fpga_image_report;

/* Builds the image for desc d (from fpga_image_desc) into out, FPGA_DEC_CH * image_bytes bytes
 * that the caller zeroed. ref: the float reference calibration runs on (fpga/calib.h; may be
 * NULL when q turns calibration off). rep may be NULL. 0, or -1 with a message. */
int fpga_image_build(const model *m, const fpga_quant_opts *q, const fpga_calib_ref *ref,
                     const fpga_dec_desc *d, uint8_t *out, fpga_image_report *rep, char *err,
                     size_t errlen);

#endif

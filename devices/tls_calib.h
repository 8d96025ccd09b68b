/* devices/tls_calib.h — AsyncTLS's offline channel calibration (`tandem calibrate-channels`):
 * the CPU reference's float forward over self-generated calibration text (cpu/calib.h: the same
 * sampling the card's weight calibration uses), each layer's post-RoPE queries and keys into
 * sparse/tls.h's importance accumulator (mean |q * k| per channel, max over the GQA group), the
 * r most important channels per (layer, KV head) out as a model/ckpt/tls_channels.h sidecar.
 *
 * Here because it joins two rooms (cpu/ runs the forward, sparse/ defines the statistic) and
 * daemon/ may include neither.
 *
 * Threads: runs on the caller's thread (a pool of workers inside). Errors: 0, or -1 with a
 * message in err. */
#ifndef TANDEM_DEVICES_TLS_CALIB_H
#define TANDEM_DEVICES_TLS_CALIB_H
#include "model/ckpt/model.h"
#include "model/ckpt/tls_channels.h"
#include <stddef.h>
#include <stdint.h>

typedef struct devices_tls_calib_opts {
    int n_seqs;    /* calibration sequences; default 8 (the card's weight calibration's) */
    int len;       /* tokens each; default 256 */
    int channels;  /* r; default 32 (AsyncTLS on GQA models), capped at head_dim */
    uint64_t seed; /* sampling seed; default 1 */
    const int32_t *ids; /* optional: n_seqs x len token ids to run instead of sampling them
                           (text of the caller's choice, as Double Sparsity calibrates on
                           pile-val); each < the vocabulary */
} devices_tls_calib_opts;

void devices_tls_calib_opts_default(devices_tls_calib_opts *o);
/* Fills out (model_channels_free it). */
int devices_tls_calibrate(const model *m, const devices_tls_calib_opts *o, model_channels *out,
                          char *err, size_t errlen);

#endif

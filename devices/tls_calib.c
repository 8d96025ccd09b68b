/* devices/tls_calib.c — channel calibration for AsyncTLS (see tls_calib.h). */
#include "devices/tls_calib.h"
#include "cpu/calib.h"
#include "sparse/tls.h"
#include <stdio.h>
#include <stdlib.h>

void devices_tls_calib_opts_default(devices_tls_calib_opts *o)
{
    *o = (devices_tls_calib_opts){.n_seqs = 8, .len = 256, .channels = 32, .seed = 1};
}

static int on_qk(void *ctx, int layer, const float *q, const float *k, int T)
{
    sparse_tls_calib_add(ctx, layer, q, k, T);
    return 0;
}

int devices_tls_calibrate(const model *m, const devices_tls_calib_opts *o, model_channels *out,
                          char *err, size_t errlen)
{
    const model_config *c = &m->cfg;
    int r = o->channels < c->head_dim ? o->channels : c->head_dim - c->head_dim % 2;
    if (o->n_seqs < 1 || o->n_seqs > 4096 || o->len < 2 || o->len > 65536 || r < 2 || r % 2) {
        snprintf(err, errlen, "calibrate-channels: seqs 1..4096, len 2..65536, channels even >= 2");
        return -1;
    }
    if ((int64_t)o->len > model_context_limit(c)) {
        snprintf(err, errlen, "calibrate-channels: len %d above the model's context %d", o->len,
                 model_context_limit(c));
        return -1;
    }
    sparse_tls_calib *acc = sparse_tls_calib_new(c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)o->n_seqs * o->len);
    uint16_t *idx = malloc(sizeof(uint16_t) * (size_t)c->n_layers * c->n_kv_heads * r);
    int rc = -1;
    if (!acc || !ids || !idx) {
        snprintf(err, errlen, "calibrate-channels: out of memory or a shape out of bounds");
        goto out;
    }
    if (o->ids) {
        for (size_t i = 0; i < (size_t)o->n_seqs * o->len; i++) {
            if (o->ids[i] < 0 || o->ids[i] >= c->vocab) {
                snprintf(err, errlen, "calibrate-channels: id %d at %zu outside the vocabulary",
                         o->ids[i], i);
                goto out;
            }
            ids[i] = o->ids[i];
        }
    } else if (cpu_calib_ids(m, o->n_seqs, o->len, o->seed, ids, err, errlen)) {
        goto out;
    }
    if (cpu_calib_run_qk(m, ids, o->n_seqs, o->len, on_qk, acc)) {
        snprintf(err, errlen, "calibrate-channels: the forward ran out of memory");
        goto out;
    }
    if (sparse_tls_calib_select(acc, r, idx)) {
        snprintf(err, errlen, "calibrate-channels: channel selection failed");
        goto out;
    }
    *out = (model_channels){.n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads,
                            .head_dim = c->head_dim, .r = r,
                            .calib_tokens = (uint32_t)((size_t)o->n_seqs * o->len), .idx = idx};
    idx = NULL;
    rc = 0;
out:
    sparse_tls_calib_free(acc);
    free(ids);
    free(idx);
    return rc;
}

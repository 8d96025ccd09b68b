/* cpu/backend.c — the CPU device: the reference forward pass behind the accel interface.
 *
 * Memory plan: weights stay in the model's read-only mappings (never copied); the KV cache is
 * float32 in fixed-size blocks of the device's pool (cpu/kv_cache.h: CPU_KV_BLOCK positions of
 * every layer per block), each sequence a block table over them, reserved up front for its
 * capacity; every reader and writer of a sequence's KV goes through its table, so blocks can be
 * shared (accel_seq_fork) and copied on write. Per-call activations live in scratch buffers that
 * grow to the largest batch seen (the device is driven by one thread at a time, see accel.h).
 *
 * One forward pass serves prefill and batched decode alike: a batch is T tokens, each with its
 * own sequence and position. Projections run over all T tokens at once (parallel over weight
 * rows), attention per (token, head) pair (parallel over pairs). Because every op has a fixed
 * arithmetic order (cpu/ops.h), a token's result does not depend on what else is in the batch:
 * prefill of n tokens then decode gives the same bits as one prefill of the whole sequence. */
#include "cpu/backend.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "cpu/kv_quant.h"
#include "cpu/flex.h"
#include "cpu/sparse_idx.h"
#include "cpu/kv_cache.h"
#include "cpu/kv_import.h"
#include "cpu/tls.h"
#include "model/ckpt/tls_channels.h"
#include "model/sample/sample.h"
#include "scheduler/accel_impl.h"
#include "sparse/tls.h"
#include "sparse/tls_pipe.h"
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Dense prefill runs in sub-batches of this many tokens to bound scratch memory (activations of
 * an 8B-shaped model: 512 tokens * 14336 * 4 B = 29 MB per FFN buffer). A sparse chunk goes
 * through each layer whole (its index needs every query of the chunk and every key before it). */
#define PREFILL_BATCH 512

typedef struct cpu_seq {
    struct accel_seq base;
    cpu_kv_table kv; /* ceil(capacity / CPU_KV_BLOCK) blocks of the device's kv pool */
    sparse_tls_seq *tls; /* AsyncTLS key summaries (kept once sparse decode was asked), else NULL */
    int tls_on;           /* decodes sparse, with tls_p (accel_seq_decode_sparse) */
    sparse_tls_params tls_p;
    _Atomic int64_t tls_read, tls_total, tls_steps; /* since it was turned on */
    /* tls_p.stagger: AsyncTLS's staggered selection (sparse/tls_pipe.h), made at the first
     * staggered step; pipe_at[l]: the position layer l's state expects next (-1: none; another
     * position restarts it: a truncation, an import, a prefill, a fork's first step) */
    sparse_tls_pipe *pipe;
    int *pipe_at;
    float *split_x; /* a layer-split chunk's residual stream (split_n x hidden), else NULL */
} cpu_seq;

typedef struct cpu_dev {
    struct accel_dev base;
    cpu_pool *pool;
    cpu_kv_pool kv; /* every sequence's KV blocks */
    int kv_ready;   /* kv initialized */
    float *inv_freq; /* head_dim/2, for the non-dynamic rope types */
    /* scratch, grown on demand */
    size_t cap_tokens, cap_keys;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2, *cs, *sn, *scores;
    float *gk, *gv; /* a sparse chunk's keys and values gathered from the cache (cap_gather rows) */
    size_t cap_gather;
    uint8_t *qk, *qv;
    uint16_t *sk, *sv;
    /* AsyncTLS sparse decode (accel_opts.decode_sparse): parameters, the channel file, per-thread
     * selection scratch for cap_tls_keys keys, and what decode read (keys attended / keys) */
    int tls_on;    /* new sequences decode sparse (the device's option) */
    int tls_avail; /* the channel file is loaded: sequences may be turned on */
    sparse_tls_params tls;
    model_channels ch;
    size_t cap_tls_keys, tls_fn, tls_in;
    float *tls_f;
    int32_t *tls_i;
    _Atomic int64_t tls_read, tls_total;
} cpu_dev;

static int grow(float **p, size_t n)
{
    float *np = realloc(*p, n * sizeof(float));
    if (!np) return -1;
    *p = np;
    return 0;
}

static int ensure_scratch(cpu_dev *d, size_t T, size_t max_keys)
{
    const model_config *c = &d->base.m->cfg;
    if (T > d->cap_tokens) {
        size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
        size_t h = (size_t)c->hidden, hd2 = c->head_dim / 2;
        size_t wide = h > qd ? h : qd;
        if (grow(&d->x, T * h) || grow(&d->xb, T * wide) || grow(&d->q, T * qd) ||
            grow(&d->k, T * kvd) || grow(&d->v, T * kvd) || grow(&d->att, T * qd) ||
            grow(&d->hb, T * c->intermediate) || grow(&d->hb2, T * c->intermediate) ||
            grow(&d->cs, T * hd2) || grow(&d->sn, T * hd2))
            return -1;
        size_t qbytes = proto_kv_value_bytes(PROTO_KV_INT8, (int)T, c->n_kv_heads, c->head_dim);
        size_t nsc = proto_kv_scale_count(PROTO_KV_INT4, (int)T, c->n_kv_heads, c->head_dim);
        uint8_t *a = realloc(d->qk, qbytes), *b = a ? realloc(d->qv, qbytes) : NULL;
        if (a) d->qk = a;
        if (b) d->qv = b;
        uint16_t *e = realloc(d->sk, nsc * 2), *f = e ? realloc(d->sv, nsc * 2) : NULL;
        if (e) d->sk = e;
        if (f) d->sv = f;
        if (!a || !b || !e || !f) return -1;
        d->cap_tokens = T;
    }
    if (max_keys > d->cap_keys) {
        if (grow(&d->scores, max_keys * cpu_pool_threads(d->pool))) return -1;
        d->cap_keys = max_keys;
    }
    if (d->tls_avail && max_keys > d->cap_tls_keys) {
        size_t th = cpu_pool_threads(d->pool);
        /* the staggered pipeline's scratch is a superset of one selection's */
        size_t fn = sparse_tls_pipe_work_floats(&d->tls, c->head_dim, (int)max_keys);
        size_t in = sparse_tls_pipe_work_ints(&d->tls, (int)max_keys) + max_keys; /* + positions */
        float *f = realloc(d->tls_f, th * fn * sizeof(float));
        if (f) d->tls_f = f;
        int32_t *i = f ? realloc(d->tls_i, th * in * sizeof(int32_t)) : NULL;
        if (i) d->tls_i = i;
        if (!f || !i) return -1;
        d->tls_fn = fn;
        d->tls_in = in;
        d->cap_tls_keys = max_keys;
    }
    return 0;
}

/* ---------------------------------------------------------------- the forward pass */

typedef struct batch {
    int T;
    const int32_t *ids;
    cpu_seq *const *seq; /* per token */
    const int *pos;      /* per token */
    int rope_len;        /* dynamic NTK: the sequence length of the whole call (a prefill split
                            in sub-batches rotates every token with the base of the call's end,
                            as transformers does); 0: each sequence's last position here + 1 */
    int decode;          /* a decode step: AsyncTLS sparse attention where it is on */
} batch;

struct att_ctx {
    cpu_dev *d;
    const batch *b;
    int layer;
};

static void att_range(void *vctx, int begin, int end, int thread)
{
    struct att_ctx *a = vctx;
    cpu_dev *d = a->d;
    const model_config *c = &d->base.m->cfg;
    int hd = c->head_dim, kvd = c->n_kv_heads * hd, group = c->n_heads / c->n_kv_heads;
    int qd = c->n_heads * hd;
    float scale = (float)pow(hd, -0.5);
    float *scores = d->scores + (size_t)thread * d->cap_keys;
    for (int i = begin; i < end; i++) {
        int t = i / c->n_heads, h = i % c->n_heads;
        cpu_seq *s = a->b->seq[t];
        int pos = a->b->pos[t];
        int first = 0;
        if (c->sliding_window > 0 && pos + 1 > c->sliding_window) first = pos + 1 - c->sliding_window;
        size_t off = (size_t)a->layer * d->kv.layer_floats + (size_t)(h / group) * hd;
        cpu_attend_blocks(d->att + (size_t)t * qd + (size_t)h * hd,
                          d->q + (size_t)t * qd + (size_t)h * hd, d->kv.k, d->kv.v, s->kv.blocks,
                          CPU_KV_BLOCK, off, first, pos + 1 - first, kvd, hd, scale, scores);
    }
}

/* AsyncTLS decode attention per (token, KV head): the selection once for the group, then each
 * of its query heads over the kept tokens (sparse/tls.h, cpu/tls.h); dense where the rules say. */
static void att_tls_range(void *vctx, int begin, int end, int thread)
{
    struct att_ctx *a = vctx;
    cpu_dev *d = a->d;
    const model_config *c = &d->base.m->cfg;
    int hd = c->head_dim, kvd = c->n_kv_heads * hd, G = c->n_heads / c->n_kv_heads;
    int qd = c->n_heads * hd;
    float scale = (float)pow(hd, -0.5);
    float *scores = d->scores + (size_t)thread * d->cap_keys;
    float *fw = d->tls_f + (size_t)thread * d->tls_fn;
    int32_t *iw = d->tls_i + (size_t)thread * d->tls_in;
    int32_t *pos = iw + (d->tls_in - d->cap_tls_keys);
    int64_t read = 0, total = 0;
    for (int i = begin; i < end; i++) {
        int t = i / c->n_kv_heads, g = i % c->n_kv_heads;
        cpu_seq *s = a->b->seq[t];
        int n = a->b->pos[t] + 1;
        size_t off = (size_t)a->layer * d->kv.layer_floats + (size_t)g * hd;
        const float *q = d->q + (size_t)t * qd + (size_t)g * G * hd;
        float *out = d->att + (size_t)t * qd + (size_t)g * G * hd;
        int m = n;
        if (!s->tls || !s->tls_on || sparse_tls_dense(&s->tls_p, a->layer, n)) {
            for (int h = 0; h < G; h++)
                cpu_attend_blocks(out + (size_t)h * hd, q + (size_t)h * hd, d->kv.k, d->kv.v,
                                  s->kv.blocks, CPU_KV_BLOCK, off, 0, n, kvd, hd, scale, scores);
        } else {
            int moved;
            if (s->tls_p.stagger && s->pipe)
                m = sparse_tls_pipe_group_step(s->pipe, &s->tls_p, s->tls, a->layer, g, q, G, hd,
                                               n, pos, fw, iw, &moved);
            else
                m = sparse_tls_select(&s->tls_p, s->tls, a->layer, g, q, G, hd, n, pos, fw, iw,
                                      NULL);
            for (int h = 0; h < G; h++)
                cpu_tls_attend(out + (size_t)h * hd, q + (size_t)h * hd, d->kv.k, d->kv.v,
                               s->kv.blocks, CPU_KV_BLOCK, off, pos, m, kvd, hd, scale, scores);
        }
        if (s->tls_on) {
            atomic_fetch_add(&s->tls_read, m);
            atomic_fetch_add(&s->tls_total, n);
            if (a->layer == 0 && g == 0) atomic_fetch_add(&s->tls_steps, 1);
        }
        read += m;
        total += n;
    }
    atomic_fetch_add(&d->tls_read, read);
    atomic_fetch_add(&d->tls_total, total);
}

/* Before layer l of a decode batch: each staggered sequence's pipeline made (or remade for new
 * budgets) and layer l's state restarted unless it stepped at the position before. */
static int tls_pipe_layer(cpu_dev *d, const batch *b, int l)
{
    const model_config *c = &d->base.m->cfg;
    for (int t = 0; t < b->T; t++) {
        cpu_seq *s = b->seq[t];
        if (!s->tls || !s->tls_on || !s->tls_p.stagger) continue;
        if (s->pipe && s->pipe->block_budget != s->tls_p.block_budget) {
            sparse_tls_pipe_free(s->pipe);
            s->pipe = NULL;
        }
        if (!s->pipe) {
            if (!s->pipe_at && !(s->pipe_at = malloc(sizeof(int) * c->n_layers)))
                return ACCEL_ERR_NOMEM;
            s->pipe = sparse_tls_pipe_new(&s->tls_p, c->n_layers, c->n_kv_heads, s->base.capacity);
            if (!s->pipe) return ACCEL_ERR_NOMEM;
            for (int i = 0; i < c->n_layers; i++) s->pipe_at[i] = -1;
        }
        if (s->pipe_at[l] != b->pos[t]) sparse_tls_pipe_reset_layer(s->pipe, l);
        s->pipe_at[l] = b->pos[t] + 1;
    }
    return ACCEL_OK;
}

/* Every layer's staggered state forgotten (the next step of each selects synchronously). */
static void tls_pipe_forget(cpu_seq *s)
{
    for (int l = 0; s->pipe && l < s->pipe->n_layers; l++) s->pipe_at[l] = -1;
}

/* Re-records positions [from, to) of every layer into s's summaries from its KV rows (after a
 * fork or a truncation cut a level-1 block: its max / min restart at the block's first
 * position). */
static void tls_rebuild(cpu_dev *d, cpu_seq *s, int from, int to)
{
    for (int l = 0; l < d->base.m->cfg.n_layers; l++)
        for (int p = from; p < to; p++)
            sparse_tls_put(s->tls, l, p, cpu_kv_row(d->kv.k, &d->kv, &s->kv, l, p));
}

/* Quantizes and hands out this layer's K/V of a single-sequence batch. */
static int export_layer(cpu_dev *d, const batch *b, int layer, const accel_kv_sink *sink)
{
    const model_config *c = &d->base.m->cfg;
    enum proto_kv_dtype dt = d->base.opts.kv_dtype ? d->base.opts.kv_dtype : PROTO_KV_INT8;
    if (dt == PROTO_KV_INT8) {
        cpu_kv_quantize_int8(d->k, b->T, c->n_kv_heads, c->head_dim, d->qk, d->sk);
        cpu_kv_quantize_int8(d->v, b->T, c->n_kv_heads, c->head_dim, d->qv, d->sv);
    } else {
        cpu_kv_quantize_int4(d->k, b->T, c->n_kv_heads, c->head_dim, d->qk, d->sk);
        cpu_kv_quantize_int4(d->v, b->T, c->n_kv_heads, c->head_dim, d->qv, d->sv);
    }
    proto_kv_layer chunk = {
        .layer = layer, .pos0 = b->pos[0], .n_tokens = b->T, .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim, .dtype = dt, .k = d->qk, .v = d->qv, .k_scale = d->sk,
        .v_scale = d->sv,
    };
    return sink->layer(sink->ctx, &chunk);
}

/* A sparse chunk's attention in layer l: the batch is one sequence's positions pos0 .. pos0 +
 * T - 1 (the caller checked), whose K/V rows were just stored. Its keys are every position
 * before and in the chunk: for a whole prompt (pos0 0) this layer's rows still in d->k / d->v,
 * else gathered from the sequence's blocks (the same floats the cache holds). */
static int sparse_layer(cpu_dev *d, const batch *b, int l, const sparse_params *sp,
                        accel_sparse_report *rep)
{
    const model_config *c = &d->base.m->cfg;
    const int T = b->T, hd = c->head_dim, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    const int pos0 = b->pos[0], nk = pos0 + T;
    const float *k = d->k, *v = d->v;
    if (pos0 > 0) {
        if ((size_t)nk > d->cap_gather) {
            if (grow(&d->gk, (size_t)nk * kvd) || grow(&d->gv, (size_t)nk * kvd)) return ACCEL_ERR_NOMEM;
            d->cap_gather = (size_t)nk;
        }
        const cpu_kv_table *kt = &b->seq[0]->kv;
        for (int p = 0; p < nk; p++) {
            memcpy(d->gk + (size_t)p * kvd, cpu_kv_row(d->kv.k, &d->kv, kt, l, p), kvd * sizeof(float));
            memcpy(d->gv + (size_t)p * kvd, cpu_kv_row(d->kv.v, &d->kv, kt, l, p), kvd * sizeof(float));
        }
        k = d->gk;
        v = d->gv;
    }
    cpu_flex_qkv x = {nk, c->n_heads, c->n_kv_heads, hd, d->q, (size_t)qd, k, v, (size_t)kvd, pos0};
    int st, computed_dense = 0;
    int64_t computed, causal;
    if (sp->mode == SPARSE_MODE_FLEX) {
        cpu_flex_report fr;
        st = cpu_flex_attention(d->pool, &sp->flex, &x, d->att, qd, &fr, NULL);
        computed_dense = fr.dense;
        computed = fr.blocks_computed;
        causal = fr.blocks_causal;
    } else {
        cpu_flex_index *ix;
        st = sp->mode == SPARSE_MODE_XATTN ? cpu_xattn_index_build(d->pool, sp, &x, 0, &ix, NULL)
                                           : cpu_trishape_index_build(sp, &x, &ix);
        if (st) return st == CPU_FLEX_ERR_NOMEM ? ACCEL_ERR_NOMEM : ACCEL_ERR_INVALID;
        st = cpu_flex_sparse_attention(d->pool, &x, ix, 0, 0, d->att, qd);
        computed = ix->nnz;
        causal = (int64_t)c->n_heads * cpu_flex_index_causal(ix);
        cpu_flex_index_free(ix);
    }
    if (st) return st == CPU_FLEX_ERR_NOMEM ? ACCEL_ERR_NOMEM : ACCEL_ERR_INVALID;
    if (rep) {
        rep->layers_sparse += !computed_dense;
        rep->blocks_computed += computed;
        rep->blocks_causal += causal;
    }
    return ACCEL_OK;
}

/* Runs T tokens through layers [l0, l1) of the model, on the residual stream x (T x hidden:
 * the embeddings written there when l0 is 0). logits: (n_logits, vocab) for the batch rows listed
 * in logit_rows (n_logits of them), or NULL (the caller gives them only with l1 the last). */
static int forward_layers(cpu_dev *d, const batch *b, float *x, int l0, int l1, float *logits,
                          const int *logit_rows, int n_logits, const accel_kv_sink *sink,
                          const volatile int *cancel, const sparse_params *sp,
                          accel_sparse_report *rep)
{
    const model *m = d->base.m;
    const model_config *c = &m->cfg;
    const int T = b->T, H = c->hidden, hd = c->head_dim, half = hd / 2;
    const int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, I = c->intermediate;
    int max_keys = 0;
    for (int t = 0; t < T; t++)
        if (b->pos[t] + 1 > max_keys) max_keys = b->pos[t] + 1;
    if (ensure_scratch(d, T, max_keys)) return ACCEL_ERR_NOMEM;
    if (!x) x = d->x;
    /* the positions written below into blocks of their own (copy-on-write of shared ones) */
    for (int t = 0; t < T; t++)
        if (cpu_kv_table_prepare(&d->kv, &b->seq[t]->kv, b->pos[t], 1)) return ACCEL_ERR_NOMEM;

    /* rotary tables per token; dynamic NTK scaling depends on each sequence's length in this
     * call (transformers recomputes inv_freq from max(position_ids) + 1) */
    float inv_dyn[512];
    for (int t = 0; t < T; t++) {
        const float *inv = d->inv_freq;
        if (c->rope.type == MODEL_ROPE_DYNAMIC) {
            int seq_len = b->rope_len;
            for (int u = 0; !b->rope_len && u < T; u++)
                if (b->seq[u] == b->seq[t] && b->pos[u] + 1 > seq_len) seq_len = b->pos[u] + 1;
            model_rope_inv_freq(c, seq_len, inv_dyn);
            inv = inv_dyn;
        }
        model_rope_angles(inv, half, b->pos[t], d->cs + (size_t)t * half, d->sn + (size_t)t * half);
    }
    for (int t = 0; l0 == 0 && t < T; t++) model_row_f32(&m->embed, b->ids[t], x + (size_t)t * H);

    for (int l = l0; l < l1; l++) {
        const model_layer *L = &m->layers[l];
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) return ACCEL_ERR_CANCELLED;
        for (int t = 0; t < T; t++)
            cpu_rmsnorm(d->xb + (size_t)t * H, x + (size_t)t * H, &L->attn_norm, H, c->rms_eps);
        cpu_matmul(d->pool, d->q, d->xb, T, &L->wq, &L->bq);
        cpu_matmul(d->pool, d->k, d->xb, T, &L->wk, &L->bk);
        cpu_matmul(d->pool, d->v, d->xb, T, &L->wv, &L->bv);
        for (int t = 0; t < T; t++) {
            const float *cs = d->cs + (size_t)t * half, *sn = d->sn + (size_t)t * half;
            cpu_rope(d->q + (size_t)t * qd, c->n_heads, hd, cs, sn);
            cpu_rope(d->k + (size_t)t * kvd, c->n_kv_heads, hd, cs, sn);
            const cpu_kv_table *kt = &b->seq[t]->kv;
            memcpy(cpu_kv_row(d->kv.k, &d->kv, kt, l, b->pos[t]), d->k + (size_t)t * kvd,
                   kvd * sizeof(float));
            memcpy(cpu_kv_row(d->kv.v, &d->kv, kt, l, b->pos[t]), d->v + (size_t)t * kvd,
                   kvd * sizeof(float));
            if (b->seq[t]->tls) sparse_tls_put(b->seq[t]->tls, l, b->pos[t], d->k + (size_t)t * kvd);
        }
        if (sink) {
            int st = export_layer(d, b, l, sink);
            if (st) return st;
        }
        if (sp) {
            int st = sparse_layer(d, b, l, sp, rep);
            if (st) return st;
        } else if (b->decode && d->tls_avail) {
            int st = tls_pipe_layer(d, b, l);
            if (st) return st;
            struct att_ctx ac = {d, b, l};
            cpu_pool_for(d->pool, T * c->n_kv_heads, 1, att_tls_range, &ac);
        } else {
            struct att_ctx ac = {d, b, l};
            cpu_pool_for(d->pool, T * c->n_heads, max_keys * hd < 4096 ? T * c->n_heads : 1,
                         att_range, &ac);
        }
        cpu_matmul(d->pool, d->xb, d->att, T, &L->wo, NULL);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += d->xb[i];

        for (int t = 0; t < T; t++)
            cpu_rmsnorm(d->xb + (size_t)t * H, x + (size_t)t * H, &L->ffn_norm, H, c->rms_eps);
        cpu_matmul(d->pool, d->hb, d->xb, T, &L->w_gate, NULL);
        cpu_matmul(d->pool, d->hb2, d->xb, T, &L->w_up, NULL);
        cpu_swiglu(d->hb, d->hb2, T * I);
        cpu_matmul(d->pool, d->xb, d->hb, T, &L->w_down, NULL);
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += d->xb[i];
    }
    if (logits && n_logits > 0) {
        for (int i = 0; i < n_logits; i++)
            cpu_rmsnorm(d->xb + (size_t)i * H, x + (size_t)logit_rows[i] * H, &m->norm, H,
                        c->rms_eps);
        cpu_matmul(d->pool, logits, d->xb, n_logits, &m->lm_head, NULL);
    }
    return ACCEL_OK;
}

/* The whole model over T tokens, on the device's scratch residual stream. */
static int forward(cpu_dev *d, const batch *b, float *logits, const int *logit_rows, int n_logits,
                   const accel_kv_sink *sink, const volatile int *cancel,
                   const sparse_params *sp, accel_sparse_report *rep)
{
    return forward_layers(d, b, NULL, 0, d->base.m->cfg.n_layers, logits, logit_rows, n_logits,
                          sink, cancel, sp, rep);
}

/* ---------------------------------------------------------------- accel entries */

/* Whether this sparse chunk runs sparse here (1) or dense (0): the method's CPU reference
 * covers it — a chunk from a block boundary — and the model has no sliding window. The scheduler
 * decided it is sparse (sparse/sparse.h); nothing is decided again here. */
static int sparse_ok(const accel_dev *ad, const accel_prefill_req *r)
{
    const accel_sparse *sp = r->sparse;
    const int len = r->seq->len;
    if (!sp || ad->m->cfg.sliding_window) return 0;
    return len % sparse_block_size(&sp->p) == 0;
}

/* The chunk's n tokens (positions len .. len + n - 1) as one batch through layers [l0, l1):
 * a sparse chunk goes through each layer whole; a layer-split call (accel.h) runs its layers on
 * the sequence's residual stream (s->split_x, taken by the call from layer 0, freed by the one
 * that runs the last layer). The batch's rows are those of whole calls (cpu/ops.h: a token's
 * result does not depend on the batch), so the split gives the whole call's bits. */
static int prefill_one_batch(cpu_dev *d, const accel_prefill_req *r, const sparse_params *sp)
{
    cpu_seq *s = (cpu_seq *)r->seq;
    const model_config *c = &d->base.m->cfg;
    const int n = r->n, len = s->base.len, last = n - 1;
    const int split = r->layers > 0, l0 = split ? r->layer0 : 0;
    const int l1 = split ? r->layer0 + r->layers : c->n_layers, end = l1 == c->n_layers;
    if (split && l0 == 0) {
        free(s->split_x);
        s->split_x = malloc((size_t)n * (size_t)c->hidden * sizeof(float));
        if (!s->split_x) return ACCEL_ERR_NOMEM;
    } else if (split && !s->split_x) {
        return ACCEL_ERR_INVALID;
    }
    int st = ACCEL_ERR_NOMEM;
    int *pos = malloc(n * sizeof *pos), *rows = malloc(n * sizeof *rows);
    cpu_seq **seqs = malloc(n * sizeof *seqs);
    if (pos && rows && seqs) {
        for (int t = 0; t < n; t++) {
            pos[t] = len + t;
            rows[t] = t;
            seqs[t] = s;
        }
        batch b = {n, r->ids, seqs, pos, len + n, 0};
        const int n_out = end && r->logits ? (r->all_logits ? n : 1) : 0;
        st = forward_layers(d, &b, split ? s->split_x : NULL, l0, l1, n_out ? r->logits : NULL,
                            r->all_logits ? rows : &last, n_out, r->kv, r->cancel, sp,
                            r->sparse_report);
    }
    free(pos);
    free(rows);
    free(seqs);
    if (split && (st || end)) {
        free(s->split_x);
        s->split_x = NULL;
    }
    return st;
}

/* A sparse chunk through every layer at once (or the call's layers). */
static int prefill_sparse(cpu_dev *d, const accel_prefill_req *r)
{
    sparse_params p = r->sparse->p;
    /* the scheduler applied FlexPrefill's dense rule (sparse_plan): this chunk is sparse */
    p.flex.dense_below = 0;
    return prefill_one_batch(d, r, &p);
}

static int prefill_blocks(cpu_dev *d, const accel_prefill_req *r);

/* Every block the new positions need first (paged contract: a refusal leaves the sequence as it
 * was), and the blocks past its length given back when the pass fails. */
static int cpu_prefill(accel_dev *ad, const accel_prefill_req *r)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)r->seq;
    if (cpu_kv_table_prepare(&d->kv, &s->kv, s->base.len, r->n)) return ACCEL_ERR_NOMEM;
    int st = prefill_blocks(d, r);
    if (st) cpu_kv_table_shrink(&d->kv, &s->kv, s->base.len);
    return st;
}

static int prefill_blocks(cpu_dev *d, const accel_prefill_req *r)
{
    accel_dev *ad = &d->base;
    cpu_seq *s = (cpu_seq *)r->seq;
    int vocab = ad->m->cfg.vocab;
    if (r->sparse_report) memset(r->sparse_report, 0, sizeof *r->sparse_report);
    if (sparse_ok(ad, r)) {
        int st = prefill_sparse(d, r);
        if (r->sparse_report && r->sparse_report->blocks_causal)
            r->sparse_report->density =
                (double)r->sparse_report->blocks_computed / r->sparse_report->blocks_causal;
        return st;
    }
    if (r->sparse_report) r->sparse_report->density = 1.0;
    if (r->layers > 0) return prefill_one_batch(d, r, NULL); /* layer-split: one batch */
    int pos[PREFILL_BATCH], rows[PREFILL_BATCH];
    cpu_seq *seqs[PREFILL_BATCH];
    for (int i = 0; i < PREFILL_BATCH; i++) seqs[i] = s;
    for (int done = 0; done < r->n;) {
        int T = r->n - done < PREFILL_BATCH ? r->n - done : PREFILL_BATCH;
        for (int t = 0; t < T; t++) {
            pos[t] = s->base.len + done + t;
            rows[t] = t;
        }
        batch b = {T, r->ids + done, seqs, pos, s->base.len + r->n, 0};
        float *out = NULL;
        int n_out = 0;
        if (r->logits && r->all_logits) {
            out = r->logits + (size_t)done * vocab;
            n_out = T;
        } else if (r->logits && done + T == r->n) {
            out = r->logits;
            rows[0] = T - 1;
            n_out = 1;
        }
        int st = forward(d, &b, out, rows, n_out, r->kv, r->cancel, NULL, NULL);
        if (st) return st;
        done += T;
    }
    return ACCEL_OK;
}

static int cpu_decode(accel_dev *ad, int n, accel_seq *const *seqs, const int32_t *ids,
                      float *logits)
{
    cpu_dev *d = (cpu_dev *)ad;
    int *pos = malloc(n * sizeof *pos), *rows = malloc(n * sizeof *rows);
    if (!pos || !rows) {
        free(pos);
        free(rows);
        return ACCEL_ERR_NOMEM;
    }
    int st = ACCEL_OK, ready = 0;
    for (int i = 0; i < n; i++) {
        pos[i] = seqs[i]->len;
        rows[i] = i;
        if (!st && cpu_kv_table_prepare(&d->kv, &((cpu_seq *)seqs[i])->kv, pos[i], 1))
            st = ACCEL_ERR_NOMEM;
        ready += !st;
    }
    batch b = {n, ids, (cpu_seq *const *)seqs, pos, 0, 1};
    if (!st) st = forward(d, &b, logits, rows, n, NULL, NULL, NULL, NULL);
    /* a refused or failed step leaves every sequence as it was */
    for (int i = 0; st && i < ready; i++)
        cpu_kv_table_shrink(&d->kv, &((cpu_seq *)seqs[i])->kv, seqs[i]->len);
    free(pos);
    free(rows);
    return st;
}

/* Imported KV is dequantized into the float32 cache (cpu/kv_import.h, on the device's threads):
 * the CPU then decodes from exactly what the wire carried. */
static int cpu_kv_import(accel_dev *ad, accel_seq *as, const proto_kv_layer *c)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)as;
    /* the run's blocks are taken with layer 0's chunk; a refusal there leaves the sequence as it
     * was (later layers of the run find them taken) */
    if (cpu_kv_table_prepare(&d->kv, &s->kv, c->pos0, c->n_tokens)) return ACCEL_ERR_NOMEM;
    /* accel.c checked the shape; a refusal here is a caller's bug: the length unmoved, the
     * blocks layer 0 took given back */
    if (cpu_kv_import_rows(&d->kv, &s->kv, d->pool, c)) {
        if (c->layer == 0) cpu_kv_table_shrink(&d->kv, &s->kv, as->len);
        return ACCEL_ERR_INVALID;
    }
    for (int i = 0; s->tls && i < c->n_tokens; i++)
        sparse_tls_put(s->tls, c->layer, c->pos0 + i,
                       cpu_kv_row(d->kv.k, &d->kv, &s->kv, c->layer, c->pos0 + i));
    tls_pipe_forget(s);
    return ACCEL_OK;
}

/* A new sequence's AsyncTLS state (its summaries for capacity positions); on failure the
 * sequence, its block table included, is freed: ACCEL_ERR_NOMEM. */
static int seq_tls_new(cpu_dev *d, cpu_seq *s, int capacity)
{
    const model_config *c = &d->base.m->cfg;
    s->tls = sparse_tls_seq_new(c->n_layers, c->n_kv_heads, c->head_dim, d->ch.r,
                                d->tls.block_size, capacity, d->ch.idx);
    if (s->tls) return ACCEL_OK;
    cpu_kv_table_free(&d->kv, &s->kv);
    free(s);
    return ACCEL_ERR_NOMEM;
}

/* No block is taken yet: forward and kv_import take them as the sequence grows. */
static int cpu_seq_new(accel_dev *ad, int capacity, accel_seq **out)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = calloc(1, sizeof *s);
    if (!s || cpu_kv_table_new(&d->kv, capacity, &s->kv)) {
        free(s);
        return ACCEL_ERR_NOMEM;
    }
    if (d->tls_on) {
        if (seq_tls_new(d, s, capacity)) return ACCEL_ERR_NOMEM;
        s->tls_on = 1;
        s->tls_p = d->tls;
    }
    *out = &s->base;
    return ACCEL_OK;
}

/* src's blocks of positions [0, n_tokens) shared, the partial last one copied by whichever side
 * writes into it first (cpu_kv_table_prepare in forward and kv_import). */
static int cpu_seq_fork(accel_dev *ad, accel_seq *asrc, int n_tokens, int capacity,
                        accel_seq **out)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *src = (cpu_seq *)asrc, *s = calloc(1, sizeof *s);
    if (!s || cpu_kv_table_fork(&d->kv, &src->kv, n_tokens, capacity, &s->kv)) {
        free(s);
        return ACCEL_ERR_NOMEM;
    }
    if (src->tls) {
        if (seq_tls_new(d, s, capacity)) return ACCEL_ERR_NOMEM;
        sparse_tls_copy(s->tls, src->tls, n_tokens);
        tls_rebuild(d, s, n_tokens / d->tls.block_size * d->tls.block_size, n_tokens);
        s->tls_on = src->tls_on;
        s->tls_p = src->tls_p;
    }
    *out = &s->base;
    return ACCEL_OK;
}

static void cpu_seq_free(accel_dev *ad, accel_seq *as)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)as;
    cpu_kv_table_free(&d->kv, &s->kv);
    sparse_tls_seq_free(s->tls);
    sparse_tls_pipe_free(s->pipe);
    free(s->pipe_at);
    free(s->split_x);
    free(s);
}

/* A layer-split chunk abandoned (accel.h): its residual stream goes (a failed call's blocks past
 * the length were given back by cpu_prefill; truncate gives back its own). */
static void cpu_split_drop(accel_dev *ad, accel_seq *as)
{
    (void)ad;
    cpu_seq *s = (cpu_seq *)as;
    free(s->split_x);
    s->split_x = NULL;
}

/* Positions past len are forgotten; a level-1 block that len cuts is rebuilt from its rows. */
/* The rows a prefill wrote, quantized as its export did (export_layer over the same floats: the
 * same bytes), in runs of at most PREFILL_BATCH positions. */
static int cpu_kv_export(accel_dev *ad, accel_seq *as, int pos0, int n, const accel_kv_sink *sink)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)as;
    const model_config *c = &ad->m->cfg;
    const int kvd = c->n_kv_heads * c->head_dim;
    int pos[PREFILL_BATCH];
    cpu_seq *seqs[PREFILL_BATCH];
    for (int done = 0; done < n;) {
        int T = n - done < PREFILL_BATCH ? n - done : PREFILL_BATCH;
        if (ensure_scratch(d, T, pos0 + done + T)) return ACCEL_ERR_NOMEM;
        for (int t = 0; t < T; t++) {
            pos[t] = pos0 + done + t;
            seqs[t] = s;
        }
        batch b = {.T = T, .seq = seqs, .pos = pos};
        for (int l = 0; l < c->n_layers; l++) {
            for (int t = 0; t < T; t++) {
                memcpy(d->k + (size_t)t * kvd, cpu_kv_row(d->kv.k, &d->kv, &s->kv, l, pos[t]),
                       kvd * sizeof(float));
                memcpy(d->v + (size_t)t * kvd, cpu_kv_row(d->kv.v, &d->kv, &s->kv, l, pos[t]),
                       kvd * sizeof(float));
            }
            int st = export_layer(d, &b, l, sink);
            if (st) return st;
        }
        done += T;
    }
    return ACCEL_OK;
}

static int cpu_seq_truncate(accel_dev *ad, accel_seq *as, int len)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)as;
    if (s->tls && len % d->tls.block_size)
        tls_rebuild(d, s, len / d->tls.block_size * d->tls.block_size, len);
    tls_pipe_forget(s);
    cpu_kv_table_shrink(&d->kv, &s->kv, len);
    return ACCEL_OK;
}

/* accel_seq_decode_sparse: the device's block size and channels, the sequence's budgets. The
 * summaries are made (from the rows already cached) the first time. */
static int cpu_seq_decode_sparse(accel_dev *ad, accel_seq *as, const sparse_tls_params *p)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)as;
    if (!p) {
        s->tls_on = 0;
        return ACCEL_OK;
    }
    if (!d->tls_avail) return ACCEL_ERR_UNSUPPORTED;
    if (!s->tls) {
        const model_config *c = &ad->m->cfg;
        s->tls = sparse_tls_seq_new(c->n_layers, c->n_kv_heads, c->head_dim, d->ch.r,
                                    d->tls.block_size, as->capacity, d->ch.idx);
        if (!s->tls) return ACCEL_ERR_NOMEM;
        tls_rebuild(d, s, 0, as->len);
    }
    if (!s->tls_on) {
        atomic_store(&s->tls_read, 0);
        atomic_store(&s->tls_total, 0);
        atomic_store(&s->tls_steps, 0);
    }
    s->tls_p = d->tls;
    s->tls_p.token_budget = p->token_budget;
    s->tls_p.block_budget = p->block_budget;
    s->tls_p.dense_below = p->dense_below;
    s->tls_p.stagger = p->stagger;
    s->tls_on = 1;
    return ACCEL_OK;
}

static int cpu_seq_decode_stats(accel_dev *ad, accel_seq *as, accel_decode_stats *out)
{
    cpu_seq *s = (cpu_seq *)as;
    (void)ad;
    *out = (accel_decode_stats){.keys_read = atomic_load(&s->tls_read),
                                .keys_total = atomic_load(&s->tls_total),
                                .steps = atomic_load(&s->tls_steps)};
    return ACCEL_OK;
}

void cpu_accel_tls_stats(accel_dev *ad, int64_t *keys_read, int64_t *keys_total)
{
    cpu_dev *d = (cpu_dev *)ad;
    *keys_read = atomic_load(&d->tls_read);
    *keys_total = atomic_load(&d->tls_total);
}

static void cpu_kv_usage(accel_dev *ad, int *total, int *used, int *cached)
{
    cpu_kv_pool_usage(&((cpu_dev *)ad)->kv, total, used, cached);
}

static int cpu_seq_hold(accel_dev *ad, accel_seq *as)
{
    cpu_kv_table_hold(&((cpu_dev *)ad)->kv, &((cpu_seq *)as)->kv);
    return ACCEL_OK;
}

/* The host tier's unit: the block's float32 rows as the cache holds them, K then V. */
static int cpu_dev_block_save(accel_dev *ad, accel_seq *as, int block, void *dst)
{
    cpu_kv_block_save(&((cpu_dev *)ad)->kv, &((cpu_seq *)as)->kv, block, dst);
    return ACCEL_OK;
}

static int cpu_dev_block_load(accel_dev *ad, accel_seq *as, const void *src)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_seq *s = (cpu_seq *)as;
    if (cpu_kv_table_prepare(&d->kv, &s->kv, as->len, CPU_KV_BLOCK)) return ACCEL_ERR_NOMEM;
    cpu_kv_block_load(&d->kv, &s->kv, as->len / CPU_KV_BLOCK, src);
    if (s->tls) tls_rebuild(d, s, as->len, as->len + CPU_KV_BLOCK); /* the block's summaries */
    tls_pipe_forget(s);
    return ACCEL_OK;
}

int cpu_accel_kv_blocks_in_use(accel_dev *ad)
{
    return cpu_kv_pool_in_use(&((cpu_dev *)ad)->kv);
}

int cpu_accel_kv_reserved(accel_dev *ad)
{
    return ((cpu_dev *)ad)->kv.reserved != 0;
}

static int cpu_warmup(accel_dev *ad)
{
    accel_seq *s;
    int st = accel_seq_new(ad, 2, &s);
    if (st) return st;
    int32_t id = ad->m->cfg.bos_id >= 0 ? ad->m->cfg.bos_id : 0;
    float *lg = malloc(ad->m->cfg.vocab * sizeof(float));
    accel_prefill_req r = {.seq = s, .ids = &id, .n = 1, .logits = lg};
    st = lg ? accel_prefill(ad, &r) : ACCEL_ERR_NOMEM;
    free(lg);
    accel_seq_free(ad, s);
    return st;
}

static void cpu_describe(accel_dev *ad, accel_info *out)
{
    cpu_dev *d = (cpu_dev *)ad;
    snprintf(out->name, sizeof out->name, "cpu");
    snprintf(out->desc, sizeof out->desc, "CPU reference backend, %d threads",
             cpu_pool_threads(d->pool));
    out->kind = ACCEL_KIND_CPU;
    out->caps = ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT |
                ACCEL_CAP_PAGED | ACCEL_CAP_DECODE_ARGMAX | ACCEL_CAP_LAYER_SPLIT;
    out->max_batch = 256;
}

static void cpu_free(accel_dev *ad)
{
    cpu_dev *d = (cpu_dev *)ad;
    cpu_pool_free(d->pool);
    if (d->kv_ready) cpu_kv_pool_deinit(&d->kv);
    float *bufs[] = {d->inv_freq, d->x, d->xb, d->q, d->k, d->v, d->att,
                     d->hb, d->hb2, d->cs, d->sn, d->scores, d->gk, d->gv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(d->qk);
    free(d->qv);
    free(d->sk);
    free(d->sv);
    free(d->tls_f);
    free(d->tls_i);
    model_channels_free(&d->ch);
    free(d);
}

/* accel_decode_argmax: the logits are in host memory already, so every row is written and the
 * argmax is the host's. Declared (ACCEL_CAP_DECODE_ARGMAX) so that the scheduler's path for
 * devices that pick greedy tokens runs here too, on the same contract as the GPU's. */
static int cpu_decode_argmax(accel_dev *ad, int n, accel_seq *const *seqs, const int32_t *ids,
                             float *logits, const unsigned char *want, int32_t *argmax)
{
    int st = cpu_decode(ad, n, seqs, ids, logits);
    const int V = ad->m->cfg.vocab;
    for (int i = 0; i < n && st == ACCEL_OK; i++) argmax[i] = model_sample_argmax(logits + (size_t)i * V, V);
    return st;
}

static const struct accel_dev_i cpu_i = {
    .free = cpu_free,
    .describe = cpu_describe,
    .seq_new = cpu_seq_new,
    .seq_free = cpu_seq_free,
    .prefill = cpu_prefill,
    .decode = cpu_decode,
    .kv_import = cpu_kv_import,
    .warmup = cpu_warmup,
    .seq_fork = cpu_seq_fork,
    .seq_truncate = cpu_seq_truncate,
    .kv_usage = cpu_kv_usage,
    .seq_hold = cpu_seq_hold,
    .kv_block_save = cpu_dev_block_save,
    .kv_block_load = cpu_dev_block_load,
    .kv_export = cpu_kv_export,
    .seq_decode_sparse = cpu_seq_decode_sparse,
    .seq_decode_stats = cpu_seq_decode_stats,
    .decode_argmax = cpu_decode_argmax,
    .split_drop = cpu_split_drop,
};

/* accel_opts.decode_sparse (or $TANDEM_DECODE_SPARSE) onto d->tls, with the channel file. */
static int tls_open(cpu_dev *d, const model *m, const accel_opts *o, char *err, size_t errlen)
{
    const char *spec = o->decode_sparse ? o->decode_sparse : getenv("TANDEM_DECODE_SPARSE");
    int chan_set = 0;
    char why[300];
    if (sparse_tls_parse(spec, m->cfg.head_dim, &d->tls, &d->tls_on, &chan_set, why, sizeof why)) {
        snprintf(err, errlen, "cpu: %s", why);
        return -1;
    }
    if (!d->tls_on) {
        /* off: the channel file, where there is a usable one, lets requests turn it on */
        char path[4200];
        if (o->sparse_channels) snprintf(path, sizeof path, "%s", o->sparse_channels);
        else model_channels_path(m->dir, path, sizeof path);
        if (m->cfg.sliding_window > 0 || access(path, R_OK) ||
            model_channels_load(path, &d->ch, why, sizeof why))
            return 0;
        if (model_channels_match(&d->ch, &m->cfg, why, sizeof why)) {
            model_channels_free(&d->ch);
            memset(&d->ch, 0, sizeof d->ch);
            return 0;
        }
        d->tls.channels = d->ch.r;
        d->tls_avail = 1;
        return 0;
    }
    if (m->cfg.sliding_window > 0) {
        snprintf(err, errlen, "cpu: decode_sparse asynctls: sliding-window models are not supported");
        return -1;
    }
    char path[4200];
    if (o->sparse_channels) snprintf(path, sizeof path, "%s", o->sparse_channels);
    else model_channels_path(m->dir, path, sizeof path);
    if (model_channels_load(path, &d->ch, why, sizeof why)) {
        snprintf(err, errlen, "cpu: decode_sparse asynctls needs the channel file (tandem "
                              "calibrate-channels --model DIR writes it): %s", why);
        return -1;
    }
    if (model_channels_match(&d->ch, &m->cfg, why, sizeof why)) {
        snprintf(err, errlen, "cpu: decode_sparse asynctls: %s: %s", path, why);
        return -1;
    }
    if (chan_set && d->tls.channels != d->ch.r) {
        snprintf(err, errlen, "cpu: decode_sparse asynctls: channels=%d but %s holds %d",
                 d->tls.channels, path, d->ch.r);
        return -1;
    }
    d->tls.channels = d->ch.r;
    d->tls_avail = 1;
    return 0;
}

accel_dev *cpu_accel_open(int index, const model *m, const accel_opts *o, char *err, size_t errlen)
{
    if (index != 0) {
        snprintf(err, errlen, "cpu:%d: there is one CPU device (cpu)", index);
        return NULL;
    }
    if (m->cfg.head_dim > 1024) {
        snprintf(err, errlen, "cpu: head_dim %d above 1024", m->cfg.head_dim);
        return NULL;
    }
    cpu_dev *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->base.i = &cpu_i;
    d->base.m = m;
    d->base.opts = accel_opts_kept(o);
    const model_config *c = &m->cfg;
    d->base.kv_bytes_per_token = 2ull * c->n_layers * c->n_kv_heads * c->head_dim * sizeof(float);
    if (tls_open(d, m, o, err, errlen)) {
        model_channels_free(&d->ch);
        free(d);
        return NULL;
    }
    if (d->tls_avail)
        d->base.kv_bytes_per_token += sparse_tls_bytes_per_token(
            c->n_layers, c->n_kv_heads, c->head_dim, d->ch.r, d->tls.block_size);
    /* KV budget: the configured limit, else half of physical memory */
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    d->base.mem_total = o->mem_limit ? o->mem_limit : phys / 2;
    int threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    d->pool = cpu_pool_new(threads < 1 ? 1 : threads);
    d->inv_freq = malloc(sizeof(float) * (c->head_dim / 2));
    /* the pool: the budget in whole blocks (at least one, so a tiny limit still refuses by
     * growth rather than at open) */
    uint64_t block_bytes = (uint64_t)CPU_KV_BLOCK * d->base.kv_bytes_per_token;
    uint64_t max_ids = d->base.mem_total / block_bytes;
    d->base.kv_block_tokens = CPU_KV_BLOCK;
    d->kv_ready = cpu_kv_pool_init(&d->kv, c->n_layers, c->n_kv_heads * c->head_dim,
                                   max_ids > INT32_MAX / 2 ? INT32_MAX / 2 : (int)max_ids, 1) == 0;
    if (!d->pool || !d->inv_freq || !d->kv_ready) {
        cpu_free(&d->base);
        snprintf(err, errlen, "cpu: out of memory");
        return NULL;
    }
    model_rope_inv_freq(c, 0, d->inv_freq);
    return &d->base;
}

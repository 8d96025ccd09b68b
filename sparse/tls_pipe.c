/* sparse/tls_pipe.c — AsyncTLS's staggered selection and incremental block transfer (see
 * tls_pipe.h). */
#include "sparse/tls_pipe.h"
#include <stdlib.h>
#include <string.h>

sparse_tls_pipe *sparse_tls_pipe_new(const sparse_tls_params *p, int n_layers, int n_kv,
                                     int cap_tokens)
{
    if (n_layers < 1 || n_layers > 4096 || n_kv < 1 || n_kv > 1024 || cap_tokens < 1 ||
        cap_tokens > SPARSE_TLS_MAX_TOKENS || sparse_tls_params_check(p, 0, NULL, 0))
        return NULL;
    sparse_tls_pipe *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    size_t groups = (size_t)n_layers * n_kv;
    t->n_layers = n_layers;
    t->n_kv = n_kv;
    t->cap_blocks = (cap_tokens + p->block_size - 1) / p->block_size;
    t->block_budget = p->block_budget;
    t->prev = malloc(sizeof(int32_t) * groups * p->block_budget);
    t->n_prev = malloc(sizeof(int32_t) * groups);
    t->prev_nb = calloc(groups, sizeof(int32_t));
    t->resident = calloc(groups * t->cap_blocks, 1);
    if (!t->prev || !t->n_prev || !t->prev_nb || !t->resident) {
        sparse_tls_pipe_free(t);
        return NULL;
    }
    for (size_t i = 0; i < groups; i++) t->n_prev[i] = -1;
    return t;
}

void sparse_tls_pipe_free(sparse_tls_pipe *t)
{
    if (!t) return;
    free(t->prev);
    free(t->n_prev);
    free(t->prev_nb);
    free(t->resident);
    free(t);
}

size_t sparse_tls_pipe_work_floats(const sparse_tls_params *p, int head_dim, int n_keys)
{
    return sparse_tls_work_floats(p, head_dim, n_keys);
}

size_t sparse_tls_pipe_work_ints(const sparse_tls_params *p, int n_keys)
{
    size_t nb = ((size_t)n_keys + p->block_size - 1) / p->block_size;
    return 3 * nb + 2 * (size_t)n_keys;
}

/* level 1 over blocks 0 .. nb-1 into out (ascending); returns the count */
static int level1(const sparse_tls_params *p, const sparse_tls_seq *s, int layer, int g,
                  const float *q, int G, size_t q_stride, int nb, int32_t *out, float *agg,
                  float *score, int32_t *work)
{
    if (nb <= p->block_budget) {
        for (int b = 0; b < nb; b++) out[b] = b;
        return nb;
    }
    sparse_tls_block_scores(s, layer, g, q, G, q_stride, nb, score, agg);
    return sparse_tls_topk(score, nb, p->block_budget, out, work);
}

void sparse_tls_pipe_reset_layer(sparse_tls_pipe *t, int layer)
{
    if (layer < 0 || layer >= t->n_layers) return;
    const size_t g0 = (size_t)layer * t->n_kv;
    for (int g = 0; g < t->n_kv; g++) t->n_prev[g0 + g] = -1, t->prev_nb[g0 + g] = 0;
    memset(t->resident + g0 * t->cap_blocks, 0, (size_t)t->n_kv * t->cap_blocks);
}

int sparse_tls_pipe_step(sparse_tls_pipe *t, const sparse_tls_params *p, const sparse_tls_seq *s,
                         int layer, int g, const float *q, int G, size_t q_stride, int n_keys,
                         int32_t *pos, float *fw, int32_t *iw, int *moved)
{
    int fetched = 0;
    const int n = sparse_tls_pipe_group_step(t, p, s, layer, g, q, G, q_stride, n_keys, pos, fw,
                                             iw, &fetched);
    t->fetched += fetched;
    t->baseline += t->n_prev[(size_t)layer * t->n_kv + g];
    t->steps++;
    if (moved) *moved = fetched;
    return n;
}

int sparse_tls_pipe_group_step(sparse_tls_pipe *t, const sparse_tls_params *p,
                               const sparse_tls_seq *s, int layer, int g, const float *q, int G,
                               size_t q_stride, int n_keys, int32_t *pos, float *fw, int32_t *iw,
                               int *moved)
{
    const int bs = p->block_size, nb = (n_keys + bs - 1) / bs;
    const size_t gi = (size_t)layer * t->n_kv + g;
    int32_t *prev = t->prev + gi * t->block_budget;
    uint8_t *res = t->resident + gi * t->cap_blocks;
    float *agg = fw, *score = fw + 2 * s->head_dim;
    int32_t *set = iw, *work = iw + nb, *next = iw + 2 * nb, *cand = iw + 3 * nb,
            *twork = cand + n_keys;
    int fetched = 0;
    if (t->n_prev[gi] < 0) {
        /* first step: select now and fetch the set and the block being filled */
        int n = level1(p, s, layer, g, q, G, q_stride, nb, prev, agg, score, work);
        for (int i = 0; i < n; i++) fetched += !res[prev[i]], res[prev[i]] = 1;
        fetched += !res[nb - 1];
        res[nb - 1] = 1;
        t->n_prev[gi] = n;
        t->prev_nb[gi] = nb;
    }
    /* 1. the attention set: S_{t-1}, plus the blocks from the one it was still filling on
     * (written here, so resident) */
    int tail = t->prev_nb[gi] - 1 > 0 ? t->prev_nb[gi] - 1 : 0, na = 0;
    for (int i = 0; i < t->n_prev[gi] && prev[i] < tail; i++) set[na++] = prev[i];
    for (int b = tail; b < nb; b++) set[na++] = b, res[b] = 1;
    /* 2. level 2 over its keys */
    int C = 0;
    for (int i = 0; i < na; i++)
        for (int k = set[i] * bs; k < (set[i] + 1) * bs && k < n_keys; k++) cand[C++] = k;
    int n;
    if (C <= p->token_budget) {
        memcpy(pos, cand, sizeof(int32_t) * C);
        n = C;
    } else {
        sparse_tls_token_scores(s, layer, g, q, G, q_stride, cand, C, score, agg);
        n = sparse_tls_topk(score, C, p->token_budget, pos, twork);
        for (int i = 0; i < n; i++) pos[i] = cand[pos[i]];
    }
    /* 3. S_t for the next step: fetch what is not resident, drop what left */
    int ns = level1(p, s, layer, g, q, G, q_stride, nb, next, agg, score, work);
    for (int i = 0, j = 0; i < nb - 1; i++) {
        while (j < ns && next[j] < i) j++;
        int in = j < ns && next[j] == i;
        if (in && !res[i]) fetched++;
        res[i] = (uint8_t)in;
    }
    if (ns && next[ns - 1] == nb - 1) res[nb - 1] = 1; /* the tail: resident already */
    memcpy(prev, next, sizeof(int32_t) * ns);
    t->n_prev[gi] = ns;
    t->prev_nb[gi] = nb;
    *moved = fetched;
    return n;
}

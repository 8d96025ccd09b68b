/* sparse/tls.c — AsyncTLS's two selection levels and the channel calibration (see tls.h).
 *
 * Arithmetic order (what another backend matches up to its own rounding): a dot product over
 * channels accumulates in float in 8 lanes (lane = index mod 8, in index order), reduced pairwise
 * (4+4, 2+2, 1+1); the block score is the dot of Q+ with M plus the dot of Q- with m; sums over
 * the group's heads run in head order. */
#include "sparse/tls.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sparse_tls_params_default(sparse_tls_params *p)
{
    *p = (sparse_tls_params){.block_size = 64, .block_budget = 128, .token_budget = 1024,
                             .channels = 32, .dense_layers = 2, .dense_below = -1};
}

int sparse_tls_params_check(const sparse_tls_params *p, int head_dim, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!p) why = "no parameters";
    else if (p->block_size != 16 && p->block_size != 32 && p->block_size != 64 &&
             p->block_size != 128)
        why = "block_size must be 16, 32, 64 or 128";
    else if (p->block_budget < 1 || p->block_budget > SPARSE_TLS_MAX_TOKENS / 16)
        why = "block_budget must be 1 .. 65536 blocks";
    else if (p->token_budget < 1 || p->token_budget > SPARSE_TLS_MAX_TOKENS)
        why = "token_budget must be 1 .. 1M tokens";
    else if (p->channels < 2 || p->channels % 2 || p->channels > SPARSE_TLS_MAX_HEAD_DIM ||
             (head_dim > 0 && p->channels > head_dim))
        why = "channels must be even and 2 .. head_dim";
    else if (p->dense_layers < 0 || p->dense_layers > 4096)
        why = "dense_layers must be 0 .. 4096";
    else if (p->dense_below < -1 || p->dense_below > SPARSE_TLS_MAX_TOKENS)
        why = "dense_below must be -1 (the token budget) or 0 .. 1M tokens";
    else if (p->offload != 0 && p->offload != 1)
        why = "offload must be 0 or 1";
    else if (p->stagger != 0 && p->stagger != 1)
        why = "stagger must be 0 or 1";
    if (why && err) snprintf(err, errlen, "asynctls: %s", why);
    return why ? SPARSE_TLS_ERR_INVALID : 0;
}

int sparse_tls_parse(const char *spec, int head_dim, sparse_tls_params *p, int *on,
                     int *channels_set, char *err, size_t errlen)
{
    sparse_tls_params_default(p);
    *on = 0;
    if (channels_set) *channels_set = 0;
    if (!spec || !*spec || !strcmp(spec, "off")) return 0;
    size_t n = strlen(spec);
    if (n > 512 || strncmp(spec, "asynctls", 8) || (spec[8] && spec[8] != ',')) {
        if (err) snprintf(err, errlen, "decode_sparse: \"off\" or \"asynctls[,key=value...]\"");
        return SPARSE_TLS_ERR_INVALID;
    }
    static const struct {
        const char *key;
        size_t off;
    } keys[] = {
        {"block_size", offsetof(sparse_tls_params, block_size)},
        {"block_budget", offsetof(sparse_tls_params, block_budget)},
        {"token_budget", offsetof(sparse_tls_params, token_budget)},
        {"channels", offsetof(sparse_tls_params, channels)},
        {"dense_layers", offsetof(sparse_tls_params, dense_layers)},
        {"dense_below", offsetof(sparse_tls_params, dense_below)},
        {"offload", offsetof(sparse_tls_params, offload)},
        {"stagger", offsetof(sparse_tls_params, stagger)},
    };
    const char *c = spec + 8;
    int named_channels = 0;
    while (*c == ',') {
        c++;
        const char *eq = strchr(c, '='), *end = strchr(c, ',');
        if (!end) end = c + strlen(c);
        size_t kl = eq && eq < end ? (size_t)(eq - c) : (size_t)(end - c);
        size_t i = 0;
        while (i < sizeof keys / sizeof keys[0] &&
               (strlen(keys[i].key) != kl || strncmp(keys[i].key, c, kl)))
            i++;
        if (i == sizeof keys / sizeof keys[0] || !eq || eq > end) {
            if (err)
                snprintf(err, errlen, "decode_sparse: unknown key or no value: %.*s", (int)kl, c);
            return SPARSE_TLS_ERR_INVALID;
        }
        char *stop;
        long v = strtol(eq + 1, &stop, 10);
        if (stop == eq + 1 || stop != end || v < -1 || v > SPARSE_TLS_MAX_TOKENS) {
            if (err) snprintf(err, errlen, "decode_sparse: %s: not an integer in range", keys[i].key);
            return SPARSE_TLS_ERR_INVALID;
        }
        *(int *)((char *)p + keys[i].off) = (int)v;
        if (!strcmp(keys[i].key, "channels")) named_channels = 1;
        c = end;
    }
    if (*c) {
        if (err) snprintf(err, errlen, "decode_sparse: trailing text: %s", c);
        return SPARSE_TLS_ERR_INVALID;
    }
    if (channels_set) *channels_set = named_channels;
    /* channels left to the file are checked against it by the device */
    int st = sparse_tls_params_check(p, named_channels ? head_dim : 0, err, errlen);
    if (!st) *on = 1;
    return st;
}

int sparse_tls_resolve(const sparse_tls_req *rq, const char *config_spec, int head_dim,
                       sparse_tls_params *p, int *on, char *err, size_t errlen, const char **key)
{
    int cfg_on = 0;
    if (key) *key = "sparse_decode";
    if (sparse_tls_parse(config_spec, head_dim, p, &cfg_on, NULL, err, errlen)) return SPARSE_TLS_ERR_INVALID;
    *on = rq->given < 0 ? cfg_on : rq->given;
    if (!*on) return 0;
    if (rq->token_budget) {
        if (rq->token_budget < 1 || rq->token_budget > SPARSE_TLS_MAX_TOKENS) {
            if (key) *key = "token_budget";
            if (err) snprintf(err, errlen, "token_budget must be 1 .. %d tokens", SPARSE_TLS_MAX_TOKENS);
            return SPARSE_TLS_ERR_INVALID;
        }
        p->token_budget = rq->token_budget;
    }
    if (rq->block_budget) {
        if (rq->block_budget < 1 || rq->block_budget > SPARSE_TLS_MAX_TOKENS / 16) {
            if (key) *key = "block_budget";
            if (err) snprintf(err, errlen, "block_budget must be 1 .. %d blocks", SPARSE_TLS_MAX_TOKENS / 16);
            return SPARSE_TLS_ERR_INVALID;
        }
        p->block_budget = rq->block_budget;
    }
    if (rq->stagger) p->stagger = rq->stagger == 2;
    return sparse_tls_params_check(p, 0, err, errlen);
}

int sparse_tls_dense(const sparse_tls_params *p, int layer, int n_keys)
{
    int below = p->dense_below >= 0 ? p->dense_below : p->token_budget;
    return layer < p->dense_layers || n_keys <= below;
}

/* ---------------------------------------------------------------- summaries */

static int shape_ok(int n_layers, int n_kv, int hd, int r, int bs)
{
    return n_layers >= 1 && n_layers <= 4096 && n_kv >= 1 && n_kv <= 1024 && hd >= 2 &&
           hd <= SPARSE_TLS_MAX_HEAD_DIM && r >= 2 && r % 2 == 0 && r <= hd &&
           (bs == 16 || bs == 32 || bs == 64 || bs == 128);
}

uint64_t sparse_tls_bytes_per_token(int n_layers, int n_kv, int hd, int r, int bs)
{
    uint64_t per_block = 2ull * n_kv * hd * sizeof(float);
    uint64_t labels = (uint64_t)n_kv * ((uint64_t)r / 2 + 2 * sizeof(float));
    return (uint64_t)n_layers * ((per_block + (uint64_t)bs - 1) / (uint64_t)bs + labels);
}

sparse_tls_seq *sparse_tls_seq_new(int n_layers, int n_kv, int hd, int r, int bs, int cap_tokens,
                                   const uint16_t *channels)
{
    if (!shape_ok(n_layers, n_kv, hd, r, bs) || cap_tokens < 1 ||
        cap_tokens > SPARSE_TLS_MAX_TOKENS || !channels)
        return NULL;
    sparse_tls_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = (sparse_tls_seq){.n_layers = n_layers, .n_kv = n_kv, .head_dim = hd, .r = r,
                          .block_size = bs, .cap_tokens = cap_tokens,
                          .cap_blocks = (cap_tokens + bs - 1) / bs, .channels = channels};
    size_t nbk = (size_t)n_layers * s->cap_blocks * n_kv * hd;
    size_t nlab = (size_t)n_layers * cap_tokens * n_kv;
    s->kmax = calloc(nbk, sizeof(float));
    s->kmin = calloc(nbk, sizeof(float));
    s->lmin = calloc(nlab, sizeof(float));
    s->lstep = calloc(nlab, sizeof(float));
    s->code = calloc(nlab, (size_t)r / 2);
    if (!s->kmax || !s->kmin || !s->lmin || !s->lstep || !s->code) {
        sparse_tls_seq_free(s);
        return NULL;
    }
    return s;
}

void sparse_tls_seq_free(sparse_tls_seq *s)
{
    if (!s) return;
    free(s->kmax);
    free(s->kmin);
    free(s->lmin);
    free(s->lstep);
    free(s->code);
    free(s);
}

static size_t block_off(const sparse_tls_seq *s, int layer, int b, int g)
{
    return (((size_t)layer * s->cap_blocks + b) * s->n_kv + g) * s->head_dim;
}

static size_t label_off(const sparse_tls_seq *s, int layer, int pos, int g)
{
    return ((size_t)layer * s->cap_tokens + pos) * s->n_kv + g;
}

void sparse_tls_put(sparse_tls_seq *s, int layer, int pos, const float *k)
{
    const int hd = s->head_dim, r = s->r, b = pos / s->block_size;
    const int first = pos % s->block_size == 0;
    for (int g = 0; g < s->n_kv; g++) {
        const float *kg = k + (size_t)g * hd;
        float *M = s->kmax + block_off(s, layer, b, g), *m = s->kmin + block_off(s, layer, b, g);
        if (first) {
            memcpy(M, kg, sizeof(float) * hd);
            memcpy(m, kg, sizeof(float) * hd);
        } else {
            for (int c = 0; c < hd; c++) {
                M[c] = kg[c] > M[c] ? kg[c] : M[c];
                m[c] = kg[c] < m[c] ? kg[c] : m[c];
            }
        }
        /* the label: the selected channels at 4 bits between their own min and max */
        const uint16_t *ch = s->channels + ((size_t)layer * s->n_kv + g) * r;
        float lo = kg[ch[0]], hi = kg[ch[0]];
        for (int i = 1; i < r; i++) {
            float x = kg[ch[i]];
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        float step = (hi - lo) / 15.0f;
        if (!isfinite(step)) step = 0.0f;
        size_t lo_at = label_off(s, layer, pos, g);
        uint8_t *code = s->code + lo_at * (size_t)(r / 2);
        for (int i = 0; i < r; i += 2) {
            int c2[2];
            for (int j = 0; j < 2; j++) {
                float v = step > 0.0f ? (kg[ch[i + j]] - lo) / step + 0.5f : 0.0f;
                int cv = v >= 0.0f ? (v < 15.0f ? (int)v : 15) : 0; /* floor of v >= 0; NaN: 0 */
                c2[j] = cv;
            }
            code[i / 2] = (uint8_t)(c2[0] | c2[1] << 4);
        }
        s->lmin[lo_at] = lo;
        s->lstep[lo_at] = step;
    }
}

void sparse_tls_copy(sparse_tls_seq *dst, const sparse_tls_seq *src, int n_tokens)
{
    if (n_tokens <= 0) return;
    int nb = (n_tokens + src->block_size - 1) / src->block_size;
    size_t bf = (size_t)nb * src->n_kv * src->head_dim, lf = (size_t)n_tokens * src->n_kv;
    for (int l = 0; l < src->n_layers; l++) {
        memcpy(dst->kmax + block_off(dst, l, 0, 0), src->kmax + block_off(src, l, 0, 0),
               bf * sizeof(float));
        memcpy(dst->kmin + block_off(dst, l, 0, 0), src->kmin + block_off(src, l, 0, 0),
               bf * sizeof(float));
        memcpy(dst->lmin + label_off(dst, l, 0, 0), src->lmin + label_off(src, l, 0, 0),
               lf * sizeof(float));
        memcpy(dst->lstep + label_off(dst, l, 0, 0), src->lstep + label_off(src, l, 0, 0),
               lf * sizeof(float));
        memcpy(dst->code + label_off(dst, l, 0, 0) * (size_t)(src->r / 2),
               src->code + label_off(src, l, 0, 0) * (size_t)(src->r / 2),
               lf * (size_t)(src->r / 2));
    }
}

/* ---------------------------------------------------------------- scores */

/* sum a[i] * b[i] in 8 lanes (lane = i mod 8), reduced pairwise */
static float dot8(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    for (int w = 4; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

void sparse_tls_block_scores(const sparse_tls_seq *s, int layer, int g, const float *q, int G,
                             size_t q_stride, int nb, float *scores, float *agg)
{
    const int hd = s->head_dim;
    float *qp = agg, *qn = agg + hd;
    for (int c = 0; c < hd; c++) qp[c] = qn[c] = 0.0f;
    for (int h = 0; h < G; h++) {
        const float *qh = q + (size_t)h * q_stride;
        for (int c = 0; c < hd; c++) {
            if (qh[c] > 0.0f) qp[c] += qh[c];
            else qn[c] += qh[c];
        }
    }
    /* one row of [Q+ Q-] times the (2d x nb) matrix [M; m] */
    for (int b = 0; b < nb; b++) {
        size_t o = block_off(s, layer, b, g);
        scores[b] = dot8(qp, s->kmax + o, hd) + dot8(qn, s->kmin + o, hd);
    }
}

void sparse_tls_token_scores(const sparse_tls_seq *s, int layer, int g, const float *q, int G,
                             size_t q_stride, const int32_t *pos, int n, float *scores, float *qsel)
{
    const int r = s->r;
    const uint16_t *ch = s->channels + ((size_t)layer * s->n_kv + g) * r;
    float qsum = 0.0f;
    for (int i = 0; i < r; i++) {
        float a = 0.0f;
        for (int h = 0; h < G; h++) a += q[(size_t)h * q_stride + ch[i]];
        qsel[i] = a / (float)G;
        qsum += qsel[i];
    }
    float codes[SPARSE_TLS_MAX_HEAD_DIM];
    for (int j = 0; j < n; j++) {
        size_t at = label_off(s, layer, pos[j], g);
        const uint8_t *code = s->code + at * (size_t)(r / 2);
        for (int i = 0; i < r; i += 2) {
            codes[i] = (float)(code[i / 2] & 15);
            codes[i + 1] = (float)(code[i / 2] >> 4);
        }
        scores[j] = s->lstep[at] * dot8(qsel, codes, r) + s->lmin[at] * qsum;
    }
}

/* ---------------------------------------------------------------- top-k */

/* a ranks before b: higher score, NaN last, ties to the lower index */
static int before(const float *sc, int32_t a, int32_t b)
{
    float x = sc[a], y = sc[b];
    int xn = isnan(x), yn = isnan(y);
    if (xn != yn) return yn;
    if (!xn && x != y) return x > y;
    return a < b;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int sparse_tls_topk(const float *sc, int n, int k, int32_t *out, int32_t *w)
{
    if (k <= 0 || n <= 0) return 0;
    if (k >= n) {
        for (int i = 0; i < n; i++) out[i] = i;
        return n;
    }
    for (int i = 0; i < n; i++) w[i] = i;
    /* quickselect: afterwards w[0 .. k-1] are the k first in the total order `before` */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        /* median of three as the pivot, moved to hi */
        if (before(sc, w[mid], w[lo])) { int32_t t = w[mid]; w[mid] = w[lo]; w[lo] = t; }
        if (before(sc, w[hi], w[lo])) { int32_t t = w[hi]; w[hi] = w[lo]; w[lo] = t; }
        if (before(sc, w[mid], w[hi])) { int32_t t = w[mid]; w[mid] = w[hi]; w[hi] = t; }
        int32_t piv = w[hi];
        int st = lo;
        for (int i = lo; i < hi; i++)
            if (before(sc, w[i], piv)) {
                int32_t t = w[i]; w[i] = w[st]; w[st] = t;
                st++;
            }
        w[hi] = w[st];
        w[st] = piv;
        if (st == k - 1 || st == k) break;
        if (st < k) lo = st + 1;
        else hi = st - 1;
    }
    memcpy(out, w, sizeof(int32_t) * k);
    qsort(out, k, sizeof(int32_t), cmp_i32);
    return k;
}

/* ---------------------------------------------------------------- both levels */

size_t sparse_tls_work_floats(const sparse_tls_params *p, int hd, int n_keys)
{
    size_t nb = ((size_t)n_keys + p->block_size - 1) / p->block_size;
    return 2 * (size_t)hd + nb + (size_t)n_keys;
}

size_t sparse_tls_work_ints(const sparse_tls_params *p, int n_keys)
{
    size_t nb = ((size_t)n_keys + p->block_size - 1) / p->block_size;
    return 2 * nb + 2 * (size_t)n_keys;
}

int sparse_tls_select(const sparse_tls_params *p, const sparse_tls_seq *s, int layer, int g,
                      const float *q, int G, size_t q_stride, int n_keys, int32_t *pos,
                      float *fw, int32_t *iw, sparse_tls_pick *pick)
{
    const int bs = p->block_size, nb = (n_keys + bs - 1) / bs;
    float *agg = fw, *bscore = fw + 2 * s->head_dim, *tscore = bscore + nb;
    int32_t *kept = iw, *bwork = iw + nb, *cand = iw + 2 * nb, *twork = cand + n_keys;
    int nk;
    if (nb > p->block_budget) {
        sparse_tls_block_scores(s, layer, g, q, G, q_stride, nb, bscore, agg);
        nk = sparse_tls_topk(bscore, nb, p->block_budget, kept, bwork);
    } else {
        for (int b = 0; b < nb; b++) kept[b] = b;
        nk = nb;
    }
    int C = 0;
    for (int i = 0; i < nk; i++) {
        int p0 = kept[i] * bs, p1 = p0 + bs < n_keys ? p0 + bs : n_keys;
        for (int t = p0; t < p1; t++) cand[C++] = t;
    }
    int n;
    if (C <= p->token_budget) {
        memcpy(pos, cand, sizeof(int32_t) * C);
        n = C;
    } else {
        sparse_tls_token_scores(s, layer, g, q, G, q_stride, cand, C, tscore, agg);
        n = sparse_tls_topk(tscore, C, p->token_budget, pos, twork);
        for (int i = 0; i < n; i++) pos[i] = cand[pos[i]]; /* ascending: cand is */
    }
    if (pick) *pick = (sparse_tls_pick){nk, C, n};
    return n;
}

/* ---------------------------------------------------------------- calibration */

sparse_tls_calib *sparse_tls_calib_new(int n_layers, int n_heads, int n_kv, int hd)
{
    if (n_layers < 1 || n_layers > 4096 || n_kv < 1 || n_heads < n_kv || n_heads > 4096 ||
        n_heads % n_kv || hd < 2 || hd > SPARSE_TLS_MAX_HEAD_DIM)
        return NULL;
    sparse_tls_calib *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = (sparse_tls_calib){.n_layers = n_layers, .n_heads = n_heads, .n_kv = n_kv,
                            .head_dim = hd};
    c->sum = calloc((size_t)n_layers * n_heads * hd, sizeof(double));
    c->count = calloc((size_t)n_layers, sizeof(int64_t));
    if (!c->sum || !c->count) {
        sparse_tls_calib_free(c);
        return NULL;
    }
    return c;
}

void sparse_tls_calib_free(sparse_tls_calib *c)
{
    if (!c) return;
    free(c->sum);
    free(c->count);
    free(c);
}

void sparse_tls_calib_add(sparse_tls_calib *c, int layer, const float *q, const float *k, int T)
{
    const int hd = c->head_dim, G = c->n_heads / c->n_kv;
    const size_t qd = (size_t)c->n_heads * hd, kvd = (size_t)c->n_kv * hd;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < c->n_heads; h++) {
            const float *qh = q + t * qd + (size_t)h * hd, *kg = k + t * kvd + (size_t)(h / G) * hd;
            double *sum = c->sum + ((size_t)layer * c->n_heads + h) * hd;
            for (int i = 0; i < hd; i++) sum[i] += fabs((double)qh[i] * (double)kg[i]);
        }
    c->count[layer] += T;
}

typedef struct imp {
    double v;
    int c;
} imp;

/* more important first, ties to the lower channel */
static int cmp_imp(const void *a, const void *b)
{
    const imp *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

static int cmp_u16(const void *a, const void *b)
{
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

int sparse_tls_calib_select(const sparse_tls_calib *c, int r, uint16_t *out)
{
    const int hd = c->head_dim, G = c->n_heads / c->n_kv;
    if (r < 2 || r % 2 || r > hd) return SPARSE_TLS_ERR_INVALID;
    imp v[SPARSE_TLS_MAX_HEAD_DIM];
    for (int l = 0; l < c->n_layers; l++) {
        if (c->count[l] <= 0) return SPARSE_TLS_ERR_INVALID;
        for (int g = 0; g < c->n_kv; g++) {
            for (int i = 0; i < hd; i++) v[i] = (imp){-1.0, i};
            for (int h = g * G; h < (g + 1) * G; h++) {
                const double *sum = c->sum + ((size_t)l * c->n_heads + h) * hd;
                for (int i = 0; i < hd; i++) {
                    double m = sum[i] / (double)c->count[l];
                    if (m > v[i].v) v[i].v = m;
                }
            }
            qsort(v, hd, sizeof v[0], cmp_imp);
            uint16_t *o = out + ((size_t)l * c->n_kv + g) * r;
            for (int i = 0; i < r; i++) o[i] = (uint16_t)v[i].c;
            qsort(o, r, sizeof *o, cmp_u16);
        }
    }
    return 0;
}

/* cpu/flex_common.c — shape checks, the index object and the small helpers the
 * FlexPrefill reference shares (see cpu/flex.h). */
#include "cpu/flex.h"
#include "cpu/flex_impl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *cpu_flex_strerror(int status)
{
    switch (status) {
    case 0: return "ok";
    case CPU_FLEX_ERR_INVALID: return "invalid argument";
    case CPU_FLEX_ERR_NOMEM: return "out of memory";
    default: return "unknown error";
    }
}

int cpu_flex_qkv_check(const cpu_flex_qkv *x, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!x || !x->q || !x->k || !x->v) why = "missing q, k or v";
    else if (x->n_tokens < 1 || x->n_tokens > CPU_FLEX_MAX_TOKENS) why = "n_tokens out of range";
    else if (x->n_heads < 1 || x->n_heads > CPU_FLEX_MAX_HEADS || x->n_kv_heads < 1 ||
             x->n_heads % x->n_kv_heads)
        why = "n_heads must be a positive multiple of n_kv_heads (at most 256)";
    else if (x->head_dim < 1 || x->head_dim > CPU_FLEX_MAX_HEAD_DIM) why = "head_dim out of range";
    else if (x->q_pos0 < 0 || x->q_pos0 >= x->n_tokens) why = "q_pos0 outside the tokens";
    else if (x->q_stride < (size_t)x->n_heads * x->head_dim ||
             x->kv_stride < (size_t)x->n_kv_heads * x->head_dim)
        why = "row strides narrower than the heads";
    if (why && err) snprintf(err, errlen, "flex: %s", why);
    return why ? CPU_FLEX_ERR_INVALID : 0;
}

int cpu_flex_cmp_float_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

int cpu_flex_cmp_pair_desc(const void *a, const void *b)
{
    const cpu_flex_pair *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

float cpu_flex_js_distance(const float *p, const float *q, int n)
{
    double a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        double m = ((double)p[i] + q[i]) / 2;
        a += p[i] * log(p[i] / m);
        b += q[i] * log(q[i] / m);
    }
    return (float)sqrt(0.5 * a + 0.5 * b);
}

cpu_flex_index *cpu_flex_index_alloc(int n_heads, int n_tokens, int block_size)
{
    cpu_flex_index *ix = calloc(1, sizeof *ix);
    if (!ix) return NULL;
    int nb = (n_tokens + block_size - 1) / block_size;
    ix->n_heads = n_heads;
    ix->n_blocks = nb;
    ix->block_size = block_size;
    ix->n_tokens = n_tokens;
    ix->row_ptr = malloc((size_t)n_heads * (nb + 1) * sizeof *ix->row_ptr);
    ix->query_aware = calloc((size_t)n_heads, 1);
    ix->js = calloc((size_t)n_heads, sizeof *ix->js);
    ix->n_vertical = calloc((size_t)n_heads, sizeof *ix->n_vertical);
    ix->n_slash = calloc((size_t)n_heads, sizeof *ix->n_slash);
    if (!ix->row_ptr || !ix->query_aware || !ix->js || !ix->n_vertical || !ix->n_slash) {
        cpu_flex_index_free(ix);
        return NULL;
    }
    return ix;
}

void cpu_flex_index_free(cpu_flex_index *ix)
{
    if (!ix) return;
    free(ix->row_ptr);
    free(ix->col);
    free(ix->query_aware);
    free(ix->js);
    free(ix->n_vertical);
    free(ix->n_slash);
    free(ix);
}

int cpu_flex_index_full(int n_heads, int n_tokens, int block_size, cpu_flex_index **out)
{
    return cpu_flex_index_full_from(n_heads, n_tokens, block_size, 0, out);
}

int64_t cpu_flex_index_causal(const cpu_flex_index *ix)
{
    const int64_t nb = ix->n_blocks, q0 = ix->q_block0;
    return (nb * (nb + 1) - q0 * (q0 + 1)) / 2;
}

int cpu_flex_index_full_from(int n_heads, int n_tokens, int block_size, int q_block0,
                             cpu_flex_index **out)
{
    *out = NULL;
    if (n_heads < 1 || n_heads > CPU_FLEX_MAX_HEADS || n_tokens < 1 ||
        n_tokens > CPU_FLEX_MAX_TOKENS || block_size < 1 || block_size > 1024)
        return CPU_FLEX_ERR_INVALID;
    int nb = (n_tokens + block_size - 1) / block_size;
    if (nb > CPU_FLEX_MAX_BLOCKS || q_block0 < 0 || q_block0 >= nb) return CPU_FLEX_ERR_INVALID;
    cpu_flex_index *ix = cpu_flex_index_alloc(n_heads, n_tokens, block_size);
    if (ix) ix->q_block0 = q_block0;
    int64_t per = ((int64_t)nb * (nb + 1) - (int64_t)q_block0 * (q_block0 + 1)) / 2;
    if (!ix || !(ix->col = malloc((size_t)(per * n_heads) * sizeof *ix->col))) {
        cpu_flex_index_free(ix);
        return CPU_FLEX_ERR_NOMEM;
    }
    int64_t k = 0;
    for (int h = 0; h < n_heads; h++) {
        for (int r = 0; r < nb; r++) {
            ix->row_ptr[(size_t)h * (nb + 1) + r] = k;
            for (int c = 0; r >= q_block0 && c <= r; c++) ix->col[k++] = c;
        }
        ix->row_ptr[(size_t)h * (nb + 1) + nb] = k;
        ix->js[h] = NAN;
        ix->n_vertical[h] = ix->n_slash[h] = nb;
    }
    ix->nnz = k;
    *out = ix;
    return 0;
}

double cpu_flex_index_density(const cpu_flex_index *ix, int h)
{
    const int nb = ix->n_blocks;
    const double causal = (double)cpu_flex_index_causal(ix);
    if (h < 0) return (double)ix->nnz / (causal * ix->n_heads);
    const int64_t *rp = ix->row_ptr + (size_t)h * (nb + 1);
    return (double)(rp[nb] - rp[0]) / causal;
}

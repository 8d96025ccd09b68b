/* model/grammar/gram_vocab.c — the vocabulary's byte strings as a trie in preorder (built once per
 * tokenizer): sort the token indices by their bytes, then every node is a distinct prefix, met in
 * sorted order, so the walk that builds it is one pass with the longest common prefix of
 * neighbours. The matcher walks it top to bottom and skips a refused node's subtree in one step
 * (end[]). */
#include "model/grammar/gram_int.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const model_gvocab *sort_v;

static int by_bytes(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const model_gvocab *v = sort_v;
    uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

model_gvocab *model_gvocab_ref(const model_gvocab *v)
{
    model_gvocab *w = (model_gvocab *)v; /* the count is the only thing a reference changes */
    atomic_fetch_add(&w->refs, 1);
    return w;
}

void model_gvocab_free(model_gvocab *v)
{
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1) return;
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok_off);
    free(v->toks);
    free(v->never);
    free(v->blob);
    free(v->off);
    free(v->eos);
    free(v);
}

model_gvocab *model_gvocab_new(int n_vocab, const char *const *bytes, const size_t *lens,
                               const uint8_t *never, const int32_t *eos_ids, int n_eos,
                               int strip_first_space)
{
    static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
    if (n_vocab < 1 || n_vocab > (1 << 24) || n_eos < 0 || n_eos > 64) return NULL;
    model_gvocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    atomic_init(&v->refs, 1);
    v->n_vocab = n_vocab;
    v->words = (n_vocab + 63) / 64;
    v->strip = strip_first_space;
    v->never = calloc((size_t)n_vocab, 1);
    v->off = malloc(sizeof(uint32_t) * ((size_t)n_vocab + 1));
    v->eos = malloc(sizeof(int32_t) * (size_t)(n_eos + 1));
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n_vocab);
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++) total += lens[i] <= GRAM_MAX_TOKEN_BYTES ? lens[i] : 0;
    v->blob = malloc(total + 1);
    if (!v->never || !v->off || !v->eos || !order || !v->blob) goto oom;
    if (n_eos) memcpy(v->eos, eos_ids, sizeof(int32_t) * (size_t)n_eos);
    v->n_eos = n_eos;
    size_t o = 0;
    int n_tok = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->off[i] = (uint32_t)o;
        int bad = (never && never[i]) || lens[i] == 0 || lens[i] > GRAM_MAX_TOKEN_BYTES;
        for (int k = 0; k < n_eos; k++) bad |= eos_ids[k] == i;
        v->never[i] = (uint8_t)bad;
        if (lens[i] <= GRAM_MAX_TOKEN_BYTES && lens[i]) {
            memcpy(v->blob + o, bytes[i], lens[i]);
            o += lens[i];
        }
        if (!bad) order[n_tok++] = i;
    }
    v->off[n_vocab] = (uint32_t)o;
    pthread_mutex_lock(&sort_lock); /* qsort has no context argument in C11 */
    sort_v = v;
    qsort(order, (size_t)n_tok, sizeof *order, by_bytes);
    pthread_mutex_unlock(&sort_lock);
    /* nodes: the root, then one per new byte of each token past the common prefix with the
     * previous one; at most total + 1 */
    size_t cap = o + 1;
    v->byte = malloc(cap);
    v->depth = malloc(sizeof(uint16_t) * cap);
    v->end = malloc(sizeof(int32_t) * cap);
    v->tok_off = calloc(cap + 1, sizeof(int32_t));
    v->toks = malloc(sizeof(int32_t) * ((size_t)n_tok + 1));
    int32_t *path = malloc(sizeof(int32_t) * (GRAM_MAX_TOKEN_BYTES + 1)); /* node at each depth */
    if (!v->byte || !v->depth || !v->end || !v->tok_off || !v->toks || !path) {
        free(path);
        goto oom;
    }
    int n = 1, depth = 0;
    v->byte[0] = 0;
    v->depth[0] = 0;
    path[0] = 0;
    /* tok_off counts per node first, prefix-summed after */
    int32_t *count = v->tok_off + 1;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int t = 0; t < n_tok; t++) {
        int id = order[t];
        const char *b = v->blob + v->off[id];
        uint32_t len = v->off[id + 1] - v->off[id], lcp = 0;
        while (prev && lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        /* close the nodes deeper than the common prefix */
        for (; depth > (int)lcp; depth--) v->end[path[depth]] = n;
        for (uint32_t k = lcp; k < len; k++) {
            v->byte[n] = (uint8_t)b[k];
            v->depth[n] = (uint16_t)(k + 1);
            path[k + 1] = n;
            n++;
        }
        depth = (int)len;
        if ((int)len > v->max_depth) v->max_depth = (int)len;
        count[path[len]]++;
        prev = b;
        prev_len = len;
    }
    for (; depth >= 0; depth--) v->end[path[depth]] = n;
    free(path);
    v->n_nodes = n;
    for (int i = 0; i < n; i++) v->tok_off[i + 1] += v->tok_off[i];
    /* fill: tokens in sorted order land on their nodes in node order */
    int32_t *fill = malloc(sizeof(int32_t) * (size_t)n);
    if (!fill) goto oom;
    memcpy(fill, v->tok_off, sizeof(int32_t) * (size_t)n);
    /* walk again to find each token's node: the same pass, tracking the node of its last byte */
    {
        int nn = 1, d = 0;
        int32_t pth[GRAM_MAX_TOKEN_BYTES + 1];
        pth[0] = 0;
        prev = NULL;
        prev_len = 0;
        for (int t = 0; t < n_tok; t++) {
            int id = order[t];
            const char *b = v->blob + v->off[id];
            uint32_t len = v->off[id + 1] - v->off[id], lcp = 0;
            while (prev && lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
            for (uint32_t k = lcp; k < len; k++) pth[k + 1] = nn++;
            d = (int)len;
            v->toks[fill[pth[d]]++] = id;
            prev = b;
            prev_len = len;
        }
    }
    free(fill);
    free(order);
    return v;
oom:
    free(order);
    model_gvocab_free(v);
    return NULL;
}

int model_gvocab_size(const model_gvocab *v)
{
    return v->n_vocab;
}

int model_gvocab_trie_nodes(const model_gvocab *v)
{
    return v->n_nodes;
}

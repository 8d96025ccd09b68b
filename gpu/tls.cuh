/* gpu/tls.cuh — AsyncTLS sparse decode's kernels (gpu/tls.cu), as the engine and the test
 * library (gpu/test/tls_test_api.cu) launch them. sparse/tls.h is the reference: the same
 * summaries, the same scores in the same arithmetic order, the same top-k order.
 *
 * Per sequence (gpu_tls_dev, device memory), for positions 0 .. cap-1 and blocks 0 .. nbc-1 of
 * bs positions, per (layer l, KV head g):
 *   mm    (L, n_kv, nbc, 2, hd) h16  the block's channel max, then its min, of K as the cache
 *                                    holds it (h16: the max of h16 values is one of them, exact)
 *   code  (L, n_kv, cap, r / 2)      4-bit labels of the r selected channels (channel 2i in the
 *                                    low nibble), sparse_tls_put's rounding
 *   lab   (L, n_kv, cap) float2      the label's (min, step)
 *   prev  (L, n_kv, words)           the blocks kept at the step before (bit per block): the
 *                                    offload's difference, counted in cnt[2], cnt[3]
 *   cnt   [0] keys attended, [1] keys of the rows, [2] blocks kept that were not kept at the
 *         step before, [3] blocks kept — summed over sparse layers, KV heads and steps
 *
 * One layer of a sparse decode step, T sequences (gpu_tls_attn_layer):
 *   tls_score   grid (GPU_TLS_CHUNKS, n_kv, T): the newest key's block max/min and label (the
 *               CTA whose chunk holds the last block), then level 1: the group's aggregated query
 *               [Q+ Q-] times [M; m] for every block (8 threads per block, sparse_tls.c's dot8)
 *   tls_select  grid (n_kv, T), 1024 threads: top block_budget blocks, the candidates of the kept
 *               blocks, level 2 scores from the labels, top token_budget tokens -> idx (ascending)
 *   tls_attend  grid (GPU_TLS_SPLITS, n_kv, T): exact attention of the group's heads over the
 *               listed keys (a dense row: cnt_idx = -n, keys 0 .. n-1), split-K, the last CTA of
 *               a (sequence, KV head) merges */
#ifndef TANDEM_GPU_TLS_CUH
#define TANDEM_GPU_TLS_CUH
#include "gpu/engine.cuh"

#define GPU_TLS_CHUNKS 16  /* level-1 CTAs per (sequence, KV head) */
#define GPU_TLS_SPLITS 32  /* attention CTAs per (sequence, KV head) */
#define GPU_TLS_MAX_GROUP 16

struct gpu_tls_dev {
    h16 *mm;
    unsigned char *code;
    float2 *lab;
    unsigned *prev;
    unsigned long long *cnt;
    int on; /* 0: this row attends densely in this step */
    int cap, nbc, words;
    int block_budget, token_budget;
};

/* The shapes and the scratch one layer's launch needs. */
struct gpu_tls_cfg {
    int L, n_heads, n_kv, hd, bs, r;
    const unsigned short *ch; /* (L, n_kv, r) device: the channel of each label slot */
    int nb_max;               /* blocks per row bscore holds (<= GPU_TLS_MAX_CAND) */
    float *bscore;            /* (T, n_kv, nb_max) */
    int *idx;                 /* (T, n_kv, GPU_TLS_MAX_TOKENS) */
    int *cnt_idx;             /* (T, n_kv) */
    float *po;                /* (T, n_heads, GPU_TLS_SPLITS, hd) */
    float2 *pml;              /* (T, n_heads, GPU_TLS_SPLITS) */
    int *arrive;              /* (T, n_kv), zero between launches */
};

/* Summaries of positions [from, to) of one sequence, every layer, from its cache: the blocks
 * from floor(from / bs) rebuilt from their first position. */
int gpu_tls_rebuild(cudaStream_t s, const gpu_tls_cfg &c, const gpu_seq_dev &sq,
                    const gpu_tls_dev &t, int from, int to);
/* One layer for T rows: row i is position pos[i] of seqs[i] (its key already in the cache),
 * queries q (T, n_heads * hd) h16, out the same shape. tls: (T) device. */
int gpu_tls_attn_layer(cudaStream_t s, const gpu_tls_cfg &c, int layer, int T, const h16 *q,
                       const int *pos, const gpu_seq_dev *seqs, const gpu_tls_dev *tls, h16 *out,
                       int parts = 7);
/* parts (timing): 1 level 1, 2 the selection, 4 the attention */
/* Once per device before the first launch (the selection's shared memory). */
int gpu_tls_kernels_init(void);
/* Bytes of one sequence's summaries for cap positions. */
size_t gpu_tls_seq_bytes(const gpu_tls_cfg &c, int cap);
/* Carves a zeroed allocation of gpu_tls_seq_bytes into t (cap positions). */
void gpu_tls_seq_carve(const gpu_tls_cfg &c, void *mem, int cap, gpu_tls_dev *t);

#endif

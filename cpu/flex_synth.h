/* cpu/flex_synth.h — synthetic Q/K/V whose attention has the shapes the sparse-prefill papers
 * describe, for tests and benchmarks of FlexPrefill (no long-context trained model is available
 * here, so the inputs are built instead of captured).
 *
 * Keys are shared by the query heads of a GQA group, as in a real model, and carry every feature
 * at once; each query head reads a subset, which gives it its pattern:
 *   dims [0, 2F)         rotary position code: k_j = (cos w_f j, sin w_f j), F frequencies
 *                        w_f = 2^-f; a query reading it at offset o scores sum_f cos(w_f (i-o-j)),
 *                        peaked where j = i - o: a local window (o = 0) or a slash line (o > 0)
 *   dim 2F               attention sink: 1 on the first 4 keys
 *   dim 2F + 1           vertical columns: 1 on ~1 key in 256 (hash-chosen positions)
 *   dims [2F+2, 2F+2+T)  topic one-hot per key block: every key of block c carries topic
 *                        T(g, c); a query block r reads topic T'(h, r), so it attends to the
 *                        key blocks that share it (query-specific blocks, the pattern
 *                        FlexPrefill's query-aware heads catch)
 *   every dim            gaussian noise, sigma 0.05 on the feature dims and 2 on the others (keys), 0.1 (queries)
 * Query head kinds (MIXED: kind = h % 4 in this order; STRUCTURED: the last three, h % 3):
 *   RANDOM          q ~ N(0, 2^2) in every dim (the official example's randn / 0.5)
 *   SINK_LOCAL      sink + local window (StreamingLLM's A-shape)
 *   VERTICAL_SLASH  sink + vertical columns + a slash line at a head-specific offset
 *   QUERY_BLOCKS    topic-matched key blocks + a weak sink
 * Feature strengths put the favoured keys about 8 logits (after 1/sqrt(d)) above the rest.
 * V is N(0, 1). Needs head_dim >= 16 (F = min(8, d / 8) frequencies, T = min(8, d / 8) topics).
 *
 * Everything is a pure function of (seed, token, head, dim): rows can be generated in any order
 * or range and give the same values. Threads: reentrant. */
#ifndef TANDEM_CPU_FLEX_SYNTH_H
#define TANDEM_CPU_FLEX_SYNTH_H
#include <stddef.h>
#include <stdint.h>

enum cpu_flex_synth_kind {
    CPU_FLEX_SYNTH_RANDOM,
    CPU_FLEX_SYNTH_SINK_LOCAL,
    CPU_FLEX_SYNTH_VERTICAL_SLASH,
    CPU_FLEX_SYNTH_QUERY_BLOCKS,
    CPU_FLEX_SYNTH_MIXED,      /* h % 4 over the four kinds above */
    CPU_FLEX_SYNTH_STRUCTURED, /* h % 3 over SINK_LOCAL, VERTICAL_SLASH, QUERY_BLOCKS */
};

typedef struct cpu_flex_synth {
    enum cpu_flex_synth_kind kind;
    int n_tokens, n_heads, n_kv_heads, head_dim;
    int block_size; /* topic granularity of keys and queries (the index block size) */
    uint64_t seed;
} cpu_flex_synth;

const char *cpu_flex_synth_kind_name(enum cpu_flex_synth_kind k);
/* "random" | "sink_local" | "vertical_slash" | "query_blocks" | "mixed" | "structured" -> kind,
 * or -1. */
int cpu_flex_synth_kind_parse(const char *name);
/* The kind query head h gets. */
enum cpu_flex_synth_kind cpu_flex_synth_head_kind(const cpu_flex_synth *s, int h);

/* Rows [t0, t1) into q (rows of n_heads * head_dim floats), k and v (n_kv_heads * head_dim);
 * each pointer is row t0 and may be NULL to skip that tensor. 0, or -1 for a bad shape
 * (head_dim < 16 or > 1024, heads not a multiple, tokens outside [0, 1M], block_size < 1). */
int cpu_flex_synth_rows(const cpu_flex_synth *s, int t0, int t1, float *q, float *k, float *v);

#endif

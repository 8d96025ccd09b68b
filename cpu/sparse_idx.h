/* cpu/sparse_idx.h — the block lists of XAttention and Tri-shape, the reference.
 *
 * Both build a cpu_flex_index (cpu/flex.h: per head, per query block, the ascending key blocks
 * it attends to) for a whole prompt (x->q_pos0 == 0) or for a chunk after cached tokens
 * (x->q_pos0 > 0, a multiple of the block size: rows before q_pos0 / bs stay empty, key block ids
 * are absolute), and cpu_flex_sparse_attention computes the attention over it. The parameters
 * are sparse/sparse.h's, checked.
 *
 * XAttention — what it reproduces: mit-han-lab/x-attention@e37988770b9d, xattn/src/Xattention.py
 * xattn_estimate (select_mode "inverse", norm 1, causal) and xattn/src/utils.py
 * find_blocks_chunked (mode "prefill", threshold), as Xattention_prefill calls them. Per head h
 * (KV head h / (H / HK): the caller's repeat_kv), stride S, block B:
 *   - reshaped key j = K[jS .. jS+S-1], reshaped query i = Q[iS+S-1], ..., Q[iS] (reversed), so
 *     their dot product is the sum along one antidiagonal of the S x S tile; positions past the
 *     prompt are zeros (the official zero padding), a reshaped row or column holding no real
 *     position is masked (the official pads / S of -inf);
 *   - logits dot / sqrt(D) / S, causal at the reshaped level (j > i masked, i and j absolute: the
 *     Triton path's offsets, which the torch path shares when q_len == k_len), softmax over keys
 *     in float32, A[I][J] = the sum of the (B/S x B/S) tile of that softmax (double, in order);
 *   - per query block I: required = threshold * sum_J A[I][J]; block 0 and the diagonal I kept;
 *     the others sorted by A descending (ties: lower block first — torch.sort's order on ties is
 *     unspecified); one is kept while the sum of what is kept before it (block 0 and the
 *     diagonal counted first, in double as the official .to(float)) is below required, so the
 *     block that crosses the threshold is kept too; nothing right of the diagonal.
 *   - threshold 1 keeps every causal block (OpenVINO runs dense at threshold >= 1; the official
 *     cumsum would depend on rounding there).
 * Numerics that differ from the official run: float32 logits here vs bf16 inputs there; sums in
 * double; so sets may differ at threshold edges (a block whose inclusion is decided within
 * rounding of `required`), which is what the comparison tests tolerate.
 *
 * Tri-shape — openvino.genai continuous_batching/sparse_attention.cpp
 * (TriShapeSparseAttentionTokenSkipper::get_skipped_blocks): a chunk after `cached` = q_pos0
 * tokens skips the key blocks [start / 128, floor(cached / 128) - recent / 128) when there are
 * more full cached blocks than start + recent blocks; every other causal block is kept, the
 * chunk's own blocks included. Block SPARSE_TRI_BLOCK; a whole prompt (q_pos0 0) skips nothing.
 *
 * Threads: reentrant; pool may be NULL. Errors: 0 or CPU_FLEX_ERR_* (cpu/flex.h). */
#ifndef TANDEM_CPU_SPARSE_IDX_H
#define TANDEM_CPU_SPARSE_IDX_H
#include "cpu/flex.h"
#include "sparse/sparse.h"

/* XAttention's block list for x (p->mode SPARSE_MODE_XATTN).
 * official_chunk: 0 selects by the rule above (block 0 and the diagonal always kept: what the
 * method is and what serving runs). > 0 reproduces the official torch path's selection in its
 * first internal chunk of that many queries (sparse_xattn_official_chunk(n) for a whole prompt;
 * only when x->q_pos0 is 0, as the official current_index is then 0): find_blocks_chunked marks
 * block 0, then writes the identity over columns [0, chunk) onto the same mask, which clears
 * block 0's mark in every row but the first; so only the diagonal counts as always kept there,
 * and the cumsum — built for two always-kept blocks — runs one block ahead, keeping one block
 * more; block 0 is kept all the same (each block not kept becomes index 0 and marks it). Rows past that chunk select by the rule above. Used to compare with
 * the official outputs (tests, `tandem sparse-index --official-chunking`).
 * mass (may be NULL) receives, per
 * head and query block from q_pos0 / B on, the estimated mass A[I][J] of each key block J <= I,
 * row-major (n_heads, rows, n_blocks), rows = n_blocks - q_pos0 / B, entries right of the
 * diagonal 0; malloc'ed, the caller frees it. */
int cpu_xattn_index_build(cpu_pool *pool, const sparse_params *p, const cpu_flex_qkv *x,
                          int official_chunk, cpu_flex_index **out, double **mass);

/* The same with the scoring's inputs in FP8 (fp8 != 0), as the GPU's opt-in FP8 estimate scores
 * (gpu/gpu_xattn_fp8.h): every query value of head h (the rows x holds) and every key value of KV
 * head g (all n_tokens keys) is multiplied by a power of two 2^e chosen per head from that head's
 * largest magnitude (cpu_xattn_fp8_exp: the largest lands in (224, 448], so nothing saturates),
 * rounded to e4m3 (cpu_e4m3_round) and scaled back (exactly); the dot products, softmax, masses
 * and selection then run as above on those values. fp8 0: cpu_xattn_index_build. */
int cpu_xattn_index_build_ex(cpu_pool *pool, const sparse_params *p, const cpu_flex_qkv *x,
                             int official_chunk, int fp8, cpu_flex_index **out, double **mass);

/* x rounded to the nearest OCP FP8 e4m3 value (bias 7, 3 mantissa bits, subnormals down to
 * 2^-9, largest finite 448), ties to even; magnitudes above 448 saturate to +-448 (CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); NaN stays NaN. */
float cpu_e4m3_round(float x);
/* The exponent e for a head whose largest magnitude is amax: amax * 2^e in (224, 448] (0 when
 * amax is 0 or not finite). Exact: ilogb and a comparison, no rounding. */
int cpu_xattn_fp8_exp(float amax);

/* Tri-shape's block list for x (p->mode SPARSE_MODE_TRISHAPE). */
int cpu_trishape_index_build(const sparse_params *p, const cpu_flex_qkv *x, cpu_flex_index **out);

#endif

/* sparse/sparse.h: the one decision — defaults (OpenVINO GenAI's SparseAttentionConfig,
 * FlexPrefill's shipped config), the checks naming the key, the plan of sparse and dense chunks,
 * and Tri-shape's skipped range against openvino.genai's TriShapeSparseAttentionTokenSkipper
 * (continuous_batching/sparse_attention.cpp, worked by hand below). */
#include "tests/test.h"
#include "sparse/sparse.h"
#include <string.h>

TEST(sparse_defaults_are_the_official_ones)
{
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_XATTN);
    CHECK_NEAR(p.xattention_threshold, 0.8, 0);
    CHECK_EQ(p.xattention_stride, 8);
    CHECK_EQ(p.xattention_block_size, 128);
    CHECK_EQ(p.num_retained_start_tokens_in_cache, 128);
    CHECK_EQ(p.num_retained_recent_tokens_in_cache, 1920);
    CHECK_EQ(p.num_last_dense_tokens_in_prefill, 100);
    CHECK_EQ(sparse_params_check(&p, NULL, 0, NULL), 0);
    sparse_params_default(&p, SPARSE_MODE_FLEX);
    CHECK_EQ(p.num_last_dense_tokens_in_prefill, 0); /* today's meaning of "sparse_prefill": true */
    CHECK_NEAR(p.flex.gamma, 0.9, 1e-7);
    CHECK_EQ(p.flex.min_budget, 1024);
    CHECK_EQ(sparse_mode_parse("trishape"), SPARSE_MODE_TRISHAPE);
    CHECK_EQ(sparse_mode_parse("xattention"), SPARSE_MODE_XATTN);
    CHECK_EQ(sparse_mode_parse("flexprefill"), SPARSE_MODE_FLEX);
    CHECK_EQ(sparse_mode_parse("XAttention"), -1);
    CHECK_STR(sparse_mode_name(SPARSE_MODE_TRISHAPE), "trishape");
}

static const char *bad_key(sparse_params p)
{
    const char *k = NULL;
    char err[160];
    CHECK(sparse_params_check(&p, err, sizeof err, &k) == SPARSE_ERR_INVALID);
    CHECK_MSG(k && !strncmp(err, k, strlen(k)), "message '%s' does not start with the key", err);
    return k ? k : "";
}

TEST(sparse_check_names_the_key)
{
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_XATTN);
    p.xattention_stride = 3;
    CHECK_STR(bad_key(p), "xattention_stride");
    p.xattention_stride = 8;
    p.xattention_block_size = 48;
    CHECK_STR(bad_key(p), "xattention_block_size");
    p.xattention_block_size = 64;
    p.xattention_threshold = 0;
    CHECK_STR(bad_key(p), "xattention_threshold");
    p.xattention_threshold = 1.01;
    CHECK_STR(bad_key(p), "xattention_threshold");
    p.xattention_threshold = 1;
    CHECK_EQ(sparse_params_check(&p, NULL, 0, NULL), 0);
    sparse_params_default(&p, SPARSE_MODE_TRISHAPE);
    p.num_retained_start_tokens_in_cache = 100;
    CHECK_STR(bad_key(p), "num_retained_start_tokens_in_cache");
    p.num_retained_start_tokens_in_cache = 0;
    p.num_retained_recent_tokens_in_cache = -128;
    CHECK_STR(bad_key(p), "num_retained_recent_tokens_in_cache");
    p.num_retained_recent_tokens_in_cache = 256;
    p.num_last_dense_tokens_in_prefill = -1;
    CHECK_STR(bad_key(p), "num_last_dense_tokens_in_prefill");
    sparse_params_default(&p, SPARSE_MODE_FLEX);
    p.flex.gamma = 1.5f;
    CHECK_STR(bad_key(p), "gamma");
    p.flex.gamma = 0.9f;
    p.flex.tau = -1;
    CHECK_STR(bad_key(p), "tau");
    p.flex.tau = 0.1f;
    p.flex.max_budget = -1;
    CHECK_STR(bad_key(p), "max_budget");
    p.flex.max_budget = 0;
    p.mode = 7;
    CHECK_STR(bad_key(p), "mode");
}

TEST(sparse_plan_ends_on_a_block_before_the_dense_tail)
{
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_XATTN); /* block 128, last dense 100 */
    CHECK_EQ(sparse_plan(&p, 1000), 896);          /* (1000 - 100) / 128 * 128 */
    CHECK_EQ(sparse_plan(&p, 356), 256);
    CHECK_EQ(sparse_plan(&p, 355), 0);             /* one block left: nothing to skip */
    p.num_last_dense_tokens_in_prefill = 0;
    CHECK_EQ(sparse_plan(&p, 1000), 1000);         /* no tail: the whole prompt */
    sparse_params_default(&p, SPARSE_MODE_FLEX);   /* dense at or below 1024 tokens */
    CHECK_EQ(sparse_plan(&p, 1024), 0);
    CHECK_EQ(sparse_plan(&p, 1025), 1025);
    p.num_last_dense_tokens_in_prefill = 100;
    CHECK_EQ(sparse_plan(&p, 1200), 0); /* 1024 sparse tokens: at the threshold */
    CHECK_EQ(sparse_plan(&p, 1300), 1152);
    /* chunks: whole blocks, at most to the end of the sparse part */
    sparse_params_default(&p, SPARSE_MODE_XATTN);
    CHECK_EQ(sparse_chunk_len(&p, 768, 0, 300), 256);
    CHECK_EQ(sparse_chunk_len(&p, 768, 0, 100), 128); /* at least a block */
    CHECK_EQ(sparse_chunk_len(&p, 768, 640, 300), 128);
    CHECK_EQ(sparse_chunk_len(&p, 768, 0, 5000), 768);
    CHECK_EQ(sparse_chunk_len(&p, 768, 768, 5000), 0);
    CHECK_EQ(sparse_chunk_len(&p, 1000, 768, 128), 232); /* never a tail under one block */
    sparse_params_default(&p, SPARSE_MODE_TRISHAPE); /* a fixed chunk whatever the load */
    CHECK_EQ(sparse_chunk_len(&p, 4096, 0, 100), SPARSE_TRI_CHUNK);
    CHECK_EQ(sparse_chunk_len(&p, 4096, 0, 1 << 20), SPARSE_TRI_CHUNK);
    CHECK_EQ(sparse_chunk_len(&p, 4096, 3584, 1 << 20), 512);
}

/* TriShapeSparseAttentionTokenSkipper::get_skipped_blocks with block 128, start 128 (1 block),
 * recent 256 (2 blocks): cached 1000 -> 7 full blocks > 3 -> logical blocks 1 .. 4 skipped
 * (i + 1 for i < 7 - 3), i.e. tokens [128, 640); cached 384 -> 3 full blocks, not > 3: none. */
TEST(sparse_trishape_skip_is_openvinos)
{
    sparse_params p;
    sparse_params_default(&p, SPARSE_MODE_TRISHAPE);
    p.num_retained_recent_tokens_in_cache = 256;
    int lo, hi;
    sparse_tri_skip(&p, 1000, &lo, &hi);
    CHECK_EQ(lo, 128);
    CHECK_EQ(hi, 640);
    sparse_tri_skip(&p, 384, &lo, &hi);
    CHECK_EQ(hi - lo, 0);
    sparse_tri_skip(&p, 511, &lo, &hi); /* 3 full blocks */
    CHECK_EQ(hi - lo, 0);
    sparse_tri_skip(&p, 512, &lo, &hi); /* 4 full blocks: block 1 */
    CHECK_EQ(lo, 128);
    CHECK_EQ(hi, 256);
    p.num_retained_start_tokens_in_cache = 0;
    sparse_tri_skip(&p, 512, &lo, &hi);
    CHECK_EQ(lo, 0);
    CHECK_EQ(hi, 256);
}

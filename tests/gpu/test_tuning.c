/* The CUDA engine's settings (gpu/tuning.c: plain C, linked into the test binary, so these run
 * with or without a GPU): the defaults, every key, the errors that stop a device from opening,
 * and where the settings come from (the opener's spec, else $TANDEM_GPU_TUNE). */
#include "gpu/tuning.h"
#include "tests/test.h"

TEST(gpu_tuning_defaults)
{
    gpu_tuning t;
    gpu_tuning_default(&t);
    CHECK_EQ(t.chunk, 8192);
    CHECK(t.graphs && t.gemv && t.fused && t.pdl && t.decode_mma && t.prune && t.decode_rows &&
          t.load_overlap && t.argmax && t.prefill_split && !t.xattn_fp8);
    CHECK_EQ(t.logits_chunks, 4);
    CHECK_EQ(t.attn, GPU_ATTN_AUTO);
    CHECK_EQ(t.sparse_attn, GPU_ATTN_AUTO);
    CHECK_EQ(t.decode_two, 0);
    CHECK_EQ(t.decode_cluster, 2048);
    CHECK_EQ(t.gemm_tune, GPU_GEMM_TUNE_ON);
    CHECK_EQ(t.gemm_small, 8);
    CHECK(!t.profile && !t.chain_trace);
    CHECK_EQ(t.offload_pool_mb, 0);
}

TEST(gpu_tuning_every_key)
{
    gpu_tuning t;
    char err[256] = "";
    gpu_tuning_default(&t);
    CHECK_MSG(gpu_tuning_parse(&t,
                               " chunk=300, graphs=0,attn=mma8,sparse_attn=mma4,gemv=0,fused=0,"
                               "pdl=0,decode_attn=two,decode_cluster=0,decode_mma=0,prune=0,"
                               "profile=1,chain_trace=1,decode_rows=0,logits_chunks=8,load_overlap=0,"
                               "argmax=0,gemm_tune=0,offload_pool_mb=2048,prefill_split=0,xattn_fp8=1,"
                               "gemm_small=0",
                               err, sizeof err) == 0,
              "%s", err);
    CHECK_EQ(t.chunk, 300);
    CHECK(!t.graphs && !t.gemv && !t.fused && !t.pdl && !t.decode_mma && !t.prune && !t.decode_rows &&
          !t.load_overlap && !t.argmax && !t.prefill_split && t.xattn_fp8);
    CHECK_EQ(t.logits_chunks, 8);
    CHECK_EQ(t.offload_pool_mb, 2048);
    CHECK_EQ(t.attn, GPU_ATTN_MMA8);
    CHECK_EQ(t.sparse_attn, GPU_ATTN_MMA4);
    CHECK_EQ(t.decode_two, 1);
    CHECK_EQ(t.decode_cluster, 0);
    CHECK(t.profile && t.chain_trace);
    CHECK_EQ(t.gemm_tune, GPU_GEMM_TUNE_OFF);
    CHECK_EQ(t.gemm_small, 0);
    CHECK(gpu_tuning_parse(&t, "gemm_small=16", err, sizeof err) == 0);
    CHECK_EQ(t.gemm_small, 16);
    CHECK(gpu_tuning_parse(&t, "gemm_small=17", err, sizeof err) == -1);
    CHECK(gpu_tuning_parse(&t, "gemm_small=-1", err, sizeof err) == -1);
    CHECK(gpu_tuning_parse(&t, "gemm_tune=log", err, sizeof err) == 0);
    CHECK_EQ(t.gemm_tune, GPU_GEMM_TUNE_LOG);
    CHECK(gpu_tuning_parse(&t, "gemm_tune=force", err, sizeof err) == 0);
    CHECK_EQ(t.gemm_tune, GPU_GEMM_TUNE_FORCE);
    CHECK(gpu_tuning_parse(&t, "gemm_tune=1", err, sizeof err) == 0);
    CHECK_EQ(t.gemm_tune, GPU_GEMM_TUNE_ON);
    /* later items win; "" and NULL change nothing */
    CHECK(gpu_tuning_parse(&t, "attn=wgmma,attn=auto,decode_attn=one,decode_cluster=4096", err,
                           sizeof err) == 0);
    CHECK_EQ(t.attn, GPU_ATTN_AUTO);
    CHECK_EQ(t.decode_two, 0);
    CHECK_EQ(t.decode_cluster, 4096);
    CHECK(gpu_tuning_parse(&t, "", err, sizeof err) == 0);
    CHECK(gpu_tuning_parse(&t, NULL, err, sizeof err) == 0);
    CHECK_EQ(t.chunk, 300);
}

/* A typo must stop the device from opening, naming the key, rather than run another kernel. */
TEST(gpu_tuning_errors_name_the_key)
{
    static const struct {
        const char *spec, *says;
    } bad[] = {
        {"chunk=100", "chunk"},          /* below a decode batch */
        {"chunk=70000", "chunk"},        /* past the largest pass */
        {"chunk=4k", "chunk"},           {"graphs=2", "graphs"},
        {"graphs=", "graphs"},           {"attn=ws", "attn"},
        {"sparse_attn=wgmma", "sparse_attn"}, {"decode_attn=three", "decode_attn"},
        {"decode_cluster=-1", "decode_cluster"}, {"chunks=256", "unknown key 'chunks'"},
        {"logits_chunks=0", "logits_chunks"}, {"logits_chunks=9", "logits_chunks"},
        {"decode_rows=2", "decode_rows"}, {"gemm_tune=2", "gemm_tune"},
        {"offload_pool_mb=-1", "offload_pool_mb"}, {"offload_pool_mb=1G", "offload_pool_mb"},
        {"prefill_split=2", "prefill_split"},
        {"xattn_fp8=2", "xattn_fp8"},
        {"TANDEM_GPU_PDL=off", "unknown key"},  {"pdl", "not key=value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gpu_tuning t;
        char err[256] = "";
        gpu_tuning_default(&t);
        CHECK_MSG(gpu_tuning_parse(&t, bad[i].spec, err, sizeof err) == -1, "'%s' accepted",
                  bad[i].spec);
        CHECK_MSG(strstr(err, bad[i].says) && strstr(err, "gpu_tune"), "'%s': \"%s\"", bad[i].spec,
                  err);
    }
}

/* The opener's spec (the daemon's gpu_tune, tests' accel_opts.gpu_tune) is the whole story when
 * given; only without one does the environment count (tests and benchmarks that pass none). */
TEST(gpu_tuning_read_spec_else_environment)
{
    gpu_tuning t;
    char err[256] = "";
    setenv("TANDEM_GPU_TUNE", "graphs=0,chunk=512", 1);
    CHECK(gpu_tuning_read(&t, NULL, err, sizeof err) == 0);
    CHECK_EQ(t.graphs, 0);
    CHECK_EQ(t.chunk, 512);
    CHECK(gpu_tuning_read(&t, "pdl=0", err, sizeof err) == 0);
    CHECK_EQ(t.graphs, 1);
    CHECK_EQ(t.chunk, 8192);
    CHECK_EQ(t.pdl, 0);
    CHECK(gpu_tuning_read(&t, "", err, sizeof err) == 0); /* the daemon's empty default */
    CHECK_EQ(t.graphs, 1);
    setenv("TANDEM_GPU_TUNE", "graphs=maybe", 1);
    CHECK(gpu_tuning_read(&t, NULL, err, sizeof err) == -1);
    CHECK(strstr(err, "graphs") != NULL);
    unsetenv("TANDEM_GPU_TUNE");
    CHECK(gpu_tuning_read(&t, NULL, err, sizeof err) == 0);
    CHECK_EQ(t.graphs, 1);
}

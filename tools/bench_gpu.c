/* bench_gpu — the GPU backend's benchmark suite through the accel interface (issue 5):
 *
 *   bench_gpu --model DIR [--device cuda] [--gpu-dtype auto|bf16|fp16] [--prefill 1024,4096,16384,32768]
 *             [--decode-ctx 1024,8192] [--batch 1,8,32] [--batch-ctx 1024]
 *             [--export 4096,32768] [--attention 1024,4096,16384,32768] [--steps 64] [--reps 3]
 *             [--sparse 0.9[,G...] [--sparse-max 0,0.03] [--min-budget 1024] [--tau 0.1]
 *              [--sparse-only] [--sparse-mode flexprefill[,xattention][,trishape]]
 *              [--xattention-threshold 0.8[,X...]] [--xattention-stride 8]
 *              [--tri-recent 1920[,T...]] [--last-dense N]]
 *             [--warm each|once] [--idle MS] [--logits host|pageable] [--prefix P:C[,P:C...]]
 *             [--argmax]
 *
 *   prefill P     time to first token: one accel_prefill of P tokens returning the last logits
 *                 (the call synchronizes); median of --reps after one warm-up run (--warm once:
 *                 a warm-up before the first size only: the 8192-token passes of longer prompts
 *                 share their GEMM shapes, and a 128K prefill takes ~20 s); --idle MS: the
 *                 device idles MS ms before each timed run (a request reaching an idle GPU: its
 *                 clocks back from the power cap's sustained level, as when the GEMM ceiling
 *                 of gpu/bench/run_all.sh's limits phase is measured; 0, the default: back to back)
 *   sparse        with --sparse: after each dense prefill P, the same prompt with FlexPrefill
 *                 (accel_prefill_req.sparse: gamma G, --tau, --min-budget tokens, max budget
 *                 F * P tokens for each F of --sparse-max, 0: none): TTFT, speedup over dense,
 *                 the density the device reports and the extra device memory of the call
 *                 (gpu_accel_sparse_bytes); --sparse-only skips the dense runs.
 *                 --sparse-mode picks the methods (each after the same dense run): flexprefill
 *                 as above, xattention one run per --xattention-threshold (stride
 *                 --xattention-stride, block 128), trishape one per --tri-recent
 *                 (num_retained_recent_tokens_in_cache; start 128). Every sparse prompt is
 *                 prefilled as the scheduler plans it (sparse/sparse.h: sparse chunks of
 *                 sparse_chunk_len with the whole prompt wanted, Tri-shape's 1024-token chunks,
 *                 then the last num_last_dense_tokens_in_prefill tokens dense: the mode's default, or
 *                 --last-dense N for every mode), timed as one
 *                 TTFT; with the dense run, KL(dense || sparse) of the last position's logits
 *   decode C      ms per token at batch 1 after C tokens of context: median step of --steps
 *                 (the logits into a buffer from accel_host_alloc, as the daemon's scheduler
 *                 takes it; --logits pageable: malloc, for comparison)
 *   batch B       B sequences of --batch-ctx tokens decoded together: tokens/s over --steps steps
 *                 (each step's tokens are the host's argmax of its logits, outside the timing)
 *   --argmax      each decode C and batch B run a second time with accel_decode_argmax
 *                 (decode_argmax, batch_argmax): the greedy tokens picked on the device and no
 *                 logits row copied back (a temperature-0 request without logprobs; the timing
 *                 includes the argmax). Where the device declines (cuda's argmax=0 setting, or
 *                 no ACCEL_CAP_DECODE_ARGMAX) the wrapper copies every row and takes the argmax
 *                 on the host, inside the timing
 *   prefix P:C    (paged devices, ACCEL_CAP_PAGED) TTFT of a P-token prompt whose first C
 *                 tokens (C a multiple of the device's block) are cached, as the prefix cache
 *                 serves it: a holder sequence with the C tokens (prefilled once, not timed) is
 *                 forked and the last P - C tokens prefilled (timed: fork + prefill); the same
 *                 with the C tokens' blocks in host memory (saved once with accel_kv_block_save
 *                 into one accel_host_alloc buffer, as the host tier keeps a prefix; timed:
 *                 C / block accel_kv_block_load + the prefill, which on cuda makes the copies,
 *                 layer by layer, while it computes); against the cold TTFT of all P tokens
 *                 (medians of --reps)
 *   export P      TTFT with the int8 KV export to a host sink (which copies each chunk, as a
 *                 consumer would) vs without; the export's bytes over the device time of its
 *                 device-to-host copies (gpu_accel_export_stats, found with dlsym)
 *   attention T   the prefill attention kernels alone (causal, Llama-3-8B heads: 32 query, 8 KV,
 *                 head_dim 128): ms and TFLOP/s (4 * T^2/2 * 128 * 32 FLOPs), for each kernel
 *                 variant (mma.sync with 4 and 8 warps per block, wgmma where available;
 *                 gpu_bench_attention, in the test library beside the plugin)
 *   tls C         with --tls C[,C...]: AsyncTLS sparse decode (sparse/tls.h) against dense decode
 *                 after C tokens of context, for each batch of --tls-batch (default 1,8): one
 *                 prompt of C tokens prefilled once, B forks of it (shared blocks: each row still
 *                 reads its whole KV every dense step) decoded --steps steps dense, truncated
 *                 back, then --steps steps sparse (--tls-budget tokens, default 1024,
 *                 --tls-blocks blocks of 64, default 128), then as many staggered (stagger=1:
 *                 stagger_ms; the first step of each, not timed,
 *                 captures the graph and builds the summaries): median ms per step of each, the
 *                 fraction of KV read, and the offload's traffic per step (level-1 blocks newly
 *                 kept vs all kept, x 64 positions x K+V of one head, h16). The channel file:
 *                 --tls-channels FILE, else one written to $TMPDIR with evenly spread channels
 *                 (which channels does not change the work done, only which keys are kept)
 *   tls-offload C with --tls-offload C: the largest batches at C tokens of context (issue 23):
 *                 dense at the most whole sequences of capacity C + 2 steps its pool holds (the
 *                 device opened without a channel file), AsyncTLS from the pool at the most it
 *                 holds with each row's summaries beside the offloaded rows' device memory, AsyncTLS
 *                 offloaded (sparse_tls_params.offload) at the most rows the host pool holds
 *                 (MemAvailable less --tls-host-margin GiB, default 12, pinned at open: gpu_tune
 *                 offload_pool_mb), and the last two together (--tls-offload-modes: a list of
 *                 dense,pool_sparse,offloaded,mixed,one8 (a batch of 8: one offloaded row, 7
 *                 from the pool), each with -direct (no row cache: every
 *                 selected key over PCIe), -vary (a new token every step) and / or -stagger (the staggered
 *                 selection), and pcie, run
 *                 in the order given): median ms per step, tokens/s, the bytes
 *                 an offloaded row read over PCIe per step (its attended K/V rows and new rows)
 *                 against the whole-block and difference-only baselines (level-1 blocks kept /
 *                 newly kept). Rows fork one prefilled prompt (pool rows share its blocks)
 *   tls-hostmap G with --tls-hostmap G: one offloaded row-step's selected keys (--tls-budget per
 *                 sparse layer and KV head) read by a kernel from G GiB of host memory mapped each
 *                 way of gpu/tls_hmem.cuh (register, register4k, hostalloc, vmm), in eight patterns
 *                 (gpu/test/tls_hmem_test_api.cu): GB/s each, and the time to allocate and map
 * BENCH_TLS_AB="env;env..." (--tls): A/B settings run in turns after one prefill
 * (tools/bench_gpu/tls.c).
 * The engine's settings (gpu/tuning.h) come from TANDEM_GPU_TUNE="key=value,...".
 * Every result is one JSON line on stdout. Timings are wall-clock (CLOCK_MONOTONIC) around calls
 * that return only when the device is done. Prompts are pseudo-random token ids. */
#include "devices/devices.h"
#include "devices/exe_dir.h"
#include "scheduler/accel.h"
#include "model/ckpt/model.h"
#include "model/ckpt/tls_channels.h"
#include "sparse/tls.h"
#include "tools/bench_gpu/common.h"
#include "tools/bench_gpu/tls.h"
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 16

static long hostmap_gib;    /* --tls-hostmap GIB: gpu_tls_bench_hostmap */
static int pageable_logits; /* --logits pageable: decode logits into malloc'd memory */
static int argmax_too;      /* --argmax: each decode / batch run again with accel_decode_argmax */

typedef struct export_stats {
    uint64_t bytes;
    double copy_ms, compute_ms;
    int layers;
} export_stats; /* = gpu_export_stats (gpu/gpu.h) */

static int parse_list(const char *s, long *out, long lo, long hi)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi) return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* Comma-separated numbers in [lo, hi]: their count, or -1. */
static int parse_flist(const char *s, double *out, double lo, double hi)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !(v >= lo && v <= hi)) return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The sink of the export runs: copies each chunk into a buffer, as a consumer shipping it on
 * would, and counts the bytes. */
typedef struct sink_ctx {
    unsigned char *buf;
    size_t cap;
    uint64_t bytes;
} sink_ctx;

static int sink_layer(void *vctx, const proto_kv_layer *c)
{
    sink_ctx *s = vctx;
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t sb = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim) * 2;
    size_t need = 2 * vb + 2 * sb;
    if (need > s->cap) {
        free(s->buf);
        s->buf = malloc(need);
        s->cap = s->buf ? need : 0;
        if (!s->buf) return ACCEL_ERR_NOMEM;
    }
    memcpy(s->buf, c->k, vb);
    memcpy(s->buf + vb, c->v, vb);
    memcpy(s->buf + 2 * vb, c->k_scale, sb);
    memcpy(s->buf + 2 * vb + sb, c->v_scale, sb);
    s->bytes += need;
    return 0;
}

/* One prefill of P tokens: seconds, or < 0 on error (status printed). */
static double prefill_once(accel_dev *d, const int32_t *ids, int P, float *lg, const accel_kv_sink *k,
                           const accel_sparse *sp, accel_sparse_report *rep)
{
    accel_seq *s;
    int st = accel_seq_new(d, P, &s);
    if (st) {
        fprintf(stderr, "bench_gpu: seq_new(%d): %s\n", P, accel_strerror(st));
        return -1;
    }
    accel_prefill_req r = {.seq = s, .ids = ids, .n = P, .logits = lg, .kv = k, .sparse = sp,
                           .sparse_report = rep};
    double t0 = bg_now();
    st = accel_prefill(d, &r);
    double t = bg_now() - t0;
    accel_seq_free(d, s);
    if (st) {
        fprintf(stderr, "bench_gpu: prefill(%d): %s\n", P, accel_strerror(st));
        return -1;
    }
    return t;
}

/* A sparse prompt as the scheduler runs it (sparse_plan, sparse_chunk_len with the whole prompt
 * wanted, then the dense tail): seconds, or < 0 on error; rep sums the chunks' reports. */
static double prefill_planned(accel_dev *d, const int32_t *ids, int P, float *lg,
                              const accel_sparse *sp, accel_sparse_report *rep)
{
    accel_seq *s;
    int st = accel_seq_new(d, P, &s);
    if (st) {
        fprintf(stderr, "bench_gpu: seq_new(%d): %s\n", P, accel_strerror(st));
        return -1;
    }
    const int end = sparse_plan(&sp->p, P);
    accel_sparse_report sum = {0};
    double t0 = bg_now();
    for (int done = 0; done < P && !st;) {
        const int len = done < end ? sparse_chunk_len(&sp->p, end, done, P) : P - done;
        accel_sparse_report r = {0};
        accel_prefill_req q = {.seq = s, .ids = ids + done, .n = len,
                               .logits = done + len == P ? lg : NULL,
                               .sparse = done < end ? sp : NULL, .sparse_report = &r};
        st = accel_prefill(d, &q);
        sum.layers_sparse += r.layers_sparse;
        sum.blocks_computed += done < end ? r.blocks_computed : 0;
        sum.blocks_causal += done < end ? r.blocks_causal : 0;
        done += len;
    }
    double t = bg_now() - t0;
    accel_seq_free(d, s);
    if (st) {
        fprintf(stderr, "bench_gpu: prefill(%d): %s\n", P, accel_strerror(st));
        return -1;
    }
    sum.density = sum.blocks_causal ? (double)sum.blocks_computed / sum.blocks_causal : 1.0;
    if (rep) *rep = sum;
    return t;
}

/* KL(p || q) of two logit rows, nats. */
static double kl_logits(const float *a, const float *b, int V)
{
    double ma = -1e300, mb = -1e300, sa = 0, sb = 0, kl = 0;
    for (int i = 0; i < V; i++) {
        if (a[i] > ma) ma = a[i];
        if (b[i] > mb) mb = b[i];
    }
    for (int i = 0; i < V; i++) {
        sa += exp(a[i] - ma);
        sb += exp(b[i] - mb);
    }
    for (int i = 0; i < V; i++) {
        double pa = exp(a[i] - ma) / sa, lpa = a[i] - ma - log(sa), lpb = b[i] - mb - log(sb);
        kl += pa * (lpa - lpb);
    }
    return kl;
}

/* --idle MS: the device idles this long before each timed prefill */
static long idle_ms;

static double prefill_median_sp(accel_dev *d, const int32_t *ids, int P, float *lg,
                                const accel_kv_sink *k, int reps, int warm,
                                const accel_sparse *sp, accel_sparse_report *rep)
{
    double t[32];
    if (warm && prefill_once(d, ids, P, lg, k, sp, rep) < 0) return -1; /* this shape's first run */
    for (int r = 0; r < reps; r++) {
        if (idle_ms > 0) {
            struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        if ((t[r] = prefill_once(d, ids, P, lg, k, sp, rep)) < 0) return -1;
    }
    return bg_median(t, reps);
}

static double prefill_median(accel_dev *d, const int32_t *ids, int P, float *lg,
                             const accel_kv_sink *k, int reps)
{
    return prefill_median_sp(d, ids, P, lg, k, reps, 1, NULL, NULL);
}

/* Decode `steps` greedy steps for B sequences after `ctx` tokens each: fills ms per step
 * (median) and returns tokens/s, or < 0 on error. */
static double decode_run(accel_dev *d, int vocab, int B, int ctx, int steps, int am, double *ms_step)
{
    accel_seq **seqs = calloc(B, sizeof *seqs);
    int32_t *tok = malloc(sizeof(int32_t) * B), *ids = bg_make_ids(ctx, vocab, 99);
    /* the logits buffer as the daemon's scheduler takes it (page-locked on the GPU) */
    const size_t lbytes = sizeof(float) * (size_t)B * vocab;
    float *lg = pageable_logits ? malloc(lbytes) : accel_host_alloc(d, lbytes);
    double *t = malloc(sizeof(double) * steps), rate = -1, total = 0;
    unsigned char *want = calloc((size_t)B, 1); /* am: no row's logits wanted */
    int32_t *next = malloc(sizeof(int32_t) * B);
    int st = seqs && tok && ids && lg && t && want && next ? 0 : ACCEL_ERR_NOMEM;
    for (int b = 0; b < B && !st; b++) {
        st = accel_seq_new(d, ctx + steps + 1, &seqs[b]);
        accel_prefill_req r = {.seq = seqs[b], .ids = ids, .n = ctx, .logits = lg + (size_t)b * vocab};
        if (!st) st = accel_prefill(d, &r);
        if (!st) tok[b] = argmax(lg + (size_t)b * vocab, vocab);
    }
    /* warm-up step (not timed) */
    if (!st) st = am ? accel_decode_argmax(d, B, seqs, tok, lg, want, next) : accel_decode(d, B, seqs, tok, lg);
    for (int i = 0; i < steps && !st; i++) {
        for (int b = 0; b < B; b++) tok[b] = am ? next[b] : argmax(lg + (size_t)b * vocab, vocab);
        double t0 = bg_now();
        st = am ? accel_decode_argmax(d, B, seqs, tok, lg, want, next) : accel_decode(d, B, seqs, tok, lg);
        t[i] = bg_now() - t0;
        total += t[i];
        for (int b = 0; b < B && am && !st; b++)
            if (next[b] < 0) st = ACCEL_ERR_DEVICE; /* no finite logit: the model's fault */
    }
    if (st) {
        fprintf(stderr, "bench_gpu: decode B=%d ctx=%d: %s\n", B, ctx, accel_strerror(st));
    } else {
        rate = (double)B * steps / total;
        *ms_step = bg_median(t, steps) * 1e3;
    }
    for (int b = 0; b < B && seqs; b++)
        if (seqs[b]) accel_seq_free(d, seqs[b]);
    if (pageable_logits) free(lg);
    else accel_host_free(d, lg);
    free(seqs), free(tok), free(ids), free(t), free(want), free(next);
    return rate;
}

static int prefix_run(accel_dev *d, int vocab, int P, int C, int reps, double *cold,
                      double *hit, double *host)
{
    accel_info in;
    accel_get_info(d, &in);
    const int B = in.kv_block_tokens;
    if (!(in.caps & ACCEL_CAP_PAGED) || B <= 0 || C % B || C <= 0 || C >= P || reps > 32) {
        fprintf(stderr, "bench_gpu: --prefix %d:%d needs a paged device and C a multiple of %d below P\n",
                P, C, B);
        return -1;
    }
    const int nblk = C / B;
    int32_t *ids = bg_make_ids(P, vocab, 5);
    float *lg = malloc(sizeof(float) * vocab);
    /* the host tier's layout: one page-locked buffer per cached prefix (sched_pcache.c) */
    unsigned char *hb = accel_host_alloc(d, (size_t)nblk * in.kv_block_bytes);
    double tc[32], th[32], tt[32];
    accel_seq *holder = NULL, *s = NULL;
    int st = ids && lg && hb ? 0 : ACCEL_ERR_NOMEM;
    /* the holder: the C cached tokens, and their blocks saved to host memory */
    if (!st) st = accel_seq_new(d, C, &holder);
    accel_prefill_req r0 = {.seq = holder, .ids = ids, .n = C, .logits = NULL};
    if (!st) st = accel_prefill(d, &r0);
    for (int i = 0; i < nblk && !st; i++)
        st = accel_kv_block_save(d, holder, i, hb + (size_t)i * in.kv_block_bytes);
    if (!st) st = accel_seq_hold(d, holder);
    for (int r = -1; r < reps && !st; r++) { /* r = -1: warm-up */
        double t0 = bg_now();
        st = accel_seq_new(d, P, &s);
        accel_prefill_req rc = {.seq = s, .ids = ids, .n = P, .logits = lg};
        if (!st) st = accel_prefill(d, &rc);
        double t1 = bg_now();
        if (s) accel_seq_free(d, s);
        s = NULL;
        if (!st) st = accel_seq_fork(d, holder, C, P, &s);
        accel_prefill_req rh = {.seq = s, .ids = ids + C, .n = P - C, .logits = lg};
        if (!st) st = accel_prefill(d, &rh);
        double t2 = bg_now();
        if (s) accel_seq_free(d, s);
        s = NULL;
        double t3 = bg_now();
        if (!st) st = accel_seq_new(d, P, &s);
        for (int i = 0; i < nblk && !st; i++)
            st = accel_kv_block_load(d, s, hb + (size_t)i * in.kv_block_bytes);
        accel_prefill_req rt = {.seq = s, .ids = ids + C, .n = P - C, .logits = lg};
        if (!st) st = accel_prefill(d, &rt);
        double t4 = bg_now();
        if (s) accel_seq_free(d, s);
        s = NULL;
        if (r >= 0) tc[r] = t1 - t0, th[r] = t2 - t1, tt[r] = t4 - t3;
    }
    if (st) fprintf(stderr, "bench_gpu: prefix %d:%d: %s\n", P, C, accel_strerror(st));
    else *cold = bg_median(tc, reps), *hit = bg_median(th, reps), *host = bg_median(tt, reps);
    if (holder) accel_seq_free(d, holder);
    accel_host_free(d, hb);
    free(ids), free(lg);
    return st ? -1 : 0;
}

/* The CUDA plugin's handle when it is loaded (for its benchmark entry points), else NULL. */
static void *plugin(void)
{
    char path[PATH_MAX + 32];
    const char *names[] = {"libtandem_cuda.so", "libtandem_cuda_f16.so"};
    for (int i = 0; i < 2; i++) {
        /* where devices_open loaded it from: beside the binary, else ../lib/tandem */
        devices_lib_find(names[i], path, sizeof path);
        void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (h) return h;
    }
    return NULL;
}

/* The test library beside the loaded plugin (libtandem_cuda_test.so for libtandem_cuda.so, the
 * same for _f16: gpu/test/), which holds the kernel timings of --attention; NULL without it. */
static void *test_library(void *plugin)
{
    struct link_map *lm = NULL;
    char path[PATH_MAX + 16];
    if (!plugin || dlinfo(plugin, RTLD_DI_LINKMAP, &lm) || !lm || !lm->l_name) return NULL;
    size_t n = strlen(lm->l_name);
    if (n < 3 || strcmp(lm->l_name + n - 3, ".so")) return NULL;
    snprintf(path, sizeof path, "%.*s_test.so", (int)(n - 3), lm->l_name);
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *device = "cuda";
    enum accel_gpu_half half = ACCEL_GPU_HALF_AUTO;
    long prefill[MAX_LIST], dctx[MAX_LIST], batch[MAX_LIST], exp_[MAX_LIST], att[MAX_LIST];
    long tls_ctx[MAX_LIST], tls_batch[MAX_LIST] = {1, 8};
    int ntls = 0, ntls_b = 2;
    long tls_budget = 1024, tls_blocks = 128;
    const char *tls_chan = NULL;
    long tls_off = 0;
    double host_margin = 12;
    const char *off_modes = "dense,pool_sparse,offloaded,mixed,pcie";
    int np = 0, nd = 0, nb = 0, ne = 0, na = 0, npx = 0;
    long pxP[MAX_LIST], pxC[MAX_LIST];
    long steps = 64, reps = 3, bctx = 1024, min_budget = 1024;
    long last_dense = -1; /* --last-dense: num_last_dense_tokens_in_prefill for every mode (-1: each mode's default) */
    double tau = 0.1;
    double gammas[MAX_LIST], maxf[MAX_LIST] = {0};
    int ng = 0, nmf = 1, sparse_only = 0, warm_once = 0, xstride = 8;
    long trec[MAX_LIST] = {1920};
    double xthr[MAX_LIST] = {0.8};
    int ntr = 1, nxt = 1, modes[3] = {SPARSE_MODE_FLEX}, nmodes = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!v && strcmp(a, "--sparse-only") && strcmp(a, "--argmax")) bad = 1; /* flags take no value */
        else if (!strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--gpu-dtype")) bad = accel_gpu_half_parse(v, &half) != 0;
        else if (!strcmp(a, "--prefill")) bad = (np = parse_list(v, prefill, 1, 1 << 20)) < 0;
        else if (!strcmp(a, "--prefix")) {
            npx = 0;
            for (const char *q = v; *q && npx < MAX_LIST;) {
                char *e1, *e2 = NULL;
                long P = strtol(q, &e1, 10), C = *e1 == ':' ? strtol(e1 + 1, &e2, 10) : -1;
                if (*e1 != ':' || P < 2 || P > (1 << 20) || C < 1 || C >= P) {
                    bad = 1;
                    break;
                }
                pxP[npx] = P, pxC[npx++] = C;
                q = *e2 == ',' ? e2 + 1 : e2;
                if (*e2 && *e2 != ',') bad = 1;
                if (bad) break;
            }
            bad = bad || npx == 0;
        }
        else if (!strcmp(a, "--decode-ctx")) bad = (nd = parse_list(v, dctx, 1, 1 << 20)) < 0;
        else if (!strcmp(a, "--tls")) bad = (ntls = parse_list(v, tls_ctx, 1, 1 << 20)) < 0;
        else if (!strcmp(a, "--tls-batch")) bad = (ntls_b = parse_list(v, tls_batch, 1, 256)) <= 0;
        else if (!strcmp(a, "--tls-budget")) bad = (tls_budget = atol(v)) < 1 || tls_budget > (1 << 20);
        else if (!strcmp(a, "--tls-blocks")) bad = (tls_blocks = atol(v)) < 1 || tls_blocks > 65536;
        else if (!strcmp(a, "--tls-channels")) tls_chan = v;
        else if (!strcmp(a, "--tls-offload")) bad = (tls_off = atol(v)) < 1 || tls_off > (1 << 20);
        else if (!strcmp(a, "--tls-host-margin")) bad = (host_margin = atof(v)) < 0;
        else if (!strcmp(a, "--tls-offload-modes")) off_modes = v;
        else if (!strcmp(a, "--tls-hostmap")) bad = (hostmap_gib = atol(v)) < 2 || hostmap_gib > 256;
        else if (!strcmp(a, "--batch")) bad = (nb = parse_list(v, batch, 1, 4096)) < 0;
        else if (!strcmp(a, "--export")) bad = (ne = parse_list(v, exp_, 1, 1 << 20)) < 0;
        else if (!strcmp(a, "--attention")) bad = (na = parse_list(v, att, 64, 1 << 20)) < 0;
        else if (!strcmp(a, "--steps")) bad = (steps = atol(v)) < 1 || steps > 100000;
        else if (!strcmp(a, "--reps")) bad = (reps = atol(v)) < 1 || reps > 32;
        else if (!strcmp(a, "--idle")) bad = (idle_ms = atol(v)) < 0 || idle_ms > 60000;
        else if (!strcmp(a, "--batch-ctx")) bad = (bctx = atol(v)) < 1 || bctx > (1 << 20);
        else if (!strcmp(a, "--sparse")) bad = (ng = parse_flist(v, gammas, 1e-6, 1)) <= 0;
        else if (!strcmp(a, "--sparse-max")) bad = (nmf = parse_flist(v, maxf, 0, 1)) <= 0;
        else if (!strcmp(a, "--sparse-mode")) {
            nmodes = 0;
            for (const char *q = v; *q && !bad;) {
                char name[32];
                size_t l = strcspn(q, ",");
                snprintf(name, sizeof name, "%.*s", (int)(l < 31 ? l : 31), q);
                bad = nmodes == 3 || (modes[nmodes++] = sparse_mode_parse(name)) < 0;
                q += l + (q[l] == ',');
            }
        }
        else if (!strcmp(a, "--xattention-threshold")) bad = (nxt = parse_flist(v, xthr, 1e-6, 1)) <= 0;
        else if (!strcmp(a, "--xattention-stride")) bad = (xstride = atoi(v)) < 1 || xstride > 128;
        else if (!strcmp(a, "--tri-recent")) bad = (ntr = parse_list(v, trec, 0, 1 << 20)) <= 0;
        else if (!strcmp(a, "--last-dense")) bad = (last_dense = atol(v)) < 0 || last_dense > (1 << 20);
        else if (!strcmp(a, "--min-budget")) bad = (min_budget = atol(v)) < 0 || min_budget > (1 << 20);
        else if (!strcmp(a, "--tau")) bad = !((tau = atof(v)) >= 0 && tau <= 1);
        else if (!strcmp(a, "--warm")) bad = !(warm_once = !strcmp(v, "once")) && strcmp(v, "each");
        else if (!strcmp(a, "--logits"))
            bad = !(pageable_logits = !strcmp(v, "pageable")) && strcmp(v, "host");
        else if (!strcmp(a, "--sparse-only")) {
            sparse_only = 1;
            continue; /* no value */
        } else if (!strcmp(a, "--argmax")) {
            argmax_too = 1;
            continue;
        } else bad = 1;
        if (bad) {
            fprintf(stderr, "bench_gpu: bad option %s (usage in tools/bench_gpu.c)\n", a);
            return 2;
        }
        i++;
    }
    if (!dir) {
        fprintf(stderr, "usage: bench_gpu --model DIR [options] (see tools/bench_gpu.c)\n");
        return 2;
    }
    char err[1024];
    double t0 = bg_now();
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return 1;
    }
    accel_opts o = {.kv_dtype = PROTO_KV_INT8, .gpu_half = half};
    char chan_path[512];
    long dense_blocks = 0; /* --tls-offload: the pool of the device opened without channels */
    if (tls_off) {
        accel_dev *d0 = devices_open(device, m, &o, err, sizeof err);
        if (!d0) {
            fprintf(stderr, "bench_gpu: %s\n", err);
            return 1;
        }
        accel_info i0;
        accel_get_info(d0, &i0);
        dense_blocks = i0.kv_blocks_total;
        accel_free(d0);
    }
    if (ntls || tls_off) {
        if (tls_chan) snprintf(chan_path, sizeof chan_path, "%s", tls_chan);
        else if (bg_tls_channels(m, chan_path, sizeof chan_path)) return 1;
        o.sparse_channels = chan_path;
    }
    char tune[512]; /* --tls-offload: the host pool (MemAvailable less the margin), pinned at open */
    const char *env = getenv("TANDEM_GPU_TUNE");
    const long pool_mb = tls_off ? bg_host_avail_kb() / 1024 - (long)(host_margin * 1024) : 0;
    snprintf(tune, sizeof tune, "%s%soffload_pool_mb=%ld", env ? env : "", env && *env ? "," : "", pool_mb > 0 ? pool_mb : 0);
    if (tls_off) o.gpu_tune = tune, o.decode_sparse = "asynctls,offload=1"; /* it reports the pool */
    accel_dev *d = devices_open(device, m, &o, err, sizeof err);
    if ((ntls || tls_off) && !tls_chan) unlink(chan_path);
    if (!d) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return 1;
    }
    int st = accel_warmup(d);
    if (st) {
        fprintf(stderr, "bench_gpu: warm-up: %s\n", accel_strerror(st));
        return 1;
    }
    accel_info info;
    accel_get_info(d, &info);
    printf("{\"bench\":\"open\",\"device\":\"%s\",\"desc\":\"%s\",\"load_s\":%.2f,"
           "\"kv_budget_gb\":%.2f,\"kv_bytes_per_token\":%llu}\n", info.name, info.desc,
           bg_now() - t0, info.mem_total / 1e9, (unsigned long long)info.kv_bytes_per_token);
    fflush(stdout);
    int V = m->cfg.vocab;
    float *lg = malloc(sizeof(float) * V);
    void *h = plugin();
    void (*stats)(accel_dev *, export_stats *) = h ? (void (*)(accel_dev *, export_stats *))dlsym(h, "gpu_accel_export_stats") : NULL;
    void *ht = test_library(h);
    int (*hostmap)(int, int, int, int, int, int, double *) =
        ht ? (int (*)(int, int, int, int, int, int, double *))dlsym(ht, "gpu_tls_bench_hostmap") : NULL;
    if (hostmap_gib && !hostmap) fprintf(stderr, "bench_gpu: --tls-hostmap: no test library\n");
    if (hostmap_gib && hostmap) {
        /* one offloaded row-step's selected keys (2 dense layers), in each host mapping */
        static const char *kn[4] = {"hostalloc", "register", "vmm", "register4k"};
        static const char *pn[8] = {"seq", "rand_far", "rand_adj", "clu_pool", "clu_near", "clu_adj",
                                    "win_512m", "win_2g"};
        const int Ls = m->cfg.n_layers > 2 ? m->cfg.n_layers - 2 : 1;
        const int keys = (int)tls_budget * m->cfg.n_kv_heads * Ls;
        double o[48];
        if ((st = hostmap(m->cfg.head_dim, Ls, m->cfg.n_kv_heads, keys, (int)hostmap_gib, 9, o))) {
            fprintf(stderr, "bench_gpu: hostmap: %s\n", accel_strerror(st));
            return 1;
        }
        for (int k = 0; k < 4; k++) {
            const double *x = o + k * 12;
            printf("{\"bench\":\"tls_hostmap\",\"kind\":\"%s\",\"ok\":%d,\"gib\":%ld,\"keys\":%d,"
                   "\"alloc_s\":%.2f,\"vmm_chunk\":%.0f,\"anon_huge_kb\":%.0f", kn[k], (int)x[11],
                   hostmap_gib, keys, x[8], x[9], x[10]);
            for (int p = 0; p < 8; p++) printf(",\"%s_gb_s\":%.2f", pn[p], x[p]);
            printf("}\n");
        }
        fflush(stdout);
    }
    int (*att_bench)(int, int, int, int, int, int, double *) =
        ht ? (int (*)(int, int, int, int, int, int, double *))dlsym(ht, "gpu_bench_attention") : NULL;

    uint64_t (*sp_bytes)(accel_dev *, int, int) =
        h ? (uint64_t (*)(accel_dev *, int, int))dlsym(h, "gpu_accel_sparse_bytes") : NULL;
    for (int i = 0; i < np; i++) {
        int32_t *ids = bg_make_ids((int)prefill[i], V, 1);
        double t = 0;
        if (!sparse_only) {
            t = prefill_median_sp(d, ids, (int)prefill[i], lg, NULL, (int)reps, !warm_once || i == 0,
                                  NULL, NULL);
            if (t < 0) return 1;
            printf("{\"bench\":\"prefill\",\"tokens\":%ld,\"ttft_ms\":%.2f,\"tok_s\":%.0f,"
                   "\"idle_ms\":%ld}\n", prefill[i], t * 1e3, prefill[i] / t, idle_ms);
            fflush(stdout);
        }
        float *lgd = NULL;
        if (!sparse_only && (lgd = malloc(sizeof(float) * V))) memcpy(lgd, lg, sizeof(float) * V);
        /* the runs: FlexPrefill gammas x max budgets, XAttention thresholds, Tri-shape recents */
        for (int mi = 0; mi < nmodes && ng > 0; mi++) {
        const int smode = modes[mi];
        const int nrun = smode == SPARSE_MODE_FLEX ? ng * nmf : smode == SPARSE_MODE_XATTN ? nxt : ntr;
        for (int ri = 0; ri < nrun; ri++) {
            int P = (int)prefill[i];
            accel_sparse sp;
            sparse_params_default(&sp.p, smode);
            char par[160];
            if (smode == SPARSE_MODE_FLEX) {
                const int g = ri / nmf, f = ri % nmf;
                sp.p.flex.gamma = (float)gammas[g];
                sp.p.flex.tau = (float)tau;
                sp.p.flex.min_budget = (int)min_budget;
                sp.p.flex.max_budget = (int)(maxf[f] * P);
                snprintf(par, sizeof par, "\"gamma\":%.3g,\"tau\":%.3g,\"min_budget\":%ld,\"max_budget\":%d",
                         gammas[g], tau, min_budget, sp.p.flex.max_budget);
            } else if (smode == SPARSE_MODE_XATTN) {
                sp.p.xattention_threshold = xthr[ri];
                sp.p.xattention_stride = xstride;
                snprintf(par, sizeof par, "\"threshold\":%.3g,\"stride\":%d", xthr[ri], xstride);
            } else {
                sp.p.num_retained_recent_tokens_in_cache = (int)trec[ri];
                snprintf(par, sizeof par, "\"start\":128,\"recent\":%ld", trec[ri]);
            }
            if (last_dense >= 0) sp.p.num_last_dense_tokens_in_prefill = (int)last_dense;
            if (sparse_params_check(&sp.p, err, sizeof err, NULL)) {
                fprintf(stderr, "bench_gpu: %s\n", err);
                return 2;
            }
            accel_sparse_report rep = {0};
            double tt[32];
            int nr = (int)reps;
            if ((!warm_once || i == 0) && prefill_planned(d, ids, P, lg, &sp, &rep) < 0) return 1;
            for (int r = 0; r < nr; r++)
                if ((tt[r] = prefill_planned(d, ids, P, lg, &sp, &rep)) < 0) return 1;
            const double ts = bg_median(tt, nr);
            double extra = sp_bytes && smode == SPARSE_MODE_FLEX ? sp_bytes(d, P, 0) / 1e9 : 0;
            printf("{\"bench\":\"prefill_sparse\",\"mode\":\"%s\",\"tokens\":%d,%s,"
                   "\"ttft_ms\":%.2f,\"dense_ttft_ms\":%.2f,"
                   "\"speedup\":%.3f,\"density\":%.4f,\"layers_sparse\":%d,"
                   "\"blocks_computed\":%lld,\"blocks_causal\":%lld,\"extra_gb\":%.3f,"
                   "\"last_dense\":%d,\"kl_last_vs_dense\":%.4g}\n",
                   sparse_mode_name(smode), P, par, ts * 1e3, t * 1e3, t > 0 ? t / ts : 0,
                   rep.density, rep.layers_sparse, (long long)rep.blocks_computed,
                   (long long)rep.blocks_causal, extra, sp.p.num_last_dense_tokens_in_prefill,
                   lgd ? kl_logits(lgd, lg, V) : -1.0);
            fflush(stdout);
        }
        }
        free(lgd);
        free(ids);
    }
    for (int i = 0; i < npx; i++) {
        double cold, hit, host;
        if (prefix_run(d, V, (int)pxP[i], (int)pxC[i], (int)reps, &cold, &hit, &host)) return 1;
        printf("{\"bench\":\"prefix\",\"tokens\":%ld,\"cached\":%ld,\"cold_ms\":%.2f,"
               "\"hit_ms\":%.2f,\"hit_pct_of_cold\":%.1f,\"host_tier_ms\":%.2f,"
               "\"host_tier_pct_of_cold\":%.1f}\n", pxP[i], pxC[i], cold * 1e3, hit * 1e3,
               100 * hit / cold, host * 1e3, 100 * host / cold);
        fflush(stdout);
    }
    for (int i = 0; i < nd; i++)
        for (int am = 0; am <= argmax_too; am++) {
            double ms = 0, rate = decode_run(d, V, 1, (int)dctx[i], (int)steps, am, &ms);
            if (rate < 0) return 1;
            printf("{\"bench\":\"decode%s\",\"context\":%ld,\"ms_per_token\":%.3f,\"tok_s\":%.1f}\n",
                   am ? "_argmax" : "", dctx[i], ms, rate);
            fflush(stdout);
        }
    int (*tls_k)(int, int, int, int, int, int, int, int, int, int, double *) =
        ht ? (int (*)(int, int, int, int, int, int, int, int, int, int, double *))dlsym(ht, "gpu_tls_bench_kernels") : NULL;
    for (int i = 0; i < ntls; i++) {
        /* one layer's sparse attention alone in each form (Llama-3-8B heads, 32 channels), then the
         * whole model */
        for (int bi = 0; bi < ntls_b && tls_k; bi++) {
            double us[22 + 3 * 11] = {0}; /* the two forms, the one-kernel form's 11 phases,
                                            * the one-kernel form in CTAs of 256 / 512
                                            * threads, the staggered forms and next launch, the
                                            * form in clusters of 2 (exact, staggered), the
                                            * clusters of 2 / 8 that fit, 3 x 11 more phases */
            if ((st = tls_k(m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim, (int)tls_ctx[i], 64, 32,
                            (int)tls_blocks, (int)tls_budget, (int)tls_batch[bi], 50, us))) {
                fprintf(stderr, "bench_gpu: tls kernels: %s\n", accel_strerror(st));
                break;
            }
            printf("{\"bench\":\"tls_kernels\",\"context\":%ld,\"batch\":%ld,\"one_kernel_us\":%.1f,"
                   "\"three_kernels_us\":%.1f,\"one_kernel_phases_us\":[", tls_ctx[i], tls_batch[bi],
                   us[0], us[1]);
            for (int k = 2; k < 13; k++) printf("%s%.2f", k > 2 ? "," : "", us[k]);
            printf("],\"one_kernel_256_us\":%.1f,\"one_kernel_512_us\":%.1f,\"stagger_one_kernel_us\":%.1f,"
                   "\"stagger_three_kernels_us\":%.1f,\"stagger_next_us\":%.1f,\"cl2_us\":%.1f,"
                   "\"stagger_cl2_us\":%.1f,\"fit2\":%.0f,\"fit8\":%.0f", us[13], us[14], us[15],
                   us[16], us[17], us[18], us[19], us[20], us[21]);
            static const char *const ph[3] = {"stagger_phases_us", "cl2_phases_us", "stagger_cl2_phases_us"};
            for (int t = 0; t < 3; t++) {
                printf(",\"%s\":[", ph[t]);
                for (int k = 0; k < 11; k++) printf("%s%.2f", k ? "," : "", us[22 + 11 * t + k]);
                printf("]");
            }
            printf("}\n");
            fflush(stdout);
        }
        if (bg_tls_run(d, m, (int)tls_ctx[i], tls_batch, ntls_b, (int)steps, (int)tls_budget,
                    (int)tls_blocks))
            return 1;
    }
    double new_blocks = 0;
    if (tls_off && bg_tls_off_run(d, m, (int)tls_off, (int)steps, (int)tls_budget, (int)tls_blocks,
                               dense_blocks, off_modes, &new_blocks))
        return 1;
    int (*pcie)(int, int, int, int, double *) =
        ht ? (int (*)(int, int, int, int, double *))dlsym(ht, "gpu_tls_bench_pcie") : NULL;
    if (tls_off && pcie && strstr(off_modes, "pcie") && new_blocks > 0) {
        /* one offloaded row-step's transfers each way (2 dense layers): the selected rows in
         * place, or the newly kept blocks' K and V runs by a kernel or by the copy engine */
        const int rows = (int)tls_budget * m->cfg.n_kv_heads * (m->cfg.n_layers - 2);
        const int runs = 2 * (int)(new_blocks + 0.5);
        double o[8] = {0};
        if ((st = pcie(m->cfg.head_dim, rows, runs > 0 ? runs : 1, 9, o))) {
            fprintf(stderr, "bench_gpu: pcie: %s\n", accel_strerror(st));
            return 1;
        }
        printf("{\"bench\":\"tls_pcie\",\"rows\":%d,\"block_runs\":%d,\"rows_gb_s\":%.2f,"
               "\"blocks_kernel_gb_s\":%.2f,\"blocks_copy_gb_s\":%.2f,\"bulk_gb_s\":%.2f,"
               "\"rows_us\":%.0f,\"blocks_kernel_us\":%.0f,\"blocks_copy_us\":%.0f,\"bulk_us\":%.0f}\n",
               rows, runs, o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]);
        fflush(stdout);
    }
    for (int i = 0; i < nb; i++)
        for (int am = 0; am <= argmax_too; am++) {
            double ms = 0, rate = decode_run(d, V, (int)batch[i], (int)bctx, (int)steps, am, &ms);
            if (rate < 0) return 1;
            printf("{\"bench\":\"batch%s\",\"batch\":%ld,\"context\":%ld,\"ms_per_step\":%.3f,"
                   "\"tok_s\":%.1f}\n", am ? "_argmax" : "", batch[i], bctx, ms, rate);
            fflush(stdout);
        }
    for (int i = 0; i < ne; i++) {
        int P = (int)exp_[i];
        int32_t *ids = bg_make_ids(P, V, 2);
        sink_ctx sc = {NULL, 0, 0};
        accel_kv_sink sink = {sink_layer, &sc};
        double plain = prefill_median(d, ids, P, lg, NULL, (int)reps);
        double with = prefill_median(d, ids, P, lg, &sink, (int)reps);
        free(ids);
        free(sc.buf);
        if (plain < 0 || with < 0) return 1;
        export_stats es = {0};
        if (stats) stats(d, &es);
        double gbs = es.copy_ms > 0 ? es.bytes / (es.copy_ms * 1e-3) / 1e9 : 0;
        printf("{\"bench\":\"export\",\"tokens\":%d,\"ttft_ms\":%.2f,\"ttft_export_ms\":%.2f,"
               "\"overhead_pct\":%.2f,\"bytes\":%llu,\"copy_ms\":%.3f,\"copy_gb_s\":%.2f,"
               "\"compute_ms\":%.2f,\"layers\":%d}\n", P, plain * 1e3, with * 1e3,
               (with / plain - 1) * 100, (unsigned long long)es.bytes, es.copy_ms, gbs,
               es.compute_ms, es.layers);
        fflush(stdout);
    }
    for (int i = 0; i < na && att_bench; i++) {
        static const char *names[] = {"mma.sync-4w", "", "mma.sync-8w", "wgmma", "wgmma-1wg",
                                      "wgmma-ws-nopp", "wgmma-ws-3stage"};
        for (int variant = 0; variant <= 6; variant += variant ? 1 : 2) {
            double ms = 0;
            int T = (int)att[i];
            if ((st = att_bench(variant, T, 32, 8, 128, (int)reps + 2, &ms))) {
                if (st == ACCEL_ERR_UNSUPPORTED) continue;
                fprintf(stderr, "bench_gpu: attention %d: %s\n", T, accel_strerror(st));
                return 1;
            }
            double flops = 4.0 * T * (double)T / 2 * 128 * 32;
            printf("{\"bench\":\"attention\",\"kernel\":\"%s\",\"tokens\":%d,\"ms\":%.3f,"
                   "\"tflops\":%.1f}\n", names[variant], T, ms,
                   flops / (ms * 1e-3) / 1e12);
            fflush(stdout);
        }
    }
    free(lg);
    accel_free(d);
    model_free(m);
    return 0;
}

/* tools/fpga_prefill_bench.c — the FPGA prefill path's numbers (BENCHMARKS.md).
 *
 *   build/fpga_prefill_bench [--check DIR] [--check-tokens T] [--long 8192,16384,32768]
 *                            [--sigu-max N] [--threads N] [--skip-long]
 *
 * 1. The emulator on stories260K: a prompt through the card's prefill kernel against the same
 *    prompt as one decode run per token (what fpga_prefill did before), wall clock on this
 *    machine and the timing model's modeled time.
 * 2. Modeled TTFT of a dense prefill on a U280 (fpga/pf_model.c: the prefill kernel's own
 *    commands and cycles, checked equal to the emulator's by tests/fpga/test_fpga_prefill_model.c)
 *    for LLaMA2-7B at 1536 tokens, W8A8 and W4A8, next to GLITCHES Table I's 5001 ms (FlightLLM
 *    on a U280) and the MPU-bound floor (every MAC at 12,288 per cycle, 225 MHz).
 * 3. Long prompts, dense vs FlexPrefill-sparse with the SAU's hot/cold KV cache, for FAST-Prefill's
 *    Llama-3.2-1B and Llama-3-8B shapes: per layer the projections / FFN from pf_model (QKV and
 *    POST runs), the sparse units from their own runs on the emulator on structured synthetic
 *    Q/K/V of the layer's shape (cpu/flex_synth.h): the SIGU up to --sigu-max tokens (above, the
 *    CPU reference builds the same index — tests/fpga shows them equal — and the SIGU's time is
 *    scaled linearly from the largest length it ran, its sweeps being linear in n), the SAU in
 *    schedule-only mode (its cache, traffic and cycles without the arithmetic). Inside the
 *    prefill kernel the units' q/k/v and output blocks are striped over the 32 channels
 *    (pf_layout.h), so their memory time is priced as their bytes and commands spread over 32
 *    channels (the standalone runs put each buffer in one channel). Every layer is priced like
 *    the measured one.
 * 4. --check DIR: a real checkpoint (tools/mkmodel --preset llama2-7b --layers 2) through the
 *    emulator: every prefill run's modeled time against pf_model's, and the wall time. */
#include "cpu/flex.h"
#include "cpu/flex_synth.h"
#include "cpu/pool.h"
#include "devices/devices.h"
#include "fpga/backend.h"
#include "fpga/flex_host.h"
#include "fpga/image.h"
#include "fpga/pf_model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* the host's share of a run: its start + wait (in the run's modeled time) and the status sync */
static double run_host_ns(void)
{
    return (double)fpga_dec_model_sync_ns(16);
}

/* ---------------------------------------------------------------- 1. emulator */

static void part1(void)
{
    char err[512];
    model *m = model_load("models/stories260K", err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    printf("## 1. Emulated card, stories260K: prefill kernel vs one decode run per token\n\n");
    printf("| prompt | path | wall ms | modeled ms (runs) | runs |\n|---:|---|---:|---:|---:|\n");
    accel_opts o = {.weight_bits = 8};
    accel_dev *d = devices_open("fpga-emu", m, &o, err, sizeof err);
    if (!d) {
        fprintf(stderr, "%s\n", err);
        model_free(m);
        return;
    }
    fpga_card *c = fpga_dev_card(d);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    const int ns[] = {128, 500};
    for (int k = 0; k < 2; k++) {
        int n = ns[k];
        int32_t *ids = malloc(sizeof *ids * n);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 5) % m->cfg.vocab);
        accel_seq *s;
        if (accel_seq_new(d, n, &s)) break;
        uint64_t r0 = c->pf_runs, ns0 = c->pf_modeled_ns;
        double t0 = now_s();
        accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg};
        int st = accel_prefill(d, &r);
        double w = now_s() - t0;
        printf("| %d | prefill kernel (%s) | %.1f | %.3f | %llu |\n", n,
               st ? accel_strerror(st) : "ok", w * 1e3, (c->pf_modeled_ns - ns0) / 1e6,
               (unsigned long long)(c->pf_runs - r0));
        accel_seq_free(d, s);
        if (accel_seq_new(d, n, &s)) break;
        r0 = c->dec_runs;
        ns0 = c->dec_modeled_ns;
        t0 = now_s();
        for (int i = 0; i < n; i++) accel_decode(d, 1, &s, &ids[i], lg);
        w = now_s() - t0;
        printf("| %d | decode run per token | %.1f | %.3f | %llu |\n", n, w * 1e3,
               (c->dec_modeled_ns - ns0) / 1e6, (unsigned long long)(c->dec_runs - r0));
        accel_seq_free(d, s);
        free(ids);
    }
    printf("\n");
    free(lg);
    accel_free(d);
    model_free(m);
}

/* ---------------------------------------------------------------- shapes */

typedef struct shape {
    const char *name;
    model_config cfg;
} shape;

static shape llama2_7b(void)
{
    return (shape){"LLaMA2-7B",
                   {.hidden = 4096,
                    .n_layers = 32,
                    .n_heads = 32,
                    .n_kv_heads = 32,
                    .head_dim = 128,
                    .intermediate = 11008,
                    .vocab = 32000,
                    .max_pos = 4096,
                    .rms_eps = 1e-5f}};
}
static shape llama3_8b(void)
{
    return (shape){"Llama-3-8B",
                   {.hidden = 4096,
                    .n_layers = 32,
                    .n_heads = 32,
                    .n_kv_heads = 8,
                    .head_dim = 128,
                    .intermediate = 14336,
                    .vocab = 128256,
                    .max_pos = 131072,
                    .rms_eps = 1e-5f}};
}
/* FAST-Prefill's smallest model (config.json of meta-llama/Llama-3.2-1B) */
static shape llama32_1b(void)
{
    return (shape){"Llama-3.2-1B",
                   {.hidden = 2048,
                    .n_layers = 16,
                    .n_heads = 32,
                    .n_kv_heads = 8,
                    .head_dim = 64,
                    .intermediate = 8192,
                    .vocab = 128256,
                    .max_pos = 131072,
                    .rms_eps = 1e-5f}};
}

static int desc_of(const shape *s, int bits, fpga_dec_desc *d)
{
    fpga_quant_opts q;
    char err[256];
    fpga_quant_opts_default(&q, bits, s->cfg.hidden);
    if (fpga_image_desc_cfg(&s->cfg, &q, d, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* Whether a prompt of n tokens fits a card: its KV slab (rounded as fpga_seq_new does) beside
 * the standing workspace in every channel's pool, and for the sparse path its workspace too. */
static int fits(const fpga_dec_desc *d, uint32_t n, int sparse)
{
    fpga_dec_layout lo;
    fpga_dec_layout_of(d, &lo);
    fpga_pf_ws w, ws;
    fpga_pf_ws_of(d, FPGA_PF_PASS, FPGA_PF_F_KVF, &w);
    fpga_pf_ws_of(d, n, FPGA_PF_F_KVF | FPGA_PF_F_SPARSE, &ws);
    uint64_t io = fpga_dec_align(fpga_dec_io_bytes(d), 4096);
    uint64_t bank =
        FPGA_U280_HBM_BANK_BYTES - (io > FPGA_CARD_STAGE_BYTES ? io : FPGA_CARD_STAGE_BYTES);
    uint64_t need = lo.image_bytes + w.bytes +
                    fpga_dec_slab_bytes(&lo, fpga_dec_part_tiles(n, d->kv_parts)) +
                    (sparse ? ws.bytes : 0);
    return need <= bank;
}

/* The host's input of a pass: embeddings and rotary angles, per channel one run of pieces of up
 * to 1 MiB through the staging slots (a sync each, kv_gather runs overlapped with the next
 * sync: the last one is exposed). */
static double input_ns(const fpga_dec_desc *d, uint32_t rows)
{
    double t = 0;
    const uint64_t per_ch[2] = {(rows + 31) / 32 * 4ull * d->hidden,
                                (rows + 31) / 32 * 4ull * d->head_dim};
    for (int a = 0; a < 2; a++)
        for (int ch = 0; ch < FPGA_DEC_CH; ch++)
            for (uint64_t off = 0; off < per_ch[a]; off += FPGA_CARD_STAGE_BYTES) {
                uint64_t k = per_ch[a] - off < FPGA_CARD_STAGE_BYTES ? per_ch[a] - off
                                                                     : FPGA_CARD_STAGE_BYTES;
                t += (double)fpga_dec_model_sync_ns(k);
            }
    return t + FPGA_U280_RUN_OVERHEAD_NS;
}

/* one HEAD run and the logits coming back */
static double head_ns(const fpga_dec_desc *d, uint32_t n)
{
    fpga_dec_cost c;
    fpga_pf_model_run(d, FPGA_PF_HEAD, 0, 0, n, n - 1, n, &c);
    return (double)c.modeled_ns + run_host_ns() + (double)fpga_dec_model_sync_ns(4ull * d->vocab);
}

typedef struct ttft {
    double total_ns, runs_ns, compute_ns, mem_ns, stall_ns, overhead_ns, host_ns;
    uint64_t runs;
} ttft;

static void add_run(ttft *t, const fpga_dec_cost *c)
{
    t->runs_ns += (double)c->modeled_ns;
    t->compute_ns += (double)c->compute_ns;
    t->mem_ns += (double)c->mem_ns;
    t->stall_ns += (double)c->stall_ns;
    t->overhead_ns += (double)c->overhead_ns;
    t->host_ns += run_host_ns();
    t->runs++;
}

/* A dense prompt of n tokens from an empty sequence: passes of FPGA_PF_PASS rows, DENSE for every
 * layer, then HEAD; plus the host's input per pass. */
static ttft dense_ttft(const fpga_dec_desc *d, uint32_t n)
{
    ttft t = {0};
    uint32_t np = 0;
    for (uint32_t done = 0; done < n; done += FPGA_PF_PASS) {
        np = n - done < FPGA_PF_PASS ? n - done : FPGA_PF_PASS;
        t.host_ns += input_ns(d, np);
        for (uint32_t l = 0; l < d->n_layers; l++) {
            fpga_dec_cost c;
            fpga_pf_model_run(d, FPGA_PF_DENSE, l, done, np, 0, np, &c);
            add_run(&t, &c);
        }
    }
    t.host_ns += head_ns(d, np);
    t.total_ns = t.runs_ns + t.host_ns;
    return t;
}

/* int8 MACs of one token's projections and FFN per layer */
static double layer_macs(const fpga_dec_desc *d)
{
    double qd = d->n_heads * d->head_dim, kvd = d->n_kv_heads * d->head_dim;
    return (double)d->hidden * (qd + 2 * kvd) + qd * d->hidden + 3.0 * d->hidden * d->inter;
}

static double mpu_ns(double macs, double hz)
{
    return macs / FPGA_FLEX_MPU_MACS / hz * 1e9;
}

/* ---------------------------------------------------------------- 2. LLaMA2-7B 1536 */

static void part2(void)
{
    printf("## 2. Modeled TTFT, dense prefill on a U280: LLaMA2-7B, 1536 tokens "
           "(fpga/pf_model.c)\n\n");
    printf(
        "TTFT = the prefill kernel's runs (32 layers x 3 passes of 512 rows, then lm_head of the "
        "last row; each run 50 us + max(busiest channel, MPU/SFU cycles) + stalls) + the host "
        "(embeddings and rotary angles over PCIe, a status sync per run, the logits). MPU floor = "
        "every MAC (projections, FFN, causal attention, lm_head row) at 12,288 int8 MACs per "
        "cycle. GLITCHES Table I: 5001.2 ms on a U280 with FlightLLM (~W4A8, 6.91 TOPS peak, "
        "61.15 %% compute utilisation), A100 175.85 ms.\n\n");
    printf("| weights | TTFT ms (225 MHz) | runs | compute ms | memory ms (busiest channel) | "
           "stalls ms | run overheads ms | host ms | MPU floor ms | MPU floor at 175 MHz | "
           "GLITCHES U280 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    shape s = llama2_7b();
    const uint32_t n = 1536;
    for (int bits = 8; bits >= 4; bits -= 4) {
        fpga_dec_desc d;
        if (desc_of(&s, bits, &d)) continue;
        ttft t = dense_ttft(&d, n);
        double attn = (double)d.n_layers * d.n_heads * d.head_dim * 2.0 * ((double)n * (n + 1) / 2);
        double macs = layer_macs(&d) * d.n_layers * n + attn + (double)d.hidden * d.vocab;
        printf(
            "| W%dA8%s | %.0f | %llu | %.0f | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f | 5001 |\n",
            bits, bits == 4 ? " g128" : " per-row", t.total_ns / 1e6, (unsigned long long)t.runs,
            t.compute_ns / 1e6, t.mem_ns / 1e6, t.stall_ns / 1e6, t.overhead_ns / 1e6,
            t.host_ns / 1e6, mpu_ns(macs, FPGA_U280_KERNEL_HZ) / 1e6, mpu_ns(macs, 175e6) / 1e6);
    }
    printf("\n");
}

/* ---------------------------------------------------------------- 3. long prompts */

typedef struct units {
    double density, hit, hot, cold;
    double kv_mib, kv_mib_nocache, kv_mib_naive;
    double sigu_ns, sau_ns, sau_nocache_ns;
    double sau1_ns, sau1_nocache_ns; /* the standalone runs' own time: each buffer in one channel */
    int sigu_ran, n_qa;
} units;

/* a standalone unit run priced as inside the prefill kernel: its bytes and commands striped */
static double striped_ns(const fpga_emu_run_stats *r)
{
    uint64_t cmds = 0;
    for (int c = 0; c < FPGA_DEC_CH; c++) cmds += r->chan_cmds[c];
    double mem = (double)(r->bytes_read + r->bytes_written) / FPGA_DEC_CH /
                     (FPGA_U280_HBM_PC_BPS * FPGA_U280_HBM_UTIL) * 1e9 +
                 (double)cmds / FPGA_DEC_CH * FPGA_U280_CMD_CYCLES / FPGA_U280_KERNEL_HZ * 1e9;
    return (double)r->overhead_ns + (mem > r->compute_ns ? mem : (double)r->compute_ns) +
           (double)r->stall_ns;
}

static int run_units(fpga_xrt *x, xrtDeviceHandle dev, cpu_pool *pool, const fpga_dec_desc *d,
                     int n, int sigu_max, double *sigu_ns_per_token, units *u)
{
    const int H = (int)d->n_heads, G = (int)d->n_kv_heads, hd = (int)d->head_dim;
    const int nb = (n + FPGA_FLEX_BS - 1) / FPGA_FLEX_BS;
    float *q = malloc(sizeof(float) * n * H * hd), *k = malloc(sizeof(float) * n * G * hd),
          *v = malloc(sizeof(float) * n * G * hd);
    uint8_t *qp = malloc(fpga_flex_q_bytes(n, H, hd)), *kvp = malloc(fpga_flex_kv_bytes(n, G, hd));
    if (!q || !k || !v || !qp || !kvp) return -1;
    cpu_flex_synth syn = {CPU_FLEX_SYNTH_STRUCTURED, n, H, G, hd, FPGA_FLEX_BS, 5};
    cpu_flex_synth_rows(&syn, 0, n, q, k, v);
    fpga_flex_pack_q(q, (size_t)H * hd, n, H, hd, qp);
    fpga_flex_pack_kv(k, v, (size_t)G * hd, n, G, hd, kvp);
    fpga_flex_opts o;
    fpga_flex_opts_default(&o, hd);
    o.min_blocks = 1024 / FPGA_FLEX_BS; /* the official defaults: gamma 0.9, tau 0.1, 1024 tokens */
    o.schedule_only = 1;
    uint32_t *rp = NULL, *col = NULL;
    u->sigu_ran = n <= sigu_max;
    if (!u->sigu_ran) {
        fpga_flex_unpack_q(qp, n, H, hd, q);
        fpga_flex_unpack_kv(kvp, n, G, hd, k, v);
        sparse_flex_params cp;
        sparse_flex_params_default(&cp);
        cpu_flex_qkv xq = {n, H, G, hd, q, (size_t)H * hd, k, v, (size_t)G * hd, 0};
        cpu_flex_index *ix;
        if (cpu_flex_index_build(pool, &cp, &xq, &ix)) return -1;
        rp = malloc(sizeof(uint32_t) * H * (nb + 1));
        col = malloc(sizeof(uint32_t) * (ix->nnz ? ix->nnz : 1));
        for (size_t i = 0; i < (size_t)H * (nb + 1); i++) rp[i] = (uint32_t)ix->row_ptr[i];
        for (int64_t i = 0; i < ix->nnz; i++) col[i] = (uint32_t)ix->col[i];
        u->n_qa = 0;
        for (int h = 0; h < H; h++) u->n_qa += ix->query_aware[h];
        cpu_flex_index_free(ix);
        o.index_row_ptr = rp;
        o.index_col = col;
    }
    free(q);
    free(k);
    free(v);
    fpga_flex_result r;
    int rc = fpga_flex_attention(x, dev, &o, qp, kvp, n, H, G, hd, &r);
    if (!rc) {
        const uint64_t nnz = r.row_ptr[(size_t)H * (nb + 1) - 1];
        u->density = (double)nnz / ((double)H * nb * (nb + 1) / 2);
        const fpga_flex_sau_stats *st = &r.sau;
        double acc = st->accesses ? (double)st->accesses : 1;
        u->hit = st->hits / acc;
        u->hot = st->hot_hits / acc;
        u->cold = st->cold_hits / acc;
        u->kv_mib = st->kv_bytes / 1048576.0;
        u->kv_mib_nocache = st->kv_bytes_nocache / 1048576.0;
        u->kv_mib_naive = st->kv_bytes_naive / 1048576.0;
        u->sau_ns = striped_ns(&r.sau_run);
        u->sau1_ns = (double)r.sau_run.modeled_ns;
        if (r.sigu_ran) {
            u->sigu_ns = striped_ns(&r.sigu_run);
            *sigu_ns_per_token = u->sigu_ns / n;
            u->n_qa = 0;
            for (int h = 0; h < H; h++) u->n_qa += (int)r.info[h].query_aware;
        } else {
            u->sigu_ns = *sigu_ns_per_token * n;
        }
        /* the same index and schedule without the cache: every block use a fetch */
        o.cache_blocks = o.hot_blocks = 0;
        o.index_row_ptr = r.row_ptr;
        o.index_col = r.col;
        fpga_flex_result rn;
        rc = fpga_flex_attention(x, dev, &o, qp, kvp, n, H, G, hd, &rn);
        if (!rc) u->sau_nocache_ns = striped_ns(&rn.sau_run);
        if (!rc) u->sau1_nocache_ns = (double)rn.sau_run.modeled_ns;
        fpga_flex_result_free(&rn);
        fpga_flex_result_free(&r);
    }
    free(rp);
    free(col);
    free(qp);
    free(kvp);
    return rc;
}

static void part3(const char *lens, int sigu_max, int threads)
{
    char err[256];
    fpga_xrt *x = fpga_xrt_new("build/libxrt_emu.so", err, sizeof err);
    xrtDeviceHandle dev;
    if (!x || fpga_xrt_device_open(x, 0, &dev)) {
        fprintf(stderr, "fpga_prefill_bench: %s\n", x ? fpga_xrt_error() : err);
        return;
    }
    cpu_pool *pool = cpu_pool_new(threads);
    printf("## 3. Long prompts: dense vs FlexPrefill (gamma 0.9, tau 0.1, min budget 1024) on a "
           "U280\n\n");
    fprintf(stderr, "(QKV and POST runs of %d rows at most)\n", FPGA_PF_RUN_ROWS);
    printf(
        "Structured synthetic attention (sinks, local windows, vertical columns, query-specific "
        "blocks; cpu/flex_synth.h), W8A8. TTFT = layers x (QKV + SIGU + SAU + POST) + lm_head + "
        "host, the SAU with FAST-Prefill's 16 MB cache (half hot) and windows of 16 query blocks; "
        "hit rate = hits / (window, KV block) uses; KV MiB per layer with / without the cache / "
        "row-major gather (every tile fetches its block). \"fits\": the prompt's KV and the "
        "standing workspace in the KV pool left after the weight image, dense / sparse (the sparse "
        "pass's workspace too). SAU ms: striped over "
        "the 32 channels as inside the prefill kernel, with the cache / without; \"1 ch\": the "
        "same schedule with the KV stream in one pseudo-channel (14.4 GB/s), with / without the "
        "cache.\n\n");
    printf("| model | n | fits dense / sparse | density | hit rate (hot/cold) | KV MiB with cache "
           "| without | "
           "row-major | SIGU ms/layer | SAU ms/layer (no cache) | SAU 1 ch ms (no cache) | dense "
           "TTFT s | sparse TTFT s | speedup | sparse TTFT 1 ch s (no cache) |\n"
           "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    shape shapes[2] = {llama32_1b(), llama3_8b()};
    for (int si = 0; si < 2; si++) {
        fpga_dec_desc d;
        if (desc_of(&shapes[si], 8, &d)) continue;
        double sigu_per_token = 0;
        for (const char *p = lens; *p;) {
            char *end;
            long n = strtol(p, &end, 10);
            if (end == p || n < 2 * FPGA_FLEX_BS || n > FPGA_FLEX_MAX_TOKENS) {
                fprintf(stderr, "fpga_prefill_bench: bad length at %s\n", p);
                break;
            }
            p = *end == ',' ? end + 1 : end;
            units u = {0};
            double t0 = now_s();
            if (run_units(x, dev, pool, &d, (int)n, sigu_max, &sigu_per_token, &u)) {
                fprintf(stderr, "fpga_prefill_bench: n %ld: %s\n", n, fpga_xrt_error());
                continue;
            }
            ttft dn = dense_ttft(&d, (uint32_t)n);
            /* sparse: one pass of n rows, QKV + ATTN + POST per layer */
            ttft sp = {0};
            sp.host_ns = input_ns(&d, (uint32_t)n) + head_ns(&d, (uint32_t)n);
            const uint32_t f = FPGA_PF_F_KVF | FPGA_PF_F_SPARSE;
            double lin = 0;
            for (uint32_t l = 0; l < d.n_layers; l++) {
                /* QKV and POST in runs of FPGA_PF_RUN_ROWS rows, as fpga/prefill.c splits them */
                for (uint32_t r0 = 0; r0 < (uint32_t)n; r0 += FPGA_PF_RUN_ROWS) {
                    uint32_t r1 =
                        (uint32_t)n - r0 < FPGA_PF_RUN_ROWS ? (uint32_t)n : r0 + FPGA_PF_RUN_ROWS;
                    fpga_dec_cost c;
                    fpga_pf_model_run(&d, FPGA_PF_QKV | f, l, 0, (uint32_t)n, r0, r1, &c);
                    add_run(&sp, &c);
                    lin += (double)c.modeled_ns;
                    fpga_pf_model_run(&d, FPGA_PF_POST | f, l, 0, (uint32_t)n, r0, r1, &c);
                    add_run(&sp, &c);
                    lin += (double)c.modeled_ns;
                }
                sp.host_ns +=
                    run_host_ns() + (double)fpga_dec_model_sync_ns(sizeof(fpga_pf_report));
            }
            double attn = d.n_layers * (u.sigu_ns + u.sau_ns);
            double attn_nc = d.n_layers * (u.sigu_ns + u.sau_nocache_ns);
            double sparse_s = (sp.runs_ns + sp.host_ns + attn) / 1e9;
            double sparse_nc_s = (sp.runs_ns + sp.host_ns + attn_nc) / 1e9;
            double one_s = (sp.runs_ns + sp.host_ns + d.n_layers * (u.sigu_ns + u.sau1_ns)) / 1e9;
            double one_nc_s =
                (sp.runs_ns + sp.host_ns + d.n_layers * (u.sigu_ns + u.sau1_nocache_ns)) / 1e9;
            (void)sparse_nc_s;
            double dense_s = (dn.total_ns) / 1e9;
            printf("| %s | %ld | %s | %.3f | %.1f%% (%.1f / %.1f) | %.1f | %.1f | %.1f | %.2f%s | "
                   "%.2f (%.2f) | %.2f (%.2f) | %.2f | %.2f | %.2fx | %.2f (%.2f) |\n",
                   shapes[si].name, n,
                   fits(&d, (uint32_t)n, 0) ? (fits(&d, (uint32_t)n, 1) ? "yes / yes" : "yes / no")
                                            : (fits(&d, (uint32_t)n, 1) ? "no / yes" : "no / no"),
                   u.density, 100 * u.hit, 100 * u.hot, 100 * u.cold, u.kv_mib, u.kv_mib_nocache,
                   u.kv_mib_naive, u.sigu_ns / 1e6, u.sigu_ran ? "" : "*", u.sau_ns / 1e6,
                   u.sau_nocache_ns / 1e6, u.sau1_ns / 1e6, u.sau1_nocache_ns / 1e6, dense_s,
                   sparse_s, dense_s / sparse_s, one_s, one_nc_s);
            fprintf(stderr,
                    "%s n %ld: emulator %.1f s; projections+FFN %.2f s of the sparse TTFT; "
                    "%d query-aware heads\n",
                    shapes[si].name, n, now_s() - t0, lin / 1e9, u.n_qa);
            fflush(stdout);
        }
    }
    printf("\n* scaled from the largest length the SIGU ran on the emulator (linear in n).\n\n");
    cpu_pool_free(pool);
    fpga_xrt_device_close(x, dev);
    fpga_xrt_free(x);
}

/* ---------------------------------------------------------------- 4. a real big shape */

static void part4(const char *dir, int tokens)
{
    char err[512];
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    printf(
        "## 4. A real %d-layer checkpoint of %s through the emulator: %d-token dense prefill\n\n",
        m->cfg.n_layers, dir, tokens);
    printf("| weights | wall s | modeled ms (runs) | pf_model ms | runs equal to the model |\n"
           "|---|---:|---:|---:|---|\n");
    for (int bits = 8; bits >= 4; bits -= 4) {
        accel_opts o = {.weight_bits = bits};
        accel_dev *d = devices_open("fpga-emu", m, &o, err, sizeof err);
        if (!d) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        fpga_card *c = fpga_dev_card(d);
        int32_t *ids = malloc(sizeof *ids * tokens);
        for (int i = 0; i < tokens; i++) ids[i] = (int32_t)((i * 37 + 5) % m->cfg.vocab);
        float *lg = malloc(sizeof(float) * m->cfg.vocab);
        accel_seq *s;
        if (accel_seq_new(d, tokens, &s) == 0) {
            /* layer by layer as the backend runs it, each run against the model */
            uint64_t ns0 = c->pf_modeled_ns;
            double t0 = now_s(), model_ns = 0;
            accel_prefill_req r = {.seq = s, .ids = ids, .n = tokens, .logits = lg};
            int st = accel_prefill(d, &r);
            double wall = now_s() - t0;
            uint32_t np = 0;
            for (uint32_t done = 0; done < (uint32_t)tokens; done += FPGA_PF_PASS) {
                np =
                    (uint32_t)tokens - done < FPGA_PF_PASS ? (uint32_t)tokens - done : FPGA_PF_PASS;
                for (uint32_t l = 0; l < c->desc.n_layers; l++) {
                    fpga_dec_cost mc;
                    fpga_pf_model_run(&c->desc, FPGA_PF_DENSE, l, done, np, 0, np, &mc);
                    model_ns += (double)mc.modeled_ns;
                }
            }
            fpga_dec_cost mh;
            fpga_pf_model_run(&c->desc, FPGA_PF_HEAD, 0, 0, np, np - 1, np, &mh);
            model_ns += (double)mh.modeled_ns;
            int equal = !st && mh.modeled_ns == c->last_pf.modeled_ns &&
                        (double)(c->pf_modeled_ns - ns0) == model_ns;
            printf("| W%dA8 | %.1f | %.3f | %.3f | %s |\n", bits, wall,
                   (c->pf_modeled_ns - ns0) / 1e6, model_ns / 1e6, equal ? "yes" : "NO");
            accel_seq_free(d, s);
        }
        free(ids);
        free(lg);
        accel_free(d);
    }
    printf("\n");
    model_free(m);
}

int main(int argc, char **argv)
{
    const char *check = NULL, *lens = "8192,16384,32768";
    int tokens = 128, sigu_max = 8192, threads = 2, skip_long = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check") && i + 1 < argc)
            check = argv[++i];
        else if (!strcmp(argv[i], "--check-tokens") && i + 1 < argc)
            tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--long") && i + 1 < argc)
            lens = argv[++i];
        else if (!strcmp(argv[i], "--sigu-max") && i + 1 < argc)
            sigu_max = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skip-long"))
            skip_long = 1;
        else {
            fprintf(stderr, "usage: fpga_prefill_bench [--check DIR] [--check-tokens T] "
                            "[--long N,N,...] [--sigu-max N] [--threads N] [--skip-long]\n");
            return 2;
        }
    }
    if (tokens < 1 || tokens > 4096 || threads < 1 || threads > 64 || sigu_max < 0) {
        fprintf(stderr, "fpga_prefill_bench: --check-tokens 1..4096, --threads 1..64\n");
        return 2;
    }
    part1();
    part2();
    if (!skip_long) part3(lens, sigu_max, threads);
    if (check) part4(check, tokens);
    return 0;
}

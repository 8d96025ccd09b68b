/* tools/bench_gpu/tls.c — bench_gpu's AsyncTLS modes (--tls, --tls-offload; tools/bench_gpu.c's
 * top comment says what each measures) and the channel file they write when none is given. */
#include "tools/bench_gpu/tls.h"
#include "tools/bench_gpu/common.h"
#include "model/ckpt/tls_channels.h"
#include "sparse/tls.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* B rows truncated back to ctx and set to params p (NULL: dense), one untimed step (the graph's
 * capture, the summaries), then `steps` timed steps into t: their median in ms into *ms; a status. */
static int tls_steps(accel_dev *d, int ctx, int B, accel_seq **seqs, const int32_t *tok, float *lg, double *t,
                     int steps, const sparse_tls_params *p, double *ms)
{
    int st = 0;
    for (int b = 0; b < B && !st; b++) {
        st = accel_seq_truncate(d, seqs[b], ctx);
        if (!st) st = accel_seq_decode_sparse(d, seqs[b], p);
    }
    if (!st) st = accel_decode(d, B, seqs, tok, lg);
    for (int i = 0; i < steps && !st; i++) {
        double a = bg_now();
        st = accel_decode(d, B, seqs, tok, lg);
        t[i] = bg_now() - a;
    }
    if (!st) *ms = bg_median(t, steps) * 1e3;
    return st;
}

/* BENCH_TLS_AB (--tls's A/B rounds, in one prefill): a list of settings separated by ';', each
 * "base" or VAR=VALUE pairs separated by ',' (switches the engine reads per step, in
 * gpu_tls_prepare: the kernels then take them from the rows' metadata, which a captured graph
 * follows; 2026-11-29 tlsb1 measured its L2 requests so, since removed). After the three modes, BENCH_TLS_AB_ROUNDS
 * rounds (default 2) of every setting in turn, each the exact then the staggered form, --steps
 * timed steps each (medians): one "tls_ab" line per setting and round. Each variable is restored
 * after its setting. 0 or a status. */
static int tls_ab(accel_dev *d, int ctx, int B, accel_seq **seqs, const int32_t *tok, float *lg, double *t,
                  int steps, const sparse_tls_params *sp, const sparse_tls_params *sg)
{
    const char *list = getenv("BENCH_TLS_AB"), *re = getenv("BENCH_TLS_AB_ROUNDS");
    const int rounds = re && atoi(re) > 0 && atoi(re) <= 16 ? atoi(re) : 2;
    int st = 0;
    for (int r = 0; r < rounds && list && !st; r++)
        for (const char *a = list; *a && !st; a += strcspn(a, ";"), a += *a == ';') {
            char set[256], *sv[8], *old[8];
            snprintf(set, sizeof set, "%.*s", (int)strcspn(a, ";"), a);
            char lab[256];
            snprintf(lab, sizeof lab, "%s", set);
            int nv = 0;
            for (char *v = strtok(set, ","); v && nv < 8; v = strtok(NULL, ",")) {
                char *eq = strchr(v, '=');
                if (!eq) continue;
                *eq = 0;
                sv[nv] = v;
                old[nv] = getenv(v) ? strdup(getenv(v)) : NULL;
                setenv(v, eq + 1, 1);
                nv++;
            }
            double ms[2] = {0, 0};
            for (int mode = 0; mode < 2 && !st; mode++)
                st = tls_steps(d, ctx, B, seqs, tok, lg, t, steps, mode ? sg : sp, &ms[mode]);
            for (int i = 0; i < nv; i++) {
                if (old[i]) setenv(sv[i], old[i], 1);
                else unsetenv(sv[i]);
                free(old[i]);
            }
            if (!st)
                printf("{\"bench\":\"tls_ab\",\"context\":%d,\"batch\":%d,\"round\":%d,\"set\":\"%s\","
                       "\"sparse_ms\":%.3f,\"stagger_ms\":%.3f}\n",
                       ctx, B, r, lab, ms[0], ms[1]);
            fflush(stdout);
        }
    return st;
}

/* --tls (see the top): one context, every batch of the list; 0 or -1. */
int bg_tls_run(accel_dev *d, const model *m, int ctx, const long *batch, int nbatch, int steps,
               int budget, int blocks)
{
    const int V = m->cfg.vocab;
    int32_t *ids = bg_make_ids(ctx, V, 5);
    int Bmax = 1;
    for (int i = 0; i < nbatch; i++) Bmax = batch[i] > Bmax ? (int)batch[i] : Bmax;
    float *lg = accel_host_alloc(d, sizeof(float) * (size_t)Bmax * V);
    accel_seq *p0 = NULL, **seqs = calloc(Bmax, sizeof *seqs);
    int32_t *tok = malloc(sizeof(int32_t) * Bmax);
    double *t = malloc(sizeof(double) * steps);
    const int cap = ctx + 2 * steps + 4;
    int st = ids && lg && seqs && tok && t ? accel_seq_new(d, cap, &p0) : ACCEL_ERR_NOMEM;
    double t0 = bg_now();
    accel_prefill_req r = {.seq = p0, .ids = ids, .n = ctx, .logits = lg};
    if (!st) st = accel_prefill(d, &r);
    const double pf = bg_now() - t0;
    sparse_tls_params sp;
    sparse_tls_params_default(&sp);
    sp.token_budget = budget;
    sp.block_budget = blocks;
    sparse_tls_params sg = sp; /* the staggered form (stagger=1) */
    sg.stagger = 1;
    for (int bi = 0; bi < nbatch && !st; bi++) {
        const int B = (int)batch[bi];
        for (int b = 0; b < B && !st; b++) st = accel_seq_fork(d, p0, ctx, cap, &seqs[b]);
        for (int b = 0; b < B; b++) tok[b] = ids[(b * 7 + 3) % ctx];
        double ms[3] = {0, 0, 0};
        accel_decode_stats sum = {0};
        for (int mode = 0; mode < 3 && !st; mode++) {
            st = tls_steps(d, ctx, B, seqs, tok, lg, t, steps, mode == 2 ? &sg : mode ? &sp : NULL, &ms[mode]);
            for (int b = 0; b < B && !st && mode == 1; b++) { /* the exact form's counts */
                accel_decode_stats ds;
                st = accel_seq_decode_stats(d, seqs[b], &ds);
                sum.keys_read += ds.keys_read, sum.keys_total += ds.keys_total;
                sum.blocks_new += ds.blocks_new, sum.blocks_kept += ds.blocks_kept;
                sum.steps += ds.steps;
            }
        }
        if (!st) st = tls_ab(d, ctx, B, seqs, tok, lg, t, steps, &sp, &sg);
        for (int b = 0; b < B; b++)
            if (seqs[b]) accel_seq_free(d, seqs[b]), seqs[b] = NULL;
        if (st) break;
        /* one level-1 block of one layer and KV head: 64 positions of K and V, h16 */
        const double blk = 64.0 * m->cfg.head_dim * 2 * 2;
        const double per = sum.steps ? 1.0 / (double)sum.steps : 0; /* per sequence-step */
        printf("{\"bench\":\"tls\",\"context\":%d,\"batch\":%d,\"token_budget\":%d,"
               "\"block_budget\":%d,\"dense_ms\":%.3f,\"sparse_ms\":%.3f,\"speedup\":%.3f,"
               "\"dense_tok_s\":%.1f,\"sparse_tok_s\":%.1f,\"kv_read_frac\":%.4f,"
               "\"blocks_new_per_seq_step\":%.1f,\"blocks_kept_per_seq_step\":%.1f,"
               "\"offload_mb_per_seq_step\":%.2f,\"whole_block_mb_per_seq_step\":%.2f,"
               "\"prefill_s\":%.2f,\"stagger_ms\":%.3f,\"stagger_speedup\":%.3f}\n",
               ctx, B, budget, blocks, ms[0], ms[1], ms[1] > 0 ? ms[0] / ms[1] : 0,
               ms[0] > 0 ? B * 1e3 / ms[0] : 0, ms[1] > 0 ? B * 1e3 / ms[1] : 0,
               sum.keys_total ? (double)sum.keys_read / (double)sum.keys_total : 0,
               sum.blocks_new * per, sum.blocks_kept * per, sum.blocks_new * per * blk / 1e6,
               sum.blocks_kept * per * blk / 1e6, pf, ms[2], ms[2] > 0 ? ms[0] / ms[2] : 0);
        fflush(stdout);
    }
    if (st) fprintf(stderr, "bench_gpu: tls ctx=%d: %s\n", ctx, accel_strerror(st));
    if (p0) accel_seq_free(d, p0);
    if (lg) accel_host_free(d, lg);
    free(ids), free(seqs), free(tok), free(t);
    return st ? -1 : 0;
}

/* MemAvailable in kB, or what a memory cgroup's limit (v2, else v1) leaves when lower. */
long bg_host_avail_kb(void)
{
    static const char *f[5] = {"/proc/meminfo", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
                               "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                               "/sys/fs/cgroup/memory/memory.usage_in_bytes"};
    long kb = 0;
    double v[5] = {0, 0, 0, 0, 0};
    char line[256];
    for (int i = 0; i < 5; i++) {
        FILE *g = fopen(f[i], "r");
        while (i == 0 && g && fgets(line, sizeof line, g) && sscanf(line, "MemAvailable: %ld kB", &kb) != 1) {}
        if (i && g && fscanf(g, "%lf", &v[i]) != 1) v[i] = 0;
        if (g) fclose(g);
    }
    for (int i = 1; i < 5; i += 2)
        if (v[i] > 0 && v[i] < 1e15 && (v[i] - v[i + 1]) / 1024 < kb) kb = (long)((v[i] - v[i + 1]) / 1024);
    return kb;
}

/* --tls-offload (see the top): 0 or -1. dense_blocks: the pool of the device without channels. */
int bg_tls_off_run(accel_dev *d, const model *m, int ctx, int steps, int budget, int blocks,
                   long dense_blocks, const char *modes, double *new_blocks)
{
    const model_config *c = &m->cfg;
    const int V = c->vocab, Ld = 2, L = c->n_layers, hd = c->head_dim, n_kv = c->n_kv_heads;
    accel_info in;
    accel_get_info(d, &in);
    const int cap = ctx + 2 * steps + 4, bt = in.kv_block_tokens > 0 ? in.kv_block_tokens : 128;
    const long nblk = (cap + bt - 1) / bt;
    const double row = 2.0 * n_kv * (double)cap * hd * 2; /* K+V of one layer, h16 */
    /* summaries for min(cap, 1.25 x the length + 4096) positions in the GPU's layout
     * (gpu_tls_seq_bytes: per layer and KV head a block's max and min in h16, a label's float2
     * and r / 2 code bytes per position, a bit per block), lent by the pool in whole blocks
     * (gpu_tls_mem_take) as the offloaded rows' dense layers are */
    const double bb = (double)in.kv_block_bytes;
    const long sc = cap < 1.25 * ctx + 4096 ? cap : (long)(1.25 * ctx + 4096), snb = (sc + 63) / 64;
    const double summ = 256 + (double)L * n_kv * (snb * 2.0 * hd * 2 + sc * 8.0 + (snb + 31) / 32 * 4.0 + sc * 16.0);
    /* an offloaded row's dense layers and its row cache (gpu/tls_off.cu: a slot of K and V rows
     * and a position per selected key, sparse layer and KV head), one allocation */
    const double rcache = budget <= 4096 ? (double)(L - Ld) * n_kv * budget * (4.0 * hd + 4) : 0;
    const double summ_b = ceil(summ / bb) * bb, dense_b = ceil((Ld * row + rcache) / bb) * bb;
    const double dev_b = dense_b + summ_b;
    /* offloaded rows: what the host pool holds (whole pages of 128 positions: gpu/tls_off.cu) */
    const double host_b = (double)in.offload_per_token * (double)nblk * bt;
    int Bd = (int)(dense_blocks / nblk), Bo = host_b > 0 ? (int)((double)in.offload_bytes / host_b) : 0;
    Bo = Bo < 0 ? 0 : Bo > 64 ? 64 : Bo;
    /* pool rows: alone, and beside the offloaded rows */
    const double pool = (double)in.kv_blocks_total * bb, per = (double)nblk * bb + summ_b;
    int Br0 = (int)(pool / per), Br = pool > Bo * dev_b ? (int)((pool - Bo * dev_b) / per) : 0;
    Bd = Bd > 128 ? 128 : Bd, Br = Br > 128 ? 128 : Br, Br0 = Br0 > 128 ? 128 : Br0;
    printf("{\"bench\":\"tls_offload_plan\",\"context\":%d,\"capacity\":%d,\"seq_gb\":%.2f,"
           "\"dense_pool_blocks\":%ld,\"tls_pool_blocks\":%d,\"host_pool_gb\":%.1f,"
           "\"host_gb_per_offloaded\":%.2f,\"device_gb_per_offloaded\":%.2f,\"dense_batch\":%d,"
           "\"pool_sparse_batch\":%d,\"pool_beside_offloaded\":%d,\"offloaded_batch\":%d}\n",
           ctx, cap, nblk * bb / 1e9, dense_blocks, in.kv_blocks_total, in.offload_bytes / 1e9, host_b / 1e9,
           dev_b / 1e9, Bd, Br0, Br, Bo);
    fflush(stdout);
    const int Bmax = Bo + (Bd > Br0 ? Bd : Br0);
    int32_t *ids = bg_make_ids(ctx, V, 5), *tok = malloc(sizeof(int32_t) * (Bmax + 1));
    float *lg = accel_host_alloc(d, sizeof(float) * (size_t)(Bmax + 1) * V);
    accel_seq *p0 = NULL, **seqs = calloc(Bmax + 1, sizeof *seqs);
    double *t = malloc(sizeof(double) * steps);
    int st = ids && tok && lg && seqs && t && Bmax > 0 ? accel_seq_new(d, cap, &p0) : ACCEL_ERR_NOMEM;
    accel_prefill_req r = {.seq = p0, .ids = ids, .n = ctx, .logits = lg};
    if (!st) st = accel_prefill(d, &r);
    sparse_tls_params sp;
    sparse_tls_params_default(&sp);
    sp.token_budget = budget, sp.block_budget = blocks;
    sparse_tls_params so = sp;
    so.offload = 1;
    /* rows 0 .. Bo-1 offloaded (kept across the modes), then pool rows; the modes in the order
     * given, each NAME[-direct][-vary][-stagger]: -direct without the offloaded rows' row cache
     * (TANDEM_TLS_ROWCACHE=0: every selected key's rows over PCIe), -vary a new token per row
     * and step (else each row's one token throughout), -stagger the staggered selection
     * (sparse_tls_params.stagger) for the sparse rows */
    /* one8: a batch of 8, its first row offloaded and 7 from the pool (the one-kernel form's
     * clusters of 2 at 5-8 rows have no row cache: TANDEM_TLS_CL2=0 is its A/B) */
    static const char *names[] = {"dense", "pool_sparse", "offloaded", "mixed", "one8"};
    const int lo[5] = {Bo, Bo, 0, 0, Bo - 1}, n[5] = {Bd, Br0, Bo, Br + Bo, Bo >= 1 && Br >= 7 ? 8 : 0};
    for (int b = 0; b < Bmax && !st; b++) st = accel_seq_fork(d, p0, ctx, cap, &seqs[b]);
    for (const char *mp = modes; *mp && !st; mp += strcspn(mp, ","), mp += *mp == ',') {
        char tk[64];
        const size_t tl = strcspn(mp, ",");
        snprintf(tk, sizeof tk, "%.*s", (int)(tl < 63 ? tl : 63), mp);
        const int direct = strstr(tk, "-direct") != NULL, vary = strstr(tk, "-vary") != NULL;
        const int stag = strstr(tk, "-stagger") != NULL;
        sparse_tls_params po = so, pp = sp;
        po.stagger = pp.stagger = stag;
        tk[strcspn(tk, "-")] = 0;
        int mode = 0;
        while (mode < 5 && strcmp(tk, names[mode])) mode++;
        if (mode == 5 || n[mode] < 1 || lo[mode] + n[mode] > Bmax) continue;
        setenv("TANDEM_TLS_ROWCACHE", direct ? "0" : "1", 1);
        for (int b = 0; b < Bmax; b++) tok[b] = ids[(b * 7 + 3) % ctx];
        accel_seq **rows = seqs + lo[mode];
        for (int b = 0; b < n[mode] && !st; b++) {
            st = accel_seq_truncate(d, rows[b], ctx);
            if (!st) st = accel_seq_decode_sparse(d, rows[b], mode == 0 ? NULL : lo[mode] + b < Bo ? &po : &pp);
        }
        double t0 = bg_now();
        if (!st) st = accel_decode(d, n[mode], rows, tok, lg); /* graph, summaries, the offload */
        const double first = bg_now() - t0;
        accel_decode_stats s[2][2] = {{{0}}}; /* [before, after the timed steps][pool, offloaded] */
        int off = 0;
        for (int k = 0; k < 2 && !st; k++) {
            for (int i = 0; i < steps && k && !st; i++) {
                for (int b = 0; b < n[mode] && vary; b++) tok[b] = ids[(b * 7 + 3 + (i + 1) * 131) % ctx];
                double a = bg_now();
                st = accel_decode(d, n[mode], rows, tok, lg);
                t[i] = bg_now() - a;
            }
            for (int b = 0; b < n[mode] && !st; b++) {
                accel_decode_stats ds, *o;
                st = accel_seq_decode_stats(d, rows[b], &ds);
                o = &s[k][ds.offloaded != 0], off += k && ds.offloaded;
                o->host_keys += ds.host_keys, o->steps += ds.steps, o->blocks_new += ds.blocks_new;
                o->blocks_kept += ds.blocks_kept;
            }
        }
        if (st) break;
        const accel_decode_stats *s0 = s[0], *s1 = s[1];
        /* per offloaded row-step over the timed steps: K and V rows read (h16), its new K/V
         * rows of the sparse layers written; one level-1 block: 64 positions of K and V */
        const double ss = (double)(s1[1].steps - s0[1].steps), blk = 64.0 * hd * 2 * 2;
        const double rd = ss > 0 ? (double)(s1[1].host_keys - s0[1].host_keys) * hd * 2 * 2 / ss : 0;
        const double wr = ss > 0 ? (double)(L - Ld) * n_kv * hd * 2 * 2 : 0;
        const double ms = bg_median(t, steps) * 1e3;
        if (ss > 0) *new_blocks = (double)(s1[1].blocks_new - s0[1].blocks_new) / ss;
        /* the selected keys' rows (budget per sparse layer and KV head past the budget) */
        const double sel = (double)(L - Ld) * n_kv * (budget < ctx ? budget : ctx) * hd * 2 * 2;
        printf("{\"bench\":\"tls_offload\",\"mode\":\"%s\",\"row_cache\":%d,\"vary\":%d,"
               "\"stagger\":%d,\"context\":%d,\"batch\":%d,"
               "\"offloaded\":%d,\"token_budget\":%d,\"block_budget\":%d,\"ms_step\":%.3f,"
               "\"tok_s\":%.1f,\"first_step_s\":%.2f,\"selected_mb\":%.3f,"
               "\"pcie_mb_per_offloaded_step\":%.3f,"
               "\"pcie_gb_s\":%.2f,\"whole_block_mb\":%.2f,\"new_block_mb\":%.2f}\n",
               names[mode], !direct, vary, stag, ctx, n[mode], off, budget, blocks, ms, n[mode] * 1e3 / ms,
               first, ss > 0 ? sel / 1e6 : 0,
               (rd + wr) / 1e6, off * (rd + wr) / (ms * 1e-3) / 1e9,
               ss > 0 ? (double)(s1[1].blocks_kept - s0[1].blocks_kept) * blk / ss / 1e6 : 0,
               ss > 0 ? (double)(s1[1].blocks_new - s0[1].blocks_new) * blk / ss / 1e6 : 0);
        fflush(stdout);
    }
    if (st) fprintf(stderr, "bench_gpu: tls offload ctx=%d: %s\n", ctx, accel_strerror(st));
    for (int b = 0; b < Bmax && seqs; b++)
        if (seqs[b]) accel_seq_free(d, seqs[b]);
    if (p0) accel_seq_free(d, p0);
    if (lg) accel_host_free(d, lg);
    free(ids), free(seqs), free(tok), free(t);
    return st ? -1 : 0;
}

/* A channel file for the benchmark (evenly spread channels; the work does not depend on them). */
int bg_tls_channels(const model *m, char *path, size_t n)
{
    const model_config *c = &m->cfg;
    model_channels mc = {.n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads,
                         .head_dim = c->head_dim, .r = c->head_dim >= 32 ? 32 : c->head_dim / 2 * 2,
                         .calib_tokens = 0};
    mc.idx = malloc(sizeof(uint16_t) * mc.n_layers * mc.n_kv_heads * mc.r);
    if (!mc.idx) return -1;
    for (int i = 0; i < mc.n_layers * mc.n_kv_heads; i++)
        for (int j = 0; j < mc.r; j++) mc.idx[i * mc.r + j] = (uint16_t)(j * (c->head_dim / mc.r));
    const char *tmp = getenv("TMPDIR");
    snprintf(path, n, "%s/bench_gpu-channels-%d.bin", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    char err[256];
    int st = model_channels_save(path, &mc, err, sizeof err);
    if (st) fprintf(stderr, "bench_gpu: %s\n", err);
    free(mc.idx);
    return st;
}

/* --prefix P:C (see the top): cold, cached and host-tier TTFT in seconds; 0 or -1. */
/* tandem simulate — the scheduler's dispatch on a virtual clock (scheduler/sched_sim.h) with
 * device timing models (scheduler/sched_sim_model.h) and a request trace
 * (scheduler/sched_sim_trace.h): throughput, TTFT/TPOT percentiles, device utilisation, where
 * the decodes went — to size a node (how many cards per GPU) and to compare with GLITCHES
 * Fig. 7.
 *
 *   tandem simulate [--node SPEC] [--model llama2-7b|llama3-8b] [--workload P:O | --sharegpt]
 *                   [--rate R | --clients C] [--requests N] [--seed S] [--tbt-budget-ms B]
 *                   [--gpu-batch K] [--fpga-prefill] [--gpu-prefill MS@TOKENS]
 *                   [--gpu-decode MS@CTX] [--slo-tbt-ms MS] [--slo-ttft-ms MS] [--list]
 *                   [--sparse-prefill trishape|flexprefill]
 *   tandem simulate --fig7 [--gpus a100,v100s] [--card u280] [--gpu-batch K] [...]
 *   tandem simulate --compare [--model M] [--card u280-batch] [--requests N] [...]
 *   tandem simulate --node A/B[/C...] [--net GBIT[:US]] [--net-sweep] [--greedy] [...]
 *
 * Several nodes: each decode step on another node's device is a call from the first node, as the
 * daemon's peers make it — the rows' tokens out, every row's logits back (the first node
 * samples: Llama-3's 513 KB a row), or with --greedy (every row plain greedy) its token alone;
 * the device's next step waits for that round trip (sched_sim_remote_trip_s).
 *
 * Placement: the daemon's (sched_policy.h), weighing the devices' decode cost by batch — each
 * modelled device describes its curve as a backend does in accel_info.decode_curve
 * (sched_sim_dev_curve) and its prefill share from its modelled iterations — or with
 * --placement cards-first GLITCHES' rule (cards first, the GPU only when every card is busy), as
 * --fig7 runs by default to reproduce the paper. --compare runs the mixed node both ways, and
 * every GPU at up to 256 sequences a step (the measured curve's largest batch, its best); it
 * refuses --gpu-batch: no comparison caps the GPU's batch.
 *
 * Energy: tok/J = steady tokens/s over the node's rated board power (every device at its
 * profile's power for the whole run: an upper bound on the draw, for GPUs and cards alike).
 * Goodput: the steady-state tokens of the requests whose first token came within the TTFT SLO
 * of their arrival and whose every gap between tokens stayed within the TBT SLO. The TTFT SLO
 * is also the placement's target (sched_policy_opts.ttft_slo_s, the weighing's rule d: a long
 * prompt's decode to a card with a slot); --compare's default 2 s too.
 *
 * --sparse-prefill prices every GPU's prefill (every node's: the H200 alone, the mixed node and
 * 8 H200 alike) with a sparse method's measured kernels (devices/sim_hw.c,
 * sched_sim_sparse in scheduler/sched_sim_model.h); dense otherwise.
 *
 * Throughput is measured in the steady state: the tokens of the requests that finished between
 * the 10th and the 90th percentile of completion times, over that window (the ramp-up and the
 * drain of a finite trace are left out). --fig7 runs, for each model shape and each
 * [prompt, output] of GLITCHES Fig. 7 ([128, 512], [512, 512], [1536, 512]), a node of 8 GPUs, a
 * node of 1 GPU + 7 cards and a node of 8 cards (which prefill on the cards, as GLITCHES'
 * all-FPGA baseline does), saturated by closed-loop clients (twice the node's decode slots, each
 * running at least 10 requests). */
#include "daemon/cli.h"
#include "daemon/cmd.h"
#include "devices/sim_hw.h"
#include "scheduler/sched_sim.h"
#include "scheduler/sched_sim_trace.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most requests one run may simulate (a bound on the trace's memory: ~100 bytes each). */
#define SIM_MAX_REQUESTS 2000000

typedef struct sim_run {
    const char *node, *shape;
    int prompt, output, sharegpt;
    double rate;
    int clients, requests;
    uint64_t seed;
    double tbt_ms;
    int gpu_batch, fpga_prefill;
    double gpu_prefill_ms, gpu_prefill_tokens, gpu_decode_ms, gpu_decode_ctx;
    int prompt_hi;                  /* > prompt: prompts uniform in [prompt, prompt_hi] */
    double slo_tbt_ms, slo_ttft_ms; /* goodput: requests meeting both (0: not bounded) */
    int cards_first;                /* --placement cards-first (GLITCHES); else weigh */
    double net_gbit, net_us;        /* --net: between nodes (0: SCHED_SIM_NET_*) */
    int greedy; /* --greedy: remote decode steps bring back tokens, not logits */
    const sched_sim_sparse *sparse; /* --sparse-prefill: every GPU's prefill (NULL: dense) */
} sim_run;

typedef struct sim_result {
    sched_sim_summary sum;
    double steady_tps;      /* tokens/s in the steady-state window */
    double price;           /* the node's dollars */
    double power_w;         /* the node's devices at their rated board power */
    double goodput_tps;     /* steady-state tokens of the requests that met the SLO */
    int n_good;             /* finished requests that met the SLO */
    double util[SCHED_BOOK_MAX_DEVICES];
    char names[SCHED_BOOK_MAX_DEVICES][ACCEL_NAME_MAX + 1];
    int n_devs;
    int n_nodes, remote_decodes;    /* remote: decoded on another node than the clients' */
    uint64_t prefill_calls, split_calls; /* every device's prefill calls; of them, layer-split
                                            calls that left their chunk unfinished (the daemon's
                                            tandem_device_prefill_split_calls_total) */
    double gap_p50, gap_max;        /* of the finished requests' longest gap between two tokens */
    double net_bps, net_s;
} sim_result;

/* closed loop: every finished request is replaced by the next of the trace, until N */
typedef struct closed {
    sched_sim_trace *trace;
    sched_sim_req *reqs;
    int n, next;
} closed;

static void on_done(void *ctx, sched_sim *sim, sched_sim_req *r)
{
    closed *c = ctx;
    if (!c || c->next >= c->n) return;
    sched_sim_req *q = &c->reqs[c->next++];
    sched_sim_trace_next(c->trace, q);
    q->arrival = sched_sim_now(sim);
    sched_sim_submit(sim, q);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A finished request meets the SLO: first token within slo_ttft_ms of its arrival, no gap
 * between two tokens over slo_tbt_ms (a bound of 0 is no bound). */
static int meets_slo(const sim_run *o, const sched_sim_req *r)
{
    if (r->state != SCHED_SIM_DONE) return 0;
    if (o->slo_ttft_ms > 0 && (r->t_first - r->arrival) * 1e3 > o->slo_ttft_ms) return 0;
    if (o->slo_tbt_ms > 0 && r->max_tbt * 1e3 > o->slo_tbt_ms) return 0;
    return 1;
}

/* Tokens/s in the steady-state window (see the top of this file); with o, only the requests
 * that meet its SLO count (goodput). */
static double steady_tps_of(const sched_sim_req *r, int n, const sim_run *o)
{
    double *done = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!done) return 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (r[i].state == SCHED_SIM_DONE) done[k++] = r[i].t_done;
    double tps = 0;
    if (k >= 10) {
        qsort(done, (size_t)k, sizeof *done, cmp_double);
        double a = done[k / 10], b = done[k - 1 - k / 10], tokens = 0;
        for (int i = 0; i < n; i++)
            if (r[i].state == SCHED_SIM_DONE && r[i].t_done > a && r[i].t_done <= b &&
                (!o || meets_slo(o, &r[i])))
                tokens += r[i].generated;
        tps = b > a ? tokens / (b - a) : 0;
    }
    free(done);
    return tps;
}

static double steady_tps(const sched_sim_req *r, int n)
{
    return steady_tps_of(r, n, NULL);
}

static int run_one(const sim_run *o, sim_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    static sched_sim_model m;
    if (sched_sim_model_build(&m, devices_sim_hw(), o->node, o->shape, o->gpu_batch, err, errlen))
        return -1;
    for (int i = 0; i < m.n_devs; i++) {
        sched_sim_dev_model *d = &m.dev[i];
        if (d->kind != ACCEL_KIND_CUDA) continue;
        d->sparse = o->sparse;
        if (o->gpu_prefill_ms > 0) sched_sim_dev_calibrate_prefill(d, &m.shape, o->gpu_prefill_tokens, o->gpu_prefill_ms / 1e3);
        if (o->gpu_decode_ms > 0) sched_sim_dev_calibrate_decode(d, &m.shape, o->gpu_decode_ctx, o->gpu_decode_ms / 1e3);
    }
    if (o->net_gbit > 0) {
        m.net_bps = o->net_gbit * 1e9 / 8;
        m.net_s = o->net_us * 1e-6;
    }
    if (o->greedy) m.row_back_bytes = 4; /* the argmax, as the peer protocol's DECODE_ARGMAX */
    sched_sim_req *reqs = calloc((size_t)o->requests, sizeof *reqs);
    if (!reqs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    sched_sim_trace tr = {.rate = o->clients > 0 ? 0 : o->rate, .prompt = o->prompt,
                          .output = o->output, .sharegpt = o->sharegpt, .prompt_hi = o->prompt_hi,
                          .context = m.shape.context, .seed = o->seed};
    closed cl = {&tr, reqs, o->requests, 0};
    sched_sim_config cfg = {&m, m.n_devs, o->tbt_ms / 1e3, o->fpga_prefill, NULL,
                            o->clients > 0 ? on_done : NULL, o->clients > 0 ? &cl : NULL,
                            .cards_first = o->cards_first, .ttft_slo_s = o->slo_ttft_ms / 1e3};
    sched_sim *sim = sched_sim_new(&cfg, err, errlen);
    if (!sim) {
        free(reqs);
        return -1;
    }
    int first = o->clients > 0 ? (o->clients < o->requests ? o->clients : o->requests) : o->requests;
    for (int i = 0; i < first; i++) {
        sched_sim_trace_next(&tr, &reqs[i]);
        if (sched_sim_submit(sim, &reqs[i])) {
            snprintf(err, errlen, "cannot submit request %d", i);
            sched_sim_free(sim);
            free(reqs);
            return -1;
        }
    }
    cl.next = first;
    double t_end = sched_sim_run(sim, 0);
    int n = o->clients > 0 ? cl.next : o->requests;
    sched_sim_summarize(reqs, n, &res->sum);
    res->steady_tps = steady_tps(reqs, n);
    res->goodput_tps = steady_tps_of(reqs, n, o);
    double *gaps = malloc(sizeof *gaps * (size_t)(n > 0 ? n : 1));
    int ng = 0;
    for (int i = 0; gaps && i < n; i++)
        if (reqs[i].state == SCHED_SIM_DONE && reqs[i].n_out >= 2) {
            gaps[ng++] = reqs[i].max_tbt;
            if (reqs[i].max_tbt > res->gap_max) res->gap_max = reqs[i].max_tbt;
        }
    res->gap_p50 = gaps ? sched_sim_percentile(gaps, ng, 50) : 0;
    free(gaps);
    for (int i = 0; i < n; i++) {
        res->n_good += meets_slo(o, &reqs[i]);
        int dd = reqs[i].decode_dev;
        res->remote_decodes += reqs[i].state == SCHED_SIM_DONE && dd >= 0 && m.dev[dd].node > 0;
    }
    res->n_devs = m.n_devs;
    res->n_nodes = m.n_nodes;
    res->net_bps = m.net_bps;
    res->net_s = m.net_s;
    for (int i = 0; i < m.n_devs; i++) {
        sched_sim_dev_stats st;
        sched_sim_dev_stats_get(sim, i, &st);
        res->util[i] = t_end > 0 ? st.busy_s / t_end : 0;
        res->prefill_calls += st.prefill_chunks;
        res->split_calls += st.prefill_split_calls;
        snprintf(res->names[i], sizeof res->names[i], "%s", m.dev[i].name);
        res->price += m.dev[i].hw->price;
        res->power_w += m.dev[i].power_w;
    }
    sched_sim_free(sim);
    free(reqs);
    return 0;
}

static void print_one(const sim_run *o, const sim_result *r)
{
    const sched_sim_summary *s = &r->sum;
    printf("node %s, %s, ", o->node, o->shape);
    if (o->sharegpt) printf("ShareGPT-like lengths");
    else if (o->prompt_hi > o->prompt) printf("[%d-%d, %d]", o->prompt, o->prompt_hi, o->output);
    else printf("[%d, %d]", o->prompt, o->output);
    if (o->clients > 0) printf(", %d closed-loop clients", o->clients);
    else printf(", Poisson %.3g req/s", o->rate);
    printf(", %d requests, tbt budget %g ms, GPU decode batch %d, placement %s%s%s\n", o->requests,
           o->tbt_ms, o->gpu_batch > 0 ? o->gpu_batch : 256, o->cards_first ? "cards-first" : "weigh",
           o->sparse ? ", GPU prefill " : "", o->sparse ? o->sparse->name : "");
    printf("  finished %d, rejected %d\n", s->n_done, s->n_rejected);
    printf("  throughput %.1f tok/s steady (%.1f over the whole run), %.3f req/s\n", r->steady_tps, s->tokens_per_s, s->requests_per_s);
    printf("  TTFT p50 %.3f s p99 %.3f s | TPOT p50 %.2f ms p99 %.2f ms | e2e p50 %.2f s p99 %.2f s | queue p50 %.3f s p99 %.3f s\n",
           s->ttft_p50, s->ttft_p99, s->tpot_p50 * 1e3, s->tpot_p99 * 1e3, s->e2e_p50, s->e2e_p99, s->queue_p50, s->queue_p99);
    printf("  decodes: %d on cards (split), %d in place (fallback or no card)\n", s->decodes_on_cards, s->decodes_fallback);
    printf("  prefill calls: %llu (%llu layer-split: a chunk's call that left layers for later ones) | "
           "longest gap between two tokens of a request: p50 %.1f ms, max %.1f ms\n",
           (unsigned long long)r->prefill_calls, (unsigned long long)r->split_calls, r->gap_p50 * 1e3, r->gap_max * 1e3);
    if (r->n_nodes > 1)
        printf("  %d nodes, network %.3g Gbit/s each way per node, %.3g us: %d decodes on other nodes, "
               "hand-over (first to second token of a split request) p50 %.2f ms p99 %.2f ms\n",
               r->n_nodes, r->net_bps * 8 / 1e9, r->net_s * 1e6, r->remote_decodes,
               s->handover_p50 * 1e3, s->handover_p99 * 1e3);
    printf("  utilisation:");
    for (int i = 0; i < r->n_devs; i++) printf(" %s %.0f%%", r->names[i], r->util[i] * 100);
    printf("\n  cost: $%.0f, %.2f tok/s per $1000\n", r->price, r->steady_tps / r->price * 1e3);
    if (r->power_w > 0)
        printf("  energy: %.0f W rated, %.3f tok/J (every device at its rated board power)\n",
               r->power_w, r->steady_tps / r->power_w);
    if (o->slo_tbt_ms > 0 || o->slo_ttft_ms > 0)
        printf("  SLO TTFT <= %g ms, TBT <= %g ms: %d of %d finished requests (%.0f%%), goodput "
               "%.1f tok/s steady\n",
               o->slo_ttft_ms, o->slo_tbt_ms, r->n_good, s->n_done,
               s->n_done ? 100.0 * r->n_good / s->n_done : 0, r->goodput_tps);
}

/* The issue-25 comparison: 1 H200 + 7 batched cards, 1 H200 alone, 8 H200s, at 16 / 64 / 256
 * closed-loop clients, on a decode-heavy and a prefill-heavy workload; every GPU decodes at its
 * best batch (256: the measured curve's top). */
static int compare(sim_run base, const char *card)
{
    const struct {
        const char *name;
        int p0, p1, out;
    } work[] = {{"decode-heavy", 128, 512, 512}, {"prefill-heavy", 8192, 32768, 256}};
    const int clients[] = {16, 64, 256};
    char het[64];
    snprintf(het, sizeof het, "h200-tandem+7x%s", card);
    /* the mixed node twice: with the placement that weighs the devices' batch curves (the
     * daemon's), and with GLITCHES' "cards first" */
    const char *nodes[] = {het, het, "h200-tandem", "8xh200-tandem"};
    const int cards_first[] = {0, 1, 0, 0};
    if (base.slo_tbt_ms <= 0) base.slo_tbt_ms = 50;
    if (base.slo_ttft_ms <= 0) base.slo_ttft_ms = 2000;
    printf("%s, closed-loop clients, at least %d requests (10 per client), every GPU decodes up to "
           "256 sequences a step (the measured curve's best), tbt budget %g ms; goodput: TTFT <= %g "
           "ms and TBT <= %g ms; every GPU prefills %s\n\n",
           base.shape, base.requests, base.tbt_ms, base.slo_ttft_ms, base.slo_tbt_ms,
           base.sparse ? base.sparse->name : "dense");
    printf("| workload | clients | node | placement | tok/s | goodput tok/s | SLO met | tok/s per $1000 | tok/J "
           "| TTFT p50 / p99 s | TPOT p50 / p99 ms | decodes on cards |\n");
    printf("|---|---:|---|---|---:|---:|---:|---:|---:|---|---|---:|\n");
    for (size_t w = 0; w < sizeof work / sizeof work[0]; w++)
        for (size_t c = 0; c < sizeof clients / sizeof clients[0]; c++)
            for (size_t k = 0; k < sizeof nodes / sizeof nodes[0]; k++) {
                sim_run o = base;
                o.node = nodes[k];
                o.cards_first = cards_first[k];
                o.gpu_batch = 0; /* max_running 256 */
                o.prompt = work[w].p0;
                o.prompt_hi = work[w].p1;
                o.output = work[w].out;
                o.clients = clients[c];
                o.requests = base.requests > 10 * clients[c] ? base.requests : 10 * clients[c];
                sim_result r;
                char err[256];
                if (run_one(&o, &r, err, sizeof err)) {
                    fprintf(stderr, "tandem simulate: %s\n", err);
                    return 1;
                }
                const sched_sim_summary *s = &r.sum;
                int tot = s->decodes_on_cards + s->decodes_fallback;
                printf("| %s [%d-%d, %d] | %d | %s | %s | %.0f | %.0f | %.0f%% | %.2f | %.3f | %.2f / %.2f "
                       "| %.1f / %.1f | %.0f%% |\n",
                       work[w].name, work[w].p0, work[w].p1, work[w].out, clients[c], nodes[k],
                       k > 1 ? "-" : cards_first[k] ? "cards-first" : "weigh",
                       r.steady_tps, r.goodput_tps, s->n_done ? 100.0 * r.n_good / s->n_done : 0,
                       r.steady_tps / r.price * 1e3, r.power_w > 0 ? r.steady_tps / r.power_w : 0,
                       s->ttft_p50, s->ttft_p99, s->tpot_p50 * 1e3, s->tpot_p99 * 1e3,
                       k <= 1 && tot ? 100.0 * s->decodes_on_cards / tot : 0);
                fflush(stdout);
            }
    return 0;
}

static void list(void)
{
    printf("model shapes:\n");
    for (int i = 0; sched_sim_shape_at(i); i++) {
        const sched_sim_shape *s = sched_sim_shape_at(i);
        printf("  %-10s %.2fB parameters, %d layers, %d/%d heads, head_dim %d, context %d\n", s->name,
               s->params / 1e9, s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim, s->context);
    }
    printf("device profiles:\n");
    const sched_sim_catalog *c = devices_sim_hw();
    for (int i = 0; i < c->n; i++) {
        const sched_sim_hw *h = &c->hw[i];
        printf("  %-12s %s\n", h->name, h->source);
        if (h->power_w > 0) printf("  %-12s power %.0f W: %s\n", "", h->power_w, h->power_source);
    }
    printf("sparse prefill methods (--sparse-prefill; prefill time factor at 8K / 16K / 32K tokens, llama3.1-8b):\n");
    const sched_sim_shape *l3 = sched_sim_shape_find("llama3.1-8b");
    for (int i = 0; devices_sim_sparse_at(i); i++) {
        const sched_sim_sparse *sp = devices_sim_sparse_at(i);
        printf("  %-12s %.3f / %.3f / %.3f: %s\n", sp->name, sched_sim_sparse_factor(sp, l3, 8192),
               sched_sim_sparse_factor(sp, l3, 16384), sched_sim_sparse_factor(sp, l3, 32768), sp->source);
    }
}

static int parse_at(const char *name, const char *v, double *ms, double *at)
{
    char *end;
    *ms = strtod(v, &end);
    if (*end != '@' || !(*ms > 0) || !isfinite(*ms)) goto bad;
    *at = strtod(end + 1, &end);
    if (*end || !(*at > 0) || *at > 1e7) goto bad;
    return 0;
bad:
    fprintf(stderr, "tandem simulate: %s takes MS@N (e.g. 124@4096)\n", name);
    return -1;
}

/* Twice the decode slots of the node: enough clients to keep every slot busy with a queue. */
static int saturating_clients(const char *node, const char *shape, int gpu_batch)
{
    static sched_sim_model m;
    char err[256];
    if (sched_sim_model_build(&m, devices_sim_hw(), node, shape, gpu_batch, err, sizeof err))
        return 16;
    int slots = 0;
    for (int i = 0; i < m.n_devs; i++) {
        int b = m.dev[i].max_batch < m.dev[i].max_running ? m.dev[i].max_batch : m.dev[i].max_running;
        slots += m.dev[i].kind == ACCEL_KIND_FPGA ? b : m.dev[i].max_running;
    }
    return 2 * slots;
}

/* Clients for the node, and enough requests that each client runs at least 10 of them (the
 * steady-state window then holds many completions). */
static void saturate(sim_run *o, int requests)
{
    o->clients = saturating_clients(o->node, o->shape, o->gpu_batch);
    o->requests = requests > 10 * o->clients ? requests : 10 * o->clients;
    if (o->requests > SIM_MAX_REQUESTS) o->requests = SIM_MAX_REQUESTS;
}

static int fig7(sim_run base, const char *gpus, const char *card)
{
    static const int work[3][2] = {{128, 512}, {512, 512}, {1536, 512}};
    const char *shapes[] = {"llama2-7b", "llama3-8b"};
    const sched_sim_hw *ch = sched_sim_hw_find(devices_sim_hw(), card);
    if (!ch) {
        fprintf(stderr, "tandem simulate: unknown card profile %s\n", card);
        return 2;
    }
    int all_cards = (ch->caps & ACCEL_CAP_PREFILL) != 0;
    printf("GLITCHES Fig. 7 node shapes on the simulator: closed-loop clients (2x the node's decode slots), "
           "at least %d requests per run (and 10 per client), GPU decode batch %d, tbt budget %g ms, card %s\n\n",
           base.requests, base.gpu_batch ? base.gpu_batch : 256, base.tbt_ms, card);
    printf("| model | [prompt, output] | GPU | 8 GPU tok/s | 1 GPU + 7 cards tok/s | 8 cards tok/s | "
           "hetero / 8 GPU | hetero / 8 cards | tok/s per $1000 (8 GPU / hetero / 8 cards) | "
           "hetero decodes on cards | hetero TTFT p50 / p99 s | hetero TPOT p50 / p99 ms |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|---|---:|---|---|\n");
    char list[128];
    snprintf(list, sizeof list, "%s", gpus);
    for (size_t si = 0; si < 2; si++)
        for (int w = 0; w < 3; w++) {
            char *save = NULL;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", list);
            for (char *g = strtok_r(buf, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
                char n_gpu[64], n_het[64], n_card[64], err[256];
                snprintf(n_gpu, sizeof n_gpu, "8x%s", g);
                snprintf(n_het, sizeof n_het, "%s+7x%s", g, card);
                snprintf(n_card, sizeof n_card, "8x%s", card);
                sim_result rg, rh, rc;
                sim_run o = base;
                o.shape = shapes[si];
                o.prompt = work[w][0];
                o.output = work[w][1];
                o.node = n_gpu;
                saturate(&o, base.requests);
                if (run_one(&o, &rg, err, sizeof err)) goto fail;
                o.node = n_het;
                saturate(&o, base.requests);
                if (run_one(&o, &rh, err, sizeof err)) goto fail;
                int have_cards = 0;
                if (all_cards) {
                    o.node = n_card;
                    o.fpga_prefill = 1;
                    saturate(&o, base.requests);
                    if (run_one(&o, &rc, err, sizeof err)) goto fail;
                    have_cards = 1;
                }
                printf("| %s | [%d, %d] | %s | %.0f | %.0f | ", shapes[si], work[w][0], work[w][1], g, rg.steady_tps, rh.steady_tps);
                if (have_cards) printf("%.0f | %.2fx | %.2fx | ", rc.steady_tps, rh.steady_tps / rg.steady_tps, rh.steady_tps / rc.steady_tps);
                else printf("- | %.2fx | - | ", rh.steady_tps / rg.steady_tps);
                printf("%.2f / %.2f / ", rg.steady_tps / rg.price * 1e3, rh.steady_tps / rh.price * 1e3);
                if (have_cards) printf("%.2f", rc.steady_tps / rc.price * 1e3);
                else printf("-");
                int tot = rh.sum.decodes_on_cards + rh.sum.decodes_fallback;
                printf(" | %.0f%% | %.2f / %.2f | %.1f / %.1f |\n", tot ? 100.0 * rh.sum.decodes_on_cards / tot : 0,
                       rh.sum.ttft_p50, rh.sum.ttft_p99, rh.sum.tpot_p50 * 1e3, rh.sum.tpot_p99 * 1e3);
                fflush(stdout);
                continue;
            fail:
                fprintf(stderr, "tandem simulate: %s\n", err);
                return 1;
            }
        }
    return 0;
}

/* Several nodes: the same trace with the other nodes' devices moved into the clients' node (no
 * network), then over networks of falling bandwidth, to show where shipping the KV between
 * nodes starts to cost: the hand-over (a split request's first to second token: the import must
 * be complete) and the TTFT (a busy NIC delays nothing the prefill needs, so TTFT moves only
 * through the queue). */
static int net_sweep(sim_run o)
{
    if (!strchr(o.node, '/')) {
        fprintf(stderr, "tandem simulate: --net-sweep takes a spec of several nodes ('/' between them)\n");
        return 2;
    }
    char local[256];
    snprintf(local, sizeof local, "%s", o.node);
    for (char *p = local; *p; p++)
        if (*p == '/') *p = '+';
    const double gbit[] = {400, 100, 25, 10, 1};
    const double us = o.net_us > 0 ? o.net_us : SCHED_SIM_NET_S * 1e6;
    printf("nodes %s, %s, ", o.node, o.shape);
    if (o.prompt_hi > o.prompt) printf("[%d-%d, %d]", o.prompt, o.prompt_hi, o.output);
    else printf("[%d, %d]", o.prompt, o.output);
    if (o.clients > 0) printf(", %d closed-loop clients", o.clients);
    else printf(", Poisson %.3g req/s", o.rate);
    printf(", %d requests, network latency %.3g us one way\n\n", o.requests, us);
    printf("| network | TTFT p50 | TTFT p99 | hand-over p50 | hand-over p99 | TPOT p50 | tok/s | decodes on other nodes |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    double base_hand = 0, base_ttft = 0, base_tpot = 0;
    double first_cost = -1;
    for (int k = -1; k < (int)(sizeof gbit / sizeof gbit[0]); k++) {
        sim_run q = o;
        char label[sizeof local + 16];
        if (k < 0) {
            q.node = local;
            snprintf(label, sizeof label, "one node (%s)", local);
        } else {
            q.net_gbit = gbit[k];
            q.net_us = us;
            snprintf(label, sizeof label, "%g Gbit/s", gbit[k]);
        }
        sim_result r;
        char err[256];
        if (run_one(&q, &r, err, sizeof err)) {
            fprintf(stderr, "tandem simulate: %s\n", err);
            return 1;
        }
        const sched_sim_summary *s = &r.sum;
        printf("| %s | %.3f s | %.3f s | %.2f ms | %.2f ms | %.2f ms | %.1f | %d |\n", label,
               s->ttft_p50, s->ttft_p99, s->handover_p50 * 1e3, s->handover_p99 * 1e3,
               s->tpot_p50 * 1e3, r.steady_tps, r.remote_decodes);
        if (k < 0) {
            base_hand = s->handover_p50;
            base_ttft = s->ttft_p50;
            base_tpot = s->tpot_p50;
        } else if (first_cost < 0 && (s->handover_p50 > base_hand + base_tpot ||
                                      s->ttft_p50 > 1.1 * base_ttft + 1e-4)) {
            first_cost = gbit[k];
        }
    }
    if (first_cost > 0)
        printf("\nthe KV transfer costs latency from %g Gbit/s down (hand-over p50 longer than one "
               "node's by more than a token's time, its TPOT p50, or TTFT p50 > 1.1x one node's)\n",
               first_cost);
    else
        printf("\nthe KV transfer costs no latency down to %g Gbit/s (hand-over p50 within a token's "
               "time of one node's, TTFT p50 within 10%%)\n",
               gbit[sizeof gbit / sizeof gbit[0] - 1]);
    return 0;
}

static int usage(FILE *f)
{
    fprintf(f,
            "usage: tandem simulate [--node SPEC] [--model llama2-7b|llama3-8b] [--workload P:O | "
            "--sharegpt]\n"
            "         [--rate R | --clients C] [--requests N] [--seed S] [--tbt-budget-ms B] "
            "[--gpu-batch K]\n"
            "         [--fpga-prefill] [--gpu-prefill MS@TOKENS] [--gpu-decode MS@CTX] [--list]\n"
            "         [--slo-tbt-ms MS] [--slo-ttft-ms MS] [--placement weigh|cards-first]\n"
            "         [--sparse-prefill trishape|flexprefill]\n"
            "       tandem simulate --compare [--model llama3.1-8b] [--card u280-batch] "
            "[--requests N]\n"
            "       tandem simulate --fig7 [--gpus a100,v100s] [--card u280] [--requests N] "
            "[--gpu-batch K]\n"
            "       tandem simulate --node A/B[/C...] [--net GBIT[:US]] [--net-sweep] [--greedy] "
            "[...]\n"
            "  SPEC: '+'-separated [N x]profile terms, e.g. a100+7xu280 (the default), 8xa100, "
            "h100+7xu280-tandem;\n"
            "        '/' between nodes: the first takes the clients and prefills, the others "
            "decode with\n"
            "        shipped KV (h200-tandem/4xu280-batch/4xu280-batch); --net: their network, "
            "Gbit/s each way\n"
            "        per node and one-way latency (default 100:10); --net-sweep: one node vs "
            "400..1 Gbit/s;\n"
            "        each remote decode step is a call whose answer brings every row's logits back "
            "to the\n"
            "        first node (it samples); --greedy: every row plain greedy, its token alone "
            "comes back\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_simulate(int argc, char **argv)
{
    sim_run o = {.node = "a100+7xu280", .shape = "llama2-7b", .prompt = 1536, .output = 512,
                 .clients = 16, .requests = 400, .seed = 1, .tbt_ms = 50, .gpu_batch = 1};
    const char *gpus = "a100,v100s", *card = "u280", *v;
    int bad = 0, do_fig7 = 0, do_compare = 0, requests_set = 0, placement_set = 0, batch_set = 0;
    int do_net_sweep = 0;
    for (int i = 1; i < argc && !bad; i++) {
        long l;
        double d;
        if ((v = dmn_opt(&i, argc, argv, "--node", &bad))) o.node = v;
        else if ((v = dmn_opt(&i, argc, argv, "--model", &bad))) o.shape = v;
        else if ((v = dmn_opt(&i, argc, argv, "--workload", &bad))) {
            char *end;
            long p = strtol(v, &end, 10), hi = p;
            if (*end == '-') hi = strtol(end + 1, &end, 10);
            long out = *end == ':' ? strtol(end + 1, &end, 10) : -1;
            if (*end || p < 1 || p > 1 << 20 || hi < p || hi > 1 << 20 || out < 1 || out > 1 << 20) {
                fprintf(stderr, "tandem simulate: --workload takes PROMPT[-PROMPT_MAX]:OUTPUT tokens\n");
                return 2;
            }
            o.prompt = (int)p;
            o.prompt_hi = (int)hi;
            o.output = (int)out;
        } else if (dmn_flag(i, argv, "--sharegpt")) o.sharegpt = 1;
        else if ((v = dmn_opt(&i, argc, argv, "--slo-tbt-ms", &bad))) {
            if (dmn_parse_float("--slo-tbt-ms", v, 0.001, 1e7, &d)) return 2;
            o.slo_tbt_ms = d;
        } else if ((v = dmn_opt(&i, argc, argv, "--slo-ttft-ms", &bad))) {
            if (dmn_parse_float("--slo-ttft-ms", v, 0.001, 1e7, &d)) return 2;
            o.slo_ttft_ms = d;
        } else if ((v = dmn_opt(&i, argc, argv, "--placement", &bad))) {
            if (!strcmp(v, "weigh")) o.cards_first = 0;
            else if (!strcmp(v, "cards-first")) o.cards_first = 1;
            else {
                fprintf(stderr, "tandem simulate: --placement takes weigh or cards-first\n");
                return 2;
            }
            placement_set = 1;
        } else if (dmn_flag(i, argv, "--compare")) do_compare = 1;
        else if ((v = dmn_opt(&i, argc, argv, "--rate", &bad))) {
            if (dmn_parse_float("--rate", v, 1e-6, 1e6, &d)) return 2;
            o.rate = d;
            o.clients = 0;
        } else if ((v = dmn_opt(&i, argc, argv, "--clients", &bad))) {
            if (dmn_parse_int("--clients", v, 1, 100000, &l)) return 2;
            o.clients = (int)l;
        } else if ((v = dmn_opt(&i, argc, argv, "--requests", &bad))) {
            if (dmn_parse_int("--requests", v, 1, SIM_MAX_REQUESTS, &l)) return 2;
            o.requests = (int)l;
            requests_set = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--seed", &bad))) {
            if (dmn_parse_int("--seed", v, 1, 1L << 62, &l)) return 2;
            o.seed = (uint64_t)l;
        } else if ((v = dmn_opt(&i, argc, argv, "--tbt-budget-ms", &bad))) {
            if (dmn_parse_float("--tbt-budget-ms", v, 0, 60000, &d)) return 2;
            o.tbt_ms = d;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-batch", &bad))) {
            if (dmn_parse_int("--gpu-batch", v, 1, 4096, &l)) return 2;
            o.gpu_batch = (int)l;
            batch_set = 1;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-prefill", &bad))) {
            if (parse_at("--gpu-prefill", v, &o.gpu_prefill_ms, &o.gpu_prefill_tokens)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpu-decode", &bad))) {
            if (parse_at("--gpu-decode", v, &o.gpu_decode_ms, &o.gpu_decode_ctx)) return 2;
        } else if ((v = dmn_opt(&i, argc, argv, "--gpus", &bad))) gpus = v;
        else if ((v = dmn_opt(&i, argc, argv, "--card", &bad))) card = v;
        else if (dmn_flag(i, argv, "--fpga-prefill")) o.fpga_prefill = 1;
        else if ((v = dmn_opt(&i, argc, argv, "--net", &bad))) {
            char *end;
            double g = strtod(v, &end), us = SCHED_SIM_NET_S * 1e6;
            if (*end == ':') us = strtod(end + 1, &end);
            if (*end || !(g >= 0.001 && g <= 1e5) || !(us >= 0 && us <= 1e6)) {
                fprintf(stderr, "tandem simulate: --net takes GBIT[:US] (0.001..1e5 Gbit/s, 0..1e6 us)\n");
                return 2;
            }
            o.net_gbit = g;
            o.net_us = us;
        } else if ((v = dmn_opt(&i, argc, argv, "--sparse-prefill", &bad))) {
            o.sparse = devices_sim_sparse(v);
            if (!o.sparse) {
                fprintf(stderr, "tandem simulate: --sparse-prefill takes trishape or flexprefill\n");
                return 2;
            }
        } else if (dmn_flag(i, argv, "--net-sweep")) do_net_sweep = 1;
        else if (dmn_flag(i, argv, "--greedy"))
            o.greedy = 1;
        else if (dmn_flag(i, argv, "--fig7")) do_fig7 = 1;
        else if (dmn_flag(i, argv, "--list")) {
            list();
            return 0;
        } else if (dmn_help(i, argv)) {
            return usage(stdout);
        } else if (!bad) {
            fprintf(stderr, "tandem simulate: unknown option %s\n", argv[i]);
            bad = 1;
        }
    }
    if (bad) return usage(stderr);
    if (do_fig7) {
        if (!requests_set) o.requests = 320;
        if (!placement_set) o.cards_first = 1; /* the paper's dispatch */
        return fig7(o, gpus, card);
    }
    if (do_compare) {
        /* 100 requests per client at 256 clients: with fewer, a closed loop whose clients all
         * started together leaves too short a steady window (at 10 per client decode-heavy read
         * up to 12 % high; BENCHMARKS.md) */
        if (!requests_set) o.requests = 25600;
        if (batch_set || placement_set) {
            /* no comparison caps the GPU's batch; both placements are in the table */
            fprintf(stderr, "tandem simulate: --compare runs every GPU at its best batch and both "
                            "placements: --gpu-batch and --placement do not apply\n");
            return 2;
        }
        return compare(o, strcmp(card, "u280") ? card : "u280-batch");
    }
    if (do_net_sweep) return net_sweep(o);
    sim_result r;
    char err[256];
    if (run_one(&o, &r, err, sizeof err)) {
        fprintf(stderr, "tandem simulate: %s\n", err);
        return 1;
    }
    print_one(&o, &r);
    return 0;
}

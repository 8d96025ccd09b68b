/* daemon/metrics.c — see metrics.h. */
#include "daemon/metrics.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bucket bounds. vLLM's own (vllm/engine/metrics.py) start at 1 ms for TTFT and 10 ms for
 * inter-token latency, sized for GPUs serving 7B+ models; tandem also serves tiny models on the
 * CPU, where a token takes well under a millisecond, so each list gains sub-millisecond buckets
 * in front and keeps vLLM's upper range. */
static const double ttft_b[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
static const double itl_b[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                               0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0};
static const double e2e_b[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5,
                               5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                               960.0, 1920.0, 7680.0};
/* Token counts: powers of two up to 128K, the longest context tandem's models have. */
static const double len_b[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                               16384, 32768, 65536, 131072};

#define NB(a) ((int)(sizeof a / sizeof a[0]))

const int dmn_metrics_statuses[DMN_METRICS_STATUSES] = {200, 202, 400, 401, 404, 405,
                                                        413, 429, 500, 503, 504, 0};

void dmn_hist_init(dmn_hist *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n > DMN_HIST_MAX_BUCKETS ? DMN_HIST_MAX_BUCKETS : n;
}

void dmn_hist_observe(dmn_hist *h, double v)
{
    if (!isfinite(v)) return;
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void dmn_metrics_init(dmn_metrics *m)
{
    memset(m, 0, sizeof *m);
    dmn_hist_init(&m->ttft, ttft_b, NB(ttft_b));
    dmn_hist_init(&m->itl, itl_b, NB(itl_b));
    dmn_hist_init(&m->e2e, e2e_b, NB(e2e_b));
    dmn_hist_init(&m->queue, e2e_b, NB(e2e_b));
    dmn_hist_init(&m->prefill, e2e_b, NB(e2e_b));
    dmn_hist_init(&m->decode, e2e_b, NB(e2e_b));
    dmn_hist_init(&m->prompt_len, len_b, NB(len_b));
    dmn_hist_init(&m->gen_len, len_b, NB(len_b));
}

void dmn_metrics_count_status(dmn_metrics *m, int status)
{
    for (int i = 0; i < DMN_METRICS_STATUSES; i++)
        if (dmn_metrics_statuses[i] == status || dmn_metrics_statuses[i] == 0) {
            m->responses[i]++;
            return;
        }
}

void dmn_prom_header(proto_buf *b, const char *name, const char *type, const char *help)
{
    proto_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The shortest text that reads back as the same double (what Prometheus' Go code writes:
 * 0.1, not 0.10000000000000001); integers print without a fraction. */
static void value(proto_buf *b, double v)
{
    if (isnan(v)) {
        proto_buf_str(b, "NaN");
    } else if (isinf(v)) {
        proto_buf_str(b, v > 0 ? "+Inf" : "-Inf");
    } else if (v == floor(v) && fabs(v) < 1e15) {
        proto_buf_printf(b, "%.0f", v);
    } else {
        char s[32];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(s, sizeof s, "%.*g", prec, v);
            if (strtod(s, NULL) == v) break;
        }
        proto_buf_str(b, s);
    }
}

void dmn_prom_sample(proto_buf *b, const char *name, const char *labels, double v)
{
    proto_buf_str(b, name);
    if (labels && *labels) proto_buf_printf(b, "{%s}", labels);
    proto_buf_str(b, " ");
    value(b, v);
    proto_buf_str(b, "\n");
}

void dmn_prom_label_value(proto_buf *b, const char *v)
{
    proto_buf_str(b, "\"");
    for (; *v; v++) {
        if (*v == '\\') proto_buf_str(b, "\\\\");
        else if (*v == '"') proto_buf_str(b, "\\\"");
        else if (*v == '\n') proto_buf_str(b, "\\n");
        else proto_buf_add(b, v, 1);
    }
    proto_buf_str(b, "\"");
}

void dmn_prom_hist(proto_buf *b, const char *name, const char *help, const dmn_hist *h)
{
    dmn_prom_header(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n_bounds; i++) {
        cum += h->counts[i];
        proto_buf_printf(b, "%s_bucket{le=\"", name);
        if (i < h->n_bounds) value(b, h->bounds[i]);
        else proto_buf_str(b, "+Inf");
        proto_buf_printf(b, "\"} %llu\n", (unsigned long long)cum);
    }
    proto_buf_printf(b, "%s_sum ", name);
    value(b, h->sum);
    proto_buf_printf(b, "\n%s_count %llu\n", name, (unsigned long long)h->count);
}

static void dev_labels(proto_buf *lb, const dmn_metrics_dev *d)
{
    lb->len = lb->off = 0;
    proto_buf_str(lb, "device=");
    dmn_prom_label_value(lb, d->name);
    proto_buf_str(lb, ",kind=");
    dmn_prom_label_value(lb, d->kind);
}

void dmn_metrics_render(proto_buf *b, const dmn_metrics *m, int running, int waiting,
                        const dmn_metrics_dev *devs, int n_devs, int ready, int draining)
{
    dmn_prom_header(b, "tandem_num_requests_running", "gauge", "Requests currently on a device.");
    dmn_prom_sample(b, "tandem_num_requests_running", NULL, running);
    dmn_prom_header(b, "tandem_num_requests_waiting", "gauge", "Requests waiting for a device.");
    dmn_prom_sample(b, "tandem_num_requests_waiting", NULL, waiting);
    dmn_prom_header(b, "tandem_ready", "gauge", "1 when /ready answers 200.");
    dmn_prom_sample(b, "tandem_ready", NULL, ready);
    dmn_prom_header(b, "tandem_draining", "gauge", "1 while draining (no new requests).");
    dmn_prom_sample(b, "tandem_draining", NULL, draining);

    proto_buf lb;
    proto_buf_init(&lb);
    static const char *const healths[] = {"ok", "degraded", "failed"};
    struct {
        const char *name, *type, *help;
    } fam[] = {
        {"tandem_device_busy_seconds_total", "counter", "Seconds the device spent in device calls."},
        {"tandem_device_memory_used_bytes", "gauge", "KV memory reserved by live sequences."},
        {"tandem_device_memory_total_bytes", "gauge", "KV memory budget of the device."},
        {"tandem_device_sequences_running", "gauge", "Sequences placed on the device."},
        {"tandem_device_steps_total", "counter", "Prefill and decode calls completed."},
        {"tandem_device_tokens_total", "counter", "Tokens through the device (prompt and generated)."},
        {"tandem_device_health", "gauge", "1 for the device's current health state."},
        {"tandem_device_decodes_total", "counter", "Requests placed to decode on the device."},
        {"tandem_device_prefills_total", "counter", "Requests placed to prefill on the device."},
        {"tandem_device_failovers_total", "counter", "Requests that moved away after a failure on the device."},
        {"tandem_device_kv_import_bytes_total", "counter", "Bytes of KV imported into the device from a prefill device."},
        {"tandem_device_prefill_chunks_total", "counter", "Prefill calls (chunks of prompts) on the device."},
        {"tandem_device_kv_corrupt_total", "counter", "KV imports into the device that failed their wire CRC where the KV landed (the request moved)."},
        {"tandem_device_kv_cache_usage_perc", "gauge", "Fraction (0-1) of the device's KV blocks held by running sequences (cached, evictable blocks count as free; a failed device's keeps the blocks held when it failed)."},
        {"tandem_device_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the device's prefix cache."},
        {"tandem_device_prefix_cache_hits_total", "counter", "Prompt tokens found in the device's prefix cache (not computed)."},
        {"tandem_device_prefix_cache_host_hits_total", "counter", "Of the hits, tokens loaded back from the host tier."},
        {"tandem_device_prefix_cache_evictions_total", "counter", "Cached prefixes given up for memory (to the host tier when it had room)."},
        {"tandem_device_host_cache_bytes", "gauge", "Host-tier bytes the device's evicted prefixes hold."},
        {"tandem_device_preemptions_total", "counter", "Requests preempted on the device for KV memory (they resumed later)."},
        {"tandem_device_prompt_tokens_computed_total", "counter", "Prompt positions the device computed (cache hits and forked choices excluded)."},
        {"tandem_device_prefill_split_calls_total", "counter", "Of the prefill calls, layer-split ones that ran some of a chunk's layers (the rest in later calls)."},
        {"tandem_device_prefill_over_budget_calls_total", "counter", "Of the prefill calls made while requests decode on the device, those that took longer than what was left of the time-between-tokens budget."},
        {"tandem_device_prefill_over_budget_seconds_total", "counter", "By how much those calls overran the budget's rest, summed (the decodes' extra wait)."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        dmn_prom_header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < n_devs; i++) {
            const dmn_metrics_dev *d = &devs[i];
            dev_labels(&lb, d);
            switch (f) {
            case 0: dmn_prom_sample(b, fam[f].name, lb.p, d->busy_seconds); break;
            case 1: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->mem_used); break;
            case 2: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->mem_total); break;
            case 3: dmn_prom_sample(b, fam[f].name, lb.p, d->running); break;
            case 4: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->steps); break;
            case 5: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->tokens); break;
            case 6: {
                size_t base = lb.len;
                for (int h = 0; h < 3; h++) {
                    lb.len = base;
                    lb.p[base] = 0;
                    proto_buf_str(&lb, ",state=");
                    dmn_prom_label_value(&lb, healths[h]);
                    dmn_prom_sample(b, fam[f].name, lb.p, !strcmp(d->health, healths[h]));
                }
                break;
            }
            case 7: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->decodes); break;
            case 8: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->prefills); break;
            case 9: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->failovers); break;
            case 10: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv_bytes_in); break;
            case 11: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->prefill_chunks); break;
            case 12: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv_corrupt); break;
            case 13:
                dmn_prom_sample(b, fam[f].name, lb.p,
                                d->kv.blocks_total ? (double)(d->kv.blocks_used - d->kv.blocks_cached) / d->kv.blocks_total : 0);
                break;
            case 14: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.queries); break;
            case 15: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.hits); break;
            case 16: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.host_hits); break;
            case 17: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.evictions); break;
            case 18: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.host_bytes); break;
            case 19: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.preemptions); break;
            case 20: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->kv.prefill_tokens); break;
            case 21: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->prefill_split_calls); break;
            case 22: dmn_prom_sample(b, fam[f].name, lb.p, (double)d->prefill_over_calls); break;
            case 23: dmn_prom_sample(b, fam[f].name, lb.p, d->prefill_over_seconds); break;
            }
        }
    }
    proto_buf_deinit(&lb);

    /* The node's KV store, as load-aware routers read it (vLLM's names with our prefix): the
     * paged devices' blocks held by running sequences over all their blocks, the prefix cache's
     * queries and hits in tokens, preemptions. A FAILED device is left out of the fraction, its
     * blocks used and total both: it keeps the blocks its sequences held when it failed (the card
     * may still write them: fpga/seq.c), so its share would never go back to idle, and it takes
     * no new sequence, so its free blocks are no room either. Its own gauges stay as they froze. */
    double used = 0, total = 0, queries = 0, hits = 0, preempt = 0, forks = 0;
    for (int i = 0; i < n_devs; i++) {
        if (strcmp(devs[i].health, "failed")) {
            used += devs[i].kv.blocks_used - devs[i].kv.blocks_cached;
            total += devs[i].kv.blocks_total;
        }
        queries += (double)devs[i].kv.queries;
        hits += (double)devs[i].kv.hits;
        preempt += (double)devs[i].kv.preemptions;
        forks += (double)devs[i].kv.forks;
    }
    dmn_prom_header(b, "tandem_kv_cache_usage_perc", "gauge",
                    "Fraction (0-1) of the node's paged KV blocks held by running sequences (failed devices left out).");
    dmn_prom_sample(b, "tandem_kv_cache_usage_perc", NULL, total > 0 ? used / total : 0);
    dmn_prom_header(b, "tandem_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix caches.");
    dmn_prom_sample(b, "tandem_prefix_cache_queries_total", NULL, queries);
    dmn_prom_header(b, "tandem_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix caches.");
    dmn_prom_sample(b, "tandem_prefix_cache_hits_total", NULL, hits);
    dmn_prom_header(b, "tandem_num_preemptions_total", "counter", "Requests preempted for KV memory.");
    dmn_prom_sample(b, "tandem_num_preemptions_total", NULL, preempt);
    dmn_prom_header(b, "tandem_prefill_forks_total", "counter",
                    "Choices (n > 1) that shared another choice's prefill instead of computing their own.");
    dmn_prom_sample(b, "tandem_prefill_forks_total", NULL, forks);

    dmn_prom_header(b, "tandem_prompt_tokens_total", "counter", "Prefill tokens processed.");
    dmn_prom_sample(b, "tandem_prompt_tokens_total", NULL, (double)m->prompt_tokens);
    dmn_prom_header(b, "tandem_generation_tokens_total", "counter", "Generated tokens.");
    dmn_prom_sample(b, "tandem_generation_tokens_total", NULL, (double)m->generation_tokens);
    static const char *const finish[DMN_FINISH_COUNT] = {"stop", "length", "abort"};
    dmn_prom_header(b, "tandem_request_success_total", "counter", "Finished requests by finish reason.");
    for (int i = 0; i < DMN_FINISH_COUNT; i++) {
        char l[64];
        snprintf(l, sizeof l, "finished_reason=\"%s\"", finish[i]);
        dmn_prom_sample(b, "tandem_request_success_total", l, (double)m->success[i]);
    }
    dmn_prom_header(b, "tandem_http_responses_total", "counter", "API responses by HTTP status.");
    for (int i = 0; i < DMN_METRICS_STATUSES; i++) {
        char l[64];
        if (dmn_metrics_statuses[i]) snprintf(l, sizeof l, "status=\"%d\"", dmn_metrics_statuses[i]);
        else snprintf(l, sizeof l, "status=\"other\"");
        dmn_prom_sample(b, "tandem_http_responses_total", l, (double)m->responses[i]);
    }
    dmn_prom_header(b, "tandem_request_rejected_queue_full_total", "counter",
                    "Requests refused with 429 because max_waiting requests were already waiting.");
    dmn_prom_sample(b, "tandem_request_rejected_queue_full_total", NULL,
                    (double)m->rejected_queue_full);
    dmn_prom_hist(b, "tandem_time_to_first_token_seconds", "Time from arrival to the first token.", &m->ttft);
    dmn_prom_hist(b, "tandem_inter_token_latency_seconds", "Time between consecutive tokens of a choice.", &m->itl);
    dmn_prom_hist(b, "tandem_e2e_request_latency_seconds", "Time from arrival to the last token.", &m->e2e);
    dmn_prom_hist(b, "tandem_request_queue_time_seconds", "Time a request waited for a device.", &m->queue);
    dmn_prom_hist(b, "tandem_request_prefill_time_seconds", "Time from device start to the first token.", &m->prefill);
    dmn_prom_hist(b, "tandem_request_decode_time_seconds", "Time from the first to the last token.", &m->decode);
    dmn_prom_hist(b, "tandem_request_prompt_tokens", "Prompt length of finished requests.", &m->prompt_len);
    dmn_prom_hist(b, "tandem_request_generation_tokens", "Generated tokens of finished requests.", &m->gen_len);
}

void dmn_metrics_render_dispatch(proto_buf *b, uint64_t split, uint64_t fallback, uint64_t local,
                                 uint64_t moves, uint64_t moves_failed)
{
    dmn_prom_header(b, "tandem_decode_placements_total", "counter",
                    "Decode placements: card (prefilled elsewhere, decoded on an FPGA), fallback "
                    "(decoded on its prefill device: every card busy or full), local (no cards).");
    dmn_prom_sample(b, "tandem_decode_placements_total", "target=\"card\"", (double)split);
    dmn_prom_sample(b, "tandem_decode_placements_total", "target=\"fallback\"", (double)fallback);
    dmn_prom_sample(b, "tandem_decode_placements_total", "target=\"local\"", (double)local);
    dmn_prom_header(b, "tandem_request_failovers_total", "counter",
                    "Times a request moved to other devices after a device failure.");
    dmn_prom_sample(b, "tandem_request_failovers_total", NULL, (double)moves);
    dmn_prom_header(b, "tandem_request_failover_errors_total", "counter",
                    "Requests that failed after moving too many times.");
    dmn_prom_sample(b, "tandem_request_failover_errors_total", NULL, (double)moves_failed);
}

void dmn_metrics_render_lent(proto_buf *b, int lent_seqs)
{
    dmn_prom_header(b, "tandem_peer_lent_sequences", "gauge",
                    "Sequences this node holds for its peers on its lent devices (a drain waits for them).");
    dmn_prom_sample(b, "tandem_peer_lent_sequences", NULL, lent_seqs);
}

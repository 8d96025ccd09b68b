/* daemon/metrics.h — Prometheus text exposition (format 0.0.4) and tandem's metric set.
 *
 * Names follow vLLM's with the prefix tandem_ for vllm: (vllm:time_to_first_token_seconds ->
 * tandem_time_to_first_token_seconds, ...): Prometheus reserves ':' for recording rules, which
 * `promtool check metrics` enforces; the README has the table for dashboards and routers that
 * expect vLLM's names. Counters end in _total; histograms expose cumulative _bucket{le=...},
 * _sum and _count.
 *
 * Threads: a dmn_metrics is owned by the loop thread (observations arrive with scheduler events
 * there); device statistics come from the scheduler's snapshot at render time. */
#ifndef TANDEM_DMN_METRICS_H
#define TANDEM_DMN_METRICS_H
#include <stdint.h>
#include "proto/buf.h"
#include "proto/status.h"

#define DMN_HIST_MAX_BUCKETS 32

typedef struct dmn_hist {
    const double *bounds; /* upper bounds, increasing; +Inf is implied */
    int n_bounds;
    uint64_t counts[DMN_HIST_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    double sum;
    uint64_t count;
} dmn_hist;

void dmn_hist_init(dmn_hist *h, const double *bounds, int n_bounds);
void dmn_hist_observe(dmn_hist *h, double v);

/* Exposition helpers. labels: the text inside {} (e.g. `device="cpu"`), or NULL. */
void dmn_prom_header(proto_buf *b, const char *name, const char *type, const char *help);
void dmn_prom_sample(proto_buf *b, const char *name, const char *labels, double v);
void dmn_prom_hist(proto_buf *b, const char *name, const char *help, const dmn_hist *h);
/* A label value escaped per the format (backslash, double quote, line feed). */
void dmn_prom_label_value(proto_buf *b, const char *v);

/* Finish reasons counted in tandem_request_success_total{finished_reason}. */
enum dmn_finish_label { DMN_FINISH_STOP, DMN_FINISH_LENGTH, DMN_FINISH_ABORT, DMN_FINISH_COUNT };

/* HTTP statuses counted in tandem_http_responses_total{status}. */
#define DMN_METRICS_STATUSES 12

typedef struct dmn_metrics {
    dmn_hist ttft, itl, e2e, queue, prefill, decode, prompt_len, gen_len;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t success[DMN_FINISH_COUNT];
    uint64_t responses[DMN_METRICS_STATUSES]; /* indexed like dmn_metrics_statuses */
    uint64_t rejected_queue_full;
} dmn_metrics;

extern const int dmn_metrics_statuses[DMN_METRICS_STATUSES];

void dmn_metrics_init(dmn_metrics *m);
void dmn_metrics_count_status(dmn_metrics *m, int status);

/* One device's gauges for the exposition. */
typedef struct dmn_metrics_dev {
    const char *name;
    const char *kind;   /* cpu, cuda, fpga */
    const char *health; /* ok, degraded, failed */
    double busy_seconds;
    uint64_t mem_total, mem_used;
    int running;
    uint64_t steps, tokens;
    uint64_t decodes, prefills, failovers, kv_bytes_in, prefill_chunks;
    uint64_t prefill_split_calls; /* of the chunks' calls, layer-split ones that left it unfinished */
    uint64_t prefill_over_calls;  /* of the calls beside decodes, those past the TBT budget's rest */
    double prefill_over_seconds;  /* by how much, summed */
    uint64_t kv_corrupt; /* KV imports whose wire CRC did not match where the KV landed */
    proto_kv_store kv; /* the KV store (issue 20): paged devices' block pool and prefix cache */
} dmn_metrics_dev;

/* The whole /metrics text: requests running/waiting, per-device gauges, then m. */
void dmn_metrics_render(proto_buf *b, const dmn_metrics *m, int running, int waiting,
                        const dmn_metrics_dev *devs, int n_devs, int ready, int draining);

/* The scheduler's dispatch counters (scheduler/sched.h sched_stats): decode placements by
 * target — "card" (split: prefilled elsewhere, decoded on an FPGA), "fallback" (decoded on its
 * prefill device because every card was busy or full), "local" (a node without cards) — and
 * failovers. Appended after dmn_metrics_render's text. */
void dmn_metrics_render_dispatch(proto_buf *b, uint64_t split, uint64_t fallback, uint64_t local,
                                 uint64_t moves, uint64_t moves_failed);

/* The sequences the node holds for its peers on its lent devices (dmn_serve_lent_seqs: what its
 * drain waits for; 0 on a node that lends none). Appended after the rest. */
void dmn_metrics_render_lent(proto_buf *b, int lent_seqs);

#endif

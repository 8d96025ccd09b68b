/* scheduler/sched_sim.h — the system simulator: the scheduler's dispatch on a virtual clock.
 *
 * What is shared with the daemon, and what is modelled:
 *   shared   the FCFS queue discipline, placement through sched_book (the policy of
 *            sched_policy.h and the same commitments), chunked prefill through
 *            sched_policy_chunk with a cost learned by sched_cost from the (modelled) chunk times,
 *            layer-split calls where the device has ACCEL_CAP_LAYER_SPLIT (the worker's
 *            sched_policy_call_layers: a chunk whose call does not fit what is left of the
 *            budget runs the layers that fit, the rest in later iterations),
 *            and the worker's iteration: one decode step over the device's active sequences in
 *            slices of max_batch, then prefill chunks within the time-between-tokens budget (the
 *            whole prompt when nothing decodes there), first token from the prefill's logits,
 *            the KV of a split placement shipped layer by layer while the prefill runs, the
 *            card's decode starting once both the prefill and the import are done.
 *   modelled the time of each device call (sched_sim_model.h), the KV shipping time over the
 *            host links, and request lengths (every request generates exactly n_out tokens: no
 *            eos, one choice).
 * Effects of a device iteration (tokens, finished prefills, released memory) apply when the
 * iteration ends, as the daemon's worker posts them after its step; token times are exact.
 *
 * Threads: one owner; no threads, no I/O. */
#ifndef TANDEM_SCHED_SIM_H
#define TANDEM_SCHED_SIM_H
#include "scheduler/sched_book.h"
#include "scheduler/sched_sim_model.h"

typedef struct sched_sim sched_sim;

/* One request of the trace, and what happened to it. */
typedef struct sched_sim_req {
    double arrival;        /* virtual seconds */
    int n_prompt, n_out;   /* prompt tokens, generated tokens (>= 1) */
    double cancel_at;      /* > 0: the client cancels at this time */
    /* results */
    int state;             /* enum sched_sim_state */
    int prefill_dev, decode_dev; /* -1 until placed */
    double t_start, t_first, t_done; /* placed, first token, last token (0: not reached) */
    int generated;
    double max_tbt;        /* longest time between two consecutive tokens */
    int id;                /* index in submission order */
    double t_second;       /* the second token (0: not reached): t_second - t_first is the
                              hand-over of a split request (its KV import, another node's link) */
} sched_sim_req;

enum sched_sim_state {
    SCHED_SIM_PENDING,  /* not arrived yet */
    SCHED_SIM_WAITING,  /* in the FCFS queue */
    SCHED_SIM_RUNNING,
    SCHED_SIM_DONE,
    SCHED_SIM_CANCELLED,
    SCHED_SIM_REJECTED, /* the policy said NEVER */
};

typedef struct sched_sim_config {
    const sched_sim_model *model;       /* the model shape and per-device timing (not copied) */
    int n_devs;
    double tbt_budget_s;                /* chunked prefill budget (0: off) */
    int fpga_prefill;                   /* sched_policy_opts.fpga_prefill */
    /* hooks, may be NULL: placement (book as it was before the commit), completion */
    void (*on_place)(void *ctx, const sched_sim_req *r, const sched_book *before,
                     const sched_placement *pl);
    void (*on_done)(void *ctx, sched_sim *sim, sched_sim_req *r);
    void *ctx;
    int cards_first;                    /* the devices describe no decode curve: GLITCHES' "cards
                                           first" placement (sched_policy.h) instead of weighing
                                           the devices' batch curves */
    double ttft_slo_s;                  /* sched_policy_opts.ttft_slo_s (0: none) */
} sched_sim_config;

/* Per device after a run. */
typedef struct sched_sim_dev_stats {
    double busy_s;        /* inside modelled device calls */
    double prefill_s, decode_s;
    uint64_t prefill_tokens, decode_tokens, decode_steps, prefill_chunks; /* chunks: prefill calls */
    int decodes;          /* requests placed to decode here */
    uint64_t prefill_split_calls; /* layer-split calls that left their chunk unfinished (the
                                     daemon's tandem_device_prefill_split_calls_total) */
} sched_sim_dev_stats;

sched_sim *sched_sim_new(const sched_sim_config *cfg, char *err, size_t errlen);
void sched_sim_free(sched_sim *s);
/* Adds a request (kept by pointer: it must outlive the run); its arrival must not be earlier
 * than the current virtual time. May be called from on_done (closed-loop clients). */
int sched_sim_submit(sched_sim *s, sched_sim_req *r);
/* Runs until every submitted request is finished (or until virtual time t_end > 0). Returns the
 * virtual time reached. */
double sched_sim_run(sched_sim *s, double t_end);
double sched_sim_now(const sched_sim *s);
const sched_book *sched_sim_book(const sched_sim *s);
void sched_sim_dev_stats_get(const sched_sim *s, int dev, sched_sim_dev_stats *out);
/* Requests still waiting / running (0 and 0 after a complete run). */
void sched_sim_counts(const sched_sim *s, int *waiting, int *running);

/* ---------------------------------------------------------------- summaries */

typedef struct sched_sim_summary {
    int n_done, n_cancelled, n_rejected;
    double t0, t1;            /* first arrival, last completion */
    double tokens_per_s;      /* generated tokens / (t1 - t0) */
    double requests_per_s;
    double ttft_p50, ttft_p99, tpot_p50, tpot_p99, e2e_p50, e2e_p99, queue_p50, queue_p99;
    int decodes_on_cards, decodes_fallback; /* placements: split to a card / decoded in place */
    double handover_p50, handover_p99; /* t_second - t_first of split requests (0: none) */
} sched_sim_summary;

/* Percentiles over the finished requests (TPOT: (t_done - t_first) / (n_out - 1), requests with
 * n_out >= 2). cards: 1 when the node has cards (otherwise no placement counts as fallback). */
void sched_sim_summarize(const sched_sim_req *reqs, int n, sched_sim_summary *out);
/* The p-th percentile (0..100) of v[0..n) by linear interpolation between order statistics;
 * sorts v. 0 when n == 0. */
double sched_sim_percentile(double *v, int n, double p);

#endif

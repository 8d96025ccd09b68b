/* scheduler/sched_sim_trace.h — request traces for the system simulator: arrivals (all at once,
 * or Poisson at a rate) and lengths (fixed [prompt, output], or ShareGPT-like).
 *
 * ShareGPT-like: log-normal prompt and output lengths with the means the vLLM paper reports for
 * its ShareGPT trace (Kwon et al., SOSP 2023, Sec. 6.1: 161.31 input and 337.99 output tokens on
 * average) and a log-space standard deviation of 1.0 — an assumption, not a fit: it gives the
 * long right tail of chat traffic (p99 around 10x the median). Lengths are clipped to
 * [4, context / 2] each so that prompt + output fits the model.
 *
 * Threads: pure (the generator's state is the caller's). */
#ifndef TANDEM_SCHED_SIM_TRACE_H
#define TANDEM_SCHED_SIM_TRACE_H
#include <stdint.h>
#include "scheduler/sched_sim.h"

typedef struct sched_sim_trace {
    double rate;          /* Poisson arrivals per second; 0: every request at time 0 */
    int prompt, output;   /* fixed lengths (when sharegpt == 0) */
    int prompt_hi;        /* > prompt: prompts uniform in [prompt, prompt_hi] instead */
    int sharegpt;
    int context;          /* the model's context (bounds the lengths) */
    uint64_t seed;        /* the generator's state (advanced by each call) */
    double t;             /* the last arrival */
} sched_sim_trace;

#define SCHED_SIM_SHAREGPT_PROMPT_MEAN 161.31
#define SCHED_SIM_SHAREGPT_OUTPUT_MEAN 337.99
#define SCHED_SIM_SHAREGPT_SIGMA 1.0

/* The next request of the trace (arrival, lengths; the rest zeroed). */
void sched_sim_trace_next(sched_sim_trace *t, sched_sim_req *out);
/* A uniform double in (0, 1) from the trace's generator (xorshift64*). */
double sched_sim_trace_uniform(sched_sim_trace *t);

#endif

/* scheduler/sched_sim_trace.c — see sched_sim_trace.h. */
#include "scheduler/sched_sim_trace.h"
#include <math.h>
#include <string.h>

double sched_sim_trace_uniform(sched_sim_trace *t)
{
    /* xorshift64* (Vigna 2016): fast, good enough for arrival jitter and lengths */
    if (!t->seed) t->seed = 0x9E3779B97F4A7C15ull;
    t->seed ^= t->seed >> 12;
    t->seed ^= t->seed << 25;
    t->seed ^= t->seed >> 27;
    uint64_t x = t->seed * 2685821657736338717ull;
    return ((double)(x >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

/* Log-normal with the given mean and log-space sigma (Box-Muller). */
static double lognormal(sched_sim_trace *t, double mean, double sigma)
{
    double u1 = sched_sim_trace_uniform(t), u2 = sched_sim_trace_uniform(t);
    double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
    double mu = log(mean) - sigma * sigma / 2;
    return exp(mu + sigma * z);
}

static int clip(double v, int lo, int hi)
{
    if (!(v >= lo)) return lo;
    if (v > hi) return hi;
    return (int)(v + 0.5);
}

void sched_sim_trace_next(sched_sim_trace *t, sched_sim_req *out)
{
    memset(out, 0, sizeof *out);
    if (t->rate > 0) t->t += -log(sched_sim_trace_uniform(t)) / t->rate;
    out->arrival = t->t;
    int half = t->context > 16 ? t->context / 2 : 8;
    if (t->sharegpt) {
        out->n_prompt = clip(lognormal(t, SCHED_SIM_SHAREGPT_PROMPT_MEAN, SCHED_SIM_SHAREGPT_SIGMA), 4, half);
        out->n_out = clip(lognormal(t, SCHED_SIM_SHAREGPT_OUTPUT_MEAN, SCHED_SIM_SHAREGPT_SIGMA), 4, half);
    } else {
        out->n_prompt = t->prompt;
        if (t->prompt_hi > t->prompt)
            out->n_prompt = t->prompt + (int)(sched_sim_trace_uniform(t) * (t->prompt_hi - t->prompt + 1));
        if (out->n_prompt > t->prompt_hi && t->prompt_hi > t->prompt) out->n_prompt = t->prompt_hi;
        out->n_out = t->output;
    }
}

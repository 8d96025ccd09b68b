/* scheduler/sched_policy.c — see sched_policy.h. */
#include "scheduler/sched_policy.h"

uint64_t sched_policy_kv_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    return (uint64_t)r->n * (uint64_t)(r->n_prompt + r->max_tokens) * d->kv_bytes_per_token;
}

static int usable(const sched_policy_dev *d)
{
    const unsigned both = ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE;
    return d->health != ACCEL_HEALTH_FAILED && (d->caps & both) == both && d->max_running > 0;
}

enum sched_place sched_policy_place(const sched_policy_dev *devs, int n_devs,
                                    const sched_policy_req *r, sched_placement *out)
{
    int best = -1, could = 0;
    for (int i = 0; i < n_devs; i++) {
        const sched_policy_dev *d = &devs[i];
        if (!usable(d)) continue;
        uint64_t need = sched_policy_kv_bytes(d, r);
        if (r->n > d->max_running || need > d->mem_total) continue; /* never fits here */
        could = 1;
        int room = d->running + r->n <= d->max_running && d->mem_committed <= d->mem_total &&
                   need <= d->mem_total - d->mem_committed;
        if (room && (best < 0 || d->running < devs[best].running)) best = i;
    }
    if (best >= 0) {
        out->prefill = out->decode = best;
        return SCHED_PLACE_OK;
    }
    return could ? SCHED_PLACE_WAIT : SCHED_PLACE_NEVER;
}

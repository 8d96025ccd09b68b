/* scheduler/sched_policy.h — where a request runs: the placement policy, on its own.
 *
 * The scheduler core (sched_core.c) keeps the queue and the devices' bookkeeping; whenever a
 * device frees up or a request arrives it asks this module, for the request at the head of the
 * FCFS queue, which device prefills it and which decodes it. The policy sees plain numbers only
 * (no threads, no clocks, no accel calls), so it is unit-tested with simulated devices and can be
 * replaced — issue 7's GLITCHES dispatch (prefill on the GPU, decode FCFS to an idle FPGA with
 * room, else GPU fallback, else wait) is a different sched_policy_place() over the same views.
 *
 * This first policy (one device does both, the CPU backend's case):
 *   - only healthy (OK or DEGRADED) devices that can both prefill and decode are candidates;
 *   - a candidate has room when running + n <= max_running and the request's KV reservation
 *     (n sequences of prompt + max_tokens positions) fits in mem_total - mem_committed;
 *   - among candidates with room the one with the fewest running sequences wins (ties: the
 *     lowest index) — spreading load over identical devices;
 *   - none with room but one could hold it when empty: WAIT (strict FCFS: the head waits, and
 *     nothing behind it overtakes, so nothing starves);
 *   - no candidate could ever hold it: NEVER (no healthy device, or the request is larger than
 *     any device's whole budget).
 *
 * Threads: pure functions (the core calls them on the loop thread). */
#ifndef TANDEM_SCHED_POLICY_H
#define TANDEM_SCHED_POLICY_H
#include <stdint.h>
#include "scheduler/accel.h"

/* One device as the policy sees it. */
typedef struct sched_policy_dev {
    enum accel_kind kind;
    unsigned caps;            /* ACCEL_CAP_* */
    enum accel_health health;
    uint64_t mem_total;       /* KV budget, bytes */
    uint64_t mem_committed;   /* bytes promised to requests placed here and not finished */
    uint64_t kv_bytes_per_token;
    int running;              /* sequences placed here and not finished */
    int max_running;          /* sequences it may run at once */
} sched_policy_dev;

/* The request at the head of the queue. */
typedef struct sched_policy_req {
    int n_prompt;
    int max_tokens;
    int n; /* choices: n sequences */
} sched_policy_req;

enum sched_place {
    SCHED_PLACE_OK,    /* *out says where */
    SCHED_PLACE_WAIT,  /* not now; ask again when something finishes */
    SCHED_PLACE_NEVER, /* no device can ever take it */
};

typedef struct sched_placement {
    int prefill; /* device index */
    int decode;  /* device index (this policy: == prefill) */
} sched_placement;

/* KV bytes the request reserves on a device with this many bytes per token. */
uint64_t sched_policy_kv_bytes(const sched_policy_dev *d, const sched_policy_req *r);

enum sched_place sched_policy_place(const sched_policy_dev *devs, int n_devs,
                                    const sched_policy_req *r, sched_placement *out);

#endif

/* peer/remote_live.c — a remote device's health and room as its node reports them: each
 * heartbeat's answer (peer_info: per device health, mem_total, mem_free) applied to the accel
 * device the scheduler sees (peer/remote.c runs the heartbeat; this file is what it does with the
 * answer).
 *
 * Health. A device the node reports FAILED is failed here (accel_dev_fail: sticky, as it is on
 * its node; the scheduler moves its work); one it reports DEGRADED is degraded here (placed after
 * OK devices). Both only go one way, as they do on the node's own devices: a node restarted is a
 * reconnection, which revives its devices unless the node still reports them FAILED.
 *
 * Room. Several daemons may use one lent device, and each accounts only for the sequences it
 * made: the wrapper (scheduler/accel.c) reserves capacity x KV bytes a token of this device's
 * budget (mem_total: the node's device's total at connect time, or our mem_limit below it) at
 * accel_seq_new and gives it back at accel_seq_free. What the others hold is added to the same
 * reservation as one more amount, `outside` (rdev.outside), set at each heartbeat, so that
 * accel_get_info's mem_free and accel_seq_new's admission both see it, through accel.h only.
 *
 * The node's mem_free counts what every peer's sequences hold, ours included, and ours are in
 * our reservation already. So ours are taken out first: own = what our sequences hold on the node
 * as the node counts it (peer_rdev_node_bytes: on a paged device the blocks of the positions sent
 * to it, on another the capacity it reserved at SEQ_NEW), kept up to date by the calls.
 *
 *   others  = (node_total - node_free) - own          (0 when negative)
 *   outside = budget - min(budget, node_total - others)
 *
 * Example: a lent card of 1000 MB (budget 1000). We hold one sequence of capacity 350 MB that
 * has 300 MB of KV on the card; another daemon holds 400 MB. The node reports free 300. others =
 * 700 - 300 = 400, outside = 1000 - 600 = 400, and mem_free here = 1000 - (350 + 400) = 250: the
 * other daemon's 400 counted once, ours at what we promised the sequence (350, its growth
 * included), not twice. Between heartbeats our own changes show at once (the wrapper's 350 comes
 * and goes with the sequence); the others' show at the next heartbeat: the view is stale by one
 * heartbeat (PEER_HEARTBEAT_S) for what other daemons do, and a sequence placed on that stale
 * view can still be refused by the node (ACCEL_ERR_NOMEM at SEQ_NEW or at a KV chunk: the
 * scheduler moves the request, as before this file). With our mem_limit below the node's total
 * (budget 600 of a 1000 MB card), the others first use what lies past our limit: outside = 600 -
 * min(600, 1000 - 400) = 0.
 *
 * The node's answer is computed between our ping and its arrival while our calls go on, so
 * `own` is read before the ping and after the answer and the larger taken: a sequence freed in
 * between (the node counted it, our count no longer does) would otherwise be counted as the
 * others' for one heartbeat. The larger errs the other way only when ours grew in between (its
 * growth then counts as ours although the node did not hold it yet): room shown that the node
 * may refuse, the cost there was before.
 *
 * The scheduler's placement sees `outside` too (accel_info.mem_outside, r_describe): its room
 * check (scheduler/sched_policy.c fits) takes it from mem_total beside its own commitments, so a
 * decode goes to a device with room instead of one the others filled (which would refuse its
 * sequence at ATTACH and move the request once its prefill ends).
 *
 * Threads: peer_rdev_own_note and _gone from the device's calls (its lock held); the rest from the
 * heartbeat thread or a device's open, the node's lock held (n->mu: it keeps the devices). */
#include "peer/remote_impl.h"

uint64_t peer_live_outside(uint64_t budget, uint64_t node_total, uint64_t node_free, uint64_t own)
{
    if (node_free > node_total) node_free = node_total; /* peer_info_read refuses it: a bug */
    uint64_t used = node_total - node_free;
    uint64_t others = used > own ? used - own : 0;
    uint64_t avail = node_total - others; /* others <= used <= node_total */
    return avail < budget ? budget - avail : 0;
}

uint64_t peer_rdev_node_bytes(const rdev *d, int capacity, int held)
{
    uint64_t per = d->di.kv_bytes_per_token;
    int bt = d->di.kv_block_tokens;
    if (bt <= 0) return (uint64_t)(capacity > 0 ? capacity : 0) * per; /* reserved at SEQ_NEW */
    if (held > capacity) held = capacity;
    if (held <= 0) return 0;
    return (uint64_t)((held + bt - 1) / bt) * (uint64_t)bt * per; /* whole blocks */
}

/* s's share of own_bytes becomes b. */
static void own_set(rdev *d, rseq *s, uint64_t b)
{
    if (b > s->node_bytes)
        atomic_fetch_add(&d->own_bytes, b - s->node_bytes);
    else
        atomic_fetch_sub(&d->own_bytes, s->node_bytes - b);
    s->node_bytes = b;
}

void peer_rdev_own_note(rdev *d, rseq *s, int held)
{
    if (s->gen != d->gen) return; /* of a connection gone: the node freed it, own was reset */
    s->held = held > 0 ? held : 0;
    own_set(d, s, peer_rdev_node_bytes(d, s->cap, s->held));
}

void peer_rdev_own_gone(rdev *d, rseq *s)
{
    if (s->gen == d->gen) own_set(d, s, 0);
}

/* outside follows x: the difference goes into (or out of) the wrapper's reservation. */
static void outside_set(rdev *d, uint64_t x)
{
    uint64_t was = atomic_load(&d->outside);
    if (x > was)
        atomic_fetch_add(&d->base.mem_reserved, x - was);
    else
        atomic_fetch_sub(&d->base.mem_reserved, was - x);
    atomic_store(&d->outside, x);
}

void peer_rdev_live_apply(rdev *d, const peer_dev_info *in, uint64_t own_before)
{
    uint64_t own = atomic_load(&d->own_bytes);
    if (own_before > own) own = own_before;
    outside_set(d, peer_live_outside(d->base.mem_total, in->mem_total, in->mem_free, own));
    /* a device lost or a node dead is FAILED already; its revival says what it is then */
    if (atomic_load(&d->lost) || atomic_load(&d->node->dead)) return;
    int cur = atomic_load(&d->base.health);
    if (in->health == ACCEL_HEALTH_FAILED && cur != ACCEL_HEALTH_FAILED) {
        accel_dev_fail(&d->base);
        peer_log(1, "peer_device_unhealthy",
                 "device=%s health=failed reason=\"its node reports it\"", d->name);
    } else if (in->health == ACCEL_HEALTH_DEGRADED && cur == ACCEL_HEALTH_OK) {
        accel_dev_degrade(&d->base);
        peer_log(1, "peer_device_unhealthy",
                 "device=%s health=degraded reason=\"its node reports it\"", d->name);
    }
}

void peer_node_own_sample(peer_node *n, uint64_t *own)
{
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < PEER_MAX_DEVS; i++)
        own[i] = n->devs[i] ? atomic_load(&((rdev *)n->devs[i])->own_bytes) : 0;
    pthread_mutex_unlock(&n->mu);
}

void peer_node_live_apply(peer_node *n, const peer_info *in, const uint64_t *own_before)
{
    for (int i = 0; i < in->n_devs && i < PEER_MAX_DEVS; i++)
        if (n->devs[i])
            peer_rdev_live_apply((rdev *)n->devs[i], &in->devs[i], own_before ? own_before[i] : 0);
}

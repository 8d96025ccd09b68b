/* peer/server_info.c — what the node says of its lent devices: the device list (peer_info) it
 * answers a peer's handshake (WELCOME) and heartbeat (PING -> INFO) with, the device faults it
 * notices on its peers' calls, and its drain (no room said, the sequences it holds counted). On the
 * node's loop (the list) or a device's call thread (the faults); everything it reads of a device
 * goes through accel_get_info. */
#include "peer/server_impl.h"
#include <stdatomic.h>
#include <string.h>

static void fill_info(peer_server *s, peer_info *in)
{
    const model_config *c = &s->cfg.m->cfg;
    memset(in, 0, sizeof *in);
    memcpy(in->fingerprint, s->cfg.m->fingerprint, 32);
    in->vocab = c->vocab;
    in->n_layers = c->n_layers;
    in->n_kv_heads = c->n_kv_heads;
    in->head_dim = c->head_dim;
    in->n_devs = s->cfg.n_devs;
    for (int i = 0; i < s->cfg.n_devs; i++) {
        accel_info ai;
        accel_get_info(s->devs[i], &ai);
        peer_dev_info *d = &in->devs[i];
        memcpy(d->name, ai.name, strnlen(ai.name, PEER_DEV_NAME_MAX)); /* checked at start */
        d->kind = ai.kind;
        d->caps = ai.caps & (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT);
        /* accel_decode_argmax holds on every device (the host picks where the device does
         * not): a decoding device answers DECODE_ARGMAX */
        _Static_assert(PEER_CAP_DECODE_ARGMAX == ACCEL_CAP_DECODE_ARGMAX, "one caps bit");
        if (ai.caps & ACCEL_CAP_DECODE) d->caps |= PEER_CAP_DECODE_ARGMAX;
        d->health = ai.health;
        d->max_batch = ai.max_batch < 1                ? 1
                       : ai.max_batch > PEER_MAX_BATCH ? PEER_MAX_BATCH
                                                       : ai.max_batch;
        d->mem_total = ai.mem_total;
        d->mem_free = ai.mem_free <= ai.mem_total ? ai.mem_free : ai.mem_total;
        /* draining: no room, so that peers place nothing new here (peer/remote_live.c then
         * counts the whole budget as used, their own sequences included: those go on, no new
         * one fits). Health stays as it is: the device is not failed, its sequences are not
         * moved. */
        if (atomic_load(&s->draining)) d->mem_free = 0;
        d->kv_bytes_per_token = ai.kv_bytes_per_token ? ai.kv_bytes_per_token : 1;
        d->kv_block_tokens =
            ai.kv_block_tokens > 0 && ai.kv_block_tokens <= PROTO_KV_MAX_BLOCK_TOKENS
                ? ai.kv_block_tokens
                : 0;
        /* the curve as the device states it; one the peer's reader would refuse is not sent */
        _Static_assert(PEER_CURVE_MAX == ACCEL_CURVE_MAX, "peer_curve mirrors accel_decode_curve");
        const accel_decode_curve *ac = &ai.decode_curve;
        d->curve.n = ac->n;
        for (int k = 0; k < ac->n && k < PEER_CURVE_MAX; k++) {
            d->curve.batch[k] = ac->batch[k];
            d->curve.step_s[k] = ac->step_s[k];
        }
        d->curve.ctx = ac->ctx;
        d->curve.s_per_pos = ac->s_per_pos;
        if (peer_curve_check(&d->curve)) memset(&d->curve, 0, sizeof d->curve);
    }
}

int peer_server_send_info(peer_server *s, sconn *sc, int type)
{
    peer_info in;
    fill_info(s, &in);
    static __thread uint8_t buf[PEER_INFO_MAX_BYTES];
    size_t n = peer_info_write(buf, &in);
    return peer_conn_send(sc->c, type, buf, n, NULL, 0, SEND_TIMEOUT_S);
}

/* A device call a peer asked for failed on the device itself (a fault or its run watchdog): said
 * here, where it ran — the peer only sees the status it gets back. Once: a device that had
 * already failed before the call (was_failed) refuses every call at once, and its failure was
 * said when it happened. */
void peer_server_device_fault(const peer_server *s, const sconn *sc, int dev, const char *call,
                              int st, int was_failed)
{
    if ((st != ACCEL_ERR_DEVICE && st != ACCEL_ERR_TIMEOUT) || was_failed) return;
    accel_info ai;
    accel_get_info(s->devs[dev], &ai);
    peer_log(1, "peer_device_failed", "peer=%s device=%s call=%s status=\"%s\" health=%s", sc->name,
             ai.name, call, accel_strerror(st), accel_health_name(ai.health));
}

int peer_server_dev_failed(const peer_server *s, int dev)
{
    accel_info ai;
    accel_get_info(s->devs[dev], &ai);
    return ai.health == ACCEL_HEALTH_FAILED;
}

void peer_server_set_draining(peer_server *s, int on)
{
    if (s) atomic_store(&s->draining, on != 0);
}

int peer_server_live_seqs(const peer_server *s)
{
    return s ? atomic_load(&((peer_server *)s)->live_seqs) : 0;
}

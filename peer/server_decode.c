/* peer/server_decode.c — the decode steps a peer asks of the node's devices (DECODE: every
 * row's logits back; DECODE_ARGMAX: each row's greedy token picked here, only the wanted rows'
 * logits back). Run inline on the node's loop, as every device call (peer/server.c). */
#include "peer/server_impl.h"
#include <stdlib.h>
#include <string.h>

int peer_server_on_decode(peer_server *s, sconn *sc, const uint8_t *p, size_t n)
{
    static __thread uint32_t ids_seq[PEER_MAX_BATCH];
    static __thread int32_t ids[PEER_MAX_BATCH];
    accel_seq *seqs[PEER_MAX_BATCH];
    uint32_t dev;
    int k;
    if (peer_decode_read(p, n, &dev, &k, ids_seq, ids)) return PEER_ERR_PROTO;
    uint8_t fixed[PEER_LOGITS_FIXED];
    int vocab = s->cfg.m->cfg.vocab, st = 0;
    for (int i = 0; i < k && !st; i++) {
        sseq *q = seq_get(sc, ids_seq[i], dev);
        if (!q) st = ACCEL_ERR_INVALID;
        else seqs[i] = q->s;
    }
    size_t need = (size_t)k * (size_t)vocab;
    if (!st && need > s->logits_cap) {
        float *l = realloc(s->logits, need * sizeof *l);
        if (!l) st = ACCEL_ERR_NOMEM;
        else s->logits = l, s->logits_cap = need;
    }
    if (!st) {
        const int was_failed = peer_server_dev_failed(s, (int)dev);
        st = accel_decode(s->devs[dev], k, seqs, ids, s->logits);
        peer_server_device_fault(s, sc, (int)dev, "decode", st, was_failed);
    }
    peer_logits_write_fixed(fixed, st, k, vocab);
    return peer_conn_send(sc->c, PEER_LOGITS, fixed, sizeof fixed, st ? NULL : s->logits,
                          st ? 0 : need * sizeof(float), SEND_TIMEOUT_S);
}

/* DECODE_ARGMAX: the step with each row's greedy token picked here; only the wanted rows'
 * logits go back (moved together, in row order, in the logits buffer). */
int peer_server_on_decode_argmax(peer_server *s, sconn *sc, const uint8_t *p, size_t n)
{
    static __thread uint32_t ids_seq[PEER_MAX_BATCH];
    static __thread int32_t ids[PEER_MAX_BATCH], argmax[PEER_MAX_BATCH];
    static __thread unsigned char want[PEER_MAX_BATCH];
    static __thread uint8_t fixed[PEER_TOKENS_FIXED + 4 * PEER_MAX_BATCH];
    accel_seq *seqs[PEER_MAX_BATCH];
    uint32_t dev;
    int k, n_want;
    if (peer_decode_argmax_read(p, n, &dev, &k, ids_seq, ids, want, &n_want)) return PEER_ERR_PROTO;
    int vocab = s->cfg.m->cfg.vocab, st = 0;
    for (int i = 0; i < k && !st; i++) {
        sseq *q = seq_get(sc, ids_seq[i], dev);
        if (!q) st = ACCEL_ERR_INVALID;
        else seqs[i] = q->s;
    }
    size_t need = (size_t)k * (size_t)vocab; /* accel_decode_argmax's room: every row */
    if (!st && need > s->logits_cap) {
        float *l = realloc(s->logits, need * sizeof *l);
        if (!l) st = ACCEL_ERR_NOMEM;
        else s->logits = l, s->logits_cap = need;
    }
    if (!st) {
        const int was_failed = peer_server_dev_failed(s, (int)dev);
        st = accel_decode_argmax(s->devs[dev], k, seqs, ids, s->logits, want, argmax);
        peer_server_device_fault(s, sc, (int)dev, "decode", st, was_failed);
    }
    peer_tokens_write_fixed(fixed, st, k, vocab, n_want);
    if (st) return peer_conn_send(sc->c, PEER_TOKENS, fixed, PEER_TOKENS_FIXED, NULL, 0, SEND_TIMEOUT_S);
    for (int i = 0; i < k; i++) peer_wr32(fixed + PEER_TOKENS_FIXED + 4 * i, (uint32_t)argmax[i]);
    int j = 0;
    for (int i = 0; i < k; i++)
        if (want[i]) {
            if (j != i) memmove(s->logits + (size_t)j * vocab, s->logits + (size_t)i * vocab, sizeof(float) * (size_t)vocab);
            j++;
        }
    return peer_conn_send(sc->c, PEER_TOKENS, fixed, PEER_TOKENS_FIXED + 4 * (size_t)k, s->logits,
                          (size_t)n_want * (size_t)vocab * sizeof(float), SEND_TIMEOUT_S);
}

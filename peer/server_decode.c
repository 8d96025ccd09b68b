/* peer/server_decode.c — the decode steps a peer asks of the node's devices (DECODE: every
 * row's logits back; DECODE_ARGMAX: each row's greedy token picked here, only the wanted rows'
 * logits back). Read off the frame by the node's loop, run on the device's call thread, answered
 * by the loop (peer/server_call.c). */
#include "peer/server_impl.h"
#include <stdlib.h>
#include <string.h>

int peer_server_decode_read(peer_server *s, sconn *sc, scall *c, const uint8_t *p, size_t n)
{
    static __thread uint32_t ids_seq[PEER_MAX_BATCH];
    uint32_t dev;
    int r = c->kind == CALL_DECODE
                ? peer_decode_read(p, n, &dev, &c->n, ids_seq, c->ids)
                : peer_decode_argmax_read(p, n, &dev, &c->n, ids_seq, c->ids, c->want, &c->n_want);
    if (r) return PEER_ERR_PROTO;
    c->st = 0;
    for (int i = 0; i < c->n && !c->st; i++) {
        sseq *q = seq_get(sc, ids_seq[i], dev);
        if (!q)
            c->st = ACCEL_ERR_INVALID;
        else
            c->seqs[i] = q->s;
    }
    return PEER_OK;
}

void peer_server_decode_run(peer_server *s, scall *c)
{
    int vocab = s->cfg.m->cfg.vocab;
    size_t need = (size_t)c->n * (size_t)vocab; /* accel_decode_argmax's room too: every row */
    if (need > c->logits_cap) {
        free(c->logits); /* nothing of it is kept: grown without a copy */
        c->logits_cap = 0;
        c->logits = malloc(need * sizeof *c->logits);
        if (!c->logits) {
            c->st = ACCEL_ERR_NOMEM;
            return;
        }
        c->logits_cap = need;
    }
    const int was_failed = peer_server_dev_failed(s, c->dev);
    accel_dev *d = s->devs[c->dev];
    if (c->kind == CALL_DECODE)
        c->st = accel_decode(d, c->n, c->seqs, c->ids, c->logits);
    else
        c->st = accel_decode_argmax(d, c->n, c->seqs, c->ids, c->logits, c->want, c->argmax);
    peer_server_device_fault(s, c->sc, c->dev, "decode", c->st, was_failed);
    if (c->st || c->kind != CALL_DECODE_ARGMAX) return;
    /* only the wanted rows' logits go back: moved together, in row order */
    int j = 0;
    for (int i = 0; i < c->n; i++)
        if (c->want[i]) {
            if (j != i)
                memmove(c->logits + (size_t)j * vocab, c->logits + (size_t)i * vocab,
                        sizeof(float) * (size_t)vocab);
            j++;
        }
}

int peer_server_decode_answer(peer_server *s, scall *c)
{
    static __thread uint8_t fixed[PEER_TOKENS_FIXED + 4 * PEER_MAX_BATCH];
    int vocab = s->cfg.m->cfg.vocab, st = c->st;
    peer_conn *conn = c->sc->c;
    if (c->kind == CALL_DECODE) {
        peer_logits_write_fixed(fixed, st, c->n, vocab);
        return peer_conn_send(conn, PEER_LOGITS, fixed, PEER_LOGITS_FIXED, st ? NULL : c->logits,
                              st ? 0 : (size_t)c->n * (size_t)vocab * sizeof(float),
                              SEND_TIMEOUT_S);
    }
    peer_tokens_write_fixed(fixed, st, c->n, vocab, c->n_want);
    if (st)
        return peer_conn_send(conn, PEER_TOKENS, fixed, PEER_TOKENS_FIXED, NULL, 0, SEND_TIMEOUT_S);
    for (int i = 0; i < c->n; i++)
        peer_wr32(fixed + PEER_TOKENS_FIXED + 4 * i, (uint32_t)c->argmax[i]);
    return peer_conn_send(conn, PEER_TOKENS, fixed, PEER_TOKENS_FIXED + 4 * (size_t)c->n, c->logits,
                          (size_t)c->n_want * (size_t)vocab * sizeof(float), SEND_TIMEOUT_S);
}

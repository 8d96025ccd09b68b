/* peer/kv_rx.h — the node's KV chunks checked and imported on a thread of their own.
 *
 * The node's thread (peer/server.c) owns UCX: it takes each KV chunk's announcement off the
 * stream and receives the chunk (over shared memory, the copy out of the sender's memory is
 * this thread's own work). Checking the chunk (the wire reader's CRC-32C over every byte) and
 * importing it into the device used to follow on the same thread, so the next chunk's copy
 * waited for both; here they run on a second thread while the node's thread receives the next
 * chunk into another buffer.
 *
 *   node's thread                         kv_rx thread
 *   buf = peer_kv_rx_buffer(rx, n)         (waits for a pushed chunk)
 *   receive the chunk into buf
 *   peer_kv_rx_push(rx, owner, &k)   --->  status = apply(ctx, owner, &k)
 *   ... next chunk into the other buffer   result (owner, status) queued; wake(wake_ctx)
 *   peer_kv_rx_done(rx, &owner, &st) <---
 *
 * Chunks are applied in the order they were pushed, and their results come back in that
 * order. PEER_KV_RX_SLOTS buffers: the node's thread waits in peer_kv_rx_buffer while every
 * one is pushed and not yet applied (a slow device import holds the receives back, bounding
 * memory at PEER_KV_RX_SLOTS chunks). Anything else that touches the devices, or frees what
 * apply reads, calls peer_kv_rx_sync first: the devices are driven by one thread at a time
 * (accel.h), and between a sync and the next push that is the node's thread.
 *
 * Threads: every function but the apply and wake callbacks from the node's thread only. */
#ifndef TANDEM_PEER_KV_RX_H
#define TANDEM_PEER_KV_RX_H
#include "peer/msg.h"
#include <stddef.h>
#include <stdint.h>

#define PEER_KV_RX_SLOTS 2

typedef struct peer_kv_rx peer_kv_rx;
/* Applies one chunk (k->bytes: the buffer it was received into); returns the REPLY's status. */
typedef int (*peer_kv_rx_apply_fn)(void *ctx, void *owner, const peer_kv *k);

/* Starts the thread. wake (may be NULL) is called on it after each chunk, so that a node's
 * thread asleep on its UCX worker wakes to send the answer (ucp_worker_signal). PEER_OK or
 * PEER_ERR_NOMEM. */
int peer_kv_rx_new(peer_kv_rx_apply_fn apply, void *ctx, void (*wake)(void *), void *wake_ctx,
                   peer_kv_rx **out);
/* Stops the thread (chunks pushed and not yet applied are applied first) and frees. */
void peer_kv_rx_free(peer_kv_rx *rx);
/* A buffer of at least n bytes for the next chunk, waiting for a free one. NULL: no memory. */
uint8_t *peer_kv_rx_buffer(peer_kv_rx *rx, size_t n);
/* Hands the chunk received into the buffer peer_kv_rx_buffer gave to the thread (k->bytes
 * must point into it). Without a push the buffer is simply taken again by the next call. */
void peer_kv_rx_push(peer_kv_rx *rx, void *owner, const peer_kv *k);
/* The oldest result not yet taken: 1 with it, 0 when none is ready. */
int peer_kv_rx_done(peer_kv_rx *rx, void **owner, int *status);
/* Waits until every pushed chunk was applied (their results wait for peer_kv_rx_done). */
void peer_kv_rx_sync(peer_kv_rx *rx);
/* Chunks pushed whose results were not taken yet. */
int peer_kv_rx_pending(const peer_kv_rx *rx);

#endif

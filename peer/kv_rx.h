/* peer/kv_rx.h — the node's KV chunks checked and imported on threads of their own, one lane a
 * lent device.
 *
 * The node's thread (peer/server.c) owns UCX: it finds each KV chunk among the tagged messages
 * that came (its length bounded) and receives it (over shared memory, the copy out of the sender's
 * memory is this thread's own work; with two receiving threads, the one that received it also
 * computes the payload's CRC-32C while the bytes are in its cache, peer_kv.crc). Checking the chunk
 * (the wire reader's CRC-32C over every byte, or that CRC taken for the payload's) and importing it
 * into the device used to follow on the same thread, so the next
 * chunk's copy waited for both; here they run on a second thread while the node's thread
 * receives the next chunks into other buffers — several at once, one per sending connection.
 *
 *   node's thread                                 lane's thread (the chunk's device's)
 *   slot = peer_kv_rx_take(rx, n, 0, &buf)         (waits for a pushed chunk)
 *   receive the chunk into buf
 *   peer_kv_rx_push(rx, slot, lane, owner, &k) ---> status = apply(ctx, owner, &k); the slot is
 * free
 *   ... other chunks into other slots                result (owner, status) ready; wake(wake_ctx)
 *   peer_kv_rx_done(rx, &owner, &st)           <---
 *
 * Lanes: each pushed chunk names its lane (the node: its device). A lane's chunks are applied in
 * the order they were pushed on it, whatever order their slots were taken in (chunks of several
 * connections complete in any order; one connection's come one at a time, so its own stay in
 * order), each lane on its own thread: an import that waits for its device (the device's call
 * thread running a long step holds it, peer/server_call.c) holds up no other lane's. Results
 * come back in each owner's push order: an owner's result waits for its earlier chunks, on any
 * lane, and for no other owner's; with one lane that is the push order. Memory is bounded at
 * PEER_KV_RX_SLOTS chunks a lane (n_lanes * PEER_KV_RX_SLOTS buffers): while every slot is
 * taken or pushed and not yet applied, a take waits or fails (a slow device import holds the
 * receives back). A take does not know its chunk's lane yet (a tagged chunk names its device in
 * its bytes), so the node keeps one lane from taking every slot by asking peer_kv_rx_lane_room
 * before it receives more for a connection whose chunks go to that lane. The devices are driven
 * by one thread at a time (accel.h): apply takes the device's lock around each import, as its
 * call thread does around each call (peer/server_call.c); peer_kv_rx_sync waits for every pushed
 * chunk (the node's stop, and what frees what apply reads).
 *
 * Threads: every function but the apply and wake callbacks from the node's thread only — one
 * thread at a time, the one holding the node's loop (peer/server.c: its receiving threads take
 * turns); a reserved slot's push (and peer_kv_rx_split_back) from whichever thread reserved it. */
#ifndef TANDEM_PEER_KV_RX_H
#define TANDEM_PEER_KV_RX_H
#include "peer/msg.h"
#include <stddef.h>
#include <stdint.h>

#ifndef PEER_KV_RX_SLOTS /* (a -D for measurements: bench/peer_quiet_pack.sh's SLOTS) */
#define PEER_KV_RX_SLOTS 4
#endif
/* lanes at most: the node's, one a lent device */
#define PEER_KV_RX_LANES_MAX PEER_MAX_DEVS
/* peer_kv_rx_take: no slot free */
#define PEER_KV_RX_BUSY (-1)
/* Measurement only (tools/peer_bench --warm 0): 1 makes a take find the lowest free index (the
 * code before the slot freed last was preferred). Set before any kv_rx starts. */
extern int peer_kv_rx_lowest_first;

typedef struct peer_kv_rx peer_kv_rx;
/* Applies one chunk (k->bytes: the buffer it was received into); returns the REPLY's status. On
 * the chunk's lane's thread: the lanes' applies run at once. */
typedef int (*peer_kv_rx_apply_fn)(void *ctx, void *owner, const peer_kv *k);

/* Starts n_lanes threads (1 .. PEER_KV_RX_LANES_MAX, clamped). wake (may be NULL) is called on a
 * lane's thread after a chunk, so that a node's thread asleep on its UCX worker wakes to send the
 * answer (ucp_worker_signal). PEER_OK or PEER_ERR_NOMEM. */
int peer_kv_rx_new(int n_lanes, peer_kv_rx_apply_fn apply, void *ctx, void (*wake)(void *),
                   void *wake_ctx, peer_kv_rx **out);
/* Stops the threads (chunks pushed and not yet applied are applied first) and frees. */
void peer_kv_rx_free(peer_kv_rx *rx);
/* A free slot for the next chunk, its buffer (*buf) grown to at least n bytes: the slot's
 * index — the free one freed last (applied or put back most recently: its buffer the warmest in
 * the caches), never-freed ones lowest index first. With wait 0 PEER_KV_RX_BUSY when every slot is taken or waiting to be applied; with
 * wait 1 it waits for one (its chunk applied). PEER_ERR_NOMEM: no memory (the slot stays free). */
int peer_kv_rx_take(peer_kv_rx *rx, size_t n, int wait, uint8_t **buf);
/* Hands the chunk received into slot's buffer to lane's thread (k->bytes must point into it; a
 * lane out of range is lane 0). A reserved slot stays on the lane it was reserved on. */
void peer_kv_rx_push(peer_kv_rx *rx, int slot, int lane, void *owner, const peer_kv *k);
/* Gives a taken slot its place in lane's apply order now, its push to come later (from any thread:
 * the node's receiving threads hand the chunk's CRC to the one that received it, peer/server.c):
 * the lane's chunks after it wait for it, and every result after it waits for its push (its owner
 * is not known before). Every reserved slot must be pushed. */
void peer_kv_rx_reserve(peer_kv_rx *rx, int slot, int lane);
/* peer_kv_rx_reserve, and the CRC-32C of the slot's bytes [at, at + n) offered to the lane's
 * thread: while it has nothing else to do (this chunk is the oldest not applied: it waits for
 * its push anyway) it computes that part beside the caller's CRC of the part before it, so that
 * a chunk's check takes about half as long (the chunk a sender waits for at a run's end among
 * them). The caller then asks peer_kv_rx_split_back whether it must compute the part itself. */
void peer_kv_rx_reserve_split(peer_kv_rx *rx, int slot, int lane, const uint8_t *at, size_t n);
/* After peer_kv_rx_reserve_split: 1 when the offer is taken back (the kv_rx thread had not
 * started it: the caller computes the part and pushes the whole CRC, as without the offer); 0
 * when the kv_rx thread has it: the caller pushes with k->crc the CRC of the bytes before the
 * part only (from k->crc_off), and the kv_rx thread joins its part's to it before the apply
 * (proto_crc32c_combine). */
int peer_kv_rx_split_back(peer_kv_rx *rx, int slot);
/* A slot taken and not pushed (its receive failed or was taken back): free again. */
void peer_kv_rx_put_back(peer_kv_rx *rx, int slot);
/* The same for a slot whose receive UCX would not give back (peer_conn_req_abandon 0): its
 * buffer becomes the caller's (returned, its capacity in *cap), to be freed once UCX is done with
 * the receive (peer_req_done) and not before (its bytes may still land in it); the slot takes a
 * fresh one at its next take. NULL when the slot held none. */
uint8_t *peer_kv_rx_put_back_lost(peer_kv_rx *rx, int slot, size_t *cap);
/* The oldest result ready whose owner has no older chunk not yet applied: 1 with it, 0 when none
 * is. Each owner's results come in its push order. */
int peer_kv_rx_done(peer_kv_rx *rx, void **owner, int *status);
/* 1 when lane holds fewer than PEER_KV_RX_SLOTS chunks (reserved, pushed, being applied) with
 * `coming` more counted (receives started that will likely go there): the node receives more for
 * a connection whose chunks go to lane only then, so that a lane stuck behind its device's long
 * call holds at most about its share of the slots. 0 also asks for a wake-up after the next
 * chunk applied (as a take that finds no slot). Always 1 with one lane (the take bounds it). */
int peer_kv_rx_lane_room(peer_kv_rx *rx, int lane, int coming);
/* The wake callback is called after the next chunk is applied (even with more queued), for a
 * node's thread that waits for a result before it receives more (tools/peer_bench --rx-tight 1,
 * a variant measured and not taken). Call it before looking at the results (peer_kv_rx_done), so
 * that a chunk applied after that look wakes it. */
void peer_kv_rx_want(peer_kv_rx *rx);
/* Waits until every pushed chunk was applied (their results wait for peer_kv_rx_done). */
void peer_kv_rx_sync(peer_kv_rx *rx);
/* Chunks pushed whose results were not taken yet. */
int peer_kv_rx_pending(const peer_kv_rx *rx);
/* The most slots ever in use at once (taken, reserved or pushed and not yet applied), counted
 * at each take: how many buffers the chunks took turns in (tests, benchmarks). Any thread. */
int peer_kv_rx_busy_max(const peer_kv_rx *rx);

#endif

/* peer/peer.h — prefill on one node, decode on another: daemons as each other's devices.
 *
 * Two halves, over UCX (peer/link.h) with the messages of peer/msg.h:
 *
 *   server  a daemon with `kv_listen = ADDR:PORT` offers devices (`peer_devices`) to its peers:
 *           a thread of its own accepts connections, authenticates them (peer/auth.h), answers
 *           heartbeats with its device list and free memory, and has what they ask run on those
 *           devices: sequences, KV imports in the KV wire format (proto/KV_FORMAT.md; every
 *           chunk's CRC checked on arrival; on an import thread), decode steps (on a thread of
 *           each device: one peer's slow step holds no other peer). The devices it offers are
 *           its own: the daemon's scheduler does not drive them (accel.h: one thread at a time).
 *   client  a daemon with `peers = ADDR:PORT,...` connects to each (peer_node_connect) and opens
 *           each device a peer offers as a device of its own (peer_remote_open, through the
 *           composition root devices/): a "remote" accel backend whose calls go to the peer. Its
 *           scheduler places on it like on a local card (local cards first). Decode steps bring
 *           back the full logits, so that sampling, stop strings and logprobs stay where the
 *           client connection is and a request means the same whichever node decodes it.
 *
 * Faults: a peer that stops answering its heartbeat (PEER_HEARTBEAT_S, PEER_DEAD_S) or fails a
 * call has its devices marked FAILED: the scheduler moves their requests (re-prefilled where
 * their KV was). The heartbeat thread then tries the node again with backoff
 * (PEER_RECONNECT_*_S); once it answers, authenticated, with the same model and devices (each
 * described as when it was opened: block size, caps, batch, KV bytes a token), its devices are
 * revived (accel_dev_revive) and placed on again. A call whose own connection fails
 * (timed out, closed, answered out of protocol) while the node answers its heartbeat fails that
 * device only: its connection is closed at once (the node frees its sequences) and the heartbeat
 * connects it again and revives it at its next answer. A chunk whose CRC fails is refused with
 * ACCEL_ERR_CORRUPT and logged on the receiving node; the sender's scheduler counts it and marks
 * the device. A peer that sends anything malformed, oversized or unauthenticated is disconnected
 * with a log line.
 *
 * Testing: TANDEM_PEER_FAULT="kv_bitflip=N[,M..]" flips one payload bit of the N-th (M-th) KV
 * chunk each remote device of this process sends (after its CRC was computed): corruption on
 * the wire, as the receiver sees it; "kv_truncate=N[,M..]" sends those chunks without their
 * last 64 bytes (a chunk cut short); "kv_stall=PATH" holds a chunk back while the file PATH
 * exists (at most PEER_STALL_MAX_S; the file's removal lets it go at once): nothing of it is
 * sent meanwhile (a tagged chunk or a KV frame alike), logged as
 * peer_fault_injected kind=kv_stall, so that a test can kill either node with KV in flight;
 * any of them with ';' between. Read when a remote device opens.
 *
 * Threads: peer_server_* and peer_node_* from one thread (the daemon's loading / shutdown);
 * a remote device is driven as accel.h says; the log hook may be called from any thread. */
#ifndef TANDEM_PEER_H
#define TANDEM_PEER_H
#include "model/ckpt/model.h"
#include "peer/msg.h"
#include "scheduler/accel.h"
#include <stddef.h>

/* kv_stall's longest hold (TANDEM_PEER_FAULT above) */
#define PEER_STALL_MAX_S 20.0

/* Heartbeat period, and the silence after which a peer is dead: "within seconds". */
#define PEER_HEARTBEAT_S 1.0
#define PEER_DEAD_S 3.0
/* A call on a remote device (one decode step, one KV chunk) that takes longer fails it: far
 * above a step of any model on any card, far below the scheduler's watchdog (10 s default).
 * TANDEM_PEER_CALL_TIMEOUT_S overrides it (benchmarks of slow devices). */
#define PEER_CALL_TIMEOUT_S 8.0
/* A dead node is tried again this long after it was lost, then at doubling intervals up to the
 * maximum: a restarted daemon is back in placement within seconds of answering, and a node that
 * stays down costs one connection attempt per 8 s. */
#define PEER_RECONNECT_MIN_S 0.5
#define PEER_RECONNECT_MAX_S 8.0

/* Where log lines go: warn 1 for warnings. event is a word ("peer_refused"), msg key=value
 * pairs. Default: stderr. Set once before anything starts. */
typedef void (*peer_log_fn)(int warn, const char *event, const char *msg);
void peer_set_log(peer_log_fn fn);
/* Config peer_poll_us: every UCX wait of the process (the node's thread, the remote devices'
 * and heartbeats' connections) busy-polls its worker for up to us microseconds after activity
 * before it sleeps, and so does the KV hand-off to the import thread (peer/link.h
 * peer_link_set_poll_us: bounded, 0 sleeps at once). Set before the first connection. */
void peer_set_poll_us(int us);

/* ---------------------------------------------------------------- server */

typedef struct peer_server peer_server;
typedef struct peer_server_cfg {
    const char *listen;        /* "ADDR:PORT" */
    const char *name;          /* this node's name (peer_name_valid) */
    const char *key;           /* the shared key (peer/auth.h bounds) */
    const model *m;
    accel_dev *const *devs;    /* offered devices: driven by the server's threads from now on */
    int n_devs;
    int rx_threads;            /* config peer_rx_threads: see peer_rx_threads (0: auto) */
} peer_server_cfg;
/* The node's receiving threads (config peer_rx_threads, 1..PEER_RX_THREADS_MAX; 0: auto). The
 * node's loop copies each KV chunk that comes over shared memory in itself and computes its CRC
 * on the same core; with 2 the loop passes to the other thread after each chunk, so that one
 * chunk's CRC runs beside the next one's copy (peer/server.c, "the receiving threads"): the
 * link's rate becomes the copy's, for a second core busy while chunks stream, spinning at most
 * 1 ms after each before it sleeps. Auto: 2 where this process may run on 8 or more cores, 1
 * below (on a small machine the second thread takes the core the copy needs). Chunks that come
 * over tcp lanes stay with the thread that received them, as with one (faster over TCP on the
 * quiet node). Returns the count for `n` as configured. */
#define PEER_RX_THREADS_MAX 2
int peer_rx_threads(int n);
/* With two receiving threads, the payload size from which a chunk's CRC is cut in two, the
 * second half offered to the kv_rx thread (peer/kv_rx.h peer_kv_rx_reserve_split); default
 * 64 KiB. Tests set it lower, before peer_server_start, to take that path with small chunks. */
extern size_t peer_server_crc_split_min;
/* Chunks whose CRC a receiving thread took with it when it handed the loop on (tests). */
long peer_server_handoffs(const peer_server *s);
/* The most tagged chunks of one connection the node was receiving at once so far: the next
 * chunk's receive starts while one is coming, up to 2 (tests). */
int peer_server_rx_ahead_max(const peer_server *s);
/* Tagged messages the node let go as strays so far (outside a connection's window, or of no live
 * connection: peer/server_stray.c); and whether its last pass found a tagged message queued,
 * unreceived, on its worker (1) or none (0) (tests). */
long peer_server_strays(const peer_server *s);
int peer_server_tags_queued(const peer_server *s);
/* Bytes of receive buffers held for chunks whose connection closed while their bytes were still
 * coming (UCX had not given the receives back): freed as soon as it does (tests). Any thread. */
size_t peer_server_rx_lost_bytes(const peer_server *s);
/* Starts listening and the server's thread. PEER_OK, or a status with a message in err. The
 * devices stay the caller's to free, after peer_server_stop. */
int peer_server_start(const peer_server_cfg *cfg, peer_server **out, char *err, size_t errlen);
int peer_server_port(const peer_server *s);
/* The node's drain (the daemon's: its drain sets it, its resume clears it). While on, the node
 * makes no new sequence for a peer (SEQ_NEW answered ACCEL_ERR_NOMEM, an admission answer: the
 * peer places the request elsewhere) and its device list, at each heartbeat, says no memory free
 * on any device, so that peers place nothing new on it; the sequences peers hold go on until they
 * free them, and the devices' health is unchanged. Any thread; s may be NULL. */
void peer_server_set_draining(peer_server *s, int on);
/* The sequences the node holds for peers: made and not yet freed (by the peer's SEQ_FREE, or as
 * its connection closes). What a drain waits for. Any thread; 0 for NULL. */
int peer_server_live_seqs(const peer_server *s);
/* Stops the thread, closes every connection (their sequences freed) and the listener. */
void peer_server_stop(peer_server *s);

/* ---------------------------------------------------------------- client */

typedef struct peer_node peer_node;
/* Connects to the node at addr, authenticates both ways, checks that it serves model m, and
 * starts its heartbeat. Retries a node that is not up yet for up to wait_s seconds; a wrong key
 * or another model is not retried. PEER_OK or a status with a message in err. */
int peer_node_connect(const char *addr, const char *my_name, const char *key, const model *m,
                      double wait_s, peer_node **out, char *err, size_t errlen);
/* How KV reaches the node's devices (config peer_transport):
 *   auto     by a second endpoint made from the node's worker address (peer/link.h: shared
 *            memory on one host, RDMA where present), as tagged messages; the stream endpoint
 *            (TCP) where UCX cannot make one, with a warning
 *   stream   always the stream endpoint (TCP)
 *   address  the second endpoint or nothing: a device that cannot have one is not opened
 * UCX_TLS still restricts what UCX may choose. Set before peer_remote_open. */
enum peer_transport { PEER_TRANSPORT_AUTO, PEER_TRANSPORT_STREAM, PEER_TRANSPORT_ADDRESS };
/* -1 for an unknown name ("" is auto). */
int peer_transport_parse(const char *s);
void peer_node_set_transport(peer_node *n, int transport);
/* A node that did not answer when we started (peer_node_connect failed with PEER_ERR_IO or
 * PEER_ERR_TIMEOUT: nobody listens there yet): its heartbeat thread tries it in the background,
 * PEER_RECONNECT_MIN_S after this call, then at doubling intervals up to PEER_RECONNECT_MAX_S,
 * until it answers, authenticated, serving model m ("peer_joined" is logged; a refusal is logged
 * as "peer_join_failed" and tried again). From then on it is a node like any other: its device
 * list is known (peer_node_n_devs) and peer_remote_open may open them; its heartbeat and
 * reconnection run as for a node that answered at once. PEER_OK or PEER_ERR_NOMEM. */
int peer_node_pending(const char *addr, const char *my_name, const char *key, const model *m,
                      peer_node **out, char *err, size_t errlen);
/* JOINING: never answered yet (peer_node_pending); UP: answering its heartbeat; DOWN: lost, tried
 * again in the background. Any thread. */
enum peer_node_state { PEER_NODE_JOINING, PEER_NODE_UP, PEER_NODE_DOWN };
int peer_node_state(const peer_node *n);
/* The node's name and the devices it offered when it first answered ("" and 0 while JOINING;
 * fixed after: any thread), and the address it was given by. */
const char *peer_node_name(const peer_node *n);
int peer_node_n_devs(const peer_node *n);
const char *peer_node_addr(const peer_node *n);
/* Stops the heartbeat and closes. Free the node's remote devices first. */
void peer_node_free(peer_node *n);

/* The remote backend's constructor (the composition root calls it): device i of node n as an
 * accel_dev named "NODE/DEVICE". opts->mem_limit caps its KV budget like a local device's. */
accel_dev *peer_remote_open(peer_node *n, int i, const model *m, const accel_opts *o, char *err,
                            size_t errlen);

/* The most KV chunks a remote device ever had their tagged sends in flight at once (counted as
 * a send starts: those before it still in flight when the room was looked at, an upper bound
 * where they complete meanwhile): at most PEER_KV_TCP_SENDS over sender-driven (tcp) lanes,
 * PEER_KV_SM_SENDS over the others (0 before any such send; -1 when d is no remote device). */
int peer_remote_kv_sends_max(accel_dev *d);
/* The most KV chunk buffers a remote device ever had allocated at once: a buffer goes back at
 * its send's completion, the room for a send is waited for before a buffer is taken, and the next
 * chunk takes the one back last, so over tagged lanes at most the window of sends
 * (PEER_KV_TCP_SENDS, PEER_KV_SM_SENDS), not one per chunk in the window (0 before any chunk; -1
 * when d is no remote device). */
int peer_remote_kv_bufs_max(accel_dev *d);

/* For the modules of this folder. */
void peer_log(int warn, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

/* peer/link.h — framed messages (peer/msg.h) between two daemons over a UCX stream endpoint.
 *
 * UCX (the library NIXL, Dynamo's and Mooncake's transfer engines run on) picks the transport:
 * RDMA where a NIC offers it, shared memory between processes of one host, TCP otherwise;
 * UCX_TLS and the other UCX_* variables of its documentation choose among them. We use its
 * worker/endpoint API (ucp_*): a client connects to ADDR:PORT (ucp_ep_create with a socket
 * address), a listener accepts (ucp_listener_create), and each side sends and receives a byte
 * stream (ucp_stream_send_nbx, ucp_stream_recv_data_nb) that this module cuts into frames.
 *
 * Memory plan: a connection keeps one receive buffer; a frame is handed out as a view into it,
 * valid until the next receive on that connection. A frame's length is bounded by the caller's
 * limit before its bytes are waited for, so a peer cannot make us hold more than that limit.
 *
 * Threads: a connection and its UCX worker belong to one thread at a time (a client's device
 * worker, the heartbeat, or the listener's thread for every connection it accepted; a
 * listener's worker is made for use by several threads in turn, one at a time, each handing it
 * to the next under a lock). Only peer_conn_dead may be read from any thread. */
#ifndef TANDEM_PEER_LINK_H
#define TANDEM_PEER_LINK_H
#include "peer/msg.h"
#include <stddef.h>
#include <stdint.h>

typedef struct peer_conn peer_conn;
typedef struct peer_listener peer_listener;

/* Connects to "HOST:PORT" on a worker of its own. The connection completes in the background:
 * the first send or receive waits for it (and fails with PEER_ERR_IO when nobody listens).
 * PEER_OK, or a status with a message in err. */
int peer_conn_connect(const char *addr, peer_conn **out, char *err, size_t errlen);
/* Closes the endpoint (a bounded wait for UCX to flush it) and frees everything. */
void peer_conn_free(peer_conn *c);
/* Marks c dead: its free closes at once, without waiting for UCX to flush (a peer gone). */
void peer_conn_kill(peer_conn *c);
/* 1 once the transport reported an error (the other side went away) or a wait timed out. */
int peer_conn_dead(const peer_conn *c);
/* The other end's address as text ("" if unknown). */
const char *peer_conn_addr(const peer_conn *c);

/* Sends one frame: a header, then `a` and `b` (either may be empty) as its payload. Waits until
 * UCX is done with the buffers, at most timeout_s. PEER_OK, PEER_ERR_IO, PEER_ERR_TIMEOUT (the
 * connection is then dead: a half-sent frame cannot be taken back). */
int peer_conn_send(peer_conn *c, int type, const void *a, size_t na, const void *b, size_t nb,
                   double timeout_s);
/* Sends bytes as they are, no header (tests: a malformed frame as a broken or hostile peer
 * would send it). Same statuses as peer_conn_send. */
int peer_conn_send_raw(peer_conn *c, const void *p, size_t n, double timeout_s);
/* Receives one frame of at most max_payload bytes, waiting at most timeout_s. *payload points
 * into the connection's buffer until the next receive. PEER_OK, PEER_ERR_PROTO (a bad header:
 * the connection is then dead), PEER_ERR_IO, PEER_ERR_TIMEOUT. */
int peer_conn_recv(peer_conn *c, uint32_t max_payload, peer_header *h, const uint8_t **payload,
                   double timeout_s);
/* The listener's side: a frame if one is whole in what has arrived, without waiting. 1 with
 * the frame, 0 when none is complete yet, or a negative status (the connection is then dead). */
int peer_conn_poll(peer_conn *c, uint32_t max_payload, peer_header *h, const uint8_t **payload);
/* A caller's pointer kept with the connection. */
void peer_conn_set_user(peer_conn *c, void *user);
void *peer_conn_user(const peer_conn *c);

/* The second endpoint. UCX 1.13 gives an endpoint made from a socket address TCP lanes only;
 * one made from the other side's worker address gets every transport both workers share:
 * shared memory (posix, sysv, cma) between two processes of one host, RDMA where a NIC offers
 * it, TCP otherwise (UCX_TLS still chooses among them). After the authenticated handshake the
 * server hands its worker's address over the stream (peer/msg.h ADDR) and the client opens a
 * second endpoint by it; bulk data (KV chunks) then goes as tagged messages, whose large sizes
 * UCX moves with its rendezvous protocol (zero-copy over CMA or RDMA), and the stream endpoint
 * keeps the control messages.
 *
 * peer_conn_local_address: this side's worker address (an accepted connection: the listener's
 * worker), owned by c. PEER_OK or PEER_ERR_IO.
 * peer_conn_open_address: the client's second endpoint to the worker at addr (len bytes, from
 * an authenticated peer: UCX parses it), made to reach it within 5 s. PEER_OK, or a status with
 * a message in err (the caller keeps the stream for everything).
 * peer_conn_transport: the transports of that endpoint's lanes as UCX chose them ("posix,cma",
 * "tcp"), or "tcp stream" without one. */
int peer_conn_local_address(peer_conn *c, const void **addr, size_t *len);
int peer_conn_open_address(peer_conn *c, const void *addr, size_t len, char *err, size_t errlen);
int peer_conn_has_address(const peer_conn *c);
const char *peer_conn_transport(const peer_conn *c);
/* Sends n bytes as one message tagged `tag` on the address endpoint, waiting at most timeout_s
 * (statuses as peer_conn_send). */
int peer_conn_tag_send(peer_conn *c, uint64_t tag, const void *p, size_t n, double timeout_s);
/* Starts sending n bytes as one message tagged `tag` on the address endpoint and returns at
 * once: *req is the send in flight (NULL when UCX was done with the buffer at once), which
 * p's bytes must outlive — until peer_conn_req_wait on it returned. Several may be in flight
 * (a KV stream's window, peer/remote.c). PEER_OK or PEER_ERR_IO (c is then dead). */
int peer_conn_tag_send_start(peer_conn *c, uint64_t tag, const void *p, size_t n, void **req);
/* 1 when the address endpoint moves large tagged messages only while the sender progresses
 * its worker: its lanes include tcp (UCX's rendezvous over TCP sends the data from the sender
 * once the receiver asks). Shared memory (cma) and RDMA lanes let the receiver fetch the data
 * itself, so a send may be left in flight while the sending thread is elsewhere; over tcp its
 * bytes wait for the sender's next call, so the sender keeps only a few in flight and
 * progresses them in every call (peer_conn_sends_room). */
int peer_conn_sender_driven(const peer_conn *c);
/* Waits at most timeout_s for a send peer_conn_tag_send_start started, and lets it go (req
 * NULL: PEER_OK at once). PEER_OK, PEER_ERR_IO, PEER_ERR_TIMEOUT (c is then dead; the buffer
 * is UCX's no longer either way). */
int peer_conn_req_wait(peer_conn *c, void *req, double timeout_s);
/* Progresses c's worker once and looks at a send peer_conn_tag_send_start started: 1 when it
 * completed (req is then let go), 0 while it is in flight, PEER_ERR_IO when it failed (let go,
 * c is then dead). */
int peer_conn_req_test(peer_conn *c, void *req);
/* A window of sends in flight (any lanes; peer/remote_kv.c keeps one): reqs[0..n) point at the slots of sends
 * peer_conn_tag_send_start started, oldest first (a slot NULL: done). Progresses c's worker
 * once without waiting (the sends done let go, their slots set to NULL), then waits for the oldest pending ones until fewer than `window` are. The sends still
 * pending (0..window-1), or PEER_ERR_IO / PEER_ERR_TIMEOUT (c is then dead; the failed send's
 * slot is NULL, the others' still pending). */
int peer_conn_sends_room(peer_conn *c, void **const *reqs, int n, int window, double timeout_s);
/* Receives the one message tagged exactly `tag` into buf, which must be exactly n bytes long
 * (a longer or shorter one: PEER_ERR_PROTO and c is dead). Waits at most timeout_s. */
int peer_conn_tag_recv(peer_conn *c, uint64_t tag, void *buf, size_t n, double timeout_s);
/* The same without waiting, several per connection if need be (each request carries its own
 * status and length): _start posts the receive (*req, which
 * buf must outlive), _test looks at it (the caller progresses the worker: a listener's
 * progress): 1 when the message of exactly n bytes is in buf (req let go), 0 while in flight,
 * PEER_ERR_PROTO (more or fewer bytes) or PEER_ERR_IO (c failed; req is then still UCX's: cancel
 * it). peer_conn_req_cancel takes a receive back before its buffer is reused: c is dead after
 * it; 1 when UCX gave the request back within its bounded wait, 0 when it is still in progress
 * (a receive matched to a message that is still coming cannot be cancelled: its bytes may yet
 * land in the buffer, which must then not be reused). */
int peer_conn_tag_recv_start(peer_conn *c, uint64_t tag, void *buf, size_t n, void **req);
int peer_conn_tag_recv_test(peer_conn *c, void *req, size_t n);
int peer_conn_req_cancel(peer_conn *c, void *req);
/* peer_conn_req_cancel without the wait, for a thread that serves others (the node's loop: a
 * sender stalled mid-chunk held it 2 s per receive): c is dead after it; 1 when UCX gave the
 * request back at once (released: its buffer may be reused), 0 when it is still in progress (a
 * receive matched to a message still coming). Then the request stays the caller's: it looks at it
 * with peer_req_done as its worker is progressed, and keeps the buffer untouched until that says
 * 1 (UCX completes it when its bytes come or its endpoint's failure is handled), or lets it go
 * with peer_req_release just before the worker is destroyed. */
int peer_conn_req_abandon(peer_conn *c, void *req);
int peer_req_done(void *req);
void peer_req_release(void *req);
/* A message that came without a receive posted for it: peer_conn_tag_probe looks whether the one
 * tagged exactly `tag` has arrived (UCX keeps it, unreceived: over rendezvous only its request
 * has come, its bytes wait for the receive), 1 with its length in *n, 0 when it has not, or
 * PEER_ERR_IO (c is dead). The caller bounds *n before it takes memory for it; then
 * peer_conn_tag_recv_probed receives that message into buf (n bytes, the probed length) as
 * peer_conn_tag_recv_start does (tested and cancelled the same way). Only the thread that owns
 * c's worker may probe and receive, so the message it probed is still there. */
int peer_conn_tag_probe(peer_conn *c, uint64_t tag, size_t *n);
int peer_conn_tag_recv_probed(peer_conn *c, uint64_t tag, void *buf, size_t n, void **req);
/* Lets the arrived message tagged exactly `tag` go unreceived (one refused, or a closing
 * connection's): UCX frees what it holds of it and, over rendezvous, tells the sender it is done
 * without its bytes moving. 1 when there was one, 0 when none. */
int peer_conn_tag_discard(peer_conn *c, uint64_t tag);
/* Stray messages (a connection's tags outside what it may send, or tags of no connection:
 * peer/server.c). peer_conn_tag_oldest looks at the oldest arrived, unreceived message of c's
 * worker whose tag matches `tag` under `mask`: 1 with its tag in *sender_tag and its length in
 * *n, 0 when none; nothing is received. peer_conn_tag_drop lets that message go unreceived, as
 * peer_conn_tag_discard does but without waiting for UCX to finish with it: 1 when there was
 * one, 0 when none. peer_listener_tag_oldest looks at the oldest message of any tag on the
 * listener's worker (its connections' shared one); peer_listener_tag_drop lets the oldest
 * tagged exactly `tag` go. The thread that owns the worker only. */
int peer_conn_tag_oldest(peer_conn *c, uint64_t tag, uint64_t mask, uint64_t *sender_tag, size_t *n);
int peer_conn_tag_drop(peer_conn *c, uint64_t tag, uint64_t mask);
int peer_listener_tag_oldest(peer_listener *l, uint64_t *sender_tag, size_t *n);
int peer_listener_tag_drop(peer_listener *l, uint64_t tag);

/* Listens on "ADDR:PORT" (port 0: any free port; peer_listener_port says which). */
int peer_listener_new(const char *addr, peer_listener **out, char *err, size_t errlen);
void peer_listener_free(peer_listener *l);
int peer_listener_port(const peer_listener *l);
/* Progresses the listener's worker, waiting up to timeout_s for something to happen. New
 * connections are handed out by peer_listener_accept (they share the listener's worker:
 * use them on this thread only, free them before the listener). */
void peer_listener_progress(peer_listener *l, double timeout_s);
peer_conn *peer_listener_accept(peer_listener *l);
/* Wakes the listener's thread out of a wait on its worker (any thread: ucp_worker_signal). */
void peer_listener_signal(peer_listener *l);

/* Memory for a bulk transfer's bytes (a KV chunk sent or received as a tagged message), kept
 * and reused across chunks. From 1 MiB up it is rounded up to whole 2 MiB pages, aligned to
 * them and asked to be backed by transparent huge pages (madvise MADV_HUGEPAGE; the kernel's
 * THP setting decides), so that a zero-copy rendezvous (CMA's process_vm_readv, an RDMA
 * registration) walks and pins one page table entry per 2 MiB instead of 512. *cap: the bytes
 * usable (>= n). NULL when out of memory. Freed with free(). */
void *peer_bulk_alloc(size_t n, size_t *cap);

/* Seconds on a monotonic clock. */
double peer_now(void);

/* Polling (config peer_poll_us; process-wide, every worker of the process and the kv_rx
 * hand-off, peer/kv_rx.h). 0 (the default): a wait that finds nothing to do arms the worker's
 * event descriptor and sleeps on it, so that an idle link costs no CPU, and every message that
 * comes after a pause pays a wake-up. us > 0: for `us` microseconds after a worker last did
 * something (a message moved, a frame or a tagged chunk arrived) a wait keeps calling
 * ucp_worker_progress instead of sleeping, as the UCX users that poll do (ucx_perftest, MPI,
 * NCCL's UCX plugin poll always), and only then arms and sleeps: a thread burns its core for at
 * most `us` after the last activity, never while the link is idle. Bounded to
 * [0, PEER_POLL_US_MAX]. Set before connections are made (a change is seen by the next wait). */
#define PEER_POLL_US_MAX 100000
void peer_link_set_poll_us(int us);
int peer_link_poll_us(void);
/* The window in seconds (0 when off), read with one relaxed load: kv_rx's waits use it too. */
double peer_link_poll_s(void);
/* One spin of a polling loop (the CPU's pause hint). */
void peer_cpu_relax(void);

#endif

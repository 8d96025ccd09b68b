/* peer/msg.h — the messages tandem daemons exchange over UCX (peer/link.h carries the bytes).
 *
 * A UCX stream carries frames: a 16-byte header, then `length` payload bytes.
 *
 *   header  magic "TNDP" | version u16 | type u16 | length u32 | zero u32   (little-endian)
 *
 * Every frame is bounded before anything is allocated for it: `length` may not exceed the limit
 * the receiver passes (PEER_MAX_PREAUTH before the handshake has authenticated the other side,
 * PEER_MAX_PAYLOAD after), an unknown version or type is refused, and each payload parser below
 * checks every count against the bytes present and against its own bound. Nothing from a peer
 * is trusted: a failed parse returns PEER_ERR_PROTO and the connection is closed with a log line.
 *
 * The conversation (c: the node that holds the client connection, s: the node with the device):
 *
 *   c->s HELLO      nonce_c[32], name                  s->c CHALLENGE nonce_s[32], mac_s[32], name
 *   c->s AUTH       mac_c[32]                          s->c WELCOME   info     (or REFUSE reason)
 *   c->s PING                                          s->c INFO      info     (the heartbeat)
 *   c->s SEQ_NEW    dev, capacity                      s->c REPLY     status, seq
 *   c->s SEQ_FREE   dev, seq                           s->c REPLY     status
 *   c->s KV         dev, seq, crc, flags, [stream header 96 B], chunk  s->c REPLY status
 *   c->s DECODE     dev, n, (seq, id) * n              s->c LOGITS    status, n, vocab, f32*n*vocab
 *   c->s TRUNCATE   dev, seq, len                      s->c REPLY     status
 *   c->s WARMUP     dev                                s->c REPLY     status
 *   c->s ADDR_REQ                                      s->c ADDR      tag_base, worker address
 *                                                              (or REPLY status: none offered)
 *   c=>s (tagged)   on the address endpoint, no frame on the stream: one message tagged
 *                   tag_base + serial: token, dev, seq, crc, flags, [stream header] chunk
 *                                                      s->c REPLY     status (on the stream)
 *   c->s DECODE_ARGMAX  DECODE's, then want u8 * n  s->c TOKENS    status, n, vocab, n_want,
 *                                                              argmax i32 * n, f32 * n_want*vocab
 *
 * DECODE_ARGMAX is sent only to a node whose device lists PEER_CAP_DECODE_ARGMAX in its caps
 * (below); a node of this version without it (older builds mask the bit away on both sides)
 * gets DECODE. The node picks each row's greedy token where the logits are and sends back only
 * the rows the client still samples itself: 4 bytes for a plain-greedy row instead of 4 x vocab.
 *
 * KV and tagged chunks are pipelined: the client sends the next chunks without waiting for the
 * REPLYs (PEER_KV_WINDOW below), which come back in order; every other request waits for its
 * answer, after the answers of the chunks before it. A client sends a request other than a
 * chunk only once every chunk before it was answered (peer/remote.c drains its window first), so
 * the stream's frames need no announcement to keep their place among the tagged chunks: a frame
 * that comes while chunks of its connection are still being received waits for them all the
 * same (peer/server.c).
 *
 * A tagged chunk carries its own metadata (version 3; version 2 announced each chunk with a
 * KV_TAG frame on the stream first, which cost the sender a TCP message per chunk): the node
 * finds the connection's next serial among the messages that have arrived (ucp_tag_probe_nb:
 * only the tag and the length are read), bounds its length (PEER_KV_TAG_MAX) before it takes a
 * buffer for it, receives it, and then checks its fixed part (peer_kv_tag_read) and the chunk
 * (the wire reader: sizes, CRC) as before. The KV_TAG type number is kept for log lines; as a
 * frame on the stream it is refused.
 *
 * ADDR is answered only after the handshake (in any other state it closes the connection), so
 * no unauthenticated node learns the worker's address or gets one accepted. The client opens a
 * second endpoint by it (peer/link.h) and sends its KV as tagged messages; without one (UCX
 * could not make it, or peer_transport = stream) KV goes in KV frames on the stream. tag_base's
 * high 32 bits are random per connection: the server receives exactly tag_base + serial, serials
 * counting up from 1. The tags alone do not say who sent a message: the listener's worker takes
 * tagged messages from any UCX endpoint that reaches it, one that never sent a HELLO included,
 * and 32 random bits can be guessed. So every tagged chunk starts with the connection's KV token,
 * HMAC-SHA256(key, "tandem-peer-1 k" | nonce_c | nonce_s) (peer/auth.h: only the two ends of
 * that authenticated handshake can compute it), which the node compares in constant time before
 * it reads anything else of the chunk: a chunk without it closes the connection whose tag it
 * took (logged, peer_kv_refused) and nothing of it reaches a sequence. The token travels in
 * the clear inside every chunk: it stops injection by whoever cannot see the link, not replay
 * by whoever can (UCX's transports carry no encryption; a network that needs it is for
 * IPsec/WireGuard or RDMA inside a trusted fabric).
 *
 *   tagged chunk   token[32] | dev, seq, crc, flags | [stream header 96 B] chunk
 *
 * mac_s = HMAC-SHA256(key, "tandem-peer-1 s" | nonce_c | nonce_s), mac_c the same over
 * "tandem-peer-1 c" | nonce_s | nonce_c (peer/auth.h): each side proves it holds the key over
 * the other's fresh nonce, so neither a replay nor an unkeyed node gets past the handshake.
 *
 * Threads: pure functions. */
#ifndef TANDEM_PEER_MSG_H
#define TANDEM_PEER_MSG_H
#include <stddef.h>
#include <stdint.h>

/* 2: the device list carries each device's KV block size and decode curve; KV chunks are in
 * the KV wire format's version 2 (a node of version 1 is refused at its first frame).
 * 3: a tagged KV chunk carries its fixed part (dev, seq, crc, flags) in its own message; the
 * KV_TAG announcement on the stream is gone (a node of version 2 is refused at its first frame)
 * 4: a tagged KV chunk starts with its connection's KV token (below); a node of version 3 is
 * refused at its first frame
 * 5: node names of up to 63 characters (a DNS label: what a host or pod name is) in HELLO and
 * CHALLENGE, and a device's name in the device list in 64 bytes (was 32), so that a lent device
 * is "NODE/device" in up to 127; a node of version 4 is refused at its first frame */
#define PEER_VERSION      5
#define PEER_HEADER_BYTES 16
/* Before authentication a frame is a handshake message: 1 KiB holds any of them. */
#define PEER_MAX_PREAUTH 1024
/* After: one KV layer chunk of 32K positions of Llama-3-8B at int8 is 64 MiB (+ scales); the
 * logits of a 16-sequence step at a 128K vocabulary are 8 MiB. 256 MiB holds both with room. */
#define PEER_MAX_PAYLOAD (256u << 20)
/* A node's name (node_name): up to 63 characters, an RFC 1123 label's length, the most a host
 * name's first label or a Kubernetes pod's host name has. A device's name on its node, the same.
 * A peer names a lent device "NODE/device": 63 + 1 + 63 = 127, accel_info.name's ACCEL_NAME_MAX
 * (peer/remote.c asserts it fits). */
#define PEER_NAME_MAX     63
#define PEER_DEV_NAME_MAX 63
#define PEER_MAX_DEVS 32   /* devices one node offers */
#define PEER_MAX_BATCH 1024 /* sequences one DECODE may carry */
#define PEER_NONCE 32
#define PEER_MAC 32
#define PEER_REASON_MAX 200

/* peer statuses: -400 .. -499, a range of their own in the process's one error space */
enum peer_status {
    PEER_OK = 0,
    PEER_ERR_PROTO = -401,   /* a malformed, oversized or unexpected message */
    PEER_ERR_AUTH = -402,    /* the other side does not hold the key */
    PEER_ERR_IO = -403,      /* the transport failed (UCX error, the peer went away) */
    PEER_ERR_TIMEOUT = -404, /* no answer in time */
    PEER_ERR_NOMEM = -405,
    PEER_ERR_REFUSED = -406, /* the other side refused us (REFUSE) */
    PEER_ERR_MODEL = -407,   /* the peer serves another model */
};
const char *peer_strerror(int status);

enum peer_type {
    PEER_HELLO = 1,
    PEER_CHALLENGE,
    PEER_AUTH,
    PEER_WELCOME,
    PEER_REFUSE,
    PEER_PING,
    PEER_INFO,
    PEER_SEQ_NEW,
    PEER_SEQ_FREE,
    PEER_KV,
    PEER_DECODE,
    PEER_LOGITS,
    PEER_TRUNCATE,
    PEER_WARMUP,
    PEER_REPLY,
    PEER_ADDR_REQ,
    PEER_ADDR,
    PEER_KV_TAG,
    PEER_DECODE_ARGMAX,
    PEER_TOKENS,
    PEER_TYPE_LAST = PEER_TOKENS,
};
const char *peer_type_name(int type);

typedef struct peer_header {
    int type;
    uint32_t length;
} peer_header;

/* Writes a header. */
void peer_header_write(uint8_t out[PEER_HEADER_BYTES], int type, uint32_t length);
/* Parses and bounds a header: PEER_OK, or PEER_ERR_PROTO (magic, version, type, a non-zero
 * reserved word, length > max_payload). */
int peer_header_read(const uint8_t in[PEER_HEADER_BYTES], uint32_t max_payload, peer_header *out);

/* ---------------------------------------------------------------- handshake */

typedef struct peer_hello {
    uint8_t nonce[PEER_NONCE];
    uint8_t mac[PEER_MAC];       /* CHALLENGE only */
    char name[PEER_NAME_MAX + 1];
} peer_hello;
/* HELLO (with_mac 0) and CHALLENGE (with_mac 1) payloads. write returns the bytes (out holds
 * PEER_MAX_PREAUTH); read: PEER_OK or PEER_ERR_PROTO (a name that is empty, too long or not
 * [A-Za-z0-9._-]). */
size_t peer_hello_write(uint8_t *out, const peer_hello *h, int with_mac);
int peer_hello_read(const uint8_t *p, size_t n, int with_mac, peer_hello *out);
/* 1 when s is a valid node name (1..PEER_NAME_MAX of [A-Za-z0-9._-]). */
int peer_name_valid(const char *s);
/* 1 when s is a device name a device list may carry (1..PEER_DEV_NAME_MAX printable ASCII
 * characters, no space); else 0, with why in err (NULL: not wanted). */
int peer_dev_name_valid(const char *s, char *err, size_t errlen);

/* A device's decode curve as accel_info.decode_curve states it (scheduler/accel.h: step_s[i]
 * seconds for a call of batch[i] sequences of ctx positions each, s_per_pos per position more),
 * carried so that a remote device is weighed by placement like a local one. n == 0: the device
 * does not say. */
#define PEER_CURVE_MAX 12
typedef struct peer_curve {
    int n;
    int batch[PEER_CURVE_MAX];
    double step_s[PEER_CURVE_MAX];
    double ctx, s_per_pos;
} peer_curve;
/* PEER_OK when c is within the bounds peer_info_read holds a curve to (below). */
int peer_curve_check(const peer_curve *c);

/* What a node tells its peers about itself (WELCOME and INFO). */
typedef struct peer_dev_info {
    char name[PEER_DEV_NAME_MAX + 1]; /* the device's name on its node: "fpga-emu:0" */
    int kind;                         /* enum accel_kind */
    unsigned caps;
    int health;                       /* enum accel_health */
    int max_batch;
    uint64_t mem_total, mem_free, kv_bytes_per_token;
    int kv_block_tokens;              /* its KV block size: the KV it is sent is cut in it (0:
                                         not paged) */
    peer_curve curve;
} peer_dev_info;

typedef struct peer_info {
    uint8_t fingerprint[32]; /* the model it serves (model->fingerprint) */
    int vocab, n_layers, n_kv_heads, head_dim;
    int n_devs;
    peer_dev_info devs[PEER_MAX_DEVS];
} peer_info;
/* out must hold peer_info_bytes(n_devs) (PEER_INFO_MAX_BYTES at most). read: PEER_OK or
 * PEER_ERR_PROTO (n_devs past PEER_MAX_DEVS, a count that disagrees with the bytes, an
 * unterminated name, a kind, health, dimension, block size or curve outside its range: a
 * curve's batches increasing from 1 to PEER_MAX_BATCH, its times finite, positive and below
 * 1000 s, its context and per-position time finite and not negative). */
#define PEER_INFO_FIXED (32 + 5 * 4)
#define PEER_DEV_NAME_BYTES (PEER_DEV_NAME_MAX + 1) /* the name's field: NUL-padded */
#define PEER_DEV_INFO_BYTES                                                                        \
    (PEER_DEV_NAME_BYTES + 4 * 4 + 3 * 8 + 4 + 4 + PEER_CURVE_MAX * (4 + 8) + 2 * 8)
#define PEER_INFO_MAX_BYTES (PEER_INFO_FIXED + PEER_MAX_DEVS * PEER_DEV_INFO_BYTES)
size_t peer_info_bytes(int n_devs);
size_t peer_info_write(uint8_t *out, const peer_info *in);
int peer_info_read(const uint8_t *p, size_t n, peer_info *out);

/* ---------------------------------------------------------------- requests */

/* SEQ_NEW (a = dev, b = capacity), SEQ_FREE (dev, seq), WARMUP (dev, 0), TRUNCATE (dev, seq,
 * c = len), REPLY (a = status as int32, b = seq): a fixed number of u32 words. */
typedef struct peer_words {
    uint32_t w[4];
} peer_words;
size_t peer_words_write(uint8_t *out, const peer_words *w, int n_words);
/* PEER_ERR_PROTO unless n == 4 * n_words. */
int peer_words_read(const uint8_t *p, size_t n, int n_words, peer_words *out);

/* KV: a chunk of one sequence in the KV wire format (proto/KV_FORMAT.md); a chunk that starts a
 * run of positions (flags & PEER_KV_RUN_START) is preceded by the stream header of that run. */
#define PEER_KV_RUN_START 1u
/* Tagged chunks only: the chunk went over sender-driven lanes (tcp, peer_conn_sender_driven),
 * where the node may receive the connection's next chunk while this one's bytes are still
 * coming (the rendezvous answered at once: its bytes follow theirs on the socket). Until a
 * chunk of the connection carried it the node receives one chunk at a time: over shared memory
 * a second receive beside the first lost ~40 % at 1 MiB on the quiet node (its copy runs beside
 * the first's on the same thread). BENCHMARKS.md, "Peers over UCX". */
#define PEER_KV_TAG_AHEAD 2u
#define PEER_KV_FIXED 16
typedef struct peer_kv {
    uint32_t dev, seq, producer_crc, flags;
    const uint8_t *bytes; /* [stream header] chunk header + payload, pointing into the frame */
    size_t n_bytes;
    /* the receiver's own, not on the wire: the CRC-32C of bytes[crc_off..n_bytes) (the chunk's
     * payload), computed by the thread that received them while they are in its cache, for the
     * wire reader (proto_kv_reader_crc_hint); crc_off 0: none */
    size_t crc_off;
    uint32_t crc;
} peer_kv;
void peer_kv_write_fixed(uint8_t out[PEER_KV_FIXED], const peer_kv *k);
/* PEER_ERR_PROTO for unknown flags or no bytes after the fixed part. */
int peer_kv_read(const uint8_t *p, size_t n, peer_kv *out);

/* ADDR: tag_base u64, length u32, then the worker address (1..PEER_ADDR_MAX bytes). A UCX 1.13
 * worker address is one entry per transport and device: ~100 bytes for tcp + shared memory,
 * a few hundred with RDMA NICs; 64 KiB bounds it far above that. */
#define PEER_ADDR_MAX 65536
#define PEER_ADDR_FIXED 12
size_t peer_addr_write(uint8_t *out, uint64_t tag_base, const void *addr, size_t len);
/* PEER_ERR_PROTO for an empty or oversized address or a length that disagrees with n; *addr
 * points into p. */
int peer_addr_read(const uint8_t *p, size_t n, uint64_t *tag_base, const uint8_t **addr, size_t *len);

/* The sender's window (peer/remote.c): KV frames and tagged chunks are not answered one at a time;
 * up to PEER_KV_WINDOW may be in flight, more than two only while they hold at most
 * PEER_KV_WINDOW_BYTES, counted in whole messages (fixed part and stream header included). What
 * the daemon ships (a layer of one prefill pass a chunk, Llama-3-8B's int8 KV: 2,080 bytes a
 * token, BENCHMARKS.md "Where issue 26's link goal stands"): a CPU prefill's 512-token chunks of
 * 1 MiB: 8 in flight; a GPU prefill's 4K-prompt chunks of 8.1 MiB (8,519,760-byte messages): 7;
 * its 32K-prompt chunks, passes of 8,192 tokens (gpu/tuning.c), of 16.25 MiB (17,039,440-byte
 * messages): 3; 64-65 MiB chunks come only from a sparse prefill (sparse_prefill=1, not the
 * default) and tools/peer_handover at 32K: 2, 130 MiB of host memory. Their REPLYs come back in
 * order; the server may hold some of them back and send them together (peer_kv_reply_hold
 * below, peer/server.c). */
#define PEER_KV_WINDOW 8
#define PEER_KV_WINDOW_BYTES (64u << 20)
/* Over sender-driven lanes (tcp: peer_conn_sender_driven), where a tagged send's bytes move
 * only while the sender progresses its worker, at most this many of the window's chunks have
 * their sends in flight; a new one waits for the oldest when that many are. Their buffers are
 * the window's own: the bound adds no memory. Two hide the rendezvous round trip that one at a
 * time paid a chunk: the next chunk's request is at the node while this one's bytes move, and
 * the node posts the receive of the next one (PEER_KV_TAG_AHEAD) while this one's bytes come,
 * two at once (peer/server.c RX_AHEAD). On the quiet node (BENCHMARKS.md) 4 sends with 4
 * receives lost against 2 and 2 (51 % against 74 % of ucx_perftest at 1 MiB): the rendezvous
 * puts then share the socket and every chunk completes later. */
#define PEER_KV_TCP_SENDS 2
/* Over the other lanes (shared memory: the node reads a chunk's bytes when it receives it, CMA
 * copies of 512 KiB, one chunk at a time) at most this many sends in flight too: the one being read
 * and the next one's request waiting at the node, so that it never waits for the sender. More
 * only hold more buffers: each chunk in its own, read by the node a window later, out of the
 * caches by then; with two the buffer the node just read is the next one written (on the quiet
 * node a sender reading every chunk from one buffer moved x1.45 of the window's buffers at
 * 16.25 MiB, BENCHMARKS.md wireshm). */
#ifndef PEER_KV_SM_SENDS /* (a -D for measurements, as PEER_KV_RX_SLOTS) */
#define PEER_KV_SM_SENDS 2
#endif
/* 1 when a chunk of `bytes` may go while n chunks of in_flight bytes are unanswered. */
static inline int peer_kv_window_room(int n, size_t in_flight, size_t bytes)
{
    return n < PEER_KV_WINDOW && (n < 2 || in_flight + bytes <= PEER_KV_WINDOW_BYTES);
}
/* How many chunks of `bytes` (whole messages) the window admits at once, by the rule above:
 * 8 of 1 MiB or of exactly 8 MiB, 7 of 8.1 MiB, 4 of 16 MiB, 3 of 16.25 MiB, 2 from 32 MiB on. */
static inline int peer_kv_window_chunks(size_t bytes)
{
    if (bytes > PEER_KV_WINDOW_BYTES)
        bytes = PEER_KV_WINDOW_BYTES + 1; /* the same count (2), no overflow */
    int n = 0;
    while (peer_kv_window_room(n, (size_t)n * bytes, bytes)) n++;
    return n;
}
/* The REPLYs the node may hold back for chunks of `bytes` before it sends them (peer/server.c
 * kv_reply; it also sends them when nothing more is coming): half of what the window admits, at
 * least 1 — 4 for 1 MiB and 8 MiB, 3 for 8.1 MiB, 2 for 16 MiB, 1 for 16.25 MiB and from 32 MiB
 * on — but over tcp lanes (tcp_lanes: the chunk came marked PEER_KV_TAG_AHEAD) both when the
 * window admits only two (from 32 MiB on). Half, so that the sender, whose window is full, gets
 * room for half of it while the node goes on with the other half; counted in chunks alone
 * (PEER_KV_WINDOW / 2), four 16.25 MiB REPLYs were never held while only three chunks could
 * come, and each window's went out only when the node found nothing more coming, the sender
 * waiting on them (BENCHMARKS.md, wirefinal; wirehold: by size, TCP x1.05 at 16.25 MiB and x1.04
 * at 16 MiB on the quiet node). Of two over tcp lanes, one answered alone lets the sender start
 * the next chunk while the other comes, and its request then reaches the node behind that
 * chunk's bytes on the socket: the node waited 3.1 ms of each 65 MiB chunk's 17-20 with nothing
 * posted; answered together, the two next requests go at once and both receives are posted
 * before the bytes (wirebig: TCP x1.17 at 65 MiB). Over shared memory the node reads a chunk when
 * it receives it, nothing queues behind it, and one answered alone lets the sender write the
 * next chunk while the node reads the other: half, as at the other sizes. */
static inline int peer_kv_reply_hold(size_t bytes, int tcp_lanes)
{
    int n = peer_kv_window_chunks(bytes);
    if (tcp_lanes && n <= 2) return n;
    return n / 2 > 0 ? n / 2 : 1;
}

/* A tagged chunk's message: the connection's KV token (PEER_MAC bytes, above), the KV fixed part
 * (flags RUN_START, TAG_AHEAD), then [stream header] chunk. Its length is bounded before anything
 * is taken for it: more than PEER_KV_TAG_FIXED, at most PEER_KV_TAG_MAX. write_fixed: the token
 * and the fixed part. read: the fixed part, PEER_ERR_PROTO for a length out of that range or
 * unknown flags; k->bytes points into p after it. The token, p[0..PEER_MAC), is not read here: the
 * receiver compares it with its connection's (peer_mac_equal) before it reads the rest. */
#define PEER_KV_TAG_FIXED (PEER_MAC + PEER_KV_FIXED)
#define PEER_KV_TAG_MAX ((size_t)PEER_MAX_PAYLOAD)
void peer_kv_tag_write_fixed(uint8_t out[PEER_KV_TAG_FIXED], const uint8_t token[PEER_MAC],
                             const peer_kv *k);
int peer_kv_tag_read(const uint8_t *p, size_t n, peer_kv *k);

/* DECODE: dev u32, n u32, then n * (seq u32, id i32). */
size_t peer_decode_bytes(int n);
size_t peer_decode_write(uint8_t *out, uint32_t dev, int n, const uint32_t *seqs, const int32_t *ids);
/* seqs/ids point into caller arrays of PEER_MAX_BATCH. PEER_ERR_PROTO for n outside
 * 1..PEER_MAX_BATCH or a length that disagrees with n. */
int peer_decode_read(const uint8_t *p, size_t n, uint32_t *dev, int *n_seqs, uint32_t *seqs,
                     int32_t *ids);

/* LOGITS: status i32, n u32, vocab u32, then float32 * n * vocab (only when status is 0). */
#define PEER_LOGITS_FIXED 12
void peer_logits_write_fixed(uint8_t out[PEER_LOGITS_FIXED], int32_t status, int n, int vocab);
/* Checks the answer against what was asked: PEER_OK with *status and *logits (pointing into the
 * frame, n * vocab floats, unaligned: copy them out) or PEER_ERR_PROTO. */
int peer_logits_read(const uint8_t *p, size_t len, int n, int vocab, int32_t *status,
                     const uint8_t **logits);

/* A device's caps bit (peer_dev_info.caps, the value of ACCEL_CAP_DECODE_ARGMAX): its node
 * answers DECODE_ARGMAX. The other bits a node may state: accel's PREFILL..KV_IMPORT (1..8). */
#define PEER_CAP_DECODE_ARGMAX 128u
#define PEER_CAPS_KNOWN (15u | PEER_CAP_DECODE_ARGMAX)

/* DECODE_ARGMAX: DECODE's bytes, then n bytes of want (each 0 or 1: that row's logits wanted
 * back; want NULL writes every row wanted). read: as peer_decode_read, and PEER_ERR_PROTO for a
 * want byte other than 0 or 1; *n_want counts the ones. */
size_t peer_decode_argmax_bytes(int n);
size_t peer_decode_argmax_write(uint8_t *out, uint32_t dev, int n, const uint32_t *seqs,
                                const int32_t *ids, const unsigned char *want);
int peer_decode_argmax_read(const uint8_t *p, size_t n, uint32_t *dev, int *n_seqs, uint32_t *seqs,
                            int32_t *ids, unsigned char *want, int *n_want);

/* TOKENS: status i32, n u32, vocab u32, n_want u32, then (only when status is 0) n * i32 (each
 * row's greedy token: model_sample_argmax, -1 when no logit is finite) and float32 * n_want *
 * vocab (the wanted rows, in row order). */
#define PEER_TOKENS_FIXED 16
void peer_tokens_write_fixed(uint8_t out[PEER_TOKENS_FIXED], int32_t status, int n, int vocab, int n_want);
/* Checks the answer against what was asked: PEER_OK with *status, argmax[0..n) (each in
 * -1..vocab-1) and *logits (into the frame, n_want * vocab floats, unaligned), or
 * PEER_ERR_PROTO. */
int peer_tokens_read(const uint8_t *p, size_t len, int n, int vocab, int n_want, int32_t *status,
                     int32_t *argmax, const uint8_t **logits);

/* REFUSE: a reason, printable ASCII, at most PEER_REASON_MAX bytes (out: +1 for the NUL). */
int peer_reason_read(const uint8_t *p, size_t n, char *out);

/* Little-endian helpers (also for peer/auth.c and the tests). */
static inline uint32_t peer_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void peer_wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static inline uint64_t peer_rd64(const uint8_t *p)
{
    return (uint64_t)peer_rd32(p) | (uint64_t)peer_rd32(p + 4) << 32;
}
static inline void peer_wr64(uint8_t *p, uint64_t v)
{
    peer_wr32(p, (uint32_t)v);
    peer_wr32(p + 4, (uint32_t)(v >> 32));
}

#endif

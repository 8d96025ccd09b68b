/* tests/peer/peer_util.h — what the peer tests share: two nodes in one process (node B serves
 * its CPU device over UCX on loopback), the KV of a prompt collected as wire chunks, and a peer
 * that writes its messages by hand. */
#ifndef TANDEM_TESTS_PEER_UTIL_H
#define TANDEM_TESTS_PEER_UTIL_H
#include "model/ckpt/model.h"
#include "peer/link.h"
#include "peer/msg.h"
#include "peer/peer.h"
#include "proto/kv_wire.h"
#include "scheduler/accel.h"
#include <stdint.h>

#define KEY "0123456789abcdef-key"
#define MODEL "models/stories260K"

typedef struct two {
    model *m;
    accel_dev *lent;   /* node B's device, lent */
    accel_dev *lent2;  /* a second one (two_pair_open), or NULL */
    peer_server *srv;
    char addr[64];
} two;

/* Node B's server with the model's `device` lent; -1 (the failure reported) when it cannot. */
int two_start(two *t, const char *device);
/* The same with rx_threads receiving threads on node B (peer_server_cfg.rx_threads; 0 auto). */
int two_start_rx(two *t, const char *device, int rx_threads);
/* two_start_rx on the CPU, and node A's own device to prefill on: a CPU device (2 threads) of
 * the same model in *pf; -1 (the failure reported) when either cannot. */
int two_start_pf(two *t, int rx_threads, accel_dev **pf);
/* Node B with two CPU devices of the model lent (one thread each, warmed): two_pair_open opens
 * the model and the devices (t->lent, t->lent2), for the test to wrap before two_pair_serve starts
 * the server on both; each 0, or -1 with the failure reported. two_stop frees it all. */
int two_pair_open(two *t);
int two_pair_serve(two *t);
void two_stop(two *t);
/* Node A's side of t: connected as "nodeA" with `transport` (PEER_TRANSPORT_*; AUTO is the
 * default) and node B's device 0 opened as a remote device. 0, or -1 with the failure reported
 * at the caller's line and nothing left open (*node and *rd NULL). */
#define two_remote(t, transport, node, rd) two_remote_at(__FILE__, __LINE__, t, transport, node, rd)
int two_remote_at(const char *file, int line, const two *t, int transport, peer_node **node,
                  accel_dev **rd);

/* KV of a prompt prefilled on `src`, collected as wire chunks' views: the sink copies each
 * layer into one buffer per layer (the chunk is valid only during the call). */
typedef struct kvcopy {
    proto_kv_layer l[16];
    uint8_t *mem[16];
    uint32_t crc[16];
    int n;
} kvcopy;

/* An accel_kv_sink callback: ctx a kvcopy. */
int keep_layer(void *ctx, const proto_kv_layer *c);
/* Prefills ids (n) on a fresh sequence of pf (freed after), its KV collected into kv (keep_layer)
 * and the greedy token after it in *first; 0 or the prefill's error. */
int prefill_kv(accel_dev *pf, const int32_t *ids, int n, kvcopy *kv, int32_t *first);
/* Imports kv into a fresh sequence of d, then decodes `steps` greedy tokens; the tokens. */
int import_decode(accel_dev *d, const kvcopy *kv, int32_t first, int steps, int32_t *out);

/* A peer that writes its messages by hand (tests of what the node does with what a peer sends):
 * its connection, the node's info, its tag base, the last serial it sent and its connection's KV
 * token (peer/auth.h: the first bytes of each tagged chunk). */
typedef struct raw {
    peer_conn *c;
    peer_info info;
    uint64_t base;
    uint32_t serial;
    uint8_t token[PEER_MAC];
} raw;
/* Authenticated as a node would be, with the address endpoint open. 0 or -1. */
int raw_open(const char *addr, raw *r);
/* A KV chunk's REPLY within timeout_s: its status, or a peer status (PEER_ERR_TIMEOUT: none came).
 * The node sends several together: the bound holds a window's (the remote backend's
 * KV_ANSWERS_MAX). */
int raw_reply(raw *r, double timeout_s);
/* A SEQ_NEW on device 0 (512 tokens) and its REPLY: 0 with the sequence in *seq, else its status.
 */
int raw_seq_new(raw *r, uint32_t *seq);
/* One request on the stream (two words: a, b) and its REPLY: its status (and *value), or a peer
 * status below -400. */
int raw_words(raw *r, int type, uint32_t a, uint32_t b, uint32_t *value);
/* The next tagged message: the token and k's fixed part, then n bytes (taken as they are). */
int raw_tag(raw *r, const peer_kv *k, const uint8_t *b, size_t n);
/* Layer l of kv as the remote backend writes it for the node's device dev (its run's stream
 * header before layer 0) into out (cap bytes): its length, 0 when it does not fit. */
size_t raw_chunk_bytes(const model *m, const raw *r, int dev, const kvcopy *kv, int l, uint8_t *out,
                       size_t cap);
/* Sleeps ms milliseconds (the tests' waits for another thread or process). */
void nap_ms(int ms);
/* One decode step of token 1 on a fresh sequence of d (vocab logits), the sequence then freed:
 * 0, or the status of the first call that failed. "It is served." */
int decode_once(accel_dev *d, int vocab);

#endif

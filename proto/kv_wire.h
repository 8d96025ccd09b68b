/* proto/kv_wire.h — the KV wire format: a versioned byte stream of quantized KV chunks
 * (proto/kv.h) from a prefill device to a decode device. Byte layout: proto/KV_FORMAT.md.
 *
 *   stream = header (128 bytes; version 1: 96) chunk*
 *   chunk  = chunk header (64 bytes; version 1: 48) payload
 *   payload= K values | V values | K scales | V scales, each section padded with zeros to a
 *            multiple of 64 bytes (so a payload placed 64-byte aligned, in host memory or in an
 *            HBM bank, has every section aligned for 512-bit AXI beats)
 *
 * Chunks come in runs of positions: a run [p, p+n) carries layers 0..L-1 in order, each with
 * the same p and n; runs follow each other from the header's pos0 until its n_tokens positions
 * are covered. (A whole prompt is one run; a chunked prefill sends one run per chunk.)
 *
 * Blocks (version 2): the stream is cut in the receiver's KV blocks — block b holds positions
 * [b * block_tokens, (b + 1) * block_tokens) of the sequence, the block size stated in the
 * header — and every chunk header says which blocks its positions touch (the first, how many,
 * and the offset of its first position in the first). Since a payload section is token-major,
 * the positions of one block are one contiguous range of each of the four sections
 * (proto_kv_block_slice_of): a receiver whose block table uses that block size places each
 * block's slice straight into its block, with no reformatting. Version 1 streams (no block
 * size) are still read; their chunks are described in the receiver's block size.
 *
 * Writer: proto_kv_header_write() then proto_kv_chunk_write() per chunk, into caller buffers.
 * Reader: proto_kv_reader_feed() takes bytes as they arrive, in pieces of any size, validates
 * every field against bounds and the receiver's expectations *before* allocating or using
 * anything, checks each chunk's CRC32Cs, and hands each good chunk to a callback as a
 * proto_kv_layer view. A chunk that fails a check never reaches the callback; the reader then
 * refuses everything after it (the import of that sequence has failed).
 *
 * Threads: a reader is used by one thread at a time; the writer functions are pure. */
#ifndef TANDEM_PROTO_KV_WIRE_H
#define TANDEM_PROTO_KV_WIRE_H
#include "proto/kv.h"
#include <stddef.h>
#include <stdint.h>

#define PROTO_KV_WIRE_VERSION      2 /* what the writer writes; the reader reads 1 and 2 */
#define PROTO_KV_HEADER_BYTES      128
#define PROTO_KV_CHUNK_HEADER_BYTES 64
#define PROTO_KV_HEADER_V1_BYTES   96
#define PROTO_KV_CHUNK_HEADER_V1_BYTES 48
#define PROTO_KV_SECTION_ALIGN     64
#define PROTO_KV_SCALE_FP16        1 /* scale_type: IEEE binary16 */
#define PROTO_KV_LAYOUT_TOKEN_MAJOR 1 /* layout: proto/kv.h, (token, head, dim) */
#define PROTO_KV_ORDER_RUNS        1 /* order (v2): runs of positions, layers 0..L-1 in each */
/* A version 1 stream states no block size: its chunks are described in the receiver's
 * (proto_kv_expect.block_tokens), or in this many positions when the receiver states none. */
#define PROTO_KV_V1_BLOCK_TOKENS   16

/* Bounds every stream must respect, whatever the receiver accepts (the Llama family is far
 * inside them: 126 layers, 128 KV heads, head_dim 256 at most today). */
#define PROTO_KV_MAX_LAYERS   1024
#define PROTO_KV_MAX_HEADS    1024
#define PROTO_KV_MAX_HEAD_DIM 1024
#define PROTO_KV_MAX_TOKENS   (1 << 24)
#define PROTO_KV_MAX_BLOCK_TOKENS 4096 /* cpu 16, cuda 128, the cards lcm(128, 16 x parts): 128..3968 */

/* The reader's and writer's statuses, in -300 .. -399: a range of their own in the process's
 * one error space, where the device interface's statuses are -1 .. -99 and the scheduler's
 * -200 .. -299 (scheduler/accel.h, scheduler/sched.h; proto/ sees neither, so the ranges are
 * written here as numbers, and the scheduler, which sees all three, asserts that they are
 * disjoint). The reader returns its callback's status as is: a callback's statuses must lie
 * outside this range, so that a status out of proto_kv_reader_feed says whose it is. Values are
 * never written on the wire or in a file (the names are in proto/KV_FORMAT.md). */
enum proto_kv_wire_status {
    PROTO_KV_OK = 0,
    PROTO_KV_ERR_MAGIC = -301,    /* not a KV stream / not a chunk where one should start */
    PROTO_KV_ERR_VERSION = -302,  /* a version or flag this reader does not know */
    PROTO_KV_ERR_MODEL = -303,    /* produced for another model (fingerprint or shape) */
    PROTO_KV_ERR_BOUNDS = -304,   /* a size, count or position outside its bounds */
    PROTO_KV_ERR_ORDER = -305,    /* a chunk out of sequence (layer or position) */
    PROTO_KV_ERR_CRC = -306,      /* a checksum does not match: the bytes are corrupt */
    PROTO_KV_ERR_TRUNCATED = -307,/* the stream ended before every chunk arrived */
    PROTO_KV_ERR_NOMEM = -308,    /* the reader could not buffer a chunk */
    PROTO_KV_ERR_STATE = -309,    /* the reader already failed, or bytes after the end */
};
#define PROTO_KV_ERR_RANGE_HI (-300)
#define PROTO_KV_ERR_RANGE_LO (-399)
#define PROTO_KV_IS_ERR(st) ((st) <= PROTO_KV_ERR_RANGE_HI && (st) >= PROTO_KV_ERR_RANGE_LO)
/* Names a status of this header ("unknown KV wire status" for any other value). */
const char *proto_kv_wire_strerror(int status);

typedef struct proto_kv_header {
    uint8_t fingerprint[32]; /* model->fingerprint of the model that produced the KV */
    int n_layers, n_kv_heads, head_dim;
    int n_tokens;            /* positions the stream carries */
    int pos0;                /* the first of them */
    enum proto_kv_dtype dtype;
    int block_tokens;        /* positions per block of the receiver's block table, 1..MAX */
    int version;             /* writer: 0 or 2 writes version 2, 1 writes version 1 (tests, an
                                old receiver); reader: the stream's */
} proto_kv_header;

/* The blocks positions [pos0, pos0 + n) touch, for blocks of bt positions. */
static inline int proto_kv_n_blocks(int pos0, int n, int bt)
{
    return (int)(((long long)pos0 + n + bt - 1) / bt - pos0 / bt);
}

/* Where each section of a chunk's payload starts (bytes from the payload's start). */
typedef struct proto_kv_payload_layout {
    size_t value_bytes; /* of K (and of V) */
    size_t scale_bytes; /* of K's scales (and of V's) */
    size_t k, v, k_scale, v_scale;
    size_t total;       /* payload bytes, padding included */
} proto_kv_payload_layout;

/* 0 when the shape is one the format can carry (head_dim even, a multiple of the int4 group,
 * every count within the PROTO_KV_MAX_* bounds), else PROTO_KV_ERR_BOUNDS. */
int proto_kv_shape_check(enum proto_kv_dtype dtype, int n_layers, int n_kv_heads, int head_dim);
/* Payload layout of a chunk of n_tokens (shape already checked). */
void proto_kv_payload_layout_of(enum proto_kv_dtype dtype, int n_tokens, int n_kv_heads,
                                int head_dim, proto_kv_payload_layout *out);

/* Bytes of h's header: PROTO_KV_HEADER_BYTES, or PROTO_KV_HEADER_V1_BYTES for version 1. */
size_t proto_kv_header_bytes(const proto_kv_header *h);
/* Serializes the header into out (proto_kv_header_bytes(h) bytes). Returns that many, or a
 * negative status (PROTO_KV_ERR_BOUNDS: a shape, count or block size out of bounds;
 * PROTO_KV_ERR_VERSION: a version other than 0, 1, 2). */
int proto_kv_header_write(const proto_kv_header *h, uint8_t out[PROTO_KV_HEADER_BYTES]);
/* Bytes proto_kv_chunk_write needs for this chunk of h's stream (chunk header + payload); 0 if
 * its shape is invalid or not h's. */
size_t proto_kv_chunk_bytes(const proto_kv_header *h, const proto_kv_layer *c);
/* Serializes one chunk of h's stream (its version, its block size) into out (cap bytes).
 * Returns the bytes written, or a negative status (PROTO_KV_ERR_BOUNDS for a bad shape, one
 * that is not h's, or a short buffer). */
long long proto_kv_chunk_write(const proto_kv_header *h, const proto_kv_layer *c, uint8_t *out,
                               size_t cap);
/* The CRC32C of the payload proto_kv_chunk_write would write for c (sections and zero padding),
 * computed from c's arrays without building it: what a receiver that stored the chunk in its
 * own layout compares with the wire's payload_crc, or computes itself for a chunk that did not
 * come over the wire. 0 for an invalid shape. Pure. */
uint32_t proto_kv_payload_crc(const proto_kv_layer *c);

/* What the receiver accepts. */
typedef struct proto_kv_expect {
    const uint8_t *fingerprint; /* 32 bytes; NULL accepts any model (tools only) */
    int n_layers, n_kv_heads, head_dim; /* must match the stream exactly */
    enum proto_kv_dtype dtype;  /* 0: int8 or int4 */
    int max_tokens;             /* most positions the receiver will take (its reservation) */
    int max_pos;                /* pos0 + n_tokens must not exceed it (the model's context) */
    int block_tokens;           /* the receiver's block size: a version 2 stream cut in other
                                   blocks is refused (PROTO_KV_ERR_MODEL); 0 takes any */
} proto_kv_expect;

typedef struct proto_kv_reader proto_kv_reader;

/* Called for each validated chunk, in stream order. The view (and the header) are valid only
 * during the call. payload/payload_bytes: the chunk's payload exactly as it was on the wire
 * (what a device may copy verbatim), and payload_crc its CRC32C. Return 0 to go on, or a
 * negative status of your own (outside PROTO_KV_ERR_RANGE_*), which proto_kv_reader_feed()
 * returns as is (the reader stops). */
typedef struct proto_kv_chunk_info {
    const uint8_t *payload;
    size_t payload_bytes;
    uint32_t payload_crc;
    proto_kv_payload_layout layout;
    int version;      /* of the stream */
    int block_tokens; /* the stream's block size (version 1: the receiver's, see above) */
    int block0;       /* the first block the chunk's positions touch: pos0 / block_tokens */
    int n_blocks;     /* how many blocks they touch */
    int block_offset; /* pos0 % block_tokens: where in block0 the chunk's first position goes */
} proto_kv_chunk_info;

/* One block's share of a chunk: positions [block * bt + offset, + n_tokens) of the sequence,
 * which are the chunk's tokens [token0, token0 + n_tokens). Their bytes in the payload are one
 * contiguous range per section: [k, k + value_bytes), [v, v + value_bytes), [k_scale, k_scale +
 * scale_bytes), [v_scale, v_scale + scale_bytes) — laid out as proto/kv.h says for n_tokens. */
typedef struct proto_kv_block_slice {
    int block, offset, n_tokens, token0;
    size_t k, v, k_scale, v_scale;
    size_t value_bytes, scale_bytes;
} proto_kv_block_slice;
/* Slice j (0 .. info->n_blocks - 1) of chunk c as the reader described it. 0, or
 * PROTO_KV_ERR_BOUNDS for a j out of range. */
int proto_kv_block_slice_of(const proto_kv_layer *c, const proto_kv_chunk_info *info, int j,
                            proto_kv_block_slice *out);
typedef int (*proto_kv_chunk_fn)(void *ctx, const proto_kv_header *h, const proto_kv_layer *chunk,
                                 const proto_kv_chunk_info *info);

/* A reader for one stream. NULL when out of memory. The caller owns it. */
proto_kv_reader *proto_kv_reader_new(const proto_kv_expect *e, proto_kv_chunk_fn fn, void *ctx);
void proto_kv_reader_free(proto_kv_reader *r);
/* Takes the next n bytes of the stream. Returns 0, or a negative status (the reader's or the
 * callback's); after an error every later call returns PROTO_KV_ERR_STATE. Chunks whose bytes
 * lie whole inside `data` (and 8-byte aligned) are handed out without a copy. */
int proto_kv_reader_feed(proto_kv_reader *r, const void *data, size_t n);
/* The CRC-32C of the n bytes at p, computed by the caller as they arrived (a receiver that
 * checks them on the core that just copied them in, where they are still in its cache: the peer
 * node's thread, peer/server.c). Good for the next proto_kv_reader_feed call only: a payload it
 * checks that is exactly these bytes (same address and length, zero-copy) is compared with crc
 * instead of being read again; any other payload is checked as always. The caller answers for
 * crc being these bytes' CRC (bytes that change between the two are its bug). */
void proto_kv_reader_crc_hint(proto_kv_reader *r, const void *p, size_t n, uint32_t crc);
/* The stream ended: 0 when every chunk arrived, else PROTO_KV_ERR_TRUNCATED. */
int proto_kv_reader_finish(proto_kv_reader *r);
/* The parsed header, or NULL before it arrived. */
const proto_kv_header *proto_kv_reader_header(const proto_kv_reader *r);
/* A one-line reason for the reader's failure ("" while none). */
const char *proto_kv_reader_error(const proto_kv_reader *r);
/* Positions complete (every layer arrived) so far. */
int proto_kv_reader_tokens_done(const proto_kv_reader *r);
/* 1 when the bytes fed so far end where a chunk (or the stream) ends: nothing of a header or
 * chunk is held waiting for more. A transport that carries whole chunks per message checks it
 * after each message, so that a chunk cut short is found at once, not when the next one
 * arrives (or never, for the last). 0 also after an error. */
int proto_kv_reader_at_boundary(const proto_kv_reader *r);

#endif

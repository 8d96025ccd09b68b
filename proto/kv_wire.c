/* proto/kv_wire.c — KV wire format writer and streaming reader (see kv_wire.h, KV_FORMAT.md). */
#include "proto/kv_wire.h"
#include "proto/crc32c.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t stream_magic[8] = {'T', 'A', 'N', 'D', 'E', 'M', 'K', 'V'};
static const uint8_t chunk_magic[4] = {'K', 'V', 'C', 'H'};

/* ---------------------------------------------------------------- little-endian fields */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

const char *proto_kv_wire_strerror(int status)
{
    switch ((enum proto_kv_wire_status)status) { /* over the enum: -Wswitch names a code left out */
    case PROTO_KV_OK: return "ok";
    case PROTO_KV_ERR_MAGIC: return "not a KV stream";
    case PROTO_KV_ERR_VERSION: return "unsupported KV stream version";
    case PROTO_KV_ERR_MODEL: return "KV stream is for another model";
    case PROTO_KV_ERR_BOUNDS: return "KV stream field out of bounds";
    case PROTO_KV_ERR_ORDER: return "KV chunk out of order";
    case PROTO_KV_ERR_CRC: return "KV chunk checksum mismatch";
    case PROTO_KV_ERR_TRUNCATED: return "KV stream truncated";
    case PROTO_KV_ERR_NOMEM: return "out of memory buffering a KV chunk";
    case PROTO_KV_ERR_STATE: return "KV reader already failed or finished";
    }
    return "unknown KV wire status";
}

/* ---------------------------------------------------------------- shape and layout */

int proto_kv_shape_check(enum proto_kv_dtype dtype, int n_layers, int n_kv_heads, int head_dim)
{
    if (dtype != PROTO_KV_INT8 && dtype != PROTO_KV_INT4) return PROTO_KV_ERR_BOUNDS;
    if (n_layers < 1 || n_layers > PROTO_KV_MAX_LAYERS) return PROTO_KV_ERR_BOUNDS;
    if (n_kv_heads < 1 || n_kv_heads > PROTO_KV_MAX_HEADS) return PROTO_KV_ERR_BOUNDS;
    if (head_dim < 2 || head_dim > PROTO_KV_MAX_HEAD_DIM || head_dim % 2) return PROTO_KV_ERR_BOUNDS;
    if (head_dim % proto_kv_group(dtype, head_dim)) return PROTO_KV_ERR_BOUNDS;
    return PROTO_KV_OK;
}

static size_t pad(size_t n)
{
    return (n + PROTO_KV_SECTION_ALIGN - 1) / PROTO_KV_SECTION_ALIGN * PROTO_KV_SECTION_ALIGN;
}

void proto_kv_payload_layout_of(enum proto_kv_dtype dtype, int n_tokens, int n_kv_heads,
                                int head_dim, proto_kv_payload_layout *o)
{
    o->value_bytes = proto_kv_value_bytes(dtype, n_tokens, n_kv_heads, head_dim);
    o->scale_bytes = proto_kv_scale_count(dtype, n_tokens, n_kv_heads, head_dim) * 2;
    o->k = 0;
    o->v = pad(o->value_bytes);
    o->k_scale = o->v + pad(o->value_bytes);
    o->v_scale = o->k_scale + pad(o->scale_bytes);
    o->total = o->v_scale + pad(o->scale_bytes);
}

/* ---------------------------------------------------------------- writer */

/* Where each version puts its checksums: the stream header's covers the bytes before it. */
static size_t header_len(int version)
{
    return version == 1 ? PROTO_KV_HEADER_V1_BYTES : PROTO_KV_HEADER_BYTES;
}
static size_t chunk_header_len(int version)
{
    return version == 1 ? PROTO_KV_CHUNK_HEADER_V1_BYTES : PROTO_KV_CHUNK_HEADER_BYTES;
}

size_t proto_kv_header_bytes(const proto_kv_header *h)
{
    return header_len(h->version);
}

int proto_kv_header_write(const proto_kv_header *h, uint8_t out[PROTO_KV_HEADER_BYTES])
{
    int version = h->version ? h->version : PROTO_KV_WIRE_VERSION;
    if (version != 1 && version != 2) return PROTO_KV_ERR_VERSION;
    if (proto_kv_shape_check(h->dtype, h->n_layers, h->n_kv_heads, h->head_dim) != 0 ||
        h->n_tokens < 1 || h->n_tokens > PROTO_KV_MAX_TOKENS || h->pos0 < 0 ||
        h->pos0 > INT32_MAX - h->n_tokens ||
        (version == 2 && (h->block_tokens < 1 || h->block_tokens > PROTO_KV_MAX_BLOCK_TOKENS)))
        return PROTO_KV_ERR_BOUNDS;
    size_t len = header_len(version);
    memset(out, 0, len);
    memcpy(out, stream_magic, 8);
    put_u16(out + 8, (uint16_t)version);
    put_u16(out + 10, (uint16_t)len);
    put_u32(out + 12, 0); /* flags */
    memcpy(out + 16, h->fingerprint, 32);
    put_u32(out + 48, (uint32_t)h->n_layers);
    put_u32(out + 52, (uint32_t)h->n_kv_heads);
    put_u32(out + 56, (uint32_t)h->head_dim);
    put_u32(out + 60, (uint32_t)h->n_tokens);
    put_u32(out + 64, (uint32_t)h->pos0);
    out[68] = (uint8_t)h->dtype;
    out[69] = PROTO_KV_SCALE_FP16;
    out[70] = PROTO_KV_LAYOUT_TOKEN_MAJOR;
    put_u32(out + 72, (uint32_t)proto_kv_group(h->dtype, h->head_dim));
    if (version == 2) {
        int bt = h->block_tokens;
        out[71] = PROTO_KV_ORDER_RUNS;
        put_u32(out + 76, (uint32_t)bt);
        put_u32(out + 80, (uint32_t)(h->pos0 / bt));
        put_u32(out + 84, (uint32_t)proto_kv_n_blocks(h->pos0, h->n_tokens, bt));
    }
    put_u32(out + len - 4, proto_crc32c(0, out, len - 4));
    return (int)len;
}

/* c is a chunk h's stream can carry (its shape, its layer). */
static int chunk_shape_ok(const proto_kv_header *h, const proto_kv_layer *c)
{
    int version = h && h->version ? h->version : PROTO_KV_WIRE_VERSION;
    return h && c && (version == 1 || version == 2) &&
           proto_kv_shape_check(c->dtype, 1, c->n_kv_heads, c->head_dim) == 0 &&
           c->dtype == h->dtype && c->n_kv_heads == h->n_kv_heads && c->head_dim == h->head_dim &&
           c->layer >= 0 && c->layer < h->n_layers && c->layer < PROTO_KV_MAX_LAYERS &&
           c->n_tokens >= 1 && c->n_tokens <= PROTO_KV_MAX_TOKENS && c->pos0 >= 0 &&
           c->pos0 <= INT32_MAX - c->n_tokens &&
           (version == 1 || (h->block_tokens >= 1 && h->block_tokens <= PROTO_KV_MAX_BLOCK_TOKENS)) &&
           c->k && c->v && c->k_scale && c->v_scale;
}

size_t proto_kv_chunk_bytes(const proto_kv_header *h, const proto_kv_layer *c)
{
    if (!chunk_shape_ok(h, c)) return 0;
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim, &L);
    return chunk_header_len(h->version) + L.total;
}

long long proto_kv_chunk_write(const proto_kv_header *h, const proto_kv_layer *c, uint8_t *out,
                               size_t cap)
{
    size_t need = proto_kv_chunk_bytes(h, c);
    if (!need || cap < need) return PROTO_KV_ERR_BOUNDS;
    size_t hl = chunk_header_len(h->version);
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim, &L);
    uint8_t *p = out + hl;
    memset(p, 0, L.total);
    memcpy(p + L.k, c->k, L.value_bytes);
    memcpy(p + L.v, c->v, L.value_bytes);
    memcpy(p + L.k_scale, c->k_scale, L.scale_bytes);
    memcpy(p + L.v_scale, c->v_scale, L.scale_bytes);
    memset(out, 0, hl);
    memcpy(out, chunk_magic, 4);
    put_u32(out + 4, (uint32_t)c->layer);
    put_u32(out + 8, (uint32_t)c->pos0);
    put_u32(out + 12, (uint32_t)c->n_tokens);
    put_u64(out + 16, L.value_bytes);
    put_u64(out + 24, L.scale_bytes);
    put_u64(out + 32, L.total);
    put_u32(out + 40, proto_crc32c(0, p, L.total));
    if (hl == PROTO_KV_CHUNK_HEADER_BYTES) {
        int bt = h->block_tokens;
        put_u32(out + 44, (uint32_t)(c->pos0 / bt));
        put_u32(out + 48, (uint32_t)proto_kv_n_blocks(c->pos0, c->n_tokens, bt));
        put_u32(out + 52, (uint32_t)(c->pos0 % bt));
    }
    put_u32(out + hl - 4, proto_crc32c(0, out, hl - 4));
    return (long long)need;
}

uint32_t proto_kv_payload_crc(const proto_kv_layer *c)
{
    static const uint8_t zeros[PROTO_KV_SECTION_ALIGN];
    if (!c || proto_kv_shape_check(c->dtype, 1, c->n_kv_heads, c->head_dim) != 0 ||
        c->n_tokens < 1 || c->n_tokens > PROTO_KV_MAX_TOKENS || !c->k || !c->v || !c->k_scale ||
        !c->v_scale)
        return 0;
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim, &L);
    const void *sec[4] = {c->k, c->v, c->k_scale, c->v_scale};
    size_t len[4] = {L.value_bytes, L.value_bytes, L.scale_bytes, L.scale_bytes};
    uint32_t crc = 0;
    for (int i = 0; i < 4; i++) {
        crc = proto_crc32c(crc, sec[i], len[i]);
        crc = proto_crc32c(crc, zeros, pad(len[i]) - len[i]);
    }
    return crc;
}

int proto_kv_block_slice_of(const proto_kv_layer *c, const proto_kv_chunk_info *info, int j,
                            proto_kv_block_slice *out)
{
    if (j < 0 || j >= info->n_blocks || info->block_tokens < 1) return PROTO_KV_ERR_BOUNDS;
    int bt = info->block_tokens;
    int t0 = j == 0 ? 0 : j * bt - info->block_offset;
    int t1 = (j + 1) * bt - info->block_offset;
    if (t1 > c->n_tokens) t1 = c->n_tokens;
    out->block = info->block0 + j;
    out->offset = j == 0 ? info->block_offset : 0;
    out->token0 = t0;
    out->n_tokens = t1 - t0;
    size_t v0 = proto_kv_value_bytes(c->dtype, t0, c->n_kv_heads, c->head_dim);
    size_t s0 = 2 * proto_kv_scale_count(c->dtype, t0, c->n_kv_heads, c->head_dim);
    out->value_bytes = proto_kv_value_bytes(c->dtype, t1 - t0, c->n_kv_heads, c->head_dim);
    out->scale_bytes = 2 * proto_kv_scale_count(c->dtype, t1 - t0, c->n_kv_heads, c->head_dim);
    out->k = info->layout.k + v0;
    out->v = info->layout.v + v0;
    out->k_scale = info->layout.k_scale + s0;
    out->v_scale = info->layout.v_scale + s0;
    return 0;
}

/* ---------------------------------------------------------------- reader */

/* The first bytes of any version's header: magic, version, header size. */
#define HEADER_PREFIX 12

enum rstate { R_HEADER, R_CHUNK_HEADER, R_PAYLOAD, R_DONE, R_FAILED };

struct proto_kv_reader {
    proto_kv_expect e;
    uint8_t fingerprint[32];
    int check_fingerprint;
    proto_kv_chunk_fn fn;
    void *ctx;
    enum rstate st;
    proto_kv_header h;
    int have_header;
    size_t header_want;   /* the stream header's size, once its prefix told the version */
    uint8_t hbuf[PROTO_KV_HEADER_BYTES]; /* header / chunk header being assembled */
    size_t hfill;
    /* the chunk being received */
    proto_kv_layer cur;
    uint32_t payload_crc;
    proto_kv_payload_layout L;
    proto_kv_chunk_info info;
    uint8_t *buf; /* payload assembly buffer (64-byte aligned) */
    size_t buf_cap, fill;
    /* position in the stream */
    int next_layer, run_pos0, run_n, tokens_done;
    /* proto_kv_reader_crc_hint's, for the current feed call only */
    const uint8_t *hint_p;
    size_t hint_n;
    uint32_t hint_crc;
    char err[200];
};

__attribute__((format(printf, 3, 4))) static int fail(proto_kv_reader *r, int status,
                                                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    r->st = R_FAILED;
    return status;
}

proto_kv_reader *proto_kv_reader_new(const proto_kv_expect *e, proto_kv_chunk_fn fn, void *ctx)
{
    proto_kv_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->e = *e;
    if (e->fingerprint) {
        memcpy(r->fingerprint, e->fingerprint, 32);
        r->check_fingerprint = 1;
    }
    r->e.fingerprint = NULL;
    if (r->e.block_tokens < 0 || r->e.block_tokens > PROTO_KV_MAX_BLOCK_TOKENS) r->e.block_tokens = 0;
    r->fn = fn;
    r->ctx = ctx;
    return r;
}

void proto_kv_reader_free(proto_kv_reader *r)
{
    if (!r) return;
    free(r->buf);
    free(r);
}

const proto_kv_header *proto_kv_reader_header(const proto_kv_reader *r)
{
    return r->have_header ? &r->h : NULL;
}

const char *proto_kv_reader_error(const proto_kv_reader *r)
{
    return r->err;
}

int proto_kv_reader_tokens_done(const proto_kv_reader *r)
{
    return r->tokens_done;
}

int proto_kv_reader_at_boundary(const proto_kv_reader *r)
{
    return (r->st == R_CHUNK_HEADER && r->hfill == 0) || r->st == R_DONE;
}

/* The header's first HEADER_PREFIX bytes: which version, so how many bytes its header has. */
static int parse_prefix(proto_kv_reader *r, const uint8_t *p)
{
    if (memcmp(p, stream_magic, 8) != 0) return fail(r, PROTO_KV_ERR_MAGIC, "bad stream magic");
    unsigned version = get_u16(p + 8), hbytes = get_u16(p + 10);
    if (version != 1 && version != 2)
        return fail(r, PROTO_KV_ERR_VERSION, "version %u (this reader reads versions 1 and 2)",
                    version);
    if (hbytes != header_len((int)version))
        return fail(r, PROTO_KV_ERR_VERSION, "version %u with a %u-byte header (version %u has "
                    "%zu)", version, hbytes, version, header_len((int)version));
    r->h.version = (int)version;
    r->header_want = hbytes;
    return 0;
}

static int parse_header(proto_kv_reader *r, const uint8_t *p)
{
    const int v2 = r->h.version == 2;
    const size_t len = r->header_want;
    if (get_u32(p + len - 4) != proto_crc32c(0, p, len - 4))
        return fail(r, PROTO_KV_ERR_CRC, "stream header checksum mismatch");
    uint32_t flags = get_u32(p + 12);
    int reserved = v2 ? p[71] != PROTO_KV_ORDER_RUNS : p[71] != 0;
    for (size_t i = v2 ? 88 : 76; i < len - 4; i++) reserved |= p[i] != 0;
    if (flags || reserved)
        return fail(r, PROTO_KV_ERR_VERSION, "flags 0x%x / order %u / reserved bytes set: written "
                    "by a newer writer", flags, p[71]);
    if (p[69] != PROTO_KV_SCALE_FP16 || p[70] != PROTO_KV_LAYOUT_TOKEN_MAJOR)
        return fail(r, PROTO_KV_ERR_VERSION, "scale type %u / layout %u not supported", p[69],
                    p[70]);
    uint32_t L = get_u32(p + 48), H = get_u32(p + 52), D = get_u32(p + 56);
    uint32_t n = get_u32(p + 60), pos0 = get_u32(p + 64), group = get_u32(p + 72);
    enum proto_kv_dtype dt = (enum proto_kv_dtype)p[68];
    /* Bounds first (as unsigned, so huge values cannot wrap into range), then the model. */
    if (L > PROTO_KV_MAX_LAYERS || H > PROTO_KV_MAX_HEADS || D > PROTO_KV_MAX_HEAD_DIM ||
        proto_kv_shape_check(dt, (int)L, (int)H, (int)D) != 0)
        return fail(r, PROTO_KV_ERR_BOUNDS, "shape %u layers x %u heads x %u dims, dtype %u is "
                    "not a valid KV shape", L, H, D, (unsigned)dt);
    if (group != (uint32_t)proto_kv_group(dt, (int)D))
        return fail(r, PROTO_KV_ERR_BOUNDS, "group %u for head_dim %u", group, D);
    if (n < 1 || n > PROTO_KV_MAX_TOKENS || (r->e.max_tokens > 0 && n > (uint32_t)r->e.max_tokens))
        return fail(r, PROTO_KV_ERR_BOUNDS, "%u tokens (receiver takes 1..%d)", n,
                    r->e.max_tokens > 0 ? r->e.max_tokens : PROTO_KV_MAX_TOKENS);
    if (pos0 > (uint32_t)INT32_MAX - n ||
        (r->e.max_pos > 0 && (uint64_t)pos0 + n > (uint64_t)r->e.max_pos))
        return fail(r, PROTO_KV_ERR_BOUNDS, "positions %u..%u beyond the context (%d)", pos0,
                    pos0 + n, r->e.max_pos);
    uint32_t bt = r->e.block_tokens > 0 ? (uint32_t)r->e.block_tokens : PROTO_KV_V1_BLOCK_TOKENS;
    if (v2) {
        bt = get_u32(p + 76);
        uint32_t b0 = get_u32(p + 80), nb = get_u32(p + 84);
        if (bt < 1 || bt > PROTO_KV_MAX_BLOCK_TOKENS)
            return fail(r, PROTO_KV_ERR_BOUNDS, "block size %u (1..%d)", bt,
                        PROTO_KV_MAX_BLOCK_TOKENS);
        if (b0 != pos0 / bt || nb != (uint32_t)proto_kv_n_blocks((int)pos0, (int)n, (int)bt))
            return fail(r, PROTO_KV_ERR_BOUNDS, "blocks %u + %u do not cover positions %u..%u in "
                        "blocks of %u", b0, nb, pos0, pos0 + n, bt);
    }
    if (r->check_fingerprint && memcmp(p + 16, r->fingerprint, 32) != 0)
        return fail(r, PROTO_KV_ERR_MODEL, "model fingerprint differs from the loaded model's");
    if ((int)L != r->e.n_layers || (int)H != r->e.n_kv_heads || (int)D != r->e.head_dim)
        return fail(r, PROTO_KV_ERR_MODEL, "shape %u x %u x %u, the model has %d x %d x %d", L, H,
                    D, r->e.n_layers, r->e.n_kv_heads, r->e.head_dim);
    if (r->e.dtype && dt != r->e.dtype)
        return fail(r, PROTO_KV_ERR_MODEL, "dtype %u, the receiver takes %u", (unsigned)dt,
                    (unsigned)r->e.dtype);
    if (v2 && r->e.block_tokens > 0 && bt != (uint32_t)r->e.block_tokens)
        return fail(r, PROTO_KV_ERR_MODEL, "cut in blocks of %u positions, the receiver's hold "
                    "%d", bt, r->e.block_tokens);
    memcpy(r->h.fingerprint, p + 16, 32);
    r->h.n_layers = (int)L;
    r->h.n_kv_heads = (int)H;
    r->h.head_dim = (int)D;
    r->h.n_tokens = (int)n;
    r->h.pos0 = (int)pos0;
    r->h.dtype = dt;
    r->h.block_tokens = (int)bt;
    r->have_header = 1;
    r->run_pos0 = (int)pos0;
    r->st = R_CHUNK_HEADER;
    return 0;
}

static int parse_chunk_header(proto_kv_reader *r, const uint8_t *p)
{
    const int v2 = r->h.version == 2;
    const size_t hl = chunk_header_len(r->h.version);
    if (memcmp(p, chunk_magic, 4) != 0)
        return fail(r, PROTO_KV_ERR_MAGIC, "no chunk magic where chunk %d of layer %d starts",
                    r->tokens_done, r->next_layer);
    if (get_u32(p + hl - 4) != proto_crc32c(0, p, hl - 4))
        return fail(r, PROTO_KV_ERR_CRC, "chunk header checksum mismatch (layer %d expected)",
                    r->next_layer);
    uint32_t layer = get_u32(p + 4), pos0 = get_u32(p + 8), n = get_u32(p + 12);
    if (layer != (uint32_t)r->next_layer || pos0 != (uint32_t)r->run_pos0)
        return fail(r, PROTO_KV_ERR_ORDER, "chunk for layer %u at position %u; expected layer %d "
                    "at %d", layer, pos0, r->next_layer, r->run_pos0);
    int remaining = r->h.pos0 + r->h.n_tokens - r->run_pos0;
    if (r->next_layer == 0) {
        if (n < 1 || n > (uint32_t)remaining)
            return fail(r, PROTO_KV_ERR_BOUNDS, "chunk of %u tokens; %d remain", n, remaining);
        r->run_n = (int)n;
    } else if (n != (uint32_t)r->run_n) {
        return fail(r, PROTO_KV_ERR_ORDER, "layer %u carries %u tokens, layer 0 of its run %d",
                    layer, n, r->run_n);
    }
    proto_kv_payload_layout_of(r->h.dtype, r->run_n, r->h.n_kv_heads, r->h.head_dim, &r->L);
    if (get_u64(p + 16) != r->L.value_bytes || get_u64(p + 24) != r->L.scale_bytes ||
        get_u64(p + 32) != r->L.total)
        return fail(r, PROTO_KV_ERR_BOUNDS, "layer %u: section sizes do not match its shape",
                    layer);
    /* pos0 and n are within the header's positions now: the block fields cannot overflow */
    const int bt = r->h.block_tokens;
    const int b0 = r->run_pos0 / bt, nb = proto_kv_n_blocks(r->run_pos0, r->run_n, bt);
    if (v2 && (get_u32(p + 44) != (uint32_t)b0 || get_u32(p + 48) != (uint32_t)nb ||
               get_u32(p + 52) != (uint32_t)(r->run_pos0 % bt) || get_u32(p + 56) != 0))
        return fail(r, PROTO_KV_ERR_BOUNDS, "layer %u: blocks %u + %u at offset %u do not match "
                    "positions %d..%d in blocks of %d", layer, get_u32(p + 44), get_u32(p + 48),
                    get_u32(p + 52), r->run_pos0, r->run_pos0 + r->run_n, bt);
    r->payload_crc = get_u32(p + 40);
    r->cur = (proto_kv_layer){.layer = (int)layer, .pos0 = (int)pos0, .n_tokens = r->run_n,
                              .n_kv_heads = r->h.n_kv_heads, .head_dim = r->h.head_dim,
                              .dtype = r->h.dtype};
    r->info = (proto_kv_chunk_info){.payload_bytes = r->L.total, .payload_crc = r->payload_crc,
                                    .layout = r->L, .version = r->h.version, .block_tokens = bt,
                                    .block0 = b0, .n_blocks = nb,
                                    .block_offset = r->run_pos0 % bt};
    r->fill = 0;
    r->st = R_PAYLOAD;
    return 0;
}

/* Checks and delivers the payload at p (r->L.total bytes). */
static int deliver(proto_kv_reader *r, const uint8_t *p)
{
    const proto_kv_payload_layout *L = &r->L;
    uint32_t crc = r->hint_p == p && r->hint_n == L->total ? r->hint_crc : proto_crc32c(0, p, L->total);
    r->hint_p = NULL;
    if (crc != r->payload_crc)
        return fail(r, PROTO_KV_ERR_CRC, "layer %d at position %d: payload checksum mismatch",
                    r->cur.layer, r->cur.pos0);
    /* Padding must be zero: the writer's, and a canonical form for devices that copy it. */
    size_t ends[4] = {L->k + L->value_bytes, L->v + L->value_bytes, L->k_scale + L->scale_bytes,
                      L->v_scale + L->scale_bytes};
    size_t next[4] = {L->v, L->k_scale, L->v_scale, L->total};
    for (int s = 0; s < 4; s++)
        for (size_t i = ends[s]; i < next[s]; i++)
            if (p[i]) return fail(r, PROTO_KV_ERR_BOUNDS, "layer %d: non-zero padding",
                                  r->cur.layer);
    r->cur.k = p + L->k;
    r->cur.v = p + L->v;
    r->cur.k_scale = (const uint16_t *)(const void *)(p + L->k_scale);
    r->cur.v_scale = (const uint16_t *)(const void *)(p + L->v_scale);
    r->info.payload = p;
    int rc = r->fn ? r->fn(r->ctx, &r->h, &r->cur, &r->info) : 0;
    if (rc != 0) {
        fail(r, rc, "the receiver refused layer %d (status %d)", r->cur.layer, rc);
        return rc;
    }
    if (++r->next_layer == r->h.n_layers) {
        r->next_layer = 0;
        r->run_pos0 += r->run_n;
        r->tokens_done += r->run_n;
    }
    r->st = r->tokens_done == r->h.n_tokens ? R_DONE : R_CHUNK_HEADER;
    r->hfill = 0;
    return 0;
}

void proto_kv_reader_crc_hint(proto_kv_reader *r, const void *p, size_t n, uint32_t crc)
{
    r->hint_p = p;
    r->hint_n = n;
    r->hint_crc = crc;
}

static int feed(proto_kv_reader *r, const void *data, size_t n);

int proto_kv_reader_feed(proto_kv_reader *r, const void *data, size_t n)
{
    int rc = feed(r, data, n);
    r->hint_p = NULL; /* one call's */
    return rc;
}

static int feed(proto_kv_reader *r, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n) {
        switch (r->st) {
        case R_HEADER:
        case R_CHUNK_HEADER: {
            size_t want = r->st == R_CHUNK_HEADER ? chunk_header_len(r->h.version)
                          : r->header_want ? r->header_want : HEADER_PREFIX;
            size_t k = want - r->hfill < n ? want - r->hfill : n;
            memcpy(r->hbuf + r->hfill, p, k);
            r->hfill += k;
            p += k;
            n -= k;
            if (r->hfill < want) break;
            int rc;
            if (r->st == R_HEADER && !r->header_want) {
                rc = parse_prefix(r, r->hbuf); /* the rest of the header follows */
            } else {
                r->hfill = 0;
                rc = r->st == R_HEADER ? parse_header(r, r->hbuf) : parse_chunk_header(r, r->hbuf);
            }
            if (rc) return rc;
            break;
        }
        case R_PAYLOAD: {
            size_t total = r->L.total;
            if (r->fill == 0 && n >= total && ((uintptr_t)p & 7) == 0) {
                /* The whole payload is here and aligned: no copy. */
                int rc = deliver(r, p);
                if (rc) return rc;
                p += total;
                n -= total;
                break;
            }
            if (r->buf_cap < total) {
                free(r->buf);
                r->buf = aligned_alloc(64, pad(total));
                if (!r->buf) {
                    r->buf_cap = 0;
                    return fail(r, PROTO_KV_ERR_NOMEM, "cannot buffer a %zu-byte chunk", total);
                }
                r->buf_cap = pad(total);
            }
            size_t k = total - r->fill < n ? total - r->fill : n;
            memcpy(r->buf + r->fill, p, k);
            r->fill += k;
            p += k;
            n -= k;
            if (r->fill == total) {
                int rc = deliver(r, r->buf);
                if (rc) return rc;
            }
            break;
        }
        case R_DONE:
            return fail(r, PROTO_KV_ERR_STATE, "%zu bytes after the last chunk", n);
        case R_FAILED: return PROTO_KV_ERR_STATE;
        }
    }
    return 0;
}

int proto_kv_reader_finish(proto_kv_reader *r)
{
    if (r->st == R_DONE) return 0;
    if (r->st == R_FAILED) return PROTO_KV_ERR_STATE;
    return fail(r, PROTO_KV_ERR_TRUNCATED, "stream ended after %d of %d positions (layer %d of "
                "the next run)", r->tokens_done, r->have_header ? r->h.n_tokens : 0,
                r->next_layer);
}

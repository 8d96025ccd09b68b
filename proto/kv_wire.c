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

/* The stream header's checksum covers its first 92 bytes. */
static uint32_t header_crc(const uint8_t *p)
{
    return proto_crc32c(0, p, 92);
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

int proto_kv_header_write(const proto_kv_header *h, uint8_t out[PROTO_KV_HEADER_BYTES])
{
    if (proto_kv_shape_check(h->dtype, h->n_layers, h->n_kv_heads, h->head_dim) != 0 ||
        h->n_tokens < 1 || h->n_tokens > PROTO_KV_MAX_TOKENS || h->pos0 < 0 ||
        h->pos0 > INT32_MAX - h->n_tokens)
        return PROTO_KV_ERR_BOUNDS;
    memset(out, 0, PROTO_KV_HEADER_BYTES);
    memcpy(out, stream_magic, 8);
    put_u16(out + 8, PROTO_KV_WIRE_VERSION);
    put_u16(out + 10, PROTO_KV_HEADER_BYTES);
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
    put_u32(out + 92, header_crc(out));
    return PROTO_KV_HEADER_BYTES;
}

static int chunk_shape_ok(const proto_kv_layer *c)
{
    return c && proto_kv_shape_check(c->dtype, 1, c->n_kv_heads, c->head_dim) == 0 &&
           c->layer >= 0 && c->layer < PROTO_KV_MAX_LAYERS && c->n_tokens >= 1 &&
           c->n_tokens <= PROTO_KV_MAX_TOKENS && c->pos0 >= 0 && c->k && c->v && c->k_scale &&
           c->v_scale;
}

size_t proto_kv_chunk_bytes(const proto_kv_layer *c)
{
    if (!chunk_shape_ok(c)) return 0;
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim, &L);
    return PROTO_KV_CHUNK_HEADER_BYTES + L.total;
}

long long proto_kv_chunk_write(const proto_kv_layer *c, uint8_t *out, size_t cap)
{
    size_t need = proto_kv_chunk_bytes(c);
    if (!need || cap < need) return PROTO_KV_ERR_BOUNDS;
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim, &L);
    uint8_t *p = out + PROTO_KV_CHUNK_HEADER_BYTES;
    memset(p, 0, L.total);
    memcpy(p + L.k, c->k, L.value_bytes);
    memcpy(p + L.v, c->v, L.value_bytes);
    memcpy(p + L.k_scale, c->k_scale, L.scale_bytes);
    memcpy(p + L.v_scale, c->v_scale, L.scale_bytes);
    memcpy(out, chunk_magic, 4);
    put_u32(out + 4, (uint32_t)c->layer);
    put_u32(out + 8, (uint32_t)c->pos0);
    put_u32(out + 12, (uint32_t)c->n_tokens);
    put_u64(out + 16, L.value_bytes);
    put_u64(out + 24, L.scale_bytes);
    put_u64(out + 32, L.total);
    put_u32(out + 40, proto_crc32c(0, p, L.total));
    put_u32(out + 44, proto_crc32c(0, out, 44));
    return (long long)need;
}

uint32_t proto_kv_payload_crc(const proto_kv_layer *c)
{
    static const uint8_t zeros[PROTO_KV_SECTION_ALIGN];
    if (!chunk_shape_ok(c)) return 0;
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

/* ---------------------------------------------------------------- reader */

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
    uint8_t hbuf[PROTO_KV_HEADER_BYTES]; /* header / chunk header being assembled */
    size_t hfill;
    /* the chunk being received */
    proto_kv_layer cur;
    uint32_t payload_crc;
    proto_kv_payload_layout L;
    uint8_t *buf; /* payload assembly buffer (64-byte aligned) */
    size_t buf_cap, fill;
    /* position in the stream */
    int next_layer, run_pos0, run_n, tokens_done;
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

static int parse_header(proto_kv_reader *r, const uint8_t *p)
{
    if (memcmp(p, stream_magic, 8) != 0) return fail(r, PROTO_KV_ERR_MAGIC, "bad stream magic");
    unsigned version = get_u16(p + 8), hbytes = get_u16(p + 10);
    if (version != PROTO_KV_WIRE_VERSION || hbytes != PROTO_KV_HEADER_BYTES)
        return fail(r, PROTO_KV_ERR_VERSION, "version %u with a %u-byte header (this reader: "
                    "version %d, %d bytes)", version, hbytes, PROTO_KV_WIRE_VERSION,
                    PROTO_KV_HEADER_BYTES);
    if (get_u32(p + 92) != header_crc(p))
        return fail(r, PROTO_KV_ERR_CRC, "stream header checksum mismatch");
    uint32_t flags = get_u32(p + 12);
    int reserved = p[71] != 0;
    for (int i = 76; i < 92; i++) reserved |= p[i] != 0;
    if (flags || reserved)
        return fail(r, PROTO_KV_ERR_VERSION, "flags 0x%x / reserved bytes set: written by a newer "
                    "writer", flags);
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
    if (r->check_fingerprint && memcmp(p + 16, r->fingerprint, 32) != 0)
        return fail(r, PROTO_KV_ERR_MODEL, "model fingerprint differs from the loaded model's");
    if ((int)L != r->e.n_layers || (int)H != r->e.n_kv_heads || (int)D != r->e.head_dim)
        return fail(r, PROTO_KV_ERR_MODEL, "shape %u x %u x %u, the model has %d x %d x %d", L, H,
                    D, r->e.n_layers, r->e.n_kv_heads, r->e.head_dim);
    if (r->e.dtype && dt != r->e.dtype)
        return fail(r, PROTO_KV_ERR_MODEL, "dtype %u, the receiver takes %u", (unsigned)dt,
                    (unsigned)r->e.dtype);
    memcpy(r->h.fingerprint, p + 16, 32);
    r->h.n_layers = (int)L;
    r->h.n_kv_heads = (int)H;
    r->h.head_dim = (int)D;
    r->h.n_tokens = (int)n;
    r->h.pos0 = (int)pos0;
    r->h.dtype = dt;
    r->have_header = 1;
    r->run_pos0 = (int)pos0;
    r->st = R_CHUNK_HEADER;
    return 0;
}

static int parse_chunk_header(proto_kv_reader *r, const uint8_t *p)
{
    if (memcmp(p, chunk_magic, 4) != 0)
        return fail(r, PROTO_KV_ERR_MAGIC, "no chunk magic where chunk %d of layer %d starts",
                    r->tokens_done, r->next_layer);
    if (get_u32(p + 44) != proto_crc32c(0, p, 44))
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
    r->payload_crc = get_u32(p + 40);
    r->cur = (proto_kv_layer){.layer = (int)layer, .pos0 = (int)pos0, .n_tokens = r->run_n,
                              .n_kv_heads = r->h.n_kv_heads, .head_dim = r->h.head_dim,
                              .dtype = r->h.dtype};
    r->fill = 0;
    r->st = R_PAYLOAD;
    return 0;
}

/* Checks and delivers the payload at p (r->L.total bytes). */
static int deliver(proto_kv_reader *r, const uint8_t *p)
{
    const proto_kv_payload_layout *L = &r->L;
    if (proto_crc32c(0, p, L->total) != r->payload_crc)
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
    proto_kv_chunk_info info = {.payload = p, .payload_bytes = L->total,
                                .payload_crc = r->payload_crc, .layout = *L};
    int rc = r->fn ? r->fn(r->ctx, &r->h, &r->cur, &info) : 0;
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

int proto_kv_reader_feed(proto_kv_reader *r, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n) {
        switch (r->st) {
        case R_HEADER:
        case R_CHUNK_HEADER: {
            size_t want = r->st == R_HEADER ? PROTO_KV_HEADER_BYTES : PROTO_KV_CHUNK_HEADER_BYTES;
            size_t k = want - r->hfill < n ? want - r->hfill : n;
            memcpy(r->hbuf + r->hfill, p, k);
            r->hfill += k;
            p += k;
            n -= k;
            if (r->hfill < want) break;
            r->hfill = 0;
            int rc = r->st == R_HEADER ? parse_header(r, r->hbuf) : parse_chunk_header(r, r->hbuf);
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

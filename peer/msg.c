/* peer/msg.c — see msg.h. Every read checks the bytes present before it reads them. */
#include "peer/msg.h"
#include <stdio.h>
#include <string.h>

static const uint8_t magic[4] = {'T', 'N', 'D', 'P'};

const char *peer_strerror(int st)
{
    switch (st) {
    case PEER_OK: return "ok";
    case PEER_ERR_PROTO: return "malformed or unexpected peer message";
    case PEER_ERR_AUTH: return "peer authentication failed";
    case PEER_ERR_IO: return "peer connection failed";
    case PEER_ERR_TIMEOUT: return "peer did not answer in time";
    case PEER_ERR_NOMEM: return "out of memory";
    case PEER_ERR_REFUSED: return "refused by the peer";
    case PEER_ERR_MODEL: return "the peer serves another model";
    }
    return "unknown peer status";
}

const char *peer_type_name(int t)
{
    static const char *names[] = {"?", "hello", "challenge", "auth", "welcome", "refuse", "ping",
                                  "info", "seq_new", "seq_free", "kv", "decode", "logits",
                                  "truncate", "warmup", "reply", "addr_req", "addr", "kv_tag",
                                  "decode_argmax", "tokens"};
    _Static_assert(sizeof names / sizeof names[0] == PEER_TYPE_LAST + 1, "a name per type");
    return t >= 1 && t <= PEER_TYPE_LAST ? names[t] : "?";
}

void peer_header_write(uint8_t out[PEER_HEADER_BYTES], int type, uint32_t length)
{
    memcpy(out, magic, 4);
    out[4] = PEER_VERSION & 0xff;
    out[5] = PEER_VERSION >> 8;
    out[6] = (uint8_t)type;
    out[7] = (uint8_t)(type >> 8);
    peer_wr32(out + 8, length);
    peer_wr32(out + 12, 0);
}

int peer_header_read(const uint8_t in[PEER_HEADER_BYTES], uint32_t max_payload, peer_header *out)
{
    if (memcmp(in, magic, 4)) return PEER_ERR_PROTO;
    if ((in[4] | in[5] << 8) != PEER_VERSION) return PEER_ERR_PROTO;
    int type = in[6] | in[7] << 8;
    if (type < 1 || type > PEER_TYPE_LAST) return PEER_ERR_PROTO;
    if (peer_rd32(in + 12) != 0) return PEER_ERR_PROTO;
    uint32_t len = peer_rd32(in + 8);
    if (len > max_payload) return PEER_ERR_PROTO;
    out->type = type;
    out->length = len;
    return PEER_OK;
}

/* ---------------------------------------------------------------- handshake */

int peer_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > PEER_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int peer_dev_name_valid(const char *s, char *err, size_t errlen)
{
    size_t n = strnlen(s, PEER_DEV_NAME_MAX + 1), i = 0;
    while (i < n && s[i] >= 0x21 && s[i] <= 0x7e) i++;
    if (n >= 1 && n <= PEER_DEV_NAME_MAX && i == n) return 1;
    if (err)
        snprintf(err, errlen,
                 "device '%.*s%s': a lent device's name is 1 to %d printable characters, no spaces",
                 (int)n, s, n > PEER_DEV_NAME_MAX ? "..." : "", PEER_DEV_NAME_MAX);
    return 0;
}

size_t peer_hello_write(uint8_t *out, const peer_hello *h, int with_mac)
{
    size_t o = 0, n = strlen(h->name);
    memcpy(out, h->nonce, PEER_NONCE);
    o += PEER_NONCE;
    if (with_mac) {
        memcpy(out + o, h->mac, PEER_MAC);
        o += PEER_MAC;
    }
    out[o++] = (uint8_t)n;
    memcpy(out + o, h->name, n);
    return o + n;
}

int peer_hello_read(const uint8_t *p, size_t n, int with_mac, peer_hello *out)
{
    size_t fixed = PEER_NONCE + (with_mac ? PEER_MAC : 0) + 1;
    if (n < fixed) return PEER_ERR_PROTO;
    size_t name_len = p[fixed - 1];
    if (name_len > PEER_NAME_MAX || n != fixed + name_len) return PEER_ERR_PROTO;
    memset(out, 0, sizeof *out);
    memcpy(out->nonce, p, PEER_NONCE);
    if (with_mac) memcpy(out->mac, p + PEER_NONCE, PEER_MAC);
    memcpy(out->name, p + fixed, name_len);
    out->name[name_len] = 0;
    /* every byte of the name counts: a NUL inside it would hide the rest */
    return strlen(out->name) == name_len && peer_name_valid(out->name) ? PEER_OK : PEER_ERR_PROTO;
}

/* info: fingerprint[32] vocab n_layers n_kv_heads head_dim n_devs (u32 each), then per device
 * name[PEER_DEV_NAME_BYTES] (NUL-padded, 64 since version 5) kind caps health max_batch (u32)
 * mem_total mem_free kv_bytes (u64) kv_block_tokens (u32), the curve: n (u32),
 * batch[PEER_CURVE_MAX] (u32), step_s[..] (f64), ctx s_per_pos (f64); doubles as their IEEE-754
 * bits, little-endian, unused points zero */
#define INFO_FIXED PEER_INFO_FIXED
#define DEV_BYTES PEER_DEV_INFO_BYTES
#define NAME_BYTES       PEER_DEV_NAME_BYTES
#define BLOCK_TOKENS_MAX 4096 /* proto/kv_wire.h's PROTO_KV_MAX_BLOCK_TOKENS */

static void wr_f64(uint8_t *p, double v)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    peer_wr64(p, b);
}
static double rd_f64(const uint8_t *p)
{
    uint64_t b = peer_rd64(p);
    double v;
    memcpy(&v, &b, 8);
    return v;
}

size_t peer_info_bytes(int n_devs)
{
    return INFO_FIXED + (size_t)n_devs * DEV_BYTES;
}

size_t peer_info_write(uint8_t *out, const peer_info *in)
{
    memcpy(out, in->fingerprint, 32);
    uint8_t *p = out + 32;
    peer_wr32(p, (uint32_t)in->vocab);
    peer_wr32(p + 4, (uint32_t)in->n_layers);
    peer_wr32(p + 8, (uint32_t)in->n_kv_heads);
    peer_wr32(p + 12, (uint32_t)in->head_dim);
    peer_wr32(p + 16, (uint32_t)in->n_devs);
    p += 20;
    for (int i = 0; i < in->n_devs; i++) {
        const peer_dev_info *d = &in->devs[i];
        memset(p, 0, NAME_BYTES);
        memcpy(p, d->name, strnlen(d->name, PEER_DEV_NAME_MAX));
        uint8_t *f = p + NAME_BYTES; /* the fixed fields after the name */
        peer_wr32(f, (uint32_t)d->kind);
        peer_wr32(f + 4, d->caps);
        peer_wr32(f + 8, (uint32_t)d->health);
        peer_wr32(f + 12, (uint32_t)d->max_batch);
        peer_wr64(f + 16, d->mem_total);
        peer_wr64(f + 24, d->mem_free);
        peer_wr64(f + 32, d->kv_bytes_per_token);
        peer_wr32(f + 40, (uint32_t)d->kv_block_tokens);
        uint8_t *q = f + 44;
        int nc = d->curve.n > 0 && d->curve.n <= PEER_CURVE_MAX ? d->curve.n : 0;
        memset(q, 0, DEV_BYTES - NAME_BYTES - 44);
        peer_wr32(q, (uint32_t)nc);
        for (int k = 0; k < nc; k++) {
            peer_wr32(q + 4 + 4 * k, (uint32_t)d->curve.batch[k]);
            wr_f64(q + 4 + 4 * PEER_CURVE_MAX + 8 * k, d->curve.step_s[k]);
        }
        if (nc) {
            wr_f64(q + 4 + 12 * PEER_CURVE_MAX, d->curve.ctx);
            wr_f64(q + 12 + 12 * PEER_CURVE_MAX, d->curve.s_per_pos);
        }
        p += DEV_BYTES;
    }
    return (size_t)(p - out);
}

/* 2^20: above every dimension of a Llama-family model (vocab 128K..256K, context 128K) */
#define DIM_MAX (1u << 20)

int peer_curve_check(const peer_curve *c)
{
    if (c->n < 0 || c->n > PEER_CURVE_MAX) return PEER_ERR_PROTO;
    for (int k = 0; k < c->n; k++) {
        if (c->batch[k] < 1 || c->batch[k] > PEER_MAX_BATCH || (k && c->batch[k] <= c->batch[k - 1]))
            return PEER_ERR_PROTO;
        if (!(c->step_s[k] > 0 && c->step_s[k] < 1000)) return PEER_ERR_PROTO; /* NaN fails too */
    }
    if (c->n && (!(c->ctx >= 0 && c->ctx < 1e9) || !(c->s_per_pos >= 0 && c->s_per_pos < 1)))
        return PEER_ERR_PROTO;
    return PEER_OK;
}

/* A curve as peer_info_read bounds it; unused points must be zero (one canonical form). */
static int curve_read(const uint8_t *q, peer_curve *c)
{
    uint32_t n = peer_rd32(q);
    if (n > PEER_CURVE_MAX) return PEER_ERR_PROTO;
    memset(c, 0, sizeof *c);
    c->n = (int)n;
    for (uint32_t k = 0; k < PEER_CURVE_MAX; k++) {
        const uint8_t *b = q + 4 + 4 * k, *t = q + 4 + 4 * PEER_CURVE_MAX + 8 * k;
        if (k >= n) {
            if (peer_rd32(b) || peer_rd64(t)) return PEER_ERR_PROTO;
            continue;
        }
        uint32_t bv = peer_rd32(b);
        c->batch[k] = bv > PEER_MAX_BATCH ? -1 : (int)bv;
        c->step_s[k] = rd_f64(t);
    }
    const uint8_t *x = q + 4 + 12 * PEER_CURVE_MAX, *y = x + 8;
    if (!n) return peer_rd64(x) || peer_rd64(y) ? PEER_ERR_PROTO : PEER_OK;
    c->ctx = rd_f64(x);
    c->s_per_pos = rd_f64(y);
    return peer_curve_check(c);
}

int peer_info_read(const uint8_t *p, size_t n, peer_info *out)
{
    if (n < INFO_FIXED) return PEER_ERR_PROTO;
    uint32_t nd = peer_rd32(p + 32 + 16);
    if (nd > PEER_MAX_DEVS || n != peer_info_bytes((int)nd)) return PEER_ERR_PROTO;
    memset(out, 0, sizeof *out);
    memcpy(out->fingerprint, p, 32);
    uint32_t dims[4];
    for (int i = 0; i < 4; i++) {
        dims[i] = peer_rd32(p + 32 + 4 * i);
        if (dims[i] == 0 || dims[i] > DIM_MAX) return PEER_ERR_PROTO;
    }
    out->vocab = (int)dims[0];
    out->n_layers = (int)dims[1];
    out->n_kv_heads = (int)dims[2];
    out->head_dim = (int)dims[3];
    out->n_devs = (int)nd;
    const uint8_t *q = p + INFO_FIXED;
    for (uint32_t i = 0; i < nd; i++, q += DEV_BYTES) {
        peer_dev_info *d = &out->devs[i];
        /* the name must end inside its field: at most PEER_DEV_NAME_MAX characters */
        if (q[NAME_BYTES - 1] != 0) return PEER_ERR_PROTO;
        _Static_assert(sizeof d->name == NAME_BYTES, "the field and the name hold the same");
        memcpy(d->name, q, NAME_BYTES);
        if (!peer_dev_name_valid(d->name, NULL, 0)) return PEER_ERR_PROTO;
        const uint8_t *f = q + NAME_BYTES;
        uint32_t kind = peer_rd32(f), health = peer_rd32(f + 8), mb = peer_rd32(f + 12);
        if (kind > 2 || health > 2 || mb == 0 || mb > PEER_MAX_BATCH) return PEER_ERR_PROTO;
        d->kind = (int)kind;
        d->caps = peer_rd32(f + 4) & PEER_CAPS_KNOWN;
        d->health = (int)health;
        d->max_batch = (int)mb;
        d->mem_total = peer_rd64(f + 16);
        d->mem_free = peer_rd64(f + 24);
        d->kv_bytes_per_token = peer_rd64(f + 32);
        if (d->mem_free > d->mem_total || d->kv_bytes_per_token == 0 ||
            d->kv_bytes_per_token > (1ull << 32))
            return PEER_ERR_PROTO;
        uint32_t bt = peer_rd32(f + 40);
        if (bt > BLOCK_TOKENS_MAX) return PEER_ERR_PROTO;
        d->kv_block_tokens = (int)bt;
        if (curve_read(f + 44, &d->curve)) return PEER_ERR_PROTO;
    }
    return PEER_OK;
}

/* ---------------------------------------------------------------- requests */

size_t peer_words_write(uint8_t *out, const peer_words *w, int n_words)
{
    for (int i = 0; i < n_words; i++) peer_wr32(out + 4 * i, w->w[i]);
    return 4 * (size_t)n_words;
}

int peer_words_read(const uint8_t *p, size_t n, int n_words, peer_words *out)
{
    if (n_words < 0 || n_words > 4 || n != 4 * (size_t)n_words) return PEER_ERR_PROTO;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n_words; i++) out->w[i] = peer_rd32(p + 4 * i);
    return PEER_OK;
}

void peer_kv_write_fixed(uint8_t out[PEER_KV_FIXED], const peer_kv *k)
{
    peer_wr32(out, k->dev);
    peer_wr32(out + 4, k->seq);
    peer_wr32(out + 8, k->producer_crc);
    peer_wr32(out + 12, k->flags);
}

int peer_kv_read(const uint8_t *p, size_t n, peer_kv *out)
{
    if (n <= PEER_KV_FIXED) return PEER_ERR_PROTO;
    out->dev = peer_rd32(p);
    out->seq = peer_rd32(p + 4);
    out->producer_crc = peer_rd32(p + 8);
    out->flags = peer_rd32(p + 12);
    if (out->flags & ~PEER_KV_RUN_START) return PEER_ERR_PROTO;
    out->bytes = p + PEER_KV_FIXED;
    out->n_bytes = n - PEER_KV_FIXED;
    out->crc_off = 0;
    out->crc = 0;
    return PEER_OK;
}

size_t peer_addr_write(uint8_t *out, uint64_t tag_base, const void *addr, size_t len)
{
    peer_wr64(out, tag_base);
    peer_wr32(out + 8, (uint32_t)len);
    memcpy(out + PEER_ADDR_FIXED, addr, len);
    return PEER_ADDR_FIXED + len;
}

int peer_addr_read(const uint8_t *p, size_t n, uint64_t *tag_base, const uint8_t **addr, size_t *len)
{
    if (n < PEER_ADDR_FIXED) return PEER_ERR_PROTO;
    uint32_t l = peer_rd32(p + 8);
    if (l < 1 || l > PEER_ADDR_MAX || n != PEER_ADDR_FIXED + (size_t)l) return PEER_ERR_PROTO;
    *tag_base = peer_rd64(p);
    *addr = p + PEER_ADDR_FIXED;
    *len = l;
    return PEER_OK;
}

void peer_kv_tag_write_fixed(uint8_t out[PEER_KV_TAG_FIXED], const uint8_t token[PEER_MAC],
                             const peer_kv *k)
{
    memcpy(out, token, PEER_MAC);
    peer_kv_write_fixed(out + PEER_MAC, k);
}

int peer_kv_tag_read(const uint8_t *p, size_t n, peer_kv *k)
{
    if (n <= PEER_KV_TAG_FIXED || n > PEER_KV_TAG_MAX) return PEER_ERR_PROTO;
    p += PEER_MAC; /* the token: the caller's to compare */
    k->dev = peer_rd32(p);
    k->seq = peer_rd32(p + 4);
    k->producer_crc = peer_rd32(p + 8);
    k->flags = peer_rd32(p + 12);
    if (k->flags & ~(PEER_KV_RUN_START | PEER_KV_TAG_AHEAD)) return PEER_ERR_PROTO;
    k->bytes = p + PEER_KV_FIXED;
    k->n_bytes = n - PEER_KV_TAG_FIXED;
    k->crc_off = 0;
    k->crc = 0;
    return PEER_OK;
}

size_t peer_decode_bytes(int n)
{
    return 8 + 8 * (size_t)n;
}

size_t peer_decode_write(uint8_t *out, uint32_t dev, int n, const uint32_t *seqs, const int32_t *ids)
{
    peer_wr32(out, dev);
    peer_wr32(out + 4, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        peer_wr32(out + 8 + 8 * i, seqs[i]);
        peer_wr32(out + 12 + 8 * i, (uint32_t)ids[i]);
    }
    return peer_decode_bytes(n);
}

int peer_decode_read(const uint8_t *p, size_t n, uint32_t *dev, int *n_seqs, uint32_t *seqs,
                     int32_t *ids)
{
    if (n < 8) return PEER_ERR_PROTO;
    uint32_t k = peer_rd32(p + 4);
    if (k < 1 || k > PEER_MAX_BATCH || n != peer_decode_bytes((int)k)) return PEER_ERR_PROTO;
    *dev = peer_rd32(p);
    *n_seqs = (int)k;
    for (uint32_t i = 0; i < k; i++) {
        seqs[i] = peer_rd32(p + 8 + 8 * i);
        ids[i] = (int32_t)peer_rd32(p + 12 + 8 * i);
    }
    return PEER_OK;
}

void peer_logits_write_fixed(uint8_t out[PEER_LOGITS_FIXED], int32_t status, int n, int vocab)
{
    peer_wr32(out, (uint32_t)status);
    peer_wr32(out + 4, (uint32_t)n);
    peer_wr32(out + 8, (uint32_t)vocab);
}

int peer_logits_read(const uint8_t *p, size_t len, int n, int vocab, int32_t *status,
                     const uint8_t **logits)
{
    if (len < PEER_LOGITS_FIXED) return PEER_ERR_PROTO;
    *status = (int32_t)peer_rd32(p);
    *logits = NULL;
    if (*status != 0) return len == PEER_LOGITS_FIXED ? PEER_OK : PEER_ERR_PROTO;
    if (peer_rd32(p + 4) != (uint32_t)n || peer_rd32(p + 8) != (uint32_t)vocab) return PEER_ERR_PROTO;
    if (len != PEER_LOGITS_FIXED + 4 * (size_t)n * (size_t)vocab) return PEER_ERR_PROTO;
    *logits = p + PEER_LOGITS_FIXED;
    return PEER_OK;
}

size_t peer_decode_argmax_bytes(int n)
{
    return peer_decode_bytes(n) + (size_t)n;
}

size_t peer_decode_argmax_write(uint8_t *out, uint32_t dev, int n, const uint32_t *seqs,
                                const int32_t *ids, const unsigned char *want)
{
    size_t o = peer_decode_write(out, dev, n, seqs, ids);
    for (int i = 0; i < n; i++) out[o + (size_t)i] = !want || want[i] ? 1 : 0;
    return peer_decode_argmax_bytes(n);
}

int peer_decode_argmax_read(const uint8_t *p, size_t n, uint32_t *dev, int *n_seqs, uint32_t *seqs,
                            int32_t *ids, unsigned char *want, int *n_want)
{
    if (n < 8) return PEER_ERR_PROTO;
    uint32_t k = peer_rd32(p + 4);
    if (k < 1 || k > PEER_MAX_BATCH || n != peer_decode_argmax_bytes((int)k)) return PEER_ERR_PROTO;
    if (peer_decode_read(p, peer_decode_bytes((int)k), dev, n_seqs, seqs, ids)) return PEER_ERR_PROTO;
    const uint8_t *w = p + peer_decode_bytes((int)k);
    *n_want = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (w[i] > 1) return PEER_ERR_PROTO;
        want[i] = w[i];
        *n_want += w[i];
    }
    return PEER_OK;
}

void peer_tokens_write_fixed(uint8_t out[PEER_TOKENS_FIXED], int32_t status, int n, int vocab, int n_want)
{
    peer_wr32(out, (uint32_t)status);
    peer_wr32(out + 4, (uint32_t)n);
    peer_wr32(out + 8, (uint32_t)vocab);
    peer_wr32(out + 12, (uint32_t)n_want);
}

int peer_tokens_read(const uint8_t *p, size_t len, int n, int vocab, int n_want, int32_t *status,
                     int32_t *argmax, const uint8_t **logits)
{
    if (len < PEER_TOKENS_FIXED) return PEER_ERR_PROTO;
    *status = (int32_t)peer_rd32(p);
    *logits = NULL;
    if (*status != 0) return len == PEER_TOKENS_FIXED ? PEER_OK : PEER_ERR_PROTO;
    if (n < 1 || n > PEER_MAX_BATCH || vocab < 1 || n_want < 0 || n_want > n ||
        peer_rd32(p + 4) != (uint32_t)n || peer_rd32(p + 8) != (uint32_t)vocab ||
        peer_rd32(p + 12) != (uint32_t)n_want)
        return PEER_ERR_PROTO;
    if (len != PEER_TOKENS_FIXED + 4 * (size_t)n + 4 * (size_t)n_want * (size_t)vocab) return PEER_ERR_PROTO;
    for (int i = 0; i < n; i++) {
        int32_t t = (int32_t)peer_rd32(p + PEER_TOKENS_FIXED + 4 * (size_t)i);
        if (t < -1 || t >= vocab) return PEER_ERR_PROTO;
        argmax[i] = t;
    }
    *logits = p + PEER_TOKENS_FIXED + 4 * (size_t)n;
    return PEER_OK;
}

int peer_reason_read(const uint8_t *p, size_t n, char *out)
{
    if (n > PEER_REASON_MAX) return PEER_ERR_PROTO;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e) return PEER_ERR_PROTO;
    memcpy(out, p, n);
    out[n] = 0;
    return PEER_OK;
}

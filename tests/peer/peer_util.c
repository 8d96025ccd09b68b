/* tests/peer/peer_util.c — see peer_util.h. */
#include "tests/peer/peer_util.h"
#include "devices/devices.h"
#include "tests/test.h"
#include "tests/util.h"
#include "peer/auth.h"
#include "peer/link.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int two_start(two *t, const char *device)
{
    return two_start_rx(t, device, 0);
}

int two_start_rx(two *t, const char *device, int rx_threads)
{
    memset(t, 0, sizeof *t);
    if (t_open(MODEL, device, &t->m, &t->lent)) return -1;
    if (accel_warmup(t->lent)) return -1;
    char err[256];
    peer_server_cfg sc = {"127.0.0.1:0", "nodeB", KEY, t->m, &t->lent, 1, rx_threads};
    if (peer_server_start(&sc, &t->srv, err, sizeof err)) {
        t_fail(__FILE__, __LINE__, "peer_server_start: %s", err);
        return -1;
    }
    snprintf(t->addr, sizeof t->addr, "127.0.0.1:%d", peer_server_port(t->srv));
    return 0;
}

int two_start_pf(two *t, int rx_threads, accel_dev **pf)
{
    if (two_start_rx(t, "cpu", rx_threads)) return -1;
    char err[256];
    accel_opts o = {.threads = 2};
    *pf = devices_open("cpu", t->m, &o, err, sizeof err);
    if (!*pf) t_fail(__FILE__, __LINE__, "devices_open(cpu): %s", err);
    return *pf ? 0 : -1;
}

int two_remote_at(const char *file, int line, const two *t, int transport, peer_node **node,
                  accel_dev **rd)
{
    char err[256];
    *node = NULL;
    *rd = NULL;
    if (peer_node_connect(t->addr, "nodeA", KEY, t->m, 5, node, err, sizeof err) != PEER_OK) {
        *node = NULL;
        t_fail(file, line, "peer_node_connect: %s", err);
        return -1;
    }
    peer_node_set_transport(*node, transport);
    *rd = devices_open_remote(*node, 0, t->m, NULL, err, sizeof err);
    if (!*rd) {
        t_fail(file, line, "devices_open_remote (transport %d): %s", transport, err);
        peer_node_free(*node);
        *node = NULL;
        return -1;
    }
    return 0;
}

int two_pair_open(two *t)
{
    memset(t, 0, sizeof *t);
    if (t_open(MODEL, "cpu", &t->m, &t->lent)) return -1;
    char err[256];
    accel_opts o = {.threads = 1};
    t->lent2 = devices_open("cpu", t->m, &o, err, sizeof err);
    if (!t->lent2) t_fail(__FILE__, __LINE__, "devices_open(cpu): %s", err);
    if (!t->lent2 || accel_warmup(t->lent) || accel_warmup(t->lent2)) return -1;
    return 0;
}

int two_pair_serve(two *t)
{
    char err[256];
    accel_dev *d[2] = {t->lent, t->lent2};
    peer_server_cfg sc = {"127.0.0.1:0", "nodeB", KEY, t->m, d, 2, 0};
    if (peer_server_start(&sc, &t->srv, err, sizeof err)) {
        t_fail(__FILE__, __LINE__, "peer_server_start: %s", err);
        return -1;
    }
    snprintf(t->addr, sizeof t->addr, "127.0.0.1:%d", peer_server_port(t->srv));
    return 0;
}

void two_stop(two *t)
{
    peer_server_stop(t->srv);
    if (t->lent2) accel_free(t->lent2);
    if (t->lent) accel_free(t->lent);
    model_free(t->m);
}

int keep_layer(void *ctx, const proto_kv_layer *c)
{
    kvcopy *k = ctx;
    if (k->n >= 16) return -1000;
    void *m;
    proto_kv_layer l = t_kv_copy(c, &m);
    if (!m) return -1000;
    k->crc[k->n] = proto_kv_payload_crc(c);
    k->mem[k->n] = m;
    k->l[k->n++] = l;
    return 0;
}

int prefill_kv(accel_dev *pf, const int32_t *ids, int n, kvcopy *kv, int32_t *first)
{
    accel_seq *ps;
    int vocab = accel_model(pf)->cfg.vocab;
    if (accel_seq_new(pf, n, &ps)) return -1;
    float *lg = malloc(sizeof(float) * (size_t)vocab);
    accel_kv_sink sink = {keep_layer, kv};
    accel_prefill_req pr = {.seq = ps, .ids = ids, .n = n, .logits = lg, .kv = &sink};
    int st = accel_prefill(pf, &pr);
    *first = t_argmax(lg, vocab);
    free(lg);
    accel_seq_free(pf, ps);
    return st;
}

int import_decode(accel_dev *d, const kvcopy *kv, int32_t first, int steps, int32_t *out)
{
    accel_seq *s;
    int vocab = accel_model(d)->cfg.vocab;
    int st = accel_seq_new(d, kv->l[0].n_tokens + steps + 1, &s);
    if (st) return st;
    for (int i = 0; i < kv->n && !st; i++) st = accel_kv_import_crc(d, s, &kv->l[i], kv->crc[i]);
    float *lg = malloc(sizeof(float) * (size_t)vocab);
    int32_t tok = first;
    for (int i = 0; i < steps && !st; i++) {
        st = accel_decode(d, 1, &s, &tok, lg);
        tok = out[i] = t_argmax(lg, vocab);
    }
    free(lg);
    accel_seq_free(d, s);
    return st;
}

int raw_open(const char *addr, raw *r)
{
    char err[256];
    memset(r, 0, sizeof *r);
    if (peer_conn_connect(addr, &r->c, err, sizeof err)) return -1;
    peer_hello hello = {0}, ch;
    if (peer_nonce(hello.nonce)) return -1;
    snprintf(hello.name, sizeof hello.name, "liar");
    uint8_t buf[PEER_MAX_PREAUTH];
    size_t n = peer_hello_write(buf, &hello, 0);
    peer_header h;
    const uint8_t *p;
    if (peer_conn_send(r->c, PEER_HELLO, buf, n, NULL, 0, 5) ||
        peer_conn_recv(r->c, PEER_MAX_PREAUTH, &h, &p, 5) || h.type != PEER_CHALLENGE ||
        peer_hello_read(p, h.length, 1, &ch))
        return -1;
    uint8_t mac[PEER_MAC];
    peer_mac((const uint8_t *)KEY, strlen(KEY), 'c', ch.nonce, hello.nonce, mac);
    peer_mac((const uint8_t *)KEY, strlen(KEY), 'k', hello.nonce, ch.nonce, r->token);
    if (peer_conn_send(r->c, PEER_AUTH, mac, sizeof mac, NULL, 0, 5) ||
        peer_conn_recv(r->c, (uint32_t)peer_info_bytes(PEER_MAX_DEVS), &h, &p, 5) ||
        h.type != PEER_WELCOME || peer_info_read(p, h.length, &r->info))
        return -1;
    const uint8_t *a;
    size_t len;
    if (peer_conn_send(r->c, PEER_ADDR_REQ, NULL, 0, NULL, 0, 5) ||
        peer_conn_recv(r->c, PEER_ADDR_FIXED + PEER_ADDR_MAX, &h, &p, 5) || h.type != PEER_ADDR ||
        peer_addr_read(p, h.length, &r->base, &a, &len) ||
        peer_conn_open_address(r->c, a, len, err, sizeof err))
        return -1;
    return 0;
}

int raw_reply(raw *r, double timeout_s)
{
    peer_header h;
    const uint8_t *p;
    peer_words w;
    int st = peer_conn_recv(r->c, PEER_KV_WINDOW * (PEER_HEADER_BYTES + 8), &h, &p, timeout_s);
    if (!st && (h.type != PEER_REPLY || peer_words_read(p, h.length, 2, &w))) st = PEER_ERR_PROTO;
    return st ? st : (int32_t)w.w[0];
}

int raw_seq_new(raw *r, uint32_t *seq)
{
    uint8_t w[8];
    peer_words pw = {{0, 512, 0, 0}}, out;
    peer_words_write(w, &pw, 2);
    peer_header h;
    const uint8_t *p;
    int st = peer_conn_send(r->c, PEER_SEQ_NEW, w, 8, NULL, 0, 5);
    if (!st) st = peer_conn_recv(r->c, 64, &h, &p, 5);
    if (!st && (h.type != PEER_REPLY || peer_words_read(p, h.length, 2, &out))) st = PEER_ERR_PROTO;
    if (!st && out.w[0]) st = (int32_t)out.w[0];
    if (!st) *seq = out.w[1];
    return st;
}

int raw_words(raw *r, int type, uint32_t a, uint32_t b, uint32_t *value)
{
    uint8_t w[8];
    peer_words pw = {{a, b, 0, 0}};
    peer_words_write(w, &pw, 2);
    peer_header h;
    const uint8_t *p;
    peer_words out;
    int st = peer_conn_send(r->c, type, w, 8, NULL, 0, 5);
    if (!st) st = peer_conn_recv(r->c, 4096, &h, &p, 5);
    if (!st && (h.type != PEER_REPLY || peer_words_read(p, h.length, 2, &out))) st = PEER_ERR_PROTO;
    if (st) return st;
    if (value) *value = out.w[1];
    return (int32_t)out.w[0];
}

int raw_tag(raw *r, const peer_kv *k, const uint8_t *b, size_t n)
{
    uint8_t *m = malloc(PEER_KV_TAG_FIXED + n);
    if (!m) return PEER_ERR_NOMEM;
    peer_kv_tag_write_fixed(m, r->token, k);
    memcpy(m + PEER_KV_TAG_FIXED, b, n);
    int st = peer_conn_tag_send(r->c, r->base + ++r->serial, m, PEER_KV_TAG_FIXED + n, 5);
    free(m);
    return st;
}

size_t raw_chunk_bytes(const model *m, const raw *r, int dev, const kvcopy *kv, int l, uint8_t *out,
                       size_t cap)
{
    const proto_kv_layer *c = &kv->l[l];
    int bt = r->info.devs[dev].kv_block_tokens;
    proto_kv_header hd = {.n_layers = m->cfg.n_layers,
                          .n_kv_heads = c->n_kv_heads,
                          .head_dim = c->head_dim,
                          .n_tokens = c->n_tokens,
                          .pos0 = c->pos0,
                          .dtype = c->dtype,
                          .block_tokens = bt > 0 ? bt : PROTO_KV_V1_BLOCK_TOKENS};
    memcpy(hd.fingerprint, m->fingerprint, 32);
    size_t o = 0;
    if (l == 0) {
        if (proto_kv_header_write(&hd, out) < 0) return 0;
        o = PROTO_KV_HEADER_BYTES;
    }
    long long w = proto_kv_chunk_write(&hd, c, out + o, cap - o);
    return w < 0 ? 0 : o + (size_t)w;
}

void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int decode_once(accel_dev *d, int vocab)
{
    accel_seq *s;
    int32_t id = 1;
    float *lg = malloc(sizeof(float) * (size_t)vocab);
    if (!lg) return ACCEL_ERR_NOMEM;
    int st = accel_seq_new(d, 16, &s);
    if (!st) {
        st = accel_decode(d, 1, &s, &id, lg);
        accel_seq_free(d, s);
    }
    free(lg);
    return st;
}

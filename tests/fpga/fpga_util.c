#include "tests/fpga/fpga_util.h"
#include "tests/util.h"
#include "cpu/kv_quant.h"
#include "fpga/flex_host.h"
#include "fpga/kernels/dec_math.h"
#include "model/ckpt/golden.h"
#include "tests/test.h"
#include "devices/devices.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void tf_cache_env(void)
{
    if (getenv("TANDEM_CACHE_DIR")) return;
    char dir[512];
    const char *b = getenv("BUILD");
    snprintf(dir, sizeof dir, "%s/fpga-test-cache", b && *b ? b : "build");
    setenv("TANDEM_CACHE_DIR", dir, 1);
}

int tf_open(const char *device, int wbits, model **m, accel_dev **d)
{
    return tf_open_dir(TF_MODEL, device, wbits, m, d);
}

int tf_open_dir(const char *dir, const char *device, int wbits, model **m, accel_dev **d)
{
    char err[512];
    tf_cache_env();
    *m = model_load(dir, err, sizeof err);
    if (!*m) {
        t_fail(__FILE__, __LINE__, "model_load: %s", err);
        return -1;
    }
    accel_opts o = {.weight_bits = wbits, .threads = 1};
    *d = devices_open(device, *m, &o, err, sizeof err);
    if (!*d) {
        t_fail(__FILE__, __LINE__, "devices_open(%s): %s", device, err);
        model_free(*m);
        return -1;
    }
    return 0;
}

double tf_kl(const float *p, const float *q, int n)
{
    double mp = p[0], mq = q[0], sp = 0, sq = 0, kl = 0;
    for (int i = 1; i < n; i++) {
        if (p[i] > mp) mp = p[i];
        if (q[i] > mq) mq = q[i];
    }
    for (int i = 0; i < n; i++) {
        sp += exp(p[i] - mp);
        sq += exp(q[i] - mq);
    }
    double lp = mp + log(sp), lq = mq + log(sq);
    for (int i = 0; i < n; i++) kl += exp(p[i] - lp) * ((p[i] - lp) - (q[i] - lq));
    return kl > 0 ? kl : 0;
}

static int capture(void *ctx, const proto_kv_layer *c)
{
    tf_kv *k = ctx;
    void *b;
    proto_kv_layer x = t_kv_copy(c, &b);
    proto_kv_layer *a = realloc(k->chunks, sizeof *a * (k->n_chunks + 1));
    void **bb = realloc(k->bufs, sizeof *bb * (k->n_chunks + 1));
    if (a) k->chunks = a;
    if (bb) k->bufs = bb;
    if (!b || !a || !bb) {
        free(b);
        return ACCEL_ERR_NOMEM;
    }
    k->chunks[k->n_chunks] = x;
    k->bufs[k->n_chunks++] = b;
    return 0;
}

int tf_cpu_kv(accel_dev *cpu, const int32_t *ids, int n, float *last_logits, tf_kv *out)
{
    memset(out, 0, sizeof *out);
    out->n_layers = accel_model(cpu)->cfg.n_layers;
    accel_seq *s;
    int st = accel_seq_new(cpu, n, &s);
    if (st) return st;
    accel_kv_sink sink = {capture, out};
    accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = last_logits, .kv = &sink};
    st = accel_prefill(cpu, &r);
    accel_seq_free(cpu, s);
    return st;
}

void tf_kv_free(tf_kv *k)
{
    for (int i = 0; i < k->n_chunks; i++) free(k->bufs[i]);
    free(k->bufs);
    free(k->chunks);
    memset(k, 0, sizeof *k);
}

int tf_import(accel_dev *d, accel_seq *s, const tf_kv *k)
{
    for (int i = 0; i < k->n_chunks; i++) {
        int st = accel_kv_import(d, s, &k->chunks[i]);
        if (st) return st;
    }
    return 0;
}

int tf_card_stats(accel_dev *d, fpga_emu_card_stats *st)
{
    fpga_card *c = fpga_dev_card(d);
    if (!c) return -1;
    return fpga_xrt_emu_card_stats(c->x, c->dev, st);
}

uint64_t tf_kv_bytes(accel_dev *d, int n)
{
    const model_config *c = &accel_model(d)->cfg;
    return (uint64_t)c->n_layers * n * c->n_kv_heads * 2 * (c->head_dim + 2);
}

uint64_t tf_tile_off(accel_dev *d, accel_seq *s, uint32_t l, uint32_t h, uint32_t pos,
                     uint32_t *ch)
{
    fpga_card *c = fpga_dev_card(d);
    fpga_dec_kvmap m;
    fpga_dev_seq_kvmap(d, s, &m);
    uint32_t part, tile, row;
    fpga_dec_pos_where(&c->desc, pos, &part, &tile, &row);
    uint32_t blk = tile / m.blk_tiles;
    uint32_t *ids = malloc(sizeof *ids * (blk + 1));
    for (uint32_t i = 0; i <= blk; i++) ids[i] = i < m.n_ids ? m.ids[i] : i;
    m.ids = ids;
    m.n_ids = blk + 1;
    *ch = fpga_dec_stream_ch(&c->desc, l, h, part);
    uint64_t off = fpga_dec_kv_tile_off(&c->desc, &m, l, h, part, tile);
    free(ids);
    return off;
}

int tf_read_kv(accel_dev *d, accel_seq *s, int n, uint8_t *out)
{
    fpga_card *c = fpga_dev_card(d);
    if (!c) return ACCEL_ERR_INVALID;
    const fpga_dec_desc *de = &c->desc;
    const uint32_t hd = de->head_dim;
    uint8_t *t = malloc(c->lo.tile_bytes);
    if (!t) return ACCEL_ERR_NOMEM;
    int st = 0;
    uint8_t *o = out;
    uint64_t last_off = UINT64_MAX;
    uint32_t last_ch = 0;
    for (uint32_t l = 0; !st && l < de->n_layers; l++)
        for (int p = 0; !st && p < n; p++)
            for (uint32_t h = 0; !st && h < de->n_kv_heads; h++) {
                uint32_t part, tile, row, ch;
                fpga_dec_pos_where(de, (uint32_t)p, &part, &tile, &row);
                uint64_t off = tf_tile_off(d, s, l, h, (uint32_t)(p - (int)row), &ch);
                if (off != last_off || ch != last_ch)
                    st = fpga_card_read_bank(c, (int)ch, off, t, c->lo.tile_bytes);
                last_off = off;
                last_ch = ch;
                memcpy(o, t + fpga_dec_tile_k(hd, row), hd);
                memcpy(o + hd, t + fpga_dec_tile_ks(hd, row), 2);
                memcpy(o + hd + 2, t + fpga_dec_tile_v(hd, row), hd);
                memcpy(o + 2 * hd + 2, t + fpga_dec_tile_vs(hd, row), 2);
                o += 2 * (hd + 2);
            }
    free(t);
    return st;
}

void tf_kv_flip_spec(accel_dev *d, accel_seq *s, int layer, int pos, int head, int byte, int bit,
                     uint64_t run, int bank0_arg, char *spec, size_t n)
{
    fpga_card *c = fpga_dev_card(d);
    accel_info info;
    accel_get_info(d, &info);
    const char *colon = strrchr(info.name, ':');
    int card = colon ? atoi(colon + 1) : 0;
    uint32_t part, tile, row, ch;
    fpga_dec_pos_where(&c->desc, (uint32_t)pos, &part, &tile, &row);
    uint64_t off = tf_tile_off(d, s, (uint32_t)layer, (uint32_t)head, (uint32_t)(pos - (int)row), &ch) +
                   fpga_dec_tile_k(c->desc.head_dim, row) + (uint64_t)byte;
    snprintf(spec, n, "card=%d,run=%llu,kind=bitflip,arg=%d,byte=%llu,bit=%d", card,
             (unsigned long long)run, bank0_arg + (int)ch, (unsigned long long)off, bit);
}

sparse_tls_seq *tf_tls_keys(accel_dev *d, accel_seq *s, const model *m, const sparse_tls_params *p,
                            const model_channels *ch, int n)
{
    const int L = m->cfg.n_layers, Hk = m->cfg.n_kv_heads, hd = m->cfg.head_dim;
    const size_t rec = 2ull * (hd + 2);
    uint8_t *kv = malloc(tf_kv_bytes(d, n));
    float *k = malloc(sizeof(float) * Hk * hd);
    sparse_tls_seq *ts = sparse_tls_seq_new(L, Hk, hd, p->channels, p->block_size, n, ch->idx);
    if (!kv || !k || !ts || tf_read_kv(d, s, n, kv)) {
        t_fail(__FILE__, __LINE__, "reading the card's KV");
        sparse_tls_seq_free(ts);
        ts = NULL;
    } else {
        for (int l = 0; l < L; l++)
            for (int t = 0; t < n; t++) {
                for (int g = 0; g < Hk; g++) {
                    const uint8_t *r = kv + (((size_t)l * n + t) * Hk + g) * rec;
                    uint16_t sc;
                    memcpy(&sc, r + hd, 2);
                    for (int c = 0; c < hd; c++)
                        k[(size_t)g * hd + c] = (float)(int8_t)r[c] * fpga_km_f16_to_f32(sc);
                }
                sparse_tls_put(ts, l, t, k);
            }
    }
    free(kv);
    free(k);
    return ts;
}

int32_t *tf_structured_ids(const model *m, int n)
{
    const char *cases[] = {"once", "lily", "sun", "unicode", "bos_only"};
    int32_t *ids = malloc(sizeof *ids * n);
    int k = 0;
    char err[256], path[256];
    while (ids && k < n)
        for (size_t c = 0; c < 5 && k < n; c++) {
            snprintf(path, sizeof path, "tests/data/golden/stories260K/%s.json", cases[c]);
            model_golden *g = model_golden_load(path, 512, err, sizeof err);
            if (!g) {
                free(ids);
                return NULL;
            }
            for (int i = 0; i < g->n_ids + g->n_greedy && k < n; i++)
                ids[k++] = (i < g->n_ids ? g->ids[i] : g->greedy_ids[i - g->n_ids]) % m->cfg.vocab;
            model_golden_free(g);
        }
    return ids;
}

int tf_read_striped(fpga_card *c, uint64_t ws_off, const fpga_pf_arr *a, uint64_t count,
                    uint8_t *out)
{
    for (uint64_t i = 0; i < count; i++) {
        int st = fpga_card_read_bank(c, (int)fpga_pf_item_ch(i), ws_off + fpga_pf_item_off(a, i),
                                     out + i * a->item, a->item);
        if (st) return st;
    }
    return 0;
}

int tf_pf_last_read(accel_dev *f, int n, tf_pf_last *w)
{
    const model *m = accel_model(f);
    const int H = m->cfg.n_heads, Hk = m->cfg.n_kv_heads, d = m->cfg.head_dim, nb = (n + 127) / 128;
    memset(w, 0, sizeof *w);
    fpga_pf_result res;
    uint64_t off;
    uint32_t rows, flags;
    if (fpga_dev_last_prefill(f, &res, &off, &rows, &flags) || rows != (uint32_t)n ||
        !(flags & FPGA_PF_F_SPARSE)) {
        t_fail(__FILE__, __LINE__, "no sparse prefill of %d rows in the workspace", n);
        return -1;
    }
    fpga_card *c = fpga_dev_card(f);
    fpga_pf_ws ws;
    fpga_pf_ws_of(&c->desc, rows, flags, &ws);
    *w = (tf_pf_last){.n = n, .H = H, .Hk = Hk, .d = d, .nb = nb};
    uint8_t *qp = malloc(ws.qf.item * H * nb), *kvp = malloc(ws.kvf.item * Hk * nb);
    w->rows = malloc(sizeof *w->rows * H * (nb + 1));
    w->q = malloc(sizeof(float) * n * H * d);
    w->k = malloc(sizeof(float) * n * Hk * d);
    w->v = malloc(sizeof(float) * n * Hk * d);
    int st = !qp || !kvp || !w->rows || !w->q || !w->k || !w->v ||
             tf_read_striped(c, off, &ws.qf, (uint64_t)H * nb, qp) ||
             tf_read_striped(c, off, &ws.kvf, (uint64_t)Hk * nb, kvp) ||
             fpga_card_read_bank(c, FPGA_PF_FLAT_ROWS, off + ws.flat, w->rows,
                                 sizeof *w->rows * H * (nb + 1));
    if (!st) {
        w->nnz = w->rows[H * (nb + 1) - 1];
        w->col = malloc(sizeof *w->col * (w->nnz + 1));
        st = !w->col || fpga_card_read_bank(c, FPGA_PF_FLAT_COL, off + ws.flat, w->col,
                                            sizeof *w->col * w->nnz);
    }
    if (!st) {
        fpga_flex_unpack_q(qp, n, H, d, w->q);
        fpga_flex_unpack_kv(kvp, n, Hk, d, w->k, w->v);
    }
    free(qp);
    free(kvp);
    if (!st) return 0;
    t_fail(__FILE__, __LINE__, "reading the prefill workspace");
    tf_pf_last_free(w);
    return -1;
}

int tf_pf_last_same_index(const tf_pf_last *w, const cpu_flex_index *ix)
{
    int same = ix->nnz == (int64_t)w->nnz;
    for (int i = 0; same && i < w->H * (w->nb + 1); i++) same = ix->row_ptr[i] == (int64_t)w->rows[i];
    for (uint32_t e = 0; same && e < w->nnz; e++) same = ix->col[e] == (int32_t)w->col[e];
    return same;
}

void tf_pf_last_free(tf_pf_last *w)
{
    free(w->q), free(w->k), free(w->v), free(w->rows), free(w->col);
    memset(w, 0, sizeof *w);
}

void tf_same_cost(const fpga_dec_cost *m, const fpga_emu_run_stats *e, const char *what)
{
    int chans = 0;
    for (int c = 0; c < FPGA_DEC_CH; c++)
        chans += m->chan_bytes[c] != e->chan_bytes[c] || m->chan_cmds[c] != e->chan_cmds[c];
    CHECK_MSG(chans == 0, "%s: %d channels differ", what, chans);
#define TF_SAME(f)                                                                                 \
    CHECK_MSG(m->f == e->f, "%s: " #f " %lld (model) vs %lld (emulator)", what, (long long)m->f,   \
              (long long)e->f)
    TF_SAME(bytes_read);
    TF_SAME(bytes_written);
    TF_SAME(mem_ns);
    TF_SAME(compute_ns);
    TF_SAME(stall_ns);
    TF_SAME(modeled_ns);
    TF_SAME(busiest);
#undef TF_SAME
}

accel_dev *tf_open_faulted(const model *m, const char *spec)
{
    char err[256];
    if (spec)
        setenv("TANDEM_EMU_FAULT", spec, 1);
    else
        unsetenv("TANDEM_EMU_FAULT");
    accel_opts o = {.weight_bits = 8, .threads = 1};
    tf_cache_env();
    accel_dev *d = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    if (!d) t_fail(__FILE__, __LINE__, "%s", err);
    return d;
}

int tf_health(accel_dev *d)
{
    accel_info i;
    accel_get_info(d, &i);
    return i.health;
}

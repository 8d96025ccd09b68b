/* fpga/tls_card.c — see tls_card.h. */
#include "fpga/tls_card.h"
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

int fpga_tls_open(fpga_tls *t, const model *m, const accel_opts *o, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    const char *spec = o->decode_sparse ? o->decode_sparse : getenv("TANDEM_DECODE_SPARSE");
    int chan_set = 0;
    char why[300];
    if (sparse_tls_parse(spec, m->cfg.head_dim, &t->p, &t->on, &chan_set, why, sizeof why)) {
        snprintf(err, errlen, "fpga: %s", why);
        return -1;
    }
    const int fits = m->cfg.sliding_window == 0 && m->cfg.head_dim <= TLS_K_MAX_HD &&
                     m->cfg.n_heads / m->cfg.n_kv_heads <= TLS_K_MAX_G;
    if (!t->on) {
        /* off: a usable channel file lets requests turn it on (accel_seq_decode_sparse) */
        char path[4200];
        if (o->sparse_channels) snprintf(path, sizeof path, "%s", o->sparse_channels);
        else model_channels_path(m->dir, path, sizeof path);
        if (!fits || access(path, R_OK) || model_channels_load(path, &t->ch, why, sizeof why))
            return 0;
        if (model_channels_match(&t->ch, &m->cfg, why, sizeof why)) {
            model_channels_free(&t->ch);
            memset(&t->ch, 0, sizeof t->ch);
            return 0;
        }
        t->p.channels = t->ch.r;
        t->avail = 1;
        return 0;
    }
    if (!fits) {
        snprintf(err, errlen, "fpga: decode_sparse asynctls: the card's selection unit takes "
                              "head_dim <= %d, <= %d query heads per KV head, no sliding window",
                 TLS_K_MAX_HD, TLS_K_MAX_G);
        return -1;
    }
    if (!fpga_tls_budgets_ok(&t->p)) {
        snprintf(err, errlen, "fpga: decode_sparse asynctls: token_budget and block_budget x "
                              "block_size must be <= %d on the card", TLS_K_MAX_CAND);
        return -1;
    }
    char path[4200];
    if (o->sparse_channels) snprintf(path, sizeof path, "%s", o->sparse_channels);
    else model_channels_path(m->dir, path, sizeof path);
    if (model_channels_load(path, &t->ch, why, sizeof why)) {
        snprintf(err, errlen, "fpga: decode_sparse asynctls needs the channel file (tandem "
                              "calibrate-channels --model DIR writes it): %s", why);
        return -1;
    }
    if (model_channels_match(&t->ch, &m->cfg, why, sizeof why) ||
        (chan_set && t->p.channels != t->ch.r)) {
        snprintf(err, errlen, "fpga: decode_sparse asynctls: %s: %s", path,
                 chan_set && t->p.channels != t->ch.r ? "channels differ from the file's" : why);
        model_channels_free(&t->ch);
        return -1;
    }
    t->p.channels = t->ch.r;
    t->avail = 1;
    return 0;
}

int fpga_tls_budgets_ok(const sparse_tls_params *p)
{
    return p->token_budget <= TLS_K_MAX_CAND &&
           (int64_t)p->block_budget * p->block_size <= TLS_K_MAX_CAND;
}

void fpga_tls_close(fpga_tls *t)
{
    if (t->avail) model_channels_free(&t->ch);
    memset(t, 0, sizeof *t);
}

void fpga_tls_io_of(const fpga_tls *t, const sparse_tls_params *p, uint32_t cap, int stagger,
                    int offload, fpga_tls_io *io)
{
    *io = (fpga_tls_io){.magic = FPGA_TLS_IO_MAGIC,
                        .block_size = (uint32_t)p->block_size,
                        .block_budget = (uint32_t)p->block_budget,
                        .token_budget = (uint32_t)p->token_budget,
                        .r = (uint32_t)p->channels,
                        .dense_layers = (uint32_t)p->dense_layers,
                        .dense_below = (uint32_t)(p->dense_below < 0 ? p->token_budget : p->dense_below),
                        .cap = cap,
                        .report = (uint32_t)t->report,
                        .stagger = (uint32_t)(stagger || offload),
                        .offload = (uint32_t)offload};
}

int fpga_tls_arena_init(fpga_card *c, const fpga_tls *t, const fpga_tls_io *io, uint64_t off)
{
    const fpga_dec_desc *d = &c->desc;
    fpga_tls_arena a;
    fpga_tls_arena_of(d, io, &a);
    const uint32_t r = (uint32_t)t->p.channels;
    uint8_t *buf = calloc(a.slots, a.ch_stride);
    if (!buf) return ACCEL_ERR_NOMEM;
    int st = 0;
    for (uint32_t ch = 0; !st && ch < FPGA_DEC_CH; ch++) {
        uint32_t used = 0;
        for (uint32_t l = 0; l < d->n_layers; l++)
            for (uint32_t g = 0; g < d->n_kv_heads; g++) {
                if (fpga_tls_group_ch(d, l, g) != ch) continue;
                const uint64_t slot = fpga_tls_group_slot(d, l, g);
                memcpy(buf + slot * a.ch_stride,
                       t->ch.idx + ((size_t)l * d->n_kv_heads + g) * r, 2ull * r);
                used = (uint32_t)slot + 1;
            }
        if (used) st = fpga_card_write_bank(c, (int)ch, off, buf, (size_t)used * a.ch_stride);
    }
    free(buf);
    return st;
}

int fpga_tls_prepare(fpga_card *c, const fpga_tls *t, const fpga_tls_io *p, uint64_t off,
                     uint32_t upto)
{
    if (t->report && fpga_dec_io_sel_off(&c->desc) + sizeof *p +
                             fpga_tls_report_bytes(&c->desc, p->token_budget) > c->io_bytes)
        return ACCEL_ERR_INVALID;
    int st = fpga_card_io_write(c, fpga_dec_io_sel_off(&c->desc), p, sizeof *p);
    if (st) return st;
    c->tls_off = off;
    c->tls_upto = upto;
    return 0;
}

int fpga_tls_read_report(fpga_card *c, const sparse_tls_params *p, uint32_t *table, float *q)
{
    const fpga_dec_desc *d = &c->desc;
    const uint64_t at = fpga_dec_io_sel_off(d) + sizeof(fpga_tls_io);
    const uint64_t tb = fpga_dec_io_sel_bytes(d, (uint32_t)p->token_budget);
    int st = fpga_card_io_read(c, at, table, tb);
    return st ? st : fpga_card_io_read(c, at + tb, q, 4ull * d->n_layers * d->n_heads * d->head_dim);
}

int fpga_tls_seq_arena(fpga_card *c, const fpga_tls *t, fpga_tls_io *io, fpga_kv_pool *pool,
                       uint64_t kv_base, uint64_t super_bytes, fpga_tls_arena_ref *ar,
                       uint32_t *upto, uint64_t *off)
{
    /* the arena's size follows the budgets and the pipeline's mode: a change takes a new one */
    const uint64_t key = (uint64_t)io->block_budget | (uint64_t)io->stagger << 32 |
                         (uint64_t)io->offload << 33 | (uint64_t)io->cap << 34;
    if (ar->k && ar->key != key) {
        fpga_kv_pool_give_supers(pool, ar->first, ar->k);
        ar->k = 0;
    }
    if (!ar->k) {
        fpga_tls_arena a;
        fpga_tls_arena_of(&c->desc, io, &a);
        int n = (int)((a.chan_bytes + super_bytes - 1) / super_bytes);
        int f = fpga_kv_pool_take_supers(pool, n);
        if (f < 0) return ACCEL_ERR_NOMEM;
        int st = fpga_tls_arena_init(c, t, io, kv_base + (uint64_t)f * super_bytes);
        if (st) {
            fpga_kv_pool_give_supers(pool, f, n);
            return st;
        }
        ar->first = f;
        ar->k = n;
        ar->key = key;
        *upto = 0;
        io->reset = 1;
    }
    *off = kv_base + (uint64_t)ar->first * super_bytes;
    return 0;
}

int fpga_tls_seq_prepare(fpga_card *c, const fpga_tls *t, fpga_tls_io *io, fpga_kv_pool *pool,
                         uint64_t kv_base, uint64_t super_bytes, fpga_tls_arena_ref *ar,
                         uint32_t *upto)
{
    uint64_t off;
    int st = fpga_tls_seq_arena(c, t, io, pool, kv_base, super_bytes, ar, upto, &off);
    return st ? st : fpga_tls_prepare(c, t, io, off, *upto);
}

void fpga_tls_counts_of(const fpga_tls_io *io, fpga_tls_step_counts *out)
{
    out->keys_read = (uint64_t)io->keys_read_hi << 32 | io->keys_read_lo;
    out->keys_total = (uint64_t)io->keys_total_hi << 32 | io->keys_total_lo;
    out->fetched = (uint64_t)io->fetched_hi << 32 | io->fetched_lo;
    out->chosen = (uint64_t)io->chosen_hi << 32 | io->chosen_lo;
}

int fpga_tls_step_read(fpga_card *c, fpga_tls_step_counts *out)
{
    fpga_tls_io io;
    int st = fpga_card_io_read(c, fpga_dec_io_sel_off(&c->desc), &io, sizeof io);
    if (st) return st;
    out->keys_read = (uint64_t)io.keys_read_hi << 32 | io.keys_read_lo;
    out->keys_total = (uint64_t)io.keys_total_hi << 32 | io.keys_total_lo;
    out->fetched = (uint64_t)io.fetched_hi << 32 | io.fetched_lo;
    out->chosen = (uint64_t)io.chosen_hi << 32 | io.chosen_lo;
    return 0;
}

void fpga_tls_offload_info(const fpga_tls *t, const fpga_dec_desc *d, uint64_t ddr_bytes,
                           accel_info *out)
{
    const sparse_tls_params *tp = &t->p;
    if (!t->avail || !ddr_bytes || !fpga_tls_offload_ok(d, (uint32_t)tp->block_size)) return;
    /* every channel keeps room for as many groups as the fullest (the same offsets) */
    const uint64_t groups = ((uint64_t)d->n_layers * d->n_kv_heads + FPGA_DEC_CH - 1) /
                            FPGA_DEC_CH * FPGA_DEC_CH;
    const uint64_t bs = (uint64_t)tp->block_size;
    const uint64_t dl = (uint64_t)tp->dense_layers < d->n_layers ? (uint64_t)tp->dense_layers
                                                                 : d->n_layers;
    const uint64_t tok = 2ull * (d->head_dim + 2); /* K and V of one position and head */
    out->offload_bytes = ddr_bytes;
    /* per position: fp32 max / min rows and the block -> slot word per block, the labels (r / 2
     * bytes, min and step), a dense layer's resident K and V */
    out->resident_per_token =
        groups * ((2ull * d->head_dim * 4 + 4) / bs + 1 + (uint64_t)tp->channels / 2 + 8) +
        dl * d->n_kv_heads * tok;
    /* per block of the budget: one level-1 block of every sparse layer's KV heads, and the
     * pipeline's two words (S_{t-1}, the slot's owner) per group */
    out->resident_per_block = (d->n_layers - dl) * d->n_kv_heads * bs * tok + groups * 8;
    out->resident_default_blocks = t->on ? tp->block_budget : 0;
}

/* fpga/card.c — the XRT side of one card (see card.h and fpga/BANKS.md). */
#include "fpga/card.h"
#include "proto/crc32c.h"
#include "scheduler/accel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kernel argument numbers (fpga/kernels/decode.c, kv_scatter.c, kv_check.c, kv_gather.c) */
enum { DEC_IO = 32, DEC_TOKEN, DEC_POS, DEC_KV_OFF, DEC_PART_TILES, DEC_N_IDS, DEC_SEL_CAP,
       DEC_TLS_OFF, DEC_TLS_UPTO, DEC_DDR0, DEC_DDR1, DEC_KV_TIER, DEC_HOST0 };
enum { SC_BANK0 = 4, SC_LAYER = 36, SC_POS0, SC_N, SC_PER, SC_KV_OFF, SC_PART_TILES, SC_STAGE_BYTES,
       SC_PAGED, SC_N_IDS, SC_DDR0, SC_DDR1, SC_HOST0 };
enum { CK_REPORT = 32, CK_POS0, CK_N, CK_KV_OFF, CK_PART_TILES, CK_REPORT_BYTES, CK_N_IDS,
       CK_DDR0, CK_DDR1, CK_KV_TIER, CK_HOST0 };
enum { PF_IO = 32, PF_MODE, PF_LAYER, PF_POS0, PF_N, PF_R0, PF_R1, PF_KV_OFF, PF_PART_TILES,
       PF_WS_OFF, PF_N_IDS };

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        int st_ = (expr);                                                                          \
        if (st_) return st_;                                                                       \
    } while (0)

#define FPGA_CARD_SEL_IO (64u << 10)

static int stage_channel(int g, int j)
{
    return 1 + g * FPGA_DEC_STAGE_SLOTS + j; /* HBM[1..8] */
}

static int fail_msg(int st, char *err, size_t errlen, const char *what)
{
    if (err) snprintf(err, errlen, "fpga: %s: %s", what, fpga_xrt_error());
    return st;
}

uint64_t fpga_card_pool_lo(const fpga_card *c)
{
    return c->lo.image_bytes;
}

uint64_t fpga_card_pool_hi(const fpga_card *c)
{
    return c->bank_bytes;
}

void fpga_card_close(fpga_card *c)
{
    if (!c->x) return;
    fpga_xrt *x = c->x;
    /* A hung run keeps its BOs alive inside XRT until the device closes; closing in any order
     * is fine (the emulator counts references, XRT does the same). */
    if (c->r_dec) fpga_xrt_run_close(x, c->r_dec);
    if (c->r_decb) fpga_xrt_run_close(x, c->r_decb);
    if (c->r_pf) fpga_xrt_run_close(x, c->r_pf);
    if (c->r_check) fpga_xrt_run_close(x, c->r_check);
    for (int g = 0; g < FPGA_CARD_GROUPS; g++)
        if (c->r_sc[g]) fpga_xrt_run_close(x, c->r_sc[g]);
    for (int i = 0; i < FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS; i++)
        if (c->r_gather[i]) fpga_xrt_run_close(x, c->r_gather[i]);
    for (int g = 0; g < FPGA_CARD_GROUPS; g++)
        for (int j = 0; j < FPGA_DEC_STAGE_SLOTS; j++)
            if (c->stage[g][j]) fpga_xrt_bo_free(x, c->stage[g][j]);
    if (c->io) fpga_xrt_bo_free(x, c->io);
    for (int i = 0; i < 3; i++)
        if (c->ddr[i]) fpga_xrt_bo_free(x, c->ddr[i]);
    for (int i = 0; i < FPGA_DEC_CH; i++)
        if (c->bank[i]) fpga_xrt_bo_free(x, c->bank[i]);
    if (c->k_dec) fpga_xrt_kernel_close(x, c->k_dec);
    if (c->k_decb) fpga_xrt_kernel_close(x, c->k_decb);
    if (c->k_sc) fpga_xrt_kernel_close(x, c->k_sc);
    if (c->k_gather) fpga_xrt_kernel_close(x, c->k_gather);
    if (c->k_check) fpga_xrt_kernel_close(x, c->k_check);
    if (c->k_pf) fpga_xrt_kernel_close(x, c->k_pf);
    if (c->dev) fpga_xrt_device_close(x, c->dev);
    fpga_xrt_free(x);
    memset(c, 0, sizeof *c);
}

static int open_objects(fpga_card *c, unsigned index, const char *xclbin, char *err, size_t errlen)
{
    fpga_xrt *x = c->x;
    int st;
    if ((st = fpga_xrt_device_open(x, index, &c->dev))) return fail_msg(st, err, errlen, "open");
    if (xclbin && (st = fpga_xrt_load_xclbin_file(x, c->dev, xclbin)))
        return fail_msg(st, err, errlen, "load xclbin");
    xuid_t uuid;
    if ((st = fpga_xrt_xclbin_uuid(x, c->dev, uuid))) return fail_msg(st, err, errlen, "xclbin uuid");
    if ((st = fpga_xrt_kernel_open(x, c->dev, uuid, "tandem_decode", 0, &c->k_dec)) ||
        (st = fpga_xrt_kernel_open(x, c->dev, uuid, "kv_scatter", 0, &c->k_sc)) ||
        (st = fpga_xrt_kernel_open(x, c->dev, uuid, "kv_gather", 0, &c->k_gather)) ||
        (st = fpga_xrt_kernel_open(x, c->dev, uuid, "kv_check", 0, &c->k_check)))
        return fail_msg(st, err, errlen, "kernels (tandem_decode, kv_scatter, kv_gather, kv_check)");
    uint32_t grp[FPGA_DEC_CH + 1];
    for (int i = 0; i <= FPGA_DEC_CH; i++)
        if ((st = fpga_xrt_kernel_group(x, c->k_dec, i, &grp[i])))
            return fail_msg(st, err, errlen, "decode kernel connectivity");
    /* FAST-Prefill's kernel is optional: an xclbin without it leaves the card decode-only */
    if (fpga_xrt_kernel_open(x, c->dev, uuid, "tandem_prefill", 0, &c->k_pf)) c->k_pf = NULL;
    for (int i = 0; c->k_pf && i <= FPGA_DEC_CH; i++) {
        uint32_t g;
        if (fpga_xrt_kernel_group(x, c->k_pf, i, &g) || g != grp[i]) {
            /* not on the decode kernel's banks: it could not reach the image */
            fpga_xrt_kernel_close(x, c->k_pf);
            c->k_pf = NULL;
        }
    }
    /* The batched decode kernel is optional too (an xclbin without it decodes one sequence per
     * run); its io records take FPGA_CARD_BATCH_IO at most, so a large vocabulary gets fewer
     * sequences per run (Llama-3-8B: 14 of 0.55 MiB) rather than a KV pool smaller by the
     * records' size in all 32 channels. */
    c->max_batch = 1;
    if (fpga_xrt_kernel_open(x, c->dev, uuid, "tandem_decode_batch", 0, &c->k_decb)) c->k_decb = NULL;
    for (int i = 0; c->k_decb && i <= FPGA_DEC_CH; i++) {
        uint32_t g;
        if (fpga_xrt_kernel_group(x, c->k_decb, i, &g) || g != grp[i]) {
            fpga_xrt_kernel_close(x, c->k_decb);
            c->k_decb = NULL;
        }
    }
    if (c->k_decb) {
        uint64_t fit = FPGA_CARD_BATCH_IO / fpga_dec_io_rec_bytes(&c->desc);
        c->max_batch = fit < 2 ? 1 : fit > FPGA_DEC_MAX_BATCH ? FPGA_DEC_MAX_BATCH : (int)fit;
        /* TANDEM_FPGA_BATCH=N caps it (1: one sequence per run, GLITCHES' FlightLLM cards) */
        const char *v = getenv("TANDEM_FPGA_BATCH");
        char *end;
        long b = v && *v ? strtol(v, &end, 10) : 0;
        if (v && *v && !*end && b >= 1 && b < c->max_batch) c->max_batch = (int)b;
    }
    /* Reserve at the top of every channel: the io block in HBM[0], a staging slot in HBM[1..8];
     * the same reserve everywhere keeps the KV pool at the same offsets in all channels. */
    c->io_bytes = fpga_dec_align(c->max_batch > 1 ? fpga_dec_io_batch_bytes(&c->desc, (uint32_t)c->max_batch)
                                                  : fpga_dec_io_bytes(&c->desc),
                                 4096);
    /* and room past the step's io for a selection table or AsyncTLS's parameters (and, for the
     * tests, its report) when there is no batch io there: a card of one sequence per run */
    if (c->io_bytes < fpga_dec_io_sel_off(&c->desc) + FPGA_CARD_SEL_IO)
        c->io_bytes = fpga_dec_io_sel_off(&c->desc) + FPGA_CARD_SEL_IO;
    uint64_t reserve = c->io_bytes > FPGA_CARD_STAGE_BYTES ? c->io_bytes : FPGA_CARD_STAGE_BYTES;
    c->bank_bytes = FPGA_U280_HBM_BANK_BYTES - reserve;
    if (c->lo.image_bytes > c->bank_bytes) {
        snprintf(err, errlen, "fpga: the weight image needs %llu MiB per pseudo-channel, a "
                              "channel has %llu MiB (try --weight-bits 4)",
                 (unsigned long long)(c->lo.image_bytes >> 20),
                 (unsigned long long)(c->bank_bytes >> 20));
        return ACCEL_ERR_NOMEM;
    }
    for (int i = 0; i < FPGA_DEC_CH; i++)
        if ((st = fpga_xrt_bo_alloc(x, c->dev, c->bank_bytes, XCL_BO_FLAGS_DEV_ONLY, grp[i],
                                    &c->bank[i])))
            return fail_msg(st, err, errlen, "bank BO");
    if ((st = fpga_xrt_bo_alloc(x, c->dev, c->io_bytes, 0, grp[DEC_IO], &c->io)))
        return fail_msg(st, err, errlen, "io BO");
    /* the DDR4 banks, whole (no host copy): offloaded sequences' KV (fpga/BANKS.md "DDR4") */
    for (int i = 0; i < 2; i++) {
        uint32_t g;
        if ((st = fpga_xrt_kernel_group(x, c->k_dec, DEC_DDR0 + i, &g)) ||
            (st = fpga_xrt_bo_alloc(x, c->dev, FPGA_DEC_DDR_BO_BYTES, XCL_BO_FLAGS_DEV_ONLY, g,
                                    &c->ddr[i])))
            return fail_msg(st, err, errlen, "DDR4 BO");
    }
    { /* host memory past DDR4, reached over PCIe (HOST[0]) */
        uint32_t g;
        if ((st = fpga_xrt_kernel_group(x, c->k_dec, DEC_HOST0, &g)) ||
            (st = fpga_xrt_bo_alloc(x, c->dev, FPGA_DEC_HOST_BO_BYTES, XCL_BO_FLAGS_HOST_ONLY, g,
                                    &c->ddr[2])))
            return fail_msg(st, err, errlen, "host memory BO");
    }
    for (int g = 0; g < FPGA_CARD_GROUPS; g++)
        for (int j = 0; j < FPGA_DEC_STAGE_SLOTS; j++) {
            void *h;
            if ((st = fpga_xrt_bo_alloc(x, c->dev, FPGA_CARD_STAGE_BYTES, 0,
                                        grp[stage_channel(g, j)], &c->stage[g][j])) ||
                (st = fpga_xrt_bo_map(x, c->stage[g][j], &h)))
                return fail_msg(st, err, errlen, "staging BO");
            c->stage_host[g][j] = h;
        }
    /* run handles with their buffers set once */
    if ((st = fpga_xrt_run_open(x, c->k_dec, &c->r_dec))) return fail_msg(st, err, errlen, "run");
    for (int i = 0; i < FPGA_DEC_CH && !st; i++) st = fpga_xrt_run_set_bo(x, c->r_dec, i, c->bank[i]);
    if (st || (st = fpga_xrt_run_set_bo(x, c->r_dec, DEC_IO, c->io)) ||
        (st = fpga_xrt_run_set_bo(x, c->r_dec, DEC_DDR0, c->ddr[0])) ||
        (st = fpga_xrt_run_set_bo(x, c->r_dec, DEC_DDR1, c->ddr[1])) ||
        (st = fpga_xrt_run_set_bo(x, c->r_dec, DEC_HOST0, c->ddr[2])))
        return fail_msg(st, err, errlen, "decode arguments");
    if (c->max_batch > 1) {
        if ((st = fpga_xrt_run_open(x, c->k_decb, &c->r_decb))) return fail_msg(st, err, errlen, "run");
        for (int i = 0; i < FPGA_DEC_CH && !st; i++)
            st = fpga_xrt_run_set_bo(x, c->r_decb, i, c->bank[i]);
        if (st || (st = fpga_xrt_run_set_bo(x, c->r_decb, DEC_IO, c->io)))
            return fail_msg(st, err, errlen, "batched decode arguments");
    }
    for (int g = 0; g < FPGA_CARD_GROUPS; g++) {
        if ((st = fpga_xrt_run_open(x, c->k_sc, &c->r_sc[g]))) return fail_msg(st, err, errlen, "run");
        for (int j = 0; j < FPGA_DEC_STAGE_SLOTS && !st; j++)
            st = fpga_xrt_run_set_bo(x, c->r_sc[g], j, c->stage[g][j]);
        for (int i = 0; i < FPGA_DEC_CH && !st; i++)
            st = fpga_xrt_run_set_bo(x, c->r_sc[g], SC_BANK0 + i, c->bank[i]);
        if (st || (st = fpga_xrt_run_set_u64(x, c->r_sc[g], SC_STAGE_BYTES, FPGA_CARD_STAGE_BYTES)) ||
            (st = fpga_xrt_run_set_bo(x, c->r_sc[g], SC_DDR0, c->ddr[0])) ||
            (st = fpga_xrt_run_set_bo(x, c->r_sc[g], SC_DDR1, c->ddr[1])) ||
            (st = fpga_xrt_run_set_bo(x, c->r_sc[g], SC_HOST0, c->ddr[2])))
            return fail_msg(st, err, errlen, "scatter arguments");
    }
    if ((st = fpga_xrt_run_open(x, c->k_check, &c->r_check))) return fail_msg(st, err, errlen, "run");
    for (int i = 0; i < FPGA_DEC_CH && !st; i++) st = fpga_xrt_run_set_bo(x, c->r_check, i, c->bank[i]);
    if (st || (st = fpga_xrt_run_set_bo(x, c->r_check, CK_REPORT, c->stage[0][0])) ||
        (st = fpga_xrt_run_set_u64(x, c->r_check, CK_REPORT_BYTES, FPGA_CARD_STAGE_BYTES)) ||
        (st = fpga_xrt_run_set_bo(x, c->r_check, CK_DDR0, c->ddr[0])) ||
        (st = fpga_xrt_run_set_bo(x, c->r_check, CK_DDR1, c->ddr[1])) ||
        (st = fpga_xrt_run_set_bo(x, c->r_check, CK_HOST0, c->ddr[2])))
        return fail_msg(st, err, errlen, "check arguments");
    if (c->k_pf) {
        if ((st = fpga_xrt_run_open(x, c->k_pf, &c->r_pf))) return fail_msg(st, err, errlen, "run");
        for (int i = 0; i < FPGA_DEC_CH && !st; i++)
            st = fpga_xrt_run_set_bo(x, c->r_pf, i, c->bank[i]);
        if (st || (st = fpga_xrt_run_set_bo(x, c->r_pf, PF_IO, c->io)))
            return fail_msg(st, err, errlen, "prefill arguments");
    }
    for (int i = 0; i < FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS; i++)
        if ((st = fpga_xrt_run_open(x, c->k_gather, &c->r_gather[i])) ||
            (st = fpga_xrt_run_set_bo(x, c->r_gather[i], 0, c->stage[i / 4][i % 4])))
            return fail_msg(st, err, errlen, "gather run");
    return 0;
}

int fpga_card_open(fpga_card *c, const char *lib, unsigned index, const char *xclbin,
                   const fpga_dec_desc *d, unsigned timeout_ms, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->x = fpga_xrt_new(lib, err, errlen);
    if (!c->x) return ACCEL_ERR_NOT_FOUND;
    c->emu = fpga_xrt_is_emulator(c->x);
    c->timeout_ms = timeout_ms;
    c->desc = *d;
    fpga_dec_layout_of(d, &c->lo);
    int st = open_objects(c, index, xclbin, err, errlen);
    if (st) fpga_card_close(c);
    return st;
}

/* Waits for a run; a timeout leaves it in flight. */
static int wait_run(fpga_card *c, xrtRunHandle r)
{
    return fpga_xrt_run_wait(c->x, r, c->timeout_ms, NULL);
}

/* Copy run i is seen finished: not busy any more, and the destination its caller kept out of
 * use while the run might still write it (a timed-out copy's tag) goes back to the caller. */
static void gather_done(fpga_card *c, int i)
{
    uint64_t tag = c->gather_tag[i];
    c->gather_busy[i] = 0;
    c->gather_tag[i] = 0;
    if (tag && c->on_copy_landed) c->on_copy_landed(c->copy_arg, tag);
}

/* Waits for copy run i; one that timed out stays busy, for check_stuck, and keeps tag. */
static int wait_gather(fpga_card *c, int i, uint64_t tag)
{
    int st = wait_run(c, c->r_gather[i]);
    if (st != ACCEL_ERR_TIMEOUT) {
        gather_done(c, i);
        return st;
    }
    c->gather_busy[i] = 1;
    c->gather_tag[i] = tag;
    return st;
}

int fpga_card_copy_kept(const fpga_card *c, uint64_t tag)
{
    for (int i = 0; tag && i < FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS; i++)
        if (c->gather_busy[i] && c->gather_tag[i] == tag) return 1;
    return 0;
}

int fpga_card_upload(fpga_card *c, const uint8_t *image, char *err, size_t errlen)
{
    const int slots = FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS;
    int slot = 0, st = 0;
    for (int ch = 0; ch < FPGA_DEC_CH && !st; ch++) {
        const uint8_t *src = image + (uint64_t)ch * c->lo.image_bytes;
        for (uint64_t off = 0; off < c->lo.image_bytes && !st; off += FPGA_CARD_STAGE_BYTES) {
            uint64_t n = c->lo.image_bytes - off < FPGA_CARD_STAGE_BYTES ? c->lo.image_bytes - off
                                                                          : FPGA_CARD_STAGE_BYTES;
            xrtRunHandle r = c->r_gather[slot];
            if (c->gather_busy[slot] && (st = wait_run(c, r))) break;
            gather_done(c, slot);
            memcpy(c->stage_host[slot / 4][slot % 4], src + off, n);
            if ((st = fpga_xrt_bo_sync(c->x, c->stage[slot / 4][slot % 4], XCL_BO_SYNC_BO_TO_DEVICE,
                                       n, 0)) ||
                (st = fpga_xrt_run_set_bo(c->x, r, 0, c->stage[slot / 4][slot % 4])) ||
                (st = fpga_xrt_run_set_bo(c->x, r, 1, c->bank[ch])) ||
                (st = fpga_xrt_run_set_u64(c->x, r, 2, 0)) ||
                (st = fpga_xrt_run_set_u64(c->x, r, 3, off)) ||
                (st = fpga_xrt_run_set_u64(c->x, r, 4, n)) || (st = fpga_xrt_run_start(c->x, r)))
                break;
            c->gather_busy[slot] = 1;
            slot = (slot + 1) % slots;
        }
    }
    for (int i = 0; i < slots; i++) {
        if (!c->gather_busy[i]) continue;
        int s = wait_run(c, c->r_gather[i]);
        if (!st) st = s;
        if (s != ACCEL_ERR_TIMEOUT) gather_done(c, i);
    }
    if (st) return fail_msg(st, err, errlen, "weight upload");
    return 0;
}

static int in_flight(fpga_card *c, xrtRunHandle r)
{
    enum ert_cmd_state s = fpga_xrt_run_state(c->x, r);
    return s == ERT_CMD_STATE_QUEUED || s == ERT_CMD_STATE_RUNNING || s == ERT_CMD_STATE_NEW ||
           s == ERT_CMD_STATE_SUBMITTED;
}

/* A decode, prefill, check or copy run that timed out earlier: still running means the card is
 * stuck (a copy still running may yet write a block the host has given back). */
static int check_stuck(fpga_card *c)
{
    for (int i = 0; i < FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS; i++) {
        if (!c->gather_busy[i]) continue;
        if (in_flight(c, c->r_gather[i])) return ACCEL_ERR_DEVICE;
        gather_done(c, i);
    }
    if (c->dec_in_flight) {
        if (in_flight(c, c->r_dec) || (c->r_decb && in_flight(c, c->r_decb))) return ACCEL_ERR_DEVICE;
        c->dec_in_flight = 0;
    }
    if (c->pf_in_flight) {
        if (in_flight(c, c->r_pf)) return ACCEL_ERR_DEVICE;
        c->pf_in_flight = 0;
    }
    if (c->check_in_flight) {
        if (in_flight(c, c->r_check)) return ACCEL_ERR_DEVICE;
        c->check_in_flight = 0;
    }
    return 0;
}

/* The block table of a paged sequence into io (where the decode and prefill kernels read it). */
static int write_table(fpga_card *c, const uint32_t *ids, uint32_t n_ids)
{
    if (!n_ids) return 0;
    if (n_ids > FPGA_DEC_MAX_BLOCKS) return ACCEL_ERR_INVALID;
    uint64_t off = fpga_dec_io_table_off(&c->desc);
    TRY(fpga_xrt_bo_write(c->x, c->io, ids, 4ull * n_ids, off));
    return fpga_xrt_bo_sync(c->x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, 4ull * n_ids, off);
}

int fpga_card_select(fpga_card *c, const uint32_t *table, uint32_t cap)
{
    if (!cap || cap > FPGA_DEC_MAX_POS ||
        fpga_dec_io_sel_off(&c->desc) + fpga_dec_io_sel_bytes(&c->desc, cap) > c->io_bytes)
        return ACCEL_ERR_INVALID;
    c->sel = table;
    c->sel_cap = cap;
    return 0;
}

int fpga_card_step(fpga_card *c, const float *x0, const float *cs, const float *sn,
                   uint32_t token, uint32_t pos, uint64_t kv_off, uint32_t part_tiles,
                   const uint32_t *ids, uint32_t n_ids, float *logits)
{
    fpga_xrt *x = c->x;
    const fpga_dec_desc *d = &c->desc;
    TRY(check_stuck(c));
    TRY(write_table(c, ids, n_ids));
    const uint32_t *sel = c->sel, sel_cap = c->sel_cap;
    c->sel = NULL;
    c->sel_cap = 0;
    if (sel_cap) {
        /* the kernel checks it too; a bad table is the caller's error, not the card's */
        for (uint64_t i = 0; i < (uint64_t)d->n_layers * d->n_kv_heads; i++) {
            const uint32_t *list = sel + i * (1ull + sel_cap);
            if (list[0] == FPGA_DEC_SEL_DENSE) continue;
            if (list[0] > sel_cap) return ACCEL_ERR_INVALID;
            for (uint32_t e = 0; e < list[0]; e++)
                if (list[1 + e] > pos || (e && list[1 + e] <= list[e])) return ACCEL_ERR_INVALID;
        }
        uint64_t off = fpga_dec_io_sel_off(d), n = fpga_dec_io_sel_bytes(d, sel_cap);
        TRY(fpga_xrt_bo_write(x, c->io, sel, n, off));
        TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, n, off));
    }
    uint64_t so = fpga_dec_io_step_off();
    TRY(fpga_xrt_bo_write(x, c->io, x0, 4ull * d->hidden, so));
    TRY(fpga_xrt_bo_write(x, c->io, cs, 2ull * d->head_dim, so + 4ull * d->hidden));
    TRY(fpga_xrt_bo_write(x, c->io, sn, 2ull * d->head_dim, so + 4ull * d->hidden + 2ull * d->head_dim));
    TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, fpga_dec_io_step_bytes(d), so));
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_TOKEN, token));
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_POS, pos));
    TRY(fpga_xrt_run_set_u64(x, c->r_dec, DEC_KV_OFF, kv_off));
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_PART_TILES, part_tiles));
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_N_IDS, n_ids));
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_SEL_CAP, sel_cap));
    const uint64_t tls_off = c->tls_off;
    c->tls_off = 0;
    TRY(fpga_xrt_run_set_u64(x, c->r_dec, DEC_TLS_OFF, tls_off));
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_TLS_UPTO, c->tls_upto));
    const uint32_t tier = c->kv_tier;
    c->kv_tier = 0;
    TRY(fpga_xrt_run_set_u32(x, c->r_dec, DEC_KV_TIER, tier));
    TRY(fpga_xrt_run_start(x, c->r_dec));
    int st = wait_run(c, c->r_dec);
    if (st == ACCEL_ERR_TIMEOUT) c->dec_in_flight = 1;
    if (st) return st;
    if (c->emu && fpga_xrt_emu_run_stats(x, c->r_dec, &c->last_dec) == 0) {
        c->dec_runs++;
        c->dec_modeled_ns += c->last_dec.modeled_ns;
    }
    /* status and logits come back with one sync (the step input between them is tiny) */
    uint64_t lo_off = fpga_dec_io_logits_off(d);
    TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, lo_off + 4ull * d->vocab, 0));
    uint32_t status[4];
    TRY(fpga_xrt_bo_read(x, c->io, status, sizeof status, 0));
    if (status[0] != FPGA_DEC_STATUS_MAGIC || status[1] != token || status[2] != pos ||
        status[3] != d->n_layers)
        return ACCEL_ERR_DEVICE; /* the kernel did not finish this step */
    return fpga_xrt_bo_read(x, c->io, logits, 4ull * d->vocab, lo_off);
}

int fpga_card_step_batch(fpga_card *c, int n, const fpga_card_bseq *q, uint64_t kv_off,
                         uint32_t blk_tiles, float *logits)
{
    fpga_xrt *x = c->x;
    const fpga_dec_desc *d = &c->desc;
    if (n < 1 || n > c->max_batch || !c->r_decb) return ACCEL_ERR_INVALID;
    TRY(check_stuck(c));
    const uint64_t sb = fpga_dec_io_step_bytes(d), lg = fpga_dec_io_rec_logits(d);
    for (int i = 0; i < n; i++) {
        uint64_t r = fpga_dec_io_rec_off(d, (uint32_t)i);
        uint32_t head[7] = {q[i].token, q[i].pos, q[i].n_ids, 0, (uint32_t)q[i].tls_off,
                            (uint32_t)(q[i].tls_off >> 32), q[i].tls_upto};
        if (!q[i].n_ids || q[i].n_ids > FPGA_DEC_MAX_BLOCKS || (q[i].tls_off && !q[i].tls))
            return ACCEL_ERR_INVALID;
        TRY(fpga_xrt_bo_write(x, c->io, head, sizeof head, r));
        if (q[i].tls_off) {
            uint64_t t = r + fpga_dec_io_rec_tls(d);
            TRY(fpga_xrt_bo_write(x, c->io, q[i].tls, sizeof *q[i].tls, t));
            TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, sizeof *q[i].tls, t));
        }
        TRY(fpga_xrt_bo_write(x, c->io, q[i].x0, 4ull * d->hidden, r + 64));
        TRY(fpga_xrt_bo_write(x, c->io, q[i].cs, 2ull * d->head_dim, r + 64 + 4ull * d->hidden));
        TRY(fpga_xrt_bo_write(x, c->io, q[i].sn, 2ull * d->head_dim,
                              r + 64 + 4ull * d->hidden + 2ull * d->head_dim));
        TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, 64 + sb, r));
        uint64_t t = r + fpga_dec_io_rec_table(d);
        TRY(fpga_xrt_bo_write(x, c->io, q[i].ids, 4ull * q[i].n_ids, t));
        TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, 4ull * q[i].n_ids, t));
    }
    TRY(fpga_xrt_run_set_u32(x, c->r_decb, DEC_IO + 1, (uint32_t)n));
    TRY(fpga_xrt_run_set_u64(x, c->r_decb, DEC_IO + 2, kv_off));
    TRY(fpga_xrt_run_set_u32(x, c->r_decb, DEC_IO + 3, blk_tiles));
    TRY(fpga_xrt_run_start(x, c->r_decb));
    int st = wait_run(c, c->r_decb);
    if (st == ACCEL_ERR_TIMEOUT) c->dec_in_flight = 1;
    if (st) return st;
    if (c->emu && fpga_xrt_emu_run_stats(x, c->r_decb, &c->last_decb) == 0) {
        c->decb_runs++;
        c->decb_seqs += (uint64_t)n;
        c->decb_modeled_ns += c->last_decb.modeled_ns;
    }
    uint32_t status[4];
    TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, sizeof status, 0));
    TRY(fpga_xrt_bo_read(x, c->io, status, sizeof status, 0));
    if (status[0] != FPGA_DEC_BATCH_MAGIC || status[1] != (uint32_t)n || status[2] != d->n_layers)
        return ACCEL_ERR_DEVICE; /* the kernel did not finish this step */
    for (int i = 0; i < n; i++) {
        uint64_t r = fpga_dec_io_rec_off(d, (uint32_t)i);
        uint32_t head[4];
        /* the record's head and logits in one sync (the step input between them is small) */
        TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, lg + 4ull * d->vocab, r));
        TRY(fpga_xrt_bo_read(x, c->io, head, sizeof head, r));
        if (head[0] != q[i].token || head[1] != q[i].pos ||
            head[3] != (FPGA_DEC_STATUS_MAGIC ^ q[i].pos))
            return ACCEL_ERR_DEVICE;
        TRY(fpga_xrt_bo_read(x, c->io, logits + (uint64_t)i * d->vocab, 4ull * d->vocab, r + lg));
        if (q[i].tls_off && q[i].tls_back) {
            uint64_t t = r + fpga_dec_io_rec_tls(d);
            TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, sizeof *q[i].tls_back, t));
            TRY(fpga_xrt_bo_read(x, c->io, q[i].tls_back, sizeof *q[i].tls_back, t));
        }
    }
    return 0;
}

int fpga_card_piece_tokens_for(const fpga_dec_desc *d)
{
    /* the most positions one slot holds (its tail takes the block table and the report) */
    uint32_t lo = 1, hi = FPGA_CARD_STAGE_BYTES;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (fpga_dec_stage_section(mid, d->n_kv_heads, d->head_dim, 4) <=
            FPGA_CARD_STAGE_BYTES - FPGA_DEC_STAGE_TAIL)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (int)lo * FPGA_DEC_STAGE_SLOTS;
}

int fpga_card_piece_tokens(const fpga_card *c)
{
    int n = fpga_card_piece_tokens_for(&c->desc);
    return c->piece_limit > 0 && c->piece_limit < n ? c->piece_limit : n;
}

/* Waits for group g's piece and checks the kernel's report. */
static int finish_group(fpga_card *c, int g)
{
    fpga_card_pending *p = &c->pend[g];
    if (!p->busy) return 0;
    /* timed out before and still running: stuck, as check_stuck says of every other run (a
     * second wait would only time out again, and a hung piece then never failed the card) */
    if (p->timed_out && in_flight(c, c->r_sc[g])) return ACCEL_ERR_DEVICE;
    int st = wait_run(c, c->r_sc[g]);
    if (st == ACCEL_ERR_TIMEOUT) { /* still in flight: stays busy */
        p->timed_out = 1;
        return st;
    }
    p->busy = p->timed_out = 0;
    if (st) return st;
    if (c->emu) {
        fpga_emu_run_stats rs;
        if (fpga_xrt_emu_run_stats(c->x, c->r_sc[g], &rs) == 0) {
            c->sc_runs++;
            c->sc_modeled_ns += rs.modeled_ns;
            c->sc_par_jobs += rs.par_jobs;
        }
    }
    uint32_t rep[16];
    TRY(fpga_xrt_bo_sync(c->x, c->stage[g][0], XCL_BO_SYNC_BO_FROM_DEVICE, 64,
                         FPGA_CARD_STAGE_BYTES - 64));
    TRY(fpga_xrt_bo_read(c->x, c->stage[g][0], rep, sizeof rep, FPGA_CARD_STAGE_BYTES - 64));
    if (rep[0] != FPGA_DEC_STAGE_REPORT_MAGIC || rep[1] != p->layer || rep[2] != p->pos0 ||
        rep[3] != p->n)
        return ACCEL_ERR_DEVICE;
    for (uint32_t j = 0; j < p->nslots; j++)
        if (rep[4 + j] != p->crc[j]) return ACCEL_ERR_CORRUPT; /* bytes changed on the way */
    return 0;
}

int fpga_card_scatter(fpga_card *c, const proto_kv_layer *ch, int t0, int n, uint64_t kv_off,
                      uint32_t part_tiles, int paged, const uint32_t *ids, uint32_t n_ids,
                      void *owner, void **failed_owner)
{
    if (paged && (!n_ids || n_ids > FPGA_DEC_SCATTER_IDS)) return ACCEL_ERR_INVALID;
    const uint32_t H = c->desc.n_kv_heads, hd = c->desc.head_dim;
    int g = c->next_group;
    fpga_card_pending *p = &c->pend[g];
    *failed_owner = NULL;
    void *prev = p->owner;
    int st = finish_group(c, g);
    if (st) {
        *failed_owner = prev;
        /* a corrupt earlier piece fails its own sequence and this piece goes on; anything
         * else is the card's problem */
        if (st != ACCEL_ERR_CORRUPT || prev == owner) return st;
    }
    uint32_t per = (uint32_t)(n + FPGA_DEC_STAGE_SLOTS - 1) / FPGA_DEC_STAGE_SLOTS;
    *p = (fpga_card_pending){.owner = owner, .layer = (uint32_t)ch->layer,
                             .pos0 = (uint32_t)(ch->pos0 + t0), .n = (uint32_t)n};
    for (uint32_t j = 0; j < FPGA_DEC_STAGE_SLOTS; j++) {
        uint32_t lo = j * per;
        if (lo >= (uint32_t)n) break;
        uint32_t cnt = (uint32_t)n - lo < per ? (uint32_t)n - lo : per;
        uint8_t *s = c->stage_host[g][j];
        uint64_t total = fpga_dec_stage_section(cnt, H, hd, 4);
        uint64_t t = (uint64_t)t0 + lo;
        memset(s, 0, total);
        memcpy(s + fpga_dec_stage_section(cnt, H, hd, 0), ch->k + t * H * hd, (size_t)cnt * H * hd);
        memcpy(s + fpga_dec_stage_section(cnt, H, hd, 1), ch->v + t * H * hd, (size_t)cnt * H * hd);
        memcpy(s + fpga_dec_stage_section(cnt, H, hd, 2), ch->k_scale + t * H, 2ull * cnt * H);
        memcpy(s + fpga_dec_stage_section(cnt, H, hd, 3), ch->v_scale + t * H, 2ull * cnt * H);
        p->crc[j] = proto_crc32c(0, s, total);
        p->nslots = j + 1;
        TRY(fpga_xrt_bo_sync(c->x, c->stage[g][j], XCL_BO_SYNC_BO_TO_DEVICE, total, 0));
    }
    if (paged) { /* the piece's block table at slot 0's tail */
        const uint64_t off = fpga_dec_stage_table_off(FPGA_CARD_STAGE_BYTES);
        memcpy(c->stage_host[g][0] + off, ids, 4ull * n_ids);
        TRY(fpga_xrt_bo_sync(c->x, c->stage[g][0], XCL_BO_SYNC_BO_TO_DEVICE, 4ull * n_ids, off));
    }
    xrtRunHandle r = c->r_sc[g];
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_LAYER, p->layer));
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_POS0, p->pos0));
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_N, p->n));
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_PER, per));
    TRY(fpga_xrt_run_set_u64(c->x, r, SC_KV_OFF, kv_off));
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_PART_TILES, part_tiles));
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_PAGED, (uint32_t)paged)); /* 2: the DDR4 pool */
    TRY(fpga_xrt_run_set_u32(c->x, r, SC_N_IDS, paged ? n_ids : 0));
    TRY(fpga_xrt_run_start(c->x, r));
    p->busy = 1;
    c->next_group = (g + 1) % FPGA_CARD_GROUPS;
    return st; /* 0, or the failure of an older piece of another sequence (*failed_owner) */
}

/* How much a piece's failure says about the card: corrupt bytes are the piece's own; a timeout
 * (the piece may still be writing) or a failed run is the card's, and must not hide behind one. */
static int severity(int st)
{
    return st == ACCEL_ERR_CORRUPT ? 1 : st == ACCEL_ERR_TIMEOUT ? 2 : 3;
}

int fpga_card_drain(fpga_card *c, void **failed_owner, void (*on_fail)(void *owner, int st))
{
    int worst = 0;
    *failed_owner = NULL;
    /* oldest group first */
    for (int k = 0; k < FPGA_CARD_GROUPS; k++) {
        int g = (c->next_group + k) % FPGA_CARD_GROUPS;
        void *owner = c->pend[g].owner;
        int st = finish_group(c, g);
        if (!st) continue;
        if (worst && severity(st) <= severity(worst)) {
            if (on_fail) on_fail(owner, st);
            continue;
        }
        if (worst && on_fail) on_fail(*failed_owner, worst);
        worst = st;
        *failed_owner = owner;
    }
    return worst;
}

void fpga_card_forget(fpga_card *c, void *owner)
{
    for (int g = 0; g < FPGA_CARD_GROUPS; g++)
        if (c->pend[g].owner == owner) c->pend[g].owner = NULL;
}

int fpga_card_check(fpga_card *c, uint32_t pos0, uint32_t n, uint64_t kv_off, uint32_t part_tiles,
                    const uint32_t *ids, uint32_t n_ids, uint32_t *crc, void **failed_owner)
{
    TRY(fpga_card_drain(c, failed_owner, NULL));
    TRY(check_stuck(c));
    const uint32_t L = c->desc.n_layers;
    const uint64_t bytes = fpga_dec_check_report_bytes(L);
    xrtRunHandle r = c->r_check;
    /* a stale report must not pass for this run's */
    memset(c->stage_host[0][0], 0, 16);
    TRY(fpga_xrt_bo_sync(c->x, c->stage[0][0], XCL_BO_SYNC_BO_TO_DEVICE, 16, 0));
    if (n_ids) {
        if (n_ids > FPGA_DEC_MAX_BLOCKS) return ACCEL_ERR_INVALID;
        memcpy(c->stage_host[0][0] + FPGA_DEC_CHECK_TABLE_OFF, ids, 4ull * n_ids);
        TRY(fpga_xrt_bo_sync(c->x, c->stage[0][0], XCL_BO_SYNC_BO_TO_DEVICE, 4ull * n_ids,
                             FPGA_DEC_CHECK_TABLE_OFF));
    }
    TRY(fpga_xrt_run_set_u32(c->x, r, CK_POS0, pos0));
    TRY(fpga_xrt_run_set_u32(c->x, r, CK_N, n));
    TRY(fpga_xrt_run_set_u64(c->x, r, CK_KV_OFF, kv_off));
    TRY(fpga_xrt_run_set_u32(c->x, r, CK_PART_TILES, part_tiles));
    TRY(fpga_xrt_run_set_u32(c->x, r, CK_N_IDS, n_ids));
    const uint32_t tier = c->kv_tier;
    c->kv_tier = 0;
    TRY(fpga_xrt_run_set_u32(c->x, r, CK_KV_TIER, tier));
    TRY(fpga_xrt_run_start(c->x, r));
    int st = wait_run(c, r);
    if (st == ACCEL_ERR_TIMEOUT) c->check_in_flight = 1;
    if (st) return st;
    if (c->emu) {
        fpga_emu_run_stats rs;
        if (fpga_xrt_emu_run_stats(c->x, r, &rs) == 0) {
            c->check_runs++;
            c->check_modeled_ns += rs.modeled_ns;
            c->ck_par_jobs += rs.par_jobs;
        }
    }
    TRY(fpga_xrt_bo_sync(c->x, c->stage[0][0], XCL_BO_SYNC_BO_FROM_DEVICE, bytes, 0));
    uint32_t head[4];
    TRY(fpga_xrt_bo_read(c->x, c->stage[0][0], head, sizeof head, 0));
    if (head[0] != FPGA_DEC_CHECK_MAGIC || head[1] != pos0 || head[2] != n || head[3] != L)
        return ACCEL_ERR_DEVICE; /* the kernel did not finish this run */
    return fpga_xrt_bo_read(c->x, c->stage[0][0], crc, 4ull * L, 16);
}

/* Drains for a read, copy or write of bank memory: a piece that arrived corrupt fails its own
 * sequence (on_fail), not the unrelated call; a timeout or a failed run is the card's. */
static int drain_for_call(fpga_card *c)
{
    void *owner;
    int st = fpga_card_drain(c, &owner, c->on_fail);
    if (st != ACCEL_ERR_CORRUPT || !c->on_fail) return st;
    c->on_fail(owner, st);
    return 0;
}

int fpga_card_read_bank(fpga_card *c, int ch, uint64_t off, void *dst, size_t n)
{
    TRY(drain_for_call(c));
    TRY(check_stuck(c));
    uint8_t *out = dst;
    xrtRunHandle r = c->r_gather[0];
    while (n) {
        size_t k = n < FPGA_CARD_STAGE_BYTES ? n : FPGA_CARD_STAGE_BYTES;
        TRY(fpga_xrt_run_set_bo(c->x, r, 0, c->bank[ch]));
        TRY(fpga_xrt_run_set_bo(c->x, r, 1, c->stage[0][0]));
        TRY(fpga_xrt_run_set_u64(c->x, r, 2, off));
        TRY(fpga_xrt_run_set_u64(c->x, r, 3, 0));
        TRY(fpga_xrt_run_set_u64(c->x, r, 4, k));
        TRY(fpga_xrt_run_start(c->x, r));
        TRY(wait_gather(c, 0, 0));
        TRY(fpga_xrt_bo_sync(c->x, c->stage[0][0], XCL_BO_SYNC_BO_FROM_DEVICE, k, 0));
        TRY(fpga_xrt_bo_read(c->x, c->stage[0][0], out, k, 0));
        out += k;
        off += k;
        n -= k;
    }
    return 0;
}

int fpga_card_copy_bank(fpga_card *c, int ch, uint64_t src_off, uint64_t dst_off, size_t n,
                        uint64_t tag)
{
    TRY(drain_for_call(c));
    TRY(check_stuck(c));
    xrtRunHandle r = c->r_gather[0];
    TRY(fpga_xrt_run_set_bo(c->x, r, 0, c->bank[ch]));
    TRY(fpga_xrt_run_set_bo(c->x, r, 1, c->bank[ch]));
    TRY(fpga_xrt_run_set_u64(c->x, r, 2, src_off));
    TRY(fpga_xrt_run_set_u64(c->x, r, 3, dst_off));
    TRY(fpga_xrt_run_set_u64(c->x, r, 4, n));
    TRY(fpga_xrt_run_start(c->x, r));
    int st = wait_gather(c, 0, tag);
    fpga_emu_run_stats rs;
    if (!st && c->emu && fpga_xrt_emu_run_stats(c->x, r, &rs) == 0) {
        c->gather_runs++;
        c->gather_modeled_ns += rs.modeled_ns;
    }
    return st;
}

int fpga_card_write_bank(fpga_card *c, int ch, uint64_t off, const void *src, size_t n)
{
    TRY(drain_for_call(c));
    TRY(check_stuck(c));
    const int slots = FPGA_CARD_GROUPS * FPGA_DEC_STAGE_SLOTS;
    const uint8_t *in = src;
    int slot = 0, st = 0;
    while (n && !st) {
        size_t k = n < FPGA_CARD_STAGE_BYTES ? n : FPGA_CARD_STAGE_BYTES;
        xrtRunHandle r = c->r_gather[slot];
        if (c->gather_busy[slot] && (st = wait_run(c, r))) break;
        gather_done(c, slot);
        memcpy(c->stage_host[slot / 4][slot % 4], in, k);
        if ((st = fpga_xrt_bo_sync(c->x, c->stage[slot / 4][slot % 4], XCL_BO_SYNC_BO_TO_DEVICE, k,
                                   0)) ||
            (st = fpga_xrt_run_set_bo(c->x, r, 0, c->stage[slot / 4][slot % 4])) ||
            (st = fpga_xrt_run_set_bo(c->x, r, 1, c->bank[ch])) ||
            (st = fpga_xrt_run_set_u64(c->x, r, 2, 0)) ||
            (st = fpga_xrt_run_set_u64(c->x, r, 3, off)) ||
            (st = fpga_xrt_run_set_u64(c->x, r, 4, k)) || (st = fpga_xrt_run_start(c->x, r)))
            break;
        c->gather_busy[slot] = 1;
        slot = (slot + 1) % slots;
        in += k;
        off += k;
        n -= k;
    }
    for (int i = 0; i < slots; i++) {
        if (!c->gather_busy[i]) continue;
        int s2 = wait_run(c, c->r_gather[i]);
        if (!st) st = s2;
        if (s2 != ACCEL_ERR_TIMEOUT) gather_done(c, i);
        fpga_emu_run_stats rs;
        if (!s2 && c->emu && fpga_xrt_emu_run_stats(c->x, c->r_gather[i], &rs) == 0) {
            c->gather_runs++;
            c->gather_modeled_ns += rs.modeled_ns;
        }
    }
    return st;
}

/* ---------------------------------------------------------------- prefill */

int fpga_card_can_prefill(const fpga_card *c)
{
    return c->k_pf && fpga_dec_io_logits_off(&c->desc) >= fpga_pf_io_need();
}

int fpga_card_pf_params(fpga_card *c, const fpga_pf_params *p)
{
    TRY(fpga_xrt_bo_write(c->x, c->io, p, sizeof *p, FPGA_PF_IO_PARAMS));
    return fpga_xrt_bo_sync(c->x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, sizeof *p, FPGA_PF_IO_PARAMS);
}

int fpga_card_pf_table(fpga_card *c, const uint32_t *ids, uint32_t n_ids)
{
    return write_table(c, ids, n_ids);
}

int fpga_card_pf_run(fpga_card *c, uint32_t mode, uint32_t layer, uint32_t pos0, uint32_t n,
                     uint32_t r0, uint32_t r1, uint64_t kv_off, uint32_t part_tiles,
                     uint64_t ws_off, uint32_t n_ids)
{
    fpga_xrt *x = c->x;
    if (!c->k_pf) return ACCEL_ERR_UNSUPPORTED;
    TRY(check_stuck(c));
    xrtRunHandle r = c->r_pf;
    TRY(fpga_xrt_run_set_u32(x, r, PF_MODE, mode));
    TRY(fpga_xrt_run_set_u32(x, r, PF_LAYER, layer));
    TRY(fpga_xrt_run_set_u32(x, r, PF_POS0, pos0));
    TRY(fpga_xrt_run_set_u32(x, r, PF_N, n));
    TRY(fpga_xrt_run_set_u32(x, r, PF_R0, r0));
    TRY(fpga_xrt_run_set_u32(x, r, PF_R1, r1));
    TRY(fpga_xrt_run_set_u64(x, r, PF_KV_OFF, kv_off));
    TRY(fpga_xrt_run_set_u32(x, r, PF_PART_TILES, part_tiles));
    TRY(fpga_xrt_run_set_u64(x, r, PF_WS_OFF, ws_off));
    TRY(fpga_xrt_run_set_u32(x, r, PF_N_IDS, n_ids));
    TRY(fpga_xrt_run_start(x, r));
    int st = wait_run(c, r);
    if (st == ACCEL_ERR_TIMEOUT) c->pf_in_flight = 1;
    if (st) return st;
    if (c->emu && fpga_xrt_emu_run_stats(x, r, &c->last_pf) == 0) {
        c->pf_runs++;
        c->pf_modeled_ns += c->last_pf.modeled_ns;
        c->pf_par_jobs += c->last_pf.par_jobs;
    }
    uint32_t status[4];
    TRY(fpga_xrt_bo_sync(x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, sizeof status, 0));
    TRY(fpga_xrt_bo_read(x, c->io, status, sizeof status, 0));
    uint32_t where = (mode & FPGA_PF_MODE_MASK) == FPGA_PF_HEAD ? r0 : layer;
    if (status[0] != FPGA_PF_STATUS_MAGIC || status[1] != mode || status[2] != where ||
        status[3] != r1)
        return ACCEL_ERR_DEVICE; /* the kernel did not finish this run */
    return 0;
}

int fpga_card_pf_report(fpga_card *c, fpga_pf_report *r)
{
    TRY(fpga_xrt_bo_sync(c->x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, sizeof *r, FPGA_PF_IO_REPORT));
    TRY(fpga_xrt_bo_read(c->x, c->io, r, sizeof *r, FPGA_PF_IO_REPORT));
    return r->magic == FPGA_PF_REPORT_MAGIC ? 0 : ACCEL_ERR_DEVICE;
}

int fpga_card_logits(fpga_card *c, float *logits)
{
    uint64_t off = fpga_dec_io_logits_off(&c->desc), n = 4ull * c->desc.vocab;
    TRY(fpga_xrt_bo_sync(c->x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, n, off));
    return fpga_xrt_bo_read(c->x, c->io, logits, n, off);
}

int fpga_card_io_write(fpga_card *c, uint64_t off, const void *src, uint64_t n)
{
    if (off > c->io_bytes || n > c->io_bytes - off) return ACCEL_ERR_INVALID;
    TRY(fpga_xrt_bo_write(c->x, c->io, src, n, off));
    return fpga_xrt_bo_sync(c->x, c->io, XCL_BO_SYNC_BO_TO_DEVICE, n, off);
}

int fpga_card_io_read(fpga_card *c, uint64_t off, void *dst, uint64_t n)
{
    if (off > c->io_bytes || n > c->io_bytes - off) return ACCEL_ERR_INVALID;
    TRY(fpga_xrt_bo_sync(c->x, c->io, XCL_BO_SYNC_BO_FROM_DEVICE, n, off));
    return fpga_xrt_bo_read(c->x, c->io, dst, n, off);
}

/* 1 when none of p[0..n) is the byte b. Branch-free over runs of 4 KiB (the compiler
 * vectorizes the inner loop; an early exit per byte kept it scalar: 15 % of a hand-over onto an
 * emulated card, BENCHMARKS.md). */
static int bytes_lack(const uint8_t *p, size_t n, uint8_t b)
{
    for (size_t i = 0; i < n; i += 4096) {
        size_t e = n - i < 4096 ? n : i + 4096;
        uint8_t hit = 0; /* byte lanes: 64 bytes an instruction on AVX-512 */
        for (size_t j = i; j < e; j++) hit |= (uint8_t)(p[j] == b);
        if (hit) return 0;
    }
    return 1;
}

/* 1 when none of the n fp16 scales is negative (sign bit) or not finite (all-ones exponent). */
static int scales_ok(const uint16_t *s, size_t n)
{
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (s[i] & 0x8000) | ((s[i] & 0x7c00) == 0x7c00);
    return !bad;
}

/* proto/kv.h allows int8 values -127..127 and scales that are finite and not negative. */
int fpga_card_chunk_valid(const proto_kv_layer *c)
{
    size_t nv = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t ns = proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    if (!c->k || !c->v || !c->k_scale || !c->v_scale) return 0;
    return bytes_lack(c->k, nv, 0x80) && bytes_lack(c->v, nv, 0x80) && scales_ok(c->k_scale, ns) &&
           scales_ok(c->v_scale, ns);
}

/* tools/fpga_decode_bench.c — the FPGA decode path's numbers (BENCHMARKS.md).
 *
 *   build/fpga_decode_bench [--steps N] [--check DIR [--check-only] [--check-bits 8|4]
 *                           [--check-steps N] [--check-cards 2]] [--prompt T] [--batch]
 *
 * 1. The emulator on stories260K: wall-clock decode tokens/s of the emulated card on this
 *    machine (the kernel's C code on one CPU thread — stories260K's steps read less than the
 *    emulator's threads take, TANDEM_EMU_PAR_MIN_BYTES — plus the host loop: step sync, run,
 *    logits sync), W8 and W4, beside the CPU backend; and the timing model's ms/token for the
 *    same runs.
 * 2. The timing model for real shapes (fpga/dec_model.c: the kernels' own memory commands,
 *    checked equal to the emulator's by tests/fpga/test_fpga_model.c): modeled ms/token of one
 *    decode run on a U280 for LLaMA2-7B (W8, W4) and Llama-3-8B (W4) at several context
 *    lengths, next to the HBM-bandwidth floor (the run's bytes at 460 GB/s) and the published
 *    18.2 ms (FlightLLM) and 21.5 ms (GLITCHES Table I).
 * 3. Modeled KV ship time for 4K and 32K prompts through the import path (per-layer chunks,
 *    4 MiB pieces striped over 4 staging slots, double-buffered, kv_scatter on the card).
 * 4. --check DIR: runs a real checkpoint of a big shape (e.g. tools/mkmodel --preset llama2-7b
 *    --layers 2) through the emulator: the modeled time of real decode runs against part 2's
 *    formula, the wall time per step, and an import of --prompt T random-KV positions against
 *    part 3's pipeline (with the last weights run). --check-only: part 4 alone; --check-bits:
 *    W8 or W4 only; --check-steps: decode steps a setting (default 3; the wall time is their
 *    mean). --check-cards 2: then fpga-emu:0 and fpga-emu:1 decode that many steps each at once,
 *    from two threads (two requests on the default's two emulated cards: their kernels share
 *    the emulator's threads, fpga/emu/emu_par.c), each card's wall time per step.
 * 5. The batched decode kernel's timing model for the same shapes at B = 1..16 and contexts
 *    1K / 4K / 8K: tokens/s per card and the bound that limits each (--batch: only this). */
#include "cpu/kv_quant.h"
#include "devices/devices.h"
#include "fpga/backend.h"
#include "fpga/dec_model.h"
#include "fpga/image.h"
#include "proto/kv_wire.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- 1. emulator wall clock */

static double decode_run(accel_dev *d, int steps, double *modeled_ms)
{
    const model *m = accel_model(d);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *s;
    if (accel_seq_new(d, steps + 1, &s)) {
        free(lg);
        return -1;
    }
    int32_t id = 1;
    accel_decode(d, 1, &s, &id, lg); /* warm */
    fpga_card *c = fpga_dev_card(d);
    uint64_t ns0 = c ? c->dec_modeled_ns : 0, r0 = c ? c->dec_runs : 0;
    double t0 = now_s();
    for (int i = 0; i < steps - 1; i++) {
        id = (int32_t)((i * 37 + 5) % m->cfg.vocab);
        if (accel_decode(d, 1, &s, &id, lg)) break;
    }
    double per = (now_s() - t0) / (steps - 1);
    if (c && modeled_ms) *modeled_ms = (double)(c->dec_modeled_ns - ns0) / (double)(c->dec_runs - r0) / 1e6;
    accel_seq_free(d, s);
    free(lg);
    return per;
}

static void part1(int steps)
{
    char err[512];
    model *m = model_load("models/stories260K", err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    printf("## 1. Emulated card on this machine: stories260K, %d decode steps from an empty "
           "sequence\n\n", steps);
    printf("| device | wall ms/token | tokens/s (wall) | modeled ms/token (U280) |\n|---|---:|---:|---:|\n");
    for (int bits = 8; bits >= 4; bits -= 4) {
        accel_opts o = {.weight_bits = bits};
        accel_dev *d = devices_open("fpga-emu", m, &o, err, sizeof err);
        if (!d) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        double mod = 0, per = decode_run(d, steps, &mod);
        printf("| fpga-emu W%dA8 | %.3f | %.0f | %.4f |\n", bits, per * 1e3, 1 / per, mod);
        accel_free(d);
    }
    accel_opts oc = {.threads = 1};
    accel_dev *c = devices_open("cpu", m, &oc, err, sizeof err);
    if (c) {
        double per = decode_run(c, steps, NULL);
        printf("| cpu (1 thread, float32) | %.3f | %.0f | |\n", per * 1e3, 1 / per);
        accel_free(c);
    }
    printf("\n");
    model_free(m);
}

/* ---------------------------------------------------------------- 2. modeled decode */

typedef struct shape {
    const char *name;
    model_config cfg;
} shape;

static shape llama2_7b(void)
{
    shape s = {.name = "LLaMA2-7B"};
    s.cfg = (model_config){.hidden = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 32,
                           .head_dim = 128, .intermediate = 11008, .vocab = 32000,
                           .max_pos = 4096, .rms_eps = 1e-5f};
    return s;
}

static shape llama3_8b(void)
{
    shape s = {.name = "Llama-3-8B"};
    s.cfg = (model_config){.hidden = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 8,
                           .head_dim = 128, .intermediate = 14336, .vocab = 128256,
                           .max_pos = 8192, .rms_eps = 1e-5f};
    return s;
}

static int desc_of(const shape *s, int bits, int head_bits, fpga_dec_desc *d)
{
    fpga_quant_opts q;
    char err[256];
    fpga_quant_opts_default(&q, bits, s->cfg.hidden);
    q.head_bits = head_bits;
    q.head_group = head_bits == 4 ? q.wgroup : 0;
    if (fpga_image_desc_cfg(&s->cfg, &q, d, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* what the host adds per token: the step input in, status + logits out (fpga/card.c) */
static double host_ns(const fpga_dec_desc *d)
{
    return (double)fpga_dec_model_sync_ns(fpga_dec_io_step_bytes(d)) +
           (double)fpga_dec_model_sync_ns(fpga_dec_io_logits_off(d) + 4ull * d->vocab);
}

static void part2(void)
{
    printf("## 2. Timing model: one decode run on a U280 (fpga/dec_model.c)\n\n");
    printf("Reads/writes per token from the real layout; modeled = 50 us run overhead + busiest "
           "channel (bytes at 14.375 GB/s x 0.90 + 284 ns per command) + serial stalls; floor = "
           "the same bytes at the 460 GB/s peak. Published: FlightLLM 18.2 ms (55 tok/s), "
           "GLITCHES Table I 21.5 ms (W4A8-ish, [1536, 512] tokens).\n\n");
    printf("| model | weights | image GiB | KV pool (tokens) | context | MB/token | floor ms | "
           "modeled ms | of which stall ms | + host syncs ms | tokens/s |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    struct {
        shape s;
        int bits, head;
    } rows[] = {{llama2_7b(), 8, 8}, {llama2_7b(), 4, 8}, {llama2_7b(), 4, 4},
                {llama3_8b(), 4, 8}, {llama3_8b(), 4, 4}, {llama3_8b(), 8, 8}};
    const int ctxs[] = {128, 1024, 1792, 4096};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        fpga_dec_desc d;
        if (desc_of(&rows[r].s, rows[r].bits, rows[r].head, &d)) continue;
        fpga_dec_layout lo;
        fpga_dec_layout_of(&d, &lo);
        uint64_t io = fpga_dec_align(fpga_dec_io_bytes(&d), 4096);
        uint64_t reserve = io > FPGA_CARD_STAGE_BYTES ? io : FPGA_CARD_STAGE_BYTES;
        uint64_t bank = FPGA_U280_HBM_BANK_BYTES - reserve;
        char wname[64];
        snprintf(wname, sizeof wname, "W%dA8%s%s", rows[r].bits,
                 rows[r].bits == 4 ? (rows[r].head == 8 ? " g128, head int8" : " g128, head int4 g128") : " per-row",
                 "");
        double img = (double)lo.image_bytes * FPGA_DEC_CH / (1 << 30);
        if (lo.image_bytes > bank) {
            printf("| %s | %s | %.2f | does not fit (%.0f MiB per channel > %.0f) | | | | | | | |\n",
                   rows[r].s.name, wname, img, lo.image_bytes / 1048576.0, bank / 1048576.0);
            continue;
        }
        uint64_t per_tok = 2ull * d.n_layers * d.n_kv_heads * (d.head_dim + 2);
        uint64_t pool = (bank - lo.image_bytes) * FPGA_DEC_CH / per_tok;
        for (size_t k = 0; k < sizeof ctxs / sizeof ctxs[0]; k++) {
            fpga_dec_cost c;
            fpga_dec_model_step(&d, (uint32_t)ctxs[k] - 1, &c);
            double h = host_ns(&d);
            printf("| %s | %s | %.2f | %llu | %d | %.1f | %.2f | %.2f | %.3f | %.2f | %.1f |\n",
                   rows[r].s.name, wname, img, (unsigned long long)pool, ctxs[k],
                   (c.bytes_read + c.bytes_written) / 1e6, fpga_dec_model_floor_ns(&c) / 1e6,
                   c.modeled_ns / 1e6, c.stall_ns / 1e6, (c.modeled_ns + h) / 1e6,
                   1e9 / (c.modeled_ns + h));
        }
    }
    printf("\n");
}

/* ---------------------------------------------------------------- 5. batched decode */

/* What the host adds per batched step (fpga/card.c, fpga_card_step_batch): per sequence its
 * record and table in, its head and logits out; the batch status. */
static double host_batch_ns(const fpga_dec_desc *d, int n, uint32_t n_ids)
{
    double t = (double)fpga_dec_model_sync_ns(16);
    for (int i = 0; i < n; i++)
        t += (double)fpga_dec_model_sync_ns(64 + fpga_dec_io_step_bytes(d)) +
             (double)fpga_dec_model_sync_ns(4ull * n_ids) +
             (double)fpga_dec_model_sync_ns(fpga_dec_io_rec_logits(d) + 4ull * d->vocab);
    return t;
}

static void part5(void)
{
    printf("## 5. Batched decode on a U280 (fpga/kernels/decode_batch.c, fpga/dec_model.c)\n\n");
    printf("One run streams the weights once for B sequences; each sequence reads its own KV "
           "(its blocks consecutive: one burst per superblock). Compute: %d int8 MACs/cycle at "
           "225 MHz (%.2f TOPS); special functions %d fp32 lanes, serial per sequence. "
           "bound: the larger of memory (busiest channel) and MACs, plus the serial stalls "
           "(share shown). tokens/s = B / (modeled step + host syncs). KV: B x context positions "
           "must fit the pool (else -).\n\n",
           FPGA_DEC_BATCH_MACS_PER_CYCLE, 2.0 * FPGA_DEC_BATCH_MACS_PER_CYCLE * 225e6 / 1e12,
           FPGA_DEC_BATCH_SFU_LANES);
    printf("| model | weights | context | B | step ms | memory ms | MAC ms | stall ms | tokens/s "
           "| x B=1 | bound |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    struct {
        shape s;
        int bits;
    } rows[] = {{llama3_8b(), 8}, {llama3_8b(), 4}, {llama2_7b(), 8}, {llama2_7b(), 4}};
    const int ctxs[] = {1024, 4096, 8192}, bs[] = {1, 2, 4, 8, 16};
    static uint32_t ids[FPGA_DEC_MAX_BATCH][FPGA_DEC_MAX_BLOCKS];
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        fpga_dec_desc d;
        if (desc_of(&rows[r].s, rows[r].bits, 8, &d)) continue;
        fpga_dec_layout lo;
        fpga_dec_layout_of(&d, &lo);
        int maxb = (int)(FPGA_CARD_BATCH_IO / fpga_dec_io_rec_bytes(&d));
        if (maxb > FPGA_DEC_MAX_BATCH) maxb = FPGA_DEC_MAX_BATCH;
        uint64_t io = fpga_dec_align(fpga_dec_io_batch_bytes(&d, (uint32_t)maxb), 4096);
        uint64_t bank = FPGA_U280_HBM_BANK_BYTES - (io > FPGA_CARD_STAGE_BYTES ? io : FPGA_CARD_STAGE_BYTES);
        if (lo.image_bytes > bank) {
            printf("| %s | W%dA8 | | | image does not fit | | | | | | |\n", rows[r].s.name, rows[r].bits);
            continue;
        }
        uint64_t per_tok = 2ull * d.n_layers * d.n_kv_heads * (d.head_dim + 2);
        uint64_t pool = (bank - lo.image_bytes) * FPGA_DEC_CH / per_tok;
        const uint32_t T = fpga_dec_kv_block_tokens(&d);
        for (size_t k = 0; k < sizeof ctxs / sizeof ctxs[0]; k++) {
            if (ctxs[k] > rows[r].s.cfg.max_pos) continue;
            double tok1 = 0;
            for (size_t bi = 0; bi < sizeof bs / sizeof bs[0]; bi++) {
                int B = bs[bi];
                if (B > maxb) continue;
                if ((uint64_t)B * (uint64_t)ctxs[k] > pool) {
                    printf("| %s | W%dA8 | %d | %d | - | | | | | | KV %llu > pool %llu tokens |\n",
                           rows[r].s.name, rows[r].bits, ctxs[k], B,
                           (unsigned long long)B * ctxs[k], (unsigned long long)pool);
                    continue;
                }
                uint32_t pos[FPGA_DEC_MAX_BATCH], nid = (uint32_t)(ctxs[k] - 1) / T + 1;
                fpga_dec_kvmap km[FPGA_DEC_MAX_BATCH];
                for (int b = 0; b < B; b++) {
                    pos[b] = (uint32_t)ctxs[k] - 1;
                    for (uint32_t i = 0; i < nid; i++) ids[b][i] = (uint32_t)b * nid + i;
                    fpga_dec_kvmap_paged(&d, &lo, 0, ids[b], nid, &km[b]);
                }
                fpga_dec_cost c;
                fpga_dec_model_step_batch(&d, (uint32_t)B, pos, km, &c);
                double step = c.modeled_ns + host_batch_ns(&d, B, nid);
                double tps = B * 1e9 / step;
                if (B == 1) tok1 = tps;
                const char *bound = c.mem_ns >= c.compute_ns ? "HBM" : "MACs";
                char b2[64];
                snprintf(b2, sizeof b2, "%s, stalls %.0f %%", bound, 100.0 * c.stall_ns / c.modeled_ns);
                printf("| %s | W%dA8 | %d | %d | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f | %s |\n",
                       rows[r].s.name, rows[r].bits, ctxs[k], B, step / 1e6, c.mem_ns / 1e6,
                       c.compute_ns / 1e6, c.stall_ns / 1e6, tps, tok1 > 0 ? tps / tok1 : 0, b2);
            }
        }
    }
    /* the simulator's u280-batch profile (devices/sim_hw.c): LLaMA2-7B W4A8 g128 at 1792 */
    {
        shape s7 = llama2_7b();
        fpga_dec_desc d;
        if (!desc_of(&s7, 4, 8, &d)) {
            fpga_dec_layout lo;
            fpga_dec_layout_of(&d, &lo);
            const uint32_t T = fpga_dec_kv_block_tokens(&d), nid = 1791 / T + 1;
            fpga_dec_cost c1, c2;
            uint32_t pos[2] = {1791, 1791};
            fpga_dec_kvmap km[2];
            for (int b = 0; b < 2; b++) {
                for (uint32_t i = 0; i < nid; i++) ids[b][i] = (uint32_t)b * nid + i;
                fpga_dec_kvmap_paged(&d, &lo, 0, ids[b], nid, &km[b]);
            }
            fpga_dec_model_step_batch(&d, 1, pos, km, &c1);
            fpga_dec_model_step_batch(&d, 2, pos, km, &c2);
            double h1 = host_batch_ns(&d, 1, nid), h2 = host_batch_ns(&d, 2, nid);
            printf("Simulator calibration (u280-batch): LLaMA2-7B W4A8 g128, context 1792, B = 1: "
                   "%.4f ms with host syncs (cal), fixed stalls %.4f ms, per further sequence "
                   "%.4f ms (stalls + syncs, beyond its KV bytes)\n\n",
                   (c1.modeled_ns + h1) / 1e6, c1.stall_ns / 1e6,
                   ((double)c2.stall_ns - c1.stall_ns + h2 - h1) / 1e6);
        }
    }
}

/* ---------------------------------------------------------------- 3. KV ship */

typedef struct ship {
    double total_ns, pcie_ns, scatter_ns, last_layer_ns;
    uint64_t bytes;
    long pieces;
} ship;

/* The import pipeline of fpga/card.c in time: the host syncs a piece's slots, starts its
 * scatter, and goes on with the next piece in the other staging group; before refilling a
 * group it waits for that group's run and reads its report (a 64-byte sync); the last layer
 * drains both groups. The compute unit runs scatters in order. */
static ship ship_model(const fpga_dec_desc *d, int tokens, int layers)
{
    ship s = {0};
    const int P = fpga_card_piece_tokens_for(d), T = (int)fpga_dec_kv_block_tokens(d);
    double host = 0, run_end[2] = {0, 0}, last_end = 0;
    int pending[2] = {0, 0}, g = 0;
    for (int l = 0; l < layers; l++) {
        double layer_start = host;
        for (int t0 = 0, n; t0 < tokens; t0 += n) {
            /* fpga/backend.c's pieces: at most P tokens and FPGA_DEC_SCATTER_IDS blocks */
            int room = FPGA_DEC_SCATTER_IDS * T - t0 % T;
            n = tokens - t0 < P ? tokens - t0 : P;
            if (n > room) n = room;
            int per = (n + FPGA_DEC_STAGE_SLOTS - 1) / FPGA_DEC_STAGE_SLOTS;
            if (pending[g]) {
                host = fmax(host, run_end[g]) + (double)fpga_dec_model_sync_ns(64);
                s.pcie_ns += (double)fpga_dec_model_sync_ns(64);
            }
            int ch[FPGA_DEC_STAGE_SLOTS];
            for (int j = 0; j < FPGA_DEC_STAGE_SLOTS; j++) {
                ch[j] = 1 + g * FPGA_DEC_STAGE_SLOTS + j;
                int lo = j * per;
                if (lo >= n) continue;
                int cnt = n - lo < per ? n - lo : per;
                uint64_t b = fpga_dec_stage_section((uint32_t)cnt, d->n_kv_heads, d->head_dim, 4);
                double t = (double)fpga_dec_model_sync_ns(b);
                host += t;
                s.pcie_ns += t;
                s.bytes += b;
            }
            double tt =
                (double)fpga_dec_model_sync_ns(4ull * ((t0 % T + n + T - 1) / T)); /* the table */
            host += tt;
            s.pcie_ns += tt;
            fpga_dec_cost c;
            fpga_dec_model_scatter(d, (uint32_t)l, (uint32_t)t0, (uint32_t)n, (uint32_t)per, ch, 1,
                                   0, &c);
            double start = fmax(host, last_end);
            run_end[g] = last_end = start + (double)c.modeled_ns;
            s.scatter_ns += (double)c.modeled_ns;
            pending[g] = 1;
            s.pieces++;
            g ^= 1;
        }
        if (l == layers - 1)
            for (int k = 0; k < 2; k++) {
                int gg = (g + k) % 2;
                if (!pending[gg]) continue;
                host = fmax(host, run_end[gg]) + (double)fpga_dec_model_sync_ns(64);
                s.pcie_ns += (double)fpga_dec_model_sync_ns(64);
                pending[gg] = 0;
            }
        s.last_layer_ns = host - layer_start;
    }
    s.total_ns = host;
    return s;
}

static void part3(void)
{
    printf("## 3. Modeled KV ship time: prompt KV (int8 + fp16 scales) through the import path\n\n");
    printf("| model | prompt | KV MiB | fits the W4 pool | pieces | PCIe (syncs) ms | kv_scatter "
           "ms (overlapped) | total ms | exposed after prefill (last layer) ms | bytes / 11 GB/s ms |\n");
    printf("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    shape shapes[2] = {llama2_7b(), llama3_8b()};
    const int prompts[] = {4096, 32768};
    for (int i = 0; i < 2; i++) {
        fpga_dec_desc d;
        if (desc_of(&shapes[i], 4, 8, &d)) continue;
        fpga_dec_layout lo;
        fpga_dec_layout_of(&d, &lo);
        uint64_t per_tok = 2ull * d.n_layers * d.n_kv_heads * (d.head_dim + 2);
        uint64_t pool = (FPGA_U280_HBM_BANK_BYTES - FPGA_CARD_STAGE_BYTES - lo.image_bytes) *
                        FPGA_DEC_CH / per_tok;
        for (int k = 0; k < 2; k++) {
            ship s = ship_model(&d, prompts[k], (int)d.n_layers);
            double mib = (double)per_tok * prompts[k] / 1048576.0;
            printf("| %s | %d | %.0f | %s | %ld | %.1f | %.1f | %.1f | %.2f | %.1f |\n",
                   shapes[i].name, prompts[k], mib,
                   (uint64_t)prompts[k] <= pool ? "yes" : "no (decode elsewhere)", s.pieces,
                   s.pcie_ns / 1e6, s.scatter_ns / 1e6, s.total_ns / 1e6, s.last_layer_ns / 1e6,
                   (double)per_tok * prompts[k] / FPGA_U280_PCIE_BPS * 1e3);
        }
    }
    printf("\n");
}

/* ---------------------------------------------------------------- 4. a real big shape */

typedef struct card_steps {
    accel_dev *d;
    int steps, first, rc;
    double wall; /* s per step */
} card_steps;

static void *card_steps_run(void *arg)
{
    card_steps *r = arg;
    const model *m = accel_model(r->d);
    float *lg = malloc(sizeof(float) * m->cfg.vocab);
    accel_seq *s;
    if (!lg || accel_seq_new(r->d, r->steps + 1, &s)) {
        r->rc = 1;
        free(lg);
        return NULL;
    }
    double t0 = now_s();
    for (int i = 0; i < r->steps && !r->rc; i++) {
        int32_t id = r->first + i;
        if (accel_decode(r->d, 1, &s, &id, lg)) r->rc = 2;
    }
    r->wall = (now_s() - t0) / r->steps;
    accel_seq_free(r->d, s);
    free(lg);
    return NULL;
}

/* --check-cards 2: d (fpga-emu:0) and a second card stepping at once from two threads. */
static void two_cards(const model *m, accel_dev *d, const accel_opts *o, int bits, int steps)
{
    char err[512];
    accel_dev *d2 = devices_open("fpga-emu:1", m, o, err, sizeof err);
    if (!d2) {
        fprintf(stderr, "fpga-emu:1: %s\n", err);
        return;
    }
    card_steps r[2] = {{.d = d, .steps = steps, .first = 1},
                       {.d = d2, .steps = steps, .first = 101}};
    pthread_t th[2];
    int started = 0;
    double t0 = now_s();
    while (started < 2 && pthread_create(&th[started], NULL, card_steps_run, &r[started]) == 0)
        started++;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double all = now_s() - t0;
    if (started < 2 || r[0].rc || r[1].rc)
        printf("| W%dA8, two cards at once | failed |\n", bits);
    else
        printf("| W%dA8, two cards at once (fpga-emu:0, fpga-emu:1) | | %.3f, %.3f | | | "
               "both done in %.3f s |\n",
               bits, r[0].wall, r[1].wall, all);
    accel_free(d2);
}

static void part4(const char *dir, int prompt, int only_bits, int steps, int cards)
{
    char err[512];
    model *m = model_load(dir, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    setenv("TANDEM_FPGA_QUANT", "calib=0", 1);
    printf("## 4. A real %d-layer checkpoint of %s through the emulator\n\n", m->cfg.n_layers, dir);
    printf("| weights | image build+upload s | decode wall s/token | modeled ms/token (run) | "
           "model formula ms | equal |\n|---|---:|---:|---:|---:|---|\n");
    for (int bits = 8; bits >= 4; bits -= 4) {
        if (only_bits && bits != only_bits) continue;
        accel_opts o = {.weight_bits = bits};
        double t0 = now_s();
        accel_dev *d = devices_open("fpga-emu", m, &o, err, sizeof err);
        double t_open = now_s() - t0;
        if (!d) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        fpga_card *c = fpga_dev_card(d);
        float *lg = malloc(sizeof(float) * m->cfg.vocab);
        accel_seq *s;
        int ok = 1;
        if (accel_seq_new(d, 64, &s)) break;
        t0 = now_s();
        for (int i = 0; i < steps; i++) {
            int32_t id = 1 + i;
            if (accel_decode(d, 1, &s, &id, lg)) ok = 0;
            fpga_dec_cost mc;
            fpga_dec_model_step_paged(&c->desc, (uint32_t)i, 0, &mc); /* the first sequence */
            if (mc.modeled_ns != c->last_dec.modeled_ns) {
                fprintf(stderr, "W%d step %d: the run's %llu ns, the formula's %llu ns\n", bits, i,
                        (unsigned long long)c->last_dec.modeled_ns,
                        (unsigned long long)mc.modeled_ns);
                ok = 0;
            }
        }
        double wall = (now_s() - t0) / steps;
        fpga_dec_cost mc;
        fpga_dec_model_step_paged(&c->desc, (uint32_t)steps - 1, 0, &mc);
        printf("| W%dA8 | %.1f | %.3f | %.3f | %.3f | %s |\n", bits, t_open, wall,
               c->last_dec.modeled_ns / 1e6, mc.modeled_ns / 1e6, ok ? "yes" : "NO");
        accel_seq_free(d, s);
        if (cards == 2) two_cards(m, d, &o, bits, steps);
        if (bits == (only_bits ? only_bits : 4) && prompt > 0) {
            /* an import of random KV: the real path's modeled PCIe and scatter time */
            const model_config *cf = &m->cfg;
            size_t need = cpu_kv_layer_bytes(PROTO_KV_INT8, prompt, cf->n_kv_heads, cf->head_dim);
            size_t nf = (size_t)prompt * cf->n_kv_heads * cf->head_dim;
            float *k = malloc(sizeof(float) * nf), *v = malloc(sizeof(float) * nf);
            void *buf = aligned_alloc(64, (need + 63) & ~(size_t)63);
            for (size_t i = 0; i < nf; i++) {
                k[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
                v[i] = (float)((i * 40503u) % 1999) / 999.0f - 1.0f;
            }
            fpga_emu_card_stats a, b;
            accel_seq *si;
            proto_kv_layer ch;
            if (buf && k && v && accel_seq_new(d, prompt, &si) == 0 &&
                cpu_kv_quantize_layer(PROTO_KV_INT8, k, v, 0, 0, prompt, cf->n_kv_heads,
                                      cf->head_dim, buf, need, &ch) == 0) {
                /* every layer the same bytes, quantized and checksummed before the clock starts:
                 * on the daemon's path they come off the wire with their CRC (sched_handover.c) */
                uint32_t crc = proto_kv_payload_crc(&ch);
                fpga_xrt_emu_card_stats(c->x, c->dev, &a);
                uint64_t sc0 = c->sc_modeled_ns;
                t0 = now_s();
                int st = 0;
                for (int l = 0; l < cf->n_layers && !st; l++) {
                    ch.layer = l;
                    st = accel_kv_import_crc(d, si, &ch, crc);
                }
                double w = now_s() - t0;
                fpga_xrt_emu_card_stats(c->x, c->dev, &b);
                ship sm = ship_model(&c->desc, prompt, cf->n_layers);
                printf("\nImport of %d positions x %d layers (%s): wall %.3f s on this machine "
                       "(accel_kv_import_crc: the chunk's check, the copies into the staging BOs, "
                       "the emulated syncs, kv_scatter and kv_check runs); card stats: PCIe syncs "
                       "%.2f ms, scatter runs %.2f ms; pipeline model: PCIe %.2f ms, scatter "
                       "%.2f ms, total %.2f ms.\n",
                       prompt, cf->n_layers, st ? accel_strerror(st) : "ok", w,
                       (b.sync_modeled_ns - a.sync_modeled_ns) / 1e6,
                       (c->sc_modeled_ns - sc0) / 1e6, sm.pcie_ns / 1e6, sm.scatter_ns / 1e6,
                       sm.total_ns / 1e6);
                accel_seq_free(d, si);
            }
            free(k);
            free(v);
            free(buf);
        }
        free(lg);
        accel_free(d);
    }
    printf("\n");
    model_free(m);
}

int main(int argc, char **argv)
{
    int steps = 256, prompt = 4096, batch_only = 0, check_only = 0, check_bits = 0, check_steps = 3,
        check_cards = 1;
    const char *check = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check") && i + 1 < argc) check = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch")) batch_only = 1;
        else if (!strcmp(argv[i], "--check-only"))
            check_only = 1;
        else if (!strcmp(argv[i], "--check-bits") && i + 1 < argc)
            check_bits = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check-steps") && i + 1 < argc)
            check_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check-cards") && i + 1 < argc)
            check_cards = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: fpga_decode_bench [--steps N] [--check DIR [--check-only] "
                            "[--check-bits 8|4] [--check-steps N] [--check-cards 2]] [--prompt T] "
                            "[--batch]\n");
            return 2;
        }
    }
    if (steps < 2 || steps > 500) steps = 256;
    if ((check_bits && check_bits != 8 && check_bits != 4) || check_steps < 1 || check_steps > 64 ||
        (check_only && !check) || check_cards < 1 || check_cards > 2) {
        fprintf(stderr, "fpga_decode_bench: --check-bits is 8 or 4, --check-steps 1..64, "
                        "--check-cards 1 or 2, --check-only needs --check DIR\n");
        return 2;
    }
    if (batch_only) {
        part5();
        return 0;
    }
    if (!check || !check_only) {
        part1(steps);
        part2();
        part3();
        part5();
    }
    if (check) part4(check, prompt, check_bits, check_steps, check_cards);
    return 0;
}

/* fpga/kernels/flex_sigu.c — FAST-Prefill's Sparse Index Generation Unit (Sec. IV-B): FlexPrefill's
 * get_active_blocks as a streaming pipeline, producing the same per-head CSR block lists as the
 * CPU reference (cpu/flex_index.c, which lists the steps and the quirks both keep).
 *
 * Schedule. For each kv head g (its G query heads together, so one key fetch serves the group):
 *   sweep 1  key blocks in increasing order, one burst each: the last-rows logit tile
 *            (G x 128 x 128, int8 x int8 -> int32, scaled) updates each row's running max and
 *            sum (online softmax statistics); the Key Pooling Module sums the block's keys.
 *   sweep 2  the same blocks again: weights w = exp(s - m) / l; the Vertical Accumulator adds
 *            each tile's column sums (the token-level vertical distribution, final per block);
 *            the Slash Accumulator adds its diagonals into a 2-block sliding window, whose
 *            first half is final once the tile is done. Both token-level vectors stream out to
 *            HBM through 16-block staging buffers; their block sums stay on chip.
 *   per head coverage budgets by the radix cut (flex_select.c) over the two token vectors, and
 *            the Divergence Evaluation: softmax(mean last row . key-block means) vs the pooled
 *            vertical, square-root JS distance against tau.
 * Then for every head: streaming top-k of the pooled vertical / slash (sink and diagonal forced),
 * the flattened-id transform into an on-chip nb x nb bit map, the query-aware map for the heads
 * that need it (Query Pooling over the head's query blocks, block scores row by row into HBM,
 * radix cut at gamma x nb, one emission pass), and the CSR rows.
 *
 * Why two key sweeps where the paper says one: the normalised weights need each row's max and
 * sum over ALL keys before any weight can be accumulated into the per-key vertical and
 * per-diagonal slash sums, and rows have different normalisers, so one pass would have to keep
 * every (row, key) weight (the 128 x n tensor the unit exists to avoid). The second sweep costs
 * one more read of K (n x d bytes per kv head) and keeps the selection exact.
 *
 * Arguments (xclbin order):
 *   0 qbuf global   1 kvbuf global   2 scratch global   3 row_ptr global   4 col global
 *   5 info global   6 n u32   7 n_heads u32   8 n_kv_heads u32   9 head_dim u32
 *   10 gamma (f32 bits) u32   11 tau (f32 bits) u32   12 min_blocks u32   13 max_blocks u32
 *   14 gqa_interleave u32
 * On-chip memory (the arrays an HLS top function declares locally) is the sigu_chip struct; the
 * emulator's adapter allocates it because a worker thread's stack cannot hold its 2.5 MiB. */
#include "fpga/kernels/flex_kernel.h"
#include "fpga/kernels/flex_select.h"
#include <math.h>
#include <stdlib.h>

#define BS    FPGA_FLEX_BS
#define MAXD  FPGA_FLEX_MAX_D
#define MAXNB FPGA_FLEX_MAX_NB
#define MAXG  FPGA_FLEX_MAX_GROUP
#define STAGE 16 /* blocks of token-level output staged per burst (16 x 512 B = 8 KiB) */

typedef struct sigu_chip {
    int8_t lq[MAXG][BS][MAXD];  /* the group's last rows */
    float lqs[MAXG][BS];        /* their scales / sqrt(d) */
    float m[MAXG][BS], l[MAXG][BS];
    int8_t kb[BS][MAXD];        /* Key Block Buffer */
    float ks[BS];
    float tile[BS][BS];
    float vstage[MAXG][STAGE * BS], sstage[MAXG][STAGE * BS];
    float swin[MAXG][2 * BS];
    float mq[MAXG][MAXD];       /* mean last row (scaled), per head of the group */
    float avg_k[MAXNB][MAXD];   /* the current kv head's key-block means */
    float vblk[FPGA_FLEX_MAX_HEADS][MAXNB], sblk[FPGA_FLEX_MAX_HEADS][MAXNB];
    float avg_q[MAXNB][MAXD];
    float row[MAXNB], cand[MAXNB];
    int32_t vsel[MAXNB], ssel[MAXNB];
    uint32_t mark[MAXNB * MAXNB / 32];
    uint32_t rows[MAXNB + 1];
} sigu_chip;

typedef struct sigu_args {
    const fpga_flex_buf *qbuf, *kvbuf;
    float *scratch;
    uint32_t *row_ptr, *col;
    fpga_flex_head_info *info;
    int n, H, Hk, d, interleave;
    float gamma, tau;
    int min_b, max_b;
    int q0; /* a chunk after q0 x 128 cached positions: its query blocks only (below) */
} sigu_args;

static int32_t dot8(const int8_t *a, const int8_t *b, int d)
{
    int32_t acc = 0;
    for (int e = 0; e < d; e++) {
#pragma HLS UNROLL factor = 32
        acc += (int32_t)a[e] * b[e];
    }
    return acc;
}

/* One block of one head: [int8 (BS, d)][f32 scale (BS)] at p. */
static const int8_t *blk_vals(const uint8_t *p)
{
    return (const int8_t *)p;
}
static float blk_scale(const uint8_t *p, int d, int i)
{
    float s;
    memcpy(&s, p + (size_t)BS * d + 4 * (size_t)i, 4);
    return s;
}

static void charge_tile(int G, int d)
{
    uint64_t mpu = (uint64_t)G * BS * BS * d / FPGA_FLEX_MPU_MACS;
    uint64_t sfu = (uint64_t)G * BS * BS / FPGA_FLEX_SFU_LANES;
    fpga_k_cycles(mpu > sfu ? mpu : sfu);
}

/* Loads key block c of kv head g into the Key Block Buffer (one burst: values + scales). */
static void load_key_block(const sigu_args *a, sigu_chip *s, int g, int c)
{
    const uint8_t *p = fpga_flex_blk(a->kvbuf, (uint64_t)g * ((a->n + BS - 1) / BS) + c);
    fpga_k_read(p, fpga_flex_qblock_bytes(a->d));
    for (int j = 0; j < BS; j++) {
        memcpy(s->kb[j], blk_vals(p) + (size_t)j * a->d, (size_t)a->d);
        s->ks[j] = blk_scale(p, a->d, j);
    }
}

/* logit of last row i of group head u against key jj of the buffered block */
static float logit(const sigu_args *a, const sigu_chip *s, int u, int i, int jj)
{
    return (float)dot8(s->lq[u][i], s->kb[jj], a->d) * s->lqs[u][i] * s->ks[jj];
}

/* Writes the staged token-level values of blocks [c0, c1) of the group's heads. */
static void flush_stage(const sigu_args *a, sigu_chip *s, int G, const int *heads, int c0, int c1)
{
    const int n = a->n, t0 = c0 * BS, t1 = c1 * BS < n ? c1 * BS : n;
    if (t1 <= t0) return;
    for (int u = 0; u < G; u++) {
        float *v = a->scratch + (uint64_t)heads[u] * n + t0;
        float *sl = a->scratch + (uint64_t)a->H * n + (uint64_t)heads[u] * n + t0;
        fpga_k_write(v, (uint64_t)(t1 - t0) * 4);
        fpga_k_write(sl, (uint64_t)(t1 - t0) * 4);
        memcpy(v, s->vstage[u], (size_t)(t1 - t0) * 4);
        memcpy(sl, s->sstage[u], (size_t)(t1 - t0) * 4);
    }
}

/* softmax in place with cpu_softmax's steps: max, expf, double sum, one float reciprocal */
static void softmax_row(float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static int32_t clamp_budget(uint64_t blocks, int min_b, int max_b)
{
    if (blocks < (uint64_t)min_b) blocks = (uint64_t)min_b;
    if (blocks > (uint64_t)max_b) blocks = (uint64_t)max_b;
    return (int32_t)blocks;
}

/* Steps 1-5 for the G query heads of kv head g. */
static void estimate_group(const sigu_args *a, sigu_chip *s, int g)
{
    const int n = a->n, d = a->d, nb = (n + BS - 1) / BS, G = a->H / a->Hk;
    const float rsd = 1.0f / sqrtf((float)d);
    int heads[MAXG];
    for (int u = 0; u < G; u++) heads[u] = a->interleave ? g + u * a->Hk : g * G + u;

    /* the last BS rows of each head (they may straddle two query blocks) */
    for (int u = 0; u < G; u++) {
        const uint64_t qb = fpga_flex_qblock_bytes(d), q0 = (uint64_t)heads[u] * nb;
        int b0 = (n - BS) / BS, b1 = (n - 1) / BS;
        for (int b = b0; b <= b1; b++) fpga_k_read(fpga_flex_blk(a->qbuf, q0 + b), qb);
        double mq[MAXD] = {0};
        for (int i = 0; i < BS; i++) {
            const int t = n - BS + i;
            const uint8_t *p = fpga_flex_blk(a->qbuf, q0 + t / BS);
            memcpy(s->lq[u][i], blk_vals(p) + (size_t)(t % BS) * d, (size_t)d);
            float sc = blk_scale(p, d, t % BS);
            s->lqs[u][i] = sc * rsd;
            for (int e = 0; e < d; e++) mq[e] += (double)s->lq[u][i][e] * sc * rsd;
            s->m[u][i] = -INFINITY;
            s->l[u][i] = 0;
        }
        for (int e = 0; e < d; e++) s->mq[u][e] = (float)(mq[e] / BS);
    }

    /* sweep 1: row statistics and key-block means */
    for (int c = 0; c < nb; c++) {
        load_key_block(a, s, g, c);
        const int len = (c + 1) * BS <= n ? BS : n - c * BS;
        double ak[MAXD] = {0};
        for (int j = 0; j < len; j++)
            for (int e = 0; e < d; e++) ak[e] += (double)s->kb[j][e] * s->ks[j];
        for (int e = 0; e < d; e++) s->avg_k[c][e] = (float)(ak[e] / len);
        for (int u = 0; u < G; u++)
            for (int i = 0; i < BS; i++) {
                const int t = n - BS + i;
                float bm = -INFINITY, lg[BS];
                for (int jj = 0; jj < BS; jj++) {
                    const int j = c * BS + jj;
                    lg[jj] = j > t ? -INFINITY : logit(a, s, u, i, jj);
                    if (lg[jj] > bm) bm = lg[jj];
                }
                if (bm == -INFINITY) continue;
                float mn = bm > s->m[u][i] ? bm : s->m[u][i];
                float acc = s->l[u][i] * expf(s->m[u][i] - mn);
                for (int jj = 0; jj < BS; jj++) acc += expf(lg[jj] - mn);
                s->m[u][i] = mn;
                s->l[u][i] = acc;
            }
        charge_tile(G, d);
    }
    float *avg_k_hbm = a->scratch + 2 * (uint64_t)a->H * n + (uint64_t)g * nb * d;
    fpga_k_write(avg_k_hbm, (uint64_t)nb * d * 4);
    for (int c = 0; c < nb; c++) memcpy(avg_k_hbm + (uint64_t)c * d, s->avg_k[c], (size_t)d * 4);

    /* sweep 2: normalised weights into the vertical and slash accumulators */
    float inv_l[MAXG][BS];
    for (int u = 0; u < G; u++) {
        for (int i = 0; i < BS; i++) inv_l[u][i] = 1.0f / s->l[u][i];
        for (int k = 0; k < 2 * BS; k++) s->swin[u][k] = 0;
        for (int c = 0; c < nb; c++) s->vblk[heads[u]][c] = s->sblk[heads[u]][c] = 0;
    }
    int staged_from = 0;
    for (int c = 0; c < nb; c++) {
        load_key_block(a, s, g, c);
        for (int u = 0; u < G; u++) {
            const int h = heads[u];
            for (int i = 0; i < BS; i++) {
                const int t = n - BS + i;
                for (int jj = 0; jj < BS; jj++) {
                    const int j = c * BS + jj;
                    s->tile[i][jj] =
                        j > t ? 0.0f : expf(logit(a, s, u, i, jj) - s->m[u][i]) * inv_l[u][i];
                }
            }
            float *vst = s->vstage[u] + (c - staged_from) * BS;
            float *sst = s->sstage[u] + (c - staged_from) * BS;
            double vb = 0, sb = 0;
            for (int jj = 0; jj < BS; jj++) {
                float col = 0;
                for (int i = 0; i < BS; i++) col += s->tile[i][jj];
                vst[jj] = col / BS;
                if (c * BS + jj < n) vb += vst[jj];
            }
            for (int i = 0; i < BS; i++)
                for (int jj = 0; jj < BS; jj++) s->swin[u][jj - i + BS - 1] += s->tile[i][jj];
            for (int k = 0; k < BS; k++) {
                sst[k] = s->swin[u][k] / BS;
                if (c * BS + k < n) sb += sst[k];
                s->swin[u][k] = s->swin[u][k + BS];
                s->swin[u][k + BS] = 0;
            }
            s->vblk[h][c] = (float)vb;
            s->sblk[h][c] = (float)sb;
        }
        charge_tile(G, d);
        if (c + 1 - staged_from == STAGE || c + 1 == nb) {
            flush_stage(a, s, G, heads, staged_from, c + 1);
            staged_from = c + 1;
        }
    }

    /* budgets and the pattern decision, per head */
    for (int u = 0; u < G; u++) {
        const int h = heads[u];
        const float *tv = a->scratch + (uint64_t)h * n;
        const float *ts = a->scratch + (uint64_t)a->H * n + (uint64_t)h * n;
        flex_cut cv = flex_cover_cut(tv, (uint64_t)n, (double)a->gamma);
        flex_cut cs = flex_cover_cut(ts, (uint64_t)n, (double)a->gamma);
        /* QUIRK kept: (count + 1) // 128 + 1 with a literal 128 */
        int32_t nv = clamp_budget((cv.count + 1) / 128 + 1, a->min_b, a->max_b);
        int32_t ns = clamp_budget((cs.count + 1) / 128 + 1, a->min_b, a->max_b);
        for (int c = 0; c < nb; c++) {
            float acc = 0;
            for (int e = 0; e < d; e++) acc += s->mq[u][e] * s->avg_k[c][e];
            s->row[c] = acc;
        }
        fpga_k_cycles((uint64_t)nb * d / FPGA_FLEX_MPU_MACS + nb / FPGA_FLEX_SFU_LANES + nb);
        softmax_row(s->row, nb);
        double ja = 0, jb = 0;
        for (int c = 0; c < nb; c++) {
            double p = s->row[c], q = s->vblk[h][c], m = (p + q) / 2;
            ja += p * log(p / m);
            jb += q * log(q / m);
        }
        float js = (float)sqrt(0.5 * ja + 0.5 * jb);
        int qa = js < a->tau; /* NaN: not query-aware */
        if (qa) nv = ns = a->min_b;
        a->info[h] = (fpga_flex_head_info){(uint32_t)nv, (uint32_t)ns, (uint32_t)qa,
                                           fpga_flex_bits(js)};
    }
}

/* Step 9: the query-aware block map of head h, marked into s->mark. A chunk after cached
 * positions (q0 > 0; cpu/flex_index.c says why): its query blocks q0 .. nb - 1 only, their map's
 * mass (one per row) cut at gamma x (nb - q0), the cut's 0 that of its first row. */
static void query_aware_map(const sigu_args *a, sigu_chip *s, int h)
{
    const int n = a->n, d = a->d, nb = (n + BS - 1) / BS, pad = nb * BS - n, q0 = a->q0;
    const int g = a->interleave ? h % a->Hk : h / (a->H / a->Hk);
    const float rsd = sqrtf((float)d);
    const uint64_t qb = fpga_flex_qblock_bytes(d);
    /* Query Pooling Module: one burst per query block of the head */
    for (int r = q0; r < nb; r++) {
        const uint8_t *p = fpga_flex_blk(a->qbuf, (uint64_t)h * nb + r);
        fpga_k_read(p, qb);
        double acc[MAXD] = {0};
        for (int i = 0; i < BS && r * BS + i < n; i++) {
            float sc = blk_scale(p, d, i);
            for (int e = 0; e < d; e++) acc[e] += (double)blk_vals(p)[(size_t)i * d + e] * sc;
        }
        for (int e = 0; e < d; e++) s->avg_q[r][e] = (float)(acc[e] / BS);
    }
    for (int e = 0; e < d; e++) s->avg_q[nb - 1][e] = s->avg_q[nb - 1][e] * (float)BS / (float)(BS - pad);
    for (int r = q0; r < nb; r++)
        for (int e = 0; e < d; e++) s->avg_q[r][e] = s->avg_q[r][e] / rsd;
    const float *avg_k_hbm = a->scratch + 2 * (uint64_t)a->H * n + (uint64_t)g * nb * d;
    fpga_k_read(avg_k_hbm, (uint64_t)nb * d * 4);
    for (int c = 0; c < nb; c++) memcpy(s->avg_k[c], avg_k_hbm + (uint64_t)c * d, (size_t)d * 4);

    /* Query-Aware Scoring, row by row into the HBM score map */
    float *map = a->scratch + 2 * (uint64_t)a->H * n + (uint64_t)a->Hk * nb * d;
    for (int r = q0; r < nb; r++) {
        for (int c = 0; c < nb; c++) {
            float acc = 0;
            if (c > r) {
                s->row[c] = -INFINITY;
                continue;
            }
            for (int e = 0; e < d; e++) acc += s->avg_q[r][e] * s->avg_k[c][e];
            s->row[c] = acc;
        }
        softmax_row(s->row, nb);
        fpga_k_write(map + (uint64_t)r * nb, (uint64_t)nb * 4);
        memcpy(map + (uint64_t)r * nb, s->row, (size_t)nb * 4);
    }
    const uint64_t rows = (uint64_t)(nb - q0), first = (uint64_t)q0 * nb;
    fpga_k_cycles(rows * nb * d / FPGA_FLEX_MPU_MACS + rows * nb / FPGA_FLEX_SFU_LANES);
    /* Streaming Coverage Selector: the cut at gamma x rows (a Python float compared as float32) */
    const float limit = (float)((double)a->gamma * (double)rows);
    const uint64_t m2 = rows * nb;
    flex_cut cut = flex_cover_cut(map + first, m2, (double)limit);
    fpga_k_read(map + first, m2 * 4);
    fpga_k_cycles(m2 / FPGA_FLEX_SCAN_LANES);
    uint64_t taken = 0;
    int dropped = 0;
    for (uint64_t i = 0; i < m2; i++) {
        uint32_t u = fpga_flex_bits(map[first + i]);
        int keep = cut.all || u > cut.bits || (u == cut.bits && taken < cut.take);
        if (keep && !cut.all && u == cut.bits) taken++;
        if (keep) flex_mark(s->mark, first + i);
        else dropped = 1;
    }
    if (dropped) flex_mark(s->mark, first); /* the official code's 0 for every id past the cut */
}

/* Steps 6-9 and the CSR rows of head h; k_v, k_s: the top-k size shared by all heads. */
static uint32_t select_head(const sigu_args *a, sigu_chip *s, int h, int k_v, int k_s,
                            uint32_t base)
{
    const int nb = (a->n + BS - 1) / BS;
    const fpga_flex_head_info *hi = &a->info[h];
    memset(s->mark, 0, ((size_t)nb * nb + 31) / 32 * 4);
    s->vblk[h][0] = INFINITY;
    s->sblk[h][nb - 1] = INFINITY;
    flex_top_k(s->sblk[h], nb, k_s, s->ssel, s->cand);
    for (int e = 0; e < k_s; e++) s->ssel[e] = e >= (int)hi->n_slash ? 0 : (nb - 1) - s->ssel[e];
    flex_top_k(s->vblk[h], nb, k_v, s->vsel, s->cand);
    for (int e = 0; e < k_v; e++)
        if (e >= (int)hi->n_vertical) s->vsel[e] = 0;
    const uint64_t nb2 = (uint64_t)nb * nb;
    for (int e = 0; e < k_v; e++)
        for (int r = 0; r < nb; r++)
            flex_mark(s->mark, r < s->vsel[e] ? 0 : (uint64_t)r * nb + (uint64_t)s->vsel[e]);
    for (int e = 0; e < k_s; e++)
        for (int r = 0; r < nb; r++) {
            uint64_t id = (uint64_t)r * nb + r + (uint64_t)s->ssel[e] * nb;
            flex_mark(s->mark, id >= nb2 ? 0 : id);
        }
    fpga_k_cycles((uint64_t)nb * (k_v + k_s) / FPGA_FLEX_SCAN_LANES);
    if (hi->query_aware) query_aware_map(a, s, h);

    /* CSR rows, causal blocks only, written as two bursts */
    uint32_t k = 0;
    uint32_t *out = a->col + base;
    for (int r = 0; r < nb; r++) {
        s->rows[r] = base + k;
        for (int c = 0; r >= a->q0 && c <= r; c++) /* a chunk's rows only */
            if (flex_marked(s->mark, (uint64_t)r * nb + c)) out[k++] = (uint32_t)c;
    }
    s->rows[nb] = base + k;
    fpga_k_cycles(nb2 / 32);
    fpga_k_write(out, (uint64_t)k * 4);
    fpga_k_write(a->row_ptr + (uint64_t)h * (nb + 1), (uint64_t)(nb + 1) * 4);
    memcpy(a->row_ptr + (uint64_t)h * (nb + 1), s->rows, (size_t)(nb + 1) * 4);
    return k;
}

uint64_t fpga_flex_sigu_chip_bytes(void)
{
    return sizeof(sigu_chip);
}

void flex_sigu(const fpga_flex_buf *qbuf, const fpga_flex_buf *kvbuf, float *scratch,
               uint32_t *row_ptr, uint32_t *col, fpga_flex_head_info *info, uint32_t n,
               uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, uint32_t gamma_bits,
               uint32_t tau_bits, uint32_t min_blocks, uint32_t max_blocks,
               uint32_t gqa_interleave, uint32_t q0, void *chip_mem)
{
    sigu_chip *chip = chip_mem;
#pragma HLS INTERFACE m_axi port = qbuf offset = slave bundle = gmem0
#pragma HLS INTERFACE m_axi port = kvbuf offset = slave bundle = gmem1
#pragma HLS INTERFACE m_axi port = scratch offset = slave bundle = gmem2
#pragma HLS INTERFACE m_axi port = row_ptr offset = slave bundle = gmem3
#pragma HLS INTERFACE m_axi port = col offset = slave bundle = gmem3
#pragma HLS INTERFACE m_axi port = info offset = slave bundle = gmem3
#pragma HLS INTERFACE s_axilite port = return
    sigu_args a = {qbuf, kvbuf, scratch, row_ptr, col, info, (int)n, (int)n_heads,
                   (int)n_kv_heads, (int)head_dim, (int)gqa_interleave,
                   fpga_flex_f32(gamma_bits), fpga_flex_f32(tau_bits), (int)min_blocks,
                   (int)max_blocks, (int)q0};
    const int nb = (a.n + BS - 1) / BS;
    for (int g = 0; g < a.Hk; g++) estimate_group(&a, chip, g);
    int k_v = 0, k_s = 0;
    for (int h = 0; h < a.H; h++) {
        if ((int)info[h].n_vertical > k_v) k_v = (int)info[h].n_vertical;
        if ((int)info[h].n_slash > k_s) k_s = (int)info[h].n_slash;
    }
    if (k_v > nb) k_v = nb;
    if (k_s > nb) k_s = nb;
    uint32_t base = 0;
    for (int h = 0; h < a.H; h++) base += select_head(&a, chip, h, k_v, k_s, base);
    fpga_k_write(info, (uint64_t)a.H * sizeof *info);
}

static int flex_sigu_adapter(const fpga_kargs *k)
{
    const uint32_t n = (uint32_t)k->a[6].u, H = (uint32_t)k->a[7].u, Hk = (uint32_t)k->a[8].u;
    const uint32_t d = (uint32_t)k->a[9].u, minb = (uint32_t)k->a[12].u,
                   maxb = (uint32_t)k->a[13].u;
    if (n < 2 * BS || n > FPGA_FLEX_MAX_TOKENS || H < 1 || H > FPGA_FLEX_MAX_HEADS || Hk < 1 ||
        H % Hk || H / Hk > MAXG || d < 1 || d > MAXD || minb < 1 || maxb < 1 ||
        k->a[14].u > 1)
        return -1;
    const uint64_t nb = (n + BS - 1) / BS;
    if (!fpga_k_range_ok(0, (uint64_t)H * nb * fpga_flex_qblock_bytes((int)d), k->a[0].size) ||
        !fpga_k_range_ok(0, (uint64_t)Hk * nb * fpga_flex_kvblock_bytes((int)d), k->a[1].size) ||
        !fpga_k_range_ok(0, fpga_flex_sigu_scratch_bytes((int)n, (int)H, (int)Hk, (int)d),
                         k->a[2].size) ||
        !fpga_k_range_ok(0, (uint64_t)H * (nb + 1) * 4, k->a[3].size) ||
        !fpga_k_range_ok(0, fpga_flex_col_capacity((int)n, (int)H) * 4, k->a[4].size) ||
        !fpga_k_range_ok(0, (uint64_t)H * sizeof(fpga_flex_head_info), k->a[5].size))
        return -1;
    float gamma = fpga_flex_f32((uint32_t)k->a[10].u), tau = fpga_flex_f32((uint32_t)k->a[11].u);
    if (!(gamma > 0 && gamma <= 1) || !(tau >= 0 && tau <= 1)) return -1;
    sigu_chip *chip = calloc(1, sizeof *chip);
    if (!chip) return -1;
    fpga_flex_buf qb, kvb;
    fpga_flex_buf_flat(&qb, k->a[0].ptr, fpga_flex_qblock_bytes((int)d));
    fpga_flex_buf_flat(&kvb, k->a[1].ptr, fpga_flex_kvblock_bytes((int)d));
    flex_sigu(&qb, &kvb, k->a[2].ptr, k->a[3].ptr, k->a[4].ptr, k->a[5].ptr, n, H,
              Hk, d, (uint32_t)k->a[10].u, (uint32_t)k->a[11].u, minb, maxb,
              (uint32_t)k->a[14].u, 0, chip);
    free(chip);
    return 0;
}

const fpga_k_desc fpga_k_flex_sigu_desc = {
    .name = "flex_sigu",
    .n_args = 15,
    .kinds = {FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL,
              FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32},
    .run = flex_sigu_adapter,
};

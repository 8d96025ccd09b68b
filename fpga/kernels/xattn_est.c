/* fpga/kernels/xattn_est.c — the card's block lists for XAttention and Tri-shape, a unit of the
 * prefill kernel beside FAST-Prefill's SIGU (flex_sigu.c) and a kernel of its own for tests.
 *
 * XAttention (mit-han-lab/x-attention xattn_estimate + find_blocks_chunked, as cpu/xattn.c
 * reproduces them; cpu/sparse_idx.h lists the steps): per query head h and query block I >= q0,
 *   - the block's 128 / S reshaped query rows i (row i = queries iS + S-1 .. iS, reversed) are
 *     scored against every reshaped key j <= i (keys jS .. jS + S-1): the sum of S token dot
 *     products along one antidiagonal of the S x S tile, each an int8 x int8 product summed in
 *     int32 and scaled by the two rows' scales once (the MPU, like the SIGU's logits), summed
 *     in float64 in t order, times 1 / sqrt(d) / S;
 *   - softmax over j in float32 with the reference's steps (max, expf, float64 sum, one float
 *     reciprocal), and the row's probabilities summed into its key blocks' masses A[J] (float64,
 *     rows and keys in ascending order: the reference's order, so A is the reference's to the
 *     last bit given the same logits);
 *   - selection: block 0 and the diagonal first, the others sorted by mass descending (ties:
 *     lower block first), kept while the running sum is below threshold x the row's total — the
 *     block that crosses it is kept too; threshold 1 keeps every causal block.
 * The logits differ from the reference's float32 dot products of the dequantized rows only in
 * rounding (the reference rounds every product, the card scales one exact int32 sum), so a set
 * can differ only where a block's inclusion is decided within that rounding of the threshold;
 * the tests check equal sets on random and structured inputs (tests/fpga/test_xattn_card.c).
 *
 * Schedule (what the timing model is charged): per query head, per query block I: the q block
 * in one burst, then the K half of key blocks 0..I streamed in increasing order, one burst each
 * (the Key Block Fetch Unit of FAST-Prefill's SIGU, here once per query block: every query
 * block needs every key before it — XAttention's estimate is quadratic where FlexPrefill's
 * last-block estimate is linear); the logits of the block's reshaped rows go to an on-chip
 * buffer (FPGA_XATTN_ROWBUF), the SFU runs the softmax and the block sums over it while the
 * MPU scores the next query block, and the row's selection is a sorter of the I - 1 candidate
 * masses (FPGA_FLEX_SCAN_LANES comparisons per cycle, m log2 m of them). Charged: MPU cycles =
 * (reshaped pairs) x S x d / FPGA_FLEX_MPU_MACS, SFU cycles = 2 x pairs / FPGA_FLEX_SFU_LANES
 * (exp; scale and block sum), the larger of the two per query block, plus the sort; one command
 * per q block, key block and CSR row. fpga_xattn_model (fpga/xattn_model.c) computes the same.
 *
 * Tri-shape (openvino.genai TriShapeSparseAttentionTokenSkipper, cpu_trishape_index_build):
 * every causal block of rows q0.. except key blocks [tri_lo, tri_hi): no arithmetic, the CSR
 * written row by row.
 *
 * Arguments of the kernel (xclbin order): 0 qbuf  1 kvbuf  2 row_ptr  3 col (globals)  4 n
 * 5 q0  6 n_heads  7 n_kv_heads  8 head_dim  9 method  10 stride  11 thr_lo  12 thr_hi
 * 13 tri_lo  14 tri_hi (u32). */
#include "fpga/kernels/xattn_kernel.h"
#include <math.h>
#include <stdlib.h>

#define BS    FPGA_FLEX_BS
#define MAXD  FPGA_FLEX_MAX_D
#define MAXNB FPGA_FLEX_MAX_NB

typedef struct xpair {
    double v;
    int32_t id;
} xpair;

typedef struct xattn_chip {
    int8_t qb[BS][MAXD]; /* the query block */
    float qs[BS];
    int8_t kb[BS][MAXD]; /* Key Block Buffer */
    float ks[BS];
    float row[FPGA_XATTN_ROWBUF]; /* logits / probabilities of the block's reshaped rows */
    double A[MAXNB];
    xpair cand[MAXNB], tmp[MAXNB];
    uint32_t out[MAXNB];
} xattn_chip;

uint64_t fpga_xattn_chip_bytes(void)
{
    return sizeof(xattn_chip);
}

static int32_t dot8(const int8_t *a, const int8_t *b, int d)
{
    int32_t acc = 0;
    for (int e = 0; e < d; e++) {
#pragma HLS UNROLL factor = 32
        acc += (int32_t)a[e] * b[e];
    }
    return acc;
}

static void load_block(const uint8_t *p, int d, int8_t (*v)[MAXD], float *s)
{
    for (int r = 0; r < BS; r++) {
        memcpy(v[r], p + (size_t)r * d, (size_t)d);
        memcpy(&s[r], p + (size_t)BS * d + 4 * (size_t)r, 4);
    }
}

/* (value descending, id ascending): a strict total order, so the sorted order is unique. */
static int before(const xpair *a, const xpair *b)
{
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

/* Bottom-up merge sort of c[0..m) (the hardware's sorting network, in sequence). */
static void sort_pairs(xpair *c, xpair *t, int m)
{
    for (int w = 1; w < m; w *= 2) {
        for (int lo = 0; lo < m; lo += 2 * w) {
            int mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
            int a = lo, b = mid, k = lo;
            while (a < mid && b < hi) t[k++] = before(&c[b], &c[a]) ? c[b++] : c[a++];
            while (a < mid) t[k++] = c[a++];
            while (b < hi) t[k++] = c[b++];
        }
        for (int i = 0; i < m; i++) c[i] = t[i];
    }
}

static uint64_t log2_ceil(uint64_t m)
{
    uint64_t k = 0;
    while ((1ull << k) < m) k++;
    return k;
}

/* Cycles of the sorter over m candidates. */
static uint64_t sort_cycles(uint64_t m)
{
    return m > 1 ? (m * log2_ceil(m) + FPGA_FLEX_SCAN_LANES - 1) / FPGA_FLEX_SCAN_LANES : 0;
}

/* Row I's kept blocks (ascending) into s->out; returns their count. */
static int select_row(xattn_chip *s, int I, double thr)
{
    int n = 0;
    if (thr >= 1.0) {
        for (int J = 0; J <= I; J++) s->out[n++] = (uint32_t)J;
        return n;
    }
    double total = 0;
    for (int J = 0; J <= I; J++) total += s->A[J];
    const double required = total * thr;
    int m = 0, k = 0;
    for (int J = 1; J < I; J++) s->cand[m++] = (xpair){s->A[J], J};
    sort_pairs(s->cand, s->tmp, m);
    double run = I > 0 ? s->A[0] + s->A[I] : s->A[0];
    while (k < m && run < required) run += s->cand[k++].v;
    /* the kept others in ascending id order: a bit map pass over 1..I-1 */
    for (int J = 1; J < I; J++) s->A[J] = 0; /* reused as the mark (A is done) */
    for (int e = 0; e < k; e++) s->A[s->cand[e].id] = 1;
    s->out[n++] = 0;
    for (int J = 1; J < I; J++)
        if (s->A[J] != 0) s->out[n++] = (uint32_t)J;
    if (I > 0) s->out[n++] = (uint32_t)I;
    return n;
}

typedef struct est {
    const fpga_flex_buf *qbuf, *kvbuf;
    int n, nb, H, Hk, d, S, rpb;
    float scale;
    double thr;
} est;

/* Query block I of head h (KV head g): the masses of its key blocks into s->A[0..I]. */
static void block_masses(const est *a, xattn_chip *s, int h, int g, int I)
{
    const int S = a->S, rpb = a->rpb, n = a->n, d = a->d;
    const int i0 = I * rpb, nrs = (n + S - 1) / S;
    const int i1 = (I + 1) * rpb < nrs ? (I + 1) * rpb : nrs; /* rows holding a real query */
    const int W = (I + 1) * rpb;                                /* row stride in the buffer */
    const uint8_t *qp = fpga_flex_blk(a->qbuf, (uint64_t)h * a->nb + I);
    fpga_k_read(qp, fpga_flex_qblock_bytes(d));
    load_block(qp, d, s->qb, s->qs);
    uint64_t pairs = 0;
    for (int c = 0; c <= I; c++) {
        const uint8_t *kp = fpga_flex_blk(a->kvbuf, (uint64_t)g * a->nb + c);
        fpga_k_read(kp, fpga_flex_qblock_bytes(d)); /* the K half: values + scales */
        load_block(kp, d, s->kb, s->ks);
        for (int i = i0; i < i1; i++) {
            const int j1 = (c + 1) * rpb < i + 1 ? (c + 1) * rpb : i + 1;
            for (int j = c * rpb; j < j1; j++) {
#pragma HLS PIPELINE II = 1
                double acc = 0;
                for (int t = 0; t < S; t++) {
                    const int q = i * S + S - 1 - t, k = j * S + t;
                    if (q >= n || k >= n) continue;
                    acc += (double)((float)dot8(s->qb[q - I * BS], s->kb[k - c * BS], d) *
                                    s->qs[q - I * BS] * s->ks[k - c * BS]);
                }
                s->row[(size_t)(i - i0) * W + j] = (float)acc * a->scale;
                pairs++;
            }
        }
    }
    for (int J = 0; J <= I; J++) s->A[J] = 0;
    for (int i = i0; i < i1; i++) {
        float *r = s->row + (size_t)(i - i0) * W;
        float mx = -INFINITY;
        for (int j = 0; j <= i; j++)
            if (r[j] > mx) mx = r[j];
        double sum = 0;
        for (int j = 0; j <= i; j++) {
            r[j] = expf(r[j] - mx);
            sum += r[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int j = 0; j <= i; j++) s->A[j / rpb] += (double)(r[j] * inv);
    }
    const uint64_t mpu = pairs * (uint64_t)S * d / FPGA_FLEX_MPU_MACS;
    const uint64_t sfu = 2 * pairs / FPGA_FLEX_SFU_LANES;
    fpga_k_cycles((mpu > sfu ? mpu : sfu) + sort_cycles(I > 1 ? (uint64_t)I - 1 : 0));
}

void xattn_est(const fpga_flex_buf *qbuf, const fpga_flex_buf *kvbuf, uint32_t *row_ptr,
               uint32_t *col, uint32_t n, uint32_t q0, uint32_t n_heads, uint32_t n_kv_heads,
               uint32_t head_dim, const fpga_xattn_params *p, void *chip)
{
#pragma HLS INTERFACE m_axi port = qbuf offset = slave bundle = gmem0
#pragma HLS INTERFACE m_axi port = kvbuf offset = slave bundle = gmem1
#pragma HLS INTERFACE m_axi port = row_ptr offset = slave bundle = gmem2
#pragma HLS INTERFACE m_axi port = col offset = slave bundle = gmem2
#pragma HLS INTERFACE s_axilite port = return
    xattn_chip *s = chip;
    est a = {.qbuf = qbuf, .kvbuf = kvbuf, .n = (int)n, .H = (int)n_heads, .Hk = (int)n_kv_heads,
             .d = (int)head_dim, .S = (int)p->stride};
    a.nb = (a.n + BS - 1) / BS;
    a.rpb = a.S ? BS / a.S : 0;
    a.scale = a.S ? (float)(1.0 / sqrt((double)a.d) / a.S) : 0;
    a.thr = fpga_xattn_f64(p->thr_lo, p->thr_hi);
    const int G = a.H / a.Hk, nb = a.nb;
    uint32_t k = 0;
    for (int h = 0; h < a.H; h++) {
        uint32_t *rp = row_ptr + (uint64_t)h * (nb + 1);
        for (int r = 0; r < nb; r++) {
            rp[r] = k;
            if (r < (int)q0) continue;
            int cnt = 0;
            if (p->method == FPGA_XATTN_METHOD_TRISHAPE) {
                for (int c = 0; c <= r; c++)
                    if (c < (int)p->tri_lo || c >= (int)p->tri_hi) s->out[cnt++] = (uint32_t)c;
                fpga_k_cycles(((uint64_t)cnt + FPGA_FLEX_SCAN_LANES - 1) / FPGA_FLEX_SCAN_LANES);
            } else {
                block_masses(&a, s, h, h / G, r);
                cnt = select_row(s, r, a.thr);
            }
            fpga_k_write(col + k, (uint64_t)cnt * 4);
            memcpy(col + k, s->out, (size_t)cnt * 4);
            k += (uint32_t)cnt;
        }
        rp[nb] = k;
        fpga_k_write(rp, (uint64_t)(nb + 1) * 4);
    }
}

/* ---------------------------------------------------------------- the kernel (tests) */

static int xattn_est_adapter(const fpga_kargs *k)
{
    const uint32_t n = (uint32_t)k->a[4].u, q0 = (uint32_t)k->a[5].u, H = (uint32_t)k->a[6].u;
    const uint32_t Hk = (uint32_t)k->a[7].u, d = (uint32_t)k->a[8].u;
    fpga_xattn_params p = {.method = (uint32_t)k->a[9].u, .stride = (uint32_t)k->a[10].u,
                           .thr_lo = (uint32_t)k->a[11].u, .thr_hi = (uint32_t)k->a[12].u,
                           .tri_lo = (uint32_t)k->a[13].u, .tri_hi = (uint32_t)k->a[14].u};
    if (!fpga_xattn_ok(n, q0, H, Hk, d, &p)) return -1;
    const uint64_t nb = (n + BS - 1) / BS;
    if (!fpga_k_range_ok(0, (uint64_t)H * nb * fpga_flex_qblock_bytes((int)d), k->a[0].size) ||
        !fpga_k_range_ok(0, (uint64_t)Hk * nb * fpga_flex_kvblock_bytes((int)d), k->a[1].size) ||
        !fpga_k_range_ok(0, (uint64_t)H * (nb + 1) * 4, k->a[2].size) ||
        !fpga_k_range_ok(0, fpga_flex_col_capacity((int)n, (int)H) * 4, k->a[3].size))
        return -1;
    void *chip = calloc(1, sizeof(xattn_chip));
    if (!chip) return -1;
    fpga_flex_buf qb, kvb;
    fpga_flex_buf_flat(&qb, k->a[0].ptr, fpga_flex_qblock_bytes((int)d));
    fpga_flex_buf_flat(&kvb, k->a[1].ptr, fpga_flex_kvblock_bytes((int)d));
    xattn_est(&qb, &kvb, k->a[2].ptr, k->a[3].ptr, n, q0, H, Hk, d, &p, chip);
    free(chip);
    return 0;
}

const fpga_k_desc fpga_k_xattn_est_desc = {
    .name = "xattn_est",
    .n_args = 15,
    .kinds = {FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32},
    .run = xattn_est_adapter,
};

/* fpga/kernels/flex_sau.c — FAST-Prefill's Sparse Attention Unit (Sec. IV-C): block-sparse causal
 * attention over the SIGU's CSR lists, block-major, with the liveness-driven dual-tier KV cache.
 *
 * Job list (linear-time bucketization, no sort): pass 1 counts the uses of every KV block
 * (kv head g, key block c) per query head of g; pass 2 writes each (query block) consumer into
 * its (block, head) bucket, rows ascending. The counts are the block-use counters: the exact
 * number of tiles that still need the block (the remaining-use counter of the cache).
 *
 * Query blocks q0 .. nb - 1 are computed (a chunk after q0 x 128 cached tokens: rows before
 * q0 have no jobs and no output; keys are every block up to the diagonal, cached ones included).
 *
 * Block-major schedule with keyed accumulation. Query blocks are taken in windows of W whose
 * output accumulators (G heads x W blocks x 128 rows x (d + 2) floats) fit on chip; within a
 * window the unit walks key blocks c = 0, 1, ... in increasing order (one HBM stream), and each
 * block that has consumers in the window is fetched or found in the cache once and then used by
 * all of them: every (head, query block) of the group that lists it (GQA sharing). A consumer's
 * partial result goes into its accumulator by (head, query block) — the keyed accumulation —
 * and since every row sees its blocks in increasing order, its online softmax runs in the same
 * block order as the row-major reference. (The paper does not say how the accumulators of all
 * query blocks fit on chip at 128K; the window is our answer, and W is a kernel argument.)
 *
 * Cache (FAST-Prefill: URAM, tags in BRAM, 16 MB in the paper's design): `cache_blocks` KV
 * blocks, of which `hot_blocks` form the hot tier. After a block's consumers in a window are
 * served its remaining-use counter says whether it is dead (0: evicted at once, "evict on nil")
 * or live; a live block not yet resident is admitted to the hot tier when its remaining uses
 * exceed half the query blocks (the paper's threshold), else to the cold tier; a full tier
 * evicts its resident with the fewest remaining uses if that is fewer than the newcomer's,
 * otherwise the newcomer bypasses. Resident blocks stay in their tier until they die or lose
 * to a block with more remaining uses.
 *
 * Arithmetic (W8A8, flex_kernel.h): S = (Q8 . K8) x q_scale x k_scale x softmax_scale in int32
 * then float; online softmax in float (exp, running max and sum per row); P' = P x v_scale per
 * key, quantized per row to int8 with scale max(P') / 127; O += (P'8 . V8) x that scale (int32).
 * mode 1 runs the schedule, the cache and the accounting without the arithmetic (outputs are
 * not written): the same statistics at any length, for the benchmarks.
 *
 * Arguments: 0 qbuf  1 kvbuf  2 row_ptr  3 col  4 jobs (scratch, 4 x nnz bytes)  5 out (float32
 * blocks, (n_heads, nb, 128, d): flex_kernel.h)  6 stats (fpga_flex_sau_stats)  7 n  8 n_heads  9 n_kv_heads  10 head_dim
 * 11 gqa_interleave  12 cache_blocks  13 hot_blocks  14 window  15 mode  (scalars u32). */
#include "fpga/kernels/flex_kernel.h"
#include <math.h>
#include <stdlib.h>

#define BS    FPGA_FLEX_BS
#define MAXD  FPGA_FLEX_MAX_D
#define MAXNB FPGA_FLEX_MAX_NB
#define MAXG  FPGA_FLEX_MAX_GROUP
#define MAXW  FPGA_FLEX_MAX_WINDOW
#define MAXC  FPGA_FLEX_MAX_CACHE
#define KVB   (2 * (BS * MAXD + BS * 4))
#define NOBLK 0xffffffffu

typedef struct sau_chip {
    float acc[MAXW][MAXG][BS][MAXD];
    float m[MAXW][MAXG][BS], l[MAXW][MAXG][BS];
    int8_t qt[MAXW][MAXG][BS][MAXD];
    float qs[MAXW][MAXG][BS];
    uint8_t slot[MAXC][KVB];  /* cache data (URAM) */
    uint32_t slot_blk[MAXC];  /* tag: g * nb + c, or NOBLK (BRAM) */
    uint8_t slot_hot[MAXC];
    uint8_t stage[KVB];       /* a fetched block that is not cached */
    int32_t where[FPGA_FLEX_MAX_HEADS * MAXNB]; /* slot of each KV block, -1 */
    uint32_t remaining[FPGA_FLEX_MAX_HEADS * MAXNB];
    uint32_t start[FPGA_FLEX_MAX_HEADS * MAXNB + 1]; /* bucket (block, head u) offsets */
    uint32_t cursor[FPGA_FLEX_MAX_HEADS * MAXNB];
    float p[BS];
    int8_t p8[BS];
} sau_chip;

typedef struct sau {
    const fpga_flex_buf *qbuf, *kvbuf, *out;
    const uint32_t *row_ptr, *col;
    uint32_t *jobs;
    fpga_flex_sau_stats st;
    int n, H, Hk, d, G, nb, q0, interleave, cache, hot, W, mode;
    float scale;
} sau;

static int head_of(const sau *a, int g, int u)
{
    return a->interleave ? g + u * a->Hk : g * a->G + u;
}

static int32_t dot8(const int8_t *x, const int8_t *y, int d)
{
    int32_t acc = 0;
    for (int e = 0; e < d; e++) {
#pragma HLS UNROLL factor = 32
        acc += (int32_t)x[e] * y[e];
    }
    return acc;
}

/* ---------------------------------------------------------------- job list */

static void build_jobs(sau *a, sau_chip *s)
{
    const int nb = a->nb, G = a->G, buckets = a->Hk * nb * G;
    for (int b = 0; b <= buckets; b++) s->start[b] = 0;
    for (int i = 0; i < a->Hk * nb; i++) s->remaining[i] = 0;
    /* pass 1: counts per (block, head of its group) */
    for (int h = 0; h < a->H; h++) {
        const int g = a->interleave ? h % a->Hk : h / G, u = a->interleave ? h / a->Hk : h % G;
        const uint32_t *rp = a->row_ptr + (uint64_t)h * (nb + 1);
        fpga_k_read(rp, (uint64_t)(nb + 1) * 4);
        fpga_k_read(a->col + rp[0], (uint64_t)(rp[nb] - rp[0]) * 4);
        for (uint32_t e = rp[0]; e < rp[nb]; e++) {
            s->start[((uint64_t)g * nb + a->col[e]) * G + u + 1]++;
            s->remaining[(uint64_t)g * nb + a->col[e]]++;
        }
        a->st.index_bytes += (uint64_t)(nb + 1) * 4 + (uint64_t)(rp[nb] - rp[0]) * 4;
        fpga_k_cycles(rp[nb] - rp[0]);
    }
    for (int b = 0; b < buckets; b++) s->start[b + 1] += s->start[b];
    for (int b = 0; b < buckets; b++) s->cursor[b] = s->start[b];
    /* pass 2: consumers into their buckets, rows ascending */
    for (int h = 0; h < a->H; h++) {
        const int g = a->interleave ? h % a->Hk : h / G, u = a->interleave ? h / a->Hk : h % G;
        const uint32_t *rp = a->row_ptr + (uint64_t)h * (nb + 1);
        fpga_k_read(a->col + rp[0], (uint64_t)(rp[nb] - rp[0]) * 4);
        for (int r = 0; r < nb; r++)
            for (uint32_t e = rp[r]; e < rp[r + 1]; e++)
                a->jobs[s->cursor[((uint64_t)g * nb + a->col[e]) * G + u]++] = (uint32_t)r;
        fpga_k_cycles(rp[nb] - rp[0]);
    }
    fpga_k_write(a->jobs, (uint64_t)s->start[buckets] * 4);
    a->st.index_bytes += (uint64_t)s->start[buckets] * 4 * 2;
    for (int b = 0; b < buckets; b++) s->cursor[b] = s->start[b];
}

/* ---------------------------------------------------------------- cache */

static int victim(const sau *a, const sau_chip *s, int hot)
{
    int v = -1;
    for (int i = 0; i < a->cache; i++) {
        if (s->slot_blk[i] == NOBLK || s->slot_hot[i] != hot) continue;
        if (v < 0 || s->remaining[s->slot_blk[i]] < s->remaining[s->slot_blk[v]]) v = i;
    }
    return v;
}

static int free_slot(const sau *a, const sau_chip *s)
{
    for (int i = 0; i < a->cache; i++)
        if (s->slot_blk[i] == NOBLK) return i;
    return -1;
}

static void evict(sau *a, sau_chip *s, int slot, int live)
{
    s->where[s->slot_blk[slot]] = -1;
    s->slot_blk[slot] = NOBLK;
    if (live) a->st.evicted_live++;
    else a->st.evicted_dead++;
}

/* Admission of a live block that was just fetched into the stage buffer. */
static void admit(sau *a, sau_chip *s, uint32_t blk, int *used_hot, int *used_cold)
{
    const uint32_t rem = s->remaining[blk];
    int hot = rem > (uint32_t)(a->nb - a->q0) / 2; /* FAST-Prefill: 50% of the query blocks */
    for (int tries = 0; tries < 2; tries++, hot = 0) {
        const int cap = hot ? a->hot : a->cache - a->hot;
        int *used = hot ? used_hot : used_cold;
        int slot = -1;
        if (*used < cap) {
            slot = free_slot(a, s);
            (*used)++;
        } else {
            int v = victim(a, s, hot);
            if (v >= 0 && s->remaining[s->slot_blk[v]] < rem) {
                evict(a, s, v, 1);
                slot = v;
            }
        }
        if (slot < 0) {
            if (!hot) break;
            continue; /* a hot candidate the hot tier refuses may still go cold */
        }
        s->slot_blk[slot] = blk;
        s->slot_hot[slot] = (uint8_t)hot;
        s->where[blk] = slot;
        if (a->mode == 0) memcpy(s->slot[slot], s->stage, (size_t)fpga_flex_kvblock_bytes(a->d));
        if (hot) a->st.admitted_hot++;
        else a->st.admitted_cold++;
        return;
    }
    a->st.bypassed++;
}

/* ---------------------------------------------------------------- one tile */

static void tile(sau *a, sau_chip *s, const uint8_t *kvb, int w, int u, int r, int c)
{
    const int d = a->d, n = a->n;
    const int8_t *k8 = (const int8_t *)kvb;
    const uint8_t *ksp = kvb + (size_t)BS * d;
    const int8_t *v8 = (const int8_t *)(kvb + fpga_flex_qblock_bytes(d));
    const uint8_t *vsp = kvb + fpga_flex_qblock_bytes(d) + (size_t)BS * d;
    for (int i = 0; i < BS; i++) {
        const int t = r * BS + i;
        if (t >= n) break;
        const int jn = c * BS + BS - 1 <= t ? BS : t - c * BS + 1; /* causal inside the diagonal */
        const float qsc = s->qs[w][u][i] * a->scale;
        float mx = s->m[w][u][i];
        for (int j = 0; j < jn; j++) {
            float ks;
            memcpy(&ks, ksp + 4 * (size_t)j, 4);
            s->p[j] = (float)dot8(s->qt[w][u][i], k8 + (size_t)j * d, d) * qsc * ks;
            if (s->p[j] > mx) mx = s->p[j];
        }
        const float corr = expf(s->m[w][u][i] - mx);
        float sum = 0, pmax = 0;
        for (int j = 0; j < jn; j++) {
            float vs;
            memcpy(&vs, vsp + 4 * (size_t)j, 4);
            s->p[j] = expf(s->p[j] - mx);
            sum += s->p[j];
            s->p[j] *= vs; /* P' = P x v scale: folds the per-key V scale into the int8 P */
            if (s->p[j] > pmax) pmax = s->p[j];
        }
        s->m[w][u][i] = mx;
        s->l[w][u][i] = s->l[w][u][i] * corr + sum;
        float *acc = s->acc[w][u][i];
        for (int e = 0; e < d; e++) acc[e] *= corr;
        if (pmax == 0) continue;
        const float sp = pmax / 127.0f;
        for (int j = 0; j < jn; j++) s->p8[j] = (int8_t)rintf(s->p[j] / sp);
        for (int e = 0; e < d; e++) {
            int32_t iacc = 0;
            for (int j = 0; j < jn; j++) iacc += (int32_t)s->p8[j] * v8[(size_t)j * d + e];
            acc[e] += (float)iacc * sp;
        }
    }
}

/* ---------------------------------------------------------------- schedule */

static void run_window(sau *a, sau_chip *s, int g, int r0, int r1, int *used_hot, int *used_cold)
{
    const int d = a->d, nb = a->nb, G = a->G;
    const uint64_t qb = fpga_flex_qblock_bytes(d), kvbytes = fpga_flex_kvblock_bytes(d);
    /* the window's query tiles and fresh accumulators */
    for (int u = 0; u < G; u++)
        for (int r = r0; r < r1; r++) {
            const int w = r - r0, h = head_of(a, g, u);
            const uint8_t *p = fpga_flex_blk(a->qbuf, (uint64_t)h * nb + r);
            fpga_k_read(p, qb);
            a->st.q_bytes += qb;
            if (a->mode) continue;
            for (int i = 0; i < BS; i++) {
                memcpy(s->qt[w][u][i], p + (size_t)i * d, (size_t)d);
                memcpy(&s->qs[w][u][i], p + (size_t)BS * d + 4 * (size_t)i, 4);
                s->m[w][u][i] = -INFINITY;
                s->l[w][u][i] = 0;
                memset(s->acc[w][u][i], 0, sizeof(float) * d);
            }
        }
    for (int c = 0; c < r1; c++) {
        const uint32_t blk = (uint32_t)g * nb + c;
        uint32_t ends[MAXG], njobs = 0;
        for (int u = 0; u < G; u++) {
            uint32_t e = s->cursor[(uint64_t)blk * G + u];
            const uint32_t end = s->start[(uint64_t)blk * G + u + 1];
            while (e < end && a->jobs[e] < (uint32_t)r1) e++;
            ends[u] = e;
            njobs += e - s->cursor[(uint64_t)blk * G + u];
        }
        if (!njobs) continue;
        a->st.accesses++;
        const uint8_t *kvb;
        if (s->where[blk] >= 0) {
            a->st.hits++;
            if (s->slot_hot[s->where[blk]]) a->st.hot_hits++;
            else a->st.cold_hits++;
            kvb = s->slot[s->where[blk]];
        } else {
            a->st.misses++;
            const uint8_t *p = fpga_flex_blk(a->kvbuf, blk);
            fpga_k_read(p, kvbytes);
            a->st.kv_bytes += kvbytes;
            if (a->mode == 0) memcpy(s->stage, p, (size_t)kvbytes);
            kvb = s->stage;
        }
        a->st.kv_bytes_nocache += kvbytes;
        fpga_k_read(a->jobs + s->cursor[(uint64_t)blk * G], (uint64_t)njobs * 4);
        for (int u = 0; u < G; u++) {
            for (uint32_t e = s->cursor[(uint64_t)blk * G + u]; e < ends[u]; e++) {
                if (a->mode == 0) tile(a, s, kvb, (int)a->jobs[e] - r0, u, (int)a->jobs[e], c);
                a->st.jobs++;
                a->st.kv_bytes_naive += kvbytes;
            }
            s->cursor[(uint64_t)blk * G + u] = ends[u];
        }
        s->remaining[blk] -= njobs;
        uint64_t mpu = (uint64_t)njobs * 2 * BS * BS * d / FPGA_FLEX_MPU_MACS;
        uint64_t sfu = (uint64_t)njobs * BS * BS / FPGA_FLEX_SFU_LANES;
        a->st.mpu_cycles += mpu;
        a->st.sfu_cycles += sfu;
        fpga_k_cycles(mpu > sfu ? mpu : sfu);
        if (s->where[blk] >= 0) {
            if (!s->remaining[blk]) {
                if (s->slot_hot[s->where[blk]]) (*used_hot)--;
                else (*used_cold)--;
                evict(a, s, s->where[blk], 0);
            }
        } else if (s->remaining[blk]) {
            admit(a, s, blk, used_hot, used_cold);
        }
    }
    /* normalised outputs, one burst per (head, query block) */
    for (int u = 0; u < G; u++)
        for (int r = r0; r < r1; r++) {
            const int w = r - r0, h = head_of(a, g, u);
            const int rows = (r + 1) * BS <= a->n ? BS : a->n - r * BS;
            float *o = (float *)fpga_flex_blk(a->out, (uint64_t)h * nb + r);
            fpga_k_write(o, (uint64_t)rows * d * 4);
            a->st.out_bytes += (uint64_t)rows * d * 4;
            if (a->mode) continue;
            for (int i = 0; i < rows; i++) {
                const float inv = 1.0f / s->l[w][u][i];
                for (int e = 0; e < d; e++) o[(size_t)i * d + e] = s->acc[w][u][i][e] * inv;
            }
        }
}

uint64_t fpga_flex_sau_chip_bytes(void)
{
    return sizeof(sau_chip);
}

void flex_sau(const fpga_flex_buf *qbuf, const fpga_flex_buf *kvbuf, const uint32_t *row_ptr,
              const uint32_t *col, uint32_t *jobs, const fpga_flex_buf *out,
              fpga_flex_sau_stats *stats, uint32_t n, uint32_t q0, uint32_t n_heads,
              uint32_t n_kv_heads, uint32_t head_dim, uint32_t gqa_interleave,
              uint32_t cache_blocks, uint32_t hot_blocks, uint32_t window, uint32_t mode,
              void *chip)
{
    sau_chip *s = chip;
#pragma HLS INTERFACE m_axi port = qbuf offset = slave bundle = gmem0
#pragma HLS INTERFACE m_axi port = kvbuf offset = slave bundle = gmem1
#pragma HLS INTERFACE m_axi port = row_ptr offset = slave bundle = gmem2
#pragma HLS INTERFACE m_axi port = col offset = slave bundle = gmem2
#pragma HLS INTERFACE m_axi port = jobs offset = slave bundle = gmem2
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem3
#pragma HLS INTERFACE m_axi port = stats offset = slave bundle = gmem3
#pragma HLS INTERFACE s_axilite port = return
    sau a = {.qbuf = qbuf, .kvbuf = kvbuf, .row_ptr = row_ptr, .col = col, .jobs = jobs,
             .out = out, .n = (int)n, .q0 = (int)q0, .H = (int)n_heads, .Hk = (int)n_kv_heads,
             .d = (int)head_dim, .interleave = (int)gqa_interleave, .cache = (int)cache_blocks,
             .hot = (int)hot_blocks, .W = (int)window, .mode = (int)mode};
    a.G = a.H / a.Hk;
    a.nb = (a.n + BS - 1) / BS;
    a.scale = 1.0f / sqrtf((float)a.d);
    build_jobs(&a, s);
    for (int i = 0; i < a.Hk * a.nb; i++) s->where[i] = -1;
    for (int i = 0; i < a.cache; i++) s->slot_blk[i] = NOBLK;
    int used_hot = 0, used_cold = 0;
    for (int g = 0; g < a.Hk; g++)
        for (int r0 = a.q0; r0 < a.nb; r0 += a.W)
            run_window(&a, s, g, r0, r0 + a.W < a.nb ? r0 + a.W : a.nb, &used_hot, &used_cold);
    fpga_k_write(stats, sizeof *stats);
    *stats = a.st;
}

/* The index must be well formed before the kernel indexes on-chip arrays with it. */
static int index_ok(const uint32_t *rp, const uint32_t *col, uint64_t col_size, int H, int nb)
{
    uint32_t prev = 0;
    for (int h = 0; h < H; h++)
        for (int r = 0; r <= nb; r++) {
            uint32_t v = rp[(uint64_t)h * (nb + 1) + r];
            if (v < prev || (uint64_t)v * 4 > col_size) return 0;
            if (r < nb) {
                uint32_t e = rp[(uint64_t)h * (nb + 1) + r + 1];
                if (e < v || (uint64_t)e * 4 > col_size) return 0;
                for (uint32_t i = v; i < e; i++)
                    if (col[i] > (uint32_t)r) return 0;
            }
            prev = v;
        }
    return 1;
}

static int flex_sau_adapter(const fpga_kargs *k)
{
    const uint32_t n = (uint32_t)k->a[7].u, H = (uint32_t)k->a[8].u, Hk = (uint32_t)k->a[9].u;
    const uint32_t d = (uint32_t)k->a[10].u, cache = (uint32_t)k->a[12].u,
                   hot = (uint32_t)k->a[13].u, W = (uint32_t)k->a[14].u;
    if (n < 1 || n > FPGA_FLEX_MAX_TOKENS || H < 1 || H > FPGA_FLEX_MAX_HEADS || Hk < 1 ||
        H % Hk || H / Hk > MAXG || d < 1 || d > MAXD || k->a[11].u > 1 || cache > MAXC ||
        hot > cache || W < 1 || W > MAXW || k->a[15].u > 1)
        return -1;
    const uint64_t nb = (n + BS - 1) / BS;
    if (!fpga_k_range_ok(0, (uint64_t)H * nb * fpga_flex_qblock_bytes((int)d), k->a[0].size) ||
        !fpga_k_range_ok(0, (uint64_t)Hk * nb * fpga_flex_kvblock_bytes((int)d), k->a[1].size) ||
        !fpga_k_range_ok(0, (uint64_t)H * (nb + 1) * 4, k->a[2].size) ||
        !fpga_k_range_ok(0, (uint64_t)H * nb * fpga_flex_oblock_bytes((int)d), k->a[5].size) ||
        !fpga_k_range_ok(0, sizeof(fpga_flex_sau_stats), k->a[6].size))
        return -1;
    if (!index_ok(k->a[2].ptr, k->a[3].ptr, k->a[3].size, (int)H, (int)nb)) return -1;
    const uint32_t nnz = ((const uint32_t *)k->a[2].ptr)[(uint64_t)H * (nb + 1) - 1];
    if (!fpga_k_range_ok(0, (uint64_t)nnz * 4, k->a[4].size)) return -1;
    sau_chip *chip = calloc(1, sizeof *chip);
    if (!chip) return -1;
    fpga_flex_buf qb, kvb, ob;
    fpga_flex_buf_flat(&qb, k->a[0].ptr, fpga_flex_qblock_bytes((int)d));
    fpga_flex_buf_flat(&kvb, k->a[1].ptr, fpga_flex_kvblock_bytes((int)d));
    fpga_flex_buf_flat(&ob, k->a[5].ptr, fpga_flex_oblock_bytes((int)d));
    flex_sau(&qb, &kvb, k->a[2].ptr, k->a[3].ptr, k->a[4].ptr, &ob, k->a[6].ptr, n, 0, H, Hk, d, (uint32_t)k->a[11].u, cache, hot, W,
             (uint32_t)k->a[15].u, chip);
    free(chip);
    return 0;
}

const fpga_k_desc fpga_k_flex_sau_desc = {
    .name = "flex_sau",
    .n_args = 16,
    .kinds = {FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL,
              FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_GLOBAL, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32,
              FPGA_K_ARG_U32, FPGA_K_ARG_U32, FPGA_K_ARG_U32},
    .run = flex_sau_adapter,
};

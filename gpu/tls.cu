/* gpu/tls.cu — AsyncTLS sparse decode on the engine: its state, each sequence's summaries and
 * parameters, the step's preparation and the layer's launch (gpu/gpu.h has the contract,
 * gpu/tls.cuh the kernels).
 *
 * Memory: the engine's scratch (level-1 scores, index lists, attention partials for
 * GPU_MAX_BATCH rows) is taken at gpu_tls_open, which shrinks the KV pool by it; a sequence's
 * summaries at its first sparse step, for min(capacity, 1.25 x its length + 4096) positions,
 * grown the same way (a new allocation, rebuilt from the cache), lent by the KV pool
 * (gpu_tls_mem_take: whole chunks of free blocks, counted as used, given back zeroed when the
 * sequence is freed), so they count against the same budget as KV and a pool without sparse
 * sequences gives nothing up; when the pool has no room, that step attends densely. Where the
 * pool cannot lend (no virtual memory management), they are cudaMalloc'ed and gpu_tls_open
 * shrinks the pool by their share of a position as well (6.25 % for Llama-3-8B: 8 KiB beside
 * 128 KiB). A sequence asked to offload (sparse_tls_params.offload) leaves the pool at its first
 * decode step (gpu_tls_prepare calls gpu/tls_off.cu): its sparse layers' KV into pages of the
 * pinned host pool taken here at open, its dense layers' into memory lent by the pool the same
 * way. */
#include "gpu/tls.cuh"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The engine's gpu_tls with what only this file uses (kept out of gpu/tls.cuh, which most CUDA
 * files include): the staggered rows' next-step launches (gpu_tls_next_layers) by mode
 * (TANDEM_TLS_NEXT, read at open):
 *   side (default): in a step of 2 rows or more, each sparse layer's right after its attention
 *        (which saved the query it scores with and read the set it replaces), on a side stream
 *        forked from the compute stream there and joined at the step's end (gpu_tls_step_end):
 *        level 1 runs beside the layers' projections and MLPs instead of after them (batch 8,
 *        Llama-3-8B: 0.18 ms a step less at 32K, 0.28 at 130K: BENCHMARKS.md). A step of one row
 *        takes `end`: there the side launches held SMs that the fused single-token kernels'
 *        one resident wave (gpu/decode_fused.cu) waits for, and the forks cost the chain its
 *        overlap (+0.3 ms a step even with no staggered row, +0.9 ms at 130K);
 *   end: every sparse layer's in one launch after the layers, on the compute stream;
 *   end2: that launch twice (the second writes the same sets again): bench_gpu's A/B of what one
 *        launch costs in the step, the selection unchanged;
 *   0:   none. NOT EXACT, only for tests/gpu/test_tls_gpu.c's check that the launch matters: the
 *        staggered rows then attend stale sets (the newest blocks alone), not the CPU's
 *        selection, and do less work (not a timing either). Never a default. */
enum { NEXT_SIDE, NEXT_END, NEXT_END2, NEXT_NONE };
struct gpu_tls_own {
    gpu_tls t; /* first: e->tls points here */
    int next;  /* NEXT_* */
    cudaStream_t side;
    cudaEvent_t fork, join;
    int forked; /* the side stream has launches since the last join */
};

static gpu_tls_own *own(gpu_engine *e)
{
    return (gpu_tls_own *)e->tls;
}

/* MemAvailable (bytes; the free pages where /proc/meminfo has none) */
static size_t host_available(void)
{
    long kb = -1;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb >= 0) return (size_t)kb * 1024;
    const long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
}

int gpu_tls_available(const gpu_engine *e)
{
    return e->tls != NULL;
}

int gpu_tls_dense_layers(const gpu_engine *e)
{
    return e->tls ? e->tls->p.dense_layers : 0;
}

int gpu_tls_open(gpu_engine *e, const sparse_tls_params *p, int on_default,
                 const uint16_t *channels, char *err, size_t errlen)
{
    const gpu_dims &d = e->d;
    char why[200];
    if (sparse_tls_params_check(p, d.hd, why, sizeof why)) {
        snprintf(err, errlen, "cuda:%d: %s", e->index, why);
        return ACCEL_ERR_INVALID;
    }
    const int ctx = model_context_limit(&e->m->cfg);
    const int nb_max = (ctx + p->block_size - 1) / p->block_size;
    if (d.window || d.n_heads / d.n_kv > GPU_TLS_MAX_GROUP || nb_max > GPU_TLS_MAX_CAND) {
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls: the GPU kernels take no sliding "
                 "window, groups up to %d heads and contexts up to %d blocks", e->index,
                 GPU_TLS_MAX_GROUP, GPU_TLS_MAX_CAND);
        return ACCEL_ERR_UNSUPPORTED;
    }
    if (p->token_budget > GPU_TLS_MAX_TOKENS ||
        (p->block_budget + 2 * p->stagger) * p->block_size > GPU_TLS_MAX_CAND) {
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls: the GPU takes token_budget up to "
                 "%d and block_budget x block_size up to %d (staggered: (block_budget + 2) x "
                 "block_size)", e->index, GPU_TLS_MAX_TOKENS, GPU_TLS_MAX_CAND);
        return ACCEL_ERR_INVALID;
    }
    GPU_CHECK(cudaSetDevice(e->index));
    GPU_TRY(gpu_tls_kernels_init());
    gpu_tls_own *o = (gpu_tls_own *)calloc(1, sizeof *o);
    if (!o) return ACCEL_ERR_NOMEM;
    gpu_tls *t = &o->t;
    const char *nev = getenv("TANDEM_TLS_NEXT");
    o->next = !nev                ? NEXT_SIDE
              : !strcmp(nev, "end")  ? NEXT_END
              : !strcmp(nev, "end2") ? NEXT_END2
              : !strcmp(nev, "0")    ? NEXT_NONE
                                     : NEXT_SIDE;
    t->p = *p;
    t->on_default = on_default;
    gpu_tls_cfg &c = t->c;
    c.L = d.L, c.n_heads = d.n_heads, c.n_kv = d.n_kv, c.hd = d.hd, c.bs = p->block_size;
    c.r = p->channels, c.nb_max = nb_max, c.sms = e->sms;
    const size_t B = GPU_MAX_BATCH, rows = B * d.n_kv;
    const size_t nch = (size_t)d.L * d.n_kv * c.r;
    cudaError_t ce = cudaMalloc((void **)&t->ch_d, nch * sizeof(unsigned short));
    if (!ce) ce = cudaMalloc((void **)&c.bscore, rows * nb_max * sizeof(float));
    if (!ce) ce = cudaMalloc((void **)&c.idx, rows * GPU_TLS_MAX_TOKENS * sizeof(int));
    if (!ce) ce = cudaMalloc((void **)&c.cnt_idx, rows * sizeof(int));
    if (!ce) ce = cudaMalloc((void **)&c.po, B * d.n_heads * GPU_TLS_SPLITS * d.hd * sizeof(float));
    if (!ce) ce = cudaMalloc((void **)&c.pml, B * d.n_heads * GPU_TLS_SPLITS * sizeof(float2));
    if (!ce) ce = cudaMalloc((void **)&c.arrive, rows * sizeof(int));
    if (!ce) ce = cudaMalloc((void **)&c.rslot, rows * GPU_TLS_RC_MAX * sizeof(int));
    if (!ce) ce = cudaMemset(c.arrive, 0, rows * sizeof(int));
    if (!ce) ce = cudaMemcpy(t->ch_d, channels, nch * sizeof(unsigned short), cudaMemcpyHostToDevice);
    if (!ce) ce = cudaMallocHost((void **)&t->meta_h, B * sizeof(gpu_tls_dev));
    if (!ce) ce = cudaMalloc((void **)&t->meta_d, B * sizeof(gpu_tls_dev));
    if (!ce) ce = cudaStreamCreateWithFlags(&o->side, cudaStreamNonBlocking);
    if (!ce) ce = cudaEventCreateWithFlags(&o->fork, cudaEventDisableTiming);
    if (!ce) ce = cudaEventCreateWithFlags(&o->join, cudaEventDisableTiming);
    c.ch = t->ch_d;
    e->tls = t;
    if (ce) {
        gpu_tls_close(e);
        cudaGetLastError();
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls: out of device memory", e->index);
        return ACCEL_ERR_NOMEM;
    }
    /* the pool gives up the scratch above (and, where it cannot lend, the summaries' share of a
     * position with the growth's quarter more), while none of its blocks is handed out */
    gpu_kv_pool &pl = e->pool;
    if (pl.next_id == 0 && pl.total > 0) {
        const double kv_tok = (double)e->kv_per_token;
        const double tls_tok = pl.vmm && pl.ipc ? 0.0
                                                : 1.25 * (double)gpu_tls_seq_bytes(c, 1 << 16) / 65536.0;
        const double scratch = (double)(rows * nb_max * 4 + rows * GPU_TLS_MAX_TOKENS * 4 +
                                        rows * GPU_TLS_RC_MAX * 4 +
                                        B * d.n_heads * GPU_TLS_SPLITS * (d.hd + 2) * 4);
        double keep = (double)pl.total * kv_tok / (kv_tok + tls_tok) -
                      scratch / (double)pl.block_bytes;
        pthread_mutex_lock((pthread_mutex_t *)pl.mu);
        pl.total = keep > 0 ? (int)keep : 0;
        if (pl.mapped > pl.total) pl.mapped = pl.total;
        pthread_mutex_unlock((pthread_mutex_t *)pl.mu);
        e->kv_budget = (uint64_t)pl.total * pl.block_bytes;
    }
    /* the offload's host pool (gpu/tls_off.cu): pinned now, so that no decode step pins */
    size_t hb = (size_t)e->tune.offload_pool_mb << 20;
    if (!hb && p->offload && on_default) hb = host_available() / 4 * 3;
    const int hst = hb ? gpu_tls_hpool_open(e, hb) : ACCEL_OK;
    if (hst) {
        snprintf(err, errlen, "cuda:%d: decode_sparse asynctls: the offload's host pool (%.1f GB "
                 "pinned) could not be taken (gpu_tune offload_pool_mb sets its size)", e->index,
                 (double)hb / 1e9);
        gpu_tls_close(e);
        return hst;
    }
    return ACCEL_OK;
}

uint64_t gpu_tls_host_pool(const gpu_engine *e, uint64_t *per_token, double *open_s)
{
    const gpu_tls_hpool *hp = e->tls ? e->tls->hp : NULL;
    if (per_token) *per_token = hp ? hp->page_bytes / GPU_KV_BLOCK : 0;
    if (open_s) *open_s = hp ? hp->open_s : 0.0;
    return hp ? (uint64_t)hp->bytes : 0;
}

uint64_t gpu_tls_host_pool_used(gpu_engine *e)
{
    gpu_tls_hpool *hp = e->tls ? e->tls->hp : NULL;
    if (!hp) return 0;
    pthread_mutex_lock((pthread_mutex_t *)hp->mu);
    const uint64_t used = (uint64_t)(hp->npages - hp->nfree) * hp->page_bytes;
    pthread_mutex_unlock((pthread_mutex_t *)hp->mu);
    return used;
}

void gpu_tls_close(gpu_engine *e)
{
    gpu_tls *t = e->tls;
    if (!t) return;
    gpu_tls_own *o = own(e);
    if (o->side) cudaStreamSynchronize(o->side); /* its launches read the buffers freed below */
    void *bufs[] = {t->ch_d, t->c.bscore, t->c.idx, t->c.cnt_idx, t->c.po, t->c.pml, t->c.arrive,
                    t->c.rslot, t->meta_d};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) cudaFree(bufs[i]);
    if (t->meta_h) cudaFreeHost(t->meta_h);
    gpu_tls_hpool_close(t->hp);
    if (o->side) cudaStreamDestroy(o->side);
    if (o->fork) cudaEventDestroy(o->fork);
    if (o->join) cudaEventDestroy(o->join);
    free(o);
    e->tls = NULL;
}

static gpu_tls_kv *kv_state(gpu_kv *kv)
{
    if (!kv->tls) kv->tls = (gpu_tls_kv *)calloc(1, sizeof(gpu_tls_kv));
    return kv->tls;
}

int gpu_kv_tls_set(gpu_engine *e, gpu_kv *kv, const sparse_tls_params *p)
{
    if (!p) {
        if (kv->tls) kv->tls->on = 0;
        return ACCEL_OK;
    }
    if (!e->tls) return ACCEL_ERR_UNSUPPORTED;
    /* a staggered row's candidates: its block budget and the two newest blocks */
    if (p->token_budget < 1 || p->token_budget > GPU_TLS_MAX_TOKENS || p->block_budget < 1 ||
        (long long)(p->block_budget + 2 * p->stagger) * e->tls->p.block_size > GPU_TLS_MAX_CAND)
        return ACCEL_ERR_INVALID;
    gpu_tls_kv *t = kv_state(kv);
    if (!t) return ACCEL_ERR_NOMEM;
    if (t->stagger != p->stagger || t->block_budget != p->block_budget) t->pipe_len = -1;
    t->stagger = p->stagger;
    if (!t->on) t->host_read = t->host_total = t->steps = 0;
    t->on = 1;
    t->token_budget = p->token_budget;
    t->block_budget = p->block_budget;
    t->dense_below = p->dense_below;
    t->off_want = p->offload && !t->off;
    return ACCEL_OK;
}

int gpu_tls_mem_take(gpu_engine *e, size_t bytes, void **mem, gpu_lend *l)
{
    *mem = NULL;
    memset(l, 0, sizeof *l);
    int st = gpu_pool_lend(e, bytes, l);
    if (st == ACCEL_OK) {
        *mem = l->ptr;
        return ACCEL_OK;
    }
    if (st != ACCEL_ERR_UNSUPPORTED) return st; /* the pool has no room */
    cudaError_t ce = cudaMalloc(mem, bytes);    /* no lending pool: gpu_tls_open shrank it */
    if (ce == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        *mem = NULL;
        return ACCEL_ERR_NOMEM;
    }
    GPU_CHECK(ce);
    return ACCEL_OK;
}

void gpu_tls_mem_give(gpu_engine *e, void *mem, gpu_lend *l)
{
    if (l->chunk) gpu_pool_unlend(e, l);
    else if (mem) cudaFree(mem);
}

void gpu_kv_tls_release(gpu_engine *e, gpu_kv *kv)
{
    if (!kv->tls) return;
    gpu_tls_mem_give(e, kv->tls->mem, &kv->tls->lend);
    kv->tls->mem = NULL;
    gpu_tls_off_free(e, kv->tls);
}

void gpu_kv_tls_free(gpu_kv *kv)
{
    if (!kv->tls) return;
    /* gpu_kv_tls_release gave back the memory (a cudaMalloc left here is freed) */
    if (kv->tls->mem && !kv->tls->lend.chunk) cudaFree(kv->tls->mem);
    free(kv->tls);
    kv->tls = NULL;
}

void gpu_kv_tls_fork(gpu_kv *dst, const gpu_kv *src)
{
    if (!src->tls || !src->tls->on) return;
    gpu_tls_kv *t = kv_state(dst);
    if (!t) return; /* out of host memory: the fork decodes dense */
    t->on = 1;
    t->token_budget = src->tls->token_budget;
    t->block_budget = src->tls->block_budget;
    t->dense_below = src->tls->dense_below;
    t->off_want = src->tls->off_want || src->tls->off; /* gpu_kv_fork refuses an offloaded src */
    t->stagger = src->tls->stagger;
    t->pipe_len = -1; /* its first step selects synchronously */
}

void gpu_kv_tls_truncate(gpu_engine *e, gpu_kv *kv, int len)
{
    /* a block that len cuts is rebuilt from its first position (its max / min saw later keys) */
    if (!kv->tls || !e->tls) return;
    const int from = len / e->tls->p.block_size * e->tls->p.block_size;
    if (kv->tls->valid > from) kv->tls->valid = from;
    kv->tls->pipe_len = -1; /* the staggered state restarts */
    kv->tls->rc_reset = 1; /* positions from len on get new rows: the row cache empties */
}

int gpu_kv_tls_stats(gpu_engine *e, gpu_kv *kv, gpu_tls_stats *out)
{
    memset(out, 0, sizeof *out);
    gpu_tls_kv *t = kv->tls;
    if (!t) return ACCEL_OK;
    unsigned long long c[5] = {0, 0, 0, 0, 0};
    if (t->mem) {
        GPU_CHECK(cudaSetDevice(e->index));
        GPU_CHECK(cudaStreamSynchronize(e->compute));
        GPU_CHECK(cudaMemcpy(c, t->dev.cnt, sizeof c, cudaMemcpyDeviceToHost));
    }
    out->keys_read = (int64_t)c[0] + t->host_read;
    out->keys_total = (int64_t)c[1] + t->host_total;
    out->blocks_new = (int64_t)c[2];
    out->blocks_kept = (int64_t)c[3];
    out->steps = t->steps;
    out->offloaded = t->off;
    /* the attended keys since it moved, less those its row cache held, and the dense steps' */
    out->host_keys = t->off ? (int64_t)(c[0] - t->cnt0_off) - (int64_t)(c[4] - t->hit0_off) + t->host_keys : 0;
    return ACCEL_OK;
}

/* Summaries for at least `need` positions; a new allocation starts empty (valid 0) except for
 * the counters, carried over. */
static int ensure(gpu_engine *e, gpu_kv *kv, gpu_tls_kv *t, int need)
{
    if (t->mem && t->dev.cap >= need) return ACCEL_OK;
    int cap = need + need / 4 + 4096;
    if (cap > kv->cap) cap = kv->cap;
    const gpu_tls_cfg &c = e->tls->c;
    size_t bytes = gpu_tls_seq_bytes(c, cap);
    void *mem = NULL;
    gpu_lend nl;
    GPU_TRY(gpu_tls_mem_take(e, bytes, &mem, &nl));
    GPU_CHECK(cudaMemsetAsync(mem, 0, bytes, e->compute));
    gpu_tls_dev nd;
    memset(&nd, 0, sizeof nd);
    gpu_tls_seq_carve(c, mem, cap, &nd);
    if (t->mem) {
        GPU_CHECK(cudaMemcpyAsync(nd.cnt, t->dev.cnt, 5 * sizeof(unsigned long long),
                                  cudaMemcpyDeviceToDevice, e->compute));
        /* the staggered state (the same shape) and the query the last step saved */
        const size_t lh = (size_t)c.L * c.n_kv;
        GPU_CHECK(cudaMemcpyAsync(nd.sg, t->dev.sg, lh * (2 + nd.kmax) * sizeof(int),
                                  cudaMemcpyDeviceToDevice, e->compute));
        GPU_CHECK(cudaStreamSynchronize(e->compute));
        gpu_tls_mem_give(e, t->mem, &t->lend);
    }
    t->mem = mem;
    t->lend = nl;
    t->dev = nd;
    t->valid = 0;
    return ACCEL_OK;
}

/* A sequence asked to offload, at its first decode step (sparse or not: the scheduler counts
 * only its resident part once its prompt is in, accel_info.offload_any): positions before this
 * one leave the pool (this step writes its key into host memory already); no room: it stays. */
static int offload_now(gpu_engine *e, gpu_kv *kv, gpu_tls_kv *t, int pos)
{
    if (!t->off_want || t->off) return ACCEL_OK;
    int st = gpu_tls_offload(e, kv, t, pos);
    if (st == ACCEL_ERR_NOMEM) t->off_want = 0;
    return st == ACCEL_ERR_NOMEM ? ACCEL_OK : st;
}

int gpu_tls_prepare(gpu_engine *e, int n, gpu_kv *const *kvs, const int *pos)
{
    gpu_tls *g = e->tls;
    if (!g) return 0;
    const gpu_dims &d = e->d;
    int any = 0, st;
    const char *rce = getenv("TANDEM_TLS_ROWCACHE"); /* "0": the row cache off (A/B) */
    const int rc_on = !(rce && !strcmp(rce, "0"));
    for (int i = 0; i < n; i++) {
        gpu_tls_kv *t = kvs[i]->tls;
        gpu_tls_dev row;
        memset(&row, 0, sizeof row);
        if (t && t->on) {
            const int keys = pos[i] + 1;
            const int below = t->dense_below >= 0 ? t->dense_below : t->token_budget;
            t->steps++;
            if (keys <= below || d.L <= g->p.dense_layers) {
                GPU_TRY(offload_now(e, kvs[i], t, pos[i]));
                t->host_read += (long long)d.L * d.n_kv * keys;
                t->host_total += (long long)d.L * d.n_kv * keys;
                if (t->off) t->host_keys += (long long)(d.L - g->p.dense_layers) * d.n_kv * keys;
            } else if ((st = ensure(e, kvs[i], t, keys)) != ACCEL_OK) {
                /* no room in the pool for its summaries: this step attends densely */
                if (st != ACCEL_ERR_NOMEM) return st;
                GPU_TRY(offload_now(e, kvs[i], t, pos[i]));
                t->host_read += (long long)d.L * d.n_kv * keys;
                t->host_total += (long long)d.L * d.n_kv * keys;
                if (t->off) t->host_keys += (long long)(d.L - g->p.dense_layers) * d.n_kv * keys;
            } else {
                if (t->valid < pos[i]) {
                    gpu_seq_dev sq = gpu_kv_seq_dev(e, kvs[i]);
                    GPU_TRY(gpu_tls_rebuild(e->compute, g->c, sq, t->dev, t->valid, pos[i],
                                            t->off ? &t->hi : nullptr, g->p.dense_layers));
                }
                t->valid = keys; /* then out of the pool: the summaries came from its blocks */
                GPU_TRY(offload_now(e, kvs[i], t, pos[i]));
                t->host_read += (long long)g->p.dense_layers * d.n_kv * keys;
                t->host_total += (long long)g->p.dense_layers * d.n_kv * keys;
                row = t->dev;
                row.on = 1;
                row.block_budget = t->block_budget;
                row.token_budget = t->token_budget;
                /* staggered: the state continues only from the step at the position before */
                row.stagger = t->stagger ? (t->pipe_len == pos[i] && pos[i] > 0 ? 1 : 2) : 0;
                t->pipe_len = t->stagger ? keys : -1;
                if (t->off && t->rc_slots) {
                    const size_t lh = (size_t)g->p.dense_layers * d.n_kv * t->rc_slots;
                    if (t->rc_reset) {
                        GPU_CHECK(cudaMemsetAsync(t->rc_t0, 0xff,
                                                  (size_t)(d.L - g->p.dense_layers) * d.n_kv *
                                                      t->rc_slots * sizeof(int),
                                                  e->compute));
                        t->rc_reset = 0;
                    }
                    if (rc_on) {
                        row.rct = t->rc_t0 - lh;
                        row.rcr = t->rc_r0 - lh * 2 * d.hd;
                        row.rcs = t->rc_slots;
                    }
                }
                any = 1;
            }
        }
        g->meta_h[i] = row;
    }
    if (any)
        GPU_CHECK(cudaMemcpyAsync(g->meta_d, g->meta_h, (size_t)n * sizeof(gpu_tls_dev),
                                  cudaMemcpyHostToDevice, e->compute));
    return any;
}

int gpu_tls_step_end(gpu_engine *e, int l0, int l1, int T, const int *pos)
{
    gpu_tls_own *o = own(e);
    const int at_end = o->next == NEXT_END2 ? 2 : o->next == NEXT_END || (o->next == NEXT_SIDE && T < 2);
    for (int k = 0; k < at_end; k++)
        GPU_TRY(gpu_tls_next_layers(e->compute, e->tls->c, l0, l1, e->tls->p.dense_layers, T, pos,
                                    e->tls->meta_d));
    return gpu_tls_join(e);
}

int gpu_tls_join(gpu_engine *e)
{
    gpu_tls_own *o = e->tls ? own(e) : NULL;
    if (!o || !o->forked) return ACCEL_OK;
    o->forked = 0;
    GPU_CHECK(cudaEventRecord(o->join, o->side));
    GPU_CHECK(cudaStreamWaitEvent(e->compute, o->join, 0));
    return ACCEL_OK;
}

void gpu_tls_capture_end(gpu_engine *e)
{
    if (e->tls) own(e)->forked = 0;
}

int gpu_tls_layer(gpu_engine *e, int layer, int T, const h16 *q, const int *pos,
                  const gpu_seq_dev *seqs, h16 *out)
{
    GPU_TRY(gpu_tls_attn_layer(e->compute, e->tls->c, layer, T, q, pos, seqs, e->tls->meta_d, out,
                               e->pdl));
    /* the staggered rows' next set of this layer, beside the rest of the step (above); the
     * kernel itself skips the rows that are not staggered, so a captured graph serves any mix */
    gpu_tls_own *o = own(e);
    if (o->next != NEXT_SIDE || T < 2) return ACCEL_OK;
    GPU_CHECK(cudaEventRecord(o->fork, e->compute));
    GPU_CHECK(cudaStreamWaitEvent(o->side, o->fork, 0));
    o->forked = 1;
    return gpu_tls_next_layers(o->side, e->tls->c, layer, layer + 1, e->tls->p.dense_layers, T, pos,
                               e->tls->meta_d);
}

/* AsyncTLS's offload pipeline reference (sparse/tls_pipe.c): every attended block is resident
 * when the step runs, only the difference of consecutive block sets is fetched, and with budgets
 * covering everything it attends every key. */
#include "sparse/tls_pipe.h"
#include "tests/test.h"
#include <stdlib.h>

static uint64_t st_;
static float fr(void)
{
    st_ = st_ * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((st_ >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

typedef struct world {
    int n, Hk, hd, G, r;
    float *k, *q;
    uint16_t *ch;
    sparse_tls_seq *s;
} world;

static void world_new(world *w, int n, int Hk, int hd, int G, int r, int bs, uint64_t seed)
{
    st_ = seed;
    *w = (world){.n = n, .Hk = Hk, .hd = hd, .G = G, .r = r};
    w->k = malloc(sizeof(float) * n * Hk * hd);
    w->q = malloc(sizeof(float) * Hk * G * hd);
    w->ch = malloc(sizeof(uint16_t) * Hk * r);
    for (int i = 0; i < n * Hk * hd; i++) w->k[i] = fr() + (i / (Hk * hd) / bs % 7 == 3 ? 0.8f : 0.0f);
    for (int i = 0; i < Hk * G * hd; i++) w->q[i] = fr();
    for (int g = 0; g < Hk; g++)
        for (int i = 0; i < r; i++) w->ch[g * r + i] = (uint16_t)(i * (hd / r));
    w->s = sparse_tls_seq_new(1, Hk, hd, r, bs, n, w->ch);
}

static void world_free(world *w)
{
    free(w->k);
    free(w->q);
    free(w->ch);
    sparse_tls_seq_free(w->s);
}

TEST(tls_pipe_resident_and_incremental)
{
    const int n = 6000, Hk = 2, hd = 32, G = 2, r = 8, bs = 64, start = 4000;
    world w;
    world_new(&w, n, Hk, hd, G, r, bs, 5);
    REQUIRE(w.s);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.channels = r;
    p.block_budget = 12;
    p.token_budget = 200;
    sparse_tls_pipe *t = sparse_tls_pipe_new(&p, 1, Hk, n);
    REQUIRE(t);
    float *fw = malloc(sizeof(float) * sparse_tls_pipe_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_pipe_work_ints(&p, n));
    int32_t *pos = malloc(sizeof(int32_t) * n);
    for (int pp = 0; pp < start; pp++) sparse_tls_put(w.s, 0, pp, w.k + (size_t)pp * Hk * hd);
    int64_t moved_after_first = 0;
    for (int step = 0; step < 300; step++) {
        int nk = start + step + 1;
        sparse_tls_put(w.s, 0, nk - 1, w.k + (size_t)(nk - 1) * Hk * hd);
        /* the query drifts slowly: neighbouring steps pick mostly the same blocks */
        if (step % 50 == 49)
            for (int i = 0; i < Hk * G * hd; i++) w.q[i] = 0.7f * w.q[i] + 0.3f * fr();
        for (int g = 0; g < Hk; g++) {
            int moved;
            int m = sparse_tls_pipe_step(t, &p, w.s, 0, g, w.q + (size_t)g * G * hd, G, hd, nk,
                                         pos, fw, iw, &moved);
            CHECK(m <= p.token_budget && m > 0);
            for (int i = 1; i < m; i++) CHECK(pos[i] > pos[i - 1]);
            if (step) moved_after_first += moved;
            CHECK(moved <= p.block_budget + 1);
            /* what the next step attends (S_t and the tail) is resident now */
            const int32_t *prev = t->prev + (size_t)g * t->block_budget;
            const uint8_t *res = t->resident + (size_t)g * t->cap_blocks;
            for (int i = 0; i < t->n_prev[g]; i++) CHECK(res[prev[i]]);
            CHECK(res[(nk - 1) / bs]);
            int held = 0;
            for (int b = 0; b < t->cap_blocks; b++) held += res[b];
            CHECK(held <= p.block_budget + 1);
        }
    }
    /* incremental transfer: far less than the whole set every step */
    fprintf(stderr, "pipe: moved %lld blocks over 299 steps x %d groups after the first; "
                    "whole-block baseline %lld\n", (long long)moved_after_first, Hk,
            (long long)t->baseline);
    CHECK(moved_after_first * 5 < t->baseline);
    free(fw);
    free(iw);
    free(pos);
    sparse_tls_pipe_free(t);
    world_free(&w);
}

TEST(tls_pipe_full_budget_attends_everything)
{
    const int n = 900, Hk = 1, hd = 16, G = 4, r = 4, bs = 32;
    world w;
    world_new(&w, n, Hk, hd, G, r, bs, 9);
    REQUIRE(w.s);
    sparse_tls_params p;
    sparse_tls_params_default(&p);
    p.block_size = bs;
    p.channels = r;
    p.block_budget = (n + bs - 1) / bs;
    p.token_budget = n;
    sparse_tls_pipe *t = sparse_tls_pipe_new(&p, 1, Hk, n);
    float *fw = malloc(sizeof(float) * sparse_tls_pipe_work_floats(&p, hd, n));
    int32_t *iw = malloc(sizeof(int32_t) * sparse_tls_pipe_work_ints(&p, n));
    int32_t *pos = malloc(sizeof(int32_t) * n);
    REQUIRE(t && fw && iw && pos);
    for (int pp = 0; pp < n; pp++) {
        sparse_tls_put(w.s, 0, pp, w.k + (size_t)pp * hd);
        if (pp < 700) continue;
        int moved, m = sparse_tls_pipe_step(t, &p, w.s, 0, 0, w.q, G, hd, pp + 1, pos, fw, iw, &moved);
        CHECK_EQ(m, pp + 1);
        for (int i = 0; i < m; i++) CHECK_EQ(pos[i], i);
        if (pp == 700) CHECK_EQ(moved, (pp + bs) / bs); /* the first step fetches every block */
        else CHECK_EQ(moved, 0);                        /* then nothing: new blocks are local */
    }
    free(fw);
    free(iw);
    free(pos);
    sparse_tls_pipe_free(t);
    world_free(&w);
}

/* Tests for the chunked-prefill cost model and chunk choice (scheduler/sched_policy.c:
 * sched_cost, sched_policy_chunk): the fit recovers a known fixed + per-token + per-key cost,
 * stays non-negative, its prior with one observation; chunks fit the budget at shallow and deep
 * positions, no tiny trailing chunk, always one chunk, whole blocks for a sparse method; the
 * worker's dense fit reaches the placement's book (sched_prefill_fit_*). */
#include "tests/test.h"
#include <math.h>
#include "scheduler/sched_internal.h"
#include "scheduler/sched_policy.h"

/* The 8B shape on an H200 as measured (BENCHMARKS.md): a pass over the weights ~3.7 ms, a
 * token's GEMMs ~25 us, attention over 128K cached keys several times that. */
#define A 3.7e-3
#define B 25e-6
#define E 9e-10

static double truth(int c, int p)
{
    return A + B * c + E * c * (p + c / 2.0);
}

/* A deterministic spread of chunk sizes and depths, as a chunked 130K prefill makes them. */
static void feed(sched_cost *m, int n, double noise)
{
    unsigned x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        int c = 16 + (int)(x >> 8) % 2000;
        x = x * 1103515245u + 12345u;
        int p = (int)(x >> 8) % 130000;
        x = x * 1103515245u + 12345u;
        double f = 1 + noise * (((double)(x >> 8) / (1 << 24)) * 2 - 1);
        sched_cost_observe(m, c, p, truth(c, p) * f);
    }
}

TEST(sched_cost_recovers_the_terms)
{
    sched_cost m = {0};
    CHECK_EQ(sched_cost_predict(&m, 100, 0), 0.0);
    feed(&m, 200, 0);
    CHECK_EQ(m.n, SCHED_COST_WINDOW); /* bounded: the last window only */
    CHECK_MSG(fabs(m.a / A - 1) < 0.01 && fabs(m.b / B - 1) < 0.01 && fabs(m.e / E - 1) < 0.01,
              "a %.4g b %.4g e %.4g", m.a, m.b, m.e);
    /* 5 % noise on every call: still within 15 % per term, and predictions within 5 % */
    sched_cost n = {0};
    feed(&n, 200, 0.05);
    CHECK_MSG(fabs(n.a / A - 1) < 0.15 && fabs(n.b / B - 1) < 0.15 && fabs(n.e / E - 1) < 0.15,
              "a %.4g b %.4g e %.4g", n.a, n.b, n.e);
    for (int p = 0; p <= 128000; p += 32000)
        CHECK(fabs(sched_cost_predict(&n, 512, p) / truth(512, p) - 1) < 0.05);
    /* a device that changes speed (a window later): the new terms */
    for (int i = 0; i < SCHED_COST_WINDOW; i++) {
        int c = 64 + 37 * i, p = 2500 * i;
        sched_cost_observe(&m, c, p, 2 * truth(c, p));
    }
    CHECK(fabs(m.a / (2 * A) - 1) < 0.01 && fabs(m.b / (2 * B) - 1) < 0.01 && fabs(m.e / (2 * E) - 1) < 0.01);
    /* observations that are not calls are ignored */
    sched_cost_observe(&m, 0, 10, 1.0);
    sched_cost_observe(&m, 10, 10, -1.0);
    sched_cost_observe(&m, 10, 10, NAN);
    CHECK_EQ(m.seen, (uint64_t)(200 + SCHED_COST_WINDOW));
}

TEST(sched_cost_never_negative_and_its_prior)
{
    /* calls that get cheaper with size (a per-token term would be negative): the fit keeps every
     * term >= 0 and explains them with the fixed part */
    sched_cost m = {0};
    for (int i = 0; i < 30; i++) sched_cost_observe(&m, 16 + 64 * i, 0, 0.02 - 5e-6 * i);
    CHECK(m.a >= 0 && m.b >= 0 && m.e >= 0);
    CHECK_NEAR(m.b, 0, 1e-15);
    CHECK_NEAR(m.e, 0, 1e-20);
    CHECK(fabs(m.a - 0.0199) < 0.001);
    /* deeper calls cheaper: no negative per-key term either */
    sched_cost q = {0};
    for (int i = 0; i < 30; i++) sched_cost_observe(&q, 256, 4096 * i, 0.05 - 1e-3 * i);
    CHECK(q.a >= 0 && q.b >= 0 && q.e >= 0);
    CHECK_NEAR(q.e, 0, 1e-20);
    /* the prior: one call of 64 tokens at 0 is split among the terms (a third each, up to the
     * ridge), so a bigger chunk is priced at more than its share at the first call's rate and a
     * deeper one dearer — the safe side of a budget */
    sched_cost one = {0};
    sched_cost_observe(&one, 64, 0, 0.006);
    CHECK(fabs(one.a - 0.002) < 1e-4);
    CHECK(fabs(one.b * 64 - 0.002) < 1e-4);
    CHECK(fabs(one.e * 64 * 32 - 0.002) < 1e-4);
    CHECK(fabs(sched_cost_predict(&one, 64, 0) - 0.006) < 1e-4);
    CHECK(sched_cost_predict(&one, 640, 0) > 0.006 * 10 * 0.9);
    CHECK(sched_cost_predict(&one, 64, 100000) > 0.006 * 10);
}

/* The model fitted from exact calls of the truth above. */
static void fitted(sched_cost *m)
{
    memset(m, 0, sizeof *m);
    feed(m, SCHED_COST_WINDOW, 0);
}

TEST(sched_policy_chunk_fits_the_budget)
{
    sched_cost m;
    fitted(&m);
    const double budget = 0.05;
    int ks[2];
    for (int i = 0; i < 2; i++) {
        int p = i ? 128000 : 1000;
        int k = sched_policy_chunk(200000, p, 1, 1, 1, budget, budget, &m);
        ks[i] = k;
        /* the largest that fits in whole tiles (SCHED_CHUNK_TILE): k fits, a tile more does not
         * (in the fitted model, and in truth within the fit's error) */
        CHECK_MSG(k % SCHED_CHUNK_TILE == 0 && truth(k, p) <= budget * 1.001 &&
                      truth(k + SCHED_CHUNK_TILE, p) > budget * 0.999,
                  "p %d k %d: %.4f s", p, k, truth(k, p));
        /* a sparse method's block: whole blocks, the most that fit */
        int kb = sched_policy_chunk(200000, p, 128, 1, 1, budget, budget, &m);
        CHECK(kb % 128 == 0 && kb >= 128 && kb == k);
        /* below a tile, dense chunks are any size: a budget that fits 100 tokens gives ~100 */
        int ks1 = sched_policy_chunk(200000, p, 1, 1, 1, budget, truth(100, p), &m);
        CHECK_MSG(ks1 >= 90 && ks1 <= 100, "p %d: %d tokens", p, ks1);
    }
    CHECK(ks[1] < ks[0] / 4); /* at 128K depth a token costs several times what it does at 1K */
    /* the first chunk always runs: at least SCHED_CHUNK_MIN (one block when sparse) even when
     * nothing fits */
    CHECK_EQ(sched_policy_chunk(200000, 128000, 1, 1, 1, budget, 0.001, &m), SCHED_CHUNK_MIN);
    CHECK_EQ(sched_policy_chunk(200000, 128000, 128, 1, 1, budget, 0.001, &m), 128);
    CHECK_EQ(sched_policy_chunk(200000, 128000, 1, 1, 1, budget, -1, &m), SCHED_CHUNK_MIN);
    CHECK_EQ(sched_policy_chunk(7, 128000, 1, 1, 1, budget, 0.001, &m), 7);
    /* a later chunk: only when it is at least SCHED_CHUNK_EFF_K x a / (b + e p) tokens */
    for (int i = 0; i < 2; i++) {
        int p = i ? 128000 : 1000;
        double c0 = A / (B + E * p);
        double left_small = truth((int)(SCHED_CHUNK_EFF_K * c0 * 0.8), p);
        double left_big = truth((int)(SCHED_CHUNK_EFF_K * c0 * 1.3), p);
        CHECK_EQ(sched_policy_chunk(200000, p, 1, 1, 0, budget, left_small, &m), 0);
        int k = sched_policy_chunk(200000, p, 1, 1, 0, budget, left_big, &m);
        CHECK(k >= SCHED_CHUNK_EFF_K * c0 && truth(k, p) <= left_big * 1.001);
        /* ... its fixed part at most 1 / (1 + k) of its time */
        CHECK(A / truth(k, p) <= 1.0 / (1 + SCHED_CHUNK_EFF_K) + 1e-3);
        /* a later chunk that ends the prompt within what is left runs, however small */
        CHECK_EQ(sched_policy_chunk(20, p, 1, 1, 0, budget, left_small, &m), 20);
        /* below one block: no later sparse chunk; below a tile: no later dense one either */
        CHECK_EQ(sched_policy_chunk(200000, p, 128, 1, 0, budget, truth(100, p), &m), 0);
        CHECK_EQ(sched_policy_chunk(200000, p, 1, 1, 0, budget, truth(SCHED_CHUNK_TILE - 8, p), &m), 0);
        CHECK(sched_policy_chunk(200000, p, 1, 1, 0, budget, left_big, &m) % SCHED_CHUNK_TILE == 0);
    }
}

/* The worker publishes the a, b, e of the kind of chunk it ran for the book (rule d's prompt
 * time): nothing before its first call, then that fit exactly, each refit, the other kind's when
 * it runs that. */
TEST(sched_prefill_fit_published)
{
    static sched_dev d;
    double v[3] = {1, 1, 1};
    sched_prefill_fit_read(&d, v);
    CHECK(v[0] == 0 && v[1] == 0 && v[2] == 0);
    for (int i = 0; i < 12; i++) {
        int c = 64 << (i % 4), p = 2048 * (i % 5);
        sched_cost_observe(&d.cost[0], c, p, truth(c, p));
        sched_prefill_fit_publish(&d, 0);
        sched_prefill_fit_read(&d, v);
        CHECK(v[0] == d.cost[0].a && v[1] == d.cost[0].b && v[2] == d.cost[0].e);
    }
    CHECK_NEAR(v[0], A, A * 0.01);
    CHECK_NEAR(v[1], B, B * 0.01);
    CHECK_NEAR(v[2], E, E * 0.01);
    /* a sparse method's chunks next: their model is what the book gets, the dense one again
     * after a dense chunk */
    sched_cost_observe(&d.cost[1], 128, 0, 0.05);
    sched_prefill_fit_publish(&d, 1);
    sched_prefill_fit_read(&d, v);
    CHECK(v[0] == d.cost[1].a && v[1] == d.cost[1].b && v[2] == d.cost[1].e);
    CHECK(v[0] != d.cost[0].a);
    sched_prefill_fit_publish(&d, 0);
    sched_prefill_fit_read(&d, v);
    CHECK(v[0] == d.cost[0].a && v[1] == d.cost[0].b && v[2] == d.cost[0].e);
}

/* The worker's queue with a TTFT target (sched_prefill_order): the job the policy picks moves
 * to the head, the rest keep their order, the tail stays right; its prediction is the device's
 * learned cost of what the job has left. Three prompts on a device whose cost is truth(): A
 * (32K, waited 1.5 s: 1.5 + ~1.0 s left is late for a 2 s target), B (32K, half done, waited
 * 0.5 s: on time), C (8K, just arrived: on time). B is first of the on-time ones. */
TEST(sched_prefill_order_moves_the_pick)
{
    static sched s;
    static sched_dev d;
    static sched_req r[3];
    static sched_choice ch[3];
    d.s = &s;
    d.cost[0] = (sched_cost){0};
    for (int i = 0; i < 24; i++) {
        int c = 256 << (i % 6), p = 4096 * (i % 7);
        sched_cost_observe(&d.cost[0], c, p, truth(c, p));
    }
    const double now = 100.0;
    const int len[3] = {32768, 32768, 8192}, done[3] = {0, 16384, 0};
    const double waited[3] = {1.5, 0.5, 0.0};
    for (int i = 0; i < 3; i++) {
        r[i] = (sched_req){0};
        ch[i] = (sched_choice){0};
        r[i].n = 1;
        r[i].n_prompt = len[i];
        r[i].choices = &ch[i];
        r[i].t_arrival = now - waited[i];
        ch[i].pf_n = len[i];
        ch[i].pf_done = done[i];
        r[i].wnext = i < 2 ? &r[i + 1] : NULL;
    }
    d.pf_head = &r[0];
    d.pf_tail = &r[2];
    /* without a target: FCFS, nothing moves */
    s.cfg.ttft_target_ms = 0;
    sched_prefill_order(&d, now);
    CHECK(d.pf_head == &r[0] && r[0].wnext == &r[1] && r[1].wnext == &r[2] && d.pf_tail == &r[2]);
    s.cfg.ttft_target_ms = 2000;
    sched_prefill_order(&d, now);
    CHECK(d.pf_head == &r[1] && r[1].wnext == &r[0] && r[0].wnext == &r[2] && !r[2].wnext);
    CHECK(d.pf_tail == &r[2]);
    /* B done; A and C left: C (on time) before A (late), and C was the tail */
    d.pf_head = &r[0];
    r[0].wnext = &r[2];
    sched_prefill_order(&d, now);
    CHECK(d.pf_head == &r[2] && r[2].wnext == &r[0] && !r[0].wnext && d.pf_tail == &r[0]);
    /* a cost never measured predicts nothing: the wait alone decides (all on time: FCFS) */
    d.cost[0] = (sched_cost){0};
    d.pf_head = &r[0];
    r[0].wnext = &r[2];
    r[2].wnext = NULL;
    d.pf_tail = &r[2];
    sched_prefill_order(&d, now);
    CHECK(d.pf_head == &r[0] && d.pf_tail == &r[2]);
}

TEST(sched_policy_layers_fit_the_budget)
{
    /* 32 layers of 2.15 ms (FlexPrefill's index at 128K) against a 50 ms budget: 23 of them */
    CHECK_EQ(sched_policy_layers(32, 2.15e-3, 0, 50e-3, 1), 23);
    CHECK_EQ(sched_policy_layers(32, 2.15e-3, 0, 50e-3, 0), 23);
    /* the rest of the chunk fits: all of it */
    CHECK_EQ(sched_policy_layers(9, 2.15e-3, 0, 50e-3, 0), 9);
    CHECK_EQ(sched_policy_layers(23, 2.15e-3, 0, 50e-3, 1), 23);
    /* nothing fits: one layer for the iteration's first call, none (end it) later */
    CHECK_EQ(sched_policy_layers(32, 0.2, 0, 50e-3, 1), 1);
    CHECK_EQ(sched_policy_layers(32, 0.2, 0, 50e-3, 0), 0);
    CHECK_EQ(sched_policy_layers(32, 2e-3, 0, 0, 1), 1);
    CHECK_EQ(sched_policy_layers(32, 2e-3, 0, -1e-3, 0), 0);
    /* nothing known: whole */
    CHECK_EQ(sched_policy_layers(32, 0, 0, 50e-3, 0), 32);
    CHECK_EQ(sched_policy_layers(0, 1e-3, 0, 50e-3, 1), 0);
    /* each call's own part (XAttention at 100K on the H200: ~3.5 ms + ~1.1 ms a layer): it
     * comes off what is left first */
    CHECK_EQ(sched_policy_layers(32, 1.1e-3, 3.5e-3, 50e-3, 1), 32); /* 38.7 ms: whole */
    CHECK_EQ(sched_policy_layers(32, 1.4e-3, 3.5e-3, 40e-3, 1), 26); /* (40 - 3.5) / 1.4 */
    CHECK_EQ(sched_policy_layers(32, 1.4e-3, 3.5e-3, 3e-3, 1), 1);   /* nothing fits: first call */
    /* a later call only when its layers are worth its own part (SCHED_CHUNK_EFF_K x), or end
     * the chunk */
    CHECK_EQ(sched_policy_layers(20, 1.1e-3, 3.5e-3, 8e-3, 0), 0);   /* 4 layers: 4.4 ms < 14 */
    CHECK_EQ(sched_policy_layers(20, 1.1e-3, 3.5e-3, 20e-3, 0), 15); /* 16.5 ms >= 14 */
    CHECK_EQ(sched_policy_layers(3, 1.1e-3, 3.5e-3, 8e-3, 0), 3);    /* the chunk's last 3 */
}

/* A layer-split call pays a part of its own: the model learns it from the split calls (t = s +
 * l (W - s) / L) and feeds the fit the whole call each stands for, so calls of 1 layer do not
 * read as 32 x their time; the margin stays the whole calls'. */
TEST(sched_cost_split_part)
{
    const int L = 32;
    const double s_true = 3.5e-3;
    sched_cost m;
    fitted(&m);
    CHECK_NEAR(sched_cost_split_s(&m), 0, 0);
    /* a device whose whole calls cost truth() and whose split calls cost s_true more than their
     * layers' share, l = 1 .. 24 layers at 100K */
    const int p = 100000, k = 128;
    for (int i = 0; i < 40; i++) {
        int l = 1 + (i * 7) % 24, pos = p + 128 * i;
        double w = truth(k, pos);
        sched_cost_observe_split(&m, k, pos, s_true + (w - s_true) * l / L, l, L);
    }
    CHECK_MSG(fabs(sched_cost_split_s(&m) - s_true) < 0.2e-3, "split part %.2f ms", sched_cost_split_s(&m) * 1e3);
    /* the whole calls' model is intact: a whole call at this depth is predicted within 5 % */
    CHECK_MSG(fabs(sched_cost_predict(&m, k, p + 5000) / truth(k, p + 5000) - 1) < 0.05, "%.2f vs %.2f ms",
              sched_cost_predict(&m, k, p + 5000) * 1e3, truth(k, p + 5000) * 1e3);
    CHECK_MSG(sched_cost_margin(&m) < 1.01, "margin %.3f", sched_cost_margin(&m));
    /* read as layers / L of a whole call, the 1-layer calls would have made it ~3x dearer */
    sched_cost naive;
    fitted(&naive);
    for (int i = 0; i < 40; i++) {
        int l = 1 + (i * 7) % 24, pos = p + 128 * i;
        double w = truth(k, pos);
        sched_cost_observe(&naive, k, pos, (s_true + (w - s_true) * l / L) * L / l);
    }
    CHECK(sched_cost_predict(&naive, k, p + 5000) > 1.3 * truth(k, p + 5000));
    /* a whole call through the split entry is a whole call */
    sched_cost a, b;
    fitted(&a);
    fitted(&b);
    sched_cost_observe_split(&a, 512, 1000, 0.02, L, L);
    sched_cost_observe(&b, 512, 1000, 0.02);
    CHECK(a.a == b.a && a.b == b.b && a.e == b.e && a.rn == b.rn && a.sn == 0);
}

/* The margin (sched_policy.h): calls at sizes run before test the model out of sample; the
 * largest actual / predicted of the window is what the policy plans to. A model of exact calls
 * plans to its prediction (margin 1); calls 15 % over it raise the margin to about 1.15, the
 * chunk shrinks so that predicted x margin fits, and the truth of the slower device fits too;
 * an absurd call is clamped to SCHED_COST_MARGIN_MAX. */
TEST(sched_cost_margin_from_its_errors)
{
    sched_cost m;
    fitted(&m);
    CHECK_NEAR(sched_cost_margin(&m), 1.0, 1e-3);
    CHECK_EQ(sched_cost_novel(&m, 512), 0); /* grain 0: no size is new */
    const double budget = 0.05;
    const int p = 64000;
    int k0 = sched_policy_chunk(200000, p, 1, 1, 1, budget, budget, &m);
    /* the device turns 15 % slower than the model at the sizes it runs */
    for (int i = 0; i < 6; i++) sched_cost_observe(&m, 300 + 50 * i, p + 1000 * i, 1.15 * truth(300 + 50 * i, p + 1000 * i));
    double mg = sched_cost_margin(&m);
    CHECK_MSG(mg > 1.1 && mg < 1.16, "margin %.3f", mg);
    int k1 = sched_policy_chunk(200000, p, 1, 1, 1, budget, budget, &m);
    CHECK_MSG(k1 < k0 && sched_cost_predict(&m, k1, p) * mg <= budget * 1.001, "k %d -> %d", k0, k1);
    CHECK_MSG(1.15 * truth(k1, p) <= budget * 1.03, "k %d: %.4f s at the slower truth", k1, 1.15 * truth(k1, p));
    CHECK_NEAR(sched_cost_plan(&m, k1, p), sched_cost_predict(&m, k1, p) * mg, 1e-12);
    /* the layers of a split call are planned the same way (the worker passes plan / n_layers) */
    CHECK(sched_policy_layers(32, sched_cost_plan(&m, 128, 128000) / 32, 0, budget, 1) <=
          sched_policy_layers(32, sched_cost_predict(&m, 128, 128000) / 32, 0, budget, 1));
    sched_cost_observe(&m, 400, p, 100 * truth(400, p));
    CHECK_NEAR(sched_cost_margin(&m), SCHED_COST_MARGIN_MAX, 1e-9);
    /* a window of exact calls later the outlier is forgotten (what is left: the errors of fits
     * whose window still held the slow calls) */
    feed(&m, SCHED_COST_WINDOW + 8, 0);
    CHECK_MSG(sched_cost_margin(&m) < 1.05, "margin %.3f", sched_cost_margin(&m));
    /* no error is known before SCHED_COST_TRUST calls */
    sched_cost f = {0};
    for (int i = 0; i < SCHED_COST_TRUST; i++) sched_cost_observe(&f, 128 * (i + 1), 0, 10 * truth(128 * (i + 1), 0));
    CHECK_EQ(f.rn + f.xn, 0);
    CHECK_NEAR(sched_cost_margin(&f), 1.0, 0);
}

/* A size no call of the window had (grain 128: a sparse method's block, a dense tile):
 * its first call's excess over the plan is learned apart and added to the plan of a call at a
 * new size only; the policy then prefers the largest size run before that fits, else the largest
 * that fits with the excess. Sizes off the grain are always new. */
TEST(sched_cost_novel_sizes)
{
    sched_cost m = {0};
    m.grain = 128;
    const int p0 = 20000;
    /* sizes 128 .. 768 run (exactly as the truth says) */
    for (int i = 0; i < 24; i++) {
        int c = 128 * (1 + i % 6), p = p0 + 500 * i;
        sched_cost_observe(&m, c, p, truth(c, p));
    }
    CHECK_EQ(sched_cost_novel(&m, 768), 0);
    CHECK_EQ(sched_cost_novel(&m, 896), 1);
    CHECK_EQ(sched_cost_novel(&m, 700), 1); /* off the grain */
    CHECK_EQ(sched_cost_novel(&m, 128 * 60), 1);
    CHECK_NEAR(sched_cost_novel_s(&m), 0, 0);
    /* the first call at 896 takes 10 ms more than the model says; its second does not */
    const int p = 30000;
    sched_cost_observe(&m, 896, p, truth(896, p) + 0.010);
    CHECK_NEAR(sched_cost_novel_s(&m), 0.010, 2e-4);
    CHECK_MSG(sched_cost_margin(&m) < 1.01, "margin %.3f: a new size's excess is kept apart", sched_cost_margin(&m));
    CHECK_EQ(sched_cost_novel(&m, 896), 0);
    CHECK_NEAR(sched_cost_plan(&m, 896, p), sched_cost_predict(&m, 896, p) * sched_cost_margin(&m), 1e-12);
    CHECK_NEAR(sched_cost_plan(&m, 1024, p), sched_cost_predict(&m, 1024, p) * sched_cost_margin(&m) + sched_cost_novel_s(&m), 1e-12);
    /* a budget that fits 1024 by the model but not with the excess: 896 (run before) wins */
    const double left = sched_cost_predict(&m, 1024, p) * sched_cost_margin(&m) + 0.002;
    CHECK_EQ(sched_policy_chunk(200000, p, 128, 1, 1, 0.05, left, &m), 896);
    /* with the excess it fits: the new size runs */
    CHECK_EQ(sched_policy_chunk(200000, p, 128, 1, 1, 0.05, left + 0.010, &m), 1024);
    /* where no size run before lies between, the largest that fits with the excess */
    const int deep = 100000;
    int k_plain = sched_policy_chunk(200000, deep, 128, 1, 1, 0.05, 0.05, &m);
    sched_cost n = m;
    n.xn = 0; /* the same model without the excess */
    int k_bare = sched_policy_chunk(200000, deep, 128, 1, 1, 0.05, 0.05, &n);
    CHECK_MSG(k_plain <= k_bare, "%d vs %d", k_plain, k_bare);
    CHECK(!sched_cost_novel(&m, k_plain) || sched_cost_plan(&m, k_plain, deep) <= 0.05 * 1.0001 || k_plain == 128);
    /* the prompt's end: a short remaining part off the grain is new, and runs when it fits */
    CHECK_EQ(sched_policy_chunk(300, p, 128, 1, 1, 0.05, 0.05, &m), 300);
    /* an excess is never planned at more than half the budget: the first call still progresses */
    sched_cost_observe(&m, 1152, p, 5.0);
    CHECK(sched_policy_chunk(200000, p, 128, 1, 1, 0.05, 0.05, &m) >= 128);
    /* a device that splits calls by layers sizes the chunk without the excess (its first call
     * runs the layers that fit with it: the worker's sched_policy_layers) */
    sched_cost ls = m;
    ls.layer_split = 1;
    CHECK_EQ(sched_policy_chunk(200000, p, 128, 1, 1, 0.05, left, &ls), 1024);
    /* a split first call at a new size gives the excess only: no fit, no split-part sample */
    sched_cost before = ls;
    sched_cost_observe_split(&ls, 1280, p, 0.030, 16, 32);
    CHECK(ls.a == before.a && ls.b == before.b && ls.e == before.e && ls.seen == before.seen && ls.sn == 0);
    CHECK_EQ(ls.xn, before.xn + 1);
    CHECK_EQ(sched_cost_novel(&ls, 1280), 0);
    /* a size is new again once the window no longer holds a call of it */
    CHECK_EQ(sched_cost_novel(&m, 128), 0);
    for (int i = 0; i < SCHED_COST_WINDOW; i++) sched_cost_observe(&m, 256, p + 256 * i, truth(256, p + 256 * i));
    CHECK_EQ(sched_cost_novel(&m, 128), 1);
    CHECK_EQ(sched_cost_novel(&m, 256), 0);
}

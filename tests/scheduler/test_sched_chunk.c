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
        /* the largest that fits: k fits, k + 1 does not (in the fitted model, and in truth within
         * the fit's error) */
        CHECK_MSG(truth(k, p) <= budget * 1.001 && truth(k + 2, p) > budget * 0.999, "p %d k %d: %.4f s", p, k,
                  truth(k, p));
        /* a sparse method's block: whole blocks, the most that fit */
        int kb = sched_policy_chunk(200000, p, 128, 1, 1, budget, budget, &m);
        CHECK(kb % 128 == 0 && kb >= 128 && kb <= k && kb + 128 > k);
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
        /* below one block: no later sparse chunk */
        CHECK_EQ(sched_policy_chunk(200000, p, 128, 1, 0, budget, truth(100, p), &m), 0);
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
    CHECK_EQ(sched_policy_layers(32, 2.15e-3, 50e-3, 1), 23);
    CHECK_EQ(sched_policy_layers(32, 2.15e-3, 50e-3, 0), 23);
    /* the rest of the chunk fits: all of it */
    CHECK_EQ(sched_policy_layers(9, 2.15e-3, 50e-3, 0), 9);
    CHECK_EQ(sched_policy_layers(23, 2.15e-3, 50e-3, 1), 23);
    /* nothing fits: one layer for the iteration's first call, none (end it) later */
    CHECK_EQ(sched_policy_layers(32, 0.2, 50e-3, 1), 1);
    CHECK_EQ(sched_policy_layers(32, 0.2, 50e-3, 0), 0);
    CHECK_EQ(sched_policy_layers(32, 2e-3, 0, 1), 1);
    CHECK_EQ(sched_policy_layers(32, 2e-3, -1e-3, 0), 0);
    /* nothing known: whole */
    CHECK_EQ(sched_policy_layers(32, 0, 50e-3, 0), 32);
    CHECK_EQ(sched_policy_layers(0, 1e-3, 50e-3, 1), 0);
}

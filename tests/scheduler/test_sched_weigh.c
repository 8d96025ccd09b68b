/* Tests for the placement that weighs the devices' decode cost by batch (sched_policy.h,
 * "weighing", issue 25): a decode goes where the decode tokens/s grow the most, the GPU is kept
 * for prefill while prompts wait on a device that has lately done nothing but prefill, and a
 * request waits for a card rather than binding its decode to a GPU that has prompts queued.
 * The curves are the issue's: the H200's measured batched decode at context 1K (250 / 4,959 /
 * 8,093 / 11,621 / 14,547 tok/s at batch 1 / 32 / 64 / 128 / 256) and a batched U280 W4A8
 * card's modelled one (BENCHMARKS.md: 10.58 / 11.01 / 12.23 / 24.33 ms at B = 1 / 2 / 4 / 8). */
#include "tests/test.h"
#include "scheduler/sched_book.h"
#include "scheduler/sched_policy.h"

#define ALL (ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT)
#define CARD (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT)
#define GB 1000000000ull

static sched_policy_dev h200(void)
{
    sched_policy_dev d = {.kind = ACCEL_KIND_CUDA, .caps = ALL, .health = ACCEL_HEALTH_OK,
                          .mem_total = 100 * GB, .kv_bytes_per_token = 131072,
                          .max_running = 256, .max_batch = 256};
    d.curve = (accel_decode_curve){5, {1, 32, 64, 128, 256},
                                   {1 / 250.0, 32 / 4959.0, 64 / 8093.0, 128 / 11621.0, 256 / 14547.0},
                                   1024, 131072 / 3.6e12};
    return d;
}

static sched_policy_dev u280(void)
{
    sched_policy_dev d = {.kind = ACCEL_KIND_FPGA, .caps = CARD, .health = ACCEL_HEALTH_OK,
                          .mem_total = 4 * GB, .kv_bytes_per_token = 66560, .max_running = 16,
                          .max_batch = 16};
    d.curve = (accel_decode_curve){5, {1, 2, 4, 8, 16}, {10.58e-3, 11.01e-3, 12.23e-3, 24.33e-3, 48.6e-3},
                                   1024, 66560 / 460e9};
    return d;
}

static const sched_policy_opts no_opts = {0};

TEST(sched_weigh_step_time_from_the_curve)
{
    sched_policy_dev g = h200(), c = u280();
    CHECK_NEAR(sched_policy_step_s(&g, 1, 1024), 1 / 250.0, 1e-12);
    CHECK_NEAR(sched_policy_step_s(&g, 64, 64 * 1024.0), 64 / 8093.0, 1e-12);
    /* linear in the batch between points */
    CHECK_NEAR(sched_policy_step_s(&g, 96, 96 * 1024.0), (64 / 8093.0 + 128 / 11621.0) / 2, 1e-12);
    /* more KV than the curve's context: its bytes at the curve's rate */
    CHECK_NEAR(sched_policy_step_s(&g, 1, 2048), 1 / 250.0 + 1024 * 131072 / 3.6e12, 1e-12);
    /* a card's batch past max_batch runs in two calls */
    c.max_batch = 8;
    CHECK_NEAR(sched_policy_step_s(&c, 12, 12 * 1024.0), 24.33e-3 + 12.23e-3, 1e-12);
    CHECK_EQ(sched_policy_step_s(&c, 0, 0), 0);
    c.curve.n = 0;
    CHECK(sched_policy_step_s(&c, 1, 1024) < 0);
    CHECK_EQ(sched_policy_gain(&c, 1, 1024), 0);
    /* gain: tokens/s of B + n less tokens/s of B */
    g.running = 32;
    g.positions = 32 * 1024.0;
    CHECK_NEAR(sched_policy_gain(&g, 32, 1024), 8093.0 - 4959.0, 1e-6);
}

TEST(sched_weigh_idle_gpu_without_prefill_decodes)
{
    sched_policy_dev v[3] = {h200(), u280(), u280()};
    sched_policy_req r = {512, 512, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    /* the GPU idle, no prompt waiting on it: its first sequence gains 250 tok/s, a card's 94 */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 0);
    /* the GPU decoding 16: its step grows by ~0.08 ms for 16 + 1 sequences (+150 tok/s) */
    v[0].running = 16;
    v[0].positions = 16 * 768.0;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* at batch 200 one more sequence adds ~23 tok/s: less than an idle card's 94 */
    v[0].running = 200;
    v[0].positions = 200 * 768.0;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
    /* a card already MAC-bound (8 sequences: its step doubles from 4 to 8) gains nearly nothing
     * from a ninth: the GPU's 23 tok/s win */
    v[1].running = v[2].running = 8;
    v[1].positions = v[2].positions = 8 * 768.0;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
}

TEST(sched_weigh_gpu_kept_for_prefill)
{
    sched_policy_dev v[2] = {h200(), u280()};
    sched_policy_req r = {16384, 256, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    /* prompts wait on a GPU that has lately only prefilled: the decode goes to the card */
    v[0].prefill_tokens = 20000;
    v[0].prefill_share = 1;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
    /* the same share with no prompt waiting: the idle GPU decodes it */
    v[0].prefill_tokens = 0;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* a short prompt queued on a GPU that mostly decodes (5 % of its time prefilling): the GPU
     * still gains the most */
    sched_policy_req s = {256, 512, 1, 0, 0, 0, 0, 0};
    v[0].prefill_tokens = 256;
    v[0].prefill_share = 0.05;
    v[0].running = 8;
    v[0].positions = 8 * 512.0;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &s, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* prefill taking 90 % of it: the card */
    v[0].prefill_share = 0.9;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &s, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
}

TEST(sched_weigh_waits_for_a_card_while_prompts_wait)
{
    sched_policy_dev v[2] = {h200(), u280()};
    sched_policy_req r = {8192, 256, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    v[1].running = 16; /* the card's slots all taken */
    v[0].prefill_tokens = 8192;
    v[0].prefill_share = 1;
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
    /* the GPU's queue empty: placed at once, in place */
    v[0].prefill_tokens = 0;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 0);
    /* a card that could never hold it (too long for its memory): no reason to wait */
    v[0].prefill_tokens = 8192;
    v[1].running = 0;
    v[1].mem_total = 1000;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
}

TEST(sched_weigh_only_with_curves_and_without_pins)
{
    sched_policy_dev v[2] = {h200(), u280()};
    sched_policy_req r = {512, 512, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    /* the card describes no curve: GLITCHES' rule, the idle card first */
    v[1].curve.n = 0;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* nor the GPU */
    v[1] = u280();
    v[0].curve.n = 0;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* a pinned decoder is obeyed whatever the curves say */
    v[0] = h200();
    r.decode_on = 1u << 1;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
}

TEST(sched_weigh_book_counts_positions)
{
    sched_book b = {.n = 2};
    b.dev[0] = h200();
    b.dev[1] = u280();
    sched_policy_req r = {1000, 200, 2, 0, 0, 0, 0, 0};
    sched_book_entry e;
    sched_book_entry_init(&e);
    REQUIRE(sched_book_place(&b, &r, &e) == SCHED_PLACE_OK);
    CHECK_EQ(e.decode, 0);
    CHECK_NEAR(b.dev[0].positions, 2 * (1000 + 100.0), 1e-9);
    sched_book_release(&b, &e);
    CHECK_EQ(b.dev[0].positions, 0);
    CHECK(sched_book_empty(&b));
}

TEST(sched_weigh_prefill_share)
{
    sched_share s = {0};
    CHECK_EQ(sched_share_value(&s), 0);
    /* a device that starts has been idle for one time constant: a first 0.1 s prefill is a
     * small share */
    sched_share_observe(&s, 10.0, 0.1);
    CHECK(sched_share_value(&s) < 0.06);
    /* ten seconds of nothing but prefill: nearly all */
    for (int i = 1; i <= 100; i++) sched_share_observe(&s, 10.0 + 0.1 * i, 0.1);
    CHECK(sched_share_value(&s) > 0.95);
    /* then ten seconds idle (one report at the end): it fades */
    sched_share_observe(&s, 30.0, 0);
    CHECK(sched_share_value(&s) < 0.01);
}

/* Issue 26's network term: a card of another node gains only for the share of the request's time
 * it decodes, t_dec / (t_dec + t_ship), t_ship the prompt's KV over the network. */
TEST(sched_weigh_network_term)
{
    sched_policy_dev v[2] = {h200(), u280()};
    sched_policy_req r = {512, 512, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    /* the GPU at batch 200: one more sequence gains ~23 tok/s, an idle card's first ~94 */
    v[0].running = 200;
    v[0].positions = 200 * 768.0;
    CHECK_EQ(sched_policy_ship_s(&v[1], &r), 0); /* this node's card: nothing crosses a network */
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* the card on another node behind 1 Gbit/s, 10 us: 512 x 66,560 B of KV in 0.27 s against
     * 512 steps of 10.6 ms: 95 % of its gain, still the card */
    v[1].caps |= ACCEL_CAP_REMOTE;
    v[1].ship_bps = 125e6;
    v[1].ship_s = 10e-6;
    CHECK_NEAR(sched_policy_ship_s(&v[1], &r), 10e-6 + 512 * 66560 / 125e6, 1e-12);
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* the link has 20 s of transfers queued ahead: the card's gain falls to ~21 % (~20 tok/s),
     * below the GPU's 23: the GPU decodes it */
    v[1].ship_s = 20;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* a long answer amortizes the same transfer: 4,096 tokens of 10.6 ms, 68 % of ~94 */
    sched_policy_req lng = {512, 4096, 1, 0, 0, 0, 0, 0};
    REQUIRE(sched_policy_place(v, 2, &no_opts, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* the same link to a card of this node does not count (no REMOTE capability) */
    v[1].caps &= ~(unsigned)ACCEL_CAP_REMOTE;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
}

/* Rule d: with a TTFT target, a prompt whose prefill takes the GPU longer than the chunk budget
 * and than a tenth of the target has its decode on a card with a slot (the GPU, decoding, would
 * prefill such prompts in chunks that each wait a step) while other requests are in the node;
 * alone, shorter ones, or without a target, a budget or a measured cost, the weighing as
 * before. The prompt's time is the GPU's learned dense call cost (prefill_fit: a + b n +
 * e n^2 / 2; here per token only, b = 25 us, so the boundaries are round). */
TEST(sched_weigh_long_prompt_decodes_on_a_card)
{
    sched_policy_dev v[2] = {h200(), u280()};
    sched_policy_opts o = {.chunk_budget_s = 0.025, .ttft_slo_s = 2.0};
    sched_policy_req lng = {16384, 256, 1, 0, 0, 0, 0, 0}, mid = {1536, 512, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    /* an idle GPU, nothing queued: the weighing alone gives it both (250 tok/s against 94) */
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* 25 us a token measured: 16,384 tokens take 0.41 s, over 0.2 s (a tenth of 2 s); alone in
     * the node (nothing queued, waiting or running anywhere) nobody waits for the GPU's
     * prefill: it still decodes */
    v[0].prefill_fit[1] = 25e-6;
    CHECK_NEAR(sched_policy_prefill_s(&v[0], 16384), 0.4096, 1e-12);
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* another request waiting behind it: the card */
    lng.others_waiting = 1;
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
    /* or one decoding on the card (its next prompt is to come), or a prompt queued on the GPU */
    lng.others_waiting = 0;
    v[1].running = 1;
    v[1].positions = 16384 + 128;
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    v[1].running = 0;
    v[1].positions = 0;
    v[0].prefill_tokens = 100;
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* the rest of this test: a request in flight on the card (a slot of 16 taken) */
    v[0].prefill_tokens = 0;
    v[1].running = 1;
    v[1].positions = 1024;
    /* 1,536 tokens take 38 ms: two chunks, but a small share of the target: the GPU */
    REQUIRE(sched_policy_place(v, 2, &o, &mid, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* the boundary: 8,000 tokens are 0.2 s; 8,001 are more */
    sched_policy_req at = {8000, 256, 1, 0, 0, 0, 0, 0}, past = {8001, 256, 1, 0, 0, 0, 0, 0};
    v[0].prefill_fit[1] = 25e-6 * (1 - 1e-9);
    REQUIRE(sched_policy_place(v, 2, &o, &at, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    REQUIRE(sched_policy_place(v, 2, &o, &past, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* a 1 s target (a tenth: 0.1 s): 1,536 tokens (38 ms) are still short, 4,097 (0.102 s) long */
    sched_policy_req k4 = {4097, 256, 1, 0, 0, 0, 0, 0};
    o.ttft_slo_s = 1.0;
    REQUIRE(sched_policy_place(v, 2, &o, &k4, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    REQUIRE(sched_policy_place(v, 2, &o, &mid, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* no target, or no chunking: the rule is off */
    o.ttft_slo_s = 0;
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    o = (sched_policy_opts){.chunk_budget_s = 0, .ttft_slo_s = 2.0};
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* every card busy: the long prompt's decode falls back to the GPU as before */
    o.chunk_budget_s = 0.025;
    v[1].running = 16;
    REQUIRE(sched_policy_place(v, 2, &o, &lng, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
}

/* Rule d prices the whole prompt on the cost model, fixed part and attention included: with
 * a = 4 ms, b = 20 us and e = 1.5e-9 s per token and key, 8,192 tokens take 4 + 163.8 + 50.3 =
 * 218.2 ms, over a tenth of the 2 s target (their per-token part alone, 168 ms, is not), and
 * 6,144 tokens 155.2 ms, under it. */
TEST(sched_weigh_long_prompt_priced_on_the_cost_model)
{
    sched_policy_dev v[2] = {h200(), u280()};
    sched_policy_opts o = {.chunk_budget_s = 0.025, .ttft_slo_s = 2.0};
    sched_policy_req k8 = {8192, 256, 1, 0, 0, 0, 0, 1}, k6 = {6144, 256, 1, 0, 0, 0, 0, 1};
    sched_placement pl;
    v[0].prefill_fit[0] = 4e-3;
    v[0].prefill_fit[1] = 20e-6;
    v[0].prefill_fit[2] = 1.5e-9;
    CHECK_NEAR(sched_policy_prefill_s(&v[0], 8192), 4e-3 + 8192 * 20e-6 + 1.5e-9 * 8192.0 * 4096, 1e-12);
    CHECK_NEAR(sched_policy_prefill_s(&v[0], 6144), 4e-3 + 6144 * 20e-6 + 1.5e-9 * 6144.0 * 3072, 1e-12);
    CHECK_EQ(sched_policy_prefill_s(&v[0], 0), 0);
    REQUIRE(sched_policy_place(v, 2, &o, &k8, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    REQUIRE(sched_policy_place(v, 2, &o, &k6, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* without the depth term the 8K prompt is under the tenth: the GPU */
    v[0].prefill_fit[2] = 0;
    REQUIRE(sched_policy_place(v, 2, &o, &k8, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* a cost model learned from real calls (sched_cost on the dense model of the chunk tests'
     * shape): the same decision as its coefficients give */
    sched_cost m = {0};
    for (int i = 0; i < 24; i++) {
        int c = 64 << (i % 5), p = 1024 * (i % 7);
        sched_cost_observe(&m, c, p, 4e-3 + 20e-6 * c + 1.5e-9 * c * (p + c / 2.0));
    }
    v[0].prefill_fit[0] = m.a;
    v[0].prefill_fit[1] = m.b;
    v[0].prefill_fit[2] = m.e;
    CHECK_NEAR(sched_policy_prefill_s(&v[0], 8192), 0.2182, 0.002);
    REQUIRE(sched_policy_place(v, 2, &o, &k8, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    REQUIRE(sched_policy_place(v, 2, &o, &k6, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
}

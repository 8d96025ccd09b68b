/* Tests for scheduler/sched_policy.c on simulated devices: GLITCHES' dispatch (split to an idle
 * card with room, GPU fallback only when every card is busy or none has room, waiting when the
 * GPU is full too), prefill ranking, health, the avoid set, batched cards, FPGA prefill, device
 * pins, and the chunk size of a chunked prefill. */
#include "tests/test.h"
#include "scheduler/sched_policy.h"

#define ALL (ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT)
#define CARD (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT)

static sched_policy_dev gpu(enum accel_kind k, uint64_t mem, int max_running)
{
    sched_policy_dev d = {k,
                          ALL,
                          ACCEL_HEALTH_OK,
                          mem,
                          0,
                          100,
                          0,
                          max_running,
                          256,
                          0,
                          0,
                          0,
                          {0},
                          0,
                          0,
                          0,
                          0,
                          {0},
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0};
    return d;
}

static sched_policy_dev card(uint64_t mem)
{
    sched_policy_dev d = {ACCEL_KIND_FPGA,
                          CARD,
                          ACCEL_HEALTH_OK,
                          mem,
                          0,
                          10,
                          0,
                          16,
                          1,
                          0,
                          0,
                          0,
                          {0},
                          0,
                          0,
                          0,
                          0,
                          {0},
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0,
                          0};
    return d;
}

static const sched_policy_opts no_opts = {0};

TEST(sched_policy_kv_bytes)
{
    sched_policy_dev d = gpu(ACCEL_KIND_CPU, 1 << 20, 4);
    sched_policy_req r = {10, 6, 3, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_kv_bytes(&d, &r), 3 * 16 * 100);
    CHECK_EQ(sched_policy_prompt_bytes(&d, &r), 10 * 100);
    CHECK_EQ(sched_policy_commit_bytes(&d, &r), 3 * 16 * 100); /* not paged: all up front */
    /* paged, 4-position blocks: the prompt's 3 blocks, 2 copies, 3 growth blocks */
    d.block_tokens = 4;
    CHECK_EQ(sched_policy_commit_bytes(&d, &r), (3 + 2 + 3) * 4 * 100);
    r.n = 1;
    r.max_tokens = 1; /* never more than the whole request */
    CHECK_EQ(sched_policy_commit_bytes(&d, &r), 11 * 100);
}

/* A paged device admits by the blocks a request takes at once, yet never one that could not
 * fit whole when alone. */
TEST(sched_policy_paged_admission)
{
    sched_policy_dev v[1] = {gpu(ACCEL_KIND_CPU, 100 * 100, 64)}; /* 100 positions */
    v[0].block_tokens = 4;
    sched_placement pl;
    sched_policy_req r = {40, 60, 1, 0, 0, 0, 0, 0}; /* whole: exactly 100 */
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_OK);
    v[0].mem_committed = sched_policy_commit_bytes(&v[0], &r); /* 10 + 1 blocks: 44 positions */
    CHECK_EQ(v[0].mem_committed, 44 * 100);
    v[0].running = 1;
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_OK); /* 44 more fit */
    r.max_tokens = 61; /* 101 positions: never, whatever is free */
    CHECK(sched_policy_place(v, 1, &no_opts, &r, &pl) != SCHED_PLACE_OK);
}

TEST(sched_policy_split_to_an_idle_card)
{
    sched_policy_dev v[3] = {gpu(ACCEL_KIND_CPU, 1 << 20, 4), card(1 << 20), card(1 << 20)};
    sched_policy_req r = {10, 10, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
    /* card 1 decodes one sequence: busy; card 2 is idle */
    v[1].running = 1;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 2);
    /* both idle again: the one with fewer decodes so far (round robin) */
    v[1].running = 0;
    v[1].assigned = 5;
    v[2].assigned = 6;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
}

TEST(sched_policy_fallback_when_every_card_is_busy_or_full)
{
    sched_policy_dev v[3] = {gpu(ACCEL_KIND_CUDA, 1 << 20, 4), card(1 << 20), card(3000)};
    sched_policy_req r = {10, 10, 1, 0, 0, 0, 0, 0}; /* 200 bytes on a card, 2000 on the gpu */
    sched_placement pl;
    v[1].running = 1;               /* busy */
    v[2].mem_committed = 2900;      /* idle but no room for 200 bytes */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 0); /* the GPU decodes it itself: its KV never leaves */
    v[2].mem_committed = 2800;      /* exactly room */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 2);
    /* a request too long for any card's HBM goes to the GPU even with idle cards */
    v[1].running = 0;
    sched_policy_req big = {200, 200, 1, 0, 0, 0, 0, 0}; /* 4000 bytes on a card > 3000; 40000 on the gpu */
    v[1].mem_total = 3000;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &big, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
}

TEST(sched_policy_waits_when_the_gpu_is_full_too)
{
    sched_policy_dev v[2] = {gpu(ACCEL_KIND_CUDA, 10000, 4), card(1 << 20)};
    sched_policy_req r = {20, 20, 1, 0, 0, 0, 0, 0}; /* 4000 bytes on the gpu, 2000 prompt */
    sched_placement pl;
    v[1].running = 1;
    v[0].mem_committed = 7000;
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
    v[0].mem_committed = 6000; /* exactly room for the whole request */
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 0 && pl.decode == 0);
    /* the gpu's decode slots are all taken */
    v[0].mem_committed = 0;
    v[0].running = 4;
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
    /* a card frees up: the prompt's temporary KV still has to fit the gpu */
    v[1].running = 0;
    v[0].mem_committed = 8001;
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
    v[0].mem_committed = 8000;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 0 && pl.decode == 1);
}

TEST(sched_policy_prefill_ranking)
{
    /* GPU first; CPU when no GPU; the least queued among equals */
    sched_policy_dev v[4] = {gpu(ACCEL_KIND_CPU, 1 << 20, 4), gpu(ACCEL_KIND_CUDA, 1 << 20, 4),
                             gpu(ACCEL_KIND_CUDA, 1 << 20, 4), card(1 << 20)};
    sched_policy_req r = {10, 10, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    v[1].prefill_tokens = 500;
    v[2].prefill_tokens = 100;
    REQUIRE(sched_policy_place(v, 4, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 2 && pl.decode == 3);
    v[1].health = v[2].health = ACCEL_HEALTH_FAILED;
    REQUIRE(sched_policy_place(v, 4, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 0 && pl.decode == 3);
    /* a degraded GPU still beats the CPU (the kind ranks first), an OK one beats it */
    v[1].health = ACCEL_HEALTH_DEGRADED;
    REQUIRE(sched_policy_place(v, 4, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 1);
    v[2].health = ACCEL_HEALTH_OK;
    REQUIRE(sched_policy_place(v, 4, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 2);
    /* fallback decode: the GPU with the fewest running */
    v[3].running = 1;
    v[1].health = ACCEL_HEALTH_OK;
    v[1].running = 1;
    v[2].running = 2;
    REQUIRE(sched_policy_place(v, 4, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 1 && pl.decode == 1);
}

TEST(sched_policy_health_and_avoid)
{
    sched_policy_dev v[3] = {gpu(ACCEL_KIND_CPU, 1 << 20, 4), card(1 << 20), card(1 << 20)};
    sched_policy_req r = {10, 10, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    v[1].health = ACCEL_HEALTH_DEGRADED; /* an OK card first */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 2);
    v[2].health = ACCEL_HEALTH_FAILED; /* a degraded idle card before the fallback */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    r.avoid = 1u << 1; /* the request failed on card 1: the CPU decodes it */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 0 && pl.decode == 0);
    r.avoid = 1u << 0; /* ... and on the CPU: nothing can prefill it */
    CHECK_EQ(sched_policy_place(v, 3, &no_opts, &r, &pl), SCHED_PLACE_NEVER);
}

TEST(sched_policy_never)
{
    sched_policy_dev v[2] = {gpu(ACCEL_KIND_CPU, 1000, 4), card(100)};
    sched_placement pl;
    sched_policy_req big = {10, 1, 1, 0, 0, 0, 0, 0}; /* 1100 bytes > any budget */
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &big, &pl), SCHED_PLACE_NEVER);
    sched_policy_req many = {1, 1, 5, 0, 0, 0, 0, 0}; /* 5 sequences: > max_running, > a card's one slot */
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &many, &pl), SCHED_PLACE_NEVER);
    CHECK_EQ(sched_policy_place(v, 0, &no_opts, &many, &pl), SCHED_PLACE_NEVER);
    /* cards alone cannot serve: nothing prefills */
    sched_policy_dev cards[2] = {card(1 << 20), card(1 << 20)};
    sched_policy_req r = {1, 1, 1, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_place(cards, 2, &no_opts, &r, &pl), SCHED_PLACE_NEVER);
    CHECK(!sched_policy_can_serve(cards, 2, &no_opts));
    CHECK(sched_policy_can_serve(v, 2, &no_opts));
    v[0].health = ACCEL_HEALTH_FAILED;
    CHECK(!sched_policy_can_serve(v, 2, &no_opts));
    /* can_serve ignores load: a busy node still serves */
    v[0].health = ACCEL_HEALTH_OK;
    v[0].running = 4;
    v[0].mem_committed = 1000;
    v[1].running = 1;
    CHECK(sched_policy_can_serve(v, 2, &no_opts));
}

TEST(sched_policy_batched_card_and_fpga_prefill)
{
    sched_policy_dev v[2] = {gpu(ACCEL_KIND_CUDA, 1 << 20, 8), card(1 << 20)};
    v[1].max_batch = 4; /* a batched kernel: idle while a batch slot is free */
    sched_policy_req r = {10, 10, 2, 0, 0, 0, 0, 0};
    sched_placement pl;
    v[1].running = 2;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    v[1].running = 3;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* the continuous-batch cap bounds a card too */
    v[1].running = 0;
    v[1].max_running = 1;
    REQUIRE(sched_policy_place(v, 2, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);

    /* all-FPGA node with prefill kernels: only when configured */
    sched_policy_dev f[2] = {card(1 << 20), card(1 << 20)};
    f[0].caps |= ACCEL_CAP_PREFILL;
    f[1].caps |= ACCEL_CAP_PREFILL;
    sched_policy_req one = {10, 10, 1, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_place(f, 2, &no_opts, &one, &pl), SCHED_PLACE_NEVER);
    sched_policy_opts fp = {.fpga_prefill = 1};
    REQUIRE(sched_policy_place(f, 2, &fp, &one, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == pl.decode); /* a card without KV export prefills for itself */
    /* with a GPU present the GPU prefills and the card decodes */
    sched_policy_dev g[2] = {gpu(ACCEL_KIND_CUDA, 1 << 20, 8), f[0]};
    REQUIRE(sched_policy_place(g, 2, &fp, &one, &pl) == SCHED_PLACE_OK);
    CHECK(pl.prefill == 0 && pl.decode == 1);
}

static int rnd(uint64_t *x, int n)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (int)(*x % (uint64_t)n);
}

/* A property over many random node states: the policy's answer is always the GLITCHES one. */
TEST(sched_policy_random_states)
{
    uint64_t x = 88172645463325252ull;
#define RND(n) rnd(&x, n)
    for (int it = 0; it < 20000; it++) {
        sched_policy_dev v[6];
        int n = 1 + RND(6);
        for (int i = 0; i < n; i++) {
            v[i] = RND(3) ? card(1000 + 100 * RND(20)) : gpu(RND(2) ? ACCEL_KIND_CUDA : ACCEL_KIND_CPU, 2000 + 1000 * RND(20), 1 + RND(4));
            v[i].health = RND(5) == 0 ? ACCEL_HEALTH_FAILED : RND(5) == 0 ? ACCEL_HEALTH_DEGRADED : ACCEL_HEALTH_OK;
            v[i].running = RND(v[i].max_running + 1);
            v[i].mem_committed = (uint64_t)RND((int)v[i].mem_total + 1);
        }
        sched_policy_req r = {1 + RND(30), 1 + RND(30), 1, 0, 0, 0, 0, 0};
        sched_placement pl;
        enum sched_place res = sched_policy_place(v, n, &no_opts, &r, &pl);
        /* is there an idle card with room, and an exporter with room? */
        int idle_card = -1, exporter = 0, local_ok = 0;
        for (int i = 0; i < n; i++) {
            if (v[i].health == ACCEL_HEALTH_FAILED) continue;
            uint64_t free = v[i].mem_total - v[i].mem_committed;
            if (v[i].kind == ACCEL_KIND_FPGA) {
                if (v[i].running == 0 && sched_policy_kv_bytes(&v[i], &r) <= free) idle_card = i;
            } else {
                if (sched_policy_prompt_bytes(&v[i], &r) <= free) exporter = 1;
                if (v[i].running < v[i].max_running && sched_policy_kv_bytes(&v[i], &r) <= free) local_ok = 1;
            }
        }
        if (idle_card >= 0 && exporter) {
            CHECK_MSG(res == SCHED_PLACE_OK && pl.prefill != pl.decode, "iteration %d: an idle card was not used", it);
            if (res == SCHED_PLACE_OK) {
                const sched_policy_dev *c = &v[pl.decode];
                CHECK(c->kind == ACCEL_KIND_FPGA && c->running == 0 && c->health != ACCEL_HEALTH_FAILED);
                CHECK(sched_policy_kv_bytes(c, &r) <= c->mem_total - c->mem_committed);
                CHECK(v[pl.prefill].kind != ACCEL_KIND_FPGA);
            }
        } else if (local_ok) {
            CHECK_MSG(res == SCHED_PLACE_OK && pl.prefill == pl.decode, "iteration %d: no fallback", it);
        } else {
            CHECK_MSG(res != SCHED_PLACE_OK, "iteration %d: placed without room", it);
        }
        if (res == SCHED_PLACE_OK && pl.prefill == pl.decode) {
            const sched_policy_dev *g = &v[pl.decode];
            CHECK(g->kind != ACCEL_KIND_FPGA && g->running < g->max_running);
            CHECK(sched_policy_kv_bytes(g, &r) <= g->mem_total - g->mem_committed);
        }
        if (t_failed()) break; /* one report is enough */
    }
#undef RND
}

TEST(sched_policy_chunk_sizes)
{
    sched_cost cost = {0};
    /* nothing decodes on the device, or chunking is off: the whole prompt */
    CHECK_EQ(sched_policy_chunk(5000, 0, 1, 0, 1, 0.05, 0.05, &cost), 5000);
    CHECK_EQ(sched_policy_chunk(5000, 0, 1, 1, 1, 0, 0, &cost), 5000);
    /* decoding, cost unknown: a probe chunk first (whole blocks for a sparse method), nothing
     * after it in the same iteration */
    CHECK_EQ(sched_policy_chunk(5000, 0, 1, 1, 1, 0.05, 0.05, &cost), SCHED_CHUNK_PROBE);
    CHECK_EQ(sched_policy_chunk(5000, 0, 128, 1, 1, 0.05, 0.05, &cost), 128);
    CHECK_EQ(sched_policy_chunk(10, 0, 1, 1, 1, 0.05, 0.05, &cost), 10);
    CHECK_EQ(sched_policy_chunk(5000, 0, 1, 1, 0, 0.05, 0.04, &cost), 0);
}

/* Pins (sched_params.prefill_on / decode_on: tandem generate's --prefill-device and --device):
 * only the pinned devices are considered, a pinned decoder that imports KV is a split target
 * even when it is not a card, and a pinned device that is busy makes the request wait. */
TEST(sched_policy_pins)
{
    const sched_policy_opts fp = {.fpga_prefill = 1};
    sched_policy_dev v[3] = {gpu(ACCEL_KIND_CPU, 1 << 20, 4), card(1 << 20), card(1 << 20)};
    v[1].caps |= ACCEL_CAP_PREFILL | ACCEL_CAP_KV_EXPORT;
    v[2].caps |= ACCEL_CAP_PREFILL | ACCEL_CAP_KV_EXPORT;
    sched_placement pl;
    /* a card prefilling and decoding itself: the second card, not the policy's first choice */
    sched_policy_req r = {10, 10, 1, 0, 1u << 2, 1u << 2, 0, 0};
    REQUIRE(sched_policy_place(v, 3, &fp, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 2);
    CHECK_EQ(pl.decode, 2);
    /* one card prefilling for another */
    r.prefill_on = 1u << 1;
    REQUIRE(sched_policy_place(v, 3, &fp, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 1);
    CHECK_EQ(pl.decode, 2);
    /* a card prefilling for the CPU: the CPU takes the KV although it is not a card */
    r.decode_on = 1u << 0;
    REQUIRE(sched_policy_place(v, 3, &fp, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 1);
    CHECK_EQ(pl.decode, 0);
    /* without the decode pin the CPU is no target: the card decodes what it prefilled */
    r.decode_on = 0;
    REQUIRE(sched_policy_place(v, 3, &fp, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 1);
    CHECK_EQ(pl.decode, 1);
    /* the pinned card busy: wait, although the other card is idle */
    r.prefill_on = 1u << 0;
    r.decode_on = 1u << 2;
    v[2].running = 1;
    CHECK_EQ(sched_policy_place(v, 3, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
    v[2].running = 0;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 2);
    /* a pinned prefill device that may not prefill (a card without fpga_prefill): never */
    r.prefill_on = 1u << 1;
    CHECK_EQ(sched_policy_place(v, 3, &no_opts, &r, &pl), SCHED_PLACE_NEVER);
    /* no pins: the rules as before (the CPU prefills, the first idle card decodes) */
    r.prefill_on = r.decode_on = 0;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
}

/* Issue 26's order: a card of this node before a card lent by a peer (ACCEL_CAP_REMOTE: its KV
 * crosses the network), whatever the round robin says; the peer's card when the local one is
 * busy; the prefill device itself when both are. */
TEST(sched_policy_local_card_before_remote)
{
    sched_policy_dev v[3] = {gpu(ACCEL_KIND_CPU, 1 << 20, 4), card(1 << 20), card(1 << 20)};
    v[1].caps |= ACCEL_CAP_REMOTE;
    v[1].assigned = 0; /* the remote card is behind in the round robin, and first by index */
    v[2].assigned = 9;
    sched_policy_req r = {10, 10, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 2);
    v[2].running = 1; /* the local card busy */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
    v[1].running = 1; /* both busy: the CPU decodes it itself */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
}

/* A lent card whose other clients hold its memory (accel_info.mem_outside, from its node's
 * heartbeat) has no room for us: the decode goes to the next card with room, and to the full one
 * once the others let go. Its fit-at-all is mem_total: it waits rather than being refused. */
TEST(sched_policy_room_left_by_other_clients)
{
    sched_policy_dev v[3] = {gpu(ACCEL_KIND_CPU, 1 << 20, 4), card(1 << 20), card(1 << 20)};
    v[1].caps |= ACCEL_CAP_REMOTE;
    v[2].caps |= ACCEL_CAP_REMOTE;
    v[1].assigned = 0; /* first by the round robin */
    v[2].assigned = 9;
    sched_policy_req r = {10, 10, 1, 0, 0, 0, 0, 0}; /* 20 positions x 10 bytes */
    sched_placement pl;
    v[1].mem_outside = (1 << 20) - 100; /* 100 bytes left: not 200 */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 2);
    v[1].mem_outside = (1 << 20) - 200; /* exactly its 200 */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    v[1].mem_outside = 1 << 20; /* all of it, and more than ours would fit beside */
    v[1].mem_committed = 50;
    v[2].mem_outside = (uint64_t)1 << 40; /* a node that reported more than our budget */
    REQUIRE(sched_policy_place(v, 3, &no_opts, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0); /* neither card: the CPU decodes it itself */
}

/* n choices that fork the prompt on a paged device that prefills and decodes them count its
 * whole blocks once in the fit-at-all rule; a card (the KV shipped per choice) counts n whole
 * sequences. */
TEST(sched_policy_forked_choices_fit)
{
    sched_policy_dev v[1] = {gpu(ACCEL_KIND_CPU, 100 * 100, 64)}; /* 100 positions */
    v[0].block_tokens = 4;
    sched_placement pl;
    /* prompt 40 (10 whole blocks), 3 choices of 20: 10 + 3 * 5 = 25 blocks = 100 positions, where
     * 3 separate sequences would need 180 */
    sched_policy_req r = {40, 20, 3, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_OK);
    r.max_tokens = 21; /* 10 + 3 * 6 = 28 blocks: never */
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_NEVER);
    /* a partial last prompt block is copied per choice: prompt 42, 3 choices of 18 -> 10 shared
     * + 3 * ceil((2 + 18) / 4) = 25 blocks fit; of 19 -> 10 + 3 * 6 = 28 never */
    sched_policy_req p = {42, 18, 3, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &p, &pl), SCHED_PLACE_OK);
    p.max_tokens = 19;
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &p, &pl), SCHED_PLACE_NEVER);
    /* a card decoding them takes n whole sequences: 3 * (10 + 10) = 60 positions of 50 */
    sched_policy_dev w[2] = {gpu(ACCEL_KIND_CPU, 1 << 20, 64), card(50 * 10)};
    w[0].caps &= ~(unsigned)ACCEL_CAP_DECODE; /* a prefill-only device: the card or nothing */
    w[1].block_tokens = 4;
    w[1].max_batch = 4; /* a batched card: room for the choices' sequences */
    sched_policy_req c = {10, 10, 3, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_place(w, 2, &no_opts, &c, &pl), SCHED_PLACE_NEVER);
    c.n = 2; /* 40 positions fit */
    CHECK_EQ(sched_policy_place(w, 2, &no_opts, &c, &pl), SCHED_PLACE_OK);
}

/* The fit-at-all rule of a paged device that prefills and decodes n choices covers what the
 * placement commits, not only the forked choices' whole KV: a request whose commit can never fit
 * is NEVER (refused at submit), not WAIT (queued forever, and the FCFS queue behind it). */
TEST(sched_policy_never_when_the_commit_cannot_fit)
{
    sched_policy_dev v[1] = {gpu(ACCEL_KIND_CPU, 240, 8)}; /* 15 blocks of 16 positions */
    v[0].kv_bytes_per_token = 1;
    v[0].block_tokens = 16;
    sched_placement pl;
    /* prompt 161 (10 whole blocks and 1 position), 4 choices of 1 token: forked, 10 + 4 = 14
     * blocks at full length; the commit's formula, 11 + 2 * 4 - 1 = 18 blocks, is capped at
     * those 14 (more than the choices ever hold; with 18 the policy answered WAIT on an idle
     * device for ever: whole KV fits, commit never) */
    sched_policy_req r = {161, 1, 4, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_commit_bytes(&v[0], &r), 14 * 16);
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_OK);
    /* on 13 blocks it can never fit: refused, not waiting */
    v[0].mem_total = 13 * 16;
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_NEVER);
    /* 2 choices commit 11 + 3 = 14 blocks, hold 10 + 2 = 12 at full length: 12 committed */
    v[0].mem_total = 240;
    r.n = 2;
    CHECK_EQ(sched_policy_commit_bytes(&v[0], &r), 12 * 16);
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_OK);
    /* and wait while it is busy */
    v[0].running = 1;
    v[0].mem_committed = 4 * 16;
    CHECK_EQ(sched_policy_place(v, 1, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
}

/* The prefill queue's order with a TTFT target: the first job in queue order that can still
 * meet it (waited + predicted prefill left <= target), else the first; a job that waited
 * SCHED_LATE_AGE x the target first of all; without a target, FCFS. */
TEST(sched_policy_prefill_order)
{
    sched_prefill_job q[SCHED_PREFILL_LOOK + 8];
    /* no target, or a single job: the head */
    q[0] = (sched_prefill_job){3.0, 1.0};
    q[1] = (sched_prefill_job){0.1, 0.2};
    CHECK_EQ(sched_policy_next_prefill(q, 2, 0), 0);
    CHECK_EQ(sched_policy_next_prefill(q, 1, 2.0), 0);
    CHECK_EQ(sched_policy_next_prefill(NULL, 0, 2.0), 0);
    /* the head late (3 + 1 > 2), the next on time: the next */
    CHECK_EQ(sched_policy_next_prefill(q, 2, 2.0), 1);
    /* every job on time: FCFS; the boundary (waited + left == target) is on time */
    q[0] = (sched_prefill_job){1.0, 1.0};
    CHECK_EQ(sched_policy_next_prefill(q, 2, 2.0), 0);
    q[0] = (sched_prefill_job){1.0, 1.0 + 1e-9};
    CHECK_EQ(sched_policy_next_prefill(q, 2, 2.0), 1);
    /* the first on-time job in queue order, not the shortest */
    q[0] = (sched_prefill_job){2.5, 0.3};
    q[1] = (sched_prefill_job){1.7, 0.4};
    q[2] = (sched_prefill_job){0.0, 0.1};
    q[3] = (sched_prefill_job){1.0, 0.5};
    CHECK_EQ(sched_policy_next_prefill(q, 4, 2.0), 2);
    /* every job late: FCFS among them */
    q[2] = (sched_prefill_job){1.0, 1.5};
    q[3] = (sched_prefill_job){1.9, 0.5};
    CHECK_EQ(sched_policy_next_prefill(q, 4, 2.0), 0);
    /* a job that waited over SCHED_LATE_AGE x the target goes first, before on-time ones */
    q[0] = (sched_prefill_job){0.0, 0.1};
    q[2] = (sched_prefill_job){SCHED_LATE_AGE * 2.0 + 0.01, 1.0};
    CHECK_EQ(sched_policy_next_prefill(q, 4, 2.0), 2);
    q[2].waited_s = SCHED_LATE_AGE * 2.0; /* not yet */
    CHECK_EQ(sched_policy_next_prefill(q, 4, 2.0), 0);
    /* an unknown prediction (0) counts the wait alone */
    q[0] = (sched_prefill_job){2.5, 0};
    q[1] = (sched_prefill_job){1.5, 0};
    CHECK_EQ(sched_policy_next_prefill(q, 2, 2.0), 1);
    /* only the first SCHED_PREFILL_LOOK jobs are looked at */
    int n = SCHED_PREFILL_LOOK + 8;
    for (int i = 0; i < n; i++) q[i] = (sched_prefill_job){3.0, 1.0};
    q[SCHED_PREFILL_LOOK] = (sched_prefill_job){0, 0.1};
    CHECK_EQ(sched_policy_next_prefill(q, n, 2.0), 0);
    q[SCHED_PREFILL_LOOK - 1] = (sched_prefill_job){0, 0.1};
    CHECK_EQ(sched_policy_next_prefill(q, n, 2.0), SCHED_PREFILL_LOOK - 1);
}

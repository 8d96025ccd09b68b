/* Tests for scheduler/sched_policy.c with simulated devices: which device a request goes to,
 * when it waits, and when it can never run. */
#include "tests/test.h"
#include "scheduler/sched_policy.h"

static sched_policy_dev dev(uint64_t mem_total, int max_running)
{
    sched_policy_dev d = {ACCEL_KIND_CPU, ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE, ACCEL_HEALTH_OK,
                          mem_total, 0, 100, 0, max_running};
    return d;
}

TEST(sched_policy_kv_bytes)
{
    sched_policy_dev d = dev(1 << 20, 4);
    sched_policy_req r = {10, 6, 3};
    CHECK_EQ(sched_policy_kv_bytes(&d, &r), 3 * 16 * 100);
}

TEST(sched_policy_places_on_least_loaded)
{
    sched_policy_dev d[3] = {dev(1 << 20, 4), dev(1 << 20, 4), dev(1 << 20, 4)};
    d[0].running = 2;
    d[1].running = 1;
    d[2].running = 1;
    sched_policy_req r = {10, 10, 1};
    sched_placement pl;
    REQUIRE(sched_policy_place(d, 3, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 1); /* fewest running, lowest index among ties */
    CHECK_EQ(pl.decode, 1);
}

TEST(sched_policy_waits_for_room)
{
    sched_policy_dev d[2] = {dev(10000, 2), dev(10000, 2)};
    sched_policy_req r = {20, 20, 1}; /* 4000 bytes */
    sched_placement pl;
    d[0].running = 2; /* no sequence slot */
    d[1].mem_committed = 7000; /* no memory */
    CHECK_EQ(sched_policy_place(d, 2, &r, &pl), SCHED_PLACE_WAIT);
    d[1].mem_committed = 6000; /* exactly enough */
    REQUIRE(sched_policy_place(d, 2, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
    /* n choices need n slots */
    sched_policy_req r2 = {1, 1, 2};
    d[1].running = 1;
    d[1].mem_committed = 0;
    CHECK_EQ(sched_policy_place(d, 2, &r2, &pl), SCHED_PLACE_WAIT);
}

TEST(sched_policy_never_when_it_cannot_fit)
{
    sched_policy_dev d[2] = {dev(1000, 4), dev(1000, 4)};
    sched_placement pl;
    sched_policy_req big = {10, 1, 1}; /* 1100 bytes > any budget */
    CHECK_EQ(sched_policy_place(d, 2, &big, &pl), SCHED_PLACE_NEVER);
    sched_policy_req many = {1, 1, 5}; /* 5 sequences > max_running */
    CHECK_EQ(sched_policy_place(d, 2, &many, &pl), SCHED_PLACE_NEVER);
    CHECK_EQ(sched_policy_place(d, 0, &many, &pl), SCHED_PLACE_NEVER);
}

TEST(sched_policy_skips_failed_and_incapable)
{
    sched_policy_dev d[3] = {dev(1 << 20, 4), dev(1 << 20, 4), dev(1 << 20, 4)};
    d[0].health = ACCEL_HEALTH_FAILED;
    d[1].caps = ACCEL_CAP_DECODE; /* cannot prefill */
    d[2].health = ACCEL_HEALTH_DEGRADED; /* still serves */
    d[2].running = 3;
    sched_policy_req r = {1, 1, 1};
    sched_placement pl;
    REQUIRE(sched_policy_place(d, 3, &r, &pl) == SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 2);
    d[2].health = ACCEL_HEALTH_FAILED;
    CHECK_EQ(sched_policy_place(d, 3, &r, &pl), SCHED_PLACE_NEVER);
}

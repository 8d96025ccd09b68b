/* The fit rule of a sparse-decoded request on a card with a slower KV tier (scheduler/
 * sched_policy.h, sched_policy_resident_bytes; accel_info.offload_bytes and resident_*): a
 * request whose whole KV does not fit the card's fast memory is placed there when it decodes
 * sparse and its whole KV fits the slower tier, committing its resident cache only; dense, or
 * too big for the slower tier too, it is not. */
#include "tests/test.h"
#include "scheduler/sched_book.h"
#include "scheduler/sched_policy.h"
#include <string.h>

#define ALL (ACCEL_CAP_PREFILL | ACCEL_CAP_DECODE | ACCEL_CAP_KV_EXPORT | ACCEL_CAP_KV_IMPORT)
#define CARD (ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT)

static const sched_policy_opts no_opts = {0};

/* A GPU that prefills and exports (its memory roomy), and a card of `mem` bytes of KV with a
 * DDR4 tier of `ddr` bytes; 10 bytes per position, resident: 1 per position + 50 per block. */
static void devs(sched_policy_dev *v, uint64_t mem, uint64_t ddr)
{
    v[0] = (sched_policy_dev){.kind = ACCEL_KIND_CUDA, .caps = ALL, .health = ACCEL_HEALTH_OK,
                              .mem_total = 1 << 30, .kv_bytes_per_token = 10, .max_running = 4,
                              .max_batch = 4};
    v[1] = (sched_policy_dev){.kind = ACCEL_KIND_FPGA, .caps = CARD, .health = ACCEL_HEALTH_OK,
                              .mem_total = mem, .kv_bytes_per_token = 10, .max_running = 16,
                              .max_batch = 1, .offload_bytes = ddr, .resident_per_token = 1,
                              .resident_per_block = 50};
}

TEST(sched_offload_sparse_request_fits_the_resident_cache)
{
    sched_policy_dev v[2];
    devs(v, 5000, 1 << 20); /* 500 positions of KV in HBM */
    sched_placement pl;
    /* 1,000 positions: 10,000 bytes whole, over the card's 5,000 */
    sched_policy_req dense = {900, 100, 1, 0, 0, 0, 0, 0};
    sched_policy_req sparse = {900, 100, 1, 0, 0, 0, 8, 0};
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &dense), 0);
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &sparse), 1000 * 1 + (8 + 2) * 50);
    CHECK_EQ(sched_policy_commit_bytes(&v[1], &sparse), 1500);
    /* dense: the card cannot hold it, the GPU decodes it */
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &dense, &pl), SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* sparse: split to the card, whose fast memory holds the cache */
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &sparse, &pl), SCHED_PLACE_OK);
    CHECK_EQ(pl.prefill, 0);
    CHECK_EQ(pl.decode, 1);
    /* the device's default: sparse when it says so */
    sched_policy_req dflt = {900, 100, 1, 0, 0, 0, -1, 0};
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &dflt), 0);
    v[1].resident_default_blocks = 8;
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &dflt), 1500);
    /* a request that fits whole keeps the old rule (its whole KV) */
    sched_policy_req small = {300, 100, 1, 0, 0, 0, 8, 0};
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &small), 0);
    /* n choices: n caches */
    sparse.n = 2;
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &sparse), 3000);
}

TEST(sched_offload_limits)
{
    sched_policy_dev v[2];
    sched_placement pl;
    sched_policy_req sparse = {900, 100, 1, 0, 0, 0, 8, 0};
    /* the slower tier too small for the whole KV: the rule does not apply */
    devs(v, 5000, 9999);
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &sparse), 0);
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &sparse, &pl), SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* a card with no slower tier: likewise */
    devs(v, 5000, 0);
    CHECK_EQ(sched_policy_resident_bytes(&v[1], &sparse), 0);
    /* the resident cache itself larger than the fast memory: not on the card, ever */
    devs(v, 1400, 1 << 20);
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &sparse, &pl), SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 0);
    /* the card's room already committed: it waits for the card rather than the GPU when the
     * card is the only decoder (the GPU pinned out) */
    devs(v, 5000, 1 << 20);
    v[1].mem_committed = 4000;
    sparse.decode_on = 1u << 1;
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &sparse, &pl), SCHED_PLACE_WAIT);
    v[1].mem_committed = 3500;
    CHECK_EQ(sched_policy_place(v, 2, &no_opts, &sparse, &pl), SCHED_PLACE_OK);
    CHECK_EQ(pl.decode, 1);
}

/* A GPU that offloads every sparse sequence once its prompt is in (accel_info.offload_any, the
 * CUDA device with decode_sparse offload=1): its requests fit its memory whole, yet each commits
 * only its resident part once prefilled, and its prompt's whole KV while it is prefilled — so
 * the batch outgrows what the memory holds whole, but never with more prompts in flight than
 * fit. */
TEST(sched_offload_any_gpu_batch_past_its_memory)
{
    sched_book b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    /* 100,000 bytes, 10 per position: ten 1,000-position requests whole */
    b.dev[0] = (sched_policy_dev){.kind = ACCEL_KIND_CUDA, .caps = ALL, .health = ACCEL_HEALTH_OK,
                                  .mem_total = 100000, .kv_bytes_per_token = 10,
                                  .max_running = 256, .max_batch = 256, .offload_bytes = 1 << 20,
                                  .resident_per_token = 1, .resident_default_blocks = 128};
    sched_policy_req r = {900, 100, 1, 0, 0, 0, -1, 0};
    sched_book_entry e[128];
    /* a device that offloads only what does not fit (a card's rule): ten, whole */
    int k = 0;
    while (k < 128 && sched_book_place(&b, &r, &e[k]) == SCHED_PLACE_OK) sched_book_prefilled(&b, &e[k]), k++;
    CHECK_EQ(k, 10);
    CHECK_EQ(sched_policy_resident_bytes(&b.dev[0], &r), 0);
    for (int i = 0; i < k; i++) sched_book_release(&b, &e[i]);
    CHECK(sched_book_empty(&b));
    /* offload_any: 1,000 resident bytes each once prefilled, the 9,000-byte prompt beside them
     * while it is prefilled: (100,000 - 9,000) / 1,000 = 91 */
    b.dev[0].offload_any = 1;
    CHECK_EQ(sched_policy_resident_bytes(&b.dev[0], &r), 1000);
    k = 0;
    while (k < 128 && sched_book_place(&b, &r, &e[k]) == SCHED_PLACE_OK) sched_book_prefilled(&b, &e[k]), k++;
    CHECK_EQ(k, 91);
    CHECK_EQ(b.dev[0].mem_committed, 91000);
    for (int i = 0; i < k; i++) sched_book_release(&b, &e[i]);
    CHECK(sched_book_empty(&b));
    /* prompts still being prefilled hold their whole KV: ten at once, as before */
    k = 0;
    while (k < 128 && sched_book_place(&b, &r, &e[k]) == SCHED_PLACE_OK) k++;
    CHECK_EQ(k, 10);
    for (int i = 0; i < k; i++) sched_book_release(&b, &e[i]);
    /* dense requests, or a host tier too small for the whole KV: the whole KV, as before */
    sched_policy_req dense = {900, 100, 1, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_resident_bytes(&b.dev[0], &dense), 0);
    b.dev[0].offload_bytes = 9999;
    CHECK_EQ(sched_policy_resident_bytes(&b.dev[0], &r), 0);
}

/* The slower tier is counted across requests (sched_policy_offload_bytes, the book's
 * offload_committed): a GPU keeps only its sparse layers there, in whole KV blocks of the
 * sequence's capacity (accel_info.offload_per_token); placements stop when the tier is taken,
 * wait rather than land where the device could not move them out, and go on as requests end.
 * A card keeps the whole KV there (offload_per_token 0), counted the same way. */
TEST(sched_offload_tier_counted_across_requests)
{
    sched_book b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    /* 1,000 positions -> 1,024 in blocks of 128, 8 bytes each in the tier: 8,192 per request;
     * room for five and a bit */
    b.dev[0] = (sched_policy_dev){.kind = ACCEL_KIND_CUDA, .caps = ALL | ACCEL_CAP_PAGED,
                                  .health = ACCEL_HEALTH_OK, .mem_total = 100000,
                                  .kv_bytes_per_token = 10, .max_running = 256, .max_batch = 256,
                                  .block_tokens = 128, .offload_bytes = 5 * 8192 + 100,
                                  .resident_per_token = 1, .resident_default_blocks = 128,
                                  .offload_any = 1, .offload_per_token = 8};
    sched_policy_req r = {900, 100, 1, 0, 0, 0, -1, 0};
    CHECK_EQ(sched_policy_offload_bytes(&b.dev[0], &r), 8192);
    sched_policy_req dense = {900, 100, 1, 0, 0, 0, 0, 0};
    CHECK_EQ(sched_policy_offload_bytes(&b.dev[0], &dense), 0);
    sched_book_entry e[16], ed;
    int k = 0;
    while (k < 16 && sched_book_place(&b, &r, &e[k]) == SCHED_PLACE_OK) sched_book_prefilled(&b, &e[k]), k++;
    CHECK_EQ(k, 5);
    CHECK_EQ(b.dev[0].offload_committed, 5 * 8192);
    sched_placement pl;
    CHECK_EQ(sched_policy_place(b.dev, 1, &no_opts, &r, &pl), SCHED_PLACE_WAIT);
    /* a dense request takes none of the tier: it still fits the memory whole */
    sched_book_entry_init(&ed);
    CHECK_EQ(sched_book_place(&b, &dense, &ed), SCHED_PLACE_OK);
    CHECK_EQ(b.dev[0].offload_committed, 5 * 8192);
    sched_book_release(&b, &ed);
    /* two choices take two sequences' worth */
    sched_policy_req two = r;
    two.n = 2;
    CHECK_EQ(sched_policy_offload_bytes(&b.dev[0], &two), 2 * 8192);
    /* one ends: one more fits, not two choices */
    sched_book_release(&b, &e[0]);
    CHECK_EQ(sched_policy_place(b.dev, 1, &no_opts, &two, &pl), SCHED_PLACE_WAIT);
    CHECK_EQ(sched_book_place(&b, &r, &e[0]), SCHED_PLACE_OK);
    CHECK_EQ(b.dev[0].offload_committed, 5 * 8192);
    for (int i = 0; i < k; i++) sched_book_release(&b, &e[i]);
    CHECK(sched_book_empty(&b));
    CHECK_EQ(b.dev[0].offload_committed, 0);
    /* a request larger than the whole tier: the rule does not apply (its whole KV counts) */
    sched_policy_req big = {6000, 100, 1, 0, 0, 0, -1, 0};
    CHECK_EQ(sched_policy_resident_bytes(&b.dev[0], &big), 0);
    CHECK_EQ(sched_policy_offload_bytes(&b.dev[0], &big), 0);

    /* a card: the whole KV (10,000 bytes) in DDR4 per request, 25,000 of it: two at once */
    sched_policy_dev v[2];
    devs(v, 5000, 25000);
    memset(&b, 0, sizeof b);
    b.n = 2;
    b.dev[0] = v[0], b.dev[1] = v[1];
    b.dev[1].max_batch = 4; /* four decode slots: the tier, not the slots, stops it */
    sched_policy_req sp = {900, 100, 1, 0, 0, 0, 8, 0};
    sp.decode_on = 1u << 1;
    CHECK_EQ(sched_policy_offload_bytes(&b.dev[1], &sp), 10000);
    k = 0;
    while (k < 16 && sched_book_place(&b, &sp, &e[k]) == SCHED_PLACE_OK) sched_book_prefilled(&b, &e[k]), k++;
    CHECK_EQ(k, 2);
    CHECK_EQ(b.dev[1].offload_committed, 20000);
    CHECK_EQ(sched_policy_place(b.dev, 2, &no_opts, &sp, &pl), SCHED_PLACE_WAIT);
    sched_book_release(&b, &e[1]);
    CHECK_EQ(sched_book_place(&b, &sp, &e[1]), SCHED_PLACE_OK);
    CHECK_EQ(e[1].decode, 1);
    sched_book_release(&b, &e[0]);
    sched_book_release(&b, &e[1]);
    CHECK(sched_book_empty(&b));
}

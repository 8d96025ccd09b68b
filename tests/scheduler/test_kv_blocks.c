/* Tests for scheduler/kv_blocks.c: the KV store's bookkeeping — prefix hits (full, partial, from
 * the host tier), exactness under hash collisions, copy-on-write of a shared partial block,
 * forks for n choices, LRU eviction, preemption and resumption, admission bounds, and a random
 * load checked against a plain model of which positions each sequence may reuse. */
#include "tests/test.h"
#include "scheduler/kv_blocks.h"
#include <stdlib.h>
#include <string.h>

static sched_kv *mk(int bt, int nd, int nh)
{
    sched_kv_cfg c = {bt, nd, nh, 0x1234, 1};
    return sched_kv_new(&c);
}

static void seq_ids(int32_t *ids, int n, int seed)
{
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((seed * 7919 + i * 31) % 5000);
}

/* runs a whole "request": begin, grow to n + gen, commit the prompt, end */
static int serve(sched_kv *kv, const int32_t *ids, int n, int gen, sched_kv_ops *ops)
{
    sched_kv_seq s;
    int hit = sched_kv_begin(kv, &s, ids, n, 0, ops);
    if (hit < 0) return -1;
    if (sched_kv_grow(kv, &s, n + gen, ops) < 0) {
        sched_kv_end(kv, &s);
        return -2;
    }
    sched_kv_commit(kv, &s, ids, n);
    sched_kv_end(kv, &s);
    return hit;
}

TEST(kv_blocks_prefix_hits)
{
    sched_kv *kv = mk(16, 64, 0);
    REQUIRE(kv);
    sched_kv_ops ops = {0};
    int32_t a[100], b[100];
    seq_ids(a, 100, 1);
    memcpy(b, a, sizeof b);
    b[70] = 4999; /* b shares a's first 70 tokens: 4 full blocks */
    CHECK_EQ(serve(kv, a, 100, 8, &ops), 0);  /* cold */
    CHECK_EQ(serve(kv, a, 100, 8, &ops), 96); /* a full hit: 6 blocks (the last token is computed) */
    CHECK_EQ(serve(kv, b, 100, 8, &ops), 64); /* a partial hit */
    CHECK_EQ(serve(kv, a, 96, 8, &ops), 80);  /* never the last token: 95 -> 5 blocks */
    CHECK_EQ(ops.n, 0);                        /* nothing to move: no host tier, no sharing */
    sched_kv_stats st;
    sched_kv_get_stats(kv, &st);
    CHECK_EQ(st.hit_tokens, 96 + 64 + 80);
    CHECK_EQ(sched_kv_live_refs(kv), 0);
    /* a sequence that opts out neither reuses nor publishes */
    sched_kv_seq s;
    CHECK_EQ(sched_kv_begin(kv, &s, a, 100, 1, &ops), 0);
    sched_kv_end(kv, &s);
    sched_kv_ops_deinit(&ops);
    sched_kv_free(kv);
    /* the config switch */
    sched_kv_cfg c = {16, 64, 0, 1, 0};
    kv = sched_kv_new(&c);
    CHECK_EQ(serve(kv, a, 100, 8, NULL), 0);
    CHECK_EQ(serve(kv, a, 100, 8, NULL), 0);
    sched_kv_free(kv);
}

TEST(kv_blocks_exact_under_collisions)
{
    /* the same block ids under a different parent never match; neither does another salt */
    sched_kv *kv = mk(4, 32, 0);
    int32_t x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[9] = {9, 9, 9, 9, 5, 6, 7, 8, 9};
    CHECK_EQ(serve(kv, x, 9, 0, NULL), 0);
    CHECK_EQ(serve(kv, y, 9, 0, NULL), 0); /* block 2 equal, parent not: no hit */
    CHECK_EQ(serve(kv, x, 9, 0, NULL), 8);
    CHECK(sched_kv_hash(0, 1, x, 4) != sched_kv_hash(0, 2, x, 4));
    CHECK(sched_kv_hash(0, 1, x, 4) != sched_kv_hash(0, 1, x + 1, 4));
    sched_kv_free(kv);
}

TEST(kv_blocks_fork_and_copy_on_write)
{
    sched_kv *kv = mk(8, 16, 0);
    sched_kv_ops ops = {0};
    int32_t p[20];
    seq_ids(p, 20, 3);
    sched_kv_seq a, b;
    CHECK_EQ(sched_kv_begin(kv, &a, p, 20, 0, &ops), 0);
    REQUIRE(sched_kv_grow(kv, &a, 20, &ops) == 0); /* 3 blocks, the last holds 4 positions */
    sched_kv_commit(kv, &a, p, 20);
    REQUIRE(sched_kv_fork(kv, &a, &b) == 0); /* n = 2: one prefill */
    for (int i = 0; i < 3; i++) CHECK_EQ(sched_kv_refs(kv, a.blocks[i]), 2);
    /* a writes position 20: its shared partial block is copied first */
    REQUIRE(sched_kv_grow(kv, &a, 21, &ops) == 0);
    REQUIRE(ops.n == 1);
    CHECK_EQ(ops.op[0].kind, KV_OP_COPY);
    CHECK_EQ(ops.op[0].src, b.blocks[2]);
    CHECK_EQ(ops.op[0].dst, a.blocks[2]);
    CHECK_EQ(ops.op[0].tokens, 4);
    CHECK(a.blocks[2] != b.blocks[2]);
    CHECK_EQ(sched_kv_refs(kv, b.blocks[2]), 1);
    CHECK_EQ(a.blocks[0], b.blocks[0]); /* full blocks stay shared */
    /* b now owns its partial block alone: it writes in place */
    sched_kv_ops_reset(&ops);
    REQUIRE(sched_kv_grow(kv, &b, 21, &ops) == 0);
    CHECK_EQ(ops.n, 0);
    sched_kv_stats st;
    sched_kv_get_stats(kv, &st);
    CHECK_EQ(st.cow_copies, 1);
    sched_kv_end(kv, &a);
    sched_kv_end(kv, &b);
    CHECK_EQ(sched_kv_live_refs(kv), 0);
    sched_kv_get_stats(kv, &st);
    CHECK_EQ(st.cached_idle, 2); /* the prompt's two full blocks stay cached */
    CHECK_EQ(st.free, 14);
    sched_kv_ops_deinit(&ops);
    sched_kv_free(kv);
}

TEST(kv_blocks_lru_and_host_tier)
{
    /* 6 device blocks of 4, 4 host slots: three 9-token prompts each cache 2 blocks */
    sched_kv *kv = mk(4, 6, 4);
    sched_kv_ops ops = {0};
    int32_t p[3][9];
    for (int i = 0; i < 3; i++) seq_ids(p[i], 9, 10 + i);
    CHECK_EQ(serve(kv, p[0], 9, 3, &ops), 0); /* 3 blocks in use, 2 stay cached */
    CHECK_EQ(serve(kv, p[1], 9, 3, &ops), 0);
    CHECK_EQ(ops.n, 0);
    /* the third needs 3 blocks with 2 free: p[0]'s oldest cached block goes to the host */
    CHECK_EQ(serve(kv, p[2], 9, 3, &ops), 0);
    REQUIRE(ops.n >= 1);
    CHECK_EQ(ops.op[0].kind, KV_OP_SWAP_OUT);
    sched_kv_stats st;
    sched_kv_get_stats(kv, &st);
    CHECK(st.swaps_out >= 1);
    CHECK_EQ(st.dropped, 0);
    /* p[0] again: its blocks come back from the host tier (swap-in ops), no recompute */
    sched_kv_ops_reset(&ops);
    sched_kv_seq s;
    CHECK_EQ(sched_kv_begin(kv, &s, p[0], 9, 0, &ops), 8);
    int ins = 0;
    for (int i = 0; i < ops.n; i++) ins += ops.op[i].kind == KV_OP_SWAP_IN;
    CHECK(ins >= 1);
    /* every swap-in lands in a block the sequence holds */
    for (int i = 0; i < ops.n; i++)
        if (ops.op[i].kind == KV_OP_SWAP_IN) CHECK(ops.op[i].dst == s.blocks[0] || ops.op[i].dst == s.blocks[1]);
    sched_kv_get_stats(kv, &st);
    CHECK(st.host_hit_tokens >= 4);
    sched_kv_end(kv, &s);
    CHECK_EQ(sched_kv_live_refs(kv), 0);
    sched_kv_ops_deinit(&ops);
    sched_kv_free(kv);
}

TEST(kv_blocks_preempt_resume_and_bounds)
{
    sched_kv *kv = mk(4, 8, 0);
    int32_t p[13];
    seq_ids(p, 13, 5);
    sched_kv_seq s;
    CHECK_EQ(sched_kv_begin(kv, &s, p, 13, 0, NULL), 0);
    REQUIRE(sched_kv_grow(kv, &s, 13, NULL) == 0);
    sched_kv_commit(kv, &s, p, 13);
    sched_kv_preempt(kv, &s); /* out of memory elsewhere: give every block back */
    CHECK_EQ(sched_kv_live_refs(kv), 0);
    CHECK_EQ(sched_kv_begin(kv, &s, p, 13, 0, NULL), 12); /* resumes from its own cached blocks */
    sched_kv_end(kv, &s);
    /* a prompt longer than the pool: refused before anything is taken */
    CHECK(!sched_kv_can_fit(kv, 33));
    CHECK(sched_kv_can_fit(kv, 32));
    int32_t big[40];
    seq_ids(big, 40, 6);
    CHECK_EQ(sched_kv_begin(kv, &s, big, 40, 0, NULL), 0);
    CHECK_EQ(sched_kv_grow(kv, &s, 40, NULL), -1);
    CHECK_EQ(s.n_blocks, 0);
    sched_kv_end(kv, &s);
    sched_kv_stats st;
    sched_kv_get_stats(kv, &st);
    CHECK_EQ(st.free + st.cached_idle, 8);
    /* bad configs */
    sched_kv_cfg bad = {0, 8, 0, 0, 1};
    CHECK(sched_kv_new(&bad) == NULL);
    sched_kv_cfg bad2 = {16, -1, 0, 0, 1};
    CHECK(sched_kv_new(&bad2) == NULL);
    sched_kv_free(kv);
}

/* A random load: many sequences sharing prefixes, forks, preemptions, a small pool with a host
 * tier. Checked: a hit never exceeds the longest prefix of full blocks any earlier sequence
 * committed (a model kept here), reference counts end at zero, and free + idle + used = pool. */
TEST(kv_blocks_random_load)
{
    enum { BT = 4, ND = 24, NH = 8, NS = 6 };
    sched_kv *kv = mk(BT, ND, NH);
    sched_kv_ops ops = {0};
    static int32_t committed[400][64];
    static int clen[400];
    int ncomm = 0;
    srand(7);
    sched_kv_seq live[NS];
    int32_t live_ids[NS][64];
    int live_n[NS], used[NS] = {0};
    for (int step = 0; step < 3000; step++) {
        int i = rand() % NS;
        if (!used[i]) {
            int n = 2 + rand() % 30, fam = rand() % 4;
            for (int k = 0; k < n; k++) live_ids[i][k] = k < 12 ? fam * 100 + k : rand() % 50;
            int hit = sched_kv_begin(kv, &live[i], live_ids[i], n, rand() % 10 == 0, &ops);
            if (hit < 0) continue;
            /* the model: the longest committed prefix (full blocks, < n) */
            int best = 0;
            for (int c = 0; c < ncomm; c++) {
                int m = 0;
                while (m < clen[c] && m < n - 1 && committed[c][m] == live_ids[i][m]) m++;
                m = m / BT * BT;
                if (m > best) best = m;
            }
            CHECK_MSG(hit <= best, "hit %d > model %d", hit, best);
            CHECK_EQ(hit % BT, 0);
            if (sched_kv_grow(kv, &live[i], n, &ops) < 0) {
                sched_kv_end(kv, &live[i]);
                continue;
            }
            sched_kv_commit(kv, &live[i], live_ids[i], n);
            if (!live[i].no_cache && ncomm < 400) {
                memcpy(committed[ncomm], live_ids[i], sizeof(int32_t) * (size_t)n);
                clen[ncomm++] = n;
            }
            live_n[i] = n;
            used[i] = 1;
        } else {
            int r = rand() % 3;
            if (r == 0 && live_n[i] < 60) {
                if (sched_kv_grow(kv, &live[i], live_n[i] + 1, &ops) == 0) live_n[i]++;
                else {
                    sched_kv_preempt(kv, &live[i]);
                    used[i] = 0;
                }
            } else if (r == 1) {
                /* fork into a free slot, then drop the fork */
                sched_kv_seq f;
                if (sched_kv_fork(kv, &live[i], &f) == 0) {
                    (void)sched_kv_grow(kv, &f, f.n_tokens + 1, &ops); /* may not fit: fine */
                    sched_kv_end(kv, &f);
                }
            } else {
                sched_kv_end(kv, &live[i]);
                used[i] = 0;
            }
        }
        sched_kv_ops_reset(&ops);
        long refs = 0;
        for (int b = 0; b < ND; b++) {
            CHECK(sched_kv_refs(kv, b) >= 0);
            refs += sched_kv_refs(kv, b);
        }
        sched_kv_stats st;
        sched_kv_get_stats(kv, &st);
        int in_use = 0;
        for (int b = 0; b < ND; b++) in_use += sched_kv_refs(kv, b) > 0;
        CHECK_EQ(st.free + st.cached_idle + in_use, ND);
        CHECK(st.host_used <= NH);
    }
    for (int i = 0; i < NS; i++)
        if (used[i]) sched_kv_end(kv, &live[i]);
    CHECK_EQ(sched_kv_live_refs(kv), 0);
    sched_kv_stats st;
    sched_kv_get_stats(kv, &st);
    CHECK(st.hit_tokens > 0 && st.swaps_out > 0);
    sched_kv_ops_deinit(&ops);
    sched_kv_free(kv);
}

/* The KV store through the scheduler (issue 20): the real CPU backend (paged, 16-position
 * blocks) and stories260K on a real libuv loop.
 *
 *   full / partial hit   a prompt served from cached blocks gives the same tokens and the same
 *                        log-probabilities, bit for bit, as served cold; cached_tokens says how
 *                        many were reused; an opt-out reuses nothing
 *   multi-turn           the next turn (prompt + reply + more) reuses the whole first turn
 *   host tier            a prefix evicted from the device comes back from host memory, exact
 *   n = 2                two identical choices at temperature 0 from one prefill (a fork)
 *   preemption           two requests that cannot both grow to the end: the younger is
 *                        preempted and resumes; both texts equal their runs alone
 *   too large            a prompt longer than the whole pool is refused at submit
 * Every test ends with every block back (env_close: no sequence, all memory free). */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/fpga/fpga_util.h"
#include "devices/devices.h"
#include "tests/scheduler/sched_env.h"

#define MAX_REQS 16
#define MAX_TOK 256

typedef struct rec {
    sched_req *r;
    int done, error, status, cached, completion;
    double kv_read; /* the DONE event's decode_kv_read (-1: dense decode) */
    int n_tok[2];
    int32_t tok[2][MAX_TOK];
    float lp[2][MAX_TOK];
} rec;

typedef struct env {
    sched_env se; /* devs[0]: the CPU; env_open_card: devs[1], an emulated card */
    rec recs[MAX_REQS];
    int n_recs;
} env;

static env *E;
static void on_event(void *ctx, const sched_event *ev)
{
    rec *r = ctx;
    switch (ev->type) {
    case SCHED_EV_TOKEN:
        if (ev->choice >= 0 && ev->choice < 2 && r->n_tok[ev->choice] < MAX_TOK) {
            r->tok[ev->choice][r->n_tok[ev->choice]] = ev->token_id;
            r->lp[ev->choice][r->n_tok[ev->choice]++] = ev->has_logprobs ? ev->token.logprob : 0;
        }
        break;
    case SCHED_EV_DONE:
        r->done++;
        r->cached = ev->cached_tokens;
        r->completion = ev->completion_tokens;
        r->kv_read = ev->decode_kv_read;
        break;
    case SCHED_EV_ERROR: r->error++, r->status = ev->status; break;
    default: break;
    }
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) sched_env_final(&E->se);
}

/* mem_positions: the device's KV budget in positions (0: its own); host: host-tier bytes. */
static int env_open(env *e, int mem_positions, uint64_t host, int max_running)
{
    memset(e, 0, sizeof *e);
    E = e;
    if (sched_env_load(&e->se) < 0) return -1;
    const model_config *c = &e->se.m->cfg;
    uint64_t per = 2ull * c->n_layers * c->n_kv_heads * c->head_dim * 4;
    accel_opts o = {.threads = 2, .mem_limit = (uint64_t)mem_positions * per};
    char err[256];
    if (sched_env_add(&e->se, devices_open("cpu", e->se.m, &o, err, sizeof err), err) < 0) return -1;
    sched_config cfg = {.max_waiting = 64, .max_running = max_running, .host_cache_bytes = host};
    return sched_env_start(&e->se, &cfg);
}

/* The CPU with a calibrated channel file (tests/util.h: t_tls_channels), so that a request can
 * decode with AsyncTLS; dense unless the request says otherwise. */
static int env_open_tls(env *e)
{
    memset(e, 0, sizeof *e);
    E = e;
    if (sched_env_load(&e->se) < 0) return -1;
    const char *chan = t_tls_channels(e->se.m, "channels.bin");
    if (!chan) return -1;
    char err[512];
    accel_opts o = {.threads = 2, .decode_sparse = "off", .sparse_channels = chan};
    if (sched_env_add(&e->se, devices_open("cpu", e->se.m, &o, err, sizeof err), err) < 0)
        return -1;
    sched_config cfg = {.max_waiting = 64, .max_running = 8};
    return sched_env_start(&e->se, &cfg);
}

/* The CPU and one emulated card (W8A8): requests prefill on the CPU and decode on the card. */
static int env_open_card(env *e)
{
    memset(e, 0, sizeof *e);
    E = e;
    tf_cache_env();
    if (sched_env_load(&e->se) < 0) return -1;
    char err[512];
    accel_opts oc = {.threads = 2}, of = {.weight_bits = 8};
    if (sched_env_add(&e->se, devices_open("cpu", e->se.m, &oc, err, sizeof err), err) < 0 ||
        sched_env_add(&e->se, devices_open("fpga-emu:0", e->se.m, &of, err, sizeof err), err) < 0)
        return -1;
    sched_config cfg = {.max_waiting = 64, .max_running = 8};
    return sched_env_start(&e->se, &cfg);
}

static void env_close(env *e)
{
    sched_env_close(&e->se);
}

static sched_params greedy(const int32_t *ids, int n, int max_tokens, int choices)
{
    sched_params p = sched_env_greedy(ids, n, max_tokens, choices);
    p.sampling.logprobs = 1;
    p.ignore_eos = 1;
    return p;
}

static int submit(env *e, const sched_params *p)
{
    rec *r = &e->recs[e->n_recs];
    memset(r, 0, sizeof *r);
    char err[256];
    int st = sched_submit(e->se.s, p, on_event, r, &r->r, err, sizeof err);
    if (st != SCHED_OK) return st;
    e->n_recs++;
    return SCHED_OK;
}

/* Submits and runs until it (and anything else submitted) is final; the rec. */
static rec *run_one(env *e, const sched_params *p)
{
    static rec refused;
    if (submit(e, p) != SCHED_OK) {
        t_fail(__FILE__, __LINE__, "refused");
        memset(&refused, 0, sizeof refused);
        return &refused;
    }
    sched_env_run(&e->se, e->se.want + 1);
    rec *r = &e->recs[e->n_recs - 1];
    CHECK_MSG(r->done == 1 && r->n_tok[0] == p->max_tokens, "done %d error %d (%s), %d tokens",
              r->done, r->error, sched_strerror(r->status), r->n_tok[0]);
    return r;
}

static void prompt_ids(int32_t *ids, int n, int mul, int add)
{
    for (int i = 0; i < n; i++) ids[i] = 1 + (i * mul + add) % 500;
    ids[0] = 1;
}

/* Same tokens and the same log-probabilities, bit for bit. */
static int same_run(const rec *a, int ca, const rec *b, int cb)
{
    return a->n_tok[ca] == b->n_tok[cb] &&
           !memcmp(a->tok[ca], b->tok[cb], sizeof(int32_t) * a->n_tok[ca]) &&
           !memcmp(a->lp[ca], b->lp[cb], sizeof(float) * a->n_tok[ca]);
}

TEST(sched_kv_full_and_partial_hit)
{
    env e;
    if (env_open(&e, 0, 0, 8) < 0) return;
    int32_t p[120], q[120];
    prompt_ids(p, 120, 37, 11);
    memcpy(q, p, sizeof q);
    for (int i = 50; i < 120; i++) q[i] = 1 + (i * 13 + 5) % 500; /* shares 50 tokens */
    sched_params cold = greedy(p, 120, 24, 1);
    cold.no_prefix_cache = 1;
    rec *c = run_one(&e, &cold);
    CHECK_EQ(c->cached, 0);
    sched_params a = greedy(p, 120, 24, 1);
    rec *r1 = run_one(&e, &a); /* nothing cached yet (the opt-out left nothing) */
    CHECK_EQ(r1->cached, 0);
    rec *r2 = run_one(&e, &a); /* the same prompt: its whole blocks below the last token */
    CHECK_EQ(r2->cached, 112);
    CHECK(r1->done == 1 && r2->done == 1 && c->done == 1);
    CHECK_MSG(same_run(c, 0, r1, 0) && same_run(c, 0, r2, 0), "a cached prompt decodes differently");
    sched_params b = greedy(q, 120, 24, 1);
    rec *r3 = run_one(&e, &b); /* a partial hit: the 3 whole blocks of the shared 50 */
    CHECK_EQ(r3->cached, 48);
    b.no_prefix_cache = 1;
    rec *r4 = run_one(&e, &b);
    CHECK_EQ(r4->cached, 0);
    CHECK_MSG(same_run(r3, 0, r4, 0), "a partial hit decodes differently from cold");
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.dev[0].pc_hits, 112 + 48);
    CHECK_EQ(st.dev[0].pc_queries, 3 * 120); /* the opt-outs were not looked up */
    accel_info info;
    accel_get_info(e.se.devs[0], &info);
    CHECK(info.n_holders > 0 && info.kv_blocks_cached > 0 && info.n_seqs == 0);
    env_close(&e);
}

TEST(sched_kv_multi_turn)
{
    env e;
    if (env_open(&e, 0, 0, 8) < 0) return;
    int32_t turn[300];
    prompt_ids(turn, 100, 7, 3);
    sched_params a = greedy(turn, 100, 40, 1);
    rec *r1 = run_one(&e, &a);
    REQUIRE(r1->done == 1 && r1->n_tok[0] == 40);
    /* the next turn: the conversation so far (prompt + reply) and 30 more tokens */
    memcpy(turn + 100, r1->tok[0], sizeof(int32_t) * 40);
    prompt_ids(turn + 140, 30, 11, 9);
    sched_params b = greedy(turn, 170, 20, 1);
    rec *r2 = run_one(&e, &b);
    /* the first turn's KV holds prompt + 39 fed tokens: 139 positions, 8 whole blocks */
    CHECK_EQ(r2->cached, 128);
    b.no_prefix_cache = 1;
    rec *r3 = run_one(&e, &b);
    CHECK_MSG(same_run(r2, 0, r3, 0), "the second turn decodes differently from cold");
    env_close(&e);
}

TEST(sched_kv_host_tier_hit)
{
    /* a pool of 24 blocks (384 positions) and a host tier: each request below needs 14 blocks,
     * so the next one evicts the previous one's cached prefix to host memory */
    env e;
    if (env_open(&e, 384, 64 << 20, 8) < 0) return;
    int32_t p[3][200];
    for (int k = 0; k < 3; k++) prompt_ids(p[k], 200, 17 + 4 * k, k);
    sched_params a = greedy(p[0], 200, 16, 1);
    rec *r0 = run_one(&e, &a);
    for (int k = 1; k < 3; k++) {
        sched_params o = greedy(p[k], 200, 16, 1);
        run_one(&e, &o);
    }
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK(st.dev[0].pc_evictions >= 1 && st.dev[0].pc_host_saves >= 1);
    /* the eviction order /admin/status shows: the device holds the last conversation's 13
     * whole blocks ((200 + 16) / 16: prompt and reply; the next to go), the host tier the older
     * ones, p[0]'s first (least recent) */
    CHECK_EQ(st.dev[0].pc_host_budget, (uint64_t)64 << 20);
    CHECK_EQ(st.dev[0].pc_dev_next_blocks, 13);
    CHECK_EQ(st.dev[0].pc_host_next_blocks, 13);
    CHECK_EQ(st.dev[0].pc_host_entries, 2);
    CHECK_MSG(st.dev[0].pc_host_next_idle_s > st.dev[0].pc_dev_next_idle_s,
              "host next idle %.6f s, device next %.6f s", st.dev[0].pc_host_next_idle_s,
              st.dev[0].pc_dev_next_idle_s);
    rec *r1 = run_one(&e, &a);
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(r1->cached, 192);
    CHECK_MSG(st.dev[0].pc_host_hits >= 16, "host hits %llu", (unsigned long long)st.dev[0].pc_host_hits);
    CHECK_MSG(same_run(r0, 0, r1, 0), "KV back from the host tier decodes differently");
    env_close(&e);
}

TEST(sched_kv_n_choices_one_prefill)
{
    env e;
    if (env_open(&e, 0, 0, 8) < 0) return;
    int32_t p[77];
    prompt_ids(p, 77, 29, 4);
    sched_params a = greedy(p, 77, 30, 2);
    a.no_prefix_cache = 1; /* the fork alone */
    rec *r = run_one(&e, &a);
    REQUIRE(r->done == 1);
    CHECK_EQ(r->completion, 60);
    CHECK_MSG(same_run(r, 0, r, 1), "two greedy choices differ");
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.dev[0].forks, 1);
    CHECK_EQ(st.dev[0].prefill_tokens, 77); /* one prefill */
    sched_params one = greedy(p, 77, 30, 1);
    one.no_prefix_cache = 1;
    rec *s1 = run_one(&e, &one);
    CHECK_MSG(same_run(r, 1, s1, 0), "a forked choice decodes differently from a lone request");
    env_close(&e);
}

TEST(sched_kv_preempt_and_resume)
{
    /* 20 blocks (320 positions); two requests of 100 + 150 positions fit alone (250) but not
     * together: both are admitted by their first blocks, the younger is preempted as they grow,
     * resumes from its cached KV, and both end as they would alone */
    env e;
    if (env_open(&e, 320, 0, 8) < 0) return;
    int32_t p[2][100];
    prompt_ids(p[0], 100, 19, 2);
    prompt_ids(p[1], 100, 23, 6);
    sched_params a = greedy(p[0], 100, 150, 1), b = greedy(p[1], 100, 150, 1);
    REQUIRE(submit(&e, &a) == SCHED_OK && submit(&e, &b) == SCHED_OK);
    sched_env_run(&e.se, 2);
    CHECK(e.recs[0].done == 1 && e.recs[1].done == 1);
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_MSG(st.dev[0].preemptions >= 1, "no preemption (%llu)", (unsigned long long)st.dev[0].preemptions);
    a.no_prefix_cache = b.no_prefix_cache = 1;
    rec *ra = run_one(&e, &a), *rb = run_one(&e, &b);
    CHECK_MSG(same_run(&e.recs[0], 0, ra, 0), "the older request changed");
    CHECK_MSG(same_run(&e.recs[1], 0, rb, 0), "the preempted request resumed differently");
    env_close(&e);
}

TEST(sched_kv_prompt_longer_than_pool)
{
    env e;
    if (env_open(&e, 64, 0, 8) < 0) return; /* 4 blocks */
    int32_t p[100];
    prompt_ids(p, 100, 3, 1);
    sched_params a = greedy(p, 100, 4, 1);
    rec *r = &e.recs[0];
    memset(r, 0, sizeof *r);
    char err[256];
    CHECK_EQ(sched_submit(e.se.s, &a, on_event, r, &r->r, err, sizeof err), SCHED_ERR_TOO_LARGE);
    accel_info info;
    accel_get_info(e.se.devs[0], &info);
    CHECK_EQ(info.kv_blocks_used, 0); /* nothing taken */
    env_close(&e);
}

/* n choices share the prompt's blocks but each grows its own: an n whose choices can never fit
 * the pool together is refused at submit (SCHED_ERR_TOO_LARGE, the API's 400), nothing taken;
 * one fewer choice fits and runs. */
TEST(sched_kv_n_that_cannot_fit_refused)
{
    env e;
    if (env_open(&e, 384, 0, 8) < 0) return; /* 24 blocks of 16 */
    int32_t p[100];
    prompt_ids(p, 100, 5, 2);
    /* 4 choices: the prompt's 6 whole blocks + its partial one copied per choice, and 100 more
     * positions each: 6 + 4 * 8 = 38 blocks > 24 */
    sched_params a = greedy(p, 100, 100, 4);
    a.no_prefix_cache = 1;
    rec *r = &e.recs[0];
    memset(r, 0, sizeof *r);
    char err[256];
    CHECK_EQ(sched_submit(e.se.s, &a, on_event, r, &r->r, err, sizeof err), SCHED_ERR_TOO_LARGE);
    accel_info info;
    accel_get_info(e.se.devs[0], &info);
    CHECK_EQ(info.kv_blocks_used, 0);
    /* 2 choices: 6 + 2 * 8 = 22 blocks fit */
    sched_params b = greedy(p, 100, 100, 2);
    b.no_prefix_cache = 1;
    rec *ok = run_one(&e, &b);
    CHECK_EQ(ok->done, 1);
    CHECK_EQ(ok->completion, 200);
    env_close(&e);
}

/* Where the choices' commit (the prompt's blocks, a copy and a growth block per further choice)
 * exceeds the pool although their forked KV at full length fits it, the request can never be
 * placed: submit refuses it (SCHED_ERR_TOO_LARGE) rather than queueing it for good, in front of
 * every request after it. */
TEST(sched_kv_n_choices_placed_when_they_fit)
{
    env e;
    if (env_open(&e, 240, 0, 8) < 0) return; /* 15 blocks of 16 */
    int32_t p[161];
    prompt_ids(p, 161, 7, 3);
    /* 4 choices of 1 token: forked 10 + 4 = 14 blocks; the commit's formula 11 + 2 * 4 - 1 = 18,
     * capped at the 14 (it waited for ever on the idle device: whole KV fits, commit never) */
    sched_params a = greedy(p, 161, 1, 4);
    rec *r = run_one(&e, &a);
    CHECK_EQ(r->done, 1);
    CHECK_EQ(r->completion, 4); /* every choice's token */
    /* on 13 blocks it can never fit: refused at submit */
    env_close(&e);
    if (env_open(&e, 208, 0, 8) < 0) return;
    rec *x = &e.recs[0];
    memset(x, 0, sizeof *x);
    char err[256];
    int st = sched_submit(e.se.s, &a, on_event, x, &x->r, err, sizeof err);
    CHECK_MSG(st == SCHED_ERR_TOO_LARGE, "submit: %s", st ? sched_strerror(st) : "admitted");
    if (st == SCHED_OK) sched_cancel(e.se.s, x->r);
    /* a request after it runs */
    sched_params b = greedy(p, 20, 4, 1);
    rec *ok = run_one(&e, &b);
    CHECK_EQ(ok->done, 1);
    env_close(&e);
}

/* A split placement (prefill on the CPU, decode on the card) with a cached prefix: the CPU ships
 * the cached blocks' KV again (accel_kv_export, the same bytes its prefill sent), then the rest;
 * the card decodes exactly what it decodes cold. */
TEST(sched_kv_split_reuses_prefix)
{
    env e;
    if (env_open_card(&e) < 0) return;
    int32_t p[90];
    prompt_ids(p, 90, 41, 8);
    sched_params cold = greedy(p, 90, 20, 1);
    cold.no_prefix_cache = 1;
    rec *c = run_one(&e, &cold);
    sched_params a = greedy(p, 90, 20, 1);
    rec *r1 = run_one(&e, &a);
    rec *r2 = run_one(&e, &a);
    CHECK_EQ(r1->cached, 0);
    CHECK_EQ(r2->cached, 80);
    CHECK_MSG(same_run(c, 0, r1, 0) && same_run(c, 0, r2, 0), "the card decodes a cached prefix differently");
    sched_stats st;
    sched_get_stats(e.se.s, &st);
    CHECK_EQ(st.placements_split, 3); /* all three on the card */
    CHECK_EQ(st.dev[1].kv_corrupt, 0);
    env_close(&e);
}

/* XAttention parameters that really skip blocks on a 300-token stories260K prompt. */
static accel_sparse xattn_params(double threshold)
{
    accel_sparse sp;
    sparse_params_default(&sp.p, SPARSE_MODE_XATTN);
    sp.p.xattention_threshold = threshold;
    sp.p.xattention_block_size = 32;
    sp.p.xattention_stride = 4;
    sp.p.num_last_dense_tokens_in_prefill = 0;
    return sp;
}

/* KV computed with sparse attention is an approximation: the prefix cache keeps it apart, under
 * its parameters' kind (scheduler/sched_pcache.h). A dense request never reuses it; a sparse one
 * with the same parameters does; a sparse one reuses exact KV too (the better KV: it wins a tie). */
TEST(sched_kv_sparse_kv_cached_apart)
{
    env e;
    if (env_open(&e, 0, 0, 8) < 0) return;
    int32_t p[300];
    prompt_ids(p, 300, 37, 11);
    accel_sparse sp = xattn_params(0.5);
    sched_params s = greedy(p, 300, 8, 1);
    s.sparse = &sp;
    rec *r1 = run_one(&e, &s);
    CHECK_EQ(r1->cached, 0);
    sched_params d = greedy(p, 300, 8, 1);
    rec *r2 = run_one(&e, &d);
    CHECK_EQ(r2->cached, 0); /* nothing of the sparse run was reused */
    rec *r3 = run_one(&e, &d);
    CHECK_EQ(r3->cached, 288); /* the dense run's blocks were */
    CHECK(same_run(r2, 0, r3, 0));
    /* a sparse request finds 288 positions of both kinds: the exact ones win; the 12 positions
     * left are prefilled sparse after them */
    rec *r4 = run_one(&e, &s);
    CHECK_EQ(r4->cached, 288);
    CHECK_EQ(r4->done, 1);
    env_close(&e);
}

/* Sparse to sparse: a second request with the same XAttention parameters reuses the first's
 * sparse-computed prefix (XAttention selects each query block from its own queries and the keys
 * up to it, so its KV does not depend on where chunks were cut: the reused run is the cold run,
 * token for token and bit for bit in its log-probabilities); other parameters, and a dense
 * request, reuse none of it. */
TEST(sched_kv_sparse_reuses_own_kind)
{
    env e;
    if (env_open(&e, 0, 0, 8) < 0) return;
    int32_t p[300];
    prompt_ids(p, 300, 41, 5);
    accel_sparse sp = xattn_params(0.5), other = xattn_params(0.6);
    sched_params s = greedy(p, 300, 8, 1), o = greedy(p, 300, 8, 1), d = greedy(p, 300, 8, 1);
    s.sparse = &sp;
    o.sparse = &other;
    rec *r1 = run_one(&e, &s);
    CHECK_EQ(r1->cached, 0);
    rec *r2 = run_one(&e, &s);
    CHECK_EQ(r2->cached, 288); /* whole 32-position units of the method, last token computed */
    CHECK_MSG(same_run(r1, 0, r2, 0), "a sparse prefix reused differs from the cold sparse run");
    rec *r3 = run_one(&e, &o);
    CHECK_EQ(r3->cached, 0); /* other parameters: another kind */
    rec *r4 = run_one(&e, &d);
    CHECK_EQ(r4->cached, 0); /* dense: exact KV only */
    env_close(&e);
}

/* Tokens decoded with AsyncTLS sparse attention hold approximate KV (each layer after the first
 * attended to a subset of the keys): the prefix cache keeps only such a request's prefilled
 * positions. A dense request for its prompt + reply reuses the prompt's exact blocks and decodes
 * bit for bit as without the cache (the approximate KV kept as exact gave other log-probabilities:
 * up to 0.27 apart on this prompt). */
TEST(sched_kv_sparse_decoded_tokens_not_reused_as_exact)
{
    env e;
    if (env_open_tls(&e) < 0) return;
    int32_t p[400];
    prompt_ids(p, 300, 37, 11);
    /* budgets far below the 300-position context: most keys skipped from the first step */
    sparse_tls_params small;
    sparse_tls_params_default(&small);
    small.block_budget = 2;
    small.token_budget = 32;
    small.dense_below = 0;
    sched_params a = greedy(p, 300, 40, 1);
    a.decode_sparse_set = 1;
    a.decode_sparse = &small;
    rec *ra = run_one(&e, &a);
    REQUIRE(ra->done == 1 && ra->n_tok[0] == 40);
    CHECK_MSG(ra->kv_read > 0 && ra->kv_read < 0.5, "A's decode read %g of the keys", ra->kv_read);
    /* B: dense, A's prompt, its reply and one more token */
    memcpy(p + 300, ra->tok[0], sizeof(int32_t) * 40);
    p[340] = 7;
    sched_params b = greedy(p, 341, 16, 1);
    b.decode_sparse_set = 1;
    b.decode_sparse = NULL;
    rec *rb = run_one(&e, &b);
    CHECK_EQ(rb->cached, 288); /* A's prompt: 18 whole blocks; none of its decoded positions */
    b.no_prefix_cache = 1;
    rec *rc = run_one(&e, &b);
    CHECK_EQ(rc->cached, 0);
    CHECK_MSG(same_run(rb, 0, rc, 0), "a dense request decodes differently with the cache");
    env_close(&e);
}

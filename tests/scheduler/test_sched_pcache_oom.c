/* The prefix cache when host memory runs out (scheduler/sched_pcache.c). The repository has no
 * allocation-failure hook, and the product gets none for a test: this file compiles its own copy
 * of sched_pcache.c, its public names renamed (oom_*) so that it stands beside the library's, and
 * its malloc calls counted, the Nth answering NULL. */
#include <stdlib.h>
#include <string.h>

static int fail_at; /* the malloc call that fails, counted from the last reset (0: none) */
static int mallocs;

static void *counted_malloc(size_t n)
{
    return fail_at && ++mallocs == fail_at ? NULL : malloc(n);
}

#define malloc(n)              counted_malloc(n)
#define sched_pcache_new       oom_pcache_new
#define sched_pcache_free      oom_pcache_free
#define sched_pcache_begin     oom_pcache_begin
#define sched_pcache_publish   oom_pcache_publish
#define sched_pcache_evict     oom_pcache_evict
#define sched_pcache_drop_all  oom_pcache_drop_all
#define sched_pcache_get_stats oom_pcache_get_stats
#define sched_pcache_hash      oom_pcache_hash
#include "scheduler/sched_pcache.c"
#undef malloc

#include "tests/test.h"
#include "devices/devices.h"

/* A publish whose index entry cannot be allocated keeps nothing and frees the holder it forked
 * once: tier_add had freed the entry (and the holder) and publish freed them again, a double
 * free that on the CPU's pool dropped the holder's block references twice. An eviction whose
 * host copy cannot be indexed saves nothing and does not count it as saved. */
TEST(sched_pcache_index_out_of_memory_frees_once)
{
    char err[256];
    model *m = model_load("models/stories260K", err, sizeof err);
    REQUIRE(m);
    accel_opts o = {.threads = 1};
    accel_dev *d = devices_open("cpu", m, &o, err, sizeof err);
    REQUIRE(d);
    sched_pcache *pc = oom_pcache_new(d, 1234, 0);
    REQUIRE(pc);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = 3 + i;
    accel_seq *s;
    REQUIRE(accel_seq_new(d, 64, &s) == ACCEL_OK);
    float *logits = malloc(sizeof(float) * (size_t)m->cfg.vocab);
    REQUIRE(logits);
    accel_prefill_req pr = {.seq = s, .ids = ids, .n = 64, .logits = logits};
    REQUIRE(accel_prefill(d, &pr) == ACCEL_OK);
    /* entry_new's ids (1) and names (2), then the index's first slot (3) */
    mallocs = 0;
    fail_at = 3;
    oom_pcache_publish(pc, 0, s, ids, 64);
    fail_at = 0;
    CHECK_EQ(mallocs, 3);
    accel_info info;
    accel_get_info(d, &info);
    CHECK_EQ(info.n_holders, 0); /* nothing kept */
    CHECK_EQ(oom_pcache_get_stats(pc)->holders, 0);
    CHECK_EQ(info.kv_blocks_used, 4); /* the request's own 64 positions */
    /* with memory the same publish keeps the prefix */
    oom_pcache_publish(pc, 0, s, ids, 64);
    accel_get_info(d, &info);
    CHECK_EQ(info.n_holders, 1);
    accel_seq_free(d, s);
    oom_pcache_free(pc);
    /* the host tier: an eviction whose host entry cannot be indexed saves nothing, and says so */
    pc = oom_pcache_new(d, 1234, 1 << 20);
    REQUIRE(pc);
    REQUIRE(accel_seq_new(d, 64, &s) == ACCEL_OK);
    pr.seq = s;
    REQUIRE(accel_prefill(d, &pr) == ACCEL_OK);
    oom_pcache_publish(pc, 0, s, ids, 64);
    accel_seq_free(d, s);
    const sched_pcache_stats *st = oom_pcache_get_stats(pc);
    REQUIRE(st->holders == 1);
    mallocs = 0;
    fail_at = 3; /* save_to_host: entry_new's two, then the host index's first slot */
    CHECK_EQ(oom_pcache_evict(pc), 1);
    fail_at = 0;
    CHECK_EQ(mallocs, 3);
    CHECK_EQ(st->holders, 0);
    CHECK_EQ(st->host_entries, 0);
    CHECK_EQ(st->host_bytes, 0);
    CHECK_EQ(st->host_saves, 0);
    oom_pcache_free(pc);
    accel_get_info(d, &info);
    CHECK_MSG(info.n_seqs == 0 && info.n_holders == 0 && info.kv_blocks_used == 0,
              "%d sequences, %d holders, %d blocks left", info.n_seqs, info.n_holders,
              info.kv_blocks_used);
    free(logits);
    accel_free(d);
    model_free(m);
}

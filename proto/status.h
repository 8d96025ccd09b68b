/* proto/status.h — the admin listener's JSON bodies (/admin/status, /admin/drain, /health,
 * /ready), from plain structs, so that JSON stays in proto/.
 *
 * Threads: pure functions, any thread. Each returns NUL-terminated compact JSON text the caller
 * frees, or NULL when out of memory. */
#ifndef TANDEM_PROTO_STATUS_H
#define TANDEM_PROTO_STATUS_H
#include <stdint.h>

/* One paged device's KV store (issue 20): its block pool and its prefix cache. The admin listener
 * fills it once per device from the scheduler's stats; /admin/status and /metrics both print it. */
typedef struct proto_kv_store {
    int paged;                                     /* 0: the rest is unset ("kv_store": null) */
    int block_tokens, blocks_total, blocks_used, blocks_cached; /* used: cached ones included */
    int holders, host_entries;                     /* cached prefixes; host-tier entries */
    uint64_t host_bytes, evictions, host_saves, host_dropped; /* the host tier */
    uint64_t queries, hits, host_hits;             /* prompt tokens looked up / found / from host */
    uint64_t preemptions, forks, prefill_tokens;   /* prefill_tokens: prompt positions computed */
    uint64_t host_budget;                          /* the host tier's bound in bytes */
    int dev_next_blocks, host_next_blocks;         /* each tier's next victim (LRU), in blocks */
    double dev_next_idle_s, host_next_idle_s;      /* and its seconds since last use */
} proto_kv_store;

typedef struct proto_status_dev {
    const char *name, *kind, *desc, *health;
    int warm;
    uint64_t mem_total, mem_free, kv_bytes_per_token;
    int max_batch, running, in_step;
    uint64_t steps, tokens;
    double busy_seconds, idle_seconds; /* idle: since the worker's last sign of life */
    const char *caps;   /* "prefill,decode,kv_export,kv_import" (those it has), or NULL */
    uint64_t decodes, prefills, failovers, kv_bytes_in; /* requests placed / moved away, KV in */
    proto_kv_store kv; /* "kv_store" (null where not paged) */
} proto_status_dev;

typedef struct proto_status_req {
    const char *id, *endpoint, *state, *client;
    const char *prefill_dev, *decode_dev; /* NULL: not placed yet */
    int n_prompt, max_tokens, n, generated, stream;
    double age_seconds;
} proto_status_req;

/* A node in `peers` (issue 26): "up" (answering its heartbeat), "down" (lost: tried again in
 * the background), "joining" (never answered since start-up: tried in the background, its
 * devices are added when it does); name NULL until it first answered; devices: how many of its
 * devices this daemon places on. */
typedef struct proto_status_peer {
    const char *addr, *name, *state;
    int devices;
} proto_status_peer;

typedef struct proto_status {
    const char *state; /* loading | ready | draining | failed */
    const char *version, *model, *model_dir;
    double uptime_seconds;
    int n_waiting, n_running, max_waiting, max_running, connections;
    const proto_status_dev *devs;
    int n_devs;
    const proto_status_req *reqs;
    int n_reqs;
    /* decode placements (scheduler/sched.h): split to a card, fallback in place, in place on a
     * node without cards; failovers */
    uint64_t placements_split, placements_fallback, placements_local, moves;
    const proto_status_peer *peers; /* "peers": [] when n_peers is 0 */
    int n_peers;
    int lent_seqs; /* "lent_sequences": held for peers on the lent devices (a drain waits) */
} proto_status;

char *proto_status_json(const proto_status *s);

/* {"status": status} plus, when detail is not NULL, "detail": detail. */
char *proto_health_json(const char *status, const char *detail);

/* {"draining": draining, "running": running, "waiting": waiting, "lent": lent}: lent, the
 * sequences the node holds for its peers on its lent devices */
char *proto_drain_json(int draining, int running, int waiting, int lent);

#endif

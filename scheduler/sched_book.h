/* scheduler/sched_book.h — the scheduler's promises to its devices: the policy's view of every
 * device (scheduler/sched_policy.h) plus what each placement committed, so that a placement can
 * be given back part by part. The daemon (sched_core.c, on the loop thread) and the system
 * simulator (sched_sim.c, on a virtual clock) both place requests through this one object: the
 * simulator runs the dispatch code the daemon runs.
 *
 * A placement commits, on its prefill device, the prompt tokens it will prefill (the policy's
 * load measure among prefill devices) and, when the decode happens elsewhere, the KV of the
 * prompt-only sequence the prefill fills; on its decode device, n sequences of prompt +
 * max_tokens positions and n decode slots. sched_book_prefilled gives back the prefill's share
 * when the prompt is done; sched_book_release gives back whatever is left.
 *
 * Threads: one owner (the loop thread, or the simulator). */
#ifndef TANDEM_SCHED_BOOK_H
#define TANDEM_SCHED_BOOK_H
#include "scheduler/sched_policy.h"

#define SCHED_BOOK_MAX_DEVICES 32

typedef struct sched_book {
    /* kind, caps, mem_total, kv_bytes_per_token, max_running, max_batch: set by the owner once;
     * health: refreshed by the owner before each placement; the rest is the book's */
    sched_policy_dev dev[SCHED_BOOK_MAX_DEVICES];
    int n;
    sched_policy_opts opts;
} sched_book;

/* What one placement committed (kept by the request until it is released). */
typedef struct sched_book_entry {
    int prefill, decode;      /* device indices, -1 when not placed */
    int split;                /* decode != prefill: the KV moves */
    uint64_t prefill_bytes;   /* on the prefill device, until prefilled (a split; or an
                                 offloading device's prompt: sched_policy_dev.offload_any) */
    int prefill_tokens;       /* queued on the prefill device, until prefilled */
    uint64_t decode_bytes;    /* on the decode device, until released */
    uint64_t offload_bytes;   /* of the decode device's slower tier, until released
                                 (sched_policy_offload_bytes) */
    int decode_seqs;
    double decode_positions;  /* sched_policy_positions, on the decode device until released */
} sched_book_entry;

/* Asks the policy for r and, on SCHED_PLACE_OK, commits the placement into *e (which must be
 * empty: sched_book_entry_init or released). */
enum sched_place sched_book_place(sched_book *b, const sched_policy_req *r, sched_book_entry *e);
void sched_book_entry_init(sched_book_entry *e);
/* The prompt is prefilled: the prefill device's share goes back. Idempotent. */
void sched_book_prefilled(sched_book *b, sched_book_entry *e);
/* The request left its devices (finished, cancelled, failed or moving): everything goes back
 * and *e is empty again. Idempotent. */
void sched_book_release(sched_book *b, sched_book_entry *e);
/* 1 when nothing is committed anywhere (tests: cancellation frees everything). */
int sched_book_empty(const sched_book *b);

#endif

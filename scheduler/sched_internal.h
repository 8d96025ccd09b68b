/* scheduler/sched_internal.h — the structs shared by the scheduler's files (sched_core.c on the
 * loop thread; sched_worker.c, sched_prefill.c and sched_handover.c on the device threads;
 * sched_choice.c per choice). Nothing outside scheduler/sched_*.c includes this.
 *
 * Ownership of a sched_req, step by step:
 *   submit (loop)      allocates it, creates its choices' samplers / detokenizers / stop
 *                      matchers (validation happens here, synchronously), queues it;
 *   dispatch (loop)    places it through the book (sched_book.h): a RUN task to its prefill
 *                      device's inbox and, when the decode happens elsewhere (split), an ATTACH
 *                      task to the decode device's inbox first. From then on the workers own it.
 *   prefill worker     owns the request while it prefills: the choices, their prefill-side
 *                      sequences, the first token of each choice. Split: each layer's KV chunk
 *                      is written in the KV wire format (proto/kv_wire.h: its payload CRC
 *                      computed there, where the KV was made; the choice's first chunk after
 *                      the stream header) into a CHUNK task for the decode device's inbox, and
 *                      at the end (success or not) a HANDOVER task passes the request on; the
 *                      prefill worker never touches it again. Local (fallback): the request
 *                      joins this worker's decode set.
 *   decode worker      ATTACH reserves the card's sequences and a wire reader per choice; CHUNKs
 *                      go through the reader (bounds, order, CRC) into accel_kv_import_crc, in
 *                      order (the inbox is FIFO, so every chunk of a request is imported before
 *                      its HANDOVER is seen); from HANDOVER on it owns the request and decodes
 *                      it.
 *   the end            the owning worker frees the device state and posts exactly one final
 *                      node: FINAL (DONE or ERROR), RELEASE (cancelled, silent) or MOVE
 *                      (failover: the loop queues it again, its generated tokens kept, and the
 *                      next placement prefills prompt + generated tokens). It never touches the
 *                      request afterwards.
 *   loop               on the final node: book released, last callback, free(req).
 * Only one thread ever calls into a device: its worker (the card's sequences are created,
 * imported into, decoded and freed by the card's worker; the prefill worker only copies chunks).
 * Shared while running: cancel (loop writes, workers and accel_prefill read), import_failed
 * (decode worker writes, the prefill worker's KV sink reads) and generated (worker writes, loop
 * reads for status) — all atomic. A split's decode worker reads nothing else of the request
 * before the HANDOVER but what the loop wrote before placing it (w_open, not finish). */
#ifndef TANDEM_SCHED_INTERNAL_H
#define TANDEM_SCHED_INTERNAL_H
#include "scheduler/sched.h"
#include "scheduler/sched_book.h"
#include "scheduler/sched_policy.h"
#include "model/gen/gen.h"
#include "proto/kv_wire.h"
#include "scheduler/sched_pcache.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

/* sched_dev.cost: dense, then one per sparse method (enum sparse_mode: 3) */
#define SCHED_COST_KINDS 4

/* A request moves at most this many times (device failures during one request); then it fails
 * with the last device's error. Enough for a node losing several cards in a row. */
#define SCHED_MAX_MOVES 4
/* Request failures in a row on one device after which the scheduler marks it FAILED itself
 * (statuses that do not fail a device in the backend: timeouts, corrupt imports, garbage
 * logits). The first one marks it DEGRADED; a request finishing on it clears both. */
#define SCHED_FAILS_TO_FAIL 3

typedef struct sched_choice {
    int index;
    model_gen *gen;           /* sampler -> detokenizer -> stop matcher -> finish (model/gen.h) */
    accel_seq *seq;           /* its sequence on the decode device (prefilled there, or the
                                 imported one once handed over) */
    accel_seq *pseq;          /* split: the prompt-only sequence on the prefill device */
    accel_seq *dseq;          /* split: the decode device's sequence being imported into */
    proto_kv_reader *kvr;     /* split: the wire reader its KV stream goes through (decode
                                 worker), into dseq on kv_dev */
    struct sched_dev *kv_dev;
    int32_t last;             /* the token the next decode step feeds */
    int generated;
    enum model_finish finish; /* NONE while it runs */
    int w_open;               /* the loop, at placement: still running then. A split's ATTACH
                                 reserves the card's sequences by this, not by finish, which
                                 the prefill worker may be setting meanwhile (a first token that
                                 ends the choice) */
    int32_t *hist;            /* generated ids (a moved request prefills prompt + these) */
    int n_hist, cap_hist;
    /* prefill job (prefill worker) */
    const int32_t *pf_ids;    /* r->prompt, or pf_buf */
    int32_t *pf_buf;
    int pf_n, pf_done;
    int approx;               /* its KV came (in part) from a sparse prefill: cached apart */
    int forked;               /* 1: its sequence is a fork of choice 0's prefill, its first
                                 token still to sample; 2: sampled (one prefill for n choices) */
    int64_t sp_blocks, sp_causal; /* prefill worker: the sparse chunks' reports, summed */
    int pf_split_k, pf_layer; /* prefill worker: a layer-split chunk in progress (accel.h): its
                                 tokens (0: none) and the next layer to run */
    accel_seq *tls_seq;       /* the sequence its sparse decode setting was applied to */
    int tls_dense;            /* ... whose device could not: decoded dense */
    int64_t tls_read, tls_total; /* keys attended / held by its sequences so far */
} sched_choice;

enum sched_task_kind {
    SCHED_TASK_RUN,      /* prefill the request here (then decode it here unless split) */
    SCHED_TASK_ATTACH,   /* its KV will be imported here: reserve the sequences */
    SCHED_TASK_CHUNK,    /* one layer chunk of one choice's KV, in the wire format */
    SCHED_TASK_HANDOVER, /* the prefill ended (status): the request is this worker's now */
};

typedef struct sched_task {
    struct sched_task *next;
    enum sched_task_kind kind;
    sched_req *r;
    int choice;             /* CHUNK */
    int status;             /* HANDOVER: ACCEL_OK, or why the prefill ended */
    int from;               /* HANDOVER: the prefill device's index */
    int heap;               /* malloc'ed (CHUNK); else embedded in the request */
    size_t len;             /* CHUNK: bytes in data: [stream header] chunk header, payload */
    uint8_t data[];         /* 8-byte aligned (after len), so the reader takes it in place */
} sched_task;

struct sched_req {
    sched *s;
    /* loop thread only */
    sched_event_cb cb;
    void *ctx;
    int cancelled;               /* no more callbacks */
    sched_req *qprev, *qnext;    /* waiting queue */
    enum sched_req_state state;
    uint64_t seqno;              /* arrival order: a moved request is queued again by it */
    int dev_prefill, dev_decode; /* current placement; -1 while waiting */
    sched_book_entry be;         /* what the placement committed */
    unsigned placement;          /* placements so far (stale PREFILLED nodes are ignored) */
    unsigned avoid;              /* devices it failed on */
    int moves;
    int last_fail_dev, last_fail_status;
    /* read-only after submit */
    int32_t *prompt;
    int n_prompt, max_tokens, n, logprobs;
    unsigned prefill_on, decode_on; /* device pins (sched_params) */
    double deadline, t_arrival;
    int has_sparse;
    int no_cache;                /* sched_params.no_prefix_cache */
    int prompt_top;              /* sched_params.prompt_top_logprobs (with plp) */
    sched_prompt_lp *plp;        /* [n_prompt] prompt logprobs, filled by the prefill worker;
                                    NULL: not asked */
    int sparse_off;              /* prefill worker: a sparse pass found no memory, run dense */
    int split_off;               /* prefill worker: the device refused a layer-split call: whole
                                    calls only */
    accel_sparse sparse;
    int tls_set, tls_on;         /* sparse decode settled (sched_params.decode_sparse_set) */
    sparse_tls_params tls_p;
    /* the workers', once dispatched (see the ownership notes above) */
    sched_choice *choices;       /* n */
    sched_task t_run, t_attach, t_handover; /* one of each per placement */
    sched_req *wnext;            /* its worker's prefill queue or decode set */
    sched_req *anext;            /* the decode worker's attached list (split, before handover) */
    double t_started, t_first_token;
    int n_done;
    double density_sum;          /* prefill worker: sparse densities of the choices prefilled */
    int density_n;
    int pf_choice;               /* prefill worker: the choice being prefilled */
    int cached_tokens;           /* prefill worker: prompt positions the prefix cache gave the
                                    first prefill of this request (usage.cached_tokens) */
    int cached_set;              /* ... set once, by that first prefill */
    int moved;                   /* set by the loop before a re-placement */
    unsigned w_placement;        /* the placement the workers run (set before its tasks go out) */
    int w_prefill, w_decode, w_split;
    int wfail;                   /* worker: the status that failed it in this step (< 0) */
    int wfail_step;              /* ... in sampling/text (1) rather than in the device call (0) */
    /* shared */
    volatile int cancel;         /* 1: drop it (accel_prefill polls this between layers) */
    atomic_int import_failed;    /* the decode device could not take its KV (a status) */
    atomic_int generated;
};

/* A token's display bytes (logprobs): offsets into one blob, built once per scheduler. */
typedef struct sched_token_table {
    char *blob;
    uint32_t *off; /* vocab + 1 offsets */
    int vocab;
} sched_token_table;
int sched_token_table_init(sched_token_table *t, const model_tok *tok, int vocab);
void sched_token_table_deinit(sched_token_table *t);
static inline const char *sched_token_bytes(const sched_token_table *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->vocab) {
        *len = 0;
        return "";
    }
    *len = t->off[id + 1] - t->off[id];
    return t->blob + t->off[id];
}

typedef struct sched_dev {
    sched *s;
    int index;
    accel_dev *dev;
    accel_info info0;            /* static description (name, kind, caps, max_batch) */
    pthread_t thread;
    int started;
    int late;                    /* added after sched_new (sched_add_device): its warm-up is not
                                    waited for by on_warm */
    /* inbox, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sched_task *inbox_head, *inbox_tail;
    int stop;
    /* worker only */
    sched_req *active;           /* decoding here */
    sched_req *pf_head, *pf_tail; /* prefill jobs, FCFS */
    sched_req *attached;         /* split requests whose KV comes here, not handed over yet */
    sched_cost cost[SCHED_COST_KINDS]; /* the prefill call's cost here: [0] dense, [1 + mode]
                                          a sparse method's chunks (sched_prefill.c) */
    sched_share share;           /* the share of its time spent prefilling (the policy's) */
    float *logits;               /* (rows, vocab) */
    int rows;
    float *plogits;              /* (plogits_rows, vocab): a prompt-logprobs prefill chunk's rows */
    int plogits_rows;
    struct sched_mask_helper *mask; /* grammar masks during decode calls (sched_mask.c) */
    int mask_failed;             /* its thread could not start: masks stay in the step */
    accel_seq **seqs;
    int32_t *ids;
    sched_choice **row_choice;
    sched_req **row_req;
    /* devices with ACCEL_CAP_DECODE_ARGMAX: a row's logits wanted (not a plain-greedy choice),
     * and the greedy token the device picked for each row (accel_decode_argmax) */
    unsigned char *want;
    int32_t *argmax;
    sched_pcache *pc;            /* worker only: the prefix cache (paged devices, when on) */
    FILE *trace;                 /* worker only: TANDEM_SCHED_TRACE's per-call log (sched_worker.c) */
    /* statistics, written by the worker, read anywhere */
    atomic_uint_least64_t steps, tokens, busy_ns, prefill_chunks, kv_chunks, kv_bytes, kv_corrupt;
    atomic_uint_least64_t prefill_split_calls; /* sched_dev_stats */
    atomic_uint_least64_t prefill_over_calls, prefill_over_ns; /* sched_dev_stats */
    atomic_uint_least64_t prefill_tokens; /* prompt positions computed by prefills */
    atomic_uint_least64_t preemptions;    /* requests preempted here for room */
    atomic_uint_least64_t forks;          /* choices that shared another's prefill */
    atomic_int_least64_t progress_ns;
    atomic_int_least64_t prefill_share_ppm; /* sched_share_value(&share) x 1e6, for the book */
    /* the a, b, e of the cost model of the chunk kind this device ran last (dense, or a sparse
     * method's) for the book's prefill_fit: the doubles' bits, written by the worker under a
     * sequence count (odd while it writes; sched_prefill_fit_*) */
    atomic_uint_least64_t prefill_fit_bits[3];
    atomic_uint prefill_fit_seq;
    atomic_int in_step;
    atomic_int warm;             /* 0 warming, 1 ok, -1 failed */
    /* loop only */
    int fails;                   /* request failures in a row */
    int mark;                    /* the scheduler's own health mark (enum accel_health) */
    unsigned revivals;           /* accel_info.revivals when the mark was last reset */
    uint64_t decodes, prefills, failovers;
} sched_dev;

/* Event nodes, worker -> loop. */
enum sched_node_kind {
    SCHED_NODE_EVENT,     /* deliver ev */
    SCHED_NODE_FINAL,     /* deliver ev (DONE or ERROR); the request is over */
    SCHED_NODE_RELEASE,   /* the request is over without an event (cancelled) */
    SCHED_NODE_MOVE,      /* the request left a failing device: queue it again */
    SCHED_NODE_PREEMPT,   /* the request gave its device's memory back: queue it again */
    SCHED_NODE_PREFILLED, /* its prompt is done: the prefill's share of the book goes back */
    SCHED_NODE_WARM,
};
typedef struct sched_node {
    struct sched_node *next;
    enum sched_node_kind kind;
    sched_req *req;      /* NULL for WARM */
    int dev;             /* WARM: device index; MOVE: the device that failed */
    int status;          /* MOVE: why */
    unsigned placement;  /* PREFILLED, MOVE, FINAL: the placement it belongs to */
    sched_event ev;      /* pointers into data */
    char data[];
} sched_node;

struct sched {
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t timer;    /* deadlines of waiting requests */
    int handles_open;
    sched_config cfg;
    const model_tok *tok;
    const model *m;
    int vocab;
    sched_token_table tokens;
    model_gvocab *gvocab; /* the grammar's vocabulary: built at the first grammar request (loop thread) */
    sched_dev dev[SCHED_MAX_DEVICES];
    int n_devs;
    int n_cards;         /* FPGA decode devices: a placement in place is a fallback */
    void (*on_warm)(void *ctx, int ok);
    void *warm_ctx;
    int warm_pending;
    /* loop only */
    sched_book book;
    sched_req *wait_head, *wait_tail;
    int n_waiting, n_running;
    uint64_t next_seqno;
    uint64_t placements_split, placements_fallback, placements_local, moves, moves_failed;
    int stopping;
    /* event queue */
    pthread_mutex_t ev_mu;
    sched_node *ev_head, *ev_tail;
};

/* sched_core.c (loop thread unless said otherwise) */
void sched_post(sched *s, sched_node *n); /* any thread */
sched_node *sched_node_new(size_t data_bytes); /* any thread */
int64_t sched_now_ns(void);               /* any thread */
void sched_req_free(sched_req *r);
void sched_on_async(uv_async_t *a);
/* The book's health column from the devices (backend health, warm-up, the scheduler's mark). */
void sched_book_refresh(sched *s);
/* The worker publishes cost[kind]'s fit (the kind it just ran); any thread reads a consistent
 * copy. */
void sched_prefill_fit_publish(sched_dev *d, int kind);
void sched_prefill_fit_read(sched_dev *d, double out[3]);
/* With the config's ttft_target_ms, moves the prompt the policy prefills next to the head of d's
 * queue (sched_policy_next_prefill; `now` in sched_now's seconds). Worker only. */
void sched_prefill_order(sched_dev *d, double now);
void sched_dispatch(sched *s);

/* sched_choice.c */
int sched_choice_init(sched_choice *c, sched *s, const sched_params *p, int index, char *err,
                      size_t errlen);
/* Which of a choice's sequences a worker may free: on a split placement the prefill worker owns
 * pseq and the decode worker seq and dseq (sched_worker_seqs says which for a worker). */
enum { SCHED_SEQ_DECODE = 1, SCHED_SEQ_PREFILL = 2, SCHED_SEQ_IMPORT = 4, SCHED_SEQ_ALL = 7 };
/* Frees the choice's sequences named by seqs on dev (SCHED_SEQ_IMPORT: with its KV wire
 * reader), and, when all is set, its generator and history too (and its reader when dev is NULL:
 * the loop's free of a request no worker holds; a worker frees the reader only with
 * SCHED_SEQ_IMPORT, the decode worker's). */
void sched_choice_deinit(sched_choice *c, accel_dev *dev, unsigned seqs, int all);
/* sched_mask.c: the grammar masks of rows [0, rows) of the decode step about to be issued,
 * computed on the device's helper thread while the device runs it (not on the CPU backend).
 * sched_mask_post returns 1 when it handed them out: call sched_mask_wait before any of those
 * choices is touched again. sched_mask_stop ends the helper (the worker's exit). */
typedef struct sched_mask_helper sched_mask_helper;
int sched_mask_post(sched_dev *d, int rows);
void sched_mask_wait(sched_dev *d);
void sched_mask_stop(sched_dev *d);

/* One generated token for choice c of r from its logits row (modified in place): sample, accept,
 * detokenize, match stops, decide the finish, post TOKEN (and CHOICE_DONE). Returns 0; or
 * ACCEL_ERR_DEVICE, without consuming anything, when the row has no finite logit (the device
 * computed garbage); or SCHED_ERR_NOMEM. */
int sched_choice_step(sched *s, sched_req *r, sched_choice *c, float *logits, double t);
/* The same for a plain-greedy choice (model_gen_plain_greedy) whose token the device picked
 * (accel_decode_argmax: model_sample_argmax of the row, -1 when no logit was finite, which is
 * ACCEL_ERR_DEVICE here as above). */
int sched_choice_step_token(sched *s, sched_req *r, sched_choice *c, int32_t token, double t);
/* The ids a (re-)prefill of choice c feeds: the prompt, plus its generated tokens when the
 * request moved. 0 or SCHED_ERR_NOMEM. */
int sched_choice_prefill_ids(sched_req *r, sched_choice *c);
/* The prefix cache's kind of c's KV (sched_pcache.h): 0 when exact, else the key of r's sparse
 * parameters. */
uint64_t sched_choice_kv_kind(const sched_req *r, const sched_choice *c);

/* sched_worker.c */
void *sched_worker_main(void *arg);
/* Appends a task to a device's inbox and wakes its worker (any thread). */
void sched_worker_push(sched_dev *d, sched_task *t);
/* The end of a request on worker d (see the ownership notes): the device state on d is freed,
 * then one node goes to the loop; d must not touch r afterwards. */
void sched_worker_finish(sched_dev *d, sched_req *r, const sched_event *ev); /* FINAL/RELEASE */
void sched_worker_fail(sched_dev *d, sched_req *r, int status, const char *msg);
void sched_worker_done(sched_dev *d, sched_req *r);
void sched_worker_move(sched_dev *d, sched_req *r, int failed_dev, int status);
/* Out of KV memory on d: gives up a cached prefix, or else preempts the youngest request
 * decoding here other than `keep` (its KV published to the prefix cache first, so its
 * re-prefill finds it). 1 when memory was given back, 0 when there was nothing to give. */
int sched_worker_make_room(sched_dev *d, const sched_req *keep);
/* The choice's KV on d kept in the prefix cache (prompt + generated, local placements; only the
 * prefilled positions when it decoded with sparse attention). */
void sched_worker_publish(sched_dev *d, sched_req *r, sched_choice *c);
/* 1 when a status is a device's trouble that another device may not have (the request moves);
 * 0 when it is the request's own (it fails). */
int sched_status_movable(int status);
int sched_req_cancelled(sched_req *r);
/* The sequences worker d owns of r (SCHED_SEQ_*). */
unsigned sched_worker_seqs(const sched_dev *d, const sched_req *r);
void sched_list_remove(sched_req **head, sched_req *r);

/* A device call, timed for busy_seconds and flagged for the watchdog. */
#define SCHED_DEVICE_CALL(d, expr)                                                                 \
    ({                                                                                             \
        int64_t t0_ = sched_now_ns();                                                              \
        atomic_store(&(d)->in_step, 1);                                                            \
        int st_ = (expr);                                                                          \
        atomic_store(&(d)->in_step, 0);                                                            \
        int64_t t1_ = sched_now_ns();                                                              \
        atomic_fetch_add(&(d)->busy_ns, (uint64_t)(t1_ - t0_));                                    \
        atomic_fetch_add(&(d)->steps, 1);                                                          \
        atomic_store(&(d)->progress_ns, t1_);                                                      \
        st_;                                                                                       \
    })

/* sched_prefill.c: the prefill jobs of one worker iteration, within the time-between-tokens
 * budget when the device also decodes. */
void sched_prefill_work(sched_dev *d);
/* Ends r's prefill on d (r is at the head of d's prefill queue or was just removed from it):
 * split -> HANDOVER to the decode device; local -> decode set, DONE, RELEASE, MOVE or ERROR. */
void sched_prefill_end(sched_dev *d, sched_req *r, int status);

/* sched_handover.c: the decode device's side of a split placement. */
void sched_handover_attach(sched_dev *d, sched_req *r);
void sched_handover_chunk(sched_dev *d, sched_task *t);
void sched_handover_take(sched_dev *d, sched_req *r, int status, int from);
/* Stopping: frees the sequences of requests still attached (their prefill worker ends them). */
void sched_handover_stop(sched_dev *d);

#endif

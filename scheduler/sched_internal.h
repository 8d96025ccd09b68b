/* scheduler/sched_internal.h — the structs shared by the scheduler's files (sched_core.c on the
 * loop thread, sched_worker.c on the device threads, sched_choice.c per choice). Nothing outside
 * scheduler/sched_*.c includes this.
 *
 * Ownership of a sched_req, step by step:
 *   submit (loop)      allocates it, creates its choices' samplers / detokenizers / stop
 *                      matchers (validation happens here, synchronously), queues it;
 *   dispatch (loop)    hands it to a worker's inbox; from then on only that worker touches the
 *                      choices and the sequences;
 *   worker             runs it, posts events, and at the end frees the choices and sequences and
 *                      posts exactly one final node (DONE, ERROR, or a silent release when it was
 *                      cancelled), after which it never touches the request again;
 *   loop               on the final node: device bookkeeping, last callback, free(req).
 * Shared while running: cancel (loop writes, worker and accel_prefill read) and generated
 * (worker writes, loop reads for status) — both atomic. */
#ifndef TANDEM_SCHED_INTERNAL_H
#define TANDEM_SCHED_INTERNAL_H
#include "scheduler/sched.h"
#include "scheduler/sched_policy.h"
#include "model/gen.h"
#include <pthread.h>
#include <stdatomic.h>

typedef struct sched_choice {
    int index;
    model_gen *gen;           /* sampler -> detokenizer -> stop matcher -> finish (model/gen.h) */
    accel_seq *seq;
    int32_t last;             /* the token the next decode step feeds */
    int generated;
    enum model_finish finish; /* NONE while it runs */
} sched_choice;

struct sched_req {
    sched *s;
    /* loop thread only */
    sched_event_cb cb;
    void *ctx;
    int cancelled;               /* no more callbacks */
    sched_req *qprev, *qnext;    /* waiting queue */
    enum sched_req_state state;
    int dev_prefill, dev_decode; /* device indices; -1 while waiting */
    uint64_t committed;          /* KV bytes counted against the device */
    /* read-only after submit */
    int32_t *prompt;
    int n_prompt, max_tokens, n, logprobs;
    double deadline, t_arrival;
    /* the worker's once dispatched */
    sched_choice *choices;       /* n */
    sched_req *wnext;            /* inbox / active list */
    double t_started, t_first_token;
    int n_done;
    int wfail;                   /* worker: the status that failed it in this step (< 0) */
    int wfail_step;              /* ... in sampling/text (1) rather than in the device call (0) */
    /* shared */
    volatile int cancel;         /* 1: drop it (accel_prefill polls this between layers) */
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
    /* inbox, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sched_req *inbox_head, *inbox_tail;
    int stop;
    /* worker only */
    sched_req *active;
    float *logits;               /* (rows, vocab) */
    int rows;
    accel_seq **seqs;
    int32_t *ids;
    sched_choice **row_choice;
    sched_req **row_req;
    /* statistics, written by the worker, read anywhere */
    atomic_uint_least64_t steps, tokens, busy_ns;
    atomic_int_least64_t progress_ns;
    atomic_int in_step;
    atomic_int warm;             /* 0 warming, 1 ok, -1 failed */
    /* loop only */
    int running;
    uint64_t committed;
} sched_dev;

/* Event nodes, worker -> loop. */
enum sched_node_kind { SCHED_NODE_EVENT, SCHED_NODE_FINAL, SCHED_NODE_RELEASE, SCHED_NODE_WARM };
typedef struct sched_node {
    struct sched_node *next;
    enum sched_node_kind kind;
    sched_req *req;      /* NULL for WARM */
    int dev;             /* WARM: device index */
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
    sched_dev dev[SCHED_MAX_DEVICES];
    int n_devs;
    void (*on_warm)(void *ctx, int ok);
    void *warm_ctx;
    int warm_pending;
    /* loop only */
    sched_req *wait_head, *wait_tail;
    int n_waiting, n_running;
    int stopping;
    /* event queue */
    pthread_mutex_t ev_mu;
    sched_node *ev_head, *ev_tail;
};

/* sched_core.c */
void sched_post(sched *s, sched_node *n); /* any thread */
sched_node *sched_node_new(size_t data_bytes);
int64_t sched_now_ns(void);

/* sched_choice.c */
int sched_choice_init(sched_choice *c, sched *s, const sched_params *p, int index, char *err,
                      size_t errlen);
void sched_choice_deinit(sched_choice *c, accel_dev *dev);
/* One generated token for choice c of r from its logits row (modified in place): sample, accept,
 * detokenize, match stops, decide the finish, post TOKEN (and CHOICE_DONE). Returns 0, or a
 * negative status when the row had no finite logit (a device fault). */
int sched_choice_step(sched *s, sched_req *r, sched_choice *c, float *logits, double t);

/* sched_worker.c */
void *sched_worker_main(void *arg);

#endif

/* scheduler/sched.h — requests to devices: admission, GLITCHES placement (prefill on the GPU,
 * decode FCFS on an idle FPGA, GPU fallback, waiting), KV hand-over between devices, chunked
 * prefill, continuous batching, failover, events.
 *
 * Threads (the process model of daemon/serve.c):
 *   - The libuv loop thread calls everything in this header (sched_new, sched_submit,
 *     sched_cancel, sched_get_stats, ...), and receives every event there.
 *   - One worker thread per device runs compute: prefill, batched decode steps over every active
 *     sequence of that device, and — per choice — sampling, streaming detokenization and stop
 *     matching, so that the loop thread only ever formats and writes bytes.
 *   - The only ways across: a task inbox per worker (mutex + condition variable) and one event
 *     queue out (mutex), drained on the loop thread after uv_async_send. Events carry the
 *     request they belong to; a request is never touched by both sides at once except through
 *     its atomic cancel flag and progress counters.
 *
 * Life of a request:
 *   sched_submit -> WAITING (bounded FCFS queue; full -> SCHED_ERR_QUEUE_FULL, i.e. 429)
 *   -> placement (scheduler/sched_policy.h decides which device(s); the rest of this module
 *      does not know why) -> RUNNING on a worker: SCHED_EV_PLACED, then per generated token
 *      SCHED_EV_TOKEN (text delta + logprobs), SCHED_EV_CHOICE_DONE per choice, and finally
 *      exactly one of SCHED_EV_DONE (usage, timings) or SCHED_EV_ERROR.
 *   sched_cancel at any point: no event is delivered after it returns; a waiting request is
 *   freed at once, a running one at the worker's next check (between decode steps, and between
 *   layers of a prefill through accel_prefill_req.cancel), which frees its KV.
 *
 * Errors: sched_submit returns a sched_status; events carry accel statuses (device faults) or
 * SCHED_ERR_* (TIMEOUT, NO_DEVICE, NOMEM). Nothing here exits or aborts on a device fault.
 *
 * One error space. A status field here may hold a code of three modules: the device
 * interface's (ACCEL_ERR_*, scheduler/accel.h), the scheduler's own (SCHED_ERR_*, below) and
 * the KV wire reader's (PROTO_KV_ERR_*, proto/kv_wire.h; the reader hands its callback's
 * accel statuses through, and the scheduler turns its own codes into accel ones before any
 * event). Each module owns a disjoint range of negative values, so that no code of one can be
 * read as another's:
 *
 *     ACCEL_ERR_*       -1 ..  -99   scheduler/accel.h   ACCEL_IS_ERR()
 *     (none)          -100 .. -199   unused: the old SCHED_ / PROTO_KV_ values, never reused
 *     SCHED_ERR_*     -200 .. -299   scheduler/sched.h   SCHED_IS_ERR()
 *     PROTO_KV_ERR_*  -300 .. -399   proto/kv_wire.h     PROTO_KV_IS_ERR()
 *
 * Each range is defined in its module's own header, since proto/ may include only proto/ and a
 * backend sees only accel.h; the one function that names a status of any of them,
 * sched_strerror(), and the one that classes it for the API, sched_status_api_err(), live here,
 * in the scheduler, the only module that sees all three headers (and whose events carry the
 * mix); scheduler/sched_status.c asserts at compile time that the ranges are disjoint. The
 * values are process-internal: nothing writes them on the wire or in a file (logs carry the
 * name beside the number). */
#ifndef TANDEM_SCHED_H
#define TANDEM_SCHED_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "model/gen/finish.h"
#include "model/grammar/grammar.h"
#include "model/sample/sample.h"
#include "model/tok/tokenizer.h"
#include "proto/errors.h"
#include "scheduler/accel.h"

typedef struct sched sched;
typedef struct sched_req sched_req;

#define SCHED_MAX_DEVICES 16

enum sched_status {
    SCHED_OK = 0,
    SCHED_ERR_QUEUE_FULL = -200, /* the waiting queue is at max_waiting: try later (429) */
    SCHED_ERR_INVALID = -201,    /* a parameter was refused (sampler/stop ranges): message in err */
    SCHED_ERR_NO_DEVICE = -202,  /* no healthy device can serve requests at all (503) */
    SCHED_ERR_TOO_LARGE = -203,  /* no device could ever hold this request's KV (400) */
    SCHED_ERR_TIMEOUT = -204,    /* the request's deadline passed (event status) */
    SCHED_ERR_NOMEM = -205,      /* host memory ran out */
    SCHED_ERR_STOPPED = -206,    /* the scheduler is shutting down */
};
#define SCHED_ERR_RANGE_HI (-200)
#define SCHED_ERR_RANGE_LO (-299)
#define SCHED_IS_ERR(st) ((st) <= SCHED_ERR_RANGE_HI && (st) >= SCHED_ERR_RANGE_LO)

/* Names any status: 0, an ACCEL_ERR_*, a SCHED_ERR_* or a PROTO_KV_ERR_* (each code its own
 * text; "unknown status" outside the three ranges). Never NULL; static strings. */
const char *sched_strerror(int status);
/* The API error a request that ended with this status answers (proto/errors.h's table gives
 * its HTTP status): the scheduler's own codes as their comments above say, a device's trouble
 * (any accel status a client can see, a failed KV hand-over) PROTO_ERR_DEVICE (500), and what
 * can only be a bug or host memory PROTO_ERR_INTERNAL (500). */
enum proto_err sched_status_api_err(int status);

typedef struct sched_config {
    int max_waiting;      /* requests in the waiting queue before QUEUE_FULL */
    int max_running;      /* sequences (choices) one device decodes at once */
    double step_delay_ms; /* testing aid: sleep before each device step (0 in production) */
    double tbt_budget_ms; /* prefill work between two decode steps of a device (0: no chunking) */
    int fpga_prefill;     /* FPGAs that report ACCEL_CAP_PREFILL may prefill */
    int no_prefix_cache;  /* 1: no automatic prefix caching (the config switch; on by default) */
    uint64_t host_cache_bytes; /* the host-memory tier of each paged device's prefix cache:
                                  evicted prefixes are kept there (0: none) */
    double ttft_target_ms; /* a time-to-first-token target the scheduler serves (sched_policy.h:
                              the weighing's rule d, a long prompt's decode to a card with a slot
                              while other requests are in the node; and the prefill queue's
                              order, prompts that can still meet it before those that cannot;
                              0: none, FCFS) */
} sched_config;

/* What a request asks for. Everything is copied by sched_submit. */
typedef struct sched_params {
    const int32_t *prompt; /* token ids, each in [0, vocab) */
    int n_prompt;
    int max_tokens;       /* >= 1; prompt + max_tokens must fit the model's context */
    int n;                /* choices, >= 1 */
    model_sampling sampling;
    const char *const *stop; /* stop strings (n_stop) */
    int n_stop;
    double deadline;      /* absolute time on sched_now()'s clock; 0: none */
    const accel_sparse *sparse; /* sparse prefill: the method and its parameters, resolved
                                   (copied; checked here: SCHED_ERR_INVALID with the key first
                                   in err); NULL: dense. The prompt's first sparse_plan tokens
                                   run in sparse chunks (sparse/sparse.h), the rest dense */
    int ignore_eos;       /* keep generating through eos tokens (tandem generate --ignore-eos) */
    int continuation;     /* 1: the text continues the prompt's (completions, tandem generate:
                             model_gen_params.continuation); 0: a reply of its own (chat) */
    /* Device pins (tandem generate / chat: the devices --prefill-device and --device name): bit
     * i lets devs[i] of sched_new prefill / decode this request, 0 lets the policy choose. A
     * decode pin also makes a device that is not an FPGA card (the CPU, a GPU) a target for KV
     * prefilled elsewhere, when it can decode and import KV. Otherwise the policy's rules hold
     * (sched_policy.h; an FPGA prefills only with sched_config.fpga_prefill). */
    unsigned prefill_on, decode_on;
    int no_prefix_cache;  /* 1: this request neither reuses nor leaves cached prefixes (the
                             per-request opt-out: llama.cpp's "cache_prompt": false) */
    model_grammar *grammar; /* NULL: free text; else each choice's text is a sentence of it (each
                               choice takes a reference: the caller keeps its own) */
    /* 1: the prompt's own log-probabilities (completions' echo with logprobs), on DONE: every
     * prompt position's logits are taken from the prefill (accel_prefill_req.all_logits, in
     * chunks of at most 32 MiB of logits: sched_prefill.c); such a request is prefilled dense and
     * neither reuses nor leaves cached prefixes (a cached position has no logits) */
    int prompt_logprobs;
    int prompt_top_logprobs; /* alternatives per prompt token, 0..MODEL_MAX_TOP_LOGPROBS */
    /* AsyncTLS sparse decode, settled by the caller (sparse_tls_resolve: request > configuration
     * > default): decode_sparse_set 1 with decode_sparse the parameters (copied) or NULL for
     * dense; each choice's decoding sequence is set so on its device (accel_seq_decode_sparse; a
     * device that cannot decodes it dense). decode_sparse_set 0: the devices' own default. */
    int decode_sparse_set;
    const sparse_tls_params *decode_sparse;
} sched_params;

enum sched_ev_type {
    SCHED_EV_PLACED,      /* the request left the queue: prefill/decode device names */
    SCHED_EV_TOKEN,       /* one generated token of one choice: text delta (may be empty) */
    SCHED_EV_CHOICE_DONE, /* one choice finished: finish reason, any last text */
    SCHED_EV_DONE,        /* every choice finished: usage and timings (the last event) */
    SCHED_EV_ERROR,       /* the request failed: status, message (the last event) */
};

/* A token's bytes and log-probability (logprobs requested), with its top alternatives. */
typedef struct sched_lp_entry {
    const char *bytes;
    size_t len;
    float logprob;
} sched_lp_entry;

/* A prompt token's log-probability given the tokens before it, with its top alternatives. */
typedef struct sched_prompt_lp {
    sched_lp_entry token;
    int n_top;
    sched_lp_entry top[MODEL_MAX_TOP_LOGPROBS];
} sched_prompt_lp;

typedef struct sched_event {
    enum sched_ev_type type;
    int choice;           /* TOKEN, CHOICE_DONE */
    double t;             /* when the worker produced it (sched_now clock) */
    /* PLACED */
    const char *prefill_dev, *decode_dev; /* stable for the scheduler's lifetime */
    int moves;             /* > 0: placed again after a failure on failed_dev */
    const char *failed_dev;
    int failed_status;     /* ACCEL_ERR_* of that failure */
    /* TOKEN, CHOICE_DONE: text that is final (valid UTF-8, stop strings removed) */
    const char *text;
    size_t text_len;
    int32_t token_id;      /* TOKEN: the sampled token */
    /* TOKEN with logprobs */
    int has_logprobs;
    sched_lp_entry token;
    int n_top;
    sched_lp_entry top[MODEL_MAX_TOP_LOGPROBS];
    /* CHOICE_DONE */
    enum model_finish finish;
    /* DONE */
    int prompt_tokens;     /* per choice (the prompt is counted once, as OpenAI does) */
    int completion_tokens; /* summed over choices */
    int cached_tokens;     /* prompt tokens reused from the prefix cache, not computed */
    double decode_kv_read;  /* sparse decode: keys attended / keys held over every decode step
                               of every choice (1: dense throughout); -1: not asked */
    double prefill_density; /* sparse prefill: blocks computed / causal blocks, mean over the
                               choices that took the sparse path (1: none did, the prompt was at
                               or below the dense threshold); -1: no sparse prefill was asked */
    double t_arrival, t_started, t_first_token, t_done; /* sched_now clock */
    const sched_prompt_lp *prompt_lps; /* with prompt_logprobs: [prompt_tokens]; entry 0 has
                                          the first token's bytes only (no context predicts it) */
    /* ERROR */
    int status;            /* ACCEL_ERR_* or SCHED_ERR_* (sched_strerror, sched_status_api_err) */
    const char *message;
} sched_event;

/* Called on the loop thread; ev and everything it points to are valid only during the call. The
 * callback may call sched_cancel (for this request or others) and sched_submit. */
typedef void (*sched_event_cb)(void *ctx, const sched_event *ev);

/* Starts one worker per device (devs[0..n), opened by the caller, outliving the scheduler); each
 * worker first runs accel_warmup. on_warm (may be NULL) is called on the loop thread once every
 * worker has warmed up: ok = 1 when at least one device warmed up successfully. tok is the
 * tokenizer for streaming text and logprob token bytes (outlives the scheduler). Returns NULL
 * with a message in err. */
sched *sched_new(uv_loop_t *loop, accel_dev *const *devs, int n, const model_tok *tok,
                 const sched_config *cfg, void (*on_warm)(void *ctx, int ok), void *warm_ctx,
                 char *err, size_t errlen);

/* Adds a device after the start (a peer's device, once that peer first answered: peer/peer.h),
 * opened by the caller for the same model, outliving the scheduler like the others. Its worker
 * starts and warms it up; placement considers it once warm. Loop thread. Its index, or -1 with
 * a message in err (SCHED_MAX_DEVICES reached, another model, no thread). */
int sched_add_device(sched *s, accel_dev *dev, char *err, size_t errlen);

/* Stops the workers (running requests are dropped without events), joins them and closes the
 * loop handles; the memory is released once the loop has run the close callbacks. */
void sched_free(sched *s);

/* Admits a request. On SCHED_OK *out is the handle (valid until the last event or sched_cancel)
 * and events follow through cb(ctx, ...). Otherwise nothing was kept and err says why. */
int sched_submit(sched *s, const sched_params *p, sched_event_cb cb, void *ctx, sched_req **out,
                 char *err, size_t errlen);

/* The vocabulary as the grammar engine sees it (built at the first call, then kept; NULL when
 * out of memory): for checking a grammar against the vocabulary before submitting it. */
const model_gvocab *sched_grammar_vocab(sched *s);

/* Withdraws a request: no event for it is delivered after this returns; its device memory is
 * freed by the worker within one step. Safe to call from inside its own event callback. */
void sched_cancel(sched *s, sched_req *r);

/* Seconds on the scheduler's monotonic clock. */
double sched_now(void);

enum sched_req_state { SCHED_REQ_WAITING, SCHED_REQ_RUNNING };

typedef struct sched_req_info {
    enum sched_req_state state;
    const char *prefill_dev, *decode_dev; /* NULL while waiting */
    int n_prompt, max_tokens, n;
    int generated; /* tokens generated so far, over all choices */
    double t_arrival;
} sched_req_info;
void sched_req_get_info(const sched_req *r, sched_req_info *out);

typedef struct sched_dev_stats {
    accel_info info;        /* name, kind, memory (accel_get_info); health: the worse of the
                               backend's and the scheduler's own mark (failures in a row) */
    int running;            /* decode sequences placed on it */
    uint64_t decodes;       /* requests placed to decode on it */
    uint64_t prefills;      /* requests placed to prefill on it */
    uint64_t failovers;     /* requests that moved away after a failure on it */
    uint64_t prefill_chunks; /* accel_prefill calls */
    uint64_t prefill_split_calls; /* of which layer-split calls that left their chunk unfinished
                                     (accel.h: a chunk over several calls, sched_policy_layers) */
    uint64_t prefill_over_calls; /* of which calls made beside decodes (the TBT budget applied)
                                    that took longer than what was left of the iteration's budget */
    double prefill_over_seconds; /* and by how much, summed: the decodes' extra wait past it */
    uint64_t kv_chunks, kv_bytes; /* KV layer chunks imported into it, and their bytes */
    uint64_t kv_corrupt;    /* imports into it that failed their check: a chunk whose wire CRC
                               or bounds failed, or KV that differed from the producer's CRC
                               once it landed (the request moved; the device was marked) */
    uint64_t steps;         /* prefill + decode calls completed */
    uint64_t prefill_tokens; /* prompt positions computed (prefix-cache hits and forks not) */
    uint64_t preemptions;   /* requests preempted on it for KV memory (they resumed later) */
    uint64_t forks;         /* choices that took another choice's prefill (n > 1) */
    /* its prefix cache (paged devices with caching on; zeros otherwise) */
    uint64_t pc_queries, pc_hits, pc_host_hits; /* prompt tokens looked up / found / of which
                                                   from the host tier */
    uint64_t pc_evictions, pc_host_saves, pc_host_dropped;
    int pc_holders, pc_host_entries;
    uint64_t pc_host_bytes, pc_host_budget; /* the host tier holds / may hold */
    /* the eviction order: each tier's next victim, least recently used first (its whole blocks
     * and seconds since it was last used; 0 blocks: the tier is empty) */
    int pc_dev_next_blocks, pc_host_next_blocks;
    double pc_dev_next_idle_s, pc_host_next_idle_s;
    uint64_t tokens;        /* tokens through the device (prompt + generated) */
    double busy_seconds;    /* time spent inside device calls */
    double last_progress;   /* sched_now() of the worker's last sign of life */
    int in_step;            /* 1 while the worker is inside a device call */
    int warm;               /* warm-up finished successfully */
} sched_dev_stats;

typedef struct sched_stats {
    int n_waiting, n_running; /* requests */
    /* decode placements: split to a card / in place on the prefill device although the node has
     * cards (every card busy or full: GLITCHES' GPU fallback) / in place on a node without cards */
    uint64_t placements_split, placements_fallback, placements_local;
    uint64_t moves;           /* failovers (a request may move more than once) */
    uint64_t moves_failed;    /* requests that failed after SCHED_MAX_MOVES moves */
    int n_devices;
    sched_dev_stats dev[SCHED_MAX_DEVICES];
} sched_stats;
void sched_get_stats(sched *s, sched_stats *out);

/* 1 when the healthy, warm devices can serve a request at all (some device prefills and some
 * decode path exists: sched_policy_can_serve); else 0 and *why says what is missing. */
int sched_can_serve(sched *s, const char **why);

#endif

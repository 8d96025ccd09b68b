/* scheduler/sched_policy.h — where a request runs: GLITCHES' dispatch as a pure function.
 *
 * The scheduler core (sched_core.c, through sched_book.h) and the system simulator
 * (sched_sim.h) ask this module, for the request at the head of the FCFS queue, which device
 * prefills it and which decodes it. It sees plain numbers only (no threads, no clocks, no accel
 * calls), so it is unit-tested on simulated devices and the simulator runs the very same rules.
 *
 * The rules (GLITCHES, Sec. III-C: "The scheduler distributes decode tasks to different FPGAs
 * based on a first-come-first-served strategy. When all FPGAs are busy, new decode tasks will be
 * processed on the GPU [...] the KV cache [...] remains in the GPU memory [...] If the incoming
 * inference request exceeds the GPU memory, the task [...] will enter a task queue"):
 *
 *   usable      health is not FAILED and the device is not in the request's avoid set (devices
 *               it already failed on). DEGRADED devices are used, but after every OK one.
 *   prefill     a usable device with ACCEL_CAP_PREFILL; an FPGA only when opts.fpga_prefill
 *   devices     (FAST-Prefill kernels configured). Ranked: CUDA, then FPGA, then CPU (the CPU plays
 *               the GPU's role on a node without one); then OK before DEGRADED; then the fewest
 *               prefill tokens queued; then the lowest index.
 *   cards       usable FPGAs with ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT, and any device of
 *               another node (ACCEL_CAP_REMOTE) with both.
 *   idle card   a card with a free decode slot for all n sequences: running + n <= slots, where
 *               slots = min(max_batch, max_running). max_batch is what one accel_decode call
 *               takes: the fpga backend's batched kernel takes up to 16 sequences per run
 *               (fpga/kernels/decode_batch.c), so "idle" is "has a free batch slot" (and, below,
 *               room for the KV); a card whose xclbin decodes one sequence per run
 *               (TANDEM_FPGA_BATCH=1, GLITCHES' FlightLLM-based cards) reports 1 and is idle
 *               only when decoding nothing. Sequences join a card's batch at its next step,
 *               without waiting for the others to finish (the worker's continuous batching).
 *               Reservations count from placement (before the prefill starts, so that the KV
 *               can be shipped while it is computed): a card a prefill is filling is busy.
 *   room        mem_total - mem_committed holds the bytes: on a card n * (prompt + max_tokens)
 *               positions at its kv_bytes_per_token.
 *
 *   1. split:    an idle card with room, and a prefill device with ACCEL_CAP_KV_EXPORT whose free
 *                memory holds the prompt (one sequence at a time; freed when the prefill ends):
 *                prefill there, decode on the card (local before remote: ACCEL_CAP_REMOTE, a
 *                card of another node, whose KV crosses the network; then OK before DEGRADED,
 *                then the fewest running, then the fewest decodes assigned so far — round
 *                robin — then the lowest index).
 *   2. fallback: otherwise (every card busy, none with room, or no card at all) a prefill device
 *                that can also decode, with room for all n * (prompt + max_tokens) positions (on
 *                a paged device the n choices fork the prompt: its whole blocks count once) and
 *                running + n <= max_running, decodes it itself: its KV never leaves it. Ranked
 *                like prefill devices, but the fewest running before the fewest prefill tokens.
 *   3. WAIT:     otherwise, when some usable device could hold it once idle; the head of the
 *                queue then waits and nothing behind it overtakes (strict FCFS: no starvation).
 *   4. NEVER:    no usable device could ever hold it.
 *
 *   weighing     where both the split's card and the fallback device describe their decode
 *   (issue 25)   cost by batch (accel_info.decode_curve) and the request pins no decoder, rules
 *                1 and 2 are not "cards first" but:
 *                a. the device whose decode tokens/s grow the most with the request's
 *                   sequences wins: gain = (B + n) / step(B + n) - B / step(B), B its decode
 *                   sequences, step() from its curve at its positions (sched_policy_gain). This
 *                   is the step-time growth weighed by what the batch produces: a GPU at batch
 *                   100 grows its step by ~0.05 ms per sequence but slows 100 sequences with
 *                   it; a card's first sequence costs a whole pass over its weights but slows
 *                   nobody. Ties go to the card.
 *                b. the GPU is kept free for prefill: while prompts wait on the fallback device
 *                   (prefill_tokens > 0), its gain counts only for the share of its time that
 *                   prefill leaves to decoding: gain x (1 - prefill_share) — a device that
 *                   spends a share p of its time prefilling decodes at (1 - p) of its curve.
 *                   Prompts waiting on a device that has lately done nothing but prefill
 *                   (p = 1) send every decode a card can take to the cards (the
 *                   disaggregation argument: cards take decode so that the GPU prefills); a
 *                   short prompt queued on a GPU that mostly decodes changes little.
 *                   A card of another node (issue 26's network term) gains only for the
 *                   share of the request's time it decodes: gain x t_dec / (t_dec + t_ship),
 *                   t_dec = max_tokens x its step with the request, t_ship the prompt's KV over
 *                   the network (sched_policy_ship_s): a slow or busy link sends decodes that
 *                   would cross it to a local device whose gain is close. (The prefill ships
 *                   KV layer by layer while it runs, so t_ship is the most it can delay.)
 *                d. with a TTFT target (opts.ttft_slo_s), a long prompt's decode goes to a card
 *                   with a slot: when the request's prompt takes the fallback device longer than
 *                   the chunk budget and longer than SCHED_LONG_PROMPT_SLO_SHARE of the target
 *                   (P = sched_policy_prefill_s: the prompt as one call on the fallback
 *                   device's learned cost model, sched_cost, of the kind it ran last — dense,
 *                   or its sparse method's — with its fixed part and its attention over the
 *                   prompt's depth), and other requests are
 *                   in the system — prompts queued on any device, others_waiting, or sequences
 *                   running anywhere (each brings a prompt now or when it ends) — its gain
 *                   counts 0. A request alone in the node keeps rules a and b: nothing waits
 *                   for the GPU's prefill, so its decode there delays nobody. A GPU
 *                   that decodes prefills such prompts in chunks, each waiting one decode step,
 *                   and their TTFT is a large share of the target already: in the simulator, at
 *                   0.9 req/s of [8K,32K] prompts and a 2 s target, the weighing without this
 *                   rule decoded 41 % on the GPU and 67 % of requests met the target, with it
 *                   85 % (BENCHMARKS.md). The price: a long prompt's decode runs at a card's
 *                   speed whenever another request is in flight, even one whose next prompt
 *                   would not be stretched past the target (closed loop with 2 clients: fewer
 *                   tokens/s than the GPU alone; a rule that estimates the stretch gets those
 *                   back but loses ~5 % of goodput at 0.9-1.1 req/s open loop, BENCHMARKS.md).
 *                   Prompts shorter than that keep rules a and b.
 *                c. no card has a slot now but one could take it once idle, and prefill waits on
 *                   the fallback device: WAIT (the device is busy prefilling anyway, and a decode
 *                   bound to it now would take time from those prompts; when its queue empties
 *                   the request is placed at once, on a card if one freed, else in place).
 *                Devices that do not describe a curve keep the rules as written above.
 *
 *   pins         a request may name the devices that may prefill and decode it (prefill_on,
 *                decode_on: tandem generate's --prefill-device and --device); the rules above
 *                then see only those, and a pinned decoder that imports KV counts as a card.
 *
 * Chunked prefill (sched_policy_chunk): a device that is also decoding runs a long prompt in
 * chunks (each accel_prefill appends to the sequence), interleaved with its decode steps, so that
 * the prefill work between two decode steps stays within a time-between-tokens budget (the
 * Sarathi-Serve rule in ../shared/papers/prefill-optimization-article.txt: size the chunk so the
 * iteration stays within the decode latency target).
 *
 * Threads: pure functions. */
#ifndef TANDEM_SCHED_POLICY_H
#define TANDEM_SCHED_POLICY_H
#include <stdint.h>
#include "scheduler/accel.h"

/* One device as the policy sees it. */
typedef struct sched_policy_dev {
    enum accel_kind kind;
    unsigned caps;            /* ACCEL_CAP_* */
    enum accel_health health;
    uint64_t mem_total;       /* KV budget, bytes */
    uint64_t mem_committed;   /* bytes promised to requests placed here and not finished */
    uint64_t kv_bytes_per_token;
    int running;              /* decode sequences placed here and not finished */
    int max_running;          /* decode sequences it may hold at once (the continuous batch) */
    int max_batch;            /* sequences one decode call takes (accel_info.max_batch) */
    int prefill_tokens;       /* prompt tokens queued for prefill here */
    uint64_t assigned;        /* decodes ever placed here (round robin among idle cards) */
    int block_tokens;         /* a paged device's positions per KV block (0: not paged) */
    /* the decode cost by batch (accel_info.decode_curve; n 0: unknown), and the KV positions
     * of the decode sequences placed here (each counted at its mean over its life: prompt +
     * max_tokens / 2; the book's) */
    accel_decode_curve curve;
    double positions;
    double prefill_share;     /* of its recent time, the share spent prefilling (sched_share;
                                 0..1, 0 when unknown) */
    /* a device of another node (ACCEL_CAP_REMOTE): the network its KV crosses, bytes/s (0:
     * unknown) and the seconds before a transfer starts to arrive (latency, and what is queued
     * ahead of it on the link); the weighing's network term (sched_policy_ship_s). The daemon:
     * the remote backend's measured link (accel_info.link_bps, link_s); the simulator: --net
     * and its NIC's backlog */
    double ship_bps, ship_s;
    double prefill_fit[3];    /* its prefill call's learned cost, the a, b, e of sched_cost, for
                                 the kind of call it ran last (dense, or its sparse method's:
                                 how it prefills lately; sched_policy_prefill_s; 0 0 0: not
                                 measured yet) */
    /* the slower KV tier of a sparse-decoded sequence (accel_info.offload_bytes ...; 0: none) */
    uint64_t offload_bytes, resident_per_token, resident_per_block;
    int resident_default_blocks;
    int offload_any; /* accel_info.offload_any: the rule below for every size, and the prompt's
                        whole KV committed while it is prefilled (sched_book) */
    uint64_t offload_per_token; /* accel_info.offload_per_token (0: kv_bytes_per_token) */
    uint64_t offload_committed; /* of offload_bytes, what placements here took (the book's) */
    uint64_t mem_outside;       /* of mem_total, what others hold (accel_info.mem_outside: a lent
                                   device's other clients): no room for us, though not our commit */
} sched_policy_dev;

typedef struct sched_policy_opts {
    int fpga_prefill; /* FPGAs with ACCEL_CAP_PREFILL may prefill (FAST-Prefill kernels) */
    double chunk_budget_s; /* the chunked-prefill budget between two decode steps (the
                              time-between-tokens budget; 0: prefill is not chunked) */
    double ttft_slo_s;     /* a time-to-first-token target the placement serves (rule d of the
                              weighing; 0: none) */
} sched_policy_opts;

/* Rule d's long prompt: its prefill alone takes over this share of the TTFT target (a few such
 * prompts queued, or one stretched by chunks, reach it). */
#define SCHED_LONG_PROMPT_SLO_SHARE 0.1

/* The request at the head of the queue. A request that moved after a failure asks again with
 * its generated tokens in n_prompt (they are prefilled again) and the rest in max_tokens. */
typedef struct sched_policy_req {
    int n_prompt;
    int max_tokens;
    int n;            /* choices: n sequences */
    unsigned avoid;   /* bit i: do not use device i (it failed this request) */
    unsigned prefill_on, decode_on; /* pins (sched_params): bit i: only such devices prefill /
                                       decode it, a pinned decoder being a KV target like a card
                                       when it can decode and import; 0: no pin */
    int tls_blocks;   /* AsyncTLS sparse decode: its level-1 block budget; 0: dense; -1: the
                         device's own default (sched_params.decode_sparse_set 0) */
    int others_waiting; /* other requests waiting in the queue (rule d of the weighing: prompts
                           to come; 0: none, or the caller does not say) */
} sched_policy_req;

enum sched_place {
    SCHED_PLACE_OK,    /* *out says where */
    SCHED_PLACE_WAIT,  /* not now; ask again when something finishes */
    SCHED_PLACE_NEVER, /* no device can ever take it */
};

typedef struct sched_placement {
    int prefill; /* device index */
    int decode;  /* device index; == prefill when the prefill device decodes it (fallback) */
} sched_placement;

/* Seconds of one decode iteration of d over `batch` sequences holding `positions` KV positions
 * in all (in slices of max_batch, as the worker runs them), from its curve; 0 for batch 0; -1
 * when d has no curve. */
double sched_policy_step_s(const sched_policy_dev *d, int batch, double positions);
/* Tokens/s d's decode gains by taking n more sequences of `positions` positions each (its
 * current batch: running, at d->positions); 0 without a curve. */
double sched_policy_gain(const sched_policy_dev *d, int n, double positions);
/* Seconds the request's prompt KV takes to reach d over the network: ship_s + the prompt's KV
 * bytes (on d) / ship_bps; 0 for a device of this node. */
double sched_policy_ship_s(const sched_policy_dev *d, const sched_policy_req *r);
/* The positions a placement counts on its decode device: n * (n_prompt + max_tokens / 2). */
double sched_policy_positions(const sched_policy_req *r);

/* KV bytes of n sequences of prompt + max_tokens positions on a device. */
uint64_t sched_policy_kv_bytes(const sched_policy_dev *d, const sched_policy_req *r);
/* What a placement commits on its decode device: sched_policy_kv_bytes, or on a paged device
 * (block_tokens > 0) the blocks the request takes at once — its prompt's, one copy of the
 * partial last block per further choice, one block of growth per choice — at most what its
 * choices hold at full length sharing the prompt's whole blocks. The request must still be able
 * to fit whole to be placed at all (sched_policy_kv_bytes <= mem_total; a paged device that
 * prefills and decodes n > 1 choices itself counts the prompt's whole blocks once, since the
 * choices fork them; its commit must fit mem_total too, which that bound makes so). */
uint64_t sched_policy_commit_bytes(const sched_policy_dev *d, const sched_policy_req *r);
/* The fit rule of a sparse-decoded request on a device with a slower KV tier (a card's DDR4):
 * when its whole KV does not fit mem_total but fits the slower tier and it decodes sparse (its
 * tls_blocks, or the device's default), what it needs of mem_total is the resident cache of
 * its n sequences at their final length (accel_info's resident_*), and that is what
 * sched_policy_commit_bytes commits and the placement checks against mem_total. On a device
 * with offload_any the rule applies whatever the size, and the placement also needs room for
 * the prompt's whole KV beside it (the book commits it until the prompt is prefilled). 0: the
 * rule does not apply (the whole KV is what counts). */
uint64_t sched_policy_resident_bytes(const sched_policy_dev *d, const sched_policy_req *r);
/* What a placement under that rule takes of the slower tier: n sequences of prompt +
 * max_tokens positions at offload_per_token (whole block_tokens on a paged device), or their
 * whole KV where the device does not say; 0 where the rule does not apply. The placement
 * needs it to fit what is left of offload_bytes after offload_committed (else the request
 * waits: the device could not move it out, and would then hold more than was committed). */
uint64_t sched_policy_offload_bytes(const sched_policy_dev *d, const sched_policy_req *r);
/* KV bytes of one prompt-only sequence (the prefill device's share of a split placement). */
uint64_t sched_policy_prompt_bytes(const sched_policy_dev *d, const sched_policy_req *r);

enum sched_place sched_policy_place(const sched_policy_dev *devs, int n_devs,
                                    const sched_policy_opts *o, const sched_policy_req *r,
                                    sched_placement *out);

/* 1 when some request (one token, one choice) could be served by the usable devices at all:
 * a prefill device and a decode path for it exist. The daemon is ready only then. */
int sched_policy_can_serve(const sched_policy_dev *devs, int n_devs, const sched_policy_opts *o);

/* The share of a device's recent time spent prefilling (sched_policy_dev.prefill_share): time
 * -weighted with exponential forgetting (time constant SCHED_SHARE_TAU_S: long enough to span a
 * few of the longest prompts' prefills, a 32K prompt taking ~1 s on an H200). The owner (the
 * worker, or the simulator) reports each iteration: it ended at `now` and spent `prefill_s` of
 * it prefilling; idle time between iterations counts as not prefilling, and so does one time
 * constant before the first report (a device starts idle). */
#define SCHED_SHARE_TAU_S 2.0
typedef struct sched_share {
    double prefill, total, last; /* decayed sums, seconds; last report's time */
    int started;
} sched_share;
void sched_share_observe(sched_share *s, double now, double prefill_s);
double sched_share_value(const sched_share *s);

/* ---------------------------------------------------------------- the prefill queue's order
 *
 * A device prefills its queued prompts in arrival order (FCFS) — unless there is a TTFT target
 * (sched_policy_opts.ttft_slo_s; the daemon's ttft_target_ms, tandem simulate's --slo-ttft-ms).
 * Then a prompt that can no longer meet it yields to the prompts that still can: before each
 * chunk (or whole prompt) the device takes the first job in queue order that is on time —
 * waited + its predicted prefill time left <= the target (the device's learned call cost,
 * sched_cost: what the device alone computes, so a job it calls late is late) — and when none is,
 * the first job. A job that has waited SCHED_LATE_AGE x the target goes before all of them (the
 * first such in queue order): a late job's wait stays bounded while on-time prompts keep
 * coming. A job already started may yield too: its KV stays where it is
 * and its next chunk continues it (on a device that prefills whole prompts, nothing is
 * interrupted: it yields only before it starts).
 *
 * Why: past the target a prompt's first token counts as late whenever it comes, but every
 * prompt behind it waits its prefill time; at a TTFT-bound load FCFS makes them late in turn.
 * In the simulator (BENCHMARKS.md, [8K, 32K] x 256 at a 2 s target) this raised the best
 * goodput of the H200 alone and of the mixed node by a fifth to a third. Only the order changes:
 * no request is dropped, and without a target nothing changes. */
typedef struct sched_prefill_job {
    double waited_s; /* since the request arrived */
    double left_s;   /* its predicted prefill time left on this device (0: unknown) */
} sched_prefill_job;
#define SCHED_LATE_AGE 10.0
/* The jobs the choice looks at: the first this many in queue order (a bound on the work per
 * chunk; a job further back waits its turn as under FCFS). */
#define SCHED_PREFILL_LOOK 64
/* The index (in queue order, 0..n-1) of the job to prefill next; 0 without a target. */
int sched_policy_next_prefill(const sched_prefill_job *q, int n, double ttft_target_s);

/* ---------------------------------------------------------------- chunked prefill */

/* A dense chunk never goes below this many tokens (a chunk of 16 keeps each weight row in use
 * for 16 tokens: a GEMM, not a GEMV). Before the device's cost is known the first chunk is
 * SCHED_CHUNK_PROBE tokens: small enough not to stall decodes, big enough to measure. */
#define SCHED_CHUNK_MIN 16
#define SCHED_CHUNK_PROBE 64
/* A dense chunk of a tile or more is cut in whole tiles: the GPU's prefill attention takes 128
 * query rows per thread block (gpu/attn_prefill_ws.cu), so a chunk of 385 tokens costs about what
 * one of 512 does — on the H200 a chunk 1-32 tokens past a multiple of 128 ran 12-25 % over a
 * cost model linear in its size (BENCHMARKS.md, "Where the p99 gaps come from"). A CPU computes
 * row by row; a whole tile costs it nothing. */
#define SCHED_CHUNK_TILE 128

/* The cost of one prefill call of c tokens appended at position p, learned online from the
 * measured calls:
 *     t(c, p) = a + b c + e c (p + c / 2)
 * a: what every call pays whatever its size (a pass over all the weights — 16 GB for the 8B
 * shape, ~3.7 ms on an H200 — and the launches); b: per token (the GEMMs); e: per token and
 * cached key (attention over the keys before it and, causally, within the chunk). A least-squares
 * fit over the last SCHED_COST_WINDOW calls (bounded memory; older calls forgotten, so a device
 * whose speed changes is followed), on relative errors (a 3 ms call weighs as much as a 90 ms
 * one), with a, b, e >= 0 (the best of the fits on every subset of the three terms whose
 * coefficients are all non-negative: the exact non-negative least-squares solution for three
 * unknowns). The prior: before any call, the first chunk is a probe (SCHED_CHUNK_PROBE); while
 * the calls do not determine the three terms (fewer than three, or all of one size and depth) a
 * small ridge in units of each term's typical size splits the time among the terms that explain
 * it (one call: a third each), which overrates the fixed part and the depth term rather than the
 * per-token one — smaller chunks, the safe side of a TBT budget — until calls of other sizes
 * and depths separate them.
 *
 * One model per kind of chunk (the worker: dense, and each sparse method: their per-token and
 * per-key costs differ by an order of magnitude — XAttention's index and block-sparse attention
 * at 128K depth cost ~95 ms per 128-token block, a dense token far less). The model of the kind
 * a device ran last also prices a whole prompt for the placement's rule d
 * (sched_policy_dev.prefill_fit). */
#define SCHED_COST_WINDOW 48
/* How wrong the model is: the budget is planned to a margin over the prediction (issue 22; the
 * H200 trace in BENCHMARKS.md, "Where the p99 gaps come from"). Calls are priced before they
 * run, so each call the model predicted (after SCHED_COST_TRUST observations) is also an
 * out-of-sample test of it:
 *   margin   a call at a size of the window: actual / predicted, the largest of the
 *            last SCHED_COST_WINDOW (clamped to [1, SCHED_COST_MARGIN_MAX]); a chunk is planned
 *            as predicted x margin. On the H200 these spread by a few % once the chunk is in
 *            whole tiles of the attention kernel (a dense chunk of 385 tokens costs like 512).
 *   novel    a call at a size none of the last SCHED_COST_WINDOW calls had (grain > 0: sizes are
 *            multiples of the grain; a size off the grain is always new): its first call costs
 *            more than the model says — on the H200 8-16 ms more for an XAttention chunk, then
 *            the same size costs what the model says (one-time work per shape in the libraries,
 *            and the model's own error off the sizes it was fitted on: a chunk shrinking from
 *            256 to 128 tokens at 102K was priced at 25 ms and took 38, a per-call cost over
 *            every cached key that the model's terms do not have). Its excess over predicted x
 *            margin, the largest of the last SCHED_COST_NOVEL such calls, is added to the plan
 *            of a call at a new size (sched_cost_plan). On a device that splits calls by layers
 *            (layer_split) the chunk is sized without it and its first call runs the layers that
 *            fit with it (sched_policy_layers' call_s): one more call per new size, where a
 *            smaller chunk would lose a size step for good (the new size would stay new); elsewhere
 *            sched_policy_chunk takes a smaller size of the window when that fits and the new one
 *            does not.
 * grain is the owner's: the granule its chunks of this kind come in (a sparse method's block, a
 * device's prefill tile); 0: any size (nothing counts as new).
 *
 * Layer-split calls (sched_policy_layers) are not a whole call's layers / n_layers of its time:
 * each call pays a part of its own (on the H200 ~3.5 ms per XAttention call at 100K whatever its
 * layers, against ~1.1 ms per layer: a 1-layer call took 2.8x its share). A split call of l of L
 * layers is modelled as s + l (W - s) / L, W the whole call's prediction, s the split part: each
 * split call gives a sample of s, (t - l W / L) / (1 - l / L); s is the median of the last
 * SCHED_COST_SPLIT samples of calls of at most half the layers (sched_cost_split_s; the sample's
 * error grows as 1 / (1 - l / L)), and the call's time goes into the fit as the whole call it
 * stands for, s + (t - s) L / l, from calls of at least half the layers once the model is
 * trusted (SCHED_COST_TRUST calls; before that every call teaches it) (an error d in s is
 * d (L / l - 1) there: a chunk's trailing 2-layer call read as a whole call of its own ~5 ms in
 * the simulator's 130K FlexPrefill run, and the next chunks grew 12x and took 365 ms). Split
 * calls do not feed the margin. The first call at a new size,
 * split or not, feeds only the new-size excess (its time is mostly that excess): a split one with
 * t - (s + l (W - s) / L) x margin, and neither the fit nor s. */
#define SCHED_COST_TRUST 8
#define SCHED_COST_SPLIT 16
#define SCHED_COST_MARGIN_MAX 1.5
#define SCHED_COST_NOVEL 8
typedef struct sched_cost {
    float c[SCHED_COST_WINDOW], p[SCHED_COST_WINDOW], t[SCHED_COST_WINDOW]; /* a ring */
    int n, head;        /* observations held; the next slot */
    double a, b, e;     /* the fit (0 0 0 before any observation) */
    uint64_t seen;      /* observations ever */
    int grain;          /* the owner's: chunk sizes come in multiples of it (0: any) */
    int layer_split;    /* the owner's: its calls can run part of the layers (sched_policy_layers),
                           so a new size's extra is planned there, not by a smaller chunk */
    float r[SCHED_COST_WINDOW];  /* a ring: actual / predicted of calls at sizes of the window */
    int rn, rhead;
    float x[SCHED_COST_NOVEL];   /* a ring: actual - predicted x margin of calls at new sizes */
    int xn, xhead;
    float s[SCHED_COST_SPLIT];   /* a ring: samples of a layer-split call's own part, seconds */
    int sn, shead;
    int sz[SCHED_COST_WINDOW];   /* a ring: the sizes of the last calls (split parts too) */
    int szn, szhead;
} sched_cost;
void sched_cost_observe(sched_cost *m, int tokens, int pos, double seconds);
/* A layer-split call: `layers` of the model's n_layers ran in `seconds` (layers >= n_layers: a
 * whole call, as sched_cost_observe). */
void sched_cost_observe_split(sched_cost *m, int tokens, int pos, double seconds, int layers, int n_layers);
/* The split part s (seconds, >= 0; 0 before any split call was seen). */
double sched_cost_split_s(const sched_cost *m);
/* Predicted seconds of a call of `tokens` at `pos`; 0 before any observation. */
double sched_cost_predict(const sched_cost *m, int tokens, int pos);
/* The margin (>= 1), 1 before any error is known. */
double sched_cost_margin(const sched_cost *m);
/* 1 when a call of `tokens` would be new: no call of the window had that size (never with
 * grain 0). */
int sched_cost_novel(const sched_cost *m, int tokens);
/* Seconds a call at a new size is planned to cost beyond predicted x margin (>= 0). */
double sched_cost_novel_s(const sched_cost *m);
/* What the policy plans a call to cost: predicted x margin, + sched_cost_novel_s at a new size;
 * 0 before any observation. */
double sched_cost_plan(const sched_cost *m, int tokens, int pos);
/* Rule d's prompt time on d: its n_prompt tokens as one call from position 0 on d's
 * prefill_fit, a + b n + e n^2 / 2; 0 before d's cost is measured. */
double sched_policy_prefill_s(const sched_policy_dev *d, int n_prompt);

/* A chunk after the first of an iteration runs only when it can be at least this many times the
 * size whose per-token part equals the fixed part (c0 = a / (b + e p)): then the fixed part is at
 * most 1/(1 + 4) = 20 % of its time. A smaller trailing chunk would spend most of what is left
 * of the budget on another pass over the weights for a few tokens — the next iteration's first
 * chunk takes them at full efficiency. (k = 4 rather than more: the leftover is at most one
 * budget's worth, and below 20 % overhead the next iteration gains little.) A trailing chunk that
 * ends the prompt within the budget left still runs (that call has to be paid anyway). */
#define SCHED_CHUNK_EFF_K 4

/* A chunk is at most this many times the largest call in the cost model's window: the fit is
 * not trusted far beyond what it has seen (calls shorter than ~150 tokens of the 8B shape on an
 * H200 all cost the weights' read, and show no per-token term at all). So chunks grow by this
 * factor per iteration until the budget binds. */
#define SCHED_CHUNK_GROW 4

/* Tokens of the next prefill chunk on a device: c tokens of `remaining` starting at position
 * pos. budget_s: the time-between-tokens budget for the prefill work between two decode steps
 * (0: chunking off); budget_left_s: what this iteration has left of it; first: no chunk has run
 * in this iteration yet; align: the chunk's granule (a sparse method's block: whole blocks, never
 * less than one, unless `remaining` ends the sparse part; 1 for dense: then whole
 * SCHED_CHUNK_TILEs from one tile up). The whole `remaining`
 * when the device has no decodes waiting (decoding == 0) or chunking is off. Else the largest
 * multiple of align whose planned cost (sched_cost_plan: predicted x margin, more at a size not
 * of the window — then a smaller size of the window may win) fits budget_left_s, at most
 * SCHED_CHUNK_GROW x the largest call the model has seen; for the first chunk at least
 * max(align, SCHED_CHUNK_MIN for dense) even when that does not fit (a prefill always progresses;
 * SCHED_CHUNK_PROBE before any observation); for a later chunk 0 — end the iteration — when it
 * would be below SCHED_CHUNK_EFF_K x a / (b + e pos) tokens without ending the prompt, or below
 * one granule. */
int sched_policy_chunk(int remaining, int pos, int align, int decoding, int first,
                       double budget_s, double budget_left_s, const sched_cost *cost);
/* A novel size's allowance counts for at most this share of the budget (a first call never
 * waits for more than it). */
#define SCHED_NOVEL_BUDGET_SHARE 0.5

/* Layer-split chunks (accel.h, ACCEL_CAP_LAYER_SPLIT): at great depth one call of the smallest
 * chunk may cost more than the whole budget (a sparse method's index scores the chunk against
 * every cached key, whatever the chunk's size: FlexPrefill at 128K ~69 ms over 32 layers on an
 * H200). Such a chunk runs a few layers per call, between decode steps. The layers of the next
 * call of a chunk whose every layer costs layer_s seconds and every call call_s more (the cost
 * model's split part; both planned to its margin), `todo` layers still to run: all of them when
 * call_s + todo x layer_s fits budget_left_s (or nothing is known, layer_s <= 0); else as many as
 * fit, at least one for the iteration's first call (a prefill always progresses); for a later
 * call 0 (the iteration ends) when none fits, or when its layers would cost less than
 * SCHED_CHUNK_EFF_K x call_s without ending the chunk (a call mostly of its own part: the next
 * iteration's first call does the layers at full efficiency). The cost model learns from such
 * a call through sched_cost_observe_split. */
int sched_policy_layers(int todo, double layer_s, double call_s, double budget_left_s, int first);

/* The layers of a device's next prefill call — the worker's rule (sched_prefill.c) and the
 * simulator's (sched_sim.c), one copy: a chunk of `tokens` at `pos`, its layers layer0 ..
 * n_layers - 1 still to run, on a device that splits calls by layers (can_split: it has
 * ACCEL_CAP_LAYER_SPLIT, decodes wait, the budget is on, and the request did not turn splitting
 * off). W = sched_cost_predict, s = sched_cost_split_s (at most W), per layer (W - s) / n_layers;
 * sched_policy_layers with both planned to the margin, the first call of a chunk at a new size
 * with the new-size extra (sched_cost_novel_s, at most SCHED_NOVEL_BUDGET_SHARE x budget_s) on
 * its own part. Returns the layers to run (n_layers - layer0 when the device cannot split or the
 * cost model has seen nothing), 0 when the iteration ends. *pred_s, *plan_s (may be NULL): the
 * call's predicted and planned seconds (the trace's). */
int sched_policy_call_layers(const sched_cost *cm, int tokens, int pos, int layer0, int n_layers, int can_split,
                             double budget_s, double budget_left_s, int first, double *pred_s, double *plan_s);

#endif

/* scheduler/sched_policy.c — see sched_policy.h for the rules this implements. */
#include "scheduler/sched_policy.h"
#include <math.h>
#include <string.h>

uint64_t sched_policy_kv_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    return (uint64_t)r->n * (uint64_t)(r->n_prompt + r->max_tokens) * d->kv_bytes_per_token;
}

/* The slower tier's bytes of the request, whether or not the rule applies. */
static uint64_t tier_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    uint64_t pos = (uint64_t)(r->n_prompt + r->max_tokens);
    if (!d->offload_per_token) return (uint64_t)r->n * pos * d->kv_bytes_per_token;
    if (d->block_tokens > 0) {
        const uint64_t bt = (uint64_t)d->block_tokens;
        pos = (pos + bt - 1) / bt * bt;
    }
    return (uint64_t)r->n * pos * d->offload_per_token;
}

uint64_t sched_policy_resident_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    const uint64_t whole = sched_policy_kv_bytes(d, r);
    const int bb = r->tls_blocks < 0 ? d->resident_default_blocks : r->tls_blocks;
    if (bb <= 0 || !d->offload_bytes || (whole <= d->mem_total && !d->offload_any) ||
        tier_bytes(d, r) > d->offload_bytes)
        return 0;
    const uint64_t per = (uint64_t)(r->n_prompt + r->max_tokens) * d->resident_per_token +
                         ((uint64_t)bb + 2) * d->resident_per_block;
    return (uint64_t)r->n * per;
}

uint64_t sched_policy_offload_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    return sched_policy_resident_bytes(d, r) ? tier_bytes(d, r) : 0;
}

/* The slower tier has room for it now (or it takes none). */
static int tier_fits(const sched_policy_dev *d, const sched_policy_req *r)
{
    const uint64_t b = sched_policy_offload_bytes(d, r);
    return !b || (d->offload_committed <= d->offload_bytes &&
                  b <= d->offload_bytes - d->offload_committed);
}

/* The KV of n choices at full length when they share the prompt's blocks (a paged device that
 * prefills and decodes them: one prefill, the other choices forked, sched_prefill.c): the
 * prompt's whole blocks once, then per choice its copy of the partial last block and its growth.
 * Never more than n separate sequences. */
static uint64_t forked_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    const uint64_t apart = sched_policy_kv_bytes(d, r);
    if (d->block_tokens <= 0 || r->n < 2) return apart;
    const uint64_t bt = (uint64_t)d->block_tokens, p = (uint64_t)r->n_prompt;
    const uint64_t own = (p % bt + (uint64_t)r->max_tokens + bt - 1) / bt;
    const uint64_t bytes = (p / bt + (uint64_t)r->n * own) * bt * d->kv_bytes_per_token;
    return bytes < apart ? bytes : apart;
}

/* What must fit mem_total for the request to be placed there at all; `local`: the device also
 * prefills it (its choices fork the prompt). */
static uint64_t need_bytes(const sched_policy_dev *d, const sched_policy_req *r, int local)
{
    uint64_t res = sched_policy_resident_bytes(d, r);
    if (res && d->offload_any) return res + sched_policy_prompt_bytes(d, r); /* while prefilled */
    return res ? res : local ? forked_bytes(d, r) : sched_policy_kv_bytes(d, r);
}

/* What must fit the room left now: the commit, and an offloading device's prompt beside it. */
static uint64_t admit_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    uint64_t c = sched_policy_commit_bytes(d, r);
    if (d->offload_any && sched_policy_resident_bytes(d, r)) c += sched_policy_prompt_bytes(d, r);
    return c;
}

uint64_t sched_policy_commit_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    uint64_t res = sched_policy_resident_bytes(d, r);
    if (res) return res;
    if (d->block_tokens <= 0) return sched_policy_kv_bytes(d, r);
    /* a paged device takes blocks as sequences grow: the prompt's blocks (shared by the n
     * choices), a copy of its partial last block per further choice, and one block of growth
     * each; more comes as they decode, and a device that runs out preempts its youngest */
    uint64_t bt = (uint64_t)d->block_tokens;
    uint64_t blocks = ((uint64_t)r->n_prompt + bt - 1) / bt + 2 * (uint64_t)r->n - 1;
    /* never more than the choices hold at full length (forked_bytes <= sched_policy_kv_bytes):
     * a copy and a growth block per choice overstate short generations (4 choices of 1 token
     * after 161 positions: 18 blocks committed for 14 ever held) */
    uint64_t bytes = blocks * bt * d->kv_bytes_per_token, full = forked_bytes(d, r);
    return bytes < full ? bytes : full;
}

uint64_t sched_policy_prompt_bytes(const sched_policy_dev *d, const sched_policy_req *r)
{
    return (uint64_t)r->n_prompt * d->kv_bytes_per_token;
}

static int usable(const sched_policy_dev *d, int i, unsigned avoid)
{
    return d->health != ACCEL_HEALTH_FAILED && !(i < 32 && (avoid >> i) & 1u);
}

static int is_prefill(const sched_policy_dev *d, const sched_policy_opts *o)
{
    if (!(d->caps & ACCEL_CAP_PREFILL)) return 0;
    return d->kind != ACCEL_KIND_FPGA || (o && o->fpga_prefill);
}

static int is_card(const sched_policy_dev *d)
{
    const unsigned need = ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT;
    /* another node's GPU or CPU offered for decode is a KV target like a card */
    return (d->kind == ACCEL_KIND_FPGA || d->caps & ACCEL_CAP_REMOTE) && (d->caps & need) == need;
}

/* A pin mask (sched_policy_req.prefill_on / decode_on) lets device i: no pin lets every device. */
static int pinned(unsigned mask, int i)
{
    return !mask || (i < 32 && (mask >> i) & 1u);
}

/* Where a split's KV may go: a card, or a device the request pins its decode to that can
 * decode imported KV (tandem generate --device cpu --prefill-device fpga-emu). */
static int is_target(const sched_policy_dev *d, const sched_policy_req *r, int i)
{
    const unsigned need = ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT;
    if (!pinned(r->decode_on, i)) return 0;
    return is_card(d) || (r->decode_on && (d->caps & need) == need);
}

/* GPU first; an FPGA prefills only where configured, ahead of the CPU (FAST-Prefill on a U280
 * is far faster than a host CPU for a 7B model); the CPU last. */
static int kind_rank(enum accel_kind k)
{
    switch (k) {
    case ACCEL_KIND_CUDA: return 0;
    case ACCEL_KIND_FPGA: return 1;
    case ACCEL_KIND_CPU: return 2;
    }
    return 3;
}

/* Room now: what is not promised here, nor held by others (a lent device's other clients). The
 * fit-at-all rules weigh mem_total alone: what others hold goes away in time. */
static int fits(const sched_policy_dev *d, uint64_t bytes)
{
    uint64_t taken = d->mem_committed + d->mem_outside;
    return taken >= d->mem_committed && taken <= d->mem_total && bytes <= d->mem_total - taken;
}

static int card_slots(const sched_policy_dev *d)
{
    int b = d->max_batch > 0 ? d->max_batch : 1;
    return b < d->max_running ? b : d->max_running;
}

/* Lexicographic comparison of two candidates: negative when a is better. */
static int cmp(long long a0, long long b0)
{
    return a0 < b0 ? -1 : a0 > b0;
}

static int better_prefill(const sched_policy_dev *v, int a, int b)
{
    if (b < 0) return 1;
    int c = cmp(kind_rank(v[a].kind), kind_rank(v[b].kind));
    if (!c) c = cmp(v[a].health, v[b].health);
    if (!c) c = cmp(v[a].prefill_tokens, v[b].prefill_tokens);
    if (!c) c = cmp(v[a].running, v[b].running);
    return c ? c < 0 : a < b;
}

static int better_fallback(const sched_policy_dev *v, int a, int b)
{
    if (b < 0) return 1;
    int c = cmp(kind_rank(v[a].kind), kind_rank(v[b].kind));
    if (!c) c = cmp(v[a].health, v[b].health);
    if (!c) c = cmp(v[a].running, v[b].running);
    if (!c) c = cmp(v[a].prefill_tokens, v[b].prefill_tokens);
    return c ? c < 0 : a < b;
}

static int better_card(const sched_policy_dev *v, int a, int b)
{
    if (b < 0) return 1;
    int c = cmp(!!(v[a].caps & ACCEL_CAP_REMOTE), !!(v[b].caps & ACCEL_CAP_REMOTE));
    if (!c) c = cmp(v[a].health, v[b].health);
    if (!c) c = cmp(v[a].running, v[b].running);
    if (!c) c = cmp((long long)v[a].assigned, (long long)v[b].assigned);
    return c ? c < 0 : a < b;
}

/* ---------------------------------------------------------------- weighing by batch curves */

/* One call of b <= max_batch sequences at the curve's own context. */
static double curve_call_s(const accel_decode_curve *c, double b)
{
    const int n = c->n;
    if (n == 1 || b <= c->batch[0]) return c->step_s[0];
    int i = 1;
    while (i < n - 1 && b > c->batch[i]) i++;
    double b0 = c->batch[i - 1], b1 = c->batch[i], t0 = c->step_s[i - 1], t1 = c->step_s[i];
    return t0 + (t1 - t0) * (b - b0) / (b1 - b0);
}

double sched_policy_step_s(const sched_policy_dev *d, int batch, double positions)
{
    const accel_decode_curve *c = &d->curve;
    if (c->n <= 0 || c->n > ACCEL_CURVE_MAX) return -1;
    if (batch <= 0) return 0;
    int mb = d->max_batch > 0 ? d->max_batch : 1;
    int full = batch / mb, rest = batch % mb;
    double t = full * curve_call_s(c, mb) + (rest ? curve_call_s(c, rest) : 0);
    /* the KV the step reads beyond (or short of) the curve's context; never under half the
     * curve's time (the weights are read whatever the context) */
    double kv = (positions - batch * c->ctx) * c->s_per_pos;
    return t + kv > t / 2 ? t + kv : t / 2;
}

double sched_policy_ship_s(const sched_policy_dev *d, const sched_policy_req *r)
{
    if (!(d->caps & ACCEL_CAP_REMOTE)) return 0;
    double t = d->ship_s > 0 ? d->ship_s : 0;
    if (d->ship_bps > 0) t += (double)sched_policy_prompt_bytes(d, r) / d->ship_bps;
    return t;
}

/* The card's gain with the network term: only the share of the request's time it decodes. */
static double card_gain(const sched_policy_dev *d, const sched_policy_req *r, double per)
{
    double g = sched_policy_gain(d, r->n, per);
    double ts = sched_policy_ship_s(d, r);
    if (ts > 0 && g > 0) {
        double td = r->max_tokens * sched_policy_step_s(d, d->running + r->n, d->positions + r->n * per);
        g = td > 0 ? g * td / (td + ts) : 0;
    }
    return g;
}

double sched_policy_positions(const sched_policy_req *r)
{
    return (double)r->n * ((double)r->n_prompt + r->max_tokens / 2.0);
}

double sched_policy_gain(const sched_policy_dev *d, int n, double positions)
{
    double before = sched_policy_step_s(d, d->running, d->positions);
    double after = sched_policy_step_s(d, d->running + n, d->positions + n * positions);
    if (before < 0 || !(after > 0)) return 0;
    return (d->running + n) / after - (before > 0 ? d->running / before : 0);
}

static int has_curve(const sched_policy_dev *d)
{
    return d->curve.n > 0 && d->curve.n <= ACCEL_CURVE_MAX;
}

/* Rule d of the weighing (sched_policy.h): a long prompt's decode leaves the GPU for a card only
 * while other requests are in the system — prompts queued on the GPU, requests waiting, or
 * requests prefilling or decoding anywhere (each a prompt queued or to come) — not when this
 * request is alone. */
static int long_prompt_for_a_card(const sched_policy_dev *v, int n_devs, int local,
                                  const sched_policy_opts *o, const sched_policy_req *r)
{
    double pf = sched_policy_prefill_s(&v[local], r->n_prompt);
    if (!o || !(o->ttft_slo_s > 0) || !(o->chunk_budget_s > 0) || !(pf > o->chunk_budget_s) ||
        !(pf > SCHED_LONG_PROMPT_SLO_SHARE * o->ttft_slo_s))
        return 0;
    if (r->others_waiting > 0) return 1;
    for (int i = 0; i < n_devs; i++)
        if (v[i].running > 0 || v[i].prefill_tokens > 0) return 1;
    return 0;
}

enum sched_place sched_policy_place(const sched_policy_dev *v, int n_devs,
                                    const sched_policy_opts *o, const sched_policy_req *r,
                                    sched_placement *out)
{
    int exporter = -1, card = -1, local = -1;
    int could_local = 0, could_card = 0, could_export = 0;
    for (int i = 0; i < n_devs; i++) {
        const sched_policy_dev *d = &v[i];
        if (!usable(d, i, r->avoid)) continue;
        if (is_prefill(d, o) && pinned(r->prefill_on, i)) {
            uint64_t prompt = sched_policy_prompt_bytes(d, r);
            if (d->caps & ACCEL_CAP_KV_EXPORT && prompt <= d->mem_total) {
                could_export = 1;
                if (fits(d, prompt) && better_prefill(v, i, exporter)) exporter = i;
            }
            if (d->caps & ACCEL_CAP_DECODE && pinned(r->decode_on, i)) {
                /* the placement below needs the commit to fit too: on a paged device it can
                 * exceed the forked choices' whole KV (a copy and a growth block per choice),
                 * and a request whose commit never fits would wait forever on an idle device */
                uint64_t whole = need_bytes(d, r, 1), admit = admit_bytes(d, r);
                if (r->n <= d->max_running && whole <= d->mem_total && admit <= d->mem_total) {
                    could_local = 1;
                    if (d->running + r->n <= d->max_running && fits(d, admit) && tier_fits(d, r) &&
                        better_fallback(v, i, local))
                        local = i;
                }
            }
        }
        if (is_target(d, r, i)) {
            uint64_t whole = need_bytes(d, r, 0);
            int slots = card_slots(d);
            if (r->n <= slots && whole <= d->mem_total) {
                could_card = 1;
                if (d->running + r->n <= slots && fits(d, admit_bytes(d, r)) && tier_fits(d, r) &&
                    better_card(v, i, card))
                    card = i;
            }
        }
    }
    int split = card >= 0 && exporter >= 0 && exporter != card;
    /* weighing by the batch curves (the "weighing" rules at the top of sched_policy.h) */
    int weigh = !r->decode_on && local >= 0 && has_curve(&v[local]);
    if (weigh && split && has_curve(&v[card])) {
        double per = sched_policy_positions(r) / r->n;
        double g = sched_policy_gain(&v[local], r->n, per);
        if (v[local].prefill_tokens) {
            double p = v[local].prefill_share;
            g *= p <= 0 ? 1 : p >= 1 ? 0 : 1 - p;
        }
        if (long_prompt_for_a_card(v, n_devs, local, o, r)) g = 0; /* rule d */
        if (g > card_gain(&v[card], r, per)) split = 0;
    }
    if (split) {
        out->prefill = exporter;
        out->decode = card;
        return SCHED_PLACE_OK;
    }
    if (weigh && card < 0 && v[local].prefill_tokens && could_card && could_export) {
        int curves = 0;
        for (int i = 0; i < n_devs && !curves; i++)
            curves = usable(&v[i], i, r->avoid) && is_target(&v[i], r, i) && has_curve(&v[i]);
        if (curves) return SCHED_PLACE_WAIT;
    }
    if (local >= 0) {
        out->prefill = out->decode = local;
        return SCHED_PLACE_OK;
    }
    return could_local || (could_card && could_export) ? SCHED_PLACE_WAIT : SCHED_PLACE_NEVER;
}

int sched_policy_can_serve(const sched_policy_dev *v, int n_devs, const sched_policy_opts *o)
{
    /* The same rules on idle devices: a one-token request is never NEVER exactly when some
     * prefill device and some decode path exist. */
    sched_policy_dev idle[64];
    if (n_devs > 64) n_devs = 64;
    for (int i = 0; i < n_devs; i++) {
        idle[i] = v[i];
        idle[i].running = 0;
        idle[i].positions = 0;
        idle[i].mem_committed = 0;
        idle[i].offload_committed = 0;
    }
    sched_policy_req r = {1, 1, 1, 0, 0, 0, 0, 0};
    sched_placement pl;
    return sched_policy_place(idle, n_devs, o, &r, &pl) != SCHED_PLACE_NEVER;
}

void sched_share_observe(sched_share *s, double now, double prefill_s)
{
    if (!(prefill_s >= 0)) prefill_s = 0;
    if (!s->started) {
        /* a device that starts has been idle: one time constant of history without prefill,
         * so that the first burst of prompts does not read as a device that only prefills */
        s->started = 1;
        s->last = now - prefill_s;
        s->total = SCHED_SHARE_TAU_S;
    }
    double dt = now - s->last;
    if (!(dt >= 0)) dt = 0;
    if (prefill_s > dt) dt = prefill_s;
    double f = exp(-dt / SCHED_SHARE_TAU_S);
    s->prefill = s->prefill * f + prefill_s;
    s->total = s->total * f + dt;
    s->last = now;
}

double sched_share_value(const sched_share *s)
{
    if (!(s->total > 0)) return 0;
    double v = s->prefill / s->total;
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

/* ---------------------------------------------------------------- the prefill queue's order */

int sched_policy_next_prefill(const sched_prefill_job *q, int n, double ttft_target_s)
{
    if (!q || n <= 1 || !(ttft_target_s > 0)) return 0;
    if (n > SCHED_PREFILL_LOOK) n = SCHED_PREFILL_LOOK;
    int on_time = -1;
    for (int i = 0; i < n; i++) {
        double w = q[i].waited_s > 0 ? q[i].waited_s : 0, l = q[i].left_s > 0 ? q[i].left_s : 0;
        if (w > SCHED_LATE_AGE * ttft_target_s) return i; /* aged: its FCFS place, before all */
        if (on_time < 0 && w + l <= ttft_target_s) on_time = i;
    }
    return on_time >= 0 ? on_time : 0;
}

/* ---------------------------------------------------------------- chunked prefill */

/* The features of a call: 1, c, c (p + c / 2). */
static void cost_x(double c, double p, double x[3])
{
    x[0] = 1;
    x[1] = c;
    x[2] = c * (p + c / 2);
}

/* Solves the k x k system g y = h (k <= 3) by Gaussian elimination with partial pivoting;
 * -1 when singular. */
static int solve(double g[3][3], double h[3], int k, double y[3])
{
    for (int i = 0; i < k; i++) {
        int piv = i;
        for (int r = i + 1; r < k; r++)
            if (fabs(g[r][i]) > fabs(g[piv][i])) piv = r;
        if (!(fabs(g[piv][i]) > 0)) return -1;
        if (piv != i) {
            for (int c = 0; c < k; c++) {
                double t = g[i][c];
                g[i][c] = g[piv][c];
                g[piv][c] = t;
            }
            double t = h[i];
            h[i] = h[piv];
            h[piv] = t;
        }
        for (int r = i + 1; r < k; r++) {
            double f = g[r][i] / g[i][i];
            for (int c = i; c < k; c++) g[r][c] -= f * g[i][c];
            h[r] -= f * h[i];
        }
    }
    for (int i = k - 1; i >= 0; i--) {
        double v = h[i];
        for (int c = i + 1; c < k; c++) v -= g[i][c] * y[c];
        y[i] = v / g[i][i];
    }
    return 0;
}

/* Refits a, b, e over the window: rows x_i / t_i (relative errors), target 1, columns scaled to
 * unit RMS, a ridge of SCHED_COST_RIDGE x n, the best non-negative fit over the 7 supports. */
#define SCHED_COST_RIDGE 1e-4
static void cost_fit(sched_cost *m)
{
    double scale[3] = {0, 0, 0};
    for (int i = 0; i < m->n; i++) {
        double x[3];
        cost_x(m->c[i], m->p[i], x);
        for (int j = 0; j < 3; j++) scale[j] += (x[j] / m->t[i]) * (x[j] / m->t[i]);
    }
    for (int j = 0; j < 3; j++) scale[j] = scale[j] > 0 ? sqrt(scale[j] / m->n) : 0;
    /* normal equations in scaled units: G = Z'Z + ridge I, h = Z'1 */
    double G[3][3] = {{0}}, h[3] = {0};
    for (int i = 0; i < m->n; i++) {
        double x[3], z[3];
        cost_x(m->c[i], m->p[i], x);
        for (int j = 0; j < 3; j++) z[j] = scale[j] > 0 ? x[j] / m->t[i] / scale[j] : 0;
        for (int j = 0; j < 3; j++) {
            h[j] += z[j];
            for (int l = 0; l < 3; l++) G[j][l] += z[j] * z[l];
        }
    }
    double best = (double)m->n, th[3] = {0, 0, 0}; /* the empty support: residual n */
    for (int S = 1; S < 8; S++) {
        int idx[3], k = 0, skip = 0;
        for (int j = 0; j < 3; j++)
            if (S >> j & 1) {
                if (!(scale[j] > 0)) skip = 1;
                idx[k++] = j;
            }
        if (skip) continue;
        double g[3][3], hh[3], y[3];
        for (int r = 0; r < k; r++) {
            hh[r] = h[idx[r]];
            for (int c = 0; c < k; c++) g[r][c] = G[idx[r]][idx[c]] + (r == c ? SCHED_COST_RIDGE * m->n : 0);
        }
        if (solve(g, hh, k, y)) continue;
        int ok = 1;
        for (int r = 0; r < k; r++) ok &= y[r] >= 0 && isfinite(y[r]);
        if (!ok) continue;
        /* objective: |Z y - 1|^2 + ridge |y|^2 = n - 2 y'h + y'G y + ridge |y|^2 */
        double obj = (double)m->n;
        for (int r = 0; r < k; r++) {
            obj -= 2 * y[r] * h[idx[r]];
            for (int c = 0; c < k; c++) obj += y[r] * G[idx[r]][idx[c]] * y[c];
            obj += SCHED_COST_RIDGE * m->n * y[r] * y[r];
        }
        if (obj < best) {
            best = obj;
            th[0] = th[1] = th[2] = 0;
            for (int r = 0; r < k; r++) th[idx[r]] = y[r] / scale[idx[r]];
        }
    }
    m->a = th[0];
    m->b = th[1];
    m->e = th[2];
}

int sched_cost_novel(const sched_cost *m, int tokens)
{
    if (!m || m->grain <= 0) return 0;
    if (tokens % m->grain) return 1;
    for (int i = 0; i < m->szn; i++)
        if (m->sz[i] == tokens) return 0;
    return 1;
}

static void push_size(sched_cost *m, int tokens)
{
    m->sz[m->szhead] = tokens;
    m->szhead = (m->szhead + 1) % SCHED_COST_WINDOW;
    if (m->szn < SCHED_COST_WINDOW) m->szn++;
}

static void push_novel(sched_cost *m, double excess)
{
    m->x[m->xhead] = (float)excess;
    m->xhead = (m->xhead + 1) % SCHED_COST_NOVEL;
    if (m->xn < SCHED_COST_NOVEL) m->xn++;
}

double sched_cost_margin(const sched_cost *m)
{
    double r = 1;
    for (int i = 0; m && i < m->rn; i++)
        if (m->r[i] > r) r = m->r[i];
    return r < SCHED_COST_MARGIN_MAX ? r : SCHED_COST_MARGIN_MAX;
}

double sched_cost_novel_s(const sched_cost *m)
{
    double x = 0;
    for (int i = 0; m && i < m->xn; i++)
        if (m->x[i] > x) x = m->x[i];
    return x;
}

double sched_cost_split_s(const sched_cost *m)
{
    if (!m || m->sn <= 0) return 0;
    float v[SCHED_COST_SPLIT];
    memcpy(v, m->s, sizeof(float) * (size_t)m->sn);
    for (int i = 1; i < m->sn; i++) /* insertion sort: at most SCHED_COST_SPLIT */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    double med = m->sn % 2 ? v[m->sn / 2] : 0.5 * ((double)v[m->sn / 2 - 1] + v[m->sn / 2]);
    return med > 0 ? med : 0;
}

double sched_cost_plan(const sched_cost *m, int tokens, int pos)
{
    double t = sched_cost_predict(m, tokens, pos) * sched_cost_margin(m);
    return t > 0 && sched_cost_novel(m, tokens) ? t + sched_cost_novel_s(m) : t;
}

/* One call into the fit's window, and the refit. */
static void add_fit(sched_cost *m, int tokens, int pos, double seconds)
{
    m->c[m->head] = (float)tokens;
    m->p[m->head] = (float)pos;
    m->t[m->head] = (float)seconds;
    m->head = (m->head + 1) % SCHED_COST_WINDOW;
    if (m->n < SCHED_COST_WINDOW) m->n++;
    m->seen++;
    cost_fit(m);
}

void sched_cost_observe_split(sched_cost *m, int tokens, int pos, double seconds, int layers, int n_layers)
{
    if (!m || layers >= n_layers) {
        sched_cost_observe(m, tokens, pos, seconds);
        return;
    }
    if (tokens <= 0 || pos < 0 || layers <= 0 || !(seconds > 0) || !isfinite(seconds)) return;
    const double f = (double)layers / n_layers;
    double w = m->seen >= SCHED_COST_TRUST ? sched_cost_predict(m, tokens, pos) : 0;
    if (w > 0 && sched_cost_novel(m, tokens)) { /* a new size's first call: its excess only */
        double s0 = sched_cost_split_s(m) < w ? sched_cost_split_s(m) : w;
        push_novel(m, seconds - (s0 + f * (w - s0)) * sched_cost_margin(m));
        push_size(m, tokens);
        return;
    }
    if (w > 0 && f <= 0.5) { /* a sample of the split part: t = s + f (w - s) */
        m->s[m->shead] = (float)((seconds - f * w) / (1 - f));
        m->shead = (m->shead + 1) % SCHED_COST_SPLIT;
        if (m->sn < SCHED_COST_SPLIT) m->sn++;
    }
    push_size(m, tokens);
    /* once the model is trusted, the whole call a call of under half the layers stands for is
     * mostly a guess: an error d in s becomes d (L / layers - 1) in it (a trailing 2-layer call
     * that ended a 128K chunk read as a whole call of its own 4.8 ms: the simulator's
     * FlexPrefill, sched_sim.c); before that such calls are what teaches it (a model that has
     * seen one long call prices a short chunk far over the budget and runs it a layer a call) */
    if (f < 0.5 && m->seen >= SCHED_COST_TRUST) return;
    double s = sched_cost_split_s(m);
    if (s > seconds) s = seconds;
    /* the whole call it stands for: its own part once, its layers' part x n_layers / layers
     * (its error is not the margin's) */
    add_fit(m, tokens, pos, s + (seconds - s) / f);
}

void sched_cost_observe(sched_cost *m, int tokens, int pos, double seconds)
{
    if (!m || tokens <= 0 || pos < 0 || !(seconds > 0) || !isfinite(seconds)) return;
    /* the prediction this call was planned with, against what it took (sched_policy.h: margin,
     * novel) */
    double pred = m->seen >= SCHED_COST_TRUST ? sched_cost_predict(m, tokens, pos) : 0;
    if (pred > 0 && sched_cost_novel(m, tokens)) {
        push_novel(m, seconds - pred * sched_cost_margin(m));
    } else if (pred > 0) {
        m->r[m->rhead] = (float)(seconds / pred);
        m->rhead = (m->rhead + 1) % SCHED_COST_WINDOW;
        if (m->rn < SCHED_COST_WINDOW) m->rn++;
    }
    push_size(m, tokens);
    add_fit(m, tokens, pos, seconds);
}

double sched_cost_predict(const sched_cost *m, int tokens, int pos)
{
    if (!m || !m->seen || tokens <= 0) return 0;
    double x[3];
    cost_x(tokens, pos < 0 ? 0 : pos, x);
    return m->a * x[0] + m->b * x[1] + m->e * x[2];
}

double sched_policy_prefill_s(const sched_policy_dev *d, int n_prompt)
{
    if (n_prompt <= 0) return 0;
    double x[3];
    cost_x(n_prompt, 0, x);
    return d->prefill_fit[0] * x[0] + d->prefill_fit[1] * x[1] + d->prefill_fit[2] * x[2];
}

/* The largest c with a + b c + e c (p + c / 2) <= left (real-valued; 0 when even c = 0 does not
 * fit, "infinity" as 1e18 when nothing grows). */
static double cost_fit_tokens(const sched_cost *m, double p, double left)
{
    double room = left - m->a;
    if (!(room > 0)) return 0;
    double lin = m->b + m->e * p, q = m->e / 2;
    if (q > 0) return (-lin + sqrt(lin * lin + 4 * q * room)) / (2 * q);
    return lin > 0 ? room / lin : 1e18;
}

int sched_policy_chunk(int remaining, int pos, int align, int decoding, int first,
                       double budget_s, double budget_left_s, const sched_cost *cost)
{
    if (remaining <= 0) return 0;
    if (!decoding || budget_s <= 0) return remaining;
    if (align < 1) align = 1;
    int least = align > 1 ? align : SCHED_CHUNK_MIN; /* the smallest chunk there is */
    if (!cost || !cost->seen) {
        if (!first) return 0; /* nothing to size a second chunk with */
        long long k = SCHED_CHUNK_PROBE > least ? SCHED_CHUNK_PROBE / align * align : least;
        return k < remaining ? (int)k : remaining;
    }
    /* planned to the margin: predicted x margin fits what is left */
    const double mg = sched_cost_margin(cost);
    double fit = budget_left_s > 0 ? cost_fit_tokens(cost, pos < 0 ? 0 : pos, budget_left_s / mg) : 0;
    /* no extrapolation far beyond the calls seen: a run of short, weight-bound calls shows no
     * growth with their size at all */
    double seen = 0;
    for (int i = 0; i < cost->n; i++)
        if (cost->c[i] > seen) seen = cost->c[i];
    if (fit > SCHED_CHUNK_GROW * seen) fit = SCHED_CHUNK_GROW * seen;
    /* dense: whole tiles from one tile up (SCHED_CHUNK_TILE) */
    const int step = align > 1 ? align : SCHED_CHUNK_TILE;
#define GRANULES(x) ((x) >= step ? (long long)(x) / step * step : (long long)(x) / align * align)
    long long k = fit >= remaining ? remaining : GRANULES(fit);
    /* a size new to the window is planned with its first call's extra (sched_cost_novel_s, at most
     * SCHED_NOVEL_BUDGET_SHARE of the budget): kn, the largest that fits even at a new size, or
     * a larger one of the window (a bounded walk down from k, in granules) */
    double extra = sched_cost_novel_s(cost);
    if (extra > SCHED_NOVEL_BUDGET_SHARE * budget_s) extra = SCHED_NOVEL_BUDGET_SHARE * budget_s;
    if (extra > 0 && k >= least && !cost->layer_split) {
        double fn = budget_left_s > extra ? cost_fit_tokens(cost, pos < 0 ? 0 : pos, (budget_left_s - extra) / mg) : 0;
        if (fn > SCHED_CHUNK_GROW * seen) fn = SCHED_CHUNK_GROW * seen;
        long long kn = fn >= remaining ? remaining : GRANULES(fn), w = k;
        int i = 0;
        for (; w > kn && i < 64; i++) {
            if (!sched_cost_novel(cost, (int)w)) break;
            w = w == remaining && remaining % step ? GRANULES(remaining) : w - step;
        }
        k = w > kn && i < 64 ? w : kn;
    }
#undef GRANULES
    if (k >= remaining) return remaining;
    if (first) return (int)(k > least ? k : least < remaining ? least : remaining);
    /* a later chunk: whole granules (a whole tile for dense: a part of one costs the whole tile
     * on a GPU), and big enough that the fixed part does not dominate */
    if (k < least || k < step) return 0;
    double per = cost->b + cost->e * (pos < 0 ? 0 : pos);
    double useful = per > 0 ? SCHED_CHUNK_EFF_K * cost->a / per : cost->a > 0 ? 1e18 : 0;
    return (double)k >= useful ? (int)k : 0;
}

int sched_policy_layers(int todo, double layer_s, double call_s, double budget_left_s, int first)
{
    if (todo <= 0) return 0;
    if (!(call_s > 0) || !isfinite(call_s)) call_s = 0;
    if (!(layer_s > 0) || !isfinite(layer_s) || call_s + layer_s * todo <= budget_left_s) return todo;
    double fit = budget_left_s > call_s ? floor((budget_left_s - call_s) / layer_s) : 0;
    int k = fit >= todo ? todo : (int)fit;
    if (first) return k > 0 ? k : 1;
    /* a later call: worth its own part */
    return k > 0 && (k == todo || k * layer_s >= SCHED_CHUNK_EFF_K * call_s) ? k : 0;
}

int sched_policy_call_layers(const sched_cost *cm, int tokens, int pos, int layer0, int n_layers, int can_split,
                             double budget_s, double budget_left_s, int first, double *pred_s, double *plan_s)
{
    const int L = n_layers > 0 ? n_layers : 1, l0 = layer0 > 0 && layer0 < L ? layer0 : 0;
    int nl = L - l0;
    /* planned to the cost model's margin, a split call with its own part (sched_policy.h) */
    const double whole_s = sched_cost_predict(cm, tokens, pos), mg = sched_cost_margin(cm);
    const double split_s = sched_cost_split_s(cm) < whole_s ? sched_cost_split_s(cm) : whole_s;
    const double layer_s = (whole_s - split_s) / L;
    /* a chunk size new to the window: its first call plans the new size's extra too (at most
     * SCHED_NOVEL_BUDGET_SHARE of the budget, as sched_policy_chunk does) */
    double novel_s = l0 == 0 && sched_cost_novel(cm, tokens) ? sched_cost_novel_s(cm) : 0;
    if (novel_s > SCHED_NOVEL_BUDGET_SHARE * budget_s) novel_s = SCHED_NOVEL_BUDGET_SHARE * budget_s;
    if (can_split && budget_s > 0 && cm && cm->seen)
        nl = sched_policy_layers(L - l0, layer_s * mg, split_s * mg + novel_s, budget_left_s, first);
    const int part = nl > 0 && nl < L;
    if (pred_s) *pred_s = part ? split_s + nl * layer_s : whole_s;
    if (plan_s) *plan_s = part ? (split_s + nl * layer_s) * mg + novel_s : sched_cost_plan(cm, tokens, pos);
    return nl;
}

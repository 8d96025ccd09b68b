/* daemon/serve.c — `tandem serve`: the process model and its lifecycle.
 *
 * Process model
 * -------------
 * One libuv loop thread owns all I/O, timers, signals and shared state:
 *   - both HTTP listeners (daemon/http.c: the loop accepts, reads and writes every connection,
 *     so every request handler runs on this thread);
 *   - the scheduler's queues, placement and bookkeeping (scheduler/sched_core.c);
 *   - metrics, the request list, sd_notify, signals (SIGTERM/SIGINT drain, SIGHUP reopens logs).
 * Device worker threads, one per device (scheduler/sched_worker.c), run compute: prefill,
 * batched decode, and per token sampling, detokenization and stop matching. They never touch a
 * socket. The only ways across are the scheduler's task inbox per worker (in) and one event queue
 * (out), keyed by request, woken with uv_async_send. The model is loaded and the devices opened on
 * a libuv thread-pool thread (uv_queue_work) so that /health answers and /ready says 503 while a
 * large checkpoint loads; the loop takes them over when that work completes.
 *
 * Why HTTP runs inside the loop rather than in threads of its own: every handler then sees the
 * scheduler and the request list without locks, a token event becomes SSE bytes in the same
 * thread without a second hand-over queue, and a client's hang-up reaches sched_cancel directly.
 * The cost is that request parsing, tokenization and template rendering run on the loop thread;
 * they are bounded by the body limit and take microseconds to milliseconds (bench/ measures the
 * loop's added latency).
 *
 * Lifecycle
 * ---------
 *   start:   config -> logs -> keys hashed -> listeners bound (/health 200, /ready 503)
 *            -> [pool thread] model, tokenizer, chat template, devices
 *            -> scheduler: each worker runs accel_warmup on its device
 *            -> all warm: READY=1, /ready 200, the watchdog starts
 *   running: every tick, STATUS= with the queue, WATCHDOG=1 only when no device is stuck in a
 *            call for longer than watchdog_stall (an idle worker wakes twice a second to prove
 *            it is alive)
 *   SIGTERM: STOPPING=1, new requests get 503 with Retry-After and Connection: close (the
 *            listener keeps accepting, so a load balancer sees an answer, not a refused
 *            connection), in-flight requests finish; exit 0 when none is left, or exit 3
 *            (DMN_EXIT_DRAIN_TIMEOUT) at drain_timeout, the requests still running then
 *            cancelled and told so. A node that lends devices (kv_listen) drains them too: its
 *            peers are told it has no room (no new sequence is placed on it, and one asked for
 *            is refused) and the sequences it holds for them are waited for as its own requests
 *            are; those still held at drain_timeout are cut as the node exits (their nodes move
 *            the requests, as for a node lost). A second SIGTERM/SIGINT cuts the drain short
 *            (exit 3 when that cancelled requests or cut lent sequences).
 *   self-probe: every second the loop asks its own API listener for /health (exempt from the
 *            connection limits); /ready fails after 2 unanswered probes, WATCHDOG=1 stops
 *            after 5 (a stuck listener is restarted). A listener whose every slot holds a
 *            request being served fails /ready too (taken out of rotation, not restarted).
 *   SIGHUP:  the log file is reopened (logrotate). */
#include "daemon/serve.h"
#include "daemon/log.h"
#include "daemon/api_struct.h"
#include "devices/devices.h"
#include "peer/peer.h"
#include "proto/openai_tools.h"
#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

/* How often the loop checks drain progress and the watchdog and refreshes STATUS=. The watchdog
 * wants a ping at least every WatchdogSec/2 (sd_watchdog_enabled(3)); it gets one every quarter,
 * so the tick runs at the smaller of that and this. */
#define TICK_MS 100
#define STATUS_EVERY_S 5.0
/* The API listener's self-probe: one a second, each given 2 s (a loaded loop answers /health in
 * well under that: the probe is handled by the HTTP layer itself, not queued behind requests).
 * /ready fails after 2 failed probes in a row; the watchdog is starved after 5 (~5-10 s, within
 * the unit's WatchdogSec). */
#define PROBE_EVERY_S 1.0
#define PROBE_TIMEOUT_MS 2000
#define PROBE_FAILS_UNREADY 2
#define PROBE_FAILS_DEAD 5

/* The chat template used when neither the model nor the chat_template key provides one: the
 * messages' contents joined by newlines — text a base (non-chat) model such as stories260K can
 * continue. It holds no special tokens, so its text is encoded like a completion prompt (with
 * the tokenizer's own bos/eos rule): a one-message chat gives the same tokens as that message
 * sent to /v1/completions. Documented in tandem.conf.example. */
static const char fallback_template[] =
    "{% for m in messages %}{% if not loop.first %}\n{% endif %}{{ m['content'] }}{% endfor %}";

const char *dmn_state_name(enum dmn_state s)
{
    switch (s) {
    case DMN_STATE_LOADING: return "loading";
    case DMN_STATE_READY: return "ready";
    case DMN_STATE_DRAINING: return "draining";
    case DMN_STATE_FAILED: return "failed";
    }
    return "?";
}

void dmn_notify(const char *msg)
{
    sd_notify(0, msg);
    char q[256];
    dmn_log(DMN_LOG_DEBUG, "sd_notify", "msg=%s", dmn_log_quote(q, sizeof q, msg));
}

void dmn_request_id(char *out, size_t n, const char *prefix)
{
    /* 24 characters of base62: 143 bits, from OpenSSL's CSPRNG (ids are not guessable, so one
     * client cannot name another's request in logs or admin calls). */
    static const char al[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    unsigned char rnd[24];
    if (RAND_bytes(rnd, sizeof rnd) != 1) {
        /* getrandom(2) is what OpenSSL itself reads; failing both means no entropy at all. */
        for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(random() & 0xff);
    }
    size_t o = (size_t)snprintf(out, n, "%s", prefix);
    /* 248 = 4 * 62: bytes >= 248 would bias the alphabet; map them again with a fresh byte. */
    for (size_t i = 0; i < sizeof rnd && o + 1 < n; i++) {
        unsigned char b = rnd[i];
        while (b >= 248) {
            if (RAND_bytes(&b, 1) != 1) b = (unsigned char)(random() % 248);
        }
        out[o++] = al[b % 62];
    }
    out[o] = 0;
}

int dmn_serve_can_admit(dmn_serve *d, const char **why)
{
    const char *w = NULL;
    if (d->state == DMN_STATE_LOADING) w = "loading";
    else if (d->state == DMN_STATE_DRAINING) w = "draining";
    else if (d->state == DMN_STATE_FAILED) w = "failed";
    else if (!d->sched) w = "loading";
    else if (d->api && dmn_http_probe_failing(d->api, NULL) >= PROBE_FAILS_UNREADY)
        w = "the API listener does not answer its self-probe";
    else sched_can_serve(d->sched, &w); /* a healthy prefill device and a decode path */
    if (why) *why = w;
    return w == NULL;
}

int dmn_serve_ready(dmn_serve *d, int own, const char **why)
{
    if (!dmn_serve_can_admit(d, why)) return 0;
    /* The self-probe is exempt from the connection limits, so a full listener still answers it:
     * fullness is read from the slots themselves. A node whose every API slot holds a request
     * being served turns a new client away (503), so it is not ready: the balancer sends
     * elsewhere until a slot frees. */
    if (d->api && dmn_http_slots_free(d->api) + own <= 0) {
        if (why) *why = "every connection slot of the API listener holds a request being served";
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- shutdown */

static void close_all(dmn_serve *d)
{
    if (d->api) dmn_http_free(d->api);
    if (d->admin) dmn_http_free(d->admin);
    d->api = d->admin = NULL;
    if (d->sched) sched_free(d->sched);
    d->sched = NULL;
    uv_handle_t *hs[] = {(uv_handle_t *)&d->sig_term, (uv_handle_t *)&d->sig_int,
                         (uv_handle_t *)&d->sig_hup, (uv_handle_t *)&d->tick};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        if (!uv_is_closing(hs[i])) uv_close(hs[i], NULL);
}

/* Requests still in flight are cancelled and answered (503 / an SSE error event); the
 * listeners close once those answers are out or after SHUTDOWN_GRACE_S. */
#define SHUTDOWN_GRACE_S 0.5

int dmn_serve_lent_seqs(const dmn_serve *d)
{
    /* the peer server is the loading thread's until the scheduler exists (after_load) */
    return d->sched ? peer_server_live_seqs(d->peer_srv) : 0;
}

static void shutdown_now(dmn_serve *d, const char *why)
{
    if (d->closing_at > 0) return;
    char q[200];
    dmn_log(DMN_LOG_INFO, "shutdown", "reason=%s exit=%d in_flight=%d lent_seqs=%d",
            dmn_log_quote(q, sizeof q, why), d->exit_code, d->n_reqs, dmn_serve_lent_seqs(d));
    if (d->n_reqs && d->sched) dmn_api_cancel_all(d, why);
    d->closing_at = sched_now() + SHUTDOWN_GRACE_S;
    if (!d->n_reqs || !uv_is_active((uv_handle_t *)&d->tick)) close_all(d);
}

void dmn_serve_drain(dmn_serve *d, int exiting)
{
    if (exiting && !d->exiting) {
        d->exiting = 1;
        d->drain_deadline = sched_now() + d->cfg.drain_timeout;
        dmn_notify("STOPPING=1\nSTATUS=draining");
        /* The API listener stays open while draining: a new request gets 503 with Retry-After
         * and Connection: close (what a load balancer takes as "go elsewhere"), not a refused
         * connection. It closes when the drain ends. */
    }
    if (d->state == DMN_STATE_READY || d->state == DMN_STATE_LOADING) {
        d->state = d->state == DMN_STATE_LOADING && exiting ? DMN_STATE_FAILED : DMN_STATE_DRAINING;
        /* the lent devices too (drained while loading: on_warm tells the peer server) */
        if (d->sched) peer_server_set_draining(d->peer_srv, 1);
        dmn_log(DMN_LOG_INFO, "drain", "exiting=%d in_flight=%d lent_seqs=%d timeout_s=%.1f",
                exiting, d->n_reqs, dmn_serve_lent_seqs(d), d->cfg.drain_timeout);
    }
}

int dmn_serve_resume(dmn_serve *d)
{
    /* drained while loading: resumed only once warmed (on_warm keeps it draining until then) */
    if (d->exiting || d->state != DMN_STATE_DRAINING || !d->sched || !d->warmed) return -1;
    d->state = DMN_STATE_READY;
    peer_server_set_draining(d->peer_srv, 0);
    dmn_notify("STATUS=ready");
    return 0;
}

/* ---------------------------------------------------------------- the tick */

/* WATCHDOG=1 only while the engine makes progress: no device worker has been inside one device
 * call for longer than watchdog_stall. The tick itself proves the loop runs. */
static int engine_alive(dmn_serve *d)
{
    if (!d->sched) return 1;
    sched_stats st;
    sched_get_stats(d->sched, &st);
    double now = sched_now();
    for (int i = 0; i < st.n_devices; i++) {
        const sched_dev_stats *s = &st.dev[i];
        if (now - s->last_progress > d->cfg.watchdog_stall) {
            if (!d->stalled) {
                char q[2 * ACCEL_NAME_MAX + 3]; /* every byte escaped, and quotes */
                dmn_log(DMN_LOG_ERROR, "stalled", "device=%s in_step=%d idle_s=%.1f watchdog=%s",
                        dmn_log_quote(q, sizeof q, s->info.name), s->in_step, now - s->last_progress,
                        d->watchdog_usec ? "starved" : "off");
            }
            d->stalled = 1;
            return 0;
        }
    }
    if (d->stalled) dmn_log(DMN_LOG_INFO, "progress", "msg=\"the devices make progress again\"");
    d->stalled = 0;
    return 1;
}

/* WATCHDOG=1 only while the API listener answers its self-probe: a daemon that cannot accept
 * connections is restarted by systemd rather than trusted. The probe is exempt from the
 * connection limits, so a listener full of requests being served still answers it (that load
 * fails /ready instead: dmn_serve_ready). A probe that fails while every slot is taken is still
 * not taken for a hang: at that load a late answer is more likely the load, and a restart would
 * cut every one of those requests. */
static int listener_alive(dmn_serve *d)
{
    double since;
    if (!d->api || dmn_http_probe_failing(d->api, &since) < PROBE_FAILS_DEAD) {
        d->listener_dead = 0;
        return 1;
    }
    if (dmn_http_conns(d->api) >= d->cfg.max_connections) return 1;
    if (!d->listener_dead) {
        dmn_log(DMN_LOG_ERROR, "listener_stuck", "listener=api failing_s=%.1f watchdog=%s",
                sched_now() - since, d->watchdog_usec ? "starved" : "off");
        d->listener_dead = 1;
    }
    return 0;
}

static void on_tick(uv_timer_t *t)
{
    dmn_serve *d = t->data;
    double now = sched_now();
    if (d->closing_at > 0) {
        if (d->n_reqs == 0 || now >= d->closing_at) close_all(d);
        return;
    }
    if (d->exiting) {
        /* the sequences this node decodes for its peers are waited for as its own requests */
        int lent = dmn_serve_lent_seqs(d);
        if (d->n_reqs == 0 && lent == 0) {
            shutdown_now(d, "drained");
            return;
        }
        if (now >= d->drain_deadline) {
            /* not a clean stop: some clients lost their answers, or the peers' requests whose
             * sequences are cut here move to other devices, prefilled again (systemd shows it
             * as failed) */
            d->exit_code = DMN_EXIT_DRAIN_TIMEOUT;
            shutdown_now(d, !lent ? "drain timeout: requests still in flight were cancelled"
                            : d->n_reqs
                                ? "drain timeout: requests still in flight were cancelled, "
                                  "lent sequences cut (their nodes move them)"
                                : "drain timeout: lent sequences cut (their nodes move them)");
            return;
        }
    }
    /* The API listener's self-probe: /ready and the watchdog believe it, not the state. */
    if (d->api && now - d->last_probe >= PROBE_EVERY_S) {
        dmn_http_probe(d->api, PROBE_TIMEOUT_MS);
        d->last_probe = now;
    }
    /* Ping at a quarter of WatchdogSec: systemd asks for at least every half. */
    if (d->watchdog_usec && d->state != DMN_STATE_LOADING &&
        now - d->last_watchdog >= (double)d->watchdog_usec / 4e6 && engine_alive(d) && listener_alive(d)) {
        dmn_notify("WATCHDOG=1");
        d->last_watchdog = now;
    }
    dmn_peer_tick(d);
    if (now - d->last_status >= STATUS_EVERY_S && d->sched) {
        sched_stats st;
        sched_get_stats(d->sched, &st);
        char msg[160];
        snprintf(msg, sizeof msg, "STATUS=%s: %d running, %d waiting, %d connections",
                 dmn_state_name(d->state), st.n_running, st.n_waiting, d->api ? dmn_http_active(d->api) : 0);
        dmn_notify(msg);
        d->last_status = now;
    }
}

/* ---------------------------------------------------------------- signals */

static void on_signal(uv_signal_t *s, int signum)
{
    dmn_serve *d = s->data;
    if (signum == SIGHUP) {
        int rc = dmn_log_reopen();
        dmn_log(rc ? DMN_LOG_ERROR : DMN_LOG_INFO, "sighup", "logs_reopened=%d", rc == 0);
        return;
    }
    if (d->exiting) {
        if (d->n_reqs || dmn_serve_lent_seqs(d)) d->exit_code = DMN_EXIT_DRAIN_TIMEOUT;
        shutdown_now(d, "second signal: drain cut short");
        return;
    }
    dmn_log(DMN_LOG_INFO, "signal", "signal=%s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    d->exit_code = 0;
    if (!d->sched) {
        d->state = DMN_STATE_FAILED;
        d->exiting = 1;
        dmn_notify("STOPPING=1");
        return; /* the loader finishes, sees exiting, and shuts down */
    }
    /* loaded (warming up, or ready): a drain with its deadline, the lent devices' included — a
     * SIGTERM while warming up set no deadline, so a sequence lent already was cut at the next
     * tick (review21) */
    dmn_serve_drain(d, 1);
}

/* ---------------------------------------------------------------- loading */

static void on_warm(void *ctx, int ok)
{
    dmn_serve *d = ctx;
    for (int i = 0; i < d->n_devs; i++) {
        accel_info info;
        accel_get_info(d->devs[i], &info);
        dmn_log(DMN_LOG_INFO, "device", "name=%s kind=%s health=%s prefill=%d decode=%d kv_export=%d kv_import=%d mem_total=%llu kv_bytes_per_token=%llu max_batch=%d desc=\"%s\"",
                info.name, accel_kind_name(info.kind), accel_health_name(info.health),
                !!(info.caps & ACCEL_CAP_PREFILL), !!(info.caps & ACCEL_CAP_DECODE),
                !!(info.caps & ACCEL_CAP_KV_EXPORT), !!(info.caps & ACCEL_CAP_KV_IMPORT),
                (unsigned long long)info.mem_total, (unsigned long long)info.kv_bytes_per_token,
                info.max_batch, info.desc);
    }
    if (!ok) {
        dmn_log(DMN_LOG_ERROR, "warmup_failed", "msg=\"no device warmed up\"");
        d->state = DMN_STATE_FAILED;
        d->exit_code = 1;
        dmn_notify("STATUS=warm-up failed on every device");
        shutdown_now(d, "warm-up failed");
        return;
    }
    if (d->exiting) return;
    d->warmed = 1;
    /* drained while loading (/admin/drain during a rolling update): started, but still draining
     * until /admin/resume */
    int drained = d->state == DMN_STATE_DRAINING;
    if (!drained) d->state = DMN_STATE_READY;
    peer_server_set_draining(d->peer_srv, drained);
    char msg[256];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s: serving %s on %d device(s)",
             drained ? "draining" : "ready", d->served_name, d->n_devs);
    dmn_notify(msg);
    d->last_status = sched_now();
    dmn_log(DMN_LOG_INFO, "ready", "model=%s devices=%s draining=%d", d->served_name,
            d->cfg.devices, drained);
}

/* Runs on a thread-pool thread: nothing here touches the loop's state except d's engine fields,
 * which nothing reads until after_load runs on the loop. */
static void do_load_on(dmn_serve *d);

static void do_load(uv_work_t *w)
{
    do_load_on(w->data);
    /* model_load's fingerprint (SHA-256) made OpenSSL keep per-thread state (its error queue)
     * on this pool thread, which libuv never ends: free it here (OPENSSL_thread_stop(3)). */
    OPENSSL_thread_stop();
}

static void do_load_on(dmn_serve *d)
{
    char err[768];
    d->m = model_load(d->cfg.model, err, sizeof err);
    if (!d->m) {
        snprintf(d->load_err, sizeof d->load_err, "model: %s", err);
        return;
    }
    d->tok = model_tok_load_dir(d->cfg.model, err, sizeof err);
    if (!d->tok) {
        snprintf(d->load_err, sizeof d->load_err, "tokenizer: %s", err);
        return;
    }
    /* better no start than a chat that could forge a turn, or a 500 on every chat */
    const char *why = model_tok_esc_refusal(d->tok);
    if (why && model_tok_esc_scope_parse(d->cfg.escape_special_tokens) != MODEL_TOK_ESC_OFF) {
        snprintf(d->load_err, sizeof d->load_err,
                 "escape_special_tokens = %s cannot be kept with this tokenizer: %s; set it to off",
                 d->cfg.escape_special_tokens, why);
        return;
    }
    const char *src = model_tok_chat_template(d->tok);
    char *file = NULL;
    if (d->cfg.chat_template[0]) {
        size_t len;
        file = model_read_file(d->cfg.chat_template, 16 << 20, &len);
        if (!file) {
            snprintf(d->load_err, sizeof d->load_err, "chat_template %s: %s", d->cfg.chat_template, strerror(errno));
            return;
        }
        src = file;
    }
    if (!src) {
        src = fallback_template;
        d->tmpl_plain = 1;
    }
    d->tmpl = model_tmpl_compile(src, strlen(src), err, sizeof err);
    d->tool_family = proto_tool_family_of(src);
    /* how a chat's history is shaped for this template (proto/openai_msg.h) */
    proto_limits_template(&d->limits, src);
    free(file);
    if (!d->tmpl) {
        snprintf(d->load_err, sizeof d->load_err, "chat template: %s", err);
        return;
    }
    /* devices: a comma-separated list */
    char list[512];
    snprintf(list, sizeof list, "%s", d->cfg.devices);
    accel_opts opts = {0};
    opts.threads = d->cfg.threads;
    opts.mem_limit = (uint64_t)d->cfg.kv_mem_limit;
    opts.kv_dtype = PROTO_KV_INT8;
    opts.pace = d->cfg.fpga_emu_pace;
    opts.run_timeout_ms = (unsigned)d->cfg.fpga_run_timeout_ms;
    opts.cache_dir = d->cfg.cache_dir[0] ? d->cfg.cache_dir : NULL;
    accel_gpu_half_parse(d->cfg.gpu_dtype, &opts.gpu_half); /* checked by dmn_config_load */
    opts.gpu_tune = d->cfg.gpu_tune; /* checked by the plugin when a cuda device opens */
    opts.decode_sparse = d->cfg.decode_sparse; /* checked by the cpu device when it opens */
    char *save = NULL;
    for (char *name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        if (d->n_devs == SCHED_MAX_DEVICES) {
            snprintf(d->load_err, sizeof d->load_err, "devices: at most %d", SCHED_MAX_DEVICES);
            return;
        }
        /* A device this machine does not have (no GPU, no card) is skipped, so that one
         * configuration serves on every node; one that is there but fails to open stops start-up. */
        char why[256], q[300];
        if (!devices_present(name, why, sizeof why)) {
            dmn_log(DMN_LOG_WARN, "device_skipped", "device=%s reason=%s", name,
                    dmn_log_quote(q, sizeof q, why));
            continue;
        }
        /* devices_open finds the card emulator beside the binary (build/) or installed
         * (lib/tandem/), as every subcommand does */
        accel_dev *dev = devices_open(name, d->m, &opts, err, sizeof err);
        if (!dev) {
            snprintf(d->load_err, sizeof d->load_err, "device %s: %s", name, err);
            return;
        }
        d->devs[d->n_devs++] = dev;
    }
    dmn_peer_open(d, &opts);
    if (d->load_err[0]) return;
    if (d->n_devs == 0)
        snprintf(d->load_err, sizeof d->load_err, "devices: %s%s%s", d->cfg.devices[0] ? "none of '" : "",
                 d->cfg.devices, d->cfg.devices[0] ? "' is on this machine" : "the list is empty");
}

static void after_load(uv_work_t *w, int status)
{
    dmn_serve *d = w->data;
    if (!d->load_err[0] && status != 0) snprintf(d->load_err, sizeof d->load_err, "loading was cancelled");
    if (d->load_err[0]) {
        char q[sizeof d->load_err + 64]; /* it may quote a config value: escaped */
        dmn_log(DMN_LOG_ERROR, "load_failed", "msg=%s", dmn_log_quote(q, sizeof q, d->load_err));
        char msg[1100];
        snprintf(msg, sizeof msg, "STATUS=failed: %s", d->load_err);
        dmn_notify(msg);
        d->state = DMN_STATE_FAILED;
        d->exit_code = 1;
        shutdown_now(d, "load failed");
        return;
    }
    if (d->exiting) {
        shutdown_now(d, "signal during loading");
        return;
    }
    const model_config *mc = &d->m->cfg;
    d->limits.vocab = mc->vocab;
    d->limits.max_context = mc->max_pos;
    d->limits.max_n = d->cfg.max_n;
    /* The host tier is one budget for the node (host_cache_bytes, else an eighth of RAM),
     * shared equally by the paged devices (the scheduler gives each paged device the same
     * bound): a default per device would take 3/8 of RAM with three devices and all of it with
     * eight, beside the weights and the CPU's KV. A peer's devices, added later, are not paged:
     * they keep no host tier here. */
    uint64_t host = 0;
    if (d->cfg.host_cache) {
        host = (uint64_t)d->cfg.host_cache_bytes;
        if (!host) host = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 8;
        int paged = 0;
        for (int i = 0; i < d->n_devs; i++) {
            accel_info ai;
            accel_get_info(d->devs[i], &ai);
            paged += (ai.caps & ACCEL_CAP_PAGED) != 0;
        }
        if (paged > 1) host /= (uint64_t)paged;
    }
    sched_config sc = {.max_waiting = d->cfg.max_waiting,
                       .max_running = d->cfg.max_running,
                       .step_delay_ms = d->cfg.step_delay_ms,
                       .tbt_budget_ms = d->cfg.tbt_budget_ms,
                       .ttft_target_ms = d->cfg.ttft_target_ms,
                       .fpga_prefill = d->cfg.fpga_prefill,
                       .no_prefix_cache = !d->cfg.prefix_cache,
                       .host_cache_bytes = host};
    char err[256];
    d->sched = sched_new(d->loop, d->devs, d->n_devs, d->tok, &sc, on_warm, d, err, sizeof err);
    if (!d->sched) {
        char m[300], q[400];
        snprintf(m, sizeof m, "scheduler: %s", err);
        dmn_log(DMN_LOG_ERROR, "load_failed", "msg=%s", dmn_log_quote(q, sizeof q, m));
        d->state = DMN_STATE_FAILED;
        d->exit_code = 1;
        shutdown_now(d, "scheduler failed");
        return;
    }
    dmn_notify("STATUS=warming up");
    dmn_log(DMN_LOG_INFO, "loaded", "model=%s dir=%s layers=%d vocab=%d context=%d devices=%s",
            d->served_name, d->cfg.model, mc->n_layers, mc->vocab, mc->max_pos, d->cfg.devices);
}

/* ---------------------------------------------------------------- setup */

static int is_loopback(const char *host)
{
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

static int setup_auth(dmn_serve *d, char *err, size_t errlen)
{
    d->auth = dmn_auth_new();
    d->admin_auth = dmn_auth_new();
    if (!d->auth || !d->admin_auth) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    dmn_config *c = &d->cfg;
    if (dmn_peer_load_key(d, err, errlen) < 0) return -1;
    if (c->api_key[0] && dmn_auth_add_key(d->auth, c->api_key, strlen(c->api_key)) < 0) goto oom;
    if (c->api_key_file[0] && dmn_auth_add_file(d->auth, c->api_key_file, err, errlen) < 0) return -1;
    if (c->admin_key[0] && dmn_auth_add_key(d->admin_auth, c->admin_key, strlen(c->admin_key)) < 0) goto oom;
    if (c->admin_key_file[0] && dmn_auth_add_file(d->admin_auth, c->admin_key_file, err, errlen) < 0) return -1;
    dmn_config_wipe_secrets(c);
    if (!is_loopback(c->admin_host) && dmn_auth_count(d->admin_auth) == 0) {
        snprintf(err, errlen, "the admin listener on %s is not on loopback: set admin_key or admin_key_file", c->admin_host);
        return -1;
    }
    if (dmn_auth_count(d->auth) == 0)
        dmn_log(is_loopback(c->host) ? DMN_LOG_INFO : DMN_LOG_WARN, "auth",
                "msg=\"no API key configured: the API on %s:%d is open to anyone who can reach it\"", c->host, c->port);
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -1;
}

static int start_listeners(dmn_serve *d, char *err, size_t errlen)
{
    dmn_config *c = &d->cfg;
    dmn_http_cfg hc = {"api", c->host, c->port, (size_t)c->max_body_bytes, (size_t)c->max_header_bytes,
                       c->max_connections, c->max_connections_per_ip, c->connection_timeout,
                       c->receive_timeout};
    dmn_http_handler h = dmn_api_handler;
    h.ctx = d;
    d->api = dmn_http_new(d->loop, &hc, &h, err, errlen);
    if (!d->api) return -1;
    /* Admin bodies are tiny (drain takes none); 64 KiB is plenty. */
    dmn_http_cfg ac = {"admin", c->admin_host, c->admin_port, 64 << 10, (size_t)c->max_header_bytes,
                       64, 0, c->connection_timeout, c->receive_timeout};
    h = dmn_admin_handler;
    h.ctx = d;
    d->admin = dmn_http_new(d->loop, &ac, &h, err, errlen);
    if (!d->admin) return -1;
    dmn_log(DMN_LOG_INFO, "listening", "listener=api addr=%s port=%d", c->host, dmn_http_port(d->api));
    dmn_log(DMN_LOG_INFO, "listening", "listener=admin addr=%s port=%d", c->admin_host, dmn_http_port(d->admin));
    return 0;
}

static void release_engine(dmn_serve *d)
{
    for (int i = 0; i < d->n_devs; i++) accel_free(d->devs[i]);
    d->n_devs = 0;
    dmn_peer_close(d);
    dmn_grammar_cache_clear();
    model_tmpl_free(d->tmpl);
    model_tok_free(d->tok);
    model_free(d->m);
    d->tmpl = NULL;
    d->tok = NULL;
    d->m = NULL;
}

int dmn_serve_main(int argc, char **argv)
{
    dmn_serve *d = calloc(1, sizeof *d);
    if (!d) return 1;
    char err[1024];
    int rc = dmn_config_load(&d->cfg, argc, argv, NULL, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "tandem serve: %s\n", err);
        dmn_config_deinit(&d->cfg);
        free(d);
        return rc > 0 ? 0 : 2;
    }
    if (dmn_log_open(d->cfg.log_file, d->cfg.log_level, err, sizeof err) < 0 ||
        dmn_config_resolve_model(&d->cfg, err, sizeof err) < 0 ||
        dmn_config_served_name(&d->cfg, d->served_name, sizeof d->served_name, err, sizeof err) <
            0 ||
        setup_auth(d, err, sizeof err) < 0) {
        fprintf(stderr, "tandem serve: %s\n", err);
        char q[sizeof err + 64];
        dmn_log(DMN_LOG_ERROR, "config", "msg=%s", dmn_log_quote(q, sizeof q, err));
        dmn_auth_free(d->auth);
        dmn_auth_free(d->admin_auth);
        dmn_config_deinit(&d->cfg);
        dmn_log_close();
        free(d);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a client closing mid-write must not kill the daemon */
    uv_loop_t loop;
    uv_loop_init(&loop);
    d->loop = &loop;
    d->t_start = sched_now();
    d->t_start_unix = (long long)time(NULL);
    d->state = DMN_STATE_LOADING;
    proto_limits_default(&d->limits);
    d->limits.max_n = d->cfg.max_n;
    dmn_metrics_init(&d->metrics);
    dmn_log(DMN_LOG_INFO, "start", "version=%s config=%s model=%s devices=%s pid=%d", DMN_VERSION,
            d->cfg.config[0] ? d->cfg.config : "-", d->cfg.model, d->cfg.devices, (int)getpid());

    uv_signal_init(&loop, &d->sig_term);
    uv_signal_init(&loop, &d->sig_int);
    uv_signal_init(&loop, &d->sig_hup);
    uv_timer_init(&loop, &d->tick);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d->tick.data = d;
    int exit_code;
    if (start_listeners(d, err, sizeof err) < 0) {
        dmn_log(DMN_LOG_ERROR, "listen_failed", "msg=\"%s\"", err);
        fprintf(stderr, "tandem serve: %s\n", err);
        d->exit_code = 1;
        close_all(d);
    } else {
        uv_signal_start(&d->sig_term, on_signal, SIGTERM);
        uv_signal_start(&d->sig_int, on_signal, SIGINT);
        uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
        uint64_t usec = 0;
        if (sd_watchdog_enabled(0, &usec) > 0) d->watchdog_usec = usec;
        uint64_t tick = TICK_MS;
        if (d->watchdog_usec && d->watchdog_usec / 4000 < tick) tick = d->watchdog_usec / 4000 ? d->watchdog_usec / 4000 : 1;
        uv_timer_start(&d->tick, on_tick, tick, tick);
        dmn_notify("STATUS=loading model");
        d->load.data = d;
        uv_queue_work(&loop, &d->load, do_load, after_load);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    exit_code = d->exit_code;
    /* Every handle is closed once uv_run returns; the engine goes last (the workers are joined). */
    int lc = uv_loop_close(&loop);
    if (lc != 0) dmn_log(DMN_LOG_WARN, "loop_close", "msg=\"%s\"", uv_strerror(lc));
    release_engine(d);
    dmn_auth_free(d->auth);
    dmn_auth_free(d->admin_auth);
    dmn_log(DMN_LOG_INFO, "exit", "code=%d", exit_code);
    dmn_config_deinit(&d->cfg);
    dmn_log_close();
    free(d);
    return exit_code;
}

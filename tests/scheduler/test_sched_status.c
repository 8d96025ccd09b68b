/* Tests for the one error space (scheduler/sched.h, "One error space"): the accel, scheduler and
 * KV wire statuses lie in disjoint ranges, every code has a name of its own that
 * sched_strerror() gives whatever module it comes from, and each one answers the API error it
 * should — checked on the table and on the real path, a device's fault surfacing through the
 * scheduler's events (tests/e2e/serve_errors.sh checks the same through the daemon's HTTP). */
#include "tests/test.h"
#include "tests/util.h"
#include "tests/scheduler/tcard.h"
#include "gpu/gpu_flex.h"
#include "proto/errors.h"
#include "proto/kv_wire.h"
#include "tests/scheduler/sched_env.h"

/* Every code of each module. The sweep below fails when a module names a code missing here. */
static const int accel_codes[] = {ACCEL_ERR_NOMEM,       ACCEL_ERR_DEVICE,  ACCEL_ERR_INVALID,
                                  ACCEL_ERR_TIMEOUT,     ACCEL_ERR_UNSUPPORTED, ACCEL_ERR_CORRUPT,
                                  ACCEL_ERR_CANCELLED,   ACCEL_ERR_NOT_FOUND};
static const int sched_codes[] = {SCHED_ERR_QUEUE_FULL, SCHED_ERR_INVALID, SCHED_ERR_NO_DEVICE,
                                  SCHED_ERR_TOO_LARGE,  SCHED_ERR_TIMEOUT, SCHED_ERR_NOMEM,
                                  SCHED_ERR_STOPPED};
static const int kv_codes[] = {PROTO_KV_ERR_MAGIC, PROTO_KV_ERR_VERSION,   PROTO_KV_ERR_MODEL,
                               PROTO_KV_ERR_BOUNDS, PROTO_KV_ERR_ORDER,    PROTO_KV_ERR_CRC,
                               PROTO_KV_ERR_TRUNCATED, PROTO_KV_ERR_NOMEM, PROTO_KV_ERR_STATE};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { M_ACCEL, M_SCHED, M_KV, M_COUNT };
static const int *const codes[M_COUNT] = {accel_codes, sched_codes, kv_codes};
static const int n_codes[M_COUNT] = {N_OF(accel_codes), N_OF(sched_codes), N_OF(kv_codes)};
static const int range_hi[M_COUNT] = {ACCEL_ERR_RANGE_HI, SCHED_ERR_RANGE_HI, PROTO_KV_ERR_RANGE_HI};
static const int range_lo[M_COUNT] = {ACCEL_ERR_RANGE_LO, SCHED_ERR_RANGE_LO, PROTO_KV_ERR_RANGE_LO};

static int in_range(int m, int st)
{
    switch (m) {
    case M_ACCEL: return ACCEL_IS_ERR(st);
    case M_SCHED: return SCHED_IS_ERR(st);
    case M_KV: return PROTO_KV_IS_ERR(st);
    }
    return 0;
}

static int listed(int st)
{
    for (int m = 0; m < M_COUNT; m++)
        for (int i = 0; i < n_codes[m]; i++)
            if (codes[m][i] == st) return 1;
    return 0;
}

/* What the modules answer for a value they do not define. */
static int is_unknown(const char *name)
{
    return !strcmp(name, "unknown status") || !strcmp(name, "unknown device status") ||
           !strcmp(name, "unknown scheduler status") || !strcmp(name, "unknown KV wire status");
}

TEST(sched_status_ranges_disjoint)
{
    for (int m = 0; m < M_COUNT; m++) {
        CHECK_MSG(range_hi[m] < 0 && range_lo[m] <= range_hi[m], "module %d: range %d..%d", m,
                  range_hi[m], range_lo[m]);
        for (int o = 0; o < M_COUNT; o++)
            if (o != m)
                CHECK_MSG(range_lo[m] > range_hi[o] || range_hi[m] < range_lo[o],
                          "ranges %d..%d and %d..%d overlap", range_hi[m], range_lo[m],
                          range_hi[o], range_lo[o]);
        /* every code in its own range and in no other; the macros agree with the bounds */
        for (int i = 0; i < n_codes[m]; i++)
            for (int o = 0; o < M_COUNT; o++)
                CHECK_MSG(in_range(o, codes[m][i]) == (o == m), "code %d: in range %d: %d",
                          codes[m][i], o, in_range(o, codes[m][i]));
        for (int st = range_hi[m] + 1; st >= range_lo[m] - 1; st--)
            CHECK_EQ(in_range(m, st), st <= range_hi[m] && st >= range_lo[m]);
    }
    /* success is one value for all three */
    CHECK_EQ(ACCEL_OK, 0);
    CHECK_EQ(SCHED_OK, 0);
    CHECK_EQ(PROTO_KV_OK, 0);
    /* gpu/gpu_flex.h mirrors three accel codes as literals (the flex kernels' C interface
     * includes no scheduler header): they must stay the accel values */
    CHECK_EQ(GPU_FLEX_ERR_NOMEM, ACCEL_ERR_NOMEM);
    CHECK_EQ(GPU_FLEX_ERR_DEVICE, ACCEL_ERR_DEVICE);
    CHECK_EQ(GPU_FLEX_ERR_INVALID, ACCEL_ERR_INVALID);
}

TEST(sched_status_every_code_named_once)
{
    const char *seen[64];
    int n_seen = 0;
    for (int m = 0; m < M_COUNT; m++)
        for (int i = 0; i < n_codes[m]; i++) {
            int st = codes[m][i];
            const char *name = sched_strerror(st);
            REQUIRE(name);
            CHECK_MSG(name[0] && !is_unknown(name) && strcmp(name, "ok"), "code %d: \"%s\"", st, name);
            /* the module's own function says the same */
            const char *own = m == M_ACCEL ? accel_strerror(st) : m == M_KV ? proto_kv_wire_strerror(st) : name;
            CHECK_STR(own, name);
            for (int j = 0; j < n_seen; j++)
                CHECK_MSG(strcmp(seen[j], name), "code %d shares its name \"%s\" with another", st, name);
            REQUIRE(n_seen < N_OF(seen));
            seen[n_seen++] = name;
        }
    CHECK_STR(sched_strerror(0), "ok");
    /* a sweep over every negative value the three ranges could reach and beyond: a name that is
     * not "unknown" is one of the codes listed above (a code added to a module without a line
     * here fails), and outside the three ranges nothing is named */
    for (int st = -1; st >= -1000; st--) {
        const char *name = sched_strerror(st);
        REQUIRE(name && name[0]);
        if (is_unknown(name)) {
            CHECK_MSG(!listed(st), "code %d has no name", st);
        } else {
            CHECK_MSG(listed(st), "status %d is named \"%s\" but is not a listed code", st, name);
        }
        if (!ACCEL_IS_ERR(st) && !SCHED_IS_ERR(st) && !PROTO_KV_IS_ERR(st))
            CHECK_STR(name, "unknown status");
    }
    CHECK_STR(sched_strerror(1), "unknown status");
    CHECK_STR(accel_strerror(SCHED_ERR_TIMEOUT), "unknown device status");
    CHECK_STR(proto_kv_wire_strerror(SCHED_ERR_TIMEOUT), "unknown KV wire status");
    CHECK_STR(proto_kv_wire_strerror(ACCEL_ERR_CORRUPT), "unknown KV wire status");
}

static int http_of(int st)
{
    return proto_err_info(sched_status_api_err(st))->http_status;
}

TEST(sched_status_api_errors)
{
    CHECK_EQ(sched_status_api_err(0), PROTO_ERR_NONE);
    /* the scheduler's own: as sched.h's comments say */
    CHECK_EQ(http_of(SCHED_ERR_QUEUE_FULL), 429);
    CHECK_EQ(http_of(SCHED_ERR_INVALID), 400);
    CHECK_EQ(http_of(SCHED_ERR_NO_DEVICE), 503);
    CHECK_EQ(http_of(SCHED_ERR_TOO_LARGE), 400);
    CHECK_EQ(sched_status_api_err(SCHED_ERR_TIMEOUT), PROTO_ERR_TIMEOUT);
    CHECK_EQ(http_of(SCHED_ERR_TIMEOUT), 504);
    CHECK_EQ(http_of(SCHED_ERR_NOMEM), 500);
    CHECK_EQ(http_of(SCHED_ERR_STOPPED), 503);
    /* a device's trouble is the server's (500), never the client's (4xx), never "retry later"
     * (429/503), and a device that timed out is not the request's deadline (504) */
    for (int i = 0; i < N_OF(accel_codes); i++) {
        enum proto_err e = sched_status_api_err(accel_codes[i]);
        CHECK_MSG(e == PROTO_ERR_DEVICE || e == PROTO_ERR_INTERNAL, "%s: %d",
                  accel_strerror(accel_codes[i]), (int)e);
        CHECK_EQ(http_of(accel_codes[i]), 500);
    }
    CHECK_EQ(sched_status_api_err(ACCEL_ERR_DEVICE), PROTO_ERR_DEVICE);
    CHECK_EQ(sched_status_api_err(ACCEL_ERR_TIMEOUT), PROTO_ERR_DEVICE);
    CHECK_EQ(sched_status_api_err(ACCEL_ERR_CORRUPT), PROTO_ERR_DEVICE);
    CHECK_EQ(sched_status_api_err(ACCEL_ERR_NOMEM), PROTO_ERR_DEVICE);
    for (int i = 0; i < N_OF(kv_codes); i++) CHECK_EQ(http_of(kv_codes[i]), 500);
    /* anything else is a bug: 500 internal_error */
    CHECK_EQ(sched_status_api_err(-150), PROTO_ERR_INTERNAL);
    CHECK_EQ(sched_status_api_err(-1000), PROTO_ERR_INTERNAL);
    CHECK_EQ(sched_status_api_err(7), PROTO_ERR_INTERNAL);
}

/* ---------------------------------------------------------------- through the scheduler */

typedef struct env {
    sched_env se; /* the CPU and one test card */
    int done, error, status;
    char message[256];
} env;

static void on_event(void *ctx, const sched_event *ev)
{
    env *e = ctx;
    if (ev->type == SCHED_EV_DONE) e->done++;
    if (ev->type == SCHED_EV_ERROR) {
        e->error++;
        e->status = ev->status;
        snprintf(e->message, sizeof e->message, "%s", ev->message ? ev->message : "");
    }
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) uv_stop(&e->se.loop);
}

/* The CPU and one test card (tests/scheduler/tcard.h) with faults f. */
static int env_open(env *e, const tcard_faults *f)
{
    memset(e, 0, sizeof *e);
    char err[256];
    if (sched_env_open_cpu(&e->se) < 0 ||
        sched_env_add(&e->se, tcard_open(0, e->se.m, f, err, sizeof err), err) < 0)
        return -1;
    sched_config cfg = {.max_waiting = 64, .max_running = 16};
    return sched_env_start(&e->se, &cfg);
}

static void env_close(env *e)
{
    sched_env_close(&e->se);
}

/* "Once upon a time", prefilled on the CPU and decoded on the card alone (pinned, as `tandem
 * generate --device` pins it: no other device may take it over), to its final event. */
static void run_pinned(env *e, int max_tokens, double deadline_s)
{
    static const int32_t once[] = {1, 403, 407, 261, 378};
    sched_params p = sched_env_greedy(once, 5, max_tokens, 1);
    p.prefill_on = 1u << 0;
    p.decode_on = 1u << 1;
    if (deadline_s > 0) p.deadline = sched_now() + deadline_s;
    sched_req *r;
    char err[256];
    int st = sched_submit(e->se.s, &p, on_event, e, &r, err, sizeof err);
    CHECK_MSG(st == SCHED_OK, "submit: %s", err);
    if (st == SCHED_OK) uv_run(&e->se.loop, UV_RUN_DEFAULT);
}

TEST(sched_status_device_fault_reaches_client_as_500)
{
    /* the card faults on its 3rd decode step: the request has nowhere else to go, and its
     * ERROR event carries the card's own status */
    tcard_faults f = {.decode_fault_at = 3};
    env e;
    if (env_open(&e, &f) < 0) return;
    run_pinned(&e, 20, 0);
    CHECK_EQ(e.done, 0);
    REQUIRE(e.error == 1);
    CHECK_EQ(e.status, ACCEL_ERR_DEVICE);
    CHECK(ACCEL_IS_ERR(e.status) && !SCHED_IS_ERR(e.status) && !PROTO_KV_IS_ERR(e.status));
    CHECK_STR(sched_strerror(e.status), "device failed");
    CHECK_MSG(strstr(e.message, "tcard:0") != NULL, "message: %s", e.message);
    const proto_err_row *row = proto_err_info(sched_status_api_err(e.status));
    CHECK_EQ(row->http_status, 500);
    CHECK_STR(row->code, "device_error");
    env_close(&e);
}

TEST(sched_status_device_timeout_is_not_the_deadline)
{
    /* a card that times out (ACCEL_ERR_TIMEOUT) is a device fault, 500; only the request's own
     * deadline (SCHED_ERR_TIMEOUT) is a 504 */
    tcard_faults f = {.decode_timeout_at = 2};
    env e;
    if (env_open(&e, &f) < 0) return;
    run_pinned(&e, 20, 0);
    REQUIRE(e.error == 1);
    CHECK_EQ(e.status, ACCEL_ERR_TIMEOUT);
    CHECK_STR(sched_strerror(e.status), "device timed out");
    CHECK_EQ(proto_err_info(sched_status_api_err(e.status))->http_status, 500);
    CHECK_STR(proto_err_info(sched_status_api_err(e.status))->code, "device_error");
    env_close(&e);

    tcard_faults slow = {.decode_ms = 40};
    if (env_open(&e, &slow) < 0) return;
    run_pinned(&e, 200, 0.3);
    REQUIRE(e.error == 1);
    CHECK_EQ(e.status, SCHED_ERR_TIMEOUT);
    CHECK(SCHED_IS_ERR(e.status) && !ACCEL_IS_ERR(e.status) && !PROTO_KV_IS_ERR(e.status));
    CHECK_EQ(proto_err_info(sched_status_api_err(e.status))->http_status, 504);
    CHECK_STR(proto_err_info(sched_status_api_err(e.status))->code, "request_timeout");
    env_close(&e);
}

/* scheduler/sched_status.c — the one error space (sched.h, "One error space"): the names of
 * every status, whichever module it comes from, and the API error each one answers. It lives in
 * the scheduler because the scheduler is the one module that sees the three headers whose
 * codes meet in its events (scheduler/accel.h, scheduler/sched.h, proto/kv_wire.h); proto/ may
 * include only proto/ and a backend only accel.h, so neither could name the others' codes. */
#include "scheduler/sched.h"
#include "proto/kv_wire.h"

/* The ranges are negative, disjoint and in this order (tests/scheduler/test_sched_status.c
 * checks every code against them and their names against each other). */
_Static_assert(ACCEL_ERR_RANGE_HI < 0 && ACCEL_ERR_RANGE_LO <= ACCEL_ERR_RANGE_HI, "accel range");
_Static_assert(SCHED_ERR_RANGE_HI < ACCEL_ERR_RANGE_LO && SCHED_ERR_RANGE_LO <= SCHED_ERR_RANGE_HI,
               "the sched range overlaps accel's");
_Static_assert(PROTO_KV_ERR_RANGE_HI < SCHED_ERR_RANGE_LO &&
               PROTO_KV_ERR_RANGE_LO <= PROTO_KV_ERR_RANGE_HI, "the proto_kv range overlaps sched's");
_Static_assert(ACCEL_IS_ERR(ACCEL_ERR_NOMEM) && ACCEL_IS_ERR(ACCEL_ERR_NOT_FOUND), "accel codes");
_Static_assert(SCHED_IS_ERR(SCHED_ERR_QUEUE_FULL) && SCHED_IS_ERR(SCHED_ERR_STOPPED), "sched codes");
_Static_assert(PROTO_KV_IS_ERR(PROTO_KV_ERR_MAGIC) && PROTO_KV_IS_ERR(PROTO_KV_ERR_STATE),
               "proto_kv codes");

static const char *sched_own_strerror(int st)
{
    switch ((enum sched_status)st) { /* over the enum: -Wswitch names a code left out */
    case SCHED_OK: return "ok";
    case SCHED_ERR_QUEUE_FULL: return "the waiting queue is full";
    case SCHED_ERR_INVALID: return "invalid parameters";
    case SCHED_ERR_NO_DEVICE: return "no healthy device";
    case SCHED_ERR_TOO_LARGE: return "the request does not fit any device";
    case SCHED_ERR_TIMEOUT: return "the request's deadline passed";
    case SCHED_ERR_NOMEM: return "out of host memory";
    case SCHED_ERR_STOPPED: return "the scheduler is stopping";
    }
    return "unknown scheduler status";
}

const char *sched_strerror(int st)
{
    if (st == 0) return "ok";
    if (ACCEL_IS_ERR(st)) return accel_strerror(st);
    if (SCHED_IS_ERR(st)) return sched_own_strerror(st);
    if (PROTO_KV_IS_ERR(st)) return proto_kv_wire_strerror(st);
    return "unknown status";
}

enum proto_err sched_status_api_err(int st)
{
    if (st == 0) return PROTO_ERR_NONE;
    if (SCHED_IS_ERR(st)) {
        switch ((enum sched_status)st) {
        case SCHED_OK: return PROTO_ERR_NONE;
        case SCHED_ERR_QUEUE_FULL: return PROTO_ERR_QUEUE_FULL;     /* 429 */
        case SCHED_ERR_INVALID: return PROTO_ERR_INVALID_VALUE;     /* 400 */
        case SCHED_ERR_NO_DEVICE: return PROTO_ERR_NOT_READY;       /* 503 */
        case SCHED_ERR_TOO_LARGE: return PROTO_ERR_CONTEXT_LENGTH;  /* 400 */
        case SCHED_ERR_TIMEOUT: return PROTO_ERR_TIMEOUT;           /* 504: the request's deadline */
        case SCHED_ERR_NOMEM: return PROTO_ERR_INTERNAL;            /* 500 */
        case SCHED_ERR_STOPPED: return PROTO_ERR_NOT_READY;         /* 503 */
        }
        return PROTO_ERR_INTERNAL;
    }
    if (ACCEL_IS_ERR(st)) {
        switch ((enum accel_status)st) {
        case ACCEL_OK: return PROTO_ERR_NONE;
        /* the device's trouble, after the scheduler could move the request no further; a
         * device that timed out is a device fault (500), not the request's deadline (504) */
        case ACCEL_ERR_NOMEM:
        case ACCEL_ERR_DEVICE:
        case ACCEL_ERR_TIMEOUT:
        case ACCEL_ERR_UNSUPPORTED:
        case ACCEL_ERR_CORRUPT:
        case ACCEL_ERR_NOT_FOUND: return PROTO_ERR_DEVICE;          /* 500 device_error */
        /* requests are bounded before they reach a device, and a cancelled one gets no
         * event: either is a bug here */
        case ACCEL_ERR_INVALID:
        case ACCEL_ERR_CANCELLED: return PROTO_ERR_INTERNAL;        /* 500 internal_error */
        }
        return PROTO_ERR_INTERNAL;
    }
    /* the scheduler turns its KV reader's statuses into accel ones before any event (a stream
     * that is not what was shipped is ACCEL_ERR_CORRUPT); should one get through, it is still
     * a failed hand-over between two devices */
    if (PROTO_KV_IS_ERR(st)) return st == PROTO_KV_ERR_NOMEM ? PROTO_ERR_INTERNAL : PROTO_ERR_DEVICE;
    return PROTO_ERR_INTERNAL;
}

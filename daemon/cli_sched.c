/* daemon/cli_sched.c — see cli_sched.h. */
#include "daemon/cli_sched.h"
#include <stdio.h>
#include <stdlib.h>

struct dmn_cli_sched {
    uv_loop_t loop;
    sched *s;
    int warm; /* 0 warming, 1 done */
    /* the request being run */
    sched_event_cb cb;
    void *ctx;
    int done;
};

static void on_warm(void *ctx, int ok)
{
    dmn_cli_sched *c = ctx;
    (void)ok; /* which device failed is read from the statistics */
    c->warm = 1;
    uv_stop(&c->loop);
}

dmn_cli_sched *dmn_cli_sched_new(accel_dev *const *devs, int n, const model_tok *tok,
                                 int fpga_prefill, char *err, size_t errlen)
{
    dmn_cli_sched *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (uv_loop_init(&c->loop)) {
        snprintf(err, errlen, "cannot start an event loop");
        free(c);
        return NULL;
    }
    /* one request, one sequence: nothing waits and nothing is chunked (the prompt is prefilled
     * in one call, as a device alone would) */
    sched_config cfg = {.max_waiting = 1, .max_running = 1, .fpga_prefill = fpga_prefill};
    c->s = sched_new(&c->loop, devs, n, tok, &cfg, on_warm, c, err, errlen);
    if (!c->s) {
        uv_loop_close(&c->loop);
        free(c);
        return NULL;
    }
    while (!c->warm) uv_run(&c->loop, UV_RUN_DEFAULT);
    /* every device must be ready: the flags named each of them for a part of the request */
    sched_stats st;
    sched_get_stats(c->s, &st);
    for (int i = 0; i < st.n_devices; i++)
        if (!st.dev[i].warm) {
            snprintf(err, errlen, "%s: the warm-up step failed", st.dev[i].info.name);
            dmn_cli_sched_free(c);
            return NULL;
        }
    return c;
}

static void on_event(void *ctx, const sched_event *ev)
{
    dmn_cli_sched *c = ctx;
    c->cb(c->ctx, ev);
    if (ev->type == SCHED_EV_DONE || ev->type == SCHED_EV_ERROR) {
        c->done = 1;
        uv_stop(&c->loop);
    }
}

int dmn_cli_sched_run(dmn_cli_sched *c, const sched_params *p, sched_event_cb cb, void *ctx,
                      char *err, size_t errlen)
{
    sched_req *r;
    c->cb = cb;
    c->ctx = ctx;
    c->done = 0;
    int st = sched_submit(c->s, p, on_event, c, &r, err, errlen);
    if (st != SCHED_OK) return st;
    while (!c->done) uv_run(&c->loop, UV_RUN_DEFAULT);
    return SCHED_OK;
}

void dmn_cli_sched_free(dmn_cli_sched *c)
{
    if (!c) return;
    sched_free(c->s);
    uv_run(&c->loop, UV_RUN_DEFAULT); /* the scheduler's close callbacks */
    uv_loop_close(&c->loop);
    free(c);
}

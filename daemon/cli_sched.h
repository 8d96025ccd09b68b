/* daemon/cli_sched.h — `tandem generate` and `tandem chat` as clients of the scheduler that
 * `tandem serve` runs (scheduler/sched.h): the devices the flags name under one scheduler on
 * the command's own libuv loop, one request at a time run to its end, its events handed to the
 * caller as they arrive. So a command takes the very path a request to the daemon takes —
 * placement, prefill, the KV hand-over in the wire format, decode, sampling, stops — and every
 * device combination is exercised by that one path.
 *
 * Threads: the command's thread runs the loop and calls everything here; the events reach the
 * callback on it (during dmn_cli_sched_run). */
#ifndef TANDEM_CLI_SCHED_H
#define TANDEM_CLI_SCHED_H
#include <stddef.h>
#include "scheduler/sched.h"

typedef struct dmn_cli_sched dmn_cli_sched;

/* A scheduler over devs[0..n) (opened by the caller; they outlive it) with room for one
 * request, and tok (may be NULL: ids only, no text) for its text; fpga_prefill as
 * sched_config's. Returns once every device has warmed up. NULL with a message in err (which
 * names the device whose warm-up failed). */
dmn_cli_sched *dmn_cli_sched_new(accel_dev *const *devs, int n, const model_tok *tok,
                                 int fpga_prefill, char *err, size_t errlen);

/* Submits p and runs the loop until the request's last event (SCHED_EV_DONE or
 * SCHED_EV_ERROR), calling cb(ctx, ev) for each event as it arrives. Returns SCHED_OK when the
 * request ran (its last event says how it ended), else sched_submit's status with its message
 * in err. */
int dmn_cli_sched_run(dmn_cli_sched *c, const sched_params *p, sched_event_cb cb, void *ctx,
                      char *err, size_t errlen);

/* Stops the scheduler and closes the loop. NULL is ignored. */
void dmn_cli_sched_free(dmn_cli_sched *c);

#endif

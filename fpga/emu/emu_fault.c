/* fpga/emu/emu_fault.c — the fault-injection spec (TANDEM_EMU_FAULT).
 *
 *   spec   = fault { ";" fault }
 *   fault  = key "=" value { "," key "=" value }
 *   card=N     card index (default 0)
 *   run=N      the N-th xrtRunStart on that card, 1-based (required)
 *   kind=K     hang     the run never completes; the compute unit stays stuck until the card
 *                       is torn down (waits time out, later runs stay queued)
 *              gone     the device disappears when the run would execute: the run aborts, and
 *                       every later call on the card (and any reopen of its index) fails ENODEV
 *              bitflip  before the run executes, one bit of a BO's device copy flips:
 *                       arg=A (default: the first global argument), byte=B (default 0, taken
 *                       modulo the BO size), bit=0..7 (default 0)
 *              error    the run executes but ends in ERT_CMD_STATE_ERROR
 *              late     a slow run: it executes only when a wait on it with a time limit is
 *                       made, and that wait returns TIMEOUT once it has completed (the
 *                       watchdog fired, the run landed anyway: deterministic for tests)
 * Example: TANDEM_EMU_FAULT="card=1,run=5,kind=hang;card=0,run=2,kind=bitflip,byte=4096,bit=3"
 * The spec is read when a card is created (its first open); a bad spec fails that open. */
#include "fpga/emu/emu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!*s || *s == '-' || *s == '+') return -1;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > max) return -1;
    *out = v;
    return 0;
}

int emu_fault_parse(const char *spec, emu_fault *out, int max, char *err, size_t errlen)
{
    char buf[1024];
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, errlen, "longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    int n = 0;
    char *save_f;
    for (char *f = strtok_r(buf, ";", &save_f); f; f = strtok_r(NULL, ";", &save_f)) {
        if (n >= max) {
            snprintf(err, errlen, "more than %d faults", max);
            return -1;
        }
        emu_fault x = {.card = 0, .run = 0, .kind = EMU_FAULT_NONE, .arg = -1};
        char *save_kv;
        for (char *kv = strtok_r(f, ",", &save_kv); kv; kv = strtok_r(NULL, ",", &save_kv)) {
            while (*kv == ' ') kv++;
            char *eq = strchr(kv, '=');
            if (!eq) {
                snprintf(err, errlen, "'%s' is not key=value", kv);
                return -1;
            }
            *eq = 0;
            const char *k = kv, *v = eq + 1;
            uint64_t u;
            int bad = 0;
            if (!strcmp(k, "card")) {
                bad = parse_u64(v, EMU_MAX_CARDS - 1, &u);
                x.card = (int)u;
            } else if (!strcmp(k, "run")) {
                bad = parse_u64(v, UINT64_MAX, &u) || u == 0;
                x.run = u;
            } else if (!strcmp(k, "arg")) {
                bad = parse_u64(v, FPGA_K_MAX_ARGS - 1, &u);
                x.arg = (int)u;
            } else if (!strcmp(k, "byte")) {
                bad = parse_u64(v, UINT64_MAX, &x.byte);
            } else if (!strcmp(k, "bit")) {
                bad = parse_u64(v, 7, &u);
                x.bit = (int)u;
            } else if (!strcmp(k, "kind")) {
                if (!strcmp(v, "hang")) x.kind = EMU_FAULT_HANG;
                else if (!strcmp(v, "gone")) x.kind = EMU_FAULT_GONE;
                else if (!strcmp(v, "bitflip")) x.kind = EMU_FAULT_BITFLIP;
                else if (!strcmp(v, "error")) x.kind = EMU_FAULT_ERROR;
                else if (!strcmp(v, "late"))
                    x.kind = EMU_FAULT_LATE;
                else bad = 1;
            } else {
                snprintf(err, errlen, "unknown key '%s' (card, run, kind, arg, byte, bit)", k);
                return -1;
            }
            if (bad) {
                snprintf(err, errlen, "bad value '%s' for %s", v, k);
                return -1;
            }
        }
        if (!x.run || x.kind == EMU_FAULT_NONE) {
            snprintf(err, errlen,
                     "fault %d needs run=N (N >= 1) and kind=hang|gone|bitflip|error|late", n + 1);
            return -1;
        }
        out[n++] = x;
    }
    return n;
}

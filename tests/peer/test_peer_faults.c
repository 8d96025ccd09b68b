/* A device a node lends failing under a peer's call: the peer gets the status (its scheduler
 * moves the request), and the node says so in its own log, naming the peer, the device, the call
 * and the device's health (peer/server.c peer_server_device_fault) — before, a card that ran past
 * its watchdog for a peer left no line on the node that lent it. Once per failure: a device that
 * had already failed refuses the next calls without a line each. */
#include "devices/devices.h"
#include "peer/peer.h"
#include "tests/fpga/fpga_util.h"
#include "tests/peer/peer_util.h"
#include "tests/test.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_lines[4096];

static void keep_line(int warn, const char *event, const char *msg)
{
    pthread_mutex_lock(&g_mu);
    size_t n = strlen(g_lines);
    snprintf(g_lines + n, sizeof g_lines - n, "%s event=%s %s\n", warn ? "warn" : "info", event,
             msg);
    pthread_mutex_unlock(&g_mu);
}

/* How many lines hold `what`. */
static int logged(const char *what)
{
    pthread_mutex_lock(&g_mu);
    int r = 0;
    for (const char *p = g_lines; (p = strstr(p, what)); p += strlen(what)) r++;
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* The runs an emulated card makes to open and warm up (the faults target the ones after). */
static uint64_t runs_at_warmup(void)
{
    char err[256];
    model *m = model_load(MODEL, err, sizeof err);
    if (!m) return 0;
    accel_opts o = {.weight_bits = 8};
    tf_cache_env();
    accel_dev *probe = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    fpga_emu_card_stats cs = {0};
    if (!probe || accel_warmup(probe) || tf_card_stats(probe, &cs)) cs.runs_started = 0;
    if (probe) accel_free(probe);
    model_free(m);
    return cs.runs_started;
}

/* Node B lends fpga-emu:0 with `kind` injected at its first decode step after the warm-up; node
 * A decodes on it three times: the statuses A gets, and the lines B logs. */
static void fault_through_the_peer(const char *kind, const int want[3], const char *line1,
                                   const char *line2)
{
    uint64_t r0 = runs_at_warmup();
    REQUIRE(r0 > 0);
    char spec[96];
    snprintf(spec, sizeof spec, "card=0,run=%llu,kind=%s", (unsigned long long)r0 + 1, kind);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    setenv("TANDEM_FPGA_TIMEOUT_MS", "300", 1); /* B's card's run watchdog */
    two t;
    if (two_start(&t, "fpga-emu:0")) return;
    g_lines[0] = 0;
    peer_set_log(keep_line);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    float *lg = malloc(sizeof(float) * t.m->cfg.vocab);
    accel_seq *s;
    REQUIRE(accel_seq_new(rd, 16, &s) == 0);
    int32_t id = 1;
    for (int i = 0; i < 3; i++) {
        int st = accel_decode(rd, 1, &s, &id, lg);
        CHECK_MSG(st == want[i], "%s: call %d: status %d, want %d", kind, i, st, want[i]);
    }
    CHECK_MSG(logged(line1) == 1, "%s: node's log:\n%s", kind, g_lines);
    if (line2) CHECK_MSG(logged(line2) == 1, "%s: node's log:\n%s", kind, g_lines);
    CHECK_MSG(logged("event=peer_device_failed") == 1 + (line2 != NULL), "%s: node's log:\n%s",
              kind, g_lines);
    accel_seq_free(rd, s);
    accel_free(rd);
    peer_node_free(node);
    free(lg);
    two_stop(&t);
    peer_set_log(NULL); /* once node B's threads are gone: they log its connections' closes */
}

/* A run that errors fails the card: one line; the calls after it are refused without one. */
TEST(peer_device_fault_logged_on_the_node)
{
    const int want[3] = {ACCEL_ERR_DEVICE, ACCEL_ERR_DEVICE, ACCEL_ERR_DEVICE};
    fault_through_the_peer("error", want,
                           "warn event=peer_device_failed peer=nodeA device=fpga-emu:0 call=decode "
                           "status=\"device failed\" health=failed",
                           NULL);
}

/* A run that hangs: its watchdog (timed out, the card degraded), then the card still stuck at the
 * next call (failed): two lines; the third call says nothing more. */
TEST(peer_device_timeout_logged_on_the_node)
{
    const int want[3] = {ACCEL_ERR_TIMEOUT, ACCEL_ERR_DEVICE, ACCEL_ERR_DEVICE};
    fault_through_the_peer(
        "hang", want,
        "peer=nodeA device=fpga-emu:0 call=decode status=\"device timed out\" health=degraded",
        "peer=nodeA device=fpga-emu:0 call=decode status=\"device failed\" health=failed");
}

/* A KV import whose first card run errors: the chunk that ran into it is named once (call
 * kv_import); the chunks of the run still in flight behind it are refused with the same status
 * and no line (before, each was logged as a corrupt chunk: the reader had failed); node A's
 * import returns the status. */
TEST(peer_device_fault_on_import_logged_once)
{
    uint64_t r0 = runs_at_warmup();
    REQUIRE(r0 > 0);
    char spec[96];
    snprintf(spec, sizeof spec, "card=0,run=%llu,kind=error", (unsigned long long)r0 + 1);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    two t;
    if (two_start(&t, "fpga-emu:0")) return;
    char err[256];
    accel_opts o = {.threads = 1};
    accel_dev *pf = devices_open("cpu", t.m, &o, err, sizeof err);
    REQUIRE(pf);
    int32_t ids[] = {1, 403, 407, 261, 378, 429, 267, 297};
    kvcopy kv = {0};
    int32_t first;
    REQUIRE(prefill_kv(pf, ids, 8, &kv, &first) == 0);
    g_lines[0] = 0;
    peer_set_log(keep_line);
    peer_node *node;
    accel_dev *rd;
    REQUIRE(two_remote(&t, PEER_TRANSPORT_AUTO, &node, &rd) == 0);
    accel_seq *s;
    REQUIRE(accel_seq_new(rd, 16, &s) == 0);
    int st = 0;
    for (int i = 0; i < kv.n && !st; i++) st = accel_kv_import_crc(rd, s, &kv.l[i], kv.crc[i]);
    CHECK_MSG(st == ACCEL_ERR_DEVICE, "status %d", st);
    const char *line = "call=kv_import status=\"device failed\" health=failed";
    CHECK_MSG(logged(line) == 1, "node's log:\n%s", g_lines);
    CHECK_MSG(logged("event=peer_device_failed") == 1, "node's log:\n%s", g_lines);
    CHECK_MSG(!logged("peer_kv_corrupt"), "node's log:\n%s", g_lines);
    accel_seq_free(rd, s);
    accel_free(rd);
    peer_node_free(node);
    for (int i = 0; i < kv.n; i++) free(kv.mem[i]);
    accel_free(pf);
    two_stop(&t);
    peer_set_log(NULL); /* once node B's threads are gone: they log its connections' closes */
}

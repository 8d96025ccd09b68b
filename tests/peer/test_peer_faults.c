/* A device a node lends failing under a peer's call: the peer gets the status (its scheduler
 * moves the request), and the node says so in its own log, naming the peer, the device and the
 * call (peer/server.c peer_server_device_fault) — before, a card that ran past its watchdog for a
 * peer left no line on the node that lent it. Statuses that are the request's (a sequence past
 * its capacity) say nothing. */
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

static int logged(const char *what)
{
    pthread_mutex_lock(&g_mu);
    int r = strstr(g_lines, what) != NULL;
    pthread_mutex_unlock(&g_mu);
    return r;
}

TEST(peer_device_fault_logged_on_the_node)
{
    /* the runs an emulated card makes to open and warm up: the fault goes to the third after */
    char err[256];
    model *m = model_load(MODEL, err, sizeof err);
    REQUIRE(m);
    accel_opts o = {.weight_bits = 8};
    tf_cache_env();
    accel_dev *probe = devices_open("fpga-emu:0", m, &o, err, sizeof err);
    REQUIRE(probe);
    REQUIRE(accel_warmup(probe) == 0);
    fpga_emu_card_stats cs;
    REQUIRE(tf_card_stats(probe, &cs) == 0);
    accel_free(probe);
    model_free(m);
    char spec[96];
    snprintf(spec, sizeof spec, "card=0,run=%llu,kind=error",
             (unsigned long long)cs.runs_started + 3);
    setenv("TANDEM_EMU_FAULT", spec, 1);
    two t;
    if (two_start(&t, "fpga-emu:0")) return;
    g_lines[0] = 0;
    peer_set_log(keep_line);
    peer_node *node;
    REQUIRE(peer_node_connect(t.addr, "nodeA", KEY, t.m, 5, &node, err, sizeof err) == PEER_OK);
    accel_dev *rd = devices_open_remote(node, 0, t.m, NULL, err, sizeof err);
    REQUIRE(rd);
    float *lg = malloc(sizeof(float) * t.m->cfg.vocab);
    accel_seq *s;
    REQUIRE(accel_seq_new(rd, 2, &s) == 0);
    int32_t id = 1;
    /* two steps run; the third is the request's own failure (past the sequence's capacity: no
     * run), and says nothing on the node */
    CHECK_EQ(accel_decode(rd, 1, &s, &id, lg), 0);
    CHECK_EQ(accel_decode(rd, 1, &s, &id, lg), 0);
    CHECK(accel_decode(rd, 1, &s, &id, lg) < 0);
    CHECK_MSG(!logged("peer_device_failed"), "node's log:\n%s", g_lines);
    accel_seq_free(rd, s);
    REQUIRE(accel_seq_new(rd, 16, &s) == 0);
    int st = accel_decode(rd, 1, &s, &id, lg);
    CHECK_MSG(st == ACCEL_ERR_DEVICE, "status %d", st);
    CHECK_MSG(
        logged("warn event=peer_device_failed peer=nodeA device=fpga-emu:0 call=decode status="),
        "node's log:\n%s", g_lines);
    accel_seq_free(rd, s);
    accel_free(rd);
    peer_node_free(node);
    peer_set_log(NULL);
    free(lg);
    two_stop(&t);
    unsetenv("TANDEM_EMU_FAULT");
}

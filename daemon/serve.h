/* daemon/serve.h — the state of one `tandem serve` process, shared by serve.c (lifecycle),
 * api.c (the OpenAI listener) and admin.c (the admin/metrics listener).
 *
 * Everything in dmn_serve is owned and touched by the libuv loop thread only, except the model,
 * tokenizer and devices, which are immutable once loaded (the device workers read them) and are
 * loaded on a libuv thread-pool thread before the loop sees them. */
#ifndef TANDEM_DMN_SERVE_H
#define TANDEM_DMN_SERVE_H
#include <uv.h>
#include "daemon/auth.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "daemon/metrics.h"
#include "model/ckpt/model.h"
#include "model/tmpl/tmpl.h"
#include "model/tok/tokenizer.h"
#include "peer/msg.h"
#include "proto/openai_req.h"
#include "scheduler/sched.h"

#define DMN_VERSION "0.1"
#define DMN_MAX_PEERS 16

/* Exit codes of `tandem serve` (documented in systemd/tandem.service and the README). */
#define DMN_EXIT_OK 0
#define DMN_EXIT_FAILED 1            /* loading, warm-up or listening failed */
#define DMN_EXIT_CONFIG 2            /* bad configuration or flags */
#define DMN_EXIT_DRAIN_TIMEOUT 3     /* stopped with requests still running: they were cancelled */

enum dmn_state {
    DMN_STATE_LOADING,  /* model loading, devices warming up: /ready 503 */
    DMN_STATE_READY,
    DMN_STATE_DRAINING, /* no new requests; in-flight ones finish */
    DMN_STATE_FAILED,   /* loading failed: exiting */
};

typedef struct dmn_api_req dmn_api_req;

typedef struct dmn_serve {
    dmn_config cfg;
    uv_loop_t *loop;
    enum dmn_state state;
    int exiting;        /* SIGTERM drain: exit once idle or at the deadline */
    int warmed;         /* the devices' warm-up ended (on_warm): /admin/resume may make it ready */
    int exit_code;
    double t_start;     /* sched_now() clock */
    long long t_start_unix; /* the wall clock then (seconds): /v1/models' created, read once */
    /* engine, set once loading finished */
    model *m;
    model_tok *tok;
    model_tmpl *tmpl;
    int tmpl_plain;     /* the fallback template: encode its text with the tokenizer's specials */
    int tool_family;    /* enum proto_tool_family: the template's tool-call format */
    accel_dev *devs[SCHED_MAX_DEVICES]; /* local devices, then the peers' (serve_peer.c) */
    int n_devs;
    /* peers (serve_peer.c, peer/peer.h) */
    char node_name[PEER_NAME_MAX + 1];
    char peer_key[1025];
    struct peer_server *peer_srv;
    accel_dev *peer_devs[32];  /* lent to peers: driven by the peer server's thread */
    int n_peer_devs;
    struct peer_node *nodes[DMN_MAX_PEERS];
    int n_nodes;
    unsigned node_opened[DMN_MAX_PEERS]; /* device indices of each node in the scheduler */
    double node_retry_at[DMN_MAX_PEERS]; /* a device that failed to open: tried again then, */
    double node_retry_s[DMN_MAX_PEERS];  /* after this long (doubling from 2 s to 60 s) */
    accel_opts peer_opts;      /* how the peers' devices are opened (a late one too) */
    uv_work_t peer_work;       /* opening a late peer's devices (serve_peer.c) */
    int peer_work_busy;        /* one at a time */
    int peer_work_node;        /* its node */
    accel_dev *peer_new[32];   /* what that work opened, by device index */
    sched *sched;
    char served_name[DMN_SERVED_NAME_MAX + 1];
    proto_limits limits;
    /* listeners */
    dmn_http *api, *admin;
    dmn_auth *auth, *admin_auth;
    dmn_metrics metrics;
    /* in-flight API requests (for /admin/status and the drain) */
    dmn_api_req *reqs;
    int n_reqs;
    /* loop handles */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick;    /* watchdog, STATUS=, drain progress */
    uv_work_t load;
    uint64_t watchdog_usec;
    double drain_deadline;
    double closing_at;  /* shutting down: close the listeners at this time (or when idle) */
    double last_status;
    double last_watchdog;
    int stalled;        /* a device made no progress for watchdog_stall: WATCHDOG=1 withheld */
    double last_probe;  /* the API listener's last self-probe */
    int listener_dead;  /* the API listener failed its self-probes: WATCHDOG=1 withheld */
    char load_err[1024];
} dmn_serve;

/* serve_peer.c: the key and node name (before the secrets are wiped: 0 or -1 with err); the
 * lent devices, listener and peers' devices while loading (errors in load_err); and their
 * release after the engine's devices. */
struct accel_opts;
int dmn_peer_load_key(dmn_serve *d, char *err, size_t errlen);
void dmn_peer_open(dmn_serve *d, const struct accel_opts *opts);
void dmn_peer_close(dmn_serve *d);
/* The loop's tick: a peer that answered since start-up (peer_node_pending) gets its devices
 * opened on the thread pool and added to the scheduler. */
void dmn_peer_tick(dmn_serve *d);

/* api.c */
extern const dmn_http_handler dmn_api_handler; /* ctx: dmn_serve */
/* Cancels every in-flight request (drain deadline, shutdown). */
void dmn_api_cancel_all(dmn_serve *d, const char *why);
/* Fills out[0..max) with the in-flight completion requests; returns how many. The strings point
 * into the requests: use them before returning to the loop. */
struct proto_status_req;
int dmn_api_list(dmn_serve *d, struct proto_status_req *out, int max);

/* admin.c */
extern const dmn_http_handler dmn_admin_handler; /* ctx: dmn_serve */

/* serve.c */
/* Starts a drain: new API requests get 503, /ready 503. exiting: SIGTERM semantics (the
 * process exits once idle or at drain_timeout). */
void dmn_serve_drain(dmn_serve *d, int exiting);
/* Back to ready after an admin drain (not after SIGTERM). Returns 0, or -1 when not possible. */
int dmn_serve_resume(dmn_serve *d);
/* The sequences this node holds for its peers on its lent devices (peer_server_live_seqs): what
 * a drain waits for beside its own requests. 0 when it lends none or is not loaded yet. */
int dmn_serve_lent_seqs(const dmn_serve *d);
const char *dmn_state_name(enum dmn_state s);
/* 1 when a request may be admitted: ready state, the API listener answers its self-probe, and
 * the healthy warm devices can serve (some device prefills and some decode path exists:
 * sched_can_serve); else 0 with the reason in *why (why may be NULL). */
int dmn_serve_can_admit(dmn_serve *d, const char **why);
/* 1 when /ready should say 200 (and tandem_ready be 1): dmn_serve_can_admit, and a new API
 * connection would be taken (dmn_http_slots_free). own: the API slots the asker itself holds,
 * which it frees by being answered (1 for the API listener's own /ready, else 0). */
int dmn_serve_ready(dmn_serve *d, int own, const char **why);
/* Sends an sd_notify message (no-op without NOTIFY_SOCKET) and logs it at debug level. */
void dmn_notify(const char *msg);

/* The `tandem serve` command: returns the exit code. */
int dmn_serve_main(int argc, char **argv);

/* A fresh request id: prefix + 24 characters from a CSPRNG (OpenSSL RAND_bytes). */
void dmn_request_id(char *out, size_t n, const char *prefix);

#endif

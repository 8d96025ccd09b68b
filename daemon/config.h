/* daemon/config.h — `tandem serve` configuration: one table of keys, four layers.
 *
 * Precedence, highest first: command-line flag (--key value, --key=value; dashes or underscores),
 * environment variable TANDEM_<KEY> (upper case), config file (--config FILE, or TANDEM_CONFIG),
 * built-in default. Every key is documented in deploy/tandem.conf.example (a unit test checks
 * that file names every key of the table).
 *
 * File format: one `key = value` per line; '#' starts a comment line; values may be wrapped in
 * double quotes (no escapes); an unknown key is an error that names the line.
 *
 * Ownership: dmn_config owns its strings; dmn_config_deinit frees them. Secrets (api_key,
 * admin_key, peer_key) are wiped with dmn_config_wipe_secrets once the auth module has hashed them.
 * Threads: loaded once on the main thread before anything else starts. */
#ifndef TANDEM_DMN_CONFIG_H
#define TANDEM_DMN_CONFIG_H
#include <stddef.h>
#include "sparse/sparse.h"

typedef struct dmn_config {
    char *config;            /* the file that was read ("" when none) */
    char *model;             /* model directory ("" until dmn_config_resolve_model) */
    char *served_model_name; /* the name clients use ("" -> the model directory's name) */
    char *devices;           /* comma-separated device names, e.g. "cpu" or "cpu,fpga-emu:0" */
    char *gpu_dtype;         /* auto | bf16 | fp16: accel_opts.gpu_half of cuda devices */
    int fpga_emu_pace;       /* emulated cards take the time the timing model says (1) */
    int fpga_run_timeout_ms; /* an FPGA run's watchdog (5000); below watchdog_stall */
    int sparse_prefill;      /* FlexPrefill for long prompts by default (requests may override) */
    double sparse_gamma, sparse_tau;
    int sparse_min_budget, sparse_max_budget, sparse_dense_below;
    char *sparse_mode;       /* flexprefill | xattention | trishape */
    double xattention_threshold;
    int xattention_block_size, xattention_stride;
    int num_retained_start_tokens_in_cache, num_retained_recent_tokens_in_cache;
    int num_last_dense_tokens_in_prefill; /* -1: the method's default */
    char *cache_dir;         /* FPGA weight-image cache ("": $TANDEM_CACHE_DIR, ~/.cache/tandem) */
    int threads;             /* cpu backend threads (0: all cores) */
    long long kv_mem_limit;  /* bytes of KV per device (0: the device's own budget) */
    char *chat_template;     /* a Jinja file overriding the model's template ("": the model's) */
    char *escape_special_tokens; /* untrusted | all | off: model_tok_esc_scope of chat content */
    char *host;
    int port;
    char *admin_host;
    int admin_port;
    char *api_key;
    char *api_key_file;
    char *admin_key;
    char *admin_key_file;
    char *cors_origins;      /* "" | "*" | origins whose pages may call the API (http_cors.h) */
    int admin_metrics_open;  /* /metrics without the admin key (a router scrapes it) */
    int max_waiting;         /* bounded waiting queue: more -> 429 */
    int max_running;         /* sequences one device decodes at once */
    double tbt_budget_ms;    /* prefill work between two decode steps of a device (0: no chunking) */
    double ttft_target_ms;   /* the placement's TTFT target (sched_config.ttft_target_ms; 0: none) */
    int fpga_prefill;        /* FPGAs with prefill kernels may prefill (1) */
    int prefix_cache;        /* automatic prefix caching (1, the default) */
    int host_cache;          /* the prefix cache's host-memory tier (1, the default) */
    long long host_cache_bytes; /* its bytes for the node, shared by the paged devices (0: RAM/8) */
    long long max_body_bytes;
    long long max_header_bytes;
    int max_connections;
    int max_connections_per_ip;
    int connection_timeout;  /* seconds an idle connection is kept */
    int receive_timeout;     /* seconds to receive a request's head and body, in total */
    int max_n;
    int default_max_tokens;  /* chat requests without max_tokens (capped by the context) */
    double request_timeout;  /* seconds from arrival to the last token (0: none) */
    double drain_timeout;    /* seconds SIGTERM waits for in-flight requests */
    double sse_keepalive;    /* seconds of silence before a ": keep-alive" comment */
    int retry_after;         /* seconds, in 429 answers */
    char *log_file;          /* "" -> stderr (the journal under systemd) */
    char *log_level;         /* debug | info | warn | error */
    double watchdog_stall;   /* seconds a busy device may go without progress before WATCHDOG=1 stops */
    double step_delay_ms;    /* testing: sleep before each device step (0 in production) */
    char *gpu_tune;          /* cuda devices' settings, "key=value,..." (accel_opts.gpu_tune) */
    char *decode_sparse;     /* "" | off | asynctls[,key=value...] (accel_opts.decode_sparse) */
    char *node_name;         /* this node among its peers ("": the host name) */
    char *kv_listen;         /* ADDR:PORT peers connect to ("": none) */
    char *peer_devices;      /* devices offered to peers */
    char *peers;             /* ADDR:PORT,... of nodes whose devices we use */
    char *peer_key;          /* the fleet's shared key (wiped with the others) */
    char *peer_key_file;
    char *peer_transport;    /* auto | stream | address (peer/peer.h) */
    double peer_wait;        /* seconds start-up waits for a peer */
    int peer_poll_us;        /* UCX waits busy-poll this long after activity (peer/link.h) */
    int peer_rx_threads;     /* the peer node's receiving threads, 0 auto (peer/peer.h) */
} dmn_config;

/* Fills defaults, then the file, environment and flags (argv[0] is the command name). Returns 0,
 * 1 when --help or --print-config was asked (the help, or the effective configuration in the
 * file's format without the keys, printed to stdout: the caller exits 0), or -1 with a message
 * in err. envp may be NULL (the process environment). */
int dmn_config_load(dmn_config *c, int argc, char **argv, char **envp, char *err, size_t errlen);

/* Just the defaults (tests). */
void dmn_config_defaults(dmn_config *c);
void dmn_config_deinit(dmn_config *c);

/* When c->model is empty, picks the bundled models/stories260K: beside the binary's repository
 * (build/tandem, build/san/tandem) or under the install prefix (bin/../share/tandem/models).
 * Returns 0, or -1 with a message in err. */
/* The sparse prefill parameters of method `mode` (-1: the configured sparse_mode) as this
 * configuration sets them over the method's defaults: what a request that names no member gets.
 * -1 when the configured mode is not a method's name. Not checked (sparse_params_check). */
int dmn_config_sparse(const dmn_config *c, int mode, sparse_params *out);
int dmn_config_resolve_model(dmn_config *c, char *err, size_t errlen);

/* Overwrites and frees api_key and admin_key. */
void dmn_config_wipe_secrets(dmn_config *c);

/* The table, for --help and the documentation test: name of key i, NULL past the end. */
const char *dmn_config_key_name(int i);

/* The longest model name clients may send (served_model_name, or the model directory's name). */
#define DMN_SERVED_NAME_MAX 127

/* The name clients send: served_model_name, else the model directory's last component. Returns
 * 0 with it in out, or -1 with a message in err when it is over DMN_SERVED_NAME_MAX (or out is
 * too small). */
int dmn_config_served_name(const dmn_config *c, char *out, size_t outlen, char *err, size_t errlen);

/* Checks a node name (node_name, or the host name that stands for it; `what` says which, for the
 * message): 1..PEER_NAME_MAX (63) of [A-Za-z0-9._-], and that every device of peer_devices
 * (comma-separated; "" for none) has a name of at most PEER_DEV_NAME_MAX (63), as the peers
 * that use them require: they name it "NAME/device", in at most 127 characters. Returns 0, or
 * -1 with a message in err. */
int dmn_config_check_node_name(const char *name, const char *what, const char *peer_devices,
                               char *err, size_t errlen);

/* Parses "64", "4k", "16M", "1G" (powers of 1024) into bytes. Returns 0 or -1. */
int dmn_config_parse_bytes(const char *s, long long *out);

#endif

/* daemon/config.c — see config.h. */
#include "daemon/config.h"
#include "daemon/http_cors.h"
#include "daemon/model_dir.h"
#include "model/tok/tokenizer.h"
#include "peer/msg.h"
#include "proto/textfile.h"
#include "scheduler/accel.h"
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/crypto.h>

extern char **environ;

enum key_type { KEY_STR, KEY_INT, KEY_DOUBLE, KEY_BYTES };

typedef struct key {
    const char *name;
    enum key_type type;
    size_t off;
    const char *def;
    double lo, hi; /* numeric bounds */
    const char *doc;
} key;

#define K(n, t, d, lo, hi, doc) {#n, t, offsetof(dmn_config, n), d, lo, hi, doc}
/* The defaults are the ones issue 4 names (ports, loopback admin, bundled model, cpu); the limits
 * are sized for one node: see deploy/tandem.conf.example for the reasoning behind each. */
static const key keys[] = {
    K(model, KEY_STR, "", 0, 0, "model directory (default: the bundled stories260K)"),
    K(served_model_name, KEY_STR, "", 0, 0,
      "model name clients send, at most 127 characters (default: directory name)"),
    K(devices, KEY_STR, "cpu,fpga-emu:0,fpga-emu:1", 0, 0,
      "comma-separated devices: cpu, cuda:N, fpga-emu:N, fpga:N"),
    K(gpu_dtype, KEY_STR, "auto", 0, 0,
      "cuda devices compute in auto, bf16 or fp16 (auto: fp16 for float32/float16 checkpoints, "
      "bf16 for bfloat16 ones)"),
    K(fpga_emu_pace, KEY_INT, "1", 0, 1, "1: emulated cards run at the U280 timing model's speed"),
    K(fpga_run_timeout_ms, KEY_INT, "5000", 1, 3600000,
      "an FPGA run's watchdog in milliseconds: a run past it is timed out, the card marked and its "
      "requests moved; must stay below watchdog_stall"),
    K(sparse_prefill, KEY_INT, "0", 0, 1,
      "1: FlexPrefill sparse attention for prompts above the dense threshold unless a request says "
      "otherwise"),
    K(sparse_gamma, KEY_DOUBLE, "0.9", 0.0001, 1, "FlexPrefill attention-mass coverage (gamma)"),
    K(sparse_tau, KEY_DOUBLE, "0.1", 0, 1,
      "FlexPrefill JS-distance threshold for query-aware heads (tau)"),
    K(sparse_min_budget, KEY_INT, "1024", 1, 16777216, "FlexPrefill minimum tokens per pattern"),
    K(sparse_max_budget, KEY_INT, "0", 0, 16777216,
      "FlexPrefill maximum tokens per pattern (0: none)"),
    K(sparse_dense_below, KEY_INT, "-1", -1, 16777216,
      "prompts of at most this many tokens prefill dense (-1: FlexPrefill's rule, max(256, "
      "min_budget rounded up to 128))"),
    K(sparse_mode, KEY_STR, "flexprefill", 0, 0,
      "the sparse prefill method: flexprefill, xattention or trishape (a request's \"mode\" "
      "overrides it)"),
    K(xattention_threshold, KEY_DOUBLE, "0.8", 0.0001, 1,
      "XAttention: the estimated attention mass each query block keeps, (0, 1]"),
    K(xattention_block_size, KEY_INT, "128", 16, 128,
      "XAttention: block size in tokens, 16, 32, 64 or 128"),
    K(xattention_stride, KEY_INT, "8", 1, 128,
      "XAttention: antidiagonal stride, divides the block size"),
    K(num_retained_start_tokens_in_cache, KEY_INT, "128", 0, 1048576,
      "Tri-shape: tokens at the start of the cache a sparse chunk sees (a multiple of 128)"),
    K(num_retained_recent_tokens_in_cache, KEY_INT, "1920", 0, 1048576,
      "Tri-shape: most recent cached tokens a sparse chunk sees (a multiple of 128)"),
    K(num_last_dense_tokens_in_prefill, KEY_INT, "-1", -1, 1048576,
      "the prompt's last tokens that prefill dense (-1: the method's default, 0 for flexprefill, "
      "100 for the others)"),
    K(cache_dir, KEY_STR, "", 0, 0,
      "FPGA weight-image cache directory (default: $TANDEM_CACHE_DIR, else ~/.cache/tandem)"),
    K(threads, KEY_INT, "0", 0, 1024, "cpu backend threads (0: all cores)"),
    K(kv_mem_limit, KEY_BYTES, "0", 0, 9.0e18, "KV bytes per device (0: device budget)"),
    K(chat_template, KEY_STR, "", 0, 0, "Jinja chat template file overriding the model's"),
    K(escape_special_tokens, KEY_STR, "untrusted", 0, 0,
      "special-token strings (\"<|eot_id|>\") in chat content are text, not control tokens: "
      "untrusted (user and tool messages), all (every message) or off (transformers' "
      "apply_chat_template: they are the tokens)"),
    K(host, KEY_STR, "0.0.0.0", 0, 0, "API listener address"),
    K(port, KEY_INT, "8080", 0, 65535, "API listener port"),
    K(admin_host, KEY_STR, "127.0.0.1", 0, 0, "admin/metrics listener address"),
    K(admin_port, KEY_INT, "8090", 0, 65535, "admin/metrics listener port"),
    K(api_key, KEY_STR, "", 0, 0, "API key clients must send as Bearer token"),
    K(api_key_file, KEY_STR, "", 0, 0, "file with API keys, one per line"),
    K(admin_key, KEY_STR, "", 0, 0, "key for the admin listener"),
    K(admin_key_file, KEY_STR, "", 0, 0, "file with admin keys, one per line"),
    K(cors_origins, KEY_STR, "", 0, 0,
      "origins whose web pages may call the API from a browser (CORS): a comma list of "
      "scheme://host[:port], or * for any; empty: none (no CORS headers)"),
    K(admin_metrics_open, KEY_INT, "0", 0, 1,
      "1: /metrics answers without the admin key (a router or Prometheus scraping without "
      "credentials); drain, resume and status still need it"),
    K(max_waiting, KEY_INT, "64", 0, 1000000, "requests waiting for a device before 429"),
    K(max_running, KEY_INT, "16", 1, 4096, "sequences one device decodes at once"),
    K(tbt_budget_ms, KEY_DOUBLE, "50", 0, 60000,
      "prefill time between two decode steps of a device (0: no chunking)"),
    K(ttft_target_ms, KEY_DOUBLE, "0", 0, 600000,
      "time-to-first-token target the scheduler serves: long prompts' decodes go to cards with a "
      "slot while other requests are in the node, and a device prefills the prompts that can still "
      "meet it before those that cannot (0: none, FCFS)"),
    K(fpga_prefill, KEY_INT, "0", 0, 1, "1: FPGAs with prefill kernels may prefill"),
    K(prefix_cache, KEY_INT, "1", 0, 1,
      "1: automatic prefix caching (prompts reuse the KV blocks of earlier ones; a request opts "
      "out with \"cache_prompt\": false)"),
    K(host_cache, KEY_INT, "1", 0, 1,
      "1: prefixes evicted from a device's KV memory are kept in host memory (the host tier)"),
    K(host_cache_bytes, KEY_BYTES, "0", 0, 9.0e18,
      "host-tier bytes of the node in all, shared equally by its paged devices (0: an eighth of "
      "physical memory)"),
    K(max_body_bytes, KEY_BYTES, "4M", 1024, 1 << 30, "largest request body (413 above)"),
    K(max_header_bytes, KEY_BYTES, "64k", 4096, 1 << 24, "per-connection memory for headers"),
    K(max_connections, KEY_INT, "1024", 1, 1000000, "open connections per listener"),
    K(max_connections_per_ip, KEY_INT, "128", 0, 1000000,
      "open connections per client address (0: no limit)"),
    K(connection_timeout, KEY_INT, "60", 1, 86400,
      "seconds an idle connection stays open, and a response its client reads nothing of"),
    K(receive_timeout, KEY_INT, "30", 1, 86400,
      "seconds to receive a request's head and body, in total (408 after)"),
    K(max_n, KEY_INT, "16", 1, 128, "most choices (n) per request"),
    K(default_max_tokens, KEY_INT, "4096", 1, 1 << 24,
      "max_tokens of a chat request that gives none (capped by the context)"),
    K(request_timeout, KEY_DOUBLE, "600", 0, 86400 * 7, "seconds a request may take (0: none)"),
    K(drain_timeout, KEY_DOUBLE, "25", 0, 3600, "seconds SIGTERM waits for in-flight requests"),
    K(sse_keepalive, KEY_DOUBLE, "5", 0.01, 3600,
      "seconds of stream silence before a keep-alive comment"),
    K(retry_after, KEY_INT, "1", 0, 3600, "Retry-After seconds in 429 answers"),
    K(log_file, KEY_STR, "", 0, 0, "log file (default: stderr, i.e. the journal)"),
    K(log_level, KEY_STR, "info", 0, 0, "debug, info, warn or error"),
    K(watchdog_stall, KEY_DOUBLE, "10", 0.1, 86400,
      "seconds a busy device may make no progress before the watchdog stops being fed"),
    K(step_delay_ms, KEY_DOUBLE, "0", 0, 60000, "testing only: sleep before each device step"),
    K(gpu_tune, KEY_STR, "", 0, 0,
      "cuda devices' settings, key=value,... (chunk=N tokens per pass, graphs=0|1)"),
    K(decode_sparse, KEY_STR, "", 0, 0,
      "sparse decode of long contexts: off, or asynctls[,key=value...] (cpu, cuda, fpga; needs "
      "tandem calibrate-channels; the default of the per-request sparse_decode)"),
    K(node_name, KEY_STR, "", 0, 0,
      "this node's name among its peers, in x-tandem-devices as NODE/device (at most 63 "
      "characters, a DNS label's length; default: the host name)"),
    K(kv_listen, KEY_STR, "", 0, 0,
      "ADDR:PORT where peers connect over UCX to decode on peer_devices (empty: none)"),
    K(peer_devices, KEY_STR, "", 0, 0,
      "comma-separated devices this node offers to its peers (not used by its own requests)"),
    K(peers, KEY_STR, "", 0, 0,
      "comma-separated ADDR:PORT of nodes whose devices decode this node's requests"),
    K(peer_key, KEY_STR, "", 0, 0, "the key every node of the fleet shares (16+ characters)"),
    K(peer_key_file, KEY_STR, "", 0, 0, "file holding the peer key (its first line)"),
    K(peer_transport, KEY_STR, "auto", 0, 0,
      "how KV reaches peers: auto (UCX by worker address: shared memory on one host, RDMA where "
      "present; TCP stream where that cannot be made), stream (always TCP), address (that or the "
      "device is not used); UCX_TLS still applies"),
    K(peer_poll_us, KEY_INT, "0", 0, 100000,
      "microseconds the peer link keeps polling UCX (and the KV hand-off to the import thread) "
      "after activity before it sleeps on the event descriptor: a thread busy for at most this "
      "long after each message, none while idle; +3-8 % KV throughput on a quiet 16-core node, "
      "much less on a busy one (0: sleep at once)"),
    K(peer_rx_threads, KEY_INT, "0", 0, 2,
      "threads the peer node's loop takes turns on (KV chunks over shared memory: one's CRC runs "
      "beside the next one's copy, a second core busy while chunks stream; over TCP a chunk stays "
      "on its thread); 0: 2 where the process may run on 8 or more cores, else 1"),
    K(peer_wait, KEY_DOUBLE, "30", 0, 3600,
      "seconds start-up waits for each peer to answer (one still down is retried in the background "
      "and joins when it answers)"),
};
#undef K
#define N_KEYS (sizeof keys / sizeof keys[0])

const char *dmn_config_key_name(int i)
{
    return i >= 0 && (size_t)i < N_KEYS ? keys[i].name : NULL;
}

int dmn_config_parse_bytes(const char *s, long long *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return -1;
    double mul = 1;
    switch (tolower((unsigned char)*end)) {
    case 0: break;
    case 'k': mul = 1024.0, end++; break;
    case 'm': mul = 1024.0 * 1024, end++; break;
    case 'g': mul = 1024.0 * 1024 * 1024, end++; break;
    case 't': mul = 1024.0 * 1024 * 1024 * 1024, end++; break;
    default: return -1;
    }
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return -1;
    v *= mul;
    if (v > 9.0e18) return -1;
    *out = (long long)v;
    return 0;
}

/* Sets key k from text; "where" names the source for the error message. */
static int set_key(dmn_config *c, const key *k, const char *val, const char *where, char *err,
                   size_t errlen)
{
    void *p = (char *)c + k->off;
    char *end;
    switch (k->type) {
    case KEY_STR: {
        char *d = strdup(val);
        if (!d) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        char **sp = p;
        if (*sp) {
            OPENSSL_cleanse(*sp, strlen(*sp));
            free(*sp);
        }
        *sp = d;
        return 0;
    }
    case KEY_INT: {
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (!*val || *end || errno || v < k->lo || v > k->hi) {
            snprintf(err, errlen, "%s: %s must be an integer in [%.0f, %.0f], got '%.64s'", where,
                     k->name, k->lo, k->hi, val);
            return -1;
        }
        *(int *)p = (int)v;
        return 0;
    }
    case KEY_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (!*val || *end || errno || !isfinite(v) || v < k->lo || v > k->hi) {
            snprintf(err, errlen, "%s: %s must be a number in [%g, %g], got '%.64s'", where, k->name,
                     k->lo, k->hi, val);
            return -1;
        }
        *(double *)p = v;
        return 0;
    }
    case KEY_BYTES: {
        long long v;
        if (dmn_config_parse_bytes(val, &v) < 0 || v < k->lo || v > k->hi) {
            snprintf(err, errlen, "%s: %s must be a size like 64k, 4M or 1G in [%.0f, %.0f] bytes, got '%.64s'",
                     where, k->name, k->lo, k->hi, val);
            return -1;
        }
        *(long long *)p = v;
        return 0;
    }
    }
    return -1;
}

/* Finds a key by name; dashes match underscores (flags use dashes). */
static const key *find_key(const char *name, size_t n)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const char *k = keys[i].name;
        if (strlen(k) != n) continue;
        size_t j = 0;
        for (; j < n; j++) {
            char a = name[j] == '-' ? '_' : name[j];
            if (a != k[j]) break;
        }
        if (j == n) return &keys[i];
    }
    return NULL;
}

void dmn_config_defaults(dmn_config *c)
{
    memset(c, 0, sizeof *c);
    char err[256];
    for (size_t i = 0; i < N_KEYS; i++) set_key(c, &keys[i], keys[i].def, "default", err, sizeof err);
    c->config = strdup("");
}

void dmn_config_wipe_secrets(dmn_config *c)
{
    char err[256];
    set_key(c, find_key("api_key", 7), "", "wipe", err, sizeof err);
    set_key(c, find_key("admin_key", 9), "", "wipe", err, sizeof err);
    set_key(c, find_key("peer_key", 8), "", "wipe", err, sizeof err);
}

void dmn_config_deinit(dmn_config *c)
{
    dmn_config_wipe_secrets(c);
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].type == KEY_STR) free(*(char **)((char *)c + keys[i].off));
    free(c->config);
    memset(c, 0, sizeof *c);
}

/* A config file is small text; 1 MiB bounds it well above any real one, 4 KiB a line. */
#define CONFIG_FILE_MAX (1 << 20)
#define CONFIG_LINE_MAX 4096

static int load_file(dmn_config *c, const char *path, char *err, size_t errlen)
{
    char *text, why[160];
    size_t n;
    if (proto_textfile_read(path, CONFIG_FILE_MAX, &text, &n, why, sizeof why) < 0) {
        snprintf(err, errlen, "config file %s: %s", path, why);
        return -1;
    }
    char where[PATH_MAX + 32];
    int lineno = 0, rc = 0;
    for (char *line = text, *next; rc == 0 && line < text + n; line = next) {
        lineno++;
        char *nl = memchr(line, '\n', (size_t)(text + n - line));
        next = nl ? nl + 1 : text + n;
        size_t len = (size_t)((nl ? nl : text + n) - line);
        line[len] = 0;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        if (len >= CONFIG_LINE_MAX) {
            snprintf(err, errlen, "%s: line too long (at most %d bytes)", where,
                     CONFIG_LINE_MAX - 1);
            rc = -1;
            break;
        }
        while (len && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s: expected 'key = value'", where);
            rc = -1;
            break;
        }
        char *kend = eq;
        while (kend > s && isspace((unsigned char)kend[-1])) kend--;
        char *v = eq + 1;
        while (isspace((unsigned char)*v)) v++;
        size_t vlen = strlen(v);
        if (vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"') {
            v[vlen - 1] = 0;
            v++;
        }
        const key *k = find_key(s, (size_t)(kend - s));
        if (!k) {
            snprintf(err, errlen, "%s: unknown key '%.*s'", where, (int)(kend - s), s);
            rc = -1;
            break;
        }
        if (set_key(c, k, v, where, err, errlen) < 0) rc = -1;
    }
    proto_textfile_free(text, n); /* wiped: the file may hold keys */
    return rc;
}

static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static void env_name(const char *key, char *out, size_t n)
{
    size_t o = (size_t)snprintf(out, n, "TANDEM_");
    for (; *key && o + 1 < n; key++) out[o++] = (char)toupper((unsigned char)*key);
    out[o] = 0;
}

static void print_help(void)
{
    printf("usage: tandem serve [--config FILE] [--print-config] [--key value ...]\n\n"
           "Every key below can be set in the config file, as TANDEM_<KEY> in the environment, or\n"
           "as --key (dashes or underscores); a flag beats the environment, which beats the file.\n"
           "--print-config prints the configuration these layers give, in the file's format, and\n"
           "exits (keys are not shown).\n\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", keys[i].name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        /* a doc that explains its default itself ("default: the bundled ...") is not given a
         * second one */
        if (strstr(keys[i].doc, "(default:")) printf("  %-26s %s\n", flag, keys[i].doc);
        else printf("  %-26s %s (default: %s)\n", flag, keys[i].doc, keys[i].def[0] ? keys[i].def : "none");
    }
}

static int is_secret(const key *k)
{
    return !strcmp(k->name, "api_key") || !strcmp(k->name, "admin_key") || !strcmp(k->name, "peer_key");
}

/* The effective configuration in the file's format (a file that reads back the same), secrets
 * left out: what `tandem serve --print-config` shows, and what `make run` reads its port from. */
static void print_config(const dmn_config *c)
{
    printf("# tandem serve: the configuration from %s, the environment and the flags\n",
           c->config[0] ? c->config : "the defaults");
    for (size_t i = 0; i < N_KEYS; i++) {
        const key *k = &keys[i];
        const void *p = (const char *)c + k->off;
        switch (k->type) {
        case KEY_STR: {
            const char *v = *(char *const *)p;
            if (is_secret(k)) printf("# %s is %s\n", k->name, v[0] ? "set (not shown)" : "not set");
            else printf("%s = \"%s\"\n", k->name, v);
            break;
        }
        case KEY_INT: printf("%s = %d\n", k->name, *(const int *)p); break;
        case KEY_DOUBLE: printf("%s = %.15g\n", k->name, *(const double *)p); break;
        case KEY_BYTES: printf("%s = %lld\n", k->name, *(const long long *)p); break;
        }
    }
}

/* cors_origins (daemon/http_cors.h): "", "*", or a comma list of at most DMN_CORS_MAX_ORIGINS
 * origins as browsers send them in Origin: scheme://host[:port], no path, no default port (a
 * browser leaves :443 out of an https origin, so "https://a:443" would never match). Returns 0,
 * or -1 with a message naming the origin in err. */
static int check_cors_origins(const char *list, char *err, size_t errlen)
{
    static const char form[] = "scheme://host[:port], e.g. https://app.example.com";
    const char *p = list;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return 0;
    int n = 0;
    /* every element, the empty one after a trailing comma too */
    for (;;) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        const char *s = p;
        while (s < end && (*s == ' ' || *s == '\t')) s++;
        const char *e = end;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
        int len = (int)(e - s);
        if (++n > DMN_CORS_MAX_ORIGINS) {
            snprintf(err, errlen, "cors_origins lists more than %d origins", DMN_CORS_MAX_ORIGINS);
            return -1;
        }
        if (!len) {
            snprintf(err, errlen, "cors_origins has an empty origin (a stray comma?)");
            return -1;
        }
        if (len == 1 && *s == '*') {
            if (n > 1 || comma) {
                snprintf(err, errlen, "cors_origins: '*' (any origin) stands alone, not in a list");
                return -1;
            }
            return 0;
        }
        if (len > DMN_CORS_ORIGIN_MAX) {
            snprintf(err, errlen, "cors_origins: an origin of %d characters, at most %d", len,
                     DMN_CORS_ORIGIN_MAX);
            return -1;
        }
        if (len == 4 && !strncasecmp(s, "null", 4)) {
            snprintf(err, errlen,
                     "cors_origins: 'null' is the origin of sandboxed frames and local "
                     "files, which any page can take; list real origins");
            return -1;
        }
        /* scheme */
        const char *q = s;
        if (!isalpha((unsigned char)*q)) goto bad;
        while (q < e && (isalnum((unsigned char)*q) || *q == '+' || *q == '-' || *q == '.')) q++;
        size_t scheme = (size_t)(q - s);
        if (e - q < 3 || memcmp(q, "://", 3) != 0) goto bad;
        q += 3;
        /* host: a name or an IPv6 literal in brackets */
        const char *host = q;
        if (q < e && *q == '[') {
            q++;
            while (q < e && (isxdigit((unsigned char)*q) || *q == ':' || *q == '.')) q++;
            if (q >= e || *q != ']' || q == host + 1) goto bad;
            q++;
        } else {
            while (q < e && (isalnum((unsigned char)*q) || *q == '-' || *q == '.' || *q == '_'))
                q++;
            if (q == host) goto bad;
        }
        /* port */
        if (q < e && *q == ':') {
            const char *d = ++q;
            long port = 0;
            while (q < e && isdigit((unsigned char)*q) && q - d < 6)
                port = port * 10 + (*q++ - '0');
            if (q == d || *d == '0' || port > 65535) goto bad;
            if ((scheme == 4 && !strncasecmp(s, "http", 4) && port == 80) ||
                (scheme == 5 && !strncasecmp(s, "https", 5) && port == 443)) {
                snprintf(err, errlen,
                         "cors_origins: '%.*s' names its scheme's default port, which "
                         "browsers leave out of Origin: write it without",
                         len, s);
                return -1;
            }
        }
        if (q < e && *q == '/') {
            snprintf(err, errlen,
                     "cors_origins: '%.*s' has a path; an origin is %s (no trailing "
                     "'/')",
                     len, s, form);
            return -1;
        }
        if (q != e) goto bad;
        if (!comma) return 0;
        p = comma + 1;
        continue;
    bad:
        snprintf(err, errlen, "cors_origins: '%.*s' is not an origin: %s%s", len, s, form,
                 memchr(s, '*', (size_t)len) ? " (no wildcards: list each origin)" : "");
        return -1;
    }
}

int dmn_config_load(dmn_config *c, int argc, char **argv, char **envp, char *err, size_t errlen)
{
    if (!envp) envp = environ;
    dmn_config_defaults(c);
    /* The config file's path first: --config beats TANDEM_CONFIG. */
    const char *path = env_get(envp, "TANDEM_CONFIG");
    int print = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help();
            return 1;
        }
        if (!strcmp(argv[i], "--print-config")) {
            print = 1;
        } else if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--config needs a file");
                return -1;
            }
            path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            path = argv[i] + 9;
        }
    }
    if (path && *path) {
        free(c->config);
        c->config = strdup(path);
        if (load_file(c, path, err, errlen) < 0) return -1;
    }
    for (size_t i = 0; i < N_KEYS; i++) {
        char name[96], where[128];
        env_name(keys[i].name, name, sizeof name);
        const char *v = env_get(envp, name);
        snprintf(where, sizeof where, "environment %s", name);
        if (v && set_key(c, &keys[i], v, where, err, errlen) < 0) return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s' (tandem serve --help lists the flags)", a);
            return -1;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const char *v = eq ? eq + 1 : NULL;
        if (n == 6 && !strncmp(a, "config", 6)) {
            if (!v) i++;
            continue;
        }
        if (!strcmp(a, "print-config")) continue;
        const key *k = find_key(a, n);
        if (!k) {
            snprintf(err, errlen, "unknown flag '--%.*s' (tandem serve --help lists the flags)", (int)n, a);
            return -1;
        }
        if (!v) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%.*s needs a value", (int)n, a);
                return -1;
            }
            v = argv[++i];
        }
        char where[96];
        snprintf(where, sizeof where, "flag --%.*s", (int)n, a);
        if (set_key(c, k, v, where, err, errlen) < 0) return -1;
    }
    /* Checked once here, whichever layer set it, so that a typo stops start-up before loading. */
    enum accel_gpu_half half;
    if (accel_gpu_half_parse(c->gpu_dtype, &half) < 0) {
        snprintf(err, errlen, "gpu_dtype must be auto, bf16 or fp16, got '%.64s'", c->gpu_dtype);
        return -1;
    }
    if (model_tok_esc_scope_parse(c->escape_special_tokens) < 0) {
        snprintf(err, errlen, "escape_special_tokens must be untrusted, all or off, got '%.64s'",
                 c->escape_special_tokens);
        return -1;
    }
    if (check_cors_origins(c->cors_origins, err, errlen) < 0) return -1;
    /* The sparse method's parameters as a request without its own would get them. */
    sparse_params sp;
    const char *bad;
    char why[160];
    if (dmn_config_sparse(c, -1, &sp) < 0) {
        snprintf(err, errlen, "sparse_mode must be flexprefill, xattention or trishape, got '%.64s'",
                 c->sparse_mode);
        return -1;
    }
    if (sparse_params_check(&sp, why, sizeof why, &bad)) {
        int flex = !strcmp(bad, "gamma") || !strcmp(bad, "tau") || !strcmp(bad, "min_budget") ||
                   !strcmp(bad, "max_budget") || !strcmp(bad, "dense_below") || !strcmp(bad, "mode");
        snprintf(err, errlen, "%s%s: %s", flex ? "sparse_" : "", bad, why);
        return -1;
    }
    /* A hung card must time out (and its requests move) before systemd's watchdog restarts the
     * whole service. Only matters when cards are configured. */
    if (strstr(c->devices, "fpga") && c->fpga_run_timeout_ms >= c->watchdog_stall * 1000) {
        snprintf(err, errlen, "fpga_run_timeout_ms (%d) must be below watchdog_stall (%g s): a hung "
                 "card would get the service restarted before its requests can move",
                 c->fpga_run_timeout_ms, c->watchdog_stall);
        return -1;
    }
    if (strlen(c->served_model_name) > DMN_SERVED_NAME_MAX) {
        snprintf(err, errlen,
                 "served_model_name is %zu characters: at most %d (a longer name could "
                 "not be matched by the requests that send it)",
                 strlen(c->served_model_name), DMN_SERVED_NAME_MAX);
        return -1;
    }
    /* the host name (the default) is checked when it is read: only a node with peers uses it;
     * peer_devices are lent only with kv_listen */
    if (c->node_name[0] &&
        dmn_config_check_node_name(c->node_name, "node_name",
                                   c->kv_listen[0] ? c->peer_devices : "", err, errlen))
        return -1;
    if (print) {
        print_config(c);
        return 1;
    }
    return 0;
}

/* The name a device of peer_devices reports (accel_info.name), from its spec: "cpu", or
 * "kind:N" with N as a number ("fpga-emu" is "fpga-emu:0", "cuda:01" is "cuda:1"), as the
 * backends name themselves (cpu/backend.c, gpu/accel.c, fpga/backend.c). A spec that does not
 * parse counts as written: opening it fails later with the device module's message. */
static size_t lent_name_len(const char *spec, size_t n)
{
    const char *colon = memchr(spec, ':', n);
    size_t klen = colon ? (size_t)(colon - spec) : n;
    if (klen == 3 && !memcmp(spec, "cpu", 3) && !colon) return 3;
    long index = 0;
    if (colon) {
        char digits[16];
        size_t dn = n - klen - 1;
        if (dn == 0 || dn >= sizeof digits) return n;
        memcpy(digits, colon + 1, dn);
        digits[dn] = 0;
        char *end;
        index = strtol(digits, &end, 10);
        if (*end || index < 0) return n;
    }
    char num[24];
    return klen + 1 + (size_t)snprintf(num, sizeof num, "%ld", index);
}

int dmn_config_check_node_name(const char *name, const char *what, const char *peer_devices,
                               char *err, size_t errlen)
{
    /* A peer names this node's devices "NODE/device" in accel_info.name: a node name or a lent
     * device's name longer than the device list carries is refused by every node that would use
     * them (peer/msg.c), so it is refused here, at start-up, rather than leaving the devices
     * unusable while both nodes look healthy. */
    _Static_assert(PEER_NAME_MAX + 1 + PEER_DEV_NAME_MAX <= ACCEL_NAME_MAX, "NODE/device fits");
    size_t n = strlen(name);
    if (n > PEER_NAME_MAX) {
        snprintf(err, errlen,
                 "%s '%.72s%s' is %zu characters: at most %d, a DNS label's length (set "
                 "node_name to a shorter name unique in the fleet)",
                 what, name, n > 72 ? "..." : "", n, PEER_NAME_MAX);
        return -1;
    }
    if (!peer_name_valid(name)) {
        snprintf(err, errlen, "%s '%s': 1 to %d of A-Z a-z 0-9 . _ -", what, name, PEER_NAME_MAX);
        return -1;
    }
    for (const char *p = peer_devices; *p;) {
        p += strspn(p, ", ");
        size_t len = strcspn(p, ", ");
        if (!len) break;
        size_t l = lent_name_len(p, len);
        if (l > PEER_DEV_NAME_MAX) {
            snprintf(err, errlen,
                     "peer_devices '%.*s%s' is a device name of %zu characters: a lent device's "
                     "name may have at most %d (its peers name it %s/device, in at most %d)",
                     len > 72 ? 72 : (int)len, p, len > 72 ? "..." : "", l, PEER_DEV_NAME_MAX, name,
                     PEER_NAME_MAX + 1 + PEER_DEV_NAME_MAX);
            return -1;
        }
        p += len;
    }
    return 0;
}

int dmn_config_served_name(const dmn_config *c, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *name = c->served_model_name;
    size_t n = strlen(name);
    if (!n) { /* the model directory's last component, trailing slashes left out */
        const char *m = c->model;
        size_t end = strlen(m);
        while (end > 1 && m[end - 1] == '/') end--;
        size_t start = end;
        while (start > 0 && m[start - 1] != '/') start--;
        name = m + start;
        n = end - start;
    }
    if (n > DMN_SERVED_NAME_MAX || n + 1 > outlen) {
        snprintf(err, errlen,
                 "the model directory's name is %zu characters, a served model name at "
                 "most %d: set served_model_name",
                 n, DMN_SERVED_NAME_MAX);
        return -1;
    }
    memcpy(out, name, n);
    out[n] = 0;
    return 0;
}

int dmn_config_resolve_model(dmn_config *c, char *err, size_t errlen)
{
    if (c->model[0]) {
        if (dmn_is_model_dir(c->model)) return 0;
        snprintf(err, errlen, "model directory %s has no config.json", c->model);
        return -1;
    }
    char dir[PATH_MAX];
    if (dmn_bundled_model(dir, sizeof dir) != 0) {
        snprintf(err, errlen, "no --model given and the bundled models/stories260K was not found near %s", dir);
        return -1;
    }
    free(c->model);
    c->model = strdup(dir);
    return c->model ? 0 : -1;
}

int dmn_config_sparse(const dmn_config *c, int mode, sparse_params *out)
{
    if (mode < 0) mode = sparse_mode_parse(c->sparse_mode);
    if (mode < 0) return -1;
    sparse_params_default(out, mode);
    out->flex.gamma = (float)c->sparse_gamma;
    out->flex.tau = (float)c->sparse_tau;
    out->flex.min_budget = c->sparse_min_budget;
    out->flex.max_budget = c->sparse_max_budget;
    out->flex.dense_below = c->sparse_dense_below;
    out->xattention_threshold = c->xattention_threshold;
    out->xattention_block_size = c->xattention_block_size;
    out->xattention_stride = c->xattention_stride;
    out->num_retained_start_tokens_in_cache = c->num_retained_start_tokens_in_cache;
    out->num_retained_recent_tokens_in_cache = c->num_retained_recent_tokens_in_cache;
    if (c->num_last_dense_tokens_in_prefill >= 0)
        out->num_last_dense_tokens_in_prefill = c->num_last_dense_tokens_in_prefill;
    return 0;
}

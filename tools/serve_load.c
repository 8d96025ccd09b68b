/* tools/serve_load.c — closed-loop streaming load on a running `tandem serve`: C clients, each
 * keeping one streamed /v1/completions request in flight (a new connection per request), until
 * N requests have finished. Per request it records the time to the first SSE data event (TTFT),
 * the time per output token after it (TPOT = (last - first) / (completion_tokens - 1), the count
 * from the usage chunk) and the decode device named by x-tandem-devices. Prints one summary
 * line: throughput (generated tokens / wall time), TTFT and TPOT p50/p99, and how many requests
 * each decode device served.
 *
 *   serve_load --port P [--host 127.0.0.1] [--clients C] [--requests N] [--max-tokens M]
 *              [--ids "1,403,407"] [--golden DIR]   (DIR: cycle through its cases' ids)
 *
 * Bounds: C <= 256, N <= 1000000, a response is read up to 4 MiB. */
#include "scheduler/accel.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 256
#define MAX_BODY (4 << 20)
#define MAX_PROMPTS 64
/* x-tandem-devices names devices whole: up to ACCEL_NAME_MAX (a peer's "NODE/device") */
#define STR(x)  #x
#define XSTR(x) STR(x)

typedef struct result {
    double ttft, tpot;
    int tokens, ok;
    char decode[ACCEL_NAME_MAX + 1];
} result;

static const char *host = "127.0.0.1";
static int port, n_requests = 64, max_tokens = 64;
static char *prompts[MAX_PROMPTS];
static int n_prompts;
static result *results;
static int next_req, done_reqs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int one_request(int k, result *r)
{
    memset(r, 0, sizeof *r);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    char body[8192], req[9000];
    snprintf(body, sizeof body,
             "{\"prompt\":[%s],\"max_tokens\":%d,\"temperature\":0,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}}",
             prompts[k % n_prompts], max_tokens);
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     host, strlen(body), body);
    double t0 = now();
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char *buf = malloc(MAX_BODY + 1);
    size_t len = 0, scanned = 0;
    double t_first = 0, t_last = 0;
    int done = 0;
    while (buf && len < MAX_BODY && !done) {
        ssize_t got = read(fd, buf + len, MAX_BODY - len);
        if (got <= 0) break;
        double t = now();
        len += (size_t)got;
        buf[len] = 0;
        /* data events that arrived in this read */
        char *p = buf + scanned;
        while ((p = strstr(p, "data: "))) {
            if (!strncmp(p + 6, "[DONE]", 6)) {
                done = 1;
                break;
            }
            if (p[6] == '{' && strstr(p, "\"choices\":[{")) {
                if (!t_first) t_first = t;
                t_last = t;
            }
            p += 6;
        }
        scanned = len > 16 ? len - 16 : 0;
    }
    close(fd);
    if (!buf) return -1;
    char *dev = strstr(buf, "x-tandem-devices: ");
    if (!dev) dev = strstr(buf, "X-Tandem-Devices: ");
    char *dec = dev ? strstr(dev, "decode=") : NULL;
    if (dec) sscanf(dec + 7, "%" XSTR(ACCEL_NAME_MAX) "[^;\r\n]", r->decode);
    char *u = strstr(buf, "\"completion_tokens\":");
    if (u) r->tokens = atoi(u + 20);
    r->ok = done && !strncmp(buf, "HTTP/1.1 200", 12) && !strstr(buf, "\"error\"") && r->tokens > 0;
    r->ttft = t_first - t0;
    r->tpot = r->tokens > 1 ? (t_last - t_first) / (r->tokens - 1) : 0;
    free(buf);
    return r->ok ? 0 : -1;
}

static void *client(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        int k = next_req < n_requests ? next_req++ : -1;
        pthread_mutex_unlock(&mu);
        if (k < 0) return NULL;
        one_request(k, &results[k]);
        pthread_mutex_lock(&mu);
        done_reqs++;
        pthread_mutex_unlock(&mu);
    }
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmpd);
    double pos = p / 100 * (n - 1);
    int i = (int)pos;
    return i >= n - 1 ? v[n - 1] : v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* the "ids" array of every *.json case in dir, as "1,2,3" text (jq-free: the array is flat) */
static void load_golden(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && n_prompts < MAX_PROMPTS) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        static char text[1 << 20];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        char *p = strstr(text, "\"ids\"");
        char *lb = p ? strchr(p, '[') : NULL, *rb = lb ? strchr(lb, ']') : NULL;
        if (!lb || !rb || rb - lb > 8000) continue;
        prompts[n_prompts] = strndup(lb + 1, (size_t)(rb - lb - 1));
        if (prompts[n_prompts]) n_prompts++;
    }
    if (d) closedir(d);
}

int main(int argc, char **argv)
{
    int clients = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port")) port = atoi(v);
        else if (!strcmp(k, "--host")) host = v;
        else if (!strcmp(k, "--clients")) clients = atoi(v);
        else if (!strcmp(k, "--requests")) n_requests = atoi(v);
        else if (!strcmp(k, "--max-tokens")) max_tokens = atoi(v);
        else if (!strcmp(k, "--ids") && n_prompts < MAX_PROMPTS) prompts[n_prompts++] = strdup(v);
        else if (!strcmp(k, "--golden")) load_golden(v);
        else {
            fprintf(stderr, "serve_load: unknown option %s\n", k);
            return 2;
        }
    }
    if (port <= 0 || port > 65535 || clients < 1 || clients > MAX_CLIENTS || n_requests < 1 ||
        n_requests > 1000000 || max_tokens < 1 || max_tokens > 1 << 20) {
        fprintf(stderr, "usage: serve_load --port P [--clients 1..%d] [--requests N] [--max-tokens M] [--ids LIST | --golden DIR]\n", MAX_CLIENTS);
        return 2;
    }
    if (!n_prompts) prompts[n_prompts++] = strdup("1,403,407,261,378");
    results = calloc((size_t)n_requests, sizeof *results);
    pthread_t th[MAX_CLIENTS];
    double t0 = now();
    for (int i = 0; i < clients; i++) pthread_create(&th[i], NULL, client, NULL);
    for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
    double wall = now() - t0;
    double *ttft = calloc((size_t)n_requests, sizeof *ttft), *tpot = calloc((size_t)n_requests, sizeof *tpot);
    int ok = 0, nt = 0;
    long tokens = 0;
    char devs[16][ACCEL_NAME_MAX + 1];
    int dev_n[16] = {0}, n_devs = 0;
    for (int i = 0; i < n_requests; i++) {
        result *r = &results[i];
        if (!r->ok) continue;
        ttft[ok++] = r->ttft;
        if (r->tokens > 1) tpot[nt++] = r->tpot;
        tokens += r->tokens;
        int j = 0;
        while (j < n_devs && strcmp(devs[j], r->decode)) j++;
        if (j == n_devs && n_devs < 16) snprintf(devs[n_devs++], sizeof devs[0], "%s", r->decode);
        if (j < 16) dev_n[j]++;
    }
    printf("clients %d requests %d ok %d wall_s %.3f tokens %ld tok_per_s %.1f req_per_s %.2f "
           "ttft_p50_ms %.3f ttft_p99_ms %.3f tpot_p50_ms %.3f tpot_p99_ms %.3f decode",
           clients, n_requests, ok, wall, tokens, tokens / wall, ok / wall, pct(ttft, ok, 50) * 1e3,
           pct(ttft, ok, 99) * 1e3, pct(tpot, nt, 50) * 1e3, pct(tpot, nt, 99) * 1e3);
    for (int j = 0; j < n_devs; j++) printf(" %s=%d", devs[j], dev_n[j]);
    printf("\n");
    return ok == n_requests ? 0 : 1;
}

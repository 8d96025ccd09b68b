/* tools/sched_bench.c — the scheduler driven in-process, without HTTP: closed-loop clients each
 * keep one completion request in flight (same prompt, greedy, max_tokens N) for a while; prints
 * "requests_per_second p50_ms p99_ms". bench/serve_bench.sh compares it with the same request
 * through `tandem serve` to get the daemon's added latency.
 *
 *   sched_bench [--model DIR] [--clients C] [--seconds S] [--max-tokens N] [--prompt TEXT]
 *               [--threads T] [--max-running R] */
#include "model/ckpt/model.h"
#include "devices/devices.h"
#include "model/tok/tokenizer.h"
#include "scheduler/sched.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench {
    sched *s;
    sched_params p;
    double t_end;
    double *lat;
    int n_lat, cap_lat, inflight, warm;
    uv_loop_t *loop;
} bench;

typedef struct client {
    bench *b;
    sched_req *r;
    double t0;
} client;

static void submit(client *c);

static void on_event(void *ctx, const sched_event *ev)
{
    client *c = ctx;
    bench *b = c->b;
    if (ev->type != SCHED_EV_DONE && ev->type != SCHED_EV_ERROR) return;
    if (ev->type == SCHED_EV_ERROR) fprintf(stderr, "sched_bench: error %s\n", ev->message);
    if (b->n_lat == b->cap_lat) {
        b->cap_lat = b->cap_lat ? b->cap_lat * 2 : 1024;
        b->lat = realloc(b->lat, sizeof(double) * (size_t)b->cap_lat);
    }
    b->lat[b->n_lat++] = sched_now() - c->t0;
    b->inflight--;
    if (sched_now() < b->t_end) submit(c);
    else if (b->inflight == 0) sched_free(b->s);
}

static void submit(client *c)
{
    char err[256];
    c->t0 = sched_now();
    if (sched_submit(c->b->s, &c->b->p, on_event, c, &c->r, err, sizeof err) != SCHED_OK) {
        fprintf(stderr, "sched_bench: submit: %s\n", err);
        exit(1);
    }
    c->b->inflight++;
}

static client *clients;
static int n_clients = 1;
static double seconds = 5;

static void on_warm(void *ctx, int ok)
{
    bench *b = ctx;
    if (!ok) {
        fprintf(stderr, "sched_bench: warm-up failed\n");
        exit(1);
    }
    b->t_end = sched_now() + seconds;
    for (int i = 0; i < n_clients; i++) {
        clients[i].b = b;
        submit(&clients[i]);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *dir = "models/stories260K", *prompt = "Once upon a time";
    int max_tokens = 8, threads = 0, max_running = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--clients")) n_clients = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-tokens")) max_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) prompt = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-running")) max_running = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: sched_bench [--model DIR] [--clients C] [--seconds S] [--max-tokens N] [--prompt TEXT] [--threads T] [--max-running R]\n");
            return 2;
        }
    }
    if (n_clients < 1 || n_clients > 4096 || max_tokens < 1) return 2;
    char err[512];
    model *m = model_load(dir, err, sizeof err);
    model_tok *tok = m ? model_tok_load_dir(dir, err, sizeof err) : NULL;
    if (!m || !tok) {
        fprintf(stderr, "sched_bench: %s\n", err);
        return 1;
    }
    accel_opts opts = {0};
    opts.threads = threads;
    accel_dev *dev = devices_open("cpu", m, &opts, err, sizeof err);
    if (!dev) {
        fprintf(stderr, "sched_bench: %s\n", err);
        return 1;
    }
    int32_t *ids;
    size_t n_ids;
    if (model_tok_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids) < 0) return 1;
    uv_loop_t loop;
    uv_loop_init(&loop);
    bench b = {0};
    b.loop = &loop;
    b.p.prompt = ids;
    b.p.n_prompt = (int)n_ids;
    b.p.max_tokens = max_tokens;
    b.p.n = 1;
    b.p.sampling = model_sampling_default();
    b.p.sampling.temperature = 0;
    clients = calloc((size_t)n_clients, sizeof *clients);
    /* as the daemon in bench/serve_bench.sh: a deep queue, the same batch limit */
    sched_config sc = {.max_waiting = 4096, .max_running = max_running, .tbt_budget_ms = 50};
    b.s = sched_new(&loop, &dev, 1, tok, &sc, on_warm, &b, err, sizeof err);
    if (!b.s) {
        fprintf(stderr, "sched_bench: %s\n", err);
        return 1;
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    qsort(b.lat, (size_t)b.n_lat, sizeof(double), cmp);
    double p50 = b.n_lat ? b.lat[b.n_lat / 2] : 0, p99 = b.n_lat ? b.lat[(int)(b.n_lat * 0.99)] : 0;
    printf("%.1f %.3f %.3f\n", b.n_lat / seconds, p50 * 1e3, p99 * 1e3);
    free(b.lat);
    free(clients);
    free(ids);
    accel_free(dev);
    model_tok_free(tok);
    model_free(m);
    return 0;
}

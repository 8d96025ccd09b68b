/* bench_sample — sampling time per token (model/sample.h) at real vocabulary sizes.
 *
 *   build/bench_sample [seconds-per-case [case-substring]]      (default 0.3, every case)
 *
 * Rows of logits are N(0, 3^2) (drawn with our own generator, so every run sees the same rows),
 * either as is ("flat": top-p 0.9 then keeps thousands of tokens) or with the top token raised by
 * 10 ("peaked": the usual shape of a confident next-token distribution). Sixteen rows rotate so the
 * cache sees a new row each token, as it would after a forward pass. Nothing in these paths
 * rewrites finite logits, so rows are reused without copying. Prints a markdown table of
 * microseconds per sampled token. */
#include "model/sample/rng.h"
#include "model/sample/sample.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROWS = 16 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fill(float *l, int n, uint64_t seed, int peaked)
{
    model_rng r;
    model_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        double u1 = model_rng_uniform(&r), u2 = model_rng_uniform(&r);
        l[i] = (float)(3.0 * sqrt(-2 * log(1 - u1)) * cos(6.283185307179586 * u2));
    }
    if (peaked) {
        int top = 0;
        for (int i = 1; i < n; i++)
            if (l[i] > l[top]) top = i;
        l[top] += 10.0f;
    }
}

/* Microseconds per token for p over the rows, or -1 when p is rejected. */
static double bench(const model_sampling *p, int vocab, float **rows, double seconds)
{
    char err[256];
    model_sampler *s = model_sampler_new(p, vocab, NULL, 0, 0, err, sizeof err);
    if (!s) {
        fprintf(stderr, "bench_sample: %s\n", err);
        return -1;
    }
    model_logprobs lp;
    model_logprobs *lpp = p->logprobs ? &lp : NULL;
    long n = 0;
    volatile int32_t sink = 0;
    for (int i = 0; i < ROWS; i++) sink += model_sampler_sample(s, rows[i], lpp); /* warm up */
    double t0 = now(), t;
    do {
        for (int i = 0; i < ROWS; i++) sink += model_sampler_sample(s, rows[i], lpp);
        n += ROWS;
        t = now();
    } while (t - t0 < seconds);
    (void)sink;
    model_sampler_free(s);
    return (t - t0) / n * 1e6;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.3;
    if (!(seconds > 0 && seconds <= 60)) {
        fprintf(stderr, "usage: bench_sample [seconds-per-case (0..60]]\n");
        return 2;
    }
    const int vocabs[] = {32000, 128256};
    struct {
        const char *name;
        model_sampling p;
    } cases[6];
    for (int i = 0; i < 6; i++) cases[i].p = model_sampling_default();
    cases[0].name = "greedy";
    cases[0].p.temperature = 0;
    cases[1].name = "temperature 1 (no truncation)";
    cases[2].name = "top-p 0.9";
    cases[2].p.top_p = 0.9f;
    cases[3].name = "top-k 40";
    cases[3].p.top_k = 40;
    cases[4].name = "top-k 40 + top-p 0.9 + min-p 0.05";
    cases[4].p.top_k = 40;
    cases[4].p.top_p = 0.9f;
    cases[4].p.min_p = 0.05f;
    cases[5].name = "top-p 0.9 + logprobs (5 top)";
    cases[5].p.top_p = 0.9f;
    cases[5].p.logprobs = 1;
    cases[5].p.top_logprobs = 5;

    printf("| case | vocab | flat (us/token) | peaked (us/token) |\n|---|---|---|---|\n");
    const char *only = argc > 2 ? argv[2] : NULL;
    for (int c = 0; c < 6; c++)
        for (int v = 0; v < 2; v++) {
            if (only && !strstr(cases[c].name, only)) continue;
            int V = vocabs[v];
            double us[2];
            for (int peaked = 0; peaked < 2; peaked++) {
                float *rows[ROWS];
                for (int i = 0; i < ROWS; i++) {
                    rows[i] = malloc((size_t)V * sizeof(float));
                    if (!rows[i]) return 1;
                    fill(rows[i], V, 1000 + (uint64_t)i, peaked);
                }
                us[peaked] = bench(&cases[c].p, V, rows, seconds);
                for (int i = 0; i < ROWS; i++) free(rows[i]);
            }
            printf("| %s | %d | %.1f | %.1f |\n", cases[c].name, V, us[0], us[1]);
            fflush(stdout);
        }
    return 0;
}

/* Two GPUs in one process (a node with several GPUs opens one device per GPU: `--devices
 * cuda:0,cuda:1`). Each device's engine must run on its own GPU whichever thread calls it: the
 * daemon's scheduler drives each device from its own thread, and a call that left the thread's
 * current CUDA device on the other GPU would launch there with this GPU's pointers.
 *
 *   gpu_two_devices  an mkmodel GQA head_dim-128 checkpoint opened on cuda:0 and cuda:1: the same
 *                    prompts prefilled and decoded (single rows and a batch of 3) with the calls
 *                    alternating between the devices on one thread, then each device decoding on
 *                    a thread of its own at the same time (a new thread's current CUDA device is
 *                    GPU 0: cuda:1's calls must select theirs).
 *                    Every step's logits on cuda:1 equal cuda:0's within the random-weight
 *                    models' bound (0.05, tests/gpu/README.md; the same kernels, but each engine
 *                    times its own variants) with the same greedy token, and each device's
 *                    threaded steps equal its own sequential ones bit for bit (one engine's
 *                    kernels are deterministic). Skipped where fewer than two GPUs are visible. */
#include "devices/devices.h"
#include "tests/gpu/gpu_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HD128                                                                                      \
    "--hidden 512 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 768 "            \
    "--vocab 2000 --max-pos 4096"
#define PROMPT 300 /* prompt tokens */
#define STEPS  24  /* decode steps of each run */
#define ROWS   4   /* sequences per device: one decoded alone, three as a batch */

/* One device's sequences and the logits of every step of a run (STEPS x ROWS x V). */
typedef struct two_dev {
    accel_dev *d;
    accel_seq *s[ROWS];
    const int32_t *ids; /* PROMPT + STEPS: the prompt, then the tokens fed */
    int V;
    float *lg;
    int rc;
} two_dev;

static int two_prefill(two_dev *t)
{
    for (int r = 0; r < ROWS; r++) {
        accel_prefill_req q = {.seq = t->s[r], .ids = t->ids, .n = PROMPT - 7 * r, .logits = t->lg};
        int st = accel_prefill(t->d, &q);
        if (st) return st;
    }
    return 0;
}

/* Step k of a run: row 0 alone, rows 1..3 as a batch; each row's logits at lg[k][row]. */
static int two_step(two_dev *t, int k)
{
    float *o = t->lg + (size_t)k * ROWS * t->V;
    int32_t id = t->ids[PROMPT + k];
    int st = accel_decode(t->d, 1, &t->s[0], &id, o);
    if (st) return st;
    int32_t ids[ROWS - 1];
    for (int r = 1; r < ROWS; r++) ids[r - 1] = t->ids[PROMPT + (k + r) % STEPS];
    return accel_decode(t->d, ROWS - 1, &t->s[1], ids, o + t->V);
}

static void *two_run(void *arg)
{
    two_dev *t = arg;
    for (int k = 0; k < STEPS && !t->rc; k++) t->rc = two_step(t, k);
    return NULL;
}

/* cuda:1's logits against cuda:0's, step by step: the worst |diff| and the rows whose greedy
 * token differs. */
static void two_compare(const float *a, const float *b, int V, double *worst, int *argmax_off)
{
    for (int i = 0; i < STEPS * ROWS; i++) {
        const float *x = a + (size_t)i * V, *y = b + (size_t)i * V;
        int ax = 0, ay = 0;
        for (int v = 0; v < V; v++) {
            double d = x[v] > y[v] ? x[v] - y[v] : y[v] - x[v];
            if (d > *worst || d != d) *worst = d;
            if (x[v] > x[ax]) ax = v;
            if (y[v] > y[ay]) ay = v;
        }
        *argmax_off += ax != ay;
    }
}

TEST(gpu_two_devices)
{
    char why[600];
    if (!devices_present("cuda:1", why, sizeof why)) SKIP("two GPUs needed: %s", why);
    char dir[512];
    REQUIRE(t_mkmodel(HD128, "two128", dir, sizeof dir) == 0);
    char err[512];
    model *m = model_load(dir, err, sizeof err);
    if (!m) t_fail(__FILE__, __LINE__, "model_load: %s", err);
    REQUIRE(m);
    const int V = m->cfg.vocab;
    int32_t *ids = tg_ids(PROMPT + STEPS, V, 21);
    two_dev t[2];
    const char *names[2] = {"cuda:0", "cuda:1"};
    for (int i = 0; i < 2; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].d = devices_open(names[i], m, NULL, err, sizeof err);
        if (!t[i].d) t_fail(__FILE__, __LINE__, "devices_open(%s): %s", names[i], err);
        REQUIRE(t[i].d);
        t[i].ids = ids, t[i].V = V;
        t[i].lg = malloc(sizeof(float) * STEPS * ROWS * V);
        REQUIRE(t[i].lg);
        for (int r = 0; r < ROWS; r++) REQUIRE(accel_seq_new(t[i].d, 4096, &t[i].s[r]) == 0);
    }
    /* 1. one thread, the calls alternating between the devices */
    for (int i = 0; i < 2; i++) REQUIRE(two_prefill(&t[i]) == 0);
    for (int k = 0; k < STEPS; k++)
        for (int i = 0; i < 2; i++) REQUIRE(two_step(&t[i], k) == 0);
    double worst = 0;
    int off = 0;
    two_compare(t[0].lg, t[1].lg, V, &worst, &off);
    CHECK_MSG(worst <= 0.05 && off == 0,
              "alternating: cuda:1 off cuda:0 by %.3g, %d greedy tokens differ", worst, off);
    fprintf(stderr, "  two devices, alternating: max |logit diff| cuda:1 vs cuda:0 %.3g\n", worst);

    /* 2. each device on a thread of its own, both at once, the same steps again (the sequences
     * truncated back to their prompts): each equal to its own sequential steps bit for bit */
    float *seq_lg[2];
    for (int i = 0; i < 2; i++) {
        seq_lg[i] = t[i].lg;
        t[i].lg = malloc(sizeof(float) * STEPS * ROWS * V);
        REQUIRE(t[i].lg);
        for (int r = 0; r < ROWS; r++)
            REQUIRE(accel_seq_truncate(t[i].d, t[i].s[r], PROMPT - 7 * r) == 0);
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, two_run, &t[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(t[i].rc == 0, "%s on a thread of its own: status %d", names[i], t[i].rc);
        CHECK_MSG(t[i].rc || memcmp(t[i].lg, seq_lg[i], sizeof(float) * STEPS * ROWS * V) == 0,
                  "%s on a thread of its own: its logits differ from its sequential steps",
                  names[i]);
    }
    for (int i = 0; i < 2; i++) {
        for (int r = 0; r < ROWS; r++) accel_seq_free(t[i].d, t[i].s[r]);
        accel_free(t[i].d);
        free(t[i].lg);
        free(seq_lg[i]);
    }
    model_free(m);
    free(ids);
}

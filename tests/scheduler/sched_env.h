/* tests/scheduler/sched_env.h — the environment the scheduler's tests run it in: stories260K
 * (model and tokenizer), the real devices a test opens (the CPU backend, the test cards of
 * tcard.h, the FPGA emulator), and a scheduler over them on a real libuv loop. A test keeps its
 * own per-request records and event callback; it counts final events here. */
#ifndef TANDEM_TESTS_SCHED_ENV_H
#define TANDEM_TESTS_SCHED_ENV_H
#include "model/tok/tokenizer.h"
#include "scheduler/sched.h"

#define SCHED_ENV_MODEL "models/stories260K"
#define SCHED_ENV_MAX_DEVS 4

typedef struct sched_env {
    uv_loop_t loop;
    model *m;
    model_tok *tok;
    accel_dev *devs[SCHED_ENV_MAX_DEVS]; /* in the scheduler's order */
    int n_devs;
    sched *s;
    int warm;         /* 1 once warm, -1 if the warm-up failed */
    int finals, want; /* final events counted, and the count sched_env_final stops the loop at */
} sched_env;

/* Zeroes e and loads stories260K's model and tokenizer; 0, or -1 after reporting a failure. */
int sched_env_load(sched_env *e);
/* Zeroes e, loads stories260K and opens the CPU backend (2 threads) as the first device. */
int sched_env_open_cpu(sched_env *e);
/* Appends d (a device just opened; NULL: its opening failed with err) to e->devs; 0, or -1
 * after reporting a failure. */
int sched_env_add(sched_env *e, accel_dev *d, const char *err);
/* A scheduler over e->devs with cfg on a fresh loop, run until warm; 0, or -1 after reporting a
 * failure. */
int sched_env_start(sched_env *e, const sched_config *cfg);
/* Counts one final event (DONE or ERROR); stops the loop once e->want are counted. */
void sched_env_final(sched_env *e);
/* Runs the loop until `want` final events are counted in all. */
void sched_env_run(sched_env *e, int want);
/* Frees the scheduler and checks what it leaves: the loop closes (every handle closed: a test's
 * own handles must be closed first), and on every device no sequence, no prefix holder, no KV
 * block in use, all memory free. Frees the devices, the tokenizer and the model. */
void sched_env_close(sched_env *e);
/* Appends a TOKEN event's text to text (cap bytes, *len of them used, kept NUL-terminated); text
 * that does not fit is dropped. */
void sched_env_text(char *text, size_t cap, size_t *len, const sched_event *ev);
/* A greedy request (temperature 0) for ids of max_tokens tokens and n choices. */
sched_params sched_env_greedy(const int32_t *ids, int n, int max_tokens, int choices);

#endif

/* The scheduler tests' environment (sched_env.h). */
#include "tests/scheduler/sched_env.h"
#include "tests/test.h"
#include "tests/util.h"
#include "devices/devices.h"

int sched_env_load(sched_env *e)
{
    memset(e, 0, sizeof *e);
    char err[512];
    e->m = model_load(SCHED_ENV_MODEL, err, sizeof err);
    e->tok = e->m ? model_tok_load_dir(SCHED_ENV_MODEL, err, sizeof err) : NULL;
    if (!e->tok) {
        t_fail(__FILE__, __LINE__, "stories260K: %s", err);
        return -1;
    }
    return 0;
}

int sched_env_open_cpu(sched_env *e)
{
    if (sched_env_load(e) < 0) return -1;
    char err[512];
    accel_opts o = {.threads = 2};
    return sched_env_add(e, devices_open("cpu", e->m, &o, err, sizeof err), err);
}

int sched_env_add(sched_env *e, accel_dev *d, const char *err)
{
    if (!d || e->n_devs == SCHED_ENV_MAX_DEVS) {
        t_fail(__FILE__, __LINE__, "device %d: %s", e->n_devs, d ? "too many" : err);
        accel_free(d);
        return -1;
    }
    e->devs[e->n_devs++] = d;
    return 0;
}

static void on_warm(void *ctx, int ok)
{
    sched_env *e = ctx;
    e->warm = ok ? 1 : -1;
    uv_stop(&e->loop);
}

int sched_env_start(sched_env *e, const sched_config *cfg)
{
    char err[256];
    uv_loop_init(&e->loop);
    e->s = sched_new(&e->loop, e->devs, e->n_devs, e->tok, cfg, on_warm, e, err, sizeof err);
    if (!e->s) {
        t_fail(__FILE__, __LINE__, "sched_new: %s", err);
        return -1;
    }
    uv_run(&e->loop, UV_RUN_DEFAULT); /* until warm */
    if (e->warm != 1) {
        t_fail(__FILE__, __LINE__, "warm-up failed");
        return -1;
    }
    return 0;
}

void sched_env_final(sched_env *e)
{
    if (++e->finals >= e->want) uv_stop(&e->loop);
}

void sched_env_run(sched_env *e, int want)
{
    e->want = want;
    if (e->finals < want) uv_run(&e->loop, UV_RUN_DEFAULT);
}

void sched_env_close(sched_env *e)
{
    sched_free(e->s);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&e->loop), 0); /* every handle closed */
    for (int i = 0; i < e->n_devs; i++) {
        accel_info info;
        accel_get_info(e->devs[i], &info);
        CHECK_MSG(info.n_seqs == 0 && info.n_holders == 0 && info.kv_blocks_used == 0 &&
                      info.mem_free == info.mem_total,
                  "%s: %d sequences, %d holders, %d KV blocks left; %llu of %llu bytes free",
                  info.name, info.n_seqs, info.n_holders, info.kv_blocks_used,
                  (unsigned long long)info.mem_free, (unsigned long long)info.mem_total);
        accel_free(e->devs[i]);
    }
    model_tok_free(e->tok);
    model_free(e->m);
}

void sched_env_text(char *text, size_t cap, size_t *len, const sched_event *ev)
{
    if (*len + ev->text_len < cap) {
        memcpy(text + *len, ev->text, ev->text_len);
        *len += ev->text_len;
        text[*len] = 0;
    }
}

sched_params sched_env_greedy(const int32_t *ids, int n, int max_tokens, int choices)
{
    sched_params p = {0};
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.n = choices;
    p.sampling = model_sampling_default();
    p.sampling.temperature = 0;
    return p;
}

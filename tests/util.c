#include "tests/util.h"
#include "tests/test.h"
#include "devices/devices.h"
#include "devices/tls_calib.h"
#include "proto/kv_wire.h"
#include <jansson.h>
#include <stdint.h>
#include <sys/wait.h>

int t_open(const char *model_dir, const char *device, model **m, accel_dev **d)
{
    char err[512];
    *m = model_load(model_dir, err, sizeof err);
    if (!*m) {
        t_fail(__FILE__, __LINE__, "model_load(%s): %s", model_dir, err);
        return -1;
    }
    accel_opts o = {.threads = 2};
    *d = devices_open(device, *m, &o, err, sizeof err);
    if (!*d) {
        t_fail(__FILE__, __LINE__, "devices_open(%s): %s", device, err);
        model_free(*m);
        return -1;
    }
    return 0;
}

float *t_prefill_all(accel_dev *d, const int32_t *ids, int n)
{
    int vocab = accel_model(d)->cfg.vocab;
    float *lg = malloc((size_t)n * vocab * sizeof(float));
    accel_seq *s;
    int st = accel_seq_new(d, n, &s);
    if (st || !lg) {
        t_fail(__FILE__, __LINE__, "seq_new: %s", accel_strerror(st));
        free(lg);
        return NULL;
    }
    for (int done = 0; done < n;) {
        int k = n - done < 256 ? n - done : 256;
        accel_prefill_req r = {.seq = s, .ids = ids + done, .n = k,
                               .logits = lg + (size_t)done * vocab, .all_logits = 1};
        if ((st = accel_prefill(d, &r))) {
            t_fail(__FILE__, __LINE__, "prefill: %s", accel_strerror(st));
            free(lg);
            lg = NULL;
            break;
        }
        done += k;
    }
    accel_seq_free(d, s);
    return lg;
}

int32_t t_argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int32_t *t_greedy(accel_dev *d, const int32_t *ids, int n, int steps)
{
    int vocab = accel_model(d)->cfg.vocab;
    float *lg = malloc(vocab * sizeof(float));
    int32_t *out = malloc((steps + 1) * sizeof *out);
    accel_seq *s = NULL;
    int st = accel_seq_new(d, n + steps, &s);
    if (!st) {
        accel_prefill_req r = {.seq = s, .ids = ids, .n = n, .logits = lg};
        st = accel_prefill(d, &r);
    }
    for (int k = 0; !st && k < steps; k++) {
        out[k] = t_argmax(lg, vocab);
        if (k + 1 < steps) st = accel_decode(d, 1, &s, &out[k], lg);
    }
    accel_seq_free(d, s);
    free(lg);
    if (st) {
        t_fail(__FILE__, __LINE__, "greedy: %s", accel_strerror(st));
        free(out);
        return NULL;
    }
    return out;
}

double t_logsumexp(const float *x, int n)
{
    double mx = x[0], s = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) s += exp(x[i] - mx);
    return mx + log(s);
}

float t_bf16_round(float f)
{
    return model_bf16_to_f32(model_f32_to_bf16(f));
}

double t_max_abs_diff(const float *a, const float *b, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > w || d != d) w = d != d ? INFINITY : d;
    }
    return w;
}

char *t_read_file(const char *path, size_t *len)
{
    return model_read_file(path, 64u << 20, len);
}

int t_write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    size_t w = fwrite(data, 1, n, fp);
    return (fclose(fp) == 0 && w == n) ? 0 : -1;
}

const char *t_build_dir(void)
{
    const char *b = getenv("BUILD");
    return b && *b ? b : "build";
}

proto_kv_layer t_kv_copy(const proto_kv_layer *c, void **mem)
{
    size_t vb = proto_kv_value_bytes(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    size_t sb = 2 * proto_kv_scale_count(c->dtype, c->n_tokens, c->n_kv_heads, c->head_dim);
    uint8_t *b = malloc(2 * vb + 2 * sb);
    proto_kv_layer o = *c;
    *mem = b;
    if (!b) return o;
    memcpy(b, c->k, vb);
    memcpy(b + vb, c->v, vb);
    if (sb) memcpy(b + 2 * vb, c->k_scale, sb), memcpy(b + 2 * vb + sb, c->v_scale, sb);
    o.k = b, o.v = b + vb;
    o.k_scale = (const uint16_t *)(b + 2 * vb), o.v_scale = (const uint16_t *)(b + 2 * vb + sb);
    return o;
}

int t_mkmodel(const char *args, const char *name, char *dir, size_t n)
{
    char cmd[2048];
    snprintf(dir, n, "%s/%s", t_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "%s/mkmodel --out %s %s", t_build_dir(), dir, args);
    if (system(cmd) == 0) return 0;
    fprintf(stderr, "  %s failed\n", cmd);
    return -1;
}

int t_open_mkmodel(const char *args, const char *device, model **m, accel_dev **d)
{
    char dir[512];
    if (t_mkmodel(args, "m", dir, sizeof dir)) {
        t_fail(__FILE__, __LINE__, "mkmodel %s", args);
        return -1;
    }
    return t_open(dir, device, m, d);
}

int t_run(const char *cmd, char *err, size_t errlen)
{
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1 >/dev/null", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    char line[1024];
    if (err && errlen) err[0] = 0;
    while (fgets(line, sizeof line, p))
        if (err && !err[0]) snprintf(err, errlen, "%s", line);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

json_t *t_eval_stories(const char *args)
{
    char cmd[1024], buf[4096];
    snprintf(cmd, sizeof cmd,
             "%s/tandem eval --model models/stories260K --golden tests/data/golden/stories260K %s",
             t_build_dir(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    if (pclose(p) != 0) return NULL;
    return json_loads(buf, 0, NULL);
}

accel_sparse t_flex_sparse(float gamma, float tau, int min_budget, int max_budget, int dense_below)
{
    accel_sparse sp;
    sparse_params_default(&sp.p, SPARSE_MODE_FLEX);
    sp.p.flex.gamma = gamma;
    sp.p.flex.tau = tau;
    sp.p.flex.min_budget = min_budget;
    sp.p.flex.max_budget = max_budget;
    sp.p.flex.dense_below = dense_below;
    return sp;
}

const char *t_tls_channels(const model *m, const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
    devices_tls_calib_opts o;
    devices_tls_calib_opts_default(&o);
    o.n_seqs = 2;
    o.len = 64;
    o.channels = 4;
    model_channels ch;
    char err[256];
    if (devices_tls_calibrate(m, &o, &ch, err, sizeof err)) {
        t_fail(__FILE__, __LINE__, "calibrate: %s", err);
        return NULL;
    }
    int rc = model_channels_save(path, &ch, err, sizeof err);
    model_channels_free(&ch);
    if (rc) t_fail(__FILE__, __LINE__, "save %s: %s", path, err);
    return rc ? NULL : path;
}

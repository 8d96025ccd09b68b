/* model/ckpt/golden.c — see golden.h. */
#include "model/ckpt/golden.h"
#include "model/ckpt/model.h"
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GOLDEN_JSON (64u << 20)
#define MAX_IDS (1 << 20)

void model_golden_free(model_golden *g)
{
    if (!g) return;
    free(g->ids);
    free(g->top_ids);
    free(g->top_logits);
    free(g->logsumexp);
    free(g->greedy_ids);
    free(g->greedy_text);
    free(g->last_logits);
    free(g->all_logits);
    free(g);
}

static int int_array(json_t *a, int32_t **out, int *n)
{
    if (!json_is_array(a) || json_array_size(a) > MAX_IDS) return -1;
    *n = (int)json_array_size(a);
    *out = malloc((*n ? *n : 1) * sizeof **out);
    if (!*out) return -1;
    for (int i = 0; i < *n; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e)) return -1;
        (*out)[i] = (int32_t)json_integer_value(e);
    }
    return 0;
}

static float *read_f32(const char *dir, const char *name, size_t count, char *err, size_t errlen)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    char *buf = model_read_file(path, count * 4, &len);
    if (!buf || len != count * 4) {
        snprintf(err, errlen, "%s: expected %zu float32 values", path, count);
        free(buf);
        return NULL;
    }
    float *f = malloc(len ? len : 4);
    if (f) memcpy(f, buf, len);
    free(buf);
    return f;
}

model_golden *model_golden_load(const char *path, int vocab, char *err, size_t errlen)
{
    model_golden *g = calloc(1, sizeof *g);
    char *text = model_read_file(path, MAX_GOLDEN_JSON, NULL);
    json_t *root = NULL;
    if (!g || !text) {
        snprintf(err, errlen, "%s: cannot read", path);
        goto fail;
    }
    json_error_t je;
    root = json_loads(text, 0, &je);
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: invalid JSON (%s)", path, je.text);
        goto fail;
    }
    g->vocab = vocab;
    json_t *name = json_object_get(root, "name");
    snprintf(g->name, sizeof g->name, "%s", json_is_string(name) ? json_string_value(name) : "?");
    if (int_array(json_object_get(root, "ids"), &g->ids, &g->n_ids) || g->n_ids == 0) {
        snprintf(err, errlen, "%s: bad ids", path);
        goto fail;
    }
    json_t *pos = json_object_get(root, "positions");
    json_t *tk = json_object_get(root, "topk");
    g->topk = json_is_integer(tk) ? (int)json_integer_value(tk) : 0;
    if (!json_is_array(pos) || (int)json_array_size(pos) != g->n_ids || g->topk <= 0 ||
        g->topk > 1024) {
        snprintf(err, errlen, "%s: positions/topk do not match ids", path);
        goto fail;
    }
    g->top_ids = malloc((size_t)g->n_ids * g->topk * sizeof *g->top_ids);
    g->top_logits = malloc((size_t)g->n_ids * g->topk * sizeof *g->top_logits);
    g->logsumexp = malloc((size_t)g->n_ids * sizeof *g->logsumexp);
    if (!g->top_ids || !g->top_logits || !g->logsumexp) goto fail;
    for (int p = 0; p < g->n_ids; p++) {
        json_t *e = json_array_get(pos, p);
        json_t *ti = json_object_get(e, "top_ids"), *tl = json_object_get(e, "top_logits");
        json_t *ls = json_object_get(e, "logsumexp");
        if (!json_is_array(ti) || !json_is_array(tl) || (int)json_array_size(ti) != g->topk ||
            (int)json_array_size(tl) != g->topk || !json_is_number(ls)) {
            snprintf(err, errlen, "%s: bad position %d", path, p);
            goto fail;
        }
        for (int k = 0; k < g->topk; k++) {
            g->top_ids[(size_t)p * g->topk + k] = (int32_t)json_integer_value(json_array_get(ti, k));
            g->top_logits[(size_t)p * g->topk + k] = (float)json_number_value(json_array_get(tl, k));
        }
        g->logsumexp[p] = (float)json_number_value(ls);
    }
    if (int_array(json_object_get(root, "greedy_ids"), &g->greedy_ids, &g->n_greedy)) {
        snprintf(err, errlen, "%s: bad greedy_ids", path);
        goto fail;
    }
    json_t *gt = json_object_get(root, "greedy_text");
    if (json_is_string(gt)) g->greedy_text = strdup(json_string_value(gt));
    json_t *mm = json_object_get(root, "greedy_min_margin");
    g->greedy_min_margin = json_is_number(mm) ? (float)json_number_value(mm) : 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    json_t *lf = json_object_get(root, "last_logits_file");
    if (json_is_string(lf) && !(g->last_logits = read_f32(dir, json_string_value(lf), vocab, err, errlen)))
        goto fail;
    json_t *af = json_object_get(root, "logits_file");
    if (json_is_string(af) &&
        !(g->all_logits = read_f32(dir, json_string_value(af), (size_t)vocab * g->n_ids, err, errlen)))
        goto fail;
    json_decref(root);
    free(text);
    return g;
fail:
    json_decref(root);
    free(text);
    model_golden_free(g);
    return NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int model_golden_list(const char *dir, char ***paths)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 16, oom = 0;
    char **v = malloc((size_t)cap * sizeof *v);
    struct dirent *e;
    while (v && !oom && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
        if (n == cap) {
            char **nv = realloc(v, (size_t)cap * 2 * sizeof *v);
            if (!nv) {
                oom = 1;
                break;
            }
            v = nv;
            cap *= 2;
        }
        size_t plen = strlen(dir) + len + 2;
        if (!(v[n] = malloc(plen))) {
            oom = 1;
            break;
        }
        snprintf(v[n], plen, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (!v || oom) { /* out of memory: no partial list */
        for (int i = 0; v && i < n; i++) free(v[i]);
        free(v);
        return -1;
    }
    qsort(v, n, sizeof *v, cmp_str);
    *paths = v;
    return n;
}

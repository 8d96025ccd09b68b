/* model/ckpt/model.c — a model directory as the Hub ships it: config.json, generation_config.json,
 * model.safetensors or model.safetensors.index.json + shards. See model.h. */
#include "model/ckpt/model.h"
#include "model/ckpt/safetensors.h"
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CONFIG_BYTES (4u << 20)
#define MAX_INDEX_BYTES (64u << 20)
#define MAX_SHARDS 4096

char *model_read_file(const char *path, size_t max, size_t *len_out)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    struct stat st;
    if (fstat(fileno(fp), &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        fclose(fp);
        errno = EFBIG;
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, fp) != n) {
        free(buf);
        fclose(fp);
        errno = EIO;
        return NULL;
    }
    fclose(fp);
    buf[n] = 0;
    if (len_out) *len_out = n;
    return buf;
}

static int add_file(model *m, const char *path, char *err, size_t errlen)
{
    for (int i = 0; i < m->n_files; i++)
        if (!strcmp(m->files[i]->path, path)) return i;
    if (m->n_files >= MAX_SHARDS) {
        snprintf(err, errlen, "%s: more than %d shards", path, MAX_SHARDS);
        return -1;
    }
    model_file **nf = realloc(m->files, (m->n_files + 1) * sizeof *nf);
    if (!nf) return -1;
    m->files = nf;
    model_file *f = model_st_open(path, err, errlen);
    if (!f) return -1;
    m->files[m->n_files] = f;
    return m->n_files++;
}

/* Where each tensor lives when the checkpoint is sharded: name -> file index (a jansson object
 * of integers, owned by the loader). */
typedef struct loader {
    model *m;
    json_t *where; /* NULL: single file */
    char *err;
    size_t errlen;
} loader;

static int bind_tensor(loader *L, const char *name, int64_t rows, int64_t cols, int required,
                       model_tensor *out)
{
    model *m = L->m;
    memset(out, 0, sizeof *out);
    const model_st_tensor *t = NULL;
    model_file *f = NULL;
    if (L->where) {
        json_t *idx = json_object_get(L->where, name);
        if (idx) {
            f = m->files[json_integer_value(idx)];
            t = model_st_find(f, name);
            if (!t) {
                snprintf(L->err, L->errlen, "%s: tensor %s: listed in model.safetensors.index.json "
                         "but missing from the shard", f->path, name);
                return -1;
            }
        }
    } else {
        f = m->files[0];
        t = model_st_find(f, name);
    }
    if (!t) {
        if (!required) return 0;
        snprintf(L->err, L->errlen, "%s: tensor %s: missing", f ? f->path : m->dir, name);
        return -1;
    }
    if (!t->supported) {
        snprintf(L->err, L->errlen, "%s: tensor %s: unsupported dtype %s (F32, F16, BF16 are)",
                 f->path, name, t->dtype_name);
        return -1;
    }
    int64_t want_cols = cols ? cols : 1;
    int ok = cols ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols)
                  : (t->ndim == 1 && t->shape[0] == rows);
    if (!ok) {
        char got[96] = "", *p = got;
        for (int d = 0; d < t->ndim; d++)
            p += snprintf(p, got + sizeof got - p, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        char want[64];
        if (cols)
            snprintf(want, sizeof want, "%lld, %lld", (long long)rows, (long long)cols);
        else
            snprintf(want, sizeof want, "%lld", (long long)rows);
        snprintf(L->err, L->errlen, "%s: tensor %s: shape [%s] disagrees with config.json "
                 "(expected [%s])", f->path, name, got, want);
        return -1;
    }
    out->data = f->data + t->begin;
    out->dtype = t->dtype;
    out->ndim = cols ? 2 : 1;
    out->shape[0] = rows;
    out->shape[1] = want_cols;
    return 0;
}

static int open_files(loader *L, char *err, size_t errlen)
{
    model *m = L->m;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", m->dir);
    size_t len;
    char *text = model_read_file(path, MAX_INDEX_BYTES, &len);
    if (!text) {
        if (errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return -1;
        }
        snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
        return add_file(m, path, err, errlen) < 0 ? -1 : 0;
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        snprintf(err, errlen, "%s: no weight_map object", path);
        json_decref(root);
        return -1;
    }
    L->where = json_object();
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v)
    {
        const char *shard = json_is_string(v) ? json_string_value(v) : NULL;
        /* a shard is a file name inside the model directory, nothing else */
        if (!shard || !*shard || strchr(shard, '/') || !strcmp(shard, "..") || !strcmp(shard, ".")) {
            snprintf(err, errlen, "%s: tensor %s: bad shard name", path, name);
            json_decref(root);
            return -1;
        }
        char sp[4400];
        snprintf(sp, sizeof sp, "%s/%s", m->dir, shard);
        int idx = add_file(m, sp, err, errlen);
        if (idx < 0) {
            json_decref(root);
            return -1;
        }
        json_object_set_new(L->where, name, json_integer(idx));
    }
    json_decref(root);
    if (m->n_files == 0) {
        snprintf(err, errlen, "%s: empty weight_map", path);
        return -1;
    }
    return 0;
}

static int fingerprint(model *m, const char *config_text, size_t config_len)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int n = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(ctx, config_text, config_len);
    for (int i = 0; ok && i < m->n_files; i++) {
        uint64_t size = m->files[i]->size;
        ok = EVP_DigestUpdate(ctx, m->files[i]->map, 8 + m->files[i]->header_len) &&
             EVP_DigestUpdate(ctx, &size, sizeof size);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, m->fingerprint, &n);
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -1;
}

void model_fingerprint_hex(const model *m, char out[65])
{
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", m->fingerprint[i]);
}

model *model_load(const char *dir, char *err, size_t errlen)
{
    model *m = calloc(1, sizeof *m);
    char *cfg_text = NULL, *gen_text = NULL;
    loader L = {.m = m, .err = err, .errlen = errlen};
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    char path[4200];
    size_t cfg_len = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    cfg_text = model_read_file(path, MAX_CONFIG_BYTES, &cfg_len);
    if (!cfg_text) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    gen_text = model_read_file(path, MAX_CONFIG_BYTES, NULL);
    char cerr[512];
    if (model_config_parse(cfg_text, gen_text, &m->cfg, cerr, sizeof cerr)) {
        snprintf(err, errlen, "%s/%s", dir, cerr);
        goto fail;
    }
    if (open_files(&L, err, errlen)) goto fail;

    const model_config *c = &m->cfg;
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    m->layers = calloc(c->n_layers, sizeof *m->layers);
    if (!m->layers) goto fail;
    if (bind_tensor(&L, "model.embed_tokens.weight", c->vocab, c->hidden, 1, &m->embed) ||
        bind_tensor(&L, "model.norm.weight", c->hidden, 0, 1, &m->norm))
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *ly = &m->layers[l];
        char n[128];
#define T(field, suffix, r, cc, req)                                                               \
    snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                        \
    if (bind_tensor(&L, n, r, cc, req, &ly->field)) goto fail;
        T(attn_norm, "input_layernorm.weight", c->hidden, 0, 1)
        T(wq, "self_attn.q_proj.weight", q, c->hidden, 1)
        T(wk, "self_attn.k_proj.weight", kv, c->hidden, 1)
        T(wv, "self_attn.v_proj.weight", kv, c->hidden, 1)
        T(wo, "self_attn.o_proj.weight", c->hidden, q, 1)
        T(bq, "self_attn.q_proj.bias", q, 0, c->attn_bias)
        T(bk, "self_attn.k_proj.bias", kv, 0, c->attn_bias)
        T(bv, "self_attn.v_proj.bias", kv, 0, c->attn_bias)
        T(ffn_norm, "post_attention_layernorm.weight", c->hidden, 0, 1)
        T(w_gate, "mlp.gate_proj.weight", c->intermediate, c->hidden, 1)
        T(w_up, "mlp.up_proj.weight", c->intermediate, c->hidden, 1)
        T(w_down, "mlp.down_proj.weight", c->hidden, c->intermediate, 1)
#undef T
        if (!c->attn_bias) /* present only when the config says so */
            ly->bq.data = ly->bk.data = ly->bv.data = NULL;
    }
    if (c->tie_embeddings) {
        m->lm_head = m->embed;
    } else if (bind_tensor(&L, "lm_head.weight", c->vocab, c->hidden, 1, &m->lm_head)) {
        goto fail;
    }
    if (fingerprint(m, cfg_text, cfg_len)) {
        snprintf(err, errlen, "%s: cannot hash the checkpoint", dir);
        goto fail;
    }
    json_decref(L.where);
    free(cfg_text);
    free(gen_text);
    return m;
fail:
    json_decref(L.where);
    free(cfg_text);
    free(gen_text);
    model_free(m);
    return NULL;
}

void model_free(model *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) model_st_close(m->files[i]);
    free(m->files);
    free(m->layers);
    free(m);
}

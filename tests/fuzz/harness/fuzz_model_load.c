/* tests/fuzz/harness/fuzz_model_load.c — libFuzzer harness for the whole model-directory load
 * (model/model.c model_load: config.json and generation_config.json through model/config.c, the
 * safetensors headers through model/safetensors.c, model.safetensors.index.json).
 *
 * Input: byte 0 (mod 5) picks the file the rest of the input replaces; every other file of the
 * directory is the valid tiny checkpoint of tiny_model.c:
 *   0 config.json             in a single-file directory
 *   1 generation_config.json  in a single-file directory
 *   2 model.safetensors       (the whole file: u64 header length, header, data)
 *   3 model.safetensors.index.json, next to the two valid shards
 *   4 the first shard         (model-00001-of-00002.safetensors), with the valid index
 * A model that loads must keep model.h's promises: every tensor inside its file's mapping, with
 * the shape the config gives it. */
#include "model/ckpt/model.h"
#include "model/ckpt/safetensors.h"
#include "tests/fuzz/harness/harness_util.h"
#include "tests/fuzz/harness/tiny_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char single_dir[600], sharded_dir[600];
static uint8_t *st_whole, *st_shard[2];
static size_t st_whole_n, st_shard_n[2];

static void make_dirs(void)
{
    const char *base = fuzz_tmpdir();
    snprintf(single_dir, sizeof single_dir, "%s/single", base);
    snprintf(sharded_dir, sizeof sharded_dir, "%s/sharded", base);
    if (mkdir(single_dir, 0700) || mkdir(sharded_dir, 0700)) abort();
    st_whole_n = tiny_safetensors(-1, &st_whole);
    for (int s = 0; s < 2; s++) st_shard_n[s] = tiny_safetensors(s, &st_shard[s]);
    fuzz_write(single_dir, "config.json", tiny_config_json, strlen(tiny_config_json));
    fuzz_write(single_dir, "generation_config.json", tiny_gen_json, strlen(tiny_gen_json));
    fuzz_write(single_dir, "model.safetensors", st_whole, st_whole_n);
    fuzz_write(sharded_dir, "config.json", tiny_config_json, strlen(tiny_config_json));
    fuzz_write(sharded_dir, "model.safetensors.index.json", tiny_index_json,
               strlen(tiny_index_json));
    for (int s = 0; s < 2; s++)
        fuzz_write(sharded_dir, tiny_shard_names[s], st_shard[s], st_shard_n[s]);
}

/* The directory with its valid files both ways, or abort: the harness itself must be sound. */
static void check_valid_dirs(void)
{
    char err[1024];
    const char *dirs[2] = {single_dir, sharded_dir};
    for (int i = 0; i < 2; i++) {
        model *m = model_load(dirs[i], err, sizeof err);
        if (!m) {
            fprintf(stderr, "fuzz_model_load: the valid tiny model does not load: %s\n", err);
            abort();
        }
        model_free(m);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    make_dirs();
    check_valid_dirs();
    return 0;
}

static void check_tensor(const model *m, const model_tensor *t, int64_t rows, int64_t cols)
{
    if (!t->data) return;
    CHECK(t->shape[0] == rows && t->shape[1] == (cols ? cols : 1));
    size_t bytes = (size_t)t->shape[0] * (size_t)t->shape[1] * model_dtype_size(t->dtype);
    const uint8_t *p = t->data;
    for (int i = 0; i < m->n_files; i++) {
        const uint8_t *lo = m->files[i]->map, *hi = lo + m->files[i]->size;
        if (p >= lo && p < hi) {
            CHECK(bytes <= (size_t)(hi - p));
            CHECK(p >= m->files[i]->data);
            if (bytes) (void)model_tensor_get(t, rows - 1, (cols ? cols : 1) - 1);
            return;
        }
    }
    CHECK(!"tensor outside every mapped file");
}

static void check_model(const model *m)
{
    const model_config *c = &m->cfg;
    CHECK(c->n_layers >= 1 && c->n_heads >= 1 && c->n_kv_heads >= 1 && c->hidden >= 1);
    CHECK(c->n_heads % c->n_kv_heads == 0);
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    check_tensor(m, &m->embed, c->vocab, c->hidden);
    check_tensor(m, &m->norm, c->hidden, 0);
    check_tensor(m, &m->lm_head, c->vocab, c->hidden);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        check_tensor(m, &ly->attn_norm, c->hidden, 0);
        check_tensor(m, &ly->wq, q, c->hidden);
        check_tensor(m, &ly->wk, kv, c->hidden);
        check_tensor(m, &ly->wv, kv, c->hidden);
        check_tensor(m, &ly->wo, c->hidden, q);
        check_tensor(m, &ly->bq, q, 0);
        check_tensor(m, &ly->bk, kv, 0);
        check_tensor(m, &ly->bv, kv, 0);
        check_tensor(m, &ly->ffn_norm, c->hidden, 0);
        check_tensor(m, &ly->w_gate, c->intermediate, c->hidden);
        check_tensor(m, &ly->w_up, c->intermediate, c->hidden);
        check_tensor(m, &ly->w_down, c->hidden, c->intermediate);
    }
    /* the rotary table for the longest context must be computable */
    float inv[512];
    if (c->head_dim <= 1024) model_rope_inv_freq(c, model_context_limit(c), inv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int which = data[0] % 5;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    const char *dir = which < 3 ? single_dir : sharded_dir;
    static const char *const names[5] = {"config.json", "generation_config.json",
                                         "model.safetensors", "model.safetensors.index.json",
                                         "model-00001-of-00002.safetensors"};
    fuzz_write(dir, names[which], body, n);

    char err[1024];
    err[0] = 0;
    model *m = model_load(dir, err, sizeof err);
    if (!m && getenv("FUZZ_DEBUG")) fprintf(stderr, "load: %s\n", err);
    if (m) {
        check_model(m);
        model_free(m);
    } else {
        CHECK(err[0] != 0 && memchr(err, 0, sizeof err));
    }

    /* put the valid file back */
    switch (which) {
    case 0:
        fuzz_write(dir, names[0], tiny_config_json, strlen(tiny_config_json));
        break;
    case 1:
        fuzz_write(dir, names[1], tiny_gen_json, strlen(tiny_gen_json));
        break;
    case 2:
        fuzz_write(dir, names[2], st_whole, st_whole_n);
        break;
    case 3:
        fuzz_write(dir, names[3], tiny_index_json, strlen(tiny_index_json));
        break;
    case 4:
        fuzz_write(dir, names[4], st_shard[0], st_shard_n[0]);
        break;
    }
    return 0;
}

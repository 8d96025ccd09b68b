/* mkmodel — writes a random-weight Llama-family checkpoint in Hugging Face format (config.json,
 * generation_config.json, model.safetensors or sharded model-0000k-of-0000n.safetensors +
 * model.safetensors.index.json), for tests of shapes we have no trained model for and for
 * real-size benchmarks without a download.
 *
 *   mkmodel --out DIR [--preset llama3-8b|llama2-7b|tiny-gqa] [--hidden N --layers N --heads N
 *           --kv-heads N --head-dim N --intermediate N --vocab N --max-pos N]
 *           [--dtype bf16|f16|f32] [--rope none|linear|dynamic|llama3 --rope-factor F]
 *           [--rope-theta T] [--tie] [--bias] [--shards N] [--seed S]
 *
 * Weights are uniform with the standard deviation transformers initialises with (0.02), norms
 * 1 ± 0.1, biases ± 0.02: random, but with activations of a realistic scale. */
#include "model/ckpt/model.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct spec {
    int hidden, layers, heads, kv_heads, head_dim, inter, vocab, max_pos, tie, bias, shards;
    enum model_dtype dtype;
    const char *rope;
    double rope_factor, rope_theta;
    uint64_t seed;
} spec;

typedef struct tensor {
    char name[96];
    int64_t rows, cols; /* cols 0: 1-D */
    int kind;           /* 0 weight, 1 norm, 2 bias */
} tensor;

/* splitmix64: fast, good enough for weights, and a counter: the k-th value after state x is
 * mix(x + k * gamma), so threads fill disjoint ranges of a tensor from the same sequence and the
 * file is byte for byte the one a single thread writes */
#define MK_GAMMA 0x9e3779b97f4a7c15ull
static uint64_t rng;
static inline uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline float uni_at(uint64_t state) /* [-1, 1) */
{
    return (float)((int64_t)(mix(state) >> 11) - (1ll << 52)) / (float)(1ll << 52);
}

static size_t esize(enum model_dtype t)
{
    return model_dtype_size(t);
}

static void put(void *dst, enum model_dtype t, float v)
{
    if (t == MODEL_DTYPE_F32) memcpy(dst, &v, 4);
    else {
        uint16_t h = t == MODEL_DTYPE_BF16 ? model_f32_to_bf16(v) : model_f32_to_f16(v);
        memcpy(dst, &h, 2);
    }
}

typedef struct fill_job {
    unsigned char *buf;
    int64_t from, to; /* values [from, to) of the buffer */
    uint64_t state;   /* the sequence's state before value 0 of the buffer */
    enum model_dtype dtype;
    size_t es;
    int kind;
} fill_job;

static void *fill(void *arg)
{
    const fill_job *j = arg;
    /* std 0.02 for a uniform distribution: half-width 0.02 * sqrt(3) */
    const float w = 0.0346410162f;
    for (int64_t i = j->from; i < j->to; i++) {
        const float u = uni_at(j->state + (uint64_t)(i + 1) * MK_GAMMA);
        const float v = j->kind == 1 ? 1.0f + 0.1f * u : j->kind == 2 ? 0.02f * u : w * u;
        put(j->buf + i * j->es, j->dtype, v);
    }
    return NULL;
}

enum { MK_THREADS = 64, MK_CHUNK = 1 << 24 }; /* values per write: 32-64 MB */
static int nthreads = 1;

static int write_tensor_data(FILE *fp, const spec *s, const tensor *t)
{
    int64_t n = t->rows * (t->cols ? t->cols : 1);
    size_t es = esize(s->dtype);
    int64_t cap = n < MK_CHUNK ? n : MK_CHUNK;
    unsigned char *buf = malloc((size_t)(cap > 0 ? cap : 1) * es);
    if (!buf) return -1;
    int rc = 0;
    for (int64_t i = 0; i < n && !rc;) {
        int64_t k = n - i < cap ? n - i : cap;
        int nt = k < 65536 ? 1 : nthreads;
        fill_job jobs[MK_THREADS];
        pthread_t th[MK_THREADS];
        int started[MK_THREADS] = {0};
        for (int x = 0; x < nt; x++) {
            jobs[x] = (fill_job){buf, k * x / nt, k * (x + 1) / nt, rng, s->dtype, es, t->kind};
            if (x > 0) started[x] = pthread_create(&th[x], NULL, fill, &jobs[x]) == 0;
            if (x > 0 && !started[x]) fill(&jobs[x]);
        }
        fill(&jobs[0]);
        for (int x = 1; x < nt; x++)
            if (started[x]) pthread_join(th[x], NULL);
        rng += (uint64_t)k * MK_GAMMA;
        if (fwrite(buf, es, k, fp) != (size_t)k) rc = -1;
        i += k;
    }
    free(buf);
    return rc;
}

static int add(tensor *v, int *n, const char *name, int64_t r, int64_t c, int kind)
{
    snprintf(v[*n].name, sizeof v[*n].name, "%s", name);
    v[*n].rows = r;
    v[*n].cols = c;
    v[*n].kind = kind;
    return (*n)++;
}

static const char *dtype_json(enum model_dtype t)
{
    return t == MODEL_DTYPE_F32 ? "F32" : t == MODEL_DTYPE_F16 ? "F16" : "BF16";
}

static int write_shard(const char *path, const spec *s, const tensor *t, int first, int last)
{
    size_t cap = 1 << 20, len = 0;
    char *h = malloc(cap);
    len += snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = first; i < last; i++) {
        uint64_t bytes = (uint64_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * esize(s->dtype);
        if (cap - len < 512) h = realloc(h, cap *= 2);
        if (t[i].cols)
            len += snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                            "\"data_offsets\":[%llu,%llu]}", t[i].name, dtype_json(s->dtype),
                            (long long)t[i].rows, (long long)t[i].cols, (unsigned long long)off,
                            (unsigned long long)(off + bytes));
        else
            len += snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                            "\"data_offsets\":[%llu,%llu]}", t[i].name, dtype_json(s->dtype),
                            (long long)t[i].rows, (unsigned long long)off,
                            (unsigned long long)(off + bytes));
        off += bytes;
    }
    len += snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' '; /* align the data region as the safetensors library does */
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        perror(path);
        free(h);
        return -1;
    }
    uint64_t hl = len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    int rc = fwrite(le, 1, 8, fp) == 8 && fwrite(h, 1, len, fp) == len ? 0 : -1;
    for (int i = first; rc == 0 && i < last; i++) rc = write_tensor_data(fp, s, &t[i]);
    if (fclose(fp)) rc = -1;
    free(h);
    if (rc) fprintf(stderr, "mkmodel: %s: write failed\n", path);
    return rc;
}

static int write_config(const char *dir, const spec *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "w");
    if (!fp) return -1;
    fprintf(fp, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
            s->bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM", s->bias ? "qwen2" : "llama");
    fprintf(fp, "  \"hidden_size\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": 1e-05,\n"
            "  \"rope_theta\": %.1f,\n  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": %s,\n"
            "  \"torch_dtype\": \"%s\",\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n",
            s->hidden, s->layers, s->heads, s->kv_heads, s->head_dim, s->inter, s->vocab, s->max_pos,
            s->rope_theta, s->tie ? "true" : "false",
            s->dtype == MODEL_DTYPE_F32 ? "float32" : s->dtype == MODEL_DTYPE_F16 ? "float16" : "bfloat16");
    if (!strcmp(s->rope, "llama3"))
        fprintf(fp, "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.1f, "
                "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                "\"original_max_position_embeddings\": %d}\n}\n", s->rope_factor,
                s->max_pos / (int)s->rope_factor > 0 ? s->max_pos / (int)s->rope_factor : 1);
    else if (!strcmp(s->rope, "linear") || !strcmp(s->rope, "dynamic"))
        fprintf(fp, "  \"rope_scaling\": {\"rope_type\": \"%s\", \"factor\": %.1f}\n}\n", s->rope,
                s->rope_factor);
    else
        fprintf(fp, "  \"rope_scaling\": null\n}\n");
    if (fclose(fp)) return -1;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    fp = fopen(path, "w");
    if (!fp) return -1;
    fprintf(fp, "{\"bos_token_id\": 1, \"eos_token_id\": 2}\n");
    return fclose(fp);
}

static int preset(spec *s, const char *name)
{
    if (!strcmp(name, "llama3-8b")) {
        *s = (spec){4096, 32, 32, 8, 128, 14336, 128256, 131072, 0, 0, 1, MODEL_DTYPE_BF16,
                    "llama3", 8.0, 500000.0, s->seed};
    } else if (!strcmp(name, "llama2-7b")) {
        *s = (spec){4096, 32, 32, 32, 128, 11008, 32000, 4096, 0, 0, 1, MODEL_DTYPE_BF16, "none",
                    1.0, 10000.0, s->seed};
    } else if (!strcmp(name, "tiny-gqa")) {
        /* GQA 4:1, llama3 rope scaling, tied embeddings, bfloat16, two shards */
        *s = (spec){128, 3, 8, 2, 16, 320, 1000, 2048, 1, 0, 2, MODEL_DTYPE_BF16, "llama3", 8.0,
                    500000.0, s->seed};
    } else {
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    spec s = {0};
    s.seed = 1;
    preset(&s, "tiny-gqa");
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define INTOPT(flag, field)                                                                        \
    if (!strcmp(a, flag) && v) {                                                                   \
        s.field = atoi(v);                                                                         \
        i++;                                                                                       \
        continue;                                                                                  \
    }
        INTOPT("--hidden", hidden) INTOPT("--layers", layers) INTOPT("--heads", heads)
        INTOPT("--kv-heads", kv_heads) INTOPT("--head-dim", head_dim)
        INTOPT("--intermediate", inter) INTOPT("--vocab", vocab) INTOPT("--max-pos", max_pos)
        INTOPT("--shards", shards)
#undef INTOPT
        if (!strcmp(a, "--out") && v) out = argv[++i];
        else if (!strcmp(a, "--preset") && v) {
            if (preset(&s, argv[++i])) {
                fprintf(stderr, "mkmodel: unknown preset %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--dtype") && v) {
            i++;
            s.dtype = !strcmp(v, "f32") ? MODEL_DTYPE_F32 : !strcmp(v, "f16") ? MODEL_DTYPE_F16
                                                                                : MODEL_DTYPE_BF16;
        } else if (!strcmp(a, "--rope") && v) s.rope = argv[++i];
        else if (!strcmp(a, "--rope-factor") && v) s.rope_factor = atof(argv[++i]);
        else if (!strcmp(a, "--rope-theta") && v) s.rope_theta = atof(argv[++i]);
        else if (!strcmp(a, "--seed") && v) s.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--tie")) s.tie = 1;
        else if (!strcmp(a, "--untie")) s.tie = 0;
        else if (!strcmp(a, "--bias")) s.bias = 1;
        else {
            fprintf(stderr, "mkmodel: unknown option %s (see tools/mkmodel.c)\n", a);
            return 2;
        }
    }
    if (!out || s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 ||
        s.heads % s.kv_heads || s.head_dim <= 0 || s.head_dim % 2 || s.inter <= 0 ||
        s.vocab <= 0 || s.shards < 1 || s.shards > 99) {
        fprintf(stderr, "usage: mkmodel --out DIR [--preset NAME] [shape options]\n");
        return 2;
    }
    rng = s.seed;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = ncpu < 1 ? 1 : ncpu > MK_THREADS ? MK_THREADS : (int)ncpu;
    if (mkdir(out, 0755) && errno != EEXIST) {
        perror(out);
        return 1;
    }
    int nt = 0, cap = 16 + 12 * s.layers;
    tensor *t = calloc(cap, sizeof *t);
    int64_t q = (int64_t)s.heads * s.head_dim, kv = (int64_t)s.kv_heads * s.head_dim;
    add(t, &nt, "model.embed_tokens.weight", s.vocab, s.hidden, 0);
    for (int l = 0; l < s.layers; l++) {
        char n[96];
#define L(suffix, r, c, k)                                                                         \
    snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                        \
    add(t, &nt, n, r, c, k);
        L("input_layernorm.weight", s.hidden, 0, 1)
        L("self_attn.q_proj.weight", q, s.hidden, 0)
        L("self_attn.k_proj.weight", kv, s.hidden, 0)
        L("self_attn.v_proj.weight", kv, s.hidden, 0)
        if (s.bias) {
            L("self_attn.q_proj.bias", q, 0, 2)
            L("self_attn.k_proj.bias", kv, 0, 2)
            L("self_attn.v_proj.bias", kv, 0, 2)
        }
        L("self_attn.o_proj.weight", s.hidden, q, 0)
        L("post_attention_layernorm.weight", s.hidden, 0, 1)
        L("mlp.gate_proj.weight", s.inter, s.hidden, 0)
        L("mlp.up_proj.weight", s.inter, s.hidden, 0)
        L("mlp.down_proj.weight", s.hidden, s.inter, 0)
#undef L
    }
    add(t, &nt, "model.norm.weight", s.hidden, 0, 1);
    if (!s.tie) add(t, &nt, "lm_head.weight", s.vocab, s.hidden, 0);
    if (write_config(out, &s)) {
        fprintf(stderr, "mkmodel: cannot write config.json in %s\n", out);
        return 1;
    }
    char path[4200];
    if (s.shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        int rc = write_shard(path, &s, t, 0, nt) ? 1 : 0;
        free(t);
        return rc;
    }
    /* sharded: contiguous runs of tensors, one file each, and the index */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out);
    FILE *ix = fopen(path, "w");
    if (!ix) {
        perror(path);
        return 1;
    }
    fprintf(ix, "{\"metadata\": {}, \"weight_map\": {");
    for (int k = 0; k < s.shards; k++) {
        int first = nt * k / s.shards, last = nt * (k + 1) / s.shards;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, s.shards);
        snprintf(path, sizeof path, "%s/%s", out, name);
        if (write_shard(path, &s, t, first, last)) return 1;
        for (int i = first; i < last; i++)
            fprintf(ix, "%s\"%s\": \"%s\"", i ? ", " : "", t[i].name, name);
    }
    fprintf(ix, "}}\n");
    free(t);
    return fclose(ix) ? 1 : 0;
}

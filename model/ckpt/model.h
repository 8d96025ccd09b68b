/* model/ckpt/model.h — a Hugging Face Llama-family checkpoint, loaded and validated.
 *
 * model_load() reads config.json (+ generation_config.json), memory-maps model.safetensors or the
 * shards named by model.safetensors.index.json, and checks every header field, offset, shape and
 * dtype against the file sizes and the config before anything is used. The tensors point into the
 * read-only mappings: weights are never copied on the CPU path.
 *
 * Thread safety: a loaded model is immutable; any thread may read it. model_free() once, when no
 * backend uses it any more. */
#ifndef TANDEM_MODEL_H
#define TANDEM_MODEL_H
#include <stddef.h>
#include <stdint.h>

enum model_dtype { MODEL_DTYPE_F32, MODEL_DTYPE_F16, MODEL_DTYPE_BF16 };

enum model_rope_type {
    MODEL_ROPE_DEFAULT, /* plain RoPE with rope_theta */
    MODEL_ROPE_LINEAR,  /* positions divided by factor */
    MODEL_ROPE_DYNAMIC, /* NTK-aware base rescaled when seq_len > original max positions */
    MODEL_ROPE_LLAMA3,  /* Llama-3.1 per-frequency smoothing between low/high frequency factors */
};

#define MODEL_MAX_EOS 8

typedef struct model_config {
    char arch[64];       /* architectures[0], e.g. "LlamaForCausalLM" */
    char model_type[32]; /* "llama", "mistral", "qwen2" */
    int hidden;          /* hidden_size */
    int n_layers;
    int n_heads;
    int n_kv_heads; /* GQA: n_heads % n_kv_heads == 0 */
    int head_dim;   /* head_dim, default hidden / n_heads */
    int intermediate;
    int vocab;
    int max_pos;        /* max_position_embeddings */
    int sliding_window; /* 0: none (Mistral/Qwen2 when enabled) */
    float rms_eps;
    float rope_theta;
    struct {
        enum model_rope_type type;
        float factor;
        float low_freq_factor, high_freq_factor; /* llama3 */
        int original_max_pos;                    /* llama3 / dynamic */
    } rope;
    int tie_embeddings;
    int attn_bias; /* q/k/v projections carry a bias (Qwen2, attention_bias: true) */
    int bos_id;    /* -1: none */
    int eos_ids[MODEL_MAX_EOS];
    int n_eos;
} model_config;

/* A view of one tensor inside a mapped safetensors file. */
typedef struct model_tensor {
    const void *data; /* NULL when the tensor is absent (optional tensors only) */
    enum model_dtype dtype;
    int ndim;
    int64_t shape[2]; /* row-major: shape[0] rows of shape[1] elements (1-D: shape[1] = 1) */
} model_tensor;

typedef struct model_layer {
    model_tensor attn_norm;         /* (hidden) */
    model_tensor wq, wk, wv, wo;    /* (n_heads*hd, hidden) (kv*hd, hidden) (kv*hd, hidden) (hidden, n_heads*hd) */
    model_tensor bq, bk, bv;        /* biases when cfg.attn_bias, else absent */
    model_tensor ffn_norm;          /* (hidden) */
    model_tensor w_gate, w_up;      /* (intermediate, hidden) */
    model_tensor w_down;            /* (hidden, intermediate) */
} model_layer;

typedef struct model_file model_file; /* one mapped safetensors shard */

typedef struct model {
    model_config cfg;
    char dir[4096];
    model_tensor embed;   /* (vocab, hidden) */
    model_tensor norm;    /* (hidden) */
    model_tensor lm_head; /* (vocab, hidden); == embed when tied */
    model_layer *layers;  /* n_layers */
    uint8_t fingerprint[32]; /* SHA-256 over config.json, every shard's header and size */
    model_file **files;
    int n_files;
} model;

/* Loads the model directory `dir`. On failure returns NULL and writes a one-line message naming
 * the file (and the tensor, where one is at fault) to err. The caller owns the result. */
model *model_load(const char *dir, char *err, size_t errlen);
void model_free(model *m);

/* Parses a config.json text (plus an optional generation_config.json text, may be NULL) into cfg.
 * Returns 0, or -1 with a message in err. Exposed for tests. */
int model_config_parse(const char *config_json, const char *gen_json, model_config *cfg,
                       char *err, size_t errlen);

/* The rotary inverse frequencies for sequence length seq_len (dynamic scaling depends on it):
 * writes head_dim/2 values. Also returns the attention scaling factor (1.0 for these types). */
void model_rope_inv_freq(const model_config *cfg, int seq_len, float *inv_freq);

/* Longest sequence the model serves: max_position_embeddings, times the factor for dynamic NTK
 * scaling (which exists to run past the trained length). */
int model_context_limit(const model_config *cfg);

const char *model_dtype_name(enum model_dtype t);
size_t model_dtype_size(enum model_dtype t);

/* Element i of a tensor's row r, converted to float (slow path; for tools and tests). */
float model_tensor_get(const model_tensor *t, int64_t r, int64_t i);

/* Hex of the fingerprint (65 bytes with NUL). */
void model_fingerprint_hex(const model *m, char out[65]);

/* Reads a whole file into a NUL-terminated heap buffer (at most max bytes). NULL on error (errno). */
char *model_read_file(const char *path, size_t max, size_t *len_out);

/* bf16 / fp16 <-> float, exact (round-to-nearest-even when narrowing). */
static inline float model_bf16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}
float model_f16_to_f32(uint16_t h);
uint16_t model_f32_to_f16(float f);
uint16_t model_f32_to_bf16(float f);

#endif

/* model/ckpt/config.c — config.json (+ generation_config.json) as transformers writes them.
 *
 * Accepts LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM (the same tensors; Qwen2 adds
 * q/k/v biases, Mistral/Qwen2 may set a sliding window). Defaults are LlamaConfig's where a key is
 * absent. Every count is bounded before use: the limits below are far above any released
 * Llama-family model and keep arithmetic on them inside 64-bit sizes. */
#include "model/ckpt/model.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_HIDDEN (1 << 16)
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_INTERMEDIATE (1 << 20)
#define MAX_VOCAB (1 << 22)
#define MAX_POSITIONS (1 << 24)

static int get_int(json_t *o, const char *key, int def, int lo, int hi, int *out, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (def == INT32_MIN) {
            snprintf(err, errlen, "config.json: missing \"%s\"", key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, errlen, "config.json: \"%s\" must be an integer in [%d, %d]", key, lo, hi);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double def, double lo, double hi, double *out,
                   char *err, size_t errlen, const char *file)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (isnan(def)) {
            snprintf(err, errlen, "%s: missing \"%s\"", file, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi)) {
        snprintf(err, errlen, "%s: \"%s\" must be a number in [%g, %g]", file, key, lo, hi);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

/* rope_scaling (older spelling) or rope_parameters (transformers >= 5): same fields, the latter
 * may also carry rope_theta. */
static int parse_rope(json_t *root, model_config *c, char *err, size_t errlen)
{
    const char *F = "config.json";
    double theta;
    if (get_num(root, "rope_theta", 10000.0, 1.0, 1e12, &theta, err, errlen, F)) return -1;
    json_t *rs = json_object_get(root, "rope_parameters");
    if (!rs || json_is_null(rs)) rs = json_object_get(root, "rope_scaling");
    c->rope.type = MODEL_ROPE_DEFAULT;
    c->rope.factor = 1.0f;
    if (rs && !json_is_null(rs)) {
        if (!json_is_object(rs)) {
            snprintf(err, errlen, "%s: rope_scaling must be an object or null", F);
            return -1;
        }
        if (json_object_get(rs, "rope_theta") &&
            get_num(rs, "rope_theta", 10000.0, 1.0, 1e12, &theta, err, errlen, F))
            return -1;
        json_t *t = json_object_get(rs, "rope_type");
        if (!t) t = json_object_get(rs, "type");
        const char *type = json_is_string(t) ? json_string_value(t) : "default";
        double factor = 1.0, lo = 1.0, hi = 4.0;
        int orig = c->max_pos;
        if (!strcmp(type, "default")) {
            c->rope.type = MODEL_ROPE_DEFAULT;
        } else if (!strcmp(type, "linear") || !strcmp(type, "dynamic")) {
            c->rope.type = !strcmp(type, "linear") ? MODEL_ROPE_LINEAR : MODEL_ROPE_DYNAMIC;
            if (get_num(rs, "factor", NAN, 1e-3, 1e6, &factor, err, errlen, F)) return -1;
            if (get_int(rs, "original_max_position_embeddings", c->max_pos, 1, MAX_POSITIONS,
                        &orig, err, errlen))
                return -1;
        } else if (!strcmp(type, "llama3")) {
            c->rope.type = MODEL_ROPE_LLAMA3;
            if (get_num(rs, "factor", NAN, 1e-3, 1e6, &factor, err, errlen, F) ||
                get_num(rs, "low_freq_factor", NAN, 1e-6, 1e6, &lo, err, errlen, F) ||
                get_num(rs, "high_freq_factor", NAN, 1e-6, 1e6, &hi, err, errlen, F) ||
                get_int(rs, "original_max_position_embeddings", INT32_MIN, 1, MAX_POSITIONS, &orig,
                        err, errlen))
                return -1;
            if (!(hi > lo)) {
                snprintf(err, errlen, "%s: rope_scaling high_freq_factor must exceed low_freq_factor", F);
                return -1;
            }
        } else {
            snprintf(err, errlen, "%s: unsupported rope_scaling type \"%s\" (supported: default, "
                     "linear, dynamic, llama3)", F, type);
            return -1;
        }
        c->rope.factor = (float)factor;
        c->rope.low_freq_factor = (float)lo;
        c->rope.high_freq_factor = (float)hi;
        c->rope.original_max_pos = orig;
    }
    c->rope_theta = (float)theta;
    return 0;
}

/* eos_token_id: an integer or a list of integers. */
static int parse_eos(json_t *v, model_config *c, char *err, size_t errlen, const char *file)
{
    if (!v || json_is_null(v)) return 0;
    c->n_eos = 0;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) >= c->vocab) goto bad;
        c->eos_ids[c->n_eos++] = (int)json_integer_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > MODEL_MAX_EOS) goto bad;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= c->vocab)
            goto bad;
        c->eos_ids[c->n_eos++] = (int)json_integer_value(e);
    }
    return 0;
bad:
    snprintf(err, errlen, "%s: eos_token_id must be a token id or a list of at most %d ids", file,
             MODEL_MAX_EOS);
    return -1;
}

int model_config_parse(const char *text, const char *gen_text, model_config *c, char *err,
                       size_t errlen)
{
    json_error_t je;
    int rc = -1;
    memset(c, 0, sizeof *c);
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    json_t *gen = NULL;
    if (!root || !json_is_object(root)) {
        snprintf(err, errlen, "config.json: invalid JSON at line %d: %s", je.line, je.text);
        goto out;
    }
    json_t *archs = json_object_get(root, "architectures");
    json_t *mt = json_object_get(root, "model_type");
    const char *arch = json_is_array(archs) && json_is_string(json_array_get(archs, 0))
                           ? json_string_value(json_array_get(archs, 0))
                           : "LlamaForCausalLM";
    const char *type = json_is_string(mt) ? json_string_value(mt) : "llama";
    static const char *const known[][2] = {
        {"LlamaForCausalLM", "llama"},
        {"MistralForCausalLM", "mistral"},
        {"Qwen2ForCausalLM", "qwen2"},
    };
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(arch, known[i][0]) && !strcmp(type, known[i][1])) ok = 1;
    if (!ok) {
        snprintf(err, errlen, "config.json: unsupported architecture \"%s\" (model_type \"%s\"); "
                 "supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM", arch, type);
        goto out;
    }
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    snprintf(c->model_type, sizeof c->model_type, "%s", type);

    json_t *act = json_object_get(root, "hidden_act");
    if (act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu"))) {
        snprintf(err, errlen, "config.json: unsupported hidden_act (only \"silu\")");
        goto out;
    }
    json_t *mlpb = json_object_get(root, "mlp_bias");
    if (json_is_true(mlpb)) {
        snprintf(err, errlen, "config.json: mlp_bias: true is not supported");
        goto out;
    }
    if (get_int(root, "hidden_size", INT32_MIN, 1, MAX_HIDDEN, &c->hidden, err, errlen) ||
        get_int(root, "num_hidden_layers", INT32_MIN, 1, MAX_LAYERS, &c->n_layers, err, errlen) ||
        get_int(root, "num_attention_heads", INT32_MIN, 1, MAX_HEADS, &c->n_heads, err, errlen) ||
        get_int(root, "num_key_value_heads", c->n_heads, 1, MAX_HEADS, &c->n_kv_heads, err,
                errlen) ||
        get_int(root, "intermediate_size", INT32_MIN, 1, MAX_INTERMEDIATE, &c->intermediate, err,
                errlen) ||
        get_int(root, "vocab_size", INT32_MIN, 1, MAX_VOCAB, &c->vocab, err, errlen) ||
        get_int(root, "max_position_embeddings", 2048, 1, MAX_POSITIONS, &c->max_pos, err, errlen))
        goto out;
    if (c->hidden % c->n_heads && !json_object_get(root, "head_dim")) {
        snprintf(err, errlen, "config.json: hidden_size %d is not a multiple of num_attention_heads %d",
                 c->hidden, c->n_heads);
        goto out;
    }
    if (get_int(root, "head_dim", c->hidden / c->n_heads, 2, MAX_HEAD_DIM, &c->head_dim, err,
                errlen))
        goto out;
    if (c->head_dim % 2) {
        snprintf(err, errlen, "config.json: head_dim %d must be even (rotary pairs)", c->head_dim);
        goto out;
    }
    if (c->n_heads % c->n_kv_heads) {
        snprintf(err, errlen, "config.json: num_attention_heads %d is not a multiple of "
                 "num_key_value_heads %d", c->n_heads, c->n_kv_heads);
        goto out;
    }
    double eps;
    if (get_num(root, "rms_norm_eps", 1e-6, 0.0, 1.0, &eps, err, errlen, "config.json")) goto out;
    c->rms_eps = (float)eps;
    if (parse_rope(root, c, err, errlen)) goto out;
    c->tie_embeddings = json_is_true(json_object_get(root, "tie_word_embeddings"));
    c->attn_bias = !strcmp(type, "qwen2") || json_is_true(json_object_get(root, "attention_bias"));
    /* Sliding window: Mistral applies it whenever set; Qwen2 only with use_sliding_window, and
     * then (transformers' Qwen2Config) on the layers its layer_types says, by default those from
     * max_window_layers (28) on. One window for every layer or none is what the backends run:
     * a config that windows some layers only is refused rather than run as another model. */
    json_t *sw = json_object_get(root, "sliding_window");
    int windowed = json_is_integer(sw) && json_integer_value(sw) > 0;
    if (windowed && !strcmp(type, "qwen2")) {
        int sliding = 0, full = 0;
        json_t *lt = json_object_get(root, "layer_types");
        if (!json_is_true(json_object_get(root, "use_sliding_window"))) {
            full = c->n_layers;
        } else if (json_is_array(lt)) {
            if (json_array_size(lt) != (size_t)c->n_layers) {
                snprintf(err, errlen, "config.json: layer_types has %zu entries for %d layers",
                         json_array_size(lt), c->n_layers);
                goto out;
            }
            size_t i;
            json_t *v;
            json_array_foreach(lt, i, v)
            {
                const char *k = json_string_value(v);
                if (k && !strcmp(k, "sliding_attention"))
                    sliding++;
                else
                    full++;
            }
        } else {
            int mwl;
            if (get_int(root, "max_window_layers", 28, 0, 1 << 20, &mwl, err, errlen)) goto out;
            sliding = mwl < c->n_layers ? c->n_layers - mwl : 0;
            full = c->n_layers - sliding;
        }
        if (sliding && full) {
            snprintf(err, errlen,
                     "config.json: a sliding window on %d of %d layers (max_window_layers / "
                     "layer_types) is not supported: only all layers or none",
                     sliding, sliding + full);
            goto out;
        }
        windowed = sliding > 0;
    }
    if (windowed) {
        if (json_integer_value(sw) > MAX_POSITIONS) {
            snprintf(err, errlen, "config.json: sliding_window out of range");
            goto out;
        }
        if (json_integer_value(sw) < c->max_pos) c->sliding_window = (int)json_integer_value(sw);
    }
    c->bos_id = -1;
    if (get_int(root, "bos_token_id", -1, -1, c->vocab - 1, &c->bos_id, err, errlen)) goto out;
    if (parse_eos(json_object_get(root, "eos_token_id"), c, err, errlen, "config.json")) goto out;

    if (gen_text) {
        gen = json_loads(gen_text, 0, &je);
        if (!gen || !json_is_object(gen)) {
            snprintf(err, errlen, "generation_config.json: invalid JSON at line %d: %s", je.line,
                     je.text);
            goto out;
        }
        /* generate() uses generation_config's ids over config.json's */
        json_t *b = json_object_get(gen, "bos_token_id");
        if (json_is_integer(b) && json_integer_value(b) >= 0 && json_integer_value(b) < c->vocab)
            c->bos_id = (int)json_integer_value(b);
        if (parse_eos(json_object_get(gen, "eos_token_id"), c, err, errlen,
                      "generation_config.json"))
            goto out;
    }
    rc = 0;
out:
    json_decref(root);
    json_decref(gen);
    return rc;
}

/* HF's _compute_*_parameters, in float32 as torch computes them. */
void model_rope_inv_freq(const model_config *c, int seq_len, float *inv)
{
    int dim = c->head_dim;
    double base = c->rope_theta;
    if (c->rope.type == MODEL_ROPE_DYNAMIC) {
        /* NTK-aware: the base grows once the sequence passes the trained length. */
        int maxp = c->rope.original_max_pos > 0 ? c->rope.original_max_pos : c->max_pos;
        double sl = seq_len > maxp ? seq_len : maxp;
        double f = c->rope.factor;
        base = base * pow(f * sl / maxp - (f - 1.0), (double)dim / (dim - 2));
    }
    for (int i = 0; i < dim / 2; i++) {
        float e = (float)(2 * i) / (float)dim;
        inv[i] = 1.0f / powf((float)base, e);
    }
    if (c->rope.type == MODEL_ROPE_LINEAR) {
        for (int i = 0; i < dim / 2; i++) inv[i] /= c->rope.factor;
    } else if (c->rope.type == MODEL_ROPE_LLAMA3) {
        float factor = c->rope.factor, lo = c->rope.low_freq_factor, hi = c->rope.high_freq_factor;
        float old = (float)c->rope.original_max_pos;
        float low_wl = old / lo, high_wl = old / hi;
        for (int i = 0; i < dim / 2; i++) {
            float wl = (float)(2 * M_PI) / inv[i];
            if (wl > low_wl) {
                inv[i] = inv[i] / factor;
            } else if (!(wl < high_wl)) {
                float smooth = (old / wl - lo) / (hi - lo);
                inv[i] = (1 - smooth) * inv[i] / factor + smooth * inv[i];
            }
        }
    }
}

int model_context_limit(const model_config *c)
{
    if (c->rope.type == MODEL_ROPE_DYNAMIC && c->rope.factor > 1) {
        double lim = (double)c->max_pos * c->rope.factor;
        return lim > MAX_POSITIONS ? MAX_POSITIONS : (int)lim;
    }
    return c->max_pos;
}

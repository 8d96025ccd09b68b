/* Bad checkpoints: each corruption gives a one-line error naming the file and the tensor, a
 * non-zero exit from the CLI, and no crash or out-of-bounds read (the suite also runs under
 * ASan with `make test-san`). Each case starts from the real stories260K files and breaks one
 * thing. */
#include "tests/test.h"
#include "tests/util.h"
#include <jansson.h>

#define SRC "models/stories260K"

/* A copy of stories260K in a fresh directory, with the safetensors header rewritten by `edit`
 * (may be NULL) and the data region cut to `data_keep` bytes (-1: all). */
static const char *make_variant(const char *name, void (*edit)(json_t *hdr), long data_keep,
                                const char *config_override)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp " SRC "/config.json " SRC "/generation_config.json %s/",
             dir, dir);
    if (system(cmd)) return NULL;
    size_t len;
    char *buf = model_read_file(SRC "/model.safetensors", 64u << 20, &len);
    if (!buf) return NULL;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | (uint8_t)buf[i];
    json_t *hdr = json_loadb(buf + 8, hl, 0, NULL);
    if (edit) edit(hdr);
    char *htext = json_dumps(hdr, JSON_COMPACT);
    size_t nh = strlen(htext), data = len - 8 - hl;
    if (data_keep >= 0 && (size_t)data_keep < data) data = data_keep;
    char *out = malloc(8 + nh + data);
    for (int i = 0; i < 8; i++) out[i] = (char)((uint64_t)nh >> (8 * i));
    memcpy(out + 8, htext, nh);
    memcpy(out + 8 + nh, buf + 8 + hl, data);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = t_write_file(path, out, 8 + nh + data);
    if (config_override) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc |= t_write_file(path, config_override, strlen(config_override));
    }
    free(out);
    free(htext);
    json_decref(hdr);
    free(buf);
    return rc ? NULL : dir;
}

/* Load through the CLI; expect failure with one line containing every `needles` entry. */
static void expect_error(const char *dir, const char *const *needles)
{
    REQUIRE(dir);
    char cmd[800], line[1024];
    snprintf(cmd, sizeof cmd, "%s/tandem logits --model %s --ids 1,2,3 --out /dev/null",
             t_build_dir(), dir);
    int rc = t_run(cmd, line, sizeof line);
    CHECK_MSG(rc > 0 && rc < 128, "exit status %d (want a clean non-zero exit)", rc);
    for (const char *const *n = needles; *n; n++)
        CHECK_MSG(strstr(line, *n), "error \"%s\" does not mention \"%s\"", line, *n);
    /* and the library says the same without the CLI */
    char err[1024];
    model *m = model_load(dir, err, sizeof err);
    CHECK(m == NULL);
    model_free(m);
    CHECK(strchr(err, '\n') == NULL);
}

#define T0 "model.layers.0.mlp.up_proj.weight"

static void set_offsets(json_t *hdr, const char *name, long b, long e)
{
    json_t *t = json_object_get(hdr, name);
    json_t *off = json_pack("[I, I]", (json_int_t)b, (json_int_t)e);
    json_object_set_new(t, "data_offsets", off);
}

static void edit_past_end(json_t *h)
{
    json_t *t = json_object_get(h, T0);
    json_int_t b = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    set_offsets(h, T0, (long)b + (1 << 22), (long)b + (1 << 22) + 172 * 64 * 4);
}
static void edit_overlap(json_t *h)
{
    json_t *t = json_object_get(h, "model.layers.0.mlp.gate_proj.weight");
    json_int_t b = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    set_offsets(h, T0, (long)b + 64, (long)b + 64 + 172 * 64 * 4);
}
/* T0 starts inside gate_proj and ends after it, an empty tensor sitting between their starts:
 * checking neighbours only (sorted by start) saw gate_proj, the empty one, T0 and no overlap */
static void edit_overlap_past_empty(json_t *h)
{
    json_t *t = json_object_get(h, "model.layers.0.mlp.gate_proj.weight");
    json_int_t b = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    set_offsets(h, T0, (long)b + 128, (long)b + 128 + 172 * 64 * 4);
    json_object_set_new(h, "extra.empty",
                        json_pack("{s:s, s:[i], s:[I, I]}", "dtype", "F32", "shape", 0,
                                  "data_offsets", b + 64, b + 64));
}
static void edit_shape(json_t *h)
{
    json_object_set_new(json_object_get(h, T0), "shape", json_pack("[i, i]", 64, 172));
}
static void edit_dtype(json_t *h)
{
    json_object_set_new(json_object_get(h, T0), "dtype", json_string("F33"));
}
static void edit_unsupported_dtype(json_t *h)
{
    /* I32 has the same width as F32: the bytes fit, the type does not */
    json_object_set_new(json_object_get(h, T0), "dtype", json_string("I32"));
}
static void edit_size(json_t *h)
{
    json_t *t = json_object_get(h, T0);
    json_int_t b = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    set_offsets(h, T0, (long)b, (long)b + 100);
}
static void edit_missing(json_t *h)
{
    json_object_del(h, T0);
}

TEST(load_error_truncated)
{
    const char *n[] = {"model.safetensors", "past the end", NULL};
    expect_error(make_variant("trunc", NULL, 500000, NULL), n);
}

TEST(load_error_offsets_past_end)
{
    const char *n[] = {"model.safetensors", T0, "past the end", NULL};
    expect_error(make_variant("past", edit_past_end, -1, NULL), n);
}

TEST(load_error_overlapping_tensors)
{
    const char *n[] = {"model.safetensors", "overlaps", "mlp.", NULL};
    expect_error(make_variant("overlap", edit_overlap, -1, NULL), n);
}

TEST(load_error_overlap_past_an_empty_tensor)
{
    const char *n[] = {"model.safetensors", "overlaps", "mlp.", NULL};
    expect_error(make_variant("overlap_empty", edit_overlap_past_empty, -1, NULL), n);
}

TEST(load_error_shape_disagrees_with_config)
{
    const char *n[] = {"model.safetensors", T0, "disagrees with config.json", NULL};
    expect_error(make_variant("shape", edit_shape, -1, NULL), n);
}

TEST(load_error_unknown_dtype)
{
    const char *n[] = {"model.safetensors", T0, "unknown dtype", NULL};
    expect_error(make_variant("dtype", edit_dtype, -1, NULL), n);
    const char *n2[] = {"model.safetensors", T0, "unsupported dtype I32", NULL};
    expect_error(make_variant("dtype2", edit_unsupported_dtype, -1, NULL), n2);
}

TEST(load_error_byte_count)
{
    const char *n[] = {"model.safetensors", T0, "bytes for shape", NULL};
    expect_error(make_variant("size", edit_size, -1, NULL), n);
}

TEST(load_error_missing_tensor)
{
    const char *n[] = {"model.safetensors", T0, "missing", NULL};
    expect_error(make_variant("missing", edit_missing, -1, NULL), n);
}

TEST(load_error_unknown_architecture)
{
    const char *cfg = "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\","
                      "\"hidden_size\":64}";
    const char *n[] = {"config.json", "unsupported architecture", "GPT2LMHeadModel", NULL};
    expect_error(make_variant("arch", NULL, -1, cfg), n);
}

TEST(load_error_header_garbage)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/garbage", t_tmpdir());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp " SRC "/config.json %s/", dir, dir);
    REQUIRE(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    /* header length far past the file */
    const unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    REQUIRE(t_write_file(path, huge, sizeof huge) == 0);
    const char *n[] = {"model.safetensors", "header length", NULL};
    expect_error(dir, n);
    /* header that is not JSON */
    unsigned char bad[24] = {8, 0, 0, 0, 0, 0, 0, 0, 'n', 'o', 't', ' ', 'j', 's', 'o', 'n'};
    REQUIRE(t_write_file(path, bad, 16) == 0);
    const char *n2[] = {"model.safetensors", "not a JSON object", NULL};
    expect_error(dir, n2);
    /* shorter than the length prefix */
    REQUIRE(t_write_file(path, bad, 5) == 0);
    const char *n3[] = {"model.safetensors", "truncated", NULL};
    expect_error(dir, n3);
}

TEST(load_error_bad_shard_name)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/shard", t_tmpdir());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp " SRC "/config.json %s/", dir, dir);
    REQUIRE(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    const char *idx = "{\"weight_map\":{\"model.norm.weight\":\"../../etc/passwd\"}}";
    REQUIRE(t_write_file(path, idx, strlen(idx)) == 0);
    const char *n[] = {"index.json", "model.norm.weight", "bad shard name", NULL};
    expect_error(dir, n);
}

TEST(config_parse_variants)
{
    model_config c;
    char err[256];
    /* rope_parameters spelling (transformers >= 5) with rope_theta inside, eos list */
    const char *a = "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\","
                    "\"hidden_size\":256,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
                    "\"num_key_value_heads\":2,\"intermediate_size\":512,\"vocab_size\":1000,"
                    "\"max_position_embeddings\":131072,\"rms_norm_eps\":1e-5,"
                    "\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":500000.0,"
                    "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                    "\"original_max_position_embeddings\":8192},\"tie_word_embeddings\":true,"
                    "\"bos_token_id\":1,\"eos_token_id\":[2,7,9]}";
    REQUIRE(model_config_parse(a, NULL, &c, err, sizeof err) == 0);
    CHECK_EQ(c.rope.type, MODEL_ROPE_LLAMA3);
    CHECK_NEAR(c.rope_theta, 500000.0, 1e-3);
    CHECK_EQ(c.rope.original_max_pos, 8192);
    CHECK_EQ(c.head_dim, 32);
    CHECK_EQ(c.n_eos, 3);
    CHECK_EQ(c.eos_ids[2], 9);
    CHECK(c.tie_embeddings);
    /* generation_config.json overrides eos */
    REQUIRE(model_config_parse(a, "{\"eos_token_id\": 5}", &c, err, sizeof err) == 0);
    CHECK_EQ(c.n_eos, 1);
    CHECK_EQ(c.eos_ids[0], 5);
    /* bounds */
    const char *b = "{\"hidden_size\":-4,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
                    "\"intermediate_size\":512,\"vocab_size\":1000}";
    CHECK(model_config_parse(b, NULL, &c, err, sizeof err) != 0);
    CHECK(strstr(err, "hidden_size") != NULL);
    const char *d = "{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
                    "\"num_key_value_heads\":3,\"intermediate_size\":512,\"vocab_size\":1000}";
    CHECK(model_config_parse(d, NULL, &c, err, sizeof err) != 0);
    CHECK(strstr(err, "num_key_value_heads") != NULL);
    const char *e = "{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
                    "\"intermediate_size\":512,\"vocab_size\":1000,"
                    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}}";
    CHECK(model_config_parse(e, NULL, &c, err, sizeof err) != 0);
    CHECK(strstr(err, "yarn") != NULL);
    /* Qwen2 implies q/k/v biases; Mistral sliding window */
    const char *q = "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\","
                    "\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
                    "\"num_key_value_heads\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                    "\"sliding_window\":32,\"use_sliding_window\":false}";
    REQUIRE(model_config_parse(q, NULL, &c, err, sizeof err) == 0);
    CHECK(c.attn_bias);
    CHECK_EQ(c.sliding_window, 0);
    /* Qwen2 with use_sliding_window windows the layers from max_window_layers (default 28) on,
     * as transformers' Qwen2Config builds layer_types: none of 2 layers by default, all from 0,
     * some of them refused (the backends run one window for all layers); layer_types wins */
    static const struct {
        const char *extra;
        int ok, window;
    } qw[] = {
        {"", 1, 0},
        {",\"max_window_layers\":0", 1, 32},
        {",\"max_window_layers\":1", 0, 0},
        {",\"max_window_layers\":2", 1, 0},
        {",\"layer_types\":[\"sliding_attention\",\"sliding_attention\"]", 1, 32},
        {",\"layer_types\":[\"full_attention\",\"sliding_attention\"]", 0, 0},
        {",\"layer_types\":[\"sliding_attention\"]", 0, 0},
    };
    for (size_t i = 0; i < sizeof qw / sizeof qw[0]; i++) {
        char js[1024];
        snprintf(
            js, sizeof js,
            "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":64,"
            "\"num_hidden_layers\":2,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
            "\"intermediate_size\":128,\"vocab_size\":100,\"max_position_embeddings\":128,"
            "\"sliding_window\":32,\"use_sliding_window\":true%s}",
            qw[i].extra);
        int rc = model_config_parse(js, NULL, &c, err, sizeof err);
        CHECK_MSG((rc == 0) == qw[i].ok, "case %zu: %s", i, rc ? err : "accepted");
        if (!rc)
            CHECK_MSG(c.sliding_window == qw[i].window, "case %zu: window %d", i, c.sliding_window);
        if (rc)
            CHECK_MSG(strstr(err, "sliding window on 1 of 2 layers") ||
                          strstr(err, "layer_types has 1"),
                      "case %zu: %s", i, err);
    }
}

/* Inverse frequencies against values computed independently in float64 from the published
 * formulas (Llama-3.1: theta 500000, factor 8, low 1, high 4, original 8192, head_dim 128). */
TEST(rope_llama3_inv_freq)
{
    model_config c = {0};
    c.head_dim = 128;
    c.rope_theta = 500000.0f;
    c.rope.type = MODEL_ROPE_LLAMA3;
    c.rope.factor = 8;
    c.rope.low_freq_factor = 1;
    c.rope.high_freq_factor = 4;
    c.rope.original_max_pos = 8192;
    float inv[64];
    model_rope_inv_freq(&c, 0, inv);
    /* i = 0: high frequency, untouched; i = 40: wavelength 2*pi*5e5^(80/128) ~ 2.3e4 > 8192:
     * divided by 8; i = 30: medium band, smoothed. */
    CHECK_NEAR(inv[0], 1.0, 1e-7);
    double f40 = 1.0 / pow(500000.0, 80.0 / 128) / 8;
    CHECK_NEAR(inv[40] / f40, 1.0, 1e-5);
    double f30 = 1.0 / pow(500000.0, 60.0 / 128), wl = 2 * M_PI / f30;
    double smooth = (8192 / wl - 1) / (4 - 1);
    double e30 = (1 - smooth) * f30 / 8 + smooth * f30;
    CHECK(wl > 8192 / 4.0 && wl < 8192);
    CHECK_NEAR(inv[30] / e30, 1.0, 1e-5);
    /* linear and dynamic */
    c.rope.type = MODEL_ROPE_LINEAR;
    c.rope.factor = 4;
    model_rope_inv_freq(&c, 0, inv);
    CHECK_NEAR(inv[10] / (1.0 / pow(500000.0, 20.0 / 128) / 4), 1.0, 1e-5);
    c.rope.type = MODEL_ROPE_DYNAMIC;
    c.rope.factor = 2;
    c.max_pos = 4096;
    c.rope.original_max_pos = 4096;
    model_rope_inv_freq(&c, 1000, inv); /* below the trained length: plain */
    CHECK_NEAR(inv[10] / (1.0 / pow(500000.0, 20.0 / 128)), 1.0, 1e-5);
    model_rope_inv_freq(&c, 8192, inv);
    double base = 500000.0 * pow(2.0 * 8192 / 4096 - 1, 128.0 / 126);
    CHECK_NEAR(inv[10] / (1.0 / pow(base, 20.0 / 128)), 1.0, 1e-5);
}

/* tests/fuzz/harness/tiny_model.c — see tiny_model.h. */
#include "tests/fuzz/harness/tiny_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char tiny_config_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 8,\n"
    " \"intermediate_size\": 16, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,\n"
    " \"head_dim\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 32,\n"
    " \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,\n"
    " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,\n"
    "  \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32},\n"
    " \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"bos_token_id\": 1,\n"
    " \"eos_token_id\": [2, 3], \"torch_dtype\": \"float32\"}\n";

const char tiny_gen_json[] = "{\"bos_token_id\": 1, \"eos_token_id\": 2}\n";

const char *const tiny_shard_names[2] = {"model-00001-of-00002.safetensors",
                                         "model-00002-of-00002.safetensors"};

/* shard of each tensor: embeddings, norm and layer 0 in the first, layer 1 and lm_head in the
 * second (the index below says the same) */
static const struct {
    const char *name;
    const char *dtype;
    int esize;
    int rows, cols; /* cols 0: 1-D */
    int shard;
} tensors[] = {
    {"model.embed_tokens.weight", "F32", 4, 32, 8, 0},
    {"model.norm.weight", "F32", 4, 8, 0, 0},
    {"model.layers.0.input_layernorm.weight", "F32", 4, 8, 0, 0},
    {"model.layers.0.self_attn.q_proj.weight", "F32", 4, 8, 8, 0},
    {"model.layers.0.self_attn.k_proj.weight", "F32", 4, 4, 8, 0},
    {"model.layers.0.self_attn.v_proj.weight", "F32", 4, 4, 8, 0},
    {"model.layers.0.self_attn.o_proj.weight", "F32", 4, 8, 8, 0},
    {"model.layers.0.post_attention_layernorm.weight", "F32", 4, 8, 0, 0},
    {"model.layers.0.mlp.gate_proj.weight", "F32", 4, 16, 8, 0},
    {"model.layers.0.mlp.up_proj.weight", "F32", 4, 16, 8, 0},
    {"model.layers.0.mlp.down_proj.weight", "F32", 4, 8, 16, 0},
    {"model.layers.1.input_layernorm.weight", "BF16", 2, 8, 0, 1},
    {"model.layers.1.self_attn.q_proj.weight", "BF16", 2, 8, 8, 1},
    {"model.layers.1.self_attn.k_proj.weight", "BF16", 2, 4, 8, 1},
    {"model.layers.1.self_attn.v_proj.weight", "BF16", 2, 4, 8, 1},
    {"model.layers.1.self_attn.o_proj.weight", "BF16", 2, 8, 8, 1},
    {"model.layers.1.post_attention_layernorm.weight", "BF16", 2, 8, 0, 1},
    {"model.layers.1.mlp.gate_proj.weight", "BF16", 2, 16, 8, 1},
    {"model.layers.1.mlp.up_proj.weight", "BF16", 2, 16, 8, 1},
    {"model.layers.1.mlp.down_proj.weight", "BF16", 2, 8, 16, 1},
    {"lm_head.weight", "F16", 2, 32, 8, 1},
};
enum { N_TENSORS = sizeof tensors / sizeof tensors[0] };

const char tiny_index_json[] =
    "{\"metadata\": {\"total_size\": 5120}, \"weight_map\": {\n"
    " \"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.norm.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.input_layernorm.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.self_attn.q_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.self_attn.k_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.self_attn.v_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.self_attn.o_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.post_attention_layernorm.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.mlp.gate_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.mlp.up_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.0.mlp.down_proj.weight\": \"model-00001-of-00002.safetensors\",\n"
    " \"model.layers.1.input_layernorm.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.self_attn.q_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.self_attn.k_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.self_attn.v_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.self_attn.o_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.post_attention_layernorm.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.mlp.gate_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.mlp.up_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"model.layers.1.mlp.down_proj.weight\": \"model-00002-of-00002.safetensors\",\n"
    " \"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}\n";

size_t tiny_safetensors(int shard, uint8_t **out)
{
    char hdr[8192];
    size_t h = 0, data = 0;
    h += snprintf(hdr + h, sizeof hdr - h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < N_TENSORS; i++) {
        if (shard >= 0 && tensors[i].shard != shard) continue;
        size_t bytes =
            (size_t)tensors[i].rows * (tensors[i].cols ? tensors[i].cols : 1) * tensors[i].esize;
        char shape[32];
        if (tensors[i].cols)
            snprintf(shape, sizeof shape, "%d,%d", tensors[i].rows, tensors[i].cols);
        else
            snprintf(shape, sizeof shape, "%d", tensors[i].rows);
        h += snprintf(hdr + h, sizeof hdr - h,
                      ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                      tensors[i].name, tensors[i].dtype, shape, data, data + bytes);
        data += bytes;
    }
    h += snprintf(hdr + h, sizeof hdr - h, "}");
    while (h % 8) hdr[h++] = ' '; /* the data region 8-byte aligned, as the Hub's files are */
    uint8_t *p = calloc(1, 8 + h + data);
    if (!p) abort();
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(p + 8, hdr, h);
    /* small non-zero weights: 1.0 in each dtype's bit pattern in every other element */
    for (size_t i = 0; i < data; i += 8) p[8 + h + i + 1] = 0x3c;
    *out = p;
    return 8 + h + data;
}

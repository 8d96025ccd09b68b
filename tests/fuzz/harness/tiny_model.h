/* tests/fuzz/harness/tiny_model.h — a valid, tiny Llama checkpoint built in memory (2 layers,
 * hidden 8, GQA 2:1, vocab 32, F32/BF16/F16 tensors), whole or in two shards: the files the
 * model-directory harness keeps valid while it fuzzes one of them, and its seeds.
 *
 * Threads: any; the builders allocate, the caller frees. */
#ifndef TANDEM_FUZZ_TINY_MODEL_H
#define TANDEM_FUZZ_TINY_MODEL_H
#include <stddef.h>
#include <stdint.h>

extern const char tiny_config_json[];
extern const char tiny_gen_json[];
/* model.safetensors.index.json naming the two shards below */
extern const char tiny_index_json[];
extern const char *const tiny_shard_names[2];

/* The safetensors bytes of every tensor (shard -1), or of shard 0 or 1. Returns the size and a
 * malloc'ed buffer in *out. */
size_t tiny_safetensors(int shard, uint8_t **out);

#endif

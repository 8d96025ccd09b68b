/* model/ckpt/tls_channels.h — the channel-calibration sidecar of a model directory: which channels
 * of each (layer, KV head) AsyncTLS's token selection labels (sparse/tls.h, level 2).
 *
 * `tandem calibrate-channels --model DIR` writes it as DIR/tandem-channels.bin (or --out FILE);
 * a device with sparse decode reads it. Format version 1, every integer little-endian:
 *
 *   offset  size  field
 *   0       8     magic "TDMCHN01"
 *   8       4     u32 version = 1
 *   12      4     u32 n_layers      1 .. 4096       (the model's num_hidden_layers)
 *   16      4     u32 n_kv_heads    1 .. 1024       (the model's num_key_value_heads)
 *   20      4     u32 head_dim      2 .. 1024       (the model's head_dim)
 *   24      4     u32 channels r    even, 2 .. head_dim
 *   28      4     u32 calib_tokens  tokens per layer the importances came from (information)
 *   32      2*L*H*r  u16 channel ids, (layer, kv head, r): each < head_dim, strictly ascending
 *                 within one (layer, kv head)
 *   end-4   4     u32 CRC-32C (proto/crc32c.h) of every byte before it
 *
 * The file is exactly 36 + 2 * n_layers * n_kv_heads * r bytes and at most
 * MODEL_CHANNELS_MAX_BYTES; anything else is refused with a message (never a crash: fuzzed by
 * tests/fuzz/harness/fuzz_tls_channels.c).
 *
 * Threads: no shared state; any thread. Errors: 0, or -1 with a one-line message in err. */
#ifndef TANDEM_MODEL_TLS_CHANNELS_H
#define TANDEM_MODEL_TLS_CHANNELS_H
#include "model/ckpt/model.h"
#include <stddef.h>
#include <stdint.h>

#define MODEL_CHANNELS_FILE "tandem-channels.bin"
#define MODEL_CHANNELS_MAX_BYTES (64u << 20) /* 32 MiB of ids: 4096 layers x 64 heads x 64 */

typedef struct model_channels {
    int n_layers, n_kv_heads, head_dim, r;
    uint32_t calib_tokens;
    uint16_t *idx; /* (n_layers, n_kv_heads, r), heap (model_channels_free) */
} model_channels;

/* Parses a whole file's bytes. out is filled only on success. */
int model_channels_parse(const uint8_t *buf, size_t len, model_channels *out, char *err,
                         size_t errlen);
/* Reads and parses a file (at most MODEL_CHANNELS_MAX_BYTES). */
int model_channels_load(const char *path, model_channels *out, char *err, size_t errlen);
/* The file's bytes for c (heap, *len bytes; free()). c must be valid as parse checks it. */
uint8_t *model_channels_encode(const model_channels *c, size_t *len);
/* Writes c to path (through path.tmp and a rename, so a reader never sees half a file). */
int model_channels_save(const char *path, const model_channels *c, char *err, size_t errlen);
void model_channels_free(model_channels *c);
/* 0 when c fits the model's shape (layers, KV heads, head_dim), else -1 with why. */
int model_channels_match(const model_channels *c, const model_config *cfg, char *err,
                         size_t errlen);
/* dir + "/" + MODEL_CHANNELS_FILE into out (truncated to n). */
void model_channels_path(const char *dir, char *out, size_t n);

#endif

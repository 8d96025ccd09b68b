/* tests/fuzz/harness/fuzz_tls_channels.c — libFuzzer harness for the channel sidecar reader
 * (model/ckpt/tls_channels.c), which reads a file from a model directory.
 *
 * Input: byte 0 configures the run, the rest is the file.
 *   bit 0  when set, the harness first rewrites the trailing CRC-32C to match the bytes before
 *          it, so that mutations reach the checks behind the checksum
 * Promises checked on success: the shape within the header's documented bounds, the exact size,
 * every id below head_dim and ascending per (layer, head), and encoding the result gives back
 * the input byte for byte. */
#include "model/ckpt/tls_channels.h"
#include "proto/crc32c.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    size_t len = n - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, len);
    if ((data[0] & 1) && len >= 4) {
        uint32_t c = proto_crc32c(0, buf, len - 4);
        for (int i = 0; i < 4; i++) buf[len - 4 + i] = (uint8_t)(c >> (8 * i));
    }
    model_channels ch;
    char err[200];
    err[0] = 0;
    if (model_channels_parse(buf, len, &ch, err, sizeof err) == 0) {
        CHECK(ch.n_layers >= 1 && ch.n_layers <= 4096 && ch.n_kv_heads >= 1 &&
              ch.n_kv_heads <= 1024 && ch.head_dim >= 2 && ch.head_dim <= 1024 && ch.r >= 2 &&
              ch.r % 2 == 0 && ch.r <= ch.head_dim);
        size_t cnt = (size_t)ch.n_layers * ch.n_kv_heads * ch.r;
        CHECK(len == 36 + 2 * cnt);
        for (size_t i = 0; i < cnt; i++) {
            CHECK(ch.idx[i] < ch.head_dim);
            if (i % ch.r) CHECK(ch.idx[i] > ch.idx[i - 1]);
        }
        size_t elen;
        uint8_t *e = model_channels_encode(&ch, &elen);
        CHECK(e && elen == len && memcmp(e, buf, len) == 0);
        free(e);
        model_channels_free(&ch);
    } else {
        CHECK(err[0] != 0);
    }
    free(buf);
    return 0;
}

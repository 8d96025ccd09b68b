/* model/ckpt/tls_channels.c — the channel sidecar's reader and writer (see tls_channels.h). */
#include "model/ckpt/tls_channels.h"
#include "proto/crc32c.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR 32
static const char MAGIC[8] = {'T', 'D', 'M', 'C', 'H', 'N', '0', '1'};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

int model_channels_parse(const uint8_t *buf, size_t len, model_channels *out, char *err,
                         size_t errlen)
{
    const char *why = NULL;
    uint32_t L = 0, H = 0, D = 0, r = 0;
    if (!buf || len < HDR + 4) why = "shorter than its header";
    else if (memcmp(buf, MAGIC, 8)) why = "not a channel file (bad magic)";
    else if (rd32(buf + 8) != 1) why = "unknown version (this build reads 1)";
    else {
        L = rd32(buf + 12), H = rd32(buf + 16), D = rd32(buf + 20), r = rd32(buf + 24);
        if (L < 1 || L > 4096) why = "n_layers out of 1 .. 4096";
        else if (H < 1 || H > 1024) why = "n_kv_heads out of 1 .. 1024";
        else if (D < 2 || D > 1024) why = "head_dim out of 2 .. 1024";
        else if (r < 2 || r % 2 || r > D) why = "channels not even and 2 .. head_dim";
        else if ((uint64_t)HDR + 4 + 2ull * L * H * r != (uint64_t)len)
            why = "size does not match its header";
        else if (len > MODEL_CHANNELS_MAX_BYTES) why = "larger than the bound (64 MiB)";
        else if (proto_crc32c(0, buf, len - 4) != rd32(buf + len - 4)) why = "CRC mismatch";
    }
    if (!why) {
        const uint8_t *p = buf + HDR;
        for (uint64_t i = 0; i < (uint64_t)L * H && !why; i++)
            for (uint32_t j = 0; j < r; j++) {
                uint32_t c = (uint32_t)p[(i * r + j) * 2] | (uint32_t)p[(i * r + j) * 2 + 1] << 8;
                uint32_t prev = j ? (uint32_t)p[(i * r + j - 1) * 2] |
                                        (uint32_t)p[(i * r + j - 1) * 2 + 1] << 8
                                  : 0;
                if (c >= D || (j && c <= prev)) {
                    why = "a channel id out of range or not ascending";
                    break;
                }
            }
    }
    if (why) {
        if (err) snprintf(err, errlen, "channel file: %s", why);
        return -1;
    }
    uint16_t *idx = malloc(sizeof(uint16_t) * (size_t)L * H * r);
    if (!idx) {
        if (err) snprintf(err, errlen, "channel file: out of memory");
        return -1;
    }
    for (size_t i = 0; i < (size_t)L * H * r; i++)
        idx[i] = (uint16_t)(buf[HDR + 2 * i] | buf[HDR + 2 * i + 1] << 8);
    *out = (model_channels){.n_layers = (int)L, .n_kv_heads = (int)H, .head_dim = (int)D,
                            .r = (int)r, .calib_tokens = rd32(buf + 28), .idx = idx};
    return 0;
}

int model_channels_load(const char *path, model_channels *out, char *err, size_t errlen)
{
    size_t len = 0;
    char *buf = model_read_file(path, MODEL_CHANNELS_MAX_BYTES, &len);
    if (!buf) {
        if (err) snprintf(err, errlen, "%s: %s", path, strerror(errno ? errno : EIO));
        return -1;
    }
    char why[200];
    int rc = model_channels_parse((const uint8_t *)buf, len, out, why, sizeof why);
    if (rc && err) snprintf(err, errlen, "%s: %s", path, why);
    free(buf);
    return rc;
}

uint8_t *model_channels_encode(const model_channels *c, size_t *len)
{
    size_t n = (size_t)c->n_layers * c->n_kv_heads * c->r, total = HDR + 2 * n + 4;
    uint8_t *b = malloc(total);
    if (!b) return NULL;
    memcpy(b, MAGIC, 8);
    wr32(b + 8, 1);
    wr32(b + 12, (uint32_t)c->n_layers);
    wr32(b + 16, (uint32_t)c->n_kv_heads);
    wr32(b + 20, (uint32_t)c->head_dim);
    wr32(b + 24, (uint32_t)c->r);
    wr32(b + 28, c->calib_tokens);
    for (size_t i = 0; i < n; i++) {
        b[HDR + 2 * i] = (uint8_t)c->idx[i];
        b[HDR + 2 * i + 1] = (uint8_t)(c->idx[i] >> 8);
    }
    wr32(b + total - 4, proto_crc32c(0, b, total - 4));
    *len = total;
    return b;
}

int model_channels_save(const char *path, const model_channels *c, char *err, size_t errlen)
{
    size_t len;
    uint8_t *b = model_channels_encode(c, &len);
    char tmp[4200];
    if (!b || snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(b);
        if (err) snprintf(err, errlen, "%s: out of memory or path too long", path);
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(b, 1, len, f) == len;
    if (f && fclose(f)) ok = 0;
    if (ok && rename(tmp, path)) ok = 0;
    if (!ok) {
        if (err) snprintf(err, errlen, "%s: %s", path, strerror(errno));
        remove(tmp);
    }
    free(b);
    return ok ? 0 : -1;
}

void model_channels_free(model_channels *c)
{
    free(c->idx);
    c->idx = NULL;
}

int model_channels_match(const model_channels *c, const model_config *cfg, char *err,
                         size_t errlen)
{
    if (c->n_layers == cfg->n_layers && c->n_kv_heads == cfg->n_kv_heads &&
        c->head_dim == cfg->head_dim)
        return 0;
    if (err)
        snprintf(err, errlen,
                 "channel file is for %d layers x %d KV heads x head_dim %d, the model has "
                 "%d x %d x %d",
                 c->n_layers, c->n_kv_heads, c->head_dim, cfg->n_layers, cfg->n_kv_heads,
                 cfg->head_dim);
    return -1;
}

void model_channels_path(const char *dir, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, MODEL_CHANNELS_FILE);
}

/* tests/fuzz/harness/mkseeds.c — writes the seeds of the two harnesses whose valid inputs are
 * binary (the KV wire stream, the model directory's files), so that they can be remade:
 *   build/fuzz/mkseeds tests/fuzz/corpus
 * writes corpus/kv_wire/seed_* and corpus/model_load/seed_*. The others' seeds are text files
 * copied from tests/data and models/ (tests/fuzz/README.md says which). */
#include "proto/kv_wire.h"
#include "tests/fuzz/harness/tiny_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(const char *dir, const char *sub, const char *name, uint8_t first, const void *data,
                size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(&first, 1, 1, fp) != 1 || (n && fwrite(data, 1, n, fp) != n) || fclose(fp)) {
        perror(path);
        exit(1);
    }
}

/* A stream of the harness's shape (2 layers x 2 heads x 32) carrying `n_runs` runs, in
 * version 2 (blocks of bt positions) or 1 (bt 0). */
static size_t kv_stream_v(enum proto_kv_dtype dt, const int *runs, int n_runs, int pos0, int bt,
                          uint8_t *out, size_t cap)
{
    proto_kv_header h = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 32, .pos0 = pos0, .dtype = dt,
                         .block_tokens = bt, .version = bt ? 2 : 1};
    for (int i = 0; i < 32; i++) h.fingerprint[i] = (uint8_t)(0xa0 + i);
    for (int r = 0; r < n_runs; r++) h.n_tokens += runs[r];
    if (proto_kv_header_write(&h, out) != (int)proto_kv_header_bytes(&h)) exit(1);
    size_t n = proto_kv_header_bytes(&h);
    static uint8_t vals[64 * 2 * 32];
    static uint16_t scales[64 * 2 * 32];
    for (size_t i = 0; i < sizeof vals; i++) vals[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < sizeof scales / 2; i++) scales[i] = (uint16_t)(0x2000 + i);
    int p = pos0;
    for (int r = 0; r < n_runs; r++) {
        for (int l = 0; l < 2; l++) {
            proto_kv_layer c = {.layer = l,
                                .pos0 = p,
                                .n_tokens = runs[r],
                                .n_kv_heads = 2,
                                .head_dim = 32,
                                .dtype = dt,
                                .k = vals,
                                .v = vals + 7,
                                .k_scale = scales,
                                .v_scale = scales + 3};
            long long w = proto_kv_chunk_write(&h, &c, out + n, cap - n);
            if (w < 0) exit(1);
            n += (size_t)w;
        }
        p += runs[r];
    }
    return n;
}

static size_t kv_stream(enum proto_kv_dtype dt, const int *runs, int n_runs, int pos0, uint8_t *out,
                        size_t cap)
{
    return kv_stream_v(dt, runs, n_runs, pos0, 16, out, cap);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mkseeds CORPUS_DIR (with kv_wire/ and model_load/ in it)\n");
        return 2;
    }
    const char *dir = argv[1];
    static uint8_t s[1 << 16];
    int two[2] = {3, 2}, one[1] = {4};
    /* config byte: see fuzz_kv_wire.c (dtype, piece size, fingerprint, odd address, raw CRCs) */
    put(dir, "kv_wire", "seed_int8_two_runs", 0x00, s,
        kv_stream(PROTO_KV_INT8, two, 2, 100, s, sizeof s));
    put(dir, "kv_wire", "seed_int8_pieces_fp", 0x21 | 3 << 2, s,
        kv_stream(PROTO_KV_INT8, two, 2, 0, s, sizeof s));
    put(dir, "kv_wire", "seed_int4_one_run", 0x02 | 0x40, s,
        kv_stream(PROTO_KV_INT4, one, 1, 7, s, sizeof s));
    put(dir, "kv_wire", "seed_int4_raw_crc", 0x80 | 1 << 2, s,
        kv_stream(PROTO_KV_INT4, two, 2, 4000, s, sizeof s));
    size_t n = kv_stream(PROTO_KV_INT8, two, 2, 100, s, sizeof s);
    put(dir, "kv_wire", "seed_int8_truncated", 0x00 | 6 << 2, s, n - 100);
    /* blocks of 3 (runs cross their boundaries), and version 1 streams (still read) */
    put(dir, "kv_wire", "seed_int8_blocks_of_3", 0x01 | 2 << 2, s,
        kv_stream_v(PROTO_KV_INT8, two, 2, 101, 3, s, sizeof s));
    put(dir, "kv_wire", "seed_v1_int8_two_runs", 0x00, s,
        kv_stream_v(PROTO_KV_INT8, two, 2, 100, 0, s, sizeof s));
    put(dir, "kv_wire", "seed_v1_int4_fp", 0x22 | 4 << 2, s,
        kv_stream_v(PROTO_KV_INT4, one, 1, 30, 0, s, sizeof s));

    /* selector byte: see fuzz_model_load.c */
    put(dir, "model_load", "seed_config", 0, tiny_config_json, strlen(tiny_config_json));
    put(dir, "model_load", "seed_generation_config", 1, tiny_gen_json, strlen(tiny_gen_json));
    uint8_t *st;
    n = tiny_safetensors(-1, &st);
    put(dir, "model_load", "seed_safetensors", 2, st, n);
    free(st);
    put(dir, "model_load", "seed_index", 3, tiny_index_json, strlen(tiny_index_json));
    n = tiny_safetensors(0, &st);
    put(dir, "model_load", "seed_shard", 4, st, n);
    free(st);
    return 0;
}

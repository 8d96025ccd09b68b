/* tools/fpga_emu_bench.c — the emulated U280's PCIe model and the modeled time to ship a
 * prompt's quantized KV cache into HBM, for real model shapes.
 *
 *   build/fpga_emu_bench [--lib build/libxrt_emu.so] [--max-gib 4]
 *
 * Part 1 prints the sync model (fixed cost + bytes at 11 GB/s, fpga/xrt/u280.h) for a range of
 * sizes, beside what the emulator's memcpy takes on this machine. Part 2 ships KV the way an
 * import does: one layer's floats are quantized on the CPU (cpu/kv_quant.c), serialized into a
 * wire chunk (proto/kv_wire.c), and for each layer the chunk is validated by the streaming
 * reader, written into that layer's BO (xrtBOWrite) and synced to HBM; the modeled PCIe time
 * comes from the emulator's card stats. Shapes whose KV does not fit one card's HBM, or whose
 * host copies would exceed --max-gib, are priced with the same model without running. */
#include "cpu/kv_quant.h"
#include "fpga/xrt_load.h"
#include "proto/kv_wire.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sync_table(fpga_xrt *x, xrtDeviceHandle d)
{
    printf("## BO sync (either direction): model vs the emulator's memcpy here\n\n");
    printf("| bytes | modeled | modeled GB/s | emulator wall |\n|---:|---:|---:|---:|\n");
    const uint64_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 256ULL << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t n = sizes[i];
        xrtBufferHandle b;
        if (fpga_xrt_bo_alloc(x, d, n, 0, 0, &b)) {
            fprintf(stderr, "%s\n", fpga_xrt_error());
            return;
        }
        void *m;
        fpga_xrt_bo_map(x, b, &m);
        memset(m, 1, n); /* fault the host pages in outside the timing */
        fpga_xrt_bo_sync(x, b, XCL_BO_SYNC_BO_TO_DEVICE, n, 0);
        int reps = n <= (1 << 20) ? 200 : 5;
        double t0 = now_s();
        for (int r = 0; r < reps; r++) fpga_xrt_bo_sync(x, b, XCL_BO_SYNC_BO_TO_DEVICE, n, 0);
        double wall = (now_s() - t0) / reps;
        uint64_t model = fpga_xrt_emu_model_sync_ns(x, n);
        printf("| %llu | %.1f us | %.2f | %.1f us |\n", (unsigned long long)n, model / 1e3,
               n / (double)model, wall * 1e6);
        fpga_xrt_bo_free(x, b);
    }
    printf("\n");
}

typedef struct shape {
    const char *name;
    int layers, kv_heads, head_dim;
} shape;

static void ship(fpga_xrt *x, xrtDeviceHandle d, const shape *m, int tokens,
                 enum proto_kv_dtype dt, double max_gib)
{
    proto_kv_payload_layout L;
    proto_kv_payload_layout_of(dt, tokens, m->kv_heads, m->head_dim, &L);
    /* One BO per layer holds its chunk payload; a payload over 256 MiB is split over BOs in
     * consecutive banks (one sync each). */
    uint64_t per_bo = FPGA_U280_HBM_BANK_BYTES;
    uint64_t bos = (L.total + per_bo - 1) / per_bo;
    uint64_t total = (uint64_t)L.total * m->layers;
    uint64_t model_ns = 0;
    for (uint64_t i = 0; i < bos; i++) {
        uint64_t part = i + 1 < bos ? per_bo : L.total - i * per_bo;
        model_ns += fpga_xrt_emu_model_sync_ns(x, part);
    }
    model_ns *= (uint64_t)m->layers;
    int fits = bos * m->layers <= FPGA_U280_HBM_BANKS && L.total <= per_bo * bos;
    const char *dts = dt == PROTO_KV_INT8 ? "int8" : "int4";
    printf("| %s | %d | %s | %.1f MiB | %.3f GiB | %.2f ms | %.1f ms | %s |", m->name, tokens, dts,
           L.total / 1048576.0, total / 1073741824.0, model_ns / 1e6 / m->layers, model_ns / 1e6,
           fits ? "yes" : "no");
    if (!fits || 2.0 * total / 1073741824.0 > max_gib || bos > 1) {
        printf(" model only |\n");
        return;
    }
    /* One layer of floats, quantized and serialized once; every layer ships the same bytes
     * (patched layer index, fresh checksums) through the reader into its own bank. */
    size_t nv = (size_t)tokens * m->kv_heads * m->head_dim;
    float *k = malloc(nv * 4), *v = malloc(nv * 4);
    size_t qbytes = cpu_kv_layer_bytes(dt, tokens, m->kv_heads, m->head_dim);
    void *q = aligned_alloc(64, (qbytes + 63) & ~(size_t)63);
    uint8_t *wire = aligned_alloc(64, PROTO_KV_HEADER_BYTES + PROTO_KV_CHUNK_HEADER_BYTES + L.total);
    unsigned st = 1;
    for (size_t i = 0; i < nv; i++) {
        st = st * 1664525u + 1013904223u;
        k[i] = (float)(int)(st >> 16) / 16384.0f - 2.0f;
        v[i] = (float)(int)(st >> 8 & 0xffff) / 65536.0f - 0.5f;
    }
    double t0 = now_s();
    proto_kv_layer c;
    cpu_kv_quantize_layer(dt, k, v, 0, 0, tokens, m->kv_heads, m->head_dim, q, qbytes, &c);
    double t_quant = now_s() - t0;
    xrtBufferHandle bo[FPGA_U280_HBM_BANKS] = {0};
    fpga_emu_card_stats before, after;
    fpga_xrt_emu_card_stats(x, d, &before);
    double t_wire = 0, t_import = 0;
    int ok = 1;
    for (int l = 0; l < m->layers && ok; l++) {
        if (fpga_xrt_bo_alloc(x, d, L.total, 0, (uint32_t)l, &bo[l])) {
            fprintf(stderr, "layer %d: %s\n", l, fpga_xrt_error());
            ok = 0;
            break;
        }
        t0 = now_s();
        /* A one-layer stream per layer keeps the buffer small; the reader checks all of it. */
        proto_kv_header h = {.n_layers = 1, .n_kv_heads = m->kv_heads, .head_dim = m->head_dim,
                             .n_tokens = tokens, .dtype = dt, .block_tokens = 16};
        proto_kv_header_write(&h, wire);
        proto_kv_chunk_write(&h, &c, wire + PROTO_KV_HEADER_BYTES, PROTO_KV_CHUNK_HEADER_BYTES + L.total);
        t_wire += now_s() - t0;
        t0 = now_s();
        const uint8_t *payload = wire + PROTO_KV_HEADER_BYTES + PROTO_KV_CHUNK_HEADER_BYTES;
        proto_kv_expect e = {.n_layers = 1, .n_kv_heads = m->kv_heads, .head_dim = m->head_dim,
                             .max_tokens = tokens};
        proto_kv_reader *r = proto_kv_reader_new(&e, NULL, NULL);
        ok = proto_kv_reader_feed(r, wire, PROTO_KV_HEADER_BYTES + PROTO_KV_CHUNK_HEADER_BYTES +
                                               L.total) == 0 &&
             proto_kv_reader_finish(r) == 0 &&
             fpga_xrt_bo_write(x, bo[l], payload, L.total, 0) == 0 &&
             fpga_xrt_bo_sync(x, bo[l], XCL_BO_SYNC_BO_TO_DEVICE, L.total, 0) == 0;
        proto_kv_reader_free(r);
        t_import += now_s() - t0;
    }
    fpga_xrt_emu_card_stats(x, d, &after);
    for (int l = 0; l < m->layers; l++)
        if (bo[l]) fpga_xrt_bo_free(x, bo[l]);
    if (ok)
        printf(" emulated: %.1f ms modeled; here: quantize %.0f ms/layer, serialize %.0f ms, "
               "check+write+sync %.0f ms |\n",
               (after.sync_modeled_ns - before.sync_modeled_ns) / 1e6, t_quant * 1e3,
               t_wire * 1e3, t_import * 1e3);
    else
        printf(" failed |\n");
    free(k);
    free(v);
    free(q);
    free(wire);
}

int main(int argc, char **argv)
{
    const char *lib = "build/libxrt_emu.so";
    double max_gib = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lib") && i + 1 < argc) lib = argv[++i];
        else if (!strcmp(argv[i], "--max-gib") && i + 1 < argc) max_gib = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--lib PATH] [--max-gib N]\n", argv[0]);
            return 2;
        }
    }
    char err[512];
    fpga_xrt *x = fpga_xrt_new(lib, err, sizeof err);
    if (!x || !fpga_xrt_is_emulator(x)) {
        fprintf(stderr, "%s\n", x ? "not the emulator" : err);
        return 1;
    }
    xrtDeviceHandle d;
    if (fpga_xrt_device_open(x, 0, &d)) {
        fprintf(stderr, "%s\n", fpga_xrt_error());
        return 1;
    }
    printf("# fpga_emu_bench: U280 timing model (fpga/xrt/u280.h)\n\n");
    printf("HBM %.3f GB/s per pseudo-channel x %.2f utilisation, %d cycles per memory command at "
           "%.0f MHz, %.0f us per run; PCIe %.0f GB/s + %.0f us per sync.\n\n",
           FPGA_U280_HBM_PC_BPS / 1e9, FPGA_U280_HBM_UTIL, FPGA_U280_CMD_CYCLES,
           FPGA_U280_KERNEL_HZ / 1e6, FPGA_U280_RUN_OVERHEAD_NS / 1e3, FPGA_U280_PCIE_BPS / 1e9,
           FPGA_U280_SYNC_OVERHEAD_NS / 1e3);
    sync_table(x, d);
    printf("## KV ship into one card's HBM (one sync per layer, layer l in pseudo-channel l)\n\n");
    printf("| model | tokens | KV | per layer | total | modeled per layer | modeled total | KV alone "
           "fits one U280 | run |\n|---|---:|---|---:|---:|---:|---:|---|---|\n");
    const shape models[] = {{"LLaMA2-7B", 32, 32, 128}, {"Llama-3-8B", 32, 8, 128}};
    const int toks[] = {4096, 32768};
    for (int m = 0; m < 2; m++)
        for (int t = 0; t < 2; t++)
            for (int dt = PROTO_KV_INT8; dt <= PROTO_KV_INT4; dt++)
                ship(x, d, &models[m], toks[t], dt, max_gib);
    fpga_xrt_device_close(x, d);
    fpga_xrt_free(x);
    return 0;
}

/* tests/fpga/fpga_util.h — helpers for tests of the FPGA backend on emulated cards. */
#ifndef TANDEM_TESTS_FPGA_UTIL_H
#define TANDEM_TESTS_FPGA_UTIL_H
#include "cpu/flex.h"
#include "fpga/backend.h"
#include "fpga/card.h"
#include "fpga/dec_model.h"
#include "fpga/kernels/pf_layout.h"
#include "model/ckpt/model.h"
#include "model/ckpt/tls_channels.h"
#include "proto/kv.h"
#include "scheduler/accel.h"
#include "sparse/tls.h"

#define TF_MODEL "models/stories260K"

/* Points the image cache at $BUILD/fpga-test-cache (shared by the tests that are not about the
 * cache, so each image is built once per run) unless TANDEM_CACHE_DIR is already set. */
void tf_cache_env(void);
/* Loads TF_MODEL and opens `device` with weight_bits; 0, or -1 after reporting a failure. */
int tf_open(const char *device, int wbits, model **m, accel_dev **d);
/* The same with the model in dir. */
int tf_open_dir(const char *dir, const char *device, int wbits, model **m, accel_dev **d);
/* The cost model's price of a run equals what the emulator measured running it: per channel
 * bytes and commands, bytes read and written, memory / compute / stall / modeled time, the
 * busiest channel (failures name `what`). */
void tf_same_cost(const fpga_dec_cost *m, const fpga_emu_run_stats *e, const char *what);
/* KL(p || q) in nats of two logit rows. */
double tf_kl(const float *p, const float *q, int n);

/* The KV a CPU prefill exports, every layer chunk deep-copied. */
typedef struct tf_kv {
    int n_layers, n_chunks;
    proto_kv_layer *chunks;
    void **bufs;
} tf_kv;
/* Prefills ids[0..n) on the CPU device cpu, capturing its int8 KV chunks. 0 or a status. */
int tf_cpu_kv(accel_dev *cpu, const int32_t *ids, int n, float *last_logits, tf_kv *out);
void tf_kv_free(tf_kv *k);
/* Imports every captured chunk into s on d; the first failing status. */
int tf_import(accel_dev *d, accel_seq *s, const tf_kv *k);

/* Positions [0, n) of sequence s on card device d as its tiles hold them, into out:
 * (layer, position, kv head) records of K values (hd) | K scale (2) | V values | V scale (2),
 * tf_kv_bytes(d, n) bytes. 0 or a status. */
uint64_t tf_kv_bytes(accel_dev *d, int n);
int tf_read_kv(accel_dev *d, accel_seq *s, int n, uint8_t *out);
/* AsyncTLS's reference over what card d holds: the int8 K of positions [0, n) of s (tf_read_kv),
 * dequantized with its fp16 scales, put into a new sparse_tls_seq (p's channels and block size,
 * ch's channel indices). NULL after reporting a failure. */
sparse_tls_seq *tf_tls_keys(accel_dev *d, accel_seq *s, const model *m, const sparse_tls_params *p,
                            const model_channels *ch, int n);
/* Where tile row 0 of position pos (layer l, KV head h) of s lies: the offset in bank *ch. A
 * position whose block s has not taken yet is placed where a fresh pool puts it: block i of the
 * first sequence on a card gets id i (the pool hands out the lowest free id). */
uint64_t tf_tile_off(accel_dev *d, accel_seq *s, uint32_t l, uint32_t h, uint32_t pos,
                     uint32_t *ch);

/* A TANDEM_EMU_FAULT spec (into spec, n bytes) that flips bit `bit` of K value `byte` of
 * (layer, position pos, KV head) of sequence s where card device d keeps it in HBM, before the
 * card's run number `run` executes. bank0_arg: the argument index of that run's kernel's hbm0
 * port (kv_scatter: 4; tandem_decode, kv_check: 0). Blocks are the lowest free ids, so the same
 * sequences grown in the same order on a fresh card get the same blocks (tf_tile_off). */
void tf_kv_flip_spec(accel_dev *d, accel_seq *s, int layer, int pos, int head, int byte, int bit,
                     uint64_t run, int bank0_arg, char *spec, size_t n);

/* A structured prompt of n stories260K ids (mod m's vocab): the golden prompts and their greedy
 * continuations repeated, which gives attention its vertical / slash structure (sink, local
 * window, the earlier copy). NULL if a golden file cannot be read. */
int32_t *tf_structured_ids(const model *m, int n);
/* Items [0, count) of a striped prefill-workspace array a (at ws_off) of card c, back to back
 * into out. 0 or the first failing read's status. */
int tf_read_striped(fpga_card *c, uint64_t ws_off, const fpga_pf_arr *a, uint64_t count,
                    uint8_t *out);

/* The last layer of card device f's last prefill as its units left it in the workspace (a sparse
 * prefill of n rows): Q, K and V dequantized ((n, H, d), (n, Hk, d), (n, Hk, d)) and the flat
 * index over nb = ceil(n / 128) blocks (rows: H (nb + 1) row pointers, col: nnz columns). */
typedef struct tf_pf_last {
    int n, H, Hk, d, nb;
    float *q, *k, *v;
    uint32_t *rows, *col, nnz;
} tf_pf_last;
/* 0, or -1 after reporting a failure (w then holds nothing to free). */
int tf_pf_last_read(accel_dev *f, int n, tf_pf_last *w);
/* 1 when ix is w's index, row pointers and columns. */
int tf_pf_last_same_index(const tf_pf_last *w, const cpu_flex_index *ix);
void tf_pf_last_free(tf_pf_last *w);

/* Emulator card stats of an FPGA device's card. */
int tf_card_stats(accel_dev *d, fpga_emu_card_stats *st);
/* fpga-emu:0 with weight_bits 8 and one thread, opened with TANDEM_EMU_FAULT = spec (NULL: no
 * fault); NULL after a test failure naming why. */
accel_dev *tf_open_faulted(const model *m, const char *spec);
/* The device's health (accel_info.health). */
int tf_health(accel_dev *d);

#endif

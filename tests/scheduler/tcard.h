/* tests/scheduler/tcard.h — a simulated decode card (or GPU) for the scheduler's tests, with
 * faults on demand (the fpga-emu backend has its own end-to-end tests in tests/e2e/): the
 * accel interface of an FPGA decode device (kind FPGA, ACCEL_CAP_DECODE | ACCEL_CAP_KV_IMPORT,
 * max_batch 1) whose arithmetic is a private instance of the real CPU backend, decoding from
 * the int8 KV it imported (dequantized, as the CPU backend's import does). Faults on demand:
 * the Nth import fails (corrupt), the Nth decode faults the device or times out.
 *
 * Threads: as any device (one thread at a time). */
#ifndef TANDEM_TESTS_TCARD_H
#define TANDEM_TESTS_TCARD_H
#include "scheduler/accel.h"

typedef struct tcard_faults {
    int gpu;               /* 1: play a GPU instead (kind CUDA, prefill + decode + KV export and
                              import, batched), prefilling and decoding with the CPU's arithmetic
                              on its own float KV */
    int prefill_fault_at;  /* gpu: the Nth accel_prefill faults the device (ACCEL_ERR_DEVICE) */
    int import_corrupt_at; /* the Nth accel_kv_import returns ACCEL_ERR_CORRUPT (0: never) */
    int decode_fault_at;   /* the Nth accel_decode faults the device (ACCEL_ERR_DEVICE) */
    int decode_timeout_at; /* the Nth accel_decode times out (ACCEL_ERR_TIMEOUT, DEGRADED) */
    double decode_ms;      /* sleep per decode call (a slower card) */
    int max_batch;         /* card: sequences per decode call (0: 1); more lets a request's n
                              choices decode here */
    double seq_new_ms;     /* sleep per seq_new call (a card slow to reserve a split's
                              sequences: the prefill runs meanwhile) */
    uint64_t mem_limit;    /* 0: the CPU backend's budget */
    const accel_decode_curve *curve; /* described in accel_info.decode_curve (NULL: none) */
} tcard_faults;

accel_dev *tcard_open(int index, const model *m, const tcard_faults *f, char *err, size_t errlen);

#endif

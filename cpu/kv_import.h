/* cpu/kv_import.h — a wire-format KV chunk (proto/kv.h: int8 or int4 values with fp16 scales)
 * written into a sequence's float32 rows in the CPU device's block pool (cpu/kv_cache.h), one
 * contiguous run a block, the runs spread over the device's threads (cpu/pool.h). A long
 * hand-over's import writes its float32 KV into pages touched for the first time: the page faults
 * go in parallel too (BENCHMARKS.md, wirecrc). */
#ifndef TANDEM_CPU_KV_IMPORT_H
#define TANDEM_CPU_KV_IMPORT_H
#include "cpu/kv_cache.h"
#include "cpu/pool.h"
#include "proto/kv.h"

/* Positions [c->pos0, c->pos0 + c->n_tokens) of layer c->layer, whose blocks t already holds
 * (cpu_kv_table_prepare), dequantized from c (cpu_kv_dequantize: the same values, bit for bit,
 * however the runs are split). 8 blocks (128 positions) at least a thread. 0, or -1 with no row
 * written when an array is missing or the shape is not proto/kv.h's or not the pool's row width
 * (n_kv_heads * head_dim != kv_dim); -1 too if a run's cpu_kv_dequantize refused it (a backstop:
 * the rows of the runs it accepted were written). */
int cpu_kv_import_rows(cpu_kv_pool *p, const cpu_kv_table *t, cpu_pool *pool,
                       const proto_kv_layer *c);

#endif

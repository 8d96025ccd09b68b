/* cpu/pool.h — a fixed pool of compute threads for one CPU device.
 *
 * cpu_pool_for() splits [0, n) into contiguous ranges, runs fn on them in the pool's threads and
 * the caller's, and returns when all are done. One caller at a time (the device's worker).
 * Workers spin briefly before sleeping so that the many small parallel sections of a decode step
 * do not pay a wake-up each. */
#ifndef TANDEM_CPU_POOL_H
#define TANDEM_CPU_POOL_H

typedef struct cpu_pool cpu_pool;
typedef void (*cpu_pool_fn)(void *ctx, int begin, int end, int thread);

/* n_threads includes the caller: 1 means no extra threads. */
cpu_pool *cpu_pool_new(int n_threads);
void cpu_pool_free(cpu_pool *p);
int cpu_pool_threads(const cpu_pool *p);
/* Run fn over [0, n) split in at most `threads` ranges; `grain` is the smallest range worth a
 * thread (n <= grain runs inline on the caller). */
void cpu_pool_for(cpu_pool *p, int n, int grain, cpu_pool_fn fn, void *ctx);

#endif

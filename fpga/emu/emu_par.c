/* fpga/emu/emu_par.c — fpga_k_parallel (fpga/kernels/kernel.h): a kernel's independent
 * iterations (the decode step's KV heads, the matrix products' 32 channel engines, an import's
 * kv_scatter slots and kv_check layers: what the card runs on parallel datapaths) spread over a
 * pool of threads beside the card's worker, so that an emulated step does not read its whole KV
 * or a large model's weights on one core (BENCHMARKS.md, "the emulated card's decode step").
 *
 * One job at a time: a second card's worker that finds the pool busy runs its iterations itself.
 * The pool starts at the first job worth handing off: as many threads as the CPU has, less the
 * caller's, at most EMU_PAR_MAX in all; TANDEM_EMU_THREADS (1..EMU_PAR_MAX, read then) sets how
 * many in all instead, 1 keeps every kernel on its card's worker. Below EMU_PAR_MIN_WORK bytes read
 * (TANDEM_EMU_PAR_MIN_BYTES: another bound, read once) the iterations run in a loop (a hand-off
 * costs a wake-up per thread). The threads are joined when the library is unloaded or the process
 * exits; a process forked from one that had them runs its iterations in loops (the threads did not
 * come with it).
 *
 * Results: each iteration writes only its own outputs, so the threads change no bits — only
 * which core computes them (tests/fpga/test_fpga_par.c). */
#include "fpga/emu/emu.h"
#include "fpga/kernels/kernel.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define EMU_PAR_MAX      16
#define EMU_PAR_MIN_WORK (1u << 20) /* TANDEM_EMU_PAR_MIN_BYTES overrides it (tests: 0) */

static struct {
    pthread_mutex_t start_mu; /* the pool's start, once */
    pthread_mutex_t job_mu;   /* held by the job's caller: one job at a time */
    pthread_mutex_t mu;       /* the job's fields and the counts below */
    pthread_cond_t go, done;
    int state;         /* 0 not started, 1 running (n_th threads), 2 off (none: forked, failed) */
    uint64_t min_work; /* bytes below which the iterations stay in a loop */
    int n_th, stop, active;
    uint64_t gen; /* which job the threads are on */
    fpga_k_iter_fn fn;
    void *ctx;
    uint32_t n;
    atomic_uint next; /* the next iteration to take */
    pthread_t th[EMU_PAR_MAX];
} g_par = {.start_mu = PTHREAD_MUTEX_INITIALIZER,
           .job_mu = PTHREAD_MUTEX_INITIALIZER,
           .mu = PTHREAD_MUTEX_INITIALIZER,
           .go = PTHREAD_COND_INITIALIZER,
           .done = PTHREAD_COND_INITIALIZER,
           .min_work = EMU_PAR_MIN_WORK};

static void take_all(fpga_k_iter_fn fn, void *ctx, uint32_t n)
{
    for (uint32_t i; (i = atomic_fetch_add(&g_par.next, 1)) < n;) fn(ctx, i);
}

static void *par_main(void *arg)
{
    (void)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&g_par.mu);
    for (;;) {
        while (!g_par.stop && g_par.gen == seen) pthread_cond_wait(&g_par.go, &g_par.mu);
        if (g_par.gen == seen) break; /* stopped, and no job left to take part in */
        seen = g_par.gen;
        fpga_k_iter_fn fn = g_par.fn;
        void *ctx = g_par.ctx;
        uint32_t n = g_par.n;
        pthread_mutex_unlock(&g_par.mu);
        take_all(fn, ctx, n);
        pthread_mutex_lock(&g_par.mu);
        if (--g_par.active == 0) pthread_cond_signal(&g_par.done);
    }
    pthread_mutex_unlock(&g_par.mu);
    return NULL;
}

/* after fork(): the child has none of the threads */
static void par_forked(void)
{
    if (g_par.state == 1) g_par.state = 2;
}

static int par_threads_wanted(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus > 1 ? (int)(cpus > EMU_PAR_MAX ? EMU_PAR_MAX : cpus) : 1;
    const char *v = getenv("TANDEM_EMU_THREADS");
    char *end;
    long want = v && *v ? strtol(v, &end, 10) : 0;
    if (v && *v && !*end && want >= 1 && want <= EMU_PAR_MAX) n = (int)want;
    return n - 1; /* the caller is one of them */
}

/* 1 when the pool's threads run (started here if need be). */
static int par_ready(void)
{
    pthread_mutex_lock(&g_par.start_mu);
    if (g_par.state == 0) {
        g_par.state = 2;
        const char *v = getenv("TANDEM_EMU_PAR_MIN_BYTES");
        char *end;
        long long b = v && *v ? strtoll(v, &end, 10) : -1;
        if (v && *v && !*end && b >= 0) g_par.min_work = (uint64_t)b;
        int want = par_threads_wanted();
        if (want > 0 && pthread_atfork(NULL, NULL, par_forked) == 0) {
            int k = 0;
            while (k < want && pthread_create(&g_par.th[k], NULL, par_main, NULL) == 0) k++;
            g_par.n_th = k;
            g_par.state = k > 0 ? 1 : 2;
        }
    }
    int ok = g_par.state == 1;
    pthread_mutex_unlock(&g_par.start_mu);
    return ok;
}

/* The library's unload or the process's exit: a job running finishes first (job_mu, kept locked
 * after: a kernel still running runs its iterations in loops). */
__attribute__((destructor)) static void par_stop(void)
{
    if (g_par.state != 1) return;
    pthread_mutex_lock(&g_par.job_mu);
    pthread_mutex_lock(&g_par.mu);
    g_par.stop = 1;
    pthread_cond_broadcast(&g_par.go);
    pthread_mutex_unlock(&g_par.mu);
    for (int k = 0; k < g_par.n_th; k++) pthread_join(g_par.th[k], NULL);
    g_par.state = 2;
}

void fpga_k_parallel(uint32_t n, fpga_k_iter_fn fn, void *ctx, uint64_t work)
{
    if (n < 2 || !par_ready() || work < g_par.min_work || pthread_mutex_trylock(&g_par.job_mu)) {
        for (uint32_t i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&g_par.mu);
    g_par.fn = fn;
    g_par.ctx = ctx;
    g_par.n = n;
    atomic_store(&g_par.next, 0);
    g_par.active = g_par.n_th;
    g_par.gen++;
    pthread_cond_broadcast(&g_par.go);
    pthread_mutex_unlock(&g_par.mu);
    take_all(fn, ctx, n);
    pthread_mutex_lock(&g_par.mu);
    while (g_par.active) pthread_cond_wait(&g_par.done, &g_par.mu);
    pthread_mutex_unlock(&g_par.mu);
    pthread_mutex_unlock(&g_par.job_mu);
    emu_timing_note_par();
}

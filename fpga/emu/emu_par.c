/* fpga/emu/emu_par.c — fpga_k_parallel (fpga/kernels/kernel.h): a kernel's independent
 * iterations (the decode step's KV heads, the matrix products' 32 channel engines, an import's
 * kv_scatter slots and kv_check layers: what the card runs on parallel datapaths) spread over a
 * pool of threads beside the card's worker, so that an emulated step does not read its whole KV
 * or a large model's weights on one core (BENCHMARKS.md, "the emulated card's decode step").
 *
 * Several jobs at once: each emulated card's worker hands its kernel's iterations in as a job (on
 * its own stack) and takes them itself too; the pool's threads take iterations from the listed
 * job that has the fewest of them in it, and a thread whose job gets a newer one beside it moves
 * over after the iteration it is on — two cards stepping at once share the cores (before, the
 * second card's worker found the pool busy and ran its kernel alone). The caller returns once
 * every iteration is done and no pool thread is left in its job (`refs`).
 *
 * The pool starts at the first job worth handing off: as many threads as the CPU has, less the
 * caller's, at most EMU_PAR_MAX in all; TANDEM_EMU_THREADS (1..EMU_PAR_MAX, read then) sets how
 * many in all instead, 1 keeps every kernel on its card's worker. Below EMU_PAR_MIN_WORK bytes read
 * (TANDEM_EMU_PAR_MIN_BYTES: another bound, read once) the iterations run in a loop (a hand-off
 * costs a wake-up per thread). The threads are joined when the library is unloaded or the process
 * exits (the jobs listed then are finished first; one handed in after runs in a loop); a process
 * forked from one that had them runs its iterations in loops (the threads did not come with it).
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

/* One kernel call's iterations, on its caller's stack until fpga_k_parallel returns. */
typedef struct par_job {
    fpga_k_iter_fn fn;
    void *ctx;
    uint32_t n;
    atomic_uint next;            /* the next iteration to take */
    int refs;                    /* pool threads in it (g_par.mu) */
    int listed;                  /* on g_par's list: iterations may be left to take (g_par.mu) */
    struct par_job *prev, *succ; /* the list, oldest first (g_par.mu) */
} par_job;

static struct {
    pthread_mutex_t start_mu; /* the pool's start, once */
    pthread_mutex_t mu;       /* the list, the jobs' refs and the fields below */
    pthread_cond_t go;        /* a job listed, or stop */
    pthread_cond_t done;      /* a job's last pool thread left it */
    int state;         /* 0 not started, 1 running (n_th threads), 2 off (none: forked, failed) */
    uint64_t min_work; /* bytes below which the iterations stay in a loop */
    int n_th, stop;
    par_job *head, *tail;
    atomic_uint posted; /* jobs listed so far: a pool thread sees a newer one between iterations */
    pthread_t th[EMU_PAR_MAX];
} g_par = {.start_mu = PTHREAD_MUTEX_INITIALIZER,
           .mu = PTHREAD_MUTEX_INITIALIZER,
           .go = PTHREAD_COND_INITIALIZER,
           .done = PTHREAD_COND_INITIALIZER,
           .min_work = EMU_PAR_MIN_WORK};

static void job_unlist(par_job *j) /* g_par.mu held */
{
    if (!j->listed) return;
    if (j->prev)
        j->prev->succ = j->succ;
    else
        g_par.head = j->succ;
    if (j->succ)
        j->succ->prev = j->prev;
    else
        g_par.tail = j->prev;
    j->prev = j->succ = NULL;
    j->listed = 0;
}

/* The listed job with iterations left and the fewest pool threads in it (the oldest of those);
 * jobs found with none left come off the list. g_par.mu held. */
static par_job *job_pick(void)
{
    par_job *best = NULL;
    for (par_job *j = g_par.head, *nx; j; j = nx) {
        nx = j->succ;
        if (atomic_load(&j->next) >= j->n)
            job_unlist(j);
        else if (!best || j->refs < best->refs)
            best = j;
    }
    return best;
}

static void *par_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_par.mu);
    for (;;) {
        par_job *j;
        while (!(j = job_pick()) && !g_par.stop) pthread_cond_wait(&g_par.go, &g_par.mu);
        if (!j) break; /* stopped, and no job left to take part in */
        j->refs++;
        unsigned seen = atomic_load(&g_par.posted);
        pthread_mutex_unlock(&g_par.mu);
        for (uint32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
            j->fn(j->ctx, i);
            if (atomic_load(&g_par.posted) != seen) break; /* a newer job: pick again */
        }
        pthread_mutex_lock(&g_par.mu);
        if (--j->refs == 0) pthread_cond_broadcast(&g_par.done);
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

/* The library's unload or the process's exit: the threads finish the jobs listed, then leave; a
 * job handed in after runs in a loop on its caller. */
__attribute__((destructor)) static void par_stop(void)
{
    pthread_mutex_lock(&g_par.start_mu);
    if (g_par.state == 1) {
        pthread_mutex_lock(&g_par.mu);
        g_par.stop = 1;
        pthread_cond_broadcast(&g_par.go);
        pthread_mutex_unlock(&g_par.mu);
        for (int k = 0; k < g_par.n_th; k++) pthread_join(g_par.th[k], NULL);
        g_par.state = 2;
    }
    pthread_mutex_unlock(&g_par.start_mu);
}

void fpga_k_parallel(uint32_t n, fpga_k_iter_fn fn, void *ctx, uint64_t work)
{
    if (n < 2 || !par_ready() || work < g_par.min_work) {
        for (uint32_t i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    par_job j = {.fn = fn, .ctx = ctx, .n = n};
    atomic_init(&j.next, 0);
    pthread_mutex_lock(&g_par.mu);
    int pooled = !g_par.stop;
    if (pooled) {
        j.prev = g_par.tail;
        if (g_par.tail)
            g_par.tail->succ = &j;
        else
            g_par.head = &j;
        g_par.tail = &j;
        j.listed = 1;
        atomic_fetch_add(&g_par.posted, 1);
        pthread_cond_broadcast(&g_par.go);
    }
    pthread_mutex_unlock(&g_par.mu);
    for (uint32_t i; (i = atomic_fetch_add(&j.next, 1)) < n;) fn(ctx, i);
    if (!pooled) return;
    pthread_mutex_lock(&g_par.mu);
    job_unlist(&j);
    while (j.refs) pthread_cond_wait(&g_par.done, &g_par.mu);
    pthread_mutex_unlock(&g_par.mu);
    emu_timing_note_par();
}

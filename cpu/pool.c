/* cpu/pool.c — see pool.h. A generation counter announces work; each worker takes its own
 * range index; the caller runs range 0 and spins until the others report done. */
#include "cpu/pool.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Polling rounds before a worker sleeps: a PAUSE costs 10-140 cycles depending on the core, so
 * this is roughly 10-100 µs — longer than the gap between the parallel sections of one decode
 * step, far shorter than the gap between requests. */
#define SPIN_ITERS 2000

struct cpu_pool {
    int n;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic unsigned gen;
    _Atomic int pending;
    _Atomic int stop;
    /* the current job */
    cpu_pool_fn fn;
    void *ctx;
    int total, parts;
};

struct worker_arg {
    cpu_pool *p;
    int idx;
};

static void run_part(cpu_pool *p, int part)
{
    if (part >= p->parts) return;
    int b = (int)((long long)p->total * part / p->parts);
    int e = (int)((long long)p->total * (part + 1) / p->parts);
    if (b < e) p->fn(p->ctx, b, e, part);
}

static void *worker(void *arg)
{
    struct worker_arg *wa = arg;
    cpu_pool *p = wa->p;
    int idx = wa->idx;
    free(wa);
    /* generation 0 is "no job yet": a worker that starts after the first job was posted must
     * still run it */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_part(p, idx);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

cpu_pool *cpu_pool_new(int n)
{
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n < 1 ? 1 : n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = calloc(p->n, sizeof *p->th);
    for (int i = 1; i < p->n; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        wa->p = p;
        wa->idx = i;
        if (pthread_create(&p->th[i], NULL, worker, wa)) {
            free(wa);
            p->n = i; /* run with the threads we got */
            break;
        }
    }
    return p;
}

void cpu_pool_free(cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->th);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p)
{
    return p->n;
}

void cpu_pool_for(cpu_pool *p, int n, int grain, cpu_pool_fn fn, void *ctx)
{
    if (n <= 0) return;
    int parts = grain > 0 ? (n + grain - 1) / grain : n;
    if (parts > p->n) parts = p->n;
    if (parts <= 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->parts = parts;
    /* every worker wakes and checks its index; those past `parts` just report done */
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_part(p, 0);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
}

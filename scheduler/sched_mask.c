/* scheduler/sched_mask.c — grammar masks computed on the host while the device computes the
 * logits they will be applied to (issue 24: "the mask is computed on the host while the device
 * computes the next logits").
 *
 * A choice's next mask depends only on the tokens it has accepted, which are known when its
 * decode step is issued. accel_decode is synchronous (the worker thread waits in it while a GPU,
 * a card or a remote peer computes), so the worker hands the choices' generators to a helper
 * thread of its own before the call and joins it after: the helper runs model_gen_prefetch
 * (the grammar's mask for the current state, left in the matcher's cache) for each, and the
 * step that follows finds the mask there. Ownership: during the window the generators belong to
 * the helper and the worker touches nothing but the device; the join hands them back (the
 * mutex orders the memory). The accel contract is unchanged.
 *
 * Only where the decode does not run on this host's CPU cores (the CPU backend's decode uses
 * them all: a helper there would only compete). A helper that cannot start leaves the masks to
 * the step, as before. */
#include "scheduler/sched_internal.h"
#include <stdlib.h>

struct sched_mask_helper {
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    model_gen **jobs;
    int n, cap;
    int posted, quit; /* posted: jobs are the helper's until it clears this */
};

static void *helper_main(void *arg)
{
    sched_mask_helper *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->posted && !h->quit) pthread_cond_wait(&h->cv, &h->mu);
        if (h->quit) break;
        int n = h->n;
        pthread_mutex_unlock(&h->mu);
        for (int i = 0; i < n; i++) model_gen_prefetch(h->jobs[i]);
        pthread_mutex_lock(&h->mu);
        h->posted = 0;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static sched_mask_helper *helper_new(int cap)
{
    sched_mask_helper *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->jobs = calloc((size_t)cap, sizeof *h->jobs);
    h->cap = cap;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (!h->jobs || pthread_create(&h->thr, NULL, helper_main, h)) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h->jobs);
        free(h);
        return NULL;
    }
    return h;
}

int sched_mask_post(sched_dev *d, int rows)
{
    if (d->info0.kind == ACCEL_KIND_CPU && !(d->info0.caps & ACCEL_CAP_REMOTE)) return 0;
    int n = 0;
    for (int i = 0; i < rows; i++)
        if (d->row_choice[i] && model_gen_has_grammar(d->row_choice[i]->gen)) n++;
    if (!n) return 0;
    if (!d->mask && !d->mask_failed && !(d->mask = helper_new(d->rows))) d->mask_failed = 1;
    sched_mask_helper *h = d->mask;
    if (!h) return 0;
    pthread_mutex_lock(&h->mu);
    h->n = 0;
    for (int i = 0; i < rows && h->n < h->cap; i++)
        if (d->row_choice[i] && model_gen_has_grammar(d->row_choice[i]->gen)) h->jobs[h->n++] = d->row_choice[i]->gen;
    h->posted = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 1;
}

void sched_mask_wait(sched_dev *d)
{
    sched_mask_helper *h = d->mask;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    while (h->posted) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

void sched_mask_stop(sched_dev *d)
{
    sched_mask_helper *h = d->mask;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thr, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->jobs);
    free(h);
    d->mask = NULL;
}

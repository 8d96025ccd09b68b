/* scheduler/sched_book.c — see sched_book.h. */
#include "scheduler/sched_book.h"

void sched_book_entry_init(sched_book_entry *e)
{
    *e = (sched_book_entry){.prefill = -1, .decode = -1};
}

enum sched_place sched_book_place(sched_book *b, const sched_policy_req *r, sched_book_entry *e)
{
    sched_placement pl;
    enum sched_place res = sched_policy_place(b->dev, b->n, &b->opts, r, &pl);
    if (res != SCHED_PLACE_OK) return res;
    sched_policy_dev *p = &b->dev[pl.prefill], *d = &b->dev[pl.decode];
    e->prefill = pl.prefill;
    e->decode = pl.decode;
    e->split = pl.prefill != pl.decode;
    e->prefill_tokens = r->n * r->n_prompt;
    /* a split's prompt on its prefill device; an offloading device's prompt until it is in
     * (its decode commit is the resident part only) */
    e->prefill_bytes = e->split || (d->offload_any && sched_policy_resident_bytes(d, r))
                           ? sched_policy_prompt_bytes(p, r)
                           : 0;
    e->decode_bytes = sched_policy_commit_bytes(d, r);
    e->offload_bytes = sched_policy_offload_bytes(d, r);
    e->decode_seqs = r->n;
    e->decode_positions = sched_policy_positions(r);
    p->prefill_tokens += e->prefill_tokens;
    p->mem_committed += e->prefill_bytes;
    d->mem_committed += e->decode_bytes;
    d->offload_committed += e->offload_bytes;
    d->running += e->decode_seqs;
    d->positions += e->decode_positions;
    d->assigned++;
    return SCHED_PLACE_OK;
}

void sched_book_prefilled(sched_book *b, sched_book_entry *e)
{
    if (e->prefill < 0) return;
    sched_policy_dev *p = &b->dev[e->prefill];
    p->prefill_tokens -= e->prefill_tokens;
    p->mem_committed -= e->prefill_bytes;
    e->prefill_tokens = 0;
    e->prefill_bytes = 0;
}

void sched_book_release(sched_book *b, sched_book_entry *e)
{
    if (e->prefill < 0) return;
    sched_book_prefilled(b, e);
    sched_policy_dev *d = &b->dev[e->decode];
    d->mem_committed -= e->decode_bytes;
    d->offload_committed -= e->offload_bytes;
    d->running -= e->decode_seqs;
    d->positions -= e->decode_positions;
    if (!d->running || d->positions < 0) d->positions = 0; /* no drift from rounding */
    sched_book_entry_init(e);
}

int sched_book_empty(const sched_book *b)
{
    for (int i = 0; i < b->n; i++)
        if (b->dev[i].mem_committed || b->dev[i].offload_committed || b->dev[i].running ||
            b->dev[i].prefill_tokens)
            return 0;
    return 1;
}

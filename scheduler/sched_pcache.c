/* scheduler/sched_pcache.c — a paged device's prefix cache and host tier (see sched_pcache.h). */
#include "scheduler/sched_pcache.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A holder on the device (seq) or a host entry (bytes): the ids of its whole blocks and their
 * chain names. */
typedef struct entry {
    struct entry *prev, *next; /* its tier's LRU list, least recent first */
    int32_t *ids;
    uint64_t *names;
    int nb;                    /* whole blocks: nb * block_tokens ids */
    uint64_t used_ns;          /* last used (CLOCK_MONOTONIC): its place in the LRU list */
    uint64_t kind;             /* 0: exact KV; else how it was approximated (sched_pcache.h) */
    accel_seq *seq;
    unsigned char *bytes;      /* nb * block_bytes */
} entry;

/* name -> (an entry whose block `pos` has that name) */
typedef struct slot {
    struct slot *next;
    uint64_t name;
    entry *e;
    int pos;
} slot;

typedef struct tier {
    entry *head, *tail;
    int count;
    _Atomic int *next_blocks;        /* the stats that show its next victim */
    _Atomic uint64_t *next_used_ns;
    slot **bucket;
    int n_bucket, n_slot;
} tier;

struct sched_pcache {
    accel_dev *dev;
    uint64_t salt;
    int bt;
    uint64_t block_bytes, host_budget, host_used;
    tier dev_tier, host_tier;
    sched_pcache_stats st;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t sched_pcache_hash(uint64_t parent, uint64_t salt, const int32_t *ids, int n)
{
    uint64_t h = mix(parent ^ mix(salt ^ 0x6b76ULL));
    for (int i = 0; i < n; i++) h = mix(h ^ (uint32_t)ids[i]);
    return h ? h : 1; /* 0 means "no parent" */
}

/* ---------------------------------------------------------------- a tier's index and LRU */

static slot **bucket_of(tier *t, uint64_t name)
{
    return &t->bucket[mix(name) & (uint64_t)(t->n_bucket - 1)];
}

static int index_grow(tier *t)
{
    int nb = t->n_bucket ? t->n_bucket * 2 : 256;
    slot **b = calloc((size_t)nb, sizeof *b);
    if (!b) return -1;
    for (int i = 0; i < t->n_bucket; i++)
        for (slot *s = t->bucket[i], *next; s; s = next) {
            next = s->next;
            slot **h = &b[mix(s->name) & (uint64_t)(nb - 1)];
            s->next = *h;
            *h = s;
        }
    free(t->bucket);
    t->bucket = b;
    t->n_bucket = nb;
    return 0;
}

static slot *index_find(tier *t, uint64_t name)
{
    if (!t->n_bucket) return NULL;
    for (slot *s = *bucket_of(t, name); s; s = s->next)
        if (s->name == name) return s;
    return NULL;
}

/* Points name at (e, pos) (the newest holder of a name is the one a lookup finds). */
static int index_put(tier *t, uint64_t name, entry *e, int pos)
{
    slot *s = index_find(t, name);
    if (s) {
        s->e = e;
        s->pos = pos;
        return 0;
    }
    if (t->n_slot >= 2 * t->n_bucket && index_grow(t)) return -1;
    s = malloc(sizeof *s);
    if (!s) return -1;
    s->name = name;
    s->e = e;
    s->pos = pos;
    slot **h = bucket_of(t, name);
    s->next = *h;
    *h = s;
    t->n_slot++;
    return 0;
}

/* e leaves the index: each name it was found by moves to another entry of the tier that has it
 * at the same place, or goes. */
static void index_remove(tier *t, entry *e)
{
    for (int k = 0; k < e->nb; k++) {
        slot **pp = t->n_bucket ? bucket_of(t, e->names[k]) : NULL;
        for (; pp && *pp; pp = &(*pp)->next) {
            slot *s = *pp;
            if (s->name != e->names[k] || s->e != e) continue;
            entry *other = NULL;
            for (entry *o = t->head; o && !other; o = o->next)
                if (o != e && o->nb > k && o->names[k] == s->name) other = o;
            if (other) {
                s->e = other;
            } else {
                *pp = s->next;
                free(s);
                t->n_slot--;
            }
            break;
        }
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The stats follow the list's head, the next entry the tier gives up. */
static void lru_show(tier *t)
{
    if (!t->next_blocks) return;
    atomic_store(t->next_blocks, t->head ? t->head->nb : 0);
    atomic_store(t->next_used_ns, t->head ? t->head->used_ns : 0);
}

static void lru_unlink(tier *t, entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else t->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else t->tail = e->prev;
    e->prev = e->next = NULL;
    t->count--;
    lru_show(t);
}

/* e becomes the most recently used entry. */
static void lru_push(tier *t, entry *e)
{
    e->used_ns = now_ns();
    e->prev = t->tail;
    e->next = NULL;
    if (t->tail) t->tail->next = e;
    else t->head = e;
    t->tail = e;
    t->count++;
    lru_show(t);
}

/* The entry of the tier holding the longest prefix of ids (names given, of KV kind `kind`) with
 * at most max_nb blocks, verified id by id (and kind: names of two kinds never collide into a
 * wrong reuse); its blocks in *nb. */
static entry *longest(tier *t, const int32_t *ids, const uint64_t *names, uint64_t kind,
                      int max_nb, int bt, int *nb)
{
    *nb = 0;
    for (int k = max_nb - 1; k >= 0; k--) {
        slot *s = index_find(t, names[k]);
        if (!s || s->pos != k || s->e->nb <= k || s->e->names[k] != names[k] ||
            s->e->kind != kind)
            continue;
        if (memcmp(s->e->ids, ids, (size_t)(k + 1) * bt * sizeof *ids)) continue; /* collision */
        *nb = k + 1;
        return s->e;
    }
    return NULL;
}

/* ---------------------------------------------------------------- entries */

static void entry_free(sched_pcache *pc, tier *t, entry *e)
{
    index_remove(t, e);
    lru_unlink(t, e);
    if (e->seq) accel_seq_free(pc->dev, e->seq);
    if (e->bytes) {
        accel_host_free(pc->dev, e->bytes);
        pc->host_used -= (uint64_t)e->nb * pc->block_bytes;
    }
    free(e->ids);
    free(e->names);
    free(e);
}

static void publish_counts(sched_pcache *pc)
{
    atomic_store(&pc->st.holders, pc->dev_tier.count);
    atomic_store(&pc->st.host_entries, pc->host_tier.count);
    atomic_store(&pc->st.host_bytes, pc->host_used);
}

/* The salt of kind's chain: the model's for exact KV (names as before kinds existed), mixed with
 * the kind otherwise. */
static uint64_t kind_salt(const sched_pcache *pc, uint64_t kind)
{
    return kind ? mix(pc->salt ^ mix(kind)) : pc->salt;
}

/* The chain names of ids' first nb whole blocks for KV of kind `kind`, into names[0..nb). */
static void chain_names(const sched_pcache *pc, uint64_t kind, const int32_t *ids, int nb,
                        uint64_t *names)
{
    uint64_t parent = 0, salt = kind_salt(pc, kind);
    for (int k = 0; k < nb; k++) names[k] = parent =
        sched_pcache_hash(parent, salt, ids + (size_t)k * pc->bt, pc->bt);
}

/* A new entry for ids[0..nb * bt) of KV kind `kind` (names computed), or NULL. */
static entry *entry_new(sched_pcache *pc, uint64_t kind, const int32_t *ids, int nb)
{
    entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->nb = nb;
    e->kind = kind;
    e->ids = malloc((size_t)nb * pc->bt * sizeof *e->ids);
    e->names = malloc((size_t)nb * sizeof *e->names);
    if (!e->ids || !e->names) {
        free(e->ids);
        free(e->names);
        free(e);
        return NULL;
    }
    memcpy(e->ids, ids, (size_t)nb * pc->bt * sizeof *ids);
    chain_names(pc, kind, ids, nb, e->names);
    return e;
}

/* Adds e to tier t unless an entry there already holds all of it (then 0, e untouched: the
 * caller frees it); drops the entries that e holds all of. 1 when added; -1 when the index ran
 * out of memory: e was freed here (entry_free), the caller must not touch it again. */
static int tier_add(sched_pcache *pc, tier *t, entry *e)
{
    int have;
    entry *old = longest(t, e->ids, e->names, e->kind, e->nb, pc->bt, &have);
    if (old && have == e->nb) {
        lru_unlink(t, old); /* touched: most recent again */
        lru_push(t, old);
        return 0;
    }
    /* entries that are a prefix of e: each found by the name of its own last block */
    for (entry *o = t->head, *next; o; o = next) {
        next = o->next;
        if (o->nb <= e->nb && o->kind == e->kind && o->names[o->nb - 1] == e->names[o->nb - 1] &&
            !memcmp(o->ids, e->ids, (size_t)o->nb * pc->bt * sizeof *e->ids))
            entry_free(pc, t, o);
    }
    lru_push(t, e);
    for (int k = 0; k < e->nb; k++)
        if (index_put(t, e->names[k], e, k)) {
            entry_free(pc, t, e); /* out of memory: not kept (the index is consistent) */
            return -1;
        }
    return 1;
}

/* ---------------------------------------------------------------- the host tier */

/* A copy of device holder h in host memory, when the budget has room (LRU host entries give
 * theirs). 1 when saved. */
static int save_to_host(sched_pcache *pc, entry *h)
{
    uint64_t need = (uint64_t)h->nb * pc->block_bytes;
    if (!pc->host_budget || need > pc->host_budget) return 0;
    int have;
    entry *old = longest(&pc->host_tier, h->ids, h->names, h->kind, h->nb, pc->bt, &have);
    if (old && have == h->nb) return 1; /* already there */
    while (pc->host_used + need > pc->host_budget && pc->host_tier.head) {
        entry_free(pc, &pc->host_tier, pc->host_tier.head);
        atomic_fetch_add(&pc->st.host_dropped, 1);
    }
    entry *e = entry_new(pc, h->kind, h->ids, h->nb);
    if (!e) return 0;
    e->bytes = accel_host_alloc(pc->dev, (size_t)need);
    int ok = e->bytes != NULL;
    for (int k = 0; ok && k < h->nb; k++)
        ok = accel_kv_block_save(pc->dev, h->seq, k, e->bytes + (size_t)k * pc->block_bytes) == 0;
    if (!ok) {
        accel_host_free(pc->dev, e->bytes);
        free(e->ids);
        free(e->names);
        free(e);
        return 0;
    }
    pc->host_used += need;
    int added = tier_add(pc, &pc->host_tier, e); /* -1: out of memory, e freed there */
    if (added == 0) entry_free(pc, &pc->host_tier, e);
    return added >= 0;
}

/* ---------------------------------------------------------------- public */

sched_pcache *sched_pcache_new(accel_dev *dev, uint64_t salt, uint64_t host_budget)
{
    accel_info info;
    accel_get_info(dev, &info);
    if (!(info.caps & ACCEL_CAP_PAGED) || info.kv_block_tokens <= 0) return NULL;
    sched_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->dev = dev;
    pc->salt = salt;
    pc->bt = info.kv_block_tokens;
    pc->block_bytes = info.kv_block_bytes;
    pc->host_budget = host_budget;
    pc->st.host_budget = host_budget;
    pc->dev_tier.next_blocks = &pc->st.dev_next_blocks;
    pc->dev_tier.next_used_ns = &pc->st.dev_next_used_ns;
    pc->host_tier.next_blocks = &pc->st.host_next_blocks;
    pc->host_tier.next_used_ns = &pc->st.host_next_used_ns;
    return pc;
}

static void tier_clear(sched_pcache *pc, tier *t)
{
    while (t->head) entry_free(pc, t, t->head);
    free(t->bucket);
    memset(t, 0, sizeof *t);
}

void sched_pcache_free(sched_pcache *pc)
{
    if (!pc) return;
    tier_clear(pc, &pc->dev_tier);
    tier_clear(pc, &pc->host_tier);
    free(pc);
}

/* The longest prefix of ids a tier holds as exact KV or, kind != 0, as KV of that kind (exact
 * wins a tie: it is the better KV). names0 / namesk: the two chains' names. */
static entry *best(tier *t, const sched_pcache *pc, const int32_t *ids, const uint64_t *names0,
                   const uint64_t *namesk, uint64_t kind, int max_nb, int *nb)
{
    entry *e = longest(t, ids, names0, 0, max_nb, pc->bt, nb);
    if (!kind) return e;
    int nk;
    entry *k = longest(t, ids, namesk, kind, max_nb, pc->bt, &nk);
    if (k && nk > *nb) {
        *nb = nk;
        return k;
    }
    return e;
}

int sched_pcache_begin(sched_pcache *pc, uint64_t kind, int align, const int32_t *ids, int n,
                       int capacity, accel_seq **out, int *reused, int *from_host, int *approx)
{
    *out = NULL;
    *reused = *from_host = *approx = 0;
    /* reuse ends on a multiple of unit = lcm(block, align) positions: unit_nb whole blocks */
    int unit_nb = 1;
    if (align > 1) {
        long a = align, b = pc->bt;
        while (b) {
            long r = a % b;
            a = b;
            b = r;
        }
        unit_nb = (int)(align / a); /* lcm / bt */
    }
    int max_nb = n > 0 ? (n - 1) / pc->bt : 0; /* the last prompt token is always computed */
    max_nb -= max_nb % unit_nb;
    uint64_t *names = max_nb ? calloc((size_t)max_nb * (kind ? 2 : 1), sizeof *names) : NULL;
    if (max_nb && !names) max_nb = 0;
    int nd = 0, nh = 0;
    entry *d = NULL, *h = NULL;
    if (max_nb) {
        uint64_t *namesk = kind ? names + max_nb : NULL;
        chain_names(pc, 0, ids, max_nb, names);
        if (namesk) chain_names(pc, kind, ids, max_nb, namesk);
        d = best(&pc->dev_tier, pc, ids, names, namesk, kind, max_nb, &nd);
        h = best(&pc->host_tier, pc, ids, names, namesk, kind, max_nb, &nh);
    }
    free(names);
    nd -= nd % unit_nb;
    nh -= nh % unit_nb;
    if (d && !nd) d = NULL;
    if (h && !nh) h = NULL;
    /* the host tier's blocks continue the device's only when both are KV of one kind; else the
     * longer of the two alone */
    if (d && h && h->kind != d->kind) {
        if (nh > nd) d = NULL;
        else h = NULL;
    }
    atomic_fetch_add(&pc->st.queries_tokens, (uint64_t)n);
    int st = d ? accel_seq_fork(pc->dev, d->seq, nd * pc->bt, capacity, out)
               : accel_seq_new(pc->dev, capacity, out);
    if (st) return st;
    if (d) {
        lru_unlink(&pc->dev_tier, d);
        lru_push(&pc->dev_tier, d);
    }
    int got = d ? nd : 0;
    if (h && nh > got) {
        int k = got;
        for (; k < nh; k++) {
            st = accel_kv_block_load(pc->dev, *out, h->bytes + (size_t)k * pc->block_bytes);
            if (st == ACCEL_ERR_NOMEM && pc->dev_tier.head && pc->dev_tier.head != d) {
                /* room from the least recently used other holder (dropped, not saved: saving
                 * could give up h itself) */
                entry_free(pc, &pc->dev_tier, pc->dev_tier.head);
                atomic_fetch_add(&pc->st.evictions, 1);
                publish_counts(pc);
                k--;
                continue;
            }
            if (st == ACCEL_ERR_NOMEM) break; /* what loaded stays reused; the rest computed */
            if (st) {
                accel_seq_free(pc->dev, *out);
                *out = NULL;
                return st;
            }
        }
        int keep = k - k % unit_nb; /* a partial unit loaded short of memory is computed again */
        if (keep < k) accel_seq_truncate(pc->dev, *out, keep * pc->bt);
        *from_host = (keep - got) * pc->bt;
        lru_unlink(&pc->host_tier, h);
        lru_push(&pc->host_tier, h);
    }
    *reused = accel_seq_len(pc->dev, *out);
    *approx = (d && d->kind) || (h && h->kind && *from_host);
    atomic_fetch_add(&pc->st.hit_tokens, (uint64_t)*reused);
    atomic_fetch_add(&pc->st.host_hit_tokens, (uint64_t)*from_host);
    return ACCEL_OK;
}

void sched_pcache_publish(sched_pcache *pc, uint64_t kind, accel_seq *s, const int32_t *ids,
                          int n)
{
    int nb = n / pc->bt;
    if (nb <= 0 || n > accel_seq_len(pc->dev, s)) return;
    entry *e = entry_new(pc, kind, ids, nb);
    if (!e) return;
    int have;
    entry *old = longest(&pc->dev_tier, e->ids, e->names, e->kind, nb, pc->bt, &have);
    if (!(old && have == nb) &&
        (accel_seq_fork(pc->dev, s, nb * pc->bt, nb * pc->bt, &e->seq) || accel_seq_hold(pc->dev, e->seq))) {
        if (e->seq) accel_seq_free(pc->dev, e->seq);
        e->seq = NULL;
        old = NULL;
        have = -1; /* not kept */
    }
    /* tier_add's -1 freed e already (its holder too: once, its blocks' references dropped once) */
    if (have == -1 || tier_add(pc, &pc->dev_tier, e) == 0) {
        if (e->seq) accel_seq_free(pc->dev, e->seq);
        free(e->ids);
        free(e->names);
        free(e);
    }
    publish_counts(pc);
}

int sched_pcache_evict(sched_pcache *pc)
{
    entry *e = pc->dev_tier.head;
    if (!e) return 0;
    if (save_to_host(pc, e)) atomic_fetch_add(&pc->st.host_saves, 1);
    entry_free(pc, &pc->dev_tier, e);
    atomic_fetch_add(&pc->st.evictions, 1);
    publish_counts(pc);
    return 1;
}

void sched_pcache_drop_all(sched_pcache *pc)
{
    while (sched_pcache_evict(pc)) {
    }
}

const sched_pcache_stats *sched_pcache_get_stats(const sched_pcache *pc)
{
    return &pc->st;
}

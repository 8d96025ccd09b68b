/* model/sample/sample_select.h — internal to the sampler (model/sample*.c): finding a top-k / top-p
 * boundary without sorting the vocabulary.
 *
 * The boundary search is a radix-select on float values: histogram the keys of the current window
 * into SEL_BINS equal-width bins (keeping each bin's weight and count), walk the bins
 * from the top until the running weight reaches the target, and narrow the window to the key range
 * [min, max] of the members of the bin where it crossed. Because the bin index is a monotone
 * function of the key, that range holds exactly the bin's members; the window's ends are member
 * keys after the first round, which lands them in the first and last bins, so each round strictly
 * shrinks the window (a window of one value is a group of ties: done). Once a bin has at most
 * SEL_LIST members they are copied out so later rounds stop scanning the whole set; at most
 * SEL_SORT members are sorted directly. Two passes over the set per round, usually one round. */
#ifndef TANDEM_MODEL_SAMPLE_SELECT_H
#define TANDEM_MODEL_SAMPLE_SELECT_H
#include <stdint.h>

#define SEL_BINS 1024 /* 10 bits per round: a 128k vocabulary needs 2-3 rounds */
#define SEL_LIST 2048 /* copy a window out once it is this small (16 KiB of ids) */
#define SEL_SORT 32   /* sort a window directly once it is this small */

typedef struct sel_item {
    float key, w;
    int32_t id;
} sel_item;

typedef struct sel_bin {
    double mass;
    int64_t cnt; /* 16 bytes a bin: one cache line touched per item */
} sel_bin;

typedef struct model_sel {
    sel_bin bins[SEL_BINS];
    int32_t list[2][SEL_LIST];
    sel_item items[SEL_SORT];
} model_sel;

/* The items are ids[0..n) (or 0..n-1 when ids is NULL) whose key lies in [lo, hi], where hi is the
 * largest key and lo a finite lower bound of the finite keys (or -INFINITY: computed here), so
 * -inf keys are never items; each weighs w[id] (1 when w is NULL). Sorted by key descending, let r be the first rank whose
 * cumulative weight reaches target; returns key at rank r. target <= 0 returns hi; a target above
 * the total weight (rounding) returns a key <= every item's, i.e. keeps everything. */
float model_sel_boundary(model_sel *x, const float *key, const float *w, const int32_t *ids, int n,
                         float lo, float hi, double target);

#endif

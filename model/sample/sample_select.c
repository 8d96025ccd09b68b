/* model/sample/sample_select.c — the radix-select boundary search and top-N (see
 * sample_select.h). */
#include "model/sample/sample_select.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline int bin_of(float k, double lo, double scale)
{
    int b = (int)(((double)k - lo) * scale);
    return b < SEL_BINS ? b : SEL_BINS - 1;
}

static int item_cmp(const void *a, const void *b)
{
    const sel_item *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Weight of one item: w[id], or 1 in count mode. */
#define WEIGHT(w, id) ((w) ? (double)(w)[id] : 1.0)
#define ID(set, j) ((set) ? (set)[j] : (int32_t)(j))

float model_sel_boundary(model_sel *x, const float *key, const float *w, const int32_t *ids, int n,
                         float lo, float hi, double target)
{
    if (target <= 0) return hi;
    if (!(lo > -INFINITY)) { /* no bound given: the smallest finite key */
        lo = hi;
        for (int j = 0; j < n; j++) {
            float k = key[ID(ids, j)];
            if (k > -INFINITY && k < lo) lo = k;
        }
    }
    const int32_t *set = ids;
    int nset = n, which = 0;
    for (;;) {
        if (!(lo < hi)) return hi; /* every item in the window has the same key: all ties */
        double dlo = lo, scale = SEL_BINS / ((double)hi - dlo);
        memset(x->bins, 0, sizeof x->bins);
        for (int j = 0; j < nset; j++) {
            int32_t id = ID(set, j);
            float k = key[id];
            if (!(k >= lo && k <= hi)) continue;
            sel_bin *b = &x->bins[bin_of(k, dlo, scale)];
            b->mass += WEIGHT(w, id);
            b->cnt++;
        }
        double cum = 0;
        int c = -1;
        for (int b = SEL_BINS - 1; b >= 0; b--) {
            if (!x->bins[b].cnt) continue;
            if (cum + x->bins[b].mass >= target) {
                c = b;
                break;
            }
            cum += x->bins[b].mass;
        }
        if (c < 0) return lo; /* the total fell short of target by rounding: keep everything */
        target -= cum;

        /* The crossing bin's members: their key range is the next window (the bin index is
         * monotone in the key, so that range holds exactly these members). Small bins are copied
         * out, so that later rounds stop scanning the larger set. */
        int cnt = x->bins[c].cnt, m = 0;
        int copy = cnt <= SEL_LIST && cnt < nset;
        int32_t *dst = x->list[which];
        float nlo = hi, nhi = lo;
        for (int j = 0; j < nset; j++) {
            int32_t id = ID(set, j);
            float k = key[id];
            if (!(k >= lo && k <= hi) || bin_of(k, dlo, scale) != c) continue;
            if (k < nlo) nlo = k;
            if (k > nhi) nhi = k;
            if (copy && m < SEL_LIST) dst[m++] = id;
        }
        lo = nlo;
        hi = nhi;
        if (copy) {
            set = dst;
            nset = m;
            which ^= 1;
        }
        if (copy && m <= SEL_SORT) {
            for (int j = 0; j < m; j++)
                x->items[j] = (sel_item){key[dst[j]], w ? w[dst[j]] : 1.0f, dst[j]};
            qsort(x->items, (size_t)m, sizeof x->items[0], item_cmp);
            double acc = 0;
            for (int j = 0; j < m; j++) {
                acc += WEIGHT(w, x->items[j].id);
                if (acc >= target) return x->items[j].key;
            }
            return lo;
        }
    }
}

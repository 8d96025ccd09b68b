/* model/tmpl/tmpl_filters.h — the filter table shared by tmpl_filters.c (text and number filters,
 * the table) and tmpl_filters_seq.c (filters over sequences). Internal. */
#ifndef TANDEM_MODEL_TMPL_FILTERS_H
#define TANDEM_MODEL_TMPL_FILTERS_H
#include "model/tmpl/tmpl_int.h"

typedef int (*tmpl_filter_fn)(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out);

#define TMPL_SEQ_FILTERS(X)                                                                       \
    X(batch) X(dictsort) X(groupby) X(map) X(max) X(min) X(reject) X(rejectattr) X(select)        \
    X(selectattr) X(slice) X(sort) X(unique) X(sum) X(join) X(list) X(first) X(last) X(reverse)  \
    X(items)

#define DECL_FILTER(name) int model_tmpl_f_##name(tmpl_rt *r, tmpl_val in, const tmpl_args *a, tmpl_val *out);
TMPL_SEQ_FILTERS(DECL_FILTER)
#undef DECL_FILTER

/* A generator value (iterates once, always true, no len) holding `items` (consumed). */
void model_tmpl_as_generator(tmpl_val items);
/* Python's key for case-insensitive sorting: str values lowered, others as they are. */
int model_tmpl_ignore_case(tmpl_rt *r, tmpl_val v, tmpl_val *out);

#endif

/* sparse/flex.c — FlexPrefill's shared parameters and rules (see flex.h). */
#include "sparse/flex.h"
#include <stdio.h>

void sparse_flex_params_default(sparse_flex_params *p)
{
    *p = (sparse_flex_params){.gamma = 0.9f, .tau = 0.1f, .min_budget = 1024, .max_budget = 0,
                              .block_size = 128, .gqa_interleave = 0, .dense_below = -1};
}

int sparse_flex_params_check(const sparse_flex_params *p, char *err, size_t errlen)
{
    const char *why = NULL;
    if (!p) why = "no parameters";
    else if (!(p->gamma > 0.0f && p->gamma <= 1.0f)) why = "gamma must be in (0, 1]";
    else if (!(p->tau >= 0.0f && p->tau <= 1.0f)) why = "tau must be in [0, 1]";
    else if (p->min_budget < 0 || p->max_budget < 0) why = "budgets must be >= 0 tokens";
    else if (p->block_size != 16 && p->block_size != 32 && p->block_size != 64 &&
             p->block_size != 128)
        why = "block_size must be 16, 32, 64 or 128";
    else if (p->dense_below < -1 || p->dense_below > SPARSE_FLEX_MAX_TOKENS)
        why = "dense_below must be -1 (official rule) or 0..1M tokens";
    if (why && err) snprintf(err, errlen, "flex: %s", why);
    return why ? SPARSE_FLEX_ERR_INVALID : 0;
}

int sparse_flex_dense_threshold(const sparse_flex_params *p)
{
    if (p->dense_below >= 0) return p->dense_below;
    int64_t bs = p->block_size;
    int64_t minb = sparse_flex_budget_blocks(p->min_budget > 0 ? p->min_budget : 1, (int)bs) * bs;
    int64_t t = 2 * bs > minb ? 2 * bs : minb;
    return t > SPARSE_FLEX_MAX_TOKENS ? SPARSE_FLEX_MAX_TOKENS : (int)t;
}

/* sparse/sparse.c — the sparse prefill decision and the methods' shared rules (see sparse.h). */
#include "sparse/sparse.h"
#include <stdio.h>
#include <string.h>

static const char *const mode_names[] = {"flexprefill", "xattention", "trishape"};

int sparse_mode_parse(const char *s)
{
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, mode_names[i])) return i;
    return -1;
}

const char *sparse_mode_name(int mode)
{
    return mode >= 0 && mode < 3 ? mode_names[mode] : "?";
}

void sparse_params_default(sparse_params *p, int mode)
{
    memset(p, 0, sizeof *p);
    p->mode = mode;
    sparse_flex_params_default(&p->flex);
    /* openvino.genai SparseAttentionConfig: threshold 0.8, stride 8, start 128, recent 1920,
     * last dense 100; block 128 (x-attention's Xattention_prefill; OpenVINO's 64 is its GPU's) */
    p->xattention_threshold = 0.8;
    p->xattention_block_size = 128;
    p->xattention_stride = 8;
    p->num_retained_start_tokens_in_cache = 128;
    p->num_retained_recent_tokens_in_cache = 1920;
    p->num_last_dense_tokens_in_prefill = mode == SPARSE_MODE_FLEX ? 0 : 100;
}

int sparse_params_check(const sparse_params *p, char *err, size_t errlen, const char **key)
{
    const char *why = NULL, *k = NULL;
    char ferr[128];
    if (!p) {
        why = "no parameters";
        k = "sparse_prefill";
    } else if (p->mode < 0 || p->mode > 2) {
        why = "must be flexprefill, xattention or trishape";
        k = "mode";
    } else if (p->num_last_dense_tokens_in_prefill < 0 ||
               p->num_last_dense_tokens_in_prefill > SPARSE_FLEX_MAX_TOKENS) {
        why = "must be 0..1048576 tokens";
        k = "num_last_dense_tokens_in_prefill";
    } else if (p->mode == SPARSE_MODE_FLEX) {
        if (sparse_flex_params_check(&p->flex, ferr, sizeof ferr)) {
            /* sparse_flex_params_check's reason starts "flex: <key> ..." */
            static const char *const fk[] = {"gamma", "tau", "min_budget", "max_budget",
                                             "block_size", "dense_below"};
            k = "sparse_prefill";
            for (size_t i = 0; i < sizeof fk / sizeof fk[0]; i++)
                if (!strncmp(ferr + 6, fk[i], strlen(fk[i]))) k = fk[i];
            if (!strncmp(ferr + 6, "budgets", 7))
                k = p->flex.min_budget < 0 ? "min_budget" : "max_budget";
            why = ferr;
        }
    } else if (p->mode == SPARSE_MODE_XATTN) {
        int bs = p->xattention_block_size, s = p->xattention_stride;
        if (!(p->xattention_threshold > 0.0 && p->xattention_threshold <= 1.0)) {
            why = "must be in (0, 1]";
            k = "xattention_threshold";
        } else if (bs != 16 && bs != 32 && bs != 64 && bs != 128) {
            why = "must be 16, 32, 64 or 128";
            k = "xattention_block_size";
        } else if (s < 1 || s > bs || bs % s) {
            /* Xattention.py reshapes block_size // stride rows per block */
            why = "must divide xattention_block_size";
            k = "xattention_stride";
        }
    } else {
        int st = p->num_retained_start_tokens_in_cache, rc = p->num_retained_recent_tokens_in_cache;
        if (st < 0 || st > SPARSE_FLEX_MAX_TOKENS || st % SPARSE_TRI_BLOCK) {
            why = "must be a multiple of 128 tokens, at most 1048576";
            k = "num_retained_start_tokens_in_cache";
        } else if (rc < 0 || rc > SPARSE_FLEX_MAX_TOKENS || rc % SPARSE_TRI_BLOCK) {
            why = "must be a multiple of 128 tokens, at most 1048576";
            k = "num_retained_recent_tokens_in_cache";
        }
    }
    if (why && err) {
        if (why == ferr && !strncmp(ferr + 6, k, strlen(k))) snprintf(err, errlen, "%s", ferr + 6);
        else if (why == ferr) snprintf(err, errlen, "%s: %s", k, ferr + 6);
        else snprintf(err, errlen, "%s: %s", k, why);
    }
    if (key) *key = why ? k : NULL;
    return why ? SPARSE_ERR_INVALID : 0;
}

int sparse_block_size(const sparse_params *p)
{
    switch (p->mode) {
    case SPARSE_MODE_XATTN: return p->xattention_block_size;
    case SPARSE_MODE_TRISHAPE: return SPARSE_TRI_BLOCK;
    default: return p->flex.block_size;
    }
}

int sparse_plan(const sparse_params *p, int n)
{
    const int bs = sparse_block_size(p), tail = p->num_last_dense_tokens_in_prefill;
    if (n <= 0 || bs <= 0) return 0;
    /* the sparse part ends on a block boundary before the dense tail (the whole prompt when
     * there is no tail: its partial last block is the official code's too) */
    int64_t end = tail > 0 ? (int64_t)(n - tail) / bs * bs : n;
    if (end <= 0) return 0;
    if (p->mode == SPARSE_MODE_FLEX) {
        /* flex_prefill_attention's dense rule on what runs sparse; and the estimate needs a
         * full last block (cpu/flex.h) */
        if (end <= sparse_flex_dense_threshold(&p->flex) || end < 2 * bs) return 0;
        return (int)end;
    }
    /* below two blocks there is nothing to skip: block 0 and the diagonal are always kept */
    return end < 2 * bs ? 0 : (int)end;
}

int sparse_chunk_len(const sparse_params *p, int sparse_end, int done, int want)
{
    const int bs = sparse_block_size(p);
    int left = sparse_end - done;
    if (left <= 0) return 0;
    if (p->mode == SPARSE_MODE_TRISHAPE) want = SPARSE_TRI_CHUNK;
    if (want >= left) return left;
    int k = want / bs * bs;
    if (k < bs) k = bs;
    /* never leave less than a block (FlexPrefill's estimate takes a chunk's last block) */
    return left - k < bs ? left : k;
}

/* FNV-1a over 64-bit words: stable across processes and builds */
static uint64_t key_word(uint64_t h, uint64_t w)
{
    for (int i = 0; i < 8; i++) {
        h ^= (w >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t key_real(uint64_t h, double x)
{
    uint64_t w;
    memcpy(&w, &x, sizeof w);
    return key_word(h, w);
}

uint64_t sparse_params_key(const sparse_params *p)
{
    uint64_t h = key_word(0xcbf29ce484222325ULL, (uint64_t)p->mode + 1);
    h = key_word(h, (uint64_t)(int64_t)p->num_last_dense_tokens_in_prefill);
    switch (p->mode) {
    case SPARSE_MODE_XATTN:
        h = key_real(h, p->xattention_threshold);
        h = key_word(h, (uint64_t)p->xattention_block_size);
        h = key_word(h, (uint64_t)p->xattention_stride);
        break;
    case SPARSE_MODE_TRISHAPE:
        h = key_word(h, (uint64_t)p->num_retained_start_tokens_in_cache);
        h = key_word(h, (uint64_t)p->num_retained_recent_tokens_in_cache);
        break;
    default:
        h = key_real(h, p->flex.gamma);
        h = key_real(h, p->flex.tau);
        h = key_word(h, (uint64_t)(int64_t)p->flex.min_budget);
        h = key_word(h, (uint64_t)(int64_t)p->flex.max_budget);
        h = key_word(h, (uint64_t)p->flex.block_size);
        h = key_word(h, (uint64_t)p->flex.gqa_interleave);
        h = key_word(h, (uint64_t)(int64_t)p->flex.dense_below);
        break;
    }
    return h ? h : 1;
}

int sparse_resume_align(const sparse_params *p)
{
    return p->mode == SPARSE_MODE_TRISHAPE ? SPARSE_TRI_CHUNK : sparse_block_size(p);
}

int sparse_xattn_official_chunk(int k_len)
{
    int64_t p = 1;
    while (p < k_len) p <<= 1;
    int64_t a = p > 2048 ? p : 2048, b = ((int64_t)128 * 1024 * 2048) / p;
    int64_t c = a < b ? a : b;
    return (int)(c > 2048 ? c : 2048);
}

void sparse_tri_skip(const sparse_params *p, int cached, int *lo, int *hi)
{
    const int s = p->num_retained_start_tokens_in_cache / SPARSE_TRI_BLOCK;
    const int r = p->num_retained_recent_tokens_in_cache / SPARSE_TRI_BLOCK;
    const int c = cached / SPARSE_TRI_BLOCK;
    *lo = *hi = 0;
    if (c > s + r) {
        *lo = s * SPARSE_TRI_BLOCK;
        *hi = (c - r) * SPARSE_TRI_BLOCK;
    }
}

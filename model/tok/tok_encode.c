/* model/tok/tok_encode.c — text -> ids: tokenizers' encode pipeline.
 *
 *   1. added tokens with normalized=false are cut out of the raw text;
 *   2. each remaining span is normalized, then added tokens with normalized=true are cut out of
 *      the normalized text (matched as their normalized content);
 *   3. each remaining span is pre-tokenized and BPE-encoded (model/tok/tok_pretok.c, tok_bpe.c);
 *   4. the post-processor's special ids go around the result when add_special is set.
 * Added tokens match leftmost-longest, honouring single_word, lstrip and rstrip exactly as
 * tokenizers' AddedVocabulary::find_matches does (a rejected match is not retried shorter). */
#include "model/tok/tok_internal.h"
#include <stdlib.h>
#include <string.h>

typedef struct seg {
    size_t a, b;
    int32_t id; /* added token id, or -1 for text */
} seg;
typedef struct segs {
    seg *p;
    size_t n, cap;
} segs;

static int segs_push(segs *v, size_t a, size_t b, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        seg *p = realloc(v->p, cap * sizeof *p);
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = (seg){a, b, id};
    return 0;
}

/* The code point that ends at s[end) (end > 0). */
static uint32_t cp_before(const char *s, size_t end, size_t *start)
{
    size_t k = proto_utf8_prev(s, end), l;
    uint32_t cp;
    if (proto_utf8_scan((const uint8_t *)s + k, end - k, &l, &cp) != PROTO_UTF8_OK || k + l != end)
        cp = 0xFFFD, k = end - 1;
    *start = k;
    return cp;
}

static uint32_t cp_at(const char *s, size_t n, size_t *len)
{
    uint32_t cp;
    if (proto_utf8_scan((const uint8_t *)s, n, len, &cp) != PROTO_UTF8_OK) cp = 0xFFFD;
    return cp;
}

/* Longest pattern starting at s[i], or -1. */
static int32_t trie_match(const tok_trie *tr, const char *s, size_t n, size_t i, size_t *end)
{
    int32_t node = 0, best = -1;
    for (size_t k = i; k < n; k++) {
        uint8_t c = (uint8_t)s[k];
        int32_t ch = tr->child[node];
        while (ch >= 0 && tr->label[ch] != c) ch = tr->sibling[ch];
        if (ch < 0) break;
        node = ch;
        if (tr->term[node] >= 0) {
            best = tr->term[node];
            *end = k + 1;
        }
    }
    return best;
}

static int find_added(const model_tok *t, const tok_trie *tr, const char *s, size_t n, segs *out)
{
    out->n = 0;
    if (n == 0) return 0;
    if (tr->empty) return segs_push(out, 0, n, -1);
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        size_t i = pos, me = 0;
        int32_t k = -1;
        for (; i < n; i++)
            if (tr->first[(uint8_t)s[i]] && (k = trie_match(tr, s, n, i, &me)) >= 0) break;
        if (k < 0) break;
        const tok_added *a = &t->added[k];
        size_t start = i, stop = me, l;
        pos = me;
        if (a->single_word) {
            size_t st;
            int start_space = start == 0 || !model_tok_cp_is_word(cp_before(s, start, &st));
            int stop_space = stop == n || !model_tok_cp_is_word(cp_at(s + stop, n - stop, &l));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start, st;
            while (ns > 0 && model_tok_cp_is_space(cp_before(s, ns, &st))) ns = st;
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip)
            while (stop < n && model_tok_cp_is_space(cp_at(s + stop, n - stop, &l))) stop += l;
        if (start_offset < start && segs_push(out, start_offset, start, -1)) return -1;
        if (segs_push(out, start, stop, a->id)) return -1;
        start_offset = stop;
    }
    if (start_offset < n && segs_push(out, start_offset, n, -1)) return -1;
    return 0;
}

/* Normalizes one raw span, cuts out normalized added tokens, pre-tokenizes the rest. */
static int encode_span(tok_work *w, const char *s, size_t n, int at_origin, proto_buf *norm,
                       segs *sv)
{
    const model_tok *t = w->t;
    const char *ns = s;
    size_t nn = n;
    if (t->n_norm) {
        if (model_tok_normalize(t, s, n, norm)) return -1;
        ns = norm->p;
        nn = norm->len;
    }
    if (find_added(t, &t->norm_trie, ns, nn, sv)) return -1;
    for (size_t i = 0; i < sv->n; i++) {
        seg g = sv->p[i];
        if (g.id >= 0) {
            if (model_tok_ids_put(&w->out, &g.id, 1)) return -1;
            continue;
        }
        if (g.b <= g.a) continue;
        size_t mark = w->text.len;
        if (proto_buf_add(&w->text, ns + g.a, g.b - g.a)) return -1;
        int rc = model_tok_pretokenize(w, mark, g.b - g.a, at_origin && g.a == 0);
        w->text.len = mark;
        if (rc) return -1;
    }
    return 0;
}

int model_tok_encode(const model_tok *t, const char *text, size_t len, int add_special,
                     int32_t **ids_out, size_t *n_out)
{
    if (ids_out) *ids_out = NULL;
    if (n_out) *n_out = 0;
    if (!t || !ids_out || !n_out || (!text && len) || len > TOK_MAX_INPUT_BYTES) return -1;
    proto_buf clean = {0}, norm = {0};
    segs raw = {0}, sv = {0};
    tok_work w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.md = model_tok_re_match_data();
    w.use_cache = len >= 1024; /* short texts rarely repeat a word */
    if (w.use_cache) w.cache.seed = model_tok_hash_seed();
    int rc = -1;
    if (!w.md) goto done;
    if (proto_utf8_valid_len(text, len) != len) {
        if (proto_utf8_lossy(&clean, text, len)) goto done;
        text = clean.p;
        len = clean.len;
    }
    if (add_special && model_tok_ids_put(&w.out, t->pp_prefix, t->n_prefix)) goto done;
    if (find_added(t, &t->raw_trie, text, len, &raw)) goto done;
    for (size_t i = 0; i < raw.n; i++) {
        seg g = raw.p[i];
        if (g.id >= 0) {
            if (model_tok_ids_put(&w.out, &g.id, 1)) goto done;
        } else if (g.b > g.a && encode_span(&w, text + g.a, g.b - g.a, g.a == 0, &norm, &sv)) {
            goto done;
        }
    }
    if (add_special && model_tok_ids_put(&w.out, t->pp_suffix, t->n_suffix)) goto done;
    rc = 0;
    *n_out = w.out.len;
    if (w.out.len) {
        *ids_out = w.out.p;
        w.out.p = NULL;
    }
done:
    model_tok_work_free(&w);
    proto_buf_deinit(&clean);
    proto_buf_deinit(&norm);
    free(raw.p);
    free(sv.p);
    return rc;
}

/* model/tok/tok_encode.c — text -> ids: tokenizers' encode pipeline.
 *
 *   1. added tokens with normalized=false are cut out of the raw text;
 *   2. each remaining span is normalized, then added tokens with normalized=true are cut out of
 *      the normalized text (matched as their normalized content);
 *   3. each remaining span is pre-tokenized and BPE-encoded (model/tok/tok_pretok.c, tok_bpe.c);
 *   4. the post-processor's special ids go around the result when add_special is set.
 * Added tokens match leftmost-longest, honouring single_word, lstrip and rstrip exactly as
 * tokenizers' AddedVocabulary::find_matches does (a rejected match is not retried shorter).
 *
 * Literal ranges (tok_lit: escaped special-token strings, model/tok/tok_escape.c) make a special
 * token's match that overlaps one rejected the same way, as find_matches rejects special tokens
 * under encode_special_tokens; the range stays in its text span, normalized and pre-tokenized
 * with its neighbours. In step 2 the ranges are found in the normalized text by normalizing the
 * span's pieces one by one: where the pieces' results do not join up to the span's (a normalizer
 * that reaches across a cut), every special match of that span's normalized text is rejected,
 * erring towards text. */
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

int32_t model_tok_trie_longest(const tok_trie *tr, const char *s, size_t n, size_t i, size_t *end)
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

/* Literal ranges of one search; lit_all: every special match is rejected. */
typedef struct lit_set {
    const tok_lit *p;
    size_t n, next;
    int all;
} lit_set;

/* 1 when [a, b) overlaps a literal range (calls come with a growing a). */
static int lit_overlaps(lit_set *ls, size_t a, size_t b)
{
    if (ls->all) return 1;
    while (ls->next < ls->n && ls->p[ls->next].b <= a) ls->next++;
    return ls->next < ls->n && ls->p[ls->next].a < b;
}

static int find_added(const model_tok *t, const tok_trie *tr, const char *s, size_t n, lit_set *ls,
                      segs *out)
{
    out->n = 0;
    if (n == 0) return 0;
    if (tr->empty) return segs_push(out, 0, n, -1);
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        size_t i = pos, me = 0;
        int32_t k = -1;
        for (; i < n; i++)
            if (tr->first[(uint8_t)s[i]] && (k = model_tok_trie_longest(tr, s, n, i, &me)) >= 0)
                break;
        if (k < 0) break;
        const tok_added *a = &t->added[k];
        size_t start = i, stop = me, l;
        pos = me;
        if (a->special && ls && lit_overlaps(ls, start, stop)) continue;
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

/* The literal ranges lits[0..nl) of the span s[0..n) (span offsets, inside it) in its normalized
 * text ns[0..nn): each piece between cuts normalized alone (Prepend only at the start), their
 * lengths summed. *all is set when the pieces do not join up to ns. Ranges into *out. */
static int lits_normalized(const model_tok *t, const char *s, size_t n, const tok_lit *lits,
                           size_t nl, const char *ns, size_t nn, tok_lit *out, int *all)
{
    proto_buf piece = {0};
    size_t at = 0, o = 0; /* raw and normalized offsets of the next piece */
    int rc = 0;
    *all = 0;
    for (size_t i = 0; i <= 2 * nl && !rc && !*all; i++) {
        size_t end = i == 2 * nl ? n : i % 2 ? lits[i / 2].b : lits[i / 2].a;
        if (end < at) end = at;
        rc = at == 0 ? model_tok_normalize(t, s, end, &piece)
                     : model_tok_normalize_inner(t, s + at, end - at, &piece);
        if (rc) break;
        if (o + piece.len > nn || (piece.len && memcmp(ns + o, piece.p, piece.len))) *all = 1;
        o += piece.len;
        if (i < 2 * nl) {
            if (i % 2)
                out[i / 2].b = o;
            else
                out[i / 2].a = o;
        }
        at = end;
    }
    if (!rc && o != nn) *all = 1;
    proto_buf_deinit(&piece);
    return rc;
}

/* Normalizes one raw span, cuts out normalized added tokens, pre-tokenizes the rest. lits: the
 * literal ranges inside the span, span offsets. */
static int encode_span(tok_work *w, const char *s, size_t n, int at_origin, const tok_lit *lits,
                       size_t nl, proto_buf *norm, segs *sv)
{
    const model_tok *t = w->t;
    const char *ns = s;
    size_t nn = n;
    if (t->n_norm) {
        if (model_tok_normalize(t, s, n, norm)) return -1;
        ns = norm->p;
        nn = norm->len;
    }
    /* without a normalizer the span's offsets are the normalized text's; without a normalized
     * special token nothing here is ever checked against a range */
    lit_set ls = {lits, t->spec_normalized ? nl : 0, 0, 0};
    tok_lit *nlits = NULL;
    if (ls.n && t->n_norm) {
        nlits = malloc(nl * sizeof *nlits);
        if (!nlits || lits_normalized(t, s, n, lits, nl, ns, nn, nlits, &ls.all)) {
            free(nlits);
            return -1;
        }
        ls.p = nlits;
    }
    int rc = find_added(t, &t->norm_trie, ns, nn, &ls, sv);
    free(nlits);
    if (rc) return -1;
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
    return model_tok_encode_lits(t, text, len, add_special, NULL, 0, ids_out, n_out);
}

int model_tok_encode_lits(const model_tok *t, const char *text, size_t len, int add_special,
                          const tok_lit *lits, size_t nl, int32_t **ids_out, size_t *n_out)
{
    if (ids_out) *ids_out = NULL;
    if (n_out) *n_out = 0;
    if (!t || !ids_out || !n_out || (!text && len) || len > TOK_MAX_INPUT_BYTES || (nl && !lits))
        return -1;
    proto_buf clean = {0}, norm = {0};
    segs raw = {0}, sv = {0};
    struct {
        tok_lit *p;
        size_t cap;
    } span_lits = {0};
    tok_work w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.md = model_tok_re_match_data();
    w.use_cache = len >= 1024; /* short texts rarely repeat a word */
    if (w.use_cache) w.cache.seed = model_tok_hash_seed();
    int rc = -1;
    if (!w.md) goto done;
    if (proto_utf8_valid_len(text, len) != len) {
        if (nl) goto done; /* the ranges are offsets of valid text */
        if (proto_utf8_lossy(&clean, text, len)) goto done;
        text = clean.p;
        len = clean.len;
    }
    if (add_special && model_tok_ids_put(&w.out, t->pp_prefix, t->n_prefix)) goto done;
    lit_set ls = {lits, nl, 0, 0};
    if (find_added(t, &t->raw_trie, text, len, &ls, &raw)) goto done;
    size_t li = 0;
    for (size_t i = 0; i < raw.n; i++) {
        seg g = raw.p[i];
        if (g.id >= 0) {
            if (model_tok_ids_put(&w.out, &g.id, 1)) goto done;
            continue;
        }
        if (g.b <= g.a) continue;
        /* this span's literal ranges, clipped to it, in span offsets (a non-special added
         * token may still cut one) */
        while (li < nl && lits[li].b <= g.a) li++;
        size_t lj = li;
        while (lj < nl && lits[lj].a < g.b) lj++;
        if (lj - li > span_lits.cap) {
            free(span_lits.p);
            span_lits.p = malloc((lj - li) * sizeof *span_lits.p);
            span_lits.cap = span_lits.p ? lj - li : 0;
            if (!span_lits.p) goto done;
        }
        for (size_t k = li; k < lj; k++) {
            size_t a = lits[k].a > g.a ? lits[k].a : g.a, b = lits[k].b < g.b ? lits[k].b : g.b;
            span_lits.p[k - li] = (tok_lit){a - g.a, b - g.a};
        }
        if (encode_span(&w, text + g.a, g.b - g.a, g.a == 0, span_lits.p, lj - li, &norm, &sv))
            goto done;
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
    free(span_lits.p);
    return rc;
}

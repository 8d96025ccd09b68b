/* model/tok/tok_pretok.c — pre-tokenizers: Split (by regex or string, five delimiter behaviors,
 * invert), ByteLevel (prefix space, GPT-2 regex, byte mapping) and Metaspace.
 *
 * A piece runs through the steps depth first: each step cuts it and hands every part to the next
 * step at once, and the last step hands it to BPE, so ids come out in text order without lists
 * of all pieces. New text (a prepended space, ▁ for spaces) goes on top of w->text and is popped
 * when the step returns; pieces are offsets into w->text because it may move when it grows. */
#include "model/tok/tok_internal.h"
#include <stdlib.h>
#include <string.h>

/* The regex tokenizers' ByteLevel pre-tokenizer applies when use_regex is set (GPT-2's). */
const char *const model_tok_gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
 * themselves; the other 68 bytes, in order, take U+0100 upwards. */
uint32_t model_tok_byte_char(uint8_t b)
{
    if (b <= 32) return 256u + b;
    if (b >= 127 && b <= 160) return 256u + 33 + (b - 127u);
    if (b == 173) return 256u + 67;
    return b;
}

int model_tok_char_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp <= 256 + 32) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp <= 256 + 66) return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 67) return 173;
    return -1;
}

static int run(tok_work *w, int step, size_t off, size_t len, int at_origin);

typedef struct span {
    size_t a, b;
    int m; /* a match (before behaviors) / kept (after) */
} span;
typedef struct spans {
    span *p;
    size_t n, cap;
} spans;

static int spans_push(spans *v, size_t a, size_t b, int m)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        span *p = realloc(v->p, cap * sizeof *p);
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = (span){a, b, m};
    return 0;
}

/* tokenizers' Pattern::find_matches: the text cut into alternating non-match/match spans. An empty
 * match right after the previous match is skipped and the search moves one character on
 * (Oniguruma's find_iter). */
static int find_matches(tok_work *w, const tok_re *re, const char *s, size_t n, spans *out)
{
    size_t pos = 0, prev = 0, ms, me;
    int r, had = 0;
    while (pos <= n && (r = model_tok_re_find(re, w->md, s, n, pos, &ms, &me)) == 1) {
        if (ms == me) {
            size_t l = 1;
            uint32_t cp;
            if (ms < n) proto_utf8_scan((const uint8_t *)s + ms, n - ms, &l, &cp);
            pos = ms + l;
            if (had && ms == prev) continue;
        } else {
            pos = me;
        }
        if (ms > prev && spans_push(out, prev, ms, 0)) return -1;
        if (spans_push(out, ms, me, 1)) return -1;
        prev = me;
        had = 1;
    }
    if (r < 0) return -1;
    if (prev < n && spans_push(out, prev, n, 0)) return -1;
    return 0;
}

/* NormalizedString::split's behaviors, in place: m becomes "keep this span". */
static void apply_behavior(spans *v, enum tok_split_behavior b)
{
    size_t o = 0;
    int prev_match = 0;
    switch (b) {
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < v->n; i++) v->p[i].m = !v->p[i].m;
        return;
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < v->n; i++) v->p[i].m = 1;
        return;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < v->n; i++) {
            int m = v->p[i].m;
            if (o > 0 && m == prev_match)
                v->p[o - 1].b = v->p[i].b;
            else
                v->p[o++] = (span){v->p[i].a, v->p[i].b, 1};
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < v->n; i++) {
            int m = v->p[i].m;
            if (m && !prev_match && o > 0)
                v->p[o - 1].b = v->p[i].b;
            else
                v->p[o++] = (span){v->p[i].a, v->p[i].b, 1};
            prev_match = m;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_NEXT:
        /* Walk backwards: a match absorbs the span after it unless that one is a match too. */
        o = v->n;
        for (size_t k = v->n; k-- > 0;) {
            int m = v->p[k].m;
            if (m && !prev_match && o < v->n)
                v->p[o].a = v->p[k].a;
            else
                v->p[--o] = (span){v->p[k].a, v->p[k].b, 1};
            prev_match = m;
        }
        memmove(v->p, v->p + o, (v->n - o) * sizeof *v->p);
        o = v->n - o;
        break;
    }
    v->n = o;
}

/* Splits w->text[off..off+len) with re (Isolated for ByteLevel) and runs the next step on every
 * kept span. */
static int split_step(tok_work *w, int step, const tok_re *re, enum tok_split_behavior behavior,
                      int invert, size_t off, size_t len, int at_origin)
{
    spans v = {0};
    int rc = find_matches(w, re, w->text.p + off, len, &v);
    if (!rc) {
        if (invert)
            for (size_t i = 0; i < v.n; i++) v.p[i].m = !v.p[i].m;
        apply_behavior(&v, behavior);
        for (size_t i = 0; i < v.n && !rc; i++)
            if (v.p[i].m) rc = run(w, step + 1, off + v.p[i].a, v.p[i].b - v.p[i].a,
                                   at_origin && v.p[i].a == 0);
    }
    free(v.p);
    return rc;
}

static int byte_level_step(tok_work *w, int step, const tok_pre *p, size_t off, size_t len,
                           int at_origin)
{
    size_t mark = w->text.len;
    if (p->add_prefix_space && w->text.p[off] != ' ') {
        if (proto_buf_reserve(&w->text, len + 1)) return -1;
        w->text.p[w->text.len] = ' ';
        memcpy(w->text.p + w->text.len + 1, w->text.p + off, len);
        off = w->text.len;
        len += 1;
        w->text.len += len;
    }
    int rc = p->use_regex ? split_step(w, step, &p->re, TOK_SPLIT_ISOLATED, 0, off, len, at_origin)
                          : run(w, step + 1, off, len, at_origin);
    w->text.len = mark;
    return rc;
}

static int metaspace_step(tok_work *w, int step, const tok_pre *p, size_t off, size_t len,
                          int at_origin)
{
    size_t mark = w->text.len, spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += w->text.p[off + i] == ' ';
    if (proto_buf_reserve(&w->text, len + (spaces + 1) * p->repl_len)) return -1;
    char *dst = w->text.p + mark;
    const char *src = w->text.p + off;
    size_t o = 0;
    int starts = len >= p->repl_len && !memcmp(src, p->repl, p->repl_len);
    /* A space becomes the replacement, so text starting with a space starts with it too. */
    int starts_after = starts || (len > 0 && src[0] == ' ');
    if (!starts_after && (p->prepend == TOK_PREPEND_ALWAYS ||
                          (p->prepend == TOK_PREPEND_FIRST && at_origin))) {
        memcpy(dst, p->repl, p->repl_len);
        o += p->repl_len;
    }
    for (size_t i = 0; i < len; i++) {
        if (src[i] == ' ') {
            memcpy(dst + o, p->repl, p->repl_len);
            o += p->repl_len;
        } else {
            dst[o++] = src[i];
        }
    }
    w->text.len += o;
    int rc;
    if (p->split) {
        /* MergedWithNext on every replacement char: each piece starts with one. */
        rc = 0;
        size_t start = 0;
        for (size_t i = 0; i + p->repl_len <= o && !rc; i++) {
            if (i > start && !memcmp(w->text.p + mark + i, p->repl, p->repl_len)) {
                rc = run(w, step + 1, mark + start, i - start, at_origin && start == 0);
                start = i;
            }
        }
        if (!rc && start < o) rc = run(w, step + 1, mark + start, o - start, at_origin && start == 0);
    } else {
        rc = run(w, step + 1, mark, o, at_origin);
    }
    w->text.len = mark;
    return rc;
}

static int run(tok_work *w, int step, size_t off, size_t len, int at_origin)
{
    const model_tok *t = w->t;
    if (len == 0) return 0; /* tokenizers drops empty pieces */
    if (step == t->n_pre) return model_tok_bpe(w, w->text.p + off, len);
    const tok_pre *p = &t->pre[step];
    switch (p->kind) {
    case TOK_PRE_SPLIT:
        return split_step(w, step, &p->re, p->behavior, p->invert, off, len, at_origin);
    case TOK_PRE_BYTE_LEVEL: return byte_level_step(w, step, p, off, len, at_origin);
    case TOK_PRE_METASPACE: return metaspace_step(w, step, p, off, len, at_origin);
    }
    return -1;
}

int model_tok_pretokenize(tok_work *w, size_t off, size_t len, int at_origin)
{
    return run(w, 0, off, len, at_origin);
}

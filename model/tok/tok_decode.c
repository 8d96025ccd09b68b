/* model/tok/tok_decode.c — ids -> text through the tokenizer.json decoder chain, streaming.
 *
 * tokenizers decodes a whole id list at once: it drops skipped ids, maps ids to token strings and
 * runs the decoder steps over the list. Here each step is a stage that takes tokens one at a time
 * and passes its output on, keeping only what the rest of the list could still change:
 *   Replace, Metaspace, Strip (per token)   nothing (Metaspace counts tokens: the first differs)
 *   ByteFallback                            the current run of <0xNN> tokens: tokenizers turns a
 *                                           run into its text when all of it is valid UTF-8, else
 *                                           into one U+FFFD per byte, so a run is only final
 *                                           when a non-byte token (or the end) closes it
 *   Fuse, ByteLevel                         after them the tokens are one string arriving in
 *                                           chunks; ByteLevel holds an unfinished UTF-8 sequence
 *                                           (from_utf8_lossy over the whole string)
 *   Strip after Fuse/ByteLevel              how many leading chars were stripped, and up to
 *                                           `stop` trailing ones that may turn out to be last
 * After the chain, when tokenizer_config.json sets clean_up_tokenization_spaces, transformers'
 * clean_up_tokenization runs: ten str.replace passes, one after the other, over the whole text.
 * Each pass is a stage too, holding back a tail that could still begin its pattern.
 * The full decode is the stream fed every id and flushed, so the two agree by construction. */
#include "model/tok/tok_internal.h"
#include <stdlib.h>
#include <string.h>

typedef struct stage {
    size_t count; /* tokens seen (Metaspace) */
    proto_buf run;  /* ByteFallback: bytes of the open run; ByteLevel: unfinished UTF-8 */
    proto_buf scratch, tmp;
    int left_closed;  /* Strip after Fuse: the leading strip is over */
    size_t left_done; /* ... chars stripped so far */
    size_t held;      /* ... trailing strip chars held back */
} stage;

/* transformers' PreTrainedTokenizerBase.clean_up_tokenization, in its order */
#define CLEANUP_PASSES 10
static const char *const cleanup_pat[CLEANUP_PASSES][2] = {
    {" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},     {" ' ", "'"},
    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

struct model_tok_stream {
    const model_tok *t;
    int skip_special;
    proto_buf out;
    proto_buf clean_hold[CLEANUP_PASSES], clean_work[CLEANUP_PASSES];
    size_t ntok; /* tokens emitted with no decoder (joined with spaces) */
    stage *st;
    pcre2_match_data *md;
    int failed;
    size_t skip_chars; /* model_tok_stream_skip: chars of the prompt's held tail still to drop */
};

static void push(model_tok_stream *s, int i, const char *p, size_t n);

static void put(model_tok_stream *s, proto_buf *b, const void *p, size_t n)
{
    if (proto_buf_add(b, p, n)) s->failed = 1;
}

/* Cleanup pass k over the next chunk of text (final: the end, release what is held). The
 * patterns are ASCII, so a held tail never splits a UTF-8 character. */
static void cleanup(model_tok_stream *s, int k, const char *p, size_t n, int final)
{
    if (k == CLEANUP_PASSES) {
        put(s, &s->out, p, n);
        return;
    }
    const char *pat = cleanup_pat[k][0], *rep = cleanup_pat[k][1];
    size_t pl = strlen(pat), rl = strlen(rep);
    proto_buf *w = &s->clean_work[k], *h = &s->clean_hold[k];
    w->len = 0;
    put(s, w, h->p, h->len);
    put(s, w, p, n);
    h->len = 0;
    if (s->failed) return;
    /* in place: the output never outgrows the input (every replacement is shorter) */
    size_t i = 0, o = 0;
    while (i < w->len) {
        size_t left = w->len - i;
        if (left >= pl && !memcmp(w->p + i, pat, pl)) {
            memcpy(w->p + o, rep, rl);
            o += rl;
            i += pl;
        } else if (!final && left < pl && !memcmp(w->p + i, pat, left)) {
            put(s, h, w->p + i, left); /* may still become the pattern */
            break;
        } else {
            w->p[o++] = w->p[i++];
        }
    }
    cleanup(s, k + 1, w->p, o, final);
}

static void emit(model_tok_stream *s, const char *p, size_t n)
{
    if (!s->t->has_decoder && s->ntok++ > 0) {
        if (s->t->clean_up_spaces)
            cleanup(s, 0, " ", 1, 0);
        else
            put(s, &s->out, " ", 1);
    }
    if (s->t->clean_up_spaces)
        cleanup(s, 0, p, n, 0);
    else
        put(s, &s->out, p, n);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xNN>" -> byte, else -1 */
static int byte_token(const char *p, size_t n)
{
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    int hi = hexval(p[3]), lo = hexval(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static uint32_t cp_of(const char *p, size_t n, size_t *l)
{
    uint32_t cp;
    if (proto_utf8_scan((const uint8_t *)p, n, l, &cp) != PROTO_UTF8_OK) cp = 0xFFFD;
    return cp;
}

static void replace(model_tok_stream *s, int i, const tok_dec *d, const char *p, size_t n)
{
    proto_buf *o = &s->st[i].scratch;
    o->len = 0;
    size_t pos = 0, last = 0, ms, me;
    int r;
    while ((r = model_tok_re_find(&d->re, s->md, p, n, pos, &ms, &me)) == 1) {
        if (me == ms) {
            size_t l = 1;
            if (ms < n) cp_of(p + ms, n - ms, &l);
            pos = ms + l;
            if (pos > n) break;
            continue;
        }
        put(s, o, p + last, ms - last);
        put(s, o, d->content, d->content_len);
        last = pos = me;
    }
    if (r < 0) s->failed = 1;
    put(s, o, p + last, n - last);
    push(s, i + 1, o->p, o->len);
}

static void metaspace(model_tok_stream *s, int i, const tok_dec *d, const char *p, size_t n)
{
    stage *st = &s->st[i];
    size_t idx = d->joined ? 0 : st->count++;
    int drop = idx == 0 && d->prepend; /* the first token loses its replacement chars */
    proto_buf *o = &st->scratch;
    o->len = 0;
    for (size_t k = 0; k < n;) {
        if (k + d->repl_len <= n && !memcmp(p + k, d->repl, d->repl_len)) {
            if (!drop) put(s, o, " ", 1);
            k += d->repl_len;
        } else {
            put(s, o, p + k, 1);
            k++;
        }
    }
    push(s, i + 1, o->p ? o->p : "", o->len);
}

/* Up to `max` chars equal to cp at the start (from_end = 0) or end of p: their byte count. */
static size_t count_run(const char *p, size_t n, uint32_t cp, size_t max, int from_end,
                        size_t *chars)
{
    char enc[4];
    size_t cl = proto_utf8_put(enc, cp), b = 0, c = 0;
    while (c < max && b + cl <= n &&
           !memcmp(from_end ? p + n - b - cl : p + b, enc, cl)) {
        b += cl;
        c++;
    }
    *chars = c;
    return b;
}

static void strip_token(model_tok_stream *s, int i, const tok_dec *d, const char *p, size_t n)
{
    size_t c, a = count_run(p, n, d->strip_cp, d->strip_start, 0, &c);
    size_t z = count_run(p, n, d->strip_cp, d->strip_stop, 1, &c);
    push(s, i + 1, p + a, a + z <= n ? n - a - z : 0);
}

static void strip_joined(model_tok_stream *s, int i, const tok_dec *d, const char *p, size_t n)
{
    stage *st = &s->st[i];
    char enc[4];
    size_t cl = proto_utf8_put(enc, d->strip_cp), c;
    if (!st->left_closed) {
        size_t k = count_run(p, n, d->strip_cp, d->strip_start - st->left_done, 0, &c);
        st->left_done += c;
        p += k;
        n -= k;
        if (n > 0 || st->left_done >= d->strip_start) st->left_closed = 1;
    }
    if (n == 0) return;
    if (d->strip_stop == 0) {
        push(s, i + 1, p, n);
        return;
    }
    size_t tail = count_run(p, n, d->strip_cp, (size_t)-1, 1, &c);
    proto_buf *o = &st->tmp;
    o->len = 0;
    if (tail == n) { /* all strip chars: they may be the end; keep at most `stop` of them */
        st->held += c;
        for (; st->held > d->strip_stop; st->held--) put(s, o, enc, cl);
        if (o->len) push(s, i + 1, o->p, o->len);
        return;
    }
    for (; st->held > 0; st->held--) put(s, o, enc, cl);
    size_t keep = c < d->strip_stop ? c : d->strip_stop;
    put(s, o, p, n - keep * cl);
    st->held = keep;
    push(s, i + 1, o->p, o->len);
}

static void close_run(model_tok_stream *s, int i)
{
    proto_buf *r = &s->st[i].run;
    if (!r->len) return;
    size_t n = r->len;
    r->len = 0; /* nothing downstream touches this stage's buffer */
    if (proto_utf8_valid_len(r->p, n) == n)
        push(s, i + 1, r->p, n);
    else
        for (size_t k = 0; k < n; k++) push(s, i + 1, PROTO_UTF8_FFFD, 3);
}

/* Appends bytes to the pending UTF-8 and passes on everything that is now final. */
static void lossy_feed(model_tok_stream *s, int i, const char *p, size_t n)
{
    stage *st = &s->st[i];
    proto_buf *acc = &st->run, *o = &st->tmp;
    put(s, acc, p, n);
    o->len = 0;
    size_t k = 0;
    while (k < acc->len) {
        size_t ok = proto_utf8_valid_len(acc->p + k, acc->len - k);
        put(s, o, acc->p + k, ok);
        k += ok;
        if (k >= acc->len) break;
        size_t l;
        uint32_t cp;
        if (proto_utf8_scan((const uint8_t *)acc->p + k, acc->len - k, &l, &cp) ==
            PROTO_UTF8_SHORT)
            break; /* may still complete */
        put(s, o, PROTO_UTF8_FFFD, 3);
        k += l;
    }
    memmove(acc->p, acc->p + k, acc->len - k);
    acc->len -= k;
    if (o->len) push(s, i + 1, o->p, o->len);
}

static void byte_level(model_tok_stream *s, int i, const char *p, size_t n)
{
    /* tokenizers maps each char back to its byte; a token with any char outside the map (an
     * added token such as one with a real space) contributes its UTF-8 bytes unchanged. */
    proto_buf *o = &s->st[i].scratch;
    o->len = 0;
    for (size_t k = 0; k < n;) {
        size_t l;
        uint32_t cp = cp_of(p + k, n - k, &l);
        int b = model_tok_char_byte(cp);
        if (b < 0) {
            o->len = 0;
            put(s, o, p, n);
            break;
        }
        char c = (char)b;
        put(s, o, &c, 1);
        k += l;
    }
    lossy_feed(s, i, o->p ? o->p : "", o->len);
}

static void push(model_tok_stream *s, int i, const char *p, size_t n)
{
    const model_tok *t = s->t;
    if (s->failed) return;
    if (i == t->n_dec) {
        emit(s, p, n);
        return;
    }
    const tok_dec *d = &t->dec[i];
    switch (d->kind) {
    case TOK_DEC_REPLACE: replace(s, i, d, p, n); break;
    case TOK_DEC_METASPACE: metaspace(s, i, d, p, n); break;
    case TOK_DEC_STRIP:
        if (d->joined)
            strip_joined(s, i, d, p, n);
        else
            strip_token(s, i, d, p, n);
        break;
    case TOK_DEC_BYTE_FALLBACK: {
        int b = d->joined ? -1 : byte_token(p, n);
        if (b >= 0) {
            char c = (char)b;
            put(s, &s->st[i].run, &c, 1);
            break;
        }
        close_run(s, i);
        push(s, i + 1, p, n);
        break;
    }
    case TOK_DEC_FUSE: push(s, i + 1, p, n); break;
    case TOK_DEC_BYTE_LEVEL: byte_level(s, i, p, n); break;
    }
}

static void flush(model_tok_stream *s, int i)
{
    const model_tok *t = s->t;
    if (s->failed) return;
    if (i == t->n_dec) {
        if (t->clean_up_spaces) cleanup(s, 0, "", 0, 1);
        return;
    }
    const tok_dec *d = &t->dec[i];
    stage *st = &s->st[i];
    if (d->kind == TOK_DEC_BYTE_FALLBACK) close_run(s, i);
    if (d->kind == TOK_DEC_BYTE_LEVEL && st->run.len) {
        st->run.len = 0; /* an unfinished sequence at the end: one U+FFFD */
        push(s, i + 1, PROTO_UTF8_FFFD, 3);
    }
    if (d->kind == TOK_DEC_STRIP && d->joined) st->held = 0; /* trailing strip chars: dropped */
    flush(s, i + 1);
}

static void feed(model_tok_stream *s, int32_t id)
{
    const model_tok *t = s->t;
    if (id < 0 || id >= t->n_ids || !t->piece[id]) return; /* tokenizers skips unknown ids */
    if (s->skip_special && (t->flags[id] & TOK_F_SPECIAL)) return;
    push(s, 0, t->piece[id], t->piece_len[id]);
}

/* ---------------------------------------------------------------- public */
model_tok_stream *model_tok_stream_new(const model_tok *t, int skip_special)
{
    if (!t) return NULL;
    model_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    s->st = calloc((size_t)t->n_dec + 1, sizeof *s->st);
    s->md = model_tok_re_match_data();
    if (!s->st || !s->md || proto_buf_add(&s->out, "", 0)) {
        model_tok_stream_free(s);
        return NULL;
    }
    return s;
}

static const char *result(model_tok_stream *s, size_t *len)
{
    if (s->failed) {
        *len = 0;
        return NULL;
    }
    size_t k = 0;
    for (; s->skip_chars > 0 && k < s->out.len; s->skip_chars--) /* one char */
        for (k++; k < s->out.len && ((unsigned char)s->out.p[k] & 0xC0) == 0x80; k++) {}
    *len = s->out.len - k;
    return s->out.p + k;
}

const char *model_tok_stream_push(model_tok_stream *s, int32_t id, size_t *len)
{
    size_t dummy;
    if (!len) len = &dummy;
    if (!s) {
        *len = 0;
        return NULL;
    }
    s->out.len = 0;
    s->out.p[0] = 0;
    feed(s, id);
    return result(s, len);
}

/* Chars (UTF-8 lead bytes) in p[0..n). */
static size_t utf8_chars(const char *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

int model_tok_stream_skip(model_tok_stream *s, const int32_t *ids, size_t n)
{
    if (!s || (!ids && n)) return -1;
    /* What the prompt's decode still holds at its end (a byte run, a held space) is part of the
     * prompt's text as decode(prompt) shows it: a probe stream fed the same ids and flushed says
     * how many chars of the continuation's first output are that tail (transformers slices
     * decode(prompt + generated) by len(decode(prompt)), in chars) */
    model_tok_stream *q = model_tok_stream_new(s->t, s->skip_special);
    if (!q) return -1;
    for (size_t i = 0; i < n; i++) {
        feed(q, ids[i]);
        q->out.len = 0;
        feed(s, ids[i]);
        s->out.len = 0;
    }
    q->out.len = 0;
    flush(q, 0);
    s->skip_chars = utf8_chars(q->out.p, q->out.len);
    int failed = q->failed || s->failed;
    model_tok_stream_free(q);
    s->out.p[0] = 0;
    return failed ? -1 : 0;
}

const char *model_tok_stream_flush(model_tok_stream *s, size_t *len)
{
    size_t dummy;
    if (!len) len = &dummy;
    if (!s) {
        *len = 0;
        return NULL;
    }
    s->out.len = 0;
    s->out.p[0] = 0;
    flush(s, 0);
    return result(s, len);
}

void model_tok_stream_free(model_tok_stream *s)
{
    if (!s) return;
    for (int i = 0; s->st && i < s->t->n_dec; i++) {
        proto_buf_deinit(&s->st[i].run);
        proto_buf_deinit(&s->st[i].scratch);
        proto_buf_deinit(&s->st[i].tmp);
    }
    for (int k = 0; k < CLEANUP_PASSES; k++) {
        proto_buf_deinit(&s->clean_hold[k]);
        proto_buf_deinit(&s->clean_work[k]);
    }
    free(s->st);
    if (s->md) pcre2_match_data_free(s->md);
    proto_buf_deinit(&s->out);
    free(s);
}

int model_tok_decode(const model_tok *t, const int32_t *ids, size_t n, int skip_special,
                     char **text_out, size_t *len_out)
{
    if (text_out) *text_out = NULL;
    if (len_out) *len_out = 0;
    if (!t || !text_out || (!ids && n)) return -1;
    model_tok_stream *s = model_tok_stream_new(t, skip_special);
    if (!s) return -1;
    for (size_t i = 0; i < n && !s->failed; i++) feed(s, ids[i]);
    flush(s, 0);
    if (s->failed) {
        model_tok_stream_free(s);
        return -1;
    }
    *text_out = s->out.p;
    if (len_out) *len_out = s->out.len;
    s->out.p = NULL;
    model_tok_stream_free(s);
    return 0;
}

int model_tok_vocab_size(const model_tok *t)
{
    return t ? t->n_ids : 0;
}

int32_t model_tok_id(const model_tok *t, const char *token)
{
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t id = model_tok_map_get(&t->added_map, token, n);
    return id >= 0 ? id : model_tok_map_get(&t->vocab, token, n);
}

const char *model_tok_piece(const model_tok *t, int32_t id)
{
    return t && id >= 0 && id < t->n_ids ? t->piece[id] : NULL;
}

int model_tok_is_special(const model_tok *t, int32_t id)
{
    return t && id >= 0 && id < t->n_ids && (t->flags[id] & TOK_F_SPECIAL);
}

const char *model_tok_bos_token(const model_tok *t)
{
    return t ? t->bos_token : NULL;
}

const char *model_tok_eos_token(const model_tok *t)
{
    return t ? t->eos_token : NULL;
}

int32_t model_tok_bos_id(const model_tok *t)
{
    return t ? t->bos_id : -1;
}

int32_t model_tok_eos_id(const model_tok *t)
{
    return t ? t->eos_id : -1;
}

const char *model_tok_chat_template(const model_tok *t)
{
    return t ? t->chat_template : NULL;
}

const char *model_tok_special_note(const model_tok *t)
{
    return t ? t->special_note : "";
}

/* model/gen/stop.c — stop-string matching with one KMP automaton per stop (see stop.h). */
#include "model/gen/stop.h"
#include "proto/buf.h"
#include "proto/utf8.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stop_pat {
    unsigned char *s;
    int len;
    int *fail; /* fail[i]: length of the longest proper border of s[0..i] */
    int q;     /* bytes of s matched by the current suffix of the text */
} stop_pat;

struct model_stop {
    stop_pat pat[MODEL_MAX_STOPS];
    int n;
    int done; /* a stop string completed */
    /* Held-back bytes: at most the longest stop - 1, plus up to 3 when the defensive UTF-8
     * boundary check moves back over continuation bytes. */
    char held[MODEL_MAX_STOP_LEN + 4];
    size_t n_held;
    proto_buf out; /* held + the latest push; what push/flush return points here */
};

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

model_stop *model_stop_new(const char *const *stops, int n, char *err, size_t errlen)
{
    if (n < 0 || n > MODEL_MAX_STOPS) {
        set_err(err, errlen, "at most %d stop strings are allowed (got %d)", MODEL_MAX_STOPS, n);
        return NULL;
    }
    if (n > 0 && !stops) {
        set_err(err, errlen, "stop strings missing");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        size_t len = stops[i] ? strnlen(stops[i], MODEL_MAX_STOP_LEN + 1) : 0;
        if (len < 1 || len > MODEL_MAX_STOP_LEN) {
            set_err(err, errlen, "stop[%d] must be 1 to %d bytes long", i, MODEL_MAX_STOP_LEN);
            return NULL;
        }
        if (!proto_utf8_valid(stops[i], len)) {
            set_err(err, errlen, "stop[%d] is not valid UTF-8", i);
            return NULL;
        }
    }
    model_stop *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    if (proto_buf_reserve(&s->out, 2 * MODEL_MAX_STOP_LEN)) goto oom;
    for (int i = 0; i < n; i++) {
        stop_pat *p = &s->pat[i];
        p->len = (int)strlen(stops[i]);
        p->s = malloc((size_t)p->len);
        p->fail = malloc((size_t)p->len * sizeof *p->fail);
        s->n++;
        if (!p->s || !p->fail) goto oom;
        memcpy(p->s, stops[i], (size_t)p->len);
        /* The KMP failure function. */
        p->fail[0] = 0;
        for (int j = 1, k = 0; j < p->len; j++) {
            while (k > 0 && p->s[j] != p->s[k]) k = p->fail[k - 1];
            if (p->s[j] == p->s[k]) k++;
            p->fail[j] = k;
        }
    }
    return s;
oom:
    model_stop_free(s);
    set_err(err, errlen, "out of memory");
    return NULL;
}

/* Advances p over byte c; returns 1 when p has just matched completely. */
static inline int pat_step(stop_pat *p, unsigned char c)
{
    int q = p->q;
    while (q > 0 && p->s[q] != c) q = p->fail[q - 1];
    if (p->s[q] == c) q++;
    if (q == p->len) {
        p->q = p->fail[q - 1];
        return 1;
    }
    p->q = q;
    return 0;
}

const char *model_stop_push(model_stop *s, const char *text, size_t len, size_t *out_len, int *hit)
{
    *out_len = 0;
    *hit = s->done;
    if (s->done) return s->out.p;
    if (len > SIZE_MAX - sizeof s->held - 1) return NULL;
    size_t total = s->n_held + len;
    s->out.len = 0;
    if (proto_buf_add(&s->out, s->held, s->n_held) || proto_buf_add(&s->out, text, len))
        return NULL;

    const unsigned char *b = (const unsigned char *)s->out.p;
    for (size_t i = s->n_held; i < total; i++) {
        int best = 0; /* the longest stop completing at byte i */
        for (int j = 0; j < s->n; j++)
            if (pat_step(&s->pat[j], b[i]) && s->pat[j].len > best) best = s->pat[j].len;
        if (best) {
            s->done = 1;
            s->n_held = 0;
            *hit = 1;
            *out_len = i + 1 - (size_t)best;
            s->out.p[*out_len] = '\0';
            return s->out.p;
        }
    }

    int hold = 0;
    for (int j = 0; j < s->n; j++)
        if (s->pat[j].q > hold) hold = s->pat[j].q;
    size_t emit = total - (size_t)hold;
    /* Never end the emitted text inside a character (at most 3 continuation bytes follow a lead
     * byte; the bound also keeps held[] in range should the input not be valid UTF-8). */
    for (int k = 0; k < 3 && emit > 0 && emit < total && (b[emit] & 0xC0) == 0x80; k++) emit--;
    s->n_held = total - emit;
    memcpy(s->held, s->out.p + emit, s->n_held);
    *out_len = emit;
    return s->out.p;
}

const char *model_stop_flush(model_stop *s, size_t *out_len)
{
    memcpy(s->out.p, s->held, s->n_held);
    *out_len = s->n_held;
    s->out.p[s->n_held] = '\0';
    s->n_held = 0;
    s->done = 0;
    for (int j = 0; j < s->n; j++) s->pat[j].q = 0;
    return s->out.p;
}

void model_stop_free(model_stop *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        free(s->pat[i].s);
        free(s->pat[i].fail);
    }
    proto_buf_deinit(&s->out);
    free(s);
}

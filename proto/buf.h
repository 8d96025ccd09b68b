/* proto/buf.h — the growable byte buffer every room uses: response bodies, stream output and
 * metrics text (daemon/), the tokenizer's scratch (model/tok/), the template interpreter's strings
 * (model/tmpl/), a choice's text (model/gen/).
 *
 * Two ways to check appends: each one returns 0, or -1 when it failed; or ignore the returns and
 * check `oom` once at the end. A failed append leaves the buffer as it was and sets `oom`, and
 * every later append fails too, so one check at the end sees any failure.
 *
 * A zeroed struct is an empty buffer. `max` (0: none) bounds the bytes it may hold: an append
 * past it fails as an out-of-memory one does (the template interpreter's output limit).
 * Ownership: the struct owns p; proto_buf_deinit frees it. Not thread-safe. */
#ifndef TANDEM_PROTO_BUF_H
#define TANDEM_PROTO_BUF_H
#include <stddef.h>

typedef struct proto_buf {
    char *p;    /* NUL-terminated once anything was appended (even nothing) */
    size_t len; /* bytes held */
    size_t off; /* bytes already consumed from the front (stream output) */
    size_t cap;
    size_t max; /* 0: unbounded; else len never exceeds it */
    int oom;    /* an append failed (out of memory, or past max); sticky */
} proto_buf;

void proto_buf_init(proto_buf *b);
void proto_buf_deinit(proto_buf *b);
/* Room for `extra` more bytes and the NUL after them (p + len is then writable for extra + 1
 * bytes; the caller who writes there adds to len itself). 0, or -1 as a failed append. */
int proto_buf_reserve(proto_buf *b, size_t extra);
int proto_buf_add(proto_buf *b, const void *data, size_t n);
int proto_buf_str(proto_buf *b, const char *s);
int proto_buf_putc(proto_buf *b, char c);
int proto_buf_printf(proto_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Unconsumed bytes: p + off, len - off. */
size_t proto_buf_pending(const proto_buf *b);
/* Marks n bytes consumed; compacts when everything is consumed. */
void proto_buf_consume(proto_buf *b, size_t n);
/* Hands p to the caller (NUL-terminated; "" when empty) and resets the buffer. NULL on oom. */
char *proto_buf_take(proto_buf *b);

#endif

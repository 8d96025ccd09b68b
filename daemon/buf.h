/* daemon/buf.h — a growable byte buffer (response bodies, stream output, metrics text).
 *
 * Appends never fail loudly: on out-of-memory the buffer keeps what it had and sets `oom`, which
 * the owner checks once at the end (one check instead of one per append).
 * Ownership: the struct owns p; dmn_buf_deinit frees it. Not thread-safe. */
#ifndef TANDEM_DMN_BUF_H
#define TANDEM_DMN_BUF_H
#include <stddef.h>

typedef struct dmn_buf {
    char *p;    /* NUL-terminated when len > 0 */
    size_t len; /* bytes held */
    size_t off; /* bytes already consumed from the front (stream output) */
    size_t cap;
    int oom;
} dmn_buf;

void dmn_buf_init(dmn_buf *b);
void dmn_buf_deinit(dmn_buf *b);
void dmn_buf_add(dmn_buf *b, const void *data, size_t n);
void dmn_buf_str(dmn_buf *b, const char *s);
void dmn_buf_printf(dmn_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Unconsumed bytes: p + off, len - off. */
size_t dmn_buf_pending(const dmn_buf *b);
/* Marks n bytes consumed; compacts when everything is consumed. */
void dmn_buf_consume(dmn_buf *b, size_t n);
/* Hands p to the caller (NUL-terminated; "" when empty) and resets the buffer. NULL on oom. */
char *dmn_buf_take(dmn_buf *b);

#endif

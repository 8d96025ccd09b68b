/* daemon/buf.c — see buf.h. */
#include "daemon/buf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dmn_buf_init(dmn_buf *b)
{
    memset(b, 0, sizeof *b);
}

void dmn_buf_deinit(dmn_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int reserve(dmn_buf *b, size_t extra)
{
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    if (b->off && b->off == b->len) b->off = b->len = 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > ((size_t)-1) / 2) {
            b->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    if (cap == b->cap) return 0;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void dmn_buf_add(dmn_buf *b, const void *data, size_t n)
{
    if (reserve(b, n) < 0) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void dmn_buf_str(dmn_buf *b, const char *s)
{
    dmn_buf_add(b, s, strlen(s));
}

void dmn_buf_printf(dmn_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        dmn_buf_add(b, small, (size_t)n);
        return;
    }
    if (reserve(b, (size_t)n) < 0) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

size_t dmn_buf_pending(const dmn_buf *b)
{
    return b->len - b->off;
}

void dmn_buf_consume(dmn_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

char *dmn_buf_take(dmn_buf *b)
{
    if (b->oom) {
        dmn_buf_deinit(b);
        return NULL;
    }
    char *p = b->p;
    if (!p) p = calloc(1, 1);
    else if (b->off) memmove(p, p + b->off, b->len - b->off + 1);
    memset(b, 0, sizeof *b);
    return p;
}

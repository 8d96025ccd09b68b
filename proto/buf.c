/* proto/buf.c — see buf.h. */
#include "proto/buf.h"
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void proto_buf_init(proto_buf *b)
{
    memset(b, 0, sizeof *b);
}

void proto_buf_deinit(proto_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int fail(proto_buf *b)
{
    b->oom = 1;
    return -1;
}

int proto_buf_reserve(proto_buf *b, size_t extra)
{
    if (b->oom) return -1;
    if (b->max && (extra > b->max || b->len > b->max - extra)) return fail(b);
    if (extra > SIZE_MAX / 2 - b->len) return fail(b);
    if (b->len + extra + 1 <= b->cap) return 0;
    if (b->off && b->off == b->len) b->off = b->len = 0;
    size_t need = b->len + extra + 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    if (cap == b->cap) return 0;
    char *p = realloc(b->p, cap);
    if (!p) return fail(b);
    b->p = p;
    b->cap = cap;
    return 0;
}

int proto_buf_add(proto_buf *b, const void *data, size_t n)
{
    if (proto_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int proto_buf_str(proto_buf *b, const char *s)
{
    return proto_buf_add(b, s, strlen(s));
}

int proto_buf_putc(proto_buf *b, char c)
{
    if (b->len + 1 < b->cap && (!b->max || b->len < b->max) && !b->oom) {
        b->p[b->len++] = c;
        b->p[b->len] = 0;
        return 0;
    }
    return proto_buf_add(b, &c, 1);
}

int proto_buf_printf(proto_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return fail(b);
    if ((size_t)n < sizeof small) return proto_buf_add(b, small, (size_t)n);
    if (proto_buf_reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

size_t proto_buf_pending(const proto_buf *b)
{
    return b->len - b->off;
}

void proto_buf_consume(proto_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

char *proto_buf_take(proto_buf *b)
{
    if (b->oom) {
        proto_buf_deinit(b);
        return NULL;
    }
    char *p = b->p;
    if (!p) p = calloc(1, 1);
    else if (b->off) memmove(p, p + b->off, b->len - b->off + 1);
    memset(b, 0, sizeof *b);
    return p;
}

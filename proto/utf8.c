/* proto/utf8.c — see utf8.h. */
#include "proto/utf8.h"
#include <stdlib.h>
#include <string.h>

int proto_utf8_scan(const unsigned char *s, size_t n, size_t *len, uint32_t *cp)
{
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *len = 1;
        *cp = b0;
        return PROTO_UTF8_OK;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte (Unicode table 3-7) */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0; /* no overlong forms */
        if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90; /* no overlong forms */
        if (b0 == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        *len = 1;
        return PROTO_UTF8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return PROTO_UTF8_SHORT;
        }
        unsigned b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) {
            *len = i;
            return PROTO_UTF8_BAD;
        }
        c = (c << 6) | (b & 0x3F);
    }
    *len = need;
    *cp = c;
    return PROTO_UTF8_OK;
}

int proto_utf8_seq_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp;
    return n && proto_utf8_scan(s, n, &len, &cp) == PROTO_UTF8_OK ? (int)len : 0;
}

size_t proto_utf8_valid_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII runs, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t v;
            memcpy(&v, u + i, 8);
            if (v & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t l;
        uint32_t cp;
        if (proto_utf8_scan(u + i, n - i, &l, &cp) != PROTO_UTF8_OK) return i;
        i += l;
    }
    return n;
}

int proto_utf8_valid(const char *s, size_t n)
{
    return proto_utf8_valid_len(s, n) == n;
}

uint32_t proto_utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s + *i;
    if (u[0] < 0x80) {
        (*i)++;
        return u[0];
    }
    size_t len;
    uint32_t cp;
    int st = proto_utf8_scan(u, n - *i, &len, &cp);
    *i += len;
    return st == PROTO_UTF8_OK ? cp : 0xFFFD;
}

size_t proto_utf8_prev(const char *s, size_t i)
{
    const unsigned char *u = (const unsigned char *)s;
    if (i == 0) return 0;
    size_t k = i - 1;
    for (int back = 0; k > 0 && (u[k] & 0xC0) == 0x80 && back < 3; back++) k--;
    return k;
}

size_t proto_utf8_put(char out[4], uint32_t cp)
{
    unsigned char *d = (unsigned char *)out;
    if (cp < 0x80) {
        d[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (unsigned char)(0xC0 | cp >> 6);
        d[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (unsigned char)(0xE0 | cp >> 12);
        d[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        d[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (unsigned char)(0xF0 | cp >> 18);
    d[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    d[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    d[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t proto_utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t proto_utf8_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    for (; k > 0 && i < n; k--) proto_utf8_next(s, n, &i);
    return i;
}

char *proto_utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
    /* Worst case every byte becomes the 3-byte U+FFFD. */
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int k = proto_utf8_seq_len(p + i, n - i);
        if (k) {
            memcpy(out + o, p + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else {
            memcpy(out + o, PROTO_UTF8_FFFD, 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    if (out_len) *out_len = o;
    return out;
}

int proto_utf8_lossy(proto_buf *out, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t ok = proto_utf8_valid_len(s + i, n - i);
        if (proto_buf_add(out, s + i, ok)) return -1;
        i += ok;
        if (i >= n) break;
        size_t l;
        uint32_t cp;
        proto_utf8_scan(u + i, n - i, &l, &cp); /* BAD or SHORT: l bytes become one U+FFFD */
        if (proto_buf_add(out, PROTO_UTF8_FFFD, 3)) return -1;
        i += l;
    }
    return 0;
}

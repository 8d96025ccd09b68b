/* proto/utf8.c — see utf8.h. Validation follows RFC 3629 (table 3-7 of the Unicode standard:
 * no overlong forms, no surrogates, nothing above U+10FFFF). */
#include "proto/utf8.h"
#include <stdlib.h>
#include <string.h>

int proto_utf8_seq_len(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F; /* excludes surrogates */
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F; /* <= U+10FFFF */
    else return 0;
    if ((size_t)len > n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

int proto_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int k = proto_utf8_seq_len(p + i, n - i);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
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
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = 0;
    if (out_len) *out_len = o;
    return out;
}

/* proto/utf8.h — UTF-8 checks for text that goes into JSON (jansson refuses invalid UTF-8, and a
 * model may emit byte sequences that are not valid text).
 *
 * Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_UTF8_H
#define TANDEM_PROTO_UTF8_H
#include <stddef.h>

/* Length of the valid UTF-8 sequence starting at s (1-4), or 0 when the bytes at s do not start
 * one (stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated). n is the number
 * of bytes available. */
int proto_utf8_seq_len(const unsigned char *s, size_t n);

/* 1 when all n bytes are valid UTF-8. */
int proto_utf8_valid(const char *s, size_t n);

/* A NUL-terminated heap copy of s with every invalid byte replaced by U+FFFD; *out_len (may be
 * NULL) receives its length. NULL only when out of memory. */
char *proto_utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif

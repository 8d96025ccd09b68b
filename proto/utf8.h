/* proto/utf8.h — the project's one UTF-8 helper: validation (text that goes into JSON: jansson
 * refuses invalid UTF-8, and a model may emit byte sequences that are not valid text), decoding
 * and encoding (the tokenizer, the template interpreter, stop strings, the scheduler's detokenized
 * pieces), and the two ways of replacing what is not valid.
 *
 * Valid means RFC 3629 (table 3-7 of the Unicode standard): no overlong forms, no surrogates,
 * nothing above U+10FFFF.
 * Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_UTF8_H
#define TANDEM_PROTO_UTF8_H
#include "proto/buf.h"
#include <stddef.h>
#include <stdint.h>

#define PROTO_UTF8_FFFD "\xEF\xBF\xBD" /* U+FFFD REPLACEMENT CHARACTER */

enum { PROTO_UTF8_OK, PROTO_UTF8_BAD, PROTO_UTF8_SHORT };
/* Classifies the sequence at s[0..n) (n >= 1): OK with *len bytes and code point *cp; BAD with
 * *len = the maximal invalid subpart (Unicode 3.9, D93b: what one U+FFFD replaces); SHORT when
 * all n bytes are a valid but unfinished prefix (*len = n). */
int proto_utf8_scan(const unsigned char *s, size_t n, size_t *len, uint32_t *cp);

/* Length of the valid UTF-8 sequence starting at s (1-4), or 0 when the bytes at s do not start
 * one (stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated). n is the number
 * of bytes available. */
int proto_utf8_seq_len(const unsigned char *s, size_t n);

/* 1 when all n bytes are valid UTF-8. */
int proto_utf8_valid(const char *s, size_t n);
/* Bytes up to which s is valid UTF-8 (== n when all of it is). */
size_t proto_utf8_valid_len(const char *s, size_t n);

/* The code point at s[*i] (i < n), and *i moved past it; an invalid sequence decodes as U+FFFD
 * and *i moves past its maximal invalid subpart. */
uint32_t proto_utf8_next(const char *s, size_t n, size_t *i);
/* Where the character that ends at s[i) starts (i itself when i == 0): back over at most three
 * continuation bytes. */
size_t proto_utf8_prev(const char *s, size_t i);
/* Encodes cp (<= U+10FFFF) into out; returns the bytes written (1-4). */
size_t proto_utf8_put(char out[4], uint32_t cp);
/* Characters in valid UTF-8 s[0..n) (the bytes that are not continuation bytes). */
size_t proto_utf8_count(const char *s, size_t n);
/* Byte offset of character k of s[0..n) (n when s has at most k characters). */
size_t proto_utf8_offset(const char *s, size_t n, size_t k);

/* A NUL-terminated heap copy of s with every invalid byte replaced by U+FFFD (one per byte, so
 * that the replaced text keeps the count of bytes a client could not read); *out_len (may be
 * NULL) receives its length. NULL only when out of memory. */
char *proto_utf8_sanitize(const char *s, size_t n, size_t *out_len);
/* Appends s to out with every maximal invalid subpart replaced by one U+FFFD (as Python's
 * errors="replace" and Rust's from_utf8_lossy do); a trailing unfinished sequence is replaced
 * too. 0, or -1 as a failed append (proto/buf.h). */
int proto_utf8_lossy(proto_buf *out, const char *s, size_t n);

#endif

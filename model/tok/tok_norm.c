/* model/tok/tok_norm.c — tokenizer.json normalizers (Prepend, Replace, NFC/NFD/NFKC/NFKD,
 * Lowercase, Strip) and the Unicode predicates added tokens use. Unicode data comes from ICU, whose
 * tables are maintained with each Unicode release; tokenizers uses Rust's (the same standard). */
#include "model/tok/tok_internal.h"
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

int model_tok_cp_is_space(uint32_t cp)
{
    return u_isUWhiteSpace((UChar32)cp) ? 1 : 0; /* Rust char::is_whitespace: White_Space */
}

int model_tok_cp_is_word(uint32_t cp)
{
    /* Rust regex's Unicode \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation,
     * Join_Control. */
    UChar32 c = (UChar32)cp;
    return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
           (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
           u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

static int is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

/* UTF-8 -> UTF-16 -> normalized -> UTF-8. ICU lengths are int32: inputs are bounded by
 * TOK_MAX_INPUT_BYTES (1 GiB), and an expansion past int32 fails cleanly. */
static int unicode_normalize(enum tok_norm_kind kind, const char *s, size_t n, proto_buf *out)
{
    UErrorCode st = U_ZERO_ERROR;
    const UNormalizer2 *nz = kind == TOK_NORM_NFC    ? unorm2_getNFCInstance(&st)
                             : kind == TOK_NORM_NFD  ? unorm2_getNFDInstance(&st)
                             : kind == TOK_NORM_NFKC ? unorm2_getNFKCInstance(&st)
                                                     : unorm2_getNFKDInstance(&st);
    if (U_FAILURE(st) || n > (size_t)INT32_MAX / 2) return -1;
    int32_t ulen = 0;
    UChar *u = malloc((n + 1) * sizeof *u), *v = NULL;
    if (!u) return -1;
    u_strFromUTF8(u, (int32_t)n + 1, &ulen, s, (int32_t)n, &st);
    if (U_FAILURE(st)) goto fail;
    int32_t cap = ulen + 16, vlen;
    for (int tries = 0; tries < 2; tries++) {
        free(v);
        v = malloc((size_t)cap * sizeof *v);
        if (!v) goto fail;
        st = U_ZERO_ERROR;
        vlen = unorm2_normalize(nz, u, ulen, v, cap, &st);
        if (st != U_BUFFER_OVERFLOW_ERROR) break;
        cap = vlen + 1;
    }
    if (U_FAILURE(st)) goto fail;
    int32_t blen = 0;
    st = U_ZERO_ERROR;
    u_strToUTF8(NULL, 0, &blen, v, vlen, &st); /* preflight */
    if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st)) goto fail;
    out->len = 0;
    if (proto_buf_reserve(out, (size_t)blen + 1)) goto fail;
    st = U_ZERO_ERROR;
    u_strToUTF8(out->p, blen + 1, &blen, v, vlen, &st);
    if (U_FAILURE(st)) goto fail;
    out->len = (size_t)blen;
    free(u);
    free(v);
    return 0;
fail:
    free(u);
    free(v);
    return -1;
}

static int lowercase(const char *s, size_t n, proto_buf *out)
{
    out->len = 0;
    if (proto_buf_reserve(out, n)) return -1;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            char l = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            if (proto_buf_add(out, &l, 1)) return -1;
            i++;
            continue;
        }
        size_t l;
        uint32_t cp;
        if (proto_utf8_scan((const uint8_t *)s + i, n - i, &l, &cp) != PROTO_UTF8_OK) return -1;
        /* Rust's char::to_lowercase: the full, context-free mapping of one character. */
        UChar in[2], low[8];
        int32_t il = 0, ol;
        U16_APPEND_UNSAFE(in, il, (UChar32)cp);
        UErrorCode st = U_ZERO_ERROR;
        ol = u_strToLower(low, 8, in, il, "", &st);
        char b[32];
        int32_t bl = 0;
        if (U_SUCCESS(st)) u_strToUTF8(b, (int32_t)sizeof b, &bl, low, ol, &st);
        if (U_FAILURE(st)) {
            bl = (int32_t)l;
            memcpy(b, s + i, l);
        }
        if (proto_buf_add(out, b, (size_t)bl)) return -1;
        i += l;
    }
    return 0;
}

static int replace(const tok_norm *nm, const char *s, size_t n, proto_buf *out)
{
    pcre2_match_data *md = model_tok_re_match_data();
    if (!md) return -1;
    out->len = 0;
    size_t pos = 0, last = 0, ms, me;
    int r, rc = 0;
    while ((r = model_tok_re_find(&nm->re, md, s, n, pos, &ms, &me)) == 1) {
        if (me == ms) { /* an empty match replaces nothing; step over one character */
            size_t l = 1;
            uint32_t cp;
            if (ms < n) proto_utf8_scan((const uint8_t *)s + ms, n - ms, &l, &cp);
            pos = ms + l;
            if (pos > n) break;
            continue;
        }
        if (proto_buf_add(out, s + last, ms - last) ||
            proto_buf_add(out, nm->str, nm->str_len)) {
            rc = -1;
            break;
        }
        last = pos = me;
    }
    if (r < 0) rc = -1;
    if (!rc && proto_buf_add(out, s + last, n - last)) rc = -1;
    pcre2_match_data_free(md);
    return rc;
}

static int strip(const tok_norm *nm, const char *s, size_t n, proto_buf *out)
{
    size_t a = 0, b = n, l;
    uint32_t cp;
    while (nm->left && a < b &&
           proto_utf8_scan((const uint8_t *)s + a, b - a, &l, &cp) == PROTO_UTF8_OK &&
           model_tok_cp_is_space(cp))
        a += l;
    while (nm->right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        if (proto_utf8_scan((const uint8_t *)s + k, b - k, &l, &cp) != PROTO_UTF8_OK ||
            !model_tok_cp_is_space(cp))
            break;
        b = k;
    }
    out->len = 0;
    return proto_buf_add(out, s + a, b - a);
}

static int normalize(const model_tok *t, const char *s, size_t n, int prepend, proto_buf *out)
{
    proto_buf a = {0}, b = {0};
    if (proto_buf_add(&a, s, n)) return -1;
    int rc = 0;
    for (int i = 0; i < t->n_norm && !rc; i++) {
        const tok_norm *nm = &t->norm[i];
        b.len = 0;
        switch (nm->kind) {
        case TOK_NORM_PREPEND:
            /* tokenizers prepends only to non-empty text */
            if (a.len == 0 || !prepend) continue;
            rc = proto_buf_add(&b, nm->str, nm->str_len) || proto_buf_add(&b, a.p, a.len);
            break;
        case TOK_NORM_REPLACE: rc = replace(nm, a.p, a.len, &b); break;
        case TOK_NORM_NFC:
        case TOK_NORM_NFD:
        case TOK_NORM_NFKC:
        case TOK_NORM_NFKD:
            if (is_ascii(a.p, a.len)) continue; /* ASCII is invariant under all four forms */
            rc = unicode_normalize(nm->kind, a.p, a.len, &b);
            break;
        case TOK_NORM_LOWERCASE: rc = lowercase(a.p, a.len, &b); break;
        case TOK_NORM_STRIP: rc = strip(nm, a.p, a.len, &b); break;
        }
        proto_buf x = a;
        a = b;
        b = x;
    }
    proto_buf_deinit(&b);
    if (rc) {
        proto_buf_deinit(&a);
        return -1;
    }
    proto_buf_deinit(out);
    *out = a;
    if (!out->p && proto_buf_add(out, "", 0)) return -1;
    return 0;
}

int model_tok_normalize(const model_tok *t, const char *s, size_t n, proto_buf *out)
{
    return normalize(t, s, n, 1, out);
}

int model_tok_normalize_inner(const model_tok *t, const char *s, size_t n, proto_buf *out)
{
    return normalize(t, s, n, 0, out);
}

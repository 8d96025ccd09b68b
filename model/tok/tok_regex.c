/* model/tok/tok_regex.c — tokenizer.json regexes on PCRE2.
 *
 * tokenizers compiles its patterns with Oniguruma (Ruby syntax, UTF-8). PCRE2 in UTF + UCP mode
 * reads the same syntax for everything real tokenizer files use (\p{L}, \p{N}, (?i:...),
 * look-ahead, possessive and lazy repeats); the escapes whose meaning differs are rewritten:
 *   \s \S   Oniguruma: the White_Space property. PCRE2's \s also takes U+180E.
 *   \w \W   Oniguruma: Alphabetic, M, Nd, Pc, Join_Control. PCRE2's \w is L, N and '_'.
 *   \h \H   Oniguruma (Ruby): a hex digit. PCRE2: horizontal space.
 *   \uHHHH  Ruby's code point escape; PCRE2 spells it \x{HHHH}.
 * ^ and $ are line anchors in Oniguruma, hence PCRE2_MULTILINE. */
#include "model/tok/tok_internal.h"
#include <stdio.h>
#include <string.h>

#define WORD_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Rewrites an Oniguruma pattern for PCRE2 (see above). Character classes are tracked so that a
 * rewritten escape stays valid where it lands. */
static int translate(const char *p, size_t n, proto_buf *out)
{
    int in_class = 0;
    size_t class_start = 0; /* output offset just past '[' or '[^' */
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            const char *rep = NULL;
            char ubuf[16];
            switch (e) {
            case 's': rep = "\\p{White_Space}"; break;
            case 'S': rep = "\\P{White_Space}"; break;
            case 'w': rep = in_class ? WORD_CLASS : "[" WORD_CLASS "]"; break;
            case 'W': rep = in_class ? NULL : "[^" WORD_CLASS "]"; break;
            case 'h': rep = in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
            case 'H': rep = in_class ? NULL : "[^0-9a-fA-F]"; break;
            case 'u':
                if (i + 5 < n && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
                    is_hex(p[i + 5])) {
                    snprintf(ubuf, sizeof ubuf, "\\x{%.4s}", p + i + 2);
                    if (proto_buf_add(out, ubuf, strlen(ubuf))) return -1;
                    i += 5;
                    continue;
                }
                break;
            default: break;
            }
            if (rep) {
                if (proto_buf_add(out, rep, strlen(rep))) return -1;
            } else if (proto_buf_add(out, p + i, 2)) {
                return -1;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            if (proto_buf_add(out, "[", 1)) return -1;
            if (i + 1 < n && p[i + 1] == '^') {
                if (proto_buf_add(out, "^", 1)) return -1;
                i++;
            }
            class_start = out->len;
            continue;
        }
        if (in_class && c == ']' && out->len != class_start) in_class = 0;
        if (proto_buf_add(out, &c, 1)) return -1;
    }
    return 0;
}

int model_tok_re_compile(tok_re *re, const char *pat, size_t len, int literal, char *err,
                         size_t errlen)
{
    re->code = NULL;
    if (len > TOK_MAX_PATTERN_BYTES) {
        snprintf(err, errlen, "regex of %zu bytes (limit %d)", len, TOK_MAX_PATTERN_BYTES);
        return -1;
    }
    proto_buf b = {0};
    uint32_t opts = PCRE2_UTF;
    if (literal) {
        opts |= PCRE2_LITERAL; /* PCRE2 takes no UCP/MULTILINE with LITERAL: they do not apply */
        if (proto_buf_add(&b, pat, len)) goto oom;
    } else {
        opts |= PCRE2_UCP | PCRE2_MULTILINE;
        if (translate(pat, len, &b) || proto_buf_add(&b, "", 0)) goto oom;
    }
    int ec;
    PCRE2_SIZE eo;
    re->code = pcre2_compile((PCRE2_SPTR)b.p, b.len, opts, &ec, &eo, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errlen, "regex /%.*s/: %s at offset %zu", (int)(len > 80 ? 80 : len), pat,
                 (char *)msg, (size_t)eo);
        proto_buf_deinit(&b);
        return -1;
    }
    proto_buf_deinit(&b);
    /* The JIT is several times faster; without it (unsupported CPU) the interpreter still works. */
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return 0;
oom:
    proto_buf_deinit(&b);
    snprintf(err, errlen, "out of memory");
    return -1;
}

pcre2_match_data *model_tok_re_match_data(void)
{
    return pcre2_match_data_create(1, NULL); /* only the whole match is needed */
}

int model_tok_re_find(const tok_re *re, pcre2_match_data *md, const char *s, size_t len,
                      size_t start, size_t *ms, size_t *me)
{
    if (start > len) return 0;
    /* The subject was checked for valid UTF-8 once, on entry to encode. */
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return -1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > len || ov[1] > len || ov[1] < ov[0]) return -1; /* \K tricks: not a split */
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

void model_tok_re_free(tok_re *re)
{
    pcre2_code_free(re->code);
    re->code = NULL;
}

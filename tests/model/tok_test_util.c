/* tests/model/tok_test_util.c — helpers shared by the tokenizer tests. */
#include "tests/model/tok_test_util.h"
#include "tests/test.h"
#include "tests/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long tt_ggml_cases(const char *inp, const char *outp, tt_case **cases)
{
    size_t il, ol;
    char *in = t_read_file(inp, &il), *out = t_read_file(outp, &ol);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    long n = 0, cap = 64;
    tt_case *c = calloc((size_t)cap, sizeof *c);
    if (!in || !out || !c) goto fail;
    for (size_t pos = 0; pos < il;) {
        char *next = strstr(in + pos, sep);
        size_t end = next ? (size_t)(next - in) : il;
        if (n == cap) {
            tt_case *nc = realloc(c, (size_t)cap * 2 * sizeof *c);
            if (!nc) goto fail;
            c = nc;
            memset(c + cap, 0, (size_t)cap * sizeof *c);
            cap *= 2;
        }
        c[n].len = end - pos;
        c[n].text = malloc(c[n].len + 1);
        memcpy(c[n].text, in + pos, c[n].len);
        c[n].text[c[n].len] = 0;
        n++;
        pos = next ? end + sizeof sep - 1 : il;
    }
    long line = 0;
    for (char *p = out; *p && line <= n;) {
        char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        if (line >= n) goto fail;
        tt_case *k = &c[line++];
        k->ids = malloc(sizeof *k->ids * (size_t)(eol - p + 1));
        for (char *q = p; q < eol;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            k->ids[k->n++] = (int32_t)v;
            q = e;
        }
        p = *eol ? eol + 1 : eol;
    }
    if (line != n) goto fail;
    free(in);
    free(out);
    *cases = c;
    return n;
fail:
    free(in);
    free(out);
    tt_cases_free(c, n);
    return -1;
}

void tt_cases_free(tt_case *c, long n)
{
    for (long i = 0; c && i < n; i++) {
        free(c[i].text);
        free(c[i].ids);
    }
    free(c);
}

const char *tt_ids_str(const int32_t *ids, size_t n)
{
    static char buf[4096];
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sizeof buf - o, "[");
    for (size_t i = 0; i < n && o + 16 < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, i ? ", %d" : "%d", ids[i]);
    snprintf(buf + o, sizeof buf - o, "]");
    return buf;
}

int tt_check_encode(const model_tok *t, const char *text, size_t len, int add_special,
                    const int32_t *expect, size_t n, const char *what)
{
    int32_t *ids = NULL;
    size_t got = 0;
    if (model_tok_encode(t, text, len, add_special, &ids, &got) != 0) {
        t_fail(__FILE__, __LINE__, "%s: encode failed", what);
        return 0;
    }
    int ok = got == n && (n == 0 || memcmp(ids, expect, n * sizeof *ids) == 0);
    if (!ok) {
        char a[4096];
        snprintf(a, sizeof a, "%s", tt_ids_str(ids, got));
        t_fail(__FILE__, __LINE__, "%s: \"%.60s\"\n  got      %s\n  expected %s", what, text, a,
               tt_ids_str(expect, n));
    }
    free(ids);
    return ok;
}

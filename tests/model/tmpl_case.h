/* tests/model/tmpl_case.h — shared helpers of the chat-template tests: load a JSON test file and
 * compare one rendering (or one expected error) with what jinja2/transformers produced. */
#ifndef TANDEM_TESTS_TMPL_CASE_H
#define TANDEM_TESTS_TMPL_CASE_H
#include "model/tmpl/tmpl.h"
#include "tests/test.h"
#include <jansson.h>

/* Loads path (relative to the repository root) or fails the test. */
static inline json_t *tmpl_case_load(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) t_fail(__FILE__, __LINE__, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

/* Our error (with " (line N)") against Python's "Type: message"; cases named *_typeonly compare
 * the exception type only (Python's own wording for argument errors is not reproduced). */
static inline int tmpl_error_matches(const char *name, const char *err, const char *want)
{
    size_t n = strlen(name);
    if (n > 9 && !strcmp(name + n - 9, "_typeonly")) {
        const char *colon = strchr(want, ':');
        size_t k = colon ? (size_t)(colon - want) + 1 : strlen(want);
        return strncmp(err, want, k) == 0;
    }
    return strncmp(err, want, strlen(want)) == 0 && strncmp(err + strlen(want), " (line ", 7) == 0;
}

/* Whether text holds a decimal integer outside int64 (a run of digits not part of a float). */
static inline int tmpl_has_int_beyond_64(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (s[i] < '0' || s[i] > '9') {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && s[j] >= '0' && s[j] <= '9') j++;
        int neg = i > 0 && s[i - 1] == '-', is_float = j < n && (s[j] == '.' || s[j] == 'e');
        const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
        while (i + 1 < j && s[i] == '0') i++;
        if (!is_float && (j - i > 19 || (j - i == 19 && memcmp(s + i, lim, 19) > 0))) return 1;
        i = j;
    }
    return 0;
}

/* Checks one rendering against the expectation: `rendered` (exact text) or `error`
 * ("Type: message" as Python printed it). A case named *_bigint is one where jinja2 printed an
 * integer outside int64, which ours cannot hold: ours must fail with its OverflowError. A
 * TemplateError (raise_exception) must fail with its message as the whole error; any other error
 * must fail with the same type and message (our message adds " (line N)"). Returns 1 when it
 * matches. */
static inline int tmpl_case_check(const char *what, const model_tmpl *t, const char *ctx_json, size_t ctx_len,
                                  const json_t *rendered, const json_t *error, int conversation)
{
    char *out = NULL, err[1024];
    size_t out_len = 0;
    model_tmpl_opts opts;
    model_tmpl_stats stats;
    model_tmpl_default_opts(&opts);
    opts.stats = &stats;
    int rc = conversation ? model_tmpl_render_conversation(t, ctx_json, ctx_len, &opts, &out, &out_len, err, sizeof err)
                          : model_tmpl_render_ex(t, ctx_json, ctx_len, &opts, &out, &out_len, err, sizeof err);
    int ok = 1;
    /* a successful render releases every value by reference counting (no leak left for the
     * final sweep), unless a namespace refers to itself */
    if (rc == 0 && stats.swept != 0 && !strstr(what, "cycle")) {
        t_fail(__FILE__, __LINE__, "%s: %zu objects were left for the sweep (a reference leak)", what, stats.swept);
        ok = 0;
    }
    size_t what_len = strlen(what);
    if (rendered && what_len > 7 && !strcmp(what + what_len - 7, "_bigint")) {
        /* jinja2 printed an integer past 64 bits (checked here, so that the case cannot pass on
         * an ordinary number): ours must refuse it */
        const char *want = json_string_value(rendered),
                   *range_err = "OverflowError: integer result outside the 64-bit range";
        if (!tmpl_has_int_beyond_64(want, json_string_length(rendered))) {
            t_fail(__FILE__, __LINE__, "%s: jinja2's output \"%.80s\" holds no integer past int64",
                   what, want);
            ok = 0;
        } else if (rc != MODEL_TMPL_ERR_RUNTIME || strncmp(err, range_err, strlen(range_err))) {
            t_fail(__FILE__, __LINE__,
                   "%s: expected our OverflowError (jinja2 printed \"%.80s\"), got %d \"%s\"", what,
                   want, rc,
                   rc    ? err
                   : out ? out
                         : "");
            ok = 0;
        }
    } else if (rendered) {
        const char *want = json_string_value(rendered);
        size_t want_len = json_string_length(rendered);
        if (rc != 0) {
            t_fail(__FILE__, __LINE__, "%s: render failed: %s", what, err);
            ok = 0;
        } else if (out_len != want_len || memcmp(out, want, want_len) != 0) {
            size_t i = 0;
            while (i < out_len && i < want_len && out[i] == want[i]) i++;
            size_t from = i > 60 ? i - 60 : 0;
            t_fail(__FILE__, __LINE__, "%s: differs at byte %zu\n  got:      \"%.*s\"\n  expected: \"%.*s\"", what, i,
                   (int)(out_len - from < 160 ? out_len - from : 160), out + from,
                   (int)(want_len - from < 160 ? want_len - from : 160), want + from);
            ok = 0;
        }
    } else {
        const char *want = json_string_value(error);
        if (rc == 0) {
            t_fail(__FILE__, __LINE__, "%s: rendered, expected error \"%s\"", what, want);
            ok = 0;
        } else if (!strncmp(want, "TemplateError: ", 15)) {
            if (rc != MODEL_TMPL_ERR_RAISED || strcmp(err, want + 15) != 0) {
                t_fail(__FILE__, __LINE__, "%s: error \"%s\" (%d), expected raise_exception \"%s\"", what, err, rc, want + 15);
                ok = 0;
            }
        } else if (!tmpl_error_matches(what, err, want)) {
            t_fail(__FILE__, __LINE__, "%s: error \"%s\", expected \"%s\"", what, err, want);
            ok = 0;
        }
    }
    free(out);
    return ok;
}

#endif

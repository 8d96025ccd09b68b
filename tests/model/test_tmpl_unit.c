/* Chat-template interpreter: the API contract, clear errors for unsupported or broken syntax, and
 * hostile templates and inputs (deep nesting, huge loops, runaway strings, recursion, bad JSON)
 * that must fail cleanly within their limits rather than crash or hang. */
#include "model/tmpl/tmpl.h"
#include "tests/test.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Renders src with ctx; returns the status, the output in *out (caller frees) and err. */
static int render(const char *src, const char *ctx, const model_tmpl_opts *o, char **out, size_t *len, char *err)
{
    *out = NULL;
    model_tmpl *t = model_tmpl_compile(src, strlen(src), err, 512);
    if (!t) return 99;
    int rc = model_tmpl_render_ex(t, ctx, strlen(ctx), o, out, len, err, 512);
    model_tmpl_free(t);
    return rc;
}

static void expect_compile_error(const char *src, const char *needle, int line)
{
    char err[512];
    model_tmpl *t = model_tmpl_compile(src, strlen(src), err, sizeof err);
    CHECK_MSG(t == NULL, "compiled, expected an error with \"%s\": %s", needle, src);
    model_tmpl_free(t);
    CHECK_MSG(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"", err, needle);
    char where[32];
    snprintf(where, sizeof where, "(line %d)", line);
    CHECK_MSG(strstr(err, where) != NULL, "error \"%s\" lacks %s", err, where);
}

TEST(tmpl_syntax_errors_are_clear)
{
    expect_compile_error("a\n{% include 'x.jinja' %}", "'include' tag is not supported", 2);
    expect_compile_error("{% extends 'base' %}", "'extends' tag is not supported", 1);
    expect_compile_error("\n\n{% do x.append(1) %}", "unknown tag 'do'", 3);
    expect_compile_error("{% if x %}\nopen", "Unexpected end of template", 2);
    expect_compile_error("{% for x in y %}{% endif %}", "unknown tag 'endif'", 1);
    expect_compile_error("{{ x|nosuchfilter }}", "No filter named 'nosuchfilter'", 1);
    expect_compile_error("{{ x|wordwrap(10) }}", "'wordwrap' filter is not supported", 1);
    expect_compile_error("{{ x is nosuchtest }}", "No test named 'nosuchtest'", 1);
    expect_compile_error("a {# never closed", "Missing end of comment tag", 1);
    expect_compile_error("{% raw %}never closed", "Missing end of raw directive", 1);
    expect_compile_error("{{ 'unterminated }}", "unterminated string", 1);
    expect_compile_error("{{ a ! b }}", "unexpected char '!'", 1);
    expect_compile_error("{{ (1, 2] }}", "unexpected ']', expected ')'", 1);
    expect_compile_error("{% break %}", "'break' outside loop", 1);
    expect_compile_error("{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", "'continue' outside loop", 1);
    expect_compile_error("{{ }}", "Expected an expression", 1);
    expect_compile_error("{% macro m(a=1, b) %}{% endmacro %}", "non-default argument follows default argument", 1);
    expect_compile_error("{% set 1 = 2 %}", "can't assign to 'const'", 1);
    expect_compile_error("{% call m %}{% endcall %}", "expected call", 1);
    expect_compile_error("{{ x is defined is none }}", "cannot chain multiple tests", 1);
    expect_compile_error("{{ 99999999999999999999 }}", "out of the 64-bit range", 1);
    expect_compile_error("{{ '\\N{BULLET}' }}", "\\N{...} escapes are not supported", 1);
    expect_compile_error("x\n{{ 1 +\n }}", "unexpected 'end of print statement'", 3);
    char err[512];
    CHECK(model_tmpl_compile("a\0b", 3, err, sizeof err) == NULL);
    CHECK(strstr(err, "NUL") != NULL);
    CHECK(model_tmpl_compile("\xff\xfe", 2, err, sizeof err) == NULL);
    CHECK(strstr(err, "UTF-8") != NULL);
}

TEST(tmpl_render_api)
{
    char *out;
    size_t len;
    char err[512];
    /* raise_exception: its message, and the RAISED status */
    CHECK_EQ(render("{{ raise_exception('bad ' ~ 'turn') }}", "{}", NULL, &out, &len, err), MODEL_TMPL_ERR_RAISED);
    CHECK_STR(err, "bad turn");
    CHECK(out == NULL);
    /* model_tmpl_render folds errors into -1 and gives a NUL-terminated string */
    model_tmpl *t = model_tmpl_compile("{{ a }}-{{ b|length }}", 22, err, sizeof err);
    REQUIRE(t);
    CHECK_EQ(model_tmpl_render(t, "{\"a\": 1.0, \"b\": [1, 2]}", &out, err, sizeof err), 0);
    CHECK_STR(out, "1.0-2");
    free(out);
    CHECK_EQ(model_tmpl_render(t, "[1]", &out, err, sizeof err), -1);
    CHECK(strstr(err, "must be a JSON object") != NULL);
    CHECK_EQ(model_tmpl_render_ex(t, "{\"a\": ", 6, NULL, &out, &len, err, sizeof err), MODEL_TMPL_ERR_CONTEXT);
    CHECK(strstr(err, "not valid JSON") != NULL);
    model_tmpl_free(t);
    /* a runtime error names the Python exception and the line */
    CHECK_EQ(render("line1\n{{ 'a' + 1 }}", "{}", NULL, &out, &len, err), MODEL_TMPL_ERR_RUNTIME);
    CHECK_STR(err, "TypeError: can only concatenate str (not \"int\") to str (line 2)");
    /* NUL characters from the context survive (the length says where the text ends) */
    CHECK_EQ(render("[{{ s }}]", "{\"s\": \"a\\u0000b\"}", NULL, &out, &len, err), 0);
    CHECK_EQ(len, 5);
    CHECK(out && !memcmp(out, "[a\0b]", 5));
    free(out);
    /* strftime_now formats the time given in the options (local time) */
    model_tmpl_opts o;
    model_tmpl_default_opts(&o);
    o.now = 86400 * 365;
    setenv("TZ", "UTC", 1);
    CHECK_EQ(render("{{ strftime_now('%Y-%m-%d %b') }}", "{}", &o, &out, &len, err), 0);
    CHECK_STR(out, "1971-01-01 Jan");
    free(out);
    /* an empty template renders an empty string, not NULL */
    CHECK_EQ(render("", "{}", NULL, &out, &len, err), 0);
    CHECK(out && out[0] == 0 && len == 0);
    free(out);
    /* a conversation file: "extra" members are variables, tools/documents default to None */
    const char *vars = "{{ tools }} {{ documents }} {{ add_generation_prompt }} {{ date_string }} {{ extra }}";
    t = model_tmpl_compile(vars, strlen(vars), err, sizeof err);
    REQUIRE(t);
    const char *conv = "{\"messages\":[],\"extra\":{\"date_string\":\"1 Jan\"}}";
    CHECK_EQ(model_tmpl_render_conversation(t, conv, strlen(conv), NULL, &out, &len, err, sizeof err), 0);
    CHECK_STR(out, "None None False 1 Jan ");
    free(out);
    model_tmpl_free(t);
}

/* ------------------------------------------------------------------------------ hostile */

static model_tmpl_opts small_limits(void)
{
    model_tmpl_opts o;
    model_tmpl_default_opts(&o);
    o.limits.max_steps = 2000000; /* well under a second: keeps these tests fast */
    o.limits.max_output = 1 << 20;
    o.limits.max_memory = 32 << 20;
    return o;
}

static void expect_limit(const char *src, const char *ctx, const char *what)
{
    char *out;
    size_t len;
    char err[512];
    model_tmpl_opts o = small_limits();
    int rc = render(src, ctx, &o, &out, &len, err);
    CHECK_MSG(rc == MODEL_TMPL_ERR_LIMIT, "status %d (%s), expected a %s limit for %s", rc, err, what, src);
    CHECK_MSG(strstr(err, what) != NULL, "error \"%s\" lacks \"%s\"", err, what);
    free(out);
}

TEST(tmpl_hostile_templates_fail_cleanly)
{
    expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", "evaluation steps");
    expect_limit("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "{}", "output size");
    expect_limit("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "{}",
                 "string length");
    expect_limit("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "{}",
                 "evaluation steps");
    expect_limit("{{ 'x' * 100000000 }}", "{}", "string length");
    expect_limit("{{ [1, 2] * 100000000 }}", "{}", "memory");
    expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", "macro recursion depth");
    /* printf-style widths and precisions are bounded as format()'s are (100,000 and 1,000),
     * whether written or taken from the arguments by '*'; a precision past the bound was cut at
     * 1,535 characters without an error ('%.9999f' is 10,001 in Python) */
    expect_limit("{{ '%.9999f' % 1.0 }}", "{}", "format width");
    expect_limit("{{ '%.1001f' % 1e308 }}", "{}", "format width");
    expect_limit("{{ '%100001s' % 'a' }}", "{}", "format width");
    expect_limit("{{ '%*s' % (100001, 'a') }}", "{}", "format width");
    expect_limit("{{ '%*s' % (-100001, 'a') }}", "{}", "format width");
    expect_limit("{{ '%*s' % (-9223372036854775807 - 1, 'a') }}", "{}", "format width");
    expect_limit("{{ '%.*f' % (1001, 1.5) }}", "{}", "format width");
    expect_limit("{{ '%.*f' % (9223372036854775807, 1.5) }}", "{}", "format width");
    expect_limit("{{ '%99999999999999999999999999s' % 'a' }}", "{}", "format width");
    expect_limit("{% for x in [[1]] recursive %}{{ loop([[1]]) }}{% endfor %}", "{}", "recursion depth");
    /* a value nested 10000 deep: building and freeing it must not recurse, printing and
     * serializing it stop at the depth limit */
    const char *deep = "{% set ns = namespace(x=[]) %}{% for i in range(10000) %}{% set ns.x = [ns.x] %}{% endfor %}";
    char src[512];
    char *out;
    size_t len;
    char err[512];
    model_tmpl_opts o = small_limits();
    snprintf(src, sizeof src, "%sok", deep);
    CHECK_EQ(render(src, "{}", &o, &out, &len, err), 0);
    CHECK_STR(out, "ok");
    free(out);
    snprintf(src, sizeof src, "%s{{ ns.x }}", deep);
    expect_limit(src, "{}", "nesting depth");
    snprintf(src, sizeof src, "%s{{ ns.x|tojson }}", deep);
    expect_limit(src, "{}", "nesting depth");
    snprintf(src, sizeof src, "%s{{ ns.x == ns.x[0] }}", deep);
    expect_limit(src, "{}", "nesting depth");
    /* a namespace that contains itself: no crash, the cycle is swept at the end */
    model_tmpl_stats st;
    o.stats = &st;
    CHECK_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}", "{}", &o, &out, &len, err), 0);
    CHECK_STR(out, "True");
    CHECK(st.swept > 0);
    free(out);
    o.stats = NULL;
    expect_limit("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "{}", "nesting depth");
}

TEST(tmpl_hostile_source_fails_cleanly)
{
    /* 100k nested parentheses / brackets / ifs: a compile error, not a stack overflow */
    size_t n = 100000;
    char *src = malloc(4 * n + 16);
    REQUIRE(src);
    strcpy(src, "{{ ");
    memset(src + 3, '(', n);
    strcpy(src + 3 + n, "1");
    memset(src + 4 + n, ')', n);
    strcpy(src + 4 + 2 * n, " }}");
    char err[512];
    CHECK(model_tmpl_compile(src, strlen(src), err, sizeof err) == NULL);
    CHECK(strstr(err, "nested too deeply") != NULL || strstr(err, "brackets nested too deeply") != NULL);
    size_t k = 0;
    for (size_t i = 0; i < 2000; i++) k += (size_t)sprintf(src + k, "{%% if x %%}");
    CHECK(model_tmpl_compile(src, k, err, sizeof err) == NULL);
    CHECK(strstr(err, "nested too deeply") != NULL);
    k = 0;
    for (size_t i = 0; i < 5000; i++) k += (size_t)sprintf(src + k, "not ");
    char *expr = malloc(k + 16);
    REQUIRE(expr);
    snprintf(expr, k + 16, "{{ %s1 }}", src);
    CHECK(model_tmpl_compile(expr, strlen(expr), err, sizeof err) == NULL);
    CHECK(strstr(err, "nested too deeply") != NULL);
    free(expr);
    /* long left-nested chains deepen the tree evaluation walks: bounded like nesting */
    static const char *const links[] = {" + 1", ".a", "|trim", "[0]", " or x", " ~ 'a'"};
    for (size_t l = 0; l < sizeof links / sizeof *links; l++) {
        k = (size_t)sprintf(src, "{{ x");
        for (size_t i = 0; i < 20000; i++) k += (size_t)sprintf(src + k, "%s", links[l]);
        k += (size_t)sprintf(src + k, " }}");
        model_tmpl *t = model_tmpl_compile(src, k, err, sizeof err);
        if (l == 5) { /* a ~ chain is flat: it compiles and renders */
            REQUIRE(t);
            char *out;
            size_t len;
            CHECK_EQ(model_tmpl_render_ex(t, "{\"x\": \"\"}", 9, NULL, &out, &len, err, sizeof err), 0);
            CHECK_EQ(len, 20000);
            free(out);
            model_tmpl_free(t);
            continue;
        }
        CHECK_MSG(t == NULL, "chain of %s compiled", links[l]);
        model_tmpl_free(t);
        CHECK(strstr(err, "nested too deeply") != NULL);
    }
    /* ...while 150 links, far more than real templates use, are fine */
    k = (size_t)sprintf(src, "{{ x");
    for (size_t i = 0; i < 150; i++) k += (size_t)sprintf(src + k, "|trim");
    k += (size_t)sprintf(src + k, " }}");
    model_tmpl *t = model_tmpl_compile(src, k, err, sizeof err);
    CHECK(t != NULL);
    model_tmpl_free(t);
    free(src);
}

TEST(tmpl_hostile_context_fails_cleanly)
{
    char *out;
    size_t len;
    char err[512];
    /* JSON nested deeper than jansson's parser allows: a clean context error */
    size_t n = 100000;
    char *ctx = malloc(2 * n + 32);
    REQUIRE(ctx);
    size_t k = (size_t)sprintf(ctx, "{\"x\": ");
    memset(ctx + k, '[', n);
    memset(ctx + k + n, ']', n);
    strcpy(ctx + k + 2 * n, "}");
    CHECK_EQ(render("{{ x }}", ctx, NULL, &out, &len, err), MODEL_TMPL_ERR_CONTEXT);
    /* 2000 deep is accepted, printed up to the depth limit */
    k = (size_t)sprintf(ctx, "{\"x\": ");
    memset(ctx + k, '[', 2000);
    memset(ctx + k + 2000, ']', 2000);
    strcpy(ctx + k + 4000, "}");
    CHECK_EQ(render("{{ x|length }}", ctx, NULL, &out, &len, err), 0);
    CHECK_STR(out, "1");
    free(out);
    CHECK_EQ(render("{{ x }}", ctx, NULL, &out, &len, err), MODEL_TMPL_ERR_LIMIT);
    free(ctx);
    /* integers beyond 64 bits and invalid escapes are context errors */
    CHECK_EQ(render("{{ x }}", "{\"x\": 123456789012345678901234567890}", NULL, &out, &len, err), MODEL_TMPL_ERR_CONTEXT);
    CHECK_EQ(render("{{ x }}", "{\"x\": \"\\ud800\"}", NULL, &out, &len, err), MODEL_TMPL_ERR_CONTEXT);
    /* a large conversation renders within the default limits */
    size_t msgs = 5000;
    char *big = malloc(msgs * 64 + 64);
    REQUIRE(big);
    k = (size_t)sprintf(big, "{\"messages\": [");
    for (size_t i = 0; i < msgs; i++)
        k += (size_t)sprintf(big + k, "%s{\"role\": \"%s\", \"content\": \"message %zu\"}", i ? "," : "", i % 2 ? "assistant" : "user", i);
    strcpy(big + k, "]}");
    CHECK_EQ(render("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", big, NULL, &out, &len, err), 0);
    CHECK(out && len > msgs * 20);
    free(out);
    free(big);
}

/* ------------------------------------------------------------------------------ threads */

struct thread_arg {
    const model_tmpl *t;
    const char *ctx;
    char *out;
    int rc;
};

static void *render_thread(void *p)
{
    struct thread_arg *a = p;
    char err[256];
    size_t len;
    for (int i = 0; i < 200 && a->rc == 0; i++) {
        free(a->out);
        a->rc = model_tmpl_render_ex(a->t, a->ctx, strlen(a->ctx), NULL, &a->out, &len, err, sizeof err);
    }
    return NULL;
}

TEST(tmpl_concurrent_renders_share_a_template)
{
    const char *src = "{% set ns = namespace(n=0) %}{% macro m(x) %}[{{ x|upper }}]{% endmacro %}"
                      "{% for msg in messages %}{% set ns.n = ns.n + 1 %}{{ m(msg.content) }}{{ msg|tojson }}{% endfor %}{{ ns.n }}";
    char err[256];
    model_tmpl *t = model_tmpl_compile(src, strlen(src), err, sizeof err);
    REQUIRE(t);
    const char *ctxs[4] = {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"c\"}]}",
                           "{\"messages\": []}", "{\"messages\": [{\"role\": \"user\", \"content\": \"ü\"}]}"};
    const char *want[4] = {"[A]{\"role\": \"user\", \"content\": \"a\"}1",
                           "[B]{\"role\": \"user\", \"content\": \"b\"}[C]{\"role\": \"assistant\", \"content\": \"c\"}2", "0",
                           "[Ü]{\"role\": \"user\", \"content\": \"ü\"}1"};
    pthread_t th[8];
    struct thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct thread_arg){.t = t, .ctx = ctxs[i % 4]};
        pthread_create(&th[i], NULL, render_thread, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].rc, 0);
        CHECK_STR(args[i].out, want[i % 4]);
        free(args[i].out);
    }
    model_tmpl_free(t);
}

/* The recursion limits keep the C stack small: the deepest macro recursion and the deepest
 * value printing allowed by default fit in a thread with a 1 MiB stack (glibc's default is 8). */
static void *deep_thread(void *p)
{
    int *rc = p;
    char *out;
    size_t len;
    char err[512];
    rc[0] = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", NULL, &out, &len, err);
    rc[1] = render("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}{{ ns.x }}",
                   "{}", NULL, &out, &len, err);
    rc[2] = render("{% for x in [[1]] recursive %}{{ loop([[1]]) }}{% endfor %}", "{}", NULL, &out, &len, err);
    /* the depth limits multiply: a macro recursing from inside a chain of 190 filters (~86 KB of
     * C stack a level) crashed at depth 100 on an 8 MiB stack; now the render's stack budget
     * stops it (TMPL_STACK_MAX) */
    char src[4096];
    size_t o = (size_t)snprintf(src, sizeof src, "{%%- macro f(n) -%%}{%%- if n > 0 -%%}{{ f(n-1)");
    for (int i = 0; i < 190; i++) o += (size_t)snprintf(src + o, sizeof src - o, "|string");
    snprintf(src + o, sizeof src - o, "|length }}{%%- endif -%%}{%%- endmacro -%%}{{ f(100) }}");
    rc[3] = render(src, "{}", NULL, &out, &len, err);
    if (rc[3] == MODEL_TMPL_ERR_LIMIT && !strstr(err, "C stack")) rc[3] = -1;
    return NULL;
}

TEST(tmpl_depth_limits_fit_a_small_stack)
{
    pthread_attr_t at;
    pthread_attr_init(&at);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    size_t stack = 16 << 20; /* the sanitizers' redzones and shadow make frames several times larger */
#else
    size_t stack = getenv("TMPL_TEST_STACK") ? (size_t)atol(getenv("TMPL_TEST_STACK")) : 1 << 20;
#endif
    pthread_attr_setstacksize(&at, stack);
    pthread_t th;
    int rc[4] = {0, 0, 0, 0};
    REQUIRE(pthread_create(&th, &at, deep_thread, rc) == 0);
    pthread_join(th, NULL);
    pthread_attr_destroy(&at);
    CHECK_EQ(rc[0], MODEL_TMPL_ERR_LIMIT);
    CHECK_EQ(rc[1], MODEL_TMPL_ERR_LIMIT);
    CHECK_EQ(rc[2], MODEL_TMPL_ERR_LIMIT);
    CHECK_EQ(rc[3], MODEL_TMPL_ERR_LIMIT);
}

/* Work a short template asks for is bounded by what it produces or charges: '' * N and [] * N
 * are empty at once (N empty appends: 1e18 never ended); rfind / rindex / rpartition / rsplit
 * find the last occurrences as Python does, in linear time (a backwards memcmp at every place
 * was O(n * m), seconds a call). */
TEST(tmpl_empty_repeat_and_reverse_search)
{
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"{{ ('' * 1000000000000000000)|length }}", "0"},
        {"{{ ([] * 1000000000000000000)|length }}", "0"},
        {"{{ 'abcabc'.rfind('bc') }} {{ 'abcabc'.rfind('x') }} {{ 'abc'.rfind('abcd') }}",
         "4 -1 -1"},
        {"{{ 'aaaa'.rfind('aa') }} {{ 'héllo héllo'.rindex('é') }}", "2 7"},
        {"{{ 'a,b,,c'.rsplit(',') }}", "['a', 'b', '', 'c']"},
        {"{{ 'a,b,,c'.rsplit(',', 1) }} {{ 'aaaa'.rsplit('aa') }}", "['a,b,', 'c'] ['', '', '']"},
        {"{{ 'x=1=2'.rpartition('=') }} {{ 'x'.rpartition('=') }}",
         "('x=1', '=', '2') ('', '', 'x')"},
        {"{{ 'abab'.rsplit('ab', 1) }}", "['ab', '']"},
        /* Python's lengths: 309 digits, the point, 1,000 decimals (and 102 commas); were cut at
           1,199 */
        {"{{ ('%.1000f' % 1e308)|length }} {{ '{:,.1000f}'.format(1e308)|length }}", "1310 1412"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, err[512];
        size_t len;
        int rc = render(cases[i].src, "{}", NULL, &out, &len, err);
        CHECK_MSG(rc == 0 && out && !strcmp(out, cases[i].want), "%s: %d '%s' (%s)", cases[i].src,
                  rc, out ? out : "", err);
        free(out);
    }
    /* a 400 KB text and a 200 KB needle: linear (was ~2 s) */
    char *src = malloc(1 << 20);
    REQUIRE(src);
    size_t o =
        (size_t)sprintf(src, "{%% set h = 'a' * 400000 %%}{%% set n = 'a' * 199999 ~ 'b' %%}");
    sprintf(src + o, "{{ h.rfind(n) }} {{ (h ~ 'b').rfind(n) }} {{ (h ~ 'b').rsplit(n)|length }}");
    char *out, err[512];
    size_t len;
    CHECK_EQ(render(src, "{}", NULL, &out, &len, err), 0);
    CHECK_STR(out ? out : "", "-1 200001 2");
    free(out);
    free(src);
}

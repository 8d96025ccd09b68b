/* The Jinja2 language, case by case, against the real jinja2: tests/data/tmpl_cases.json.gz
 * (unpacked by make to build/data/tmpl_cases.json) holds
 * ~320 snippets (whitespace control, literals and printing, operators, access, tests, every
 * filter, string methods, loops, scoping, macros, call blocks, errors, and Python's str beyond
 * ASCII: character classes, case mappings, repr, identifiers) with the output — or the
 * exception — that jinja2 produced in transformers' environment (see
 * tests/model/gen_tmpl_cases.py, which generated the file). */
#include "tests/model/tmpl_case.h"
#include <stdlib.h>
#include <string.h>

TEST(tmpl_lang_cases_match_jinja2)
{
    json_t *doc = tmpl_case_load("build/data/tmpl_cases.json");
    REQUIRE(doc);
    size_t i;
    json_t *c;
    int n = 0, good = 0;
    json_array_foreach(json_object_get(doc, "cases"), i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *src = json_string_value(json_object_get(c, "template"));
        size_t src_len = json_string_length(json_object_get(c, "template"));
        char err[1024];
        n++;
        model_tmpl *t = model_tmpl_compile(src, src_len, err, sizeof err);
        if (!t) { /* jinja2 rejects some templates when compiling too */
            const char *want = json_string_value(json_object_get(c, "error"));
            if (!want || !tmpl_error_matches(name, err, want)) t_fail(__FILE__, __LINE__, "%s: compile: %s", name, err);
            else good++;
            continue;
        }
        char *ctx = json_dumps(json_object_get(c, "context"), JSON_COMPACT);
        good += tmpl_case_check(name, t, ctx, strlen(ctx), json_object_get(c, "rendered"), json_object_get(c, "error"), 0);
        free(ctx);
        model_tmpl_free(t);
    }
    if (good != n) fprintf(stderr, "  %d of %d cases match\n", good, n);
    CHECK(n >= 200);
    json_decref(doc);
}

/* Mutation fuzzing (deterministic): templates from the case file with random edits must compile
 * or fail with a message, and render or fail with a message — never crash, hang or leak (run
 * under `make test-san` to catch memory errors). */
TEST(tmpl_fuzz_mutated_templates)
{
    json_t *doc = tmpl_case_load("build/data/tmpl_cases.json");
    REQUIRE(doc);
    json_t *cases = json_object_get(doc, "cases");
    size_t ncases = json_array_size(cases);
    REQUIRE(ncases > 0);
    char *ctx = json_dumps(json_object_get(json_array_get(cases, 0), "context"), JSON_COMPACT);
    static const char alphabet[] = "{}%#-+()[]|.,:'\"~ =<>!*/_abxyz0129\n\\";
    uint64_t seed = getenv("TMPL_FUZZ_SEED") ? strtoull(getenv("TMPL_FUZZ_SEED"), NULL, 0) : 0x9E3779B97F4A7C15ull;
    model_tmpl_opts o;
    model_tmpl_default_opts(&o);
    o.limits.max_steps = 200000;
    o.limits.max_output = 1 << 16;
    o.limits.max_memory = 8 << 20;
    int compiled = 0, rendered = 0;
    int iters = getenv("TMPL_FUZZ_ITERS") ? atoi(getenv("TMPL_FUZZ_ITERS")) : 3000;
    for (int iter = 0; iter < iters; iter++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        const char *base = json_string_value(json_object_get(json_array_get(cases, seed % ncases), "template"));
        size_t n = strlen(base);
        char buf[4096];
        if (n > 2000) n = 2000;
        memcpy(buf, base, n);
        int edits = 1 + (int)(seed >> 60);
        for (int e = 0; e < edits; e++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            size_t at = n ? (size_t)(seed >> 20) % n : 0;
            switch ((seed >> 8) % 4) {
            case 0: if (n) buf[at] = alphabet[(seed >> 32) % (sizeof alphabet - 1)]; break;
            case 1: if (n) { memmove(buf + at, buf + at + 1, n - at - 1); n--; } break;
            case 2: if (n < sizeof buf - 1) { memmove(buf + at + 1, buf + at, n - at); buf[at] = alphabet[(seed >> 32) % (sizeof alphabet - 1)]; n++; } break;
            case 3: { /* duplicate a slice */
                size_t len = (size_t)(seed >> 40) % 16;
                if (at + len <= n && n + len < sizeof buf) { memmove(buf + at + len, buf + at, n - at); n += len; }
                break;
            }
            }
        }
        char err[512];
        model_tmpl *t = model_tmpl_compile(buf, n, err, sizeof err);
        if (!t) {
            CHECK_MSG(err[0] != 0, "compile failed without a message");
            continue;
        }
        compiled++;
        char *out = NULL;
        size_t len;
        int rc = model_tmpl_render_ex(t, ctx, strlen(ctx), &o, &out, &len, err, sizeof err);
        if (rc == 0) {
            rendered++;
            CHECK(out != NULL && strlen(out) <= len);
        } else {
            CHECK_MSG(err[0] != 0, "render failed without a message");
            CHECK(out == NULL);
        }
        free(out);
        model_tmpl_free(t);
    }
    free(ctx);
    json_decref(doc);
    CHECK(compiled > 100 && rendered > 50); /* the mutations exercise rendering, not just parse errors */
}

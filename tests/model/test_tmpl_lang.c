/* The Jinja2 language, case by case, against the real jinja2: tests/data/tmpl_cases.json holds
 * ~200 snippets (whitespace control, literals and printing, operators, access, tests, every
 * filter, string methods, loops, scoping, macros, call blocks, errors) with the output — or the
 * exception — that jinja2 produced in transformers' environment (see
 * tests/model/gen_tmpl_cases.py, which generated the file). */
#include "tests/model/tmpl_case.h"
#include <stdlib.h>
#include <string.h>

TEST(tmpl_lang_cases_match_jinja2)
{
    json_t *doc = tmpl_case_load("tests/data/tmpl_cases.json");
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
        if (!t) {
            t_fail(__FILE__, __LINE__, "%s: compile: %s", name, err);
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

/* tools/tmplrun.c — renders templates given on stdin, one JSON object per line:
 * {"t": "<template source>", "c": {<context>}} -> one line {"rendered": "..."} or {"error": "..."}.
 * The C side of tools/tmpldiff.py (differential testing against the real jinja2). */
#include "model/tmpl/tmpl.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t je;
        json_t *in = json_loadb(line, (size_t)n, 0, &je), *res = json_object();
        const char *src = in ? json_string_value(json_object_get(in, "t")) : NULL;
        char err[1024];
        if (!src) {
            json_object_set_new(res, "error", json_string("tmplrun: bad input line"));
        } else {
            char *ctx = json_dumps(json_object_get(in, "c"), JSON_COMPACT);
            model_tmpl *t = model_tmpl_compile(src, json_string_length(json_object_get(in, "t")), err, sizeof err);
            if (!t) {
                json_object_set_new(res, "error", json_string(err));
            } else {
                model_tmpl_opts o;
                model_tmpl_default_opts(&o);
                o.limits.max_steps = 2000000; /* fuzzed templates: keep each case short */
                char *out;
                size_t len;
                if (model_tmpl_render_ex(t, ctx ? ctx : "{}", ctx ? strlen(ctx) : 2, &o, &out, &len, err, sizeof err))
                    json_object_set_new(res, "error", json_string(err));
                else {
                    json_object_set_new(res, "rendered", json_stringn(out, len));
                    free(out);
                }
                model_tmpl_free(t);
            }
            free(ctx);
        }
        json_decref(in);
        char *s = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(s ? s : "{\"error\":\"tmplrun: out of memory\"}");
        fflush(stdout);
        free(s);
        json_decref(res);
    }
    free(line);
    return 0;
}

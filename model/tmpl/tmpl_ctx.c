/* model/tmpl/tmpl_ctx.c — the render context: a JSON object (text) whose members become the
 * template's top-level variables. Parsed with jansson and converted to template values, keeping
 * member order (Python dicts keep insertion order, and templates print and serialize dicts in it).
 *
 * Only members the template can name are converted: a variable the template never mentions is
 * unreachable (Jinja has no lookup by computed name), so skipping it changes nothing. */
#include "model/tmpl/tmpl_int.h"
#include <jansson.h>
#include <string.h>

static int convert(tmpl_rt *r, json_t *j, tmpl_val *out)
{
    switch (json_typeof(j)) {
    case JSON_NULL: *out = tmpl_none(); return 0;
    case JSON_TRUE: *out = tmpl_bool(true); return 0;
    case JSON_FALSE: *out = tmpl_bool(false); return 0;
    case JSON_INTEGER: *out = tmpl_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = tmpl_float(json_real_value(j)); return 0;
    case JSON_STRING: return model_tmpl_str_new(r, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (model_tmpl_list_new(r, TMPL_SEQ_LIST, n, out)) return -1;
        for (size_t i = 0; i < n; i++) {
            tmpl_val v;
            if (convert(r, json_array_get(j, i), &v) || model_tmpl_list_push(r, *out, v)) {
                tmpl_decref(r, *out);
                return -1;
            }
        }
        return tmpl_step(r, n);
    }
    case JSON_OBJECT: {
        if (model_tmpl_dict_new(r, TMPL_DICT, json_object_size(j), out)) return -1;
        const char *key;
        size_t klen;
        json_t *val;
        json_object_keylen_foreach(j, key, klen, val)
        {
            tmpl_val k, v;
            if (model_tmpl_str_new(r, key, klen, &k)) goto fail;
            if (convert(r, val, &v)) {
                tmpl_decref(r, k);
                goto fail;
            }
            if (model_tmpl_dict_set(r, *out, k, v)) goto fail;
        }
        return tmpl_step(r, json_object_size(j));
    fail:
        tmpl_decref(r, *out);
        return -1;
    }
    }
    return model_tmpl_fail(r, "ValueError", "unexpected JSON value");
}

static int load_members(tmpl_rt *r, json_t *obj, tmpl_scope *root, const char *skip)
{
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(obj, key, klen, val)
    {
        if (skip && klen == strlen(skip) && !memcmp(key, skip, klen)) continue;
        int32_t sym = model_tmpl_sym_find(r->t, key, klen);
        if (sym < 0) continue;
        tmpl_val v;
        if (convert(r, val, &v) || model_tmpl_scope_set(r, root, sym, v)) return -1;
    }
    return 0;
}

/* Variables transformers always passes, None/False when the caller gave none. */
static int conversation_defaults(tmpl_rt *r, json_t *obj, tmpl_scope *root)
{
    static const char *const names[] = {"tools", "documents", "add_generation_prompt"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int32_t sym = model_tmpl_sym_find(r->t, names[i], strlen(names[i]));
        if (sym < 0 || json_object_get(obj, names[i])) continue;
        if (model_tmpl_scope_set(r, root, sym, i == 2 ? tmpl_bool(false) : tmpl_none())) return -1;
    }
    return 0;
}

int model_tmpl_ctx_load(tmpl_rt *r, const char *text, size_t len, tmpl_scope *root, bool conversation)
{
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!j) return model_tmpl_fail(r, "ContextError", "context is not valid JSON: %s (line %d)", je.text, je.line);
    int rc = 0;
    if (!json_is_object(j)) {
        rc = model_tmpl_fail(r, "ContextError", "context must be a JSON object");
        goto out;
    }
    if (!conversation) {
        rc = load_members(r, j, root, NULL);
        goto out;
    }
    /* a conversation file: members, then those of "extra" (which win), then the defaults */
    json_t *extra = json_object_get(j, "extra");
    if (extra && !json_is_object(extra) && !json_is_null(extra)) {
        rc = model_tmpl_fail(r, "ContextError", "\"extra\" must be an object");
        goto out;
    }
    rc = load_members(r, j, root, "extra");
    if (!rc && json_is_object(extra)) rc = load_members(r, extra, root, NULL);
    if (!rc) rc = conversation_defaults(r, j, root);
out:
    json_decref(j);
    return rc;
}

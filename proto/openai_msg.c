/* proto/openai_msg.c — see openai_msg.h. */
#include "proto/openai_msg.h"
#include "proto/openai_tools.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

void proto_msg_mistral_id(const char *id, size_t len, char out[10])
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    /* an id of 9 letters and digits (ours in this family) is kept */
    int ok = len == 9;
    for (size_t i = 0; ok && i < len; i++) ok = alnum(id[i]);
    out[9] = 0;
    if (ok) {
        memcpy(out, id, 9);
        return;
    }
    /* any other: FNV-1a of the whole id, 9 base-62 digits (a function of the id alone, so a call
     * and the tool message answering it agree). Not its last 9 characters, as vLLM's
     * truncate_tool_call_ids keeps: ids that differ only before those ("0_get_weather",
     * "1_get_weather") would become one */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211ull;
    for (int i = 0; i < 9; i++, h /= 62) out[i] = abc[h % 62];
}

static int set_mistral_id(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return 0; /* the template says what it thinks of it */
    char id[10];
    proto_msg_mistral_id(json_string_value(v), json_string_length(v), id);
    return json_object_set_new(o, key, json_string(id)) ? -1 : 0;
}

/* Every null-valued key but the two the API gives meaning to. OpenAI's message types mark
 * tool_calls, function_call, name, refusal, audio, annotations and tool_call_id nullable, and
 * clients that echo a response message back (message.model_dump(), LiteLLM) send them as null;
 * templates test `message.tool_calls is defined` and then iterate it (Llama-3.1: "object of type
 * 'NoneType' has no len()"). vLLM drops them the same way (PR 12788). */
static void drop_nulls(json_t *m)
{
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(m, tmp, key, v)
    {
        if (json_is_null(v) && strcmp(key, "content") && strcmp(key, "role"))
            json_object_del(m, key);
    }
}

/* tool_calls[].function.arguments as the object its JSON string holds: OpenAI sends arguments
 * as a string, templates (Hermes, Qwen2.5, Llama-3.1, Mistral) tojson them, which wrote the
 * string quoted — history the model never saw in training (vLLM's _postprocess_messages parses
 * it the same way). A string that is not a JSON object stays as it is. */
static int parse_arguments(json_t *call, int max_depth)
{
    json_t *fn = json_object_get(call, "function");
    json_t *args = json_is_object(fn) ? json_object_get(fn, "arguments") : NULL;
    if (!json_is_string(args)) return 0;
    /* the body's nesting bound holds for what a string holds too: a deeper one stays a string
     * (the template context's JSON is read again by the template engine) */
    if (proto_json_depth(json_string_value(args), json_string_length(args), max_depth) > max_depth)
        return 0;
    json_t *o =
        json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return 0;
    }
    return json_object_set_new(fn, "arguments", o) ? -1 : 0;
}

int proto_msg_normalize(json_t *m, const proto_limits *lim)
{
    drop_nulls(m);
    json_t *calls = json_object_get(m, "tool_calls");
    /* an empty list is no calls: Llama-3.1 raises "only supports single tool-calls" on it */
    if (json_is_array(calls) && json_array_size(calls) == 0) {
        json_object_del(m, "tool_calls");
        calls = NULL;
    }
    int mistral = lim->tool_family == PROTO_TOOLS_MISTRAL;
    for (size_t i = 0; json_is_array(calls) && i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i);
        if (!json_is_object(c)) continue;
        if (parse_arguments(c, lim->max_depth) || (mistral && set_mistral_id(c, "id"))) return -1;
    }
    if (mistral && set_mistral_id(m, "tool_call_id")) return -1;
    /* developer messages replace system messages (OpenAI's reference, o1 and later); a template
     * that never heard of the role raises on it (Mistral, Gemma-2, Llama-2), drops it silently
     * (Qwen2.5, Phi-3.5) or renders a header it was never trained on (Llama-3.x) */
    json_t *role = json_object_get(m, "role");
    if (!lim->developer_role && json_is_string(role) &&
        !strcmp(json_string_value(role), "developer"))
        return json_object_set_new(m, "role", json_string("system")) ? -1 : 0;
    return 0;
}

json_t *proto_msg_tools(json_t *tools)
{
    json_t *out = json_deep_copy(tools);
    for (size_t i = 0; out && json_is_array(out) && i < json_array_size(out); i++) {
        json_t *fn = json_object_get(json_array_get(out, i), "function");
        if (!json_is_object(fn)) continue;
        /* OpenAI makes both optional (no parameters: "an empty parameter list"); Hermes-3's
         * template reads tool.description and tool.parameters unguarded */
        if ((!json_is_string(json_object_get(fn, "description")) &&
             json_object_set_new(fn, "description", json_string(""))) ||
            (!json_is_object(json_object_get(fn, "parameters")) &&
             json_object_set_new(fn, "parameters",
                                 json_pack("{s:s, s:{}}", "type", "object", "properties")))) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

int proto_msg_functions(json_t *o, char *msg, size_t msgn, const char **param)
{
    json_t *fns = json_object_get(o, "functions"), *fc = json_object_get(o, "function_call");
    if (json_is_null(fns)) fns = NULL;
    if (json_is_null(fc)) fc = NULL;
    if (!fns && !fc) return 0;
    json_t *tools = json_object_get(o, "tools"), *tc = json_object_get(o, "tool_choice");
    *param = fns ? "functions" : "function_call";
    if ((fns && tools && !json_is_null(tools)) || (fc && tc && !json_is_null(tc))) {
        snprintf(msg, msgn, "'%s' is the deprecated form of '%s': send one of them", *param,
                 fns ? "tools" : "tool_choice");
        return -1;
    }
    if (fns && !json_is_array(fns)) {
        snprintf(msg, msgn,
                 "'functions' must be an array of {\"name\", \"description\", \"parameters\"}");
        return -1;
    }
    json_t *choice = NULL;
    if (fc && json_is_string(fc) &&
        (!strcmp(json_string_value(fc), "none") || !strcmp(json_string_value(fc), "auto"))) {
        choice = json_incref(fc);
    } else if (fc && json_is_object(fc) && json_is_string(json_object_get(fc, "name"))) {
        choice = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                           json_object_get(fc, "name"));
        if (!choice) return -2;
    } else if (fc) {
        *param = "function_call";
        snprintf(msg, msgn,
                 "'function_call' must be \"none\", \"auto\" or {\"name\": a function's name}");
        return -1;
    }
    if (choice && json_object_set_new(o, "tool_choice", choice)) return -2;
    if (fns) {
        json_t *t = json_array();
        for (size_t i = 0; t && i < json_array_size(fns); i++) {
            json_t *w =
                json_pack("{s:s, s:O}", "type", "function", "function", json_array_get(fns, i));
            if (!w || json_array_append_new(t, w)) {
                json_decref(t);
                return -2;
            }
        }
        if (!t || json_object_set_new(o, "tools", t)) return -2;
    }
    /* the functions API answers one function_call */
    if (json_object_set_new(o, "parallel_tool_calls", json_false())) return -2;
    return 1;
}

int proto_msg_legacy(json_t *m, size_t idx, char last_id[24])
{
    json_t *role = json_object_get(m, "role"), *fc = json_object_get(m, "function_call");
    const char *r = json_is_string(role) ? json_string_value(role) : "";
    /* a null or empty tool_calls beside it is no call (a functions response echoed back by
     * model_dump() carries "tool_calls": null): the function_call is the call */
    json_t *tc = json_object_get(m, "tool_calls");
    int no_calls = !tc || json_is_null(tc) || (json_is_array(tc) && json_array_size(tc) == 0);
    if (!strcmp(r, "assistant") && json_is_object(fc) && no_calls) {
        snprintf(last_id, 24, "call_fn%zu", idx);
        json_t *calls =
            json_pack("[{s:s, s:s, s:O}]", "id", last_id, "type", "function", "function", fc);
        if (!calls || json_object_set_new(m, "tool_calls", calls)) return -1;
        json_object_del(m, "function_call");
    } else if (!strcmp(r, "function")) {
        if (!last_id[0]) snprintf(last_id, 24, "call_fn");
        if (json_object_set_new(m, "role", json_string("tool")) ||
            json_object_set_new(m, "tool_call_id", json_string(last_id)))
            return -1;
    }
    return 0;
}

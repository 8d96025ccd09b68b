/* proto/openai_msg.c through proto_req_parse and the chat templates we ship: what real OpenAI
 * clients send in a chat's history (null keys, empty tool_calls, arguments as a JSON string,
 * the developer role, OpenAI-style call ids, tools without a description) renders in every
 * template family, as it does under vLLM; and the request fields the API audit (audapi) found
 * refused or worded unlike OpenAI. Each case rendered with the template is one that failed (or
 * rendered a double-encoded string) before. */
#include "model/ckpt/model.h"
#include "model/tmpl/tmpl.h"
#include "proto/openai_msg.h"
#include "proto/openai_req.h"
#include "proto/openai_resp.h"
#include "proto/openai_tools.h"
#include "tests/test.h"
#include <ctype.h>
#include <jansson.h>

/* Limits with a 512-token vocabulary and a context of max_context tokens; the template traits of
 * src (NULL: the defaults). */
static proto_limits lims(int max_context, const char *src)
{
    proto_limits l;
    proto_limits_default(&l);
    l.vocab = 512;
    l.max_context = max_context;
    if (src) proto_limits_template(&l, src);
    return l;
}

/* body parsed for ep: its error; without one *r holds the request (the caller releases it).
 * msg: 512 bytes for the error's message, param: 64 for its parameter. */
static enum proto_err parse(enum proto_endpoint ep, const char *body, const proto_limits *l,
                            proto_req *r, char *msg, char *param)
{
    return proto_req_parse(ep, body, strlen(body), l, "<s>", "</s>", r, msg, 512, param, 64);
}

/* The request body parsed for the template at path and rendered with it: the prompt text (the
 * caller frees), or NULL with the parse's or the template's error in err. */
static char *render(const char *path, const char *body, char *err, size_t errlen)
{
    size_t len;
    char *src = model_read_file(path, 1 << 20, &len);
    if (!src) {
        snprintf(err, errlen, "cannot read %s", path);
        return NULL;
    }
    proto_limits l = lims(4096, src);
    model_tmpl *t = model_tmpl_compile(src, len, err, errlen);
    free(src);
    if (!t) return NULL;
    proto_req r;
    char param[64], msg[512], *out = NULL;
    if (parse(PROTO_EP_CHAT, body, &l, &r, msg, param) != PROTO_ERR_NONE)
        snprintf(err, errlen, "%s", msg);
    else {
        if (model_tmpl_render(t, r.chat_context, &out, err, errlen) < 0) out = NULL;
        proto_req_deinit(&r);
    }
    model_tmpl_free(t);
    return out;
}

#define TMPL(name) "tests/data/chat_templates/" name ".jinja"

static const char tools_json[] =
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"The weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

TEST(openai_history_null_keys_render)
{
    /* an assistant turn as message.model_dump() / LiteLLM send it back: every optional key null */
    static const char *const bodies[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Hello there!\","
        "\"tool_calls\":null,\"function_call\":null,\"refusal\":null,\"audio\":null,\"annotations\":null,\"name\":null},"
        "{\"role\":\"user\",\"content\":\"bye\",\"name\":null}],\"max_tokens\":3}",
        /* an empty list is no calls (Llama-3.1: "This model only supports single tool-calls") */
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Hello there!\","
        "\"tool_calls\":[]},{\"role\":\"user\",\"content\":\"bye\"}]}",
    };
    static const char *const tmpls[] = {TMPL("llama-3.1-instruct"), TMPL("llama-3.2-instruct"),
                                        TMPL("hermes-3-llama-3.1-tool-use"),
                                        TMPL("qwen2.5-instruct"), TMPL("mistral-7b-instruct-v0.3")};
    char err[512], body[2048];
    for (size_t i = 0; i < sizeof tmpls / sizeof tmpls[0]; i++)
        for (size_t k = 0; k < 2; k++) {
            /* with the tools too (Hermes-3 iterates tool_calls only then) */
            for (int with_tools = 0; with_tools < 2; with_tools++) {
                snprintf(body, sizeof body, "%.*s%s%s}", (int)strlen(bodies[k]) - 1, bodies[k],
                         with_tools ? "," : "", with_tools ? tools_json : "");
                char *out = render(tmpls[i], body, err, sizeof err);
                CHECK_MSG(out && strstr(out, "Hello there!") && strstr(out, "bye"), "%s body %zu tools %d: %s", tmpls[i], k,
                          with_tools, out ? out : err);
                free(out);
            }
        }
}

TEST(openai_history_arguments_string_is_object)
{
    /* arguments as OpenAI sends them (a JSON string) reach the template as the object: Llama-3.1
     * writes {"name": "get_weather", "parameters": {"city": "Paris"}}, not "{\"city\"...}" */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":null,"
                       "\"tool_calls\":[{\"id\":\"call_abc\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                       "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
                       "{\"role\":\"tool\",\"tool_call_id\":\"call_abc\",\"content\":\"20C\"}],";
    char err[512], b[2048];
    snprintf(b, sizeof b, "%s%s}", body, tools_json);
    char *out = render(TMPL("llama-3.1-instruct"), b, err, sizeof err);
    CHECK_MSG(out && strstr(out, "\"parameters\": {\"city\": \"Paris\"}"), "%s", out ? out : err);
    free(out);
    out = render(TMPL("qwen2.5-instruct"), b, err, sizeof err);
    CHECK_MSG(out && strstr(out, "\"arguments\": {\"city\": \"Paris\"}"), "%s", out ? out : err);
    free(out);
    /* a string that is no JSON object stays a string */
    snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,"
                          "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"[1]\"}}]}],%s}",
             tools_json);
    out = render(TMPL("qwen2.5-instruct"), b, err, sizeof err);
    CHECK_MSG(out && strstr(out, "\"arguments\": \"[1]\""), "%s", out ? out : err);
    free(out);
}

TEST(openai_history_arguments_deep_stay_string)
{
    /* a string nested past the body's depth bound is not parsed into the template's context */
    char args[400], b[1024], msg[512], param[64];
    size_t k = 0;
    k += (size_t)snprintf(args + k, sizeof args - k, "{\\\"a\\\":");
    for (int i = 0; i < 100; i++) args[k++] = '[';
    for (int i = 0; i < 100; i++) args[k++] = ']';
    snprintf(args + k, sizeof args - k, "}");
    snprintf(b, sizeof b,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
             "\"content\":null,"
             "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
             "\"arguments\":\"%s\"}}]}]}",
             args);
    proto_limits l = lims(4096, NULL);
    proto_req r;
    REQUIRE(parse(PROTO_EP_CHAT, b, &l, &r, msg, param) == PROTO_ERR_NONE);
    CHECK_MSG(strstr(r.chat_context, "\"arguments\":\"{"), "%.200s", r.chat_context);
    proto_req_deinit(&r);
}

TEST(openai_history_mistral_ids)
{
    /* turn 2 of a Mistral tool loop with OpenAI-style ids (ours before, any client's): the
     * template demands 9 alphanumerics on both sides, and the two must still agree */
    static const char *const ids[] = {"call_ey3LKEANhmkICdkcW3NTMrqL", "1", "toolu_01-A",
                                      "ey3LKEANh"};
    static const char *const want[] = {NULL, NULL, NULL, "ey3LKEANh"}; /* 9 alphanumerics: kept */
    for (int i = 0; i < 4; i++) {
        char b[2048], err[512], id[10];
        snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":null,"
                              "\"tool_calls\":[{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                              "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
                              "{\"role\":\"tool\",\"tool_call_id\":\"%s\",\"content\":\"20C\"}],%s}",
                 ids[i], ids[i], tools_json);
        char *out = render(TMPL("mistral-7b-instruct-v0.3"), b, err, sizeof err);
        CHECK_MSG(out != NULL, "%s: %s", ids[i], err);
        proto_msg_mistral_id(ids[i], strlen(ids[i]), id);
        CHECK_EQ(strlen(id), 9);
        for (int k = 0; k < 9; k++) CHECK(isalnum((unsigned char)id[k]));
        if (want[i]) CHECK_STR(id, want[i]);
        char call[64], result[64];
        snprintf(call, sizeof call, "\"id\": \"%s\"", id);
        snprintf(result, sizeof result, "\"call_id\": \"%s\"", id);
        CHECK_MSG(out && strstr(out, call) && strstr(out, result), "%s", out ? out : "");
        /* and the arguments as an object, not a string (M1 in this family too) */
        CHECK_MSG(out && strstr(out, "\"arguments\": {\"city\": \"Paris\"}"), "%s", out ? out : "");
        free(out);
    }
    /* other families keep the ids as sent */
    char b[2048], err[512];
    snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":null,"
                          "\"tool_calls\":[{\"id\":\"call_ey3LKEANhmkICdkcW3NTMrqL\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{}\"}}]},"
                          "{\"role\":\"tool\",\"tool_call_id\":\"call_ey3LKEANhmkICdkcW3NTMrqL\",\"content\":\"20C\"}],%s}",
             tools_json);
    proto_limits l = lims(4096, NULL);
    proto_req r;
    char param[64];
    REQUIRE(parse(PROTO_EP_CHAT, b, &l, &r, err, param) == PROTO_ERR_NONE);
    CHECK(strstr(r.chat_context, "\"tool_call_id\":\"call_ey3LKEANhmkICdkcW3NTMrqL\""));
    proto_req_deinit(&r);
}

TEST(openai_history_developer_role)
{
    /* developer replaces system (OpenAI's reference): rendered as system where the template does
     * not know the role — Mistral raised on it ("roles must alternate") */
    const char *dev = "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}]}";
    const char *sys = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}]}";
    static const char *const tmpls[] = {TMPL("mistral-7b-instruct-v0.3"), TMPL("llama-3.1-instruct"), TMPL("qwen2.5-instruct")};
    for (size_t i = 0; i < sizeof tmpls / sizeof tmpls[0]; i++) {
        char err[512], err2[512];
        char *a = render(tmpls[i], dev, err, sizeof err), *b = render(tmpls[i], sys, err2, sizeof err2);
        CHECK_MSG(a && b && !strcmp(a, b) && strstr(a, "Be brief."), "%s: %s | %s", tmpls[i], a ? a : err, b ? b : err2);
        free(a);
        free(b);
    }
    /* a template that names the role gets it as sent */
    proto_limits l =
        lims(4096, "{% for m in messages %}{% if m.role == 'developer' %}D{% endif %}{% endfor %}");
    CHECK(l.developer_role);
    proto_req r;
    char msg[512], param[64];
    REQUIRE(parse(PROTO_EP_CHAT, dev, &l, &r, msg, param) == PROTO_ERR_NONE);
    CHECK(strstr(r.chat_context, "\"role\":\"developer\""));
    proto_req_deinit(&r);
}

TEST(openai_tools_without_description_render)
{
    /* OpenAI makes a function's description optional; Hermes-3 read it unguarded (UndefinedError) */
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"tools\":[{\"type\":\"function\","
                    "\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]}";
    char err[512];
    char *out = render(TMPL("hermes-3-llama-3.1-tool-use"), b, err, sizeof err);
    CHECK_MSG(out && strstr(out, "get_weather"), "%s", out ? out : err);
    free(out);
}

TEST(openai_context_length_wording)
{
    /* OpenAI's words, which LiteLLM matches to tell a context-window error */
    char m[300];
    proto_context_msg(m, sizeof m, PROTO_EP_CHAT, 4096, 4000, 200);
    CHECK_STR(m, "This model's maximum context length is 4096 tokens. However, you requested 4200 tokens "
                 "(4000 in the messages, 200 in the completion). Please reduce the length of the messages or completion.");
    proto_context_msg(m, sizeof m, PROTO_EP_COMPLETIONS, 512, 802, 0);
    CHECK_STR(m, "This model's maximum context length is 512 tokens. However, your prompt resulted in 802 tokens. "
                 "Please reduce the length of the prompt.");
    /* through the parser: max_tokens past the context, a token prompt past it */
    proto_limits l = lims(4, NULL);
    proto_req r;
    char msg[512], param[64];
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":600}";
    CHECK_EQ(parse(PROTO_EP_CHAT, b, &l, &r, msg, param), PROTO_ERR_CONTEXT_LENGTH);
    CHECK_MSG(!strncmp(msg, "This model's maximum context length is 4 tokens. However, you requested 600 tokens", 82), "%s", msg);
    b = "{\"prompt\":[1,2,3,4,5]}";
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, b, &l, &r, msg, param), PROTO_ERR_CONTEXT_LENGTH);
    CHECK_STR(msg, "This model's maximum context length is 4 tokens. However, your prompt resulted in 5 tokens. "
                   "Please reduce the length of the prompt.");
}

TEST(openai_best_of_one_as_real)
{
    /* 1.0 is 1, as every other integer field takes it (Python's json writes 1.0 for a float) */
    proto_limits l = lims(64, NULL);
    proto_req r;
    char msg[512], param[64];
    const char *b = "{\"prompt\":\"x\",\"best_of\":1.0}";
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, b, &l, &r, msg, param), PROTO_ERR_NONE);
    proto_req_deinit(&r);
    b = "{\"prompt\":\"x\",\"best_of\":2.0}";
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, b, &l, &r, msg, param), PROTO_ERR_UNSUPPORTED);
    b = "{\"prompt\":\"x\",\"best_of\":1.5}";
    CHECK(parse(PROTO_EP_COMPLETIONS, b, &l, &r, msg, param) != PROTO_ERR_NONE);
}

TEST(tools_stream_content_len)
{
    /* Hermes streaming with tool_choice auto: text before <tool_call> goes out as it comes, a
     * tail that may open the marker is held, nothing from the marker on */
    static const struct {
        const char *text;
        size_t from, want;
    } cases[] = {
        {"Let me check.", 0, 13},
        {"Let me check.\n<", 0, 15 - 1},
        {"Let me check.\n<tool", 0, 14},
        {"Let me check.\n<tool_call>\n{\"na", 0, 14},
        {"Let me check.\n<tool_call>\n{\"na", 14, 14},
        {"a < b", 0, 5},
        {"<tool_call>", 0, 0},
        {"<tool_cal", 0, 0},
        {"x<tool_cal>", 0, 11},
        {"", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = proto_tools_content_len(cases[i].text, strlen(cases[i].text), cases[i].from);
        CHECK_MSG(got == cases[i].want, "'%s' from %zu: %zu, want %zu", cases[i].text,
                  cases[i].from, got, cases[i].want);
    }
}

TEST(openai_completions_max_tokens_zero)
{
    /* OpenAI's minimum on /v1/completions is 0 (the prompt scored with echo and logprobs); a chat
     * reply of no tokens stays a 400 */
    proto_limits l = lims(64, NULL);
    proto_req r;
    char msg[512], param[64];
    const char *b = "{\"prompt\":\"x\",\"max_tokens\":0,\"echo\":true,\"logprobs\":1}";
    REQUIRE(parse(PROTO_EP_COMPLETIONS, b, &l, &r, msg, param) == PROTO_ERR_NONE);
    CHECK_EQ(r.max_tokens, 0);
    proto_req_deinit(&r);
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}";
    CHECK_EQ(parse(PROTO_EP_CHAT, b, &l, &r, msg, param), PROTO_ERR_INVALID_VALUE);
    CHECK_STR(param, "max_tokens");
}

TEST(openai_functions_api_as_tools)
{
    /* the deprecated functions API (still in OpenAI's reference): functions and function_call
     * become tools and tool_choice, one call; the history's function_call and function messages
     * render as a tool call and its result (Mistral: with ids of 9 that agree) */
    const char *fns = "\"functions\":[{\"name\":\"get_weather\",\"parameters\":{\"type\":"
                      "\"object\"}},{\"name\":\"f2\"}]";
    char b[2048], msg[512], param[64];
    snprintf(b, sizeof b,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],%s,\"function_call\":{"
             "\"name\":\"f2\"}}",
             fns);
    proto_limits l = lims(4096, NULL);
    proto_req r;
    REQUIRE(parse(PROTO_EP_CHAT, b, &l, &r, msg, param) == PROTO_ERR_NONE);
    REQUIRE(r.tools);
    CHECK(r.tools->legacy && !r.tools->parallel);
    CHECK_EQ(r.tools->n, 2);
    CHECK_EQ(r.tools->choice, PROTO_TOOL_CHOICE_NAMED);
    CHECK_EQ(r.tools->named, 1);
    CHECK(strstr(r.chat_context,
                 "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\""));
    proto_req_deinit(&r);
    /* mixed with tools, or a function_call of another shape: 400 naming the key */
    snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tools\":[]}",
             fns);
    CHECK_EQ(parse(PROTO_EP_CHAT, b, &l, &r, msg, param), PROTO_ERR_INVALID_VALUE);
    CHECK_STR(param, "functions");
    snprintf(
        b, sizeof b,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"function_call\":\"sometimes\"}",
        fns);
    CHECK_EQ(parse(PROTO_EP_CHAT, b, &l, &r, msg, param), PROTO_ERR_INVALID_VALUE);
    CHECK_STR(param, "function_call");
    snprintf(b, sizeof b,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\","
             "\"content\":null,"
             "\"function_call\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
             "\\\"Paris\\\"}\"}},"
             "{\"role\":\"function\",\"name\":\"get_weather\",\"content\":\"20C\"}],%s}",
             fns);
    static const char *const tmpls[] = {TMPL("mistral-7b-instruct-v0.3"),
                                        TMPL("llama-3.1-instruct"),
                                        TMPL("hermes-3-llama-3.1-tool-use")};
    for (size_t i = 0; i < sizeof tmpls / sizeof tmpls[0]; i++) {
        char err[512];
        char *out = render(tmpls[i], b, err, sizeof err);
        CHECK_MSG(out && strstr(out, "Paris") && strstr(out, "20C"), "%s: %s", tmpls[i],
                  out ? out : err);
        free(out);
    }
}

/* Ids that differ only before their last 9 letters and digits stay two ids (a call and its
 * result must pair with their own, not with another call's): not cut to their last 9. */
TEST(openai_history_mistral_ids_stay_distinct)
{
    char a[10], b[10], c[10];
    proto_msg_mistral_id("0_get_weather", 13, a);
    proto_msg_mistral_id("1_get_weather", 13, b);
    proto_msg_mistral_id("0_get_weather", 13, c);
    CHECK_MSG(strcmp(a, b) != 0, "%s %s", a, b);
    CHECK_STR(a, c);
}

/* A functions-API answer echoed back by model_dump() carries "tool_calls": null (or []) beside
 * its function_call: the function_call is still the call, and the function message after it
 * answers that call's id (the null used to hide it: the call stayed a function_call no template
 * renders, and the result answered an id no call had). */
TEST(openai_functions_history_null_tool_calls)
{
    static const char *const calls[] = {"\"tool_calls\":null,", "\"tool_calls\":[],", ""};
    for (int i = 0; i < 3; i++) {
        char b[2048], msg[512], param[64];
        snprintf(b, sizeof b,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":"
                 "\"assistant\",\"content\":null,%s\"function_call\":{\"name\":\"get_weather\","
                 "\"arguments\":\"{}\"}},{\"role\":\"function\",\"name\":\"get_weather\","
                 "\"content\":\"20C\"}],\"functions\":[{\"name\":\"get_weather\"}]}",
                 calls[i]);
        proto_limits l = lims(4096, NULL);
        proto_req r;
        int rc = parse(PROTO_EP_CHAT, b, &l, &r, msg, param);
        CHECK_MSG(rc == PROTO_ERR_NONE, "%s", msg);
        if (rc != PROTO_ERR_NONE) continue;
        CHECK_MSG(strstr(r.chat_context, "\"tool_calls\":[{\"id\":\"call_fn1\"") &&
                      strstr(r.chat_context, "\"tool_call_id\":\"call_fn1\"") &&
                      !strstr(r.chat_context, "function_call"),
                  "%s: %s", calls[i], r.chat_context);
        proto_req_deinit(&r);
    }
}

TEST(openai_function_call_response_shape)
{
    /* answered in the functions API's shape: message.function_call / delta.function_call */
    proto_tool_call call = {"call_x", "get_weather", "{\"city\":\"Paris\"}"};
    proto_resp_meta m = {PROTO_EP_CHAT, "chatcmpl-1", 1, "m"};
    proto_usage u = {0};
    for (int legacy = 0; legacy < 2; legacy++) {
        proto_choice_out c = {.finish_reason = legacy ? "function_call" : "tool_calls",
                              .calls = &call,
                              .n_calls = 1,
                              .function_call = legacy};
        char *s = proto_resp_json(&m, &c, 1, &u);
        json_t *j = s ? json_loads(s, 0, NULL) : NULL;
        free(s);
        json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
        json_t *fc = json_object_get(msg, "function_call"),
               *tc = json_object_get(msg, "tool_calls");
        CHECK(json_is_null(json_object_get(msg, "content")));
        if (legacy) {
            CHECK(!tc && fc);
            CHECK_STR(json_string_value(json_object_get(fc, "name")), "get_weather");
            CHECK_STR(json_string_value(json_object_get(fc, "arguments")), "{\"city\":\"Paris\"}");
        } else {
            CHECK(tc && !fc);
        }
        json_decref(j);
        s = proto_chunk_json(&m, &c, 1, 0);
        j = s ? json_loads(s, 0, NULL) : NULL;
        free(s);
        json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
        CHECK(!json_object_get(delta, legacy ? "tool_calls" : "function_call"));
        CHECK(json_object_get(delta, legacy ? "function_call" : "tool_calls"));
        json_decref(j);
    }
}

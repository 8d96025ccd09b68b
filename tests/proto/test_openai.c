/* Tests for proto/: the error table, SSE framing, request parsing bounds and response shapes.
 * Expected shapes are OpenAI's API reference (field names, nesting, status codes as issue 4
 * lists them); JSON outputs are re-parsed with jansson and checked field by field. */
#include "tests/test.h"
#include "proto/errors.h"
#include "proto/openai_req.h"
#include "proto/openai_resp.h"
#include "proto/sse.h"
#include "proto/utf8.h"
#include <jansson.h>

TEST(proto_err_table_statuses)
{
    /* The statuses issue 4 requires, row by row. */
    struct {
        enum proto_err e;
        int status;
        const char *code;
    } want[] = {
        {PROTO_ERR_INVALID_JSON, 400, "invalid_json"},
        {PROTO_ERR_INVALID_TYPE, 400, "invalid_type"},
        {PROTO_ERR_INVALID_VALUE, 400, "invalid_value"},
        {PROTO_ERR_CONTEXT_LENGTH, 400, "context_length_exceeded"},
        {PROTO_ERR_UNAUTHORIZED, 401, "invalid_api_key"},
        {PROTO_ERR_NOT_FOUND, 404, "unknown_url"},
        {PROTO_ERR_MODEL_NOT_FOUND, 404, "model_not_found"},
        {PROTO_ERR_METHOD, 405, "method_not_allowed"},
        {PROTO_ERR_TOO_LARGE, 413, "request_too_large"},
        {PROTO_ERR_QUEUE_FULL, 429, "queue_full"},
        {PROTO_ERR_NOT_READY, 503, "not_ready"},
        {PROTO_ERR_DRAINING, 503, "draining"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const proto_err_row *r = proto_err_info(want[i].e);
        CHECK_EQ(r->err, want[i].e);
        CHECK_EQ(r->http_status, want[i].status);
        CHECK_STR(r->code, want[i].code);
    }
    /* every row is filled and in its own slot */
    for (int e = 1; e < PROTO_ERR_COUNT; e++) {
        CHECK_EQ(proto_err_info(e)->err, e);
        CHECK(proto_err_info(e)->http_status >= 400);
    }
    CHECK_EQ(proto_err_info(PROTO_ERR_COUNT + 5)->http_status, 500);
}

TEST(proto_err_json_shape)
{
    char *s = proto_err_json(PROTO_ERR_INVALID_VALUE, "'n' must be between 1 and 16, got \"x\"\xff", "n");
    REQUIRE(s);
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    REQUIRE(j);
    json_t *e = json_object_get(j, "error");
    CHECK_STR(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    CHECK_STR(json_string_value(json_object_get(e, "code")), "invalid_value");
    CHECK_STR(json_string_value(json_object_get(e, "param")), "n");
    /* the invalid byte was replaced, the quotes survived */
    CHECK_STR(json_string_value(json_object_get(e, "message")),
              "'n' must be between 1 and 16, got \"x\"\xEF\xBF\xBD");
    json_decref(j);
    free(s);
    s = proto_err_json(PROTO_ERR_NOT_FOUND, "no route", NULL);
    j = json_loads(s, 0, &je);
    REQUIRE(j);
    CHECK(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    json_decref(j);
    free(s);
}

TEST(proto_utf8_validation)
{
    CHECK(proto_utf8_valid("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80", 15));
    CHECK(!proto_utf8_valid("\xC3", 1));             /* truncated */
    CHECK(!proto_utf8_valid("\xC0\xAF", 2));         /* overlong '/' */
    CHECK(!proto_utf8_valid("\xED\xA0\x80", 3));     /* surrogate U+D800 */
    CHECK(!proto_utf8_valid("\xF4\x90\x80\x80", 4)); /* above U+10FFFF */
    CHECK(!proto_utf8_valid("\x80", 1));
    size_t n;
    char *s = proto_utf8_sanitize("a\xE2\x82z", 4, &n);
    CHECK_STR(s, "a\xEF\xBF\xBD\xEF\xBF\xBDz");
    CHECK_EQ(n, 8);
    free(s);
}

TEST(proto_sse_framing)
{
    char buf[256];
    const char *p = "{\"a\":1}";
    size_t n = proto_sse_data(buf, p, strlen(p));
    CHECK_STR(buf, "data: {\"a\":1}\n\n");
    CHECK_EQ(n, strlen(buf));
    /* line breaks of every kind split into data fields */
    n = proto_sse_data(buf, "a\nb\r\nc\rd", 8);
    CHECK_STR(buf, "data: a\ndata: b\ndata: c\ndata: d\n\n");
    CHECK(proto_sse_data_size(8) >= n + 1);
    /* worst case fits the size bound */
    char worst[8] = "\n\n\n\n\n\n\n\n";
    n = proto_sse_data(buf, worst, 8);
    CHECK(n + 1 <= proto_sse_data_size(8));
    n = proto_sse_comment(buf, sizeof buf, "keep-alive\nx");
    CHECK_STR(buf, ": keep-alive x\n\n");
    CHECK_EQ(proto_sse_comment(buf, 4, "keep-alive"), 0);
    CHECK_STR(PROTO_SSE_DONE, "data: [DONE]\n\n");
}

static proto_limits lims(void)
{
    proto_limits l;
    proto_limits_default(&l);
    l.vocab = 512;
    l.max_context = 512;
    return l;
}

/* Parses body and returns the error; on success the request is released. */
static enum proto_err parse(enum proto_endpoint ep, const char *body, char *param)
{
    proto_limits l = lims();
    proto_req r;
    char msg[256], par[64];
    enum proto_err e = proto_req_parse(ep, body, strlen(body), &l, "<s>", "</s>", &r, msg, sizeof msg,
                                       par, sizeof par);
    if (param) strcpy(param, par);
    if (e == PROTO_ERR_NONE) proto_req_deinit(&r);
    else CHECK_MSG(msg[0] != 0, "error %d without a message", e);
    return e;
}

TEST(proto_req_completion_fields)
{
    proto_limits l = lims();
    proto_req r;
    char msg[256], par[64];
    const char *b = "{\"model\":\"m\",\"prompt\":\"Once upon\",\"max_tokens\":7,\"temperature\":0,"
                    "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":-1,\"stop\":[\"\\n\",\"x\"],"
                    "\"n\":2,\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,"
                    "\"logit_bias\":{\"13\":-100,\"7\":2.5},\"logprobs\":3,\"stream\":true,"
                    "\"stream_options\":{\"include_usage\":true},\"user\":\"u1\",\"unknown\":[1]}";
    REQUIRE(proto_req_parse(PROTO_EP_COMPLETIONS, b, strlen(b), &l, NULL, NULL, &r, msg, sizeof msg,
                            par, sizeof par) == PROTO_ERR_NONE);
    CHECK_STR(r.model, "m");
    CHECK_STR(r.prompt, "Once upon");
    CHECK_EQ(r.max_tokens, 7);
    CHECK_NEAR(r.temperature, 0, 0);
    CHECK_NEAR(r.top_p, 0.9, 1e-12);
    CHECK_EQ(r.top_k, 40);
    CHECK_NEAR(r.min_p, 0.05, 1e-12);
    CHECK(r.has_seed);
    CHECK(r.seed == UINT64_MAX);
    CHECK_EQ(r.n_stop, 2);
    CHECK_STR(r.stop[0], "\n");
    CHECK_EQ(r.n, 2);
    CHECK_EQ(r.n_logit_bias, 2);
    CHECK(r.stream && r.include_usage);
    CHECK(r.logprobs);
    CHECK_EQ(r.top_logprobs, 3);
    CHECK_STR(r.user, "u1");
    proto_req_deinit(&r);
    /* token prompt, nested form, and defaults */
    b = "{\"prompt\":[[1,403,407]]}";
    REQUIRE(proto_req_parse(PROTO_EP_COMPLETIONS, b, strlen(b), &l, NULL, NULL, &r, msg, sizeof msg,
                            par, sizeof par) == PROTO_ERR_NONE);
    CHECK_EQ(r.n_prompt_ids, 3);
    CHECK_EQ(r.prompt_ids[2], 407);
    CHECK_EQ(r.max_tokens, -1);
    CHECK_EQ(r.n, 1);
    CHECK_NEAR(r.temperature, 1, 0);
    CHECK_NEAR(r.repetition_penalty, 1, 0);
    CHECK(!r.model && !r.stream && !r.logprobs);
    proto_req_deinit(&r);
}

TEST(proto_req_chat_context)
{
    proto_limits l = lims();
    proto_req r;
    char msg[256], par[64];
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},"
                    "{\"type\":\"text\",\"text\":\"there\"}]}],\"max_tokens\":3,"
                    "\"max_completion_tokens\":5,\"logprobs\":true,\"top_logprobs\":2}";
    REQUIRE(proto_req_parse(PROTO_EP_CHAT, b, strlen(b), &l, "<s>", "</s>", &r, msg, sizeof msg, par,
                            sizeof par) == PROTO_ERR_NONE);
    CHECK_EQ(r.max_tokens, 5); /* max_completion_tokens wins */
    CHECK(r.logprobs);
    CHECK_EQ(r.top_logprobs, 2);
    json_error_t je;
    json_t *ctx = json_loads(r.chat_context, 0, &je);
    REQUIRE(ctx);
    json_t *msgs = json_object_get(ctx, "messages");
    CHECK_EQ(json_array_size(msgs), 2);
    CHECK_STR(json_string_value(json_object_get(json_array_get(msgs, 1), "content")), "Hi there");
    CHECK(json_is_true(json_object_get(ctx, "add_generation_prompt")));
    CHECK_STR(json_string_value(json_object_get(ctx, "bos_token")), "<s>");
    CHECK_STR(json_string_value(json_object_get(ctx, "eos_token")), "</s>");
    json_decref(ctx);
    proto_req_deinit(&r);
}

TEST(proto_req_rejects_bad_input)
{
    char p[64];
    struct {
        enum proto_endpoint ep;
        const char *body;
        enum proto_err want;
        const char *param;
    } cases[] = {
        {PROTO_EP_COMPLETIONS, "", PROTO_ERR_INVALID_JSON, ""},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\"", PROTO_ERR_INVALID_JSON, ""},
        {PROTO_EP_COMPLETIONS, "[1,2]", PROTO_ERR_INVALID_JSON, ""},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", PROTO_ERR_INVALID_JSON, ""},
        {PROTO_EP_COMPLETIONS, "{}", PROTO_ERR_MISSING_FIELD, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":5}", PROTO_ERR_INVALID_TYPE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[]}", PROTO_ERR_INVALID_VALUE, "prompt"},
        {PROTO_EP_COMPLETIONS,
         "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\","
         "\"m\",\"n\",\"o\",\"p\",\"q\",\"r\",\"s\",\"t\",\"u\",\"v\",\"w\",\"x\",\"y\",\"z\","
         "\"0\",\"1\",\"2\",\"3\",\"4\",\"5\",\"6\"]}",
         PROTO_ERR_INVALID_VALUE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":16}",
         PROTO_ERR_INVALID_VALUE, "n"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[\"a\",5]}", PROTO_ERR_INVALID_TYPE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[\"a\",[]]}", PROTO_ERR_INVALID_VALUE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[[1],[1,-1]]}", PROTO_ERR_INVALID_VALUE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[1,512]}", PROTO_ERR_INVALID_VALUE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[1,-1]}", PROTO_ERR_INVALID_VALUE, "prompt"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":[1,\"x\"]}", PROTO_ERR_INVALID_TYPE, "prompt"},
        /* 0 is OpenAI's minimum on completions (the prompt scored), not on chat */
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":-1}", PROTO_ERR_INVALID_VALUE,
         "max_tokens"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":0}",
         PROTO_ERR_INVALID_VALUE, "max_tokens"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":513}", PROTO_ERR_CONTEXT_LENGTH,
         "max_tokens"},
        {PROTO_EP_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":9999}",
         PROTO_ERR_CONTEXT_LENGTH, "max_completion_tokens"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":\"5\"}", PROTO_ERR_INVALID_TYPE,
         "max_tokens"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":1.5}", PROTO_ERR_INVALID_TYPE,
         "max_tokens"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":99999999999999999999}",
         PROTO_ERR_INVALID_JSON, ""},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"n\":17}", PROTO_ERR_INVALID_VALUE, "n"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"n\":0}", PROTO_ERR_INVALID_VALUE, "n"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":2.5}", PROTO_ERR_INVALID_VALUE,
         "temperature"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":-0.1}", PROTO_ERR_INVALID_VALUE,
         "temperature"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":true}", PROTO_ERR_INVALID_TYPE,
         "temperature"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":1.5}", PROTO_ERR_INVALID_VALUE,
         "top_p"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"top_k\":-2}", PROTO_ERR_INVALID_VALUE, "top_k"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"presence_penalty\":3}", PROTO_ERR_INVALID_VALUE,
         "presence_penalty"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"repetition_penalty\":0}",
         PROTO_ERR_INVALID_VALUE, "repetition_penalty"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"seed\":\"1\"}", PROTO_ERR_INVALID_TYPE, "seed"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
         PROTO_ERR_INVALID_VALUE, "stop"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"\"]}", PROTO_ERR_INVALID_VALUE,
         "stop"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[1]}", PROTO_ERR_INVALID_TYPE, "stop"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}",
         PROTO_ERR_INVALID_VALUE, "logit_bias"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":{\"600\":1}}",
         PROTO_ERR_INVALID_VALUE, "logit_bias"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":{\"6\":101}}",
         PROTO_ERR_INVALID_VALUE, "logit_bias"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":[1]}", PROTO_ERR_INVALID_TYPE,
         "logit_bias"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logprobs\":21}", PROTO_ERR_INVALID_VALUE,
         "logprobs"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logprobs\":6}", PROTO_ERR_INVALID_VALUE,
         "logprobs"}, /* OpenAI: at most 5 */
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}",
         PROTO_ERR_INVALID_VALUE, "stream_options"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":1,\"stream\":true}",
         PROTO_ERR_UNSUPPORTED, "echo"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"echo\":1}", PROTO_ERR_INVALID_TYPE, "echo"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}",
         PROTO_ERR_UNSUPPORTED, "echo"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"best_of\":3}", PROTO_ERR_UNSUPPORTED,
         "best_of"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"model\":7}", PROTO_ERR_INVALID_TYPE, "model"},
        {PROTO_EP_CHAT, "{}", PROTO_ERR_MISSING_FIELD, "messages"},
        {PROTO_EP_CHAT, "{\"messages\":[]}", PROTO_ERR_INVALID_VALUE, "messages"},
        {PROTO_EP_CHAT, "{\"messages\":{}}", PROTO_ERR_INVALID_TYPE, "messages"},
        {PROTO_EP_CHAT, "{\"messages\":[1]}", PROTO_ERR_INVALID_TYPE, "messages[0]"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", PROTO_ERR_MISSING_FIELD, "messages[0]"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", PROTO_ERR_INVALID_VALUE, "messages[0]"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", PROTO_ERR_MISSING_FIELD, "messages[0]"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", PROTO_ERR_INVALID_TYPE, "messages[0]"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", PROTO_ERR_UNSUPPORTED, "messages[0]"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", PROTO_ERR_INVALID_VALUE, "top_logprobs"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", PROTO_ERR_INVALID_TYPE, "logprobs"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}", PROTO_ERR_INVALID_VALUE, "response_format"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"strict\":true,\"schema\":{\"type\":\"object\",\"patternProperties\":{}}}}}", PROTO_ERR_INVALID_VALUE, "response_format"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"},\"grammar\":\"root ::= \\\"a\\\"\"}", PROTO_ERR_INVALID_VALUE, "grammar"},
        {PROTO_EP_COMPLETIONS, "{\"prompt\":\"a\",\"grammar\":7}", PROTO_ERR_INVALID_TYPE, "grammar"},
        {PROTO_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", PROTO_ERR_INVALID_TYPE, "tools"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum proto_err e = parse(cases[i].ep, cases[i].body, p);
        CHECK_MSG(e == cases[i].want, "case %zu (%s): got error %d, want %d", i, cases[i].body, e,
                  cases[i].want);
        CHECK_MSG(!strcmp(p, cases[i].param), "case %zu (%s): param '%s', want '%s'", i,
                  cases[i].body, p, cases[i].param);
    }
    /* a too-long token prompt is a context error, caught before allocating for it */
    char *big = malloc(600 * 4 + 32);
    strcpy(big, "{\"prompt\":[");
    for (int i = 0; i < 600; i++) strcat(big, i ? ",1" : "1");
    strcat(big, "]}");
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, big, p), PROTO_ERR_CONTEXT_LENGTH);
    free(big);
}

/* The batch form: several prompts, strings or token arrays (mixed too), the first in prompt /
 * prompt_ids and the rest in more, in order. */
TEST(proto_req_prompt_arrays)
{
    static const char *bodies[] = {"{\"prompt\":[\"one\",\"two\",\"three\"],\"n\":2}", "{\"prompt\":[[1,2],[3],\"x\"]}"};
    for (int i = 0; i < 2; i++) {
        proto_req r;
        char msg[256], param[64];
        proto_limits lim = lims();
        enum proto_err e = proto_req_parse(PROTO_EP_COMPLETIONS, bodies[i], strlen(bodies[i]), &lim, NULL, NULL, &r, msg,
                                           sizeof msg, param, sizeof param);
        CHECK_MSG(e == PROTO_ERR_NONE, "%s: %s", bodies[i], msg);
        if (e != PROTO_ERR_NONE) continue;
        CHECK_EQ(r.n_more, 2);
        if (i == 0) {
            CHECK_STR(r.prompt, "one");
            CHECK_STR(r.more[0].text, "two");
            CHECK_STR(r.more[1].text, "three");
            CHECK_EQ(r.n, 2);
        } else {
            CHECK(r.n_prompt_ids == 2 && r.prompt_ids[1] == 2);
            CHECK(r.more[0].n_ids == 1 && r.more[0].ids[0] == 3 && !r.more[0].text);
            CHECK_STR(r.more[1].text, "x");
        }
        proto_req_deinit(&r);
    }
}

TEST(proto_req_nesting_bound)
{
    /* 100000 nested arrays: rejected by the depth pre-scan, no recursion into them */
    size_t n = 100000;
    char *b = malloc(2 * n + 32);
    size_t o = (size_t)sprintf(b, "{\"prompt\":\"a\",\"x\":");
    for (size_t i = 0; i < n; i++) b[o++] = '[';
    for (size_t i = 0; i < n; i++) b[o++] = ']';
    b[o++] = '}';
    b[o] = 0;
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, b, NULL), PROTO_ERR_INVALID_JSON);
    /* brackets inside strings do not count */
    CHECK_EQ(proto_json_depth("{\"a\":\"[[[[\\\"[[[\"}", 17, 10), 1);
    CHECK_EQ(proto_json_depth("[[1],[[2]]]", 11, 10), 3);
    free(b);
}

static json_t *load(char *s)
{
    json_error_t je;
    json_t *j = s ? json_loads(s, 0, &je) : NULL;
    free(s);
    return j;
}

TEST(proto_resp_shapes)
{
    proto_resp_meta m = {PROTO_EP_CHAT, "chatcmpl-1", 1700000000, "stories260K"};
    proto_lp_token lp[2] = {
        {"Hi", 2, -0.5f, 0, 2, {{"Hi", 2, -0.5f}, {"\xE2\x82", 2, -1.0f}}, 0},
        {"!", 1, -INFINITY, 2, 0, {{0}}, 0},
    };
    proto_choice_out c = {0, "Hi!", 3, "length", 1, lp, 2, NULL, 0, 0, 0, 0};
    proto_usage u = {.prompt_tokens = 5, .completion_tokens = 2, .cached_tokens = 4};
    json_t *j = load(proto_resp_json(&m, &c, 1, &u));
    REQUIRE(j);
    CHECK_STR(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "Hi!");
    /* refusal is required (nullable) in OpenAI's response message */
    CHECK(!json_object_get(json_object_get(ch, "message"), "function_call"));
    json_t *refusal = json_object_get(json_object_get(ch, "message"), "refusal");
    CHECK(refusal && json_is_null(refusal));
    CHECK_STR(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_t *content = json_object_get(json_object_get(ch, "logprobs"), "content");
    CHECK_EQ(json_array_size(content), 2);
    json_t *t0 = json_array_get(content, 0);
    json_t *top1 = json_array_get(json_object_get(t0, "top_logprobs"), 1);
    CHECK_STR(json_string_value(json_object_get(top1, "token")), "\\xe2\\x82");
    CHECK_EQ(json_integer_value(json_array_get(json_object_get(top1, "bytes"), 0)), 0xE2);
    CHECK_NEAR(json_real_value(json_object_get(json_array_get(content, 1), "logprob")), -9999.0, 0);
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 7);
    /* the prefix cache's reuse, the OpenAI way */
    CHECK_EQ(json_integer_value(json_object_get(
                 json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens")),
             4);
    json_decref(j);

    m.ep = PROTO_EP_COMPLETIONS;
    j = load(proto_resp_json(&m, &c, 1, &u));
    REQUIRE(j);
    CHECK_STR(json_string_value(json_object_get(j, "object")), "text_completion");
    ch = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(ch, "text")), "Hi!");
    json_t *lps = json_object_get(ch, "logprobs");
    CHECK_STR(json_string_value(json_array_get(json_object_get(lps, "tokens"), 1)), "!");
    CHECK_EQ(json_integer_value(json_array_get(json_object_get(lps, "text_offset"), 1)), 2);
    CHECK_NEAR(json_real_value(json_object_get(json_array_get(json_object_get(lps, "top_logprobs"), 0), "Hi")), -0.5, 1e-6);
    json_decref(j);

    /* stream chunks: chat role delta, closing chunk with empty delta, usage chunk */
    m.ep = PROTO_EP_CHAT;
    proto_choice_out d = {1, "x", 1, NULL, 0, NULL, 0, NULL, 0, 0, 0, 0};
    j = load(proto_chunk_json(&m, &d, 1, 1));
    REQUIRE(j);
    CHECK_STR(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    ch = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_EQ(json_integer_value(json_object_get(ch, "index")), 1);
    CHECK_STR(json_string_value(json_object_get(json_object_get(ch, "delta"), "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(json_object_get(ch, "delta"), "content")), "x");
    CHECK(json_is_null(json_object_get(ch, "finish_reason")));
    CHECK(json_is_null(json_object_get(j, "usage")) && json_object_get(j, "usage"));
    json_decref(j);
    proto_choice_out fin = {1, NULL, 0, "stop", 0, NULL, 0, NULL, 0, 0, 0, 0};
    j = load(proto_chunk_json(&m, &fin, 0, 0));
    REQUIRE(j);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_EQ(json_object_size(json_object_get(ch, "delta")), 0);
    CHECK_STR(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    CHECK(!json_object_get(j, "usage"));
    json_decref(j);
    j = load(proto_usage_chunk_json(&m, &u));
    REQUIRE(j);
    CHECK_EQ(json_array_size(json_object_get(j, "choices")), 0);
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 5);
    json_decref(j);
    j = load(proto_models_json("stories260K", 1, 512));
    REQUIRE(j);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")), "stories260K");
    json_decref(j);
}

/* "sparse_decode" (AsyncTLS per request): the forms, and each bad value a 400 naming the key */
TEST(proto_req_sparse_decode)
{
    proto_limits l = lims();
    proto_req r;
    char msg[256], par[64];
    const char *b = "{\"prompt\":\"x\",\"sparse_decode\":{\"mode\":\"asynctls\",\"token_budget\":512,"
                    "\"block_budget\":64,\"stagger\":true}}";
    REQUIRE(proto_req_parse(PROTO_EP_COMPLETIONS, b, strlen(b), &l, NULL, NULL, &r, msg, sizeof msg,
                            par, sizeof par) == PROTO_ERR_NONE);
    CHECK_EQ(r.decode_sparse, 1);
    CHECK(r.decode_sparse_token_budget == 512 && r.decode_sparse_block_budget == 64);
    CHECK_EQ(r.decode_sparse_stagger, 2);
    proto_req_deinit(&r);
    b = "{\"prompt\":\"x\",\"sparse_decode\":{\"mode\":\"off\"}}";
    REQUIRE(proto_req_parse(PROTO_EP_COMPLETIONS, b, strlen(b), &l, NULL, NULL, &r, msg, sizeof msg,
                            par, sizeof par) == PROTO_ERR_NONE);
    CHECK_EQ(r.decode_sparse, 0);
    proto_req_deinit(&r);
    b = "{\"prompt\":\"x\"}";
    REQUIRE(proto_req_parse(PROTO_EP_COMPLETIONS, b, strlen(b), &l, NULL, NULL, &r, msg, sizeof msg,
                            par, sizeof par) == PROTO_ERR_NONE);
    CHECK(r.decode_sparse == -1 && r.decode_sparse_token_budget == 0 && r.decode_sparse_stagger == 0);
    proto_req_deinit(&r);
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":true}", NULL), PROTO_ERR_NONE);
    char p[64];
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":{\"mode\":\"quest\"}}", p), PROTO_ERR_INVALID_VALUE);
    CHECK_STR(p, "mode");
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":{\"token_budget\":0}}", p), PROTO_ERR_INVALID_VALUE);
    CHECK_STR(p, "token_budget");
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":{\"block_budget\":\"8\"}}", p), PROTO_ERR_INVALID_TYPE);
    CHECK_STR(p, "block_budget");
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":{\"budget\":8}}", p), PROTO_ERR_INVALID_VALUE);
    CHECK_STR(p, "sparse_decode");
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":{\"stagger\":1}}", p), PROTO_ERR_INVALID_TYPE);
    CHECK_STR(p, "stagger");
    CHECK_EQ(parse(PROTO_EP_COMPLETIONS, "{\"prompt\":\"x\",\"sparse_decode\":3}", p), PROTO_ERR_INVALID_TYPE);
    CHECK_STR(p, "sparse_decode");
}

/* proto/openai_tools.c: tools and tool_choice parsed and refused as OpenAI documents them; the
 * calls of each family's format found in text (and plain text left alone); the family of each
 * chat template we ship. */
#include "proto/json_schema.h"
#include "proto/openai_tools.h"
#include "tests/test.h"

static proto_tools *tools_of(const char *body, enum proto_err *e, char *msg)
{
    json_t *o = json_loads(body, 0, NULL);
    proto_tools *t = NULL;
    char param[64];
    *e = PROTO_ERR_NONE;
    proto_tools_from_json(o, &t, e, msg, 256, param, sizeof param);
    json_decref(o);
    return t;
}

TEST(tools_request_fields)
{
    char msg[256];
    enum proto_err e;
    proto_tools *t = tools_of("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}},"
                              "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
                              "\"parallel_tool_calls\":false}", &e, msg);
    REQUIRE(t);
    CHECK_EQ(t->n, 2);
    CHECK_EQ(t->choice, PROTO_TOOL_CHOICE_NAMED);
    CHECK_EQ(t->named, 1);
    CHECK_EQ(t->parallel, 0);
    CHECK(t->params[0] && !t->params[1]);
    proto_tools_free(t);
    static const struct {
        const char *body, *want;
    } bad[] = {
        {"{\"tool_choice\":\"required\"}", "requires 'tools'"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"sometimes\"}", "sometimes"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"h\"}}}", "'h'"},
        {"{\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0]"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "two tools"},
        {"{\"tools\":[],\"parallel_tool_calls\":3}", "parallel_tool_calls"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = tools_of(bad[i].body, &e, msg);
        CHECK_MSG(!t && e != PROTO_ERR_NONE && strstr(msg, bad[i].want), "%s: '%s'", bad[i].body, msg);
        proto_tools_free(t);
    }
}

TEST(tools_parse_families)
{
    char msg[256];
    enum proto_err e;
    proto_tools *t = tools_of("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\"}},{\"type\":\"function\",\"function\":{\"name\":\"put\"}}]}", &e, msg);
    REQUIRE(t);
    static const struct {
        enum proto_tool_family f;
        const char *text;
        int calls;           /* -1: not calls */
        const char *first_args;
        size_t content;
    } cases[] = {
        {PROTO_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"a\": 1}}\n</tool_call>", 1, "{\"a\":1}", 0},
        {PROTO_TOOLS_HERMES, "Sure. <tool_call>{\"name\":\"get\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"put\",\"arguments\":\"{\\\"x\\\":[true]}\"}</tool_call>", 2, "{}", 6},
        {PROTO_TOOLS_HERMES, "<tool_call>{\"name\":\"other\",\"arguments\":{}}</tool_call>", -1, NULL, 0},
        {PROTO_TOOLS_HERMES, "no calls here", -1, NULL, 0},
        {PROTO_TOOLS_HERMES, "<tool_call>{\"name\":\"get\",", -1, NULL, 0},
        {PROTO_TOOLS_LLAMA3, "{\"name\": \"get\", \"parameters\": {\"q\": \"x\"}}", 1, "{\"q\":\"x\"}", 0},
        {PROTO_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"get\", \"parameters\": {}}; {\"name\": \"put\", \"parameters\": {\"n\": 2}}", 2, "{}", 0},
        {PROTO_TOOLS_LLAMA3, "{\"name\": \"get\", \"parameters\": {}} and more", -1, NULL, 0},
        {PROTO_TOOLS_MISTRAL, "[{\"name\": \"put\", \"arguments\": {\"k\": null}}]", 1, "{\"k\":null}", 0},
        {PROTO_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get\", \"arguments\": {}}, {\"name\": \"put\", \"arguments\": {}}]", 2, "{}", 0},
        {PROTO_TOOLS_MISTRAL, "[1, 2]", -1, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_tool_call *calls = NULL;
        int n = 0;
        size_t content = 0;
        int rc = proto_tools_parse(t, cases[i].f, cases[i].text, strlen(cases[i].text), &calls, &n, &content);
        if (cases[i].calls < 0) {
            CHECK_MSG(rc == 0 && n == 0, "case %zu: rc %d n %d", i, rc, n);
        } else {
            CHECK_MSG(rc == 1 && n == cases[i].calls, "case %zu: rc %d n %d", i, rc, n);
            if (rc == 1) CHECK_STR(calls[0].arguments, cases[i].first_args);
            CHECK_EQ(content, cases[i].content);
        }
        proto_tool_calls_free(calls, n);
    }
    proto_tools_free(t);
    /* streaming: may the text still become a call? */
    CHECK(proto_tools_may_start(PROTO_TOOLS_HERMES, " <tool_", 7));
    CHECK(!proto_tools_may_start(PROTO_TOOLS_HERMES, "Hello", 5));
    CHECK(proto_tools_may_start(PROTO_TOOLS_MISTRAL, "[TOOL", 5));
    CHECK(proto_tools_may_start(PROTO_TOOLS_LLAMA3, "<|python", 8));
    CHECK(!proto_tools_may_start(PROTO_TOOLS_LLAMA3, "The", 3));
}

TEST(tools_template_families)
{
    static const struct {
        const char *file;
        enum proto_tool_family f;
    } cases[] = {
        {"hermes-3-llama-3.1-tool-use", PROTO_TOOLS_HERMES}, {"qwen2.5-instruct", PROTO_TOOLS_HERMES},
        {"llama-3.1-instruct", PROTO_TOOLS_LLAMA3},          {"llama-3.2-instruct", PROTO_TOOLS_LLAMA3},
        {"mistral-7b-instruct-v0.3", PROTO_TOOLS_MISTRAL},   {"mistral-nemo-instruct-2407", PROTO_TOOLS_MISTRAL},
        {"llama-2-chat", PROTO_TOOLS_HERMES}, /* no format of its own: the default */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "tests/data/chat_templates/%s.jinja", cases[i].file);
        FILE *f = fopen(path, "rb");
        REQUIRE(f);
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        CHECK_MSG(proto_tool_family_of(buf) == cases[i].f, "%s: %s", cases[i].file, proto_tool_family_name(proto_tool_family_of(buf)));
    }
}

/* A name whose JSON form is long (a 64-byte name of control characters is 384 bytes as \u00XX
 * escapes) reaches the grammar whole: a 200-byte buffer cut it, and the call the grammar then
 * forced could never parse (an audit's reproducer: 40 x U+0001, tool_choice required). */
TEST(tools_grammar_long_escaped_name)
{
    char body[1024] = "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"";
    for (int i = 0; i < 64; i++) strcat(body, "\\u0001");
    strcat(body, "\"}}],\"tool_choice\":\"required\"}");
    char msg[256];
    enum proto_err e;
    proto_tools *t = tools_of(body, &e, msg);
    CHECK_MSG(t, "%s", msg);
    REQUIRE(t && strlen(t->names[0]) == 64);
    proto_buf g, head, lit;
    proto_buf_init(&g);
    proto_buf_init(&head);
    proto_buf_init(&lit);
    REQUIRE(proto_tools_grammar(t, PROTO_TOOLS_LLAMA3, &g, msg, sizeof msg) == 0);
    /* the head as the grammar must hold it: {"name": "\u0001...", "parameters": */
    REQUIRE(proto_buf_str(&head, "{\"name\": \"") == 0);
    for (int i = 0; i < 64; i++) REQUIRE(proto_buf_str(&head, "\\u0001") == 0);
    REQUIRE(proto_buf_str(&head, "\", \"parameters\": ") == 0);
    REQUIRE(proto_gbnf_literal(&lit, head.p, head.len) == 0);
    CHECK_MSG(strstr(g.p, lit.p) != NULL, "the call's head is not whole in\n%.600s", g.p);
    proto_buf_deinit(&g);
    proto_buf_deinit(&head);
    proto_buf_deinit(&lit);
    proto_tools_free(t);
}

/* function.strict picks the schema's mode as response_format's json_schema.strict does: strict
 * refuses a keyword the grammar cannot enforce (format "uri"), without it the keyword is an
 * annotation (what main took before strict modes); a strict that is not a boolean is refused. */
TEST(tools_function_strict)
{
    static const char *const fmt = "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                                   "\"f\",%s\"parameters\":{\"type\":"
                                   "\"object\",\"properties\":{\"u\":{\"type\":\"string\","
                                   "\"format\":\"uri\"}},\"required\":[\"u\"]}}}],"
                                   "\"tool_choice\":\"required\"}";
    static const char *const strict[] = {"", "\"strict\":false,", "\"strict\":null,",
                                         "\"strict\":true,"};
    for (int i = 0; i < 4; i++) {
        char body[512], msg[256];
        snprintf(body, sizeof body, fmt, strict[i]);
        enum proto_err e;
        proto_tools *t = tools_of(body, &e, msg);
        CHECK_MSG(t, "%s: %s", strict[i], msg);
        if (!t) continue;
        proto_buf g;
        proto_buf_init(&g);
        int rc = proto_tools_grammar(t, PROTO_TOOLS_HERMES, &g, msg, sizeof msg);
        if (i < 3) {
            CHECK_MSG(rc == 0, "%s: %s", strict[i], msg);
        } else {
            CHECK(rc != 0);
            CHECK_MSG(strstr(msg, "format") && strstr(msg, "'f'"), "%s", msg);
        }
        proto_buf_deinit(&g);
        proto_tools_free(t);
    }
    char msg[256];
    enum proto_err e;
    char body[512];
    snprintf(body, sizeof body, fmt, "\"strict\":\"yes\",");
    CHECK(!tools_of(body, &e, msg));
    CHECK_EQ(e, PROTO_ERR_INVALID_VALUE);
    CHECK_MSG(strstr(msg, "strict"), "%s", msg);
}

/* proto/json_schema.c's two modes and the keywords real clients emit (Pydantic, Zod, FastAPI's
 * OpenAPI 3.0): a keyword the grammar cannot enforce is refused by name under strict and is an
 * annotation without it (the grammar then accepts documents the keyword would refuse: the wider
 * language README's table states); nullable, disjoint oneOf and the formats are enforced. */
#include "proto/openai_req.h"
#include "tests/proto/jschema_util.h"
#include "tests/test.h"

TEST(json_schema_strict_and_lax)
{
    static const struct {
        const char *schema, *keyword, *wider; /* wider: a document only the lax grammar accepts */
    } cases[] = {
        {"{\"type\":\"integer\",\"multipleOf\":5}", "'multipleOf'", "7"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"uniqueItems\":true}",
         "'uniqueItems'", "[1,1]"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":0}]}", "'oneOf'",
         "3"},
        {"{\"type\":\"string\",\"format\":\"uri\"}", "'format' (uri)", "\"not a uri\""},
        {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":20}", "'format' (date)", "\"x\""},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"minProperties\":1}",
         "'minProperties'", "{}"},
        {"{\"not\":{\"type\":\"string\"}}", "'not'", "\"s\""},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"uniqueItems\":true}", "'uniqueItems'", "\"s\""},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        model_grammar *g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        /* beside anyOf/enum/allOf/$ref strict refuses it as not supported there */
        CHECK_MSG(!g && strstr(msg, cases[i].keyword) &&
                      (strstr(msg, "not enforceable") || strstr(msg, "beside")),
                  "strict %s: '%s'", cases[i].schema, msg);
        model_grammar_unref(g);
        g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_LAX, msg, sizeof msg);
        CHECK_MSG(g, "lax %s refused: %s", cases[i].schema, msg);
        if (g)
            CHECK_MSG(jschema_accepts(g, v, cases[i].wider), "lax %s: %s refused", cases[i].schema,
                      cases[i].wider);
        model_grammar_unref(g);
    }
    /* a keyword of no JSON Schema vocabulary is refused in both modes (Ajv's strict default) */
    char msg[512] = "";
    model_grammar *g = jschema_grammar("{\"type\":\"string\",\"maxLenght\":3}", PROTO_JSCHEMA_LAX,
                                       msg, sizeof msg);
    CHECK_MSG(!g && strstr(msg, "'maxLenght' is not supported"), "'%s'", msg);
    model_grammar_unref(g);
    model_gvocab_free(v);
}

TEST(json_schema_client_keywords)
{
    static const struct {
        const char *schema;
        const char *yes[5], *no[5];
    } cases[] = {
        /* Pydantic Field(ge=0, le=120) */
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}",
         {"0", "120", "37", NULL},
         {"-1", "121", "1000", NULL}},
        /* Zod .positive().max(10) on a number */
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":10}",
         {"10", "0.5", "9.999", NULL},
         {"0", "10.5", "-1", NULL}},
        /* OpenAPI 3.0 / draft 4: a boolean exclusiveMinimum */
        {"{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true}",
         {"4", NULL},
         {"3", NULL}},
        /* Pydantic v1 / FastAPI Optional[int] */
        {"{\"type\":\"integer\",\"minimum\":1,\"nullable\":true}",
         {"null", "1", NULL},
         {"0", "\"x\"", NULL}},
        {"{\"type\":\"integer\",\"nullable\":false}", {"1", NULL}, {"null", NULL}},
        {"{\"type\":\"string\",\"enum\":[\"a\"],\"nullable\":true}",
         {"\"a\"", NULL},
         {"null", NULL}},
        {"{\"$defs\":{\"P\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
         "\"required\":[\"x\"]}},"
         "\"properties\":{\"p\":{\"allOf\":[{\"$ref\":\"#/$defs/"
         "P\"}],\"nullable\":true}},\"required\":[\"p\"]}",
         {"{\"p\":null}", "{\"p\":{\"x\":1}}", NULL},
         {"{\"p\":{}}", NULL}},
        /* oneOf of disjoint kinds: Optional as oneOf, a string-or-number union */
        {"{\"oneOf\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":\"integer\"},{\"type\":"
         "\"null\"}]}",
         {"\"abc\"", "12", "null", NULL},
         {"\"abcd\"", "1.5", "true", NULL}},
        {"{\"oneOf\":[{\"enum\":[\"a\",\"b\"]},{\"const\":3}]}",
         {"\"a\"", "3", NULL},
         {"\"c\"", "4", NULL}},
        /* multipleOf 1: whole numbers */
        {"{\"type\":\"number\",\"multipleOf\":1,\"maximum\":5}",
         {"5", "-3", NULL},
         {"2.5", "6", NULL}},
        {"{\"type\":\"array\",\"uniqueItems\":false,\"maxItems\":2}",
         {"[1,1]", NULL},
         {"[1,1,1]", NULL}},
        {"{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}",
         {"[1]", "[]", NULL},
         {"[1,2]", NULL}},
        /* formats */
        {"{\"type\":\"string\",\"format\":\"date\"}",
         {"\"2024-02-28\"", "\"1999-12-31\"", "\"2023-04-30\"", NULL},
         {"\"2024-02-30\"", "\"2023-04-31\"", "\"2024-13-01\"", "\"2024-1-01\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"time\"}",
         {"\"23:59:59Z\"", "\"08:00:00.123+05:30\"", NULL},
         {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:00\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"date-time\"}",
         {"\"2024-06-01T12:00:00Z\"", NULL},
         {"\"2024-06-01 12:00\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}",
         {"\"123e4567-e89b-12d3-a456-426614174000\"", NULL},
         {"\"123e4567e89b12d3a456426614174000\"", "\"g23e4567-e89b-12d3-a456-426614174000\"",
          NULL}},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}",
         {"\"192.168.0.1\"", "\"255.255.255.255\"", "\"0.0.0.0\"", NULL},
         {"\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"email\"}",
         {"\"a.b+c@example.com\"", "\"x@mail.example.org\"", NULL},
         {"\"a@b\"", "\"@example.com\"", "\"a b@example.com\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"hostname\"}",
         {"\"example.com\"", "\"localhost\"", NULL},
         {"\"-x.com\"", "\"a..b\"", NULL}},
        /* format on a number is OpenAPI's int32/int64/float/double: an annotation there */
        {"{\"type\":\"integer\",\"format\":\"int64\"}", {"12", NULL}, {"\"12\"", NULL}},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        model_grammar *g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        CHECK_MSG(g, "%s: %s", cases[i].schema, msg);
        jschema_expect(g, v, cases[i].schema, cases[i].yes, cases[i].no, 5);
        model_grammar_unref(g);
    }
    model_gvocab_free(v);
}

/* Random documents of each format's grammar, for Ajv with ajv-formats (schema_ajv.sh). */
TEST(json_schema_format_samples)
{
    static const char *const formats[] = {"date", "time",  "date-time", "uuid",
                                          "ipv4", "email", "hostname"};
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    uint64_t rng = 77;
    const char *path = getenv("TANDEM_JSCHEMA_SAMPLES");
    FILE *f = path ? fopen(path, "a") : NULL;
    for (int i = 0; i < 7; i++) {
        char schema[96], msg[512] = "", doc[512];
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"format\":\"%s\"}", formats[i]);
        model_grammar *g = jschema_grammar(schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        CHECK_MSG(g, "%s: %s", schema, msg);
        for (int k = 0; g && k < 40; k++) {
            CHECK_MSG(jschema_sample(g, v, &rng, doc, sizeof doc) == 0 && doc[0] == '"',
                      "%s: stuck at %s", schema, doc);
            if (f) fprintf(f, "{\"schema\":%s,\"doc\":%s}\n", schema, doc);
        }
        model_grammar_unref(g);
    }
    if (f) fclose(f);
    model_gvocab_free(v);
}

/* Through the request parser: response_format's json_schema.strict picks the mode (the audit's
 * finding: "maximum" and the rest answered 400 whatever strict said). */
TEST(json_schema_request_strict_flag)
{
    static const struct {
        const char *schema, *strict; /* strict: the json_schema member's text, "" for none */
        int ok;
        const char *msg;
    } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}", "", 1, NULL},
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}", ",\"strict\":true", 1, NULL},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}", "", 1, NULL},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}",
         ",\"strict\":false", 1, NULL},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}",
         ",\"strict\":true", 0, "'uniqueItems' is not enforceable"},
        {"{\"oneOf\":[{\"type\":\"object\"},{\"type\":\"object\"}]}", "", 1, NULL},
        {"{\"oneOf\":[{\"type\":\"object\"},{\"type\":\"object\"}]}", ",\"strict\":true", 0,
         "'oneOf'"},
        {"{\"type\":\"string\",\"nullable\":true}", ",\"strict\":true", 1, NULL},
        {"{\"type\":\"string\",\"frobnicate\":1}", "", 0, "'frobnicate' is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024], msg[512] = "", param[64] = "";
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{"
                 "\"type\":\"json_schema\","
                 "\"json_schema\":{\"name\":\"a\"%s,\"schema\":%s}}}",
                 cases[i].strict, cases[i].schema);
        proto_limits lim;
        proto_limits_default(&lim);
        proto_req r;
        enum proto_err e = proto_req_parse(PROTO_EP_CHAT, body, strlen(body), &lim, NULL, NULL, &r,
                                           msg, sizeof msg, param, sizeof param);
        if (cases[i].ok) {
            CHECK_MSG(e == PROTO_ERR_NONE && r.grammar, "%s: %d %s", body, e, msg);
        } else {
            CHECK_MSG(e == PROTO_ERR_INVALID_VALUE && !strcmp(param, "response_format") &&
                          strstr(msg, cases[i].msg),
                      "%s: %d '%s' (%s)", body, e, msg, param);
        }
        if (e == PROTO_ERR_NONE) proto_req_deinit(&r);
    }
}

/* oneOf is enforced when no document can match two members: different kinds of value,
 * const/enum values that differ, objects with a required tag whose values differ (Pydantic's
 * tagged unions); otherwise strict refuses it and the lax grammar is anyOf's. */
TEST(json_schema_one_of)
{
#define CAT_DOG                                                                                    \
    "{\"$defs\":{\"Cat\":{\"type\":\"object\",\"properties\":{\"pet_type\":{\"const\":\"cat\","    \
    "\"type\":\"string\"},"                                                                        \
    "\"lives\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},\"required\":[\"pet_type\","    \
    "\"lives\"]},"                                                                                 \
    "\"Dog\":{\"type\":\"object\",\"properties\":{\"pet_type\":{\"const\":\"dog\",\"type\":"       \
    "\"string\"},"                                                                                 \
    "\"bark\":{\"type\":\"string\"}},\"required\":[\"pet_type\"]}},"                               \
    "\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},{\"$ref\":\"#/$defs/"                                   \
    "Dog\"}],\"discriminator\":{\"propertyName\":\"pet_type\"}}"
    static const struct {
        const char *schema;
        int strict_ok;
        const char *yes[3], *no[3]; /* under strict when strict_ok, else under lax */
    } cases[] = {
        {"{\"oneOf\":[{\"enum\":[\"a\",1]},{\"enum\":[\"b\",2.5]}]}",
         1,
         {"\"a\"", "2.5", NULL},
         {"\"c\"", "1.5", NULL}},
        {CAT_DOG,
         1,
         {"{\"pet_type\":\"cat\",\"lives\":9}", "{\"pet_type\":\"dog\"}", NULL},
         {"{\"pet_type\":\"cat\",\"lives\":10}", "{\"pet_type\":\"cat\"}",
          "{\"pet_type\":\"cow\"}"}},
        /* 1 and 1.0 are one value */
        {"{\"oneOf\":[{\"enum\":[\"a\",1]},{\"enum\":[\"b\",1.0]}]}",
         0,
         {"1", "\"b\"", NULL},
         {"2", NULL, NULL}},
        /* a tag value both allow */
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"}},\"required\":["
         "\"k\"]},"
         "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"b\",\"a\"]}},\"required\":[\"k\"]"
         "}]}",
         0,
         {"{\"k\":\"a\"}", "{\"k\":\"b\"}", NULL},
         {"{\"k\":\"c\"}", NULL, NULL}},
        /* a member that may be a string: "required" does not separate strings */
        {"{\"oneOf\":[{\"type\":[\"object\",\"string\"],\"properties\":{\"k\":{\"const\":\"a\"}},"
         "\"required\":[\"k\"]},"
         "{\"type\":\"string\"}]}",
         0,
         {"\"s\"", NULL, NULL},
         {"1", NULL, NULL}},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        model_grammar *g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_STRICT, msg, sizeof msg);
        CHECK_MSG(cases[i].strict_ok ? g != NULL
                                     : (!g && strstr(msg, "'oneOf' (members that may overlap)")),
                  "strict %s: '%s'", cases[i].schema, msg);
        if (!g) g = jschema_grammar(cases[i].schema, PROTO_JSCHEMA_LAX, msg, sizeof msg);
        CHECK_MSG(g, "lax %s: %s", cases[i].schema, msg);
        jschema_expect(g, v, cases[i].schema, cases[i].yes, cases[i].no, 3);
        model_grammar_unref(g);
    }
    model_gvocab_free(v);
#undef CAT_DOG
}

/* The functions without a mode (tool parameters use them) are the lax mode: a schema main took
 * (format "uri" was ignored then) is still taken, and bounds are enforced. */
TEST(json_schema_default_mode_is_lax)
{
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\",\"format\":\"uri\"},"
        "\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10}},\"required\":[\"url\",\"n\"]}";
    proto_buf out;
    proto_buf_init(&out);
    char msg[512] = "";
    CHECK_MSG(proto_jschema_common(&out) == 0 &&
                  proto_jschema_rules(schema, strlen(schema), "root", "t", &out, msg, sizeof msg) ==
                      0,
              "%s", msg);
    model_grammar *g = model_grammar_new(out.p, out.len, NULL, msg, sizeof msg);
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(g && v);
    CHECK(jschema_accepts(g, v, "{\"url\":\"x\",\"n\":10}"));
    CHECK(!jschema_accepts(g, v, "{\"url\":\"x\",\"n\":11}"));
    model_grammar_unref(g);
    model_gvocab_free(v);
    proto_buf_deinit(&out);
}

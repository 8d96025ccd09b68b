/* proto/json_schema.c: schemas become grammars that model/grammar compiles and that accept
 * exactly the documents they should (checked on hand-picked valid and invalid documents: the
 * schema's own meaning, as the JSON Schema specification states it); unsupported keywords are
 * refused by name; bounds hold. */
#include "tests/proto/jschema_util.h"
#include "tests/test.h"

static model_grammar *from_schema(const char *schema, char *msg, size_t n)
{
    return jschema_grammar(schema, PROTO_JSCHEMA_STRICT, msg, n);
}

TEST(json_schema_documents)
{
    static const struct {
        const char *schema;
        const char *yes[4], *no[4];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"a\"]}",
         {"{\"a\":1}", "{ \"a\": -20, \"b\": \"x\" }", "{\"a\":0,\"b\":\"\\u00e9\\n\"}", NULL},
         {"{}", "{\"b\":\"x\"}", "{\"a\":1.5}", "{\"b\":\"x\",\"a\":1}"}},
        {"{\"enum\":[\"x\",1,null,{\"k\":[true]}]}",
         {"\"x\"", "1", "null", "{\"k\":[true]}"},
         {"\"y\"", "2", "true", NULL}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":3}",
         {"[true,false]", "[ true, true, false ]", NULL, NULL},
         {"[]", "[true]", "[true,true,true,true]", "[1,2]"}},
        {"{\"type\":\"string\",\"pattern\":\"^(ab|c\\\\.d)+[0-9]?$\"}",
         {"\"ab\"", "\"c.dab7\"", NULL, NULL},
         {"\"\"", "\"abx\"", "\"cxd\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"b[^a\\\"]\"}",
         {"\"xxbz\"", "\"bc\"", NULL, NULL},
         {"\"ba\"", "\"b\\\"\"", NULL, NULL}},
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#"
         "/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"next\"]}},\"$ref\":\"#/$defs/n\"}",
         {"{\"next\":null}", "{\"next\":{\"next\":{\"next\":null}}}", NULL, NULL},
         {"{}", "{\"next\":{}}", NULL, NULL}},
        {"{\"type\":[\"integer\",\"null\"],\"minimum\":0}",
         {"0", "42", "null", NULL},
         {"-1", "1.5", "\"1\"", NULL}},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
         {"\"ab\"", "\"a\\\"c\"", "\"\xC3\xA9\xC3\xA9\"", NULL},
         {"\"a\"", "\"abcd\"", NULL, NULL}},
        {"{\"const\":\"q\\\"\\\\\"}",
         {"\"q\\\"\\\\\"", NULL, NULL, NULL},
         {"\"q\"", NULL, NULL, NULL}},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
         {"{}", "{\"x\":1,\"y\":2}", NULL, NULL},
         {"{\"x\":\"a\"}", NULL, NULL, NULL}},
        {"{}", {"1", "{\"a\":[null]}", "\"s\"", NULL}, {"nul", NULL, NULL, NULL}},
        /* the cases below were checked against Ajv (npm ajv 8, the validator serve_structured.sh
         * runs): each yes it accepts, each no it refuses */
        {"{\"properties\":{\"a\":{}},\"required\":[\"a\",\"b\"]}",
         {"{\"a\":1,\"b\":2}", NULL, NULL, NULL},
         {"{\"a\":1}", NULL, NULL, NULL}},
        /* a bound without a type constrains numbers (the grammar keeps to them) */
        {"{\"minimum\":0}", {"0", "5", "1.5", NULL}, {"-1", "-0.5", NULL, NULL}},
        /* ECMA-262: '[^]' is any character, '.' any but a line terminator, \s its white space */
        {"{\"type\":\"string\",\"pattern\":\"^[^]$\"}",
         {"\"x\"", "\"\xE2\x80\xA8\"", NULL, NULL},
         {"\"ab\"", "\"\"", NULL, NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^.$\"}",
         {"\"x\"", "\"\xC3\xA9\"", NULL, NULL},
         {"\"\xE2\x80\xA8\"", "\"\xE2\x80\xA9\"", NULL, NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\S$\"}",
         {"\"x\"", NULL, NULL, NULL},
         {"\"\xC2\xA0\"", "\"\xE3\x80\x80\"", "\"\xEF\xBB\xBF\"", "\" \""}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\s$\"}",
         {"\" \"", "\"\xC2\xA0\"", "\"\xE2\x80\xA8\"", NULL},
         {"\"x\"", NULL, NULL, NULL}},
        /* 'type' beside 'enum': the values of other types are not offered */
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}",
         {"\"a\"", NULL, NULL, NULL},
         {"1", NULL, NULL, NULL}},
        {"{\"type\":\"integer\",\"enum\":[1.0,\"x\",2.5]}",
         {"1.0", NULL, NULL, NULL},
         {"\"x\"", "2.5", NULL, NULL}},
    };
    model_gvocab *v = gram_bytes_vocab();
    REQUIRE(v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512] = "";
        model_grammar *g = from_schema(cases[i].schema, msg, sizeof msg);
        CHECK_MSG(g, "%s: %s", cases[i].schema, msg);
        jschema_expect(g, v, cases[i].schema, cases[i].yes, cases[i].no, 4);
        model_grammar_unref(g);
    }
    model_gvocab_free(v);
}

TEST(json_schema_refusals)
{
    static const struct {
        const char *schema, *want;
    } cases[] = {
        {"{\"type\":\"integer\",\"multipleOf\":2}", "'multipleOf' is not enforceable"},
        {"{\"type\":\"integer\",\"frobnicate\":2}", "'frobnicate' is not supported"},
        {"{\"properties\":{\"a\":{\"not\":{}}}}",
         "'not' is not enforceable by the output grammar: refused under strict true"},
        {"{\"$ref\":\"#/nowhere\"}", "does not resolve"},
        {"{\"$ref\":\"http://x/y.json\"}", "another document"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookarounds"},
        {"{\"type\":\"string\",\"pattern\":\"a\\\\1\"}", "\\1"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "only at the pattern's ends"},
        {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMaximum\":5}", "no integer lies within"},
        {"{\"type\":\"integer\",\"minimum\":1e30}", "'minimum' beyond the 64-bit integer range"},
        {"{\"type\":\"array\",\"minItems\":5000}", "'minItems' above"},
        {"{\"type\":\"wat\"}", "unknown type"},
        {"{\"anyOf\":[]}", "non-empty"},
        {"not json", "not JSON"},
        {"false", "matches nothing"},
        {"{\"required\":[\"a\",\"b\",\"a\"]}", "'required' lists 'a' twice"},
        /* a base schema plus members of its own: the grammar of the base alone accepted
         * {"id":1} (no "name") and could never produce a valid document */
        {"{\"$defs\":{\"B\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
         "\"required\":[\"id\"]}},"
         "\"allOf\":[{\"$ref\":\"#/$defs/"
         "B\"}],\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}",
         "'properties' beside 'allOf' is not supported"},
        {"{\"allOf\":[{\"type\":\"string\"}],\"maxLength\":2}", "'maxLength' beside 'allOf'"},
        /* a range between two 15-digit fractions: nothing left once kept to 15 digits */
        {"{\"type\":\"number\",\"minimum\":0.1234567890123451,\"maximum\":0.1234567890123452}",
         "too narrow to be written"},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.4}", "matches nothing"},
        {"{\"type\":\"string\",\"pattern\":\"a[]\"}", "'[]' matches nothing"},
        {"{\"enum\":[\"abc\"],\"minLength\":3}", "'minLength' beside 'enum' is not supported"},
        {"{\"type\":\"integer\",\"enum\":[\"x\",1.5]}", "no value of 'enum' is of its 'type'"},
        {"{\"type\":\"string\",\"const\":1}", "no value of 'const'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_buf out;
        proto_buf_init(&out);
        char msg[512] = "";
        int rc = proto_jschema_grammar_mode(cases[i].schema, strlen(cases[i].schema),
                                            PROTO_JSCHEMA_STRICT, &out, msg, sizeof msg);
        CHECK_MSG(rc == -1 && strstr(msg, cases[i].want), "%s: rc %d, '%s', want '%s'", cases[i].schema, rc, msg, cases[i].want);
        proto_buf_deinit(&out);
    }
    /* depth bound: 200 nested arrays */
    char deep[2400] = "";
    for (int i = 0; i < 200; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 200; i++) strcat(deep, "}");
    proto_buf out;
    proto_buf_init(&out);
    char msg[512] = "";
    CHECK(proto_jschema_grammar(deep, strlen(deep), &out, msg, sizeof msg) == -1 && strstr(msg, "deeper"));
    proto_buf_deinit(&out);
}

/* tests/fuzz/harness/fuzz_tool_calls.c — libFuzzer harness for the tool-call parser
 * (proto_tools_parse) over model output in each family's format, and for the tool grammar
 * builder over the request's "tools" JSON. Input: model text, optionally a NUL and a request
 * body ({"tools": [...], "tool_choice": ...}). Promises checked: calls name one of the tools and
 * carry an object's JSON as arguments; content_len never passes the text. */
#include "proto/openai_tools.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char default_req[] = "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get\","
                                  "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}},"
                                  "{\"type\":\"function\",\"function\":{\"name\":\"put\"}}],\"tool_choice\":\"required\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *text, *req;
    size_t text_n, req_n;
    fuzz_split(data, size, &text, &text_n, &req, &req_n);
    json_t *o = req ? json_loadb((const char *)req, req_n, 0, NULL) : json_loads(default_req, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return 0;
    }
    proto_tools *t = NULL;
    enum proto_err e = PROTO_ERR_NONE;
    char msg[256], param[64];
    if (proto_tools_from_json(o, &t, &e, msg, sizeof msg, param, sizeof param) == 0 && t) {
        char *s = malloc(text_n ? text_n : 1);
        memcpy(s, text, text_n);
        for (int f = PROTO_TOOLS_HERMES; f <= PROTO_TOOLS_MISTRAL; f++) {
            proto_tool_call *calls = NULL;
            int n = 0;
            size_t content = 0;
            int rc = proto_tools_parse(t, (enum proto_tool_family)f, s, text_n, &calls, &n, &content);
            CHECK(rc != 1 || (n > 0 && n <= PROTO_MAX_TOOL_CALLS && content <= text_n));
            for (int i = 0; i < n; i++) {
                int known = 0;
                for (int k = 0; k < t->n; k++) known |= !strcmp(t->names[k], calls[i].name);
                CHECK(known && calls[i].arguments[0] == '{');
            }
            /* streaming (HERMES, auto): what goes out as content as the text grows is never
             * past the first marker, so it is a prefix of the parse's content; it only grows */
            if (f == PROTO_TOOLS_HERMES) {
                const char *m = memmem(s, text_n, "<tool_call>", 11);
                size_t end = m ? (size_t)(m - s) : text_n, sent = 0;
                CHECK(rc != 1 || content == end);
                for (size_t k = 0; k <= text_n; k += 1 + k / 8) {
                    size_t c = proto_tools_content_len(s, k, sent);
                    CHECK(c >= sent && c <= k && c <= end);
                    sent = c;
                }
            }
            proto_tool_calls_free(calls, n);
            (void)proto_tools_may_start((enum proto_tool_family)f, s, text_n);
            if (proto_tools_constrained(t)) {
                proto_buf g;
                proto_buf_init(&g);
                char m[256];
                (void)proto_tools_grammar(t, (enum proto_tool_family)f, &g, m, sizeof m);
                proto_buf_deinit(&g);
            }
        }
        free(s);
    }
    proto_tools_free(t);
    json_decref(o);
    return 0;
}

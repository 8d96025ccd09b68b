/* tests/fuzz/harness/fuzz_extra_req.c — libFuzzer harness for the utility endpoints' bodies
 * (proto/openai_extra.c): /tokenize and /detokenize. Promises checked: a refusal says why; a
 * /detokenize acceptance holds only ids in [0, vocab); the JSON writers return valid JSON. */
#include "proto/openai_extra.h"
#include "tests/fuzz/harness/harness_util.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size ? size : 1);
    memcpy(s, data, size);
    char msg[256] = "", param[32] = "";
    proto_tokenize_req q;
    if (proto_tokenize_parse(s, size, &q, msg, sizeof msg, param, sizeof param) == PROTO_ERR_NONE) {
        /* the content's bytes as pieces: the writer must cope with any bytes */
        int32_t ids[4] = {1, 2, 3, 4};
        const char *pieces[4] = {q.content, q.content, "", q.content};
        size_t lens[4] = {q.len, q.len / 2, 0, q.len ? q.len - 1 : 0};
        char *j = proto_tokenize_json(ids, 4, pieces, lens);
        json_t *o = j ? json_loads(j, 0, NULL) : NULL;
        CHECK(!j || o);
        json_decref(o);
        free(j);
        j = proto_text_json("content", q.content, q.len);
        CHECK(j);
        free(j);
        proto_tokenize_req_deinit(&q);
    } else {
        CHECK(msg[0]);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    msg[0] = 0;
    if (proto_detokenize_parse(s, size, 1000, &ids, &n, msg, sizeof msg, param, sizeof param) == PROTO_ERR_NONE) {
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < 1000);
    } else {
        CHECK(msg[0]);
    }
    free(ids);
    free(s);
    return 0;
}

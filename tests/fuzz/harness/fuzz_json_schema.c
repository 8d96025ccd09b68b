/* tests/fuzz/harness/fuzz_json_schema.c — libFuzzer harness for the JSON Schema converter
 * (proto/json_schema*.c): any bytes as a schema, in the strict and the lax mode. A schema the
 * converter accepts must give a grammar that model/grammar compiles (the converter's promise: it
 * writes only valid GBNF within the engine's bounds); one it refuses must say why. */
#include "model/grammar/grammar.h"
#include "proto/json_schema.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size ? size : 1);
    memcpy(s, data, size);
    /* both modes: strict refuses what the grammar cannot enforce, lax leaves it out */
    for (int mode = 0; mode < 2; mode++) {
        proto_buf out;
        proto_buf_init(&out);
        char msg[512];
        msg[0] = 0;
        int rc = proto_jschema_grammar_mode(
            s, size, mode ? PROTO_JSCHEMA_LAX : PROTO_JSCHEMA_STRICT, &out, msg, sizeof msg);
        if (rc) {
            if (getenv("FUZZ_DEBUG")) fprintf(stderr, "refused: %s\n", msg);
            CHECK(msg[0] != 0 && memchr(msg, 0, sizeof msg));
        } else {
            char err[256] = "";
            model_grammar *g = model_grammar_new(out.p, out.len, NULL, err, sizeof err);
            if (!g) fprintf(stderr, "grammar refused: %s\n%.*s\n", err, (int)out.len, out.p);
            /* left recursion / cannot finish can come from a schema ("$ref" to itself alone) */
            CHECK(g || strstr(err, "left recursion") || strstr(err, "never finish") ||
                  strstr(err, "elements"));
            model_grammar_unref(g);
        }
        proto_buf_deinit(&out);
    }
    free(s);
    return 0;
}

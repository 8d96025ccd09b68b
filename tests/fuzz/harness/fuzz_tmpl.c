/* tests/fuzz/harness/fuzz_tmpl.c — libFuzzer harness for chat templates: the Jinja2 lexer and
 * parser (model_tmpl_compile) and the interpreter (model_tmpl_render_conversation).
 *
 * Input: the template source, then optionally a NUL and the conversation (what `tandem template
 * --input` takes: {"messages": [...], "tools": ..., "add_generation_prompt": ..., "bos_token":
 * ..., "eos_token": ..., "extra": {...}}). Without one, a small fixed conversation is rendered.
 * Limits are tighter than the daemon's defaults so that a slow input is a limit error within
 * milliseconds, not a libFuzzer timeout; a limit reached is a clean error, never a crash. */
#include "model/tmpl/tmpl.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what proto/openai_req.c hands the templates: string contents, roles alternating */
static const char default_conv[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi <b>there</b> \\u00e9 \\ud83d\\ude80\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello!\"},"
    " {\"role\": \"user\", \"content\": \"and?\"}],"
    " \"tools\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\","
    " \"eos_token\": \"</s>\", \"extra\": {\"date_string\": \"26 Nov 2026\"}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *src, *conv;
    size_t src_n, conv_n;
    fuzz_split(data, size, &src, &src_n, &conv, &conv_n);
    /* exact-size copies, so that a read one past the end is caught */
    char *s = malloc(src_n ? src_n : 1);
    memcpy(s, src, src_n);
    char err[512];
    err[0] = 0;
    model_tmpl *t = model_tmpl_compile(s, src_n, err, sizeof err);
    if (!t && getenv("FUZZ_DEBUG")) fprintf(stderr, "compile: %s\n", err);
    if (!t) {
        CHECK(err[0] != 0 && memchr(err, 0, sizeof err));
        free(s);
        return 0;
    }
    char *c = NULL;
    size_t c_n = sizeof default_conv - 1;
    if (conv) {
        c_n = conv_n;
        c = malloc(c_n ? c_n : 1);
        memcpy(c, conv, c_n);
    }
    model_tmpl_opts o;
    model_tmpl_default_opts(&o);
    o.limits.max_output = 1 << 20;
    o.limits.max_memory = 32 << 20;
    o.limits.max_steps = 200000;
    o.now = 1795651200; /* 2026-11-26: strftime_now() output does not depend on the day */
    char *out = NULL;
    size_t out_n = 0;
    err[0] = 0;
    int rc = model_tmpl_render_conversation(t, c ? c : default_conv, c_n, &o, &out, &out_n, err,
                                            sizeof err);
    if (getenv("FUZZ_DEBUG")) fprintf(stderr, "render %d: %s\n", rc, rc ? err : out);
    if (rc == MODEL_TMPL_OK) {
        CHECK(out && out[out_n] == 0 && out_n <= o.limits.max_output);
        free(out);
    } else {
        CHECK(rc == MODEL_TMPL_ERR_RAISED || rc == MODEL_TMPL_ERR_RUNTIME ||
              rc == MODEL_TMPL_ERR_LIMIT || rc == MODEL_TMPL_ERR_CONTEXT);
        CHECK(memchr(err, 0, sizeof err));
    }
    free(c);
    model_tmpl_free(t);
    free(s);
    return 0;
}

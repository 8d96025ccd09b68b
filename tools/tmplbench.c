/* tools/tmplbench.c — chat-template render time: microseconds per rendered conversation.
 *
 *   build/tmplbench [--seconds S] [NAME:CASE ...]
 *
 * For each template (tests/data/chat_templates/NAME.jinja) and case (from NAME.json), compiles
 * once, renders repeatedly for about S seconds (default 0.5) on one thread and prints the mean
 * time per render, plus the same template on a synthetic long conversation (100 turns of ~500
 * characters). Without arguments: llama-3.1-instruct with tools, qwen2.5-instruct with tools,
 * mistral-7b-instruct-v0.3 with tools. Timings only: correctness is the tests' job. */
#include "model/tmpl/tmpl.h"
#include "model/ckpt/model.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TMPL_FILE (16u << 20) /* templates, expected outputs: far below */

#define DIR_ "tests/data/chat_templates"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Renders input through t for about `seconds`; prints one line. Returns 0 when it rendered. */
static int bench(const char *label, const model_tmpl *t, const char *input, double seconds)
{
    char err[1024];
    char *out;
    size_t out_len;
    model_tmpl_opts o;
    model_tmpl_stats st;
    model_tmpl_default_opts(&o);
    o.stats = &st;
    if (model_tmpl_render_conversation(t, input, strlen(input), &o, &out, &out_len, err, sizeof err)) {
        printf("%-44s error: %s\n", label, err);
        return -1;
    }
    free(out);
    long iters = 0;
    double t0 = now_s(), t1;
    do {
        for (int k = 0; k < 16; k++) {
            model_tmpl_render_conversation(t, input, strlen(input), NULL, &out, &out_len, err, sizeof err);
            free(out);
        }
        iters += 16;
        t1 = now_s();
    } while (t1 - t0 < seconds);
    double us = (t1 - t0) / (double)iters * 1e6;
    printf("%-44s %9.1f us/render  %8zu bytes out  %7llu steps  %6.1f KiB peak  (%ld renders)\n", label, us, out_len,
           (unsigned long long)st.steps, st.peak_memory / 1024.0, iters);
    return 0;
}

/* A long conversation: 100 alternating turns of ~500 characters. */
static char *long_conversation(const json_t *doc, const json_t *c)
{
    json_t *msgs = json_array();
    char text[600];
    for (int i = 0; i < 100; i++) {
        int n = snprintf(text, sizeof text, "Turn %d: ", i);
        while (n < 500) n += snprintf(text + n, sizeof text - (size_t)n, "lorem ipsum dolor sit amet, ");
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", i % 2 ? "assistant" : "user", "content", text));
    }
    json_t *in = json_pack("{s:o,s:O,s:b,s:O,s:O,s:O}", "messages", msgs, "tools", json_null(), "add_generation_prompt", 1,
                           "bos_token", json_object_get(doc, "bos_token"), "eos_token", json_object_get(doc, "eos_token"),
                           "extra", json_object_get(c, "extra") ? json_object_get(c, "extra") : json_null());
    char *s = json_dumps(in, JSON_COMPACT);
    json_decref(in);
    return s;
}

static int run(const char *spec, double seconds)
{
    char name[200], cname[32] = "tools";
    const char *colon = strchr(spec, ':');
    snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - spec) : (int)strlen(spec), spec);
    if (colon) snprintf(cname, sizeof cname, "%s", colon + 1);
    char path[512];
    snprintf(path, sizeof path, DIR_ "/%s.json", name);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    snprintf(path, sizeof path, DIR_ "/%s", json_string_value(json_object_get(doc, "template_file")));
    size_t len;
    char *src = model_read_file(path, MAX_TMPL_FILE, &len);
    if (!src) {
        fprintf(stderr, "cannot read %s\n", path);
        json_decref(doc);
        return 1;
    }
    char err[1024];
    double c0 = now_s();
    model_tmpl *t = NULL;
    int compiles = 0;
    do { /* compile time too */
        model_tmpl_free(t);
        t = model_tmpl_compile(src, len, err, sizeof err);
        compiles++;
    } while (t && now_s() - c0 < seconds / 5);
    double compile_us = (now_s() - c0) / compiles * 1e6;
    free(src);
    if (!t) {
        fprintf(stderr, "%s: %s\n", path, err);
        json_decref(doc);
        return 1;
    }
    printf("%s: compile %.1f us\n", name, compile_us);
    size_t i;
    json_t *c, *found = NULL;
    json_array_foreach(json_object_get(doc, "cases"), i, c) if (!strcmp(json_string_value(json_object_get(c, "name")), cname)) found = c;
    int rc = 0;
    if (!found) {
        fprintf(stderr, "%s: no case %s\n", name, cname);
        rc = 1;
    } else {
        json_t *in = json_pack("{s:O,s:O,s:O,s:O,s:O,s:O}", "messages", json_object_get(found, "messages"), "tools",
                               json_object_get(found, "tools") ? json_object_get(found, "tools") : json_null(),
                               "add_generation_prompt", json_object_get(found, "add_generation_prompt"), "bos_token",
                               json_object_get(doc, "bos_token"), "eos_token", json_object_get(doc, "eos_token"), "extra",
                               json_object_get(found, "extra") ? json_object_get(found, "extra") : json_null());
        char *text = json_dumps(in, JSON_COMPACT);
        char label[256];
        snprintf(label, sizeof label, "  %s (%s)", name, cname);
        rc |= bench(label, t, text, seconds) != 0;
        free(text);
        json_decref(in);
        text = long_conversation(doc, found);
        snprintf(label, sizeof label, "  %s (100 turns x 500 chars)", name);
        rc |= bench(label, t, text, seconds) != 0;
        free(text);
    }
    model_tmpl_free(t);
    json_decref(doc);
    return rc;
}

int main(int argc, char **argv)
{
    double seconds = 0.5;
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--seconds")) {
        seconds = atof(argv[2]);
        first = 3;
    }
    static const char *const defaults[] = {"llama-3.1-instruct:tool_roundtrip", "qwen2.5-instruct:tool_roundtrip",
                                           "mistral-7b-instruct-v0.3:tools", NULL};
    int rc = 0;
    if (first < argc)
        for (int i = first; i < argc; i++) rc |= run(argv[i], seconds);
    else
        for (const char *const *d = defaults; *d; d++) rc |= run(*d, seconds);
    return rc;
}

/* daemon/cmd_template.c — `tandem template --template FILE --input FILE`: renders a conversation
 * through a chat template, as transformers' apply_chat_template(..., tokenize=False) would.
 *
 * The input is {"messages":[...], "tools":[...]|null, "add_generation_prompt":bool,
 * "bos_token":..., "eos_token":..., "extra":{...}} (model_tmpl_render_conversation says how it
 * maps to template variables). The rendering goes to stdout byte for byte, with no newline
 * added; an error (including the template's own raise_exception) goes to stderr and the exit
 * status is 1 (2 for usage errors). */
#include "model/tmpl/tmpl.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Real chat templates are under 100 KB; conversations are bounded by the memory limit anyway. */
#define MAX_TEMPLATE_BYTES ((size_t)4 << 20)
#define MAX_INPUT_BYTES ((size_t)256 << 20)

static char *read_all(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tandem template: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap >= max) {
                fprintf(stderr, "tandem template: %s: larger than %zu bytes\n", path, max);
                free(buf);
                buf = NULL;
                break;
            }
            cap = cap * 2 > max ? max : cap * 2;
            char *p = realloc(buf, cap + 1);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) {
                fprintf(stderr, "tandem template: %s: read error\n", path);
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem template --template FILE --input FILE\n"
               "  renders the conversation in FILE ({\"messages\":[...],\"tools\":...,\n"
               "  \"add_generation_prompt\":...,\"bos_token\":...,\"eos_token\":...,\"extra\":{...}})\n"
               "  through the Jinja2 chat template to stdout\n");
    return f == stdout ? 0 : 2;
}

int dmn_cmd_template(int argc, char **argv)
{
    const char *tpath = NULL, *ipath = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--template") && i + 1 < argc) tpath = argv[++i];
        else if (!strcmp(argv[i], "--input") && i + 1 < argc) ipath = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout);
        else return usage(stderr);
    }
    if (!tpath || !ipath) return usage(stderr);
    size_t tlen, ilen;
    char *src = read_all(tpath, MAX_TEMPLATE_BYTES, &tlen);
    if (!src) return 1;
    char *input = read_all(ipath, MAX_INPUT_BYTES, &ilen);
    if (!input) {
        free(src);
        return 1;
    }
    char err[1024];
    model_tmpl *t = model_tmpl_compile(src, tlen, err, sizeof err);
    free(src);
    if (!t) {
        fprintf(stderr, "%s: %s\n", tpath, err);
        free(input);
        return 1;
    }
    char *out;
    size_t out_len;
    int rc = model_tmpl_render_conversation(t, input, ilen, NULL, &out, &out_len, err, sizeof err);
    free(input);
    model_tmpl_free(t);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int ok = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0;
    free(out);
    if (!ok) {
        fprintf(stderr, "tandem template: write error: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

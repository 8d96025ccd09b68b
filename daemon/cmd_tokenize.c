/* daemon/cmd_tokenize.c — `tandem tokenize`: text -> {"ids":[...]} with a model's tokenizer.json.
 * The text is the argument, or the exact bytes of --text-file (NULs and invalid UTF-8 included;
 * invalid sequences are tokenized as U+FFFD). Exit 0, or 1 with one line on stderr. */
#include "model/tok/tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZE_MAX_TEXT ((size_t)1 << 30) /* model_tok_encode's input limit */

static int usage(FILE *f)
{
    fprintf(f,
            "usage: tandem tokenize (--model DIR | --tokenizer FILE) [--no-special] [--verbose]\n"
            "                       (TEXT | --text-file FILE)\n"
            "Prints {\"ids\":[...]}. Without --no-special the special tokens are added as the\n"
            "tokenizer.json post-processor says; with --model, tokenizer_config.json's\n"
            "add_bos_token/add_eos_token win when present (as in transformers). --verbose says on\n"
            "stderr which rule applied.\n");
    return f == stdout ? 0 : 2;
}

/* Reads a whole file (at most `limit` bytes). */
static char *read_file(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap > limit) break;
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f) || !buf || n > limit;
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: unreadable or larger than %zu bytes", path, limit);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int dmn_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *tokfile = NULL, *text = NULL, *text_file = NULL;
    int special = 1, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        if (!strcmp(a, "--no-special")) {
            special = 0;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            verbose = 1;
        } else if ((!strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "--text-file")) &&
                   i + 1 < argc) {
            const char **dst = a[2] == 'm' ? &model : a[2] == 't' && a[3] == 'o' ? &tokfile : &text_file;
            *dst = argv[++i];
        } else if (!strcmp(a, "--")) {
            if (i + 1 < argc && !text) text = argv[++i];
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "tandem tokenize: unknown or incomplete option '%s'\n", a);
            return usage(stderr);
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "tandem tokenize: more than one TEXT (quote it)\n");
            return 2;
        }
    }
    if (!!model + !!tokfile != 1 || !!text + !!text_file != 1) {
        fprintf(stderr, "tandem tokenize: give one of --model/--tokenizer and one of TEXT/--text-file\n");
        return usage(stderr);
    }
    char err[512];
    model_tok *t = model ? model_tok_load_dir(model, err, sizeof err)
                         : model_tok_load(tokfile, NULL, err, sizeof err);
    if (!t) {
        fprintf(stderr, "tandem tokenize: %s\n", err);
        return 1;
    }
    size_t len = text ? strlen(text) : 0;
    char *buf = NULL;
    if (text_file && !(buf = read_file(text_file, TOKENIZE_MAX_TEXT, &len, err, sizeof err))) {
        fprintf(stderr, "tandem tokenize: %s\n", err);
        model_tok_free(t);
        return 1;
    }
    if (verbose) fprintf(stderr, "tandem tokenize: %s\n", special ? model_tok_special_note(t) : "no special tokens (--no-special)");
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = model_tok_encode(t, text ? text : buf, len, special, &ids, &n);
    free(buf);
    model_tok_free(t);
    if (rc) {
        fprintf(stderr, "tandem tokenize: encoding failed (out of memory?)\n");
        return 1;
    }
    fputs("{\"ids\":[", stdout);
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    fputs("]}\n", stdout);
    free(ids);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "tandem tokenize: write error: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

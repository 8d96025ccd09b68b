/* daemon/cmd_detokenize.c — `tandem detokenize`: ids -> text with a model's tokenizer.json.
 * --ids takes "1,2,3", "1 2 3" or "[1, 2, 3]". Exit 0, or 1/2 with one line on stderr. */
#include "model/tok/tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DETOKENIZE_MAX_IDS ((size_t)1 << 24) /* far past any context length */

static int usage(FILE *f)
{
    fprintf(f, "usage: tandem detokenize (--model DIR | --tokenizer FILE) [--skip-special] [--raw]\n"
               "                         --ids LIST\n"
               "LIST: ids separated by commas or spaces, optionally in [ ]. Prints the decoded text\n"
               "and a newline (--raw: the exact text only). --skip-special drops special tokens.\n");
    return f == stdout ? 0 : 2;
}

/* Parses LIST into ids (each in [0, vocab)); returns the count or -1 with err. */
static long parse_ids(const char *s, int vocab, int32_t **out, char *err, size_t errlen)
{
    size_t cap = 64, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) goto oom;
    const char *p = s;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    int bracket = *p == '[';
    if (bracket) p++;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ',') p++;
        if (!*p || (bracket && *p == ']')) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',' && *end != ' ' && *end != '\t' &&
                                  *end != '\n' && *end != ']')) {
            snprintf(err, errlen, "--ids: '%.20s' is not an integer", p);
            free(ids);
            return -1;
        }
        if (v < 0 || v >= vocab) {
            snprintf(err, errlen, "--ids: id %ld is outside the vocabulary [0, %d)", v, vocab);
            free(ids);
            return -1;
        }
        if (n == DETOKENIZE_MAX_IDS) {
            snprintf(err, errlen, "--ids: more than %zu ids", DETOKENIZE_MAX_IDS);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, cap * 2 * sizeof *ids);
            if (!ni) goto oom;
            ids = ni;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (bracket && *p != ']') {
        snprintf(err, errlen, "--ids: missing ']'");
        free(ids);
        return -1;
    }
    *out = ids;
    return (long)n;
oom:
    free(ids);
    snprintf(err, errlen, "out of memory");
    return -1;
}

int dmn_cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *tokfile = NULL, *list = NULL;
    int skip = 0, raw = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
        if (!strcmp(a, "--skip-special")) {
            skip = 1;
        } else if (!strcmp(a, "--raw")) {
            raw = 1;
        } else if (!strcmp(a, "--model") && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--tokenizer") && i + 1 < argc) {
            tokfile = argv[++i];
        } else if (!strcmp(a, "--ids") && i + 1 < argc) {
            list = argv[++i];
        } else {
            fprintf(stderr, "tandem detokenize: unknown or incomplete option '%s'\n", a);
            return usage(stderr);
        }
    }
    if (!!model + !!tokfile != 1 || !list) {
        fprintf(stderr, "tandem detokenize: give one of --model/--tokenizer, and --ids\n");
        return usage(stderr);
    }
    char err[512];
    model_tok *t = model ? model_tok_load_dir(model, err, sizeof err)
                         : model_tok_load(tokfile, NULL, err, sizeof err);
    if (!t) {
        fprintf(stderr, "tandem detokenize: %s\n", err);
        return 1;
    }
    int32_t *ids = NULL;
    long n = parse_ids(list, model_tok_vocab_size(t), &ids, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "tandem detokenize: %s\n", err);
        model_tok_free(t);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = model_tok_decode(t, ids, (size_t)n, skip, &text, &len);
    free(ids);
    model_tok_free(t);
    if (rc) {
        fprintf(stderr, "tandem detokenize: decoding failed (out of memory)\n");
        return 1;
    }
    fwrite(text, 1, len, stdout);
    if (!raw) fputc('\n', stdout);
    free(text);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "tandem detokenize: write error: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

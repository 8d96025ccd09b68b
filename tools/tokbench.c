/* tools/tokbench.c — tokenizer encode/decode throughput, one thread.
 *
 *   build/tokbench [--mb N] [--reps R] [TOKENIZER_JSON ...]
 *
 * The corpus is the repository's own text (sources, docs, chat templates and the multilingual
 * test inputs), its lines shuffled differently on every repetition until it is N MB (default 8),
 * so that words recur as in real text without whole passages repeating. Each tokenizer encodes
 * the whole corpus in one call (best of R runs), then a ~100k-token prefix, then decodes.
 * Default tokenizers: Llama-2 (models/tiny-llama2-mha), GPT-2 and Llama-3 (tests/data). */
#include "model/tok/tokenizer.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct {
    char *p;
    size_t len, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 20;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) {
            fprintf(stderr, "tokbench: out of memory\n");
            exit(1);
        }
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void add_file(buf *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) put(b, chunk, n);
    put(b, "\n", 1);
    fclose(f);
}

static void add_dir(buf *b, const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), sl = strlen(suffix);
        if (l <= sl || strcmp(e->d_name + l - sl, suffix) != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        add_file(b, path);
    }
    closedir(d);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Repeats the base text's lines in a fresh random order until `target` bytes. */
static buf make_corpus(const buf *base, size_t target)
{
    size_t nl = 0;
    for (size_t i = 0; i < base->len; i++) nl += base->p[i] == '\n';
    size_t *start = malloc((nl + 1) * sizeof *start), k = 0;
    start[k++] = 0;
    for (size_t i = 0; i < base->len; i++)
        if (base->p[i] == '\n' && i + 1 < base->len) start[k++] = i + 1;
    size_t *order = malloc(k * sizeof *order);
    buf c = {0};
    while (c.len < target) {
        for (size_t i = 0; i < k; i++) order[i] = i;
        for (size_t i = k; i > 1; i--) {
            size_t j = rnd() % i, t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
        for (size_t i = 0; i < k && c.len < target; i++) {
            size_t a = start[order[i]], z = a;
            while (z < base->len && base->p[z] != '\n') z++;
            put(&c, base->p + a, z - a);
            put(&c, "\n", 1);
        }
    }
    free(start);
    free(order);
    return c;
}

static void bench(const char *path, const buf *corpus, int reps)
{
    char err[512];
    double t0 = now();
    model_tok *t = model_tok_load(path, NULL, err, sizeof err);
    double tload = now() - t0;
    if (!t) {
        fprintf(stderr, "tokbench: %s\n", err);
        return;
    }
    double best = 1e30;
    size_t n = 0;
    int32_t *ids = NULL;
    for (int r = 0; r < reps; r++) {
        free(ids);
        t0 = now();
        if (model_tok_encode(t, corpus->p, corpus->len, 0, &ids, &n)) {
            fprintf(stderr, "tokbench: encode failed\n");
            exit(1);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    /* a prefix of about 100k tokens, encoded on its own */
    size_t plen = n > 100000 ? (size_t)((double)corpus->len * 100000.0 / (double)n) : corpus->len;
    while (plen < corpus->len && ((unsigned char)corpus->p[plen] & 0xC0) == 0x80) plen++;
    double best100 = 1e30;
    size_t n100 = 0;
    for (int r = 0; r < reps; r++) {
        int32_t *p;
        t0 = now();
        model_tok_encode(t, corpus->p, plen, 0, &p, &n100);
        double dt = now() - t0;
        if (dt < best100) best100 = dt;
        free(p);
    }
    char *text;
    size_t tl;
    t0 = now();
    model_tok_decode(t, ids, n, 0, &text, &tl);
    double tdec = now() - t0;
    int same = tl == corpus->len && !memcmp(text, corpus->p, tl);
    printf("%-45s load %6.3f s | encode %6.2f MB in %6.3f s = %6.2f MB/s, %5.2f Mtok/s (%zu tokens) |"
           " %zu tokens in %6.1f ms | decode %6.2f MB/s%s\n",
           path, tload, corpus->len / 1e6, best, corpus->len / 1e6 / best, n / 1e6 / best, n, n100,
           best100 * 1e3, tl / 1e6 / tdec, same ? " (round trip exact)" : "");
    free(text);
    free(ids);
    model_tok_free(t);
}

int main(int argc, char **argv)
{
    double mb = 8;
    int reps = 3;
    const char *paths[16];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc)
            mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: tokbench [--mb N] [--reps R] [TOKENIZER_JSON ...]\n");
            return 2;
        } else if (np < 16)
            paths[np++] = argv[i];
    }
    if (mb <= 0 || mb > 1024 || reps < 1 || reps > 100) {
        fprintf(stderr, "tokbench: --mb in (0, 1024], --reps in [1, 100]\n");
        return 2;
    }
    if (!np) {
        paths[np++] = "models/tiny-llama2-mha/tokenizer.json";
        paths[np++] = "build/data/tokenizer/gpt2/tokenizer.json";
        paths[np++] = "build/data/tokenizer/llama3/tokenizer.json";
    }
    buf base = {0};
    add_dir(&base, "model", ".c");
    add_dir(&base, "model", ".h");
    add_dir(&base, "daemon", ".c");
    add_dir(&base, "tests/data/chat_templates", ".jinja");
    add_file(&base, "README.md");
    add_file(&base, "tests/data/tokenizer/tinyllama_basic_inputs.json");
    add_file(&base, "tests/data/tokenizer/gpt2/gpt2_encoded_tokens.json");
    add_file(&base, "tests/data/tokenizer/ggml-vocab-llama-spm.gguf.inp");
    if (base.len == 0) {
        fprintf(stderr, "tokbench: run from the repository root (no corpus files found)\n");
        return 1;
    }
    buf corpus = make_corpus(&base, (size_t)(mb * 1e6));
    printf("corpus: %.2f MB from %.1f KB of repository text, lines shuffled per repetition\n",
           corpus.len / 1e6, base.len / 1e3);
    for (int i = 0; i < np; i++) bench(paths[i], &corpus, reps);
    free(base.p);
    free(corpus.p);
    return 0;
}

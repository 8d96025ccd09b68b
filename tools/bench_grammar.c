/* tools/bench_grammar.c — the per-token cost of grammar-constrained decoding: the token mask (and
 * its application to a logits row) for the JSON object grammar and three JSON Schemas, at each
 * vocabulary given (default: Llama-2's 32K, models/tiny-llama2-mha, and Llama-3's 128K,
 * tests/data/tokenizer/llama3), cold (a grammar compiled afresh: every state's mask computed
 * once) and warm (a second request with the same grammar: masks from the grammar's shared
 * cache). Each step follows a fixed valid document, tokenized by the tokenizer itself, so the
 * states are the ones a model writing it would visit.
 *
 * Usage: build/bench_grammar [--reps N] [--no-prepare | --no-tables] [TOKENIZER_JSON ...]
 * --no-prepare: the tables (model_grammar_prepare) are built by the first mask that needs them,
 * inside the cold timings; --no-tables: no tables, every new state walks the whole trie (the
 * engine's first algorithm, for comparison).
 * Prints a markdown table (µs per token: mean, p50, p99, max) for BENCHMARKS.md. */
#include "model/gen/gen.h"
#include "model/grammar/grammar.h"
#include "model/tok/tokenizer.h"
#include "proto/json_schema.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct gcase {
    const char *name;
    const char *schema; /* NULL: the json_object grammar */
    const char *doc;
} gcase;

static const gcase cases[] = {
    {"json_object", NULL,
     "{\"id\": 1234, \"name\": \"Ada Lovelace\", \"tags\": [\"math\", \"engines\", \"notes\"], \"active\": true, "
     "\"address\": {\"city\": \"London\", \"zip\": \"W1\"}, \"score\": -12.5e3, \"nothing\": null}"},
    {"schema_flat",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0},"
     "\"email\":{\"type\":\"string\"},\"admin\":{\"type\":\"boolean\"},\"role\":{\"enum\":[\"user\",\"editor\",\"owner\"]}},"
     "\"required\":[\"name\",\"age\",\"role\"]}",
     "{\"name\": \"Grace Hopper\", \"age\": 85, \"email\": \"grace@navy.mil\", \"admin\": true, \"role\": \"owner\"}"},
    {"schema_nested",
     "{\"type\":\"object\",\"properties\":{\"order\":{\"type\":\"integer\"},\"items\":{\"type\":\"array\",\"maxItems\":8,"
     "\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\"},"
     "\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"qty\",\"price\"]}},\"note\":{\"type\":[\"string\",\"null\"]}},"
     "\"required\":[\"order\",\"items\",\"note\"]}",
     "{\"order\": 77, \"items\": [{\"sku\": \"A-100\", \"qty\": 2, \"price\": 9.99}, {\"sku\": \"B-7\", \"qty\": 1, "
     "\"price\": 120.5}, {\"sku\": \"C-3\", \"qty\": 10, \"price\": 0.25}], \"note\": null}"},
    {"schema_ref_pattern",
     "{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},"
     "\"required\":[\"x\",\"y\"]}},\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},"
     "\"path\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pt\"}},\"label\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}},"
     "\"required\":[\"id\",\"path\",\"label\"]}",
     "{\"id\": \"ABC-2024\", \"path\": [{\"x\": 1.5, \"y\": -2}, {\"x\": 3, \"y\": 4.25}, {\"x\": 0, \"y\": 0}], \"label\": \"route\"}"},
};

static model_grammar *compile(const gcase *c)
{
    char err[512];
    if (!c->schema) {
        const char *t = model_grammar_json_object();
        return model_grammar_new(t, strlen(t), NULL, err, sizeof err);
    }
    proto_buf b;
    proto_buf_init(&b);
    model_grammar *g = NULL;
    if (proto_jschema_grammar(c->schema, strlen(c->schema), &b, err, sizeof err) == 0)
        g = model_grammar_new(b.p, b.len, NULL, err, sizeof err);
    if (!g) fprintf(stderr, "%s: %s\n", c->name, err);
    proto_buf_deinit(&b);
    return g;
}

/* One pass over the document's tokens with a fresh matcher: per-token mask+apply times into t
 * (wall clock) and c (this thread's CPU time: the shared machine's preemptions left out).
 * Returns the number of tokens, or -1 when the grammar refused a token (a bug). */
static int tables = 1;

static int run(model_grammar *g, const model_gvocab *v, const int32_t *ids, int n, float *logits, int V,
               double *t, double *c, int *hits, long *fallbacks)
{
    model_gmatch *m = model_gmatch_new(g, v);
    if (!m) return -1;
    *hits = 0;
    if (!tables) model_gmatch_set_tables(m, MODEL_GMATCH_TABLES_OFF);
    for (int i = 0; i < n; i++) {
        long miss0, miss1;
        model_gmatch_stats(m, NULL, NULL, &miss0);
        double t0 = now_us(), c0 = cpu_us();
        /* what the sampler calls: the mask, applied to the logits row */
        int allowed = model_gmatch_apply(m, logits, V);
        t[i] = now_us() - t0;
        c[i] = cpu_us() - c0;
        model_gmatch_stats(m, NULL, NULL, &miss1);
        *hits += miss1 == miss0;
        if (allowed <= 0 || model_gmatch_accept(m, ids[i])) {
            fprintf(stderr, "token %d (%d) refused: %s\n", i, ids[i], model_gmatch_error(m));
            model_gmatch_free(m);
            return -1;
        }
    }
    *fallbacks += model_gmatch_fallbacks(m);
    model_gmatch_free(m);
    return n;
}

static void stats(const char *vocab, const char *name, const char *phase, double *t, double *c, int n, int hits)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    qsort(c, (size_t)n, sizeof *c, cmp_d);
    int p99 = (int)ceil(0.99 * n) - 1;
    if (p99 < 0) p99 = 0;
    printf("| %s | %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f / %.1f | %d%% |\n", vocab, name, phase, n, sum / n,
           t[n / 2], t[p99], t[n - 1], c[n / 2], c[p99], 100 * hits / n);
}

int main(int argc, char **argv)
{
    int reps = 3, no_prep = 0;
    const char *toks[8];
    int n_toks = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-prepare")) no_prep = 1; /* tables built by the first mask */
        else if (!strcmp(argv[i], "--no-tables")) tables = 0, no_prep = 1; /* the whole-trie walk only */
        else if (n_toks < 8) toks[n_toks++] = argv[i];
    }
    if (!n_toks) {
        toks[n_toks++] = "models/tiny-llama2-mha/tokenizer.json";
        toks[n_toks++] = "build/data/tokenizer/llama3/tokenizer.json";
    }
    printf("| vocabulary | grammar | phase | tokens | mean µs | p50 µs | p99 µs | max µs | CPU p50 / p99 µs | cache hits |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int ti = 0; ti < n_toks; ti++) {
        char err[256];
        model_tok *tok = model_tok_load(toks[ti], NULL, err, sizeof err);
        if (!tok) {
            fprintf(stderr, "%s: %s\n", toks[ti], err);
            return 1;
        }
        int V = model_tok_vocab_size(tok);
        int32_t eos = model_tok_eos_id(tok);
        double t0 = now_us();
        model_gvocab *v = model_gen_vocab_new(tok, V, &eos, eos >= 0);
        double build = now_us() - t0;
        char vname[64];
        snprintf(vname, sizeof vname, "%d", V);
        fprintf(stderr, "%s: vocab %d, trie %d nodes, built in %.1f ms\n", toks[ti], V, model_gvocab_trie_nodes(v), build / 1e3);
        float *logits = calloc((size_t)V, sizeof *logits);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const gcase *c = &cases[ci];
            int32_t *ids = NULL;
            size_t n = 0;
            if (model_tok_encode(tok, c->doc, strlen(c->doc), 0, &ids, &n) < 0) return 1;
            size_t nn = n * (size_t)reps;
            double *cold = malloc(sizeof(double) * nn), *warm = malloc(sizeof(double) * nn);
            double *ccold = malloc(sizeof(double) * nn), *cwarm = malloc(sizeof(double) * nn);
            int hc = 0, hw = 0, k = 0;
            long fb = 0;
            double prep = 0;
            model_gprep_stats ps = {0};
            for (int r = 0; r < reps; r++) {
                model_grammar *g = compile(c);
                int h1 = 0, h2 = 0;
                if (!g) return 1;
                /* the tables, once per grammar and vocabulary (the daemon builds them off the
                 * event loop when it compiles the grammar) */
                double p0 = now_us();
                if (!no_prep) model_grammar_prepare(g, v);
                prep += now_us() - p0;
                if (!no_prep) model_grammar_prepare_stats(g, v, &ps);
                if (run(g, v, ids, (int)n, logits, V, cold + k, ccold + k, &h1, &fb) < 0 ||
                    run(g, v, ids, (int)n, logits, V, warm + k, cwarm + k, &h2, &fb) < 0)
                    return 1;
                hc += h1;
                hw += h2;
                k += (int)n;
                model_grammar_unref(g);
            }
            stats(vname, c->name, "cold", cold, ccold, k, hc);
            stats(vname, c->name, "warm", warm, cwarm, k, hw);
            fprintf(stderr, "%s %s: tables %.1f ms (mean of %d), %d keys, %ld fronts, %ld trie nodes walked, %.1f MiB; %ld masks walked the whole trie\n",
                    vname, c->name, prep / 1e3 / reps, reps, ps.keys, ps.fronts, ps.visits, ps.bytes / 1048576.0, fb);
            free(cold);
            free(warm);
            free(ccold);
            free(cwarm);
            free(ids);
        }
        free(logits);
        model_gvocab_free(v);
        model_tok_free(tok);
    }
    return 0;
}

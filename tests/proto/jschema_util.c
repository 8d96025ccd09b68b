/* tests/proto/jschema_util.c — see jschema_util.h. */
#include "tests/proto/jschema_util.h"
#include "tests/test.h"

model_grammar *jschema_grammar(const char *schema, enum proto_jschema_mode mode, char *msg,
                               size_t n)
{
    proto_buf out;
    proto_buf_init(&out);
    model_grammar *g = NULL;
    if (proto_jschema_grammar_mode(schema, strlen(schema), mode, &out, msg, n) == 0) {
        g = model_grammar_new(out.p, out.len, NULL, msg, n);
        if (!g) t_fail(__FILE__, __LINE__, "grammar of %s refused: %s\n%s", schema, msg, out.p);
    }
    proto_buf_deinit(&out);
    return g;
}

int jschema_accepts(model_grammar *g, const model_gvocab *v, const char *doc)
{
    model_gmatch *m = model_gmatch_new(g, v);
    int ok = m && model_gmatch_accept_bytes(m, doc, strlen(doc)) == 0 && model_gmatch_can_end(m);
    model_gmatch_free(m);
    return ok;
}

uint64_t jschema_rand(uint64_t *rng)
{
    uint64_t x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *rng = x;
}

int jschema_sample(model_grammar *g, const model_gvocab *v, uint64_t *rng, char *out, size_t cap)
{
    model_gmatch *m = model_gmatch_new(g, v);
    if (!m) return -1;
    size_t n = 0;
    int rc = -1;
    while (n + 1 < cap) {
        if (model_gmatch_can_end(m) &&
            (model_gmatch_done(m) || n > cap / 2 || jschema_rand(rng) % 4 == 0)) {
            rc = 0;
            break;
        }
        const uint64_t *mask;
        int allowed = model_gmatch_mask(m, &mask, NULL);
        if (allowed <= 0) break;
        int pick = (int)(jschema_rand(rng) % (uint64_t)allowed), tok = -1;
        for (int t = 0; t < 256 && tok < 0; t++)
            if (mask[t / 64] >> (t % 64) & 1 && pick-- == 0) tok = t;
        if (tok < 0 || model_gmatch_accept(m, tok)) break;
        out[n++] = (char)tok;
    }
    out[n] = 0;
    model_gmatch_free(m);
    return rc;
}

void jschema_expect(model_grammar *g, const model_gvocab *v, const char *schema,
                    const char *const *yes, const char *const *no, int n)
{
    for (int k = 0; g && k < n && yes[k]; k++)
        CHECK_MSG(jschema_accepts(g, v, yes[k]), "%s should accept %s", schema, yes[k]);
    for (int k = 0; g && k < n && no[k]; k++)
        CHECK_MSG(!jschema_accepts(g, v, no[k]), "%s should refuse %s", schema, no[k]);
}

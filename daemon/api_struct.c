/* daemon/api_struct.c — see api_struct.h. */
#include "daemon/api_struct.h"
#include "proto/buf.h"
#include <openssl/rand.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Compiled grammars by their text: clients send the same schema or tools request after request,
 * and a grammar kept alive keeps its shared masks (model/grammar/grammar.h). LRU over
 * GRAMMAR_CACHE entries; compiling runs outside the lock (any thread). */
#define GRAMMAR_CACHE 32
static struct {
    uint64_t hash;
    char *text;
    size_t len;
    model_grammar *g;
    uint64_t used;
} gcache[GRAMMAR_CACHE];
static pthread_mutex_t gcache_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t gcache_clock;

static uint64_t text_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static model_grammar *compile_cached(const char *text, size_t len, char *err, size_t errlen)
{
    uint64_t h = text_hash(text, len);
    pthread_mutex_lock(&gcache_mu);
    for (int i = 0; i < GRAMMAR_CACHE; i++)
        if (gcache[i].g && gcache[i].hash == h && gcache[i].len == len && !memcmp(gcache[i].text, text, len)) {
            gcache[i].used = ++gcache_clock;
            model_grammar *g = model_grammar_ref(gcache[i].g);
            pthread_mutex_unlock(&gcache_mu);
            return g;
        }
    pthread_mutex_unlock(&gcache_mu);
    model_grammar *g = model_grammar_new(text, len, NULL, err, errlen);
    char *copy = g ? malloc(len + 1) : NULL;
    if (!copy) return g;
    memcpy(copy, text, len);
    copy[len] = 0;
    pthread_mutex_lock(&gcache_mu);
    int slot = 0;
    for (int i = 1; i < GRAMMAR_CACHE; i++)
        if (gcache[i].used < gcache[slot].used) slot = i;
    model_grammar *old = gcache[slot].g;
    char *old_text = gcache[slot].text;
    gcache[slot].hash = h;
    gcache[slot].text = copy;
    gcache[slot].len = len;
    gcache[slot].g = model_grammar_ref(g);
    gcache[slot].used = ++gcache_clock;
    pthread_mutex_unlock(&gcache_mu);
    model_grammar_unref(old);
    free(old_text);
    return g;
}

void dmn_grammar_cache_clear(void)
{
    pthread_mutex_lock(&gcache_mu);
    for (int i = 0; i < GRAMMAR_CACHE; i++) {
        model_grammar_unref(gcache[i].g);
        free(gcache[i].text);
        memset(&gcache[i], 0, sizeof gcache[i]);
    }
    pthread_mutex_unlock(&gcache_mu);
}

int dmn_grammar_compile(const proto_req *q, enum proto_tool_family f, model_grammar **out,
                        enum proto_err *e, char *msg, size_t msgn, char *param, size_t paramn)
{
    *out = NULL;
    char err[400];
    if (proto_tools_constrained(q->tools)) {
        proto_buf g;
        proto_buf_init(&g);
        if (proto_tools_grammar(q->tools, f, &g, err, sizeof err)) {
            proto_buf_deinit(&g);
            *e = PROTO_ERR_INVALID_VALUE;
            snprintf(msg, msgn, "%s", err);
            snprintf(param, paramn, "tools");
            return -1;
        }
        *out = compile_cached(g.p, g.len, err, sizeof err);
        proto_buf_deinit(&g);
        if (*out) return 0;
        *e = PROTO_ERR_INVALID_VALUE;
        snprintf(msg, msgn, "tools: %s", err);
        snprintf(param, paramn, "tools");
        return -1;
    }
    if (q->grammar_kind == PROTO_GRAMMAR_NONE) return 0;
    const char *text = q->grammar_kind == PROTO_GRAMMAR_JSON_OBJECT ? model_grammar_json_object() : q->grammar;
    *out = compile_cached(text, strlen(text), err, sizeof err);
    if (*out) return 0;
    *e = PROTO_ERR_INVALID_VALUE;
    snprintf(msg, msgn, "%s", err);
    snprintf(param, paramn, "%s", q->grammar_kind == PROTO_GRAMMAR_GBNF ? "grammar" : "response_format");
    return -1;
}

int dmn_grammar_check(sched *s, model_grammar *g, int keep_first_space, char *msg, size_t msgn)
{
    const model_gvocab *v = sched_grammar_vocab(s);
    model_gmatch *m = v ? model_gmatch_new_why(g, v, msg, msgn) : NULL;
    if (!m) {
        if (!v) snprintf(msg, msgn, "out of memory");
        return -1;
    }
    if (keep_first_space) model_gmatch_keep_first_space(m);
    model_gmatch_set_tables(m, MODEL_GMATCH_TABLES_READY); /* never tens of ms on the loop */
    const uint64_t *mask;
    int n = model_gmatch_mask(m, &mask, NULL);
    if (n <= 0)
        snprintf(msg, msgn, "%s", n < 0 ? model_gmatch_error(m)
                                         : "grammar: no token of the model's vocabulary can start a text of this grammar");
    model_gmatch_free(m);
    return n > 0 ? 0 : -1;
}

typedef struct prep_task {
    uv_work_t w;
    model_grammar *g;
    model_gvocab *v;
} prep_task;

static void prep_work(uv_work_t *w)
{
    prep_task *t = w->data;
    model_grammar_prepare(t->g, t->v);
}

static void prep_after(uv_work_t *w, int status)
{
    prep_task *t = w->data;
    model_grammar_unref(t->g);
    model_gvocab_free(t->v);
    free(t);
}

void dmn_grammar_prepare(uv_loop_t *loop, sched *s, model_grammar *g)
{
    const model_gvocab *v = sched_grammar_vocab(s);
    if (!v || model_grammar_prepared(g, v)) return;
    prep_task *t = calloc(1, sizeof *t);
    if (!t) return; /* the first masks build them instead */
    t->g = model_grammar_ref(g);
    t->v = model_gvocab_ref(v);
    t->w.data = t;
    if (uv_queue_work(loop, &t->w, prep_work, prep_after)) prep_after(&t->w, 0);
}

size_t dmn_tools_content(const proto_tools *t, enum proto_tool_family f, dmn_choice_tools *ct,
                         const char *text, size_t len)
{
    if (!t || t->choice == PROTO_TOOL_CHOICE_NONE || ct->mode == DMN_TOOLS_TEXT) return len;
    if (proto_tools_constrained(t)) return 0; /* the grammar allows nothing but calls */
    if (f == PROTO_TOOLS_HERMES) return proto_tools_content_len(text, len, ct->sent);
    if (!proto_tools_may_start(f, text, len)) {
        ct->mode = DMN_TOOLS_TEXT;
        return len;
    }
    return 0;
}

/* "call_" and 24 random letters and digits, as OpenAI's ids look; in the Mistral family 9
 * letters and digits, what its template demands of the ids a client sends back ("Tool call IDs
 * should be alphanumeric strings with length 9!"; vLLM's Mistral parser makes the same). */
static void call_id(char out[40], enum proto_tool_family f)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[24];
    if (RAND_bytes(r, sizeof r) != 1) memset(r, 7, sizeof r);
    int pre = f == PROTO_TOOLS_MISTRAL ? 0 : 5, n = f == PROTO_TOOLS_MISTRAL ? 9 : 24;
    memcpy(out, "call_", (size_t)pre);
    for (int i = 0; i < n; i++) out[pre + i] = abc[r[i] % 62];
    out[pre + n] = 0;
}

const char *dmn_tools_finish(const proto_tools *t, enum proto_tool_family f, dmn_choice_tools *ct,
                             const char *text, size_t len, const char *finish)
{
    if (!t || t->choice == PROTO_TOOL_CHOICE_NONE || ct->mode == DMN_TOOLS_TEXT) return finish;
    if (proto_tools_parse(t, f, text ? text : "", len, &ct->calls, &ct->n_calls, &ct->content_len) != 1) {
        ct->mode = DMN_TOOLS_TEXT;
        /* the grammar's markup up to where max_tokens cut it is no content (vLLM: none) */
        ct->cut = proto_tools_constrained(t);
        return finish;
    }
    ct->mode = DMN_TOOLS_CALLS;
    if (!t->parallel && ct->n_calls > 1) {
        /* parallel_tool_calls false (and the functions API): one call. An unconstrained model
         * may write more; the first is the answer and the rest are dropped, as vLLM does (PR
         * 26233); a constrained one's grammar allows one only */
        for (int i = 1; i < ct->n_calls; i++) {
            free(ct->calls[i].name);
            free(ct->calls[i].arguments);
        }
        ct->n_calls = 1;
    }
    for (int i = 0; i < ct->n_calls; i++) call_id(ct->calls[i].id, f);
    if (!finish || strcmp(finish, "stop")) return finish;
    return t->legacy ? "function_call" : "tool_calls";
}

void dmn_choice_tools_deinit(dmn_choice_tools *ct)
{
    proto_tool_calls_free(ct->calls, ct->n_calls);
    memset(ct, 0, sizeof *ct);
}

/* model/tok/tok_escape.c — special-token strings in untrusted chat content stay text.
 *
 * A chat's messages are rendered into one string that is encoded with the added tokens
 * recognised (transformers' apply_chat_template(tokenize=True)), so a user message holding
 * "<|eot_id|><|start_header_id|>system<|end_header_id|>" would become real control tokens and
 * forge a turn. Before the template runs, each special token's string in the escaped messages'
 * content is replaced by a marker: the request's nonce (20 random decimal digits) and the added
 * token's index (7 digits). After rendering, each intact marker is put back as its token's
 * string and recorded as a literal range, which the encoder pre-tokenizes with the text around
 * it while refusing special matches over it (model/tok/tok_encode.c): the ids are those of the
 * same text with that string not a special token (tokenizers' split_special_tokens on that
 * range). A marker the template cut or changed is not recognised and stays text, as does a
 * marker a client guessed: restoring only ever yields text, never a control token.
 *
 * Markers are made of ASCII digits so that string filters (trim, upper, split on spaces) leave
 * them whole, and the escaping is refused for a vocabulary with an all-digit special token (a
 * marker could then hold one), or with a special token matched after a normalizer that could
 * make it of other text (model/tok/tok_load.c's norm_unsafe_step: only the token's own string
 * is escaped).
 *
 * Under "untrusted" every message's content is escaped but the system and developer messages'
 * (the operator's): the assistant's too, since a client sends back what the model said, and a
 * model can be asked to repeat a special token's string, which would be a forged turn on the
 * next request. The specials a template needs around an assistant turn or a tool call it emits
 * itself. */
#include "model/tok/tok_internal.h"
#include "model/tok/tok_json.h"
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int model_tok_esc_scope_parse(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "off")) return MODEL_TOK_ESC_OFF;
    if (!strcmp(s, "untrusted")) return MODEL_TOK_ESC_UNTRUSTED;
    if (!strcmp(s, "all")) return MODEL_TOK_ESC_ALL;
    return -1;
}

int model_tok_esc_init(model_tok_esc *e)
{
    uint8_t r[MODEL_TOK_ESC_NONCE];
    /* the OS's generator (blocking only before it is seeded at boot) */
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return -1;
    for (int i = 0; i < MODEL_TOK_ESC_NONCE; i++) e->nonce[i] = (char)('0' + r[i] % 10);
    e->n_escaped = 0;
    return 0;
}

/* Appends s[0..n) with every special token's string replaced by its marker; *grew counts the
 * bytes the markers add. 0, -1 out of memory, -2 past MODEL_TOK_ESC_MAX_GROWTH. */
static int escape_text(const model_tok *t, model_tok_esc *e, const char *s, size_t n,
                       proto_buf *out, size_t *grew)
{
    size_t last = 0, i = 0, me;
    while (i < n) {
        int32_t k;
        if (!t->spec_trie.first[(uint8_t)s[i]] ||
            (k = model_tok_trie_longest(&t->spec_trie, s, n, i, &me)) < 0) {
            i++;
            continue;
        }
        size_t len = me - i;
        if (len < MODEL_TOK_ESC_MARK) *grew += MODEL_TOK_ESC_MARK - len;
        if (*grew > MODEL_TOK_ESC_MAX_GROWTH) return -2;
        char mark[MODEL_TOK_ESC_MARK];
        memcpy(mark, e->nonce, MODEL_TOK_ESC_NONCE);
        for (int d = MODEL_TOK_ESC_MARK - 1, v = k; d >= MODEL_TOK_ESC_NONCE; d--, v /= 10)
            mark[d] = (char)('0' + v % 10);
        if (proto_buf_add(out, s + last, i - last) || proto_buf_add(out, mark, sizeof mark))
            return -1;
        e->n_escaped++;
        i = last = me;
    }
    return proto_buf_add(out, s + last, n - last);
}

static int role_escaped(const char *role, enum model_tok_esc_scope scope)
{
    if (scope == MODEL_TOK_ESC_ALL) return 1;
    /* any other role (user, assistant, tool, a template's own like ipython) is untrusted */
    return scope == MODEL_TOK_ESC_UNTRUSTED &&
           !(role && (!strcmp(role, "system") || !strcmp(role, "developer")));
}

const char *model_tok_esc_refusal(const model_tok *t)
{
    return t && t->esc_refusal[0] ? t->esc_refusal : NULL;
}

/* 1 when s[0..n) holds a special token's string. */
static int has_special(const model_tok *t, const char *s, size_t n)
{
    size_t me;
    for (size_t i = 0; i < n; i++)
        if (t->spec_trie.first[(uint8_t)s[i]] &&
            model_tok_trie_longest(&t->spec_trie, s, n, i, &me) >= 0)
            return 1;
    return 0;
}

/* A string's escaped copy (a new reference), NULL in *out when it holds no special string. */
static int escape_string(const model_tok *t, model_tok_esc *e, const char *s, size_t n,
                         size_t *grew, json_t **out)
{
    *out = NULL;
    size_t before = e->n_escaped;
    proto_buf b = {0};
    int rc = escape_text(t, e, s, n, &b, grew);
    /* valid UTF-8: a JSON string's text with ASCII markers in place of whole token strings */
    if (rc == 0 && e->n_escaped != before && !(*out = json_stringn_nocheck(b.p, b.len))) rc = -1;
    proto_buf_deinit(&b);
    return rc;
}

/* Every string in v, object keys included, escaped (skip: a top-level key left as it is, the
 * message's role). *out: a new value when something changed, else NULL (v stays). Depth is the
 * request's, bounded before it was parsed (proto_json_depth). 0, -1 out of memory, -2 too big. */
static int escape_json(const model_tok *t, model_tok_esc *e, json_t *v, const char *skip,
                       size_t *grew, json_t **out)
{
    *out = NULL;
    if (json_is_string(v))
        return escape_string(t, e, json_string_value(v), json_string_length(v), grew, out);
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            json_t *nx;
            int rc = escape_json(t, e, x, NULL, grew, &nx);
            if (rc < 0) return rc;
            if (nx && json_array_set_new(v, i, nx)) return -1; /* in place: v is ours */
        }
        return 0;
    }
    if (!json_is_object(v)) return 0;
    /* keys may hold specials too (a tool call's argument names): the object is rebuilt when one
     * does, as a key cannot be renamed in place */
    json_t *o = json_object();
    if (!o) return -1;
    int changed = 0, rc = 0;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        json_t *nk = NULL, *nx = NULL;
        int keep = skip && !strcmp(k, skip);
        if (!keep && ((rc = escape_string(t, e, k, strlen(k), grew, &nk)) < 0 ||
                      (rc = escape_json(t, e, x, NULL, grew, &nx)) < 0)) {
            json_decref(nk);
            break;
        }
        changed |= nk || nx;
        rc = json_object_set_new(o, nk ? json_string_value(nk) : k, nx ? nx : json_incref(x)) ? -1
                                                                                              : 0;
        json_decref(nk);
        if (rc < 0) break;
    }
    if (rc < 0 || !changed) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}

int model_tok_esc_context(const model_tok *t, model_tok_esc *e, const char *ctx, size_t len,
                          enum model_tok_esc_scope scope, char **out)
{
    *out = NULL;
    if (!t || !e || !ctx) return MODEL_TOK_ESC_EFAIL;
    if (scope == MODEL_TOK_ESC_OFF || t->spec_trie.empty) return 0;
    if (t->esc_refusal[0]) return MODEL_TOK_ESC_EVOCAB;
    /* The context is compact JSON (proto/openai_req.c), where a special's string stands as it
     * is: when none occurs anywhere in it, nothing is escaped and the parse is saved (every
     * chat request under the default pays it otherwise: ~20 ms a MB). A \\u escape could spell one
     * out, so a context holding any is parsed. */
    if (t->spec_json_plain && !memmem(ctx, len, "\\u", 2) && !has_special(t, ctx, len)) return 0;
    json_t *root = json_loadb(ctx, len, JSON_ALLOW_NUL, NULL);
    if (!root) return MODEL_TOK_ESC_EFAIL;
    json_t *msgs = json_object_get(root, "messages"), *m;
    size_t i, grew = 0;
    int rc = 0;
    /* every string of an escaped message, not only its content: a tool call's name and
     * arguments are the model's output sent back as the content is (a template writes them
     * with tojson, which leaves "<|eot_id|>" as it is) */
    json_array_foreach(msgs, i, m)
    {
        if (!role_escaped(jstr(m, "role", NULL), scope)) continue;
        json_t *nm;
        int r = escape_json(t, e, m, "role", &grew, &nm);
        if (r == 0 && nm && json_array_set_new(msgs, i, nm)) r = -1;
        if (r < 0) {
            rc = r == -2 ? MODEL_TOK_ESC_ETOOBIG : MODEL_TOK_ESC_EFAIL;
            break;
        }
    }
    /* all: the tools' definitions too (their descriptions and parameter names are rendered) */
    json_t *tools = json_object_get(root, "tools"), *nt = NULL;
    if (rc == 0 && scope == MODEL_TOK_ESC_ALL && tools) {
        int r = escape_json(t, e, tools, NULL, &grew, &nt);
        if (r == 0 && nt && json_object_set_new(root, "tools", nt)) r = -1;
        if (r < 0) rc = r == -2 ? MODEL_TOK_ESC_ETOOBIG : MODEL_TOK_ESC_EFAIL;
    }
    if (rc == 0 && e->n_escaped) {
        /* the same flags as proto/openai_req.c's dump: a second round trip changes nothing */
        *out = json_dumps(root, JSON_COMPACT);
        if (!*out) rc = MODEL_TOK_ESC_EFAIL;
    }
    json_decref(root);
    return rc < 0 ? rc : (int)(e->n_escaped > 0);
}

/* Puts text[0..len) into out with each intact marker back as its token's string; the strings'
 * ranges into *lits (NULL: not wanted). */
static int restore(const model_tok *t, const model_tok_esc *e, const char *text, size_t len,
                   proto_buf *out, tok_lit **lits, size_t *nl)
{
    size_t last = 0, pos = 0, cap = 0;
    if (lits) *lits = NULL, *nl = 0;
    while (pos + MODEL_TOK_ESC_MARK <= len) {
        const char *p = memmem(text + pos, len - pos, e->nonce, MODEL_TOK_ESC_NONCE);
        if (!p || (size_t)(p - text) + MODEL_TOK_ESC_MARK > len) break;
        size_t at = (size_t)(p - text);
        long k = 0;
        int digits = 1;
        for (int d = MODEL_TOK_ESC_NONCE; d < MODEL_TOK_ESC_MARK && digits; d++) {
            digits = p[d] >= '0' && p[d] <= '9';
            k = k * 10 + (p[d] - '0');
        }
        if (!digits || k >= (long)t->n_added || !t->added[k].special) {
            pos = at + 1; /* not a marker (cut, or changed): text */
            continue;
        }
        const tok_added *a = &t->added[k];
        if (proto_buf_add(out, text + last, at - last)) return -1;
        if (out->len + a->len > TOK_MAX_INPUT_BYTES) return -1; /* a template that repeats */
        if (lits) {
            if (*nl == cap) {
                cap = cap ? cap * 2 : 16;
                tok_lit *q = realloc(*lits, cap * sizeof *q);
                if (!q) return -1;
                *lits = q;
            }
            (*lits)[(*nl)++] = (tok_lit){out->len, out->len + a->len};
        }
        if (proto_buf_add(out, a->content, a->len)) return -1;
        pos = last = at + MODEL_TOK_ESC_MARK;
    }
    return proto_buf_add(out, text + last, len - last);
}

int model_tok_esc_restore(const model_tok *t, const model_tok_esc *e, const char *text, size_t len,
                          char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (!t || !e || (!text && len)) return -1;
    proto_buf b = {0};
    if (restore(t, e, text, len, &b, NULL, NULL)) {
        proto_buf_deinit(&b);
        return -1;
    }
    *out_len = b.len;
    *out = proto_buf_take(&b);
    return *out ? 0 : -1;
}

int model_tok_encode_esc(const model_tok *t, const model_tok_esc *e, const char *text, size_t len,
                         int add_special, int32_t **ids_out, size_t *n_out)
{
    if (ids_out) *ids_out = NULL;
    if (n_out) *n_out = 0;
    if (!t || !e || (!text && len) || len > TOK_MAX_INPUT_BYTES) return -1;
    if (!e->n_escaped) return model_tok_encode(t, text, len, add_special, ids_out, n_out);
    proto_buf clean = {0}, b = {0};
    tok_lit *lits = NULL;
    size_t nl = 0;
    int rc = -1;
    /* the ranges must be offsets of the text the encoder reads: clean it first (the tokens'
     * strings are valid UTF-8, the markers ASCII) */
    if (proto_utf8_valid_len(text, len) != len) {
        if (proto_utf8_lossy(&clean, text, len)) goto done;
        text = clean.p;
        len = clean.len;
    }
    if (restore(t, e, text, len, &b, &lits, &nl)) goto done;
    rc = model_tok_encode_lits(t, b.p ? b.p : "", b.len, add_special, lits, nl, ids_out, n_out);
done:
    proto_buf_deinit(&clean);
    proto_buf_deinit(&b);
    free(lits);
    return rc;
}

/* daemon/api_extra.c — see api_extra.h. */
#include "daemon/api_extra.h"
#include "proto/openai_extra.h"
#include "proto/openai_req.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dmn_extra_route(const char *path)
{
    static const char *const names[] = {"/tokenize", "/detokenize", "/apply-template"};
    size_t n = strlen(path);
    if (n > 1 && path[n - 1] == '/') n--;
    for (int i = 0; i < 3; i++)
        if (strlen(names[i]) == n && !strncmp(names[i], path, n)) return i;
    return -1;
}

static char *error(enum proto_err e, const char *msg, const char *param, int *status)
{
    *status = proto_err_info(e)->http_status;
    return proto_err_json(e, msg, param && *param ? param : NULL);
}

static char *tokenize(dmn_serve *d, const char *body, size_t len, int *status)
{
    char msg[256], param[32];
    proto_tokenize_req q;
    enum proto_err e = proto_tokenize_parse(body, len, &q, msg, sizeof msg, param, sizeof param);
    if (e != PROTO_ERR_NONE) return error(e, msg, param, status);
    int32_t *ids = NULL;
    size_t n = 0;
    char *out = NULL;
    if (model_tok_encode(d->tok, q.content, q.len, q.add_special, &ids, &n) == 0) {
        const char **pieces = NULL;
        size_t *lens = NULL;
        char *blob = NULL;
        if (q.with_pieces) {
            size_t total = 0;
            for (size_t i = 0; i < n; i++) {
                const char *p = model_tok_piece(d->tok, ids[i]);
                total += p ? strlen(p) : 0;
            }
            pieces = malloc(sizeof *pieces * (n + 1));
            lens = malloc(sizeof *lens * (n + 1));
            blob = malloc(total + 1);
            if (pieces && lens && blob) {
                int bl = model_tok_is_byte_level(d->tok);
                size_t o = 0;
                for (size_t i = 0; i < n; i++) {
                    pieces[i] = blob + o;
                    lens[i] = model_tok_token_bytes(d->tok, ids[i], bl, blob + o);
                    o += lens[i];
                }
                out = proto_tokenize_json(ids, n, pieces, lens);
            }
        } else {
            out = proto_tokenize_json(ids, n, NULL, NULL);
        }
        free(pieces);
        free(lens);
        free(blob);
    }
    free(ids);
    proto_tokenize_req_deinit(&q);
    if (!out) return error(PROTO_ERR_INTERNAL, "out of memory", NULL, status);
    *status = 200;
    return out;
}

static char *detokenize(dmn_serve *d, const char *body, size_t len, int *status)
{
    char msg[256], param[32];
    int32_t *ids;
    size_t n;
    enum proto_err e = proto_detokenize_parse(body, len, model_tok_vocab_size(d->tok), &ids, &n, msg, sizeof msg, param, sizeof param);
    if (e != PROTO_ERR_NONE) return error(e, msg, param, status);
    char *text = NULL;
    size_t tl = 0;
    char *out = model_tok_decode(d->tok, ids, n, 0, &text, &tl) == 0 ? proto_text_json("content", text, tl) : NULL;
    free(text);
    free(ids);
    if (!out) return error(PROTO_ERR_INTERNAL, "out of memory", NULL, status);
    *status = 200;
    return out;
}

static char *apply_template(dmn_serve *d, const char *body, size_t len, int *status)
{
    char msg[512], param[64];
    proto_req q;
    enum proto_err e = proto_req_parse(PROTO_EP_CHAT, body, len, &d->limits, model_tok_bos_token(d->tok),
                                       model_tok_eos_token(d->tok), &q, msg, sizeof msg, param, sizeof param);
    if (e != PROTO_ERR_NONE) return error(e, msg, param, status);
    char *text = NULL, *out = NULL;
    if (model_tmpl_render(d->tmpl, q.chat_context, &text, msg, sizeof msg) < 0) {
        proto_req_deinit(&q);
        return error(PROTO_ERR_INVALID_VALUE, msg, "messages", status);
    }
    out = proto_text_json("prompt", text, strlen(text));
    free(text);
    proto_req_deinit(&q);
    if (!out) return error(PROTO_ERR_INTERNAL, "out of memory", NULL, status);
    *status = 200;
    return out;
}

char *dmn_extra_post(dmn_serve *d, int route, const char *body, size_t len, int *status)
{
    switch (route) {
    case DMN_EXTRA_TOKENIZE: return tokenize(d, body, len, status);
    case DMN_EXTRA_DETOKENIZE: return detokenize(d, body, len, status);
    default: return apply_template(d, body, len, status);
    }
}

static int hex(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The path's percent-escapes decoded into out (n bytes at most, NUL-terminated): clients
 * encode the "/" of a name like meta-llama/Llama-3.1-8B (the Node client's models.retrieve
 * sends meta-llama%2FLlama-3.1-8B). 1, 0 when it does not fit (no served name is that long),
 * -1 for an escape that is not two hex digits or decodes to NUL. */
static int path_decode(const char *s, size_t len, char *out, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= len) return -1;
            int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi | lo) == 0) return -1;
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (o + 1 >= n) return 0;
        out[o++] = c;
    }
    out[o] = 0;
    return 1;
}

/* The daemon's start as a Unix time: a model's "created" (OpenAI's: when it was made; ours
 * came up then), the same in every listing, not the time of the call. */
long long dmn_start_time(const dmn_serve *d)
{
    return d->t_start_unix;
}

char *dmn_model_get(dmn_serve *d, const char *id, int *status)
{
    size_t n = strlen(id);
    if (n > 0 && id[n - 1] == '/') n--;
    char name[DMN_SERVED_NAME_MAX + 2];
    int k = path_decode(id, n, name, sizeof name);
    if (k < 0)
        return error(PROTO_ERR_INVALID_VALUE,
                     "the model id in the path has a bad percent-escape (two hex digits, not %00)",
                     "model", status);
    if (k == 0 || strcmp(d->served_name, name)) {
        char msg[320];
        snprintf(msg, sizeof msg, "the model '%.100s' does not exist; this server serves '%s'",
                 k ? name : "(too long)", d->served_name);
        return error(PROTO_ERR_MODEL_NOT_FOUND, msg, "model", status);
    }
    *status = 200;
    return proto_model_json(d->served_name, dmn_start_time(d), d->m->cfg.max_pos);
}

/* Tokens of the prompt: a token prompt as given, a text prompt through the tokenizer (with its
 * special tokens, as transformers' tokenizer(text) does), a chat through the template (whose
 * text already holds the special tokens, as apply_chat_template(tokenize=True) does — except the
 * plain fallback template, whose text is encoded like a completion prompt). */
int dmn_prompt_ids(dmn_serve *d, const proto_req *q, int32_t **ids, int *n, char *err,
                      size_t errlen, enum proto_err *e)
{
    *e = PROTO_ERR_INVALID_VALUE;
    size_t nn = 0;
    if (q->ep == PROTO_EP_COMPLETIONS && q->prompt_ids) {
        *ids = malloc(sizeof(int32_t) * (size_t)q->n_prompt_ids);
        if (!*ids) goto oom;
        memcpy(*ids, q->prompt_ids, sizeof(int32_t) * (size_t)q->n_prompt_ids);
        *n = q->n_prompt_ids;
        *e = PROTO_ERR_NONE;
        return 0;
    }
    if (q->ep == PROTO_EP_COMPLETIONS) {
        if (model_tok_encode(d->tok, q->prompt, q->prompt_len, 1, ids, &nn) < 0) goto oom;
    } else {
        /* Special-token strings in the content the configuration names are escaped before the
         * template and encoded as text after it (model/tok/tokenizer.h): a client cannot forge
         * a turn or a role by typing "<|eot_id|>". */
        char *text = NULL, *esc = NULL;
        model_tok_esc te;
        int scope = model_tok_esc_scope_parse(d->cfg.escape_special_tokens);
        int st = model_tok_esc_init(&te) < 0
                     ? MODEL_TOK_ESC_EFAIL
                     : model_tok_esc_context(d->tok, &te, q->chat_context, strlen(q->chat_context),
                                             scope < 0 ? MODEL_TOK_ESC_UNTRUSTED : scope, &esc);
        if (st == MODEL_TOK_ESC_ETOOBIG) {
            snprintf(err, errlen,
                     "the messages hold so many special-token strings that escaping them would add "
                     "more than %zu MiB",
                     MODEL_TOK_ESC_MAX_GROWTH >> 20);
            return -1;
        }
        if (st == MODEL_TOK_ESC_EVOCAB) {
            /* start-up refuses such a tokenizer (daemon/serve.c): a guard */
            *e = PROTO_ERR_INTERNAL;
            snprintf(err, errlen,
                     "escape_special_tokens cannot escape this tokenizer's specials: %s",
                     model_tok_esc_refusal(d->tok));
            return -1;
        }
        if (st < 0) goto oom;
        if (model_tmpl_render(d->tmpl, esc ? esc : q->chat_context, &text, err, errlen) < 0) {
            /* raise_exception in a template is how it rejects a conversation: the client's
             * fault (e.g. roles not alternating). */
            free(esc);
            *e = PROTO_ERR_INVALID_VALUE;
            return -1;
        }
        free(esc);
        int rc = model_tok_encode_esc(d->tok, &te, text, strlen(text), d->tmpl_plain, ids, &nn);
        free(text);
        if (rc < 0) goto oom;
    }
    *n = (int)nn;
    if (nn > (size_t)d->m->cfg.max_pos) {
        *e = PROTO_ERR_CONTEXT_LENGTH;
        proto_context_msg(err, errlen, q->ep, d->m->cfg.max_pos, (long long)nn, 0);
        return -1;
    }
    if (nn == 0) {
        snprintf(err, errlen, "the prompt is empty after tokenization");
        return -1;
    }
    *e = PROTO_ERR_NONE;
    return 0;
oom:
    *e = PROTO_ERR_INTERNAL;
    snprintf(err, errlen, "out of memory");
    return -1;
}

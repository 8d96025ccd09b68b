/* model/tok/tok_pipeline.c — the tokenizer.json pipeline around the model: normalizer,
 * pre_tokenizer, decoder and post_processor, each read into the flat step lists of model_tok.
 * Sequence types are flattened; a type this tokenizer does not implement fails the load by name
 * (so a file never silently tokenizes differently from the reference). */
#include "model/tok/tok_internal.h"
#include "model/tok/tok_json.h"
#include <stdlib.h>
#include <string.h>

/* A {"String": s} or {"Regex": r} pattern. */
static int load_pattern(tok_re *re, json_t *pat, char *err, size_t errlen)
{
    size_t n;
    const char *s;
    if ((s = jstr(pat, "String", &n))) return model_tok_re_compile(re, s, n, 1, err, errlen);
    if ((s = jstr(pat, "Regex", &n))) return model_tok_re_compile(re, s, n, 0, err, errlen);
    FAIL("pattern is neither {\"String\": ...} nor {\"Regex\": ...}");
}

/* The first code point of a UTF-8 string into buf (for replacement/content chars). */
static int one_char(const char *s, size_t n, char *buf, size_t *blen, uint32_t *cp)
{
    size_t l;
    uint32_t c;
    if (!s || n == 0 || proto_utf8_scan((const uint8_t *)s, n, &l, &c) != PROTO_UTF8_OK ||
        l != n)
        return -1;
    memcpy(buf, s, l);
    *blen = l;
    if (cp) *cp = c;
    return 0;
}

/* ---------------------------------------------------------------- normalizer */
static int add_norm(model_tok *t, json_t *j, int depth, char *err, size_t errlen)
{
    if (json_is_null(j) || !j) return 0;
    if (!json_is_object(j) || depth > 8) FAIL("normalizer is not an object");
    const char *type = jtype(j);
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(j, "normalizers"), *x;
        size_t i;
        json_array_foreach(arr, i, x) if (add_norm(t, x, depth + 1, err, errlen)) return -1;
        return 0;
    }
    if (t->n_norm >= TOK_MAX_STEPS) FAIL("more than %d normalizers", TOK_MAX_STEPS);
    tok_norm *n = &t->norm[t->n_norm];
    memset(n, 0, sizeof *n);
    size_t l;
    const char *s;
    if (!strcmp(type, "Prepend")) {
        n->kind = TOK_NORM_PREPEND;
        if (!(s = jstr(j, "prepend", &l)) || l > 64) FAIL("Prepend normalizer without prepend");
        n->str = model_tok_arena_dup(&t->arena, s, l);
        n->str_len = l;
    } else if (!strcmp(type, "Replace")) {
        n->kind = TOK_NORM_REPLACE;
        if (!(s = jstr(j, "content", &l)) || l > TOK_MAX_TOKEN_BYTES)
            FAIL("Replace normalizer without content");
        n->str = model_tok_arena_dup(&t->arena, s, l);
        n->str_len = l;
        json_t *pat = json_object_get(j, "pattern");
        if (load_pattern(&n->re, pat, err, errlen)) return -1;
        /* one character replaced by a string: the escaping can prove it safe (tok_load.c) */
        uint32_t cp;
        size_t cl;
        if ((s = jstr(pat, "String", &l)) && l &&
            proto_utf8_scan((const uint8_t *)s, l, &cl, &cp) == PROTO_UTF8_OK && cl == l)
            n->one_cp = cp;
    } else if (!strcmp(type, "NFC")) {
        n->kind = TOK_NORM_NFC;
    } else if (!strcmp(type, "NFD")) {
        n->kind = TOK_NORM_NFD;
    } else if (!strcmp(type, "NFKC")) {
        n->kind = TOK_NORM_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        n->kind = TOK_NORM_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        n->kind = TOK_NORM_LOWERCASE;
    } else if (!strcmp(type, "Strip")) {
        n->kind = TOK_NORM_STRIP;
        n->left = jbool(j, "strip_left", 1);
        n->right = jbool(j, "strip_right", 1);
    } else {
        FAIL("normalizer type %s is not supported", type);
    }
    t->n_norm++;
    return 0;
}

/* ---------------------------------------------------------------- pre-tokenizer */
static int behavior_of(const char *s, enum tok_split_behavior *b)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && !strcmp(s, names[i])) {
            *b = (enum tok_split_behavior)i;
            return 0;
        }
    return -1;
}

static int add_split(model_tok *t, const char *pat, enum tok_split_behavior b, int invert,
                     int literal, char *err, size_t errlen)
{
    if (t->n_pre >= TOK_MAX_STEPS) FAIL("more than %d pre-tokenizers", TOK_MAX_STEPS);
    tok_pre *p = &t->pre[t->n_pre];
    memset(p, 0, sizeof *p);
    p->kind = TOK_PRE_SPLIT;
    p->behavior = b;
    p->invert = invert;
    if (model_tok_re_compile(&p->re, pat, strlen(pat), literal, err, errlen)) return -1;
    t->n_pre++;
    return 0;
}

static int add_pre(model_tok *t, json_t *j, int depth, char *err, size_t errlen)
{
    if (json_is_null(j) || !j) return 0;
    if (!json_is_object(j) || depth > 8) FAIL("pre_tokenizer is not an object");
    const char *type = jtype(j);
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(j, "pretokenizers"), *x;
        size_t i;
        json_array_foreach(arr, i, x) if (add_pre(t, x, depth + 1, err, errlen)) return -1;
        return 0;
    }
    if (t->n_pre >= TOK_MAX_STEPS) FAIL("more than %d pre-tokenizers", TOK_MAX_STEPS);
    tok_pre *p = &t->pre[t->n_pre];
    memset(p, 0, sizeof *p);
    if (!strcmp(type, "Split")) {
        p->kind = TOK_PRE_SPLIT;
        if (behavior_of(jstr(j, "behavior", NULL), &p->behavior))
            FAIL("Split pre-tokenizer with an unknown behavior");
        p->invert = jbool(j, "invert", 0);
        if (load_pattern(&p->re, json_object_get(j, "pattern"), err, errlen)) return -1;
    } else if (!strcmp(type, "ByteLevel")) {
        p->kind = TOK_PRE_BYTE_LEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", 1);
        p->use_regex = jbool(j, "use_regex", 1);
        if (p->use_regex && model_tok_re_compile(&p->re, model_tok_gpt2_pattern,
                                                 strlen(model_tok_gpt2_pattern), 0, err, errlen))
            return -1;
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = TOK_PRE_METASPACE;
        size_t l = 0; /* jstr leaves it alone when the key is absent */
        const char *r = jstr(j, "replacement", &l);
        uint32_t cp;
        if (one_char(r, l, p->repl, &p->repl_len, &cp))
            FAIL("Metaspace replacement is not one character");
        const char *ps = jstr(j, "prepend_scheme", NULL);
        if (ps)
            p->prepend = !strcmp(ps, "first")    ? TOK_PREPEND_FIRST
                         : !strcmp(ps, "never")  ? TOK_PREPEND_NEVER
                                                 : TOK_PREPEND_ALWAYS;
        else
            p->prepend = jbool(j, "add_prefix_space", 1) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        p->split = jbool(j, "split", 1);
    } else if (!strcmp(type, "Digits")) {
        /* char::is_numeric, one char per match: runs only merge under Contiguous */
        return add_split(t, "\\p{N}",
                         jbool(j, "individual_digits", 0) ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS,
                         0, 0, err, errlen);
    } else if (!strcmp(type, "Whitespace")) {
        return add_split(t, "\\w+|[^\\w\\s]+", TOK_SPLIT_REMOVED, 1, 0, err, errlen);
    } else if (!strcmp(type, "WhitespaceSplit")) {
        return add_split(t, "\\s", TOK_SPLIT_REMOVED, 0, 0, err, errlen);
    } else if (!strcmp(type, "Punctuation")) {
        enum tok_split_behavior b = TOK_SPLIT_ISOLATED;
        const char *bs = jstr(j, "behavior", NULL);
        if (bs && behavior_of(bs, &b)) FAIL("Punctuation pre-tokenizer with an unknown behavior");
        /* is_ascii_punctuation || Unicode P* */
        return add_split(t, "[\\p{P}!-/:-@\\[-`{-~]", b, 0, 0, err, errlen);
    } else if (!strcmp(type, "CharDelimiterSplit")) {
        size_t l = 0; /* jstr leaves it alone when the key is absent */
        const char *d = jstr(j, "delimiter", &l);
        char c[8];
        size_t cl;
        if (one_char(d, l, c, &cl, NULL)) FAIL("CharDelimiterSplit delimiter is not one character");
        c[cl] = 0;
        return add_split(t, c, TOK_SPLIT_REMOVED, 0, 1, err, errlen);
    } else {
        FAIL("pre_tokenizer type %s is not supported", type);
    }
    t->n_pre++;
    return 0;
}

/* ---------------------------------------------------------------- decoder */
static int add_dec(model_tok *t, json_t *j, int depth, char *err, size_t errlen)
{
    if (!json_is_object(j) || depth > 8) FAIL("decoder is not an object");
    const char *type = jtype(j);
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(j, "decoders"), *x;
        size_t i;
        json_array_foreach(arr, i, x) if (add_dec(t, x, depth + 1, err, errlen)) return -1;
        return 0;
    }
    if (t->n_dec >= TOK_MAX_STEPS) FAIL("more than %d decoders", TOK_MAX_STEPS);
    tok_dec *d = &t->dec[t->n_dec];
    memset(d, 0, sizeof *d);
    int joined = 0;
    for (int i = 0; i < t->n_dec; i++)
        if (t->dec[i].kind == TOK_DEC_FUSE || t->dec[i].kind == TOK_DEC_BYTE_LEVEL) joined = 1;
    d->joined = joined;
    size_t l = 0; /* jstr leaves it alone when the key is absent */
    const char *s;
    if (!strcmp(type, "Replace")) {
        d->kind = TOK_DEC_REPLACE;
        if (joined) FAIL("a Replace decoder after Fuse/ByteLevel is not supported");
        if (!(s = jstr(j, "content", &l)) || l > TOK_MAX_TOKEN_BYTES)
            FAIL("Replace decoder without content");
        d->content = model_tok_arena_dup(&t->arena, s, l);
        d->content_len = l;
        if (load_pattern(&d->re, json_object_get(j, "pattern"), err, errlen)) return -1;
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = TOK_DEC_BYTE_FALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = TOK_DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        d->kind = TOK_DEC_STRIP;
        s = jstr(j, "content", &l);
        char buf[8];
        size_t bl;
        if (one_char(s, l, buf, &bl, &d->strip_cp)) FAIL("Strip decoder content is not one character");
        json_t *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
        if ((a && !json_is_integer(a)) || (b && !json_is_integer(b)) ||
            json_integer_value(a) < 0 || json_integer_value(b) < 0 ||
            json_integer_value(a) > 1024 || json_integer_value(b) > 1024)
            FAIL("Strip decoder start/stop not in [0, 1024]");
        d->strip_start = (size_t)json_integer_value(a);
        d->strip_stop = (size_t)json_integer_value(b);
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TOK_DEC_METASPACE;
        s = jstr(j, "replacement", &l);
        if (one_char(s, l, d->repl, &d->repl_len, NULL))
            FAIL("Metaspace decoder replacement is not one character");
        const char *ps = jstr(j, "prepend_scheme", NULL);
        d->prepend = ps ? strcmp(ps, "never") != 0 : jbool(j, "add_prefix_space", 1);
    } else if (!strcmp(type, "ByteLevel")) {
        d->kind = TOK_DEC_BYTE_LEVEL;
        if (joined) FAIL("a ByteLevel decoder after Fuse/ByteLevel is not supported");
    } else {
        FAIL("decoder type %s is not supported", type);
    }
    t->n_dec++;
    return 0;
}

/* ---------------------------------------------------------------- post-processor */
typedef struct pp_acc {
    int32_t pre[TOK_MAX_TEMPLATE_IDS], suf[TOK_MAX_TEMPLATE_IDS];
    size_t npre, nsuf;
    char desc[64];
} pp_acc;

static int pp_wrap(model_tok *t, pp_acc *acc, const int32_t *pre, size_t npre, const int32_t *suf,
                   size_t nsuf, char *err, size_t errlen)
{
    if (acc->npre + npre > TOK_MAX_TEMPLATE_IDS || acc->nsuf + nsuf > TOK_MAX_TEMPLATE_IDS)
        FAIL("post-processor adds more than %d ids", TOK_MAX_TEMPLATE_IDS);
    for (size_t i = 0; i < npre + nsuf; i++) {
        int32_t id = i < npre ? pre[i] : suf[i - npre];
        if (id < 0 || id >= t->n_ids) FAIL("post-processor id %d outside the vocabulary", id);
    }
    /* A later processor wraps the result of the earlier ones. */
    memmove(acc->pre + npre, acc->pre, acc->npre * sizeof *acc->pre);
    memcpy(acc->pre, pre, npre * sizeof *pre);
    acc->npre += npre;
    memcpy(acc->suf + acc->nsuf, suf, nsuf * sizeof *suf);
    acc->nsuf += nsuf;
    return 0;
}

static int add_post(model_tok *t, pp_acc *acc, json_t *j, int depth, char *err, size_t errlen)
{
    if (json_is_null(j) || !j) return 0;
    if (!json_is_object(j) || depth > 8) FAIL("post_processor is not an object");
    const char *type = jtype(j);
    if (!acc->desc[0] || depth == 0) snprintf(acc->desc, sizeof acc->desc, "%s", type);
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(j, "processors"), *x;
        size_t i;
        json_array_foreach(arr, i, x) if (add_post(t, acc, x, depth + 1, err, errlen)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        json_t *cls = json_object_get(j, "cls"), *sep = json_object_get(j, "sep");
        if (!json_is_integer(json_array_get(cls, 1)) || !json_is_integer(json_array_get(sep, 1)))
            FAIL("%s without [token, id] cls/sep", type);
        int64_t c = json_integer_value(json_array_get(cls, 1));
        int64_t s = json_integer_value(json_array_get(sep, 1));
        int32_t pre = (int32_t)(c < 0 || c > INT32_MAX ? -1 : c);
        int32_t suf = (int32_t)(s < 0 || s > INT32_MAX ? -1 : s);
        return pp_wrap(t, acc, &pre, 1, &suf, 1, err, errlen);
    }
    if (strcmp(type, "TemplateProcessing") != 0) FAIL("post_processor type %s is not supported", type);
    json_t *single = json_object_get(j, "single"), *specials = json_object_get(j, "special_tokens");
    if (!json_is_array(single)) FAIL("TemplateProcessing without a \"single\" template");
    int32_t pre[TOK_MAX_TEMPLATE_IDS], suf[TOK_MAX_TEMPLATE_IDS];
    size_t npre = 0, nsuf = 0;
    int seen_a = 0;
    json_t *piece;
    size_t i;
    json_array_foreach(single, i, piece)
    {
        json_t *st = json_object_get(piece, "SpecialToken"), *sq = json_object_get(piece, "Sequence");
        if (sq) {
            if (seen_a) FAIL("TemplateProcessing single template names a sequence twice");
            seen_a = 1;
            continue;
        }
        const char *name = jstr(st, "id", NULL);
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            FAIL("TemplateProcessing special token %s has no ids", name ? name : "(unnamed)");
        json_t *x;
        size_t k;
        json_array_foreach(ids, k, x)
        {
            if (npre + nsuf >= TOK_MAX_TEMPLATE_IDS) FAIL("template of more than %d ids", TOK_MAX_TEMPLATE_IDS);
            int64_t v = json_integer_value(x);
            int32_t id = (int32_t)(!json_is_integer(x) || v < 0 || v > INT32_MAX ? -1 : v);
            if (seen_a)
                suf[nsuf++] = id;
            else
                pre[npre++] = id;
        }
    }
    if (!seen_a) FAIL("TemplateProcessing single template without $A");
    return pp_wrap(t, acc, pre, npre, suf, nsuf, err, errlen);
}

int model_tok_set_post(model_tok *t, const int32_t *pre, size_t npre, const int32_t *suf, size_t nsuf)
{
    t->pp_prefix = malloc((npre + 1) * sizeof *pre);
    t->pp_suffix = malloc((nsuf + 1) * sizeof *suf);
    if (!t->pp_prefix || !t->pp_suffix) return -1;
    memcpy(t->pp_prefix, pre, npre * sizeof *pre);
    memcpy(t->pp_suffix, suf, nsuf * sizeof *suf);
    t->n_prefix = npre;
    t->n_suffix = nsuf;
    return 0;
}

int model_tok_load_pipeline(model_tok *t, void *root_, char *err, size_t errlen)
{
    json_t *root = root_;
    json_t *dec = json_object_get(root, "decoder");
    pp_acc pp;
    memset(&pp, 0, sizeof pp);
    if (add_norm(t, json_object_get(root, "normalizer"), 0, err, errlen) ||
        add_pre(t, json_object_get(root, "pre_tokenizer"), 0, err, errlen) ||
        (dec && !json_is_null(dec) && add_dec(t, dec, 0, err, errlen)) ||
        add_post(t, &pp, json_object_get(root, "post_processor"), 0, err, errlen))
        return -1;
    t->has_decoder = dec && !json_is_null(dec);
    if (model_tok_set_post(t, pp.pre, pp.npre, pp.suf, pp.nsuf)) FAIL("out of memory");
    snprintf(t->pp_desc, sizeof t->pp_desc, "%s", pp.desc[0] ? pp.desc : "none");
    snprintf(t->special_note, sizeof t->special_note,
             "special tokens from the tokenizer.json post-processor (%s): %zu before, %zu after the text",
             t->pp_desc, pp.npre, pp.nsuf);
    return 0;
}

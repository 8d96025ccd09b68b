/* model/tok/tok_load.c — reads tokenizer.json (+ tokenizer_config.json) into an immutable
 * model_tok.
 *
 * Every count, id and string length from the files is checked against the limits in
 * model/tok/tok_internal.h before it sizes an allocation. Unsupported components (another model
 * type, a normalizer or decoder tokenizers has but Llama-family files do not use) fail the load
 * with a message naming them, rather than tokenizing differently from the reference. */
#include "model/tok/tok_internal.h"
#include "model/tok/tok_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static json_t *load_json(const char *path, size_t limit, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot read", path);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > limit) {
        snprintf(err, errlen, "%s: not a regular file of at most %zu bytes", path, limit);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) {
        snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: not a JSON object", path);
        json_decref(j);
        return NULL;
    }
    return j;
}

/* ---------------------------------------------------------------- model (BPE) */
static int set_piece(model_tok *t, int32_t id, const char *s, uint32_t n)
{
    t->piece[id] = s;
    t->piece_len[id] = n;
    return 0;
}

static int load_merges(model_tok *t, json_t *merges, char *err, size_t errlen)
{
    size_t n = json_array_size(merges);
    if (!json_is_array(merges)) FAIL("model.merges is not an array");
    if (n > TOK_MAX_MERGES) FAIL("%zu merges (limit %d)", n, TOK_MAX_MERGES);
    if (model_tok_pairs_init(&t->merges, n)) FAIL("out of memory");
    char cat[2 * TOK_MAX_TOKEN_BYTES + 1];
    uint32_t rank = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t sl = json_string_length(m);
            if (sl >= 8 && memcmp(s, "#version", 8) == 0) continue; /* merges.txt header line */
            const char *sp = memchr(s, ' ', sl);
            if (!sp || memchr(sp + 1, ' ', sl - (size_t)(sp + 1 - s))) {
                FAIL("merge %zu \"%.40s\" is not two tokens separated by one space", i, s);
            }
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = sl - al - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            al = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            bl = json_string_length(json_array_get(m, 1));
        } else {
            FAIL("merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        int32_t ia = model_tok_map_get(&t->vocab, a, al), ib = model_tok_map_get(&t->vocab, b, bl);
        if (ia < 0 || ib < 0) {
            FAIL("merge %zu names a token missing from the vocabulary (\"%.*s\")", i,
                 (int)(ia < 0 ? (al > 40 ? 40 : al) : (bl > 40 ? 40 : bl)), ia < 0 ? a : b);
        }
        /* The merged token is a + b without b's continuing_subword_prefix, as tokenizers builds it. */
        size_t skip = t->cont_prefix_len;
        if (bl < skip || al > TOK_MAX_TOKEN_BYTES || bl > TOK_MAX_TOKEN_BYTES) {
            FAIL("merge %zu: token too short or too long", i);
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b + skip, bl - skip);
        int32_t im = model_tok_map_get(&t->vocab, cat, al + bl - skip);
        if (im < 0) {
            FAIL("merge %zu: merged token \"%.*s\" is not in the vocabulary", i,
                 (int)((al + bl - skip) > 40 ? 40 : al + bl - skip), cat);
        }
        if (model_tok_pairs_put(&t->merges, ia, ib, rank++, im)) {
            FAIL("out of memory");
        }
    }
    return 0;
}

static int load_model(model_tok *t, json_t *model, json_t *added, char *err, size_t errlen)
{
    if (!json_is_object(model)) FAIL("no \"model\" object");
    const char *type = jstr(model, "type", NULL);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (type ? strcmp(type, "BPE") != 0 : !merges)
        FAIL("model type %s is not supported (only BPE)", type ? type : "(none)");
    if (!json_is_object(vocab) || !merges) FAIL("BPE model without vocab/merges");
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        FAIL("BPE dropout %g is a training option; not supported", json_number_value(dropout));

    size_t nv = json_object_size(vocab), na = json_array_size(added);
    if (nv > TOK_MAX_VOCAB) FAIL("vocabulary of %zu entries (limit %d)", nv, TOK_MAX_VOCAB);
    if (na > TOK_MAX_ADDED) FAIL("%zu added tokens (limit %d)", na, TOK_MAX_ADDED);

    /* Pass 1: bounds and the id range. */
    int64_t max_id = -1;
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(vocab, key, klen, val)
    {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= TOK_MAX_VOCAB)
            FAIL("vocab entry \"%.40s\": id is not an integer in [0, %d)", key, TOK_MAX_VOCAB);
        if (klen == 0 || klen > TOK_MAX_TOKEN_BYTES)
            FAIL("vocab entry of %zu bytes (limit %d)", klen, TOK_MAX_TOKEN_BYTES);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < na; i++) {
        json_t *a = json_array_get(added, i), *id = json_object_get(a, "id");
        size_t cl;
        const char *c = jstr(a, "content", &cl);
        if (!c || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= TOK_MAX_VOCAB)
            FAIL("added_tokens[%zu]: needs \"content\" and an \"id\" in [0, %d)", i, TOK_MAX_VOCAB);
        if (cl > TOK_MAX_TOKEN_BYTES)
            FAIL("added token of %zu bytes (limit %d)", cl, TOK_MAX_TOKEN_BYTES);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) FAIL("empty vocabulary");
    t->n_ids = (int32_t)(max_id + 1);
    t->piece = calloc((size_t)t->n_ids, sizeof *t->piece);
    t->piece_len = calloc((size_t)t->n_ids, sizeof *t->piece_len);
    t->flags = calloc((size_t)t->n_ids, 1);
    if (!t->piece || !t->piece_len || !t->flags || model_tok_map_init(&t->vocab, nv))
        FAIL("out of memory");

    /* Pass 2: the vocabulary. */
    json_object_keylen_foreach(vocab, key, klen, val)
    {
        char *s = model_tok_arena_dup(&t->arena, key, klen);
        int32_t id = (int32_t)json_integer_value(val);
        if (!s || model_tok_map_put(&t->vocab, s, klen, id)) FAIL("out of memory");
        set_piece(t, id, s, (uint32_t)klen);
    }

    size_t pl = 0, sl = 0;
    const char *p = jstr(model, "continuing_subword_prefix", &pl);
    const char *sfx = jstr(model, "end_of_word_suffix", &sl);
    if (pl > 64 || sl > 64) FAIL("continuing_subword_prefix/end_of_word_suffix over 64 bytes");
    if (p && pl) {
        t->cont_prefix = model_tok_arena_dup(&t->arena, p, pl);
        t->cont_prefix_len = pl;
    }
    if (sfx && sl) {
        t->eow_suffix = model_tok_arena_dup(&t->arena, sfx, sl);
        t->eow_suffix_len = sl;
    }
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    t->byte_fallback = jbool(model, "byte_fallback", 0);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    t->unk_id = -1;
    size_t ul;
    const char *unk = jstr(model, "unk_token", &ul);
    if (unk) {
        t->unk_id = model_tok_map_get(&t->vocab, unk, ul);
        if (t->unk_id < 0) FAIL("unk_token \"%.40s\" is not in the vocabulary", unk);
    }
    return load_merges(t, merges, err, errlen);
}

/* ---------------------------------------------------------------- added tokens */
int model_tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t term)
{
    if (tr->n == 0) {
        tr->cap = 64;
        tr->child = malloc(tr->cap * sizeof *tr->child);
        tr->sibling = malloc(tr->cap * sizeof *tr->sibling);
        tr->term = malloc(tr->cap * sizeof *tr->term);
        tr->label = malloc(tr->cap);
        if (!tr->child || !tr->sibling || !tr->term || !tr->label) return -1;
        tr->child[0] = tr->sibling[0] = tr->term[0] = -1;
        tr->label[0] = 0;
        tr->n = 1;
        tr->empty = 1;
    }
    if (n == 0) return 0;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t ch = tr->child[node];
        while (ch >= 0 && tr->label[ch] != c) ch = tr->sibling[ch];
        if (ch < 0) {
            if (tr->n == tr->cap) {
                size_t cap = tr->cap * 2;
                int32_t *a = realloc(tr->child, cap * sizeof *a);
                if (a) tr->child = a;
                int32_t *b = realloc(tr->sibling, cap * sizeof *b);
                if (b) tr->sibling = b;
                int32_t *d = realloc(tr->term, cap * sizeof *d);
                if (d) tr->term = d;
                uint8_t *l = realloc(tr->label, cap);
                if (l) tr->label = l;
                if (!a || !b || !d || !l) return -1;
                tr->cap = cap;
            }
            ch = (int32_t)tr->n++;
            tr->child[ch] = tr->term[ch] = -1;
            tr->label[ch] = c;
            tr->sibling[ch] = tr->child[node];
            tr->child[node] = ch;
        }
        node = ch;
    }
    if (tr->term[node] < 0) tr->term[node] = term; /* a duplicate pattern keeps the first token */
    tr->first[(uint8_t)s[0]] = 1;
    tr->empty = 0;
    return 0;
}

void model_tok_trie_free(tok_trie *tr)
{
    free(tr->child);
    free(tr->sibling);
    free(tr->term);
    free(tr->label);
    memset(tr, 0, sizeof *tr);
}

static int load_added(model_tok *t, json_t *added, char *err, size_t errlen)
{
    size_t na = json_array_size(added);
    t->added = calloc(na ? na : 1, sizeof *t->added);
    if (!t->added || model_tok_map_init(&t->added_map, na)) FAIL("out of memory");
    for (size_t i = 0; i < na; i++) {
        json_t *a = json_array_get(added, i);
        size_t cl = 0;
        const char *c = jstr(a, "content", &cl);
        if (!c || cl == 0) continue; /* tokenizers ignores empty added tokens */
        tok_added *x = &t->added[t->n_added];
        x->content = model_tok_arena_dup(&t->arena, c, cl);
        if (!x->content) FAIL("out of memory");
        x->len = (uint32_t)cl;
        /* An added token already in the model vocabulary keeps the vocabulary's id
         * (tokenizers' token_to_id); a new one takes the id the file gives it. */
        int32_t vid = model_tok_map_get(&t->vocab, c, cl);
        x->id = vid >= 0 ? vid : (int32_t)json_integer_value(json_object_get(a, "id"));
        x->single_word = (uint8_t)jbool(a, "single_word", 0);
        x->lstrip = (uint8_t)jbool(a, "lstrip", 0);
        x->rstrip = (uint8_t)jbool(a, "rstrip", 0);
        x->special = (uint8_t)jbool(a, "special", 0);
        x->normalized = (uint8_t)jbool(a, "normalized", !x->special);
        set_piece(t, x->id, x->content, x->len);
        if (model_tok_map_put(&t->added_map, x->content, x->len, x->id)) FAIL("out of memory");
        t->flags[x->id] |= TOK_F_ADDED | (x->special ? TOK_F_SPECIAL : 0);
        t->n_added++;
    }
    return 0;
}

static int has_cp(const char *s, size_t n, uint32_t want)
{
    size_t l;
    uint32_t cp;
    for (size_t i = 0; i < n; i += l)
        if (proto_utf8_scan((const uint8_t *)s + i, n - i, &l, &cp) != PROTO_UTF8_OK || cp == want)
            return 1; /* not UTF-8: nothing is proved */
    return 0;
}

/* The normalizer step that could turn text without the special token x's content c into the
 * pattern x is matched by (c normalized), or NULL when none can. The escaping takes every raw c
 * out of the content (model/tok/tok_escape.c), and the encoder rejects a special match that
 * overlaps one put back, so a normalized special is safe when every match of N(c) in N(y) comes
 * from a c in y, in place. It does for a sequence of these steps, by induction over them:
 *  - Prepend s: s + c at j in s + y puts c at j in y, whatever s holds;
 *  - Replace of one character r by a non-empty string q, r not in c and no character of q in c:
 *    c then stays as it is, every character of the output that is not one of y's left as it was
 *    is in some step's q (a later step's may replace q's, with its own q), so an occurrence of c
 *    is made of y's own characters, neighbours in y as no character is replaced by nothing;
 *  - Strip before any Prepend, c not starting or ending with white space: the output is a
 *    piece of the input, and c is left as it is.
 * Lowercase, NFC/NFD/NFKC/NFKD and any other Replace (a pattern of several characters, a regex,
 * an empty content) can map different texts onto c ("<S>" lowercases to "<s>", full-width
 * "＜s＞" is "<s>" under NFKC, NFD splits "≯" into ">" and a combining mark): not proved. */
static const char *norm_unsafe_step(const model_tok *t, const tok_added *x)
{
    static const char *const names[] = {
        [TOK_NORM_NFC] = "NFC",
        [TOK_NORM_NFD] = "NFD",
        [TOK_NORM_NFKC] = "NFKC",
        [TOK_NORM_NFKD] = "NFKD",
        [TOK_NORM_LOWERCASE] = "Lowercase",
    };
    int prepended = 0;
    for (int i = 0; i < t->n_norm; i++) {
        const tok_norm *nm = &t->norm[i];
        switch (nm->kind) {
        case TOK_NORM_PREPEND:
            prepended = 1;
            break;
        case TOK_NORM_REPLACE:
            if (!nm->one_cp || !nm->str_len || has_cp(x->content, x->len, nm->one_cp))
                return "Replace";
            for (size_t k = 0, l; k < nm->str_len; k += l) {
                uint32_t cp;
                if (proto_utf8_scan((const uint8_t *)nm->str + k, nm->str_len - k, &l, &cp) !=
                        PROTO_UTF8_OK ||
                    has_cp(x->content, x->len, cp))
                    return "Replace";
            }
            break;
        case TOK_NORM_STRIP: {
            size_t l, k = proto_utf8_prev(x->content, x->len);
            uint32_t first, last;
            if (prepended ||
                proto_utf8_scan((const uint8_t *)x->content, x->len, &l, &first) != PROTO_UTF8_OK ||
                proto_utf8_scan((const uint8_t *)x->content + k, x->len - k, &l, &last) !=
                    PROTO_UTF8_OK ||
                (nm->left && model_tok_cp_is_space(first)) ||
                (nm->right && model_tok_cp_is_space(last)))
                return "Strip";
            break;
        }
        default:
            return names[nm->kind];
        }
    }
    return NULL;
}

/* Sets t->esc_refusal for the special token x when the escaping cannot hold it. */
static void esc_check(model_tok *t, const tok_added *x)
{
    if (t->esc_refusal[0]) return; /* the first reason found is the one said */
    size_t d = 0;
    while (d < x->len && x->content[d] >= '0' && x->content[d] <= '9') d++;
    const char *step = x->normalized ? norm_unsafe_step(t, x) : NULL;
    if (d == x->len)
        snprintf(t->esc_refusal, sizeof t->esc_refusal,
                 "the special token '%.32s' is made of digits, which the escaping's markers could "
                 "hold",
                 x->content);
    else if (step)
        snprintf(t->esc_refusal, sizeof t->esc_refusal,
                 "the special token '%.32s' is matched after the normalizer, whose %s step could "
                 "turn other text into it",
                 x->content, step);
}

/* Matchers: non-normalized tokens match the raw text; normalized ones match the normalized text
 * as their own content normalized (so Llama-2's "<s>" is looked for as "▁<s>"). */
static int build_tries(model_tok *t, char *err, size_t errlen)
{
    proto_buf nb = {0};
    if (model_tok_trie_add(&t->raw_trie, "", 0, -1) || model_tok_trie_add(&t->norm_trie, "", 0, -1))
        FAIL("out of memory");
    if (model_tok_trie_add(&t->spec_trie, "", 0, -1)) FAIL("out of memory");
    t->spec_json_plain = 1;
    for (size_t i = 0; i < t->n_added; i++) {
        tok_added *x = &t->added[i];
        if (x->special) {
            for (uint32_t k = 0; k < x->len; k++) {
                unsigned char ch = (unsigned char)x->content[k];
                if (ch < 0x20 || ch == '"' || ch == '\\' || ch == 0x7f) t->spec_json_plain = 0;
            }
            if (model_tok_trie_add(&t->spec_trie, x->content, x->len, (int32_t)i)) goto oom;
            if (!t->spec_min_len || x->len < t->spec_min_len) t->spec_min_len = x->len;
            t->spec_normalized |= x->normalized;
            esc_check(t, x);
        }
        if (!x->normalized) {
            if (model_tok_trie_add(&t->raw_trie, x->content, x->len, (int32_t)i)) goto oom;
            continue;
        }
        if (model_tok_normalize(t, x->content, x->len, &nb)) goto oom;
        x->norm = model_tok_arena_dup(&t->arena, nb.p ? nb.p : "", nb.len);
        x->norm_len = (uint32_t)nb.len;
        if (!x->norm || model_tok_trie_add(&t->norm_trie, x->norm, x->norm_len, (int32_t)i))
            goto oom;
    }
    proto_buf_deinit(&nb);
    return 0;
oom:
    proto_buf_deinit(&nb);
    FAIL("out of memory");
}

/* ---------------------------------------------------------------- derived tables */
static int derive(model_tok *t, char *err, size_t errlen)
{
    char key[16];
    for (int b = 0; b < 256; b++) {
        snprintf(key, sizeof key, "<0x%02X>", b);
        t->byte_fb_id[b] = model_tok_map_get(&t->vocab, key, 6);
    }
    t->byte_mode = t->n_pre > 0 && t->pre[t->n_pre - 1].kind == TOK_PRE_BYTE_LEVEL;
    for (int i = 0; i + 1 < t->n_pre; i++)
        if (t->pre[i].kind == TOK_PRE_BYTE_LEVEL)
            FAIL("a ByteLevel pre-tokenizer followed by other pre-tokenizers is not supported");
    if (t->byte_mode) {
        if (t->cont_prefix || t->eow_suffix)
            FAIL("continuing_subword_prefix/end_of_word_suffix with ByteLevel is not supported");
        for (int b = 0; b < 256; b++) {
            size_t l = proto_utf8_put(key, model_tok_byte_char((uint8_t)b));
            t->byte_id[b] = model_tok_map_get(&t->vocab, key, l);
        }
        /* Tokens as raw bytes, for ignore_merges' whole-word look-up. */
        if (model_tok_map_init(&t->bvocab, t->vocab.n)) FAIL("out of memory");
        char *tmp = malloc(TOK_MAX_TOKEN_BYTES + 1);
        if (!tmp) FAIL("out of memory");
        for (size_t e = 0; e < t->vocab.n; e++) {
            const uint8_t *s = (const uint8_t *)t->vocab.key[e];
            size_t n = t->vocab.klen[e], o = 0, i = 0, l;
            uint32_t cp;
            int ok = 1;
            while (i < n && ok) {
                int c;
                if (proto_utf8_scan(s + i, n - i, &l, &cp) != PROTO_UTF8_OK ||
                    (c = model_tok_char_byte(cp)) < 0)
                    ok = 0;
                else
                    tmp[o++] = (char)c;
                i += l;
            }
            if (!ok) continue;
            char *raw = model_tok_arena_dup(&t->arena, tmp, o);
            if (!raw || model_tok_map_put(&t->bvocab, raw, o, t->vocab.val[e])) {
                free(tmp);
                FAIL("out of memory");
            }
        }
        free(tmp);
    }
    /* Char mode: single characters below U+0800 straight from a table (ids, -1: absent). */
    for (uint32_t cp = 0; cp < 0x800; cp++) {
        size_t l = proto_utf8_put(key, cp);
        t->cp_id[cp] = (t->cont_prefix || t->eow_suffix) ? -2 : model_tok_map_get(&t->vocab, key, l);
    }
    /* Cutting words before U+2581 is exact when no merge can ever cross such a cut: no token holds
     * "x▁" with x not U+2581 (true of SentencePiece vocabularies, whose ▁ only starts a piece), ▁
     * is itself a token (so it never fuses with an unknown neighbour) and nothing depends on where
     * a word starts or ends (no ignore_merges, prefix or suffix). */
    static const char meta[] = "\xE2\x96\x81";
    int ok = !t->byte_mode && !t->ignore_merges && !t->cont_prefix && !t->eow_suffix &&
             model_tok_map_get(&t->vocab, meta, 3) >= 0;
    for (size_t e = 0; ok && e < t->vocab.n; e++) {
        const char *s = t->vocab.key[e];
        size_t n = t->vocab.klen[e];
        for (size_t i = 1; i + 3 <= n; i++)
            if (!memcmp(s + i, meta, 3) && (i < 3 || memcmp(s + i - 3, meta, 3) != 0)) {
                ok = 0;
                break;
            }
    }
    t->spm_split = ok;
    return 0;
}

/* ---------------------------------------------------------------- tokenizer_config.json */
static const char *token_string(json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return jstr(v, "content", NULL);
    return NULL;
}

static int load_config(model_tok *t, const char *path, char *err, size_t errlen)
{
    json_t *c = load_json(path, TOK_MAX_CONFIG_BYTES, err, errlen);
    if (!c) return -1;
    const char *bos = token_string(json_object_get(c, "bos_token"));
    const char *eos = token_string(json_object_get(c, "eos_token"));
    if (bos && strlen(bos) <= TOK_MAX_TOKEN_BYTES) {
        t->bos_token = model_tok_arena_dup(&t->arena, bos, strlen(bos));
        t->bos_id = model_tok_id(t, bos);
    }
    if (eos && strlen(eos) <= TOK_MAX_TOKEN_BYTES) {
        t->eos_token = model_tok_arena_dup(&t->arena, eos, strlen(eos));
        t->eos_id = model_tok_id(t, eos);
    }
    t->clean_up_spaces = jbool(c, "clean_up_tokenization_spaces", 0);
    json_t *ct = json_object_get(c, "chat_template");
    const char *tpl = NULL;
    if (json_is_string(ct)) {
        tpl = json_string_value(ct);
    } else if (json_is_array(ct)) {
        json_t *x;
        size_t i;
        json_array_foreach(ct, i, x)
        {
            const char *name = jstr(x, "name", NULL);
            if (name && !strcmp(name, "default")) tpl = jstr(x, "template", NULL);
        }
    }
    if (tpl) t->chat_template = model_tok_arena_dup(&t->arena, tpl, strlen(tpl));

    /* Which special tokens encode adds (transformers): a LlamaTokenizer-family class always
     * rebuilds the template from add_bos_token (default true) and add_eos_token (default false);
     * any other class does so only when the config names one of the flags (absent = false). */
    json_t *jb = json_object_get(c, "add_bos_token"), *je = json_object_get(c, "add_eos_token");
    const char *cls = jstr(c, "tokenizer_class", NULL);
    static const char *llama_like[] = {"LlamaTokenizer",     "LlamaTokenizerFast",
                                       "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
                                       "GemmaTokenizer",     "GemmaTokenizerFast"};
    int llama = 0;
    for (size_t i = 0; cls && i < sizeof llama_like / sizeof *llama_like; i++)
        if (!strcmp(cls, llama_like[i])) llama = 1;
    int has_b = json_is_boolean(jb), has_e = json_is_boolean(je);
    if (llama || has_b || has_e) {
        int add_b = has_b ? json_is_true(jb) : llama, add_e = has_e && json_is_true(je);
        if (add_b && t->bos_id < 0) add_b = 0; /* no bos token: nothing to add (transformers) */
        if (add_e && t->eos_id < 0) add_e = 0;
        free(t->pp_prefix);
        free(t->pp_suffix);
        t->pp_prefix = t->pp_suffix = NULL;
        if (model_tok_set_post(t, &t->bos_id, (size_t)add_b, &t->eos_id, (size_t)add_e)) {
            json_decref(c);
            FAIL("out of memory");
        }
        snprintf(t->special_note, sizeof t->special_note,
                 "special tokens from tokenizer_config.json (%s%s): add_bos_token=%s add_eos_token=%s "
                 "(they replace the tokenizer.json %s post-processor)",
                 cls ? "class " : "", cls ? cls : "flags", add_b ? "true" : "false",
                 add_e ? "true" : "false", t->pp_desc);
    }
    json_decref(c);
    return 0;
}

/* ---------------------------------------------------------------- entry points */
model_tok *model_tok_load(const char *json_path, const char *config_path, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    if (!json_path) {
        snprintf(err, errlen, "no tokenizer.json path");
        return NULL;
    }
    model_tok *t = calloc(1, sizeof *t);
    json_t *root = NULL;
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->bos_id = t->eos_id = -1;
    t->norm = calloc(TOK_MAX_STEPS, sizeof *t->norm);
    t->pre = calloc(TOK_MAX_STEPS, sizeof *t->pre);
    t->dec = calloc(TOK_MAX_STEPS, sizeof *t->dec);
    if (!t->norm || !t->pre || !t->dec) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    root = load_json(json_path, TOK_MAX_FILE_BYTES, err, errlen);
    if (!root) goto fail;
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added)) {
        snprintf(err, errlen, "%s: added_tokens is not an array", json_path);
        goto fail;
    }
    if (load_model(t, json_object_get(root, "model"), added, err, errlen) ||
        load_added(t, added, err, errlen) || model_tok_load_pipeline(t, root, err, errlen) ||
        derive(t, err, errlen) || build_tries(t, err, errlen)) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s: %s", json_path, err);
        snprintf(err, errlen, "%s", tmp);
        goto fail;
    }
    json_decref(root);
    root = NULL;
    if (config_path && load_config(t, config_path, err, errlen)) goto fail;
    return t;
fail:
    if (root) json_decref(root);
    model_tok_free(t);
    return NULL;
}

model_tok *model_tok_load_dir(const char *dir, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (!dir) {
        snprintf(err, errlen, "no model directory");
        return NULL;
    }
    size_t dl = strlen(dir);
    if (dl > 3900) {
        snprintf(err, errlen, "model directory path too long");
        return NULL;
    }
    char tj[4096], tc[4096], jt[4096];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
    snprintf(jt, sizeof jt, "%s/chat_template.jinja", dir);
    struct stat st;
    model_tok *t = model_tok_load(tj, stat(tc, &st) == 0 ? tc : NULL, err, errlen);
    if (!t) return NULL;
    /* transformers prefers a separate chat_template.jinja to the config's entry. */
    FILE *f = fopen(jt, "rb");
    if (f) {
        proto_buf b = {0};
        char chunk[65536];
        size_t n;
        int bad = 0;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            if (b.len + n > TOK_MAX_CONFIG_BYTES || proto_buf_add(&b, chunk, n)) bad = 1;
        fclose(f);
        if (bad || proto_buf_add(&b, "", 0)) {
            proto_buf_deinit(&b);
            model_tok_free(t);
            snprintf(err, errlen, "%s: too large or out of memory", jt);
            return NULL;
        }
        t->chat_template = model_tok_arena_dup(&t->arena, b.p, b.len);
        proto_buf_deinit(&b);
    }
    return t;
}

void model_tok_free(model_tok *t)
{
    if (!t) return;
    for (int i = 0; i < TOK_MAX_STEPS && t->norm; i++) model_tok_re_free(&t->norm[i].re);
    for (int i = 0; i < TOK_MAX_STEPS && t->pre; i++) model_tok_re_free(&t->pre[i].re);
    for (int i = 0; i < TOK_MAX_STEPS && t->dec; i++) model_tok_re_free(&t->dec[i].re);
    free(t->norm);
    free(t->pre);
    free(t->dec);
    free(t->piece);
    free(t->piece_len);
    free(t->flags);
    free(t->added);
    free(t->pp_prefix);
    free(t->pp_suffix);
    model_tok_map_free(&t->vocab);
    model_tok_map_free(&t->bvocab);
    model_tok_map_free(&t->added_map);
    model_tok_pairs_free(&t->merges);
    model_tok_trie_free(&t->raw_trie);
    model_tok_trie_free(&t->norm_trie);
    model_tok_trie_free(&t->spec_trie);
    model_tok_arena_free(&t->arena);
    free(t);
}

/* model/tok/tok_bpe.c — the BPE model on one pre-tokenized piece.
 *
 * Same algorithm as tokenizers' Word::merge_all: symbols in a linked list, every adjacent pair
 * that has a merge in a min-heap keyed by (merge rank, position); pop the best, skip it if either
 * side changed since it was pushed, merge, push the two new neighbour pairs. O(n log n) per
 * piece, exact ties included (lower position first), so long pieces (SentencePiece files have no
 * pre-tokenizer: the whole text is one piece) stay fast.
 *
 * Initial symbols: byte mode (ByteLevel pre-tokenizer) takes one symbol per raw byte; char mode
 * one per UTF-8 character, with byte fallback <0xNN> and (fused) unk for characters not in the
 * vocabulary, exactly as tokenizers' BPE::merge_word orders them.
 *
 * Two exact shortcuts: a per-call cache of piece -> ids (long inputs repeat their words), and for
 * SentencePiece vocabularies a cut before every "▁" that follows another character (see
 * derive() in model/tok/tok_load.c for why no merge can cross it). */
#include "model/tok/tok_internal.h"
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- heap of candidate merges */
static inline int heap_less(const tok_heap_ent *a, const tok_heap_ent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(tok_work *w, uint32_t rank, uint32_t pos, int32_t id)
{
    if (w->heap_len == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 256;
        tok_heap_ent *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return -1;
        w->heap = h;
        w->heap_cap = cap;
    }
    tok_heap_ent e = {rank, pos, id};
    size_t i = w->heap_len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&e, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = e;
    return 0;
}

static tok_heap_ent heap_pop(tok_work *w)
{
    tok_heap_ent top = w->heap[0], last = w->heap[--w->heap_len];
    size_t i = 0, n = w->heap_len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!heap_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* ---------------------------------------------------------------- one word */
typedef struct syms {
    tok_work *w;
    size_t n;
    int32_t unk; /* pending unk id (fuse_unk joins runs of unknown characters), -1: none */
} syms;

static int sym_add(syms *s, int32_t id)
{
    tok_work *w = s->w;
    if (s->n == w->sym_cap) {
        size_t cap = w->sym_cap ? w->sym_cap * 2 : 256;
        tok_sym *p = realloc(w->sym, cap * sizeof *p);
        if (!p) return -1;
        w->sym = p;
        w->sym_cap = cap;
    }
    w->sym[s->n] = (tok_sym){id, (int32_t)s->n - 1, -1};
    if (s->n) w->sym[s->n - 1].next = (int32_t)s->n;
    s->n++;
    return 0;
}

/* A known character: a pending unk goes first. */
static int add_known(syms *s, int32_t id)
{
    if (s->unk >= 0) {
        if (sym_add(s, s->unk)) return -1;
        s->unk = -1;
    }
    return sym_add(s, id);
}

/* A character (key: with prefix/suffix applied) missing from the vocabulary: its bytes as <0xNN>
 * tokens when all exist, else unk (fused or not), else dropped — tokenizers' order, in which byte
 * tokens do not flush a pending unk. */
static int add_unknown(syms *s, const model_tok *t, const uint8_t *key, size_t n)
{
    if (t->byte_fallback) {
        size_t i = 0;
        while (i < n && t->byte_fb_id[key[i]] >= 0) i++;
        if (i == n) {
            for (i = 0; i < n; i++)
                if (sym_add(s, t->byte_fb_id[key[i]])) return -1;
            return 0;
        }
    }
    if (t->unk_id < 0) return 0;
    if (s->unk >= 0 && !t->fuse_unk && sym_add(s, s->unk)) return -1;
    s->unk = t->unk_id;
    return 0;
}

static int32_t lookup_char(const model_tok *t, const char *s, size_t i, size_t l, size_t n,
                           uint32_t cp, proto_buf *key)
{
    if (cp < 0x800 && t->cp_id[cp] != -2) return t->cp_id[cp];
    key->len = 0;
    if (i > 0 && t->cont_prefix && proto_buf_add(key, t->cont_prefix, t->cont_prefix_len))
        return -3;
    if (proto_buf_add(key, s + i, l)) return -3;
    if (i + l == n && t->eow_suffix && proto_buf_add(key, t->eow_suffix, t->eow_suffix_len))
        return -3;
    return model_tok_map_get(&t->vocab, key->p, key->len);
}

static int word(tok_work *w, const char *s, size_t n)
{
    const model_tok *t = w->t;
    if (t->ignore_merges) {
        int32_t id = t->byte_mode ? model_tok_map_get(&t->bvocab, s, n)
                                  : model_tok_map_get(&t->vocab, s, n);
        if (id >= 0) return model_tok_ids_put(&w->out, &id, 1);
    }
    syms sy = {w, 0, -1};
    if (t->byte_mode) {
        for (size_t i = 0; i < n; i++) {
            uint8_t b = (uint8_t)s[i];
            if (t->byte_id[b] >= 0) {
                if (add_known(&sy, t->byte_id[b])) return -1;
            } else {
                char k[4];
                size_t kl = proto_utf8_put(k, model_tok_byte_char(b));
                if (add_unknown(&sy, t, (const uint8_t *)k, kl)) return -1;
            }
        }
    } else {
        for (size_t i = 0; i < n;) {
            size_t l;
            uint32_t cp;
            if (proto_utf8_scan((const uint8_t *)s + i, n - i, &l, &cp) != PROTO_UTF8_OK)
                cp = 0x110000; /* cannot happen (input is sanitized); keep going byte-wise */
            int32_t id = lookup_char(t, s, i, l, n, cp, &w->tmp);
            if (id == -3) return -1;
            if (id >= 0) {
                if (add_known(&sy, id)) return -1;
            } else {
                int whole = id == -1 && cp < 0x800 && t->cp_id[cp] != -2;
                if (add_unknown(&sy, t, whole ? (const uint8_t *)s + i : (const uint8_t *)w->tmp.p,
                                whole ? l : w->tmp.len))
                    return -1;
            }
            i += l;
        }
    }
    if (sy.unk >= 0 && sym_add(&sy, sy.unk)) return -1;
    if (sy.n == 0) return 0;

    tok_sym *sym = w->sym;
    uint32_t rank;
    int32_t merged;
    w->heap_len = 0;
    for (size_t i = 0; i + 1 < sy.n; i++)
        if (model_tok_pairs_get(&t->merges, sym[i].id, sym[i + 1].id, &rank, &merged) &&
            heap_push(w, rank, (uint32_t)i, merged))
            return -1;
    while (w->heap_len) {
        tok_heap_ent top = heap_pop(w);
        tok_sym *cur = &sym[top.pos];
        if (cur->id < 0 || cur->next < 0) continue; /* merged away, or now last */
        int32_t nx = cur->next;
        /* still the same pair? (its merge result identifies it) */
        if (!model_tok_pairs_get(&t->merges, cur->id, sym[nx].id, &rank, &merged) ||
            merged != top.id)
            continue;
        cur->id = top.id;
        cur->next = sym[nx].next;
        sym[nx].id = -1;
        if (cur->next >= 0) sym[cur->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 &&
            model_tok_pairs_get(&t->merges, sym[cur->prev].id, cur->id, &rank, &merged) &&
            heap_push(w, rank, (uint32_t)cur->prev, merged))
            return -1;
        if (cur->next >= 0 &&
            model_tok_pairs_get(&t->merges, cur->id, sym[cur->next].id, &rank, &merged) &&
            heap_push(w, rank, top.pos, merged))
            return -1;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) /* the first symbol is never merged away */
        if (model_tok_ids_put(&w->out, &sym[i].id, 1)) return -1;
    return 0;
}

/* ---------------------------------------------------------------- cache */
#define CACHE_MAX_KEY 256        /* longer pieces are rare and cheap to redo relative to their size */
#define CACHE_MAX_ENTRIES (1u << 20)

static int cache_grow(tok_cache *c)
{
    size_t slots = c->mask ? (c->mask + 1) * 2 : 4096;
    tok_cache n = *c;
    n.hash = calloc(slots, sizeof *n.hash);
    n.key_off = malloc(slots * sizeof *n.key_off);
    n.key_len = malloc(slots * sizeof *n.key_len);
    n.ids_off = malloc(slots * sizeof *n.ids_off);
    n.ids_len = malloc(slots * sizeof *n.ids_len);
    if (!n.hash || !n.key_off || !n.key_len || !n.ids_off || !n.ids_len) {
        free(n.hash);
        free(n.key_off);
        free(n.key_len);
        free(n.ids_off);
        free(n.ids_len);
        return -1;
    }
    n.mask = slots - 1;
    for (size_t i = 0; c->hash && i <= c->mask; i++) {
        if (!c->hash[i]) continue;
        size_t j = c->hash[i] & n.mask;
        while (n.hash[j]) j = (j + 1) & n.mask;
        n.hash[j] = c->hash[i];
        n.key_off[j] = c->key_off[i];
        n.key_len[j] = c->key_len[i];
        n.ids_off[j] = c->ids_off[i];
        n.ids_len[j] = c->ids_len[i];
    }
    free(c->hash);
    free(c->key_off);
    free(c->key_len);
    free(c->ids_off);
    free(c->ids_len);
    *c = n;
    return 0;
}

static int cached_word(tok_work *w, const char *s, size_t n)
{
    tok_cache *c = &w->cache;
    if (!w->use_cache || n > CACHE_MAX_KEY) return word(w, s, n);
    uint64_t h = model_tok_hash_from(c->seed, s, n) | 1;
    if (c->mask) {
        for (size_t i = h & c->mask; c->hash[i]; i = (i + 1) & c->mask)
            if (c->hash[i] == h && c->key_len[i] == n && !memcmp(c->keys.p + c->key_off[i], s, n))
                return model_tok_ids_put(&w->out, c->ids_len[i] ? c->ids.p + c->ids_off[i] : NULL,
                                         c->ids_len[i]);
    }
    size_t start = w->out.len;
    if (word(w, s, n)) return -1;
    if (c->n >= CACHE_MAX_ENTRIES || c->keys.len + n > UINT32_MAX / 2 ||
        c->ids.len + (w->out.len - start) > UINT32_MAX / 2)
        return 0;
    if ((c->n + 1) * 2 > (c->mask ? c->mask + 1 : 0) && cache_grow(c)) return 0; /* no cache: fine */
    size_t i = h & c->mask;
    while (c->hash[i]) i = (i + 1) & c->mask;
    size_t ko = c->keys.len, io = c->ids.len;
    /* a word may encode to no ids (no unk token): then out.p and ids.p may still be NULL, and
     * NULL + 0 is undefined in C */
    if (proto_buf_add(&c->keys, s, n) ||
        model_tok_ids_put(&c->ids, w->out.len > start ? w->out.p + start : NULL, w->out.len - start))
        return -1;
    c->hash[i] = h;
    c->key_off[i] = (uint32_t)ko;
    c->key_len[i] = (uint32_t)n;
    c->ids_off[i] = (uint32_t)io;
    c->ids_len[i] = (uint32_t)(w->out.len - start);
    c->n++;
    return 0;
}

int model_tok_bpe(tok_work *w, const char *s, size_t n)
{
    if (!w->t->spm_split) return cached_word(w, s, n);
    static const char meta[] = "\xE2\x96\x81"; /* U+2581 */
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if (s[i] != meta[0] || memcmp(s + i, meta, 3) != 0) continue;
        if (i >= 3 && !memcmp(s + i - 3, meta, 3)) continue; /* inside a run of ▁: no cut */
        if (cached_word(w, s + start, i - start)) return -1;
        start = i;
    }
    return cached_word(w, s + start, n - start);
}

void model_tok_work_free(tok_work *w)
{
    model_tok_ids_free(&w->out);
    proto_buf_deinit(&w->text);
    proto_buf_deinit(&w->tmp);
    if (w->md) pcre2_match_data_free(w->md);
    free(w->sym);
    free(w->heap);
    tok_cache *c = &w->cache;
    free(c->hash);
    free(c->key_off);
    free(c->key_len);
    free(c->ids_off);
    free(c->ids_len);
    proto_buf_deinit(&c->keys);
    model_tok_ids_free(&c->ids);
    memset(w, 0, sizeof *w);
}

/* model/tok/tokenizer.h — Hugging Face tokenizer.json (model type BPE): text <-> token ids, the
 * same ids as the `tokenizers` library produces for the same file.
 *
 * Both BPE families real checkpoints use are handled by one pipeline, configured by the file:
 *   added tokens (matched first, never split) -> normalizer -> pre-tokenizer -> BPE model
 *   -> post-processor (BOS/EOS template);  decoding runs the file's decoder chain.
 * - SentencePiece-style (Llama-2, TinyLlama, Mistral): Prepend/Replace "▁" normalizers or a
 *   Metaspace pre-tokenizer, byte fallback <0xNN>, fuse_unk, decoder Replace/ByteFallback/Fuse/Strip.
 * - Byte-level (GPT-2, Llama-3, Qwen2): Split pre-tokenizers with the file's regex (PCRE2, UTF +
 *   UCP), ByteLevel byte<->unicode mapping, ignore_merges, the ByteLevel decoder.
 * Unicode normalizers (NFC, NFKC, ...) use ICU.
 *
 * Where tokenizers versions differ, this follows tokenizers 0.22 (transformers 4.57): an added
 * token decodes to its content (0.23 decodes a `normalized` added token to its normalized form).
 *
 * Special tokens on encode (add_special = 1): the tokenizer.json post-processor adds them
 * (TemplateProcessing, Roberta/Bert, Sequence). When a tokenizer_config.json is given and it
 * carries "add_bos_token" or "add_eos_token", those keys win, as transformers does: the template
 * becomes [bos] $A [eos] from the two flags (an absent flag is false, except add_bos_token of a
 * LlamaTokenizer/LlamaTokenizerFast/CodeLlama/Gemma class, whose class default is true).
 * model_tok_special_note() says which rule is in force.
 *
 * Decoding runs the file's decoder chain and then, when tokenizer_config.json sets
 * clean_up_tokenization_spaces to true, transformers' clean_up_tokenization (" ." -> ".",
 * " n't" -> "n't", ...), as transformers' decode() does (absent means false since 4.45).
 *
 * Text that is not valid UTF-8 is encoded as if each maximal invalid subsequence were U+FFFD (the
 * same as Python's bytes.decode(errors="replace") before tokenizing). Decoded text is always
 * valid UTF-8.
 *
 * Ownership and threads: a loaded model_tok is immutable; any number of threads may encode and
 * decode with it at once. A model_tok_stream belongs to one request (one thread at a time).
 * Every size read from the files is bounded (see model/tok/tok_internal.h) before use. */
#ifndef TANDEM_MODEL_TOKENIZER_H
#define TANDEM_MODEL_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct model_tok model_tok;

/* Loads tokenizer.json and, when tokenizer_config_path is not NULL, tokenizer_config.json (bos/eos
 * strings, add_bos_token/add_eos_token, chat_template). Returns NULL with a one-line reason in err
 * on any error (unreadable file, malformed JSON, unsupported model/normalizer/pre-tokenizer/decoder
 * type, a size over the limits, a merge naming an unknown token). */
model_tok *model_tok_load(const char *tokenizer_json_path, const char *tokenizer_config_path,
                          char *err, size_t errlen);
/* model_dir/tokenizer.json + model_dir/tokenizer_config.json (optional); a chat_template.jinja in
 * the directory overrides the config's chat_template, as transformers does. */
model_tok *model_tok_load_dir(const char *model_dir, char *err, size_t errlen);
void model_tok_free(model_tok *t);

/* Encodes len bytes of text (NUL bytes are text). add_special: add the post-processor's special
 * tokens (see above). On success returns 0 and a malloc'ed array in *ids_out (caller frees; NULL
 * when *n_out == 0). Returns -1 on out-of-memory, bad arguments or text over 1 GiB. */
int model_tok_encode(const model_tok *t, const char *text, size_t len, int add_special,
                     int32_t **ids_out, size_t *n_out);
/* Decodes ids to text (malloc'ed, NUL-terminated, caller frees; *len_out without the NUL).
 * skip_special drops special added tokens. Ids with no token (negative, past the vocabulary, holes)
 * are skipped, as tokenizers does. Returns 0, or -1 on out-of-memory / bad arguments. */
int model_tok_decode(const model_tok *t, const int32_t *ids, size_t n, int skip_special,
                     char **text_out, size_t *len_out);

/* Number of ids: one past the largest id of the model vocabulary and the added tokens. */
int model_tok_vocab_size(const model_tok *t);
/* Exact token string (as in the file: "▁the", "Ġthe", "<0x0A>", "<s>") -> id; -1 if none. */
int32_t model_tok_id(const model_tok *t, const char *token);
/* id -> token string (owned by t), NULL if the id has none. */
const char *model_tok_piece(const model_tok *t, int32_t id);
/* 1 when id is an added token marked special (skipped by skip_special). */
int model_tok_is_special(const model_tok *t, int32_t id);

/* A token's bytes as text, shown one token at a time: "▁" is a space and "<0xNN>" a byte in
 * SentencePiece-style vocabularies, the stand-in characters are bytes in byte-level ones
 * (byte_level: model_tok_is_byte_level's answer, asked once), a special token is its content.
 * out needs room for strlen(model_tok_piece(t, id)) bytes (a piece never grows). Returns the
 * length (0 for an id without a piece). Any thread. */
int model_tok_is_byte_level(const model_tok *t);
size_t model_tok_token_bytes(const model_tok *t, int32_t id, int byte_level, char *out);
/* 1 when the decoder drops the leading space of a text (SentencePiece's Strip / Metaspace
 * prepend: "▁Hello" alone decodes to "Hello"), so a generation's first token's space is no text. */
int model_tok_strips_first_space(const model_tok *t);
/* A token whose piece is "\u2581" and a letter (a word with its space), for such checks; -1 when
 * the vocabulary has none (byte-level ones: their spaces are "\u0120"). */
int32_t model_tok_space_probe(const model_tok *t);

/* Strings from tokenizer_config.json, owned by t; NULL when absent or no config was loaded. */
const char *model_tok_bos_token(const model_tok *t);
const char *model_tok_eos_token(const model_tok *t);
/* Their ids (-1 when absent or not in the vocabulary). */
int32_t model_tok_bos_id(const model_tok *t);
int32_t model_tok_eos_id(const model_tok *t);
/* "chat_template" (a string, or the entry named "default" of the list form), or
 * chat_template.jinja from the model directory; NULL if none. */
const char *model_tok_chat_template(const model_tok *t);
/* One line saying which special tokens encode adds and why (post-processor or config flags). */
const char *model_tok_special_note(const model_tok *t);

/* ---- Special-token strings in untrusted chat content are text (model/tok/tok_escape.c).
 * A chat is rendered by its template into one string that is encoded with the added tokens
 * recognised, so "<|eot_id|>" typed in a user message would be the control token and could forge
 * a turn or a role. Escaping, per request:
 *   model_tok_esc_init(&e);                                  a fresh nonce from the OS
 *   model_tok_esc_context(t, &e, ctx, len, scope, &esc);     the messages' content, escaped
 *   render the template with esc (or ctx when *esc is NULL);
 *   model_tok_encode_esc(t, &e, text, len, add_special, ...) the markers put back as text.
 * Each special token's string in the content becomes a marker of MODEL_TOK_ESC_MARK ASCII
 * digits (the nonce and the token's index) that the template passes through; the encoder puts
 * the string back and encodes it as text in place: pre-tokenized with the text around it, no
 * special token matched over it (tokenizers' split_special_tokens for that range). Non-special
 * added tokens still match there, as they do under split_special_tokens. A marker that the
 * template cut or changed stays text. Growth: a special string of L bytes becomes 27, so the
 * content grows at most 27 / L times (Llama-3's shortest, "<|eot_id|>": 2.7; Llama-2's "<s>": 9)
 * and never by more than MODEL_TOK_ESC_MAX_GROWTH bytes in all (the template's output limit, 64
 * MiB: a longer render would fail anyway). Any thread; e belongs to one request. */
enum model_tok_esc_scope {
    MODEL_TOK_ESC_OFF,       /* nothing escaped: transformers' apply_chat_template */
    MODEL_TOK_ESC_UNTRUSTED, /* every message's content but system and developer messages' */
    MODEL_TOK_ESC_ALL,       /* every message's content */
};
/* "off", "untrusted", "all" -> the scope; -1 for anything else. */
int model_tok_esc_scope_parse(const char *s);

#define MODEL_TOK_ESC_NONCE      20 /* decimal digits: 66 bits, drawn per request */
#define MODEL_TOK_ESC_MARK       (MODEL_TOK_ESC_NONCE + 7) /* + the added token's index, 7 digits */
#define MODEL_TOK_ESC_MAX_GROWTH ((size_t)64 << 20)
typedef struct model_tok_esc {
    char nonce[MODEL_TOK_ESC_NONCE];
    size_t n_escaped; /* markers made so far */
} model_tok_esc;
/* A fresh nonce (getrandom). 0, or -1 when the OS gives none. */
int model_tok_esc_init(model_tok_esc *e);

enum {
    MODEL_TOK_ESC_EFAIL = -1,   /* out of memory, or ctx is not JSON */
    MODEL_TOK_ESC_ETOOBIG = -2, /* the markers would add more than MODEL_TOK_ESC_MAX_GROWTH */
    MODEL_TOK_ESC_EVOCAB = -3,  /* this vocabulary's specials cannot be escaped (why: below) */
};
/* Why the escaping cannot keep this tokenizer's special tokens out of text, or NULL when it
 * can: a special token made only of digits (a marker could hold it), or one matched after the
 * normalizer whose normalizer could turn other text into it (Lowercase makes "<s>" of "<S>",
 * NFKC of full-width "＜s＞"). A server refuses to start with escaping on such a tokenizer
 * (escaping is then model_tok_esc_context's MODEL_TOK_ESC_EVOCAB). Static to t; any thread. */
const char *model_tok_esc_refusal(const model_tok *t);
/* ctx[0..len): a chat template context ({"messages": [{"role", "content": string}, ...], ...}).
 * Escapes the string content of the messages scope names. Returns 1 with the escaped context in
 * *out (malloc'ed JSON, NUL-terminated; caller frees), 0 with *out NULL when nothing needed
 * escaping (render ctx as it is), or a MODEL_TOK_ESC_E* code. */
int model_tok_esc_context(const model_tok *t, model_tok_esc *e, const char *ctx, size_t len,
                          enum model_tok_esc_scope scope, char **out);
/* model_tok_encode of a text rendered from an escaped context: each intact marker of e is put
 * back as its token's string and encoded as text. Without markers made (e->n_escaped == 0) it is
 * model_tok_encode. Returns 0, or -1 as model_tok_encode does. */
int model_tok_encode_esc(const model_tok *t, const model_tok_esc *e, const char *text, size_t len,
                         int add_special, int32_t **ids_out, size_t *n_out);
/* The rendered text with each intact marker put back (what a client sees of the prompt):
 * malloc'ed, NUL-terminated, *out_len bytes. 0, or -1 on out-of-memory. */
int model_tok_esc_restore(const model_tok *t, const model_tok_esc *e, const char *text, size_t len,
                          char **out, size_t *out_len);

/* Streaming decode for one generation. push() takes the next id and returns the text that is now
 * final (possibly ""): bytes that end inside a UTF-8 character, and byte-fallback runs that could
 * still turn out invalid, are held until they are complete. The returned pointer stays valid until
 * the next call on the stream. flush() ends the stream: held bytes come out (as U+FFFD where
 * invalid). The concatenation of everything returned equals model_tok_decode() of the same ids
 * with the same skip_special, including the decoder's strip of the first leading space.
 * push/flush return NULL only on out-of-memory (then *len = 0). */
typedef struct model_tok_stream model_tok_stream;
model_tok_stream *model_tok_stream_new(const model_tok *t, int skip_special);
const char *model_tok_stream_push(model_tok_stream *s, int32_t id, size_t *len);
const char *model_tok_stream_flush(model_tok_stream *s, size_t *len);
/* Feeds ids whose text is already shown (a completion's prompt): their output is dropped, their
 * effect on what follows is kept (Metaspace's and Strip's start-of-text rules, an unfinished
 * character or byte run, held spaces). A generation's stream skipped over its prompt returns
 * decode(prompt + generated) after the prompt's final text: the continuation that OpenAI-style
 * completions return (after "...a big dog", "\u2581named" is " named", not "named"). Returns -1 on
 * out-of-memory. */
int model_tok_stream_skip(model_tok_stream *s, const int32_t *ids, size_t n);
void model_tok_stream_free(model_tok_stream *s);

#endif

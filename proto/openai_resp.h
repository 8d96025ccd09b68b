/* proto/openai_resp.h — OpenAI response bodies and stream chunks from plain C structs.
 *
 * Shapes (OpenAI's API reference):
 *   /v1/completions       {"id","object":"text_completion","created","model",
 *                          "choices":[{"index","text","logprobs","finish_reason"}],"usage"}
 *     logprobs:           {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{tok:lp}],
 *                          "text_offset":[..]}
 *   /v1/chat/completions  {"id","object":"chat.completion","created","model",
 *                          "choices":[{"index","message":{"role","content"},"logprobs",
 *                          "finish_reason"}],"usage"}
 *     logprobs:           {"content":[{"token","logprob","bytes","top_logprobs":[{"token",
 *                          "logprob","bytes"}]}]}
 *   stream chunks         the same with "object":"text_completion" / "chat.completion.chunk",
 *                          chat choices carry "delta" instead of "message"; with
 *                          include_usage every chunk has "usage": null and a last chunk has
 *                          "choices": [] and the usage.
 *
 * Token text that is not valid UTF-8 on its own (a byte-fallback token holding part of a
 * character) is shown as "\xNN" escapes in "token"; "bytes" (chat) carries the exact bytes.
 * Log-probabilities of -inf are written as -9999.0 (JSON has no infinity; OpenAI does the same).
 *
 * Threads: pure functions, any thread. Every function returns NUL-terminated compact JSON text
 * that the caller frees, or NULL when out of memory. */
#ifndef TANDEM_PROTO_OPENAI_RESP_H
#define TANDEM_PROTO_OPENAI_RESP_H
#include <stddef.h>
#include "proto/openai_req.h"
#include "proto/openai_tools.h"

typedef struct proto_lp_top {
    const char *bytes; /* the token's bytes (not NUL-terminated) */
    size_t len;
    float logprob;
} proto_lp_top;

typedef struct proto_lp_token {
    const char *bytes; /* the chosen token's bytes */
    size_t len;
    float logprob;
    size_t text_offset; /* completions: where the token starts in the choice's text */
    int n_top;
    proto_lp_top top[PROTO_MAX_TOP_LOGPROBS];
    int no_logprob; /* 1: a prompt's first token under echo (nothing before it to predict it
                       from): null in token_logprobs and top_logprobs, as OpenAI writes it */
} proto_lp_token;

typedef struct proto_choice_out {
    int index;
    const char *text; /* may be NULL when text_len is 0 */
    size_t text_len;
    const char *finish_reason; /* "stop", "length", or NULL (still running) */
    int logprobs;              /* 1: write a logprobs object (else null) */
    const proto_lp_token *lps;
    int n_lps;
    /* chat: tool calls (message.tool_calls, or delta.tool_calls in a chunk: each call whole,
     * with its "index" among the choice's calls starting at call_base); text is then the
     * content before them, null when empty */
    const proto_tool_call *calls;
    int n_calls, call_base;
    int no_content; /* chat: content null without calls too (a constrained call cut short: its
                       text is the grammar's markup, not content; vLLM's answer) */
    int function_call; /* chat: calls[0] as the deprecated functions API's function_call
                          {"name", "arguments"} (message or delta), not tool_calls */
} proto_choice_out;

typedef struct proto_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;       /* prompt_tokens_details.cached_tokens (the prefix cache's reuse) */
    int has_prefill_density; /* a sparse prefill was asked: usage carries "prefill_density" */
    double prefill_density;
    int has_decode_kv_read;  /* sparse decode was on: usage carries "decode_kv_read_fraction" */
    double decode_kv_read;   /* keys attended / keys held, over the decode steps (1: dense) */
} proto_usage;

typedef struct proto_resp_meta {
    enum proto_endpoint ep;
    const char *id;
    long long created; /* unix seconds */
    const char *model;
} proto_resp_meta;

/* A whole (non-streamed) response with n choices. */
char *proto_resp_json(const proto_resp_meta *m, const proto_choice_out *choices, int n,
                      const proto_usage *u);

/* One stream chunk for one choice. role: chat only, add "role":"assistant" to the delta (the
 * choice's first chunk). usage_null: add "usage": null (include_usage streams). */
char *proto_chunk_json(const proto_resp_meta *m, const proto_choice_out *c, int role,
                       int usage_null);

/* The last chunk of an include_usage stream: "choices": [] and the usage. */
char *proto_usage_chunk_json(const proto_resp_meta *m, const proto_usage *u);

/* GET /v1/models with the one served model. */
char *proto_models_json(const char *model, long long created, int max_model_len);

#endif

/* proto/openai_req.h — OpenAI request bodies (POST /v1/completions, /v1/chat/completions) to a
 * plain C struct, validated and bounded.
 *
 * The parser never trusts a size or a count from the client: the body's nesting depth, the
 * number of messages, stop strings, logit_bias entries and prompt token ids are checked against
 * proto_limits before anything of that size is allocated, and every numeric field is range-checked
 * (the ranges OpenAI documents). Duplicate object keys are rejected (two "max_tokens" keys mean a
 * confused or malicious client, and which one wins differs between parsers).
 *
 * For chat requests the parser builds the chat template's context as JSON text (the only thing
 * the template engine reads), so no JSON object leaves proto/:
 *   {"messages": [{"role": ..., "content": "<text>", ...}], "tools": [...] (when given),
 *    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}
 * Message content given as an array of {"type": "text", "text": ...} parts is joined into one
 * string (what most templates expect); other part types are rejected as unsupported. The
 * messages and tools are then shaped for the template (null keys dropped, string arguments
 * parsed, developer as system, Mistral's ids, the deprecated functions API as tools:
 * proto/openai_msg.h), after proto_limits' template traits.
 *
 * Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_OPENAI_REQ_H
#define TANDEM_PROTO_OPENAI_REQ_H
#include <stddef.h>
#include <stdint.h>
#include "proto/errors.h"

enum proto_endpoint { PROTO_EP_COMPLETIONS, PROTO_EP_CHAT };

/* Structured output: what every choice's text must be. */
enum proto_grammar_kind {
    PROTO_GRAMMAR_NONE,        /* free text */
    PROTO_GRAMMAR_JSON_OBJECT, /* response_format json_object: the built-in JSON object grammar */
    PROTO_GRAMMAR_JSON_SCHEMA, /* response_format json_schema: grammar holds its GBNF */
    PROTO_GRAMMAR_GBNF,        /* the "grammar" extension (llama.cpp's): grammar holds it */
};

#define PROTO_MAX_TOP_LOGPROBS 20 /* OpenAI's documented maximum for chat top_logprobs */
/* OpenAI's documented maximum for the legacy /v1/completions `logprobs` count. We follow it
 * rather than vLLM's 20: a client written against OpenAI that asks for more gets the same 400
 * here as there, instead of an answer it would not get in production. */
#define PROTO_MAX_COMPLETION_LOGPROBS 5

typedef struct proto_limits {
    int vocab;            /* token ids (prompt ids, logit_bias keys) must be in [0, vocab) */
    int max_context;      /* model context: bounds prompt id arrays and max_tokens */
    int max_n;            /* choices per request */
    int max_stop;         /* stop strings per request (OpenAI: 4) */
    int max_stop_bytes;   /* bytes per stop string */
    int max_logit_bias;   /* logit_bias entries (OpenAI: 300) */
    int max_messages;     /* chat messages per request */
    int max_depth;        /* JSON nesting depth of the body */
    int max_user_bytes;   /* the "user" field */
    /* the chat template's traits, for the history handed to it (proto/openai_msg.h) */
    int tool_family;      /* enum proto_tool_family: Mistral's wants 9-character call ids */
    int developer_role;   /* the template names the developer role: else it becomes system */
} proto_limits;

/* Defaults used by the daemon unless configured otherwise; vocab and max_context come from the
 * model, tool_family and developer_role from the chat template (proto_limits_template). */
void proto_limits_default(proto_limits *l);
/* l's template traits from the chat template's source (NULL: the plain fallback). */
void proto_limits_template(proto_limits *l, const char *template_src);

typedef struct proto_logit_bias {
    int32_t id;
    float bias; /* [-100, 100] */
} proto_logit_bias;

/* Completions' batch form: "prompt" as an array of strings or of token-id arrays, one choice (times
 * n) per prompt, indexed prompt-major as OpenAI orders them. Bounded: a 400 past either. */
#define PROTO_MAX_PROMPTS 32
#define PROTO_MAX_CHOICES 64 /* prompts x n */
typedef struct proto_prompt {
    char *text; /* UTF-8, NUL-terminated; NULL when ids are given */
    size_t len;
    int32_t *ids;
    int n_ids;
} proto_prompt;

typedef struct proto_req {
    enum proto_endpoint ep;
    char *model;               /* NULL when absent */
    /* completions: exactly one of prompt / prompt_ids */
    char *prompt;              /* UTF-8 text, NUL-terminated */
    size_t prompt_len;
    int32_t *prompt_ids;       /* already-tokenized prompt, each in [0, vocab) */
    int n_prompt_ids;
    proto_prompt *more;        /* completions: the prompts after the first (batch form) */
    int n_more;
    /* chat: the template context (see above), NUL-terminated JSON text */
    char *chat_context;
    int max_tokens;            /* -1: not given (max_completion_tokens wins over max_tokens);
                                  0 (completions only): the prompt alone, no token */
    int n;                     /* choices, [1, max_n] */
    int stream;
    int include_usage;         /* stream_options.include_usage */
    /* sampling, with OpenAI's defaults when absent */
    double temperature;        /* [0, 2], default 1 */
    double top_p;              /* [0, 1], default 1 */
    int top_k;                 /* -1 or 0: off (vLLM's extension), default -1 */
    double min_p;              /* [0, 1], default 0 */
    double presence_penalty;   /* [-2, 2], default 0 */
    double frequency_penalty;  /* [-2, 2], default 0 */
    double repetition_penalty; /* (0, 2], default 1 (vLLM's extension) */
    int has_seed;
    uint64_t seed;             /* the JSON integer's two's-complement bits */
    proto_logit_bias *logit_bias;
    int n_logit_bias;
    char **stop;               /* n_stop NUL-terminated strings, non-empty */
    int n_stop;
    int logprobs;              /* return logprobs of the chosen tokens */
    int top_logprobs;          /* and this many alternatives, [0, 20] */
    char *user;                /* NULL when absent */
    /* tandem's extension "sparse_prefill": true | false | {"mode": "flexprefill" | "xattention"
     * | "trishape", FlexPrefill's "gamma", "tau", "min_budget", "max_budget", "dense_below",
     * OpenVINO's "xattention_threshold", "xattention_block_size", "xattention_stride",
     * "num_retained_start_tokens_in_cache", "num_retained_recent_tokens_in_cache",
     * "num_last_dense_tokens_in_prefill"} (absent members and an absent field take the server's
     * configuration; the members' joint rules are sparse/sparse.h's, checked at submission) */
    int sparse;                /* -1: not given, 0: off, 1: on */
    int cache_prompt;          /* "cache_prompt" (llama.cpp's name): 0 opts out of prefix
                                  caching; default 1 */
    int sparse_mode;           /* -1: not given; 0 flexprefill, 1 xattention, 2 trishape */
    double sparse_gamma;       /* (0, 1]; NAN: not given */
    double sparse_tau;         /* [0, 1]; NAN: not given */
    long long sparse_min_budget, sparse_max_budget, sparse_dense_below; /* LLONG_MIN: not given */
    double sparse_xattn_threshold; /* (0, 1]; NAN: not given */
    long long sparse_xattn_block, sparse_xattn_stride; /* LLONG_MIN: not given */
    long long sparse_start, sparse_recent, sparse_last_dense; /* tokens; LLONG_MIN: not given */
    /* tandem's extension "sparse_decode": true | false | {"mode": "asynctls" | "off",
     * "token_budget": N, "block_budget": N, "stagger": bool} (AsyncTLS sparse decode;
     * sparse/tls.h resolves it with the configuration) */
    int decode_sparse;         /* -1: not given, 0: off, 1: on */
    long long decode_sparse_token_budget, decode_sparse_block_budget; /* 0: not given */
    int decode_sparse_stagger; /* 0: not given, 1: false, 2: true */
    struct proto_tools *tools; /* chat "tools" with tool_choice / parallel_tool_calls
                                  (proto/openai_tools.h); NULL when none */
    int echo;                  /* completions: the prompt's text before each choice's text */
    int grammar_kind;          /* enum proto_grammar_kind */
    char *grammar;             /* GBNF text (JSON_SCHEMA, GBNF); NULL otherwise */
} proto_req;

/* Parses body (len bytes, need not be NUL-terminated) for endpoint ep into *out (zeroed first).
 * bos / eos are the tokenizer's special-token strings put into the chat context (may be NULL:
 * empty strings). On failure returns the error (out is left empty, nothing to free) and writes a
 * one-line message to msg and the offending field's name to param ("" when none). On success
 * returns PROTO_ERR_NONE; the caller releases *out with proto_req_deinit. */
enum proto_err proto_req_parse(enum proto_endpoint ep, const char *body, size_t len,
                               const proto_limits *lim, const char *bos, const char *eos,
                               proto_req *out, char *msg, size_t msgn, char *param, size_t paramn);

void proto_req_deinit(proto_req *r);

/* A context_length_exceeded message in OpenAI's words, whose first sentence clients match
 * (LiteLLM: "this model's maximum context length is"): "This model's maximum context length is
 * N tokens. However, you requested M tokens (P in the messages, C in the completion). Please
 * reduce ..."; completion 0: the prompt alone is too long ("However, your messages resulted in P
 * tokens"); prompt < 0: not known yet (the completion alone is too long). "prompt" for "messages"
 * on /v1/completions. */
void proto_context_msg(char *buf, size_t n, enum proto_endpoint ep, long long max_context,
                       long long prompt, long long completion);

/* The deepest nesting of arrays/objects in the JSON text (strings are skipped), stopping early
 * once it passes stop_at. Used before the parser so that a hostile body cannot recurse far. */
int proto_json_depth(const char *s, size_t n, int stop_at);

#endif

/* daemon/api_int.h — the OpenAI listener's request object, shared by daemon/api.c (routes,
 * preparation, submission, the end of a request) and daemon/api_events.c (scheduler events into
 * responses and SSE chunks). Loop thread only. */
#ifndef TANDEM_DAEMON_API_INT_H
#define TANDEM_DAEMON_API_INT_H
#include "daemon/serve.h"
#include "daemon/api_struct.h"
#include "proto/buf.h"
#include "proto/errors.h"
#include "proto/openai_resp.h"

/* OpenAI's default max_tokens for /v1/completions (its API reference); chat defaults to what
 * the context leaves, capped by the default_max_tokens key. */
#define COMPLETIONS_DEFAULT_MAX_TOKENS 16

typedef struct api_choice {
    proto_buf text;
    proto_lp_token *lps;
    int n_lps, cap_lps;
    /* logprobs' text_offset: the bytes of the choice's tokens' text so far (the text sent may lag
     * it: held by a stop string's prefix or a character's first bytes); lp_started: a token was
     * counted into it */
    size_t lp_offset;
    int lp_started;
    const char *finish;
    int started; /* stream: the role delta went out */
    double t_last;
    dmn_choice_tools tools; /* chat tool calls found in (or held back from) the text */
} api_choice;

/* One prompt's scheduler request. A completions request in the batch form (several prompts) is
 * one scheduler request per prompt, submitted together (they share the batch like any other
 * requests running at once); each prompt's n choices are a->choices[first .. first + n_per).
 * The response goes out when every part is DONE (or at the first ERROR, which cancels the rest). */
typedef struct api_part {
    dmn_api_req *a;
    sched_req *sreq; /* NULL once DONE, ERROR or cancelled */
    int first;
    int done;
    char *echo; /* with echo: the prompt's text (each of its choices starts with it) */
    int strip_first; /* the text drops its first token's leading space (logprobs' text_offset) */
    size_t echo_len;
    sched_event fin; /* its DONE event's figures (no pointers kept) */
} api_part;

enum api_route { ROUTE_NONE, ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_READY, ROUTE_MODEL,
                 ROUTE_EXTRA /* daemon/api_extra.h */ };

struct dmn_api_req {
    dmn_serve *d;
    dmn_http_req *http;
    dmn_api_req *prev, *next;
    enum api_route route;
    char id[48];
    long long created;
    proto_resp_meta meta;
    api_part *parts;
    int n_parts, parts_done, n_per; /* n: choices in all, n_per per prompt */
    int stream, include_usage, n, logprobs, prompt_tokens, max_tokens, completion_tokens;
    api_choice *choices;
    /* x-tandem-devices: "prefill=A; decode=B[; moved_from=C]", each a device's whole name */
    char devices[3 * ACCEL_NAME_MAX + 32];
    char prefill_dev[ACCEL_NAME_MAX + 1], decode_dev[ACCEL_NAME_MAX + 1],
        moved_from[ACCEL_NAME_MAX + 1];
    int moves;          /* failovers: placed again after a device failed it */
    uv_timer_t keepalive;
    int keepalive_on;
    int status;
    const char *finish; /* for the log: the last choice's */
    double t_arrival, t_started, t_first, t_done;
    double t_body, t_submitted; /* on_body entered / sched_submit returned (the daemon's own time) */
    double t_answered;          /* the last bytes were handed to the HTTP layer */
    double cpu_own;             /* loop-thread CPU seconds spent on it in on_body and on_done */
    int done;           /* DONE or ERROR seen */
    int prep_busy;      /* being prepared on a thread-pool thread (api_prep) */
    int closed;         /* on_close ran while prep_busy: freed when the preparation returns */
    char err_code[40];
    proto_tools *tools;  /* chat tools unless tool_choice is none (moved from the request) */
    int tool_family;     /* enum proto_tool_family of the chat template */
    int no_tokens;       /* completions' max_tokens 0: the one token the scheduler makes is
                            dropped (text, logprobs, usage), finish length */
};

/* 1 while some part is still with the scheduler. */
int dmn_api_live(const dmn_api_req *a);
/* Cancels every part still with the scheduler (no event follows). */
void dmn_api_cancel_parts(dmn_api_req *a);
/* CPU time of the calling thread (seconds). */
double dmn_api_thread_cpu(void);
void dmn_api_count_status(dmn_api_req *a, int status);
/* Takes json (malloc'ed; NULL: a 500 "out of memory"). */
void dmn_api_respond_json(dmn_api_req *a, int status, char *json);
void dmn_api_respond_error(dmn_api_req *a, enum proto_err e, const char *msg, const char *param);
void dmn_api_stream_bytes(dmn_api_req *a, const char *s, size_t n);
/* One SSE data event; takes json. */
void dmn_api_stream_event(dmn_api_req *a, char *json);
void dmn_api_stream_finish(dmn_api_req *a);
/* The scheduler's events for one part of a request (ctx: its api_part). */
void dmn_api_on_event(void *ctx, const sched_event *ev);

#endif

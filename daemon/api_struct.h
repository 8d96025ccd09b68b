/* daemon/api_struct.h — structured output and tool calls for daemon/api.c: a request's grammar
 * (the built-in JSON object, a JSON Schema's, a client's GBNF, or the calls of its tools in the
 * chat template's format) compiled and checked against the vocabulary; each choice's tool calls
 * found in its text, held back from a stream while the text may still become calls. */
#ifndef TANDEM_DAEMON_API_STRUCT_H
#define TANDEM_DAEMON_API_STRUCT_H
#include "model/grammar/grammar.h"
#include "proto/openai_req.h"
#include "proto/openai_tools.h"
#include "scheduler/sched.h"
#include <uv.h>

/* The grammar q asks for (*out NULL when none; else a reference the caller drops): tools with
 * tool_choice required / a named function take the calls' grammar in family f (they win over a
 * response_format). 0, or -1 with the error, a message and the parameter to blame. Any thread. */
int dmn_grammar_compile(const proto_req *q, enum proto_tool_family f, model_grammar **out,
                        enum proto_err *e, char *msg, size_t msgn, char *param, size_t paramn);

/* Drops the compiled grammars kept for reuse (at shutdown). */
void dmn_grammar_cache_clear(void);

/* Loop thread: 0 when some token of the vocabulary can start a text of g; -1 with a message
 * when none can (or when memory ran out). keep_first_space: the text continues a prompt that
 * keeps a first token's space (model_gen_keeps_first_space). Never builds g's tables
 * (dmn_grammar_prepare). */
int dmn_grammar_check(sched *s, model_grammar *g, int keep_first_space, char *msg, size_t msgn);

/* Loop thread, after dmn_grammar_check: when g's tables for the vocabulary are not built yet,
 * builds them on a libuv thread-pool thread (tens of ms at a 128K vocabulary; the task holds
 * references on g and the vocabulary, so a shutdown meanwhile is safe). Until they are built,
 * masks walk the whole trie as before. */
void dmn_grammar_prepare(uv_loop_t *loop, sched *s, model_grammar *g);

/* One choice's tool calls. */
enum { DMN_TOOLS_UNDECIDED, DMN_TOOLS_TEXT, DMN_TOOLS_CALLS };
typedef struct dmn_choice_tools {
    int mode;
    proto_tool_call *calls;
    int n_calls;
    size_t content_len; /* bytes of the text before the calls */
    size_t sent;        /* streaming: bytes at the text's start that went out as content */
    int cut;            /* a constrained call cut short (finish length): no calls, no content */
} dmn_choice_tools;

/* Streaming: after the choice's text so far (text, len) grew, how many bytes at its start are
 * content whatever comes next (the caller sends those past ct->sent and moves ct->sent). len
 * once the text cannot become calls (mode DMN_TOOLS_TEXT from then on: the caller streams it
 * as any text). The HERMES family takes text before its first <tool_call>, as its parser does:
 * that text goes out as it comes, a tail that may open the marker held. */
size_t dmn_tools_content(const proto_tools *t, enum proto_tool_family f, dmn_choice_tools *ct,
                         const char *text, size_t len);
/* At the choice's end: parses its text into ct's calls (ids assigned) and returns the finish
 * reason to report: "tool_calls" when there are calls and the choice stopped, else finish. A
 * constrained choice (required, named) without whole calls (cut by max_tokens) sets ct->cut. */
const char *dmn_tools_finish(const proto_tools *t, enum proto_tool_family f, dmn_choice_tools *ct,
                             const char *text, size_t len, const char *finish);
void dmn_choice_tools_deinit(dmn_choice_tools *ct);

#endif

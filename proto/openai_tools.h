/* proto/openai_tools.h — chat tool calling: the request's tools, tool_choice and
 * parallel_tool_calls; the grammar that makes a model write calls in its chat template's format;
 * and the parser that turns the text it wrote back into OpenAI's tool_calls.
 *
 * Formats (the families of the chat templates tandem ships, tests/data/chat_templates):
 *   HERMES   Hermes-3, Qwen2.5 (and the default for templates without a format of their own):
 *            <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block per call,
 *            separated by a newline
 *   LLAMA3   Llama-3.1 / 3.2 JSON tool calling: {"name": "f", "parameters": {...}}, several
 *            separated by "; " (vLLM's llama3_json convention); a leading <|python_tag|> is
 *            skipped when parsing
 *   MISTRAL  Mistral v0.3 / Nemo: [{"name": "f", "arguments": {...}}, ...] — the [TOOL_CALLS]
 *            marker before it is a special token the detokenizer drops, so the grammar starts at
 *            the array; a literal "[TOOL_CALLS]" in the text is skipped when parsing
 * tool_choice "required" and a named function constrain the output to calls (the arguments to
 * each function's parameters schema, proto/json_schema.h); "auto" leaves the text free and
 * parses calls out of it when it is one; "none" does neither.
 *
 * Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_OPENAI_TOOLS_H
#define TANDEM_PROTO_OPENAI_TOOLS_H
#include "proto/buf.h"
#include "proto/errors.h"
#include <jansson.h>
#include <stddef.h>

#define PROTO_MAX_TOOLS 128
#define PROTO_MAX_TOOL_CALLS 64 /* calls parsed out of one choice */

enum proto_tool_family { PROTO_TOOLS_HERMES, PROTO_TOOLS_LLAMA3, PROTO_TOOLS_MISTRAL };
enum proto_tool_choice { PROTO_TOOL_CHOICE_AUTO, PROTO_TOOL_CHOICE_NONE, PROTO_TOOL_CHOICE_REQUIRED,
                         PROTO_TOOL_CHOICE_NAMED };

typedef struct proto_tools {
    int n;
    char **names;  /* [n] function names */
    char **params; /* [n] the parameters schema as JSON text; NULL: any object */
    char *strict;  /* [n] function.strict: its schema's keywords a grammar cannot enforce refused
                      (PROTO_JSCHEMA_STRICT), else kept as annotations */
    int choice;    /* enum proto_tool_choice */
    int named;     /* PROTO_TOOL_CHOICE_NAMED: the index of the function */
    int parallel;  /* parallel_tool_calls (default 1) */
    int legacy;    /* asked with the deprecated functions API: one function_call answers it */
} proto_tools;

typedef struct proto_tool_call {
    char id[40];     /* filled by the caller (proto_tools_parse leaves it empty) */
    char *name;
    char *arguments; /* compact JSON text of an object */
} proto_tool_call;

/* From the request body o: NULL in *out when there are no tools (or tool_choice is none and
 * nothing else needs them). 0, or -1 with the error, message and parameter. */
int proto_tools_from_json(json_t *o, proto_tools **out, enum proto_err *e, char *msg, size_t msgn,
                          char *param, size_t paramn);
void proto_tools_free(proto_tools *t);

/* The family whose format a chat template's source uses (HERMES when it names none). */
enum proto_tool_family proto_tool_family_of(const char *template_src);
const char *proto_tool_family_name(enum proto_tool_family f);

/* 1 when t constrains the output (required or named). */
int proto_tools_constrained(const proto_tools *t);
/* The GBNF grammar of the calls t allows in family f. 0, or -1 with a message (a parameters
 * schema the converter refuses names its function). */
int proto_tools_grammar(const proto_tools *t, enum proto_tool_family f, proto_buf *out, char *msg,
                        size_t msgn);

/* The calls in text (len bytes) in family f, for the functions of t: *calls (n_calls of them,
 * the caller frees with proto_tool_calls_free) and *content_len, how many bytes at the start of
 * text are content before the calls (HERMES; 0 otherwise). Returns 1 when text holds calls, 0
 * when it does not (or they name unknown functions: the text is then plain content), -1 out of
 * memory. */
int proto_tools_parse(const proto_tools *t, enum proto_tool_family f, const char *text, size_t len,
                      proto_tool_call **calls, int *n_calls, size_t *content_len);
void proto_tool_calls_free(proto_tool_call *calls, int n);

/* Streaming with tool_choice auto: 1 while text (the choice's text so far) may still become a
 * call in family f (it is empty after leading whitespace, or a prefix of the format's opening,
 * or begins with it); 0 once it cannot. LLAMA3 and MISTRAL: calls open the text. */
int proto_tools_may_start(enum proto_tool_family f, const char *text, size_t len);

/* Streaming with tool_choice auto in the HERMES family, where text may come before the calls
 * (as proto_tools_parse takes it): how many bytes at the start of text are content whatever
 * comes next — up to the first "<tool_call>", else all but a tail that may be its beginning.
 * from: bytes already known to be content (the search starts there). */
size_t proto_tools_content_len(const char *text, size_t len, size_t from);

#endif

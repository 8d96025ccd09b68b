/* daemon/api_struct.h — structured output for daemon/api.c: a request's grammar (the built-in
 * JSON object, a JSON Schema's or a client's GBNF) compiled and checked against the vocabulary.
 * Compiled grammars are cached by their text (a client sends the same schema again and again):
 * the cache is the loop thread's; compiling alone is thread-safe. */
#ifndef TANDEM_DAEMON_API_STRUCT_H
#define TANDEM_DAEMON_API_STRUCT_H
#include "model/grammar/grammar.h"
#include "proto/openai_req.h"
#include "scheduler/sched.h"

/* The grammar q asks for (*out NULL when none; else a reference the caller drops). 0, or -1
 * with the error, a message and the parameter to blame. Any thread. */
int dmn_grammar_compile(const proto_req *q, model_grammar **out, enum proto_err *e, char *msg,
                        size_t msgn, char *param, size_t paramn);

/* Loop thread: 0 when some token of the vocabulary can start a text of g; -1 with a message
 * when none can (or when memory ran out). */
int dmn_grammar_check(sched *s, model_grammar *g, char *msg, size_t msgn);

#endif

/* proto/openai_struct.h — the structured-output fields of a request (internal to proto/):
 * response_format {"type": "text" | "json_object" | "json_schema"} and the llama.cpp-style
 * "grammar" extension (GBNF text). Fills proto_req's grammar_kind / grammar. */
#ifndef TANDEM_PROTO_OPENAI_STRUCT_H
#define TANDEM_PROTO_OPENAI_STRUCT_H
#include "proto/openai_req.h"
#include <jansson.h>

/* 0, or -1 with *e, msg and param set. */
int proto_struct_parse(json_t *o, enum proto_endpoint ep, proto_req *r, enum proto_err *e, char *msg,
                       size_t msgn, char *param, size_t paramn);

#endif

/* proto/openai_msg.h — a chat request's history made into what chat templates expect (internal
 * to proto/: proto/openai_req.c calls it on each message it validated and copied, and on the
 * tools it hands to the template).
 *
 * Clients send what the OpenAI API allows and templates were never written for (the rules, and
 * what vLLM does with each, are in openai_msg.c):
 *   - null-valued keys ("tool_calls": null, "refusal": null, "name": null, ...) and an empty
 *     tool_calls array: dropped (Llama-3.1 and Hermes-3 test `is defined`, then iterate);
 *   - tool_calls[].function.arguments as a JSON string: the object it holds (templates tojson it);
 *   - the developer role: system, unless the template knows the developer role;
 *   - tool call ids, in the Mistral family: 9 alphanumerics (its template raises otherwise);
 *   - a tool without a description: "" (Hermes-3 reads tool.description unguarded).
 *
 * Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_OPENAI_MSG_H
#define TANDEM_PROTO_OPENAI_MSG_H
#include "proto/openai_req.h"
#include <jansson.h>

/* Rewrites m (a message object, its role and content already checked) in place for the chat
 * template described by lim (tool_family, developer_role). 0, or -1 out of memory. */
int proto_msg_normalize(json_t *m, const proto_limits *lim);

/* A copy of tools (the request's array, any shape) where every function object without a
 * "description" string has "description": "". A new reference; NULL out of memory. */
json_t *proto_msg_tools(json_t *tools);

/* The Mistral family's tool call id for any id a client sent: its last 9 ASCII letters and
 * digits, or (fewer than 9 of them) 9 taken from a hash of the whole id, so that an assistant's
 * call and the tool message answering it still agree. out: 10 bytes. */
void proto_msg_mistral_id(const char *id, size_t len, char out[10]);

#endif

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
 *   - a tool without a description: "", without parameters: an empty object schema (Hermes-3
 *     reads both unguarded).
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
 * "description" string has "description": "" and one without "parameters" the empty list's
 * {"type": "object", "properties": {}}. A new reference; NULL out of memory. */
json_t *proto_msg_tools(json_t *tools);

/* The deprecated functions API (OpenAI's "functions" / "function_call", still in its reference)
 * as tools: request (a chat body, rewritten in place) "functions": [f, ...] -> "tools":
 * [{"type": "function", "function": f}, ...], "function_call": "none" | "auto" | {"name": N} ->
 * "tool_choice" (and "parallel_tool_calls": false: one function_call comes back). 1 when the
 * body used them, 0 when not, -1 with a message in msg and the parameter in *param when it mixes
 * them with tools / tool_choice or is not their shape (-2: out of memory). */
int proto_msg_functions(json_t *o, char *msg, size_t msgn, const char **param);

/* A history message of the functions API as one of tools, in place: an assistant's
 * "function_call": {"name", "arguments"} -> "tool_calls": [{"id": "call_fn<idx>", ...}] (last_id
 * keeps that id), a "function" message -> a "tool" message answering last_id. 0, -1 out of
 * memory. */
int proto_msg_legacy(json_t *m, size_t idx, char last_id[24]);

/* The Mistral family's tool call id for any id a client sent: the id itself when it is 9 ASCII
 * letters and digits, else 9 of them taken from a hash of the whole id, so that an assistant's
 * call and the tool message answering it still agree and two ids stay two. out: 10 bytes. */
void proto_msg_mistral_id(const char *id, size_t len, char out[10]);

#endif

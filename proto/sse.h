/* proto/sse.h — Server-Sent Events framing (the WHATWG HTML "server-sent events" format that
 * OpenAI's streaming API uses).
 *
 * An event is one or more "data: <line>\n" fields closed by a blank line. A payload that contains
 * line breaks (LF, CR or CRLF) becomes one data field per line, so that a client reassembles the
 * exact payload. Comments (": text\n\n") keep an idle stream from being closed by proxies.
 *
 * Threads: pure functions, any thread. */
#ifndef TANDEM_PROTO_SSE_H
#define TANDEM_PROTO_SSE_H
#include <stddef.h>

/* OpenAI's end-of-stream event. */
#define PROTO_SSE_DONE "data: [DONE]\n\n"

/* Bytes proto_sse_data needs for a payload of n bytes (an upper bound, including the NUL). */
size_t proto_sse_data_size(size_t n);

/* Writes the event for payload (n bytes) into out (at least proto_sse_data_size(n) bytes) and
 * returns the length written (without the NUL). */
size_t proto_sse_data(char *out, const char *payload, size_t n);

/* A comment event ": <text>\n\n" in out (size outn); line breaks in text become spaces. Returns
 * the length written, or 0 when out is too small. */
size_t proto_sse_comment(char *out, size_t outn, const char *text);

#endif

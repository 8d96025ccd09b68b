/* proto/errors.h — the one table of API errors: code -> HTTP status + OpenAI-style error body.
 *
 * Every error the API answers goes through this table, so that a status and its JSON shape are
 * decided in one place:
 *
 *   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..."}}
 *
 * Types and codes follow what OpenAI's API returns for the same condition where it has one
 * (invalid_request_error, invalid_api_key, context_length_exceeded, model_not_found, ...).
 *
 * Threads: everything here is pure and may be called from any thread. */
#ifndef TANDEM_PROTO_ERRORS_H
#define TANDEM_PROTO_ERRORS_H
#include <stddef.h>

enum proto_err {
    PROTO_ERR_NONE = 0,
    PROTO_ERR_INVALID_JSON,    /* 400 body is not JSON, nested too deep, duplicate keys */
    PROTO_ERR_INVALID_TYPE,    /* 400 a field has the wrong JSON type */
    PROTO_ERR_INVALID_VALUE,   /* 400 a field is out of range / not allowed */
    PROTO_ERR_MISSING_FIELD,   /* 400 a required field is absent */
    PROTO_ERR_UNSUPPORTED,     /* 400 a valid OpenAI field tandem does not implement */
    PROTO_ERR_CONTEXT_LENGTH,  /* 400 prompt + max_tokens exceed the model's context */
    PROTO_ERR_BAD_HEADER,      /* 400 conflicting Content-Length / Transfer-Encoding */
    PROTO_ERR_UNAUTHORIZED,    /* 401 missing or wrong API key */
    PROTO_ERR_NOT_FOUND,       /* 404 no such route */
    PROTO_ERR_MODEL_NOT_FOUND, /* 404 the request names a model this daemon does not serve */
    PROTO_ERR_METHOD,          /* 405 route exists, method does not (sets Allow) */
    PROTO_ERR_TOO_LARGE,       /* 413 body over the configured limit */
    PROTO_ERR_QUEUE_FULL,      /* 429 the bounded waiting queue is full (sets Retry-After) */
    PROTO_ERR_NOT_READY,       /* 503 still loading / warming up, or no healthy device */
    PROTO_ERR_DRAINING,        /* 503 shutting down: no new requests */
    PROTO_ERR_TIMEOUT,         /* 504 the request's deadline passed before it finished */
    PROTO_ERR_DEVICE,          /* 500 a device failed while serving (never bad input) */
    PROTO_ERR_INTERNAL,        /* 500 out of memory or a bug (never bad input) */
    /* HTTP framing, refused by the listener before any handler sees the request (daemon/http.c) */
    PROTO_ERR_BAD_REQUEST,     /* 400 malformed request line, header or chunked body */
    PROTO_ERR_RECV_TIMEOUT,    /* 408 the request's head and body did not arrive in time */
    PROTO_ERR_URI_TOO_LONG,    /* 414 request target over its limit */
    PROTO_ERR_HEADERS_TOO_LARGE, /* 431 request head over its size or field-count limit */
    PROTO_ERR_NOT_IMPLEMENTED, /* 501 a transfer coding other than chunked */
    PROTO_ERR_HTTP_VERSION,    /* 505 not HTTP/1.0 or HTTP/1.1 */
    PROTO_ERR_CONNS_PER_IP,    /* 429 this client address holds its share of connections */
    PROTO_ERR_CONNS_FULL,      /* 503 every connection slot holds a request being served */
    PROTO_ERR_COUNT
};

typedef struct proto_err_row {
    enum proto_err err;
    int http_status;
    const char *type; /* OpenAI "type" */
    const char *code; /* OpenAI "code" */
} proto_err_row;

/* The row for err (PROTO_ERR_INTERNAL's row for values out of range). */
const proto_err_row *proto_err_info(enum proto_err err);

/* The error body as compact JSON text, NUL-terminated; the caller frees it. message may contain
 * any bytes (invalid UTF-8 is replaced); param may be NULL (JSON null). Returns NULL only when
 * out of memory. */
char *proto_err_json(enum proto_err err, const char *message, const char *param);

#endif

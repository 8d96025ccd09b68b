/* proto/errors.c — the error table (see errors.h). */
#include "proto/errors.h"
#include "proto/utf8.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by enum proto_err. HTTP statuses are the ones issue 4 lists; type/code strings are the
 * ones OpenAI's API uses for the same condition (its docs' error-codes page), our own where it
 * has none (queue_full, draining, device_error). */
static const proto_err_row rows[PROTO_ERR_COUNT] = {
    [PROTO_ERR_NONE] = {PROTO_ERR_NONE, 200, "", ""},
    [PROTO_ERR_INVALID_JSON] = {PROTO_ERR_INVALID_JSON, 400, "invalid_request_error", "invalid_json"},
    [PROTO_ERR_INVALID_TYPE] = {PROTO_ERR_INVALID_TYPE, 400, "invalid_request_error", "invalid_type"},
    [PROTO_ERR_INVALID_VALUE] = {PROTO_ERR_INVALID_VALUE, 400, "invalid_request_error",
                                 "invalid_value"},
    [PROTO_ERR_MISSING_FIELD] = {PROTO_ERR_MISSING_FIELD, 400, "invalid_request_error",
                                 "missing_required_parameter"},
    [PROTO_ERR_UNSUPPORTED] = {PROTO_ERR_UNSUPPORTED, 400, "invalid_request_error",
                               "unsupported_parameter"},
    [PROTO_ERR_CONTEXT_LENGTH] = {PROTO_ERR_CONTEXT_LENGTH, 400, "invalid_request_error",
                                  "context_length_exceeded"},
    [PROTO_ERR_BAD_HEADER] = {PROTO_ERR_BAD_HEADER, 400, "invalid_request_error", "invalid_header"},
    [PROTO_ERR_UNAUTHORIZED] = {PROTO_ERR_UNAUTHORIZED, 401, "invalid_request_error",
                                "invalid_api_key"},
    [PROTO_ERR_NOT_FOUND] = {PROTO_ERR_NOT_FOUND, 404, "invalid_request_error", "unknown_url"},
    [PROTO_ERR_MODEL_NOT_FOUND] = {PROTO_ERR_MODEL_NOT_FOUND, 404, "invalid_request_error",
                                   "model_not_found"},
    [PROTO_ERR_METHOD] = {PROTO_ERR_METHOD, 405, "invalid_request_error", "method_not_allowed"},
    [PROTO_ERR_TOO_LARGE] = {PROTO_ERR_TOO_LARGE, 413, "invalid_request_error",
                             "request_too_large"},
    [PROTO_ERR_QUEUE_FULL] = {PROTO_ERR_QUEUE_FULL, 429, "rate_limit_error", "queue_full"},
    [PROTO_ERR_NOT_READY] = {PROTO_ERR_NOT_READY, 503, "service_unavailable_error", "not_ready"},
    [PROTO_ERR_DRAINING] = {PROTO_ERR_DRAINING, 503, "service_unavailable_error", "draining"},
    [PROTO_ERR_TIMEOUT] = {PROTO_ERR_TIMEOUT, 504, "timeout_error", "request_timeout"},
    [PROTO_ERR_DEVICE] = {PROTO_ERR_DEVICE, 500, "server_error", "device_error"},
    [PROTO_ERR_INTERNAL] = {PROTO_ERR_INTERNAL, 500, "server_error", "internal_error"},
    [PROTO_ERR_BAD_REQUEST] = {PROTO_ERR_BAD_REQUEST, 400, "invalid_request_error", "bad_request"},
    [PROTO_ERR_RECV_TIMEOUT] = {PROTO_ERR_RECV_TIMEOUT, 408, "invalid_request_error",
                                "request_receive_timeout"},
    [PROTO_ERR_URI_TOO_LONG] = {PROTO_ERR_URI_TOO_LONG, 414, "invalid_request_error", "uri_too_long"},
    [PROTO_ERR_HEADERS_TOO_LARGE] = {PROTO_ERR_HEADERS_TOO_LARGE, 431, "invalid_request_error",
                                     "headers_too_large"},
    [PROTO_ERR_NOT_IMPLEMENTED] = {PROTO_ERR_NOT_IMPLEMENTED, 501, "invalid_request_error",
                                   "not_implemented"},
    [PROTO_ERR_HTTP_VERSION] = {PROTO_ERR_HTTP_VERSION, 505, "invalid_request_error",
                                "http_version_not_supported"},
    [PROTO_ERR_CONNS_PER_IP] = {PROTO_ERR_CONNS_PER_IP, 429, "rate_limit_error", "too_many_connections"},
    [PROTO_ERR_CONNS_FULL] = {PROTO_ERR_CONNS_FULL, 503, "service_unavailable_error", "server_busy"},
};

const proto_err_row *proto_err_info(enum proto_err err)
{
    if ((int)err < 0 || err >= PROTO_ERR_COUNT) err = PROTO_ERR_INTERNAL;
    return &rows[err];
}

char *proto_err_json(enum proto_err err, const char *message, const char *param)
{
    const proto_err_row *r = proto_err_info(err);
    if (!message) message = "";
    char *msg = proto_utf8_sanitize(message, strlen(message), NULL);
    char *par = param ? proto_utf8_sanitize(param, strlen(param), NULL) : NULL;
    if (!msg || (param && !par)) {
        free(msg);
        free(par);
        return NULL;
    }
    json_t *e = json_pack("{s:s, s:s, s:o, s:s}", "message", msg, "type", r->type, "param",
                          par ? json_string(par) : json_null(), "code", r->code);
    json_t *root = e ? json_pack("{s:o}", "error", e) : NULL;
    char *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    free(msg);
    free(par);
    return out;
}

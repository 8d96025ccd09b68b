/* tests/fuzz/harness/fuzz_openai_req.c — libFuzzer harness for the OpenAI request parser
 * (proto/openai_req.c), the first code a client's bytes reach.
 *
 * Input: byte 0 picks the endpoint (bit 0: /v1/completions or /v1/chat/completions) and the
 * limits (bit 1: the daemon's defaults with a 32000-token vocabulary, else small ones that
 * the fuzzer reaches easily); the rest is the request body, as the HTTP layer hands it over
 * (not NUL-terminated). A parsed request must satisfy what proto/openai_req.h promises: every
 * count and size within its limit, every id in the vocabulary, every range respected. */
#include "proto/openai_req.h"
#include "proto/utf8.h"
#include "tests/fuzz/harness/harness_util.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_req(const proto_req *r, const proto_limits *l)
{
    if (r->ep == PROTO_EP_COMPLETIONS) {
        CHECK((r->prompt != NULL) + (r->n_prompt_ids > 0) == 1); /* exactly one of them */
        if (r->prompt) CHECK(strlen(r->prompt) <= r->prompt_len);
        CHECK(r->n_prompt_ids >= 0 && r->n_prompt_ids <= l->max_context);
        for (int i = 0; i < r->n_prompt_ids; i++)
            CHECK(r->prompt_ids[i] >= 0 && r->prompt_ids[i] < l->vocab);
        /* the batch form: bounded, each prompt one of text / ids, the choices bounded */
        CHECK(r->n_more >= 0 && r->n_more < PROTO_MAX_PROMPTS);
        CHECK(!r->n_more || (r->n_more + 1) * r->n <= PROTO_MAX_CHOICES);
        for (int k = 0; k < r->n_more; k++) {
            const proto_prompt *p = &r->more[k];
            CHECK((p->text != NULL) + (p->n_ids > 0) == 1);
            if (p->text) CHECK(strlen(p->text) <= p->len);
            CHECK(p->n_ids >= 0 && p->n_ids <= l->max_context);
            for (int i = 0; i < p->n_ids; i++) CHECK(p->ids[i] >= 0 && p->ids[i] < l->vocab);
        }
    } else {
        CHECK(r->chat_context != NULL);
        CHECK(proto_utf8_valid(r->chat_context, strlen(r->chat_context)));
    }
    CHECK(r->max_tokens == -1 || (r->max_tokens >= 0 && r->max_tokens <= l->max_context));
    CHECK(r->n >= 1 && r->n <= l->max_n);
    CHECK(r->temperature >= 0 && r->temperature <= 2);
    CHECK(r->top_p >= 0 && r->top_p <= 1);
    CHECK(r->min_p >= 0 && r->min_p <= 1);
    CHECK(r->presence_penalty >= -2 && r->presence_penalty <= 2);
    CHECK(r->frequency_penalty >= -2 && r->frequency_penalty <= 2);
    CHECK(r->repetition_penalty > 0 && r->repetition_penalty <= 2);
    CHECK(r->n_logit_bias >= 0 && r->n_logit_bias <= l->max_logit_bias);
    for (int i = 0; i < r->n_logit_bias; i++) {
        CHECK(r->logit_bias[i].id >= 0 && r->logit_bias[i].id < l->vocab);
        CHECK(r->logit_bias[i].bias >= -100 && r->logit_bias[i].bias <= 100);
    }
    CHECK(r->n_stop >= 0 && r->n_stop <= l->max_stop);
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        CHECK(n > 0 && n <= (size_t)l->max_stop_bytes);
    }
    CHECK(r->top_logprobs >= 0 && r->top_logprobs <= PROTO_MAX_TOP_LOGPROBS);
    if (r->user) CHECK(strlen(r->user) <= (size_t)l->max_user_bytes);
    CHECK(r->sparse >= -1 && r->sparse <= 1);
    CHECK(isnan(r->sparse_gamma) || (r->sparse_gamma > 0 && r->sparse_gamma <= 1));
    CHECK(isnan(r->sparse_tau) || (r->sparse_tau >= 0 && r->sparse_tau <= 1));
    CHECK(r->sparse_mode >= -1 && r->sparse_mode <= 2);
    CHECK(isnan(r->sparse_xattn_threshold) ||
          (r->sparse_xattn_threshold > 0 && r->sparse_xattn_threshold <= 1));
    CHECK(r->sparse_xattn_block == LLONG_MIN || (r->sparse_xattn_block >= 16 && r->sparse_xattn_block <= 128));
    CHECK(r->sparse_xattn_stride == LLONG_MIN || (r->sparse_xattn_stride >= 1 && r->sparse_xattn_stride <= 128));
    CHECK(r->sparse_last_dense == LLONG_MIN || (r->sparse_last_dense >= 0 && r->sparse_last_dense <= (1 << 24)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    enum proto_endpoint ep = data[0] & 1 ? PROTO_EP_CHAT : PROTO_EP_COMPLETIONS;
    proto_limits l;
    proto_limits_default(&l);
    if (data[0] & 2) {
        l.vocab = 32000;
        l.max_context = 4096;
    } else {
        l.vocab = 64;
        l.max_context = 16;
        l.max_n = 2;
        l.max_stop = 2;
        l.max_stop_bytes = 8;
        l.max_logit_bias = 3;
        l.max_messages = 4;
        l.max_depth = 6;
        l.max_user_bytes = 8;
    }
    /* the chat template's traits (proto/openai_msg.h shapes the history for them) */
    l.tool_family = (data[0] >> 3) % 3;
    l.developer_role = (data[0] >> 5) & 1;
    /* the body in its own allocation of exactly its size, so that a read past it is caught */
    size_t n = size - 1;
    char *body = malloc(n ? n : 1);
    if (!body) return 0;
    memcpy(body, data + 1, n);
    proto_req r;
    char msg[256], param[64];
    enum proto_err e =
        proto_req_parse(ep, body, n, &l, data[0] & 4 ? NULL : "<s>", data[0] & 4 ? NULL : "</s>",
                        &r, msg, sizeof msg, param, sizeof param);
    if (e == PROTO_ERR_NONE) {
        CHECK(r.ep == ep);
        check_req(&r, &l);
        proto_req_deinit(&r);
    } else {
        CHECK(msg[0] != 0);
        CHECK(memchr(msg, 0, sizeof msg) && memchr(param, 0, sizeof param));
    }
    free(body);
    return 0;
}

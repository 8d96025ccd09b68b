/* Finish reasons: eos ids (all of them), stop strings, max_tokens, context length, precedence. */
#include "model/gen/finish.h"
#include "tests/test.h"

TEST(finish_reasons)
{
    const int32_t eos[] = {128001, 128008, 128009}; /* Llama-3.1's three */
    CHECK_STR(model_finish_name(MODEL_FINISH_STOP), "stop");
    CHECK_STR(model_finish_name(MODEL_FINISH_LENGTH), "length");
    CHECK(model_finish_name(MODEL_FINISH_NONE) == NULL);

    CHECK_EQ(model_finish_step(5, eos, 3, 0, 1, 16, 10, 100), MODEL_FINISH_NONE);
    for (int i = 0; i < 3; i++) CHECK_EQ(model_finish_step(eos[i], eos, 3, 0, 1, 16, 10, 100), MODEL_FINISH_STOP);
    CHECK_EQ(model_finish_step(5, eos, 3, 1, 1, 16, 10, 100), MODEL_FINISH_STOP);
    CHECK_EQ(model_finish_step(5, eos, 3, 0, 16, 16, 10, 100), MODEL_FINISH_LENGTH);
    CHECK_EQ(model_finish_step(5, eos, 3, 0, 15, 16, 10, 100), MODEL_FINISH_NONE);
    CHECK_EQ(model_finish_step(5, eos, 3, 0, 1, 0, 99, 100), MODEL_FINISH_NONE); /* no max_tokens */
    CHECK_EQ(model_finish_step(5, eos, 3, 0, 1, 0, 100, 100), MODEL_FINISH_LENGTH); /* context full */
    CHECK_EQ(model_finish_step(5, NULL, 0, 0, 1, 0, 10, 100), MODEL_FINISH_NONE);
    /* eos or a stop string on the last allowed token: "stop" wins, as in vLLM. */
    CHECK_EQ(model_finish_step(eos[1], eos, 3, 0, 16, 16, 100, 100), MODEL_FINISH_STOP);
    CHECK_EQ(model_finish_step(5, eos, 3, 1, 16, 16, 100, 100), MODEL_FINISH_STOP);
    CHECK(model_finish_is_eos(128009, eos, 3));
    CHECK(!model_finish_is_eos(2, eos, 3));
    CHECK(!model_finish_is_eos(2, NULL, 0));
}

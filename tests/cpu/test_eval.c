/* tandem eval on the CPU itself: the teacher-forced machinery must give exact agreement with the
 * CPU (KL 0) and the reference's argmax everywhere on stories260K (trained, margins >= 0.0027),
 * and int8 KV shipped through the sink/import path must stay close. */
#include "tests/test.h"
#include "tests/util.h"
#include <jansson.h>

TEST(eval_cpu_exact)
{
    const char *modes[] = {"--mode prefill", "--mode decode --free-run"};
    for (int i = 0; i < 2; i++) {
        json_t *j = t_eval_stories(modes[i]);
        REQUIRE(j);
        CHECK_EQ(json_integer_value(json_object_get(j, "positions")), 400);
        CHECK_NEAR(json_real_value(json_object_get(j, "top1_agreement")), 1.0, 1e-9);
        CHECK_NEAR(json_real_value(json_object_get(j, "mean_kl")), 0.0, 1e-9);
        json_decref(j);
    }
}

TEST(eval_cpu_int8_kv_roundtrip)
{
    json_t *j = t_eval_stories("--mode kv --kv int8");
    REQUIRE(j);
    /* 5 cases x 63 continuation positions */
    CHECK_EQ(json_integer_value(json_object_get(j, "positions")), 315);
    CHECK(json_real_value(json_object_get(j, "top1_agreement")) >= 0.99);
    CHECK(json_real_value(json_object_get(j, "mean_kl")) <= 1e-3);
    CHECK(json_real_value(json_object_get(j, "mean_kl")) > 0); /* the KV really was quantized */
    json_decref(j);
}

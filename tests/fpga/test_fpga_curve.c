/* The card describes its decode cost by batch (accel_info.decode_curve, fpga/backend.c
 * fpga_curve) from its timing model, for the placement to weigh (scheduler/sched_policy.h):
 * batches 1, 2, 4, ... up to the image's max_batch, a step never cheaper for more sequences,
 * the KV of more positions never free. */
#include "tests/fpga/fpga_util.h"
#include "tests/test.h"

TEST(fpga_describes_its_decode_curve)
{
    model *m;
    accel_dev *d;
    if (tf_open("fpga-emu", 8, &m, &d)) return;
    accel_info info;
    accel_get_info(d, &info);
    const accel_decode_curve *c = &info.decode_curve;
    REQUIRE(c->n >= 1 && c->n <= ACCEL_CURVE_MAX);
    CHECK_EQ(c->batch[0], 1);
    CHECK_EQ(c->batch[c->n - 1], info.max_batch);
    for (int i = 0; i < c->n; i++) {
        CHECK(c->step_s[i] > 0 && c->step_s[i] < 1);
        if (i) {
            CHECK_EQ(c->batch[i], c->batch[i - 1] * 2 < info.max_batch ? c->batch[i - 1] * 2 : info.max_batch);
            CHECK(c->step_s[i] >= c->step_s[i - 1]);
        }
    }
    /* one pass over the weights serves the batch: B sequences cost less than B single steps */
    if (c->n > 1) CHECK(c->step_s[c->n - 1] < c->batch[c->n - 1] * c->step_s[0]);
    CHECK(c->ctx >= 2);
    CHECK(c->s_per_pos >= 0);
    accel_free(d);
    model_free(m);
}

/* The sampler's generator against published known answers (xoshiro256** at state {1,2,3,4} and
 * splitmix64 from 0, as recorded by independent implementations), and the jump's algebra. */
#include "model/sample/rng.h"
#include "tests/test.h"

TEST(rng_xoshiro_known_answers)
{
    static const uint64_t want[10] = {11520ULL, 0ULL, 1509978240ULL, 1215971899390074240ULL,
                                      1216172134540287360ULL, 607988272756665600ULL,
                                      16172922978634559625ULL, 8476171486693032832ULL,
                                      10595114339597558777ULL, 2904607092377533576ULL};
    model_rng r = {{1, 2, 3, 4}};
    for (int i = 0; i < 10; i++) {
        uint64_t got = model_rng_next(&r);
        CHECK_MSG(got == want[i], "output %d: %llu, want %llu", i, (unsigned long long)got,
                  (unsigned long long)want[i]);
    }
}

TEST(rng_splitmix_known_answers)
{
    uint64_t st = 0;
    CHECK(model_splitmix64(&st) == 0xE220A8397B1DCDAFULL);
    CHECK(model_splitmix64(&st) == 0x6E789E6AA1B965F4ULL);
    CHECK(model_splitmix64(&st) == 0x06C45D188009454FULL);
    /* seed() is four splitmix64 outputs. */
    model_rng r;
    model_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xE220A8397B1DCDAFULL && r.s[1] == 0x6E789E6AA1B965F4ULL &&
          r.s[2] == 0x06C45D188009454FULL);
}

TEST(rng_jump_commutes_and_separates)
{
    /* A jump is a polynomial in the transition matrix, so it commutes with next(). */
    model_rng a, b;
    model_rng_seed(&a, 42);
    b = a;
    model_rng_jump(&a);
    for (int i = 0; i < 5; i++) model_rng_next(&a);
    for (int i = 0; i < 5; i++) model_rng_next(&b);
    model_rng_jump(&b);
    CHECK(memcmp(a.s, b.s, sizeof a.s) == 0);
    /* And the jumped stream is not the original one. */
    model_rng c, d;
    model_rng_seed(&c, 42);
    d = c;
    model_rng_jump(&d);
    int same = 0;
    for (int i = 0; i < 64; i++) same += model_rng_next(&c) == model_rng_next(&d);
    CHECK_EQ(same, 0);
}

TEST(rng_uniform_range_and_mean)
{
    model_rng r;
    model_rng_seed(&r, 7);
    double sum = 0;
    int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = model_rng_uniform(&r);
        REQUIRE(u >= 0 && u < 1);
        sum += u;
    }
    /* Mean of U[0,1): 0.5 with standard error 1/sqrt(12 n) = 0.0009; 6 sigma. */
    CHECK_NEAR(sum / n, 0.5, 0.0055);
}

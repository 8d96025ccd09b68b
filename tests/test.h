/* tandem's test helper: TEST(name) defines a test; the Makefile lists every TEST in
 * build/test_list.h, and tests/main.c runs each one in a forked child (a crash or a hang fails
 * that test, not the run). Tests run with the repository root as the working directory. */
#ifndef TANDEM_TEST_H
#define TANDEM_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define TEST(name) void test_##name(void)

void t_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int t_failed(void);
/* A fresh temporary directory for this test (removed by the runner afterwards). */
const char *t_tmpdir(void);

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) t_fail(__FILE__, __LINE__, "CHECK(%s)", #c);                                     \
    } while (0)
#define CHECK_MSG(c, ...)                                                                          \
    do {                                                                                           \
        if (!(c)) t_fail(__FILE__, __LINE__, __VA_ARGS__);                                         \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) t_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);        \
    } while (0)
#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            t_fail(__FILE__, __LINE__, "%s == %s:\n  got      \"%s\"\n  expected \"%s\"", #a, #b,  \
                   a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                        \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (tol)))                                                             \
            t_fail(__FILE__, __LINE__, "|%s - %s| <= %g: %.9g vs %.9g", #a, #b, (double)(tol), a_, \
                   b_);                                                                            \
    } while (0)
/* Stop the test here when a check has failed (avoid cascades through bad pointers). */
#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            t_fail(__FILE__, __LINE__, "REQUIRE(%s)", #c);                                         \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define SKIP(...)                                                                                  \
    do {                                                                                           \
        t_skip(__VA_ARGS__);                                                                       \
        return;                                                                                    \
    } while (0)

#endif

/* tests/model/tok_test_util.h — helpers shared by the tokenizer tests. */
#ifndef TANDEM_TESTS_TOK_TEST_UTIL_H
#define TANDEM_TESTS_TOK_TEST_UTIL_H
#include "model/tok/tokenizer.h"
#include <stddef.h>
#include <stdint.h>

/* llama.cpp's tokenizer vectors: inputs separated by "\n__ggml_vocab_test__\n" and one line of
 * space-separated ids per input (tests/test-tokenizer-0.cpp reads them the same way). */
typedef struct tt_case {
    char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} tt_case;
/* Returns the number of cases (-1 on a read/parse error); *out is freed by tt_cases_free. */
long tt_ggml_cases(const char *inp, const char *out, tt_case **cases);
void tt_cases_free(tt_case *c, long n);

/* "[1, 2, 3]" for messages (static buffer). */
const char *tt_ids_str(const int32_t *ids, size_t n);

/* 1 when the ids encode to exactly `expect` (checks and reports otherwise). */
int tt_check_encode(const model_tok *t, const char *text, size_t len, int add_special,
                    const int32_t *expect, size_t n, const char *what);

#endif

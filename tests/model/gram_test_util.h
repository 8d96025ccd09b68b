/* tests/model/gram_test_util.h — what grammar tests share (model/grammar's and the JSON Schema
 * converter's in tests/proto). */
#ifndef TANDEM_TESTS_MODEL_GRAM_TEST_UTIL_H
#define TANDEM_TESTS_MODEL_GRAM_TEST_UTIL_H
#include "model/grammar/grammar.h"

/* 256 tokens, token i the byte i: every text is reachable, and a grammar's language is exactly
 * what it masks. */
model_gvocab *gram_bytes_vocab(void);

#endif

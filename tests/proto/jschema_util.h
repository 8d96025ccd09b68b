/* tests/proto/jschema_util.h — what the JSON Schema converter's tests share: a schema's compiled
 * grammar, acceptance of a whole document by the grammar's own matcher, and random documents
 * drawn from a grammar (the one-byte-per-token vocabulary: tests/model/gram_test_util.h). */
#ifndef TANDEM_TESTS_PROTO_JSCHEMA_UTIL_H
#define TANDEM_TESTS_PROTO_JSCHEMA_UTIL_H
#include "model/grammar/grammar.h"
#include "tests/model/gram_test_util.h" /* gram_bytes_vocab */
#include "proto/json_schema.h"
#include <stdint.h>

/* The compiled grammar of schema in mode; NULL with msg set when the converter refuses it (a
 * grammar the converter wrote that model/grammar refuses fails the test). */
model_grammar *jschema_grammar(const char *schema, enum proto_jschema_mode mode, char *msg,
                               size_t n);
/* 1 when g accepts doc whole. */
int jschema_accepts(model_grammar *g, const model_gvocab *v, const char *doc);
/* A random document of g (each next byte uniform among those the mask allows; ends with
 * probability 1/4 wherever it may, and as soon as it may once past cap/2 bytes) into out (cap
 * bytes, NUL-terminated). 0; -1 when the walk got stuck or ran past cap. *rng: xorshift state. */
int jschema_sample(model_grammar *g, const model_gvocab *v, uint64_t *rng, char *out, size_t cap);
uint64_t jschema_rand(uint64_t *rng);
/* Checks that g (the grammar of schema, named in the messages) accepts each of yes and refuses
 * each of no: arrays of at most n documents, ending early at a NULL. */
void jschema_expect(model_grammar *g, const model_gvocab *v, const char *schema,
                    const char *const *yes, const char *const *no, int n);

#endif

/* tests/fuzz/harness/harness_util.h — what the libFuzzer harnesses share: CHECK (a broken promise
 * aborts), a scratch directory per process for the loaders that read files, and a NUL split of
 * one input into parts.
 *
 * Threads: the harnesses are single-threaded (libFuzzer calls them from one thread). */
#ifndef TANDEM_FUZZ_HARNESS_UTIL_H
#define TANDEM_FUZZ_HARNESS_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A promise of the code under test, checked: when it is broken, the condition with its file and
 * line on stderr, then abort() (libFuzzer counts it as a crash and keeps the input). */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A fresh directory (under $TMPDIR, /dev/shm when it exists, else /tmp), removed with its files
 * at exit. The path is static storage. Aborts when it cannot be made (the harness cannot run). */
const char *fuzz_tmpdir(void);

/* Writes n bytes to dir/name (replacing it); aborts on an I/O error. Returns the path (static
 * storage, overwritten by the next call). */
const char *fuzz_write(const char *dir, const char *name, const void *data, size_t n);

/* Removes dir/name if it exists. */
void fuzz_unlink(const char *dir, const char *name);

/* Splits data at its first NUL byte: *head is data (length *head_n), *tail what follows the NUL
 * (NULL when there is no NUL). */
void fuzz_split(const uint8_t *data, size_t n, const uint8_t **head, size_t *head_n,
                const uint8_t **tail, size_t *tail_n);

/* A NUL-terminated heap copy (the caller frees). */
char *fuzz_strndup(const uint8_t *data, size_t n);

#endif

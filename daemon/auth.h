/* daemon/auth.h — API keys, stored as SHA-256 digests and compared in constant time.
 *
 * The raw keys never stay in memory: each is hashed when added (the caller wipes its copy), and a
 * presented key is hashed and compared against every stored digest with CRYPTO_memcmp, without
 * an early exit, so that neither the position of a mismatching byte nor which key matched shows
 * in the timing. Hashing first also makes the comparison independent of the key's length.
 *
 * Ownership: dmn_auth owns its digests. Threads: filled on the main thread at start-up, then
 * read-only (any thread may check). */
#ifndef TANDEM_DMN_AUTH_H
#define TANDEM_DMN_AUTH_H
#include <stddef.h>

typedef struct dmn_auth dmn_auth;

dmn_auth *dmn_auth_new(void);
void dmn_auth_free(dmn_auth *a);

/* Adds a key (len bytes; empty keys are refused). Returns 0, or -1 when empty / out of memory. */
int dmn_auth_add_key(dmn_auth *a, const char *key, size_t len);
/* A key file: at most 1 MiB, a key at most 4,095 bytes a line. */
#define DMN_AUTH_FILE_MAX (1u << 20)
#define DMN_AUTH_KEY_MAX  4095

/* Adds every line of text (n bytes) that is not empty and does not start with '#', white space
 * trimmed from both ends, as a key. Returns the number of keys added, or -1 with a message in err
 * naming `name` and the line: a key over DMN_AUTH_KEY_MAX bytes or with a NUL byte (refused whole,
 * never cut into keys), no key at all, out of memory. Keys added before an error stay added (the
 * daemon does not start on it). */
int dmn_auth_add_text(dmn_auth *a, const char *text, size_t n, const char *name, char *err,
                      size_t errlen);
/* dmn_auth_add_text over a file read whole (proto_textfile_read: at most DMN_AUTH_FILE_MAX, no
 * NUL byte, unbuffered; wiped after). Returns the keys added, or -1 with a message in err. */
int dmn_auth_add_file(dmn_auth *a, const char *path, char *err, size_t errlen);

/* Number of keys; 0 means authentication is off. */
int dmn_auth_count(const dmn_auth *a);

/* 1 when key (len bytes) is one of the stored keys, else 0. */
int dmn_auth_check(const dmn_auth *a, const char *key, size_t len);

/* 1 when the Authorization header value (may be NULL) is "Bearer <key>" with a stored key, or
 * when no keys are configured; else 0. The scheme name is matched case-insensitively (RFC 9110). */
int dmn_auth_check_bearer(const dmn_auth *a, const char *authorization);

#endif

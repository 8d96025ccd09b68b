/* daemon/auth.c — see auth.h. */
#include "daemon/auth.h"
#include "proto/textfile.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

struct dmn_auth {
    unsigned char (*digests)[SHA256_DIGEST_LENGTH];
    int n, cap;
};

dmn_auth *dmn_auth_new(void)
{
    return calloc(1, sizeof(dmn_auth));
}

void dmn_auth_free(dmn_auth *a)
{
    if (!a) return;
    if (a->digests) OPENSSL_cleanse(a->digests, (size_t)a->cap * SHA256_DIGEST_LENGTH);
    free(a->digests);
    free(a);
}

static int sha256(const char *s, size_t n, unsigned char out[SHA256_DIGEST_LENGTH])
{
    unsigned int len = 0;
    return EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

int dmn_auth_add_key(dmn_auth *a, const char *key, size_t len)
{
    if (!len) return -1;
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 4;
        void *p = realloc(a->digests, (size_t)cap * SHA256_DIGEST_LENGTH);
        if (!p) return -1;
        a->digests = p;
        a->cap = cap;
    }
    if (sha256(key, len, a->digests[a->n]) < 0) return -1;
    a->n++;
    return 0;
}

int dmn_auth_add_text(dmn_auth *a, const char *text, size_t n, const char *name, char *err,
                      size_t errlen)
{
    const char *at = text, *end = text + n, *line;
    size_t len;
    int added = 0, lineno = 0;
    while (proto_textfile_line(&at, end, &line, &len)) {
        lineno++;
        proto_textfile_trim(&line, &len);
        if (!len || *line == '#') continue;
        if (len > DMN_AUTH_KEY_MAX || memchr(line, 0, len)) {
            /* refused whole: a part of a line must not become a key */
            snprintf(err, errlen, "key file %s:%d: %s", name, lineno,
                     len > DMN_AUTH_KEY_MAX ? "a key over 4,095 bytes" : "a NUL byte");
            return -1;
        }
        if (dmn_auth_add_key(a, line, len) < 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        added++;
    }
    if (!added) {
        snprintf(err, errlen, "key file %s holds no key", name);
        return -1;
    }
    return added;
}

int dmn_auth_add_file(dmn_auth *a, const char *path, char *err, size_t errlen)
{
    char *text, why[160];
    size_t n;
    if (proto_textfile_read(path, DMN_AUTH_FILE_MAX, &text, &n, why, sizeof why) < 0) {
        snprintf(err, errlen, "key file %s: %s", path, why);
        return -1;
    }
    int added = dmn_auth_add_text(a, text, n, path, err, errlen);
    proto_textfile_free(text, n);
    return added;
}

int dmn_auth_count(const dmn_auth *a)
{
    return a ? a->n : 0;
}

int dmn_auth_check(const dmn_auth *a, const char *key, size_t len)
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    if (!a || a->n == 0 || sha256(key, len, d) < 0) return 0;
    int match = 0;
    for (int i = 0; i < a->n; i++) match |= CRYPTO_memcmp(d, a->digests[i], sizeof d) == 0;
    OPENSSL_cleanse(d, sizeof d);
    return match;
}

int dmn_auth_check_bearer(const dmn_auth *a, const char *h)
{
    if (dmn_auth_count(a) == 0) return 1;
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return 0;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    if (!n) return 0;
    return dmn_auth_check(a, h, n);
}

/* daemon/auth.c — see auth.h. */
#include "daemon/auth.h"
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

int dmn_auth_add_file(dmn_auth *a, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open key file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int added = 0, rc = 0;
    long total = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        total += (long)n;
        if (total > (1 << 20)) {
            snprintf(err, errlen, "key file %s is over 1 MiB", path);
            rc = -1;
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = 0;
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s || *s == '#') continue;
        if (dmn_auth_add_key(a, s, strlen(s)) < 0) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        added++;
    }
    OPENSSL_cleanse(line, sizeof line);
    fclose(f);
    if (rc == 0 && added == 0) {
        snprintf(err, errlen, "key file %s holds no key", path);
        rc = -1;
    }
    return rc < 0 ? -1 : added;
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

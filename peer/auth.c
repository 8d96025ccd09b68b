/* peer/auth.c — see auth.h. */
#include "peer/auth.h"
#include "proto/textfile.h"
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

int peer_nonce(uint8_t out[PEER_NONCE])
{
    return RAND_bytes(out, PEER_NONCE) == 1 ? 0 : -1;
}

void peer_mac(const uint8_t *key, size_t key_len, char role, const uint8_t first[PEER_NONCE],
              const uint8_t second[PEER_NONCE], uint8_t out[PEER_MAC])
{
    uint8_t msg[15 + 2 * PEER_NONCE];
    memcpy(msg, "tandem-peer-1 ", 14);
    msg[14] = (uint8_t)role;
    memcpy(msg + 15, first, PEER_NONCE);
    memcpy(msg + 15 + PEER_NONCE, second, PEER_NONCE);
    unsigned len = PEER_MAC;
    if (!HMAC(EVP_sha256(), key, (int)key_len, msg, sizeof msg, out, &len))
        memset(out, 0, PEER_MAC); /* never equal to a real proof of the other side: see equal */
}

int peer_mac_equal(const uint8_t a[PEER_MAC], const uint8_t b[PEER_MAC])
{
    static const uint8_t zero[PEER_MAC];
    return CRYPTO_memcmp(a, b, PEER_MAC) == 0 && CRYPTO_memcmp(a, zero, PEER_MAC) != 0;
}

int peer_key_parse(const char *text, size_t n, char *out, size_t out_cap, char *err, size_t errlen)
{
    const char *k = text;
    size_t len = n;
    proto_textfile_trim(&k, &len);
    const char *why = !len                   ? "no key"
                      : memchr(k, 0, len)    ? "a NUL byte"
                      : memchr(k, '\n', len) ? "more than one line"
                                             : NULL;
    if (why) {
        snprintf(err, errlen, "the peer key: %s", why);
        return -1;
    }
    if (len < PEER_KEY_MIN || len > PEER_KEY_MAX || len + 1 > out_cap) {
        snprintf(err, errlen, "the peer key must be %d to %d characters (it has %zu)", PEER_KEY_MIN,
                 PEER_KEY_MAX, len);
        return -1;
    }
    memmove(out, k, len);
    out[len] = 0;
    return 0;
}

int peer_key_load(const char *value, const char *file, char *out, size_t out_cap, char *err,
                  size_t errlen)
{
    if (value && value[0]) return peer_key_parse(value, strlen(value), out, out_cap, err, errlen);
    if (!file || !file[0]) {
        snprintf(err, errlen, "peers need a shared key: set peer_key or peer_key_file");
        return -1;
    }
    char *text, why[160];
    size_t n;
    /* the key on its first line; what follows is the operator's (a comment, say), bounded */
    if (proto_textfile_read(file, PEER_KEY_FILE_MAX, &text, &n, why, sizeof why) < 0) {
        snprintf(err, errlen, "peer_key_file %s: %s", file, why);
        return -1;
    }
    const char *at = text, *line = text;
    size_t len = 0;
    proto_textfile_line(&at, text + n, &line, &len);
    char perr[160];
    int rc = peer_key_parse(line, len, out, out_cap, perr, sizeof perr);
    if (rc) snprintf(err, errlen, "peer_key_file %s: %s", file, perr);
    proto_textfile_free(text, n);
    return rc;
}

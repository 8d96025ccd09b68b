/* peer/auth.c — see auth.h. */
#include "peer/auth.h"
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

int peer_key_load(const char *value, const char *file, char *out, size_t out_cap, char *err,
                  size_t errlen)
{
    char buf[PEER_KEY_MAX + 2];
    const char *src = value;
    if ((!value || !value[0]) && file && file[0]) {
        FILE *f = fopen(file, "r");
        if (!f) {
            snprintf(err, errlen, "peer_key_file %s: %s", file, strerror(errno));
            return -1;
        }
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
        src = buf;
    }
    if (!src || !src[0]) {
        snprintf(err, errlen, "peers need a shared key: set peer_key or peer_key_file");
        return -1;
    }
    while (isspace((unsigned char)*src)) src++;
    size_t n = strlen(src);
    while (n && isspace((unsigned char)src[n - 1])) n--;
    if (n < PEER_KEY_MIN || n > PEER_KEY_MAX || n + 1 > out_cap) {
        snprintf(err, errlen, "the peer key must be %d to %d characters (it has %zu)", PEER_KEY_MIN,
                 PEER_KEY_MAX, n);
        OPENSSL_cleanse(buf, sizeof buf);
        return -1;
    }
    memmove(out, src, n);
    out[n] = 0;
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

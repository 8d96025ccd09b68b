/* peer/auth.h — the handshake's proofs: HMAC-SHA256 over the other side's fresh nonce with the
 * key every node of a fleet shares (peer_key / peer_key_file), OpenSSL's implementation.
 *
 *   mac_s = HMAC(key, "tandem-peer-1 s" | nonce_c | nonce_s)   the server proves it holds the key
 *   mac_c = HMAC(key, "tandem-peer-1 c" | nonce_s | nonce_c)   the client proves it
 *   token = HMAC(key, "tandem-peer-1 k" | nonce_c | nonce_s)   the connection's KV token: each
 *           tagged KV chunk carries it (peer/msg.h), never sent on its own
 *
 * The role labels keep a reflected proof (a server's mac replayed as a client's) from passing,
 * and keep the token apart from both proofs, which travel in the clear.
 * Threads: any. */
#ifndef TANDEM_PEER_AUTH_H
#define TANDEM_PEER_AUTH_H
#include "peer/msg.h"
#include <stddef.h>
#include <stdint.h>

/* A key shorter than this is refused at start-up: 16 bytes of a random key (or 32 hex digits) */
#define PEER_KEY_MIN 16
#define PEER_KEY_MAX 1024
#define PEER_KEY_FILE_MAX (64u << 10) /* a key file: its first line is the key */

/* Fresh random bytes (OpenSSL's RAND_bytes): 0, or -1 when the generator failed. */
int peer_nonce(uint8_t out[PEER_NONCE]);
/* role 's', 'c' or 'k'; first, second: the nonces in the order the formula above gives. */
void peer_mac(const uint8_t *key, size_t key_len, char role, const uint8_t first[PEER_NONCE],
              const uint8_t second[PEER_NONCE], uint8_t out[PEER_MAC]);
/* Constant-time comparison of a received mac with the expected one: 1 when equal. */
int peer_mac_equal(const uint8_t a[PEER_MAC], const uint8_t b[PEER_MAC]);
/* The key in text (n bytes): the text with white space cut from both ends, one line of
 * PEER_KEY_MIN to PEER_KEY_MAX bytes and no NUL byte. 0 with the key in out (out_cap >=
 * PEER_KEY_MAX + 1), or -1 with a message in err (no key, too short or long, a NUL byte, more
 * than one line). */
int peer_key_parse(const char *text, size_t n, char *out, size_t out_cap, char *err, size_t errlen);
/* The key from a value (peer_key) or else a file's first line (peer_key_file, read whole: at
 * most PEER_KEY_FILE_MAX bytes, no NUL byte, unbuffered, wiped after), through peer_key_parse: 0,
 * or -1 with a message in err naming the file (also: no key set, unreadable). */
int peer_key_load(const char *value, const char *file, char *out, size_t out_cap, char *err,
                  size_t errlen);

#endif

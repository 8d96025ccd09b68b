/* tests/fuzz/harness/fuzz_keys.c — libFuzzer harness for the key files' parsers: the API and
 * admin key files (daemon/auth.c, dmn_auth_add_text / dmn_auth_add_file) and the peer key
 * (peer/auth.c, peer_key_parse / peer_key_load).
 *
 * Input: byte 0 bit 0 picks the parser (0: API keys, 1: the peer key), bit 1 whether the rest
 * goes through a file (the read whole and bounded, proto/textfile.c) or straight to the text
 * parser. Promises checked: API keys — a count equal to the lines that are neither empty nor a
 * comment once trimmed, each of them a key that dmn_auth_check accepts, and nothing added on a
 * refusal that comes before any key; the peer key — PEER_KEY_MIN..PEER_KEY_MAX bytes, one line,
 * no white space at either end, equal to the (first line's, from a file) trimmed text. A
 * refusal has a message. */
#include "daemon/auth.h"
#include "peer/auth.h"
#include "proto/textfile.h"
#include "tests/fuzz/harness/harness_util.h"
#include <ctype.h>
#include <string.h>

static void api_keys(const char *text, size_t n, int via_file)
{
    dmn_auth *a = dmn_auth_new();
    CHECK(a);
    char err[512] = "";
    int got =
        via_file ? dmn_auth_add_file(a, fuzz_write(fuzz_tmpdir(), "keys", text, n), err, sizeof err)
                 : dmn_auth_add_text(a, text, n, "keys", err, sizeof err);
    if (got < 0) {
        CHECK(err[0]);
    } else {
        /* every key line, trimmed, is a key; the count is theirs */
        const char *at = text, *line;
        size_t len;
        int lines = 0;
        while (proto_textfile_line(&at, text + n, &line, &len)) {
            proto_textfile_trim(&line, &len);
            if (!len || *line == '#') continue;
            lines++;
            CHECK(len <= DMN_AUTH_KEY_MAX);
            CHECK(dmn_auth_check(a, line, len));
        }
        CHECK(got == lines && got > 0 && dmn_auth_count(a) == got);
    }
    dmn_auth_free(a);
}

static void peer_key(const char *text, size_t n, int via_file)
{
    char key[PEER_KEY_MAX + 1], err[512] = "";
    int rc = via_file ? peer_key_load(NULL, fuzz_write(fuzz_tmpdir(), "peer_key", text, n), key,
                                      sizeof key, err, sizeof err)
                      : peer_key_parse(text, n, key, sizeof key, err, sizeof err);
    if (rc) {
        CHECK(rc == -1 && err[0]);
        return;
    }
    size_t len = strlen(key);
    CHECK(len >= PEER_KEY_MIN && len <= PEER_KEY_MAX);
    CHECK(!strchr(key, '\n') && !isspace((unsigned char)key[0]) &&
          !isspace((unsigned char)key[len - 1]));
    const char *at = text, *line = text;
    size_t ln = n;
    if (via_file) proto_textfile_line(&at, text + n, &line, &ln);
    proto_textfile_trim(&line, &ln);
    CHECK(ln == len && !memcmp(line, key, len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    const char *text = (const char *)data + 1;
    if (data[0] & 1)
        peer_key(text, n - 1, (data[0] >> 1) & 1);
    else
        api_keys(text, n - 1, (data[0] >> 1) & 1);
    return 0;
}

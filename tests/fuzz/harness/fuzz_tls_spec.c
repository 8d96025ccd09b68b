/* tests/fuzz/harness/fuzz_tls_spec.c — libFuzzer harness for the decode_sparse spec parser
 * (sparse/tls.c's sparse_tls_parse), which reads the daemon's decode_sparse key, its environment
 * variable and accel_opts.decode_sparse.
 *
 * Input: byte 0 picks the model's head_dim the spec is checked against (16 << (b % 4): 16 .. 128);
 * the rest, up to its first NUL, is the spec. Promises checked: an accepted spec that turns the
 * method on gives parameters sparse_tls_params_check accepts (channels against head_dim when the
 * spec named them); an off spec leaves *on 0; a refusal has a message and leaves *on 0. */
#include "sparse/tls.h"
#include "tests/fuzz/harness/harness_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    int hd = 16 << (data[0] % 4);
    char *spec = malloc(n);
    if (!spec) return 0;
    memcpy(spec, data + 1, n - 1);
    spec[n - 1] = 0;
    sparse_tls_params p;
    int on = -1, chan = -1;
    char err[300];
    err[0] = 0;
    int st = sparse_tls_parse(spec, hd, &p, &on, &chan, err, sizeof err);
    if (st == 0) {
        CHECK(on == 0 || on == 1);
        CHECK(chan == 0 || chan == 1);
        if (on) CHECK(sparse_tls_params_check(&p, chan ? hd : 0, NULL, 0) == 0);
    } else {
        CHECK(st == SPARSE_TLS_ERR_INVALID && err[0] && on == 0);
    }
    free(spec);
    return 0;
}

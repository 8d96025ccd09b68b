/* tests/model/gram_test_util.c — see gram_test_util.h. */
#include "tests/model/gram_test_util.h"

model_gvocab *gram_bytes_vocab(void)
{
    static char bytes[256];
    const char *b[256];
    size_t l[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        b[i] = &bytes[i];
        l[i] = 1;
    }
    return model_gvocab_new(256, b, l, NULL, NULL, 0, 0);
}

/* proto/sse.c — see sse.h. */
#include "proto/sse.h"
#include <string.h>

size_t proto_sse_data_size(size_t n)
{
    /* Worst case every byte is a line break: each becomes "\ndata: " (7 bytes); plus the first
     * "data: ", the closing "\n\n" and the NUL. */
    return n * 7 + 6 + 2 + 1;
}

size_t proto_sse_data(char *out, const char *payload, size_t n)
{
    size_t o = 0;
    memcpy(out, "data: ", 6);
    o = 6;
    for (size_t i = 0; i < n; i++) {
        char c = payload[i];
        if (c == '\r' || c == '\n') {
            if (c == '\r' && i + 1 < n && payload[i + 1] == '\n') i++;
            memcpy(out + o, "\ndata: ", 7);
            o += 7;
        } else {
            out[o++] = c;
        }
    }
    out[o++] = '\n';
    out[o++] = '\n';
    out[o] = 0;
    return o;
}

size_t proto_sse_comment(char *out, size_t outn, const char *text)
{
    size_t n = strlen(text);
    if (outn < n + 5) return 0;
    size_t o = 0;
    out[o++] = ':';
    out[o++] = ' ';
    for (size_t i = 0; i < n; i++) out[o++] = (text[i] == '\n' || text[i] == '\r') ? ' ' : text[i];
    out[o++] = '\n';
    out[o++] = '\n';
    out[o] = 0;
    return o;
}

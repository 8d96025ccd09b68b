/* proto/textfile.c — see textfile.h. */
#include "proto/textfile.h"
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int proto_textfile_read(const char *path, size_t max, char **out, size_t *n, char *why,
                        size_t whylen)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    (void)setvbuf(f, NULL, _IONBF, 0); /* no copy of the bytes in stdio's buffer */
    char *buf = max < (size_t)-2 ? malloc(max + 2) : NULL;
    size_t got = 0, r;
    while (buf && got <= max && (r = fread(buf + got, 1, max + 1 - got, f)) > 0) got += r;
    const int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf)
        snprintf(why, whylen, "out of memory");
    else if (rerr)
        snprintf(why, whylen, "%s", strerror(rerr));
    else if (got > max && max && max % (1u << 20) == 0)
        snprintf(why, whylen, "over %zu MiB", max >> 20);
    else if (got > max && max && max % 1024 == 0)
        snprintf(why, whylen, "over %zu KiB", max >> 10);
    else if (got > max)
        snprintf(why, whylen, "over %zu bytes", max);
    else if (memchr(buf, 0, got))
        snprintf(why, whylen, "a NUL byte (not a text file)");
    else {
        buf[got] = 0;
        *out = buf;
        *n = got;
        return 0;
    }
    proto_textfile_free(buf, got);
    return -1;
}

void proto_textfile_free(char *text, size_t n)
{
    if (!text) return;
    explicit_bzero(text, n);
    free(text);
}

int proto_textfile_line(const char **at, const char *end, const char **line, size_t *len)
{
    if (*at >= end) return 0;
    const char *nl = memchr(*at, '\n', (size_t)(end - *at));
    *line = *at;
    *len = (size_t)((nl ? nl : end) - *at);
    *at = nl ? nl + 1 : end;
    return 1;
}

void proto_textfile_trim(const char **line, size_t *len)
{
    while (*len && isspace((unsigned char)(*line)[*len - 1])) (*len)--;
    while (*len && isspace((unsigned char)**line)) (*line)++, (*len)--;
}

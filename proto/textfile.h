/* proto/textfile.h — small text files that hold settings or secrets (the config file, API and
 * peer key files), read whole before anything in them is parsed.
 *
 * Whole: the file's size is bounded by what was read, not by what its lines hold, and a pipe or a
 * device (--config /dev/zero) reads the same way. Unbuffered: stdio keeps no copy of a key's
 * bytes. A NUL byte is refused (a binary file named by mistake; a C string would stop at it and
 * hide the rest of its line, e.g. half a key). Threads: any. */
#ifndef TANDEM_PROTO_TEXTFILE_H
#define TANDEM_PROTO_TEXTFILE_H
#include <stddef.h>

/* Reads path whole, at most max bytes: 0 with the text NUL-terminated in *out (malloc'd, *n bytes
 * before the NUL; free it with proto_textfile_free), or -1 with why in why (cannot open or read
 * it, with strerror's words — a directory reads as one —, "over 1 MiB" (or KiB, or bytes), "a NUL
 * byte (not a text file)", out of memory); *out is then NULL. */
int proto_textfile_read(const char *path, size_t max, char **out, size_t *n, char *why,
                        size_t whylen);
/* Wipes the n bytes of text (it may hold keys), then frees it. NULL is fine. */
void proto_textfile_free(char *text, size_t n);

/* The next line of text [*at, end): its start in *line and length in *len (without its '\n'),
 * *at moved past it. 0 when no line is left. The line's bytes are not changed. */
int proto_textfile_line(const char **at, const char *end, const char **line, size_t *len);
/* The line with white space (isspace) cut from both ends: *line and *len moved in. */
void proto_textfile_trim(const char **line, size_t *len);

#endif

/* devices/name.h — "kind[:N]" device names, shared by the devices/ sources (not a public
 * interface). */
#ifndef TANDEM_DEVICES_NAME_H
#define TANDEM_DEVICES_NAME_H
#include <stddef.h>

/* "kind[:N]" -> kind (at most kindlen - 1 characters), index (0 without ":N", else 0..255):
 * 0, or -1 with a message in err. */
int devices_parse_name(const char *name, char *kind, size_t kindlen, int *index, char *err,
                       size_t errlen);

#endif

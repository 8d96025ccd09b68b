/* model/gen/stop.h — stop strings matched on the streamed text, across token boundaries, never
 * emitted.
 *
 * The text arrives in pieces (one per token, from the streaming detokenizer). The matcher passes
 * on everything that cannot be the start of a stop string and holds back the rest: the longest
 * suffix of the text so far that is a prefix of some stop string (at most the longest stop minus
 * one byte). When a stop string completes, generation is over: the text before it is released,
 * the stop string and anything after it never are.
 *
 * Which stop wins: the one that completes first in the text (as if the text were fed one byte at
 * a time); among stops completing at the same byte, the longest (the earliest start), so no part
 * of a completed stop is ever emitted. The result never depends on how the text was split into
 * pushes, nor on the order of the stop list.
 *
 * Algorithm: one Knuth-Morris-Pratt automaton per stop string, advanced byte by byte, so a push
 * costs O(len * n_stops) amortized, whatever the stops look like (no rescans of the held text).
 *
 * UTF-8: stop strings must be valid UTF-8 (checked); with valid UTF-8 input, a partial match always
 * starts on a character boundary, so held-back text never splits a character (the boundary is
 * also checked defensively). Stop strings are plain byte comparisons: no normalization.
 *
 * Threads: one thread at a time per instance (one matcher per choice). */
#ifndef TANDEM_MODEL_STOP_H
#define TANDEM_MODEL_STOP_H
#include <stddef.h>

#define MODEL_MAX_STOPS 16     /* above OpenAI's 4 and vLLM's usual lists; bounds per-byte work */
#define MODEL_MAX_STOP_LEN 256 /* bytes per stop string */

typedef struct model_stop model_stop;

/* stops[0..n): NUL-terminated, 1..MODEL_MAX_STOP_LEN bytes each, valid UTF-8; n in
 * 0..MODEL_MAX_STOPS (0: nothing ever matches, text passes through). Copies the strings. Returns
 * NULL with a message naming the offending stop in err. The caller owns the result. */
model_stop *model_stop_new(const char *const *stops, int n, char *err, size_t errlen);

/* Feeds newly decoded text (len bytes, valid UTF-8). Returns the text safe to emit now and sets
 * *out_len; the pointer is owned by the matcher and valid until the next call on it. *hit = 1 when
 * a stop string completed in this push (only the text before it is returned); after a hit every
 * further push returns nothing with *hit = 1. Returns NULL (and *out_len = 0) only when memory
 * runs out. */
const char *model_stop_push(model_stop *s, const char *text, size_t len, size_t *out_len, int *hit);

/* Generation finished for another reason (eos, length): releases the held-back text and resets
 * the matcher. Same ownership as push. */
const char *model_stop_flush(model_stop *s, size_t *out_len);

void model_stop_free(model_stop *s);

#endif

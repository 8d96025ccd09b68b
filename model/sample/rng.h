/* model/sample/rng.h — the sampler's pseudo-random generator: xoshiro256** 1.0 (Blackman & Vigna,
 * 2018), seeded through splitmix64.
 *
 * Why our own: a request's `seed` must give the same tokens on every machine and every libc, so
 * the generator is fully specified here rather than borrowed from rand()/random().
 *
 *   seed(x):  s[0..3] = four consecutive outputs of splitmix64 started at state x
 *   next():   the xoshiro256** step (64-bit output)
 *   jump():   advances the state by 2^128 steps (the published jump polynomial), which splits one
 *             seed into 2^128 non-overlapping streams: choice k of a request uses seed + k jumps.
 *   uniform(): (next() >> 11) * 2^-53, a double in [0, 1) with 53 random bits.
 *
 * Thread safety: a model_rng is plain data; one owner at a time. */
#ifndef TANDEM_MODEL_RNG_H
#define TANDEM_MODEL_RNG_H
#include <stdint.h>

typedef struct model_rng {
    uint64_t s[4];
} model_rng;

/* One splitmix64 step on *state (returns the output, advances *state). */
uint64_t model_splitmix64(uint64_t *state);
void model_rng_seed(model_rng *r, uint64_t seed);
uint64_t model_rng_next(model_rng *r);
void model_rng_jump(model_rng *r);
double model_rng_uniform(model_rng *r);

#endif

/* model/sample/rng.c — xoshiro256** and splitmix64, written from the published algorithm
 * descriptions (see rng.h). Known-answer values are checked in tests/model/test_rng.c. */
#include "model/sample/rng.h"

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t model_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void model_rng_seed(model_rng *r, uint64_t seed)
{
    /* splitmix64 is a bijection on its state sequence, so four consecutive outputs are never all
     * zero: the all-zero state (xoshiro's only fixed point) cannot arise. */
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) r->s[i] = model_splitmix64(&st);
}

uint64_t model_rng_next(model_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

void model_rng_jump(model_rng *r)
{
    /* Coefficients of the characteristic-polynomial remainder for 2^128 steps, as published with
     * xoshiro256** (the state after the jump is a GF(2) combination of the states it passes). */
    static const uint64_t jump[4] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL,
                                     0xa9582618e03fc9aaULL, 0x39abdc4529b1661cULL};
    uint64_t acc[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 64; b++) {
            if (jump[i] & (1ULL << b))
                for (int k = 0; k < 4; k++) acc[k] ^= r->s[k];
            model_rng_next(r);
        }
    for (int k = 0; k < 4; k++) r->s[k] = acc[k];
}

double model_rng_uniform(model_rng *r)
{
    return (double)(model_rng_next(r) >> 11) * 0x1.0p-53;
}

/* rng.h: the tests' one pseudo-random source, xorshift64 (shifts 13, 7, 17), and the draws they
 * take from it. Each test keeps its own state and seed, so its inputs stay what they were. */
#ifndef GLMCHAT_TESTS_COMMON_RNG_H
#define GLMCHAT_TESTS_COMMON_RNG_H

#include <math.h>
#include <stdint.h>

/* Advances *state (never 0) and returns the new state. */
static inline uint64_t test_rng_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* 32 bits from the middle of the next state. */
static inline uint32_t test_rng_u32(uint64_t *state)
{
    return (uint32_t)(test_rng_next(state) >> 16);
}

/* Uniform in [-1, 1) on a grid of 2^-23 (24 bits of test_rng_u32). */
static inline float test_rng_uniform(uint64_t *state)
{
    return (float)(test_rng_u32(state) & 0xFFFFFF) / (float)0x800000 - 1.0f;
}

/* Uniform in (0, 1), 53 bits: never 0, so its log is finite. */
static inline double test_rng_unit(uint64_t *state)
{
    return ((double)(test_rng_next(state) >> 11) + 0.5) / 9007199254740992.0;
}

/* A standard normal draw (Box-Muller over two test_rng_unit draws). */
static inline double test_rng_gauss(uint64_t *state)
{
    double u1 = test_rng_unit(state), u2 = test_rng_unit(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif

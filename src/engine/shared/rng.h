/*
 * rng.h - the engine's one random number generator: counter-based, stateless.
 *
 * A draw is a pure function of a 5-tuple (seed, env, tick, purpose, i), so any
 * thread on any device can make any draw in any order and get the same bits:
 * the CPU and CUDA environments and the trainer's sampling replay identically
 * whatever the thread count or launch shape. There is no state to save in a
 * checkpoint beyond the counters the callers already keep.
 *
 * Integer operations only (64-bit multiply, xor, shift): bit-identical on every
 * host compiler and in CUDA device code. Header-only; every function is MR_HD.
 *
 * It is not a cryptographic generator and not a stream: callers choose the
 * counters (see the keying comment in foraging.h for the environment).
 */
#ifndef MR_RNG_H
#define MR_RNG_H
#include <stdint.h>

#ifndef MR_HD
#if defined(__CUDACC__)
#define MR_HD __host__ __device__ __forceinline__
#else
#define MR_HD static inline
#endif
#endif

/* What a draw is for: part of the key, so streams for different purposes at
 * the same (env, tick) never share bits. Values are fixed (checkpoints and
 * recorded trajectories depend on them): only ever add new ones. */
enum {
    MR_RNG_DENSITY = 1,         /* full reset: food / poison counts */
    MR_RNG_PLACE = 2,           /* full reset: item and agent cells */
    MR_RNG_AGENT = 3,           /* auto-reset: the agent's new cell */
    MR_RNG_RESPAWN_FOOD = 4,    /* respawn candidates for eaten food */
    MR_RNG_RESPAWN_POISON = 5,  /* respawn candidates for eaten poison */
    MR_RNG_ACTION = 6,          /* trainer: action sampling */
    MR_RNG_SHUFFLE = 7,         /* trainer: minibatch permutation */
    MR_RNG_INIT = 8,            /* trainer: weight initialisation */
    MR_RNG_CARTPOLE_RESET = 9,  /* cartpole: a new episode's state (envs/cartpole.h) */
    MR_RNG_PENDULUM_RESET = 10, /* pendulum: a new episode's state (envs/pendulum.h) */
    MR_RNG_LUA = 11             /* a Lua environment's draws, unless it names a purpose (envs/program.h) */
};

/* splitmix64's finaliser (Stafford's Mix13): a bijection on 64 bits with full
 * avalanche. mix(0) == 0, so keys are offset before mixing. */
MR_HD uint64_t mr_rng_mix(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

/* 64 random bits for the key (seed, env, tick, purpose, i):
 *   h0 = mix(seed + G)
 *   h1 = mix(h0 ^ (env << 32 | tick) + G)
 *   h2 = mix(h1 ^ (purpose << 32 | i) + G)       G = 0x9e3779b97f4a7c15
 * Each stage is a bijection of the word it absorbs, so for a fixed seed two
 * different (env, tick) pairs never share h1, and for a fixed h1 two different
 * (purpose, i) pairs never share the result. */
MR_HD uint64_t mr_rng_u64(uint64_t seed, uint32_t env, uint32_t tick, uint32_t purpose, uint32_t i) {
    const uint64_t G = 0x9e3779b97f4a7c15ULL;
    uint64_t h = mr_rng_mix(seed + G);
    h = mr_rng_mix((h ^ (((uint64_t)env << 32) | tick)) + G);
    h = mr_rng_mix((h ^ (((uint64_t)purpose << 32) | i)) + G);
    return h;
}

/* Uniform in [0, 1) with 24 random bits: the top 24 bits times 2^-24, both
 * steps exact in float. */
MR_HD float mr_rng_uniform(uint64_t seed, uint32_t env, uint32_t tick, uint32_t purpose, uint32_t i) {
    return (float)(uint32_t)(mr_rng_u64(seed, env, tick, purpose, i) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform in [0, n) by multiply-shift on the top 32 bits (Lemire's method
 * without its rejection step, so no loop): an outcome's probability is off by
 * at most n / 2^32 relative, 2^-18 for a 128x128 grid's 16384 cells.
 * n = 0 returns 0. */
MR_HD uint32_t mr_rng_below(uint64_t seed, uint32_t env, uint32_t tick, uint32_t purpose, uint32_t i,
                            uint32_t n) {
    uint64_t hi = mr_rng_u64(seed, env, tick, purpose, i) >> 32;
    return (uint32_t)((hi * (uint64_t)n) >> 32);
}

#endif /* MR_RNG_H */

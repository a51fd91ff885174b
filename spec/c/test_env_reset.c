/*
 * test_env_reset.c - where the foraging environment puts things: the keyed
 * counter RNG (rng.h) and the full reset (foraging.h, env_cpu.c) against
 * ENV_SPEC.md.
 *
 * RNG: the same key gives the same number, every field of the key matters,
 * mr_rng_below stays in range and is flat over 8 buckets, mr_rng_uniform is
 * in [0, 1), covers it, has mean 1/2 and is a multiple of 2^-24. Full reset:
 * food and poison densities in [density_min, density_max] and covering it,
 * the grid's cells matching the counts, the agent on an empty cell, the
 * observation matching the grid, energy and steps reset, a second reset
 * drawing new grids; and the spec's default densities.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

static void test_rng(void) {
    CHECK(mr_rng_u64(1, 2, 3, 4, 5) == mr_rng_u64(1, 2, 3, 4, 5));
    /* every field of the key matters */
    uint64_t base = mr_rng_u64(1, 2, 3, 4, 5);
    CHECK(mr_rng_u64(2, 2, 3, 4, 5) != base);
    CHECK(mr_rng_u64(1, 3, 3, 4, 5) != base);
    CHECK(mr_rng_u64(1, 2, 4, 4, 5) != base);
    CHECK(mr_rng_u64(1, 2, 3, 5, 5) != base);
    CHECK(mr_rng_u64(1, 2, 3, 4, 6) != base);
    CHECK(mr_rng_u64(0, 0, 0, 0, 0) != 0);
    /* ranges, and rough uniformity: 8 buckets x 10,000 expected */
    int hist[8] = {0}, in_range = 1;
    double sum = 0;
    float umin = 1, umax = 0;
    for (uint32_t k = 0; k < 80000; k++) {
        uint32_t b = mr_rng_below(42, k & 15, k >> 4, MR_RNG_ACTION, 0, 8);
        in_range &= b < 8;
        if (b < 8) hist[b]++;
        float u = mr_rng_uniform(42, 0, k, MR_RNG_INIT, 1);
        sum += u;
        if (u < umin) umin = u;
        if (u > umax) umax = u;
        in_range &= mr_rng_below(42, 0, k, 1, 2, 1) == 0 && mr_rng_below(42, 0, k, 1, 2, 16384) < 16384;
    }
    CHECK(in_range);
    int flat = 1;
    for (int b = 0; b < 8; b++) flat &= hist[b] > 9600 && hist[b] < 10400;
    CHECK_MSG(flat, "below(8) histogram %d %d %d %d %d %d %d %d", hist[0], hist[1], hist[2], hist[3], hist[4],
              hist[5], hist[6], hist[7]);
    CHECK(umin >= 0.0f && umax < 1.0f && umin < 0.001f && umax > 0.999f);
    CHECK_NEAR(sum / 80000, 0.5, 0.005, 0);
    /* 24 bits: every uniform is a multiple of 2^-24 */
    float u = mr_rng_uniform(9, 9, 9, 9, 9);
    CHECK(u * 16777216.0f == (float)(uint32_t)(u * 16777216.0f));
}

static void test_full_reset(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 64, 32, 3, 16, 20, 50, 512);
    mr_env *e = make_env(&c, 21, 1);
    mr_env_state *s = &e->s;
    int lo = 1 << 30, hi = -1, ok = 1;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 64; i++) {
            const uint8_t *g = mr_forage_of(s)->grid + (size_t)i * 1024;
            int f = mr_forage_of(s)->food_count[i], p = mr_forage_of(s)->poison_count[i];
            ok &= f >= 16 && f <= 20 && p >= 16 && p <= 20;
            ok &= count_code(g, 1024, 1) == f && count_code(g, 1024, 2) == p;
            ok &= g[mr_forage_of(s)->y[i] * 32 + mr_forage_of(s)->x[i]] == 0 && obs_matches_grid(s, i);
            ok &= mr_forage_of(s)->energy[i] == 1.0f && s->steps[i] == 0 && mr_forage_of(s)->resets[i] == (uint32_t)round + 1;
            lo = f < lo ? f : lo; lo = p < lo ? p : lo;
            hi = f > hi ? f : hi; hi = p > hi ? p : hi;
        }
        if (round == 0) {
            uint8_t *before = malloc(64 * 1024);
            memcpy(before, mr_forage_of(s)->grid, 64 * 1024);
            CHECK(mr_env_reset(e, NULL) == MR_OK);
            CHECK_MSG(memcmp(before, mr_forage_of(s)->grid, 64 * 1024) != 0, "a second full reset draws new grids");
            free(before);
        }
    }
    CHECK_MSG(ok, "full reset: densities in [16, 20], counts match, agent on an empty cell");
    CHECK_MSG(lo == 16 && hi == 20, "densities cover [16, 20]: saw [%d, %d]", lo, hi);
    mr_env_free(e);
    /* the spec default */
    c = make_cfg(MR_MODE_GROUND_TRUTH, 8, 128, 5, 64, 256, 50, 512);
    e = make_env(&c, 22, 1);
    ok = 1;
    for (int i = 0; i < 8; i++) {
        const uint8_t *g = mr_forage_of(&e->s)->grid + (size_t)i * 16384;
        ok &= mr_forage_of(&e->s)->food_count[i] >= 64 && mr_forage_of(&e->s)->food_count[i] <= 256 && count_code(g, 16384, 1) == mr_forage_of(&e->s)->food_count[i];
        ok &= mr_forage_of(&e->s)->poison_count[i] >= 64 && mr_forage_of(&e->s)->poison_count[i] <= 256 &&
              count_code(g, 16384, 2) == mr_forage_of(&e->s)->poison_count[i];
    }
    CHECK_MSG(ok, "spec default full reset: densities in [64, 256]");
    mr_env_free(e);
}

int main(void) {
    test_rng();
    test_full_reset();
    return check_report("test_env_reset");
}

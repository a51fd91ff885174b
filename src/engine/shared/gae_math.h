/*
 * gae_math.h - generalized advantage estimation (GAE), written once as MR_HD
 * functions (plain C, host+device): kernels/ppo.cu launches a column per
 * environment, src/engine/cpu/ppo.c loops over the steps, so the two cannot
 * drift apart. In double, from the rollout's floats.
 *
 * Shapes: reward, value, done, adv, ret are (T,N) row-major; last_value (N).
 */
#ifndef MR_GAE_MATH_H
#define MR_GAE_MATH_H
#include <stddef.h>
#include <stdint.h>
#include "rng.h"   /* MR_HD */

/* The recursion's coefficients g = gamma, gl = gamma * lambda, in double
 * from the floats (not gamma * lambda rounded to float first). */
MR_HD void mr_gae_coefs(float gamma, float lambda, double *g, double *gl) {
    *g = gamma;
    *gl = (double)gamma * (double)lambda;
}

/* One environment, one step back in time: *a is A_{t+1} in and A_t out,
 * *next_v is V_{t+1} in and V_t out; writes adv_t, ret_t. In double:
 *   delta = r + g (1 - d) V_{t+1} - V_t;  A_t = delta + gl (1 - d) A_{t+1}
 * with g, gl from mr_gae_coefs. */
MR_HD void mr_gae_step(float reward, float value, uint8_t done, double g, double gl, double *next_v, double *a,
                       float *adv, float *ret) {
    const double keep = done ? 0.0 : 1.0;
    const double v = value;
    const double delta = (double)reward + g * keep * *next_v - v;
    *a = delta + gl * keep * *a;
    *adv = (float)*a;
    *ret = (float)(*a + v);
    *next_v = v;
}

/* Environment n's whole column of a (T,N) rollout, backwards in time from
 * last_value[n]. */
MR_HD void mr_gae_env(int T, int N, int n, const float *reward, const float *value, const float *last_value,
                      const uint8_t *done, double g, double gl, float *adv, float *ret) {
    double next_v = last_value[n], a = 0.0;
    for (int t = T - 1; t >= 0; t--) {
        const size_t k = (size_t)t * (size_t)N + (size_t)n;
        mr_gae_step(reward[k], value[k], done[k], g, gl, &next_v, &a, &adv[k], &ret[k]);
    }
}

#endif /* MR_GAE_MATH_H */

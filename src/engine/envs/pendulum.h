/*
 * pendulum.h - Gymnasium's Pendulum-v1 (gymnasium 1.2.2,
 * envs/classic_control/pendulum.py), one instance's dynamics, written once
 * for every backend.
 *
 * Rules, as Gymnasium's: the state is (th, thdot), th = 0 upright; the action
 * is one torque u, clipped to [-2, 2] (a NaN torque is read as 0, where
 * Gymnasium's state would turn NaN for good); with g = 10, m = 1, l = 1,
 * dt = 0.05:
 *   cost    = angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2, reward = -cost
 *   thdot' = clip(thdot + (3g/(2l) sin th + 3/(m l^2) u) dt, -8, 8)
 *   th'    = th + thdot' dt
 * (the cost is of the state before the step). It never terminates;
 * truncation at MR_PENDULUM_MAX_STEPS is the caller's (Gymnasium's TimeLimit
 * wrapper). The observation is (cos th, sin th, thdot) as floats.
 *
 * Every function is MR_HD (host+device inline), allocates nothing and uses
 * only math.h's sin, cos and fmod. The state is double and each operation is
 * Gymnasium's in Gymnasium's order and precision, numpy 2's: the torque is a
 * float32, so 3/(m l^2) u and 0.001 u^2 are float products there, and here;
 * angle_normalize is numpy's % (fmod moved to the divisor's sign); each
 * double product is rounded on its own (mr_pendulum_mul, as cartpole.h's:
 * never fused into an fma). Only the reward's squares may differ by an ulp
 * (numpy's x**2 is a pow, not x*x). As in cartpole.h, CUDA's double sin/cos
 * may round differently from glibc's.
 *
 * Randomness keying, with rng.h's draw(seed, env, tick, purpose, index):
 *   reset of instance `key` (its global index), c = `count` (how many full
 *   resets it has done): th = pi (2 u0 - 1), thdot = 2 u1 - 1, uk = the top
 *   53 bits of mr_rng_u64(seed, key, c, MR_RNG_PENDULUM_RESET, k) times 2^-53,
 *   so th uniform in [-pi, pi), thdot in [-1, 1), like Gymnasium's reset
 *   (not its numbers).
 * (MR_RNG_PENDULUM_RESET is rng.h's purpose 10.)
 */
#ifndef MR_PENDULUM_H
#define MR_PENDULUM_H
#include <math.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "rng.h"
#include "classic_state.h"   /* the state as the engine holds it (below) */

#define MR_PENDULUM_OBS 3               /* cos th, sin th, thdot */
#define MR_PENDULUM_ACT_DIM 1           /* box: one torque */
#define MR_PENDULUM_ACT_LOW (-2.0f)
#define MR_PENDULUM_ACT_HIGH 2.0f       /* max_torque */
#define MR_PENDULUM_MAX_STEPS 200       /* Pendulum-v1's TimeLimit */
#define MR_PENDULUM_G 10.0
#define MR_PENDULUM_M 1.0
#define MR_PENDULUM_L 1.0
#define MR_PENDULUM_DT 0.05
#define MR_PENDULUM_MAX_SPEED 8.0
#define MR_PENDULUM_PI 3.141592653589793
#define MR_PENDULUM_RESET_THDOT 1.0     /* reset: thdot in [-1, 1), th in [-pi, pi) */

/* a * b rounded to double on its own, never fused with a neighbouring add. */
#if defined(__CUDA_ARCH__)
#define mr_pendulum_mul(a, b) __dmul_rn((a), (b))
#else
MR_HD double mr_pendulum_mul(double a, double b) { volatile double p = a * b; return p; }
#endif

MR_HD void mr_pendulum_reset_state(double s[2], uint64_t seed, uint32_t key, uint32_t count) {
    const double high[2] = {MR_PENDULUM_PI, MR_PENDULUM_RESET_THDOT};
    for (uint32_t k = 0; k < 2; k++) {
        const double u = (double)(mr_rng_u64(seed, key, count, MR_RNG_PENDULUM_RESET, k) >> 11) *
                         (1.0 / 9007199254740992.0);
        s[k] = high[k] * (2.0 * u - 1.0);   /* 2u - 1 is exact: [-1, 1 - 2^-52] */
    }
}

/* numpy's ((x + pi) % (2 pi)) - pi: the remainder takes the divisor's sign. */
MR_HD double mr_pendulum_angle_normalize(double x) {
    const double two_pi = 2 * MR_PENDULUM_PI;
    double m = fmod(x + MR_PENDULUM_PI, two_pi);
    if (m != 0.0) { if (m < 0.0) m += two_pi; } else m = 0.0;
    return m - MR_PENDULUM_PI;
}

/* One step with torque u; returns the reward (-cost of the state before). */
MR_HD float mr_pendulum_step_state(double s[2], float u) {
#define MUL mr_pendulum_mul
    const double th = s[0], thdot = s[1];
    if (u != u) u = 0.0f;                                    /* NaN: no torque */
    u = u < MR_PENDULUM_ACT_LOW ? MR_PENDULUM_ACT_LOW : u > MR_PENDULUM_ACT_HIGH ? MR_PENDULUM_ACT_HIGH : u;
    const double an = mr_pendulum_angle_normalize(th);
    const float cost_u = (float)0.001 * (float)(u * u);     /* float32 in numpy */
    const double cost = MUL(an, an) + MUL(0.1, MUL(thdot, thdot)) + (double)cost_u;
    const float torque = (float)(3.0 / (MR_PENDULUM_M * (MR_PENDULUM_L * MR_PENDULUM_L))) * u;   /* float32 */
    double newthdot = thdot + MUL(MUL(3 * MR_PENDULUM_G / (2 * MR_PENDULUM_L), sin(th)) + (double)torque,
                                  MR_PENDULUM_DT);
    newthdot = newthdot < -MR_PENDULUM_MAX_SPEED ? -MR_PENDULUM_MAX_SPEED
             : newthdot > MR_PENDULUM_MAX_SPEED ? MR_PENDULUM_MAX_SPEED : newthdot;
    s[0] = th + MUL(newthdot, MR_PENDULUM_DT);
    s[1] = newthdot;
#undef MUL
    return (float)-cost;
}

MR_HD void mr_pendulum_obs(const double s[2], float *o) {
    o[0] = (float)cos(s[0]);
    o[1] = (float)sin(s[0]);
    o[2] = (float)s[1];
}

/* ----------------------------------------------- in the engine (registry.h) */

/* Pendulum's own part of the state (mr_env_state.own): the double state
 * (th, thdot) of each instance and its full resets. The interface holds the
 * rest: obs (n, 3) floats, reward -cost, steps, tick, the logs. It never
 * terminates; an episode truncates at env.max_episode_steps when that is
 * below 200, else at 200 (Pendulum-v1's TimeLimit). Actions are one float
 * per instance (a box of 1, clipped to [-2, 2] by the step). */
typedef mr_classic mr_pendulum;   /* classic_state.h: the state (n, 2) doubles, the resets */

MR_HD mr_pendulum *mr_pendulum_of(const mr_env_state *s) { return mr_classic_of(s); }

MR_HD int mr_pendulum_limit(const mr_env_state *s) {
    return s->max_steps > 0 && s->max_steps < MR_PENDULUM_MAX_STEPS ? s->max_steps : MR_PENDULUM_MAX_STEPS;
}

MR_HD void mr_pendulum_start(const mr_env_state *s, int i) {
    const mr_pendulum *p = mr_pendulum_of(s);
    double *st = p->state + (size_t)i * 2;
    mr_pendulum_reset_state(st, s->seed, mr_env_key(s, i), p->resets[i]);
    mr_classic_started(s, i);
    mr_pendulum_obs(st, s->obs_f + (size_t)i * 3);
}

MR_HD void mr_pendulum_reset_full(const mr_env_state *s, int i) {
    mr_pendulum_start(s, i);
    mr_classic_fresh(s, i);
}

/* One step of instance i with torque *u; a truncated episode restarts at
 * once (its final observation first into the trainer's final row, when kept). */
MR_HD void mr_pendulum_step(const mr_env_state *s, int i, const float *u) {
    const mr_pendulum *p = mr_pendulum_of(s);
    double *st = p->state + (size_t)i * 2;
    const float r = mr_pendulum_step_state(st, *u);
    const int steps = s->steps[i] + 1;
    s->tick[i] += 1;
    const int truncated = steps >= mr_pendulum_limit(s);
    if (mr_env_record_step(s, i, r, 0, truncated, steps)) {
        if (mr_env_keeps_final(s, 0, truncated)) mr_pendulum_obs(st, mr_env_final_floats(s, i));   /* no critic extra */
        mr_pendulum_start(s, i);
    } else {
        mr_pendulum_obs(st, s->obs_f + (size_t)i * 3);
    }
}

#if !defined(__CUDACC__)
/* What pendulum declares: 3 floats, a box of one torque in [-2, 2], no
 * privileged critic inputs, no counters, no notion of success (it never
 * terminates). Host code. */
static inline void mr_pendulum_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    memset(o, 0, sizeof *o);
    o->obs.kind = MR_SPACE_VECTOR;
    o->obs.shape[0] = MR_PENDULUM_OBS;
    o->act.kind = MR_SPACE_BOX;
    o->act.n = MR_PENDULUM_ACT_DIM;
    o->act.low[0] = MR_PENDULUM_ACT_LOW;
    o->act.high[0] = MR_PENDULUM_ACT_HIGH;
    o->step_limit = cfg->max_episode_steps > 0 && cfg->max_episode_steps < MR_PENDULUM_MAX_STEPS
                        ? cfg->max_episode_steps : MR_PENDULUM_MAX_STEPS;   /* mr_pendulum_limit */
    o->bootstrap_truncation = 1;   /* the time limit is not in the observation */
}

static inline void mr_pendulum_layout(mr_env_state *s, mr_arena *a) { mr_classic_layout(s, 2, a); }
static inline int mr_pendulum_sections(const mr_env_state *s, mr_env_section *o) {
    return mr_classic_sections(s, 2, o);
}
#endif

#endif /* MR_PENDULUM_H */

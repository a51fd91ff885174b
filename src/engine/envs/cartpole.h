/*
 * cartpole.h - Gymnasium's CartPole-v1 (gymnasium 1.2.2,
 * envs/classic_control/cartpole.py), one instance's dynamics, written once
 * for every backend.
 *
 * Rules, as Gymnasium's: the state is (x, x_dot, theta, theta_dot); action 0
 * pushes the cart left with 10 N, action 1 right (any other int reads as
 * action & 1, so -1 pushes right); one explicit Euler step of tau = 0.02 s
 * (Florian's equations, gravity 9.8, cart 1.0 kg, pole 0.1 kg, half-length
 * 0.5 m); the episode terminates when |x| > 2.4 or |theta| > 12 degrees
 * (strictly greater, after the step); the reward is 1.0 every step,
 * the terminating one included (sutton_barto_reward False). The caller
 * resets a terminated instance (stepping on is Gymnasium's undefined case,
 * where it pays 0) and truncates at MR_CARTPOLE_MAX_STEPS (Gymnasium's
 * TimeLimit wrapper).
 * The observation is the state rounded to float, as Gymnasium's float32 one.
 *
 * Every function is MR_HD (host+device inline), allocates nothing and uses
 * only math.h's sin and cos. The state is double and every operation is
 * Gymnasium's float64 one in Gymnasium's order, each product rounded on its
 * own (mr_cartpole_mul: never fused into an fma, which gcc's GNU modes and
 * nvcc do by default and numpy never does): the upright pole is unstable,
 * a 1-ulp difference doubles about every 9 steps, and only the same
 * roundings keep a 500-step replay within 1e-5 of Gymnasium's
 * (spec/gym_reference.py). CUDA's double sin/cos may round differently
 * from glibc's (up to 2 ulp), so a GPU trajectory can drift from the CPU's
 * the same way; each is a faithful CartPole.
 *
 * Randomness keying, with rng.h's draw(seed, env, tick, purpose, index):
 *   reset of instance `key` (its global index), c = `count` (how many full
 *   resets it has done): component k = 0..3 of the state is
 *   0.05 * (2 u - 1), u = the top 53 bits of
 *   mr_rng_u64(seed, key, c, MR_RNG_CARTPOLE_RESET, k) times 2^-53,
 *   so uniform in [-0.05, 0.05) like Gymnasium's reset (not its numbers).
 * (MR_RNG_CARTPOLE_RESET is rng.h's purpose 9.)
 */
#ifndef MR_CARTPOLE_H
#define MR_CARTPOLE_H
#include <math.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "rng.h"
#include "classic_state.h"   /* the state as the engine holds it (below) */


#define MR_CARTPOLE_OBS 4               /* x, x_dot, theta, theta_dot */
#define MR_CARTPOLE_ACTIONS 2           /* discrete: 0 push left, 1 push right */
#define MR_CARTPOLE_MAX_STEPS 500       /* CartPole-v1's TimeLimit */
#define MR_CARTPOLE_GRAVITY 9.8
#define MR_CARTPOLE_MASSCART 1.0
#define MR_CARTPOLE_MASSPOLE 0.1
#define MR_CARTPOLE_TOTAL_MASS (MR_CARTPOLE_MASSPOLE + MR_CARTPOLE_MASSCART)
#define MR_CARTPOLE_LENGTH 0.5          /* half the pole's length */
#define MR_CARTPOLE_POLEMASS_LENGTH (MR_CARTPOLE_MASSPOLE * MR_CARTPOLE_LENGTH)
#define MR_CARTPOLE_FORCE 10.0
#define MR_CARTPOLE_TAU 0.02            /* seconds per step */
#define MR_CARTPOLE_X_LIMIT 2.4
#define MR_CARTPOLE_THETA_LIMIT (12 * 2 * 3.141592653589793 / 360)   /* 12 degrees */
#define MR_CARTPOLE_RESET_HIGH 0.05
#define MR_CARTPOLE_REWARD 1.0f

/* a * b rounded to double on its own, never fused with a neighbouring add.
 * MR_CARTPOLE_UNFUSED: the file is compiled with -ffp-contract=off (the
 * cpu backend's cartpole_cpu.c, CMakeLists.txt sets both), so a plain
 * product is never fused and the loops over instances vectorise. */
#if defined(__CUDA_ARCH__)
#define mr_cartpole_mul(a, b) __dmul_rn((a), (b))
#elif defined(MR_CARTPOLE_UNFUSED)
#define mr_cartpole_mul(a, b) ((a) * (b))
#else
MR_HD double mr_cartpole_mul(double a, double b) { volatile double p = a * b; return p; }
#endif

MR_HD void mr_cartpole_reset_state(double s[4], uint64_t seed, uint32_t key, uint32_t count) {
    for (uint32_t k = 0; k < 4; k++) {
        const double u = (double)(mr_rng_u64(seed, key, count, MR_RNG_CARTPOLE_RESET, k) >> 11) *
                         (1.0 / 9007199254740992.0);
        s[k] = MR_CARTPOLE_RESET_HIGH * (2.0 * u - 1.0);   /* 2u - 1 is exact: [-1, 1 - 2^-52] */
    }
}

/* One step of the state (*x, *x_dot, *theta, *theta_dot) given sintheta =
 * sin(*theta) and costheta = cos(*theta) as libm (or CUDA) rounds them;
 * returns 1 when the new state is terminal. (Four pointers rather than an
 * array: the cpu backend's loops run it on columns, cpu/cartpole_cpu.c.) */
MR_HD int mr_cartpole_move(double *px, double *px_dot, double *ptheta, double *ptheta_dot, int action,
                           double sintheta, double costheta) {
#define MUL mr_cartpole_mul
    const double x = *px, x_dot = *px_dot, theta = *ptheta, theta_dot = *ptheta_dot;
    const double force = (action & 1) ? MR_CARTPOLE_FORCE : -MR_CARTPOLE_FORCE;
    const double temp = (force + MUL(MUL(MR_CARTPOLE_POLEMASS_LENGTH, MUL(theta_dot, theta_dot)), sintheta)) /
                        MR_CARTPOLE_TOTAL_MASS;
    const double thetaacc = (MUL(MR_CARTPOLE_GRAVITY, sintheta) - MUL(costheta, temp)) /
        MUL(MR_CARTPOLE_LENGTH,
           4.0 / 3.0 - MUL(MR_CARTPOLE_MASSPOLE, MUL(costheta, costheta)) / MR_CARTPOLE_TOTAL_MASS);
    const double xacc = temp - MUL(MUL(MR_CARTPOLE_POLEMASS_LENGTH, thetaacc), costheta) / MR_CARTPOLE_TOTAL_MASS;
    const double nx = x + MUL(MR_CARTPOLE_TAU, x_dot), ntheta = theta + MUL(MR_CARTPOLE_TAU, theta_dot);
    *px = nx;
    *px_dot = x_dot + MUL(MR_CARTPOLE_TAU, xacc);
    *ptheta = ntheta;
    *ptheta_dot = theta_dot + MUL(MR_CARTPOLE_TAU, thetaacc);
#undef MUL
    return (nx < -MR_CARTPOLE_X_LIMIT) | (nx > MR_CARTPOLE_X_LIMIT) |
           (ntheta < -MR_CARTPOLE_THETA_LIMIT) | (ntheta > MR_CARTPOLE_THETA_LIMIT);
}

/* One step; returns 1 when the new state is terminal. */
MR_HD int mr_cartpole_step_state(double s[4], int action) {
    return mr_cartpole_move(&s[0], &s[1], &s[2], &s[3], action, sin(s[2]), cos(s[2]));
}

MR_HD void mr_cartpole_obs(const double s[4], float *o) {
    for (int k = 0; k < 4; k++) o[k] = (float)s[k];
}

/* ----------------------------------------------- in the engine (registry.h) */

/* CartPole's own part of the state (mr_env_state.own): the double state of
 * each instance and its full resets (the reset draws' counter). The
 * interface's buffers hold the rest: obs (n, 4) floats, reward 1 a step,
 * the end flags, steps, tick (counted, unused by the rules), the logs (no
 * counters). An episode truncates at env.max_episode_steps when that is
 * below 500, else at 500 (CartPole-v1's TimeLimit). */
typedef mr_classic mr_cartpole;   /* classic_state.h: the state (n, 4) doubles, the resets */

MR_HD mr_cartpole *mr_cartpole_of(const mr_env_state *s) { return mr_classic_of(s); }

MR_HD int mr_cartpole_limit(const mr_env_state *s) {
    return s->max_steps > 0 && s->max_steps < MR_CARTPOLE_MAX_STEPS ? s->max_steps : MR_CARTPOLE_MAX_STEPS;
}

/* A new episode of instance i: a drawn state, the episode's counters cleared. */
MR_HD void mr_cartpole_start(const mr_env_state *s, int i) {
    const mr_cartpole *c = mr_cartpole_of(s);
    double *st = c->state + (size_t)i * 4;
    mr_cartpole_reset_state(st, s->seed, mr_env_key(s, i), c->resets[i]);
    mr_classic_started(s, i);
    mr_cartpole_obs(st, s->obs_f + (size_t)i * 4);
}

MR_HD void mr_cartpole_reset_full(const mr_env_state *s, int i) {
    mr_cartpole_start(s, i);
    mr_classic_fresh(s, i);
}

/* The rest of instance i's step once its state has moved (terminated: the
 * new state is terminal), in two parts (cpu/cartpole_cpu.c runs the first
 * for a block of instances, then the second for those that ended):
 * mr_cartpole_finish_each, every step's (the end flags, the observation;
 * returns whether the episode ended), and mr_cartpole_finish_end, the log
 * and the restart (the observation becomes the next episode's first, as
 * every environment here; a truncated one's final observation goes to the
 * trainer's final row first, env_state.h's mr_env_keeps_final). */
MR_HD int mr_cartpole_finish_each(const mr_env_state *s, int i, int terminated) {
    const int steps = s->steps[i] + 1;
    const int truncated = !terminated & (steps >= mr_cartpole_limit(s));
    s->tick[i] += 1;
    mr_cartpole_obs(mr_cartpole_of(s)->state + (size_t)i * 4, s->obs_f + (size_t)i * 4);
    return mr_env_record_each(s, i, MR_CARTPOLE_REWARD, terminated, truncated, steps);
}

MR_HD void mr_cartpole_finish_end(const mr_env_state *s, int i, int terminated) {
    mr_env_record_end(s, i, terminated);
    if (mr_env_keeps_final(s, terminated, s->truncated[i])) {   /* the final observation (no critic extra) */
        float *f = mr_env_final_floats(s, i);
        const float *o = s->obs_f + (size_t)i * 4;
        for (int k = 0; k < 4; k++) f[k] = o[k];
    }
    mr_cartpole_start(s, i);
}

/* One step of instance i (the cpu backend steps blocks of instances to the
 * same bits: cpu/cartpole_cpu.c). */
MR_HD void mr_cartpole_step(const mr_env_state *s, int i, int action) {
    const int terminated = mr_cartpole_step_state(mr_cartpole_of(s)->state + (size_t)i * 4, action);
    if (mr_cartpole_finish_each(s, i, terminated)) mr_cartpole_finish_end(s, i, terminated);
}

#if !defined(__CUDACC__)
/* What cartpole declares (moonrl.h, mr_env_spaces): 4 floats, 2 actions,
 * no privileged critic inputs, no counters; an episode that ran to the
 * step limit (truncated, not terminated: the pole held) is a success. Host code. */
static inline void mr_cartpole_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    memset(o, 0, sizeof *o);
    o->obs.kind = MR_SPACE_VECTOR;
    o->obs.shape[0] = MR_CARTPOLE_OBS;
    o->act.kind = MR_SPACE_DISCRETE;
    o->act.n = MR_CARTPOLE_ACTIONS;
    o->success = MR_SUCCESS_TRUNCATED;
    o->step_limit = cfg->max_episode_steps > 0 && cfg->max_episode_steps < MR_CARTPOLE_MAX_STEPS
                        ? cfg->max_episode_steps : MR_CARTPOLE_MAX_STEPS;   /* mr_cartpole_limit */
    o->bootstrap_truncation = 1;   /* the time limit is not in the observation */
}

static inline void mr_cartpole_layout(mr_env_state *s, mr_arena *a) { mr_classic_layout(s, 4, a); }
static inline int mr_cartpole_sections(const mr_env_state *s, mr_env_section *o) {
    return mr_classic_sections(s, 4, o);
}
#endif

#endif /* MR_CARTPOLE_H */

/*
 * catch.h - the `catch` environment: move the paddle under the falling ball.
 * The engine's float image observation (C x H x W floats, MR_SPACE_IMAGE):
 * the CNN reads it as it is, grey levels included, with no cell codes. After
 * bsuite's Catch (Osband et al. 2020), with a ball that also drifts sideways
 * and bounces, so that one frame must show where it is going. One header of
 * MR_HD functions with its own state (mr_catch), registered in registry.h.
 *
 * Rules, per instance, on an N x N board (N = env.grid_size, 4 .. 32; rows y
 * 0 .. N-1 from the top, columns x 0 .. N-1):
 *   - a new episode puts the ball in row 0 at a uniformly random column,
 *     with a horizontal drift dx uniform in {-1, 0, +1}, and the paddle in
 *     the bottom row (N-1) at a uniformly random column;
 *   - 3 actions: 0 moves the paddle one column left, 1 leaves it, 2 moves it
 *     right (an action outside [0, 3) reads as a % 3); the paddle stops at
 *     the board's edges;
 *   - after the paddle, the ball falls one row and moves dx columns; a ball
 *     that would leave the board sideways bounces: dx = -dx and it lands on
 *     the mirror column (x = -1 becomes 1, x = N becomes N-2);
 *   - when the ball reaches the bottom row (after N-1 steps) the episode
 *     ends (terminated): reward +1 if it is in the paddle's column (a
 *     catch), else -1; every other step pays 0; env.max_episode_steps
 *     truncates (0: never; an episode has only N-1 steps);
 *   - at an episode's end the instance starts a new one at once (the next
 *     observation is the new episode's first).
 * The observation is 2 x N x N floats: channel 0 the ball, 1.0 on its cell
 * and 0.5 on the cell it left in the last step (none in an episode's first
 * observation: a motion-blurred frame that shows the drift); channel 1 the
 * paddle, 1.0 on its cell; 0 elsewhere. No privileged critic inputs (the
 * critic reads the image). The counter `caught` is 1 for an episode that
 * ends in a catch: a success. A random policy catches about one ball in N
 * (return about -1 + 2 / N); one that follows the ball catches nearly all.
 *
 * Randomness (rng.h's draw(seed, env, tick, purpose, index), env the
 * instance's global index): a new episode of instance i, c = resets[i]
 * (then resets[i] += 1): the ball's column below(seed, i, c, PLACE, 0, N),
 * its drift below(seed, i, c, PLACE, 1, 3) - 1, the paddle's column
 * below(seed, i, c, PLACE, 2, N). Integers only: the same bytes on any
 * device and any thread count.
 */
#ifndef MR_CATCH_H
#define MR_CATCH_H
#include <stddef.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "moonrl.h"
#include "env_state.h"

#define MR_CATCH_ACTIONS 3
#define MR_CATCH_CHANNELS 2
#define MR_CATCH_MIN 4
#define MR_CATCH_MAX 32

enum { MR_CATCH_CAUGHT = 0 };   /* the episode counter (mr_env_log.count) */

/* catch's own part of the state (mr_env_state.own) */
typedef struct mr_catch {
    int N;                          /* the board's side */
    int32_t *ball_x, *ball_y, *dx;  /* (n) the ball and its drift */
    int32_t *prev_x, *prev_y;       /* (n) the cell the ball left in the last step, -1 at an episode's start */
    int32_t *paddle;                /* (n) the paddle's column (bottom row) */
    uint32_t *resets;               /* (n) new episodes started (the reset draws' counter) */
} mr_catch;

MR_HD mr_catch *mr_catch_of(const mr_env_state *s) { return (mr_catch *)(void *)s->own.bytes; }

/* What catch declares (moonrl.h, mr_env_spaces): a 2 x N x N float image,
 * 3 moves, no privileged critic inputs, the counter caught (a success). Host
 * code. */
static inline void mr_catch_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    memset(o, 0, sizeof *o);
    o->obs.kind = MR_SPACE_IMAGE;
    o->obs.shape[0] = MR_CATCH_CHANNELS;
    o->obs.shape[1] = o->obs.shape[2] = cfg->grid_size;
    o->act.kind = MR_SPACE_DISCRETE;
    o->act.n = MR_CATCH_ACTIONS;
    o->critic_extra = 0;
    o->critic_view = 1;   /* the image itself: nothing privileged */
    o->counters = 1;
    o->counter_names[MR_CATCH_CAUGHT] = "caught";
    o->success = MR_SUCCESS_COUNTER;
    o->success_counter = MR_CATCH_CAUGHT;
    o->step_limit = cfg->max_episode_steps;
    o->bootstrap_truncation = 1;   /* the critic does not see the time */
}

/* Instance i's image into o (2 N N floats, channel-major: C x H x W). */
MR_HD void mr_catch_write_image(const mr_env_state *s, int i, float *o) {
    const mr_catch *f = mr_catch_of(s);
    const int N = f->N, NN = N * N;
    for (int k = 0; k < MR_CATCH_CHANNELS * NN; k++) o[k] = 0.0f;
    if (f->prev_y[i] >= 0) o[f->prev_y[i] * N + f->prev_x[i]] = 0.5f;
    o[f->ball_y[i] * N + f->ball_x[i]] = 1.0f;
    o[NN + (N - 1) * N + f->paddle[i]] = 1.0f;
}

MR_HD void mr_catch_write_obs(const mr_env_state *s, int i) {
    const int N = mr_catch_of(s)->N;
    mr_catch_write_image(s, i, s->obs_f + (size_t)i * MR_CATCH_CHANNELS * N * N);
}

/* A new episode for instance i (the rule of the header comment), the reset
 * counted, the episode's steps and return 0, the observation written; the
 * end flags and reward of the step that ended the last episode are left. */
MR_HD void mr_catch_start(const mr_env_state *s, int i) {
    const mr_catch *f = mr_catch_of(s);
    const uint32_t c = f->resets[i], key = mr_env_key(s, i), N = (uint32_t)f->N;
    f->ball_x[i] = (int32_t)mr_rng_below(s->seed, key, c, MR_RNG_PLACE, 0, N);
    f->ball_y[i] = 0;
    f->dx[i] = (int32_t)mr_rng_below(s->seed, key, c, MR_RNG_PLACE, 1, 3) - 1;
    f->paddle[i] = (int32_t)mr_rng_below(s->seed, key, c, MR_RNG_PLACE, 2, N);
    f->prev_x[i] = f->prev_y[i] = -1;
    f->resets[i] = c + 1;
    s->steps[i] = 0;
    s->ep_return[i] = 0.0f;
    mr_catch_write_obs(s, i);
}

MR_HD void mr_catch_reset_full(const mr_env_state *s, int i) {
    mr_catch_start(s, i);
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
}

MR_HD void mr_catch_step(const mr_env_state *s, int i, int action) {
    const mr_catch *f = mr_catch_of(s);
    const int N = f->N;
    const int a = action % MR_CATCH_ACTIONS;
    int p = f->paddle[i] + (a == 0 ? -1 : a == 2 ? 1 : 0);
    p = p < 0 ? 0 : p > N - 1 ? N - 1 : p;
    f->paddle[i] = p;
    f->prev_x[i] = f->ball_x[i];
    f->prev_y[i] = f->ball_y[i];
    int x = f->ball_x[i] + f->dx[i];
    if (x < 0 || x > N - 1) {   /* a bounce off a side wall */
        f->dx[i] = -f->dx[i];
        x = x < 0 ? 1 : N - 2;
    }
    f->ball_x[i] = x;
    f->ball_y[i] += 1;
    const int terminated = f->ball_y[i] == N - 1, caught = terminated && x == p;
    const float r = terminated ? (caught ? 1.0f : -1.0f) : 0.0f;
    if (caught) s->log[i].count_total[MR_CATCH_CAUGHT]++;
    const int steps = s->steps[i] + 1;
    const int truncated = !terminated && s->max_steps > 0 && steps >= s->max_steps;
    s->tick[i] += 1;
    if (mr_env_record_step(s, i, r, terminated, truncated, steps)) {
        if (mr_env_keeps_final(s, terminated, truncated))   /* the final frame, before the new episode's */
            mr_catch_write_image(s, i, mr_env_final_floats(s, i));
        s->log[i].count[MR_CATCH_CAUGHT] += caught;
        mr_catch_start(s, i);
        return;
    }
    mr_catch_write_obs(s, i);
}

#if !defined(__CUDACC__)
/* catch's parameters from cfg and its own buffers from the arena (NULL on a
 * planning arena). Host code. */
static inline void mr_catch_layout(mr_env_state *s, const mr_env_config *cfg, mr_arena *a) {
    mr_catch *f = mr_catch_of(s);
    const size_t n = (size_t)s->n;
    f->N = cfg->grid_size;
    f->ball_x = MR_TAKE(a, int32_t, n);
    f->ball_y = MR_TAKE(a, int32_t, n);
    f->dx = MR_TAKE(a, int32_t, n);
    f->prev_x = MR_TAKE(a, int32_t, n);
    f->prev_y = MR_TAKE(a, int32_t, n);
    f->paddle = MR_TAKE(a, int32_t, n);
    f->resets = MR_TAKE(a, uint32_t, n);
}

/* The buffers a checkpoint saves ("env.<name>"); returns their count. */
static inline int mr_catch_sections(const mr_env_state *s, mr_env_section *o) {
    const mr_catch *f = mr_catch_of(s);
    const size_t n = (size_t)s->n, i4 = n * sizeof(int32_t);
    int k = 0;
#define MR_SEC_(nm, p, b) (o[k].name = (nm), o[k].data = (void *)(p), o[k].bytes = (b), k++)
    MR_SEC_("env.ball_x", f->ball_x, i4);
    MR_SEC_("env.ball_y", f->ball_y, i4);
    MR_SEC_("env.dx", f->dx, i4);
    MR_SEC_("env.prev_x", f->prev_x, i4);
    MR_SEC_("env.prev_y", f->prev_y, i4);
    MR_SEC_("env.paddle", f->paddle, i4);
    MR_SEC_("env.resets", f->resets, n * sizeof(uint32_t));
    MR_SEC_("env.steps", s->steps, i4);
    MR_SEC_("env.tick", s->tick, n * sizeof(uint32_t));
    MR_SEC_("env.obs", s->obs_f, n * (size_t)MR_CATCH_CHANNELS * (size_t)f->N * (size_t)f->N * sizeof(float));
    MR_SEC_("env.ep_return", s->ep_return, n * sizeof(float));
#undef MR_SEC_
    return k;
}
#endif

#endif /* MR_CATCH_H */

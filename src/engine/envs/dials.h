/*
 * dials.h - the `dials` environment: turn each dial to its target. The
 * engine's multi-discrete action (a choice per dial, taken together). One
 * header of MR_HD functions with its own state (mr_dials), registered in
 * registry.h.
 *
 * Rules, per instance:
 *   - MR_DIALS_K = 2 dials, each at an integer position 0 .. MR_DIALS_POS-1
 *     (0 .. 10), each with a target position; a new episode draws every
 *     position and every target uniformly and independently;
 *   - the action is multi-discrete, one component per dial, each of 3
 *     choices: 0 turns it down one (-1), 1 leaves it, 2 turns it up one
 *     (+1); a component outside [0, 3) reads as a % 3; a dial at an end
 *     stays there (no wrap);
 *   - after the move, the reward is 1 / K for every dial on its target (1
 *     when all are), 0 for the others; targets never move within an
 *     episode; nothing terminates an episode; env.max_episode_steps
 *     truncates it (0: never; the built-in experiment's 40);
 *   - the observation is 2K floats: for each dial in order, its position
 *     and its target, each mapped to [-1, 1] as (2 p - (POS-1)) / (POS-1)
 *     (divided in double and rounded once: the same bits on every device);
 *   - the counter `matched` counts the steps that end with every dial on
 *     its target; an episode with one is a success (the episodic
 *     evaluation);
 *   - at an episode's end the instance starts a new one at once (new
 *     positions and targets: the next observation is the new episode's
 *     first).
 * No privileged critic inputs. A random policy is on a given dial's target
 * about 1 step in POS, so it earns about 0.1 a step; one that turns each
 * dial straight to its target and holds it earns nearly 1 a step.
 *
 * Randomness (rng.h's draw(seed, env, tick, purpose, index), env the
 * instance's global index): a new episode of instance i, c = resets[i]
 * (then resets[i] += 1): dial k's position below(seed, i, c, PLACE, 2k,
 * POS), its target below(seed, i, c, PLACE, 2k + 1, POS). Integers only.
 */
#ifndef MR_DIALS_H
#define MR_DIALS_H
#include <stddef.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "moonrl.h"
#include "env_state.h"

#define MR_DIALS_K 2          /* dials: the action's components (3 K logits <= MR_MAX_ACTIONS) */
#define MR_DIALS_POS 11       /* positions of a dial: 0 .. 10 */
#define MR_DIALS_CHOICES 3    /* per dial: down, stay, up */
#define MR_DIALS_OBS (2 * MR_DIALS_K)

enum { MR_DIALS_MATCHED = 0 };   /* the episode counter (mr_env_log.count) */

/* dials' own part of the state (mr_env_state.own) */
typedef struct mr_dials {
    int32_t *pos, *target;     /* (n, K) */
    uint32_t *resets;          /* (n) new episodes started (the reset draws' counter) */
    int32_t *ep_matched;       /* (n) this episode's steps ending with every dial on target */
} mr_dials;

MR_HD mr_dials *mr_dials_of(const mr_env_state *s) { return (mr_dials *)(void *)s->own.bytes; }

/* A position as the observation has it: (2 p - (POS-1)) / (POS-1). */
MR_HD float mr_dials_unit(int p) {
    return (float)((double)(2 * p - (MR_DIALS_POS - 1)) / (double)(MR_DIALS_POS - 1));
}

/* Instance i's observation into o (2K floats). */
MR_HD void mr_dials_write_obs_to(const mr_env_state *s, int i, float *o) {
    const mr_dials *d = mr_dials_of(s);
    for (int k = 0; k < MR_DIALS_K; k++) {
        o[2 * k] = mr_dials_unit(d->pos[(size_t)i * MR_DIALS_K + k]);
        o[2 * k + 1] = mr_dials_unit(d->target[(size_t)i * MR_DIALS_K + k]);
    }
}

/* A new episode of instance i: drawn positions and targets, the episode's
 * steps, return and counter cleared, the observation written. */
MR_HD void mr_dials_start(const mr_env_state *s, int i) {
    const mr_dials *d = mr_dials_of(s);
    const uint32_t c = d->resets[i], key = mr_env_key(s, i);
    for (int k = 0; k < MR_DIALS_K; k++) {
        d->pos[(size_t)i * MR_DIALS_K + k] =
            (int32_t)mr_rng_below(s->seed, key, c, MR_RNG_PLACE, (uint32_t)(2 * k), MR_DIALS_POS);
        d->target[(size_t)i * MR_DIALS_K + k] =
            (int32_t)mr_rng_below(s->seed, key, c, MR_RNG_PLACE, (uint32_t)(2 * k + 1), MR_DIALS_POS);
    }
    d->resets[i] = c + 1;
    d->ep_matched[i] = 0;
    s->steps[i] = 0;
    s->ep_return[i] = 0.0f;
    mr_dials_write_obs_to(s, i, s->obs_f + (size_t)i * MR_DIALS_OBS);
}

MR_HD void mr_dials_reset_full(const mr_env_state *s, int i) {
    mr_dials_start(s, i);
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
}

/* One step of instance i with its K action bytes a. */
MR_HD void mr_dials_step(const mr_env_state *s, int i, const uint8_t *a) {
    const mr_dials *d = mr_dials_of(s);
    int on = 0;
    for (int k = 0; k < MR_DIALS_K; k++) {
        const size_t j = (size_t)i * MR_DIALS_K + k;
        int p = d->pos[j] + (int)(a[k] % MR_DIALS_CHOICES) - 1;
        p = p < 0 ? 0 : p > MR_DIALS_POS - 1 ? MR_DIALS_POS - 1 : p;
        d->pos[j] = p;
        on += p == d->target[j];
    }
    const float r = (float)on * (1.0f / (float)MR_DIALS_K);   /* 0, 0.5, 1: exact */
    if (on == MR_DIALS_K) {
        d->ep_matched[i] += 1;
        s->log[i].count_total[MR_DIALS_MATCHED] += 1;
    }
    const int steps = s->steps[i] + 1;
    const int truncated = s->max_steps > 0 && steps >= s->max_steps;
    s->tick[i] += 1;
    if (mr_env_record_step(s, i, r, 0, truncated, steps)) {
        if (mr_env_keeps_final(s, 0, truncated)) mr_dials_write_obs_to(s, i, mr_env_final_floats(s, i));
        s->log[i].count[MR_DIALS_MATCHED] += d->ep_matched[i];
        mr_dials_start(s, i);
        return;
    }
    mr_dials_write_obs_to(s, i, s->obs_f + (size_t)i * MR_DIALS_OBS);
}

#if !defined(__CUDACC__)
/* What dials declares (moonrl.h, mr_env_spaces): 2K floats, K components of
 * 3 choices, no privileged critic inputs, the counter `matched`, success =
 * matched at least once; its step limit (env.max_episode_steps) is not in
 * the observation, so ppo.truncation = auto bootstraps it. Host code. */
static inline void mr_dials_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    memset(o, 0, sizeof *o);
    o->obs.kind = MR_SPACE_VECTOR;
    o->obs.shape[0] = MR_DIALS_OBS;
    o->act.kind = MR_SPACE_MULTI_DISCRETE;
    o->act.n = MR_DIALS_K;
    for (int k = 0; k < MR_DIALS_K; k++) o->act.nvec[k] = MR_DIALS_CHOICES;
    o->counters = 1;
    o->counter_names[MR_DIALS_MATCHED] = "matched";
    o->eval = MR_EVAL_EPISODIC;
    o->success = MR_SUCCESS_COUNTER;
    o->success_counter = MR_DIALS_MATCHED;
    o->step_limit = cfg->max_episode_steps;
    o->bootstrap_truncation = 1;
}

static inline void mr_dials_layout(mr_env_state *s, mr_arena *a) {
    mr_dials *d = mr_dials_of(s);
    const size_t n = (size_t)s->n;
    d->pos = MR_TAKE(a, int32_t, n * MR_DIALS_K);
    d->target = MR_TAKE(a, int32_t, n * MR_DIALS_K);
    d->resets = MR_TAKE(a, uint32_t, n);
    d->ep_matched = MR_TAKE(a, int32_t, n);
}

/* The buffers a checkpoint saves ("env.<name>"); returns their count. */
static inline int mr_dials_sections(const mr_env_state *s, mr_env_section *o) {
    const mr_dials *d = mr_dials_of(s);
    const size_t n = (size_t)s->n;
    int k = 0;
#define MR_SEC_(nm, p, b) (o[k].name = (nm), o[k].data = (void *)(p), o[k].bytes = (b), k++)
    MR_SEC_("env.position", d->pos, n * MR_DIALS_K * sizeof(int32_t));
    MR_SEC_("env.target", d->target, n * MR_DIALS_K * sizeof(int32_t));
    MR_SEC_("env.resets", d->resets, n * sizeof(uint32_t));
    MR_SEC_("env.ep_matched", d->ep_matched, n * sizeof(int32_t));
    MR_SEC_("env.steps", s->steps, n * sizeof(int32_t));
    MR_SEC_("env.tick", s->tick, n * sizeof(uint32_t));
    MR_SEC_("env.obs", s->obs_f, n * MR_DIALS_OBS * sizeof(float));
    MR_SEC_("env.ep_return", s->ep_return, n * sizeof(float));
#undef MR_SEC_
    return k;
}
#endif

#endif /* MR_DIALS_H */

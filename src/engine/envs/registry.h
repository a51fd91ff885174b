/*
 * registry.h - every environment's per-instance calls by `kind`, for the
 * backends' loops: a full reset, a step, the critic's privileged inputs and
 * (CPU only) a prefetch hint. Written once as MR_HD functions, so the CPU's
 * OpenMP loops (cpu/env_cpu.c) and the CUDA kernels (kernels/env.cu) run the
 * same code for every environment. The host side (layout, checkpoint
 * sections, names, spaces) is registry.c, declared in env_state.h and
 * moonrl.h.
 *
 * Each environment owns its state: env_state.h's interface plus its own part
 * (mr_env_state.own), which only its header reads. Adding one
 * (docs/environments.md): a header here with its spaces, layout, sections,
 * reset and step; a case in each switch below and in registry.c; a value of
 * mr_env_name (moonrl.h) and a choice of env.name
 * (lua/moonrl/config/schema.lua).
 */
#ifndef MR_ENV_REGISTRY_H
#define MR_ENV_REGISTRY_H
#include "foraging.h"
#include "reach.h"
#include "cartpole.h"
#include "pendulum.h"
#include "snake.h"
#include "dials.h"
#include "catch.h"

MR_HD void mr_env_reset_one(const mr_env_state *s, int i) {
    switch (s->kind) {
    case MR_ENV_REACH: mr_reach_reset_full(s, i); break;
    case MR_ENV_CARTPOLE: mr_cartpole_reset_full(s, i); break;
    case MR_ENV_PENDULUM: mr_pendulum_reset_full(s, i); break;
    case MR_ENV_SNAKE: mr_snake_reset_full(s, i); break;
    case MR_ENV_LUA: break;   /* the host's program: cpu/env_cpu.c hands it whole slices */
    case MR_ENV_DIALS: mr_dials_reset_full(s, i); break;
    case MR_ENV_CATCH: mr_catch_reset_full(s, i); break;
    default: mr_forage_reset_full(s, i); break;
    }
}

/* Instance i's step with its action, read from the (n, act_bytes) actions:
 * a byte for a discrete action, a byte per component for a multi-discrete
 * one, floats for a box. */
MR_HD void mr_env_step_at(const mr_env_state *s, int i, const uint8_t *actions) {
    switch (s->kind) {
    case MR_ENV_REACH: mr_reach_step(s, i, actions[i]); break;
    case MR_ENV_CARTPOLE: mr_cartpole_step(s, i, actions[i]); break;
    case MR_ENV_PENDULUM:
        mr_pendulum_step(s, i, (const float *)(const void *)(actions + (size_t)i * (size_t)s->act_bytes));
        break;
    case MR_ENV_SNAKE: mr_snake_step(s, i, actions[i]); break;
    case MR_ENV_LUA: break;   /* the host's program: cpu/env_cpu.c hands it whole slices */
    case MR_ENV_DIALS: mr_dials_step(s, i, actions + (size_t)i * (size_t)s->act_bytes); break;
    case MR_ENV_CATCH: mr_catch_step(s, i, actions[i]); break;
    default: mr_forage_step(s, i, actions[i]); break;
    }
}

/* Instance i's privileged critic inputs into extra (its critic_extra floats). */
MR_HD void mr_env_critic_extra_one(const mr_env_state *s, int i, float *extra) {
    switch (s->kind) {
    case MR_ENV_CARTPOLE: case MR_ENV_PENDULUM: case MR_ENV_LUA: case MR_ENV_DIALS: case MR_ENV_CATCH:
        (void)extra;   /* none */
        break;
    case MR_ENV_SNAKE: mr_snake_critic_extra(s, i, extra); break;      /* length, time */
    default: mr_forage_critic_extra(s, i, extra); break;   /* foraging, reach: the item counts */
    }
}

#if !defined(__CUDACC__)
/* CPU only: a hint that instance j is stepped soon with `action` (a
 * prefetch of what its step reads; the same bytes either way). */
static inline __attribute__((always_inline)) void mr_env_prefetch_one(const mr_env_state *s, int j, int action) {
    switch (s->kind) {
    case MR_ENV_FORAGING: mr_forage_prefetch(s, j, action); break;   /* reach's moves differ: none */
    default: break;
    }
}
#endif

#endif /* MR_ENV_REGISTRY_H */

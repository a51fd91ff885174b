/*
 * registry.h - the environments the engine has, and the two calls every
 * backend makes on one instance: a full reset and a step. Written once as
 * MR_HD functions, so the CPU's OpenMP loops (cpu/env_cpu.c) and the CUDA
 * kernels (kernels/env.cu) run the same code for every environment.
 *
 * Every environment works on the grid-world state of foraging.h (mr_forage:
 * a grid of cell codes, the agent's position, the item counts, observation,
 * reward, end flags, episode logs, the RNG counters); mr_forage.kind (from
 * env.name) says whose rules apply. Adding one (docs/environments.md): a
 * header here with its reset and step, a case in each switch below, a row in
 * registry.c (name, summary, actions), a value of mr_env_name (moonrl.h) and
 * a choice of env.name (lua/moonrl/config/schema.lua).
 */
#ifndef MR_ENV_REGISTRY_H
#define MR_ENV_REGISTRY_H
#include "foraging.h"
#include "reach.h"

MR_HD void mr_env_reset_one(const mr_forage *s, int i) {
    switch (s->kind) {
    case MR_ENV_REACH: mr_reach_reset_full(s, i); break;
    default: mr_forage_reset_full(s, i); break;
    }
}

MR_HD void mr_env_step_one(const mr_forage *s, int i, int action) {
    switch (s->kind) {
    case MR_ENV_REACH: mr_reach_step(s, i, action); break;
    default: mr_forage_step(s, i, action); break;
    }
}

#endif /* MR_ENV_REGISTRY_H */

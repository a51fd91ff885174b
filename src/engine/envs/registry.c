/*
 * registry.c - the environments by name, for hosts and messages (moonrl.h's
 * mr_env_name_of, mr_env_from_name, mr_env_summary, mr_env_num_actions, and
 * mr_env_spaces_of: what each environment declares in its own header), and
 * the host side of their states (env_state.h's mr_env_layout,
 * mr_env_sections, mr_env_critic_extra_all). One row per value of
 * mr_env_name; registry.h holds their per-instance code.
 */
#include <string.h>
#include "moonrl.h"
#include "errors.h"
#include "registry.h"   /* every environment's header */
#include "program.h"    /* env.name = lua: the host's program */

/* each environment's own part fits mr_env_state.own */
_Static_assert(sizeof(mr_forage) <= MR_ENV_OWN_BYTES, "foraging's state outgrew MR_ENV_OWN_BYTES");
_Static_assert(sizeof(mr_cartpole) <= MR_ENV_OWN_BYTES, "cartpole's state outgrew MR_ENV_OWN_BYTES");
_Static_assert(sizeof(mr_pendulum) <= MR_ENV_OWN_BYTES, "pendulum's state outgrew MR_ENV_OWN_BYTES");
_Static_assert(sizeof(mr_snake) <= MR_ENV_OWN_BYTES, "snake's state outgrew MR_ENV_OWN_BYTES");
_Static_assert(sizeof(mr_dials) <= MR_ENV_OWN_BYTES, "dials' state outgrew MR_ENV_OWN_BYTES");
_Static_assert(sizeof(mr_catch) <= MR_ENV_OWN_BYTES, "catch's state outgrew MR_ENV_OWN_BYTES");
_Static_assert(MR_CATCH_MIN == 4 && MR_CATCH_MAX == 32, "core/env.c's check of catch's env.grid_size");
_Static_assert(MR_DIALS_K <= MR_SPACE_MAX_DIMS && MR_DIALS_K * MR_DIALS_CHOICES <= MR_MAX_ACTIONS,
               "dials' action outgrew the multi-discrete head");
_Static_assert(MR_ENV_EXTRA_STRIDE == 2, "the trainer's extra rows are net_layout.h's MR_POLICY_EXTRA wide");

static const struct {
    const char *name, *summary, *codes;
} ENVS[MR_ENV_COUNT] = {
    [MR_ENV_FORAGING] = {"foraging", "eat food, avoid poison, keep energy above 0 (docs/environment.md; four modes)",
                         "empty food poison"},
    [MR_ENV_REACH] = {"reach", "walk to the goal, keep out of the pits (envs/reach.h; ground_truth only)",
                      "empty goal pit"},
    [MR_ENV_CARTPOLE] = {"cartpole", "balance the pole: Gymnasium's CartPole-v1 (envs/cartpole.h; 4 floats, 2 actions)",
                         ""},
    [MR_ENV_PENDULUM] = {"pendulum", "swing up and hold: Gymnasium's Pendulum-v1 (envs/pendulum.h; 3 floats, a torque "
                         "in [-2, 2])", ""},
    [MR_ENV_SNAKE] = {"snake", "eat, grow, do not crash into the walls or yourself (envs/snake.h; 4 channels)",
                      "empty food body tail wall"},
    [MR_ENV_LUA] = {"lua", "an environment written in Lua: env.lua names its file (docs/environments.md, \"An "
                    "environment in Lua\"; cpu only)", ""},
    [MR_ENV_DIALS] = {"dials", "turn each of 2 dials to its target (envs/dials.h; 4 floats, multi-discrete: 3 "
                      "choices a dial)", ""},
    [MR_ENV_CATCH] = {"catch", "move the paddle under the falling, bouncing ball (envs/catch.h; a 2 x N x N float "
                      "image)", ""},
};

const char *mr_env_name_of(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].name : NULL; }
const char *mr_env_summary(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].summary : NULL; }
const char *mr_env_codes(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].codes : NULL; }
/* A discrete action space's count, as the environment declares it (its
 * sizes do not depend on the config); 0 for another kind or name. */
int mr_env_num_actions(int name) {
    if (name < 0 || name >= MR_ENV_COUNT) return 0;
    mr_env_config c;
    memset(&c, 0, sizeof c);
    c.name = (mr_env_name)name;
    c.view_range = 1;
    mr_env_spaces sp;
    mr_error err;
    if (mr_env_spaces_of(&c, &sp, &err) != MR_OK || sp.act.kind != MR_SPACE_DISCRETE) return 0;
    return sp.act.n;
}

mr_status mr_env_spaces_of(const mr_env_config *cfg, mr_env_spaces *out, mr_error *err) {
    if (!cfg || !out) return mr_fail(err, MR_ERR_ARG, "mr_env_spaces_of: NULL argument");
    if (cfg->view_range < 1)
        return mr_fail(err, MR_ERR_ARG, "env.view_range = %d: must be at least 1", cfg->view_range);
    switch (cfg->name) {
    case MR_ENV_FORAGING: mr_forage_spaces(cfg, out); break;
    case MR_ENV_REACH: mr_reach_spaces(cfg, out); break;
    case MR_ENV_CARTPOLE: mr_cartpole_spaces(cfg, out); break;
    case MR_ENV_PENDULUM: mr_pendulum_spaces(cfg, out); break;
    case MR_ENV_SNAKE: mr_snake_spaces(cfg, out); break;
    case MR_ENV_LUA:
        if (!cfg->program)
            return mr_fail(err, MR_ERR_ARG, "env.name = lua: no program is attached: env.lua names the Lua file that "
                           "declares the environment (docs/environments.md, \"An environment in Lua\")");
        *out = cfg->program->spaces;
        {   /* truncation: the program's own limit and env.max_episode_steps, whichever comes first; its
             * truncated episodes are bootstrapped under "auto" (the engine keeps the observation its step
             * wrote, mr_program_end_step), as for the C environments that do not observe the time */
            const int own = cfg->program->max_steps, cfgmax = cfg->max_episode_steps;
            out->step_limit = own > 0 && cfgmax > 0 ? (cfgmax < own ? cfgmax : own) : own > 0 ? own : cfgmax;
            out->bootstrap_truncation = 1;
        }
        break;
    case MR_ENV_DIALS: mr_dials_spaces(cfg, out); break;
    case MR_ENV_CATCH: mr_catch_spaces(cfg, out); break;
    default:
        return mr_fail(err, MR_ERR_ARG, "env.name = %d: not an environment of this build (0 .. %d)", (int)cfg->name,
                       MR_ENV_COUNT - 1);
    }
    /* the action count the policy's actor has is the declared one (config.c, mr_env_num_actions) */
    return MR_OK;
}

int mr_env_from_name(const char *name) {
    for (int i = 0; name && i < MR_ENV_COUNT; i++)
        if (strcmp(ENVS[i].name, name) == 0) return i;
    return -1;
}

void mr_env_layout(mr_env_state *s, const mr_env_config *cfg, uint64_t seed, mr_arena *a) {
    memset(s, 0, sizeof *s);
    const int n = cfg->num_envs;
    s->n = n;
    s->kind = cfg->name;
    s->index0 = cfg->index0;
    s->seed = seed;
    s->max_steps = cfg->max_episode_steps;
    s->reward_clip = 20.0f;
    s->threads = 0;
    mr_env_spaces sp;
    mr_error err;
    if (mr_env_spaces_of(cfg, &sp, &err) != MR_OK) memset(&sp, 0, sizeof sp);   /* checked before */
    s->critic_extra = sp.critic_extra;
    s->act_kind = sp.act.kind;
    s->act_bytes = sp.act.kind == MR_SPACE_BOX ? 4 * sp.act.n : sp.act.kind == MR_SPACE_MULTI_DISCRETE ? sp.act.n : 1;
    s->obs_size = sp.obs.kind == MR_SPACE_VECTOR ? sp.obs.shape[0] : sp.obs.shape[1] * sp.obs.shape[2] *
                  (sp.obs.kind == MR_SPACE_CODES ? 1 : sp.obs.shape[0]);
    if (sp.obs.kind == MR_SPACE_CODES) s->obs = MR_TAKE(a, uint8_t, (size_t)n * s->obs_size);
    else s->obs_f = MR_TAKE(a, float, (size_t)n * s->obs_size);
    s->reward = MR_TAKE(a, float, n);
    s->terminated = MR_TAKE(a, uint8_t, n);
    s->truncated = MR_TAKE(a, uint8_t, n);
    s->steps = MR_TAKE(a, int32_t, n);
    s->tick = MR_TAKE(a, uint32_t, n);
    s->ep_return = MR_TAKE(a, float, n);
    s->log = MR_TAKE(a, mr_env_log, n);
    switch (cfg->name) {
    case MR_ENV_CARTPOLE: mr_cartpole_layout(s, a); break;
    case MR_ENV_PENDULUM: mr_pendulum_layout(s, a); break;
    case MR_ENV_SNAKE: mr_snake_layout(s, cfg, a); break;
    case MR_ENV_LUA: mr_program_layout(s, cfg, a); break;
    case MR_ENV_DIALS: mr_dials_layout(s, a); break;
    case MR_ENV_CATCH: mr_catch_layout(s, cfg, a); break;
    default: mr_forage_layout(s, cfg, a); break;   /* foraging, reach */
    }
}

int mr_env_sections(const mr_env_state *s, mr_env_section *out) {
    switch (s->kind) {
    case MR_ENV_CARTPOLE: return mr_cartpole_sections(s, out);
    case MR_ENV_PENDULUM: return mr_pendulum_sections(s, out);
    case MR_ENV_SNAKE: return mr_snake_sections(s, out);
    case MR_ENV_LUA: return mr_program_sections(s, out);
    case MR_ENV_DIALS: return mr_dials_sections(s, out);
    case MR_ENV_CATCH: return mr_catch_sections(s, out);
    default: return mr_forage_sections(s, out);   /* foraging, reach */
    }
}

void mr_env_critic_extra_all(const mr_env_state *s, float *extra) {
    for (int i = 0; i < s->n; i++) mr_env_critic_extra_one(s, i, extra + (size_t)i * MR_ENV_EXTRA_STRIDE);
}

int mr_env_set_param(mr_env_state *s, const char *name, int value) {
    switch (s->kind) {
    case MR_ENV_CARTPOLE: case MR_ENV_PENDULUM: case MR_ENV_SNAKE: case MR_ENV_LUA: case MR_ENV_DIALS:
    case MR_ENV_CATCH: return -1;
    default:   /* foraging, reach */
        if (strcmp(name, "energy_frozen") != 0) return -1;
        mr_forage_of(s)->energy_frozen = value;
        return 0;
    }
}

void mr_env_episode_energy(int kind, int32_t food, int32_t poison, int32_t steps, int32_t *gained_centi,
                           float *final_energy) {
    switch (kind) {
    case MR_ENV_FORAGING:
        *gained_centi = MR_ENERGY_FOOD * food - MR_ENERGY_POISON * poison - MR_ENERGY_DECAY * steps;
        *final_energy = (float)((double)(MR_ENERGY_START + *gained_centi) / 100.0);
        break;
    default:
        *gained_centi = 0;
        *final_energy = 0.0f;
        break;
    }
}

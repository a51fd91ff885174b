/*
 * registry.c - the environments by name, for hosts and messages (moonrl.h's
 * mr_env_name_of, mr_env_from_name, mr_env_summary, mr_env_num_actions, and
 * mr_env_spaces_of: what each environment declares in its own header).
 * One row per value of mr_env_name; registry.h holds their code.
 */
#include <string.h>
#include "moonrl.h"
#include "errors.h"
#include "reach.h"   /* MR_REACH_ACTIONS, the spaces */

static const struct {
    const char *name, *summary, *codes;
} ENVS[MR_ENV_COUNT] = {
    [MR_ENV_FORAGING] = {"foraging", "eat food, avoid poison, keep energy above 0 (docs/environment.md; four modes)",
                         "empty food poison"},
    [MR_ENV_REACH] = {"reach", "walk to the goal, keep out of the pits (envs/reach.h; ground_truth only)",
                      "empty goal pit"},
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

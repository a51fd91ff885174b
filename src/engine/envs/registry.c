/*
 * registry.c - the environments by name, for hosts and messages (moonrl.h's
 * mr_env_name_of, mr_env_from_name, mr_env_summary, mr_env_num_actions).
 * One row per value of mr_env_name; registry.h holds their code.
 */
#include <string.h>
#include "moonrl.h"
#include "reach.h"   /* MR_REACH_ACTIONS */

static const struct {
    const char *name, *summary, *codes;
    int actions;
} ENVS[MR_ENV_COUNT] = {
    [MR_ENV_FORAGING] = {"foraging", "eat food, avoid poison, keep energy above 0 (docs/environment.md; four modes)",
                         "empty food poison", 8},
    [MR_ENV_REACH] = {"reach", "walk to the goal, keep out of the pits (envs/reach.h; ground_truth only)",
                      "empty goal pit", MR_REACH_ACTIONS},
};

const char *mr_env_name_of(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].name : NULL; }
const char *mr_env_summary(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].summary : NULL; }
const char *mr_env_codes(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].codes : NULL; }
int mr_env_num_actions(int name) { return name >= 0 && name < MR_ENV_COUNT ? ENVS[name].actions : 0; }

int mr_env_from_name(const char *name) {
    for (int i = 0; name && i < MR_ENV_COUNT; i++)
        if (strcmp(ENVS[i].name, name) == 0) return i;
    return -1;
}

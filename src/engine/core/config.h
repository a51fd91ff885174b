/* config.h - what config.c offers the rest of core (not public). */
#ifndef MR_CONFIG_H
#define MR_CONFIG_H
#include "moonrl.h"

/* Checks a hot-parameter set (used by mr_config_validate, mr_trainer_set_hot
 * and a checkpoint's hot parameters). */
mr_status mr_hot_validate(const mr_hot_params *h, mr_error *err);

/* Checks an evaluation config: mode, and the schema's ranges of eval.*. */
mr_status mr_eval_config_validate(const mr_eval_config *c, mr_error *err);

/* The CNN's V for c: its observation's side (H = W of cell codes or a
 * float image, mr_config_follow_env), or 2 env.view_range + 1 for a config
 * that has none (a vector observation: the conv fields are unused). */
static inline int mr_config_side(const mr_config *c) {
    return c->policy.obs_side > 0 ? c->policy.obs_side : 2 * c->env.view_range + 1;
}

#endif /* MR_CONFIG_H */

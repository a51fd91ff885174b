/* config.h - what config.c offers the rest of core (not public). */
#ifndef MR_CONFIG_H
#define MR_CONFIG_H
#include "moonrl.h"

/* Checks a hot-parameter set (used by mr_config_validate, mr_trainer_set_hot
 * and a checkpoint's hot parameters). */
mr_status mr_hot_validate(const mr_hot_params *h, mr_error *err);

/* Checks an evaluation config: mode, and the schema's ranges of eval.*. */
mr_status mr_eval_config_validate(const mr_eval_config *c, mr_error *err);

#endif /* MR_CONFIG_H */

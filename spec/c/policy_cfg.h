/*
 * policy_cfg.h - the reference network of docs/environment.md (conv
 * 32,64,64, hidden 512, critic 512, PopArt) as a policy config, for the
 * policy tests on both backends. Written out rather than taken from
 * mr_config_default, so the tests keep measuring this network whatever the
 * defaults become.
 */
#ifndef MR_POLICY_CFG_H
#define MR_POLICY_CFG_H
#include "moonrl.h"
#include <string.h>

static inline void ref_cfg(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->num_conv = 3;
    c->conv_channels[0] = 32;
    c->conv_channels[1] = 64;
    c->conv_channels[2] = 64;
    c->hidden = 512;
    c->critic_hidden = 512;
    c->popart = 1;
}

#endif

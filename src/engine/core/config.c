/*
 * config.c - defaults, names and validation of mr_config.
 *
 * The Lua host has its own schema with friendlier messages; this is the
 * engine's last line of defence for any C caller: every field is checked and
 * a bad one is named with its value and what is accepted.
 */
#include "moonrl.h"
#include "errors.h"
#include "config.h"
#include "config_keys.h"
#include "env.h"
#include "net_layout.h"   /* mr_net_fits_spaces */

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Every default is the schema's (config_keys.h, generated from
 * lua/moonrl/config/schema.lua); enum values are their choice's index. */
void mr_config_default(mr_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
#define D_INT(k, f, d, lo, hi) c->f = (d);
#define D_REAL(k, f, d, lo, hi) c->f = (d);
#define D_U64(k, f, d, lo, hi) c->f = (d);
#define D_ENUM(k, f, d, n, names) c->f = (d);
#define D_SCHED(k, f, kind, a, b, lo, hi) c->f = (mr_schedule){(kind), (a), (b), 1.0, 1.0};
#define D_LIST(k, f, count, lo, hi, min_len, max_len)
    MR_CONFIG_KEYS(D_INT, D_REAL, D_U64, D_ENUM, D_SCHED, D_LIST)
#define D_LIST_AT(f, count, i, v) c->f[i] = (v); c->count = (i) + 1;
    MR_CONFIG_LIST_DEFAULTS(D_LIST_AT)
#undef D_INT
#undef D_REAL
#undef D_U64
#undef D_ENUM
#undef D_SCHED
#undef D_LIST
#undef D_LIST_AT
    mr_config_follow_env(c);
}

void mr_config_follow_env(mr_config *c) {
    if (!c) return;
    c->policy.num_actions = 0;
    mr_env_spaces sp;
    mr_env_config e = c->env;
    if (e.view_range < 1) e.view_range = 1;   /* the sizes read here do not depend on it */
    if (mr_env_spaces_of(&e, &sp, NULL) != MR_OK) return;   /* mr_config_validate names the fault */
    c->policy.obs_vector = sp.obs.kind == MR_SPACE_VECTOR ? sp.obs.shape[0] : 0;
    c->policy.critic_extra = sp.critic_extra;
    const int grid = sp.obs.kind == MR_SPACE_CODES || sp.obs.kind == MR_SPACE_IMAGE;   /* the CNN's */
    c->policy.obs_channels = grid ? sp.obs.shape[0] : 0;
    c->policy.obs_image = sp.obs.kind == MR_SPACE_IMAGE;
    c->policy.obs_side = grid ? sp.obs.shape[1] : 0;
    /* discrete(n): n logits; a box of d floats: the actor's d means and d log-stds (the Gaussian head) */
    c->policy.act_box = sp.act.kind == MR_SPACE_BOX ? sp.act.n : 0;
    int md = 0;   /* multi-discrete: the groups' logits side by side (act_head.h) */
    for (int i = 0; sp.act.kind == MR_SPACE_MULTI_DISCRETE && i < sp.act.n && i < MR_SPACE_MAX_DIMS; i++)
        md += sp.act.nvec[i];
    c->policy.num_actions = c->policy.act_box > 0 ? 2 * c->policy.act_box
                          : sp.act.kind == MR_SPACE_DISCRETE ? sp.act.n : md;
}

static int u64_outside(uint64_t v, uint64_t lo, uint64_t hi) { return v < lo || v > hi; }

void mr_eval_config_default(mr_eval_config *c) {
    if (!c) return;
    c->mode = -1;   /* the checkpoint's own mode: not a setting */
    c->protocol = -1;   /* the environment's own; these three are options of an evaluation, not config keys */
    c->episodes = 0;
    c->greedy = 0;
#define D_EV(k, f, d, lo, hi) c->f = (d);
    MR_EVAL_KEYS(D_EV, D_EV)
#undef D_EV
}

mr_status mr_eval_config_validate(const mr_eval_config *c, mr_error *err) {
    if (c->mode < -1 || c->mode > MR_MODE_PROXY)
        return mr_fail(err, MR_ERR_ARG, "eval mode = %d: accepted -1 (the trainer's mode) or 0 .. 3", c->mode);
#define V_EV(k, f, d, lo, hi) \
    if (u64_outside((uint64_t)c->f, (lo), (hi))) \
        return mr_fail(err, MR_ERR_ARG, "%s = %lld is out of range: accepted %lld .. %lld", k, (long long)c->f, \
                       (long long)(lo), (long long)(hi));
    MR_EVAL_KEYS(V_EV, V_EV)
#undef V_EV
    if (c->protocol < -1 || c->protocol > MR_EVAL_SURVIVAL)
        return mr_fail(err, MR_ERR_ARG, "eval protocol = %d: accepted -1 (the environment's own), 0 episodic, "
                       "1 survival", c->protocol);
    if (c->episodes < 0)
        return mr_fail(err, MR_ERR_ARG, "eval episodes = %d: accepted 0 (eval.steps alone) or more", c->episodes);
    if (c->greedy != 0 && c->greedy != 1)
        return mr_fail(err, MR_ERR_ARG, "eval greedy = %d: accepted 0 (sampled actions) or 1", c->greedy);
    return MR_OK;
}

static mr_status check_schedule(const char *name, const mr_schedule *s, double lo, double hi,
                                mr_error *err) {
    if (s->kind < MR_SCHED_CONSTANT || s->kind > MR_SCHED_STEP)
        return mr_fail(err, MR_ERR_ARG, "%s.kind = %d: accepted 0 constant, 1 linear, 2 cosine, 3 step",
                       name, s->kind);
    if (!(s->start >= lo && s->start <= hi) || !(s->end >= lo && s->end <= hi))
        return mr_fail(err, MR_ERR_ARG, "%s = %g -> %g is out of range: accepted %g .. %g", name,
                       s->start, s->end, lo, hi);
    if (s->kind == MR_SCHED_STEP && (!(s->gamma > 0 && s->gamma <= 10) || !(s->every > 0 && s->every <= 1)))
        return mr_fail(err, MR_ERR_ARG,
                       "%s: a step schedule needs gamma in (0, 10] and every in (0, 1], got gamma %g every %g",
                       name, s->gamma, s->every);
    return MR_OK;
}

/* The hot keys' ranges (hot_keys.h, the schema's): what mr_trainer_set_hot
 * and mr_config_validate accept. */
mr_status mr_hot_validate(const mr_hot_params *h, mr_error *err) {
    mr_status s;
#define HV_SCHED(k, m, f, lo, hi) if ((s = check_schedule(k, &h->m, (lo), (hi), err))) return s;
#define HV_REAL(k, m, f, lo, hi) \
    if (!(h->m >= (lo) && h->m <= (hi))) \
        return mr_fail(err, MR_ERR_ARG, "%s = %g is out of range: accepted %g .. %g", k, (double)h->m, \
                       (double)(lo), (double)(hi));
#define HV_INT(k, m, f, lo, hi) \
    if (h->m < (lo) || h->m > (hi)) \
        return mr_fail(err, MR_ERR_ARG, "%s = %d is out of range: accepted %d .. %d", k, h->m, (lo), (hi));
#define HV_U64(k, m, f, lo, hi) \
    if (u64_outside(h->m, (lo), (hi))) \
        return mr_fail(err, MR_ERR_ARG, "%s = %llu is out of range: accepted %llu .. %llu", k, \
                       (unsigned long long)h->m, (unsigned long long)(lo), (unsigned long long)(hi));
    MR_HOT_KEYS(HV_SCHED, HV_REAL, HV_INT, HV_U64)
#undef HV_SCHED
#undef HV_REAL
#undef HV_INT
#undef HV_U64
    return MR_OK;
}

mr_status mr_config_validate(const mr_config *c, mr_error *err) {
    if (!c) return mr_fail(err, MR_ERR_ARG, "config is NULL");
    mr_status s = mr_env_config_check(&c->env, err);
    if (s) return s;
    if (c->env.name == MR_ENV_LUA && c->device == MR_DEVICE_CUDA)
        return mr_fail(err, MR_ERR_ARG, "device = cuda: %s is a Lua environment, which runs on the cpu only "
                       "(its step is Lua code on the CPU's threads): set device = \"cpu\" (or \"auto\")",
                       c->env.program ? c->env.program->label : "env.lua");
    mr_env_spaces sp;   /* what the environment declares, against what the network trains */
    if ((s = mr_env_spaces_of(&c->env, &sp, err)) != MR_OK) return s;
    if ((s = mr_net_fits_spaces(&sp, mr_env_name_of(c->env.name), err)) != MR_OK) return s;
    {
        mr_config f = *c;
        mr_config_follow_env(&f);
        if (c->policy.num_actions != f.policy.num_actions || c->policy.obs_vector != f.policy.obs_vector ||
            c->policy.critic_extra != f.policy.critic_extra || c->policy.act_box != f.policy.act_box ||
            c->policy.obs_channels != f.policy.obs_channels || c->policy.obs_image != f.policy.obs_image ||
            c->policy.obs_side != f.policy.obs_side)
            return mr_fail(err, MR_ERR_ARG, "policy.num_actions = %d, obs_vector = %d, critic_extra = %d, obs_channels "
                           "= %d but env.name = %s gives %d, %d, %d, %d (the network follows the environment: call "
                           "mr_config_follow_env)", c->policy.num_actions, c->policy.obs_vector,
                           c->policy.critic_extra, c->policy.obs_channels, mr_env_name_of(c->env.name),
                           f.policy.num_actions, f.policy.obs_vector, f.policy.critic_extra, f.policy.obs_channels);
    }

    /* every key's own range (the schema's, config_keys.h); the env's keys
     * were checked above with their cross-key rules (mr_env_config_check) */
#define V_INT(k, f, d, lo, hi) \
    if (strncmp(k, "env.", 4) != 0 && (c->f < (lo) || c->f > (hi))) \
        return mr_fail(err, MR_ERR_ARG, "%s = %lld is out of range: accepted %lld .. %lld", k, (long long)c->f, \
                       (long long)(lo), (long long)(hi));
#define V_REAL(k, f, d, lo, hi) \
    if (!(c->f >= (lo) && c->f <= (hi))) \
        return mr_fail(err, MR_ERR_ARG, "%s = %g is out of range: accepted %g .. %g", k, (double)c->f, \
                       (double)(lo), (double)(hi));
#define V_U64(k, f, d, lo, hi) \
    if (u64_outside(c->f, (lo), (hi))) \
        return mr_fail(err, MR_ERR_ARG, "%s = %llu is out of range: accepted %llu .. %llu", k, \
                       (unsigned long long)c->f, (unsigned long long)(lo), (unsigned long long)(hi));
#define V_ENUM(k, f, d, n, names) \
    if ((int)c->f < 0 || (int)c->f >= (n)) \
        return mr_fail(err, MR_ERR_ARG, "%s = %d: accepted 0 .. %d (%s, in that order)", k, (int)c->f, (n) - 1, names);
#define V_SCHED(k, f, kind, a, b, lo, hi) /* mr_hot_validate, below */
#define V_LIST(k, f, count, lo, hi, min_len, max_len) \
    if (c->count < (min_len) || c->count > (max_len)) \
        return mr_fail(err, MR_ERR_ARG, "%s has %d entries: accepted %d .. %d", k, c->count, (min_len), (max_len)); \
    for (int i = 0; i < c->count; i++) \
        if (c->f[i] < (lo) || c->f[i] > (hi)) \
            return mr_fail(err, MR_ERR_ARG, "%s[%d] = %d is out of range: accepted %d .. %d", k, i + 1, c->f[i], \
                           (lo), (hi));
    MR_CONFIG_KEYS(V_INT, V_REAL, V_U64, V_ENUM, V_SCHED, V_LIST)
#undef V_INT
#undef V_REAL
#undef V_U64
#undef V_ENUM
#undef V_SCHED
#undef V_LIST
    /* the per-layer choice (not a key: the warm-up's algorithm step sets it) */
    for (int l = 0; l < MR_MAX_CONV; l++) {
        const int v = c->cpu.conv_layers[l];
        if (v == 0) continue;
        if (l == 0 || l >= c->policy.num_conv || (v != MR_CPU_CONV_ONEDNN && v != MR_CPU_CONV_WINOGRAD))
            return mr_fail(err, MR_ERR_ARG,
                           "cpu.conv_layers[%d] = %d: accepted 0 (cpu.conv's choice), %d (onednn) or %d (winograd) "
                           "for layers 1 .. num_conv-1 = %d, 0 elsewhere",
                           l, v, MR_CPU_CONV_ONEDNN, MR_CPU_CONV_WINOGRAD, c->policy.num_conv - 1);
        if (c->cpu.conv == MR_CPU_CONV_IM2COL)
            return mr_fail(err, MR_ERR_ARG, "cpu.conv_layers[%d] = %d with cpu.conv = im2col: im2col is a choice for "
                           "the whole network; accepted all 0 there", l, v);
    }
    long long batch = (long long)c->ppo.rollout_steps * c->env.num_envs;
    if (batch % c->ppo.minibatches != 0)
        return mr_fail(err, MR_ERR_ARG,
                       "ppo.minibatches = %d does not divide the batch of %lld samples "
                       "(rollout_steps %d x num_envs %d): accepted a divisor of %lld",
                       c->ppo.minibatches, batch, c->ppo.rollout_steps, c->env.num_envs, batch);
    if (batch > (1ll << 31))
        return mr_fail(err, MR_ERR_ARG, "rollout_steps x num_envs = %lld samples is too large: accepted up to 2^31",
                       batch);
    mr_hot_params h;
    mr_config_hot_params(c, &h);
    if ((s = mr_hot_validate(&h, err))) return s;

    mr_ok(err);
    return MR_OK;
}

/* The hot members and their mr_config fields (hot_keys.h). */
#define HOT_TO(k, m, f, lo, hi) h->m = cfg->f;
#define HOT_FROM(k, m, f, lo, hi) cfg->f = h->m;

void mr_config_hot_params(const mr_config *cfg, mr_hot_params *h) {
    memset(h, 0, sizeof *h);
    MR_HOT_KEYS(HOT_TO, HOT_TO, HOT_TO, HOT_TO)
}

void mr_config_apply_hot(mr_config *cfg, const mr_hot_params *h) {
    MR_HOT_KEYS(HOT_FROM, HOT_FROM, HOT_FROM, HOT_FROM)
}
#undef HOT_TO
#undef HOT_FROM

uint64_t mr_config_total_updates(const mr_config *cfg) {
    const uint64_t per = (uint64_t)(cfg->ppo.rollout_steps > 0 ? cfg->ppo.rollout_steps : 1) *
                         (uint64_t)(cfg->env.num_envs > 0 ? cfg->env.num_envs : 1);
    const uint64_t n = (cfg->total_steps + per - 1) / per;
    return n ? n : 1;
}

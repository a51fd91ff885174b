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
#include "env.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *mode_names[] = {"ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy"};

int mr_mode_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(name, mode_names[i]) == 0) return i;
    return -1;
}

const char *mr_mode_name(int mode) {
    return (mode >= 0 && mode < 4) ? mode_names[mode] : NULL;
}

static mr_schedule linear(double a, double b) {
    mr_schedule s = {MR_SCHED_LINEAR, a, b, 1.0, 1.0};
    return s;
}

void mr_config_default(mr_config *c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->env.mode = MR_MODE_GROUND_TRUTH;
    c->env.num_envs = 192;
    c->env.grid_size = 128;
    c->env.view_range = 5;
    c->env.density_min = 64;
    c->env.density_max = 256;
    c->env.respawn_tries = 50;
    c->env.max_episode_steps = 512;

    c->policy.num_conv = 3;
    c->policy.conv_channels[0] = 32;
    c->policy.conv_channels[1] = 64;
    c->policy.conv_channels[2] = 64;
    c->policy.hidden = 512;
    c->policy.critic_hidden = 512;
    c->policy.popart = 1;
    c->policy.popart_beta_min = 0.001f;

    c->ppo.rollout_steps = 128;
    c->ppo.epochs = 4;
    c->ppo.minibatches = 1;
    c->ppo.gamma = 0.99;
    c->ppo.gae_lambda = 0.95;
    c->ppo.lr = linear(3e-4, 1e-4);
    c->ppo.clip = linear(0.2, 0.1);
    c->ppo.ent_coef = linear(0.1, 0.001);
    c->ppo.vf_coef = 0.5;
    c->ppo.ent_floor = 0.5;
    c->ppo.ent_floor_coef = 0.05;
    c->ppo.max_grad_norm = 0.5;
    c->ppo.adam_beta1 = 0.9;
    c->ppo.adam_beta2 = 0.999;
    c->ppo.adam_eps = 1e-8;
    c->ppo.norm_adv = 1;
    c->ppo.reward_clip = 20.0;

    c->cuda.device_index = 0;
    c->cuda.graphs = 1;
    c->cuda.memory_fraction = 0.9;
    c->cuda.release_threshold = 0.8;

    c->device = MR_DEVICE_AUTO;
    c->precision = MR_FP32;
    c->threads = 0;
    c->seed = 1;
    c->total_steps = 50331648ull;
}

void mr_eval_config_default(mr_eval_config *c) {
    if (!c) return;
    c->mode = -1;
    c->num_envs = 1024;
    c->steps = 4096;
    c->runs = 1;
    c->seed = 12345;
}

#define CHECK_INT(field, lo, hi) do { if ((field) < (lo) || (field) > (hi)) \
    return mr_fail(err, MR_ERR_ARG, "%s = %d is out of range: accepted %d .. %d", #field + 3, \
                   (int)(field), (int)(lo), (int)(hi)); } while (0)
#define CHECK_REAL(field, lo, hi) do { if (!((field) >= (lo) && (field) <= (hi))) \
    return mr_fail(err, MR_ERR_ARG, "%s = %g is out of range: accepted %g .. %g", #field + 3, \
                   (double)(field), (double)(lo), (double)(hi)); } while (0)

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

mr_status mr_hot_validate(const mr_hot_params *h, mr_error *err) {
    mr_status s;
    if ((s = check_schedule("ppo.lr", &h->lr, 0.0, 1.0, err))) return s;
    if ((s = check_schedule("ppo.clip", &h->clip, 0.0, 10.0, err))) return s;
    if ((s = check_schedule("ppo.ent_coef", &h->ent_coef, 0.0, 10.0, err))) return s;
    const mr_hot_params *c = h;
    CHECK_REAL(c->max_grad_norm, 1e-8, 1e6);
    CHECK_REAL(c->vf_coef, 0.0, 1e3);
    CHECK_REAL(c->ent_floor, 0.0, 10.0);
    CHECK_REAL(c->ent_floor_coef, 0.0, 1e3);
    if (h->total_steps < 1)
        return mr_fail(err, MR_ERR_ARG, "total_steps = 0: must be at least 1");
    return MR_OK;
}

mr_status mr_config_validate(const mr_config *c, mr_error *err) {
    if (!c) return mr_fail(err, MR_ERR_ARG, "config is NULL");
    mr_status s = mr_env_config_check(&c->env, err);
    if (s) return s;

    const mr_policy_config *p = &c->policy;
    if (p->num_conv < 1 || p->num_conv > MR_MAX_CONV)
        return mr_fail(err, MR_ERR_ARG, "policy.conv_channels has %d layers: accepted 1 .. %d",
                       p->num_conv, MR_MAX_CONV);
    for (int i = 0; i < p->num_conv; i++)
        if (p->conv_channels[i] < 1 || p->conv_channels[i] > 1024)
            return mr_fail(err, MR_ERR_ARG, "policy.conv_channels[%d] = %d is out of range: accepted 1 .. 1024",
                           i + 1, p->conv_channels[i]);
    CHECK_INT(c->policy.hidden, 1, 65536);
    CHECK_INT(c->policy.critic_hidden, 1, 65536);
    CHECK_INT(c->policy.popart, 0, 1);
    if (c->policy.proxy_obs_storage != MR_OBS_FAITHFUL && c->policy.proxy_obs_storage != MR_OBS_UINT8)
        return mr_fail(err, MR_ERR_ARG, "env.proxy_obs_storage = %d: accepted 0 (faithful) or 1 (uint8)",
                       (int)c->policy.proxy_obs_storage);
    CHECK_REAL(c->policy.popart_beta_min, 0.0, 1.0);
    if (c->cpu.conv != MR_CPU_CONV_AUTO && c->cpu.conv != MR_CPU_CONV_ONEDNN && c->cpu.conv != MR_CPU_CONV_IM2COL)
        return mr_fail(err, MR_ERR_ARG, "cpu.conv = %d: accepted 0 (auto), 1 (onednn) or 2 (im2col)", (int)c->cpu.conv);
    if (c->cpu.activations != MR_CPU_ACTIVATIONS_AUTO && c->cpu.activations != MR_CPU_ACTIVATIONS_STORE &&
        c->cpu.activations != MR_CPU_ACTIVATIONS_RECOMPUTE)
        return mr_fail(err, MR_ERR_ARG, "cpu.activations = %d: accepted 0 (auto), 1 (store) or 2 (recompute)",
                       (int)c->cpu.activations);

    CHECK_INT(c->ppo.rollout_steps, 1, 65536);
    CHECK_INT(c->ppo.epochs, 1, 1000);
    CHECK_INT(c->ppo.minibatches, 1, 65536);
    long long batch = (long long)c->ppo.rollout_steps * c->env.num_envs;
    if (batch % c->ppo.minibatches != 0)
        return mr_fail(err, MR_ERR_ARG,
                       "ppo.minibatches = %d does not divide the batch of %lld samples "
                       "(rollout_steps %d x num_envs %d): accepted a divisor of %lld",
                       c->ppo.minibatches, batch, c->ppo.rollout_steps, c->env.num_envs, batch);
    if (batch > (1ll << 31))
        return mr_fail(err, MR_ERR_ARG, "rollout_steps x num_envs = %lld samples is too large: accepted up to 2^31",
                       batch);
    CHECK_REAL(c->ppo.gamma, 0.0, 1.0);
    CHECK_REAL(c->ppo.gae_lambda, 0.0, 1.0);
    CHECK_REAL(c->ppo.adam_beta1, 0.0, 0.999999);
    CHECK_REAL(c->ppo.adam_beta2, 0.0, 0.999999999);
    CHECK_REAL(c->ppo.adam_eps, 1e-12, 1.0);
    CHECK_INT(c->ppo.norm_adv, 0, 1);
    CHECK_REAL(c->ppo.reward_clip, 1e-6, 1e6);
    mr_hot_params h;
    mr_config_hot_params(c, &h);
    if ((s = mr_hot_validate(&h, err))) return s;

    CHECK_INT(c->device, MR_DEVICE_AUTO, MR_DEVICE_CUDA);
    CHECK_INT(c->precision, MR_FP32, MR_FP16);
    CHECK_INT(c->threads, 0, 1024);
    CHECK_INT(c->cuda.device_index, 0, 64);
    CHECK_REAL(c->cuda.memory_fraction, 0.01, 1.0);
    CHECK_REAL(c->cuda.release_threshold, 0.0, 1.0);
    mr_ok(err);
    return MR_OK;
}

void mr_config_hot_params(const mr_config *cfg, mr_hot_params *h) {
    memset(h, 0, sizeof *h);
    h->lr = cfg->ppo.lr;
    h->clip = cfg->ppo.clip;
    h->ent_coef = cfg->ppo.ent_coef;
    h->max_grad_norm = cfg->ppo.max_grad_norm;
    h->vf_coef = cfg->ppo.vf_coef;
    h->ent_floor = cfg->ppo.ent_floor;
    h->ent_floor_coef = cfg->ppo.ent_floor_coef;
    h->total_steps = cfg->total_steps;
}

void mr_config_apply_hot(mr_config *cfg, const mr_hot_params *h) {
    cfg->ppo.lr = h->lr;
    cfg->ppo.clip = h->clip;
    cfg->ppo.ent_coef = h->ent_coef;
    cfg->ppo.max_grad_norm = h->max_grad_norm;
    cfg->ppo.vf_coef = h->vf_coef;
    cfg->ppo.ent_floor = h->ent_floor;
    cfg->ppo.ent_floor_coef = h->ent_floor_coef;
    cfg->total_steps = h->total_steps;
}

uint64_t mr_config_total_updates(const mr_config *cfg) {
    const uint64_t per = (uint64_t)(cfg->ppo.rollout_steps > 0 ? cfg->ppo.rollout_steps : 1) *
                         (uint64_t)(cfg->env.num_envs > 0 ? cfg->env.num_envs : 1);
    const uint64_t n = (cfg->total_steps + per - 1) / per;
    return n ? n : 1;
}

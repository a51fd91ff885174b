/*
 * trainer.c - the one PPO update loop, over a backend table (backend.h):
 * creation, one update (rollout, advantages, epochs), hot parameters,
 * snapshot/restore (what an update reports: trainer_metrics.c). It runs unchanged on the cpu
 * backend (host memory, C loops) and the cuda backend (kernels);
 * docs/engine.md draws one update's path through the table, operation by
 * operation, and spec/c/test_trainer_loop_order.c holds the loop to it.
 *
 * An update is three parts queued on one stream (rollout; advantages;
 * learn), each reading its per-update values from control blocks filled
 * from host staging, so nothing is read back inside an update (one wait at
 * its end, for the metrics) and each part can be recorded as a CUDA graph.
 * A failed update marks the trainer broken: updates and host copies are
 * refused until a checkpoint is loaded into it.
 */
#include "trainer.h"
#include "errors.h"
#include "config.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FP16_INITIAL_SCALE 65536.0f   /* torch's GradScaler */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mr_trainer_use_threads(const mr_trainer *t) { omp_set_num_threads(t->threads); }


/* The update's hyper-parameters into host staging (uploaded by the rollout part). */
static void fill_hyper(mr_trainer *t, double lr, double clip, double ent) {
    const mr_ppo_config *pc = &t->cfg.ppo;
    mr_opt_hyper *oh = &t->h.opt->h;
    mr_opt_hyper_default(oh);
    oh->lr = lr;
    oh->beta1 = pc->adam_beta1;
    oh->beta2 = pc->adam_beta2;
    oh->eps = (float)pc->adam_eps;
    for (int g = 0; g < MR_OPT_MAX_GROUPS; g++) oh->max_norm[g] = t->hot.max_grad_norm;
    oh->scaler_enabled = t->cfg.precision == MR_FP16;
    mr_ppo_coefs co;
    memset(&co, 0, sizeof co);
    co.clip = clip;
    co.ent_coef = ent;
    co.vf_coef = t->hot.vf_coef;
    co.ent_floor = t->hot.ent_floor;
    co.ent_floor_coef = t->hot.ent_floor_coef;
    co.value_max_of_means = 1;   /* ENV_SPEC: max(mse(v, R), mse(v_clipped, R)), the larger batch mean */
    co.num_actions = t->net.num_actions;
    mr_loss_hyper_set(&t->h.loss->h, &co);
}

/* ------------------------------------------------------------ creation */

static mr_status alloc_dev(mr_trainer *t, size_t bytes, const char *what, void **p, mr_error *err) {
    return mr_trainer_oom_hint(t, mr_devmem_alloc(&t->mem, bytes, what, p, err), err);
}

static mr_status backend_setup(mr_trainer *t, mr_error *err) {
    const mr_backend *o = t->be;
    const mr_config *cfg = &t->cfg;
    mr_trainer_dev *d = &t->d;
    const size_t P = t->net.n_params, Pp = t->net.n_policy;
    TRY(o->enter(t->device, t->threads, err));
    TRY(o->stream_create(&t->stream, err));

    mr_devmem_backend mbe;
    mr_devmem_config dc;
    TRY(o->device_memory(t->device, &mbe, err));
    mr_devmem_config_default(&dc);
    dc.memory_fraction = cfg->cuda.memory_fraction;
    dc.release_threshold = cfg->cuda.release_threshold;
    TRY(mr_devmem_init(&t->mem, &mbe, &dc, err));
    t->mem_ready = 1;
    t->card_total = mbe.total_bytes;
    t->card_free = mbe.free_bytes(mbe.ctx);
    TRY(o->staging_memory(&mbe, err));
    mr_devmem_config_default(&dc);
    dc.memory_fraction = 0.5;
    TRY(mr_devmem_init(&t->staging, &mbe, &dc, err));
    t->staging_ready = 1;

    /* environment state: one block, carved like the host copy */
    TRY(alloc_dev(t, t->plan.env_bytes, "the environment state", &d->env_block, err));
    mr_arena dev = {(unsigned char *)d->env_block, t->plan.env_bytes, 0, 0};
    mr_env_layout(&d->env, &cfg->env, cfg->seed, &dev);
    d->env.reward_clip = t->env.reward_clip;
    d->env.threads = t->threads;

    TRY(mr_trainer_oom_hint(t, o->policy_create(&d->pol, &cfg->policy, t->V, t->M, t->N, cfg->precision, &cfg->cpu,
                                                &cfg->cuda, &t->mem, err), err));
    d->pol_ready = 1;
    /* the first epoch's forward from the rollout: one minibatch, and the
     * update expands the observations as acting does */
    t->reuse = o->policy_act_keep && o->policy_forward_kept && t->M == t->B && t->obs_update == t->proxy_obs &&
               t->net.trunk == MR_TRUNK_CONV;   /* the MLP's act keeps nothing (policy_mlp.c) */
    const mr_net_layout *dp = d->pol.net;
    if (dp->n_params != P || dp->n_policy != Pp || dp->value_w_offset != t->net.value_w_offset ||
        dp->value_b_offset != t->net.value_b_offset)
        return mr_fail(err, MR_ERR_STATE, "the %s backend's network has another parameter layout than the host "
                       "copy's (%zu vs %zu parameters); this is a bug", o->name, dp->n_params, P);
    const int64_t sizes[MR_TRAINER_NGROUPS] = {(int64_t)Pp, (int64_t)(P - Pp)};
    if (mr_opt_groups_plan(MR_TRAINER_NGROUPS, sizes, &d->groups) != 0)
        return mr_fail(err, MR_ERR_ARG, "the trainer cannot plan the parameter groups");

    void *p;
    TRY(alloc_dev(t, t->plan.optim_bytes, "the Adam moments", &p, err));
    d->adam_m = (float *)p;
    d->adam_v = d->adam_m + P;
    TRY(alloc_dev(t, t->plan.rollout_bytes, "the rollout buffers", &d->roll_block, err));
    dev = (mr_arena){(unsigned char *)d->roll_block, t->plan.rollout_bytes, 0, 0};
    mr_trainer_layout_rollout(d, t->T, t->N, t->VV, t->NA, &t->head, t->M, t->KF, t->plan.partial_doubles, &dev);
    d->env.final_obs = d->fin_env_obs;   /* NULL unless ppo.truncation bootstraps: the environments keep nothing */
    d->env.final_extra = d->fin_env_extra;
    TRY(alloc_dev(t, t->plan.ctl_bytes, "the control blocks", &d->ctl_block, err));
    dev = (mr_arena){(unsigned char *)d->ctl_block, t->plan.ctl_bytes, 0, 0};
    mr_trainer_layout_ctl(d, &dev);
    TRY(mr_devmem_alloc(&t->staging, t->plan.staging_bytes, "the staging buffers", &t->h.block, err));
    dev = (mr_arena){(unsigned char *)t->h.block, t->plan.staging_bytes, 0, 0};
    mr_trainer_layout_stage(&t->h, cfg->ppo.epochs, t->B, &dev);
    memset(t->h.block, 0, t->plan.staging_bytes);
    for (int i = 0; i < MR_EV_COUNT; i++) TRY(o->event_create(&t->ev[i], err));

    /* Initial state: the host copy's weights (mr_policy_init), zero moments,
     * fresh control blocks, environments reset in the backend. */
    void *st = t->stream;
    TRY(o->copy(d->pol.params, t->pol.params, P * sizeof(float), MR_COPY_H2D, st, err));
    TRY(o->policy_zero_grad(&d->pol, st, err));
    TRY(o->memset(d->adam_m, 0, t->plan.optim_bytes, st, err));
    TRY(o->memset(d->roll_block, 0, t->plan.rollout_bytes, st, err));
    TRY(o->memset(d->ctl_block, 0, t->plan.ctl_bytes, st, err));
    fill_hyper(t, mr_schedule_value(&t->hot.lr, 0.0), mr_schedule_value(&t->hot.clip, 0.0),
               mr_schedule_value(&t->hot.ent_coef, 0.0));
    mr_opt_state_init(&t->h.opt->s, cfg->precision == MR_FP16 ? FP16_INITIAL_SCALE : 1.0f);
    memset(&t->h.loss->s, 0, sizeof t->h.loss->s);
    mr_popart_ctl_set(t->h.pa, &t->popart, cfg->policy.popart_beta_min);
    TRY(o->copy(d->opt, t->h.opt, sizeof *t->h.opt, MR_COPY_H2D, st, err));
    TRY(o->copy(d->loss, t->h.loss, sizeof *t->h.loss, MR_COPY_H2D, st, err));
    TRY(o->copy(d->pa, t->h.pa, sizeof *t->h.pa, MR_COPY_H2D, st, err));
    TRY(o->memset(d->env_block, 0, t->plan.env_bytes, st, err));
    TRY(o->env_clear_logs(&d->env, st, err));
    TRY(o->env_reset_all(&d->env, st, err));
    if (o->cheap_events) {   /* per-step timing is free here: always on */
        TRY(mr_trainer_set_profile(t, 1, err));
    }
    return o->stream_sync(st, err);
}

static void describe(mr_trainer *t, const char *note) {
    const mr_backend *o = t->be;
    char line[256];
    o->describe(t->device, t->threads, t->cfg.precision, line, sizeof line);
    char net[384];
    net[0] = 0;
    if (o->policy_describe)   /* how the backend runs the network (cpu.conv, cpu.activations; cuda.conv) */
        o->policy_describe(&t->d.pol, t->cfg.precision, net, sizeof net);
    if (o->host_memory) {
        int n = snprintf(t->describe, sizeof t->describe, "%s backend, %s; ", o->name, line);
        if (n > 0 && (size_t)n < sizeof t->describe)
            snprintf(t->describe + n, sizeof t->describe - (size_t)n, "%s%s", net, note);
    } else {
        snprintf(t->describe, sizeof t->describe,
                 "%s backend: %s; evaluation and inference run on a cpu copy of the weights (%d thread%s); "
                 "cuda.graphs: %s%s%s%s",
                 o->name, line, t->threads, t->threads == 1 ? "" : "s",
                 t->graphs_why[0] ? t->graphs_why : "each update after the first replays three recorded CUDA graphs",
                 net[0] ? "; " : "", net, note);
    }
    if (t->reuse) {
        const size_t n = strlen(t->describe);
        snprintf(t->describe + n, sizeof t->describe - n, "; the first epoch's forward is the rollout's");
    }
}

mr_status mr_trainer_create_on(const mr_config *cfg, const mr_backend *be, const char *note, mr_trainer **out,
                               mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_create: out is NULL");
    *out = NULL;
    if (!be) return mr_fail(err, MR_ERR_BACKEND, "mr_trainer_create: no backend table");
    if (be->unavailable) return mr_fail(err, MR_ERR_BACKEND, "%s", be->unavailable);
    mr_trainer_plan plan;   /* the config is validated once, where it becomes a plan */
    TRY(mr_trainer_plan_make(cfg, be, &plan, err));
    mr_trainer *t = calloc(1, sizeof *t);
    if (!t) return mr_fail(err, MR_ERR_NOMEM, "out of host memory creating the trainer");
    t->be = be;
    t->plan = plan;
    mr_trainer_fields(t, cfg);
    t->cfg.device = be->device;
    mr_trainer_use_threads(t);                  /* the host network sizes per-thread workspaces */
    mr_trainer_layout_host(t, &t->arena);       /* plan */
    if (mr_arena_commit(&t->arena) != 0) {
        const size_t want = t->arena.size;
        free(t);
        return mr_fail(err, MR_ERR_NOMEM,
                       "out of host memory: the trainer's host copies need %.1f MiB (network and environments)",
                       (double)want / 1048576.0);
    }
    mr_trainer_layout_host(t, &t->arena);       /* carve */
    t->env.reward_clip = (float)cfg->ppo.reward_clip;
    t->env.threads = t->threads;
    mr_status s = t->host->host_policy_init(&t->pol, cfg->seed, err);
    if (s != MR_OK) {
        mr_trainer_free(t);
        return s;
    }
    mr_popart_init(&t->popart);
    if (!cfg->cuda.graphs)
        snprintf(t->graphs_why, sizeof t->graphs_why, "off (cuda.graphs = false)");
    else if (!be->graph_begin)
        snprintf(t->graphs_why, sizeof t->graphs_why, "not available with the %s operations", be->name);
    s = backend_setup(t, err);
    if (s != MR_OK) {
        mr_trainer_free(t);
        return s;
    }
    describe(t, note ? note : "");
    *out = t;
    mr_ok(err);
    return MR_OK;
}

/* Backend selection: device = cpu or cuda as asked; auto runs cuda where a
 * GPU is usable and the trainer starts there, else the cpu, saying why. */
mr_status mr_trainer_create(const mr_config *cfg, mr_trainer **out, mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_create: out is NULL");
    *out = NULL;
    if (!cfg) return mr_fail(err, MR_ERR_ARG, "mr_trainer_create: cfg is NULL");
    const mr_backend *cuda = mr_backend_for(MR_DEVICE_CUDA);
    if (cfg->device == MR_DEVICE_CPU) return mr_trainer_create_on(cfg, mr_backend_for(MR_DEVICE_CPU), "", out, err);
    if (cfg->device == MR_DEVICE_AUTO && cfg->env.name == MR_ENV_LUA)   /* the config check refuses cuda */
        return mr_trainer_create_on(cfg, mr_backend_for(MR_DEVICE_CPU), " (device = auto: a Lua environment runs "
                                    "on the cpu)", out, err);
    if (cfg->device == MR_DEVICE_CUDA) {
        if (!cuda->unavailable && cuda->device_count() <= 0)
            return mr_fail(err, MR_ERR_BACKEND,
                           "device = cuda, but no usable GPU or driver was found (this build runs on GPUs of "
                           "compute capability 9.0 or newer); accepted here: device = \"cpu\", or \"auto\" to fall "
                           "back to the cpu");
        return mr_trainer_create_on(cfg, cuda, "", out, err);
    }
    char note[320] = "";
    if (cuda->unavailable || cuda->device_count() <= 0) {
        snprintf(note, sizeof note, " (device = auto: no usable GPU, using the cpu)");
    } else {
        mr_error ce;
        if (mr_trainer_create_on(cfg, cuda, "", out, &ce) == MR_OK) {
            mr_ok(err);
            return MR_OK;
        }
        snprintf(note, sizeof note, " (device = auto: the cuda backend did not start, using the cpu: %.240s)",
                 ce.msg);
    }
    return mr_trainer_create_on(cfg, mr_backend_for(MR_DEVICE_CPU), note, out, err);
}

void mr_trainer_free(mr_trainer *t) {
    if (!t) return;
    const mr_backend *o = t->be;
    if (t->stream) (void)o->stream_sync(t->stream, NULL);   /* nothing may still use the memory */
    for (int i = 0; i < MR_EV_COUNT; i++)
        if (t->ev[i]) o->event_destroy(t->ev[i]);
    mr_trainer_drop_graphs(t);
    for (int i = 0; i < t->npev; i++)
        if (t->pev[i]) o->event_destroy(t->pev[i]);
    free(t->pev);
    if (t->d.pol_ready) o->policy_destroy(&t->d.pol);
    if (t->host) t->host->host_policy_free(&t->pol);   /* what the host copy holds outside the arena */
    if (t->mem_ready) mr_devmem_destroy(&t->mem);
    if (t->staging_ready) mr_devmem_destroy(&t->staging);
    if (t->stream) o->stream_destroy(t->stream);
    mr_arena_release(&t->arena);
    free(t);
}

int mr_trainer_done(const mr_trainer *t) { return t ? t->agent_steps >= t->hot.total_steps : 1; }
const mr_config *mr_trainer_config(const mr_trainer *t) { return t ? &t->cfg : NULL; }
const char *mr_trainer_describe(const mr_trainer *t) { return t ? t->describe : ""; }
int mr_trainer_update_forwards(const mr_trainer *t) { return t ? t->cfg.ppo.epochs - t->reuse : 0; }

/* ------------------------------------------------------------------ update */

/* The final-state slots (ppo.truncation = bootstrap; trainer_loop_math.h). */
static mr_loop_final_args final_args(const mr_trainer *t) {
    const mr_trainer_dev *d = &t->d;
    mr_loop_final_args f;
    memset(&f, 0, sizeof f);
    f.N = t->N;
    f.kf = t->KF;
    f.row_bytes = t->VV;
    f.count = d->fin_count;
    f.obs = d->fin_obs;
    f.extra = d->fin_extra;
    f.row = d->fin_row;
    f.value = d->fin_value;
    return f;
}

/* After the rollout: the critic's values of the truncated instances' final
 * states, N slots at a time, and r += gamma V(final) at their rows. */
static mr_status bootstrap_truncated(mr_trainer *t, const mr_loop_final_args *f, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    const size_t N = (size_t)t->N;
    for (int k = 0; k < t->KF; k++)
        TRY(o->policy_act(&d->pol, d->fin_obs + (size_t)k * N * (size_t)t->VV, d->fin_extra + (size_t)k * N * 2,
                          t->N, t->proxy_obs, d->step_logits, d->fin_value + (size_t)k * N, t->stream, err));
    return o->add_final(f, d->pa, (float)t->cfg.ppo.gamma, d->rew, t->stream, err);
}

static mr_status rollout(mr_trainer *t, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const int N = t->N, VV = t->VV, proxy = t->proxy_obs;
    const uint64_t seed = t->cfg.seed;
    const mr_loop_final_args fin = final_args(t);
    if (t->KF) {   /* no truncation kept yet: every slot unused */
        TRY(o->memset(d->fin_count, 0, (size_t)N * sizeof(int32_t), st, err));
        TRY(o->memset(d->fin_row, 0xff, (size_t)t->KF * (size_t)N * sizeof(int32_t), st, err));
    }
    for (int step = 0; step < t->T; step++) {
        const size_t off = (size_t)step * (size_t)N;
        uint8_t *obs = d->obs + off * (size_t)VV;
        float *extra = d->extra + off * 2;
        TRY(mr_trainer_mark(t, 2 * step, err));
        TRY(o->copy(obs, mr_env_obs(&d->env), (size_t)N * (size_t)VV, MR_COPY_D2D, st, err));
        TRY(o->step_in(&d->env, seed, extra, d->step_u, st, err));
        /* reuse: the logits straight into the first epoch's (the batch's order) */
        float *logits = t->reuse ? d->mb_logits + off * (size_t)t->NA : d->step_logits;
        if (t->reuse)
            TRY(o->policy_act_keep(&d->pol, obs, extra, N, proxy, logits, d->step_value, (int)off, st, err));
        else
            TRY(o->policy_act(&d->pol, obs, extra, N, proxy, logits, d->step_value, st, err));
        uint8_t *act = d->act + off * (size_t)t->AB, *env_act = act;
        if (t->head.kind == MR_HEAD_GAUSS) {   /* the sample x is stored; the environment gets it clipped or squashed */
            env_act = d->step_act;
            TRY(o->sample_box(N, &t->head, logits, d->step_u, (float *)(void *)act, (float *)(void *)env_act,
                              d->logp + off, st, err));
        } else if (t->head.kind == MR_HEAD_MULTI_DISCRETE) {
            TRY(o->sample_md(N, &t->head, logits, d->step_u, act, d->logp + off, st, err));
        } else {
            TRY(o->sample(N, t->NA, logits, d->step_u, act, d->logp + off, st, err));
        }
        TRY(mr_trainer_mark(t, 2 * step + 1, err));
        TRY(o->env_step_all(&d->env, env_act, st, err));
        if (t->KF) TRY(o->keep_final(&d->env, &fin, (int)off, st, err));
        TRY(o->step_out(&d->env, d->pa, d->step_value, d->val + off, d->rew + off, d->done + off, st, err));
    }
    TRY(mr_trainer_mark(t, 2 * t->T, err));
    /* the bootstrap value of the state after the last step */
    TRY(o->step_in(&d->env, seed, d->step_extra, NULL, st, err));
    TRY(o->policy_act(&d->pol, mr_env_obs(&d->env), d->step_extra, N, proxy, d->step_logits, d->step_value, st,
                      err));
    TRY(o->step_out(&d->env, d->pa, d->step_value, d->last_value, NULL, NULL, st, err));
    return t->KF ? bootstrap_truncated(t, &fin, err) : MR_OK;
}

static mr_status advantages(mr_trainer *t, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    const mr_ppo_config *pc = &t->cfg.ppo;
    void *st = t->stream;
    const int64_t B = t->B;
    TRY(o->gae(t->T, t->N, d->rew, d->val, d->last_value, d->done, (float)pc->gamma, (float)pc->gae_lambda, d->adv,
               d->ret, st, err));
    /* explained variance, before PopArt moves: mean/std of R and of R - V */
    TRY(o->diff(d->ret, d->val, d->diff, B, st, err));
    TRY(o->mean_std(d->ret, B, d->partials, &d->met->ev_stats[0], st, err));
    TRY(o->mean_std(d->diff, B, d->partials, &d->met->ev_stats[2], st, err));
    if (t->cfg.policy.popart) {
        const size_t w = t->net.value_w_offset, b = t->net.value_b_offset;
        const float *returns = d->ret;
        int64_t n = B;
        if (t->reducer.sum) {   /* data-parallel: the statistics of every rank's returns */
            TRY(mr_trainer_global_stats(t, d->ret, d->pa->batch, &n, err));
            returns = NULL;     /* pa->batch holds them */
        }
        TRY(o->popart_update(d->pa, returns, n, d->partials, d->pol.params + w, d->pol.params + b,
                             t->cfg.policy.critic_hidden, d->adam_m + w, d->adam_v + w, d->adam_m + b, d->adam_v + b,
                             st, err));
    }
    if (pc->norm_adv) {
        double *partials = d->partials;
        if (t->reducer.sum) {   /* data-parallel: every rank's advantages' mean and std */
            int64_t n;
            TRY(mr_trainer_global_stats(t, d->adv, d->met->adv_stats, &n, err));
            partials = NULL;    /* adv_stats holds them */
        }
        TRY(o->normalize(d->adv, B, partials, d->met->adv_stats, st, err));
    }
    return MR_OK;
}

static mr_status optimise(mr_trainer *t, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    const mr_ppo_config *pc = &t->cfg.ppo;
    void *st = t->stream;
    const int B = t->B, M = t->M;
    mr_loop_gather_args g;
    memset(&g, 0, sizeof g);
    g.M = M;
    g.VV = t->VV;
    g.AB = t->AB;
    g.obs = d->obs; g.act = d->act; g.extra = d->extra; g.logp = d->logp; g.val = d->val; g.adv = d->adv;
    g.ret = d->ret;
    g.mb_obs = d->mb_obs; g.mb_act = d->mb_act; g.mb_extra = d->mb_extra; g.mb_logp = d->mb_logp;
    g.mb_adv = d->mb_adv; g.mb_oldv = d->mb_oldv; g.mb_target = d->mb_target;
    for (int e = 0; e < pc->epochs; e++) {
        TRY(o->copy(d->perm, t->h.perm + (size_t)e * (size_t)B, (size_t)B * sizeof(int32_t), MR_COPY_H2D, st, err));
        for (int mb = 0; mb < pc->minibatches; mb++) {
            g.idx = d->perm + (size_t)mb * (size_t)M;
            TRY(mr_trainer_update_mark(t, e, mb, 0, err));
            TRY(o->gather(&g, d->pa, st, err));
            TRY(o->opt_begin(d->opt, st, err));
            TRY(o->policy_zero_grad(&d->pol, st, err));
            TRY(mr_trainer_update_mark(t, e, mb, 1, err));
            if (e == 0 && t->reuse)   /* the rollout's acts computed it (mb_logits are theirs) */
                TRY(o->policy_forward_kept(&d->pol, M, t->obs_update, d->mb_value, st, err));
            else
                TRY(o->policy_forward(&d->pol, d->mb_obs, d->mb_extra, M, t->obs_update, d->mb_logits, d->mb_value,
                                      st, err));
            TRY(mr_trainer_update_mark(t, e, mb, 2, err));
            if (t->head.kind == MR_HEAD_GAUSS)
                TRY(o->ppo_loss_box(M, &t->head, d->mb_logits, d->mb_value, (const float *)(const void *)d->mb_act,
                                    d->mb_logp, d->mb_adv, d->mb_oldv, d->mb_target, d->loss, d->opt, d->partials,
                                    d->mb_dlogits, d->mb_dvalue, st, err));
            else if (t->head.kind == MR_HEAD_MULTI_DISCRETE)
                TRY(o->ppo_loss_md(M, &t->head, d->mb_logits, d->mb_value, d->mb_act, d->mb_logp, d->mb_adv,
                                   d->mb_oldv, d->mb_target, d->loss, d->opt, d->partials, d->mb_dlogits,
                                   d->mb_dvalue, st, err));
            else
                TRY(o->ppo_loss(M, d->mb_logits, d->mb_value, d->mb_act, d->mb_logp, d->mb_adv, d->mb_oldv,
                                d->mb_target, d->loss, d->opt, d->partials, d->mb_dlogits, d->mb_dvalue, st, err));
            TRY(mr_trainer_update_mark(t, e, mb, 3, err));
            TRY(o->policy_backward(&d->pol, d->mb_dlogits, d->mb_dvalue, M, st, err));
            if (t->reducer.average)   /* data-parallel: the ranks' average, before anyone steps */
                TRY(t->reducer.average(t->reducer.ctx, d->pol.grads, (uint64_t)t->net.n_params, st, err));
            TRY(mr_trainer_update_mark(t, e, mb, 4, err));
            TRY(o->opt_step(d->pol.params, d->pol.grads, d->adam_m, d->adam_v, &d->groups, d->partials, d->opt, st,
                            err));
            TRY(o->accumulate(d->met, d->loss, d->opt, MR_TRAINER_NGROUPS, st, err));
            TRY(mr_trainer_update_mark(t, e, mb, 5, err));
        }
    }
    return MR_OK;
}

/* The epochs' permutations into staging: Fisher-Yates keyed by
 * (seed, updates * epochs + epoch), sequential by nature, so made on the
 * host while the backend runs the rollout queued before it. With reuse the
 * first epoch keeps the rollout's order, where its activations lie (one
 * minibatch: the same sums, only their order differs). */
static void make_permutations(mr_trainer *t) {
    const int B = t->B, E = t->cfg.ppo.epochs;
    for (int e = 0; e < E; e++) {
        int32_t *perm = t->h.perm + (size_t)e * (size_t)B;
        if (e == 0 && t->reuse)
            for (int i = 0; i < B; i++) perm[i] = i;
        else
            mr_loop_permutation(t->cfg.seed, (uint32_t)(t->updates * (uint64_t)E + (uint64_t)e), perm, B);
    }
}

/* The first part: the hyper-parameters (from staging, filled before) and the rollout. */
static mr_status part_rollout(mr_trainer *t, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    TRY(o->copy(&d->opt->h, &t->h.opt->h, sizeof t->h.opt->h, MR_COPY_H2D, st, err));
    TRY(o->copy(&d->loss->h, &t->h.loss->h, sizeof t->h.loss->h, MR_COPY_H2D, st, err));
    TRY(o->memset(d->met, 0, sizeof *d->met, st, err));
    TRY(o->env_clear_logs(&d->env, st, err));
    return rollout(t, err);
}

/* The third: the epochs, the episode logs and the metrics into staging. */
static mr_status part_learn(mr_trainer *t, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    TRY(optimise(t, err));
    TRY(o->env_log_reduce(&d->env, &d->met->log, st, err));
    TRY(o->finish(d->met, d->pa, d->opt, st, err));
    return o->copy(t->h.met, d->met, sizeof *d->met, MR_COPY_D2H, st, err);
}

static mr_status (*const parts[MR_TRAINER_PARTS])(mr_trainer *, mr_error *) = {part_rollout, advantages,
                                                                                part_learn};
static const int part_end[MR_TRAINER_PARTS] = {MR_EV_ROLLOUT, MR_EV_GAE, MR_EV_END};

/* Records part i into t->graph[i]; on failure the capture is closed and
 * thrown away, nothing has run, and *why says what refused. */
static mr_status record(mr_trainer *t, int i, mr_error *why) {
    const mr_backend *o = t->be;
    TRY(o->graph_begin(t->stream, why));
    mr_status s = parts[i](t, why);
    if (s != MR_OK) {
        (void)o->graph_end(t->stream, 1, NULL, NULL);
        return s;
    }
    return o->graph_end(t->stream, 0, &t->graph[i], why);
}

/* Whether this update replays graphs: wanted (cuda.graphs), possible (the
 * backend records, no per-step profiling events), after the warm-up update
 * run operation by operation; records them when they do not exist yet. A
 * recording that fails is reported once in the description and the run
 * goes on unrecorded. */
static int graphs_ready(mr_trainer *t) {
    if (!t->cfg.cuda.graphs || t->graphs_failed || t->profile || !t->be->graph_begin || !t->warm || t->reducer.average)
        return 0;
    int have = 0;
    for (int i = 0; i < MR_TRAINER_PARTS; i++) have += t->graph[i] != NULL;
    if (have == MR_TRAINER_PARTS) return 1;
    mr_trainer_drop_graphs(t);
    mr_error why;
    mr_ok(&why);
    mr_status s = MR_OK;
    for (int i = 0; i < MR_TRAINER_PARTS && s == MR_OK; i++) s = record(t, i, &why);
    if (s == MR_OK) return 1;
    mr_trainer_drop_graphs(t);
    t->graphs_failed = 1;
    snprintf(t->graphs_why, sizeof t->graphs_why, "recording the update failed (%.150s)", why.msg);
    const size_t len = strlen(t->describe);
    snprintf(t->describe + len, sizeof t->describe - len, "; cuda.graphs: %s, queued kernel by kernel instead",
             t->graphs_why);
    return 0;
}

static mr_status enqueue_update(mr_trainer *t, double lr, double clip, double ent, mr_error *err) {
    const mr_backend *o = t->be;
    void *st = t->stream;
    fill_hyper(t, lr, clip, ent);
    t->graphs_used = graphs_ready(t);
    TRY(o->event_record(t->ev[MR_EV_START], st, err));
    for (int i = 0; i < MR_TRAINER_PARTS; i++) {
        if (i == MR_TRAINER_PARTS - 1) make_permutations(t);   /* host work while the backend runs the first two */
        TRY(t->graphs_used ? o->graph_launch(t->graph[i], st, err) : parts[i](t, err));
        TRY(o->event_record(t->ev[part_end[i]], st, err));
    }
    return MR_OK;
}

mr_status mr_trainer_update(mr_trainer *t, mr_metrics *out, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_update: trainer is NULL");
    if (t->broken) return mr_trainer_broken_msg(err);
    const double t0 = now_seconds();
    double progress = (double)t->updates / (double)mr_config_total_updates(&t->cfg);
    if (progress > 1.0) progress = 1.0;
    const double lr = mr_schedule_value(&t->hot.lr, progress);
    const double clip = mr_schedule_value(&t->hot.clip, progress);
    const double ent = mr_schedule_value(&t->hot.ent_coef, progress);
    mr_status s = t->be->enter(t->device, t->threads, err);
    if (s == MR_OK) s = enqueue_update(t, lr, clip, ent, err);
    /* the one wait of an update: its metrics are in staging */
    if (s == MR_OK) s = t->be->event_sync(t->ev[MR_EV_END], err);
    if (s != MR_OK) {
        t->broken = 1;
        if (err) {
            const size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, " (update %llu on the %s backend failed; the trainer stops)",
                     (unsigned long long)t->updates + 1, t->be->name);
        }
        return s;
    }
    mr_trainer_read_timing(t);
    t->warm = 1;
    t->updates++;
    t->grads_ready = 1;   /* the backend's grads hold a step's gradient (not a resumed run's: none) */
    t->agent_steps += (uint64_t)t->B;
    mr_metrics m;
    mr_trainer_fill_metrics(t, t->h.met, lr, clip, ent, &m);
    m.time_total = now_seconds() - t0;
    m.sps = m.time_total > 0 ? (double)t->B / m.time_total : 0.0;
    if (out) *out = m;
    if (m.nonfinite)
        return mr_fail(err, MR_ERR_NUMERIC,
                       "update %llu produced a non-finite loss or gradient; the affected optimizer steps "
                       "were skipped (try a lower ppo.lr or ppo.max_grad_norm)",
                       (unsigned long long)t->updates);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------ hot params */

mr_status mr_trainer_get_hot(const mr_trainer *t, mr_hot_params *out, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_get_hot: NULL argument");
    *out = t->hot;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_set_hot(mr_trainer *t, const mr_hot_params *in, mr_error *err) {
    if (!t || !in) return mr_fail(err, MR_ERR_ARG, "mr_trainer_set_hot: NULL argument");
    TRY(mr_hot_validate(in, err));
    t->hot = *in;
    mr_config_apply_hot(&t->cfg, in);
    mr_ok(err);
    return MR_OK;
}

/* ---------------------------------------------------- snapshot / restore */

mr_status mr_trainer_snapshot(mr_trainer *t, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_snapshot: trainer is NULL");
    TRY(mr_trainer_pull(t, MR_SYNC_LEARNABLE, err));
    const size_t P = t->net.n_params;
    memcpy(t->snap_params, t->pol.params, P * sizeof(float));
    memcpy(t->snap_m, t->adam_m, P * sizeof(float));
    memcpy(t->snap_v, t->adam_v, P * sizeof(float));
    t->snap_adam_step = t->adam_step;
    t->snap_popart = t->popart;
    t->snap_updates = t->updates;
    t->snap_agent_steps = t->agent_steps;
    t->have_snapshot = 1;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_restore(mr_trainer *t, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_restore: trainer is NULL");
    if (!t->have_snapshot)
        return mr_fail(err, MR_ERR_STATE, "mr_trainer_restore: no snapshot was taken (call mr_trainer_snapshot first)");
    const size_t P = t->net.n_params;
    memcpy(t->pol.params, t->snap_params, P * sizeof(float));
    memcpy(t->adam_m, t->snap_m, P * sizeof(float));
    memcpy(t->adam_v, t->snap_v, P * sizeof(float));
    t->adam_step = t->snap_adam_step;
    t->popart = t->snap_popart;
    t->updates = t->snap_updates;
    t->agent_steps = t->snap_agent_steps;
    return mr_trainer_push(t, MR_SYNC_LEARNABLE, err);
}

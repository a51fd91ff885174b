/*
 * trainer.c - one PPO update on the CPU backend: rollout, GAE, PPO epochs.
 *
 * The trainer owns every buffer, laid out once in one arena (arena.h) at
 * creation, so an update allocates nothing. Randomness is counter-based
 * (rng.h), keyed by (seed, env, tick, purpose): a run is reproducible, does
 * not depend on the thread count, and a checkpointed run resumes bit for bit.
 *
 * Data flow of an update (T rollout steps, N envs, B = T*N samples):
 *   rollout: obs[t] <- env; policy_act -> logits, value; sample -> act, logp;
 *            env step -> rew[t], done[t]
 *   GAE over (T,N) with denormalised values -> adv, ret; PopArt update;
 *   epochs x minibatches: gather, forward, PPO loss, backward, per-group
 *   gradient clipping, Adam.
 */
#include "trainer.h"
#include "trainer_cuda.h"
#include "errors.h"
#include "rng.h"
#include "nn.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NUM_ACTIONS 8
/* Policy-act / training chunk: samples processed together by the network. */
#define POLICY_CHUNK 32

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t mr_trainer_total_updates(const mr_trainer *t) {
    uint64_t per = (uint64_t)t->T * (uint64_t)t->N;
    uint64_t n = (t->hot.total_steps + per - 1) / per;
    return n ? n : 1;
}

void mr_trainer_use_threads(const mr_trainer *t) {
    omp_set_num_threads(t->threads);
}

void mr_trainer_counts_extra(const mr_forage *env, float *extra) {
    /* (count - mid) / half: ENV_SPEC's (count - 160) / 96 for densities [64, 256]. */
    float mid = 0.5f * (float)(env->dmin + env->dmax);
    float half = 0.5f * (float)(env->dmax - env->dmin);
    if (half < 1.0f) half = 1.0f;
    for (int i = 0; i < env->n; i++) {
        extra[2 * i + 0] = ((float)env->food_count[i] - mid) / half;
        extra[2 * i + 1] = ((float)env->poison_count[i] - mid) / half;
    }
}

/* Lays out every buffer; run once on a planning arena, once on the real one. */
static void trainer_layout(mr_trainer *t, mr_arena *a) {
    const mr_config *c = &t->cfg;
    int N = t->N, VV = t->VV, B = t->B, M = t->M;
    mr_forage_layout(&t->env, &c->env, c->seed, a);
    mr_policy_layout(&t->pol, &c->policy, 2 * c->env.view_range + 1, M, POLICY_CHUNK, a);
    size_t P = t->pol.n_params;
    t->adam_m = MR_TAKE(a, float, P);
    t->adam_v = MR_TAKE(a, float, P);
    t->snap_params = MR_TAKE(a, float, P);
    t->snap_m = MR_TAKE(a, float, P);
    t->snap_v = MR_TAKE(a, float, P);

    t->obs = MR_TAKE(a, uint8_t, (size_t)B * VV);
    t->extra = MR_TAKE(a, float, (size_t)B * 2);
    t->act = MR_TAKE(a, uint8_t, B);
    t->logp = MR_TAKE(a, float, B);
    t->val = MR_TAKE(a, float, B);
    t->rew = MR_TAKE(a, float, B);
    t->done = MR_TAKE(a, uint8_t, B);
    t->adv = MR_TAKE(a, float, B);
    t->ret = MR_TAKE(a, float, B);
    t->last_value = MR_TAKE(a, float, N);

    t->step_logits = MR_TAKE(a, float, (size_t)N * NUM_ACTIONS);
    t->step_value = MR_TAKE(a, float, N);
    t->step_u = MR_TAKE(a, float, N);
    t->step_extra = MR_TAKE(a, float, (size_t)N * 2);
    t->log_sum = MR_TAKE(a, mr_forage_log, 1);

    t->perm = MR_TAKE(a, int32_t, B);
    t->mb_obs = MR_TAKE(a, uint8_t, (size_t)M * VV);
    t->mb_act = MR_TAKE(a, uint8_t, M);
    t->mb_extra = MR_TAKE(a, float, (size_t)M * 2);
    t->mb_logp = MR_TAKE(a, float, M);
    t->mb_adv = MR_TAKE(a, float, M);
    t->mb_oldv = MR_TAKE(a, float, M);
    t->mb_target = MR_TAKE(a, float, M);
    t->mb_logits = MR_TAKE(a, float, (size_t)M * NUM_ACTIONS);
    t->mb_value = MR_TAKE(a, float, M);
    t->mb_dlogits = MR_TAKE(a, float, (size_t)M * NUM_ACTIONS);
    t->mb_dvalue = MR_TAKE(a, float, M);
}

mr_status mr_trainer_update_status(const mr_trainer *t, int nonfinite, mr_error *err) {
    if (nonfinite)
        return mr_fail(err, MR_ERR_NUMERIC,
                       "update %llu produced a non-finite loss or gradient; the affected optimizer steps "
                       "were skipped (try a lower ppo.lr or ppo.max_grad_norm)",
                       (unsigned long long)t->updates);
    mr_ok(err);
    return MR_OK;
}

void mr_trainer_episode_metrics(const mr_trainer *t, const mr_forage_log *l, mr_metrics *out) {
    out->update = t->updates;
    out->agent_steps = t->agent_steps;
    const double pr = (double)t->updates / (double)mr_trainer_total_updates(t);
    out->progress = pr > 1.0 ? 1.0 : pr;
    out->episodes = l->episodes;
    out->deaths = l->deaths;
    if (l->episodes > 0) {
        const double ne = l->episodes;
        out->episode_return_mean = l->return_sum / ne;
        out->episode_return_min = l->return_min;
        out->episode_return_max = l->return_max;
        out->episode_length_mean = l->length_sum / ne;
        out->food_per_episode = l->food / ne;
        out->poison_per_episode = l->poison / ne;
    }
    out->efficiency = (l->food + l->poison) > 0 ? (double)l->food / (double)(l->food + l->poison) : 0.0;
}

void mr_trainer_fields(mr_trainer *t, const mr_config *cfg) {
    t->cfg = *cfg;
    t->hot.lr = cfg->ppo.lr;
    t->hot.clip = cfg->ppo.clip;
    t->hot.ent_coef = cfg->ppo.ent_coef;
    t->hot.max_grad_norm = cfg->ppo.max_grad_norm;
    t->hot.vf_coef = cfg->ppo.vf_coef;
    t->hot.ent_floor = cfg->ppo.ent_floor;
    t->hot.ent_floor_coef = cfg->ppo.ent_floor_coef;
    t->hot.total_steps = cfg->total_steps;
    t->T = cfg->ppo.rollout_steps;
    t->N = cfg->env.num_envs;
    const int V = 2 * cfg->env.view_range + 1;
    t->VV = V * V;
    t->B = t->T * t->N;
    t->M = t->B / cfg->ppo.minibatches;
    t->proxy_obs = cfg->env.mode != MR_MODE_GROUND_TRUTH;
    const int n = cfg->threads > 0 ? cfg->threads : omp_get_num_procs();
    t->threads = n < 1 ? 1 : n;
}

/* The cpu backend's settings; auto_note says why device = auto came here. */
static mr_status resolve_device(mr_trainer *t, const char *auto_note, mr_error *err) {
    const mr_config *c = &t->cfg;
    if (c->precision != MR_FP32)
        return mr_fail(err, MR_ERR_ARG,
                       "precision = %s needs the cuda backend; the cpu backend accepts fp32 only",
                       c->precision == MR_BF16 ? "bf16" : "fp16");
    const char *forced = getenv("OPENBLAS_CORETYPE"), *chosen = getenv("MOONRL_BLAS_AUTO");
    const int by_us = forced && chosen && strcmp(forced, chosen) == 0;
    snprintf(t->describe, sizeof t->describe,
             "cpu backend, %d thread%s, OpenBLAS (OpenMP, %s kernels%s%s%s)%s; cuda.* settings do not apply on the cpu",
             t->threads, t->threads == 1 ? "" : "s", mr_blas_kernels(),
             forced ? ", as OPENBLAS_CORETYPE=" : "", forced ? forced : "",
             by_us ? " set by moonrl for this AVX-512 CPU; MOONRL_BLAS_AUTO=0 keeps OpenBLAS's choice" : "",
             auto_note);
    return MR_OK;
}

mr_status mr_trainer_create(const mr_config *cfg, mr_trainer **out, mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_create: out is NULL");
    *out = NULL;
    mr_status s = mr_config_validate(cfg, err);
    if (s) return s;
    /* CUDA dispatch: device = cuda, or auto with a usable GPU, runs the CUDA
     * trainer (trainer_cuda.c); auto falls back to the cpu, saying why. */
    char auto_note[320] = "";
    if (cfg->device == MR_DEVICE_CUDA) return mr_trainer_cuda_create(cfg, out, err);
    if (cfg->device == MR_DEVICE_AUTO) {
        if (mr_cuda_device_count() <= 0) {
            snprintf(auto_note, sizeof auto_note, " (device = auto: no usable GPU, using the cpu)");
        } else {
            mr_error ce;
            if ((s = mr_trainer_cuda_create(cfg, out, &ce)) == MR_OK) { mr_ok(err); return MR_OK; }
            snprintf(auto_note, sizeof auto_note, " (device = auto: the CUDA trainer did not start, using the cpu: %.240s)",
                     ce.msg);
        }
    }
    mr_trainer *t = calloc(1, sizeof *t);
    if (!t) return mr_fail(err, MR_ERR_NOMEM, "out of host memory creating the trainer (%zu bytes)", sizeof *t);
    mr_trainer_fields(t, cfg);
    if ((s = resolve_device(t, auto_note, err))) { free(t); return s; }

    mr_trainer_use_threads(t);                    /* the policy sizes per-thread workspaces */
    trainer_layout(t, &t->arena);                 /* plan */
    if (mr_arena_commit(&t->arena) != 0) {
        size_t want = t->arena.size;
        free(t);
        return mr_fail(err, MR_ERR_NOMEM,
                       "out of host memory: the trainer needs %.1f MiB (num_envs %d x rollout_steps %d); "
                       "reduce env.num_envs, ppo.rollout_steps or raise ppo.minibatches",
                       (double)want / 1048576.0, cfg->env.num_envs, cfg->ppo.rollout_steps);
    }
    trainer_layout(t, &t->arena);                 /* carve */

    t->env.energy_frozen = cfg->env.mode == MR_MODE_PROXY;
    t->env.reward_clip = (float)cfg->ppo.reward_clip;
    t->env.threads = t->threads;
    mr_trainer_use_threads(t);
    mr_policy_init(&t->pol, cfg->seed);
    mr_popart_init(&t->popart);
    mr_forage_cpu_reset_all(&t->env);
    mr_forage_cpu_clear_logs(&t->env);
    *out = t;
    mr_ok(err);
    return MR_OK;
}

void mr_trainer_free(mr_trainer *t) {
    if (!t) return;
    if (t->cuda) { mr_trainer_cuda_free(t); return; }   /* CUDA dispatch */
    mr_arena_release(&t->arena);
    free(t);
}

int mr_trainer_done(const mr_trainer *t) {
    return t ? t->agent_steps >= t->hot.total_steps : 1;
}

const mr_config *mr_trainer_config(const mr_trainer *t) { return t ? &t->cfg : NULL; }
const char *mr_trainer_describe(const mr_trainer *t) { return t ? t->describe : ""; }

/* ------------------------------------------------------------------ rollout */

static void rollout(mr_trainer *t) {
    mr_forage *env = &t->env;
    const int N = t->N, VV = t->VV;
    const float pm = (float)t->popart.mean, ps = (float)t->popart.std;
    double t_inf = 0.0, t_env = 0.0;
    for (int step = 0; step < t->T; step++) {
        const double ta = now_seconds();
        size_t off = (size_t)step * N;
        uint8_t *obs = t->obs + off * VV;
        float *extra = t->extra + off * 2;
        memcpy(obs, env->obs, (size_t)N * VV);
        mr_trainer_counts_extra(env, extra);
        mr_policy_act(&t->pol, obs, extra, N, t->proxy_obs, t->step_logits, t->step_value);
        for (int i = 0; i < N; i++)
            t->step_u[i] = mr_rng_uniform(t->cfg.seed, (uint32_t)i, env->tick[i], MR_RNG_ACTION, 0);
        mr_sample_actions(N, t->step_logits, t->step_u, t->act + off, t->logp + off);
        const double tb = now_seconds();
        t_inf += tb - ta;
        float *val = t->val + off;
        for (int i = 0; i < N; i++) val[i] = pm + ps * t->step_value[i];
        mr_forage_cpu_step_all(env, t->act + off);
        memcpy(t->rew + off, env->reward, sizeof(float) * N);
        uint8_t *done = t->done + off;
        for (int i = 0; i < N; i++) done[i] = env->terminated[i] | env->truncated[i];
        t_env += now_seconds() - tb;
    }
    /* Bootstrap value of the state after the last step. */
    const double ta = now_seconds();
    mr_trainer_counts_extra(env, t->step_extra);
    mr_policy_act(&t->pol, env->obs, t->step_extra, N, t->proxy_obs, t->step_logits, t->step_value);
    for (int i = 0; i < N; i++) t->last_value[i] = pm + ps * t->step_value[i];
    t->time_inference = t_inf + (now_seconds() - ta);
    t->time_env = t_env;
}

/* ------------------------------------------------------------------ update */

static void shuffle(mr_trainer *t, uint32_t key) {
    int B = t->B;
    for (int i = 0; i < B; i++) t->perm[i] = i;
    for (int i = B - 1; i > 0; i--) {
        uint32_t j = mr_rng_below(t->cfg.seed, 0, key, MR_RNG_SHUFFLE, (uint32_t)i, (uint32_t)i + 1);
        int32_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
}

static void gather(mr_trainer *t, const int32_t *idx, float inv_std, float mean) {
    const int M = t->M, VV = t->VV;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < M; k++) {
        int s = idx[k];
        memcpy(t->mb_obs + (size_t)k * VV, t->obs + (size_t)s * VV, VV);
        t->mb_extra[2 * k] = t->extra[2 * s];
        t->mb_extra[2 * k + 1] = t->extra[2 * s + 1];
        t->mb_act[k] = t->act[s];
        t->mb_logp[k] = t->logp[s];
        t->mb_adv[k] = t->adv[s];
        /* Old values and targets in the current PopArt-normalised space. */
        t->mb_oldv[k] = (t->val[s] - mean) * inv_std;
        t->mb_target[k] = (t->ret[s] - mean) * inv_std;
    }
}

typedef struct update_stats {
    double policy_loss, value_loss, entropy, approx_kl, clip_fraction;
    double gnorm_p, gnorm_v, gnorm;
    int nonfinite;
} update_stats;

static void optimise(mr_trainer *t, double lr, double clip, double ent_coef, update_stats *us) {
    mr_policy *p = &t->pol;
    const size_t P = p->n_params, Pp = p->n_policy;
    const float mean = (float)t->popart.mean, inv_std = (float)(1.0 / t->popart.std);
    mr_ppo_coefs co = {0};
    co.clip = clip;
    co.ent_coef = ent_coef;
    co.vf_coef = t->hot.vf_coef;
    co.ent_floor = t->hot.ent_floor;
    co.ent_floor_coef = t->hot.ent_floor_coef;
    /* ENV_SPEC: value_loss = max(mse(v, R), mse(v_clipped, R)), the larger of
     * the two batch means, as the original project computes it. */
    co.value_max_of_means = 1;
    const double maxn = t->hot.max_grad_norm;
    const mr_ppo_config *pc = &t->cfg.ppo;
    int steps = 0;
    memset(us, 0, sizeof *us);
    for (int e = 0; e < pc->epochs; e++) {
        shuffle(t, (uint32_t)(t->updates * (uint64_t)pc->epochs + (uint64_t)e));
        for (int mb = 0; mb < pc->minibatches; mb++) {
            gather(t, t->perm + (size_t)mb * t->M, inv_std, mean);
            mr_policy_zero_grad(p);
            mr_policy_forward(p, t->mb_obs, t->mb_extra, t->M, t->proxy_obs, t->mb_logits, t->mb_value);
            mr_ppo_stats st;
            mr_ppo_loss(t->M, t->mb_logits, t->mb_value, t->mb_act, t->mb_logp, t->mb_adv, t->mb_oldv,
                        t->mb_target, &co, t->mb_dlogits, t->mb_dvalue, &st);
            mr_policy_backward(p, t->mb_dlogits, t->mb_dvalue, t->M);
            double gp = mr_grad_norm(p->grads, Pp);
            double gv = mr_grad_norm(p->grads + Pp, P - Pp);
            if (!isfinite(gp) || !isfinite(gv) || !isfinite(st.loss)) { us->nonfinite = 1; continue; }
            t->adam_step++;
            mr_adam_step(p->params, p->grads, t->adam_m, t->adam_v, Pp, lr, pc->adam_beta1, pc->adam_beta2,
                         pc->adam_eps, mr_clip_factor(gp, maxn), t->adam_step);
            mr_adam_step(p->params + Pp, p->grads + Pp, t->adam_m + Pp, t->adam_v + Pp, P - Pp, lr,
                         pc->adam_beta1, pc->adam_beta2, pc->adam_eps, mr_clip_factor(gv, maxn), t->adam_step);
            us->policy_loss += st.policy_loss;
            us->value_loss += st.value_loss;
            us->entropy += st.entropy;
            us->approx_kl += st.approx_kl;
            us->clip_fraction += st.clip_fraction;
            us->gnorm_p += gp;
            us->gnorm_v += gv;
            us->gnorm += sqrt(gp * gp + gv * gv);
            steps++;
        }
    }
    if (steps) {
        double k = 1.0 / steps;
        us->policy_loss *= k; us->value_loss *= k; us->entropy *= k; us->approx_kl *= k;
        us->clip_fraction *= k; us->gnorm_p *= k; us->gnorm_v *= k; us->gnorm *= k;
    }
}

mr_status mr_trainer_update(mr_trainer *t, mr_metrics *out, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_update: trainer is NULL");
    if (t->cuda) return mr_trainer_cuda_update(t, out, err);   /* CUDA dispatch */
    mr_trainer_use_threads(t);
    const mr_ppo_config *pc = &t->cfg.ppo;
    double t0 = now_seconds();
    double progress = (double)t->updates / (double)mr_trainer_total_updates(t);
    if (progress > 1.0) progress = 1.0;
    double lr = mr_schedule_value(&t->hot.lr, progress);
    double clip = mr_schedule_value(&t->hot.clip, progress);
    double ent = mr_schedule_value(&t->hot.ent_coef, progress);

    mr_forage_cpu_clear_logs(&t->env);
    rollout(t);
    double t1 = now_seconds();

    mr_gae(t->T, t->N, t->rew, t->val, t->last_value, t->done, (float)pc->gamma, (float)pc->gae_lambda,
           t->adv, t->ret);
    double ev = mr_explained_variance(t->val, t->ret, (size_t)t->B);
    if (t->cfg.policy.popart) {
        const mr_policy *p = &t->pol;
        int k = t->cfg.policy.critic_hidden;
        mr_popart_update(&t->popart, t->ret, (size_t)t->B, t->cfg.policy.popart_beta_min,
                         p->params + p->value_w_offset, p->params + p->value_b_offset, k,
                         t->adam_m + p->value_w_offset, t->adam_v + p->value_w_offset,
                         t->adam_m + p->value_b_offset, t->adam_v + p->value_b_offset);
    }
    if (pc->norm_adv) {
        double m, sd;
        mr_normalize(t->adv, (size_t)t->B, &m, &sd);
    }
    double t2 = now_seconds();

    update_stats us;
    optimise(t, lr, clip, ent, &us);
    double t3 = now_seconds();

    t->updates++;
    t->agent_steps += (uint64_t)t->B;

    if (out) {
        memset(out, 0, sizeof *out);
        mr_forage_log_reduce(t->env.log, t->N, t->log_sum);
        mr_trainer_episode_metrics(t, t->log_sum, out);
        out->policy_loss = us.policy_loss;
        out->value_loss = us.value_loss;
        out->entropy = us.entropy;
        out->approx_kl = us.approx_kl;
        out->clip_fraction = us.clip_fraction;
        out->explained_variance = ev;
        out->grad_norm_policy = us.gnorm_p;
        out->grad_norm_value = us.gnorm_v;
        out->grad_norm = us.gnorm;
        out->lr = lr;
        out->clip = clip;
        out->ent_coef = ent;
        out->popart_mean = t->popart.mean;
        out->popart_std = t->popart.std;
        out->loss_scale = 1.0;
        out->nonfinite = us.nonfinite;
        out->time_rollout = t1 - t0;
        out->time_env = t->time_env;
        out->time_inference = t->time_inference;
        out->time_gae = t2 - t1;
        out->time_update = t3 - t2;
        out->time_total = now_seconds() - t0;
        out->sps = out->time_total > 0 ? (double)t->B / out->time_total : 0.0;
        out->memory_planned_bytes = t->arena.size;
        out->memory_peak_bytes = t->arena.size;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        out->memory_limit_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    }
    return mr_trainer_update_status(t, us.nonfinite, err);
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
    mr_status s = mr_hot_validate(in, err);
    if (s) return s;
    t->hot = *in;
    mr_ok(err);
    return MR_OK;
}

/* ---------------------------------------------------- snapshot / restore */

mr_status mr_trainer_snapshot(mr_trainer *t, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_snapshot: trainer is NULL");
    mr_status s;
    if (t->cuda && (s = mr_trainer_cuda_pull(t, MR_TC_LEARNABLE, err))) return s;   /* CUDA dispatch */
    size_t P = t->pol.n_params;
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
    size_t P = t->pol.n_params;
    memcpy(t->pol.params, t->snap_params, P * sizeof(float));
    memcpy(t->adam_m, t->snap_m, P * sizeof(float));
    memcpy(t->adam_v, t->snap_v, P * sizeof(float));
    t->adam_step = t->snap_adam_step;
    t->popart = t->snap_popart;
    t->updates = t->snap_updates;
    t->agent_steps = t->snap_agent_steps;
    if (t->cuda) return mr_trainer_cuda_push(t, MR_TC_LEARNABLE, err);   /* CUDA dispatch */
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------------ memory */

mr_status mr_config_device_bytes(const mr_config *cfg, uint64_t *bytes, mr_error *err) {
    if (!cfg || !bytes) return mr_fail(err, MR_ERR_ARG, "mr_config_device_bytes: NULL argument");
    mr_tc_plan plan;
    mr_status s = mr_trainer_cuda_plan(cfg, &plan, err);
    *bytes = s == MR_OK ? (uint64_t)plan.device_bytes : 0;
    return s;
}

#define FIT_STEP 64
#define FIT_MAX 1048576

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

mr_status mr_config_fit_num_envs(const mr_config *cfg, uint64_t budget, int *num_envs, mr_error *err) {
    if (!cfg || !num_envs) return mr_fail(err, MR_ERR_ARG, "mr_config_fit_num_envs: NULL argument");
    mr_config c = *cfg;
    const int64_t T = c.ppo.rollout_steps > 0 ? c.ppo.rollout_steps : 1, K = c.ppo.minibatches > 0 ? c.ppo.minibatches : 1;
    /* the candidates: multiples of 64 whose batch (n x T) splits into K minibatches */
    const int64_t step = FIT_STEP * (K / gcd64(FIT_STEP * T, K));
    c.env.num_envs = (int)(step <= FIT_MAX ? step : FIT_MAX);
    uint64_t b = 0;
    mr_status s = mr_config_device_bytes(&c, &b, err);
    if (s != MR_OK) return s;
    if (step > FIT_MAX || b > budget)
        return mr_fail(err, MR_ERR_NOMEM,
                       "not even %lld environments fit in %.2f GiB (they need %.2f GiB with these "
                       "network and PPO shapes); accepted: a smaller network, rollout or fewer minibatch samples, "
                       "a larger cuda.memory_fraction, or a number for env.num_envs",
                       (long long)step, (double)budget / 1073741824.0, (double)b / 1073741824.0);
    /* device bytes grow with num_envs: bisect over the candidates; a size
     * the plan refuses (a buffer past the kernels' 32-bit indexing) does not
     * fit either */
    int64_t lo = 1, hi = FIT_MAX / step;   /* lo * step fits, (hi + 1) * step does not or is too many */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        c.env.num_envs = (int)(mid * step);
        if (mr_config_device_bytes(&c, &b, NULL) == MR_OK && b <= budget) lo = mid;
        else hi = mid - 1;
    }
    *num_envs = (int)(lo * step);
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_set_profile(mr_trainer *t, int on, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_set_profile: trainer is NULL");
    if (t->cuda) return mr_trainer_cuda_set_profile(t, on, err);   /* CUDA dispatch */
    mr_ok(err);   /* the cpu backend always splits its rollout's time */
    return MR_OK;
}

mr_status mr_trainer_memory(const mr_trainer *t, mr_memory_stats *out, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_memory: NULL argument");
    if (t->cuda) return mr_trainer_cuda_memory(t, out, err);   /* CUDA dispatch */
    memset(out, 0, sizeof *out);
    out->host_planned_bytes = t->arena.size;
    out->host_peak_bytes = t->arena.size;
    out->host_allocations = t->arena.allocations + t->extra_allocations;
    mr_ok(err);
    return MR_OK;
}

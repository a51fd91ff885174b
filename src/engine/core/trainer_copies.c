/*
 * trainer_copies.c - the trainer's host copies and the backend state, moved
 * into each other synchronously (checkpoints, snapshots, evaluation,
 * inference), and the accessors tests and benchmarks read the backend
 * through. On the cpu backend a copy is a memcpy; nothing here knows which
 * backend runs.
 */
#include "trainer.h"
#include "errors.h"
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

mr_status mr_trainer_broken_msg(mr_error *err) {
    return mr_fail(err, MR_ERR_STATE, "the trainer stopped after a failed update (its backend state is not "
                   "trustworthy); create it again, or load a checkpoint into it");
}

/* The recorded update graphs hold the backend state's pointers and values
 * of their recording: dropped whenever that state is replaced (recorded
 * again at the next update). Here so that trainer.c calls this file and
 * never the other way round. */
void mr_trainer_drop_graphs(mr_trainer *t) {
    for (int i = 0; i < MR_TRAINER_PARTS; i++)
        if (t->graph[i]) {
            t->be->graph_destroy(t->graph[i]);
            t->graph[i] = NULL;
        }
}

mr_status mr_trainer_pull(mr_trainer *t, int what, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_pull: trainer is NULL");
    /* A failed update stopped somewhere inside: its weights, moments and
     * environments are a state no run reached, not to be saved or used. */
    if (t->broken) return mr_trainer_broken_msg(err);
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const size_t P = t->net.n_params;
    TRY(o->enter(t->device, t->threads, err));
    TRY(o->copy(t->pol.params, d->pol.params, P * sizeof(float), MR_COPY_D2H, st, err));
    TRY(o->copy(t->h.pa, d->pa, sizeof *t->h.pa, MR_COPY_D2H, st, err));
    if (what >= MR_SYNC_LEARNABLE) {
        TRY(o->copy(t->adam_m, d->adam_m, P * sizeof(float), MR_COPY_D2H, st, err));
        TRY(o->copy(t->adam_v, d->adam_v, P * sizeof(float), MR_COPY_D2H, st, err));
        TRY(o->copy(t->h.opt, d->opt, sizeof *t->h.opt, MR_COPY_D2H, st, err));
    }
    if (what >= MR_SYNC_ALL) TRY(o->copy((void *)mr_env_state_base(&t->env), d->env_block, t->plan.env_bytes, MR_COPY_D2H, st, err));
    TRY(o->stream_sync(st, err));
    mr_popart_ctl_get(t->h.pa, &t->popart);
    if (what >= MR_SYNC_LEARNABLE) t->adam_step = t->h.opt->s.step;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_push(mr_trainer *t, int what, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_push: trainer is NULL");
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const size_t P = t->net.n_params;
    /* A push that stops partway leaves a mix of the host copies and the old
     * backend state: broken until a whole push (a checkpoint load) succeeds.
     * A partial push that succeeds leaves the flag as it was. */
    const int was_broken = t->broken;
    t->broken = 1;
    mr_trainer_drop_graphs(t);   /* recorded with the old seed by value: recorded again at the next update */
    TRY(o->enter(t->device, t->threads, err));
    TRY(o->copy(d->pol.params, t->pol.params, P * sizeof(float), MR_COPY_H2D, st, err));
    /* PopArt's statistics; the rest of its block (beta_min, the last batch) stays */
    TRY(o->copy(t->h.pa, d->pa, sizeof *t->h.pa, MR_COPY_D2H, st, err));
    TRY(o->stream_sync(st, err));
    t->h.pa->mean = t->popart.mean;
    t->h.pa->std = t->popart.std;
    t->h.pa->count = t->popart.count;
    t->h.pa->beta_min = t->cfg.policy.popart_beta_min;
    TRY(o->copy(d->pa, t->h.pa, sizeof *t->h.pa, MR_COPY_H2D, st, err));
    if (what >= MR_SYNC_LEARNABLE) {
        TRY(o->copy(d->adam_m, t->adam_m, P * sizeof(float), MR_COPY_H2D, st, err));
        TRY(o->copy(d->adam_v, t->adam_v, P * sizeof(float), MR_COPY_H2D, st, err));
        /* The Adam step count lives in the optimizer's state; the rest of it
         * (loss scale, growth tracker, skipped count) stays as it is. */
        TRY(o->copy(t->h.opt, d->opt, sizeof *t->h.opt, MR_COPY_D2H, st, err));
        TRY(o->stream_sync(st, err));
        t->h.opt->s.step = t->adam_step;
        TRY(o->copy(d->opt, t->h.opt, sizeof *t->h.opt, MR_COPY_H2D, st, err));
    }
    if (what >= MR_SYNC_ALL) {
        TRY(o->copy(d->env_block, mr_env_state_base(&t->env), t->plan.env_bytes, MR_COPY_H2D, st, err));
        d->env.seed = t->env.seed;   /* a load adopts the checkpoint's seed (kernels take the struct by value) */
    }
    TRY(o->stream_sync(st, err));
    t->broken = what >= MR_SYNC_ALL ? 0 : was_broken;   /* all of it the host copies' again */
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------ kept state */

mr_status mr_trainer_keep(mr_trainer *t, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_keep: trainer is NULL");
    if (t->broken) return mr_trainer_broken_msg(err);
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const size_t P = t->net.n_params;
    TRY(o->enter(t->device, t->threads, err));
    if (!t->keep_block) {
        const size_t bytes = mr_arena_round(sizeof(mr_optctl)) + mr_arena_round(sizeof(mr_popart_ctl)) +
                             mr_arena_round(P * sizeof(float)) + mr_arena_round(2 * P * sizeof(float));
        void *p;
        TRY(mr_trainer_oom_hint(t, mr_devmem_alloc(&t->mem, bytes, "the kept state (mr_trainer_keep)", &p, err),
                                err));
        mr_arena a = {(unsigned char *)p, bytes, 0, 0};
        t->keep_opt = MR_TAKE(&a, mr_optctl, 1);
        t->keep_pa = MR_TAKE(&a, mr_popart_ctl, 1);
        t->keep_params = MR_TAKE(&a, float, P);
        t->keep_adam = MR_TAKE(&a, float, 2 * P);
        t->keep_block = p;
    }
    /* d->adam_m and d->adam_v are one block (m then v) */
    TRY(o->copy(t->keep_params, d->pol.params, P * sizeof(float), MR_COPY_D2D, st, err));
    TRY(o->copy(t->keep_adam, d->adam_m, 2 * P * sizeof(float), MR_COPY_D2D, st, err));
    TRY(o->copy(t->keep_opt, d->opt, sizeof *d->opt, MR_COPY_D2D, st, err));
    TRY(o->copy(t->keep_pa, d->pa, sizeof *d->pa, MR_COPY_D2D, st, err));
    t->keep_updates = t->updates;
    t->keep_agent_steps = t->agent_steps;
    t->have_keep = 1;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_restore_kept(mr_trainer *t, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_restore_kept: trainer is NULL");
    if (!t->have_keep)
        return mr_fail(err, MR_ERR_STATE, "mr_trainer_restore_kept: no state was kept (call mr_trainer_keep first)");
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const size_t P = t->net.n_params;
    /* as a push: stopping partway leaves a mix, broken until a load */
    const int was_broken = t->broken;
    t->broken = 1;
    mr_trainer_drop_graphs(t);
    TRY(o->enter(t->device, t->threads, err));
    TRY(o->copy(d->pol.params, t->keep_params, P * sizeof(float), MR_COPY_D2D, st, err));
    TRY(o->copy(d->adam_m, t->keep_adam, 2 * P * sizeof(float), MR_COPY_D2D, st, err));
    /* Of the control blocks, the Adam step and PopArt's statistics come back
     * (as mr_trainer_restore); the rest of each stays as it is. Through staging. */
    TRY(o->copy(t->h.opt, t->keep_opt, sizeof *t->h.opt, MR_COPY_D2H, st, err));
    TRY(o->copy(t->h.pa, t->keep_pa, sizeof *t->h.pa, MR_COPY_D2H, st, err));
    TRY(o->stream_sync(st, err));
    const int64_t step = t->h.opt->s.step;
    const mr_popart_ctl kept_pa = *t->h.pa;
    TRY(o->copy(t->h.opt, d->opt, sizeof *t->h.opt, MR_COPY_D2H, st, err));
    TRY(o->copy(t->h.pa, d->pa, sizeof *t->h.pa, MR_COPY_D2H, st, err));
    TRY(o->stream_sync(st, err));
    t->h.opt->s.step = step;
    t->h.pa->mean = kept_pa.mean;
    t->h.pa->std = kept_pa.std;
    t->h.pa->count = kept_pa.count;
    TRY(o->copy(d->opt, t->h.opt, sizeof *t->h.opt, MR_COPY_H2D, st, err));
    TRY(o->copy(d->pa, t->h.pa, sizeof *t->h.pa, MR_COPY_H2D, st, err));
    TRY(o->stream_sync(st, err));
    t->updates = t->keep_updates;
    t->agent_steps = t->keep_agent_steps;
    t->broken = was_broken;
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------- tests, benchmarks */

mr_status mr_trainer_debug_poison(mr_trainer *t, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_debug_poison: trainer is NULL");
    TRY(mr_trainer_pull(t, MR_SYNC_WEIGHTS, err));
    t->pol.params[t->net.value_b_offset] = NAN;
    return mr_trainer_push(t, MR_SYNC_WEIGHTS, err);
}

mr_status mr_trainer_read_rollout(mr_trainer *t, mr_rollout_view *v, mr_error *err) {
    if (!t || !v) return mr_fail(err, MR_ERR_ARG, "mr_trainer_read_rollout: NULL argument");
    const mr_backend *o = t->be;
    const mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const size_t B = (size_t)t->B;
    struct { void *dst; const void *src; size_t bytes; } cp[] = {
        {v->obs, d->obs, B * (size_t)t->VV}, {v->act, d->act, B * (size_t)t->AB}, {v->done, d->done, B},
        {v->extra, d->extra, B * 2 * sizeof(float)}, {v->logp, d->logp, B * sizeof(float)},
        {v->val, d->val, B * sizeof(float)}, {v->rew, d->rew, B * sizeof(float)},
        {v->adv, d->adv, B * sizeof(float)}, {v->ret, d->ret, B * sizeof(float)},
        {v->last_value, d->last_value, (size_t)t->N * sizeof(float)},
    };
    TRY(o->enter(t->device, t->threads, err));
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        if (cp[i].dst) TRY(o->copy(cp[i].dst, cp[i].src, cp[i].bytes, MR_COPY_D2H, st, err));
    return o->stream_sync(st, err);
}

int mr_trainer_graphs_used(const mr_trainer *t, const char **why_not) {
    if (!t) {
        if (why_not) *why_not = "no trainer";
        return 0;
    }
    if (why_not) *why_not = t->graphs_why;
    return t->graphs_used;
}

mr_status mr_trainer_set_loss_scale(mr_trainer *t, float scale, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_set_loss_scale: trainer is NULL");
    if (!(scale > 0.0f) || !isfinite(scale))
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_set_loss_scale: scale = %g: accepted a positive finite number",
                       (double)scale);
    const mr_backend *o = t->be;
    TRY(o->enter(t->device, t->threads, err));
    TRY(o->copy(t->h.opt, t->d.opt, sizeof *t->h.opt, MR_COPY_D2H, t->stream, err));
    TRY(o->stream_sync(t->stream, err));
    t->h.opt->s.loss_scale = scale;
    t->h.opt->s.growth_tracker = 0;
    TRY(o->copy(t->d.opt, t->h.opt, sizeof *t->h.opt, MR_COPY_H2D, t->stream, err));
    return o->stream_sync(t->stream, err);
}

/* ------------------------------------------------ parameters, for export */

static mr_status layout_tensor(const mr_net_layout *net, int i, mr_tensor *out, mr_error *err) {
    if (i < 0 || i >= net->n_tensors)
        return mr_fail(err, MR_ERR_ARG, "tensor i = %d: accepted 0 .. %d", i, net->n_tensors - 1);
    const mr_tensor_info *ti = &net->tensors[i];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", ti->name);
    out->ndim = ti->ndim;
    for (int k = 0; k < 4; k++) out->shape[k] = ti->shape[k];
    out->offset = ti->offset;
    out->count = ti->count;
    mr_ok(err);
    return MR_OK;
}

int mr_trainer_tensor_count(const mr_trainer *t) { return t ? t->net.n_tensors : 0; }

mr_status mr_trainer_tensor(const mr_trainer *t, int i, mr_tensor *out, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_tensor: trainer or out is NULL");
    return layout_tensor(&t->net, i, out, err);
}

int mr_config_tensor_count(const mr_config *cfg) {
    if (!cfg) return 0;
    mr_net_layout net;
    mr_net_layout_init(&net, &cfg->policy, mr_config_side(cfg));
    return net.n_tensors;
}

mr_status mr_config_tensor(const mr_config *cfg, int i, mr_tensor *out, mr_error *err) {
    if (!cfg || !out) return mr_fail(err, MR_ERR_ARG, "mr_config_tensor: cfg or out is NULL");
    mr_net_layout net;
    mr_net_layout_init(&net, &cfg->policy, mr_config_side(cfg));
    return layout_tensor(&net, i, out, err);
}

mr_status mr_trainer_read_params(mr_trainer *t, float *out, uint64_t n, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_read_params: trainer or out is NULL");
    if (n != (uint64_t)t->net.n_params)
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_read_params: n = %llu: this network has %llu parameters",
                       (unsigned long long)n, (unsigned long long)t->net.n_params);
    TRY(mr_trainer_pull(t, MR_SYNC_WEIGHTS, err));
    memcpy(out, t->pol.params, sizeof(float) * (size_t)n);
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_write_params(mr_trainer *t, const float *in, uint64_t n, mr_error *err) {
    if (!t || !in) return mr_fail(err, MR_ERR_ARG, "mr_trainer_write_params: trainer or in is NULL");
    if (n != (uint64_t)t->net.n_params)
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_write_params: n = %llu: this network has %llu parameters",
                       (unsigned long long)n, (unsigned long long)t->net.n_params);
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(in[i]))
            return mr_fail(err, MR_ERR_ARG, "mr_trainer_write_params: parameter %llu is %g: accepted finite values",
                           (unsigned long long)i, (double)in[i]);
    TRY(mr_trainer_pull(t, MR_SYNC_WEIGHTS, err));   /* PopArt as it is, from the backend */
    memcpy(t->pol.params, in, sizeof(float) * (size_t)n);
    return mr_trainer_push(t, MR_SYNC_WEIGHTS, err);
}

mr_status mr_trainer_value_scale(mr_trainer *t, double *mean, double *std, mr_error *err) {
    if (!t || !mean || !std) return mr_fail(err, MR_ERR_ARG, "mr_trainer_value_scale: NULL argument");
    TRY(mr_trainer_pull(t, MR_SYNC_WEIGHTS, err));   /* parameters and PopArt */
    *mean = t->popart.mean;
    *std = t->popart.std;
    mr_ok(err);
    return MR_OK;
}

/*
 * trainer_metrics.c - what an update reports (trainer.c runs it): the
 * profiling marks (events around every rollout step and every minibatch's
 * phases, recorded only while profiling is on), the time split read from
 * them, the metrics row of an update, and the memory statistics.
 */
#include "trainer.h"
#include "errors.h"
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- profiling marks */

mr_status mr_trainer_mark(mr_trainer *t, int k, mr_error *err) {
    if (!t->profile || k >= t->npev) return MR_OK;
    return t->be->event_record(t->pev[k], t->stream, err);
}

int mr_trainer_rollout_marks(const mr_trainer *t) { return 2 * t->T + 1; }

mr_status mr_trainer_update_mark(mr_trainer *t, int epoch, int mb, int phase, mr_error *err) {
    const int k = (epoch * t->cfg.ppo.minibatches + mb) * MR_UPDATE_MARKS + phase;
    return mr_trainer_mark(t, mr_trainer_rollout_marks(t) + k, err);
}

/* ------------------------------------------------------- time split, metrics */

static double elapsed_s(const mr_trainer *t, void *a, void *b) {
    float ms = 0.0f;
    if (t->be->event_elapsed(a, b, &ms, NULL) != MR_OK) return 0.0;
    return 1e-3 * (double)ms;
}

void mr_trainer_read_timing(mr_trainer *t) {
    mr_trainer_timing *tm = &t->timing;
    memset(tm, 0, sizeof *tm);
    tm->rollout = elapsed_s(t, t->ev[MR_EV_START], t->ev[MR_EV_ROLLOUT]);
    tm->gae = elapsed_s(t, t->ev[MR_EV_ROLLOUT], t->ev[MR_EV_GAE]);
    tm->update = elapsed_s(t, t->ev[MR_EV_GAE], t->ev[MR_EV_END]);
    if (!t->profile) return;
    const int R = mr_trainer_rollout_marks(t);
    for (int k = 0; k + 2 < R && k + 2 < t->npev; k += 2) {
        tm->inference += elapsed_s(t, t->pev[k], t->pev[k + 1]);
        tm->env += elapsed_s(t, t->pev[k + 1], t->pev[k + 2]);
    }
    double *phase[MR_UPDATE_MARKS - 1] = {&tm->gather, &tm->forward, &tm->loss, &tm->backward, &tm->optimizer};
    for (int k = R; k + MR_UPDATE_MARKS <= t->npev; k += MR_UPDATE_MARKS)
        for (int p = 0; p + 1 < MR_UPDATE_MARKS; p++) *phase[p] += elapsed_s(t, t->pev[k + p], t->pev[k + p + 1]);
}

void mr_trainer_fill_metrics(const mr_trainer *t, const mr_loop_metrics *h, double lr, double clip, double ent,
                             mr_metrics *out) {
    memset(out, 0, sizeof *out);
    const mr_env_log *l = &h->log;
    out->update = t->updates;
    out->agent_steps = t->agent_steps;
    const double pr = (double)t->updates / (double)mr_config_total_updates(&t->cfg);
    out->progress = pr > 1.0 ? 1.0 : pr;
    out->episodes = l->episodes;
    out->deaths = l->deaths;
    if (l->episodes > 0) {
        const double ne = l->episodes;
        out->episode_return_mean = l->return_sum / ne;
        out->episode_return_min = l->return_min;
        out->episode_return_max = l->return_max;
        out->episode_length_mean = l->length_sum / ne;
        /* the first two declared counters (foraging's food and poison, reach's goals and pits) */
        out->food_per_episode = l->count[0] / ne;
        out->poison_per_episode = l->count[1] / ne;
    }
    const int32_t c0 = l->count[0], c1 = l->count[1];
    out->efficiency = (c0 + c1) > 0 ? (double)c0 / (double)(c0 + c1) : 0.0;
    out->policy_loss = h->mean[MR_LOOP_POLICY_LOSS];
    out->value_loss = h->mean[MR_LOOP_VALUE_LOSS];
    out->entropy = h->mean[MR_LOOP_ENTROPY];
    out->approx_kl = h->mean[MR_LOOP_APPROX_KL];
    out->clip_fraction = h->mean[MR_LOOP_CLIP_FRACTION];
    out->explained_variance = h->explained_variance;
    out->grad_norm_policy = h->mean[MR_LOOP_GNORM_POLICY];
    out->grad_norm_value = h->mean[MR_LOOP_GNORM_VALUE];
    out->grad_norm = h->mean[MR_LOOP_GNORM];
    out->lr = lr;
    out->clip = clip;
    out->ent_coef = ent;
    out->popart_mean = h->popart_mean;
    out->popart_std = h->popart_std;
    out->loss_scale = h->loss_scale;
    out->skipped_steps = (uint64_t)h->skipped_total;
    /* fp16: a skipped step is the scaler's overflow handling; only a
     * non-finite loss is an error. fp32 / bf16: any skip is. */
    out->nonfinite = t->cfg.precision == MR_FP16 ? h->loss_nonfinite != 0 : (h->skipped > 0 || h->loss_nonfinite);
    out->time_rollout = t->timing.rollout;
    out->time_gae = t->timing.gae;
    out->time_update = t->timing.update;
    out->time_env = t->timing.env;
    out->time_inference = t->timing.inference;
    out->time_gather = t->timing.gather;
    out->time_forward = t->timing.forward;
    out->time_loss = t->timing.loss;
    out->time_backward = t->timing.backward;
    out->time_optimizer = t->timing.optimizer;
    mr_devmem_stats ds;
    mr_devmem_stats_get(&t->mem, &ds);
    out->memory_planned_bytes = t->plan.device_bytes;
    out->memory_peak_bytes = ds.peak_allocated_bytes;
    out->memory_limit_bytes = ds.limit_bytes;
}

/* ------------------------------------------------------- profiling, memory */

mr_status mr_trainer_set_profile(mr_trainer *t, int on, mr_error *err) {
    if (!t) return mr_fail(err, MR_ERR_ARG, "mr_trainer_set_profile: trainer is NULL");
    if (t->be->cheap_events) on = 1;   /* free here: always on */
    if (on && !t->pev) {   /* outside the steady state: events for every rollout step and minibatch, once */
        const int n = mr_trainer_rollout_marks(t) + t->cfg.ppo.epochs * t->cfg.ppo.minibatches * MR_UPDATE_MARKS;
        t->pev = calloc((size_t)n, sizeof *t->pev);
        if (!t->pev) return mr_fail(err, MR_ERR_NOMEM, "out of host memory for %d profiling events", n);
        t->extra_allocations++;
        for (int i = 0; i < n; i++) {
            TRY(t->be->event_create(&t->pev[i], err));
            t->npev = i + 1;
        }
    }
    t->profile = on != 0;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_memory(const mr_trainer *t, mr_memory_stats *out, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_memory: NULL argument");
    mr_devmem_stats d, p;
    mr_devmem_stats_get(&t->mem, &d);
    mr_devmem_stats_get(&t->staging, &p);
    memset(out, 0, sizeof *out);
    out->host_planned_bytes = t->arena.size + t->plan.staging_bytes;
    out->host_peak_bytes = t->arena.size + p.peak_allocated_bytes;
    out->host_allocations = t->arena.allocations + t->extra_allocations + p.raw_allocations + p.meta_allocations;
    if (t->be->host_memory) {   /* the backend's memory is host memory too */
        out->host_planned_bytes += t->plan.device_bytes;
        out->host_peak_bytes += d.peak_allocated_bytes;
        out->host_allocations += d.raw_allocations + d.meta_allocations;
    } else {
        out->device_allocated_bytes = d.allocated_bytes;
        out->device_reserved_bytes = d.reserved_bytes;
        out->device_peak_bytes = d.peak_allocated_bytes;
        out->device_allocations = d.allocations;
        out->device_cache_hits = d.cache_hits;
    }
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_timing_get(const mr_trainer *t, mr_trainer_timing *out, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_timing_get: NULL argument");
    *out = t->timing;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_devmem(const mr_trainer *t, mr_devmem_stats *out, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_devmem: NULL argument");
    mr_devmem_stats_get(&t->mem, out);
    mr_ok(err);
    return MR_OK;
}

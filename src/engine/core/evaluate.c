/*
 * evaluate.c - the two evaluation protocols (docs/evaluation.md):
 *
 *   - episodic (mr_trainer_evaluate_episodes), every environment's: the
 *     environments as trained (their truncation), one record per episode
 *     with its unclipped return, length, declared counters and success;
 *   - "continuous survival" of ENV_SPEC.md (mr_trainer_evaluate_records),
 *     foraging's own: energy is real in every mode, episodes are never
 *     truncated, densities are drawn as in training.
 *
 * Actions are sampled from the policy, or (greedy) the most likely one.
 * Evaluation uses its own environments and its own RNG stream (the eval
 * seed), so it leaves the training state untouched. Its buffers are
 * allocated per call: evaluation is not part of the training steady state.
 *
 * It runs on the host copy of the weights through the host backend's
 * operations (t->host: env_*, policy_act, sample on host buffers), whatever
 * backend trains.
 *
 * Records (mr_trainer_evaluate_records) only read the environments: per
 * instance, the run step its episode began at, the food and poison totals
 * of the log then, and the return before each step (the return of an
 * episode that ends is that plus the step's reward, the sum the environment
 * itself computes); nothing the step or the policy reads is touched, so the
 * results are the same bits with or without them.
 */
#include "trainer.h"
#include "errors.h"
#include "config.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct eval_bufs {
    mr_env_state env;
    float *extra, *logits, *value, *u, *logp;
    uint8_t *act;
    int32_t *start, *food0, *poison0;   /* records: where each instance's episode began */
    float *ret0;                        /* records: the episode's return before this step */
} eval_bufs;

static void eval_layout(eval_bufs *b, const mr_env_config *envc, uint64_t seed, int records, mr_arena *a) {
    int N = envc->num_envs;
    mr_env_layout(&b->env, envc, seed, a);
    b->extra = MR_TAKE(a, float, (size_t)N * 2);
    b->logits = MR_TAKE(a, float, (size_t)N * MR_MAX_ACTIONS);
    b->value = MR_TAKE(a, float, N);
    b->u = MR_TAKE(a, float, N);
    b->logp = MR_TAKE(a, float, N);
    b->act = MR_TAKE(a, uint8_t, N);
    b->start = b->food0 = b->poison0 = NULL;
    b->ret0 = NULL;
    if (records) {
        b->start = MR_TAKE(a, int32_t, N);
        b->food0 = MR_TAKE(a, int32_t, N);
        b->poison0 = MR_TAKE(a, int32_t, N);
        b->ret0 = MR_TAKE(a, float, N);
    }
}

/* Appends one record, growing the buffer by doubling; 0 when out of memory. */
static int rec_push(mr_eval_records *r, uint64_t *cap, const mr_eval_record *x) {
    if (r->count == *cap) {
        uint64_t n = *cap ? 2 * *cap : 4096;
        mr_eval_record *p = realloc(r->rec, (size_t)n * sizeof *p);
        if (!p) return 0;
        r->rec = p;
        *cap = n;
    }
    r->rec[r->count++] = *x;
    return 1;
}

/* The record of instance i's episode, `steps` long, ending now (a death) or
 * cut off by the end of the run (censored). */
static mr_eval_record rec_of(const eval_bufs *b, int run, int i, int died, int steps, float reward) {
    const mr_env_log *l = &b->env.log[i];
    mr_eval_record x;
    x.run = run;
    x.env = i;
    x.died = died;
    x.steps = steps;
    x.start = b->start[i];
    x.food = l->count_total[0] - b->food0[i];   /* the first two counters: food, poison */
    x.poison = l->count_total[1] - b->poison0[i];
    x.reward = reward;
    /* energy is real in evaluation (foraging's: 0 elsewhere) */
    mr_env_episode_energy(b->env.kind, x.food, x.poison, steps, &x.energy_gained_centi, &x.final_energy);
    return x;
}

/* The most likely action of N instances from their logits, by the head
 * (act_head.h): a categorical's largest logit (the first of equals), each
 * multi-discrete group's, or a box's Gaussian mean mapped to the box as a
 * sample is (clipped, or squashed: mr_gauss_mean_action), into act (N,
 * head.act_bytes bytes). */
static void eval_greedy(const mr_trainer *t, int N, const float *logits, uint8_t *act) {
    const mr_act_head *h = &t->head;
    const int NA = t->NA;
    if (h->kind == MR_HEAD_GAUSS) {
        float *a = (float *)(void *)act;
        for (int i = 0; i < N; i++)
            mr_gauss_mean_action(h->squash, logits + (size_t)i * NA, h->low, h->high, h->n, a + (size_t)i * h->n);
        return;
    }
    const int groups = h->kind == MR_HEAD_MULTI_DISCRETE ? h->n : 1;
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * NA;
        for (int g = 0, first = 0; g < groups; g++) {
            const int n = h->kind == MR_HEAD_MULTI_DISCRETE ? h->nvec[g] : NA;
            int best = 0;
            for (int k = 1; k < n; k++)
                if (l[first + k] > l[first + best]) best = k;
            act[(size_t)i * groups + g] = (uint8_t)best;
            first += n;
        }
    }
}

/* The actions of N instances from their logits: drawn with u (uniforms, or
 * a box's normals, as the rollout draws them) through the head's sampling
 * (a box: x, the stored sample, is scratch; the environment gets act), or
 * greedy. */
static mr_status eval_act(const mr_trainer *t, int N, const float *logits, const float *u, int greedy, float *x,
                          uint8_t *act, float *logp, mr_error *err) {
    const mr_backend *o = t->host;
    if (greedy) {
        eval_greedy(t, N, logits, act);
        mr_ok(err);
        return MR_OK;
    }
    if (t->head.kind == MR_HEAD_GAUSS)
        return o->sample_box(N, &t->head, logits, u, x, (float *)(void *)act, logp, NULL, err);
    if (t->head.kind == MR_HEAD_MULTI_DISCRETE) return o->sample_md(N, &t->head, logits, u, act, logp, NULL, err);
    return o->sample(N, t->NA, logits, u, act, logp, NULL, err);
}

int mr_trainer_eval_protocol(const mr_trainer *t, const mr_eval_config *ec) {
    if (!t) return -1;
    if (ec && ec->protocol >= 0) return ec->protocol;
    mr_env_spaces sp;
    if (mr_env_spaces_of(&t->cfg.env, &sp, NULL) != MR_OK) return MR_EVAL_EPISODIC;
    return sp.eval;
}

void mr_eval_records_free(mr_eval_records *r) {
    if (!r) return;
    free(r->rec);
    memset(r, 0, sizeof *r);
}

mr_status mr_trainer_evaluate(mr_trainer *t, const mr_eval_config *ec, mr_eval_result *out, mr_error *err) {
    return mr_trainer_evaluate_records(t, ec, out, NULL, NULL, NULL, err);
}

mr_status mr_trainer_evaluate_progress(mr_trainer *t, const mr_eval_config *ec, mr_eval_result *out,
                                       mr_eval_progress_fn progress, void *user, mr_error *err) {
    return mr_trainer_evaluate_records(t, ec, out, NULL, progress, user, err);
}

static mr_status rec_nomem(mr_eval_records *r, mr_arena *a, mr_error *err) {
    mr_arena_release(a);
    mr_eval_records_free(r);
    return mr_fail(err, MR_ERR_NOMEM, "out of memory for the evaluation's records (%llu so far); lower eval.num_envs "
                   "or eval.steps", (unsigned long long)r->count);
}

mr_status mr_trainer_evaluate_records(mr_trainer *t, const mr_eval_config *ec, mr_eval_result *out,
                                      mr_eval_records *recs, mr_eval_progress_fn progress, void *user,
                                      mr_error *err) {
    if (recs) memset(recs, 0, sizeof *recs);
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_evaluate: trainer or out is NULL");
    mr_eval_config c;
    if (ec) c = *ec; else mr_eval_config_default(&c);
    mr_status ps;
    if ((ps = mr_eval_config_validate(&c, err))) return ps;
    {   /* the survival protocol is the grid worlds': efficiency from two counters, deaths, survival */
        mr_env_spaces sp;
        if (mr_env_spaces_of(&t->cfg.env, &sp, err) != MR_OK) return MR_ERR_ARG;
        if (sp.counters < 2 || sp.act.kind != MR_SPACE_DISCRETE)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s: the survival protocol (efficiency, deaths, survival) needs "
                           "a grid world counting two items as foraging does; this environment is evaluated with the "
                           "episodic protocol (mr_trainer_evaluate_episodes: return, length, success, counters)",
                           mr_env_name_of(t->cfg.env.name));
        if (c.protocol == MR_EVAL_EPISODIC)
            return mr_fail(err, MR_ERR_ARG, "eval protocol = episodic: mr_trainer_evaluate_records runs the survival "
                           "protocol; the episodic one is mr_trainer_evaluate_episodes");
        if (c.episodes != 0)
            return mr_fail(err, MR_ERR_ARG, "eval episodes = %d: the survival protocol (env.name = %s's own) runs "
                           "eval.steps steps and never ends an episode early; a number of episodes is the episodic "
                           "protocol's", c.episodes, mr_env_name_of(t->cfg.env.name));
    }
    if ((ps = mr_trainer_pull(t, MR_SYNC_WEIGHTS, err))) return ps;   /* runs on the host copy of the weights */
    mr_trainer_use_threads(t);

    mr_env_config envc = t->cfg.env;
    envc.num_envs = c.num_envs;
    envc.max_episode_steps = 0;                          /* no truncation */
    if (c.mode >= 0) envc.mode = c.mode;
    int proxy = envc.mode != MR_MODE_GROUND_TRUTH;
    const int N = c.num_envs;

    double food = 0, poison = 0, deaths = 0, steps = 0, episodes = 0, eff_sum = 0, eff_n = 0;
    uint64_t cap = 0;
    for (int run = 0; run < c.runs; run++) {
        eval_bufs b;
        mr_arena a = {0};
        uint64_t seed = c.seed + (uint64_t)run * 1000003ull;
        eval_layout(&b, &envc, seed, recs != NULL, &a);    /* plan */
        if (mr_arena_commit(&a) != 0) {
            mr_eval_records_free(recs);
            return mr_fail(err, MR_ERR_NOMEM, "out of memory for %d evaluation environments; lower eval.num_envs", N);
        }
        t->extra_allocations++;
        eval_layout(&b, &envc, seed, recs != NULL, &a);    /* carve */
        mr_env_state env = b.env;
        float *extra = b.extra, *logits = b.logits, *u = b.u, *logp = b.logp;
        uint8_t *act = b.act;
        (void)mr_env_set_param(&env, "energy_frozen", 0);   /* real energy in every mode (foraging's) */
        env.reward_clip = (float)t->cfg.ppo.reward_clip;
        env.threads = t->threads;
        const mr_backend *o = t->host;   /* host buffers: the host backend's operations, no stream */
        mr_status es;
#define EVAL_TRY(call)                                                   \
        do {                                                             \
            if ((es = (call)) != MR_OK) {                                \
                mr_arena_release(&a);                                    \
                mr_eval_records_free(recs);                              \
                return es;                                               \
            }                                                            \
        } while (0)
        EVAL_TRY(o->env_reset_all(&env, NULL, err));
        EVAL_TRY(o->env_clear_logs(&env, NULL, err));
        if (recs) {
            memset(b.start, 0, sizeof(int32_t) * (size_t)N);
            memset(b.food0, 0, sizeof(int32_t) * (size_t)N);
            memset(b.poison0, 0, sizeof(int32_t) * (size_t)N);
        }
        for (int s = 0; s < c.steps; s++) {
            mr_env_critic_extra_all(&env, extra);
            EVAL_TRY(o->policy_act(&t->pol, mr_env_obs(&env), extra, N, proxy, logits, b.value, NULL, err));
            for (int i = 0; i < N; i++)
                u[i] = mr_rng_uniform(env.seed, mr_env_key(&env, i), env.tick[i], MR_RNG_ACTION, 0);
            if (c.greedy) eval_greedy(t, N, logits, act);
            else EVAL_TRY(o->sample(N, t->NA, logits, u, act, logp, NULL, err));
            if (recs) memcpy(b.ret0, env.ep_return, sizeof(float) * (size_t)N);
            EVAL_TRY(o->env_step_all(&env, act, NULL, err));
            for (int i = 0; recs && i < N; i++) {
                if (!env.terminated[i]) continue;   /* no truncation here: every end is a death */
                mr_eval_record x = rec_of(&b, run, i, 1, s + 1 - b.start[i], b.ret0[i] + env.reward[i]);
                if (!rec_push(recs, &cap, &x)) return rec_nomem(recs, &a, err);
                recs->deaths++;
                b.start[i] = s + 1;
                b.food0[i] = env.log[i].count_total[0];
                b.poison0[i] = env.log[i].count_total[1];
            }
            if (progress) progress(user, (uint64_t)run * (uint64_t)c.steps + (uint64_t)s + 1,
                                   (uint64_t)c.runs * (uint64_t)c.steps);
        }
        for (int i = 0; recs && i < N; i++) {   /* the survivors: right-censored */
            mr_eval_record x = rec_of(&b, run, i, 0, c.steps - b.start[i], env.ep_return[i]);
            if (!rec_push(recs, &cap, &x)) return rec_nomem(recs, &a, err);
        }
        for (int i = 0; i < N; i++) {
            const mr_env_log *l = &env.log[i];
            const int32_t fo = l->count_total[0], po = l->count_total[1];
            food += fo;
            poison += po;
            deaths += l->deaths;
            steps += l->steps_total;
            episodes += l->deaths + 1;               /* + the episode still running at the end */
            if (fo + po > 0) {
                eff_sum += (double)fo / (double)(fo + po);
                eff_n += 1;
            }
        }
        mr_arena_release(&a);
#undef EVAL_TRY
    }
    double k = steps > 0 ? 1000.0 / steps : 0.0;
    out->food_per_1k = food * k;
    out->poison_per_1k = poison * k;
    out->deaths_per_1k = deaths * k;
    out->energy_per_1k = (food - 2.0 * poison - 0.01 * steps) * k;
    out->efficiency = eff_n > 0 ? eff_sum / eff_n : 0.0;
    out->survival = episodes > 0 ? steps / episodes : 0.0;
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------------ episodic */

typedef struct episodic_bufs {
    mr_env_state env;
    float *extra, *logits, *value, *u, *logp;
    uint8_t *act;                  /* (N, AB) bytes on float storage (a box's floats) */
    float *x;                      /* (N, d) a box's stored samples (scratch: the environment gets act) */
    int32_t *start;                /* where each instance's episode began */
    int32_t *want;                 /* episodes still to record (-1: every one) */
    int32_t *count0;               /* (N, MR_ENV_MAX_COUNTERS) the log's counters when it began */
    double *ret;                   /* its return so far, unclipped */
} episodic_bufs;

static void episodic_layout(episodic_bufs *b, const mr_env_config *envc, uint64_t seed, const mr_act_head *h,
                            mr_arena *a) {
    /* d: an instance's draws (a box's normals, a multi-discrete's uniforms) and floats of room for its action */
    const int N = envc->num_envs, d = h->kind == MR_HEAD_CATEGORICAL ? 1 : h->n;
    mr_env_layout(&b->env, envc, seed, a);
    b->extra = MR_TAKE(a, float, (size_t)N * MR_ENV_EXTRA_STRIDE);
    b->logits = MR_TAKE(a, float, (size_t)N * MR_MAX_ACTIONS);
    b->value = MR_TAKE(a, float, N);
    b->u = MR_TAKE(a, float, (size_t)N * d);
    b->logp = MR_TAKE(a, float, N);
    b->act = (uint8_t *)(void *)MR_TAKE(a, float, (size_t)N * d);
    b->x = MR_TAKE(a, float, (size_t)N * d);
    b->start = MR_TAKE(a, int32_t, N);
    b->want = MR_TAKE(a, int32_t, N);
    b->count0 = MR_TAKE(a, int32_t, (size_t)N * MR_ENV_MAX_COUNTERS);
    b->ret = MR_TAKE(a, double, N);
}

void mr_eval_episodes_free(mr_eval_episodes *e) {
    if (!e) return;
    free(e->ep);
    memset(e, 0, sizeof *e);
}

static int ep_push(mr_eval_episodes *r, uint64_t *cap, const mr_eval_episode *x) {
    if (r->count == *cap) {
        uint64_t n = *cap ? 2 * *cap : 1024;
        mr_eval_episode *p = realloc(r->ep, (size_t)n * sizeof *p);
        if (!p) return 0;
        r->ep = p;
        *cap = n;
    }
    r->ep[r->count++] = *x;
    r->ended += x->ended != 0;
    return 1;
}

/* Instance i's episode, from b's bookkeeping and the log's counters now:
 * ended at step `now` (0 < ended) or still running then (ended = 0). */
static mr_eval_episode episode_of(const episodic_bufs *b, const mr_env_spaces *sp, int run, int i, int now,
                                  int ended) {
    const mr_env_log *l = &b->env.log[i];
    mr_eval_episode x;
    memset(&x, 0, sizeof x);
    x.run = run;
    x.env = i;
    x.start = b->start[i];
    x.length = now - b->start[i];
    x.ended = ended;
    /* the log counts an episode's counters when it ends (env_state.h): nothing yet for a running one */
    for (int k = 0; ended && k < sp->counters; k++)
        x.count[k] = l->count[k] - b->count0[(size_t)i * MR_ENV_MAX_COUNTERS + k];
    x.ret = b->ret[i];
    switch (sp->success) {
    case MR_SUCCESS_TRUNCATED: x.success = ended == 2; break;
    case MR_SUCCESS_COUNTER: x.success = x.count[sp->success_counter] > 0; break;
    default: x.success = -1; break;
    }
    return x;
}

/* Instance i starts a new episode at step `now`. */
static void episode_begin(episodic_bufs *b, int i, int now) {
    b->start[i] = now;
    b->ret[i] = 0.0;
    memcpy(b->count0 + (size_t)i * MR_ENV_MAX_COUNTERS, b->env.log[i].count, sizeof(int32_t) * MR_ENV_MAX_COUNTERS);
}

mr_status mr_trainer_evaluate_episodes(mr_trainer *t, const mr_eval_config *ec, mr_eval_episodes *out,
                                       mr_eval_progress_fn progress, void *user, mr_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_evaluate_episodes: trainer or out is NULL");
    mr_eval_config c;
    if (ec) c = *ec; else mr_eval_config_default(&c);
    mr_status ps;
    if ((ps = mr_eval_config_validate(&c, err))) return ps;
    if (c.protocol == MR_EVAL_SURVIVAL)
        return mr_fail(err, MR_ERR_ARG, "eval protocol = survival: mr_trainer_evaluate_episodes runs the episodic "
                       "protocol; the survival one is mr_trainer_evaluate_records");
    mr_env_config envc = t->cfg.env;
    envc.num_envs = c.num_envs;
    if (c.mode >= 0) envc.mode = c.mode;
    if ((ps = mr_env_config_check(&envc, err))) return ps;   /* a mode the environment does not have */
    mr_env_spaces sp;
    if ((ps = mr_env_spaces_of(&envc, &sp, err))) return ps;
    if ((ps = mr_trainer_pull(t, MR_SYNC_WEIGHTS, err))) return ps;   /* runs on the host copy of the weights */
    mr_trainer_use_threads(t);
    const int proxy = envc.mode != MR_MODE_GROUND_TRUTH;
    const int N = c.num_envs;
    const mr_backend *o = t->host;   /* host buffers: the host backend's operations, no stream */
    const uint64_t total = (uint64_t)c.runs * (uint64_t)c.steps;
    uint64_t cap = 0;
    for (int run = 0; run < c.runs; run++) {
        episodic_bufs b;
        mr_arena a = {0};
        const uint64_t seed = c.seed + (uint64_t)run * 1000003ull;
        episodic_layout(&b, &envc, seed, &t->head, &a);    /* plan */
        if (mr_arena_commit(&a) != 0) {
            mr_eval_episodes_free(out);
            return mr_fail(err, MR_ERR_NOMEM, "out of memory for %d evaluation environments; lower eval.num_envs", N);
        }
        t->extra_allocations++;
        episodic_layout(&b, &envc, seed, &t->head, &a);    /* carve */
        mr_env_state *env = &b.env;
        env->reward_clip = INFINITY;                     /* the environment's own rewards: returns unclipped */
        env->threads = t->threads;
        mr_status es;
#define EP_TRY(call)                                                     \
        do {                                                             \
            if ((es = (call)) != MR_OK) {                                \
                mr_arena_release(&a);                                    \
                mr_eval_episodes_free(out);                              \
                return es;                                               \
            }                                                            \
        } while (0)
#define EP_PUSH(x)                                                       \
        do {                                                             \
            if (!ep_push(out, &cap, &(x))) {                             \
                mr_arena_release(&a);                                    \
                mr_eval_episodes_free(out);                              \
                return mr_fail(err, MR_ERR_NOMEM, "out of memory for the evaluation's records; lower "     \
                               "eval.num_envs or eval.steps");           \
            }                                                            \
        } while (0)
        EP_TRY(o->env_reset_all(env, NULL, err));
        EP_TRY(o->env_clear_logs(env, NULL, err));
        int waiting = 0;   /* instances with episodes still to record (c.episodes > 0) */
        for (int i = 0; i < N; i++) {
            episode_begin(&b, i, 0);
            b.want[i] = c.episodes > 0 ? (int32_t)(((int64_t)c.episodes + i) / N) : -1;
            waiting += b.want[i] > 0;
        }
        int s = 0;
        for (; s < c.steps && (c.episodes == 0 || waiting > 0); s++) {
            EP_TRY(o->step_in(env, env->seed, b.extra, c.greedy ? NULL : b.u, NULL, err));
            EP_TRY(o->policy_act(&t->pol, mr_env_obs(env), b.extra, N, proxy, b.logits, b.value, NULL, err));
            EP_TRY(eval_act(t, N, b.logits, b.u, c.greedy, b.x, b.act, b.logp, err));
            EP_TRY(o->env_step_all(env, b.act, NULL, err));
            for (int i = 0; i < N; i++) {
                b.ret[i] += (double)env->reward[i];
                if (!(env->terminated[i] | env->truncated[i])) continue;
                if (b.want[i] != 0) {
                    mr_eval_episode x = episode_of(&b, &sp, run, i, s + 1, env->terminated[i] ? 1 : 2);
                    EP_PUSH(x);
                    if (b.want[i] > 0 && --b.want[i] == 0) waiting--;
                }
                episode_begin(&b, i, s + 1);
            }
            if (progress) progress(user, (uint64_t)run * (uint64_t)c.steps + (uint64_t)s + 1, total);
        }
        for (int i = 0; i < N; i++) {   /* the episodes still running, where wanted */
            if (b.want[i] == 0 || s - b.start[i] <= 0) continue;
            mr_eval_episode x = episode_of(&b, &sp, run, i, s, 0);
            EP_PUSH(x);
        }
        if (progress && s < c.steps) progress(user, (uint64_t)(run + 1) * (uint64_t)c.steps, total);
        mr_arena_release(&a);
#undef EP_PUSH
#undef EP_TRY
    }
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_infer(mr_trainer *t, const uint8_t *obs, const float *extra, int n, float *logits,
                           float *value, mr_error *err) {
    if (!t || !obs) return mr_fail(err, MR_ERR_ARG, "mr_trainer_infer: trainer or obs is NULL");
    if (n < 1 || n > (1 << 24))
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_infer: n = %d is out of range: accepted 1 .. 16777216", n);
    mr_status ps;
    if ((ps = mr_trainer_pull(t, MR_SYNC_WEIGHTS, err))) return ps;   /* runs on the host copy of the weights */
    mr_trainer_use_threads(t);
    /* Inference is outside the training steady state: its scratch is per call. */
    float *ex = NULL, *lg = logits, *val = value;
    float *tmp = malloc(sizeof(float) * (size_t)n * (2 + 8 + 1));
    if (!tmp) return mr_fail(err, MR_ERR_NOMEM, "mr_trainer_infer: out of memory for %d samples", n);
    t->extra_allocations++;
    ex = tmp;
    if (extra) memcpy(ex, extra, sizeof(float) * (size_t)n * 2);
    else memset(ex, 0, sizeof(float) * (size_t)n * 2);
    if (!lg) lg = tmp + (size_t)n * 2;
    if (!val) val = tmp + (size_t)n * 10;
    mr_status as = t->host->policy_act(&t->pol, obs, ex, n, t->proxy_obs, lg, val, NULL, err);
    if (as != MR_OK) {
        free(tmp);
        return as;
    }
    for (int i = 0; i < n; i++) val[i] = (float)(t->popart.mean + t->popart.std * val[i]);
    free(tmp);
    mr_ok(err);
    return MR_OK;
}

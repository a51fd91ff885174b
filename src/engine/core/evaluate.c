/*
 * evaluate.c - the "continuous survival" evaluation of ENV_SPEC.md.
 *
 * Energy is real in every mode, episodes are never truncated, densities are
 * drawn as in training and actions are sampled from the policy. Evaluation
 * uses its own environments and its own RNG stream (the eval seed), so it
 * leaves the training state untouched. Its buffers are allocated per call:
 * evaluation is not part of the training steady state.
 */
#include "trainer.h"
#include "errors.h"
#include "rng.h"

#include <stdlib.h>
#include <string.h>

typedef struct eval_bufs {
    mr_forage env;
    float *extra, *logits, *value, *u, *logp;
    uint8_t *act;
} eval_bufs;

static void eval_layout(eval_bufs *b, const mr_env_config *envc, uint64_t seed, mr_arena *a) {
    int N = envc->num_envs;
    mr_forage_layout(&b->env, envc, seed, a);
    b->extra = MR_TAKE(a, float, (size_t)N * 2);
    b->logits = MR_TAKE(a, float, (size_t)N * 8);
    b->value = MR_TAKE(a, float, N);
    b->u = MR_TAKE(a, float, N);
    b->logp = MR_TAKE(a, float, N);
    b->act = MR_TAKE(a, uint8_t, N);
}

mr_status mr_trainer_evaluate(mr_trainer *t, const mr_eval_config *ec, mr_eval_result *out, mr_error *err) {
    return mr_trainer_evaluate_progress(t, ec, out, NULL, NULL, err);
}

mr_status mr_trainer_evaluate_progress(mr_trainer *t, const mr_eval_config *ec, mr_eval_result *out,
                                       mr_eval_progress_fn progress, void *user, mr_error *err) {
    if (!t || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_evaluate: trainer or out is NULL");
    mr_eval_config c;
    if (ec) c = *ec; else mr_eval_config_default(&c);
    if (c.mode < -1 || c.mode > MR_MODE_PROXY)
        return mr_fail(err, MR_ERR_ARG, "eval mode = %d: accepted -1 (the trainer's mode) or 0 .. 3", c.mode);
    if (c.num_envs < 1 || c.num_envs > (1 << 20))
        return mr_fail(err, MR_ERR_ARG, "eval.num_envs = %d is out of range: accepted 1 .. 1048576", c.num_envs);
    if (c.steps < 1 || c.steps > (1 << 28))
        return mr_fail(err, MR_ERR_ARG, "eval.steps = %d is out of range: accepted 1 .. 268435456", c.steps);
    if (c.runs < 1 || c.runs > 1000)
        return mr_fail(err, MR_ERR_ARG, "eval.runs = %d is out of range: accepted 1 .. 1000", c.runs);
    mr_status ps;
    if ((ps = mr_trainer_pull(t, MR_SYNC_WEIGHTS, err))) return ps;   /* runs on the host copy of the weights */
    mr_trainer_use_threads(t);

    mr_env_config envc = t->cfg.env;
    envc.num_envs = c.num_envs;
    envc.max_episode_steps = 0;                          /* no truncation */
    if (c.mode >= 0) envc.mode = c.mode;
    int proxy = envc.mode != MR_MODE_GROUND_TRUTH;
    const int N = c.num_envs;

    double food = 0, poison = 0, deaths = 0, steps = 0, episodes = 0, eff_sum = 0, eff_n = 0;
    for (int run = 0; run < c.runs; run++) {
        eval_bufs b;
        mr_arena a = {0};
        uint64_t seed = c.seed + (uint64_t)run * 1000003ull;
        eval_layout(&b, &envc, seed, &a);                  /* plan */
        if (mr_arena_commit(&a) != 0)
            return mr_fail(err, MR_ERR_NOMEM, "out of memory for %d evaluation environments; lower eval.num_envs", N);
        t->extra_allocations++;
        eval_layout(&b, &envc, seed, &a);                  /* carve */
        mr_forage env = b.env;
        float *extra = b.extra, *logits = b.logits, *u = b.u, *logp = b.logp;
        uint8_t *act = b.act;
        env.energy_frozen = 0;
        env.reward_clip = (float)t->cfg.ppo.reward_clip;
        env.threads = t->threads;
        mr_forage_cpu_reset_all(&env);
        mr_forage_cpu_clear_logs(&env);
        for (int s = 0; s < c.steps; s++) {
            mr_trainer_counts_extra(&env, extra);
            mr_policy_act(&t->pol, env.obs, extra, N, proxy, logits, b.value);
            for (int i = 0; i < N; i++)
                u[i] = mr_rng_uniform(env.seed, (uint32_t)i, env.tick[i], MR_RNG_ACTION, 0);
            mr_sample_actions(N, logits, u, act, logp);
            mr_forage_cpu_step_all(&env, act);
            if (progress) progress(user, (uint64_t)run * (uint64_t)c.steps + (uint64_t)s + 1,
                                   (uint64_t)c.runs * (uint64_t)c.steps);
        }
        for (int i = 0; i < N; i++) {
            const mr_forage_log *l = &env.log[i];
            food += l->food_total;
            poison += l->poison_total;
            deaths += l->deaths;
            steps += l->steps_total;
            episodes += l->deaths + 1;               /* + the episode still running at the end */
            if (l->food_total + l->poison_total > 0) {
                eff_sum += (double)l->food_total / (double)(l->food_total + l->poison_total);
                eff_n += 1;
            }
        }
        mr_arena_release(&a);
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
    mr_policy_act(&t->pol, obs, ex, n, t->proxy_obs, lg, val);
    for (int i = 0; i < n; i++) val[i] = (float)(t->popart.mean + t->popart.std * val[i]);
    free(tmp);
    mr_ok(err);
    return MR_OK;
}

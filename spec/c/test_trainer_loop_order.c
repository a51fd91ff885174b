/*
 * test_trainer_loop_order.c - what the one trainer loop (src/engine/core/
 * trainer.c) does in an update, on the cpu backend, against references
 * built here from the public API and plain float64 arithmetic:
 *   1. the rollout against a separate mr_env (same env config and seed)
 *      stepped with the rollout's own actions: obs rows, the critic's count
 *      inputs (from the env's grid), rewards and done bits, bit for bit,
 *      over two updates; the policy's outputs of update 1 (log-probability
 *      of the taken action, values, the bootstrap value) against
 *      mr_trainer_infer of an untrained twin, and every action against the
 *      inverse CDF of the softmax at the uniform keyed (seed, env, tick);
 *   2. advantages and returns against a float64 GAE of the rollout's
 *      rewards, values, done bits and bootstrap values (normalised or not,
 *      other gamma / lambda), and the explained variance;
 *   3. the sequence of operations of an update, recorded by the wrapper
 *      table (backend_wrap.h), against the order docs/engine.md
 *      documents (per rollout step: copy, step_in, policy_act (or
 *      policy_act_keep with one minibatch), sample,
 *      env_step_all, step_out; then GAE, statistics, PopArt, normalisation;
 *      per minibatch: gather, opt_begin, zero_grad, forward, ppo_loss,
 *      backward, opt_step, accumulate; ...), with PopArt and advantage
 *      normalisation on and off, on the first update and a later one; every
 *      pointer in device memory, the update's copies through staging.
 */
#include "check.h"
#include "rollout_check.h"
#include "moonrl.h"
#include "trainer.h"
#include "backend_wrap.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* The critic's count inputs of every environment, counted on the grid. */
static void counts_from_grid(const mr_env_config *ec, const uint8_t *grid, float *extra) {
    const size_t cells = (size_t)ec->grid_size * (size_t)ec->grid_size;
    const float mid = 0.5f * (float)(ec->density_min + ec->density_max);
    float half = 0.5f * (float)(ec->density_max - ec->density_min);
    if (half < 1.0f) half = 1.0f;
    for (int i = 0; i < ec->num_envs; i++) {
        int food = 0, poison = 0;
        for (size_t k = 0; k < cells; k++) {
            food += grid[i * cells + k] == 1;
            poison += grid[i * cells + k] == 2;
        }
        extra[2 * i] = ((float)food - mid) / half;
        extra[2 * i + 1] = ((float)poison - mid) / half;
    }
}

/* ================================================================ 1. the rollout */

/* One update's rollout against env (stepped on here with its actions); twin:
 * an untrained trainer of the same config (update 1's weights), or NULL. */
static void check_rollout(const char *label, const mr_config *c, const roll *r, mr_env *env, mr_trainer *twin,
                          uint32_t tick0) {
    const int T = r->T, N = r->N, VV = r->VV;
    const size_t B = (size_t)T * (size_t)N, cells = (size_t)c->env.grid_size * (size_t)c->env.grid_size;
    uint8_t *obs = malloc((size_t)N * VV), *grid = malloc((size_t)N * cells), *term = malloc(N), *trunc = malloc(N);
    float *rew = malloc((size_t)N * 4), *extra = malloc((size_t)N * 8);
    long bad_obs = 0, bad_extra = 0, bad_rew = 0, bad_done = 0, bad_act = 0, dones = 0;
    mr_error e;
    for (int t = 0; t < T; t++) {
        const size_t row = (size_t)t * N;
        mr_env_view v = {obs, NULL, NULL, NULL, grid, NULL, NULL, NULL};
        CHECK(mr_env_read(env, &v, &e) == MR_OK);
        counts_from_grid(&c->env, grid, extra);
        for (int n = 0; n < N; n++) {
            bad_obs += memcmp(obs + (size_t)n * VV, r->obs + (row + n) * VV, (size_t)VV) != 0;
            bad_extra += memcmp(extra + 2 * n, r->extra + 2 * (row + n), 8) != 0;
            bad_act += r->act[row + n] >= MR_MAX_ACTIONS;
        }
        CHECK(mr_env_step(env, r->act + row, &e) == MR_OK);
        mr_env_view v2 = {NULL, rew, term, trunc, NULL, NULL, NULL, NULL};
        CHECK(mr_env_read(env, &v2, &e) == MR_OK);
        for (int n = 0; n < N; n++) {
            bad_rew += memcmp(rew + n, r->rew + row + n, 4) != 0;
            bad_done += r->done[row + n] != (uint8_t)(term[n] | trunc[n]);
            dones += r->done[row + n] != 0;
        }
    }
    CHECK_MSG(bad_obs == 0, "%s: %ld observation rows differ from the env's", label, bad_obs);
    CHECK_MSG(bad_extra == 0, "%s: %ld count inputs differ from the grid's counts", label, bad_extra);
    CHECK_MSG(bad_act == 0, "%s: %ld actions out of range", label, bad_act);
    CHECK_MSG(bad_rew == 0, "%s: %ld rewards differ from the env's", label, bad_rew);
    CHECK_MSG(bad_done == 0, "%s: %ld done bits differ from the env's", label, bad_done);
    CHECK_MSG(dones > 0, "%s: no episode ended in the rollout (the test needs done bits)", label);
    if (twin) {
        /* the policy's outputs: update 1 acts with the initial weights, the twin's */
        float *logits = malloc(B * MR_MAX_ACTIONS * 4), *value = malloc(B * 4);
        CHECK(mr_trainer_infer(twin, r->obs, r->extra, (int)B, logits, value, &e) == MR_OK);
        double e_logp = 0.0, e_val = 0.0, vmax = 1e-30;
        long bad_sample = 0, near_edge = 0;
        for (size_t k = 0; k < B; k++) {
            const float *z = logits + k * MR_MAX_ACTIONS;
            double m = z[0], s = 0.0, p[MR_MAX_ACTIONS];
            for (int j = 1; j < MR_MAX_ACTIONS; j++) m = z[j] > m ? z[j] : m;
            for (int j = 0; j < MR_MAX_ACTIONS; j++) s += p[j] = exp((double)z[j] - m);
            const int a = r->act[k] & 7;
            const double lp = (double)z[a] - m - log(s);
            if (fabs(lp - r->logp[k]) > e_logp) e_logp = fabs(lp - r->logp[k]);
            if (fabs((double)value[k] - r->val[k]) > e_val) e_val = fabs((double)value[k] - r->val[k]);
            if (fabs(value[k]) > vmax) vmax = fabs(value[k]);
            /* inverse CDF at the uniform of (seed, env, tick) */
            const int n = (int)(k % (size_t)N), t = (int)(k / (size_t)N);
            const double u = mr_rng_uniform(c->seed, (uint32_t)n, tick0 + (uint32_t)t, MR_RNG_ACTION, 0);
            double lo = 0.0;
            for (int j = 0; j < a; j++) lo += p[j] / s;
            const double hi = lo + p[a] / s;
            if (fabs(u - lo) < 1e-5 || fabs(u - hi) < 1e-5) near_edge++;
            else bad_sample += !(u >= lo && u < hi);
        }
        CHECK_MSG(e_logp < 1e-5, "%s: logp differs from log_softmax(logits)[action] by %.3g", label, e_logp);
        CHECK_MSG(e_val / vmax < 1e-5, "%s: values differ from the twin's inference by %.3g (relative)", label,
                  e_val / vmax);
        CHECK_MSG(bad_sample == 0, "%s: %ld actions are not the inverse CDF at the (seed, env, tick) uniform (%ld "
                  "on a boundary)", label, bad_sample, near_edge);
        /* the bootstrap value: the state after the last step */
        mr_env_view v = {obs, NULL, NULL, NULL, grid, NULL, NULL, NULL};
        CHECK(mr_env_read(env, &v, &e) == MR_OK);
        counts_from_grid(&c->env, grid, extra);
        CHECK(mr_trainer_infer(twin, obs, extra, N, logits, value, &e) == MR_OK);
        CHECK_MSG(check_relerr(r->last_value, value, (size_t)N, 1e-30) < 1e-5, "%s: bootstrap values differ by %.3g",
                  label, check_relerr(r->last_value, value, (size_t)N, 1e-30));
        free(logits);
        free(value);
    }
    free(obs); free(grid); free(term); free(trunc); free(rew); free(extra);
}

/* ================================================================ 2. GAE */

static void check_gae(const char *label, const mr_config *c, const roll *r, const mr_metrics *m) {
    const int T = r->T, N = r->N;
    const size_t B = (size_t)T * (size_t)N;
    const double g = c->ppo.gamma, l = c->ppo.gae_lambda;
    double *adv = malloc(B * 8);
    float *retf = malloc(B * 4), *advf = malloc(B * 4);
    for (int n = 0; n < N; n++) {
        double next_v = r->last_value[n], a = 0.0;
        for (int t = T - 1; t >= 0; t--) {
            const size_t k = (size_t)t * N + n;
            const double keep = r->done[k] ? 0.0 : 1.0;
            a = (double)r->rew[k] + g * keep * next_v - (double)r->val[k] + g * l * keep * a;
            adv[k] = a;
            retf[k] = (float)(a + (double)r->val[k]);
            next_v = r->val[k];
        }
    }
    double mean = 0.0, var = 0.0;
    for (size_t k = 0; k < B; k++) mean += adv[k];
    mean /= (double)B;
    for (size_t k = 0; k < B; k++) var += (adv[k] - mean) * (adv[k] - mean);
    const double sd = sqrt(var / (double)(B - 1));
    for (size_t k = 0; k < B; k++) advf[k] = (float)(c->ppo.norm_adv ? (adv[k] - mean) / (sd + 1e-8) : adv[k]);
    const double er = check_relerr(r->ret, retf, B, 1e-30), ea = check_relerr(r->adv, advf, B, 1e-30);
    CHECK_MSG(er < 1e-5, "%s: returns differ from a float64 GAE by %.3g (relative)", label, er);
    CHECK_MSG(ea < 1e-5, "%s: %s advantages differ from a float64 GAE by %.3g (relative)", label,
              c->ppo.norm_adv ? "normalised" : "raw", ea);
    /* explained variance: 1 - var(R - V) / var(R), before PopArt moves */
    double mr = 0.0, md = 0.0, vr = 0.0, vd = 0.0;
    for (size_t k = 0; k < B; k++) {
        mr += r->ret[k];
        md += (double)r->ret[k] - (double)r->val[k];
    }
    mr /= (double)B;
    md /= (double)B;
    for (size_t k = 0; k < B; k++) {
        const double d = (double)r->ret[k] - (double)r->val[k] - md;
        vr += (r->ret[k] - mr) * (r->ret[k] - mr);
        vd += d * d;
    }
    CHECK_NEAR(m->explained_variance, 1.0 - vd / vr, 1e-6, 1e-5);
    free(adv);
    free(retf);
    free(advf);
}

static void run_reference(const char *name, const mr_config *c) {
    mr_trainer *a = NULL, *twin = NULL;
    mr_env *env = NULL;
    mr_error e;
    char label[128];
    CHECK_MSG(mr_trainer_create_on(c, mr_backend_cpu(), "", &a, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_create_on(c, mr_backend_cpu(), "", &twin, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_env_create(&c->env, c->seed, MR_DEVICE_CPU, 1, &env, &e) == MR_OK, "%s", e.msg);
    for (int u = 1; a && twin && env && u <= 2; u++) {
        mr_metrics m;
        snprintf(label, sizeof label, "%s, update %d", name, u);
        if (mr_trainer_update(a, &m, &e) != MR_OK) {
            CHECK_MSG(0, "%s: %s", label, e.msg);
            break;
        }
        roll r;
        if (!roll_read(a, &r)) break;
        check_rollout(label, c, &r, env, u == 1 ? twin : NULL, (uint32_t)((u - 1) * c->ppo.rollout_steps));
        check_gae(label, c, &r, &m);
        roll_free(&r);
    }
    mr_env_free(env);
    mr_trainer_free(a);
    mr_trainer_free(twin);
}

static void test_reference(void) {
    mr_config c;
    bw_config(&c);
    run_reference("PopArt, normalised advantages", &c);
    bw_config(&c);
    c.policy.popart = 0;
    c.ppo.norm_adv = 0;
    c.ppo.gamma = 0.9;
    c.ppo.gae_lambda = 0.8;
    c.env.mode = MR_MODE_PROXY_MORTAL;
    c.seed = 11;
    run_reference("proxy_mortal, no PopArt, raw advantages, gamma 0.9, lambda 0.8", &c);
}

/* ================================================================ 3. the order of operations */

static int expect_update(const mr_config *c, int *out) {
    int n = 0;
#define OP(name) out[n++] = BW_REC(BW_##name, 0)
#define COPY(kind) out[n++] = BW_REC(BW_copy, MR_COPY_##kind)
    OP(enter);
    OP(event_record);                    /* the update's start */
    /* rollout: the hyper-parameters from staging, fresh metrics and logs */
    COPY(H2D);
    COPY(H2D);
    OP(memset);
    OP(env_clear_logs);
    /* one minibatch: the rollout's acts keep the first epoch's forward */
    const int reuse = c->ppo.minibatches == 1;
    for (int t = 0; t < c->ppo.rollout_steps; t++) {
        OP(event_record);                /* per-step timing: always on on the cpu */
        COPY(D2D);                       /* obs codes -> the rollout row */
        OP(step_in);
        if (reuse) OP(policy_act_keep); else OP(policy_act);
        OP(sample);
        OP(event_record);
        OP(env_step_all);
        OP(step_out);
    }
    OP(event_record);
    OP(step_in);                         /* the bootstrap value */
    OP(policy_act);
    OP(step_out);
    OP(event_record);                    /* rollout's end */
    /* advantages */
    OP(gae);
    OP(diff);
    OP(mean_std);
    OP(mean_std);
    if (c->policy.popart) OP(popart_update);
    if (c->ppo.norm_adv) OP(normalize);
    OP(event_record);
    /* learn */
    for (int ep = 0; ep < c->ppo.epochs; ep++) {
        COPY(H2D);                       /* this epoch's permutation */
        for (int mb = 0; mb < c->ppo.minibatches; mb++) {
            OP(event_record);            /* per-minibatch timing: always on on the cpu */
            OP(gather);
            OP(opt_begin);
            OP(policy_zero_grad);
            OP(event_record);
            if (reuse && ep == 0) OP(policy_forward_kept); else OP(policy_forward);
            OP(event_record);
            OP(ppo_loss);
            OP(event_record);
            OP(policy_backward);
            OP(event_record);
            OP(opt_step);
            OP(accumulate);
            OP(event_record);
        }
    }
    OP(env_log_reduce);
    OP(finish);
    COPY(D2H);                           /* the metrics to staging */
    OP(event_record);
    OP(event_sync);                      /* the update's one wait */
    /* 3 parts, 2 per step, 5 per minibatch */
    for (int k = 0; k < 3 + 2 * c->ppo.rollout_steps + 5 * c->ppo.epochs * c->ppo.minibatches; k++) OP(event_elapsed);
#undef OP
#undef COPY
    return n;
}

static void compare_sequence(const char *label, const int *want, int nw, const int *got, int ng) {
    int i = 0;
    while (i < nw && i < ng && want[i] == got[i]) i++;
    if (i == nw && i == ng) {
        CHECK(1);
        return;
    }
    CHECK_MSG(0, "%s: the update's operations differ from the documented order (docs/engine.md) at operation %d of %d "
              "(%d recorded): expected %s, got %s", label, i, nw, ng, i < nw ? bw_name(want[i]) : "(end)",
              i < ng ? bw_name(got[i]) : "(end)");
    const int lo = i > 6 ? i - 6 : 0;
    for (int k = lo; k < i + 6 && (k < nw || k < ng); k++)
        fprintf(stderr, "    %4d  %-18s %-18s%s\n", k, k < nw ? bw_name(want[k]) : "", k < ng ? bw_name(got[k]) : "",
                k == i ? "  <-" : "");
}

static void sequence_for(const char *name, const mr_config *c) {
    const mr_backend *w = bw_init(mr_backend_cpu(), "cpu-wrap");
    mr_trainer *t = NULL;
    mr_error e;
    CHECK_MSG(mr_trainer_create_on(c, w, "", &t, &e) == MR_OK, "%s", e.msg);
    if (!t) return;
    int *want = malloc(sizeof(int) * BW_MAX_REC);
    const int nw = expect_update(c, want);
    char label[160];
    for (int u = 1; u <= 3; u++) {
        BW.nrec = 0;
        BW.recording = 1;
        BW.strict = 1;
        const mr_status s = mr_trainer_update(t, NULL, &e);
        BW.recording = 0;
        BW.strict = 0;
        CHECK_MSG(s == MR_OK, "%s", e.msg);
        snprintf(label, sizeof label, "%s, update %d", name, u);
        compare_sequence(label, want, nw, BW.rec, BW.nrec);
    }
    CHECK_MSG(BW.violations == 0, "%s: %ld bad arguments, the first: %s", name, BW.violations, BW.first_violation);
    printf("  %s: %d operations per update, in the documented order\n", name, nw);
    mr_trainer_free(t);
    CHECK(bw_nothing_live());
    free(want);
}

static void test_sequence(void) {
    mr_config c;
    bw_config(&c);
    sequence_for("PopArt, normalised advantages", &c);
    c.policy.popart = 0;
    c.ppo.norm_adv = 0;
    c.ppo.epochs = 3;
    c.ppo.minibatches = 4;
    c.ppo.rollout_steps = 8;
    sequence_for("no PopArt, raw advantages, 3 epochs of 4 minibatches, 8 steps", &c);
    c.policy.popart = 1;
    c.ppo.minibatches = 1;
    sequence_for("PopArt, 3 epochs of one minibatch (the first from the rollout's acts)", &c);
}

int main(void) {
    static const struct { const char *name; void (*fn)(void); } tests[] = {
        {"rollout and GAE against references", test_reference}, {"order of operations", test_sequence},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const double t0 = now_s();
        tests[i].fn();
        printf("  (%s: %.2f s)\n", tests[i].name, now_s() - t0);
    }
    return check_report("test_trainer_loop_order");
}

/*
 * test_truncation.c - ppo.truncation: a truncated episode's last step is
 * bootstrapped from the critic's value of the state it reached, on the cpu
 * backend, against references built here:
 *   1. every environment, stepped with the trainer's final-state buffers
 *      attached (env_state.h's final_obs, final_extra): each truncated
 *      instance's final observation and critic inputs are those of a twin
 *      stepped from the same state with the same action but no step limit
 *      (so it does not reset); instances that do not truncate leave their
 *      rows alone; with no buffers attached nothing is written (the
 *      environments step as before, byte for byte: test_bitcompat);
 *   2. a cartpole trainer (8 environments, 64 steps, episodes truncated
 *      at 15 steps, so some terminate and some truncate, several per
 *      instance in one rollout; PopArt on, checked on the second update
 *      where its statistics are not 0 and 1): a separate mr_env stepped
 *      with the rollout's actions gives the rewards, end flags and, from
 *      its double state and the dynamics, each truncated step's final
 *      observation; a twin trainer one update behind gives V(final)
 *      (mr_trainer_infer, PopArt applied). In float64: a truncated step's
 *      reward is r + gamma V(final), a terminated one's r; done marks both
 *      (the next row is the next episode's first, so GAE's chain is cut at
 *      both; the truncated one carries its bootstrap in the reward, as
 *      SB3's rollout buffer does); the advantages and returns are the
 *      float64 GAE of those. With ppo.truncation = "end" the rewards are
 *      the environment's alone; "auto" bootstraps cartpole, not foraging.
 */
#include "check.h"
#include "env_check.h"
#include "rollout_check.h"
#include "moonrl.h"
#include "trainer.h"
#include "registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ====================================================== 1. the environments */

/* Copies every buffer of a's state a checkpoint holds (all that a step reads)
 * into b, laid out alike. */
static void copy_state(const mr_env_state *a, const mr_env_state *b) {
    mr_env_section sa[MR_ENV_MAX_SECTIONS], sb[MR_ENV_MAX_SECTIONS];
    const int ka = mr_env_sections(a, sa), kb = mr_env_sections(b, sb);
    CHECK(ka == kb);
    for (int k = 0; k < ka && k < kb; k++) memcpy(sb[k].data, sa[k].data, sa[k].bytes);
    memcpy(b->log, a->log, (size_t)a->n * sizeof *a->log);
    memcpy(b->steps, a->steps, (size_t)a->n * 4);
    memcpy(b->tick, a->tick, (size_t)a->n * 4);
    memcpy(b->ep_return, a->ep_return, (size_t)a->n * 4);
    memcpy(mr_env_obs(b), mr_env_obs(a), (size_t)a->n * (size_t)mr_env_obs_row_bytes(a));
}

/* actions for step t: the action space's bytes (a box: floats in its bounds) */
static void draw_actions(const mr_env_state *s, const mr_env_spaces *sp, uint32_t *lcg, uint8_t *act) {
    for (int i = 0; i < s->n; i++) {
        for (int c = 0; c < (sp->act.kind == MR_SPACE_BOX ? sp->act.n : s->act_bytes); c++) {
            *lcg = *lcg * 1664525u + 1013904223u;
            const uint32_t r = *lcg >> 8;
            if (sp->act.kind == MR_SPACE_BOX) {
                const float u = (float)r / 16777216.0f;
                ((float *)(void *)act)[i * sp->act.n + c] = sp->act.low[c] + (sp->act.high[c] - sp->act.low[c]) * u;
            } else {
                const int n = sp->act.kind == MR_SPACE_MULTI_DISCRETE ? sp->act.nvec[c] : sp->act.n;
                act[(size_t)i * s->act_bytes + c] = (uint8_t)(r % (uint32_t)n);
            }
        }
    }
}

static void test_env_final(mr_env_name kind, int limit) {
    enum { N = 6, STEPS = 160 };
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, N, 12, 2, 4, 10, 20, limit);
    c.name = kind;
    mr_env_spaces sp;
    CHECK(mr_env_spaces_of(&c, &sp, NULL) == MR_OK);
    CHECK_MSG(sp.step_limit == limit, "%s declares step_limit %d for max_episode_steps %d", mr_env_name_of(kind),
              sp.step_limit, limit);
    mr_env *e = make_env(&c, 5, 1), *twin = make_env(&c, 5, 1), *plain = make_env(&c, 5, 1);
    mr_env_state *s = &e->s;
    const int rb = mr_env_obs_row_bytes(s);
    uint8_t *fobs = malloc((size_t)N * rb), *act = malloc((size_t)N * 64);
    float fextra[N * MR_ENV_EXTRA_STRIDE], want_extra[MR_ENV_EXTRA_STRIDE];
    s->final_obs = fobs;
    s->final_extra = fextra;
    uint32_t lcg = 3 + (uint32_t)kind;
    long truncs = 0, bad_obs = 0, bad_extra = 0, bad_untouched = 0, bad_plain = 0, bad_twin = 0;
    for (int t = 0; t < STEPS; t++) {
        draw_actions(s, &sp, &lcg, act);
        copy_state(s, &twin->s);
        twin->s.max_steps = 0;   /* foraging, reach, snake: never; cartpole, pendulum: their own 500, 200 */
        memset(fobs, 0xA5, (size_t)N * rb);
        for (int i = 0; i < N * MR_ENV_EXTRA_STRIDE; i++) fextra[i] = -7.0f;
        for (int i = 0; i < N; i++) {
            mr_env_step_at(s, i, act);
            mr_env_step_at(&twin->s, i, act);
            mr_env_step_at(&plain->s, i, act);
        }
        twin->s.max_steps = limit;   /* the critic's time input (snake) reads the real limit */
        /* without buffers, the same step: nothing else differs */
        bad_plain += memcmp(mr_env_obs(s), mr_env_obs(&plain->s), (size_t)N * rb) != 0;
        for (int i = 0; i < N; i++) {
            const uint8_t *row = fobs + (size_t)i * rb;
            if (!s->truncated[i] || s->terminated[i]) {   /* a death on the limit is a termination */
                for (int b = 0; b < rb; b++) bad_untouched += row[b] != 0xA5;
                bad_untouched += fextra[i * 2] != -7.0f || fextra[i * 2 + 1] != -7.0f;
                continue;
            }
            truncs++;
            bad_twin += twin->s.terminated[i] || twin->s.truncated[i];   /* the twin went on */
            bad_obs += memcmp(row, (const uint8_t *)mr_env_obs(&twin->s) + (size_t)i * rb, (size_t)rb) != 0;
            mr_env_critic_extra_one(&twin->s, i, want_extra);
            for (int k = 0; k < sp.critic_extra; k++) bad_extra += fextra[i * 2 + k] != want_extra[k];
        }
    }
    const char *nm = mr_env_name_of(kind);
    CHECK_MSG(truncs >= N, "%s: only %ld truncations in %d steps", nm, truncs, STEPS);
    CHECK_MSG(bad_obs == 0, "%s: %ld of %ld final observations differ from the un-reset twin's", nm, bad_obs, truncs);
    CHECK_MSG(bad_extra == 0, "%s: %ld final critic inputs differ from the twin's", nm, bad_extra);
    CHECK_MSG(bad_untouched == 0, "%s: %ld bytes written for instances that did not truncate", nm, bad_untouched);
    CHECK_MSG(bad_twin == 0, "%s: the twin without a limit ended %ld episodes", nm, bad_twin);
    CHECK_MSG(bad_plain == 0, "%s: %ld steps observed differently with the buffers attached", nm, bad_plain);
    s->final_obs = NULL;
    s->final_extra = NULL;
    free(fobs);
    free(act);
    mr_env_free(e);
    mr_env_free(twin);
    mr_env_free(plain);
}

/* ========================================================== 2. the trainer */

static void cp_config(mr_config *c, int truncation) {
    mr_config_default(c);
    c->env.name = MR_ENV_CARTPOLE;
    mr_config_follow_env(c);
    c->env.num_envs = 8;
    c->env.max_episode_steps = 15;
    c->policy.num_mlp = 2;
    c->policy.mlp_widths[0] = 16;
    c->policy.mlp_widths[1] = 16;
    c->policy.critic_hidden = 16;
    c->policy.popart = 1;
    c->ppo.rollout_steps = 64;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 2;
    c->ppo.gamma = 0.97;
    c->ppo.gae_lambda = 0.9;
    c->ppo.norm_adv = 0;
    c->ppo.truncation = truncation;
    c->threads = 1;
    c->device = MR_DEVICE_CPU;
    c->seed = 21;
    c->total_steps = 8 * 64 * 10;
}

static mr_trainer *make_trainer(const mr_config *c) {
    mr_trainer *t = NULL;
    mr_error e;
    if (mr_trainer_create(c, &t, &e) != MR_OK) {
        fprintf(stderr, "create: %s\n", e.msg);
        exit(1);
    }
    return t;
}

/* The float64 GAE of rewards r, values v, bootstrap last, cut at done. */
static void gae_ref(int T, int N, const double *r, const float *v, const float *last, const uint8_t *done,
                    double gamma, double lambda, double *adv, double *ret) {
    for (int i = 0; i < N; i++) {
        double a = 0.0;
        for (int t = T - 1; t >= 0; t--) {
            const size_t k = (size_t)t * N + i;
            const double next = t == T - 1 ? last[i] : v[k + N];
            const double nd = done[k] ? 0.0 : 1.0;
            const double delta = r[k] + gamma * next * nd - v[k];
            a = delta + gamma * lambda * nd * a;
            adv[k] = a;
            ret[k] = a + v[k];
        }
    }
}

/* Two updates of a trainer for `truncation`; the second rollout against a
 * reference env stepped along and a twin trainer one update behind. */
static void test_trainer(int truncation, int expect_bootstrap) {
    mr_config c;
    cp_config(&c, truncation);
    mr_trainer *t = make_trainer(&c), *twin = make_trainer(&c);
    const int T = c.ppo.rollout_steps, N = c.env.num_envs;
    CHECK_MSG(t->KF == (expect_bootstrap ? (T - 1) / 15 + 1 : 0), "KF = %d", t->KF);
    mr_env *env = make_env(&c.env, c.seed, 1);
    mr_error e;
    mr_metrics m;
    roll r;
    const size_t B = (size_t)T * N;
    double *rref = malloc(B * 8), *aref = malloc(B * 8), *retref = malloc(B * 8);
    long truncs = 0, terms = 0, bad_env = 0, bad_rew = 0, bad_done = 0, bad_adv = 0;
    double worst_rew = 0.0, worst_adv = 0.0;
    float fin[4], vfin;
    for (int u = 0; u < 2; u++) {
        CHECK(mr_trainer_update(t, &m, &e) == MR_OK);
        CHECK(roll_read(t, &r));
        for (int step = 0; step < T; step++) {
            for (int i = 0; i < N; i++) {
                const size_t k = (size_t)step * N + i;
                bad_env += memcmp(r.obs + k * 16, env->s.obs_f + (size_t)i * 4, 16) != 0;
            }
            double pre[8][4];
            memcpy(pre, mr_cartpole_of(&env->s)->state, sizeof pre);
            uint8_t act[8];
            for (int i = 0; i < N; i++) act[i] = r.act[(size_t)step * N + i];
            CHECK(mr_env_step(env, act, &e) == MR_OK);
            for (int i = 0; i < N; i++) {
                const size_t k = (size_t)step * N + i;
                const int term = env->s.terminated[i], trunc = env->s.truncated[i];
                bad_done += r.done[k] != (uint8_t)(term | trunc);
                rref[k] = env->s.reward[i];
                if (u == 0) continue;
                truncs += trunc && !term;
                terms += term;
                if (trunc && !term && expect_bootstrap) {   /* the state the step reached, by the dynamics */
                    double st[4];
                    memcpy(st, pre[i], sizeof st);
                    CHECK(mr_cartpole_step_state(st, act[i]) == 0);
                    mr_cartpole_obs(st, fin);
                    CHECK(mr_trainer_infer(twin, (const uint8_t *)fin, NULL, 1, NULL, &vfin, &e) == MR_OK);
                    rref[k] += c.ppo.gamma * (double)vfin;
                }
                const double d = fabs((double)r.rew[k] - rref[k]);
                if (d > worst_rew) worst_rew = d;
                bad_rew += d > 1e-5 * (1.0 + fabs(rref[k]));
            }
        }
        if (u == 1) {
            gae_ref(T, N, rref, r.val, r.last_value, r.done, c.ppo.gamma, c.ppo.gae_lambda, aref, retref);
            for (size_t k = 0; k < B; k++) {
                const double d = fmax(fabs(r.adv[k] - aref[k]), fabs(r.ret[k] - retref[k]));
                if (d > worst_adv) worst_adv = d;
                bad_adv += d > 1e-4 * (1.0 + fabs(retref[k]));
            }
        }
        roll_free(&r);
        if (u == 0) CHECK(mr_trainer_update(twin, &m, &e) == MR_OK);   /* the weights rollout 2 acts with */
    }
    double pm, ps;
    CHECK(mr_trainer_value_scale(twin, &pm, &ps, &e) == MR_OK);
    const char *lbl = expect_bootstrap ? "bootstrap" : "end";
    CHECK_MSG(pm != 0.0 && ps != 1.0, "%s: PopArt's statistics are still (%g, %g): the check is too weak", lbl, pm, ps);
    CHECK_MSG(truncs >= N && terms >= N, "%s: %ld truncations and %ld terminations: too few to check", lbl, truncs,
              terms);
    CHECK_MSG(bad_env == 0, "%s: %ld observations differ from the reference env's", lbl, bad_env);
    CHECK_MSG(bad_done == 0, "%s: %ld done bits are not terminated | truncated", lbl, bad_done);
    CHECK_MSG(bad_rew == 0, "%s: %ld rewards differ from r (+ gamma V(final) when truncated), worst %.3g", lbl, bad_rew,
              worst_rew);
    CHECK_MSG(bad_adv == 0, "%s: %ld advantages/returns differ from the float64 GAE, worst %.3g", lbl, bad_adv,
              worst_adv);
    printf("%s: %ld truncated and %ld terminated steps; rewards within %.2g, GAE within %.2g\n", lbl, truncs, terms,
           worst_rew, worst_adv);
    free(rref);
    free(aref);
    free(retref);
    mr_env_free(env);
    mr_trainer_free(t);
    mr_trainer_free(twin);
}

/* auto: the environment's choice; foraging's stays "end" (its bits). */
static void test_auto(void) {
    mr_config c;
    cp_config(&c, MR_TRUNCATION_AUTO);
    mr_trainer *t = make_trainer(&c);
    CHECK_MSG(t->KF == (64 - 1) / 15 + 1, "cartpole, auto: KF = %d", t->KF);
    mr_trainer_free(t);
    mr_config_default(&c);
    c.env.num_envs = 4;
    c.env.grid_size = 16;
    c.env.density_min = 4;
    c.env.density_max = 8;
    c.env.max_episode_steps = 20;
    c.policy.num_conv = 1;
    c.policy.conv_channels[0] = 2;
    c.policy.hidden = 8;
    c.policy.critic_hidden = 8;
    c.ppo.rollout_steps = 8;
    c.device = MR_DEVICE_CPU;
    c.threads = 1;
    CHECK(c.ppo.truncation == MR_TRUNCATION_AUTO);
    t = make_trainer(&c);
    CHECK_MSG(t->KF == 0 && t->d.env.final_obs == NULL, "foraging, auto: KF = %d", t->KF);
    mr_trainer_free(t);
    c.ppo.truncation = MR_TRUNCATION_BOOTSTRAP;
    t = make_trainer(&c);
    CHECK_MSG(t->KF == 1 && t->d.env.final_obs != NULL, "foraging, bootstrap: KF = %d", t->KF);
    mr_metrics m;
    mr_error e;
    CHECK(mr_trainer_update(t, &m, &e) == MR_OK);
    mr_trainer_free(t);
}

int main(void) {
    test_env_final(MR_ENV_FORAGING, 7);
    test_env_final(MR_ENV_REACH, 7);
    test_env_final(MR_ENV_CARTPOLE, 7);
    test_env_final(MR_ENV_PENDULUM, 7);
    test_env_final(MR_ENV_SNAKE, 7);
    test_env_final(MR_ENV_DIALS, 7);
    test_trainer(MR_TRUNCATION_BOOTSTRAP, 1);
    test_trainer(MR_TRUNCATION_END, 0);
    test_auto();
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

/*
 * test_env_dials.c - the `dials` environment (envs/dials.h) against its
 * rules as the header's comment states them, written out here
 * independently: a model of each instance (two dials' positions and
 * targets as plain integers) steps with the literal action table (0 down
 * one, 1 stay, 2 up one; a byte outside [0, 3) reads as a % 3; a dial at
 * 0 or 10 stays there), pays 0.5 for each dial on its target after the
 * move, counts `matched` when both are, truncates at max_episode_steps and
 * draws a new episode with the documented keying (position of dial k on
 * (seed, instance, resets, PLACE, 2k) below 11, its target on index
 * 2k + 1); after every step the environment must agree: reward, end flags,
 * positions, targets, the observation ((2p - 10) / 10 for each position and
 * target), the episode's steps and return, the log (episodes, returns,
 * `matched` in ended episodes and in all). Hand-set dials at both ends;
 * the same bytes on 1 and 2 threads through the public mr_env (its
 * multi-discrete mr_env_step, and what it refuses); the spaces it declares
 * and that the policy takes them (mr_net_fits_spaces), with the
 * multi-discrete shapes that check refuses.
 */
#include "env_check.h"
#include "registry.h"     /* the environments' own state (mr_dials_of) */
#include "net_layout.h"   /* mr_net_fits_spaces */

enum { K = 2, POS = 11 };
static const int MOVE[3] = {-1, 0, 1};   /* the action table, literally */

static mr_env_config dials_cfg(int n, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, 16, 1, 1, 2, 50, max_steps);
    c.name = MR_ENV_DIALS;
    return c;
}

typedef struct {
    int pos[K], target[K], steps, matched;
    uint32_t resets;
    float ret;
} model;

static void model_start(model *m, uint64_t seed, uint32_t key) {
    for (int k = 0; k < K; k++) {
        m->pos[k] = (int)mr_rng_below(seed, key, m->resets, MR_RNG_PLACE, (uint32_t)(2 * k), POS);
        m->target[k] = (int)mr_rng_below(seed, key, m->resets, MR_RNG_PLACE, (uint32_t)(2 * k + 1), POS);
    }
    m->resets++;
    m->steps = 0;
    m->matched = 0;
    m->ret = 0.0f;
}

static float unit(int p) { return (float)((double)(2 * p - 10) / 10.0); }

/* the environment's instance i agrees with the model */
static int agrees(const model *m, const mr_env_state *s, int i) {
    const mr_dials *d = mr_dials_of(s);
    int ok = s->steps[i] == m->steps && d->resets[i] == m->resets && s->ep_return[i] == m->ret;
    for (int k = 0; k < K; k++) {
        ok &= d->pos[i * K + k] == m->pos[k] && d->target[i * K + k] == m->target[k];
        ok &= s->obs_f[i * 2 * K + 2 * k] == unit(m->pos[k]) && s->obs_f[i * 2 * K + 2 * k + 1] == unit(m->target[k]);
    }
    return ok;
}

static void test_steps(int max_steps) {
    enum { N = 24, STEPS = 400 };
    const uint64_t seed = 17;
    mr_env_config c = dials_cfg(N, max_steps);
    mr_env *e = make_env(&c, seed, 1);
    const mr_env_state *s = &e->s;
    model m[N];
    long bad = 0, bad_reset = 0, ends = 0, matched_total = 0, at_edge = 0;
    double ret_sum = 0.0;
    long matched_ended = 0;
    memset(m, 0, sizeof m);
    for (int i = 0; i < N; i++) {
        model_start(&m[i], seed, (uint32_t)i);
        bad_reset += !agrees(&m[i], s, i);
    }
    CHECK_MSG(bad_reset == 0, "reset: %ld instances differ from the documented draws", bad_reset);
    uint32_t lcg = 99;
    uint8_t act[N * K];
    for (int t = 0; t < STEPS; t++) {
        for (int j = 0; j < N * K; j++) {
            lcg = lcg * 1664525u + 1013904223u;
            /* mostly toward the target (so dials match), some random bytes (a % 3 past 2 via the raw state) */
            act[j] = (uint8_t)((lcg >> 24) % 3);
            const int i = j / K, k = j % K;
            if ((lcg >> 20) % 4 != 0) act[j] = (uint8_t)(m[i].pos[k] < m[i].target[k] ? 2 : m[i].pos[k] > m[i].target[k] ? 0 : 1);
        }
        CHECK(mr_env_step(e, act, NULL) == MR_OK);
        for (int i = 0; i < N; i++) {
            model *x = &m[i];
            int on = 0;
            for (int k = 0; k < K; k++) {
                int p = x->pos[k] + MOVE[act[i * K + k] % 3];
                at_edge += p < 0 || p > POS - 1;
                p = p < 0 ? 0 : p > POS - 1 ? POS - 1 : p;
                x->pos[k] = p;
                on += p == x->target[k];
            }
            const float r = 0.5f * (float)on;
            x->matched += on == K;
            matched_total += on == K;
            x->steps++;
            x->ret += r;
            const int trunc = max_steps > 0 && x->steps >= max_steps;
            bad += s->reward[i] != r || s->terminated[i] != 0 || s->truncated[i] != trunc;
            if (trunc) {
                ends++;
                ret_sum += x->ret;
                matched_ended += x->matched;
                model_start(x, seed, (uint32_t)i);
            }
            bad += !agrees(x, s, i);
        }
    }
    mr_env_log lg;
    mr_env_log_reduce(s->log, N, &lg);
    CHECK_MSG(bad == 0, "max_episode_steps %d: %ld differences from the rules", max_steps, bad);
    CHECK_MSG(lg.episodes == ends && lg.deaths == 0, "log: %d episodes, %d deaths (model: %ld, 0)", lg.episodes,
              lg.deaths, ends);
    CHECK_MSG(lg.count[MR_DIALS_MATCHED] == matched_ended && lg.count_total[MR_DIALS_MATCHED] == matched_total,
              "log: matched %d in ended episodes, %d in all (model: %ld, %ld)", lg.count[0], lg.count_total[0],
              matched_ended, matched_total);
    CHECK_NEAR(lg.return_sum, ret_sum, 1e-3, 1e-6);
    CHECK_MSG(matched_total > N && at_edge > 0, "too weak: %ld matched steps, %ld pushes past an end", matched_total,
              at_edge);
    CHECK_MSG(max_steps == 0 ? ends == 0 : ends >= N, "%ld episodes ended with max_episode_steps %d", ends, max_steps);
    mr_env_free(e);
}

/* hand-set dials: at both ends, bytes past 2, on and off target */
static void test_hand(void) {
    mr_env_config c = dials_cfg(1, 0);
    mr_env *e = make_env(&c, 3, 1);
    mr_env_state *s = &e->s;
    mr_dials *d = mr_dials_of(s);
    d->pos[0] = 0;
    d->pos[1] = 10;
    d->target[0] = 1;
    d->target[1] = 10;
    uint8_t a[2] = {0, 2};   /* push both past their ends: they stay; dial 1 is on target */
    CHECK(mr_env_step(e, a, NULL) == MR_OK);
    CHECK(d->pos[0] == 0 && d->pos[1] == 10 && s->reward[0] == 0.5f);
    CHECK(s->obs_f[0] == -1.0f && s->obs_f[1] == unit(1) && s->obs_f[2] == 1.0f && s->obs_f[3] == 1.0f);
    a[0] = 2;
    a[1] = 1;   /* dial 0 up onto its target, dial 1 stays: both on, matched */
    CHECK(mr_env_step(e, a, NULL) == MR_OK);
    CHECK(d->pos[0] == 1 && d->pos[1] == 10 && s->reward[0] == 1.0f && s->log[0].count_total[0] == 1);
    /* a byte past 2 reads as a % 3 (the registry's step, below the public check): 5 = up, 3 = down */
    const uint8_t raw[2] = {5, 3};
    mr_env_step_at(s, 0, raw);
    CHECK(d->pos[0] == 2 && d->pos[1] == 9 && s->reward[0] == 0.0f);
    CHECK(s->steps[0] == 3 && s->truncated[0] == 0);
    mr_env_free(e);
}

static void test_threads(void) {
    enum { N = 2048, STEPS = 60 };
    mr_env_config c = dials_cfg(N, 13);
    mr_env *a = make_env(&c, 8, 1), *b = make_env(&c, 8, 2);
    uint8_t *act = malloc(N * K);
    uint32_t lcg = 5;
    long bad = 0;
    for (int t = 0; t < STEPS; t++) {
        for (int j = 0; j < N * K; j++) {
            lcg = lcg * 1664525u + 1013904223u;
            act[j] = (uint8_t)((lcg >> 24) % 3);
        }
        CHECK(mr_env_step(a, act, NULL) == MR_OK);
        CHECK(mr_env_step(b, act, NULL) == MR_OK);
        bad += env_first_difference(a, b) != NULL;
    }
    CHECK_MSG(bad == 0, "1 vs 2 threads: %ld steps left a buffer different", bad);
    /* the public step's refusals: a component past its choices, named */
    act[2 * 7 + 1] = 3;
    mr_error err;
    CHECK(mr_env_step(a, act, &err) == MR_ERR_ARG && msg_has(&err, "component 1 of instance 7") &&
          msg_has(&err, "accepted 0 .. 2"));
    free(act);
    mr_env_free(a);
    mr_env_free(b);
}

static void test_spaces(void) {
    mr_env_config c = dials_cfg(4, 40);
    mr_env_spaces sp;
    mr_error err;
    CHECK(mr_env_spaces_of(&c, &sp, &err) == MR_OK);
    CHECK(sp.obs.kind == MR_SPACE_VECTOR && sp.obs.shape[0] == 4);
    CHECK(sp.act.kind == MR_SPACE_MULTI_DISCRETE && sp.act.n == 2 && sp.act.nvec[0] == 3 && sp.act.nvec[1] == 3);
    CHECK(sp.critic_extra == 0 && sp.critic_view == 0 && sp.counters == 1 && !strcmp(sp.counter_names[0], "matched"));
    CHECK(sp.success == MR_SUCCESS_COUNTER && sp.success_counter == 0 && sp.eval == MR_EVAL_EPISODIC);
    CHECK(sp.step_limit == 40 && sp.bootstrap_truncation == 1);
    CHECK(!strcmp(mr_env_name_of(MR_ENV_DIALS), "dials") && mr_env_from_name("dials") == MR_ENV_DIALS);
    CHECK_MSG(mr_net_fits_spaces(&sp, "dials", &err) == MR_OK, "%s", err.msg);
    /* what the multi-discrete head refuses: a component of 1 choice, more than MR_MAX_ACTIONS logits */
    mr_env_spaces bad = sp;
    bad.act.nvec[1] = 1;
    CHECK(mr_net_fits_spaces(&bad, "x", &err) == MR_ERR_ARG && msg_has(&err, "component 1 of 1 choices"));
    bad = sp;
    bad.act.n = 3;
    bad.act.nvec[2] = 3;
    CHECK(mr_net_fits_spaces(&bad, "x", &err) == MR_ERR_ARG && msg_has(&err, "9 choices in all") &&
          msg_has(&err, "at most 8"));
    /* the config follows it: the actor has 3 + 3 outputs */
    mr_config cfg;
    mr_config_default(&cfg);
    cfg.env.name = MR_ENV_DIALS;
    mr_config_follow_env(&cfg);
    CHECK(cfg.policy.num_actions == 6 && cfg.policy.obs_vector == 4);
    CHECK_MSG(mr_config_validate(&cfg, &err) == MR_OK, "%s", err.msg);
}

int main(void) {
    test_steps(40);
    test_steps(7);
    test_steps(0);
    test_hand();
    test_threads();
    test_spaces();
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

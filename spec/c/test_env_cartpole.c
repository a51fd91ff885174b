/*
 * test_env_cartpole.c - `cartpole` inside the engine (envs/cartpole.h's
 * state, registry.h, the CPU loop, the public mr_env object) against the
 * instance dynamics alone, run here on plain arrays beside it (those are
 * checked against Gymnasium's CartPole-v1 by spec/gym_reference.py):
 *   - a full reset draws each instance's state with its documented keying
 *     (seed, global index, resets done) and writes it as the observation;
 *   - every step: the same state, observation, reward 1 and end flags as
 *     the dynamics; a terminated or truncated episode restarts at once
 *     with the next draw; truncation at 500 (or a smaller
 *     env.max_episode_steps); the logs count every ended episode;
 *   - the same bytes for 1 and 2 threads; the spaces it declares; its
 *     checkpoint sections; what it refuses;
 *   - the cpu backend's vectorised block step (cpu/cartpole_cpu.c) against
 *     the per-instance definition (registry.h's mr_env_step_at, which CUDA
 *     runs) on the same state, byte for byte in every buffer and log, over
 *     many instances and steps, with states set wide (|theta| to 0.4, NaN,
 *     infinities, signed zeros, tiny angles) so every path of the block
 *     step (libm's sin and cos, restarts, the last partial block) runs.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_cartpole_of) */
#include "sincos_small.h"   /* which angles the block step takes from libm */

static mr_env_config cp_cfg(int n, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, 16, 1, 1, 2, 50, max_steps);
    c.name = MR_ENV_CARTPOLE;
    return c;
}

/* the actions: a pole-balancing push (toward the lean) or a coin flip */
static uint8_t act_of(const double *st, uint32_t *lcg, int balance) {
    *lcg = *lcg * 1664525u + 1013904223u;
    if (balance && (*lcg >> 28) != 0) return st[2] + 0.5 * st[3] > 0;   /* 15 in 16 balanced */
    return (uint8_t)(*lcg >> 31);
}

static void test_steps(int max_steps, int expect_limit) {
    enum { N = 48, STEPS = 1500 };
    mr_env_config c = cp_cfg(N, max_steps);
    mr_env *e = make_env(&c, 9, 1);
    const mr_env_state *s = &e->s;
    double ref[N][4];
    uint32_t resets[N];
    int steps[N];
    long ends = 0, terms = 0, truncs = 0, bad = 0, longest = 0;
    for (int i = 0; i < N; i++) {
        mr_cartpole_reset_state(ref[i], 9, (uint32_t)i, 0);
        resets[i] = 1;
        steps[i] = 0;
        for (int k = 0; k < 4; k++) bad += s->obs_f[i * 4 + k] != (float)ref[i][k];
    }
    CHECK_MSG(bad == 0, "reset: %ld observation components differ from the documented draw", bad);
    uint32_t lcg = 7;
    uint8_t act[N];
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++) act[i] = act_of(ref[i], &lcg, i % 4 != 0);
        CHECK(mr_env_step(e, act, NULL) == MR_OK);
        for (int i = 0; i < N; i++) {
            const int term = mr_cartpole_step_state(ref[i], act[i]);
            const int trunc = !term && ++steps[i] >= expect_limit;
            bad += s->reward[i] != 1.0f || s->terminated[i] != term || s->truncated[i] != trunc;
            if (term || trunc) {
                ends++;
                terms += term;
                truncs += trunc;
                if (steps[i] + !trunc > longest) longest = steps[i] + !trunc;
                mr_cartpole_reset_state(ref[i], 9, (uint32_t)i, resets[i]++);
                steps[i] = 0;
            }
            for (int k = 0; k < 4; k++) bad += s->obs_f[i * 4 + k] != (float)ref[i][k];
            bad += mr_cartpole_of(s)->resets[i] != resets[i] || s->steps[i] != steps[i];
        }
    }
    CHECK_MSG(bad == 0, "max_episode_steps %d: %ld differences from the dynamics", max_steps, bad);
    CHECK_MSG(terms > 0 && truncs > 0 && longest == expect_limit,
              "the run must see both ends: %ld terminated, %ld truncated, longest %ld (limit %d)", terms, truncs,
              longest, expect_limit);
    mr_env_log sum;
    CHECK(mr_env_log_summary(e, &sum, NULL) == MR_OK);
    CHECK_MSG(sum.episodes == ends && sum.deaths == terms && sum.steps_total == (long)N * STEPS,
              "log: %d episodes %d deaths, counted %ld %ld", sum.episodes, sum.deaths, ends, terms);
    mr_env_free(e);
}

static void test_threads_and_spaces(void) {
    mr_env_config c = cp_cfg(1024, 0);
    mr_env *a = make_env(&c, 3, 1), *b = make_env(&c, 3, 2);
    uint8_t act[1024];
    uint32_t lcg = 1;
    for (int t = 0; t < 300; t++) {
        for (int i = 0; i < 1024; i++) { lcg = lcg * 1664525u + 1013904223u; act[i] = (uint8_t)(lcg >> 31); }
        CHECK(mr_env_step(a, act, NULL) == MR_OK && mr_env_step(b, act, NULL) == MR_OK);
    }
    CHECK(memcmp(mr_cartpole_of(&a->s)->state, mr_cartpole_of(&b->s)->state, 1024 * 4 * sizeof(double)) == 0);
    CHECK(memcmp(a->s.obs_f, b->s.obs_f, 1024 * 4 * sizeof(float)) == 0);

    mr_env_spaces sp;
    CHECK(mr_env_spaces_of(&c, &sp, NULL) == MR_OK);
    CHECK(sp.obs.kind == MR_SPACE_VECTOR && sp.obs.shape[0] == 4 && sp.act.kind == MR_SPACE_DISCRETE &&
          sp.act.n == 2 && sp.critic_extra == 0 && sp.counters == 0);
    CHECK(mr_env_num_actions(MR_ENV_CARTPOLE) == 2 && mr_env_from_name("cartpole") == MR_ENV_CARTPOLE);
    mr_env_section sec[MR_ENV_MAX_SECTIONS];
    const int k = mr_env_sections(&a->s, sec);
    CHECK(k == 6 && strcmp(sec[0].name, "env.state") == 0 && sec[0].bytes == 1024 * 4 * sizeof(double));

    /* refusals: another mode, an action outside 0 .. 1, the grid worlds' view */
    mr_error err;
    mr_env *bad = NULL;
    mr_env_config m = c;
    m.mode = MR_MODE_PROXY;
    CHECK(mr_env_create(&m, 1, MR_DEVICE_CPU, 1, &bad, &err) == MR_ERR_ARG && msg_has(&err, "cartpole has only"));
    act[5] = 2;
    CHECK(mr_env_step(a, act, &err) == MR_ERR_ARG && msg_has(&err, "accepted 0 .. 1"));
    mr_env_view v;
    memset(&v, 0, sizeof v);
    int32_t xs[1024];
    v.x = xs;
    CHECK(mr_env_read(a, &v, &err) == MR_ERR_ARG && msg_has(&err, "cartpole has no x"));
    mr_env_free(a);
    mr_env_free(b);
}

static double wide_value(uint32_t *lcg, int k) {
    static const double odd[] = {0.0, -0.0, 1e-300, -1e-17, 3e-9, 0.25, -0.25, 0.2500000000000001, 0.3,
                                 -0.41, NAN, INFINITY, -INFINITY, 0.125, -0.1249999999999999};
    *lcg = *lcg * 1664525u + 1013904223u;
    const double u = (*lcg >> 8) * (1.0 / 16777216.0);
    if ((*lcg & 31) == 0) return odd[(*lcg >> 5) % (sizeof odd / sizeof odd[0])];
    return k == 2 ? 0.8 * u - 0.4 : 6.0 * u - 3.0;
}

static void test_block_step_against_definition(void) {
    enum { N = 1003, STEPS = 700 };   /* not a multiple of 4, 8 or 64: every loop's tail */
    mr_env_config c = cp_cfg(N, 0);
    mr_env *blk = make_env(&c, 5, 2), *one = make_env(&c, 5, 1);
    double *sb = mr_cartpole_of(&blk->s)->state, *so = mr_cartpole_of(&one->s)->state;
    uint8_t act[N];
    uint32_t lcg = 11;
    long slow = 0, angles = 0, ends = 0;
    const char *diff = NULL;
    int t = 0;
    for (; t < STEPS && !diff; t++) {
        if (t % 100 == 50)   /* wide states into a quarter of the instances, the same in both */
            for (int i = 0; i < N; i += 4)
                for (int k = 0; k < 4; k++) so[i * 4 + k] = sb[i * 4 + k] = wide_value(&lcg, k);
        for (int i = 0; i < N; i++) {
            double sn, cs;
            slow += !mr_sincos_small(sb[i * 4 + 2], &sn, &cs);
            act[i] = act_of(sb + i * 4, &lcg, i % 3 != 0);
        }
        angles += N;
        CHECK(mr_env_step(blk, act, NULL) == MR_OK);
        for (int i = 0; i < N; i++) mr_env_step_at(&one->s, i, act);
        for (int i = 0; i < N; i++) ends += blk->s.terminated[i] | blk->s.truncated[i];
        diff = env_first_difference(blk, one);
    }
    CHECK_MSG(diff == NULL, "step %d: the block step's %s differs from the per-instance step's", t, diff);
    CHECK_MSG(slow > angles / 200 && slow < angles / 5 && ends > (long)N * STEPS / 100,
              "the run must exercise libm's sin/cos and restarts: %ld of %ld angles from libm, %ld ends", slow,
              angles, ends);
    mr_env_free(blk);
    mr_env_free(one);
}

int main(void) {
    test_steps(0, 500);     /* CartPole-v1's limit */
    test_steps(512, 500);   /* a larger setting keeps it */
    test_steps(60, 60);     /* a smaller one truncates sooner */
    test_threads_and_spaces();
    test_block_step_against_definition();
    printf("test_env_cartpole: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

/*
 * test_env_pendulum.c - `pendulum` inside the engine (envs/pendulum.h's
 * state, registry.h's box step, the CPU loop, mr_env_step_box) against the
 * instance dynamics alone, run here on plain arrays beside it (those are
 * checked against Gymnasium's Pendulum-v1 by spec/gym_reference.py): the
 * documented reset draws, every step's state, observation and reward, the
 * truncation at 200 (or a smaller env.max_episode_steps) with the next
 * episode's draw, torques outside [-2, 2] clipped, the logs, the same bytes
 * for 1 and 2 threads, the declared spaces, and the refusals.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_pendulum_of) */

static mr_env_config pd_cfg(int n, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, 16, 1, 1, 2, 50, max_steps);
    c.name = MR_ENV_PENDULUM;
    return c;
}

static void test_steps(int max_steps, int limit) {
    enum { N = 40, STEPS = 700 };
    mr_env_config c = pd_cfg(N, max_steps);
    mr_env *e = make_env(&c, 4, 1);
    const mr_env_state *s = &e->s;
    double ref[N][2];
    uint32_t resets[N];
    long bad = 0, ends = 0;
    for (int i = 0; i < N; i++) {
        mr_pendulum_reset_state(ref[i], 4, (uint32_t)i, 0);
        resets[i] = 1;
    }
    uint64_t lcg = 5;
    float u[N];
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            u[i] = (float)((double)(lcg >> 11) / 9007199254740992.0 * 8.0 - 4.0);   /* [-4, 4): clipped half the time */
        }
        CHECK(mr_env_step_box(e, u, NULL) == MR_OK);
        for (int i = 0; i < N; i++) {
            const float r = mr_pendulum_step_state(ref[i], u[i]);
            const int trunc = (t + 1) % limit == 0;
            bad += s->reward[i] != r || s->terminated[i] != 0 || s->truncated[i] != trunc;
            if (trunc) {
                ends++;
                mr_pendulum_reset_state(ref[i], 4, (uint32_t)i, resets[i]++);
            }
            float o[3];
            mr_pendulum_obs(ref[i], o);
            bad += memcmp(o, s->obs_f + i * 3, sizeof o) != 0 || mr_pendulum_of(s)->resets[i] != resets[i];
        }
    }
    CHECK_MSG(bad == 0, "max_episode_steps %d: %ld differences from the dynamics", max_steps, bad);
    mr_env_log sum;
    CHECK(mr_env_log_summary(e, &sum, NULL) == MR_OK);
    CHECK_MSG(sum.episodes == ends && sum.deaths == 0 && ends == (long)N * (STEPS / limit),
              "log: %d episodes, %ld counted", sum.episodes, ends);
    mr_env_free(e);
}

static void test_threads_spaces_refusals(void) {
    mr_env_config c = pd_cfg(512, 0);
    mr_env *a = make_env(&c, 2, 1), *b = make_env(&c, 2, 2);
    float u[512];
    for (int t = 0; t < 250; t++) {
        for (int i = 0; i < 512; i++) u[i] = (float)((i * 7 + t * 3) % 9) - 4.0f;
        CHECK(mr_env_step_box(a, u, NULL) == MR_OK && mr_env_step_box(b, u, NULL) == MR_OK);
    }
    CHECK(memcmp(mr_pendulum_of(&a->s)->state, mr_pendulum_of(&b->s)->state, 512 * 2 * sizeof(double)) == 0);
    mr_env_spaces sp;
    CHECK(mr_env_spaces_of(&c, &sp, NULL) == MR_OK);
    CHECK(sp.obs.kind == MR_SPACE_VECTOR && sp.obs.shape[0] == 3 && sp.act.kind == MR_SPACE_BOX && sp.act.n == 1 &&
          sp.act.low[0] == -2.0f && sp.act.high[0] == 2.0f && sp.counters == 0);
    mr_error err;
    uint8_t bytes[512] = {0};
    CHECK(mr_env_step(a, bytes, &err) == MR_ERR_ARG && msg_has(&err, "use mr_env_step_box"));
    CHECK(mr_env_step_box(a, NULL, &err) == MR_ERR_ARG && msg_has(&err, "want 512 floats"));
    mr_env_config f = pd_cfg(4, 0);
    f.name = MR_ENV_FORAGING;
    mr_env *g = make_env(&f, 1, 1);
    CHECK(mr_env_step_box(g, u, &err) == MR_ERR_ARG && msg_has(&err, "use mr_env_step"));
    mr_env_free(g);
    mr_env_free(a);
    mr_env_free(b);
}

int main(void) {
    test_steps(0, 200);   /* Pendulum-v1's limit */
    test_steps(70, 70);   /* a smaller one */
    test_threads_spaces_refusals();
    printf("test_env_pendulum: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

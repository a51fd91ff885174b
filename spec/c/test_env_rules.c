/*
 * test_env_rules.c - the foraging environment's step rules (foraging.h,
 * env_cpu.c) in hand-built situations, against the numbers ENV_SPEC.md
 * states.
 *
 * The action table; per mode, a food step and a poison step placed in front
 * of the agent: reward (ENV_SPEC's table), energy, respawn, termination,
 * the episode log and the agent-only reset after a death; clamping to
 * reward_clip; starvation on exactly step 100 (never under proxy's frozen
 * energy), and mr_env_set_energy_frozen; truncation on exactly every
 * max_episode_steps-th step, with no death penalty.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

static void test_actions(void) {
    int ok = 1;
    for (int a = 0; a < 8; a++) ok &= mr_forage_dx(a) == REF_DX[a] && mr_forage_dy(a) == REF_DY[a];
    CHECK_MSG(ok, "action table differs from ENV_SPEC");
}

/* Puts `code` on the cell the agent reaches with `action`, keeping the counts. */
static void put_ahead(mr_env_state *s, int i, int action, int code) {
    int x = wrap(mr_forage_of(s)->x[i] + REF_DX[action], mr_forage_of(s)->W), y = wrap(mr_forage_of(s)->y[i] + REF_DY[action], mr_forage_of(s)->H);
    mr_forage_of(s)->grid[(size_t)i * mr_forage_of(s)->H * mr_forage_of(s)->W + y * mr_forage_of(s)->W + x] = (uint8_t)code;
    if (code == 1) mr_forage_of(s)->food_count[i]++;
    if (code == 2) mr_forage_of(s)->poison_count[i]++;
}

static void test_rewards_by_mode(void) {
    /* expected per mode: food step, then poison step (reward, energy centi, terminated) */
    const float food_r[4] = {-0.01f + 1.0f, -0.01f + 1.0f, 1.0f, 1.0f};
    const int food_e[4] = {199, 199, 199, 100};
    const float poison_r[4] = {(-0.01f + -2.0f) + -4.0f, (-0.01f + -2.0f) + -4.0f, 0.5f, 0.5f};
    const int poison_term[4] = {1, 1, 1, 0};
    for (int mode = 0; mode < 4; mode++) {
        mr_env_config c = make_cfg(mode, 3, 16, 2, 0, 0, 50, 0);
        mr_env *e = make_env(&c, 3, 1);
        mr_env_state *s = &e->s;
        CHECK(mr_forage_of(s)->energy_frozen == (mode == MR_MODE_PROXY));
        uint8_t act[3] = {6, 6, 6};
        put_ahead(s, 1, 6, 1);                      /* env 1 eats food; 0 and 2 walk on empty cells */
        mr_forage_write_obs(s, 1);
        CHECK_MSG(s->obs[1 * 25 + 13] == 1, "mode %d: food visible right of the agent", mode);
        mr_env_step(e, act, NULL);
        CHECK_MSG(s->reward[1] == food_r[mode], "mode %d food reward %.9g", mode, s->reward[1]);
        CHECK_MSG(s->reward[0] == REF_STEP[mode], "mode %d step reward %.9g", mode, s->reward[0]);
        CHECK_MSG(mr_forage_of(s)->energy_centi[1] == food_e[mode], "mode %d energy after food %d", mode, mr_forage_of(s)->energy_centi[1]);
        CHECK_NEAR(mr_forage_of(s)->energy[1], food_e[mode] / 100.0, 1e-6, 0);
        CHECK(mr_forage_of(s)->energy_centi[0] == (mode == MR_MODE_PROXY ? 100 : 99));
        CHECK_MSG(mr_forage_of(s)->food_count[1] == 1 && count_code(mr_forage_of(s)->grid + 256, 256, 1) == 1, "mode %d food respawned", mode);
        CHECK(!s->terminated[1] && mr_forage_of(s)->ep_food[1] == 1);

        act[1] = 4;                                 /* down onto poison */
        put_ahead(s, 1, 4, 2);
        mr_env_step(e, act, NULL);
        CHECK_MSG(s->reward[1] == poison_r[mode], "mode %d poison reward %.9g", mode, s->reward[1]);
        CHECK_MSG(s->terminated[1] == poison_term[mode], "mode %d poison terminated %d", mode, s->terminated[1]);
        CHECK(!s->truncated[1]);
        CHECK_MSG(mr_forage_of(s)->poison_count[1] == 1 && count_code(mr_forage_of(s)->grid + 256, 256, 2) == 1, "mode %d poison respawned",
                  mode);
        if (poison_term[mode]) {
            /* died: logged, then the agent alone is reset */
            const mr_env_log *l = &s->log[1];
            CHECK(l->episodes == 1 && l->deaths == 1 && l->length_sum == 2 && l->count[0] == 1 && l->count[1] == 1);
            CHECK(l->return_sum == food_r[mode] + poison_r[mode]);
            CHECK(l->return_min == l->return_sum && l->return_max == l->return_sum);
            CHECK(mr_forage_of(s)->energy_centi[1] == 100 && mr_forage_of(s)->energy[1] == 1.0f && s->steps[1] == 0);
            CHECK(mr_forage_of(s)->ep_food[1] == 0 && mr_forage_of(s)->ep_poison[1] == 0 && s->ep_return[1] == 0.0f);
            CHECK(mr_forage_of(s)->food_count[1] == 1 && mr_forage_of(s)->poison_count[1] == 1);
        } else {
            CHECK(mr_forage_of(s)->energy_centi[1] == 100 && s->log[1].episodes == 0 && s->steps[1] == 2);
        }
        CHECK(s->log[1].count_total[0] == 1 && s->log[1].count_total[1] == 1 && s->log[1].steps_total == 2);

        /* clamping to [-reward_clip, reward_clip] */
        s->reward_clip = 0.25f;
        put_ahead(s, 2, 6, 1);
        mr_env_step(e, act, NULL);
        CHECK_MSG(s->reward[2] == 0.25f, "mode %d clamped food reward %.9g", mode, s->reward[2]);
        put_ahead(s, 2, 6, 2);
        mr_env_step(e, act, NULL);
        CHECK_MSG(s->reward[2] == (mode <= 1 ? -0.25f : 0.25f), "mode %d clamped poison reward %.9g", mode,
                  s->reward[2]);
        mr_env_free(e);
    }
}

static void test_starvation_and_frozen(void) {
    /* An empty grid: an agent without food starves on exactly step 100. */
    for (int mode = 0; mode < 4; mode++) {
        mr_env_config c = make_cfg(mode, 2, 16, 2, 0, 0, 50, 0);
        mr_env *e = make_env(&c, 5, 1);
        mr_env_state *s = &e->s;
        uint8_t act[2] = {1, 7};
        int first_end = 0, energy_ok = 1;
        for (int t = 1; t <= 250 && !first_end; t++) {
            mr_env_step(e, act, NULL);
            if (s->terminated[0]) first_end = t;
            else if (mode != MR_MODE_PROXY) energy_ok &= mr_forage_of(s)->energy[0] == (float)(100 - t) / 100.0f;
            else energy_ok &= mr_forage_of(s)->energy[0] == 1.0f;
        }
        CHECK_MSG(energy_ok, "mode %d: energy = 1 - 0.01 t (or frozen)", mode);
        if (mode == MR_MODE_PROXY) {
            CHECK_MSG(first_end == 0, "proxy: energy frozen, never terminates (ended at %d)", first_end);
        } else {
            CHECK_MSG(first_end == 100, "mode %d: starved at step %d, want 100", mode, first_end);
            CHECK(s->reward[0] == (mode <= 1 ? -0.01f + 0.0f + -4.0f : 0.0f));
            CHECK(s->terminated[1] && mr_forage_of(s)->energy[0] == 1.0f && s->steps[0] == 0);
            CHECK(s->log[0].deaths == 1 && s->log[0].length_sum == 100);
        }
        mr_env_free(e);
    }
    /* proxy: energy frozen by default; unfreezing makes it real */
    mr_env_config c = make_cfg(MR_MODE_PROXY, 1, 16, 2, 0, 0, 50, 0);
    mr_env *e = make_env(&c, 5, 1);
    uint8_t a = 3;
    mr_env_step(e, &a, NULL);
    CHECK(mr_forage_of(&e->s)->energy[0] == 1.0f);
    CHECK(mr_env_set_energy_frozen(e, 0, NULL) == MR_OK);
    mr_env_step(e, &a, NULL);
    CHECK(mr_forage_of(&e->s)->energy_centi[0] == 99);
    CHECK(mr_env_set_energy_frozen(e, 1, NULL) == MR_OK);
    mr_env_step(e, &a, NULL);
    CHECK(mr_forage_of(&e->s)->energy_centi[0] == 99);
    mr_env_free(e);
}

static void test_truncation(void) {
    /* proxy (never terminates): truncated on exactly every 7th step */
    mr_env_config c = make_cfg(MR_MODE_PROXY, 3, 16, 2, 4, 8, 50, 7);
    mr_env *e = make_env(&c, 9, 1);
    int ok = 1;
    for (int t = 1; t <= 30; t++) {
        uint8_t act[3] = {(uint8_t)(t & 7), 0, 5};
        mr_env_step(e, act, NULL);
        for (int i = 0; i < 3; i++) {
            ok &= e->s.truncated[i] == (t % 7 == 0) && !e->s.terminated[i];
            ok &= e->s.steps[i] == t % 7;
        }
    }
    CHECK_MSG(ok, "truncated exactly at max_episode_steps");
    CHECK(e->s.log[0].episodes == 4 && e->s.log[0].length_sum == 28 && e->s.log[0].deaths == 0);
    mr_env_free(e);
    /* ground_truth on an empty grid with max 50: truncated at 50, not dead */
    c = make_cfg(MR_MODE_GROUND_TRUTH, 1, 16, 2, 0, 0, 50, 50);
    e = make_env(&c, 9, 1);
    uint8_t a = 2;
    for (int t = 1; t <= 50; t++) {
        mr_env_step(e, &a, NULL);
        if (t < 50) ok &= !e->s.truncated[0];
    }
    CHECK(ok && e->s.truncated[0] && !e->s.terminated[0]);
    CHECK(e->s.reward[0] == -0.01f);                /* no death penalty on truncation */
    CHECK(mr_forage_of(&e->s)->energy[0] == 1.0f && e->s.steps[0] == 0);
    mr_env_free(e);
}

int main(void) {
    test_actions();
    test_rewards_by_mode();
    test_starvation_and_frozen();
    test_truncation();
    return check_report("test_env_rules");
}

/*
 * test_env_reach.c - the `reach` environment (envs/reach.h) against its rules
 * as the header's comment states them, written out here independently:
 * a full reset places one goal, density_min .. density_max pits and the
 * agent on an empty cell; a step moves the agent by the literal action
 * table (0 up, 1 down, 2 left, 3 right, torus), pays -0.01, +1 on the goal
 * (which moves to an empty cell not under the agent) and -1 on a pit (which
 * ends the episode); max_episode_steps truncates; an ended episode restarts
 * the agent alone on an empty cell; the observation is the grid around the
 * agent (modulo arithmetic); the log counts what ended. Also: the same bytes
 * for 1 and 2 threads, and the config's and the step's refusals.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

/* The rules' action table, literally: up, down, left, right (y is the row). */
static const int RDX[4] = {0, 0, -1, 1};
static const int RDY[4] = {-1, 1, 0, 0};

static mr_env_config reach_cfg(int n, int grid, int view, int dmin, int dmax, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, grid, view, dmin, dmax, 50, max_steps);
    c.name = MR_ENV_REACH;
    return c;
}

static uint8_t next_action(uint32_t *lcg) {
    *lcg = *lcg * 1664525u + 1013904223u;
    return (uint8_t)(*lcg >> 30);   /* 0 .. 3 */
}

static void test_reset(void) {
    mr_env_config c = reach_cfg(256, 8, 2, 2, 5, 64);
    mr_env *e = make_env(&c, 5, 1);
    const mr_env_state *s = &e->s;
    int ok = 1, lo = 99, hi = -1;
    for (int i = 0; i < 256; i++) {
        const uint8_t *g = mr_forage_of(s)->grid + (size_t)i * 64;
        const int pits = count_code(g, 64, MR_CELL_POISON);
        ok &= count_code(g, 64, MR_CELL_FOOD) == 1 && pits >= 2 && pits <= 5 && pits == mr_forage_of(s)->poison_count[i];
        ok &= g[mr_forage_of(s)->y[i] * 8 + mr_forage_of(s)->x[i]] == MR_CELL_EMPTY && obs_matches_grid(s, i);
        ok &= s->steps[i] == 0 && s->ep_return[i] == 0.0f && mr_forage_of(s)->V == 5;
        lo = pits < lo ? pits : lo;
        hi = pits > hi ? pits : hi;
    }
    CHECK(ok);
    CHECK_MSG(lo == 2 && hi == 5, "pit counts cover %d .. %d, want 2 .. 5", lo, hi);
    mr_env_free(e);
}

static void test_steps(void) {
    enum { N = 64, G = 6, CELLS = G * G, STEPS = 3000, MAXS = 40 };
    mr_env_config c = reach_cfg(N, G, 1, 3, 6, MAXS);
    mr_env *e = make_env(&c, 11, 1);
    mr_env_state *s = &e->s;
    mr_error err;
    static uint8_t before[N * CELLS];
    uint8_t act[N];
    int x0[N], y0[N], steps0[N];
    float ret0[N];
    long ends = 0, deaths = 0, goals = 0, pits_hit = 0, truncs = 0, bad = 0;
    uint32_t lcg = 7;
    float exp_goal = -0.01f;
    exp_goal += 1.0f;
    float exp_pit = -0.01f;
    exp_pit += -1.0f;
    for (int t = 0; t < STEPS; t++) {
        memcpy(before, mr_forage_of(s)->grid, sizeof before);
        for (int i = 0; i < N; i++) {
            act[i] = next_action(&lcg);
            x0[i] = mr_forage_of(s)->x[i];
            y0[i] = mr_forage_of(s)->y[i];
            steps0[i] = s->steps[i];
            ret0[i] = s->ep_return[i];
        }
        if (mr_env_step(e, act, &err) != MR_OK) {
            CHECK_MSG(0, "step: %s", err.msg);
            break;
        }
        for (int i = 0; i < N; i++) {
            const uint8_t *g0 = before + i * CELLS, *g = mr_forage_of(s)->grid + (size_t)i * CELLS;
            const int tx = wrap(x0[i] + RDX[act[i]], G), ty = wrap(y0[i] + RDY[act[i]], G), at = ty * G + tx;
            const int cell = g0[at];
            const float want = cell == MR_CELL_FOOD ? exp_goal : cell == MR_CELL_POISON ? exp_pit : -0.01f;
            const int term = cell == MR_CELL_POISON, trunc = !term && steps0[i] + 1 >= MAXS;
            int ok = s->reward[i] == want && s->terminated[i] == term && s->truncated[i] == trunc;
            ok &= count_code(g, CELLS, MR_CELL_FOOD) == 1 && obs_matches_grid(s, i);
            /* the pits never change; only the goal moves, and only when reached */
            for (int k = 0; k < CELLS; k++) ok &= (g0[k] == MR_CELL_POISON) == (g[k] == MR_CELL_POISON);
            if (cell == MR_CELL_FOOD) {
                int moved_to = -1;
                for (int k = 0; k < CELLS; k++) if (g[k] == MR_CELL_FOOD) moved_to = k;
                ok &= moved_to != at && g0[moved_to] == MR_CELL_EMPTY;
                goals++;
            } else {
                ok &= memcmp(g0, g, CELLS) == 0;
            }
            if (term || trunc) {
                ends++;
                deaths += term;
                truncs += trunc;
                pits_hit += term;
                ok &= s->steps[i] == 0 && s->ep_return[i] == 0.0f && g[mr_forage_of(s)->y[i] * G + mr_forage_of(s)->x[i]] == MR_CELL_EMPTY;
            } else {
                ok &= mr_forage_of(s)->x[i] == tx && mr_forage_of(s)->y[i] == ty && s->steps[i] == steps0[i] + 1;
                ok &= s->ep_return[i] == ret0[i] + want;
            }
            if (!ok && bad++ < 3)
                fprintf(stderr, "  step %d env %d: action %d from (%d,%d) into code %d: reward %g term %d trunc %d\n",
                        t, i, act[i], x0[i], y0[i], cell, (double)s->reward[i], s->terminated[i], s->truncated[i]);
        }
    }
    CHECK_MSG(bad == 0, "%ld steps broke the rules", bad);
    CHECK(goals > 100 && deaths > 100 && truncs > 10);   /* every branch was taken, many times */
    mr_env_log sum;
    CHECK(mr_env_log_summary(e, &sum, &err) == MR_OK);
    CHECK_MSG(sum.episodes == ends && sum.deaths == deaths && sum.count[1] == pits_hit,
              "log: %d episodes %d deaths %d pits, counted %ld %ld %ld", sum.episodes, sum.deaths, sum.count[1], ends,
              deaths, pits_hit);
    CHECK(sum.count_total[0] == goals && sum.steps_total == (long)N * STEPS);
    mr_env_free(e);
}

static void test_threads(void) {
    /* above the step loop's parallel threshold, so two threads really split it */
    mr_env_config c = reach_cfg(2048, 8, 2, 2, 4, 30);
    mr_env *a = make_env(&c, 3, 1), *b = make_env(&c, 3, 2);
    uint8_t *act = malloc(2048);
    uint32_t lcg = 1;
    mr_error err;
    for (int t = 0; t < 200; t++) {
        for (int i = 0; i < 2048; i++) act[i] = next_action(&lcg);
        CHECK(mr_env_step(a, act, &err) == MR_OK && mr_env_step(b, act, &err) == MR_OK);
    }
    const mr_env_state *p = &a->s, *q = &b->s;
    CHECK(memcmp(mr_forage_of(p)->grid, mr_forage_of(q)->grid, 2048 * 64) == 0 && memcmp(p->obs, q->obs, 2048 * 25) == 0);
    CHECK(memcmp(mr_forage_of(p)->x, mr_forage_of(q)->x, 2048 * 4) == 0 && memcmp(mr_forage_of(p)->y, mr_forage_of(q)->y, 2048 * 4) == 0);
    CHECK(memcmp(p->reward, q->reward, 2048 * 4) == 0 && memcmp(p->ep_return, q->ep_return, 2048 * 4) == 0);
    free(act);
    mr_env_free(a);
    mr_env_free(b);
}

static void test_refusals(void) {
    mr_error err;
    mr_env *e = NULL;
    mr_env_config c = reach_cfg(4, 8, 2, 2, 4, 30);
    c.mode = MR_MODE_PROXY;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG);
    CHECK_MSG(strstr(err.msg, "reach has only ground_truth") != NULL, "%s", err.msg);
    c = reach_cfg(4, 3, 1, 0, 8, 30);   /* 9 cells: the goal, 8 pits and the agent do not fit */
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG);
    CHECK_MSG(strstr(err.msg, "env.density_max = 8") && strstr(err.msg, "[density_min = 0, 7]"), "%s", err.msg);
    c = reach_cfg(4, 3, 1, 0, 7, 30);   /* exactly full: still steps */
    e = make_env(&c, 1, 1);
    uint8_t act[4] = {0, 1, 2, 4};
    CHECK(mr_env_step(e, act, &err) == MR_ERR_ARG);
    CHECK_MSG(strstr(err.msg, "actions[3] = 4: accepted 0 .. 3 (reach has 4 actions)") != NULL, "%s", err.msg);
    act[3] = 3;
    for (int t = 0; t < 50; t++) CHECK(mr_env_step(e, act, &err) == MR_OK);
    mr_env_free(e);
}

int main(void) {
    test_reset();
    test_steps();
    test_threads();
    test_refusals();
    return check_report("test_env_reach");
}

/*
 * test_env.c - the foraging environment (foraging.h, env_cpu.c, rng.h)
 * against ENV_SPEC.md.
 *
 * The core is a slow reference model written from the spec text (modulo
 * arithmetic, literal reward table, the documented RNG keying) that runs
 * beside the engine and must agree on every byte of state after every step.
 * Around it: hand-built situations for each mode's rewards and energy,
 * starvation and truncation at exact step counts, full-reset densities,
 * determinism across runs and thread counts, and bad input.
 */
#include "check.h"
#include "env.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

static uint64_t xs_state = 0x9e3779b97f4a7c15ULL;
static uint32_t xs_next(void) {
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return (uint32_t)(xs_state >> 32);
}

static mr_env_config make_cfg(int mode, int n, int grid, int view, int dmin, int dmax, int tries, int max_steps) {
    mr_env_config c = {mode, n, grid, view, dmin, dmax, tries, max_steps};
    return c;
}

static mr_env *make_env(const mr_env_config *c, uint64_t seed, int threads) {
    mr_env *e = NULL;
    mr_error err;
    if (mr_env_create(c, seed, MR_DEVICE_CPU, threads, &e, &err) != MR_OK) {
        fprintf(stderr, "mr_env_create failed: %s\n", err.msg);
        exit(1);
    }
    return e;
}

static int count_code(const uint8_t *g, int cells, int code) {
    int k = 0;
    for (int c = 0; c < cells; c++) k += g[c] == code;
    return k;
}

static int wrap(int v, int m) { return ((v % m) + m) % m; }

/* The observation read directly with modulo arithmetic, ENV_SPEC's formula. */
static int obs_matches_grid(const mr_forage *s, int i) {
    const uint8_t *g = s->grid + (size_t)i * s->H * s->W;
    const uint8_t *o = s->obs + (size_t)i * s->V * s->V;
    for (int a = 0; a < s->V; a++)
        for (int b = 0; b < s->V; b++) {
            int r = wrap(s->y[i] - s->view + a, s->H), c = wrap(s->x[i] - s->view + b, s->W);
            if (o[a * s->V + b] != g[r * s->W + c]) return 0;
        }
    return 1;
}

/* --------------------------------------------------- the reference model */

/* ENV_SPEC's reward table, literally. */
static const float REF_FOOD[4] = {1.0f, 1.0f, 1.0f, 1.0f};
static const float REF_POISON[4] = {-2.0f, -2.0f, 0.5f, 0.5f};
static const float REF_STEP[4] = {-0.01f, -0.01f, 0.0f, 0.0f};
static const float REF_DEATH[4] = {-4.0f, -4.0f, 0.0f, 0.0f};
/* ENV_SPEC's action table, literally. */
static const int REF_DX[8] = {-1, -1, -1, 0, 0, 1, 1, 1};
static const int REF_DY[8] = {-1, 0, 1, -1, 1, -1, 0, 1};

typedef struct ref_env {
    uint8_t *grid;
    int x, y, energy, steps, food, poison, ep_food, ep_poison;  /* energy in hundredths */
    uint32_t tick, resets;
    float ep_return;
    mr_forage_log log;
} ref_env;

/* foraging.h's documented "empty cell" draw. */
static int ref_pick_empty(uint64_t seed, int i, uint32_t ctr, uint32_t purpose, uint32_t *d,
                          const uint8_t *g, int cells) {
    for (int k = 0; k < MR_FORAGE_REJECT_DRAWS; k++) {
        int c = (int)mr_rng_below(seed, (uint32_t)i, ctr, purpose, (*d)++, (uint32_t)cells);
        if (g[c] == 0) return c;
    }
    int empties = count_code(g, cells, 0);
    int r = (int)mr_rng_below(seed, (uint32_t)i, ctr, purpose, (*d)++, (uint32_t)empties);
    for (int c = 0; c < cells; c++)
        if (g[c] == 0 && r-- == 0) return c;
    return -1;
}

static void ref_reset_full(const mr_forage *s, ref_env *r, int i) {
    const int cells = s->H * s->W;
    memset(r->grid, 0, (size_t)cells);
    uint32_t span = (uint32_t)(s->dmax - s->dmin + 1), d = 0;
    r->food = s->dmin + (int)mr_rng_below(s->seed, (uint32_t)i, r->resets, MR_RNG_DENSITY, 0, span);
    r->poison = s->dmin + (int)mr_rng_below(s->seed, (uint32_t)i, r->resets, MR_RNG_DENSITY, 1, span);
    for (int k = 0; k < r->food; k++) r->grid[ref_pick_empty(s->seed, i, r->resets, MR_RNG_PLACE, &d, r->grid, cells)] = 1;
    for (int k = 0; k < r->poison; k++) r->grid[ref_pick_empty(s->seed, i, r->resets, MR_RNG_PLACE, &d, r->grid, cells)] = 2;
    int a = ref_pick_empty(s->seed, i, r->resets, MR_RNG_PLACE, &d, r->grid, cells);
    r->x = a % s->W;
    r->y = a / s->W;
    r->energy = 100;
    r->steps = 0;
    r->ep_food = r->ep_poison = 0;
    r->ep_return = 0.0f;
    r->resets++;
}

typedef struct ref_out { float reward; int terminated, truncated, ate, lost, ended_without_eating; } ref_out;

/* ENV_SPEC "Step", items 1-7 (7, the observation, is checked separately). */
static ref_out ref_step(const mr_forage *s, ref_env *r, int i, int action, int frozen) {
    ref_out o = {0};
    const int H = s->H, W = s->W, cells = H * W;
    r->x = wrap(r->x + REF_DX[action], W);                      /* 1 */
    r->y = wrap(r->y + REF_DY[action], H);
    if (!frozen) r->energy -= 1;                                /* 2 */
    int at = r->y * W + r->x, code = r->grid[at];               /* 3 */
    float eat = 0.0f;
    if (code) {
        o.ate = code;
        r->grid[at] = 0;
        if (!frozen) r->energy += code == 1 ? 100 : -200;
        eat = code == 1 ? REF_FOOD[s->mode] : REF_POISON[s->mode];
        int placed = 0;                                         /* 4 */
        for (int k = 0; k < s->tries && !placed; k++) {
            int c = (int)mr_rng_below(s->seed, (uint32_t)i, r->tick,
                                      code == 1 ? MR_RNG_RESPAWN_FOOD : MR_RNG_RESPAWN_POISON, (uint32_t)k,
                                      (uint32_t)cells);
            if (r->grid[c] == 0 && c != at) { r->grid[c] = (uint8_t)code; placed = 1; }
        }
        o.lost = !placed;
        if (code == 1) { r->ep_food++; r->log.food_total++; r->food -= !placed; }
        else { r->ep_poison++; r->log.poison_total++; r->poison -= !placed; }
    }
    r->steps++;                                                 /* 5 */
    o.truncated = s->max_steps > 0 && r->steps >= s->max_steps;
    o.terminated = r->energy <= 0;
    float rew = REF_STEP[s->mode] + eat;
    if (o.terminated) rew = rew + REF_DEATH[s->mode];
    if (rew > s->reward_clip) rew = s->reward_clip;
    if (rew < -s->reward_clip) rew = -s->reward_clip;
    o.reward = rew;
    r->ep_return += rew;
    r->log.steps_total++;
    if (o.terminated || o.truncated) {                         /* 6 */
        r->log.episodes++;
        r->log.deaths += o.terminated;
        r->log.length_sum += r->steps;
        r->log.food += r->ep_food;
        r->log.poison += r->ep_poison;
        r->log.return_sum += r->ep_return;
        if (r->ep_return < r->log.return_min) r->log.return_min = r->ep_return;
        if (r->ep_return > r->log.return_max) r->log.return_max = r->ep_return;
        uint32_t d = 0;
        int a = ref_pick_empty(s->seed, i, r->tick, MR_RNG_AGENT, &d, r->grid, cells);
        r->x = a % W;
        r->y = a / W;
        r->energy = 100;
        r->steps = 0;
        r->ep_food = r->ep_poison = 0;
        r->ep_return = 0.0f;
        o.ended_without_eating = !code;
    }
    r->tick++;
    return o;
}

/* Runs `steps` random steps of a fresh env beside the reference model and
 * checks every byte of state after every step, plus the spec's invariants
 * directly (counts, conservation, obs, energy). Stops at the first divergent
 * step so that one bug prints a few lines, not thousands. */
static void run_against_reference(const mr_env_config *cfg, uint64_t seed, int steps, const char *name) {
    mr_env *e = make_env(cfg, seed, 1);
    mr_forage *s = &e->s;
    const int n = s->n, cells = s->H * s->W;
    ref_env *ref = calloc((size_t)n, sizeof *ref);
    uint8_t *prev = malloc((size_t)n * cells), *act = malloc((size_t)n);
    int32_t *pf = malloc(sizeof(int32_t) * n), *pp = malloc(sizeof(int32_t) * n);
    long ate = 0, lost = 0, ended = 0, kept_grid = 0, deaths = 0;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        ref[i].grid = calloc((size_t)cells, 1);
        mr_forage_log_clear(&ref[i].log);
        ref_reset_full(s, &ref[i], i);
        bad |= memcmp(ref[i].grid, s->grid + (size_t)i * cells, (size_t)cells) != 0;
        bad |= ref[i].x != s->x[i] || ref[i].y != s->y[i];
    }
    CHECK_MSG(!bad, "%s: full reset differs from the reference (documented keying)", name);
    for (int t = 0; t < steps && !bad; t++) {
        memcpy(prev, s->grid, (size_t)n * cells);
        memcpy(pf, s->food_count, sizeof(int32_t) * n);
        memcpy(pp, s->poison_count, sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) act[i] = (uint8_t)(xs_next() & 7);
        CHECK(mr_env_step(e, act, NULL) == MR_OK);
        for (int i = 0; i < n && !bad; i++) {
            ref_out o = ref_step(s, &ref[i], i, act[i], s->energy_frozen);
            const uint8_t *g = s->grid + (size_t)i * cells;
            const char *what = NULL;
            if (memcmp(g, ref[i].grid, (size_t)cells)) what = "grid";
            else if (s->x[i] != ref[i].x || s->y[i] != ref[i].y) what = "agent position";
            else if (s->energy_centi[i] != ref[i].energy) what = "energy";
            else if (s->energy[i] != (float)ref[i].energy / 100.0f) what = "energy (float mirror)";
            else if (s->steps[i] != ref[i].steps) what = "steps";
            else if (s->reward[i] != o.reward) what = "reward";
            else if (s->terminated[i] != o.terminated || s->truncated[i] != o.truncated) what = "end flags";
            else if (s->food_count[i] != ref[i].food || s->poison_count[i] != ref[i].poison) what = "item counts";
            else if (s->tick[i] != ref[i].tick) what = "tick";
            else if (s->ep_return[i] != ref[i].ep_return || s->ep_food[i] != ref[i].ep_food ||
                     s->ep_poison[i] != ref[i].ep_poison) what = "episode accumulators";
            /* Invariants straight from the spec, independent of the model: */
            else if (count_code(g, cells, 1) != s->food_count[i] || count_code(g, cells, 2) != s->poison_count[i])
                what = "grid cells != food_count/poison_count";
            else if (s->food_count[i] > pf[i] || s->poison_count[i] > pp[i]) what = "an item count grew";
            else if ((pf[i] - s->food_count[i]) + (pp[i] - s->poison_count[i]) != (o.lost ? 1 : 0))
                what = "an item count fell without a lost respawn";
            else if (!obs_matches_grid(s, i)) what = "observation != direct grid reading";
            /* The centre is the agent's own cell. It is always EMPTY: the
             * agent just ate whatever was there, a respawn never targets the
             * cell under the agent, and a (re)placed agent lands only on an
             * EMPTY cell. */
            else if (s->obs[(size_t)i * s->V * s->V + (s->V * s->V) / 2] != 0) what = "observation centre";
            else if (s->energy_frozen && s->energy[i] != 1.0f) what = "frozen energy changed";
            /* Auto-reset moves only the agent: the grid is kept. */
            else if (o.ended_without_eating && memcmp(g, prev + (size_t)i * cells, (size_t)cells))
                what = "auto-reset changed the grid";
            if (what) {
                CHECK_MSG(0, "%s: step %d env %d: %s", name, t, i, what);
                bad = 1;
            }
            ate += o.ate != 0;
            lost += o.lost;
            ended += o.terminated || o.truncated;
            deaths += o.terminated;
            kept_grid += o.ended_without_eating;
        }
    }
    CHECK_MSG(!bad, "%s: engine and reference agree for %d steps", name, steps);
    /* The logs. */
    int log_bad = 0;
    for (int i = 0; i < n; i++) {
        const mr_forage_log *a = &s->log[i], *b = &ref[i].log;
        log_bad |= a->episodes != b->episodes || a->deaths != b->deaths || a->length_sum != b->length_sum ||
                   a->food != b->food || a->poison != b->poison || a->food_total != b->food_total ||
                   a->poison_total != b->poison_total || a->steps_total != b->steps_total ||
                   a->return_sum != b->return_sum || a->return_min != b->return_min ||
                   a->return_max != b->return_max;
    }
    CHECK_MSG(!log_bad, "%s: per-env logs match the reference", name);
    mr_forage_log sum;
    mr_forage_log_reduce(s->log, n, &sum);
    CHECK_MSG(sum.steps_total == (long)n * steps, "%s: steps_total %d", name, sum.steps_total);
    CHECK_MSG(sum.episodes == ended && sum.deaths == deaths, "%s: episodes %d deaths %d", name, sum.episodes,
              sum.deaths);
    CHECK_MSG(sum.food_total + sum.poison_total == ate, "%s: eaten %d + %d vs %ld", name, sum.food_total,
              sum.poison_total, ate);
    /* The run must have exercised what it claims to check. */
    CHECK_MSG(ate > 0 && ended > 0 && kept_grid > 0, "%s: exercised eating %ld, episode ends %ld, "
              "auto-resets without eating %ld", name, ate, ended, kept_grid);
    printf("  %s: %d envs x %d steps: ate %ld (lost respawns %ld), episodes %ld (deaths %ld)\n", name, n, steps,
           ate, lost, ended, deaths);
    for (int i = 0; i < n; i++) free(ref[i].grid);
    free(ref); free(prev); free(act); free(pf); free(pp);
    mr_env_free(e);
}

static void test_reference_runs(void) {
    static const char *names[4] = {"ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy"};
    for (int mode = 0; mode < 4; mode++) {
        /* small: 32x32 with 16..64 of each; few respawn tries (0 = every
         * respawn lost) so that lost respawns happen */
        static const int tries[4] = {50, 1, 3, 0};
        mr_env_config c = make_cfg(mode, 16, 32, 5, 16, 64, tries[mode], 64);
        char name[64];
        snprintf(name, sizeof name, "small %s", names[mode]);
        run_against_reference(&c, 7 + mode, 600, name);
    }
    /* the spec default grid */
    mr_env_config d = make_cfg(MR_MODE_GROUND_TRUTH, 6, 128, 5, 64, 256, 50, 512);
    run_against_reference(&d, 11, 700, "spec default ground_truth");
    /* a nearly full grid: rejection sampling falls back to the exact pick */
    mr_env_config f = make_cfg(MR_MODE_PROXY_MORTAL, 4, 11, 5, 58, 60, 50, 20);
    run_against_reference(&f, 5, 300, "nearly full 11x11");
}

/* --------------------------------------------------------- unit checks */

static void test_actions(void) {
    int ok = 1;
    for (int a = 0; a < 8; a++) ok &= mr_forage_dx(a) == REF_DX[a] && mr_forage_dy(a) == REF_DY[a];
    CHECK_MSG(ok, "action table differs from ENV_SPEC");
}

static void test_rng(void) {
    CHECK(mr_rng_u64(1, 2, 3, 4, 5) == mr_rng_u64(1, 2, 3, 4, 5));
    /* every field of the key matters */
    uint64_t base = mr_rng_u64(1, 2, 3, 4, 5);
    CHECK(mr_rng_u64(2, 2, 3, 4, 5) != base);
    CHECK(mr_rng_u64(1, 3, 3, 4, 5) != base);
    CHECK(mr_rng_u64(1, 2, 4, 4, 5) != base);
    CHECK(mr_rng_u64(1, 2, 3, 5, 5) != base);
    CHECK(mr_rng_u64(1, 2, 3, 4, 6) != base);
    CHECK(mr_rng_u64(0, 0, 0, 0, 0) != 0);
    /* ranges, and rough uniformity: 8 buckets x 10,000 expected */
    int hist[8] = {0}, in_range = 1;
    double sum = 0;
    float umin = 1, umax = 0;
    for (uint32_t k = 0; k < 80000; k++) {
        uint32_t b = mr_rng_below(42, k & 15, k >> 4, MR_RNG_ACTION, 0, 8);
        in_range &= b < 8;
        if (b < 8) hist[b]++;
        float u = mr_rng_uniform(42, 0, k, MR_RNG_INIT, 1);
        sum += u;
        if (u < umin) umin = u;
        if (u > umax) umax = u;
        in_range &= mr_rng_below(42, 0, k, 1, 2, 1) == 0 && mr_rng_below(42, 0, k, 1, 2, 16384) < 16384;
    }
    CHECK(in_range);
    int flat = 1;
    for (int b = 0; b < 8; b++) flat &= hist[b] > 9600 && hist[b] < 10400;
    CHECK_MSG(flat, "below(8) histogram %d %d %d %d %d %d %d %d", hist[0], hist[1], hist[2], hist[3], hist[4],
              hist[5], hist[6], hist[7]);
    CHECK(umin >= 0.0f && umax < 1.0f && umin < 0.001f && umax > 0.999f);
    CHECK_NEAR(sum / 80000, 0.5, 0.005, 0);
    /* 24 bits: every uniform is a multiple of 2^-24 */
    float u = mr_rng_uniform(9, 9, 9, 9, 9);
    CHECK(u * 16777216.0f == (float)(uint32_t)(u * 16777216.0f));
}

/* Puts `code` on the cell the agent reaches with `action`, keeping the counts. */
static void put_ahead(mr_forage *s, int i, int action, int code) {
    int x = wrap(s->x[i] + REF_DX[action], s->W), y = wrap(s->y[i] + REF_DY[action], s->H);
    s->grid[(size_t)i * s->H * s->W + y * s->W + x] = (uint8_t)code;
    if (code == 1) s->food_count[i]++;
    if (code == 2) s->poison_count[i]++;
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
        mr_forage *s = &e->s;
        CHECK(s->energy_frozen == (mode == MR_MODE_PROXY));
        uint8_t act[3] = {6, 6, 6};
        put_ahead(s, 1, 6, 1);                      /* env 1 eats food; 0 and 2 walk on empty cells */
        mr_forage_write_obs(s, 1);
        CHECK_MSG(s->obs[1 * 25 + 13] == 1, "mode %d: food visible right of the agent", mode);
        mr_env_step(e, act, NULL);
        CHECK_MSG(s->reward[1] == food_r[mode], "mode %d food reward %.9g", mode, s->reward[1]);
        CHECK_MSG(s->reward[0] == REF_STEP[mode], "mode %d step reward %.9g", mode, s->reward[0]);
        CHECK_MSG(s->energy_centi[1] == food_e[mode], "mode %d energy after food %d", mode, s->energy_centi[1]);
        CHECK_NEAR(s->energy[1], food_e[mode] / 100.0, 1e-6, 0);
        CHECK(s->energy_centi[0] == (mode == MR_MODE_PROXY ? 100 : 99));
        CHECK_MSG(s->food_count[1] == 1 && count_code(s->grid + 256, 256, 1) == 1, "mode %d food respawned", mode);
        CHECK(!s->terminated[1] && s->ep_food[1] == 1);

        act[1] = 4;                                 /* down onto poison */
        put_ahead(s, 1, 4, 2);
        mr_env_step(e, act, NULL);
        CHECK_MSG(s->reward[1] == poison_r[mode], "mode %d poison reward %.9g", mode, s->reward[1]);
        CHECK_MSG(s->terminated[1] == poison_term[mode], "mode %d poison terminated %d", mode, s->terminated[1]);
        CHECK(!s->truncated[1]);
        CHECK_MSG(s->poison_count[1] == 1 && count_code(s->grid + 256, 256, 2) == 1, "mode %d poison respawned",
                  mode);
        if (poison_term[mode]) {
            /* died: logged, then the agent alone is reset */
            const mr_forage_log *l = &s->log[1];
            CHECK(l->episodes == 1 && l->deaths == 1 && l->length_sum == 2 && l->food == 1 && l->poison == 1);
            CHECK(l->return_sum == food_r[mode] + poison_r[mode]);
            CHECK(l->return_min == l->return_sum && l->return_max == l->return_sum);
            CHECK(s->energy_centi[1] == 100 && s->energy[1] == 1.0f && s->steps[1] == 0);
            CHECK(s->ep_food[1] == 0 && s->ep_poison[1] == 0 && s->ep_return[1] == 0.0f);
            CHECK(s->food_count[1] == 1 && s->poison_count[1] == 1);
        } else {
            CHECK(s->energy_centi[1] == 100 && s->log[1].episodes == 0 && s->steps[1] == 2);
        }
        CHECK(s->log[1].food_total == 1 && s->log[1].poison_total == 1 && s->log[1].steps_total == 2);

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
        mr_forage *s = &e->s;
        uint8_t act[2] = {1, 7};
        int first_end = 0, energy_ok = 1;
        for (int t = 1; t <= 250 && !first_end; t++) {
            mr_env_step(e, act, NULL);
            if (s->terminated[0]) first_end = t;
            else if (mode != MR_MODE_PROXY) energy_ok &= s->energy[0] == (float)(100 - t) / 100.0f;
            else energy_ok &= s->energy[0] == 1.0f;
        }
        CHECK_MSG(energy_ok, "mode %d: energy = 1 - 0.01 t (or frozen)", mode);
        if (mode == MR_MODE_PROXY) {
            CHECK_MSG(first_end == 0, "proxy: energy frozen, never terminates (ended at %d)", first_end);
        } else {
            CHECK_MSG(first_end == 100, "mode %d: starved at step %d, want 100", mode, first_end);
            CHECK(s->reward[0] == (mode <= 1 ? -0.01f + 0.0f + -4.0f : 0.0f));
            CHECK(s->terminated[1] && s->energy[0] == 1.0f && s->steps[0] == 0);
            CHECK(s->log[0].deaths == 1 && s->log[0].length_sum == 100);
        }
        mr_env_free(e);
    }
    /* proxy: energy frozen by default; unfreezing makes it real */
    mr_env_config c = make_cfg(MR_MODE_PROXY, 1, 16, 2, 0, 0, 50, 0);
    mr_env *e = make_env(&c, 5, 1);
    uint8_t a = 3;
    mr_env_step(e, &a, NULL);
    CHECK(e->s.energy[0] == 1.0f);
    CHECK(mr_env_set_energy_frozen(e, 0, NULL) == MR_OK);
    mr_env_step(e, &a, NULL);
    CHECK(e->s.energy_centi[0] == 99);
    CHECK(mr_env_set_energy_frozen(e, 1, NULL) == MR_OK);
    mr_env_step(e, &a, NULL);
    CHECK(e->s.energy_centi[0] == 99);
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
    CHECK(e->s.energy[0] == 1.0f && e->s.steps[0] == 0);
    mr_env_free(e);
}

static void test_full_reset(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 64, 32, 3, 16, 20, 50, 512);
    mr_env *e = make_env(&c, 21, 1);
    mr_forage *s = &e->s;
    int lo = 1 << 30, hi = -1, ok = 1;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 64; i++) {
            const uint8_t *g = s->grid + (size_t)i * 1024;
            int f = s->food_count[i], p = s->poison_count[i];
            ok &= f >= 16 && f <= 20 && p >= 16 && p <= 20;
            ok &= count_code(g, 1024, 1) == f && count_code(g, 1024, 2) == p;
            ok &= g[s->y[i] * 32 + s->x[i]] == 0 && obs_matches_grid(s, i);
            ok &= s->energy[i] == 1.0f && s->steps[i] == 0 && s->resets[i] == (uint32_t)round + 1;
            lo = f < lo ? f : lo; lo = p < lo ? p : lo;
            hi = f > hi ? f : hi; hi = p > hi ? p : hi;
        }
        if (round == 0) {
            uint8_t *before = malloc(64 * 1024);
            memcpy(before, s->grid, 64 * 1024);
            CHECK(mr_env_reset(e, NULL) == MR_OK);
            CHECK_MSG(memcmp(before, s->grid, 64 * 1024) != 0, "a second full reset draws new grids");
            free(before);
        }
    }
    CHECK_MSG(ok, "full reset: densities in [16, 20], counts match, agent on an empty cell");
    CHECK_MSG(lo == 16 && hi == 20, "densities cover [16, 20]: saw [%d, %d]", lo, hi);
    mr_env_free(e);
    /* the spec default */
    c = make_cfg(MR_MODE_GROUND_TRUTH, 8, 128, 5, 64, 256, 50, 512);
    e = make_env(&c, 22, 1);
    ok = 1;
    for (int i = 0; i < 8; i++) {
        const uint8_t *g = e->s.grid + (size_t)i * 16384;
        ok &= e->s.food_count[i] >= 64 && e->s.food_count[i] <= 256 && count_code(g, 16384, 1) == e->s.food_count[i];
        ok &= e->s.poison_count[i] >= 64 && e->s.poison_count[i] <= 256 &&
              count_code(g, 16384, 2) == e->s.poison_count[i];
    }
    CHECK_MSG(ok, "spec default full reset: densities in [64, 256]");
    mr_env_free(e);
}

/* Runs 200 steps and returns a hash-free byte record of grid, obs, rewards. */
typedef struct trace { uint8_t *grid, *obs; float *reward; } trace;

static trace record(const mr_env_config *c, uint64_t seed, int threads) {
    mr_env *e = make_env(c, seed, threads);
    const size_t n = (size_t)c->num_envs, VV = (size_t)e->s.V * e->s.V, cells = (size_t)c->grid_size * c->grid_size;
    trace tr = {malloc(n * cells), malloc(n * VV * 200), malloc(sizeof(float) * n * 200)};
    uint8_t *act = malloc(n);
    uint64_t z = 77;
    for (int t = 0; t < 200; t++) {
        for (size_t i = 0; i < n; i++) { z = z * 6364136223846793005ULL + 1442695040888963407ULL; act[i] = (uint8_t)(z >> 61); }
        mr_env_step(e, act, NULL);
        mr_env_view v = {tr.obs + t * n * VV, tr.reward + t * n, NULL, NULL, NULL, NULL, NULL, NULL};
        mr_env_read(e, &v, NULL);
    }
    mr_env_view v = {0};
    v.grid = tr.grid;
    mr_env_read(e, &v, NULL);
    free(act);
    mr_env_free(e);
    return tr;
}

static int same_trace(const trace *a, const trace *b, size_t n, size_t VV, size_t cells) {
    return !memcmp(a->grid, b->grid, n * cells) && !memcmp(a->obs, b->obs, n * VV * 200) &&
           !memcmp(a->reward, b->reward, sizeof(float) * n * 200);
}

static void free_trace(trace *t) { free(t->grid); free(t->obs); free(t->reward); }

static void test_determinism(void) {
    /* enough envs for the loop to run on a thread team */
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 600, 32, 5, 16, 64, 50, 64);
    const size_t n = 600, VV = 121, cells = 1024;
    trace a = record(&c, 1, 1), b = record(&c, 1, 1), t2 = record(&c, 1, 2), d = record(&c, 2, 1);
    CHECK_MSG(same_trace(&a, &b, n, VV, cells), "same seed twice: identical bytes");
    CHECK_MSG(same_trace(&a, &t2, n, VV, cells), "1 thread vs 2 threads: identical bytes");
    CHECK_MSG(memcmp(a.grid, d.grid, n * cells) != 0 && memcmp(a.obs, d.obs, n * VV * 200) != 0,
              "different seeds: different worlds");
    free_trace(&a); free_trace(&b); free_trace(&t2); free_trace(&d);
}

static void test_log_reduce(void) {
    mr_forage_log l[3];
    for (int i = 0; i < 3; i++) mr_forage_log_clear(&l[i]);
    CHECK(l[0].return_min > 1e38f && l[0].return_max < -1e38f && l[0].episodes == 0);
    l[0].episodes = 2; l[0].return_sum = 3.0f; l[0].return_min = 1.0f; l[0].return_max = 2.0f; l[0].food = 4;
    l[2].episodes = 1; l[2].return_sum = -5.0f; l[2].return_min = -5.0f; l[2].return_max = -5.0f; l[2].steps_total = 9;
    mr_forage_log r;
    mr_forage_log_reduce(l, 3, &r);
    CHECK(r.episodes == 3 && r.return_sum == -2.0f && r.return_min == -5.0f && r.return_max == 2.0f);
    CHECK(r.food == 4 && r.steps_total == 9 && r.deaths == 0);
    mr_forage_log_reduce(l, 0, &r);
    CHECK(r.episodes == 0 && r.return_min > 1e38f);
}

static int msg_has(const mr_error *e, const char *s) { return strstr(e->msg, s) != NULL; }

static void test_bad_input(void) {
    mr_env_config ok = make_cfg(MR_MODE_GROUND_TRUTH, 4, 32, 5, 16, 64, 50, 512), c;
    mr_env *e = (mr_env *)&ok;     /* must be overwritten with NULL on failure */
    mr_error err;
    CHECK(mr_env_create(NULL, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && e == NULL && msg_has(&err, "cfg"));
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CPU, 1, NULL, &err) == MR_ERR_ARG && msg_has(&err, "out"));
    c = ok; c.num_envs = 0;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.num_envs = 0"));
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, NULL) == MR_ERR_ARG);        /* err may be NULL */
    c = ok; c.view_range = 20;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.view_range = 20"));
    c = ok; c.view_range = 0;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.view_range"));
    c = ok; c.grid_size = 100000;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.grid_size"));
    c = ok; c.density_max = 512;     /* 2*512 = 1024 cells: no room for the agent */
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.density_max"));
    c = ok; c.density_min = 65;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.density_max"));
    c = ok; c.density_min = -1;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.density_min"));
    c = ok; c.mode = 4;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.mode"));
    c = ok; c.respawn_tries = -1;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.respawn_tries"));
    c = ok; c.max_episode_steps = -5;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.max_episode_steps"));
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CPU, -1, &e, &err) == MR_ERR_ARG && msg_has(&err, "threads"));
    CHECK(mr_env_create(&ok, 1, 7, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "device"));
#ifndef MOONRL_HAVE_CUDA   /* with CUDA, test_cuda_env covers device = cuda */
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CUDA, 1, &e, &err) == MR_ERR_BACKEND && msg_has(&err, "cuda") && e == NULL);
#endif
    CHECK(mr_env_config_check(&ok, &err) == MR_OK && err.status == MR_OK);

    CHECK(mr_env_create(&ok, 1, MR_DEVICE_AUTO, 1, &e, &err) == MR_OK && e != NULL);
    mr_env_free(e);
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_OK && e != NULL);
    uint8_t act[4] = {0, 1, 2, 8};
    CHECK(mr_env_step(e, act, &err) == MR_ERR_ARG && msg_has(&err, "actions[3] = 8"));
    CHECK(e->s.tick[0] == 0);                       /* nothing stepped */
    CHECK(mr_env_step(e, NULL, &err) == MR_ERR_ARG && msg_has(&err, "actions"));
    CHECK(mr_env_step(NULL, act, &err) == MR_ERR_ARG);
    CHECK(mr_env_read(e, NULL, &err) == MR_ERR_ARG);
    CHECK(mr_env_read(NULL, NULL, &err) == MR_ERR_ARG);
    CHECK(mr_env_reset(NULL, &err) == MR_ERR_ARG);
    CHECK(mr_env_set_energy_frozen(e, 2, &err) == MR_ERR_ARG && msg_has(&err, "frozen = 2"));
    CHECK(mr_env_set_energy_frozen(NULL, 1, &err) == MR_ERR_ARG);
    act[3] = 7;
    CHECK(mr_env_step(e, act, &err) == MR_OK && err.status == MR_OK);
    mr_env_free(e);
    mr_env_free(NULL);
}

/* mr_env_read copies every field it is given, and skips NULLs. */
static void test_read(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 5, 16, 2, 4, 8, 50, 0);
    mr_env *e = make_env(&c, 4, 1);
    uint8_t act[5] = {0, 3, 4, 6, 7};
    for (int t = 0; t < 9; t++) mr_env_step(e, act, NULL);
    const mr_forage *s = &e->s;
    uint8_t obs[5 * 25], term[5], trunc[5], grid[5 * 256];
    float rew[5], en[5];
    int32_t x[5], y[5];
    memset(obs, 0xEE, sizeof obs); memset(term, 0xEE, 5); memset(trunc, 0xEE, 5); memset(grid, 0xEE, sizeof grid);
    memset(rew, 0xEE, sizeof rew); memset(en, 0xEE, sizeof en); memset(x, 0xEE, sizeof x); memset(y, 0xEE, sizeof y);
    mr_env_view v = {obs, rew, term, trunc, grid, x, y, en};
    CHECK(mr_env_read(e, &v, NULL) == MR_OK);
    CHECK(!memcmp(obs, s->obs, sizeof obs) && !memcmp(rew, s->reward, sizeof rew));
    CHECK(!memcmp(term, s->terminated, 5) && !memcmp(trunc, s->truncated, 5));
    CHECK(!memcmp(grid, s->grid, sizeof grid));
    CHECK(!memcmp(x, s->x, sizeof x) && !memcmp(y, s->y, sizeof y) && !memcmp(en, s->energy, sizeof en));
    CHECK(rew[0] == -0.01f || rew[0] == 0.99f || rew[0] == -2.01f);
    mr_env_view none = {0};
    CHECK(mr_env_read(e, &none, NULL) == MR_OK);
    mr_env_free(e);
}

/* The arena's planning pass sees NULLs and the committed pass the same total. */
static void test_layout(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 5, 16, 2, 0, 4, 50, 0);
    mr_arena a = {0};
    mr_forage s;
    mr_forage_layout(&s, &c, 1, &a);
    CHECK(s.grid == NULL && s.log == NULL && s.energy_centi == NULL && a.size > 5 * 256);
    size_t planned = a.size;
    CHECK(mr_arena_commit(&a) == 0);
    mr_forage_layout(&s, &c, 1, &a);
    CHECK(s.grid && s.obs && s.log && s.energy_centi && s.x && s.ep_poison && a.used == planned);
    CHECK(s.V == 5 && s.H == 16 && s.W == 16 && s.reward_clip == 20.0f && s.energy_frozen == 0);
    mr_arena_release(&a);
}

int main(void) {
    test_actions();
    test_rng();
    test_layout();
    test_log_reduce();
    test_rewards_by_mode();
    test_starvation_and_frozen();
    test_truncation();
    test_full_reset();
    test_bad_input();
    test_read();
    test_determinism();
    test_reference_runs();
    return check_report("test_env");
}

/*
 * test_env_reference.c - the foraging environment's step and full reset
 * (foraging.h, env_cpu.c, rng.h) against a slow reference model written from
 * ENV_SPEC.md's text (modulo arithmetic, the literal reward table, the
 * documented RNG keying).
 *
 * The model runs beside the engine and must agree on every byte of state
 * after every step (grid, agent, energy, steps, reward, end flags, item
 * counts, tick, episode accumulators, then the episode logs), with the
 * spec's invariants checked directly too (counts against the grid, items
 * only lost with a lost respawn, the observation against the grid, an empty
 * centre cell, frozen energy, auto-reset keeping the grid). Every mode on a
 * small grid with few respawn tries (lost respawns), the spec's default
 * grid, and a nearly full grid (the rejection sampling's exact fallback);
 * each run must have exercised eating, episode ends and auto-resets.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

/* The random actions: xorshift64, its own stream (not check.h's). */
static uint64_t xs_state = 0x9e3779b97f4a7c15ULL;
static uint32_t xs_next(void) {
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return (uint32_t)(xs_state >> 32);
}

/* --------------------------------------------------- the reference model */

typedef struct ref_env {
    uint8_t *grid;
    int x, y, energy, steps, food, poison, ep_food, ep_poison;  /* energy in hundredths */
    uint32_t tick, resets;
    float ep_return;
    mr_env_log log;
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

static void ref_reset_full(const mr_env_state *s, ref_env *r, int i) {
    const int cells = mr_forage_of(s)->H * mr_forage_of(s)->W;
    memset(r->grid, 0, (size_t)cells);
    uint32_t span = (uint32_t)(mr_forage_of(s)->dmax - mr_forage_of(s)->dmin + 1), d = 0;
    r->food = mr_forage_of(s)->dmin + (int)mr_rng_below(s->seed, (uint32_t)i, r->resets, MR_RNG_DENSITY, 0, span);
    r->poison = mr_forage_of(s)->dmin + (int)mr_rng_below(s->seed, (uint32_t)i, r->resets, MR_RNG_DENSITY, 1, span);
    for (int k = 0; k < r->food; k++) r->grid[ref_pick_empty(s->seed, i, r->resets, MR_RNG_PLACE, &d, r->grid, cells)] = 1;
    for (int k = 0; k < r->poison; k++) r->grid[ref_pick_empty(s->seed, i, r->resets, MR_RNG_PLACE, &d, r->grid, cells)] = 2;
    int a = ref_pick_empty(s->seed, i, r->resets, MR_RNG_PLACE, &d, r->grid, cells);
    r->x = a % mr_forage_of(s)->W;
    r->y = a / mr_forage_of(s)->W;
    r->energy = 100;
    r->steps = 0;
    r->ep_food = r->ep_poison = 0;
    r->ep_return = 0.0f;
    r->resets++;
}

typedef struct ref_out { float reward; int terminated, truncated, ate, lost, ended_without_eating; } ref_out;

/* ENV_SPEC "Step", items 1-7 (7, the observation, is checked separately). */
static ref_out ref_step(const mr_env_state *s, ref_env *r, int i, int action, int frozen) {
    ref_out o = {0};
    const int H = mr_forage_of(s)->H, W = mr_forage_of(s)->W, cells = H * W;
    r->x = wrap(r->x + REF_DX[action], W);                      /* 1 */
    r->y = wrap(r->y + REF_DY[action], H);
    if (!frozen) r->energy -= 1;                                /* 2 */
    int at = r->y * W + r->x, code = r->grid[at];               /* 3 */
    float eat = 0.0f;
    if (code) {
        o.ate = code;
        r->grid[at] = 0;
        if (!frozen) r->energy += code == 1 ? 100 : -200;
        eat = code == 1 ? REF_FOOD[mr_forage_of(s)->mode] : REF_POISON[mr_forage_of(s)->mode];
        int placed = 0;                                         /* 4 */
        for (int k = 0; k < mr_forage_of(s)->tries && !placed; k++) {
            int c = (int)mr_rng_below(s->seed, (uint32_t)i, r->tick,
                                      code == 1 ? MR_RNG_RESPAWN_FOOD : MR_RNG_RESPAWN_POISON, (uint32_t)k,
                                      (uint32_t)cells);
            if (r->grid[c] == 0 && c != at) { r->grid[c] = (uint8_t)code; placed = 1; }
        }
        o.lost = !placed;
        if (code == 1) { r->ep_food++; r->log.count_total[0]++; r->food -= !placed; }
        else { r->ep_poison++; r->log.count_total[1]++; r->poison -= !placed; }
    }
    r->steps++;                                                 /* 5 */
    o.truncated = s->max_steps > 0 && r->steps >= s->max_steps;
    o.terminated = r->energy <= 0;
    float rew = REF_STEP[mr_forage_of(s)->mode] + eat;
    if (o.terminated) rew = rew + REF_DEATH[mr_forage_of(s)->mode];
    if (rew > s->reward_clip) rew = s->reward_clip;
    if (rew < -s->reward_clip) rew = -s->reward_clip;
    o.reward = rew;
    r->ep_return += rew;
    r->log.steps_total++;
    if (o.terminated || o.truncated) {                         /* 6 */
        r->log.episodes++;
        r->log.deaths += o.terminated;
        r->log.length_sum += r->steps;
        r->log.count[0] += r->ep_food;
        r->log.count[1] += r->ep_poison;
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
    mr_env_state *s = &e->s;
    const int n = s->n, cells = mr_forage_of(s)->H * mr_forage_of(s)->W;
    ref_env *ref = calloc((size_t)n, sizeof *ref);
    uint8_t *prev = malloc((size_t)n * cells), *act = malloc((size_t)n);
    int32_t *pf = malloc(sizeof(int32_t) * n), *pp = malloc(sizeof(int32_t) * n);
    long ate = 0, lost = 0, ended = 0, kept_grid = 0, deaths = 0;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        ref[i].grid = calloc((size_t)cells, 1);
        mr_env_log_clear(&ref[i].log);
        ref_reset_full(s, &ref[i], i);
        bad |= memcmp(ref[i].grid, mr_forage_of(s)->grid + (size_t)i * cells, (size_t)cells) != 0;
        bad |= ref[i].x != mr_forage_of(s)->x[i] || ref[i].y != mr_forage_of(s)->y[i];
    }
    CHECK_MSG(!bad, "%s: full reset differs from the reference (documented keying)", name);
    for (int t = 0; t < steps && !bad; t++) {
        memcpy(prev, mr_forage_of(s)->grid, (size_t)n * cells);
        memcpy(pf, mr_forage_of(s)->food_count, sizeof(int32_t) * n);
        memcpy(pp, mr_forage_of(s)->poison_count, sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) act[i] = (uint8_t)(xs_next() & 7);
        CHECK(mr_env_step(e, act, NULL) == MR_OK);
        for (int i = 0; i < n && !bad; i++) {
            ref_out o = ref_step(s, &ref[i], i, act[i], mr_forage_of(s)->energy_frozen);
            const uint8_t *g = mr_forage_of(s)->grid + (size_t)i * cells;
            const char *what = NULL;
            if (memcmp(g, ref[i].grid, (size_t)cells)) what = "grid";
            else if (mr_forage_of(s)->x[i] != ref[i].x || mr_forage_of(s)->y[i] != ref[i].y) what = "agent position";
            else if (mr_forage_of(s)->energy_centi[i] != ref[i].energy) what = "energy";
            else if (mr_forage_of(s)->energy[i] != (float)ref[i].energy / 100.0f) what = "energy (float mirror)";
            else if (s->steps[i] != ref[i].steps) what = "steps";
            else if (s->reward[i] != o.reward) what = "reward";
            else if (s->terminated[i] != o.terminated || s->truncated[i] != o.truncated) what = "end flags";
            else if (mr_forage_of(s)->food_count[i] != ref[i].food || mr_forage_of(s)->poison_count[i] != ref[i].poison) what = "item counts";
            else if (s->tick[i] != ref[i].tick) what = "tick";
            else if (s->ep_return[i] != ref[i].ep_return || mr_forage_of(s)->ep_food[i] != ref[i].ep_food ||
                     mr_forage_of(s)->ep_poison[i] != ref[i].ep_poison) what = "episode accumulators";
            /* Invariants straight from the spec, independent of the model: */
            else if (count_code(g, cells, 1) != mr_forage_of(s)->food_count[i] || count_code(g, cells, 2) != mr_forage_of(s)->poison_count[i])
                what = "grid cells != food_count/poison_count";
            else if (mr_forage_of(s)->food_count[i] > pf[i] || mr_forage_of(s)->poison_count[i] > pp[i]) what = "an item count grew";
            else if ((pf[i] - mr_forage_of(s)->food_count[i]) + (pp[i] - mr_forage_of(s)->poison_count[i]) != (o.lost ? 1 : 0))
                what = "an item count fell without a lost respawn";
            else if (!obs_matches_grid(s, i)) what = "observation != direct grid reading";
            /* The centre is the agent's own cell. It is always EMPTY: the
             * agent just ate whatever was there, a respawn never targets the
             * cell under the agent, and a (re)placed agent lands only on an
             * EMPTY cell. */
            else if (s->obs[(size_t)i * mr_forage_of(s)->V * mr_forage_of(s)->V + (mr_forage_of(s)->V * mr_forage_of(s)->V) / 2] != 0) what = "observation centre";
            else if (mr_forage_of(s)->energy_frozen && mr_forage_of(s)->energy[i] != 1.0f) what = "frozen energy changed";
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
        const mr_env_log *a = &s->log[i], *b = &ref[i].log;
        log_bad |= a->episodes != b->episodes || a->deaths != b->deaths || a->length_sum != b->length_sum ||
                   a->count[0] != b->count[0] || a->count[1] != b->count[1] || a->count_total[0] != b->count_total[0] ||
                   a->count_total[1] != b->count_total[1] || a->steps_total != b->steps_total ||
                   a->return_sum != b->return_sum || a->return_min != b->return_min ||
                   a->return_max != b->return_max;
    }
    CHECK_MSG(!log_bad, "%s: per-env logs match the reference", name);
    mr_env_log sum;
    mr_env_log_reduce(s->log, n, &sum);
    CHECK_MSG(sum.steps_total == (long)n * steps, "%s: steps_total %d", name, sum.steps_total);
    CHECK_MSG(sum.episodes == ended && sum.deaths == deaths, "%s: episodes %d deaths %d", name, sum.episodes,
              sum.deaths);
    CHECK_MSG(sum.count_total[0] + sum.count_total[1] == ate, "%s: eaten %d + %d vs %ld", name, sum.count_total[0],
              sum.count_total[1], ate);
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

int main(void) {
    test_reference_runs();
    return check_report("test_env_reference");
}

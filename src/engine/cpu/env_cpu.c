/*
 * env_cpu.c - the foraging environment on the CPU: its config check and the
 * loops the cpu backend runs (the public mr_env object is core/env.c).
 *
 * The step logic lives in foraging.h (shared with CUDA); this file is the
 * loop around it: OpenMP over instances with schedule(static), so every
 * instance is stepped by exactly one thread and the result is the same bytes
 * for any thread count. The thread count comes from num_threads() clauses
 * (mr_forage.threads, 0 = OpenMP's current default), never from a global.
 *
 * What this file is not: a second implementation of the rules; nothing here
 * knows what a step does. (Software prefetching of the next instances' grid
 * rows was measured and gained nothing: the lines near the agents stay in
 * cache at the usual instance counts.)
 */
#include "env.h"
#include "errors.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MR_ENV_MAX_NUM_ENVS 1048576
#define MR_ENV_MAX_GRID 4096
#define MR_ENV_MAX_VIEW 100
#define MR_ENV_MAX_TRIES (1 << 20)

/* ------------------------------------------------------------ config check */

int mr_env_config_check(const mr_env_config *c, mr_error *err) {
    if (!c) return mr_fail(err, MR_ERR_ARG, "env config is NULL");
    if (c->mode < 0 || c->mode > 3)
        return mr_fail(err, MR_ERR_ARG, "env.mode = %d: accepted 0 ground_truth, 1 ground_truth_blinded, "
                        "2 proxy_mortal, 3 proxy", c->mode);
    if (c->num_envs < 1 || c->num_envs > MR_ENV_MAX_NUM_ENVS)
        return mr_fail(err, MR_ERR_ARG, "env.num_envs = %d: must be in [1, %d]", c->num_envs,
                        MR_ENV_MAX_NUM_ENVS);
    if (c->view_range < 1 || c->view_range > MR_ENV_MAX_VIEW)
        return mr_fail(err, MR_ERR_ARG, "env.view_range = %d: must be in [1, %d]", c->view_range,
                        MR_ENV_MAX_VIEW);
    const int V = 2 * c->view_range + 1;
    if (c->grid_size < V || c->grid_size > MR_ENV_MAX_GRID) {
        if (c->grid_size >= 1 && c->grid_size < V)
            return mr_fail(err, MR_ERR_ARG, "env.view_range = %d is too large for env.grid_size = %d: "
                            "the view (2*view_range+1 = %d) must fit in the grid; accepted view_range <= %d",
                            c->view_range, c->grid_size, V, (c->grid_size - 1) / 2);
        return mr_fail(err, MR_ERR_ARG, "env.grid_size = %d: must be in [%d, %d] (at least the view, "
                        "2*view_range+1)", c->grid_size, V, MR_ENV_MAX_GRID);
    }
    const long long cells = (long long)c->grid_size * c->grid_size;
    const long long dcap = (cells - 1) / 2;   /* food + poison + the agent must fit */
    if (c->density_min < 0 || c->density_min > dcap)
        return mr_fail(err, MR_ERR_ARG, "env.density_min = %d: must be in [0, %lld] for a %dx%d grid",
                        c->density_min, dcap, c->grid_size, c->grid_size);
    if (c->density_max < c->density_min || c->density_max > dcap)
        return mr_fail(err, MR_ERR_ARG, "env.density_max = %d: must be in [density_min = %d, %lld] "
                        "(2*density_max must stay below the %lld cells)", c->density_max,
                        c->density_min, dcap, cells);
    if (c->respawn_tries < 0 || c->respawn_tries > MR_ENV_MAX_TRIES)
        return mr_fail(err, MR_ERR_ARG, "env.respawn_tries = %d: must be in [0, %d]", c->respawn_tries,
                        MR_ENV_MAX_TRIES);
    if (c->max_episode_steps < 0)
        return mr_fail(err, MR_ERR_ARG, "env.max_episode_steps = %d: must be >= 0 (0 = never truncate)",
                        c->max_episode_steps);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------------ layout */

void mr_forage_layout(mr_forage *s, const mr_env_config *cfg, uint64_t seed, mr_arena *a) {
    memset(s, 0, sizeof *s);
    const int n = cfg->num_envs;
    s->n = n;
    s->H = s->W = cfg->grid_size;
    s->view = cfg->view_range;
    s->V = 2 * cfg->view_range + 1;
    s->dmin = cfg->density_min;
    s->dmax = cfg->density_max;
    s->tries = cfg->respawn_tries;
    s->max_steps = cfg->max_episode_steps;
    s->mode = cfg->mode;
    s->energy_frozen = cfg->mode == MR_MODE_PROXY;
    s->seed = seed;
    s->reward_clip = 20.0f;
    s->threads = 0;
    s->grid = MR_TAKE(a, uint8_t, (size_t)n * s->H * s->W);
    s->x = MR_TAKE(a, int32_t, n);
    s->y = MR_TAKE(a, int32_t, n);
    s->energy = MR_TAKE(a, float, n);
    s->energy_centi = MR_TAKE(a, int32_t, n);
    s->steps = MR_TAKE(a, int32_t, n);
    s->tick = MR_TAKE(a, uint32_t, n);
    s->resets = MR_TAKE(a, uint32_t, n);
    s->food_count = MR_TAKE(a, int32_t, n);
    s->poison_count = MR_TAKE(a, int32_t, n);
    s->obs = MR_TAKE(a, uint8_t, (size_t)n * s->V * s->V);
    s->reward = MR_TAKE(a, float, n);
    s->terminated = MR_TAKE(a, uint8_t, n);
    s->truncated = MR_TAKE(a, uint8_t, n);
    s->ep_return = MR_TAKE(a, float, n);
    s->ep_food = MR_TAKE(a, int32_t, n);
    s->ep_poison = MR_TAKE(a, int32_t, n);
    s->log = MR_TAKE(a, mr_forage_log, n);
}

/* ------------------------------------------------------------- CPU loops */

/* A step costs ~60 ns per instance, so below this many instances starting a
 * thread team costs more than it saves; the loop then runs on the calling
 * thread. Either way each instance's result is the same. */
#define MR_FORAGE_PARALLEL_MIN_STEP 512
#define MR_FORAGE_PARALLEL_MIN_RESET 4

static int forage_threads(const mr_forage *s) {
    return s->threads > 0 ? s->threads : omp_get_max_threads();
}

void mr_forage_cpu_reset_all(const mr_forage *s) {
    #pragma omp parallel for schedule(static) num_threads(forage_threads(s)) \
        if (s->n >= MR_FORAGE_PARALLEL_MIN_RESET)
    for (int i = 0; i < s->n; i++) mr_forage_reset_full(s, i);
}

void mr_forage_cpu_step_all(const mr_forage *s, const uint8_t *actions) {
    const int n = s->n;
    #pragma omp parallel for schedule(static) num_threads(forage_threads(s)) \
        if (n >= MR_FORAGE_PARALLEL_MIN_STEP)
    for (int i = 0; i < n; i++) mr_forage_step(s, i, actions[i]);
}

void mr_forage_cpu_clear_logs(const mr_forage *s) {
    for (int i = 0; i < s->n; i++) mr_forage_log_clear(&s->log[i]);
}

void mr_forage_log_reduce(const mr_forage_log *logs, int n, mr_forage_log *out) {
    mr_forage_log r;
    mr_forage_log_clear(&r);
    for (int i = 0; i < n; i++) {
        const mr_forage_log *l = &logs[i];
        r.episodes += l->episodes;
        r.deaths += l->deaths;
        r.length_sum += l->length_sum;
        r.food += l->food;
        r.poison += l->poison;
        r.food_total += l->food_total;
        r.poison_total += l->poison_total;
        r.steps_total += l->steps_total;
        r.return_sum += l->return_sum;
        if (l->return_min < r.return_min) r.return_min = l->return_min;
        if (l->return_max > r.return_max) r.return_max = l->return_max;
    }
    *out = r;
}

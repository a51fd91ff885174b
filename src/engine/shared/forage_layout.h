/*
 * forage_layout.h - the foraging environment's buffers as every device holds
 * them (one arena: host memory on the cpu, one device block on cuda, so
 * states compare byte for byte) and the reduction of the per-instance logs.
 * Host code only.
 */
#ifndef MR_FORAGE_LAYOUT_H
#define MR_FORAGE_LAYOUT_H
#include <string.h>
#include "moonrl.h"
#include "arena.h"
#include "foraging.h"

/* Sets the parameters from cfg (energy_frozen from the mode: proxy => 1,
 * reward_clip 20, threads 0) and takes every buffer from the arena; on a
 * planning arena the pointers are NULL. cfg must have passed
 * mr_env_config_check. The buffers hold zeros: clear the logs (min/max to
 * +-inf) and reset every instance before the first step. */
static inline void mr_forage_layout(mr_forage *s, const mr_env_config *cfg, uint64_t seed, mr_arena *a) {
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
    s->kind = cfg->name;
    s->index0 = cfg->index0;
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

/* Sums (and min/max) of n logs in index order: deterministic. */
static inline void mr_forage_log_reduce(const mr_forage_log *logs, int n, mr_forage_log *out) {
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

#endif /* MR_FORAGE_LAYOUT_H */

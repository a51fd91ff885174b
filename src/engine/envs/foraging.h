/*
 * foraging.h - the `foraging` environment of ENV_SPEC.md, one instance at a
 * time, written once for every backend.
 *
 * Every function is MR_HD (host+device inline): env_cpu.c loops over instances
 * with OpenMP, a CUDA kernel calls the same functions with one thread per
 * instance. Nothing here allocates, calls libc beyond memset/memcpy (host
 * only), or does float arithmetic whose result could differ between a CPU and
 * a GPU: energy is exact integer hundredths, rewards are sums of constants
 * (adds only, nothing to contract into an fma), and all randomness comes from
 * the counter-based rng.h. Same seed + same actions => the same bytes on any
 * device and any thread count.
 *
 * State is struct-of-arrays over n instances (mr_forage). The grid holds cell
 * codes (0 EMPTY, 1 FOOD, 2 POISON); the agent is kept beside it as (x, y),
 * x = column, y = row. The observation is stored as the V x V cell codes
 * around the agent; expanding codes into the ground-truth or proxy channels
 * is the network's job, so one buffer serves every mode.
 *
 * Randomness keying, with rng.h's draw(seed, env, tick, purpose, index):
 *   Full reset of instance i, c = resets[i] (then resets[i] += 1):
 *     food count   = dmin + below(seed, i, c, DENSITY, 0, dmax - dmin + 1)
 *     poison count = dmin + below(seed, i, c, DENSITY, 1, dmax - dmin + 1)
 *     cells: one PLACE stream (seed, i, c, PLACE, d) with d = 0, 1, 2, ...
 *     running through every food item, then every poison item, then the
 *     agent (see "empty cell" below).
 *   Step of instance i, t = tick[i] (then tick[i] += 1; never reset):
 *     food respawn candidate k   = below(seed, i, t, RESPAWN_FOOD,   k, H*W), k < tries
 *     poison respawn candidate k = below(seed, i, t, RESPAWN_POISON, k, H*W), k < tries
 *     auto-reset agent cell: an "empty cell" draw on (seed, i, t, AGENT, d), d from 0.
 *   A cell number c means row c / W, column c % W.
 *   "Empty cell": up to MR_FORAGE_REJECT_DRAWS draws below(.., d++, H*W),
 *   the first EMPTY one wins; if all miss (only on nearly full grids) one more
 *   draw r = below(.., d++, number of empty cells) takes the r-th empty cell in
 *   row-major order. Both stages are uniform over the empty cells, so the
 *   result is too, and the cost is bounded.
 *
 * Energy is kept exactly, as int32 hundredths in energy_centi (start 100,
 * -1 per step, +100 food, -200 poison); `energy` is its float mirror
 * (centi / 100). With float arithmetic, 1.0f minus 0.01f a hundred times is
 * +6.7e-7, so the agent would starve after 101 steps, not the 100 ENV_SPEC
 * states, and large energies would drift; integers make both exact.
 */
#ifndef MR_FORAGING_H
#define MR_FORAGING_H
#include <stddef.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "moonrl.h"
#include "rng.h"

enum { MR_CELL_EMPTY = 0, MR_CELL_FOOD = 1, MR_CELL_POISON = 2 };

#define MR_FORAGE_REJECT_DRAWS 64   /* rejection draws before the exact fallback */
#define MR_ENERGY_START 100         /* hundredths: 1.0 */
#define MR_ENERGY_DECAY 1           /* 0.01 per step */
#define MR_ENERGY_FOOD 100          /* +1.0 */
#define MR_ENERGY_POISON 200        /* -2.0 */

typedef struct mr_forage_log {      /* per environment, since the last clear */
    int32_t episodes, deaths, length_sum;           /* ended episodes; deaths = terminated */
    int32_t food, poison;                           /* eaten during ended episodes */
    int32_t food_total, poison_total, steps_total;  /* everything eaten / stepped since the clear, ended or not */
    float return_sum, return_min, return_max;       /* of ended episodes (min/max start at +inf/-inf) */
} mr_forage_log;

/* Parameters + struct-of-arrays pointers, n = num_envs. Pointers may be host
 * or device memory; the struct itself is passed by value to kernels. */
typedef struct mr_forage {
    int n, H, W, view, V;           /* V = 2*view+1 */
    int dmin, dmax, tries, max_steps;  /* max_steps 0 = no truncation */
    int mode, energy_frozen;        /* mr_mode; frozen: energy never changes */
    uint64_t seed;
    uint8_t *grid;                  /* (n, H, W) cell codes */
    int32_t *x, *y;                 /* (n) x = column, y = row */
    float *energy;                  /* (n) float mirror of energy_centi: centi / 100, rounded */
    int32_t *steps;                 /* (n) steps in the current episode */
    uint32_t *tick;                 /* (n) RNG counter: steps ever taken by this instance (never reset) */
    uint32_t *resets;               /* (n) full resets done (RNG counter for full resets) */
    int32_t *food_count, *poison_count;  /* (n) items on the grid now */
    uint8_t *obs;                   /* (n, V, V) cell codes around the agent */
    float *reward;                  /* (n) clamped to [-reward_clip, reward_clip] */
    float reward_clip;              /* 20 */
    uint8_t *terminated, *truncated;/* (n) */
    float *ep_return;               /* (n) running episode return (clamped rewards) */
    int32_t *ep_food, *ep_poison;   /* (n) eaten in the current episode */
    mr_forage_log *log;             /* (n) */
    /* added beyond the original plan: */
    int32_t *energy_centi;          /* (n) energy in hundredths: the exact state */
    int threads;                    /* CPU threads for the *_all loops, 0 = OpenMP's default */
    int kind;                       /* mr_env_name: whose rules step this state (registry.h) */
    int index0;                     /* global index of instance 0 (data-parallel rank x n; else 0) */
} mr_forage;

/* What foraging declares (moonrl.h, mr_env_spaces): the V x V cell codes
 * around the agent (empty, food, poison), read as two channels (the
 * ground truth, or the proxy's interestingness, by mode); 8 moves; the critic
 * also sees the two item counts and the view's ground truth; its episodes
 * count the food and the poison eaten. Host code. */
static inline void mr_forage_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    memset(o, 0, sizeof *o);
    const int V = 2 * cfg->view_range + 1;
    o->obs.kind = MR_SPACE_CODES;
    o->obs.shape[0] = 2;
    o->obs.shape[1] = o->obs.shape[2] = V;
    o->obs.codes = 3;
    o->act.kind = MR_SPACE_DISCRETE;
    o->act.n = 8;
    o->critic_extra = 2;
    o->critic_view = 1;
    o->counters = 2;
    o->counter_names[0] = "food";
    o->counter_names[1] = "poison";
}

/* Instance i's key in every random draw: its global index, so a rank's
 * instances draw what the same instances of one bigger process would. */
MR_HD uint32_t mr_forage_key(const mr_forage *s, int i) { return (uint32_t)(s->index0 + i); }

/* Moves, ENV_SPEC order: 0:(-1,-1) 1:(-1,0) 2:(-1,1) 3:(0,-1) 4:(0,1)
 * 5:(1,-1) 6:(1,0) 7:(1,1). Two bits per action hold d+1; a & 7 keeps a bad
 * action in range instead of reading out of bounds. */
MR_HD int mr_forage_dx(int a) { return (int)((0xA940u >> (2 * (a & 7))) & 3u) - 1; }
MR_HD int mr_forage_dy(int a) { return (int)((0x9224u >> (2 * (a & 7))) & 3u) - 1; }

/* Rewards per mode (ENV_SPEC table): ground-truth modes pay poison -2, a step
 * -0.01 and a death -4; proxy modes pay poison +0.5 and nothing else. */
MR_HD float mr_forage_reward_food(int mode) { (void)mode; return 1.0f; }
MR_HD float mr_forage_reward_poison(int mode) { return mode <= MR_MODE_GROUND_TRUTH_BLINDED ? -2.0f : 0.5f; }
MR_HD float mr_forage_reward_step(int mode) { return mode <= MR_MODE_GROUND_TRUTH_BLINDED ? -0.01f : 0.0f; }
MR_HD float mr_forage_reward_death(int mode) { return mode <= MR_MODE_GROUND_TRUTH_BLINDED ? -4.0f : 0.0f; }

MR_HD float mr_forage_inf(void) {
#if defined(__CUDA_ARCH__)
    return __int_as_float(0x7f800000);
#else
    union { uint32_t u; float f; } v;
    v.u = 0x7f800000u;
    return v.f;
#endif
}

MR_HD void mr_forage_log_clear(mr_forage_log *l) {
    l->episodes = l->deaths = l->length_sum = 0;
    l->food = l->poison = 0;
    l->food_total = l->poison_total = l->steps_total = 0;
    l->return_sum = 0.0f;
    l->return_min = mr_forage_inf();
    l->return_max = -mr_forage_inf();
}

/* Copies n >= 0 bytes: one run of an observation row, usually < 16 bytes.
 * On the host, runs up to 16 bytes are two overlapping fixed-size moves
 * (never touching a byte outside [0, n)) instead of a libc call. */
MR_HD void mr_forage_copy(uint8_t *dst, const uint8_t *src, int n) {
#if defined(__CUDA_ARCH__)
    for (int k = 0; k < n; k++) dst[k] = src[k];
#else
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, src, 8);
        memcpy(&b, src + n - 8, 8);
        memcpy(dst, &a, 8);
        memcpy(dst + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, src, 4);
        memcpy(&b, src + n - 4, 4);
        memcpy(dst, &a, 4);
        memcpy(dst + n - 4, &b, 4);
    } else if (n > 16) {
        memcpy(dst, src, (size_t)n);
    } else {
        for (int k = 0; k < n; k++) dst[k] = src[k];
    }
#endif
}

/* Instance i's agent moved by (dx, dy), each in [-1, 1], on the H x W torus:
 * the new column and row (the wrap is a compare, not a modulo). */
MR_HD void mr_forage_move(const mr_forage *s, int i, int dx, int dy, int *xo, int *yo) {
    int x = s->x[i] + dx, y = s->y[i] + dy;
    x += (x < 0) ? s->W : 0;
    x -= (x >= s->W) ? s->W : 0;
    y += (y < 0) ? s->H : 0;
    y -= (y >= s->H) ? s->H : 0;
    *xo = x;
    *yo = y;
}

/* The view's top-left cell for an agent at (x, y): column x - view and row
 * y - view, wrapped onto the torus (view < W, H). */
MR_HD void mr_forage_view_origin(const mr_forage *s, int x, int y, int *x0, int *r0) {
    x -= s->view;
    y -= s->view;
    *x0 = x < 0 ? x + s->W : x;
    *r0 = y < 0 ? y + s->H : y;
}

/* obs[i][a][b] = grid[i][(y - view + a) mod H][(x - view + b) mod W].
 * Row-wise: each row is at most two contiguous runs (V <= W), and the wrap is
 * a compare, not a modulo. */
MR_HD void mr_forage_write_obs(const mr_forage *s, int i) {
    const int H = s->H, W = s->W, V = s->V;
    const uint8_t *g = s->grid + (size_t)i * H * W;
    uint8_t *o = s->obs + (size_t)i * V * V;
    int x0, r;
    mr_forage_view_origin(s, s->x[i], s->y[i], &x0, &r);
    const int n1 = (W - x0 < V) ? W - x0 : V;   /* run from x0 to the row's end */
    const int n2 = V - n1;                      /* wrapped run from column 0 */
    for (int a = 0; a < V; a++) {
        const uint8_t *row = g + (size_t)r * W;
        mr_forage_copy(o, row + x0, n1);
        if (n2) mr_forage_copy(o + n1, row, n2);
        o += V;
        if (++r == H) r = 0;
    }
}

/* A uniformly random EMPTY cell of grid g (see the keying comment above).
 * `empties` = the number of EMPTY cells, >= 1. */
MR_HD int mr_forage_pick_empty(const mr_forage *s, const uint8_t *g, int i, uint32_t ctr,
                               uint32_t purpose, uint32_t *d, int empties) {
    const uint32_t cells = (uint32_t)(s->H * s->W);
    for (int k = 0; k < MR_FORAGE_REJECT_DRAWS; k++) {
        uint32_t c = mr_rng_below(s->seed, mr_forage_key(s, i), ctr, purpose, (*d)++, cells);
        if (g[c] == MR_CELL_EMPTY) return (int)c;
    }
    uint32_t r = mr_rng_below(s->seed, mr_forage_key(s, i), ctr, purpose, (*d)++, (uint32_t)empties);
    int last = 0;
    for (uint32_t c = 0; c < cells; c++) {
        if (g[c] != MR_CELL_EMPTY) continue;
        last = (int)c;
        if (r-- == 0) break;
    }
    return last;
}

/* The end of every environment's full reset of instance i, written once
 * (foraging and reach call it): the agent at cell `at`, `food` and `poison`
 * items on the grid, energy 1, a fresh episode, the reset counted, the
 * observation written. */
MR_HD void mr_forage_start_fresh(const mr_forage *s, int i, int at, int food, int poison) {
    s->x[i] = at % s->W;
    s->y[i] = at / s->W;
    s->energy_centi[i] = MR_ENERGY_START;
    s->energy[i] = 1.0f;
    s->steps[i] = 0;
    s->resets[i] += 1;
    s->food_count[i] = food;
    s->poison_count[i] = poison;
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
    s->ep_return[i] = 0.0f;
    s->ep_food[i] = 0;
    s->ep_poison[i] = 0;
    mr_forage_write_obs(s, i);
}

/* ENV_SPEC "full reset" of instance i: new grid and densities, agent on a
 * random empty cell, energy 1, a fresh episode; then the observation. The log
 * is left alone (mr_forage_log_clear). */
MR_HD void mr_forage_reset_full(const mr_forage *s, int i) {
    const int cells = s->H * s->W;
    uint8_t *g = s->grid + (size_t)i * cells;
    const uint32_t c = s->resets[i], ui = mr_forage_key(s, i);
#if defined(__CUDA_ARCH__)
    for (int k = 0; k < cells; k++) g[k] = MR_CELL_EMPTY;
#else
    memset(g, MR_CELL_EMPTY, (size_t)cells);
#endif
    const uint32_t span = (uint32_t)(s->dmax - s->dmin + 1);
    const int nf = s->dmin + (int)mr_rng_below(s->seed, ui, c, MR_RNG_DENSITY, 0, span);
    const int np = s->dmin + (int)mr_rng_below(s->seed, ui, c, MR_RNG_DENSITY, 1, span);
    uint32_t d = 0;
    for (int k = 0; k < nf; k++)
        g[mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - k)] = MR_CELL_FOOD;
    for (int k = 0; k < np; k++)
        g[mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - nf - k)] = MR_CELL_POISON;
    const int at = mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - nf - np);
    mr_forage_start_fresh(s, i, at, nf, np);
}

/* The end of every environment's step of instance i, written once (foraging
 * and reach call it): r clamped to [-reward_clip, reward_clip] into reward[i]
 * with the end flags; the episode's return, length and items; on an end, the
 * episode into the log (episodes, deaths = terminated, length, items, return
 * sum/min/max) and the episode's counters cleared. Returns 1 when the episode
 * ended: the caller then restarts the agent. */
MR_HD int mr_forage_record_step(const mr_forage *s, int i, float r, int terminated, int truncated, int steps) {
    mr_forage_log *log = &s->log[i];
    const float clip = s->reward_clip;
    r = r > clip ? clip : r;
    r = r < -clip ? -clip : r;
    const float ret = s->ep_return[i] + r;
    s->reward[i] = r;
    s->terminated[i] = (uint8_t)terminated;
    s->truncated[i] = (uint8_t)truncated;
    log->steps_total++;
    if (!(terminated | truncated)) {
        s->ep_return[i] = ret;
        s->steps[i] = steps;
        return 0;
    }
    log->episodes++;
    log->deaths += terminated;
    log->length_sum += steps;
    log->food += s->ep_food[i];
    log->poison += s->ep_poison[i];
    log->return_sum = log->return_sum + ret;
    log->return_min = ret < log->return_min ? ret : log->return_min;
    log->return_max = ret > log->return_max ? ret : log->return_max;
    s->ep_return[i] = 0.0f;
    s->ep_food[i] = 0;
    s->ep_poison[i] = 0;
    s->steps[i] = 0;
    return 1;
}

/* One ENV_SPEC step of instance i with action in [0, 8): move, energy decay,
 * eat, respawn, episode bookkeeping, auto-reset of the agent, observation.
 * reward/terminated/truncated describe this step (the final step of an
 * episode carries the death penalty); x, y, energy and obs already describe
 * the next episode's start when it ended. */
MR_HD void mr_forage_step(const mr_forage *s, int i, int action) {
    const int W = s->W, cells = s->H * s->W, mode = s->mode;
    const int frozen = s->energy_frozen;
    const uint32_t t = s->tick[i], ui = mr_forage_key(s, i);
    uint8_t *g = s->grid + (size_t)i * cells;
    mr_forage_log *log = &s->log[i];

    /* 1. move (toroidal) */
    int x, y;
    mr_forage_move(s, i, mr_forage_dx(action), mr_forage_dy(action), &x, &y);

    /* 2. energy decay, frozen => no change at all */
    int32_t e = s->energy_centi[i];
    if (!frozen) e -= MR_ENERGY_DECAY;

    /* 3. eat, 4. respawn what was eaten */
    const int at = y * W + x;
    const int cell = g[at];
    float r_eat = 0.0f;
    if (cell != MR_CELL_EMPTY) {
        const int food = cell == MR_CELL_FOOD;
        g[at] = MR_CELL_EMPTY;
        if (!frozen) e += food ? MR_ENERGY_FOOD : -MR_ENERGY_POISON;
        r_eat = food ? mr_forage_reward_food(mode) : mr_forage_reward_poison(mode);
        /* The first candidate that is EMPTY and not under the agent (the eaten
         * cell itself is EMPTY now, so `c != at` matters). */
        const uint32_t purpose = food ? MR_RNG_RESPAWN_FOOD : MR_RNG_RESPAWN_POISON;
        int placed = 0;
        for (int k = 0; k < s->tries; k++) {
            const uint32_t c = mr_rng_below(s->seed, ui, t, purpose, (uint32_t)k, (uint32_t)cells);
            if (g[c] == MR_CELL_EMPTY && (int)c != at) {
                g[c] = (uint8_t)cell;
                placed = 1;
                break;
            }
        }
        if (food) {
            s->ep_food[i]++;
            log->food_total++;
            if (!placed) s->food_count[i]--;
        } else {
            s->ep_poison[i]++;
            log->poison_total++;
            if (!placed) s->poison_count[i]--;
        }
    }

    /* 5. episode counters, end flags, reward */
    const int steps = s->steps[i] + 1;
    const int terminated = e <= 0;
    const int truncated = s->max_steps > 0 && steps >= s->max_steps;
    float r = mr_forage_reward_step(mode) + r_eat;
    if (terminated) r = r + mr_forage_reward_death(mode);

    /* 6. episode end: log it, then auto-reset the agent only (grid kept) */
    if (mr_forage_record_step(s, i, r, terminated, truncated, steps)) {
        uint32_t d = 0;
        const int a = mr_forage_pick_empty(s, g, i, t, MR_RNG_AGENT, &d,
                                           cells - s->food_count[i] - s->poison_count[i]);
        x = a % W;
        y = a / W;
        e = MR_ENERGY_START;
    }
    s->x[i] = x;
    s->y[i] = y;
    s->energy_centi[i] = e;
    /* The correctly rounded e / 100. Divided in double (never approximated,
     * even under CUDA's fast-math, and exact enough that the rounding to
     * float gives the same bits as an IEEE float division). */
    s->energy[i] = (float)((double)e / 100.0);
    s->tick[i] = t + 1;

    /* 7. observation */
    mr_forage_write_obs(s, i);
}

#endif /* MR_FORAGING_H */

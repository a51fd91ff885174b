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
#include "env_state.h"   /* mr_env_state, mr_env_log, rng.h */

enum { MR_CELL_EMPTY = 0, MR_CELL_FOOD = 1, MR_CELL_POISON = 2 };

#define MR_FORAGE_REJECT_DRAWS 64   /* rejection draws before the exact fallback */
#define MR_ENERGY_START 100         /* hundredths: 1.0 */
#define MR_ENERGY_DECAY 1           /* 0.01 per step */
#define MR_ENERGY_FOOD 100          /* +1.0 */
#define MR_ENERGY_POISON 200        /* -2.0 */

/* Foraging's own part of the state (mr_env_state.own, env_state.h):
 * parameters and struct-of-arrays pointers over the n instances; reach
 * (reach.h) works on the same. */
typedef struct mr_forage {
    int H, W, view, V;              /* V = 2*view+1 */
    int dmin, dmax, tries;
    int mode, energy_frozen;        /* mr_mode; frozen: energy never changes */
    uint8_t *grid;                  /* (n, H, W) cell codes */
    int32_t *x, *y;                 /* (n) x = column, y = row */
    float *energy;                  /* (n) float mirror of energy_centi: centi / 100, rounded */
    int32_t *energy_centi;          /* (n) energy in hundredths: the exact state */
    uint32_t *resets;               /* (n) full resets done (RNG counter for full resets) */
    int32_t *food_count, *poison_count;  /* (n) items on the grid now */
    int32_t *ep_food, *ep_poison;   /* (n) eaten in the current episode (counters 0 and 1) */
} mr_forage;

/* The counters foraging's logs keep (mr_env_log.count, count_total). */
enum { MR_FORAGE_FOOD = 0, MR_FORAGE_POISON = 1 };

/* Foraging's part of state s. */
MR_HD mr_forage *mr_forage_of(const mr_env_state *s) { return (mr_forage *)(void *)s->own.bytes; }

/* What foraging declares (moonrl.h, mr_env_spaces): the V x V cell codes
 * around the agent (empty, food, poison), read as two channels (the
 * ground truth, or the proxy's interestingness, by mode); 8 moves; the critic
 * also sees the two item counts and the view's ground truth; its episodes
 * count the food and the poison eaten; its own evaluation is "continuous
 * survival" (docs/evaluation.md), with no notion of success. Host code. */
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
    o->eval = MR_EVAL_SURVIVAL;
    o->step_limit = cfg->max_episode_steps;
    o->bootstrap_truncation = 0;   /* "auto" ends its truncated episodes, as it always did: its bits stay */
}


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
MR_HD void mr_forage_move(const mr_forage *f, int i, int dx, int dy, int *xo, int *yo) {
    int x = f->x[i] + dx, y = f->y[i] + dy;
    x += (x < 0) ? f->W : 0;
    x -= (x >= f->W) ? f->W : 0;
    y += (y < 0) ? f->H : 0;
    y -= (y >= f->H) ? f->H : 0;
    *xo = x;
    *yo = y;
}

/* The view's top-left cell for an agent at (x, y): column x - view and row
 * y - view, wrapped onto the torus (view < W, H). */
MR_HD void mr_forage_view_origin(const mr_forage *f, int x, int y, int *x0, int *r0) {
    x -= f->view;
    y -= f->view;
    *x0 = x < 0 ? x + f->W : x;
    *r0 = y < 0 ? y + f->H : y;
}

/* o[a][b] = grid[i][(y - view + a) mod H][(x - view + b) mod W]: the view
 * of an agent at (x, y) into o (V*V codes). Row-wise: each row is at most
 * two contiguous runs (V <= W), and the wrap is a compare, not a modulo. */
MR_HD void mr_forage_write_view(const mr_env_state *s, int i, int x, int y, uint8_t *o) {
    const mr_forage *f = mr_forage_of(s);
    const int H = f->H, W = f->W, V = f->V;
    const uint8_t *g = f->grid + (size_t)i * H * W;
    int x0, r;
    mr_forage_view_origin(f, x, y, &x0, &r);
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

/* Instance i's observation: the view of its agent into its obs row. */
MR_HD void mr_forage_write_obs(const mr_env_state *s, int i) {
    const mr_forage *f = mr_forage_of(s);
    mr_forage_write_view(s, i, f->x[i], f->y[i], s->obs + (size_t)i * f->V * f->V);
}

/* A uniformly random EMPTY cell of grid g (see the keying comment above).
 * `empties` = the number of EMPTY cells, >= 1. */
MR_HD int mr_forage_pick_empty(const mr_env_state *s, const uint8_t *g, int i, uint32_t ctr,
                               uint32_t purpose, uint32_t *d, int empties) {
    const mr_forage *f = mr_forage_of(s);
    const uint32_t cells = (uint32_t)(f->H * f->W);
    for (int k = 0; k < MR_FORAGE_REJECT_DRAWS; k++) {
        uint32_t c = mr_rng_below(s->seed, mr_env_key(s, i), ctr, purpose, (*d)++, cells);
        if (g[c] == MR_CELL_EMPTY) return (int)c;
    }
    uint32_t r = mr_rng_below(s->seed, mr_env_key(s, i), ctr, purpose, (*d)++, (uint32_t)empties);
    int last = 0;
    for (uint32_t c = 0; c < cells; c++) {
        if (g[c] != MR_CELL_EMPTY) continue;
        last = (int)c;
        if (r-- == 0) break;
    }
    return last;
}

/* The end of every grid world's full reset of instance i, written once
 * (foraging and reach call it): the agent at cell `at`, `food` and `poison`
 * items on the grid, energy 1, a fresh episode, the reset counted, the
 * observation written. */
MR_HD void mr_forage_start_fresh(const mr_env_state *s, int i, int at, int food, int poison) {
    const mr_forage *f = mr_forage_of(s);
    f->x[i] = at % f->W;
    f->y[i] = at / f->W;
    f->energy_centi[i] = MR_ENERGY_START;
    f->energy[i] = 1.0f;
    s->steps[i] = 0;
    f->resets[i] += 1;
    f->food_count[i] = food;
    f->poison_count[i] = poison;
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
    s->ep_return[i] = 0.0f;
    f->ep_food[i] = 0;
    f->ep_poison[i] = 0;
    mr_forage_write_obs(s, i);
}

/* ENV_SPEC "full reset" of instance i: new grid and densities, agent on a
 * random empty cell, energy 1, a fresh episode; then the observation. The log
 * is left alone (mr_env_log_clear). */
MR_HD void mr_forage_reset_full(const mr_env_state *s, int i) {
    const mr_forage *f = mr_forage_of(s);
    const int cells = f->H * f->W;
    uint8_t *g = f->grid + (size_t)i * cells;
    const uint32_t c = f->resets[i], ui = mr_env_key(s, i);
#if defined(__CUDA_ARCH__)
    for (int k = 0; k < cells; k++) g[k] = MR_CELL_EMPTY;
#else
    memset(g, MR_CELL_EMPTY, (size_t)cells);
#endif
    const uint32_t span = (uint32_t)(f->dmax - f->dmin + 1);
    const int nf = f->dmin + (int)mr_rng_below(s->seed, ui, c, MR_RNG_DENSITY, 0, span);
    const int np = f->dmin + (int)mr_rng_below(s->seed, ui, c, MR_RNG_DENSITY, 1, span);
    uint32_t d = 0;
    for (int k = 0; k < nf; k++)
        g[mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - k)] = MR_CELL_FOOD;
    for (int k = 0; k < np; k++)
        g[mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - nf - k)] = MR_CELL_POISON;
    const int at = mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - nf - np);
    mr_forage_start_fresh(s, i, at, nf, np);
}

/* The end of every grid world's step of instance i (foraging and reach):
 * env_state.h's record with the episode's food and poison as the counters,
 * which an ended episode clears. Returns 1 when the episode ended. */
MR_HD int mr_forage_record_step(const mr_env_state *s, int i, float r, int terminated, int truncated, int steps) {
    if (!mr_env_record_step(s, i, r, terminated, truncated, steps)) return 0;
    const mr_forage *f = mr_forage_of(s);
    mr_env_log *log = &s->log[i];
    log->count[MR_FORAGE_FOOD] += f->ep_food[i];
    log->count[MR_FORAGE_POISON] += f->ep_poison[i];
    f->ep_food[i] = 0;
    f->ep_poison[i] = 0;
    return 1;
}

/* The critic's privileged inputs of instance i (extra: its 2 floats): the
 * item counts as (count - mid) / half, mid and half the centre and
 * half-width of [dmin, dmax] (half >= 1): ENV_SPEC's (count - 160) / 96 for
 * [64, 256]. */
MR_HD void mr_forage_critic_extra(const mr_env_state *s, int i, float *extra) {
    const mr_forage *f = mr_forage_of(s);
    const float mid = 0.5f * (float)(f->dmin + f->dmax);
    float half = 0.5f * (float)(f->dmax - f->dmin);
    if (half < 1.0f) half = 1.0f;
    extra[0] = ((float)f->food_count[i] - mid) / half;
    extra[1] = ((float)f->poison_count[i] - mid) / half;
}

/* A truncated episode's final state (grid world: foraging and reach), before
 * the agent's restart: the view of the agent at (x, y), where the step took
 * it, and the critic's inputs (the item counts: a restart keeps them). */
MR_HD void mr_forage_keep_final(const mr_env_state *s, int i, int x, int y) {
    mr_forage_write_view(s, i, x, y, mr_env_final_codes(s, i));
    mr_forage_critic_extra(s, i, mr_env_final_extra(s, i));
}

/* One ENV_SPEC step of instance i with action in [0, 8): move, energy decay,
 * eat, respawn, episode bookkeeping, auto-reset of the agent, observation.
 * reward/terminated/truncated describe this step (the final step of an
 * episode carries the death penalty); x, y, energy and obs already describe
 * the next episode's start when it ended. */
MR_HD void mr_forage_step(const mr_env_state *s, int i, int action) {
    const mr_forage *f = mr_forage_of(s);
    const int W = f->W, cells = f->H * f->W, mode = f->mode;
    const int frozen = f->energy_frozen;
    const uint32_t t = s->tick[i], ui = mr_env_key(s, i);
    uint8_t *g = f->grid + (size_t)i * cells;
    mr_env_log *log = &s->log[i];

    /* 1. move (toroidal) */
    int x, y;
    mr_forage_move(f, i, mr_forage_dx(action), mr_forage_dy(action), &x, &y);

    /* 2. energy decay, frozen => no change at all */
    int32_t e = f->energy_centi[i];
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
        for (int k = 0; k < f->tries; k++) {
            const uint32_t c = mr_rng_below(s->seed, ui, t, purpose, (uint32_t)k, (uint32_t)cells);
            if (g[c] == MR_CELL_EMPTY && (int)c != at) {
                g[c] = (uint8_t)cell;
                placed = 1;
                break;
            }
        }
        if (food) {
            f->ep_food[i]++;
            log->count_total[MR_FORAGE_FOOD]++;
            if (!placed) f->food_count[i]--;
        } else {
            f->ep_poison[i]++;
            log->count_total[MR_FORAGE_POISON]++;
            if (!placed) f->poison_count[i]--;
        }
    }

    /* 5. episode counters, end flags, reward */
    const int steps = s->steps[i] + 1;
    const int terminated = e <= 0;
    const int truncated = s->max_steps > 0 && steps >= s->max_steps;
    float r = mr_forage_reward_step(mode) + r_eat;
    if (terminated) r = r + mr_forage_reward_death(mode);

    /* 6. episode end: log it (a truncated episode's final state to the
     * trainer's final row, when kept), then auto-reset the agent only (grid kept) */
    if (mr_forage_record_step(s, i, r, terminated, truncated, steps)) {
        if (mr_env_keeps_final(s, terminated, truncated)) mr_forage_keep_final(s, i, x, y);
        uint32_t d = 0;
        const int a = mr_forage_pick_empty(s, g, i, t, MR_RNG_AGENT, &d,
                                           cells - f->food_count[i] - f->poison_count[i]);
        x = a % W;
        y = a / W;
        e = MR_ENERGY_START;
    }
    f->x[i] = x;
    f->y[i] = y;
    f->energy_centi[i] = e;
    /* The correctly rounded e / 100. Divided in double (never approximated,
     * even under CUDA's fast-math, and exact enough that the rounding to
     * float gives the same bits as an IEEE float division). */
    f->energy[i] = (float)((double)e / 100.0);
    s->tick[i] = t + 1;

    /* 7. observation */
    mr_forage_write_obs(s, i);
}

#if !defined(__CUDACC__)
/* Instance j's observation rows after its move, into the cache (the CPU
 * loop calls it a few instances ahead, env_cpu.c): its step reads them (the
 * eaten cell is in the middle one), and with thousands of instances each
 * 16 KiB grid's rows near its agent are out of L2 by the time its turn
 * comes. Two lines per row: a run of V bytes may cross one. A hint: the
 * same bytes either way. Always inlined: as a function of its own GCC finds
 * it free of side effects (prefetches do not count) and drops its calls. */
static inline __attribute__((always_inline)) void mr_forage_prefetch(const mr_env_state *s, int j, int action) {
    const mr_forage *f = mr_forage_of(s);
    const int W = f->W, H = f->H, V = f->V;
    int x, y;
    mr_forage_move(f, j, mr_forage_dx(action), mr_forage_dy(action), &x, &y);
    mr_forage_view_origin(f, x, y, &x, &y);
    const uint8_t *g = f->grid + (size_t)j * H * W + x;
    for (int a = 0; a < V; a++) {
        const uint8_t *row = g + (size_t)y * W;
        __builtin_prefetch(row, 0, 3);
        __builtin_prefetch(row + V - 1, 0, 3);
        if (++y == H) y = 0;
    }
}

/* Foraging's parameters from cfg and its own buffers from the arena
 * (env_state.h's mr_env_layout takes the interface's first; NULL on a
 * planning arena). Host code; reach has the same. */
static inline void mr_forage_layout(mr_env_state *s, const mr_env_config *cfg, mr_arena *a) {
    mr_forage *f = mr_forage_of(s);
    const int n = s->n;
    f->H = f->W = cfg->grid_size;
    f->view = cfg->view_range;
    f->V = 2 * cfg->view_range + 1;
    f->dmin = cfg->density_min;
    f->dmax = cfg->density_max;
    f->tries = cfg->respawn_tries;
    f->mode = cfg->mode;
    f->energy_frozen = cfg->mode == MR_MODE_PROXY;
    f->grid = MR_TAKE(a, uint8_t, (size_t)n * f->H * f->W);
    f->x = MR_TAKE(a, int32_t, n);
    f->y = MR_TAKE(a, int32_t, n);
    f->energy = MR_TAKE(a, float, n);
    f->energy_centi = MR_TAKE(a, int32_t, n);
    f->resets = MR_TAKE(a, uint32_t, n);
    f->food_count = MR_TAKE(a, int32_t, n);
    f->poison_count = MR_TAKE(a, int32_t, n);
    f->ep_food = MR_TAKE(a, int32_t, n);
    f->ep_poison = MR_TAKE(a, int32_t, n);
}

/* The buffers a checkpoint saves, in the order the format has always had
 * (checkpoint_format.c: "env.<name>"); returns their count. */
static inline int mr_forage_sections(const mr_env_state *s, mr_env_section *o) {
    const mr_forage *f = mr_forage_of(s);
    const size_t n = (size_t)s->n;
    int k = 0;
#define MR_SEC_(nm, p, b) (o[k].name = (nm), o[k].data = (void *)(p), o[k].bytes = (b), k++)
    MR_SEC_("env.grid", f->grid, n * (size_t)f->H * (size_t)f->W);
    MR_SEC_("env.x", f->x, n * sizeof(int32_t));
    MR_SEC_("env.y", f->y, n * sizeof(int32_t));
    MR_SEC_("env.energy", f->energy, n * sizeof(float));
    MR_SEC_("env.energy_centi", f->energy_centi, n * sizeof(int32_t));
    MR_SEC_("env.steps", s->steps, n * sizeof(int32_t));
    MR_SEC_("env.tick", s->tick, n * sizeof(uint32_t));
    MR_SEC_("env.resets", f->resets, n * sizeof(uint32_t));
    MR_SEC_("env.food_count", f->food_count, n * sizeof(int32_t));
    MR_SEC_("env.poison_count", f->poison_count, n * sizeof(int32_t));
    MR_SEC_("env.obs", s->obs, n * (size_t)f->V * (size_t)f->V);
    MR_SEC_("env.ep_return", s->ep_return, n * sizeof(float));
    MR_SEC_("env.ep_food", f->ep_food, n * sizeof(int32_t));
    MR_SEC_("env.ep_poison", f->ep_poison, n * sizeof(int32_t));
#undef MR_SEC_
    return k;
}
#endif

#endif /* MR_FORAGING_H */

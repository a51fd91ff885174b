/*
 * snake.h - the `snake` environment: eat the food, grow, do not crash. The
 * engine's first observation of more than two channels (the CNN reads its
 * four one-hot channels, obs_codes.h). One header of MR_HD functions with
 * its own state (mr_snake), registered in registry.h.
 *
 * Rules, per instance, on an H x W board walled all round (env.grid_size):
 *   - the snake is a chain of cells, head first; a new episode puts a snake
 *     of length 1 on a random cell and one food item on a random other cell;
 *   - 4 actions, absolute: 0 up, 1 down, 2 left, 3 right (y is the row; an
 *     action outside [0, 4) reads as a & 3); the head moves one cell;
 *   - the tail moves first: unless the head enters the food, the tail's cell
 *     is freed before the head moves, so the head may enter the cell the
 *     tail leaves (a snake of length 2 may turn round into it);
 *   - the head leaving the board (a wall) or entering its own body: reward
 *     -1, the episode ends (terminated: a crash);
 *   - the head entering the food: reward +1, the snake grows by one (its tail
 *     stays), and a new food item appears on a random free cell; a snake that
 *     fills the board ends its episode (terminated, not a crash);
 *   - env.max_episode_steps truncates (0: never); every other step pays 0;
 *   - at an episode's end the board starts over (a new snake and food: the
 *     next observation is the new episode's first).
 * The observation is the V x V cells around the head (V = 2 * env.view_range
 * + 1, the head in the middle; V may exceed the board: V <= 2 H - 1), as
 * cell codes 0 empty, 1 food, 2 body (the head included), 3 the tail (the
 * chain's last cell, length >= 2), 4 wall (outside the board): four
 * channels. The critic's privileged inputs: the length / (H W), and the
 * episode's steps / env.max_episode_steps (0 without a limit). The episode
 * counters: food eaten, and crashes (0 or 1).
 *
 * Randomness (rng.h's draw(seed, env, tick, purpose, index), env the
 * instance's global index): full reset c = resets[i] (then resets[i] += 1):
 * the head's cell on (c, PLACE, 0), the food's on (c, PLACE, 1, 2, ...) by
 * the "empty cell" rule (up to MR_SNAKE_REJECT_DRAWS draws over the board,
 * the first free one wins, then one draw among the free cells in row-major
 * order). A step t = tick[i]: a new food item on (t, RESPAWN_FOOD, 0, 1, ...)
 * by the same rule. Integers only: the same bytes on any device and any
 * thread count.
 */
#ifndef MR_SNAKE_H
#define MR_SNAKE_H
#include <stddef.h>
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "moonrl.h"
#include "env_state.h"

#define MR_SNAKE_ACTIONS 4
#define MR_SNAKE_CHANNELS 4
#define MR_SNAKE_REJECT_DRAWS 64

/* the observation's codes; the board holds EMPTY, FOOD and BODY only */
enum { MR_SNAKE_EMPTY = 0, MR_SNAKE_FOOD = 1, MR_SNAKE_BODY = 2, MR_SNAKE_TAIL = 3, MR_SNAKE_WALL = 4 };
/* the episode counters (mr_env_log.count) */
enum { MR_SNAKE_COUNT_FOOD = 0, MR_SNAKE_COUNT_CRASH = 1 };

/* snake's own part of the state (mr_env_state.own): parameters and
 * struct-of-arrays pointers over the n instances */
typedef struct mr_snake {
    int H, W, view, V;
    uint8_t *grid;                  /* (n, H*W) EMPTY, FOOD or BODY */
    int32_t *body;                  /* (n, H*W) a ring of the chain's cells: the head at slot head[i], the
                                     * tail len[i] - 1 slots before it */
    int32_t *head;                  /* (n) the head's slot */
    int32_t *len;                   /* (n) the chain's length, >= 1 */
    int32_t *food;                  /* (n) the food's cell, -1 on a full board */
    uint32_t *resets;               /* (n) full resets done (the reset draws' counter) */
} mr_snake;

MR_HD mr_snake *mr_snake_of(const mr_env_state *s) { return (mr_snake *)(void *)s->own.bytes; }

/* What snake declares (moonrl.h, mr_env_spaces): the V x V view as cell
 * codes 0 .. 4, four one-hot channels; 4 moves; the critic's two inputs and
 * the view's ground truth; the counters food and crash. Host code. */
static inline void mr_snake_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    memset(o, 0, sizeof *o);
    const int V = 2 * cfg->view_range + 1;
    o->obs.kind = MR_SPACE_CODES;
    o->obs.shape[0] = MR_SNAKE_CHANNELS;
    o->obs.shape[1] = o->obs.shape[2] = V;
    o->obs.codes = MR_SNAKE_CHANNELS + 1;
    o->act.kind = MR_SPACE_DISCRETE;
    o->act.n = MR_SNAKE_ACTIONS;
    o->critic_extra = 2;
    o->critic_view = 1;
    o->counters = 2;
    o->counter_names[MR_SNAKE_COUNT_FOOD] = "food";
    o->counter_names[MR_SNAKE_COUNT_CRASH] = "crash";
    o->step_limit = cfg->max_episode_steps;
    o->bootstrap_truncation = 0;   /* the critic sees steps / max_episode_steps: the limit is in its state */
}

/* Moves: 0 up (dy -1), 1 down (dy +1), 2 left (dx -1), 3 right (dx +1). */
MR_HD int mr_snake_dx(int a) { a &= 3; return a == 2 ? -1 : a == 3 ? 1 : 0; }
MR_HD int mr_snake_dy(int a) { a &= 3; return a == 0 ? -1 : a == 1 ? 1 : 0; }

/* A uniformly random EMPTY cell of board g (the rule of the header
 * comment); `empties` >= 1 is how many there are. */
MR_HD int mr_snake_pick_empty(const mr_env_state *s, const uint8_t *g, int i, uint32_t ctr, uint32_t purpose,
                              uint32_t d, int empties) {
    const mr_snake *f = mr_snake_of(s);
    const uint32_t cells = (uint32_t)(f->H * f->W), ui = mr_env_key(s, i);
    for (int k = 0; k < MR_SNAKE_REJECT_DRAWS; k++) {
        const uint32_t c = mr_rng_below(s->seed, ui, ctr, purpose, d++, cells);
        if (g[c] == MR_SNAKE_EMPTY) return (int)c;
    }
    uint32_t r = mr_rng_below(s->seed, ui, ctr, purpose, d, (uint32_t)empties);
    int last = 0;
    for (uint32_t c = 0; c < cells; c++) {
        if (g[c] != MR_SNAKE_EMPTY) continue;
        last = (int)c;
        if (r-- == 0) break;
    }
    return last;
}

/* The tail's cell of instance i. */
MR_HD int mr_snake_tail(const mr_snake *f, int i) {
    const int cells = f->H * f->W;
    int k = f->head[i] - f->len[i] + 1;
    if (k < 0) k += cells;
    return f->body[(size_t)i * cells + k];
}

/* o[a][b] = the code of board cell (hy - view + a, hx - view + b), the
 * head at (hx, hy); WALL off the board, TAIL at the tail (length >= 2):
 * instance i's view into o (V*V codes). */
MR_HD void mr_snake_write_view(const mr_env_state *s, int i, uint8_t *o) {
    const mr_snake *f = mr_snake_of(s);
    const int H = f->H, W = f->W, V = f->V, cells = H * W;
    const uint8_t *g = f->grid + (size_t)i * cells;
    const int hc = f->body[(size_t)i * cells + f->head[i]], hx = hc % W, hy = hc / W;
    const int tail = f->len[i] >= 2 ? mr_snake_tail(f, i) : -1;
    for (int a = 0; a < V; a++) {
        const int y = hy - f->view + a;
        for (int b = 0; b < V; b++) {
            const int x = hx - f->view + b;
            int code = MR_SNAKE_WALL;
            if (y >= 0 && y < H && x >= 0 && x < W) {
                const int c = y * W + x;
                code = c == tail ? (int)MR_SNAKE_TAIL : (int)g[c];
            }
            o[a * V + b] = (uint8_t)code;
        }
    }
}

/* Instance i's observation: its view into its obs row. */
MR_HD void mr_snake_write_obs(const mr_env_state *s, int i) {
    mr_snake_write_view(s, i, s->obs + (size_t)i * mr_snake_of(s)->V * mr_snake_of(s)->V);
}

/* The critic's privileged inputs of instance i after `steps` steps of its
 * episode: the length / (H W) and steps / max_episode_steps (0 without a
 * limit), each divided in double and rounded once (the same bits on every
 * device). */
MR_HD void mr_snake_extra_at(const mr_env_state *s, int i, int steps, float *extra) {
    const mr_snake *f = mr_snake_of(s);
    extra[0] = (float)((double)f->len[i] / (double)(f->H * f->W));
    extra[1] = s->max_steps > 0 ? (float)((double)steps / (double)s->max_steps) : 0.0f;
}

/* A new board for instance i (the rule of the header comment), the reset
 * counted, the episode's steps and return 0, the observation written; the
 * end flags and reward of the step that ended the last episode are left. */
MR_HD void mr_snake_start(const mr_env_state *s, int i) {
    const mr_snake *f = mr_snake_of(s);
    const int cells = f->H * f->W;
    uint8_t *g = f->grid + (size_t)i * cells;
    const uint32_t c = f->resets[i];
    for (int k = 0; k < cells; k++) g[k] = MR_SNAKE_EMPTY;
    const int at = (int)mr_rng_below(s->seed, mr_env_key(s, i), c, MR_RNG_PLACE, 0, (uint32_t)cells);
    g[at] = MR_SNAKE_BODY;
    f->body[(size_t)i * cells] = at;
    f->head[i] = 0;
    f->len[i] = 1;
    const int food = mr_snake_pick_empty(s, g, i, c, MR_RNG_PLACE, 1, cells - 1);
    g[food] = MR_SNAKE_FOOD;
    f->food[i] = food;
    f->resets[i] = c + 1;
    s->steps[i] = 0;
    s->ep_return[i] = 0.0f;
    mr_snake_write_obs(s, i);
}

MR_HD void mr_snake_reset_full(const mr_env_state *s, int i) {
    mr_snake_start(s, i);
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
}

MR_HD void mr_snake_step(const mr_env_state *s, int i, int action) {
    const mr_snake *f = mr_snake_of(s);
    const int H = f->H, W = f->W, cells = H * W;
    const uint32_t t = s->tick[i];
    uint8_t *g = f->grid + (size_t)i * cells;
    int32_t *ring = f->body + (size_t)i * cells;
    mr_env_log *log = &s->log[i];

    const int hc = ring[f->head[i]];
    const int x = hc % W + mr_snake_dx(action), y = hc / W + mr_snake_dy(action);
    float r = 0.0f;
    int terminated = 0, crash = 0;
    if (x < 0 || x >= W || y < 0 || y >= H) {   /* a wall */
        crash = 1;
    } else {
        const int nc = y * W + x, eat = nc == f->food[i];
        if (!eat) g[mr_snake_tail(f, i)] = MR_SNAKE_EMPTY;   /* the tail moves first */
        if (g[nc] == MR_SNAKE_BODY) {   /* its own body */
            crash = 1;
        } else {
            const int h = f->head[i] + 1 == cells ? 0 : f->head[i] + 1;
            ring[h] = nc;
            f->head[i] = h;
            g[nc] = MR_SNAKE_BODY;
            if (eat) {
                r = 1.0f;
                f->len[i] += 1;
                log->count_total[MR_SNAKE_COUNT_FOOD]++;
                if (f->len[i] == cells) {   /* the board is full: the game is won */
                    f->food[i] = -1;
                    terminated = 1;
                } else {
                    const int c = mr_snake_pick_empty(s, g, i, t, MR_RNG_RESPAWN_FOOD, 0, cells - f->len[i]);
                    g[c] = MR_SNAKE_FOOD;
                    f->food[i] = c;
                }
            }
        }
    }
    if (crash) {
        r = -1.0f;
        terminated = 1;
        log->count_total[MR_SNAKE_COUNT_CRASH]++;
    }
    const int steps = s->steps[i] + 1;
    const int truncated = !terminated && s->max_steps > 0 && steps >= s->max_steps;
    s->tick[i] = t + 1;
    if (mr_env_record_step(s, i, r, terminated, truncated, steps)) {
        if (mr_env_keeps_final(s, terminated, truncated)) {   /* the final board, before the new one */
            mr_snake_write_view(s, i, mr_env_final_codes(s, i));
            mr_snake_extra_at(s, i, steps, mr_env_final_extra(s, i));
        }
        log->count[MR_SNAKE_COUNT_FOOD] += f->len[i] - 1;
        log->count[MR_SNAKE_COUNT_CRASH] += crash;
        mr_snake_start(s, i);
        return;
    }
    mr_snake_write_obs(s, i);
}

/* The critic's privileged inputs of instance i now (mr_snake_extra_at). */
MR_HD void mr_snake_critic_extra(const mr_env_state *s, int i, float *extra) {
    mr_snake_extra_at(s, i, s->steps[i], extra);
}

#if !defined(__CUDACC__)
/* snake's parameters from cfg and its own buffers from the arena (NULL on a
 * planning arena). Host code. */
static inline void mr_snake_layout(mr_env_state *s, const mr_env_config *cfg, mr_arena *a) {
    mr_snake *f = mr_snake_of(s);
    const size_t n = (size_t)s->n;
    f->H = f->W = cfg->grid_size;
    f->view = cfg->view_range;
    f->V = 2 * cfg->view_range + 1;
    const size_t cells = (size_t)f->H * (size_t)f->W;
    f->grid = MR_TAKE(a, uint8_t, n * cells);
    f->body = MR_TAKE(a, int32_t, n * cells);
    f->head = MR_TAKE(a, int32_t, n);
    f->len = MR_TAKE(a, int32_t, n);
    f->food = MR_TAKE(a, int32_t, n);
    f->resets = MR_TAKE(a, uint32_t, n);
}

/* The buffers a checkpoint saves ("env.<name>"); returns their count. */
static inline int mr_snake_sections(const mr_env_state *s, mr_env_section *o) {
    const mr_snake *f = mr_snake_of(s);
    const size_t n = (size_t)s->n, cells = (size_t)f->H * (size_t)f->W;
    int k = 0;
#define MR_SEC_(nm, p, b) (o[k].name = (nm), o[k].data = (void *)(p), o[k].bytes = (b), k++)
    MR_SEC_("env.grid", f->grid, n * cells);
    MR_SEC_("env.body", f->body, n * cells * sizeof(int32_t));
    MR_SEC_("env.head", f->head, n * sizeof(int32_t));
    MR_SEC_("env.length", f->len, n * sizeof(int32_t));
    MR_SEC_("env.food", f->food, n * sizeof(int32_t));
    MR_SEC_("env.resets", f->resets, n * sizeof(uint32_t));
    MR_SEC_("env.steps", s->steps, n * sizeof(int32_t));
    MR_SEC_("env.tick", s->tick, n * sizeof(uint32_t));
    MR_SEC_("env.obs", s->obs, n * (size_t)f->V * (size_t)f->V);
    MR_SEC_("env.ep_return", s->ep_return, n * sizeof(float));
#undef MR_SEC_
    return k;
}
#endif

#endif /* MR_SNAKE_H */

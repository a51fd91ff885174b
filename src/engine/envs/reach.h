/*
 * reach.h - the `reach` environment: walk to the goal, keep out of the pits.
 * The second environment of the engine, and the worked example of
 * docs/environments.md: one header of MR_HD functions over foraging's
 * grid-world state (mr_forage, foraging.h: reach's own part of the state is
 * the same struct), registered in registry.h.
 *
 * Rules, per instance, on an H x W torus (env.grid_size):
 *   - one goal (cell code 1) and P pits (code 2), P drawn from
 *     [env.density_min, env.density_max] at each full reset;
 *   - 4 actions: 0 up, 1 down, 2 left, 3 right (y is the row);
 *   - a step costs -0.01; entering the goal pays +1 and the goal moves to a
 *     random empty cell (not under the agent); entering a pit pays -1 and
 *     ends the episode (terminated); env.max_episode_steps truncates;
 *   - at an episode's end the agent alone restarts on a random empty cell
 *     (goal and pits stay), as foraging does;
 *   - the observation is the V x V cell codes around the agent (foraging.h's
 *     mr_forage_write_obs), V = 2 * env.view_range + 1.
 * The episode log's two counters are goals and pit falls (foraging's food
 * and poison slots: efficiency = goals / (goals + pits)); deaths are pit
 * falls. Energy is not
 * used (it stays 1). Only env.mode = "ground_truth" exists here.
 *
 * Randomness as foraging's (rng.h's draw(seed, env, tick, purpose, index)):
 * full reset c = resets[i]: pit count on (c, DENSITY, 0); cells on one PLACE
 * stream (the goal, then each pit, then the agent); a step t = tick[i]: the
 * goal's new cell on (t, RESPAWN_FOOD, k), the agent's restart on (t, AGENT).
 */
#ifndef MR_REACH_H
#define MR_REACH_H
#include "foraging.h"

#define MR_REACH_ACTIONS 4

/* What reach declares (moonrl.h, mr_env_spaces): foraging's observation
 * with the codes empty, goal, pit; 4 moves; the critic sees the goal and pit
 * counts and the view's ground truth; its episodes count goals and pits
 * (a pit ends one). It is evaluated episode by episode (the episodic
 * protocol, not foraging's survival), and an episode that reached the goal
 * at least once is a success. Host code. */
static inline void mr_reach_spaces(const mr_env_config *cfg, mr_env_spaces *o) {
    mr_forage_spaces(cfg, o);
    o->act.n = MR_REACH_ACTIONS;
    o->counter_names[0] = "goal";
    o->counter_names[1] = "pit";
    o->eval = MR_EVAL_EPISODIC;
    o->success = MR_SUCCESS_COUNTER;
    o->success_counter = 0;   /* goal */
}

/* Moves: 0 up (dy -1), 1 down (dy +1), 2 left (dx -1), 3 right (dx +1); an
 * action outside [0, 4) reads as a & 3. */
MR_HD int mr_reach_dx(int a) { a &= 3; return a == 2 ? -1 : a == 3 ? 1 : 0; }
MR_HD int mr_reach_dy(int a) { a &= 3; return a == 0 ? -1 : a == 1 ? 1 : 0; }

MR_HD void mr_reach_reset_full(const mr_env_state *s, int i) {
    const mr_forage *f = mr_forage_of(s);
    const int cells = f->H * f->W;
    uint8_t *g = f->grid + (size_t)i * cells;
    const uint32_t c = f->resets[i], ui = mr_env_key(s, i);
    for (int k = 0; k < cells; k++) g[k] = MR_CELL_EMPTY;
    const uint32_t span = (uint32_t)(f->dmax - f->dmin + 1);
    const int np = f->dmin + (int)mr_rng_below(s->seed, ui, c, MR_RNG_DENSITY, 0, span);
    uint32_t d = 0;
    g[mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells)] = MR_CELL_FOOD;
    for (int k = 0; k < np; k++)
        g[mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - 1 - k)] = MR_CELL_POISON;
    const int at = mr_forage_pick_empty(s, g, i, c, MR_RNG_PLACE, &d, cells - 1 - np);
    mr_forage_start_fresh(s, i, at, 1, np);
}

MR_HD void mr_reach_step(const mr_env_state *s, int i, int action) {
    const mr_forage *f = mr_forage_of(s);
    const int H = f->H, W = f->W, cells = H * W;
    const uint32_t t = s->tick[i];
    uint8_t *g = f->grid + (size_t)i * cells;
    mr_env_log *log = &s->log[i];

    int x, y;
    mr_forage_move(f, i, mr_reach_dx(action), mr_reach_dy(action), &x, &y);
    const int at = y * W + x;

    float r = -0.01f;
    int terminated = 0;
    if (g[at] == MR_CELL_FOOD) {   /* the goal: +1, and it moves */
        r += 1.0f;
        f->ep_food[i]++;
        log->count_total[MR_FORAGE_FOOD]++;
        uint32_t d = 0;
        /* an empty cell other than the agent's: the agent's cell is marked taken for the draw only */
        g[at] = MR_CELL_POISON + 1;
        const int c = mr_forage_pick_empty(s, g, i, t, MR_RNG_RESPAWN_FOOD, &d, cells - 1 - f->poison_count[i]);
        g[at] = MR_CELL_EMPTY;
        g[c] = MR_CELL_FOOD;
    } else if (g[at] == MR_CELL_POISON) {   /* a pit: -1, the episode ends */
        r += -1.0f;
        f->ep_poison[i]++;
        log->count_total[MR_FORAGE_POISON]++;
        terminated = 1;
    }
    const int steps = s->steps[i] + 1;
    const int truncated = !terminated && s->max_steps > 0 && steps >= s->max_steps;
    if (mr_forage_record_step(s, i, r, terminated, truncated, steps)) {   /* the agent alone restarts */
        if (mr_env_keeps_final(s, terminated, truncated)) mr_forage_keep_final(s, i, x, y);
        uint32_t d = 0;
        const int a = mr_forage_pick_empty(s, g, i, t, MR_RNG_AGENT, &d, cells - 1 - f->poison_count[i]);
        x = a % W;
        y = a / W;
    }
    f->x[i] = x;
    f->y[i] = y;
    s->tick[i] = t + 1;
    mr_forage_write_obs(s, i);
}

#endif /* MR_REACH_H */

/*
 * env.c - the public mr_env object of moonrl.h: the vectorised environment
 * alone (benchmarks, tests, other learners), over the same backend table as
 * the trainer (backend.h). Its state is one block from a memory manager over
 * the backend's memory, laid out by mr_env_layout, so a cpu and a cuda
 * environment hold byte-for-byte comparable states; actions go in through a
 * backend buffer, views come out through copies.
 *
 * device = auto means the cpu here: the environment alone is for tests and
 * benchmarks, where the device is asked for explicitly.
 */
#include "env.h"
#include "backend.h"
#include "errors.h"
#include "config_keys.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the bounds are the schema's (config_keys.h, from lua/moonrl/config/schema.lua) */
#define MR_ENV_MAX_NUM_ENVS MR_KEY_MAX_env_num_envs
#define MR_ENV_MAX_GRID MR_KEY_MAX_env_grid_size
#define MR_ENV_MAX_VIEW MR_KEY_MAX_env_view_range
#define MR_ENV_MAX_TRIES MR_KEY_MAX_env_respawn_tries

/* ------------------------------------------------------------------ modes */
/* The reward modes (env.mode), by name: here, with the environment whose
 * config they are (config.c calls env.c, never the other way). */

static const char *mode_names[] = {"ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy"};

int mr_mode_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(name, mode_names[i]) == 0) return i;
    return -1;
}

const char *mr_mode_name(int mode) {
    return (mode >= 0 && mode < 4) ? mode_names[mode] : NULL;
}

/* ------------------------------------------------------------ config check */

int mr_env_config_check(const mr_env_config *c, mr_error *err) {
    if (!c) return mr_fail(err, MR_ERR_ARG, "env config is NULL");
    if (c->index0 < 0 || (long long)c->index0 + c->num_envs > 2147483647LL)
        return mr_fail(err, MR_ERR_ARG, "env.index0 = %d: the instances' global indices must fit in [0, 2^31)",
                       c->index0);
    if (!mr_env_name_of(c->name))
        return mr_fail(err, MR_ERR_ARG, "env.name = %d: accepted 0 .. %d (moonrl envs lists them)", (int)c->name,
                       MR_ENV_COUNT - 1);
    if (c->name != MR_ENV_FORAGING && c->mode != MR_MODE_GROUND_TRUTH)
        return mr_fail(err, MR_ERR_ARG, "env.mode = %s: env.name = %s has only ground_truth (the four modes are "
                       "foraging's)", mr_mode_name(c->mode) ? mr_mode_name(c->mode) : "?", mr_env_name_of(c->name));
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
    if (c->name == MR_ENV_SNAKE) {   /* a walled board: the view may pass its edges (walls), not a whole board */
        if (c->grid_size < 2 || c->grid_size > 256 || V > 2 * c->grid_size - 1)
            return mr_fail(err, MR_ERR_ARG, "env.grid_size = %d, env.view_range = %d: snake takes a board of 2 .. 256 "
                           "and a view of at most 2 * grid_size - 1 cells (view_range <= grid_size - 1)",
                           c->grid_size, c->view_range);
    } else if (c->name == MR_ENV_CATCH) {   /* a board of its own: no view, no items */
        if (c->grid_size < 4 || c->grid_size > 32)   /* catch.h's MR_CATCH_MIN, MR_CATCH_MAX (registry.c checks) */
            return mr_fail(err, MR_ERR_ARG, "env.grid_size = %d: catch takes a board of 4 .. 32 (its image is "
                           "2 x grid_size x grid_size)", c->grid_size);
    } else if ((c->name == MR_ENV_FORAGING || c->name == MR_ENV_REACH) &&   /* the torus worlds' view */
               (c->grid_size < V || c->grid_size > MR_ENV_MAX_GRID)) {
        if (c->grid_size >= 1 && c->grid_size < V)
            return mr_fail(err, MR_ERR_ARG, "env.view_range = %d is too large for env.grid_size = %d: "
                            "the view (2*view_range+1 = %d) must fit in the grid; accepted view_range <= %d",
                            c->view_range, c->grid_size, V, (c->grid_size - 1) / 2);
        return mr_fail(err, MR_ERR_ARG, "env.grid_size = %d: must be in [%d, %d] (at least the view, "
                        "2*view_range+1)", c->grid_size, V, MR_ENV_MAX_GRID);
    }
    const long long cells = (long long)c->grid_size * c->grid_size;
    /* foraging: food + poison (up to density_max each) + the agent must fit;
     * reach: the goal + the pits + the agent */
    const long long dcap = c->name == MR_ENV_REACH ? cells - 2 : (cells - 1) / 2;
    const int items = c->name == MR_ENV_FORAGING || c->name == MR_ENV_REACH;   /* the others place none */
    if (items && (c->density_min < 0 || c->density_min > dcap))
        return mr_fail(err, MR_ERR_ARG, "env.density_min = %d: must be in [0, %lld] for a %dx%d grid",
                        c->density_min, dcap, c->grid_size, c->grid_size);
    if (items && (c->density_max < c->density_min || c->density_max > dcap))
        return mr_fail(err, MR_ERR_ARG, "env.density_max = %d: must be in [density_min = %d, %lld] "
                        "(%s must stay below the %lld cells)", c->density_max, c->density_min, dcap,
                        c->name == MR_ENV_REACH ? "the goal, density_max pits and the agent" : "2*density_max",
                        cells);
    if (c->respawn_tries < 0 || c->respawn_tries > MR_ENV_MAX_TRIES)
        return mr_fail(err, MR_ERR_ARG, "env.respawn_tries = %d: must be in [0, %d]", c->respawn_tries,
                        MR_ENV_MAX_TRIES);
    if (c->max_episode_steps < 0)
        return mr_fail(err, MR_ERR_ARG, "env.max_episode_steps = %d: must be >= 0 (0 = never truncate)",
                        c->max_episode_steps);
    if (c->name == MR_ENV_LUA) {
        if (!c->program)
            return mr_fail(err, MR_ERR_ARG, "env.name = lua: no program is attached: env.lua names the Lua file that "
                           "declares the environment (docs/environments.md, \"An environment in Lua\")");
        /* every field of every instance: refused before any size wraps */
        const mr_env_program *p = c->program;
        unsigned long long per = 0;
        for (int i = 0; i < p->fields && i < MR_PROGRAM_MAX_FIELDS; i++)
            per += (unsigned long long)p->field[i].count *
                   (p->field[i].type == MR_FIELD_DOUBLE ? 8u : p->field[i].type == MR_FIELD_UINT8 ? 1u : 4u);
        if (per * (unsigned long long)c->num_envs > (1ull << 40))
            return mr_fail(err, MR_ERR_ARG, "%s: the declared fields take %llu bytes per instance, x env.num_envs = %d "
                           "is %llu bytes: accepted at most 1 TiB in all (fewer instances or smaller fields)",
                           p->label, per, c->num_envs, per * (unsigned long long)c->num_envs);
    }
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------ the public object */

static mr_status create_on(mr_env *e, const mr_env_config *cfg, uint64_t seed, mr_error *err) {
    const mr_backend *o = e->be;
    TRY(o->enter(0, e->threads, err));
    TRY(o->stream_create(&e->stream, err));
    mr_devmem_backend mbe;
    TRY(o->device_memory(0, &mbe, err));
    TRY(mr_devmem_init(&e->mem, &mbe, NULL, err));
    e->mem_ready = 1;
    mr_arena plan = {NULL, 0, 0, 0};
    mr_env_layout(&e->s, cfg, seed, &plan);
    e->state_bytes = plan.size;
    const size_t n = (size_t)cfg->num_envs;
    const size_t act = mr_arena_round(n * (size_t)e->s.act_bytes);   /* the actions' staging */
    const size_t total = plan.size + act + mr_arena_round(sizeof(mr_env_log));
    mr_status s = mr_devmem_alloc(&e->mem, total, "the environment state", &e->block, err);
    if (s != MR_OK) {
        if (err && s == MR_ERR_NOMEM) {
            /* how many of these environments would fit now: the state grows
             * with num_envs; the episode log is the fixed part */
            const size_t fixed = mr_arena_round(sizeof(mr_env_log));
            const size_t per_env = (total - fixed) / (n ? n : 1) + 1;
            const int fit = mr_devmem_largest_num_envs(per_env, fixed, mr_devmem_fits(&e->mem), cfg->num_envs, 1);
            char need[32];
            mr_devmem_format(total, need, sizeof need);
            const size_t len = strlen(err->msg);
            if (fit > 0)
                snprintf(err->msg + len, sizeof err->msg - len,
                         " At most %d environments of %dx%d cells fit now (env.num_envs = %d needs %s); lower "
                         "env.num_envs or env.grid_size.", fit, cfg->grid_size, cfg->grid_size, cfg->num_envs, need);
            else
                snprintf(err->msg + len, sizeof err->msg - len,
                         " Not even 1 environment of %dx%d cells fits now (env.num_envs = %d needs %s); lower "
                         "env.grid_size.", cfg->grid_size, cfg->grid_size, cfg->num_envs, need);
        }
        return s;
    }
    mr_arena dev = {(unsigned char *)e->block, plan.size, 0, 0};   /* carved only: nothing is touched */
    mr_env_layout(&e->s, cfg, seed, &dev);
    e->d_actions = (uint8_t *)e->block + plan.size;
    e->d_log = (mr_env_log *)(e->d_actions + act);
    e->s.threads = e->threads > 0 ? e->threads : omp_get_num_procs();
    TRY(o->memset(e->block, 0, total, e->stream, err));
    TRY(o->env_clear_logs(&e->s, e->stream, err));
    TRY(o->env_reset_all(&e->s, e->stream, err));
    return o->stream_sync(e->stream, err);
}

mr_status mr_env_create(const mr_env_config *cfg, uint64_t seed, int device, int threads, mr_env **out,
                        mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_env_create: out is NULL");
    *out = NULL;
    if (!cfg) return mr_fail(err, MR_ERR_ARG, "mr_env_create: cfg is NULL");
    TRY((mr_status)mr_env_config_check(cfg, err));
    if (threads < 0) return mr_fail(err, MR_ERR_ARG, "threads = %d: must be >= 0 (0 = all cores)", threads);
    if (device < MR_DEVICE_AUTO || device > MR_DEVICE_CUDA)
        return mr_fail(err, MR_ERR_ARG, "device = %d: accepted 0 auto, 1 cpu, 2 cuda", device);
    if (cfg->name == MR_ENV_LUA && device == MR_DEVICE_CUDA)
        return mr_fail(err, MR_ERR_ARG, "device = cuda: %s is a Lua environment, which runs on the cpu only: use "
                       "device = cpu", cfg->program ? cfg->program->label : "env.lua");
    /* backend selection */
    const mr_backend *be = mr_backend_for(device);
    if (be->unavailable)
        return mr_fail(err, MR_ERR_BACKEND, "device = cuda: this build has no CUDA backend (it was built without "
                       "nvcc or with MOONRL_CUDA=OFF); use device = cpu (or auto)");
    if (be->device_count && be->device_count() < 1)
        return mr_fail(err, MR_ERR_BACKEND, "device = cuda: no usable GPU was found on this machine; "
                       "use device = cpu (or auto)");
    mr_env *e = calloc(1, sizeof *e);
    if (!e) return mr_fail(err, MR_ERR_NOMEM, "mr_env_create: out of memory for the env object");
    e->cfg = *cfg;
    e->threads = threads;
    e->be = be;
    mr_status s = create_on(e, cfg, seed, err);
    if (s != MR_OK) {
        mr_env_free(e);
        return s;
    }
    *out = e;
    mr_ok(err);
    return MR_OK;
}

void mr_env_free(mr_env *e) {
    if (!e) return;
    if (e->stream) {
        (void)e->be->stream_sync(e->stream, NULL);   /* nothing may still use the memory */
        e->be->stream_destroy(e->stream);
    }
    if (e->mem_ready) mr_devmem_destroy(&e->mem);
    free(e);
}

mr_status mr_env_reset(mr_env *e, mr_error *err) {
    if (!e) return mr_fail(err, MR_ERR_ARG, "mr_env_reset: env is NULL");
    TRY(e->be->enter(0, e->threads, err));
    TRY(e->be->env_reset_all(&e->s, e->stream, err));
    return e->be->stream_sync(e->stream, err);
}

mr_status mr_env_step(mr_env *e, const uint8_t *actions, mr_error *err) {
    if (!e) return mr_fail(err, MR_ERR_ARG, "mr_env_step: env is NULL");
    if (!actions) return mr_fail(err, MR_ERR_ARG, "mr_env_step: actions is NULL (want %d bytes)", e->s.n);
    if (e->s.act_kind == MR_SPACE_BOX)
        return mr_fail(err, MR_ERR_ARG, "mr_env_step: %s's actions are floats (a box of %d): use mr_env_step_box",
                       mr_env_name_of(e->cfg.name), e->s.act_bytes / 4);
    const int ab = e->s.act_bytes;   /* 1, or k components of a multi-discrete action */
    mr_env_spaces sp;
    TRY(mr_env_spaces_of(&e->cfg, &sp, err));
    if (ab == 1) {
        const int na = sp.act.n;
        uint8_t top = 0;   /* the largest action first (a loop that vectorises), the culprit only then */
        for (int i = 0; i < e->s.n; i++) top = actions[i] > top ? actions[i] : top;
        for (int i = 0; top >= na && i < e->s.n; i++)
            if (actions[i] >= na)
                return mr_fail(err, MR_ERR_ARG, "mr_env_step: actions[%d] = %d: accepted 0 .. %d (%s has %d actions)",
                               i, actions[i], na - 1, mr_env_name_of(e->cfg.name), na);
    }
    for (int i = 0; ab > 1 && i < e->s.n; i++)
        for (int k = 0; k < ab; k++) {
            const int na = sp.act.kind == MR_SPACE_MULTI_DISCRETE ? sp.act.nvec[k] : sp.act.n, a = actions[i * ab + k];
            if (a >= na)
                return mr_fail(err, MR_ERR_ARG, "mr_env_step: actions[%d] = %d, component %d of instance %d: accepted "
                               "0 .. %d (%s's actions are multi-discrete, %d bytes an instance)", i * ab + k, a, k, i,
                               na - 1, mr_env_name_of(e->cfg.name), ab);
        }
    const mr_backend *o = e->be;
    TRY(o->enter(0, e->threads, err));
    /* the cpu steps on the caller's actions directly; a device gets a copy */
    const uint8_t *a = actions;
    if (!o->host_memory) {
        TRY(o->copy(e->d_actions, actions, (size_t)e->s.n * (size_t)ab, MR_COPY_H2D, e->stream, err));
        a = e->d_actions;
    }
    TRY(o->env_step_all(&e->s, a, e->stream, err));
    return o->stream_sync(e->stream, err);
}

mr_status mr_env_step_random(mr_env *e, uint64_t seed, int steps, uint8_t *last_actions, mr_error *err) {
    if (!e) return mr_fail(err, MR_ERR_ARG, "mr_env_step_random: env is NULL");
    if (e->s.act_kind == MR_SPACE_BOX || e->s.act_bytes != 1)
        return mr_fail(err, MR_ERR_ARG, "mr_env_step_random: %s's actions are not one discrete byte per instance "
                       "(accepted: foraging, reach, snake, cartpole and the other discrete environments)",
                       mr_env_name_of(e->cfg.name));
    if (steps < 1) return mr_fail(err, MR_ERR_ARG, "mr_env_step_random: steps = %d: accepted at least 1", steps);
    const mr_backend *o = e->be;
    if (!o->env_step_random)
        return mr_fail(err, MR_ERR_BACKEND, "mr_env_step_random: the %s backend cannot draw actions", o->name);
    TRY(o->enter(0, e->threads, err));
    const int na = mr_env_num_actions(e->cfg.name);
    for (int k = 0; k < steps; k++) TRY(o->env_step_random(&e->s, seed, na, e->d_actions, e->stream, err));
    if (last_actions) TRY(o->copy(last_actions, e->d_actions, (size_t)e->s.n, MR_COPY_D2H, e->stream, err));
    return o->stream_sync(e->stream, err);
}

mr_status mr_env_step_box(mr_env *e, const float *actions, mr_error *err) {
    if (!e) return mr_fail(err, MR_ERR_ARG, "mr_env_step_box: env is NULL");
    if (e->s.act_kind != MR_SPACE_BOX)
        return mr_fail(err, MR_ERR_ARG, "mr_env_step_box: %s's actions are discrete: use mr_env_step",
                       mr_env_name_of(e->cfg.name));
    const size_t bytes = (size_t)e->s.n * (size_t)e->s.act_bytes;
    if (!actions) return mr_fail(err, MR_ERR_ARG, "mr_env_step_box: actions is NULL (want %zu floats)", bytes / 4);
    const mr_backend *o = e->be;
    TRY(o->enter(0, e->threads, err));
    const uint8_t *a = (const uint8_t *)actions;   /* each environment clips its own box */
    if (!o->host_memory) {
        TRY(o->copy(e->d_actions, actions, bytes, MR_COPY_H2D, e->stream, err));
        a = e->d_actions;
    }
    TRY(o->env_step_all(&e->s, a, e->stream, err));
    return o->stream_sync(e->stream, err);
}

/* A buffer of the state by its checkpoint name ("env.grid"), or NULL. */
static const mr_env_section *section(const mr_env_state *s, mr_env_section *all, const char *name) {
    const int k = mr_env_sections(s, all);
    for (int i = 0; i < k; i++)
        if (strcmp(all[i].name, name) == 0) return &all[i];
    return NULL;
}

/* Every pointer in the view may be NULL to skip that copy. The grid world's
 * buffers (grid, x, y, energy) are the environment's own: found by name,
 * refused where it has none. */
mr_status mr_env_read(const mr_env *e, mr_env_view *out, mr_error *err) {
    if (!e) return mr_fail(err, MR_ERR_ARG, "mr_env_read: env is NULL");
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_env_read: out is NULL");
    const mr_backend *o = e->be;
    const mr_env_state *s = &e->s;
    const size_t n = (size_t)s->n;
    mr_env_section all[MR_ENV_MAX_SECTIONS];
    const char *names[] = {"env.grid", "env.x", "env.y", "env.energy"};
    void *dsts[] = {out->grid, out->x, out->y, out->energy};
    struct { void *dst; const void *src; size_t bytes; } cp[8] = {
        {out->obs, s->obs ? (const void *)s->obs : (const void *)s->obs_f,
         n * (size_t)s->obs_size * (s->obs ? 1 : sizeof(float))},
        {out->reward, s->reward, n * sizeof(float)}, {out->terminated, s->terminated, n},
        {out->truncated, s->truncated, n},
    };
    for (int i = 0; i < 4; i++) {
        if (!dsts[i]) continue;
        const mr_env_section *sec = section(s, all, names[i]);
        if (!sec)
            return mr_fail(err, MR_ERR_ARG, "mr_env_read: %s has no %s (the view's grid, x, y and energy are the "
                           "grid worlds'; pass NULL for them)", mr_env_name_of(s->kind), names[i] + 4);
        cp[4 + i].dst = dsts[i];
        cp[4 + i].src = sec->data;
        cp[4 + i].bytes = sec->bytes;
    }
    TRY(o->enter(0, e->threads, err));
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        if (cp[i].dst) TRY(o->copy(cp[i].dst, cp[i].src, cp[i].bytes, MR_COPY_D2H, e->stream, err));
    return o->stream_sync(e->stream, err);
}

mr_status mr_env_set_energy_frozen(mr_env *e, int frozen, mr_error *err) {
    if (!e) return mr_fail(err, MR_ERR_ARG, "mr_env_set_energy_frozen: env is NULL");
    if (frozen != 0 && frozen != 1)
        return mr_fail(err, MR_ERR_ARG, "mr_env_set_energy_frozen: frozen = %d: accepted 0 (real) or 1 (frozen)",
                       frozen);
    if (mr_env_set_param(&e->s, "energy_frozen", frozen) != 0)   /* a parameter passed by value, not backend memory */
        return mr_fail(err, MR_ERR_ARG, "mr_env_set_energy_frozen: %s has no energy", mr_env_name_of(e->s.kind));
    mr_ok(err);
    return MR_OK;
}

const void *mr_env_state_base(const mr_env_state *s) { return s->obs ? (const void *)s->obs : (const void *)s->obs_f; }

mr_status mr_env_pull(const mr_env *e, mr_env_state *host, mr_error *err) {
    if (!e || !host) return mr_fail(err, MR_ERR_ARG, "mr_env_pull: NULL argument");
    const mr_env_state *s = &e->s;
    const unsigned char *hb = mr_env_state_base(host), *sb = mr_env_state_base(s);
    if (host->n != s->n || host->kind != s->kind || host->obs_size != s->obs_size || !hb ||
        (const unsigned char *)host->log - hb != (const unsigned char *)s->log - sb)
        return mr_fail(err, MR_ERR_ARG, "mr_env_pull: the host state is not laid out like the environment's "
                       "(lay it out with mr_env_layout and the same config)");
    TRY(e->be->enter(0, e->threads, err));
    TRY(e->be->copy(host->obs ? (void *)host->obs : (void *)host->obs_f, e->block, e->state_bytes, MR_COPY_D2H,
                    e->stream, err));
    return e->be->stream_sync(e->stream, err);
}

mr_status mr_env_log_summary(const mr_env *e, mr_env_log *out, mr_error *err) {
    if (!e || !out) return mr_fail(err, MR_ERR_ARG, "mr_env_log_summary: NULL argument");
    TRY(e->be->enter(0, e->threads, err));
    TRY(e->be->env_log_reduce(&e->s, e->d_log, e->stream, err));
    TRY(e->be->copy(out, e->d_log, sizeof *out, MR_COPY_D2H, e->stream, err));
    return e->be->stream_sync(e->stream, err);
}

mr_status mr_env_devmem(const mr_env *e, mr_devmem_stats *out, mr_error *err) {
    if (!e || !out) return mr_fail(err, MR_ERR_ARG, "mr_env_devmem: NULL argument");
    mr_devmem_stats_get(&e->mem, out);
    mr_ok(err);
    return MR_OK;
}

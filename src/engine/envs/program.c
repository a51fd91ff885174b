/*
 * program.c - the engine's side of an environment the host runs (program.h,
 * moonrl.h's mr_env_program): the check of what it declares, its layout and
 * checkpoint sections, and the calls its driver makes (the end of a step,
 * per instance or for a slice at once; a full reset's bookkeeping; the
 * keyed random numbers; sin and cos of a column with the C library's bits),
 * so the logging, the truncation and the draws are the engine's own, the
 * same as every C environment's.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "moonrl.h"
#include "errors.h"
#include "program.h"
#include "sincos_small.h"

_Static_assert(sizeof(mr_program_env) <= MR_ENV_OWN_BYTES, "a program's state outgrew MR_ENV_OWN_BYTES");

static int identifier(const char *s) {
    if (!s[0] || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return 0;
    return 1;
}

/* Names the driver gives the state's table itself (lua/moonrl/env/thread.lua). */
static const char *const RESERVED[] = {"n", "seed", "index0", "obs", "obs_size", "reward", "terminated", "truncated",
                                       "steps", "tick", "ep_return", "resets", "uniform", "below", "limit", "sincos",
                                       NULL};

static int reserved(const char *name) {
    for (int i = 0; RESERVED[i]; i++)
        if (strcmp(RESERVED[i], name) == 0) return 1;
    return 0;
}

mr_status mr_program_check(mr_env_program *p, mr_error *err) {
    if (!p) return mr_fail(err, MR_ERR_ARG, "mr_program_check: the program is NULL");
    const char *f = p->label[0] ? p->label : "the Lua environment";
    const mr_env_spaces *sp = &p->spaces;
    if (sp->obs.kind == MR_SPACE_IMAGE) {   /* C x V x V floats, channels first: the CNN's (net_layout.h) */
        const int c = sp->obs.shape[0], h = sp->obs.shape[1], w = sp->obs.shape[2];
        if (c < 1 || c > 16 || h != w || h < 1 || h > 128 || (long)c * h * w > 65536)
            return mr_fail(err, MR_ERR_ARG, "%s: observation = { image = { %d, %d, %d } }: accepted C in 1 .. 16 "
                           "channels of a square V x V, V in 1 .. 128, C V V <= 65536 floats", f, c, h, w);
    } else if (sp->obs.kind != MR_SPACE_VECTOR) {
        return mr_fail(err, MR_ERR_ARG, "%s: observation: a Lua environment declares a vector of floats "
                       "(observation = { floats = N }) or a float image ({ image = { C, V, V } }); cell codes are "
                       "not taken yet", f);
    } else if (sp->obs.shape[0] < 1 || sp->obs.shape[0] > 65536) {
        return mr_fail(err, MR_ERR_ARG, "%s: observation = { floats = %d }: accepted 1 .. 65536 floats", f,
                       sp->obs.shape[0]);
    }
    if (sp->act.kind == MR_SPACE_DISCRETE) {
        if (sp->act.n < 2 || sp->act.n > MR_MAX_ACTIONS)
            return mr_fail(err, MR_ERR_ARG, "%s: action = { discrete = %d }: accepted 2 .. %d actions", f, sp->act.n,
                           MR_MAX_ACTIONS);
    } else if (sp->act.kind == MR_SPACE_BOX) {
        if (sp->act.n < 1 || sp->act.n > 4)
            return mr_fail(err, MR_ERR_ARG, "%s: action = { box = ... } of %d floats: accepted 1 .. 4", f, sp->act.n);
        for (int k = 0; k < sp->act.n; k++)
            if (!(sp->act.low[k] < sp->act.high[k]) || sp->act.low[k] < -1e30f || sp->act.high[k] > 1e30f)
                return mr_fail(err, MR_ERR_ARG, "%s: action box component %d: low %g, high %g: accepted finite "
                               "bounds with low < high", f, k + 1, (double)sp->act.low[k], (double)sp->act.high[k]);
    } else {
        return mr_fail(err, MR_ERR_ARG, "%s: action: a Lua environment declares { discrete = N } or { box = {low = "
                       "{...}, high = {...}} }", f);
    }
    if (sp->critic_extra != 0 || sp->critic_view != 0)
        return mr_fail(err, MR_ERR_ARG, "%s: a Lua environment has no privileged critic inputs", f);
    if (sp->counters < 0 || sp->counters > MR_ENV_MAX_COUNTERS)
        return mr_fail(err, MR_ERR_ARG, "%s: %d counters: accepted 0 .. %d", f, sp->counters, MR_ENV_MAX_COUNTERS);
    for (int k = 0; k < sp->counters; k++) {
        if (!identifier(p->counter_name[k]))
            return mr_fail(err, MR_ERR_ARG, "%s: counter %d '%s': expected a name (letters, digits, _)", f, k + 1,
                           p->counter_name[k]);
        p->spaces.counter_names[k] = p->counter_name[k];
    }
    if (sp->success == MR_SUCCESS_COUNTER && (sp->success_counter < 0 || sp->success_counter >= sp->counters))
        return mr_fail(err, MR_ERR_ARG, "%s: success names counter %d of %d", f, sp->success_counter + 1,
                       sp->counters);
    if (sp->success < MR_SUCCESS_NONE || sp->success > MR_SUCCESS_COUNTER)
        return mr_fail(err, MR_ERR_ARG, "%s: success = %d: accepted none, truncated or a counter", f, sp->success);
    if (p->max_steps < 0)
        return mr_fail(err, MR_ERR_ARG, "%s: max_steps = %d: accepted >= 0 (0: env.max_episode_steps alone)", f,
                       p->max_steps);
    if (p->fields < 0 || p->fields > MR_PROGRAM_MAX_FIELDS)
        return mr_fail(err, MR_ERR_ARG, "%s: %d fields: accepted 0 .. %d", f, p->fields, MR_PROGRAM_MAX_FIELDS);
    size_t bytes = 0;
    for (int i = 0; i < p->fields; i++) {
        mr_program_field *d = &p->field[i];
        d->name[MR_PROGRAM_NAME_LEN - 1] = 0;
        if (!identifier(d->name) || reserved(d->name))
            return mr_fail(err, MR_ERR_ARG, "%s: field '%s': expected a name of letters, digits and _ that is not "
                           "one the state has already (n, seed, obs, reward, steps, tick, resets, ...)", f, d->name);
        for (int k = 0; k < i; k++)
            if (strcmp(p->field[k].name, d->name) == 0)
                return mr_fail(err, MR_ERR_ARG, "%s: field '%s' is declared twice", f, d->name);
        for (int k = 0; k < sp->counters; k++)
            if (strcmp(p->counter_name[k], d->name) == 0)
                return mr_fail(err, MR_ERR_ARG, "%s: field '%s' has a counter's name", f, d->name);
        if (!mr_program_type_bytes(d->type))
            return mr_fail(err, MR_ERR_ARG, "%s: field '%s': type %d: accepted double, float, int32, uint32, uint8", f,
                           d->name, d->type);
        if (d->count < 1 || d->count > MR_PROGRAM_MAX_COUNT)
            return mr_fail(err, MR_ERR_ARG, "%s: field '%s': %d values per instance: accepted 1 .. %d", f, d->name,
                           d->count, MR_PROGRAM_MAX_COUNT);
        bytes += (size_t)d->count * mr_program_type_bytes(d->type);
        if (bytes > (size_t)MR_PROGRAM_MAX_INSTANCE_BYTES)
            return mr_fail(err, MR_ERR_ARG, "%s: the fields up to '%s' take %zu bytes per instance: accepted at most "
                           "%d (256 MiB)", f, d->name, bytes, MR_PROGRAM_MAX_INSTANCE_BYTES);
        snprintf(d->section, sizeof d->section, "env.%s", d->name);
    }
    if (!p->step || !p->reset) return mr_fail(err, MR_ERR_ARG, "%s: the host gave no step or reset call", f);
    mr_ok(err);
    return MR_OK;
}

static atomic_uint_fast64_t next_id = 1;

void mr_program_layout(mr_env_state *s, const mr_env_config *cfg, mr_arena *a) {
    mr_program_env *e = mr_program_of(s);
    const mr_env_program *p = cfg->program;
    const size_t n = (size_t)s->n;
    e->prog = p;
    e->id = atomic_fetch_add(&next_id, 1);
    e->resets = MR_TAKE(a, uint32_t, n);
    const int counters = p ? p->spaces.counters : 0;
    for (int k = 0; k < counters; k++) {
        e->count[k] = MR_TAKE(a, int32_t, n);
        e->counted[k] = MR_TAKE(a, int32_t, n);
    }
    for (int i = 0; p && i < p->fields; i++)
        e->field[i] = mr_arena_take(a, n * (size_t)p->field[i].count * mr_program_type_bytes(p->field[i].type));
}

static const char *const COUNT_NAMES[MR_ENV_MAX_COUNTERS] = {"env.count.0", "env.count.1", "env.count.2",
                                                             "env.count.3"};
static const char *const COUNTED_NAMES[MR_ENV_MAX_COUNTERS] = {"env.counted.0", "env.counted.1", "env.counted.2",
                                                               "env.counted.3"};

int mr_program_sections(const mr_env_state *s, mr_env_section *o) {
    const mr_program_env *e = mr_program_of(s);
    const mr_env_program *p = e->prog;
    const size_t n = (size_t)s->n;
    int k = 0;
#define MR_SEC_(nm, d, b) (o[k].name = (nm), o[k].data = (void *)(d), o[k].bytes = (b), k++)
    MR_SEC_("env.steps", s->steps, n * sizeof(int32_t));
    MR_SEC_("env.tick", s->tick, n * sizeof(uint32_t));
    MR_SEC_("env.obs", s->obs_f, n * (size_t)s->obs_size * sizeof(float));
    MR_SEC_("env.ep_return", s->ep_return, n * sizeof(float));
    MR_SEC_("env.resets", e->resets, n * sizeof(uint32_t));
    for (int c = 0; p && c < p->spaces.counters; c++) {
        MR_SEC_(COUNT_NAMES[c], e->count[c], n * sizeof(int32_t));
        MR_SEC_(COUNTED_NAMES[c], e->counted[c], n * sizeof(int32_t));
    }
    for (int i = 0; p && i < p->fields; i++)
        MR_SEC_(p->field[i].section, e->field[i], n * (size_t)p->field[i].count * mr_program_type_bytes(p->field[i].type));
#undef MR_SEC_
    return k;
}

void mr_program_io_of(const mr_env_state *s, mr_program_io *io) {
    const mr_program_env *e = mr_program_of(s);
    memset(io, 0, sizeof *io);
    io->state = s;
    io->id = e->id;
    io->seed = s->seed;
    io->n = s->n;
    io->index0 = s->index0;
    io->obs_size = s->obs_size;
    io->act_bytes = s->act_bytes;
    io->limit = mr_program_limit(s, e->prog);
    io->counters = e->prog ? e->prog->spaces.counters : 0;
    io->obs_f = s->obs_f;
    io->reward = s->reward;
    io->terminated = s->terminated;
    io->truncated = s->truncated;
    io->steps = s->steps;
    io->tick = s->tick;
    io->ep_return = s->ep_return;
    io->resets = e->resets;
    for (int k = 0; k < io->counters; k++) io->count[k] = e->count[k];
    for (int i = 0; e->prog && i < e->prog->fields; i++) io->field[i] = e->field[i];
}

int mr_program_end_step(const void *state, int i, float reward, int terminated) {
    const mr_env_state *s = state;
    const mr_program_env *e = mr_program_of(s);
    const int counters = e->prog->spaces.counters;
    mr_env_log *log = &s->log[i];
    for (int k = 0; k < counters; k++) {   /* what this step counted */
        log->count_total[k] += e->count[k][i] - e->counted[k][i];
        e->counted[k][i] = e->count[k][i];
    }
    const int steps = s->steps[i] + 1;
    const int limit = mr_program_limit(s, e->prog);
    terminated = terminated != 0;
    const int truncated = !terminated && limit > 0 && steps >= limit;
    s->tick[i] += 1;
    if (!mr_env_record_step(s, i, reward, terminated, truncated, steps)) return 0;
    if (mr_env_keeps_final(s, terminated, truncated)) {   /* the observation the step wrote, before the reset */
        const size_t row = (size_t)mr_env_obs_row_bytes(s);
        memcpy((uint8_t *)s->final_obs + (size_t)i * row, (const uint8_t *)mr_env_obs(s) + (size_t)i * row, row);
    }
    for (int k = 0; k < counters; k++) {
        log->count[k] += e->count[k][i];
        e->count[k][i] = e->counted[k][i] = 0;
    }
    return 1;
}

int mr_program_end_steps(const void *state, int i0, int i1, int32_t *ended) {
    /* a local copy: the stores through its arrays could alias *state and would reload its pointers */
    const mr_env_state local = *(const mr_env_state *)state, *s = &local;
    const mr_program_env *e = mr_program_of(state);
    const int counters = e->prog->spaces.counters;
    const int limit = mr_program_limit(s, e->prog);
    int m = 0;
    if (counters == 0) {   /* mr_program_end_step's each-step part, in a loop of its own */
        for (int i = i0; i < i1; i++) {
            const int steps = s->steps[i] + 1;
            const int terminated = s->terminated[i] != 0;
            const int truncated = !terminated & (limit > 0) & (steps >= limit);
            s->tick[i] += 1;
            ended[m] = i;
            m += mr_env_record_each(s, i, s->reward[i], terminated, truncated, steps);
        }
        for (int k = 0; k < m; k++) {   /* and its end part for the episodes that ended */
            const int i = ended[k];
            mr_env_record_end(s, i, s->terminated[i]);
            if (mr_env_keeps_final(s, s->terminated[i], s->truncated[i])) {
                const size_t row = (size_t)mr_env_obs_row_bytes(s);
                memcpy((uint8_t *)s->final_obs + (size_t)i * row, (const uint8_t *)mr_env_obs(s) + (size_t)i * row, row);
            }
        }
        return m;
    }
    for (int i = i0; i < i1; i++)
        if (mr_program_end_step(state, i, s->reward[i], s->terminated[i])) ended[m++] = i;
    return m;
}

void mr_program_sincos(const double *x, int n, double *sn, double *cs) {
    enum { BLOCK = 64 };
    int slow[BLOCK];
    for (int b = 0; b < n; b += BLOCK) {
        const int m = n - b < BLOCK ? n - b : BLOCK;
        const double *xb = x + b;
        double *sb = sn + b, *cb = cs + b;
        for (int j = 0; j < m; j++) slow[j] = !mr_sincos_small(xb[j], &sb[j], &cb[j]);
        for (int j = 0; j < m; j++)
            if (slow[j]) {   /* near a rounding midpoint, |x| > 0.25, NaN: the C library's own */
                sb[j] = sin(xb[j]);
                cb[j] = cos(xb[j]);
            }
    }
}

void mr_program_begin(const void *state, int i) {
    const mr_env_state *s = state;
    const mr_program_env *e = mr_program_of(s);
    for (int k = 0; k < e->prog->spaces.counters; k++) e->count[k][i] = e->counted[k][i] = 0;
    s->steps[i] = 0;
    s->ep_return[i] = 0.0f;
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
}

double mr_program_uniform(uint64_t seed, uint32_t key, uint32_t counter, uint32_t purpose, uint32_t k) {
    if (purpose == 0) purpose = MR_RNG_LUA;
    return (double)(mr_rng_u64(seed, key, counter, purpose, k) >> 11) * (1.0 / 9007199254740992.0);
}

uint32_t mr_program_below(uint64_t seed, uint32_t key, uint32_t counter, uint32_t purpose, uint32_t k, uint32_t n) {
    if (purpose == 0) purpose = MR_RNG_LUA;
    return mr_rng_below(seed, key, counter, purpose, k, n);
}

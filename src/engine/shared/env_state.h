/*
 * env_state.h - what every environment's state has, as the trainer and the
 * backends read it, and the environment's own part they never read.
 *
 * mr_env_state is one struct passed by value to the CUDA kernels and by
 * pointer to the CPU loops: its first part is the interface (sizes, the
 * observation, reward, end flags, the episode's running return and length,
 * the RNG counter the trainer keys action draws on, the per-instance logs),
 * the same for every environment; `own` is the environment's own parameters
 * and struct-of-arrays pointers, laid out and read only by its header under
 * envs/ (foraging.h's mr_forage_of, ...) and the registry. Nothing here or in
 * core/ knows an environment's fields.
 *
 * The registry (envs/registry.c, host) lays a state out on an arena from the
 * config and names its buffers for checkpoints; envs/registry.h (MR_HD)
 * resets and steps one instance by `kind`.
 */
#ifndef MR_ENV_STATE_H
#define MR_ENV_STATE_H
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"   /* mr_env_config, MR_ENV_MAX_COUNTERS */
#include "arena.h"
#include "rng.h"      /* MR_HD */

#define MR_ENV_OWN_BYTES 384   /* the largest environment's own part (registry.c checks each) */
#define MR_ENV_EXTRA_STRIDE 2  /* floats per row of the trainer's privileged critic inputs: an
                                * environment declares at most this many (net_layout.h's MR_POLICY_EXTRA) */

typedef struct mr_env_log {         /* per instance, since the last clear */
    int32_t episodes, deaths, length_sum;           /* ended episodes; deaths = terminated */
    int32_t steps_total;                            /* steps since the clear, ended episodes or not */
    int32_t count[MR_ENV_MAX_COUNTERS];             /* the declared counters over ended episodes */
    int32_t count_total[MR_ENV_MAX_COUNTERS];       /* ... and everything counted since the clear */
    float return_sum, return_min, return_max;       /* of ended episodes (min/max start at +inf/-inf) */
} mr_env_log;

/* Parameters + struct-of-arrays pointers over n instances; the pointers are
 * host or device memory, the struct itself is passed by value to kernels. */
typedef struct mr_env_state {
    int n;                          /* instances */
    int kind;                       /* mr_env_name: whose rules step this state (registry.h) */
    int index0;                     /* global index of instance 0 (data-parallel rank x n; else 0) */
    int threads;                    /* CPU threads for the loops over instances, 0 = OpenMP's default */
    uint64_t seed;
    int obs_size;                   /* per instance: cell codes (obs) or floats (obs_f) */
    int max_steps;                  /* env.max_episode_steps: 0 = no truncation */
    int critic_extra;               /* privileged critic inputs per instance (the declared count) */
    int act_bytes;                  /* bytes of one instance's action: 1 (discrete, a byte), k (multi-discrete,
                                     * a byte per component) or 4 x the box's floats; actions are (n, act_bytes) */
    int act_kind;                   /* the declared action's mr_space_kind (the action draws: mr_loop_step_in) */
    float reward_clip;              /* rewards clamped to [-reward_clip, reward_clip] */
    uint8_t *obs;                   /* (n, obs_size) cell codes, or NULL */
    float *obs_f;                   /* (n, obs_size) floats, or NULL (mr_env_obs: whichever there is) */
    float *reward;                  /* (n) this step's, clamped */
    uint8_t *terminated, *truncated;/* (n) */
    int32_t *steps;                 /* (n) steps in the current episode */
    uint32_t *tick;                 /* (n) steps ever taken by this instance (never reset): the RNG counter */
    float *ep_return;               /* (n) running episode return (clamped rewards) */
    mr_env_log *log;                /* (n) */
    /* Where a truncated instance's final state goes (ppo.truncation =
     * bootstrap: the trainer's critic values it; NULL otherwise, and the
     * environments write nothing): an environment's step that truncates
     * instance i writes, before its auto-reset, the observation of the
     * state the step reached into row i of final_obs (obs_size codes or
     * floats, like obs) and its privileged critic inputs into row i of
     * final_extra (MR_ENV_EXTRA_STRIDE floats): mr_env_final_*. Rows of
     * instances that did not truncate in this step hold stale bytes. */
    void *final_obs;                /* (n, obs row bytes) or NULL */
    float *final_extra;             /* (n, MR_ENV_EXTRA_STRIDE) or NULL */
    /* the environment's own parameters and buffers (its header's struct) */
    union { unsigned char bytes[MR_ENV_OWN_BYTES]; void *align_; double aligned_; } own;
} mr_env_state;

/* The observation buffer, whichever kind: (n, obs_size) codes or floats. */
MR_HD void *mr_env_obs(const mr_env_state *s) { return s->obs ? (void *)s->obs : (void *)s->obs_f; }
/* Bytes of one instance's observation. */
MR_HD int mr_env_obs_row_bytes(const mr_env_state *s) { return s->obs ? s->obs_size : 4 * s->obs_size; }

/* Whether this step's end of instance i must leave its final state (the
 * step truncated it without terminating it - a step that does both is a
 * termination: nothing follows it to value - and the trainer keeps final
 * states); then its final
 * observation row is mr_env_final_codes / mr_env_final_floats (whichever
 * the observation is) and its critic row mr_env_final_extra. */
MR_HD int mr_env_keeps_final(const mr_env_state *s, int terminated, int truncated) {
    return truncated && !terminated && s->final_obs != NULL;
}
MR_HD uint8_t *mr_env_final_codes(const mr_env_state *s, int i) {
    return (uint8_t *)s->final_obs + (size_t)i * (size_t)s->obs_size;
}
MR_HD float *mr_env_final_floats(const mr_env_state *s, int i) {
    return (float *)s->final_obs + (size_t)i * (size_t)s->obs_size;
}
MR_HD float *mr_env_final_extra(const mr_env_state *s, int i) {
    return s->final_extra + (size_t)i * MR_ENV_EXTRA_STRIDE;
}

/* Instance i's key in every random draw: its global index, so a rank's
 * instances draw what the same instances of one bigger process would. */
MR_HD uint32_t mr_env_key(const mr_env_state *s, int i) { return (uint32_t)(s->index0 + i); }

/* A uniformly random action in [0, na) for instance i's next step, drawn
 * with the engine's keyed RNG (rng.h: the seed, the instance's key, its
 * tick, MR_RNG_ACTION): the same byte on every device (mr_env_step_random:
 * the environment benchmark's actions drawn where the environment runs). */
MR_HD uint8_t mr_env_random_action(const mr_env_state *s, int i, uint64_t seed, uint32_t na) {
    return (uint8_t)mr_rng_below(seed, mr_env_key(s, i), s->tick[i], MR_RNG_ACTION, 0, na);
}

MR_HD float mr_env_inf(void) {
#if defined(__CUDA_ARCH__)
    return __int_as_float(0x7f800000);
#else
    union { uint32_t u; float f; } v;
    v.u = 0x7f800000u;
    return v.f;
#endif
}

MR_HD void mr_env_log_clear(mr_env_log *l) {
    l->episodes = l->deaths = l->length_sum = l->steps_total = 0;
    for (int k = 0; k < MR_ENV_MAX_COUNTERS; k++) l->count[k] = l->count_total[k] = 0;
    l->return_sum = 0.0f;
    l->return_min = mr_env_inf();
    l->return_max = -mr_env_inf();
}

/* The end of every environment's step of instance i, written once: r
 * clamped to [-reward_clip, reward_clip] into reward[i] with the end flags;
 * the episode's return and length; on an end, the episode into the log
 * (episodes, deaths = terminated, length, return sum/min/max). Returns 1
 * when the episode ended: the caller then adds its episode counters to
 * log[i].count (only then: a step that goes on reads none of them), clears
 * them and restarts. In two parts, for loops that do the first for many
 * instances and the second for those that ended (cpu/cartpole_cpu.c):
 * mr_env_record_each (every step: reward, flags, the return and length so
 * far; returns whether the episode ended) and mr_env_record_end (the ended
 * episode into the log, return and length cleared). */
MR_HD int mr_env_record_each(const mr_env_state *s, int i, float r, int terminated, int truncated, int steps) {
    const float clip = s->reward_clip;
    r = r > clip ? clip : r;
    r = r < -clip ? -clip : r;
    s->ep_return[i] = s->ep_return[i] + r;
    s->reward[i] = r;
    s->terminated[i] = (uint8_t)terminated;
    s->truncated[i] = (uint8_t)truncated;
    s->steps[i] = steps;
    s->log[i].steps_total++;
    return terminated | truncated;
}

MR_HD void mr_env_record_end(const mr_env_state *s, int i, int terminated) {
    mr_env_log *log = &s->log[i];
    const float ret = s->ep_return[i];
    log->episodes++;
    log->deaths += terminated;
    log->length_sum += s->steps[i];
    log->return_sum = log->return_sum + ret;
    log->return_min = ret < log->return_min ? ret : log->return_min;
    log->return_max = ret > log->return_max ? ret : log->return_max;
    s->ep_return[i] = 0.0f;
    s->steps[i] = 0;
}

MR_HD int mr_env_record_step(const mr_env_state *s, int i, float r, int terminated, int truncated, int steps) {
    if (!mr_env_record_each(s, i, r, terminated, truncated, steps)) return 0;
    mr_env_record_end(s, i, terminated);
    return 1;
}

/* Sums (and min/max) of n logs in index order: deterministic. Host code. */
static inline void mr_env_log_reduce(const mr_env_log *logs, int n, mr_env_log *out) {
    mr_env_log r;
    mr_env_log_clear(&r);
    for (int i = 0; i < n; i++) {
        const mr_env_log *l = &logs[i];
        r.episodes += l->episodes;
        r.deaths += l->deaths;
        r.length_sum += l->length_sum;
        r.steps_total += l->steps_total;
        for (int k = 0; k < MR_ENV_MAX_COUNTERS; k++) {
            r.count[k] += l->count[k];
            r.count_total[k] += l->count_total[k];
        }
        r.return_sum += l->return_sum;
        if (l->return_min < r.return_min) r.return_min = l->return_min;
        if (l->return_max > r.return_max) r.return_max = l->return_max;
    }
    *out = r;
}

/* ------------------------------------------------- the registry (host) */

/* One buffer of a state as a checkpoint holds it: "env.<name>". */
typedef struct mr_env_section {
    const char *name;
    void *data;
    size_t bytes;                   /* all n instances */
} mr_env_section;
#define MR_ENV_MAX_SECTIONS 32   /* a Lua environment's: 5 + 2 per counter + its fields */

/* Every parameter from cfg (reward_clip 20, threads 0; the trainer sets
 * its own) and every buffer from the arena: the interface's, then the
 * environment's own. On a planning arena the pointers are NULL. cfg must
 * have passed mr_env_config_check. The buffers hold zeros: clear the logs
 * (min/max to +-inf) and reset every instance before the first step. */
void mr_env_layout(mr_env_state *s, const mr_env_config *cfg, uint64_t seed, mr_arena *a);
/* The buffers a checkpoint saves, in file order; returns their count. */
int mr_env_sections(const mr_env_state *s, mr_env_section *out);
/* Sets the environment's parameter `name` (foraging: "energy_frozen") in
 * the state (a value passed by value to the kernels); -1 where it has none. */
int mr_env_set_param(mr_env_state *s, const char *name, int value);
/* An evaluated episode's energy where the environment has one (foraging:
 * it starts at 1.0 and moves by exactly gained_centi hundredths with `food`
 * and `poison` eaten in `steps` steps; for a survivor, its energy now);
 * 0 and 0 elsewhere. */
void mr_env_episode_energy(int kind, int32_t food, int32_t poison, int32_t steps, int32_t *gained_centi,
                           float *final_energy);
/* The privileged critic inputs of every instance: (n, MR_ENV_EXTRA_STRIDE)
 * floats, the first critic_extra of each row written. */
void mr_env_critic_extra_all(const mr_env_state *s, float *extra);

#endif /* MR_ENV_STATE_H */

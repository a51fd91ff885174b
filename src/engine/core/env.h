/*
 * env.h - the vectorised foraging environment inside the engine (not public).
 *
 * mr_forage (foraging.h) is the state and the per-instance step logic; this
 * header adds the pieces around it: laying its buffers out in an arena, the
 * CPU loops over all instances (OpenMP, schedule(static), so results never
 * depend on the thread count), log reduction, config checking, and the public
 * mr_env object of moonrl.h. The trainer embeds an mr_forage in its own arena
 * and calls the mr_forage_cpu_* functions directly.
 */
#ifndef MR_ENV_H
#define MR_ENV_H
#include "moonrl.h"
#include "arena.h"
#include "foraging.h"
#include "devmem.h"

struct mr_backend;
struct mr_env {              /* the public opaque type (core/env.c) */
    mr_env_config cfg;
    mr_forage s;             /* backend pointers */
    int threads;             /* 0 = all */
    const struct mr_backend *be;
    void *stream;
    mr_devmem mem;
    int mem_ready;
    void *block;             /* the state, then the actions */
    size_t state_bytes;
    uint8_t *d_actions;      /* (n) */
    mr_forage_log *d_log;    /* one reduced log */
};

/* Sets the parameters from cfg (energy_frozen from the mode: proxy => 1,
 * reward_clip 20, threads 0) and takes every buffer from the arena; on a
 * planning arena the pointers are NULL. cfg must have passed
 * mr_env_config_check. The buffers hold zeros: call mr_forage_cpu_clear_logs
 * (min/max to +-inf) and mr_forage_cpu_reset_all before the first step. */
void mr_forage_layout(mr_forage *s, const mr_env_config *cfg, uint64_t seed, mr_arena *a);

/* Full reset of every instance (the logs are left alone). */
void mr_forage_cpu_reset_all(const mr_forage *s);
/* One step of every instance; actions: n values, each taken & 7. */
void mr_forage_cpu_step_all(const mr_forage *s, const uint8_t *actions);
void mr_forage_cpu_clear_logs(const mr_forage *s);
/* Sums (and min/max) of n logs in index order: deterministic. */
void mr_forage_log_reduce(const mr_forage_log *logs, int n, mr_forage_log *out);

/* The public environment's whole state copied into `host` (laid out by
 * mr_forage_layout with the same config on a committed host arena), its
 * logs reduced into *out (host), and its memory manager's numbers: tests and
 * benchmarks comparing backends. */
mr_status mr_env_pull(const mr_env *e, mr_forage *host, mr_error *err);
mr_status mr_env_log_summary(const mr_env *e, mr_forage_log *out, mr_error *err);
mr_status mr_env_devmem(const mr_env *e, mr_devmem_stats *out, mr_error *err);

/* MR_OK, or MR_ERR_ARG with a message naming the field, its value and what
 * is accepted. */
int mr_env_config_check(const mr_env_config *c, mr_error *err);

#endif /* MR_ENV_H */

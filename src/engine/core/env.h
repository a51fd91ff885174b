/*
 * env.h - the vectorised environment inside the engine (not public).
 *
 * mr_env_state (env_state.h) is the state every environment has, laid out by
 * the registry (mr_env_layout); this header adds config checking and the
 * public mr_env object of moonrl.h (over a backend's env_* operations,
 * backend.h). The trainer embeds an mr_env_state in its own arena. Nothing
 * here knows an environment's own fields: the public view's grid world
 * buffers are found by their checkpoint section names.
 */
#ifndef MR_ENV_H
#define MR_ENV_H
#include "moonrl.h"
#include "arena.h"
#include "env_state.h"   /* mr_env_state, mr_env_layout, mr_env_log_reduce */
#include "devmem.h"

struct mr_backend;
struct mr_env {              /* the public opaque type (core/env.c) */
    mr_env_config cfg;
    mr_env_state s;          /* backend pointers */
    int threads;             /* 0 = all */
    const struct mr_backend *be;
    void *stream;
    mr_devmem mem;
    int mem_ready;
    void *block;             /* the state, then the actions */
    size_t state_bytes;
    uint8_t *d_actions;      /* (n) */
    mr_env_log *d_log;       /* one reduced log */
};

/* The public environment's whole state copied into `host` (laid out by
 * mr_env_layout with the same config on a committed host arena), its
 * logs reduced into *out (host), and its memory manager's numbers: tests and
 * benchmarks comparing backends. */
mr_status mr_env_pull(const mr_env *e, mr_env_state *host, mr_error *err);
mr_status mr_env_log_summary(const mr_env *e, mr_env_log *out, mr_error *err);
/* The first byte of a state's block (its first buffer). */
const void *mr_env_state_base(const mr_env_state *s);
mr_status mr_env_devmem(const mr_env *e, mr_devmem_stats *out, mr_error *err);

/* MR_OK, or MR_ERR_ARG with a message naming the field, its value and what
 * is accepted. */
int mr_env_config_check(const mr_env_config *c, mr_error *err);

#endif /* MR_ENV_H */

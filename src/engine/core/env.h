/*
 * env.h - the vectorised foraging environment inside the engine (not public).
 *
 * mr_forage (foraging.h) is the state and the per-instance step logic,
 * forage_layout.h its buffers and log reduction; this header adds config
 * checking and the public mr_env object of moonrl.h (over a backend's env_*
 * operations, backend.h). The trainer embeds an mr_forage in its own arena.
 */
#ifndef MR_ENV_H
#define MR_ENV_H
#include "moonrl.h"
#include "arena.h"
#include "foraging.h"
#include "forage_layout.h"   /* mr_forage_layout, mr_forage_log_reduce */
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

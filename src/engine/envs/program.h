/*
 * program.h - the state of an environment whose rules the host runs
 * (env.name = lua; moonrl.h's mr_env_program, docs/environments.md "An
 * environment in Lua"): the registry lays out the fields the program
 * declares, struct-of-arrays over the instances, beside the interface's
 * buffers (env_state.h), and the cpu backend hands each thread's slice of
 * instances to the program in one call (cpu/env_cpu.c). Host code only: no
 * CUDA backend steps a program (the config check refuses one on cuda).
 *
 * What the engine keeps for the program, besides its fields: resets[i] (the
 * episodes instance i started before this one: the counter its reset draws
 * key on, as cartpole's), and for each declared counter this episode's
 * count and what of it the log's count_total has (the step adds the
 * difference). Every buffer is a checkpoint section ("env.<field>",
 * "env.resets", "env.count.<k>", "env.counted.<k>" and the interface's).
 */
#ifndef MR_PROGRAM_H
#define MR_PROGRAM_H
#if !defined(__CUDACC__)
#include <stdint.h>
#include <string.h>
#include "env_state.h"

typedef struct mr_program_env {
    const mr_env_program *prog;
    uint64_t id;                               /* mr_program_io.id */
    uint32_t *resets;                          /* (n) */
    int32_t *count[MR_ENV_MAX_COUNTERS];       /* (n) this episode's counts */
    int32_t *counted[MR_ENV_MAX_COUNTERS];     /* (n) what of it log.count_total has */
    void *field[MR_PROGRAM_MAX_FIELDS];        /* (n, count) */
} mr_program_env;

static inline mr_program_env *mr_program_of(const mr_env_state *s) {
    return (mr_program_env *)(void *)s->own.bytes;
}

/* Bytes of one value of a field type (0 for none). */
static inline size_t mr_program_type_bytes(int type) {
    switch (type) {
    case MR_FIELD_DOUBLE: return 8;
    case MR_FIELD_FLOAT: case MR_FIELD_INT32: case MR_FIELD_UINT32: return 4;
    case MR_FIELD_UINT8: return 1;
    default: return 0;
    }
}

/* The steps after which an episode truncates: the program's own limit,
 * lowered by env.max_episode_steps (cartpole's rule); 0 = never. */
static inline int mr_program_limit(const mr_env_state *s, const mr_env_program *p) {
    const int own = p ? p->max_steps : 0;
    if (own > 0 && s->max_steps > 0) return s->max_steps < own ? s->max_steps : own;
    return own > 0 ? own : s->max_steps;
}

void mr_program_layout(mr_env_state *s, const mr_env_config *cfg, mr_arena *a);
int mr_program_sections(const mr_env_state *s, mr_env_section *out);
/* What the program's calls see of s. */
void mr_program_io_of(const mr_env_state *s, mr_program_io *io);

#endif /* !__CUDACC__ */
#endif /* MR_PROGRAM_H */

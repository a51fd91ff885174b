/*
 * env_cpu.h - the cpu backend's loops over every instance of an
 * environment (env_cpu.c): OpenMP with schedule(static), so results never
 * depend on the thread count (mr_env_state.threads, 0 = all).
 */
#ifndef MR_ENV_CPU_H
#define MR_ENV_CPU_H
#include <stdint.h>
#include "registry.h"   /* mr_env_state, every environment's reset and step */
#include "program.h"    /* env.name = lua: the host's program */

/* Full reset of every instance (the logs are left alone). */
void mr_env_cpu_reset_all(const mr_env_state *s);
/* One step of every instance; actions: n values (each environment reads a
 * bad one as a valid one: foraging a & 7). */
void mr_env_cpu_step_all(const mr_env_state *s, const uint8_t *actions);
void mr_env_cpu_clear_logs(const mr_env_state *s);
/* cartpole's step of instances i0 .. i1-1, to the bits of registry.h's
 * mr_env_step_at (cartpole_cpu.c: vectorised loops over blocks of
 * MR_CARTPOLE_CPU_BLOCK instances; the loop above hands it whole blocks). */
#define MR_CARTPOLE_CPU_BLOCK 64
void mr_cartpole_cpu_step(const mr_env_state *s, int i0, int i1, const uint8_t *actions);
/* env.name = lua: the same over the host's program, one call per thread's
 * slice; the program's message when a call fails. */
mr_status mr_env_cpu_program_reset(const mr_env_state *s, mr_error *err);
mr_status mr_env_cpu_program_step(const mr_env_state *s, const uint8_t *actions, mr_error *err);

#endif /* MR_ENV_CPU_H */

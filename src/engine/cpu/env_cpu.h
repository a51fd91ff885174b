/*
 * env_cpu.h - the cpu backend's loops over every instance of the foraging
 * environment (env_cpu.c): OpenMP with schedule(static), so results never
 * depend on the thread count (mr_forage.threads, 0 = all).
 */
#ifndef MR_ENV_CPU_H
#define MR_ENV_CPU_H
#include <stdint.h>
#include "registry.h"   /* mr_forage, every environment's reset and step */

/* Full reset of every instance (the logs are left alone). */
void mr_forage_cpu_reset_all(const mr_forage *s);
/* One step of every instance; actions: n values, each taken & 7. */
void mr_forage_cpu_step_all(const mr_forage *s, const uint8_t *actions);
void mr_forage_cpu_clear_logs(const mr_forage *s);

#endif /* MR_ENV_CPU_H */

/*
 * env_cpu.c - the foraging environment on the CPU: the loops the cpu backend
 * runs (its layout is shared/forage_layout.h, its config check and the public
 * mr_env object core/env.c).
 *
 * The step logic lives in foraging.h (shared with CUDA); this file is the
 * loop around it: OpenMP over instances with schedule(static), so every
 * instance is stepped by exactly one thread and the result is the same bytes
 * for any thread count. The thread count comes from num_threads() clauses
 * (mr_forage.threads, 0 = OpenMP's current default), never from a global.
 *
 * What this file is not: a second implementation of the rules; nothing here
 * knows what a step does. (Software prefetching of the next instances' grid
 * rows was measured and gained nothing: the lines near the agents stay in
 * cache at the usual instance counts.)
 */
#include "env_cpu.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- CPU loops */

/* A step costs ~60 ns per instance, so below this many instances starting a
 * thread team costs more than it saves; the loop then runs on the calling
 * thread. Either way each instance's result is the same. */
#define MR_FORAGE_PARALLEL_MIN_STEP 512
#define MR_FORAGE_PARALLEL_MIN_RESET 4

static int forage_threads(const mr_forage *s) {
    return s->threads > 0 ? s->threads : omp_get_max_threads();
}

void mr_forage_cpu_reset_all(const mr_forage *s) {
    #pragma omp parallel for schedule(static) num_threads(forage_threads(s)) \
        if (s->n >= MR_FORAGE_PARALLEL_MIN_RESET)
    for (int i = 0; i < s->n; i++) mr_env_reset_one(s, i);
}

void mr_forage_cpu_step_all(const mr_forage *s, const uint8_t *actions) {
    const int n = s->n;
    #pragma omp parallel for schedule(static) num_threads(forage_threads(s)) \
        if (n >= MR_FORAGE_PARALLEL_MIN_STEP)
    for (int i = 0; i < n; i++) mr_env_step_one(s, i, actions[i]);
}

void mr_forage_cpu_clear_logs(const mr_forage *s) {
    for (int i = 0; i < s->n; i++) mr_forage_log_clear(&s->log[i]);
}

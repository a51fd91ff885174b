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
 * knows what a step does. Past a few thousand instances the grid rows near
 * the agents no longer stay in L2, so the loop prefetches the rows a later
 * instance's step will read (prefetch_rows; a hint, so the same bytes).
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
/* From this many instances per thread, each step prefetches the rows of the
 * instance MR_FORAGE_PREFETCH_AHEAD places on. bench_env, 2-core Zen 4, 2
 * threads, agent-steps/s without -> with: 2,048 instances 37.6 M -> 40.4 M,
 * 4,096 30.6 M -> 34.7 M, 16,384 11.6 M -> 31.1 M (distances 2 to 16
 * alike). Below it the rows near the agents stay in L2 and prefetching
 * only costs (always on: 512 instances 47.9 M -> 34.8 M, 1,024 47.4 M ->
 * 43.0 M). */
#define MR_FORAGE_PREFETCH_MIN 768
#define MR_FORAGE_PREFETCH_AHEAD 8

static int forage_threads(const mr_forage *s) {
    return s->threads > 0 ? s->threads : omp_get_max_threads();
}

void mr_forage_cpu_reset_all(const mr_forage *s) {
    #pragma omp parallel for schedule(static) num_threads(forage_threads(s)) \
        if (s->n >= MR_FORAGE_PARALLEL_MIN_RESET)
    for (int i = 0; i < s->n; i++) mr_env_reset_one(s, i);
}

/* Instance j's observation rows after its move, into the cache: its step
 * reads them (the eaten cell is in the middle one), and with thousands of
 * instances each 16 KiB grid's rows near its agent are out of L2 by the
 * time its turn comes. Two lines per row: a run of V bytes may cross one.
 * Inlined: as a function of its own GCC finds it free of side effects
 * (prefetches do not count) and drops its calls. */
static inline __attribute__((always_inline)) void prefetch_rows(const mr_forage *s, int j, int action) {
    const int W = s->W, H = s->H, V = s->V;
    int x, y;
    mr_forage_move(s, j, mr_forage_dx(action), mr_forage_dy(action), &x, &y);
    mr_forage_view_origin(s, x, y, &x, &y);
    const uint8_t *g = s->grid + (size_t)j * H * W + x;
    for (int a = 0; a < V; a++) {
        const uint8_t *row = g + (size_t)y * W;
        __builtin_prefetch(row, 0, 3);
        __builtin_prefetch(row + V - 1, 0, 3);
        if (++y == H) y = 0;
    }
}

void mr_forage_cpu_step_all(const mr_forage *s, const uint8_t *actions) {
    const int n = s->n, threads = forage_threads(s);
    const int ahead = n / threads >= MR_FORAGE_PREFETCH_MIN ? MR_FORAGE_PREFETCH_AHEAD : 0;
    #pragma omp parallel for schedule(static) num_threads(threads) if (n >= MR_FORAGE_PARALLEL_MIN_STEP)
    for (int i = 0; i < n; i++) {
        if (ahead && i + ahead < n) prefetch_rows(s, i + ahead, actions[i + ahead]);
        mr_env_step_one(s, i, actions[i]);
    }
}

void mr_forage_cpu_clear_logs(const mr_forage *s) {
    for (int i = 0; i < s->n; i++) mr_forage_log_clear(&s->log[i]);
}

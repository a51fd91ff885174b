/*
 * bench_env.c - environment-only throughput: agent-steps per second of the
 * foraging environment with observations written (mr_env_step), for 1 thread
 * and for all threads. Actions are random but drawn before timing starts.
 *
 *   bench_env [num_envs=4096] [seconds_per_row=2] [grid_size=128] [threads]
 *
 * threads: measure only this thread count (default: 1, then all cores).
 *
 * Spec defaults otherwise (view 5, densities 64..256, 512-step truncation,
 * ground_truth mode). Not a training benchmark: no policy, no copies out.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "moonrl.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ACTION_STEPS 256   /* distinct precomputed action rows, cycled */

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

/* Returns agent-steps per wall second, or -1 on error; *per_cpu_s gets
 * agent-steps per second of process CPU time (all threads), which stays
 * meaningful when other processes share the cores. */
static double run(const mr_env_config *cfg, int threads, const uint8_t *actions, double seconds,
                  double *per_cpu_s) {
    mr_env *e;
    mr_error err;
    if (mr_env_create(cfg, 1, MR_DEVICE_CPU, threads, &e, &err) != MR_OK) {
        fprintf(stderr, "bench_env: %s\n", err.msg);
        return -1;
    }
    const size_t n = (size_t)cfg->num_envs;
    for (int k = 0; k < 64; k++) mr_env_step(e, actions + (k % ACTION_STEPS) * n, NULL);   /* warm-up */
    long steps = 0;
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), t0 = now(), t;
    do {
        for (int k = 0; k < 32; k++, steps++)
            mr_env_step(e, actions + (steps % ACTION_STEPS) * n, NULL);
        t = now() - t0;
    } while (t < seconds);
    double c = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    mr_env_free(e);
    *per_cpu_s = (double)steps * (double)n / c;
    return (double)steps * (double)n / t;
}

int main(int argc, char **argv) {
    mr_env_config cfg = {.mode = MR_MODE_GROUND_TRUTH, .num_envs = 4096, .grid_size = 128, .view_range = 5,
                         .density_min = 64, .density_max = 256, .respawn_tries = 50, .max_episode_steps = 512,
                         .name = MR_ENV_FORAGING};
    double seconds = 2.0;
    if (argc > 1) cfg.num_envs = atoi(argv[1]);
    if (argc > 2) seconds = atof(argv[2]);
    if (argc > 3) cfg.grid_size = atoi(argv[3]);
    int only = argc > 4 ? atoi(argv[4]) : 0;
    if (cfg.num_envs < 1 || seconds <= 0 || only < 0) {
        fprintf(stderr, "usage: bench_env [num_envs=4096] [seconds_per_row=2] [grid_size=128] [threads]\n");
        return 2;
    }
    const size_t n = (size_t)cfg.num_envs;
    uint8_t *actions = malloc(n * ACTION_STEPS);
    if (!actions) { fprintf(stderr, "bench_env: out of memory\n"); return 1; }
    uint64_t z = 0x12345678u;
    for (size_t k = 0; k < n * ACTION_STEPS; k++) {   /* xorshift64 */
        z ^= z << 13; z ^= z >> 7; z ^= z << 17;
        actions[k] = (uint8_t)(z >> 61);
    }
    const int all = omp_get_num_procs();
    printf("foraging env-only: %d envs, grid %dx%d, view %d, obs written every step\n", cfg.num_envs,
           cfg.grid_size, cfg.grid_size, cfg.view_range);
    printf("%8s %16s %16s %18s\n", "threads", "agent-steps/s", "per thread", "per cpu-second");
    double one = 0;
    int rows[2] = {1, all}, nrows = all > 1 ? 2 : 1;
    if (only) { rows[0] = only; nrows = 1; }
    for (int r = 0; r < nrows; r++) {
        double cpu_rate = 0, sps = run(&cfg, rows[r], actions, seconds, &cpu_rate);
        if (sps < 0) { free(actions); return 1; }
        if (rows[r] == 1) one = sps;
        printf("%8d %16.0f %16.0f %18.0f\n", rows[r], sps, sps / rows[r], cpu_rate);
    }
    if (one > 0) printf("per core (1 thread, wall clock): %.2f M agent-steps/s\n", one / 1e6);
    free(actions);
    return 0;
}

/*
 * env_cpu.c - the environments on the CPU: the loops the cpu backend runs
 * (their layout is the registry's, env_state.h; the config check and the
 * public mr_env object core/env.c).
 *
 * The step logic lives in each environment's header (envs/, shared with
 * CUDA, dispatched by registry.h); this file is the
 * loop around it: OpenMP over instances with schedule(static), so every
 * instance is stepped by exactly one thread and the result is the same bytes
 * for any thread count. The thread count comes from num_threads() clauses
 * (mr_env_state.threads, 0 = OpenMP's current default), never from a global.
 *
 * What this file is not: a second implementation of the rules; nothing here
 * knows what a step does (cartpole's steps go to cartpole_cpu.c, which runs
 * envs/cartpole.h's functions a block of instances at a time). Past a few thousand instances the grid rows near
 * the agents no longer stay in L2, so the loop prefetches the rows a later
 * instance's step will read (prefetch_rows; a hint, so the same bytes).
 */
#include "env_cpu.h"
#include "errors.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- CPU loops */

/* A step costs ~60 ns per instance (foraging; cartpole's ~10), so below this
 * many instances starting a thread team costs more than it saves; the loop
 * then runs on the calling thread. Either way each instance's result is the
 * same. */
#define MR_ENV_CPU_PARALLEL_MIN_STEP 512
#define MR_ENV_CPU_PARALLEL_MIN_RESET 4
/* From this many instances per thread, each step prefetches the rows of the
 * instance MR_ENV_CPU_PREFETCH_AHEAD places on. bench_env, 2-core Zen 4, 2
 * threads, agent-steps/s without -> with: 2,048 instances 37.6 M -> 40.4 M,
 * 4,096 30.6 M -> 34.7 M, 16,384 11.6 M -> 31.1 M (distances 2 to 16
 * alike). Below it the rows near the agents stay in L2 and prefetching
 * only costs (always on: 512 instances 47.9 M -> 34.8 M, 1,024 47.4 M ->
 * 43.0 M). */
#define MR_ENV_CPU_PREFETCH_MIN 768
#define MR_ENV_CPU_PREFETCH_AHEAD 8

static int env_threads(const mr_env_state *s) {
    return s->threads > 0 ? s->threads : omp_get_max_threads();
}

void mr_env_cpu_reset_all(const mr_env_state *s) {
    #pragma omp parallel for schedule(static) num_threads(env_threads(s)) \
        if (s->n >= MR_ENV_CPU_PARALLEL_MIN_RESET)
    for (int i = 0; i < s->n; i++) mr_env_reset_one(s, i);
}

/* cartpole: blocks of instances, each stepped by cartpole_cpu.c's
 * vectorised loops (the same bits as mr_env_step_at, instance by instance,
 * so the same bytes for any thread count). */
static void step_cartpole(const mr_env_state *s, const uint8_t *actions, int threads) {
    const int n = s->n, blocks = (n + MR_CARTPOLE_CPU_BLOCK - 1) / MR_CARTPOLE_CPU_BLOCK;
    #pragma omp parallel for schedule(static) num_threads(threads) if (n >= MR_ENV_CPU_PARALLEL_MIN_STEP)
    for (int b = 0; b < blocks; b++) {
        const int i0 = b * MR_CARTPOLE_CPU_BLOCK;
        mr_cartpole_cpu_step(s, i0, n - i0 < MR_CARTPOLE_CPU_BLOCK ? n : i0 + MR_CARTPOLE_CPU_BLOCK, actions);
    }
}

void mr_env_cpu_step_all(const mr_env_state *s, const uint8_t *actions) {
    const int n = s->n, threads = env_threads(s);
    if (s->kind == MR_ENV_CARTPOLE) {
        step_cartpole(s, actions, threads);
        return;
    }
    const int ahead = n / threads >= MR_ENV_CPU_PREFETCH_MIN ? MR_ENV_CPU_PREFETCH_AHEAD : 0;
    #pragma omp parallel for schedule(static) num_threads(threads) if (n >= MR_ENV_CPU_PARALLEL_MIN_STEP)
    for (int i = 0; i < n; i++) {
        if (ahead && i + ahead < n) mr_env_prefetch_one(s, i + ahead, actions[i + ahead]);
        mr_env_step_at(s, i, actions);
    }
}

/* ------------------------------------------------- a program's slices */

/* A program (env.name = lua) steps whole slices: thread t of T takes
 * instances [n t / T, n (t + 1) / T) in one call of the host's program
 * (its loop over them is the program's own, so it is compiled as one).
 * The instances are independent, so the bytes are the same for any T.
 * Each thread gets at least MR_ENV_CPU_PROGRAM_SLICE instances: a call
 * costs about a microsecond. A failing call's message comes back; where
 * several fail, the one of the lowest instances (what one thread would
 * have met first). */
#define MR_ENV_CPU_PROGRAM_SLICE 256

static mr_status program_run(const mr_env_state *s, const uint8_t *actions, int step, mr_error *err) {
    const mr_env_program *p = mr_program_of(s)->prog;
    if (!p) return mr_fail(err, MR_ERR_STATE, "env.name = lua: the environment's state has no program");
    if (!p->step || !p->reset) {
        /* a checkpoint's stand-in (checkpoint_config.c): its declarations, no code. A reset clears the
         * engine's part (a trainer made to export or infer resets, and a checkpoint then fills the state);
         * a step is refused */
        if (!step) {
            for (int i = 0; i < s->n; i++) mr_program_begin(s, i);
            mr_ok(err);
            return MR_OK;
        }
        return mr_fail(err, MR_ERR_STATE, "%s: this Lua environment was read back from a checkpoint and its file is "
                       "not attached: give env.lua (the run's config.lua names it) to step it", p->label);
    }
    mr_program_io io;
    mr_program_io_of(s, &io);
    const int n = s->n;
    int threads = env_threads(s);
    if (threads > n / MR_ENV_CPU_PROGRAM_SLICE) threads = n / MR_ENV_CPU_PROGRAM_SLICE;
    if (threads < 1) threads = 1;
    int bad_i0 = INT_MAX;
    char bad_msg[MR_ERROR_LEN] = "";
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int i0 = (int)((long long)n * t / nt), i1 = (int)((long long)n * (t + 1) / nt);
        char msg[MR_ERROR_LEN];
        msg[0] = 0;
        int rc = 0;
        if (i1 > i0)
            rc = step ? p->step(p->user, &io, i0, i1, actions, msg, sizeof msg)
                      : p->reset(p->user, &io, i0, i1, msg, sizeof msg);
        if (rc != 0) {
            #pragma omp critical(mr_env_cpu_program_error)
            if (i0 < bad_i0) {
                bad_i0 = i0;
                memcpy(bad_msg, msg, sizeof msg);
                bad_msg[sizeof bad_msg - 1] = 0;
            }
        }
    }
    if (bad_i0 != INT_MAX) return mr_fail(err, MR_ERR_STATE, "%s", bad_msg[0] ? bad_msg : "the program failed");
    mr_ok(err);
    return MR_OK;
}

mr_status mr_env_cpu_program_reset(const mr_env_state *s, mr_error *err) { return program_run(s, NULL, 0, err); }

mr_status mr_env_cpu_program_step(const mr_env_state *s, const uint8_t *actions, mr_error *err) {
    return program_run(s, actions, 1, err);
}

void mr_env_cpu_clear_logs(const mr_env_state *s) {
    for (int i = 0; i < s->n; i++) mr_env_log_clear(&s->log[i]);
}

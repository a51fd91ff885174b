/*
 * cartpole_cpu.c - cartpole's step on the CPU, a block of instances at a
 * time, to the bits of envs/cartpole.h's per-instance mr_cartpole_step (the
 * definition, which CUDA runs; spec/c/test_env_cartpole.c compares the two
 * bit for bit).
 *
 * The same functions in loops the compiler vectorises (4 instances to an
 * AVX2 register), in three passes over each block of MR_CARTPOLE_CPU_BLOCK
 * instances:
 *   1. sin and cos of every theta: sincos_small.h's fast path where it has
 *      libm's bits, libm's sin and cos for the rest (a few in a hundred);
 *   2. the dynamics, mr_cartpole_step_sc, with those;
 *   3. the bookkeeping, mr_cartpole_finish_each (end flags, observation),
 *      then mr_cartpole_finish_end for those that ended (log, restart).
 * This file is compiled with -ffp-contract=off and MR_CARTPOLE_UNFUSED
 * (CMakeLists.txt): every product rounds on its own as NumPy's do, with no
 * volatile in the way of the vectoriser.
 */
#include "env_cpu.h"

#include "sincos_small.h"

#if !defined(MR_CARTPOLE_UNFUSED)
#error "cartpole_cpu.c is compiled with -ffp-contract=off -DMR_CARTPOLE_UNFUSED (CMakeLists.txt)"
#endif

#define MR_CARTPOLE_CPU_BLOCK 64

void mr_cartpole_cpu_step(const mr_env_state *s_in, int i0, int i1, const uint8_t *actions) {
    /* a local copy: the byte stores through s->terminated could alias *s_in,
     * and would reload its pointers after each one */
    const mr_env_state local = *s_in, *s = &local;
    double *state = mr_cartpole_of(s)->state;
    double sn[MR_CARTPOLE_CPU_BLOCK], cs[MR_CARTPOLE_CPU_BLOCK];
    int ok[MR_CARTPOLE_CPU_BLOCK], term[MR_CARTPOLE_CPU_BLOCK], ended[MR_CARTPOLE_CPU_BLOCK];
    for (int b = i0; b < i1; b += MR_CARTPOLE_CPU_BLOCK) {
        const int m = i1 - b < MR_CARTPOLE_CPU_BLOCK ? i1 - b : MR_CARTPOLE_CPU_BLOCK;
        double *st = state + (size_t)b * 4;
        const uint8_t *a = actions + b;
        int slow = 0;
        for (int j = 0; j < m; j++) {
            ok[j] = mr_sincos_small(st[4 * j + 2], &sn[j], &cs[j]);
            slow |= !ok[j];
        }
        if (slow)
            for (int j = 0; j < m; j++)
                if (!ok[j]) {
                    sn[j] = sin(st[4 * j + 2]);
                    cs[j] = cos(st[4 * j + 2]);
                }
        #pragma omp simd
        for (int j = 0; j < m; j++) term[j] = mr_cartpole_step_sc(st + 4 * j, a[j], sn[j], cs[j]);
        int ends = 0;
        #pragma omp simd reduction(|:ends)
        for (int j = 0; j < m; j++) {
            ended[j] = mr_cartpole_finish_each(s, b + j, term[j]);
            ends |= ended[j];
        }
        if (ends)
            for (int j = 0; j < m; j++)
                if (ended[j]) mr_cartpole_finish_end(s, b + j, term[j]);
    }
}

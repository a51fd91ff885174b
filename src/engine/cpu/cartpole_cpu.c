/*
 * cartpole_cpu.c - cartpole's step on the CPU, a block of instances at a
 * time, to the bits of envs/cartpole.h's per-instance mr_cartpole_step (the
 * definition, which CUDA runs; spec/c/test_env_cartpole.c compares the two
 * bit for bit).
 *
 * The same functions in loops the compiler vectorises (4 instances to an
 * AVX2 register), over each block of MR_CARTPOLE_CPU_BLOCK instances:
 *   0. the block's states, rows (x, x_dot, theta, theta_dot) in the engine,
 *      into four columns (a 4x4 transpose per 4 instances);
 *   1. sin and cos of every theta: sincos_small.h's fast path where it has
 *      libm's bits, libm's sin and cos for the rest (about 5 in a hundred);
 *   2. the dynamics, mr_cartpole_move, on the columns; back into rows;
 *   3. the bookkeeping, mr_cartpole_finish_each (end flags, observation),
 *      then mr_cartpole_finish_end for those that ended (log, restart).
 * This file is compiled with -ffp-contract=off and MR_CARTPOLE_UNFUSED
 * (CMakeLists.txt): every product rounds on its own as NumPy's do, with no
 * volatile in the way of the vectoriser. One thread, 4,096 instances, a
 * 2-core EPYC (Zen 3): ~72 ns an instance-step with the per-instance step,
 * ~9-10 ns here (BENCHMARKS.md's cartpole; docs/benchmarks-log.md).
 */
#include "env_cpu.h"

#include "sincos_small.h"
#if defined(__AVX__)
#include <immintrin.h>
#endif

_Static_assert(MR_CARTPOLE_CPU_BLOCK <= 64, "a block's instances are bits of a uint64_t (nonzero_bits)");

#if !defined(MR_CARTPOLE_UNFUSED)
#error "cartpole_cpu.c is compiled with -ffp-contract=off -DMR_CARTPOLE_UNFUSED (CMakeLists.txt)"
#endif

/* rows st[4 j + k] <-> columns c_k[j], j < m (only data moves: same bits) */
static inline void rows_to_columns(const double *st, int m, double *c0, double *c1, double *c2, double *c3) {
    int j = 0;
#if defined(__AVX__)
    for (; j + 4 <= m; j += 4) {
        const double *r = st + 4 * j;
        const __m256d r0 = _mm256_loadu_pd(r), r1 = _mm256_loadu_pd(r + 4), r2 = _mm256_loadu_pd(r + 8),
                      r3 = _mm256_loadu_pd(r + 12);
        const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1),
                      t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
        _mm256_storeu_pd(c0 + j, _mm256_permute2f128_pd(t0, t2, 0x20));
        _mm256_storeu_pd(c1 + j, _mm256_permute2f128_pd(t1, t3, 0x20));
        _mm256_storeu_pd(c2 + j, _mm256_permute2f128_pd(t0, t2, 0x31));
        _mm256_storeu_pd(c3 + j, _mm256_permute2f128_pd(t1, t3, 0x31));
    }
#endif
    for (; j < m; j++) {
        c0[j] = st[4 * j];
        c1[j] = st[4 * j + 1];
        c2[j] = st[4 * j + 2];
        c3[j] = st[4 * j + 3];
    }
}

static inline void columns_to_rows(double *st, int m, const double *c0, const double *c1, const double *c2,
                                   const double *c3) {
    int j = 0;
#if defined(__AVX__)
    for (; j + 4 <= m; j += 4) {
        const __m256d r0 = _mm256_loadu_pd(c0 + j), r1 = _mm256_loadu_pd(c1 + j), r2 = _mm256_loadu_pd(c2 + j),
                      r3 = _mm256_loadu_pd(c3 + j);
        const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1),
                      t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
        double *r = st + 4 * j;
        _mm256_storeu_pd(r, _mm256_permute2f128_pd(t0, t2, 0x20));
        _mm256_storeu_pd(r + 4, _mm256_permute2f128_pd(t1, t3, 0x20));
        _mm256_storeu_pd(r + 8, _mm256_permute2f128_pd(t0, t2, 0x31));
        _mm256_storeu_pd(r + 12, _mm256_permute2f128_pd(t1, t3, 0x31));
    }
#endif
    for (; j < m; j++) {
        st[4 * j] = c0[j];
        st[4 * j + 1] = c1[j];
        st[4 * j + 2] = c2[j];
        st[4 * j + 3] = c3[j];
    }
}

/* bit j set where v[j] != 0, j < m <= 64: the few instances that need
 * more (libm's sin and cos, a restart) found without a branch per instance */
static inline uint64_t nonzero_bits(const int *v, int m) {
    uint64_t bits = 0;
    int j = 0;
#if defined(__AVX2__)
    for (; j + 8 <= m; j += 8) {
        const __m256i z = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(v + j)), _mm256_setzero_si256());
        bits |= (uint64_t)(~_mm256_movemask_ps(_mm256_castsi256_ps(z)) & 0xff) << j;
    }
#endif
    for (; j < m; j++) bits |= (uint64_t)(v[j] != 0) << j;
    return bits;
}

void mr_cartpole_cpu_step(const mr_env_state *s_in, int i0, int i1, const uint8_t *actions) {
    /* a local copy: the byte stores through s->terminated could alias *s_in,
     * and would reload its pointers after each one */
    const mr_env_state local = *s_in, *s = &local;
    double *state = mr_cartpole_of(s)->state;
    double x[MR_CARTPOLE_CPU_BLOCK], xd[MR_CARTPOLE_CPU_BLOCK], th[MR_CARTPOLE_CPU_BLOCK],
        thd[MR_CARTPOLE_CPU_BLOCK], sn[MR_CARTPOLE_CPU_BLOCK], cs[MR_CARTPOLE_CPU_BLOCK];
    int slow[MR_CARTPOLE_CPU_BLOCK], term[MR_CARTPOLE_CPU_BLOCK], ended[MR_CARTPOLE_CPU_BLOCK];
    for (int b = i0; b < i1; b += MR_CARTPOLE_CPU_BLOCK) {
        const int m = i1 - b < MR_CARTPOLE_CPU_BLOCK ? i1 - b : MR_CARTPOLE_CPU_BLOCK;
        double *st = state + (size_t)b * 4;
        const uint8_t *a = actions + b;
        rows_to_columns(st, m, x, xd, th, thd);
        for (int j = 0; j < m; j++) slow[j] = !mr_sincos_small(th[j], &sn[j], &cs[j]);
        for (uint64_t bits = nonzero_bits(slow, m); bits; bits &= bits - 1) {   /* the rest from libm */
            const int j = __builtin_ctzll(bits);
            sn[j] = sin(th[j]);
            cs[j] = cos(th[j]);
        }
        #pragma omp simd
        for (int j = 0; j < m; j++) term[j] = mr_cartpole_move(&x[j], &xd[j], &th[j], &thd[j], a[j], sn[j], cs[j]);
        columns_to_rows(st, m, x, xd, th, thd);
        #pragma omp simd
        for (int j = 0; j < m; j++) ended[j] = mr_cartpole_finish_each(s, b + j, term[j]);
        for (uint64_t bits = nonzero_bits(ended, m); bits; bits &= bits - 1) {
            const int j = __builtin_ctzll(bits);
            mr_cartpole_finish_end(s, b + j, term[j]);
        }
    }
}

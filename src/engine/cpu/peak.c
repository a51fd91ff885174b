/*
 * peak.c - this CPU's arithmetic peak, measured: the ceiling every
 * GFLOP/s figure of the cpu backend (and of any CPU implementation compared
 * with it) is a fraction of.
 *
 * A register-resident loop of independent multiply-adds per thread, nothing
 * loaded from memory: 12 accumulators (more than latency x issue width on
 * the cores we know) of 512-bit FMAs (fp32: 32 flops each) or AVX512-BF16
 * dot products (vdpbf16ps: 16 lanes x 2 products, 64 flops each), on
 * `threads` OpenMP threads at once. On a CPU without AVX-512 the fp32 loop
 * uses 256-bit FMAs (AVX2+FMA); without those, or bf16 without AVX512-BF16,
 * the answer is 0 (unknown).
 *
 * Two things a library's GEMM rate (bench_train's sgemm figure) does not
 * say: how far that library is from the hardware, and how far anyone could
 * ever get. Measured on the 2-core EPYC (Zen 4) of BENCHMARKS.md: fp32 232
 * GFLOP/s, bf16 467; OpenBLAS's 2048^3 sgemm 208 (90%), oneDNN's bf16
 * matmul 384 (82%).
 *
 * Each accumulator starts from a different value so that the compiler cannot
 * merge the 12 chains into one (it did, with identical starting values, and
 * the figure came out 3x too high); the result is returned and checked by
 * test_nn against its closed form, so an elided loop cannot go unnoticed.
 */
#include "moonrl.h"
#include <immintrin.h>
#include <omp.h>
#include <time.h>

#define PEAK_ACC 12

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Starting values the compiler cannot see through. */
static volatile float peak_seed[PEAK_ACC] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

#define ACC_DECL(T, set) T a0 = set(peak_seed[0]), a1 = set(peak_seed[1]), a2 = set(peak_seed[2]), \
    a3 = set(peak_seed[3]), a4 = set(peak_seed[4]), a5 = set(peak_seed[5]), a6 = set(peak_seed[6]), \
    a7 = set(peak_seed[7]), a8 = set(peak_seed[8]), a9 = set(peak_seed[9]), a10 = set(peak_seed[10]), \
    a11 = set(peak_seed[11])
#define ACC_STEP(op) a0 = op(a0); a1 = op(a1); a2 = op(a2); a3 = op(a3); a4 = op(a4); a5 = op(a5); \
    a6 = op(a6); a7 = op(a7); a8 = op(a8); a9 = op(a9); a10 = op(a10); a11 = op(a11)
#define ACC_SUM(add) add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))), \
    add(add(a8, a9), add(a10, a11)))

/* Each lane of each accumulator gains x*y = 2^-4 * 2^-8 = 2^-12 per step,
 * exactly, while it stays below 2^12: the result, the mean over lanes of the
 * accumulators' sum, is 66 + 12 * iters / 4096 (test_nn checks it). */
__attribute__((target("avx512f")))
static float loop_fma512(long iters) {
    ACC_DECL(__m512, _mm512_set1_ps);
    const __m512 x = _mm512_set1_ps(0.0625f), y = _mm512_set1_ps(1.0f / 256.0f);
#define F(a) _mm512_fmadd_ps(x, y, a)
    for (long i = 0; i < iters; i++) { ACC_STEP(F); }
#undef F
    return _mm512_reduce_add_ps(ACC_SUM(_mm512_add_ps)) / 16.0f;
}

__attribute__((target("avx2,fma")))
static float loop_fma256(long iters) {
    ACC_DECL(__m256, _mm256_set1_ps);
    const __m256 x = _mm256_set1_ps(0.0625f), y = _mm256_set1_ps(1.0f / 256.0f);
#define F(a) _mm256_fmadd_ps(x, y, a)
    for (long i = 0; i < iters; i++) { ACC_STEP(F); }
#undef F
    __m256 s = ACC_SUM(_mm256_add_ps);
    float v[8];
    _mm256_storeu_ps(v, s);
    return (v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]) / 8.0f;
}

/* vdpbf16ps: lane += x0*y0 + x1*y1 with bf16 pairs: 2^-4 * 2^-9 twice = 2^-12. */
__attribute__((target("avx512f,avx512bf16")))
static float loop_dpbf16(long iters) {
    ACC_DECL(__m512, _mm512_set1_ps);
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3d80);   /* 2^-4 */
    const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3b00);   /* 2^-9 */
#define F(a) _mm512_dpbf16_ps(a, x, y)
    for (long i = 0; i < iters; i++) { ACC_STEP(F); }
#undef F
    return _mm512_reduce_add_ps(ACC_SUM(_mm512_add_ps)) / 16.0f;
}

/* flops per step of one loop, 0 where this CPU cannot run it */
static double step_flops(int bf16, int *kind) {
    __builtin_cpu_init();
    if (bf16) {
        *kind = 2;
        return __builtin_cpu_supports("avx512bf16") ? PEAK_ACC * 64.0 : 0.0;
    }
    if (__builtin_cpu_supports("avx512f")) { *kind = 1; return PEAK_ACC * 32.0; }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { *kind = 0; return PEAK_ACC * 16.0; }
    return 0.0;
}

static float run_loop(int kind, long iters) {
    return kind == 2 ? loop_dpbf16(iters) : kind == 1 ? loop_fma512(iters) : loop_fma256(iters);
}

float mr_cpu_peak_kernel(int bf16, long iters) {
    int kind = 0;
    if (step_flops(bf16, &kind) <= 0.0) return -1.0f;
    return run_loop(kind, iters);
}

double mr_cpu_peak_gflops(int bf16, int threads) {
    int kind = 0;
    double per_step = step_flops(bf16, &kind);
    if (per_step <= 0.0) return 0.0;
    if (threads < 1) threads = omp_get_max_threads();
    /* about 0.05 s a try at 4 GHz-class rates; best of 3 */
    const long iters = 4L << 20;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        volatile float sink = 0.0f;
        #pragma omp parallel num_threads(threads)
        {
            float r = run_loop(kind, iters);
            #pragma omp atomic
            sink += r;
        }
        double dt = now_s() - t0;
        (void)sink;
        double g = per_step * (double)iters * threads / dt / 1e9;
        if (g > best) best = g;
    }
    return best;
}

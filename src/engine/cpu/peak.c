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
 * the answer is 0 (unknown). bf16 on a CPU with AMX (and a kernel that
 * grants its tile state): AMX's tile dot products instead, the fastest
 * bf16 arithmetic there and what oneDNN's bf16 kernels run on it - 4
 * accumulator tiles of 16 x 16 fp32, each tdpbf16ps 16 x 16 x 32 products
 * (16,384 flops). Measured on a 2-core AMX Xeon: 3.3 TFLOP/s a core, against
 * 0.2 for its vdpbf16ps loop and 0.2 for fp32 FMAs.
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
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* AMX: the tiles' configuration (palette 1: 8 tiles of up to 16 rows x 64
 * bytes), and Linux's permission for the tile state, asked once per process
 * (oneDNN asks too; a second request is granted again). */
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } amx_config;
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_usable(void) {
    static int state = -1;   /* -1 unknown, 0 no, 1 yes */
    if (state < 0) {
        int ok = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
#ifdef SYS_arch_prctl
        ok = ok && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
        ok = 0;
#endif
        state = ok;
    }
    return state;
}

/* Tiles 0-3 accumulate (each starting at 16.5 in every element), 4-5 hold
 * A (bf16 3 * 2^-8), 6-7 B (2^-9): every tdpbf16ps adds 32 * 3 * 2^-17 =
 * 3 / 4096 to each element, exactly; the result, the sum of the four tiles'
 * element means, is the other loops' closed form 66 + 12 * iters / 4096. */
__attribute__((target("amx-tile,amx-bf16")))
static float loop_amx(long iters) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.rows[i] = 16, c.colsb[i] = 64;
    _tile_loadconfig(&c);
    uint16_t a[16 * 32], b[16 * 32];
    float acc[4][16 * 16];
    for (int i = 0; i < 16 * 32; i++) a[i] = 0x3c40, b[i] = 0x3b00;   /* 3 * 2^-8, 2^-9 */
    for (int i = 0; i < 16 * 16; i++) acc[0][i] = acc[1][i] = acc[2][i] = acc[3][i] = 16.5f;
    _tile_loadd(0, acc[0], 64);
    _tile_loadd(1, acc[1], 64);
    _tile_loadd(2, acc[2], 64);
    _tile_loadd(3, acc[3], 64);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, acc[0], 64);
    _tile_stored(1, acc[1], 64);
    _tile_stored(2, acc[2], 64);
    _tile_stored(3, acc[3], 64);
    _tile_release();
    double sum = 0.0;
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 16 * 16; i++) sum += acc[t][i];
    return (float)(sum / 256.0);
}

/* flops per step of one loop, 0 where this CPU cannot run it */
static double step_flops(int bf16, int *kind) {
    __builtin_cpu_init();
    if (bf16) {
        if (amx_usable()) { *kind = 3; return 4 * 16 * 16 * 32 * 2.0; }
        *kind = 2;
        return __builtin_cpu_supports("avx512bf16") ? PEAK_ACC * 64.0 : 0.0;
    }
    if (__builtin_cpu_supports("avx512f")) { *kind = 1; return PEAK_ACC * 32.0; }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { *kind = 0; return PEAK_ACC * 16.0; }
    return 0.0;
}

static float run_loop(int kind, long iters) {
    return kind == 3 ? loop_amx(iters) : kind == 2 ? loop_dpbf16(iters) : kind == 1 ? loop_fma512(iters)
                                                                           : loop_fma256(iters);
}

const char *mr_cpu_peak_what(int bf16) {
    static const char *names[4] = {"256-bit FMAs", "512-bit FMAs", "AVX512-BF16 dot products", "AMX tile dot products"};
    int kind = 0;
    return step_flops(bf16, &kind) > 0.0 ? names[kind] : "unknown";
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
    /* about 0.05 s a try at 4 GHz-class rates (AMX: 1/16 of the steps, each 85x the work); best of 3 */
    const long iters = kind == 3 ? 1L << 20 : 4L << 20;
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

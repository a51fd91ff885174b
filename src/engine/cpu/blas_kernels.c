/*
 * blas_kernels.c - which OpenBLAS kernel set the cpu backend runs, and which
 * one to ask for on this CPU (moonrl.h's mr_blas_kernels,
 * mr_blas_better_kernels and mr_blas_pick_kernels; core answers the first
 * two through the backend table, blas_kernels and blas_better_kernels).
 * Identification only: the products themselves are nn.c's and gemm.c's.
 */
#include "blas_kernels.h"

#include <cblas.h>   /* openblas_get_corename */
#include <stdlib.h>
#include <strings.h>

/* OpenBLAS picks its kernels by CPU when it loads, unless OPENBLAS_CORETYPE
 * names them; the choice changes speed by up to 2x (BENCHMARKS.md). */
const char *mr_cpu_blas_kernels(void) {
    const char *n = openblas_get_corename();
    return n ? n : "unknown";
}

/* AVX-512 kernels: OpenBLAS's own SKYLAKEX / COOPERLAKE / SAPPHIRERAPIDS;
 * AVX2 + FMA: HASWELL / ZEN (the same kernels). */
static int blas_core_avx512(const char *n) {
    return !strcasecmp(n, "skylakex") || !strcasecmp(n, "cooperlake") || !strcasecmp(n, "sapphirerapids");
}
static int blas_core_avx2(const char *n) {
    return blas_core_avx512(n) || !strcasecmp(n, "haswell") || !strcasecmp(n, "zen");
}

const char *mr_blas_pick_kernels(const char *core, int cpu_avx2_fma, int cpu_avx512) {
    if (!core) return NULL;
    if (cpu_avx512 && !blas_core_avx512(core)) return "SkylakeX";
    if (cpu_avx2_fma && !blas_core_avx2(core)) return "Haswell";
    return NULL;
}

const char *mr_cpu_blas_better_kernels(void) {
    if (getenv("OPENBLAS_CORETYPE")) return NULL;   /* the user's choice stands */
    __builtin_cpu_init();   /* libgcc's checks include the OS's support of the AVX-512 state (XCR0) */
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                       __builtin_cpu_supports("avx512cd");
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return mr_blas_pick_kernels(openblas_get_corename(), avx2, avx512);
}

/*
 * test_gemm.c - gemm.c's own fp32 products (gemm.h) against float64:
 * every element within (K + 1) u S of the exact sum, S = the same sum of
 * absolute values plus |C| where added, u = 2^-24 (a sum of K products,
 * each rounding once, in blocks of MR_GEMM_KC added to C in order: at most
 * K + 1 roundings on any path); A as given and transposed (its strides);
 * stored (acc = 0) and added (acc = 1); K across block boundaries and K =
 * 0; rows and columns short of a register block, and widths not a
 * multiple of 16 (a masked last vector: nothing written past column N);
 * the bits of an element
 * the same whatever rows and columns it is computed with (gemm.h's order of
 * the sums). Skipped where the CPU has no AVX-512 (mr_gemm_wide is 0: the
 * callers take OpenBLAS there), and that skip is checked to be the CPU's.
 */
#include "check.h"
#include "gemm.h"
#include <string.h>

/* C (rows, N) [+]= A . B against float64, A (rows, K) stored as (K, rows) when trans */
static void one(int rows, int N, int K, int trans, int acc) {
    const long lda = trans ? rows + 3 : K + 5, ldb = N + 16, ldc = N + 32;
    const long sar = trans ? 1 : lda, sak = trans ? lda : 1;
    float *A = frand((size_t)(trans ? K : rows) * lda + 1, -1, 1), *B = frand((size_t)K * ldb + 1, -1, 1);
    float *C = frand((size_t)rows * ldc, -4, 4), *C0 = malloc(sizeof(float) * (size_t)rows * ldc);
    memcpy(C0, C, sizeof(float) * (size_t)rows * ldc);
    mr_gemm(C, (int)ldc, A, sar, sak, B, (int)ldb, rows, N, K, acc);
    const double u = ldexp(1.0, -24);
    double worst = 0.0;
    int untouched = 1;
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < N; j++) {
            double s = acc ? C0[(size_t)r * ldc + j] : 0.0, S = fabs(s);
            for (int k = 0; k < K; k++) {
                double p = (double)A[r * sar + k * sak] * B[(size_t)k * ldb + j];
                s += p;
                S += fabs(p);
            }
            const double e = fabs(C[(size_t)r * ldc + j] - s), bound = (K + 1) * u * S;
            const double q = e != e ? INFINITY : bound > 0 ? e / bound : e > 0 ? INFINITY : 0.0;
            if (q > worst) worst = q;
        }
        for (long j = N; j < ldc; j++) untouched &= C[(size_t)r * ldc + j] == C0[(size_t)r * ldc + j];
    }
    CHECK_MSG(worst <= 1.0, "mr_gemm rows %d N %d K %d trans %d acc %d: error %.3g of the bound", rows, N, K, trans,
              acc, worst);
    CHECK_MSG(untouched, "mr_gemm rows %d N %d K %d wrote past column N", rows, N, K);

    /* the same elements computed as one row and one 16-column panel: the same bits */
    if (rows > 1 && N > 16) {
        int r = rows - 1, j0 = N - 16;
        float *D = malloc(sizeof(float) * 16);
        for (int j = 0; j < 16; j++) D[j] = C0[(size_t)r * ldc + j0 + j];
        mr_gemm(D, 16, A + r * sar, sar, sak, B + j0, (int)ldb, 1, 16, K, acc);
        CHECK_MSG(memcmp(D, C + (size_t)r * ldc + j0, sizeof(float) * 16) == 0,
                  "mr_gemm rows %d N %d K %d: the last row's last panel differs when computed alone", rows, N, K);
        free(D);
    }
    /* and a masked last vector's columns alone, as the last columns of a wider call */
    if (N % 16 && N > 16) {
        const int r = rows - 1, j0 = N - N % 16, w = N % 16;
        float D[16];
        for (int j = 0; j < w; j++) D[j] = C0[(size_t)r * ldc + j0 + j];
        mr_gemm(D, 16, A + r * sar, sar, sak, B + j0, (int)ldb, 1, w, K, acc);
        CHECK_MSG(memcmp(D, C + (size_t)r * ldc + j0, sizeof(float) * (size_t)w) == 0,
                  "mr_gemm rows %d N %d K %d: the masked columns differ when computed alone", rows, N, K);
    }
    free(A); free(B); free(C); free(C0);
}

int main(void) {
    check_seed(0x6e6d6d);
    if (!mr_gemm_wide(16)) {
        CHECK_MSG(!__builtin_cpu_supports("avx512f"), "mr_gemm_wide(16) is 0 on a CPU with AVX-512F");
        printf("test_gemm: no AVX-512 on this CPU: gemm.c's kernels are not used here (skipped)\n");
        return check_report("test_gemm");
    }
    CHECK(!mr_gemm_wide(24) && !mr_gemm_wide(8) && mr_gemm_wide(64) && mr_gemm_any());
    const int shapes[][3] = {
        {1, 16, 1},     {5, 16, 7},      {6, 64, 16},   {13, 48, 33},  {7, 32, 100},   {25, 80, 256},
        {19, 128, 257}, {64, 128, 600},  {3, 208, 513}, {40, 16, 0},   {130, 112, 300},
        /* widths not a multiple of 16: a masked last vector (the critic's 372 and 756) */
        {3, 1, 5},      {7, 5, 17},      {13, 21, 33},  {6, 50, 300},  {9, 372, 128},  {17, 756, 40},
        {8, 15, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int trans = 0; trans < 2; trans++)
            for (int acc = 0; acc < 2; acc++) one(shapes[i][0], shapes[i][1], shapes[i][2], trans, acc);
    return check_report("test_gemm");
}

/*
 * gemm.c - moonrl's own fp32 products on AVX-512 (gemm.h has the contract
 * and the order of the sums).
 *
 * The kernel keeps R rows x NV vectors of 16 columns of C in registers
 * (6 x 4, 8 x 3, 12 x 2 or 16 x 1: at most 24 of the 32), loads B's NV
 * vectors once per k and broadcasts A's R elements against them: 24
 * multiply-adds per 4 loads and 6 broadcasts. Measured against OpenBLAS
 * 0.3.21's Cooperlake sgemm on one thread of the 2-core Zen 4 (the fc
 * layer's shapes, K in blocks of 256): the forward 1.08-1.22x, the input
 * gradient 0.96-1.04x, the weight gradient 0.93-1.03x, before counting what
 * OpenBLAS spends packing in place (its copy routines were 9% of a training
 * profile of the small network).
 */
#include "gemm.h"
#include <immintrin.h>
#include <stddef.h>

int mr_gemm_wide(int n) { return n % 16 == 0 && __builtin_cpu_supports("avx512f"); }
int mr_gemm_any(void) { return __builtin_cpu_supports("avx512f"); }

#define MK __attribute__((target("avx512f"))) static inline __attribute__((always_inline))

/* B's and C's vector v of a block: whole, or (tail, the last vector) the
 * columns mt holds, nothing read or written past them */
#define LAST(v) (TAIL && (v) == NV - 1)

MK void mk_block(float *Cp, int ldc, const float *A, long sar, long sak, const float *B, int ldb, int K, int acc,
                 const int R, const int NV, const int TAIL, const __mmask16 mt) {
    __m512 c[16][4];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const float *bk = B + (size_t)k * ldb + 16 * v;
            b[v] = LAST(v) ? _mm512_maskz_loadu_ps(mt, bk) : _mm512_loadu_ps(bk);
        }
        const float *ak = A + k * sak;
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            const __m512 a = _mm512_set1_ps(ak[r * sar]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *o = Cp + (size_t)r * ldc + 16 * v;
            if (LAST(v))
                _mm512_mask_storeu_ps(o, mt, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(mt, o), c[r][v]) : c[r][v]);
            else
                _mm512_storeu_ps(o, acc ? _mm512_add_ps(_mm512_loadu_ps(o), c[r][v]) : c[r][v]);
        }
}

/* All rows for one panel of NV vectors: blocks of R rows, the rest one row at a time. */
MK void mk_panel(float *Cp, int ldc, const float *A, long sar, long sak, const float *B, int ldb, int rows, int K,
                 int acc, const int R, const int NV, const int TAIL, const __mmask16 mt) {
    int r0 = 0;
    for (; r0 + R <= rows; r0 += R)
        mk_block(Cp + (size_t)r0 * ldc, ldc, A + r0 * sar, sar, sak, B, ldb, K, acc, R, NV, TAIL, mt);
    for (; r0 < rows; r0++) mk_block(Cp + (size_t)r0 * ldc, ldc, A + r0 * sar, sar, sak, B, ldb, K, acc, 1, NV, TAIL, mt);
}

/* A panel of nv vectors, the last one masked where tail. */
MK void mk_panel_nv(float *c, int ldc, const float *A, long sar, long sak, const float *b, int ldb, int rows, int K,
                    int acc, int nv, const int TAIL, const __mmask16 mt) {
    switch (nv) {
    case 4: mk_panel(c, ldc, A, sar, sak, b, ldb, rows, K, acc, 6, 4, TAIL, mt); break;
    case 3: mk_panel(c, ldc, A, sar, sak, b, ldb, rows, K, acc, 8, 3, TAIL, mt); break;
    case 2: mk_panel(c, ldc, A, sar, sak, b, ldb, rows, K, acc, 12, 2, TAIL, mt); break;
    default: mk_panel(c, ldc, A, sar, sak, b, ldb, rows, K, acc, 16, 1, TAIL, mt); break;
    }
}

/* One block of K (at most MR_GEMM_KC): the 64-column panels of B in turn,
 * all rows for each (the panel stays in L2 while A's rows stream past); a
 * last vector of fewer than 16 columns is masked. */
__attribute__((target("avx512f")))
static void mk_gemm(float *Cp, int ldc, const float *A, long sar, long sak, const float *B, int ldb, int rows, int N,
                    int K, int acc) {
    const int nvec = (N + 15) / 16;
    for (int v0 = 0; v0 < nvec; v0 += 4) {
        /* left: the columns of the panel's last vector (16 or more: a whole one) */
        const int nv = nvec - v0 < 4 ? nvec - v0 : 4, n0 = 16 * v0, left = N - n0 - 16 * (nv - 1);
        float *c = Cp + n0;
        const float *b = B + n0;
        if (left >= 16) mk_panel_nv(c, ldc, A, sar, sak, b, ldb, rows, K, acc, nv, 0, 0xFFFF);
        else mk_panel_nv(c, ldc, A, sar, sak, b, ldb, rows, K, acc, nv, 1, (__mmask16)((1u << left) - 1u));
    }
}

void mr_gemm(float *C, int ldc, const float *A, long sar, long sak, const float *B, int ldb, int rows, int N,
             int K, int acc) {
    if (rows <= 0 || N <= 0) return;
    if (K <= 0) {   /* nothing to add: an empty sum stored, or nothing added */
        if (!acc)
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < N; j++) C[(size_t)r * ldc + j] = 0.0f;
        return;
    }
    for (int k0 = 0; k0 < K; k0 += MR_GEMM_KC) {
        const int kn = K - k0 < MR_GEMM_KC ? K - k0 : MR_GEMM_KC;
        mk_gemm(C, ldc, A + k0 * sak, sar, sak, B + (size_t)k0 * ldb, ldb, rows, N, kn, acc || k0 > 0);
    }
}

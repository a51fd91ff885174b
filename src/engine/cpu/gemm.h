/*
 * gemm.h - moonrl's own fp32 matrix products on AVX-512: register-blocked
 * kernels that read both operands where they lie (strided A, row-major B),
 * nothing packed, for the products where OpenBLAS spends as long packing as
 * multiplying: Winograd's transformed-domain products (K = 16..128,
 * conv_winograd.c) and the fc layer's three products (nn.c, with fc.w
 * transposed once per pass).
 *
 *   C (rows, N) [+]= A (rows, K) . B (K, N)
 *
 * A's element (r, k) at A[r * sar + k * sak] (so A or its transpose, any
 * row stride), B row-major (ldb), C row-major (ldc). Any N >= 1 on a CPU
 * with AVX-512F (mr_gemm_any): a last vector of N % 16 columns is masked,
 * nothing read or written past column N. mr_gemm_wide(N) says N is also a
 * multiple of 16 (no masked vector: what Winograd's 16-lane transforms and
 * fc's transposed forward need).
 *
 * Order of the sums (what the bits depend on): K is cut into blocks of
 * MR_GEMM_KC from k = 0; within a block each element is summed over k in
 * order from zero, and the block's sum is stored into C (acc = 0, first
 * block) or added to it (acc = 1, or any later block). Nothing else enters:
 * an element's bits depend on its row of A, its column of B and K, not on
 * rows, N, or which rows and columns a caller hands to which thread, so any
 * split of C into blocks gives the same bits.
 */
#ifndef MR_CPU_GEMM_H
#define MR_CPU_GEMM_H

#define MR_GEMM_KC 256   /* k per block: a 64-column panel of B (64 KiB) stays in L2 */

/* this CPU has AVX-512F and n is a multiple of 16 */
int mr_gemm_wide(int n);
/* this CPU has AVX-512F: mr_gemm takes any N */
int mr_gemm_any(void);

void mr_gemm(float *C, int ldc, const float *A, long sar, long sak, const float *B, int ldb, int rows, int N,
             int K, int acc);

#endif

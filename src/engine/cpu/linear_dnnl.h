/*
 * linear_dnnl.h - the fully connected layers' products in bf16 through
 * oneDNN's matmul (libdnnl, C API): the bf16 counterpart of nn.c's
 * mr_linear_* (fp32, OpenBLAS), used by policy.c for fc when the policy runs
 * in bf16 (mr_policy.bf16).
 *
 * Operands bf16 (uint16_t, round to nearest even from fp32: mr_bf16_from_f32),
 * results fp32, accumulation fp32 inside oneDNN; bias, ReLU and the bias
 * gradient stay fp32. Measured on the 2-core Zen 4 (bench_linear_onednn,
 * one thread): 190-230 GFLOP/s a core against OpenBLAS sgemm's ~100.
 *
 * Bits independent of the thread count, as nn.c's sgemm: each product's
 * output is cut into blocks by nn.c's rule (mr_nn_gemm_plan: the shape
 * alone decides), every block is one single-threaded oneDNN matmul over the
 * full K, and the blocks run as an OpenMP loop. oneDNN picks its kernel per
 * block shape and strides (a block is a slice of the full matrices: gemm:jit
 * or brg, both AVX512-BF16); a reference kernel (ref:any) is refused.
 *
 * Primitives are created on a shape's first use and cached (a product has at
 * most two block shapes: full and tail), so the first update creates them
 * and later ones only look them up; their scratchpads (user mode, per thread)
 * are heap buffers grown then. None of it comes from the arena: the operand
 * copies (bf16 weights, activations, gradients) do, and are the caller's.
 */
#ifndef MR_LINEAR_DNNL_H
#define MR_LINEAR_DNNL_H
#include <stddef.h>
#include <stdint.h>
#include "bf16.h"   /* mr_bf16_from_f32 */

typedef struct mr_linear_dnnl mr_linear_dnnl;

/* For nthreads threads at most. NULL when oneDNN has no bf16 matmul on this
 * CPU (no AVX512-BF16 / AMX) or cannot start. */
mr_linear_dnnl *mr_linear_dnnl_create(int nthreads);
void mr_linear_dnnl_free(mr_linear_dnnl *d);

/* out (B,OC) = inp16 (B,C) . w16^T + b, then ReLU when relu; w16 (OC,C). */
int mr_linear_bf16_forward(mr_linear_dnnl *d, float *out, const uint16_t *inp16, const uint16_t *w16,
                           const float *b, int B, int C, int OC, int relu);
/* dinp (B,C) += dout16 (B,OC) . w16 (OC,C) */
int mr_linear_bf16_dinp(mr_linear_dnnl *d, float *dinp, const uint16_t *dout16, const uint16_t *w16,
                        int B, int C, int OC);
/* dw (OC,C) += dout16^T . inp16 (B,C), dout16 (B,OC) */
int mr_linear_bf16_dw(mr_linear_dnnl *d, float *dw, const uint16_t *dout16, const uint16_t *inp16,
                      int B, int C, int OC);
/* All three return 0, or -1 when oneDNN refused a block (nothing sensible
 * was computed for it; the caller reports, tests check 0). */

/* The implementation oneDNN chose for the most recent new block shape, e.g.
 * "gemm:jit" (for the engine's description and the tests). */
const char *mr_linear_dnnl_impl(const mr_linear_dnnl *d);

#endif

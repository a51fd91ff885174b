/*
 * gemm_lt.h - cuBLASLt for cuda.epilogue = "fused" (kernels/gemm_lt.cu): the
 * library loaded at run time, one handle with a cache of the algorithms
 * its heuristics chose per shape, and one product with a fused epilogue
 * (policy_layers.h's mr_pc_epi, in the row-major terms of mr_pc_gemm).
 * Used by policy.cu only.
 *
 * cuBLASLt is not linked, as cuBLAS and cuDNN are not (policy.cu): the first
 * use dlopens libcublasLt.so.<major compiled against> from the loader's
 * path, then the toolkit's lib directory.
 *
 * The product is cuBLAS's (CUBLAS_COMPUTE_32F, fp32 scale, no TF32), in
 * column-major terms exactly as gpu_gemm maps it (mr_pc_gemm_cm): the
 * row-major C (M,N) is the column-major C^T (N,M), so a row-major column's
 * bias is cuBLASLt's bias over D's rows, a row-major column sum (DRELU_BGRAD)
 * its reduction over D's columns, and the bias gradient of the row-major A
 * operand of a weight gradient (BGRAD_A) its BGRADB. Biases and bias
 * gradients are fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) whatever the
 * storage type; a bias gradient in the storage type is tried where fp32 is
 * not accepted (policy.cu adds it into the fp32 gradient). The ReLU bits are
 * cuBLASLt's (its layout: one bit per element, aux_ld bits per row-major
 * row, aux_ld a multiple of 128); nothing else reads them.
 */
#ifndef MR_GEMM_LT_H
#define MR_GEMM_LT_H
#include <stddef.h>
#include "moonrl.h"
#include "policy_layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when cuBLASLt is loaded (loads it on the first call); else 0 and why. */
int mr_lt_available(const char **why);
/* "cuBLASLt 130100 (libcublasLt.so.13)" or "not loaded: ..." */
const char *mr_lt_describe(void);

typedef struct mr_lt mr_lt;   /* a handle and its algorithm cache */

mr_status mr_lt_create(mr_lt **lt, mr_error *err);
void mr_lt_destroy(mr_lt *lt);

/* One product C = epilogue(op(A) op(B) + beta C) of g with e (mr_pc_epi;
 * MR_PCE_DRELU_BGRAD without db is a plain DRELU). vec: the bias the
 * epilogue adds (e->bias or a copy of it) or the vector its bias gradient is
 * WRITTEN to (N, resp. M, elements; e->db is the caller's to add into), of
 * type bias_dt (MR_FP32, or g's c_dt). ws: the cuBLAS workspace (the same
 * stream). *done = 0 when the
 * heuristics have no algorithm: nothing was enqueued. The choice is cached
 * per shape, types, epilogue, leading dimensions and pointer alignments, so
 * a repeat asks no heuristics. */
mr_status mr_lt_matmul(mr_lt *lt, const mr_pc_gemm *g, const mr_pc_epi *e, const void *vec, int bias_dt, void *ws,
                       size_t ws_bytes, void *stream, int *done, mr_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MR_GEMM_LT_H */

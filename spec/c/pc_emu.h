/*
 * pc_emu.h - an emulator of the CUDA policy's three GPU operations
 * (kernels/policy_math.h's mr_pc_ops: GEMM, elementwise job, copy) on the
 * CPU, shared by the tests that run the policy schedule without a GPU
 * (the test_cuda_policy_*.c programs, through policy_check.h).
 *
 * GEMM = a column-major cblas_sgemm given exactly the arguments cuBLAS gets
 * (mr_pc_gemm_cm), with cuBLAS's validity rules checked; in bf16 / fp16 the
 * operands are widened exactly and the sum rounded once to C's type, as
 * CUBLAS_COMPUTE_32F does. Jobs = a loop over the very MR_HD function the
 * kernels run (mr_pc_elem). Copy = memmove. Faults can be injected into one
 * job or GEMM (fault_job / fault_gemm, fault_mode) to show that a comparison
 * catches a wrong kernel.
 */
#ifndef MR_PC_EMU_H
#define MR_PC_EMU_H
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include "policy_math.h"

typedef struct emu {
    long jobs, gemms;           /* operations so far */
    long fault_job, fault_gemm; /* the one to break, -1 none */
    int fault_mode;             /* jobs: 0 skipped, 1 every 7th element (i % 7 == 3) left out;
                                 * GEMMs: 2 half the sum's terms dropped, 3 beta flipped (0 <-> 1) */
    unsigned *job_n;            /* if set: records each job's element count and kind */
    int *job_kind;
    long job_n_cap;
    int bad_args;               /* a GEMM cuBLAS would refuse */
    long epi_calls[MR_PCE_KINDS];   /* emu_gemm_ep's products per epilogue kind */
    int epi_fault;              /* emu_gemm_ep: 1 DRELU ignores the bits; 2 a bias gradient overwrites db;
                                 * 3 no algorithm for RELU_AUX_BIAS (done = 0) */
} emu;

/* Every element of a job, with its kind and type as constants so that
 * mr_pc_elem is specialised for each pair (the emulation's hot loop: a loop
 * deciding both per element is about 3x slower). The same elements, in the
 * same order, as the generic loop. */
#define EMU_JOB_LOOP(K, DT) for (unsigned i = 0; i < j->n; i++) mr_pc_elem(j, i, (K), (DT))
#define EMU_JOB_KIND(K)                                        \
    case K:                                                    \
        if (j->dt == MR_FP32) EMU_JOB_LOOP(K, MR_FP32);        \
        else if (j->dt == MR_BF16) EMU_JOB_LOOP(K, MR_BF16);   \
        else EMU_JOB_LOOP(K, MR_FP16);                         \
        break
#if defined(__GNUC__)
__attribute__((flatten))
#endif
static void emu_job_all(const mr_pc_job *j) {
    switch (j->kind) {
    EMU_JOB_KIND(MR_PCJ_IM2COL);
    EMU_JOB_KIND(MR_PCJ_IM2COL_CODES);
    EMU_JOB_KIND(MR_PCJ_BIAS_ACT);
    EMU_JOB_KIND(MR_PCJ_CIN_FILL);
    EMU_JOB_KIND(MR_PCJ_RELU_BACK);
    EMU_JOB_KIND(MR_PCJ_COL2IM);
    EMU_JOB_KIND(MR_PCJ_CAST);
    EMU_JOB_KIND(MR_PCJ_BGRAD_PART);
    EMU_JOB_KIND(MR_PCJ_BGRAD_PART_D);
    EMU_JOB_KIND(MR_PCJ_BGRAD_SUM);
    EMU_JOB_KIND(MR_PCJ_ACC_F32);
    EMU_JOB_KIND(MR_PCJ_IM2COL_IMAGE);
    EMU_JOB_KIND(MR_PCJ_CIN_IMAGE);
    default: EMU_JOB_LOOP(j->kind, j->dt); break;
    }
}
#undef EMU_JOB_KIND
#undef EMU_JOB_LOOP

static mr_status emu_job(void *ctx, const mr_pc_job *j, mr_error *err) {
    emu *e = ctx;
    const long k = e->jobs++;
    if (e->job_n && k < e->job_n_cap) {
        e->job_n[k] = j->n;
        e->job_kind[k] = j->kind;
    }
    (void)err;
    if (k != e->fault_job) {
        emu_job_all(j);
        return MR_OK;
    }
    if (e->fault_mode == 0) return MR_OK;
    for (unsigned i = 0; i < j->n; i++)
        if (i % 7 != 3) mr_pc_elem(j, i, j->kind, j->dt);
    return MR_OK;
}

/* A T region of a column-major matrix as fp32 (exact). */
static float *region_f32(const void *p, int rows, int cols, int ld, int dt) {
    const size_t len = (size_t)(cols - 1) * ld + rows;
    float *o = malloc(sizeof(float) * len);
    for (size_t i = 0; i < len; i++) o[i] = mr_pc_ld(p, i, dt);
    return o;
}

static mr_status emu_gemm(void *ctx, const mr_pc_gemm *g, mr_error *err) {
    emu *e = ctx;
    const long k = e->gemms++;
    mr_pc_cm c;
    mr_pc_gemm_cm(g, &c);
    /* cuBLAS's rules for these arguments (it returns CUBLAS_STATUS_INVALID_VALUE otherwise) */
    const int ra = c.transa ? c.k : c.m, ca = c.transa ? c.m : c.k;
    const int rb = c.transb ? c.n : c.k, cb = c.transb ? c.k : c.n;
    if (c.m < 0 || c.n < 0 || c.k < 0 || c.lda < (ra > 1 ? ra : 1) || c.ldb < (rb > 1 ? rb : 1) ||
        c.ldc < (c.m > 1 ? c.m : 1)) {
        e->bad_args++;
        return mr_fail(err, MR_ERR_ARG, "emulated cuBLAS: invalid GEMM %s: m %d n %d k %d lda %d ldb %d ldc %d",
                       g->what, c.m, c.n, c.k, c.lda, c.ldb, c.ldc);
    }
    const int kk = k == e->fault_gemm && e->fault_mode == 2 ? c.k / 2 : c.k;
    const float beta = k == e->fault_gemm && e->fault_mode == 3 ? 1.0f - g->beta : g->beta;
    const enum CBLAS_TRANSPOSE ta = c.transa ? CblasTrans : CblasNoTrans, tb = c.transb ? CblasTrans : CblasNoTrans;
    if (g->ab_dt == MR_FP32 && g->c_dt == MR_FP32) {
        cblas_sgemm(CblasColMajor, ta, tb, c.m, c.n, kk, 1.0f, c.A, c.lda, c.B, c.ldb, beta, c.C, c.ldc);
        return MR_OK;
    }
    /* reduced precision: exact fp32 copies of the operands, fp32 products and
     * sums (cuBLAS's CUBLAS_COMPUTE_32F), one rounding to C's type */
    float *A = region_f32(c.A, ra, ca, c.lda, g->ab_dt), *B = region_f32(c.B, rb, cb, c.ldb, g->ab_dt);
    float *C = region_f32(c.C, c.m, c.n, c.ldc, g->c_dt);
    cblas_sgemm(CblasColMajor, ta, tb, c.m, c.n, kk, 1.0f, A, c.lda, B, c.ldb, beta, C, c.ldc);
    for (int j = 0; j < c.n; j++)
        for (int i = 0; i < c.m; i++) {
            const size_t x = (size_t)j * c.ldc + i;
            mr_pc_st(c.C, x, g->c_dt, C[x]);
        }
    free(A);
    free(B);
    free(C);
    return MR_OK;
}

static inline int emu_bit_get(const void *bits, long long i) {
    return ((const unsigned char *)bits)[i >> 3] >> (i & 7) & 1;
}
static inline void emu_bit_set(void *bits, long long i, int v) {
    unsigned char *b = (unsigned char *)bits + (i >> 3);
    *b = (unsigned char)(v ? *b | 1u << (i & 7) : *b & ~(1u << (i & 7)));
}

/* cuda.epilogue = fused (mr_pc_ops.gemm_ep, policy_layers.h's mr_pc_epi),
 * independently of the job kernels: the row-major product and its epilogue
 * in double from the operands as stored (T widened exactly), one rounding
 * to C's type; the ReLU bits in this emulator's own layout (bit i of a row
 * at byte i / 8, bit i % 8); a bias gradient summed in double and added. */
static inline mr_status emu_gemm_ep(void *ctx, const mr_pc_gemm *g, const mr_pc_epi *e, int *done, mr_error *err) {
    emu *em = ctx;
    (void)err;
    *done = 0;
    const int epi_fault = em->epi_fault;
    if (e->kind == MR_PCE_RELU_AUX_BIAS && epi_fault == 3) return MR_OK;
    if (e->kind > 0 && e->kind < MR_PCE_KINDS) em->epi_calls[e->kind]++;
    const int M = g->M, N = g->N, K = g->K;
    double *acc = calloc((size_t)M * N, sizeof(double));
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const double a = mr_pc_ld(g->A, g->ta ? (size_t)k * g->lda + i : (size_t)i * g->lda + k, g->ab_dt);
            if (a == 0) continue;
            for (int j = 0; j < N; j++)
                acc[(size_t)i * N + j] +=
                    a * mr_pc_ld(g->B, g->tb ? (size_t)j * g->ldb + k : (size_t)k * g->ldb + j, g->ab_dt);
        }
    double *colsum = calloc((size_t)(M > N ? M : N), sizeof(double));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const size_t c = (size_t)i * g->ldc + j;
            double v = acc[(size_t)i * N + j];
            if (g->beta != 0.0f) v += (double)g->beta * mr_pc_ld(g->C, c, g->c_dt);
            switch (e->kind) {
            case MR_PCE_BIAS: v += e->bias[j]; break;
            case MR_PCE_RELU_BIAS: v += e->bias[j]; v = v > 0 ? v : 0; break;
            case MR_PCE_RELU_AUX_BIAS:
                v += e->bias[j];
                emu_bit_set(e->aux, (long long)i * e->aux_ld + j, v > 0);
                v = v > 0 ? v : 0;
                break;
            case MR_PCE_DRELU_BGRAD:
                if (!emu_bit_get(e->aux, (long long)i * e->aux_ld + j) && epi_fault != 1) v = 0;
                break;
            default: break;
            }
            mr_pc_st(g->C, c, g->c_dt, (float)v);
            if (e->kind == MR_PCE_DRELU_BGRAD) colsum[j] += v;
        }
    if (e->kind == MR_PCE_BGRAD_A)   /* db[i] = sum over k of op(A)[i][k] */
        for (int i = 0; i < M; i++)
            for (int k = 0; k < K; k++)
                colsum[i] += mr_pc_ld(g->A, g->ta ? (size_t)k * g->lda + i : (size_t)i * g->lda + k, g->ab_dt);
    if (e->db) {
        const int n = e->kind == MR_PCE_BGRAD_A ? M : N;
        for (int i = 0; i < n; i++) e->db[i] = epi_fault == 2 ? (float)colsum[i] : e->db[i] + (float)colsum[i];
    }
    free(acc);
    free(colsum);
    *done = 1;
    return MR_OK;
}

static mr_status emu_copy(void *ctx, void *dst, const void *src, size_t bytes, mr_error *err) {
    (void)ctx;
    (void)err;
    memmove(dst, src, bytes);
    return MR_OK;
}

static void emu_ops(emu *e, mr_pc_ops *o) {
    memset(e, 0, sizeof *e);
    memset(o, 0, sizeof *o);   /* conv: NULL, every layer im2col (a test sets its own) */
    e->fault_job = e->fault_gemm = -1;
    o->ctx = e;
    o->gemm = emu_gemm;
    o->job = emu_job;
    o->copy = emu_copy;
}

#endif /* MR_PC_EMU_H */

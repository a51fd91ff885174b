/*
 * policy.cu - the actor-critic on the GPU: the launches behind
 * policy_math.h's schedule (see policy_cuda.h for the API and
 * policy_math.h for the network, tensors and workspace).
 *
 * This file is only the three operations of the schedule's table:
 *   gemm   one cublasGemmEx, row-major mapped to column-major by
 *          mr_pc_gemm_cm; CUBLAS_COMPUTE_32F and the default math mode,
 *          so fp32 products never use TF32; bf16 / fp16 operands use the
 *          tensor cores and accumulate in fp32;
 *   job    one grid-stride kernel per (job kind, storage type) running
 *          mr_pc_elem for each element (a float image observation's two,
 *          MR_PCJ_IM2COL_IMAGE and MR_PCJ_CIN_IMAGE, too); kind and type are template
 *          constants, so each kernel is that case's straight-line code;
 *          im2col and col2im move 16-byte vectors of channels where the
 *          channel count allows (im2col_vec_kernel, col2im_vec_kernel);
 *   copy   cudaMemcpyAsync device to device;
 * plus creation (plan, cuBLAS handle, memory from the devmem manager).
 *
 * and, optional, the conv operation: cuDNN (conv_cudnn.h) for the trunk's
 * layers 1.. where cuda.conv chose it (mr_pc_plan_dnn).
 *
 * and, optional, the fused product (cuda.epilogue = fused): cuBLASLt
 * (gemm_lt.h) with the bias, ReLU, ReLU mask or bias gradient in the
 * product's epilogue, where its heuristics have an algorithm; a bias
 * gradient is formed in the plan's scratch and added into the fp32 grads.
 *
 * What is deliberately not here: a hand-written GEMM or implicit-GEMM
 * convolution. im2col + cuBLAS is the simple reference GPU version; cuDNN,
 * cuBLASLt and the rest are optimisations measured against it.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "dynlib.h"   /* dlopen: the library loaded at run time */
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>

#include "conv_cudnn.h"
#include "cuda_check.h"
#include "gemm_lt.h"
#include "policy_cuda.h"

#define JOB_THREADS 256
#define JOB_MAX_BLOCKS 4096   /* grid-stride: enough to fill any current GPU */

/* ---------------------------------------------------------------- jobs */

template <int KIND, int DT>
__global__ void __launch_bounds__(JOB_THREADS) job_kernel(const __grid_constant__ mr_pc_job j) {
    const unsigned stride = gridDim.x * blockDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < j.n; i += stride) mr_pc_elem(&j, i, KIND, DT);
}

template <int KIND>
static void launch_kind(const mr_pc_job *j, cudaStream_t s) {
    const unsigned long long b = ((unsigned long long)j->n + JOB_THREADS - 1) / JOB_THREADS;
    const unsigned blocks = (unsigned)(b < JOB_MAX_BLOCKS ? b : JOB_MAX_BLOCKS);
    switch (j->dt) {
    case MR_FP32: job_kernel<KIND, MR_FP32><<<blocks, JOB_THREADS, 0, s>>>(*j); break;
    case MR_BF16: job_kernel<KIND, MR_BF16><<<blocks, JOB_THREADS, 0, s>>>(*j); break;
    default: job_kernel<KIND, MR_FP16><<<blocks, JOB_THREADS, 0, s>>>(*j); break;
    }
}

/* im2col and col2im on whole 16-byte vectors of channels (8 bf16 / fp16
 * values, 4 fp32): where C is a multiple of the vector and the buffers are
 * 16-byte aligned, one thread moves one vector, so the index arithmetic
 * (five divisions by run-time values) is done once per vector instead of
 * once per element and the loads and stores are 16 bytes wide. Measured on an
 * H100 (ncu, 2026-11-25, reference net, bf16, batch 24,576): the element
 * kernels were 58% of the update's GPU time (im2col 49%, col2im 9%).
 * Bit for bit the element kernels' results: im2col is a copy; col2im does
 * each element's float sums in the same order (mr_pc_elem's). */
template <int DT> struct vec_of { static constexpr unsigned n = DT == MR_FP32 ? 4u : 8u; };

template <int DT>
__global__ void __launch_bounds__(JOB_THREADS) im2col_vec_kernel(const __grid_constant__ mr_pc_job j) {
    constexpr unsigned V = vec_of<DT>::n;
    const unsigned CV = (unsigned)j.C / V, KV = 9u * CV, W = (unsigned)j.W, HW = (unsigned)j.H * W;
    const unsigned nv = j.n / V, stride = gridDim.x * blockDim.x;
    const uint4 *x = (const uint4 *)j.x;
    uint4 *y = (uint4 *)j.y;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        const unsigned r = i / KV, t = i - r * KV, tap = t / CV, cv = t - tap * CV;
        const unsigned b = r / HW, q = r - b * HW, py = q / W, px = q - py * W;
        const int yy = (int)py + (int)(tap / 3u) - 1, xx = (int)px + (int)(tap % 3u) - 1;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (yy >= 0 && yy < j.H && xx >= 0 && xx < j.W)
            v = x[((size_t)b * HW + (unsigned)yy * W + (unsigned)xx) * CV + cv];
        y[i] = v;
    }
}

template <int DT>
__global__ void __launch_bounds__(JOB_THREADS) col2im_vec_kernel(const __grid_constant__ mr_pc_job j) {
    constexpr unsigned V = vec_of<DT>::n;
    const unsigned CV = (unsigned)j.C / V, W = (unsigned)j.W, HW = (unsigned)j.H * W;
    const unsigned nv = j.n / V, stride = gridDim.x * blockDim.x;
    const uint4 *x = (const uint4 *)j.x, *m = (const uint4 *)j.m;
    uint4 *y = (uint4 *)j.y;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += stride) {
        const unsigned pix = i / CV, cv = i - pix * CV, b = pix / HW, q = pix - b * HW, py = q / W, px = q - py * W;
        float s[V];
        if (m) {
#pragma unroll
            for (unsigned k = 0; k < V; k++) s[k] = 0.0f;
        } else {
            const uint4 u = y[i];
#pragma unroll
            for (unsigned k = 0; k < V; k++) s[k] = mr_pc_ld(&u, k, DT);
        }
        for (int ky = 0; ky < 3; ky++) {
            const int oy = (int)py - ky + 1;
            if (oy < 0 || oy >= j.H) continue;
            for (int kx = 0; kx < 3; kx++) {
                const int ox = (int)px - kx + 1;
                if (ox < 0 || ox >= j.W) continue;
                const uint4 u = x[(((size_t)b * HW + (unsigned)oy * W + (unsigned)ox) * 9u + (unsigned)(ky * 3 + kx)) * CV + cv];
#pragma unroll
                for (unsigned k = 0; k < V; k++) s[k] += mr_pc_ld(&u, k, DT);
            }
        }
        if (m) {
            const uint4 u = m[i];
#pragma unroll
            for (unsigned k = 0; k < V; k++)
                if (!(mr_pc_ld(&u, k, DT) > 0.0f)) s[k] = 0.0f;
        }
        uint4 o;
#pragma unroll
        for (unsigned k = 0; k < V; k++) mr_pc_st(&o, k, DT, s[k]);
        y[i] = o;
    }
}

/* The vector kernels take the job where its channels and buffers allow. */
static bool launch_vec(const mr_pc_job *j, cudaStream_t s) {
    const unsigned V = j->dt == MR_FP32 ? 4u : 8u;
    const uintptr_t al = (uintptr_t)j->x | (uintptr_t)j->y | (uintptr_t)j->m;
    if (j->C <= 0 || (unsigned)j->C % V || j->n % V || (al & 15u)) return false;
    const unsigned long long b = ((unsigned long long)(j->n / V) + JOB_THREADS - 1) / JOB_THREADS;
    const unsigned blocks = (unsigned)(b < JOB_MAX_BLOCKS ? b : JOB_MAX_BLOCKS);
#define MR_VEC_LAUNCH(K)                                                                      \
    switch (j->dt) {                                                                          \
    case MR_FP32: K<MR_FP32><<<blocks, JOB_THREADS, 0, s>>>(*j); break;                       \
    case MR_BF16: K<MR_BF16><<<blocks, JOB_THREADS, 0, s>>>(*j); break;                       \
    default: K<MR_FP16><<<blocks, JOB_THREADS, 0, s>>>(*j); break;                            \
    }
    if (j->kind == MR_PCJ_IM2COL) MR_VEC_LAUNCH(im2col_vec_kernel)
    else MR_VEC_LAUNCH(col2im_vec_kernel)
#undef MR_VEC_LAUNCH
    return true;
}

static const char *job_name(int kind) {
    switch (kind) {
    case MR_PCJ_IM2COL: return "the im2col kernel";
    case MR_PCJ_IM2COL_CODES: return "the observation im2col kernel";
    case MR_PCJ_BIAS_ACT: return "the bias + ReLU kernel";
    case MR_PCJ_CIN_FILL: return "the critic-input kernel";
    case MR_PCJ_RELU_BACK: return "the ReLU backward kernel";
    case MR_PCJ_COL2IM: return "the col2im kernel";
    case MR_PCJ_CAST: return "the precision cast kernel";
    case MR_PCJ_BGRAD_PART: return "the bias-gradient partial-sum kernel";
    case MR_PCJ_BGRAD_PART_D: return "the bias-gradient second-level sum kernel";
    case MR_PCJ_BGRAD_SUM: return "the bias-gradient sum kernel";
    case MR_PCJ_TANH_BACK: return "the tanh backward kernel";
    case MR_PCJ_ROW_FILL: return "the log-std row kernel";
    case MR_PCJ_MLP_CIN: return "the MLP critic-input kernel";
    case MR_PCJ_ACC_F32: return "the weight-gradient accumulation kernel";
    case MR_PCJ_IM2COL_IMAGE: return "the float-image im2col kernel";
    case MR_PCJ_CIN_IMAGE: return "the float-image critic-input kernel";
    default: return "an unknown policy kernel";
    }
}

typedef struct gpu_ctx {
    cublasHandle_t h;
    cudaStream_t s;
    mr_dnn *dnn;               /* NULL: no conv operation */
    const int (*algo)[3];      /* per layer */
    void *dnn_ws, *dnn_dw;
    size_t dnn_ws_bytes;
    mr_lt *lt;                 /* NULL: no fused products */
    float *epi_scratch;        /* the bias gradients' scratch, epi_floats floats */
    size_t epi_floats;
    void *blas_ws;             /* the cuBLAS workspace, also cuBLASLt's (the same stream) */
    long *epi_counts;          /* [0] fused, [1] left to the separate path */
} gpu_ctx;

static mr_status gpu_job(void *ctx, const mr_pc_job *j, mr_error *err) {
    const cudaStream_t s = ((gpu_ctx *)ctx)->s;
    if (j->n == 0) return MR_OK;
    if (j->dt != MR_FP32 && j->dt != MR_BF16 && j->dt != MR_FP16)
        return mr_fail(err, MR_ERR_ARG, "%s: storage type %d", job_name(j->kind), j->dt);
    switch (j->kind) {
    case MR_PCJ_IM2COL: if (!launch_vec(j, s)) launch_kind<MR_PCJ_IM2COL>(j, s); break;
    case MR_PCJ_IM2COL_CODES: launch_kind<MR_PCJ_IM2COL_CODES>(j, s); break;
    case MR_PCJ_BIAS_ACT: launch_kind<MR_PCJ_BIAS_ACT>(j, s); break;
    case MR_PCJ_CIN_FILL: launch_kind<MR_PCJ_CIN_FILL>(j, s); break;
    case MR_PCJ_RELU_BACK: launch_kind<MR_PCJ_RELU_BACK>(j, s); break;
    case MR_PCJ_COL2IM: if (!launch_vec(j, s)) launch_kind<MR_PCJ_COL2IM>(j, s); break;
    case MR_PCJ_CAST: launch_kind<MR_PCJ_CAST>(j, s); break;
    case MR_PCJ_BGRAD_PART: launch_kind<MR_PCJ_BGRAD_PART>(j, s); break;
    case MR_PCJ_BGRAD_PART_D: launch_kind<MR_PCJ_BGRAD_PART_D>(j, s); break;
    case MR_PCJ_BGRAD_SUM: launch_kind<MR_PCJ_BGRAD_SUM>(j, s); break;
    case MR_PCJ_TANH_BACK: launch_kind<MR_PCJ_TANH_BACK>(j, s); break;
    case MR_PCJ_ROW_FILL: launch_kind<MR_PCJ_ROW_FILL>(j, s); break;
    case MR_PCJ_MLP_CIN: launch_kind<MR_PCJ_MLP_CIN>(j, s); break;
    case MR_PCJ_ACC_F32: launch_kind<MR_PCJ_ACC_F32>(j, s); break;
    case MR_PCJ_IM2COL_IMAGE: launch_kind<MR_PCJ_IM2COL_IMAGE>(j, s); break;
    case MR_PCJ_CIN_IMAGE: launch_kind<MR_PCJ_CIN_IMAGE>(j, s); break;
    default: return mr_fail(err, MR_ERR_ARG, "policy schedule: unknown job kind %d", j->kind);
    }
    MR_CUDA_LAUNCHED(job_name(j->kind), err);
    return MR_OK;
}

/* ---------------------------------------------------------------- GEMM */

/* ------------------------------------------------------------ cuBLAS
 * cuBLAS is loaded with dlopen when the first CUDA policy is created, not
 * linked (dynlib.h): libcublas and libcublasLt are ~700 MB of shared objects
 * whose loading cost every run of the CPU backend 0.3 s and 200 MB of
 * resident memory. */
#define MR_STR2(x) #x
#define MR_STR(x) MR_STR2(x)
#define MR_CUBLAS_SONAME "libcublas.so." MR_STR(CUBLAS_VER_MAJOR)

static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*set_pointer_mode)(cublasHandle_t, cublasPointerMode_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    const char *(*status_name)(cublasStatus_t);
    const char *(*status_string)(cublasStatus_t);
    int ok;
    char why[320];
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_load(void) {
    void *h = mr_dynlib_open(MR_CUBLAS_SONAME, "cuBLAS", blas.why, sizeof blas.why);
    static const char *const names[] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                                        "cublasSetWorkspace_v2", "cublasSetMathMode", "cublasSetPointerMode_v2",
                                        "cublasGemmEx", "cublasGetStatusName", "cublasGetStatusString"};
    void **const slots[] = {(void **)&blas.create, (void **)&blas.destroy, (void **)&blas.set_stream,
                            (void **)&blas.set_workspace, (void **)&blas.set_math_mode, (void **)&blas.set_pointer_mode,
                            (void **)&blas.gemm_ex, (void **)&blas.status_name, (void **)&blas.status_string};
    if (!h || !mr_dynlib_symbols(h, names, slots, (int)(sizeof names / sizeof *names), MR_CUBLAS_SONAME, "cuBLAS",
                                 blas.why, sizeof blas.why))
        return;
    blas.ok = 1;
}

static cudaDataType_t cuda_type(int dt) {
    return dt == MR_BF16 ? CUDA_R_16BF : dt == MR_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

static mr_status blas_status(cublasStatus_t s, const char *what, mr_error *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return MR_OK;
    return mr_fail(err, s == CUBLAS_STATUS_ALLOC_FAILED ? MR_ERR_NOMEM : MR_ERR_BACKEND, "cuBLAS error in %s: %s (%s)",
                   what, blas.status_name(s), blas.status_string(s));
}

static mr_status gpu_gemm(void *ctx, const mr_pc_gemm *g, mr_error *err) {
    mr_pc_cm c;
    mr_pc_gemm_cm(g, &c);
    const float alpha = 1.0f, beta = g->beta;
    const cublasStatus_t s =
        blas.gemm_ex(((gpu_ctx *)ctx)->h, c.transa ? CUBLAS_OP_T : CUBLAS_OP_N, c.transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                     c.m, c.n, c.k, &alpha, c.A, cuda_type(g->ab_dt), c.lda, c.B, cuda_type(g->ab_dt), c.ldb, &beta,
                     c.C, cuda_type(g->c_dt), c.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s == CUBLAS_STATUS_SUCCESS) return MR_OK;
    return mr_fail(err, s == CUBLAS_STATUS_ALLOC_FAILED ? MR_ERR_NOMEM : MR_ERR_BACKEND,
                   "cuBLAS error in the %s GEMM (column-major m %d n %d k %d, lda %d ldb %d ldc %d, types %d/%d): %s (%s)",
                   g->what ? g->what : "policy", c.m, c.n, c.k, c.lda, c.ldb, c.ldc, g->ab_dt, g->c_dt,
                   blas.status_name(s), blas.status_string(s));
}

/* A product with its epilogue through cuBLASLt (mr_pc_ops.gemm_ep). The
 * bias is the fp32 parameter where cuBLASLt takes an fp32 bias beside the
 * output, else a copy in the output's type (a cast job into the scratch);
 * a parameter not on a 16-byte boundary (the flat layout packs tensors) is
 * copied into the scratch first, as cuBLASLt's epilogues want aligned
 * vectors. A bias gradient goes to the scratch, fp32 where cuBLASLt takes
 * that, else in the output's type, then a job adds it into the fp32
 * gradient. */
static mr_status gpu_gemm_ep(void *vctx, const mr_pc_gemm *g, const mr_pc_epi *e, int *done, mr_error *err) {
    gpu_ctx *ctx = (gpu_ctx *)vctx;
    *done = 0;
    if (!ctx->lt) return MR_OK;
    const int fwd = e->kind == MR_PCE_BIAS || e->kind == MR_PCE_RELU_BIAS || e->kind == MR_PCE_RELU_AUX_BIAS;
    const int grad = e->kind == MR_PCE_BGRAD_A || (e->kind == MR_PCE_DRELU_BGRAD && e->db);
    const int n = e->kind == MR_PCE_BGRAD_A ? g->M : g->N;
    if ((grad || fwd) && (!ctx->epi_scratch || (size_t)n > ctx->epi_floats)) {
        if (ctx->epi_counts) ctx->epi_counts[1]++;
        return MR_OK;
    }
    int bias_dt = MR_FP32;
    const void *vec = fwd ? (const void *)e->bias : (const void *)ctx->epi_scratch;
    if (fwd && ((uintptr_t)e->bias & 15u)) {   /* an aligned copy */
        mr_pc_job j;
        mr_pc_job_init(&j, MR_PCJ_CAST, MR_FP32, n);
        j.f = e->bias;
        j.y = ctx->epi_scratch;
        MR_PC_TRY(gpu_job(ctx, &j, err));
        vec = ctx->epi_scratch;
    }
    MR_PC_TRY(mr_lt_matmul(ctx->lt, g, e, vec, bias_dt, ctx->blas_ws, MR_PC_BLAS_WS, ctx->s, done, err));
    if (!*done && (grad || fwd) && g->c_dt != MR_FP32) {   /* the vector in the output's type */
        bias_dt = g->c_dt;
        if (fwd) {
            mr_pc_job j;
            mr_pc_job_init(&j, MR_PCJ_CAST, bias_dt, n);
            j.f = e->bias;
            j.y = ctx->epi_scratch;
            MR_PC_TRY(gpu_job(ctx, &j, err));
            vec = ctx->epi_scratch;
        }
        MR_PC_TRY(mr_lt_matmul(ctx->lt, g, e, vec, bias_dt, ctx->blas_ws, MR_PC_BLAS_WS, ctx->s, done, err));
    }
    if (ctx->epi_counts) ctx->epi_counts[*done ? 0 : 1]++;
    if (!*done || !grad) return MR_OK;
    mr_pc_job j;
    mr_pc_job_init(&j, MR_PCJ_ACC_F32, bias_dt, n);
    j.x = ctx->epi_scratch;
    j.fo = e->db;
    return gpu_job(ctx, &j, err);
}

static mr_status gpu_copy(void *ctx, void *dst, const void *src, size_t bytes, mr_error *err) {
    if (bytes == 0 || dst == src) return MR_OK;
    MR_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ((gpu_ctx *)ctx)->s),
                "copying the observations", err);
    return MR_OK;
}

/* The conv operation: one cuDNN convolution; a bf16 / fp16 weight gradient
 * is computed in T and added into the fp32 grads by a job. */
static mr_status gpu_conv(void *vctx, const mr_pc_conv *c, mr_error *err) {
    gpu_ctx *ctx = (gpu_ctx *)vctx;
    if (!ctx->dnn || c->layer < 0 || c->layer >= MR_MAX_CONV)
        return mr_fail(err, MR_ERR_ARG, "policy schedule: a cuDNN convolution of layer %d without cuDNN", c->layer);
    MR_PC_TRY(mr_dnn_conv(ctx->dnn, c, ctx->algo[c->layer], ctx->dnn_ws, ctx->dnn_ws_bytes, ctx->dnn_dw, err));
    if (c->op != MR_PCC_BWD_FILTER || c->dt == MR_FP32) return MR_OK;
    mr_pc_job j;
    mr_pc_job_init(&j, MR_PCJ_ACC_F32, c->dt, (long long)c->OC * 9 * c->C);
    j.x = ctx->dnn_dw;
    j.fo = c->dw;
    return gpu_job(ctx, &j, err);
}

/* Binds cuBLAS to the stream and the plan's workspace (cublasSetStream
 * resets the workspace, so both are set together) and fills the table. */
static mr_status gpu_ops(mr_policy_cuda *pc, void *stream, gpu_ctx *ctx, mr_pc_ops *o, mr_error *err) {
    memset(ctx, 0, sizeof *ctx);
    memset(o, 0, sizeof *o);
    ctx->h = (cublasHandle_t)pc->blas;
    ctx->s = (cudaStream_t)stream;
    if (pc->dnn) {
        if (pc->dnn_stream != stream) {
            mr_status st = mr_dnn_set_stream((mr_dnn *)pc->dnn, stream, err);
            if (st != MR_OK) return st;
            pc->dnn_stream = stream;
        }
        ctx->dnn = (mr_dnn *)pc->dnn;
        ctx->algo = pc->algo;
        ctx->dnn_ws = pc->buf.dnn_ws;
        ctx->dnn_dw = pc->buf.dnn_dw;
        ctx->dnn_ws_bytes = pc->plan.dnn_ws_bytes;
        o->conv = gpu_conv;
    }
    if (pc->blas_stream != stream) {
        mr_status st = blas_status(blas.set_stream(ctx->h, ctx->s), "cublasSetStream", err);
        if (st == MR_OK)
            st = blas_status(blas.set_workspace(ctx->h, pc->buf.blas, MR_PC_BLAS_WS), "cublasSetWorkspace", err);
        if (st != MR_OK) {
            pc->blas_stream = (void *)~(uintptr_t)0;   /* unknown: set again next time */
            return st;
        }
        pc->blas_stream = stream;
    }
    if (pc->lt) {
        ctx->lt = (mr_lt *)pc->lt;
        ctx->epi_scratch = pc->buf.epi_scratch;
        ctx->epi_floats = pc->plan.epi_scratch_floats;
        ctx->blas_ws = pc->buf.blas;
        ctx->epi_counts = pc->epi_counts;
        o->gemm_ep = gpu_gemm_ep;
    }
    o->ctx = ctx;
    o->gemm = gpu_gemm;
    o->job = gpu_job;
    o->copy = gpu_copy;
    return MR_OK;
}

/* ---------------------------------------------------------------- policy */

/* cuda.conv's layers for this build and machine. */
static void conv_layers(const mr_cuda_config *cuda, int L, int8_t dnn[MR_MAX_CONV], int algo[MR_MAX_CONV][3],
                        char *note, size_t len) {
    const char *why = NULL;
    const int asks = cuda && cuda->conv != MR_CUDA_CONV_IM2COL;
    const int ok = asks ? mr_dnn_available(&why) : 1;
    mr_cuda_conv_resolve(cuda, L, ok, why, dnn, algo, note, len);
}

extern "C" size_t mr_policy_cuda_bytes_conv(const mr_policy_config *cfg, int view, int max_batch, int chunk,
                                            int precision, const mr_cuda_config *cuda) {
    mr_pc_plan pl;
    if (mr_pn_plan_make(&pl, cfg, view, max_batch, chunk, precision, NULL) != MR_OK) return 0;
    int8_t dnn[MR_MAX_CONV];
    int algo[MR_MAX_CONV][3];
    char note[240];
    conv_layers(cuda, pl.net.num_conv, dnn, algo, note, sizeof note);
    mr_pc_plan_dnn(&pl, dnn);
    if (cuda && cuda->epilogue == MR_CUDA_EPILOGUE_FUSED) mr_pc_plan_epi(&pl);
    return mr_pc_plan_bytes(&pl);
}

extern "C" size_t mr_policy_cuda_bytes(const mr_policy_config *cfg, int view, int max_batch, int chunk,
                                       int precision) {
    return mr_policy_cuda_bytes_conv(cfg, view, max_batch, chunk, precision, NULL);
}

extern "C" void mr_policy_cuda_destroy(mr_policy_cuda *pc) {
    if (!pc) return;
    if (pc->blas) blas.destroy((cublasHandle_t)pc->blas);
    if (pc->dnn) mr_dnn_destroy((mr_dnn *)pc->dnn);
    if (pc->lt) mr_lt_destroy((mr_lt *)pc->lt);
    if (pc->dev) {
        mr_devmem_free(pc->dev, pc->params, NULL);
        mr_devmem_free(pc->dev, pc->grads, NULL);
        mr_devmem_free(pc->dev, pc->ws, NULL);
    }
    memset(pc, 0, sizeof *pc);
    pc->fwd_B = -1;
}

extern "C" mr_status mr_policy_cuda_create(mr_policy_cuda *pc, const mr_policy_config *cfg, int view, int max_batch,
                                           int chunk, int precision, mr_devmem *dev, mr_error *err) {
    return mr_policy_cuda_create_conv(pc, cfg, view, max_batch, chunk, precision, NULL, dev, err);
}

extern "C" mr_status mr_policy_cuda_create_conv(mr_policy_cuda *pc, const mr_policy_config *cfg, int view,
                                                int max_batch, int chunk, int precision, const mr_cuda_config *cuda,
                                                mr_devmem *dev, mr_error *err) {
    if (!pc) return mr_fail(err, MR_ERR_ARG, "mr_policy_cuda_create: the policy struct is missing");
    memset(pc, 0, sizeof *pc);
    pc->fwd_B = -1;
    mr_status st = mr_pn_plan_make(&pc->plan, cfg, view, max_batch, chunk, precision, err);
    if (st == MR_OK) {
        int8_t dnn[MR_MAX_CONV];
        conv_layers(cuda, pc->plan.net.num_conv, dnn, pc->algo, pc->conv_note, sizeof pc->conv_note);
        char *c0 = strstr(pc->conv_note, "(from the codes)");
        if (c0 && pc->plan.net.obs_float) memcpy(c0, "(from the image)", 16);   /* layer 0 reads a float image */
        mr_pc_plan_dnn(&pc->plan, dnn);
        if (cuda && cuda->epilogue == MR_CUDA_EPILOGUE_FUSED) mr_pc_plan_epi(&pc->plan);
    }
    if (st == MR_OK && !dev)
        st = mr_fail(err, MR_ERR_ARG, "mr_policy_cuda_create: the device memory manager is missing");
    cublasHandle_t h = NULL;
    if (st == MR_OK) {
        pthread_once(&blas_once, blas_load);
        if (!blas.ok) st = mr_fail(err, MR_ERR_BACKEND, "the CUDA policy needs cuBLAS: %s", blas.why);
    }
    if (st == MR_OK) st = blas_status(blas.create(&h), "cublasCreate (is a GPU present and the driver loaded?)", err);
    if (st != MR_OK) {
        mr_policy_cuda_destroy(pc);
        return st;
    }
    pc->blas = h;
    pc->dev = dev;
    st = blas_status(blas.set_math_mode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err);
    if (st == MR_OK) st = blas_status(blas.set_pointer_mode(h, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode", err);
    if (st == MR_OK)
        st = mr_devmem_alloc(dev, pc->plan.param_bytes, "the policy parameters", (void **)&pc->params, err);
    if (st == MR_OK)
        st = mr_devmem_alloc(dev, pc->plan.param_bytes, "the policy gradients", (void **)&pc->grads, err);
    if (st == MR_OK)
        st = mr_devmem_alloc(dev, pc->plan.ws_bytes, "the policy activations and workspace", (void **)&pc->ws, err);
    if (st != MR_OK) {
        mr_policy_cuda_destroy(pc);
        return st;
    }
    mr_pn_carve(&pc->plan, pc->ws, &pc->buf);
    pc->buf.aux_ok = pc->aux_ok;
    if (pc->plan.epilogue) {   /* cuda.epilogue = fused: a cuBLASLt handle (its algorithms are chosen per shape) */
        mr_lt *lt = NULL;
        st = mr_lt_create(&lt, err);
        if (st != MR_OK) {
            mr_policy_cuda_destroy(pc);
            return st;
        }
        pc->lt = lt;
        snprintf(pc->epi_note, sizeof pc->epi_note, "epilogues fused by %s where it has an algorithm",
                 mr_lt_describe());
    } else {
        snprintf(pc->epi_note, sizeof pc->epi_note, "epilogues as separate kernels");
    }
    pc->blas_stream = (void *)~(uintptr_t)0;   /* bind the workspace at the first call */
    pc->dnn_stream = (void *)~(uintptr_t)0;
    if (pc->plan.dnn_ws_bytes) {   /* cuDNN: a handle, and each layer's algorithms for a whole chunk */
        mr_dnn *d = NULL;
        st = mr_dnn_create(&d, err);
        pc->dnn = d;
        const mr_net_layout *p = &pc->plan.net;
        for (int l = 1; st == MR_OK && l < p->num_conv; l++)
            if (pc->plan.dnn[l])
                st = mr_dnn_pick(d, pc->plan.dt, pc->plan.chunk, p->view, p->view, p->ch[l], p->ch[l + 1],
                                 pc->plan.dnn_ws_bytes, pc->algo[l], err);
        if (st != MR_OK) {
            mr_policy_cuda_destroy(pc);
            return st;
        }
        size_t o = strlen(pc->conv_note);
        const char *sep = "; cuDNN algorithms (forward/data/filter): ";
        for (int l = 1; l < p->num_conv && o < sizeof pc->conv_note; l++)
            if (pc->plan.dnn[l]) {
                o += (size_t)snprintf(pc->conv_note + o, sizeof pc->conv_note - o, "%slayer %d %d/%d/%d", sep, l,
                                      pc->algo[l][0], pc->algo[l][1], pc->algo[l][2]);
                sep = ", ";
            }
    }
    mr_ok(err);
    return MR_OK;
}

static mr_status check_created(const mr_policy_cuda *pc, const char *fn, mr_error *err) {
    if (!pc) return mr_fail(err, MR_ERR_ARG, "%s: the policy is missing", fn);
    if (!pc->blas || !pc->ws) return mr_fail(err, MR_ERR_ARG, "%s: the policy was not created", fn);
    return MR_OK;
}

extern "C" mr_status mr_policy_cuda_zero_grad(mr_policy_cuda *pc, void *stream, mr_error *err) {
    mr_status st = check_created(pc, "mr_policy_cuda_zero_grad", err);
    if (st != MR_OK) return st;
    MR_CUDA_TRY(cudaMemsetAsync(pc->grads, 0, pc->plan.param_bytes, (cudaStream_t)stream),
                "zeroing the policy gradients", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_policy_cuda_forward(mr_policy_cuda *pc, const uint8_t *codes, const float *extra, int B,
                                            int proxy, float *logits, float *value, void *stream, mr_error *err) {
    mr_status st = check_created(pc, "mr_policy_cuda_forward", err);
    if (st != MR_OK) return st;
    if (B < 0 || B > pc->plan.max_batch)
        return mr_fail(err, MR_ERR_ARG, "mr_policy_cuda_forward: B = %d: accepted 0 .. %d (max_batch)", B,
                       pc->plan.max_batch);
    if (B > 0 && (!codes || !logits || !value))
        return mr_fail(err, MR_ERR_ARG, "mr_policy_cuda_forward: codes, logits or value is missing");
    pc->fwd_B = -1;
    gpu_ctx ctx;
    mr_pc_ops o;
    st = gpu_ops(pc, stream, &ctx, &o, err);
    if (st == MR_OK)
        st = mr_pn_forward(&o, &pc->plan, &pc->buf, pc->params, codes, extra, B, proxy, logits, value, err);
    if (st != MR_OK) return st;
    pc->fwd_B = B;
    pc->fwd_proxy = proxy;
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_policy_cuda_backward(mr_policy_cuda *pc, const float *dlogits, const float *dvalue, int B,
                                             void *stream, mr_error *err) {
    mr_status st = check_created(pc, "mr_policy_cuda_backward", err);
    if (st != MR_OK) return st;
    if (pc->fwd_B < 0 || B != pc->fwd_B)
        return mr_fail(err, MR_ERR_ARG,
                       "mr_policy_cuda_backward: B = %d does not match the last forward (%d; -1 = none or it failed)",
                       B, pc->fwd_B);
    if (B > 0 && (!dlogits || !dvalue))
        return mr_fail(err, MR_ERR_ARG, "mr_policy_cuda_backward: dlogits or dvalue is missing");
    gpu_ctx ctx;
    mr_pc_ops o;
    st = gpu_ops(pc, stream, &ctx, &o, err);
    if (st == MR_OK)
        st = mr_pn_backward(&o, &pc->plan, &pc->buf, pc->params, dlogits, dvalue, B, pc->fwd_proxy, pc->grads, err);
    if (st != MR_OK) return st;
    mr_ok(err);
    return MR_OK;
}

/* ---------------------------------------------------------------- layers */

static mr_status check_dims(const char *fn, int B, int H, int W, int C, int OC, mr_error *err) {
    const long long rows = (long long)B * H * W;
    if (B < 0 || H < 1 || W < 1 || C < 1 || OC < 1 || rows * 9 * C > MR_PC_MAX_ELEMS ||
        rows * OC > MR_PC_MAX_ELEMS)
        return mr_fail(err, MR_ERR_ARG, "%s: B %d, H %d, W %d, C %d, OC %d: sizes must be positive (B >= 0) and "
                       "every buffer at most %lld elements", fn, B, H, W, C, OC, (long long)MR_PC_MAX_ELEMS);
    return MR_OK;
}

extern "C" mr_status mr_cuda_conv3x3_forward(mr_policy_cuda *pc, float *out, float *col, const float *inp,
                                             const float *w, const float *b, int B, int H, int W, int C, int OC,
                                             int relu, void *stream, mr_error *err) {
    mr_status st = check_created(pc, "mr_cuda_conv3x3_forward", err);
    if (st == MR_OK) st = check_dims("mr_cuda_conv3x3_forward", B, H, W, C, OC, err);
    if (st == MR_OK && B > 0 && (!out || !col || !inp || !w))
        st = mr_fail(err, MR_ERR_ARG, "mr_cuda_conv3x3_forward: out, col, inp or w is missing");
    gpu_ctx ctx;
    mr_pc_ops o;
    if (st == MR_OK) st = gpu_ops(pc, stream, &ctx, &o, err);
    if (st == MR_OK) st = mr_pc_conv_forward(&o, MR_FP32, out, col, inp, NULL, 0, w, b, B, H, W, C, OC, relu, err);
    if (st == MR_OK) mr_ok(err);
    return st;
}

extern "C" mr_status mr_cuda_conv3x3_backward(mr_policy_cuda *pc, float *dinp, const float *mask, float *dw,
                                              float *db, double *part, float *col, const float *dout,
                                              const float *inp, const float *w, int B, int H, int W, int C, int OC,
                                              void *stream, mr_error *err) {
    mr_status st = check_created(pc, "mr_cuda_conv3x3_backward", err);
    if (st == MR_OK) st = check_dims("mr_cuda_conv3x3_backward", B, H, W, C, OC, err);
    if (st == MR_OK && B > 0 &&
        (!col || !dout || (dw && !inp) || (dinp && !w) || (db && !part)))
        st = mr_fail(err, MR_ERR_ARG, "mr_cuda_conv3x3_backward: col, dout, or an input a requested gradient needs "
                     "(inp for dw, w for dinp, part for db) is missing");
    gpu_ctx ctx;
    mr_pc_ops o;
    if (st == MR_OK) st = gpu_ops(pc, stream, &ctx, &o, err);
    if (st == MR_OK)
        st = mr_pc_conv_backward(&o, MR_FP32, dinp, mask, dw, db, part, col, dout, inp, NULL, 0, w, B, H, W, C, OC,
                                 err);
    if (st == MR_OK) mr_ok(err);
    return st;
}

extern "C" mr_status mr_cuda_linear_forward(mr_policy_cuda *pc, float *out, const float *inp, const float *w,
                                            const float *b, int B, int C, int OC, int relu, void *stream,
                                            mr_error *err) {
    mr_status st = check_created(pc, "mr_cuda_linear_forward", err);
    if (st == MR_OK) st = check_dims("mr_cuda_linear_forward", B, 1, 1, C, OC, err);
    if (st == MR_OK && B > 0 && (!out || !inp || !w))
        st = mr_fail(err, MR_ERR_ARG, "mr_cuda_linear_forward: out, inp or w is missing");
    gpu_ctx ctx;
    mr_pc_ops o;
    if (st == MR_OK) st = gpu_ops(pc, stream, &ctx, &o, err);
    if (st == MR_OK)
        st = mr_pc_linear_forward(&o, "linear forward", MR_FP32, MR_FP32, out, OC, inp, C, w, C, b, B, C, OC, relu,
                                  err);
    if (st == MR_OK) mr_ok(err);
    return st;
}

extern "C" mr_status mr_cuda_linear_backward(mr_policy_cuda *pc, float *dinp, float *dw, float *db, double *part,
                                             const float *dout, const float *inp, const float *w, int B, int C,
                                             int OC, void *stream, mr_error *err) {
    mr_status st = check_created(pc, "mr_cuda_linear_backward", err);
    if (st == MR_OK) st = check_dims("mr_cuda_linear_backward", B, 1, 1, C, OC, err);
    if (st == MR_OK && B > 0 && (!dout || (dw && !inp) || (dinp && !w) || (db && !part)))
        st = mr_fail(err, MR_ERR_ARG, "mr_cuda_linear_backward: dout, or an input a requested gradient needs "
                     "(inp for dw, w for dinp, part for db) is missing");
    gpu_ctx ctx;
    mr_pc_ops o;
    if (st == MR_OK) st = gpu_ops(pc, stream, &ctx, &o, err);
    if (st == MR_OK)
        st = mr_pc_linear_backward(&o, "linear backward", MR_FP32, dinp, C, 1.0f, dw, C, db, part, dout, OC, inp, C,
                                   w, C, B, C, OC, err);
    if (st == MR_OK) mr_ok(err);
    return st;
}

static mr_status check_block(const mr_policy_cuda *pc, const char *fn, int B, int C, int H, int O, mr_error *err) {
    mr_status st = check_created(pc, fn, err);
    if (st != MR_OK) return st;
    const int hid = pc->plan.net.hidden;
    if (pc->plan.net.trunk == MR_TRUNK_MLP || B < 0 || B > pc->plan.max_batch || C < 1 || C > 65536 || H < 1 ||
        H > hid || O < 1 || O > hid)
        return mr_fail(err, MR_ERR_ARG, "%s: B %d, C %d, H %d, O %d: accepted B 0 .. %d, C 1 .. 65536, H and O "
                       "1 .. %d (the network's hidden), on a conv network's policy", fn, B, C, H, O,
                       pc->plan.max_batch, hid);
    return MR_OK;
}

/* The block's ReLU bits (cuda.epilogue = fused: feat's, H wide), for its
 * forward to write and its backward to read. */
static mr_pc_aux block_aux(mr_policy_cuda *pc, int H) {
    mr_pc_aux a;
    a.bits = pc->buf.aux_feat;
    a.ld = mr_pc_aux_ld(H);
    a.ok = pc->aux_ok;
    return a;
}

extern "C" mr_status mr_cuda_block_forward(mr_policy_cuda *pc, void *h, float *y, const void *x, const void *w1,
                                           const float *b1, const void *w2, const float *b2, int B, int C, int H,
                                           int O, void *stream, mr_error *err) {
    mr_status st = check_block(pc, "mr_cuda_block_forward", B, C, H, O, err);
    if (st != MR_OK) return st;
    gpu_ctx ctx;
    mr_pc_ops o;
    st = gpu_ops(pc, stream, &ctx, &o, err);
    const int dt = pc->plan.dt;
    mr_pc_aux a = block_aux(pc, H);
    const mr_pc_aux *aux = a.bits ? &a : NULL;
    if (aux) *aux->ok = 1;
    if (st == MR_OK)
        st = mr_pc_linear_forward_aux(&o, "block hidden forward", dt, dt, h, H, x, C, w1, C, b1, B, C, H, 1, aux,
                                      err);
    if (st == MR_OK)
        st = mr_pc_linear_forward(&o, "block head forward", dt, MR_FP32, y, O, h, H, w2, H, b2, B, H, O, 0, err);
    if (st == MR_OK) mr_ok(err);
    return st;
}

extern "C" mr_status mr_cuda_block_backward(mr_policy_cuda *pc, void *dh, void *dx, float *dw1, float *db1,
                                            float *dw2, float *db2, const void *dy, const void *h, const void *x,
                                            const void *w1, const void *w2, int B, int C, int H, int O, void *stream,
                                            mr_error *err) {
    mr_status st = check_block(pc, "mr_cuda_block_backward", B, C, H, O, err);
    if (st != MR_OK) return st;
    gpu_ctx ctx;
    mr_pc_ops o;
    st = gpu_ops(pc, stream, &ctx, &o, err);
    const int dt = pc->plan.dt;
    mr_pc_aux a = block_aux(pc, H);
    if (st == MR_OK)
        st = mr_pc_input_grad_relu(&o, "block head input gradient", dt, dh, H, 0.0f, dy, O, w2, H, B, H, O, h, H, db1,
                                   pc->buf.part, a.bits ? &a : NULL, err);
    if (st == MR_OK)
        st = mr_pc_linear_backward(&o, "block head weight gradient", dt, NULL, 0, 0.0f, dw2, H, db2, pc->buf.part,
                                   dy, O, h, H, NULL, 0, B, H, O, err);
    if (st == MR_OK)
        st = mr_pc_linear_backward(&o, "block hidden backward", dt, dx, C, 0.0f, dw1, C, NULL, NULL, dh, H, x, C, w1,
                                   C, B, C, H, err);
    if (st == MR_OK) mr_ok(err);
    return st;
}

/* ---------------------------------------------------------------- timing */

__global__ void fill_kernel(void *p, unsigned long long n, int dt, unsigned seed, float lo, float hi) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 16, h *= 2246822519u, h ^= h >> 13;
        mr_pc_st(p, (size_t)i, dt, lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f));
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* moonrl.h's mr_cuda_conv_time (the cuda table's conv_time). Its memory is
 * its own (cudaMalloc), freed before it returns: it runs before a trainer. */
extern "C" mr_status mr_cuda_conv_time_gpu(int device, int H, int W, int C, int OC, int chunk, int precision,
                                          int reps, mr_cuda_conv_timing *out, mr_error *err) {
    if (!out || H < 1 || W < 1 || C < 1 || OC < 1 || chunk < 1 || reps < 0 || reps > 1000 || C > 65536 ||
        OC > 65536 || (precision != MR_FP32 && precision != MR_BF16 && precision != MR_FP16) ||
        (long long)chunk * H * W * 9 * (C > OC ? C : OC) > MR_PC_MAX_ELEMS)
        return mr_fail(err, MR_ERR_ARG, "mr_cuda_conv_time: %d x %d, %d -> %d, chunk %d, precision %d, reps %d: "
                       "accepted positive sizes, buffers up to %lld elements, fp32/bf16/fp16, 0 .. 1000 reps", H, W,
                       C, OC, chunk, precision, reps, (long long)MR_PC_MAX_ELEMS);
    memset(out, 0, sizeof *out);
    out->ms_im2col = out->ms_cudnn = -1;
    out->algo[0] = out->algo[1] = out->algo[2] = -1;
    MR_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice", err);
    cudaDeviceProp prop;
    MR_CUDA_TRY(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", err);
    snprintf(out->machine, sizeof out->machine, "%.100s|sm_%d%d|cuDNN %zu", prop.name, prop.major, prop.minor,
             mr_dnn_version());
    if (reps == 0) {   /* the machine's key only */
        mr_ok(err);
        return MR_OK;
    }
    pthread_once(&blas_once, blas_load);
    if (!blas.ok) return mr_fail(err, MR_ERR_BACKEND, "mr_cuda_conv_time needs cuBLAS: %s", blas.why);
    const int dt = precision;
    const size_t es = (size_t)mr_pc_esize(dt), rows = (size_t)chunk * H * W, wn = (size_t)OC * 9 * C;
    const size_t bytes[] = {rows * C * es, rows * OC * es, rows * OC * es, rows * C * es, rows * 9 * C * es,
                            wn * es, OC * sizeof(float), wn * sizeof(float), wn * es,
                            mr_pc_bias_partials((long long)rows, OC) * sizeof(double), MR_PC_BLAS_WS, MR_PC_DNN_WS};
    enum { X, Y, DY, DX, COL, Wt, Bs, DW, DWLP, PART, BWS, DWS, NB };
    void *b[NB] = {0};
    cublasHandle_t h = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    mr_dnn *d = NULL;
    double *t = NULL;
    mr_status st = MR_OK;
    for (int i = 0; i < NB && st == MR_OK; i++) st = mr_cuda_status(cudaMalloc(&b[i], bytes[i]), "cudaMalloc", err);
    if (st == MR_OK) st = mr_cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "a stream", err);
    if (st == MR_OK) st = mr_cuda_status(cudaEventCreate(&e0), "an event", err);
    if (st == MR_OK) st = mr_cuda_status(cudaEventCreate(&e1), "an event", err);
    if (st == MR_OK) st = blas_status(blas.create(&h), "cublasCreate", err);
    if (st == MR_OK) st = blas_status(blas.set_math_mode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err);
    if (st == MR_OK) st = blas_status(blas.set_stream(h, s), "cublasSetStream", err);
    if (st == MR_OK) st = blas_status(blas.set_workspace(h, b[BWS], MR_PC_BLAS_WS), "cublasSetWorkspace", err);
    if (st == MR_OK) {
        fill_kernel<<<1024, 256, 0, s>>>(b[X], rows * C, dt, 1u, 0.0f, 1.0f);
        fill_kernel<<<1024, 256, 0, s>>>(b[DY], rows * OC, dt, 2u, -1.0f, 1.0f);
        fill_kernel<<<1024, 256, 0, s>>>(b[Wt], wn, dt, 3u, -0.1f, 0.1f);
        fill_kernel<<<64, 256, 0, s>>>(b[Bs], OC, MR_FP32, 4u, -0.1f, 0.1f);
        st = mr_cuda_status(cudaGetLastError(), "the fill kernel", err);
    }
    int algo[MR_MAX_CONV][3];
    for (int l = 0; l < MR_MAX_CONV; l++) algo[l][0] = algo[l][1] = algo[l][2] = -1;
    const char *why = NULL;
    if (st == MR_OK && !mr_dnn_available(&why)) snprintf(out->note, sizeof out->note, "%s", why);
    else if (st == MR_OK) {
        mr_error e2;
        float ms[3];
        mr_status ds = mr_dnn_create(&d, &e2);
        if (ds == MR_OK) ds = mr_dnn_set_stream(d, s, &e2);
        if (ds == MR_OK)
            ds = mr_dnn_find(d, dt, chunk, H, W, C, OC, b[X], b[Wt], b[Y], b[DX], b[DY], b[DWLP], b[DWS],
                             MR_PC_DNN_WS, algo[1], ms, &e2);
        if (ds != MR_OK) snprintf(out->note, sizeof out->note, "%.190s", e2.msg);
        else if (algo[1][0] < 0 || algo[1][1] < 0 || algo[1][2] < 0)
            snprintf(out->note, sizeof out->note, "cuDNN found no deterministic algorithm within %zu MiB for the %s",
                     MR_PC_DNN_WS >> 20, algo[1][0] < 0 ? "forward" : algo[1][1] < 0 ? "input gradient"
                                                                                      : "weight gradient");
        for (int k = 0; k < 3; k++) out->algo[k] = algo[1][k];
        if (out->note[0]) {
            mr_dnn_destroy(d);
            d = NULL;
        }
    }
    gpu_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.h = h;
    ctx.s = s;
    ctx.dnn = d;
    ctx.algo = algo;
    ctx.dnn_ws = b[DWS];
    ctx.dnn_dw = dt == MR_FP32 ? NULL : b[DWLP];
    ctx.dnn_ws_bytes = MR_PC_DNN_WS;
    mr_pc_ops o;
    memset(&o, 0, sizeof o);
    o.ctx = &ctx;
    o.gemm = gpu_gemm;
    o.job = gpu_job;
    o.copy = gpu_copy;
    o.conv = gpu_conv;
    const int n_cand = d ? 2 : 1;
    if (st == MR_OK && !(t = (double *)malloc(sizeof(double) * 2 * (size_t)reps)))
        st = mr_fail(err, MR_ERR_NOMEM, "mr_cuda_conv_time: out of host memory");
    float *dw = (float *)b[DW], *db = (float *)b[Bs] /* the bias's own gradient: values are irrelevant */;
    /* round -1 is untimed (first calls, cuBLAS's lazy set-up); candidates alternate */
    for (int r = -1; r < reps && st == MR_OK; r++)
        for (int c = 0; c < n_cand && st == MR_OK; c++) {
            st = mr_cuda_status(cudaEventRecord(e0, s), "cudaEventRecord", err);
            if (st == MR_OK && c == 0) {
                st = mr_pc_conv_forward(&o, dt, b[Y], b[COL], b[X], NULL, 0, b[Wt], (const float *)b[Bs], chunk, H,
                                        W, C, OC, 1, err);
                if (st == MR_OK)
                    st = mr_pc_conv_backward(&o, dt, b[DX], b[X], dw, db, (double *)b[PART], b[COL], b[DY], b[X],
                                             NULL, 0, b[Wt], chunk, H, W, C, OC, err);
            } else if (st == MR_OK) {
                st = mr_pc_dnn_forward(&o, dt, 1, b[Y], b[X], b[Wt], (const float *)b[Bs], chunk, H, W, C, OC, 1,
                                       err);
                if (st == MR_OK)
                    st = mr_pc_dnn_backward(&o, dt, 1, b[DX], b[X], dw, db, (double *)b[PART], b[DY], b[X], b[Wt],
                                            chunk, H, W, C, OC, err);
            }
            if (st == MR_OK) st = mr_cuda_status(cudaEventRecord(e1, s), "cudaEventRecord", err);
            if (st == MR_OK) st = mr_cuda_status(cudaEventSynchronize(e1), "timing a convolution", err);
            float ms = 0;
            if (st == MR_OK) st = mr_cuda_status(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime", err);
            if (st == MR_OK && r >= 0) t[(size_t)c * reps + r] = ms;
        }
    if (st == MR_OK)
        for (int c = 0; c < n_cand; c++) {
            double *x = t + (size_t)c * reps;
            qsort(x, (size_t)reps, sizeof(double), cmp_double);
            const double med = reps & 1 ? x[reps / 2] : 0.5 * (x[reps / 2 - 1] + x[reps / 2]);
            if (c == 0) out->ms_im2col = med;
            else out->ms_cudnn = med;
        }
    free(t);
    if (s) cudaStreamSynchronize(s);
    mr_dnn_destroy(d);
    if (h) blas.destroy(h);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    for (int i = 0; i < NB; i++)
        if (b[i]) cudaFree(b[i]);
    if (st == MR_OK) mr_ok(err);
    return st;
}

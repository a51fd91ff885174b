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
 *          mr_pc_elem for each element; kind and type are template
 *          constants, so each kernel is that case's straight-line code;
 *          im2col and col2im move 16-byte vectors of channels where the
 *          channel count allows (im2col_vec_kernel, col2im_vec_kernel);
 *   copy   cudaMemcpyAsync device to device;
 * plus creation (plan, cuBLAS handle, memory from the devmem manager).
 *
 * What is deliberately not here: a hand-written GEMM or implicit-GEMM
 * convolution, cuDNN, cuBLASLt epilogues. im2col + cuBLAS is the simple
 * reference GPU version; those are optimisations to measure against it.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>

#include "cuda_check.h"
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
    default: return "an unknown policy kernel";
    }
}

typedef struct gpu_ctx {
    cublasHandle_t h;
    cudaStream_t s;
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
    default: return mr_fail(err, MR_ERR_ARG, "policy schedule: unknown job kind %d", j->kind);
    }
    MR_CUDA_LAUNCHED(job_name(j->kind), err);
    return MR_OK;
}

/* ---------------------------------------------------------------- GEMM */

/* ------------------------------------------------------------ cuBLAS
 * cuBLAS is loaded with dlopen when the first CUDA policy is created, not
 * linked: libcublas and libcublasLt are ~700 MB of shared objects whose
 * loading cost every run of the CPU backend 0.3 s and 200 MB of resident
 * memory. The soname is the major version the kernels were compiled against;
 * the loader's search path (LD_LIBRARY_PATH, the binaries' RUNPATH, which
 * holds the toolkit's lib directory) is tried first, then that directory. */
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
    void *h = dlopen(MR_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen(MR_CUDA_LIBDIR "/" MR_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(blas.why, sizeof blas.why, "cannot load cuBLAS (%s, also tried %s/): %s", MR_CUBLAS_SONAME,
                 MR_CUDA_LIBDIR, e ? e : "not found");
        return;
    }
    const char *missing = NULL;
#define MR_SYM(field, name)                                                   \
    do {                                                                      \
        *(void **)&blas.field = dlsym(h, name);                               \
        if (!blas.field && !missing) missing = name;                          \
    } while (0)
    MR_SYM(create, "cublasCreate_v2");
    MR_SYM(destroy, "cublasDestroy_v2");
    MR_SYM(set_stream, "cublasSetStream_v2");
    MR_SYM(set_workspace, "cublasSetWorkspace_v2");
    MR_SYM(set_math_mode, "cublasSetMathMode");
    MR_SYM(set_pointer_mode, "cublasSetPointerMode_v2");
    MR_SYM(gemm_ex, "cublasGemmEx");
    MR_SYM(status_name, "cublasGetStatusName");
    MR_SYM(status_string, "cublasGetStatusString");
#undef MR_SYM
    if (missing) {
        snprintf(blas.why, sizeof blas.why, "%s has no symbol %s (a different cuBLAS version?)", MR_CUBLAS_SONAME,
                 missing);
        return;
    }
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

static mr_status gpu_copy(void *ctx, void *dst, const void *src, size_t bytes, mr_error *err) {
    if (bytes == 0 || dst == src) return MR_OK;
    MR_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ((gpu_ctx *)ctx)->s),
                "copying the observation codes", err);
    return MR_OK;
}

/* Binds cuBLAS to the stream and the plan's workspace (cublasSetStream
 * resets the workspace, so both are set together) and fills the table. */
static mr_status gpu_ops(mr_policy_cuda *pc, void *stream, gpu_ctx *ctx, mr_pc_ops *o, mr_error *err) {
    ctx->h = (cublasHandle_t)pc->blas;
    ctx->s = (cudaStream_t)stream;
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
    o->ctx = ctx;
    o->gemm = gpu_gemm;
    o->job = gpu_job;
    o->copy = gpu_copy;
    return MR_OK;
}

/* ---------------------------------------------------------------- policy */

extern "C" size_t mr_policy_cuda_bytes(const mr_policy_config *cfg, int view, int max_batch, int chunk,
                                       int precision) {
    mr_pc_plan pl;
    if (mr_pn_plan_make(&pl, cfg, view, max_batch, chunk, precision, NULL) != MR_OK) return 0;
    return mr_pc_plan_bytes(&pl);
}

extern "C" void mr_policy_cuda_destroy(mr_policy_cuda *pc) {
    if (!pc) return;
    if (pc->blas) blas.destroy((cublasHandle_t)pc->blas);
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
    if (!pc) return mr_fail(err, MR_ERR_ARG, "mr_policy_cuda_create: the policy struct is missing");
    memset(pc, 0, sizeof *pc);
    pc->fwd_B = -1;
    mr_status st = mr_pn_plan_make(&pc->plan, cfg, view, max_batch, chunk, precision, err);
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
    pc->blas_stream = (void *)~(uintptr_t)0;   /* bind the workspace at the first call */
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

/*
 * ppo.cu - the PPO kernels that have a CPU reference in ppo.c: GAE, action
 * sampling, the per-group gradient norm, fused Adam with per-group clipping,
 * and the fp16 dynamic loss scaler. The math is the MR_HD code of
 * gae_math.h, categorical_math.h and optimizer_math.h
 * (ppo.c loops over the same elements); this file is launches and reductions.
 *
 * Tensors (all fp32 unless said; device memory):
 *   GAE        reward, value, adv, ret (T,N); done (T,N) u8; last_value (N).
 *              One thread per environment walks its column backwards in time;
 *              row t of a warp's 32 columns is one coalesced 128-byte load.
 *   sampling   logits (N,8), u (N) -> action (N) u8, logp (N). A thread per row.
 *   optimizer  param, grad, m, v (P), P = G.off[G.n], groups [off[g], off[g+1]);
 *              partials (G.block_off[G.n]) f64; ctl: one mr_optctl.
 *
 * Gradient norm, deterministic in two stages (no atomics, fixed shapes, so the
 * bits never depend on scheduling): stage 1 gives each block MR_OPT_CHUNK
 * elements of one group, each thread a fixed strided subset summed in double,
 * then a fixed halving tree -> one partial per block; stage 2 runs one block
 * per group over its partials the same way -> ctl->s.sumsq[g].
 * mr_opt_sumsq_emulate (optimizer_math.h) is the same order on the CPU.
 *
 * Adam is one kernel over all P elements with float4 loads when every array
 * is 16-byte aligned; each element finds its group (<= 4 compares) and takes
 * that group's multiplier (clip factor / loss scale) from ctl, computed on
 * the device by the 1-thread prepare kernel. When found_inf is set the whole
 * kernel returns at once, so a skipped step costs one launch and no traffic.
 */
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_check.h"
#include "ppo_cuda.h"

#define THREADS MR_OPT_THREADS
#define MAX_BLOCKS 4096   /* grid-stride kernels: enough to fill any current GPU */

/* ------------------------------------------------------------------- GAE */

__global__ void gae_kernel(int T, int N, const float *__restrict__ reward, const float *__restrict__ value,
                           const float *__restrict__ last_value, const uint8_t *__restrict__ done, double g,
                           double gl, float *__restrict__ adv, float *__restrict__ ret) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) mr_gae_env(T, N, n, reward, value, last_value, done, g, gl, adv, ret);
}

extern "C" mr_status mr_cuda_gae(int T, int N, const float *reward, const float *value, const float *last_value,
                                 const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                                 mr_error *err) {
    if (T <= 0 || N <= 0) { mr_ok(err); return MR_OK; }
    double g, gl;
    mr_gae_coefs(gamma, lambda, &g, &gl);
    gae_kernel<<<mr_cuda_blocks(N, 128), 128, 0, (cudaStream_t)stream>>>(T, N, reward, value, last_value, done, g,
                                                                          gl, adv, ret);
    MR_CUDA_LAUNCHED("the GAE kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* -------------------------------------------------------------- sampling */

__global__ void sample_kernel(int N, int na, const float *__restrict__ logits, const float *__restrict__ u,
                              uint8_t *__restrict__ action, float *__restrict__ logp) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) mr_sample_row(logits + (size_t)i * na, na, u[i], &action[i], &logp[i]);
}

extern "C" mr_status mr_cuda_sample_actions(int N, int na, const float *logits, const float *u, uint8_t *action,
                                            float *logp, void *stream, mr_error *err) {
    if (N <= 0) { mr_ok(err); return MR_OK; }
    sample_kernel<<<mr_cuda_blocks(N, 128), 128, 0, (cudaStream_t)stream>>>(N, na, logits, u, action, logp);
    MR_CUDA_LAUNCHED("the action-sampling kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* One thread per row: gauss_math.h's sample, log-probability and the
 * environment's action; the head by value (a few dozen bytes). */
__global__ void sample_box_kernel(int N, const mr_act_head h, const float *__restrict__ logits,
                                  const float *__restrict__ eps, float *__restrict__ x, float *__restrict__ env_action,
                                  float *__restrict__ logp) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const int d = h.n;
    const float *row = logits + (size_t)i * 2 * d;
    float xi[MR_GAUSS_MAX_DIMS];
    mr_gauss_sample(row, row + d, d, eps + (size_t)i * d, xi);
    logp[i] = mr_gauss_log_prob(h.squash, row, row + d, h.low, h.high, d, xi);
    for (int j = 0; j < d; j++) x[(size_t)i * d + j] = xi[j];
    if (env_action) mr_gauss_env_action(h.squash, xi, h.low, h.high, d, env_action + (size_t)i * d);
}

__global__ void sample_md_kernel(int N, const mr_act_head h, const float *__restrict__ logits,
                                 const float *__restrict__ u, uint8_t *__restrict__ action, float *__restrict__ logp) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const int k = h.n;
    mr_md_sample(logits + (size_t)i * h.logits, h.nvec, k, u + (size_t)i * k, action + (size_t)i * k, &logp[i]);
}

static mr_status check_head(const mr_act_head *h, int kind, const char *who, mr_error *err) {
    if (!h || h->kind != kind) return mr_fail(err, MR_ERR_ARG, "%s: the head is missing or of another kind", who);
    const int max = kind == MR_HEAD_GAUSS ? MR_GAUSS_MAX_DIMS : MR_MD_MAX_HEADS;
    if (h->n < 1 || h->n > max)
        return mr_fail(err, MR_ERR_ARG, "%s: %d components: accepted 1 .. %d", who, h->n, max);
    return MR_OK;
}

extern "C" mr_status mr_cuda_sample_box(int N, const mr_act_head *h, const float *logits, const float *eps, float *x,
                                        float *env_action, float *logp, void *stream, mr_error *err) {
    const char *who = "mr_cuda_sample_box";
    mr_status st = check_head(h, MR_HEAD_GAUSS, who, err);
    if (st != MR_OK) return st;
    if (N <= 0) { mr_ok(err); return MR_OK; }
    MR_CUDA_NEED(logits, who, "logits");
    MR_CUDA_NEED(eps, who, "eps");
    MR_CUDA_NEED(x, who, "x");
    MR_CUDA_NEED(logp, who, "logp");
    sample_box_kernel<<<mr_cuda_blocks(N, 128), 128, 0, (cudaStream_t)stream>>>(N, *h, logits, eps, x, env_action,
                                                                                 logp);
    MR_CUDA_LAUNCHED("the box-sampling kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_sample_md(int N, const mr_act_head *h, const float *logits, const float *u,
                                       uint8_t *action, float *logp, void *stream, mr_error *err) {
    const char *who = "mr_cuda_sample_md";
    mr_status st = check_head(h, MR_HEAD_MULTI_DISCRETE, who, err);
    if (st != MR_OK) return st;
    if (N <= 0) { mr_ok(err); return MR_OK; }
    MR_CUDA_NEED(logits, who, "logits");
    MR_CUDA_NEED(u, who, "u");
    MR_CUDA_NEED(action, who, "action");
    MR_CUDA_NEED(logp, who, "logp");
    sample_md_kernel<<<mr_cuda_blocks(N, 128), 128, 0, (cudaStream_t)stream>>>(N, *h, logits, u, action, logp);
    MR_CUDA_LAUNCHED("the multi-discrete sampling kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* --------------------------------------------------- control-block copies */

extern "C" mr_status mr_cuda_optctl_upload(mr_optctl *d_ctl, const mr_optctl *host, void *stream, mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(d_ctl, host, sizeof *host, cudaMemcpyHostToDevice, (cudaStream_t)stream),
                "uploading the optimizer control block", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_optctl_upload_hyper(mr_optctl *d_ctl, const mr_opt_hyper *host, void *stream,
                                                 mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(&d_ctl->h, host, sizeof *host, cudaMemcpyHostToDevice, (cudaStream_t)stream),
                "uploading the optimizer hyper-parameters", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_optctl_download(const mr_optctl *d_ctl, mr_optctl *host, void *stream,
                                             mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(host, d_ctl, sizeof *host, cudaMemcpyDeviceToHost, (cudaStream_t)stream),
                "downloading the optimizer control block", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------- scalar kernels */

__global__ void opt_begin_kernel(mr_optctl *ctl) { mr_opt_begin(ctl); }
__global__ void opt_prepare_kernel(mr_optctl *ctl, int ngroups) { mr_opt_prepare(ctl, ngroups); }
__global__ void scaler_update_kernel(mr_optctl *ctl) { mr_opt_scaler_update(ctl); }

extern "C" mr_status mr_cuda_opt_begin(mr_optctl *d_ctl, void *stream, mr_error *err) {
    opt_begin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d_ctl);
    MR_CUDA_LAUNCHED("the optimizer begin kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_opt_prepare(mr_optctl *d_ctl, int ngroups, void *stream, mr_error *err) {
    if (ngroups < 1 || ngroups > MR_OPT_MAX_GROUPS)
        return mr_fail(err, MR_ERR_ARG, "mr_cuda_opt_prepare: ngroups = %d: accepted 1 .. %d", ngroups,
                       MR_OPT_MAX_GROUPS);
    opt_prepare_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d_ctl, ngroups);
    MR_CUDA_LAUNCHED("the optimizer prepare kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_scaler_update(mr_optctl *d_ctl, void *stream, mr_error *err) {
    scaler_update_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d_ctl);
    MR_CUDA_LAUNCHED("the loss-scaler update kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------- finiteness checks */

template <typename T>
__global__ void __launch_bounds__(THREADS) check_finite_kernel(const T *__restrict__ x, size_t n, mr_optctl *ctl) {
    int bad = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if constexpr (sizeof(T) == 2) bad |= !mr_finite_half_bits(x[i]);
        else bad |= !mr_finite_f(x[i]);
    }
    /* Every writer stores the same 1: no atomics needed, the result is exact. */
    if (__syncthreads_or(bad) && threadIdx.x == 0) ctl->s.found_inf = 1;
}

static unsigned grid_for(size_t n) {
    const size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? (b ? b : 1) : MAX_BLOCKS);
}

extern "C" mr_status mr_cuda_check_finite(const float *x, size_t n, mr_optctl *d_ctl, void *stream, mr_error *err) {
    if (n == 0) { mr_ok(err); return MR_OK; }
    check_finite_kernel<float><<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, n, d_ctl);
    MR_CUDA_LAUNCHED("the finiteness check kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_check_finite_half(const uint16_t *x, size_t n, mr_optctl *d_ctl, void *stream,
                                               mr_error *err) {
    if (n == 0) { mr_ok(err); return MR_OK; }
    check_finite_kernel<uint16_t><<<grid_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, n, d_ctl);
    MR_CUDA_LAUNCHED("the fp16 finiteness check kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------ grad norm */

/* Fixed halving tree over sh[0, THREADS); the caller has stored sh[t]. */
__device__ __forceinline__ double block_tree(double *sh) {
    const int t = threadIdx.x;
    __syncthreads();
#pragma unroll
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) sh[t] += sh[t + h];
        __syncthreads();
    }
    return sh[0];
}

__global__ void __launch_bounds__(THREADS)
sumsq_stage1_kernel(const float *__restrict__ grad, const __grid_constant__ mr_opt_groups G,
                    double *__restrict__ partials) {
    __shared__ double sh[THREADS];
    const int b = blockIdx.x, t = threadIdx.x;
    int g = 0;
    while (g + 1 < G.n && b >= G.block_off[g + 1]) g++;
    const int64_t lo = G.off[g] + (int64_t)(b - G.block_off[g]) * MR_OPT_CHUNK;
    const int64_t hi = lo + MR_OPT_CHUNK < G.off[g + 1] ? lo + MR_OPT_CHUNK : G.off[g + 1];
    double acc = 0.0;
#pragma unroll 4
    for (int64_t i = lo + t; i < hi; i += THREADS) mr_sumsq_add(&acc, grad[i]);
    sh[t] = acc;
    const double s = block_tree(sh);
    if (t == 0) partials[b] = s;
}

__global__ void __launch_bounds__(THREADS)
sumsq_stage2_kernel(const double *__restrict__ partials, const __grid_constant__ mr_opt_groups G, mr_optctl *ctl) {
    __shared__ double sh[THREADS];
    const int g = blockIdx.x, t = threadIdx.x;
    double acc = 0.0;
    for (int j = G.block_off[g] + t; j < G.block_off[g + 1]; j += THREADS) acc += partials[j];
    sh[t] = acc;
    const double s = block_tree(sh);
    if (t == 0) ctl->s.sumsq[g] = s;
}

static mr_status check_groups(const mr_opt_groups *G, const char *who, mr_error *err) {
    if (!G || G->n < 1 || G->n > MR_OPT_MAX_GROUPS || G->off[0] != 0 || G->block_off[G->n] < 1)
        return mr_fail(err, MR_ERR_ARG, "%s: the parameter groups are not planned (use mr_opt_groups_plan; "
                       "1 .. %d groups of >= 1 element)", who, MR_OPT_MAX_GROUPS);
    return MR_OK;
}

extern "C" size_t mr_cuda_opt_partials(const mr_opt_groups *G) { return (size_t)G->block_off[G->n]; }

extern "C" mr_status mr_cuda_grad_sumsq(const float *grad, const mr_opt_groups *G, double *partials,
                                        mr_optctl *d_ctl, void *stream, mr_error *err) {
    mr_status st = check_groups(G, "mr_cuda_grad_sumsq", err);
    if (st != MR_OK) return st;
    cudaStream_t s = (cudaStream_t)stream;
    sumsq_stage1_kernel<<<(unsigned)G->block_off[G->n], THREADS, 0, s>>>(grad, *G, partials);
    MR_CUDA_LAUNCHED("the gradient-norm kernel (stage 1)", err);
    sumsq_stage2_kernel<<<(unsigned)G->n, THREADS, 0, s>>>(partials, *G, d_ctl);
    MR_CUDA_LAUNCHED("the gradient-norm kernel (stage 2)", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------------ Adam */

/* m[g] without indexing a register array at run time (it would go to local memory). */
__device__ __forceinline__ float pick(int g, float m0, float m1, float m2, float m3) {
    return g == 0 ? m0 : g == 1 ? m1 : g == 2 ? m2 : m3;
}

template <bool VEC>
__global__ void __launch_bounds__(THREADS)
adam_kernel(float *__restrict__ param, const float *__restrict__ grad, float *__restrict__ m, float *__restrict__ v,
            const __grid_constant__ mr_opt_groups G, const mr_optctl *__restrict__ ctl) {
    if (ctl->s.found_inf) return;   /* the same value for every thread: the step is skipped */
    const mr_adam_coefs k = mr_adam_coefs_of(ctl);
    const float m0 = ctl->s.mult[0], m1 = ctl->s.mult[1], m2 = ctl->s.mult[2], m3 = ctl->s.mult[3];
    const int64_t P = G.off[G.n];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (VEC) {
        const int64_t P4 = P / 4;
        for (int64_t q = start; q < P4; q += stride) {
            float4 p4 = reinterpret_cast<float4 *>(param)[q];
            float4 m4 = reinterpret_cast<float4 *>(m)[q];
            float4 v4 = reinterpret_cast<float4 *>(v)[q];
            const float4 g4 = reinterpret_cast<const float4 *>(grad)[q];
            const int64_t i = 4 * q;
            mr_adam_elem(&p4.x, &m4.x, &v4.x, g4.x, pick(mr_opt_group_of(&G, i), m0, m1, m2, m3), &k);
            mr_adam_elem(&p4.y, &m4.y, &v4.y, g4.y, pick(mr_opt_group_of(&G, i + 1), m0, m1, m2, m3), &k);
            mr_adam_elem(&p4.z, &m4.z, &v4.z, g4.z, pick(mr_opt_group_of(&G, i + 2), m0, m1, m2, m3), &k);
            mr_adam_elem(&p4.w, &m4.w, &v4.w, g4.w, pick(mr_opt_group_of(&G, i + 3), m0, m1, m2, m3), &k);
            reinterpret_cast<float4 *>(param)[q] = p4;
            reinterpret_cast<float4 *>(m)[q] = m4;
            reinterpret_cast<float4 *>(v)[q] = v4;
        }
        done = P4 * 4;
    }
    for (int64_t i = done + start; i < P; i += stride)
        mr_adam_elem(&param[i], &m[i], &v[i], grad[i], pick(mr_opt_group_of(&G, i), m0, m1, m2, m3), &k);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

extern "C" mr_status mr_cuda_adam(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                                  const mr_optctl *d_ctl, void *stream, mr_error *err) {
    mr_status st = check_groups(G, "mr_cuda_adam", err);
    if (st != MR_OK) return st;
    const int64_t P = G->off[G->n];
    cudaStream_t s = (cudaStream_t)stream;
    if (aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v)) {
        adam_kernel<true><<<grid_for((size_t)(P + 3) / 4), THREADS, 0, s>>>(param, grad, m, v, *G, d_ctl);
    } else {
        adam_kernel<false><<<grid_for((size_t)P), THREADS, 0, s>>>(param, grad, m, v, *G, d_ctl);
    }
    MR_CUDA_LAUNCHED("the fused Adam kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_opt_step(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                                      double *partials, mr_optctl *d_ctl, void *stream, mr_error *err) {
    mr_status st;
    if ((st = mr_cuda_grad_sumsq(grad, G, partials, d_ctl, stream, err)) != MR_OK) return st;
    if ((st = mr_cuda_opt_prepare(d_ctl, G->n, stream, err)) != MR_OK) return st;
    if ((st = mr_cuda_adam(param, grad, m, v, G, d_ctl, stream, err)) != MR_OK) return st;
    return mr_cuda_scaler_update(d_ctl, stream, err);
}

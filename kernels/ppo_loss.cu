/*
 * ppo_loss.cu - the PPO loss, advantage normalisation and PopArt on the
 * device, with a CPU reference in ppo.c (mr_ppo_loss, mr_normalize,
 * mr_popart_update). The math is ppo_loss_math.h's MR_HD code (ppo.c loops
 * over the same elements); this file is launches and reductions. Nothing
 * here waits for the host: hyper-parameters, the loss scale and PopArt's
 * statistics are read from device memory, results are written there.
 *
 * Tensors (fp32 unless said; device memory):
 *   mean/std   x (n) -> out2 (2) f64: mean, unbiased std. partials
 *              (ceil(n / MR_STATS_CHUNK)) f64.
 *   loss       logits, dlogits (B,8); value, old_logp, adv, old_value, target,
 *              dvalue (B); action (B) u8; ctl: one mr_lossctl; opt: one
 *              mr_optctl or NULL; partials (ceil(B / MR_LOSS_CHUNK) x 7) f64.
 *   PopArt     returns (n); w, m_w, v_w (k); b, m_b, v_b (1); pa: one mr_popart_ctl.
 *
 * Reductions (see ppo_loss_math.h) are two-stage and deterministic: stage 1,
 * a block per fixed chunk, each thread a fixed strided subset in double, a
 * fixed halving tree; stage 2, one block over the partials, whose thread 0
 * also finishes (mean, std, the loss stats). No atomics anywhere.
 *
 * The loss is two passes, as ppo.c: pass 1 (stage 1 + 2) reduces the seven
 * batch sums and forms the stats and dloss/dH; pass 2 recomputes each
 * sample's terms (a softmax of 8: cheaper than storing them) and writes its
 * gradient row. PopArt's update is one block: thread 0 steps the statistics
 * and the bias, then every thread rescales a strided share of the weights.
 */
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_check.h"
#include "ppo_loss_cuda.h"

#define THREADS MR_RED_THREADS
#define MAX_BLOCKS 4096   /* grid-stride kernels: enough to fill any current GPU */

static unsigned grid_for(int64_t n) {
    const int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? (b ? b : 1) : MAX_BLOCKS);
}

/* ------------------------------------------------------------ reductions */

/* The fixed halving tree of NACC sums at once; thread 0 gets them in out.
 * The caller's acc is this thread's share. */
template <int NACC>
__device__ __forceinline__ void block_sums(const double *acc, double *out) {
    __shared__ double sh[NACC][THREADS];
    const int t = threadIdx.x;
#pragma unroll
    for (int k = 0; k < NACC; k++) sh[k][t] = acc[k];
    __syncthreads();
#pragma unroll
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
#pragma unroll
            for (int k = 0; k < NACC; k++) sh[k][t] += sh[k][t + h];
        }
        __syncthreads();
    }
    if (t == 0) {
#pragma unroll
        for (int k = 0; k < NACC; k++) out[k] = sh[k][0];
    }
}

/* Stage 2: the sums of partials[j * NACC + k] over j < nb, to thread 0. */
template <int NACC>
__device__ __forceinline__ void stage2_sums(const double *__restrict__ partials, int nb, double *out) {
    double acc[NACC];
#pragma unroll
    for (int k = 0; k < NACC; k++) acc[k] = 0.0;
    for (int j = threadIdx.x; j < nb; j += THREADS) {
#pragma unroll
        for (int k = 0; k < NACC; k++) acc[k] += partials[(int64_t)j * NACC + k];
    }
    block_sums<NACC>(acc, out);
}

/* ------------------------------------------------------------- mean / std */

__global__ void __launch_bounds__(THREADS)
sum_stage1_kernel(const float *__restrict__ x, int64_t n, double *__restrict__ partials) {
    const int64_t lo = (int64_t)blockIdx.x * MR_STATS_CHUNK;
    const int64_t hi = lo + MR_STATS_CHUNK < n ? lo + MR_STATS_CHUNK : n;
    double acc = 0.0, s;
    for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) mr_stats_add_sum(&acc, x[i]);
    block_sums<1>(&acc, &s);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

/* stats[0] is the mean the previous kernels left. */
__global__ void __launch_bounds__(THREADS)
dev2_stage1_kernel(const float *__restrict__ x, int64_t n, const double *__restrict__ stats,
                   double *__restrict__ partials) {
    const int64_t lo = (int64_t)blockIdx.x * MR_STATS_CHUNK;
    const int64_t hi = lo + MR_STATS_CHUNK < n ? lo + MR_STATS_CHUNK : n;
    const double mean = stats[0];
    double acc = 0.0, s;
    for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) mr_stats_add_dev2(&acc, x[i], mean);
    block_sums<1>(&acc, &s);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(THREADS)
mean_stage2_kernel(const double *__restrict__ partials, int nb, int64_t n, double *stats) {
    double s;
    stage2_sums<1>(partials, nb, &s);
    if (threadIdx.x == 0) {
        stats[0] = mr_stats_mean(s, n);
        stats[1] = 0.0;   /* n < 2: the std pass does not run */
    }
}

__global__ void __launch_bounds__(THREADS)
std_stage2_kernel(const double *__restrict__ partials, int nb, int64_t n, double *stats) {
    double s;
    stage2_sums<1>(partials, nb, &s);
    if (threadIdx.x == 0) stats[1] = mr_stats_std(s, n);
}

__global__ void __launch_bounds__(THREADS)
normalize_kernel(float *__restrict__ x, int64_t n, const double *__restrict__ stats) {
    const double mean = stats[0], sd = stats[1];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = mr_norm_elem(x[i], mean, sd);
}

static int stats_blocks(int64_t n) { return (int)((n + MR_STATS_CHUNK - 1) / MR_STATS_CHUNK); }

extern "C" size_t mr_cuda_mean_std_partials(int64_t n) { return n > 0 ? (size_t)stats_blocks(n) : 1; }

static mr_status check_n(int64_t n, const char *who, mr_error *err) {
    /* Blocks of stage 1 are counted in an int. */
    if (n < 0 || n > (int64_t)INT32_MAX * MR_STATS_CHUNK / 2)
        return mr_fail(err, MR_ERR_ARG, "%s: n = %lld: accepted 0 .. %lld", who, (long long)n,
                       (long long)INT32_MAX * MR_STATS_CHUNK / 2);
    return MR_OK;
}

/* The launches of mean/std, arguments already checked, n > 0. */
static mr_status launch_mean_std(const float *x, int64_t n, double *partials, double *out2, cudaStream_t s,
                                 mr_error *err) {
    const int nb = stats_blocks(n);
    sum_stage1_kernel<<<(unsigned)nb, THREADS, 0, s>>>(x, n, partials);
    MR_CUDA_LAUNCHED("the mean kernel (stage 1)", err);
    mean_stage2_kernel<<<1, THREADS, 0, s>>>(partials, nb, n, out2);
    MR_CUDA_LAUNCHED("the mean kernel (stage 2)", err);
    if (n > 1) {
        dev2_stage1_kernel<<<(unsigned)nb, THREADS, 0, s>>>(x, n, out2, partials);
        MR_CUDA_LAUNCHED("the std kernel (stage 1)", err);
        std_stage2_kernel<<<1, THREADS, 0, s>>>(partials, nb, n, out2);
        MR_CUDA_LAUNCHED("the std kernel (stage 2)", err);
    }
    return MR_OK;
}

extern "C" mr_status mr_cuda_mean_std(const float *x, int64_t n, double *partials, double *out2, void *stream,
                                      mr_error *err) {
    const char *who = "mr_cuda_mean_std";
    mr_status st = check_n(n, who, err);
    if (st != MR_OK) return st;
    MR_CUDA_NEED(out2, who, "out2");
    if (n == 0) {
        MR_CUDA_TRY(cudaMemsetAsync(out2, 0, 2 * sizeof(double), (cudaStream_t)stream), "clearing mean/std", err);
        mr_ok(err);
        return MR_OK;
    }
    MR_CUDA_NEED(x, who, "x");
    MR_CUDA_NEED(partials, who, "partials");
    if ((st = launch_mean_std(x, n, partials, out2, (cudaStream_t)stream, err)) != MR_OK) return st;
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_normalize(float *x, int64_t n, double *partials, double *out2, void *stream,
                                       mr_error *err) {
    const char *who = "mr_cuda_normalize";
    mr_status st = check_n(n, who, err);
    if (st != MR_OK) return st;
    if (n == 0) { mr_ok(err); return MR_OK; }
    MR_CUDA_NEED(x, who, "x");
    MR_CUDA_NEED(out2, who, "out2");
    cudaStream_t s = (cudaStream_t)stream;
    /* partials NULL: out2 already holds the statistics (data-parallel: every rank's) */
    if (partials && (st = launch_mean_std(x, n, partials, out2, s, err)) != MR_OK) return st;
    normalize_kernel<<<grid_for(n), THREADS, 0, s>>>(x, n, out2);
    MR_CUDA_LAUNCHED("the normalisation kernel", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------------ loss */

struct loss_inputs {
    const float *logits, *value, *old_logp, *adv, *old_value, *target;
    const uint8_t *__restrict__ action;
};

/* Sample i's terms; the row goes through registers. Returns its action. */
__device__ __forceinline__ int sample_terms(const loss_inputs &in, int na, int64_t i, double clip, mr_loss_terms *t) {
    float z[MR_MAX_ACTIONS];
#pragma unroll
    for (int j = 0; j < MR_MAX_ACTIONS; j++) z[j] = j < na ? in.logits[i * na + j] : 0.0f;
    const int a = in.action[i];
    mr_loss_terms_at(z, na, a, in.old_logp[i], in.adv[i], in.value[i], in.old_value[i], in.target[i], clip, t);
    return a;
}

__global__ void __launch_bounds__(THREADS)
loss_stage1_kernel(int B, const __grid_constant__ loss_inputs in, const mr_lossctl *__restrict__ ctl,
                   double *__restrict__ partials) {
    const int64_t lo = (int64_t)blockIdx.x * MR_LOSS_CHUNK;
    const int64_t hi = lo + MR_LOSS_CHUNK < B ? lo + MR_LOSS_CHUNK : B;
    const double clip = ctl->h.clip;
    const int na = ctl->h.num_actions;
    double acc[MR_LOSS_NACC], s[MR_LOSS_NACC];
#pragma unroll
    for (int k = 0; k < MR_LOSS_NACC; k++) acc[k] = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) {
        mr_loss_terms t;
        sample_terms(in, na, i, clip, &t);
        mr_loss_add(&t, clip, acc);
    }
    block_sums<MR_LOSS_NACC>(acc, s);
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < MR_LOSS_NACC; k++) partials[(int64_t)blockIdx.x * MR_LOSS_NACC + k] = s[k];
    }
}

__global__ void __launch_bounds__(THREADS)
loss_stage2_kernel(const double *__restrict__ partials, int nb, int B, mr_lossctl *ctl, mr_optctl *opt) {
    double s[MR_LOSS_NACC];
    stage2_sums<MR_LOSS_NACC>(partials, nb, s);
    if (threadIdx.x == 0) {
        mr_loss_finish(s, B, &ctl->h, &ctl->s);
        /* As the CPU trainer: a non-finite loss skips the optimizer step. */
        if (opt && !mr_finite_d(ctl->s.loss)) opt->s.found_inf = 1;
    }
}

__global__ void __launch_bounds__(THREADS)
loss_grad_kernel(int B, const __grid_constant__ loss_inputs in, const mr_lossctl *__restrict__ ctl,
                 const mr_optctl *__restrict__ opt, float *__restrict__ dlogits, float *__restrict__ dvalue) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    const double clip = ctl->h.clip, vf = ctl->h.vf_coef, dL_dH = ctl->s.dL_dH;
    const int na = ctl->h.num_actions;
    const int batch_max = ctl->h.value_max_of_means != 0, unclipped_mean = ctl->s.unclipped_mean;
    const double scale = opt ? (double)opt->s.loss_scale : 1.0;
    mr_loss_terms t;
    const int a = sample_terms(in, na, i, clip, &t);
    float dz[MR_MAX_ACTIONS], dv;
    mr_loss_grad_row(&t, na, a, dL_dH, vf, batch_max, unclipped_mean, 1.0 / (double)B, scale, dz, &dv);
#pragma unroll
    for (int k = 0; k < MR_MAX_ACTIONS; k++) if (k < na) dlogits[i * na + k] = dz[k];
    dvalue[i] = dv;
}

static int loss_blocks(int B) { return (B + MR_LOSS_CHUNK - 1) / MR_LOSS_CHUNK; }

extern "C" size_t mr_cuda_loss_partials(int B) {
    return (size_t)(B > 0 ? loss_blocks(B) : 1) * MR_LOSS_NACC;
}

extern "C" mr_status mr_cuda_lossctl_upload(mr_lossctl *d_ctl, const mr_lossctl *host, void *stream, mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(d_ctl, host, sizeof *host, cudaMemcpyHostToDevice, (cudaStream_t)stream),
                "uploading the loss control block", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_lossctl_upload_hyper(mr_lossctl *d_ctl, const mr_loss_hyper *host, void *stream,
                                                  mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(&d_ctl->h, host, sizeof *host, cudaMemcpyHostToDevice, (cudaStream_t)stream),
                "uploading the loss hyper-parameters", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_lossctl_download(const mr_lossctl *d_ctl, mr_lossctl *host, void *stream,
                                              mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(host, d_ctl, sizeof *host, cudaMemcpyDeviceToHost, (cudaStream_t)stream),
                "downloading the loss control block", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                                      const float *old_logp, const float *adv, const float *old_value,
                                      const float *target, mr_lossctl *d_ctl, mr_optctl *d_opt, double *partials,
                                      float *dlogits, float *dvalue, void *stream, mr_error *err) {
    const char *who = "mr_cuda_ppo_loss";
    if (B < 0) return mr_fail(err, MR_ERR_ARG, "%s: B = %d: accepted 0 or more samples", who, B);
    MR_CUDA_NEED(d_ctl, who, "d_ctl");
    cudaStream_t s = (cudaStream_t)stream;
    if (B == 0) {   /* as mr_ppo_loss: zero stats, nothing else (stage 2 over no partials) */
        loss_stage2_kernel<<<1, THREADS, 0, s>>>(partials, 0, 0, d_ctl, d_opt);
        MR_CUDA_LAUNCHED("the PPO loss kernel (pass 1, stage 2)", err);
        mr_ok(err);
        return MR_OK;
    }
    MR_CUDA_NEED(logits, who, "logits");
    MR_CUDA_NEED(value, who, "value");
    MR_CUDA_NEED(action, who, "action");
    MR_CUDA_NEED(old_logp, who, "old_logp");
    MR_CUDA_NEED(adv, who, "adv");
    MR_CUDA_NEED(old_value, who, "old_value");
    MR_CUDA_NEED(target, who, "target");
    MR_CUDA_NEED(partials, who, "partials");
    MR_CUDA_NEED(dlogits, who, "dlogits");
    MR_CUDA_NEED(dvalue, who, "dvalue");
    const loss_inputs in = {logits, value, old_logp, adv, old_value, target, action};
    const int nb = loss_blocks(B);
    loss_stage1_kernel<<<(unsigned)nb, THREADS, 0, s>>>(B, in, d_ctl, partials);
    MR_CUDA_LAUNCHED("the PPO loss kernel (pass 1, stage 1)", err);
    loss_stage2_kernel<<<1, THREADS, 0, s>>>(partials, nb, B, d_ctl, d_opt);
    MR_CUDA_LAUNCHED("the PPO loss kernel (pass 1, stage 2)", err);
    loss_grad_kernel<<<(unsigned)((B + THREADS - 1) / THREADS), THREADS, 0, s>>>(B, in, d_ctl, d_opt, dlogits,
                                                                                   dvalue);
    MR_CUDA_LAUNCHED("the PPO loss kernel (pass 2, gradients)", err);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------- the Gaussian and multi-discrete heads */

/* The same two passes with another head's per-sample terms (gauss_math.h,
 * multi_discrete_math.h): HEAD is MR_HEAD_GAUSS or MR_HEAD_MULTI_DISCRETE,
 * a template constant, so each kernel is that head's straight-line code. */
struct head_inputs {
    const float *logits, *value, *old_logp, *adv, *old_value, *target;
    const void *action;   /* (B, d) floats or (B, k) bytes */
    mr_act_head h;
};

/* Sample i's terms and gradient row (grad = 0: the terms only). */
template <int HEAD>
__device__ __forceinline__ void head_sample(const head_inputs &in, int64_t i, double clip, int grad, double dL_dH,
                                            double vf, int batch_max, int unclipped_mean, double invB, double scale,
                                            mr_loss_terms *out, float *__restrict__ dlogits, float *__restrict__ dvalue) {
    const mr_act_head &h = in.h;
    if (HEAD == MR_HEAD_GAUSS) {
        const int d = h.n;
        float m[MR_GAUSS_MAX_DIMS], ls[MR_GAUSS_MAX_DIMS], x[MR_GAUSS_MAX_DIMS];
        const float *act = (const float *)in.action;
#pragma unroll
        for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) {
            m[j] = j < d ? in.logits[i * 2 * d + j] : 0.0f;
            ls[j] = j < d ? in.logits[i * 2 * d + d + j] : 0.0f;
            x[j] = j < d ? act[i * d + j] : 0.0f;
        }
        mr_gauss_loss_terms_at(h.squash, m, ls, h.low, h.high, d, x, in.old_logp[i], in.adv[i], in.value[i],
                               in.old_value[i], in.target[i], clip, out);
        if (!grad) return;
        float dm[MR_GAUSS_MAX_DIMS], dls[MR_GAUSS_MAX_DIMS], dv;
        mr_gauss_grad_row(out, m, ls, d, x, dL_dH, vf, batch_max, unclipped_mean, invB, scale, dm, dls, &dv);
        for (int j = 0; j < d; j++) {
            dlogits[i * 2 * d + j] = dm[j];
            dlogits[i * 2 * d + d + j] = dls[j];
        }
        dvalue[i] = dv;
    } else {
        const int k = h.n, L = h.logits;
        const uint8_t *act = (const uint8_t *)in.action + i * k;
        mr_md_terms o;   /* 2 KiB of log-probabilities: local memory */
        mr_md_loss_terms_at(in.logits + i * L, h.nvec, k, act, in.old_logp[i], in.adv[i], in.value[i],
                            in.old_value[i], in.target[i], clip, &o);
        *out = o.t;
        if (!grad) return;
        float dv;
        mr_md_grad_row(&o, h.nvec, k, act, dL_dH, vf, batch_max, unclipped_mean, invB, scale, dlogits + i * L, &dv);
        dvalue[i] = dv;
    }
}

template <int HEAD>
__global__ void __launch_bounds__(THREADS)
head_stage1_kernel(int B, const __grid_constant__ head_inputs in, const mr_lossctl *__restrict__ ctl,
                   double *__restrict__ partials) {
    const int64_t lo = (int64_t)blockIdx.x * MR_LOSS_CHUNK;
    const int64_t hi = lo + MR_LOSS_CHUNK < B ? lo + MR_LOSS_CHUNK : B;
    const double clip = ctl->h.clip;
    double acc[MR_LOSS_NACC], s[MR_LOSS_NACC];
#pragma unroll
    for (int k = 0; k < MR_LOSS_NACC; k++) acc[k] = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) {
        mr_loss_terms t;
        head_sample<HEAD>(in, i, clip, 0, 0.0, 0.0, 0, 0, 0.0, 0.0, &t, NULL, NULL);
        mr_loss_add(&t, clip, acc);
    }
    block_sums<MR_LOSS_NACC>(acc, s);
    if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 0; k < MR_LOSS_NACC; k++) partials[(int64_t)blockIdx.x * MR_LOSS_NACC + k] = s[k];
    }
}

template <int HEAD>
__global__ void __launch_bounds__(THREADS)
head_grad_kernel(int B, const __grid_constant__ head_inputs in, const mr_lossctl *__restrict__ ctl,
                 const mr_optctl *__restrict__ opt, float *__restrict__ dlogits, float *__restrict__ dvalue) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    const double scale = opt ? (double)opt->s.loss_scale : 1.0;
    mr_loss_terms t;
    head_sample<HEAD>(in, i, ctl->h.clip, 1, ctl->s.dL_dH, ctl->h.vf_coef, ctl->h.value_max_of_means != 0,
                      ctl->s.unclipped_mean, 1.0 / (double)B, scale, &t, dlogits, dvalue);
}

template <int HEAD>
static mr_status head_loss(const char *who, int B, const head_inputs &in, mr_lossctl *d_ctl, mr_optctl *d_opt,
                           double *partials, float *dlogits, float *dvalue, void *stream, mr_error *err) {
    if (B < 0) return mr_fail(err, MR_ERR_ARG, "%s: B = %d: accepted 0 or more samples", who, B);
    const int max = HEAD == MR_HEAD_GAUSS ? MR_GAUSS_MAX_DIMS : MR_MD_MAX_HEADS;
    if (in.h.kind != HEAD || in.h.n < 1 || in.h.n > max)
        return mr_fail(err, MR_ERR_ARG, "%s: a head of kind %d with %d components: accepted kind %d, 1 .. %d", who,
                       in.h.kind, in.h.n, HEAD, max);
    MR_CUDA_NEED(d_ctl, who, "d_ctl");
    cudaStream_t s = (cudaStream_t)stream;
    if (B == 0) {
        loss_stage2_kernel<<<1, THREADS, 0, s>>>(partials, 0, 0, d_ctl, d_opt);
        MR_CUDA_LAUNCHED("the PPO loss kernel (pass 1, stage 2)", err);
        mr_ok(err);
        return MR_OK;
    }
    MR_CUDA_NEED(in.logits, who, "logits");
    MR_CUDA_NEED(in.value, who, "value");
    MR_CUDA_NEED(in.action, who, "action");
    MR_CUDA_NEED(in.old_logp, who, "old_logp");
    MR_CUDA_NEED(in.adv, who, "adv");
    MR_CUDA_NEED(in.old_value, who, "old_value");
    MR_CUDA_NEED(in.target, who, "target");
    MR_CUDA_NEED(partials, who, "partials");
    MR_CUDA_NEED(dlogits, who, "dlogits");
    MR_CUDA_NEED(dvalue, who, "dvalue");
    const int nb = loss_blocks(B);
    head_stage1_kernel<HEAD><<<(unsigned)nb, THREADS, 0, s>>>(B, in, d_ctl, partials);
    MR_CUDA_LAUNCHED("the PPO loss kernel of the head (pass 1, stage 1)", err);
    loss_stage2_kernel<<<1, THREADS, 0, s>>>(partials, nb, B, d_ctl, d_opt);
    MR_CUDA_LAUNCHED("the PPO loss kernel (pass 1, stage 2)", err);
    head_grad_kernel<HEAD><<<(unsigned)((B + THREADS - 1) / THREADS), THREADS, 0, s>>>(B, in, d_ctl, d_opt, dlogits,
                                                                                      dvalue);
    MR_CUDA_LAUNCHED("the PPO loss kernel of the head (pass 2, gradients)", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_ppo_loss_box(int B, const mr_act_head *h, const float *logits, const float *value,
                                          const float *action, const float *old_logp, const float *adv,
                                          const float *old_value, const float *target, mr_lossctl *d_ctl,
                                          mr_optctl *d_opt, double *partials, float *dlogits, float *dvalue,
                                          void *stream, mr_error *err) {
    if (!h) return mr_fail(err, MR_ERR_ARG, "mr_cuda_ppo_loss_box: the head is missing");
    head_inputs in = {logits, value, old_logp, adv, old_value, target, action, *h};
    return head_loss<MR_HEAD_GAUSS>("mr_cuda_ppo_loss_box", B, in, d_ctl, d_opt, partials, dlogits, dvalue, stream,
                                    err);
}

extern "C" mr_status mr_cuda_ppo_loss_md(int B, const mr_act_head *h, const float *logits, const float *value,
                                         const uint8_t *action, const float *old_logp, const float *adv,
                                         const float *old_value, const float *target, mr_lossctl *d_ctl,
                                         mr_optctl *d_opt, double *partials, float *dlogits, float *dvalue,
                                         void *stream, mr_error *err) {
    if (!h) return mr_fail(err, MR_ERR_ARG, "mr_cuda_ppo_loss_md: the head is missing");
    head_inputs in = {logits, value, old_logp, adv, old_value, target, action, *h};
    return head_loss<MR_HEAD_MULTI_DISCRETE>("mr_cuda_ppo_loss_md", B, in, d_ctl, d_opt, partials, dlogits, dvalue,
                                             stream, err);
}

/* ---------------------------------------------------------------- PopArt */

__global__ void __launch_bounds__(THREADS)
popart_kernel(mr_popart_ctl *pa, int64_t n, float *__restrict__ w, float *__restrict__ b, int k,
              float *__restrict__ mw, float *__restrict__ vw, float *__restrict__ mb, float *__restrict__ vb) {
    __shared__ double sh_s, sh_s2;
    if (threadIdx.x == 0) {
        mr_popart_rescale r;
        mr_popart_ctl_step(pa, n, &r);
        *b = mr_popart_bias(*b, &r);
        if (mb) *mb = mr_popart_scale(*mb, r.s);
        if (vb) *vb = mr_popart_scale(*vb, r.s2);
        sh_s = r.s;
        sh_s2 = r.s2;
    }
    __syncthreads();
    const double s = sh_s, s2 = sh_s2;
    for (int i = threadIdx.x; i < k; i += THREADS) {
        w[i] = mr_popart_scale(w[i], s);
        if (mw) mw[i] = mr_popart_scale(mw[i], s);
        if (vw) vw[i] = mr_popart_scale(vw[i], s2);
    }
}

extern "C" mr_status mr_cuda_popart_upload(mr_popart_ctl *d_pa, const mr_popart_ctl *host, void *stream,
                                           mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(d_pa, host, sizeof *host, cudaMemcpyHostToDevice, (cudaStream_t)stream),
                "uploading the PopArt statistics", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_popart_download(const mr_popart_ctl *d_pa, mr_popart_ctl *host, void *stream,
                                             mr_error *err) {
    MR_CUDA_TRY(cudaMemcpyAsync(host, d_pa, sizeof *host, cudaMemcpyDeviceToHost, (cudaStream_t)stream),
                "downloading the PopArt statistics", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_popart_update(mr_popart_ctl *d_pa, const float *returns, int64_t n, double *partials,
                                           float *w, float *b, int k, float *adam_m_w, float *adam_v_w,
                                           float *adam_m_b, float *adam_v_b, void *stream, mr_error *err) {
    const char *who = "mr_cuda_popart_update";
    mr_status st = check_n(n, who, err);
    if (st != MR_OK) return st;
    if (k < 1) return mr_fail(err, MR_ERR_ARG, "%s: k = %d: the last critic layer needs 1 or more inputs", who, k);
    MR_CUDA_NEED(d_pa, who, "d_pa");
    if (n == 0) { mr_ok(err); return MR_OK; }
    MR_CUDA_NEED(partials, who, "partials");
    MR_CUDA_NEED(w, who, "w");
    MR_CUDA_NEED(b, who, "b");
    cudaStream_t s = (cudaStream_t)stream;
    /* returns NULL: d_pa->batch already holds the statistics of n returns (data-parallel: every rank's) */
    if (returns && (st = launch_mean_std(returns, n, partials, d_pa->batch, s, err)) != MR_OK) return st;
    popart_kernel<<<1, THREADS, 0, s>>>(d_pa, n, w, b, k, adam_m_w, adam_v_w, adam_m_b, adam_v_b);
    MR_CUDA_LAUNCHED("the PopArt kernel", err);
    mr_ok(err);
    return MR_OK;
}

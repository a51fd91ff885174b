/*
 * ppo_cuda.h - the C entry points of kernels/ppo.cu: GAE, action sampling,
 * the deterministic gradient-norm reduction, fused Adam, and the fp16
 * dynamic loss scaler, all asynchronous on a caller's stream with every
 * decision (clip factor, skip, scale) taken on the device: an optimizer step
 * needs no host round-trip, so it can be captured in a CUDA graph.
 *
 * Every pointer argument is device memory unless it says "host". Streams are
 * void * (a cudaStream_t; NULL = the legacy default stream). Each function
 * returns MR_OK or an mr_error naming the CUDA failure; errors of the kernels
 * themselves surface at the next synchronisation (mr_cuda_stream_sync).
 *
 * One optimizer step, after backward has written the (loss-scaled) gradients:
 *   mr_cuda_opt_begin          found_inf = 0              (before backward, or here)
 *   mr_cuda_check_finite[_half] optional, on other tensors (fp16 activations' grads)
 *   mr_cuda_opt_step            = grad_sumsq + prepare + adam + scaler_update:
 *     grad_sumsq    two-stage deterministic sum of squares per group
 *     prepare       (1 thread) found_inf if a sum is not finite; norms,
 *                   per-group multiplier clip/scale; Adam step and scalars
 *     adam          skipped entirely when found_inf; else p, m, v updated
 *     scaler_update (1 thread) backoff on found_inf, growth after an interval
 * The CPU references are ppo.c's mr_gae, mr_sample_actions, mr_grad_norm,
 * mr_clip_factor and mr_adam_step (spec/c/test_cuda_ppo.c compares them).
 */
#ifndef MR_PPO_CUDA_H
#define MR_PPO_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"
#include "optimizer_math.h"
#include "gae_math.h"
#include "categorical_math.h"
#include "act_head.h"   /* mr_act_head: the Gaussian and multi-discrete heads */

#ifdef __cplusplus
extern "C" {
#endif

#ifdef MOONRL_HAVE_CUDA
/* reward, value, done, adv, ret: (T,N); last_value: (N). As mr_gae. */
mr_status mr_cuda_gae(int T, int N, const float *reward, const float *value, const float *last_value,
                      const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                      mr_error *err);

/* logits (N,na), u (N) in [0,1) -> action (N), logp (N). As mr_sample_actions. */
mr_status mr_cuda_sample_actions(int N, int na, const float *logits, const float *u, uint8_t *action, float *logp,
                                 void *stream, mr_error *err);

/* A box of d = h->n floats (h: host memory, passed to the kernel by value):
 * logits (N, 2d) = [mean, log_std], eps (N, d) standard normals -> x (N, d)
 * the stored samples, env_action (N, d) (may be NULL) and logp (N). As
 * mr_sample_box. */
mr_status mr_cuda_sample_box(int N, const mr_act_head *h, const float *logits, const float *eps, float *x,
                             float *env_action, float *logp, void *stream, mr_error *err);
/* Multi-discrete, k = h->n heads: logits (N, h->logits), u (N, k) ->
 * action (N, k) bytes, logp (N). As mr_sample_md. */
mr_status mr_cuda_sample_md(int N, const mr_act_head *h, const float *logits, const float *u, uint8_t *action,
                            float *logp, void *stream, mr_error *err);

/* The control block: host <-> device copies (asynchronous; `host` should be
 * pinned for the copy to overlap, and must stay valid until it completes). */
mr_status mr_cuda_optctl_upload(mr_optctl *d_ctl, const mr_optctl *host, void *stream, mr_error *err);
/* Only the hyper-parameters: the device's state (scale, step) is kept. */
mr_status mr_cuda_optctl_upload_hyper(mr_optctl *d_ctl, const mr_opt_hyper *host, void *stream, mr_error *err);
mr_status mr_cuda_optctl_download(const mr_optctl *d_ctl, mr_optctl *host, void *stream, mr_error *err);

mr_status mr_cuda_opt_begin(mr_optctl *d_ctl, void *stream, mr_error *err);
/* Sets found_inf when any of x[0, n) is inf or NaN. */
mr_status mr_cuda_check_finite(const float *x, size_t n, mr_optctl *d_ctl, void *stream, mr_error *err);
mr_status mr_cuda_check_finite_half(const uint16_t *x, size_t n, mr_optctl *d_ctl, void *stream, mr_error *err);

/* Doubles of scratch the reduction needs: G->block_off[G->n]. */
size_t mr_cuda_opt_partials(const mr_opt_groups *G);
/* d_ctl->s.sumsq[g] = sum of grad^2 over group g; partials: mr_cuda_opt_partials doubles. */
mr_status mr_cuda_grad_sumsq(const float *grad, const mr_opt_groups *G, double *partials, mr_optctl *d_ctl,
                             void *stream, mr_error *err);
mr_status mr_cuda_opt_prepare(mr_optctl *d_ctl, int ngroups, void *stream, mr_error *err);
/* param, grad, m, v: G->off[G->n] floats. Does nothing when found_inf. */
mr_status mr_cuda_adam(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                       const mr_optctl *d_ctl, void *stream, mr_error *err);
mr_status mr_cuda_scaler_update(mr_optctl *d_ctl, void *stream, mr_error *err);
/* grad_sumsq, prepare, adam, scaler_update in order. */
mr_status mr_cuda_opt_step(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                           double *partials, mr_optctl *d_ctl, void *stream, mr_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_PPO_CUDA_H */

/*
 * ppo_loss_cuda.h - the C entry points of kernels/ppo_loss.cu: advantage
 * normalisation, the PPO loss with its per-sample gradients, and PopArt, all
 * asynchronous on a caller's stream, every input and result in device memory:
 * no host round-trip, so an update can be captured in a CUDA graph.
 *
 * Every pointer argument is device memory unless it says "host". Streams are
 * void * (a cudaStream_t; NULL = the legacy default stream). Each function
 * returns MR_OK or an mr_error (MR_ERR_ARG for a bad argument, checked before
 * any launch; MR_ERR_BACKEND naming the CUDA failure); errors inside the
 * kernels surface at the next synchronisation (mr_cuda_stream_sync).
 *
 * One update, after GAE (mr_cuda_gae) has written adv and ret (B = T*N):
 *   mr_cuda_popart_update   batch mean/std of ret; running statistics; rescale
 *                           of the critic's last layer and its Adam moments
 *   mr_cuda_normalize       adv = (adv - mean) / (std + 1e-8)
 * then per optimizer step, on a gathered minibatch (old values and targets in
 * the current PopArt space, as the CPU trainer's gather):
 *   mr_cuda_opt_begin       (ppo_cuda.h) found_inf = 0
 *   mr_cuda_ppo_loss        stats -> d_ctl->s; dlogits, dvalue x loss scale;
 *                           a non-finite loss sets found_inf (the step is skipped)
 *   backward, mr_cuda_opt_step (ppo_cuda.h)
 * The CPU references are ppo.c's mr_normalize, mr_ppo_loss and
 * mr_popart_update (spec/c/test_cuda_loss.c compares them).
 */
#ifndef MR_PPO_LOSS_CUDA_H
#define MR_PPO_LOSS_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"
#include "ppo_loss_math.h"
#include "act_head.h"   /* mr_act_head: the Gaussian and multi-discrete heads */

#ifdef __cplusplus
extern "C" {
#endif

/* Host setup (mr_loss_hyper_set, mr_popart_ctl_set / _get: the control
 * blocks from the host's types) is in ppo_loss_math.h. */

#ifdef MOONRL_HAVE_CUDA
/* Doubles of scratch ("partials") each reduction needs; one buffer of the
 * larger serves all of them (they run in stream order). */
size_t mr_cuda_mean_std_partials(int64_t n);
size_t mr_cuda_loss_partials(int B);

/* out2[0] = mean, out2[1] = unbiased std of x[0, n) (n < 2: std 0), as
 * mr_mean_std, in the fixed order of mr_mean_std_emulate. out2: 2 doubles. */
mr_status mr_cuda_mean_std(const float *x, int64_t n, double *partials, double *out2, void *stream,
                           mr_error *err);
/* In place: x = (x - mean) / (std + 1e-8), as mr_normalize; the statistics
 * used land in out2 (mean, std). n == 0 does nothing. */
mr_status mr_cuda_normalize(float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err);

/* The loss control block: host <-> device copies (asynchronous; `host` should
 * be pinned for the copy to overlap, and must stay valid until it completes). */
mr_status mr_cuda_lossctl_upload(mr_lossctl *d_ctl, const mr_lossctl *host, void *stream, mr_error *err);
/* Only the hyper-parameters (once per update: clip and ent_coef follow schedules). */
mr_status mr_cuda_lossctl_upload_hyper(mr_lossctl *d_ctl, const mr_loss_hyper *host, void *stream, mr_error *err);
mr_status mr_cuda_lossctl_download(const mr_lossctl *d_ctl, mr_lossctl *host, void *stream, mr_error *err);

/* The PPO loss of mr_ppo_loss (ppo.h, every contract there) for B samples:
 * logits (B,8), value (B) normalised, action (B) u8, old_logp (B), adv (B)
 * normalised, old_value (B) and target (B) in the current normalised space.
 * Hyper-parameters from d_ctl->h; stats into d_ctl->s. dlogits (B,8) and
 * dvalue (B) are the gradient of the scalar loss times d_opt->s.loss_scale
 * (the fp16 scaler's; d_opt may be NULL: scale 1). When d_opt is given, a
 * non-finite loss sets d_opt->s.found_inf, so the step is skipped as the CPU
 * trainer skips it (call mr_cuda_opt_begin before this, not after).
 * partials: mr_cuda_loss_partials(B) doubles. B == 0 zeroes the stats. */
mr_status mr_cuda_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                           const float *old_logp, const float *adv, const float *old_value, const float *target,
                           mr_lossctl *d_ctl, mr_optctl *d_opt, double *partials, float *dlogits, float *dvalue,
                           void *stream, mr_error *err);

/* The same loss for a box (h->kind MR_HEAD_GAUSS, as mr_ppo_loss_box:
 * logits (B, 2d), action (B, d) floats) or multi-discrete actions
 * (MR_HEAD_MULTI_DISCRETE, as mr_ppo_loss_md: logits (B, h->logits),
 * action (B, k) bytes); h: host memory, passed to the kernels by value.
 * Every other argument and the two passes as mr_cuda_ppo_loss. */
mr_status mr_cuda_ppo_loss_box(int B, const mr_act_head *h, const float *logits, const float *value,
                               const float *action, const float *old_logp, const float *adv, const float *old_value,
                               const float *target, mr_lossctl *d_ctl, mr_optctl *d_opt, double *partials,
                               float *dlogits, float *dvalue, void *stream, mr_error *err);
mr_status mr_cuda_ppo_loss_md(int B, const mr_act_head *h, const float *logits, const float *value,
                              const uint8_t *action, const float *old_logp, const float *adv, const float *old_value,
                              const float *target, mr_lossctl *d_ctl, mr_optctl *d_opt, double *partials,
                              float *dlogits, float *dvalue, void *stream, mr_error *err);

mr_status mr_cuda_popart_upload(mr_popart_ctl *d_pa, const mr_popart_ctl *host, void *stream, mr_error *err);
mr_status mr_cuda_popart_download(const mr_popart_ctl *d_pa, mr_popart_ctl *host, void *stream, mr_error *err);

/* mr_popart_update on the device: the batch mean and std of returns (n, in
 * return units) into d_pa->batch, then one block updates the running
 * statistics (beta_min from d_pa) and rescales the last critic layer: w (k),
 * b (1) and their Adam moments m_w, v_w (k), m_b, v_b (1); any of the four
 * Adam pointers may be NULL. n == 0 changes nothing. partials:
 * mr_cuda_mean_std_partials(n) doubles. */
mr_status mr_cuda_popart_update(mr_popart_ctl *d_pa, const float *returns, int64_t n, double *partials, float *w,
                                float *b, int k, float *adam_m_w, float *adam_v_w, float *adam_m_b,
                                float *adam_v_b, void *stream, mr_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_PPO_LOSS_CUDA_H */

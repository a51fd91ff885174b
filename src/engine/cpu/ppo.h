/*
 * ppo.h - the PPO math of the CPU engine as pure functions over raw arrays:
 * schedules, GAE, advantage normalisation, PopArt, the clipped PPO loss with
 * its gradient, action sampling, gradient norm / clipping, Adam and explained
 * variance. Each is a CPU loop (or reduction) over the per-element functions
 * of shared/gae_math.h, categorical_math.h, optimizer_math.h and
 * ppo_loss_math.h, which the CUDA kernels run too.
 *
 * What this file deliberately is not: it holds no trainer state, allocates
 * nothing and knows nothing of the network. The trainer owns the buffers and
 * calls these in order. It is the reference the CUDA kernels are tested
 * against, so it favours clarity and double-precision accumulation over speed.
 *
 * Determinism: every batch reduction (sums, means, norms, statistics) is
 * accumulated in double over fixed blocks of MR_PPO_BLOCK elements and the
 * block partials are added in block order, so results are bit-identical for
 * any OpenMP thread count. Per-sample loops use OpenMP where it pays.
 *
 * Layouts: (T,N) arrays are row-major, element (t,n) at t*N + n. Logits are
 * (B, MR_MAX_ACTIONS) row-major.
 */
#ifndef MR_PPO_H
#define MR_PPO_H
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"
#include "ppo_loss_math.h"   /* the elements; MR_ADV_EPS, MR_POPART_MIN_STD, MR_CLIP_EPS */
#include "gae_math.h"
#include "categorical_math.h"  /* the categorical head's sampling */
#include "act_head.h"        /* the heads: Gaussian (gauss_math.h), multi-discrete (multi_discrete_math.h) */

#define MR_PPO_BLOCK 2048       /* elements per partial sum of a reduction */

/* --------------------------------------------------------------------- GAE */
/* reward, value, done, adv, ret: (T,N); last_value: (N).
 * value is in return units (denormalised: mean + std * raw).
 * done[t] != 0 means the episode ended after step t (terminated OR truncated,
 * ENV_SPEC (ours)): it cuts both the bootstrap from step t to t+1 and the
 * advantage recursion. For t = T-1 the next value is last_value.
 *   delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t
 *   A_t     = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}
 *   ret_t   = A_t + V_t
 * Accumulated in double per environment; adv and ret may not alias inputs. */
void mr_gae(int T, int N, const float *reward, const float *value,
            const float *last_value, const uint8_t *done, float gamma, float lambda,
            float *adv, float *ret);

/* ----------------------------------------------------------- normalisation */
/* In place: x = (x - mean) / (std + 1e-8), std unbiased (as torch.std).
 * mean_out / std_out (either may be NULL) receive the statistics used.
 * n < 2: std is taken as 0 (torch would give NaN). n == 0 does nothing. */
void mr_normalize(float *x, size_t n, double *mean_out, double *std_out);
/* The same with the statistics given (data-parallel: every rank's). */
void mr_normalize_with(float *x, size_t n, double mean, double sd);

/* Mean and unbiased std (n < 2: std 0) of x, two-pass, deterministic. */
void mr_mean_std(const float *x, size_t n, double *mean_out, double *std_out);

/* ------------------------------------------------------------------ PopArt */
/* mr_popart, mr_popart_init, mr_popart_ctl_set/get: ppo_loss_math.h */
/* One PopArt step before an update, exactly as ENV_SPEC "Policy" writes it:
 *   count += 1; beta = max(1/count, beta_min)
 *   bmean, bstd = mean and unbiased std of returns (n), bstd >= 1e-4
 *   mean' = (1-beta) mean + beta bmean
 *   var'  = (1-beta) std^2 + beta bstd^2       (old std^2 and batch std^2,
 *           not a blend of second moments: the spec's formula, kept as is)
 *   std'  = max(sqrt(var'), 1e-4)
 * and rescales the last critic layer so every output is unchanged:
 *   w *= std/std';  b = (b*std + mean - mean') / std'
 *   m_w, m_b *= std/std';  v_w, v_b *= (std/std')^2   (Adam moments)
 * w, adam_m_w, adam_v_w: k floats; b, adam_m_b, adam_v_b: 1 float. Any of the
 * Adam pointers may be NULL (no optimizer state yet). returns are in return
 * units. n < 2 takes bstd = 1e-4 (the clamp of an undefined std); n == 0
 * changes nothing. */
void mr_popart_update(mr_popart *p, const float *returns, size_t n, double beta_min,
                      float *w, float *b, int k,
                      float *adam_m_w, float *adam_v_w, float *adam_m_b, float *adam_v_b);

/* ---------------------------------------------------------------- PPO loss */
/* mr_ppo_coefs, mr_ppo_stats, mr_loss_hyper_set: ppo_loss_math.h */
/* Forward and gradient of
 *   loss = policy_loss + vf_coef * value_loss - ent_coef * H
 *          + ent_floor_coef * relu(ent_floor - H)
 * for a minibatch of B samples.
 *   logits (B,8): current policy;  value (B): current raw value (normalised);
 *   action (B) in [0, na);  old_logp (B): log pi_old(a);  adv (B): advantages,
 *   already normalised;  old_value (B): the rollout's value in the CURRENT
 *   normalised space;  target (B): (R - mean) / std with current PopArt.
 * r = exp(logp(a) - old_logp). v_clipped = old + clamp(v - old, -c, c).
 * Squared errors are plain (v - R)^2 - torch's F.mse_loss, no 1/2 factor.
 * Outputs: dlogits (B,8) = dloss/dlogits, dvalue (B) = dloss/dvalue, both
 * already carrying the 1/B of every mean (they are the gradient of the scalar
 * loss); st (may be NULL). Where torch.max/min/clamp/relu have a kink this
 * follows torch: at a tie the unclipped branch takes the gradient, clamp
 * passes it at its bounds, relu does not at 0. Per-sample math in double.
 * No scratch: a first pass reduces the batch means, a second pass writes the
 * gradients. B == 0 writes zero stats. */
void mr_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                 const float *old_logp, const float *adv, const float *old_value,
                 const float *target, const mr_ppo_coefs *c,
                 float *dlogits, float *dvalue, mr_ppo_stats *st);

/* Rollout sampling by inverse CDF: mr_sample_row (categorical_math.h, its exact
 * float order there) on each row, so the CUDA kernel makes the same choice
 * (up to the last bits of expf).
 * logits (N,na), u (N) uniform in [0,1); action, logp (N). */
void mr_sample_actions(int N, int na, const float *logits, const float *u, uint8_t *action,
                       float *logp);

/* The Gaussian head of a box of d = h->n floats (gauss_math.h; h->squash
 * clip or tanh, h->low / h->high the bounds): logits (B, 2d) rows [mean,
 * log_std], actions (B, d) the stored samples x as drawn (in tanh mode the
 * pre-tanh u). The loss is mr_ppo_loss's with the Gaussian's
 * log-probability (tanh: minus log |d action / d x|) and entropy; dlogits
 * (B, 2d) = [dmean, dlog_std] per row (the network sums the log-std rows
 * into its parameter). */
void mr_ppo_loss_box(int B, const mr_act_head *h, const float *logits, const float *value, const float *action,
                     const float *old_logp, const float *adv, const float *old_value, const float *target,
                     const mr_ppo_coefs *c, float *dlogits, float *dvalue, mr_ppo_stats *st);
/* x = mean + exp(log_std) eps (the stored sample), logp its
 * log-probability, env_action (N, d) what the environment gets
 * (mr_gauss_env_action: x clipped, or squashed by tanh; may be NULL);
 * eps (N, d). */
void mr_sample_box(int N, const mr_act_head *h, const float *logits, const float *eps, float *x, float *env_action,
                   float *logp);

/* The multi-discrete head (multi_discrete_math.h) of k = h->n heads of
 * h->nvec[i] choices: logits (B, L) rows, L = sum nvec, split into the k
 * groups; actions (B, k) bytes. The loss is mr_ppo_loss's with the joint
 * log-probability (the heads' sum) and the summed entropy; dlogits (B, L). */
void mr_ppo_loss_md(int B, const mr_act_head *h, const float *logits, const float *value, const uint8_t *action,
                    const float *old_logp, const float *adv, const float *old_value, const float *target,
                    const mr_ppo_coefs *c, float *dlogits, float *dvalue, mr_ppo_stats *st);
/* Head i of row n by inverse CDF from u[n * k + i] (uniforms in [0, 1]):
 * action (N, k) bytes, logp (N) the joint log-probability. */
void mr_sample_md(int N, const mr_act_head *h, const float *logits, const float *u, uint8_t *action, float *logp);

/* ------------------------------------------------------ gradients and Adam */
/* sqrt(sum g^2), deterministic. */
double mr_grad_norm(const float *g, size_t n);

/* torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)).
 * A NaN norm gives NaN (not 1), so a broken gradient is not hidden.
 * max_norm <= 0 means no clipping: 1. */
double mr_clip_factor(double norm, double max_norm);

/* torch.optim.Adam, no weight decay, no amsgrad, for one parameter tensor:
 *   g = grad * grad_scale
 *   m = m + (1 - beta1) (g - m);  v = beta2 v + (1 - beta2) g^2
 *   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * step is 1-based (the count after this step). The scalars are double so
 * that 1 - beta and the bias corrections are formed as torch forms them
 * (from Python floats); the element math is float. */
void mr_adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                  double lr, double beta1, double beta2, double eps, double grad_scale,
                  int64_t step);

#endif

/*
 * gauss_math.h - the diagonal Gaussian policy head for continuous (box)
 * actions, per sample, written once as MR_HD functions (plain C, host+device)
 * in the style of ppo_loss_math.h's categorical head.
 *
 * The head: mean (d) from the network, log_std (d) a learned parameter vector
 * (state-independent), d <= MR_GAUSS_MAX_DIMS; action bounds lo, hi (d) per
 * dimension. log_std is clamped to [MR_GAUSS_LOG_STD_MIN, MR_GAUSS_LOG_STD_MAX]
 * wherever it is used (std = exp(clamp(log_std))).
 *
 * The stored sample x = mean + std * eps (eps standard normal) is the same in
 * both modes; what differs is what the environment receives and the
 * log-probability of x:
 *   MR_GAUSS_CLIP  env gets clip(x, lo, hi); logp = the Gaussian's logp of x
 *                  (CleanRL / SB3: the clip is part of the environment, so
 *                  the stored, unclipped x is what the policy sampled).
 *   MR_GAUSS_TANH  env gets lo + (hi - lo) (tanh(x) + 1) / 2; logp = the
 *                  Gaussian's logp of x minus log |d action / d x| =
 *                  sum_j log((hi-lo)/2) + log(1 - tanh^2 x_j). Storing x (the
 *                  pre-tanh u), not the action, means the update never takes
 *                  atanh of an action that rounded to +-1.
 *
 * Float math; every sum runs j = 0 .. d-1 in that order on every device (the
 * loops run to the compile-time bound with j < d inside, so a GPU keeps the
 * rows in registers). Transcendentals (expf, logf, tanhf, ...) and nvcc's FMA
 * contraction may differ in the last bit between host and device.
 * The PPO terms reuse ppo_loss_math.h (ratio, clip, value loss, sums), see
 * mr_gauss_loss_terms_at.
 */
#ifndef MR_GAUSS_MATH_H
#define MR_GAUSS_MATH_H
#include <math.h>
#include <stdint.h>
#include "ppo_loss_math.h"   /* MR_HD, MR_UNROLL, mr_loss_terms, mr_loss_terms_at, mr_loss_grad_row; rng.h */

#define MR_GAUSS_MAX_DIMS 8
#define MR_GAUSS_LOG_STD_MIN (-20.0f)   /* std >= 2.1e-9: logp stays finite in float */
#define MR_GAUSS_LOG_STD_MAX 2.0f       /* std <= 7.4: exploration cannot blow up */

enum { MR_GAUSS_CLIP = 0, MR_GAUSS_TANH = 1 };   /* the mode: how a sample becomes the env's action */

#define MR_GAUSS_LOG_2PI_HALF 0.918938533204672742f   /* log(2 pi) / 2 */
#define MR_GAUSS_ENT_CONST 1.41893853320467274f        /* (1 + log(2 pi)) / 2, entropy per dimension */
#define MR_GAUSS_LOG2 0.693147180559945309f
#define MR_GAUSS_2PI 6.28318530717958648f

/* --------------------------------------------------------------- log_std */

/* log_std as the forward uses it: clamped to [MIN, MAX] (a NaN stays NaN). */
MR_HD float mr_gauss_log_std(float ls) {
    return ls < MR_GAUSS_LOG_STD_MIN ? MR_GAUSS_LOG_STD_MIN : (ls > MR_GAUSS_LOG_STD_MAX ? MR_GAUSS_LOG_STD_MAX : ls);
}
/* d clamp(ls) / d ls: 1 inside [MIN, MAX] (the bounds included, as torch.clamp
 * passes the gradient at a tie), 0 outside: a parameter pushed past a bound
 * gets no gradient from the head (Adam's momentum may still move it back). */
MR_HD float mr_gauss_dlog_std(float ls) {
    return (ls >= MR_GAUSS_LOG_STD_MIN && ls <= MR_GAUSS_LOG_STD_MAX) ? 1.0f : 0.0f;
}

/* -------------------------------------------------------------- sampling */

/* Box-Muller: two independent standard normals from two uniforms,
 * u1 in (0, 1] (u1 = 0 would be log 0) and u2 in [0, 1):
 *   r = sqrt(-2 log u1);  n0 = r cos(2 pi u2),  n1 = r sin(2 pi u2). */
MR_HD void mr_gauss_box_muller(float u1, float u2, float *n0, float *n1) {
    const float r = sqrtf(-2.0f * logf(u1));
    const float th = MR_GAUSS_2PI * u2;
    *n0 = r * cosf(th);
    *n1 = r * sinf(th);
}

/* d standard normals from the engine's rng (rng.h): pair p takes the draws
 * i0 + 2p (u1 = 1 - uniform, in (0, 1]: rng's uniforms are in [0, 1)) and
 * i0 + 2p + 1 (u2); an odd d drops the last pair's second normal. The 24-bit
 * uniforms cap |eps| at sqrt(2 * 24 log 2) = 5.77 (probability 8e-9 lost). */
MR_HD void mr_gauss_normals(uint64_t seed, uint32_t env, uint32_t tick, uint32_t purpose, uint32_t i0, int d,
                            float *eps) {
    for (int p = 0; 2 * p < d; p++) {
        const float u1 = 1.0f - mr_rng_uniform(seed, env, tick, purpose, i0 + 2u * (uint32_t)p);
        const float u2 = mr_rng_uniform(seed, env, tick, purpose, i0 + 2u * (uint32_t)p + 1u);
        float n0, n1;
        mr_gauss_box_muller(u1, u2, &n0, &n1);
        eps[2 * p] = n0;
        if (2 * p + 1 < d) eps[2 * p + 1] = n1;
    }
}

/* The stored sample x = mean + std * eps (both modes: in tanh mode x is u). */
MR_HD void mr_gauss_sample(const float *mean, const float *log_std, int d, const float *eps, float *x) {
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++)
        if (j < d) x[j] = mean[j] + expf(mr_gauss_log_std(log_std[j])) * eps[j];
}

/* The action the environment gets from a stored sample x. Tanh mode: the
 * result is clamped into [lo, hi] too, since lo + (hi - lo) * s can round
 * past hi for s = 1. */
MR_HD void mr_gauss_env_action(int mode, const float *x, const float *lo, const float *hi, int d, float *act) {
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) {
        if (j >= d) continue;
        float a = x[j];
        if (mode == MR_GAUSS_TANH) a = lo[j] + (hi[j] - lo[j]) * ((tanhf(a) + 1.0f) * 0.5f);
        act[j] = a < lo[j] ? lo[j] : (a > hi[j] ? hi[j] : a);
    }
}

/* The deterministic action (evaluation): the mean, mapped as a sample is. */
MR_HD void mr_gauss_mean_action(int mode, const float *mean, const float *lo, const float *hi, int d, float *act) {
    mr_gauss_env_action(mode, mean, lo, hi, d, act);
}

/* ----------------------------------------------------- logp and entropy */

/* softplus(v) = log(1 + e^v) without overflow for large v. */
MR_HD float mr_gauss_softplus(float v) { return v > 0.0f ? v + log1pf(expf(-v)) : log1pf(expf(v)); }

/* log(1 - tanh^2 u) = 2 (log 2 - u - softplus(-2u)): finite for every finite
 * u (1 - tanhf(u)^2 is 0 in float from |u| ~ 9 on, and its log -inf). */
MR_HD float mr_gauss_log1m_tanh2(float u) { return 2.0f * (MR_GAUSS_LOG2 - u - mr_gauss_softplus(-2.0f * u)); }

/* log-probability of the stored sample x:
 *   sum_j  -z_j^2 / 2 - log_std_j - log(2 pi) / 2,   z_j = (x_j - mean_j) / std_j
 * and in tanh mode minus sum_j log((hi_j - lo_j) / 2) + log(1 - tanh^2 x_j),
 * added in the same j loop. lo, hi are only read in tanh mode (may be NULL
 * in clip mode). */
MR_HD float mr_gauss_log_prob(int mode, const float *mean, const float *log_std, const float *lo, const float *hi,
                              int d, const float *x) {
    float s = 0.0f;
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) {
        if (j >= d) continue;
        const float ls = mr_gauss_log_std(log_std[j]);
        const float z = (x[j] - mean[j]) / expf(ls);
        float t = -0.5f * z * z - ls - MR_GAUSS_LOG_2PI_HALF;
        if (mode == MR_GAUSS_TANH) t -= logf(0.5f * (hi[j] - lo[j])) + mr_gauss_log1m_tanh2(x[j]);
        s += t;
    }
    return s;
}

/* Entropy: the Gaussian's closed form, sum_j log_std_j + d (1 + log 2 pi) / 2.
 * Tanh mode uses the same (the squashed distribution's entropy has no closed
 * form; SB3 likewise uses the Gaussian's rather than an estimate -E[logp]):
 * it is a regulariser on log_std either way. */
MR_HD float mr_gauss_entropy(const float *log_std, int d) {
    float s = 0.0f;
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) if (j < d) s += mr_gauss_log_std(log_std[j]);
    return s + (float)d * MR_GAUSS_ENT_CONST;
}

/* ------------------------------------------------------------ gradients */

/* d logp / d mean_j = z_j / std_j;  d logp / d log_std_j = (z_j^2 - 1) times
 * the clamp's gradient. The same in both modes: the tanh correction is a
 * function of the stored x alone, and x is data in the update (it was sampled
 * by the old policy and is not re-drawn from mean and log_std), so the
 * correction has no gradient with respect to mean or log_std. */
MR_HD void mr_gauss_dlogp(const float *mean, const float *log_std, int d, const float *x, float *dmean,
                          float *dlog_std) {
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) {
        if (j >= d) continue;
        const float sd = expf(mr_gauss_log_std(log_std[j]));
        const float z = (x[j] - mean[j]) / sd;
        dmean[j] = z / sd;
        dlog_std[j] = (z * z - 1.0f) * mr_gauss_dlog_std(log_std[j]);
    }
}

/* d entropy / d log_std_j = 1 inside the clamp, 0 outside (and 0 w.r.t. mean). */
MR_HD void mr_gauss_dentropy(const float *log_std, int d, float *dlog_std) {
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) if (j < d) dlog_std[j] = mr_gauss_dlog_std(log_std[j]);
}

/* ------------------------------------------------------ one sample's loss */

/* One sample's PPO terms, as mr_loss_terms_at for the categorical head. The
 * ratio, its clip (tie rules included), the value terms and what mr_loss_add
 * sums are that function's own code: the Gaussian's logp enters as a row of
 * one logit, whose log-softmax is exactly 0, with old_logp shifted by -logp,
 * so its log_ratio is 0 - (old_logp - logp) = logp - old_logp exactly.
 * t->entropy is then the Gaussian's; t->logp[], t->p[] are unused. */
MR_HD void mr_gauss_loss_terms_at(int mode, const float *mean, const float *log_std, const float *lo, const float *hi,
                                  int d, const float *x, double old_logp, double A, double v, double old, double R,
                                  double c, mr_loss_terms *t) {
    const float z0 = 0.0f;
    const double lp = (double)mr_gauss_log_prob(mode, mean, log_std, lo, hi, d, x);
    mr_loss_terms_at(&z0, 1, 0, old_logp - lp, A, v, old, R, c, t);
    t->entropy = (double)mr_gauss_entropy(log_std, d);
}

/* One sample's gradient of the scalar loss w.r.t. mean (d) and log_std (d),
 * times scale, as mr_loss_grad_row: dloss/dlogp = dpol_dr * ratio, and the
 * entropy term dL_dH dH/dlog_std. log_std is one vector for the whole batch:
 * the caller sums the rows. dv: the value head's, by mr_loss_grad_row itself
 * (na = 0: it writes no logits). */
MR_HD void mr_gauss_grad_row(const mr_loss_terms *t, const float *mean, const float *log_std, int d, const float *x,
                             double dL_dH, double vf_coef, int batch_max, int unclipped_mean, double invB,
                             double scale, float *dmean, float *dlog_std, float *dv) {
    float gm[MR_GAUSS_MAX_DIMS] = {0}, gs[MR_GAUSS_MAX_DIMS] = {0}, ge[MR_GAUSS_MAX_DIMS] = {0};
    mr_gauss_dlogp(mean, log_std, d, x, gm, gs);
    mr_gauss_dentropy(log_std, d, ge);
    const double gr = t->dpol_dr * t->ratio;
    MR_UNROLL
    for (int j = 0; j < MR_GAUSS_MAX_DIMS; j++) {
        if (j >= d) continue;
        dmean[j] = (float)(((gr * (double)gm[j]) * invB) * scale);
        dlog_std[j] = (float)(((gr * (double)gs[j] + dL_dH * (double)ge[j]) * invB) * scale);
    }
    mr_loss_grad_row(t, 0, 0, dL_dH, vf_coef, batch_max, unclipped_mean, invB, scale, (float *)0, dv);
}

#endif /* MR_GAUSS_MATH_H */

/*
 * ppo_loss_math.h - the per-sample and per-scalar math of the PPO loss,
 * advantage normalisation and PopArt, written once as MR_HD functions (plain
 * C, host+device): kernels/ppo_loss.cu launches them, src/engine/cpu/ppo.c
 * loops over them.
 *
 * What is here: the device control blocks (mr_lossctl: loss hyper-parameters
 * and results; mr_popart_ctl: PopArt's running statistics), one sample's loss
 * terms, what one sample adds to the batch sums, the batch scalars (stats,
 * dloss/dH), one sample's gradient row, the mean/std element steps, PopArt's
 * scalar step and rescale, and a host-only emulation of the kernels' exact
 * reduction order. What is not: launches, memory, streams (ppo_loss.cu),
 * the CPU's batch reductions (ppo.c).
 *
 * Shapes: logits, dlogits (B,na) row-major (na = the action count); value, old_logp, adv, old_value,
 * target, dvalue (B) fp32; action (B) u8 in [0, 8).
 *
 * The kernels' reductions, deterministic in two stages (no atomics; fixed
 * shapes, so the bits never depend on scheduling or on the GPU): stage 1 cuts
 * the batch into fixed chunks (MR_STATS_CHUNK elements for mean/std,
 * MR_LOSS_CHUNK samples for the loss), one block of MR_RED_THREADS threads
 * each; thread t adds elements lo+t, lo+t+THREADS, ... in double, then a
 * fixed halving tree gives the block's partial sums. Stage 2 is one block
 * doing the same over the partials, and its thread 0 turns the sums into the
 * results. mr_red_emulate below is that order on the CPU. ppo.c sums in
 * another fixed order (blocks of MR_PPO_BLOCK): the sums may differ in the
 * last bits, the elements never do.
 */
#ifndef MR_PPO_LOSS_MATH_H
#define MR_PPO_LOSS_MATH_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"           /* MR_MAX_ACTIONS */
#include "optimizer_math.h"   /* MR_HD, MR_OPT_THREADS, mr_finite_d */

#define MR_RED_THREADS MR_OPT_THREADS              /* threads of every reduction block (256) */
#define MR_STATS_CHUNK (MR_RED_THREADS * 16)       /* mean/std: elements per stage-1 block */
#define MR_LOSS_CHUNK MR_RED_THREADS               /* loss: samples per stage-1 block */
#define MR_ADV_EPS 1e-8                            /* advantages: (A - mean) / (std + eps) */
#define MR_POPART_MIN_STD 1e-4                     /* PopArt batch and running std floor */

/* Loops over the 8 actions are unrolled on the GPU, so a row's arrays live in
 * registers (indexed at run time they would go to local memory). */
#if defined(__CUDA_ARCH__)   /* the device pass only: host compilers do not know the pragma */
#define MR_UNROLL _Pragma("unroll")
#else
#define MR_UNROLL
#endif

/* The loss's batch sums. */
enum {
    MR_LOSS_POL,       /* sum of max(-A r, -A clip(r)) */
    MR_LOSS_VMAX,      /* sum of max(e1, e2) */
    MR_LOSS_ENT,       /* sum of entropies */
    MR_LOSS_KL,        /* sum of (r - 1) - log r */
    MR_LOSS_CLIPFRAC,  /* count of |r - 1| > clip */
    MR_LOSS_E1,        /* sum of (v - R)^2 */
    MR_LOSS_E2,        /* sum of (v_clipped - R)^2 */
    MR_LOSS_NACC
};

/* Written by the host once per update (clip and ent_coef follow their
 * schedules); the fields and their meaning are mr_ppo_coefs' (below). */
typedef struct mr_loss_hyper {
    double clip, ent_coef, vf_coef, ent_floor, ent_floor_coef;
    int32_t value_max_of_means;   /* 0: mean of per-sample max; 1: max of the two batch MSEs */
    int32_t num_actions;          /* logits per row: the environment's action count */
} mr_loss_hyper;

/* Written by the device for every loss evaluation. */
typedef struct mr_loss_stats {
    double loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction;   /* as mr_ppo_stats */
    double sums[MR_LOSS_NACC];   /* the raw batch sums behind them */
    double dL_dH;                /* dloss/dH, the entropy terms' multiplier in the gradient */
    int32_t unclipped_mean;      /* value_max_of_means: mse(v, R) >= mse(v_clipped, R) */
    int32_t B;                   /* batch size of this evaluation */
} mr_loss_stats;

typedef struct mr_lossctl {
    mr_loss_hyper h;
    mr_loss_stats s;
} mr_lossctl;

/* PopArt on the device: mr_popart's statistics plus what the update needs. */
typedef struct mr_popart_ctl {
    double mean, std, count;          /* running statistics, as mr_popart */
    double beta_min;                  /* host-written: cfg.policy.popart_beta_min */
    double batch[2];                  /* device: the last update's returns: mean, std (before the clamp) */
    double scale;                     /* device: std / std' of the last update (1 before any) */
    double pad_;
} mr_popart_ctl;

/* ------------------------------------------------------ one sample's loss */

/* One sample's policy and value terms. */
typedef struct mr_loss_terms {
    double logp[MR_MAX_ACTIONS], p[MR_MAX_ACTIONS];   /* [na, MR_MAX_ACTIONS) are 0 */
    double entropy, ratio, log_ratio;
    double pol, dpol_dr;        /* max(-A r, -A clip(r)) and its r-derivative */
    double e1, e2;              /* (v - R)^2, (v_clipped - R)^2 */
    double g1, g2;              /* their v-derivatives */
} mr_loss_terms;

/* log-softmax, softmax and entropy of one row of na logits, in double
 * (entries from na on are 0; the loops run to the compile-time bound with
 * j < na inside, so a GPU keeps the arrays in registers). */
MR_HD double mr_loss_softmax(const float *z, int na, double *logp, double *p) {
    double m = z[0];
    MR_UNROLL
    for (int j = 1; j < MR_MAX_ACTIONS; j++) if (j < na && z[j] > m) m = z[j];
    double s = 0.0;
    MR_UNROLL
    for (int j = 0; j < MR_MAX_ACTIONS; j++) if (j < na) s += exp((double)z[j] - m);
    const double ls = log(s);
    double h = 0.0;
    MR_UNROLL
    for (int j = 0; j < MR_MAX_ACTIONS; j++) {
        logp[j] = p[j] = 0.0;
        if (j < na) {
            logp[j] = ((double)z[j] - m) - ls;
            p[j] = exp(logp[j]);
            h -= p[j] * logp[j];
        }
    }
    return h;
}

/* One sample's terms. z: the row's na logits; a: the action; A: advantage;
 * v, old, R: value, old value, target; c: the clip. The action's
 * log-probability is picked by a compare loop, not logp[a], so the arrays
 * stay in registers on the GPU; an action outside [0, na) gives NaN, so the
 * loss is NaN and the optimizer skips the step instead of learning from
 * garbage (or reading out of bounds). */
MR_HD void mr_loss_terms_at(const float *z, int na, int a, double old_logp, double A, double v, double old, double R,
                            double c, mr_loss_terms *o) {
    o->entropy = mr_loss_softmax(z, na, o->logp, o->p);
    double la = (double)NAN;
    MR_UNROLL
    for (int j = 0; j < MR_MAX_ACTIONS; j++) if (j == a && j < na) la = o->logp[j];
    o->log_ratio = la - old_logp;
    const double r = exp(o->log_ratio);
    o->ratio = r;
    const double lo = 1.0 - c, hi = 1.0 + c;
    const double rc = r < lo ? lo : (r > hi ? hi : r);
    const double s1 = -A * r, s2 = -A * rc;
    /* torch: clamp passes the gradient for lo <= r <= hi; at a tie of the
     * max the unclipped branch takes it. */
    const double drc = (r >= lo && r <= hi) ? 1.0 : 0.0;
    if (s1 >= s2) { o->pol = s1; o->dpol_dr = -A; }
    else { o->pol = s2; o->dpol_dr = -A * drc; }

    const double d = v - old;
    const double dc = d < -c ? -c : (d > c ? c : d);
    const double vc = old + dc;
    const double ddc = (d >= -c && d <= c) ? 1.0 : 0.0;
    o->e1 = (v - R) * (v - R);
    o->e2 = (vc - R) * (vc - R);
    o->g1 = 2.0 * (v - R);
    o->g2 = 2.0 * (vc - R) * ddc;
}

/* What one sample adds to the batch sums (acc[MR_LOSS_NACC]). */
MR_HD void mr_loss_add(const mr_loss_terms *t, double clip, double *acc) {
    acc[MR_LOSS_POL] += t->pol;
    acc[MR_LOSS_VMAX] += t->e1 >= t->e2 ? t->e1 : t->e2;
    acc[MR_LOSS_ENT] += t->entropy;
    acc[MR_LOSS_KL] += (t->ratio - 1.0) - t->log_ratio;
    acc[MR_LOSS_CLIPFRAC] += fabs(t->ratio - 1.0) > clip ? 1.0 : 0.0;
    acc[MR_LOSS_E1] += t->e1;
    acc[MR_LOSS_E2] += t->e2;
}

/* The batch scalars from the sums, formed between the loss's two passes: the
 * stats, dloss/dH (relu passes no gradient at 0) and, for the max-of-means
 * value loss, which mean won. B <= 0: zero stats. */
MR_HD void mr_loss_finish(const double *acc, int B, const mr_loss_hyper *h, mr_loss_stats *s) {
    MR_UNROLL
    for (int k = 0; k < MR_LOSS_NACC; k++) s->sums[k] = acc[k];
    s->B = B;
    if (B <= 0) {
        s->loss = s->policy_loss = s->value_loss = s->entropy = s->approx_kl = s->clip_fraction = 0.0;
        s->dL_dH = 0.0;
        s->unclipped_mean = 1;
        return;
    }
    const double invB = 1.0 / (double)B;
    const double H = acc[MR_LOSS_ENT] * invB;
    const double pol = acc[MR_LOSS_POL] * invB;
    const double m1 = acc[MR_LOSS_E1] * invB, m2 = acc[MR_LOSS_E2] * invB;
    const int unclipped_mean = m1 >= m2;
    const double vloss = h->value_max_of_means ? (unclipped_mean ? m1 : m2) : acc[MR_LOSS_VMAX] * invB;
    const double floor_gap = h->ent_floor - H;
    s->dL_dH = -h->ent_coef - (floor_gap > 0.0 ? h->ent_floor_coef : 0.0);
    s->unclipped_mean = unclipped_mean;
    s->policy_loss = pol;
    s->value_loss = vloss;
    s->entropy = H;
    s->approx_kl = acc[MR_LOSS_KL] * invB;
    s->clip_fraction = acc[MR_LOSS_CLIPFRAC] * invB;
    s->loss = pol + h->vf_coef * vloss - h->ent_coef * H + h->ent_floor_coef * (floor_gap > 0.0 ? floor_gap : 0.0);
}

/* One sample's gradient of the scalar loss (the loss's second pass), times
 * `scale` (the fp16 loss scale, a power of two, so the result is the
 * unscaled one times scale exactly; 1 otherwise). dz: na floats. */
MR_HD void mr_loss_grad_row(const mr_loss_terms *t, int na, int a, double dL_dH, double vf_coef, int batch_max,
                            int unclipped_mean, double invB, double scale, float *dz, float *dv) {
    /* d logp(a)/dz_k = [k==a] - p_k;  dH_i/dz_k = -p_k (logp_k + H_i). */
    const double gr = t->dpol_dr * t->ratio;
    MR_UNROLL
    for (int k = 0; k < MR_MAX_ACTIONS; k++) {
        if (k >= na) continue;
        const double dlogp = (k == a ? 1.0 : 0.0) - t->p[k];
        const double dH = -t->p[k] * (t->logp[k] + t->entropy);
        dz[k] = (float)(((gr * dlogp + dL_dH * dH) * invB) * scale);
    }
    double gv;
    if (batch_max) gv = unclipped_mean ? t->g1 : t->g2;
    else gv = t->e1 >= t->e2 ? t->g1 : t->g2;
    *dv = (float)((vf_coef * gv * invB) * scale);
}

/* ------------------------------------------------------------- mean / std */

/* The elements of mean/std's two passes. The second accumulates with an
 * explicit fused multiply-add, so every caller rounds alike whatever its
 * compiler contracts. */
MR_HD void mr_stats_add_sum(double *acc, float x) { *acc += (double)x; }
MR_HD void mr_stats_add_dev2(double *acc, float x, double mean) {
    const double d = (double)x - mean;
    *acc = fma(d, d, *acc);
}
MR_HD double mr_stats_mean(double sum, int64_t n) { return n > 0 ? sum / (double)n : 0.0; }
/* Unbiased (as torch.std); n < 2: 0, as mr_mean_std. */
MR_HD double mr_stats_std(double sumsq_dev, int64_t n) { return n > 1 ? sqrt(sumsq_dev / (double)(n - 1)) : 0.0; }
/* One element of the advantage normalisation: (x - mean) / (std + 1e-8). */
MR_HD float mr_norm_elem(float x, double mean, double sd) {
    return (float)(((double)x - mean) / (sd + MR_ADV_EPS));
}

/* ------------------------------------------------------------------ PopArt */

typedef struct mr_popart_rescale {
    double s, s2;               /* std / std' and its square */
    double mean, std;           /* before */
    double mean2, std2;         /* after */
} mr_popart_rescale;

/* PopArt's statistics step on the batch mean and std of n returns (n >= 1;
 * n < 2 takes the 1e-4 clamp), as ENV_SPEC "Policy" writes it:
 *   count += 1; beta = max(1/count, beta_min)
 *   mean' = (1-beta) mean + beta bmean;  var' = (1-beta) std^2 + beta bstd^2
 *   std' = max(sqrt(var'), 1e-4)
 * Updates mean, std, count in place; r gets the rescale of the last layer. */
MR_HD void mr_popart_step(double *mean_io, double *std_io, double *count_io, double beta_min, double bmean,
                          double bstd, int64_t n, mr_popart_rescale *r) {
    /* Clamp as torch.clamp would: a NaN stays NaN (the trainer reports it). */
    if (n < 2 || bstd < MR_POPART_MIN_STD) bstd = MR_POPART_MIN_STD;
    *count_io += 1.0;
    double beta = 1.0 / *count_io;
    if (beta < beta_min) beta = beta_min;
    const double mean = *mean_io, sd = *std_io;
    const double mean2 = (1.0 - beta) * mean + beta * bmean;
    /* ENV_SPEC: the OLD std^2 blended with the BATCH std^2 (not running
     * second moments, which would also carry the mean shift). */
    const double var2 = (1.0 - beta) * sd * sd + beta * bstd * bstd;
    double sd2 = sqrt(var2);
    if (sd2 < MR_POPART_MIN_STD) sd2 = MR_POPART_MIN_STD;
    r->s = sd / sd2;
    r->s2 = r->s * r->s;
    r->mean = mean;
    r->std = sd;
    r->mean2 = mean2;
    r->std2 = sd2;
    *mean_io = mean2;
    *std_io = sd2;
}

/* mr_popart_step on the control block's statistics and batch[]; records the scale. */
MR_HD void mr_popart_ctl_step(mr_popart_ctl *c, int64_t n, mr_popart_rescale *r) {
    mr_popart_step(&c->mean, &c->std, &c->count, c->beta_min, c->batch[0], c->batch[1], n, r);
    c->scale = r->s;
}

/* w, m_w, m_b: x s; v_w, v_b: x s^2 (pass r->s2). */
MR_HD float mr_popart_scale(float x, double s) { return (float)((double)x * s); }
/* b' = (b std + mean - mean') / std', so mean + std*(w.h + b) is unchanged. */
MR_HD float mr_popart_bias(float b, const mr_popart_rescale *r) {
    return (float)(((double)b * r->std + r->mean - r->mean2) / r->std2);
}

/* The whole rescale on one thread: w (k), b (1) and their Adam moments m_w,
 * v_w (k), m_b, v_b (1), any of the four NULL. (The kernel splits it.) */
static inline void mr_popart_rescale_layer(const mr_popart_rescale *r, float *w, float *b, int k, float *mw,
                                           float *vw, float *mb, float *vb) {
    for (int i = 0; i < k; i++) w[i] = mr_popart_scale(w[i], r->s);
    *b = mr_popart_bias(*b, r);
    if (mw) for (int i = 0; i < k; i++) mw[i] = mr_popart_scale(mw[i], r->s);
    if (vw) for (int i = 0; i < k; i++) vw[i] = mr_popart_scale(vw[i], r->s2);
    if (mb) *mb = mr_popart_scale(*mb, r->s);
    if (vb) *vb = mr_popart_scale(*vb, r->s2);
}

/* ------------------------------------------------------- host loop bodies */
/* A batch's inputs and sample i's terms, sums and gradient row, for the
 * loops on the host (ppo.c's, and the emulation below); the kernels make the
 * same calls on a row they load into registers. */

typedef struct mr_loss_ctx {
    const float *logits, *value, *old_logp, *adv, *old_value, *target;
    const uint8_t *action;
    double clip;
    int na;                   /* logits per row: the environment's action count */
} mr_loss_ctx;

static inline void mr_loss_terms_of(const mr_loss_ctx *c, int64_t i, mr_loss_terms *t) {
    mr_loss_terms_at(c->logits + i * c->na, c->na, c->action[i], c->old_logp[i], c->adv[i], c->value[i],
                     c->old_value[i], c->target[i], c->clip, t);
}
static inline void mr_loss_add_fn(const void *cv, int64_t i, double *acc) {
    const mr_loss_ctx *c = (const mr_loss_ctx *)cv;
    mr_loss_terms t;
    mr_loss_terms_of(c, i, &t);
    mr_loss_add(&t, c->clip, acc);
}
/* Sample i's gradient row into dlogits (B,na) and dvalue (B), times scale,
 * from the batch scalars s (mr_loss_finish) for hyper-parameters h. */
static inline void mr_loss_grad_at(const mr_loss_ctx *c, int64_t i, const mr_loss_hyper *h, const mr_loss_stats *s,
                                   double scale, float *dlogits, float *dvalue) {
    mr_loss_terms t;
    mr_loss_terms_of(c, i, &t);
    mr_loss_grad_row(&t, c->na, c->action[i], s->dL_dH, h->vf_coef, h->value_max_of_means != 0, s->unclipped_mean,
                     1.0 / (double)s->B, scale, dlogits + i * c->na, &dvalue[i]);
}

/* ------------------------------------------- the reductions' exact order */
/* Host only: the CPU test checks the GPU bit for bit against these where the
 * per-element math is exactly rounded (mean/std, normalisation), and these
 * against ppo.c everywhere. */

/* Adds element i's terms to acc[0 .. nacc). */
typedef void (*mr_red_add_fn)(const void *ctx, int64_t i, double *acc);

/* The fixed halving tree over sh[k * MR_RED_THREADS + t], for each k < nacc. */
static inline void mr_red_tree_emulate(double *sh, int nacc) {
    for (int h = MR_RED_THREADS / 2; h > 0; h >>= 1)
        for (int k = 0; k < nacc; k++)
            for (int t = 0; t < h; t++) sh[k * MR_RED_THREADS + t] += sh[k * MR_RED_THREADS + t + h];
}

/* Stage 2: out[k] = the sum of partials[j * nacc + k] over j < nb. */
static inline void mr_red_stage2_emulate(const double *partials, int64_t nb, int nacc, double *out) {
    double sh[MR_LOSS_NACC * MR_RED_THREADS];
    for (int t = 0; t < MR_RED_THREADS; t++)
        for (int k = 0; k < nacc; k++) {
            double acc = 0.0;
            for (int64_t j = t; j < nb; j += MR_RED_THREADS) acc += partials[j * nacc + k];
            sh[k * MR_RED_THREADS + t] = acc;
        }
    mr_red_tree_emulate(sh, nacc);
    for (int k = 0; k < nacc; k++) out[k] = sh[k * MR_RED_THREADS];
}

/* Both stages over [0, n) in chunks of `chunk` (nacc <= MR_LOSS_NACC).
 * partials: ceil(n / chunk) * nacc doubles, left as stage 1 wrote them. */
static inline void mr_red_emulate(int64_t n, int64_t chunk, int nacc, mr_red_add_fn add, const void *ctx,
                                  double *partials, double *out) {
    double sh[MR_LOSS_NACC * MR_RED_THREADS];
    int64_t nb = 0;
    for (int64_t lo = 0; lo < n; lo += chunk, nb++) {
        const int64_t hi = lo + chunk < n ? lo + chunk : n;
        for (int t = 0; t < MR_RED_THREADS; t++) {
            double acc[MR_LOSS_NACC] = {0};
            for (int64_t i = lo + t; i < hi; i += MR_RED_THREADS) add(ctx, i, acc);
            for (int k = 0; k < nacc; k++) sh[k * MR_RED_THREADS + t] = acc[k];
        }
        mr_red_tree_emulate(sh, nacc);
        for (int k = 0; k < nacc; k++) partials[nb * nacc + k] = sh[k * MR_RED_THREADS];
    }
    mr_red_stage2_emulate(partials, nb, nacc, out);
}

typedef struct mr_stats_ctx { const float *x; double mean; } mr_stats_ctx;
static inline void mr_stats_add_sum_fn(const void *c, int64_t i, double *acc) {
    mr_stats_add_sum(acc, ((const mr_stats_ctx *)c)->x[i]);
}
static inline void mr_stats_add_dev2_fn(const void *c, int64_t i, double *acc) {
    const mr_stats_ctx *s = (const mr_stats_ctx *)c;
    mr_stats_add_dev2(acc, s->x[i], s->mean);
}

/* out[0] = mean, out[1] = unbiased std of x[0, n), as ppo.cu's mean/std
 * kernels compute them. partials: ceil(n / MR_STATS_CHUNK) doubles. */
static inline void mr_mean_std_emulate(const float *x, int64_t n, double *partials, double *out) {
    mr_stats_ctx c = {x, 0.0};
    double s = 0.0;
    out[0] = out[1] = 0.0;
    if (n <= 0) return;
    mr_red_emulate(n, MR_STATS_CHUNK, 1, mr_stats_add_sum_fn, &c, partials, &s);
    out[0] = c.mean = mr_stats_mean(s, n);
    if (n > 1) {
        mr_red_emulate(n, MR_STATS_CHUNK, 1, mr_stats_add_dev2_fn, &c, partials, &s);
        out[1] = mr_stats_std(s, n);
    }
}

static inline void mr_normalize_emulate(float *x, int64_t n, double *partials, double *out) {
    mr_mean_std_emulate(x, n, partials, out);
    for (int64_t i = 0; i < n; i++) x[i] = mr_norm_elem(x[i], out[0], out[1]);
}

/* mr_popart_update as the kernels do it (c->beta_min set by the caller). */
static inline void mr_popart_emulate(mr_popart_ctl *c, const float *returns, int64_t n, double *partials,
                                     float *w, float *b, int k, float *mw, float *vw, float *mb, float *vb) {
    if (n <= 0) return;
    mr_mean_std_emulate(returns, n, partials, c->batch);
    mr_popart_rescale r;
    mr_popart_ctl_step(c, n, &r);
    mr_popart_rescale_layer(&r, w, b, k, mw, vw, mb, vb);
}

/* mr_cuda_ppo_loss on the CPU, in the kernels' order: the stats of ctl->s,
 * dlogits (B,na) and dvalue (B) times `scale`. partials: ceil(B /
 * MR_LOSS_CHUNK) * MR_LOSS_NACC doubles. */
static inline void mr_loss_emulate(int B, const float *logits, const float *value, const uint8_t *action,
                                   const float *old_logp, const float *adv, const float *old_value,
                                   const float *target, mr_lossctl *ctl, double scale, double *partials,
                                   float *dlogits, float *dvalue) {
    const mr_loss_ctx c = {logits, value, old_logp, adv, old_value, target, action, ctl->h.clip, ctl->h.num_actions};
    double acc[MR_LOSS_NACC] = {0};
    if (B > 0) mr_red_emulate(B, MR_LOSS_CHUNK, MR_LOSS_NACC, mr_loss_add_fn, &c, partials, acc);
    mr_loss_finish(acc, B, &ctl->h, &ctl->s);
    for (int64_t i = 0; i < B; i++) mr_loss_grad_at(&c, i, &ctl->h, &ctl->s, scale, dlogits, dvalue);
}

/* ------------------------------------------------ the host's parameters
 * What the trainer keeps and sets on every device: PopArt's statistics and
 * the loss coefficients, and how they become the control blocks above. */

/* value = mean + std * raw, where raw = w.h + b is the critic's last layer. */
typedef struct mr_popart {
    double mean, std, count;
} mr_popart;

/* mean 0, std 1, count 0: with PopArt off it is never updated and
 * value = 0 + 1 * raw, the same code path. */
static inline void mr_popart_init(mr_popart *p) {
    p->mean = 0.0;
    p->std = 1.0;
    p->count = 0.0;
}

/* The shared control block (mr_popart_ctl, above) from these
 * statistics (mr_popart_init's for a new run, a checkpoint's when resuming),
 * and back. */
static inline void mr_popart_ctl_set(mr_popart_ctl *c, const mr_popart *p, double beta_min) {
    c->mean = p->mean;
    c->std = p->std;
    c->count = p->count;
    c->beta_min = beta_min;
    c->batch[0] = 0.0;
    c->batch[1] = 0.0;
    c->scale = 1.0;
    c->pad_ = 0.0;
}
static inline void mr_popart_ctl_get(const mr_popart_ctl *c, mr_popart *p) {
    p->mean = c->mean;
    p->std = c->std;
    p->count = c->count;
}

typedef struct mr_ppo_coefs {
    double clip;            /* ratio clip c, and the value clip around old_value */
    double ent_coef;        /* loss -= ent_coef * H */
    double vf_coef;         /* loss += vf_coef * value_loss */
    double ent_floor;       /* loss += ent_floor_coef * relu(ent_floor - H) */
    double ent_floor_coef;
    /* 0 (zero-initialised struct): value_loss = mean_i max(e1_i, e2_i)  (per sample)
     * 1 (what the trainer uses, as ENV_SPEC writes it): value_loss = max(mean_i e1_i, mean_i e2_i), the original project's
     *    torch.max(F.mse_loss(v, R), F.mse_loss(v_clipped, R))      (per batch)
     * with e1 = (v - R)^2, e2 = (v_clipped - R)^2. */
    int value_max_of_means;
    int num_actions;        /* logits per row; 0 = MR_MAX_ACTIONS */
} mr_ppo_coefs;

typedef struct mr_ppo_stats {
    double loss;            /* the total below */
    double policy_loss;     /* mean max(-A r, -A clip(r, 1-c, 1+c)) */
    double value_loss;      /* see value_max_of_means */
    double entropy;         /* H, batch mean of per-sample entropies */
    double approx_kl;       /* mean((r - 1) - log r) */
    double clip_fraction;   /* mean(|r - 1| > c) */
} mr_ppo_stats;

/* The coefficients as the shared loss elements take them (cpu/ppo.c's mr_ppo_loss's
 * and the kernels' control block). */
static inline void mr_loss_hyper_set(mr_loss_hyper *h, const mr_ppo_coefs *c) {
    h->clip = c->clip;
    h->ent_coef = c->ent_coef;
    h->vf_coef = c->vf_coef;
    h->ent_floor = c->ent_floor;
    h->ent_floor_coef = c->ent_floor_coef;
    h->value_max_of_means = c->value_max_of_means != 0;
    h->num_actions = c->num_actions > 0 ? c->num_actions : MR_MAX_ACTIONS;
}

#endif /* MR_PPO_LOSS_MATH_H */

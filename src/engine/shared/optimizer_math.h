/*
 * optimizer_math.h - the optimizer both devices run, written once as MR_HD
 * functions (plain C, host+device): kernels/ppo.cu launches them,
 * src/engine/cpu/ppo.c loops over them, so the two cannot drift apart.
 *
 * What is here: one Adam element and its bias-corrected scalars, the
 * gradient norm (one gradient square; the parameter-group plan of its
 * grad-norm reduction and a host emulation of that reduction's order) and
 * the clip factor, finiteness tests; the optimizer's control block
 * (hyper-parameters written by the host, state written by the device:
 * mr_optctl) with its one-thread scalar steps and the fp16 loss scaler.
 * What is not: launches, memory, streams (ppo.cu), batch loops (ppo.c); the
 * rollout's other math: GAE (gae_math.h), the categorical head's sampling
 * (categorical_math.h).
 *
 * Shapes: parameters, gradients and Adam moments are one flat fp32 array of
 * P elements; group g is [off[g], off[g+1]) (e.g. g0 = policy, g1 = value
 * head, clipped separately).
 */
#ifndef MR_OPTIMIZER_MATH_H
#define MR_OPTIMIZER_MATH_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "rng.h"   /* MR_HD */

#define MR_OPT_MAX_GROUPS 4
#define MR_OPT_THREADS 256                       /* threads of every reduction block */
#define MR_OPT_CHUNK (MR_OPT_THREADS * 16)       /* gradient elements per stage-1 block */
#define MR_CLIP_EPS 1e-6                         /* clip factor: max_norm / (norm + eps) */

/* Parameter groups over one flat array and their stage-1 reduction blocks. */
typedef struct mr_opt_groups {
    int n;                                     /* 1 .. MR_OPT_MAX_GROUPS */
    int64_t off[MR_OPT_MAX_GROUPS + 1];        /* group g = [off[g], off[g+1]) */
    int32_t block_off[MR_OPT_MAX_GROUPS + 1];  /* its blocks: [block_off[g], block_off[g+1]) */
} mr_opt_groups;

/* Written by the host, once per update (lr follows its schedule). */
typedef struct mr_opt_hyper {
    /* lr and the betas in double: the scalars formed from them (1 - beta,
     * the bias corrections, the step size) are rounded once, as torch and
     * ppo.c form them (1 - 0.999f in float is 1.3e-5 off) */
    double lr, beta1, beta2;
    float eps;
    double max_norm[MR_OPT_MAX_GROUPS];  /* per group; <= 0 = no clipping (double: the config's value exactly) */
    float growth_factor;                 /* loss scaler: x this after growth_interval good steps (2) */
    float backoff_factor;                /* x this on inf/nan (0.5) */
    int32_t growth_interval;             /* 2000 */
    int32_t scaler_enabled;              /* 1 for fp16; 0 leaves loss_scale alone */
} mr_opt_hyper;

/* Written by the device; the host reads it (asynchronously) for metrics. */
typedef struct mr_opt_state {
    double sumsq[MR_OPT_MAX_GROUPS];     /* this step: sum of squared gradients, as stored (scaled) */
    float norm[MR_OPT_MAX_GROUPS];       /* this step: true gradient norm before clipping */
    float mult[MR_OPT_MAX_GROUPS];       /* this step: gradient multiplier = clip factor / loss scale */
    float step_size, bc2_sqrt;           /* this step: lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    float loss_scale;                    /* gradients arrive multiplied by this */
    int32_t growth_tracker;              /* good steps since the last scale change */
    int32_t found_inf;                   /* this step saw a non-finite gradient: skip it */
    int32_t pad_;
    int64_t step;                        /* Adam steps taken (skipped ones are not) */
    int64_t skipped;                     /* steps skipped for inf/nan, total */
} mr_opt_state;

typedef struct mr_optctl {
    mr_opt_hyper h;
    mr_opt_state s;
} mr_optctl;

/* ------------------------------------------------------------ host setup */

/* torch defaults: Adam(3e-4, 0.9, 0.999, 1e-8); GradScaler(2.0, 0.5, 2000). */
static inline void mr_opt_hyper_default(mr_opt_hyper *h) {
    h->lr = 3e-4;
    h->beta1 = 0.9;
    h->beta2 = 0.999;
    h->eps = 1e-8f;
    for (int g = 0; g < MR_OPT_MAX_GROUPS; g++) h->max_norm[g] = 0.5;
    h->growth_factor = 2.0f;
    h->backoff_factor = 0.5f;
    h->growth_interval = 2000;
    h->scaler_enabled = 0;
}

/* Step 0, scale `initial_scale` (65536 for fp16 as torch, 1 otherwise). */
static inline void mr_opt_state_init(mr_opt_state *s, float initial_scale) {
    for (int g = 0; g < MR_OPT_MAX_GROUPS; g++) { s->sumsq[g] = 0.0; s->norm[g] = 0.0f; s->mult[g] = 1.0f; }
    s->step_size = 0.0f;
    s->bc2_sqrt = 1.0f;
    s->loss_scale = initial_scale;
    s->growth_tracker = 0;
    s->found_inf = 0;
    s->pad_ = 0;
    s->step = 0;
    s->skipped = 0;
}

/* Plans n groups of the given sizes (each >= 1, total < 2^31 blocks). Returns
 * 0, or -1 when n or a size is out of range. */
static inline int mr_opt_groups_plan(int n, const int64_t *sizes, mr_opt_groups *out) {
    if (n < 1 || n > MR_OPT_MAX_GROUPS) return -1;
    int64_t off = 0, blocks = 0;
    out->n = n;
    out->off[0] = 0;
    out->block_off[0] = 0;
    for (int g = 0; g < n; g++) {
        if (sizes[g] < 1 || sizes[g] > ((int64_t)1 << 40)) return -1;
        off += sizes[g];
        blocks += (sizes[g] + MR_OPT_CHUNK - 1) / MR_OPT_CHUNK;
        if (blocks > INT32_MAX) return -1;
        out->off[g + 1] = off;
        out->block_off[g + 1] = (int32_t)blocks;
    }
    for (int g = n + 1; g <= MR_OPT_MAX_GROUPS; g++) { out->off[g] = off; out->block_off[g] = (int32_t)blocks; }
    return 0;
}

/* ----------------------------------------------------------- finiteness */

/* IEEE: x - x is 0 for finite x, NaN for inf and NaN. (Not under fast-math.) */
MR_HD int mr_finite_d(double x) { return (x - x) == 0.0; }
MR_HD int mr_finite_f(float x) { return (x - x) == 0.0f; }
/* An fp16 value by its bits: exponent all ones = inf or NaN. */
MR_HD int mr_finite_half_bits(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

/* -------------------------------------------------------- Adam, clipping */

/* torch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); NaN
 * stays NaN (a broken gradient is not hidden); max_norm <= 0: 1. */
MR_HD double mr_opt_clip_factor(double norm, double max_norm) {
    if (!(max_norm > 0.0)) return 1.0;
    const double f = max_norm / (norm + MR_CLIP_EPS);
    return (f < 1.0 || f != f) ? f : 1.0;
}

/* The float scalars of one Adam step. As torch.optim.Adam forms them from
 * Python floats: 1 - beta and the bias corrections in double, rounded once
 * (1 - 0.999f in float would be 1.3e-5 off). */
typedef struct mr_adam_coefs {
    float w1, w2, b2, eps, step_size, bc2_sqrt;   /* 1 - beta1, 1 - beta2, beta2, eps; this step's */
} mr_adam_coefs;

/* step_size = lr / (1 - beta1^step), bc2_sqrt = sqrt(1 - beta2^step); step is 1-based. */
MR_HD void mr_adam_bias(double lr, double beta1, double beta2, int64_t step, float *step_size, float *bc2_sqrt) {
    const double bc1 = 1.0 - pow(beta1, (double)step);
    const double bc2 = 1.0 - pow(beta2, (double)step);
    *step_size = (float)(lr / bc1);
    *bc2_sqrt = (float)sqrt(bc2);
}

MR_HD mr_adam_coefs mr_adam_coefs_make(double beta1, double beta2, float eps, float step_size, float bc2_sqrt) {
    mr_adam_coefs k;
    k.w1 = (float)(1.0 - beta1);
    k.w2 = (float)(1.0 - beta2);
    k.b2 = (float)beta2;
    k.eps = eps;
    k.step_size = step_size;
    k.bc2_sqrt = bc2_sqrt;
    return k;
}

/* One Adam element (torch's single-tensor path, no weight decay, no amsgrad),
 * the gradient multiplied by mult first (clip factor / loss scale). */
MR_HD void mr_adam_elem(float *param, float *m, float *v, float grad, float mult, const mr_adam_coefs *k) {
    const float g = grad * mult;
    const float mi = *m + k->w1 * (g - *m);        /* torch: m.lerp_(g, 1 - beta1) */
    const float vi = *v * k->b2 + k->w2 * g * g;   /* v.mul_(b2).addcmul_(g, g, 1 - b2) */
    *m = mi;
    *v = vi;
    const float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
    *param -= k->step_size * (mi / denom);
}

/* What gradient element x adds to a sum of squares ((double)x * x is exact,
 * so the fused form rounds as a multiply then add would). */
MR_HD void mr_sumsq_add(double *acc, float x) {
    const double d = x;
    *acc = fma(d, d, *acc);
}

/* ------------------------------------------------- optimizer scalar steps */

/* Before a step's gradients are checked: nothing found yet. */
MR_HD void mr_opt_begin(mr_optctl *c) {
    c->s.found_inf = 0;
    for (int g = 0; g < MR_OPT_MAX_GROUPS; g++) c->s.sumsq[g] = 0.0;
}

/* After the gradient sums of squares are in: a non-finite sum means a
 * non-finite gradient (a finite fp32 square sum cannot overflow a double),
 * so found_inf is set and the step is skipped. Otherwise the Adam step count
 * advances and this step's scalars are formed (mr_adam_bias); the multiplier
 * of group g is clip_factor(true norm) / loss_scale, true norm = sqrt(sumsq)
 * / loss_scale. */
MR_HD void mr_opt_prepare(mr_optctl *c, int ngroups) {
    const double inv = 1.0 / (double)c->s.loss_scale;
    for (int g = 0; g < ngroups; g++) {
        const double norm = sqrt(c->s.sumsq[g]) * inv;
        if (!mr_finite_d(norm)) c->s.found_inf = 1;
        c->s.norm[g] = (float)norm;
        c->s.mult[g] = (float)(mr_opt_clip_factor(norm, c->h.max_norm[g]) * inv);
    }
    if (c->s.found_inf) {
        c->s.skipped += 1;
        return;
    }
    c->s.step += 1;
    mr_adam_bias(c->h.lr, c->h.beta1, c->h.beta2, c->s.step, &c->s.step_size, &c->s.bc2_sqrt);
}

/* torch.cuda.amp.GradScaler.update: on inf/nan the scale backs off and the
 * tracker restarts; after growth_interval good steps in a row it grows
 * (unless that would overflow). Disabled: nothing changes. */
MR_HD void mr_opt_scaler_update(mr_optctl *c) {
    if (!c->h.scaler_enabled) return;
    if (c->s.found_inf) {
        c->s.loss_scale *= c->h.backoff_factor;
        c->s.growth_tracker = 0;
        return;
    }
    const int32_t t = c->s.growth_tracker + 1;
    if (t >= c->h.growth_interval) {
        const float grown = c->s.loss_scale * c->h.growth_factor;
        if (mr_finite_f(grown)) c->s.loss_scale = grown;
        c->s.growth_tracker = 0;
    } else {
        c->s.growth_tracker = t;
    }
}

/* This step's Adam scalars from the control block. */
MR_HD mr_adam_coefs mr_adam_coefs_of(const mr_optctl *c) {
    return mr_adam_coefs_make(c->h.beta1, c->h.beta2, c->h.eps, c->s.step_size, c->s.bc2_sqrt);
}

/* The group of flat element i (groups are few: a linear scan). */
MR_HD int mr_opt_group_of(const mr_opt_groups *G, int64_t i) {
    int g = 0;
    while (g + 1 < G->n && i >= G->off[g + 1]) g++;
    return g;
}

/* ------------------------------------------- the reduction's exact order */

/* The sum of squares of g[lo, hi) in exactly the order of ppo.cu's two-stage
 * reduction for a group starting at lo: stage 1 cuts it into MR_OPT_CHUNK
 * blocks, in each thread t of MR_OPT_THREADS adds elements t, t + THREADS,
 * ... in double, then a halving tree (t += t + h); stage 2 reduces the block
 * partials the same way. Host only: the CPU test checks the GPU bit for bit
 * against it, and it against mr_grad_norm. */
static inline double mr_opt_tree(double *sh) {
    for (int h = MR_OPT_THREADS / 2; h > 0; h >>= 1)
        for (int t = 0; t < h; t++) sh[t] += sh[t + h];
    return sh[0];
}

static inline double mr_opt_sumsq_emulate(const float *g, int64_t lo, int64_t hi, double *partials_scratch) {
    double sh[MR_OPT_THREADS];
    int64_t nb = 0;
    for (int64_t b0 = lo; b0 < hi; b0 += MR_OPT_CHUNK, nb++) {
        const int64_t b1 = b0 + MR_OPT_CHUNK < hi ? b0 + MR_OPT_CHUNK : hi;
        for (int t = 0; t < MR_OPT_THREADS; t++) {
            double acc = 0.0;
            for (int64_t i = b0 + t; i < b1; i += MR_OPT_THREADS) mr_sumsq_add(&acc, g[i]);
            sh[t] = acc;
        }
        partials_scratch[nb] = mr_opt_tree(sh);
    }
    for (int t = 0; t < MR_OPT_THREADS; t++) {
        double acc = 0.0;
        for (int64_t j = t; j < nb; j += MR_OPT_THREADS) acc += partials_scratch[j];
        sh[t] = acc;
    }
    return mr_opt_tree(sh);
}

#endif /* MR_OPTIMIZER_MATH_H */

/*
 * ppo.c - the PPO math of the CPU engine (see ppo.h for every contract).
 *
 * The per-element math lives in shared/gae_math.h, categorical_math.h,
 * optimizer_math.h and ppo_loss_math.h (MR_HD, run by the CUDA kernels
 * too); this file is the loops around it, as env_cpu.c is around foraging.h. What it is not: a second copy of any
 * element. What is its own: the reductions' order, schedules, PopArt's
 * (de)normalisation of values and explained variance (no kernel twin).
 *
 * Two rules shape this file:
 *   - Reductions go through reduce_blocks(): each block of MR_PPO_BLOCK
 *     elements is summed in order, in double, by whichever thread gets it, and
 *     the block partials are then added in block order. The result depends on
 *     n only, never on the thread count.
 *   - Per-sample work is an OpenMP loop whose iterations are independent, so
 *     it is deterministic by construction.
 */
#include "ppo.h"
#include <math.h>
#include <string.h>

#define PAR_MIN 8192          /* below this many elements a loop runs serially */
#define CHUNK_BLOCKS 128      /* blocks reduced per parallel pass (bounds the stack) */
#define MAX_ACC 8             /* accumulators per block */
#define PI 3.14159265358979323846

/* ------------------------------------------------------- block reductions */

/* Adds the contributions of elements [lo, hi) to acc[0..nacc). */
typedef void (*block_fn)(const void *ctx, size_t lo, size_t hi, double *acc);

static void reduce_blocks(size_t n, int nacc, block_fn fn, const void *ctx, double *out) {
    double part[CHUNK_BLOCKS][MAX_ACC];
    for (int k = 0; k < nacc; k++) out[k] = 0.0;
    size_t nblocks = (n + MR_PPO_BLOCK - 1) / MR_PPO_BLOCK;
    for (size_t b0 = 0; b0 < nblocks; b0 += CHUNK_BLOCKS) {
        int nb = (int)(nblocks - b0 < CHUNK_BLOCKS ? nblocks - b0 : CHUNK_BLOCKS);
        #pragma omp parallel for schedule(static) if (nb > 1)
        for (int i = 0; i < nb; i++) {
            size_t lo = (b0 + (size_t)i) * MR_PPO_BLOCK;
            size_t hi = lo + MR_PPO_BLOCK < n ? lo + MR_PPO_BLOCK : n;
            for (int k = 0; k < nacc; k++) part[i][k] = 0.0;
            fn(ctx, lo, hi, part[i]);
        }
        for (int i = 0; i < nb; i++)
            for (int k = 0; k < nacc; k++) out[k] += part[i][k];
    }
}

/* Simple reductions over one or two float arrays. Inside a block, LANES
 * independent partial sums (element i goes to lane i % LANES, blocks start at
 * multiples of MR_PPO_BLOCK) keep the adds from waiting on each other and let
 * the compiler vectorise; the lanes are then added in a fixed order. `add`
 * adds element i to the double that `lane` points to. */
#define LANES 8
#define BLOCK_SUM(acc, lo, hi, i, lane, add) do {                               \
        double l_[LANES] = {0};                                                 \
        size_t j_ = (lo);                                                       \
        for (; j_ + LANES <= (hi); j_ += LANES)                                 \
            for (size_t i = j_; i < j_ + LANES; i++) { double *lane = &l_[i - j_]; add; } \
        for (size_t i = j_; i < (hi); i++) { double *lane = &l_[i - j_]; add; } \
        (acc) += ((l_[0] + l_[1]) + (l_[2] + l_[3])) + ((l_[4] + l_[5]) + (l_[6] + l_[7])); \
    } while (0)

typedef struct { const float *a; double shift; } sum_ctx;

static void sum_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const sum_ctx *)c)->a;
    BLOCK_SUM(acc[0], lo, hi, i, lane, mr_stats_add_sum(lane, a[i]));
}
static void sumsq_dev_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const sum_ctx *)c)->a;
    const double m = ((const sum_ctx *)c)->shift;
    BLOCK_SUM(acc[0], lo, hi, i, lane, mr_stats_add_dev2(lane, a[i], m));
}
static void sumsq_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const sum_ctx *)c)->a;
    BLOCK_SUM(acc[0], lo, hi, i, lane, mr_sumsq_add(lane, a[i]));
}
void mr_mean_std(const float *x, size_t n, double *mean_out, double *std_out) {
    double mean = 0.0, sd = 0.0;
    if (n > 0) {
        sum_ctx c = {x, 0.0};
        double s;
        reduce_blocks(n, 1, sum_fn, &c, &s);
        mean = mr_stats_mean(s, (int64_t)n);
        if (n > 1) {
            c.shift = mean;
            reduce_blocks(n, 1, sumsq_dev_fn, &c, &s);
            sd = mr_stats_std(s, (int64_t)n);
        }
    }
    if (mean_out) *mean_out = mean;
    if (std_out) *std_out = sd;
}

/* --------------------------------------------------------------------- GAE */

#define GAE_COLS 64   /* environments per task: the inner loop runs along a row */

void mr_gae(int T, int N, const float *reward, const float *value,
            const float *last_value, const uint8_t *done, float gamma, float lambda,
            float *adv, float *ret) {
    if (T <= 0 || N <= 0) return;
    double g, gl;
    mr_gae_coefs(gamma, lambda, &g, &gl);
    const int nchunks = (N + GAE_COLS - 1) / GAE_COLS;
    #pragma omp parallel for schedule(static) if ((size_t)T * (size_t)N >= PAR_MIN)
    for (int ch = 0; ch < nchunks; ch++) {
        const int n0 = ch * GAE_COLS;
        const int w = N - n0 < GAE_COLS ? N - n0 : GAE_COLS;
        double next_v[GAE_COLS], a[GAE_COLS];
        for (int j = 0; j < w; j++) { next_v[j] = last_value[n0 + j]; a[j] = 0.0; }
        for (int t = T - 1; t >= 0; t--) {
            const size_t row = (size_t)t * (size_t)N + (size_t)n0;
            for (int j = 0; j < w; j++)
                mr_gae_step(reward[row + j], value[row + j], done[row + j], g, gl, &next_v[j], &a[j],
                            &adv[row + j], &ret[row + j]);
        }
    }
}

/* ----------------------------------------------------------- normalisation */

void mr_normalize_with(float *x, size_t n, double mean, double sd) {
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = mr_norm_elem(x[i], mean, sd);
}

void mr_normalize(float *x, size_t n, double *mean_out, double *std_out) {
    double mean, sd;
    mr_mean_std(x, n, &mean, &sd);
    mr_normalize_with(x, n, mean, sd);
    if (mean_out) *mean_out = mean;
    if (std_out) *std_out = sd;
}

/* ------------------------------------------------------------------ PopArt */

void mr_popart_update(mr_popart *p, const float *returns, size_t n, double beta_min,
                      float *w, float *b, int k,
                      float *adam_m_w, float *adam_v_w, float *adam_m_b, float *adam_v_b) {
    if (n == 0) return;
    double bmean, bstd;
    mr_mean_std(returns, n, &bmean, &bstd);
    mr_popart_rescale r;
    mr_popart_step(&p->mean, &p->std, &p->count, beta_min, bmean, bstd, (int64_t)n, &r);
    mr_popart_rescale_layer(&r, w, b, k, adam_m_w, adam_v_w, adam_m_b, adam_v_b);
}

/* ---------------------------------------------------------------- PPO loss */

/* The batch scalars a caller reads (st may be NULL). */
static void stats_out(const mr_loss_stats *s, mr_ppo_stats *st) {
    if (!st) return;
    st->loss = s->loss;
    st->policy_loss = s->policy_loss;
    st->value_loss = s->value_loss;
    st->entropy = s->entropy;
    st->approx_kl = s->approx_kl;
    st->clip_fraction = s->clip_fraction;
}

static void loss_fn(const void *cv, size_t lo, size_t hi, double *acc) {
    for (size_t i = lo; i < hi; i++) mr_loss_add_fn(cv, (int64_t)i, acc);
}

void mr_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                 const float *old_logp, const float *adv, const float *old_value,
                 const float *target, const mr_ppo_coefs *c,
                 float *dlogits, float *dvalue, mr_ppo_stats *st) {
    if (B <= 0) {
        if (st) memset(st, 0, sizeof *st);
        return;
    }
    /* Pass 1: the batch sums (the entropy-floor gradient needs mean H, the
     * max-of-means value loss needs both means), then the batch scalars. */
    mr_loss_hyper h;
    mr_loss_hyper_set(&h, c);
    const mr_loss_ctx ctx = {logits, value, old_logp, adv, old_value, target, action, c->clip, h.num_actions};
    double acc[MR_LOSS_NACC];
    mr_loss_stats s;
    reduce_blocks((size_t)B, MR_LOSS_NACC, loss_fn, &ctx, acc);
    mr_loss_finish(acc, B, &h, &s);
    stats_out(&s, st);
    /* Pass 2: per-sample gradients of the scalar loss (each mean's 1/B included). */
    #pragma omp parallel for schedule(static) if (B >= 4096)
    for (int i = 0; i < B; i++) mr_loss_grad_at(&ctx, i, &h, &s, 1.0, dlogits, dvalue);
}

typedef struct box_ctx {
    const float *logits, *value, *action, *old_logp, *adv, *old_value, *target;
    double clip;
    const mr_act_head *h;
} box_ctx;

static void box_terms(const box_ctx *c, int64_t i, mr_loss_terms *t) {
    const int d = c->h->n;
    const float *row = c->logits + i * 2 * d;
    mr_gauss_loss_terms_at(c->h->squash, row, row + d, c->h->low, c->h->high, d, c->action + i * d, c->old_logp[i],
                           c->adv[i], c->value[i], c->old_value[i], c->target[i], c->clip, t);
}

static void box_loss_fn(const void *cv, size_t lo, size_t hi, double *acc) {
    const box_ctx *c = cv;
    for (size_t i = lo; i < hi; i++) {
        mr_loss_terms t;
        box_terms(c, (int64_t)i, &t);
        mr_loss_add(&t, c->clip, acc);
    }
}

void mr_ppo_loss_box(int B, const mr_act_head *hd, const float *logits, const float *value, const float *action,
                     const float *old_logp, const float *adv, const float *old_value, const float *target,
                     const mr_ppo_coefs *c, float *dlogits, float *dvalue, mr_ppo_stats *st) {
    if (B <= 0) {
        if (st) memset(st, 0, sizeof *st);
        return;
    }
    const int d = hd->n;
    mr_loss_hyper h;
    mr_loss_hyper_set(&h, c);
    const box_ctx ctx = {logits, value, action, old_logp, adv, old_value, target, c->clip, hd};
    double acc[MR_LOSS_NACC];
    mr_loss_stats s;
    reduce_blocks((size_t)B, MR_LOSS_NACC, box_loss_fn, &ctx, acc);
    mr_loss_finish(acc, B, &h, &s);
    stats_out(&s, st);
    #pragma omp parallel for schedule(static) if (B >= 4096)
    for (int i = 0; i < B; i++) {
        mr_loss_terms t;
        box_terms(&ctx, i, &t);
        const float *row = logits + (size_t)i * 2 * d;
        float *drow = dlogits + (size_t)i * 2 * d;
        mr_gauss_grad_row(&t, row, row + d, d, action + (size_t)i * d, s.dL_dH, h.vf_coef, h.value_max_of_means != 0,
                          s.unclipped_mean, 1.0 / (double)s.B, 1.0, drow, drow + d, &dvalue[i]);
    }
}

void mr_sample_box(int N, const mr_act_head *h, const float *logits, const float *eps, float *x, float *env_action,
                   float *logp) {
    const int d = h->n;
    #pragma omp parallel for schedule(static) if (N >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *row = logits + (size_t)i * 2 * d;
        float *xi = x + (size_t)i * d;
        mr_gauss_sample(row, row + d, d, eps + (size_t)i * d, xi);
        logp[i] = mr_gauss_log_prob(h->squash, row, row + d, h->low, h->high, d, xi);
        if (env_action) mr_gauss_env_action(h->squash, xi, h->low, h->high, d, env_action + (size_t)i * d);
    }
}

typedef struct md_ctx {
    const float *logits, *value, *old_logp, *adv, *old_value, *target;
    const uint8_t *action;
    double clip;
    const mr_act_head *h;
} md_ctx;

static void md_terms(const md_ctx *c, int64_t i, mr_md_terms *o) {
    const int L = c->h->logits, k = c->h->n;
    mr_md_loss_terms_at(c->logits + i * L, c->h->nvec, k, c->action + i * k, c->old_logp[i], c->adv[i], c->value[i],
                        c->old_value[i], c->target[i], c->clip, o);
}

static void md_loss_fn(const void *cv, size_t lo, size_t hi, double *acc) {
    const md_ctx *c = cv;
    for (size_t i = lo; i < hi; i++) {
        mr_md_terms o;
        md_terms(c, (int64_t)i, &o);
        mr_loss_add(&o.t, c->clip, acc);
    }
}

void mr_ppo_loss_md(int B, const mr_act_head *hd, const float *logits, const float *value, const uint8_t *action,
                    const float *old_logp, const float *adv, const float *old_value, const float *target,
                    const mr_ppo_coefs *c, float *dlogits, float *dvalue, mr_ppo_stats *st) {
    if (B <= 0) {
        if (st) memset(st, 0, sizeof *st);
        return;
    }
    const int L = hd->logits, k = hd->n;
    mr_loss_hyper h;
    mr_loss_hyper_set(&h, c);
    const md_ctx ctx = {logits, value, old_logp, adv, old_value, target, action, c->clip, hd};
    double acc[MR_LOSS_NACC];
    mr_loss_stats s;
    reduce_blocks((size_t)B, MR_LOSS_NACC, md_loss_fn, &ctx, acc);
    mr_loss_finish(acc, B, &h, &s);
    stats_out(&s, st);
    #pragma omp parallel for schedule(static) if (B >= 4096)
    for (int i = 0; i < B; i++) {
        mr_md_terms o;
        md_terms(&ctx, i, &o);
        mr_md_grad_row(&o, hd->nvec, k, action + (size_t)i * k, s.dL_dH, h.vf_coef, h.value_max_of_means != 0,
                       s.unclipped_mean, 1.0 / (double)s.B, 1.0, dlogits + (size_t)i * L, &dvalue[i]);
    }
}

void mr_sample_md(int N, const mr_act_head *h, const float *logits, const float *u, uint8_t *action, float *logp) {
    const int L = h->logits, k = h->n;
    #pragma omp parallel for schedule(static) if (N >= PAR_MIN)
    for (int i = 0; i < N; i++)
        mr_md_sample(logits + (size_t)i * L, h->nvec, k, u + (size_t)i * k, action + (size_t)i * k, &logp[i]);
}

void mr_sample_actions(int N, int na, const float *logits, const float *u, uint8_t *action,
                       float *logp) {
    #pragma omp parallel for schedule(static) if (N >= PAR_MIN)
    for (int i = 0; i < N; i++)
        mr_sample_row(logits + (size_t)i * na, na, u[i], &action[i], &logp[i]);
}

/* ------------------------------------------------------ gradients and Adam */

double mr_grad_norm(const float *g, size_t n) {
    sum_ctx c = {g, 0.0};
    double s;
    reduce_blocks(n, 1, sumsq_fn, &c, &s);
    return sqrt(s);
}

double mr_clip_factor(double norm, double max_norm) { return mr_opt_clip_factor(norm, max_norm); }

void mr_adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                  double lr, double beta1, double beta2, double eps, double grad_scale,
                  int64_t step) {
    float step_size, bc2_sqrt;
    mr_adam_bias(lr, beta1, beta2, step, &step_size, &bc2_sqrt);
    const mr_adam_coefs k = mr_adam_coefs_make(beta1, beta2, (float)eps, step_size, bc2_sqrt);
    const float gs = (float)grad_scale;
    /* firstprivate: each thread's own copy of k stays in registers (the shared
     * one could alias param, m or v, so it would be reloaded every element). */
    #pragma omp parallel for schedule(static) firstprivate(k) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) mr_adam_elem(&param[i], &m[i], &v[i], grad[i], gs, &k);
}

/* ------------------------------------------------------------------ misc */


/*
 * ppo.c - the PPO math of the CPU engine (see ppo.h for every contract).
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
 * the compiler vectorise; the lanes are then added in a fixed order. */
#define LANES 8
#define BLOCK_SUM(acc, lo, hi, i, expr) do {                                    \
        double l_[LANES] = {0};                                                 \
        size_t j_ = (lo);                                                       \
        for (; j_ + LANES <= (hi); j_ += LANES)                                 \
            for (size_t i = j_; i < j_ + LANES; i++) l_[i - j_] += (expr);      \
        for (size_t i = j_; i < (hi); i++) l_[i - j_] += (expr);                \
        (acc) += ((l_[0] + l_[1]) + (l_[2] + l_[3])) + ((l_[4] + l_[5]) + (l_[6] + l_[7])); \
    } while (0)

typedef struct { const float *a, *b; double shift; } pair_ctx;

static void sum_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const pair_ctx *)c)->a;
    BLOCK_SUM(acc[0], lo, hi, i, (double)a[i]);
}
static void sumsq_dev_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const pair_ctx *)c)->a;
    const double m = ((const pair_ctx *)c)->shift;
    BLOCK_SUM(acc[0], lo, hi, i, ((double)a[i] - m) * ((double)a[i] - m));
}
static void sumsq_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const pair_ctx *)c)->a;
    BLOCK_SUM(acc[0], lo, hi, i, (double)a[i] * (double)a[i]);
}
/* b - a */
static void diff_sum_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const pair_ctx *)c)->a, *b = ((const pair_ctx *)c)->b;
    BLOCK_SUM(acc[0], lo, hi, i, (double)b[i] - (double)a[i]);
}
static void diff_sumsq_dev_fn(const void *c, size_t lo, size_t hi, double *acc) {
    const float *a = ((const pair_ctx *)c)->a, *b = ((const pair_ctx *)c)->b;
    const double m = ((const pair_ctx *)c)->shift;
    BLOCK_SUM(acc[0], lo, hi, i, (((double)b[i] - (double)a[i]) - m) * (((double)b[i] - (double)a[i]) - m));
}

void mr_mean_std(const float *x, size_t n, double *mean_out, double *std_out) {
    double mean = 0.0, sd = 0.0;
    if (n > 0) {
        pair_ctx c = {x, NULL, 0.0};
        double s;
        reduce_blocks(n, 1, sum_fn, &c, &s);
        mean = s / (double)n;
        if (n > 1) {
            c.shift = mean;
            reduce_blocks(n, 1, sumsq_dev_fn, &c, &s);
            sd = sqrt(s / (double)(n - 1));
        }
    }
    if (mean_out) *mean_out = mean;
    if (std_out) *std_out = sd;
}

/* --------------------------------------------------------------- schedules */

double mr_schedule_value(const mr_schedule *s, double progress) {
    double p = progress > 0.0 ? progress : 0.0;    /* NaN reads as 0 */
    if (p > 1.0) p = 1.0;
    switch (s->kind) {
    case MR_SCHED_CONSTANT:
        return s->start;
    case MR_SCHED_LINEAR:            /* written so p = 0 and p = 1 are exact */
        return (1.0 - p) * s->start + p * s->end;
    case MR_SCHED_COSINE: {
        double w = 0.5 * (1.0 + cos(PI * p));
        return (1.0 - w) * s->end + w * s->start;
    }
    case MR_SCHED_STEP: {
        /* + 1e-9: progress k/total at a step boundary must land on that step
         * (0.3 / 0.1 is 2.9999999999999996 in double). */
        double k = s->every > 0.0 ? floor(p / s->every + 1e-9) : 0.0;
        double v = s->start * pow(s->gamma, k);
        if (s->start > s->end) { if (v < s->end) v = s->end; }
        else if (s->start < s->end) { if (v > s->end) v = s->end; }
        else v = s->end;
        return v;
    }
    default:
        return NAN;
    }
}

/* --------------------------------------------------------------------- GAE */

#define GAE_COLS 64   /* environments per task: the inner loop runs along a row */

void mr_gae(int T, int N, const float *reward, const float *value,
            const float *last_value, const uint8_t *done, float gamma, float lambda,
            float *adv, float *ret) {
    if (T <= 0 || N <= 0) return;
    const double g = gamma, gl = (double)gamma * (double)lambda;
    const int nchunks = (N + GAE_COLS - 1) / GAE_COLS;
    #pragma omp parallel for schedule(static) if ((size_t)T * (size_t)N >= PAR_MIN)
    for (int ch = 0; ch < nchunks; ch++) {
        const int n0 = ch * GAE_COLS;
        const int w = N - n0 < GAE_COLS ? N - n0 : GAE_COLS;
        double next_v[GAE_COLS], a[GAE_COLS];
        for (int j = 0; j < w; j++) { next_v[j] = last_value[n0 + j]; a[j] = 0.0; }
        for (int t = T - 1; t >= 0; t--) {
            const size_t row = (size_t)t * (size_t)N + (size_t)n0;
            for (int j = 0; j < w; j++) {
                const double keep = done[row + j] ? 0.0 : 1.0;
                const double v = value[row + j];
                const double delta = (double)reward[row + j] + g * keep * next_v[j] - v;
                a[j] = delta + gl * keep * a[j];
                adv[row + j] = (float)a[j];
                ret[row + j] = (float)(a[j] + v);
                next_v[j] = v;
            }
        }
    }
}

/* ----------------------------------------------------------- normalisation */

void mr_normalize(float *x, size_t n, double *mean_out, double *std_out) {
    double mean, sd;
    mr_mean_std(x, n, &mean, &sd);
    const double denom = sd + MR_ADV_EPS;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = (float)(((double)x[i] - mean) / denom);
    if (mean_out) *mean_out = mean;
    if (std_out) *std_out = sd;
}

/* ------------------------------------------------------------------ PopArt */

void mr_popart_init(mr_popart *p) {
    p->mean = 0.0;
    p->std = 1.0;
    p->count = 0.0;
}

void mr_popart_update(mr_popart *p, const float *returns, size_t n, double beta_min,
                      float *w, float *b, int k,
                      float *adam_m_w, float *adam_v_w, float *adam_m_b, float *adam_v_b) {
    if (n == 0) return;
    double bmean, bstd;
    mr_mean_std(returns, n, &bmean, &bstd);
    /* Clamp as torch.clamp would: a NaN stays NaN (the trainer reports it). */
    if (n < 2 || bstd < MR_POPART_MIN_STD) bstd = MR_POPART_MIN_STD;

    p->count += 1.0;
    double beta = 1.0 / p->count;
    if (beta < beta_min) beta = beta_min;
    const double mean = p->mean, sd = p->std;
    const double mean2 = (1.0 - beta) * mean + beta * bmean;
    /* As ENV_SPEC writes it: the OLD std^2 blended with the BATCH std^2 (not
     * running second moments, which would also carry the mean shift). */
    const double var2 = (1.0 - beta) * sd * sd + beta * bstd * bstd;
    double sd2 = sqrt(var2);
    if (sd2 < MR_POPART_MIN_STD) sd2 = MR_POPART_MIN_STD;

    /* Keep every output: mean + sd*(w.h + b) == mean2 + sd2*(w'.h + b'). */
    const double s = sd / sd2, s2 = s * s;
    for (int i = 0; i < k; i++) w[i] = (float)((double)w[i] * s);
    *b = (float)(((double)*b * sd + mean - mean2) / sd2);
    if (adam_m_w) for (int i = 0; i < k; i++) adam_m_w[i] = (float)((double)adam_m_w[i] * s);
    if (adam_v_w) for (int i = 0; i < k; i++) adam_v_w[i] = (float)((double)adam_v_w[i] * s2);
    if (adam_m_b) *adam_m_b = (float)((double)*adam_m_b * s);
    if (adam_v_b) *adam_v_b = (float)((double)*adam_v_b * s2);

    p->mean = mean2;
    p->std = sd2;
}

void mr_popart_normalize(const mr_popart *p, const float *x, float *y, size_t n) {
    const double mean = p->mean, sd = p->std;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = (float)(((double)x[i] - mean) / sd);
}

void mr_popart_denormalize(const mr_popart *p, const float *x, float *y, size_t n) {
    const double mean = p->mean, sd = p->std;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = (float)(mean + sd * (double)x[i]);
}

/* ---------------------------------------------------------------- PPO loss */

/* log-softmax, softmax and entropy of one row of logits, in double. */
static inline double softmax_row(const float *z, double *logp, double *p) {
    double m = z[0];
    for (int j = 1; j < MR_NUM_ACTIONS; j++) if (z[j] > m) m = z[j];
    double s = 0.0;
    for (int j = 0; j < MR_NUM_ACTIONS; j++) s += exp((double)z[j] - m);
    const double ls = log(s);
    double h = 0.0;
    for (int j = 0; j < MR_NUM_ACTIONS; j++) {
        logp[j] = ((double)z[j] - m) - ls;
        p[j] = exp(logp[j]);
        h -= p[j] * logp[j];
    }
    return h;
}

/* One sample's policy and value terms. */
typedef struct {
    double logp[MR_NUM_ACTIONS], p[MR_NUM_ACTIONS];
    double entropy, ratio, log_ratio;
    double pol, dpol_dr;        /* max(-A r, -A clip(r)) and its r-derivative */
    double e1, e2;              /* (v - R)^2, (v_clipped - R)^2 */
    double g1, g2;              /* their v-derivatives */
} sample_terms;

static inline void terms_at(const float *z, int a, double old_logp, double A,
                            double v, double old, double R, double c, sample_terms *o) {
    o->entropy = softmax_row(z, o->logp, o->p);
    o->log_ratio = o->logp[a] - old_logp;
    const double r = exp(o->log_ratio);
    o->ratio = r;
    const double lo = 1.0 - c, hi = 1.0 + c;
    const double rc = r < lo ? lo : (r > hi ? hi : r);
    const double s1 = -A * r, s2 = -A * rc;
    /* torch: clamp passes the gradient for lo <= r <= hi. */
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

typedef struct {
    const float *logits, *value, *old_logp, *adv, *old_value, *target;
    const uint8_t *action;
    double clip;
} loss_ctx;

enum { ACC_POL, ACC_VMAX, ACC_ENT, ACC_KL, ACC_CLIPFRAC, ACC_E1, ACC_E2, ACC_N };

static void loss_fn(const void *cv, size_t lo, size_t hi, double *acc) {
    const loss_ctx *c = cv;
    for (size_t i = lo; i < hi; i++) {
        sample_terms t;
        terms_at(c->logits + i * MR_NUM_ACTIONS, c->action[i], c->old_logp[i], c->adv[i],
                 c->value[i], c->old_value[i], c->target[i], c->clip, &t);
        acc[ACC_POL] += t.pol;
        acc[ACC_VMAX] += t.e1 >= t.e2 ? t.e1 : t.e2;
        acc[ACC_ENT] += t.entropy;
        acc[ACC_KL] += (t.ratio - 1.0) - t.log_ratio;
        acc[ACC_CLIPFRAC] += fabs(t.ratio - 1.0) > c->clip ? 1.0 : 0.0;
        acc[ACC_E1] += t.e1;
        acc[ACC_E2] += t.e2;
    }
}

void mr_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                 const float *old_logp, const float *adv, const float *old_value,
                 const float *target, const mr_ppo_coefs *c,
                 float *dlogits, float *dvalue, mr_ppo_stats *st) {
    if (B <= 0) {
        if (st) memset(st, 0, sizeof *st);
        return;
    }
    /* Pass 1: the batch means (the entropy-floor gradient needs mean H, the
     * max-of-means value loss needs both means). */
    loss_ctx ctx = {logits, value, old_logp, adv, old_value, target, action, c->clip};
    double acc[ACC_N];
    reduce_blocks((size_t)B, ACC_N, loss_fn, &ctx, acc);
    const double invB = 1.0 / (double)B;
    const double H = acc[ACC_ENT] * invB;
    const double pol = acc[ACC_POL] * invB;
    const double m1 = acc[ACC_E1] * invB, m2 = acc[ACC_E2] * invB;
    const int batch_max = c->value_max_of_means != 0;
    const int unclipped_mean = m1 >= m2;
    const double vloss = batch_max ? (unclipped_mean ? m1 : m2) : acc[ACC_VMAX] * invB;
    const double floor_gap = c->ent_floor - H;
    /* dloss/dH; relu passes no gradient at 0, as torch. */
    const double dL_dH = -c->ent_coef - (floor_gap > 0.0 ? c->ent_floor_coef : 0.0);

    if (st) {
        st->policy_loss = pol;
        st->value_loss = vloss;
        st->entropy = H;
        st->approx_kl = acc[ACC_KL] * invB;
        st->clip_fraction = acc[ACC_CLIPFRAC] * invB;
        st->loss = pol + c->vf_coef * vloss - c->ent_coef * H
                 + c->ent_floor_coef * (floor_gap > 0.0 ? floor_gap : 0.0);
    }

    /* Pass 2: per-sample gradients of the scalar loss (each mean's 1/B included). */
    const double vf = c->vf_coef, clip = c->clip;
    #pragma omp parallel for schedule(static) if (B >= 4096)
    for (int i = 0; i < B; i++) {
        sample_terms t;
        const int a = action[i];
        terms_at(logits + (size_t)i * MR_NUM_ACTIONS, a, old_logp[i], adv[i],
                 value[i], old_value[i], target[i], clip, &t);
        /* d logp(a)/dz_k = [k==a] - p_k;  dH_i/dz_k = -p_k (logp_k + H_i). */
        const double gr = t.dpol_dr * t.ratio;
        float *dz = dlogits + (size_t)i * MR_NUM_ACTIONS;
        for (int k = 0; k < MR_NUM_ACTIONS; k++) {
            const double dlogp = (k == a ? 1.0 : 0.0) - t.p[k];
            const double dH = -t.p[k] * (t.logp[k] + t.entropy);
            dz[k] = (float)((gr * dlogp + dL_dH * dH) * invB);
        }
        double gv;
        if (batch_max) gv = unclipped_mean ? t.g1 : t.g2;
        else gv = t.e1 >= t.e2 ? t.g1 : t.g2;
        dvalue[i] = (float)(vf * gv * invB);
    }
}

void mr_sample_actions(int N, const float *logits, const float *u, uint8_t *action,
                       float *logp) {
    #pragma omp parallel for schedule(static) if (N >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * MR_NUM_ACTIONS;
        float m = z[0];
        for (int j = 1; j < MR_NUM_ACTIONS; j++) if (z[j] > m) m = z[j];
        float e[MR_NUM_ACTIONS], S = 0.0f;
        for (int j = 0; j < MR_NUM_ACTIONS; j++) { e[j] = expf(z[j] - m); S += e[j]; }
        const float t = u[i] * S;
        float cum = 0.0f;
        int a = -1;
        for (int j = 0; j < MR_NUM_ACTIONS; j++) {
            cum += e[j];
            if (a < 0 && t < cum) a = j;
        }
        if (a < 0) {              /* u * S rounded up to (or past) the total */
            a = MR_NUM_ACTIONS - 1;
            for (int j = MR_NUM_ACTIONS - 1; j >= 0; j--) if (e[j] > 0.0f) { a = j; break; }
        }
        action[i] = (uint8_t)a;
        logp[i] = (z[a] - m) - logf(S);
    }
}

/* ------------------------------------------------------ gradients and Adam */

double mr_grad_norm(const float *g, size_t n) {
    pair_ctx c = {g, NULL, 0.0};
    double s;
    reduce_blocks(n, 1, sumsq_fn, &c, &s);
    return sqrt(s);
}

double mr_clip_factor(double norm, double max_norm) {
    if (!(max_norm > 0.0)) return 1.0;
    const double f = max_norm / (norm + MR_CLIP_EPS);
    return f < 1.0 || f != f ? f : 1.0;
}

void mr_adam_step(float *param, const float *grad, float *m, float *v, size_t n,
                  double lr, double beta1, double beta2, double eps, double grad_scale,
                  int64_t step) {
    /* As torch.optim.Adam (single-tensor path): scalars such as 1 - beta2 and
     * the bias corrections are formed in double (Python floats there) and
     * applied as float. Forming 1 - beta2 from a float 0.999f would be off by
     * 1.3e-5 relative. */
    const double bc1 = 1.0 - pow(beta1, (double)step);
    const double bc2 = 1.0 - pow(beta2, (double)step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float w1 = (float)(1.0 - beta1), w2 = (float)(1.0 - beta2);
    const float b2 = (float)beta2, epsf = (float)eps, gs = (float)grad_scale;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i] * gs;
        const float mi = m[i] + w1 * (g - m[i]);          /* torch: m.lerp_(g, 1 - beta1) */
        const float vi = v[i] * b2 + w2 * g * g;           /* v.mul_(b2).addcmul_(g, g, 1 - b2) */
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2_sqrt + epsf;
        param[i] -= step_size * (mi / denom);
    }
}

/* ------------------------------------------------------------------ misc */

double mr_explained_variance(const float *pred, const float *target, size_t n) {
    if (n == 0) return 0.0;
    double mt, s_t, s_d, md;
    pair_ctx c = {target, NULL, 0.0};
    reduce_blocks(n, 1, sum_fn, &c, &mt);
    mt /= (double)n;
    c.shift = mt;
    reduce_blocks(n, 1, sumsq_dev_fn, &c, &s_t);
    if (s_t == 0.0) return 0.0;
    pair_ctx d = {pred, target, 0.0};
    reduce_blocks(n, 1, diff_sum_fn, &d, &md);
    d.shift = md / (double)n;
    reduce_blocks(n, 1, diff_sumsq_dev_fn, &d, &s_d);
    /* Same normaliser on both variances, so biased vs unbiased cancels. */
    return 1.0 - s_d / s_t;
}

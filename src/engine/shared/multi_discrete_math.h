/*
 * multi_discrete_math.h - the multi-discrete policy head, per sample, written
 * once as MR_HD functions (plain C, host+device): k categorical heads, head i
 * with n_i choices, its logits the i-th segment of one row,
 *   z = [ z_0 (n_0) | z_1 (n_1) | ... | z_{k-1} (n_{k-1}) ],
 * 1 <= k <= MR_MD_MAX_HEADS, n_i >= 1, sum n_i <= MR_MD_MAX_LOGITS. An action
 * is k bytes a_i in [0, n_i) (n_i <= 256, so a u8 holds any choice).
 *
 * The heads are independent, so the joint log-probability is the sum of the
 * chosen log-probabilities, the entropy the sum of the heads' entropies, and
 * the gradient w.r.t. segment i is the categorical head's (mr_loss_grad_row)
 * with that segment's probabilities and entropy and the joint ratio.
 *
 * Why the categorical helpers are not called per segment: mr_loss_softmax,
 * mr_loss_grad_row and mr_sample_row loop to MR_MAX_ACTIONS = 8 (so a GPU keeps
 * the row in registers) and a segment may have up to 256 logits. The segment
 * functions below do the same operations in the same order with n as the
 * bound. What is shared is called: mr_loss_terms_at (ratio, clip, value
 * terms), mr_loss_add, mr_loss_finish, and mr_loss_grad_row for dvalue.
 *
 * mr_md_terms holds 256 doubles of log-probabilities: on a GPU it lives in
 * local memory, not registers.
 */
#ifndef MR_MULTI_DISCRETE_MATH_H
#define MR_MULTI_DISCRETE_MATH_H
#include <math.h>
#include <stdint.h>
#include "ppo_loss_math.h"   /* MR_HD, mr_loss_terms, mr_loss_terms_at, mr_loss_grad_row */

#define MR_MD_MAX_HEADS 8
#define MR_MD_MAX_LOGITS 256

/* sum n_i, the row's logit count; -1 when the shape is not accepted. */
MR_HD int mr_md_num_logits(const int *n, int k) {
    if (k < 1 || k > MR_MD_MAX_HEADS) return -1;
    int s = 0;
    for (int i = 0; i < k; i++) {
        if (n[i] < 1 || n[i] > MR_MD_MAX_LOGITS) return -1;
        s += n[i];
    }
    return s <= MR_MD_MAX_LOGITS ? s : -1;
}

/* -------------------------------------------------------------- one segment */

/* log-softmax and entropy of one segment of n logits, in double: mr_loss_softmax's
 * operations (max shift, sum of exp, log) with n as the bound. */
MR_HD double mr_md_segment_softmax(const float *z, int n, double *logp) {
    double m = z[0];
    for (int j = 1; j < n; j++) if (z[j] > m) m = z[j];
    double s = 0.0;
    for (int j = 0; j < n; j++) s += exp((double)z[j] - m);
    const double ls = log(s);
    double h = 0.0;
    for (int j = 0; j < n; j++) {
        logp[j] = ((double)z[j] - m) - ls;
        h -= exp(logp[j]) * logp[j];
    }
    return h;
}

/* One segment's share of the gradient row, as mr_loss_grad_row's loop:
 *   d logp(a)/dz_j = [j==a] - p_j;  dH/dz_j = -p_j (logp_j + H)
 * gr = dloss/dlogp of the joint (dpol_dr * ratio), H the segment's entropy. */
MR_HD void mr_md_segment_grad(const double *logp, int n, int a, double H, double gr, double dL_dH, double invB,
                              double scale, float *dz) {
    for (int j = 0; j < n; j++) {
        const double p = exp(logp[j]);
        const double dlogp = (j == a ? 1.0 : 0.0) - p;
        const double dH = -p * (logp[j] + H);
        dz[j] = (float)(((gr * dlogp + dL_dH * dH) * invB) * scale);
    }
}

/* One segment's sample by inverse CDF, in float, as mr_sample_row:
 *   m = max z_j;  e_j = expf(z_j - m);  S = e_0 + ... + e_{n-1} (in order);
 *   t = u * S;  a = the first j with t < e_0 + ... + e_j (in order).
 * So j is picked for u*S in [cum_{j-1}, cum_j): probability e_j / S up to
 * the rounding of u*S (2^-24 relative), and a choice with e_j = 0 (z_j - m
 * below ~ -104) never. When no j qualifies (u = 1.0, or u*S rounded up to S)
 * the last choice with e_j > 0 is taken: u = 1.0 picks the last choice
 * unless its probability underflowed to 0. e_j is recomputed in each pass
 * (the same expf of the same float, so the same value) instead of stored:
 * no array of 256 floats per thread. logp: (z_a - m) - logf(S). */
MR_HD int mr_md_segment_sample(const float *z, int n, float u, float *logp) {
    float m = z[0];
    for (int j = 1; j < n; j++) if (z[j] > m) m = z[j];
    float S = 0.0f;
    for (int j = 0; j < n; j++) S += expf(z[j] - m);
    const float t = u * S;
    float cum = 0.0f;
    int a = -1;
    for (int j = 0; j < n && a < 0; j++) {
        cum += expf(z[j] - m);
        if (t < cum) a = j;
    }
    if (a < 0) {
        a = n - 1;
        for (int j = n - 1; j >= 0; j--) if (expf(z[j] - m) > 0.0f) { a = j; break; }
    }
    *logp = (z[a] - m) - logf(S);
    return a;
}

/* ---------------------------------------------------------------- the row */

/* Every segment's log-softmax into logp (sum n_i doubles) and entropy into
 * ent (k); returns the sum of the entropies, added in head order. */
MR_HD double mr_md_softmax(const float *z, const int *n, int k, double *logp, double *ent) {
    double H = 0.0;
    int off = 0;
    for (int i = 0; i < k; i++) {
        ent[i] = mr_md_segment_softmax(z + off, n[i], logp + off);
        H += ent[i];
        off += n[i];
    }
    return H;
}

/* The joint log-probability of action a (k bytes): the chosen log-probs added
 * in head order. A choice a_i >= n_i gives NaN, as the categorical head does:
 * the loss is NaN and the optimizer skips the step. */
MR_HD double mr_md_log_prob(const double *logp, const int *n, int k, const uint8_t *a) {
    double s = 0.0;
    int off = 0;
    for (int i = 0; i < k; i++) {
        s += (int)a[i] < n[i] ? logp[off + a[i]] : (double)NAN;
        off += n[i];
    }
    return s;
}

/* A rollout sample: head i from uniform u[i] in [0, 1] (rng.h's
 * mr_rng_uniform, e.g. draw i of MR_RNG_ACTION), into a[i]; logp: the joint
 * log-probability, the heads' float logps added in head order. */
MR_HD void mr_md_sample(const float *z, const int *n, int k, const float *u, uint8_t *a, float *logp) {
    float s = 0.0f;
    int off = 0;
    for (int i = 0; i < k; i++) {
        float lp;
        a[i] = (uint8_t)mr_md_segment_sample(z + off, n[i], u[i], &lp);
        s += lp;
        off += n[i];
    }
    *logp = s;
}

/* ------------------------------------------------------ one sample's loss */

typedef struct mr_md_terms {
    double logp[MR_MD_MAX_LOGITS];   /* every segment's log-softmax; from sum n_i on unused */
    double ent[MR_MD_MAX_HEADS];     /* each head's entropy */
    mr_loss_terms t;                 /* ratio, clip, value terms; t.entropy = sum of ent */
} mr_md_terms;

/* One sample's terms, as mr_loss_terms_at for the categorical head, which
 * does the ratio, its clip (tie rules included) and the value terms: the
 * joint logp enters as a row of one logit (its log-softmax is exactly 0) with
 * old_logp shifted by -logp, so log_ratio = 0 - (old_logp - logp) = logp -
 * old_logp exactly. mr_loss_add(&o->t, ...) then sums it like a categorical
 * sample. */
MR_HD void mr_md_loss_terms_at(const float *z, const int *n, int k, const uint8_t *a, double old_logp, double A,
                               double v, double old, double R, double c, mr_md_terms *o) {
    const double H = mr_md_softmax(z, n, k, o->logp, o->ent);
    const double lp = mr_md_log_prob(o->logp, n, k, a);
    const float z0 = 0.0f;
    mr_loss_terms_at(&z0, 1, 0, old_logp - lp, A, v, old, R, c, &o->t);
    o->t.entropy = H;
}

/* One sample's gradient row (dz: sum n_i floats) and dvalue, times scale, as
 * mr_loss_grad_row: segment by segment, the joint's dloss/dlogp (every
 * segment's chosen logp enters the joint with weight 1) and the segment's own
 * entropy (the others' do not depend on its logits). dv: mr_loss_grad_row
 * itself (na = 0: it writes no logits). */
MR_HD void mr_md_grad_row(const mr_md_terms *o, const int *n, int k, const uint8_t *a, double dL_dH, double vf_coef,
                          int batch_max, int unclipped_mean, double invB, double scale, float *dz, float *dv) {
    const double gr = o->t.dpol_dr * o->t.ratio;
    int off = 0;
    for (int i = 0; i < k; i++) {
        mr_md_segment_grad(o->logp + off, n[i], a[i], o->ent[i], gr, dL_dH, invB, scale, dz + off);
        off += n[i];
    }
    mr_loss_grad_row(&o->t, 0, 0, dL_dH, vf_coef, batch_max, unclipped_mean, invB, scale, (float *)0, dv);
}

#endif /* MR_MULTI_DISCRETE_MATH_H */

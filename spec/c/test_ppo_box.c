/*
 * test_ppo_box.c - the PPO loss over a box action's Gaussian head
 * (cpu/ppo.c's mr_ppo_loss_box and mr_sample_box, over gauss_math.h):
 *   - the loss value against an independent double computation written out
 *     here from the PPO formulas (clipped surrogate, max-of-means value
 *     loss, the Gaussian's entropy);
 *   - its gradient w.r.t. every mean, log-std and value against central
 *     differences of that reference (elements whose step crosses a clip's
 *     kink are counted and left out, at most a few);
 *   - sampling: the stored sample is mean + std eps, its log-probability
 *     the reference's, and the environment's action the sample clipped to
 *     the box (clip) or low + (high - low) (tanh(x) + 1) / 2 (tanh);
 * each in both modes of policy.box_squash: clip (the Gaussian's density)
 * and tanh (the density of the squashed action: the Gaussian's minus
 * log |d action / d x|, written here as -log((high - low)/2) + 2 log cosh x
 * in double, independent of gauss_math.h's softplus form).
 */
#include "check.h"
#include "ppo.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 64, D = 2 };
static double lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static float logits[B * 2 * D], act[B * D], oldlp[B], adv[B], val[B], oldv[B], tgt[B];
static const float LO[D] = {-2.0f, -1.0f}, HI[D] = {2.0f, 3.0f};
static int MODE;   /* MR_GAUSS_CLIP or MR_GAUSS_TANH */

/* The log-density of x under (mean, log_std), in double: the Gaussian's,
 * and in tanh mode minus log |d a / d x| = log((hi - lo) / 2) + log(1 -
 * tanh^2 x) = log((hi - lo) / 2) - 2 log cosh x. */
static double ref_logp(const double *m, const double *ls, const float *x) {
    double s = 0;
    for (int j = 0; j < D; j++) {
        const double z = ((double)x[j] - m[j]) / exp(ls[j]);
        s += -0.5 * z * z - ls[j] - 0.5 * log(2 * M_PI);
        if (MODE == MR_GAUSS_TANH) s -= log(0.5 * ((double)HI[j] - LO[j])) - 2.0 * log(cosh((double)x[j]));
    }
    return s;
}

/* The loss as the formulas say it: mean of -min(r A, clip(r) A), plus
 * vf_coef max(mean (v - R)^2, mean (v_clipped - R)^2), minus ent_coef H. */
static double ref_loss(const double *L, const double *V, const mr_ppo_coefs *c) {
    double pol = 0, e1 = 0, e2 = 0, H = 0;
    for (int i = 0; i < B; i++) {
        const double *m = L + i * 2 * D, *ls = m + D;
        const double r = exp(ref_logp(m, ls, act + i * D) - oldlp[i]);
        const double rc = r < 1 - c->clip ? 1 - c->clip : r > 1 + c->clip ? 1 + c->clip : r;
        pol += -fmin(r * adv[i], rc * adv[i]);
        const double dv = V[i] - oldv[i], vc = oldv[i] + (dv < -c->clip ? -c->clip : dv > c->clip ? c->clip : dv);
        e1 += (V[i] - tgt[i]) * (V[i] - tgt[i]);
        e2 += (vc - tgt[i]) * (vc - tgt[i]);
        for (int j = 0; j < D; j++) H += ls[j] + 0.5 * (1 + log(2 * M_PI));
    }
    return pol / B + c->vf_coef * fmax(e1 / B, e2 / B) - c->ent_coef * H / B;
}

static void run(int mode) {
    MODE = mode;
    mr_act_head hd;
    memset(&hd, 0, sizeof hd);
    hd.kind = MR_HEAD_GAUSS;
    hd.n = D;
    hd.squash = mode;
    for (int j = 0; j < D; j++) { hd.low[j] = LO[j]; hd.high[j] = HI[j]; }
    hd.logits = 2 * D;
    hd.act_bytes = 4 * D;
    uint64_t s = 3;
    for (int i = 0; i < B * 2 * D; i++) logits[i] = (float)((lcg(&s) - 0.5) * (i % (2 * D) < D ? 2.0 : 0.6));
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < D; j++) act[i * D + j] = (float)((lcg(&s) - 0.5) * 3);
        double m[D], ls[D];
        for (int j = 0; j < D; j++) { m[j] = logits[i * 2 * D + j]; ls[j] = logits[i * 2 * D + D + j]; }
        oldlp[i] = (float)(ref_logp(m, ls, act + i * D) + (lcg(&s) - 0.5) * 0.6);   /* ratios around 1, some clipped */
        adv[i] = (float)((lcg(&s) - 0.5) * 2);
        val[i] = (float)((lcg(&s) - 0.5) * 2);
        oldv[i] = val[i] + (float)((lcg(&s) - 0.5) * 0.6);
        tgt[i] = (float)((lcg(&s) - 0.5) * 2);
    }
    mr_ppo_coefs c;
    memset(&c, 0, sizeof c);
    c.clip = 0.2;
    c.ent_coef = 0.01;
    c.vf_coef = 0.5;
    c.value_max_of_means = 1;
    c.num_actions = 2 * D;
    float dl[B * 2 * D], dv[B];
    mr_ppo_stats st;
    mr_ppo_loss_box(B, &hd, logits, val, act, oldlp, adv, oldv, tgt, &c, dl, dv, &st);

    static double L[B * 2 * D], V[B];
    for (int i = 0; i < B * 2 * D; i++) L[i] = logits[i];
    for (int i = 0; i < B; i++) V[i] = val[i];
    const double ref = ref_loss(L, V, &c);
    CHECK_MSG(fabs(st.loss - ref) < 1e-5 * (1 + fabs(ref)), "mode %d: loss %.9g, reference %.9g", mode, st.loss, ref);

    /* the gradient: logits' rows [mean, log_std], then the values */
    int worse = 0, kinks = 0;
    double worst = 0;
    for (int k = 0; k < B * 2 * D + B; k++) {
        double *x = k < B * 2 * D ? &L[k] : &V[k - B * 2 * D];
        const double g = k < B * 2 * D ? dl[k] : dv[k - B * 2 * D], x0 = *x, h = 1e-4;
        *x = x0 + h; const double up = ref_loss(L, V, &c);
        *x = x0 - h; const double dn = ref_loss(L, V, &c);
        *x = x0 + h / 2; const double up2 = ref_loss(L, V, &c);
        *x = x0;
        const double fd = (up - dn) / (2 * h), fd2 = (up2 - ref) / (h / 2), fd3 = (ref - dn) / h;
        if (fabs(fd2 - fd3) > 1e-3 * (1e-3 + fabs(fd))) { kinks++; continue; }   /* a kink within the step */
        const double e = fabs(g - fd) / (1e-4 + fabs(fd));
        if (e > worst) worst = e;
        worse += e > 1e-3;
    }
    CHECK_MSG(worse == 0 && kinks <= B / 8,
              "mode %d: gradient against central differences: %d off (worst %.3g), %d kinks", mode, worse, worst, kinks);
    /* every log-std row gets the entropy's share even where the surrogate is clipped */
    double gls = 0;
    for (int i = 0; i < B; i++) gls += dl[i * 2 * D + D];
    CHECK(gls != 0);

    /* sampling */
    float eps[B * D], a2[B * D], ea[B * D], lp[B];
    for (int i = 0; i < B * D; i++) eps[i] = (float)((lcg(&s) - 0.5) * 4);
    mr_sample_box(B, &hd, logits, eps, a2, ea, lp);
    int bad = 0, inside = 0, clipped = 0;
    double worst_lp = 0;
    for (int i = 0; i < B; i++) {
        double m[D], ls[D];
        for (int j = 0; j < D; j++) {
            m[j] = logits[i * 2 * D + j];
            ls[j] = logits[i * 2 * D + D + j];
            const double x = m[j] + exp(ls[j]) * eps[i * D + j];
            bad += fabs(a2[i * D + j] - x) > 1e-5;
            double want = mode == MR_GAUSS_TANH ? LO[j] + (HI[j] - LO[j]) * (tanh(x) + 1) / 2
                                                : (x < LO[j] ? LO[j] : x > HI[j] ? HI[j] : x);
            bad += fabs(ea[i * D + j] - want) > 1e-5 * (1 + fabs(want));
            inside += ea[i * D + j] >= LO[j] && ea[i * D + j] <= HI[j];
            clipped += x < LO[j] || x > HI[j];
        }
        const double e = fabs(lp[i] - ref_logp(m, ls, a2 + i * D));
        if (e > worst_lp) worst_lp = e;
    }
    CHECK_MSG(bad == 0 && worst_lp < 1e-4, "mode %d sampling: %d values off, logp off by %.3g", mode, bad, worst_lp);
    CHECK_MSG(inside == B * D && clipped > 0, "mode %d: %d of %d actions inside the box, %d samples outside", mode,
              inside, B * D, clipped);
}

/* The tanh mode's density integrates to 1 over the box, and matches the
 * change of variables at a point: the Gaussian's density of x divided by
 * |d a / d x| taken by central differences of the map itself, in double. */
static void density(void) {
    mr_act_head hd;
    memset(&hd, 0, sizeof hd);
    hd.kind = MR_HEAD_GAUSS;
    hd.n = 1;
    hd.squash = MR_GAUSS_TANH;
    hd.low[0] = -2.0f;
    hd.high[0] = 2.0f;
    const float row[2] = {0.7f, -0.3f};   /* mean, log_std */
    double mass = 0, worst = 0;
    const int K = 4000;
    for (int k = 0; k < K; k++) {   /* midpoints of a over (-2, 2) */
        const double a = -2.0 + 4.0 * (k + 0.5) / K;
        const double x = atanh((a + 2.0) / 2.0 - 1.0);   /* a = -2 + 4 (tanh x + 1)/2 */
        const float xf = (float)x;
        float eps = (float)((x - row[0]) / exp(row[1])), xs, ea, lp;
        mr_sample_box(1, &hd, row, &eps, &xs, &ea, &lp);
        const double h = 1e-6;
        const double dadx = ((-2.0 + 4.0 * (tanh(x + h) + 1) / 2) - (-2.0 + 4.0 * (tanh(x - h) + 1) / 2)) / (2 * h);
        const double z = (x - row[0]) / exp(row[1]);
        const double ref = log(exp(-0.5 * z * z) / (exp(row[1]) * sqrt(2 * M_PI)) / dadx);
        const double e = fabs(lp - ref);
        if (fabs(x) < 4 && fabs(xs - xf) < 1e-5 && e > worst) worst = e;
        mass += exp(lp) * 4.0 / K;
    }
    CHECK_MSG(worst < 1e-3, "tanh log-probability against the change of variables: off by %.3g", worst);
    CHECK_MSG(fabs(mass - 1.0) < 2e-3, "tanh density over the box integrates to %.6f", mass);
}

int main(void) {
    run(MR_GAUSS_CLIP);
    run(MR_GAUSS_TANH);
    density();
    printf("test_ppo_box: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

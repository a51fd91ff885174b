/*
 * test_ppo_box.c - the PPO loss over a box action's Gaussian head
 * (cpu/ppo.c's mr_ppo_loss_box and mr_sample_box, over gauss_math.h):
 *   - the loss value against an independent double computation written out
 *     here from the PPO formulas (clipped surrogate, max-of-means value
 *     loss, the Gaussian's entropy);
 *   - its gradient w.r.t. every mean, log-std and value against central
 *     differences of that reference (elements whose step crosses a clip's
 *     kink are counted and left out, at most a few);
 *   - sampling: the action is mean + std eps and its log-probability the
 *     reference's.
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

/* The Gaussian's log-density of x under (mean, log_std), in double. */
static double ref_logp(const double *m, const double *ls, const float *x) {
    double s = 0;
    for (int j = 0; j < D; j++) {
        const double z = ((double)x[j] - m[j]) / exp(ls[j]);
        s += -0.5 * z * z - ls[j] - 0.5 * log(2 * M_PI);
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

int main(void) {
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
    mr_ppo_loss_box(B, D, logits, val, act, oldlp, adv, oldv, tgt, &c, dl, dv, &st);

    static double L[B * 2 * D], V[B];
    for (int i = 0; i < B * 2 * D; i++) L[i] = logits[i];
    for (int i = 0; i < B; i++) V[i] = val[i];
    const double ref = ref_loss(L, V, &c);
    CHECK_MSG(fabs(st.loss - ref) < 1e-5 * (1 + fabs(ref)), "loss %.9g, reference %.9g", st.loss, ref);

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
    CHECK_MSG(worse == 0 && kinks <= B / 8, "gradient against central differences: %d off (worst %.3g), %d kinks",
              worse, worst, kinks);
    /* every log-std row gets the entropy's share even where the surrogate is clipped */
    double gls = 0;
    for (int i = 0; i < B; i++) gls += dl[i * 2 * D + D];
    CHECK(gls != 0);

    /* sampling */
    float eps[B * D], a2[B * D], lp[B];
    for (int i = 0; i < B * D; i++) eps[i] = (float)((lcg(&s) - 0.5) * 4);
    mr_sample_box(B, D, logits, eps, a2, lp);
    int bad = 0;
    for (int i = 0; i < B; i++) {
        double m[D], ls[D];
        for (int j = 0; j < D; j++) {
            m[j] = logits[i * 2 * D + j];
            ls[j] = logits[i * 2 * D + D + j];
            bad += fabs(a2[i * D + j] - (m[j] + exp(ls[j]) * eps[i * D + j])) > 1e-5;
        }
        bad += fabs(lp[i] - ref_logp(m, ls, a2 + i * D)) > 1e-4;
    }
    CHECK_MSG(bad == 0, "sampling: %d values off", bad);
    printf("test_ppo_box: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

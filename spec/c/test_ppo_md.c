/*
 * test_ppo_md.c - the PPO loss over a multi-discrete head (cpu/ppo.c's
 * mr_ppo_loss_md and mr_sample_md, over multi_discrete_math.h):
 *   - the loss value against an independent double computation written out
 *     here (per group a log-softmax; the joint log-probability the sum of
 *     the chosen ones, the entropy the sum of the groups'; clipped
 *     surrogate, max-of-means value loss);
 *   - its gradient w.r.t. every logit and value against central
 *     differences of that reference (steps across a clip's kink are
 *     counted and left out, at most a few);
 *   - sampling: each choice of each group by inverse CDF of its own
 *     uniform (the first j whose cumulative probability passes u), the
 *     log-probability the reference's joint, and over many draws the
 *     frequencies near the group's probabilities.
 * Groups {3, 2, 3} (8 logits: MR_MAX_ACTIONS, the network's widest row).
 */
#include "check.h"
#include "ppo.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 64, K = 3, L = 8 };
static const int NV[K] = {3, 2, 3};

static double lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static float logits[B * L], oldlp[B], adv[B], val[B], oldv[B], tgt[B];
static uint8_t act[B * K];

/* log-softmax of group g of row z into lp (n values); returns its entropy */
static double group(const double *z, int n, double *lp) {
    double m = z[0], s = 0, h = 0;
    for (int j = 1; j < n; j++) m = z[j] > m ? z[j] : m;
    for (int j = 0; j < n; j++) s += exp(z[j] - m);
    for (int j = 0; j < n; j++) {
        lp[j] = z[j] - m - log(s);
        h -= exp(lp[j]) * lp[j];
    }
    return h;
}

/* joint log-probability of a (K bytes) and the summed entropy */
static double ref_row(const double *z, const uint8_t *a, double *H) {
    double lp[L], s = 0, h = 0;
    int off = 0;
    for (int g = 0; g < K; g++) {
        h += group(z + off, NV[g], lp + off);
        s += lp[off + a[g]];
        off += NV[g];
    }
    *H = h;
    return s;
}

static double ref_loss(const double *Z, const double *V, const mr_ppo_coefs *c) {
    double pol = 0, e1 = 0, e2 = 0, H = 0;
    for (int i = 0; i < B; i++) {
        double h;
        const double r = exp(ref_row(Z + i * L, act + i * K, &h) - oldlp[i]);
        const double rc = r < 1 - c->clip ? 1 - c->clip : r > 1 + c->clip ? 1 + c->clip : r;
        pol += -fmin(r * adv[i], rc * adv[i]);
        const double dv = V[i] - oldv[i], vc = oldv[i] + (dv < -c->clip ? -c->clip : dv > c->clip ? c->clip : dv);
        e1 += (V[i] - tgt[i]) * (V[i] - tgt[i]);
        e2 += (vc - tgt[i]) * (vc - tgt[i]);
        H += h;
    }
    return pol / B + c->vf_coef * fmax(e1 / B, e2 / B) - c->ent_coef * H / B;
}

int main(void) {
    mr_act_head hd;
    memset(&hd, 0, sizeof hd);
    hd.kind = MR_HEAD_MULTI_DISCRETE;
    hd.n = K;
    for (int g = 0; g < K; g++) hd.nvec[g] = NV[g];
    hd.logits = L;
    hd.act_bytes = K;
    uint64_t s = 5;
    for (int i = 0; i < B * L; i++) logits[i] = (float)((lcg(&s) - 0.5) * 3);
    for (int i = 0; i < B; i++) {
        for (int g = 0; g < K; g++) act[i * K + g] = (uint8_t)(lcg(&s) * NV[g]);
        double z[L], h;
        for (int j = 0; j < L; j++) z[j] = logits[i * L + j];
        oldlp[i] = (float)(ref_row(z, act + i * K, &h) + (lcg(&s) - 0.5) * 0.6);
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
    c.num_actions = L;
    float dl[B * L], dv[B];
    mr_ppo_stats st;
    mr_ppo_loss_md(B, &hd, logits, val, act, oldlp, adv, oldv, tgt, &c, dl, dv, &st);

    static double Z[B * L], V[B];
    for (int i = 0; i < B * L; i++) Z[i] = logits[i];
    for (int i = 0; i < B; i++) V[i] = val[i];
    const double ref = ref_loss(Z, V, &c);
    CHECK_MSG(fabs(st.loss - ref) < 1e-5 * (1 + fabs(ref)), "loss %.9g, reference %.9g", st.loss, ref);
    double Hsum = 0;
    for (int i = 0; i < B; i++) {
        double h;
        ref_row(Z + i * L, act + i * K, &h);
        Hsum += h;
    }
    CHECK_MSG(fabs(st.entropy - Hsum / B) < 1e-6, "entropy %.9g, reference %.9g", st.entropy, Hsum / B);

    int worse = 0, kinks = 0;
    double worst = 0;
    for (int k = 0; k < B * L + B; k++) {
        double *x = k < B * L ? &Z[k] : &V[k - B * L];
        const double g = k < B * L ? dl[k] : dv[k - B * L], x0 = *x, h = 1e-4;
        *x = x0 + h; const double up = ref_loss(Z, V, &c);
        *x = x0 - h; const double dn = ref_loss(Z, V, &c);
        *x = x0 + h / 2; const double up2 = ref_loss(Z, V, &c);
        *x = x0;
        const double fd = (up - dn) / (2 * h), fd2 = (up2 - ref) / (h / 2), fd3 = (ref - dn) / h;
        if (fabs(fd2 - fd3) > 1e-3 * (1e-3 + fabs(fd))) { kinks++; continue; }   /* a kink within the step */
        const double e = fabs(g - fd) / (1e-4 + fabs(fd));
        if (e > worst) worst = e;
        worse += e > 1e-3;
    }
    CHECK_MSG(worse == 0 && kinks <= B / 8, "gradient against central differences: %d off (worst %.3g), %d kinks",
              worse, worst, kinks);

    /* sampling: the inverse CDF per group, and the joint log-probability */
    enum { N = 20000 };
    static float u[N * K], lp[N], rows[N * L];
    static uint8_t a[N * K];
    const float *row = logits;   /* one row for every draw: the frequencies */
    for (int i = 0; i < N; i++) {
        memcpy(rows + (size_t)i * L, row, sizeof(float) * L);
        for (int g = 0; g < K; g++) u[i * K + g] = (float)lcg(&s);
    }
    mr_sample_md(N, &hd, rows, u, a, lp);
    double z[L], p[L];
    for (int j = 0; j < L; j++) z[j] = row[j];
    int off = 0;
    for (int g = 0; g < K; g++) {
        group(z + off, NV[g], p + off);
        off += NV[g];
    }
    int bad = 0, count[L] = {0};
    double worst_lp = 0;
    for (int i = 0; i < N; i++) {
        off = 0;
        for (int g = 0; g < K; g++) {
            /* the first j whose cumulative probability passes u */
            double cum = 0;
            int want = NV[g] - 1;
            for (int j = 0; j < NV[g]; j++) {
                cum += exp(p[off + j]);
                if (u[i * K + g] < cum) { want = j; break; }
            }
            bad += a[i * K + g] != want && fabs(u[i * K + g] - cum) > 1e-5;
            count[off + a[i * K + g]]++;
            off += NV[g];
        }
        double h;
        const double e = fabs(lp[i] - ref_row(z, a + i * K, &h));
        if (e > worst_lp) worst_lp = e;
    }
    double worst_f = 0;
    for (int j = 0; j < L; j++) {
        const double f = (double)count[j] / N, e = fabs(f - exp(p[j])) / sqrt(exp(p[j]) * (1 - exp(p[j])) / N);
        if (e > worst_f) worst_f = e;
    }
    CHECK_MSG(bad == 0 && worst_lp < 1e-4, "sampling: %d choices off the inverse CDF, logp off by %.3g", bad,
              worst_lp);
    CHECK_MSG(worst_f < 5, "sampling frequencies: %.2f standard errors from the probabilities", worst_f);
    printf("test_ppo_md: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

/*
 * test_ppo.c - the PPO math (ppo.h) against independent references: hand
 * arithmetic, naive double-precision re-implementations written differently
 * from the engine's, and central finite differences for every gradient.
 * Also checks that reductions give bit-identical results for 1, 2 and 3
 * OpenMP threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "check.h"
#include "ppo.h"

/* ------------------------------------------------------------- helpers */

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* ------------------------------------------------------------ schedules */

static void test_schedules(void) {
    mr_schedule c = {MR_SCHED_CONSTANT, 0.7, 0.1, 1.0, 1.0};
    CHECK_NEAR(mr_schedule_value(&c, 0.0), 0.7, 0, 0);
    CHECK_NEAR(mr_schedule_value(&c, 0.6), 0.7, 0, 0);

    /* linear 3e-4 -> 1e-4: p 0.25 -> 2.5e-4, 0.5 -> 2e-4; clamped outside [0,1] */
    mr_schedule l = {MR_SCHED_LINEAR, 3e-4, 1e-4, 1.0, 1.0};
    CHECK_NEAR(mr_schedule_value(&l, 0.0), 3e-4, 0, 0);
    CHECK_NEAR(mr_schedule_value(&l, 0.25), 2.5e-4, 1e-18, 1e-12);
    CHECK_NEAR(mr_schedule_value(&l, 0.5), 2e-4, 1e-18, 1e-12);
    CHECK_NEAR(mr_schedule_value(&l, 1.0), 1e-4, 0, 0);
    CHECK_NEAR(mr_schedule_value(&l, 1.5), 1e-4, 0, 0);
    CHECK_NEAR(mr_schedule_value(&l, -0.5), 3e-4, 0, 0);
    CHECK_NEAR(mr_schedule_value(&l, NAN), 3e-4, 0, 0);
    /* entropy 0.1 -> 0.001 at p = 0.1: 0.1 - 0.099 * 0.1 = 0.0901 */
    mr_schedule e = {MR_SCHED_LINEAR, 0.1, 0.001, 1.0, 1.0};
    CHECK_NEAR(mr_schedule_value(&e, 0.1), 0.0901, 1e-15, 1e-12);

    /* cosine 0.2 -> 0.1: p 0 -> 0.2, 1/3 -> 0.1 + 0.1 * (1 + 0.5)/2 = 0.175,
     * 0.5 -> 0.15, 1 -> 0.1 */
    mr_schedule k = {MR_SCHED_COSINE, 0.2, 0.1, 1.0, 1.0};
    CHECK_NEAR(mr_schedule_value(&k, 0.0), 0.2, 0, 0);
    CHECK_NEAR(mr_schedule_value(&k, 1.0 / 3.0), 0.175, 1e-15, 1e-12);
    CHECK_NEAR(mr_schedule_value(&k, 0.5), 0.15, 1e-15, 1e-12);
    CHECK_NEAR(mr_schedule_value(&k, 1.0), 0.1, 0, 0);

    /* step 1 * 0.5^floor(p/0.25), never below 0.2:
     * p 0.24 -> 1, 0.25 -> 0.5, 0.5 -> 0.25, 0.75 -> 0.125 -> 0.2, 1 -> 0.2 */
    mr_schedule s = {MR_SCHED_STEP, 1.0, 0.2, 0.5, 0.25};
    CHECK_NEAR(mr_schedule_value(&s, 0.0), 1.0, 0, 0);
    CHECK_NEAR(mr_schedule_value(&s, 0.24), 1.0, 0, 0);
    CHECK_NEAR(mr_schedule_value(&s, 0.25), 0.5, 0, 0);
    CHECK_NEAR(mr_schedule_value(&s, 0.5), 0.25, 0, 0);
    CHECK_NEAR(mr_schedule_value(&s, 0.75), 0.2, 0, 0);
    CHECK_NEAR(mr_schedule_value(&s, 1.0), 0.2, 0, 0);
    /* p = 3/10 with every 0.1 is the third step: 0.9^3 = 0.729 */
    mr_schedule s3 = {MR_SCHED_STEP, 1.0, 0.0, 0.9, 0.1};
    CHECK_NEAR(mr_schedule_value(&s3, 3.0 / 10.0), 0.729, 1e-15, 1e-12);
    /* increasing: 1 * 2^floor(p/0.5), never above 3: p 0.5 -> 2, 1 -> 4 -> 3 */
    mr_schedule up = {MR_SCHED_STEP, 1.0, 3.0, 2.0, 0.5};
    CHECK_NEAR(mr_schedule_value(&up, 0.49), 1.0, 0, 0);
    CHECK_NEAR(mr_schedule_value(&up, 0.5), 2.0, 0, 0);
    CHECK_NEAR(mr_schedule_value(&up, 1.0), 3.0, 0, 0);
    mr_schedule bad = {42, 1.0, 0.0, 1.0, 1.0};
    CHECK(isnan(mr_schedule_value(&bad, 0.5)));
}

/* ------------------------------------------------------------------ GAE */

/* Independent reference: the closed form
 *   A_t = sum_{l >= 0} (g lam)^l * prod_{j=t}^{t+l-1} (1 - d_j) * delta_{t+l}
 * evaluated directly in double (O(T^2) per environment). */
static void gae_ref(int T, int N, const float *r, const float *v, const float *lastv,
                    const uint8_t *d, double g, double lam, double *adv) {
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            double sum = 0.0, w = 1.0;
            for (int u = t; u < T; u++) {
                double nextv = u + 1 < T ? v[(size_t)(u + 1) * N + n] : lastv[n];
                double mask = d[(size_t)u * N + n] ? 0.0 : 1.0;
                double delta = r[(size_t)u * N + n] + g * mask * nextv - v[(size_t)u * N + n];
                sum += w * delta;
                w *= g * lam * mask;
                if (w == 0.0) break;
            }
            adv[(size_t)t * N + n] = sum;
        }
}

static void test_gae(void) {
    /* Hand example, T = 3, gamma = lambda = 0.5 (so gamma*lambda = 0.25),
     * rewards 1 2 3, values 0.5 1 1.5, last value 2. Three environments:
     * col 0, no done:
     *   t=2: delta = 3 + 0.5*2   - 1.5 = 2.5;   A2 = 2.5
     *   t=1: delta = 2 + 0.5*1.5 - 1   = 1.75;  A1 = 1.75 + 0.25*2.5   = 2.375
     *   t=0: delta = 1 + 0.5*1   - 0.5 = 1;     A0 = 1    + 0.25*2.375 = 1.59375
     *   returns = A + V = 2.09375, 3.375, 4
     * col 1, done after t=1 (cuts the bootstrap from V(s2) and the recursion):
     *   t=2: A2 = 2.5
     *   t=1: delta = 2 + 0 - 1 = 1;             A1 = 1 + 0 = 1
     *   t=0: delta = 1;                         A0 = 1 + 0.25*1 = 1.25
     *   returns = 1.75, 2, 4
     * col 2, done after t=2 (the last value is not used):
     *   t=2: delta = 3 + 0 - 1.5 = 1.5;         A2 = 1.5
     *   t=1: delta = 1.75;                      A1 = 1.75 + 0.25*1.5 = 2.125
     *   t=0: delta = 1;                         A0 = 1 + 0.25*2.125 = 1.53125
     *   returns = 2.03125, 3.125, 3 */
    const int T = 3, N = 3;
    float r[9] = {1, 1, 1, 2, 2, 2, 3, 3, 3};
    float v[9] = {0.5f, 0.5f, 0.5f, 1, 1, 1, 1.5f, 1.5f, 1.5f};
    float lastv[3] = {2, 2, 2};
    uint8_t d[9] = {0, 0, 0, 0, 1, 0, 0, 0, 1};
    float adv[9], ret[9];
    mr_gae(T, N, r, v, lastv, d, 0.5f, 0.5f, adv, ret);
    const double A[9] = {1.59375, 1.25, 1.53125, 2.375, 1, 2.125, 2.5, 2.5, 1.5};
    const double R[9] = {2.09375, 1.75, 2.03125, 3.375, 2, 3.125, 4, 4, 3};
    for (int i = 0; i < 9; i++) {
        CHECK_NEAR(adv[i], A[i], 1e-7, 0);
        CHECK_NEAR(ret[i], R[i], 1e-7, 0);
    }

    /* Random, with dones in the middle, against the closed form; N is not a
     * multiple of the engine's column block and T*N takes the parallel path. */
    const int T2 = 64, N2 = 203;
    size_t n = (size_t)T2 * N2;
    float *rr = malloc(n * sizeof *rr), *vv = malloc(n * sizeof *vv);
    float *lv = malloc(N2 * sizeof *lv), *a1 = malloc(n * sizeof *a1);
    float *r1 = malloc(n * sizeof *r1), *a2 = malloc(n * sizeof *a2), *r2 = malloc(n * sizeof *r2);
    uint8_t *dd = malloc(n);
    double *aref = malloc(n * sizeof *aref);
    int ndone = 0;
    for (size_t i = 0; i < n; i++) {
        rr[i] = (float)(urand() < 0.1 ? 1.0 : -0.01 + 0.2 * nrand());
        vv[i] = (float)(3.0 * nrand());
        dd[i] = urand() < 0.03;
        ndone += dd[i];
    }
    for (int j = 0; j < N2; j++) lv[j] = (float)(3.0 * nrand());
    CHECK(ndone > 100);
    const float g = 0.99f, lam = 0.95f;
    set_threads(1);
    mr_gae(T2, N2, rr, vv, lv, dd, g, lam, a1, r1);
    set_threads(2);
    mr_gae(T2, N2, rr, vv, lv, dd, g, lam, a2, r2);
    CHECK(memcmp(a1, a2, n * sizeof *a1) == 0 && memcmp(r1, r2, n * sizeof *r1) == 0);
    gae_ref(T2, N2, rr, vv, lv, dd, (double)g, (double)lam, aref);
    double maxerr = 0.0, maxret = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a1[i] - aref[i]) / (1.0 + fabs(aref[i]));
        if (e > maxerr) maxerr = e;
        e = fabs(r1[i] - (aref[i] + vv[i])) / (1.0 + fabs(aref[i] + vv[i]));
        if (e > maxret) maxret = e;
    }
    CHECK_MSG(maxerr < 1e-6, "max rel error of advantages %g", maxerr);
    CHECK_MSG(maxret < 1e-6, "max rel error of returns %g", maxret);
    free(rr); free(vv); free(lv); free(a1); free(r1); free(a2); free(r2); free(dd); free(aref);
}

/* -------------------------------------------------------- normalisation */

static void test_normalize(void) {
    /* {1,2,3,4}: mean 2.5, unbiased var = (2.25+0.25+0.25+2.25)/3 = 5/3 */
    float x4[4] = {1, 2, 3, 4};
    double m, s;
    mr_normalize(x4, 4, &m, &s);
    CHECK_NEAR(m, 2.5, 0, 0);
    CHECK_NEAR(s, sqrt(5.0 / 3.0), 1e-15, 0);
    CHECK_NEAR(x4[0], -1.5 / (sqrt(5.0 / 3.0) + 1e-8), 1e-6, 0);
    CHECK_NEAR(x4[3], 1.5 / (sqrt(5.0 / 3.0) + 1e-8), 1e-6, 0);

    const size_t n = 50001;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *orig = malloc(n * sizeof *orig);
    for (size_t i = 0; i < n; i++) orig[i] = (float)(3.0 + 2.0 * nrand() + (urand() < 0.01 ? 40.0 : 0.0));
    /* double two-pass reference */
    double rm = 0.0, rv = 0.0;
    for (size_t i = 0; i < n; i++) rm += orig[i];
    rm /= (double)n;
    for (size_t i = 0; i < n; i++) rv += (orig[i] - rm) * (orig[i] - rm);
    double rs = sqrt(rv / (double)(n - 1));
    memcpy(x, orig, n * sizeof *x);
    memcpy(y, orig, n * sizeof *y);
    double m2, s2;
    set_threads(1);
    mr_normalize(x, n, &m, &s);
    set_threads(3);
    mr_normalize(y, n, &m2, &s2);
    set_threads(2);
    CHECK(m == m2 && s == s2 && memcmp(x, y, n * sizeof *x) == 0);
    /* with the statistics given (data-parallel: every rank's), the same bytes */
    memcpy(y, orig, n * sizeof *y);
    mr_normalize_with(y, n, m, s);
    CHECK(memcmp(x, y, n * sizeof *x) == 0);
    CHECK_NEAR(m, rm, 0, 1e-12);
    CHECK_NEAR(s, rs, 0, 1e-12);
    double am = 0.0, av = 0.0, maxe = 0.0;
    for (size_t i = 0; i < n; i++) {
        am += x[i];
        double e = fabs(x[i] - (orig[i] - rm) / (rs + 1e-8));
        if (e > maxe) maxe = e;
    }
    am /= (double)n;
    for (size_t i = 0; i < n; i++) av += (x[i] - am) * (x[i] - am);
    CHECK_NEAR(am, 0.0, 1e-6, 0);
    CHECK_NEAR(sqrt(av / (double)(n - 1)), 1.0, 1e-5, 0);
    CHECK_MSG(maxe < 2e-6, "max error %g", maxe);
    free(x); free(y); free(orig);
}

/* --------------------------------------------------------------- PopArt */

static void test_popart(void) {
    /* Hand example. Start mean 0, std 1, count 0; returns {1, 3}:
     * bmean 2, unbiased bvar ((1-2)^2 + (3-2)^2) / 1 = 2. count 1 -> beta 1:
     * mean' 2, var' 0*1 + 1*2 = 2, std' = sqrt 2; s = std/std' = 1/sqrt 2.
     * w {1, -2} -> {1/sqrt2, -2/sqrt2}; b = (0.5*1 + 0 - 2)/sqrt2 = -1.5/sqrt2;
     * m *= 1/sqrt2, v *= 1/2. */
    mr_popart p;
    mr_popart_init(&p);
    CHECK(p.mean == 0.0 && p.std == 1.0 && p.count == 0.0);
    float ret1[2] = {1, 3};
    float w[2] = {1, -2}, b = 0.5f, mw[2] = {0.2f, 0.4f}, vw[2] = {0.5f, 0.08f}, mb = 0.3f, vb = 0.02f;
    mr_popart_update(&p, ret1, 2, 0.001, w, &b, 2, mw, vw, &mb, &vb);
    const double r2 = sqrt(2.0);
    CHECK_NEAR(p.count, 1.0, 0, 0);
    CHECK_NEAR(p.mean, 2.0, 1e-15, 0);
    CHECK_NEAR(p.std, r2, 1e-15, 0);
    CHECK_NEAR(w[0], 1.0 / r2, 1e-7, 0);
    CHECK_NEAR(w[1], -2.0 / r2, 1e-7, 0);
    CHECK_NEAR(b, -1.5 / r2, 1e-7, 0);
    CHECK_NEAR(mw[0], 0.2 / r2, 1e-7, 0);
    CHECK_NEAR(mw[1], 0.4 / r2, 1e-7, 0);
    CHECK_NEAR(vw[0], 0.25, 1e-7, 0);
    CHECK_NEAR(vw[1], 0.04, 1e-8, 0);
    CHECK_NEAR(mb, 0.3 / r2, 1e-7, 0);
    CHECK_NEAR(vb, 0.01, 1e-8, 0);

    /* Second update, returns {2, 4, 6, 8}: bmean 5, bvar (9+1+1+9)/3 = 20/3.
     * count 2 -> beta 0.5: mean'' = 0.5*2 + 0.5*5 = 3.5;
     * var'' = 0.5 * (old std^2 = 2) + 0.5 * 20/3 = 13/3 (the spec's blend; a
     * second-moment blend would give 0.5*(2+4) + 0.5*(20/3+25) - 3.5^2 = 6.5833). */
    float ret2[4] = {2, 4, 6, 8};
    mr_popart_update(&p, ret2, 4, 0.001, w, &b, 2, NULL, NULL, NULL, NULL);
    CHECK_NEAR(p.count, 2.0, 0, 0);
    CHECK_NEAR(p.mean, 3.5, 1e-14, 0);
    CHECK_NEAR(p.std, sqrt(13.0 / 3.0), 1e-14, 0);

    /* beta_min: count 5000 -> 1/5001 < 0.001, so beta = 0.001:
     * mean 1 -> 0.999*1 + 0.001*11 = 1.01; var 4 -> 0.999*4 + 0.001*bvar, bvar = 2 */
    mr_popart q = {1.0, 2.0, 5000.0};
    float ret3[2] = {10, 12};
    float w1 = 1.0f, b1 = 0.0f;
    mr_popart_update(&q, ret3, 2, 0.001, &w1, &b1, 1, NULL, NULL, NULL, NULL);
    CHECK_NEAR(q.mean, 1.01, 1e-14, 0);
    CHECK_NEAR(q.std, sqrt(0.999 * 4.0 + 0.001 * 2.0), 1e-14, 0);

    /* One return: std undefined, clamped to 1e-4; both std floors hold. */
    mr_popart o;
    mr_popart_init(&o);
    float ret4[1] = {7};
    mr_popart_update(&o, ret4, 1, 0.001, &w1, &b1, 1, NULL, NULL, NULL, NULL);
    CHECK_NEAR(o.mean, 7.0, 0, 0);
    CHECK_NEAR(o.std, 1e-4, 1e-18, 0);
    /* A constant batch: bstd 0 is clamped to 1e-4 before the blend.
     * std 2e-4, count 1 -> beta 0.5: var' = 0.5*4e-8 + 0.5*1e-8 = 2.5e-8. */
    mr_popart z = {5.0, 2e-4, 1.0};
    float ret5[2] = {5, 5};
    mr_popart_update(&z, ret5, 2, 0.001, &w1, &b1, 1, NULL, NULL, NULL, NULL);
    CHECK_NEAR(z.mean, 5.0, 0, 0);
    CHECK_NEAR(z.std, sqrt(2.5e-8), 1e-15, 0);
    /* n == 0 changes nothing */
    mr_popart_update(&o, ret4, 0, 0.001, &w1, &b1, 1, NULL, NULL, NULL, NULL);
    CHECK(o.count == 1.0 && o.mean == 7.0);

    /* Outputs preserved for random features, and the moments rescaled. */
    enum { K = 64, H = 20 };
    float W[K], Bb, M[K], V[K], Mb, Vb, W0[K], M0[K], V0[K];
    float h[H][K];
    for (int i = 0; i < K; i++) {
        W[i] = (float)(0.1 * nrand());
        M[i] = (float)(0.01 * nrand());
        V[i] = (float)(1e-4 * urand());
    }
    Bb = 0.3f; Mb = 0.02f; Vb = 3e-5f;
    memcpy(W0, W, sizeof W); memcpy(M0, M, sizeof M); memcpy(V0, V, sizeof V);
    const float Bb0 = Bb, Mb0 = Mb, Vb0 = Vb;
    for (int j = 0; j < H; j++) for (int i = 0; i < K; i++) h[j][i] = (float)fabs(nrand());
    mr_popart st = {1.3, 2.1, 10.0};
    const size_t nr = 3000;
    float *R = malloc(nr * sizeof *R);
    for (size_t i = 0; i < nr; i++) R[i] = (float)(5.0 + 4.0 * nrand());
    double before[H];
    for (int j = 0; j < H; j++) {
        double raw = Bb;
        for (int i = 0; i < K; i++) raw += (double)W[i] * h[j][i];
        before[j] = st.mean + st.std * raw;
    }
    const double old_std = st.std;
    mr_popart_update(&st, R, nr, 0.001, W, &Bb, K, M, V, &Mb, &Vb);
    CHECK(fabs(st.std - old_std) > 0.1);   /* a real change, so the check bites */
    for (int j = 0; j < H; j++) {
        double raw = Bb;
        for (int i = 0; i < K; i++) raw += (double)W[i] * h[j][i];
        CHECK_NEAR(st.mean + st.std * raw, before[j], 1e-5, 1e-5);
    }
    const double sc = old_std / st.std;
    double maxe = 0.0;
    for (int i = 0; i < K; i++) {
        maxe = fmax(maxe, fabs(M[i] - M0[i] * sc) / (1e-12 + fabs(M0[i] * sc)));
        maxe = fmax(maxe, fabs(V[i] - V0[i] * sc * sc) / (1e-12 + fabs(V0[i] * sc * sc)));
        maxe = fmax(maxe, fabs(W[i] - W0[i] * sc) / (1e-12 + fabs(W0[i] * sc)));
    }
    CHECK_MSG(maxe < 1e-6, "moment rescale rel error %g", maxe);
    CHECK_NEAR(Mb, Mb0 * sc, 0, 1e-6);
    CHECK_NEAR(Vb, Vb0 * sc * sc, 0, 1e-6);
    (void)Bb0;
    free(R);
}

/* ------------------------------------------------------------- PPO loss */

typedef struct { double loss, pol, vl, H, kl, cf, m1, m2; } ref_stats;

/* Naive double re-implementation, written as the PyTorch original is:
 * Categorical(logits), -min(surr1, surr2).mean(), mse, entropy().mean(). */
static double ref_loss(int B, const double *z, const double *v, const uint8_t *a,
                       const double *olp, const double *A, const double *old, const double *R,
                       const mr_ppo_coefs *c, ref_stats *rs) {
    double pol = 0, H = 0, s1 = 0, s2 = 0, smax = 0, kl = 0, cf = 0;
    for (int i = 0; i < B; i++) {
        const double *zi = z + i * 8;
        double se = 0;
        for (int j = 0; j < 8; j++) se += exp(zi[j]);
        double lse = log(se), h = 0;
        for (int j = 0; j < 8; j++) h -= exp(zi[j] - lse) * (zi[j] - lse);
        H += h;
        double lp = zi[a[i]] - lse;
        double r = exp(lp - olp[i]);
        double surr1 = r * A[i];
        double surr2 = fmin(fmax(r, 1 - c->clip), 1 + c->clip) * A[i];
        pol += -fmin(surr1, surr2);
        kl += (r - 1) - (lp - olp[i]);
        cf += fabs(r - 1) > c->clip;
        double vc = old[i] + fmin(fmax(v[i] - old[i], -c->clip), c->clip);
        double e1 = (v[i] - R[i]) * (v[i] - R[i]), e2 = (vc - R[i]) * (vc - R[i]);
        s1 += e1; s2 += e2; smax += fmax(e1, e2);
    }
    pol /= B; H /= B; kl /= B; cf /= B;
    double m1 = s1 / B, m2 = s2 / B;
    double vl = c->value_max_of_means ? fmax(m1, m2) : smax / B;
    double loss = pol + c->vf_coef * vl - c->ent_coef * H + c->ent_floor_coef * fmax(0.0, c->ent_floor - H);
    if (rs) { rs->loss = loss; rs->pol = pol; rs->vl = vl; rs->H = H; rs->kl = kl; rs->cf = cf; rs->m1 = m1; rs->m2 = m2; }
    return loss;
}

enum { BL = 64 };

/* A batch whose every sample is at least `gap` away from every kink (ratio
 * clip bounds, value clip bounds), so central differences are valid. Counts
 * the regimes it covers. */
typedef struct {
    float z[BL * 8], v[BL], olp[BL], A[BL], old[BL], R[BL];
    uint8_t a[BL];
    int pol_zero, pol_outside_active, val_clipped_wins, val_unclipped_outside;
} batch;

static void make_batch(batch *b, double logit_scale, double clip) {
    const double gap = 2e-3;
    memset(b, 0, sizeof *b);
    for (int i = 0; i < BL; i++) {
        for (;;) {
            for (int j = 0; j < 8; j++) b->z[i * 8 + j] = (float)(logit_scale * nrand());
            b->a[i] = (uint8_t)(urand() * 8);
            double se = 0;
            for (int j = 0; j < 8; j++) se += exp((double)b->z[i * 8 + j]);
            double lp = b->z[i * 8 + b->a[i]] - log(se);
            double r = 0.6 + 0.9 * urand();                    /* ratio in [0.6, 1.5] */
            b->olp[i] = (float)(lp - log(r));
            r = exp(lp - (double)b->olp[i]);
            b->A[i] = (float)nrand();
            b->old[i] = (float)nrand();
            b->v[i] = (float)(b->old[i] + 0.8 * (urand() - 0.5));   /* v - old in [-0.4, 0.4] */
            b->R[i] = (float)(b->old[i] + 1.5 * nrand());
            double d = (double)b->v[i] - b->old[i];
            if (fabs(r - (1 - clip)) < gap || fabs(r - (1 + clip)) < gap) continue;
            if (fabs(d - clip) < gap || fabs(d + clip) < gap) continue;
            if (fabs(b->A[i]) < gap) continue;
            double vc = b->old[i] + fmin(fmax(d, -clip), clip);
            double e1 = (b->v[i] - b->R[i]) * (b->v[i] - b->R[i]), e2 = (vc - b->R[i]) * (vc - b->R[i]);
            int outside = fabs(d) > clip;
            if (outside && fabs(e1 - e2) < gap) continue;
            int routside = r < 1 - clip || r > 1 + clip;
            if (routside && ((b->A[i] > 0 && r > 1 + clip) || (b->A[i] < 0 && r < 1 - clip))) b->pol_zero++;
            else if (routside) b->pol_outside_active++;
            if (outside && e2 > e1) b->val_clipped_wins++;
            if (outside && e1 > e2) b->val_unclipped_outside++;
            break;
        }
    }
}

/* Every gradient entry against central differences of ref_loss. */
static void check_gradients(const batch *b, const mr_ppo_coefs *c, const char *what) {
    double z[BL * 8], v[BL], olp[BL], A[BL], old[BL], R[BL];
    for (int i = 0; i < BL * 8; i++) z[i] = b->z[i];
    for (int i = 0; i < BL; i++) { v[i] = b->v[i]; olp[i] = b->olp[i]; A[i] = b->A[i]; old[i] = b->old[i]; R[i] = b->R[i]; }
    float dz[BL * 8], dv[BL];
    mr_ppo_stats st;
    mr_ppo_loss(BL, b->z, b->v, b->a, b->olp, b->A, b->old, b->R, c, dz, dv, &st);
    ref_stats rs;
    ref_loss(BL, z, v, b->a, olp, A, old, R, c, &rs);
    CHECK_NEAR(st.loss, rs.loss, 1e-12, 1e-10);
    CHECK_NEAR(st.policy_loss, rs.pol, 1e-12, 1e-10);
    CHECK_NEAR(st.value_loss, rs.vl, 1e-12, 1e-10);
    CHECK_NEAR(st.entropy, rs.H, 1e-12, 1e-10);
    CHECK_NEAR(st.approx_kl, rs.kl, 1e-12, 1e-9);
    CHECK_NEAR(st.clip_fraction, rs.cf, 0, 0);
    if (c->value_max_of_means) CHECK(fabs(rs.m1 - rs.m2) > 1e-3);

    const double h = 1e-5;
    double maxz = 0.0, maxv = 0.0, gnorm = 0.0;
    for (int i = 0; i < BL * 8; i++) {
        double s = z[i];
        z[i] = s + h; double lp = ref_loss(BL, z, v, b->a, olp, A, old, R, c, NULL);
        z[i] = s - h; double lm = ref_loss(BL, z, v, b->a, olp, A, old, R, c, NULL);
        z[i] = s;
        double fd = (lp - lm) / (2 * h);
        maxz = fmax(maxz, fabs(dz[i] - fd) / (1e-6 + fabs(fd)));
        gnorm += fd * fd;
    }
    for (int i = 0; i < BL; i++) {
        double s = v[i];
        v[i] = s + h; double lp = ref_loss(BL, z, v, b->a, olp, A, old, R, c, NULL);
        v[i] = s - h; double lm = ref_loss(BL, z, v, b->a, olp, A, old, R, c, NULL);
        v[i] = s;
        double fd = (lp - lm) / (2 * h);
        maxv = fmax(maxv, fabs(dv[i] - fd) / (1e-6 + fabs(fd)));
    }
    CHECK_MSG(maxz < 1e-4, "%s: dlogits max rel error %g", what, maxz);
    CHECK_MSG(maxv < 1e-4, "%s: dvalue max rel error %g", what, maxv);
    CHECK(gnorm > 1e-8);
}

static void test_ppo_loss(void) {
    /* Stats and gradients by hand, B = 2, all logits 0: p = 1/8, logp = -ln 8,
     * H = ln 8 = 2.0794415417. clip 0.2, vf 0.5, ent 0.01, floor 0.5 (x0.05).
     * sample 0: a=3, old_logp = -ln8 - ln1.5 -> r = 1.5; A = 2:
     *   -A r = -3, -A clip(r) = -2.4 -> -2.4 (clipped: no policy gradient);
     *   kl = 0.5 - ln 1.5 = 0.0945348919; |r-1| > 0.2.
     *   v = 1, old = 0.5, R = 0: v-old = 0.5 -> 0.2, vc = 0.7; e1 = 1, e2 = 0.49.
     * sample 1: a=0, old_logp = -ln 8 -> r = 1; A = -1: -A r = 1; kl 0.
     *   v = 0, old = 0.5, R = -1: v-old = -0.5 -> -0.2, vc = 0.3; e1 = 1, e2 = 1.69.
     * policy_loss = (-2.4 + 1)/2 = -0.7; approx_kl = 0.04726744595; clip_fraction 0.5
     * value_loss per sample = (1 + 1.69)/2 = 1.345; max of means = max(1, 1.09) = 1.09
     * loss = -0.7 + 0.5*1.345 - 0.01*2.0794415417 = -0.0482944154
     * gradients: the entropy gradient -p(logp + H) is 0 at the uniform policy.
     *   dlogits[0] = 0 (clipped); dlogits[1] = dpol/dr * r * (onehot(0) - 1/8) / 2
     *   with dpol/dr = -A = 1: {0.4375, -0.0625 x 7}.
     *   dvalue[0] = 0.5 * 2(v - R) / 2 = 0.5 (e1 wins); dvalue[1] = 0 (e2 wins,
     *   outside the clip). Max of means: mean e2 wins, both outside: {0, 0}. */
    const double ln8 = log(8.0);
    float z[16] = {0};
    float v[2] = {1, 0}, old[2] = {0.5f, 0.5f}, R[2] = {0, -1}, A[2] = {2, -1};
    float olp[2] = {(float)(-ln8 - log(1.5)), (float)(-ln8)};
    uint8_t a[2] = {3, 0};
    mr_ppo_coefs c = {0.2, 0.01, 0.5, 0.5, 0.05, 0, 8};
    float dz[16], dv[2];
    mr_ppo_stats st;
    mr_ppo_loss(2, z, v, a, olp, A, old, R, &c, dz, dv, &st);
    CHECK_NEAR(st.policy_loss, -0.7, 1e-6, 0);
    CHECK_NEAR(st.value_loss, 1.345, 1e-7, 0);
    CHECK_NEAR(st.entropy, 2.0794415417, 1e-9, 0);
    CHECK_NEAR(st.approx_kl, 0.04726744595, 1e-7, 0);
    CHECK_NEAR(st.clip_fraction, 0.5, 0, 0);
    CHECK_NEAR(st.loss, -0.0482944154, 1e-6, 0);
    for (int k = 0; k < 8; k++) CHECK_NEAR(dz[k], 0.0, 1e-9, 0);
    CHECK_NEAR(dz[8], 0.4375, 1e-6, 0);
    for (int k = 1; k < 8; k++) CHECK_NEAR(dz[8 + k], -0.0625, 1e-6, 0);
    CHECK_NEAR(dv[0], 0.5, 1e-7, 0);
    CHECK_NEAR(dv[1], 0.0, 0, 0);
    /* entropy floor 3 > ln 8: loss += 0.05 * (3 - 2.0794415417) = 0.0460279229 */
    mr_ppo_coefs cf = c;
    cf.ent_floor = 3.0;
    mr_ppo_loss(2, z, v, a, olp, A, old, R, &cf, dz, dv, &st);
    CHECK_NEAR(st.loss, -0.0482944154 + 0.0460279229, 1e-6, 0);
    /* max of means */
    mr_ppo_coefs cm = c;
    cm.value_max_of_means = 1;
    mr_ppo_loss(2, z, v, a, olp, A, old, R, &cm, dz, dv, &st);
    CHECK_NEAR(st.value_loss, 1.09, 1e-7, 0);
    CHECK_NEAR(dv[0], 0.0, 0, 0);
    CHECK_NEAR(dv[1], 0.0, 0, 0);
    /* Four actions (reach), rows of 4 logits, all 0: p = 1/4, H = ln 4 =
     * 1.3862943611; the same two samples: policy_loss -0.7, approx_kl
     * 0.04726744595, loss = -0.7 + 0.5*1.345 - 0.01*1.3862943611 =
     * -0.0413629436; dlogits[1] = (onehot(0) - 1/4)/2 = {0.375, -0.125 x 3}. */
    {
        const double ln4 = log(4.0);
        float z4[8] = {0}, olp4[2] = {(float)(-ln4 - log(1.5)), (float)(-ln4)}, dz4[8] = {0};
        mr_ppo_coefs c4 = c;
        c4.num_actions = 4;
        mr_ppo_loss(2, z4, v, a, olp4, A, old, R, &c4, dz4, dv, &st);
        CHECK_NEAR(st.policy_loss, -0.7, 1e-6, 0);
        CHECK_NEAR(st.entropy, 1.3862943611, 1e-9, 0);
        CHECK_NEAR(st.approx_kl, 0.04726744595, 1e-7, 0);
        CHECK_NEAR(st.loss, -0.0413629436, 1e-6, 0);
        for (int k = 0; k < 4; k++) CHECK_NEAR(dz4[k], 0.0, 1e-9, 0);
        CHECK_NEAR(dz4[4], 0.375, 1e-6, 0);
        for (int k = 1; k < 4; k++) CHECK_NEAR(dz4[4 + k], -0.125, 1e-6, 0);
    }
    /* B == 0 */
    st.loss = 5;
    mr_ppo_loss(0, z, v, a, olp, A, old, R, &c, dz, dv, &st);
    CHECK(st.loss == 0.0 && st.entropy == 0.0);

    /* Finite differences: entropy floor active (peaked logits, H < 0.5) and
     * inactive (flat logits), each with both value-loss forms. */
    static batch b;
    for (int floor_active = 0; floor_active < 2; floor_active++) {
        make_batch(&b, floor_active ? 6.0 : 0.5, 0.2);
        CHECK(b.pol_zero > 0);
        CHECK(b.pol_outside_active > 0);
        CHECK(b.val_clipped_wins > 0);
        CHECK(b.val_unclipped_outside > 0);
        for (int mm = 0; mm < 2; mm++) {
            mr_ppo_coefs k = {0.2, 0.05, 0.5, 0.5, 0.05, mm, 8};
            mr_ppo_stats s;
            float dz2[BL * 8], dv2[BL];
            mr_ppo_loss(BL, b.z, b.v, b.a, b.olp, b.A, b.old, b.R, &k, dz2, dv2, &s);
            CHECK(floor_active ? s.entropy < 0.45 : s.entropy > 0.55);
            CHECK(s.clip_fraction > 0.1 && s.clip_fraction < 0.9);
            char what[64];
            snprintf(what, sizeof what, "floor %s, %s", floor_active ? "active" : "inactive",
                     mm ? "max of means" : "per-sample max");
            check_gradients(&b, &k, what);
        }
    }

    /* Larger batch: bit-identical for 1 and 2 threads (parallel pass 2). */
    enum { BB = 10000 };
    float *zz = malloc(BB * 8 * sizeof *zz), *vv = malloc(BB * sizeof *vv), *oo = malloc(BB * sizeof *oo);
    float *aa = malloc(BB * sizeof *aa), *rr = malloc(BB * sizeof *rr), *ll = malloc(BB * sizeof *ll);
    float *g1 = malloc(BB * 8 * sizeof *g1), *g2 = malloc(BB * 8 * sizeof *g2), *h1 = malloc(BB * sizeof *h1), *h2 = malloc(BB * sizeof *h2);
    uint8_t *ac = malloc(BB);
    for (int i = 0; i < BB; i++) {
        for (int j = 0; j < 8; j++) zz[i * 8 + j] = (float)nrand();
        vv[i] = (float)nrand(); oo[i] = (float)nrand(); aa[i] = (float)nrand(); rr[i] = (float)nrand();
        ll[i] = (float)(-2.0 + 0.3 * nrand()); ac[i] = (uint8_t)(urand() * 8);
    }
    mr_ppo_stats s1, s2;
    set_threads(1);
    mr_ppo_loss(BB, zz, vv, ac, ll, aa, oo, rr, &c, g1, h1, &s1);
    set_threads(2);
    mr_ppo_loss(BB, zz, vv, ac, ll, aa, oo, rr, &c, g2, h2, &s2);
    CHECK(memcmp(&s1, &s2, sizeof s1) == 0);
    CHECK(memcmp(g1, g2, BB * 8 * sizeof *g1) == 0 && memcmp(h1, h2, BB * sizeof *h1) == 0);
    free(zz); free(vv); free(oo); free(aa); free(rr); free(ll); free(g1); free(g2); free(h1); free(h2); free(ac);
}

/* ------------------------------------------------------------- sampling */

/* Stratified u = (i + 0.5)/M on M copies of a row of na logits (into lg, u,
 * act, lp, each M long): the counts are the softmax of the row (in double)
 * to within 1/M, logp is its log, no action is outside [0, na), and the
 * actions do not decrease with u. Returns the softmax in p. */
static void check_stratified(const float *row, int na, int M, float *lg, float *u, uint8_t *act, float *lp,
                             double *p) {
    double se = 0.0;
    for (int j = 0; j < na; j++) se += exp((double)row[j]);
    for (int j = 0; j < na; j++) p[j] = exp((double)row[j]) / se;
    for (int i = 0; i < M; i++) {
        memcpy(lg + (size_t)i * na, row, sizeof *row * (size_t)na);
        u[i] = (float)((i + 0.5) / M);
    }
    mr_sample_actions(M, na, lg, u, act, lp);
    int cnt[256] = {0}, mono = 1;
    double maxlp = 0.0;
    for (int i = 0; i < M; i++) {
        cnt[act[i]]++;
        if (act[i] < na) maxlp = fmax(maxlp, fabs(lp[i] - log(p[act[i]])));
        if (i && act[i] < act[i - 1]) mono = 0;
    }
    int outside = 0;
    for (int j = na; j < 256; j++) outside += cnt[j];
    for (int j = 0; j < na; j++) CHECK_NEAR((double)cnt[j] / M, p[j], 3e-5, 0);
    CHECK_MSG(outside == 0, "%d actions outside [0, %d)", outside, na);
    CHECK_MSG(maxlp < 1e-6, "logp error %g", maxlp);
    CHECK(mono);
}

static void test_sampling(void) {
    const float row[8] = {0.5f, -1.0f, 2.0f, 0.0f, 0.1f, -3.0f, 1.0f, 0.7f};
    double p[8];
    enum { M = 100000 };
    float *lg = malloc((size_t)M * 8 * sizeof *lg), *u = malloc(M * sizeof *u), *lp = malloc(M * sizeof *lp);
    uint8_t *act = malloc(M);
    check_stratified(row, 8, M, lg, u, act, lp, p);
    int cnt[8] = {0};

    /* Random u: frequencies within 5 standard errors. */
    for (int i = 0; i < M; i++) u[i] = (float)urand();
    mr_sample_actions(M, 8, lg, u, act, lp);
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < M; i++) cnt[act[i]]++;
    for (int j = 0; j < 8; j++) CHECK_NEAR((double)cnt[j] / M, p[j], 5.0 * sqrt(p[j] * (1 - p[j]) / M), 0);

    /* Edges: u = 0 takes action 0; u just below 1 takes the last action
     * with non-zero probability, never one of probability 0. */
    float edge[16] = {0, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, 0, 0, 0, 0, -200.0f};
    float ue[2] = {0.0f, 0.99999994f}, le[2];
    uint8_t ae[2];
    mr_sample_actions(2, 8, edge, ue, ae, le);
    CHECK(ae[0] == 0);
    CHECK(ae[1] == 6);
    CHECK_NEAR(le[0], -log(8.0), 1e-6, 0);
    CHECK_NEAR(le[1], -log(7.0), 1e-6, 0);
    /* A zero-probability first action is never taken, even at u = 0; and
     * u = 1 (outside the contract) still lands on a possible action. */
    float edge2[16] = {-200.0f, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, 0, 0, 0, 0, -200.0f};
    float ue2[2] = {0.0f, 1.0f};
    mr_sample_actions(2, 8, edge2, ue2, ae, le);
    CHECK(ae[0] == 1);
    CHECK(ae[1] == 6);
    CHECK_NEAR(le[1], -log(7.0), 1e-6, 0);
    free(lg); free(u); free(lp); free(act);

    /* Four actions (reach): rows of 4 logits */
    const float row4[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    double p4[4];
    lg = malloc((size_t)M * 4 * sizeof *lg), u = malloc(M * sizeof *u), lp = malloc(M * sizeof *lp), act = malloc(M);
    check_stratified(row4, 4, M, lg, u, act, lp, p4);
    free(lg); free(u); free(lp); free(act);
}

/* ----------------------------------------------------------------- Adam */

static void test_adam(void) {
    /* First step from zero moments: m_hat = g, v_hat = g^2, so the update is
     * lr * g / (|g| + eps) = lr * sign(g) up to eps: 1 - 0.1 = 0.9, -2 + 0.1 = -1.9. */
    float pa[2] = {1.0f, -2.0f}, ga[2] = {0.3f, -5.0f}, ma[2] = {0}, va[2] = {0};
    mr_adam_step(pa, ga, ma, va, 2, 0.1, 0.9, 0.999, 1e-8, 1.0, 1);
    CHECK_NEAR(pa[0], 0.9, 1e-6, 0);
    CHECK_NEAR(pa[1], -1.9, 1e-6, 0);
    CHECK_NEAR(ma[0], 0.03, 1e-8, 0);
    CHECK_NEAR(va[0], 0.001 * 0.09, 1e-10, 0);
    /* Second step, g = 0.1 on p0 (by hand):
     *   m = 0.9*0.03 + 0.1*0.1 = 0.037;  v = 0.999*9e-5 + 0.001*0.01 = 9.991e-5
     *   m_hat = 0.037/0.19 = 0.194736842; v_hat = 9.991e-5/0.001999 = 0.0499799900
     *   p = 0.9 - 0.1 * 0.194736842 / (0.223562049 + 1e-8) = 0.812894...   */
    float gb[2] = {0.1f, 0.0f};
    mr_adam_step(pa, gb, ma, va, 2, 0.1, 0.9, 0.999, 1e-8, 1.0, 2);
    double mh = 0.037 / 0.19, vh = 9.991e-5 / (1 - 0.999 * 0.999);
    CHECK_NEAR(pa[0], 0.9 - 0.1 * mh / (sqrt(vh) + 1e-8), 1e-6, 0);
    CHECK_NEAR(pa[0], 0.8128944, 2e-6, 0);

    /* Two steps on many parameters against a double reference, with a clip
     * factor; and 1 vs 2 threads bit-identical. */
    const size_t n = 20000;
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2), *g = malloc(n * sizeof *g);
    float *m1 = calloc(n, sizeof *m1), *v1 = calloc(n, sizeof *v1), *m2 = calloc(n, sizeof *m2), *v2 = calloc(n, sizeof *v2);
    double *pr = malloc(n * sizeof *pr), *mr = calloc(n, sizeof *mr), *vr = calloc(n, sizeof *vr);
    for (size_t i = 0; i < n; i++) { p1[i] = p2[i] = (float)nrand(); pr[i] = p1[i]; }
    const double lr = 3e-4, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double maxe = 0.0;
    for (int step = 1; step <= 2; step++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)(nrand() * (i % 7 == 0 ? 1e-3 : 1.0));
        double norm = mr_grad_norm(g, n);
        double f = mr_clip_factor(norm, 0.5);
        CHECK(f < 0.01);
        set_threads(1);
        mr_adam_step(p1, g, m1, v1, n, lr, b1, b2, eps, f, step);
        set_threads(2);
        mr_adam_step(p2, g, m2, v2, n, lr, b1, b2, eps, f, step);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * (float)f;
            mr[i] = b1 * mr[i] + (1 - b1) * gi;
            vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
            double mhat = mr[i] / (1 - pow(b1, step)), vhat = vr[i] / (1 - pow(b2, step));
            pr[i] -= lr * mhat / (sqrt(vhat) + eps);
        }
    }
    for (size_t i = 0; i < n; i++) maxe = fmax(maxe, fabs(p1[i] - pr[i]));
    CHECK_MSG(maxe < 1e-6, "adam max abs error %g", maxe);
    CHECK(memcmp(p1, p2, n * sizeof *p1) == 0 && memcmp(v1, v2, n * sizeof *v1) == 0);
    free(p1); free(p2); free(g); free(m1); free(v1); free(m2); free(v2); free(pr); free(mr); free(vr);
}

static void test_grad_norm(void) {
    float g2[2] = {3, 4};
    CHECK_NEAR(mr_grad_norm(g2, 2), 5.0, 0, 0);
    CHECK_NEAR(mr_grad_norm(g2, 0), 0.0, 0, 0);
    /* clip factor: min(1, max / (norm + 1e-6)) */
    CHECK_NEAR(mr_clip_factor(2.0, 0.5), 0.5 / 2.000001, 0, 1e-15);
    CHECK_NEAR(mr_clip_factor(0.1, 0.5), 1.0, 0, 0);
    CHECK_NEAR(mr_clip_factor(0.5, 0.5), 0.5 / 0.500001, 0, 1e-15);  /* < 1 at norm == max, as torch */
    CHECK(isnan(mr_clip_factor(NAN, 0.5)));
    CHECK_NEAR(mr_clip_factor(100.0, 0.0), 1.0, 0, 0);

    const size_t n = 300001;
    float *g = malloc(n * sizeof *g);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) { g[i] = (float)(nrand() * 1e-2); ref += (double)g[i] * g[i]; }
    ref = sqrt(ref);
    set_threads(1);
    double a = mr_grad_norm(g, n);
    set_threads(2);
    double b = mr_grad_norm(g, n);
    set_threads(3);
    double c = mr_grad_norm(g, n);
    set_threads(2);
    CHECK(a == b && b == c);
    CHECK_NEAR(a, ref, 0, 1e-12);
    free(g);
}

int main(void) {
    check_seed(0x9E3779B97F4A7C15ull);
    set_threads(2);
    test_schedules();
    test_gae();
    test_normalize();
    test_popart();
    test_ppo_loss();
    test_sampling();
    test_adam();
    test_grad_norm();
    return check_report("test_ppo");
}

/*
 * test_multi_discrete_math.c - the multi-discrete head
 * (shared/multi_discrete_math.h) against references written out here in
 * double: log-softmax as z - log(sum exp z) (no max shift), entropies, the
 * joint logp; the PPO gradient row by central finite differences; the
 * sampler's frequencies against softmax (chi-square over 100k draws); the
 * rounding rules of the inverse CDF; a one-hot-like segment.
 */
#include "check.h"
#include "multi_discrete_math.h"

static double max_fd_err;   /* the largest gradient-vs-FD error seen, |a - b| / (1 + |b|) */
static double max_fd_rel;   /* and |a - b| / |b| where |b| >= 0.01 */
static void fd_track(double got, double want) {
    const double e = fabs(got - want) / (1.0 + fabs(want));
    if (e > max_fd_err || e != e) max_fd_err = e;
    const double r = fabs(got - want) / fabs(want);
    if (fabs(want) >= 0.01 && r > max_fd_rel) max_fd_rel = r;
}

/* ------------------------------------------------------ double references */

/* log p_j of each segment and the sum of entropies; |z| < 700, so exp needs no shift */
static double ref_softmax(const double *z, const int *n, int k, double *logp) {
    double H = 0.0;
    int off = 0;
    for (int i = 0; i < k; i++) {
        double s = 0.0;
        for (int j = 0; j < n[i]; j++) s += exp(z[off + j]);
        for (int j = 0; j < n[i]; j++) {
            logp[off + j] = z[off + j] - log(s);
            H -= exp(z[off + j]) / s * logp[off + j];
        }
        off += n[i];
    }
    return H;
}
static double ref_joint(const double *logp, const int *n, int k, const uint8_t *a) {
    double s = 0.0;
    for (int i = 0, off = 0; i < k; off += n[i], i++) s += logp[off + a[i]];
    return s;
}
static double ref_pol(double r, double A, double c) {
    const double rc = r < 1.0 - c ? 1.0 - c : (r > 1.0 + c ? 1.0 + c : r);
    return fmax(-A * r, -A * rc);
}
/* the per-sample objective mr_md_grad_row differentiates */
static double ref_obj(const double *z, const int *n, int k, const uint8_t *a, double old_logp, double A, double c,
                      double dL_dH, double invB, double scale) {
    double lp[MR_MD_MAX_LOGITS];
    const double H = ref_softmax(z, n, k, lp);
    return (ref_pol(exp(ref_joint(lp, n, k, a) - old_logp), A, c) + dL_dH * H) * invB * scale;
}

/* ----------------------------------------------------------------- tests */

static void test_shapes(void) {
    const int a[3] = {3, 5, 248}, b[2] = {200, 57}, c[1] = {0}, d[9] = {2, 2, 2, 2, 2, 2, 2, 2, 2};
    CHECK(mr_md_num_logits(a, 3) == 256);
    CHECK(mr_md_num_logits(b, 2) == -1);   /* 257 logits */
    CHECK(mr_md_num_logits(c, 1) == -1);
    CHECK(mr_md_num_logits(d, 9) == -1);   /* 9 heads */
    CHECK(mr_md_num_logits(d, 8) == 16);
}

static void test_logp_entropy(void) {
    const int n[5] = {3, 1, 5, 40, 2}, k = 5, L = 51;
    double worst = 0.0;
    for (int it = 0; it < 200; it++) {
        float z[64];
        double zd[64], lp[MR_MD_MAX_LOGITS], ent[8], rl[MR_MD_MAX_LOGITS];
        for (int j = 0; j < L; j++) zd[j] = z[j] = (float)uni(-6, 6);
        const double H = mr_md_softmax(z, n, k, lp, ent);
        const double Hr = ref_softmax(zd, n, k, rl);
        CHECK_NEAR(H, Hr, 1e-12, 1e-12);
        double hs = 0.0;
        for (int i = 0; i < k; i++) hs += ent[i];
        CHECK_NEAR(hs, H, 1e-12, 0);
        for (int j = 0; j < L; j++) CHECK_NEAR(lp[j], rl[j], 1e-12, 1e-12);
        uint8_t a[5];
        for (int i = 0; i < k; i++) a[i] = (uint8_t)irand(0, n[i] - 1);
        const double jl = mr_md_log_prob(lp, n, k, a), jr = ref_joint(rl, n, k, a);
        CHECK_NEAR(jl, jr, 1e-12, 1e-12);
        if (fabs(jl - jr) > worst) worst = fabs(jl - jr);
        a[3] = 40;   /* out of range: NaN, as the categorical head */
        CHECK(isnan(mr_md_log_prob(lp, n, k, a)));
    }
    printf("joint logp: max |head - double log-softmax| = %.3g\n", worst);
}

/* Frequencies of 100k draws (uniforms from the engine's rng) against softmax:
 * a chi-square per head, bounded at df + 7 sqrt(2 df) (a fixed seed; a bug
 * that moves probability by a few percent lands far beyond). */
static void test_sampling(void) {
    const int n[4] = {3, 5, 40, 2}, k = 4, L = 50, N = 100000;
    float z[64];
    double zd[64], rl[MR_MD_MAX_LOGITS];
    for (int j = 0; j < L; j++) zd[j] = z[j] = (float)uni(-3, 3);
    ref_softmax(zd, n, k, rl);
    static long cnt[64];
    double worst_lp = 0.0;
    for (int t = 0; t < N; t++) {
        float u[4], lp;
        uint8_t a[4];
        for (int i = 0; i < k; i++) u[i] = mr_rng_uniform(77, 3, (uint32_t)t, MR_RNG_ACTION, (uint32_t)i);
        mr_md_sample(z, n, k, u, a, &lp);
        for (int i = 0, off = 0; i < k; off += n[i], i++) cnt[off + a[i]]++;
        const double e = fabs(lp - ref_joint(rl, n, k, a));
        if (e > worst_lp) worst_lp = e;
    }
    CHECK(worst_lp < 1e-5);   /* the sampler's float logp is the chosen action's */
    for (int i = 0, off = 0; i < k; off += n[i], i++) {
        double chi = 0.0;
        for (int j = 0; j < n[i]; j++) {
            const double E = N * exp(rl[off + j]);
            chi += (cnt[off + j] - E) * (cnt[off + j] - E) / E;
        }
        const int df = n[i] - 1;
        printf("sampling head %d (%d choices): chi-square %.2f, df %d\n", i, n[i], chi, df);
        CHECK_MSG(chi < df + 7.0 * sqrt(2.0 * df), "head %d chi-square %g", i, chi);
    }
    /* the inverse CDF's ends: u = 0 picks the first choice, u = 1.0 the last;
     * a last choice whose weight underflowed (z - m < -104) is never picked */
    const float zz[4] = {0.5f, -1.0f, 2.0f, 0.0f}, zu[3] = {0.0f, 0.0f, -200.0f};
    float lp;
    CHECK(mr_md_segment_sample(zz, 4, 0.0f, &lp) == 0);
    CHECK(mr_md_segment_sample(zz, 4, 1.0f, &lp) == 3);
    CHECK(mr_md_segment_sample(zz, 4, 0.99999994f, &lp) == 3);
    CHECK(mr_md_segment_sample(zu, 3, 1.0f, &lp) == 1);
    CHECK(mr_md_segment_sample(zu, 3, 0.99999994f, &lp) == 1);
    const int one[1] = {1};
    uint8_t a1;
    mr_md_sample(zz, one, 1, &(float){0.3f}, &a1, &lp);
    CHECK(a1 == 0 && lp == 0.0f);
}

/* mr_md_loss_terms_at + mr_md_grad_row against FD of the double objective,
 * unclipped and clipped branches, with an entropy term. */
static void test_grad_row(void) {
    const int n[4] = {3, 12, 1, 4}, k = 4, L = 20;
    const double c = 0.2, invB = 1.0 / 32, scale = 2.0, dL_dH = -0.03;
    int clipped_seen = 0;
    for (int it = 0; it < 200; it++) {
        float z[32], dz[32], dv;
        double zd[32], rl[MR_MD_MAX_LOGITS];
        for (int j = 0; j < L; j++) zd[j] = z[j] = (float)uni(-3, 3);
        uint8_t a[4];
        for (int i = 0; i < k; i++) a[i] = (uint8_t)irand(0, n[i] - 1);
        ref_softmax(zd, n, k, rl);
        const double lp = ref_joint(rl, n, k, a), A = uni(-2, 2);
        const double delta = (it & 1) ? uni(-0.1, 0.1) : ((it & 2) ? 1 : -1) * uni(0.4, 0.6);
        if (fabs(delta) > 0.3 && A * delta > 0) clipped_seen++;
        const double old_logp = lp - delta;
        mr_md_terms o;
        mr_md_loss_terms_at(z, n, k, a, old_logp, A, 0.2, 0.1, -0.5, c, &o);
        CHECK_NEAR(o.t.log_ratio, delta, 1e-12, 0);
        CHECK_NEAR(o.t.pol, ref_pol(exp(delta), A, c), 1e-12, 1e-12);
        mr_md_grad_row(&o, n, k, a, dL_dH, 0.5, 0, 0, invB, scale, dz, &dv);
        CHECK_NEAR(dv, 0.5 * 2 * (0.2 + 0.5) * invB * scale, 1e-7, 1e-6);
        for (int j = 0; j < L; j++) {
            const double h = 1e-6;
            double zp[32], zm[32];
            for (int q = 0; q < L; q++) zp[q] = zm[q] = zd[q];
            zp[j] += h;
            zm[j] -= h;
            const double fd = (ref_obj(zp, n, k, a, old_logp, A, c, dL_dH, invB, scale) -
                               ref_obj(zm, n, k, a, old_logp, A, c, dL_dH, invB, scale)) / (2 * h);
            fd_track(dz[j], fd);
            CHECK_NEAR(dz[j], fd, 1e-6, 1e-5);
        }
    }
    CHECK(clipped_seen > 20);
}

/* A one-hot-like segment: entropy ~ 0 and finite, logp finite, gradient
 * finite and right by FD. */
static void test_one_hot(void) {
    const int n[2] = {4, 3}, k = 2;
    const float z[7] = {60.0f, 0.0f, -5.0f, 0.0f, 0.1f, 0.2f, 0.3f};
    double zd[7], lp[MR_MD_MAX_LOGITS], ent[2], rl[MR_MD_MAX_LOGITS];
    for (int j = 0; j < 7; j++) zd[j] = z[j];
    mr_md_softmax(z, n, k, lp, ent);
    ref_softmax(zd, n, k, rl);
    CHECK(isfinite(ent[0]) && ent[0] >= 0.0 && ent[0] < 1e-20);
    for (int j = 0; j < 4; j++) { CHECK(isfinite(lp[j])); CHECK_NEAR(lp[j], rl[j], 1e-12, 1e-12); }
    for (int a0 = 0; a0 < 2; a0++) {   /* the likely choice, and one of probability e^-60 */
        const uint8_t a[2] = {(uint8_t)a0, 2};
        const double old_logp = ref_joint(rl, n, k, a) - 0.05;
        mr_md_terms o;
        float dz[7], dv;
        mr_md_loss_terms_at(z, n, k, a, old_logp, 1.0, 0, 0, 0, 0.2, &o);
        mr_md_grad_row(&o, n, k, a, -0.01, 0.5, 0, 0, 1.0, 1.0, dz, &dv);
        for (int j = 0; j < 7; j++) {
            CHECK(isfinite(dz[j]));
            double zp[7], zm[7];
            for (int q = 0; q < 7; q++) zp[q] = zm[q] = zd[q];
            zp[j] += 1e-6;
            zm[j] -= 1e-6;
            const double fd = (ref_obj(zp, n, k, a, old_logp, 1.0, 0.2, -0.01, 1.0, 1.0) -
                               ref_obj(zm, n, k, a, old_logp, 1.0, 0.2, -0.01, 1.0, 1.0)) / 2e-6;
            fd_track(dz[j], fd);
            CHECK_NEAR(dz[j], fd, 1e-6, 1e-5);
        }
    }
    float lps;
    CHECK(mr_md_segment_sample(z, 4, 0.999f, &lps) == 0 && isfinite(lps));
}

int main(void) {
    check_seed(0x3d15c);
    test_shapes();
    test_logp_entropy();
    test_sampling();
    test_grad_row();
    test_one_hot();
    printf("multi-discrete: largest gradient-vs-FD error |a - b| / (1 + |b|) = %.3g; "
           "|a - b| / |b| (|b| >= 0.01) = %.3g\n", max_fd_err, max_fd_rel);
    return check_report("test_multi_discrete_math");
}

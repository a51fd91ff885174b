/*
 * test_gauss_math.c - the diagonal Gaussian head (shared/gauss_math.h)
 * against references written out here in double: the log-probability by its
 * formula and, for tanh mode, by a change of variables with a finite-difference
 * derivative of the map; every gradient by central finite differences of the
 * double reference; the sampler's moments; the hard points (u = +-20, the
 * log_std clamp bounds).
 */
#include "check.h"
#include "gauss_math.h"

#define PI 3.14159265358979323846

static double max_fd_err;   /* the largest gradient-vs-FD error seen, |a - b| / (1 + |b|) */
static double max_fd_rel;   /* and |a - b| / |b| where |b| >= 0.01 */
static void fd_track(double got, double want) {
    const double e = fabs(got - want) / (1.0 + fabs(want));
    if (e > max_fd_err || e != e) max_fd_err = e;
    const double r = fabs(got - want) / fabs(want);
    if (fabs(want) >= 0.01 && r > max_fd_rel) max_fd_rel = r;
}
static void fd_check(const char *what, int j, double got, double want, double tol) {
    const double e = fabs(got - want) / (1.0 + fabs(want));
    fd_track(got, want);
    CHECK_MSG(e <= tol, "%s[%d] = %.9g, finite difference %.9g", what, j, got, want);
}

/* ------------------------------------------------------ double references */

static double ref_clamp_ls(double ls) { return ls < -20.0 ? -20.0 : (ls > 2.0 ? 2.0 : ls); }

/* log(1 - tanh^2 u) = log sech^2 u = log 4 - 2|u| - 2 log(1 + e^{-2|u|}) */
static double ref_log_sech2(double u) { return log(4.0) - 2.0 * fabs(u) - 2.0 * log1p(exp(-2.0 * fabs(u))); }

static double ref_gauss_logp(const double *mean, const double *ls, int d, const double *x) {
    double s = 0.0;
    for (int j = 0; j < d; j++) {
        const double l = ref_clamp_ls(ls[j]), sd = exp(l), z = (x[j] - mean[j]) / sd;
        s += -0.5 * z * z - l - 0.5 * log(2.0 * PI);
    }
    return s;
}

static double ref_logp(int mode, const double *mean, const double *ls, const double *lo, const double *hi, int d,
                       const double *x) {
    double s = ref_gauss_logp(mean, ls, d, x);
    if (mode == MR_GAUSS_TANH)
        for (int j = 0; j < d; j++) s -= log(0.5 * (hi[j] - lo[j])) + ref_log_sech2(x[j]);
    return s;
}

static double ref_entropy(const double *ls, int d) {
    double s = 0.0;
    for (int j = 0; j < d; j++) s += ref_clamp_ls(ls[j]) + 0.5 * (1.0 + log(2.0 * PI));
    return s;
}

static double ref_map(double u, double lo, double hi) { return lo + (hi - lo) * (tanh(u) + 1.0) / 2.0; }

static double ref_pol(double r, double A, double c) {
    const double rc = r < 1.0 - c ? 1.0 - c : (r > 1.0 + c ? 1.0 + c : r);
    return fmax(-A * r, -A * rc);
}

/* ------------------------------------------------------------- helpers */

typedef struct { int mode, d; double mean[8], ls[8], lo[8], hi[8], x[8]; } gcase;

static void to_f(const double *a, float *f, int d) { for (int j = 0; j < d; j++) f[j] = (float)a[j]; }
/* the double inputs rounded to float, so both sides see the same numbers */
static void round_case(gcase *g) {
    for (int j = 0; j < g->d; j++) {
        g->mean[j] = (float)g->mean[j]; g->ls[j] = (float)g->ls[j]; g->x[j] = (float)g->x[j];
        g->lo[j] = (float)g->lo[j]; g->hi[j] = (float)g->hi[j];
    }
}
static float f_logp(const gcase *g) {
    float m[8], l[8], lo[8], hi[8], x[8];
    to_f(g->mean, m, g->d); to_f(g->ls, l, g->d); to_f(g->lo, lo, g->d); to_f(g->hi, hi, g->d); to_f(g->x, x, g->d);
    return mr_gauss_log_prob(g->mode, m, l, lo, hi, g->d, x);
}
static void random_case(gcase *g, int mode, int d) {
    g->mode = mode;
    g->d = d;
    for (int j = 0; j < d; j++) {
        g->mean[j] = uni(-1.5, 1.5);
        g->ls[j] = uni(-2.0, 1.0);
        g->lo[j] = uni(-3.0, 0.0);
        g->hi[j] = g->lo[j] + uni(0.1, 4.0);
        g->x[j] = g->mean[j] + exp(g->ls[j]) * nrand();
    }
    round_case(g);
}

/* ----------------------------------------------------------------- tests */

static void test_logp(void) {
    double worst = 0.0, worst_cov = 0.0;
    for (int it = 0; it < 400; it++) {
        gcase g;
        random_case(&g, it & 1, 1 + it % 8);
        const double want = ref_logp(g.mode, g.mean, g.ls, g.lo, g.hi, g.d, g.x);
        const double got = f_logp(&g);
        CHECK_NEAR(got, want, 2e-5, 2e-6);
        if (fabs(got - want) > worst) worst = fabs(got - want);
        if (g.mode == MR_GAUSS_TANH) {
            /* change of variables: p_action(y) = p_u(u) / prod_j g_j'(u_j), the
             * map's derivative by central differences (no tanh identities) */
            double cov = ref_gauss_logp(g.mean, g.ls, g.d, g.x);
            for (int j = 0; j < g.d; j++) {
                const double h = 1e-5;
                cov -= log((ref_map(g.x[j] + h, g.lo[j], g.hi[j]) - ref_map(g.x[j] - h, g.lo[j], g.hi[j])) / (2 * h));
            }
            CHECK_NEAR(got, cov, 1e-4, 1e-6);
            if (fabs(got - cov) > worst_cov) worst_cov = fabs(got - cov);
        }
    }
    printf("logp: max |float - double formula| = %.3g, max |tanh logp - change of variables (FD)| = %.3g\n", worst,
           worst_cov);
}

static void test_entropy(void) {
    for (int it = 0; it < 100; it++) {
        double ls[8];
        float lf[8];
        const int d = 1 + it % 8;
        for (int j = 0; j < d; j++) { ls[j] = (float)uni(-25.0, 4.0); lf[j] = (float)ls[j]; }
        CHECK_NEAR(mr_gauss_entropy(lf, d), ref_entropy(ls, d), 1e-5, 1e-6);
    }
}

/* d logp / d mean, d logp / d log_std, d entropy / d log_std against central
 * differences of the double references, both modes (in tanh mode the FD
 * reference includes the correction, so this also shows it has no gradient). */
static void test_grads(void) {
    for (int it = 0; it < 400; it++) {
        gcase g;
        random_case(&g, it & 1, 1 + it % 8);
        if (it % 5 == 0) {   /* log_std outside the clamp: gradient 0; x redrawn at the clamped std */
            const int j = it % g.d;
            g.ls[j] = (it & 2) ? -23.0 : 2.5;
            g.x[j] = (float)(g.mean[j] + exp(ref_clamp_ls(g.ls[j])) * nrand());
        }
        float m[8], l[8], x[8], dm[8], dl[8], de[8];
        to_f(g.mean, m, g.d); to_f(g.ls, l, g.d); to_f(g.x, x, g.d);
        mr_gauss_dlogp(m, l, g.d, x, dm, dl);
        mr_gauss_dentropy(l, g.d, de);
        for (int j = 0; j < g.d; j++) {
            const double h = 1e-6;
            gcase p = g, q = g;
            p.mean[j] += h; q.mean[j] -= h;
            const double fm = (ref_logp(g.mode, p.mean, p.ls, p.lo, p.hi, g.d, p.x) -
                               ref_logp(g.mode, q.mean, q.ls, q.lo, q.hi, g.d, q.x)) / (2 * h);
            p = g; q = g;
            p.ls[j] += h; q.ls[j] -= h;
            const double fl = (ref_logp(g.mode, p.mean, p.ls, p.lo, p.hi, g.d, p.x) -
                               ref_logp(g.mode, q.mean, q.ls, q.lo, q.hi, g.d, q.x)) / (2 * h);
            const double fe = (ref_entropy(p.ls, g.d) - ref_entropy(q.ls, g.d)) / (2 * h);
            fd_check("dlogp/dmean", j, dm[j], fm, 1e-4);
            fd_check("dlogp/dlog_std", j, dl[j], fl, 1e-4);
            fd_check("dentropy/dlog_std", j, de[j], fe, 1e-6);
        }
    }
}

/* The PPO row (mr_gauss_loss_terms_at + mr_gauss_grad_row) against FD of
 *   (pol(exp(logp - old_logp)) + dL_dH H) * invB * scale
 * in both the unclipped and the clipped branch. */
static void test_grad_row(void) {
    const double c = 0.2, invB = 1.0 / 64, scale = 4.0, dL_dH = -0.01;
    int clipped_seen = 0;
    for (int it = 0; it < 200; it++) {
        gcase g;
        random_case(&g, it & 1, 1 + it % 8);
        const double A = uni(-2, 2);
        const double lp = ref_logp(g.mode, g.mean, g.ls, g.lo, g.hi, g.d, g.x);
        /* r = exp(delta): |delta| < 0.1 stays inside the clip, 0.4 .. 0.6 outside */
        const double delta = (it & 2) ? uni(-0.1, 0.1) : ((it & 4) ? 1 : -1) * uni(0.4, 0.6);
        const double old_logp = lp - delta;
        float m[8], l[8], lo[8], hi[8], x[8], dm[8], dl[8], dv;
        to_f(g.mean, m, g.d); to_f(g.ls, l, g.d); to_f(g.lo, lo, g.d); to_f(g.hi, hi, g.d); to_f(g.x, x, g.d);
        mr_loss_terms t;
        const double v = 0.3, vold = 0.1, R = 1.0;
        mr_gauss_loss_terms_at(g.mode, m, l, lo, hi, g.d, x, old_logp, A, v, vold, R, c, &t);
        CHECK_NEAR(t.log_ratio, delta, 2e-5, 0);
        CHECK_NEAR(t.pol, ref_pol(exp(delta), A, c), 1e-4, 1e-5);
        CHECK_NEAR(t.entropy, ref_entropy(g.ls, g.d), 1e-5, 1e-6);
        mr_gauss_grad_row(&t, m, l, g.d, x, dL_dH, 0.5, 0, 0, invB, scale, dm, dl, &dv);
        /* the value head: d/dv of 0.5 max((v-R)^2, (clip(v)-R)^2); here |v - old| <= c, so e1 = e2 */
        CHECK_NEAR(dv, 0.5 * 2 * (v - R) * invB * scale, 1e-7, 1e-6);
        if (fabs(delta) > 0.3 && A * delta > 0) clipped_seen++;
        for (int j = 0; j < g.d; j++) {
            const double h = 1e-6;
            for (int which = 0; which < 2; which++) {
                gcase p = g, q = g;
                if (which == 0) { p.mean[j] += h; q.mean[j] -= h; }
                else { p.ls[j] += h; q.ls[j] -= h; }
                const double op = (ref_pol(exp(ref_logp(g.mode, p.mean, p.ls, p.lo, p.hi, g.d, p.x) - old_logp), A, c) +
                                   dL_dH * ref_entropy(p.ls, g.d)) * invB * scale;
                const double oq = (ref_pol(exp(ref_logp(g.mode, q.mean, q.ls, q.lo, q.hi, g.d, q.x) - old_logp), A, c) +
                                   dL_dH * ref_entropy(q.ls, g.d)) * invB * scale;
                fd_check(which == 0 ? "row dmean" : "row dlog_std", j, which == 0 ? dm[j] : dl[j],
                         (op - oq) / (2 * h), 1e-4);
            }
        }
    }
    CHECK(clipped_seen > 20);   /* the clipped branch (zero policy gradient) was exercised */
}

/* Box-Muller over the rng: 100k normals, their mean, std, the mass of
 * |x| < 1 and the correlation of a pair's two normals, 5 standard errors. */
static void test_normals(void) {
    const int N = 100000, d = 8;
    double s = 0, s2 = 0, in1 = 0, cross = 0;
    float eps[8];
    for (int c = 0; c < N / d; c++) {
        mr_gauss_normals(12345, (uint32_t)c, 7, MR_RNG_ACTION, 0, d, eps);
        for (int j = 0; j < d; j++) {
            s += eps[j];
            s2 += (double)eps[j] * eps[j];
            in1 += fabsf(eps[j]) < 1.0f;
            CHECK(isfinite(eps[j]));
        }
        for (int j = 0; j < d; j += 2) cross += (double)eps[j] * eps[j + 1];
    }
    const double mean = s / N, sd = sqrt(s2 / N - mean * mean), p1 = in1 / N, corr = cross / (N / 2);
    printf("box-muller, %d normals: mean %.5f, std %.5f, P(|x|<1) %.5f, pair corr %.5f\n", N, mean, sd, p1, corr);
    CHECK(fabs(mean) < 5.0 / sqrt(N));
    CHECK(fabs(sd - 1.0) < 5.0 / sqrt(2.0 * N));
    CHECK(fabs(p1 - 0.682689492) < 5.0 * sqrt(0.682689492 * 0.317310508 / N));
    CHECK(fabs(corr) < 5.0 / sqrt(N / 2));
    /* u1 = 1 gives 0, not NaN; an odd d writes d values */
    float n0 = -1, n1 = -1;
    mr_gauss_box_muller(1.0f, 0.25f, &n0, &n1);
    CHECK(n0 == 0.0f && n1 == 0.0f);
    /* a key whose first uniform is exactly 0 (1 in 2^24: searched for, ~0.1 s)
     * must give finite normals (log 0 would be -inf) */
    uint32_t z0 = 0;
    while (z0 < (1u << 28) && mr_rng_uniform(5, z0, 0, MR_RNG_ACTION, 0) != 0.0f) z0++;
    CHECK(z0 < (1u << 28));
    float e2[2];
    mr_gauss_normals(5, z0, 0, MR_RNG_ACTION, 0, 2, e2);
    CHECK(isfinite(e2[0]) && isfinite(e2[1]));
    float odd[4] = {0, 0, 0, 99.0f};
    mr_gauss_normals(1, 2, 3, MR_RNG_ACTION, 0, 3, odd);
    CHECK(odd[3] == 99.0f && odd[2] != 0.0f);

    /* mr_gauss_sample: x = mean + std eps has that mean and std */
    const float mu = 0.7f, ls = -0.5f;
    double xs = 0, xs2 = 0;
    for (int c = 0; c < N; c++) {
        float e, x;
        mr_gauss_normals(99, (uint32_t)c, 0, MR_RNG_ACTION, 0, 1, &e);
        mr_gauss_sample(&mu, &ls, 1, &e, &x);
        xs += x;
        xs2 += (double)x * x;
    }
    const double xm = xs / N, xsd = sqrt(xs2 / N - xm * xm), sdw = exp(-0.5);
    CHECK(fabs(xm - 0.7) < 5.0 * sdw / sqrt(N));
    CHECK(fabs(xsd - sdw) < 5.0 * sdw / sqrt(2.0 * N));
}

static void test_env_actions(void) {
    const float lo[4] = {-2.0f, 0.0f, -1.0f, 1e6f}, hi[4] = {3.0f, 1e-3f, 1.0f, 1e6f + 64.0f};
    const float us[] = {-1e30f, -88.0f, -20.0f, -9.0f, -1.0f, -1e-7f, 0.0f, 0.3f, 5.0f, 9.0f, 20.0f, 1e30f, INFINITY,
                        -INFINITY};
    for (size_t k = 0; k < sizeof us / sizeof us[0]; k++) {
        float x[4] = {us[k], us[k], us[k], us[k]}, a[4], b[4];
        mr_gauss_env_action(MR_GAUSS_TANH, x, lo, hi, 4, a);
        mr_gauss_env_action(MR_GAUSS_CLIP, x, lo, hi, 4, b);
        for (int j = 0; j < 4; j++) {
            CHECK_MSG(a[j] >= lo[j] && a[j] <= hi[j], "tanh u = %g dim %d -> %g", us[k], j, a[j]);
            const double want = isfinite(us[k]) && fabs(us[k]) < 30 ? ref_map(us[k], lo[j], hi[j])
                                                                     : (us[k] > 0 ? hi[j] : lo[j]);
            CHECK_NEAR(a[j], want, 1e-6 * (hi[j] - lo[j]), 1e-6);
            CHECK(b[j] == (us[k] < lo[j] ? lo[j] : (us[k] > hi[j] ? hi[j] : us[k])));
        }
    }
    /* the deterministic action is the mapped mean */
    const float mean[2] = {0.4f, -7.0f}, lo2[2] = {-1, -1}, hi2[2] = {1, 1};
    float a[2];
    mr_gauss_mean_action(MR_GAUSS_TANH, mean, lo2, hi2, 2, a);
    CHECK_NEAR(a[0], tanh(0.4), 1e-6, 0);
    mr_gauss_mean_action(MR_GAUSS_CLIP, mean, lo2, hi2, 2, a);
    CHECK(a[0] == 0.4f && a[1] == -1.0f);
}

/* u = +-20 in tanh mode (1 - tanhf(u)^2 is 0 in float: the naive log is -inf),
 * log_std at and past the clamp bounds. */
static void test_hard_points(void) {
    for (int s = -1; s <= 1; s += 2) {
        gcase g = {MR_GAUSS_TANH, 2, {0.5, -0.25}, {0.0, 1.0}, {-1, -2}, {1, 5}, {20.0 * s, -20.0 * s}};
        const float got = f_logp(&g);
        CHECK(isfinite(got));
        CHECK_NEAR(got, ref_logp(g.mode, g.mean, g.ls, g.lo, g.hi, 2, g.x), 1e-4, 1e-6);
    }
    /* log_std exactly at the bounds and beyond: forward clamped, gradient 1 at
     * the bound (torch.clamp passes it at a tie), 0 beyond */
    const float lsv[] = {-20.0f, 2.0f, -30.0f, 5.0f, -19.999f, 1.999f};
    const float gw[] = {1, 1, 0, 0, 1, 1};
    for (int k = 0; k < 6; k++) {
        const float mean = 0.0f, ls = lsv[k], eps = 1.25f;
        float x, dm, dl, de;
        mr_gauss_sample(&mean, &ls, 1, &eps, &x);   /* mean 0: x = std eps survives float at std 2e-9 */
        const double xd = x, md = 0.0, ld = ls;
        const float lp = mr_gauss_log_prob(MR_GAUSS_CLIP, &mean, &ls, NULL, NULL, 1, &x);
        CHECK(isfinite(lp));
        CHECK_NEAR(lp, ref_logp(MR_GAUSS_CLIP, &md, &ld, NULL, NULL, 1, &xd), 1e-4, 1e-6);
        mr_gauss_dlogp(&mean, &ls, 1, &x, &dm, &dl);
        mr_gauss_dentropy(&ls, 1, &de);
        CHECK(isfinite(dm) && isfinite(dl));
        CHECK(de == gw[k]);
        CHECK_NEAR(dl, gw[k] * (1.25 * 1.25 - 1.0), 1e-4, 1e-4);
        CHECK_NEAR(dm, 1.25 / exp(ref_clamp_ls(ls)), 0, 1e-5);
        CHECK(mr_gauss_log_std(ls) == (float)ref_clamp_ls(ls));
    }
}

int main(void) {
    check_seed(0x6a055);
    test_logp();
    test_entropy();
    test_grads();
    test_grad_row();
    test_normals();
    test_env_actions();
    test_hard_points();
    printf("gauss: largest gradient-vs-FD error |a - b| / (1 + |b|) = %.3g; "
           "|a - b| / |b| (|b| >= 0.01) = %.3g\n", max_fd_err, max_fd_rel);
    return check_report("test_gauss_math");
}

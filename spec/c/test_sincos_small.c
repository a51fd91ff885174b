/*
 * test_sincos_small.c - shared/sincos_small.h against the C library's sin and
 * cos, bit for bit, on every angle where it claims their result:
 *   - 3 million angles uniform in [-0.3, 0.3] and 1 million log-uniform in
 *     magnitude (1e-12 .. 0.25), both signs;
 *   - the special inputs: +-0, tiny, the 0.125 and 0.25 edges, beyond 0.25,
 *     NaN and the infinities (never claimed there, but 0 and -0 may be);
 *   - that it does claim most angles (the fast path is used): at most 8 in
 *     a hundred of cartpole's angles (|theta| <= 0.21) left to libm.
 * A failure here on another C library means that library's sin or cos is
 * further from correctly rounded than sincos_small.h's margins allow: widen
 * them there (cartpole's CPU step would otherwise drift from Gymnasium).
 */
#include "check.h"
#include "sincos_small.h"

#include <string.h>

static uint64_t bits_of(double v) {
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static double u01(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) * 0x1p-53;
}

/* angles x[0..n): how many claimed, how many of those differ from libm */
static void run(const double *x, int n, long *claimed, long *wrong, double *worst) {
    for (int i = 0; i < n; i++) {
        double s, c;
        if (!mr_sincos_small(x[i], &s, &c)) continue;
        (*claimed)++;
        if (bits_of(s) != bits_of(sin(x[i])) || bits_of(c) != bits_of(cos(x[i]))) {
            if (*wrong == 0) *worst = x[i];
            (*wrong)++;
        }
    }
}

int main(void) {
    enum { B = 4096 };
    static double x[B];
    long claimed = 0, wrong = 0, total = 0;
    double first = 0.0;
    for (int r = 0; r < 3000000 / B; r++) {
        for (int i = 0; i < B; i++) x[i] = 0.6 * u01() - 0.3;
        run(x, B, &claimed, &wrong, &first);
        total += B;
    }
    for (int r = 0; r < 1000000 / B; r++) {
        for (int i = 0; i < B; i++) x[i] = (u01() < 0.5 ? -1.0 : 1.0) * 1e-12 * pow(0.25e12, u01());
        run(x, B, &claimed, &wrong, &first);
        total += B;
    }
    CHECK_MSG(wrong == 0, "%ld of %ld claimed angles differ from libm's sin/cos (the first %.17g)", wrong, claimed,
              first);

    /* cartpole's angles: the fast path takes most of them */
    long fast = 0;
    for (int r = 0; r < 250; r++) {
        for (int i = 0; i < B; i++) x[i] = 0.42 * u01() - 0.21;
        long w = 0;
        run(x, B, &fast, &w, &first);
    }
    const double left = 1.0 - (double)fast / (250.0 * B);
    CHECK_MSG(left > 0.001 && left < 0.08, "%.2f%% of |x| <= 0.21 left to libm: want 0.1 .. 8", 100.0 * left);

    /* the special inputs */
    const double never[] = {NAN, INFINITY, -INFINITY, 0.2500000000000001, -0.25000000000000006, 0.3, 1.0, -3.0, 1e300};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        double s, c;
        CHECK_MSG(!mr_sincos_small(never[i], &s, &c), "claims sin and cos of %g", never[i]);
    }
    const double edge[] = {0.0, -0.0, 1e-300, -1e-300, 0x1p-1022, 5e-324, 1e-9, -2e-8, 0.125, -0.125,
                           0.12499999999999999, 0.12500000000000003, 0.25, -0.25};
    long ec = 0, ew = 0;
    run(edge, (int)(sizeof edge / sizeof edge[0]), &ec, &ew, &first);
    CHECK_MSG(ew == 0, "%ld of the edge angles differ from libm (the first %.17g)", ew, first);
    printf("test_sincos_small: %ld angles, %ld claimed; %.2f%% of cartpole's left to libm\n", total, claimed,
           100.0 * left);
    printf("test_sincos_small: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

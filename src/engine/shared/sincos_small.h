/*
 * sincos_small.h - sin and cos of a small angle (|x| <= 0.25) with libm's
 * own bits, in plain C that the compiler vectorises (cartpole_cpu.c).
 *
 * Why libm's bits: CartPole's upright pole is unstable (a difference
 * doubles about every 9 steps), so moonrl's cartpole stays within 1e-5 of
 * Gymnasium's for 500 steps only when every operation rounds as NumPy's
 * float64 ones do, and NumPy's sin and cos are the C library's
 * (spec/gym_reference.py; envs/cartpole.h). A polynomial accurate to an ulp
 * is not enough; this one knows when it has libm's result:
 *
 *   1. f(x) is evaluated as an unevaluated sum fin + tail (fin the double
 *      nearest the approximation, |tail| <= half an ulp of fin) accurate to
 *      about 2^-62 relative: the Taylor series (to x^13 for sin, x^14 for
 *      cos: the first term left out is below 2^-66 relative for
 *      |x| <= 0.25), its leading terms (x^3/6, x^2/2) in double-double
 *      with fma, the rest in double.
 *   2. fin is the correctly rounded f(x) unless f(x) lies within about
 *      2^-62 of the midpoint between two doubles. A libm whose error is
 *      at most 0.5 + m ulp returns that correctly rounded value whenever
 *      f(x) is more than m ulp from the midpoint, i.e. when
 *      |tail| <= (0.5 - m - 2^-9) ulp(fin). glibc's s_sin.c (2.28 on) says
 *      sin is within 0.501 ulp below 0.126 and 0.518 above; measured here
 *      against fin + tail over 6 x 10^8 random |x| <= 0.25 (glibc 2.36, its
 *      FMA variant): sin 0.5066 ulp below 0.125 (more than the 0.501), 0.5155
 *      above, cos 0.5012. The margins m: sin 0.01 below 0.125 and 0.025
 *      above, cos 0.01.
 *   3. Elsewhere (about 6 in a hundred of cartpole's angles, uniform in
 *      |x| <= 0.21: near a midpoint; fin a power of two, as cos x = 1 for
 *      |x| < 1e-8; |x| > 0.25; NaN) the caller calls sin and cos.
 *
 * spec/c/test_sincos_small.c compares the result with sin and cos bit for
 * bit on millions of angles: a C library whose error exceeds these margins
 * fails it there (widen m), rather than drift from Gymnasium unnoticed.
 * Needs an fma() that is one instruction to be fast (x86-64-v3 has it).
 */
#ifndef MR_SINCOS_SMALL_H
#define MR_SINCOS_SMALL_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MR_SINCOS_SMALL_MAX 0.25

/* 2^e for fin in [2^e, 2^(e+1)) times 2^-52 = ulp(fin) (0 for 0 and
 * subnormals, which then never pass the check). */
static inline double mr_sincos_ulp(double fin) {
    uint64_t b;
    memcpy(&b, &fin, sizeof b);
    b &= 0x7ff0000000000000ull;
    double p;
    memcpy(&p, &b, sizeof p);
    return p * 0x1p-52;
}

/* fin is a power of two (its lower neighbour is half an ulp closer): */
static inline int mr_sincos_pow2(double fin) {
    uint64_t b;
    memcpy(&b, &fin, sizeof b);
    return (b & 0x000fffffffffffffull) == 0;
}

/* *s = sin(x), *c = cos(x) with libm's bits, returning 1; or 0 (both
 * unset in meaning) where the caller must call sin and cos itself. */
static inline int mr_sincos_small(double x, double *s, double *c) {
    const double ax = fabs(x);
    const double zh = ax * ax, zl = fma(ax, ax, -zh);   /* x^2 = zh + zl exactly */
    /* sin |x| = ax + x^3 (-1/6 + z/120 - z^2/5040 + ...), z = x^2 */
    const double c1h = -1.0 / 6.0, c1l = -9.25185853854297e-18;   /* -1/6 = c1h + c1l to 2^-110 */
    double p = 1.0 / 6227020800.0;
    p = fma(p, zh, -1.0 / 39916800.0);
    p = fma(p, zh, 1.0 / 362880.0);
    p = fma(p, zh, -1.0 / 5040.0);
    p = fma(p, zh, 1.0 / 120.0);
    const double r = fma(p, zh, c1l);
    const double x3h = zh * ax, x3l = fma(zl, ax, fma(zh, ax, -x3h));   /* x^3 */
    const double th = x3h * c1h;
    const double tl = fma(x3h, r, fma(x3l, c1h, fma(x3h, c1h, -th)));
    const double s0 = ax + th, e0 = (ax - s0) + th;                     /* |ax| > |th|: exact */
    const double rem = e0 + tl;
    const double fs = s0 + rem, ts = (s0 - fs) + rem;
    /* cos x = 1 - z/2 + z^2 (1/24 - z/720 + ...) */
    double q = -1.0 / 87178291200.0;
    q = fma(q, zh, 1.0 / 479001600.0);
    q = fma(q, zh, -1.0 / 3628800.0);
    q = fma(q, zh, 1.0 / 40320.0);
    q = fma(q, zh, -1.0 / 720.0);
    q = fma(q, zh, 1.0 / 24.0);
    const double hz = zh * 0.5, ah = 1.0 - hz, al = (1.0 - ah) - hz;    /* 1 - zh/2 = ah + al exactly */
    const double tlc = fma(zh * zh, q, fma(zl, -0.5, al));
    const double fc = ah + tlc, tc = (ah - fc) + tlc;
    const double ms = ax < 0.125 ? 0.5 - 0.01 - 0x1p-9 : 0.5 - 0.025 - 0x1p-9;
    const double mc = 0.5 - 0.01 - 0x1p-9;
    /* cos |x| <= 0.25 is in [0.96, 1]: below 1 its ulp is 2^-53 */
    const int ok = (ax <= MR_SINCOS_SMALL_MAX) & (fabs(ts) <= ms * mr_sincos_ulp(fs)) & !mr_sincos_pow2(fs) &
                   (fabs(tc) <= mc * 0x1p-53) & (fc < 1.0);
    *s = copysign(fs, x);
    *c = fc;
    return ok;
}

#endif /* MR_SINCOS_SMALL_H */

/*
 * check.h - the C unit tests' few assertions. Each test file is one program;
 * it prints one line per failed check and a closing "N passed, N failed" line,
 * and exits non-zero when anything failed.
 */
#ifndef MR_CHECK_H
#define MR_CHECK_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int check_passed, check_failed;

#define CHECK(cond) do { if (cond) check_passed++; else { check_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)

#define CHECK_MSG(cond, ...) do { if (cond) check_passed++; else { check_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* |a - b| <= atol + rtol * |b| */
#define CHECK_NEAR(a, b, atol, rtol) do { double a_ = (a), b_ = (b); \
    if (fabs(a_ - b_) <= (atol) + (rtol) * fabs(b_)) check_passed++; else { check_failed++; \
    fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g\n", __FILE__, __LINE__, \
            #a, a_, #b, b_); } } while (0)

/* Normwise relative error: max |a - b| / max(max |b|, floor); a NaN anywhere
 * is returned (so it fails every "< tol"). */
static inline double check_relerr(const float *a, const float *b, size_t n, double floor) {
    double num = 0.0, den = floor;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return d;
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

/* The tests' random inputs: splitmix64, one stream per test program.
 * check_seed sets its start (each test keeps the seed it was written with). */
static uint64_t check_rng_state = 0x9E3779B97F4A7C15ull;
static inline void check_seed(uint64_t s) { check_rng_state = s; }
static inline double urand(void) {   /* [0, 1) */
    uint64_t z = (check_rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}
static inline double uni(double lo, double hi) { return lo + (hi - lo) * urand(); }
static inline int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); }   /* [lo, hi] */
static inline uint32_t u32rand(void) { return (uint32_t)(urand() * 4294967296.0); }
static inline double nrand(void) {   /* standard normal, Box-Muller */
    double u1 = urand(), u2 = urand();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
/* n floats uniform in [lo, hi), malloc'ed (at least one element). */
static inline float *frand(size_t n, double lo, double hi) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = (float)uni(lo, hi);
    return p;
}

static inline int check_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed ? 1 : 0;
}
#endif

/*
 * check.h - the C unit tests' few assertions. Each test file is one program;
 * it prints one line per failed check and a closing "N passed, N failed" line,
 * and exits non-zero when anything failed.
 */
#ifndef MR_CHECK_H
#define MR_CHECK_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>

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

static inline int check_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed ? 1 : 0;
}
#endif

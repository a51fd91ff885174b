/*
 * check.h - the C unit tests' few assertions. Each test file is one program;
 * it prints one line per failed check and a closing "N passed, N failed" line,
 * and exits non-zero when anything failed.
 */
#ifndef MR_CHECK_H
#define MR_CHECK_H
#include <math.h>
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

static inline int check_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed ? 1 : 0;
}
#endif

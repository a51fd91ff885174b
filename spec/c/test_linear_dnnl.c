/*
 * test_linear_dnnl.c - the bf16 fully connected products (linear_dnnl.c)
 * against a float64 reference written here, on random inputs.
 *
 * The operands are rounded to bf16 here too, by a scalar round-to-nearest-
 * even written in this file (checked bit for bit against
 * mr_bf16_from_f32 first). A product of two bf16 values is exact in fp32
 * (8-bit significands), so each result is an fp32 sum of K exact terms plus
 * the bias or the prior value: its error is at most about (K+2)*u*sum|terms|
 * (u = 2^-24), the bound allowed per element, sum|terms| from the float64
 * reference of the same rounded operands. Every comparison is also made
 * against a reference with the weight's rows reversed (a wrong operand),
 * which must fail that bound. Shapes include several row and column blocks
 * of nn.c's plan and a shorter last block. Then: the bits for 1 and 2
 * threads are the same.
 *
 * Without bf16 instructions (ONEDNN_MAX_CPU_ISA=AVX512_CORE: the _no_bf16
 * run) mr_linear_dnnl_create returns NULL and the test says so and passes.
 */
#include "check.h"
#include "linear_dnnl.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define U 5.9604644775390625e-8   /* 2^-24 */

static uint16_t bf16_ref(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);   /* NaN stays NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static double bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float sym(void) { return (float)(2.0 * urand() - 1.0); }

static uint16_t *rounded(const float *x, size_t n) {
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = bf16_ref(x[i]);
    return h;
}

/* the conversion: bit for bit the scalar rule, for normal values, ties, and NaN/Inf */
static void test_convert(void) {
    enum { N = 100003 };
    float *x = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = sym() * (float)ldexp(1.0, (int)(urand() * 60) - 30);
    uint32_t tie = 0x3f808000u, tie2 = 0x3f818000u, inf = 0x7f800000u, nan = 0x7fc00001u;
    memcpy(&x[0], &tie, 4); memcpy(&x[1], &tie2, 4); memcpy(&x[2], &inf, 4); memcpy(&x[3], &nan, 4);
    x[4] = -0.0f; x[5] = 65504.0f; x[N - 1] = 1.0f / 3.0f;
    uint16_t *h = malloc(N * 2);
    mr_bf16_from_f32(h, x, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t want = bf16_ref(x[i]);
        if (i == 3) bad += !((h[i] & 0x7f80u) == 0x7f80u && (h[i] & 0x7fu));   /* a NaN, payload aside */
        else bad += h[i] != want;
    }
    CHECK_MSG(bad == 0, "mr_bf16_from_f32: %d of %d differ from round-to-nearest-even", bad, N);
    CHECK_MSG(h[0] == 0x3f80 && h[1] == 0x3f82, "ties to even: %04x %04x", h[0], h[1]);
    mr_bf16_from_f32(h, x + 7, 13);   /* a short tail (masked) */
    bad = 0;
    for (int i = 0; i < 13; i++) bad += h[i] != bf16_ref(x[7 + i]);
    CHECK_MSG(bad == 0, "short conversion: %d differ", bad);
    free(x); free(h);
}

/* C (M,N) = A (M,K) . Bt (N,K)^T over the rounded operands; rev: Bt's rows reversed */
static void ref_mm(double *c, double *ab, const uint16_t *A, const uint16_t *Bt, int M, int N, int K, int rev) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const uint16_t *b = Bt + (size_t)(rev ? N - 1 - j : j) * K;
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                double t = bf(A[(size_t)i * K + k]) * bf(b[k]);
                s += t;
                a += fabs(t);
            }
            c[(size_t)i * N + j] = s;
            ab[(size_t)i * N + j] = a;
        }
}

/* got vs ref + base (the bias or the prior value): within (K+2)u(sum|terms| + |base|)? count the misses */
static int misses(const float *got, const double *ref, const double *ab, const float *base, int relu, size_t n,
                  int K, double *worst) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double bb = base ? base[i] : 0.0, want = ref[i] + bb;
        if (relu && want < 0) want = 0;
        double tol = (K + 2) * U * (ab[i] + fabs(bb)) + 1e-30;
        double e = fabs(got[i] - want) / tol;
        if (e > *worst) *worst = e;
        bad += e > 1.0;
    }
    return bad;
}

static void test_shape(mr_linear_dnnl *d, int B, int C, int OC) {
    float *x = malloc((size_t)B * C * 4), *w = malloc((size_t)OC * C * 4), *b = malloc((size_t)OC * 4);
    float *dout = malloc((size_t)B * OC * 4);
    for (size_t i = 0; i < (size_t)B * C; i++) x[i] = sym();
    for (size_t i = 0; i < (size_t)OC * C; i++) w[i] = sym() * 0.05f;
    for (int i = 0; i < OC; i++) b[i] = sym() * 0.1f;
    for (size_t i = 0; i < (size_t)B * OC; i++) dout[i] = sym();
    uint16_t *x16 = rounded(x, (size_t)B * C), *w16 = rounded(w, (size_t)OC * C), *d16 = rounded(dout, (size_t)B * OC);
    /* transposed copies for the references: w^T (C,OC), dout^T (OC,B), x^T (C,B) */
    uint16_t *wt = malloc((size_t)OC * C * 2), *dt = malloc((size_t)B * OC * 2), *xt = malloc((size_t)B * C * 2);
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) wt[(size_t)c * OC + o] = w16[(size_t)o * C + c];
    for (int s = 0; s < B; s++) {
        for (int o = 0; o < OC; o++) dt[(size_t)o * B + s] = d16[(size_t)s * OC + o];
        for (int c = 0; c < C; c++) xt[(size_t)c * B + s] = x16[(size_t)s * C + c];
    }
    size_t nmax = (size_t)B * C > (size_t)OC * C ? (size_t)B * C : (size_t)OC * C;
    if ((size_t)B * OC > nmax) nmax = (size_t)B * OC;
    double *ref = malloc(nmax * 8), *ab = malloc(nmax * 8);
    float *got = malloc(nmax * 4), *prior = malloc(nmax * 4), *got2 = malloc(nmax * 4);
    for (size_t i = 0; i < nmax; i++) prior[i] = sym();
    double worst;

    for (int relu = 0; relu < 2; relu++) {   /* forward: out = x . w^T + b */
        CHECK(mr_linear_bf16_forward(d, got, x16, w16, b, B, C, OC, relu) == 0);
        float *bias_rows = malloc((size_t)B * OC * 4);
        for (int s = 0; s < B; s++) memcpy(bias_rows + (size_t)s * OC, b, (size_t)OC * 4);
        for (int rev = 0; rev < 2; rev++) {
            ref_mm(ref, ab, x16, w16, B, OC, C, rev);
            worst = 0;
            int bad = misses(got, ref, ab, bias_rows, relu, (size_t)B * OC, C, &worst);
            if (!rev) CHECK_MSG(bad == 0, "forward B=%d C=%d OC=%d relu=%d: %d outside (worst %.2f of the bound)",
                                B, C, OC, relu, bad, worst);
            else CHECK_MSG(bad > 0, "forward B=%d C=%d OC=%d: a wrong weight passes the bound", B, C, OC);
        }
        free(bias_rows);
    }
    /* dinp (B,C) += dout (B,OC) . w (OC,C): Bt = w^T rows */
    memcpy(got, prior, (size_t)B * C * 4);
    CHECK(mr_linear_bf16_dinp(d, got, d16, w16, B, C, OC) == 0);
    for (int rev = 0; rev < 2; rev++) {
        ref_mm(ref, ab, d16, wt, B, C, OC, rev);
        worst = 0;
        int bad = misses(got, ref, ab, prior, 0, (size_t)B * C, OC, &worst);
        if (!rev) CHECK_MSG(bad == 0, "dinp B=%d C=%d OC=%d: %d outside (worst %.2f)", B, C, OC, bad, worst);
        else CHECK_MSG(bad > 0, "dinp B=%d C=%d OC=%d: a wrong weight passes the bound", B, C, OC);
    }
    /* dw (OC,C) += dout^T (OC,B) . x (B,C): Bt = x^T rows */
    memcpy(got, prior, (size_t)OC * C * 4);
    CHECK(mr_linear_bf16_dw(d, got, d16, x16, B, C, OC) == 0);
    for (int rev = 0; rev < 2; rev++) {
        ref_mm(ref, ab, dt, xt, OC, C, B, rev);
        worst = 0;
        int bad = misses(got, ref, ab, prior, 0, (size_t)OC * C, B, &worst);
        if (!rev) CHECK_MSG(bad == 0, "dw B=%d C=%d OC=%d: %d outside (worst %.2f)", B, C, OC, bad, worst);
        else CHECK_MSG(bad > 0, "dw B=%d C=%d OC=%d: a wrong input passes the bound", B, C, OC);
    }
    /* the same bits on 1 and 2 threads, for all three */
    int same = 1;
    for (int k = 0; k < 3; k++) {
        float *r[2] = {got, got2};
        size_t n = k == 0 ? (size_t)B * OC : k == 1 ? (size_t)B * C : (size_t)OC * C;
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            memcpy(r[t], prior, n * 4);
            if (k == 0) mr_linear_bf16_forward(d, r[t], x16, w16, b, B, C, OC, 1);
            if (k == 1) mr_linear_bf16_dinp(d, r[t], d16, w16, B, C, OC);
            if (k == 2) mr_linear_bf16_dw(d, r[t], d16, x16, B, C, OC);
        }
        same &= memcmp(got, got2, n * 4) == 0;
    }
    omp_set_num_threads(2);
    CHECK_MSG(same, "B=%d C=%d OC=%d: 1 and 2 threads differ", B, C, OC);
    free(x); free(w); free(b); free(dout); free(x16); free(w16); free(d16); free(wt); free(dt); free(xt);
    free(ref); free(ab); free(got); free(prior); free(got2);
}

int main(void) {
    check_seed(0x5eed1234abcdULL);
    omp_set_num_threads(2);
    mr_linear_dnnl *d = mr_linear_dnnl_create(2);
    if (!d) {
        printf("test_linear_dnnl: no bf16 matmul on this CPU (or ONEDNN_MAX_CPU_ISA below AVX512-BF16): "
               "fc stays fp32 there, nothing to check\n");
        CHECK(1);
        return check_report("test_linear_dnnl");
    }
    test_convert();
    test_shape(d, 5, 7, 3);          /* one block each */
    test_shape(d, 300, 200, 40);     /* rows split, shorter last block */
    test_shape(d, 64, 1000, 700);    /* columns split for forward and dw */
    test_shape(d, 256, 3872, 128);   /* the small net's fc, one block of the forward */
    printf("test_linear_dnnl: kernel %s\n", mr_linear_dnnl_impl(d));
    mr_linear_dnnl_free(d);
    return check_report("test_linear_dnnl");
}

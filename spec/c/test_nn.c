/*
 * test_nn.c - every layer of nn.c against an independent naive implementation
 * in double written here: forward values, and backward (dinp, dw, db) against
 * central finite differences of the double implementation's scalar loss
 * L = sum(g .* out) for random g. Also: gradients accumulate (+=), NULL skips,
 * the observation expansion table, thread-count independence, and the fc
 * layer's products (mr_fc_*) against the linear ones.
 */
#include "check.h"
#include "nn.h"
#include "gemm.h"
#include "moonrl.h"
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */
static double *todouble(const float *f, size_t n) {
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}
/* max |a - b| / max(max |b|, floor) */
static double relerr(const float *a, const double *b, size_t n, double floor) {
    double num = 0, den = floor;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (e > num) num = e;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* ------------------------------------------------------------ naive double layers */
static void ref_conv(double *out, const double *in, const double *w, const double *b,
                     int B, int H, int W, int C, int OC) {
    for (int n = 0; n < B; n++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int o = 0; o < OC; o++) {
                    double s = b[o];
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int yy = y + ky - 1, xx = x + kx - 1;
                            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                            for (int c = 0; c < C; c++)
                                s += in[((n * H + yy) * W + xx) * C + c] *
                                     w[((o * 3 + ky) * 3 + kx) * C + c];
                        }
                    out[((n * H + y) * W + x) * OC + o] = s;
                }
}
static void ref_linear(double *out, const double *in, const double *w, const double *b,
                       int B, int C, int OC) {
    for (int n = 0; n < B; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int c = 0; c < C; c++) s += in[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Central differences of loss(ctx) w.r.t. every element of x (n doubles). */
typedef double (*loss_fn)(void *ctx);
static void fd_grad(double *out, double *x, size_t n, loss_fn f, void *ctx, double eps) {
    for (size_t i = 0; i < n; i++) {
        double s = x[i];
        x[i] = s + eps; double lp = f(ctx);
        x[i] = s - eps; double lm = f(ctx);
        x[i] = s;
        out[i] = (lp - lm) / (2 * eps);
    }
}

/* ------------------------------------------------------------ conv */
typedef struct { int B, H, W, C, OC; double *in, *w, *b, *g, *out; } conv_ctx;
static double conv_loss(void *v) {
    conv_ctx *c = v;
    ref_conv(c->out, c->in, c->w, c->b, c->B, c->H, c->W, c->C, c->OC);
    return dot(c->out, c->g, (size_t)c->B * c->H * c->W * c->OC);
}

static void test_conv(int B, int H, int W, int C, int OC) {
    size_t ni = (size_t)B * H * W * C, nw = (size_t)OC * 9 * C, no = (size_t)B * H * W * OC;
    float *in = frand(ni, -1, 1), *w = frand(nw, -0.5, 0.5), *b = frand(OC, -0.5, 0.5);
    float *g = frand(no, -1, 1), *out = frand(no, -9, 9);   /* garbage: forward writes */
    float *col = frand((size_t)B * H * W * 9 * C, -9, 9);
    mr_conv3x3_forward(out, col, in, w, b, B, H, W, C, OC);

    /* fused conv + relu == conv then relu, bit for bit */
    float *fused = frand(no, -9, 9), *sep = malloc(sizeof(float) * no);
    mr_conv3x3_relu_forward(fused, col, in, w, b, B, H, W, C, OC);
    mr_relu_forward(sep, out, no);
    CHECK_MSG(memcmp(fused, sep, sizeof(float) * no) == 0, "conv+relu fused differs");
    free(fused); free(sep);

    conv_ctx cx = {B, H, W, C, OC, todouble(in, ni), todouble(w, nw), todouble(b, OC),
                   todouble(g, no), malloc(sizeof(double) * no)};
    conv_loss(&cx);
    double e = relerr(out, cx.out, no, 1e-3);
    CHECK_MSG(e < 1e-5, "conv forward B%d H%d W%d C%d OC%d: rel err %g", B, H, W, C, OC, e);

    /* backward with pre-filled gradients: must accumulate */
    float *dinp0 = frand(ni, -1, 1), *dw0 = frand(nw, -1, 1), *db0 = frand(OC, -1, 1);
    float *dinp = malloc(sizeof(float) * ni), *dw = malloc(sizeof(float) * nw),
          *db = malloc(sizeof(float) * OC);
    memcpy(dinp, dinp0, sizeof(float) * ni);
    memcpy(dw, dw0, sizeof(float) * nw);
    memcpy(db, db0, sizeof(float) * OC);
    mr_conv3x3_backward(dinp, dw, db, col, g, in, w, B, H, W, C, OC);
    for (size_t i = 0; i < ni; i++) dinp[i] -= dinp0[i];
    for (size_t i = 0; i < nw; i++) dw[i] -= dw0[i];
    for (int i = 0; i < OC; i++) db[i] -= db0[i];

    double *fi = malloc(sizeof(double) * ni), *fw = malloc(sizeof(double) * nw),
           *fb = malloc(sizeof(double) * OC);
    fd_grad(fi, cx.in, ni, conv_loss, &cx, 1e-3);
    fd_grad(fw, cx.w, nw, conv_loss, &cx, 1e-3);
    fd_grad(fb, cx.b, OC, conv_loss, &cx, 1e-3);
    double ei = relerr(dinp, fi, ni, 1e-3), ew = relerr(dw, fw, nw, 1e-3),
           eb = relerr(db, fb, OC, 1e-3);
    CHECK_MSG(ei < 1e-4, "conv dinp B%d H%d W%d C%d OC%d: rel err %g", B, H, W, C, OC, ei);
    CHECK_MSG(ew < 1e-4, "conv dw B%d H%d W%d C%d OC%d: rel err %g", B, H, W, C, OC, ew);
    CHECK_MSG(eb < 1e-4, "conv db B%d H%d W%d C%d OC%d: rel err %g", B, H, W, C, OC, eb);

    /* NULL dinp / db: dw alone is the same */
    float *dw2 = calloc(nw, sizeof(float));
    mr_conv3x3_backward(NULL, dw2, NULL, col, g, in, w, B, H, W, C, OC);
    double ew2 = relerr(dw2, fw, nw, 1e-3);
    CHECK_MSG(ew2 < 1e-4, "conv dw with NULL dinp/db: rel err %g", ew2);

    free(in); free(w); free(b); free(g); free(out); free(col);
    free(cx.in); free(cx.w); free(cx.b); free(cx.g); free(cx.out);
    free(dinp0); free(dw0); free(db0); free(dinp); free(dw); free(db);
    free(fi); free(fw); free(fb); free(dw2);
}

/* ------------------------------------------------------------ linear */
typedef struct { int B, C, OC; double *in, *w, *b, *g, *out; } lin_ctx;
static double lin_loss(void *v) {
    lin_ctx *c = v;
    ref_linear(c->out, c->in, c->w, c->b, c->B, c->C, c->OC);
    return dot(c->out, c->g, (size_t)c->B * c->OC);
}

static void test_linear(int B, int C, int OC) {
    size_t ni = (size_t)B * C, nw = (size_t)OC * C, no = (size_t)B * OC;
    float *in = frand(ni, -1, 1), *w = frand(nw, -0.5, 0.5), *b = frand(OC, -0.5, 0.5);
    float *g = frand(no, -1, 1), *out = frand(no, -9, 9);
    mr_linear_forward(out, in, w, b, B, C, OC);
    float *fused = frand(no, -9, 9), *sep = malloc(sizeof(float) * no);
    mr_linear_relu_forward(fused, in, w, b, B, C, OC);
    mr_relu_forward(sep, out, no);
    CHECK_MSG(memcmp(fused, sep, sizeof(float) * no) == 0, "linear+relu fused differs");
    free(fused); free(sep);

    lin_ctx cx = {B, C, OC, todouble(in, ni), todouble(w, nw), todouble(b, OC),
                  todouble(g, no), malloc(sizeof(double) * no)};
    lin_loss(&cx);
    double e = relerr(out, cx.out, no, 1e-3);
    CHECK_MSG(e < 1e-5, "linear forward B%d C%d OC%d: rel err %g", B, C, OC, e);

    /* bias NULL = zero bias */
    float *out0 = frand(no, -9, 9);
    mr_linear_forward(out0, in, w, NULL, B, C, OC);
    double mx = 0;
    for (size_t i = 0; i < no; i++) {
        double d = fabs((out[i] - b[i % OC]) - out0[i]);
        if (d > mx) mx = d;
    }
    CHECK_MSG(mx < 1e-5, "linear forward with NULL bias: max diff %g", mx);

    float *dinp0 = frand(ni, -1, 1), *dw0 = frand(nw, -1, 1), *db0 = frand(OC, -1, 1);
    float *dinp = malloc(sizeof(float) * ni), *dw = malloc(sizeof(float) * nw),
          *db = malloc(sizeof(float) * OC);
    memcpy(dinp, dinp0, sizeof(float) * ni);
    memcpy(dw, dw0, sizeof(float) * nw);
    memcpy(db, db0, sizeof(float) * OC);
    mr_linear_backward(dinp, dw, db, g, in, w, B, C, OC);
    for (size_t i = 0; i < ni; i++) dinp[i] -= dinp0[i];
    for (size_t i = 0; i < nw; i++) dw[i] -= dw0[i];
    for (int i = 0; i < OC; i++) db[i] -= db0[i];
    double *fi = malloc(sizeof(double) * ni), *fw = malloc(sizeof(double) * nw),
           *fb = malloc(sizeof(double) * OC);
    if (ni + nw < 20000) {   /* central differences of the double loss */
        fd_grad(fi, cx.in, ni, lin_loss, &cx, 1e-3);
        fd_grad(fw, cx.w, nw, lin_loss, &cx, 1e-3);
        fd_grad(fb, cx.b, OC, lin_loss, &cx, 1e-3);
    } else {                 /* large shapes: the analytic gradient in double */
        for (int n = 0; n < B; n++)
            for (int c = 0; c < C; c++) {
                double a = 0;
                for (int o = 0; o < OC; o++) a += cx.g[n * OC + o] * cx.w[(size_t)o * C + c];
                fi[(size_t)n * C + c] = a;
            }
        for (int o = 0; o < OC; o++) {
            double sb = 0;
            for (int n = 0; n < B; n++) sb += cx.g[n * OC + o];
            fb[o] = sb;
            for (int c = 0; c < C; c++) {
                double a = 0;
                for (int n = 0; n < B; n++) a += cx.g[n * OC + o] * cx.in[(size_t)n * C + c];
                fw[(size_t)o * C + c] = a;
            }
        }
    }
    double ei = relerr(dinp, fi, ni, 1e-3), ew = relerr(dw, fw, nw, 1e-3),
           eb = relerr(db, fb, OC, 1e-3);
    CHECK_MSG(ei < 1e-4, "linear dinp B%d C%d OC%d: rel err %g", B, C, OC, ei);
    CHECK_MSG(ew < 1e-4, "linear dw B%d C%d OC%d: rel err %g", B, C, OC, ew);
    CHECK_MSG(eb < 1e-4, "linear db B%d C%d OC%d: rel err %g", B, C, OC, eb);

    free(in); free(w); free(b); free(g); free(out); free(out0);
    free(cx.in); free(cx.w); free(cx.b); free(cx.g); free(cx.out);
    free(dinp0); free(dw0); free(db0); free(dinp); free(dw); free(db);
    free(fi); free(fw); free(fb);
}

/* ------------------------------------------------------------ relu */
typedef struct { size_t n; double *in, *g; } relu_ctx;
static double relu_loss(void *v) {
    relu_ctx *c = v;
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += (c->in[i] > 0 ? c->in[i] : 0) * c->g[i];
    return s;
}

static void test_relu(size_t n) {
    float *in = frand(n, -1, 1), *g = frand(n, -1, 1), *out = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++)   /* keep away from the kink for differences */
        if (fabsf(in[i]) < 0.01f) in[i] = 0.5f;
    mr_relu_forward(out, in, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= out[i] == (in[i] > 0 ? in[i] : 0.0f);
    CHECK_MSG(ok, "relu forward n=%zu", n);
    float *d = malloc(sizeof(float) * n);
    mr_relu_backward(d, g, out, n);
    relu_ctx cx = {n, todouble(in, n), todouble(g, n)};
    double *f = malloc(sizeof(double) * n);
    if (n <= 1000) {
        fd_grad(f, cx.in, n, relu_loss, &cx, 1e-3);
    } else {   /* the loss is a sum of per-element terms: difference each term */
        for (size_t i = 0; i < n; i++) {
            double xp = cx.in[i] + 1e-3, xm = cx.in[i] - 1e-3;
            f[i] = ((xp > 0 ? xp : 0) - (xm > 0 ? xm : 0)) * cx.g[i] / 2e-3;
        }
    }
    double e = relerr(d, f, n, 1e-3);
    CHECK_MSG(e < 1e-6, "relu backward n=%zu: rel err %g", n, e);
    /* in place */
    float *d2 = malloc(sizeof(float) * n);
    memcpy(d2, g, sizeof(float) * n);
    mr_relu_backward(d2, d2, out, n);
    CHECK(memcmp(d2, d, sizeof(float) * n) == 0);
    free(in); free(g); free(out); free(d); free(cx.in); free(cx.g); free(f); free(d2);
}

/* ------------------------------------------------------------ observation */
static void test_obs_expand(void) {
    uint8_t codes[2 * 5] = {0, 1, 2, 1, 0, 2, 2, 0, 1, 3};
    float out[2 * 5 * 2];
    static const float gt[4][2] = {{0, 0}, {1, 0}, {0, 1}, {0, 0}};
    static const float px[4][2] = {{0, 0}, {1, 1}, {0.5f, 0.5f}, {0, 0}};
    for (int proxy = 0; proxy < 2; proxy++) {
        memset(out, 0x7f, sizeof out);
        mr_obs_expand_forward(out, codes, 2, 5, 2, proxy);
        int ok = 1;
        for (int i = 0; i < 10; i++) {
            const float *want = proxy ? px[codes[i]] : gt[codes[i]];
            ok &= out[2 * i] == want[0] && out[2 * i + 1] == want[1];
        }
        CHECK_MSG(ok, "obs expand, proxy=%d", proxy);
    }
    /* C = 4 channels (snake's): one-hot, code k in 1 .. 4 is channel k-1, 0 and 5 none */
    static const uint8_t c4[6] = {0, 1, 2, 3, 4, 5};
    static const float want4[6][4] = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1},
                                      {0, 0, 0, 0}};
    float out4[6 * 4];
    memset(out4, 0x7f, sizeof out4);
    mr_obs_expand_forward(out4, c4, 2, 3, 4, 0);
    CHECK_MSG(!memcmp(out4, want4, sizeof out4), "obs expand, 4 channels");
}

/* ------------------------------------------------------------ threads */
/* The same layer calls on 1 and 2 threads give identical bits. */
static void run_layers(float *out, float *dinp, float *dw, float *db, float *lout,
                       float *ldin, float *ldw, float *ldb, const float *in, const float *w,
                       const float *b, const float *g, const float *lw, const float *lb,
                       const float *lg, float *col, int B, int H, int W, int C, int OC, int LC) {
    mr_conv3x3_forward(out, col, in, w, b, B, H, W, C, OC);
    mr_relu_forward(out, out, (size_t)B * H * W * OC);
    memset(dinp, 0, sizeof(float) * B * H * W * C);
    memset(dw, 0, sizeof(float) * OC * 9 * C);
    memset(db, 0, sizeof(float) * OC);
    mr_conv3x3_backward(dinp, dw, db, col, g, in, w, B, H, W, C, OC);
    int LI = H * W * OC;
    mr_linear_forward(lout, out, lw, lb, B, LI, LC);
    memset(ldin, 0, sizeof(float) * B * LI);
    memset(ldw, 0, sizeof(float) * LC * LI);
    memset(ldb, 0, sizeof(float) * LC);
    mr_linear_backward(ldin, ldw, ldb, lg, out, lw, B, LI, LC);
}

static void test_threads(void) {
    int B = 48, H = 11, W = 11, C = 32, OC = 64, LC = 96, LI = H * W * OC;
    size_t ni = (size_t)B * H * W * C, no = (size_t)B * H * W * OC, nw = (size_t)OC * 9 * C;
    float *in = frand(ni, -1, 1), *w = frand(nw, -0.2, 0.2), *b = frand(OC, -0.1, 0.1);
    float *g = frand(no, -1, 1), *lw = frand((size_t)LC * LI, -0.01, 0.01),
          *lb = frand(LC, -0.1, 0.1), *lg = frand((size_t)B * LC, -1, 1);
    float *col = malloc(sizeof(float) * (size_t)B * H * W * 9 * C);
    float *r[2][8];
    size_t sz[8] = {no, ni, nw, (size_t)OC, (size_t)B * LC, (size_t)B * LI,
                    (size_t)LC * LI, (size_t)LC};
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < 8; k++) r[t][k] = malloc(sizeof(float) * sz[k]);
        omp_set_num_threads(t + 1);
        openblas_set_num_threads(t + 1);
        run_layers(r[t][0], r[t][1], r[t][2], r[t][3], r[t][4], r[t][5], r[t][6], r[t][7],
                   in, w, b, g, lw, lb, lg, col, B, H, W, C, OC, LC);
    }
    omp_set_num_threads(2);
    openblas_set_num_threads(2);
    const char *names[8] = {"conv out", "conv dinp", "conv dw", "conv db", "linear out",
                            "linear dinp", "linear dw", "linear db"};
    for (int k = 0; k < 8; k++)
        CHECK_MSG(memcmp(r[0][k], r[1][k], sizeof(float) * sz[k]) == 0,
                  "%s differs between 1 and 2 threads", names[k]);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 8; k++) free(r[t][k]);
    free(in); free(w); free(b); free(g); free(lw); free(lb); free(lg); free(col);
}

/* mr_nn_transpose: every element in its place, for shapes with and
 * without whole 16 x 16 blocks (AVX-512's path and the edges). */
static void test_transpose(void) {
    const int shapes[][2] = {{16, 16}, {32, 48}, {37, 53}, {128, 3872}, {5, 3}, {512, 100}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int R = shapes[i][0], Cn = shapes[i][1];
        float *s = frand((size_t)R * Cn, -1, 1), *d = frand((size_t)R * Cn, -1, 1);
        mr_nn_transpose(d, s, R, Cn);
        int bad = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < Cn; c++) bad += d[(size_t)c * R + r] != s[(size_t)r * Cn + c];
        CHECK_MSG(bad == 0, "transpose %d x %d: %d elements misplaced", R, Cn, bad);
        free(s); free(d);
    }
}

/* One shape of test_fc: wt given (w transposed: gemm.c's kernels where OC
 * is a multiple of 16 on AVX-512) or not (OpenBLAS's forward). The
 * references are OpenBLAS's mr_linear_* and, for wt, float64. */
static void test_fc_shape(int B, int C, int OC, int transposed) {
    const int seg = 256;
    size_t ni = (size_t)B * C, nw = (size_t)OC * C, no = (size_t)B * OC;
    float *in = frand(ni, -1, 1), *w = frand(nw, -0.1, 0.1), *wt = transposed ? malloc(sizeof(float) * nw) : NULL, *b = frand(OC, -0.5, 0.5), *g = frand(no, -1, 1);
    float *out = frand(no, -9, 9), *part = frand(no, -9, 9), *lin = malloc(sizeof(float) * no);
    if (wt) mr_nn_transpose(wt, w, OC, C);
    mr_fc_relu_forward(out, in, w, wt, b, B, C, OC, seg);
    for (int s0 = 0; s0 < B; s0 += seg)
        mr_fc_relu_forward(part + (size_t)s0 * OC, in + (size_t)s0 * C, w, wt, b, B - s0 < seg ? B - s0 : seg, C, OC, 0);
    CHECK_MSG(memcmp(out, part, sizeof(float) * no) == 0, "fc (%d,%d,%d) forward in segments differs from one call per segment", B, C, OC);
    {   /* float64: every output within (C + 2) u S of relu(b + in . w^T), S the sum on absolute values */
        double worst = 0.0;
        for (int r = 0; r < B; r++)
            for (int o = 0; o < OC; o++) {
                double x = b[o], S = fabs(b[o]);
                for (int k = 0; k < C; k++) {
                    double t = (double)in[(size_t)r * C + k] * w[(size_t)o * C + k];
                    x += t;
                    S += fabs(t);
                }
                double e = fabs(out[(size_t)r * OC + o] - (x > 0 ? x : 0)), q = e / ((C + 2) * ldexp(1.0, -24) * S);
                if (!(q <= worst)) worst = q;
            }
        CHECK_MSG(worst <= 1.0, "fc (%d,%d,%d) forward vs float64: %.3g of the bound", B, C, OC, worst);
    }
    if (wt && mr_gemm_wide(16)) {   /* through the inputs' transpose: the same bits, for a multiple of 16 rows */
        const int nx = B / 16 * 16 < 64 ? B / 16 * 16 : 64;
        float *xt = malloc(sizeof(float) * (size_t)C * (nx ? nx : 1)), *ct = malloc(sizeof(float) * (size_t)OC * (nx ? nx : 1));
        float *ox = frand((size_t)nx * OC + 1, -9, 9), *ow = frand((size_t)nx * OC + 1, -9, 9);
        mr_nn_transpose(xt, in, nx, C);
        mr_fc_relu_forward_xt(ox, xt, w, b, ct, nx, C, OC);
        mr_fc_relu_forward(ow, in, w, wt, b, nx, C, OC, 0);
        CHECK_MSG(nx > 0 && memcmp(ox, ow, sizeof(float) * (size_t)nx * OC) == 0,
                  "fc (%d,%d,%d): the forward through the inputs' transpose differs from the weights' (%d rows)", B, C,
                  OC, nx);
        free(xt); free(ct); free(ox); free(ow);
    }
    mr_linear_relu_forward(lin, in, w, b, B, C, OC);
    double *ld = todouble(lin, no);
    double e = relerr(out, ld, no, 1e-3);
    CHECK_MSG(e < 1e-5, "fc forward vs linear forward: rel err %g", e);

    float *dinp = frand(ni, -9, 9), *dw = frand(nw, -1, 1), *db = frand(OC, -1, 1);
    float *ldinp = calloc(ni, sizeof(float)), *ldw = malloc(sizeof(float) * nw), *ldb = malloc(sizeof(float) * OC);
    memcpy(ldw, dw, sizeof(float) * nw);
    memcpy(ldb, db, sizeof(float) * OC);
    mr_fc_backward(dinp, dw, db, g, in, w, transposed, B, C, OC);        /* dinp's old contents ignored */
    mr_linear_backward(ldinp, ldw, ldb, g, in, w, B, C, OC);  /* onto zeros, and onto the same dw, db */
    double *fi = todouble(ldinp, ni), *fw = todouble(ldw, nw), *fb = todouble(ldb, OC);
    double ei = relerr(dinp, fi, ni, 1e-3), ew = relerr(dw, fw, nw, 1e-3), eb = relerr(db, fb, OC, 1e-3);
    CHECK_MSG(ei < 1e-5 && ew < 1e-5 && eb < 1e-6, "fc backward vs linear backward: dinp %g, dw %g, db %g", ei, ew, eb);

    /* 1 vs 2 threads */
    float *o1 = malloc(sizeof(float) * no), *i1 = malloc(sizeof(float) * ni), *w1 = calloc(nw, sizeof(float)),
          *w2 = calloc(nw, sizeof(float));
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    mr_fc_relu_forward(o1, in, w, wt, b, B, C, OC, seg);
    mr_fc_backward(i1, w1, NULL, g, in, w, transposed, B, C, OC);
    omp_set_num_threads(2);
    openblas_set_num_threads(2);
    mr_fc_backward(NULL, w2, NULL, g, in, w, transposed, B, C, OC);
    mr_fc_backward(dinp, NULL, NULL, g, NULL, w, transposed, B, C, OC);
    CHECK_MSG(memcmp(o1, out, sizeof(float) * no) == 0, "fc forward differs between 1 and 2 threads");
    CHECK_MSG(memcmp(i1, dinp, sizeof(float) * ni) == 0, "fc dinp differs between 1 and 2 threads");
    CHECK_MSG(memcmp(w1, w2, sizeof(float) * nw) == 0, "fc dw differs between 1 and 2 threads");
    /* the first cols input columns alone (the critic's: only feat's): each
     * element mr_fc_backward's on gemm.c (an element's bits do not depend
     * on the product's width); on OpenBLAS (another summation order) each
     * within (OC + 2) u S of the float64 sum g . w, S the sum of the terms'
     * absolute values (a bound relative to the element itself fails where
     * the terms cancel: seen on an AVX2 CPU, 4e-4 of a near-zero element);
     * nothing past them */
    {
        const int cols = C / 3 + 5;
        float *dc = malloc(sizeof(float) * ((size_t)B * cols + 16));
        for (int k = 0; k < 16; k++) dc[(size_t)B * cols + k] = -7.0f;
        mr_fc_input_grad(dc, g, w, transposed, B, C, OC, cols);
        int same = 1, untouched = 1;
        double worst = 0.0;
        for (int r = 0; r < B; r++)
            for (int j = 0; j < cols; j++) {
                const float x = dc[(size_t)r * cols + j], y = dinp[(size_t)r * C + j];
                same &= x == y;
                double ref = 0.0, S = 0.0;
                for (int k = 0; k < OC; k++) {
                    const double t = (double)g[(size_t)r * OC + k] * w[(size_t)k * C + j];
                    ref += t;
                    S += fabs(t);
                }
                const double d = fabs((double)x - ref) / ((OC + 2) * ldexp(1.0, -24) * S + 1e-30);
                if (d > worst) worst = d;
            }
        for (int k = 0; k < 16; k++) untouched &= dc[(size_t)B * cols + k] == -7.0f;
        if (transposed && mr_gemm_any())
            CHECK_MSG(same, "fc (%d,%d,%d): the first %d columns' input gradient differs from the whole one's", B, C,
                      OC, cols);
        else
            CHECK_MSG(worst <= 1.0, "fc (%d,%d,%d): the first %d columns' input gradient vs float64: %.3g of the "
                      "bound", B, C, OC, cols, worst);
        CHECK_MSG(untouched, "mr_fc_input_grad wrote past its %d columns", cols);
        free(dc);
    }

    free(in); free(w); free(wt); free(b); free(g); free(out); free(part); free(lin); free(ld);
    free(dinp); free(dw); free(db); free(ldinp); free(ldw); free(ldb); free(fi); free(fw); free(fb);
    free(o1); free(i1); free(w1); free(w2);
}

/* fc's products (mr_fc_*, mr_nn_fc_plan): the plan's blocks for the
 * networks' shapes; the forward in segments makes the calls of one
 * mr_fc_relu_forward per segment (bit for bit) and agrees with
 * mr_linear_relu_forward; the backward writes dinp and adds to dw, db, as
 * mr_linear_backward computes them; 1 and 2 threads bit-identical. */
static void test_fc(void) {
    struct { int M, N, K, rows, nb, bs; } pl[] = {
        {512, 512, 7744, 1, 2, 256},    /* the reference net's forward, one 512-sample segment */
        {64, 512, 7744, 0, 2, 256},     /* act on 64 samples */
        {88, 512, 7744, 0, 2, 256},     /* a short segment */
        {512, 7744, 512, 0, 4, 1936},   /* its input gradient */
        {512, 7744, 4096, 0, 4, 1936},  /* its weight gradient */
        {512, 128, 3872, 1, 2, 256},    /* the small net's forward */
        {64, 128, 3872, 0, 2, 64},      /* ... act on 64 samples: still two blocks */
        {512, 3872, 128, 0, 4, 976},    /* ... its input gradient */
        {256, 128, 372, 1, 4, 64},      /* ... the critic's forward on a 256-sample block: four */
        {64, 128, 372, 0, 2, 64},       /* ... and on act's 64: two */
        {3, 7, 5, 0, 1, 16},            /* tiny: one block */
    };
    for (size_t i = 0; i < sizeof pl / sizeof pl[0]; i++) {
        int nb = 0, bs = 0, rows = mr_nn_fc_plan(pl[i].M, pl[i].N, pl[i].K, &nb, &bs);
        CHECK_MSG(rows == pl[i].rows && nb == pl[i].nb && bs == pl[i].bs,
                  "fc plan (%d,%d,%d): rows %d, %d blocks of %d; want %d, %d of %d", pl[i].M, pl[i].N, pl[i].K,
                  rows, nb, bs, pl[i].rows, pl[i].nb, pl[i].bs);
    }

    test_fc_shape(700, 1200, 600, 0);   /* forward on OpenBLAS, both gradients 1200 wide */
    test_fc_shape(700, 1200, 608, 1);   /* every product on gemm.c's kernels where the CPU has AVX-512 */
    test_fc_shape(130, 208, 48, 1);     /* short of a block: one row at a time at the ends */
}


/* The peak loops (src/engine/cpu/peak.c) really run: each returns its closed
 * form, which an elided or merged loop would not. The rate itself is not
 * checked here (timing); bench_train prints it beside the sgemm rate. */
static void test_peak_kernels(void) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        float r = mr_cpu_peak_kernel(bf16, 3 * 4096);
        if (r == -1.0f) { printf("  peak kernel %s: not on this CPU, skipped\n", bf16 ? "bf16" : "fp32"); continue; }
        CHECK_MSG(r == 66.0f + 12.0f * 3.0f, "peak kernel %s returned %.6f, want 102", bf16 ? "bf16" : "fp32", r);
        CHECK_MSG(mr_cpu_peak_kernel(bf16, 0) == 66.0f, "peak kernel %s with no steps", bf16 ? "bf16" : "fp32");
    }
}

/* The rule that re-executes moonrl with OPENBLAS_CORETYPE (moonrl.h):
 * OpenBLAS's core name and the CPU's features in, the kernels to ask for. */
static void test_blas_pick(void) {
    /* a VM hiding the model of an AVX-512 Xeon: OpenBLAS 0.3.21 said Prescott */
    CHECK(strcmp(mr_blas_pick_kernels("Prescott", 1, 1), "SkylakeX") == 0);
    CHECK(strcmp(mr_blas_pick_kernels("Prescott", 1, 0), "Haswell") == 0);
    CHECK(strcmp(mr_blas_pick_kernels("Sandybridge", 1, 0), "Haswell") == 0);
    CHECK(mr_blas_pick_kernels("Prescott", 0, 0) == NULL);          /* nothing better to ask for */
    /* AVX-512 run with AVX2 kernels (0.3.21 knows no AMD core with AVX-512) */
    CHECK(strcmp(mr_blas_pick_kernels("Zen", 1, 1), "SkylakeX") == 0);
    CHECK(strcmp(mr_blas_pick_kernels("haswell", 1, 1), "SkylakeX") == 0);
    /* the right kernels already */
    CHECK(mr_blas_pick_kernels("Haswell", 1, 0) == NULL);
    CHECK(mr_blas_pick_kernels("Zen", 1, 0) == NULL);
    CHECK(mr_blas_pick_kernels("SkylakeX", 1, 1) == NULL);
    CHECK(mr_blas_pick_kernels("Cooperlake", 1, 1) == NULL);
    CHECK(mr_blas_pick_kernels("SapphireRapids", 1, 1) == NULL);
    CHECK(mr_blas_pick_kernels(NULL, 1, 1) == NULL);
    /* this machine: after moonrl's re-exec, the kernels in use need no better */
    const char *k = mr_blas_kernels();
    printf("  OpenBLAS kernels here: %s; moonrl would ask for: %s\n", k,
           mr_blas_better_kernels() ? mr_blas_better_kernels() : "(nothing: these)");
}

/* mr_colsum_f64: the rows in order in double, through y's ReLU where given
 * (zeros, negatives, a NaN), onto what acc held: the bits of the plain loop
 * here, for widths its AVX-512 path takes (16..64) and others, strided rows */
static void test_colsum(void) {
    const int widths[] = {16, 32, 48, 64, 20, 80, 7};
    const size_t rows = 1000;
    const long ld = 96;
    float *d = malloc(sizeof(float) * rows * ld), *y = malloc(sizeof(float) * rows * ld);
    for (size_t i = 0; i < rows * (size_t)ld; i++) {
        d[i] = (float)(2 * urand() - 1) * (urand() < 0.5 ? 1e-3f : 1e3f);
        y[i] = urand() < 0.3 ? 0.0f : (float)(2 * urand() - 1);
    }
    y[rows * ld / 2] = NAN;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
        for (int masked = 0; masked < 2; masked++) {
            const int C = widths[w];
            double got[96], want[96];
            for (int c = 0; c < C; c++) got[c] = want[c] = 0.25 * c;
            mr_colsum_f64(got, d, masked ? y : NULL, rows, ld, C);
            for (size_t r = 0; r < rows; r++)
                for (int c = 0; c < C; c++) {
                    const float x = d[r * ld + c];
                    want[c] += !masked || y[r * ld + c] > 0.0f ? (double)x : 0.0;
                }
            CHECK_MSG(!memcmp(got, want, sizeof(double) * C), "column sums of %d columns (masked %d) differ from the loop's",
                      C, masked);
        }
    free(d); free(y);
}

int main(void) {
    check_seed(0x1234567887654321ULL);
    test_colsum();
    test_blas_pick();
    test_obs_expand();
    /* fixed shapes incl. non-square and C, OC = 1 */
    test_conv(1, 3, 3, 1, 1);
    test_conv(2, 4, 5, 3, 2);
    test_conv(3, 5, 4, 2, 7);
    test_conv(2, 6, 6, 5, 4);
    test_conv(2, 1, 4, 2, 3);
    test_conv(1, 1, 2, 3, 9);   /* fewer pixels than channels: the column-split path */
    for (int i = 0; i < 4; i++)   /* random small shapes */
        test_conv(irand(1, 3), irand(2, 6), irand(2, 6), irand(1, 6), irand(1, 8));
    test_linear(1, 1, 1);
    test_linear(3, 7, 5);
    test_linear(4, 33, 1);
    test_linear(2, 17, 20);
    for (int i = 0; i < 3; i++) test_linear(irand(1, 5), irand(1, 40), irand(1, 20));
    test_linear(3, 1200, 700);    /* several column blocks (analytic reference) */
    test_linear(700, 1200, 3);    /* several row blocks (analytic reference) */
    test_relu(37);
    test_relu(300000);  /* the threaded path */
    test_threads();
    test_transpose();
    test_fc();
    test_peak_kernels();
    return check_report("test_nn");
}

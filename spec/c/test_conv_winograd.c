/*
 * test_conv_winograd.c - the Winograd convolutions (conv_winograd.c),
 * F(2x2,3x3), F(4x4,3x3) and F(6x6,3x3), against a float64 direct convolution written
 * here: forward with bias + ReLU, input, weight and bias gradients, at the
 * reference and small nets' layer shapes (11 x 11, chunk 32) and odd ones
 * (7 x 9 maps, channels 6 -> 7, chunk 5; a map smaller than a tile).
 *
 * The bound (conv_winograd.h): |computed - exact| <= (K' + 4 alpha + 2) u S
 * per element, u = 2^-24, alpha = m + 2, K' = the length of the
 * transformed-domain dot products (C forward, OC for the input gradient, the
 * chunk's tile count for the weight gradient), and S = the Winograd
 * computation run in float64 on absolute values (|BT| |d| |B|, |G| |g| |GT|,
 * |AT| . |A|; plus |b|). S is computed here from this file's own copy of
 * the transform matrices. db is a double sum rounded once: 2u sum|dout|.
 * Every comparison is also made against a reference with the kernel
 * mirrored (taps (ky,kx) -> (2-ky,2-kx)), which must fail the bound, so the
 * bound is tight enough to catch a wrong kernel (and a wrong transform
 * coefficient: changing any one entry of BT4, G4, AT4, BT6, G6 or AT6 in
 * conv_winograd.c fails this test).
 *
 * Thread count: each call is single-threaded by contract; the same call
 * made outside a parallel region with 1 and with 2 OpenMP threads (where an
 * unpinned sgemm would split its work) and inside a 2-thread region on a
 * second workspace gives the same bits. The policy-level check (1 vs 2
 * threads, tail chunks, the chunk-ordered gradient reduction) is
 * test_policy.c's, run with cpu.conv = winograd too.
 */
#include "check.h"
#include "conv_ref.h"
#include "conv_winograd.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define U 5.9604644775390625e-8   /* 2^-24 */

static float sym(void) { return (float)(2.0 * urand() - 1.0); }

/* float64 direct references: conv_ref.h */

/* ------------------------------------------------ S: the Winograd computation on absolute values */

/* This file's own copy of the matrices (absolute values are what S needs). */
static const double BT2[16] = {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1};
static const double G2[12] = {1, 0, 0, .5, .5, .5, .5, -.5, .5, 0, 0, 1};
static const double AT2[8] = {1, 1, 1, 0, 0, 1, -1, -1};
static const double BT4[36] = {4, 0, -5, 0, 1, 0, 0, -4, -4, 1, 1, 0, 0, 4, -4, -1, 1, 0,
                               0, -2, -1, 2, 1, 0, 0, 2, -1, -2, 1, 0, 0, 4, 0, -5, 0, 1};
static const double G4[18] = {1 / 4., 0, 0, -1 / 6., -1 / 6., -1 / 6., -1 / 6., 1 / 6., -1 / 6.,
                              1 / 24., 1 / 12., 1 / 6., 1 / 24., -1 / 12., 1 / 6., 0, 0, 1};
static const double AT4[24] = {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0, 0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1};
static const double BT6[64] = {1, 0,   -5.25, 0,     5.25,  0,     -1, 0, 0, 1,  1, -4.25, -4.25, 1,    1, 0,
                               0, -1,  1,     4.25,  -4.25, -1,    1,  0, 0, .5, .25, -2.5, -1.25, 2,    1, 0,
                               0, -.5, .25,   2.5,   -1.25, -2,    1,  0, 0, 2,  4,  -2.5,  -5,    .5,   1, 0,
                               0, -2,  4,     2.5,   -5,    -.5,   1,  0, 0, -1, 0,  5.25,  0,     -5.25, 0, 1};
static const double G6[24] = {1,       0,        0,       -2 / 9.,  -2 / 9.,  -2 / 9.,  -2 / 9., 2 / 9.,
                              -2 / 9., 1 / 90.,  1 / 45., 2 / 45.,  1 / 90.,  -1 / 45., 2 / 45., 32 / 45.,
                              16 / 45., 8 / 45., 32 / 45., -16 / 45., 8 / 45., 0,        0,       1};
static const double AT6[48] = {1, 1, 1,  1, 1,  1,   1,    0,    0, 1, -1, 2,  -2,  .5,      -.5,      0,
                               0, 1, 1,  4, 4,  .25, .25,  0,    0, 1, -1, 8,  -8,  .125,    -.125,    0,
                               0, 1, 1, 16, 16, .0625, .0625, 0, 0, 1, -1, 32, -32, .03125, -.03125, 1};

typedef struct { int m, a; const double *BT, *G, *AT; } mats;
static mats mats_of(int m) {
    mats x = {2, 4, BT2, G2, AT2};
    if (m == 4) x = (mats){4, 6, BT4, G4, AT4};
    if (m == 6) x = (mats){6, 8, BT6, G6, AT6};
    return x;
}

/* |V| (a*a, C) of one tile's patch at (s, y0, x0) (y0, x0: the patch's top left) */
static void abs_v(double *V, const float *inp, int s, int y0, int x0, int H, int W, int C, const mats *x) {
    const int a = x->a;
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++)
            for (int c = 0; c < C; c++) {
                double v = 0;
                for (int k = 0; k < a; k++)
                    for (int l = 0; l < a; l++) {
                        int yy = y0 + k, xx = x0 + l;
                        if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                        v += fabs(x->BT[i * a + k]) * fabs(inp[(((size_t)s * H + yy) * W + xx) * C + c]) *
                             fabs(x->BT[j * a + l]);
                    }
                V[((size_t)i * a + j) * C + c] = v;
            }
}

/* S of the forward out (n,H,W,OC) = conv(inp (n,H,W,C), w (OC,3,3,C)) + b (b may be NULL) */
static void bound_forward(double *S, const float *inp, const float *w, const float *b, int n, int H, int W, int C,
                          int OC, int m) {
    const mats x = mats_of(m);
    const int a = x.a, A2 = a * a;
    double *Uab = malloc(sizeof(double) * A2 * OC * C), *V = malloc(sizeof(double) * A2 * C);
    double *M = malloc(sizeof(double) * A2 * OC);
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++)
            for (int o = 0; o < OC; o++)
                for (int c = 0; c < C; c++) {
                    double u = 0;
                    for (int k = 0; k < 3; k++)
                        for (int l = 0; l < 3; l++)
                            u += fabs(x.G[i * 3 + k]) * fabs(w[(((size_t)o * 3 + k) * 3 + l) * C + c]) * fabs(x.G[j * 3 + l]);
                    Uab[(((size_t)i * a + j) * OC + o) * C + c] = u;
                }
    for (int s = 0; s < n; s++)
        for (int ty = 0; ty * m < H; ty++)
            for (int tx = 0; tx * m < W; tx++) {
                abs_v(V, inp, s, ty * m - 1, tx * m - 1, H, W, C, &x);
                for (int e = 0; e < A2; e++)
                    for (int o = 0; o < OC; o++) {
                        double acc = 0;
                        for (int c = 0; c < C; c++) acc += Uab[((size_t)e * OC + o) * C + c] * V[(size_t)e * C + c];
                        M[(size_t)e * OC + o] = acc;
                    }
                for (int p = 0; p < m && ty * m + p < H; p++)
                    for (int q = 0; q < m && tx * m + q < W; q++)
                        for (int o = 0; o < OC; o++) {
                            double acc = b ? fabs(b[o]) : 0;
                            for (int i = 0; i < a; i++)
                                for (int j = 0; j < a; j++)
                                    acc += fabs(x.AT[p * a + i]) * M[((size_t)i * a + j) * OC + o] * fabs(x.AT[q * a + j]);
                            S[(((size_t)s * H + ty * m + p) * W + tx * m + q) * OC + o] = acc;
                        }
            }
    free(Uab); free(V); free(M);
}

/* S of the weight gradient dw (OC,3,3,C) */
static void bound_dw(double *S, const float *dout, const float *inp, int n, int H, int W, int C, int OC, int m) {
    const mats x = mats_of(m);
    const int a = x.a, A2 = a * a;
    double *P = calloc((size_t)A2 * OC * C, sizeof(double)), *V = malloc(sizeof(double) * A2 * C);
    double *D = malloc(sizeof(double) * A2 * OC);
    for (int s = 0; s < n; s++)
        for (int ty = 0; ty * m < H; ty++)
            for (int tx = 0; tx * m < W; tx++) {
                abs_v(V, inp, s, ty * m - 1, tx * m - 1, H, W, C, &x);
                for (int i = 0; i < a; i++)   /* |dM| = |A| |dY| |AT| */
                    for (int j = 0; j < a; j++)
                        for (int o = 0; o < OC; o++) {
                            double d = 0;
                            for (int p = 0; p < m && ty * m + p < H; p++)
                                for (int q = 0; q < m && tx * m + q < W; q++)
                                    d += fabs(x.AT[p * a + i]) *
                                         fabs(dout[(((size_t)s * H + ty * m + p) * W + tx * m + q) * OC + o]) *
                                         fabs(x.AT[q * a + j]);
                            D[((size_t)i * a + j) * OC + o] = d;
                        }
                for (int e = 0; e < A2; e++)
                    for (int o = 0; o < OC; o++)
                        for (int c = 0; c < C; c++) P[((size_t)e * OC + o) * C + c] += D[(size_t)e * OC + o] * V[(size_t)e * C + c];
            }
    for (int o = 0; o < OC; o++)
        for (int k = 0; k < 3; k++)
            for (int l = 0; l < 3; l++)
                for (int c = 0; c < C; c++) {
                    double acc = 0;
                    for (int i = 0; i < a; i++)
                        for (int j = 0; j < a; j++)
                            acc += fabs(x.G[i * 3 + k]) * P[(((size_t)i * a + j) * OC + o) * C + c] * fabs(x.G[j * 3 + l]);
                    S[(((size_t)o * 3 + k) * 3 + l) * C + c] = acc;
                }
    free(P); free(V); free(D);
}

/* max over i of |got - ref| / (rel * S + tiny): at most 1 passes */
static double worst(const float *got, const double *ref, const double *S, size_t n, double rel) {
    double most = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (rel * S[i] * (1 + 1e-6) + 1e-300);
        if (!(e <= most)) most = e;   /* NaN sticks */
    }
    return most;
}

/* |got - ref| / (u * sum|x||w|) of the forward's largest error: the direct
 * convolution's yardstick, printed for comparison with other paths */
static double direct_ratio(const float *got, const double *ref, const float *inp, const float *w, int n, int H, int W,
                           int C, int OC) {
    double most = 0;
    for (int s = 0; s < n; s++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int o = 0; o < OC; o++) {
                    size_t i = (((size_t)s * H + y) * W + x) * OC + o;
                    if (ref[i] <= 0) continue;   /* ReLU'd: exact zeros */
                    double t = 0;
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int yy = y + ky - 1, xx = x + kx - 1;
                            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                            for (int c = 0; c < C; c++)
                                t += fabs(w[((size_t)o * 9 + ky * 3 + kx) * C + c] * inp[(((size_t)s * H + yy) * W + xx) * C + c]);
                        }
                    double r = fabs(got[i] - ref[i]) / (U * t + 1e-300);
                    if (r > most) most = r;
                }
    return most;
}

/* One layer C -> OC on n samples of H x W, F(m x m). */
static void test_layer(int m, int n, int H, int W, int C, int OC) {
    const int a = m + 2, T = n * ((H + m - 1) / m) * ((W + m - 1) / m);
    size_t ni = (size_t)n * H * W * C, no = (size_t)n * H * W * OC, nw = (size_t)OC * 9 * C;
    float *inp = malloc(4 * ni), *w = malloc(4 * nw), *wr = malloc(4 * nw), *b = malloc(4 * OC), *out = malloc(4 * no);
    float *dout = malloc(4 * no), *dinp = malloc(4 * ni), *dw = malloc(4 * nw), *db = malloc(4 * OC);
    float *Uf = malloc(4 * (size_t)a * a * OC * C), *Ub = malloc(4 * (size_t)a * a * OC * C);
    float *work = malloc(4 * mr_wino_work_floats(m, C, OC));
    double *pre = malloc(8 * no), *Sf = malloc(8 * no), *rdi = malloc(8 * ni), *Si = malloc(8 * ni);
    double *rdw = malloc(8 * nw), *Sw = malloc(8 * nw), *rdb = malloc(8 * OC), *adb = malloc(8 * OC);
    for (size_t i = 0; i < ni; i++) inp[i] = urand() < 0.4 ? 0.0f : (float)urand();   /* post-ReLU-like */
    for (size_t i = 0; i < nw; i++) w[i] = sym() / sqrtf(9.0f * C);
    for (int i = 0; i < OC; i++) b[i] = 0.1f * sym();
    for (size_t i = 0; i < no; i++) dout[i] = urand() < 0.5 ? 0.0f : sym();
    /* the input gradient's kernel: w rotated, channels swapped (C,3,3,OC), for its S */
    for (int o = 0; o < OC; o++)
        for (int k = 0; k < 9; k++)
            for (int c = 0; c < C; c++) wr[((size_t)c * 9 + 8 - k) * OC + o] = w[((size_t)o * 9 + k) * C + c];
    mr_wino_weights(Uf, w, C, OC, m, 0);
    mr_wino_weights(Ub, w, C, OC, m, 1);
    mr_wino_forward(out, inp, Uf, b, 1, n, H, W, C, OC, m, work);
    memset(dinp, 0xff, 4 * ni);   /* NaN: every element must be written */
    memset(dw, 0xff, 4 * nw);
    memset(db, 0xff, 4 * OC);
    mr_wino_forward(dinp, dout, Ub, NULL, 0, n, H, W, OC, C, m, work);
    mr_wino_backward_weights(dw, db, dout, inp, n, H, W, C, OC, m, work);
    bound_forward(Sf, inp, w, b, n, H, W, C, OC, m);
    bound_forward(Si, dout, wr, NULL, n, H, W, OC, C, m);
    bound_dw(Sw, dout, inp, n, H, W, C, OC, m);
    for (int mirror = 0; mirror < 2; mirror++) {
        ref_forward(pre, NULL, inp, w, b, n, H, W, C, OC, mirror);
        for (size_t i = 0; i < no; i++) pre[i] = pre[i] > 0 ? pre[i] : 0;   /* ReLU: 1-Lipschitz, same bound */
        ref_backward(rdi, NULL, rdw, NULL, rdb, adb, dout, inp, w, n, H, W, C, OC, mirror);
        double ef = worst(out, pre, Sf, no, (C + 4.0 * a + 2) * U);
        double ei = worst(dinp, rdi, Si, ni, (OC + 4.0 * a + 2) * U);
        double ew = worst(dw, rdw, Sw, nw, (T + 4.0 * a + 2) * U);
        double eb = worst(db, rdb, adb, OC, 2 * U);
        if (!mirror) {
            CHECK_MSG(ef <= 1 && ei <= 1 && ew <= 1 && eb <= 1,
                      "F(%d) %d->%d n %d %dx%d: error / bound: forward %.3g, dinp %.3g, dw %.3g, db %.3g", m, C, OC, n,
                      H, W, ef, ei, ew, eb);
            printf("test_conv_winograd: F(%dx%d,3x3) %2d->%2d n=%2d %2dx%-2d error / bound: forward %.2g dinp %.2g "
                   "dw %.2g; forward error / (u sum|x||w|) %.1f\n", m, m, C, OC, n, H, W, ef, ei, ew,
                   direct_ratio(out, pre, inp, w, n, H, W, C, OC));
        } else {   /* a wrong kernel fails each comparison (db does not see the kernel) */
            CHECK_MSG(ef > 1 && ei > 1 && ew > 1, "F(%d) %d->%d n %d: a mirrored kernel passes: %.3g %.3g %.3g", m, C,
                      OC, n, ef, ei, ew);
        }
    }
    free(inp); free(w); free(wr); free(b); free(out); free(dout); free(dinp); free(dw); free(db); free(Uf); free(Ub);
    free(work); free(pre); free(Sf); free(rdi); free(Si); free(rdw); free(Sw); free(rdb); free(adb);
}

/* The same calls with 1 and 2 OpenMP threads outside a parallel region and
 * on workspace 1 inside one: the same bits. Through the layer API
 * (mr_conv_wino_*) with an arena, as policy.c uses it. */
static void test_threads(int m) {
    const int H = 11, W = 11, n = 32, ch[4] = {2, 32, 64, 64}, L = 3;
    mr_arena ar = {0};
    mr_conv_wino d;
    mr_conv_wino_layout(&d, ch, L, H, W, 2, m, &ar);
    CHECK(d.work == NULL && d.uf[1] == NULL);   /* planning: sizes only */
    size_t planned = ar.size;
    CHECK(mr_arena_commit(&ar) == 0);
    mr_conv_wino_layout(&d, ch, L, H, W, 2, m, &ar);
    CHECK(ar.used == planned && d.work && d.uf[2] && d.ub[2]);
    const int l = 2, C = ch[l], OC = ch[l + 1];
    size_t ni = (size_t)n * H * W * C, no = (size_t)n * H * W * OC, nw = (size_t)OC * 9 * C;
    float *inp = malloc(4 * ni), *w = malloc(4 * nw), *b = malloc(4 * OC), *dout = malloc(4 * no);
    float *out[3], *dinp[3], *dw[3], *db[3];
    for (size_t i = 0; i < ni; i++) inp[i] = (float)urand();
    for (size_t i = 0; i < nw; i++) w[i] = sym() / 24;
    for (int i = 0; i < OC; i++) b[i] = 0.1f * sym();
    for (size_t i = 0; i < no; i++) dout[i] = sym();
    const float *wl[3] = {NULL, w, w};
    mr_conv_wino_load_forward(&d, wl);
    mr_conv_wino_load_backward(&d, wl);
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(4 * no); dinp[k] = malloc(4 * ni); dw[k] = malloc(4 * nw); db[k] = malloc(4 * OC);
        if (k < 2) {
            omp_set_num_threads(k + 1);
            mr_conv_wino_forward(&d, 0, l, out[k], inp, b, n);
            mr_conv_wino_backward(&d, 0, l, dinp[k], dw[k], db[k], dout, inp, n);
            CHECK(omp_get_max_threads() == k + 1);   /* restored */
        } else {
            omp_set_num_threads(2);
            #pragma omp parallel num_threads(2)
            if (omp_get_thread_num() == 1) {
                mr_conv_wino_forward(&d, 1, l, out[k], inp, b, n);
                mr_conv_wino_backward(&d, 1, l, dinp[k], dw[k], db[k], dout, inp, n);
            }
        }
    }
    for (int k = 1; k < 3; k++)
        CHECK_MSG(!memcmp(out[0], out[k], 4 * no) && !memcmp(dinp[0], dinp[k], 4 * ni) &&
                      !memcmp(dw[0], dw[k], 4 * nw) && !memcmp(db[0], db[k], 4 * OC),
                  "F(%d): run %d differs from the 1-thread run", m, k);
    /* a load keeps its transform only for the same bits: one weight changed,
     * both transforms are those of the new weights (computed here on 1 and
     * 2 threads: the same bits) */
    const size_t nu = (size_t)(m + 2) * (m + 2) * C * OC;
    float *uf = malloc(4 * nu), *ub = malloc(4 * nu), *uf2 = malloc(4 * nu);
    w[nw / 2] += 0.25f;
    mr_conv_wino_load_forward(&d, wl);
    mr_conv_wino_load_backward(&d, wl);
    omp_set_num_threads(1);
    mr_wino_weights(uf, w, C, OC, m, 0);
    mr_wino_weights(ub, w, C, OC, m, 1);
    omp_set_num_threads(2);
    mr_wino_weights(uf2, w, C, OC, m, 0);
    CHECK_MSG(!memcmp(d.uf[l], uf, 4 * nu) && !memcmp(d.ub[l], ub, 4 * nu),
              "F(%d): a load after a weight changed kept the old transform", m);
    CHECK_MSG(!memcmp(uf, uf2, 4 * nu), "F(%d): the weights' transform differs on 2 threads", m);
    mr_conv_wino_load_forward(&d, wl);   /* the same bits again: kept, still right */
    CHECK(!memcmp(d.uf[l], uf, 4 * nu));
    free(uf); free(ub); free(uf2);
    for (int k = 0; k < 3; k++) { free(out[k]); free(dinp[k]); free(dw[k]); free(db[k]); }
    free(inp); free(w); free(b); free(dout);
    mr_arena_release(&ar);
}

/* The multiply-add counts: F(2x2) at 11x11 is 16 * 36 products per (C, OC)
 * pair, F(4x4) 36 * 9, F(6x6) 64 * 4, direct 9 * 121. */
static void test_macs(void) {
    double p2, t2, p4, t4, p6, t6;
    mr_conv_wino_macs(11, 11, 32, 64, 2, &p2, &t2);
    mr_conv_wino_macs(11, 11, 32, 64, 4, &p4, &t4);
    mr_conv_wino_macs(11, 11, 32, 64, 6, &p6, &t6);
    CHECK(p2 == 16.0 * 36 * 32 * 64 && p4 == 36.0 * 9 * 32 * 64 && p6 == 64.0 * 4 * 32 * 64);
    CHECK(t2 > 0 && t4 > 0 && t6 > 0 && t2 < p2 && t4 < p4 && t6 < p6);
}

int main(void) {
    check_seed(0x3149a0ce0001ULL);
    for (int m = 2; m <= 6; m += 2) {
        test_layer(m, 32, 11, 11, 32, 64);   /* the reference net's layers */
        test_layer(m, 32, 11, 11, 64, 64);
        test_layer(m, 32, 11, 11, 16, 32);   /* the small net's */
        test_layer(m, 5, 7, 9, 6, 7);        /* odd: maps, channels, chunk */
        test_layer(m, 3, 3, 2, 4, 8);        /* a map smaller than one tile */
        test_threads(m);
    }
    test_macs();
    return check_report("test_conv_winograd");
}

/*
 * conv_ref.h - the tests' independent reference for a 3x3 pad-1 convolution:
 * the direct sums in float64, forward and both gradients, with the sums of
 * |terms| the error bounds are stated in (test_conv_dnnl.c,
 * test_conv_winograd.c).
 */
#ifndef MR_SPEC_CONV_REF_H
#define MR_SPEC_CONV_REF_H

#include <math.h>
#include <stddef.h>
#include <string.h>

/* float64 3x3 pad-1 conv of inp (n,H,W,C) with w (OC,3,3,C): pre (n,H,W,OC)
 * = conv + b (b may be NULL), abs = sum of |terms| (abs_ may be NULL).
 * mirror: taps flipped (a wrong kernel). */
static void ref_forward(double *pre, double *abs_, const float *inp, const float *w, const float *b, int n, int H,
                        int W, int C, int OC, int mirror) {
    for (int s = 0; s < n; s++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int o = 0; o < OC; o++) {
                    double acc = b ? b[o] : 0.0, ab = b ? fabs(b[o]) : 0.0;
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int yy = y + ky - 1, xx = x + kx - 1;
                            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                            int tap = mirror ? (2 - ky) * 3 + (2 - kx) : ky * 3 + kx;
                            for (int c = 0; c < C; c++) {
                                double t = (double)w[((size_t)o * 9 + tap) * C + c] *
                                           inp[(((size_t)s * H + yy) * W + xx) * C + c];
                                acc += t;
                                ab += fabs(t);
                            }
                        }
                    size_t i = (((size_t)s * H + y) * W + x) * OC + o;
                    pre[i] = acc;
                    if (abs_) abs_[i] = ab;
                }
}

/* float64 gradients: dinp (n,H,W,C), dw (OC,9C), db (OC), and their sums of |terms|
 * (adinp and adw may be NULL). */
static void ref_backward(double *dinp, double *adinp, double *dw, double *adw, double *db, double *adb,
                         const float *dout, const float *inp, const float *w, int n, int H, int W, int C, int OC,
                         int mirror) {
    size_t ni = (size_t)n * H * W * C, nw = (size_t)OC * 9 * C;
    memset(dinp, 0, sizeof(double) * ni); if (adinp) memset(adinp, 0, sizeof(double) * ni);
    memset(dw, 0, sizeof(double) * nw); if (adw) memset(adw, 0, sizeof(double) * nw);
    memset(db, 0, sizeof(double) * OC); memset(adb, 0, sizeof(double) * OC);
    for (int s = 0; s < n; s++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int o = 0; o < OC; o++) {
                    double g = dout[(((size_t)s * H + y) * W + x) * OC + o];
                    db[o] += g;
                    adb[o] += fabs(g);
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int yy = y + ky - 1, xx = x + kx - 1;
                            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                            int tap = mirror ? (2 - ky) * 3 + (2 - kx) : ky * 3 + kx;
                            for (int c = 0; c < C; c++) {
                                size_t ii = (((size_t)s * H + yy) * W + xx) * C + c, wi = ((size_t)o * 9 + tap) * C + c;
                                double tw = g * inp[ii], ti = g * w[wi];
                                dw[wi] += tw;
                                if (adw) adw[wi] += fabs(tw);
                                dinp[ii] += ti;
                                if (adinp) adinp[ii] += fabs(ti);
                            }
                        }
                }
}

#endif

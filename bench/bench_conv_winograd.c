/*
 * bench_conv_winograd.c - moonrl's Winograd convolutions (conv_winograd.c,
 * F(2x2,3x3), F(4x4,3x3) and F(6x6,3x3)) against oneDNN's direct ones (conv_dnnl.c) as
 * policy.c calls them: one chunk per call on one thread, 11 x 11 maps,
 * NHWC fp32, the layer shapes of the reference net (32->64, 64->64) and the
 * small one (16->32). Forward = bias + ReLU; backward = input gradient +
 * weight and bias gradients. Weight transforms / reorders are per pass, not
 * per chunk, and are left out. Best of R rounds of `chunks` calls, the
 * candidates interleaved round by round so a busy machine slows all alike.
 *
 *   OMP_NUM_THREADS=1 build/bench_conv_winograd [--chunk 32] [--rounds 15]
 *
 * What it is not: a test (test_conv_winograd.c checks the results).
 */
#include "conv_dnnl.h"
#include "conv_winograd.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static float *rnd(size_t n) {
    float *p = malloc(n * sizeof(float) + 64);
    for (size_t i = 0; i < n; i++) p[i] = (float)rand() / RAND_MAX - 0.5f;
    return p;
}

static void run(int n, int C, int OC, int rounds) {
    const int H = 11, W = 11, chunks = 8, ch[3] = {2, C, OC};
    size_t ni = (size_t)n * H * W * C, no = (size_t)n * H * W * OC, nw = (size_t)OC * 9 * C;
    float *in = rnd(ni), *out = rnd(no), *dout = rnd(no), *din = rnd(ni), *w = rnd(nw), *b = rnd(OC), *dw = rnd(nw),
          *db = rnd(OC);
    const float *wl[2] = {NULL, w};
    mr_arena ad = {0}, aw[3] = {{0}};
    mr_conv_dnnl *d = NULL;
    mr_conv_wino cw[3];
    const int ms[3] = {2, 4, 6};
    char why[256];
    mr_conv_dnnl_layout(&d, ch, 2, H, W, n, 1, 0, &ad, why, sizeof why);
    mr_arena_commit(&ad);
    if (mr_conv_dnnl_layout(&d, ch, 2, H, W, n, 1, 0, &ad, why, sizeof why)) {
        printf("oneDNN refused: %s\n", why);
        return;
    }
    for (int k = 0; k < 3; k++) {
        mr_conv_wino_layout(&cw[k], ch, 2, H, W, 1, ms[k], &aw[k]);
        mr_arena_commit(&aw[k]);
        mr_conv_wino_layout(&cw[k], ch, 2, H, W, 1, ms[k], &aw[k]);
        mr_conv_wino_load_forward(&cw[k], wl);
        mr_conv_wino_load_backward(&cw[k], wl);
    }
    mr_conv_dnnl_load_forward(d, wl);
    mr_conv_dnnl_load_backward(d, wl);
    double tf[4] = {1e9, 1e9, 1e9, 1e9}, tb[4] = {1e9, 1e9, 1e9, 1e9};
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 4; k++) {
            double t0 = now();
            for (int c = 0; c < chunks; c++) {
                if (k == 0) mr_conv_dnnl_forward(d, 0, 1, out, in, b);
                else mr_conv_wino_forward(&cw[k - 1], 0, 1, out, in, b, n);
            }
            double t1 = now();
            for (int c = 0; c < chunks; c++) {
                if (k == 0) mr_conv_dnnl_backward(d, 0, 1, din, dw, db, dout, in);
                else mr_conv_wino_backward(&cw[k - 1], 0, 1, din, dw, db, dout, in, n);
            }
            double t2 = now();
            if ((t1 - t0) / chunks < tf[k]) tf[k] = (t1 - t0) / chunks;
            if ((t2 - t1) / chunks < tb[k]) tb[k] = (t2 - t1) / chunks;
        }
    printf("n=%d %2d->%2d  ms per chunk  fwd: oneDNN %.3f", n, C, OC, tf[0] * 1e3);
    for (int k = 1; k < 4; k++) printf("  F%d %.3f (%.2fx)", ms[k - 1], tf[k] * 1e3, tf[0] / tf[k]);
    printf(" | bwd: oneDNN %.3f", tb[0] * 1e3);
    for (int k = 1; k < 4; k++) printf("  F%d %.3f (%.2fx)", ms[k - 1], tb[k] * 1e3, tb[0] / tb[k]);
    printf(" | MMAC/sample direct %.2f", H * W * 9.0 * C * OC / 1e6);
    for (int k = 0; k < 3; k++) {
        double p, x;
        mr_conv_wino_macs(H, W, C, OC, ms[k], &p, &x);
        printf(" F%d %.2f+%.2f", ms[k], p / 1e6, x / 1e6);
    }
    printf("  [%s]\n", mr_conv_dnnl_impl(d, 1));
    mr_conv_dnnl_free(d);
    mr_arena_release(&ad);
    for (int k = 0; k < 3; k++) mr_arena_release(&aw[k]);
    free(in); free(out); free(dout); free(din); free(w); free(b); free(dw); free(db);
}

int main(int argc, char **argv) {
    int chunk = 32, rounds = 15;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--chunk")) chunk = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    }
    omp_set_num_threads(1);
    run(chunk, 32, 64, rounds);
    run(chunk, 64, 64, rounds);
    run(chunk, 16, 32, rounds);
    return 0;
}

/*
 * test_conv_dnnl.c - the oneDNN convolutions (conv_dnnl.c) and the first
 * layer computed from the codes (nn.c's mr_conv3x3_codes_*) against a
 * float64 direct convolution written here (forward with bias + ReLU, input,
 * weight and bias gradients), on random inputs.
 *
 * Tolerance: each checked value is a float32 sum of K rounded products
 * (K = 9C+1 for an output, 9*OC for an input gradient, n*H*W for a weight or
 * bias gradient). Whatever order oneDNN sums in, the error of such a sum is
 * at most about K*u*sum|terms| (u = 2^-24, the recursive-summation bound
 * gamma_K); the test allows (K+2)*u*sum|terms| per element, sum|terms| from
 * the float64 reference. To show the bound is tight enough to catch a real
 * mistake, every comparison is also made against a reference with the
 * kernel mirrored (taps (ky,kx) -> (2-ky,2-kx)), which must fail it.
 *
 * bf16 (on a CPU with AVX512-BF16 or AMX): inp, w and dout are rounded to
 * bf16 (relative error at most B = 2^-8 each) and the products summed in
 * fp32, so each term of a sum is off by at most (2B + B^2)|term| (a product
 * of two rounded operands; a db term has one, less) before the fp32 sum
 * adds its (K+2)u: the bound per element is ((K+2)u + 2B + B^2) sum|terms|,
 * against the same float64 reference of the unrounded operands. The
 * mirrored kernel must fail that bound too.
 * The policy-level checks (double-precision network, gradients against
 * central differences, tail chunks, 1 vs 2 threads bit for bit) run on this
 * path in test_policy.c.
 */
#include "check.h"
#include "conv_ref.h"
#include "conv_dnnl.h"
#include "nn.h"
#include "obs_codes.h"
#include <math.h>
#include <stdint.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define U 5.9604644775390625e-8   /* 2^-24 */
#define B (1.0 / 256)              /* 2^-8: bf16's relative rounding error */

static float sym(void) { return (float)(2.0 * urand() - 1.0); }


static int g_bf16;   /* the layer under test runs in bf16: the bound adds 2B + B^2 per term */

/* max over i of |got - ref| / (((K+2) u [+ 2B + B^2]) abs + tiny): < 1 passes */
static double worst(const float *got, const double *ref, const double *abs_, size_t n, double K) {
    double m = 0, rel = (K + 2) * U + (g_bf16 ? 2 * B + B * B : 0);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (rel * abs_[i] + 1e-30);
        if (e > m) m = e;
    }
    return m;
}

/* One layer C -> OC through oneDNN on workspace t of 2, chunk n, in fp32
 * or bf16. Returns the largest error / bound seen (bf16's tightness). */
static double test_layer(int n, int C, int OC, int bf16) {
    const int H = 11, W = 11;
    int ch[3] = {2, C, OC};
    mr_arena a = {0};
    mr_conv_dnnl *d = NULL;
    char why[256];
    double most = 0;
    g_bf16 = bf16;
    CHECK(mr_conv_dnnl_layout(&d, ch, 2, H, W, n, 2, bf16, &a, why, sizeof why) == 0 && d == NULL);
    size_t planned = a.size;
    CHECK(mr_arena_commit(&a) == 0);
    int rc = mr_conv_dnnl_layout(&d, ch, 2, H, W, n, 2, bf16, &a, why, sizeof why);
    CHECK_MSG(rc == 0 && d != NULL, "%d->%d chunk %d bf16 %d: %s", C, OC, n, bf16, why);
    CHECK(a.used == planned);
    if (!d) return most;
    CHECK(mr_conv_dnnl_is_bf16(d) == bf16);
    if (bf16) CHECK_MSG(strstr(mr_conv_dnnl_impl(d, 1), "bf16") || strstr(mr_conv_dnnl_impl(d, 1), "amx"),
                        "bf16 layer's kernels: %s", mr_conv_dnnl_impl(d, 1));
    size_t ni = (size_t)n * H * W * C, no = (size_t)n * H * W * OC, nw = (size_t)OC * 9 * C;
    float *inp = malloc(4 * ni), *w = malloc(4 * nw), *b = malloc(4 * OC), *out = malloc(4 * no);
    float *dout = malloc(4 * no), *dinp = malloc(4 * ni), *dw = malloc(4 * nw), *db = malloc(4 * OC);
    double *pre = malloc(8 * no), *apre = malloc(8 * no), *relu = malloc(8 * no);
    double *rdi = malloc(8 * ni), *adi = malloc(8 * ni), *rdw = malloc(8 * nw), *adw = malloc(8 * nw);
    double rdb[1024], adb[1024];
    for (size_t i = 0; i < ni; i++) inp[i] = urand() < 0.4 ? 0.0f : (float)urand();   /* post-ReLU-like */
    for (size_t i = 0; i < nw; i++) w[i] = sym() / sqrtf(9.0f * C);
    for (int i = 0; i < OC; i++) b[i] = 0.1f * sym();
    for (size_t i = 0; i < no; i++) dout[i] = urand() < 0.5 ? 0.0f : sym();
    const float *wl[2] = {NULL, w};
    for (int mirror = 0; mirror < 2; mirror++) {
        mr_conv_dnnl_load_forward(d, wl);
        mr_conv_dnnl_forward(d, 1, 1, out, inp, b);   /* workspace 1: not just the first */
        ref_forward(pre, apre, inp, w, b, n, H, W, C, OC, mirror);
        for (size_t i = 0; i < no; i++) relu[i] = pre[i] > 0 ? pre[i] : 0;   /* 1-Lipschitz: same bound */
        double ef = worst(out, relu, apre, no, 9.0 * C + 1);
        mr_conv_dnnl_load_backward(d, wl);
        memset(dinp, 0xff, 4 * ni);   /* NaN: every element must be written */
        memset(dw, 0xff, 4 * nw);
        memset(db, 0xff, 4 * OC);
        mr_conv_dnnl_backward(d, 1, 1, dinp, dw, db, dout, inp);
        ref_backward(rdi, adi, rdw, adw, rdb, adb, dout, inp, w, n, H, W, C, OC, mirror);
        double ei = worst(dinp, rdi, adi, ni, 9.0 * OC), ew = worst(dw, rdw, adw, nw, (double)n * H * W);
        double eb = worst(db, rdb, adb, OC, (double)n * H * W);
        if (!mirror) {
            CHECK_MSG(ef < 1 && ei < 1 && ew < 1 && eb < 1,
                      "%d->%d chunk %d bf16 %d: error / bound: forward %.3g, dinp %.3g, dw %.3g, db %.3g", C, OC, n,
                      bf16, ef, ei, ew, eb);
            most = fmax(fmax(ef, ei), fmax(ew, eb));
        } else {   /* a wrong kernel is caught by each comparison (db does not see the kernel) */
            CHECK_MSG(ef > 1 && ei > 1 && ew > 1, "%d->%d chunk %d bf16 %d: a mirrored kernel passes: %.3g %.3g %.3g",
                      C, OC, n, bf16, ef, ei, ew);
        }
    }
    if (bf16) {   /* a NaN in dout (any payload) reaches dinp: bf16's rounding must not turn it into -0 */
        const uint32_t nan_bits = 0x7fffffffu;
        float saved = dout[0];
        memcpy(&dout[0], &nan_bits, 4);
        mr_conv_dnnl_backward(d, 0, 1, dinp, NULL, NULL, dout, inp);
        int nans = 0;
        for (size_t i = 0; i < ni; i++) nans += dinp[i] != dinp[i];
        CHECK_MSG(nans > 0, "%d->%d chunk %d bf16: a NaN in dout vanished", C, OC, n);
        dout[0] = saved;
    }
    /* dinp alone (no dw/db) leaves dw untouched */
    memset(dw, 0, 4 * nw);
    mr_conv_dnnl_backward(d, 0, 1, dinp, NULL, NULL, dout, inp);
    int zero = 1;
    for (size_t i = 0; i < nw; i++) zero &= dw[i] == 0.0f;
    CHECK(zero);
    CHECK(strstr(mr_conv_dnnl_impl(d, 1), "/") != NULL);
    mr_conv_dnnl_free(d);
    mr_arena_release(&a);
    free(inp); free(w); free(b); free(out); free(dout); free(dinp); free(dw); free(db);
    free(pre); free(apre); free(relu); free(rdi); free(adi); free(rdw); free(adw);
    g_bf16 = 0;
    return most;
}

/* The first layer from the codes over C channels, every expansion (the
 * proxies with foraging's C = 2), any n (tails included). For C != 2 the
 * reference's input is the one-hot expansion written here (code k in
 * 1 .. C sets channel k-1; 0 and codes above C none), not the engine's. */
static void test_codes(int n, int OC, int proxy, double density, int C) {
    const int H = 11, W = 11, HW = H * W;
    size_t nx = (size_t)n * HW * C, no = (size_t)n * HW * OC, nw = (size_t)OC * 9 * C;
    uint8_t *codes = malloc((size_t)n * HW);
    float *x = malloc(4 * nx), *w = malloc(4 * nw), *b = malloc(4 * OC), *out = malloc(4 * no), *dout = malloc(4 * no);
    float *dw = malloc(4 * nw), *db = malloc(4 * OC), *tab = malloc(4 * (9 * C + 1) * OC);
    double *acc = malloc(8 * (9 * C + 2) * OC), *pre = malloc(8 * no), *apre = malloc(8 * no), *relu = malloc(8 * no);
    double *rdi = malloc(8 * nx), *adi = malloc(8 * nx), *rdw = malloc(8 * nw), *adw = malloc(8 * nw);
    double rdb[1024], adb[1024];
    /* density: the share of non-empty cells (ENV_SPEC's grids: 0.8-3%, so
     * most windows hold none; the first of several samples none at all) */
    for (int i = 0; i < n * HW; i++) {
        double u = urand() / density;   /* codes 1 .. C alike, 10% C + 1: unknown, reads as empty */
        codes[i] = (n > 1 && i < HW) || u >= 1 ? 0 : u < 0.9 ? 1 + (int)(u / 0.9 * C) : C + 1;
    }
    if (C == 2) {
        mr_obs_expand_forward(x, codes, n, HW, C, proxy);   /* the reference reads the expansion (checked in test_nn) */
    } else {
        for (size_t i = 0; i < (size_t)n * HW; i++)
            for (int ch = 0; ch < C; ch++) x[i * C + ch] = codes[i] == ch + 1 ? 1.0f : 0.0f;
        float *xe = malloc(4 * nx);   /* and the engine's expansion agrees */
        mr_obs_expand_forward(xe, codes, n, HW, C, proxy);
        CHECK_MSG(!memcmp(xe, x, 4 * nx), "codes C=%d: mr_obs_expand_forward is not the one-hot expansion", C);
        free(xe);
    }
    for (size_t i = 0; i < nw; i++) w[i] = sym() / sqrtf(9.0f * C);
    for (int i = 0; i < OC; i++) b[i] = 0.1f * sym();
    for (size_t i = 0; i < no; i++) dout[i] = urand() < 0.5 ? 0.0f : sym();
    mr_conv3x3_codes_relu_forward(out, tab, codes, w, b, n, H, W, C, OC, proxy);
    for (int i = 0; i < OC; i++) db[i] = 1.0f;   /* accumulates: the reference adds 1 */
    for (size_t i = 0; i < nw; i++) dw[i] = 0.0f;
    mr_conv3x3_codes_backward(dw, db, acc, dout, NULL, codes, n, H, W, C, OC, proxy);
    for (int i = 0; i < OC; i++) db[i] -= 1.0f;
    {   /* through the ReLU of y (zeros, negatives, a NaN): the bits of its
         * mr_relu_backward first */
        float *y = malloc(4 * no), *dm = malloc(4 * no), *dw1 = calloc(nw, 4), *dw2 = calloc(nw, 4);
        float *db1 = calloc(OC, 4), *db2 = calloc(OC, 4);
        for (size_t i = 0; i < no; i++) y[i] = urand() < 0.3 ? 0.0f : sym();
        y[no / 2] = NAN;
        mr_relu_backward(dm, dout, y, no);
        mr_conv3x3_codes_backward(dw1, db1, acc, dm, NULL, codes, n, H, W, C, OC, proxy);
        mr_conv3x3_codes_backward(dw2, db2, acc, dout, y, codes, n, H, W, C, OC, proxy);
        CHECK_MSG(!memcmp(dw1, dw2, 4 * nw) && !memcmp(db1, db2, 4 * OC),
                  "codes n=%d OC=%d: the gradients through y differ from those of y's ReLU backward first", n, OC);
        free(y); free(dm); free(dw1); free(dw2); free(db1); free(db2);
    }
    for (int mirror = 0; mirror < 2; mirror++) {
        ref_forward(pre, apre, x, w, b, n, H, W, C, OC, mirror);
        for (size_t i = 0; i < no; i++) relu[i] = pre[i] > 0 ? pre[i] : 0;
        ref_backward(rdi, adi, rdw, adw, rdb, adb, dout, x, w, n, H, W, C, OC, mirror);
        for (int i = 0; i < OC; i++) adb[i] += 2.0;   /* the +1 -1 round trip */
        double ef = worst(out, relu, apre, no, 9 * C + 1), ew = worst(dw, rdw, adw, nw, (double)n * HW);
        double eb = worst(db, rdb, adb, OC, (double)n * HW);
        if (!mirror)
            CHECK_MSG(ef < 1 && ew < 1 && eb < 1, "codes n=%d C=%d OC=%d proxy=%d: error / bound: out %.3g dw %.3g "
                      "db %.3g", n, C, OC, proxy, ef, ew, eb);
        else
            CHECK_MSG(ef > 1 && ew > 1, "codes n=%d C=%d OC=%d proxy=%d: a mirrored kernel passes: %.3g %.3g", n, C,
                      OC, proxy, ef, ew);
    }
    free(codes); free(x); free(w); free(b); free(out); free(dout); free(dw); free(db); free(tab); free(acc);
    free(pre); free(apre); free(relu); free(rdi); free(adi); free(rdw); free(adw);
}

int main(void) {
    check_seed(0xd1d1c0de0001ULL);
    omp_set_num_threads(2);
    /* the reference net's layers, the small net's, the bitcompat configs' tiny ones; chunk 32 and odd ones */
    const int shapes[][3] = {{32, 32, 64}, {32, 64, 64}, {32, 16, 32}, {3, 4, 8}, {5, 6, 7}};
    for (int i = 0; i < 5; i++) test_layer(shapes[i][0], shapes[i][1], shapes[i][2], 0);
    /* bf16 where this CPU has it (oneDNN's own answer); elsewhere the layout
     * must refuse it with a reason, never fall back silently */
    if (mr_bf16_isa()) {
        double most = 0;
        for (int i = 0; i < 5; i++) most = fmax(most, test_layer(shapes[i][0], shapes[i][1], shapes[i][2], 1));
        /* the bf16 bound is not so loose that fp32-exact results would be
         * needed to fail it: bf16's rounding shows as a visible share of it */
        CHECK_MSG(most > 1e-3, "bf16 layers sit at %.3g of the bound: are they bf16 at all?", most);
        printf("test_conv_dnnl: bf16 (%s): largest error / bound %.3g\n", mr_bf16_isa(), most);
    } else {
        int ch[3] = {2, 32, 64};
        mr_arena a = {0};
        mr_conv_dnnl *d = NULL;
        char why[256] = "";
        CHECK(mr_conv_dnnl_layout(&d, ch, 2, 11, 11, 32, 1, 1, &a, why, sizeof why) == -1 && !d && why[0]);
        printf("test_conv_dnnl: no bf16 on this CPU (%s)\n", why);
    }
    for (int proxy = 0; proxy < 3; proxy++) {
        for (int sparse = 0; sparse < 2; sparse++) {
            const double density = sparse ? 0.03 : 0.4;
            test_codes(32, 32, proxy, density, 2);
            test_codes(7, 16, proxy, density, 2);
            test_codes(1, 5, proxy, 0.4, 2);
        }
    }
    /* more channels (one-hot codes 1 .. C: snake's 4), sparse and dense, tails */
    for (int sparse = 0; sparse < 2; sparse++) {
        const double density = sparse ? 0.03 : 0.4;
        test_codes(32, 32, MR_EXPAND_TRUTH, density, 4);
        test_codes(7, 16, MR_EXPAND_TRUTH, density, 3);
        test_codes(3, 8, MR_EXPAND_TRUTH, density, 1);
        test_codes(5, 12, MR_EXPAND_TRUTH, density, 7);
    }
    return check_report("test_conv_dnnl");
}

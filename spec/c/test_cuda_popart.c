/*
 * test_cuda_popart.c - mean/std, advantage normalisation and PopArt on the
 * device (kernels/ppo_loss.cu) against the CPU reference
 * (src/engine/cpu/ppo.c: mr_mean_std, mr_normalize, mr_popart_update).
 *
 * Always (CPU): the MR_HD elements the kernels and ppo.c both run
 * (shared/ppo_loss_math.h), in the kernels' exact reduction order
 * (mr_mean_std_emulate, mr_normalize_emulate, mr_popart_emulate), against
 * ppo.c's order: mean/std and normalisation over many sizes; PopArt over a
 * sequence of updates (beta floor, n = 1, constant returns, no Adam state)
 * with the output invariance checked directly; the control block's setup.
 * In a CUDA build: argument checks before any launch and, without a GPU, the
 * error a launch gives.
 * With a GPU: the mean/std reduction and the normalised values bit for bit
 * against the emulation, and a queued sequence of PopArt updates read back
 * only at the end (batch statistics bitwise, the layer against ppo.c).
 * Without a GPU the GPU part prints "skipped: no GPU" and counts as passed.
 */
#include "check.h"
#include "ppo.h"
#include "ppo_loss_cuda.h"
#include "gpu_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ CPU part */

static void test_constants_and_setup(void) {
    CHECK(MR_STATS_CHUNK % MR_RED_THREADS == 0);
    CHECK(MR_ADV_EPS == 1e-8 && MR_POPART_MIN_STD == 1e-4);
    mr_popart p = {3.5, 2.25, 17.0}, q;
    mr_popart_ctl pc;
    mr_popart_ctl_set(&pc, &p, 0.001);
    CHECK(pc.mean == 3.5 && pc.std == 2.25 && pc.count == 17.0 && pc.beta_min == 0.001 && pc.scale == 1.0);
    mr_popart_ctl_get(&pc, &q);
    CHECK(q.mean == p.mean && q.std == p.std && q.count == p.count);
}

static void test_mean_std_and_normalize(void) {
    const int64_t sizes[] = {1, 2, 3, 255, 4095, 4096, 4097, 100003};
    for (int k = 0; k < 8; k++) {
        const int64_t n = sizes[k];
        float *x = frand((size_t)n, 997.0, 1003.0);   /* an offset: the two-pass form matters */
        double *partials = malloc(sizeof(double) * (size_t)(n / MR_STATS_CHUNK + 1));
        double emu[2], mean, sd;
        mr_mean_std_emulate(x, n, partials, emu);
        mr_mean_std(x, (size_t)n, &mean, &sd);
        CHECK_NEAR(emu[0], mean, 0.0, 1e-14);
        CHECK_NEAR(emu[1], sd, 0.0, 1e-12);
        if (n == 1) CHECK(emu[1] == 0.0 && sd == 0.0);
        if (n > 1000) CHECK(sd > 1.6 && sd < 1.85);   /* U(-3, 3): sqrt(3) */
        float *a = malloc(4 * (size_t)n), *b = malloc(4 * (size_t)n);
        memcpy(a, x, 4 * (size_t)n);
        memcpy(b, x, 4 * (size_t)n);
        mr_normalize_emulate(a, n, partials, emu);
        mr_normalize(b, (size_t)n, &mean, &sd);
        CHECK_MSG(check_relerr(a, b, (size_t)n, 1e-30) < 1e-6, "normalize n %lld err %g", (long long)n,
                  check_relerr(a, b, (size_t)n, 1e-30));
        if (n == 1) CHECK(a[0] == 0.0f);
        if (n > 1000) {   /* normalised: mean 0, std 1 */
            double m2, s2;
            mr_mean_std(a, (size_t)n, &m2, &s2);
            CHECK_NEAR(m2, 0.0, 1e-6, 0);
            CHECK_NEAR(s2, 1.0, 0.0, 1e-6);
        }
        free(x); free(partials); free(a); free(b);
    }
}

/* A sequence of PopArt updates: the emulation against mr_popart_update. */
typedef struct layer {
    int k;
    float *w, b, *mw, *vw, mb, vb;
} layer;
static void layer_make(layer *L, int k) {
    L->k = k;
    L->w = frand((size_t)k, -0.1, 0.1);
    L->mw = frand((size_t)k, -1e-3, 1e-3);
    L->vw = frand((size_t)k, 0, 1e-6);
    L->b = 0.03f;
    L->mb = 2e-4f;
    L->vb = 3e-7f;
}
static void layer_copy(layer *d, const layer *s) {
    layer_make(d, s->k);
    memcpy(d->w, s->w, 4 * (size_t)s->k);
    memcpy(d->mw, s->mw, 4 * (size_t)s->k);
    memcpy(d->vw, s->vw, 4 * (size_t)s->k);
    d->b = s->b; d->mb = s->mb; d->vb = s->vb;
}
static void layer_free(layer *L) { free(L->w); free(L->mw); free(L->vw); }
static void layer_cmp(const layer *a, const layer *b, const char *what, int step) {
    const double ew = check_relerr(a->w, b->w, (size_t)a->k, 1e-30), em = check_relerr(a->mw, b->mw, (size_t)a->k, 1e-30),
                 ev = check_relerr(a->vw, b->vw, (size_t)a->k, 1e-30);
    CHECK_MSG(ew < 1e-6 && em < 1e-6 && ev < 1e-6, "%s step %d: w %g m %g v %g", what, step, ew, em, ev);
    CHECK_MSG(check_relerr(&a->b, &b->b, 1, 1e-6) < 1e-6 && check_relerr(&a->mb, &b->mb, 1, 1e-30) < 1e-6 &&
              check_relerr(&a->vb, &b->vb, 1, 1e-30) < 1e-6, "%s step %d: b %.9g vs %.9g, m %g vs %g, v %g vs %g", what,
              step, a->b, b->b, a->mb, b->mb, a->vb, b->vb);
}
/* The critic's output mean + std * (w.h + b) for a fixed h, in double. */
static double layer_out(const layer *L, double mean, double sd, const float *h) {
    double s = L->b;
    for (int i = 0; i < L->k; i++) s += (double)L->w[i] * h[i];
    return mean + sd * s;
}

/* The sequence: n of each update's returns, their centre and spread. */
#define POPART_STEPS 7
static const int64_t popart_n[POPART_STEPS] = {3000, 3000, 1, 500, 4097, 2, 24576};
static const double popart_mid[POPART_STEPS] = {5.0, -2.0, 40.0, 1.0, 0.5, 3.0, 2.0};
static const double popart_half[POPART_STEPS] = {3.0, 0.5, 0.0, 0.0, 10.0, 1.0, 4.0};   /* 0: constant returns */

static float *popart_returns(int s) {
    float *r = frand((size_t)popart_n[s], popart_mid[s] - popart_half[s], popart_mid[s] + popart_half[s]);
    return r;
}

static void test_popart_sequence(void) {
    const int k = 512;
    for (int noadam = 0; noadam < 2; noadam++) {
        layer ref, emu;
        layer_make(&ref, k);
        layer_copy(&emu, &ref);
        mr_popart p;
        mr_popart_init(&p);
        mr_popart_ctl c;
        mr_popart_ctl_set(&c, &p, 0.3);   /* beta = max(1/count, 0.3): the floor from count 4 on */
        float *h = frand((size_t)k, 0, 1);
        double *partials = malloc(sizeof(double) * 16);
        for (int s = 0; s < POPART_STEPS; s++) {
            float *r = popart_returns(s);
            const double before = layer_out(&ref, p.mean, p.std, h);
            mr_popart_update(&p, r, (size_t)popart_n[s], 0.3, ref.w, &ref.b, k, noadam ? NULL : ref.mw,
                             noadam ? NULL : ref.vw, noadam ? NULL : &ref.mb, noadam ? NULL : &ref.vb);
            mr_popart_emulate(&c, r, popart_n[s], partials, emu.w, &emu.b, k, noadam ? NULL : emu.mw,
                              noadam ? NULL : emu.vw, noadam ? NULL : &emu.mb, noadam ? NULL : &emu.vb);
            CHECK_NEAR(c.mean, p.mean, 1e-12, 1e-12);
            CHECK_NEAR(c.std, p.std, 0.0, 1e-12);
            CHECK(c.count == p.count && c.count == s + 1);
            layer_cmp(&emu, &ref, noadam ? "popart (no Adam state)" : "popart", s);
            /* Outputs unchanged by the rescale (floats: to their rounding). */
            const double after = layer_out(&emu, c.mean, c.std, h);
            CHECK_NEAR(after, before, 1e-4, 1e-5);
            if (popart_half[s] == 0.0 || popart_n[s] < 2) CHECK(c.batch[1] < MR_POPART_MIN_STD);
            free(r);
        }
        /* beta hit its floor: std moved towards the last batch's (4 / sqrt(3)) by 0.3 of the way in variance. */
        CHECK(c.scale != 1.0 && c.std > 1.0);
        if (noadam) CHECK(emu.mb == 2e-4f && emu.vb == 3e-7f && emu.mw[0] == ref.mw[0]);
        layer_free(&ref);
        layer_free(&emu);
        free(h);
        free(partials);
    }
}

/* ================================================================ CUDA part */
#ifdef MOONRL_HAVE_CUDA

/* Refused before any launch. */
static void test_cuda_arg_checks(void) {
    mr_error e;
    float *f = (float *)(uintptr_t)256;   /* never dereferenced: the checks fail first */
    double *d = (double *)(uintptr_t)256;
    mr_popart_ctl *pc = (mr_popart_ctl *)(uintptr_t)256;
    CHECK(mr_cuda_normalize(f, -1, d, d, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "n = -1"));
    CHECK(mr_cuda_normalize(NULL, 10, d, d, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "x is NULL"));
    CHECK(mr_cuda_normalize(f, 10, NULL, NULL, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "out2 is NULL"));   /* partials NULL: out2 given */
    CHECK(mr_cuda_normalize(NULL, 0, NULL, NULL, NULL, &e) == MR_OK);   /* n == 0: nothing to do */
    CHECK(mr_cuda_mean_std(f, 10, d, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_popart_update(pc, f, 10, d, f, f, 0, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "k = 0") != NULL);
    CHECK(mr_cuda_popart_update(pc, f, 10, d, NULL, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "w is NULL") != NULL);
    CHECK(mr_cuda_popart_update(NULL, f, 10, d, f, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_popart_update(pc, f, -5, d, f, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_popart_update(pc, NULL, 0, NULL, f, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_OK);
    CHECK(mr_cuda_mean_std_partials(4097) == 2 && mr_cuda_mean_std_partials(4096) == 1);
}

/* Without a GPU a launch is an error with a message, never a crash. */
static void test_no_gpu_message(void) {
    if (mr_cuda_device_count() > 0) return;
    mr_error e;
    float *f = (float *)(uintptr_t)256;
    double *d = (double *)(uintptr_t)256;
    const mr_status s = mr_cuda_normalize(f, 10, d, d, NULL, &e);
    CHECK_MSG(s == MR_ERR_BACKEND && strstr(e.msg, "CUDA error in") && strstr(e.msg, "kernel"), "%d: %s", (int)s,
              e.msg);
    printf("  without a GPU: %s\n", e.msg);
}

/* Mean/std and normalisation: bit for bit against the emulation. */
static void gpu_normalize(void) {
    const int64_t sizes[] = {1, 2, 4097, 24576, 1000003};
    for (int k = 0; k < 5; k++) {
        const int64_t n = sizes[k];
        float *x = frand((size_t)n, -3.0, 5.0), *a = malloc(4 * (size_t)n), *ref = malloc(4 * (size_t)n);
        double *partials = malloc(sizeof(double) * mr_cuda_mean_std_partials(n));
        double emu[2], mean, sd;
        memcpy(a, x, 4 * (size_t)n);
        memcpy(ref, x, 4 * (size_t)n);
        mr_normalize_emulate(a, n, partials, emu);
        mr_normalize(ref, (size_t)n, &mean, &sd);
        float *dx = dalloc(4 * (size_t)n), *hx = halloc(4 * (size_t)n);
        double *dp = dalloc(sizeof(double) * mr_cuda_mean_std_partials(n)), *dstats = dalloc(16);
        double *hstats = halloc(16);
        up(dx, x, 4 * (size_t)n);
        OK(mr_cuda_normalize(dx, n, dp, dstats, stream, &e_));
        down(hx, dx, 4 * (size_t)n);
        down(hstats, dstats, 16);
        if (sync_ok("normalize")) {
            CHECK_MSG(hstats[0] == emu[0] && hstats[1] == emu[1], "n %lld: mean %.17g std %.17g vs emulation %.17g %.17g",
                      (long long)n, hstats[0], hstats[1], emu[0], emu[1]);
            CHECK_MSG(memcmp(hx, a, 4 * (size_t)n) == 0, "n %lld: %zu normalised values differ from the emulation",
                      (long long)n, ndiff(hx, a, (size_t)n));
            CHECK_NEAR(hstats[0], mean, 1e-15, 1e-13);
            CHECK_NEAR(hstats[1], sd, 0.0, 1e-12);
            const double e = check_relerr(hx, ref, (size_t)n, 1e-30);
            CHECK_MSG(e < 1e-5, "n %lld: normalised vs mr_normalize rel err %g", (long long)n, e);
            printf("  normalize (n %lld): stats and values bitwise = emulation; vs ppo.c rel err %.2g\n", (long long)n, e);
        }
        /* mean/std alone, and n == 0 (zeros). */
        OK(mr_cuda_mean_std(dx, 0, dp, dstats, stream, &e_));
        down(hstats, dstats, 16);
        if (sync_ok("mean_std 0")) CHECK(hstats[0] == 0.0 && hstats[1] == 0.0);
        free(x); free(a); free(ref); free(partials);
    }
}

/* PopArt: the sequence of test_popart_sequence queued on the device, every
 * step's control block read back only at the end. */
static void gpu_popart(void) {
    const int k = 512;
    layer ref, host;
    layer_make(&ref, k);
    layer_copy(&host, &ref);
    mr_popart p;
    mr_popart_init(&p);
    mr_popart_ctl c, emu;
    mr_popart_ctl_set(&c, &p, 0.3);
    emu = c;
    float *dw = dalloc(4 * (size_t)k), *dmw = dalloc(4 * (size_t)k), *dvw = dalloc(4 * (size_t)k);
    float *db = dalloc(12);   /* b, m_b, v_b */
    mr_popart_ctl *dpa = dalloc(sizeof(mr_popart_ctl)), *hist = halloc(sizeof(mr_popart_ctl) * POPART_STEPS);
    double *dp = dalloc(sizeof(double) * mr_cuda_mean_std_partials(24576));
    double *partials = malloc(sizeof(double) * 16);
    up(dw, ref.w, 4 * (size_t)k); up(dmw, ref.mw, 4 * (size_t)k); up(dvw, ref.vw, 4 * (size_t)k);
    const float b3[3] = {ref.b, ref.mb, ref.vb};
    up(db, b3, 12);
    OK(mr_cuda_popart_upload(dpa, &c, stream, &e_));
    float *dr[POPART_STEPS];
    mr_popart_ctl want[POPART_STEPS];
    for (int s = 0; s < POPART_STEPS; s++) {
        float *r = popart_returns(s);
        dr[s] = dalloc(4 * (size_t)popart_n[s]);
        up(dr[s], r, 4 * (size_t)popart_n[s]);
        mr_popart_update(&p, r, (size_t)popart_n[s], 0.3, ref.w, &ref.b, k, ref.mw, ref.vw, &ref.mb, &ref.vb);
        mr_popart_emulate(&emu, r, popart_n[s], partials, host.w, &host.b, k, host.mw, host.vw, &host.mb, &host.vb);
        want[s] = emu;
        free(r);
    }
    if (!sync_ok("popart upload")) return;
    const double t0 = now();
    for (int s = 0; s < POPART_STEPS; s++) {
        OK(mr_cuda_popart_update(dpa, dr[s], popart_n[s], dp, dw, db, k, dmw, dvw, db + 1, db + 2, stream, &e_));
        OK(mr_cuda_popart_download(dpa, &hist[s], stream, &e_));
    }
    if (!sync_ok("popart run")) return;
    const double t1 = now();
    layer got;
    layer_make(&got, k);
    float g3[3];
    mr_error e;
    mr_cuda_copy(got.w, dw, 4 * (size_t)k, MR_COPY_D2H, stream, &e);
    mr_cuda_copy(got.mw, dmw, 4 * (size_t)k, MR_COPY_D2H, stream, &e);
    mr_cuda_copy(got.vw, dvw, 4 * (size_t)k, MR_COPY_D2H, stream, &e);
    mr_cuda_copy(g3, db, 12, MR_COPY_D2H, stream, &e);
    if (!sync_ok("popart read")) return;
    got.b = g3[0]; got.mb = g3[1]; got.vb = g3[2];
    for (int s = 0; s < POPART_STEPS; s++) {
        CHECK_MSG(hist[s].batch[0] == want[s].batch[0] && hist[s].batch[1] == want[s].batch[1],
                  "step %d: batch mean/std %.17g %.17g vs emulation %.17g %.17g", s, hist[s].batch[0], hist[s].batch[1],
                  want[s].batch[0], want[s].batch[1]);
        CHECK_NEAR(hist[s].mean, want[s].mean, 1e-13, 1e-13);
        CHECK_NEAR(hist[s].std, want[s].std, 0.0, 1e-13);
        CHECK(hist[s].count == s + 1);
    }
    CHECK_NEAR(hist[POPART_STEPS - 1].mean, p.mean, 1e-12, 1e-12);
    CHECK_NEAR(hist[POPART_STEPS - 1].std, p.std, 0.0, 1e-12);
    layer_cmp(&got, &ref, "gpu popart vs ppo.c", POPART_STEPS);
    layer_cmp(&got, &host, "gpu popart vs emulation", POPART_STEPS);
    printf("  popart: %d queued updates (n 1 .. 24576, k %d) match ppo.c; batch stats bitwise; %.1f us per update\n",
           POPART_STEPS, k, (t1 - t0) / POPART_STEPS * 1e6);
    layer_free(&ref); layer_free(&host); layer_free(&got);
    free(partials);
}

static void gpu_tests(void) {
    if (!gpu_open()) return;
    gpu_normalize();
    gpu_popart();
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(void) {
    check_seed(0x9097a47c5eed0001ull);
    test_constants_and_setup();
    test_mean_std_and_normalize();
    test_popart_sequence();
#ifdef MOONRL_HAVE_CUDA
    test_cuda_arg_checks();
    test_no_gpu_message();
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_popart: skipped: no GPU (GPU checks not run; CPU checks below)\n");
#else
    printf("test_cuda_popart: skipped: no GPU (built without CUDA; CPU checks below)\n");
#endif
    return check_report("test_cuda_popart");
}

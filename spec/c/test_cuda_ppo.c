/*
 * test_cuda_ppo.c - the PPO kernels (kernels/ppo.cu) against the CPU
 * reference (src/engine/cpu/ppo.c).
 *
 * Always (CPU): the MR_HD math the kernels run (shared/gae_math.h,
 * categorical_math.h, optimizer_math.h; ppo.c loops over the same elements)
 * against ppo.c's loops - one environment's
 * GAE column vs mr_gae, one Adam element vs mr_adam_step, the clip factor
 * vs mr_clip_factor, one sampling row vs mr_sample_actions, the emulated
 * reduction order vs mr_grad_norm - and the optimizer's scalar steps
 * (prepare, skip on inf/nan, loss-scaler backoff and growth) and group
 * planning. In a CUDA build, the argument checks that run
 * before any launch.
 * With a GPU: each kernel against the CPU function (relative error < 1e-5),
 * the grad-norm reduction bit for bit against its CPU emulation, Adam over
 * several steps with per-group clipping (aligned and unaligned arrays), and
 * the fp16 loss scaler over a queued sequence of steps with injected inf and
 * NaN, read back only at the end (no host sync in between). Without a GPU the
 * GPU part prints "skipped: no GPU" and counts as passed.
 */
#include "check.h"
#include "ppo.h"
#include "optimizer_math.h"
#include "gae_math.h"
#include "categorical_math.h"
#ifdef MOONRL_HAVE_CUDA
#include "ppo_cuda.h"
#endif
#include "gpu_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float fnan(void) { return (float)(0.0 / 0.0); }
static float finf(void) { return (float)(1.0 / 0.0); }

/* ================================================================ CPU part */

static void test_gae_column(void) {
    const int T = 37, N = 101;
    float *r = frand((size_t)T * N, -1, 2), *v = frand((size_t)T * N, -3, 3), *lv = frand(N, -3, 3);
    uint8_t *d = malloc((size_t)T * N);
    for (int i = 0; i < T * N; i++) d[i] = urand() < 0.07;
    float *a0 = malloc(sizeof(float) * T * N), *r0 = malloc(sizeof(float) * T * N);
    float *a1 = malloc(sizeof(float) * T * N), *r1 = malloc(sizeof(float) * T * N);
    mr_gae(T, N, r, v, lv, d, 0.99f, 0.95f, a0, r0);
    const double g = 0.99f, gl = (double)0.99f * (double)0.95f;
    for (int n = 0; n < N; n++) mr_gae_env(T, N, n, r, v, lv, d, g, gl, a1, r1);
    CHECK(check_relerr(a1, a0, (size_t)T * N, 1e-6) < 1e-6);
    CHECK(check_relerr(r1, r0, (size_t)T * N, 1e-6) < 1e-6);
    free(r); free(v); free(lv); free(d); free(a0); free(r0); free(a1); free(r1);
}

static void test_adam_elem(void) {
    const size_t P = 10000;
    /* Parameters of the update's size, so a compared update is not lost in
     * the rounding of a parameter near 1. */
    float *p0 = frand(P, -1e-3, 1e-3), *g = frand(P, -0.1, 0.1);
    float *p1 = malloc(P * 4), *m0 = calloc(P, 4), *v0 = calloc(P, 4), *m1 = calloc(P, 4), *v1 = calloc(P, 4);
    float *pinit = malloc(P * 4);
    memcpy(p1, p0, P * 4);
    memcpy(pinit, p0, P * 4);
    mr_optctl c;
    mr_opt_hyper_default(&c.h);
    mr_opt_state_init(&c.s, 1.0f);
    for (int step = 1; step <= 4; step++) {
        for (size_t i = 0; i < P; i++) g[i] = (float)(urand() * 0.2 - 0.1);
        const float scale = step == 3 ? 0.25f : 1.0f;
        mr_adam_step(p0, g, m0, v0, P, c.h.lr, c.h.beta1, c.h.beta2, c.h.eps, scale, step);
        mr_opt_begin(&c);
        c.s.sumsq[0] = 1.0;              /* any finite value: only the step scalars matter here */
        mr_opt_prepare(&c, 1);
        CHECK(c.s.step == step);
        const mr_adam_coefs k = mr_adam_coefs_of(&c);
        for (size_t i = 0; i < P; i++) mr_adam_elem(&p1[i], &m1[i], &v1[i], g[i], scale, &k);
    }
    /* the same scalars, rounded once from the same doubles: the same bits */
    CHECK(memcmp(p1, p0, P * 4) == 0 && memcmp(m1, m0, P * 4) == 0 && memcmp(v1, v0, P * 4) == 0);
    for (size_t i = 0; i < P; i++) { p0[i] -= pinit[i]; p1[i] -= pinit[i]; }
    CHECK_MSG(check_relerr(p1, p0, P, 1e-9) < 1e-5, "delta %g", check_relerr(p1, p0, P, 1e-9));
    CHECK(check_relerr(m1, m0, P, 1e-12) < 1e-6 && check_relerr(v1, v0, P, 1e-15) < 1e-6);
    free(p0); free(g); free(p1); free(m0); free(v0); free(m1); free(v1); free(pinit);
}

static void test_clip_factor_and_finite(void) {
    const double norms[] = {0.0, 0.1, 0.4999, 0.5, 3.0, 1e30, 1.0 / 0.0, 0.0 / 0.0};
    const double maxes[] = {0.5, 0.0, -1.0, 1e-3};
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) {
            const double a = mr_opt_clip_factor(norms[i], maxes[j]), b = mr_clip_factor(norms[i], maxes[j]);
            CHECK((a == b) || (a != a && b != b));
        }
    CHECK(mr_finite_f(1.0f) && mr_finite_f(-3e38f) && mr_finite_f(1e-45f) && !mr_finite_f(finf()) &&
          !mr_finite_f(-finf()) && !mr_finite_f(fnan()));
    CHECK(mr_finite_d(1e308) && !mr_finite_d(1.0 / 0.0) && !mr_finite_d(0.0 / 0.0));
    CHECK(mr_finite_half_bits(0x3c00) && mr_finite_half_bits(0x7bff) && mr_finite_half_bits(0x0001));
    CHECK(!mr_finite_half_bits(0x7c00) && !mr_finite_half_bits(0xfc00) && !mr_finite_half_bits(0x7e00));
}

static void test_prepare_and_scaler(void) {
    mr_optctl c;
    mr_opt_hyper_default(&c.h);
    c.h.max_norm[0] = 0.5f;
    c.h.max_norm[1] = 0.0f;           /* group 1 not clipped */
    mr_opt_state_init(&c.s, 1024.0f);
    c.h.scaler_enabled = 1;
    c.h.growth_interval = 3;
    /* A good step: norms are unscaled, multipliers = clip / scale. */
    mr_opt_begin(&c);
    c.s.sumsq[0] = 4.0 * 1024.0 * 1024.0;     /* true norm 2 */
    c.s.sumsq[1] = 0.25 * 1024.0 * 1024.0;    /* true norm 0.5 */
    mr_opt_prepare(&c, 2);
    CHECK(c.s.found_inf == 0 && c.s.step == 1 && c.s.skipped == 0);
    CHECK(c.s.norm[0] == 2.0f && c.s.norm[1] == 0.5f);
    CHECK(c.s.mult[0] == (float)(mr_clip_factor(2.0, 0.5) / 1024.0));
    CHECK(c.s.mult[1] == (float)(1.0 / 1024.0));
    CHECK(c.s.step_size == (float)(3e-4 / (1.0 - pow(0.9, 1.0))));
    CHECK(c.s.bc2_sqrt == (float)sqrt(1.0 - pow(0.999, 1.0)));
    mr_opt_scaler_update(&c);
    CHECK(c.s.loss_scale == 1024.0f && c.s.growth_tracker == 1);
    /* inf in a sum: skipped, no Adam step, scale backs off. */
    mr_opt_begin(&c);
    CHECK(c.s.found_inf == 0 && c.s.sumsq[0] == 0.0);
    c.s.sumsq[0] = 1.0;
    c.s.sumsq[1] = 1.0 / 0.0;
    const float ss = c.s.step_size;
    mr_opt_prepare(&c, 2);
    CHECK(c.s.found_inf == 1 && c.s.step == 1 && c.s.skipped == 1 && c.s.step_size == ss);
    mr_opt_scaler_update(&c);
    CHECK(c.s.loss_scale == 512.0f && c.s.growth_tracker == 0);
    /* NaN: the same. */
    mr_opt_begin(&c);
    c.s.sumsq[0] = 0.0 / 0.0;
    c.s.sumsq[1] = 1.0;
    mr_opt_prepare(&c, 2);
    mr_opt_scaler_update(&c);
    CHECK(c.s.found_inf == 1 && c.s.skipped == 2 && c.s.loss_scale == 256.0f);
    /* found_inf set by a finiteness check before prepare: skipped even with finite sums. */
    mr_opt_begin(&c);
    c.s.found_inf = 1;
    c.s.sumsq[0] = c.s.sumsq[1] = 1.0;
    mr_opt_prepare(&c, 2);
    mr_opt_scaler_update(&c);
    CHECK(c.s.skipped == 3 && c.s.step == 1 && c.s.loss_scale == 128.0f);
    /* Three good steps in a row: growth; the tracker restarts. */
    for (int k = 0; k < 3; k++) {
        mr_opt_begin(&c);
        c.s.sumsq[0] = c.s.sumsq[1] = 1.0;
        mr_opt_prepare(&c, 2);
        mr_opt_scaler_update(&c);
        CHECK(c.s.growth_tracker == (k < 2 ? k + 1 : 0));
    }
    CHECK(c.s.loss_scale == 256.0f && c.s.step == 4 && c.s.skipped == 3);
    /* Growth that would overflow keeps the scale. */
    c.s.loss_scale = 3e38f;
    c.s.growth_tracker = 2;
    mr_opt_begin(&c);
    c.s.sumsq[0] = c.s.sumsq[1] = 1.0;
    mr_opt_prepare(&c, 2);
    mr_opt_scaler_update(&c);
    CHECK(c.s.loss_scale == 3e38f && c.s.growth_tracker == 0);
    /* Disabled (fp32 / bf16): an inf still skips, the scale never moves. */
    c.h.scaler_enabled = 0;
    c.s.loss_scale = 1.0f;
    mr_opt_begin(&c);
    c.s.sumsq[0] = 1.0 / 0.0;
    mr_opt_prepare(&c, 2);
    mr_opt_scaler_update(&c);
    CHECK(c.s.found_inf == 1 && c.s.loss_scale == 1.0f && c.s.skipped == 4);
}

static void test_groups_plan(void) {
    mr_opt_groups G;
    const int64_t s3[] = {5000, MR_OPT_CHUNK, 1};
    CHECK(mr_opt_groups_plan(3, s3, &G) == 0);
    CHECK(G.n == 3 && G.off[0] == 0 && G.off[1] == 5000 && G.off[2] == 5000 + MR_OPT_CHUNK);
    CHECK(G.off[3] == 5001 + MR_OPT_CHUNK);
    CHECK(G.block_off[0] == 0 && G.block_off[1] == 2 && G.block_off[2] == 3 && G.block_off[3] == 4);
    CHECK(G.off[4] == G.off[3] && G.block_off[4] == 4);
    CHECK(mr_opt_group_of(&G, 0) == 0 && mr_opt_group_of(&G, 4999) == 0 && mr_opt_group_of(&G, 5000) == 1);
    CHECK(mr_opt_group_of(&G, 5000 + MR_OPT_CHUNK) == 2);
    const int64_t bad[] = {10, 0};
    CHECK(mr_opt_groups_plan(2, bad, &G) == -1);
    CHECK(mr_opt_groups_plan(0, s3, &G) == -1);
    CHECK(mr_opt_groups_plan(MR_OPT_MAX_GROUPS + 1, s3, &G) == -1);
}

static void test_sumsq_order(void) {
    const int64_t sizes[] = {1, 255, 4095, 4096, 4097, 1000003};
    double *scratch = malloc(sizeof(double) * 1024);
    for (int k = 0; k < 6; k++) {
        float *g = frand((size_t)sizes[k], -2, 2);
        const double a = mr_opt_sumsq_emulate(g, 0, sizes[k], scratch), b = mr_grad_norm(g, (size_t)sizes[k]);
        CHECK_NEAR(sqrt(a), b, 0.0, 1e-12);
        free(g);
    }
    free(scratch);
}

static void test_sample_row(void) {
    const int N = 5000;
    float *z = frand((size_t)N * 8, -6, 6), *u = frand(N, 0, 1);
    u[0] = 0.0f;
    u[1] = 0.99999994f;                                  /* the largest float below 1 */
    for (int j = 0; j < 8; j++) z[2 * 8 + j] = j == 3 ? 0.0f : -1e30f;   /* one live action */
    for (int j = 0; j < 8; j++) z[3 * 8 + j] = 1.0f;                     /* uniform, and u * S = 2 */
    u[3] = 0.25f;                                                         /* exactly on a boundary */
    uint8_t *a0 = malloc(N), *a1 = malloc(N);
    float *l0 = malloc(sizeof(float) * N), *l1 = malloc(sizeof(float) * N);
    mr_sample_actions(N, 8, z, u, a0, l0);
    for (int i = 0; i < N; i++) mr_sample_row(z + (size_t)i * 8, 8, u[i], &a1[i], &l1[i]);
    CHECK(memcmp(a0, a1, N) == 0 && memcmp(l0, l1, sizeof(float) * N) == 0);
    CHECK(a1[2] == 3 && l1[2] == 0.0f);
    CHECK(a0[3] == 2 && a1[3] == 2);   /* first j with t < e_0 + .. + e_j: the boundary goes up */
    free(z); free(u); free(a0); free(a1); free(l0); free(l1);
}

/* ================================================================ GPU part */
#ifdef MOONRL_HAVE_CUDA

/* Checks that need no GPU: arguments are refused before any launch. */
static void test_cuda_arg_checks(void) {
    mr_error e;
    mr_opt_groups G;
    memset(&G, 0, sizeof G);
    CHECK(mr_cuda_adam(NULL, NULL, NULL, NULL, &G, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "mr_opt_groups_plan") != NULL);
    CHECK(mr_cuda_grad_sumsq(NULL, &G, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_opt_prepare(NULL, 0, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_opt_prepare(NULL, MR_OPT_MAX_GROUPS + 1, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_copy(NULL, NULL, 0, 9, NULL, &e) == MR_ERR_ARG);
}

static void gpu_gae(void) {
    const int T = 128, N = 1000;
    const size_t TN = (size_t)T * N;
    float *r = frand(TN, -1, 2), *v = frand(TN, -3, 3), *lv = frand(N, -3, 3);
    uint8_t *d = malloc(TN);
    for (size_t i = 0; i < TN; i++) d[i] = urand() < 0.03;
    float *a0 = malloc(4 * TN), *r0 = malloc(4 * TN), *a1 = malloc(4 * TN), *r1 = malloc(4 * TN);
    mr_gae(T, N, r, v, lv, d, 0.99f, 0.95f, a0, r0);
    float *dr = dalloc(4 * TN), *dv = dalloc(4 * TN), *dlv = dalloc(4 * N);
    float *da = dalloc(4 * TN), *dret = dalloc(4 * TN);
    uint8_t *dd = dalloc(TN);
    up(dr, r, 4 * TN); up(dv, v, 4 * TN); up(dlv, lv, 4 * N); up(dd, d, TN);
    OK(mr_cuda_gae(T, N, dr, dv, dlv, dd, 0.99f, 0.95f, da, dret, stream, &e_));
    down(a1, da, 4 * TN);
    down(r1, dret, 4 * TN);
    if (sync_ok("gae")) {
        const double ea = check_relerr(a1, a0, TN, 1e-3), er = check_relerr(r1, r0, TN, 1e-3);
        CHECK_MSG(ea < 1e-5 && er < 1e-5, "gae rel err adv %g ret %g", ea, er);
        printf("  gae (128 x 1000): rel err adv %.2g, ret %.2g\n", ea, er);
    }
    free(r); free(v); free(lv); free(d); free(a0); free(r0); free(a1); free(r1);
}

static void gpu_sample(void) {
    const int N = 100000;
    float *z = frand((size_t)N * 8, -6, 6), *u = frand(N, 0, 1);
    for (int j = 0; j < 8; j++) z[8 + j] = j == 5 ? 0.0f : -1e30f;
    uint8_t *a0 = malloc(N), *a1 = malloc(N);
    float *l0 = malloc(4 * (size_t)N), *l1 = malloc(4 * (size_t)N);
    mr_sample_actions(N, 8, z, u, a0, l0);
    float *dz = dalloc(32 * (size_t)N), *du = dalloc(4 * (size_t)N), *dl = dalloc(4 * (size_t)N);
    uint8_t *da = dalloc(N);
    up(dz, z, 32 * (size_t)N);
    up(du, u, 4 * (size_t)N);
    OK(mr_cuda_sample_actions(N, 8, dz, du, da, dl, stream, &e_));
    down(a1, da, N);
    down(l1, dl, 4 * (size_t)N);
    if (sync_ok("sample")) {
        int diff = 0;
        double el = 0.0;
        for (int i = 0; i < N; i++) {
            if (a0[i] != a1[i]) { diff++; continue; }   /* u within an ulp of a boundary: expf's last bits */
            const double d = fabs((double)l1[i] - l0[i]) / (fabs((double)l0[i]) + 1e-6);
            if (d > el) el = d;
        }
        CHECK_MSG(diff <= 10 && el < 1e-5, "sampling: %d of %d actions differ, logp rel err %g", diff, N, el);
        CHECK(a1[1] == 5);
        printf("  sampling (%d rows): %d actions differ, logp rel err %.2g\n", N, diff, el);
    }
    free(z); free(u); free(a0); free(a1); free(l0); free(l1);
}

/* Grad norm (bit for bit vs the emulation) and Adam over several steps vs
 * mr_adam_step with per-group clipping; `offset` floats shift every array so
 * the unaligned kernel runs. */
static void gpu_norm_and_adam(int offset) {
    const int64_t sizes[3] = {1000003, 50001, 7};
    mr_opt_groups G;
    CHECK(mr_opt_groups_plan(3, sizes, &G) == 0);
    const size_t P = (size_t)G.off[3];
    /* Parameters of the update's size (see test_adam_elem). */
    float *p_ref = frand(P, -1e-3, 1e-3), *g = malloc(4 * P), *m_ref = calloc(P, 4), *v_ref = calloc(P, 4);
    float *p_init = malloc(4 * P), *p_gpu = malloc(4 * P), *m_gpu = malloc(4 * P), *v_gpu = malloc(4 * P);
    memcpy(p_init, p_ref, 4 * P);
    float *dp = dalloc(4 * (P + 1)), *dg = dalloc(4 * (P + 1)), *dm = dalloc(4 * (P + 1)), *dvv = dalloc(4 * (P + 1));
    dp += offset; dg += offset; dm += offset; dvv += offset;
    double *partials = dalloc(sizeof(double) * mr_cuda_opt_partials(&G));
    mr_optctl *dctl = dalloc(sizeof(mr_optctl)), *hctl = halloc(sizeof(mr_optctl));
    mr_optctl c;
    mr_opt_hyper_default(&c.h);
    c.h.max_norm[0] = 0.5f;      /* clips: the norm of 1e6 values in +-0.01 is ~5.8 */
    c.h.max_norm[1] = 1e9f;      /* never clips */
    c.h.max_norm[2] = 0.0f;      /* no clipping */
    mr_opt_state_init(&c.s, 1.0f);
    up(dp, p_ref, 4 * P);
    OK(mr_cuda_memset(dm, 0, 4 * P, stream, &e_));
    OK(mr_cuda_memset(dvv, 0, 4 * P, stream, &e_));
    OK(mr_cuda_optctl_upload(dctl, &c, stream, &e_));
    double *scratch = malloc(sizeof(double) * (P / MR_OPT_CHUNK + 2));
    int bitwise = 1;
    for (int step = 1; step <= 5; step++) {
        for (size_t i = 0; i < P; i++) g[i] = (float)(urand() * 0.02 - 0.01);
        up(dg, g, 4 * P);
        OK(mr_cuda_opt_begin(dctl, stream, &e_));
        OK(mr_cuda_opt_step(dp, dg, dm, dvv, &G, partials, dctl, stream, &e_));
        down(hctl, dctl, sizeof *hctl);
        if (!sync_ok("adam step")) break;
        for (int k = 0; k < 3; k++) {
            const double emu = mr_opt_sumsq_emulate(g, G.off[k], G.off[k + 1], scratch);
            bitwise &= hctl->s.sumsq[k] == emu;
            const double norm = mr_grad_norm(g + G.off[k], (size_t)sizes[k]);
            CHECK_NEAR(hctl->s.norm[k], norm, 0.0, 1e-6);
            const double f = mr_clip_factor(norm, c.h.max_norm[k]);
            CHECK_NEAR(hctl->s.mult[k], f, 0.0, 1e-6);
            mr_adam_step(p_ref + G.off[k], g + G.off[k], m_ref + G.off[k], v_ref + G.off[k], (size_t)sizes[k],
                         c.h.lr, c.h.beta1, c.h.beta2, c.h.eps, (float)f, step);
        }
        CHECK(hctl->s.step == step && hctl->s.found_inf == 0 && hctl->s.skipped == 0);
        if (step == 1) CHECK(hctl->s.mult[0] < 0.2f && hctl->s.mult[1] == 1.0f && hctl->s.mult[2] == 1.0f);
    }
    CHECK_MSG(bitwise, "the GPU gradient sums of squares differ from the CPU emulation of their order");
    down(p_gpu, dp, 4 * P);
    down(m_gpu, dm, 4 * P);
    down(v_gpu, dvv, 4 * P);
    if (sync_ok("adam read")) {
        for (size_t i = 0; i < P; i++) { p_gpu[i] -= p_init[i]; p_ref[i] -= p_init[i]; }
        const double ep = check_relerr(p_gpu, p_ref, P, 1e-7), em = check_relerr(m_gpu, m_ref, P, 1e-9),
                     ev = check_relerr(v_gpu, v_ref, P, 1e-12);
        CHECK_MSG(ep < 1e-5 && em < 1e-5 && ev < 1e-5, "adam rel err: delta %g m %g v %g", ep, em, ev);
        printf("  adam (%zu params, 3 groups, %s): 5 steps, rel err update %.2g m %.2g v %.2g; sumsq bitwise=%s\n",
               P, offset ? "unaligned" : "float4", ep, em, ev, bitwise ? "yes" : "NO");
    }
    free(p_ref); free(g); free(m_ref); free(v_ref); free(p_init); free(p_gpu); free(m_gpu); free(v_gpu); free(scratch);
}

/* The fp16 loss scaler: a queued sequence of steps, read back at the end. */
static void gpu_scaler(void) {
    enum { STEPS = 9 };
    const int64_t sizes[2] = {40000, 3001};
    mr_opt_groups G;
    mr_opt_groups_plan(2, sizes, &G);
    const size_t P = (size_t)G.off[2];
    /* What the step sees: 1 = inf in group 0, 2 = NaN in group 1, 3 = inf in a
     * separate fp16 tensor checked by mr_cuda_check_finite_half. */
    const int inject[STEPS] = {0, 1, 2, 0, 0, 0, 3, 0, 1};
    mr_optctl c;                         /* the CPU mirror of the control block */
    mr_opt_hyper_default(&c.h);
    c.h.scaler_enabled = 1;
    c.h.growth_interval = 3;
    c.h.max_norm[0] = 0.5f;
    c.h.max_norm[1] = 0.5f;
    mr_opt_state_init(&c.s, 65536.0f);
    float *p_ref = frand(P, -1e-3, 1e-3), *m_ref = calloc(P, 4), *v_ref = calloc(P, 4);
    float *grads = malloc(4 * P * STEPS);            /* true gradients */
    float *scaled = malloc(4 * P * STEPS);           /* as backward would leave them */
    uint16_t *half = malloc(2 * 1000 * STEPS);
    float *p_hist = malloc(4 * P * (STEPS + 1));     /* CPU reference params after each step */
    double *scratch = malloc(sizeof(double) * 64);
    mr_optctl hist[STEPS];
    memcpy(p_hist, p_ref, 4 * P);
    float *d_p = dalloc(4 * P), *d_m = dalloc(4 * P), *d_v = dalloc(4 * P), *d_g = dalloc(4 * P * STEPS);
    uint16_t *d_half = dalloc(2 * 1000 * STEPS);
    double *partials = dalloc(sizeof(double) * mr_cuda_opt_partials(&G));
    mr_optctl *dctl = dalloc(sizeof(mr_optctl));
    mr_optctl *h_hist = halloc(sizeof(mr_optctl) * STEPS);
    float *h_p = halloc(4 * P * STEPS);
    up(d_p, p_ref, 4 * P);
    OK(mr_cuda_memset(d_m, 0, 4 * P, stream, &e_));
    OK(mr_cuda_memset(d_v, 0, 4 * P, stream, &e_));
    OK(mr_cuda_optctl_upload(dctl, &c, stream, &e_));
    /* The CPU mirror decides every expectation with the same MR_HD steps. */
    for (int k = 0; k < STEPS; k++) {
        float *gk = grads + P * k, *sk = scaled + P * k;
        uint16_t *hk = half + 1000 * k;
        for (size_t i = 0; i < P; i++) gk[i] = (float)(urand() * 0.02 - 0.01);
        for (int i = 0; i < 1000; i++) hk[i] = 0x3c00;                    /* 1.0 in fp16 */
        for (size_t i = 0; i < P; i++) sk[i] = gk[i] * c.s.loss_scale;   /* powers of two: exact */
        if (inject[k] == 1) sk[12345] = finf();
        if (inject[k] == 2) sk[P - 1] = fnan();
        if (inject[k] == 3) hk[999] = 0x7c00;
        mr_opt_begin(&c);
        if (inject[k] == 3) c.s.found_inf = 1;
        for (int g = 0; g < 2; g++) c.s.sumsq[g] = mr_opt_sumsq_emulate(sk, G.off[g], G.off[g + 1], scratch);
        mr_opt_prepare(&c, 2);
        if (!c.s.found_inf)
            for (int g = 0; g < 2; g++) {
                const double f = mr_clip_factor(mr_grad_norm(gk + G.off[g], (size_t)sizes[g]), c.h.max_norm[g]);
                mr_adam_step(p_ref + G.off[g], gk + G.off[g], m_ref + G.off[g], v_ref + G.off[g], (size_t)sizes[g],
                             c.h.lr, c.h.beta1, c.h.beta2, c.h.eps, (float)f, c.s.step);
            }
        mr_opt_scaler_update(&c);
        hist[k] = c;
        memcpy(p_hist + P * (k + 1), p_ref, 4 * P);
    }
    up(d_g, scaled, 4 * P * STEPS);
    up(d_half, half, 2 * 1000 * STEPS);
    if (!sync_ok("scaler upload")) goto out;
    /* The device run: every step queued back to back, no host sync. */
    for (int k = 0; k < STEPS; k++) {
        OK(mr_cuda_opt_begin(dctl, stream, &e_));
        OK(mr_cuda_check_finite_half(d_half + 1000 * k, 1000, dctl, stream, &e_));
        OK(mr_cuda_check_finite(d_g + P * k, P, dctl, stream, &e_));
        OK(mr_cuda_opt_step(d_p, d_g + P * k, d_m, d_v, &G, partials, dctl, stream, &e_));
        down(&h_hist[k], dctl, sizeof(mr_optctl));
        down(h_p + P * k, d_p, 4 * P);
    }
    if (!sync_ok("scaler run")) goto out;
    for (int k = 0; k < STEPS; k++) {
        const mr_opt_state *a = &h_hist[k].s, *b = &hist[k].s;
        CHECK_MSG(a->found_inf == b->found_inf && a->step == b->step && a->skipped == b->skipped &&
                  a->loss_scale == b->loss_scale && a->growth_tracker == b->growth_tracker,
                  "step %d: gpu inf %d step %lld skipped %lld scale %g tracker %d; cpu %d %lld %lld %g %d", k,
                  a->found_inf, (long long)a->step, (long long)a->skipped, a->loss_scale, a->growth_tracker,
                  b->found_inf, (long long)b->step, (long long)b->skipped, b->loss_scale, b->growth_tracker);
        CHECK(a->found_inf == (inject[k] != 0));
        if (inject[k]) {   /* skipped: the parameters did not move, bit for bit */
            const float *before = k ? h_p + P * (k - 1) : p_hist;
            CHECK_MSG(memcmp(h_p + P * k, before, 4 * P) == 0, "step %d was skipped but parameters changed", k);
        } else {
            float *dg = malloc(4 * P), *dr = malloc(4 * P);
            for (size_t i = 0; i < P; i++) {
                dg[i] = h_p[P * k + i] - p_hist[i];
                dr[i] = p_hist[P * (k + 1) + i] - p_hist[i];
            }
            const double e = check_relerr(dg, dr, P, 1e-7);
            CHECK_MSG(e < 1e-5, "step %d: parameters rel err %g", k, e);
            free(dg);
            free(dr);
        }
    }
    CHECK(hist[STEPS - 1].s.skipped == 4 && hist[5].s.loss_scale == 65536.0f / 4 * 2);
    printf("  loss scaler: %d queued steps (inf, NaN, fp16 inf injected), scale %g -> %g, %lld skipped\n", STEPS,
           65536.0, h_hist[STEPS - 1].s.loss_scale, (long long)h_hist[STEPS - 1].s.skipped);
out:
    free(p_ref); free(m_ref); free(v_ref); free(grads); free(scaled); free(half); free(p_hist); free(scratch);
}

/* Not a check: how long one fused optimizer step takes on the spec's 4.03 M parameters. */
static void gpu_speed(void) {
    const int64_t sizes[2] = {3970000, 60000};
    mr_opt_groups G;
    mr_opt_groups_plan(2, sizes, &G);
    const size_t P = (size_t)G.off[2];
    float *d_p = dalloc(4 * P), *d_g = dalloc(4 * P), *d_m = dalloc(4 * P), *d_v = dalloc(4 * P);
    double *partials = dalloc(sizeof(double) * mr_cuda_opt_partials(&G));
    mr_optctl *dctl = dalloc(sizeof(mr_optctl));
    mr_optctl c;
    mr_opt_hyper_default(&c.h);
    mr_opt_state_init(&c.s, 1.0f);
    OK(mr_cuda_memset(d_p, 0, 4 * P, stream, &e_));
    OK(mr_cuda_memset(d_g, 0, 4 * P, stream, &e_));
    OK(mr_cuda_memset(d_m, 0, 4 * P, stream, &e_));
    OK(mr_cuda_memset(d_v, 0, 4 * P, stream, &e_));
    OK(mr_cuda_optctl_upload(dctl, &c, stream, &e_));
    for (int k = 0; k < 10; k++) OK(mr_cuda_opt_step(d_p, d_g, d_m, d_v, &G, partials, dctl, stream, &e_));
    sync_ok("warm-up");
    const double t0 = now();
    for (int k = 0; k < 200; k++) OK(mr_cuda_opt_step(d_p, d_g, d_m, d_v, &G, partials, dctl, stream, &e_));
    sync_ok("timing");
    printf("  optimizer step (norm + Adam + scaler, %zu params): %.1f us\n", P, (now() - t0) / 200 * 1e6);
}

static void gpu_tests(void) {
    if (!gpu_open()) return;
    gpu_gae();
    gpu_sample();
    gpu_norm_and_adam(0);
    gpu_norm_and_adam(1);
    gpu_scaler();
    gpu_speed();
    mr_devmem_stats st;
    mr_devmem_stats_get(&dev, &st);
    printf("  device memory: %llu allocations, peak %llu bytes, %llu segments\n", (unsigned long long)st.allocations,
           (unsigned long long)st.peak_allocated_bytes, (unsigned long long)st.segments);
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(void) {
    check_seed(0x0123456789abcdefull);
    test_gae_column();
    test_adam_elem();
    test_clip_factor_and_finite();
    test_prepare_and_scaler();
    test_groups_plan();
    test_sumsq_order();
    test_sample_row();
#ifdef MOONRL_HAVE_CUDA
    test_cuda_arg_checks();
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_ppo: skipped: no GPU (GPU checks not run; CPU checks below)\n");
#else
    printf("test_cuda_ppo: skipped: no GPU (built without CUDA; CPU checks below)\n");
#endif
    return check_report("test_cuda_ppo");
}

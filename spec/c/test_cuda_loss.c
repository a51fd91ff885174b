/*
 * test_cuda_loss.c - the PPO loss on the device (kernels/ppo_loss.cu) against
 * the CPU reference (src/engine/cpu/ppo.c, mr_ppo_loss).
 *
 * Always (CPU): the MR_HD elements the kernels and ppo.c both run
 * (shared/ppo_loss_math.h), driven in the kernels' exact reduction order
 * (mr_loss_emulate), against ppo.c's own order: single samples in every
 * branch (ratio clipped above / below with either sign of the advantage,
 * inside the band, value clipped either side, on the clip bound, zero
 * advantage; entropy floor on and off; both value-loss forms) with the
 * gradients also checked against their closed forms; random batches of many
 * sizes; the edges. In a CUDA build: argument checks before any launch.
 * With a GPU: the kernels against ppo.c (relative error < 1e-5; the double
 * statistics much tighter), the stage-2 sums bit for bit against the
 * emulation run on the GPU's own stage-1 partials, the loss scale, and
 * non-finite losses setting found_inf. Without a GPU the GPU part prints
 * "skipped: no GPU" and counts as passed. (Mean/std, normalisation and
 * PopArt: test_cuda_popart.c.)
 */
#include "check.h"
#include "ppo.h"
#include "ppo_loss_cuda.h"
#ifdef MOONRL_HAVE_CUDA
#include "ppo_cuda.h"
#endif
#include "gpu_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* log pi(a) of a row, in double, written independently of the code under test. */
static double row_logp(const float *z, int a) {
    double m = z[0], s = 0.0;
    for (int j = 1; j < 8; j++) if (z[j] > m) m = z[j];
    for (int j = 0; j < 8; j++) s += exp((double)z[j] - m);
    return ((double)z[a] - m) - log(s);
}

/* A minibatch as the trainer's gather leaves it. */
typedef struct batch {
    int B;
    float *logits, *value, *old_logp, *adv, *old_value, *target;
    uint8_t *action;
} batch;

/* Logits in +-zscale; ratios e^U(-0.6, 0.6) (about a third inside a 0.2
 * band); values within +-0.5 of the old value (clip 0.2: both sides clipped
 * and not). */
static void batch_make(batch *b, int B, double zscale) {
    b->B = B;
    b->logits = frand((size_t)B * 8, -zscale, zscale);
    b->value = malloc(4 * (size_t)B);
    b->old_logp = malloc(4 * (size_t)B);
    b->adv = frand((size_t)B, -2, 2);
    b->old_value = frand((size_t)B, -2, 2);
    b->target = frand((size_t)B, -3, 3);
    b->action = malloc((size_t)B);
    for (int i = 0; i < B; i++) {
        b->action[i] = (uint8_t)(urand() * 8);
        b->old_logp[i] = (float)(row_logp(b->logits + 8 * (size_t)i, b->action[i]) - uni(-0.6, 0.6));
        b->value[i] = b->old_value[i] + (float)uni(-0.5, 0.5);
    }
}
static void batch_free(batch *b) {
    free(b->logits); free(b->value); free(b->old_logp); free(b->adv); free(b->old_value); free(b->target);
    free(b->action);
}

static mr_ppo_coefs coefs(double clip, double ent_coef, double vf, double floor, double floor_coef, int vmm) {
    mr_ppo_coefs c;
    memset(&c, 0, sizeof c);
    c.clip = clip;
    c.ent_coef = ent_coef;
    c.vf_coef = vf;
    c.ent_floor = floor;
    c.ent_floor_coef = floor_coef;
    c.value_max_of_means = vmm;
    return c;
}

/* The emulation (the kernels' code and order) and ppo.c on one batch. */
typedef struct loss_pair {
    mr_ppo_stats ref;
    mr_lossctl emu;
    float *dz_ref, *dv_ref, *dz_emu, *dv_emu;
    double *partials;
} loss_pair;

static void loss_pair_run(loss_pair *p, const batch *b, const mr_ppo_coefs *c, double scale) {
    const int B = b->B;
    p->dz_ref = malloc(32 * (size_t)B + 32);
    p->dv_ref = malloc(4 * (size_t)B + 4);
    p->dz_emu = malloc(32 * (size_t)B + 32);
    p->dv_emu = malloc(4 * (size_t)B + 4);
    p->partials = malloc(sizeof(double) * MR_LOSS_NACC * ((size_t)B / MR_LOSS_CHUNK + 1));
    mr_ppo_loss(B, b->logits, b->value, b->action, b->old_logp, b->adv, b->old_value, b->target, c, p->dz_ref,
                p->dv_ref, &p->ref);
    memset(&p->emu, 0, sizeof p->emu);
    mr_loss_hyper_set(&p->emu.h, c);
    mr_loss_emulate(B, b->logits, b->value, b->action, b->old_logp, b->adv, b->old_value, b->target, &p->emu, scale,
                    p->partials, p->dz_emu, p->dv_emu);
}
static void loss_pair_free(loss_pair *p) {
    free(p->dz_ref); free(p->dv_ref); free(p->dz_emu); free(p->dv_emu); free(p->partials);
}

/* Device-side stats vs ppo.c's. The sums differ only in their order of
 * addition: 1e-12 relative (the clip fraction is a count: exact or one sample
 * apart, for a ratio within an ulp of the band on one side only). */
static void check_stats(const mr_loss_stats *s, const mr_ppo_stats *r, int B, double tol, const char *what) {
    const double got[5] = {s->loss, s->policy_loss, s->value_loss, s->entropy, s->approx_kl};
    const double want[5] = {r->loss, r->policy_loss, r->value_loss, r->entropy, r->approx_kl};
    static const char *names[5] = {"loss", "policy_loss", "value_loss", "entropy", "approx_kl"};
    for (int k = 0; k < 5; k++)
        CHECK_MSG(fabs(got[k] - want[k]) <= tol * (fabs(want[k]) + 1e-3), "%s (B %d): %s %.17g vs ppo.c %.17g",
                  what, B, names[k], got[k], want[k]);
    CHECK_MSG(fabs(s->clip_fraction - r->clip_fraction) * B <= 1.0 + 1e-9, "%s (B %d): clip_fraction %.17g vs %.17g",
              what, B, s->clip_fraction, r->clip_fraction);
    CHECK(s->B == B);
}

/* ================================================================ CPU part */

static void test_constants_and_setup(void) {
    CHECK(MR_LOSS_NACC == 7 && MR_LOSS_CHUNK % MR_RED_THREADS == 0);
    mr_ppo_coefs c = coefs(0.2, 0.01, 0.5, 0.5, 0.05, 7);
    mr_loss_hyper h;
    mr_loss_hyper_set(&h, &c);
    CHECK(h.clip == 0.2 && h.ent_coef == 0.01 && h.vf_coef == 0.5 && h.ent_floor == 0.5 && h.ent_floor_coef == 0.05);
    CHECK(h.value_max_of_means == 1);
}

/* One sample at a time, in every branch, against ppo.c and the closed forms. */
static void row_case(double ratio, float A, float old, float dvv, float R, const mr_ppo_coefs *c, int *n_zero_pol) {
    batch b;
    batch_make(&b, 1, 3.0);
    b.adv[0] = A;
    b.old_value[0] = old;
    b.value[0] = old + dvv;
    b.target[0] = R;
    const int a = b.action[0];
    const double la = row_logp(b.logits, a);
    b.old_logp[0] = (float)(la - log(ratio));
    loss_pair p;
    loss_pair_run(&p, &b, c, 1.0);
    check_stats(&p.emu.s, &p.ref, 1, 1e-13, "row");
    CHECK_MSG(check_relerr(p.dz_emu, p.dz_ref, 8, 1e-30) < 1e-6 && check_relerr(p.dv_emu, p.dv_ref, 1, 1e-30) < 1e-6,
              "row r %g A %g d %g: dlogits err %g dvalue %g vs %g", ratio, A, dvv,
              check_relerr(p.dz_emu, p.dz_ref, 8, 1e-30), p.dv_emu[0], p.dv_ref[0]);
    /* Closed forms (entropy terms off): the policy gradient is
     * -A r ([k==a] - p_k) unless the clipped branch holds the max, where it is 0. */
    if (c->ent_coef == 0.0 && c->ent_floor_coef == 0.0) {
        const double r = exp(la - (double)b.old_logp[0]), cl = c->clip;
        const int clipped = (r > 1.0 + cl && A > 0) || (r < 1.0 - cl && A < 0);
        float want[8];
        for (int k = 0; k < 8; k++) {
            const double pk = exp(row_logp(b.logits, k));
            want[k] = clipped ? 0.0f : (float)(-(double)A * r * ((k == a ? 1.0 : 0.0) - pk));
        }
        CHECK_MSG(check_relerr(p.dz_emu, want, 8, 1e-12) < 1e-5, "row r %g A %g: policy gradient vs closed form %g", ratio,
                  A, check_relerr(p.dz_emu, want, 8, 1e-12));
        if (clipped) *n_zero_pol += 1;
        /* Value: the larger squared error takes the gradient; a clipped
         * v_clipped passes none. (B = 1: both value-loss forms agree.) */
        const double v = b.value[0], o = b.old_value[0], d = v - o;
        const double vc = o + (d < -cl ? -cl : d > cl ? cl : d);
        const double e1 = (v - R) * (v - R), e2 = (vc - R) * (vc - R);
        const double gv = e1 >= e2 ? 2 * (v - R) : (fabs(d) <= cl ? 2 * (vc - R) : 0.0);
        CHECK_NEAR(p.dv_emu[0], c->vf_coef * gv, 1e-7, 1e-5);
        CHECK_NEAR(p.emu.s.value_loss, e1 >= e2 ? e1 : e2, 1e-12, 1e-9);
    }
    loss_pair_free(&p);
    batch_free(&b);
}

static void test_loss_rows(void) {
    const double ratios[] = {1.5, 0.6, 1.05, 0.95, 1.0};
    const float advs[] = {1.5f, -0.7f, 0.0f};
    const float dvs[] = {0.45f, -0.45f, 0.05f, 0.2f, -0.2f, 0.0f};   /* 0.2f: on the clip bound (clip = 0.2f) */
    const float Rs[] = {-1.0f, 0.3f, 2.0f};
    int n_zero = 0, cases = 0;
    for (int vmm = 0; vmm < 2; vmm++)
        for (int ent = 0; ent < 2; ent++) {
            /* ent = 0: entropy terms off (closed forms checked); 1: on with an active floor. */
            const mr_ppo_coefs c = ent ? coefs((double)0.2f, 0.01, 0.5, 5.0, 0.05, vmm)
                                       : coefs((double)0.2f, 0.0, 0.5, 0.0, 0.0, vmm);
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 3; j++)
                    for (int k = 0; k < 6; k++) {
                        /* old = 0 on the bound cases, so v - old is exactly +-0.2f. */
                        const float old = fabsf(dvs[k]) == 0.2f ? 0.0f : (float)uni(-1, 1);
                        row_case(ratios[i], advs[j], old, dvs[k], Rs[(i + j + k) % 3], &c, &n_zero);
                        cases++;
                    }
        }
    /* Zero policy gradient exactly where the clipped branch wins: ratio 1.5
     * with A > 0 and ratio 0.6 with A < 0, x 6 values x 2 forms. */
    CHECK_MSG(n_zero == 2 * 6 * 2, "%d clipped rows", n_zero);
    CHECK(cases == 360);
}

/* The entropy gradient on its own: dloss/dz_k = dL/dH * -p_k (logp_k + H) / B. */
static void test_entropy_gradient(void) {
    batch b;
    batch_make(&b, 3, 2.0);
    for (int i = 0; i < 3; i++) b.adv[i] = 0.0f;
    const mr_ppo_coefs c = coefs(0.2, 0.3, 0.0, 0.0, 0.0, 1);
    loss_pair p;
    loss_pair_run(&p, &b, &c, 1.0);
    for (int i = 0; i < 3; i++) {
        double H = 0.0, lp[8];
        for (int k = 0; k < 8; k++) { lp[k] = row_logp(b.logits + 8 * i, k); H -= exp(lp[k]) * lp[k]; }
        double sum = 0.0;
        for (int k = 0; k < 8; k++) {
            const double want = -0.3 * -exp(lp[k]) * (lp[k] + H) / 3.0;
            CHECK_NEAR(p.dz_emu[8 * i + k], want, 1e-9, 1e-5);
            sum += p.dz_emu[8 * i + k];
        }
        CHECK_NEAR(sum, 0.0, 1e-7, 0.0);   /* softmax gradients sum to 0 over a row */
    }
    CHECK(check_relerr(p.dz_emu, p.dz_ref, 24, 1e-30) < 1e-6);
    loss_pair_free(&p);
    batch_free(&b);
}

/* Random batches of many sizes in both value-loss forms, floor on and off,
 * with a loss scale: the emulation against ppo.c. */
static void test_loss_batches(void) {
    const int sizes[] = {1, 2, 255, 256, 257, 1000, 24576};
    size_t total = 0, differ = 0;
    for (int si = 0; si < 7; si++)
        for (int vmm = 0; vmm < 2; vmm++)
            for (int fl = 0; fl < 2; fl++) {
                const int B = sizes[si];
                batch b;
                /* Logits in +-14: mean entropy ~0.4, below a 0.5 floor; +-1: ~2.0, above. */
                batch_make(&b, B, fl ? 14.0 : 1.0);
                const mr_ppo_coefs c = coefs((double)0.2f, 0.01, 0.5, 0.5, 0.05, vmm);
                const double scale = (si & 1) ? 1024.0 : 1.0;
                loss_pair p;
                loss_pair_run(&p, &b, &c, scale);
                check_stats(&p.emu.s, &p.ref, B, 1e-12, "batch");
                if (B >= 1000) CHECK_MSG(fl ? p.ref.entropy < 0.5 : p.ref.entropy > 0.5, "entropy %g", p.ref.entropy);
                CHECK(p.emu.s.dL_dH == (p.ref.entropy < 0.5 ? -0.01 - 0.05 : -0.01));
                for (size_t i = 0; i < 8 * (size_t)B; i++) p.dz_ref[i] *= (float)scale;
                for (int i = 0; i < B; i++) p.dv_ref[i] *= (float)scale;
                const double ez = check_relerr(p.dz_emu, p.dz_ref, 8 * (size_t)B, 1e-30);
                const double ev = check_relerr(p.dv_emu, p.dv_ref, (size_t)B, 1e-30);
                CHECK_MSG(ez < 1e-6 && ev < 1e-6, "B %d vmm %d floor %d: dlogits err %g dvalue err %g", B, vmm, fl, ez,
                          ev);
                total += 9 * (size_t)B;
                differ += ndiff(p.dz_emu, p.dz_ref, 8 * (size_t)B) + ndiff(p.dv_emu, p.dv_ref, (size_t)B);
                /* The batch covers every branch. */
                if (B >= 1000) {
                    int cnt[7] = {0};
                    for (int i = 0; i < B; i++) {
                        const double r = exp(row_logp(b.logits + 8 * (size_t)i, b.action[i]) - b.old_logp[i]);
                        const double d = (double)b.value[i] - b.old_value[i];
                        cnt[0] += r > 1.2 && b.adv[i] > 0;
                        cnt[1] += r > 1.2 && b.adv[i] < 0;
                        cnt[2] += r < 0.8 && b.adv[i] > 0;
                        cnt[3] += r < 0.8 && b.adv[i] < 0;
                        cnt[4] += r > 0.8 && r < 1.2;
                        cnt[5] += d > 0.2;
                        cnt[6] += d < -0.2;
                    }
                    for (int k = 0; k < 7; k++) CHECK_MSG(cnt[k] > B / 20, "branch %d: %d of %d", k, cnt[k], B);
                    CHECK(p.ref.clip_fraction > 0.4 && p.ref.clip_fraction < 0.85);
                }
                loss_pair_free(&p);
                batch_free(&b);
            }
    /* The gradients depend on the batch only through dL/dH and a branch, both
     * exact: the same code compiled twice gives the same floats. */
    printf("  loss, CPU emulation vs ppo.c: %zu of %zu gradient floats differ in any bit\n", differ, total);
    CHECK(differ * 1000 <= total);
}

/* The two value-loss forms part ways, and the gradient follows the form.
 * clip 0.2, old values 0, so v_clipped = 0.2 for every v > 0.2 (whose clamp
 * then passes no gradient). */
static void value_forms_case(const float *v, const float *R, int n, int vmm, double want_loss, const double *want_dv) {
    batch b;
    batch_make(&b, n, 1.0);
    for (int i = 0; i < n; i++) { b.old_value[i] = 0.0f; b.value[i] = v[i]; b.target[i] = R[i]; b.adv[i] = 0.0f; }
    const mr_ppo_coefs c = coefs((double)0.2f, 0.0, 1.0, 0.0, 0.0, vmm);
    loss_pair p;
    loss_pair_run(&p, &b, &c, 1.0);
    check_stats(&p.emu.s, &p.ref, n, 1e-13, "value forms");
    CHECK(check_relerr(p.dv_emu, p.dv_ref, (size_t)n, 1e-30) < 1e-6);
    CHECK_NEAR(p.emu.s.value_loss, want_loss, 1e-6, 0);
    for (int i = 0; i < n; i++)
        CHECK_MSG(fabs(p.dv_emu[i] - want_dv[i]) < 1e-6, "vmm %d sample %d: dvalue %g, want %g", vmm, i, p.dv_emu[i],
                  want_dv[i]);
    loss_pair_free(&p);
    batch_free(&b);
}

static void test_value_forms(void) {
    /* Samples 0, 1: v = 1, R = 0.3: e1 = 0.49, e2 = 0.01 (the unclipped error is the larger).
     * Samples 2, 3: v = 0.3, R = 1: e1 = 0.49, e2 = 0.64 (the clipped one is; no gradient through it).
     * Means: 0.49 vs 0.325: the unclipped mean wins. */
    const float v1[4] = {1.0f, 1.0f, 0.3f, 0.3f}, R1[4] = {0.3f, 0.3f, 1.0f, 1.0f};
    const double per_sample1[4] = {2 * 0.7 / 4, 2 * 0.7 / 4, 0.0, 0.0};
    const double of_means1[4] = {2 * 0.7 / 4, 2 * 0.7 / 4, 2 * -0.7 / 4, 2 * -0.7 / 4};
    value_forms_case(v1, R1, 4, 0, (0.49 + 0.49 + 0.64 + 0.64) / 4, per_sample1);
    value_forms_case(v1, R1, 4, 1, 0.49, of_means1);
    /* Samples 0, 1 now v = 0.5, R = 0.3: e1 = 0.04, e2 = 0.01; means 0.265 vs
     * 0.325: the clipped mean wins and its clamp passes nothing. */
    const float v2[4] = {0.5f, 0.5f, 0.3f, 0.3f};
    const double per_sample2[4] = {2 * 0.2 / 4, 2 * 0.2 / 4, 0.0, 0.0};
    const double of_means2[4] = {0.0, 0.0, 0.0, 0.0};
    value_forms_case(v2, R1, 4, 0, (0.04 + 0.04 + 0.64 + 0.64) / 4, per_sample2);
    value_forms_case(v2, R1, 4, 1, 0.325, of_means2);
}

/* B = 0 gives zero stats; a bad action (8) gives NaN, not an out-of-bounds read. */
static void test_loss_edges(void) {
    mr_lossctl ctl;
    memset(&ctl, 0x7f, sizeof ctl);
    const mr_ppo_coefs c = coefs(0.2, 0.01, 0.5, 0.5, 0.05, 1);
    mr_loss_hyper_set(&ctl.h, &c);
    mr_loss_emulate(0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &ctl, 1.0, NULL, NULL, NULL);
    CHECK(ctl.s.loss == 0.0 && ctl.s.policy_loss == 0.0 && ctl.s.value_loss == 0.0 && ctl.s.entropy == 0.0 &&
          ctl.s.approx_kl == 0.0 && ctl.s.clip_fraction == 0.0 && ctl.s.B == 0);
    batch b;
    batch_make(&b, 5, 1.0);
    b.action[2] = 8;
    loss_pair p;
    memset(&p, 0, sizeof p);
    p.dz_emu = malloc(32 * 5);
    p.dv_emu = malloc(4 * 5);
    p.partials = malloc(sizeof(double) * MR_LOSS_NACC);
    mr_loss_hyper_set(&p.emu.h, &c);
    mr_loss_emulate(5, b.logits, b.value, b.action, b.old_logp, b.adv, b.old_value, b.target, &p.emu, 1.0,
                    p.partials, p.dz_emu, p.dv_emu);
    CHECK(!mr_finite_d(p.emu.s.loss) && !mr_finite_f(p.dz_emu[16]));
    CHECK(mr_finite_f(p.dz_emu[0]) && mr_finite_f(p.dv_emu[2]));   /* other rows and the value head are fine */
    free(p.dz_emu); free(p.dv_emu); free(p.partials);
    batch_free(&b);
}

/* ================================================================ CUDA part */
#ifdef MOONRL_HAVE_CUDA

/* Refused before any launch. */
static void test_cuda_arg_checks(void) {
    mr_error e;
    float *f = (float *)(uintptr_t)256;   /* never dereferenced: the checks fail first */
    double *d = (double *)(uintptr_t)256;
    uint8_t *u = (uint8_t *)(uintptr_t)256;
    mr_lossctl *lc = (mr_lossctl *)(uintptr_t)256;
    CHECK(mr_cuda_ppo_loss(-1, f, f, u, f, f, f, f, lc, NULL, d, f, f, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "B = -1") != NULL);
    CHECK(mr_cuda_ppo_loss(4, NULL, f, u, f, f, f, f, lc, NULL, d, f, f, NULL, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "logits is NULL") != NULL, "%s", e.msg);
    CHECK(mr_cuda_ppo_loss(4, f, f, NULL, f, f, f, f, lc, NULL, d, f, f, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "action is NULL") != NULL);
    CHECK(mr_cuda_ppo_loss(4, f, f, u, f, f, f, f, NULL, NULL, d, f, f, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "d_ctl is NULL") != NULL);
    CHECK(mr_cuda_ppo_loss(4, f, f, u, f, f, f, f, lc, NULL, NULL, f, f, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_ppo_loss(4, f, f, u, f, f, f, f, lc, NULL, d, f, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "dvalue is NULL") != NULL);
    CHECK(mr_cuda_loss_partials(24576) == (size_t)(24576 / MR_LOSS_CHUNK) * MR_LOSS_NACC);
    CHECK(mr_cuda_loss_partials(257) == 2 * MR_LOSS_NACC && mr_cuda_loss_partials(0) >= 1);
}

/* The loss kernels against ppo.c and, for the reduction, the emulation. */
typedef struct dbatch {
    float *logits, *value, *old_logp, *adv, *old_value, *target, *dz, *dv;
    uint8_t *action;
    double *partials;
} dbatch;
static void dbatch_up(dbatch *d, const batch *b) {
    const size_t B = (size_t)b->B;
    d->logits = dalloc(32 * B); d->value = dalloc(4 * B); d->old_logp = dalloc(4 * B); d->adv = dalloc(4 * B);
    d->old_value = dalloc(4 * B); d->target = dalloc(4 * B); d->dz = dalloc(32 * B); d->dv = dalloc(4 * B);
    d->action = dalloc(B);
    d->partials = dalloc(sizeof(double) * mr_cuda_loss_partials(b->B));
    up(d->logits, b->logits, 32 * B); up(d->value, b->value, 4 * B); up(d->old_logp, b->old_logp, 4 * B);
    up(d->adv, b->adv, 4 * B); up(d->old_value, b->old_value, 4 * B); up(d->target, b->target, 4 * B);
    up(d->action, b->action, B);
}
static mr_status dbatch_loss(const dbatch *d, int B, mr_lossctl *dctl, mr_optctl *dopt, mr_error *e) {
    return mr_cuda_ppo_loss(B, d->logits, d->value, d->action, d->old_logp, d->adv, d->old_value, d->target, dctl,
                            dopt, d->partials, d->dz, d->dv, stream, e);
}

static void gpu_loss(void) {
    const int sizes[] = {1, 257, 24576, 100000};
    for (int si = 0; si < 4; si++)
        for (int vmm = 0; vmm < 2; vmm++)
            for (int fl = 0; fl < 2; fl++) {
                const int B = sizes[si];
                batch b;
                batch_make(&b, B, fl ? 14.0 : 1.0);
                const mr_ppo_coefs c = coefs((double)0.2f, 0.01, 0.5, 0.5, 0.05, vmm);
                const int scaled = (vmm + fl) & 1;       /* half the runs through an fp16 loss scale */
                const float scale = scaled ? 4096.0f : 1.0f;
                loss_pair p;
                loss_pair_run(&p, &b, &c, scale);
                dbatch d;
                dbatch_up(&d, &b);
                mr_lossctl *dctl = dalloc(sizeof(mr_lossctl)), *hctl = halloc(sizeof(mr_lossctl));
                mr_optctl *dopt = NULL;
                mr_lossctl init;
                memset(&init, 0, sizeof init);
                mr_loss_hyper_set(&init.h, &c);
                OK(mr_cuda_lossctl_upload(dctl, &init, stream, &e_));
                if (scaled) {
                    mr_optctl o;
                    mr_opt_hyper_default(&o.h);
                    mr_opt_state_init(&o.s, scale);
                    dopt = dalloc(sizeof(mr_optctl));
                    OK(mr_cuda_optctl_upload(dopt, &o, stream, &e_));
                }
                const size_t np = mr_cuda_loss_partials(B);
                float *hz = halloc(32 * (size_t)B), *hv = halloc(4 * (size_t)B);
                double *hp = halloc(sizeof(double) * np);
                OK(dbatch_loss(&d, B, dctl, dopt, &e_));
                OK(mr_cuda_lossctl_download(dctl, hctl, stream, &e_));
                down(hz, d.dz, 32 * (size_t)B);
                down(hv, d.dv, 4 * (size_t)B);
                down(hp, d.partials, sizeof(double) * np);
                if (sync_ok("loss")) {
                    check_stats(&hctl->s, &p.ref, B, 1e-10, "gpu loss");
                    CHECK(hctl->s.unclipped_mean == p.emu.s.unclipped_mean && hctl->s.dL_dH == p.emu.s.dL_dH);
                    /* Stage 2 bit for bit: the emulation run on the GPU's own partials. */
                    double s2[MR_LOSS_NACC];
                    const int64_t nb = (B + MR_LOSS_CHUNK - 1) / MR_LOSS_CHUNK;
                    mr_red_stage2_emulate(hp, nb, MR_LOSS_NACC, s2);
                    CHECK_MSG(memcmp(s2, hctl->s.sums, sizeof s2) == 0, "B %d: loss stage-2 sums differ from the emulation", B);
                    /* Stage 1: the partials against the CPU's (exp/log may differ in
                     * the last bit), normwise per sum (a block's policy sum may cancel). */
                    double ep = 0.0;
                    for (int k = 0; k < MR_LOSS_NACC; k++) {
                        double num = 0.0, den = 1e-300;
                        for (int64_t j = 0; j < nb; j++) {
                            const double x = p.partials[j * MR_LOSS_NACC + k], dd = fabs(hp[j * MR_LOSS_NACC + k] - x);
                            if (dd != dd) { num = dd; break; }
                            if (dd > num) num = dd;
                            if (fabs(x) > den) den = fabs(x);
                        }
                        if (!(num / den <= ep) && ep == ep) ep = num / den;
                    }
                    CHECK_MSG(ep < 1e-12, "B %d: stage-1 partials rel err %g", B, ep);
                    for (size_t i = 0; i < 8 * (size_t)B; i++) p.dz_ref[i] *= scale;
                    for (int i = 0; i < B; i++) p.dv_ref[i] *= scale;
                    const double ez = check_relerr(hz, p.dz_ref, 8 * (size_t)B, 1e-30);
                    const double ev = check_relerr(hv, p.dv_ref, (size_t)B, 1e-30);
                    CHECK_MSG(ez < 1e-5 && ev < 1e-5, "B %d vmm %d floor %d scale %g: dlogits err %g dvalue err %g", B,
                              vmm, fl, scale, ez, ev);
                    if (B >= 24576)
                        printf("  loss (B %d, %s value loss, floor %s, scale %g): stats rel err %.2g, dlogits %.2g, "
                               "dvalue %.2g; stage 2 bitwise\n", B, vmm ? "max-of-means" : "per-sample",
                               fl ? "on" : "off", scale, fabs(hctl->s.loss - p.ref.loss) / fabs(p.ref.loss), ez, ev);
                }
                loss_pair_free(&p);
                batch_free(&b);
            }
}

/* found_inf from a non-finite loss (NaN logit, bad action), not from a finite
 * one; B == 0 clears the stats. Queued, read back at the end. */
static void gpu_loss_nonfinite(void) {
    const int B = 1000;
    batch b;
    batch_make(&b, B, 2.0);
    dbatch d;
    dbatch_up(&d, &b);
    mr_lossctl *dctl = dalloc(sizeof(mr_lossctl)), *hctl = halloc(sizeof(mr_lossctl) * 4);
    mr_optctl *dopt = dalloc(sizeof(mr_optctl)), *hopt = halloc(sizeof(mr_optctl) * 4);
    mr_lossctl init;
    memset(&init, 0, sizeof init);
    const mr_ppo_coefs c = coefs(0.2, 0.01, 0.5, 0.5, 0.05, 1);
    mr_loss_hyper_set(&init.h, &c);
    mr_optctl o;
    mr_opt_hyper_default(&o.h);
    mr_opt_state_init(&o.s, 1.0f);
    OK(mr_cuda_lossctl_upload(dctl, &init, stream, &e_));
    OK(mr_cuda_optctl_upload(dopt, &o, stream, &e_));
    const float nanv = (float)(0.0 / 0.0);
    const uint8_t bad = 8;
    for (int k = 0; k < 3; k++) {
        OK(mr_cuda_opt_begin(dopt, stream, &e_));
        if (k == 1) up(d.logits + 8 * 17 + 3, &nanv, 4);
        if (k == 2) { up(d.logits, b.logits, 32 * (size_t)B); up(d.action + 400, &bad, 1); }
        OK(dbatch_loss(&d, B, dctl, dopt, &e_));
        down(&hopt[k], dopt, sizeof(mr_optctl));
        down(&hctl[k], dctl, sizeof(mr_lossctl));
    }
    OK(dbatch_loss(&d, 0, dctl, dopt, &e_));
    down(&hctl[3], dctl, sizeof(mr_lossctl));
    down(&hopt[3], dopt, sizeof(mr_optctl));
    if (sync_ok("loss non-finite")) {
        CHECK(hopt[0].s.found_inf == 0 && mr_finite_d(hctl[0].s.loss));
        CHECK(hopt[1].s.found_inf == 1 && !mr_finite_d(hctl[1].s.loss));
        CHECK(hopt[2].s.found_inf == 1 && !mr_finite_d(hctl[2].s.loss));
        CHECK(hctl[3].s.loss == 0.0 && hctl[3].s.entropy == 0.0 && hctl[3].s.B == 0 && hctl[3].s.sums[0] == 0.0);
        CHECK(hopt[3].s.found_inf == 1);   /* an empty batch's loss (0) leaves found_inf alone */
    }
    batch_free(&b);
}

/* Not a check: the time of normalisation and the loss at the spec's batch. */
static void gpu_speed(void) {
    const int B = 24576;
    batch b;
    batch_make(&b, B, 2.0);
    dbatch d;
    dbatch_up(&d, &b);
    mr_lossctl *dctl = dalloc(sizeof(mr_lossctl));
    mr_lossctl init;
    memset(&init, 0, sizeof init);
    const mr_ppo_coefs c = coefs(0.2, 0.01, 0.5, 0.5, 0.05, 1);
    mr_loss_hyper_set(&init.h, &c);
    OK(mr_cuda_lossctl_upload(dctl, &init, stream, &e_));
    double *dstats = dalloc(16), *dp = dalloc(sizeof(double) * mr_cuda_loss_partials(B));
    for (int k = 0; k < 10; k++) OK(dbatch_loss(&d, B, dctl, NULL, &e_));
    sync_ok("warm-up");
    double t0 = now();
    for (int k = 0; k < 200; k++) OK(dbatch_loss(&d, B, dctl, NULL, &e_));
    sync_ok("loss timing");
    const double tl = (now() - t0) / 200;
    t0 = now();
    for (int k = 0; k < 200; k++) OK(mr_cuda_normalize(d.adv, B, dp, dstats, stream, &e_));
    sync_ok("normalize timing");
    const double tn = (now() - t0) / 200;
    printf("  B %d: loss (2 passes, 3 launches) %.1f us, advantage normalisation (5 launches) %.1f us\n", B, tl * 1e6,
           tn * 1e6);
    batch_free(&b);
}

static void gpu_tests(void) {
    if (!gpu_open()) return;
    gpu_loss();
    gpu_loss_nonfinite();
    gpu_speed();
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(void) {
    check_seed(0x5eed1234abcd9876ull);
    test_constants_and_setup();
    test_loss_rows();
    test_entropy_gradient();
    test_loss_batches();
    test_value_forms();
    test_loss_edges();
#ifdef MOONRL_HAVE_CUDA
    test_cuda_arg_checks();
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_loss: skipped: no GPU (GPU checks not run; CPU checks below)\n");
#else
    printf("test_cuda_loss: skipped: no GPU (built without CUDA; CPU checks below)\n");
#endif
    return check_report("test_cuda_loss");
}

/*
 * test_cuda_loss.c - the PPO loss, advantage normalisation and PopArt on the
 * device (kernels/ppo_loss.cu) against the CPU reference (src/engine/cpu/ppo.c).
 *
 * Always (CPU): the MR_HD math the kernels and ppo.c run
 * (shared/ppo_loss_math.h), driven in the kernels' exact reduction order
 * (mr_*_emulate), against ppo.c's own reduction order:
 * single samples in every branch (ratio clipped above / below with either
 * sign of the advantage, inside the band, value clipped either side, on the
 * clip bound, zero advantage; entropy floor on and off; both value-loss
 * forms) with the gradients also checked against their closed forms; random
 * batches of many sizes; mean/std and normalisation; PopArt over a sequence
 * of updates (beta floor, n = 1, constant returns, no Adam state) with the
 * output invariance checked directly. In a CUDA build: argument checks before
 * any launch and, without a GPU, the error a launch gives.
 * With a GPU: each kernel against ppo.c (relative error < 1e-5; the double
 * statistics much tighter), the mean/std reduction and the normalised
 * advantages bit for bit against the emulation, the loss's stage-2 sums bit
 * for bit against the emulation run on the GPU's own stage-1 partials, the
 * loss scale, non-finite losses setting found_inf, and a queued sequence of
 * PopArt updates read back only at the end. Without a GPU the GPU part prints
 * "skipped: no GPU" and counts as passed.
 */
#include "check.h"
#include "ppo.h"
#include "ppo_loss_cuda.h"
#ifdef MOONRL_HAVE_CUDA
#include "devmem.h"
#include "ppo_cuda.h"
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static size_t ndiff(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}

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
    CHECK(MR_ADV_EPS == 1e-8 && MR_POPART_MIN_STD == 1e-4);
    CHECK(MR_LOSS_NACC == 7 && MR_LOSS_CHUNK % MR_RED_THREADS == 0 && MR_STATS_CHUNK % MR_RED_THREADS == 0);
    mr_ppo_coefs c = coefs(0.2, 0.01, 0.5, 0.5, 0.05, 7);
    mr_loss_hyper h;
    mr_loss_hyper_set(&h, &c);
    CHECK(h.clip == 0.2 && h.ent_coef == 0.01 && h.vf_coef == 0.5 && h.ent_floor == 0.5 && h.ent_floor_coef == 0.05);
    CHECK(h.value_max_of_means == 1);
    mr_popart p = {3.5, 2.25, 17.0}, q;
    mr_popart_ctl pc;
    mr_popart_ctl_set(&pc, &p, 0.001);
    CHECK(pc.mean == 3.5 && pc.std == 2.25 && pc.count == 17.0 && pc.beta_min == 0.001 && pc.scale == 1.0);
    mr_popart_ctl_get(&pc, &q);
    CHECK(q.mean == p.mean && q.std == p.std && q.count == p.count);
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
    uint8_t *u = (uint8_t *)(uintptr_t)256;
    mr_lossctl *lc = (mr_lossctl *)(uintptr_t)256;
    mr_popart_ctl *pc = (mr_popart_ctl *)(uintptr_t)256;
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
    CHECK(mr_cuda_normalize(f, -1, d, d, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "n = -1"));
    CHECK(mr_cuda_normalize(NULL, 10, d, d, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "x is NULL"));
    CHECK(mr_cuda_normalize(f, 10, NULL, d, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "partials is NULL"));
    CHECK(mr_cuda_normalize(NULL, 0, NULL, NULL, NULL, &e) == MR_OK);   /* n == 0: nothing to do */
    CHECK(mr_cuda_mean_std(f, 10, d, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_popart_update(pc, f, 10, d, f, f, 0, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "k = 0") != NULL);
    CHECK(mr_cuda_popart_update(pc, f, 10, d, NULL, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "w is NULL") != NULL);
    CHECK(mr_cuda_popart_update(NULL, f, 10, d, f, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_popart_update(pc, f, -5, d, f, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_popart_update(pc, NULL, 0, NULL, f, f, 4, NULL, NULL, NULL, NULL, NULL, &e) == MR_OK);
    CHECK(mr_cuda_loss_partials(24576) == (size_t)(24576 / MR_LOSS_CHUNK) * MR_LOSS_NACC);
    CHECK(mr_cuda_loss_partials(257) == 2 * MR_LOSS_NACC && mr_cuda_loss_partials(0) >= 1);
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

static mr_devmem dev, pin;
static void *stream;

static void *dalloc(size_t bytes) {
    void *p = NULL;
    mr_error e;
    if (mr_devmem_alloc(&dev, bytes, "test buffer", &p, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
    return p;
}
static void *halloc(size_t bytes) {
    void *p = NULL;
    mr_error e;
    if (mr_devmem_alloc(&pin, bytes, "pinned test buffer", &p, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
    return p;
}
static void up(void *d, const void *h, size_t bytes) {
    mr_error e;
    if (mr_cuda_copy(d, h, bytes, MR_COPY_H2D, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static void down(void *h, const void *d, size_t bytes) {   /* asynchronous */
    mr_error e;
    if (mr_cuda_copy(h, d, bytes, MR_COPY_D2H, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static int sync_ok(const char *what) {
    mr_error e;
    mr_status s = mr_cuda_stream_sync(stream, &e);
    CHECK_MSG(s == MR_OK, "%s: %s", what, e.msg);
    return s == MR_OK;
}
#define OK(call) do { mr_error e_; mr_status s_ = (call); CHECK_MSG(s_ == MR_OK, "%s: %s", #call, e_.msg); } while (0)
/* `call` must take &e_ as its error argument. */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
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
    mr_error e;
    mr_devmem_backend be;
    if (mr_devmem_cuda_backend(0, &be, &e) != MR_OK || mr_devmem_init(&dev, &be, NULL, &e) != MR_OK) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    if (mr_devmem_pinned_backend(&be, &e) != MR_OK || mr_devmem_init(&pin, &be, NULL, &e) != MR_OK ||
        mr_cuda_stream_create(&stream, &e) != MR_OK) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    gpu_normalize();
    gpu_loss();
    gpu_loss_nonfinite();
    gpu_popart();
    gpu_speed();
    mr_cuda_stream_sync(stream, NULL);
    mr_cuda_stream_destroy(stream);
    mr_devmem_destroy(&dev);
    mr_devmem_destroy(&pin);
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
    test_mean_std_and_normalize();
    test_popart_sequence();
#ifdef MOONRL_HAVE_CUDA
    test_cuda_arg_checks();
    test_no_gpu_message();
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_loss: skipped: no GPU (GPU checks not run; CPU checks below)\n");
#else
    printf("test_cuda_loss: skipped: no GPU (built without CUDA; CPU checks below)\n");
#endif
    return check_report("test_cuda_loss");
}

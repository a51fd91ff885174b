/*
 * test_policy_mlp.c - the MLP trunk's actor-critic (policy_mlp.c, through
 * policy.c's entry points) against an independent double-precision
 * re-implementation written here from net_layout.h's description, reading
 * the same parameter array through the tensor table by name:
 *   - the parameter table (names, shapes, the policy group first);
 *   - forward values (logits, value) to float rounding;
 *   - act == the training forward (the same products, block by block);
 *   - the gradient of L = sum(a .* logits) + sum(c .* value) against
 *     central differences of the double reference;
 *   - 1 vs 2 threads: forward and backward bit-identical;
 *   - init: orthogonal weights with the CNN's gains, zero biases.
 */
#include "check.h"
#include "policy.h"
#include "arena.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define D 5      /* observation */
#define E 2      /* privileged critic inputs */
#define NACT_MAX 4
static int NACT = 3, BOX = 0;   /* the actor's outputs; a box's floats (the Gaussian head) */
#define B 37     /* samples */

static void cfg_of(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->obs_vector = D;
    c->critic_extra = E;
    c->num_mlp = 2;
    c->mlp_widths[0] = 7;
    c->mlp_widths[1] = 6;
    c->critic_hidden = 4;
    c->num_actions = NACT;
    c->act_box = BOX;
}

static int make(mr_policy *p, mr_arena *a, const mr_policy_config *c, int max_batch) {
    memset(a, 0, sizeof *a);
    mr_policy_layout(p, c, 1, max_batch, 1, MR_CPU_CONV_IM2COL, a);
    const size_t planned = a->size;
    int ok = p->params == NULL && p->trunk == MR_TRUNK_MLP;
    if (mr_arena_commit(a) != 0) return 0;
    mr_policy_layout(p, c, 1, max_batch, 1, MR_CPU_CONV_IM2COL, a);
    ok &= a->used == planned && p->params && p->grads && p->work && p->mlp_obs;
    return ok;
}

static double lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* The reference: every product in double from the description (net_layout.h). */
static void ref_forward(const mr_policy *p, const double *P, const float *obs, const float *extra, int nb,
                        double *logits, double *value) {
    for (int b = 0; b < nb; b++) {
        double h[64], g[64];
        int w = D;
        for (int i = 0; i < D; i++) h[i] = obs[b * D + i];
        for (int l = 0; l < p->num_mlp; l++) {
            char nw[16], nbn[16];
            snprintf(nw, sizeof nw, "mlp%d.w", l);
            snprintf(nbn, sizeof nbn, "mlp%d.b", l);
            const mr_tensor_info *tw = mr_policy_tensor(p, nw), *tb = mr_policy_tensor(p, nbn);
            const int out = tw->shape[0];
            for (int o = 0; o < out; o++) {
                double z = P[tb->offset + o];
                for (int i = 0; i < w; i++) z += P[tw->offset + (size_t)o * w + i] * h[i];
                g[o] = tanh(z);
            }
            memcpy(h, g, sizeof(double) * out);
            w = out;
        }
        const mr_tensor_info *aw = mr_policy_tensor(p, "actor.w"), *ab = mr_policy_tensor(p, "actor.b");
        const int heads = BOX ? BOX : NACT;
        for (int k = 0; k < heads; k++) {
            double z = P[ab->offset + k];
            for (int i = 0; i < w; i++) z += P[aw->offset + (size_t)k * w + i] * h[i];
            logits[b * NACT + k] = z;
        }
        if (BOX) {   /* [means, log-stds]: the log-stds are the parameter, in every row */
            const mr_tensor_info *ls = mr_policy_tensor(p, "actor.log_std");
            for (int k = 0; k < BOX; k++) logits[b * NACT + BOX + k] = P[ls->offset + k];
        }
        double cin[D + E], ch[16];
        for (int i = 0; i < D; i++) cin[i] = obs[b * D + i];
        for (int e = 0; e < E; e++) cin[D + e] = extra[b * MR_POLICY_EXTRA + e];
        const mr_tensor_info *cw = mr_policy_tensor(p, "critic.w"), *cb = mr_policy_tensor(p, "critic.b");
        const int CH = cw->shape[0];
        for (int o = 0; o < CH; o++) {
            double z = P[cb->offset + o];
            for (int i = 0; i < D + E; i++) z += P[cw->offset + (size_t)o * (D + E) + i] * cin[i];
            ch[o] = tanh(z);
        }
        const mr_tensor_info *vw = mr_policy_tensor(p, "value.w"), *vb = mr_policy_tensor(p, "value.b");
        double v = P[vb->offset];
        for (int o = 0; o < CH; o++) v += P[vw->offset + o] * ch[o];
        value[b] = v;
    }
}

static double ref_loss(const mr_policy *p, const double *P, const float *obs, const float *extra, const double *ca,
                       const double *cc) {
    double lg[B * NACT_MAX], v[B], L = 0;
    ref_forward(p, P, obs, extra, B, lg, v);
    for (int i = 0; i < B * NACT; i++) L += ca[i] * lg[i];
    for (int i = 0; i < B; i++) L += cc[i] * v[i];
    return L;
}

static void run(void) {
    mr_policy_config c;
    cfg_of(&c);
    mr_policy p;
    mr_arena a;
    CHECK(make(&p, &a, &c, B));

    /* the table: mlp0.w (7,5), mlp0.b, mlp1.w (6,7), mlp1.b, actor (3,6), then the value group */
    const mr_tensor_info *t0 = mr_policy_tensor(&p, "mlp0.w"), *t1 = mr_policy_tensor(&p, "mlp1.w");
    const mr_tensor_info *ta = mr_policy_tensor(&p, "actor.w"), *tc = mr_policy_tensor(&p, "critic.w");
    CHECK(t0 && t0->shape[0] == 7 && t0->shape[1] == D && t1 && t1->shape[0] == 6 && t1->shape[1] == 7);
    CHECK(ta && ta->shape[0] == (BOX ? BOX : NACT) && ta->shape[1] == 6 && tc && tc->shape[1] == D + E);
    const mr_tensor_info *tl = mr_policy_tensor(&p, "actor.log_std");
    CHECK(BOX ? tl && tl->count == (size_t)BOX && tl->offset + tl->count == p.n_policy : tl == NULL);
    CHECK(p.n_policy == tc->offset && p.n_params == p.value_b_offset + 1 && !mr_policy_tensor(&p, "fc.w"));

    /* init: biases 0, the actor's rows orthogonal with gain 0.01 */
    mr_policy_init(&p, 7);
    CHECK(p.params[mr_policy_tensor(&p, "mlp0.b")->offset] == 0.0f);
    double dot = 0, n0 = 0;
    for (int i = 0; i < 6; i++) {
        dot += p.params[ta->offset + i] * p.params[ta->offset + 6 + i];
        n0 += p.params[ta->offset + i] * p.params[ta->offset + i];
    }
    CHECK_NEAR(sqrt(n0), 0.01, 1e-6, 0);
    CHECK_NEAR(dot, 0.0, 1e-9, 0);

    /* larger random weights (all tanh's in their curved range), inputs, coefficients */
    uint64_t s = 1;
    for (size_t i = 0; i < p.n_params; i++) p.params[i] = (float)((lcg(&s) - 0.5) * 1.2);
    float obs[B * D], extra[B * MR_POLICY_EXTRA], lg[B * NACT_MAX], v[B], lg2[B * NACT_MAX], v2[B];
    for (int i = 0; i < B * D; i++) obs[i] = (float)((lcg(&s) - 0.5) * 4);
    for (int i = 0; i < B * MR_POLICY_EXTRA; i++) extra[i] = (float)((lcg(&s) - 0.5) * 2);
    double ca[B * NACT_MAX], cc[B], rl[B * NACT_MAX], rv[B];
    for (int i = 0; i < B * NACT; i++) ca[i] = lcg(&s) - 0.5;
    for (int i = 0; i < B; i++) cc[i] = lcg(&s) - 0.5;

    double *P = malloc(sizeof(double) * p.n_params);
    for (size_t i = 0; i < p.n_params; i++) P[i] = p.params[i];
    CHECK(mr_policy_forward(&p, (const uint8_t *)obs, extra, B, 0, lg, v) == 0);
    ref_forward(&p, P, obs, extra, B, rl, rv);
    double worst = 0;
    for (int i = 0; i < B * NACT; i++) worst = fmax(worst, fabs(lg[i] - rl[i]) / (1 + fabs(rl[i])));
    for (int i = 0; i < B; i++) worst = fmax(worst, fabs(v[i] - rv[i]) / (1 + fabs(rv[i])));
    CHECK_MSG(worst < 2e-6, "forward against the double reference: %.3g", worst);

    mr_policy_act(&p, (const uint8_t *)obs, extra, B, 0, lg2, v2);
    CHECK(memcmp(lg, lg2, sizeof(float) * B * NACT) == 0 && memcmp(v, v2, sizeof v) == 0);

    /* gradients */
    float dl[B * NACT_MAX], dv[B];
    for (int i = 0; i < B * NACT; i++) dl[i] = (float)ca[i];
    for (int i = 0; i < B; i++) dv[i] = (float)cc[i];
    for (int i = 0; i < B * NACT; i++) ca[i] = dl[i];   /* the float coefficients, exactly */
    for (int i = 0; i < B; i++) cc[i] = dv[i];
    mr_policy_zero_grad(&p);
    CHECK(mr_policy_backward(&p, dl, dv, B) == 0);
    double gworst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < p.n_params; i++) {
        const double h = 1e-5, x = P[i];
        P[i] = x + h;
        const double up = ref_loss(&p, P, obs, extra, ca, cc);
        P[i] = x - h;
        const double dn = ref_loss(&p, P, obs, extra, ca, cc);
        P[i] = x;
        const double fd = (up - dn) / (2 * h), e = fabs(p.grads[i] - fd) / (1e-3 + fabs(fd));
        if (e > gworst) { gworst = e; worst_at = i; }
    }
    CHECK_MSG(gworst < 1e-3, "gradient against central differences: %.3g at parameter %zu", gworst, worst_at);
    /* a gradient that is there: the first layer's weights get some */
    double g0 = 0;
    for (size_t i = 0; i < t0->count; i++) g0 += fabs(p.grads[t0->offset + i]);
    CHECK(g0 > 1e-3);

    /* threads: the same bits */
    float *g1 = malloc(sizeof(float) * p.n_params);
    memcpy(g1, p.grads, sizeof(float) * p.n_params);
    const int before = omp_get_max_threads();
    omp_set_num_threads(before > 1 ? 1 : 2);
    CHECK(mr_policy_forward(&p, (const uint8_t *)obs, extra, B, 0, lg2, v2) == 0);
    mr_policy_zero_grad(&p);
    CHECK(mr_policy_backward(&p, dl, dv, B) == 0);
    omp_set_num_threads(before);
    CHECK(memcmp(lg, lg2, sizeof(float) * B * NACT) == 0 && memcmp(g1, p.grads, sizeof(float) * p.n_params) == 0);

    /* the layout refuses the CNN's calls it does not offer */
    CHECK(mr_policy_act_keep(&p, (const uint8_t *)obs, extra, B, 0, lg, v, 0) == -1);
    CHECK(mr_policy_backward(&p, dl, dv, B - 1) == -1);   /* not the forward's batch */

    free(g1);
    free(P);
    mr_policy_free(&p);
    mr_arena_release(&a);
}

int main(void) {
    run();            /* a categorical head of 3 */
    NACT = 4;
    BOX = 2;
    run();            /* the Gaussian head of a box of 2: 2 means and 2 log-stds */
    printf("test_policy_mlp: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

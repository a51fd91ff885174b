/*
 * categorical_math.h - the categorical head's rollout sampling (discrete(n)
 * actions), per row, written once as an MR_HD function (plain C,
 * host+device): kernels/ppo.cu launches it, src/engine/cpu/ppo.c loops over
 * it. The head's loss terms are ppo_loss_math.h's; the other heads' sampling
 * is gauss_math.h's and multi_discrete_math.h's.
 *
 * Shapes: logits (N, na), a row per environment; u (N); action (N) u8;
 * logp (N).
 */
#ifndef MR_CATEGORICAL_MATH_H
#define MR_CATEGORICAL_MATH_H
#include <math.h>
#include <stdint.h>
#include "rng.h"      /* MR_HD */
#include "moonrl.h"   /* MR_MAX_ACTIONS */

/* One row of rollout sampling by inverse CDF, in float, in this order:
 *   m = max_j z_j;  e_j = expf(z_j - m);  S = e_0 + ... + e_{na-1} (in order);
 *   t = u * S;  action = first j with t < e_0 + ... + e_j (in order), or, if
 *   rounding leaves none, the last j with e_j > 0 (na - 1 if none);
 *   logp = (z_a - m) - logf(S).
 * z: na logits (2 <= na <= MR_MAX_ACTIONS); u uniform in [0,1). The loops run
 * to the compile-time bound with j < na inside, so a GPU keeps e[] in
 * registers. */
MR_HD void mr_sample_row(const float *z, int na, float u, uint8_t *action, float *logp) {
    float m = z[0];
    for (int j = 1; j < MR_MAX_ACTIONS; j++) if (j < na && z[j] > m) m = z[j];
    float e[MR_MAX_ACTIONS], S = 0.0f;
    for (int j = 0; j < MR_MAX_ACTIONS; j++) {
        e[j] = 0.0f;
        if (j < na) { e[j] = expf(z[j] - m); S += e[j]; }
    }
    const float t = u * S;
    float cum = 0.0f;
    int a = -1;
    for (int j = 0; j < MR_MAX_ACTIONS; j++) {
        if (j >= na) continue;
        cum += e[j];
        if (a < 0 && t < cum) a = j;
    }
    if (a < 0) {              /* u * S rounded up to (or past) the total */
        a = na - 1;
        for (int j = MR_MAX_ACTIONS - 1; j >= 0; j--) if (j < na && e[j] > 0.0f) { a = j; break; }
    }
    *action = (uint8_t)a;
    *logp = (z[a] - m) - logf(S);
}

#endif /* MR_CATEGORICAL_MATH_H */

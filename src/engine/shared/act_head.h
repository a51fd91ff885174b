/*
 * act_head.h - the policy's head as the action space gives it, one plain
 * struct the trainer fills once (from the environment's declared spaces and
 * policy.box_squash) and hands to the backends' sampling and loss
 * operations (host memory; the cuda kernels take it by value):
 *   categorical     discrete(n): a row of n logits, an action a byte
 *                   (sampling categorical_math.h, loss ppo_loss_math.h)
 *   multi-discrete  k heads of nvec[i] choices: a row of sum nvec[i] logits
 *                   split into k groups, an action k bytes; log-probability
 *                   and entropy the sums over the heads
 *                   (multi_discrete_math.h)
 *   Gaussian        a box of d floats: a row [mean (d), log_std (d)], an
 *                   action d floats (the stored sample x); squash says how x
 *                   reaches the environment (clip or tanh, gauss_math.h),
 *                   low / high its bounds
 * The network's actor has `logits` outputs per row in every case
 * (net_layout.h: num_actions). Plain data, host code; compiles as CUDA C++.
 */
#ifndef MR_ACT_HEAD_H
#define MR_ACT_HEAD_H
#include <string.h>
#include "moonrl.h"                /* mr_env_spaces, MR_SPACE_*, mr_box_squash */
#include "gauss_math.h"            /* MR_GAUSS_*, the Gaussian head */
#include "multi_discrete_math.h"   /* MR_MD_*, the multi-discrete head */

enum { MR_HEAD_CATEGORICAL = 0, MR_HEAD_MULTI_DISCRETE = 1, MR_HEAD_GAUSS = 2 };

typedef struct mr_act_head {
    int kind;                           /* MR_HEAD_* */
    int n;                              /* categorical: choices; multi-discrete: heads k; Gaussian: floats d */
    int nvec[MR_MD_MAX_HEADS];          /* multi-discrete: head i's choices */
    int squash;                         /* Gaussian: MR_GAUSS_CLIP or MR_GAUSS_TANH (policy.box_squash) */
    float low[MR_GAUSS_MAX_DIMS], high[MR_GAUSS_MAX_DIMS];   /* Gaussian: the box's bounds */
    int logits;                         /* the actor's outputs per row: n, sum nvec, or 2d */
    int act_bytes;                      /* one action: 1, k, or 4d */
} mr_act_head;

/* The head an environment declaring `sp` gets, with policy.box_squash =
 * squash (mr_box_squash). Assumes sp passed mr_net_fits_spaces (sizes in
 * range); an unknown action kind reads as categorical. */
static inline void mr_act_head_of(const mr_env_spaces *sp, int squash, mr_act_head *h) {
    memset(h, 0, sizeof *h);
    const mr_space *a = &sp->act;
    if (a->kind == MR_SPACE_BOX) {
        h->kind = MR_HEAD_GAUSS;
        h->n = a->n > MR_GAUSS_MAX_DIMS ? MR_GAUSS_MAX_DIMS : a->n;
        h->squash = squash == MR_BOX_SQUASH_TANH ? MR_GAUSS_TANH : MR_GAUSS_CLIP;
        for (int j = 0; j < h->n; j++) {
            h->low[j] = a->low[j];
            h->high[j] = a->high[j];
        }
        h->logits = 2 * h->n;
        h->act_bytes = 4 * h->n;
    } else if (a->kind == MR_SPACE_MULTI_DISCRETE) {
        h->kind = MR_HEAD_MULTI_DISCRETE;
        h->n = a->n > MR_MD_MAX_HEADS ? MR_MD_MAX_HEADS : a->n;
        for (int i = 0; i < h->n; i++) {
            h->nvec[i] = a->nvec[i];
            h->logits += a->nvec[i];
        }
        h->act_bytes = h->n;
    } else {
        h->kind = MR_HEAD_CATEGORICAL;
        h->n = a->n;
        h->logits = a->n;
        h->act_bytes = 1;
    }
}

/* "categorical", "multi-discrete" or "Gaussian (clip)" / "Gaussian (tanh)". */
static inline const char *mr_act_head_name(const mr_act_head *h) {
    if (h->kind == MR_HEAD_GAUSS) return h->squash == MR_GAUSS_TANH ? "Gaussian (tanh)" : "Gaussian (clip)";
    return h->kind == MR_HEAD_MULTI_DISCRETE ? "multi-discrete" : "categorical";
}

#endif /* MR_ACT_HEAD_H */

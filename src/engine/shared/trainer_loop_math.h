/*
 * trainer_loop_math.h - the trainer loop's small per-element steps between
 * the environment, the policy and the PPO math (prefix mr_loop_), written
 * once as MR_HD functions and run by both backends
 * (src/engine/cpu/backend_cpu.c loops over them, kernels/trainer_loop.cu
 * launches them), and the update's metrics block they fill:
 *   step_in   per environment before the policy acts: the critic's item-count
 *             inputs and the action uniform keyed by (seed, env, tick,
 *             MR_RNG_ACTION)
 *   step_out  per environment after the env step: the denormalised value
 *             (PopArt from its control block), reward and done into the
 *             rollout row; or the bootstrap value alone
 *   keep_final / add_final   ppo.truncation = bootstrap: a truncated
 *             instance's final observation and critic inputs into its slot
 *             after the env step; after the rollout, the slots' critic
 *             values added to their rows' rewards (r + gamma V(final))
 *   gather    one minibatch from the rollout by sample index, old values and
 *             targets into the current PopArt space
 *   accumulate / finish   the update's metrics (mr_loop_metrics) from the
 *             loss and optimizer control blocks (ppo_loss_math.h,
 *             optimizer_math.h) after each optimizer step, then averaged
 *             once
 * and host-only helpers: the epoch permutation and the reduction scratch
 * sizes of the CUDA kernels (the trainer plans them in every build).
 *
 * Shapes (backend memory, fp32 unless said): extra (N,2); u (N); value, val,
 * rew (N); done (N) u8; rollout rows (B = T*N): obs (B,VV) u8, extra (B,2),
 * act (B) u8, logp, val, adv, ret (B); minibatch (M) likewise.
 *
 * Not here: the update's order of operations (src/engine/core/trainer.c).
 */
#ifndef MR_TRAINER_LOOP_MATH_H
#define MR_TRAINER_LOOP_MATH_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "env_state.h"       /* mr_env_state, mr_env_log, rng.h */
#include "optimizer_math.h"  /* mr_optctl, mr_opt_groups, mr_finite_d */
#include "ppo_loss_math.h"   /* mr_lossctl, mr_popart_ctl, chunk sizes */
#include "gauss_math.h"      /* a box action's normal draws */

#define MR_LOOP_NSTATS 8   /* averaged per optimizer step, in this order: */
enum {
    MR_LOOP_POLICY_LOSS, MR_LOOP_VALUE_LOSS, MR_LOOP_ENTROPY, MR_LOOP_APPROX_KL, MR_LOOP_CLIP_FRACTION,
    MR_LOOP_GNORM_POLICY, MR_LOOP_GNORM_VALUE, MR_LOOP_GNORM
};

/* One update's metrics on the device. Zeroed at the start of an update;
 * accumulate adds each optimizer step; the PPO kernels write ev_stats and
 * adv_stats, the log reduction writes log; finish fills the rest. */
typedef struct mr_loop_metrics {
    double sums[MR_LOOP_NSTATS];   /* over optimizer steps that were taken */
    double mean[MR_LOOP_NSTATS];   /* finish: sums / steps (0 without steps) */
    int64_t steps;               /* optimizer steps taken this update */
    int64_t skipped;             /* optimizer steps skipped this update (found_inf) */
    int32_t loss_nonfinite;      /* a loss was not finite */
    int32_t pad_;
    double ev_stats[4];          /* mean, std of the returns; mean, std of returns - values */
    double adv_stats[2];         /* the advantage normalisation's mean, std */
    double explained_variance;   /* finish */
    double popart_mean, popart_std;
    double loss_scale;           /* the scaler's after this update */
    int64_t skipped_total;       /* optimizer steps skipped since creation */
    mr_env_log log;              /* every environment's episode log, reduced */
} mr_loop_metrics;

/* ------------------------------------------------------------ step in/out */

/* Environment i before acting: when u is not NULL, the action uniform at
 * this environment's tick (the CPU trainer's key), or for a box of d
 * floats the d standard normals u[i*d ..] (gauss_math.h's Box-Muller on the
 * same key), or for k multi-discrete components the k uniforms u[i*k ..]
 * (draws 0 .. k-1 of the key). The critic's inputs are the environment's
 * (registry.h, mr_env_critic_extra_one). */
MR_HD void mr_loop_step_in(const mr_env_state *s, int i, uint64_t seed, float *u) {
    if (!u) return;
    if (s->act_kind == MR_SPACE_BOX) {
        const int d = s->act_bytes / 4;
        mr_gauss_normals(seed, mr_env_key(s, i), s->tick[i], MR_RNG_ACTION, 0, d, u + (size_t)i * d);
    } else if (s->act_kind == MR_SPACE_MULTI_DISCRETE) {
        const int k = s->act_bytes;
        for (int c = 0; c < k; c++)
            u[(size_t)i * k + c] = mr_rng_uniform(seed, mr_env_key(s, i), s->tick[i], MR_RNG_ACTION, (uint32_t)c);
    } else {
        u[i] = mr_rng_uniform(seed, mr_env_key(s, i), s->tick[i], MR_RNG_ACTION, 0);
    }
}

/* PopArt's statistics as the CPU trainer rounds them: value = pm + ps * raw
 * with pm, ps floats; targets (x - mean) * inv_std with inv_std = 1/std
 * formed in double. */
MR_HD void mr_loop_popart_floats(const mr_popart_ctl *pa, float *pm, float *ps, float *inv_std) {
    *pm = (float)pa->mean;
    *ps = (float)pa->std;
    *inv_std = (float)(1.0 / pa->std);
}

/* The denormalised value. A fused multiply-add: gcc contracts trainer.c's
 * `pm + ps * v` into one (-ffp-contract=fast, x86-64-v3 has FMA), and so
 * does nvcc; written out here so both sides round once whatever the flags. */
MR_HD float mr_loop_denorm(float pm, float ps, float raw) { return fmaf(ps, raw, pm); }

/* Environment i after its step: val[i] (denormalised value of the state the
 * action was taken in), and, when rew is not NULL, rew[i] and done[i]
 * (terminated or truncated) of this step. */
MR_HD void mr_loop_step_out(const mr_env_state *s, int i, float pm, float ps, const float *value, float *val,
                            float *rew, uint8_t *done) {
    val[i] = mr_loop_denorm(pm, ps, value[i]);
    if (rew) {
        rew[i] = s->reward[i];
        done[i] = (uint8_t)(s->terminated[i] | s->truncated[i]);
    }
}

/* ------------------------------------------------ truncated episodes' ends */

/* ppo.truncation = bootstrap (docs/engine.md): every truncation of a
 * rollout gets a slot. Instance i's k-th truncation in this rollout takes
 * slot k * N + i, k < kf; the plan's kf = (T - 1) / limit + 1 covers every
 * truncation T steps can hold (an episode is truncated after at least
 * `limit` steps, the environment's step_limit, so one instance's
 * truncations are at least that far apart). After the rollout the critic
 * values all kf * N slots, N at a time (policy_act), unused ones included
 * (their row is -1), and add_final adds gamma V to the used slots' rows.
 * The GAE's done stays terminated | truncated: the next row is the next
 * episode's first, so the chain is cut there either way; the bootstrap is
 * in the reward, as SB3's rollout buffer does it. */
typedef struct mr_loop_final_args {
    int N, kf;                   /* instances; slots per instance (K = kf * N) */
    int row_bytes;               /* one observation's bytes (cell codes, or 4 x a vector's floats) */
    int32_t *count;              /* (N) this rollout's truncations of each instance so far (zeroed per rollout) */
    uint8_t *obs;                /* (K, row_bytes) the final observations */
    float *extra;                /* (K, MR_ENV_EXTRA_STRIDE) their critic inputs */
    int32_t *row;                /* (K) the rollout row (t * N + i) a slot belongs to; -1: unused (set per rollout) */
    float *value;                /* (K) the critic's raw values of the slots */
} mr_loop_final_args;

/* Instance i after the environments' step of the rollout step whose rows
 * start at row0 (= t * N): when the step truncated it, the final state the
 * environment left (env_state.h's final_obs, final_extra) into its next
 * slot (a step that terminates is a termination, truncated or not:
 * foraging flags both when a death falls on the limit). A truncation past
 * kf (not possible with the plan's kf) keeps no slot: its step then ends
 * the chain as a termination does. */
MR_HD void mr_loop_keep_final(const mr_env_state *s, int i, const mr_loop_final_args *f, int row0) {
    if (!s->truncated[i] || s->terminated[i]) return;
    const int k = f->count[i];
    if (k >= f->kf) return;
    f->count[i] = k + 1;
    const int64_t slot = (int64_t)k * f->N + i, rb = f->row_bytes;
    const uint8_t *src = (const uint8_t *)s->final_obs + (int64_t)i * rb;
    uint8_t *dst = f->obs + slot * rb;
    for (int64_t b = 0; b < rb; b++) dst[b] = src[b];
    for (int e = 0; e < MR_ENV_EXTRA_STRIDE; e++)
        f->extra[slot * MR_ENV_EXTRA_STRIDE + e] = s->final_extra[(int64_t)i * MR_ENV_EXTRA_STRIDE + e];
    f->row[slot] = row0 + i;
}

/* Slot j < kf * N after the critic valued the slots: a used slot's row gets
 * rew += gamma * V, V = the value denormalised (PopArt) as step_out does;
 * one rounding (an fma) on every device. */
MR_HD void mr_loop_add_final(const mr_loop_final_args *f, int64_t j, float pm, float ps, float gamma, float *rew) {
    const int32_t r = f->row[j];
    if (r < 0) return;
    rew[r] = fmaf(gamma, mr_loop_denorm(pm, ps, f->value[j]), rew[r]);
}

/* ------------------------------------------------------------------ gather */

typedef struct mr_loop_gather_args {
    const int32_t *idx;          /* (M) rollout rows, in [0, B) */
    int M, VV;
    int AB;                      /* bytes of an action: 1 (discrete; 0 reads as 1) or 4 x a box's floats */
    const uint8_t *obs, *act;    /* rollout */
    const float *extra, *logp, *val, *adv, *ret;
    uint8_t *mb_obs, *mb_act;    /* minibatch */
    float *mb_extra, *mb_logp, *mb_adv, *mb_oldv, *mb_target;
} mr_loop_gather_args;

/* Byte j of the minibatch's observation codes, j < M * VV. */
MR_HD void mr_loop_gather_obs(const mr_loop_gather_args *g, int64_t j) {
    const int64_t k = j / g->VV, b = j - k * g->VV;
    g->mb_obs[j] = g->obs[(int64_t)g->idx[k] * g->VV + b];
}

/* Minibatch row k < M: everything but the codes; old values and targets in
 * the current PopArt-normalised space, as trainer.c's gather. */
MR_HD void mr_loop_gather_row(const mr_loop_gather_args *g, int k, float mean, float inv_std) {
    const int64_t s = g->idx[k];
    g->mb_extra[2 * k] = g->extra[2 * s];
    g->mb_extra[2 * k + 1] = g->extra[2 * s + 1];
    const int ab = g->AB > 1 ? g->AB : 1;
    for (int b = 0; b < ab; b++) g->mb_act[(int64_t)k * ab + b] = g->act[s * ab + b];
    g->mb_logp[k] = g->logp[s];
    g->mb_adv[k] = g->adv[s];
    g->mb_oldv[k] = (g->val[s] - mean) * inv_std;
    g->mb_target[k] = (g->ret[s] - mean) * inv_std;
}

/* ----------------------------------------------------------------- metrics */

/* After one optimizer step (loss and opt_step done): a skipped step
 * (found_inf) is counted and adds no statistics, as the CPU trainer's
 * `continue`; a taken one adds the loss's statistics and the true gradient
 * norms of its first two groups (policy, value) as computed by the step. */
MR_HD void mr_loop_accumulate(mr_loop_metrics *m, const mr_lossctl *l, const mr_optctl *o, int ngroups) {
    if (!mr_finite_d(l->s.loss)) m->loss_nonfinite = 1;
    if (o->s.found_inf) {
        m->skipped += 1;
        return;
    }
    const double gp = (double)o->s.norm[0], gv = ngroups > 1 ? (double)o->s.norm[1] : 0.0;
    m->sums[MR_LOOP_POLICY_LOSS] += l->s.policy_loss;
    m->sums[MR_LOOP_VALUE_LOSS] += l->s.value_loss;
    m->sums[MR_LOOP_ENTROPY] += l->s.entropy;
    m->sums[MR_LOOP_APPROX_KL] += l->s.approx_kl;
    m->sums[MR_LOOP_CLIP_FRACTION] += l->s.clip_fraction;
    m->sums[MR_LOOP_GNORM_POLICY] += gp;
    m->sums[MR_LOOP_GNORM_VALUE] += gv;
    m->sums[MR_LOOP_GNORM] += sqrt(gp * gp + gv * gv);
    m->steps += 1;
}

/* Once per update, after the last step: the means (as the CPU trainer, times
 * 1/steps), the explained variance 1 - var(R - V) / var(R) from ev_stats
 * (0 when var(R) = 0), PopArt's statistics and the scaler's state. */
MR_HD void mr_loop_finish(mr_loop_metrics *m, const mr_popart_ctl *pa, const mr_optctl *o) {
    const double k = m->steps ? 1.0 / (double)m->steps : 0.0;
    for (int i = 0; i < MR_LOOP_NSTATS; i++) m->mean[i] = m->sums[i] * k;
    const double st = m->ev_stats[1], sd = m->ev_stats[3];
    m->explained_variance = st == 0.0 ? 0.0 : 1.0 - (sd * sd) / (st * st);
    m->popart_mean = pa->mean;
    m->popart_std = pa->std;
    m->loss_scale = (double)o->s.loss_scale;
    m->skipped_total = o->s.skipped;
}

/* ------------------------------------------------------------- host only */

/* The permutation of epoch key `key` (= updates * epochs + epoch), exactly as
 * trainer.c's shuffle: Fisher-Yates from the top, j = below(seed, 0, key,
 * MR_RNG_SHUFFLE, i, i + 1). Sequential by nature, so the trainer makes it
 * on the host while the GPU runs the rollout, and uploads it. */
static inline void mr_loop_permutation(uint64_t seed, uint32_t key, int32_t *perm, int B) {
    for (int i = 0; i < B; i++) perm[i] = i;
    for (int i = B - 1; i > 0; i--) {
        const uint32_t j = mr_rng_below(seed, 0, key, MR_RNG_SHUFFLE, (uint32_t)i, (uint32_t)i + 1);
        const int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

/* Doubles of scratch the kernels need (the formulas of ppo.cu's
 * mr_cuda_opt_partials and ppo_loss.cu's mr_cuda_loss_partials /
 * mr_cuda_mean_std_partials; the CUDA test checks they agree). */
static inline size_t mr_loop_opt_partials(const mr_opt_groups *G) { return (size_t)G->block_off[G->n]; }
static inline size_t mr_loop_loss_partials(int B) {
    return (size_t)(B > 0 ? (B + MR_LOSS_CHUNK - 1) / MR_LOSS_CHUNK : 1) * MR_LOSS_NACC;
}
static inline size_t mr_loop_stats_partials(int64_t n) {
    return n > 0 ? (size_t)((n + MR_STATS_CHUNK - 1) / MR_STATS_CHUNK) : 1;
}

#endif /* MR_TRAINER_LOOP_MATH_H */

/*
 * trainer.h - the trainer's state, shared by trainer.c, checkpoint.c and
 * evaluate.c. Not part of the public API (see moonrl.h).
 */
#ifndef MR_TRAINER_H
#define MR_TRAINER_H
#include "moonrl.h"
#include "arena.h"
#include "env.h"
#include "policy.h"
#include "ppo.h"

struct mr_trainer {
    mr_config cfg;
    mr_hot_params hot;
    mr_arena arena;
    int threads;               /* resolved thread count */
    int proxy_obs;             /* 1 when the mode observes the proxy */
    int T, N, VV;              /* rollout steps, envs, view cells */
    int B, M;                  /* batch T*N, minibatch B/minibatches */

    mr_forage env;             /* the training environments */
    mr_policy pol;

    /* optimizer + PopArt */
    float *adam_m, *adam_v;
    int64_t adam_step;
    mr_popart popart;

    /* rollout storage, (T, N, ...) */
    uint8_t *obs;              /* (T,N,VV) cell codes */
    float *extra;              /* (T,N,2) normalised item counts for the critic */
    uint8_t *act;              /* (T,N) */
    float *logp;               /* (T,N) */
    float *val;                /* (T,N) denormalised value when acting */
    float *rew;                /* (T,N) */
    uint8_t *done;             /* (T,N) terminated or truncated */
    float *adv, *ret;          /* (T,N) */
    float *last_value;         /* (N) denormalised */

    /* per-step scratch */
    float *step_logits;        /* (N,8) */
    float *step_value;         /* (N) raw */
    float *step_u;             /* (N) */
    float *step_extra;         /* (N,2) */
    mr_forage_log *log_sum;    /* 1 */

    /* minibatch scratch, M samples */
    int32_t *perm;             /* (B) */
    uint8_t *mb_obs, *mb_act;
    float *mb_extra, *mb_logp, *mb_adv, *mb_oldv, *mb_target;
    float *mb_logits, *mb_value, *mb_dlogits, *mb_dvalue;

    /* warm-up snapshot */
    float *snap_params, *snap_m, *snap_v;
    int64_t snap_adam_step;
    mr_popart snap_popart;
    uint64_t snap_updates, snap_agent_steps;  /* a restored warm-up does not count as progress */
    int have_snapshot;

    /* progress */
    uint64_t updates;
    uint64_t agent_steps;

    uint64_t extra_allocations;   /* allocations outside the arena (evaluation) */
    char describe[512];
    double time_env, time_inference;   /* this update's rollout, split (cpu backend) */

    /* Non-NULL: the CUDA backend runs this trainer (trainer_cuda.c). The
     * fields above then hold host copies, filled on demand: the weights,
     * Adam moments and step, PopArt and the environments for checkpoints,
     * snapshots, evaluation and inference; the rollout and minibatch
     * buffers are not laid out. */
    struct mr_trainer_cuda *cuda;
};

/* The fields both backends' creation set from the config: cfg, hot values,
 * shapes (T, N, VV, B, M), observation kind, thread count. */
void mr_trainer_fields(mr_trainer *t, const mr_config *cfg);

/* out's progress (update, agent_steps, progress) and episode statistics
 * from the trainer's counters and one update's reduced episode log. */
void mr_trainer_episode_metrics(const mr_trainer *t, const mr_forage_log *l, mr_metrics *out);

/* An update's return: MR_ERR_NUMERIC with the message both backends give
 * when a loss or gradient was not finite, else MR_OK. */
mr_status mr_trainer_update_status(const mr_trainer *t, int nonfinite, mr_error *err);

/* Updates needed for total_steps (at least 1). */
uint64_t mr_trainer_total_updates(const mr_trainer *t);
/* Writes the critic's extra inputs for the N current environment states. */
void mr_trainer_counts_extra(const mr_forage *env, float *extra);
/* Sets OpenMP's thread count for regions started by the calling thread. */
void mr_trainer_use_threads(const mr_trainer *t);

#endif

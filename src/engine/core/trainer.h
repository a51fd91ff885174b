/*
 * trainer.h - the trainer's state, one struct for every backend, and the
 * internal calls between trainer.c (the loop), trainer_plan.c (memory plan,
 * out-of-memory sizing), trainer_copies.c (host copies), checkpoint_*.c and
 * evaluate.c. Not part of the public API (moonrl.h).
 *
 * Two kinds of state: the backend's (`dev`: environments, network, Adam,
 * rollout, control blocks, all in backend memory) and host copies of the
 * learnable state and environments (env, pol, adam_m/v, popart), filled on
 * demand by mr_trainer_pull for checkpoints, snapshots, evaluation and
 * inference, and written back by mr_trainer_push.
 */
#ifndef MR_TRAINER_H
#define MR_TRAINER_H
#include "moonrl.h"
#include "arena.h"
#include "backend.h"
#include "env.h"
#include "net_layout.h"
#include "ppo_loss_math.h"   /* mr_popart, mr_ppo_coefs */

#define MR_TRAINER_NGROUPS 2   /* parameter groups clipped separately: policy (trunk + actor), value (critic) */

enum { MR_EV_START, MR_EV_ROLLOUT, MR_EV_GAE, MR_EV_END, MR_EV_COUNT };
#define MR_TRAINER_PARTS 3     /* an update's parts, one graph each: rollout; GAE; epochs */

/* Memory of a trainer by component (bytes as requested from the memory
 * manager, before its 512-byte rounding). */
typedef struct mr_trainer_plan {
    int max_batch;             /* the network's: max(minibatch, num_envs) */
    size_t env_bytes;          /* environment state (mr_env_layout) */
    size_t policy_bytes;       /* parameters, gradients, activations, workspace */
    mr_bpolicy_plan policy;    /* the network's allocations, in order */
    size_t optim_bytes;        /* Adam m and v */
    size_t rollout_bytes;      /* rollout, per-step, minibatch, permutation, reduction scratch */
    size_t ctl_bytes;          /* control blocks and the metrics struct */
    size_t partial_doubles;    /* reduction scratch */
    size_t device_bytes;       /* the sum of the five */
    size_t staging_bytes;      /* host staging (page-locked on cuda) */
    size_t host_bytes;         /* the host arena: copies for checkpoints, evaluation, snapshots */
} mr_trainer_plan;

/* The backend's state. */
typedef struct mr_trainer_dev {
    mr_env_state env;          /* backend pointers, carved from env_block like the host copy */
    void *env_block;
    mr_bpolicy pol;
    int pol_ready;
    mr_opt_groups groups;
    float *adam_m, *adam_v;    /* one block: m then v */
    void *roll_block;
    uint8_t *obs, *act, *done;                    /* (T,N,VV), (T,N,AB), (T,N) */
    float *extra, *logp, *val, *rew, *adv, *ret, *diff;   /* (T,N[,2]) */
    float *last_value;                            /* (N) */
    float *step_logits, *step_value, *step_u, *step_extra;
    uint8_t *step_act;                            /* (N,AB): a box's actions as the environment gets them */
    int32_t *perm;                                /* (B): this epoch's permutation */
    /* ppo.truncation = bootstrap (KF > 0; else NULL): where the environments
     * leave a truncated instance's final state (env.final_obs, final_extra),
     * and the rollout's slots (trainer_loop_math.h's mr_loop_final_args) */
    uint8_t *fin_env_obs;                         /* (N, VV) */
    float *fin_env_extra;                         /* (N, 2) */
    int32_t *fin_count, *fin_row;                 /* (N), (KF * N) */
    uint8_t *fin_obs;                             /* (KF * N, VV) */
    float *fin_extra, *fin_value;                 /* (KF * N, 2), (KF * N) */
    uint8_t *mb_obs, *mb_act;
    float *mb_extra, *mb_logp, *mb_adv, *mb_oldv, *mb_target;
    float *mb_logits, *mb_value, *mb_dlogits, *mb_dvalue;
    double *partials;
    void *ctl_block;
    mr_optctl *opt;
    mr_lossctl *loss;
    mr_popart_ctl *pa;
    mr_loop_metrics *met;
} mr_trainer_dev;

/* Host staging: the control blocks' host sides and the permutations. */
typedef struct mr_trainer_stage {
    void *block;
    mr_optctl *opt;
    mr_lossctl *loss;
    mr_popart_ctl *pa;
    mr_loop_metrics *met;
    int32_t *perm;             /* (epochs, B) */
} mr_trainer_stage;

/* Per-phase times of the last update, seconds (backend events). env and
 * inference come from per-step events, gather .. optimizer from
 * per-minibatch ones (always on the cpu; with mr_trainer_set_profile on
 * cuda, else 0). */
typedef struct mr_trainer_timing {
    double rollout, gae, update;
    double env, inference;
    double gather, forward, loss, backward, optimizer;
} mr_trainer_timing;

struct mr_trainer {
    mr_config cfg;             /* hot values kept in it (mr_config_apply_hot) */
    mr_hot_params hot;
    const mr_backend *be;
    mr_trainer_plan plan;
    int threads;               /* resolved thread count */
    int device;                /* the backend's device index */
    int proxy_obs;             /* 1 when the mode observes the proxy: the acting expansion (obs_codes.h) */
    int obs_update;            /* the training forward's expansion: proxy_obs, or MR_EXPAND_PROXY_UINT8 */
    int T, N, V, VV, NA;       /* rollout steps, envs, view, observation bytes (V*V cell codes, or
                                * 4 per float of a vector), actions (the actor's outputs) */
    int AB;                    /* bytes of one action: 1, k (multi-discrete), or 4 x a box's floats */
    mr_act_head head;          /* the actor's head (act_head.h): categorical, multi-discrete or Gaussian */
    int B, M;                  /* batch T*N, minibatch B/minibatches */
    int KF;                    /* ppo.truncation bootstraps: the final-state slots per environment, (T - 1) /
                                * the environment's step limit + 1; 0: truncated episodes end (mr_trainer_fields) */
    int reuse;                 /* one minibatch: the rollout's acts keep the first epoch's forward
                                * (policy_act_keep / policy_forward_kept; the epoch's order is the
                                * rollout's, since a whole-batch sum needs no shuffle) */
    int broken;                /* an update failed midway: the backend state is not trustworthy */
    int keep_grads;            /* checkpoints hold the last step's gradient (mr_trainer_keep_gradients) */
    int grads_ready;           /* an update ran in this trainer: its grads are a real gradient */
    mr_reducer reducer;        /* data-parallel (mr_trainer_set_reducer); .average NULL: one process */
    char describe[640];

    /* backend state */
    void *stream;
    mr_devmem mem, staging;
    int mem_ready, staging_ready;
    size_t card_total, card_free;   /* the device when the trainer was created (out-of-memory hints) */
    mr_trainer_dev d;
    mr_trainer_stage h;
    void *ev[MR_EV_COUNT];
    void *graph[MR_TRAINER_PARTS];
    int graphs_used;           /* the last update replayed them */
    int warm;                  /* an update has run operation by operation */
    int graphs_failed;
    char graphs_why[200];
    int profile;
    void **pev;                /* profiling events: 2T+1 around the rollout steps, then
                                * MR_UPDATE_MARKS per minibatch of the update */
    int npev;
    mr_trainer_timing timing;

    /* host copies (mr_trainer_pull / push) */
    mr_arena arena;
    mr_env_state env;
    const mr_backend *host;    /* the host's backend (host memory: the cpu): the host copy of the network,
                                * evaluation and inference run on its operations */
    mr_net_layout net;         /* the network's shapes and parameter layout (every copy's) */
    mr_bpolicy pol;            /* the host copy (t->host's network): params; also evaluation's and
                                * inference's network */
    float *adam_m, *adam_v;
    int64_t adam_step;
    mr_popart popart;
    mr_env_log *log_sum;       /* scratch of evaluation */

    /* warm-up snapshot */
    float *snap_params, *snap_m, *snap_v;
    int64_t snap_adam_step;
    mr_popart snap_popart;
    uint64_t snap_updates, snap_agent_steps;
    int have_snapshot;

    /* the kept state (mr_trainer_keep): one backend block, taken from the
     * memory manager at the first keep - the optimizer's and PopArt's
     * control blocks, then parameters, then Adam m and v */
    void *keep_block;
    mr_optctl *keep_opt;
    mr_popart_ctl *keep_pa;
    float *keep_params, *keep_adam;
    uint64_t keep_updates, keep_agent_steps;
    int have_keep;

    /* progress */
    uint64_t updates;
    uint64_t agent_steps;
    uint64_t extra_allocations;   /* allocations outside the plan (evaluation, profiling events) */
};

/* ---- trainer.c */
/* Creation on a given table (the public create chooses it; tests pass wrappers). */
mr_status mr_trainer_create_on(const mr_config *cfg, const mr_backend *be, const char *note, mr_trainer **out,
                               mr_error *err);
/* The critic's extra inputs for the current environment states (host copies). */
/* Sets OpenMP's thread count for regions started by the calling thread. */
void mr_trainer_use_threads(const mr_trainer *t);

/* ---- trainer_plan.c */
/* The shapes and fields every trainer takes from its config. */
void mr_trainer_fields(mr_trainer *t, const mr_config *cfg);
/* Memory of a trainer for cfg on backend be (cfg validated here); touches no device. */
mr_status mr_trainer_plan_make(const mr_config *cfg, const mr_backend *be, mr_trainer_plan *out, mr_error *err);
/* Lays out the backend blocks (rollout, control blocks, staging) over
 * base pointers, or sizes them on a planning arena. */
void mr_trainer_layout_rollout(mr_trainer_dev *d, int T, int N, int VV, int NA, const mr_act_head *h, int M,
                               int KF, size_t partial_doubles, mr_arena *a);
void mr_trainer_layout_ctl(mr_trainer_dev *d, mr_arena *a);
void mr_trainer_layout_stage(mr_trainer_stage *h, int epochs, int B, mr_arena *a);
/* The host arena: the environment first, so one copy moves its whole state. */
void mr_trainer_layout_host(mr_trainer *t, mr_arena *a);
/* After a creation allocation failed with MR_ERR_NOMEM: appends to err how
 * many environments would fit. */
mr_status mr_trainer_oom_hint(const mr_trainer *t, mr_status s, mr_error *err);

/* ---- trainer_copies.c: host copies <-> backend, synchronously
 *   MR_SYNC_WEIGHTS    parameters and PopArt (evaluation, inference)
 *   MR_SYNC_LEARNABLE  + Adam moments and step (snapshot / restore)
 *   MR_SYNC_ALL        + the environment state (checkpoints)
 * After a failed update pull is refused (MR_ERR_STATE) until a push of
 * MR_SYNC_ALL (a checkpoint load) makes the backend state whole again. */
enum { MR_SYNC_WEIGHTS = 1, MR_SYNC_LEARNABLE = 2, MR_SYNC_ALL = 3 };
mr_status mr_trainer_pull(mr_trainer *t, int what, mr_error *err);
mr_status mr_trainer_push(mr_trainer *t, int what, mr_error *err);
mr_status mr_trainer_broken_msg(mr_error *err);
void mr_trainer_drop_graphs(mr_trainer *t);

/* ---- for tests and benchmarks (trainer_copies.c) */
/* Host copies of the last update's rollout, each (T*N[,...]); act (T*N, AB): one action's bytes; any pointer
 * may be NULL. */
typedef struct mr_rollout_view {
    uint8_t *obs, *act, *done;
    float *extra, *logp, *val, *rew, *adv, *ret, *last_value;
} mr_rollout_view;
mr_status mr_trainer_read_rollout(mr_trainer *t, mr_rollout_view *out, mr_error *err);
/* Data-parallel (trainer_ranks.c): this rank's mean and unbiased std of x
 * (t->B values), summed over the ranks by t->reducer.sum; the global mean
 * and std into out2 (2 doubles, backend memory), *n the global count. */
mr_status mr_trainer_global_stats(mr_trainer *t, const float *x, double *out2, int64_t *n, mr_error *err);
mr_status mr_trainer_timing_get(const mr_trainer *t, mr_trainer_timing *out, mr_error *err);

/* trainer_metrics.c: what an update reports. The profiling marks: k-th
 * event (2 around each rollout step, then MR_UPDATE_MARKS per minibatch:
 * before the gather, after it and the zeroed gradients, the forward, the
 * loss, the backward, the step); recorded only while profiling is on. */
enum { MR_UPDATE_MARKS = 6 };
int mr_trainer_rollout_marks(const mr_trainer *t);
mr_status mr_trainer_mark(mr_trainer *t, int k, mr_error *err);
mr_status mr_trainer_update_mark(mr_trainer *t, int epoch, int mb, int phase, mr_error *err);
/* t->timing from the update's events; the metrics row of the update just run */
void mr_trainer_read_timing(mr_trainer *t);
void mr_trainer_fill_metrics(const mr_trainer *t, const mr_loop_metrics *h, double lr, double clip, double ent,
                             mr_metrics *out);
/* Whether the last update replayed recorded graphs; why not, when wanted. */
int mr_trainer_graphs_used(const mr_trainer *t, const char **why_not);
mr_status mr_trainer_devmem(const mr_trainer *t, mr_devmem_stats *out, mr_error *err);
/* Sets the fp16 loss scale in the optimizer's control block (tests of the scaler). */
mr_status mr_trainer_set_loss_scale(mr_trainer *t, float scale, mr_error *err);

#endif

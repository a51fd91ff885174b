/*
 * trainer_cuda.h - the CUDA backend of the trainer (trainer_cuda.c). Not part
 * of the public API: trainer.c, checkpoint.c and evaluate.c forward to it
 * when t->cuda is set, and the tests use the rest.
 *
 * The trainer calls every GPU operation through a table (mr_tc_ops) whose
 * entries have the signatures of the kernels' C APIs (env_cuda.h,
 * policy_cuda.h, ppo_cuda.h, ppo_loss_cuda.h, rollout_cuda.h, devmem.h).
 * In a CUDA build the real table points at them; spec/c/test_cuda_trainer.c
 * fills one with CPU emulations of the same functions (over the same MR_HD
 * element code and the same policy schedule), so the whole order of
 * operations of an update - buffers, offsets, keys, control blocks,
 * checkpoints - runs and is compared with the CPU trainer without a GPU.
 */
#ifndef MR_TRAINER_CUDA_H
#define MR_TRAINER_CUDA_H
#include "moonrl.h"
#include "devmem.h"
#include "env.h"
#include "ppo_math.h"
#include "ppo_loss_math.h"
#include "policy_cuda.h"
#include "rollout_cuda.h"

typedef struct mr_trainer_cuda mr_trainer_cuda;

/* The GPU operations of the trainer. "Device" pointers are whatever the
 * table's memory backend hands out; streams and events are opaque. */
typedef struct mr_tc_ops {
    const char *name;   /* "cuda", or the emulation's name */
    /* runtime and memory (devmem.h, rollout_cuda.h) */
    mr_status (*set_device)(int device, mr_error *err);
    mr_status (*device_name)(int device, char *buf, size_t len, mr_error *err);
    mr_status (*device_backend)(int device, mr_devmem_backend *out, mr_error *err);
    mr_status (*pinned_backend)(mr_devmem_backend *out, mr_error *err);
    mr_status (*copy)(void *dst, const void *src, size_t bytes, int kind, void *stream, mr_error *err);
    mr_status (*memset)(void *dst, int value, size_t bytes, void *stream, mr_error *err);
    mr_status (*stream_create)(void **stream, mr_error *err);
    void (*stream_destroy)(void *stream);
    mr_status (*stream_sync)(void *stream, mr_error *err);
    mr_status (*event_create)(void **ev, mr_error *err);
    void (*event_destroy)(void *ev);
    mr_status (*event_record)(void *ev, void *stream, mr_error *err);
    mr_status (*event_sync)(void *ev, mr_error *err);
    mr_status (*event_elapsed)(void *a, void *b, float *ms, mr_error *err);
    /* environment (env_cuda.h) */
    mr_status (*env_reset_all)(const mr_forage *s, void *stream, mr_error *err);
    mr_status (*env_step_all)(const mr_forage *s, const uint8_t *d_actions, void *stream, mr_error *err);
    mr_status (*env_clear_logs)(const mr_forage *s, void *stream, mr_error *err);
    mr_status (*env_log_reduce)(const mr_forage *s, mr_forage_log *d_out, void *stream, mr_error *err);
    /* policy (policy_cuda.h) */
    mr_status (*policy_create)(mr_policy_cuda *pc, const mr_policy_config *cfg, int view, int max_batch, int chunk,
                               int precision, mr_devmem *dev, mr_error *err);
    void (*policy_destroy)(mr_policy_cuda *pc);
    mr_status (*policy_zero_grad)(mr_policy_cuda *pc, void *stream, mr_error *err);
    mr_status (*policy_forward)(mr_policy_cuda *pc, const uint8_t *codes, const float *extra, int B, int proxy,
                                float *logits, float *value, void *stream, mr_error *err);
    mr_status (*policy_backward)(mr_policy_cuda *pc, const float *dlogits, const float *dvalue, int B, void *stream,
                                 mr_error *err);
    /* PPO (ppo_cuda.h, ppo_loss_cuda.h) */
    mr_status (*gae)(int T, int N, const float *reward, const float *value, const float *last_value,
                     const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                     mr_error *err);
    mr_status (*sample)(int N, const float *logits, const float *u, uint8_t *action, float *logp, void *stream,
                        mr_error *err);
    mr_status (*opt_begin)(mr_optctl *d_ctl, void *stream, mr_error *err);
    mr_status (*opt_step)(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                          double *partials, mr_optctl *d_ctl, void *stream, mr_error *err);
    mr_status (*mean_std)(const float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err);
    mr_status (*normalize)(float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err);
    mr_status (*ppo_loss)(int B, const float *logits, const float *value, const uint8_t *action,
                          const float *old_logp, const float *adv, const float *old_value, const float *target,
                          mr_lossctl *d_ctl, mr_optctl *d_opt, double *partials, float *dlogits, float *dvalue,
                          void *stream, mr_error *err);
    mr_status (*popart_update)(mr_popart_ctl *d_pa, const float *returns, int64_t n, double *partials, float *w,
                               float *b, int k, float *adam_m_w, float *adam_v_w, float *adam_m_b, float *adam_v_b,
                               void *stream, mr_error *err);
    /* glue (rollout_cuda.h) */
    mr_status (*step_in)(const mr_forage *s, uint64_t seed, float *extra, float *u, void *stream, mr_error *err);
    mr_status (*step_out)(const mr_forage *s, const mr_popart_ctl *d_pa, const float *value, float *val, float *rew,
                          uint8_t *done, void *stream, mr_error *err);
    mr_status (*gather)(const mr_tc_gather_args *a, const mr_popart_ctl *d_pa, void *stream, mr_error *err);
    mr_status (*diff)(const float *a, const float *b, float *out, int64_t n, void *stream, mr_error *err);
    mr_status (*accumulate)(mr_tc_metrics *d_m, const mr_lossctl *d_loss, const mr_optctl *d_opt, int ngroups,
                            void *stream, mr_error *err);
    mr_status (*finish)(mr_tc_metrics *d_m, const mr_popart_ctl *d_pa, const mr_optctl *d_opt, void *stream,
                        mr_error *err);
    /* CUDA graphs (graph_cuda.h); NULL: the table cannot record, every
     * update is queued kernel by kernel whatever cuda.graphs says */
    mr_status (*graph_begin)(void *stream, mr_error *err);
    mr_status (*graph_end)(void *stream, int discard, void **exec, mr_error *err);
    mr_status (*graph_launch)(void *exec, void *stream, mr_error *err);
    void (*graph_destroy)(void *exec);
} mr_tc_ops;

/* Device memory of a CUDA trainer, by component (bytes as requested from
 * the memory manager, before its 512-byte rounding). */
typedef struct mr_tc_plan {
    int max_batch;             /* the policy's: max(minibatch, num_envs) */
    size_t env_bytes;          /* environment state (mr_forage_layout) */
    size_t policy_bytes;       /* parameters, gradients, activations, workspace */
    size_t optim_bytes;        /* Adam m and v */
    size_t rollout_bytes;      /* rollout, per-step, minibatch, permutation, reduction scratch */
    size_t ctl_bytes;          /* control blocks and the metrics struct */
    size_t partial_doubles;    /* reduction scratch */
    size_t device_bytes;       /* the sum of the five */
    size_t pinned_bytes;       /* page-locked host staging */
    size_t host_bytes;         /* the host arena: CPU copies for checkpoints, evaluation, snapshots */
} mr_tc_plan;

/* Sizes of a CUDA trainer for cfg (validated here); touches no GPU. */
mr_status mr_trainer_cuda_plan(const mr_config *cfg, mr_tc_plan *out, mr_error *err);

/* The table of the real kernels; NULL in a build without CUDA. */
const mr_tc_ops *mr_tc_cuda_ops(void);

/* mr_trainer_create's CUDA path: checks that this build has CUDA and the
 * machine a usable GPU (else MR_ERR_BACKEND with a message), then creates. */
mr_status mr_trainer_cuda_create(const mr_config *cfg, mr_trainer **out, mr_error *err);
/* The same over any table (the CPU test's emulation). cfg->device is kept as
 * given; the trainer runs on ops whatever it says. */
mr_status mr_trainer_cuda_create_ops(const mr_config *cfg, const mr_tc_ops *ops, mr_trainer **out, mr_error *err);
void mr_trainer_cuda_free(mr_trainer *t);
mr_status mr_trainer_cuda_update(mr_trainer *t, mr_metrics *out, mr_error *err);
mr_status mr_trainer_cuda_memory(const mr_trainer *t, mr_memory_stats *out, mr_error *err);

/* Copies between the device state and the trainer's host copies (t->pol,
 * t->adam_m/v, t->adam_step, t->popart, t->env), synchronously:
 *   MR_TC_WEIGHTS    parameters and PopArt (evaluation, inference)
 *   MR_TC_LEARNABLE  + Adam moments and step (snapshot / restore)
 *   MR_TC_ALL        + the environment state (checkpoints)
 * push after a load also takes the run's seed from t->cfg. The fp16 loss
 * scale and its growth tracker stay on the device (not checkpointed). After
 * a failed update pull is refused (MR_ERR_STATE) until a push of MR_TC_ALL
 * (a checkpoint load) makes the device state whole again. */
enum { MR_TC_WEIGHTS = 1, MR_TC_LEARNABLE = 2, MR_TC_ALL = 3 };
mr_status mr_trainer_cuda_pull(mr_trainer *t, int what, mr_error *err);
mr_status mr_trainer_cuda_push(mr_trainer *t, int what, mr_error *err);

/* ---- for tests and benchmarks ---- */

/* Host copies of the last update's rollout, each (T*N[,...]) as the CPU
 * trainer's buffers of the same names; any pointer may be NULL. */
typedef struct mr_tc_rollout_view {
    uint8_t *obs, *act, *done;
    float *extra, *logp, *val, *rew, *adv, *ret, *last_value;
} mr_tc_rollout_view;
mr_status mr_trainer_cuda_read_rollout(mr_trainer *t, mr_tc_rollout_view *out, mr_error *err);

/* Per-phase GPU times of the last update, seconds (device events). env and
 * inference are measured only with profiling on (events around every rollout
 * step); otherwise they are 0 and rollout is the whole rollout. */
typedef struct mr_tc_timing {
    double rollout, gae, update;       /* rollout; GAE + PopArt + normalisation; the epochs */
    double env, inference;             /* profiling: env step + rollout bookkeeping; obs copy + forward + sampling */
} mr_tc_timing;
mr_status mr_trainer_cuda_set_profile(mr_trainer *t, int on, mr_error *err);
/* Whether the last update replayed recorded CUDA graphs (1), was queued
 * kernel by kernel (0); why not, when graphs are wanted but unavailable. */
int mr_trainer_cuda_graphs_used(const mr_trainer *t, const char **why_not);
mr_status mr_trainer_cuda_timing(const mr_trainer *t, mr_tc_timing *out, mr_error *err);
/* The device memory manager's numbers. */
mr_status mr_trainer_cuda_devmem(const mr_trainer *t, mr_devmem_stats *out, mr_error *err);
/* Sets the fp16 loss scale on the device (tests of the scaler). */
mr_status mr_trainer_cuda_set_loss_scale(mr_trainer *t, float scale, mr_error *err);

#endif /* MR_TRAINER_CUDA_H */

/*
 * backend.h - the table of operations the one trainer loop (trainer.c) runs
 * on. Two backends fill it: cpu (cpu/backend_cpu.c: host memory, C loops
 * over the shared element code, OpenMP, OpenBLAS) and cuda
 * (kernels/backend_cuda.c: device memory, the kernels in kernels/). Tests wrap
 * a table to make any operation fail.
 *
 * Memory: every buffer a backend operation touches comes from the trainer's
 * memory manager (devmem.h) over the backend's `device_memory`; "device
 * pointer" below means such memory (host memory on the cpu). Streams and
 * events are opaque; the cpu runs everything at once, so its events are
 * timestamps. Control blocks (mr_optctl, mr_lossctl, mr_popart_ctl,
 * mr_loop_metrics: shared/) are written by the host before an update and by
 * the operations during it, so no value is read back inside an update.
 *
 * Every operation returns MR_OK or a status with a message in err.
 */
#ifndef MR_BACKEND_H
#define MR_BACKEND_H
#include "moonrl.h"
#include "devmem.h"
#include "arena.h"
#include "net_layout.h"     /* mr_net_layout: the parameter layout every backend shares */
#include "trainer_loop_math.h"   /* the loop's steps, its metrics block, gather arguments; with it the optimizer's
                                    and the loss's control blocks (optimizer_math.h, ppo_loss_math.h) */
#include "act_head.h"       /* mr_act_head: the Gaussian and multi-discrete heads' shapes */

#define MR_BACKEND_MAX_POLICY_ALLOCS 4

/* A backend's network. params and grads: device pointers in the layout of
 * `net` (offsets, n_params, n_policy); impl: the backend's object. */
typedef struct mr_bpolicy {
    void *impl;
    float *params, *grads;
    const mr_net_layout *net;
} mr_bpolicy;

/* What a backend's network takes from the memory manager, in creation's
 * order and sizes (the trainer's out-of-memory sizing replays them). */
typedef struct mr_bpolicy_plan {
    int n;
    size_t bytes[MR_BACKEND_MAX_POLICY_ALLOCS];
    size_t total;
} mr_bpolicy_plan;

typedef struct mr_backend {
    const char *name;              /* "cpu", "cuda", or a test's wrapper */
    mr_device device;              /* what mr_trainer_config reports */
    int host_memory;               /* 1: "device" memory is host memory (cpu) */
    int precisions;                /* bit mask of accepted mr_precision values (1 << MR_FP32 ...) */
    int cheap_events;              /* 1: per-step timing costs nothing, so it is always on */
    /* NULL entries below `plan` and unavailable says why this build or
     * machine cannot run it (e.g. no CUDA); planning always works */
    const char *unavailable;

    /* ---- what the machine has (every build; NULL: nothing to ask) */
    int (*device_count)(void);          /* usable devices: 0 where none (cuda: GPUs; the cpu: NULL) */
    const char *(*blas)(void);          /* the BLAS its products run and its kernel set ("OpenBLAS 0.3.21 ...,
                                         * Zen kernels"), or NULL */
    const char *(*blas_kernels)(void);  /* moonrl.h's mr_blas_kernels and mr_blas_better_kernels, */
    const char *(*blas_better_kernels)(void);   /* answered by the host's backend */
    const char *(*cudnn)(void);         /* moonrl.h's mr_cuda_cudnn (cuda; NULL: none) */
    /* moonrl.h's mr_cuda_conv_time (cuda with CUDA; NULL: none) */
    mr_status (*conv_time)(int device, int H, int W, int C, int OC, int chunk, int precision, int reps,
                           mr_cuda_conv_timing *out, mr_error *err);

    /* ---- planning (every build) */
    /* cpu: mr_config's cpu.* (the cpu backend's convolutions and what its
     * training forward keeps; others ignore it); cuda: mr_config's cuda.*
     * (the cuda backend's convolutions; NULL: im2col; others ignore it) */
    mr_status (*policy_plan)(const mr_policy_config *cfg, int view, int max_train, int max_act, int precision,
                             const mr_cpu_config *cpu, const mr_cuda_config *cuda, mr_bpolicy_plan *out,
                             mr_error *err);

    /* ---- runtime and memory */
    /* Makes the calling thread use this device and thread count. */
    mr_status (*enter)(int device, int threads, mr_error *err);
    /* A line for the description: "GPU 0 (NVIDIA H100), bf16". */
    void (*describe)(int device, int threads, int precision, char *buf, size_t len);
    /* How this backend runs the network p (NULL: not yet created), for the
     * trainer's description; NULL entry: nothing to say. */
    void (*policy_describe)(const struct mr_bpolicy *p, int precision, char *buf, size_t len);
    mr_status (*device_memory)(int device, mr_devmem_backend *out, mr_error *err);
    mr_status (*staging_memory)(mr_devmem_backend *out, mr_error *err);   /* pinned host memory on cuda */
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

    /* ---- environment (s holds device pointers) */
    mr_status (*env_reset_all)(const mr_env_state *s, void *stream, mr_error *err);
    mr_status (*env_step_all)(const mr_env_state *s, const uint8_t *actions, void *stream, mr_error *err);
    /* One step of every instance on an action drawn where it runs
     * (env_state.h's mr_env_random_action over na actions), each written to
     * actions (n bytes, device) first; NULL where not offered. */
    mr_status (*env_step_random)(const mr_env_state *s, uint64_t seed, int na, uint8_t *actions, void *stream,
                                 mr_error *err);
    mr_status (*env_clear_logs)(const mr_env_state *s, void *stream, mr_error *err);
    mr_status (*env_log_reduce)(const mr_env_state *s, mr_env_log *out, void *stream, mr_error *err);

    /* ---- policy: observations (B,VV) u8 cell codes, or (B,obs_vector) floats passed as
     * their bytes (the MLP trunk), extra (B,2) -> logits (B,8), value (B) raw */
    mr_status (*policy_create)(mr_bpolicy *p, const mr_policy_config *cfg, int view, int max_train, int max_act,
                               int precision, const mr_cpu_config *cpu, const mr_cuda_config *cuda, mr_devmem *mem,
                               mr_error *err);
    void (*policy_destroy)(mr_bpolicy *p);
    mr_status (*policy_zero_grad)(mr_bpolicy *p, void *stream, mr_error *err);
    /* The rollout's inference (B <= max_act): keeps nothing for backward. */
    mr_status (*policy_act)(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy, float *logits,
                            float *value, void *stream, mr_error *err);
    /* The training forward (B <= max_train), kept for policy_backward. */
    mr_status (*policy_forward)(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                                float *logits, float *value, void *stream, mr_error *err);
    mr_status (*policy_backward)(mr_bpolicy *p, const float *dlogits, const float *dvalue, int B, void *stream,
                                 mr_error *err);
    /* Optional (NULL where not offered; the trainer then runs policy_act
     * and policy_forward). With one minibatch the first epoch's forward
     * would recompute what the rollout's acts computed (the same parameters,
     * the same samples), so the rollout acts through policy_act_keep, which
     * is policy_act that also keeps at rows [row0, row0 + B) of the training
     * batch what policy_backward reads, and the first epoch calls
     * policy_forward_kept: the value head again over the kept rows (PopArt
     * may have rescaled it) into value (B) raw, the logits being act's, and
     * the kept rows become the forward policy_backward differentiates. */
    mr_status (*policy_act_keep)(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                                 float *logits, float *value, int row0, void *stream, mr_error *err);
    mr_status (*policy_forward_kept)(mr_bpolicy *p, int B, int proxy, float *value, void *stream, mr_error *err);

    /* ---- the host copy of the network: NULL unless host_memory. The
     * trainer keeps its weights (checkpoints, initialisation) and runs
     * evaluation and inference on the host backend's network, laid out in
     * the trainer's host arena and acting through policy_act (stream NULL)
     * with the env_* and sample operations above on host buffers. */
    /* Lays the network out in a (run twice: plan, then commit; on a
     * planning arena every pointer is NULL), for acting only (no training
     * activations); chunk: samples per conv chunk; conv: an mr_cpu_conv. */
    void (*host_policy_layout)(mr_bpolicy *p, const mr_policy_config *cfg, int view, int chunk, int conv,
                               mr_arena *a);
    /* The initial weights for a seed (orthogonal, cpu/policy.h: the same
     * bits for any thread count). */
    mr_status (*host_policy_init)(mr_bpolicy *p, uint64_t seed, mr_error *err);
    /* Releases what the layout holds outside the arena; safe on a zeroed p. */
    void (*host_policy_free)(mr_bpolicy *p);

    /* ---- PPO (partials: the reduction scratch, plan.partial_doubles) */
    mr_status (*gae)(int T, int N, const float *reward, const float *value, const float *last_value,
                     const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                     mr_error *err);
    /* logits (N, na): na = the environment's action count */
    mr_status (*sample)(int N, int na, const float *logits, const float *u, uint8_t *action, float *logp,
                        void *stream, mr_error *err);
    /* A box of d = h->n floats (the Gaussian head; NULL where not offered; h: host memory): logits (N, 2d)
     * = [mean, log_std], eps (N, d) standard normals -> action (N, d) the stored sample x = mean + std eps,
     * env_action (N, d) what the environment gets (x clipped, or squashed by tanh: h->squash), logp (N). */
    mr_status (*sample_box)(int N, const mr_act_head *h, const float *logits, const float *eps, float *action,
                            float *env_action, float *logp, void *stream, mr_error *err);
    /* k = h->n categorical heads (multi-discrete; NULL where not offered): logits (N, h->logits), u (N, k)
     * uniforms -> action (N, k) bytes, logp (N) the joint log-probability. */
    mr_status (*sample_md)(int N, const mr_act_head *h, const float *logits, const float *u, uint8_t *action,
                           float *logp, void *stream, mr_error *err);
    mr_status (*opt_begin)(mr_optctl *ctl, void *stream, mr_error *err);
    /* Per group: norm, clip, Adam; skips every group when the step found a
     * non-finite loss or gradient (ctl->s.found_inf). */
    mr_status (*opt_step)(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                          double *partials, mr_optctl *ctl, void *stream, mr_error *err);
    /* out2 = mean, unbiased std of x (n); normalize also applies (x - mean) / (std + eps), and with
     * partials NULL takes out2 as given (data-parallel: every rank's statistics, reduced by the trainer). */
    mr_status (*mean_std)(const float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err);
    mr_status (*normalize)(float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err);
    mr_status (*ppo_loss)(int B, const float *logits, const float *value, const uint8_t *action,
                          const float *old_logp, const float *adv, const float *old_value, const float *target,
                          mr_lossctl *loss, mr_optctl *opt, double *partials, float *dlogits, float *dvalue,
                          void *stream, mr_error *err);
    /* The same for a box (NULL where not offered): logits (B, 2d), action (B, d) the stored samples. */
    mr_status (*ppo_loss_box)(int B, const mr_act_head *h, const float *logits, const float *value,
                              const float *action, const float *old_logp, const float *adv, const float *old_value,
                              const float *target, mr_lossctl *loss, mr_optctl *opt, double *partials,
                              float *dlogits, float *dvalue, void *stream, mr_error *err);
    /* And for multi-discrete actions (NULL where not offered): logits (B, h->logits), action (B, h->n) bytes. */
    mr_status (*ppo_loss_md)(int B, const mr_act_head *h, const float *logits, const float *value,
                             const uint8_t *action, const float *old_logp, const float *adv, const float *old_value,
                             const float *target, mr_lossctl *loss, mr_optctl *opt, double *partials,
                             float *dlogits, float *dvalue, void *stream, mr_error *err);
    /* returns NULL: pa->batch already holds the mean and std of the n returns
     * (data-parallel: every rank's; the trainer computed and reduced them) */
    mr_status (*popart_update)(mr_popart_ctl *pa, const float *returns, int64_t n, double *partials, float *w,
                               float *b, int k, float *adam_m_w, float *adam_v_w, float *adam_m_b, float *adam_v_b,
                               void *stream, mr_error *err);

    /* ---- the loop's glue (trainer_loop_math.h's elements) */
    mr_status (*step_in)(const mr_env_state *s, uint64_t seed, float *extra, float *u, void *stream, mr_error *err);
    mr_status (*step_out)(const mr_env_state *s, const mr_popart_ctl *pa, const float *value, float *val, float *rew,
                          uint8_t *done, void *stream, mr_error *err);
    /* ppo.truncation = bootstrap (trainer_loop_math.h's mr_loop_final_args; f in host memory, its buffers the
     * backend's): keep_final after each step's env_step_all (the step's rows start at row0 = t * N),
     * add_final once the critic has valued the kf * N slots into f->value (rew (T, N) += gamma V). */
    mr_status (*keep_final)(const mr_env_state *s, const mr_loop_final_args *f, int row0, void *stream, mr_error *err);
    mr_status (*add_final)(const mr_loop_final_args *f, const mr_popart_ctl *pa, float gamma, float *rew, void *stream,
                           mr_error *err);
    mr_status (*gather)(const mr_loop_gather_args *a, const mr_popart_ctl *pa, void *stream, mr_error *err);
    mr_status (*diff)(const float *a, const float *b, float *out, int64_t n, void *stream, mr_error *err);
    mr_status (*accumulate)(mr_loop_metrics *m, const mr_lossctl *loss, const mr_optctl *opt, int ngroups,
                            void *stream, mr_error *err);
    mr_status (*finish)(mr_loop_metrics *m, const mr_popart_ctl *pa, const mr_optctl *opt, void *stream,
                        mr_error *err);

    /* ---- graphs: NULL where the backend cannot record an update */
    mr_status (*graph_begin)(void *stream, mr_error *err);
    mr_status (*graph_end)(void *stream, int discard, void **exec, mr_error *err);
    mr_status (*graph_launch)(void *exec, void *stream, mr_error *err);
    void (*graph_destroy)(void *exec);
} mr_backend;

/* The two tables. cuda's is there in every build (its planning answers
 * mr_config_device_bytes); its runtime entries are NULL and `unavailable`
 * set in a build without CUDA. */
const mr_backend *mr_backend_cpu(void);
const mr_backend *mr_backend_cuda(void);

/* What core calls (core/backend_select.c, the only caller of the two above):
 * the table of MR_DEVICE_CPU or MR_DEVICE_CUDA (auto: the cpu's; choosing
 * for auto is mr_trainer_create's), and the host's. */
const mr_backend *mr_backend_for(int device);
const mr_backend *mr_backend_host(void);

#endif /* MR_BACKEND_H */

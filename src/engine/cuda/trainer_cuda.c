/*
 * trainer_cuda.c - one PPO update on the CUDA backend: the CPU trainer's
 * update (trainer.c), step for step, with every tensor in device memory and
 * no host round-trip inside an update.
 *
 * Data flow of an update (T rollout steps, N envs, B = T*N samples, M per
 * minibatch), all on one stream:
 *   uploads    the update's hyper-parameters (lr, clip, entropy coefficient
 *              from the schedules; hot values) into the optimizer and loss
 *              control blocks, from pinned memory
 *   rollout    per step: obs codes -> rollout row (copy); step_in (critic
 *              counts, action uniforms keyed as the CPU's); policy forward;
 *              sampling -> act, logp; env step; step_out -> val, rew, done.
 *              Then the bootstrap value of the state after the last step.
 *   GAE        adv, ret; explained variance (mean/std of ret and ret - val);
 *              PopArt update (statistics and last layer on the device);
 *              advantage normalisation
 *   epochs     per epoch the permutation (made on the host while the GPU
 *              runs the rollout: it is trainer.c's sequential Fisher-Yates,
 *              keyed the same) is uploaded; per minibatch: gather, optimizer
 *              begin, zero grads, forward, PPO loss (scaled by the fp16 loss
 *              scale), backward, grad norm per group + clip + fused Adam +
 *              scaler (ppo.cu: the skip decision stays on the device),
 *              metrics accumulation
 *   metrics    episode logs reduced on the device, one struct finished and
 *              copied to pinned memory; the update waits for it at its very
 *              end (the one synchronisation per update) and hands it over.
 *
 * Every GPU operation goes through an mr_tc_ops table (trainer_cuda.h): the
 * real kernels in a CUDA build, a CPU emulation in the tests
 * (spec/c/test_cuda_trainer.c). Every device buffer comes from the trainer's
 * memory manager (devmem.h), all of it at creation: an update allocates
 * nothing. When the card is too small, creation fails with the manager's
 * message (the request, the card's state) and the largest num_envs that
 * fits, found by replaying creation's allocations on a made-up card.
 *
 * A failed update leaves the device state somewhere inside an update: the
 * trainer then refuses updates and host copies (so no checkpoint of a state
 * no run reached is written) until a checkpoint is loaded into it.
 *
 * The trainer keeps host copies of the learnable state and the environment
 * in the same mr_trainer fields the CPU trainer uses, filled on demand
 * (mr_trainer_cuda_pull): checkpoints (checkpoint.c, the same MOONRLCK
 * sections, so CPU and CUDA checkpoints load into each other where shapes
 * match), snapshots, and evaluation and inference, which run on the CPU
 * copy of the weights (evaluate.c).
 *
 * Differences from the CPU trainer, deliberately: a non-finite loss or
 * gradient skips the optimizer step on the device in every precision
 * (fp32/bf16 report it as the CPU does, MR_ERR_NUMERIC; in fp16 a skipped
 * step is the loss scaler's normal overflow handling and only a non-finite
 * loss is an error); the fp16 loss scale is not checkpointed.
 */
#include "trainer.h"
#include "trainer_cuda.h"
#include "errors.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env_cuda.h"                    /* the environment kernels' entry points in a CUDA build */
#include "ppo_cuda.h"
#include "ppo_loss_cuda.h"    /* mr_loss_hyper_set, mr_popart_ctl_set / _get */
#include "graph_cuda.h"

#define NUM_ACTIONS 8
#define HOST_POLICY_CHUNK 32     /* the host copy's policy: evaluation and inference (as trainer.c) */
#define NGROUPS 2                /* policy (trunk + actor), value (critic): clipped separately */
#define FP16_INITIAL_SCALE 65536.0f   /* torch's GradScaler */

enum { EV_START, EV_ROLLOUT, EV_GAE, EV_END, EV_COUNT };
#define PARTS 3                  /* an update's parts, one graph each: rollout; GAE; epochs (enqueue_update) */

struct mr_trainer_cuda {
    const mr_tc_ops *ops;
    mr_tc_plan plan;
    int device, precision;
    int broken;                /* an update failed midway: the device state is not trustworthy */
    char gpu_name[96];
    void *stream;
    mr_devmem mem, pinned;
    int mem_ready, pinned_ready;
    size_t card_total, card_free;   /* the card when the trainer was created (out-of-memory hints) */

    /* device */
    mr_forage env;             /* device pointers, carved from env_block like the host copy */
    void *env_block;
    mr_policy_cuda pc;
    int pc_ready;
    mr_opt_groups groups;
    float *adam_m, *adam_v;    /* one block: m then v */
    void *roll_block;
    uint8_t *obs, *act, *done;                  /* (T,N,VV), (T,N), (T,N) */
    float *extra, *logp, *val, *rew, *adv, *ret, *diff;   /* (T,N[,2]) */
    float *last_value;                          /* (N) */
    float *step_logits, *step_value, *step_u, *step_extra;
    int32_t *perm;                              /* (B): this epoch's permutation */
    uint8_t *mb_obs, *mb_act;
    float *mb_extra, *mb_logp, *mb_adv, *mb_oldv, *mb_target;
    float *mb_logits, *mb_value, *mb_dlogits, *mb_dvalue;
    double *partials;
    void *ctl_block;
    mr_optctl *d_opt;
    mr_lossctl *d_loss;
    mr_popart_ctl *d_pa;
    mr_tc_metrics *d_met;

    /* pinned host staging */
    void *pin_block;
    mr_optctl *h_opt;
    mr_lossctl *h_loss;
    mr_popart_ctl *h_pa;
    mr_tc_metrics *h_met;
    int32_t *h_perm;           /* (epochs, B) */

    void *ev[EV_COUNT];
    /* CUDA graphs (cuda.graphs): the update recorded as three graphs, one
     * per timed phase (PARTS), so the phases' events are recorded between
     * them (a cudaEventRecord inside a capture is no node of the graph: a
     * replay would never record it) and the host makes the epochs'
     * permutations while the first two run. Recorded at the second update
     * (the first, eager, is the warm-up: cuBLAS's lazy set-up must not
     * happen inside a capture) and replayed from then on; dropped when a
     * by-value argument of a recorded launch may have changed (a checkpoint
     * load or restore: the seed). */
    void *graph[PARTS];
    int graphs_used;           /* the last update replayed them */
    int warm;                  /* an update has run kernel by kernel in this trainer */
    int graphs_failed;         /* recording failed once: queued kernel by kernel from then on */
    char graphs_why[200];
    int profile;
    void **pev;                /* profiling: 2T+1 events around the rollout steps */
    int npev;
    mr_tc_timing timing;
};

static void drop_graphs(mr_trainer_cuda *c);

typedef struct tc_dims {
    int T, N, V, VV, B, M, E, MB;
    size_t P, Pp;
} tc_dims;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TRY(call)                         \
    do {                                  \
        mr_status st_ = (call);           \
        if (st_ != MR_OK) return st_;     \
    } while (0)

/* ------------------------------------------------------------------ layout */

static tc_dims dims_of(const mr_config *cfg, size_t P, size_t Pp) {
    tc_dims d;
    d.T = cfg->ppo.rollout_steps;
    d.N = cfg->env.num_envs;
    d.V = 2 * cfg->env.view_range + 1;
    d.VV = d.V * d.V;
    d.B = d.T * d.N;
    d.M = d.B / cfg->ppo.minibatches;
    d.E = cfg->ppo.epochs;
    d.MB = cfg->ppo.minibatches;
    d.P = P;
    d.Pp = Pp;
    return d;
}

/* The rollout block: rollout rows, per-step buffers, the minibatch, the
 * permutation and the reduction scratch. Run on a planning arena (sizes) and
 * on one carved over the device block (pointers only; nothing is touched). */
static void rollout_layout(mr_trainer_cuda *c, const tc_dims *d, size_t partial_doubles, mr_arena *a) {
    const size_t B = (size_t)d->B, N = (size_t)d->N, M = (size_t)d->M, VV = (size_t)d->VV;
    c->obs = MR_TAKE(a, uint8_t, B * VV);
    c->extra = MR_TAKE(a, float, B * 2);
    c->act = MR_TAKE(a, uint8_t, B);
    c->logp = MR_TAKE(a, float, B);
    c->val = MR_TAKE(a, float, B);
    c->rew = MR_TAKE(a, float, B);
    c->done = MR_TAKE(a, uint8_t, B);
    c->adv = MR_TAKE(a, float, B);
    c->ret = MR_TAKE(a, float, B);
    c->diff = MR_TAKE(a, float, B);
    c->last_value = MR_TAKE(a, float, N);
    c->step_logits = MR_TAKE(a, float, N * NUM_ACTIONS);
    c->step_value = MR_TAKE(a, float, N);
    c->step_u = MR_TAKE(a, float, N);
    c->step_extra = MR_TAKE(a, float, N * 2);
    c->perm = MR_TAKE(a, int32_t, B);
    c->mb_obs = MR_TAKE(a, uint8_t, M * VV);
    c->mb_act = MR_TAKE(a, uint8_t, M);
    c->mb_extra = MR_TAKE(a, float, M * 2);
    c->mb_logp = MR_TAKE(a, float, M);
    c->mb_adv = MR_TAKE(a, float, M);
    c->mb_oldv = MR_TAKE(a, float, M);
    c->mb_target = MR_TAKE(a, float, M);
    c->mb_logits = MR_TAKE(a, float, M * NUM_ACTIONS);
    c->mb_value = MR_TAKE(a, float, M);
    c->mb_dlogits = MR_TAKE(a, float, M * NUM_ACTIONS);
    c->mb_dvalue = MR_TAKE(a, float, M);
    c->partials = MR_TAKE(a, double, partial_doubles);
}

static void ctl_layout(mr_trainer_cuda *c, mr_arena *a) {
    c->d_opt = MR_TAKE(a, mr_optctl, 1);
    c->d_loss = MR_TAKE(a, mr_lossctl, 1);
    c->d_pa = MR_TAKE(a, mr_popart_ctl, 1);
    c->d_met = MR_TAKE(a, mr_tc_metrics, 1);
}

static void pinned_layout(mr_trainer_cuda *c, const tc_dims *d, mr_arena *a) {
    c->h_opt = MR_TAKE(a, mr_optctl, 1);
    c->h_loss = MR_TAKE(a, mr_lossctl, 1);
    c->h_pa = MR_TAKE(a, mr_popart_ctl, 1);
    c->h_met = MR_TAKE(a, mr_tc_metrics, 1);
    c->h_perm = MR_TAKE(a, int32_t, (size_t)d->E * (size_t)d->B);
}

/* The host arena. The environment comes first, so its buffers sit at the
 * same offsets from the arena's start as the device copy's from its block,
 * and one copy moves the whole state either way. */
static void host_layout(mr_trainer *t, mr_arena *a) {
    const mr_config *c = &t->cfg;
    mr_forage_layout(&t->env, &c->env, c->seed, a);
    mr_policy_layout(&t->pol, &c->policy, 2 * c->env.view_range + 1, 0, HOST_POLICY_CHUNK, a);
    size_t P = t->pol.n_params;
    t->adam_m = MR_TAKE(a, float, P);
    t->adam_v = MR_TAKE(a, float, P);
    t->snap_params = MR_TAKE(a, float, P);
    t->snap_m = MR_TAKE(a, float, P);
    t->snap_v = MR_TAKE(a, float, P);
    t->log_sum = MR_TAKE(a, mr_forage_log, 1);
}

/* The device part of the plan (everything but host_bytes) and the policy's
 * own plan; cfg is not validated here. c: scratch for the layouts. */
static mr_status plan_device(const mr_config *cfg, mr_trainer_cuda *c, mr_tc_plan *out, mr_pc_plan *pl,
                             mr_error *err) {
    memset(out, 0, sizeof *out);
    const int V = 2 * cfg->env.view_range + 1;
    tc_dims d = dims_of(cfg, 0, 0);
    out->max_batch = d.M > d.N ? d.M : d.N;
    TRY(mr_pc_plan_make(pl, &cfg->policy, V, out->max_batch, 0, cfg->precision, err));
    d = dims_of(cfg, pl->net.n_params, pl->net.n_policy);
    mr_arena a = {NULL, 0, 0, 0};
    mr_forage env;
    mr_forage_layout(&env, &cfg->env, cfg->seed, &a);
    out->env_bytes = a.size;
    out->policy_bytes = mr_pc_plan_bytes(pl);
    out->optim_bytes = 2 * d.P * sizeof(float);
    mr_opt_groups G;
    memset(&G, 0, sizeof G);
    const int64_t sizes[NGROUPS] = {(int64_t)d.Pp, (int64_t)(d.P - d.Pp)};
    if (mr_opt_groups_plan(NGROUPS, sizes, &G) != 0)
        return mr_fail(err, MR_ERR_ARG, "the CUDA trainer: the network's parameter groups (%zu policy, %zu value) "
                       "cannot be planned", d.Pp, d.P - d.Pp);
    size_t pd = mr_tc_opt_partials(&G), x;
    if ((x = mr_tc_loss_partials(d.M)) > pd) pd = x;
    if ((x = mr_tc_stats_partials(d.B)) > pd) pd = x;
    out->partial_doubles = pd;
    a = (mr_arena){NULL, 0, 0, 0};
    rollout_layout(c, &d, pd, &a);
    out->rollout_bytes = a.size;
    a = (mr_arena){NULL, 0, 0, 0};
    ctl_layout(c, &a);
    out->ctl_bytes = a.size;
    a = (mr_arena){NULL, 0, 0, 0};
    pinned_layout(c, &d, &a);
    out->pinned_bytes = a.size;
    out->device_bytes = out->env_bytes + out->policy_bytes + out->optim_bytes + out->rollout_bytes + out->ctl_bytes;
    return MR_OK;
}

mr_status mr_trainer_cuda_plan(const mr_config *cfg, mr_tc_plan *out, mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_plan: out is NULL");
    memset(out, 0, sizeof *out);
    TRY(mr_config_validate(cfg, err));
    mr_trainer_cuda *c = calloc(1, sizeof *c);
    mr_trainer *t = calloc(1, sizeof *t);
    if (!c || !t) {
        free(c);
        free(t);
        return mr_fail(err, MR_ERR_NOMEM, "out of host memory planning the CUDA trainer");
    }
    mr_pc_plan pl;
    mr_status s = plan_device(cfg, c, out, &pl, err);
    if (s == MR_OK) {
        mr_trainer_fields(t, cfg);
        omp_set_num_threads(t->threads);   /* the host policy sizes per-thread workspaces */
        mr_arena a = {NULL, 0, 0, 0};
        host_layout(t, &a);
        out->host_bytes = a.size;
    }
    free(c);
    free(t);
    if (s == MR_OK) mr_ok(err);
    return s;
}

/* ------------------------------------------------ sizing (out of memory) */

/* A made-up card for replaying a creation's allocations: addresses are
 * never dereferenced (the memory manager only compares and offsets them). */
#define SIZING_SEGS 32
typedef struct sizing_card {
    size_t total, used, other;   /* other: held by someone else */
    uintptr_t next;
    int nseg;
    uintptr_t ptr[SIZING_SEGS];
    size_t size[SIZING_SEGS];
} sizing_card;

static void *sizing_alloc(void *ctx, size_t bytes, const char **reason) {
    sizing_card *k = ctx;
    if (k->used + k->other + bytes > k->total || k->nseg == SIZING_SEGS) {
        *reason = "out of memory";
        return NULL;
    }
    const uintptr_t p = k->next;
    k->next += (bytes + 4095) / 4096 * 4096 + 4096;
    k->ptr[k->nseg] = p;
    k->size[k->nseg++] = bytes;
    k->used += bytes;
    return (void *)p;
}

static void sizing_free(void *ctx, void *p) {
    sizing_card *k = ctx;
    for (int i = 0; i < k->nseg; i++)
        if (k->ptr[i] == (uintptr_t)p) {
            k->used -= k->size[i];
            k->nseg--;
            k->ptr[i] = k->ptr[k->nseg];
            k->size[i] = k->size[k->nseg];
            return;
        }
}

static size_t sizing_free_bytes(void *ctx) {
    const sizing_card *k = ctx;
    return k->total - k->used - k->other;
}

/* 1 when a new trainer for cfg gets its device memory from a card of `total`
 * bytes of which `avail` are free: creation's allocations, in creation's
 * order and sizes, replayed on a memory manager over a made-up card, so the
 * manager's own rounding, segments and limit decide. */
static int fits_on_card(const mr_config *cfg, mr_trainer_cuda *scratch, size_t total, size_t avail) {
    mr_tc_plan plan;
    mr_pc_plan pl;
    if (plan_device(cfg, scratch, &plan, &pl, NULL) != MR_OK) return 0;
    const size_t sizes[] = {plan.env_bytes, pl.param_bytes, pl.param_bytes, pl.ws_bytes,
                            plan.optim_bytes, plan.rollout_bytes, plan.ctl_bytes};
    sizing_card card;
    memset(&card, 0, sizeof card);
    card.total = total;
    card.other = avail < total ? total - avail : 0;
    card.next = (uintptr_t)1 << 32;
    mr_devmem_backend be = {&card, sizing_alloc, sizing_free, sizing_free_bytes, total, "sizing"};
    mr_devmem_config dc;
    mr_devmem_config_default(&dc);
    dc.memory_fraction = cfg->cuda.memory_fraction;
    dc.release_threshold = cfg->cuda.release_threshold;
    mr_devmem m;
    if (mr_devmem_init(&m, &be, &dc, NULL) != MR_OK) return 0;
    int ok = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && ok; i++) {
        void *p;
        ok = mr_devmem_alloc(&m, sizes[i], NULL, &p, NULL) == MR_OK;
    }
    mr_devmem_destroy(&m);
    return ok;
}

/* The largest num_envs <= cfg's that the config accepts (ppo.minibatches
 * divides the batch) and whose trainer fits on the card; 0 when none. The
 * sizes grow with num_envs, so a bisection finds the edge. */
static int largest_fitting_envs(const mr_config *cfg, size_t total, size_t avail) {
    mr_trainer_cuda *scratch = calloc(1, sizeof *scratch);
    if (!scratch) return 0;
    mr_config c = *cfg;
    int lo = 0, hi = cfg->env.num_envs + 1;   /* fits(lo), and hi is taken not to */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        c.env.num_envs = mid;
        if (fits_on_card(&c, scratch, total, avail)) lo = mid;
        else hi = mid;
    }
    for (; lo > 0; lo--) {
        c.env.num_envs = lo;
        if (mr_config_validate(&c, NULL) == MR_OK) break;
    }
    free(scratch);
    return lo;
}

/* After a device allocation of creation failed with MR_ERR_NOMEM (the
 * manager's message names the request and the card's state): appends how
 * many environments would fit. */
static mr_status oom_hint(const mr_trainer *t, mr_status s, mr_error *err) {
    if (s != MR_ERR_NOMEM || !err) return s;
    const mr_trainer_cuda *c = t->cuda;
    const int n = largest_fitting_envs(&t->cfg, c->card_total, c->card_free);
    char need[32];
    mr_devmem_format(c->plan.device_bytes, need, sizeof need);
    const size_t len = strlen(err->msg);
    if (n > 0)
        snprintf(err->msg + len, sizeof err->msg - len,
                 " At most %d environments fit with these settings (env.num_envs = %d needs %s).", n,
                 t->cfg.env.num_envs, need);
    else
        snprintf(err->msg + len, sizeof err->msg - len,
                 " Not even 1 environment fits with these settings (the network's buffers alone are too large).");
    return s;
}

/* ------------------------------------------------------------ creation */

#ifdef MOONRL_HAVE_CUDA
static const mr_tc_ops cuda_ops = {
    .name = "cuda",
    .set_device = mr_cuda_set_device,
    .device_name = mr_cuda_device_name,
    .device_backend = mr_devmem_cuda_backend,
    .pinned_backend = mr_devmem_pinned_backend,
    .copy = mr_cuda_copy,
    .memset = mr_cuda_memset,
    .stream_create = mr_cuda_stream_create,
    .stream_destroy = mr_cuda_stream_destroy,
    .stream_sync = mr_cuda_stream_sync,
    .event_create = mr_cuda_event_create,
    .event_destroy = mr_cuda_event_destroy,
    .event_record = mr_cuda_event_record,
    .event_sync = mr_cuda_event_sync,
    .event_elapsed = mr_cuda_event_elapsed,
    .env_reset_all = mr_forage_cuda_reset_all,
    .env_step_all = mr_forage_cuda_step_all,
    .env_clear_logs = mr_forage_cuda_clear_logs,
    .env_log_reduce = mr_forage_cuda_log_reduce,
    .policy_create = mr_policy_cuda_create,
    .policy_destroy = mr_policy_cuda_destroy,
    .policy_zero_grad = mr_policy_cuda_zero_grad,
    .policy_forward = mr_policy_cuda_forward,
    .policy_backward = mr_policy_cuda_backward,
    .gae = mr_cuda_gae,
    .sample = mr_cuda_sample_actions,
    .opt_begin = mr_cuda_opt_begin,
    .opt_step = mr_cuda_opt_step,
    .mean_std = mr_cuda_mean_std,
    .normalize = mr_cuda_normalize,
    .ppo_loss = mr_cuda_ppo_loss,
    .popart_update = mr_cuda_popart_update,
    .step_in = mr_cuda_tc_step_in,
    .step_out = mr_cuda_tc_step_out,
    .gather = mr_cuda_tc_gather,
    .diff = mr_cuda_tc_diff,
    .accumulate = mr_cuda_tc_accumulate,
    .finish = mr_cuda_tc_finish,
    .graph_begin = mr_cuda_graph_begin,
    .graph_end = mr_cuda_graph_end,
    .graph_launch = mr_cuda_graph_launch,
    .graph_destroy = mr_cuda_graph_destroy,
};
const mr_tc_ops *mr_tc_cuda_ops(void) { return &cuda_ops; }
#else
const mr_tc_ops *mr_tc_cuda_ops(void) { return NULL; }
#endif

mr_status mr_trainer_cuda_create(const mr_config *cfg, mr_trainer **out, mr_error *err) {
    if (out) *out = NULL;
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() <= 0)
        return mr_fail(err, MR_ERR_BACKEND,
                       "device = cuda, but no usable GPU or driver was found (this build runs on GPUs of compute "
                       "capability 9.0 or newer); accepted here: device = \"cpu\", or \"auto\" to fall back to the "
                       "cpu");
    return mr_trainer_cuda_create_ops(cfg, &cuda_ops, out, err);
#else
    (void)cfg;
    return mr_fail(err, MR_ERR_BACKEND,
                   "device = cuda, but this build has no CUDA backend (nvcc was not found when it was built); "
                   "accepted here: device = \"cpu\" or \"auto\"");
#endif
}

/* The update's hyper-parameters, as the CPU trainer forms them. */
static void fill_hyper(const mr_trainer *t, double lr, double clip, double ent, mr_opt_hyper *oh, mr_loss_hyper *lh) {
    const mr_ppo_config *pc = &t->cfg.ppo;
    mr_opt_hyper_default(oh);
    oh->lr = lr;
    oh->beta1 = pc->adam_beta1;
    oh->beta2 = pc->adam_beta2;
    oh->eps = (float)pc->adam_eps;
    for (int g = 0; g < MR_OPT_MAX_GROUPS; g++) oh->max_norm[g] = (float)t->hot.max_grad_norm;
    oh->scaler_enabled = t->cfg.precision == MR_FP16;
    mr_ppo_coefs co;
    memset(&co, 0, sizeof co);
    co.clip = clip;
    co.ent_coef = ent;
    co.vf_coef = t->hot.vf_coef;
    co.ent_floor = t->hot.ent_floor;
    co.ent_floor_coef = t->hot.ent_floor_coef;
    co.value_max_of_means = 1;   /* as trainer.c: max of the two batch MSEs (ENV_SPEC) */
    mr_loss_hyper_set(lh, &co);
}

static const char *prec_name(int p) { return p == MR_BF16 ? "bf16" : p == MR_FP16 ? "fp16" : "fp32"; }

static mr_status alloc_dev(mr_trainer_cuda *c, size_t bytes, const char *what, void **p, mr_error *err) {
    return mr_devmem_alloc(&c->mem, bytes, what, p, err);
}

static mr_status device_setup(mr_trainer *t, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    const mr_config *cfg = &t->cfg;
    const tc_dims d = dims_of(cfg, t->pol.n_params, t->pol.n_policy);
    c->device = cfg->cuda.device_index;
    c->precision = cfg->precision;
    TRY(o->set_device(c->device, err));
    if (o->device_name(c->device, c->gpu_name, sizeof c->gpu_name, NULL) != MR_OK)
        snprintf(c->gpu_name, sizeof c->gpu_name, "unknown");
    TRY(o->stream_create(&c->stream, err));

    mr_devmem_backend be;
    mr_devmem_config dc;
    TRY(o->device_backend(c->device, &be, err));
    mr_devmem_config_default(&dc);
    dc.memory_fraction = cfg->cuda.memory_fraction;
    dc.release_threshold = cfg->cuda.release_threshold;
    TRY(mr_devmem_init(&c->mem, &be, &dc, err));
    c->mem_ready = 1;
    c->card_total = be.total_bytes;
    c->card_free = be.free_bytes(be.ctx);
    TRY(o->pinned_backend(&be, err));
    mr_devmem_config_default(&dc);
    dc.memory_fraction = 0.5;
    TRY(mr_devmem_init(&c->pinned, &be, &dc, err));
    c->pinned_ready = 1;

    /* environment state: one block, carved like the host copy */
    TRY(oom_hint(t, alloc_dev(c, c->plan.env_bytes, "the environment state", &c->env_block, err), err));
    mr_arena dev = {NULL, 0, 0, 0};
    dev.base = (unsigned char *)c->env_block;
    dev.size = c->plan.env_bytes;
    mr_forage_layout(&c->env, &cfg->env, cfg->seed, &dev);
    c->env.energy_frozen = t->env.energy_frozen;
    c->env.reward_clip = t->env.reward_clip;
    c->env.threads = 0;

    TRY(oom_hint(t, o->policy_create(&c->pc, &cfg->policy, d.V, c->plan.max_batch, 0, c->precision, &c->mem, err),
                 err));
    c->pc_ready = 1;
    const mr_policy *hp = &t->pol, *dp = &c->pc.plan.net;
    if (dp->n_params != hp->n_params || dp->n_policy != hp->n_policy || dp->value_w_offset != hp->value_w_offset ||
        dp->value_b_offset != hp->value_b_offset)
        return mr_fail(err, MR_ERR_STATE, "the CUDA trainer: the GPU policy's parameter layout differs from the CPU "
                       "policy's (%zu vs %zu parameters); this is a bug", dp->n_params, hp->n_params);
    const int64_t sizes[NGROUPS] = {(int64_t)d.Pp, (int64_t)(d.P - d.Pp)};
    if (mr_opt_groups_plan(NGROUPS, sizes, &c->groups) != 0)
        return mr_fail(err, MR_ERR_ARG, "the CUDA trainer: cannot plan the parameter groups");

    void *p;
    TRY(oom_hint(t, alloc_dev(c, c->plan.optim_bytes, "the Adam moments", &p, err), err));
    c->adam_m = (float *)p;
    c->adam_v = c->adam_m + d.P;
    TRY(oom_hint(t, alloc_dev(c, c->plan.rollout_bytes, "the rollout buffers", &c->roll_block, err), err));
    dev = (mr_arena){(unsigned char *)c->roll_block, c->plan.rollout_bytes, 0, 0};
    rollout_layout(c, &d, c->plan.partial_doubles, &dev);
    TRY(oom_hint(t, alloc_dev(c, c->plan.ctl_bytes, "the control blocks", &c->ctl_block, err), err));
    dev = (mr_arena){(unsigned char *)c->ctl_block, c->plan.ctl_bytes, 0, 0};
    ctl_layout(c, &dev);
    TRY(mr_devmem_alloc(&c->pinned, c->plan.pinned_bytes, "the pinned staging buffers", &c->pin_block, err));
    dev = (mr_arena){(unsigned char *)c->pin_block, c->plan.pinned_bytes, 0, 0};
    pinned_layout(c, &d, &dev);
    memset(c->pin_block, 0, c->plan.pinned_bytes);
    for (int i = 0; i < EV_COUNT; i++) TRY(o->event_create(&c->ev[i], err));

    /* Initial state: the CPU trainer's weights (same init), zero moments,
     * fresh control blocks, environments as the CPU creates them. */
    void *st = c->stream;
    TRY(o->copy(c->pc.params, t->pol.params, d.P * sizeof(float), MR_COPY_H2D, st, err));
    TRY(o->policy_zero_grad(&c->pc, st, err));
    TRY(o->memset(c->adam_m, 0, c->plan.optim_bytes, st, err));
    TRY(o->memset(c->roll_block, 0, c->plan.rollout_bytes, st, err));
    TRY(o->memset(c->ctl_block, 0, c->plan.ctl_bytes, st, err));
    fill_hyper(t, mr_schedule_value(&t->hot.lr, 0.0), mr_schedule_value(&t->hot.clip, 0.0),
               mr_schedule_value(&t->hot.ent_coef, 0.0), &c->h_opt->h, &c->h_loss->h);
    mr_opt_state_init(&c->h_opt->s, c->precision == MR_FP16 ? FP16_INITIAL_SCALE : 1.0f);
    memset(&c->h_loss->s, 0, sizeof c->h_loss->s);
    mr_popart_ctl_set(c->h_pa, &t->popart, cfg->policy.popart_beta_min);
    TRY(o->copy(c->d_opt, c->h_opt, sizeof *c->h_opt, MR_COPY_H2D, st, err));
    TRY(o->copy(c->d_loss, c->h_loss, sizeof *c->h_loss, MR_COPY_H2D, st, err));
    TRY(o->copy(c->d_pa, c->h_pa, sizeof *c->h_pa, MR_COPY_H2D, st, err));
    TRY(o->memset(c->env_block, 0, c->plan.env_bytes, st, err));
    TRY(o->env_clear_logs(&c->env, st, err));
    TRY(o->env_reset_all(&c->env, st, err));
    return o->stream_sync(st, err);
}

mr_status mr_trainer_cuda_create_ops(const mr_config *cfg, const mr_tc_ops *ops, mr_trainer **out, mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_create: out is NULL");
    *out = NULL;
    if (!ops) return mr_fail(err, MR_ERR_BACKEND, "the CUDA trainer: no table of GPU operations (a build without CUDA)");
    mr_tc_plan plan;
    TRY(mr_trainer_cuda_plan(cfg, &plan, err));
    mr_trainer *t = calloc(1, sizeof *t);
    mr_trainer_cuda *c = calloc(1, sizeof *c);
    if (!t || !c) {
        free(t);
        free(c);
        return mr_fail(err, MR_ERR_NOMEM, "out of host memory creating the trainer");
    }
    t->cuda = c;
    c->ops = ops;
    c->plan = plan;
    mr_trainer_fields(t, cfg);
    mr_trainer_use_threads(t);                   /* the host policy sizes per-thread workspaces */
    host_layout(t, &t->arena);                   /* plan */
    if (mr_arena_commit(&t->arena) != 0) {
        size_t want = t->arena.size;
        free(c);
        free(t);
        return mr_fail(err, MR_ERR_NOMEM,
                       "out of host memory: the CUDA trainer's host copies need %.1f MiB (network and environments)",
                       (double)want / 1048576.0);
    }
    host_layout(t, &t->arena);                   /* carve */
    t->env.energy_frozen = cfg->env.mode == MR_MODE_PROXY;
    t->env.reward_clip = (float)cfg->ppo.reward_clip;
    t->env.threads = t->threads;
    mr_policy_init(&t->pol, cfg->seed);          /* the CPU trainer's weights for the seed */
    mr_popart_init(&t->popart);
    mr_status s = device_setup(t, err);
    if (s != MR_OK) {
        mr_trainer_cuda_free(t);
        return s;
    }
    if (!cfg->cuda.graphs)
        snprintf(c->graphs_why, sizeof c->graphs_why, "off (cuda.graphs = false)");
    else if (!ops->graph_begin)
        snprintf(c->graphs_why, sizeof c->graphs_why, "not available with the %s operations", ops->name);
    snprintf(t->describe, sizeof t->describe,
             "cuda backend (%s): GPU %d (%s), %s; evaluation and inference run on a cpu copy of the weights "
             "(%d thread%s); cuda.graphs: %s; cuda.cudnn_benchmark and cuda.algo_cache do not apply "
             "(convolutions are im2col + cuBLAS)",
             ops->name, c->device, c->gpu_name, prec_name(c->precision), t->threads, t->threads == 1 ? "" : "s",
             c->graphs_why[0] ? c->graphs_why : "each update after the first replays three recorded CUDA graphs");
    *out = t;
    mr_ok(err);
    return MR_OK;
}

void mr_trainer_cuda_free(mr_trainer *t) {
    if (!t) return;
    mr_trainer_cuda *c = t->cuda;
    if (c) {
        const mr_tc_ops *o = c->ops;
        if (c->stream) (void)o->stream_sync(c->stream, NULL);   /* nothing may still use the memory */
        for (int i = 0; i < EV_COUNT; i++)
            if (c->ev[i]) o->event_destroy(c->ev[i]);
        drop_graphs(c);
        for (int i = 0; i < c->npev; i++)
            if (c->pev[i]) o->event_destroy(c->pev[i]);
        free(c->pev);
        if (c->pc_ready) o->policy_destroy(&c->pc);
        if (c->mem_ready) mr_devmem_destroy(&c->mem);
        if (c->pinned_ready) mr_devmem_destroy(&c->pinned);
        if (c->stream) o->stream_destroy(c->stream);
        free(c);
    }
    mr_arena_release(&t->arena);
    free(t);
}

/* ------------------------------------------------------------------ update */

static mr_status profile_mark(mr_trainer_cuda *c, int k, mr_error *err) {
    if (!c->profile || k >= c->npev) return MR_OK;
    return c->ops->event_record(c->pev[k], c->stream, err);
}

static mr_status rollout(mr_trainer *t, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    const int N = t->N, VV = t->VV, proxy = t->proxy_obs;
    const uint64_t seed = t->cfg.seed;
    for (int step = 0; step < t->T; step++) {
        const size_t off = (size_t)step * (size_t)N;
        uint8_t *obs = c->obs + off * (size_t)VV;
        float *extra = c->extra + off * 2;
        TRY(profile_mark(c, 2 * step, err));
        TRY(o->copy(obs, c->env.obs, (size_t)N * (size_t)VV, MR_COPY_D2D, st, err));
        TRY(o->step_in(&c->env, seed, extra, c->step_u, st, err));
        TRY(o->policy_forward(&c->pc, obs, extra, N, proxy, c->step_logits, c->step_value, st, err));
        TRY(o->sample(N, c->step_logits, c->step_u, c->act + off, c->logp + off, st, err));
        TRY(profile_mark(c, 2 * step + 1, err));
        TRY(o->env_step_all(&c->env, c->act + off, st, err));
        TRY(o->step_out(&c->env, c->d_pa, c->step_value, c->val + off, c->rew + off, c->done + off, st, err));
    }
    TRY(profile_mark(c, 2 * t->T, err));
    /* Bootstrap value of the state after the last step. */
    TRY(o->step_in(&c->env, seed, c->step_extra, NULL, st, err));
    TRY(o->policy_forward(&c->pc, c->env.obs, c->step_extra, N, proxy, c->step_logits, c->step_value, st, err));
    return o->step_out(&c->env, c->d_pa, c->step_value, c->last_value, NULL, NULL, st, err);
}

static mr_status advantages(mr_trainer *t, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    const mr_ppo_config *pc = &t->cfg.ppo;
    void *st = c->stream;
    const int64_t B = t->B;
    TRY(o->gae(t->T, t->N, c->rew, c->val, c->last_value, c->done, (float)pc->gamma, (float)pc->gae_lambda, c->adv,
               c->ret, st, err));
    /* explained variance, before PopArt moves: mean/std of R and of R - V */
    TRY(o->diff(c->ret, c->val, c->diff, B, st, err));
    TRY(o->mean_std(c->ret, B, c->partials, &c->d_met->ev_stats[0], st, err));
    TRY(o->mean_std(c->diff, B, c->partials, &c->d_met->ev_stats[2], st, err));
    if (t->cfg.policy.popart) {
        const mr_policy *p = &t->pol;
        const size_t w = p->value_w_offset, b = p->value_b_offset;
        TRY(o->popart_update(c->d_pa, c->ret, B, c->partials, c->pc.params + w, c->pc.params + b,
                             t->cfg.policy.critic_hidden, c->adam_m + w, c->adam_v + w, c->adam_m + b, c->adam_v + b,
                             st, err));
    }
    if (pc->norm_adv) TRY(o->normalize(c->adv, B, c->partials, c->d_met->adv_stats, st, err));
    return MR_OK;
}

static mr_status optimise(mr_trainer *t, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    const mr_ppo_config *pc = &t->cfg.ppo;
    void *st = c->stream;
    const int B = t->B, M = t->M, E = pc->epochs;
    mr_tc_gather_args g;
    memset(&g, 0, sizeof g);
    g.M = M;
    g.VV = t->VV;
    g.obs = c->obs; g.act = c->act; g.extra = c->extra; g.logp = c->logp; g.val = c->val; g.adv = c->adv;
    g.ret = c->ret;
    g.mb_obs = c->mb_obs; g.mb_act = c->mb_act; g.mb_extra = c->mb_extra; g.mb_logp = c->mb_logp;
    g.mb_adv = c->mb_adv; g.mb_oldv = c->mb_oldv; g.mb_target = c->mb_target;
    for (int e = 0; e < E; e++) {
        TRY(o->copy(c->perm, c->h_perm + (size_t)e * (size_t)B, (size_t)B * sizeof(int32_t), MR_COPY_H2D, st, err));
        for (int mb = 0; mb < pc->minibatches; mb++) {
            g.idx = c->perm + (size_t)mb * (size_t)M;
            TRY(o->gather(&g, c->d_pa, st, err));
            TRY(o->opt_begin(c->d_opt, st, err));
            TRY(o->policy_zero_grad(&c->pc, st, err));
            TRY(o->policy_forward(&c->pc, c->mb_obs, c->mb_extra, M, t->proxy_obs, c->mb_logits, c->mb_value, st,
                                  err));
            TRY(o->ppo_loss(M, c->mb_logits, c->mb_value, c->mb_act, c->mb_logp, c->mb_adv, c->mb_oldv, c->mb_target,
                            c->d_loss, c->d_opt, c->partials, c->mb_dlogits, c->mb_dvalue, st, err));
            TRY(o->policy_backward(&c->pc, c->mb_dlogits, c->mb_dvalue, M, st, err));
            TRY(o->opt_step(c->pc.params, c->pc.grads, c->adam_m, c->adam_v, &c->groups, c->partials, c->d_opt, st,
                            err));
            TRY(o->accumulate(c->d_met, c->d_loss, c->d_opt, NGROUPS, st, err));
        }
    }
    return MR_OK;
}

/* The epochs' permutations into pinned memory, trainer.c's shuffle with its
 * keys: host work, done while the GPU runs the rollout queued before it. */
static void make_permutations(mr_trainer *t) {
    mr_trainer_cuda *c = t->cuda;
    const int B = t->B, E = t->cfg.ppo.epochs;
    for (int e = 0; e < E; e++)
        mr_tc_permutation(t->cfg.seed, (uint32_t)(t->updates * (uint64_t)E + (uint64_t)e),
                          c->h_perm + (size_t)e * (size_t)B, B);
}

/* An update is three parts, each queued as a whole (eagerly or recorded into
 * a graph): no value is read back, and every per-update value is read from
 * memory, so each can be recorded and replayed. The phases' timing events
 * go between them (enqueue_update), never inside.
 * The first: the hyper-parameters (from pinned memory, filled before) and
 * the rollout. */
static mr_status enqueue_rollout(mr_trainer *t, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    TRY(o->copy(&c->d_opt->h, &c->h_opt->h, sizeof c->h_opt->h, MR_COPY_H2D, st, err));
    TRY(o->copy(&c->d_loss->h, &c->h_loss->h, sizeof c->h_loss->h, MR_COPY_H2D, st, err));
    TRY(o->memset(c->d_met, 0, sizeof *c->d_met, st, err));
    TRY(o->env_clear_logs(&c->env, st, err));
    return rollout(t, err);
}

/* The second: GAE, explained variance, PopArt, the advantages. */
static mr_status enqueue_advantages(mr_trainer *t, mr_error *err) { return advantages(t, err); }

/* The third: the epochs (permutations from pinned memory, made before), the
 * episode logs and the metrics copied to pinned memory. */
static mr_status enqueue_learn(mr_trainer *t, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    TRY(optimise(t, err));
    TRY(o->env_log_reduce(&c->env, &c->d_met->log, st, err));
    TRY(o->finish(c->d_met, c->d_pa, c->d_opt, st, err));
    return o->copy(c->h_met, c->d_met, sizeof *c->d_met, MR_COPY_D2H, st, err);
}

static mr_status (*const parts[PARTS])(mr_trainer *, mr_error *) = {enqueue_rollout, enqueue_advantages,
                                                                     enqueue_learn};
static const int part_end[PARTS] = {EV_ROLLOUT, EV_GAE, EV_END};   /* the event recorded after each */

static void drop_graphs(mr_trainer_cuda *c) {
    for (int i = 0; i < PARTS; i++)
        if (c->graph[i]) {
            c->ops->graph_destroy(c->graph[i]);
            c->graph[i] = NULL;
        }
}

/* Records part i into c->graph[i]; on failure the capture is closed and
 * thrown away, nothing has run, and *why says what refused. */
static mr_status record(mr_trainer *t, int i, mr_error *why) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    TRY(o->graph_begin(c->stream, why));
    mr_status s = parts[i](t, why);
    if (s != MR_OK) {
        (void)o->graph_end(c->stream, 1, NULL, NULL);
        return s;
    }
    return o->graph_end(c->stream, 0, &c->graph[i], why);
}

/* Whether this update replays graphs: wanted (cuda.graphs), possible (the
 * table records, no per-step profiling events), after the eager warm-up
 * update; records them when they do not exist yet. A recording that fails
 * is reported once in the description and the run goes on uncaptured. */
static int graphs_ready(mr_trainer *t) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    if (!t->cfg.cuda.graphs || c->graphs_failed || c->profile || !o->graph_begin || !c->warm) return 0;
    int have = 0;
    for (int i = 0; i < PARTS; i++) have += c->graph[i] != NULL;
    if (have == PARTS) return 1;
    drop_graphs(c);
    mr_error why;
    mr_ok(&why);
    mr_status s = MR_OK;
    for (int i = 0; i < PARTS && s == MR_OK; i++) s = record(t, i, &why);
    if (s == MR_OK) return 1;
    drop_graphs(c);
    c->graphs_failed = 1;
    snprintf(c->graphs_why, sizeof c->graphs_why, "recording the update failed (%.150s)", why.msg);
    const size_t len = strlen(t->describe);
    snprintf(t->describe + len, sizeof t->describe - len, "; cuda.graphs: %s, queued kernel by kernel instead",
             c->graphs_why);
    return 0;
}

/* One update, queued: its parts, eagerly or as graph launches, with the
 * phases' events between them (EV_START .. EV_END). */
static mr_status enqueue_update(mr_trainer *t, double lr, double clip, double ent, mr_error *err) {
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    fill_hyper(t, lr, clip, ent, &c->h_opt->h, &c->h_loss->h);
    c->graphs_used = graphs_ready(t);
    TRY(o->event_record(c->ev[EV_START], st, err));
    for (int i = 0; i < PARTS; i++) {
        if (i == PARTS - 1) make_permutations(t);   /* host work while the GPU runs the rollout and GAE */
        TRY(c->graphs_used ? o->graph_launch(c->graph[i], st, err) : parts[i](t, err));
        TRY(o->event_record(c->ev[part_end[i]], st, err));
    }
    return MR_OK;
}

static double elapsed_s(mr_trainer_cuda *c, void *a, void *b) {
    float ms = 0.0f;
    if (c->ops->event_elapsed(a, b, &ms, NULL) != MR_OK) return 0.0;
    return 1e-3 * (double)ms;
}

static void read_timing(mr_trainer_cuda *c) {
    mr_tc_timing *tm = &c->timing;
    memset(tm, 0, sizeof *tm);
    tm->rollout = elapsed_s(c, c->ev[EV_START], c->ev[EV_ROLLOUT]);
    tm->gae = elapsed_s(c, c->ev[EV_ROLLOUT], c->ev[EV_GAE]);
    tm->update = elapsed_s(c, c->ev[EV_GAE], c->ev[EV_END]);
    if (c->profile)
        for (int k = 0; k + 2 < c->npev; k += 2) {
            tm->inference += elapsed_s(c, c->pev[k], c->pev[k + 1]);
            tm->env += elapsed_s(c, c->pev[k + 1], c->pev[k + 2]);
        }
}

static void fill_metrics(mr_trainer *t, const mr_tc_metrics *h, double lr, double clip, double ent, mr_metrics *out) {
    mr_trainer_cuda *c = t->cuda;
    memset(out, 0, sizeof *out);
    mr_trainer_episode_metrics(t, &h->log, out);
    out->policy_loss = h->mean[MR_TC_POLICY_LOSS];
    out->value_loss = h->mean[MR_TC_VALUE_LOSS];
    out->entropy = h->mean[MR_TC_ENTROPY];
    out->approx_kl = h->mean[MR_TC_APPROX_KL];
    out->clip_fraction = h->mean[MR_TC_CLIP_FRACTION];
    out->explained_variance = h->explained_variance;
    out->grad_norm_policy = h->mean[MR_TC_GNORM_POLICY];
    out->grad_norm_value = h->mean[MR_TC_GNORM_VALUE];
    out->grad_norm = h->mean[MR_TC_GNORM];
    out->lr = lr;
    out->clip = clip;
    out->ent_coef = ent;
    out->popart_mean = h->popart_mean;
    out->popart_std = h->popart_std;
    out->loss_scale = h->loss_scale;
    out->skipped_steps = (uint64_t)h->skipped_total;
    /* fp16: a skipped step is the scaler's overflow handling; only a
     * non-finite loss is an error. fp32 / bf16: any skip is, as on the CPU. */
    out->nonfinite = c->precision == MR_FP16 ? h->loss_nonfinite != 0 : (h->skipped > 0 || h->loss_nonfinite);
    out->time_rollout = c->timing.rollout;
    out->time_gae = c->timing.gae;
    out->time_update = c->timing.update;
    out->time_env = c->timing.env;               /* 0 unless profiling (mr_trainer_set_profile) */
    out->time_inference = c->timing.inference;
    mr_devmem_stats ds;
    mr_devmem_stats_get(&c->mem, &ds);
    out->memory_planned_bytes = c->plan.device_bytes;
    out->memory_peak_bytes = ds.peak_allocated_bytes;
    out->memory_limit_bytes = ds.limit_bytes;
}

static mr_status broken_msg(mr_error *err) {
    return mr_fail(err, MR_ERR_STATE, "the CUDA trainer stopped after a failed update (its GPU state is not "
                   "trustworthy); create it again, or load a checkpoint into it");
}

mr_status mr_trainer_cuda_update(mr_trainer *t, mr_metrics *out, mr_error *err) {
    if (!t || !t->cuda) return mr_fail(err, MR_ERR_ARG, "mr_trainer_update: not a CUDA trainer");
    mr_trainer_cuda *c = t->cuda;
    if (c->broken) return broken_msg(err);
    const double t0 = now_seconds();
    double progress = (double)t->updates / (double)mr_trainer_total_updates(t);
    if (progress > 1.0) progress = 1.0;
    const double lr = mr_schedule_value(&t->hot.lr, progress);
    const double clip = mr_schedule_value(&t->hot.clip, progress);
    const double ent = mr_schedule_value(&t->hot.ent_coef, progress);
    mr_status s = c->ops->set_device(c->device, err);
    if (s == MR_OK) s = enqueue_update(t, lr, clip, ent, err);
    /* The one wait of an update: its metrics are in pinned memory. */
    if (s == MR_OK) s = c->ops->event_sync(c->ev[EV_END], err);
    if (s != MR_OK) {
        c->broken = 1;
        if (err) {
            const size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, " (update %llu on the GPU failed; the trainer stops)",
                     (unsigned long long)t->updates + 1);
        }
        return s;
    }
    read_timing(c);
    c->warm = 1;
    t->updates++;
    t->agent_steps += (uint64_t)t->B;
    mr_metrics m;
    fill_metrics(t, c->h_met, lr, clip, ent, &m);
    m.time_total = now_seconds() - t0;
    m.sps = m.time_total > 0 ? (double)t->B / m.time_total : 0.0;
    if (out) *out = m;
    return mr_trainer_update_status(t, m.nonfinite, err);
}

/* ------------------------------------------------------- host copies */

mr_status mr_trainer_cuda_pull(mr_trainer *t, int what, mr_error *err) {
    if (!t || !t->cuda) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_pull: not a CUDA trainer");
    mr_trainer_cuda *c = t->cuda;
    /* A failed update stopped somewhere inside: its weights, moments and
     * environments are a state no run reached, not to be saved or used. */
    if (c->broken) return broken_msg(err);
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    const size_t P = t->pol.n_params;
    TRY(o->set_device(c->device, err));
    TRY(o->copy(t->pol.params, c->pc.params, P * sizeof(float), MR_COPY_D2H, st, err));
    TRY(o->copy(c->h_pa, c->d_pa, sizeof *c->h_pa, MR_COPY_D2H, st, err));
    if (what >= MR_TC_LEARNABLE) {
        TRY(o->copy(t->adam_m, c->adam_m, P * sizeof(float), MR_COPY_D2H, st, err));
        TRY(o->copy(t->adam_v, c->adam_v, P * sizeof(float), MR_COPY_D2H, st, err));
        TRY(o->copy(c->h_opt, c->d_opt, sizeof *c->h_opt, MR_COPY_D2H, st, err));
    }
    if (what >= MR_TC_ALL) TRY(o->copy(t->env.grid, c->env_block, c->plan.env_bytes, MR_COPY_D2H, st, err));
    TRY(o->stream_sync(st, err));
    mr_popart_ctl_get(c->h_pa, &t->popart);
    if (what >= MR_TC_LEARNABLE) t->adam_step = c->h_opt->s.step;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_cuda_push(mr_trainer *t, int what, mr_error *err) {
    if (!t || !t->cuda) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_push: not a CUDA trainer");
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    const size_t P = t->pol.n_params;
    drop_graphs(c);   /* recorded with the old seed by value: recorded again at the next update */
    TRY(o->set_device(c->device, err));
    TRY(o->copy(c->pc.params, t->pol.params, P * sizeof(float), MR_COPY_H2D, st, err));
    mr_popart_ctl_set(c->h_pa, &t->popart, t->cfg.policy.popart_beta_min);
    TRY(o->copy(c->d_pa, c->h_pa, sizeof *c->h_pa, MR_COPY_H2D, st, err));
    if (what >= MR_TC_LEARNABLE) {
        TRY(o->copy(c->adam_m, t->adam_m, P * sizeof(float), MR_COPY_H2D, st, err));
        TRY(o->copy(c->adam_v, t->adam_v, P * sizeof(float), MR_COPY_H2D, st, err));
        /* The Adam step count lives in the optimizer's state; the rest of it
         * (loss scale, growth tracker, skipped count) stays as it is. */
        TRY(o->copy(c->h_opt, c->d_opt, sizeof *c->h_opt, MR_COPY_D2H, st, err));
        TRY(o->stream_sync(st, err));
        c->h_opt->s.step = t->adam_step;
        TRY(o->copy(c->d_opt, c->h_opt, sizeof *c->h_opt, MR_COPY_H2D, st, err));
    }
    if (what >= MR_TC_ALL) {
        TRY(o->copy(c->env_block, t->env.grid, c->plan.env_bytes, MR_COPY_H2D, st, err));
        c->env.seed = t->env.seed;   /* a load adopts the checkpoint's seed (kernels take the struct by value) */
    }
    TRY(o->stream_sync(st, err));
    if (what >= MR_TC_ALL) c->broken = 0;   /* the whole state is the checkpoint's again */
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------------ memory */

mr_status mr_trainer_cuda_memory(const mr_trainer *t, mr_memory_stats *out, mr_error *err) {
    if (!t || !t->cuda || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_memory: NULL argument");
    const mr_trainer_cuda *c = t->cuda;
    mr_devmem_stats d, p;
    mr_devmem_stats_get(&c->mem, &d);
    mr_devmem_stats_get(&c->pinned, &p);
    memset(out, 0, sizeof *out);
    out->host_planned_bytes = t->arena.size + c->plan.pinned_bytes;
    out->host_peak_bytes = t->arena.size + p.peak_allocated_bytes;
    out->host_allocations = t->arena.allocations + t->extra_allocations + p.allocations;
    out->device_allocated_bytes = d.allocated_bytes;
    out->device_reserved_bytes = d.reserved_bytes;
    out->device_peak_bytes = d.peak_allocated_bytes;
    out->device_allocations = d.allocations;
    out->device_cache_hits = d.cache_hits;
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------- tests, benchmarks */

mr_status mr_trainer_cuda_read_rollout(mr_trainer *t, mr_tc_rollout_view *v, mr_error *err) {
    if (!t || !t->cuda || !v) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_read_rollout: NULL argument");
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    void *st = c->stream;
    const size_t B = (size_t)t->B;
    struct { void *dst; const void *src; size_t bytes; } cp[] = {
        {v->obs, c->obs, B * (size_t)t->VV}, {v->act, c->act, B}, {v->done, c->done, B},
        {v->extra, c->extra, B * 2 * sizeof(float)}, {v->logp, c->logp, B * sizeof(float)},
        {v->val, c->val, B * sizeof(float)}, {v->rew, c->rew, B * sizeof(float)},
        {v->adv, c->adv, B * sizeof(float)}, {v->ret, c->ret, B * sizeof(float)},
        {v->last_value, c->last_value, (size_t)t->N * sizeof(float)},
    };
    TRY(o->set_device(c->device, err));
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        if (cp[i].dst) TRY(o->copy(cp[i].dst, cp[i].src, cp[i].bytes, MR_COPY_D2H, st, err));
    return o->stream_sync(st, err);
}

mr_status mr_trainer_cuda_set_profile(mr_trainer *t, int on, mr_error *err) {
    if (!t || !t->cuda) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_set_profile: not a CUDA trainer");
    mr_trainer_cuda *c = t->cuda;
    if (on && !c->pev) {   /* outside the steady state: events for every rollout step, once */
        const int n = 2 * t->T + 1;
        c->pev = calloc((size_t)n, sizeof *c->pev);
        if (!c->pev) return mr_fail(err, MR_ERR_NOMEM, "out of host memory for %d profiling events", n);
        t->extra_allocations++;
        for (int i = 0; i < n; i++) {
            mr_status s = c->ops->event_create(&c->pev[i], err);
            if (s != MR_OK) return s;
            c->npev = i + 1;
        }
    }
    c->profile = on != 0;
    mr_ok(err);
    return MR_OK;
}

int mr_trainer_cuda_graphs_used(const mr_trainer *t, const char **why_not) {
    if (!t || !t->cuda) {
        if (why_not) *why_not = "not a CUDA trainer";
        return 0;
    }
    if (why_not) *why_not = t->cuda->graphs_why;
    return t->cuda->graphs_used;
}

mr_status mr_trainer_cuda_timing(const mr_trainer *t, mr_tc_timing *out, mr_error *err) {
    if (!t || !t->cuda || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_timing: NULL argument");
    *out = t->cuda->timing;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_cuda_devmem(const mr_trainer *t, mr_devmem_stats *out, mr_error *err) {
    if (!t || !t->cuda || !out) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_devmem: NULL argument");
    mr_devmem_stats_get(&t->cuda->mem, out);
    mr_ok(err);
    return MR_OK;
}

mr_status mr_trainer_cuda_set_loss_scale(mr_trainer *t, float scale, mr_error *err) {
    if (!t || !t->cuda) return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_set_loss_scale: not a CUDA trainer");
    if (!(scale > 0.0f) || scale != scale)
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_cuda_set_loss_scale: scale = %g: accepted a positive number",
                       (double)scale);
    mr_trainer_cuda *c = t->cuda;
    const mr_tc_ops *o = c->ops;
    TRY(o->set_device(c->device, err));
    TRY(o->copy(c->h_opt, c->d_opt, sizeof *c->h_opt, MR_COPY_D2H, c->stream, err));
    TRY(o->stream_sync(c->stream, err));
    c->h_opt->s.loss_scale = scale;
    c->h_opt->s.growth_tracker = 0;
    TRY(o->copy(c->d_opt, c->h_opt, sizeof *c->h_opt, MR_COPY_H2D, c->stream, err));
    return o->stream_sync(c->stream, err);
}

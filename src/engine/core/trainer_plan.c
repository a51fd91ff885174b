/*
 * trainer_plan.c - a trainer's memory, planned from its config alone: the
 * layouts of its blocks, their sizes on a backend, what a device of a given
 * size fits (out-of-memory hints, env.num_envs = "auto"), and the fields a
 * trainer derives from its config.
 *
 * Every layout function stores pointers only: run on a planning arena it
 * adds up sizes, run on an arena carved over a backend block it hands out
 * that block's addresses (nothing is touched, so device memory works too).
 */
#include "trainer.h"
#include "errors.h"
#include "config.h"
#include "obs_codes.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define HOST_POLICY_CHUNK 32   /* the host copy's network: evaluation and inference */

void mr_trainer_fields(mr_trainer *t, const mr_config *cfg) {
    t->cfg = *cfg;
    t->host = mr_backend_host();   /* the host copy of the network, evaluation, inference */
    mr_config_hot_params(cfg, &t->hot);
    t->T = cfg->ppo.rollout_steps;
    t->N = cfg->env.num_envs;
    t->V = mr_config_side(cfg);
    /* bytes of one observation in the rollout: V*V cell codes, a float image or vector */
    t->VV = mr_net_obs_row_bytes(&cfg->policy, t->V);
    t->NA = mr_net_actions(&cfg->policy);
    mr_env_spaces sp;
    memset(&sp, 0, sizeof sp);
    if (mr_env_spaces_of(&cfg->env, &sp, NULL) != MR_OK) sp.act.kind = MR_SPACE_DISCRETE;   /* validated before */
    if (sp.act.kind == MR_SPACE_DISCRETE) sp.act.n = t->NA;
    mr_act_head_of(&sp, cfg->policy.box_squash, &t->head);
    t->AB = t->head.act_bytes;
    t->B = t->T * t->N;
    /* ppo.truncation: auto is the environment's choice; slots only where episodes truncate */
    const int boot = cfg->ppo.truncation == MR_TRUNCATION_BOOTSTRAP ||
                     (cfg->ppo.truncation == MR_TRUNCATION_AUTO && sp.bootstrap_truncation);
    t->KF = boot && sp.step_limit > 0 ? (t->T - 1) / sp.step_limit + 1 : 0;
    t->M = t->B / cfg->ppo.minibatches;
    t->proxy_obs = mr_obs_expand_act(cfg->env.mode);
    t->obs_update = mr_obs_expand_update(cfg->env.mode, cfg->policy.proxy_obs_storage);
    const int n = cfg->threads > 0 ? cfg->threads : omp_get_num_procs();
    t->threads = n < 1 ? 1 : n;
    t->device = cfg->cuda.device_index;
}

void mr_trainer_layout_rollout(mr_trainer_dev *d, int T, int N, int VV, int NA, const mr_act_head *h, int M,
                               int KF, size_t partial_doubles, mr_arena *a) {
    const size_t B = (size_t)T * (size_t)N, n = (size_t)N, m = (size_t)M, vv = (size_t)VV;
    const size_t ab = (size_t)h->act_bytes, draws = h->kind == MR_HEAD_CATEGORICAL ? 1 : (size_t)h->n;
    d->obs = MR_TAKE(a, uint8_t, B * vv);
    d->extra = MR_TAKE(a, float, B * 2);
    d->act = MR_TAKE(a, uint8_t, B * ab);
    d->logp = MR_TAKE(a, float, B);
    d->val = MR_TAKE(a, float, B);
    d->rew = MR_TAKE(a, float, B);
    d->done = MR_TAKE(a, uint8_t, B);
    d->adv = MR_TAKE(a, float, B);
    d->ret = MR_TAKE(a, float, B);
    d->diff = MR_TAKE(a, float, B);
    d->last_value = MR_TAKE(a, float, n);
    d->step_logits = MR_TAKE(a, float, n * (size_t)NA);
    d->step_value = MR_TAKE(a, float, n);
    d->step_u = MR_TAKE(a, float, n * draws);   /* a uniform, a box's normals, or a uniform per head */
    d->step_act = h->kind == MR_HEAD_GAUSS ? MR_TAKE(a, uint8_t, n * ab) : NULL;
    d->step_extra = MR_TAKE(a, float, n * 2);
    d->perm = MR_TAKE(a, int32_t, B);
    const size_t K = (size_t)KF * n;
    d->fin_env_obs = KF ? MR_TAKE(a, uint8_t, n * vv) : NULL;
    d->fin_env_extra = KF ? MR_TAKE(a, float, n * 2) : NULL;
    d->fin_count = KF ? MR_TAKE(a, int32_t, n) : NULL;
    d->fin_row = KF ? MR_TAKE(a, int32_t, K) : NULL;
    d->fin_obs = KF ? MR_TAKE(a, uint8_t, K * vv) : NULL;
    d->fin_extra = KF ? MR_TAKE(a, float, K * 2) : NULL;
    d->fin_value = KF ? MR_TAKE(a, float, K) : NULL;
    d->mb_obs = MR_TAKE(a, uint8_t, m * vv);
    d->mb_act = MR_TAKE(a, uint8_t, m * ab);
    d->mb_extra = MR_TAKE(a, float, m * 2);
    d->mb_logp = MR_TAKE(a, float, m);
    d->mb_adv = MR_TAKE(a, float, m);
    d->mb_oldv = MR_TAKE(a, float, m);
    d->mb_target = MR_TAKE(a, float, m);
    d->mb_logits = MR_TAKE(a, float, m * (size_t)NA);
    d->mb_value = MR_TAKE(a, float, m);
    d->mb_dlogits = MR_TAKE(a, float, m * (size_t)NA);
    d->mb_dvalue = MR_TAKE(a, float, m);
    d->partials = MR_TAKE(a, double, partial_doubles);
}

void mr_trainer_layout_ctl(mr_trainer_dev *d, mr_arena *a) {
    d->opt = MR_TAKE(a, mr_optctl, 1);
    d->loss = MR_TAKE(a, mr_lossctl, 1);
    d->pa = MR_TAKE(a, mr_popart_ctl, 1);
    d->met = MR_TAKE(a, mr_loop_metrics, 1);
}

void mr_trainer_layout_stage(mr_trainer_stage *h, int epochs, int B, mr_arena *a) {
    h->opt = MR_TAKE(a, mr_optctl, 1);
    h->loss = MR_TAKE(a, mr_lossctl, 1);
    h->pa = MR_TAKE(a, mr_popart_ctl, 1);
    h->met = MR_TAKE(a, mr_loop_metrics, 1);
    h->perm = MR_TAKE(a, int32_t, (size_t)epochs * (size_t)B);
}

void mr_trainer_layout_host(mr_trainer *t, mr_arena *a) {
    const mr_config *c = &t->cfg;
    mr_env_layout(&t->env, &c->env, c->seed, a);
    mr_net_layout_init(&t->net, &c->policy, t->V);
    t->host->host_policy_layout(&t->pol, &c->policy, t->V, HOST_POLICY_CHUNK, c->cpu.conv, a);
    const size_t P = t->net.n_params;
    t->adam_m = MR_TAKE(a, float, P);
    t->adam_v = MR_TAKE(a, float, P);
    t->snap_params = MR_TAKE(a, float, P);
    t->snap_m = MR_TAKE(a, float, P);
    t->snap_v = MR_TAKE(a, float, P);
    t->log_sum = MR_TAKE(a, mr_env_log, 1);
}

/* The backend part of the plan (everything but host_bytes); cfg is not
 * validated here. */
static mr_status plan_device(const mr_config *cfg, const mr_backend *be, mr_trainer_plan *out, mr_error *err) {
    memset(out, 0, sizeof *out);
    mr_trainer t0;
    memset(&t0, 0, sizeof t0);
    mr_trainer_fields(&t0, cfg);
    out->max_batch = t0.M > t0.N ? t0.M : t0.N;
    /* the cpu network's workspace is per thread: plan with the config's
     * thread count, and leave the caller's as it was */
    const int caller_threads = omp_get_max_threads();
    omp_set_num_threads(t0.threads);
    mr_status ps = be->policy_plan(&cfg->policy, t0.V, t0.M, t0.N, cfg->precision, &cfg->cpu, &cfg->cuda,
                                   &out->policy, err);
    omp_set_num_threads(caller_threads);
    if (ps != MR_OK) return ps;
    /* the parameter counts come from the shared layout */
    mr_arena a = {NULL, 0, 0, 0};
    mr_net_layout net;
    mr_net_layout_init(&net, &cfg->policy, t0.V);
    const size_t P = net.n_params, Pp = net.n_policy;
    a = (mr_arena){NULL, 0, 0, 0};
    mr_env_state env;
    mr_env_layout(&env, &cfg->env, cfg->seed, &a);
    out->env_bytes = a.size;
    out->policy_bytes = out->policy.total;
    out->optim_bytes = 2 * P * sizeof(float);
    mr_opt_groups G;
    memset(&G, 0, sizeof G);
    const int64_t sizes[MR_TRAINER_NGROUPS] = {(int64_t)Pp, (int64_t)(P - Pp)};
    if (mr_opt_groups_plan(MR_TRAINER_NGROUPS, sizes, &G) != 0)
        return mr_fail(err, MR_ERR_ARG, "the network's parameter groups (%zu policy, %zu value) cannot be planned",
                       Pp, P - Pp);
    size_t pd = mr_loop_opt_partials(&G), x;
    if ((x = mr_loop_loss_partials(t0.M)) > pd) pd = x;
    if ((x = mr_loop_stats_partials(t0.B)) > pd) pd = x;
    out->partial_doubles = pd;
    mr_trainer_dev d;
    a = (mr_arena){NULL, 0, 0, 0};
    mr_trainer_layout_rollout(&d, t0.T, t0.N, t0.VV, t0.NA, &t0.head, t0.M, t0.KF, pd, &a);
    out->rollout_bytes = a.size;
    a = (mr_arena){NULL, 0, 0, 0};
    mr_trainer_layout_ctl(&d, &a);
    out->ctl_bytes = a.size;
    mr_trainer_stage h;
    a = (mr_arena){NULL, 0, 0, 0};
    mr_trainer_layout_stage(&h, cfg->ppo.epochs, t0.B, &a);
    out->staging_bytes = a.size;
    out->device_bytes = out->env_bytes + out->policy_bytes + out->optim_bytes + out->rollout_bytes + out->ctl_bytes;
    return MR_OK;
}

mr_status mr_trainer_plan_make(const mr_config *cfg, const mr_backend *be, mr_trainer_plan *out, mr_error *err) {
    if (!out || !be) return mr_fail(err, MR_ERR_ARG, "mr_trainer_plan_make: NULL argument");
    memset(out, 0, sizeof *out);
    /* the one place a trainer's config is validated (mr_trainer_create and
     * _create_on come through here), then checked against the backend */
    TRY(mr_config_validate(cfg, err));
    if (!(be->precisions & (1 << cfg->precision)))
        return mr_fail(err, MR_ERR_ARG, "precision = %s needs the cuda backend; the %s backend accepts %s",
                       cfg->precision == MR_BF16 ? "bf16" : cfg->precision == MR_FP16 ? "fp16" : "fp32", be->name,
                       be->precisions & (1 << MR_BF16) ? "fp32 and bf16 (this CPU has bf16 instructions)"
                                                       : "fp32 only (bf16 needs a CPU with AVX512-BF16 or AMX)");
    TRY(plan_device(cfg, be, out, err));
    mr_trainer *t = calloc(1, sizeof *t);
    if (!t) return mr_fail(err, MR_ERR_NOMEM, "out of host memory planning the trainer");
    mr_trainer_fields(t, cfg);
    /* the head's sampling and loss (NULL where a backend does not offer them) */
    const int gauss = t->head.kind == MR_HEAD_GAUSS, md = t->head.kind == MR_HEAD_MULTI_DISCRETE;
    if (!be->unavailable && ((gauss && (!be->sample_box || !be->ppo_loss_box)) ||
                             (md && (!be->sample_md || !be->ppo_loss_md)))) {
        char hn[32];
        snprintf(hn, sizeof hn, "%s", mr_act_head_name(&t->head));
        free(t);
        return mr_fail(err, MR_ERR_BACKEND, "env.name = %s needs the %s head, which the %s backend does not "
                       "offer: device = \"cpu\" has it", mr_env_name_of(cfg->env.name), hn, be->name);
    }
    free(t);
    t = calloc(1, sizeof *t);
    if (!t) return mr_fail(err, MR_ERR_NOMEM, "out of host memory planning the trainer");
    mr_trainer_fields(t, cfg);
    omp_set_num_threads(t->threads);   /* the host network sizes per-thread workspaces */
    mr_arena a = {NULL, 0, 0, 0};
    mr_trainer_layout_host(t, &a);
    out->host_bytes = a.size;
    free(t);
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------ sizing (out of memory) */

/* A made-up device for replaying a creation's allocations: addresses are
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

/* 1 when a new trainer for cfg gets its memory from a device of `total`
 * bytes of which `avail` are free: creation's allocations, in creation's
 * order and sizes, replayed on a memory manager over a made-up device, so
 * the manager's own rounding, segments and limit decide. */
static int fits_on_card(const mr_config *cfg, const mr_backend *be, size_t total, size_t avail) {
    mr_trainer_plan plan;
    if (plan_device(cfg, be, &plan, NULL) != MR_OK) return 0;
    size_t sizes[MR_BACKEND_MAX_POLICY_ALLOCS + 5];
    int n = 0;
    sizes[n++] = plan.env_bytes;
    for (int i = 0; i < plan.policy.n; i++) sizes[n++] = plan.policy.bytes[i];
    sizes[n++] = plan.optim_bytes;
    sizes[n++] = plan.rollout_bytes;
    sizes[n++] = plan.ctl_bytes;
    sizing_card card;
    memset(&card, 0, sizeof card);
    card.total = total;
    card.other = avail < total ? total - avail : 0;
    card.next = (uintptr_t)1 << 32;
    mr_devmem_backend dbe = {&card, sizing_alloc, sizing_free, sizing_free_bytes, total, "sizing"};
    mr_devmem_config dc;
    mr_devmem_config_default(&dc);
    dc.memory_fraction = cfg->cuda.memory_fraction;
    dc.release_threshold = cfg->cuda.release_threshold;
    mr_devmem m;
    if (mr_devmem_init(&m, &dbe, &dc, NULL) != MR_OK) return 0;
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        void *p;
        ok = mr_devmem_alloc(&m, sizes[i], NULL, &p, NULL) == MR_OK;
    }
    mr_devmem_destroy(&m);
    return ok;
}

/* The largest num_envs <= cfg's that the config accepts (ppo.minibatches
 * divides the batch) and whose trainer fits; 0 when none. The sizes grow
 * with num_envs, so a bisection finds the edge. */
static int largest_fitting_envs(const mr_config *cfg, const mr_backend *be, size_t total, size_t avail) {
    mr_config c = *cfg;
    int lo = 0, hi = cfg->env.num_envs + 1;   /* fits(lo), and hi is taken not to */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        c.env.num_envs = mid;
        if (fits_on_card(&c, be, total, avail)) lo = mid;
        else hi = mid;
    }
    for (; lo > 0; lo--) {
        c.env.num_envs = lo;
        if (mr_config_validate(&c, NULL) == MR_OK) break;
    }
    return lo;
}

mr_status mr_trainer_oom_hint(const mr_trainer *t, mr_status s, mr_error *err) {
    if (s != MR_ERR_NOMEM || !err) return s;
    const int n = largest_fitting_envs(&t->cfg, t->be, t->card_total, t->card_free);
    char need[32];
    mr_devmem_format(t->plan.device_bytes, need, sizeof need);
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

/* ------------------------------------------------- the public planning calls */

mr_status mr_config_device_bytes(const mr_config *cfg, uint64_t *bytes, mr_error *err) {
    if (!cfg || !bytes) return mr_fail(err, MR_ERR_ARG, "mr_config_device_bytes: NULL argument");
    mr_trainer_plan plan;
    mr_status s = mr_config_validate(cfg, err);
    if (s == MR_OK) s = plan_device(cfg, mr_backend_for(MR_DEVICE_CUDA), &plan, err);
    *bytes = s == MR_OK ? (uint64_t)plan.device_bytes : 0;
    if (s == MR_OK) mr_ok(err);
    return s;
}

#define FIT_STEP 64
#define FIT_MAX 1048576

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

mr_status mr_config_fit_num_envs(const mr_config *cfg, uint64_t budget, int *num_envs, mr_error *err) {
    if (!cfg || !num_envs) return mr_fail(err, MR_ERR_ARG, "mr_config_fit_num_envs: NULL argument");
    mr_config c = *cfg;
    const int64_t T = c.ppo.rollout_steps > 0 ? c.ppo.rollout_steps : 1, K = c.ppo.minibatches > 0 ? c.ppo.minibatches : 1;
    /* the candidates: multiples of 64 whose batch (n x T) splits into K minibatches */
    const int64_t step = FIT_STEP * (K / gcd64(FIT_STEP * T, K));
    c.env.num_envs = (int)(step <= FIT_MAX ? step : FIT_MAX);
    uint64_t b = 0;
    mr_status s = mr_config_device_bytes(&c, &b, err);
    if (s != MR_OK) return s;
    if (step > FIT_MAX || b > budget)
        return mr_fail(err, MR_ERR_NOMEM,
                       "not even %lld environments fit in %.2f GiB (they need %.2f GiB with these "
                       "network and PPO shapes); accepted: a smaller network, rollout or fewer minibatch samples, "
                       "a larger cuda.memory_fraction, or a number for env.num_envs",
                       (long long)step, (double)budget / 1073741824.0, (double)b / 1073741824.0);
    /* bytes grow with num_envs: bisect over the candidates; a size the plan
     * refuses (a job past the kernels' 32-bit indexing: policy_math.h) does not fit either */
    int64_t lo = 1, hi = FIT_MAX / step;   /* lo * step fits, (hi + 1) * step does not or is too many */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        c.env.num_envs = (int)(mid * step);
        if (mr_config_device_bytes(&c, &b, NULL) == MR_OK && b <= budget) lo = mid;
        else hi = mid - 1;
    }
    *num_envs = (int)(lo * step);
    mr_ok(err);
    return MR_OK;
}

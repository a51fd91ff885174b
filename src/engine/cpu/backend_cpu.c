/*
 * backend_cpu.c - the cpu backend: the trainer loop's operations (backend.h)
 * on host memory, as C loops over the shared element code (foraging.h,
 * trainer_loop_math.h), the CPU network (policy.c: OpenBLAS + OpenMP) and the CPU
 * PPO math (ppo.c). Everything runs when called, so streams are nothing and
 * events are timestamps.
 *
 * Results do not depend on the thread count: the loops are OpenMP
 * schedule(static) over independent elements, and every reduction sums in a
 * fixed order (ppo.c, policy.c).
 */
#include "backend.h"
#include "blas_kernels.h"
#include "conv_dnnl.h"
#include "env_cpu.h"
#include "errors.h"
#include "nn.h"
#include "policy.h"
#include "ppo.h"

#include <cblas.h>   /* openblas_get_config */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define POLICY_CHUNK 32                 /* samples per conv chunk of the network */
#define HUGE_ALIGN ((size_t)2 << 20)    /* large blocks: 2 MiB aligned, transparent huge pages (+15% env steps) */

static mr_status ok(mr_error *err) {
    mr_ok(err);
    return MR_OK;
}

/* ------------------------------------------------------------ memory */

static void *host_alloc(void *ctx, size_t bytes, const char **reason) {
    (void)ctx;
    const int huge = bytes >= 2 * HUGE_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, huge ? HUGE_ALIGN : 64, bytes ? bytes : 64) != 0) {
        *reason = "out of host memory";
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static void host_free(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static size_t host_free_bytes(void *ctx) {
    (void)ctx;
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

static size_t host_total_bytes(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

static mr_status cpu_memory(int device, mr_devmem_backend *out, mr_error *err) {
    (void)device;
    *out = (mr_devmem_backend){NULL, host_alloc, host_free, host_free_bytes, host_total_bytes(), "host memory"};
    return ok(err);
}

static mr_status cpu_staging(mr_devmem_backend *out, mr_error *err) { return cpu_memory(0, out, err); }

static mr_status cpu_copy(void *dst, const void *src, size_t bytes, int kind, void *stream, mr_error *err) {
    (void)kind;
    (void)stream;
    if (dst != src && bytes) memcpy(dst, src, bytes);
    return ok(err);
}

static mr_status cpu_memset(void *dst, int value, size_t bytes, void *stream, mr_error *err) {
    (void)stream;
    memset(dst, value, bytes);
    return ok(err);
}

/* ------------------------------------------------------ runtime, events */

static mr_status cpu_enter(int device, int threads, mr_error *err) {
    (void)device;
    omp_set_num_threads(threads);
    return ok(err);
}

/* The trainer's description of the network: which convolutions (cpu.conv)
 * and what the training forward keeps (cpu.activations). */
/* A trunk whose layers 1.. do not all run alike: "the first from the codes,
 * layer 1 winograd, layer 2 onednn" (+ how oneDNN's run and the note). */
/* How layer 0 runs when cpu.conv is not im2col: from the codes, or (a
 * float image) im2col + sgemm on the image as it is (policy.c). */
static const char *first_layer(const mr_policy *np) {
    return np->obs_float ? "the first (a float image) im2col + sgemm" : "the first from the codes";
}

static void mixed_describe(const mr_policy *np, char *conv, size_t len) {
    size_t o = (size_t)snprintf(conv, len, "%s", first_layer(np));
    for (int l = 1; l < np->num_conv && o < len; l++)
        o += (size_t)snprintf(conv + o, len - o, ", layer %d %s", l,
                              np->lconv[l] == MR_CPU_CONV_WINOGRAD ? "winograd" : "onednn");
    const char *how = np->dnnl ? (np->bf16 ? "oneDNN in bf16, Winograd in fp32" : "fp32")
                               : "oneDNN not set up: its layers im2col + sgemm";
    if (o < len)
        snprintf(conv + o, len - o, " (%s; Winograd F(%dx%d,3x3)'s %s%s%s)", how, np->wino.m, np->wino.m,
                 mr_conv_wino_products(&np->wino), np->conv_note[0] ? "; " : "", np->conv_note);
}

static int layers_mixed(const mr_policy *np) {
    for (int l = 2; l < np->num_conv; l++)
        if (np->lconv[l] != np->lconv[1]) return 1;
    return 0;
}

static void cpu_policy_describe(const mr_bpolicy *bp, int precision, char *buf, size_t len) {
    const mr_policy *np = bp ? bp->impl : NULL;
    if (np && np->trunk == MR_TRUNK_MLP) {
        int n = snprintf(buf, len, "network: MLP trunk (tanh");
        for (int l = 0; l < np->num_mlp && n > 0 && (size_t)n < len; l++)
            n += snprintf(buf + n, len - (size_t)n, " %d", np->mlp[l + 1]);
        if (n > 0 && (size_t)n < len)
            snprintf(buf + n, len - (size_t)n, ") over %d floats, critic tanh %d; fp32 products (OpenBLAS)%s",
                     np->obs_dim, np->critic_hidden, precision != MR_FP32 ? ": precision applies to the CNN only" : "");
        return;
    }
    char conv[256];
    if (np && np->conv != MR_CPU_CONV_IM2COL && layers_mixed(np)) {
        mixed_describe(np, conv, sizeof conv);
    } else if (!np || np->conv == MR_CPU_CONV_IM2COL) {
        snprintf(conv, sizeof conv, "im2col + sgemm%s",
                 precision == MR_BF16 ? " in fp32 (bf16 runs in oneDNN only: cpu.conv = auto)" : "");
    } else if (np->num_conv < 2) {
        snprintf(conv, sizeof conv, "%s (the only one)", first_layer(np));
    } else if (np->lconv[1] == MR_CPU_CONV_WINOGRAD) {
        snprintf(conv, sizeof conv, "%s, the others Winograd F(%dx%d,3x3) in fp32 (%s%s%s)", first_layer(np),
                 np->wino.m, np->wino.m, mr_conv_wino_products(&np->wino), np->conv_note[0] ? "; " : "",
                 np->conv_note);
    } else if (np->dnnl) {
        int n = snprintf(conv, sizeof conv, "%s, the others oneDNN%s", first_layer(np),
                         np->bf16 ? (np->lin ? " in bf16 (fc too, oneDNN matmul; the rest fp32)"
                                             : " in bf16 (fp32 elsewhere)")
                                  : np->conv_note[0] ? " in fp32" : "");
        if (np->conv_note[0] && n > 0 && (size_t)n < sizeof conv)   /* why not bf16 */
            snprintf(conv + n, sizeof conv - (size_t)n, " (%s)", np->conv_note);
    } else {
        snprintf(conv, sizeof conv, "%s, the others im2col + sgemm (%s)", first_layer(np),
                 np->conv_note[0] ? np->conv_note : "oneDNN was not set up");
    }
    char acts[96];
    if (np && np->recompute && np->kept > 0)
        snprintf(acts, sizeof acts, "kept for a batch's first %d samples, the rest recomputed in the backward",
                 np->kept);
    else
        snprintf(acts, sizeof acts, "%s", np && np->recompute ? "recomputed in the backward" : "kept for the backward");
    snprintf(buf, len, "convolutions (cpu.conv): %s; conv activations (cpu.activations): %s", conv, acts);
}

static void cpu_describe(int device, int threads, int precision, char *buf, size_t len) {
    (void)device;
    const char *forced = getenv("OPENBLAS_CORETYPE"), *chosen = getenv("MOONRL_BLAS_AUTO");
    const int by_us = forced && chosen && strcmp(forced, chosen) == 0;
    char prec[96] = "fp32";
    if (precision == MR_BF16)
        snprintf(prec, sizeof prec, "bf16 (oneDNN %s; fp32 master weights)", mr_bf16_isa());
    snprintf(buf, len, "%d thread%s, %s, OpenBLAS (OpenMP, %s kernels%s%s%s); cuda.* settings do not apply on the cpu",
             threads, threads == 1 ? "" : "s", prec, mr_cpu_blas_kernels(), forced ? ", as OPENBLAS_CORETYPE=" : "",
             forced ? forced : "",
             by_us ? " set by moonrl for this AVX-512 CPU; MOONRL_BLAS_AUTO=0 keeps OpenBLAS's choice" : "");
}

static int the_stream;   /* any non-NULL value: the cpu has no streams */

static mr_status cpu_stream_create(void **stream, mr_error *err) {
    *stream = &the_stream;
    return ok(err);
}
static void cpu_stream_destroy(void *stream) { (void)stream; }
static mr_status cpu_sync(void *x, mr_error *err) {
    (void)x;
    return ok(err);
}

static mr_status cpu_event_create(void **ev, mr_error *err) {
    double *t = calloc(1, sizeof *t);
    if (!t) return mr_fail(err, MR_ERR_NOMEM, "out of host memory for a timing event");
    *ev = t;
    return ok(err);
}
static void cpu_event_destroy(void *ev) { free(ev); }

static mr_status cpu_event_record(void *ev, void *stream, mr_error *err) {
    (void)stream;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)ev = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return ok(err);
}

static mr_status cpu_event_elapsed(void *a, void *b, float *ms, mr_error *err) {
    *ms = (float)(1e3 * (*(double *)b - *(double *)a));
    return ok(err);
}

/* ------------------------------------------------------------ environment */

static mr_status cpu_env_reset(const mr_env_state *s, void *stream, mr_error *err) {
    (void)stream;
    if (s->kind == MR_ENV_LUA) return mr_env_cpu_program_reset(s, err);
    mr_env_cpu_reset_all(s);
    return ok(err);
}
static mr_status cpu_env_step(const mr_env_state *s, const uint8_t *a, void *stream, mr_error *err) {
    (void)stream;
    if (s->kind == MR_ENV_LUA) return mr_env_cpu_program_step(s, a, err);
    mr_env_cpu_step_all(s, a);
    return ok(err);
}
static mr_status cpu_env_step_random(const mr_env_state *s, uint64_t seed, int na, uint8_t *a, void *stream,
                                     mr_error *err) {
    (void)stream;
    for (int i = 0; i < s->n; i++) a[i] = mr_env_random_action(s, i, seed, (uint32_t)na);
    mr_env_cpu_step_all(s, a);
    return ok(err);
}
static mr_status cpu_env_clear(const mr_env_state *s, void *stream, mr_error *err) {
    (void)stream;
    mr_env_cpu_clear_logs(s);
    return ok(err);
}
static mr_status cpu_env_reduce(const mr_env_state *s, mr_env_log *out, void *stream, mr_error *err) {
    (void)stream;
    mr_env_log_reduce(s->log, s->n, out);
    return ok(err);
}

/* ------------------------------------------------------------------ policy */

int mr_cpu_conv_chunk(void) { return POLICY_CHUNK; }

/* The network's options from the config: cpu.conv, cpu.activations (auto
 * is resolved by the layout, policy.h) and bf16 for the oneDNN layers. */
static mr_policy_options cpu_policy_options(int precision, const mr_cpu_config *cpu) {
    mr_policy_options o = {POLICY_CHUNK, cpu->conv, cpu->activations, precision == MR_BF16, {0}, 0};
    memcpy(o.layers, cpu->conv_layers, sizeof o.layers);
    return o;
}

static mr_status cpu_policy_plan(const mr_policy_config *cfg, int view, int max_train, int max_act, int precision,
                                 const mr_cpu_config *cpu, const mr_cuda_config *cuda, mr_bpolicy_plan *out,
                                 mr_error *err) {
    (void)cuda;   /* the cuda backend's */
    (void)max_act;   /* the rollout's inference runs in chunks and keeps nothing */
    memset(out, 0, sizeof *out);
    out->n = 1;
    const mr_policy_options o = cpu_policy_options(precision, cpu);
    out->bytes[0] = out->total = mr_policy_bytes_with(cfg, view, max_train, &o);
    return ok(err);
}

static mr_status cpu_policy_create(mr_bpolicy *bp, const mr_policy_config *cfg, int view, int max_train, int max_act,
                                   int precision, const mr_cpu_config *cpu, const mr_cuda_config *cuda,
                                   mr_devmem *mem, mr_error *err) {
    (void)cuda;   /* the cuda backend's */
    (void)max_act;
    memset(bp, 0, sizeof *bp);
    mr_policy *p = calloc(1, sizeof *p);
    if (!p) return mr_fail(err, MR_ERR_NOMEM, "out of host memory creating the network");
    const mr_policy_options o = cpu_policy_options(precision, cpu);
    const size_t bytes = mr_policy_bytes_with(cfg, view, max_train, &o);
    void *block;
    mr_status s = mr_devmem_alloc(mem, bytes, "the network", &block, err);
    if (s != MR_OK) {
        free(p);
        return s;
    }
    memset(block, 0, bytes);
    mr_arena a = {(unsigned char *)block, bytes, 0, 0};
    mr_policy_layout_with(p, cfg, view, max_train, &o, &a);
    bp->impl = p;
    bp->params = p->params;
    bp->grads = p->grads;
    bp->net = &p->net;
    return ok(err);
}

static void cpu_policy_destroy(mr_bpolicy *bp) {
    if (bp->impl) mr_policy_free(bp->impl);
    free(bp->impl);   /* its block belongs to the memory manager, released with it */
    memset(bp, 0, sizeof *bp);
}

/* The trainer's host copy: the mr_policy itself comes from the arena too. */
static void cpu_host_policy_layout(mr_bpolicy *bp, const mr_policy_config *cfg, int view, int chunk, int conv,
                                   mr_arena *a) {
    mr_policy *p = MR_TAKE(a, mr_policy, 1), planned;
    mr_policy_layout(p ? p : &planned, cfg, view, 0, chunk, conv, a);
    memset(bp, 0, sizeof *bp);
    if (!p) return;   /* a plan: sizes only */
    bp->impl = p;
    bp->params = p->params;
    bp->grads = p->grads;
    bp->net = &p->net;
}

static mr_status cpu_host_policy_init(mr_bpolicy *bp, uint64_t seed, mr_error *err) {
    if (!bp->impl) return mr_fail(err, MR_ERR_STATE, "the host network is not laid out");
    mr_policy_init(bp->impl, seed);
    return ok(err);
}

static void cpu_host_policy_free(mr_bpolicy *bp) {
    if (bp->impl) mr_policy_free(bp->impl);   /* its memory is the caller's arena */
}

static mr_status cpu_zero_grad(mr_bpolicy *bp, void *stream, mr_error *err) {
    (void)stream;
    mr_policy_zero_grad(bp->impl);
    return ok(err);
}

static mr_status cpu_act(mr_bpolicy *bp, const uint8_t *codes, const float *extra, int B, int proxy, float *logits,
                         float *value, void *stream, mr_error *err) {
    (void)stream;
    mr_policy_act(bp->impl, codes, extra, B, proxy, logits, value);
    return ok(err);
}

static mr_status cpu_forward(mr_bpolicy *bp, const uint8_t *codes, const float *extra, int B, int proxy, float *logits,
                             float *value, void *stream, mr_error *err) {
    (void)stream;
    if (mr_policy_forward(bp->impl, codes, extra, B, proxy, logits, value) != 0)
        return mr_fail(err, MR_ERR_ARG, "the network's forward: batch %d is out of range", B);
    return ok(err);
}

static mr_status cpu_act_keep(mr_bpolicy *bp, const uint8_t *codes, const float *extra, int B, int proxy,
                              float *logits, float *value, int row0, void *stream, mr_error *err) {
    (void)stream;
    if (mr_policy_act_keep(bp->impl, codes, extra, B, proxy, logits, value, row0) != 0)
        return mr_fail(err, MR_ERR_ARG, "the network's act: rows %d..%d are outside the training batch", row0,
                       row0 + B);
    return ok(err);
}

static mr_status cpu_forward_kept(mr_bpolicy *bp, int B, int proxy, float *value, void *stream, mr_error *err) {
    (void)stream;
    if (mr_policy_forward_kept(bp->impl, B, proxy, value) != 0)
        return mr_fail(err, MR_ERR_STATE, "the network's forward from the rollout: the rollout's acts did not keep "
                       "rows 0..%d with this observation expansion; this is a bug", B);
    return ok(err);
}

static mr_status cpu_backward(mr_bpolicy *bp, const float *dlogits, const float *dvalue, int B, void *stream,
                              mr_error *err) {
    (void)stream;
    if (mr_policy_backward(bp->impl, dlogits, dvalue, B) != 0)
        return mr_fail(err, MR_ERR_STATE, "the network's backward: batch %d does not match the last forward", B);
    return ok(err);
}

/* ------------------------------------------------------------------- PPO */

static mr_status cpu_gae(int T, int N, const float *reward, const float *value, const float *last_value,
                         const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                         mr_error *err) {
    (void)stream;
    mr_gae(T, N, reward, value, last_value, done, gamma, lambda, adv, ret);
    return ok(err);
}

static mr_status cpu_sample(int N, int na, const float *logits, const float *u, uint8_t *action, float *logp,
                            void *stream, mr_error *err) {
    (void)stream;
    mr_sample_actions(N, na, logits, u, action, logp);
    return ok(err);
}

static mr_status cpu_sample_box(int N, const mr_act_head *h, const float *logits, const float *eps, float *action,
                                float *env_action, float *logp, void *stream, mr_error *err) {
    (void)stream;
    mr_sample_box(N, h, logits, eps, action, env_action, logp);
    return ok(err);
}

static mr_status cpu_sample_md(int N, const mr_act_head *h, const float *logits, const float *u, uint8_t *action,
                               float *logp, void *stream, mr_error *err) {
    (void)stream;
    mr_sample_md(N, h, logits, u, action, logp);
    return ok(err);
}

static mr_status cpu_opt_begin(mr_optctl *c, void *stream, mr_error *err) {
    (void)stream;
    mr_opt_begin(c);
    return ok(err);
}

/* Per group the gradient norm; a non-finite norm or loss skips the whole
 * step (no Adam step counted), else each group is clipped by its own norm. */
static mr_status cpu_opt_step(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                              double *partials, mr_optctl *c, void *stream, mr_error *err) {
    (void)partials;
    (void)stream;
    double norm[MR_OPT_MAX_GROUPS];
    for (int g = 0; g < G->n; g++) {
        norm[g] = mr_grad_norm(grad + G->off[g], (size_t)(G->off[g + 1] - G->off[g]));
        c->s.norm[g] = (float)norm[g];
        if (!mr_finite_d(norm[g])) c->s.found_inf = 1;
    }
    if (c->s.found_inf) {
        c->s.skipped++;
        return ok(err);
    }
    c->s.step++;
    for (int g = 0; g < G->n; g++) {
        const int64_t o = G->off[g];
        mr_adam_step(param + o, grad + o, m + o, v + o, (size_t)(G->off[g + 1] - o), c->h.lr, c->h.beta1, c->h.beta2,
                     c->h.eps, mr_clip_factor(norm[g], c->h.max_norm[g]), c->s.step);
    }
    return ok(err);
}

static mr_status cpu_mean_std(const float *x, int64_t n, double *partials, double *out2, void *stream,
                              mr_error *err) {
    (void)partials;
    (void)stream;
    mr_mean_std(x, (size_t)n, &out2[0], &out2[1]);
    return ok(err);
}

static mr_status cpu_normalize(float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err) {
    (void)stream;
    if (partials) mr_normalize(x, (size_t)n, &out2[0], &out2[1]);
    else mr_normalize_with(x, (size_t)n, out2[0], out2[1]);   /* statistics given */
    return ok(err);
}

/* The loss's coefficients from its control block, and its statistics back
 * into it (a non-finite loss marks the optimizer step to skip). */
static void loss_coefs(const mr_lossctl *l, mr_ppo_coefs *co) {
    memset(co, 0, sizeof *co);
    co->clip = l->h.clip;
    co->ent_coef = l->h.ent_coef;
    co->vf_coef = l->h.vf_coef;
    co->ent_floor = l->h.ent_floor;
    co->ent_floor_coef = l->h.ent_floor_coef;
    co->value_max_of_means = l->h.value_max_of_means;
    co->num_actions = l->h.num_actions;
}
static void loss_stats(mr_lossctl *l, mr_optctl *o, const mr_ppo_stats *st, int B) {
    l->s.loss = st->loss;
    l->s.policy_loss = st->policy_loss;
    l->s.value_loss = st->value_loss;
    l->s.entropy = st->entropy;
    l->s.approx_kl = st->approx_kl;
    l->s.clip_fraction = st->clip_fraction;
    l->s.B = B;
    if (!mr_finite_d(st->loss)) o->s.found_inf = 1;
}

static mr_status cpu_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                              const float *old_logp, const float *adv, const float *old_value, const float *target,
                              mr_lossctl *l, mr_optctl *o, double *partials, float *dlogits, float *dvalue,
                              void *stream, mr_error *err) {
    (void)partials;
    (void)stream;
    mr_ppo_coefs co;
    loss_coefs(l, &co);
    mr_ppo_stats st;
    mr_ppo_loss(B, logits, value, action, old_logp, adv, old_value, target, &co, dlogits, dvalue, &st);
    loss_stats(l, o, &st, B);
    return ok(err);
}

static mr_status cpu_ppo_loss_box(int B, const mr_act_head *h, const float *logits, const float *value,
                                  const float *action, const float *old_logp, const float *adv, const float *old_value,
                                  const float *target, mr_lossctl *l, mr_optctl *o, double *partials, float *dlogits,
                                  float *dvalue, void *stream, mr_error *err) {
    (void)partials;
    (void)stream;
    mr_ppo_coefs co;
    loss_coefs(l, &co);
    mr_ppo_stats st;
    mr_ppo_loss_box(B, h, logits, value, action, old_logp, adv, old_value, target, &co, dlogits, dvalue, &st);
    loss_stats(l, o, &st, B);
    return ok(err);
}

static mr_status cpu_ppo_loss_md(int B, const mr_act_head *h, const float *logits, const float *value,
                                 const uint8_t *action, const float *old_logp, const float *adv, const float *old_value,
                                 const float *target, mr_lossctl *l, mr_optctl *o, double *partials, float *dlogits,
                                 float *dvalue, void *stream, mr_error *err) {
    (void)partials;
    (void)stream;
    mr_ppo_coefs co;
    loss_coefs(l, &co);
    mr_ppo_stats st;
    mr_ppo_loss_md(B, h, logits, value, action, old_logp, adv, old_value, target, &co, dlogits, dvalue, &st);
    loss_stats(l, o, &st, B);
    return ok(err);
}

static mr_status cpu_popart(mr_popart_ctl *pa, const float *returns, int64_t n, double *partials, float *w, float *b,
                            int k, float *mw, float *vw, float *mb, float *vb, void *stream, mr_error *err) {
    (void)partials;
    (void)stream;
    mr_popart p = {pa->mean, pa->std, pa->count};
    const double std0 = p.std;
    if (returns) {
        mr_popart_update(&p, returns, (size_t)n, pa->beta_min, w, b, k, mw, vw, mb, vb);
    } else if (n > 0) {   /* pa->batch holds the statistics of n returns (data-parallel: every rank's) */
        mr_popart_rescale r;
        mr_popart_step(&p.mean, &p.std, &p.count, pa->beta_min, pa->batch[0], pa->batch[1], n, &r);
        mr_popart_rescale_layer(&r, w, b, k, mw, vw, mb, vb);
    }
    pa->mean = p.mean;
    pa->std = p.std;
    pa->count = p.count;
    pa->scale = std0 / p.std;
    return ok(err);
}

/* --------------------------------------------------------------- the glue */

static mr_status cpu_step_in(const mr_env_state *s, uint64_t seed, float *extra, float *u, void *stream, mr_error *err) {
    (void)stream;
    for (int i = 0; i < s->n; i++) {
        mr_env_critic_extra_one(s, i, extra + (size_t)i * MR_ENV_EXTRA_STRIDE);
        mr_loop_step_in(s, i, seed, u);
    }
    return ok(err);
}

static mr_status cpu_step_out(const mr_env_state *s, const mr_popart_ctl *pa, const float *value, float *val, float *rew,
                              uint8_t *done, void *stream, mr_error *err) {
    (void)stream;
    float pm, ps, inv;
    mr_loop_popart_floats(pa, &pm, &ps, &inv);
    for (int i = 0; i < s->n; i++) mr_loop_step_out(s, i, pm, ps, value, val, rew, done);
    return ok(err);
}

static mr_status cpu_keep_final(const mr_env_state *s, const mr_loop_final_args *f, int row0, void *stream,
                                mr_error *err) {
    (void)stream;
    for (int i = 0; i < s->n; i++) mr_loop_keep_final(s, i, f, row0);
    return ok(err);
}

static mr_status cpu_add_final(const mr_loop_final_args *f, const mr_popart_ctl *pa, float gamma, float *rew,
                               void *stream, mr_error *err) {
    (void)stream;
    float pm, ps, inv;
    mr_loop_popart_floats(pa, &pm, &ps, &inv);
    const int64_t K = (int64_t)f->kf * f->N;
    for (int64_t j = 0; j < K; j++) mr_loop_add_final(f, j, pm, ps, gamma, rew);
    return ok(err);
}

static mr_status cpu_gather(const mr_loop_gather_args *g, const mr_popart_ctl *pa, void *stream, mr_error *err) {
    (void)stream;
    float pm, ps, inv;
    mr_loop_popart_floats(pa, &pm, &ps, &inv);
    const int M = g->M, VV = g->VV;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < M; k++) {
        memcpy(g->mb_obs + (size_t)k * VV, g->obs + (size_t)g->idx[k] * VV, (size_t)VV);
        mr_loop_gather_row(g, k, pm, inv);
    }
    return ok(err);
}

static mr_status cpu_diff(const float *a, const float *b, float *out, int64_t n, void *stream, mr_error *err) {
    (void)stream;
    for (int64_t i = 0; i < n; i++) out[i] = a[i] - b[i];
    return ok(err);
}

static mr_status cpu_accumulate(mr_loop_metrics *m, const mr_lossctl *l, const mr_optctl *o, int ngroups, void *stream,
                                mr_error *err) {
    (void)stream;
    mr_loop_accumulate(m, l, o, ngroups);
    return ok(err);
}

static mr_status cpu_finish(mr_loop_metrics *m, const mr_popart_ctl *pa, const mr_optctl *o, void *stream,
                            mr_error *err) {
    (void)stream;
    mr_loop_finish(m, pa, o);
    return ok(err);
}

/* What mr_build_info says of the BLAS: OpenBLAS's own description and the
 * kernel set it runs (nn.c). */
static const char *cpu_blas(void) {
    static _Thread_local char text[256];
    const char *config = openblas_get_config();
    snprintf(text, sizeof text, "%s, %s kernels", config ? config : "OpenBLAS", mr_cpu_blas_kernels());
    return text;
}

/* Two tables that differ only in the precisions accepted: bf16 where oneDNN
 * has bf16 kernels for this CPU (AVX512-BF16 or AMX; conv_dnnl.h), which
 * mr_backend_cpu asks it. */
#define CPU_BACKEND(mask)                                    \
    {                                                        \
        .name = "cpu",                                       \
        .device = MR_DEVICE_CPU,                             \
        .host_memory = 1,                                    \
        .precisions = (mask),                                \
        .cheap_events = 1,                                   \
        .blas = cpu_blas,                                    \
        .blas_kernels = mr_cpu_blas_kernels,                 \
        .blas_better_kernels = mr_cpu_blas_better_kernels,   \
        .policy_plan = cpu_policy_plan,                      \
        .enter = cpu_enter,                                  \
        .describe = cpu_describe,                            \
        .policy_describe = cpu_policy_describe,              \
        .device_memory = cpu_memory,                         \
        .staging_memory = cpu_staging,                       \
        .copy = cpu_copy,                                    \
        .memset = cpu_memset,                                \
        .stream_create = cpu_stream_create,                  \
        .stream_destroy = cpu_stream_destroy,                \
        .stream_sync = cpu_sync,                             \
        .event_create = cpu_event_create,                    \
        .event_destroy = cpu_event_destroy,                  \
        .event_record = cpu_event_record,                    \
        .event_sync = cpu_sync,                              \
        .event_elapsed = cpu_event_elapsed,                  \
        .env_reset_all = cpu_env_reset,                      \
        .env_step_all = cpu_env_step,                        \
        .env_step_random = cpu_env_step_random,              \
        .env_clear_logs = cpu_env_clear,                     \
        .env_log_reduce = cpu_env_reduce,                    \
        .policy_create = cpu_policy_create,                  \
        .policy_destroy = cpu_policy_destroy,                \
        .policy_zero_grad = cpu_zero_grad,                   \
        .policy_act = cpu_act,                               \
        .policy_forward = cpu_forward,                       \
        .policy_backward = cpu_backward,                     \
        .policy_act_keep = cpu_act_keep,                     \
        .policy_forward_kept = cpu_forward_kept,             \
        .host_policy_layout = cpu_host_policy_layout,        \
        .host_policy_init = cpu_host_policy_init,            \
        .host_policy_free = cpu_host_policy_free,            \
        .gae = cpu_gae,                                      \
        .sample = cpu_sample,                                \
        .sample_box = cpu_sample_box,                        \
        .sample_md = cpu_sample_md,                          \
        .opt_begin = cpu_opt_begin,                          \
        .opt_step = cpu_opt_step,                            \
        .mean_std = cpu_mean_std,                            \
        .normalize = cpu_normalize,                          \
        .ppo_loss = cpu_ppo_loss,                            \
        .ppo_loss_box = cpu_ppo_loss_box,                    \
        .ppo_loss_md = cpu_ppo_loss_md,                      \
        .popart_update = cpu_popart,                         \
        .step_in = cpu_step_in,                              \
        .step_out = cpu_step_out,                            \
        .keep_final = cpu_keep_final,                        \
        .add_final = cpu_add_final,                          \
        .gather = cpu_gather,                                \
        .diff = cpu_diff,                                    \
        .accumulate = cpu_accumulate,                        \
        .finish = cpu_finish,                                \
    }

static const mr_backend cpu_backend = CPU_BACKEND(1 << MR_FP32);
static const mr_backend cpu_backend_bf16 = CPU_BACKEND((1 << MR_FP32) | (1 << MR_BF16));

const char *mr_cpu_bf16(void) { return mr_bf16_isa(); }

const mr_backend *mr_backend_cpu(void) { return mr_bf16_isa() ? &cpu_backend_bf16 : &cpu_backend; }

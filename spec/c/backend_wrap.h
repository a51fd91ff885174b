/*
 * backend_wrap.h - a wrapper around a backend table (backend.h) for the tests
 * of the one trainer loop (test_trainer_loop_*.c). bw_init(base) fills the
 * table bw_table() whose every entry forwards to base's and, on the way:
 *   counts     every call that can fail (BW.calls; per operation BW.count[])
 *   fails      the call numbered BW.fail_at (1-based over BW.calls) with
 *              BW.fail_status and a message naming the operation, once;
 *              a raw allocation under the memory manager counts as the
 *              operation "raw_alloc" and fails by returning NULL
 *   records    while BW.recording, the sequence of operations (copies with
 *              their kind) into BW.rec
 *   checks     that every pointer an operation reads or writes lies in
 *              memory the trainer's memory manager took from device_memory
 *              (a GPU kernel given host memory would fault), whole ranges
 *              where the size is known; copies by kind; while BW.strict,
 *              host sides of copies in staging memory (a CUDA graph
 *              records pinned copies only). Violations are counted with
 *              the first one's description
 *   budgets    with BW.budget > 0, device_memory reports a device of that
 *              many bytes (total and free) and refuses raw allocations
 *              past it
 *   balances   live streams, events, networks and memory segments, so a
 *              failed creation or a free can be checked to leave nothing.
 * One wrapper per program (the entries are plain functions: no context).
 */
#ifndef BACKEND_WRAP_H
#define BACKEND_WRAP_H
#include "backend.h"
#include "errors.h"

#include <stdio.h>
#include <string.h>

#define BW_OPS(X)                                                                                                 \
    X(policy_plan) X(enter) X(device_memory) X(staging_memory) X(copy) X(memset) X(stream_create) X(stream_sync)  \
    X(event_create) X(event_record) X(event_sync) X(event_elapsed) X(env_reset_all) X(env_step_all)               \
    X(env_clear_logs) X(env_log_reduce) X(policy_create) X(policy_zero_grad) X(policy_act) X(policy_forward)      \
    X(policy_backward) X(policy_act_keep) X(policy_forward_kept) X(gae) X(sample) X(opt_begin) X(opt_step) X(mean_std) X(normalize) X(ppo_loss)             \
    X(popart_update) X(step_in) X(step_out) X(keep_final) X(add_final) X(gather) X(diff) X(accumulate) X(finish) X(raw_alloc)
#define BW_ENUM(n) BW_##n,
enum { BW_OPS(BW_ENUM) BW_NOPS };
#undef BW_ENUM
#define BW_NAME(n) #n,
static const char *const bw_names[BW_NOPS] = {BW_OPS(BW_NAME)};
#undef BW_NAME

/* A recorded entry: the operation, and for copies 256 * kind on top. */
#define BW_REC(op, kind) ((op) + 256 * (kind))
#define BW_MAX_REC 8192
#define BW_MAX_SEGS 256

typedef struct bw_mem {
    mr_devmem_backend inner;   /* the base's */
    size_t budget, used;       /* budget 0: the base's total */
    int nseg;
    const unsigned char *ptr[BW_MAX_SEGS];
    size_t size[BW_MAX_SEGS];
    long live;
} bw_mem;

typedef struct bw_state {
    const mr_backend *base;
    mr_backend table;
    char name[48];
    long calls, count[BW_NOPS];
    long fail_at;               /* 0: none */
    mr_status fail_status;
    int failed_op;              /* the operation that was failed, -1 none */
    long failures;
    int recording, nrec;
    int rec[BW_MAX_REC];
    int strict;
    long violations;
    char first_violation[256];
    size_t budget;
    bw_mem dev, stage;
    long streams, events, policies;
} bw_state;

static bw_state BW;

static inline const char *bw_name(int rec) {
    static char buf[4][40];
    static int k;
    const int op = rec % 256, kind = rec / 256;
    char *b = buf[k++ & 3];
    if (op < 0 || op >= BW_NOPS) snprintf(b, 40, "?%d", rec);
    else if (op == BW_copy)
        snprintf(b, 40, "copy:%s", kind == MR_COPY_H2D ? "H2D" : kind == MR_COPY_D2H ? "D2H" : kind == MR_COPY_D2D ? "D2D" : "?");
    else snprintf(b, 40, "%s", bw_names[op]);
    return b;
}

/* Counts a call; MR_OK or the injected failure. */
static inline mr_status bw_op(int op, int kind, mr_error *err) {
    BW.calls++;
    BW.count[op]++;
    if (BW.recording && BW.nrec < BW_MAX_REC) BW.rec[BW.nrec++] = BW_REC(op, kind);
    if (BW.fail_at > 0 && BW.calls == BW.fail_at) {
        BW.failed_op = op;
        BW.failures++;
        return mr_fail(err, BW.fail_status, "injected failure of %s (call %ld)", bw_names[op], BW.calls);
    }
    return MR_OK;
}

static inline void bw_violation(const char *op, const char *what, const void *p, size_t bytes, const char *where) {
    if (BW.violations++ == 0)
        snprintf(BW.first_violation, sizeof BW.first_violation, "%s: %s = %p (%zu bytes) is not in %s", op, what, p,
                 bytes, where);
}

static inline int bw_in(const bw_mem *m, const void *p, size_t bytes) {
    const unsigned char *c = (const unsigned char *)p;
    for (int i = 0; i < m->nseg; i++)
        if (c >= m->ptr[i] && c + bytes <= m->ptr[i] + m->size[i]) return 1;
    return 0;
}

/* Pointer p of operation op must lie in device memory for `bytes` bytes (at least 1). */
#define BW_DEV(op, p, bytes)                                                                    \
    do {                                                                                        \
        size_t b_ = (size_t)(bytes);                                                            \
        if (b_ == 0) b_ = 1;                                                                    \
        if (!bw_in(&BW.dev, (p), b_)) bw_violation(#op, #p, (const void *)(p), b_, "device memory"); \
    } while (0)
#define BW_DEV_OPT(op, p, bytes) do { if (p) BW_DEV(op, p, bytes); } while (0)
#define BW_TRY(op, kind) do { mr_status s_ = bw_op(BW_##op, kind, err); if (s_ != MR_OK) return s_; } while (0)

/* ---------------------------------------------------------------- memory */

static inline void *bw_raw_alloc(void *ctx, size_t bytes, const char **reason) {
    bw_mem *m = (bw_mem *)ctx;
    mr_error e;
    if (bw_op(BW_raw_alloc, 0, &e) != MR_OK) {
        *reason = "an injected raw allocation failure";
        return NULL;
    }
    if (m->budget && m->used + bytes > m->budget) {
        *reason = "out of memory (the test's budget)";
        return NULL;
    }
    if (m->nseg == BW_MAX_SEGS) {
        *reason = "the test wrapper's segment table is full";
        return NULL;
    }
    void *p = m->inner.raw_alloc(m->inner.ctx, bytes, reason);
    if (!p) return NULL;
    m->ptr[m->nseg] = (const unsigned char *)p;
    m->size[m->nseg++] = bytes;
    m->used += bytes;
    m->live++;
    return p;
}

static inline void bw_raw_free(void *ctx, void *p) {
    bw_mem *m = (bw_mem *)ctx;
    for (int i = 0; i < m->nseg; i++)
        if (m->ptr[i] == (const unsigned char *)p) {
            m->used -= m->size[i];
            m->nseg--;
            m->ptr[i] = m->ptr[m->nseg];
            m->size[i] = m->size[m->nseg];
            m->live--;
            m->inner.raw_free(m->inner.ctx, p);
            return;
        }
    bw_violation("raw_free", "p", p, 0, "a live segment");
}

static inline size_t bw_free_bytes(void *ctx) {
    bw_mem *m = (bw_mem *)ctx;
    if (m->budget) return m->used < m->budget ? m->budget - m->used : 0;
    return m->inner.free_bytes ? m->inner.free_bytes(m->inner.ctx) : 0;
}

static inline void bw_mem_wrap(bw_mem *m, const mr_devmem_backend *inner, size_t budget, mr_devmem_backend *out) {
    m->inner = *inner;
    m->budget = budget;
    *out = *inner;
    out->ctx = m;
    out->raw_alloc = bw_raw_alloc;
    out->raw_free = bw_raw_free;
    out->free_bytes = bw_free_bytes;
    if (budget) out->total_bytes = budget;
}

static mr_status bw_device_memory(int device, mr_devmem_backend *out, mr_error *err) {
    BW_TRY(device_memory, 0);
    mr_devmem_backend in;
    mr_status s = BW.base->device_memory(device, &in, err);
    if (s != MR_OK) return s;
    bw_mem_wrap(&BW.dev, &in, BW.budget, out);
    return MR_OK;
}

static mr_status bw_staging_memory(mr_devmem_backend *out, mr_error *err) {
    BW_TRY(staging_memory, 0);
    mr_devmem_backend in;
    mr_status s = BW.base->staging_memory(&in, err);
    if (s != MR_OK) return s;
    bw_mem_wrap(&BW.stage, &in, 0, out);
    return MR_OK;
}

/* ------------------------------------------------------ runtime, events */

static mr_status bw_policy_plan(const mr_policy_config *cfg, int view, int max_train, int max_act, int precision,
                                const mr_cpu_config *cpu, const mr_cuda_config *cuda, mr_bpolicy_plan *out,
                                mr_error *err) {
    BW_TRY(policy_plan, 0);
    return BW.base->policy_plan(cfg, view, max_train, max_act, precision, cpu, cuda, out, err);
}
static mr_status bw_enter(int device, int threads, mr_error *err) {
    BW_TRY(enter, 0);
    return BW.base->enter(device, threads, err);
}
static void bw_describe(int device, int threads, int precision, char *buf, size_t len) {
    BW.base->describe(device, threads, precision, buf, len);
}
static mr_status bw_copy(void *dst, const void *src, size_t bytes, int kind, void *stream, mr_error *err) {
    BW_TRY(copy, kind);
    if (bytes) {
        const int dd = bw_in(&BW.dev, dst, bytes), sd = bw_in(&BW.dev, src, bytes);
        if (kind == MR_COPY_H2D || kind == MR_COPY_D2D) {
            if (!dd) bw_violation("copy", "dst", dst, bytes, "device memory");
        } else if (dd) bw_violation("copy D2H", "dst", dst, bytes, "host memory");
        if (kind == MR_COPY_D2H || kind == MR_COPY_D2D) {
            if (!sd) bw_violation("copy", "src", src, bytes, "device memory");
        } else if (sd) bw_violation("copy H2D", "src", src, bytes, "host memory");
        if (kind != MR_COPY_H2D && kind != MR_COPY_D2H && kind != MR_COPY_D2D)
            bw_violation("copy", "kind", dst, bytes, "a known kind");
        if (BW.strict && kind == MR_COPY_H2D && !bw_in(&BW.stage, src, bytes))
            bw_violation("copy H2D in an update", "src", src, bytes, "staging memory");
        if (BW.strict && kind == MR_COPY_D2H && !bw_in(&BW.stage, dst, bytes))
            bw_violation("copy D2H in an update", "dst", dst, bytes, "staging memory");
    }
    return BW.base->copy(dst, src, bytes, kind, stream, err);
}
static mr_status bw_memset(void *dst, int value, size_t bytes, void *stream, mr_error *err) {
    BW_TRY(memset, 0);
    BW_DEV(memset, dst, bytes);
    return BW.base->memset(dst, value, bytes, stream, err);
}
static mr_status bw_stream_create(void **stream, mr_error *err) {
    BW_TRY(stream_create, 0);
    mr_status s = BW.base->stream_create(stream, err);
    if (s == MR_OK) BW.streams++;
    return s;
}
static void bw_stream_destroy(void *stream) {
    BW.streams--;
    BW.base->stream_destroy(stream);
}
static mr_status bw_stream_sync(void *stream, mr_error *err) {
    BW_TRY(stream_sync, 0);
    return BW.base->stream_sync(stream, err);
}
static mr_status bw_event_create(void **ev, mr_error *err) {
    BW_TRY(event_create, 0);
    mr_status s = BW.base->event_create(ev, err);
    if (s == MR_OK) BW.events++;
    return s;
}
static void bw_event_destroy(void *ev) {
    BW.events--;
    BW.base->event_destroy(ev);
}
static mr_status bw_event_record(void *ev, void *stream, mr_error *err) {
    BW_TRY(event_record, 0);
    return BW.base->event_record(ev, stream, err);
}
static mr_status bw_event_sync(void *ev, mr_error *err) {
    BW_TRY(event_sync, 0);
    return BW.base->event_sync(ev, err);
}
static mr_status bw_event_elapsed(void *a, void *b, float *ms, mr_error *err) {
    BW_TRY(event_elapsed, 0);
    return BW.base->event_elapsed(a, b, ms, err);
}

/* ------------------------------------------------------------ environment */

static inline void bw_env(const char *op, const mr_env_state *s) {
    const size_t n = (size_t)s->n;
    const size_t ob = n * (size_t)s->obs_size * (s->obs ? 1 : sizeof(float));
    const void *obs = s->obs ? (const void *)s->obs : (const void *)s->obs_f;
    if (!bw_in(&BW.dev, obs, ob)) bw_violation(op, "s->obs", obs, ob, "device memory");
    if (!bw_in(&BW.dev, s->reward, n * 4)) bw_violation(op, "s->reward", s->reward, n * 4, "device memory");
    if (!bw_in(&BW.dev, s->tick, n * 4)) bw_violation(op, "s->tick", s->tick, n * 4, "device memory");
    if (!bw_in(&BW.dev, s->log, n * sizeof *s->log)) bw_violation(op, "s->log", s->log, n * sizeof *s->log, "device memory");
    if (s->final_obs && !bw_in(&BW.dev, s->final_obs, ob)) bw_violation(op, "s->final_obs", s->final_obs, ob, "device memory");
    if (s->final_extra && !bw_in(&BW.dev, s->final_extra, n * 8))
        bw_violation(op, "s->final_extra", s->final_extra, n * 8, "device memory");
    mr_env_section sec[MR_ENV_MAX_SECTIONS];   /* the environment's own buffers too */
    const int k = mr_env_sections(s, sec);
    for (int i = 0; i < k; i++)
        if (!bw_in(&BW.dev, sec[i].data, sec[i].bytes)) bw_violation(op, sec[i].name, sec[i].data, sec[i].bytes, "device memory");
}
static mr_status bw_env_reset_all(const mr_env_state *s, void *stream, mr_error *err) {
    BW_TRY(env_reset_all, 0);
    bw_env("env_reset_all", s);
    return BW.base->env_reset_all(s, stream, err);
}
static mr_status bw_env_step_all(const mr_env_state *s, const uint8_t *actions, void *stream, mr_error *err) {
    BW_TRY(env_step_all, 0);
    bw_env("env_step_all", s);
    BW_DEV(env_step_all, actions, s->n);
    return BW.base->env_step_all(s, actions, stream, err);
}
static mr_status bw_env_clear_logs(const mr_env_state *s, void *stream, mr_error *err) {
    BW_TRY(env_clear_logs, 0);
    bw_env("env_clear_logs", s);
    return BW.base->env_clear_logs(s, stream, err);
}
static mr_status bw_env_log_reduce(const mr_env_state *s, mr_env_log *out, void *stream, mr_error *err) {
    BW_TRY(env_log_reduce, 0);
    bw_env("env_log_reduce", s);
    BW_DEV(env_log_reduce, out, sizeof *out);
    return BW.base->env_log_reduce(s, out, stream, err);
}

/* ------------------------------------------------------------------ policy */

static mr_status bw_policy_create(mr_bpolicy *p, const mr_policy_config *cfg, int view, int max_train, int max_act,
                                  int precision, const mr_cpu_config *cpu, const mr_cuda_config *cuda, mr_devmem *mem,
                                  mr_error *err) {
    BW_TRY(policy_create, 0);
    mr_status s = BW.base->policy_create(p, cfg, view, max_train, max_act, precision, cpu, cuda, mem, err);
    if (s == MR_OK) BW.policies++;
    return s;
}
static void bw_policy_destroy(mr_bpolicy *p) {
    BW.policies--;
    BW.base->policy_destroy(p);
}
static inline void bw_pol(const char *op, const mr_bpolicy *p) {
    const size_t P = p->net->n_params * sizeof(float);
    if (!bw_in(&BW.dev, p->params, P)) bw_violation(op, "p->params", p->params, P, "device memory");
    if (!bw_in(&BW.dev, p->grads, P)) bw_violation(op, "p->grads", p->grads, P, "device memory");
}
static mr_status bw_policy_zero_grad(mr_bpolicy *p, void *stream, mr_error *err) {
    BW_TRY(policy_zero_grad, 0);
    bw_pol("policy_zero_grad", p);
    return BW.base->policy_zero_grad(p, stream, err);
}
/* What an act or a forward reads and writes: codes, extra, logits, value of B samples. */
#define BW_POLICY_IO(op, B)                                          \
    do {                                                             \
        BW_DEV(op, codes, (B));                                      \
        BW_DEV(op, extra, (size_t)(B) * 8);                          \
        BW_DEV(op, logits, (size_t)(B) * MR_MAX_ACTIONS * 4);        \
        BW_DEV(op, value, (size_t)(B) * 4);                          \
    } while (0)
static mr_status bw_policy_act(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                               float *logits, float *value, void *stream, mr_error *err) {
    BW_TRY(policy_act, 0);
    bw_pol("policy_act", p);
    BW_POLICY_IO(policy_act, B);
    return BW.base->policy_act(p, codes, extra, B, proxy, logits, value, stream, err);
}
static mr_status bw_policy_forward(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                                   float *logits, float *value, void *stream, mr_error *err) {
    BW_TRY(policy_forward, 0);
    bw_pol("policy_forward", p);
    BW_POLICY_IO(policy_forward, B);
    return BW.base->policy_forward(p, codes, extra, B, proxy, logits, value, stream, err);
}
static mr_status bw_policy_backward(mr_bpolicy *p, const float *dlogits, const float *dvalue, int B, void *stream,
                                    mr_error *err) {
    BW_TRY(policy_backward, 0);
    bw_pol("policy_backward", p);
    BW_DEV(policy_backward, dlogits, (size_t)B * MR_MAX_ACTIONS * 4);
    BW_DEV(policy_backward, dvalue, (size_t)B * 4);
    return BW.base->policy_backward(p, dlogits, dvalue, B, stream, err);
}

static mr_status bw_policy_act_keep(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                                    float *logits, float *value, int row0, void *stream, mr_error *err) {
    BW_TRY(policy_act_keep, 0);
    bw_pol("policy_act_keep", p);
    BW_POLICY_IO(policy_act_keep, B);
    return BW.base->policy_act_keep(p, codes, extra, B, proxy, logits, value, row0, stream, err);
}
static mr_status bw_policy_forward_kept(mr_bpolicy *p, int B, int proxy, float *value, void *stream, mr_error *err) {
    BW_TRY(policy_forward_kept, 0);
    bw_pol("policy_forward_kept", p);
    BW_DEV(policy_forward_kept, value, (size_t)B * 4);
    return BW.base->policy_forward_kept(p, B, proxy, value, stream, err);
}

/* ------------------------------------------------------------------- PPO */

static mr_status bw_gae(int T, int N, const float *reward, const float *value, const float *last_value,
                        const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                        mr_error *err) {
    BW_TRY(gae, 0);
    const size_t B = (size_t)T * (size_t)N;
    BW_DEV(gae, reward, B * 4);
    BW_DEV(gae, value, B * 4);
    BW_DEV(gae, last_value, (size_t)N * 4);
    BW_DEV(gae, done, B);
    BW_DEV(gae, adv, B * 4);
    BW_DEV(gae, ret, B * 4);
    return BW.base->gae(T, N, reward, value, last_value, done, gamma, lambda, adv, ret, stream, err);
}
static mr_status bw_sample(int N, int na, const float *logits, const float *u, uint8_t *action, float *logp,
                           void *stream, mr_error *err) {
    BW_TRY(sample, 0);
    BW_DEV(sample, logits, (size_t)N * na * 4);
    BW_DEV(sample, u, (size_t)N * 4);
    BW_DEV(sample, action, (size_t)N);
    BW_DEV(sample, logp, (size_t)N * 4);
    return BW.base->sample(N, na, logits, u, action, logp, stream, err);
}
static mr_status bw_opt_begin(mr_optctl *ctl, void *stream, mr_error *err) {
    BW_TRY(opt_begin, 0);
    BW_DEV(opt_begin, ctl, sizeof *ctl);
    return BW.base->opt_begin(ctl, stream, err);
}
static mr_status bw_opt_step(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                             double *partials, mr_optctl *ctl, void *stream, mr_error *err) {
    BW_TRY(opt_step, 0);
    const size_t P = (size_t)G->off[G->n] * 4;
    BW_DEV(opt_step, param, P);
    BW_DEV(opt_step, grad, P);
    BW_DEV(opt_step, m, P);
    BW_DEV(opt_step, v, P);
    BW_DEV(opt_step, partials, 8);
    BW_DEV(opt_step, ctl, sizeof *ctl);
    return BW.base->opt_step(param, grad, m, v, G, partials, ctl, stream, err);
}
static mr_status bw_mean_std(const float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err) {
    BW_TRY(mean_std, 0);
    BW_DEV(mean_std, x, (size_t)n * 4);
    BW_DEV(mean_std, partials, 8);
    BW_DEV(mean_std, out2, 16);
    return BW.base->mean_std(x, n, partials, out2, stream, err);
}
static mr_status bw_normalize(float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err) {
    BW_TRY(normalize, 0);
    BW_DEV(normalize, x, (size_t)n * 4);
    if (partials) BW_DEV(normalize, partials, 8);   /* NULL: out2 given (data-parallel) */
    BW_DEV(normalize, out2, 16);
    return BW.base->normalize(x, n, partials, out2, stream, err);
}
static mr_status bw_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                             const float *old_logp, const float *adv, const float *old_value, const float *target,
                             mr_lossctl *loss, mr_optctl *opt, double *partials, float *dlogits, float *dvalue,
                             void *stream, mr_error *err) {
    BW_TRY(ppo_loss, 0);
    const size_t b4 = (size_t)B * 4, b32 = b4 * MR_MAX_ACTIONS;
    BW_DEV(ppo_loss, logits, b32);
    BW_DEV(ppo_loss, value, b4);
    BW_DEV(ppo_loss, action, (size_t)B);
    BW_DEV(ppo_loss, old_logp, b4);
    BW_DEV(ppo_loss, adv, b4);
    BW_DEV(ppo_loss, old_value, b4);
    BW_DEV(ppo_loss, target, b4);
    BW_DEV(ppo_loss, loss, sizeof *loss);
    BW_DEV(ppo_loss, opt, sizeof *opt);
    BW_DEV(ppo_loss, partials, 8);
    BW_DEV(ppo_loss, dlogits, b32);
    BW_DEV(ppo_loss, dvalue, b4);
    return BW.base->ppo_loss(B, logits, value, action, old_logp, adv, old_value, target, loss, opt, partials, dlogits,
                             dvalue, stream, err);
}
static mr_status bw_popart_update(mr_popart_ctl *pa, const float *returns, int64_t n, double *partials, float *w,
                                  float *b, int k, float *mw, float *vw, float *mb, float *vb, void *stream,
                                  mr_error *err) {
    BW_TRY(popart_update, 0);
    BW_DEV(popart_update, pa, sizeof *pa);
    if (returns) BW_DEV(popart_update, returns, (size_t)n * 4);   /* NULL: pa->batch given (data-parallel) */
    BW_DEV(popart_update, partials, 8);
    BW_DEV(popart_update, w, (size_t)k * 4);
    BW_DEV(popart_update, b, 4);
    BW_DEV(popart_update, mw, (size_t)k * 4);
    BW_DEV(popart_update, vw, (size_t)k * 4);
    BW_DEV(popart_update, mb, 4);
    BW_DEV(popart_update, vb, 4);
    return BW.base->popart_update(pa, returns, n, partials, w, b, k, mw, vw, mb, vb, stream, err);
}

/* --------------------------------------------------------------- the glue */

static mr_status bw_step_in(const mr_env_state *s, uint64_t seed, float *extra, float *u, void *stream, mr_error *err) {
    BW_TRY(step_in, 0);
    bw_env("step_in", s);
    BW_DEV(step_in, extra, (size_t)s->n * 8);
    BW_DEV_OPT(step_in, u, (size_t)s->n * 4);
    return BW.base->step_in(s, seed, extra, u, stream, err);
}
static mr_status bw_step_out(const mr_env_state *s, const mr_popart_ctl *pa, const float *value, float *val, float *rew,
                             uint8_t *done, void *stream, mr_error *err) {
    BW_TRY(step_out, 0);
    bw_env("step_out", s);
    BW_DEV(step_out, pa, sizeof *pa);
    BW_DEV(step_out, value, (size_t)s->n * 4);
    BW_DEV(step_out, val, (size_t)s->n * 4);
    BW_DEV_OPT(step_out, rew, (size_t)s->n * 4);
    BW_DEV_OPT(step_out, done, (size_t)s->n);
    if ((rew == NULL) != (done == NULL)) bw_violation("step_out", "rew, done", rew, 0, "both NULL or neither");
    return BW.base->step_out(s, pa, value, val, rew, done, stream, err);
}
static inline void bw_final(const char *op, const mr_loop_final_args *f) {
    const size_t n = (size_t)f->N, K = (size_t)f->kf * n;
    if (!bw_in(&BW.dev, f->count, n * 4)) bw_violation(op, "f->count", f->count, n * 4, "device memory");
    if (!bw_in(&BW.dev, f->row, K * 4)) bw_violation(op, "f->row", f->row, K * 4, "device memory");
    if (!bw_in(&BW.dev, f->value, K * 4)) bw_violation(op, "f->value", f->value, K * 4, "device memory");
    if (!bw_in(&BW.dev, f->extra, K * 8)) bw_violation(op, "f->extra", f->extra, K * 8, "device memory");
    if (!bw_in(&BW.dev, f->obs, K * (size_t)f->row_bytes))
        bw_violation(op, "f->obs", f->obs, K * (size_t)f->row_bytes, "device memory");
}
static mr_status bw_keep_final(const mr_env_state *s, const mr_loop_final_args *f, int row0, void *stream,
                               mr_error *err) {
    BW_TRY(keep_final, 0);
    bw_env("keep_final", s);
    bw_final("keep_final", f);
    if (!s->final_obs || !s->final_extra) bw_violation("keep_final", "s->final_obs", s->final_obs, 0, "set");
    return BW.base->keep_final(s, f, row0, stream, err);
}
static mr_status bw_add_final(const mr_loop_final_args *f, const mr_popart_ctl *pa, float gamma, float *rew,
                              void *stream, mr_error *err) {
    BW_TRY(add_final, 0);
    bw_final("add_final", f);
    BW_DEV(add_final, pa, sizeof *pa);
    BW_DEV(add_final, rew, 4);
    return BW.base->add_final(f, pa, gamma, rew, stream, err);
}
static mr_status bw_gather(const mr_loop_gather_args *a, const mr_popart_ctl *pa, void *stream, mr_error *err) {
    BW_TRY(gather, 0);
    const size_t M = (size_t)a->M, VV = (size_t)a->VV;
    BW_DEV(gather, pa, sizeof *pa);
    BW_DEV(gather, a->idx, M * 4);
    BW_DEV(gather, a->obs, VV);
    BW_DEV(gather, a->act, 1);
    BW_DEV(gather, a->extra, 8);
    BW_DEV(gather, a->logp, 4);
    BW_DEV(gather, a->val, 4);
    BW_DEV(gather, a->adv, 4);
    BW_DEV(gather, a->ret, 4);
    BW_DEV(gather, a->mb_obs, M * VV);
    BW_DEV(gather, a->mb_act, M);
    BW_DEV(gather, a->mb_extra, M * 8);
    BW_DEV(gather, a->mb_logp, M * 4);
    BW_DEV(gather, a->mb_adv, M * 4);
    BW_DEV(gather, a->mb_oldv, M * 4);
    BW_DEV(gather, a->mb_target, M * 4);
    return BW.base->gather(a, pa, stream, err);
}
static mr_status bw_diff(const float *a, const float *b, float *out, int64_t n, void *stream, mr_error *err) {
    BW_TRY(diff, 0);
    BW_DEV(diff, a, (size_t)n * 4);
    BW_DEV(diff, b, (size_t)n * 4);
    BW_DEV(diff, out, (size_t)n * 4);
    return BW.base->diff(a, b, out, n, stream, err);
}
static mr_status bw_accumulate(mr_loop_metrics *m, const mr_lossctl *loss, const mr_optctl *opt, int ngroups,
                               void *stream, mr_error *err) {
    BW_TRY(accumulate, 0);
    BW_DEV(accumulate, m, sizeof *m);
    BW_DEV(accumulate, loss, sizeof *loss);
    BW_DEV(accumulate, opt, sizeof *opt);
    return BW.base->accumulate(m, loss, opt, ngroups, stream, err);
}
static mr_status bw_finish(mr_loop_metrics *m, const mr_popart_ctl *pa, const mr_optctl *opt, void *stream,
                           mr_error *err) {
    BW_TRY(finish, 0);
    BW_DEV(finish, m, sizeof *m);
    BW_DEV(finish, pa, sizeof *pa);
    BW_DEV(finish, opt, sizeof *opt);
    return BW.base->finish(m, pa, opt, stream, err);
}

/* ---------------------------------------------------------------- set-up */

/* Resets the state and builds the table over base (the graph entries stay the base's). */
static inline const mr_backend *bw_init(const mr_backend *base, const char *name) {
    memset(&BW, 0, sizeof BW);
    BW.base = base;
    BW.failed_op = -1;
    BW.fail_status = MR_ERR_BACKEND;
    snprintf(BW.name, sizeof BW.name, "%s", name);
    mr_backend *w = &BW.table;
    *w = *base;
    w->name = BW.name;
    w->policy_plan = bw_policy_plan;
    w->enter = bw_enter;
    w->describe = bw_describe;
    w->device_memory = bw_device_memory;
    w->staging_memory = bw_staging_memory;
    w->copy = bw_copy;
    w->memset = bw_memset;
    w->stream_create = bw_stream_create;
    w->stream_destroy = bw_stream_destroy;
    w->stream_sync = bw_stream_sync;
    w->event_create = bw_event_create;
    w->event_destroy = bw_event_destroy;
    w->event_record = bw_event_record;
    w->event_sync = bw_event_sync;
    w->event_elapsed = bw_event_elapsed;
    w->env_reset_all = bw_env_reset_all;
    w->env_step_all = bw_env_step_all;
    w->env_clear_logs = bw_env_clear_logs;
    w->env_log_reduce = bw_env_log_reduce;
    w->policy_create = bw_policy_create;
    w->policy_destroy = bw_policy_destroy;
    w->policy_zero_grad = bw_policy_zero_grad;
    w->policy_act = bw_policy_act;
    w->policy_forward = bw_policy_forward;
    w->policy_backward = bw_policy_backward;
    /* optional: wrapped where the base offers them */
    w->policy_act_keep = base->policy_act_keep ? bw_policy_act_keep : NULL;
    w->policy_forward_kept = base->policy_forward_kept ? bw_policy_forward_kept : NULL;
    w->gae = bw_gae;
    w->sample = bw_sample;
    w->opt_begin = bw_opt_begin;
    w->opt_step = bw_opt_step;
    w->mean_std = bw_mean_std;
    w->normalize = bw_normalize;
    w->ppo_loss = bw_ppo_loss;
    w->popart_update = bw_popart_update;
    w->step_in = bw_step_in;
    w->step_out = bw_step_out;
    w->keep_final = bw_keep_final;
    w->add_final = bw_add_final;
    w->gather = bw_gather;
    w->diff = bw_diff;
    w->accumulate = bw_accumulate;
    w->finish = bw_finish;
    return w;
}

/* Fails call number `after` counted from now (1 = the next call). */
static inline void bw_arm(long after, mr_status status) {
    BW.fail_at = BW.calls + after;
    BW.fail_status = status;
    BW.failed_op = -1;
}
static inline void bw_disarm(void) { BW.fail_at = 0; }

/* The loop tests' small run: a tiny network, 16 environments on a 16 x 16
 * grid whose episodes end within a rollout (truncation at 12 steps, deaths
 * by poison), 16 steps, 2 epochs of 2 minibatches. One thread: results do
 * not depend on the count (test_trainer_loop_state checks 1 against 2), and
 * OpenMP's spinning barriers are slow on a busy 2-core machine. */
static inline void bw_config(mr_config *c) {
    mr_config_default(c);
    c->env.num_envs = 16;
    c->env.grid_size = 16;
    c->env.density_min = 20;
    c->env.density_max = 60;
    c->env.max_episode_steps = 12;
    c->policy.num_conv = 2;
    c->policy.conv_channels[0] = 4;
    c->policy.conv_channels[1] = 8;
    c->policy.hidden = 32;
    c->policy.critic_hidden = 32;
    c->ppo.rollout_steps = 16;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 2;
    c->threads = 1;
    c->device = MR_DEVICE_CPU;
    c->seed = 7;
    c->total_steps = 16 * 16 * 8;
}

/* 1 when nothing the wrapper saw created is alive. */
static inline int bw_nothing_live(void) {
    return BW.streams == 0 && BW.events == 0 && BW.policies == 0 && BW.dev.live == 0 && BW.stage.live == 0;
}

#endif /* BACKEND_WRAP_H */

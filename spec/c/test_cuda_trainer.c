/*
 * test_cuda_trainer.c - the CUDA trainer (src/engine/trainer_cuda.c) run on
 * the CPU: its table of GPU operations (mr_tc_ops) filled with emulations of
 * the very functions the kernels run, so the whole order of operations of an
 * update - buffers, offsets, keys, control blocks, checkpoints - runs and is
 * compared with the CPU trainer (trainer.c) without a GPU.
 *
 * The emulation (the table `emu_table` below), each entry mirroring one
 * launch in kernels/env.cu, policy.cu, ppo.cu, ppo_loss.cu or rollout.cu:
 *   memory   host memory behind mr_devmem_backend ("device", a small "card"
 *            for the out-of-memory test, and "pinned"); fresh segments are
 *            filled with 0xff bytes (NaN floats), as cudaMalloc gives no
 *            zeroed memory; copies are memmove, with the copy's kind checked
 *            against where the pointers live; streams and events are host
 *            timestamps.
 *   env      loops over foraging.h's MR_HD functions as env.cu launches them;
 *            the log reduction in env.cu's thread/tree order.
 *   policy   kernels/policy_math.h's schedule over pc_emu.h (cblas_sgemm
 *            given cuBLAS's arguments; mr_pc_elem for the jobs), planned and
 *            carved from the trainer's memory manager as policy.cu does.
 *   PPO      ppo_math.h / ppo_loss_math.h: GAE columns, sampling rows, the
 *            begin / grad-norm (mr_opt_sumsq_emulate) / prepare / Adam /
 *            scaler sequence of mr_cuda_opt_step, mean/std, normalisation,
 *            loss and PopArt in the kernels' reduction orders.
 *   glue     rollout_cuda.h's MR_HD functions as rollout.cu launches them.
 *   graphs   stream capture and replay (graph.cu), emulated for the one
 *            property that makes graphs dangerous: a replay repeats the
 *            recorded launches with the arguments they had at capture.
 *            While a stream captures, every queued operation appends a
 *            record holding its arguments as the real launch sees them -
 *            what the kernel takes by value (a __grid_constant__ mr_forage,
 *            the gather arguments, the parameter groups, what policy.cu
 *            reads from mr_policy_cuda on the host, scalars such as B,
 *            gamma, the seed) copied, device pointers as pointers - and
 *            returns without running; graph_launch runs the records in
 *            order through the same emulated functions. So memory (device,
 *            pinned) is read at replay, values are the capture's. What a
 *            real capture refuses fails here and invalidates the capture
 *            (graph_end then fails): stream and event synchronisation,
 *            device or pinned allocation and freeing, copies to or from
 *            pageable host memory, the first use of the policy's cuBLAS
 *            handle on a stream (its lazy set-up; the trainer's eager
 *            warm-up update keeps it out of captures). An
 *            event recorded on a capturing stream becomes no node of the
 *            graph (cudaEventRecord without cudaEventRecordExternal): it is
 *            "captured", and waiting on it or timing with it fails until it
 *            is recorded again outside a capture.
 * Every pointer a kernel would dereference is checked to lie in device
 * memory (a kernel given host memory would fault on a GPU), and every
 * operation that can fail is counted - at capture and again at replay - so
 * operation number K can be made to fail. Operations that run (not those
 * only recorded) are counted by kind, to compare a replayed update with an
 * eager one.
 *
 * Tests:
 *   1. against the CPU trainer (ground truth and proxy modes, PopArt on and
 *      off, other batch shapes, hot parameters changed between updates):
 *      after each of 3 updates the rollout (obs, act, done, rew, extra bit
 *      for bit; logp, val, adv, ret, last_value to 1e-5) and the metrics to
 *      1e-4; parameters, Adam moments and step, PopArt after updates 1 and 3
 *      to 1e-4 (normwise);
 *   2. checkpoints across backends both ways (into trainers created with
 *      another seed), a reload continuing bit for bit, evaluation and
 *      inference on the host copy, snapshot / restore;
 *   3. no device, pinned or host allocation after the first update; the plan
 *      accounts for every device byte; timings and profiling;
 *   4. a small emulated card: MR_ERR_NOMEM naming the request and the
 *      largest num_envs that fits, checked by creating it and the next
 *      larger size the config accepts;
 *   5. loss scaling: fp32 with a power-of-two scale is bit-identical to no
 *      scale; fp16 with a huge one skips every step (weights, moments and
 *      step untouched, the scale backs off, no error); a NaN weight in fp32
 *      is MR_ERR_NUMERIC as on the CPU; bf16 / fp16 against fp32;
 *   6. every operation of creation and of an (eager) update made to fail
 *      in turn: creation leaves nothing behind; the update returns the
 *      error, the trainer refuses further updates and saves, and loading a
 *      checkpoint recovers it bit for bit;
 *   7. with a GPU (a CUDA build and mr_cuda_device_count() > 0): test 1 with
 *      the real table mr_tc_cuda_ops(); else "skipped: no GPU".
 *   8. CUDA graphs (cuda.graphs is on by default, so tests 1 - 5 replay
 *      graphs from their second update too): the emulation's capture,
 *      replay and refusals themselves; 6 updates with graphs against 6
 *      without, fp32 and fp16, hot parameters and schedules changing every
 *      update, the loss scale set between updates: metrics, rollouts,
 *      state, the device's control blocks bit for bit, the same operations
 *      run, graphs used from update 2, timings present; a checkpoint of
 *      another seed loaded into a trainer holding graphs, and snapshot /
 *      restore, continuing bit for bit as eager; every operation of the
 *      recording made to fail (the update goes on eagerly, graphs stay off,
 *      the description says why) and every operation of a replayed update
 *      (the update fails, the trainer stops, a load recovers it);
 *      profiling updates run without graphs;
 * Options: --verbose prints every compared error.
 */
#include "check.h"
#include "moonrl.h"
#include "trainer.h"
#include "trainer_cuda.h"
#include "devmem.h"
#include "foraging.h"
#include "pc_emu.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int verbose;

/* ================================================================ the emulated GPU */

#define MAX_SEGS 256

/* One raw memory backend: host memory, counted against a made-up total. */
typedef struct emu_mem {
    const char *name;
    size_t total, used;
    int nseg;
    unsigned char *seg[MAX_SEGS];
    size_t segsz[MAX_SEGS];
    long raw_allocs, raw_frees, bad_frees;
} emu_mem;

/* The queued operations, as recorded into a graph and counted when they run. */
enum {
    R_COPY, R_MEMSET, R_ENV_RESET, R_ENV_STEP, R_ENV_CLEAR, R_ENV_REDUCE, R_ZERO_GRAD, R_FORWARD, R_BACKWARD,
    R_GAE, R_SAMPLE, R_OPT_BEGIN, R_OPT_STEP, R_MEAN_STD, R_NORMALIZE, R_PPO_LOSS, R_POPART, R_STEP_IN, R_STEP_OUT,
    R_GATHER, R_DIFF, R_ACCUMULATE, R_FINISH, R_COUNT
};

/* A recorded launch's arguments as the launch itself sees them: the values
 * it copies into kernel parameters (or reads on the host while queueing)
 * by value, device pointers as pointers. */
typedef struct rec_copy { void *dst; const void *src; size_t bytes; int kind; } rec_copy;
typedef struct rec_memset { void *dst; int value; size_t bytes; } rec_memset;
typedef struct rec_env { mr_forage s; const uint8_t *actions; mr_forage_log *out; } rec_env;
typedef struct rec_policy {
    mr_policy_cuda pc;   /* plan, workspace, params, grads, fwd_proxy: read on the host by policy.cu */
    const uint8_t *codes;
    const float *extra, *dlogits, *dvalue;
    int B, proxy;
    float *logits, *value;
} rec_policy;
typedef struct rec_gae {
    int T, N;
    const float *reward, *value, *last_value;
    const uint8_t *done;
    float gamma, lambda;
    float *adv, *ret;
} rec_gae;
typedef struct rec_sample { int N; const float *logits, *u; uint8_t *action; float *logp; } rec_sample;
typedef struct rec_opt {
    float *param, *m, *v;
    const float *grad;
    mr_opt_groups G;     /* mr_cuda_opt_step reads it on the host: __grid_constant__ and launch sizes */
    double *partials;
    mr_optctl *ctl;
} rec_opt;
/* cx: mean_std's input, x: normalize's */
typedef struct rec_stats { const float *cx; float *x; int64_t n; double *partials, *out2; } rec_stats;
typedef struct rec_loss {
    int B;
    const float *logits, *value, *old_logp, *adv, *old_value, *target;
    const uint8_t *action;
    mr_lossctl *ctl;
    mr_optctl *opt;
    double *partials;
    float *dlogits, *dvalue;
} rec_loss;
typedef struct rec_popart {
    mr_popart_ctl *pa;
    const float *returns;
    int64_t n;
    double *partials;
    float *w, *b, *mw, *vw, *mb, *vb;
    int k;
} rec_popart;
typedef struct rec_step {
    mr_forage s;
    uint64_t seed;
    const mr_popart_ctl *pa;
    const float *value;
    float *extra, *u, *val, *rew;
    uint8_t *done;
} rec_step;
typedef struct rec_gather { mr_tc_gather_args a; const mr_popart_ctl *pa; } rec_gather;
typedef struct rec_diff { const float *a, *b; float *out; int64_t n; } rec_diff;
typedef struct rec_metrics {
    mr_tc_metrics *m;
    const mr_lossctl *loss;
    const mr_optctl *opt;
    const mr_popart_ctl *pa;
    int ngroups;
} rec_metrics;

typedef struct emu_rec {
    int kind;
    union {
        rec_copy copy;
        rec_memset memset;
        rec_env env;
        rec_policy pol;
        rec_gae gae;
        rec_sample sample;
        rec_opt opt;
        rec_stats stats;
        rec_loss loss;
        rec_popart popart;
        rec_step step;
        rec_gather gather;
        rec_diff diff;
        rec_metrics met;
    } a;
} emu_rec;

typedef struct emu_stream {
    int capturing;
    int invalid;               /* something the capture refuses happened: graph_end fails */
    char why[200];
    emu_rec *rec;              /* the capture so far */
    int n, cap;
} emu_stream;

typedef struct emu_graph { emu_rec *rec; int n; } emu_graph;

typedef struct emu_event {
    double ms;                 /* host time of the last record */
    int recorded;
    int captured;              /* last recorded on a capturing stream: no node, nothing to wait on or time */
} emu_event;

typedef struct tc_emu {
    emu_mem dev, small, pin;   /* the card, a small card (out-of-memory test), pinned host memory */
    long ops;                  /* operations that can fail, so far */
    long fail_at;              /* the one that fails (-1: none) */
    const char *failed_op;     /* the name of the one that failed */
    long violations;           /* kernel arguments outside device memory, copies of the wrong kind */
    char first_violation[256];
    int streams, events;       /* live */
    emu pe;                    /* the policy's GEMMs and jobs (pc_emu.h) */
    mr_pc_ops po;
    /* graphs */
    emu_stream *capture;       /* the capture open on this thread (thread-local mode), NULL: none */
    int graphs;                /* live */
    long refused;              /* operations a capture refused */
    long executed[R_COUNT];    /* queued operations that ran, by kind */
    long event_records;        /* events recorded outside a capture */
    long captures, replays;    /* graphs made, graph launches run */
    long cap_first, cap_last;  /* operation numbers of the first graph_begin, last graph_end since reset */
    const mr_optctl *seen_opt; /* the control blocks the last optimizer step and loss ran on */
    const mr_lossctl *seen_loss;
} tc_emu;

static tc_emu E;

/* Something a capture refuses, called while one is open on this thread: the
 * capture is invalidated (its graph_end fails), as CUDA does. */
static void invalidate(const char *what) {
    emu_stream *s = E.capture;
    E.refused++;
    if (s && !s->invalid) {
        s->invalid = 1;
        snprintf(s->why, sizeof s->why, "%s", what);
    }
}

static mr_status refuse(const char *what, mr_error *err) {
    invalidate(what);
    return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: %s while a stream is capturing (not allowed; the capture "
                   "is invalidated)", what);
}

static void *mem_alloc(void *ctx, size_t bytes, const char **reason) {
    emu_mem *m = ctx;
    if (E.capture) {   /* cudaMalloc / cudaMallocHost */
        invalidate("allocating memory");
        *reason = "emulated GPU: an allocation while a stream is capturing (not allowed; the capture is invalidated)";
        return NULL;
    }
    if (m->used + bytes > m->total || m->nseg == MAX_SEGS) {
        *reason = "emulated card: out of memory";
        return NULL;
    }
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
        *reason = "emulated card: the host is out of memory";
        return NULL;
    }
    memset(p, 0xff, bytes);   /* cudaMalloc's memory is not zeroed: all-ones bytes are NaN floats */
    m->seg[m->nseg] = p;
    m->segsz[m->nseg] = bytes;
    m->nseg++;
    m->used += bytes;
    m->raw_allocs++;
    return p;
}

static void mem_free(void *ctx, void *p) {
    emu_mem *m = ctx;
    if (E.capture) invalidate("freeing memory");   /* cudaFree / cudaFreeHost */
    for (int k = 0; k < m->nseg; k++)
        if (m->seg[k] == p) {
            m->used -= m->segsz[k];
            m->seg[k] = m->seg[m->nseg - 1];
            m->segsz[k] = m->segsz[m->nseg - 1];
            m->nseg--;
            m->raw_frees++;
            free(p);
            return;
        }
    m->bad_frees++;
}

static size_t mem_free_bytes(void *ctx) {
    const emu_mem *m = ctx;
    return m->total - m->used;
}

static int in_mem(const emu_mem *m, const void *p, size_t bytes) {
    const unsigned char *q = p;
    for (int k = 0; k < m->nseg; k++)
        if (q >= m->seg[k] && bytes <= m->segsz[k] && (size_t)(q - m->seg[k]) <= m->segsz[k] - bytes) return 1;
    return 0;
}
static int is_dev(const void *p, size_t bytes) { return in_mem(&E.dev, p, bytes) || in_mem(&E.small, p, bytes); }

static mr_status violation(mr_error *err, const char *fmt, const char *op, const char *arg, size_t bytes) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, op, arg, bytes);
    if (E.violations++ == 0) snprintf(E.first_violation, sizeof E.first_violation, "%s", msg);
    return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: %s", msg);
}

/* A kernel's argument: [p, p + bytes) must be device memory. */
#define DEV(op, p, bytes)                                                                                       \
    do {                                                                                                        \
        if ((bytes) > 0 && !is_dev((p), (bytes)))                                                               \
            return violation(err, "%s: %s (%zu bytes) is not device memory (a kernel would fault)", op, #p,     \
                             (size_t)(bytes));                                                                  \
    } while (0)

/* Every operation that can fail counts; number fail_at fails. */
static mr_status op_begin(const char *name, mr_error *err) {
    const long k = E.ops++;
    if (k == E.fail_at) {
        E.failed_op = name;
        return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: operation %ld (%s) failed (an injected fault)", k, name);
    }
    return MR_OK;
}
#define OP(name)                                      \
    do {                                              \
        mr_status s_ = op_begin((name), err);         \
        if (s_ != MR_OK) return s_;                   \
    } while (0)

static int capturing(const void *stream) { return stream && ((const emu_stream *)stream)->capturing; }

static emu_rec *rec_add(void *stream, int kind) {
    emu_stream *s = stream;
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 64;
        emu_rec *r = realloc(s->rec, sizeof *r * (size_t)cap);
        if (!r) return NULL;
        s->rec = r;
        s->cap = cap;
    }
    emu_rec *r = &s->rec[s->n++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    return r;
}

/* A queued operation: on a capturing stream, its arguments are recorded
 * (member: the rec_* of this kind, then its fields) and nothing runs;
 * otherwise it runs now and is counted. */
#define QUEUE(kind_, member, ...)                                                                                     \
    do {                                                                                                              \
        if (capturing(stream)) {                                                                                      \
            emu_rec *r_ = rec_add(stream, (kind_));                                                                   \
            if (!r_) return mr_fail(err, MR_ERR_NOMEM, "emulated capture: out of host memory");                       \
            r_->a.member = (__typeof__(r_->a.member)){__VA_ARGS__};                                                   \
            return MR_OK;                                                                                             \
        }                                                                                                             \
        E.executed[(kind_)]++;                                                                                        \
    } while (0)

static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- runtime */

static mr_status e_set_device(int device, mr_error *err) {
    OP("set_device");
    if (device != 0) return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: no device %d (there is one, 0)", device);
    return MR_OK;
}

static mr_status e_device_name(int device, char *buf, size_t len, mr_error *err) {
    (void)device;
    snprintf(buf, len, "emulated GPU");
    (void)err;
    return MR_OK;
}

static mr_devmem_backend backend_of(emu_mem *m) {
    mr_devmem_backend b = {m, mem_alloc, mem_free, mem_free_bytes, m->total, m->name};
    return b;
}

static mr_status e_device_backend(int device, mr_devmem_backend *out, mr_error *err) {
    OP("device_backend");
    if (device != 0) return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: no device %d", device);
    *out = backend_of(&E.dev);
    return MR_OK;
}

static mr_status e_small_backend(int device, mr_devmem_backend *out, mr_error *err) {
    OP("device_backend (small card)");
    (void)device;
    *out = backend_of(&E.small);
    return MR_OK;
}

static mr_status e_pinned_backend(mr_devmem_backend *out, mr_error *err) {
    OP("pinned_backend");
    *out = backend_of(&E.pin);
    return MR_OK;
}

static mr_status e_copy(void *dst, const void *src, size_t bytes, int kind, void *stream, mr_error *err) {
    OP("copy");
    if (kind < MR_COPY_H2D || kind > MR_COPY_D2D) return mr_fail(err, MR_ERR_ARG, "emulated copy: kind %d", kind);
    const int sd = is_dev(src, bytes), dd = is_dev(dst, bytes);
    const int want_s = kind != MR_COPY_H2D, want_d = kind != MR_COPY_D2H;
    if (bytes > 0 && (sd != want_s || dd != want_d))
        return violation(err, "%s: a copy %s of %zu bytes between the wrong kinds of memory", "copy",
                         kind == MR_COPY_H2D ? "H2D" : kind == MR_COPY_D2H ? "D2H" : "D2D", bytes);
    /* pageable host memory: cudaMemcpyAsync stages it synchronously, which a capture refuses; a copy node
     * reads (or writes) pinned host memory when the graph runs */
    if (capturing(stream) && bytes > 0 &&
        ((kind == MR_COPY_H2D && !in_mem(&E.pin, src, bytes)) || (kind == MR_COPY_D2H && !in_mem(&E.pin, dst, bytes))))
        return refuse("a copy from or to pageable host memory", err);
    QUEUE(R_COPY, copy, .dst = dst, .src = src, .bytes = bytes, .kind = kind);
    memmove(dst, src, bytes);
    return MR_OK;
}

static mr_status e_memset(void *dst, int value, size_t bytes, void *stream, mr_error *err) {
    OP("memset");
    QUEUE(R_MEMSET, memset, .dst = dst, .value = value, .bytes = bytes);
    DEV("memset", dst, bytes);
    memset(dst, value, bytes);
    return MR_OK;
}

static mr_status e_stream_create(void **stream, mr_error *err) {
    OP("stream_create");
    *stream = calloc(1, sizeof(emu_stream));
    E.streams++;
    return MR_OK;
}
static void e_stream_destroy(void *stream) {
    emu_stream *s = stream;
    if (!s) return;
    E.streams--;
    if (E.capture == s) E.capture = NULL;
    free(s->rec);
    free(s);
}
static mr_status e_stream_sync(void *stream, mr_error *err) {
    (void)stream;
    OP("stream_sync");
    if (E.capture) return refuse("synchronising a stream", err);
    return MR_OK;
}
static mr_status e_event_create(void **ev, mr_error *err) {
    OP("event_create");
    *ev = calloc(1, sizeof(emu_event));
    E.events++;
    return MR_OK;
}
static void e_event_destroy(void *ev) {
    if (ev) E.events--;
    free(ev);
}
/* cudaEventRecord: on a capturing stream no node of the graph (that takes
 * cudaEventRecordExternal), only a marker inside the capture; a replay does
 * not record it. */
static mr_status e_event_record(void *ev, void *stream, mr_error *err) {
    OP("event_record");
    emu_event *v = ev;
    if (capturing(stream)) {
        v->captured = 1;
        return MR_OK;
    }
    v->ms = host_ms();
    v->recorded = 1;
    v->captured = 0;
    E.event_records++;
    return MR_OK;
}
static mr_status e_event_sync(void *ev, mr_error *err) {
    OP("event_sync");
    if (E.capture) return refuse("waiting for an event", err);
    if (((emu_event *)ev)->captured)
        return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: waiting for an event last recorded inside a capture (it "
                       "stands for no work a replay does)");
    return MR_OK;
}
/* Not counted: the trainer reads timings without checking (0 on failure). */
static mr_status e_event_elapsed(void *a, void *b, float *ms, mr_error *err) {
    const emu_event *x = a, *y = b;
    *ms = 0.0f;
    if (!x->recorded || !y->recorded || x->captured || y->captured)
        return mr_fail(err, MR_ERR_BACKEND, "emulated GPU: an elapsed time between events not both recorded "
                       "outside a capture");
    *ms = (float)(y->ms - x->ms);
    return MR_OK;
}

/* ---------------------------------------------------------------- environment (env.cu) */

static mr_status env_args(const char *op, const mr_forage *s, mr_error *err) {
    const size_t n = (size_t)s->n;
    DEV(op, s->grid, n * (size_t)s->H * (size_t)s->W);
    DEV(op, s->obs, n * (size_t)s->V * (size_t)s->V);
    DEV(op, s->tick, n * sizeof(uint32_t));
    DEV(op, s->reward, n * sizeof(float));
    DEV(op, s->log, n * sizeof(mr_forage_log));
    DEV(op, s->energy_centi, n * sizeof(int32_t));
    return MR_OK;
}

static mr_status e_env_reset_all(const mr_forage *s, void *stream, mr_error *err) {
    OP("env_reset_all");
    QUEUE(R_ENV_RESET, env, .s = *s);
    MR_PC_TRY(env_args("env_reset_all", s, err));
    for (int i = 0; i < s->n; i++) mr_forage_reset_full(s, i);
    return MR_OK;
}

static mr_status e_env_step_all(const mr_forage *s, const uint8_t *d_actions, void *stream, mr_error *err) {
    OP("env_step_all");
    QUEUE(R_ENV_STEP, env, .s = *s, .actions = d_actions);
    MR_PC_TRY(env_args("env_step_all", s, err));
    DEV("env_step_all", d_actions, (size_t)s->n);
    for (int i = 0; i < s->n; i++) mr_forage_step(s, i, d_actions[i]);
    return MR_OK;
}

static mr_status e_env_clear_logs(const mr_forage *s, void *stream, mr_error *err) {
    OP("env_clear_logs");
    QUEUE(R_ENV_CLEAR, env, .s = *s);
    MR_PC_TRY(env_args("env_clear_logs", s, err));
    for (int i = 0; i < s->n; i++) mr_forage_log_clear(&s->log[i]);
    return MR_OK;
}

/* env.cu's forage_log_reduce_kernel: 256 threads fold instances t, t + 256,
 * ..., then a fixed halving tree. */
static mr_status e_env_log_reduce(const mr_forage *s, mr_forage_log *d_out, void *stream, mr_error *err) {
    enum { LT = 256, NI = 8 };
    OP("env_log_reduce");
    QUEUE(R_ENV_REDUCE, env, .s = *s, .out = d_out);
    MR_PC_TRY(env_args("env_log_reduce", s, err));
    DEV("env_log_reduce", d_out, sizeof *d_out);
    static int32_t si[NI][LT];
    static double ssum[LT];
    static float smin[LT], smax[LT];
    for (int t = 0; t < LT; t++) {
        int32_t acc[NI] = {0};
        double sum = 0.0;
        float mn = mr_forage_inf(), mx = -mr_forage_inf();
        for (int i = t; i < s->n; i += LT) {
            const mr_forage_log l = s->log[i];
            acc[0] += l.episodes; acc[1] += l.deaths; acc[2] += l.length_sum; acc[3] += l.food;
            acc[4] += l.poison; acc[5] += l.food_total; acc[6] += l.poison_total; acc[7] += l.steps_total;
            sum += (double)l.return_sum;
            mn = l.return_min < mn ? l.return_min : mn;
            mx = l.return_max > mx ? l.return_max : mx;
        }
        for (int k = 0; k < NI; k++) si[k][t] = acc[k];
        ssum[t] = sum;
        smin[t] = mn;
        smax[t] = mx;
    }
    for (int h = LT / 2; h > 0; h >>= 1)
        for (int t = 0; t < h; t++) {
            for (int k = 0; k < NI; k++) si[k][t] += si[k][t + h];
            ssum[t] += ssum[t + h];
            smin[t] = smin[t + h] < smin[t] ? smin[t + h] : smin[t];
            smax[t] = smax[t + h] > smax[t] ? smax[t + h] : smax[t];
        }
    mr_forage_log r;
    r.episodes = si[0][0]; r.deaths = si[1][0]; r.length_sum = si[2][0]; r.food = si[3][0];
    r.poison = si[4][0]; r.food_total = si[5][0]; r.poison_total = si[6][0]; r.steps_total = si[7][0];
    r.return_sum = (float)ssum[0];
    r.return_min = smin[0];
    r.return_max = smax[0];
    *d_out = r;
    return MR_OK;
}

/* ---------------------------------------------------------------- policy (policy.cu) */

static void e_policy_destroy(mr_policy_cuda *pc) {
    if (!pc) return;
    if (pc->dev) {
        mr_devmem_free(pc->dev, pc->params, NULL);
        mr_devmem_free(pc->dev, pc->grads, NULL);
        mr_devmem_free(pc->dev, pc->ws, NULL);
    }
    memset(pc, 0, sizeof *pc);
    pc->fwd_B = -1;
}

static mr_status e_policy_create(mr_policy_cuda *pc, const mr_policy_config *cfg, int view, int max_batch, int chunk,
                                 int precision, mr_devmem *dev, mr_error *err) {
    if (!pc) return mr_fail(err, MR_ERR_ARG, "emulated policy create: the policy struct is missing");
    memset(pc, 0, sizeof *pc);
    pc->fwd_B = -1;
    pc->blas_stream = (void *)~(uintptr_t)0;   /* as policy.cu: cuBLAS is bound to a stream at the first call */
    mr_status st = op_begin("policy_create", err);
    if (st == MR_OK) st = mr_pc_plan_make(&pc->plan, cfg, view, max_batch, chunk, precision, err);
    if (st == MR_OK && !dev) st = mr_fail(err, MR_ERR_ARG, "emulated policy create: no memory manager");
    if (st == MR_OK) {
        pc->dev = dev;
        pc->blas = &E;   /* stands for the cuBLAS handle */
        st = mr_devmem_alloc(dev, pc->plan.param_bytes, "the policy parameters", (void **)&pc->params, err);
    }
    if (st == MR_OK) st = mr_devmem_alloc(dev, pc->plan.param_bytes, "the policy gradients", (void **)&pc->grads, err);
    if (st == MR_OK)
        st = mr_devmem_alloc(dev, pc->plan.ws_bytes, "the policy activations and workspace", (void **)&pc->ws, err);
    if (st != MR_OK) {
        e_policy_destroy(pc);
        return st;
    }
    mr_pc_carve(&pc->plan, pc->ws, &pc->buf);
    return MR_OK;
}

/* cuBLAS's lazy set-up at a handle's first GEMMs may allocate, which a
 * capture refuses; policy.cu binds the handle to the stream (and its
 * workspace) at the first call on it. Conservatively, that first call is
 * refused while capturing: the trainer's eager warm-up update is what keeps
 * it out of the recording. */
static mr_status blas_bind(mr_policy_cuda *pc, void *stream, mr_error *err) {
    if (pc->blas_stream == stream) return MR_OK;
    if (capturing(stream)) return refuse("the policy's first cuBLAS call on a stream (its set-up)", err);
    pc->blas_stream = stream;
    return MR_OK;
}

static mr_status e_policy_zero_grad(mr_policy_cuda *pc, void *stream, mr_error *err) {
    OP("policy_zero_grad");
    QUEUE(R_ZERO_GRAD, pol, .pc = *pc);
    DEV("policy_zero_grad", pc->grads, pc->plan.param_bytes);
    memset(pc->grads, 0, pc->plan.param_bytes);
    return MR_OK;
}

static mr_status e_policy_forward(mr_policy_cuda *pc, const uint8_t *codes, const float *extra, int B, int proxy,
                                  float *logits, float *value, void *stream, mr_error *err) {
    OP("policy_forward");
    if (B < 0 || B > pc->plan.max_batch)
        return mr_fail(err, MR_ERR_ARG, "emulated policy forward: B = %d: accepted 0 .. %d", B, pc->plan.max_batch);
    MR_PC_TRY(blas_bind(pc, stream, err));
    if (capturing(stream)) {   /* the host's bookkeeping, done when the forward is queued */
        pc->fwd_B = B;
        pc->fwd_proxy = proxy;
    }
    QUEUE(R_FORWARD, pol, .pc = *pc, .codes = codes, .extra = extra, .B = B, .proxy = proxy, .logits = logits,
          .value = value);
    const size_t b = (size_t)B;
    DEV("policy_forward", codes, b * (size_t)pc->plan.net.VV);
    if (extra) DEV("policy_forward", extra, b * 2 * sizeof(float));
    DEV("policy_forward", logits, b * MR_NUM_ACTIONS * sizeof(float));
    DEV("policy_forward", value, b * sizeof(float));
    pc->fwd_B = -1;
    MR_PC_TRY(mr_pc_forward(&E.po, &pc->plan, &pc->buf, pc->params, codes, extra, B, proxy, logits, value, err));
    pc->fwd_B = B;
    pc->fwd_proxy = proxy;
    return MR_OK;
}

static mr_status e_policy_backward(mr_policy_cuda *pc, const float *dlogits, const float *dvalue, int B, void *stream,
                                   mr_error *err) {
    OP("policy_backward");
    if (pc->fwd_B < 0 || B != pc->fwd_B)
        return mr_fail(err, MR_ERR_ARG, "emulated policy backward: B = %d does not match the last forward (%d)", B,
                       pc->fwd_B);
    MR_PC_TRY(blas_bind(pc, stream, err));
    QUEUE(R_BACKWARD, pol, .pc = *pc, .dlogits = dlogits, .dvalue = dvalue, .B = B);
    DEV("policy_backward", dlogits, (size_t)B * MR_NUM_ACTIONS * sizeof(float));
    DEV("policy_backward", dvalue, (size_t)B * sizeof(float));
    return mr_pc_backward(&E.po, &pc->plan, &pc->buf, pc->params, dlogits, dvalue, B, pc->fwd_proxy, pc->grads, err);
}

/* ---------------------------------------------------------------- PPO (ppo.cu, ppo_loss.cu) */

static mr_status e_gae(int T, int N, const float *reward, const float *value, const float *last_value,
                       const uint8_t *done, float gamma, float lambda, float *adv, float *ret, void *stream,
                       mr_error *err) {
    OP("gae");
    QUEUE(R_GAE, gae, .T = T, .N = N, .reward = reward, .value = value, .last_value = last_value, .done = done,
          .gamma = gamma, .lambda = lambda, .adv = adv, .ret = ret);
    if (T <= 0 || N <= 0) return MR_OK;
    const size_t B = (size_t)T * (size_t)N;
    DEV("gae", reward, B * 4); DEV("gae", value, B * 4); DEV("gae", last_value, (size_t)N * 4);
    DEV("gae", done, B); DEV("gae", adv, B * 4); DEV("gae", ret, B * 4);
    const double g = gamma, gl = (double)gamma * (double)lambda;
    for (int n = 0; n < N; n++) mr_gae_env(T, N, n, reward, value, last_value, done, g, gl, adv, ret);
    return MR_OK;
}

static mr_status e_sample(int N, const float *logits, const float *u, uint8_t *action, float *logp, void *stream,
                          mr_error *err) {
    OP("sample");
    QUEUE(R_SAMPLE, sample, .N = N, .logits = logits, .u = u, .action = action, .logp = logp);
    if (N <= 0) return MR_OK;
    DEV("sample", logits, (size_t)N * MR_NUM_ACTIONS * 4); DEV("sample", u, (size_t)N * 4);
    DEV("sample", action, (size_t)N); DEV("sample", logp, (size_t)N * 4);
    for (int i = 0; i < N; i++) mr_sample_row(logits + (size_t)i * MR_NUM_ACTIONS, u[i], &action[i], &logp[i]);
    return MR_OK;
}

static mr_status e_opt_begin(mr_optctl *d_ctl, void *stream, mr_error *err) {
    OP("opt_begin");
    QUEUE(R_OPT_BEGIN, opt, .ctl = d_ctl);
    DEV("opt_begin", d_ctl, sizeof *d_ctl);
    mr_opt_begin(d_ctl);
    return MR_OK;
}

/* mr_cuda_opt_step: grad_sumsq (two stages), prepare, Adam, scaler update. */
static mr_status e_opt_step(float *param, const float *grad, float *m, float *v, const mr_opt_groups *G,
                            double *partials, mr_optctl *d_ctl, void *stream, mr_error *err) {
    OP("opt_step");
    if (!G || G->n < 1 || G->n > MR_OPT_MAX_GROUPS || G->off[0] != 0 || G->block_off[G->n] < 1)
        return mr_fail(err, MR_ERR_ARG, "emulated opt_step: the parameter groups are not planned");
    QUEUE(R_OPT_STEP, opt, .param = param, .m = m, .v = v, .grad = grad, .G = *G, .partials = partials, .ctl = d_ctl);
    E.seen_opt = d_ctl;
    const size_t P = (size_t)G->off[G->n];
    DEV("opt_step", param, P * 4); DEV("opt_step", grad, P * 4); DEV("opt_step", m, P * 4); DEV("opt_step", v, P * 4);
    DEV("opt_step", partials, (size_t)G->block_off[G->n] * sizeof(double));
    DEV("opt_step", d_ctl, sizeof *d_ctl);
    for (int g = 0; g < G->n; g++)
        d_ctl->s.sumsq[g] = mr_opt_sumsq_emulate(grad, G->off[g], G->off[g + 1], partials + G->block_off[g]);
    mr_opt_prepare(d_ctl, G->n);
    if (!d_ctl->s.found_inf) {
        const mr_optctl *c = d_ctl;
        const mr_adam_coefs k = mr_adam_coefs_of(c);
        for (size_t i = 0; i < P; i++)
            mr_adam_elem(&param[i], &m[i], &v[i], grad[i], c->s.mult[mr_opt_group_of(G, (int64_t)i)], &k);
    }
    mr_opt_scaler_update(d_ctl);
    return MR_OK;
}

static mr_status e_mean_std(const float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err) {
    OP("mean_std");
    QUEUE(R_MEAN_STD, stats, .cx = x, .n = n, .partials = partials, .out2 = out2);
    if (n < 0) return mr_fail(err, MR_ERR_ARG, "emulated mean_std: n = %lld", (long long)n);
    DEV("mean_std", out2, 2 * sizeof(double));
    if (n == 0) {
        out2[0] = out2[1] = 0.0;
        return MR_OK;
    }
    DEV("mean_std", x, (size_t)n * 4);
    DEV("mean_std", partials, mr_tc_stats_partials(n) * sizeof(double));
    mr_mean_std_emulate(x, n, partials, out2);
    return MR_OK;
}

static mr_status e_normalize(float *x, int64_t n, double *partials, double *out2, void *stream, mr_error *err) {
    OP("normalize");
    QUEUE(R_NORMALIZE, stats, .x = x, .n = n, .partials = partials, .out2 = out2);
    if (n < 0) return mr_fail(err, MR_ERR_ARG, "emulated normalize: n = %lld", (long long)n);
    if (n == 0) return MR_OK;
    DEV("normalize", x, (size_t)n * 4);
    DEV("normalize", partials, mr_tc_stats_partials(n) * sizeof(double));
    DEV("normalize", out2, 2 * sizeof(double));
    mr_normalize_emulate(x, n, partials, out2);
    return MR_OK;
}

static mr_status e_ppo_loss(int B, const float *logits, const float *value, const uint8_t *action,
                            const float *old_logp, const float *adv, const float *old_value, const float *target,
                            mr_lossctl *d_ctl, mr_optctl *d_opt, double *partials, float *dlogits, float *dvalue,
                            void *stream, mr_error *err) {
    OP("ppo_loss");
    QUEUE(R_PPO_LOSS, loss, .B = B, .logits = logits, .value = value, .old_logp = old_logp, .adv = adv,
          .old_value = old_value, .target = target, .action = action, .ctl = d_ctl, .opt = d_opt,
          .partials = partials, .dlogits = dlogits, .dvalue = dvalue);
    E.seen_loss = d_ctl;
    if (B < 0) return mr_fail(err, MR_ERR_ARG, "emulated ppo_loss: B = %d", B);
    DEV("ppo_loss", d_ctl, sizeof *d_ctl);
    if (d_opt) DEV("ppo_loss", d_opt, sizeof *d_opt);
    const size_t b = (size_t)B;
    if (B > 0) {
        DEV("ppo_loss", logits, b * MR_NUM_ACTIONS * 4); DEV("ppo_loss", value, b * 4); DEV("ppo_loss", action, b);
        DEV("ppo_loss", old_logp, b * 4); DEV("ppo_loss", adv, b * 4); DEV("ppo_loss", old_value, b * 4);
        DEV("ppo_loss", target, b * 4); DEV("ppo_loss", dlogits, b * MR_NUM_ACTIONS * 4);
        DEV("ppo_loss", dvalue, b * 4);
        DEV("ppo_loss", partials, mr_tc_loss_partials(B) * sizeof(double));
    }
    const double scale = d_opt ? (double)d_opt->s.loss_scale : 1.0;
    mr_loss_emulate(B, logits, value, action, old_logp, adv, old_value, target, d_ctl, scale, partials, dlogits,
                    dvalue);
    if (d_opt && !mr_finite_d(d_ctl->s.loss)) d_opt->s.found_inf = 1;
    return MR_OK;
}

static mr_status e_popart_update(mr_popart_ctl *d_pa, const float *returns, int64_t n, double *partials, float *w,
                                 float *b, int k, float *mw, float *vw, float *mb, float *vb, void *stream,
                                 mr_error *err) {
    OP("popart_update");
    QUEUE(R_POPART, popart, .pa = d_pa, .returns = returns, .n = n, .partials = partials, .w = w, .b = b, .mw = mw,
          .vw = vw, .mb = mb, .vb = vb, .k = k);
    if (n < 0 || k < 1) return mr_fail(err, MR_ERR_ARG, "emulated popart_update: n = %lld, k = %d", (long long)n, k);
    DEV("popart_update", d_pa, sizeof *d_pa);
    if (n == 0) return MR_OK;
    DEV("popart_update", returns, (size_t)n * 4);
    DEV("popart_update", partials, mr_tc_stats_partials(n) * sizeof(double));
    DEV("popart_update", w, (size_t)k * 4); DEV("popart_update", b, 4);
    if (mw) DEV("popart_update", mw, (size_t)k * 4);
    if (vw) DEV("popart_update", vw, (size_t)k * 4);
    if (mb) DEV("popart_update", mb, 4);
    if (vb) DEV("popart_update", vb, 4);
    mr_popart_emulate(d_pa, returns, n, partials, w, b, k, mw, vw, mb, vb);
    return MR_OK;
}

/* ---------------------------------------------------------------- glue (rollout.cu) */

static mr_status e_step_in(const mr_forage *s, uint64_t seed, float *extra, float *u, void *stream, mr_error *err) {
    OP("step_in");
    QUEUE(R_STEP_IN, step, .s = *s, .seed = seed, .extra = extra, .u = u);
    MR_PC_TRY(env_args("step_in", s, err));
    DEV("step_in", extra, (size_t)s->n * 2 * 4);
    if (u) DEV("step_in", u, (size_t)s->n * 4);
    for (int i = 0; i < s->n; i++) mr_tc_step_in(s, i, seed, extra, u);
    return MR_OK;
}

static mr_status e_step_out(const mr_forage *s, const mr_popart_ctl *d_pa, const float *value, float *val, float *rew,
                            uint8_t *done, void *stream, mr_error *err) {
    OP("step_out");
    QUEUE(R_STEP_OUT, step, .s = *s, .pa = d_pa, .value = value, .val = val, .rew = rew, .done = done);
    MR_PC_TRY(env_args("step_out", s, err));
    if (!rew != !done) return mr_fail(err, MR_ERR_ARG, "emulated step_out: rew and done go together");
    const size_t n = (size_t)s->n;
    DEV("step_out", d_pa, sizeof *d_pa); DEV("step_out", value, n * 4); DEV("step_out", val, n * 4);
    if (rew) { DEV("step_out", rew, n * 4); DEV("step_out", done, n); }
    for (int i = 0; i < s->n; i++) {
        float pm, ps, inv;
        mr_tc_popart_floats(d_pa, &pm, &ps, &inv);
        mr_tc_step_out(s, i, pm, ps, value, val, rew, done);
    }
    return MR_OK;
}

static mr_status e_gather(const mr_tc_gather_args *a, const mr_popart_ctl *d_pa, void *stream, mr_error *err) {
    OP("gather");
    QUEUE(R_GATHER, gather, .a = *a, .pa = d_pa);
    if (a->M < 0 || a->VV < 1) return mr_fail(err, MR_ERR_ARG, "emulated gather: M = %d, VV = %d", a->M, a->VV);
    if (a->M == 0) return MR_OK;
    const size_t M = (size_t)a->M, VV = (size_t)a->VV;
    DEV("gather", d_pa, sizeof *d_pa); DEV("gather", a->idx, M * 4);
    DEV("gather", a->mb_obs, M * VV); DEV("gather", a->mb_act, M); DEV("gather", a->mb_extra, M * 8);
    DEV("gather", a->mb_logp, M * 4); DEV("gather", a->mb_adv, M * 4); DEV("gather", a->mb_oldv, M * 4);
    DEV("gather", a->mb_target, M * 4);
    for (size_t k = 0; k < M; k++) {   /* the rows it reads */
        const size_t s = (size_t)a->idx[k];
        DEV("gather", a->obs + s * VV, VV); DEV("gather", a->act + s, 1); DEV("gather", a->extra + 2 * s, 8);
        DEV("gather", a->logp + s, 4); DEV("gather", a->val + s, 4); DEV("gather", a->adv + s, 4);
        DEV("gather", a->ret + s, 4);
    }
    float pm, ps, inv;
    mr_tc_popart_floats(d_pa, &pm, &ps, &inv);
    const int64_t n = (int64_t)a->M * a->VV;
    for (int64_t j = 0; j < n; j++) {
        mr_tc_gather_obs(a, j);
        if (j < a->M) mr_tc_gather_row(a, (int)j, pm, inv);
    }
    return MR_OK;
}

static mr_status e_diff(const float *a, const float *b, float *out, int64_t n, void *stream, mr_error *err) {
    OP("diff");
    QUEUE(R_DIFF, diff, .a = a, .b = b, .out = out, .n = n);
    if (n < 0) return mr_fail(err, MR_ERR_ARG, "emulated diff: n = %lld", (long long)n);
    DEV("diff", a, (size_t)n * 4); DEV("diff", b, (size_t)n * 4); DEV("diff", out, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) out[i] = a[i] - b[i];
    return MR_OK;
}

static mr_status e_accumulate(mr_tc_metrics *d_m, const mr_lossctl *d_loss, const mr_optctl *d_opt, int ngroups,
                              void *stream, mr_error *err) {
    OP("accumulate");
    QUEUE(R_ACCUMULATE, met, .m = d_m, .loss = d_loss, .opt = d_opt, .ngroups = ngroups);
    if (ngroups < 1 || ngroups > MR_OPT_MAX_GROUPS) return mr_fail(err, MR_ERR_ARG, "emulated accumulate: ngroups");
    DEV("accumulate", d_m, sizeof *d_m); DEV("accumulate", d_loss, sizeof *d_loss);
    DEV("accumulate", d_opt, sizeof *d_opt);
    mr_tc_accumulate(d_m, d_loss, d_opt, ngroups);
    return MR_OK;
}

static mr_status e_finish(mr_tc_metrics *d_m, const mr_popart_ctl *d_pa, const mr_optctl *d_opt, void *stream,
                          mr_error *err) {
    OP("finish");
    QUEUE(R_FINISH, met, .m = d_m, .pa = d_pa, .opt = d_opt);
    DEV("finish", d_m, sizeof *d_m); DEV("finish", d_pa, sizeof *d_pa); DEV("finish", d_opt, sizeof *d_opt);
    mr_tc_finish(d_m, d_pa, d_opt);
    return MR_OK;
}

/* ---------------------------------------------------------------- graphs (graph.cu) */

static mr_status e_graph_begin(void *stream, mr_error *err) {
    OP("graph_begin");
    if (E.cap_first < 0) E.cap_first = E.ops - 1;
    emu_stream *s = stream;
    if (!s) return mr_fail(err, MR_ERR_ARG, "emulated graph_begin: a stream of its own is needed");
    if (E.capture) return mr_fail(err, MR_ERR_BACKEND, "emulated graph_begin: a capture is open already");
    s->capturing = 1;
    s->invalid = 0;
    s->why[0] = 0;
    s->n = 0;
    E.capture = s;
    return MR_OK;
}

/* Closes the capture whatever happens; with discard, throws it away. */
static mr_status e_graph_end(void *stream, int discard, void **exec, mr_error *err) {
    emu_stream *s = stream;
    if (exec) *exec = NULL;
    if (!s || !s->capturing) return mr_fail(err, MR_ERR_BACKEND, "emulated graph_end: the stream is not capturing");
    s->capturing = 0;
    E.capture = NULL;
    const int n = s->n;
    s->n = 0;
    if (discard) return MR_OK;
    OP("graph_end");
    E.cap_last = E.ops - 1;
    if (s->invalid)
        return mr_fail(err, MR_ERR_BACKEND, "emulated cudaStreamEndCapture: the capture was invalidated (%s)", s->why);
    if (!exec) return mr_fail(err, MR_ERR_ARG, "emulated graph_end: exec is NULL");
    emu_graph *g = calloc(1, sizeof *g);
    if (g && n > 0) g->rec = malloc(sizeof *g->rec * (size_t)n);
    if (!g || (n > 0 && !g->rec)) {
        free(g);
        return mr_fail(err, MR_ERR_NOMEM, "emulated graph_end: out of host memory");
    }
    if (n > 0) memcpy(g->rec, s->rec, sizeof *g->rec * (size_t)n);
    g->n = n;
    *exec = g;
    E.graphs++;
    E.captures++;
    return MR_OK;
}

/* One recorded launch, run again with its recorded arguments (the by-value
 * ones are copies: a kernel cannot change its parameters for the next replay). */
static mr_status replay_one(const emu_rec *r, void *st, mr_error *err) {
    switch (r->kind) {
    case R_COPY: { const rec_copy a = r->a.copy; return e_copy(a.dst, a.src, a.bytes, a.kind, st, err); }
    case R_MEMSET: { const rec_memset a = r->a.memset; return e_memset(a.dst, a.value, a.bytes, st, err); }
    case R_ENV_RESET: { const rec_env a = r->a.env; return e_env_reset_all(&a.s, st, err); }
    case R_ENV_STEP: { const rec_env a = r->a.env; return e_env_step_all(&a.s, a.actions, st, err); }
    case R_ENV_CLEAR: { const rec_env a = r->a.env; return e_env_clear_logs(&a.s, st, err); }
    case R_ENV_REDUCE: { const rec_env a = r->a.env; return e_env_log_reduce(&a.s, a.out, st, err); }
    case R_ZERO_GRAD: { rec_policy a = r->a.pol; return e_policy_zero_grad(&a.pc, st, err); }
    case R_FORWARD: {
        rec_policy a = r->a.pol;
        return e_policy_forward(&a.pc, a.codes, a.extra, a.B, a.proxy, a.logits, a.value, st, err);
    }
    case R_BACKWARD: { rec_policy a = r->a.pol; return e_policy_backward(&a.pc, a.dlogits, a.dvalue, a.B, st, err); }
    case R_GAE: {
        const rec_gae a = r->a.gae;
        return e_gae(a.T, a.N, a.reward, a.value, a.last_value, a.done, a.gamma, a.lambda, a.adv, a.ret, st, err);
    }
    case R_SAMPLE: { const rec_sample a = r->a.sample; return e_sample(a.N, a.logits, a.u, a.action, a.logp, st, err); }
    case R_OPT_BEGIN: return e_opt_begin(r->a.opt.ctl, st, err);
    case R_OPT_STEP: {
        const rec_opt a = r->a.opt;
        return e_opt_step(a.param, a.grad, a.m, a.v, &a.G, a.partials, a.ctl, st, err);
    }
    case R_MEAN_STD: { const rec_stats a = r->a.stats; return e_mean_std(a.cx, a.n, a.partials, a.out2, st, err); }
    case R_NORMALIZE: { const rec_stats a = r->a.stats; return e_normalize(a.x, a.n, a.partials, a.out2, st, err); }
    case R_PPO_LOSS: {
        const rec_loss a = r->a.loss;
        return e_ppo_loss(a.B, a.logits, a.value, a.action, a.old_logp, a.adv, a.old_value, a.target, a.ctl, a.opt,
                          a.partials, a.dlogits, a.dvalue, st, err);
    }
    case R_POPART: {
        const rec_popart a = r->a.popart;
        return e_popart_update(a.pa, a.returns, a.n, a.partials, a.w, a.b, a.k, a.mw, a.vw, a.mb, a.vb, st, err);
    }
    case R_STEP_IN: { const rec_step a = r->a.step; return e_step_in(&a.s, a.seed, a.extra, a.u, st, err); }
    case R_STEP_OUT: {
        const rec_step a = r->a.step;
        return e_step_out(&a.s, a.pa, a.value, a.val, a.rew, a.done, st, err);
    }
    case R_GATHER: { const rec_gather a = r->a.gather; return e_gather(&a.a, a.pa, st, err); }
    case R_DIFF: { const rec_diff a = r->a.diff; return e_diff(a.a, a.b, a.out, a.n, st, err); }
    case R_ACCUMULATE: {
        const rec_metrics a = r->a.met;
        return e_accumulate(a.m, a.loss, a.opt, a.ngroups, st, err);
    }
    case R_FINISH: { const rec_metrics a = r->a.met; return e_finish(a.m, a.pa, a.opt, st, err); }
    default: return mr_fail(err, MR_ERR_STATE, "emulated graph: record of unknown kind %d", r->kind);
    }
}

static mr_status e_graph_launch(void *exec, void *stream, mr_error *err) {
    OP("graph_launch");
    const emu_graph *g = exec;
    if (!g) return mr_fail(err, MR_ERR_ARG, "emulated graph_launch: no graph");
    if (capturing(stream)) return mr_fail(err, MR_ERR_BACKEND, "emulated graph_launch: into a capture (not emulated)");
    E.replays++;
    for (int i = 0; i < g->n; i++) MR_PC_TRY(replay_one(&g->rec[i], stream, err));
    return MR_OK;
}

static void e_graph_destroy(void *exec) {
    emu_graph *g = exec;
    if (!g) return;
    E.graphs--;
    free(g->rec);
    free(g);
}

static const mr_tc_ops emu_table = {
    .name = "cpu emulation",
    .set_device = e_set_device,
    .device_name = e_device_name,
    .device_backend = e_device_backend,
    .pinned_backend = e_pinned_backend,
    .copy = e_copy,
    .memset = e_memset,
    .stream_create = e_stream_create,
    .stream_destroy = e_stream_destroy,
    .stream_sync = e_stream_sync,
    .event_create = e_event_create,
    .event_destroy = e_event_destroy,
    .event_record = e_event_record,
    .event_sync = e_event_sync,
    .event_elapsed = e_event_elapsed,
    .env_reset_all = e_env_reset_all,
    .env_step_all = e_env_step_all,
    .env_clear_logs = e_env_clear_logs,
    .env_log_reduce = e_env_log_reduce,
    .policy_create = e_policy_create,
    .policy_destroy = e_policy_destroy,
    .policy_zero_grad = e_policy_zero_grad,
    .policy_forward = e_policy_forward,
    .policy_backward = e_policy_backward,
    .gae = e_gae,
    .sample = e_sample,
    .opt_begin = e_opt_begin,
    .opt_step = e_opt_step,
    .mean_std = e_mean_std,
    .normalize = e_normalize,
    .ppo_loss = e_ppo_loss,
    .popart_update = e_popart_update,
    .step_in = e_step_in,
    .step_out = e_step_out,
    .gather = e_gather,
    .diff = e_diff,
    .accumulate = e_accumulate,
    .finish = e_finish,
    .graph_begin = e_graph_begin,
    .graph_end = e_graph_end,
    .graph_launch = e_graph_launch,
    .graph_destroy = e_graph_destroy,
};

static void emu_init(void) {
    memset(&E, 0, sizeof E);
    E.dev.name = "emulated GPU 0";
    E.dev.total = (size_t)4 << 30;
    E.small.name = "emulated small GPU";
    E.pin.name = "emulated pinned host";
    E.pin.total = (size_t)1 << 30;
    E.fail_at = -1;
    E.cap_first = E.cap_last = -1;
    emu_ops(&E.pe, &E.po);
}

/* ================================================================ helpers */

static void base_config(mr_config *c, int mode, int popart) {
    mr_config_default(c);
    c->env.mode = mode;
    c->env.num_envs = 32;
    c->env.grid_size = 16;
    c->env.view_range = 5;
    c->env.density_min = 20;
    c->env.density_max = 60;
    c->env.max_episode_steps = 12;   /* episodes end within an update */
    c->policy.num_conv = 2;
    c->policy.conv_channels[0] = 4;
    c->policy.conv_channels[1] = 8;
    c->policy.hidden = 32;
    c->policy.critic_hidden = 24;
    c->policy.popart = popart;
    c->ppo.rollout_steps = 16;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 2;
    c->threads = 1;   /* results do not depend on it; 2 cores may be shared with another job */
    c->seed = 7;
    c->total_steps = 16 * 32 * 6;   /* lr, clip, ent_coef move between updates */
}

static mr_trainer *make_cpu(const mr_config *cfg) {
    mr_config c = *cfg;
    c.device = MR_DEVICE_CPU;
    c.precision = MR_FP32;
    mr_trainer *t = NULL;
    mr_error e;
    if (mr_trainer_create(&c, &t, &e) != MR_OK) CHECK_MSG(0, "cpu trainer: %s", e.msg);
    return t;
}

static mr_trainer *make_gpu(const mr_config *cfg, const mr_tc_ops *ops) {
    mr_config c = *cfg;
    c.device = MR_DEVICE_CUDA;
    mr_trainer *t = NULL;
    mr_error e;
    if (mr_trainer_cuda_create_ops(&c, ops, &t, &e) != MR_OK) CHECK_MSG(0, "cuda trainer (%s): %s", ops->name, e.msg);
    return t;
}

static int bits_equal(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

static mr_status update(mr_trainer *t, mr_metrics *m) {
    mr_error e;
    mr_status s = mr_trainer_update(t, m, &e);
    if (s != MR_OK) CHECK_MSG(0, "update: %s", e.msg);
    return s;
}

/* The host copies of a CUDA trainer's learnable state (t->pol.params,
 * adam_m / v, adam_step, popart), fresh from the device. */
static void pull(mr_trainer *t) {
    mr_error e;
    if (mr_trainer_cuda_pull(t, MR_TC_LEARNABLE, &e) != MR_OK) CHECK_MSG(0, "pull: %s", e.msg);
}

static void pull_all(mr_trainer *t) {
    mr_error e;
    if (mr_trainer_cuda_pull(t, MR_TC_ALL, &e) != MR_OK) CHECK_MSG(0, "pull: %s", e.msg);
}

/* A rollout, read back from a CUDA trainer. */
typedef struct roll {
    int T, N, VV;
    uint8_t *obs, *act, *done;
    float *extra, *logp, *val, *rew, *adv, *ret, *last_value;
} roll;

static void roll_read(mr_trainer *t, roll *r) {
    const size_t B = (size_t)t->B;
    r->T = t->T;
    r->N = t->N;
    r->VV = t->VV;
    r->obs = malloc(B * (size_t)t->VV);
    r->act = malloc(B);
    r->done = malloc(B);
    r->extra = malloc(B * 8);
    r->logp = malloc(B * 4);
    r->val = malloc(B * 4);
    r->rew = malloc(B * 4);
    r->adv = malloc(B * 4);
    r->ret = malloc(B * 4);
    r->last_value = malloc((size_t)t->N * 4);
    mr_tc_rollout_view v = {r->obs, r->act, r->done, r->extra, r->logp, r->val, r->rew, r->adv, r->ret, r->last_value};
    mr_error e;
    if (mr_trainer_cuda_read_rollout(t, &v, &e) != MR_OK) CHECK_MSG(0, "read_rollout: %s", e.msg);
}

static void roll_free(roll *r) {
    free(r->obs); free(r->act); free(r->done); free(r->extra); free(r->logp); free(r->val);
    free(r->rew); free(r->adv); free(r->ret); free(r->last_value);
}

/* The rollout of a CUDA trainer (g) against the CPU trainer's (c). Actions
 * can differ legitimately where a uniform lies within the last bits of a
 * cumulative-probability boundary (the logits differ in their last bits:
 * other GEMM orders); from there on that environment's trajectory is its
 * own. So per environment everything up to its first different action is
 * compared, and what depends on the whole rollout (GAE, the normalised
 * advantages) only where nothing diverged. Returns the number of diverged
 * environments (at most max_div pass). */
static int compare_rollout(const char *label, const mr_trainer *c, const roll *g, int max_div) {
    const int T = c->T, N = c->N, VV = c->VV;
    int *div = malloc(sizeof(int) * (size_t)N);
    int ndiv = 0;
    for (int n = 0; n < N; n++) {
        div[n] = T;
        for (int t = 0; t < T; t++)
            if (c->act[(size_t)t * N + n] != g->act[(size_t)t * N + n]) { div[n] = t; break; }
        ndiv += div[n] < T;
    }
    CHECK_MSG(ndiv <= max_div, "%s: %d of %d environments took a different action (at most %d accepted)", label, ndiv,
              N, max_div);
    long bad_obs = 0, bad_extra = 0, bad_rew = 0, bad_done = 0;
    double e_logp = 0.0, e_val = 0.0, e_ret = 0.0, e_lv = 0.0, den = 1e-30, den_r = 1e-30;
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            const size_t k = (size_t)t * N + n;
            if (t <= div[n]) {   /* the same state: the same observation and outputs */
                bad_obs += !bits_equal(c->obs + k * VV, g->obs + k * VV, (size_t)VV);
                bad_extra += !bits_equal(c->extra + 2 * k, g->extra + 2 * k, 8);
                const double dl = fabs((double)c->logp[k] - g->logp[k]), dv = fabs((double)c->val[k] - g->val[k]);
                if (!(dl <= e_logp)) e_logp = dl;
                if (!(dv <= e_val)) e_val = dv;
                if (fabs(c->val[k]) > den) den = fabs(c->val[k]);
            }
            if (t < div[n]) {    /* the same action: the same step */
                bad_rew += !bits_equal(c->rew + k, g->rew + k, 4);
                bad_done += c->done[k] != g->done[k];
            }
            if (div[n] == T) {   /* returns of untouched trajectories */
                const double dr = fabs((double)c->ret[k] - g->ret[k]);
                if (!(dr <= e_ret)) e_ret = dr;
                if (fabs(c->ret[k]) > den_r) den_r = fabs(c->ret[k]);
            }
        }
    for (int n = 0; n < N; n++)
        if (div[n] == T) {
            const double d = fabs((double)c->last_value[n] - g->last_value[n]);
            if (!(d <= e_lv)) e_lv = d;
        }
    CHECK_MSG(bad_obs == 0, "%s: %ld observation rows differ", label, bad_obs);
    CHECK_MSG(bad_extra == 0, "%s: %ld critic-input rows differ", label, bad_extra);
    CHECK_MSG(bad_rew == 0, "%s: %ld rewards differ", label, bad_rew);
    CHECK_MSG(bad_done == 0, "%s: %ld done flags differ", label, bad_done);
    /* logp: absolute (log-probabilities of order 1); values relative to the largest */
    CHECK_MSG(e_logp < 1e-5, "%s: logp differs by %.3g", label, e_logp);
    CHECK_MSG(e_val / den < 1e-5, "%s: val differs by %.3g (relative)", label, e_val / den);
    CHECK_MSG(e_ret / den_r < 1e-5, "%s: ret differs by %.3g (relative)", label, e_ret / den_r);
    CHECK_MSG(e_lv / den < 1e-5, "%s: last_value differs by %.3g (relative)", label, e_lv / den);
    double e_adv = 0.0;
    if (ndiv == 0) {
        e_adv = check_relerr(g->adv, c->adv, (size_t)T * N, 1e-30);
        CHECK_MSG(e_adv < 1e-5, "%s: adv differs by %.3g (relative)", label, e_adv);
        CHECK_MSG(bits_equal(c->act, g->act, (size_t)T * N), "%s: actions differ", label);
    }
    if (verbose)
        printf("    %s: rollout: %d diverged envs; logp %.2g, val %.2g, ret %.2g, last_value %.2g, adv %.2g\n", label,
               ndiv, e_logp, e_val / den, e_ret / den_r, e_lv / den, e_adv);
    free(div);
    return ndiv;
}

/* The metrics of an update: relative tolerance tol, with absolute floors for
 * the quantities that sit near 0 (a policy loss of normalised advantages, the
 * KL of the first epoch) and one sample's share of the clip fraction. */
static void compare_metrics(const char *label, const mr_metrics *g, const mr_metrics *c, int M, double tol) {
    char what[192];
#define MET(f, atol)                                                                                            \
    do {                                                                                                        \
        snprintf(what, sizeof what, "%s: metrics." #f, label);                                                 \
        const double a_ = (double)g->f, b_ = (double)c->f;                                                     \
        if (verbose) printf("    %-44s %.9g vs %.9g\n", what, a_, b_);                                          \
        CHECK_MSG(fabs(a_ - b_) <= (atol) + tol * fabs(b_), "%s = %.9g, cpu %.9g", what, a_, b_);               \
    } while (0)
    MET(update, 0);
    MET(agent_steps, 0);
    MET(progress, 0);
    MET(episodes, 0);
    MET(deaths, 0);
    MET(episode_return_mean, 1e-6);
    MET(episode_return_min, 0);
    MET(episode_return_max, 0);
    MET(episode_length_mean, 0);
    MET(food_per_episode, 0);
    MET(poison_per_episode, 0);
    MET(efficiency, 0);
    MET(policy_loss, 1e-6);
    MET(value_loss, 1e-7);
    MET(entropy, 0);
    MET(approx_kl, 1e-7);
    MET(clip_fraction, 1.01 / M);
    MET(explained_variance, 1e-6);
    MET(grad_norm_policy, 0);
    MET(grad_norm_value, 0);
    MET(grad_norm, 0);
    MET(lr, 0);
    MET(clip, 0);
    MET(ent_coef, 0);
    MET(popart_mean, 1e-9);
    MET(popart_std, 0);
    MET(loss_scale, 0);
    MET(skipped_steps, 0);
    MET(nonfinite, 0);
#undef MET
}

/* Parameters, Adam moments and step, PopArt of a CUDA trainer (g, pulled)
 * against the CPU trainer's: normwise relative, per group (policy, value).
 * Measured in the emulation: parameters, m and v about 1e-7 (Adam's scalars
 * are formed in double on both sides; when ppo_math.h formed 1 - beta2 from
 * the float 0.999f, v was 1.3e-5 off, which the tighter bound on v catches). */
static void compare_learnable(const char *label, mr_trainer *g, const mr_trainer *c, double tol) {
    pull(g);
    const size_t P = c->pol.n_params, Pp = c->pol.n_policy;
    const double ep = check_relerr(g->pol.params, c->pol.params, Pp, 1e-30);
    const double ev = check_relerr(g->pol.params + Pp, c->pol.params + Pp, P - Pp, 1e-30);
    const double em = check_relerr(g->adam_m, c->adam_m, P, 1e-30), es = check_relerr(g->adam_v, c->adam_v, P, 1e-30);
    CHECK_MSG(ep < tol, "%s: policy parameters differ by %.3g", label, ep);
    CHECK_MSG(ev < tol, "%s: value parameters differ by %.3g", label, ev);
    CHECK_MSG(em < tol, "%s: Adam m differs by %.3g", label, em);
    CHECK_MSG(es < tol * 1e-2, "%s: Adam v differs by %.3g", label, es);
    CHECK_MSG(g->adam_step == c->adam_step, "%s: Adam step %lld vs %lld", label, (long long)g->adam_step,
              (long long)c->adam_step);
    CHECK_NEAR(g->popart.mean, c->popart.mean, 1e-9, tol);
    CHECK_NEAR(g->popart.std, c->popart.std, 0, tol);
    CHECK(g->popart.count == c->popart.count);
    if (verbose)
        printf("    %s: params %.2g (policy) %.2g (value), adam m %.2g v %.2g, popart %.9g %.9g\n", label, ep, ev, em,
               es, g->popart.mean, g->popart.std);
}

/* ================================================================ 1. against the CPU trainer */

/* Hot parameters changed between updates (as a host would). */
static void change_hot(mr_trainer *t) {
    mr_hot_params h;
    mr_error e;
    CHECK(mr_trainer_get_hot(t, &h, &e) == MR_OK);
    h.max_grad_norm = 0.3;
    h.vf_coef = 0.8;
    h.ent_floor = 2.2;   /* above the entropy: the floor term acts */
    h.ent_floor_coef = 0.2;
    h.clip.start = 0.1;
    h.lr.start = h.lr.end = 0.003;   /* large steps: ratios leave the clip range */
    CHECK(mr_trainer_set_hot(t, &h, &e) == MR_OK);
}

/* max_div: environments allowed to diverge per rollout (see compare_rollout);
 * hot: change the hot parameters after the first update. */
static void run_against_cpu(const char *name, const mr_config *cfg, const mr_tc_ops *ops, int max_div, int hot) {
    mr_trainer *c = make_cpu(cfg), *g = make_gpu(cfg, ops);
    if (!c || !g) {
        mr_trainer_free(c);
        mr_trainer_free(g);
        return;
    }
    char label[128];
    pull(g);
    CHECK_MSG(bits_equal(g->pol.params, c->pol.params, c->pol.n_params * 4), "%s: initial weights differ", name);
    const long ops0 = E.ops;
    int diverged = 0;
    for (int u = 1; u <= 3; u++) {
        mr_metrics mc, mg;
        if (update(c, &mc) != MR_OK || update(g, &mg) != MR_OK) break;
        snprintf(label, sizeof label, "%s, update %d", name, u);
        roll r;
        roll_read(g, &r);
        const int nd = compare_rollout(label, c, &r, max_div);
        roll_free(&r);
        diverged += nd;
        if (nd == 0) {
            compare_metrics(label, &mg, &mc, c->M, 1e-4);
        } else {
            printf("  %s: %d environments sampled another action where the uniform fell within the last bits "
                   "of a boundary; metrics and parameters compared loosely from here\n", label, nd);
            CHECK_NEAR(mg.entropy, mc.entropy, 0, 1e-2);
        }
        if (u == 1 || u == 3) compare_learnable(label, g, c, diverged ? 1e-2 : 1e-4);
        if (u == 1 && hot) {
            change_hot(c);
            change_hot(g);
        }
        CHECK(mg.time_rollout > 0.0 || ops != &emu_table);
        CHECK(mg.memory_planned_bytes > 0 && mg.memory_peak_bytes <= mg.memory_limit_bytes);
    }
    if (ops == &emu_table) printf("  %s: 3 updates, %ld emulated GPU operations\n", name, E.ops - ops0);
    mr_trainer_free(c);
    mr_trainer_free(g);
}

static void test_against_cpu(void) {
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    run_against_cpu("ground truth, PopArt", &cfg, &emu_table, 0, 0);
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 0);
    run_against_cpu("ground truth, no PopArt", &cfg, &emu_table, 0, 0);
    base_config(&cfg, MR_MODE_PROXY, 1);
    run_against_cpu("proxy, PopArt", &cfg, &emu_table, 0, 0);
    /* other shapes: 16 envs, 3 epochs of 4 minibatches of 64, no advantage
     * normalisation; hot parameters changed after the first update */
    base_config(&cfg, MR_MODE_PROXY_MORTAL, 0);
    cfg.env.num_envs = 16;
    cfg.ppo.minibatches = 4;
    cfg.ppo.norm_adv = 0;
    cfg.ppo.epochs = 3;
    run_against_cpu("proxy_mortal, no PopArt, 4 minibatches, hot parameters", &cfg, &emu_table, 0, 1);
    CHECK_MSG(E.violations == 0, "emulated GPU: %ld bad arguments, the first: %s", E.violations, E.first_violation);
    CHECK(E.pe.bad_args == 0);
}


/* ================================================================ 2. checkpoints, snapshots */

static char tmpdir[64];

/* path = tmpdir/name, in the caller's buffer of 160 bytes. */
static const char *tmp_path(char *path, const char *name) {
    snprintf(path, 160, "%s/%s", tmpdir, name);
    return path;
}

static mr_status save(mr_trainer *t, const char *path) {
    mr_error e;
    mr_status s = mr_trainer_save(t, path, &e);
    if (s != MR_OK) CHECK_MSG(0, "save %s: %s", path, e.msg);
    return s;
}

static mr_status load(mr_trainer *t, const char *path) {
    mr_error e;
    mr_status s = mr_trainer_load(t, path, &e);
    if (s != MR_OK) CHECK_MSG(0, "load %s: %s", path, e.msg);
    return s;
}

/* Every saved array of two environment states, byte for byte; what differs
 * goes to stderr. */
static int env_equal(const mr_forage *a, const mr_forage *b) {
    const size_t n = (size_t)a->n;
    if (a->n != b->n || a->seed != b->seed) return 0;
    const struct { const char *what; const void *x, *y; size_t bytes; } arr[] = {
        {"grid", a->grid, b->grid, n * (size_t)a->H * (size_t)a->W}, {"x", a->x, b->x, n * 4},
        {"y", a->y, b->y, n * 4}, {"energy", a->energy, b->energy, n * 4},
        {"energy_centi", a->energy_centi, b->energy_centi, n * 4}, {"steps", a->steps, b->steps, n * 4},
        {"tick", a->tick, b->tick, n * 4}, {"resets", a->resets, b->resets, n * 4},
        {"food_count", a->food_count, b->food_count, n * 4}, {"poison_count", a->poison_count, b->poison_count, n * 4},
        {"obs", a->obs, b->obs, n * (size_t)a->V * (size_t)a->V}, {"ep_return", a->ep_return, b->ep_return, n * 4},
        {"ep_food", a->ep_food, b->ep_food, n * 4}, {"ep_poison", a->ep_poison, b->ep_poison, n * 4},
    };
    int same = 1;
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++)
        if (!bits_equal(arr[i].x, arr[i].y, arr[i].bytes)) {
            fprintf(stderr, "    env.%s differs\n", arr[i].what);
            same = 0;
        }
    return same;
}

/* The whole learnable state and progress of a (a CUDA trainer, pulled) and
 * b, bit for bit: 1 when equal; otherwise 0, naming what differs. */
static int state_equal(mr_trainer *a, const mr_trainer *b) {
    mr_error e;
    if (mr_trainer_cuda_pull(a, MR_TC_ALL, &e) != MR_OK) {
        CHECK_MSG(0, "pull: %s", e.msg);
        return 0;
    }
    const size_t P = a->pol.n_params * 4;
    const struct { const char *what; int same; } part[] = {
        {"parameters", bits_equal(a->pol.params, b->pol.params, P)},
        {"Adam m", bits_equal(a->adam_m, b->adam_m, P)},
        {"Adam v", bits_equal(a->adam_v, b->adam_v, P)},
        {"Adam step", a->adam_step == b->adam_step},
        {"PopArt", a->popart.mean == b->popart.mean && a->popart.std == b->popart.std &&
                   a->popart.count == b->popart.count},
        {"progress", a->updates == b->updates && a->agent_steps == b->agent_steps},
        {"environments", env_equal(&a->env, &b->env)},
    };
    int same = 1;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
        if (!part[i].same) {
            if (same) fprintf(stderr, "    differs:");
            fprintf(stderr, " %s", part[i].what);
            same = 0;
        }
    if (!same) fputc('\n', stderr);
    return same;
}

/* Two runs of the same emulation from the same state: the same bits. */
static void same_update(const char *label, mr_trainer *a, mr_trainer *b) {
    mr_metrics ma, mb;
    if (update(a, &ma) != MR_OK || update(b, &mb) != MR_OK) return;
    roll ra, rb;
    roll_read(a, &ra);
    roll_read(b, &rb);
    const size_t B = (size_t)a->B;
    CHECK_MSG(bits_equal(ra.obs, rb.obs, B * (size_t)a->VV) && bits_equal(ra.act, rb.act, B) &&
              bits_equal(ra.logp, rb.logp, B * 4) && bits_equal(ra.val, rb.val, B * 4) &&
              bits_equal(ra.adv, rb.adv, B * 4) && bits_equal(ra.ret, rb.ret, B * 4),
              "%s: the rollouts differ", label);
    roll_free(&ra);
    roll_free(&rb);
    CHECK_MSG(ma.policy_loss == mb.policy_loss && ma.value_loss == mb.value_loss && ma.grad_norm == mb.grad_norm &&
              ma.episodes == mb.episodes && ma.update == mb.update && ma.popart_std == mb.popart_std,
              "%s: the metrics differ", label);
    pull_all(b);
    CHECK_MSG(state_equal(a, b), "%s: the states after the update differ", label);
}

/* An update of g (CUDA) and c (CPU) from the same state, compared as in test 1. */
static void paired_update(const char *label, mr_trainer *g, mr_trainer *c) {
    mr_metrics mg, mc;
    if (update(c, &mc) != MR_OK || update(g, &mg) != MR_OK) return;
    roll r;
    roll_read(g, &r);
    if (compare_rollout(label, c, &r, 0) == 0) compare_metrics(label, &mg, &mc, c->M, 1e-4);
    roll_free(&r);
    compare_learnable(label, g, c, 1e-4);
}

static void test_checkpoints(void) {
    mr_config cfg, other;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    other = cfg;
    other.seed = 8;   /* the loading trainers: a load adopts the checkpoint's seed */
    mr_trainer *g = make_gpu(&cfg, &emu_table), *g2 = make_gpu(&other, &emu_table), *c = make_cpu(&other);
    mr_trainer *g3 = make_gpu(&other, &emu_table), *c3 = make_cpu(&other);
    if (!g || !g2 || !c || !g3 || !c3) goto done;
    char pa[160], pb[160];
    const char *A = tmp_path(pa, "cuda.mrck"), *Bp = tmp_path(pb, "cpu.mrck");
    if (update(g, NULL) != MR_OK || save(g, A) != MR_OK) goto done;
    /* CUDA -> CPU and CUDA -> CUDA: the same state, bit for bit */
    if (load(c, A) != MR_OK || load(g2, A) != MR_OK) goto done;
    CHECK_MSG(state_equal(g, c), "the CPU trainer's state after loading the CUDA checkpoint differs");
    CHECK_MSG(state_equal(g2, c), "the CUDA trainer's state after loading the CUDA checkpoint differs");
    /* the next update: a reloaded emulation continues bit for bit; the CPU as in test 1 */
    same_update("checkpoint, CUDA -> CUDA", g, g2);
    {
        mr_trainer *cg = make_cpu(&other);
        if (cg && load(cg, A) == MR_OK) {
            mr_trainer *gg = make_gpu(&other, &emu_table);
            if (gg && load(gg, A) == MR_OK) paired_update("checkpoint, CUDA -> CPU", gg, cg);
            mr_trainer_free(gg);
        }
        mr_trainer_free(cg);
    }
    /* CPU -> CUDA */
    if (update(c, NULL) != MR_OK || save(c, Bp) != MR_OK) goto done;
    if (load(g3, Bp) != MR_OK || load(c3, Bp) != MR_OK) goto done;
    CHECK_MSG(state_equal(g3, c3), "the CUDA trainer's state after loading the CPU checkpoint differs");
    paired_update("checkpoint, CPU -> CUDA", g3, c3);
    /* Evaluation and inference run on the host copy of the weights: after
     * loading one checkpoint, a CUDA and a CPU trainer give the same numbers. */
    if (load(g3, Bp) == MR_OK && load(c3, Bp) == MR_OK) {
        mr_trainer_update(g3, NULL, NULL);   /* device weights move on; the host copy is refreshed by evaluate */
        mr_trainer_update(c3, NULL, NULL);
        mr_eval_config ec;
        mr_eval_config_default(&ec);
        ec.num_envs = 8;
        ec.steps = 40;
        mr_eval_result rg, rc;
        mr_error e;
        CHECK(mr_trainer_evaluate(g3, &ec, &rg, &e) == MR_OK);
        CHECK(mr_trainer_evaluate(c3, &ec, &rc, &e) == MR_OK);
        CHECK_MSG(fabs(rg.energy_per_1k - rc.energy_per_1k) <= 0.02 * fabs(rc.energy_per_1k) + 1e-9 &&
                  fabs(rg.survival - rc.survival) <= 0.02 * rc.survival,
                  "evaluation: CUDA %.6g %.6g vs CPU %.6g %.6g", rg.energy_per_1k, rg.survival, rc.energy_per_1k,
                  rc.survival);
        uint8_t obs[3 * 121];
        for (size_t i = 0; i < sizeof obs; i++) obs[i] = (uint8_t)((i * 7 + i / 5) % 3);
        float lg[24], vg[3], lc[24], vc[3];
        CHECK(mr_trainer_infer(g3, obs, NULL, 3, lg, vg, &e) == MR_OK);
        CHECK(mr_trainer_infer(c3, obs, NULL, 3, lc, vc, &e) == MR_OK);
        CHECK_MSG(check_relerr(lg, lc, 24, 1e-30) < 1e-4 && check_relerr(vg, vc, 3, 1e-30) < 1e-4,
                  "inference: logits %.3g, values %.3g", check_relerr(lg, lc, 24, 1e-30), check_relerr(vg, vc, 3, 1e-30));
        CHECK(fabs(vg[0]) > 0.0f);
    }
    /* Snapshot, update, restore: the learnable state and progress are the
     * snapshot's again (the environments go on); the next update as the CPU's. */
    if (load(g3, Bp) == MR_OK && load(c3, Bp) == MR_OK) {
        mr_error e;
        CHECK(mr_trainer_snapshot(g3, &e) == MR_OK);
        CHECK(mr_trainer_snapshot(c3, &e) == MR_OK);
        mr_metrics m1, m2;
        update(g3, &m1);
        update(c3, NULL);
        CHECK(mr_trainer_restore(g3, &e) == MR_OK);
        CHECK(mr_trainer_restore(c3, &e) == MR_OK);
        pull(g3);
        const size_t P = g3->pol.n_params * 4;
        CHECK_MSG(bits_equal(g3->pol.params, g3->snap_params, P) && bits_equal(g3->adam_m, g3->snap_m, P) &&
                  bits_equal(g3->adam_v, g3->snap_v, P) && g3->adam_step == g3->snap_adam_step &&
                  g3->popart.std == g3->snap_popart.std && g3->popart.mean == g3->snap_popart.mean,
                  "restore: the device state is not the snapshot's");
        CHECK(g3->updates == c3->updates);
        paired_update("snapshot / restore", g3, c3);
        update(g3, &m2);
        CHECK(m2.update == m1.update + 1);
    }
done:
    mr_trainer_free(g);
    mr_trainer_free(g2);
    mr_trainer_free(c);
    mr_trainer_free(g3);
    mr_trainer_free(c3);
}

/* ================================================================ 3. steady state */

static void test_steady_state(void) {
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    mr_trainer *g = make_gpu(&cfg, &emu_table);
    if (!g) return;
    mr_error e;
    mr_devmem_stats d0, d1;
    mr_memory_stats m0, m1;
    update(g, NULL);
    CHECK(mr_trainer_cuda_devmem(g, &d0, &e) == MR_OK);
    CHECK(mr_trainer_memory(g, &m0, &e) == MR_OK);
    const long raw_dev = E.dev.raw_allocs, raw_pin = E.pin.raw_allocs;
    for (int u = 0; u < 3; u++) update(g, NULL);
    CHECK(mr_trainer_cuda_devmem(g, &d1, &e) == MR_OK);
    CHECK(mr_trainer_memory(g, &m1, &e) == MR_OK);
    CHECK_MSG(d1.allocations == d0.allocations && d1.raw_allocations == d0.raw_allocations &&
              d1.frees == d0.frees && d1.allocated_bytes == d0.allocated_bytes,
              "device allocations in steady state: %llu -> %llu", (unsigned long long)d0.allocations,
              (unsigned long long)d1.allocations);
    CHECK(m1.host_allocations == m0.host_allocations);
    CHECK(m1.device_allocations == m0.device_allocations && m1.device_allocations == d1.allocations);
    CHECK(m1.device_allocated_bytes == d1.allocated_bytes && m1.device_allocated_bytes > 0);
    CHECK(E.dev.raw_allocs == raw_dev && E.pin.raw_allocs == raw_pin);
    /* the plan accounts for every device byte the trainer holds */
    mr_tc_plan pl;
    CHECK(mr_trainer_cuda_plan(&cfg, &pl, &e) == MR_OK);
    CHECK_MSG(d1.requested_bytes == pl.device_bytes, "requested %llu bytes, planned %zu",
              (unsigned long long)d1.requested_bytes, pl.device_bytes);
    /* timings from the events; profiling adds per-step events (outside the steady state) */
    mr_tc_timing tm;
    mr_metrics pm;
    CHECK(mr_trainer_set_profile(g, 1, &e) == MR_OK);   /* the public switch */
    update(g, &pm);
    CHECK(mr_trainer_cuda_timing(g, &tm, &e) == MR_OK);
    CHECK(tm.rollout > 0.0 && tm.update > 0.0 && tm.env > 0.0 && tm.inference > 0.0);
    CHECK(tm.env + tm.inference <= tm.rollout * 1.0001);
    CHECK(pm.time_env == tm.env && pm.time_inference == tm.inference && pm.time_rollout == tm.rollout);
    mr_trainer_free(g);
    CHECK(E.streams == 0 && E.events == 0);
}

/* ================================================================ 4. out of memory */

static void test_oom(void) {
    mr_tc_ops small = emu_table;
    small.device_backend = e_small_backend;
    E.small.total = (size_t)120 << 20;   /* limit 108 MiB at memory_fraction 0.9 */
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    cfg.env.num_envs = 1024;
    mr_trainer *t = (mr_trainer *)1;
    mr_error e;
    const int nseg = E.small.nseg;
    mr_status s = mr_trainer_cuda_create_ops(&cfg, &small, &t, &e);
    CHECK(s == MR_ERR_NOMEM && t == NULL);
    printf("  out of memory (1024 envs on a 120 MiB card): %s\n", e.msg);
    CHECK_MSG(strstr(e.msg, "cannot allocate") && strstr(e.msg, "for the "), "message: %s", e.msg);
    const char *p = strstr(e.msg, "At most ");
    int fit = -1;
    CHECK_MSG(p && sscanf(p, "At most %d environments", &fit) == 1, "no largest num_envs in: %s", e.msg);
    CHECK(E.small.nseg == nseg && E.small.used == 0);
    if (fit > 0 && fit < 1024) {
        /* it fits; the next size the config accepts does not */
        cfg.env.num_envs = fit;
        s = mr_trainer_cuda_create_ops(&cfg, &small, &t, &e);
        CHECK_MSG(s == MR_OK, "%d environments were said to fit: %s", fit, e.msg);
        if (s == MR_OK) mr_trainer_free(t);
        cfg.env.num_envs = fit + 1;
        while (mr_config_validate(&cfg, NULL) != MR_OK) cfg.env.num_envs++;
        s = mr_trainer_cuda_create_ops(&cfg, &small, &t, &e);
        CHECK_MSG(s == MR_ERR_NOMEM, "%d environments fit, but only %d were said to", cfg.env.num_envs, fit);
        if (s == MR_OK) mr_trainer_free(t);
    }
    /* nothing fits: the network alone is too large */
    E.small.total = (size_t)8 << 20;
    cfg.env.num_envs = 32;
    s = mr_trainer_cuda_create_ops(&cfg, &small, &t, &e);
    CHECK(s == MR_ERR_NOMEM);
    CHECK_MSG(strstr(e.msg, "environment fits") != NULL, "message: %s", e.msg);
    CHECK(E.small.used == 0 && E.streams == 0 && E.events == 0);
}

/* ================================================================ 5. loss scaling and precisions */

static void test_loss_scale(void) {
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    mr_error e;
    /* fp32: a power-of-two scale multiplies every gradient exactly and the
     * multiplier divides it out again: the same bits as no scale */
    {
        mr_trainer *a = make_gpu(&cfg, &emu_table), *b = make_gpu(&cfg, &emu_table);
        if (a && b) {
            CHECK(mr_trainer_cuda_set_loss_scale(b, 1048576.0f, &e) == MR_OK);
            CHECK(mr_trainer_cuda_set_loss_scale(b, -1.0f, &e) == MR_ERR_ARG);
            mr_metrics ma, mb;
            update(a, &ma);
            update(b, &mb);
            pull(a);
            pull(b);
            const size_t P = a->pol.n_params * 4;
            CHECK_MSG(bits_equal(a->pol.params, b->pol.params, P) && bits_equal(a->adam_m, b->adam_m, P) &&
                      bits_equal(a->adam_v, b->adam_v, P), "fp32 with loss scale 2^20 differs from no scale");
            CHECK(ma.grad_norm == mb.grad_norm && ma.loss_scale == 1.0 && mb.loss_scale == 1048576.0);
            CHECK(mb.skipped_steps == 0 && mb.nonfinite == 0);
        }
        mr_trainer_free(a);
        mr_trainer_free(b);
    }
    /* fp16: a huge scale overflows the fp16 gradients: every step is skipped
     * (weights, moments, step untouched), the scale backs off once per step,
     * and it is no error; a sane scale then trains */
    {
        mr_config c16 = cfg;
        c16.precision = MR_FP16;
        c16.policy.popart = 0;   /* PopArt rescales the value head even when every step is skipped */
        mr_trainer *t = make_gpu(&c16, &emu_table);
        if (t) {
            pull(t);
            const size_t P = t->pol.n_params;
            float *p0 = malloc(P * 4 * 3);
            memcpy(p0, t->pol.params, P * 4);
            memcpy(p0 + P, t->adam_m, P * 4);
            memcpy(p0 + 2 * P, t->adam_v, P * 4);
            CHECK(mr_trainer_cuda_set_loss_scale(t, 1e30f, &e) == MR_OK);
            mr_metrics m;
            const mr_status s = mr_trainer_update(t, &m, &e);
            CHECK_MSG(s == MR_OK, "fp16 overflow is the scaler's business, not an error: %s", e.msg);
            const int steps = c16.ppo.epochs * c16.ppo.minibatches;
            CHECK_MSG(m.skipped_steps == (uint64_t)steps, "skipped %llu of %d", (unsigned long long)m.skipped_steps,
                      steps);
            CHECK(m.nonfinite == 0);
            CHECK_NEAR(m.loss_scale, 1e30f * ldexp(1.0, -steps), 0, 1e-6);
            /* as the CPU trainer: statistics over the steps taken, none */
            CHECK(m.grad_norm == 0.0 && m.policy_loss == 0.0 && m.value_loss == 0.0 && m.entropy == 0.0);
            pull(t);
            CHECK_MSG(bits_equal(p0, t->pol.params, P * 4) && bits_equal(p0 + P, t->adam_m, P * 4) &&
                      bits_equal(p0 + 2 * P, t->adam_v, P * 4) && t->adam_step == 0,
                      "skipped steps changed the weights or the optimizer");
            CHECK(mr_trainer_cuda_set_loss_scale(t, 65536.0f, &e) == MR_OK);
            CHECK(update(t, &m) == MR_OK);
            CHECK(m.skipped_steps == (uint64_t)steps && m.loss_scale == 65536.0 && m.nonfinite == 0);
            pull(t);
            CHECK(t->adam_step == steps && !bits_equal(p0, t->pol.params, P * 4));
            free(p0);
        }
        mr_trainer_free(t);
    }
}

/* fp32 with a NaN weight: every step is skipped and the update reports
 * MR_ERR_NUMERIC, as the CPU trainer's does; the weights stay as they were. */
static void test_nonfinite(void) {
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 0);
    mr_trainer *g = make_gpu(&cfg, &emu_table), *c = make_cpu(&cfg);
    if (g && c) {
        pull(g);
        const size_t P = c->pol.n_params, w = c->pol.value_w_offset;
        g->pol.params[w] = c->pol.params[w] = NAN;
        mr_error e;
        CHECK(mr_trainer_cuda_push(g, MR_TC_WEIGHTS, &e) == MR_OK);
        float *p0 = malloc(P * 4);
        memcpy(p0, c->pol.params, P * 4);
        mr_metrics mg, mc;
        CHECK(mr_trainer_update(c, &mc, &e) == MR_ERR_NUMERIC);
        CHECK(mr_trainer_update(g, &mg, &e) == MR_ERR_NUMERIC);
        CHECK_MSG(strstr(e.msg, "non-finite") != NULL, "message: %s", e.msg);
        CHECK(mc.nonfinite == 1 && mg.nonfinite == 1);
        CHECK(mg.skipped_steps == (uint64_t)(cfg.ppo.epochs * cfg.ppo.minibatches));
        CHECK(mg.update == mc.update && mg.episodes == mc.episodes);
        pull(g);
        CHECK(bits_equal(g->pol.params, p0, w * 4) && bits_equal(c->pol.params, p0, w * 4));
        CHECK(g->adam_step == 0 && c->adam_step == 0);
        free(p0);
    }
    mr_trainer_free(g);
    mr_trainer_free(c);
}

/* bf16 and fp16 against fp32 (all emulated). The rollouts are the same
 * until a lower-precision logit tips a sample over to another action, and
 * then trajectories part, so: the first rollout step (the same states)
 * sharply, the first update's statistics and parameter change loosely. */
static void test_precisions(void) {
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    mr_trainer *t[3] = {NULL, NULL, NULL};
    mr_metrics m[3];
    roll r[3];
    float *dp[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        mr_config c = cfg;
        c.precision = k;
        t[k] = make_gpu(&c, &emu_table);
        if (!t[k]) goto done;
        pull(t[k]);
        const size_t P = t[k]->pol.n_params;
        dp[k] = malloc(P * 4);
        memcpy(dp[k], t[k]->pol.params, P * 4);
        if (update(t[k], &m[k]) != MR_OK) goto done;
        roll_read(t[k], &r[k]);
        pull(t[k]);
        for (size_t i = 0; i < P; i++) dp[k][i] = t[k]->pol.params[i] - dp[k][i];
    }
    const int N = cfg.env.num_envs;
    const size_t P = t[0]->pol.n_params;
    static const double tol_out[3] = {0, 3e-2, 4e-3};
    for (int k = 1; k < 3; k++) {
        const char *nm = k == MR_BF16 ? "bf16" : "fp16";
        CHECK(bits_equal(r[k].obs, r[0].obs, (size_t)N * t[0]->VV));
        const double el = check_relerr(r[k].logp, r[0].logp, (size_t)N, 1e-30), ev = check_relerr(r[k].val, r[0].val, (size_t)N, 1e-30);
        int same = 0, same_all = 0;
        for (int i = 0; i < N; i++) same += r[k].act[i] == r[0].act[i];
        for (int i = 0; i < t[0]->B; i++) same_all += r[k].act[i] == r[0].act[i];
        double dd = 0, nb = 0;
        for (size_t i = 0; i < P; i++) {
            dd += ((double)dp[k][i] - dp[0][i]) * ((double)dp[k][i] - dp[0][i]);
            nb += (double)dp[0][i] * dp[0][i];
        }
        const double dstep = sqrt(dd / nb);   /* the parameter change's relative 2-norm difference */
        const double evl = fabs(m[k].value_loss / m[0].value_loss - 1), egn = fabs(m[k].grad_norm / m[0].grad_norm - 1);
        printf("  %s vs fp32: first step logp %.2g, values %.2g, actions alike %d of %d (rollout %d of %d); update 1: "
               "entropy %.2g, value loss %.2g, grad norm %.2g, parameter change %.2g (relative differences)\n",
               nm, el, ev, same, N, same_all, t[0]->B, fabs(m[k].entropy - m[0].entropy), evl, egn, dstep);
        CHECK_MSG(el < tol_out[k] && ev < tol_out[k], "%s: first-step logp %.3g, values %.3g", nm, el, ev);
        CHECK_MSG(same >= N * 3 / 4, "%s: only %d of %d first actions alike", nm, same, N);
        CHECK_NEAR(m[k].popart_std, m[0].popart_std, 0, 0.05);
        if (same_all == t[0]->B) {
            /* The same trajectories (a young policy's logits are small, so
             * their rounding rarely moves a sample): the same update up to
             * the precision's rounding. Measured bf16 / fp16: value loss
             * 1.7e-4 / 4e-7, grad norm 1e-5 / 5.5e-5, parameter change
             * 0.012 / 0.0042. */
            const double tl = k == MR_BF16 ? 1e-2 : 1e-3, tp = k == MR_BF16 ? 0.06 : 0.02;
            CHECK_MSG(fabs(m[k].entropy - m[0].entropy) < tl && evl < tl && egn < tl,
                      "%s: entropy %.3g, value loss %.3g, grad norm %.3g", nm, fabs(m[k].entropy - m[0].entropy),
                      evl, egn);
            CHECK_MSG(dstep < tp, "%s: the parameter change differs by %.3g", nm, dstep);
        } else {   /* trajectories parted: statistics of the same policy on other samples */
            CHECK_NEAR(m[k].entropy, m[0].entropy, 0, 1e-2);
            CHECK_MSG(evl < 0.3 && egn < 0.3, "%s: value loss %.3g, grad norm %.3g", nm, evl, egn);
            CHECK_MSG(dstep < 0.7, "%s: the update went elsewhere (relative difference %.3g)", nm, dstep);
        }
        CHECK(m[k].skipped_steps == 0 && m[k].nonfinite == 0);
        CHECK(m[k].loss_scale == (k == MR_FP16 ? 65536.0 : 1.0));
    }
done:
    for (int k = 0; k < 3; k++) {
        if (t[k] && dp[k]) roll_free(&r[k]);
        free(dp[k]);
        mr_trainer_free(t[k]);
    }
}

/* ================================================================ 6. failures */

static void small_config(mr_config *c) {
    base_config(c, MR_MODE_GROUND_TRUTH, 1);
    c->env.num_envs = 8;
    c->ppo.rollout_steps = 4;
}

static void test_failures(void) {
    mr_config cfg;
    small_config(&cfg);
    cfg.cuda.graphs = 0;   /* every update kernel by kernel; failures with graphs: test 8 */
    mr_error e;
    /* creation: every operation made to fail in turn; nothing is left behind */
    const int nseg = E.dev.nseg, pseg = E.pin.nseg;
    long n_create = 0;
    {
        const long o0 = E.ops;
        mr_trainer *t = make_gpu(&cfg, &emu_table);
        n_create = E.ops - o0;
        mr_trainer_free(t);
    }
    int create_ok = 0;
    for (long k = 0; k < n_create; k++) {
        mr_trainer *t = (mr_trainer *)1;
        E.fail_at = E.ops + k;
        const mr_status s = mr_trainer_cuda_create_ops(&cfg, &emu_table, &t, &e);
        E.fail_at = -1;
        create_ok += s != MR_OK && t == NULL && strstr(e.msg, "injected fault") != NULL;
        if (s == MR_OK) mr_trainer_free(t);
        CHECK(E.dev.nseg == nseg && E.pin.nseg == pseg && E.streams == 0 && E.events == 0);
    }
    CHECK_MSG(create_ok == n_create, "creation: %d of %ld injected faults reported", create_ok, n_create);

    /* an update: every operation made to fail in turn */
    mr_trainer *t = make_gpu(&cfg, &emu_table), *ref = make_gpu(&cfg, &emu_table);
    if (!t || !ref) goto done;
    char pa[160], pbroken[160];
    const char *A = tmp_path(pa, "fault.mrck"), *broken = tmp_path(pbroken, "broken.mrck");
    if (update(t, NULL) != MR_OK || save(t, A) != MR_OK || load(ref, A) != MR_OK) goto done;
    const long o0 = E.ops;
    if (update(ref, NULL) != MR_OK) goto done;
    const long n_update = E.ops - o0;
    pull_all(ref);
    int reported = 0, refused = 0, unsaved = 0, recovered = 0;
    for (long k = 0; k < n_update; k++) {
        E.fail_at = E.ops + k;
        mr_status s = mr_trainer_update(t, NULL, &e);
        E.fail_at = -1;
        if (s == MR_ERR_BACKEND && strstr(e.msg, "injected fault") && strstr(e.msg, "the trainer stops")) reported++;
        else CHECK_MSG(0, "fault at operation %ld of an update: status %d, %s", k, (int)s, e.msg);
        s = mr_trainer_update(t, NULL, &e);
        if (s == MR_ERR_STATE && strstr(e.msg, "failed update") && strstr(e.msg, "load a checkpoint")) refused++;
        s = mr_trainer_save(t, broken, &e);
        if (s == MR_ERR_STATE && access(broken, F_OK) != 0) unsaved++;
        if (load(t, A) != MR_OK) break;
        if ((k % 8) == 0 || k == n_update - 1) {   /* the recovered trainer continues as one that never failed */
            if (update(t, NULL) != MR_OK) break;
            const int same = state_equal(t, ref);
            CHECK_MSG(same, "after a fault at operation %ld of %ld (%s) and a reload, the next update differs", k,
                      n_update, E.failed_op);
            recovered += same;
            if (load(t, A) != MR_OK) break;
        } else {
            recovered++;
        }
    }
    printf("  failures: %ld operations of creation and %ld of an update each made to fail: %d reported, %d "
           "refused the next update, %d refused to save, %d recovered from the checkpoint\n",
           n_create, n_update, reported, refused, unsaved, recovered);
    CHECK(reported == n_update && refused == n_update && unsaved == n_update && recovered == n_update);
done:
    mr_trainer_free(t);
    mr_trainer_free(ref);
    CHECK(E.dev.nseg == nseg && E.streams == 0 && E.events == 0);
}

/* ================================================================ 8. CUDA graphs */

/* The emulation itself: a capture records and runs nothing; a replay reads
 * memory as it is then; what a capture refuses fails and invalidates it. */
static void test_graph_emulation(void) {
    mr_error e;
    const char *why = NULL;
    void *st = NULL, *ev = NULL, *ev0 = NULL, *g = NULL;
    float *d = mem_alloc(&E.dev, 64 * sizeof(float), &why), *h = mem_alloc(&E.pin, 16 * sizeof(float), &why);
    float pageable[16] = {0};
    if (!d || !h || e_stream_create(&st, &e) != MR_OK || e_event_create(&ev, &e) != MR_OK ||
        e_event_create(&ev0, &e) != MR_OK) {
        CHECK_MSG(0, "emulation set-up failed");
        goto done;
    }
    for (int i = 0; i < 64; i++) d[i] = -1.0f;
    for (int i = 0; i < 16; i++) h[i] = 1.0f;
    const long copies = E.executed[R_COPY], diffs = E.executed[R_DIFF];
    CHECK(e_graph_begin(st, &e) == MR_OK);
    CHECK(e_copy(d, h, 16 * sizeof(float), MR_COPY_H2D, st, &e) == MR_OK);   /* a copy node from pinned memory */
    CHECK(e_diff(d, d + 16, d + 32, 16, st, &e) == MR_OK);
    CHECK(e_event_record(ev, st, &e) == MR_OK);                             /* no node */
    CHECK(e_graph_end(st, 0, &g, &e) == MR_OK && g != NULL);
    CHECK_MSG(d[0] == -1.0f && d[32] == -1.0f && E.executed[R_COPY] == copies, "a capture ran its operations");
    h[0] = 5.0f;
    d[16] = 2.0f;
    CHECK(e_graph_launch(g, st, &e) == MR_OK && d[0] == 5.0f && d[32] == 3.0f);
    h[0] = 7.0f;   /* pinned memory is read when the graph runs */
    CHECK(e_graph_launch(g, st, &e) == MR_OK && d[0] == 7.0f && d[32] == 5.0f);
    CHECK(E.executed[R_COPY] == copies + 2 && E.executed[R_DIFF] == diffs + 2);
    /* the event recorded in the capture stands for nothing a replay does */
    float ms = 0.0f;
    CHECK(e_event_record(ev0, st, &e) == MR_OK);
    CHECK(e_event_elapsed(ev0, ev, &ms, &e) != MR_OK && e_event_sync(ev, &e) != MR_OK);
    CHECK(e_event_record(ev, st, &e) == MR_OK && e_event_elapsed(ev0, ev, &ms, &e) == MR_OK && ms >= 0.0f);
    /* refused while capturing; the capture is invalidated and ends in an error */
    for (int k = 0; k < 4; k++) {
        void *g2 = NULL;
        CHECK(e_graph_begin(st, &e) == MR_OK);
        mr_status s = MR_OK;
        if (k == 0) s = e_copy(d, pageable, sizeof pageable, MR_COPY_H2D, st, &e);
        if (k == 1) s = e_stream_sync(st, &e);
        if (k == 2) s = e_event_sync(ev0, &e);
        if (k == 3) s = mem_alloc(&E.dev, 64, &why) != NULL ? MR_OK : MR_ERR_NOMEM;
        CHECK_MSG(s != MR_OK, "refusal %d: allowed during a capture", k);
        CHECK(e_copy(d, h, sizeof(float), MR_COPY_H2D, st, &e) == MR_OK);   /* recorded regardless */
        s = e_graph_end(st, 0, &g2, &e);
        CHECK_MSG(s != MR_OK && g2 == NULL && strstr(e.msg, "invalidated"), "refusal %d: graph_end: %s", k, e.msg);
    }
    /* a discarded capture: nothing ran, and the stream runs operations again */
    d[0] = -1.0f;
    CHECK(e_graph_begin(st, &e) == MR_OK);
    CHECK(e_copy(d, h, sizeof(float), MR_COPY_H2D, st, &e) == MR_OK);
    CHECK(e_graph_end(st, 1, NULL, NULL) == MR_OK && d[0] == -1.0f && E.capture == NULL);
    CHECK(e_copy(d, h, sizeof(float), MR_COPY_H2D, st, &e) == MR_OK && d[0] == 7.0f);
    CHECK(e_graph_begin(st, &e) == MR_OK && e_graph_begin(st, &e) != MR_OK);   /* one capture at a time */
    CHECK(e_graph_end(st, 1, NULL, NULL) == MR_OK);
done:
    e_graph_destroy(g);
    e_event_destroy(ev);
    e_event_destroy(ev0);
    e_stream_destroy(st);
    if (d) mem_free(&E.dev, d);
    if (h) mem_free(&E.pin, h);
    CHECK(E.graphs == 0 && E.capture == NULL);
}

/* What one update of a CUDA trainer leaves behind besides its state. */
typedef struct upd {
    mr_metrics m;
    mr_optctl opt;             /* the device's control blocks after it: hyper-parameters as uploaded, loss scale, */
    mr_lossctl loss;           /* growth tracker, Adam step, loss statistics */
    long executed[R_COUNT];    /* queued operations that ran, by kind */
    long event_records;
    int graphs_used;
} upd;

static mr_status run_update(mr_trainer *t, upd *u) {
    long ex0[R_COUNT];
    memcpy(ex0, E.executed, sizeof ex0);
    const long ev0 = E.event_records;
    E.seen_opt = NULL;
    E.seen_loss = NULL;
    memset(u, 0, sizeof *u);
    const mr_status s = update(t, &u->m);
    for (int k = 0; k < R_COUNT; k++) u->executed[k] = E.executed[k] - ex0[k];
    u->event_records = E.event_records - ev0;
    if (E.seen_opt) u->opt = *E.seen_opt;
    if (E.seen_loss) u->loss = *E.seen_loss;
    u->graphs_used = mr_trainer_cuda_graphs_used(t, NULL);
    return s;
}

/* Metrics but the times, bit for bit (every field before nonfinite is 8 bytes wide: no padding). */
static int metrics_bits_equal(const mr_metrics *a, const mr_metrics *b) {
    return memcmp(a, b, offsetof(mr_metrics, nonfinite)) == 0 && a->nonfinite == b->nonfinite &&
           a->memory_planned_bytes == b->memory_planned_bytes && a->memory_peak_bytes == b->memory_peak_bytes &&
           a->memory_limit_bytes == b->memory_limit_bytes;
}

static int rollouts_equal(mr_trainer *a, mr_trainer *b) {
    roll x, y;
    roll_read(a, &x);
    roll_read(b, &y);
    const size_t B = (size_t)a->B, N = (size_t)a->N;
    const int same = bits_equal(x.obs, y.obs, B * (size_t)a->VV) && bits_equal(x.act, y.act, B) &&
                     bits_equal(x.done, y.done, B) && bits_equal(x.extra, y.extra, B * 8) &&
                     bits_equal(x.logp, y.logp, B * 4) && bits_equal(x.val, y.val, B * 4) &&
                     bits_equal(x.rew, y.rew, B * 4) && bits_equal(x.adv, y.adv, B * 4) &&
                     bits_equal(x.ret, y.ret, B * 4) && bits_equal(x.last_value, y.last_value, N * 4);
    roll_free(&x);
    roll_free(&y);
    return same;
}

/* An update of g (graphs) and of e (eager), from the same state: the same
 * bits everywhere, and the same operations ran. */
static void same_as_eager(const char *label, mr_trainer *g, const upd *ug, mr_trainer *e, const upd *ue) {
    CHECK_MSG(metrics_bits_equal(&ug->m, &ue->m), "%s: the metrics differ (policy loss %.9g vs %.9g)", label,
              ug->m.policy_loss, ue->m.policy_loss);
    CHECK_MSG(bits_equal(&ug->opt, &ue->opt, sizeof ug->opt) && bits_equal(&ug->loss, &ue->loss, sizeof ug->loss),
              "%s: the optimizer or loss control block differs (lr %.9g vs %.9g, loss scale %g vs %g)", label,
              ug->opt.h.lr, ue->opt.h.lr, (double)ug->opt.s.loss_scale, (double)ue->opt.s.loss_scale);
    long ng = 0, ne = 0;
    for (int k = 0; k < R_COUNT; k++) {
        ng += ug->executed[k];
        ne += ue->executed[k];
    }
    CHECK_MSG(bits_equal(ug->executed, ue->executed, sizeof ug->executed) && ug->event_records == ue->event_records,
              "%s: %ld operations and %ld event records ran, eagerly %ld and %ld", label, ng, ug->event_records, ne,
              ue->event_records);
    CHECK_MSG(rollouts_equal(g, e), "%s: the rollouts differ", label);
    pull_all(e);
    CHECK_MSG(state_equal(g, e), "%s: the states differ", label);
}

/* Hot parameters changed before update u (as a host would), each of them. */
static void vary_hot(mr_trainer *t, int u) {
    mr_hot_params h;
    mr_error e;
    CHECK(mr_trainer_get_hot(t, &h, &e) == MR_OK);
    h.lr.start = 1e-3 * u;
    h.clip.start = 0.1 + 0.02 * u;
    h.ent_coef.start = 0.01 * u;
    h.max_grad_norm = 0.2 + 0.1 * u;
    h.vf_coef = 0.4 + 0.1 * u;
    h.ent_floor = u % 2 ? 2.2 : 0.0;
    h.ent_floor_coef = 0.05 * u;
    h.total_steps = (uint64_t)t->B * (uint64_t)(5 + u);
    CHECK(mr_trainer_set_hot(t, &h, &e) == MR_OK);
}

#define NGRAPHS 3   /* trainer_cuda.c records an update as three graphs */

/* base_config's at a quarter of the batch (16 envs x 8 steps, 2 minibatches
 * of 64): the comparisons are bit for bit, the size does not matter. */
static void graph_config(mr_config *c, int precision) {
    base_config(c, MR_MODE_GROUND_TRUTH, 1);
    c->env.num_envs = 16;
    c->ppo.rollout_steps = 8;
    c->total_steps = 16 * 8 * 6;
    c->precision = precision;
}

/* 6 updates with graphs and without, from the same creation: the schedules
 * move every update, the hot parameters change between updates, PopArt, 2
 * minibatches; in fp16 the loss scale is set on the device between updates
 * (update 3 overflows every step and backs off). */
static void graphs_against_eager(const char *name, int precision) {
    mr_config cfg, off;
    graph_config(&cfg, precision);
    off = cfg;
    off.cuda.graphs = 0;
    mr_trainer *g = make_gpu(&cfg, &emu_table), *e = make_gpu(&off, &emu_table);
    char label[128];
    mr_error er;
    if (!g || !e) goto done;
    const long cap0 = E.captures, rep0 = E.replays;
    for (int u = 1; u <= 6; u++) {
        if (u > 1) {
            vary_hot(g, u);
            vary_hot(e, u);
        }
        if (precision == MR_FP16 && (u == 3 || u == 4)) {
            const float sc = u == 3 ? 1e30f : 4096.0f;
            CHECK(mr_trainer_cuda_set_loss_scale(g, sc, &er) == MR_OK &&
                  mr_trainer_cuda_set_loss_scale(e, sc, &er) == MR_OK);
        }
        upd ug, ue;
        if (run_update(g, &ug) != MR_OK || run_update(e, &ue) != MR_OK) break;
        snprintf(label, sizeof label, "%s, update %d", name, u);
        same_as_eager(label, g, &ug, e, &ue);
        CHECK_MSG(ug.graphs_used == (u > 1) && ue.graphs_used == 0, "%s: graphs used %d (eager %d)", label,
                  ug.graphs_used, ue.graphs_used);
        /* the phases' events are recorded between the graphs, not inside (no node there) */
        CHECK_MSG(ug.m.time_rollout > 0.0 && ug.m.time_gae > 0.0 && ug.m.time_update > 0.0,
                  "%s: timings rollout %g, gae %g, update %g", label, ug.m.time_rollout, ug.m.time_gae,
                  ug.m.time_update);
        if (precision == MR_FP16 && u == 3)
            CHECK_MSG(ug.m.skipped_steps >= 4 && ug.m.loss_scale < 1e30, "%s: skipped %llu, scale %g", label,
                      (unsigned long long)ug.m.skipped_steps, ug.m.loss_scale);
    }
    CHECK_MSG(E.captures - cap0 == NGRAPHS && E.replays - rep0 == 5 * NGRAPHS,
              "%s: %ld graphs recorded, %ld replayed (expected %d, %d)", name, E.captures - cap0, E.replays - rep0,
              NGRAPHS, 5 * NGRAPHS);
    printf("  %s: 6 updates with graphs bit-identical to 6 without; %ld graphs recorded, %ld replays\n", name,
           E.captures - cap0, E.replays - rep0);
done:
    mr_trainer_free(g);
    mr_trainer_free(e);
}

static void test_graphs_vs_eager(void) {
    graphs_against_eager("graphs vs eager, fp32", MR_FP32);
    graphs_against_eager("graphs vs eager, fp16", MR_FP16);
}

/* A checkpoint of another run (another seed) loaded into a trainer that has
 * recorded its graphs: it records them again and goes on as the eager path,
 * bit for bit; the checkpoint's own run, replaying its graphs, too. Then
 * snapshot / restore. */
static void test_graph_checkpoints(void) {
    mr_config cfg, other, other_off;
    graph_config(&cfg, MR_FP32);
    other = cfg;
    other.seed = 8;
    other_off = other;
    other_off.cuda.graphs = 0;
    mr_trainer *a = make_gpu(&cfg, &emu_table), *g = make_gpu(&other, &emu_table);
    mr_trainer *e = make_gpu(&other_off, &emu_table);
    char pa[160], label[96];
    const char *A = tmp_path(pa, "graphs.mrck");
    mr_error er;
    if (!a || !g || !e) goto done;
    if (update(a, NULL) != MR_OK || update(a, NULL) != MR_OK || save(a, A) != MR_OK) goto done;
    if (update(g, NULL) != MR_OK || update(g, NULL) != MR_OK) goto done;
    CHECK(mr_trainer_cuda_graphs_used(a, NULL) == 1 && mr_trainer_cuda_graphs_used(g, NULL) == 1);
    if (load(g, A) != MR_OK || load(e, A) != MR_OK) goto done;
    for (int u = 1; u <= 3; u++) {
        upd ua, ug, ue;
        const long cap0 = E.captures;
        if (run_update(g, &ug) != MR_OK || run_update(e, &ue) != MR_OK || run_update(a, &ua) != MR_OK) break;
        snprintf(label, sizeof label, "checkpoint of seed 7 into a graphs trainer of seed 8, update %d", u);
        CHECK_MSG(ug.graphs_used == 1 && ua.graphs_used == 1, "%s: graphs not used", label);
        CHECK_MSG(E.captures - cap0 == (u == 1 ? NGRAPHS : 0), "%s: %ld graphs recorded", label, E.captures - cap0);
        same_as_eager(label, g, &ug, e, &ue);
        snprintf(label, sizeof label, "the checkpoint's own run, update %d", u);
        same_as_eager(label, a, &ua, e, &ue);
    }
    /* snapshot, an update, restore: the next updates as eager */
    CHECK(mr_trainer_snapshot(g, &er) == MR_OK && mr_trainer_snapshot(e, &er) == MR_OK);
    for (int u = 1; u <= 3; u++) {
        if (u == 3) CHECK(mr_trainer_restore(g, &er) == MR_OK && mr_trainer_restore(e, &er) == MR_OK);
        upd ug, ue;
        if (run_update(g, &ug) != MR_OK || run_update(e, &ue) != MR_OK) break;
        snprintf(label, sizeof label, "snapshot / restore, update %d", u);
        same_as_eager(label, g, &ug, e, &ue);
        CHECK(ug.graphs_used == 1);
    }
done:
    mr_trainer_free(a);
    mr_trainer_free(g);
    mr_trainer_free(e);
}

/* Failures with graphs. Every operation of the recording (capture) made to
 * fail in turn: the update still succeeds, kernel by kernel, bit for bit as
 * eager; graphs are not used again and the description says why. Every
 * operation of a replayed update made to fail in turn: the update fails, the
 * trainer refuses to go on, and a checkpoint load recovers it (its graphs
 * recorded again). */
static void test_graph_failures(void) {
    mr_config cfg, off;
    small_config(&cfg);
    off = cfg;
    off.cuda.graphs = 0;
    mr_error er;
    char pa[160], pb[160];
    const char *A = tmp_path(pa, "graph_fault.mrck"), *broken = tmp_path(pb, "graph_broken.mrck");
    mr_trainer *r2 = make_gpu(&off, &emu_table), *r3 = make_gpu(&off, &emu_table), *t = NULL, *ref = NULL;
    if (!r2 || !r3) goto done;
    /* the recording update's capture: operations [lo, hi] of update 2 */
    long lo = -1, hi = -1;
    {
        mr_trainer *d = make_gpu(&cfg, &emu_table);
        if (d && update(d, NULL) == MR_OK) {
            const long o0 = E.ops;
            E.cap_first = E.cap_last = -1;
            if (update(d, NULL) == MR_OK && E.cap_first >= o0) {
                lo = E.cap_first - o0;
                hi = E.cap_last - o0;
            }
        }
        mr_trainer_free(d);
    }
    CHECK_MSG(lo >= 0 && hi > lo, "no capture found in the second update");
    if (lo < 0 || update(r2, NULL) != MR_OK || update(r2, NULL) != MR_OK) goto done;
    for (int u = 0; u < 3; u++)
        if (update(r3, NULL) != MR_OK) goto done;
    pull_all(r2);
    pull_all(r3);
    int fell_back = 0, said = 0, same = 0, stayed = 0;
    const double t_cap = host_ms();
    for (long k = lo; k <= hi; k++) {
        mr_trainer *c = make_gpu(&cfg, &emu_table);
        if (!c || update(c, NULL) != MR_OK) {
            mr_trainer_free(c);
            break;
        }
        E.fail_at = E.ops + k;
        mr_metrics m;
        const mr_status s = mr_trainer_update(c, &m, &er);
        E.fail_at = -1;
        const char *why = NULL;
        const int used = mr_trainer_cuda_graphs_used(c, &why);
        fell_back += s == MR_OK && used == 0;
        said += strstr(mr_trainer_describe(c), "recording the update failed") != NULL &&
                strstr(mr_trainer_describe(c), "injected fault") != NULL && why && strstr(why, "injected fault");
        const int eq = s == MR_OK && state_equal(c, r2);
        CHECK_MSG(eq, "a fault at operation %ld of the recording update (%s): status %d, not as eager", k, E.failed_op,
                  (int)s);
        same += eq;
        if (s == MR_OK && (k - lo) % 4 == 0) {   /* and kernel by kernel from then on */
            stayed += update(c, NULL) == MR_OK && mr_trainer_cuda_graphs_used(c, NULL) == 0 && state_equal(c, r3);
        } else {
            stayed++;
        }
        mr_trainer_free(c);
    }
    const long n_cap = hi - lo + 1;
    if (verbose) printf("    (graph failures, recording: %.2f s)\n", 1e-3 * (host_ms() - t_cap));
    printf("  graph failures: %ld operations of the recording made to fail: %d fell back, %d described, %d as "
           "eager, %d stayed eager\n", n_cap, fell_back, said, same, stayed);
    CHECK(fell_back == n_cap && said == n_cap && same == n_cap && stayed == n_cap);

    /* replay: t at A + 1 update with its graphs; ref = A + 1 update, eager */
    t = make_gpu(&cfg, &emu_table);
    ref = make_gpu(&off, &emu_table);
    if (!t || !ref || update(t, NULL) != MR_OK || save(t, A) != MR_OK || load(ref, A) != MR_OK) goto done;
    if (update(ref, NULL) != MR_OK || update(t, NULL) != MR_OK) goto done;
    pull_all(ref);
    const long o1 = E.ops;
    if (update(t, NULL) != MR_OK) goto done;
    const long n_rep = E.ops - o1;   /* the operations of a replayed update */
    if (load(t, A) != MR_OK || update(t, NULL) != MR_OK) goto done;
    int reported = 0, refused = 0, unsaved = 0, recovered = 0;
    for (long k = 0; k < n_rep; k++) {
        CHECK(mr_trainer_cuda_graphs_used(t, NULL) == 1);
        E.fail_at = E.ops + k;
        mr_status s = mr_trainer_update(t, NULL, &er);
        E.fail_at = -1;
        if (s == MR_ERR_BACKEND && strstr(er.msg, "injected fault") && strstr(er.msg, "the trainer stops")) reported++;
        else CHECK_MSG(0, "fault at operation %ld of a replayed update: status %d, %s", k, (int)s, er.msg);
        s = mr_trainer_update(t, NULL, &er);
        refused += s == MR_ERR_STATE && strstr(er.msg, "load a checkpoint") != NULL;
        s = mr_trainer_save(t, broken, &er);
        unsaved += s == MR_ERR_STATE && access(broken, F_OK) != 0;
        if (load(t, A) != MR_OK || update(t, NULL) != MR_OK) break;
        const int eq = mr_trainer_cuda_graphs_used(t, NULL) == 1 && state_equal(t, ref);
        CHECK_MSG(eq, "after a fault at operation %ld of %ld of a replayed update (%s) and a reload, the next update "
                  "differs", k, n_rep, E.failed_op);
        recovered += eq;
    }
    printf("  graph failures: %ld operations of a replayed update made to fail: %d reported, %d refused the next "
           "update, %d refused to save, %d recovered from the checkpoint\n", n_rep, reported, refused, unsaved,
           recovered);
    CHECK(n_rep > 0 && reported == n_rep && refused == n_rep && unsaved == n_rep && recovered == n_rep);
    CHECK(strstr(mr_trainer_describe(t), "recording the update failed") == NULL);
done:
    mr_trainer_free(r2);
    mr_trainer_free(r3);
    mr_trainer_free(t);
    mr_trainer_free(ref);
}

/* Profiling events around every rollout step: those updates run kernel by
 * kernel; off again, the graphs recorded before are replayed. */
static void test_graph_profile(void) {
    mr_config cfg, off;
    graph_config(&cfg, MR_FP32);
    off = cfg;
    off.cuda.graphs = 0;
    mr_trainer *g = make_gpu(&cfg, &emu_table), *e = make_gpu(&off, &emu_table);
    mr_error er;
    char label[64];
    if (!g || !e) goto done;
    for (int u = 1; u <= 5; u++) {
        const int prof = u == 3 || u == 4;
        CHECK(mr_trainer_cuda_set_profile(g, prof, &er) == MR_OK && mr_trainer_cuda_set_profile(e, prof, &er) == MR_OK);
        upd ug, ue;
        const long cap0 = E.captures;
        if (run_update(g, &ug) != MR_OK || run_update(e, &ue) != MR_OK) break;
        snprintf(label, sizeof label, "profiling, update %d", u);
        same_as_eager(label, g, &ug, e, &ue);
        CHECK_MSG(ug.graphs_used == (u > 1 && !prof), "%s: graphs used %d", label, ug.graphs_used);
        CHECK_MSG(E.captures - cap0 == (u == 2 ? NGRAPHS : 0), "%s: %ld graphs recorded", label, E.captures - cap0);
        mr_tc_timing tm;
        CHECK(mr_trainer_cuda_timing(g, &tm, &er) == MR_OK);
        CHECK_MSG(prof ? tm.env > 0.0 && tm.inference > 0.0 : tm.env == 0.0 && tm.inference == 0.0,
                  "%s: env %g, inference %g", label, tm.env, tm.inference);
    }
done:
    mr_trainer_free(g);
    mr_trainer_free(e);
}

static void test_graphs(void) {
    static const struct { const char *name; void (*fn)(void); } parts[] = {
        {"emulation", test_graph_emulation}, {"vs eager", test_graphs_vs_eager},
        {"checkpoints", test_graph_checkpoints}, {"failures", test_graph_failures}, {"profiling", test_graph_profile},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const double t0 = host_ms();
        parts[i].fn();
        if (verbose) printf("    (graphs, %s: %.2f s)\n", parts[i].name, 1e-3 * (host_ms() - t0));
    }
    CHECK(E.graphs == 0 && E.capture == NULL);
}

/* ================================================================ 7. the real GPU */

static void test_gpu(void) {
    const mr_tc_ops *ops = mr_tc_cuda_ops();
    if (!ops || mr_cuda_device_count() <= 0) {
        printf("  GPU comparison: skipped: no GPU\n");
        return;
    }
    /* cuBLAS sums in other orders and the GPU's expf / logf differ from
     * glibc's in the last bit, so an action may go another way where its
     * uniform lies on a boundary (compare_rollout). */
    mr_config cfg;
    base_config(&cfg, MR_MODE_GROUND_TRUTH, 1);
    run_against_cpu("GPU, ground truth, PopArt", &cfg, ops, 2, 0);
    base_config(&cfg, MR_MODE_PROXY, 0);
    run_against_cpu("GPU, proxy, no PopArt", &cfg, ops, 2, 1);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--verbose") == 0) verbose = 1;
    emu_init();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moonrl_test_cuda_trainer_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    static const struct { const char *name; void (*fn)(void); } tests[] = {
        {"against the cpu trainer", test_against_cpu}, {"checkpoints, snapshots", test_checkpoints},
        {"steady state", test_steady_state}, {"out of memory", test_oom}, {"loss scaling", test_loss_scale},
        {"non-finite", test_nonfinite},
        {"precisions", test_precisions}, {"failures", test_failures}, {"graphs", test_graphs}, {"gpu", test_gpu},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const double t0 = host_ms();
        tests[i].fn();
        printf("  (%s: %.2f s)\n", tests[i].name, 1e-3 * (host_ms() - t0));
    }
    CHECK_MSG(E.violations == 0, "emulated GPU: %ld bad arguments, the first: %s", E.violations, E.first_violation);
    CHECK(E.pe.bad_args == 0 && E.dev.bad_frees == 0 && E.pin.bad_frees == 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_cuda_trainer");
}

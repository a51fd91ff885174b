/*
 * policy_check.h - what the CUDA policy's tests (test_cuda_policy_*.c) share:
 * the CPU reference network (src/engine/policy.c's mr_policy, run forward and
 * backward onto non-zero gradients), the random inputs and parameters, the
 * schedule of kernels/policy_math.h run on the CPU through pc_emu.h's
 * emulator (emu_net), the comparison of two runs item by item (every output,
 * activation and parameter gradient: net_compare / cmp_cpu) with its
 * per-precision tolerances, and, in a CUDA build, the device helpers of the
 * GPU halves (gpu_open / gpu_close, up / down, OK).
 *
 * Each program starts with policy_check_init(argc, argv): the seed every
 * program of the family draws from (MOONRL_TEST_SEED=n draws other inputs)
 * and --verbose (every compared item's error).
 */
#ifndef MR_POLICY_CHECK_H
#define MR_POLICY_CHECK_H
#include "check.h"
#include "policy.h"
#include "policy_cfg.h"
#include "nn.h"
#include "arena.h"
#include "policy_math.h"
#include "pc_emu.h"
#ifdef MOONRL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "devmem_cuda.h"
#include "policy_cuda.h"
#endif

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NA MR_MAX_ACTIONS

static int verbose;   /* --verbose: every compared item's error */

/* The programs were one, test_cuda_policy, drawing every input from one
 * stream in this order: formats, layers, network, fault injection, then the
 * GPU part (layers, network). Each part starts where it started there - so
 * many numbers into the stream (check.h's urand is a counter: a position is
 * a sum) - and sees the very inputs its tolerances were measured on, under
 * every MOONRL_TEST_SEED. (The fault injection's detection of a bias sum
 * missing one column in seven depends on the draw: a few seeds give a
 * column whose sum is zero.) */
#define PC_AT_FORMATS 0ull
#define PC_AT_LAYERS 1000000ull          /* test_formats drew a million floats (with _Float16) */
#define PC_AT_NET 2598303ull
#define PC_AT_FAULTS 24721162ull
#define PC_AT_GPU_LAYERS 24753217ull
#define PC_AT_GPU_NET (PC_AT_GPU_LAYERS + 716180ull)   /* gpu_layers' frand draws */
static uint64_t policy_check_seed;
static inline void policy_check_at(uint64_t draws) {
    check_rng_state = policy_check_seed + draws * 0x9E3779B97F4A7C15ull;
}

static inline void policy_check_init(int argc, char **argv) {
    check_seed(0x0badc0ffee123457ull);
    const char *seed = getenv("MOONRL_TEST_SEED");   /* a different random draw of every test input */
    if (seed) check_rng_state ^= strtoull(seed, NULL, 10) * 0x9e3779b97f4a7c15ull;
    policy_check_seed = check_rng_state;
    for (int i = 1; i < argc; i++) verbose |= strcmp(argv[i], "--verbose") == 0;
}

/* ================================================================ helpers */

/* Relative 2-norm error ||a - b|| / max(||b||, floor); NaN propagates. The
 * reduced-precision checks use it: there a pre-activation within rounding of
 * 0 flips its ReLU, which changes a few rows of a weight gradient by a
 * sample's share - a large but sparse difference that is no error, which the
 * max norm would report at full size and the 2-norm weighs by its extent. */
static inline double relerr2(const float *a, const float *b, size_t n, double floor) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    den = sqrt(den);
    return sqrt(num) / (den > floor ? den : floor);
}

/* (rows, cols) of a T matrix with leading dimension ld -> dense fp32 */
static inline float *gather(const void *src, int dt, int rows, int cols, int ld, int col0) {
    float *o = malloc(sizeof(float) * ((size_t)rows * cols + 1));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) o[(size_t)r * cols + c] = mr_pc_ld(src, (size_t)r * ld + col0 + c, dt);
    return o;
}

static inline const char *prec_name(int dt) { return dt == MR_FP32 ? "fp32" : dt == MR_BF16 ? "bf16" : "fp16"; }

/* Tolerances. Against the fp32 CPU policy: fp32 the task's bound (max
 * norm; measured below 1e-6). bf16 / fp16 (2-norm): the GEMM inputs and the
 * stored activations carry 8 / 11 significant bits; over 12 random draws the
 * emulated schedule's outputs and activations differ by at most 0.011 /
 * 0.0011, its gradients by at most 0.36 / 0.11 - at these small batches the
 * early layers' and the biases' gradients are sums with much cancellation,
 * and a few ReLUs flip. So the whole-network reduced-precision bounds catch
 * a wrong forward sharply but a wrong gradient only when it is grossly
 * wrong. Nor can a whole reduced-precision network be compared sharply with
 * its emulation: a difference in the last fp32 bit (a GPU's summation
 * order) moves some roundings by an ulp, and those cascade through the
 * layers (measured: parameters moved by 4 ulps change the reference net's
 * bf16 gradients by ~4e-2 at B = 10). The sharp reduced-precision check is
 * per layer (lp_layers): each layer recomputed from the run's own stored
 * inputs, where only that layer's last-bit differences remain: tol_layer. */
static inline double tol_fwd(int dt) { return dt == MR_FP32 ? 1e-4 : dt == MR_BF16 ? 3e-2 : 4e-3; }
static inline double tol_grad(int dt) { return dt == MR_FP32 ? 1e-4 : dt == MR_BF16 ? 0.6 : 0.25; }
/* tol_layer: one unit in the last place of the layer's output type (bf16
 * 2^-8, fp16 2^-11, as a 2-norm relative error): the GPU's fp32 sums run in
 * another order than the emulation's, and a sum that differs in its last
 * fp32 bits rounds to the neighbouring bf16 / fp16 value. Measured on an
 * H100 (2026-11-25): fc forward 2.6e-3 (bf16), 3.2e-4 (fp16); 1e-3 / 2e-4,
 * the bounds before a GPU ran, failed there. */
static inline double tol_layer(int dt) { return dt == MR_FP32 ? 1e-4 : dt == MR_BF16 ? 4e-3 : 5e-4; }


static inline void small_cfg(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->num_conv = 2;
    c->conv_channels[0] = 4;
    c->conv_channels[1] = 8;
    c->hidden = 16;
    c->critic_hidden = 12;
    c->popart = 1;
}

/* ================================================================ CPU reference */

typedef struct ref_net {
    mr_policy p;
    mr_arena a;
    float *logits, *value;
    float *g0;   /* the gradients before backward: a scaled, permuted copy of the true ones */
} ref_net;

static inline int ref_make(ref_net *r, const mr_policy_config *cfg, int view, int max_batch, int chunk) {
    memset(r, 0, sizeof *r);
    /* im2col: the reference the CUDA network is held to (both are im2col + GEMM) */
    mr_policy_layout(&r->p, cfg, view, max_batch, chunk, MR_CPU_CONV_IM2COL, &r->a);
    if (mr_arena_commit(&r->a) != 0) return 0;
    mr_policy_layout(&r->p, cfg, view, max_batch, chunk, MR_CPU_CONV_IM2COL, &r->a);
    r->logits = malloc(sizeof(float) * ((size_t)max_batch * NA + 1));
    r->value = malloc(sizeof(float) * ((size_t)max_batch + 1));
    r->g0 = malloc(sizeof(float) * r->p.n_params);
    return r->p.params != NULL;
}
static inline void ref_free(ref_net *r) {
    mr_arena_release(&r->a);
    free(r->logits);
    free(r->value);
    free(r->g0);
}

/* weights uniform with std ~ 1.5/sqrt(fan_in), biases in +-0.2: about half
 * the units of every layer active, so every ReLU path is exercised */
static inline void random_params(mr_policy *p) {
    for (int i = 0; i < p->n_tensors; i++) {
        const mr_tensor_info *t = &p->tensors[i];
        float *w = p->params + t->offset;
        if (t->ndim == 1) {
            for (size_t k = 0; k < t->count; k++) w[k] = (float)(0.4 * urand() - 0.2);
        } else {
            const double fan = (double)(t->count / (size_t)t->shape[0]);
            const double a = 1.5 * sqrt(3.0 / fan);
            for (size_t k = 0; k < t->count; k++) w[k] = (float)(a * (2.0 * urand() - 1.0));
        }
    }
}

typedef struct inputs {
    int B;
    uint8_t *codes;
    float *extra, *dlogits, *dvalue;
} inputs;

/* codes for an observation of C channels: foraging's 0, 1, 2 (C = 2), or
 * 0 .. C one-hot; a few above C (they read as empty) */
static inline void inputs_make_c(inputs *in, int B, int VV, int C) {
    in->B = B;
    in->codes = malloc((size_t)B * VV + 1);
    for (size_t i = 0; i < (size_t)B * VV; i++) {
        const double u = urand();
        if (C == 2) in->codes[i] = u < 0.45 ? 0 : u < 0.7 ? 1 : u < 0.95 ? 2 : u < 0.975 ? 3 : 255;
        else in->codes[i] = u < 0.45 ? 0 : u < 0.95 ? (uint8_t)(1 + (int)((u - 0.45) / 0.5 * C)) : u < 0.975 ? C + 1
                                                                                                          : 255;
    }
    in->extra = frand((size_t)B * 2, -1.5, 1.5);
    in->dlogits = frand((size_t)B * NA, -1, 1);
    in->dvalue = frand((size_t)B, -1, 1);
}
static inline void inputs_make(inputs *in, int B, int VV) { inputs_make_c(in, B, VV, 2); }
/* A float image of C x VV per sample (policy obs_image), in `codes` (its
 * obs_row bytes a sample): a third of the pixels 0, the rest in -1 .. 1.5. */
static inline void inputs_make_image(inputs *in, int B, int VV, int C) {
    inputs_make_c(in, B, 1, 2);   /* extra, dlogits, dvalue as for codes */
    free(in->codes);
    float *img = malloc(sizeof(float) * ((size_t)B * C * VV + 1));
    for (size_t i = 0; i < (size_t)B * C * VV; i++) {
        const double u = urand();
        img[i] = u < 1.0 / 3 ? 0.0f : (float)(-1.0 + 2.5 * urand());
    }
    in->codes = (uint8_t *)img;
}
/* The inputs cfg's network takes: cell codes of C channels, or a float image. */
static inline void inputs_for(inputs *in, const mr_policy_config *cfg, int B, int VV) {
    const int C = cfg->obs_channels > 0 ? cfg->obs_channels : 2;
    if (cfg->obs_image) inputs_make_image(in, B, VV, C);
    else inputs_make_c(in, B, VV, C);
}
static inline void inputs_free(inputs *in) {
    free(in->codes);
    free(in->extra);
    free(in->dlogits);
    free(in->dvalue);
}

/* Forward, then backward onto g0 (so accumulation is checked too): g0 is
 * half the true gradient, permuted within each tensor, so it has the
 * gradient's scale without being proportional to it. */
static inline void ref_run(ref_net *r, const inputs *in, int proxy) {
    const mr_policy *p = &r->p;
    mr_policy_zero_grad(&r->p);
    CHECK(mr_policy_forward(&r->p, in->codes, in->extra, in->B, proxy, r->logits, r->value) == 0);
    CHECK(mr_policy_backward(&r->p, in->dlogits, in->dvalue, in->B) == 0);
    for (int t = 0; t < p->n_tensors; t++) {
        const mr_tensor_info *ti = &p->tensors[t];
        for (size_t k = 0; k < ti->count; k++)
            r->g0[ti->offset + k] = 0.5f * p->grads[ti->offset + (k * 7919 + 13) % ti->count];
    }
    memcpy(p->grads, r->g0, sizeof(float) * p->n_params);
    CHECK(mr_policy_backward(&r->p, in->dlogits, in->dvalue, in->B) == 0);
}

/* ================================================================ comparison */

/* What a run of the schedule left, in host memory: its workspace and the
 * outputs and gradients. */
typedef struct net_out {
    const unsigned char *ws;
    const float *logits, *value, *grads;
} net_out;

/* One side of a comparison: every compared tensor, of storage type dt. The
 * features are cin's first `hidden` columns on both sides. */
typedef struct net_view {
    int dt;
    const void *act[MR_MAX_CONV], *cin, *chid;
    const float *logits, *value, *grads;
} net_view;

static inline net_view view_cpu(const ref_net *r) {
    net_view v;
    memset(&v, 0, sizeof v);
    v.dt = MR_FP32;
    for (int l = 0; l < r->p.num_conv; l++) v.act[l] = r->p.act[l];
    v.cin = r->p.cin;
    v.chid = r->p.chid;
    v.logits = r->logits;
    v.value = r->value;
    v.grads = r->p.grads;
    return v;
}
static inline net_view view_out(const mr_pc_plan *pl, const net_out *o) {
    mr_pc_bufs bf;
    mr_pc_carve(pl, (unsigned char *)(uintptr_t)o->ws, &bf);
    net_view v;
    memset(&v, 0, sizeof v);
    v.dt = pl->dt;
    for (int l = 0; l < pl->net.num_conv; l++) v.act[l] = bf.act[l];
    v.cin = bf.cin;
    v.chid = bf.chid;
    v.logits = o->logits;
    v.value = o->value;
    v.grads = o->grads;
    return v;
}

/* Every output, activation and gradient of a against b (the reference), for
 * the network p describes. Errors: the max norm when both sides are fp32
 * (check.h's check_relerr), else the 2-norm (see relerr2). report: one CHECK
 * per item (else silent).
 * Returns the largest error; NaN anywhere makes it NaN. */
static inline double net_compare(const char *label, const mr_policy *p, const net_view *a, const net_view *b,
                                 int B, double tol, double tol_g, int report) {
    const int H = p->hidden, D = p->cin_dim, CH = p->critic_hidden;
    double worst = 0.0, e;
    char what[64];
    double (*rel)(const float *, const float *, size_t, double) =
        a->dt == MR_FP32 && b->dt == MR_FP32 ? check_relerr : relerr2;
    float *x, *y;
#define ITEM(name, val) ITEM_TOL(name, val, tol)
#define ITEM_TOL(name, val, tol)                                                                   \
    do {                                                                                           \
        e = (val);                                                                                 \
        if (e != e || worst != worst) worst = e != e ? e : worst; /* NaN sticks */                 \
        else if (e > worst) worst = e;                                                             \
        if (verbose) printf("    %-40s %.3g\n", name, e);                                         \
        if (report) CHECK_MSG(e < tol, "%s: %s relative error %.3g (tolerance %.3g)", label, name, e, tol); \
    } while (0)
#define ITEM_T(name, pa, pb, rows, cols, ld, col0)                                                 \
    do {                                                                                           \
        x = gather((pa), a->dt, (rows), (cols), (ld), (col0));                                     \
        y = gather((pb), b->dt, (rows), (cols), (ld), (col0));                                     \
        ITEM(name, rel(x, y, (size_t)(rows) * (cols), 1e-30));                                     \
        free(x);                                                                                   \
        free(y);                                                                                   \
    } while (0)
    ITEM("logits", rel(a->logits, b->logits, (size_t)B * NA, 1e-30));
    ITEM("value", rel(a->value, b->value, (size_t)B, 1e-30));
    for (int l = 0; l < p->num_conv; l++) {
        snprintf(what, sizeof what, "conv%d output", l);
        ITEM_T(what, a->act[l], b->act[l], B, p->VV * p->ch[l + 1], p->VV * p->ch[l + 1], 0);
    }
    ITEM_T("features", a->cin, b->cin, B, H, D, 0);
    ITEM_T("critic input (extra, ground truth)", a->cin, b->cin, B, D - H, D, H);
    ITEM_T("critic hidden", a->chid, b->chid, B, CH, CH, 0);
    for (int t = 0; t < p->n_tensors; t++) {
        const mr_tensor_info *ti = &p->tensors[t];
        snprintf(what, sizeof what, "gradient of %s", ti->name);
        ITEM_TOL(what, rel(a->grads + ti->offset, b->grads + ti->offset, ti->count, 1e-30), tol_g);
    }
    ITEM_TOL("all gradients", rel(a->grads, b->grads, p->n_params, 1e-30), tol_g);
#undef ITEM_T
#undef ITEM_TOL
#undef ITEM
    return worst;
}

/* A run of the schedule (plan pl, results o) against the CPU policy, at
 * the tolerances of pl's precision (fp32: tol for everything). */
static inline double cmp_cpu(const char *label, const ref_net *r, const mr_pc_plan *pl, const net_out *o, int B,
                             double tol, int report) {
    const net_view a = view_out(pl, o), b = view_cpu(r);
    const double tf = pl->dt == MR_FP32 ? tol : tol_fwd(pl->dt), tg = pl->dt == MR_FP32 ? tol : tol_grad(pl->dt);
    return net_compare(label, &r->p, &a, &b, B, tf, tg, report);
}

/* ================================================================ the emulated network */

/* The schedule on the CPU over a host "workspace" carved by the plan (the
 * emulator of its operations is pc_emu.h). */
typedef struct emu_net {
    mr_pc_plan pl;
    mr_pc_bufs bf;
    unsigned char *ws;
    size_t ws_used;      /* the bytes before cuBLAS's workspace, which the emulator does not use */
    float *params, *grads, *logits, *value;
    emu e;
    mr_pc_ops o;
} emu_net;

static inline int emu_net_make(emu_net *n, const mr_policy_config *cfg, int view, int max_batch, int chunk,
                               int dt) {
    memset(n, 0, sizeof *n);
    mr_error err;
    if (mr_pc_plan_make(&n->pl, cfg, view, max_batch, chunk, dt, &err) != MR_OK) {
        CHECK_MSG(0, "plan: %s", err.msg);
        return 0;
    }
    n->ws_used = n->pl.o_blas;
    n->ws = malloc(n->ws_used);
    mr_pc_carve(&n->pl, n->ws, &n->bf);
    const size_t P = n->pl.net.n_params;
    n->params = malloc(4 * P);
    n->grads = malloc(4 * P);
    n->logits = malloc(4 * ((size_t)max_batch * NA));
    n->value = malloc(4 * (size_t)max_batch);
    emu_ops(&n->e, &n->o);
    return 1;
}
static inline void emu_net_free(emu_net *n) {
    free(n->ws);
    free(n->params);
    free(n->grads);
    free(n->logits);
    free(n->value);
}

/* Poisoned workspace (NaN in every float type), grads = g0, forward, backward. */
static inline mr_status emu_net_run(emu_net *n, const float *params, const float *g0, const inputs *in,
                                    int proxy, mr_error *err) {
    memset(n->ws, 0xff, n->ws_used);
    memset(n->logits, 0xff, 4 * (size_t)in->B * NA);
    memset(n->value, 0xff, 4 * (size_t)in->B);
    memcpy(n->params, params, 4 * n->pl.net.n_params);
    memcpy(n->grads, g0, 4 * n->pl.net.n_params);
    n->e.jobs = n->e.gemms = 0;
    MR_PC_TRY(mr_pc_forward(&n->o, &n->pl, &n->bf, n->params, in->codes, in->extra, in->B, proxy, n->logits,
                            n->value, err));
    return mr_pc_backward(&n->o, &n->pl, &n->bf, n->params, in->dlogits, in->dvalue, in->B, proxy, n->grads, err);
}

static inline net_out emu_out(const emu_net *n) {
    net_out o = {n->ws, n->logits, n->value, n->grads};
    return o;
}

/* ================================================================ GPU */
#ifdef MOONRL_HAVE_CUDA

static mr_devmem dev;
static void *stream;

static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static inline void *dalloc(size_t bytes) {
    void *p = NULL;
    mr_error e;
    if (mr_devmem_alloc(&dev, bytes, "test buffer", &p, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
    return p;
}
static inline void dfree(void *p) { mr_devmem_free(&dev, p, NULL); }
static inline void up(void *d, const void *h, size_t bytes) {
    mr_error e;
    if (mr_cuda_copy(d, h, bytes, MR_COPY_H2D, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static inline void down(void *h, const void *d, size_t bytes) {
    mr_error e;
    if (mr_cuda_copy(h, d, bytes, MR_COPY_D2H, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static inline void *dup_up(const void *h, size_t bytes) {
    void *d = dalloc(bytes);
    if (d) up(d, h, bytes);
    return d;
}
static inline int sync_ok(const char *what) {
    mr_error e;
    const mr_status s = mr_cuda_stream_sync(stream, &e);
    CHECK_MSG(s == MR_OK, "%s: %s", what, e.msg);
    return s == MR_OK;
}
#define OK(call) do { mr_error e_; mr_status s_ = (call); CHECK_MSG(s_ == MR_OK, "%s: %s", #call, e_.msg); } while (0)
/* `call` must take &e_ as its error argument. */

/* The device memory manager and the stream of a program's GPU half;
 * 0 (and a failed check) when they cannot be had. */
static inline int gpu_open(void) {
    mr_error e;
    mr_devmem_backend be;
    if (mr_devmem_cuda_backend(0, &be, &e) != MR_OK || mr_devmem_init(&dev, &be, NULL, &e) != MR_OK ||
        mr_cuda_stream_create(&stream, &e) != MR_OK) {
        CHECK_MSG(0, "%s", e.msg);
        return 0;
    }
    return 1;
}
/* Everything created was given back; then the stream and the manager go. */
static inline void gpu_close(void) {
    mr_devmem_stats st;
    mr_devmem_stats_get(&dev, &st);
    CHECK(st.allocated_bytes == 0);
    printf("  device memory: %llu allocations, peak %.2f GiB\n", (unsigned long long)st.allocations,
           (double)st.peak_allocated_bytes / (1u << 30));
    mr_cuda_stream_sync(stream, NULL);
    mr_cuda_stream_destroy(stream);
    mr_devmem_destroy(&dev);
}
#endif /* MOONRL_HAVE_CUDA */
#endif

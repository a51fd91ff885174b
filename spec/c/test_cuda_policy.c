/*
 * test_cuda_policy.c - the GPU policy network (kernels/policy.cu, schedule in
 * kernels/policy_math.h) against the CPU policy (src/engine/policy.c) and
 * layers (src/engine/nn.c).
 *
 * Always (CPU): the bf16 / fp16 conversions (every value, ties, against the
 * compiler's _Float16 where it has one); the memory plan (the parameter
 * layout is policy.c's, sizes, alignment, no overlaps, refusals); the
 * deterministic bias reduction over one to three levels; and the whole
 * schedule run through an emulator of its three operations - GEMM as a
 * column-major cblas_sgemm given exactly cuBLAS's arguments (whose validity
 * rules are checked), elementwise jobs as a loop over the very MR_HD function
 * the kernels run - compared layer by layer with nn.c and as a network with
 * mr_policy_forward / mr_policy_backward (backward onto non-zero gradients):
 * logits, value, every activation and every parameter's gradient; fp32
 * within 1e-4 (max norm), bf16 / fp16 within the bounds explained at
 * tol_fwd. Then fault injection, in each precision: every job and GEMM of a
 * forward + backward is broken in turn (skipped; one element in seven left
 * out; half of a GEMM's sum dropped; its beta flipped) and the comparison
 * must fail every time - so the same comparison on the GPU catches a wrong
 * kernel. In a CUDA build, the argument checks that run before any GPU call
 * (and, without a GPU, the message creation gives).
 * With a GPU: the public layer functions against nn.c; the network (small
 * net at batch 37, reference net at 300, both observation modes, three
 * precisions, the workspace poisoned with NaN first) against the CPU policy,
 * and in bf16 / fp16 layer by layer against the emulation (lp_layers);
 * bit-identical results on a repeat; zero_grad; a CUDA-graph capture of
 * forward + backward replayed bit-identically; no device allocation in
 * steady state; at batch 24,576 the comparison again and the time of a
 * forward and a backward per precision (skipped with --quick, e.g. under
 * compute-sanitizer). Without a GPU the GPU part prints "skipped: no GPU".
 * Options: --verbose (every compared item), --calibrate (the emulated
 * comparison at the GPU part's sizes); MOONRL_TEST_SEED=n draws other inputs.
 */
#include "check.h"
#include "policy.h"
#include "nn.h"
#include "arena.h"
#include "policy_math.h"
#include "pc_emu.h"
#ifdef MOONRL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "devmem.h"
#include "policy_cuda.h"
#endif

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NA MR_NUM_ACTIONS

static int verbose;   /* --verbose: every compared item's error */
static int calibrate; /* --calibrate: the emulated schedule at the GPU test's sizes too (slow on few cores) */

/* ================================================================ helpers */


/* Relative 2-norm error ||a - b|| / max(||b||, floor); NaN propagates. The
 * reduced-precision checks use it: there a pre-activation within rounding of
 * 0 flips its ReLU, which changes a few rows of a weight gradient by a
 * sample's share - a large but sparse difference that is no error, which the
 * max norm would report at full size and the 2-norm weighs by its extent. */
static double relerr2(const float *a, const float *b, size_t n, double floor) {
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
static float *gather(const void *src, int dt, int rows, int cols, int ld, int col0) {
    float *o = malloc(sizeof(float) * ((size_t)rows * cols + 1));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) o[(size_t)r * cols + c] = mr_pc_ld(src, (size_t)r * ld + col0 + c, dt);
    return o;
}

static const char *prec_name(int dt) { return dt == MR_FP32 ? "fp32" : dt == MR_BF16 ? "bf16" : "fp16"; }

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
static double tol_fwd(int dt) { return dt == MR_FP32 ? 1e-4 : dt == MR_BF16 ? 3e-2 : 4e-3; }
static double tol_grad(int dt) { return dt == MR_FP32 ? 1e-4 : dt == MR_BF16 ? 0.6 : 0.25; }
static double tol_layer(int dt) { return dt == MR_FP32 ? 1e-4 : dt == MR_BF16 ? 1e-3 : 2e-4; }


static void small_cfg(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->num_conv = 2;
    c->conv_channels[0] = 4;
    c->conv_channels[1] = 8;
    c->hidden = 16;
    c->critic_hidden = 12;
    c->popart = 1;
}
static void ref_cfg(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->num_conv = 3;
    c->conv_channels[0] = 32;
    c->conv_channels[1] = 64;
    c->conv_channels[2] = 64;
    c->hidden = 512;
    c->critic_hidden = 512;
    c->popart = 1;
}

/* ================================================================ CPU reference */

typedef struct ref_net {
    mr_policy p;
    mr_arena a;
    float *logits, *value;
    float *g0;   /* the gradients before backward: a scaled, permuted copy of the true ones */
} ref_net;

static int ref_make(ref_net *r, const mr_policy_config *cfg, int view, int max_batch, int chunk) {
    memset(r, 0, sizeof *r);
    mr_policy_layout(&r->p, cfg, view, max_batch, chunk, &r->a);
    if (mr_arena_commit(&r->a) != 0) return 0;
    mr_policy_layout(&r->p, cfg, view, max_batch, chunk, &r->a);
    r->logits = malloc(sizeof(float) * ((size_t)max_batch * NA + 1));
    r->value = malloc(sizeof(float) * ((size_t)max_batch + 1));
    r->g0 = malloc(sizeof(float) * r->p.n_params);
    return r->p.params != NULL;
}
static void ref_free(ref_net *r) {
    mr_arena_release(&r->a);
    free(r->logits);
    free(r->value);
    free(r->g0);
}

/* weights uniform with std ~ 1.5/sqrt(fan_in), biases in +-0.2: about half
 * the units of every layer active, so every ReLU path is exercised */
static void random_params(mr_policy *p) {
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

static void inputs_make(inputs *in, int B, int VV) {
    in->B = B;
    in->codes = malloc((size_t)B * VV + 1);
    for (size_t i = 0; i < (size_t)B * VV; i++) {
        const double u = urand();
        in->codes[i] = u < 0.45 ? 0 : u < 0.7 ? 1 : u < 0.95 ? 2 : u < 0.975 ? 3 : 255;   /* > 2 reads as empty */
    }
    in->extra = frand((size_t)B * 2, -1.5, 1.5);
    in->dlogits = frand((size_t)B * NA, -1, 1);
    in->dvalue = frand((size_t)B, -1, 1);
}
static void inputs_free(inputs *in) {
    free(in->codes);
    free(in->extra);
    free(in->dlogits);
    free(in->dvalue);
}

/* Forward, then backward onto g0 (so accumulation is checked too): g0 is
 * half the true gradient, permuted within each tensor, so it has the
 * gradient's scale without being proportional to it. */
static void ref_run(ref_net *r, const inputs *in, int proxy) {
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

static net_view view_cpu(const ref_net *r) {
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
static net_view view_out(const mr_pc_plan *pl, const net_out *o) {
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
static double net_compare(const char *label, const mr_policy *p, const net_view *a, const net_view *b, int B,
                          double tol, double tol_g, int report) {
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
static double cmp_cpu(const char *label, const ref_net *r, const mr_pc_plan *pl, const net_out *o, int B, double tol,
                      int report) {
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

static int emu_net_make(emu_net *n, const mr_policy_config *cfg, int view, int max_batch, int chunk, int dt) {
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
static void emu_net_free(emu_net *n) {
    free(n->ws);
    free(n->params);
    free(n->grads);
    free(n->logits);
    free(n->value);
}

/* Poisoned workspace (NaN in every float type), grads = g0, forward, backward. */
static mr_status emu_net_run(emu_net *n, const float *params, const float *g0, const inputs *in, int proxy,
                             mr_error *err) {
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

static net_out emu_out(const emu_net *n) {
    net_out o = {n->ws, n->logits, n->value, n->grads};
    return o;
}

/* ================================================================ per-layer check */

/* Each layer of a reduced-precision run (plan pl, results o: its workspace
 * holds every layer's stored input and output and the T copy of the
 * weights) recomputed by the emulated schedule from that run's own inputs,
 * and compared with the run's output (2-norm): the forward of every layer,
 * the heads' backward (dchid, dfeat and the gradients of value, critic,
 * actor and fc). Only the recomputed layer's own last-bit differences
 * remain, so this is sharp where the whole network cannot be (see
 * tol_fwd). Not covered: the conv layers' gradients (their per-chunk
 * activation gradients are scratch). Returns the largest error. */
static double lp_layers(const char *label, const mr_pc_plan *pl, const net_out *o, const float *params,
                        const float *g0, const inputs *in, int B, int proxy, double tol, int report) {
    const mr_policy *p = &pl->net;
    const int dt = pl->dt, L = p->num_conv, V = p->view, VV = p->VV, H = p->hidden, D = p->cin_dim;
    const int CH = p->critic_hidden, F = p->flat;
    const size_t es = (size_t)mr_pc_esize(dt);
    mr_pc_bufs bf;
    mr_pc_carve(pl, (unsigned char *)(uintptr_t)o->ws, &bf);
    emu e;
    mr_pc_ops ops;
    emu_ops(&e, &ops);
    mr_error err;
    int cmax = 1, cin_max = 2;
    for (int l = 0; l < L; l++) {
        if (p->ch[l + 1] > cmax) cmax = p->ch[l + 1];
        if (p->ch[l] > cin_max) cin_max = p->ch[l];
    }
    size_t big = (size_t)B * VV * cmax;
    if ((size_t)B * D > big) big = (size_t)B * D;
    void *t = malloc(big * es), *col = malloc((size_t)B * VV * 9 * cin_max * es);
    float *tf = malloc(sizeof(float) * ((size_t)B * NA + 1)), *gw = malloc(sizeof(float) * p->n_params);
    double *part = malloc(sizeof(double) * pl->part_doubles);
    void *dl = malloc((size_t)B * NA * es), *dv = malloc((size_t)B * es);
    double worst = 0.0, x;
    char what[80];
#define W(off) mr_pc_cat(bf.wlp, (off), dt)
#define CMP(name, pa, da, pb, db_, rows, cols, lda, ldb)                                           \
    do {                                                                                           \
        float *a_ = gather((pa), (da), (rows), (cols), (lda), 0), *b_ = gather((pb), (db_), (rows), (cols), (ldb), 0); \
        x = relerr2(a_, b_, (size_t)(rows) * (cols), 1e-30);                                       \
        free(a_);                                                                                  \
        free(b_);                                                                                  \
        if (x != x || worst != worst) worst = x != x ? x : worst;                                  \
        else if (x > worst) worst = x;                                                             \
        if (verbose) printf("    layer: %-33s %.3g\n", name, x);                                  \
        if (report) CHECK_MSG(x < tol, "%s: layer check, %s: relative error %.3g (tolerance %.3g)", label, name, x, tol); \
    } while (0)
    /* forward */
    for (int l = 0; l < L; l++) {
        CHECK(mr_pc_conv_forward(&ops, dt, t, col, l ? bf.act[l - 1] : NULL, in->codes, proxy, W(p->conv_w[l]),
                                 params + p->conv_b[l], B, V, V, p->ch[l], p->ch[l + 1], 1, &err) == MR_OK);
        snprintf(what, sizeof what, "conv%d forward", l);
        CMP(what, t, dt, bf.act[l], dt, B, VV * p->ch[l + 1], VV * p->ch[l + 1], VV * p->ch[l + 1]);
    }
    CHECK(mr_pc_linear_forward(&ops, "fc", dt, dt, t, H, bf.act[L - 1], F, W(p->fc_w), F, params + p->fc_b, B, F, H, 1,
                               &err) == MR_OK);
    CMP("fc forward (features)", t, dt, bf.cin, dt, B, H, H, D);
    CHECK(mr_pc_linear_forward(&ops, "actor", dt, MR_FP32, tf, NA, bf.cin, D, W(p->actor_w), H, params + p->actor_b,
                               B, H, NA, 0, &err) == MR_OK);
    CMP("actor forward (logits)", tf, MR_FP32, o->logits, MR_FP32, B, NA, NA, NA);
    CHECK(mr_pc_linear_forward(&ops, "critic", dt, dt, t, CH, bf.cin, D, W(p->critic_w), D, params + p->critic_b, B, D,
                               CH, 1, &err) == MR_OK);
    CMP("critic forward", t, dt, bf.chid, dt, B, CH, CH, CH);
    CHECK(mr_pc_linear_forward(&ops, "value", dt, MR_FP32, tf, 1, bf.chid, CH, W(p->value_w_offset), CH,
                               params + p->value_b_offset, B, CH, 1, 0, &err) == MR_OK);
    CMP("value forward", tf, MR_FP32, o->value, MR_FP32, B, 1, 1, 1);
    /* the heads' backward from the run's stored activations and gradients */
    for (size_t i = 0; i < (size_t)B * NA; i++) mr_pc_st(dl, i, dt, in->dlogits[i]);
    for (int i = 0; i < B; i++) mr_pc_st(dv, (size_t)i, dt, in->dvalue[i]);
    memcpy(gw, g0, sizeof(float) * p->n_params);
    mr_pc_job j;
    CHECK(mr_pc_linear_backward(&ops, "value", dt, t, CH, 0.0f, gw + p->value_w_offset, CH, gw + p->value_b_offset,
                                part, dv, 1, bf.chid, CH, W(p->value_w_offset), CH, B, CH, 1, &err) == MR_OK);
    mr_pc_job_init(&j, MR_PCJ_RELU_BACK, dt, (long long)B * CH);
    j.cols = CH; j.ld = CH; j.ld2 = CH; j.m = bf.chid; j.y = t;
    emu_job(&e, &j, &err);
    CMP("value backward (critic hidden gradient)", t, dt, bf.dchid, dt, B, CH, CH, CH);
    CHECK(mr_pc_linear_backward(&ops, "critic", dt, NULL, 0, 0.0f, gw + p->critic_w, D, gw + p->critic_b, part,
                                bf.dchid, CH, bf.cin, D, NULL, 0, B, D, CH, &err) == MR_OK);
    CHECK(mr_pc_linear_backward(&ops, "critic", dt, t, H, 0.0f, NULL, 0, NULL, NULL, bf.dchid, CH, NULL, 0,
                                W(p->critic_w), D, B, H, CH, &err) == MR_OK);
    CHECK(mr_pc_linear_backward(&ops, "actor", dt, t, H, 1.0f, gw + p->actor_w, H, gw + p->actor_b, part, dl, NA,
                                bf.cin, D, W(p->actor_w), H, B, H, NA, &err) == MR_OK);
    mr_pc_job_init(&j, MR_PCJ_RELU_BACK, dt, (long long)B * H);
    j.cols = H; j.ld = H; j.ld2 = D; j.m = bf.cin; j.y = t;
    emu_job(&e, &j, &err);
    CMP("critic + actor backward (features gradient)", t, dt, bf.dfeat, dt, B, H, H, H);
    CHECK(mr_pc_linear_backward(&ops, "fc", dt, NULL, 0, 0.0f, gw + p->fc_w, F, gw + p->fc_b, part, bf.dfeat, H,
                                bf.act[L - 1], F, NULL, 0, B, F, H, &err) == MR_OK);
    static const char *const heads[] = {"fc.w", "fc.b", "actor.w", "actor.b", "critic.w", "critic.b", "value.w",
                                        "value.b"};
    for (int h = 0; h < 8; h++) {
        const mr_tensor_info *ti = mr_policy_tensor(p, heads[h]);
        snprintf(what, sizeof what, "gradient of %s", heads[h]);
        CMP(what, gw + ti->offset, MR_FP32, o->grads + ti->offset, MR_FP32, 1, (int)ti->count, 0, 0);
    }
#undef CMP
#undef W
    CHECK(e.bad_args == 0);
    free(t); free(col); free(tf); free(gw); free(part); free(dl); free(dv);
    return worst;
}

/* ================================================================ CPU: formats */

static void test_formats(void) {
    /* bf16: exact back and forth, round to nearest even, NaN, inf */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = mr_bf16_to_f((uint16_t)h);
        const int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (nan ? f == f : mr_f_to_bf16(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
    CHECK(mr_f_to_bf16(1.0f) == 0x3f80 && mr_f_to_bf16(-2.0f) == 0xc000);
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x3f808000u)) == 0x3f80);   /* tie -> even */
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x3f818000u)) == 0x3f82);   /* tie -> even (up) */
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x3f808001u)) == 0x3f81);   /* above the tie */
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x7f7fffffu)) == 0x7f80);   /* FLT_MAX rounds to inf */
    const uint16_t bn = mr_f_to_bf16(mr_pc_bitsf(0x7f800001u));
    CHECK((bn & 0x7f80) == 0x7f80 && (bn & 0x7f));              /* a NaN with a low payload stays NaN */
    /* fp16: every half round-trips; known values; ties; subnormals; overflow */
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = mr_half_to_f((uint16_t)h);
        const int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? f == f : mr_f_to_half(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d fp16 values do not round-trip", bad);
    CHECK(mr_half_to_f(0x3c00) == 1.0f && mr_half_to_f(0x7bff) == 65504.0f && mr_half_to_f(0x0001) == 5.9604644775390625e-8f);
    CHECK(mr_half_to_f(0x8400) == -6.103515625e-5f && mr_half_to_f(0x03ff) == 6.09755516052246094e-5f);
    CHECK(mr_f_to_half(65519.99f) == 0x7bff && mr_f_to_half(65520.0f) == 0x7c00 && mr_f_to_half(-1e9f) == 0xfc00);
    CHECK(mr_f_to_half(2.98023223876953125e-8f) == 0x0000);   /* 2^-25: tie between 0 and 2^-24 -> even (0) */
    CHECK(mr_f_to_half(2.98023259e-8f) == 0x0001);            /* just above */
    CHECK(mr_f_to_half(8.94069671630859375e-8f) == 0x0002);   /* 1.5 * 2^-24: tie -> even (2) */
#ifdef __FLT16_MAX__
    /* against the compiler's conversion (round to nearest even) on the
     * midpoints of every pair of neighbouring halves, their neighbours, and
     * random floats */
    bad = 0;
    long tried = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const float a = mr_half_to_f((uint16_t)h), b = mr_half_to_f((uint16_t)(h + 1));
        const float mid = (float)(((double)a + (double)b) / 2.0);
        const uint32_t mb = mr_pc_fbits(mid);
        const float probes[5] = {mid, mr_pc_bitsf(mb - 1), mr_pc_bitsf(mb + 1), -mid, a};
        for (int q = 0; q < 5; q++) {
            const _Float16 ref = (_Float16)probes[q];
            uint16_t rb;
            memcpy(&rb, &ref, 2);
            bad += rb != mr_f_to_half(probes[q]);
            tried++;
        }
    }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = u32rand();
        if (i & 1) u = (u & 0x80000000u) | (0x30000000u + (u & 0x17ffffffu));   /* dense near half's range */
        const float f = mr_pc_bitsf(u);
        if (f != f) continue;
        const _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        bad += rb != mr_f_to_half(f);
        tried++;
    }
    CHECK_MSG(bad == 0, "%d of %ld float -> fp16 conversions differ from _Float16", bad, tried);
#endif
    /* the element access helpers */
    float fv[2] = {1.5f, -3.25f};
    uint16_t hv[2];
    mr_pc_st(hv, 0, MR_BF16, fv[0]);
    mr_pc_st(hv, 1, MR_FP16, fv[1]);
    CHECK(mr_pc_ld(hv, 0, MR_BF16) == 1.5f && mr_pc_ld(hv, 1, MR_FP16) == -3.25f && mr_pc_ld(fv, 1, MR_FP32) == -3.25f);
    CHECK(mr_pc_esize(MR_FP32) == 4 && mr_pc_esize(MR_BF16) == 2 && mr_pc_esize(MR_FP16) == 2);
}

/* ================================================================ CPU: plan */

typedef struct region { size_t off, bytes; const char *name; } region;

static void check_regions(const mr_pc_plan *pl, const char *label) {
    const mr_policy *p = &pl->net;
    const size_t es = (size_t)mr_pc_esize(pl->dt), MB = (size_t)pl->max_batch, CR = (size_t)pl->chunk * p->VV;
    int cmax = 1, cin_max = 2;
    for (int l = 0; l < p->num_conv; l++) {
        if (p->ch[l + 1] > cmax) cmax = p->ch[l + 1];
        if (p->ch[l] > cin_max) cin_max = p->ch[l];
    }
    region r[MR_MAX_CONV + 16];
    int n = 0;
    r[n++] = (region){pl->o_codes, MB * p->VV, "codes"};
    for (int l = 0; l < p->num_conv; l++) r[n++] = (region){pl->o_act[l], MB * p->VV * p->ch[l + 1] * es, "act"};
    r[n++] = (region){pl->o_cin, MB * p->cin_dim * es, "cin"};
    r[n++] = (region){pl->o_chid, MB * p->critic_hidden * es, "chid"};
    r[n++] = (region){pl->o_dchid, MB * p->critic_hidden * es, "dchid"};
    r[n++] = (region){pl->o_dfeat, MB * p->hidden * es, "dfeat"};
    r[n++] = (region){pl->o_col, CR * 9 * cin_max * es, "col"};
    r[n++] = (region){pl->o_dA, CR * cmax * es, "dA"};
    r[n++] = (region){pl->o_dB, CR * cmax * es, "dB"};
    /* the largest bias reduction: the widest layer over the most rows */
    int hmax = p->hidden > p->critic_hidden ? p->hidden : p->critic_hidden;
    if (hmax < NA) hmax = NA;
    size_t need = mr_pc_bias_partials((long long)CR, cmax);
    if (mr_pc_bias_partials((long long)MB, hmax) > need) need = mr_pc_bias_partials((long long)MB, hmax);
    CHECK(pl->part_doubles == need);
    r[n++] = (region){pl->o_part, need * 8, "part"};
    if (pl->dt != MR_FP32) {
        r[n++] = (region){pl->o_wlp, p->n_params * es, "wlp"};
        r[n++] = (region){pl->o_dlog, MB * NA * es, "dlog"};
        r[n++] = (region){pl->o_dval, MB * es, "dval"};
    }
    r[n++] = (region){pl->o_blas, MR_PC_BLAS_WS, "blas"};
    int ok = 1;
    for (int i = 0; i < n; i++) {
        ok &= r[i].off % MR_PC_ALIGN == 0 && r[i].off + r[i].bytes <= pl->ws_bytes;
        for (int k = 0; k < i; k++)
            ok &= r[i].off + r[i].bytes <= r[k].off || r[k].off + r[k].bytes <= r[i].off;
    }
    CHECK_MSG(ok, "%s: workspace regions overlap, are unaligned or pass its end", label);
    CHECK(pl->o_blas + MR_PC_BLAS_WS == pl->ws_bytes);
}

static void test_plan(void) {
    mr_policy_config cfg;
    mr_pc_plan pl;
    mr_error e;
    ref_cfg(&cfg);
    /* the parameter layout is policy.c's, entry by entry */
    mr_policy cpu;
    mr_arena a = {0};
    mr_policy_layout(&cpu, &cfg, 11, 0, 1, &a);
    for (int dt = 0; dt < 3; dt++) {
        CHECK(mr_pc_plan_make(&pl, &cfg, 11, 24576, 0, dt, &e) == MR_OK);
        CHECK(pl.net.n_params == cpu.n_params && pl.net.n_tensors == cpu.n_tensors && pl.net.flat == 7744 &&
              pl.net.cin_dim == 756 && pl.param_bytes == 4 * cpu.n_params);
        CHECK(memcmp(pl.net.tensors, cpu.tensors, sizeof cpu.tensors) == 0);
        CHECK(pl.chunk == MR_PC_CHUNK && pl.max_batch == 24576 && pl.dt == dt);
        check_regions(&pl, prec_name(dt));
        printf("  plan, reference net at batch 24,576 (%s): %.2f GiB of device memory (%zu parameters)\n",
               prec_name(dt), (double)mr_pc_plan_bytes(&pl) / (1u << 30), pl.net.n_params);
    }
    /* ENV_SPEC: about 4.03 M in the policy (trunk + actor); the critic adds 388,097 */
    CHECK(cpu.n_policy == 4025576 && cpu.n_params == 4413673);
    /* chunk capped at max_batch; explicit chunk kept */
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 100, 0, MR_FP32, &e) == MR_OK && pl.chunk == 100);
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 100, 7, MR_BF16, &e) == MR_OK && pl.chunk == 7);
    check_regions(&pl, "chunk 7 bf16");
    small_cfg(&cfg);
    CHECK(mr_pc_plan_make(&pl, &cfg, 5, 3, 2, MR_FP16, &e) == MR_OK);
    check_regions(&pl, "small fp16");
    /* refusals, each naming what is wrong */
    ref_cfg(&cfg);
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 0, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "max_batch"));
    CHECK(mr_pc_plan_make(&pl, &cfg, 0, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "view"));
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, 7, &e) == MR_ERR_ARG && strstr(e.msg, "precision"));
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 1 << 22, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "lower max_batch"));
    CHECK(mr_pc_plan_make(&pl, NULL, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG);
    cfg.num_conv = 0;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "num_conv"));
    ref_cfg(&cfg);
    cfg.conv_channels[1] = 0;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "conv_channels[1]"));
    ref_cfg(&cfg);
    cfg.critic_hidden = -1;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "critic_hidden"));
}

/* ================================================================ CPU: layers, emulated */

/* One conv layer and one linear layer of the schedule, emulated, against nn.c
 * (fp32; non-square maps, partial blocks of the bias reduction). */
static void test_layers_emulated(void) {
    const int B = 3, H = 7, W = 5, C = 6, OC = 10, N = B * H * W;
    emu e;
    mr_pc_ops o;
    emu_ops(&e, &o);
    mr_error err;
    float *inp = frand((size_t)N * C, -1, 1), *w = frand((size_t)OC * 9 * C, -0.5, 0.5), *b = frand(OC, -0.3, 0.3);
    float *col = malloc(sizeof(float) * N * 9 * C), *out = malloc(sizeof(float) * N * OC);
    float *col2 = malloc(sizeof(float) * N * 9 * C), *out2 = malloc(sizeof(float) * N * OC);
    for (int relu = 0; relu < 2; relu++) {
        if (relu) mr_conv3x3_relu_forward(out, col, inp, w, b, B, H, W, C, OC);
        else mr_conv3x3_forward(out, col, inp, w, b, B, H, W, C, OC);
        CHECK(mr_pc_conv_forward(&o, MR_FP32, out2, col2, inp, NULL, 0, w, b, B, H, W, C, OC, relu, &err) == MR_OK);
        CHECK(memcmp(col, col2, sizeof(float) * N * 9 * C) == 0);   /* im2col: the same gather */
        CHECK_MSG(check_relerr(out2, out, (size_t)N * OC, 1e-30) < 1e-6, "conv forward relu %d: %g", relu,
                  check_relerr(out2, out, (size_t)N * OC, 1e-30));
    }
    /* the observation im2col: expansion then im2col, in one */
    uint8_t *codes = malloc((size_t)B * H * W);
    for (int i = 0; i < N; i++) codes[i] = (uint8_t)(u32rand() % 5);
    float *x = malloc(sizeof(float) * N * 2);
    for (int proxy = 0; proxy < 2; proxy++) {
        mr_obs_expand_forward(x, codes, B, H * W, proxy);
        mr_im2col3x3(col, x, B, H, W, 2);
        mr_pc_job j;
        mr_pc_job_init(&j, MR_PCJ_IM2COL_CODES, MR_FP32, (long long)N * 18);
        j.H = H; j.W = W; j.C = 2; j.codes = codes; j.proxy = proxy; j.y = col2;
        emu_job(&e, &j, &err);
        CHECK(memcmp(col, col2, sizeof(float) * N * 18) == 0);
    }
    /* backward: dw, db, dinp (accumulating, and the ReLU-fused form) */
    float *dout = frand((size_t)N * OC, -1, 1), *dw = frand((size_t)OC * 9 * C, -1, 1), *db = frand(OC, -1, 1);
    float *dw2 = malloc(sizeof(float) * OC * 9 * C), *db2 = malloc(sizeof(float) * OC);
    float *dinp = frand((size_t)N * C, -1, 1), *dinp2 = malloc(sizeof(float) * N * C);
    memcpy(dw2, dw, sizeof(float) * OC * 9 * C);
    memcpy(db2, db, sizeof(float) * OC);
    memcpy(dinp2, dinp, sizeof(float) * N * C);
    double *part = malloc(sizeof(double) * mr_pc_bias_partials(N, OC));
    mr_conv3x3_backward(dinp, dw, db, col, dout, inp, w, B, H, W, C, OC);
    CHECK(mr_pc_conv_backward(&o, MR_FP32, dinp2, NULL, dw2, db2, part, col2, dout, inp, NULL, 0, w, B, H, W, C, OC,
                              &err) == MR_OK);
    CHECK(check_relerr(dw2, dw, (size_t)OC * 9 * C, 1e-30) < 1e-6);
    CHECK(check_relerr(db2, db, OC, 1e-30) < 1e-6);
    CHECK(memcmp(dinp2, dinp, sizeof(float) * N * C) == 0);   /* col2im: the same sums in the same order */
    float *mask = frand((size_t)N * C, -1, 1);
    memset(dinp, 0, sizeof(float) * N * C);
    mr_conv3x3_backward(dinp, NULL, NULL, col, dout, inp, w, B, H, W, C, OC);
    mr_relu_backward(dinp, dinp, mask, (size_t)N * C);
    memset(dinp2, 0xff, sizeof(float) * N * C);   /* NaN: the fused form must write every element */
    CHECK(mr_pc_conv_backward(&o, MR_FP32, dinp2, mask, NULL, NULL, NULL, col2, dout, inp, NULL, 0, w, B, H, W, C, OC,
                              &err) == MR_OK);
    CHECK(memcmp(dinp2, dinp, sizeof(float) * N * C) == 0);
    free(inp); free(w); free(b); free(col); free(out); free(col2); free(out2); free(codes); free(x);
    free(dout); free(dw); free(db); free(dw2); free(db2); free(dinp); free(dinp2); free(part); free(mask);

    /* linear: B rows over more than one bias-reduction block */
    const int LB = 600, LC = 37, LO = 13;
    float *li = frand((size_t)LB * LC, -1, 1), *lw = frand((size_t)LO * LC, -0.5, 0.5), *lb = frand(LO, -0.3, 0.3);
    float *lo = malloc(sizeof(float) * LB * LO), *lo2 = malloc(sizeof(float) * LB * LO);
    for (int relu = 0; relu < 2; relu++) {
        if (relu) mr_linear_relu_forward(lo, li, lw, lb, LB, LC, LO);
        else mr_linear_forward(lo, li, lw, lb, LB, LC, LO);
        CHECK(mr_pc_linear_forward(&o, "test", MR_FP32, MR_FP32, lo2, LO, li, LC, lw, LC, lb, LB, LC, LO, relu, &err) ==
              MR_OK);
        CHECK(check_relerr(lo2, lo, (size_t)LB * LO, 1e-30) < 1e-6);
    }
    float *ld = frand((size_t)LB * LO, -1, 1), *ldi = frand((size_t)LB * LC, -1, 1), *ldw = frand((size_t)LO * LC, -1, 1);
    float *ldb = frand(LO, -1, 1);
    float *ldi2 = malloc(sizeof(float) * LB * LC), *ldw2 = malloc(sizeof(float) * LO * LC), *ldb2 = malloc(sizeof(float) * LO);
    memcpy(ldi2, ldi, sizeof(float) * LB * LC);
    memcpy(ldw2, ldw, sizeof(float) * LO * LC);
    memcpy(ldb2, ldb, sizeof(float) * LO);
    double *lpart = malloc(sizeof(double) * mr_pc_bias_partials(LB, LO));
    mr_linear_backward(ldi, ldw, ldb, ld, li, lw, LB, LC, LO);
    CHECK(mr_pc_linear_backward(&o, "test", MR_FP32, ldi2, LC, 1.0f, ldw2, LC, ldb2, lpart, ld, LO, li, LC, lw, LC, LB,
                                LC, LO, &err) == MR_OK);
    CHECK(check_relerr(ldi2, ldi, (size_t)LB * LC, 1e-30) < 1e-6);
    CHECK(check_relerr(ldw2, ldw, (size_t)LO * LC, 1e-30) < 1e-6);
    CHECK(check_relerr(ldb2, ldb, LO, 1e-30) < 1e-6);
    CHECK(e.bad_args == 0);
    /* the bias reduction alone, over one, two and three levels of partial sums */
    const int rows_list[4] = {4096, 4097, 300000, 1};
    for (int q = 0; q < 4; q++) {
        const int R = rows_list[q], CC = 3, LDX = 5;
        float *xs = frand((size_t)R * LDX, -1, 1), *dense = malloc(sizeof(float) * R * CC);
        for (int i = 0; i < R; i++)
            for (int c = 0; c < CC; c++) dense[(size_t)i * CC + c] = xs[(size_t)i * LDX + c];
        float ref[3] = {0.5f, -1, 2}, got[3] = {0.5f, -1, 2};
        mr_bias_backward(ref, dense, (size_t)R, CC);
        double *pp = malloc(sizeof(double) * mr_pc_bias_partials(R, CC));
        const long before = e.jobs;
        CHECK(mr_pc_bias_grad(&o, MR_FP32, got, pp, xs, R, CC, LDX, &err) == MR_OK);
        CHECK_MSG(check_relerr(got, ref, 3, 1e-30) < 1e-6, "bias reduction over %d rows: %g", R, check_relerr(got, ref, 3, 1e-30));
        CHECK(e.jobs - before == (R <= 4096 ? 2 : R <= 262144 ? 3 : 4));
        /* bf16 input: the same sums of the rounded values */
        uint16_t *xb = malloc(2 * (size_t)R * LDX);
        for (size_t i = 0; i < (size_t)R * LDX; i++) xb[i] = mr_f_to_bf16(xs[i]);
        for (int i = 0; i < R; i++)
            for (int c = 0; c < CC; c++) dense[(size_t)i * CC + c] = mr_bf16_to_f(xb[(size_t)i * LDX + c]);
        float refb[3] = {0, 0, 0}, gotb[3] = {0, 0, 0};
        mr_bias_backward(refb, dense, (size_t)R, CC);
        CHECK(mr_pc_bias_grad(&o, MR_BF16, gotb, pp, xb, R, CC, LDX, &err) == MR_OK);
        CHECK(check_relerr(gotb, refb, 3, 1e-30) < 1e-6);
        free(xs); free(dense); free(pp); free(xb);
    }
    free(li); free(lw); free(lb); free(lo); free(lo2); free(ld); free(ldi); free(ldw); free(ldb);
    free(ldi2); free(ldw2); free(ldb2); free(lpart);
}

/* ================================================================ CPU: network, emulated */

static void net_emulated(const char *name, const mr_policy_config *cfg, int view, int B, int gpu_chunk, int cpu_chunk) {
    ref_net r;
    CHECK(ref_make(&r, cfg, view, B, cpu_chunk));
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, view * view);
    for (int proxy = 0; proxy < 2; proxy++) {
        ref_run(&r, &in, proxy);
        for (int dt = 0; dt < 3; dt++) {
            emu_net n;
            if (!emu_net_make(&n, cfg, view, B, gpu_chunk, dt)) continue;
            mr_error err;
            const mr_status s = emu_net_run(&n, r.p.params, r.g0, &in, proxy, &err);
            CHECK_MSG(s == MR_OK, "%s", err.msg);
            CHECK(n.e.bad_args == 0);
            char label[96];
            snprintf(label, sizeof label, "emulated %s net, %s, proxy %d", name, prec_name(dt), proxy);
            const net_out o = emu_out(&n);
            const double w = cmp_cpu(label, &r, &n.pl, &o, B, 1e-4, 1);
            if (dt == MR_FP32) {
                printf("  %s (B %d, chunk %d): largest relative error %.2e (tolerance 1e-4)\n", label, B, n.pl.chunk, w);
            } else {
                /* what fp32-level differences (a GPU's summation order) do in
                 * this precision: parameters moved by up to 4 ulps */
                emu_net n2;
                double noise = -1;
                if (emu_net_make(&n2, cfg, view, B, gpu_chunk, dt)) {
                    float *pp = malloc(sizeof(float) * r.p.n_params);
                    for (size_t k = 0; k < r.p.n_params; k++)
                        pp[k] = mr_pc_bitsf(mr_pc_fbits(r.p.params[k]) + (uint32_t)(u32rand() % 9) - 4u);
                    CHECK(emu_net_run(&n2, pp, r.g0, &in, proxy, &err) == MR_OK);
                    const net_out o2 = emu_out(&n2);
                    const net_view a = view_out(&n2.pl, &o2), b = view_out(&n.pl, &o);
                    char l2[128];
                    snprintf(l2, sizeof l2, "%s, parameters moved by ulps", label);
                    noise = net_compare(l2, &r.p, &a, &b, B, 0, 0, 0);   /* a measurement, not a check */
                    free(pp);
                    emu_net_free(&n2);
                }
                /* each layer from the run's own inputs: exact here (the same code) */
                const double wl = lp_layers(label, &n.pl, &o, r.p.params, r.g0, &in, B, proxy, tol_layer(dt), 1);
                CHECK(wl < tol_layer(dt));
                if (proxy == 0) {   /* and it notices a wrong layer: conv0's output off in 1 element of 97 */
                    unsigned char *ws2 = malloc(n.ws_used);
                    memcpy(ws2, n.ws, n.ws_used);
                    mr_pc_bufs b2;
                    mr_pc_carve(&n.pl, ws2, &b2);
                    const size_t cnt = (size_t)B * n.pl.net.VV * n.pl.net.ch[1];
                    for (size_t k = 0; k < cnt; k += 97) mr_pc_st(b2.act[0], k, dt, mr_pc_ld(b2.act[0], k, dt) + 0.5f);
                    const net_out o2 = {ws2, n.logits, n.value, n.grads};
                    const double bad = lp_layers(label, &n.pl, &o2, r.p.params, r.g0, &in, B, proxy, 0, 0);
                    CHECK_MSG(bad > tol_layer(dt), "%s: a corrupted layer went unnoticed (%g)", label, bad);
                    free(ws2);
                }
                printf("  %s (B %d, chunk %d): largest relative error %.2e (outputs and activations %.2g, "
                       "gradients %.2g allowed); layer by layer %.1e; the same run with parameters moved by up to "
                       "4 ulps differs by %.1e\n", label, B, n.pl.chunk, w, tol_fwd(dt), tol_grad(dt), wl, noise);
            }
            emu_net_free(&n);
        }
    }
    inputs_free(&in);
    ref_free(&r);
}

/* Breaks each operation of a forward + backward in turn; the comparison
 * must notice every time (a NaN-poisoned workspace makes a skipped write
 * visible). Jobs of fewer than 4 elements cannot lose one in seven. fp32:
 * against the CPU policy at 1e-4; bf16 / fp16: against the clean emulated
 * run in the same precision at tol_layer (the bound of the GPU test's sharp
 * per-layer check). */
static void test_fault_injection(int dt) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    const int V = 5, B = 170;   /* chunks of 165 and 5 samples: 4125 rows, two-level bias sums */
    ref_net r;
    CHECK(ref_make(&r, &cfg, V, B, 16));
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, V * V);
    ref_run(&r, &in, 1);
    emu_net n;
    if (!emu_net_make(&n, &cfg, V, B, 165, dt)) return;
    unsigned job_n[512];
    int job_kind[512];
    n.e.job_n = job_n;
    n.e.job_kind = job_kind;
    n.e.job_n_cap = 512;
    mr_error err;
    CHECK(emu_net_run(&n, r.p.params, r.g0, &in, 1, &err) == MR_OK);
    const long jobs = n.e.jobs, gemms = n.e.gemms;
    if (verbose)
        for (long k = 0; k < jobs && k < 512; k++) printf("    job %ld: kind %d, %u elements\n", k, job_kind[k], job_n[k]);
    net_out o = emu_out(&n);
    const double clean = cmp_cpu("fault injection baseline", &r, &n.pl, &o, B, 1e-4, 1);
    /* the clean run, kept as the reduced precisions' reference */
    unsigned char *cws = malloc(n.ws_used);
    float *cl = malloc(4 * (size_t)B * NA), *cv = malloc(4 * (size_t)B), *cg = malloc(4 * r.p.n_params);
    memcpy(cws, n.ws, n.ws_used);
    memcpy(cl, n.logits, 4 * (size_t)B * NA);
    memcpy(cv, n.value, 4 * (size_t)B);
    memcpy(cg, n.grads, 4 * r.p.n_params);
    const net_out co = {cws, cl, cv, cg};
    const net_view cview = view_out(&n.pl, &co);
    const double tol = tol_layer(dt);
    n.e.job_n = NULL;
    int missed = 0, tried = 0;
    for (int mode = 0; mode < 4; mode++) {
        const long count = mode < 2 ? jobs : gemms;
        for (long k = 0; k < count; k++) {
            if (mode == 1 && (k >= 512 || job_n[k] < 4)) continue;
            n.e.fault_job = mode < 2 ? k : -1;
            n.e.fault_gemm = mode >= 2 ? k : -1;
            n.e.fault_mode = mode;
            CHECK(emu_net_run(&n, r.p.params, r.g0, &in, 1, &err) == MR_OK);
            o = emu_out(&n);
            const net_view fv = view_out(&n.pl, &o);
            const double w = dt == MR_FP32 ? cmp_cpu("fault", &r, &n.pl, &o, B, tol, 0)
                                           : net_compare("fault", &r.p, &fv, &cview, B, tol, tol, 0);
            tried++;
            if (w <= tol) {   /* NaN counts as detected */
                missed++;
                fprintf(stderr, "  fault not detected: %s %ld (kind %d) (error %.3g)\n",
                        mode == 0 ? "skipped job" : mode == 1 ? "job missing 1 in 7" : mode == 2 ? "GEMM missing half its terms"
                                                                                   : "GEMM with beta flipped", k,
                        mode < 2 ? job_kind[k] : -1, w);
            }
        }
    }
    n.e.fault_job = n.e.fault_gemm = -1;
    CHECK_MSG(missed == 0, "%d of %d injected faults went unnoticed", missed, tried);
    printf("  fault injection, %s: %d faults in %ld jobs and %ld GEMMs of a forward + backward, all detected at "
           "%.0e (clean run against the CPU policy: %.1e)\n", prec_name(dt), tried, jobs, gemms, tol, clean);
    free(cws); free(cl); free(cv); free(cg);
    emu_net_free(&n);
    inputs_free(&in);
    ref_free(&r);
}

/* ================================================================ GPU */
#ifdef MOONRL_HAVE_CUDA

/* host-memory "device" for the no-GPU creation path */
static void *fake_alloc(void *ctx, size_t bytes, const char **reason) { (void)ctx; (void)reason; return malloc(bytes); }
static void fake_free(void *ctx, void *p) { (void)ctx; free(p); }
static size_t fake_free_bytes(void *ctx) { (void)ctx; return (size_t)1 << 34; }

/* Checks that need no GPU: arguments are refused before any GPU call. */
static void test_cuda_arg_checks(void) {
    mr_error e;
    mr_policy_config cfg;
    ref_cfg(&cfg);
    mr_policy_cuda pc;
    CHECK(mr_policy_cuda_create(NULL, &cfg, 11, 10, 0, MR_FP32, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_policy_cuda_create(&pc, &cfg, 11, 10, 0, MR_FP32, NULL, &e) == MR_ERR_ARG &&
          strstr(e.msg, "memory manager"));
    CHECK(pc.blas == NULL && pc.ws == NULL && pc.params == NULL);
    CHECK(mr_policy_cuda_create(&pc, &cfg, 11, 0, 0, MR_FP32, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "max_batch"));
    CHECK(mr_policy_cuda_create(&pc, &cfg, 11, 10, 0, 5, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "precision"));
    CHECK(mr_policy_cuda_bytes(&cfg, 11, 10, 0, 5) == 0 && mr_policy_cuda_bytes(NULL, 11, 10, 0, 0) == 0);
    mr_pc_plan pl;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 24576, 0, MR_BF16, &e) == MR_OK &&
          mr_policy_cuda_bytes(&cfg, 11, 24576, 0, MR_BF16) == mr_pc_plan_bytes(&pl));
    memset(&pc, 0, sizeof pc);   /* never created */
    CHECK(mr_policy_cuda_forward(&pc, NULL, NULL, 1, 0, NULL, NULL, NULL, &e) == MR_ERR_ARG &&
          strstr(e.msg, "not created"));
    CHECK(mr_policy_cuda_forward(NULL, NULL, NULL, 1, 0, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_policy_cuda_backward(&pc, NULL, NULL, 1, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_policy_cuda_zero_grad(&pc, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_linear_forward(NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 0, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_conv3x3_backward(&pc, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 1, 1, NULL,
                                   &e) == MR_ERR_ARG);
    mr_policy_cuda_destroy(&pc);   /* a zeroed struct: no-op */
    mr_policy_cuda_destroy(NULL);
    if (mr_cuda_device_count() == 0) {
        /* a valid request on a machine without a GPU: cuBLAS refuses, nothing
         * is allocated, the message says why */
        mr_devmem dev;
        mr_devmem_backend be = {NULL, fake_alloc, fake_free, fake_free_bytes, (size_t)1 << 34, "fake GPU"};
        CHECK(mr_devmem_init(&dev, &be, NULL, &e) == MR_OK);
        const mr_status s = mr_policy_cuda_create(&pc, &cfg, 11, 10, 0, MR_FP32, &dev, &e);
        CHECK_MSG(s == MR_ERR_BACKEND && strstr(e.msg, "cuBLAS"), "status %d: %s", s, e.msg);
        mr_devmem_stats st;
        mr_devmem_stats_get(&dev, &st);
        CHECK(st.allocated_bytes == 0 && pc.blas == NULL);
        printf("  without a GPU, mr_policy_cuda_create says: %s\n", e.msg);
        mr_devmem_destroy(&dev);
    }
}

static mr_devmem dev;
static void *stream;
static int quick;


static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *dalloc(size_t bytes) {
    void *p = NULL;
    mr_error e;
    if (mr_devmem_alloc(&dev, bytes, "test buffer", &p, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
    return p;
}
static void dfree(void *p) { mr_devmem_free(&dev, p, NULL); }
static void up(void *d, const void *h, size_t bytes) {
    mr_error e;
    if (mr_cuda_copy(d, h, bytes, MR_COPY_H2D, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static void down(void *h, const void *d, size_t bytes) {
    mr_error e;
    if (mr_cuda_copy(h, d, bytes, MR_COPY_D2H, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static void *dup_up(const void *h, size_t bytes) {
    void *d = dalloc(bytes);
    if (d) up(d, h, bytes);
    return d;
}
static int sync_ok(const char *what) {
    mr_error e;
    const mr_status s = mr_cuda_stream_sync(stream, &e);
    CHECK_MSG(s == MR_OK, "%s: %s", what, e.msg);
    return s == MR_OK;
}
#define OK(call) do { mr_error e_; mr_status s_ = (call); CHECK_MSG(s_ == MR_OK, "%s: %s", #call, e_.msg); } while (0)
/* `call` must take &e_ as its error argument. */

/* The public layer functions against nn.c (fp32). */
static void gpu_layers(mr_policy_cuda *pc) {
    const int B = 3, H = 7, W = 5, C = 6, OC = 10, N = B * H * W;
    float *inp = frand((size_t)N * C, -1, 1), *w = frand((size_t)OC * 9 * C, -0.5, 0.5), *b = frand(OC, -0.3, 0.3);
    float *col = malloc(sizeof(float) * N * 9 * C), *out = malloc(sizeof(float) * N * OC);
    float *got = malloc(sizeof(float) * N * 9 * C);
    float *d_inp = dup_up(inp, 4 * (size_t)N * C), *d_w = dup_up(w, 4 * (size_t)OC * 9 * C), *d_b = dup_up(b, 4 * OC);
    float *d_col = dalloc(4 * (size_t)N * 9 * C), *d_out = dalloc(4 * (size_t)N * OC);
    for (int relu = 0; relu < 2; relu++) {
        if (relu) mr_conv3x3_relu_forward(out, col, inp, w, b, B, H, W, C, OC);
        else mr_conv3x3_forward(out, col, inp, w, b, B, H, W, C, OC);
        OK(mr_cuda_memset(d_out, 0xff, 4 * (size_t)N * OC, stream, &e_));
        OK(mr_cuda_conv3x3_forward(pc, d_out, d_col, d_inp, d_w, d_b, B, H, W, C, OC, relu, stream, &e_));
        down(got, d_out, 4 * (size_t)N * OC);
        sync_ok("conv forward");
        CHECK_MSG(check_relerr(got, out, (size_t)N * OC, 1e-30) < 1e-4, "GPU conv forward relu %d: %g", relu,
                  check_relerr(got, out, (size_t)N * OC, 1e-30));
        down(got, d_col, 4 * (size_t)N * 9 * C);
        sync_ok("im2col");
        CHECK(memcmp(got, col, 4 * (size_t)N * 9 * C) == 0);
    }
    float *dout = frand((size_t)N * OC, -1, 1), *dw = frand((size_t)OC * 9 * C, -1, 1), *db = frand(OC, -1, 1);
    float *dinp = frand((size_t)N * C, -1, 1), *mask = frand((size_t)N * C, -1, 1);
    float *d_dout = dup_up(dout, 4 * (size_t)N * OC), *d_dw = dup_up(dw, 4 * (size_t)OC * 9 * C);
    float *d_db = dup_up(db, 4 * OC), *d_dinp = dup_up(dinp, 4 * (size_t)N * C), *d_mask = dup_up(mask, 4 * (size_t)N * C);
    double *d_part = dalloc(8 * mr_pc_bias_partials(N, OC));
    mr_conv3x3_backward(dinp, dw, db, col, dout, inp, w, B, H, W, C, OC);
    OK(mr_cuda_conv3x3_backward(pc, d_dinp, NULL, d_dw, d_db, d_part, d_col, d_dout, d_inp, d_w, B, H, W, C, OC, stream,
                                &e_));
    float *g1 = malloc(4 * (size_t)OC * 9 * C), *g2 = malloc(4 * OC), *g3 = malloc(4 * (size_t)N * C);
    down(g1, d_dw, 4 * (size_t)OC * 9 * C);
    down(g2, d_db, 4 * OC);
    down(g3, d_dinp, 4 * (size_t)N * C);
    sync_ok("conv backward");
    CHECK_MSG(check_relerr(g1, dw, (size_t)OC * 9 * C, 1e-30) < 1e-4, "GPU conv dw %g", check_relerr(g1, dw, (size_t)OC * 9 * C, 1e-30));
    CHECK_MSG(check_relerr(g2, db, OC, 1e-30) < 1e-6, "GPU conv db %g", check_relerr(g2, db, OC, 1e-30));
    CHECK_MSG(check_relerr(g3, dinp, (size_t)N * C, 1e-30) < 1e-4, "GPU conv dinp %g", check_relerr(g3, dinp, (size_t)N * C, 1e-30));
    memset(dinp, 0, 4 * (size_t)N * C);
    mr_conv3x3_backward(dinp, NULL, NULL, col, dout, inp, w, B, H, W, C, OC);
    mr_relu_backward(dinp, dinp, mask, (size_t)N * C);
    OK(mr_cuda_memset(d_dinp, 0xff, 4 * (size_t)N * C, stream, &e_));
    OK(mr_cuda_conv3x3_backward(pc, d_dinp, d_mask, NULL, NULL, NULL, d_col, d_dout, d_inp, d_w, B, H, W, C, OC, stream,
                                &e_));
    down(g3, d_dinp, 4 * (size_t)N * C);
    sync_ok("conv backward (ReLU fused)");
    CHECK_MSG(check_relerr(g3, dinp, (size_t)N * C, 1e-30) < 1e-4, "GPU conv dinp fused %g", check_relerr(g3, dinp, (size_t)N * C, 1e-30));
    dfree(d_inp); dfree(d_w); dfree(d_b); dfree(d_col); dfree(d_out); dfree(d_dout); dfree(d_dw); dfree(d_db);
    dfree(d_dinp); dfree(d_mask); dfree(d_part);
    free(inp); free(w); free(b); free(col); free(out); free(got); free(dout); free(dw); free(db); free(dinp);
    free(mask); free(g1); free(g2); free(g3);

    const int LB = 1000, LC = 300, LO = 70;
    float *li = frand((size_t)LB * LC, -1, 1), *lw = frand((size_t)LO * LC, -0.2, 0.2), *lb = frand(LO, -0.3, 0.3);
    float *lo = malloc(4 * (size_t)LB * LO), *lg = malloc(4 * (size_t)LB * LC);
    float *d_li = dup_up(li, 4 * (size_t)LB * LC), *d_lw = dup_up(lw, 4 * (size_t)LO * LC), *d_lb = dup_up(lb, 4 * LO);
    float *d_lo = dalloc(4 * (size_t)LB * LO);
    for (int relu = 0; relu < 2; relu++) {
        if (relu) mr_linear_relu_forward(lo, li, lw, lb, LB, LC, LO);
        else mr_linear_forward(lo, li, lw, lb, LB, LC, LO);
        OK(mr_cuda_linear_forward(pc, d_lo, d_li, d_lw, d_lb, LB, LC, LO, relu, stream, &e_));
        down(lg, d_lo, 4 * (size_t)LB * LO);
        sync_ok("linear forward");
        CHECK_MSG(check_relerr(lg, lo, (size_t)LB * LO, 1e-30) < 1e-4, "GPU linear forward %g", check_relerr(lg, lo, (size_t)LB * LO, 1e-30));
    }
    float *ld = frand((size_t)LB * LO, -1, 1), *ldi = frand((size_t)LB * LC, -1, 1), *ldw = frand((size_t)LO * LC, -1, 1);
    float *ldb = frand(LO, -1, 1);
    float *d_ld = dup_up(ld, 4 * (size_t)LB * LO), *d_ldi = dup_up(ldi, 4 * (size_t)LB * LC);
    float *d_ldw = dup_up(ldw, 4 * (size_t)LO * LC), *d_ldb = dup_up(ldb, 4 * LO);
    double *d_lpart = dalloc(8 * mr_pc_bias_partials(LB, LO));
    mr_linear_backward(ldi, ldw, ldb, ld, li, lw, LB, LC, LO);
    OK(mr_cuda_linear_backward(pc, d_ldi, d_ldw, d_ldb, d_lpart, d_ld, d_li, d_lw, LB, LC, LO, stream, &e_));
    float *h1 = malloc(4 * (size_t)LB * LC), *h2 = malloc(4 * (size_t)LO * LC), *h3 = malloc(4 * LO);
    down(h1, d_ldi, 4 * (size_t)LB * LC);
    down(h2, d_ldw, 4 * (size_t)LO * LC);
    down(h3, d_ldb, 4 * LO);
    sync_ok("linear backward");
    CHECK_MSG(check_relerr(h1, ldi, (size_t)LB * LC, 1e-30) < 1e-4, "GPU linear dinp %g", check_relerr(h1, ldi, (size_t)LB * LC, 1e-30));
    CHECK_MSG(check_relerr(h2, ldw, (size_t)LO * LC, 1e-30) < 1e-4, "GPU linear dw %g", check_relerr(h2, ldw, (size_t)LO * LC, 1e-30));
    CHECK_MSG(check_relerr(h3, ldb, LO, 1e-30) < 1e-6, "GPU linear db %g", check_relerr(h3, ldb, LO, 1e-30));
    dfree(d_li); dfree(d_lw); dfree(d_lb); dfree(d_lo); dfree(d_ld); dfree(d_ldi); dfree(d_ldw); dfree(d_ldb);
    dfree(d_lpart);
    free(li); free(lw); free(lb); free(lo); free(lg); free(ld); free(ldi); free(ldw); free(ldb);
    free(h1); free(h2); free(h3);
    printf("  layers (conv 3x3 on 7x5, linear 300->70) against nn.c: done\n");
}

/* Device copies of a net's inputs. */
typedef struct dinputs { uint8_t *codes; float *extra, *dlogits, *dvalue, *logits, *value, *g0; } dinputs;
static void dinputs_make(dinputs *d, const inputs *in, int VV, const ref_net *r) {
    const size_t B = (size_t)in->B;
    d->codes = dup_up(in->codes, B * VV);
    d->extra = dup_up(in->extra, 4 * B * 2);
    d->dlogits = dup_up(in->dlogits, 4 * B * NA);
    d->dvalue = dup_up(in->dvalue, 4 * B);
    d->logits = dalloc(4 * B * NA);
    d->value = dalloc(4 * B);
    d->g0 = dup_up(r->g0, 4 * r->p.n_params);
}
static void dinputs_free(dinputs *d) {
    dfree(d->codes); dfree(d->extra); dfree(d->dlogits); dfree(d->dvalue); dfree(d->logits); dfree(d->value);
    dfree(d->g0);
}

/* One forward + backward on the GPU from a NaN-poisoned workspace and
 * grads = g0; results (workspace, outputs, grads) downloaded into h. */
typedef struct host_out { unsigned char *ws; float *logits, *value, *grads; } host_out;
static int gpu_net_run(mr_policy_cuda *pc, const dinputs *d, int B, int proxy, host_out *h) {
    OK(mr_cuda_memset(pc->ws, 0xff, pc->plan.o_blas, stream, &e_));
    OK(mr_cuda_memset(d->logits, 0xff, 4 * (size_t)B * NA, stream, &e_));
    OK(mr_cuda_memset(d->value, 0xff, 4 * (size_t)B, stream, &e_));
    OK(mr_cuda_copy(pc->grads, d->g0, pc->plan.param_bytes, MR_COPY_D2D, stream, &e_));
    OK(mr_policy_cuda_forward(pc, d->codes, d->extra, B, proxy, d->logits, d->value, stream, &e_));
    OK(mr_policy_cuda_backward(pc, d->dlogits, d->dvalue, B, stream, &e_));
    if (h) {
        down(h->ws, pc->ws, pc->plan.o_blas);
        down(h->logits, d->logits, 4 * (size_t)B * NA);
        down(h->value, d->value, 4 * (size_t)B);
        down(h->grads, pc->grads, pc->plan.param_bytes);
    }
    return sync_ok("policy forward + backward");
}

static void host_out_make(host_out *h, const mr_pc_plan *pl) {
    h->ws = malloc(pl->o_blas);
    h->logits = malloc(4 * (size_t)pl->max_batch * NA);
    h->value = malloc(4 * (size_t)pl->max_batch);
    h->grads = malloc(pl->param_bytes);
}
static void host_out_free(host_out *h) { free(h->ws); free(h->logits); free(h->value); free(h->grads); }

/* The network at one size, every precision and observation mode, against the
 * CPU policy; then a repeat (bit-identical), a CUDA graph of forward +
 * backward (bit-identical to the uncaptured run) and no allocation in
 * steady state. */
static void gpu_net(const char *name, const mr_policy_config *cfg, int view, int B, int chunk) {
    ref_net r;
    CHECK(ref_make(&r, cfg, view, B, 64));
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, view * view);
    dinputs d;
    dinputs_make(&d, &in, view * view, &r);
    for (int proxy = 0; proxy < 2; proxy++) {
        ref_run(&r, &in, proxy);
        for (int dt = 0; dt < 3; dt++) {
            mr_policy_cuda pc;
            mr_error e;
            if (mr_policy_cuda_create(&pc, cfg, view, B, chunk, dt, &dev, &e) != MR_OK) {
                CHECK_MSG(0, "create: %s", e.msg);
                continue;
            }
            up(pc.params, r.p.params, pc.plan.param_bytes);
            host_out h;
            host_out_make(&h, &pc.plan);
            if (gpu_net_run(&pc, &d, B, proxy, &h)) {
                char label[96];
                snprintf(label, sizeof label, "GPU %s net, %s, proxy %d", name, prec_name(dt), proxy);
                const net_out o = {h.ws, h.logits, h.value, h.grads};
                const double w = cmp_cpu(label, &r, &pc.plan, &o, B, 1e-4, 1);
                /* and against the emulated schedule in the same precision */
                emu_net n;
                double w2 = -1;
                if (emu_net_make(&n, cfg, view, B, chunk, dt)) {
                    mr_error e2;
                    CHECK_MSG(emu_net_run(&n, r.p.params, r.g0, &in, proxy, &e2) == MR_OK, "%s", e2.msg);
                    const net_out oe = emu_out(&n);
                    const net_view a = view_out(&pc.plan, &o), b = view_out(&n.pl, &oe);
                    char l2[128];
                    snprintf(l2, sizeof l2, "%s vs emulated %s", label, prec_name(dt));
                    w2 = net_compare(l2, &r.p, &a, &b, B, 0, 0, 0);   /* a measurement (see tol_fwd) */
                    emu_net_free(&n);
                }
                double wl = 0;
                if (dt != MR_FP32) wl = lp_layers(label, &pc.plan, &o, r.p.params, r.g0, &in, B, proxy, tol_layer(dt), 1);
                printf("  %s (B %d, chunk %d): largest relative error %.2e against the CPU policy (tolerance "
                       "%.2g, %.2g for gradients); layer by layer against the emulation %.1e (tolerance %.0e); "
                       "whole network against the emulation in %s %.1e (not checked)\n", label, B, pc.plan.chunk,
                       w, tol_fwd(dt), tol_grad(dt), wl, tol_layer(dt), prec_name(dt), w2);
            }
            if (proxy == 1) {
                /* repeat: bit-identical (no atomics anywhere) */
                float *g2 = malloc(pc.plan.param_bytes), *l2 = malloc(4 * (size_t)B * NA);
                mr_devmem_stats s0, s1;
                mr_devmem_stats_get(&dev, &s0);
                gpu_net_run(&pc, &d, B, proxy, NULL);
                down(g2, pc.grads, pc.plan.param_bytes);
                down(l2, d.logits, 4 * (size_t)B * NA);
                sync_ok("repeat");
                mr_devmem_stats_get(&dev, &s1);
                CHECK(memcmp(g2, h.grads, pc.plan.param_bytes) == 0 && memcmp(l2, h.logits, 4 * (size_t)B * NA) == 0);
                CHECK(s1.allocations == s0.allocations && s1.raw_allocations == s0.raw_allocations);
                /* zero_grad zeroes */
                OK(mr_policy_cuda_zero_grad(&pc, stream, &e_));
                down(g2, pc.grads, pc.plan.param_bytes);
                sync_ok("zero_grad");
                size_t nz = 0;
                for (size_t k = 0; k < pc.plan.net.n_params; k++) nz += g2[k] != 0.0f;
                CHECK(nz == 0);
                /* a CUDA graph of (grads = g0) + forward + backward, replayed */
                cudaStream_t s = (cudaStream_t)stream;
                cudaGraph_t graph = NULL;
                cudaGraphExec_t exec = NULL;
                OK(mr_cuda_memset(pc.grads, 0xff, pc.plan.param_bytes, stream, &e_));
                sync_ok("before capture");
                cudaError_t ce = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
                CHECK_MSG(ce == cudaSuccess, "begin capture: %s", cudaGetErrorString(ce));
                OK(mr_cuda_copy(pc.grads, d.g0, pc.plan.param_bytes, MR_COPY_D2D, stream, &e_));
                OK(mr_policy_cuda_forward(&pc, d.codes, d.extra, B, proxy, d.logits, d.value, stream, &e_));
                OK(mr_policy_cuda_backward(&pc, d.dlogits, d.dvalue, B, stream, &e_));
                ce = cudaStreamEndCapture(s, &graph);
                CHECK_MSG(ce == cudaSuccess, "end capture: %s", cudaGetErrorString(ce));
                if (ce == cudaSuccess) {
                    ce = cudaGraphInstantiate(&exec, graph, 0);
                    CHECK_MSG(ce == cudaSuccess, "instantiate: %s", cudaGetErrorString(ce));
                    for (int k = 0; k < 2 && ce == cudaSuccess; k++) ce = cudaGraphLaunch(exec, s);
                    CHECK_MSG(ce == cudaSuccess, "graph launch: %s", cudaGetErrorString(ce));
                    down(g2, pc.grads, pc.plan.param_bytes);
                    sync_ok("graph replay");
                    CHECK_MSG(memcmp(g2, h.grads, pc.plan.param_bytes) == 0, "%s: graph replay differs", name);
                    if (exec) cudaGraphExecDestroy(exec);
                    cudaGraphDestroy(graph);
                }
                free(g2);
                free(l2);
            }
            host_out_free(&h);
            mr_policy_cuda_destroy(&pc);
        }
    }
    dinputs_free(&d);
    inputs_free(&in);
    ref_free(&r);
}

/* Batch 24,576, the reference net: the GPU against the CPU policy (fp32
 * bound; bf16 / fp16 their bounds), and the time of a forward and of a
 * backward in each precision. */
static void gpu_big(void) {
    const int B = 24576, V = 11;
    mr_policy_config cfg;
    ref_cfg(&cfg);
    ref_net r;
    if (!ref_make(&r, &cfg, V, B, 64)) { CHECK_MSG(0, "CPU policy for batch %d", B); return; }
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, V * V);
    double t0 = now();
    ref_run(&r, &in, 0);
    printf("  CPU reference forward + backward at batch %d: %.2f s\n", B, now() - t0);
    dinputs d;
    dinputs_make(&d, &in, V * V, &r);
    const double flop = 2.0 * 11.1e6 * B;   /* multiply-adds per sample (policy.c) */
    for (int dt = 0; dt < 3; dt++) {
        mr_policy_cuda pc;
        mr_error e;
        if (mr_policy_cuda_create(&pc, &cfg, V, B, 0, dt, &dev, &e) != MR_OK) {
            CHECK_MSG(0, "create at batch %d: %s", B, e.msg);
            continue;
        }
        up(pc.params, r.p.params, pc.plan.param_bytes);
        host_out h;
        host_out_make(&h, &pc.plan);
        if (gpu_net_run(&pc, &d, B, 0, &h)) {
            char label[96];
            snprintf(label, sizeof label, "GPU reference net at batch %d, %s", B, prec_name(dt));
            const net_out o = {h.ws, h.logits, h.value, h.grads};
            const double w = cmp_cpu(label, &r, &pc.plan, &o, B, 1e-4, 1);
            printf("  %s: largest relative error %.2e\n", label, w);
        }
        host_out_free(&h);
        const int reps = 5;
        double tf = 0, tb = 0;
        for (int k = 0; k < reps + 1; k++) {   /* the first is a warm-up */
            sync_ok("timing");
            double a = now();
            OK(mr_policy_cuda_forward(&pc, d.codes, d.extra, B, 0, d.logits, d.value, stream, &e_));
            sync_ok("forward");
            double b = now();
            OK(mr_policy_cuda_backward(&pc, d.dlogits, d.dvalue, B, stream, &e_));
            sync_ok("backward");
            if (k) { tf += b - a; tb += now() - b; }
        }
        tf /= reps;
        tb /= reps;
        printf("  %s at batch %d: forward %.2f ms (%.0f TFLOP/s), backward %.2f ms (%.0f TFLOP/s), "
               "device memory %.2f GiB\n", prec_name(dt), B, tf * 1e3, flop / tf * 1e-12, tb * 1e3,
               2 * flop / tb * 1e-12, (double)mr_pc_plan_bytes(&pc.plan) / (1u << 30));
        mr_policy_cuda_destroy(&pc);
    }
    dinputs_free(&d);
    inputs_free(&in);
    ref_free(&r);
}

static void gpu_tests(void) {
    mr_error e;
    mr_devmem_backend be;
    if (mr_devmem_cuda_backend(0, &be, &e) != MR_OK || mr_devmem_init(&dev, &be, NULL, &e) != MR_OK ||
        mr_cuda_stream_create(&stream, &e) != MR_OK) {
        CHECK_MSG(0, "%s", e.msg);
        return;
    }
    mr_policy_config cfg;
    small_cfg(&cfg);
    mr_policy_cuda pc;
    if (mr_policy_cuda_create(&pc, &cfg, 5, 4, 0, MR_FP32, &dev, &e) != MR_OK) {
        CHECK_MSG(0, "create: %s", e.msg);
    } else {
        gpu_layers(&pc);
        /* argument checks on a created policy */
        CHECK(mr_policy_cuda_forward(&pc, NULL, NULL, 5, 0, NULL, NULL, stream, &e) == MR_ERR_ARG &&
              strstr(e.msg, "max_batch"));
        CHECK(mr_policy_cuda_backward(&pc, NULL, NULL, 1, stream, &e) == MR_ERR_ARG && strstr(e.msg, "last forward"));
        mr_policy_cuda_destroy(&pc);
    }
    gpu_net("small", &cfg, 5, 37, 8);
    ref_cfg(&cfg);
    gpu_net("reference", &cfg, 11, 300, 128);
    if (!quick) gpu_big();
    else printf("  batch 24,576 comparison and timings: skipped (--quick)\n");
    mr_devmem_stats st;
    mr_devmem_stats_get(&dev, &st);
    CHECK(st.allocated_bytes == 0);   /* everything created was given back */
    printf("  device memory: %llu allocations, peak %.2f GiB\n", (unsigned long long)st.allocations,
           (double)st.peak_allocated_bytes / (1u << 30));
    mr_cuda_stream_sync(stream, NULL);
    mr_cuda_stream_destroy(stream);
    mr_devmem_destroy(&dev);
}
#endif /* MOONRL_HAVE_CUDA */

int main(int argc, char **argv) {
    check_seed(0x0badc0ffee123457ull);
    const char *seed = getenv("MOONRL_TEST_SEED");   /* a different random draw of every test input */
    if (seed) check_rng_state ^= strtoull(seed, NULL, 10) * 0x9e3779b97f4a7c15ull;
    for (int i = 1; i < argc; i++) {
        verbose |= strcmp(argv[i], "--verbose") == 0;
        calibrate |= strcmp(argv[i], "--calibrate") == 0;
#ifdef MOONRL_HAVE_CUDA
        quick |= strcmp(argv[i], "--quick") == 0;
#endif
    }
    test_formats();
    test_plan();
    test_layers_emulated();
    mr_policy_config cfg;
    small_cfg(&cfg);
    net_emulated("small", &cfg, 5, 9, 4, 2);
    net_emulated("small", &cfg, 5, 200, 180, 16);   /* 4500 rows per conv chunk: two-level bias sums */
    ref_cfg(&cfg);
    net_emulated("reference", &cfg, 11, 10, 4, 3);
    if (calibrate) {   /* the sizes of the GPU part */
        net_emulated("reference", &cfg, 11, 300, 128, 64);
        small_cfg(&cfg);
        net_emulated("small", &cfg, 5, 37, 8, 64);
    }
    for (int dt = 0; dt < 3; dt++) test_fault_injection(dt);
#ifdef MOONRL_HAVE_CUDA
    test_cuda_arg_checks();
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_policy: skipped: no GPU (GPU checks not run; CPU checks above)\n");
#else
    printf("test_cuda_policy: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_policy");
}

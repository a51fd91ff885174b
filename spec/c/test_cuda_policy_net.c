/*
 * test_cuda_policy_net.c - the GPU policy network as a whole (kernels/policy.cu,
 * schedule in kernels/policy_math.h) against the CPU policy
 * (mr_policy_forward / mr_policy_backward, src/engine/policy.c).
 *
 * Always (CPU): the whole schedule run through pc_emu.h's emulator of its
 * three operations (GEMM as a column-major cblas_sgemm given exactly
 * cuBLAS's arguments, elementwise jobs as a loop over the very MR_HD function
 * the kernels run), compared with the CPU policy run forward and backward
 * onto non-zero gradients: logits, value, every activation and every
 * parameter's gradient; small net at batch 9 and 200 (two-level bias sums),
 * reference net at 10; both observation modes; the small net on 4 and 3
 * one-hot input channels (snake's observation); a float image (catch's
 * kind) of 2 and 3 channels with 0, 1 and 2 privileged critic inputs (the
 * extras past them read 0 on both sides); fp32 within 1e-4 (max norm),
 * bf16 / fp16 within the bounds explained at policy_check.h's tol_fwd, and
 * layer by layer (lp_layers, each layer recomputed from the run's own stored
 * inputs) within tol_layer - a check shown to notice a corrupted layer.
 * With a GPU: the network (small net at batch 37, on 2 and 4 input
 * channels and on float images of 2 and 3, reference net at 300, both
 * observation modes, three precisions, the workspace poisoned with NaN first)
 * against the CPU policy, and in bf16 / fp16 layer by layer against the
 * emulation (lp_layers); bit-identical results on a repeat; zero_grad; a
 * CUDA-graph capture of forward + backward replayed bit-identically; no
 * device allocation in steady state; at batch 24,576 the comparison again and
 * the time of a forward and a backward per precision (skipped with --quick,
 * e.g. under compute-sanitizer). Without a GPU the GPU part prints
 * "skipped: no GPU".
 * Options: --verbose (every compared item), --calibrate (the emulated
 * comparison at the GPU part's sizes); MOONRL_TEST_SEED=n draws other inputs.
 */
#include "policy_check.h"

static int calibrate; /* --calibrate: the emulated schedule at the GPU test's sizes too (slow on few cores) */

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
    const mr_net_layout *p = &pl->net;
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
        CHECK(mr_pc_conv_forward(&ops, dt, t, col, l ? bf.act[l - 1] : NULL, in->codes, mr_pc_obs_proxy(pl, proxy),
                                 W(p->conv_w[l]),
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
        const mr_tensor_info *ti = mr_net_tensor(p, heads[h]);
        snprintf(what, sizeof what, "gradient of %s", heads[h]);
        CMP(what, gw + ti->offset, MR_FP32, o->grads + ti->offset, MR_FP32, 1, (int)ti->count, 0, 0);
    }
#undef CMP
#undef W
    CHECK(e.bad_args == 0);
    free(t); free(col); free(tf); free(gw); free(part); free(dl); free(dv);
    return worst;
}

/* ================================================================ CPU: network, emulated */

static void net_emulated(const char *name, const mr_policy_config *cfg, int view, int B, int gpu_chunk, int cpu_chunk) {
    ref_net r;
    CHECK(ref_make(&r, cfg, view, B, cpu_chunk));
    random_params(&r.p);
    inputs in;
    const int C = cfg->obs_channels > 0 ? cfg->obs_channels : 2;
    inputs_for(&in, cfg, B, view * view);
    /* the proxies are foraging's (C = 2 codes); a float image has none */
    for (int proxy = 0; proxy < (C == 2 && !cfg->obs_image ? 2 : 1); proxy++) {
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

/* ================================================================ GPU */
#ifdef MOONRL_HAVE_CUDA
static int quick;     /* --quick: no batch 24,576 (e.g. under compute-sanitizer) */

/* Device copies of a net's inputs. */
typedef struct dinputs { uint8_t *codes; float *extra, *dlogits, *dvalue, *logits, *value, *g0; } dinputs;
static void dinputs_make(dinputs *d, const inputs *in, const ref_net *r) {
    const size_t B = (size_t)in->B;
    d->codes = dup_up(in->codes, B * (size_t)r->p.obs_row);   /* codes, or a float image */
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
    const int C = cfg->obs_channels > 0 ? cfg->obs_channels : 2;
    inputs_for(&in, cfg, B, view * view);
    dinputs d;
    dinputs_make(&d, &in, &r);
    /* the proxies are foraging's (C = 2 codes); a float image has none */
    for (int proxy = 0; proxy < (C == 2 && !cfg->obs_image ? 2 : 1); proxy++) {
        ref_run(&r, &in, proxy);
        up(d.g0, r.g0, sizeof(float) * r.p.n_params);   /* g0 is made by ref_run, per observation mode */
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
            if (proxy == 1 || cfg->obs_image) {
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
    /* The fp32 reference's own rounding at this batch: a gradient sums 24,576
     * terms of both signs, so two fp32 summation orders differ by far more
     * than at batch 300. Measured: the CPU policy again with another chunk
     * (another order); the GPU (a third order) must stay within 4 times that
     * spread, and within 1e-4 where the spread is smaller. */
    double spread = 0;
    {
        ref_net r2;
        if (ref_make(&r2, &cfg, V, B, 512)) {
            memcpy(r2.p.params, r.p.params, sizeof(float) * r.p.n_params);
            ref_run(&r2, &in, 0);
            const net_view a = view_cpu(&r2), b = view_cpu(&r);
            spread = net_compare("CPU policy, chunk 512 vs 64", &r.p, &a, &b, B, 0, 0, 0);
            ref_free(&r2);
        }
    }
    const double tol32 = spread * 4 > 1e-4 ? spread * 4 : 1e-4;
    printf("  CPU policy at batch %d, chunk 512 against chunk 64: largest relative error %.2e (fp32 tolerance "
           "for the GPU: %.2e)\n", B, spread, tol32);
    dinputs d;
    dinputs_make(&d, &in, &r);
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
            const double w = cmp_cpu(label, &r, &pc.plan, &o, B, tol32, 1);
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
    if (!gpu_open()) return;
    policy_check_at(PC_AT_GPU_NET);
    mr_policy_config cfg;
    small_cfg(&cfg);
    gpu_net("small", &cfg, 5, 37, 8);
    cfg.obs_channels = 4;   /* snake's observation: 4 one-hot channels */
    gpu_net("small, 4 channels,", &cfg, 5, 37, 8);
    small_cfg(&cfg);   /* a float image (catch's kind): 2 and 3 channels, 0 and 1 privileged inputs */
    cfg.obs_image = 1;
    cfg.obs_channels = 2;
    gpu_net("small, float image of 2 channels, critic_extra 0,", &cfg, 8, 37, 8);
    cfg.obs_channels = 3;
    cfg.critic_extra = 1;
    gpu_net("small, float image of 3 channels, critic_extra 1,", &cfg, 5, 37, 8);
    ref_cfg(&cfg);
    gpu_net("reference", &cfg, 11, 300, 128);
    if (!quick) gpu_big();
    else printf("  batch 24,576 comparison and timings: skipped (--quick)\n");
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    for (int i = 1; i < argc; i++) {
        calibrate |= strcmp(argv[i], "--calibrate") == 0;
#ifdef MOONRL_HAVE_CUDA
        quick |= strcmp(argv[i], "--quick") == 0;
#endif
    }
    policy_check_at(PC_AT_NET);
    mr_policy_config cfg;
    small_cfg(&cfg);
    net_emulated("small", &cfg, 5, 9, 4, 2);
    net_emulated("small", &cfg, 5, 200, 180, 16);   /* 4500 rows per conv chunk: two-level bias sums */
    cfg.obs_channels = 4;   /* snake's observation: 4 one-hot channels (and 3 on an even view) */
    net_emulated("small, 4 channels,", &cfg, 5, 9, 4, 2);
    cfg.obs_channels = 3;
    net_emulated("small, 3 channels,", &cfg, 6, 7, 3, 2);
    /* a float image (catch's kind, C x V x V floats read channels last; its
     * critic reads the image and critic_extra privileged inputs, 0 past them) */
    small_cfg(&cfg);
    cfg.obs_image = 1;
    cfg.obs_channels = 2;
    net_emulated("small, float image of 2 channels, critic_extra 0,", &cfg, 5, 9, 4, 2);
    cfg.obs_channels = 3;
    cfg.critic_extra = 1;
    net_emulated("small, float image of 3 channels, critic_extra 1,", &cfg, 6, 7, 3, 2);
    cfg.critic_extra = 2;
    net_emulated("small, float image of 3 channels, critic_extra 2,", &cfg, 5, 200, 180, 16);
    ref_cfg(&cfg);
    net_emulated("reference", &cfg, 11, 10, 4, 3);
    if (calibrate) {   /* the sizes of the GPU part */
        net_emulated("reference", &cfg, 11, 300, 128, 64);
        small_cfg(&cfg);
        net_emulated("small", &cfg, 5, 37, 8, 64);
    }
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_policy_net: skipped: no GPU (GPU checks not run; CPU checks above)\n");
#else
    printf("test_cuda_policy_net: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_policy_net");
}

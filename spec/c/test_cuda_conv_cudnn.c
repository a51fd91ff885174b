/*
 * test_cuda_conv_cudnn.c - cuda.conv = "cudnn" / "auto": the trunk's layers
 * 1.. through the schedule's conv operation (policy_layers.h's mr_pc_conv,
 * mr_pc_dnn_forward / _backward), which policy.cu fills with cuDNN
 * (kernels/conv_cudnn.cu).
 *
 * Always (CPU): cuda.conv's per-layer answer (mr_cuda_conv_resolve: im2col,
 * cudnn, auto with the cache's layers, cuDNN missing); the plan's cuDNN
 * regions (mr_pc_plan_dnn: sizes, alignment, disjoint, nothing without a
 * cuDNN layer); and the whole network's schedule with the conv operation
 * emulated by a direct convolution summed in double (an independent
 * reference for what cuDNN computes: forward written, input gradient
 * written then the ReLU mask, weight gradient ADDED) against the CPU policy
 * (mr_policy_forward / _backward onto non-zero gradients), fp32 within 1e-4,
 * bf16 / fp16 within policy_check.h's bounds; every conv operation kind was
 * called; a conv operation that overwrites the weight gradient, or skips the
 * input gradient, is caught.
 * With a GPU (the window): the network with cuDNN on layers 1.. against the
 * CPU policy and against the im2col network on the GPU (fp32: 1e-4), three
 * precisions, two sizes (chunks that split the batch unevenly); a repeat
 * bit-identical (deterministic algorithms only); a CUDA graph of forward +
 * backward replayed bit-identically; mr_cuda_conv_time per precision (both
 * paths timed, cuDNN's algorithms found; its figures printed). cuDNN must be
 * loadable there (LD_LIBRARY_PATH: PyTorch's nvidia/cudnn/lib, which
 * bench/gpu_session.sh adds): a missing cuDNN fails, unless
 * MOONRL_TEST_NO_CUDNN=1 says the machine has none. Without a GPU:
 * "skipped: no GPU".
 */
#include "policy_check.h"
#ifdef MOONRL_HAVE_CUDA
#include "conv_cudnn.h"
#include "graph_cuda.h"
#endif

/* ================================================================ resolve */

static void test_resolve(void) {
    int8_t dnn[MR_MAX_CONV];
    int algo[MR_MAX_CONV][3];
    char note[240];
    mr_cuda_config c;
    memset(&c, 0, sizeof c);
    mr_cuda_conv_resolve(NULL, 3, 1, NULL, dnn, algo, note, sizeof note);
    CHECK(dnn[0] == 0 && dnn[1] == 0 && dnn[2] == 0);
    c.conv = MR_CUDA_CONV_IM2COL;
    c.conv_layers[1].impl = MR_CUDA_CONV_CUDNN;   /* im2col is whole-network: layers ignored */
    mr_cuda_conv_resolve(&c, 3, 1, NULL, dnn, algo, note, sizeof note);
    CHECK(dnn[1] == 0 && dnn[2] == 0);
    CHECK(strstr(note, "1 im2col, 2 im2col") != NULL);
    c.conv = MR_CUDA_CONV_CUDNN;
    c.conv_layers[1].algo[0] = 1, c.conv_layers[1].algo[1] = 0, c.conv_layers[1].algo[2] = 3;
    mr_cuda_conv_resolve(&c, 3, 1, NULL, dnn, algo, note, sizeof note);
    CHECK(dnn[0] == 0 && dnn[1] == 1 && dnn[2] == 1 && dnn[3] == 0);
    CHECK(algo[1][0] == 1 && algo[1][1] == 0 && algo[1][2] == 3);
    CHECK(algo[2][0] == -1 && algo[2][1] == -1 && algo[2][2] == -1);   /* not cached: heuristics */
    CHECK(strstr(note, "layer 0 im2col (from the codes), 1 cuDNN, 2 cuDNN") != NULL);
    c.conv = MR_CUDA_CONV_AUTO;
    mr_cuda_conv_resolve(&c, 3, 1, NULL, dnn, algo, note, sizeof note);
    CHECK(dnn[1] == 1 && dnn[2] == 0);   /* auto: the layers' own answers, im2col where none */
    c.conv_layers[2].impl = MR_CUDA_CONV_IM2COL;
    c.conv = MR_CUDA_CONV_CUDNN;
    mr_cuda_conv_resolve(&c, 3, 1, NULL, dnn, algo, note, sizeof note);
    CHECK(dnn[1] == 1 && dnn[2] == 0);   /* a layer's own im2col wins over the config's cudnn */
    mr_cuda_conv_resolve(&c, 3, 0, "no libcudnn.so.9", dnn, algo, note, sizeof note);
    CHECK(dnn[1] == 0 && dnn[2] == 0);
    CHECK_MSG(strstr(note, "unavailable: no libcudnn.so.9") != NULL, "%s", note);
    mr_cuda_conv_resolve(&c, 1, 1, NULL, dnn, algo, note, sizeof note);   /* one layer: nothing to choose */
    CHECK(dnn[0] == 0);
}

/* ================================================================ plan */

static void test_plan(void) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    cfg.num_conv = 3;
    cfg.conv_channels[2] = 24;
    for (int dt = 0; dt < 3; dt++) {
        mr_pc_plan a, b;
        mr_error e;
        CHECK(mr_pc_plan_make(&a, &cfg, 5, 40, 16, dt, &e) == MR_OK);
        b = a;
        mr_pc_plan_dnn(&b, NULL);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        const int8_t none[MR_MAX_CONV] = {1, 0, 0};   /* [0] is ignored: the first layer reads the codes */
        mr_pc_plan_dnn(&b, none);
        CHECK(b.ws_bytes == a.ws_bytes && b.dnn_ws_bytes == 0);
        const int8_t two[MR_MAX_CONV] = {0, 0, 1};
        b = a;
        mr_pc_plan_dnn(&b, two);
        const size_t wmax = (size_t)24 * 9 * 8 * (size_t)mr_pc_esize(dt);
        CHECK(b.dnn[2] == 1 && b.dnn[1] == 0 && b.dnn_ws_bytes == MR_PC_DNN_WS);
        CHECK(b.o_dnn_ws == a.ws_bytes && b.o_dnn_ws % MR_PC_ALIGN == 0);
        if (dt == MR_FP32) CHECK(b.ws_bytes == a.ws_bytes + mr_pc_round(MR_PC_DNN_WS));
        else CHECK(b.o_dnn_dw == b.o_dnn_ws + mr_pc_round(MR_PC_DNN_WS) && b.ws_bytes == b.o_dnn_dw + mr_pc_round(wmax));
        mr_pc_bufs bf;
        unsigned char *base = (unsigned char *)(uintptr_t)4096;
        mr_pc_carve(&b, base, &bf);
        CHECK(bf.dnn_ws == base + b.o_dnn_ws && (dt == MR_FP32 ? bf.dnn_dw == NULL : bf.dnn_dw == base + b.o_dnn_dw));
        CHECK((unsigned char *)bf.blas + MR_PC_BLAS_WS <= (unsigned char *)bf.dnn_ws);
    }
}

/* ================================================================ emulated conv operation */

static long conv_calls[4];
static int conv_fault;   /* 1: the weight gradient overwritten, 2: the input gradient left out */

static mr_status emu_conv(void *ctx, const mr_pc_conv *c, mr_error *err) {
    (void)ctx;
    (void)err;
    conv_calls[c->op]++;
    const int H = c->H, W = c->W, C = c->C, OC = c->OC, dt = c->dt;
    const size_t HW = (size_t)H * W;
    if (c->op == MR_PCC_BWD_DATA && conv_fault == 2) return MR_OK;
    for (int b = 0; b < c->n; b++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                const size_t pix = (size_t)b * HW + (size_t)y * W + x;
                if (c->op == MR_PCC_FWD) {
                    for (int o = 0; o < OC; o++) {
                        double s = 0;
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                const int yy = y + ky - 1, xx = x + kx - 1;
                                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                                const size_t in = ((size_t)b * HW + (size_t)yy * W + xx) * C;
                                const size_t wk = ((size_t)o * 9 + (size_t)(ky * 3 + kx)) * C;
                                for (int ci = 0; ci < C; ci++)
                                    s += (double)mr_pc_ld(c->x, in + ci, dt) * mr_pc_ld(c->w, wk + ci, dt);
                            }
                        mr_pc_st(c->y, pix * OC + o, dt, (float)s);
                    }
                } else if (c->op == MR_PCC_BWD_DATA) {
                    for (int ci = 0; ci < C; ci++) {
                        double s = 0;
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                const int oy = y - ky + 1, ox = x - kx + 1;
                                if (oy < 0 || oy >= H || ox < 0 || ox >= W) continue;
                                const size_t g = ((size_t)b * HW + (size_t)oy * W + ox) * OC;
                                for (int o = 0; o < OC; o++)
                                    s += (double)mr_pc_ld(c->dy, g + o, dt) *
                                         mr_pc_ld(c->w, ((size_t)o * 9 + (size_t)(ky * 3 + kx)) * C + ci, dt);
                            }
                        mr_pc_st(c->y, pix * C + ci, dt, (float)s);
                    }
                }
            }
    if (c->op == MR_PCC_BWD_FILTER) {
        for (int o = 0; o < OC; o++)
            for (int t = 0; t < 9; t++)
                for (int ci = 0; ci < C; ci++) {
                    double s = 0;
                    const int ky = t / 3, kx = t % 3;
                    for (int b = 0; b < c->n; b++)
                        for (int y = 0; y < H; y++)
                            for (int x = 0; x < W; x++) {
                                const int yy = y + ky - 1, xx = x + kx - 1;
                                if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                                s += (double)mr_pc_ld(c->dy, ((size_t)b * HW + (size_t)y * W + x) * OC + o, dt) *
                                     mr_pc_ld(c->x, ((size_t)b * HW + (size_t)yy * W + xx) * C + ci, dt);
                            }
                    float *d = c->dw + ((size_t)o * 9 + t) * C + ci, g = (float)s;
                    if (dt != MR_FP32) {   /* policy.cu: cuDNN's gradient in T, then added into fp32 */
                        uint16_t h;
                        mr_pc_st(&h, 0, dt, g);
                        g = mr_pc_ld(&h, 0, dt);
                    }
                    *d = conv_fault == 1 ? g : *d + g;
                }
    }
    return MR_OK;
}

/* The schedule with layers 1.. through the emulated conv operation, against
 * the CPU policy. Returns the largest error (the report's checks at tol). */
static double emulated(const char *name, const mr_policy_config *cfg, int view, int B, int chunk, int dt,
                       int report) {
    ref_net r;
    double w = NAN;
    CHECK(ref_make(&r, cfg, view, B, 16));
    random_params(&r.p);
    inputs in;
    inputs_for(&in, cfg, B, view * view);   /* codes, or a float image */
    ref_run(&r, &in, 0);
    emu_net n;
    if (emu_net_make(&n, cfg, view, B, chunk, dt)) {
        int8_t all[MR_MAX_CONV];
        for (int l = 0; l < MR_MAX_CONV; l++) all[l] = 1;
        mr_pc_plan_dnn(&n.pl, all);
        unsigned char *ws = realloc(n.ws, n.pl.ws_bytes);   /* the plan grew; the cuDNN regions stay unused */
        if (ws) {
            n.ws = ws;
            mr_pc_carve(&n.pl, n.ws, &n.bf);
            n.o.conv = emu_conv;
            memset(conv_calls, 0, sizeof conv_calls);
            mr_error e;
            CHECK_MSG(emu_net_run(&n, r.p.params, r.g0, &in, 0, &e) == MR_OK, "%s", e.msg);
            const net_out o = emu_out(&n);
            char label[96];
            snprintf(label, sizeof label, "%s, conv operation, %s", name, prec_name(dt));
            w = cmp_cpu(label, &r, &n.pl, &o, B, 1e-4, report);
            const long chunks = (B + n.pl.chunk - 1) / n.pl.chunk, L1 = cfg->num_conv - 1;
            if (report) {
                CHECK_MSG(conv_calls[MR_PCC_FWD] == chunks * L1 && conv_calls[MR_PCC_BWD_FILTER] == chunks * L1 &&
                          conv_calls[MR_PCC_BWD_DATA] == chunks * L1,
                          "%s: conv operations %ld / %ld / %ld, expected %ld each", label, conv_calls[1],
                          conv_calls[2], conv_calls[3], chunks * L1);
                printf("  %s (B %d, chunk %d): largest relative error %.2e against the CPU policy\n", label, B,
                       n.pl.chunk, w);
            }
        }
        emu_net_free(&n);
    }
    inputs_free(&in);
    ref_free(&r);
    return w;
}

static void test_emulated(void) {
    policy_check_at(PC_AT_NET);
    mr_policy_config cfg;
    small_cfg(&cfg);
    cfg.num_conv = 3;   /* layers 1 and 2 through the operation: layer 2's input gradient takes layer 1's mask */
    cfg.conv_channels[2] = 8;
    for (int dt = 0; dt < 3; dt++) emulated("small 3-layer net", &cfg, 5, 11, 4, dt, 1);
    emulated("small 3-layer net", &cfg, 6, 7, 7, MR_FP32, 1);   /* one chunk, an even view */
    {   /* a float image (catch's kind): layer 0 im2col of the image, layers 1 and 2 through the operation */
        mr_policy_config ci = cfg;
        ci.obs_image = 1;
        ci.obs_channels = 2;
        for (int dt = 0; dt < 3; dt += 2) emulated("small 3-layer net on a float image", &ci, 5, 11, 4, dt, 1);
    }
    for (conv_fault = 1; conv_fault <= 2; conv_fault++) {
        const double w = emulated("faulty", &cfg, 5, 11, 4, MR_FP32, 0);
        CHECK_MSG(!(w < 1e-4), "conv operation fault %d not caught (largest error %.2e)", conv_fault, w);
    }
    conv_fault = 0;
}

/* ================================================================ GPU */
#ifdef MOONRL_HAVE_CUDA

typedef struct dinputs { uint8_t *codes; float *extra, *dlogits, *dvalue, *logits, *value, *g0; } dinputs;
typedef struct host_out { unsigned char *ws; float *logits, *value, *grads; } host_out;

static int gpu_run(mr_policy_cuda *pc, const dinputs *d, int B, host_out *h) {
    OK(mr_cuda_memset(pc->ws, 0xff, pc->plan.o_blas, stream, &e_));
    OK(mr_cuda_copy(pc->grads, d->g0, pc->plan.param_bytes, MR_COPY_D2D, stream, &e_));
    OK(mr_policy_cuda_forward(pc, d->codes, d->extra, B, 0, d->logits, d->value, stream, &e_));
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

static void gpu_net(const char *name, const mr_policy_config *cfg, int view, int B, int chunk) {
    ref_net r;
    CHECK(ref_make(&r, cfg, view, B, 64));
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, view * view);
    ref_run(&r, &in, 0);
    dinputs d;
    d.codes = dup_up(in.codes, (size_t)B * view * view);
    d.extra = dup_up(in.extra, 8 * (size_t)B);
    d.dlogits = dup_up(in.dlogits, 4 * (size_t)B * NA);
    d.dvalue = dup_up(in.dvalue, 4 * (size_t)B);
    d.logits = dalloc(4 * (size_t)B * NA);
    d.value = dalloc(4 * (size_t)B);
    d.g0 = dup_up(r.g0, 4 * r.p.n_params);
    mr_cuda_config cc;
    memset(&cc, 0, sizeof cc);
    cc.conv = MR_CUDA_CONV_CUDNN;
    for (int dt = 0; dt < 3; dt++) {
        mr_policy_cuda dn, im;
        mr_error e;
        if (mr_policy_cuda_create_conv(&dn, cfg, view, B, chunk, dt, &cc, &dev, &e) != MR_OK) {
            CHECK_MSG(0, "create (cuDNN): %s", e.msg);
            continue;
        }
        if (mr_policy_cuda_create(&im, cfg, view, B, chunk, dt, &dev, &e) != MR_OK) {
            CHECK_MSG(0, "create (im2col): %s", e.msg);
            mr_policy_cuda_destroy(&dn);
            continue;
        }
        CHECK_MSG(dn.plan.dnn_ws_bytes > 0 && dn.dnn, "cuDNN not in use: %s", dn.conv_note);
        printf("  %s, %s: %s\n", name, prec_name(dt), dn.conv_note);
        up(dn.params, r.p.params, dn.plan.param_bytes);
        up(im.params, r.p.params, im.plan.param_bytes);
        host_out hd, hi, h2;
        host_out_make(&hd, &dn.plan);
        host_out_make(&hi, &im.plan);
        host_out_make(&h2, &dn.plan);
        if (gpu_run(&dn, &d, B, &hd) && gpu_run(&im, &d, B, &hi)) {
            char label[128];
            snprintf(label, sizeof label, "GPU %s net with cuDNN, %s", name, prec_name(dt));
            const net_out od = {hd.ws, hd.logits, hd.value, hd.grads}, oi = {hi.ws, hi.logits, hi.value, hi.grads};
            const double w = cmp_cpu(label, &r, &dn.plan, &od, B, 1e-4, 1);
            const net_view a = view_out(&dn.plan, &od), b = view_out(&im.plan, &oi);
            snprintf(label, sizeof label, "GPU %s net, cuDNN vs im2col, %s", name, prec_name(dt));
            const double wi = net_compare(label, &r.p, &a, &b, B, dt == MR_FP32 ? 1e-4 : tol_fwd(dt),
                                          dt == MR_FP32 ? 1e-4 : tol_grad(dt), 1);
            printf("  %s (B %d, chunk %d): against the CPU policy %.2e, against im2col on the GPU %.2e\n", label, B,
                   dn.plan.chunk, w, wi);
            /* a repeat: bit-identical (deterministic algorithms only) */
            if (gpu_run(&dn, &d, B, &h2))
                CHECK_MSG(memcmp(h2.grads, hd.grads, dn.plan.param_bytes) == 0 &&
                          memcmp(h2.logits, hd.logits, 4 * (size_t)B * NA) == 0, "%s: a repeat differs", label);
            /* a CUDA graph of grads = g0, forward, backward: replayed bit-identically */
            void *exec = NULL;
            OK(mr_cuda_memset(dn.grads, 0xff, dn.plan.param_bytes, stream, &e_));
            sync_ok("before capture");
            mr_error ge;
            mr_status gs = mr_cuda_graph_begin(stream, &ge);
            if (gs == MR_OK) {
                mr_status q = mr_cuda_copy(dn.grads, d.g0, dn.plan.param_bytes, MR_COPY_D2D, stream, &ge);
                if (q == MR_OK) q = mr_policy_cuda_forward(&dn, d.codes, d.extra, B, 0, d.logits, d.value, stream, &ge);
                if (q == MR_OK) q = mr_policy_cuda_backward(&dn, d.dlogits, d.dvalue, B, stream, &ge);
                mr_error ee;
                gs = mr_cuda_graph_end(stream, q != MR_OK, &exec, &ee);
                if (q != MR_OK) gs = q;
                else if (gs != MR_OK) ge = ee;
            }
            CHECK_MSG(gs == MR_OK && exec, "%s: capturing cuDNN in a CUDA graph: %s", label, ge.msg);
            if (exec) {
                OK(mr_cuda_graph_launch(exec, stream, &e_));
                down(h2.grads, dn.grads, dn.plan.param_bytes);
                down(h2.logits, d.logits, 4 * (size_t)B * NA);
                if (sync_ok("graph replay"))
                    CHECK_MSG(memcmp(h2.grads, hd.grads, dn.plan.param_bytes) == 0 &&
                              memcmp(h2.logits, hd.logits, 4 * (size_t)B * NA) == 0, "%s: the graph's replay differs",
                              label);
                mr_cuda_graph_destroy(exec);
            }
        }
        host_out_free(&hd);
        host_out_free(&hi);
        host_out_free(&h2);
        mr_policy_cuda_destroy(&dn);
        mr_policy_cuda_destroy(&im);
    }
    dfree(d.codes); dfree(d.extra); dfree(d.dlogits); dfree(d.dvalue); dfree(d.logits); dfree(d.value);
    dfree(d.g0);
    inputs_free(&in);
    ref_free(&r);
}

static void gpu_timing(void) {
    for (int dt = 0; dt < 3; dt++) {
        mr_cuda_conv_timing t;
        mr_error e;
        const mr_status s = mr_cuda_conv_time(0, 11, 11, 32, 64, 512, dt, 3, &t, &e);
        CHECK_MSG(s == MR_OK, "mr_cuda_conv_time: %s", e.msg);
        if (s != MR_OK) continue;
        CHECK(t.ms_im2col > 0 && t.ms_cudnn > 0 && t.algo[0] >= 0 && t.algo[1] >= 0 && t.algo[2] >= 0);
        CHECK(strstr(t.machine, "|sm_") != NULL && strstr(t.machine, "|cuDNN 9") != NULL);
        printf("  mr_cuda_conv_time 32->64 on 11x11, chunk 512, %s: im2col %.3f ms, cuDNN %.3f ms (algorithms "
               "%d/%d/%d) on %s%s%s\n", prec_name(dt), t.ms_im2col, t.ms_cudnn, t.algo[0], t.algo[1], t.algo[2],
               t.machine, t.note[0] ? "; " : "", t.note);
    }
    mr_cuda_conv_timing t;
    mr_error e;
    CHECK(mr_cuda_conv_time(0, 11, 11, 32, 64, 512, 7, 3, &t, &e) == MR_ERR_ARG && strstr(e.msg, "precision"));
}

static void gpu_tests(void) {
    const char *why = NULL;
    if (!mr_dnn_available(&why)) {
        const char *no = getenv("MOONRL_TEST_NO_CUDNN");
        if (no && strcmp(no, "1") == 0) {
            printf("test_cuda_conv_cudnn: GPU part skipped: cuDNN unavailable (%s), MOONRL_TEST_NO_CUDNN=1\n", why);
            return;
        }
        CHECK_MSG(0, "cuDNN cannot be loaded: %s (put its lib directory on LD_LIBRARY_PATH, or set "
                  "MOONRL_TEST_NO_CUDNN=1 on a machine without it)", why);
        return;
    }
    printf("  %s\n", mr_cuda_cudnn());
    if (!gpu_open()) return;
    policy_check_at(PC_AT_GPU_NET);
    mr_policy_config cfg;
    small_cfg(&cfg);
    cfg.num_conv = 3;
    cfg.conv_channels[2] = 8;
    gpu_net("small 3-layer", &cfg, 5, 37, 8);
    ref_cfg(&cfg);
    gpu_net("reference", &cfg, 11, 300, 128);
    gpu_timing();
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    test_resolve();
    test_plan();
    test_emulated();
#ifdef MOONRL_HAVE_CUDA
    printf("  cuDNN here: %s\n", mr_cuda_cudnn());
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_conv_cudnn: skipped: no GPU (GPU checks not run; CPU checks above)\n");
#else
    printf("test_cuda_conv_cudnn: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_conv_cudnn");
}

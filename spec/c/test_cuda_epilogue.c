/*
 * test_cuda_epilogue.c - cuda.epilogue = "fused": the products whose bias,
 * ReLU, ReLU mask or bias gradient run in the product's epilogue
 * (policy_layers.h's mr_pc_epi and gemm_ep, policy.cu + kernels/gemm_lt.cu
 * with cuBLASLt).
 *
 * Always (CPU): the plan's regions (mr_pc_plan_epi: after the others,
 * aligned, sized for max_batch rows of 128-bit-padded bits); the whole
 * network's schedule with gemm_ep emulated here independently of the job
 * kernels (each product summed in double, its epilogue applied, the ReLU
 * bits in the emulator's own layout; pc_emu.h's emu_gemm_ep) against the CPU policy (onto non-zero
 * gradients: a bias gradient must be ADDED), fp32 within 1e-4, bf16 / fp16
 * within policy_check.h's bounds; every epilogue kind was used and the
 * separate kernels it replaces were not launched; an emulation with no
 * algorithm for the bit-keeping forward makes the backward mask by the
 * output (aux_ok) and still matches; an epilogue that ignores the mask or
 * overwrites the bias gradient is caught.
 * With a GPU (the window): one hidden layer and its head (mr_cuda_block_*:
 * the same schedule functions as fc and the actor) fused and separate
 * against a double-precision host computation of the layer (h = relu(x W1^T
 * + b1), y = h W2^T + b2, and the backward's dh, dx, dW1, db1, dW2, db2
 * through the mask; inputs on grids that make the pre-activations exact and
 * non-zero, so the masks agree) in fp32 / bf16 / fp16, every product fused
 * (counted);
 * the whole network fused against the CPU policy and against the separate
 * network on the GPU, a repeat and a CUDA graph's replay bit-identical.
 * Without a GPU: "skipped: no GPU".
 */
#include "policy_check.h"
#ifdef MOONRL_HAVE_CUDA
#include "graph_cuda.h"
#include "gemm_lt.h"
#endif

/* ================================================================ plan */

static void test_plan(void) {
    mr_policy_config cfg;
    ref_cfg(&cfg);
    mr_pc_plan a, b;
    mr_error e;
    CHECK(mr_pc_plan_make(&a, &cfg, 11, 1000, 128, MR_BF16, &e) == MR_OK);
    b = a;
    mr_pc_plan_epi(&b);
    CHECK(!a.epilogue && b.epilogue);
    CHECK(b.o_epi_scratch >= a.ws_bytes && b.o_aux_feat > b.o_epi_scratch && b.o_aux_chid > b.o_aux_feat);
    CHECK(b.o_epi_scratch % MR_PC_ALIGN == 0 && b.o_aux_feat % MR_PC_ALIGN == 0 && b.o_aux_chid % MR_PC_ALIGN == 0);
    CHECK(b.o_aux_chid - b.o_aux_feat >= mr_pc_aux_bytes(1000, cfg.hidden));
    CHECK(b.ws_bytes - b.o_aux_chid >= mr_pc_aux_bytes(1000, cfg.critic_hidden));
    CHECK(b.o_aux_feat - b.o_epi_scratch >= sizeof(float) * (size_t)a.net.cin_dim);
    CHECK(b.epi_scratch_floats >= (size_t)a.net.cin_dim && b.epi_scratch_floats >= (size_t)a.net.hidden);
    CHECK(mr_pc_aux_ld(1) == 128 && mr_pc_aux_ld(128) == 128 && mr_pc_aux_ld(129) == 256);
    CHECK(mr_pc_aux_bytes(3, 200) == 3 * 256 / 8);
    mr_pc_bufs bf;
    unsigned char *base = (unsigned char *)(uintptr_t)4096;
    mr_pc_carve(&b, base, &bf);
    CHECK((unsigned char *)bf.aux_feat == base + b.o_aux_feat && (unsigned char *)bf.aux_chid == base + b.o_aux_chid &&
          (unsigned char *)bf.epi_scratch == base + b.o_epi_scratch && bf.aux_ok == NULL);
    mr_pc_carve(&a, base, &bf);
    CHECK(!bf.aux_feat && !bf.aux_chid && !bf.epi_scratch);
}

/* ================================================================ emulated gemm_ep */

static long epi_calls[MR_PCE_KINDS];   /* the last run's gemm_ep calls per kind */
static int epi_fault;                  /* pc_emu.h's emu.epi_fault for the next run */

/* The schedule with the emulated gemm_ep (pc_emu.h) against the CPU policy; the
 * largest error. Kinds of job launched: counted into jobs[]. */
static double emulated(const char *name, const mr_policy_config *cfg, int view, int B, int chunk, int dt, int report,
                       long jobs[MR_PCJ_KINDS]) {
    ref_net r;
    double w = NAN;
    CHECK(ref_make(&r, cfg, view, B, 16));
    random_params(&r.p);
    inputs in;
    inputs_for(&in, cfg, B, view * view);   /* codes, or a float image */
    ref_run(&r, &in, 0);
    emu_net n;
    if (emu_net_make(&n, cfg, view, B, chunk, dt)) {
        mr_pc_plan_epi(&n.pl);
        unsigned char *ws = realloc(n.ws, n.pl.ws_bytes);
        int aux_ok[2] = {-1, -1};
        enum { CAP = 4096 };
        static unsigned jn[CAP];
        static int jk[CAP];
        if (ws) {
            n.ws = ws;
            n.ws_used = n.pl.ws_bytes;
            mr_pc_carve(&n.pl, n.ws, &n.bf);
            n.bf.aux_ok = aux_ok;
            n.o.gemm_ep = emu_gemm_ep;
            n.e.epi_fault = epi_fault;
            n.e.job_n = jn;
            n.e.job_kind = jk;
            n.e.job_n_cap = CAP;
            mr_error e;
            CHECK_MSG(emu_net_run(&n, r.p.params, r.g0, &in, 0, &e) == MR_OK, "%s", e.msg);
            memcpy(epi_calls, n.e.epi_calls, sizeof epi_calls);
            if (jobs) {
                memset(jobs, 0, sizeof(long) * MR_PCJ_KINDS);
                for (long k = 0; k < n.e.jobs && k < CAP; k++) jobs[jk[k]]++;
            }
            const net_out o = emu_out(&n);
            char label[96];
            snprintf(label, sizeof label, "%s, fused epilogues, %s", name, prec_name(dt));
            w = cmp_cpu(label, &r, &n.pl, &o, B, 1e-4, report);
            if (report) {
                CHECK_MSG(aux_ok[0] == (epi_fault != 3) && aux_ok[1] == (epi_fault != 3),
                          "%s: the bits' flags %d %d", label, aux_ok[0], aux_ok[1]);
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
    cfg.num_conv = 3;
    cfg.conv_channels[2] = 8;
    long jobs[MR_PCJ_KINDS];
    for (int dt = 0; dt < 3; dt++) {
        emulated("small 3-layer net", &cfg, 5, 11, 4, dt, 1, jobs);
        /* every kind fused; the separate kernels it replaces never launched */
        CHECK_MSG(epi_calls[MR_PCE_BIAS] == 2 && epi_calls[MR_PCE_RELU_AUX_BIAS] == 2 &&
                  epi_calls[MR_PCE_DRELU_BGRAD] == 2 && epi_calls[MR_PCE_RELU_BIAS] == 3 * 3 &&
                  epi_calls[MR_PCE_BGRAD_A] == 2 + 3 * 3,
                  "%s: epilogue calls %ld %ld %ld %ld %ld", prec_name(dt), epi_calls[1], epi_calls[2], epi_calls[3],
                  epi_calls[4], epi_calls[5]);
        CHECK_MSG(jobs[MR_PCJ_BIAS_ACT] == 0 && jobs[MR_PCJ_BGRAD_PART] == 0 && jobs[MR_PCJ_BGRAD_SUM] == 0,
                  "%s: separate kernels still launched: bias+act %ld, bias-gradient sums %ld / %ld", prec_name(dt),
                  jobs[MR_PCJ_BIAS_ACT], jobs[MR_PCJ_BGRAD_PART], jobs[MR_PCJ_BGRAD_SUM]);
        /* what stays separate: the fc input gradient's ReLU per chunk (3 chunks of 4) */
        CHECK_MSG(jobs[MR_PCJ_RELU_BACK] == 3, "%s: %ld ReLU backward jobs, expected 3", prec_name(dt),
                  jobs[MR_PCJ_RELU_BACK]);
    }
    emulated("small 3-layer net", &cfg, 6, 7, 7, MR_FP32, 1, NULL);   /* one chunk, an even view */
    {   /* a float image (catch's kind): layer 0's im2col reads it, the epilogues are the codes' */
        mr_policy_config ci = cfg;
        ci.obs_image = 1;
        ci.obs_channels = 3;
        ci.critic_extra = 1;
        for (int dt = 0; dt < 3; dt += 2) {
            emulated("small 3-layer net on a float image of 3 channels", &ci, 5, 11, 4, dt, 1, jobs);
            CHECK_MSG(epi_calls[MR_PCE_RELU_BIAS] == 3 * 3 && epi_calls[MR_PCE_BGRAD_A] == 2 + 3 * 3 &&
                      jobs[MR_PCJ_BIAS_ACT] == 0 && jobs[MR_PCJ_IM2COL_IMAGE] == 2 * 3 &&
                      jobs[MR_PCJ_IM2COL_CODES] == 0 && jobs[MR_PCJ_CIN_IMAGE] == 1 && jobs[MR_PCJ_CIN_FILL] == 0,
                      "float image, %s: epilogue calls %ld / %ld, jobs: bias+act %ld, image im2col %ld, "
                      "critic input %ld", prec_name(dt), epi_calls[MR_PCE_RELU_BIAS], epi_calls[MR_PCE_BGRAD_A],
                      jobs[MR_PCJ_BIAS_ACT], jobs[MR_PCJ_IM2COL_IMAGE], jobs[MR_PCJ_CIN_IMAGE]);
        }
    }
    /* no algorithm for the bit-keeping forward: the backward masks by the output */
    epi_fault = 3;
    emulated("no RELU_AUX_BIAS", &cfg, 5, 11, 4, MR_FP32, 1, jobs);
    CHECK(epi_calls[MR_PCE_DRELU_BGRAD] == 0 && jobs[MR_PCJ_RELU_BACK] == 3 + 2);
    for (epi_fault = 1; epi_fault <= 2; epi_fault++) {
        const double w = emulated("faulty", &cfg, 5, 11, 4, MR_FP32, 0, NULL);
        CHECK_MSG(!(w < 1e-4), "epilogue fault %d not caught (largest error %.2e)", epi_fault, w);
    }
    epi_fault = 0;
}

/* ================================================================ GPU */
#ifdef MOONRL_HAVE_CUDA

static void round_t(float *x, size_t n, int dt) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        if (dt == MR_FP32) continue;
        mr_pc_st(&h, 0, dt, x[i]);
        x[i] = mr_pc_ld(&h, 0, dt);
    }
}
/* x = (round(x * grid) + off) / grid */
static void quantize(float *x, size_t n, double grid, double off) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((nearbyint((double)x[i] * grid) + off) / grid);
}
static void *up_t(const float *x, size_t n, int dt) {
    unsigned char *h = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) mr_pc_st(h, i, dt, x[i]);
    void *d = dup_up(h, n * (size_t)mr_pc_esize(dt) + 4);
    free(h);
    return d;
}
static float *down_t(const void *d, size_t n, int dt) {
    unsigned char *h = malloc(n * 4 + 4);
    float *o = malloc(n * 4 + 4);
    down(h, d, n * (size_t)mr_pc_esize(dt));
    for (size_t i = 0; i < n; i++) o[i] = mr_pc_ld(h, i, dt);
    free(h);
    return o;
}
static double err_of(const float *a, const double *ref, size_t n) {
    float *r = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) r[i] = (float)ref[i];
    const double e = relerr2(a, r, n, 1e-30);
    free(r);
    return e;
}

/* One layer and its head, fused or separate, against the same computation
 * in double on the host from the very (rounded) inputs. */
static void gpu_block(const mr_policy_config *cfg, int view, int B, int C, int H, int O, int dt, int fused) {
    mr_cuda_config cc;
    memset(&cc, 0, sizeof cc);
    cc.conv = MR_CUDA_CONV_IM2COL;
    cc.epilogue = fused ? MR_CUDA_EPILOGUE_FUSED : MR_CUDA_EPILOGUE_SEPARATE;
    mr_policy_cuda pc;
    mr_error e;
    if (mr_policy_cuda_create_conv(&pc, cfg, view, B, 0, dt, &cc, &dev, &e) != MR_OK) {
        CHECK_MSG(0, "create: %s", e.msg);
        return;
    }
    float *x = frand((size_t)B * C, -1, 1), *w1 = frand((size_t)H * C, -0.3f, 0.3f);
    float *b1 = frand(H, -0.2f, 0.2f), *w2 = frand((size_t)O * H, -0.3f, 0.3f), *b2 = frand(O, -0.2f, 0.2f);
    float *dy = frand((size_t)B * O, -1, 1), *g0 = frand((size_t)H * C + H + (size_t)O * H + O, -0.1f, 0.1f);
    /* on grids that make every pre-activation exact in fp32 and never 0
     * (x in 1/8ths, w1 in 1/32nds: products in 1/256ths; b1 an odd number
     * of 1/512ths), so the GPU's ReLU mask is the reference's whatever its
     * summation order; every value has at most 8 significant bits, exact in
     * bf16 and fp16 */
    quantize(x, (size_t)B * C, 8, 0); quantize(w1, (size_t)H * C, 32, 0); quantize(b1, H, 256, 0.5);
    quantize(w2, (size_t)O * H, 32, 0); quantize(dy, (size_t)B * O, 8, 0); quantize(b2, O, 256, 0.5);
    round_t(x, (size_t)B * C, dt); round_t(w1, (size_t)H * C, dt); round_t(w2, (size_t)O * H, dt);
    round_t(dy, (size_t)B * O, dt);
    /* the reference in double; h and dh rounded to T as the GPU stores them, the
     * mask from the exact pre-activation */
    double *h = calloc((size_t)B * H, 8), *y = calloc((size_t)B * O, 8), *dh = calloc((size_t)B * H, 8);
    double *dx = calloc((size_t)B * C, 8), *gr = calloc((size_t)H * C + H + (size_t)O * H + O, 8);
    float *hf = malloc((size_t)B * H * 4), *dhf = malloc((size_t)B * H * 4);
    const size_t oW1 = 0, oB1 = (size_t)H * C, oW2 = oB1 + H, oB2 = oW2 + (size_t)O * H, NG = oB2 + O;
    for (size_t i = 0; i < NG; i++) gr[i] = g0[i];
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            double s = b1[j];
            for (int c = 0; c < C; c++) s += (double)x[(size_t)b * C + c] * w1[(size_t)j * C + c];
            h[(size_t)b * H + j] = s > 0 ? s : 0;
            hf[(size_t)b * H + j] = (float)h[(size_t)b * H + j];
        }
    round_t(hf, (size_t)B * H, dt);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < O; o++) {
            double s = b2[o];
            for (int j = 0; j < H; j++) s += (double)hf[(size_t)b * H + j] * w2[(size_t)o * H + j];
            y[(size_t)b * O + o] = s;
        }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            double s = 0;
            for (int o = 0; o < O; o++) s += (double)dy[(size_t)b * O + o] * w2[(size_t)o * H + j];
            dh[(size_t)b * H + j] = h[(size_t)b * H + j] > 0 ? s : 0;
            dhf[(size_t)b * H + j] = (float)dh[(size_t)b * H + j];
        }
    round_t(dhf, (size_t)B * H, dt);
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < H; j++) {
            gr[oB1 + j] += dh[(size_t)b * H + j];
            for (int c = 0; c < C; c++)
                gr[oW1 + (size_t)j * C + c] += (double)dhf[(size_t)b * H + j] * x[(size_t)b * C + c];
        }
        for (int o = 0; o < O; o++) {
            gr[oB2 + o] += dy[(size_t)b * O + o];
            for (int j = 0; j < H; j++)
                gr[oW2 + (size_t)o * H + j] += (double)dy[(size_t)b * O + o] * hf[(size_t)b * H + j];
        }
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < H; j++) s += (double)dhf[(size_t)b * H + j] * w1[(size_t)j * C + c];
            dx[(size_t)b * C + c] = s;
        }
    }
    void *dX = up_t(x, (size_t)B * C, dt), *dW1 = up_t(w1, (size_t)H * C, dt), *dW2 = up_t(w2, (size_t)O * H, dt);
    void *dDY = up_t(dy, (size_t)B * O, dt);
    float *dB1 = dup_up(b1, 4 * (size_t)H), *dB2 = dup_up(b2, 4 * (size_t)O), *dG = dup_up(g0, 4 * NG);
    void *dH = dalloc((size_t)B * H * 4), *dDH = dalloc((size_t)B * H * 4), *dDX = dalloc((size_t)B * C * 4);
    float *dYo = dalloc((size_t)B * O * 4);
    OK(mr_cuda_block_forward(&pc, dH, dYo, dX, dW1, dB1, dW2, dB2, B, C, H, O, stream, &e_));
    OK(mr_cuda_block_backward(&pc, dDH, dDX, dG + oW1, dG + oB1, dG + oW2, dG + oB2, dDY, dH, dX, dW1, dW2, B, C, H,
                              O, stream, &e_));
    if (sync_ok("the block")) {
        float *gh = down_t(dH, (size_t)B * H, dt), *gdh = down_t(dDH, (size_t)B * H, dt);
        float *gdx = down_t(dDX, (size_t)B * C, dt), *gy = malloc(4 * (size_t)B * O), *gg = malloc(4 * NG);
        down(gy, dYo, 4 * (size_t)B * O);
        down(gg, dG, 4 * NG);
        const double tf = dt == MR_FP32 ? 1e-5 : 2 * tol_layer(dt), tg = dt == MR_FP32 ? 1e-5 : 4 * tol_layer(dt);
        const struct { const char *what; const float *a; const double *r; size_t n; double tol; } it[] = {
            {"h", gh, h, (size_t)B * H, tf}, {"y", gy, y, (size_t)B * O, tf}, {"dh", gdh, dh, (size_t)B * H, tg},
            {"dx", gdx, dx, (size_t)B * C, tg}, {"dW1", gg + oW1, gr + oW1, (size_t)H * C, tg},
            {"db1", gg + oB1, gr + oB1, (size_t)H, tg}, {"dW2", gg + oW2, gr + oW2, (size_t)O * H, tg},
            {"db2", gg + oB2, gr + oB2, (size_t)O, tg}};
        double worst = 0;
        for (size_t i = 0; i < sizeof it / sizeof it[0]; i++) {
            const double er = err_of(it[i].a, it[i].r, it[i].n);
            CHECK_MSG(er < it[i].tol, "block %s, %s, B %d C %d H %d O %d: %s relative error %.3g (tolerance %.3g)",
                      fused ? "fused" : "separate", prec_name(dt), B, C, H, O, it[i].what, er, it[i].tol);
            if (!(er <= worst)) worst = er;
        }
        if (fused)   /* forward 2, backward 2 products with an epilogue: all through cuBLASLt */
            CHECK_MSG(pc.epi_counts[0] == 4 && pc.epi_counts[1] == 0,
                      "block fused, %s: %ld products fused, %ld left to the separate kernels (expected 4 / 0)",
                      prec_name(dt), pc.epi_counts[0], pc.epi_counts[1]);
        printf("  block %s, %s (B %d, C %d, H %d, O %d): largest error %.2e against double; fused %ld, separate "
               "%ld\n", fused ? "fused" : "separate", prec_name(dt), B, C, H, O, worst, pc.epi_counts[0],
               pc.epi_counts[1]);
        free(gh); free(gdh); free(gdx); free(gy); free(gg);
    }
    dfree(dX); dfree(dW1); dfree(dW2); dfree(dDY); dfree(dB1); dfree(dB2); dfree(dG); dfree(dH); dfree(dDH);
    dfree(dDX); dfree(dYo);
    free(x); free(w1); free(b1); free(w2); free(b2); free(dy); free(g0); free(h); free(y); free(dh); free(dx);
    free(gr); free(hf); free(dhf);
    mr_policy_cuda_destroy(&pc);
}

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
    mr_cuda_config cf, cs;
    memset(&cf, 0, sizeof cf);
    cf.conv = MR_CUDA_CONV_IM2COL;
    cs = cf;
    cf.epilogue = MR_CUDA_EPILOGUE_FUSED;
    for (int dt = 0; dt < 3; dt++) {
        mr_policy_cuda fu, se;
        mr_error e;
        if (mr_policy_cuda_create_conv(&fu, cfg, view, B, chunk, dt, &cf, &dev, &e) != MR_OK) {
            CHECK_MSG(0, "create (fused): %s", e.msg);
            continue;
        }
        if (mr_policy_cuda_create_conv(&se, cfg, view, B, chunk, dt, &cs, &dev, &e) != MR_OK) {
            CHECK_MSG(0, "create (separate): %s", e.msg);
            mr_policy_cuda_destroy(&fu);
            continue;
        }
        CHECK(fu.lt && fu.plan.epilogue && !se.lt && !se.plan.epilogue);
        up(fu.params, r.p.params, fu.plan.param_bytes);
        up(se.params, r.p.params, se.plan.param_bytes);
        host_out hf, hs, h2;
        host_out_make(&hf, &fu.plan);
        host_out_make(&hs, &se.plan);
        host_out_make(&h2, &fu.plan);
        if (gpu_run(&fu, &d, B, &hf) && gpu_run(&se, &d, B, &hs)) {
            char label[128];
            snprintf(label, sizeof label, "GPU %s net, fused epilogues, %s", name, prec_name(dt));
            const net_out of = {hf.ws, hf.logits, hf.value, hf.grads}, os = {hs.ws, hs.logits, hs.value, hs.grads};
            const double w = cmp_cpu(label, &r, &fu.plan, &of, B, 1e-4, 1);
            const net_view a = view_out(&fu.plan, &of), b = view_out(&se.plan, &os);
            snprintf(label, sizeof label, "GPU %s net, fused vs separate, %s", name, prec_name(dt));
            const double ws = net_compare(label, &r.p, &a, &b, B, dt == MR_FP32 ? 1e-4 : tol_fwd(dt),
                                          dt == MR_FP32 ? 1e-4 : tol_grad(dt), 1);
            CHECK_MSG(fu.epi_counts[0] > 0 && fu.epi_counts[1] == 0,
                      "%s: %ld products fused, %ld left to the separate kernels", label, fu.epi_counts[0],
                      fu.epi_counts[1]);
            printf("  %s (B %d, chunk %d): against the CPU policy %.2e, against separate on the GPU %.2e; %ld "
                   "products fused, %ld separate\n", label, B, fu.plan.chunk, w, ws, fu.epi_counts[0],
                   fu.epi_counts[1]);
            if (gpu_run(&fu, &d, B, &h2))
                CHECK_MSG(memcmp(h2.grads, hf.grads, fu.plan.param_bytes) == 0 &&
                          memcmp(h2.logits, hf.logits, 4 * (size_t)B * NA) == 0, "%s: a repeat differs", label);
            void *exec = NULL;
            OK(mr_cuda_memset(fu.grads, 0xff, fu.plan.param_bytes, stream, &e_));
            sync_ok("before capture");
            mr_error ge;
            mr_status gs = mr_cuda_graph_begin(stream, &ge);
            if (gs == MR_OK) {
                mr_status q = mr_cuda_copy(fu.grads, d.g0, fu.plan.param_bytes, MR_COPY_D2D, stream, &ge);
                if (q == MR_OK) q = mr_policy_cuda_forward(&fu, d.codes, d.extra, B, 0, d.logits, d.value, stream, &ge);
                if (q == MR_OK) q = mr_policy_cuda_backward(&fu, d.dlogits, d.dvalue, B, stream, &ge);
                mr_error ee;
                gs = mr_cuda_graph_end(stream, q != MR_OK, &exec, &ee);
                if (q != MR_OK) gs = q;
                else if (gs != MR_OK) ge = ee;
            }
            CHECK_MSG(gs == MR_OK && exec, "%s: capturing cuBLASLt in a CUDA graph: %s", label, ge.msg);
            if (exec) {
                OK(mr_cuda_graph_launch(exec, stream, &e_));
                down(h2.grads, fu.grads, fu.plan.param_bytes);
                down(h2.logits, d.logits, 4 * (size_t)B * NA);
                if (sync_ok("graph replay"))
                    CHECK_MSG(memcmp(h2.grads, hf.grads, fu.plan.param_bytes) == 0 &&
                              memcmp(h2.logits, hf.logits, 4 * (size_t)B * NA) == 0,
                              "%s: the graph's replay differs", label);
                mr_cuda_graph_destroy(exec);
            }
        }
        host_out_free(&hf);
        host_out_free(&hs);
        host_out_free(&h2);
        mr_policy_cuda_destroy(&fu);
        mr_policy_cuda_destroy(&se);
    }
    dfree(d.codes); dfree(d.extra); dfree(d.dlogits); dfree(d.dvalue); dfree(d.logits); dfree(d.value);
    dfree(d.g0);
    inputs_free(&in);
    ref_free(&r);
}

static void gpu_tests(void) {
    const char *why = NULL;
    if (!mr_lt_available(&why)) {
        CHECK_MSG(0, "cuBLASLt cannot be loaded: %s", why);
        return;
    }
    printf("  %s\n", mr_lt_describe());
    if (!gpu_open()) return;
    policy_check_at(PC_AT_GPU_NET);
    mr_policy_config cfg;
    ref_cfg(&cfg);
    /* a layer with the reference net's fc shape (hidden 256 from 11*11*C) and an odd one */
    for (int dt = 0; dt < 3; dt++)
        for (int fused = 0; fused < 2; fused++) {
            gpu_block(&cfg, 11, 300, 200, cfg.hidden, 8, dt, fused);
            gpu_block(&cfg, 11, 37, 13, 29, 5, dt, fused);
        }
    small_cfg(&cfg);
    cfg.num_conv = 3;
    cfg.conv_channels[2] = 8;
    gpu_net("small 3-layer", &cfg, 5, 37, 8);
    ref_cfg(&cfg);
    gpu_net("reference", &cfg, 11, 300, 128);
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    test_plan();
    test_emulated();
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_epilogue: skipped: no GPU (GPU checks not run; CPU checks above)\n");
#else
    printf("test_cuda_epilogue: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_epilogue");
}

/*
 * test_cuda_policy_layers.c - the CUDA policy's layers one at a time (the
 * conv 3x3 and linear steps of kernels/policy_math.h's schedule, and the
 * public mr_cuda_* layer functions of policy_cuda.h) against the CPU layers
 * (src/engine/nn.c).
 *
 * Always (CPU): each layer run through pc_emu.h's emulator of the schedule's
 * three operations - GEMM as a column-major cblas_sgemm given exactly
 * cuBLAS's arguments (whose validity rules are checked), elementwise jobs as
 * a loop over the very MR_HD function the kernels run - against nn.c in fp32:
 * conv forward with and without ReLU on a non-square map (and its im2col,
 * byte for byte), the observation im2col from the codes (both observation
 * modes), conv backward (dw, db, dinp accumulating; the ReLU-fused dinp
 * writing every element of a NaN-filled buffer), linear forward and backward
 * over more than one bias-reduction block; and the deterministic bias
 * reduction alone over one, two and three levels of partial sums (job
 * counts too), in fp32 and from bf16 input.
 * With a GPU: the public layer functions (mr_cuda_conv3x3_forward / _backward,
 * mr_cuda_linear_forward / _backward) against nn.c, fp32. Without a GPU the
 * GPU part prints "skipped: no GPU". MOONRL_TEST_SEED=n draws other inputs.
 */
#include "policy_check.h"

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
    float *x = malloc(sizeof(float) * N * 4);
    for (int proxy = 0; proxy < 3; proxy++) {   /* foraging's 2 channels, each expansion; 4 one-hot (proxy 2) */
        const int CC = proxy < 2 ? 2 : 4, ex = proxy < 2 ? proxy : MR_EXPAND_TRUTH;
        mr_obs_expand_forward(x, codes, B, H * W, CC, ex);
        mr_im2col3x3(col, x, B, H, W, CC);
        mr_pc_job j;
        mr_pc_job_init(&j, MR_PCJ_IM2COL_CODES, MR_FP32, (long long)N * 9 * CC);
        j.H = H; j.W = W; j.C = CC; j.codes = codes; j.proxy = ex; j.y = col2;
        emu_job(&e, &j, &err);
        CHECK_MSG(memcmp(col, col2, sizeof(float) * N * 9 * CC) == 0, "the observation im2col, %d channels", CC);
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

/* ================================================================ GPU */
#ifdef MOONRL_HAVE_CUDA

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


static void gpu_tests(void) {
    if (!gpu_open()) return;
    policy_check_at(PC_AT_GPU_LAYERS);
    mr_error e;
    mr_policy_config cfg;
    small_cfg(&cfg);
    mr_policy_cuda pc;   /* the layer functions take a created policy: its cuBLAS handle */
    if (mr_policy_cuda_create(&pc, &cfg, 5, 4, 0, MR_FP32, &dev, &e) != MR_OK) {
        CHECK_MSG(0, "create: %s", e.msg);
    } else {
        gpu_layers(&pc);
        mr_policy_cuda_destroy(&pc);
    }
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    policy_check_at(PC_AT_LAYERS);
    test_layers_emulated();
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() > 0) gpu_tests();
    else printf("test_cuda_policy_layers: skipped: no GPU (GPU checks not run; CPU checks above)\n");
#else
    printf("test_cuda_policy_layers: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_policy_layers");
}

/*
 * bench_conv_onednn.c - the candidate for the CPU convolutions, measured
 * before it is adopted: oneDNN (2.6, Debian's libdnnl-dev, what PyTorch's CPU
 * convolutions run on) against moonrl's im2col + sgemm as policy.c runs it
 * (chunks of 32 samples, one per OpenMP task, per-thread weight-gradient
 * partials). 3x3, padding 1, 11x11 maps, NHWC, fp32, batch 4096, the layer
 * shapes of the small net (2->16, 16->32) and of the reference net (2->32,
 * 32->64, 64->64); forward with bias + ReLU, backward = input gradient +
 * weight and bias gradients; oneDNN's weight reorders (to and from moonrl's
 * (OC,3,3,C) layout) are inside the timed passes. Best of a few passes.
 *
 *   OMP_NUM_THREADS=2 build/bench_conv_onednn
 *   OMP_NUM_THREADS=1 build/bench_conv_onednn --chunk 32    (one core each, oneDNN per chunk)
 *   OMP_NUM_THREADS=1 build/bench_conv_onednn --first       (the first layer: im2col vs from the codes)
 *
 * What it is not: a test (nothing here checks that the two agree) or part
 * of the engine.
 */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "nn.h"
#define CK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { printf("dnnl error %d at %s:%d\n", s_, __FILE__, __LINE__); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static float *rnd(size_t n) { float *p = aligned_alloc(64, ((n * 4 + 63) / 64) * 64); for (size_t i = 0; i < n; i++) p[i] = (float)rand() / RAND_MAX - 0.5f; return p; }
static dnnl_memory_t mem(dnnl_engine_t e, const dnnl_memory_desc_t *md, void *p) { dnnl_memory_t m; CK(dnnl_memory_create(&m, md, e, p)); return m; }

/* chunk = 0: oneDNN over the whole batch with its own threads; chunk > 0:
 * primitives for `chunk` samples run chunk after chunk on the calling thread,
 * the weight gradients added up in chunk order (how policy.c would call it to
 * keep results independent of the thread count); run with OMP_NUM_THREADS=1
 * to compare one core with one core. */
static void run(int B, int C, int OC, int reps, int chunk) {
    const int H = 11, W = 11, CH = 32;
    size_t ni = (size_t)B * H * W * C, no = (size_t)B * H * W * OC, nw = (size_t)OC * 9 * C;
    float *in = rnd(ni), *out = rnd(no), *dout = rnd(no), *din = rnd(ni), *w = rnd(nw), *b = rnd(OC), *dw = rnd(nw), *db = rnd(OC);
    int T = omp_get_max_threads();
    float *col = rnd((size_t)T * CH * H * W * 9 * C), *dwp = rnd((size_t)T * nw), *dbp = rnd((size_t)T * OC);
    double flop = 2.0 * B * H * W * 9.0 * C * OC;
    /* ours */
    double tf = 1e9, tb = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        #pragma omp parallel for schedule(dynamic, 1)
        for (int k = 0; k < B / CH; k++) {
            float *cw = col + (size_t)omp_get_thread_num() * CH * H * W * 9 * C;
            mr_conv3x3_relu_forward(out + (size_t)k * CH * H * W * OC, cw, in + (size_t)k * CH * H * W * C, w, b, CH, H, W, C, OC);
        }
        double t1 = now();
        memset(dwp, 0, (size_t)T * nw * 4); memset(dbp, 0, (size_t)T * OC * 4); memset(din, 0, ni * 4);
        #pragma omp parallel for schedule(dynamic, 1)
        for (int k = 0; k < B / CH; k++) {
            int t = omp_get_thread_num();
            float *cw = col + (size_t)t * CH * H * W * 9 * C;
            mr_conv3x3_backward(din + (size_t)k * CH * H * W * C, dwp + (size_t)t * nw, dbp + (size_t)t * OC, cw,
                                dout + (size_t)k * CH * H * W * OC, in + (size_t)k * CH * H * W * C, w, CH, H, W, C, OC);
        }
        double t2 = now();
        if (t1 - t0 < tf) tf = t1 - t0;
        if (t2 - t1 < tb) tb = t2 - t1;
    }
    /* oneDNN */
    dnnl_engine_t eng; dnnl_stream_t st;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0)); CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    const int PB = chunk > 0 ? chunk : B;   /* the primitives' batch */
    dnnl_dims_t sd = {PB, C, H, W}, dd = {PB, OC, H, W}, wd = {OC, C, 3, 3}, bd = {OC}, strides = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t src_md, dst_md, w_any, b_md, w_user;
    CK(dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&w_user, 4, wd, dnnl_f32, dnnl_ohwi));
    CK(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_x));
    dnnl_convolution_desc_t fd, bdd, bwd;
    CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src_md, &w_any, &b_md, &dst_md, strides, pad, pad));
    dnnl_post_ops_t po; CK(dnnl_post_ops_create(&po)); CK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.f, 0.f));
    dnnl_primitive_attr_t at; CK(dnnl_primitive_attr_create(&at)); CK(dnnl_primitive_attr_set_post_ops(at, po));
    dnnl_primitive_desc_t fpd, bdpd, bwpd;
    CK(dnnl_primitive_desc_create(&fpd, &fd, at, eng, NULL));
    const char *impl; CK(dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl));
    const dnnl_memory_desc_t *wfmt = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    CK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &src_md, &w_any, &dst_md, strides, pad, pad));
    CK(dnnl_primitive_desc_create(&bdpd, &bdd, NULL, eng, fpd));
    CK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &src_md, &w_any, &b_md, &dst_md, strides, pad, pad));
    CK(dnnl_primitive_desc_create(&bwpd, &bwd, NULL, eng, fpd));
    const char *implb, *implw; CK(dnnl_primitive_desc_query(bdpd, dnnl_query_impl_info_str, 0, &implb)); CK(dnnl_primitive_desc_query(bwpd, dnnl_query_impl_info_str, 0, &implw));
    const dnnl_memory_desc_t *wbd = dnnl_primitive_desc_query_md(bdpd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *dwfmt = dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_weights_md, 0);
    float *wf = rnd(dnnl_memory_desc_get_size(wfmt) / 4 + 16), *wb = rnd(dnnl_memory_desc_get_size(wbd) / 4 + 16),
          *dwf = rnd(dnnl_memory_desc_get_size(dwfmt) / 4 + 16);
    dnnl_memory_t m_in = mem(eng, &src_md, in), m_out = mem(eng, &dst_md, out), m_dout = mem(eng, &dst_md, dout), m_din = mem(eng, &src_md, din);
    dnnl_memory_t m_w = mem(eng, wfmt, wf), m_wb = mem(eng, wbd, wb), m_b = mem(eng, &b_md, b), m_dw = mem(eng, dwfmt, dwf), m_db = mem(eng, &b_md, db);
    dnnl_memory_t m_wu = mem(eng, &w_user, w), m_dwu = mem(eng, &w_user, dw);
    /* weight reorders (user ohwi -> the primitives' formats, and the gradient back): timed with each pass */
    dnnl_primitive_desc_t r1, r2, r3; dnnl_primitive_t R1, R2, R3;
    CK(dnnl_reorder_primitive_desc_create(&r1, &w_user, eng, wfmt, eng, NULL)); CK(dnnl_primitive_create(&R1, r1));
    CK(dnnl_reorder_primitive_desc_create(&r2, &w_user, eng, wbd, eng, NULL)); CK(dnnl_primitive_create(&R2, r2));
    CK(dnnl_reorder_primitive_desc_create(&r3, dwfmt, eng, &w_user, eng, NULL)); CK(dnnl_primitive_create(&R3, r3));
    dnnl_primitive_t F, BD, BW;
    CK(dnnl_primitive_create(&F, fpd)); CK(dnnl_primitive_create(&BD, bdpd)); CK(dnnl_primitive_create(&BW, bwpd));
    dnnl_exec_arg_t a1[] = {{DNNL_ARG_FROM, m_wu}, {DNNL_ARG_TO, m_w}}, a2[] = {{DNNL_ARG_FROM, m_wu}, {DNNL_ARG_TO, m_wb}}, a3[] = {{DNNL_ARG_FROM, m_dw}, {DNNL_ARG_TO, m_dwu}};
    dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, m_in}, {DNNL_ARG_WEIGHTS, m_w}, {DNNL_ARG_BIAS, m_b}, {DNNL_ARG_DST, m_out}};
    dnnl_exec_arg_t ba[] = {{DNNL_ARG_DIFF_DST, m_dout}, {DNNL_ARG_WEIGHTS, m_wb}, {DNNL_ARG_DIFF_SRC, m_din}};
    dnnl_exec_arg_t wa[] = {{DNNL_ARG_SRC, m_in}, {DNNL_ARG_DIFF_DST, m_dout}, {DNNL_ARG_DIFF_WEIGHTS, m_dw}, {DNNL_ARG_DIFF_BIAS, m_db}};
    double df = 1e9, db_ = 1e9;
    const int nc = B / PB;
    const size_t si = (size_t)PB * H * W * C, so = (size_t)PB * H * W * OC;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        CK(dnnl_primitive_execute(R1, st, 2, a1));
        for (int k = 0; k < nc; k++) {
            CK(dnnl_memory_set_data_handle(m_in, in + k * si)); CK(dnnl_memory_set_data_handle(m_out, out + k * so));
            CK(dnnl_primitive_execute(F, st, 4, fa));
        }
        CK(dnnl_stream_wait(st));
        double t1 = now();
        CK(dnnl_primitive_execute(R2, st, 2, a2));
        memset(dw, 0, nw * 4);
        for (int k = 0; k < nc; k++) {
            CK(dnnl_memory_set_data_handle(m_in, in + k * si)); CK(dnnl_memory_set_data_handle(m_dout, dout + k * so));
            CK(dnnl_memory_set_data_handle(m_din, din + k * si));
            CK(dnnl_primitive_execute(BD, st, 3, ba));
            CK(dnnl_primitive_execute(BW, st, 4, wa));
            if (nc > 1) {   /* this chunk's weight gradient, back in (OC,3,3,C), added in chunk order */
                CK(dnnl_memory_set_data_handle(m_dwu, dwp));
                CK(dnnl_primitive_execute(R3, st, 2, a3));
                CK(dnnl_stream_wait(st));
                for (size_t i = 0; i < nw; i++) dw[i] += dwp[i];
            }
        }
        if (nc == 1) CK(dnnl_primitive_execute(R3, st, 2, a3));
        CK(dnnl_stream_wait(st));
        double t2 = now();
        if (r > 0 && t1 - t0 < df) df = t1 - t0;
        if (r > 0 && t2 - t1 < db_) db_ = t2 - t1;
    }
    printf("B=%d %2d->%2d  ours fwd %7.2f ms (%5.1f GFLOP/s) bwd %7.2f ms (%5.1f) | oneDNN fwd %7.2f ms (%5.1f) bwd %7.2f ms (%5.1f) | ratio fwd %.2fx bwd %.2fx  [%s / %s / %s]\n",
           B, C, OC, tf * 1e3, flop / tf / 1e9, tb * 1e3, 2 * flop / tb / 1e9, df * 1e3, flop / df / 1e9, db_ * 1e3, 2 * flop / db_ / 1e9,
           tf / df, tb / db_, impl, implb, implw);
}
/* The first layer (2 channels from the cell codes): expand + im2col + sgemm
 * (cpu.conv = im2col) against nn.c's direct computation from the codes
 * (onednn's first layer), forward with bias + ReLU and backward weight + bias
 * gradients only (the observation needs no input gradient), chunks of 32 as
 * policy.c runs them. `dense` = fraction of non-empty cells (the env's grids
 * hold 128 .. 512 items in 16,384 cells: ~1-3%). */
static void run_codes(int B, int OC, double dense, int reps) {
    const int H = 11, W = 11, CH = 32, T = omp_get_max_threads();
    size_t nc = (size_t)B * H * W, no = nc * OC, nw = (size_t)OC * 18;
    uint8_t *codes = malloc(nc);
    for (size_t i = 0; i < nc; i++) {
        double u = (double)rand() / RAND_MAX;
        codes[i] = u < dense / 2 ? 1 : u < dense ? 2 : 0;
    }
    float *out = rnd(no), *dout = rnd(no), *w = rnd(nw), *b = rnd(OC);
    float *x = rnd((size_t)T * CH * H * W * 2), *col = rnd((size_t)T * CH * H * W * 18 + 64 * OC);
    float *dwp = rnd((size_t)T * nw), *dbp = rnd((size_t)T * OC);
    double tf[2] = {1e9, 1e9}, tb[2] = {1e9, 1e9};
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < 2; m++) {   /* 0: expand + im2col + sgemm, 1: from the codes */
            double t0 = now();
            #pragma omp parallel for schedule(dynamic, 1)
            for (int k = 0; k < B / CH; k++) {
                int t = omp_get_thread_num();
                float *xs = x + (size_t)t * CH * H * W * 2, *cw = col + (size_t)t * (CH * H * W * 18 + 64 * OC);
                const uint8_t *cc = codes + (size_t)k * CH * H * W;
                float *o = out + (size_t)k * CH * H * W * OC;
                if (m == 0) {
                    mr_obs_expand_forward(xs, cc, CH, H * W, 2, 0);
                    mr_conv3x3_relu_forward(o, cw, xs, w, b, CH, H, W, 2, OC);
                } else {
                    mr_conv3x3_codes_relu_forward(o, cw, cc, w, b, CH, H, W, 2, OC, 0);
                }
            }
            double t1 = now();
            #pragma omp parallel for schedule(dynamic, 1)
            for (int k = 0; k < B / CH; k++) {
                int t = omp_get_thread_num();
                float *xs = x + (size_t)t * CH * H * W * 2, *cw = col + (size_t)t * (CH * H * W * 18 + 64 * OC);
                const uint8_t *cc = codes + (size_t)k * CH * H * W;
                const float *d = dout + (size_t)k * CH * H * W * OC;
                if (m == 0) {
                    mr_obs_expand_forward(xs, cc, CH, H * W, 2, 0);
                    mr_conv3x3_backward(NULL, dwp + (size_t)t * nw, dbp + (size_t)t * OC, cw, d, xs, w, CH, H, W, 2, OC);
                } else {
                    mr_conv3x3_codes_backward(dwp + (size_t)t * nw, dbp + (size_t)t * OC, (double *)cw, d, NULL, cc, CH, H, W, 2, OC, 0);
                }
            }
            double t2 = now();
            if (t1 - t0 < tf[m]) tf[m] = t1 - t0;
            if (t2 - t1 < tb[m]) tb[m] = t2 - t1;
        }
    printf("B=%d  2->%2d first layer, %2.0f%% non-empty: expand+im2col+sgemm fwd %6.2f ms bwd(dw,db) %6.2f ms | "
           "from codes fwd %6.2f ms bwd %6.2f ms | ratio fwd %.2fx bwd %.2fx\n",
           B, OC, 100 * dense, tf[0] * 1e3, tb[0] * 1e3, tf[1] * 1e3, tb[1] * 1e3, tf[0] / tf[1], tb[0] / tb[1]);
    free(codes); free(out); free(dout); free(w); free(b); free(x); free(col); free(dwp); free(dbp);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--first") == 0) {
        printf("first layer, chunks of 32, %d threads\n", omp_get_max_threads());
        for (int k = 0; k < 2; k++) {
            run_codes(4096, 16, k ? 0.4 : 0.03, 5);
            run_codes(4096, 32, k ? 0.4 : 0.03, 5);
        }
        return 0;
    }
    const int chunk = argc > 2 && strcmp(argv[1], "--chunk") == 0 ? atoi(argv[2]) : 0;
    if (chunk < 0 || (chunk > 0 && 4096 % chunk != 0)) {
        fprintf(stderr, "usage: bench_conv_onednn [--chunk N]   (N divides 4096)\n");
        return 2;
    }
    printf("oneDNN %s\n", chunk ? "per chunk, on the calling thread, weight gradients summed in chunk order" :
                                   "over the whole batch, its own threads");
    run(4096, 2, 16, 5, chunk);  run(4096, 16, 32, 5, chunk);
    run(4096, 2, 32, 5, chunk); run(4096, 32, 64, 3, chunk); run(4096, 64, 64, 3, chunk);
    return 0;
}

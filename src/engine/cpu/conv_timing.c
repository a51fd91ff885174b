/*
 * conv_timing.c - mr_cpu_conv_time (moonrl.h): how long one layer of the
 * trunk takes on this machine with each implementation, the measurement
 * behind cpu.conv = "auto"'s per-layer choice (the warm-up's "algorithms"
 * step, lua/moonrl/run/conv_algorithms.lua, which also caches the answer).
 *
 * It runs what policy.c runs for a layer l >= 1: `threads` chunks at once,
 * one per thread on its own workspace (a few in turn per round), each a forward (bias + ReLU) and a
 * backward (input, weight and bias gradients), through the same calls
 * (conv_dnnl.h, conv_winograd.h, nn.c's im2col), with the weights loaded
 * once before (a pass loads them once for many chunks). The numbers are not
 * kept anywhere: nothing here affects a trainer's bits.
 *
 * What it is not: a benchmark of the whole network (bench/bench_policy.c),
 * or anything for the CUDA backend.
 */
#include "moonrl.h"
#include "arena.h"
#include "conv_dnnl.h"
#include "conv_winograd.h"
#include "errors.h"
#include "nn.h"
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int H, W, C, OC, chunk, threads, bf16;
    int want_dnnl, want_wino, dnnl_refused;
    char why[160];
    mr_conv_dnnl *dnnl;
    mr_conv_wino wino;
    float *w, *b;                            /* (OC,3,3,C), (OC) */
    float *inp, *out, *dout, *dinp, *col;    /* threads x one chunk each */
    float *dw, *db;                          /* threads x one layer's gradients */
    size_t in_f, out_f, col_f, w_f;          /* floats per thread (per layer for w_f) */
} bench;

/* Everything from the arena, run twice (plan, commit) as the trainer does. */
static void layout(bench *s, mr_arena *a) {
    const int ch[3] = {2, s->C, s->OC};   /* the layer is layer 1 of a 2-layer trunk */
    const size_t T = (size_t)s->threads, HW = (size_t)s->H * s->W;
    s->in_f = mr_arena_round((size_t)s->chunk * HW * s->C * sizeof(float)) / sizeof(float);
    s->out_f = mr_arena_round((size_t)s->chunk * HW * s->OC * sizeof(float)) / sizeof(float);
    s->col_f = mr_arena_round((size_t)s->chunk * HW * 9 * s->C * sizeof(float)) / sizeof(float);
    s->w_f = mr_arena_round((size_t)s->OC * 9 * s->C * sizeof(float)) / sizeof(float);
    s->w = MR_TAKE(a, float, s->w_f);
    s->b = MR_TAKE(a, float, s->OC);
    s->inp = MR_TAKE(a, float, s->in_f * T);
    s->dinp = MR_TAKE(a, float, s->in_f * T);
    s->out = MR_TAKE(a, float, s->out_f * T);
    s->dout = MR_TAKE(a, float, s->out_f * T);
    s->col = MR_TAKE(a, float, s->col_f * T);
    s->dw = MR_TAKE(a, float, (s->w_f + mr_arena_round((size_t)s->OC * sizeof(float)) / sizeof(float)) * T);
    s->db = s->dw ? s->dw + s->w_f * T : NULL;
    if (s->want_wino) mr_conv_wino_layout(&s->wino, ch, 2, s->H, s->W, s->threads, mr_wino_tile_for(s->H, s->W), a);
    s->dnnl = NULL;
    s->dnnl_refused = 0;
    if (s->want_dnnl) {   /* bf16 refused: fp32, as policy.c's layout does */
        int rc = mr_conv_dnnl_layout(&s->dnnl, ch, 2, s->H, s->W, s->chunk, s->threads, s->bf16, a, s->why,
                                     sizeof s->why);
        if (rc != 0 && s->bf16)
            rc = mr_conv_dnnl_layout(&s->dnnl, ch, 2, s->H, s->W, s->chunk, s->threads, 0, a, s->why, sizeof s->why);
        s->dnnl_refused = rc != 0;
    }
}

/* Uniform in [lo, hi) from a small LCG: the values only need to be ordinary
 * floats (no zeros or denormals that would flatter a kernel). */
static void fill(float *x, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(seed >> 8) * (1.0f / 16777216.0f);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Chunks per thread in one round: a few, as a block of the trunk gives each
 * thread, so one late thread start weighs less in a round's time. */
#define ROUND_CHUNKS 4

/* One round of candidate `conv`: every thread ROUND_CHUNKS times a forward
 * and a backward of its chunk. */
static void run_once(bench *s, int conv) {
    #pragma omp parallel num_threads(s->threads)
    for (int k = 0; k < ROUND_CHUNKS; k++) {
        const int t = omp_get_thread_num();
        const size_t T = (size_t)t;
        float *inp = s->inp + T * s->in_f, *dinp = s->dinp + T * s->in_f;
        float *out = s->out + T * s->out_f, *dout = s->dout + T * s->out_f;
        float *dw = s->dw + T * s->w_f, *db = s->db + T * (size_t)s->OC;
        if (conv == MR_CPU_CONV_WINOGRAD) {
            mr_conv_wino_forward(&s->wino, t, 1, out, inp, s->b, s->chunk);
            mr_conv_wino_backward(&s->wino, t, 1, dinp, dw, db, dout, inp, s->chunk);
        } else if (conv == MR_CPU_CONV_ONEDNN) {
            mr_conv_dnnl_forward(s->dnnl, t, 1, out, inp, s->b);
            mr_conv_dnnl_backward(s->dnnl, t, 1, dinp, dw, db, dout, inp);
        } else {   /* im2col: the backward accumulates, as policy.c's fresh partials */
            float *col = s->col + T * s->col_f;
            mr_conv3x3_relu_forward(out, col, inp, s->w, s->b, s->chunk, s->H, s->W, s->C, s->OC);
            memset(dinp, 0, sizeof(float) * (size_t)s->chunk * s->H * s->W * s->C);
            memset(dw, 0, sizeof(float) * (size_t)s->OC * 9 * s->C);
            memset(db, 0, sizeof(float) * (size_t)s->OC);
            mr_conv3x3_backward(dinp, dw, db, col, dout, inp, s->w, s->chunk, s->H, s->W, s->C, s->OC);
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

mr_status mr_cpu_conv_time(const int *convs, int n, int H, int W, int C, int OC, int chunk, int threads, int bf16,
                           int reps, double *seconds, mr_error *err) {
    if (!convs || !seconds || n < 1 || n > 8 || H < 1 || W < 1 || C < 1 || OC < 1 || chunk < 1 || reps < 1 ||
        reps > 1000 || H * W > (1 << 20) || C > 4096 || OC > 4096)
        return mr_fail(err, MR_ERR_ARG,
                       "mr_cpu_conv_time: n = %d (1 .. 8 candidates), H x W = %d x %d, C -> OC = %d -> %d, chunk %d, "
                       "reps %d: accepted positive sizes (channels up to 4096) and 1 .. 1000 reps",
                       n, H, W, C, OC, chunk, reps);
    bench s;
    memset(&s, 0, sizeof s);
    s.H = H, s.W = W, s.C = C, s.OC = OC, s.chunk = chunk, s.bf16 = bf16 != 0;
    s.threads = threads < 1 ? omp_get_num_procs() : threads;   /* as the trainer reads threads = 0 */
    for (int i = 0; i < n; i++) {
        if (convs[i] != MR_CPU_CONV_ONEDNN && convs[i] != MR_CPU_CONV_WINOGRAD && convs[i] != MR_CPU_CONV_IM2COL)
            return mr_fail(err, MR_ERR_ARG, "mr_cpu_conv_time: candidate %d = %d: accepted %d (onednn), %d (im2col) "
                           "or %d (winograd)", i, convs[i], MR_CPU_CONV_ONEDNN, MR_CPU_CONV_IM2COL,
                           MR_CPU_CONV_WINOGRAD);
        s.want_dnnl |= convs[i] == MR_CPU_CONV_ONEDNN;
        s.want_wino |= convs[i] == MR_CPU_CONV_WINOGRAD;
    }
    mr_arena a = {0};
    layout(&s, &a);
    if (mr_arena_commit(&a) != 0)
        return mr_fail(err, MR_ERR_NOMEM, "mr_cpu_conv_time: out of host memory for %zu bytes", a.size);
    layout(&s, &a);
    double *t = malloc(sizeof(double) * (size_t)n * (size_t)reps);
    if (!t) {
        mr_conv_dnnl_free(s.dnnl);
        mr_arena_release(&a);
        return mr_fail(err, MR_ERR_NOMEM, "mr_cpu_conv_time: out of host memory");
    }
    const size_t T = (size_t)s.threads;
    fill(s.w, s.w_f, 1, -0.1f, 0.1f);
    fill(s.b, (size_t)OC, 2, -0.1f, 0.1f);
    fill(s.inp, s.in_f * T, 3, 0.0f, 1.0f);
    fill(s.dout, s.out_f * T, 4, -1.0f, 1.0f);
    const float *w_of[2] = {NULL, s.w};
    if (s.dnnl) {
        mr_conv_dnnl_load_forward(s.dnnl, w_of);
        mr_conv_dnnl_load_backward(s.dnnl, w_of);
    }
    if (s.want_wino) {
        mr_conv_wino_load_forward(&s.wino, w_of);
        mr_conv_wino_load_backward(&s.wino, w_of);
    }
    mr_ok(err);
    /* round -1 warms caches and oneDNN's first-call work, untimed */
    for (int r = -1; r < reps; r++)
        for (int i = 0; i < n; i++) {
            if (convs[i] == MR_CPU_CONV_ONEDNN && !s.dnnl) continue;
            const double t0 = now();
            run_once(&s, convs[i]);
            if (r >= 0) t[(size_t)i * reps + r] = now() - t0;
        }
    for (int i = 0; i < n; i++) {
        if (convs[i] == MR_CPU_CONV_ONEDNN && !s.dnnl) {
            seconds[i] = -1;
            mr_fail(err, MR_OK, "oneDNN refused %d -> %d on %d x %d: %s", C, OC, H, W,
                    s.why[0] ? s.why : "no reason given");
            continue;
        }
        qsort(t + (size_t)i * reps, (size_t)reps, sizeof(double), cmp_double);
        const double *x = t + (size_t)i * reps;
        seconds[i] = reps & 1 ? x[reps / 2] : 0.5 * (x[reps / 2 - 1] + x[reps / 2]);
    }
    free(t);
    mr_conv_dnnl_free(s.dnnl);
    mr_arena_release(&a);
    return MR_OK;
}

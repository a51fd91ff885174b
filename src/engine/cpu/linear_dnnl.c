/*
 * linear_dnnl.c - bf16 products of the fully connected layers through
 * oneDNN's matmul (see linear_dnnl.h for the guarantees).
 */
#include "linear_dnnl.h"
#include "bf16.h"
#include "nn.h"
#include "one_thread.h"
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LIN_MAX_SHAPES 64      /* cached primitives: a few products x (full, tail) x batch sizes */
#define LIN_MAX_THREADS 256

enum { MODE_SUM = 0, MODE_BIAS = 1, MODE_BIAS_RELU = 2 };

typedef struct {
    int M, N, K, mode;
    long sa0, sa1, sb0, sb1, sc0;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c, bias, sp;
    size_t scratch;
} lin_shape;

typedef struct {
    dnnl_stream_t stream;
    void *scratch;
    size_t cap;
} lin_thread;

struct mr_linear_dnnl {
    dnnl_engine_t eng;
    int nthreads;
    pthread_mutex_t mu;
    int n;
    lin_shape shapes[LIN_MAX_SHAPES];
    lin_thread t[LIN_MAX_THREADS];
    const char *impl;
    int dry;   /* set (serially) while RUN_BLOCKS makes a product's shapes before running any block */
};

mr_linear_dnnl *mr_linear_dnnl_create(int nthreads) {
    if (!mr_bf16_isa()) return NULL;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > LIN_MAX_THREADS) nthreads = LIN_MAX_THREADS;
    mr_linear_dnnl *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->nthreads = nthreads;
    d->impl = "";
    pthread_mutex_init(&d->mu, NULL);
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) { free(d); return NULL; }
    for (int i = 0; i < nthreads; i++)
        if (dnnl_stream_create(&d->t[i].stream, d->eng, dnnl_stream_default_flags) != dnnl_success) {
            mr_linear_dnnl_free(d);
            return NULL;
        }
    return d;
}

void mr_linear_dnnl_free(mr_linear_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) dnnl_primitive_destroy(d->shapes[i].prim);
    for (int i = 0; i < d->nthreads; i++) {
        if (d->t[i].stream) dnnl_stream_destroy(d->t[i].stream);
        free(d->t[i].scratch);
    }
    if (d->eng) dnnl_engine_destroy(d->eng);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

const char *mr_linear_dnnl_impl(const mr_linear_dnnl *d) { return d ? d->impl : ""; }

/* ------------------------------------------------------------ primitives */

static int strided(dnnl_memory_desc_t *md, int r, int c, dnnl_data_type_t dt, long s0, long s1) {
    dnnl_dims_t dims = {r, c}, st = {s0, s1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, st) == dnnl_success ? 0 : -1;
}

/* The cached primitive for this block shape, created on first use; NULL if
 * oneDNN refuses it or offers only a reference kernel. */
static lin_shape *shape_for(mr_linear_dnnl *d, int M, int N, int K, int mode, long sa0, long sa1, long sb0,
                            long sb1, long sc0) {
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->n; i++) {
        lin_shape *s = &d->shapes[i];
        if (s->M == M && s->N == N && s->K == K && s->mode == mode && s->sa0 == sa0 && s->sa1 == sa1 &&
            s->sb0 == sb0 && s->sb1 == sb1 && s->sc0 == sc0) {
            pthread_mutex_unlock(&d->mu);
            return s;
        }
    }
    lin_shape *s = NULL;
    if (d->n < LIN_MAX_SHAPES) {
        lin_shape x;
        memset(&x, 0, sizeof x);
        x.M = M; x.N = N; x.K = K; x.mode = mode;
        x.sa0 = sa0; x.sa1 = sa1; x.sb0 = sb0; x.sb1 = sb1; x.sc0 = sc0;
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        int ok = !strided(&x.a, M, K, dnnl_bf16, sa0, sa1) && !strided(&x.b, K, N, dnnl_bf16, sb0, sb1) &&
                 !strided(&x.c, M, N, dnnl_f32, sc0, 1) && !strided(&x.bias, 1, N, dnnl_f32, N, 1) &&
                 dnnl_matmul_desc_init(&md, &x.a, &x.b, mode == MODE_SUM ? NULL : &x.bias, &x.c) == dnnl_success &&
                 dnnl_primitive_attr_create(&attr) == dnnl_success &&
                 dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
                 dnnl_post_ops_create(&po) == dnnl_success;
        if (ok && mode == MODE_SUM) ok = dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success;
        if (ok && mode == MODE_BIAS_RELU)
            ok = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success;
        ok = ok && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &md, attr, d->eng, NULL) == dnnl_success;
        const char *impl = "";
        if (ok) {
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
            ok = strstr(impl, "ref") == NULL;   /* reference kernels: 100x slower, refused */
        }
        if (ok) {
            x.sp = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
            x.scratch = dnnl_memory_desc_get_size(&x.sp);
            ok = dnnl_primitive_create(&x.prim, pd) == dnnl_success;
        }
        if (pd) dnnl_primitive_desc_destroy(pd);
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        if (ok) {
            d->shapes[d->n] = x;
            s = &d->shapes[d->n++];
            d->impl = impl;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return s;
}

/* One block: C (M,N) [+]= A (M,K) . B (K,N) [+ bias, ReLU], single-threaded. */
static int block(mr_linear_dnnl *d, int mode, int M, int N, int K, const uint16_t *A, long sa0, long sa1,
                 const uint16_t *B, long sb0, long sb1, float *C, long ldc, const float *bias) {
    lin_shape *s = shape_for(d, M, N, K, mode, sa0, sa1, sb0, sb1, ldc);
    if (!s) return -1;
    if (d->dry) return 0;
    int t = omp_in_parallel() ? omp_get_thread_num() : 0;
    if (t >= d->nthreads) return -1;
    lin_thread *th = &d->t[t];
    if (s->scratch > th->cap) {   /* a new largest shape on this thread: grown once */
        void *p = realloc(th->scratch, s->scratch);
        if (!p) return -1;
        th->scratch = p;
        th->cap = s->scratch;
    }
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL, mbias = NULL;
    int ok = dnnl_memory_create(&ma, &s->a, d->eng, (void *)A) == dnnl_success &&
             dnnl_memory_create(&mb, &s->b, d->eng, (void *)B) == dnnl_success &&
             dnnl_memory_create(&mc, &s->c, d->eng, C) == dnnl_success &&
             (!s->scratch || dnnl_memory_create(&ms, &s->sp, d->eng, th->scratch) == dnnl_success) &&
             (mode == MODE_SUM || dnnl_memory_create(&mbias, &s->bias, d->eng, (void *)bias) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
        int na = 3;
        if (ms) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms};
        if (mbias) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mbias};
        int n = mr_one_thread_begin();   /* the call's own OpenMP team is one thread */
        ok = dnnl_primitive_execute(s->prim, th->stream, na, args) == dnnl_success &&
             dnnl_stream_wait(th->stream) == dnnl_success;
        mr_one_thread_end(n);
    }
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (ms) dnnl_memory_destroy(ms);
    if (mbias) dnnl_memory_destroy(mbias);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------ products */

/* The blocks of an (M,N) output by nn.c's plan: rows or columns o .. o+n
 * per task (BODY_ROWS / BODY_COLS, with o and n in scope). The first and the
 * last block's shapes (the only two) are made first, serially: if oneDNN
 * refuses either, nothing is computed and the product returns -1, so the
 * caller's fp32 fallback starts from untouched outputs. */
#define RUN_BLOCKS(M, N, K, BODY_ROWS, BODY_COLS)                                   \
    do {                                                                            \
        int nb_, bs_, rows_ = mr_nn_gemm_plan((M), (N), (K), &nb_, &bs_);           \
        int bad_ = 0;                                                               \
        d->dry = 1;                                                                 \
        for (int j_ = 0; j_ < 2 && !bad_; j_++) {                                   \
            int i_ = j_ ? nb_ - 1 : 0;                                              \
            int o = i_ * bs_, D_ = rows_ ? (M) : (N), n = D_ - o < bs_ ? D_ - o : bs_; \
            if (rows_) bad_ |= (BODY_ROWS); else bad_ |= (BODY_COLS);               \
        }                                                                           \
        d->dry = 0;                                                                 \
        if (bad_) return -1;                                                        \
        _Pragma("omp parallel for schedule(dynamic, 1) reduction(|:bad_) if (nb_ > 1)") \
        for (int i_ = 0; i_ < nb_; i_++) {                                          \
            int o = i_ * bs_, D_ = rows_ ? (M) : (N), n = D_ - o < bs_ ? D_ - o : bs_; \
            if (rows_) bad_ |= (BODY_ROWS); else bad_ |= (BODY_COLS);               \
        }                                                                           \
        return bad_ ? -1 : 0;                                                       \
    } while (0)

int mr_linear_bf16_forward(mr_linear_dnnl *d, float *out, const uint16_t *inp16, const uint16_t *w16,
                           const float *b, int B, int C, int OC, int relu) {
    if (B <= 0 || OC <= 0) return 0;
    const int mode = relu ? MODE_BIAS_RELU : MODE_BIAS;
    /* op(B) = w16^T: (C, OC) with strides (1, C) */
    RUN_BLOCKS(B, OC, C,
               block(d, mode, n, OC, C, inp16 + (size_t)o * C, C, 1, w16, 1, C, out + (size_t)o * OC, OC, b),
               block(d, mode, B, n, C, inp16, C, 1, w16 + (size_t)o * C, 1, C, out + o, OC, b + o));
}

int mr_linear_bf16_dinp(mr_linear_dnnl *d, float *dinp, const uint16_t *dout16, const uint16_t *w16,
                        int B, int C, int OC) {
    if (B <= 0 || C <= 0 || OC <= 0) return 0;
    RUN_BLOCKS(B, C, OC,
               block(d, MODE_SUM, n, C, OC, dout16 + (size_t)o * OC, OC, 1, w16, C, 1, dinp + (size_t)o * C, C,
                     NULL),
               block(d, MODE_SUM, B, n, OC, dout16, OC, 1, w16 + o, C, 1, dinp + o, C, NULL));
}

int mr_linear_bf16_dw(mr_linear_dnnl *d, float *dw, const uint16_t *dout16, const uint16_t *inp16,
                      int B, int C, int OC) {
    if (B <= 0 || C <= 0 || OC <= 0) return 0;
    /* op(A) = dout16^T: (OC, B) with strides (1, OC) */
    RUN_BLOCKS(OC, C, B,
               block(d, MODE_SUM, n, C, B, dout16 + o, 1, OC, inp16, C, 1, dw + (size_t)o * C, C, NULL),
               block(d, MODE_SUM, OC, n, B, dout16, 1, OC, inp16 + o, C, 1, dw + o, C, NULL));
}

/*
 * conv_cudnn.cu - cuDNN for the trunk's 3x3 convolutions (conv_cudnn.h).
 *
 * The library is loaded with dlopen on first use, never linked (as cuBLAS,
 * policy.cu): its 1 GB of sub-libraries would otherwise load with every CPU
 * run. The legacy convolution API (cudnnConvolutionForward, ...BackwardData,
 * ...BackwardFilter, cudnnFind*AlgorithmEx) is still cuDNN 9's and takes
 * NHWC with the KRSC filters policy.c's layout already has; the graph API's
 * run-time fusion (conv + bias + ReLU) is the next step once a window has
 * measured this one.
 */
#include <cuda_runtime.h>
#include "dynlib.h"   /* dlopen: the library loaded at run time */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "conv_cudnn.h"
#include "cuda_check.h"

#if defined(__has_include)
#if __has_include(<cudnn.h>)
#define MR_HAVE_CUDNN_H 1
#endif
#endif

#ifndef MR_HAVE_CUDNN_H

extern "C" int mr_dnn_available(const char **why) {
    if (why) *why = "this build was compiled without cuDNN's headers (cudnn.h)";
    return 0;
}
extern "C" const char *mr_dnn_describe(void) { return "not loaded: this build was compiled without cudnn.h"; }
extern "C" size_t mr_dnn_version(void) { return 0; }
extern "C" mr_status mr_dnn_create(mr_dnn **d, mr_error *err) {
    *d = NULL;
    return mr_fail(err, MR_ERR_BACKEND, "cuDNN: this build was compiled without cudnn.h");
}
extern "C" void mr_dnn_destroy(mr_dnn *d) { (void)d; }
extern "C" mr_status mr_dnn_set_stream(mr_dnn *d, void *s, mr_error *err) {
    (void)d, (void)s;
    return mr_fail(err, MR_ERR_BACKEND, "cuDNN: not in this build");
}
extern "C" mr_status mr_dnn_pick(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, size_t ws, int algo[3],
                                 mr_error *err) {
    (void)d, (void)dt, (void)n, (void)H, (void)W, (void)C, (void)OC, (void)ws, (void)algo;
    return mr_fail(err, MR_ERR_BACKEND, "cuDNN: not in this build");
}
extern "C" mr_status mr_dnn_find(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, void *x, void *w, void *y,
                                 void *dx, void *dy, void *dw, void *ws, size_t wsb, int algo[3], float ms[3],
                                 mr_error *err) {
    (void)d, (void)dt, (void)n, (void)H, (void)W, (void)C, (void)OC, (void)x, (void)w, (void)y, (void)dx, (void)dy;
    (void)dw, (void)ws, (void)wsb, (void)algo, (void)ms;
    return mr_fail(err, MR_ERR_BACKEND, "cuDNN: not in this build");
}
extern "C" mr_status mr_dnn_conv(mr_dnn *d, const mr_pc_conv *c, const int algo[3], void *ws, size_t wsb, void *dw_lp,
                                 mr_error *err) {
    (void)d, (void)c, (void)algo, (void)ws, (void)wsb, (void)dw_lp;
    return mr_fail(err, MR_ERR_BACKEND, "cuDNN: not in this build");
}

#else /* MR_HAVE_CUDNN_H */

#include <cudnn.h>

#define MR_STR2(x) #x
#define MR_STR(x) MR_STR2(x)
#define MR_CUDNN_SONAME "libcudnn.so." MR_STR(CUDNN_MAJOR)

/* The entry points, typed from cudnn.h's own declarations. */
#define MR_DNN_FUNCS(X)                                                                                     \
    X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetVersion) X(cudnnGetErrorString)              \
    X(cudnnCreateTensorDescriptor) X(cudnnSetTensor4dDescriptor) X(cudnnDestroyTensorDescriptor)            \
    X(cudnnCreateFilterDescriptor) X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor)            \
    X(cudnnCreateConvolutionDescriptor) X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionMathType)   \
    X(cudnnDestroyConvolutionDescriptor) X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData)         \
    X(cudnnConvolutionBackwardFilter) X(cudnnGetConvolutionForwardWorkspaceSize)                            \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnGetConvolutionBackwardFilterWorkspaceSize)       \
    X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnFindConvolutionForwardAlgorithmEx)              \
    X(cudnnFindConvolutionBackwardDataAlgorithmEx) X(cudnnFindConvolutionBackwardFilterAlgorithmEx)

static struct {
#define MR_DNN_FIELD(f) decltype(&::f) f;
    MR_DNN_FUNCS(MR_DNN_FIELD)
#undef MR_DNN_FIELD
    int ok;
    size_t version;
    char why[320], desc[360];
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;

static void dnn_load(void) {
    void *h = mr_dynlib_open(MR_CUDNN_SONAME, "cuDNN", dnn.why, sizeof dnn.why);
#define MR_DNN_NAME(f) #f,
#define MR_DNN_SLOT(f) (void **)&dnn.f,
    static const char *const names[] = {MR_DNN_FUNCS(MR_DNN_NAME)};
    void **const slots[] = {MR_DNN_FUNCS(MR_DNN_SLOT)};
#undef MR_DNN_NAME
#undef MR_DNN_SLOT
    if (!h || !mr_dynlib_symbols(h, names, slots, (int)(sizeof names / sizeof *names), MR_CUDNN_SONAME, "cuDNN",
                                 dnn.why, sizeof dnn.why)) {
        snprintf(dnn.desc, sizeof dnn.desc, "not loaded: %s", dnn.why);
        return;
    }
    dnn.version = dnn.cudnnGetVersion();
    if (dnn.version / 10000 != CUDNN_MAJOR) {
        snprintf(dnn.why, sizeof dnn.why, "%s reports version %zu; this build needs major version %d",
                 MR_CUDNN_SONAME, dnn.version, CUDNN_MAJOR);
        snprintf(dnn.desc, sizeof dnn.desc, "not loaded: %s", dnn.why);
        return;
    }
    snprintf(dnn.desc, sizeof dnn.desc, "cuDNN %zu.%zu.%zu (%s)", dnn.version / 10000, dnn.version / 100 % 100,
             dnn.version % 100, MR_CUDNN_SONAME);
    dnn.ok = 1;
}

extern "C" int mr_dnn_available(const char **why) {
    pthread_once(&dnn_once, dnn_load);
    if (why) *why = dnn.ok ? "" : dnn.why;
    return dnn.ok;
}
extern "C" const char *mr_dnn_describe(void) {
    mr_dnn_available(NULL);
    return dnn.desc;
}
extern "C" size_t mr_dnn_version(void) { return mr_dnn_available(NULL) ? dnn.version : 0; }

struct mr_dnn {
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
};

static mr_status dnn_status(cudnnStatus_t s, const char *what, mr_error *err) {
    if (s == CUDNN_STATUS_SUCCESS) return MR_OK;
    return mr_fail(err, s == CUDNN_STATUS_ALLOC_FAILED ? MR_ERR_NOMEM : MR_ERR_BACKEND, "cuDNN error in %s: %s (%d)",
                   what, dnn.cudnnGetErrorString(s), (int)s);
}
#define DNN_TRY(call, what)                                   \
    do {                                                      \
        mr_status st_ = dnn_status((call), (what), err);      \
        if (st_ != MR_OK) return st_;                         \
    } while (0)

extern "C" void mr_dnn_destroy(mr_dnn *d) {
    if (!d) return;
    if (d->cd) dnn.cudnnDestroyConvolutionDescriptor(d->cd);
    if (d->wd) dnn.cudnnDestroyFilterDescriptor(d->wd);
    if (d->yd) dnn.cudnnDestroyTensorDescriptor(d->yd);
    if (d->xd) dnn.cudnnDestroyTensorDescriptor(d->xd);
    if (d->h) dnn.cudnnDestroy(d->h);
    free(d);
}

extern "C" mr_status mr_dnn_create(mr_dnn **out, mr_error *err) {
    *out = NULL;
    const char *why;
    if (!mr_dnn_available(&why)) return mr_fail(err, MR_ERR_BACKEND, "cuDNN: %s", why);
    mr_dnn *d = (mr_dnn *)calloc(1, sizeof *d);
    if (!d) return mr_fail(err, MR_ERR_NOMEM, "cuDNN: out of host memory");
    mr_status st = dnn_status(dnn.cudnnCreate(&d->h), "cudnnCreate (is a GPU present and the driver loaded?)", err);
    if (st == MR_OK) st = dnn_status(dnn.cudnnCreateTensorDescriptor(&d->xd), "cudnnCreateTensorDescriptor", err);
    if (st == MR_OK) st = dnn_status(dnn.cudnnCreateTensorDescriptor(&d->yd), "cudnnCreateTensorDescriptor", err);
    if (st == MR_OK) st = dnn_status(dnn.cudnnCreateFilterDescriptor(&d->wd), "cudnnCreateFilterDescriptor", err);
    if (st == MR_OK)
        st = dnn_status(dnn.cudnnCreateConvolutionDescriptor(&d->cd), "cudnnCreateConvolutionDescriptor", err);
    if (st != MR_OK) {
        mr_dnn_destroy(d);
        return st;
    }
    *out = d;
    return MR_OK;
}

extern "C" mr_status mr_dnn_set_stream(mr_dnn *d, void *stream, mr_error *err) {
    DNN_TRY(dnn.cudnnSetStream(d->h, (cudaStream_t)stream), "cudnnSetStream");
    return MR_OK;
}

static cudnnDataType_t dnn_type(int dt) {
    return dt == MR_BF16 ? CUDNN_DATA_BFLOAT16 : dt == MR_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* The descriptors for n samples of C -> OC on H x W in dt. */
static mr_status dnn_describe(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, mr_error *err) {
    const cudnnDataType_t t = dnn_type(dt);
    DNN_TRY(dnn.cudnnSetTensor4dDescriptor(d->xd, CUDNN_TENSOR_NHWC, t, n, C, H, W), "the input's descriptor");
    DNN_TRY(dnn.cudnnSetTensor4dDescriptor(d->yd, CUDNN_TENSOR_NHWC, t, n, OC, H, W), "the output's descriptor");
    DNN_TRY(dnn.cudnnSetFilter4dDescriptor(d->wd, t, CUDNN_TENSOR_NHWC, OC, C, 3, 3), "the filter's descriptor");
    DNN_TRY(dnn.cudnnSetConvolution2dDescriptor(d->cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "the convolution's descriptor");
    /* fp32: plain FMA (no TF32, as the cuBLAS path's CUBLAS_COMPUTE_32F);
     * bf16 / fp16: the tensor cores, accumulating in fp32 */
    DNN_TRY(dnn.cudnnSetConvolutionMathType(d->cd, dt == MR_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
            "cudnnSetConvolutionMathType");
    return MR_OK;
}

static const char *kind_name(int k) {
    return k == 0 ? "forward" : k == 1 ? "backward-data" : "backward-filter";
}

/* The first usable entry of a perf list: succeeded, deterministic, within ws. */
template <typename P>
static int first_usable(const P *p, int n, size_t ws) {
    for (int i = 0; i < n; i++)
        if (p[i].status == CUDNN_STATUS_SUCCESS && p[i].determinism == CUDNN_DETERMINISTIC && p[i].memory <= ws)
            return i;
    return -1;
}

extern "C" mr_status mr_dnn_pick(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, size_t ws, int algo[3],
                                 mr_error *err) {
    mr_status st = dnn_describe(d, dt, n, H, W, C, OC, err);
    if (st != MR_OK) return st;
    int got = 0, i;
    if (algo[0] < 0) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN_TRY(dnn.cudnnGetConvolutionForwardAlgorithm_v7(d->h, d->xd, d->wd, d->cd, d->yd,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p),
                "cudnnGetConvolutionForwardAlgorithm_v7");
        if ((i = first_usable(p, got, ws)) >= 0) algo[0] = (int)p[i].algo;
    }
    if (algo[1] < 0) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN_TRY(dnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(d->h, d->wd, d->yd, d->cd, d->xd,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p),
                "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        if ((i = first_usable(p, got, ws)) >= 0) algo[1] = (int)p[i].algo;
    }
    if (algo[2] < 0) {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        DNN_TRY(dnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(d->h, d->xd, d->yd, d->cd, d->wd,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p),
                "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        if ((i = first_usable(p, got, ws)) >= 0) algo[2] = (int)p[i].algo;
    }
    for (int k = 0; k < 3; k++)
        if (algo[k] < 0)
            return mr_fail(err, MR_ERR_BACKEND, "cuDNN has no deterministic %s algorithm for %d -> %d on %d x %d "
                           "(%d samples) within its %zu MiB workspace", kind_name(k), C, OC, H, W, n, ws >> 20);
    return MR_OK;
}

extern "C" mr_status mr_dnn_find(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, void *x, void *w, void *y,
                                 void *dx, void *dy, void *dw, void *ws, size_t wsb, int algo[3], float ms[3],
                                 mr_error *err) {
    mr_status st = dnn_describe(d, dt, n, H, W, C, OC, err);
    if (st != MR_OK) return st;
    int got = 0, i;
    for (int k = 0; k < 3; k++) algo[k] = -1, ms[k] = -1.0f;
    {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN_TRY(dnn.cudnnFindConvolutionForwardAlgorithmEx(d->h, d->xd, x, d->wd, w, d->cd, d->yd, y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p, ws, wsb),
                "cudnnFindConvolutionForwardAlgorithmEx");
        if ((i = first_usable(p, got, wsb)) >= 0) algo[0] = (int)p[i].algo, ms[0] = p[i].time;
    }
    {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN_TRY(dnn.cudnnFindConvolutionBackwardDataAlgorithmEx(d->h, d->wd, w, d->yd, dy, d->cd, d->xd, dx,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p, ws,
                                                                wsb),
                "cudnnFindConvolutionBackwardDataAlgorithmEx");
        if ((i = first_usable(p, got, wsb)) >= 0) algo[1] = (int)p[i].algo, ms[1] = p[i].time;
    }
    {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        DNN_TRY(dnn.cudnnFindConvolutionBackwardFilterAlgorithmEx(d->h, d->xd, x, d->yd, dy, d->cd, d->wd, dw,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p,
                                                                  ws, wsb),
                "cudnnFindConvolutionBackwardFilterAlgorithmEx");
        if ((i = first_usable(p, got, wsb)) >= 0) algo[2] = (int)p[i].algo, ms[2] = p[i].time;
    }
    return MR_OK;
}

extern "C" mr_status mr_dnn_conv(mr_dnn *d, const mr_pc_conv *c, const int algo[3], void *ws, size_t wsb, void *dw_lp,
                                 mr_error *err) {
    mr_status st = dnn_describe(d, c->dt, c->n, c->H, c->W, c->C, c->OC, err);
    if (st != MR_OK) return st;
    const float one = 1.0f, zero = 0.0f;
    size_t need = 0;
    char what[96];
    switch (c->op) {
    case MR_PCC_FWD: {
        const cudnnConvolutionFwdAlgo_t a = (cudnnConvolutionFwdAlgo_t)algo[0];
        DNN_TRY(dnn.cudnnGetConvolutionForwardWorkspaceSize(d->h, d->xd, d->wd, d->cd, d->yd, a, &need),
                "cudnnGetConvolutionForwardWorkspaceSize");
        if (need > wsb) break;
        snprintf(what, sizeof what, "the layer %d forward (algorithm %d)", c->layer, algo[0]);
        DNN_TRY(dnn.cudnnConvolutionForward(d->h, &one, d->xd, c->x, d->wd, c->w, d->cd, a, ws, wsb, &zero, d->yd,
                                            c->y), what);
        return MR_OK;
    }
    case MR_PCC_BWD_DATA: {
        const cudnnConvolutionBwdDataAlgo_t a = (cudnnConvolutionBwdDataAlgo_t)algo[1];
        DNN_TRY(dnn.cudnnGetConvolutionBackwardDataWorkspaceSize(d->h, d->wd, d->yd, d->cd, d->xd, a, &need),
                "cudnnGetConvolutionBackwardDataWorkspaceSize");
        if (need > wsb) break;
        snprintf(what, sizeof what, "the layer %d input gradient (algorithm %d)", c->layer, algo[1]);
        DNN_TRY(dnn.cudnnConvolutionBackwardData(d->h, &one, d->wd, c->w, d->yd, c->dy, d->cd, a, ws, wsb, &zero,
                                                 d->xd, c->y), what);
        return MR_OK;
    }
    case MR_PCC_BWD_FILTER: {
        const cudnnConvolutionBwdFilterAlgo_t a = (cudnnConvolutionBwdFilterAlgo_t)algo[2];
        DNN_TRY(dnn.cudnnGetConvolutionBackwardFilterWorkspaceSize(d->h, d->xd, d->yd, d->cd, d->wd, a, &need),
                "cudnnGetConvolutionBackwardFilterWorkspaceSize");
        if (need > wsb) break;
        snprintf(what, sizeof what, "the layer %d weight gradient (algorithm %d)", c->layer, algo[2]);
        const int lp = c->dt != MR_FP32;
        if (lp && !dw_lp) return mr_fail(err, MR_ERR_ARG, "cuDNN %s: no T scratch for a bf16 / fp16 gradient", what);
        DNN_TRY(dnn.cudnnConvolutionBackwardFilter(d->h, &one, d->xd, c->x, d->yd, c->dy, d->cd, a, ws, wsb,
                                                   lp ? &zero : &one, d->wd, lp ? dw_lp : (void *)c->dw), what);
        return MR_OK;
    }
    default:
        return mr_fail(err, MR_ERR_ARG, "cuDNN: unknown convolution operation %d", c->op);
    }
    return mr_fail(err, MR_ERR_BACKEND, "cuDNN: layer %d (%d -> %d on %d x %d, %d samples) needs %zu bytes of "
                   "workspace for its %s algorithm, more than the %zu planned", c->layer, c->C, c->OC, c->H, c->W,
                   c->n, need, kind_name(c->op - 1), wsb);
}

#endif /* MR_HAVE_CUDNN_H */

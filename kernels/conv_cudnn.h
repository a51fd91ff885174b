/*
 * conv_cudnn.h - cuDNN for the trunk's 3x3 convolutions (cuda.conv = cudnn
 * or auto; kernels/conv_cudnn.cu): the library loaded at run time, one
 * handle with its descriptors, an algorithm choice (cuDNN's heuristics or
 * its own timed search), and the three convolutions of policy_layers.h's
 * conv operation (mr_pc_conv). Used by policy.cu only.
 *
 * cuDNN is not linked, as cuBLAS is not (policy.cu): the first use dlopens
 * libcudnn.so.<major compiled against> from the loader's path, then the
 * toolkit's lib directory; a build without cudnn.h compiles this file to
 * "not available" answers, so such a build still runs im2col.
 *
 * Layout: NHWC activations, KRSC (= NHWC) filters, cross-correlation, pad 1,
 * stride 1, fp32 accumulation. fp32 runs with CUDNN_FMA_MATH (no TF32, as
 * the cuBLAS path), bf16 / fp16 with the tensor cores. Only deterministic
 * algorithms are chosen (a repeat gives the same bits).
 */
#ifndef MR_CONV_CUDNN_H
#define MR_CONV_CUDNN_H
#include <stddef.h>
#include "moonrl.h"
#include "policy_layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when cuDNN is loaded (loads it on the first call); else 0 and why. */
int mr_dnn_available(const char **why);
/* "cuDNN 9.19.0 (libcudnn.so.9)" or "not loaded: ..." */
const char *mr_dnn_describe(void);
/* cudnnGetVersion(), 0 when not loaded */
size_t mr_dnn_version(void);

typedef struct mr_dnn mr_dnn;   /* a handle and its descriptors */

mr_status mr_dnn_create(mr_dnn **d, mr_error *err);
void mr_dnn_destroy(mr_dnn *d);
mr_status mr_dnn_set_stream(mr_dnn *d, void *stream, mr_error *err);

/* Fills algo[k] < 0 (k = forward, backward data, backward filter) with
 * cuDNN's heuristic choice (cudnnGet*Algorithm_v7: no GPU work): the first
 * deterministic one whose workspace for n samples is at most ws_bytes.
 * MR_ERR_BACKEND with a message when none is. */
mr_status mr_dnn_pick(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, size_t ws_bytes, int algo[3],
                      mr_error *err);

/* cuDNN's timed search (cudnnFind*AlgorithmEx, which runs every candidate on
 * the given buffers): the fastest deterministic algorithm of each kind within
 * ws_bytes into algo[], its time into ms[] (-1 where none ran). x (n,H,W,C),
 * w (OC,3,3,C), y (n,H,W,OC) T; dw (OC,3,3,C) T scratch; every buffer is
 * overwritten. */
mr_status mr_dnn_find(mr_dnn *d, int dt, int n, int H, int W, int C, int OC, void *x, void *w, void *y, void *dx,
                      void *dy, void *dw, void *ws, size_t ws_bytes, int algo[3], float ms[3], mr_error *err);

/* One convolution of the conv operation (policy_layers.h's mr_pc_conv) with
 * algo[] (all >= 0). BWD_FILTER in fp32 adds into c->dw (beta 1); in bf16 /
 * fp16 it writes the gradient in T into dw_lp (OC*9*C elements) and the
 * caller adds it into c->dw (MR_PCJ_ACC_F32). */
mr_status mr_dnn_conv(mr_dnn *d, const mr_pc_conv *c, const int algo[3], void *ws, size_t ws_bytes, void *dw_lp,
                      mr_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MR_CONV_CUDNN_H */

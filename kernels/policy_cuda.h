/*
 * policy_cuda.h - the actor-critic of policy.h on the GPU (kernels/policy.cu):
 * forward and backward, fp32, or bf16 / fp16 GEMMs with fp32 accumulation
 * and fp32 master weights and gradients.
 *
 * The same network, the same flat parameter layout (offsets from policy.c's
 * own mr_policy_layout), the same NHWC / (H,W,C) flatten order and the same
 * inputs and outputs as mr_policy_forward / mr_policy_backward: a params
 * array copies between a host mr_policy and pc->params as it is.
 *
 * How (kernels/policy_math.h has the schedule): convolutions are im2col +
 * one cuBLAS GEMM per layer and chunk of samples (the observation expansion
 * from the uint8 codes, or the read of a float image channels last, happens
 * inside the first layer's im2col: that layer is im2col whatever cuda.conv
 * says); linear
 * layers are one GEMM each over the whole batch; bias + ReLU, ReLU backward
 * (fused into col2im for the convs), the critic input and the bias gradients
 * (fixed two-stage sums in double, no atomics) are small kernels. cuBLAS
 * computes in fp32 with TF32 off (CUBLAS_COMPUTE_32F, default math mode);
 * in bf16 / fp16 the activations and a copy of the weights are stored in
 * that type, the GEMMs accumulate in fp32, weight and bias gradients
 * accumulate into the fp32 grads.
 *
 * Memory: everything is planned at creation for max_batch samples and taken
 * from the caller's device memory manager (params, grads, one workspace that
 * also holds cuBLAS's); nothing is allocated afterwards. Everything runs
 * asynchronously on the caller's stream with no host synchronisation, so a
 * forward + backward can be captured in a CUDA graph. One stream at a time
 * per policy (the workspace is shared by every call). Errors of the kernels
 * themselves surface at the next synchronisation (mr_cuda_stream_sync).
 *
 * Every pointer argument is device memory. Streams are void * (cudaStream_t).
 */
#ifndef MR_POLICY_CUDA_H
#define MR_POLICY_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "moonrl.h"
#include "devmem_cuda.h"
#include "policy_mlp_math.h"   /* policy_math.h (the CNN) and the MLP trunk: mr_pn_* either */

#ifdef __cplusplus
extern "C" {
#endif

/* The struct is plain data, visible in every build (the CUDA trainer's CPU
 * test fills one through an emulation of these functions). */
typedef struct mr_policy_cuda {
    mr_pc_plan plan;           /* shapes, parameter offsets (plan.net.tensors), workspace layout */
    mr_pc_bufs buf;            /* the workspace, carved */
    mr_devmem *dev;
    float *params, *grads;     /* plan.net.n_params each, fp32: the master weights and their gradients */
    unsigned char *ws;         /* plan.ws_bytes */
    void *blas;                /* cublasHandle_t */
    void *blas_stream;         /* the stream cuBLAS was last given */
    int fwd_B, fwd_proxy;      /* the last forward (enqueued); -1: none or it failed */
    void *dnn;                 /* mr_dnn (conv_cudnn.h) when a layer runs through cuDNN (plan.dnn), else NULL */
    void *dnn_stream;          /* the stream cuDNN was last given */
    int algo[MR_MAX_CONV][3];  /* per cuDNN layer: forward, backward-data, backward-filter algorithms */
    char conv_note[240];       /* how the convolutions run (cuda.conv), for the description */
    void *lt;                  /* mr_lt (gemm_lt.h) when cuda.epilogue = fused (plan.epilogue), else NULL */
    int aux_ok[2];             /* the ReLU bits of feat and chid were written by the last forward (buf.aux_ok) */
    long epi_counts[2];        /* products with an epilogue: [0] fused by cuBLASLt, [1] left to separate kernels */
    char epi_note[160];        /* how the epilogues run (cuda.epilogue), for the description */
} mr_policy_cuda;

/* cuda.conv's per-layer answer (every build; no GPU touched): dnn[l] = 1
 * where layer l (1 .. L-1) runs through cuDNN, algo[l] its algorithms (-1:
 * cuDNN's heuristics at creation); available: cuDNN can be loaded (else
 * every layer is im2col and the note says why). cuda NULL: im2col. */
static inline void mr_cuda_conv_resolve(const mr_cuda_config *cuda, int L, int available, const char *why,
                                        int8_t dnn[MR_MAX_CONV], int algo[MR_MAX_CONV][3], char *note,
                                        size_t note_len) {
    int any = 0;
    for (int l = 0; l < MR_MAX_CONV; l++) {
        dnn[l] = 0;
        algo[l][0] = algo[l][1] = algo[l][2] = -1;
    }
    const int conv = cuda ? cuda->conv : MR_CUDA_CONV_IM2COL;
    for (int l = 1; l < L && l < MR_MAX_CONV && conv != MR_CUDA_CONV_IM2COL; l++) {
        const mr_cuda_conv_layer *e = &cuda->conv_layers[l];
        const int mine = e->impl ? e->impl : conv;
        if (mine != MR_CUDA_CONV_CUDNN) continue;
        dnn[l] = 1;
        any = 1;
        for (int k = 0; k < 3; k++) algo[l][k] = e->impl == MR_CUDA_CONV_CUDNN ? e->algo[k] : -1;
    }
    if (any && !available) {
        for (int l = 0; l < MR_MAX_CONV; l++) dnn[l] = 0;
        snprintf(note, note_len, "convs im2col + cuBLAS (cuda.conv asked for cuDNN, which is unavailable: %.160s)",
                 why ? why : "unknown");
        return;
    }
    size_t o = (size_t)snprintf(note, note_len, "convs: layer 0 im2col (from the codes)");
    for (int l = 1; l < L && o < note_len; l++) {
        if (dnn[l]) o += (size_t)snprintf(note + o, note_len - o, ", %d cuDNN", l);
        else o += (size_t)snprintf(note + o, note_len - o, ", %d im2col", l);
    }
}

#ifdef MOONRL_HAVE_CUDA
/* Device bytes mr_policy_cuda_create takes (before the manager's rounding);
 * 0 when the arguments are refused. view = V (the observation is V x V),
 * chunk = samples per conv GEMM (0 = MR_PC_CHUNK), precision = mr_precision. */
size_t mr_policy_cuda_bytes(const mr_policy_config *cfg, int view, int max_batch, int chunk, int precision);

/* Checks every argument (before touching the GPU), creates a cuBLAS handle
 * and allocates from dev. params and grads are not initialised: copy params
 * in (mr_cuda_copy) and zero the grads (mr_policy_cuda_zero_grad). On
 * failure nothing is left allocated and *pc is zeroed. */
mr_status mr_policy_cuda_create(mr_policy_cuda *pc, const mr_policy_config *cfg, int view, int max_batch, int chunk,
                                int precision, mr_devmem *dev, mr_error *err);
/* The same with cuda.conv's and cuda.epilogue's choices (cuda NULL: im2col
 * and separate, as above). cuda.epilogue = fused takes cuBLASLt (an error
 * when it cannot be loaded) and the plan's regions of mr_pc_plan_epi;
 * pc->epi_counts counts the products fused and those its heuristics had no
 * algorithm for (run the separate way). With cuda.conv: layers
 * through cuDNN take its workspace from the plan (mr_pc_plan_dnn) and the
 * algorithms cuda->conv_layers names or cuDNN's heuristics pick for a chunk.
 * pc->conv_note says what runs. */
mr_status mr_policy_cuda_create_conv(mr_policy_cuda *pc, const mr_policy_config *cfg, int view, int max_batch,
                                     int chunk, int precision, const mr_cuda_config *cuda, mr_devmem *dev,
                                     mr_error *err);
size_t mr_policy_cuda_bytes_conv(const mr_policy_config *cfg, int view, int max_batch, int chunk, int precision,
                                 const mr_cuda_config *cuda);
/* moonrl.h's mr_cuda_conv_time (the table's conv_time). */
mr_status mr_cuda_conv_time_gpu(int device, int H, int W, int C, int OC, int chunk, int precision, int reps,
                                mr_cuda_conv_timing *out, mr_error *err);
/* Frees everything; the stream that used it must be idle. NULL or a zeroed pc: no-op. */
void mr_policy_cuda_destroy(mr_policy_cuda *pc);

mr_status mr_policy_cuda_zero_grad(mr_policy_cuda *pc, void *stream, mr_error *err);

/* codes (B,obs_row): VV u8 cell codes, or C x VV fp32 of a float image
 * (cfg->obs_image; proxy is then ignored), extra (B,2) fp32 or NULL (zeros)
 * -> logits (B,8), value (B) raw, fp32; 0 <= B <= max_batch. Keeps what
 * backward needs (the observations are copied). In bf16 / fp16 it first writes the reduced copy of pc->params. */
mr_status mr_policy_cuda_forward(mr_policy_cuda *pc, const uint8_t *codes, const float *extra, int B, int proxy,
                                 float *logits, float *value, void *stream, mr_error *err);
/* dlogits (B,8), dvalue (B) fp32 for the last forward (same B; params
 * unchanged since): ACCUMULATES into pc->grads. */
mr_status mr_policy_cuda_backward(mr_policy_cuda *pc, const float *dlogits, const float *dvalue, int B, void *stream,
                                  mr_error *err);

/* ---- single layers, fp32, the functions the network runs (for tests and
 * other networks). pc: any created policy, for its cuBLAS handle and
 * workspace (so not during that policy's own forward/backward on another
 * stream). Shapes and semantics as nn.h, except where noted. */
/* out (B,H,W,OC) = [relu](conv3x3(inp (B,H,W,C))); col (B*H*W, 9C) workspace. */
mr_status mr_cuda_conv3x3_forward(mr_policy_cuda *pc, float *out, float *col, const float *inp, const float *w,
                                  const float *b, int B, int H, int W, int C, int OC, int relu, void *stream,
                                  mr_error *err);
/* As mr_conv3x3_backward; with mask != NULL (the forward output that was inp)
 * dinp is WRITTEN as mask > 0 ? col2im : 0 (ReLU backward fused), without it
 * dinp += col2im. part: mr_pc_bias_partials(B*H*W, OC) doubles. */
mr_status mr_cuda_conv3x3_backward(mr_policy_cuda *pc, float *dinp, const float *mask, float *dw, float *db,
                                   double *part, float *col, const float *dout, const float *inp, const float *w,
                                   int B, int H, int W, int C, int OC, void *stream, mr_error *err);
/* out (B,OC) = [relu](inp (B,C) . w^T + b). */
mr_status mr_cuda_linear_forward(mr_policy_cuda *pc, float *out, const float *inp, const float *w, const float *b,
                                 int B, int C, int OC, int relu, void *stream, mr_error *err);
/* As mr_linear_backward (dinp += ...); part: mr_pc_bias_partials(B, OC) doubles. */
mr_status mr_cuda_linear_backward(mr_policy_cuda *pc, float *dinp, float *dw, float *db, double *part,
                                  const float *dout, const float *inp, const float *w, int B, int C, int OC,
                                  void *stream, mr_error *err);

/* cuda.epilogue's products on one hidden layer and its head, as the network
 * runs fc and the actor (tests; pc created with cuda.epilogue = fused, or
 * not for the separate kernels), in the policy's precision T = pc->plan.dt:
 *   forward   h (B,H) T = relu(x (B,C) T . w1^T + b1), its ReLU bits kept
 *             (fused); y (B,O) fp32 = h . w2^T + b2
 *   backward  dh (B,H) T = (dy (B,O) T . w2) where h > 0, else 0;
 *             db1 += column sums of dh; dw2 += dy^T h; db2 += column sums
 *             of dy; dw1 += dh^T x; dx (B,C) T = dh . w1
 * w1 (H,C), w2 (O,H) in T; biases and weight gradients fp32 (+=). Limits:
 * B <= max_batch, H and O <= the network's hidden (the mask's bits and the
 * bias-gradient buffers are fc's). backward follows forward with the same B
 * and h. */
mr_status mr_cuda_block_forward(mr_policy_cuda *pc, void *h, float *y, const void *x, const void *w1,
                                const float *b1, const void *w2, const float *b2, int B, int C, int H, int O,
                                void *stream, mr_error *err);
mr_status mr_cuda_block_backward(mr_policy_cuda *pc, void *dh, void *dx, float *dw1, float *db1, float *dw2,
                                 float *db2, const void *dy, const void *h, const void *x, const void *w1,
                                 const void *w2, int B, int C, int H, int O, void *stream, mr_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_POLICY_CUDA_H */

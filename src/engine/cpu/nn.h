/*
 * nn.h - the CPU layers of the actor-critic: each a forward/backward pair of
 * free functions over raw float pointers and sizes (llm.c style).
 *
 * Layout: NHWC everywhere (channels last). A 3x3 convolution is im2col + one
 * sgemm whose output is already NHWC; a linear layer is one sgemm. The first
 * convolution can also be computed straight from the observation codes
 * (mr_conv3x3_codes_*: cpu.conv = onednn; the other layers then run through
 * conv_dnnl.h).
 *
 * What this file deliberately is not: it owns no memory, knows nothing of the
 * network's shape (policy.c does) and allocates nothing; every workspace is
 * passed in.
 *
 * Gradient convention: every backward ACCUMULATES (+=) into dinp, dw and db,
 * as llm.c does; the caller zeroes them. Any of dinp, dw, db may be NULL to
 * skip that product (the first conv has no dinp; policy.c computes a linear
 * layer's dw over the whole batch and its dinp per chunk). The exception is
 * mr_relu_backward, which WRITES dinp and may run in place (dinp == dout).
 *
 * Threads: matrix products are OpenBLAS sgemm (its own OpenMP threads);
 * elementwise loops are OpenMP. Every result is independent of the thread
 * count: elementwise work is per element, and the bias-gradient reduction
 * gives each output channel to one thread which sums the rows in order.
 */
#ifndef MR_NN_H
#define MR_NN_H
#include <stddef.h>
#include <stdint.h>

/* codes (B,VV) cell codes -> out (B,VV,C) (obs_codes.h).
 * proxy == 0 (ground truth): one-hot, code k in 1 .. C sets channel k-1
 * (foraging, C = 2: ch0 = food, ch1 = poison), code 0 (empty) none.
 * The proxies are foraging's (C = 2; codes 0 empty / 1 food / 2 poison):
 * proxy == 1: both channels = interestingness, empty 0, food 1.0, poison 0.5.
 * proxy == 2: the same as the original's uint8 storage left it: poison 0
 * (obs_codes.h, MR_EXPAND_PROXY_UINT8; the training forward with
 * env.proxy_obs_storage = "uint8").
 * Codes above C read as empty. The input is data: there is no backward. */
void mr_obs_expand_forward(float *out, const uint8_t *codes, int B, int VV, int C, int proxy);

/* A float image observation as the network reads it: img (B,C,VV), each
 * sample channel-major as environments write it (C x H x W), into out
 * (B,VV,C), the layers' layout. The input is data: there is no backward. */
void mr_image_hwc_forward(float *out, const float *img, int B, int VV, int C);

/* 3x3 convolution, padding 1, stride 1.
 * inp (B,H,W,C), w (OC,3,3,C) = row-major (OC, 9C), b (OC), out (B,H,W,OC),
 * col workspace (B*H*W, 9*C): col[(b,y,x)][(ky,kx,c)] = inp[b][y+ky-1][x+kx-1][c]
 * (0 outside). out is written: out = col . w^T + b. */
void mr_im2col3x3(float *col, const float *inp, int B, int H, int W, int C);
void mr_conv3x3_forward(float *out, float *col, const float *inp, const float *w,
                        const float *b, int B, int H, int W, int C, int OC);
/* out = relu(conv3x3(inp)): the same as mr_conv3x3_forward then
 * mr_relu_forward (bit for bit), in one pass. */
void mr_conv3x3_relu_forward(float *out, float *col, const float *inp, const float *w,
                             const float *b, int B, int H, int W, int C, int OC);
/* dout (B,H,W,OC), inp (B,H,W,C) the forward's input, w (OC,9C).
 * dw (OC,9C) += dout^T . col;  db (OC) += sum over (b,y,x) of dout;
 * dinp (B,H,W,C) += col2im(dout . w). col (B*H*W, 9C) is overwritten (it
 * holds im2col(inp), then dout . w). dinp may be NULL (first layer), as may
 * dw and db. */
void mr_conv3x3_backward(float *dinp, float *dw, float *db, float *col,
                         const float *dout, const float *inp, const float *w,
                         int B, int H, int W, int C, int OC);

/* The first conv straight from the observation codes (no expansion, no
 * im2col): codes (B,H*W) cell codes, w (OC,3,3,C), b (OC), out (B,H,W,OC) =
 * relu(conv3x3(expand(codes, C, proxy)) + b) (written); expand as
 * mr_obs_expand_forward. Only codes 1 .. C contribute (foraging's FOOD and
 * POISON; EMPTY and codes above C read as 0 in every channel), so a pixel
 * costs one OC-vector add per non-empty tap, and a pixel with none in its
 * window is relu(b) stored: tab ((9C+1)*OC floats, workspace) holds relu(b)
 * and T[tap][code-1][o] = sum over ch of w[o][tap][ch] v(code,ch) (one-hot:
 * w[o][tap][code-1]). Serial: policy.c calls it per chunk inside its own
 * parallel loop. */
void mr_conv3x3_codes_relu_forward(float *out, float *tab, const uint8_t *codes, const float *w,
                                   const float *b, int B, int H, int W, int C, int OC, int proxy);
/* Its weight and bias gradients (the observation needs no input gradient):
 * dout (B,H,W,OC), through the layer's ReLU where y (its output, the same
 * shape) is given (dout where y > 0, else 0: mr_relu_backward's bits
 * without its pass; NULL: dout is already through it); dw (OC,3,3,C) +=
 * dout^T . im2col(expand(codes)); db (OC) += column sums of dout. Sums per
 * (tap, code) and the bias sums are kept in double over the B*H*W pixels in
 * pixel order (acc: (9C+1)*OC doubles and OC floats, workspace), then rounded
 * once into dw, db. Both passes add terms only at the pixels whose window
 * holds a code 1 .. C (few: the other pixels' sums are the bias alone), in
 * the order of the dense loop, so the bits are its. Serial. */
void mr_conv3x3_codes_backward(float *dw, float *db, double *acc, const float *dout, const float *y,
                               const uint8_t *codes, int B, int H, int W, int C, int OC, int proxy);

/* Linear: inp (B,C), w (OC,C), b (OC) or NULL, out (B,OC) = inp . w^T + b (written). */
void mr_linear_forward(float *out, const float *inp, const float *w, const float *b,
                       int B, int C, int OC);
/* out = relu(inp . w^T + b): mr_linear_forward then mr_relu_forward, bit for bit. */
void mr_linear_relu_forward(float *out, const float *inp, const float *w, const float *b,
                            int B, int C, int OC);
/* dout (B,OC). dinp (B,C) += dout . w;  dw (OC,C) += dout^T . inp;
 * db (OC) += column sums of dout. Each of dinp, dw, db may be NULL. */
void mr_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int B, int C, int OC);

/* How a product's (M,N) output is cut into blocks, each one single-threaded
 * call over the full K (the shape alone decides, so the bits do not depend
 * on the thread count): returns 1 for *nb blocks of *bs rows, 0 for blocks
 * of *bs columns (the last block may be shorter). The fp32 products here
 * and the bf16 ones of linear_dnnl.c both follow it. */
int mr_nn_gemm_plan(int M, int N, int K, int *nb, int *bs);
/* The same for the fc layer's products (mr_fc_*): the same rule, but at most
 * 4 blocks, a power of two, each of at least 256 rows / columns where the
 * output's longer side has 512 or more: fewer, larger blocks, which OpenBLAS
 * runs faster (nn.c has the rates). The shape alone decides, as above. */
int mr_nn_fc_plan(int M, int N, int K, int *nb, int *bs);

/* The fc layer (policy.c) through mr_nn_fc_plan's blocks. Forward: out =
 * relu(inp . w^T + b) as mr_linear_relu_forward, but the B rows are taken
 * seg at a time (seg <= 0: all at once; the last segment may be shorter),
 * each segment planned as a product of its own, all of them in one OpenMP
 * loop: the same calls as one mr_fc_relu_forward per segment. Backward as
 * mr_linear_backward except that dinp (B,C) = dout . w is WRITTEN, not added
 * to; dw and db are added to. Each of dinp, dw, db may be NULL.
 * gemm.c's kernels instead of OpenBLAS (whose bits they do not match): the
 * forward where wt, w transposed (C, OC) (mr_nn_transpose, once per pass),
 * is given, the gradients where own is 1; each product only where the CPU
 * has AVX-512, and the forward only where OC is a multiple of 16 (gemm.h's
 * mr_gemm_wide; the gradients take any width, mr_gemm_any). Either way the
 * bits do not depend on the thread count. */
void mr_fc_relu_forward(float *out, const float *inp, const float *w, const float *wt, const float *b,
                        int B, int C, int OC, int seg);
void mr_fc_backward(float *dinp, float *dw, float *db, const float *dout,
                    const float *inp, const float *w, int own, int B, int C, int OC);
/* mr_fc_backward's input gradient for the first cols <= C input columns
 * only: dinp (B, cols) = dout . w[:, :cols] (w's rows C apart), WRITTEN;
 * each element the bits of mr_fc_backward's (the same sum of the same
 * products). */
void mr_fc_input_grad(float *dinp, const float *dout, const float *w, int own, int B, int C, int OC, int cols);
/* mr_fc_backward's weight gradient for the first cols <= C input columns
 * only: dw[:, :cols] (rows C apart) += dout^T . inp[:, :cols] (inp's rows C
 * apart); each element the bits of mr_fc_backward's. */
void mr_fc_weight_grad(float *dw, const float *dout, const float *inp, int own, int B, int C, int OC, int cols);

/* The same as mr_fc_relu_forward with wt, bit for bit, from the inputs
 * transposed instead of the weights: xt = inp^T (C, B) given (mr_nn_transpose),
 * ct (OC, B) scratch. ct = b + w . xt (each element the same multiply-adds
 * in the same order as out = b + inp . wt: the products commute), then out
 * (B, OC) = relu(ct^T). For few rows (act's) against many weights: the
 * transpose moves B * C floats instead of OC * C. B a multiple of 16, and
 * the CPU has AVX-512 (mr_gemm_wide(B)). */
void mr_fc_relu_forward_xt(float *out, const float *xt, const float *w, const float *b, float *ct, int B, int C,
                           int OC);

/* dst (cols, rows) = src (rows, cols) transposed. */
void mr_nn_transpose(float *dst, const float *src, int rows, int cols);

/* ReLU over n floats: out = max(inp, 0); out may equal inp.
 * Backward uses the forward's OUTPUT: dinp = out > 0 ? dout : 0 (written,
 * dinp may equal dout). */
void mr_relu_forward(float *out, const float *inp, size_t n);
void mr_relu_backward(float *dinp, const float *dout, const float *out, size_t n);

/* db (OC) += column sums of d (N,OC), rows summed in order 0..N-1 per column
 * (deterministic for any thread count). */
void mr_bias_backward(float *db, const float *d, size_t N, int OC);
/* acc[c] += sum over rows r = 0.. of d[r * ld + c], in order, in double, for
 * c < C; y given: d's element counted only where y's (the ReLU's output, the
 * same layout) is > 0 (mr_relu_backward's mask). Serial; the sums' bits do
 * not depend on the path (AVX-512 where C is a multiple of 16 up to 64: in
 * registers). */
void mr_colsum_f64(double *acc, const float *d, const float *y, size_t rows, long ld, int C);

/* CPU seconds spent inside sgemm since the last reset, summed over threads,
 * and the number of sgemm calls. Only counted when nn.c is compiled with
 * -DMR_NN_PROFILE (the benchmark); otherwise mr_nn_sgemm_seconds() returns -1.
 * A profiling aid: a global counter, which the engine otherwise never keeps. */
double mr_nn_sgemm_seconds(void);
long mr_nn_sgemm_calls(void);
void mr_nn_profile_reset(void);

#endif

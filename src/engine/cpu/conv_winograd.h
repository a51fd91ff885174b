/*
 * conv_winograd.h - the trunk's 3x3 stride-1 pad-1 convolutions (layers
 * 1 .. L-1) by Winograd's minimal filtering F(m x m, 3 x 3), m = 2, 4 or 6
 * (Lavin & Gray 2016; the policy runs mr_wino_tile_for's 4 or 6): fewer multiply-adds than oneDNN's direct kernels or
 * im2col + sgemm for the same result up to rounding.
 *
 * Shapes, for one chunk of n samples on H x W maps (NHWC, fp32), as
 * conv_dnnl.h: inp (n,H,W,C), out (n,H,W,OC), w (OC,3,3,C), b (OC).
 * Forward: out = relu(conv3x3_pad1(inp) + b) (written). Backward: dinp
 * (n,H,W,C) written (the forward of dout with the kernel rotated by 180
 * degrees and its channels swapped), dw (OC,3,3,C) and db (OC) WRITTEN (the
 * caller's per-chunk partials are fresh). dout is after the ReLU's backward.
 *
 * How: the output is cut into m x m tiles (ceil(H/m) x ceil(W/m) per sample,
 * the last ones cropped), each read from its alpha x alpha input patch
 * (alpha = m + 2, zeros outside the map). Per tile V = BT d B (per input
 * channel), per weight U = G g GT (once per pass, in double, rounded once);
 * for each of the alpha^2 transformed positions e the tiles' products are one
 * matrix product M[e] (tiles, OC) = V[e] (tiles, C) . U[e] (C, OC) (own
 * AVX-512 kernels or sgemm, conv_winograd.c); out = AT M A. The weight
 * gradient is the exact gradient of that computation: dM = A dY AT per tile,
 * dU[e] (OC, C) = dM[e]^T . V[e] summed over the tiles (one product with
 * K = tiles per block of tiles, blocks added in order), dg = GT dU G. Tiles
 * go through in blocks of MR_WINO_TILE_BLOCK (V and M stay in L2: 32 tiles
 * of F(6x6) at 64 -> 64 channels take 1 MiB of V and M, 128 took 4 MiB;
 * bench_conv_winograd on one Zen 4 core, chunk 32, F(6x6), 128 -> 32
 * tiles: forward 7-8% faster at 32 -> 64 and 64 -> 64, 3% at 16 -> 32, the
 * backward 1-2%; 64 tiles between, 16 slower again).
 *
 * Multiply-adds in the products per sample and pass: alpha^2 * tiles * C *
 * OC against H * W * 9 * C * OC direct: at 11 x 11, F(2x2) does 16 * 36 =
 * 576 per (C, OC) pair against 1,089 (1.9x fewer), F(4x4) 36 * 9 = 324
 * (3.4x fewer), F(6x6) 64 * 4 = 256 (4.3x fewer); the transforms add
 * O(alpha^3 (C + OC)) per tile (mr_conv_wino_macs).
 *
 * Accuracy (u = 2^-24). Every output is a sum along paths of products of
 * transform coefficients, inputs and weights; with S = the same Winograd
 * computation run on absolute values (|BT| |d| |B|, |G| |g| |GT|, |AT| . |A|,
 * plus |b|), the computed value differs from the exact convolution by at
 * most (K' + 4 alpha + 2) u S: K' roundings in the transformed-domain dot
 * product (K' = C forward, OC backward data, the chunk's tile count for the
 * weight gradient), at most 2 (alpha - 1) in each two-sided transform, one
 * for the weights' transform and one for the bias. In terms of the inputs'
 * magnitudes: S <= beta * sum_c X_c sum_taps |w_oc| (+ |b|), X_c = the
 * largest |input| of channel c in the tile's patch, beta = 16 for F(2x2),
 * 860 for F(4x4) and 1,565 for F(6x6) with points 0, +-1, +-2, +-1/2 (the
 * forward; the weight gradient's beta' = 36, 2,844 and 9,669 with X = the
 * patch's input and the tile's dout). Direct summation has beta = 1: F(4x4)
 * trades ~1.7 more multiply-add reduction for up to ~50x the rounding error
 * of F(2x2); F(6x6) 1.27x fewer again for ~2x F(4x4)'s bound (measured:
 * errors of 60-90 u sum|x||w| against F(4x4)'s 25-28). spec/c/test_conv_winograd.c checks the
 * (K' + 4 alpha + 2) u S bound against float64 direct convolutions.
 *
 * Bits independent of the thread count: each call is one chunk on the
 * calling thread (the products on moonrl's own kernels, or sgemm forced to
 * one thread as nn.c's; each sums over k in order), tiles and tile blocks in
 * a fixed order; the caller reduces per-chunk weight gradients in
 * chunk order (policy.c). Any n works (the tail chunk too): no shape is
 * baked in beyond the layer's channels.
 *
 * What it is not: layer 0 (C input channels from the codes: nn.c), bf16, or
 * the CUDA backend's.
 */
#ifndef MR_CONV_WINOGRAD_H
#define MR_CONV_WINOGRAD_H
#include <stddef.h>
#include "arena.h"
#include "moonrl.h"   /* MR_MAX_CONV */

#ifndef MR_WINO_TILE_BLOCK
#define MR_WINO_TILE_BLOCK 32    /* tiles per block of the transformed products */
#endif

/* ------------------------------------------------ one layer, one chunk */

/* Floats of one call's workspace for a layer (C -> OC), either pass. */
size_t mr_wino_work_floats(int m, int C, int OC);

/* The transformed weights: forward U (alpha^2, C, OC) from w (OC,3,3,C);
 * backward = 1: the backward-data weights (alpha^2, OC, C), of the kernel
 * rotated by 180 degrees with in and out channels swapped (each (alpha^2,
 * in, out) of the product that uses it). */
void mr_wino_weights(float *U, const float *w, int C, int OC, int m, int backward);

/* out (n,H,W,OC) = [relu](conv3x3_pad1(inp (n,H,W,C)) + b), U from
 * mr_wino_weights(.., 0); b may be NULL. The input gradient is this call
 * with inp = dout, C and OC swapped, U from mr_wino_weights(.., 1), no bias,
 * no ReLU. Single-threaded. */
void mr_wino_forward(float *out, const float *inp, const float *U, const float *b, int relu, int n, int H, int W,
                     int C, int OC, int m, float *work);

/* dw (OC,3,3,C) and db (OC) WRITTEN from dout (n,H,W,OC) and inp (n,H,W,C);
 * db may be NULL. Single-threaded. */
void mr_wino_backward_weights(float *dw, float *db, const float *dout, const float *inp, int n, int H, int W, int C,
                              int OC, int m, float *work);

/* The tile size m this file's users run on H x W maps: 4 or 6, whichever
 * does fewer transformed-domain products per sample (alpha^2 * tiles), 4 on
 * a tie (the smaller rounding error). At 11 x 11 (ENV_SPEC's view) F(6x6)'s
 * 4 tiles of 64 against F(4x4)'s 9 of 36: 21% fewer products, and fewer
 * transform operations per output pixel too (bench_conv_winograd: 13-17%
 * faster on a Zen 4 core at the reference and small nets' shapes); at 7 x 7
 * F(4x4)'s 4 tiles of 36 against F(6x6)'s 4 of 64. F(2x2) is never taken:
 * slower than F(4x4) at every shape measured. */
int mr_wino_tile_for(int H, int W);

/* Multiply-adds per sample of one pass of a layer: *products in the
 * transformed domain, *transforms for the tiles' input and output transforms
 * (the weights' per-pass transform not counted). */
void mr_conv_wino_macs(int H, int W, int C, int OC, int m, double *products, double *transforms);

/* ------------------------------------------------ the trunk's layers */

typedef struct mr_conv_wino {
    int m, L, H, W, nthreads;
    int C[MR_MAX_CONV], OC[MR_MAX_CONV];        /* C[l] = 0: layer l not laid out here */
    float *uf[MR_MAX_CONV], *ub[MR_MAX_CONV];   /* transformed weights, forward / backward data */
    /* the weights uf / ub were transformed from (an exact copy; seen: a load
     * has run since the layout), so a load with the same bits skips its work */
    float *wf[MR_MAX_CONV], *wb[MR_MAX_CONV];
    int seen_f[MR_MAX_CONV], seen_b[MR_MAX_CONV];
    float *work;                                /* nthreads workspaces of work_floats */
    size_t work_floats;
} mr_conv_wino;

/* How the laid-out layers' transformed-domain products run: "products:
 * AVX-512 kernels" (this CPU has AVX-512 and the channels are multiples of
 * 16), "products: sgemm", or both. */
const char *mr_conv_wino_products(const mr_conv_wino *d);

/* Takes the transformed weights of layers 1 .. L-1 (channels ch[0..L]) and
 * one workspace per thread from the arena (a planning arena leaves the
 * pointers NULL). m = 2, 4 or 6. L < 2 takes nothing. */
void mr_conv_wino_layout(mr_conv_wino *d, const int *ch, int L, int H, int W, int nthreads, int m, mr_arena *a);
/* The same for the layers l with use[l] != 0 only (NULL: every layer), for a
 * trunk whose other layers run otherwise (policy.c's per-layer choice): the
 * others take nothing and keep C[l] = 0, which the loads skip. */
void mr_conv_wino_layout_layers(mr_conv_wino *d, const int *ch, int L, int H, int W, int nthreads, int m,
                                const int *use, mr_arena *a);

/* Weights of every layer l >= 1 (w_of[l] = (OC,3,3,C)) transformed for the
 * forward (backward data), before a pass. A layer whose weights have the
 * same bits as at its last load keeps its transform (act runs once per
 * rollout step with the same parameters: a 18 KiB comparison instead of a
 * transform in double). Not inside a parallel region: each layer's output
 * channels are shared among the threads. */
void mr_conv_wino_load_forward(mr_conv_wino *d, const float *const *w_of);
void mr_conv_wino_load_backward(mr_conv_wino *d, const float *const *w_of);

/* One chunk of n samples of layer l >= 1 on workspace t (one thread per
 * workspace at a time). Forward: out = relu(conv(inp) + b). Backward: dw,
 * db written (NULL dw: skipped), dinp written (NULL: skipped). */
void mr_conv_wino_forward(const mr_conv_wino *d, int t, int l, float *out, const float *inp, const float *b, int n);
void mr_conv_wino_backward(const mr_conv_wino *d, int t, int l, float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, int n);

#endif

/*
 * conv_winograd.c - Winograd F(m x m, 3 x 3) convolutions (see
 * conv_winograd.h for the contract, the error bound and why it is shaped
 * this way).
 *
 * Every transform is a pair of one-sided products with a small matrix
 * (apply below), each run over a whole vector of channels at once (NHWC
 * keeps them contiguous), skipping the matrices' zeros, so the compiler's
 * vector loops do the work; the matrices' other entries are small integers
 * (BT, AT: exact in float) or, for G, applied in double once per pass.
 * The products in the transformed domain: on a CPU with AVX-512, moonrl's
 * own register-blocked kernels (gemm.c: R rows x up to 64 columns of
 * accumulators, the transformed weights read in place, nothing packed) for
 * channel counts that are multiples of 16; otherwise OpenBLAS sgemm calls on
 * one thread. Both sum each output over k in order, from zero. Measured on
 * a 2-core AVX-512 Xeon (bench_conv_winograd, one thread, chunk 32, F4):
 * OpenBLAS spent as long packing these small products (K = 16..64) as
 * multiplying.
 */
#include "conv_winograd.h"
#include "gemm.h"
#include "nn.h"
#include "one_thread.h"
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* F(2x2, 3x3), F(4x4, 3x3) and F(6x6, 3x3), Lavin & Gray 2016: out = AT [(G g GT) . (BT d B)] A;
 * F(6x6)'s interpolation points 0, +-1, +-2, +-1/2 and infinity (so BT's and
 * AT's entries are exact in float: quarters and powers of two). */
static const float BT2[16] = {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1};
static const double G2[12] = {1, 0, 0, .5, .5, .5, .5, -.5, .5, 0, 0, 1};
static const float AT2[8] = {1, 1, 1, 0, 0, 1, -1, -1};
static const float BT4[36] = {4, 0, -5, 0,  1, 0, 0, -4, -4, 1,  1, 0, 0, 4, -4, -1, 1, 0,
                              0, -2, -1, 2, 1, 0, 0, 2,  -1, -2, 1, 0, 0, 4, 0,  -5, 0, 1};
static const double G4[18] = {1 / 4.,  0,        0,       -1 / 6., -1 / 6., -1 / 6., -1 / 6., 1 / 6., -1 / 6.,
                              1 / 24., 1 / 12., 1 / 6.,  1 / 24., -1 / 12., 1 / 6.,  0,       0,      1};
static const float AT4[24] = {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0, 0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1};
static const float BT6[64] = {1, 0,    -5.25f, 0,     5.25f, 0,     -1, 0,  /* */
                              0, 1,    1,      -4.25f, -4.25f, 1,    1,  0,  /* */
                              0, -1,   1,      4.25f, -4.25f, -1,    1,  0,  /* */
                              0, .5f,  .25f,   -2.5f, -1.25f, 2,     1,  0,  /* */
                              0, -.5f, .25f,   2.5f,  -1.25f, -2,    1,  0,  /* */
                              0, 2,    4,      -2.5f, -5,     .5f,   1,  0,  /* */
                              0, -2,   4,      2.5f,  -5,     -.5f,  1,  0,  /* */
                              0, -1,   0,      5.25f, 0,      -5.25f, 0, 1};
static const double G6[24] = {1,         0,          0,         -2 / 9.,   -2 / 9.,    -2 / 9.,
                              -2 / 9.,   2 / 9.,     -2 / 9.,   1 / 90.,   1 / 45.,    2 / 45.,
                              1 / 90.,   -1 / 45.,   2 / 45.,   32 / 45.,  16 / 45.,   8 / 45.,
                              32 / 45.,  -16 / 45.,  8 / 45.,   0,         0,          1};
static const float AT6[48] = {1, 1, 1,  1,  1,   1,         1,          0,  /* */
                              0, 1, -1, 2,  -2,  .5f,       -.5f,       0,  /* */
                              0, 1, 1,  4,  4,   .25f,      .25f,       0,  /* */
                              0, 1, -1, 8,  -8,  .125f,     -.125f,     0,  /* */
                              0, 1, 1,  16, 16,  .0625f,    .0625f,     0,  /* */
                              0, 1, -1, 32, -32, .03125f,   -.03125f,   1};

typedef struct { int m, a; const float *BT, *AT; const double *G; } mats;

static mats mats_of(int m) {
    mats x = {2, 4, BT2, AT2, G2};
    if (m == 4) x = (mats){4, 6, BT4, AT4, G4};
    if (m == 6) x = (mats){6, 8, BT6, AT6, G6};
    return x;
}

/* y_i = sum_k T(i,k) x_k over vectors of n floats: y_i at y + i*sy, x_k at
 * x + k*sx, T(i,k) = T[i*ti + k*tk], i < rows, k < cols. Zeros skipped; the
 * terms are added in k order. */
static void apply(float *restrict y, size_t sy, const float *restrict x, size_t sx, const float *T, int ti, int tk,
                  int rows, int cols, int n) {
    for (int i = 0; i < rows; i++) {
        float *restrict yi = y + (size_t)i * sy;
        int first = 1;
        for (int k = 0; k < cols; k++) {
            const float t = T[i * ti + k * tk];
            if (t == 0.0f) continue;
            const float *restrict xk = x + (size_t)k * sx;
            if (first) {
                for (int c = 0; c < n; c++) yi[c] = t * xk[c];
                first = 0;
            } else {
                for (int c = 0; c < n; c++) yi[c] += t * xk[c];
            }
        }
        if (first) memset(yi, 0, sizeof(float) * (size_t)n);
    }
}

static int imax(int a, int b) { return a > b ? a : b; }

/* The tiles' transforms for channel counts that are multiples of 8: one
 * tile's whole alpha x alpha patch of 8 channels in vector registers (GCC
 * vector extensions; AVX2 under the build's x86-64-v3), the matrices
 * unrolled at compile time (m is a constant at every call site of these
 * always-inline functions, so the zero entries vanish and +-1 adds no
 * multiply). Other channel counts go through apply(). */
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int v8i __attribute__((vector_size(32), aligned(4)));
#define VL 8
#define AI static inline __attribute__((always_inline))

/* The transposes of AT2, AT4 and AT6 (alpha x m): dM = A dY AT. */
static const float A2x[8] = {1, 0, 1, 1, 1, -1, 0, -1};
static const float A4x[24] = {1, 0, 0, 0, 1, 1, 1, 1, 1, -1, 1, -1, 1, 2, 4, 8, 1, -2, 4, -8, 0, 0, 0, 1};
static const float A6x[48] = {1, 0,    0,     0,      0,       0,        /* */
                              1, 1,    1,     1,      1,       1,        /* */
                              1, -1,   1,     -1,     1,       -1,       /* */
                              1, 2,    4,     8,      16,      32,       /* */
                              1, -2,   4,     -8,     16,      -32,      /* */
                              1, .5f,  .25f,  .125f,  .0625f,  .03125f,  /* */
                              1, -.5f, .25f,  -.125f, .0625f,  -.03125f, /* */
                              0, 0,    0,     0,      0,       1};

/* The 8-lane transforms (AVX2 under the build's x86-64-v3) and the 16-lane
 * ones (AVX-512, called from the wrappers below only). */
#define VT v8
#define VTI v8i
#define VW 8
#define NAME(x) x##_v8
#include "conv_winograd_tiles.h"
#undef VT
#undef VTI
#undef VW
#undef NAME
typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int v16i __attribute__((vector_size(64), aligned(4)));
#define VT v16
#define VTI v16i
#define VW 16
#define NAME(x) x##_v16
#include "conv_winograd_tiles.h"
#undef VT
#undef VTI
#undef VW
#undef NAME

/* Whether the AVX-512 code below (the 16-lane transforms, the products'
 * kernels) takes n channels: this CPU has AVX-512 and n is a multiple of 16. */
static int wide(int n) { return mr_gemm_wide(n); }

/* The tiles' transforms for channel counts that are multiples of 8, m a
 * constant inside (the width's code chosen by wide(channels)). */
#define T512 __attribute__((target("avx512f")))
T512 static void in_tile16(float *V, size_t es, const float *const *src, int C, int m) {
    if (m == 2) in_tile_v16(V, es, src, C, 2);
    else if (m == 4) in_tile_v16(V, es, src, C, 4);
    else in_tile_v16(V, es, src, C, 6);
}
T512 static void out_tile16(float *const *dst, const float *M, size_t es, const float *b, int relu, int OC, int m) {
    if (m == 2) out_tile_v16(dst, M, es, b, relu, OC, 2);
    else if (m == 4) out_tile_v16(dst, M, es, b, relu, OC, 4);
    else out_tile_v16(dst, M, es, b, relu, OC, 6);
}
T512 static void grad_tile16(float *M, size_t es, const float *const *src, int OC, int m) {
    if (m == 2) grad_tile_v16(M, es, src, OC, 2);
    else if (m == 4) grad_tile_v16(M, es, src, OC, 4);
    else grad_tile_v16(M, es, src, OC, 6);
}
static void in_tile(float *V, size_t es, const float *const *src, int C, int m) {
    if (wide(C)) in_tile16(V, es, src, C, m);
    else if (m == 2) in_tile_v8(V, es, src, C, 2);
    else if (m == 4) in_tile_v8(V, es, src, C, 4);
    else in_tile_v8(V, es, src, C, 6);
}
static void out_tile(float *const *dst, const float *M, size_t es, const float *b, int relu, int OC, int m) {
    if (wide(OC)) out_tile16(dst, M, es, b, relu, OC, m);
    else if (m == 2) out_tile_v8(dst, M, es, b, relu, OC, 2);
    else if (m == 4) out_tile_v8(dst, M, es, b, relu, OC, 4);
    else out_tile_v8(dst, M, es, b, relu, OC, 6);
}
static void grad_tile(float *M, size_t es, const float *const *src, int OC, int m) {
    if (wide(OC)) grad_tile16(M, es, src, OC, m);
    else if (m == 2) grad_tile_v8(M, es, src, OC, 2);
    else if (m == 4) grad_tile_v8(M, es, src, OC, 4);
    else grad_tile_v8(M, es, src, OC, 6);
}

/* The distance between V's (or M's) planes e for ch channels: a block of
 * tiles and one cache line more. Without the line, the planes lie a
 * multiple of 4 KiB apart (128 tiles x 16 channels x 4 bytes = 8 KiB) and
 * a tile's 36 stores, one per plane, all fall into the same few L1 sets. */
static size_t es_of(int ch) { return (size_t)MR_WINO_TILE_BLOCK * ch + 16; }

/* The workspace of one call: P and Q (alpha^2 * Cm each: a tile's patch and
 * its half-transformed copy), Z and J (Cm each: the zeros a patch reads
 * outside the map, the row a cropped output pixel is written to), V and M
 * (alpha^2 * TB * Cm each: the block's transformed inputs and products), dU
 * (alpha^2 * Cm^2: the weight gradient in the transformed domain), and a
 * double scratch. */
size_t mr_wino_work_floats(int m, int C, int OC) {
    const size_t a = (size_t)m + 2, A2 = a * a, Cm = (size_t)imax(C, OC);
    return 2 * A2 * Cm + 2 * Cm + 2 * A2 * es_of(imax(C, OC)) + A2 * Cm * Cm + 2 * (a * 3 * Cm + Cm) + 64;
}

/* The workspace's parts (mr_wino_work_floats), Z zeroed. */
typedef struct { float *P, *Q, *Z, *J, *V, *M, *dU; } parts;

static parts parts_of(float *work, size_t A2, size_t Cm) {
    parts w;
    w.P = work;
    w.Q = w.P + A2 * Cm;
    w.Z = w.Q + A2 * Cm;
    w.J = w.Z + Cm;
    w.V = w.J + Cm;
    w.M = w.V + A2 * es_of((int)Cm);
    w.dU = w.M + A2 * es_of((int)Cm);
    memset(w.Z, 0, sizeof(float) * Cm);
    return w;
}

/* ------------------------------------------------------------ weights */

#define WSLAB 64   /* channels per slab of the weight transforms' double scratch */

void mr_wino_weights(float *U, const float *w, int C, int OC, int m, int backward) {
    const mats x = mats_of(m);
    const int a = x.a;
    const size_t A2 = (size_t)a * a;
    /* each output channel on its own: the threads share them, the bits
     * whatever the split */
    #pragma omp parallel for schedule(static) if ((size_t)C * OC >= 256 && !omp_in_parallel())
    for (int o = 0; o < OC; o++)
        for (int c0 = 0; c0 < C; c0 += WSLAB) {
            double t[8][3][WSLAB];
            const int cn = C - c0 < WSLAB ? C - c0 : WSLAB;
            /* backward data: the kernel rotated by 180 degrees, G's columns reversed */
            for (int i = 0; i < a; i++)
                for (int l = 0; l < 3; l++) {
                    for (int c = 0; c < cn; c++) t[i][l][c] = 0.0;
                    for (int k = 0; k < 3; k++) {
                        const double g = x.G[i * 3 + (backward ? 2 - k : k)];
                        const float *wk = w + (((size_t)o * 3 + k) * 3 + (backward ? 2 - l : l)) * C + c0;
                        for (int c = 0; c < cn; c++) t[i][l][c] += g * wk[c];
                    }
                }
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++) {
                    const size_t e = (size_t)i * a + j;
                    for (int c = 0; c < cn; c++) {
                        double u = 0.0;
                        for (int l = 0; l < 3; l++) u += t[i][l][c] * x.G[j * 3 + l];
                        /* (in, out) of the product that uses it: forward (C, OC), backward (OC, C) */
                        if (backward)
                            U[(e * OC + o) * C + (size_t)(c0 + c)] = (float)u;
                        else
                            U[(e * C + (size_t)(c0 + c)) * OC + o] = (float)u;
                    }
                }
        }
    (void)A2;
}

/* ------------------------------------------------------------ products */

/* ------------------------------------------------------------ tiles */

typedef struct { int n, H, W, th, tw, T; } grid;

static grid grid_of(int n, int H, int W, int m) {
    grid g = {n, H, W, (H + m - 1) / m, (W + m - 1) / m, 0};
    g.T = n * g.th * g.tw;
    return g;
}

/* A tile's place: sample s, tile row ty, tile column tx; the tiles go
 * sample by sample, row by row. */
typedef struct { int s, ty, tx; } place;

static place place_of(int tile, const grid *g) {
    const int per = g->th * g->tw;
    place p = {tile / per, tile % per / g->tw, tile % g->tw};
    return p;
}

static void place_next(place *p, const grid *g) {
    if (++p->tx < g->tw) return;
    p->tx = 0;
    if (++p->ty < g->th) return;
    p->ty = 0;
    p->s++;
}

/* The pixels of an r x r patch whose top-left pixel is (y0, x0) of sample
 * s's C-channel map: px[k*r + l] = pixel (y0 + k, x0 + l), or `outside` (a
 * row of C floats) where that is off the map. */
static void patch_pixels(const float **px, int r, const float *map, const grid *g, const place *pl, int y0, int x0,
                         int C, const float *outside) {
    const float *base = map + (size_t)pl->s * g->H * g->W * C;
    for (int k = 0; k < r; k++) {
        const int yy = y0 + k, row_in = yy >= 0 && yy < g->H;
        for (int l = 0; l < r; l++) {
            const int xx = x0 + l;
            px[k * r + l] = row_in && xx >= 0 && xx < g->W ? base + ((size_t)yy * g->W + xx) * C : outside;
        }
    }
}

/* Tile pl's input patch (alpha x alpha x C, zeros outside the map: Z, a
 * row of zeros), its transform BT d B into V[e] + 0 (e-th at V + e*es); P
 * and Q scratch of the other channel counts' path. */
static void input_transform(float *V, size_t es, const float *inp, const place *pl, const grid *g, int C,
                            const mats *x, float *P, float *Q, const float *Z) {
    const int a = x->a, m = x->m;
    const float *src[64];
    patch_pixels(src, a, inp, g, pl, pl->ty * m - 1, pl->tx * m - 1, C, Z);
    if (C % VL == 0) {
        in_tile(V, es, src, C, m);
        return;
    }
    for (int i = 0; i < a * a; i++) memcpy(P + (size_t)i * C, src[i], sizeof(float) * C);   /* the patch into P */
    apply(Q, (size_t)a * C, P, (size_t)a * C, x->BT, a, 1, a, a, a * C);          /* Q = BT P */
    for (int i = 0; i < a; i++)                                                     /* V = Q B */
        apply(V + (size_t)i * a * es, es, Q + (size_t)i * a * C, C, x->BT, a, 1, a, a, C);
}

void mr_wino_forward(float *out, const float *inp, const float *U, const float *b, int relu, int n, int H, int W,
                     int C, int OC, int m, float *work) {
    const mats x = mats_of(m);
    const int a = x.a, TB = MR_WINO_TILE_BLOCK;
    const size_t A2 = (size_t)a * a, Cm = (size_t)imax(C, OC);
    const grid g = grid_of(n, H, W, m);
    const size_t esV = es_of(C), esM = es_of(OC);
    const parts w = parts_of(work, A2, Cm);
    float *P = w.P, *Q = w.Q, *V = w.V, *M = w.M;
    const int nt = mr_one_thread_begin();
    for (int t0 = 0; t0 < g.T; t0 += TB) {
        const int nb = g.T - t0 < TB ? g.T - t0 : TB;
        place pl = place_of(t0, &g);
        for (int tt = 0; tt < nb; tt++, place_next(&pl, &g))
            input_transform(V + (size_t)tt * C, esV, inp, &pl, &g, C, &x, P, Q, w.Z);
        /* M[e] (tiles, OC) = V[e] (tiles, C) . U[e] (C, OC) */
        for (size_t e = 0; e < A2; e++) {
            const float *Ve = V + e * esV, *Ue = U + e * (size_t)C * OC;
            float *Me = M + e * esM;
            if (wide(OC))
                mr_gemm(Me, OC, Ve, C, 1, Ue, OC, nb, OC, C, 0);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, OC, C, 1.0f, Ve, C, Ue, OC, 0.0f, Me, OC);
        }
        pl = place_of(t0, &g);
        for (int tt = 0; tt < nb; tt++, place_next(&pl, &g)) {
            float *dst[36];   /* the tile's output pixels; J where cropped */
            patch_pixels((const float **)dst, m, out, &g, &pl, pl.ty * m, pl.tx * m, OC, w.J);
            if (OC % VL == 0) {
                out_tile(dst, M + (size_t)tt * OC, esM, b, relu, OC, m);
                continue;
            }
            /* R (m, a, OC) = AT M into Q, then Y (m, m, OC) = R A into P */
            for (int j = 0; j < a; j++)
                apply(Q + (size_t)j * OC, (size_t)a * OC, M + (size_t)j * esM + (size_t)tt * OC, (size_t)a * esM, x.AT,
                      a, 1, m, a, OC);
            for (int p = 0; p < m; p++)
                apply(P + (size_t)p * m * OC, OC, Q + (size_t)p * a * OC, OC, x.AT, a, 1, m, a, OC);
            for (int i = 0; i < m * m; i++) {
                const float *y = P + (size_t)i * OC;
                float *o = dst[i];
                if (b && relu)
                    for (int c = 0; c < OC; c++) o[c] = y[c] + b[c] > 0.0f ? y[c] + b[c] : 0.0f;
                else if (b)
                    for (int c = 0; c < OC; c++) o[c] = y[c] + b[c];
                else if (relu)
                    for (int c = 0; c < OC; c++) o[c] = y[c] > 0.0f ? y[c] : 0.0f;
                else
                    memcpy(o, y, sizeof(float) * OC);
            }
        }
    }
    mr_one_thread_end(nt);
}

void mr_wino_backward_weights(float *dw, float *db, const float *dout, const float *inp, int n, int H, int W, int C,
                              int OC, int m, float *work) {
    const mats x = mats_of(m);
    const int a = x.a, TB = MR_WINO_TILE_BLOCK;
    const size_t A2 = (size_t)a * a, Cm = (size_t)imax(C, OC);
    const grid g = grid_of(n, H, W, m);
    const size_t esV = es_of(C), esM = es_of(OC);
    const parts w = parts_of(work, A2, Cm);
    float *P = w.P, *Q = w.Q, *V = w.V, *M = w.M, *dU = w.dU;
    double *D = (double *)(((uintptr_t)(dU + A2 * Cm * Cm) + 7) & ~(uintptr_t)7);
    const int nt = mr_one_thread_begin();
    if (g.T == 0) memset(dU, 0, sizeof(float) * A2 * OC * C);
    for (int t0 = 0; t0 < g.T; t0 += TB) {
        const int nb = g.T - t0 < TB ? g.T - t0 : TB;
        place pl = place_of(t0, &g);
        for (int tt = 0; tt < nb; tt++, place_next(&pl, &g)) {
            input_transform(V + (size_t)tt * C, esV, inp, &pl, &g, C, &x, P, Q, w.Z);
            const float *src[36];   /* the tile's dY pixels, zeros past the map */
            patch_pixels(src, m, dout, &g, &pl, pl.ty * m, pl.tx * m, OC, w.Z);
            if (OC % VL == 0) {
                grad_tile(M + (size_t)tt * OC, esM, src, OC, m);
                continue;
            }
            /* dY (m, m, OC) into P; dM = A dY AT */
            for (int i = 0; i < m * m; i++) memcpy(P + (size_t)i * OC, src[i], sizeof(float) * OC);
            apply(Q, (size_t)m * OC, P, (size_t)m * OC, x.AT, 1, a, a, m, m * OC);   /* (a, m, OC) = A dY */
            for (int i = 0; i < a; i++)                                                   /* dM = (A dY) AT */
                apply(M + (size_t)i * a * esM + (size_t)tt * OC, esM, Q + (size_t)i * m * OC, OC, x.AT, 1, a, a, m,
                      OC);
        }
        /* dU[e] (OC, C) [+]= dM[e]^T (OC, tiles) . V[e] (tiles, C) */
        for (size_t e = 0; e < A2; e++) {
            const float *Me = M + e * esM, *Ve = V + e * esV;
            float *dUe = dU + e * (size_t)OC * C;
            if (wide(C))
                mr_gemm(dUe, C, Me, 1, OC, Ve, C, OC, C, nb, t0 != 0);
            else
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, nb, 1.0f, Me, OC, Ve, C, t0 ? 1.0f : 0.0f,
                            dUe, C);
        }
    }
    /* dg = GT dU G per (o, c), in double: R (a, 3, C) = dU G, then GT R */
    double *R = D;
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < a; i++)
            for (int l = 0; l < 3; l++) {
                double *r = R + ((size_t)i * 3 + l) * C;
                for (int c = 0; c < C; c++) r[c] = 0.0;
                for (int j = 0; j < a; j++) {
                    const double gj = x.G[j * 3 + l];
                    if (gj == 0.0) continue;
                    const float *u = dU + (((size_t)i * a + j) * OC + o) * C;
                    for (int c = 0; c < C; c++) r[c] += gj * u[c];
                }
            }
        for (int k = 0; k < 3; k++)
            for (int l = 0; l < 3; l++) {
                float *dk = dw + (((size_t)o * 3 + k) * 3 + l) * C;
                for (int c = 0; c < C; c++) {
                    double s = 0.0;
                    for (int i = 0; i < a; i++) s += x.G[i * 3 + k] * R[((size_t)i * 3 + l) * C + c];
                    dk[c] = (float)s;
                }
            }
    }
    if (db) {   /* column sums of dout in pixel order, in double, rounded once */
        double *acc = D;
        for (int o = 0; o < OC; o++) acc[o] = 0.0;
        mr_colsum_f64(acc, dout, NULL, (size_t)n * H * W, OC, OC);
        for (int o = 0; o < OC; o++) db[o] = (float)acc[o];
    }
    mr_one_thread_end(nt);
}

/* nonzero entries of a rows x cols matrix */
static int nnz(const float *T, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += T[i] != 0.0f;
    return k;
}

void mr_conv_wino_macs(int H, int W, int C, int OC, int m, double *products, double *transforms) {
    const mats x = mats_of(m);
    const grid g = grid_of(1, H, W, m);
    const double a = x.a;
    if (products) *products = a * a * g.T * (double)C * OC;
    /* input: BT from both sides (2 a nnz(BT) per channel); output: AT from
     * the left over a columns and from the right over m rows */
    if (transforms)
        *transforms = g.T * (2.0 * a * nnz(x.BT, x.a * x.a) * C + (a + x.m) * nnz(x.AT, x.m * x.a) * (double)OC);
}

int mr_wino_tile_for(int H, int W) {
    double p4, p6;
    mr_conv_wino_macs(H, W, 1, 1, 4, &p4, NULL);
    mr_conv_wino_macs(H, W, 1, 1, 6, &p6, NULL);
    return p6 < p4 ? 6 : 4;
}

double mr_cpu_conv_macs(int conv, int H, int W, int C, int OC) {
    if (conv != MR_CPU_CONV_WINOGRAD) return (double)H * W * 9.0 * C * OC;
    double p, t;
    mr_conv_wino_macs(H, W, C, OC, mr_wino_tile_for(H, W), &p, &t);
    return p + t;
}

/* ------------------------------------------------------------ layers */

void mr_conv_wino_layout_layers(mr_conv_wino *d, const int *ch, int L, int H, int W, int nthreads, int m,
                                const int *use, mr_arena *a) {
    memset(d, 0, sizeof *d);
    if (L < 2) return;
    d->m = m == 4 || m == 6 ? m : 2;
    d->L = L;
    d->H = H;
    d->W = W;
    d->nthreads = nthreads < 1 ? 1 : nthreads;
    const size_t A2 = (size_t)(d->m + 2) * (d->m + 2);
    size_t wf = 0;
    for (int l = 1; l < L; l++) {
        if (use && !use[l]) continue;   /* C[l] = 0 marks a layer this object does not run */
        d->C[l] = ch[l];
        d->OC[l] = ch[l + 1];
        d->uf[l] = MR_TAKE(a, float, A2 * ch[l] * ch[l + 1]);
        d->ub[l] = MR_TAKE(a, float, A2 * ch[l] * ch[l + 1]);
        d->wf[l] = MR_TAKE(a, float, 9 * (size_t)ch[l] * ch[l + 1]);
        d->wb[l] = MR_TAKE(a, float, 9 * (size_t)ch[l] * ch[l + 1]);
        size_t f = mr_wino_work_floats(d->m, ch[l], ch[l + 1]);
        if (f > wf) wf = f;
    }
    d->work_floats = mr_arena_round(wf * sizeof(float)) / sizeof(float);
    d->work = MR_TAKE(a, float, d->work_floats * (size_t)d->nthreads);
}

void mr_conv_wino_layout(mr_conv_wino *d, const int *ch, int L, int H, int W, int nthreads, int m, mr_arena *a) {
    mr_conv_wino_layout_layers(d, ch, L, H, W, nthreads, m, NULL, a);
}

/* U from w unless w has the bits of src, the weights of the last load
 * (*seen), then src = w */
static void load(float *U, float *src, int *seen, const float *w, int C, int OC, int m, int backward) {
    const size_t bytes = sizeof(float) * 9 * (size_t)C * OC;
    if (*seen && !memcmp(src, w, bytes)) return;
    mr_wino_weights(U, w, C, OC, m, backward);
    memcpy(src, w, bytes);
    *seen = 1;
}

void mr_conv_wino_load_forward(mr_conv_wino *d, const float *const *w_of) {
    for (int l = 1; l < d->L; l++)
        if (d->C[l]) load(d->uf[l], d->wf[l], &d->seen_f[l], w_of[l], d->C[l], d->OC[l], d->m, 0);
}

void mr_conv_wino_load_backward(mr_conv_wino *d, const float *const *w_of) {
    for (int l = 1; l < d->L; l++)
        if (d->C[l]) load(d->ub[l], d->wb[l], &d->seen_b[l], w_of[l], d->C[l], d->OC[l], d->m, 1);
}

const char *mr_conv_wino_products(const mr_conv_wino *d) {
    int own = 0, blas = 0;
    for (int l = 1; l < d->L; l++)
        if (d->C[l]) {
            const int both = wide(d->C[l]) && wide(d->OC[l]);   /* forward and backward products */
            own += both;
            blas += !both;
        }
    return own && blas ? "products: AVX-512 kernels and sgemm" : own ? "products: AVX-512 kernels" : "products: sgemm";
}

void mr_conv_wino_forward(const mr_conv_wino *d, int t, int l, float *out, const float *inp, const float *b, int n) {
    mr_wino_forward(out, inp, d->uf[l], b, 1, n, d->H, d->W, d->C[l], d->OC[l], d->m,
                    d->work + (size_t)t * d->work_floats);
}

void mr_conv_wino_backward(const mr_conv_wino *d, int t, int l, float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, int n) {
    float *work = d->work + (size_t)t * d->work_floats;
    if (dw) mr_wino_backward_weights(dw, db, dout, inp, n, d->H, d->W, d->C[l], d->OC[l], d->m, work);
    if (dinp) mr_wino_forward(dinp, dout, d->ub[l], NULL, 0, n, d->H, d->W, d->OC[l], d->C[l], d->m, work);
}

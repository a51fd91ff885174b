/*
 * nn.c - the CPU layers of the actor-critic (see nn.h for the conventions).
 *
 * Nearly all the arithmetic is in cblas_sgemm (the fc layer's products on
 * AVX-512: gemm.c's own kernels); what is here besides is
 * memory movement (im2col / col2im gathers, bias fills) and ReLU, written as
 * plain OpenMP loops whose result does not depend on the thread count. The
 * forward products run im2col, bias, sgemm and ReLU block by block inside
 * one OpenMP loop (forward_gemm): one fork per layer, data hot in cache.
 */
#include "nn.h"
#include "gemm.h"
#include "obs_codes.h"
#include "one_thread.h"
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Loops shorter than this (elements) run on one thread: an OpenMP fork and
 * barrier cost more than moving half a megabyte, and far more when the cores
 * are shared. */
#define MR_NN_PAR_MIN (1 << 17)
/* Output channels per task of the bias-gradient reduction. */
#define MR_NN_BIAS_BLOCK 16

/* ------------------------------------------------------------ profiling */
#ifdef MR_NN_PROFILE
#include <time.h>
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static double nn_sgemm_seconds;
static long nn_sgemm_calls;
double mr_nn_sgemm_seconds(void) { return nn_sgemm_seconds; }
long mr_nn_sgemm_calls(void) { return nn_sgemm_calls; }
void mr_nn_profile_reset(void) { nn_sgemm_seconds = 0; nn_sgemm_calls = 0; }
#else
double mr_nn_sgemm_seconds(void) { return -1.0; }
long mr_nn_sgemm_calls(void) { return -1; }
void mr_nn_profile_reset(void) {}
#endif

/* Row-major C (M,N) = alpha op(A) op(B) + beta C: the one place sgemm is called.
 *
 * OpenBLAS's own threading is not used: its threaded driver splits the
 * product by the thread count, and its kernels round an element differently
 * depending on where a split puts it, so results would change with the number
 * of threads. Instead the output is cut into blocks by a rule that depends on
 * the shape only (mr_nn_gemm_plan; mr_nn_fc_plan for the fc layer's
 * products), each block is one single-threaded sgemm over the full K, and
 * the blocks run as an OpenMP loop. The same call therefore gives
 * the same bits on any number of threads. Inside an active parallel region
 * OpenBLAS runs single-threaded (OpenMP build). A product of one block is
 * called directly, without an OpenMP fork (forks are what cost most when
 * the cores are oversubscribed), with the calling thread's OpenMP thread
 * count set to 1 for the call: the OpenMP build of OpenBLAS then runs it
 * single-threaded. Side effect: that leaves OpenBLAS's own thread count at 1
 * for the process (it keeps blas_cpu_number == 1 until openblas_set_num_threads
 * is called), which is what this file wants anyway. */
#ifndef MR_NN_GEMM_WORK
#define MR_NN_GEMM_WORK (1 << 23)   /* multiply-adds per block, at least */
#endif
#ifndef MR_NN_GEMM_MAXB
#define MR_NN_GEMM_MAXB 32          /* blocks per product, at most */
#endif
#ifndef MR_NN_GEMM_MIND
#define MR_NN_GEMM_MIND 64          /* rows / columns per block, at least */
#endif

#ifndef MR_NN_FC_MAXB
#define MR_NN_FC_MAXB 4             /* fc's products (mr_nn_fc_plan): blocks, at most */
#endif
#ifndef MR_NN_FC_MIND
#define MR_NN_FC_MIND 256           /* ... and rows / columns per block, at least */
#endif
#ifndef MR_NN_FC_WORK
#define MR_NN_FC_WORK (1 << 20)     /* ... and multiply-adds per block, at least */
#endif

/* The rule of both plans: n blocks along the longer side of the output, at
 * most maxb, each of at least `least` multiply-adds and mind rows /
 * columns; pow2: n rounded down to a power of two. */
static int gemm_plan(int M, int N, int K, double least, int maxb, int mind, int pow2, int *nb, int *bs) {
    double work = (double)M * N * K;
    int rows = M >= N, D = rows ? M : N;
    int n = (int)(work / least);
    int nmax = (D + mind - 1) / mind;
    if (n > maxb) n = maxb;
    if (n > nmax) n = nmax;
    if (n < 1) n = 1;
    if (pow2)
        while (n & (n - 1)) n &= n - 1;
    int b = (D + n - 1) / n;
    b = (b + 15) / 16 * 16;             /* whole 64-byte lines per block */
    *bs = b;
    *nb = (D + b - 1) / b;
    return rows;
}

/* Splits rows (returns 1) or columns (0) of the (M,N) output into *nb blocks
 * of *bs (nn.h: linear_dnnl.c's bf16 products cut theirs the same way). */
int mr_nn_gemm_plan(int M, int N, int K, int *nb, int *bs) {
    return gemm_plan(M, N, K, MR_NN_GEMM_WORK, MR_NN_GEMM_MAXB, MR_NN_GEMM_MIND, 0, nb, bs);
}

/* fc's products (mr_fc_*; policy.c also runs the critic through them): the
 * same rule with fewer, larger blocks: at most MR_NN_FC_MAXB, a power of
 * two, of at least MR_NN_FC_MIND rows / columns (MR_NN_GEMM_MIND where the
 * longer side is under twice that, so a small output, act's on a few dozen
 * samples of the small net, still splits in two). OpenBLAS packs the whole
 * of the operand that is not split on every call (fc.w, 4 M floats, for a
 * row split; the input for a column split), so thin blocks pay for packing
 * what thick ones spend on arithmetic. Measured with a standalone sgemm loop
 * on the 2-core AVX-512 Xeon (OpenBLAS 0.3.21, SkylakeX kernels, two
 * threads, 4096 samples of the reference net), GFLOP/s, old plan -> this
 * one: fc's forward 190 (blocks of 256 samples x 64 columns) -> 240-270
 * (512-sample segments, 256 x 512); its input gradient 205-220 (256 x 256)
 * -> 235-255 (512 x 1936); its weight gradient 225 (256-column blocks) ->
 * 260 (1936); act's forward on 64 samples 145-155 (64 columns) -> 190
 * (256); the critic's three products 185-250 -> 240-290. Four blocks keep
 * two to four threads busy; threads beyond four idle in these products.
 * Blocks of MR_NN_FC_WORK multiply-adds (not MR_NN_GEMM_WORK's 8 M): the
 * critic's forward on a 256-sample block of the small net (256 x 128 x
 * 372, 12 M) and on act's 64 samples (3 M) ran as one block, on one
 * thread while the others waited (perf, Zen 4: 1.3% of the small net's
 * training on the first thread only). */
int mr_nn_fc_plan(int M, int N, int K, int *nb, int *bs) {
    int D = M >= N ? M : N;
    return gemm_plan(M, N, K, MR_NN_FC_WORK, MR_NN_FC_MAXB, D >= 2 * MR_NN_FC_MIND ? MR_NN_FC_MIND : MR_NN_GEMM_MIND,
                     1, nb, bs);
}

/* One cblas_sgemm, single-threaded whatever the caller's OpenMP state. */
static void sgemm1(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                   float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                   float *C, int ldc) {
    int n = mr_one_thread_begin();
#ifdef MR_NN_PROFILE
    double t0 = thread_cpu();
#endif
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef MR_NN_PROFILE
    double dt = thread_cpu() - t0;
    #pragma omp atomic
    nn_sgemm_seconds += dt;
    #pragma omp atomic
    nn_sgemm_calls++;
#endif
    mr_one_thread_end(n);
}

/* fc: mr_nn_fc_plan's blocks, else mr_nn_gemm_plan's */
static int plan_of(int fc, int M, int N, int K, int *nb, int *bs) {
    return fc ? mr_nn_fc_plan(M, N, K, nb, bs) : mr_nn_gemm_plan(M, N, K, nb, bs);
}

static void sgemm_plan(int fc, int own, int transa, int transb, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta,
                       float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {   /* nothing to add; honour beta */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    int nb, bs, rows = plan_of(fc, M, N, K, &nb, &bs);
    /* gemm.c's kernels where asked and they take the product: the same
     * blocks, each element's bits whatever the block */
    const int mine = own && !transb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && mr_gemm_any();
    const long sar = transa ? 1 : lda, sak = transa ? lda : 1;   /* op(A)'s (row, k) strides */
    enum CBLAS_TRANSPOSE ta = transa ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transb ? CblasTrans : CblasNoTrans;
    /* one block without an OpenMP fork */
    #pragma omp parallel for schedule(dynamic, 1) if (nb > 1)
    for (int i = 0; i < nb; i++) {
        const int o = i * bs, n = (rows ? M : N) - o < bs ? (rows ? M : N) - o : bs;
        const int m = rows ? n : M, nc = rows ? N : n;
        /* rows o.. of op(A) and C, or columns o.. of op(B) and C */
        const float *Ab = rows ? A + o * sar : A;
        const float *Bb = rows ? B : transb ? B + (size_t)o * ldb : B + o;
        float *Cb = rows ? C + (size_t)o * ldc : C + o;
        if (mine) mr_gemm(Cb, ldc, Ab, sar, sak, Bb, ldb, m, nc, K, beta != 0.0f);
        else sgemm1(ta, tb, m, nc, K, alpha, Ab, lda, Bb, ldb, beta, Cb, ldc);
    }
}

static void sgemm(int transa, int transb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc) {
    sgemm_plan(0, 0, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ------------------------------------------------------------ observation */
void mr_obs_expand_forward(float *out, const uint8_t *codes, int B, int VV, int C, int proxy) {
    size_t n = (size_t)B * VV;
    if (C == 2) {   /* foraging's, with its proxies: a lookup[code] = (ch0, ch1) */
        static const float gt[3][2] = {{0.0f, 0.0f}, {1.0f, 0.0f}, {0.0f, 1.0f}};
        static const float px[3][2] = {{0.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.5f}};
        static const float p8[3][2] = {{0.0f, 0.0f}, {1.0f, 1.0f}, {0.0f, 0.0f}};   /* obs_codes.h */
        const float (*lut)[2] = proxy == MR_EXPAND_PROXY_UINT8 ? p8 : proxy ? px : gt;
        #pragma omp parallel for schedule(static) if (n >= MR_NN_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            unsigned c = codes[i];
            if (c > 2) c = 0;
            out[2 * i] = lut[c][0];
            out[2 * i + 1] = lut[c][1];
        }
        return;
    }
    #pragma omp parallel for schedule(static) if (n * C >= MR_NN_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        for (int ch = 0; ch < C; ch++) out[i * C + ch] = mr_obs_value(codes[i], ch, proxy);
}

void mr_image_hwc_forward(float *out, const float *img, int B, int VV, int C) {
    #pragma omp parallel for schedule(static) if ((size_t)B * VV * C >= MR_NN_PAR_MIN)
    for (int b = 0; b < B; b++) {
        const float *in = img + (size_t)b * C * VV;
        float *o = out + (size_t)b * VV * C;
        for (int q = 0; q < VV; q++)
            for (int ch = 0; ch < C; ch++) o[(size_t)q * C + ch] = in[(size_t)ch * VV + q];
    }
}

/* ------------------------------------------------------------ conv 3x3 */
/* im2col of the output pixels [r0, r0+n) (flat index (b*H + y)*W + x) into
 * col rows r0.. */
static void im2col_rows(float *col, const float *inp, size_t r0, size_t n, int H, int W, int C) {
    size_t K = 9 * (size_t)C, C3 = 3 * (size_t)C;
    for (size_t r = r0; r < r0 + n; r++) {
        int x = (int)(r % W), y = (int)(r / W % H);
        size_t b = r / ((size_t)W * H);
        float *dst = col + r * K;
        for (int ky = 0; ky < 3; ky++, dst += C3) {
            int yy = y + ky - 1;
            if (yy < 0 || yy >= H) {
                memset(dst, 0, sizeof(float) * C3);
            } else if (x >= 1 && x + 1 < W) {   /* the three taps are adjacent pixels */
                memcpy(dst, inp + ((b * H + yy) * W + x - 1) * C, sizeof(float) * C3);
            } else {
                for (int kx = 0; kx < 3; kx++) {
                    int xx = x + kx - 1;
                    float *d = dst + (size_t)kx * C;
                    if (xx < 0 || xx >= W) memset(d, 0, sizeof(float) * C);
                    else memcpy(d, inp + ((b * H + yy) * W + xx) * C, sizeof(float) * C);
                }
            }
        }
    }
}

void mr_im2col3x3(float *col, const float *inp, int B, int H, int W, int C) {
    size_t rows = (size_t)B * H, N = rows * W;
    #pragma omp parallel for schedule(static) if (N * 9 * C >= MR_NN_PAR_MIN)
    for (size_t by = 0; by < rows; by++) im2col_rows(col, inp, by * W, W, H, W, C);
}

/* dinp (B,H,W,C) += col2im(dcol), dcol (B*H*W, 9C). Written as a gather over
 * the input pixels (each sums its 9 contributions in (ky,kx) order), so rows
 * run in parallel without write conflicts and the sum order is fixed. */
static void col2im3x3_add(float *dinp, const float *dcol, int B, int H, int W, int C) {
    size_t K = 9 * (size_t)C, rows = (size_t)B * H;
    #pragma omp parallel for schedule(static) if (rows * W * K >= MR_NN_PAR_MIN)
    for (size_t by = 0; by < rows; by++) {
        int b = (int)(by / H), y = (int)(by % H);
        for (int x = 0; x < W; x++) {
            float *dst = dinp + (by * W + x) * C;
            /* input pixel (y,x) is tap (ky,kx) of output pixel (y-ky+1, x-kx+1) */
            for (int ky = 0; ky < 3; ky++) {
                int oy = y - ky + 1;
                if (oy < 0 || oy >= H) continue;
                for (int kx = 0; kx < 3; kx++) {
                    int ox = x - kx + 1;
                    if (ox < 0 || ox >= W) continue;
                    const float *src = dcol + (((size_t)b * H + oy) * W + ox) * K
                                       + (size_t)(ky * 3 + kx) * C;
                    for (int c = 0; c < C; c++) dst[c] += src[c];
                }
            }
        }
    }
}

/* The forward product of conv and linear layers, in one OpenMP loop over the
 * blocks of mr_nn_gemm_plan (fc: mr_nn_fc_plan):  out (M,N) = [relu] (A . w^T + b),
 * w (N,K), b (N) or NULL. A (M,K) is given, or (conv, src != NULL) A = col
 * (M,K) is written block by block by im2col of src, so a block's im2col is
 * still in cache for its sgemm. Each task fills its block with the bias, runs
 * one single-threaded sgemm onto it and applies the ReLU while the block is
 * hot: one fork per layer. The sgemm calls are those sgemm() would make for
 * the same shape. seg > 0 (A given): the rows are taken seg at a time (the
 * last segment may be shorter), each segment planned as a product of its
 * own, so the calls are those of one forward_gemm per segment, all in the
 * one loop. */
typedef struct { const float *inp; int H, W, C; } im2col_src;

static void forward_gemm(float *out, const float *A, float *col, const im2col_src *src,
                         const float *w, const float *wt, const float *b, int M, int N, int K, int relu, int fc,
                         int seg) {
    if (M <= 0 || N <= 0) return;
    if (src) {
        A = col;
        seg = M;
    }
    if (seg <= 0 || seg > M) seg = M;
    const int nseg = (M + seg - 1) / seg, last = M - (nseg - 1) * seg;
    int nbf, bsf, nbl, bsl;
    const int rowsf = plan_of(fc, seg, N, K > 0 ? K : 1, &nbf, &bsf);   /* a full segment */
    const int rowsl = plan_of(fc, last, N, K > 0 ? K : 1, &nbl, &bsl);  /* the last one */
    if (src && !rowsl) mr_im2col3x3(col, src->inp, M / (src->H * src->W), src->H, src->W, src->C);
    const int nfull = (nseg - 1) * nbf, ntask = nfull + nbl;
    #pragma omp parallel for schedule(dynamic, 1) if (ntask > 1)
    for (int t = 0; t < ntask; t++) {
        const int s = t < nfull ? t / nbf : nseg - 1, i = t < nfull ? t % nbf : t - nfull;
        const int m = t < nfull ? seg : last, rows = t < nfull ? rowsf : rowsl, bs = t < nfull ? bsf : bsl;
        int o = i * bs, D = rows ? m : N, n = D - o < bs ? D - o : bs;
        int r0 = s * seg + (rows ? o : 0), nr = rows ? n : m, c0 = rows ? 0 : o, nc = rows ? N : n;
        if (src && rows) im2col_rows(col, src->inp, (size_t)o, (size_t)n, src->H, src->W, src->C);
        for (int r = r0; r < r0 + nr; r++) {
            float *row = out + (size_t)r * N + c0;
            if (b) memcpy(row, b + c0, sizeof(float) * nc);
            else memset(row, 0, sizeof(float) * nc);
        }
        if (K > 0 && wt)   /* gemm.c's kernels on w transposed */
            mr_gemm(out + (size_t)r0 * N + c0, N, A + (size_t)r0 * K, K, 1, wt + c0, N, nr, nc, K, 1);
        else if (K > 0)
            sgemm1(CblasNoTrans, CblasTrans, nr, nc, K, 1.0f, A + (size_t)r0 * K, K,
                   w + (size_t)c0 * K, K, 1.0f, out + (size_t)r0 * N + c0, N);
        if (relu)
            for (int r = r0; r < r0 + nr; r++) {
                float *row = out + (size_t)r * N + c0;
                for (int j = 0; j < nc; j++) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
            }
    }
}

void mr_conv3x3_forward(float *out, float *col, const float *inp, const float *w,
                        const float *b, int B, int H, int W, int C, int OC) {
    im2col_src src = {inp, H, W, C};
    forward_gemm(out, NULL, col, &src, w, NULL, b, B * H * W, OC, 9 * C, 0, 0, 0);
}

void mr_conv3x3_relu_forward(float *out, float *col, const float *inp, const float *w,
                             const float *b, int B, int H, int W, int C, int OC) {
    im2col_src src = {inp, H, W, C};
    forward_gemm(out, NULL, col, &src, w, NULL, b, B * H * W, OC, 9 * C, 1, 0, 0);
}

void mr_conv3x3_backward(float *dinp, float *dw, float *db, float *col,
                         const float *dout, const float *inp, const float *w,
                         int B, int H, int W, int C, int OC) {
    int N = B * H * W, K = 9 * C;
    if (dw) {
        mr_im2col3x3(col, inp, B, H, W, C);
        sgemm(1, 0, OC, K, N, 1.0f, dout, OC, col, K, 1.0f, dw, K);
    }
    if (db) mr_bias_backward(db, dout, (size_t)N, OC);
    if (dinp) {
        sgemm(0, 0, N, K, OC, 1.0f, dout, OC, w, K, 0.0f, col, K);
        col2im3x3_add(dinp, col, B, H, W, C);
    }
}

/* ------------------------------------------------------------ conv 3x3 from codes */
#define CODES_SPARSE_MAX 4096   /* pixels per map the sparse paths take (a flag each, on the stack) */

/* Nonzero codes (1 .. C: foraging's FOOD or POISON) are few (ENV_SPEC:
 * 0.8-3% of the cells): touched[p] = 1 for the output pixels p whose 3x3
 * window holds one, the others 0; returns how many codes are nonzero (0:
 * nothing touched, the flags not written). Only touched pixels have terms
 * to add; the others' sums are the bias alone. */
static int codes_touched(uint8_t *touched, const uint8_t *cb, int H, int W, int C) {
    int nz = 0;
    for (int i = 0; i < H * W; i++) nz += mr_obs_nonzero(cb[i], C);
    if (!nz) return 0;
    memset(touched, 0, (size_t)H * W);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            if (!mr_obs_nonzero(cb[y * W + x], C)) continue;
            for (int yy = y - 1; yy <= y + 1; yy++)
                for (int xx = x - 1; xx <= x + 1; xx++)
                    if (yy >= 0 && yy < H && xx >= 0 && xx < W) touched[yy * W + xx] = 1;
        }
    return nz;
}

void mr_conv3x3_codes_relu_forward(float *out, float *tab, const uint8_t *codes, const float *w,
                                   const float *b, int B, int H, int W, int C, int OC, int proxy) {
    for (int tap = 0; tap < 9; tap++)
        for (int k = 0; k < C; k++) {
            float *t = tab + ((size_t)tap * C + k) * OC;
            if (C == 2) {   /* foraging's two channels, proxies included: the expression of old, bit for bit */
                float v0 = mr_obs_value((unsigned)k + 1u, 0, proxy), v1 = mr_obs_value((unsigned)k + 1u, 1, proxy);
                for (int o = 0; o < OC; o++)
                    t[o] = w[((size_t)o * 9 + tap) * 2] * v0 + w[((size_t)o * 9 + tap) * 2 + 1] * v1;
            } else {        /* one-hot: code k+1 is channel k's weight */
                for (int o = 0; o < OC; o++) t[o] = w[((size_t)o * 9 + tap) * C + k];
            }
        }
    float *rb = tab + (size_t)9 * C * OC;   /* relu(b): a pixel with nothing to add */
    for (int o = 0; o < OC; o++) rb[o] = b[o] > 0.0f ? b[o] : 0.0f;
    const int sparse = H * W <= CODES_SPARSE_MAX;
    uint8_t touched[CODES_SPARSE_MAX];
    for (int bi = 0; bi < B; bi++) {
        const uint8_t *cb = codes + (size_t)bi * H * W;
        const int any = sparse ? codes_touched(touched, cb, H, W, C) : 1;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                float *row = out + (((size_t)bi * H + y) * W + x) * OC;
                if (!any || (sparse && !touched[y * W + x])) {
                    memcpy(row, rb, sizeof(float) * OC);
                    continue;
                }
                memcpy(row, b, sizeof(float) * OC);
                for (int ky = 0; ky < 3; ky++) {
                    int yy = y + ky - 1;
                    if (yy < 0 || yy >= H) continue;
                    for (int kx = 0; kx < 3; kx++) {
                        int xx = x + kx - 1;
                        if (xx < 0 || xx >= W) continue;
                        unsigned c = cb[yy * W + xx];
                        if (!mr_obs_nonzero(c, C)) continue;   /* EMPTY or unknown: adds 0 */
                        const float *t = tab + ((size_t)(ky * 3 + kx) * C + (c - 1u)) * OC;
                        for (int o = 0; o < OC; o++) row[o] += t[o];
                    }
                }
                for (int o = 0; o < OC; o++) row[o] = row[o] > 0.0f ? row[o] : 0.0f;
            }
    }
}

void mr_conv3x3_codes_backward(float *dw, float *db, double *acc, const float *dout, const float *y,
                               const uint8_t *codes, int B, int H, int W, int C, int OC, int proxy) {
    const size_t T = (size_t)9 * C;   /* (tap, code) pairs */
    double *S = acc, *sb = acc + T * OC;   /* S[tap][code-1][o], sb[o] */
    memset(acc, 0, sizeof(double) * (T + 1) * (size_t)OC);
    const int sparse = H * W <= CODES_SPARSE_MAX;
    uint8_t touched[CODES_SPARSE_MAX];
    float *d = (float *)(acc + (T + 1) * OC);   /* a pixel's gradient through the ReLU */
    mr_colsum_f64(sb, dout, y, (size_t)B * H * W, OC, OC);   /* the bias: every pixel, in order */
    for (int bi = 0; bi < B; bi++) {
        const uint8_t *cb = codes + (size_t)bi * H * W;
        const int any = sparse ? codes_touched(touched, cb, H, W, C) : 1;
        if (!any) continue;
        for (int py = 0; py < H; py++)
            for (int px = 0; px < W; px++) {
                if (sparse && !touched[py * W + px]) continue;   /* no code in its window */
                const size_t pix = ((size_t)bi * H + py) * W + px;
                const float *g = dout + pix * OC;
                if (y) {   /* mr_relu_backward's rule, inline: its OpenMP region per pixel cost 13% */
                    const float *yo = y + pix * OC;
                    for (int o = 0; o < OC; o++) d[o] = yo[o] > 0.0f ? g[o] : 0.0f;
                    g = d;
                }
                for (int ky = 0; ky < 3; ky++) {
                    int yy = py + ky - 1;
                    if (yy < 0 || yy >= H) continue;
                    for (int kx = 0; kx < 3; kx++) {
                        int xx = px + kx - 1;
                        if (xx < 0 || xx >= W) continue;
                        unsigned c = cb[yy * W + xx];
                        if (!mr_obs_nonzero(c, C)) continue;
                        double *s = S + ((size_t)(ky * 3 + kx) * C + (c - 1u)) * OC;
                        for (int o = 0; o < OC; o++) s[o] += g[o];
                    }
                }
            }
    }
    for (int o = 0; o < OC; o++) {
        for (int tap = 0; tap < 9; tap++)
            for (int ch = 0; ch < C; ch++) {
                double g;
                if (C == 2)   /* foraging's two channels, proxies included: the expression of old */
                    g = S[((size_t)tap * 2) * OC + o] * mr_obs_value(1u, ch, proxy) +
                        S[((size_t)tap * 2 + 1) * OC + o] * mr_obs_value(2u, ch, proxy);
                else          /* one-hot: channel ch is code ch+1's sum */
                    g = S[((size_t)tap * C + ch) * OC + o];
                dw[((size_t)o * 9 + tap) * C + ch] += (float)g;
            }
        db[o] += (float)sb[o];
    }
}

/* ------------------------------------------------------------ linear */
void mr_linear_forward(float *out, const float *inp, const float *w, const float *b,
                       int B, int C, int OC) {
    forward_gemm(out, inp, NULL, NULL, w, NULL, b, B, OC, C, 0, 0, 0);
}

void mr_linear_relu_forward(float *out, const float *inp, const float *w, const float *b,
                            int B, int C, int OC) {
    forward_gemm(out, inp, NULL, NULL, w, NULL, b, B, OC, C, 1, 0, 0);
}

void mr_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int B, int C, int OC) {
    if (dinp) sgemm(0, 0, B, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    if (dw) sgemm(1, 0, OC, C, B, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (db) mr_bias_backward(db, dout, (size_t)B, OC);
}

/* fc (policy.c): mr_nn_fc_plan's blocks, the rows seg at a time */
void mr_fc_relu_forward(float *out, const float *inp, const float *w, const float *wt, const float *b,
                        int B, int C, int OC, int seg) {
    forward_gemm(out, inp, NULL, NULL, w, wt && mr_gemm_wide(OC) ? wt : NULL, b, B, OC, C, 1, 1, seg);
}

void mr_fc_input_grad(float *dinp, const float *dout, const float *w, int own, int B, int C, int OC, int cols) {
    sgemm_plan(1, own, 0, 0, B, cols, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, cols);
}

void mr_fc_backward(float *dinp, float *dw, float *db, const float *dout,
                    const float *inp, const float *w, int own, int B, int C, int OC) {
    if (dinp) mr_fc_input_grad(dinp, dout, w, own, B, C, OC, C);
    if (dw) mr_fc_weight_grad(dw, dout, inp, own, B, C, OC, C);
    if (db) mr_bias_backward(db, dout, (size_t)B, OC);
}

void mr_fc_weight_grad(float *dw, const float *dout, const float *inp, int own, int B, int C, int OC, int cols) {
    sgemm_plan(1, own, 1, 0, OC, cols, B, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
}

/* dst (cols, rows) = src (rows, cols)^T. AVX-512: 16 x 16 blocks in
 * registers (unpack, then 128-bit lane shuffles), 16 columns of src (one
 * row of blocks of dst) per task; the edges and other CPUs one element at a
 * time. Pure data movement: the same bits either way. */
__attribute__((target("avx512f"))) static void t16(float *dst, long ldd, const float *src, long lds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}

void mr_nn_transpose(float *dst, const float *src, int rows, int cols) {
    const int wide = __builtin_cpu_supports("avx512f"), R16 = rows / 16 * 16, nt = (cols + 15) / 16;
    #pragma omp parallel for schedule(static) if ((size_t)rows * cols >= MR_NN_PAR_MIN)
    for (int t = 0; t < nt; t++) {
        const int c0 = t * 16, c1 = c0 + 16 < cols ? c0 + 16 : cols;
        int r = 0;
        if (wide && c1 - c0 == 16)
            for (; r < R16; r += 16) t16(dst + (size_t)c0 * rows + r, rows, src + (size_t)r * cols + c0, cols);
        for (int c = c0; c < c1; c++)
            for (int q = r; q < rows; q++) dst[(size_t)c * rows + q] = src[(size_t)q * cols + c];
    }
}

/* fc's forward through the inputs' transpose (nn.h): ct (OC, B) = b per
 * row, then w . xt added on gemm.c's kernels in blocks of ct's rows, then
 * out = relu(ct^T). */
void mr_fc_relu_forward_xt(float *out, const float *xt, const float *w, const float *b, float *ct, int B, int C,
                           int OC) {
    if (B <= 0 || OC <= 0) return;
    const int R = 64, nb = (OC + R - 1) / R;
    #pragma omp parallel for schedule(dynamic, 1) if (nb > 1)
    for (int i = 0; i < nb; i++) {
        const int r0 = i * R, nr = OC - r0 < R ? OC - r0 : R;
        for (int r = r0; r < r0 + nr; r++) {
            float *row = ct + (size_t)r * B;
            const float v = b ? b[r] : 0.0f;
            for (int j = 0; j < B; j++) row[j] = v;
        }
        mr_gemm(ct + (size_t)r0 * B, B, w + (size_t)r0 * C, C, 1, xt, B, nr, B, C, 1);
    }
    mr_nn_transpose(out, ct, OC, B);
    mr_relu_forward(out, out, (size_t)B * OC);
}

/* ------------------------------------------------------------ relu */
void mr_relu_forward(float *out, const float *inp, size_t n) {
    #pragma omp parallel for schedule(static) if (n >= MR_NN_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void mr_relu_backward(float *dinp, const float *dout, const float *out, size_t n) {
    #pragma omp parallel for schedule(static) if (n >= MR_NN_PAR_MIN)
    for (size_t i = 0; i < n; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* ------------------------------------------------------------ column sums */
/* acc[c] += d[r*ld + c] (through y's ReLU where y is given) for r in order,
 * in double. AVX-512 (C a multiple of 16, at most 64): the sums stay in
 * registers, not in acc between rows (a store and a reload per row). */
#define COLSUM_MAXV 8   /* vectors of 8 doubles: 64 columns */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
colsum_v(double *acc, const float *d, const float *y, size_t rows, long ld, const int NV) {
    __m512d s[COLSUM_MAXV];
    for (int v = 0; v < NV; v++) s[v] = _mm512_loadu_pd(acc + 8 * v);
    for (size_t r = 0; r < rows; r++) {
        const float *dr = d + r * ld;
        for (int v = 0; v < NV; v += 2) {
            __m512 x = _mm512_loadu_ps(dr + 8 * v);
            if (y) x = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(y + r * ld + 8 * v), _mm512_setzero_ps(),
                                                              _CMP_GT_OQ), x);
            s[v] = _mm512_add_pd(s[v], _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
            s[v + 1] = _mm512_add_pd(s[v + 1], _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                                   _mm512_castps_pd(x), 1))));
        }
    }
    for (int v = 0; v < NV; v++) _mm512_storeu_pd(acc + 8 * v, s[v]);
}
__attribute__((target("avx512f"))) static void colsum512(double *acc, const float *d, const float *y, size_t rows,
                                                         long ld, int C) {
    switch (C / 16) {
    case 1: colsum_v(acc, d, y, rows, ld, 2); break;
    case 2: colsum_v(acc, d, y, rows, ld, 4); break;
    case 3: colsum_v(acc, d, y, rows, ld, 6); break;
    default: colsum_v(acc, d, y, rows, ld, 8); break;
    }
}

void mr_colsum_f64(double *acc, const float *d, const float *y, size_t rows, long ld, int C) {
    if (C % 16 == 0 && C > 0 && C <= 8 * COLSUM_MAXV && __builtin_cpu_supports("avx512f")) {
        colsum512(acc, d, y, rows, ld, C);
        return;
    }
    for (size_t r = 0; r < rows; r++) {
        const float *dr = d + r * ld;
        if (y)
            for (int c = 0; c < C; c++) acc[c] += y[r * ld + c] > 0.0f ? dr[c] : 0.0f;
        else
            for (int c = 0; c < C; c++) acc[c] += dr[c];
    }
}

/* ------------------------------------------------------------ bias grads */
void mr_bias_backward(float *db, const float *d, size_t N, int OC) {
    int nblk = (OC + MR_NN_BIAS_BLOCK - 1) / MR_NN_BIAS_BLOCK;
    /* one task per block of output channels; rows in order; double accumulators */
    #pragma omp parallel for schedule(static) if (N * (size_t)OC >= MR_NN_PAR_MIN)
    for (int k = 0; k < nblk; k++) {
        int c0 = k * MR_NN_BIAS_BLOCK;
        int nc = OC - c0 < MR_NN_BIAS_BLOCK ? OC - c0 : MR_NN_BIAS_BLOCK;
        double acc[MR_NN_BIAS_BLOCK] = {0};
        mr_colsum_f64(acc, d + c0, NULL, N, OC, nc);
        for (int j = 0; j < nc; j++) db[c0 + j] += (float)acc[j];
    }
}

/*
 * policy_layers.h - the lower half of policy_math.h: the
 * per-element math of every small kernel of the CUDA network (MR_HD), the
 * operations table (GEMM, elementwise job, copy) and the layers' schedules
 * over it. policy_math.h adds the memory plan and the whole network.
 * Compiles as C99 and as CUDA C++; no launches or memory management.
 *
 * Names: mr_pc_ / MR_PC_ = "policy, CUDA": the CUDA policy network's
 * schedule (its plan, buffers, operations table and layers; it runs on the
 * CPU too, through spec/c/pc_emu.h, the "policy, CUDA" emulator). Its
 * enumerations add a letter: MR_PCJ_ a job (one elementwise kernel's kind),
 * MR_PCE_ an epilogue (a product's fused epilogue), MR_PCC_ a convolution
 * (cuDNN's operation). The MLP trunk's schedule (policy_mlp_math.h) is
 * mr_pm_ ("policy, MLP") and either trunk's mr_pn_ ("policy network").
 * docs/cuda.md's glossary lists them. Spelled out, the prefix would be
 * mr_policy_cuda_, which is taken by kernels/policy_cuda.h's API (the
 * backend's object that runs this schedule) and would make the ~800 uses
 * unreadably long.
 */
#ifndef MR_POLICY_LAYERS_H
#define MR_POLICY_LAYERS_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rng.h"   /* MR_HD */
#include "number_formats.h"   /* bf16, fp16; load and store by storage type */
#include "obs_codes.h"
#ifdef __cplusplus
extern "C" {
#endif
#include "net_layout.h"
#include "errors.h"
#ifdef __cplusplus
}
#endif

#define MR_PC_ALIGN 256                    /* bytes: every buffer of the workspace */
#define MR_PC_RB 64                        /* rows (or partials) per bias-gradient partial sum */
#define MR_PC_CHUNK 2048                   /* default samples per conv GEMM (chunk*VV rows) */
#define MR_PC_BLAS_WS ((size_t)32 << 20)   /* cuBLAS workspace (NVIDIA's figure for Hopper) */
/* Elements per job and per GEMM operand: the job kernels index with 32-bit
 * integers and cuBLAS takes int sizes. A buffer may be larger (the conv
 * activations of a whole minibatch are: 64-bit offsets address each chunk),
 * so this bounds a chunk and a linear layer's rows, not the batch. */
#define MR_PC_MAX_ELEMS 2147483647LL
#define MR_PC_DNN_WS ((size_t)256 << 20)   /* cuDNN's workspace, taken only when a layer runs through cuDNN */

/* Observation lookup, as nn.c's mr_obs_expand_forward: code -> channel ch;
 * proxy is an expansion of obs_codes.h (0 truth, one-hot over C channels;
 * 1 proxy, 2 proxy as uint8: foraging's, C = 2). */
MR_HD float mr_pc_obs(unsigned code, int ch, int proxy) { return mr_obs_value(code, ch, proxy); }

/* ------------------------------------------------------------ elementwise jobs */

/* Every small kernel is one of these: one element (thread) i in [0, n).
 * MR_PCJ_: "policy, CUDA: job". */
enum {
    MR_PCJ_IM2COL = 1,   /* y (rows*H*W, 9C) = im2col of x (rows,H,W,C); rows = n / (HW*9C) */
    MR_PCJ_IM2COL_CODES, /* y (.., 9C) = im2col of expand(codes (rows, HW), proxy) over C channels */
    MR_PCJ_BIAS_ACT,     /* y (rows, cols; ld) = [relu](y + f[c]); f may be NULL */
    MR_PCJ_CIN_FILL,     /* y row r, columns c0 .. c0+2+C*HW = f (rows,2) or 0, then ground truth of codes */
    MR_PCJ_RELU_BACK,    /* y (rows, cols; ld) = m (rows, cols; ld2) > 0 ? y : 0 */
    MR_PCJ_COL2IM,       /* y (rows,H,W,C) from x = dcol (rows*HW, 9C): the 9 taps summed in (ky,kx)
                          * order; m ? y = m > 0 ? s : 0 (m is y's forward output) : y += s */
    MR_PCJ_CAST,         /* y (n) T = f (n) fp32 */
    MR_PCJ_BGRAD_PART,   /* part (P, cols) f64: part[p][c] = sum of x[r][c] (ld), r in block p of rb rows */
    MR_PCJ_BGRAD_PART_D, /* the same over pin (rows, cols) f64, a previous level's partial sums */
    MR_PCJ_BGRAD_SUM,    /* fo (cols) += (float) sum over p of pin[p][c], p in order */
    /* the MLP trunk's (policy_mlp_math.h), fp32 */
    MR_PCJ_TANH_BACK,    /* y (rows, cols; ld) *= 1 - m^2, m (rows, cols; ld2) the tanh's output */
    MR_PCJ_ROW_FILL,     /* y row r, columns c0 .. c0+cols-1 = f (cols): a box's log-stds in every row */
    MR_PCJ_MLP_CIN,      /* y (rows, cols) = x (rows, c0) ++ the first cols-c0 of f (rows, MR_POLICY_EXTRA) or 0 */
    MR_PCJ_ACC_F32,      /* fo (n) fp32 += x (n) T: a cuDNN weight gradient in T added to the fp32 grads */
    /* a float image observation's (net_layout.h's obs_float) */
    MR_PCJ_IM2COL_IMAGE, /* y (.., 9C) = im2col of img (rows, C, HW) fp32 read channels last (rows, H, W, C) */
    MR_PCJ_CIN_IMAGE,    /* y row r, columns c0 .. c0+2+C*HW = f (rows,2)'s first cols (the declared
                          * privileged inputs, 0 .. 2) or 0, then img (rows, C, HW) fp32 channels last */
    MR_PCJ_KINDS
};
#define MR_PC_ACT_TANH 2   /* mr_pc_job.relu for MR_PCJ_BIAS_ACT: 1 = ReLU, 2 = tanh */
/* The `proxy` of the first conv layer (mr_pc_conv_forward / _backward) when
 * its `codes` hold a float image, (n, C, H*W) fp32 per sample, instead of
 * cell codes: the layer reads it channels last, as cpu/nn.c's
 * mr_image_hwc_forward (MR_PCJ_IM2COL_IMAGE). */
#define MR_PC_OBS_IMAGE (-1)

typedef struct mr_pc_job {
    int kind, dt;                 /* MR_PCJ_*, the storage type of x, y and m */
    unsigned n;                   /* elements (threads) */
    int rows, cols, ld, ld2, c0;
    int H, W, C;                  /* conv geometry */
    int proxy, relu, rb, P;
    const void *x, *m;
    void *y;
    const float *f;
    float *fo;
    const uint8_t *codes;
    const float *img;             /* a float image (rows, C, H*W) fp32: the *_IMAGE kinds */
    const double *pin;
    double *part;
} mr_pc_job;

/* Element i of job j; kind and dt are j's (the kernels pass them as constants). */
MR_HD void mr_pc_elem(const mr_pc_job *j, unsigned i, int kind, int dt) {
    switch (kind) {
    case MR_PCJ_IM2COL:
    case MR_PCJ_IM2COL_CODES:
    case MR_PCJ_IM2COL_IMAGE: {
        const unsigned C = (unsigned)j->C, K = 9u * C;
        const unsigned W = (unsigned)j->W, HW = (unsigned)j->H * W;
        const unsigned r = i / K, t = i - r * K, tap = t / C, c = t - tap * C;
        const unsigned b = r / HW, q = r - b * HW, y = q / W, x = q - y * W;
        const int yy = (int)y + (int)(tap / 3u) - 1, xx = (int)x + (int)(tap % 3u) - 1;
        if (yy < 0 || yy >= j->H || xx < 0 || xx >= j->W) {
            mr_pc_st(j->y, i, dt, 0.0f);
        } else {
            const unsigned s = b * HW + (unsigned)yy * W + (unsigned)xx;
            if (kind == MR_PCJ_IM2COL) mr_pc_mov(j->y, i, j->x, (size_t)s * C + c, dt);
            else if (kind == MR_PCJ_IM2COL_IMAGE)   /* pixel s - b*HW of channel c of sample b */
                mr_pc_st(j->y, i, dt, j->img[((size_t)b * C + c) * HW + (s - b * HW)]);
            else mr_pc_st(j->y, i, dt, mr_pc_obs(j->codes[s], (int)c, j->proxy));
        }
    } break;
    case MR_PCJ_BIAS_ACT: {
        const unsigned r = i / (unsigned)j->cols, c = i - r * (unsigned)j->cols;
        const size_t k = (size_t)r * (unsigned)j->ld + c;
        float v = mr_pc_ld(j->y, k, dt);
        if (j->f) v += j->f[c];
        if (j->relu == MR_PC_ACT_TANH) v = tanhf(v);
        else if (j->relu) v = v > 0.0f ? v : 0.0f;
        mr_pc_st(j->y, k, dt, v);
    } break;
    case MR_PCJ_CIN_FILL: {
        const unsigned C = (unsigned)j->C, E = 2u + C * (unsigned)(j->H * j->W), r = i / E, k = i - r * E;
        float v;
        if (k < 2u) v = j->f ? j->f[2u * r + k] : 0.0f;
        else v = mr_pc_obs(j->codes[(size_t)r * (unsigned)(j->H * j->W) + (k - 2u) / C], (int)((k - 2u) % C),
                           MR_EXPAND_TRUTH);
        mr_pc_st(j->y, (size_t)r * (unsigned)j->ld + (unsigned)j->c0 + k, dt, v);
    } break;
    case MR_PCJ_CIN_IMAGE: {
        const unsigned C = (unsigned)j->C, HW = (unsigned)(j->H * j->W), E = 2u + C * HW, r = i / E, k = i - r * E;
        float v;
        if (k < 2u) v = j->f && k < (unsigned)j->cols ? j->f[2u * r + k] : 0.0f;
        else v = j->img[((size_t)r * C + (k - 2u) % C) * HW + (k - 2u) / C];
        mr_pc_st(j->y, (size_t)r * (unsigned)j->ld + (unsigned)j->c0 + k, dt, v);
    } break;
    case MR_PCJ_RELU_BACK: {
        const unsigned r = i / (unsigned)j->cols, c = i - r * (unsigned)j->cols;
        if (!(mr_pc_ld(j->m, (size_t)r * (unsigned)j->ld2 + c, dt) > 0.0f))
            mr_pc_st(j->y, (size_t)r * (unsigned)j->ld + c, dt, 0.0f);
    } break;
    case MR_PCJ_COL2IM: {
        const unsigned C = (unsigned)j->C, W = (unsigned)j->W, HW = (unsigned)j->H * W;
        const unsigned pix = i / C, c = i - pix * C, b = pix / HW, q = pix - b * HW, y = q / W, x = q - y * W;
        /* input pixel (y,x) is tap (ky,kx) of output pixel (y-ky+1, x-kx+1) */
        float s = j->m ? 0.0f : mr_pc_ld(j->y, i, dt);
        for (int ky = 0; ky < 3; ky++) {
            const int oy = (int)y - ky + 1;
            if (oy < 0 || oy >= j->H) continue;
            for (int kx = 0; kx < 3; kx++) {
                const int ox = (int)x - kx + 1;
                if (ox < 0 || ox >= j->W) continue;
                const size_t src = ((size_t)b * HW + (unsigned)oy * W + (unsigned)ox) * 9u * C + (unsigned)(ky * 3 + kx) * C + c;
                s += mr_pc_ld(j->x, src, dt);
            }
        }
        if (j->m && !(mr_pc_ld(j->m, i, dt) > 0.0f)) s = 0.0f;
        mr_pc_st(j->y, i, dt, s);
    } break;
    case MR_PCJ_CAST:
        mr_pc_st(j->y, i, dt, j->f[i]);
        break;
    case MR_PCJ_BGRAD_PART:
    case MR_PCJ_BGRAD_PART_D: {
        const unsigned p = i / (unsigned)j->cols, c = i - p * (unsigned)j->cols;
        const unsigned r0 = p * (unsigned)j->rb;
        const unsigned r1 = r0 + (unsigned)j->rb < (unsigned)j->rows ? r0 + (unsigned)j->rb : (unsigned)j->rows;
        double s = 0.0;
        for (unsigned r = r0; r < r1; r++) {
            const size_t k = (size_t)r * (unsigned)j->ld + c;
            s += kind == MR_PCJ_BGRAD_PART ? (double)mr_pc_ld(j->x, k, dt) : j->pin[k];
        }
        j->part[i] = s;
    } break;
    case MR_PCJ_BGRAD_SUM: {
        double s = 0.0;
        for (int p = 0; p < j->P; p++) s += j->pin[(size_t)p * (unsigned)j->cols + i];
        j->fo[i] += (float)s;
    } break;
    case MR_PCJ_TANH_BACK: {
        const unsigned r = i / (unsigned)j->cols, c = i - r * (unsigned)j->cols;
        const float h = mr_pc_ld(j->m, (size_t)r * (unsigned)j->ld2 + c, dt);
        const size_t k = (size_t)r * (unsigned)j->ld + c;
        mr_pc_st(j->y, k, dt, mr_pc_ld(j->y, k, dt) * (1.0f - h * h));
    } break;
    case MR_PCJ_ROW_FILL: {
        const unsigned r = i / (unsigned)j->cols, c = i - r * (unsigned)j->cols;
        mr_pc_st(j->y, (size_t)r * (unsigned)j->ld + (unsigned)j->c0 + c, dt, j->f[c]);
    } break;
    case MR_PCJ_MLP_CIN: {
        const unsigned r = i / (unsigned)j->cols, c = i - r * (unsigned)j->cols, D = (unsigned)j->c0;
        const float v = c < D ? mr_pc_ld(j->x, (size_t)r * D + c, dt)
                              : (j->f ? j->f[(size_t)r * MR_POLICY_EXTRA + (c - D)] : 0.0f);
        mr_pc_st(j->y, i, dt, v);
    } break;
    case MR_PCJ_ACC_F32:
        j->fo[i] += mr_pc_ld(j->x, i, dt);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------ GEMM */

/* Row-major C (M,N) = op(A) op(B) + beta C, as nn.c's sgemm (alpha 1), with
 * A and B of type ab_dt and C of type c_dt, accumulated in fp32. */
typedef struct mr_pc_gemm {
    const char *what;
    int ta, tb, M, N, K;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    float beta;
    void *C;
    int ldc;
    int ab_dt, c_dt;
} mr_pc_gemm;

/* The same product in cuBLAS's column-major terms: the row-major C is the
 * column-major C^T = op(B)^T op(A)^T, so the operands swap. */
typedef struct mr_pc_cm {
    int transa, transb, m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    void *C;
    int ldc;
} mr_pc_cm;

static inline void mr_pc_gemm_cm(const mr_pc_gemm *g, mr_pc_cm *c) {
    c->transa = g->tb;
    c->transb = g->ta;
    c->m = g->N;
    c->n = g->M;
    c->k = g->K;
    c->A = g->B;
    c->lda = g->ldb;
    c->B = g->A;
    c->ldb = g->lda;
    c->C = g->C;
    c->ldc = g->ldc;
}

/* ------------------------------------------------------------ convolution (cuDNN) */

/* One 3x3 pad-1 stride-1 convolution of a trunk layer l >= 1 as cuDNN runs
 * it (cuda.conv, kernels/conv_cudnn.cu), NHWC, weights (OC,3,3,C) T (cuDNN's
 * KRSC = NHWC filter), fp32 accumulation:
 *   MR_PCC_FWD         y (n,H,W,OC) T = conv(x (n,H,W,C), w)          (written)
 *   MR_PCC_BWD_DATA    y (n,H,W,C) T = the input gradient of dy, w    (written)
 *   MR_PCC_BWD_FILTER  dw (OC,3,3,C) fp32 += the weight gradient of x, dy
 * `layer` picks the layer's algorithms in the implementation. MR_PCC_:
 * "policy, CUDA: convolution". */
enum { MR_PCC_FWD = 1, MR_PCC_BWD_DATA, MR_PCC_BWD_FILTER };
typedef struct mr_pc_conv {
    int op, layer, dt;
    int n, H, W, C, OC;
    const void *x, *w, *dy;
    void *y;
    float *dw;
} mr_pc_conv;

/* ------------------------------------------------------------ fused epilogues (cuBLASLt) */

/* What a product's epilogue does (cuda.epilogue = fused; kernels/gemm_lt.cu
 * runs it as one cublasLtMatmul), in the row-major terms of mr_pc_gemm:
 * acc = op(A) op(B) (M,N), C (M,N; ldc) the product's output.
 *   MR_PCE_BIAS           C = acc + bias[col]
 *   MR_PCE_RELU_BIAS      C = relu(acc + bias[col])
 *   MR_PCE_RELU_AUX_BIAS  the same, and the ReLU's bit mask into aux
 *                         (bit (r, c) = acc + bias > 0; row r's bits at r * aux_ld)
 *   MR_PCE_DRELU_BGRAD    C = aux bit (r, c) ? acc + beta C : 0, and with db:
 *                         db[col] (N) fp32 += the column sums of the new C
 *   MR_PCE_BGRAD_A        C = acc + beta C, and db[i] (M) fp32 += sum over k of
 *                         op(A)[i][k] (a weight gradient dW = dout^T x: A =
 *                         dout transposed, db = dout's column sums)
 * bias is fp32 (the parameters). The implementation forms a bias gradient
 * in its own scratch and adds it into db.
 * The bits' layout is the implementation's (cuBLASLt's, or the CPU
 * emulation's own): only the same implementation reads what it wrote, which
 * aux_ok guarantees (mr_pc_aux). MR_PCE_: "policy, CUDA: epilogue". */
enum { MR_PCE_BIAS = 1, MR_PCE_RELU_BIAS, MR_PCE_RELU_AUX_BIAS, MR_PCE_DRELU_BGRAD, MR_PCE_BGRAD_A, MR_PCE_KINDS };

typedef struct mr_pc_epi {
    int kind;
    const float *bias;
    float *db;
    void *aux;
    long long aux_ld;   /* bits per row of aux: a multiple of 128, at least N (cuBLASLt's rule) */
} mr_pc_epi;

/* Bits per row of a ReLU mask of `cols` columns, and the bytes of `rows` rows. */
static inline long long mr_pc_aux_ld(int cols) { return ((long long)(cols > 0 ? cols : 1) + 127) / 128 * 128; }
static inline size_t mr_pc_aux_bytes(long long rows, int cols) { return (size_t)(rows * mr_pc_aux_ld(cols) / 8); }

/* A forward output's ReLU mask kept for the backward: bits (the plan's) and
 * ok, a host flag the forward sets to 1 when every product of that output
 * wrote its bits (the fused path ran) and 0 otherwise; the backward fuses
 * the ReLU mask only when it is 1, else masks by the output as the
 * separate path does. */
typedef struct mr_pc_aux {
    void *bits;
    long long ld;
    int *ok;
} mr_pc_aux;

/* ------------------------------------------------------------ operations table */

typedef struct mr_pc_ops {
    void *ctx;
    mr_status (*gemm)(void *ctx, const mr_pc_gemm *g, mr_error *err);
    mr_status (*job)(void *ctx, const mr_pc_job *j, mr_error *err);
    mr_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, mr_error *err);   /* device to device */
    /* optional (NULL: every conv is im2col + GEMM): a cuDNN convolution */
    mr_status (*conv)(void *ctx, const mr_pc_conv *c, mr_error *err);
    /* optional (NULL: cuda.epilogue = separate): a product with its epilogue
     * fused; *done = 0 when the implementation has no algorithm for it
     * (nothing was enqueued: the schedule then runs the separate way) */
    mr_status (*gemm_ep)(void *ctx, const mr_pc_gemm *g, const mr_pc_epi *e, int *done, mr_error *err);
} mr_pc_ops;

#define MR_PC_TRY(call)                       \
    do {                                      \
        mr_status st_ = (call);               \
        if (st_ != MR_OK) return st_;         \
    } while (0)

static inline const void *mr_pc_cat(const void *p, size_t i, int dt) {
    return (const unsigned char *)p + i * (size_t)mr_pc_esize(dt);
}
static inline void *mr_pc_at(void *p, size_t i, int dt) {
    return (unsigned char *)p + i * (size_t)mr_pc_esize(dt);
}

static inline mr_status mr_pc_gemm_rm(const mr_pc_ops *o, const char *what, int ta, int tb, int M, int N, int K,
                                      const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                                      int ab_dt, int c_dt, mr_error *err) {
    if (M <= 0 || N <= 0 || K <= 0) return MR_OK;   /* the schedule never needs a K = 0 product */
    mr_pc_gemm g;
    g.what = what;
    g.ta = ta; g.tb = tb; g.M = M; g.N = N; g.K = K;
    g.A = A; g.lda = lda; g.B = B; g.ldb = ldb; g.beta = beta; g.C = C; g.ldc = ldc;
    g.ab_dt = ab_dt; g.c_dt = c_dt;
    return o->gemm(o->ctx, &g, err);
}

/* The product of mr_pc_gemm_rm with epilogue e through o->gemm_ep; *done = 0
 * (nothing enqueued) when there is no such operation or it has no algorithm. */
static inline mr_status mr_pc_gemm_ep(const mr_pc_ops *o, const char *what, int ta, int tb, int M, int N, int K,
                                      const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc,
                                      int ab_dt, int c_dt, const mr_pc_epi *e, int *done, mr_error *err) {
    *done = 0;
    if (!o->gemm_ep || M <= 0 || N <= 0 || K <= 0) return MR_OK;
    mr_pc_gemm g;
    g.what = what;
    g.ta = ta; g.tb = tb; g.M = M; g.N = N; g.K = K;
    g.A = A; g.lda = lda; g.B = B; g.ldb = ldb; g.beta = beta; g.C = C; g.ldc = ldc;
    g.ab_dt = ab_dt; g.c_dt = c_dt;
    return o->gemm_ep(o->ctx, &g, e, done, err);
}

static inline void mr_pc_job_init(mr_pc_job *j, int kind, int dt, long long n) {
    memset(j, 0, sizeof *j);
    j->kind = kind;
    j->dt = dt;
    j->n = (unsigned)n;
}

/* Doubles of partial sums a bias gradient over `rows` rows and `cols`
 * columns needs (every level of mr_pc_bias_grad). */
static inline size_t mr_pc_bias_partials(long long rows, int cols) {
    size_t total = 0;
    long long n = rows > 0 ? rows : 0;
    do {
        n = (n + MR_PC_RB - 1) / MR_PC_RB;
        total += (size_t)n * (size_t)(cols > 0 ? cols : 0);
    } while (n > MR_PC_RB);
    return total;
}

/* db (cols) fp32 += column sums of d (rows, cols; ld) T. Deterministic (no
 * atomics, a fixed order for a given rows): each thread sums MR_PC_RB rows
 * of one column in double; while more than MR_PC_RB partial sums are left,
 * they are summed the same way; the last thread per column adds them in
 * order. Every level is a wide kernel with at most MR_PC_RB dependent adds
 * per thread (rows 247,808 = one conv chunk: 3872, 61, then 1 partial). */
static inline mr_status mr_pc_bias_grad(const mr_pc_ops *o, int dt, float *db, double *part, const void *d, int rows,
                                        int cols, int ld, mr_error *err) {
    if (rows <= 0 || cols <= 0) return MR_OK;
    mr_pc_job j;
    int n = (rows + MR_PC_RB - 1) / MR_PC_RB;
    mr_pc_job_init(&j, MR_PCJ_BGRAD_PART, dt, (long long)n * cols);
    j.rows = rows; j.cols = cols; j.ld = ld; j.rb = MR_PC_RB; j.x = d; j.part = part;
    MR_PC_TRY(o->job(o->ctx, &j, err));
    const double *src = part;
    size_t off = (size_t)n * cols;
    while (n > MR_PC_RB) {
        const int n2 = (n + MR_PC_RB - 1) / MR_PC_RB;
        mr_pc_job_init(&j, MR_PCJ_BGRAD_PART_D, dt, (long long)n2 * cols);
        j.rows = n; j.cols = cols; j.ld = cols; j.rb = MR_PC_RB; j.pin = src; j.part = part + off;
        MR_PC_TRY(o->job(o->ctx, &j, err));
        src = part + off;
        off += (size_t)n2 * cols;
        n = n2;
    }
    mr_pc_job_init(&j, MR_PCJ_BGRAD_SUM, dt, cols);
    j.cols = cols; j.P = n; j.pin = src; j.fo = db;
    return o->job(o->ctx, &j, err);
}

/* ------------------------------------------------------------ layers */

/* A conv layer's im2col job into col: of inp (rows / HW samples, H, W, C)
 * T, or, inp NULL, of the observation: codes expanded by proxy, or with
 * proxy = MR_PC_OBS_IMAGE the float image `codes` points to. */
static inline void mr_pc_im2col_job(mr_pc_job *j, int dt, long long rows, int H, int W, int C, const void *inp,
                                    const uint8_t *codes, int proxy, void *col) {
    const int image = !inp && proxy == MR_PC_OBS_IMAGE;
    mr_pc_job_init(j, inp ? MR_PCJ_IM2COL : image ? MR_PCJ_IM2COL_IMAGE : MR_PCJ_IM2COL_CODES, dt, rows * 9 * C);
    j->H = H; j->W = W; j->C = C; j->x = inp; j->y = col;
    if (image) {
        j->img = (const float *)(const void *)codes;
    } else {
        j->codes = codes;
        j->proxy = proxy;
    }
}

/* 3x3 convolution, padding 1 (nn.c's mr_conv3x3_[relu_]forward):
 * out (n,H,W,OC) T = [relu](im2col(inp) . w^T + b), inp (n,H,W,C) T, or, when
 * inp is NULL, expand(codes (n,H*W), proxy) over C channels (the observation
 * expansion happens inside the im2col: the expanded input is never stored),
 * or with proxy = MR_PC_OBS_IMAGE the float image (n,C,H*W) at codes read
 * channels last (the same: only the im2col reads it).
 * w (OC,3,3,C) T, b (OC) fp32 or NULL, col (n*H*W, 9C) T workspace. */
static inline mr_status mr_pc_conv_forward(const mr_pc_ops *o, int dt, void *out, void *col, const void *inp,
                                           const uint8_t *codes, int proxy, const void *w, const float *b, int n,
                                           int H, int W, int C, int OC, int relu, mr_error *err) {
    const long long rows = (long long)n * H * W;
    if (rows <= 0) return MR_OK;
    mr_pc_job j;
    mr_pc_im2col_job(&j, dt, rows, H, W, C, inp, codes, proxy, col);
    MR_PC_TRY(o->job(o->ctx, &j, err));
    if (b) {   /* cuda.epilogue = fused: bias [+ ReLU] in the product */
        mr_pc_epi e;
        memset(&e, 0, sizeof e);
        e.kind = relu ? MR_PCE_RELU_BIAS : MR_PCE_BIAS;
        e.bias = b;
        int done;
        MR_PC_TRY(mr_pc_gemm_ep(o, "conv forward", 0, 1, (int)rows, OC, 9 * C, col, 9 * C, w, 9 * C, 0.0f, out, OC,
                                dt, dt, &e, &done, err));
        if (done) return MR_OK;
    }
    MR_PC_TRY(mr_pc_gemm_rm(o, "conv forward", 0, 1, (int)rows, OC, 9 * C, col, 9 * C, w, 9 * C, 0.0f, out, OC, dt,
                            dt, err));
    if (!b && !relu) return MR_OK;
    mr_pc_job_init(&j, MR_PCJ_BIAS_ACT, dt, rows * OC);
    j.rows = (int)rows; j.cols = OC; j.ld = OC; j.f = b; j.relu = relu; j.y = out;
    return o->job(o->ctx, &j, err);
}

/* nn.c's mr_conv3x3_backward: dout (n,H,W,OC) T; inp or codes as forward.
 * dw (OC,9C) fp32 += dout^T . im2col(inp); db (OC) fp32 += column sums of
 * dout (part: mr_pc_bias_partials(n*H*W, OC) doubles); dinp (n,H,W,C) T gets
 * col2im(dout . w): with mask (the forward output that was inp, post-ReLU)
 * dinp = mask > 0 ? col2im : 0 (written; ReLU's backward fused), without it
 * dinp += col2im. col (n*H*W, 9C) is overwritten. Each of dinp, dw, db may
 * be NULL. */
static inline mr_status mr_pc_conv_backward(const mr_pc_ops *o, int dt, void *dinp, const void *mask, float *dw,
                                            float *db, double *part, void *col, const void *dout, const void *inp,
                                            const uint8_t *codes, int proxy, const void *w, int n, int H, int W,
                                            int C, int OC, mr_error *err) {
    const long long rows = (long long)n * H * W;
    if (rows <= 0) return MR_OK;
    mr_pc_job j;
    if (dw) {
        mr_pc_im2col_job(&j, dt, rows, H, W, C, inp, codes, proxy, col);
        MR_PC_TRY(o->job(o->ctx, &j, err));
        int done = 0;
        if (db) {   /* cuda.epilogue = fused: the bias gradient from the product's dout operand */
            mr_pc_epi e;
            memset(&e, 0, sizeof e);
            e.kind = MR_PCE_BGRAD_A;
            e.db = db;
            MR_PC_TRY(mr_pc_gemm_ep(o, "conv weight gradient", 1, 0, OC, 9 * C, (int)rows, dout, OC, col, 9 * C,
                                    1.0f, dw, 9 * C, dt, MR_FP32, &e, &done, err));
            if (done) db = NULL;
        }
        if (!done)
            MR_PC_TRY(mr_pc_gemm_rm(o, "conv weight gradient", 1, 0, OC, 9 * C, (int)rows, dout, OC, col, 9 * C,
                                    1.0f, dw, 9 * C, dt, MR_FP32, err));
    }
    if (db) MR_PC_TRY(mr_pc_bias_grad(o, dt, db, part, dout, (int)rows, OC, OC, err));
    if (dinp) {
        MR_PC_TRY(mr_pc_gemm_rm(o, "conv input gradient", 0, 0, (int)rows, 9 * C, OC, dout, OC, w, 9 * C, 0.0f, col,
                                9 * C, dt, dt, err));
        mr_pc_job_init(&j, MR_PCJ_COL2IM, dt, rows * C);
        j.H = H; j.W = W; j.C = C; j.x = col; j.m = mask; j.y = dinp;
        MR_PC_TRY(o->job(o->ctx, &j, err));
    }
    return MR_OK;
}

/* The same layer through the conv operation (cuDNN) instead of im2col +
 * GEMM: forward = conv, then bias + ReLU (the job above); backward = the
 * weight gradient (dw += ...), the bias gradient (the same sums as
 * mr_pc_conv_backward's), the input gradient (written), then the ReLU mask
 * of the forward output that was inp (mask; NULL: none). inp is never the
 * codes: the trunk's first layer stays im2col (its input is never stored). */
static inline mr_status mr_pc_dnn_forward(const mr_pc_ops *o, int dt, int layer, void *out, const void *inp,
                                          const void *w, const float *b, int n, int H, int W, int C, int OC,
                                          int relu, mr_error *err) {
    const long long rows = (long long)n * H * W;
    if (rows <= 0) return MR_OK;
    mr_pc_conv c;
    memset(&c, 0, sizeof c);
    c.op = MR_PCC_FWD; c.layer = layer; c.dt = dt; c.n = n; c.H = H; c.W = W; c.C = C; c.OC = OC;
    c.x = inp; c.w = w; c.y = out;
    MR_PC_TRY(o->conv(o->ctx, &c, err));
    if (!b && !relu) return MR_OK;
    mr_pc_job j;
    mr_pc_job_init(&j, MR_PCJ_BIAS_ACT, dt, rows * OC);
    j.rows = (int)rows; j.cols = OC; j.ld = OC; j.f = b; j.relu = relu; j.y = out;
    return o->job(o->ctx, &j, err);
}

static inline mr_status mr_pc_dnn_backward(const mr_pc_ops *o, int dt, int layer, void *dinp, const void *mask,
                                           float *dw, float *db, double *part, const void *dout, const void *inp,
                                           const void *w, int n, int H, int W, int C, int OC, mr_error *err) {
    const long long rows = (long long)n * H * W;
    if (rows <= 0) return MR_OK;
    mr_pc_conv c;
    memset(&c, 0, sizeof c);
    c.layer = layer; c.dt = dt; c.n = n; c.H = H; c.W = W; c.C = C; c.OC = OC;
    if (dw) {
        c.op = MR_PCC_BWD_FILTER; c.x = inp; c.dy = dout; c.dw = dw;
        MR_PC_TRY(o->conv(o->ctx, &c, err));
    }
    if (db) MR_PC_TRY(mr_pc_bias_grad(o, dt, db, part, dout, (int)rows, OC, OC, err));
    if (dinp) {
        c.op = MR_PCC_BWD_DATA; c.x = NULL; c.dw = NULL; c.w = w; c.dy = dout; c.y = dinp;
        MR_PC_TRY(o->conv(o->ctx, &c, err));
        if (mask) {
            mr_pc_job j;
            mr_pc_job_init(&j, MR_PCJ_RELU_BACK, dt, rows * C);
            j.cols = C; j.ld = C; j.ld2 = C; j.m = mask; j.y = dinp;
            MR_PC_TRY(o->job(o->ctx, &j, err));
        }
    }
    return MR_OK;
}

/* nn.c's mr_linear_[relu_]forward with leading dimensions:
 * out (B,OC; ldo) odt = [relu](inp (B,C; ldi) T . w^T + b), w (OC,C; ldw) T,
 * b (OC) fp32 or NULL. */
static inline mr_status mr_pc_linear_forward_aux(const mr_pc_ops *o, const char *what, int dt, int odt, void *out,
                                                 int ldo, const void *inp, int ldi, const void *w, int ldw,
                                                 const float *b, int B, int C, int OC, int relu, const mr_pc_aux *aux,
                                                 mr_error *err);
static inline mr_status mr_pc_linear_forward(const mr_pc_ops *o, const char *what, int dt, int odt, void *out,
                                             int ldo, const void *inp, int ldi, const void *w, int ldw,
                                             const float *b, int B, int C, int OC, int relu, mr_error *err) {
    return mr_pc_linear_forward_aux(o, what, dt, odt, out, ldo, inp, ldi, w, ldw, b, B, C, OC, relu, NULL, err);
}

/* The same; with cuda.epilogue = fused (o->gemm_ep) and a bias, the bias
 * [+ ReLU] runs in the product, and with aux (ReLU only) the mask's bits go
 * to aux->bits (rows from row 0 of out) for mr_pc_input_grad_relu; *aux->ok
 * is cleared when they were not written (the caller sets it to 1 before the
 * first product of an output). */
static inline mr_status mr_pc_linear_forward_aux(const mr_pc_ops *o, const char *what, int dt, int odt, void *out,
                                                 int ldo, const void *inp, int ldi, const void *w, int ldw,
                                                 const float *b, int B, int C, int OC, int relu, const mr_pc_aux *aux,
                                                 mr_error *err) {
    if (B <= 0) return MR_OK;
    int done = 0;
    if (b && relu != MR_PC_ACT_TANH) {
        mr_pc_epi e;
        memset(&e, 0, sizeof e);
        e.kind = !relu ? MR_PCE_BIAS : aux && aux->bits && aux->ok ? MR_PCE_RELU_AUX_BIAS : MR_PCE_RELU_BIAS;
        e.bias = b;
        if (e.kind == MR_PCE_RELU_AUX_BIAS) {
            e.aux = aux->bits;
            e.aux_ld = aux->ld;
        }
        MR_PC_TRY(mr_pc_gemm_ep(o, what, 0, 1, B, OC, C, inp, ldi, w, ldw, 0.0f, out, ldo, dt, odt, &e, &done, err));
    }
    if (aux && aux->ok && !done) *aux->ok = 0;
    if (done) return MR_OK;
    MR_PC_TRY(mr_pc_gemm_rm(o, what, 0, 1, B, OC, C, inp, ldi, w, ldw, 0.0f, out, ldo, dt, odt, err));
    if (!b && !relu) return MR_OK;
    mr_pc_job j;
    mr_pc_job_init(&j, MR_PCJ_BIAS_ACT, odt, (long long)B * OC);
    j.rows = B; j.cols = OC; j.ld = ldo; j.f = b; j.relu = relu; j.y = out;
    return o->job(o->ctx, &j, err);
}

/* nn.c's mr_linear_backward with leading dimensions: dout (B,OC; ldo) T.
 * dinp (B,C; ldd) T = beta * dinp + dout . w (w (OC,C; ldw) T: only C columns
 * are read, so a prefix of w's columns gives a prefix of the input gradient);
 * dw (OC,C; ldgw) fp32 += dout^T . inp (inp (B,C; ldi) T); db (OC) fp32 +=
 * column sums of dout (part: mr_pc_bias_partials(B, OC)). Each may be NULL. */
static inline mr_status mr_pc_linear_backward(const mr_pc_ops *o, const char *what, int dt, void *dinp, int ldd,
                                              float beta, float *dw, int ldgw, float *db, double *part,
                                              const void *dout, int ldo, const void *inp, int ldi, const void *w,
                                              int ldw, int B, int C, int OC, mr_error *err) {
    if (B <= 0) return MR_OK;
    if (dinp) MR_PC_TRY(mr_pc_gemm_rm(o, what, 0, 0, B, C, OC, dout, ldo, w, ldw, beta, dinp, ldd, dt, dt, err));
    if (dw) {
        int done = 0;
        if (db) {   /* cuda.epilogue = fused: db from the product's dout operand */
            mr_pc_epi e;
            memset(&e, 0, sizeof e);
            e.kind = MR_PCE_BGRAD_A;
            e.db = db;
            MR_PC_TRY(mr_pc_gemm_ep(o, what, 1, 0, OC, C, B, dout, ldo, inp, ldi, 1.0f, dw, ldgw, dt, MR_FP32, &e,
                                    &done, err));
            if (done) db = NULL;
        }
        if (!done)
            MR_PC_TRY(mr_pc_gemm_rm(o, what, 1, 0, OC, C, B, dout, ldo, inp, ldi, 1.0f, dw, ldgw, dt, MR_FP32, err));
    }
    if (db) MR_PC_TRY(mr_pc_bias_grad(o, dt, db, part, dout, B, OC, ldo, err));
    return MR_OK;
}

/* An input gradient through a ReLU: dinp (B,C; ldd) T = [beta dinp +]
 * dout (B,OC; ldo) T . w (OC,C; ldw) T, then zero where the forward output m
 * (B,C; ldm) T is not positive, and with db: db (C) fp32 += the column sums
 * of the result (part: mr_pc_bias_partials(B, C)). With cuda.epilogue =
 * fused and aux holding that forward's bits (*aux->ok), one product with
 * the ReLU mask and the bias gradient in its epilogue (DRELU_BGRAD). */
static inline mr_status mr_pc_input_grad_relu(const mr_pc_ops *o, const char *what, int dt, void *dinp, int ldd,
                                              float beta, const void *dout, int ldo, const void *w, int ldw, int B,
                                              int C, int OC, const void *m, int ldm, float *db, double *part,
                                              const mr_pc_aux *aux, mr_error *err) {
    if (B <= 0) return MR_OK;
    if (aux && aux->bits && aux->ok && *aux->ok) {
        mr_pc_epi e;
        memset(&e, 0, sizeof e);
        e.kind = MR_PCE_DRELU_BGRAD;
        e.db = db;
        e.aux = aux->bits;
        e.aux_ld = aux->ld;
        int done;
        MR_PC_TRY(mr_pc_gemm_ep(o, what, 0, 0, B, C, OC, dout, ldo, w, ldw, beta, dinp, ldd, dt, dt, &e, &done, err));
        if (done) return MR_OK;
    }
    MR_PC_TRY(mr_pc_gemm_rm(o, what, 0, 0, B, C, OC, dout, ldo, w, ldw, beta, dinp, ldd, dt, dt, err));
    mr_pc_job j;
    mr_pc_job_init(&j, MR_PCJ_RELU_BACK, dt, (long long)B * C);
    j.cols = C; j.ld = ldd; j.ld2 = ldm; j.m = m; j.y = dinp;
    MR_PC_TRY(o->job(o->ctx, &j, err));
    if (db) MR_PC_TRY(mr_pc_bias_grad(o, dt, db, part, dinp, B, C, ldd, err));
    return MR_OK;
}

#endif /* MR_POLICY_LAYERS_H */

/*
 * policy_params.c - the CPU network's parameters apart from its arithmetic:
 * their initial values (torch.nn.init.orthogonal_ from moonrl's counter
 * hash, LAPACK's QR) and the conversion from PyTorch's order
 * (mr_policy_permute_torch). policy_layout.c holds the layout, policy.c the
 * forward and backward.
 */
#include "policy.h"
#include "rng.h"
#include <math.h>
#include <omp.h>
#include <string.h>

/* LAPACK from OpenBLAS (Fortran symbols, 32-bit integers). */
extern void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau,
                    float *work, const int *lwork, int *info);
extern void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda,
                    const float *tau, float *work, const int *lwork, int *info);

#define QR_NB 64                 /* LAPACK work per column for the QR */

#define ALIGN_F 16               /* floats per 64 bytes */

static size_t round_f(size_t n) { return (n + ALIGN_F - 1) / ALIGN_F * ALIGN_F; }
static int imax(int a, int b) { return a > b ? a : b; }

/* Floats of QR scratch for an (rows, cols) weight: A (m,n), tau (n), work (n*NB). */
static size_t qr_floats(size_t rows, size_t cols) {
    size_t m = rows > cols ? rows : cols, n = rows > cols ? cols : rows;
    return round_f(m * n) + round_f(n) + round_f(n * QR_NB);
}

size_t mr_policy_init_floats(const mr_policy *p) {
    size_t qr = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const mr_tensor_info *t = &p->tensors[i];
        if (t->ndim >= 2) qr += qr_floats((size_t)t->shape[0], t->count / (size_t)t->shape[0]);
    }
    return qr;
}

/* ------------------------------------------------------------ init */

/* Standard normal from the counter hash: Box-Muller on two 53-bit uniforms
 * keyed by (seed, tensor, element). */
static float init_gauss(uint64_t seed, int tensor, size_t e) {
    uint32_t tick = (uint32_t)(e >> 31), i = (uint32_t)(e & 0x7fffffffu) * 2u;
    uint64_t h1 = mr_rng_u64(seed, (uint32_t)tensor, tick, MR_RNG_INIT, i);
    uint64_t h2 = mr_rng_u64(seed, (uint32_t)tensor, tick, MR_RNG_INIT, i + 1);
    double u1 = ((double)(h1 >> 11) + 1.0) * (1.0 / 9007199254740992.0);   /* (0,1] */
    double u2 = (double)(h2 >> 11) * (1.0 / 9007199254740992.0);           /* [0,1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* torch.nn.init.orthogonal_ of an (rows, cols) row-major weight: QR of a
 * Gaussian (max, min) matrix, columns of Q signed by diag(R), transposed when
 * rows < cols, times gain. scratch: qr_floats(rows, cols). */
static void orthogonal(float *w, int rows, int cols, float gain, uint64_t seed, int tensor,
                       float *scratch) {
    int m = imax(rows, cols), n = rows < cols ? rows : cols;
    float *A = scratch;                               /* column-major (m, n) */
    float *tau = A + round_f((size_t)m * n);
    float *work = tau + round_f((size_t)n);
    int lwork = n * QR_NB, info = 0;
    for (size_t e = 0; e < (size_t)m * n; e++) A[e] = init_gauss(seed, tensor, e);
    sgeqrf_(&m, &n, A, &m, tau, work, &lwork, &info);
    /* signs of diag(R) (times gain) before sorgqr overwrites R: parked in w,
     * which has rows*cols >= n floats and is written only at the end */
    for (int j = 0; j < n; j++) w[j] = A[j + (size_t)j * m] < 0.0f ? -gain : gain;
    sorgqr_(&m, &n, &n, A, &m, tau, work, &lwork, &info);
    for (int j = 0; j < n; j++) tau[j] = w[j];       /* tau is free after sorgqr */
    if (rows >= cols) {   /* Q is (rows, cols) column-major */
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                w[(size_t)r * cols + c] = tau[c] * A[r + (size_t)c * m];
    } else {              /* W = Q^T: Q (cols, rows) column-major is W row-major */
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                w[(size_t)r * cols + c] = tau[r] * A[c + (size_t)r * m];
    }
}

void mr_policy_init(mr_policy *p, uint64_t seed) {
    memset(p->params, 0, sizeof(float) * p->n_params);   /* biases 0 */
    int idx[MR_POLICY_MAX_TENSORS], n = 0;
    size_t off[MR_POLICY_MAX_TENSORS], o = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const mr_tensor_info *t = &p->tensors[i];
        if (t->ndim < 2) continue;
        idx[n] = i;
        off[n++] = o;
        o += qr_floats((size_t)t->shape[0], t->count / (size_t)t->shape[0]);
    }
    /* One tensor per task: inside the parallel region each QR is
     * single-threaded, so the bits do not depend on the thread count. */
    #pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < n; k++) {
        const mr_tensor_info *t = &p->tensors[idx[k]];
        float gain = sqrtf(2.0f);
        if (strcmp(t->name, "actor.w") == 0) gain = 0.01f;
        if (strcmp(t->name, "value.w") == 0) gain = 1.0f;
        int rows = t->shape[0], cols = (int)(t->count / (size_t)rows);
        orthogonal(p->params + t->offset, rows, cols, gain, seed, idx[k], p->work + off[k]);
    }
}

/* ------------------------------------------------------------ torch order */

void mr_policy_permute_torch(const mr_policy *p, const float *src, float *dst) {
    memcpy(dst, src, sizeof(float) * p->n_params);
    int VV = p->VV;
    for (int l = 0; l < p->num_conv; l++) {   /* torch (OC,C,3,3) -> ours (OC,3,3,C) */
        int OC = p->ch[l + 1], C = p->ch[l];
        const float *s = src + p->conv_w[l];
        float *d = dst + p->conv_w[l];
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++)
                for (int k = 0; k < 9; k++)
                    d[((size_t)o * 9 + k) * C + c] = s[((size_t)o * C + c) * 9 + k];
    }
    {   /* fc.w: torch column c*VV + s -> ours s*C + c */
        int C = p->ch[p->num_conv];
        const float *s = src + p->fc_w;
        float *d = dst + p->fc_w;
        for (int o = 0; o < p->hidden; o++)
            for (int c = 0; c < C; c++)
                for (int q = 0; q < VV; q++)
                    d[(size_t)o * p->flat + (size_t)q * C + c] = s[(size_t)o * p->flat + (size_t)c * VV + q];
    }
    {   /* critic.w: the view columns, torch ch*VV + s -> ours s*C + ch */
        int base = p->hidden + MR_POLICY_EXTRA, C = p->ch[0];
        const float *s = src + p->critic_w;
        float *d = dst + p->critic_w;
        for (int o = 0; o < p->critic_hidden; o++)
            for (int c = 0; c < C; c++)
                for (int q = 0; q < VV; q++)
                    d[(size_t)o * p->cin_dim + base + q * C + c] =
                        s[(size_t)o * p->cin_dim + base + c * VV + q];
    }
}

/*
 * gemm_lt.cu - cuBLASLt products with fused epilogues (gemm_lt.h).
 *
 * Loaded with dlopen on first use, never linked (as cuBLAS, policy.cu).
 * Descriptors are made per call (host work of a few microseconds, and the
 * trainer replays the update as CUDA graphs); the algorithm is not: the
 * first call of a shape asks cublasLtMatmulAlgoGetHeuristic for the best
 * algorithm within the workspace and keeps it (or that there is none) in a
 * small table, so later calls, a graph capture included, ask nothing.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include "dynlib.h"   /* dlopen: the library loaded at run time */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "gemm_lt.h"

#define MR_STR2(x) #x
#define MR_STR(x) MR_STR2(x)
#define MR_CUBLASLT_SONAME "libcublasLt.so." MR_STR(CUBLAS_VER_MAJOR)

#define MR_LT_FUNCS(X)                                                                                      \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtMatmulDescCreate)                  \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)            \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)     \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)             \
    X(cublasLtGetStatusName)

static struct {
#define MR_LT_FIELD(f) decltype(&::f) f;
    MR_LT_FUNCS(MR_LT_FIELD)
#undef MR_LT_FIELD
    int ok;
    size_t version;
    char why[320], desc[360];
} ltl;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

static void lt_load(void) {
    void *h = mr_dynlib_open(MR_CUBLASLT_SONAME, "cuBLASLt", ltl.why, sizeof ltl.why);
#define MR_LT_NAME(f) #f,
#define MR_LT_SLOT(f) (void **)&ltl.f,
    static const char *const names[] = {MR_LT_FUNCS(MR_LT_NAME)};
    void **const slots[] = {MR_LT_FUNCS(MR_LT_SLOT)};
#undef MR_LT_NAME
#undef MR_LT_SLOT
    if (!h || !mr_dynlib_symbols(h, names, slots, (int)(sizeof names / sizeof *names), MR_CUBLASLT_SONAME,
                                 "cuBLAS", ltl.why, sizeof ltl.why)) {
        snprintf(ltl.desc, sizeof ltl.desc, "not loaded: %s", ltl.why);
        return;
    }
    ltl.version = ltl.cublasLtGetVersion();
    snprintf(ltl.desc, sizeof ltl.desc, "cuBLASLt %zu (%s)", ltl.version, MR_CUBLASLT_SONAME);
    ltl.ok = 1;
}

extern "C" int mr_lt_available(const char **why) {
    pthread_once(&lt_once, lt_load);
    if (why) *why = ltl.ok ? "" : ltl.why;
    return ltl.ok;
}

extern "C" const char *mr_lt_describe(void) {
    mr_lt_available(NULL);
    return ltl.desc;
}

/* ---------------------------------------------------------------- cache */

/* Everything the heuristics' answer depends on. Plain ints, zeroed before
 * filling, so memcmp compares keys. */
typedef struct lt_key {
    int epi, transa, transb, m, n, k, lda, ldb, ldc, ab_dt, c_dt, bias_dt, beta0;
    long long aux_ld;
    int align[6];   /* A, B, C (= D), bias, aux: alignment in bytes, up to 256 */
} lt_key;

typedef struct lt_entry {
    lt_key key;
    int found;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

#define MR_LT_CACHE 128

struct mr_lt {
    cublasLtHandle_t h;
    lt_entry cache[MR_LT_CACHE];
    int n, next;              /* entries used; the next to replace once full (round robin) */
};

extern "C" mr_status mr_lt_create(mr_lt **out, mr_error *err) {
    *out = NULL;
    if (!mr_lt_available(NULL)) return mr_fail(err, MR_ERR_BACKEND, "cuda.epilogue = fused needs %s", ltl.why);
    mr_lt *lt = (mr_lt *)calloc(1, sizeof *lt);
    if (!lt) return mr_fail(err, MR_ERR_NOMEM, "out of host memory creating the cuBLASLt handle");
    const cublasStatus_t s = ltl.cublasLtCreate(&lt->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return mr_fail(err, MR_ERR_BACKEND, "cublasLtCreate: %s (is a GPU present and the driver loaded?)",
                       ltl.cublasLtGetStatusName(s));
    }
    *out = lt;
    mr_ok(err);
    return MR_OK;
}

extern "C" void mr_lt_destroy(mr_lt *lt) {
    if (!lt) return;
    if (lt->h) ltl.cublasLtDestroy(lt->h);
    free(lt);
}

static int align_of(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    int k = 1;
    while (k < 256 && !(a & (uintptr_t)k)) k <<= 1;
    return a ? k : 256;
}

static cudaDataType_t lt_type(int dt) {
    return dt == MR_BF16 ? CUDA_R_16BF : dt == MR_FP16 ? CUDA_R_16F : CUDA_R_32F;
}

/* ---------------------------------------------------------------- the product */

typedef struct lt_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} lt_descs;

static void descs_free(lt_descs *d) {
    if (d->pref) ltl.cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->c) ltl.cublasLtMatrixLayoutDestroy(d->c);
    if (d->b) ltl.cublasLtMatrixLayoutDestroy(d->b);
    if (d->a) ltl.cublasLtMatrixLayoutDestroy(d->a);
    if (d->op) ltl.cublasLtMatmulDescDestroy(d->op);
}

static mr_status lt_status(cublasStatus_t s, const char *what, const mr_pc_gemm *g, mr_error *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return MR_OK;
    return mr_fail(err, s == CUBLAS_STATUS_ALLOC_FAILED ? MR_ERR_NOMEM : MR_ERR_BACKEND,
                   "cuBLASLt error in %s of the %s product: %s", what, g->what ? g->what : "policy",
                   ltl.cublasLtGetStatusName(s));
}

extern "C" mr_status mr_lt_matmul(mr_lt *lt, const mr_pc_gemm *g, const mr_pc_epi *e, const void *vec, int bias_dt,
                                  void *ws, size_t ws_bytes, void *stream, int *done, mr_error *err) {
    *done = 0;
    if (!lt || !g || !e) return mr_fail(err, MR_ERR_ARG, "mr_lt_matmul: the handle, product or epilogue is missing");
    mr_pc_cm c;
    mr_pc_gemm_cm(g, &c);
    cublasLtEpilogue_t epi;
    const void *bias = NULL;
    switch (e->kind) {
    case MR_PCE_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; bias = vec; break;
    case MR_PCE_RELU_BIAS: epi = CUBLASLT_EPILOGUE_RELU_BIAS; bias = vec; break;
    case MR_PCE_RELU_AUX_BIAS: epi = CUBLASLT_EPILOGUE_RELU_AUX_BIAS; bias = vec; break;
    case MR_PCE_DRELU_BGRAD:
        epi = e->db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
        bias = e->db ? vec : NULL;
        break;
    case MR_PCE_BGRAD_A:   /* the row-major A is cuBLASLt's B (mr_pc_gemm_cm swaps the operands) */
        epi = CUBLASLT_EPILOGUE_BGRADB;
        bias = vec;
        break;
    default: return mr_fail(err, MR_ERR_ARG, "mr_lt_matmul: epilogue kind %d", e->kind);
    }
    const int has_aux = e->kind == MR_PCE_RELU_AUX_BIAS || e->kind == MR_PCE_DRELU_BGRAD;
    if ((e->kind <= MR_PCE_RELU_AUX_BIAS || e->db) && !bias)
        return mr_fail(err, MR_ERR_ARG, "mr_lt_matmul: the %s product's bias or bias-gradient output is missing",
                       g->what ? g->what : "policy");
    if (has_aux && (!e->aux || e->aux_ld < c.m || e->aux_ld % 128))
        return mr_fail(err, MR_ERR_ARG, "mr_lt_matmul: the %s product's ReLU bits: ld %lld bits, needed a multiple "
                       "of 128 of at least %d", g->what ? g->what : "policy", e->aux_ld, c.m);
    lt_key key;
    memset(&key, 0, sizeof key);
    key.epi = (int)epi; key.transa = c.transa; key.transb = c.transb; key.m = c.m; key.n = c.n; key.k = c.k;
    key.lda = c.lda; key.ldb = c.ldb; key.ldc = c.ldc; key.ab_dt = g->ab_dt; key.c_dt = g->c_dt;
    key.bias_dt = bias ? bias_dt : -1; key.beta0 = g->beta == 0.0f; key.aux_ld = has_aux ? e->aux_ld : 0;
    key.align[0] = align_of(c.A); key.align[1] = align_of(c.B); key.align[2] = align_of(c.C);
    key.align[3] = bias ? align_of(bias) : 0; key.align[4] = has_aux ? align_of(e->aux) : 0;
    lt_entry *hit = NULL;
    for (int i = 0; i < lt->n && !hit; i++)
        if (!memcmp(&lt->cache[i].key, &key, sizeof key)) hit = &lt->cache[i];
    if (hit && !hit->found) return MR_OK;

    lt_descs d;
    memset(&d, 0, sizeof d);
    const cudaDataType_t ab = lt_type(g->ab_dt), ct = lt_type(g->c_dt), bt = lt_type(bias_dt);
    const cublasOperation_t ta = c.transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ra = c.transa ? c.k : c.m, ca = c.transa ? c.m : c.k, rb = c.transb ? c.n : c.k,
              cb = c.transb ? c.k : c.n;
    mr_status st = lt_status(ltl.cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "the descriptor", g,
                             err);
#define LT_SET(attr, val)                                                                                \
    do {                                                                                                 \
        if (st == MR_OK)                                                                                 \
            st = lt_status(ltl.cublasLtMatmulDescSetAttribute(d.op, attr, &(val), sizeof(val)), #attr, g, err); \
    } while (0)
    LT_SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
    LT_SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
    LT_SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (bias) {
        LT_SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
        const int32_t bti = (int32_t)bt;
        LT_SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bti);
    }
    if (has_aux) {
        const void *aux = e->aux;
        const int64_t ld = (int64_t)e->aux_ld;
        LT_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
        LT_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld);
    }
#undef LT_SET
    if (st == MR_OK) st = lt_status(ltl.cublasLtMatrixLayoutCreate(&d.a, ab, ra, ca, c.lda), "layout A", g, err);
    if (st == MR_OK) st = lt_status(ltl.cublasLtMatrixLayoutCreate(&d.b, ab, rb, cb, c.ldb), "layout B", g, err);
    if (st == MR_OK) st = lt_status(ltl.cublasLtMatrixLayoutCreate(&d.c, ct, c.m, c.n, c.ldc), "layout C", g, err);
    if (st == MR_OK && !hit) {   /* the first product of this key: ask the heuristics once */
        st = lt_status(ltl.cublasLtMatmulPreferenceCreate(&d.pref), "the preference", g, err);
        const uint64_t wsb = ws_bytes;
        const uint32_t al[3] = {(uint32_t)key.align[0], (uint32_t)key.align[1], (uint32_t)key.align[2]};
        if (st == MR_OK)
            st = lt_status(ltl.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                    &wsb, sizeof wsb), "the workspace", g, err);
        if (st == MR_OK)
            st = lt_status(ltl.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                    &al[0], sizeof al[0]), "alignment A", g, err);
        if (st == MR_OK)
            st = lt_status(ltl.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                    &al[1], sizeof al[1]), "alignment B", g, err);
        if (st == MR_OK)
            st = lt_status(ltl.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                    &al[2], sizeof al[2]), "alignment C", g, err);
        if (st == MR_OK)
            st = lt_status(ltl.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                    &al[2], sizeof al[2]), "alignment D", g, err);
        cublasLtMatmulHeuristicResult_t r;
        memset(&r, 0, sizeof r);
        int got = 0;
        if (st == MR_OK) {
            const cublasStatus_t s =
                ltl.cublasLtMatmulAlgoGetHeuristic(lt->h, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &r, &got);
            /* NOT_SUPPORTED / INVALID_VALUE: this epilogue, type or layout is not
             * cuBLASLt's; the separate path runs it (counted, said by the caller) */
            if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED && s != CUBLAS_STATUS_INVALID_VALUE)
                st = lt_status(s, "cublasLtMatmulAlgoGetHeuristic", g, err);
            if (s != CUBLAS_STATUS_SUCCESS || r.state != CUBLAS_STATUS_SUCCESS) got = 0;
        }
        if (st == MR_OK) {
            const int slot = lt->n < MR_LT_CACHE ? lt->n++ : lt->next++ % MR_LT_CACHE;
            hit = &lt->cache[slot];
            hit->key = key;
            hit->found = got > 0;
            if (got > 0) hit->algo = r.algo;
        }
    }
    if (st == MR_OK && hit && !hit->found) {
        descs_free(&d);
        return MR_OK;
    }
    if (st == MR_OK) {
        const float alpha = 1.0f, beta = g->beta;
        st = lt_status(ltl.cublasLtMatmul(lt->h, d.op, &alpha, c.A, d.a, c.B, d.b, &beta, c.C, d.c, c.C, d.c,
                                          &hit->algo, ws, ws_bytes, (cudaStream_t)stream),
                       "cublasLtMatmul", g, err);
        if (st == MR_OK) *done = 1;
    }
    descs_free(&d);
    return st;
}

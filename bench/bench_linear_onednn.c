/*
 * bench_linear_onednn.c - the candidate for the fully connected layers in
 * bf16, measured before it is built: OpenBLAS sgemm (fp32, what nn.c's
 * mr_linear_* run) against oneDNN 2.6's matmul with bf16 operands and an
 * fp32 result (fp32 accumulation), at the shapes of the reference net's fc
 * (7744 -> 512: 36% of the network's multiply-adds):
 *   forward     out (256, 512)  = x (256, 7744) . w^T          (a block of 256)
 *   input grad  dx (256, 7744)  = dout (256, 512) . w
 *   weight grad dw (512, 7744)  = dout^T (512, B) . x (B, 7744)  (B = 4096)
 * The fp32 -> bf16 conversion of the operands that change every call (x,
 * dout; the weights are converted once per pass) is inside the timed loop.
 * Best of a few calls.
 *
 *   OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=Cooperlake build/bench_linear_onednn
 *
 * What it is not: a test or part of the engine (the network's fc stays
 * sgemm until a bf16 path with the engine's guarantees is built).
 */
#include <cblas.h>
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { if ((x) != dnnl_success) { printf("dnnl error at %s:%d\n", __FILE__, __LINE__); exit(1); } } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static float *rnd(size_t n) {
    float *p = malloc(n * 4);
    for (size_t i = 0; i < n; i++) p[i] = (float)rand() / RAND_MAX - 0.5f;
    return p;
}
static void to_bf16(uint16_t *d, const float *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &s[i], 4);
        d[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

/* oneDNN's matmul C (M,N) = A . B with operands of type dt (A and B as they
 * lie: a16/b16 for bf16), an fp32 result: the best time of reps calls after
 * the first (which JITs); *impl its kernel. With A32 given (bf16), A's
 * conversion from A32 into a16 is inside the timed call, as the engine
 * converts its activations per call. */
static double matmul(dnnl_data_type_t dt, int M, int N, int K, int ta, int tb, const void *A, const void *B,
                     const float *A32, uint16_t *a16, float *C, int reps, dnnl_engine_t e, dnnl_stream_t s,
                     const char **impl) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t a2 = {M, K}, b2 = {K, N}, c2 = {M, N};
    CK(dnnl_memory_desc_init_by_tag(&ad, 2, a2, dt, ta ? dnnl_ba : dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&bd, 2, b2, dt, tb ? dnnl_ba : dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&cd, 2, c2, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    CK(dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd));
    CK(dnnl_primitive_desc_create(&pd, &md, NULL, e, NULL));
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
    CK(dnnl_primitive_create(&p, pd));
    dnnl_memory_t ma, mb, mc;
    CK(dnnl_memory_create(&ma, &ad, e, (void *)A));
    CK(dnnl_memory_create(&mb, &bd, e, (void *)B));
    CK(dnnl_memory_create(&mc, &cd, e, C));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        if (A32) to_bf16(a16, A32, (size_t)M * K);
        CK(dnnl_primitive_execute(p, s, 3, args));
        CK(dnnl_stream_wait(s));
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    return best;
}

/* C (M,N) = A (M,K) . B (K,N); A row-major ("ab") or transposed in memory
 * (ta: stored (K,M)), B likewise (tb: stored (N,K)). */
static void one(const char *what, int M, int N, int K, int ta, int tb, dnnl_engine_t e, dnnl_stream_t s) {
    const int reps = 5;
    float *A = rnd((size_t)M * K), *B = rnd((size_t)K * N), *C = rnd((size_t)M * N);
    double best_s = 1e30;
    const char *impl32 = "?";
    const double best_f = matmul(dnnl_f32, M, N, K, ta, tb, A, B, NULL, NULL, C, reps, e, s, &impl32);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                    ta ? M : K, B, tb ? K : N, 0.0f, C, N);
        double t = now() - t0;
        if (t < best_s) best_s = t;
    }
    uint16_t *A16 = malloc((size_t)M * K * 2), *B16 = malloc((size_t)K * N * 2);
    to_bf16(B16, B, (size_t)K * N);   /* the weights (or the kept input): converted once */
    const char *impl = "?";
    const double best_b = matmul(dnnl_bf16, M, N, K, ta, tb, A16, B16, A, A16, C, reps, e, s, &impl);
    double gf = 2.0 * M * N * K / 1e9;
    printf("%-12s M=%5d N=%5d K=%5d  sgemm %7.2f ms %6.1f GFLOP/s | oneDNN fp32 %-18s %7.2f ms %6.1f GFLOP/s "
           "%.2fx | oneDNN bf16 %-24s %7.2f ms %6.1f GFLOP/s | %.2fx\n",
           what, M, N, K, best_s * 1e3, gf / best_s, impl32, best_f * 1e3, gf / best_f, best_s / best_f, impl,
           best_b * 1e3, gf / best_b, best_s / best_b);
    free(A); free(B); free(C); free(A16); free(B16);
}

int main(void) {
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) { if (!fgets(load, sizeof load, la)) load[0] = 0; fclose(la); }
    printf("load average before: %s", load);
    dnnl_engine_t e;
    dnnl_stream_t s;
    CK(dnnl_engine_create(&e, dnnl_cpu, 0));
    CK(dnnl_stream_create(&s, e, dnnl_stream_default_flags));
    one("fc forward", 256, 512, 7744, 0, 1, e, s);   /* x . w^T, w stored (512, 7744) */
    one("fc dx", 256, 7744, 512, 0, 0, e, s);        /* dout . w */
    one("fc dw", 512, 7744, 4096, 1, 0, e, s);       /* dout^T . x, dout stored (B, 512) */
    dnnl_stream_destroy(s);
    dnnl_engine_destroy(e);
    return 0;
}

/*
 * bench_policy.c - speed of the CPU actor-critic (policy.c): act() for the
 * rollout and forward + backward for the update, for the reference net and a
 * small CPU net, as achieved GFLOP/s and as a fraction of a large square
 * sgemm measured on the same threads.
 *
 *   bench_policy [--quick] [--chunk N] [--train-batch N] [--reps N] [--conv onednn|im2col]
 *                [--precision fp32|bf16]
 *
 * --conv picks the convolutions (cpu.conv; default onednn = auto), so the
 * two can be timed alternately with one binary; --precision bf16 runs the
 * oneDNN layers in bf16 (conv_dnnl.h; refused on a CPU without it).
 *
 * FLOPs: 2 per multiply-add of every conv and linear layer; forward + backward
 * counts 3x forward (backward = 2x forward, as usual, although the first
 * conv's input gradient is not computed). The share of time inside sgemm is
 * printed when nn.c was compiled with -DMR_NN_PROFILE, e.g.
 *   gcc -O3 -march=x86-64-v3 -fopenmp -DMR_NN_PROFILE -Isrc/engine \
 *     -I/usr/include/x86_64-linux-gnu/openblas-openmp bench/bench_policy.c \
 *     src/engine/nn.c src/engine/policy.c src/engine/arena.c \
 *     -L/usr/lib/x86_64-linux-gnu/openblas-openmp \
 *     -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lm
 * Threads: OMP_NUM_THREADS (OpenBLAS is the OpenMP build).
 */
#include "policy.h"
#include "nn.h"
#include "conv_dnnl.h"
#include "arena.h"
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *openblas_get_corename(void);

static double now(void) { return omp_get_wtime(); }
/* CPU seconds of the whole process (all threads): robust to other work on
 * the cores, which stretches wall time but not the CPU time we use. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* multiply-adds per sample, forward */
static double macs_per_sample(const mr_policy *p) {
    double m = 0;
    for (int l = 0; l < p->num_conv; l++) m += (double)p->VV * p->ch[l + 1] * 9 * p->ch[l];
    m += (double)p->flat * p->hidden + (double)p->hidden * MR_MAX_ACTIONS;
    m += (double)p->cin_dim * p->critic_hidden + p->critic_hidden;
    return m;
}

/* a timing: wall and CPU seconds, sgemm seconds (< 0: not measured) */
typedef struct { double wall, cpu, sg; } timing;
static timing t_start(void) { mr_nn_profile_reset(); return (timing){now(), cpu_now(), 0}; }
static timing t_stop(timing t, int reps) {
    double sg = mr_nn_sgemm_seconds();
    return (timing){(now() - t.wall) / reps, (cpu_now() - t.cpu) / reps, sg >= 0 ? sg / reps : -1};
}

/* sgemm rate: wall GFLOP/s on all threads, and GFLOP per CPU-second */
static double peak_wall, peak_cpu;
static void square_sgemm(int n) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    int reps = 3;
    timing t = t_start();
    for (int r = 0; r < reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    t = t_stop(t, reps);
    free(a); free(b); free(c);
    peak_wall = 2.0 * n * (double)n * n / t.wall / 1e9;
    peak_cpu = 2.0 * n * (double)n * n / t.cpu / 1e9;
}

static void report(const char *what, int B, timing t, double flop) {
    double gw = flop / t.wall / 1e9, gc = flop / t.cpu / 1e9;
    printf("  %-17s B=%-6d %9.2f ms %8.0f samples/s %6.1f GFLOP/s = %3.0f%% of sgemm | "
           "%5.1f GFLOP/cpu-s = %3.0f%%", what, B, t.wall * 1e3, B / t.wall, gw,
           100 * gw / peak_wall, gc, 100 * gc / peak_cpu);
    if (t.sg >= 0) printf(" | sgemm %3.0f%% of CPU", 100 * t.sg / t.cpu);
    printf("\n");
}

static void bench_net(const char *name, const mr_policy_config *cfg, int chunk, int train_B,
                      int reps, int conv, int bf16) {
    const mr_policy_options o = {chunk, conv, MR_CPU_ACTIVATIONS_STORE, bf16, {0}, 0};
    const int V = 11, VV = V * V;
    mr_arena a = {0};
    mr_policy p;
    mr_policy_layout_with(&p, cfg, V, train_B, &o, &a);
    size_t bytes = a.size;
    if (mr_arena_commit(&a) != 0) { printf("%s: cannot allocate %zu bytes\n", name, bytes); return; }
    mr_policy_layout_with(&p, cfg, V, train_B, &o, &a);
    mr_policy_init(&p, 1);

    size_t act_floats = 0;
    for (int l = 0; l < p.num_conv; l++) act_floats += (size_t)VV * p.ch[l + 1];
    act_floats += (size_t)p.hidden + p.cin_dim + p.critic_hidden;
    size_t kept = act_floats * 4 + VV;                                       /* forward keeps */
    size_t scratch = ((size_t)p.hidden + p.cin_dim + p.critic_hidden) * 4;   /* backward */
    double macs = macs_per_sample(&p);
    printf("%s: %zu params (policy %zu), %.2f M MAC/sample, chunk %d, block %d, convs %s%s\n", name,
           p.n_params, p.n_policy, macs / 1e6, p.chunk, p.block,
           p.conv == MR_CPU_CONV_IM2COL ? "im2col + sgemm" : p.bf16 ? "codes + oneDNN bf16" : p.dnnl ? "codes + oneDNN" : "codes + im2col",
           p.conv_note);
    if (p.dnnl)
        for (int l = 1; l < p.num_conv; l++) printf("  conv%d oneDNN: %s\n", l, mr_conv_dnnl_impl(p.dnnl, l));
    printf("  memory: %zu B/sample kept by forward + %zu B/sample backward scratch; "
           "arena %.1f MiB for max_batch %d\n", kept, scratch, bytes / 1048576.0, train_B);

    int maxB = train_B > 4096 ? train_B : 4096;
    uint8_t *codes = malloc((size_t)maxB * VV);
    float *extra = malloc(sizeof(float) * 2 * maxB),
          *logits = malloc(sizeof(float) * MR_MAX_ACTIONS * maxB),
          *value = malloc(sizeof(float) * maxB),
          *dl = malloc(sizeof(float) * MR_MAX_ACTIONS * maxB), *dv = malloc(sizeof(float) * maxB);
    unsigned s = 12345;
    for (size_t i = 0; i < (size_t)maxB * VV; i++) { s = s * 1103515245u + 12345u; codes[i] = (s >> 16) % 3; }
    for (int i = 0; i < 2 * maxB; i++) extra[i] = 0.1f * (i % 7) - 0.3f;
    for (int i = 0; i < MR_MAX_ACTIONS * maxB; i++) dl[i] = 1e-4f * ((i % 13) - 6);
    for (int i = 0; i < maxB; i++) dv[i] = 1e-4f * ((i % 11) - 5);

    int act_B[2] = {192, 4096};
    for (int k = 0; k < 2; k++) {
        int B = act_B[k], r = B <= 192 ? 50 * reps : 3 * reps;
        mr_policy_act(&p, codes, extra, B, 0, logits, value);   /* warm */
        timing t = t_start();
        for (int i = 0; i < r; i++) mr_policy_act(&p, codes, extra, B, 0, logits, value);
        report("act", B, t_stop(t, r), 2 * macs * B);
    }
    {
        int B = train_B, wb = train_B < 1024 ? train_B : 1024;
        mr_policy_forward(&p, codes, extra, wb, 0, logits, value);   /* warm */
        mr_policy_zero_grad(&p);
        mr_policy_backward(&p, dl, dv, wb);
        timing tf = {0, 0, 0}, tb = {0, 0, 0};
        for (int i = 0; i < reps; i++) {
            timing t = t_start();
            mr_policy_forward(&p, codes, extra, B, 0, logits, value);
            t = t_stop(t, 1);
            tf.wall += t.wall / reps; tf.cpu += t.cpu / reps; tf.sg += t.sg / reps;
            t = t_start();
            mr_policy_zero_grad(&p);
            mr_policy_backward(&p, dl, dv, B);
            t = t_stop(t, 1);
            tb.wall += t.wall / reps; tb.cpu += t.cpu / reps; tb.sg += t.sg / reps;
        }
        timing all = {tf.wall + tb.wall, tf.cpu + tb.cpu, tf.sg + tb.sg};
        report("forward+backward", B, all, 6 * macs * B);
        report("  forward", B, tf, 2 * macs * B);
        report("  backward", B, tb, 4 * macs * B);
    }
    free(codes); free(extra); free(logits); free(value); free(dl); free(dv);
    mr_policy_free(&p);
    mr_arena_release(&a);
}

int main(int argc, char **argv) {
    int chunk = 32, train_B = 24576, reps = 2, conv = MR_CPU_CONV_AUTO, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { train_B = 4096; reps = 1; }
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--train-batch") && i + 1 < argc) train_B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *v = argv[++i];
            bf16 = !strcmp(v, "bf16") ? 1 : !strcmp(v, "fp32") ? 0 : -1;
            if (bf16 < 0) { fprintf(stderr, "--precision: fp32 or bf16\n"); return 2; }
        }
        else if (!strcmp(argv[i], "--conv") && i + 1 < argc) {
            const char *c = argv[++i];
            conv = !strcmp(c, "im2col") ? MR_CPU_CONV_IM2COL : !strcmp(c, "onednn") ? MR_CPU_CONV_ONEDNN : -1;
            if (conv < 0) { fprintf(stderr, "--conv: onednn or im2col\n"); return 2; }
        } else {
            fprintf(stderr, "usage: %s [--quick] [--chunk N] [--train-batch N] [--reps N] [--conv onednn|im2col] [--precision fp32|bf16]\n", argv[0]);
            return 2;
        }
    }
    if (chunk < 1 || train_B < 1 || reps < 1) { fprintf(stderr, "arguments must be >= 1\n"); return 2; }
    int threads = omp_get_max_threads();
    FILE *la = fopen("/proc/loadavg", "r");   /* other work on the cores skews every number */
    char load[64] = "?";
    if (la) { if (!fgets(load, sizeof load, la)) load[0] = 0; fclose(la); }
    printf("load average before: %s", load);
    square_sgemm(2048);
    printf("threads %d, OpenBLAS core %s, sgemm 2048^3 (OpenBLAS threads): %.1f GFLOP/s, "
           "%.1f GFLOP/cpu-s%s\n", threads, openblas_get_corename(), peak_wall, peak_cpu,
           mr_nn_sgemm_seconds() >= 0 ? "" : " (build with -DMR_NN_PROFILE for the sgemm share)");
    printf("columns: wall time and rate, as a fraction of the sgemm rate; CPU-time rate "
           "(all threads), as a fraction of sgemm's; CPU time inside sgemm calls\n");
    mr_policy_config ref = {0};
    ref.num_conv = 3;
    ref.conv_channels[0] = 32; ref.conv_channels[1] = 64; ref.conv_channels[2] = 64;
    ref.hidden = 512; ref.critic_hidden = 512; ref.popart = 1;
    bench_net("reference net (conv 32,64,64, hidden 512)", &ref, chunk, train_B, reps, conv, bf16);

    mr_policy_config small = {0};
    small.num_conv = 2;
    small.conv_channels[0] = 16; small.conv_channels[1] = 32;
    small.hidden = 128; small.critic_hidden = 128; small.popart = 1;
    bench_net("small net (conv 16,32, hidden 128)", &small, chunk, train_B, reps, conv, bf16);
    return 0;
}

/*
 * bench_train.c - end-to-end training throughput of the engine, with the time
 * split into rollout, GAE and update, and the update's achieved GFLOP/s as a
 * fraction of this machine's measured sgemm rate (OpenBLAS, large square
 * matrices, same thread count) and of the CPU's arithmetic peak for the
 * precision used (mr_cpu_peak_gflops: FMAs for fp32, AMX or AVX512-BF16 dot products
 * for bf16), all measured in the same run.
 *
 *   bench_train [--net ref|small] [--conv 32,64,64] [--hidden 512] [--critic 512]
 *               [--envs 192] [--rollout 128] [--epochs 4] [--updates 3]
 *               [--threads 0] [--cpu-conv auto|onednn|im2col|winograd]
 *               [--cpu-activations auto|store|recompute] [--precision fp32|bf16] [--json]
 *
 * --cpu-conv is the config's cpu.conv (the convolutions' implementation) and
 * --cpu-activations its cpu.activations (what the training forward keeps),
 * so the choices can be timed alternately with one binary. --precision bf16
 * runs the oneDNN convolutions in bf16 where the CPU has it (else refused).
 *
 * Throughput follows ENV_SPEC: agent-steps per second of wall clock over whole
 * updates, after one discarded warm-up update; the median over timed updates.
 */
#include "moonrl.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Best of a few runs of an n^3 sgemm, GFLOP/s. */
static double sgemm_rate(int n) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.2f; }
    double best = 0;
    for (int r = 0; r < 4; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = now_s() - t0;
        double g = 2.0 * n * (double)n * n / dt / 1e9;
        if (g > best) best = g;
    }
    free(a); free(b); free(c);
    return best;
}

/* Forward FLOPs per sample of the policy (2 per multiply-add). conv: the
 * convolutions as cpu.conv computes them (mr_cpu_conv_macs: Winograd's are
 * fewer); MR_CPU_CONV_ONEDNN gives the direct count every GFLOP/s here uses. */
static double forward_flops(const mr_config *c, int conv) {
    int V = 2 * c->env.view_range + 1, VV = V * V;
    double macs = 0;
    int cin = 2;
    for (int i = 0; i < c->policy.num_conv; i++) {
        macs += i == 0 ? (double)VV * c->policy.conv_channels[i] * 9.0 * cin
                       : mr_cpu_conv_macs(conv, V, V, cin, c->policy.conv_channels[i]);
        cin = c->policy.conv_channels[i];
    }
    macs += (double)VV * cin * c->policy.hidden;                      /* flatten -> hidden */
    macs += (double)c->policy.hidden * 8;                             /* actor */
    macs += (double)(c->policy.hidden + 2 + 2 * VV) * c->policy.critic_hidden + c->policy.critic_hidden;
    return 2.0 * macs;
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        const char *comma = strchr(s, ',');
        if (!comma) break;
        s = comma + 1;
    }
    return n;
}

int main(int argc, char **argv) {
    mr_config c;
    mr_config_default(&c);
    c.device = MR_DEVICE_CPU;
    int updates = 3, json = 0;
    const char *net = "ref";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!v) { fprintf(stderr, "bench_train: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--net")) {
            net = v;
            if (!strcmp(v, "small")) {
                c.policy.num_conv = 2;
                c.policy.conv_channels[0] = 16;
                c.policy.conv_channels[1] = 32;
                c.policy.hidden = 128;
                c.policy.critic_hidden = 128;
            } else if (strcmp(v, "ref")) { fprintf(stderr, "bench_train: --net accepts ref or small\n"); return 2; }
        } else if (!strcmp(a, "--conv")) c.policy.num_conv = parse_list(v, c.policy.conv_channels, MR_MAX_CONV);
        else if (!strcmp(a, "--hidden")) c.policy.hidden = atoi(v);
        else if (!strcmp(a, "--critic")) c.policy.critic_hidden = atoi(v);
        else if (!strcmp(a, "--envs")) c.env.num_envs = atoi(v);
        else if (!strcmp(a, "--rollout")) c.ppo.rollout_steps = atoi(v);
        else if (!strcmp(a, "--epochs")) c.ppo.epochs = atoi(v);
        else if (!strcmp(a, "--minibatches")) c.ppo.minibatches = atoi(v);
        else if (!strcmp(a, "--updates")) updates = atoi(v);
        else if (!strcmp(a, "--threads")) c.threads = atoi(v);
        else if (!strcmp(a, "--cpu-conv")) {
            c.cpu.conv = !strcmp(v, "auto") ? MR_CPU_CONV_AUTO : !strcmp(v, "onednn") ? MR_CPU_CONV_ONEDNN
                       : !strcmp(v, "im2col") ? MR_CPU_CONV_IM2COL
                       : !strcmp(v, "winograd") ? MR_CPU_CONV_WINOGRAD : (mr_cpu_conv)-1;
            if ((int)c.cpu.conv < 0) {
                fprintf(stderr, "bench_train: --cpu-conv accepts auto, onednn, im2col or winograd\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--cpu-activations")) {
            c.cpu.activations = !strcmp(v, "auto") ? MR_CPU_ACTIVATIONS_AUTO : !strcmp(v, "store") ? MR_CPU_ACTIVATIONS_STORE
                              : !strcmp(v, "recompute") ? MR_CPU_ACTIVATIONS_RECOMPUTE : -1;
            if (c.cpu.activations < 0) {
                fprintf(stderr, "bench_train: --cpu-activations accepts auto, store or recompute\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--precision")) {
            if (!strcmp(v, "fp32")) c.precision = MR_FP32;
            else if (!strcmp(v, "bf16")) c.precision = MR_BF16;
            else { fprintf(stderr, "bench_train: --precision accepts fp32 or bf16\n"); return 2; }
        }
        else { fprintf(stderr, "bench_train: unknown option %s\n", a); return 2; }
    }
    if (updates < 1) updates = 1;
    c.total_steps = (uint64_t)(updates + 1) * c.env.num_envs * c.ppo.rollout_steps;
    mr_error e;
    mr_trainer *t;
    if (mr_trainer_create(&c, &t, &e) != MR_OK) { fprintf(stderr, "bench_train: %s\n", e.msg); return 1; }
    int threads = c.threads > 0 ? c.threads : omp_get_num_procs();
    omp_set_num_threads(threads);
    double peak = sgemm_rate(2048);
    /* the hardware's ceiling for the precision used (peak.c): fp32 FMAs, or bf16 dot products */
    int bf16 = c.precision == MR_BF16;
    double hw = mr_cpu_peak_gflops(bf16, threads);

    mr_metrics m;
    if (mr_trainer_update(t, &m, &e) != MR_OK) { fprintf(stderr, "bench_train: %s\n", e.msg); return 1; }
    double *sps = calloc(updates, sizeof *sps), *tr = calloc(updates, sizeof *tr),
           *tg = calloc(updates, sizeof *tg), *tu = calloc(updates, sizeof *tu);
    for (int u = 0; u < updates; u++) {
        double t0 = now_s();
        if (mr_trainer_update(t, &m, &e) != MR_OK) { fprintf(stderr, "bench_train: %s\n", e.msg); return 1; }
        double dt = now_s() - t0;
        sps[u] = (double)c.env.num_envs * c.ppo.rollout_steps / dt;
        tr[u] = m.time_rollout; tg[u] = m.time_gae; tu[u] = m.time_update;
    }
    double s_med = median(sps, updates), r_med = median(tr, updates), g_med = median(tg, updates),
           u_med = median(tu, updates);
    double B = (double)c.env.num_envs * c.ppo.rollout_steps, F = forward_flops(&c, MR_CPU_CONV_ONEDNN);
    double F_own = forward_flops(&c, c.cpu.conv);   /* what this cpu.conv computes (Winograd: fewer) */
    double upd_flops = 3.0 * F * B * c.ppo.epochs, roll_flops = F * (B + c.env.num_envs);
    double upd_gf = upd_flops / u_med / 1e9, roll_gf = roll_flops / r_med / 1e9;
    /* end to end: every product of an update (rollout forward + epochs of forward and backward)
     * over its wall time, the figure a whole-training comparison is bounded by */
    double all_gf = (upd_flops + roll_flops) * s_med / B / 1e9;
    mr_memory_stats ms;
    mr_trainer_memory(t, &ms, &e);
    if (json) {
        printf("{\"impl\":\"moonrl\",\"device\":\"cpu\",\"net\":\"%s\",\"threads\":%d,\"num_envs\":%d,\"rollout\":%d,"
               "\"updates\":%d,\"sps_median\":%.1f,\"time_rollout\":%.4f,\"time_gae\":%.4f,\"time_update\":%.4f,"
               "\"update_gflops\":%.2f,\"rollout_gflops\":%.2f,\"train_gflops\":%.2f,\"sgemm_gflops\":%.2f,"
               "\"update_fraction_of_sgemm\":%.3f,\"cpu_peak_gflops\":%.2f,\"update_fraction_of_peak\":%.3f,"
               "\"peak_memory_bytes\":%llu,\"precision\":\"%s\",\"forward_mflop\":%.3f,\"forward_mflop_computed\":%.3f}\n",
               net, threads, c.env.num_envs, c.ppo.rollout_steps, updates, s_med, r_med, g_med, u_med, upd_gf,
               roll_gf, all_gf, peak, upd_gf / peak, hw, hw > 0 ? upd_gf / hw : 0.0,
               (unsigned long long)ms.host_peak_bytes,
               c.precision == MR_BF16 ? "bf16" : "fp32", F / 1e6, F_own / 1e6);
    } else {
        printf("moonrl training, cpu, %d threads, net %s (%.2f MFLOP/sample forward), %d envs x %d steps\n",
               threads, net, F / 1e6, c.env.num_envs, c.ppo.rollout_steps);
        if (F_own != F)   /* every GFLOP/s below counts the direct convolutions' work */
            printf("  this cpu.conv computes %.2f MFLOP/sample forward (Winograd); GFLOP/s below are of the "
                   "direct %.2f\n", F_own / 1e6, F / 1e6);
        printf("  %s\n", mr_trainer_describe(t));
        printf("  agent-steps/s (median of %d)   %10.0f\n", updates, s_med);
        printf("  rollout / gae / update (s)     %.3f / %.4f / %.3f\n", r_med, g_med, u_med);
        printf("  update GFLOP/s                 %10.1f  (%.0f%% of sgemm %.1f GFLOP/s)\n", upd_gf,
               100.0 * upd_gf / peak, peak);
        printf("  rollout GFLOP/s                %10.1f  (%.0f%% of sgemm)\n", roll_gf, 100.0 * roll_gf / peak);
        if (hw > 0)
            printf("  this CPU's %s peak             %10.1f GFLOP/s (%s, %d threads): update at %.0f%%, "
                   "training end to end at %.1f GFLOP/s = %.0f%%\n", bf16 ? "bf16" : "fp32", hw,
                   mr_cpu_peak_what(bf16), threads, 100.0 * upd_gf / hw, all_gf,
                   100.0 * all_gf / hw);
        printf("  host memory planned            %10.1f MiB\n", ms.host_planned_bytes / 1048576.0);
    }
    free(sps); free(tr); free(tg); free(tu);
    mr_trainer_free(t);
    return 0;
}

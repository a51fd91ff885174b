/*
 * test_cuda_policy_faults.c - that the CUDA policy's comparison catches a
 * wrong kernel: the schedule (kernels/policy_math.h) run on the CPU through
 * pc_emu.h's emulator with one operation broken at a time, compared as the
 * other test_cuda_policy_* programs compare (policy_check.h's net_compare),
 * against the CPU policy (src/engine/policy.c) in fp32 and against the clean
 * emulated run in bf16 / fp16.
 *
 * In each precision, every job and GEMM of a forward + backward of the small
 * net (batch 170 in chunks of 165 and 5: two-level bias sums) is broken in
 * turn - skipped; one element in seven left out; half of a GEMM's sum
 * dropped; its beta flipped - over a NaN-poisoned workspace, and the
 * comparison must fail every time: at 1e-4 (fp32) and at tol_layer (bf16 /
 * fp16, the bound of the GPU test's sharp per-layer check). So the same
 * comparison on the GPU catches a wrong kernel. CPU only. Options: --verbose
 * (every job's kind and size); MOONRL_TEST_SEED=n draws other inputs.
 */
#include "policy_check.h"

/* ================================================================ CPU: fault injection */

/* Breaks each operation of a forward + backward in turn; the comparison
 * must notice every time (a NaN-poisoned workspace makes a skipped write
 * visible). Jobs of fewer than 4 elements cannot lose one in seven. fp32:
 * against the CPU policy at 1e-4; bf16 / fp16: against the clean emulated
 * run in the same precision at tol_layer (the bound of the GPU test's sharp
 * per-layer check). */
static void test_fault_injection(int dt) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    const int V = 5, B = 170;   /* chunks of 165 and 5 samples: 4125 rows, two-level bias sums */
    ref_net r;
    CHECK(ref_make(&r, &cfg, V, B, 16));
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, V * V);
    ref_run(&r, &in, 1);
    emu_net n;
    if (!emu_net_make(&n, &cfg, V, B, 165, dt)) return;
    unsigned job_n[512];
    int job_kind[512];
    n.e.job_n = job_n;
    n.e.job_kind = job_kind;
    n.e.job_n_cap = 512;
    mr_error err;
    CHECK(emu_net_run(&n, r.p.params, r.g0, &in, 1, &err) == MR_OK);
    const long jobs = n.e.jobs, gemms = n.e.gemms;
    if (verbose)
        for (long k = 0; k < jobs && k < 512; k++) printf("    job %ld: kind %d, %u elements\n", k, job_kind[k], job_n[k]);
    net_out o = emu_out(&n);
    const double clean = cmp_cpu("fault injection baseline", &r, &n.pl, &o, B, 1e-4, 1);
    /* the clean run, kept as the reduced precisions' reference */
    unsigned char *cws = malloc(n.ws_used);
    float *cl = malloc(4 * (size_t)B * NA), *cv = malloc(4 * (size_t)B), *cg = malloc(4 * r.p.n_params);
    memcpy(cws, n.ws, n.ws_used);
    memcpy(cl, n.logits, 4 * (size_t)B * NA);
    memcpy(cv, n.value, 4 * (size_t)B);
    memcpy(cg, n.grads, 4 * r.p.n_params);
    const net_out co = {cws, cl, cv, cg};
    const net_view cview = view_out(&n.pl, &co);
    const double tol = tol_layer(dt);
    n.e.job_n = NULL;
    int missed = 0, tried = 0;
    for (int mode = 0; mode < 4; mode++) {
        const long count = mode < 2 ? jobs : gemms;
        for (long k = 0; k < count; k++) {
            if (mode == 1 && (k >= 512 || job_n[k] < 4)) continue;
            n.e.fault_job = mode < 2 ? k : -1;
            n.e.fault_gemm = mode >= 2 ? k : -1;
            n.e.fault_mode = mode;
            CHECK(emu_net_run(&n, r.p.params, r.g0, &in, 1, &err) == MR_OK);
            o = emu_out(&n);
            const net_view fv = view_out(&n.pl, &o);
            const double w = dt == MR_FP32 ? cmp_cpu("fault", &r, &n.pl, &o, B, tol, 0)
                                           : net_compare("fault", &r.p, &fv, &cview, B, tol, tol, 0);
            tried++;
            if (w <= tol) {   /* NaN counts as detected */
                missed++;
                fprintf(stderr, "  fault not detected: %s %ld (kind %d) (error %.3g)\n",
                        mode == 0 ? "skipped job" : mode == 1 ? "job missing 1 in 7" : mode == 2 ? "GEMM missing half its terms"
                                                                                   : "GEMM with beta flipped", k,
                        mode < 2 ? job_kind[k] : -1, w);
            }
        }
    }
    n.e.fault_job = n.e.fault_gemm = -1;
    CHECK_MSG(missed == 0, "%d of %d injected faults went unnoticed", missed, tried);
    printf("  fault injection, %s: %d faults in %ld jobs and %ld GEMMs of a forward + backward, all detected at "
           "%.0e (clean run against the CPU policy: %.1e)\n", prec_name(dt), tried, jobs, gemms, tol, clean);
    free(cws); free(cl); free(cv); free(cg);
    emu_net_free(&n);
    inputs_free(&in);
    ref_free(&r);
}

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    policy_check_at(PC_AT_FAULTS);
    for (int dt = 0; dt < 3; dt++) test_fault_injection(dt);
    return check_report("test_cuda_policy_faults");
}

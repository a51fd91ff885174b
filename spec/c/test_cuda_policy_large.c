/*
 * test_cuda_policy_large.c - batches past 2^31 elements (issue 50): the
 * CUDA network's whole-batch conv activations may pass 2^31 elements (each
 * job and GEMM still sees a chunk, or fc's rows in blocks), so num_envs =
 * auto is no longer stopped at 2,112 environments for the reference net.
 *
 * Always (CPU): the plan of the reference net at 524,288 samples (4,096
 * environments x 128 steps in one minibatch: conv outputs of 4.06e9
 * elements) is made, its regions laid out in 64-bit offsets past 4 GiB,
 * fc in row blocks within the limit; the refusal that is left names the
 * real limit (the critic input of 3,000,000 samples, per job); the trainer's
 * device plan (mr_config_device_bytes) answers at that size and
 * mr_config_fit_num_envs with an H100's budget goes past the old 2,112; the
 * emulated schedule with fc's row blocks forced small (3 rows, so several
 * blocks, the last partial) against the CPU policy, fp32 within 1e-4.
 * With a GPU (the window, where memory allows): the reference net at
 * 281,600 samples (act 2.18e9 elements, fc in two blocks), fp32, made of
 * 1,100 copies of 256 samples: every copy's logits and value equal the
 * 256-sample batch's (1e-5), the gradients 1,100 times its (1e-4); then
 * one trainer update (bf16, 2,304 environments x 128 steps, one
 * minibatch: past the old limit) with finite metrics.
 */
#include "policy_check.h"
#include "moonrl.h"

/* The reference net's trunk over a default config's other policy settings. */
static void ref_policy(mr_config *c) {
    mr_config_default(c);
    mr_policy_config r;
    ref_cfg(&r);
    c->policy.num_conv = r.num_conv;
    for (int l = 0; l < r.num_conv; l++) c->policy.conv_channels[l] = r.conv_channels[l];
    c->policy.hidden = r.hidden;
    c->policy.critic_hidden = r.critic_hidden;
}

static void test_plan(void) {
    mr_policy_config cfg;
    ref_cfg(&cfg);
    mr_pc_plan pl;
    mr_error e;
    const int B = 524288;
    CHECK_MSG(mr_pc_plan_make(&pl, &cfg, 11, B, 0, MR_BF16, &e) == MR_OK, "%s", e.msg);
    const long long act = (long long)B * 121 * 64;
    CHECK(act > MR_PC_MAX_ELEMS && pl.max_elems <= MR_PC_MAX_ELEMS);
    CHECK(pl.fc_rows == (int)(MR_PC_MAX_ELEMS / pl.net.flat) && (long long)pl.fc_rows * pl.net.flat <= MR_PC_MAX_ELEMS);
    /* regions in order, aligned, disjoint, past 4 GiB */
    CHECK(pl.o_act[2] == pl.o_act[1] + mr_pc_round((size_t)act * 2) && pl.o_act[2] > ((size_t)1 << 32));
    CHECK(pl.o_cin == pl.o_act[2] + mr_pc_round((size_t)act * 2));
    CHECK(pl.ws_bytes > (size_t)2 * act * 2);   /* two conv outputs of 64 channels */
    /* what is left: one job's elements */
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 3000000, 0, MR_BF16, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "the critic input") && strstr(e.msg, "per job or product"), "%s", e.msg);
    printf("  at 3,000,000 samples: %s\n", e.msg);

    /* the trainer's device plan at 4,096 environments x 128, one minibatch */
    mr_config c;
    ref_policy(&c);
    c.env.num_envs = 4096;
    c.ppo.rollout_steps = 128;
    c.ppo.minibatches = 1;
    c.precision = MR_BF16;
    c.device = MR_DEVICE_CUDA;
    mr_config_follow_env(&c);
    uint64_t bytes = 0;
    CHECK_MSG(mr_config_device_bytes(&c, &bytes, &e) == MR_OK, "%s", e.msg);
    printf("  device plan at 4,096 x 128 (524,288 samples), bf16: %.1f GiB\n", (double)bytes / (1u << 30));
    int n = 0;
    const uint64_t budget = (uint64_t)(0.9 * 0.9 * 79.1 * (1u << 30));   /* an H100: 90% x memory_fraction 0.9 */
    CHECK_MSG(mr_config_fit_num_envs(&c, budget, &n, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(n > 2112, "num_envs = auto gives %d, not past the old limit of 2,112", n);
    printf("  num_envs = auto on an H100's budget (%.1f GiB), reference net, bf16, 128 steps, one minibatch: %d\n",
           (double)budget / (1u << 30), n);
}

/* fc's row blocks, emulated: 3 rows a block at B = 11 (four blocks, the last of 2) */
static void test_blocks(void) {
    policy_check_at(PC_AT_NET);
    mr_policy_config cfg;
    small_cfg(&cfg);
    const int B = 11, view = 5;
    ref_net r;
    CHECK(ref_make(&r, &cfg, view, B, 16));
    random_params(&r.p);
    inputs in;
    inputs_make(&in, B, view * view);
    ref_run(&r, &in, 0);
    long gemms[2] = {0, 0};
    for (int forced = 0; forced < 2; forced++) {
        emu_net n;
        if (!emu_net_make(&n, &cfg, view, B, 4, MR_FP32)) continue;
        if (forced) n.pl.fc_rows = 3;
        mr_error e;
        CHECK_MSG(emu_net_run(&n, r.p.params, r.g0, &in, 0, &e) == MR_OK, "%s", e.msg);
        gemms[forced] = n.e.gemms;
        const net_out o = emu_out(&n);
        const double w = cmp_cpu(forced ? "fc in blocks of 3 rows" : "fc in one block", &r, &n.pl, &o, B, 1e-4, 1);
        printf("  %s: largest relative error %.2e against the CPU policy (%ld GEMMs)\n",
               forced ? "fc in blocks of 3 rows" : "fc in one block", w, n.e.gemms);
        emu_net_free(&n);
    }
    CHECK(gemms[1] == gemms[0] + 2 * 3);   /* 4 blocks instead of 1, forward and weight gradient */
    inputs_free(&in);
    ref_free(&r);
}

#ifdef MOONRL_HAVE_CUDA
static void gpu_policy(void) {
    mr_policy_config cfg;
    ref_cfg(&cfg);
    const int b = 256, K = 1100, B = b * K, view = 11, VV = 121;
    mr_policy_cuda pc;
    mr_error e;
    const size_t need = mr_policy_cuda_bytes(&cfg, view, B, 0, MR_FP32);
    uint64_t fr = 0, tot = 0;
    if (mr_cuda_device_memory(0, &fr, &tot, &e) != MR_OK || need + ((size_t)2 << 30) > fr) {
        printf("  %d samples: skipped, the network needs %.1f GiB, %.1f GiB free\n", B, (double)need / (1u << 30),
               (double)fr / (1u << 30));
        return;
    }
    if (mr_policy_cuda_create(&pc, &cfg, view, B, 0, MR_FP32, &dev, &e) != MR_OK) {
        CHECK_MSG(0, "create at %d samples: %s", B, e.msg);
        return;
    }
    CHECK((long long)B * pc.plan.net.flat > MR_PC_MAX_ELEMS && pc.plan.fc_rows < B);
    ref_net r;   /* only for its parameter layout and random weights */
    CHECK(ref_make(&r, &cfg, view, b, 64));
    random_params(&r.p);
    up(pc.params, r.p.params, pc.plan.param_bytes);
    inputs in;
    inputs_make(&in, b, VV);
    uint8_t *codes = malloc((size_t)B * VV);
    float *extra = malloc(sizeof(float) * 2 * B), *dl = malloc(sizeof(float) * NA * B), *dv = malloc(sizeof(float) * B);
    for (int k = 0; k < K; k++) {
        memcpy(codes + (size_t)k * b * VV, in.codes, (size_t)b * VV);
        memcpy(extra + (size_t)k * b * 2, in.extra, sizeof(float) * 2 * b);
        memcpy(dl + (size_t)k * b * NA, in.dlogits, sizeof(float) * NA * b);
        memcpy(dv + (size_t)k * b, in.dvalue, sizeof(float) * b);
    }
    uint8_t *dcodes = dup_up(codes, (size_t)B * VV);
    float *dextra = dup_up(extra, sizeof(float) * 2 * B), *ddl = dup_up(dl, sizeof(float) * NA * B);
    float *ddv = dup_up(dv, sizeof(float) * B), *dlog = dalloc(sizeof(float) * NA * B), *dval = dalloc(sizeof(float) * B);
    float *lg = malloc(sizeof(float) * NA * B), *val = malloc(sizeof(float) * B);
    float *gb = malloc(pc.plan.param_bytes), *gs = malloc(pc.plan.param_bytes);
    /* the big batch, then its first b samples alone */
    OK(mr_policy_cuda_zero_grad(&pc, stream, &e_));
    OK(mr_policy_cuda_forward(&pc, dcodes, dextra, B, 0, dlog, dval, stream, &e_));
    OK(mr_policy_cuda_backward(&pc, ddl, ddv, B, stream, &e_));
    down(lg, dlog, sizeof(float) * NA * B);
    down(val, dval, sizeof(float) * B);
    down(gb, pc.grads, pc.plan.param_bytes);
    OK(mr_policy_cuda_zero_grad(&pc, stream, &e_));
    OK(mr_policy_cuda_forward(&pc, dcodes, dextra, b, 0, dlog, dval, stream, &e_));
    OK(mr_policy_cuda_backward(&pc, ddl, ddv, b, stream, &e_));
    float *ls = malloc(sizeof(float) * NA * b), *vs = malloc(sizeof(float) * b);
    down(ls, dlog, sizeof(float) * NA * b);
    down(vs, dval, sizeof(float) * b);
    down(gs, pc.grads, pc.plan.param_bytes);
    if (sync_ok("the large batch")) {
        double wl = 0, wv = 0;
        for (int k = 0; k < K; k++) {
            const double el = check_relerr(lg + (size_t)k * b * NA, ls, (size_t)b * NA, 1e-30);
            const double ev = check_relerr(val + (size_t)k * b, vs, (size_t)b, 1e-30);
            if (!(el <= wl)) wl = el;
            if (!(ev <= wv)) wv = ev;
        }
        for (size_t i = 0; i < pc.plan.net.n_params; i++) gs[i] *= (float)K;
        const double wg = check_relerr(gb, gs, pc.plan.net.n_params, 1e-30);
        CHECK_MSG(wl < 1e-5 && wv < 1e-5, "copies' logits %.2e, values %.2e", wl, wv);
        CHECK_MSG(wg < 1e-4, "gradients against %d x the small batch's: %.2e", K, wg);
        printf("  %d samples (conv output %.2e elements, fc in blocks of %d rows), fp32: every copy's logits %.1e "
               "and values %.1e from the %d-sample batch's, gradients %.1e from %d x its\n", B,
               (double)B * pc.plan.net.flat, pc.plan.fc_rows, wl, wv, b, wg, K);
    }
    free(codes); free(extra); free(dl); free(dv); free(lg); free(val); free(gb); free(gs); free(ls); free(vs);
    dfree(dcodes); dfree(dextra); dfree(ddl); dfree(ddv); dfree(dlog); dfree(dval);
    inputs_free(&in);
    ref_free(&r);
    mr_policy_cuda_destroy(&pc);
}

static void gpu_update(void) {
    mr_config c;
    ref_policy(&c);
    c.env.num_envs = 2304;   /* the old limit was 2,112 */
    c.ppo.rollout_steps = 128;
    c.ppo.minibatches = 1;
    c.ppo.epochs = 1;
    c.precision = MR_BF16;
    c.device = MR_DEVICE_CUDA;
    c.total_steps = (uint64_t)2304 * 128 * 2;
    mr_trainer *t = NULL;
    mr_error e;
    mr_config_follow_env(&c);
    if (mr_trainer_create(&c, &t, &e) != MR_OK) {
        CHECK_MSG(0, "trainer at 2,304 x 128: %s", e.msg);
        return;
    }
    mr_metrics m;
    const mr_status s = mr_trainer_update(t, &m, &e);
    CHECK_MSG(s == MR_OK, "update at 2,304 x 128: %s", e.msg);
    if (s == MR_OK) {
        CHECK(!m.nonfinite && m.policy_loss == m.policy_loss && m.value_loss == m.value_loss);
        printf("  one update at 2,304 x 128 (294,912 samples, conv output %.2e elements), bf16: %.2f s, peak %.1f "
               "GiB, policy loss %.4f\n", 294912.0 * 7744, m.time_update + m.time_rollout,
               (double)m.memory_peak_bytes / (1u << 30), m.policy_loss);
    }
    mr_trainer_free(t);
}
#endif

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    test_plan();
    test_blocks();
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() > 0) {
        if (gpu_open()) {
            gpu_policy();
            gpu_close();
        }
        gpu_update();
    } else {
        printf("test_cuda_policy_large: skipped: no GPU (GPU checks not run; CPU checks above)\n");
    }
#else
    printf("test_cuda_policy_large: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_policy_large");
}

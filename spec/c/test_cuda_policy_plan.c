/*
 * test_cuda_policy_plan.c - the CUDA policy's memory plan (mr_pc_plan_make,
 * kernels/policy_math.h) and what mr_policy_cuda_* (policy_cuda.h) refuse,
 * against the CPU policy's parameter layout (src/engine/policy.c) and the
 * plan's own rules.
 *
 * Always (CPU): the parameter layout is policy.c's, entry by entry, in every
 * precision; the reference net's sizes (ENV_SPEC's parameter counts); every
 * workspace region's size, alignment, bounds and no overlaps (check_regions,
 * recomputed here from the shapes), at batch 24,576, a small chunk and a
 * small net; chunk capping; refusals, each naming what is wrong. In a CUDA
 * build, the argument checks that run before any GPU call, and without a GPU
 * the message creation gives (over a host-memory fake device).
 * With a GPU: the argument checks on a created policy (a batch over
 * max_batch, backward before any forward) and no device memory left behind.
 * Without a GPU the GPU part prints "skipped: no GPU".
 */
#include "policy_check.h"

/* ================================================================ CPU: plan */

typedef struct region { size_t off, bytes; const char *name; } region;

static void check_regions(const mr_pc_plan *pl, const char *label) {
    const mr_net_layout *p = &pl->net;
    const size_t es = (size_t)mr_pc_esize(pl->dt), MB = (size_t)pl->max_batch, CR = (size_t)pl->chunk * p->VV;
    int cmax = 1, cin_max = 2;
    for (int l = 0; l < p->num_conv; l++) {
        if (p->ch[l + 1] > cmax) cmax = p->ch[l + 1];
        if (p->ch[l] > cin_max) cin_max = p->ch[l];
    }
    region r[MR_MAX_CONV + 16];
    int n = 0;
    r[n++] = (region){pl->o_codes, MB * p->VV, "codes"};
    for (int l = 0; l < p->num_conv; l++) r[n++] = (region){pl->o_act[l], MB * p->VV * p->ch[l + 1] * es, "act"};
    r[n++] = (region){pl->o_cin, MB * p->cin_dim * es, "cin"};
    r[n++] = (region){pl->o_chid, MB * p->critic_hidden * es, "chid"};
    r[n++] = (region){pl->o_dchid, MB * p->critic_hidden * es, "dchid"};
    r[n++] = (region){pl->o_dfeat, MB * p->hidden * es, "dfeat"};
    r[n++] = (region){pl->o_col, CR * 9 * cin_max * es, "col"};
    r[n++] = (region){pl->o_dA, CR * cmax * es, "dA"};
    r[n++] = (region){pl->o_dB, CR * cmax * es, "dB"};
    /* the largest bias reduction: the widest layer over the most rows */
    int hmax = p->hidden > p->critic_hidden ? p->hidden : p->critic_hidden;
    if (hmax < NA) hmax = NA;
    size_t need = mr_pc_bias_partials((long long)CR, cmax);
    if (mr_pc_bias_partials((long long)MB, hmax) > need) need = mr_pc_bias_partials((long long)MB, hmax);
    CHECK(pl->part_doubles == need);
    r[n++] = (region){pl->o_part, need * 8, "part"};
    if (pl->dt != MR_FP32) {
        r[n++] = (region){pl->o_wlp, p->n_params * es, "wlp"};
        r[n++] = (region){pl->o_dlog, MB * NA * es, "dlog"};
        r[n++] = (region){pl->o_dval, MB * es, "dval"};
    }
    r[n++] = (region){pl->o_blas, MR_PC_BLAS_WS, "blas"};
    int ok = 1;
    for (int i = 0; i < n; i++) {
        ok &= r[i].off % MR_PC_ALIGN == 0 && r[i].off + r[i].bytes <= pl->ws_bytes;
        for (int k = 0; k < i; k++)
            ok &= r[i].off + r[i].bytes <= r[k].off || r[k].off + r[k].bytes <= r[i].off;
    }
    CHECK_MSG(ok, "%s: workspace regions overlap, are unaligned or pass its end", label);
    CHECK(pl->o_blas + MR_PC_BLAS_WS == pl->ws_bytes);
}

static void test_plan(void) {
    mr_policy_config cfg;
    mr_pc_plan pl;
    mr_error e;
    ref_cfg(&cfg);
    /* the parameter layout is policy.c's, entry by entry */
    mr_policy cpu;
    mr_arena a = {0};
    mr_policy_layout(&cpu, &cfg, 11, 0, 1, MR_CPU_CONV_IM2COL, &a);
    for (int dt = 0; dt < 3; dt++) {
        CHECK(mr_pc_plan_make(&pl, &cfg, 11, 24576, 0, dt, &e) == MR_OK);
        CHECK(pl.net.n_params == cpu.n_params && pl.net.n_tensors == cpu.n_tensors && pl.net.flat == 7744 &&
              pl.net.cin_dim == 756 && pl.param_bytes == 4 * cpu.n_params);
        CHECK(memcmp(pl.net.tensors, cpu.tensors, sizeof cpu.tensors) == 0);
        CHECK(pl.chunk == MR_PC_CHUNK && pl.max_batch == 24576 && pl.dt == dt);
        check_regions(&pl, prec_name(dt));
        printf("  plan, reference net at batch 24,576 (%s): %.2f GiB of device memory (%zu parameters)\n",
               prec_name(dt), (double)mr_pc_plan_bytes(&pl) / (1u << 30), pl.net.n_params);
    }
    /* ENV_SPEC: about 4.03 M in the policy (trunk + actor); the critic adds 388,097 */
    CHECK(cpu.n_policy == 4025576 && cpu.n_params == 4413673);
    /* chunk capped at max_batch; explicit chunk kept */
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 100, 0, MR_FP32, &e) == MR_OK && pl.chunk == 100);
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 100, 7, MR_BF16, &e) == MR_OK && pl.chunk == 7);
    check_regions(&pl, "chunk 7 bf16");
    small_cfg(&cfg);
    CHECK(mr_pc_plan_make(&pl, &cfg, 5, 3, 2, MR_FP16, &e) == MR_OK);
    check_regions(&pl, "small fp16");
    /* refusals, each naming what is wrong */
    ref_cfg(&cfg);
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 0, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "max_batch"));
    CHECK(mr_pc_plan_make(&pl, &cfg, 0, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "view"));
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, 7, &e) == MR_ERR_ARG && strstr(e.msg, "precision"));
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 1 << 22, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "lower max_batch"));
    CHECK(mr_pc_plan_make(&pl, NULL, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG);
    cfg.num_conv = 0;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "num_conv"));
    ref_cfg(&cfg);
    cfg.conv_channels[1] = 0;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "conv_channels[1]"));
    ref_cfg(&cfg);
    cfg.critic_hidden = -1;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 10, 0, MR_FP32, &e) == MR_ERR_ARG && strstr(e.msg, "critic_hidden"));
}

/* ================================================================ CUDA: argument checks */
#ifdef MOONRL_HAVE_CUDA

/* host-memory "device" for the no-GPU creation path */
static void *fake_alloc(void *ctx, size_t bytes, const char **reason) { (void)ctx; (void)reason; return malloc(bytes); }
static void fake_free(void *ctx, void *p) { (void)ctx; free(p); }
static size_t fake_free_bytes(void *ctx) { (void)ctx; return (size_t)1 << 34; }

/* Checks that need no GPU: arguments are refused before any GPU call. */
static void test_cuda_arg_checks(void) {
    mr_error e;
    mr_policy_config cfg;
    ref_cfg(&cfg);
    mr_policy_cuda pc;
    CHECK(mr_policy_cuda_create(NULL, &cfg, 11, 10, 0, MR_FP32, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_policy_cuda_create(&pc, &cfg, 11, 10, 0, MR_FP32, NULL, &e) == MR_ERR_ARG &&
          strstr(e.msg, "memory manager"));
    CHECK(pc.blas == NULL && pc.ws == NULL && pc.params == NULL);
    CHECK(mr_policy_cuda_create(&pc, &cfg, 11, 0, 0, MR_FP32, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "max_batch"));
    CHECK(mr_policy_cuda_create(&pc, &cfg, 11, 10, 0, 5, NULL, &e) == MR_ERR_ARG && strstr(e.msg, "precision"));
    CHECK(mr_policy_cuda_bytes(&cfg, 11, 10, 0, 5) == 0 && mr_policy_cuda_bytes(NULL, 11, 10, 0, 0) == 0);
    mr_pc_plan pl;
    CHECK(mr_pc_plan_make(&pl, &cfg, 11, 24576, 0, MR_BF16, &e) == MR_OK &&
          mr_policy_cuda_bytes(&cfg, 11, 24576, 0, MR_BF16) == mr_pc_plan_bytes(&pl));
    memset(&pc, 0, sizeof pc);   /* never created */
    CHECK(mr_policy_cuda_forward(&pc, NULL, NULL, 1, 0, NULL, NULL, NULL, &e) == MR_ERR_ARG &&
          strstr(e.msg, "not created"));
    CHECK(mr_policy_cuda_forward(NULL, NULL, NULL, 1, 0, NULL, NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_policy_cuda_backward(&pc, NULL, NULL, 1, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_policy_cuda_zero_grad(&pc, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_linear_forward(NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 0, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_cuda_conv3x3_backward(&pc, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 1, 1, NULL,
                                   &e) == MR_ERR_ARG);
    mr_policy_cuda_destroy(&pc);   /* a zeroed struct: no-op */
    mr_policy_cuda_destroy(NULL);
    if (mr_cuda_device_count() == 0) {
        /* a valid request on a machine without a GPU: cuBLAS refuses, nothing
         * is allocated, the message says why */
        mr_devmem fdev;
        mr_devmem_backend be = {NULL, fake_alloc, fake_free, fake_free_bytes, (size_t)1 << 34, "fake GPU"};
        CHECK(mr_devmem_init(&fdev, &be, NULL, &e) == MR_OK);
        const mr_status s = mr_policy_cuda_create(&pc, &cfg, 11, 10, 0, MR_FP32, &fdev, &e);
        CHECK_MSG(s == MR_ERR_BACKEND && strstr(e.msg, "cuBLAS"), "status %d: %s", s, e.msg);
        mr_devmem_stats st;
        mr_devmem_stats_get(&fdev, &st);
        CHECK(st.allocated_bytes == 0 && pc.blas == NULL);
        printf("  without a GPU, mr_policy_cuda_create says: %s\n", e.msg);
        mr_devmem_destroy(&fdev);
    }
}

/* Argument checks on a created policy (needs a GPU: creation makes a cuBLAS handle). */
static void gpu_arg_checks(void) {
    if (!gpu_open()) return;
    mr_error e;
    mr_policy_config cfg;
    small_cfg(&cfg);
    mr_policy_cuda pc;
    if (mr_policy_cuda_create(&pc, &cfg, 5, 4, 0, MR_FP32, &dev, &e) != MR_OK) {
        CHECK_MSG(0, "create: %s", e.msg);
    } else {
        CHECK(mr_policy_cuda_forward(&pc, NULL, NULL, 5, 0, NULL, NULL, stream, &e) == MR_ERR_ARG &&
              strstr(e.msg, "max_batch"));
        CHECK(mr_policy_cuda_backward(&pc, NULL, NULL, 1, stream, &e) == MR_ERR_ARG && strstr(e.msg, "last forward"));
        mr_policy_cuda_destroy(&pc);
    }
    gpu_close();
}
#endif /* MOONRL_HAVE_CUDA */

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    test_plan();
#ifdef MOONRL_HAVE_CUDA
    test_cuda_arg_checks();
    if (mr_cuda_device_count() > 0) gpu_arg_checks();
    else printf("test_cuda_policy_plan: skipped: no GPU (GPU checks not run; CPU checks above)\n");
#else
    printf("test_cuda_policy_plan: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_policy_plan");
}

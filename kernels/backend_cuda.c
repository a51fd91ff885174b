/*
 * backend_cuda.c - the cuda backend's table (backend.h): the kernels'
 * entry points (the kernels/ headers) and the few adapters between their C APIs
 * and the table (device entry, the network handle, the description).
 *
 * Planning (the network's allocations) is plain C over policy_math.h and is
 * there in every build, so mr_config_device_bytes answers without CUDA; a
 * build without CUDA leaves the runtime entries NULL and says why in
 * `unavailable`. Nothing here runs on its own: trainer.c's loop drives it.
 */
#include "backend.h"
#include "cuda_probe.h"
#include "errors.h"
#include "policy_mlp_math.h"   /* policy_math.h (the CNN), the MLP trunk, mr_pn_plan_make for either */
#include "policy_cuda.h"       /* mr_cuda_conv_resolve: plain C, planning needs it in every build */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MOONRL_HAVE_CUDA
#include "conv_cudnn.h"
#include "env_cuda.h"
#include "graph_cuda.h"
#include "ppo_cuda.h"
#include "ppo_loss_cuda.h"
#include "trainer_loop_cuda.h"
#endif

/* cuda.conv's layers: what mr_policy_cuda_create_conv will run (a build
 * without CUDA plans what the config asks, as if cuDNN were there). */
static void conv_layers(const mr_cuda_config *cuda, int L, int8_t dnn[MR_MAX_CONV]) {
    int algo[MR_MAX_CONV][3];
    char note[240];
    const char *why = NULL;
    int ok = 1;
#ifdef MOONRL_HAVE_CUDA
    if (cuda && cuda->conv != MR_CUDA_CONV_IM2COL) ok = mr_dnn_available(&why);
#endif
    mr_cuda_conv_resolve(cuda, L, ok, why, dnn, algo, note, sizeof note);
}

static mr_status cuda_policy_plan(const mr_policy_config *cfg, int view, int max_train, int max_act, int precision,
                                  const mr_cpu_config *cpu, const mr_cuda_config *cuda, mr_bpolicy_plan *out,
                                  mr_error *err) {
    (void)cpu;   /* cpu.* is the cpu backend's */
    memset(out, 0, sizeof *out);
    mr_pc_plan pl;
    const int max_batch = max_train > max_act ? max_train : max_act;   /* the rollout's forward runs on N */
    mr_status s = mr_pn_plan_make(&pl, cfg, view, max_batch, 0, precision, err);
    if (s != MR_OK) return s;
    int8_t dnn[MR_MAX_CONV];
    conv_layers(cuda, pl.net.num_conv, dnn);
    mr_pc_plan_dnn(&pl, dnn);
    if (cuda && cuda->epilogue == MR_CUDA_EPILOGUE_FUSED) mr_pc_plan_epi(&pl);   /* cuda.epilogue's regions */
    /* mr_policy_cuda_create's allocations: params, grads, workspace */
    out->n = 3;
    out->bytes[0] = pl.param_bytes;
    out->bytes[1] = pl.param_bytes;
    out->bytes[2] = pl.ws_bytes;
    out->total = mr_pc_plan_bytes(&pl);
    return MR_OK;
}

#ifdef MOONRL_HAVE_CUDA

static mr_status cuda_enter(int device, int threads, mr_error *err) {
    (void)threads;
    return mr_cuda_set_device(device, err);
}

static void cuda_describe(int device, int threads, int precision, char *buf, size_t len) {
    (void)threads;
    char name[96];
    if (mr_cuda_device_name(device, name, sizeof name, NULL) != MR_OK) snprintf(name, sizeof name, "unknown");
    snprintf(buf, len, "GPU %d (%s), %s", device, name,
             precision == MR_BF16 ? "bf16" : precision == MR_FP16 ? "fp16" : "fp32");
}

static mr_status cuda_policy_create(mr_bpolicy *bp, const mr_policy_config *cfg, int view, int max_train,
                                    int max_act, int precision, const mr_cpu_config *cpu, const mr_cuda_config *cuda,
                                    mr_devmem *mem, mr_error *err) {
    (void)cpu;
    memset(bp, 0, sizeof *bp);
    mr_policy_cuda *pc = calloc(1, sizeof *pc);
    if (!pc) return mr_fail(err, MR_ERR_NOMEM, "out of host memory creating the network");
    const int max_batch = max_train > max_act ? max_train : max_act;
    mr_status s = mr_policy_cuda_create_conv(pc, cfg, view, max_batch, 0, precision, cuda, mem, err);
    if (s != MR_OK) {
        free(pc);
        return s;
    }
    bp->impl = pc;
    bp->params = pc->params;
    bp->grads = pc->grads;
    bp->net = &pc->plan.net;
    return MR_OK;
}

/* How the convolutions run (cuda.conv; nothing for the MLP trunk) and, with
 * cuda.epilogue = fused, the epilogues (with the products so far that
 * cuBLASLt fused and those it left to the separate kernels). */
static void cuda_policy_describe(const mr_bpolicy *bp, int precision, char *buf, size_t len) {
    (void)precision;
    const mr_policy_cuda *pc = bp ? bp->impl : NULL;
    if (len) buf[0] = 0;
    if (!pc) return;
    int n = 0;
    if (pc->plan.net.num_conv > 0) n = snprintf(buf, len, "%s", pc->conv_note);
    if (pc->plan.epilogue && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "%s%s (so far %ld fused, %ld separate)", n ? "; " : "", pc->epi_note,
                 pc->epi_counts[0], pc->epi_counts[1]);
}

static const char *cuda_cudnn(void) { return mr_dnn_describe(); }

static void cuda_policy_destroy(mr_bpolicy *bp) {
    if (bp->impl) mr_policy_cuda_destroy(bp->impl);
    free(bp->impl);
    memset(bp, 0, sizeof *bp);
}

static mr_status cuda_zero_grad(mr_bpolicy *bp, void *stream, mr_error *err) {
    return mr_policy_cuda_zero_grad(bp->impl, stream, err);
}

/* The rollout's inference is the training forward on N samples. */
static mr_status cuda_forward(mr_bpolicy *bp, const uint8_t *codes, const float *extra, int B, int proxy,
                              float *logits, float *value, void *stream, mr_error *err) {
    return mr_policy_cuda_forward(bp->impl, codes, extra, B, proxy, logits, value, stream, err);
}

static mr_status cuda_backward(mr_bpolicy *bp, const float *dlogits, const float *dvalue, int B, void *stream,
                               mr_error *err) {
    return mr_policy_cuda_backward(bp->impl, dlogits, dvalue, B, stream, err);
}

static const mr_backend cuda_backend = {
    .name = "cuda",
    .device = MR_DEVICE_CUDA,
    .device_count = mr_cuda_probe_device_count,
    .precisions = (1 << MR_FP32) | (1 << MR_BF16) | (1 << MR_FP16),
    .cudnn = cuda_cudnn,
    .conv_time = mr_cuda_conv_time_gpu,
    .policy_plan = cuda_policy_plan,
    .enter = cuda_enter,
    .describe = cuda_describe,
    .policy_describe = cuda_policy_describe,
    .device_memory = mr_devmem_cuda_backend,
    .staging_memory = mr_devmem_pinned_backend,
    .copy = mr_cuda_copy,
    .memset = mr_cuda_memset,
    .stream_create = mr_cuda_stream_create,
    .stream_destroy = mr_cuda_stream_destroy,
    .stream_sync = mr_cuda_stream_sync,
    .event_create = mr_cuda_event_create,
    .event_destroy = mr_cuda_event_destroy,
    .event_record = mr_cuda_event_record,
    .event_sync = mr_cuda_event_sync,
    .event_elapsed = mr_cuda_event_elapsed,
    .env_reset_all = mr_env_cuda_reset_all,
    .env_step_all = mr_env_cuda_step_all,
    .env_step_random = mr_env_cuda_step_random,
    .env_clear_logs = mr_env_cuda_clear_logs,
    .env_log_reduce = mr_env_cuda_log_reduce,
    .policy_create = cuda_policy_create,
    .policy_destroy = cuda_policy_destroy,
    .policy_zero_grad = cuda_zero_grad,
    .policy_act = cuda_forward,
    .policy_forward = cuda_forward,
    .policy_backward = cuda_backward,
    .gae = mr_cuda_gae,
    .sample = mr_cuda_sample_actions,
    .sample_box = mr_cuda_sample_box,
    .sample_md = mr_cuda_sample_md,
    .opt_begin = mr_cuda_opt_begin,
    .opt_step = mr_cuda_opt_step,
    .mean_std = mr_cuda_mean_std,
    .normalize = mr_cuda_normalize,
    .ppo_loss = mr_cuda_ppo_loss,
    .ppo_loss_box = mr_cuda_ppo_loss_box,
    .ppo_loss_md = mr_cuda_ppo_loss_md,
    .popart_update = mr_cuda_popart_update,
    .step_in = mr_cuda_loop_step_in,
    .step_out = mr_cuda_loop_step_out,
    .keep_final = mr_cuda_loop_keep_final,
    .add_final = mr_cuda_loop_add_final,
    .gather = mr_cuda_loop_gather,
    .diff = mr_cuda_loop_diff,
    .accumulate = mr_cuda_loop_accumulate,
    .finish = mr_cuda_loop_finish,
    .graph_begin = mr_cuda_graph_begin,
    .graph_end = mr_cuda_graph_end,
    .graph_launch = mr_cuda_graph_launch,
    .graph_destroy = mr_cuda_graph_destroy,
};

#else

static const mr_backend cuda_backend = {
    .name = "cuda",
    .device = MR_DEVICE_CUDA,
    .precisions = (1 << MR_FP32) | (1 << MR_BF16) | (1 << MR_FP16),
    .unavailable = "device = cuda, but this build has no CUDA backend (nvcc was not found when it was built); "
                   "accepted here: device = \"cpu\" or \"auto\"",
    .device_count = mr_cuda_probe_device_count,
    .policy_plan = cuda_policy_plan,
};

#endif

const mr_backend *mr_backend_cuda(void) { return &cuda_backend; }

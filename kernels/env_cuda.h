/*
 * env_cuda.h - the foraging environment on a GPU: the C entry points of
 * kernels/env.cu (not public; moonrl.h's mr_env_* reach them through the
 * dispatch in env_cpu.c when device = MR_DEVICE_CUDA).
 *
 * The rules are foraging.h's, unchanged: each kernel runs one thread per
 * instance and calls the same MR_HD function the CPU loop calls, on an
 * mr_forage whose pointers are device memory, laid out by the same
 * mr_forage_layout as the CPU (one block from the device memory manager,
 * carved in the same order), so the two states are byte-for-byte comparable.
 *
 * Two levels:
 *   - mr_forage_cuda_*: kernels over an mr_forage with device pointers, on a
 *     caller's stream, asynchronous (no host sync). The CUDA trainer embeds
 *     its environment state and calls these.
 *   - mr_env_cuda_*: the public mr_env object on a GPU (its own memory
 *     manager, stream and pinned staging buffer).
 *
 * Streams are passed as void * (a cudaStream_t; NULL = the legacy default
 * stream) so this header stays plain C.
 */
#ifndef MR_ENV_CUDA_H
#define MR_ENV_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "env.h"
#include "devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device bytes of one environment set's state (the arena plan of
 * mr_forage_layout, 64-byte aligned buffers), plus the action buffer. */
static inline size_t mr_env_cuda_state_bytes(const mr_env_config *cfg) {
    mr_arena plan = {NULL, 0, 0, 0};
    mr_forage s;
    mr_forage_layout(&s, cfg, 0, &plan);
    return plan.size + mr_arena_round((size_t)cfg->num_envs);
}

/* The most environments of cfg's shape (grid, view) whose state fits in
 * budget_bytes (a multiple of 32 when at least 32; at most max_n): for
 * num_envs = "auto" and the out-of-memory message. At num_envs = 64 every
 * buffer is a multiple of 64 bytes, so that plan / 64 is the exact per-env
 * cost; the rounding of the 19 buffers to 64 bytes, and of the block to the
 * allocator's 512, is the fixed cost. */
static inline int mr_env_cuda_max_envs(const mr_env_config *cfg, size_t budget_bytes, int max_n) {
    mr_env_config c64 = *cfg;
    c64.num_envs = 64;
    const size_t per = mr_env_cuda_state_bytes(&c64) / 64;
    return mr_devmem_largest_num_envs(per, 19 * MR_ARENA_ALIGN + MR_DEVMEM_ROUND, budget_bytes, max_n, 32);
}

#ifdef MOONRL_HAVE_CUDA
/* ---- kernels over an mr_forage in device memory (asynchronous) ---- */
/* Full reset of every instance; logs untouched. */
mr_status mr_forage_cuda_reset_all(const mr_forage *s, void *stream, mr_error *err);
/* One step of every instance; d_actions: n bytes in device memory, each & 7. */
mr_status mr_forage_cuda_step_all(const mr_forage *s, const uint8_t *d_actions, void *stream, mr_error *err);
mr_status mr_forage_cuda_clear_logs(const mr_forage *s, void *stream, mr_error *err);
/* Rewrites every observation from the grid and agent positions. */
mr_status mr_forage_cuda_write_obs_all(const mr_forage *s, void *stream, mr_error *err);
/* Reduces the n logs into *d_out (device memory): integer fields and min/max
 * exactly as mr_forage_log_reduce; return_sum in double, rounded once (so it
 * may differ from the CPU's float sum in the last bits). One block. */
mr_status mr_forage_cuda_log_reduce(const mr_forage *s, mr_forage_log *d_out, void *stream, mr_error *err);

/* ---- the public mr_env object on GPU 0 ---- */
mr_status mr_env_cuda_create(const mr_env_config *cfg, uint64_t seed, mr_env **out, mr_error *err);
void mr_env_cuda_free(mr_env *e);
mr_status mr_env_cuda_reset(mr_env *e, mr_error *err);
/* actions: n host bytes, already checked to be in [0, 8). */
mr_status mr_env_cuda_step(mr_env *e, const uint8_t *actions, mr_error *err);
/* Copies into host memory and waits for them; errors of earlier asynchronous
 * work surface here. */
mr_status mr_env_cuda_read(const mr_env *e, mr_env_view *out, mr_error *err);
/* Tests and checkpoints: copies the whole device state into `host`, an
 * mr_forage laid out by mr_forage_layout with the same config on a committed
 * host arena (e.g. a CPU mr_env's), so the two can be compared or saved. */
mr_status mr_env_cuda_download(const mr_env *e, mr_forage *host, mr_error *err);
/* All logs reduced on the GPU (mr_forage_cuda_log_reduce) into *out, host memory. */
mr_status mr_env_cuda_log_summary(const mr_env *e, mr_forage_log *out, mr_error *err);
/* The device memory manager's numbers for this environment. */
mr_status mr_env_cuda_memory(const mr_env *e, mr_devmem_stats *out, mr_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_ENV_CUDA_H */

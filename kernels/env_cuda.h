/*
 * env_cuda.h - the environments on a GPU: the C entry points of
 * kernels/env.cu, which the cuda backend's table points at (the trainer and
 * the public mr_env object of core/env.c both run them through it).
 *
 * The rules are each environment's, unchanged: each kernel runs one thread
 * per instance and calls the same MR_HD function the CPU loop calls
 * (registry.h), on an mr_env_state whose pointers are device memory, laid
 * out by the same mr_env_layout as the CPU (one block from the device memory
 * manager, carved in the same order), so the two states are byte-for-byte
 * comparable. The kernels run on a caller's stream, asynchronously (no host
 * sync).
 *
 * Streams are passed as void * (a cudaStream_t; NULL = the legacy default
 * stream) so this header stays plain C.
 */
#ifndef MR_ENV_CUDA_H
#define MR_ENV_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "env_state.h"   /* mr_env_state, mr_env_layout */
#include "devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device bytes of one environment set's state (the arena plan of
 * mr_env_layout, 64-byte aligned buffers), plus the action buffer. */
static inline size_t mr_env_cuda_state_bytes(const mr_env_config *cfg) {
    mr_arena plan = {NULL, 0, 0, 0};
    mr_env_state s;
    mr_env_layout(&s, cfg, 0, &plan);
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
/* ---- kernels over a state in device memory (asynchronous) ---- */
/* Full reset of every instance; logs untouched. */
mr_status mr_env_cuda_reset_all(const mr_env_state *s, void *stream, mr_error *err);
/* One step of every instance; d_actions: n bytes in device memory. */
mr_status mr_env_cuda_step_all(const mr_env_state *s, const uint8_t *d_actions, void *stream, mr_error *err);
/* One step of every instance on an action drawn in the kernel
 * (mr_env_random_action over na actions), written to d_actions (n bytes). */
mr_status mr_env_cuda_step_random(const mr_env_state *s, uint64_t seed, int na, uint8_t *d_actions, void *stream,
                                  mr_error *err);
mr_status mr_env_cuda_clear_logs(const mr_env_state *s, void *stream, mr_error *err);
/* Reduces the n logs into *d_out (device memory): integer fields and min/max
 * exactly as mr_env_log_reduce; return_sum in double, rounded once (so it
 * may differ from the CPU's float sum in the last bits). One block. */
mr_status mr_env_cuda_log_reduce(const mr_env_state *s, mr_env_log *d_out, void *stream, mr_error *err);

#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_ENV_CUDA_H */

/*
 * env.cu - the environments on a GPU: one thread per instance, calling each
 * environment's MR_HD functions (registry.h), the very code the CPU loop
 * runs. Nothing here knows the rules or an environment's fields; it is the
 * launch loop and the memory around them (see env_cuda.h for the entry
 * points).
 *
 * The state (env_state.h's mr_env_state: the interface's buffers, then the
 * environment's own) is laid out by mr_env_layout in one block of device
 * memory from the device memory manager, the action buffer (n) u8 after it.
 * The kernels take the state by value as a __grid_constant__ parameter, so
 * `&s` points at the parameter itself (no per-thread copy) and a change of a
 * scalar between launches (foraging's energy_frozen) needs no device write.
 *
 * What this file is not: fast for small n. One thread per instance leaves an
 * H100 mostly idle at the spec's 192 environments; see docs/cuda.md for the
 * warp-per-instance plan. It is exact: same seed + same actions => the same
 * bytes as the CPU environment.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"   /* before the extern "C" block: MR_HD inline functions (every environment) */
#include "cuda_check.h"
extern "C" {
#include "devmem.h"
#include "env_cuda.h"
}

#define ENV_THREADS 128
#define LOG_THREADS 256

/* ---------------------------------------------------------------- kernels */

__global__ void env_reset_kernel(const __grid_constant__ mr_env_state s) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_env_reset_one(&s, i);
}

__global__ void env_step_kernel(const __grid_constant__ mr_env_state s, const uint8_t *__restrict__ actions) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_env_step_at(&s, i, actions);
}

/* The environment benchmark's step: each instance draws its own action
 * (mr_env_random_action, the keyed RNG every device shares), writes it for
 * the caller to read, and steps on it: no host copy per step. */
__global__ void env_step_random_kernel(const __grid_constant__ mr_env_state s, uint64_t seed, uint32_t na,
                                       uint8_t *__restrict__ actions) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.n) return;
    actions[i] = mr_env_random_action(&s, i, seed, na);
    mr_env_step_at(&s, i, actions);
}

__global__ void env_clear_logs_kernel(const __grid_constant__ mr_env_state s) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_env_log_clear(&s.log[i]);
}

/* One block of LOG_THREADS: each thread folds instances tid, tid + 256, ...,
 * then a fixed tree; the shape never changes, so the result is deterministic. */
__global__ void env_log_reduce_kernel(const __grid_constant__ mr_env_state s, mr_env_log *out) {
    enum { C = MR_ENV_MAX_COUNTERS, NI = 4 + 2 * C };   /* episodes, deaths, length, steps; counts; totals */
    __shared__ int32_t si[NI][LOG_THREADS];
    __shared__ double ssum[LOG_THREADS];
    __shared__ float smin[LOG_THREADS], smax[LOG_THREADS];
    const int t = threadIdx.x;
    int32_t acc[NI];
#pragma unroll
    for (int k = 0; k < NI; k++) acc[k] = 0;
    double sum = 0.0;
    float mn = mr_env_inf(), mx = -mr_env_inf();
    for (int i = t; i < s.n; i += LOG_THREADS) {
        const mr_env_log l = s.log[i];
        acc[0] += l.episodes; acc[1] += l.deaths; acc[2] += l.length_sum; acc[3] += l.steps_total;
#pragma unroll
        for (int k = 0; k < C; k++) {
            acc[4 + k] += l.count[k];
            acc[4 + C + k] += l.count_total[k];
        }
        sum += (double)l.return_sum;
        mn = l.return_min < mn ? l.return_min : mn;
        mx = l.return_max > mx ? l.return_max : mx;
    }
#pragma unroll
    for (int k = 0; k < NI; k++) si[k][t] = acc[k];
    ssum[t] = sum;
    smin[t] = mn;
    smax[t] = mx;
    __syncthreads();
    for (int h = LOG_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
#pragma unroll
            for (int k = 0; k < NI; k++) si[k][t] += si[k][t + h];
            ssum[t] += ssum[t + h];
            smin[t] = smin[t + h] < smin[t] ? smin[t + h] : smin[t];
            smax[t] = smax[t + h] > smax[t] ? smax[t + h] : smax[t];
        }
        __syncthreads();
    }
    if (t == 0) {
        mr_env_log r;
        r.episodes = si[0][0]; r.deaths = si[1][0]; r.length_sum = si[2][0]; r.steps_total = si[3][0];
        for (int k = 0; k < C; k++) {
            r.count[k] = si[4 + k][0];
            r.count_total[k] = si[4 + C + k][0];
        }
        r.return_sum = (float)ssum[0];
        r.return_min = smin[0];
        r.return_max = smax[0];
        *out = r;
    }
}

/* ------------------------------------------------- kernels' C entry points */

static cudaStream_t as_stream(void *stream) { return (cudaStream_t)stream; }

extern "C" mr_status mr_env_cuda_reset_all(const mr_env_state *s, void *stream, mr_error *err) {
    env_reset_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s);
    MR_CUDA_LAUNCHED("the environment reset kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_step_all(const mr_env_state *s, const uint8_t *d_actions, void *stream,
                                          mr_error *err) {
    env_step_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s, d_actions);
    MR_CUDA_LAUNCHED("the environment step kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_step_random(const mr_env_state *s, uint64_t seed, int na, uint8_t *d_actions,
                                             void *stream, mr_error *err) {
    if (na < 1 || na > 256 || !d_actions)
        return mr_fail(err, MR_ERR_ARG, "mr_env_cuda_step_random: %d actions (accepted 1 .. 256) and an action "
                       "buffer", na);
    env_step_random_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(
        *s, seed, (uint32_t)na, d_actions);
    MR_CUDA_LAUNCHED("the environment step kernel (actions drawn on the device)", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_clear_logs(const mr_env_state *s, void *stream, mr_error *err) {
    env_clear_logs_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s);
    MR_CUDA_LAUNCHED("the environment log-clearing kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_log_reduce(const mr_env_state *s, mr_env_log *d_out, void *stream, mr_error *err) {
    env_log_reduce_kernel<<<1, LOG_THREADS, 0, as_stream(stream)>>>(*s, d_out);
    MR_CUDA_LAUNCHED("the episode-log reduction kernel", err);
    mr_ok(err);
    return MR_OK;
}

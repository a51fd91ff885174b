/*
 * env.cu - the foraging environment on a GPU: one thread per instance,
 * calling foraging.h's MR_HD functions, the very code the CPU loop runs.
 * Nothing here knows the rules; it is the launch loop and the memory around
 * them (see env_cuda.h for the entry points).
 *
 * Tensors, all in device memory, laid out by mr_forage_layout in one block
 * from the device memory manager (n = num_envs, H = W = grid_size,
 * V = 2*view_range+1):
 *   grid (n,H,W) u8 cell codes;  obs (n,V,V) u8 cell codes
 *   x, y, steps, energy_centi, food_count, poison_count, ep_food, ep_poison (n) i32
 *   tick, resets (n) u32;  energy, reward, ep_return (n) f32
 *   terminated, truncated (n) u8;  log (n) mr_forage_log (44 bytes each)
 *   actions (n) u8, after the state in the same block
 * The kernels take the mr_forage by value as a __grid_constant__ parameter,
 * so `&s` points at the parameter itself (no per-thread copy) and a change of
 * a scalar between launches (energy_frozen) needs no device write.
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
#include "forage_layout.h"
#include "env_cuda.h"
}

#define ENV_THREADS 128
#define LOG_THREADS 256

/* ---------------------------------------------------------------- kernels */

__global__ void forage_reset_kernel(const __grid_constant__ mr_forage s) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_env_reset_one(&s, i);
}

__global__ void forage_step_kernel(const __grid_constant__ mr_forage s, const uint8_t *__restrict__ actions) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_env_step_one(&s, i, actions[i]);
}

__global__ void forage_clear_logs_kernel(const __grid_constant__ mr_forage s) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_forage_log_clear(&s.log[i]);
}

__global__ void forage_obs_kernel(const __grid_constant__ mr_forage s) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_forage_write_obs(&s, i);
}

/* One block of LOG_THREADS: each thread folds instances tid, tid + 256, ...,
 * then a fixed tree; the shape never changes, so the result is deterministic. */
__global__ void forage_log_reduce_kernel(const __grid_constant__ mr_forage s, mr_forage_log *out) {
    enum { NI = 8 };
    __shared__ int32_t si[NI][LOG_THREADS];
    __shared__ double ssum[LOG_THREADS];
    __shared__ float smin[LOG_THREADS], smax[LOG_THREADS];
    const int t = threadIdx.x;
    int32_t acc[NI] = {0, 0, 0, 0, 0, 0, 0, 0};
    double sum = 0.0;
    float mn = mr_forage_inf(), mx = -mr_forage_inf();
    for (int i = t; i < s.n; i += LOG_THREADS) {
        const mr_forage_log l = s.log[i];
        acc[0] += l.episodes; acc[1] += l.deaths; acc[2] += l.length_sum; acc[3] += l.food;
        acc[4] += l.poison; acc[5] += l.food_total; acc[6] += l.poison_total; acc[7] += l.steps_total;
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
        mr_forage_log r;
        r.episodes = si[0][0]; r.deaths = si[1][0]; r.length_sum = si[2][0]; r.food = si[3][0];
        r.poison = si[4][0]; r.food_total = si[5][0]; r.poison_total = si[6][0]; r.steps_total = si[7][0];
        r.return_sum = (float)ssum[0];
        r.return_min = smin[0];
        r.return_max = smax[0];
        *out = r;
    }
}

/* ------------------------------------------------- kernels' C entry points */

static cudaStream_t as_stream(void *stream) { return (cudaStream_t)stream; }

extern "C" mr_status mr_forage_cuda_reset_all(const mr_forage *s, void *stream, mr_error *err) {
    forage_reset_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s);
    MR_CUDA_LAUNCHED("the environment reset kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_forage_cuda_step_all(const mr_forage *s, const uint8_t *d_actions, void *stream,
                                             mr_error *err) {
    forage_step_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s, d_actions);
    MR_CUDA_LAUNCHED("the environment step kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_forage_cuda_clear_logs(const mr_forage *s, void *stream, mr_error *err) {
    forage_clear_logs_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s);
    MR_CUDA_LAUNCHED("the environment log-clearing kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_forage_cuda_write_obs_all(const mr_forage *s, void *stream, mr_error *err) {
    forage_obs_kernel<<<mr_cuda_blocks(s->n, ENV_THREADS), ENV_THREADS, 0, as_stream(stream)>>>(*s);
    MR_CUDA_LAUNCHED("the observation kernel", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_forage_cuda_log_reduce(const mr_forage *s, mr_forage_log *d_out, void *stream,
                                               mr_error *err) {
    forage_log_reduce_kernel<<<1, LOG_THREADS, 0, as_stream(stream)>>>(*s, d_out);
    MR_CUDA_LAUNCHED("the episode-log reduction kernel", err);
    mr_ok(err);
    return MR_OK;
}

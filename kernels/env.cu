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

#include "foraging.h"   /* before the extern "C" block: MR_HD inline functions */
#include "cuda_check.h"
extern "C" {
#include "devmem.h"
#include "env.h"
#include "env_cuda.h"
}

#define ENV_THREADS 128
#define LOG_THREADS 256

/* ---------------------------------------------------------------- kernels */

__global__ void forage_reset_kernel(const __grid_constant__ mr_forage s) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_forage_reset_full(&s, i);
}

__global__ void forage_step_kernel(const __grid_constant__ mr_forage s, const uint8_t *__restrict__ actions) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < s.n) mr_forage_step(&s, i, actions[i]);
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

/* ------------------------------------------------------ the mr_env object */

typedef struct env_cuda {
    mr_env base;              /* first: an mr_env * of a CUDA env points here */
    int device;
    cudaStream_t stream;
    cudaEvent_t staged;       /* recorded after the action copy left the pinned buffer */
    int staged_pending;
    mr_devmem mem, pinned;
    int mem_ready, pinned_ready;
    void *d_block;            /* state, then actions */
    uint8_t *d_actions;
    uint8_t *h_actions;       /* pinned staging, n bytes */
    mr_forage_log *d_logsum;  /* one reduced log */
    size_t state_bytes;       /* the state part of d_block */
} env_cuda;

static env_cuda *as_cuda(const mr_env *e) { return (env_cuda *)e; }

extern "C" void mr_env_cuda_free(mr_env *e) {
    if (!e) return;
    env_cuda *c = as_cuda(e);
    (void)cudaSetDevice(c->device);
    if (c->stream) (void)cudaStreamSynchronize(c->stream);   /* nothing may still use the memory */
    if (c->staged) (void)cudaEventDestroy(c->staged);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    if (c->mem_ready) mr_devmem_destroy(&c->mem);
    if (c->pinned_ready) mr_devmem_destroy(&c->pinned);
    free(c);
}

static mr_status create_fail(env_cuda *c, mr_status st) {
    mr_env_cuda_free(&c->base);
    return st;
}

extern "C" mr_status mr_env_cuda_create(const mr_env_config *cfg, uint64_t seed, mr_env **out, mr_error *err) {
    *out = NULL;
    env_cuda *c = (env_cuda *)calloc(1, sizeof *c);
    if (!c) return mr_fail(err, MR_ERR_NOMEM, "mr_env_create: out of memory for the env object");
    c->base.cfg = *cfg;
    c->base.device = MR_DEVICE_CUDA;
    c->base.threads = 0;
    c->device = 0;
    mr_status st;
    if ((st = mr_cuda_status(cudaSetDevice(c->device), "cudaSetDevice(0)", err)) != MR_OK) return create_fail(c, st);
    if ((st = mr_cuda_status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags", err)) != MR_OK)
        return create_fail(c, st);
    if ((st = mr_cuda_status(cudaEventCreateWithFlags(&c->staged, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags", err)) != MR_OK)
        return create_fail(c, st);

    /* Device memory: one block, carved like the CPU arena. */
    mr_devmem_backend be;
    if ((st = mr_devmem_cuda_backend(c->device, &be, err)) != MR_OK) return create_fail(c, st);
    if ((st = mr_devmem_init(&c->mem, &be, NULL, err)) != MR_OK) return create_fail(c, st);
    c->mem_ready = 1;
    mr_arena plan = {NULL, 0, 0, 0};
    mr_forage_layout(&c->base.s, cfg, seed, &plan);
    c->state_bytes = plan.size;
    const size_t n = (size_t)cfg->num_envs;
    const size_t total = plan.size + mr_arena_round(n);
    if ((st = mr_devmem_alloc(&c->mem, total, "the environment state", &c->d_block, err)) != MR_OK) {
        if (err && st == MR_ERR_NOMEM) {
            const int fit = mr_env_cuda_max_envs(cfg, mr_devmem_fits(&c->mem), 1048576);
            const size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len,
                     " At most %d environments of %dx%d cells fit (env.num_envs = %d was asked).", fit,
                     cfg->grid_size, cfg->grid_size, cfg->num_envs);
        }
        return create_fail(c, st);
    }
    mr_arena dev = {NULL, 0, 0, 0};
    dev.base = (unsigned char *)c->d_block;   /* only carved: mr_arena_take never touches the memory */
    dev.size = plan.size;
    mr_forage_layout(&c->base.s, cfg, seed, &dev);
    c->d_actions = (uint8_t *)c->d_block + plan.size;
    void *d = NULL;
    if ((st = mr_devmem_alloc(&c->mem, sizeof(mr_forage_log), "the reduced episode log", &d, err)) != MR_OK)
        return create_fail(c, st);
    c->d_logsum = (mr_forage_log *)d;

    /* Pinned staging for the actions. */
    if ((st = mr_devmem_pinned_backend(&be, err)) != MR_OK) return create_fail(c, st);
    mr_devmem_config pc;
    mr_devmem_config_default(&pc);
    pc.memory_fraction = 0.5;
    if ((st = mr_devmem_init(&c->pinned, &be, &pc, err)) != MR_OK) return create_fail(c, st);
    c->pinned_ready = 1;
    void *h = NULL;
    if ((st = mr_devmem_alloc(&c->pinned, n, "the pinned action buffer", &h, err)) != MR_OK) return create_fail(c, st);
    c->h_actions = (uint8_t *)h;

    /* As the CPU: zeroed memory, logs cleared, every instance fully reset. */
    if ((st = mr_cuda_status(cudaMemsetAsync(c->d_block, 0, total, c->stream), "cudaMemsetAsync", err)) != MR_OK)
        return create_fail(c, st);
    if ((st = mr_forage_cuda_clear_logs(&c->base.s, c->stream, err)) != MR_OK) return create_fail(c, st);
    if ((st = mr_forage_cuda_reset_all(&c->base.s, c->stream, err)) != MR_OK) return create_fail(c, st);
    if ((st = mr_cuda_status(cudaStreamSynchronize(c->stream), "the environment's first reset", err)) != MR_OK)
        return create_fail(c, st);
    *out = &c->base;
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_reset(mr_env *e, mr_error *err) {
    env_cuda *c = as_cuda(e);
    MR_CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice", err);
    return mr_forage_cuda_reset_all(&e->s, c->stream, err);
}

extern "C" mr_status mr_env_cuda_step(mr_env *e, const uint8_t *actions, mr_error *err) {
    env_cuda *c = as_cuda(e);
    const size_t n = (size_t)e->s.n;
    MR_CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice", err);
    /* The previous step's copy must have left the staging buffer before it is
     * overwritten; it was queued before that step's kernel, so this waits for
     * a copy, not for the kernel before it. */
    if (c->staged_pending) MR_CUDA_TRY(cudaEventSynchronize(c->staged), "waiting for the last action copy", err);
    memcpy(c->h_actions, actions, n);
    MR_CUDA_TRY(cudaMemcpyAsync(c->d_actions, c->h_actions, n, cudaMemcpyHostToDevice, c->stream),
                "copying the actions to the GPU", err);
    MR_CUDA_TRY(cudaEventRecord(c->staged, c->stream), "cudaEventRecord", err);
    c->staged_pending = 1;
    return mr_forage_cuda_step_all(&e->s, c->d_actions, c->stream, err);
}

static mr_status copy_out(void *dst, const void *src, size_t bytes, cudaStream_t stream, const char *what,
                          mr_error *err) {
    if (!dst) return MR_OK;
    return mr_cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), what, err);
}

extern "C" mr_status mr_env_cuda_read(const mr_env *e, mr_env_view *o, mr_error *err) {
    const env_cuda *c = as_cuda(e);
    const mr_forage *s = &e->s;
    const size_t n = (size_t)s->n;
    cudaStream_t st = c->stream;
    mr_status r;
    MR_CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice", err);
    if ((r = copy_out(o->obs, s->obs, n * s->V * s->V, st, "reading obs", err)) != MR_OK) return r;
    if ((r = copy_out(o->reward, s->reward, n * sizeof(float), st, "reading reward", err)) != MR_OK) return r;
    if ((r = copy_out(o->terminated, s->terminated, n, st, "reading terminated", err)) != MR_OK) return r;
    if ((r = copy_out(o->truncated, s->truncated, n, st, "reading truncated", err)) != MR_OK) return r;
    if ((r = copy_out(o->grid, s->grid, n * s->H * s->W, st, "reading the grid", err)) != MR_OK) return r;
    if ((r = copy_out(o->x, s->x, n * sizeof(int32_t), st, "reading x", err)) != MR_OK) return r;
    if ((r = copy_out(o->y, s->y, n * sizeof(int32_t), st, "reading y", err)) != MR_OK) return r;
    if ((r = copy_out(o->energy, s->energy, n * sizeof(float), st, "reading energy", err)) != MR_OK) return r;
    MR_CUDA_TRY(cudaStreamSynchronize(st), "the environment's GPU work (a step or reset kernel)", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_download(const mr_env *e, mr_forage *host, mr_error *err) {
    const env_cuda *c = as_cuda(e);
    const mr_forage *s = &e->s;
    if (!host || host->n != s->n || host->H != s->H || host->W != s->W || host->V != s->V || !host->grid ||
        (const uint8_t *)host->log - host->grid != (const uint8_t *)s->log - s->grid)
        return mr_fail(err, MR_ERR_ARG, "mr_env_cuda_download: the host state is not laid out like the GPU's "
                       "(lay it out with mr_forage_layout and the same config)");
    MR_CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice", err);
    MR_CUDA_TRY(cudaMemcpyAsync(host->grid, s->grid, c->state_bytes, cudaMemcpyDeviceToHost, c->stream),
                "downloading the environment state", err);
    MR_CUDA_TRY(cudaStreamSynchronize(c->stream), "downloading the environment state", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_log_summary(const mr_env *e, mr_forage_log *out, mr_error *err) {
    const env_cuda *c = as_cuda(e);
    MR_CUDA_TRY(cudaSetDevice(c->device), "cudaSetDevice", err);
    mr_status st = mr_forage_cuda_log_reduce(&e->s, c->d_logsum, c->stream, err);
    if (st != MR_OK) return st;
    MR_CUDA_TRY(cudaMemcpyAsync(out, c->d_logsum, sizeof *out, cudaMemcpyDeviceToHost, c->stream),
                "reading the reduced log", err);
    MR_CUDA_TRY(cudaStreamSynchronize(c->stream), "the episode-log reduction", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_env_cuda_memory(const mr_env *e, mr_devmem_stats *out, mr_error *err) {
    mr_devmem_stats_get(&as_cuda(e)->mem, out);
    mr_ok(err);
    return MR_OK;
}

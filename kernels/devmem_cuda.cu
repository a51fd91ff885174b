/*
 * devmem_cuda.cu - the raw backends under the device memory manager
 * (src/engine/devmem.h): device memory through cudaMalloc / cudaFree /
 * cudaMemGetInfo, and page-locked host memory for staging copies through
 * cudaHostAlloc / cudaFreeHost. No tensors here: the caching, the limit and
 * the OOM message are devmem.c's, tested on the CPU.
 *
 * The device backend keeps its GPU index in the context pointer itself, so it
 * owns no memory. Each call selects that GPU first (the current device is per
 * host thread, and the trainer runs on its own thread).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <unistd.h>
#include "cuda_check.h"
extern "C" {
#include "devmem_cuda.h"
}

static int ctx_device(void *ctx) { return (int)(intptr_t)ctx; }

static void *dev_alloc(void *ctx, size_t bytes, const char **reason) {
    void *p = NULL;
    cudaError_t e = cudaSetDevice(ctx_device(ctx));
    if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   /* an allocation failure is not sticky: clear it */
        *reason = cudaGetErrorString(e);
        return NULL;
    }
    return p;
}

static void dev_free(void *ctx, void *p) {
    /* cudaFree waits for the device; a failure here (a context already broken
     * by a kernel fault) has been reported where it happened. */
    if (cudaSetDevice(ctx_device(ctx)) != cudaSuccess || cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

static size_t dev_free_bytes(void *ctx) {
    size_t fr = 0, total = 0;
    if (cudaSetDevice(ctx_device(ctx)) != cudaSuccess || cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fr;
}

static const char *const dev_names[] = {"GPU 0", "GPU 1", "GPU 2", "GPU 3", "GPU 4", "GPU 5", "GPU 6", "GPU 7"};

extern "C" mr_status mr_devmem_cuda_backend(int device, mr_devmem_backend *out, mr_error *err) {
    int n = 0;
    MR_CUDA_TRY(cudaGetDeviceCount(&n), "cudaGetDeviceCount", err);
    if (device < 0 || device >= n)
        return mr_fail(err, MR_ERR_ARG, "cuda.device_index = %d: this machine has %d GPU(s); accepted 0 .. %d",
                       device, n, n - 1);
    size_t fr = 0, total = 0;
    MR_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice", err);
    MR_CUDA_TRY(cudaMemGetInfo(&fr, &total), "cudaMemGetInfo", err);
    out->ctx = (void *)(intptr_t)device;
    out->raw_alloc = dev_alloc;
    out->raw_free = dev_free;
    out->free_bytes = dev_free_bytes;
    out->total_bytes = total;
    out->name = device < 8 ? dev_names[device] : "GPU";
    mr_ok(err);
    return MR_OK;
}

static void *pinned_alloc(void *ctx, size_t bytes, const char **reason) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *reason = cudaGetErrorString(e);
        return NULL;
    }
    return p;
}

static void pinned_free(void *ctx, void *p) {
    if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

static size_t pinned_free_bytes(void *ctx) {
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

extern "C" mr_status mr_devmem_pinned_backend(mr_devmem_backend *out, mr_error *err) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return mr_fail(err, MR_ERR_BACKEND, "pinned memory: cannot read the host's memory size (sysconf)");
    out->ctx = NULL;
    out->raw_alloc = pinned_alloc;
    out->raw_free = pinned_free;
    out->free_bytes = pinned_free_bytes;
    out->total_bytes = (size_t)pages * (size_t)page;
    out->name = "pinned host";
    mr_ok(err);
    return MR_OK;
}

/* ----------------------------------------------------- moving memory, for C */

extern "C" mr_status mr_cuda_copy(void *dst, const void *src, size_t bytes, int kind, void *stream,
                                  mr_error *err) {
    const cudaMemcpyKind k = kind == MR_COPY_H2D ? cudaMemcpyHostToDevice
                           : kind == MR_COPY_D2H ? cudaMemcpyDeviceToHost
                           : kind == MR_COPY_D2D ? cudaMemcpyDeviceToDevice : cudaMemcpyDefault;
    if (kind < MR_COPY_H2D || kind > MR_COPY_D2D)
        return mr_fail(err, MR_ERR_ARG, "mr_cuda_copy: kind = %d: accepted MR_COPY_H2D, MR_COPY_D2H, MR_COPY_D2D",
                       kind);
    MR_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)stream), "cudaMemcpyAsync", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_memset(void *dst, int value, size_t bytes, void *stream, mr_error *err) {
    MR_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream), "cudaMemsetAsync", err);
    mr_ok(err);
    return MR_OK;
}

extern "C" mr_status mr_cuda_stream_create(void **stream, mr_error *err) {
    cudaStream_t s = NULL;
    *stream = NULL;
    MR_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", err);
    *stream = (void *)s;
    mr_ok(err);
    return MR_OK;
}

extern "C" void mr_cuda_stream_destroy(void *stream) {
    if (stream && cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" mr_status mr_cuda_stream_sync(void *stream, mr_error *err) {
    MR_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream), "the GPU work on this stream", err);
    mr_ok(err);
    return MR_OK;
}

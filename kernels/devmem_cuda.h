/*
 * devmem_cuda.h - the CUDA backend's side of the memory manager
 * (core/interface/devmem.h): the raw allocators the manager sits on, and
 * copies, fills and streams for the backend's plain C code and the GPU
 * tests. Defined in kernels/devmem_cuda.cu; CUDA builds only.
 */
#ifndef MR_DEVMEM_CUDA_H
#define MR_DEVMEM_CUDA_H
#include "devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef MOONRL_HAVE_CUDA
/* Raw backends over the CUDA runtime (kernels/devmem_cuda.cu). */
/* cudaMalloc / cudaFree / cudaMemGetInfo on GPU `device`. */
mr_status mr_devmem_cuda_backend(int device, mr_devmem_backend *out, mr_error *err);
/* cudaHostAlloc / cudaFreeHost: page-locked host memory for staging copies;
 * total and free bytes are the host's physical memory. */
mr_status mr_devmem_pinned_backend(mr_devmem_backend *out, mr_error *err);

/* Moving memory, for code that is plain C (tests, the trainer). All
 * asynchronous on `stream` (a cudaStream_t as void *, NULL = legacy default).
 * The copy kinds are above, outside this block. */
mr_status mr_cuda_copy(void *dst, const void *src, size_t bytes, int kind, void *stream, mr_error *err);
mr_status mr_cuda_memset(void *dst, int value, size_t bytes, void *stream, mr_error *err);
/* A non-blocking stream on the current GPU. */
mr_status mr_cuda_stream_create(void **stream, mr_error *err);
void mr_cuda_stream_destroy(void *stream);
/* Waits for the stream; reports any earlier asynchronous failure on it. */
mr_status mr_cuda_stream_sync(void *stream, mr_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MR_DEVMEM_CUDA_H */

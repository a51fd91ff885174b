/*
 * gpu_check.h - the few helpers of the PPO kernel tests (test_cuda_ppo.c,
 * test_cuda_loss.c, test_cuda_popart.c): a bitwise float compare always; in
 * a CUDA build one device and one pinned allocator, one stream, copies, a
 * checked sync, OK(call), a clock. Include after check.h. Not a framework:
 * each test calls gpu_open() once, runs its checks, gpu_close().
 */
#ifndef MR_GPU_CHECK_H
#define MR_GPU_CHECK_H
#include <stddef.h>
#include <string.h>

/* How many of n floats differ bit for bit. */
static inline size_t ndiff(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}

#ifdef MOONRL_HAVE_CUDA
#include <time.h>
#include "devmem_cuda.h"

static mr_devmem dev, pin;
static void *stream;

static inline void *dalloc(size_t bytes) {
    void *p = NULL;
    mr_error e;
    if (mr_devmem_alloc(&dev, bytes, "test buffer", &p, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
    return p;
}
static inline void *halloc(size_t bytes) {
    void *p = NULL;
    mr_error e;
    if (mr_devmem_alloc(&pin, bytes, "pinned test buffer", &p, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
    return p;
}
static inline void up(void *d, const void *h, size_t bytes) {
    mr_error e;
    if (mr_cuda_copy(d, h, bytes, MR_COPY_H2D, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static inline void down(void *h, const void *d, size_t bytes) {   /* asynchronous */
    mr_error e;
    if (mr_cuda_copy(h, d, bytes, MR_COPY_D2H, stream, &e) != MR_OK) CHECK_MSG(0, "%s", e.msg);
}
static inline int sync_ok(const char *what) {
    mr_error e;
    mr_status s = mr_cuda_stream_sync(stream, &e);
    CHECK_MSG(s == MR_OK, "%s: %s", what, e.msg);
    return s == MR_OK;
}
/* `call` must take &e_ as its error argument. */
#define OK(call) do { mr_error e_; mr_status s_ = (call); CHECK_MSG(s_ == MR_OK, "%s: %s", #call, e_.msg); } while (0)

static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Device 0's allocator, a pinned one and a stream; 0 (and a failed check) if
 * any of them cannot be had. */
static inline int gpu_open(void) {
    mr_error e;
    mr_devmem_backend be;
    if (mr_devmem_cuda_backend(0, &be, &e) != MR_OK || mr_devmem_init(&dev, &be, NULL, &e) != MR_OK) {
        CHECK_MSG(0, "%s", e.msg);
        return 0;
    }
    if (mr_devmem_pinned_backend(&be, &e) != MR_OK || mr_devmem_init(&pin, &be, NULL, &e) != MR_OK ||
        mr_cuda_stream_create(&stream, &e) != MR_OK) {
        CHECK_MSG(0, "%s", e.msg);
        return 0;
    }
    return 1;
}
static inline void gpu_close(void) {
    mr_cuda_stream_sync(stream, NULL);
    mr_cuda_stream_destroy(stream);
    mr_devmem_destroy(&dev);
    mr_devmem_destroy(&pin);
}

#endif /* MOONRL_HAVE_CUDA */
#endif /* MR_GPU_CHECK_H */

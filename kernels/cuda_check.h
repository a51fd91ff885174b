/*
 * cuda_check.h - turning CUDA runtime statuses into mr_error messages, for the
 * .cu files of kernels/. Never aborts: a failure is a status and a message
 * that names the call, the runtime's error name and its explanation.
 *
 * A "sticky" error (an illegal address or a kernel fault inside a kernel)
 * leaves the CUDA context unusable for the rest of the process; the message
 * says so, so a person knows a restart is needed, not a retry.
 */
#ifndef MR_CUDA_CHECK_H
#define MR_CUDA_CHECK_H
#include <cuda_runtime.h>
extern "C" {
#include "errors.h"
}

/* MR_OK when e == cudaSuccess; otherwise fills err and returns MR_ERR_BACKEND
 * (MR_ERR_NOMEM for an allocation failure). The non-sticky error is cleared
 * so the next call does not see it again. */
static inline mr_status mr_cuda_status(cudaError_t e, const char *what, mr_error *err) {
    if (e == cudaSuccess) return MR_OK;
    (void)cudaGetLastError();
    const int sticky = e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
                       e == cudaErrorHardwareStackError || e == cudaErrorIllegalInstruction ||
                       e == cudaErrorMisalignedAddress || e == cudaErrorInvalidAddressSpace ||
                       e == cudaErrorInvalidPc || e == cudaErrorAssert;
    return mr_fail(err, e == cudaErrorMemoryAllocation ? MR_ERR_NOMEM : MR_ERR_BACKEND,
                   "CUDA error in %s: %s (%s)%s", what, cudaGetErrorName(e), cudaGetErrorString(e),
                   sticky ? "; the GPU context is now unusable in this process: restart it" : "");
}

/* Evaluates a CUDA call; on failure returns its mr_status from the enclosing function. */
#define MR_CUDA_TRY(call, what, err)                                   \
    do {                                                               \
        mr_status st_ = mr_cuda_status((call), (what), (err));         \
        if (st_ != MR_OK) return st_;                                  \
    } while (0)

/* After a kernel launch: launch-configuration errors show at once. */
#define MR_CUDA_LAUNCHED(what, err) MR_CUDA_TRY(cudaGetLastError(), (what), (err))

/* A required device-pointer argument (the enclosing function has `err`). */
#define MR_CUDA_NEED(p, who, name)                                                                          \
    do {                                                                                                    \
        if (!(p)) return mr_fail(err, MR_ERR_ARG, "%s: %s is NULL (a device pointer is needed)", who, name); \
    } while (0)

/* Blocks of `threads` covering n items (n > 0). */
static inline unsigned mr_cuda_blocks(long long n, int threads) {
    return (unsigned)((n + threads - 1) / threads);
}

#endif /* MR_CUDA_CHECK_H */

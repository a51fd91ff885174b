/*
 * device.cu - CUDA device discovery for the engine (see kernels/cuda_probe.c).
 *
 * A GPU counts when this build can run kernels on it: the kernels are built
 * for sm_90 (Hopper: H100, H200), and their PTX loads on anything newer, so a
 * device of compute capability below 9.0 is not counted.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_check.h"

extern "C" int mr_cuda_runtime_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error: no driver / no GPU is not fatal */
        return 0;
    }
    int usable = 0;
    for (int d = 0; d < n; d++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        if (major >= 9) usable++;
    }
    return usable;
}

extern "C" mr_status mr_cuda_runtime_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes,
                                                   mr_error *err) {
    MR_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice", err);
    size_t f = 0, t = 0;
    MR_CUDA_TRY(cudaMemGetInfo(&f, &t), "cudaMemGetInfo", err);
    *free_bytes = f;
    *total_bytes = t;
    mr_ok(err);
    return MR_OK;
}

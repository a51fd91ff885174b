/*
 * cuda_probe.c - whether a usable GPU exists. Built without CUDA, the answer
 * is always 0; with CUDA it asks the runtime (kernels/device.cu), which
 * answers 0 on a machine without a GPU or driver instead of failing. The
 * count reaches core through the cuda table (device_count), and moonrl.h's
 * mr_cuda_device_count is core's answer from it.
 */
#include "moonrl.h"
#include "errors.h"
#include "cuda_probe.h"

#ifdef MOONRL_HAVE_CUDA
int mr_cuda_runtime_device_count(void); /* kernels/device.cu */
mr_status mr_cuda_runtime_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, mr_error *err);
int mr_cuda_probe_device_count(void) { return mr_cuda_runtime_device_count(); }
mr_status mr_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, mr_error *err) {
    if (!free_bytes || !total_bytes) return mr_fail(err, MR_ERR_ARG, "mr_cuda_device_memory: NULL argument");
    const int n = mr_cuda_probe_device_count();
    if (device < 0 || device >= n)
        return mr_fail(err, MR_ERR_BACKEND, "CUDA device %d does not exist: this machine has %d usable GPU%s",
                       device, n, n == 1 ? "" : "s");
    return mr_cuda_runtime_device_memory(device, free_bytes, total_bytes, err);
}
#else
int mr_cuda_probe_device_count(void) { return 0; }
mr_status mr_cuda_device_memory(int device, uint64_t *free_bytes, uint64_t *total_bytes, mr_error *err) {
    (void)device;
    if (free_bytes) *free_bytes = 0;
    if (total_bytes) *total_bytes = 0;
    return mr_fail(err, MR_ERR_BACKEND, "this build has no CUDA backend (nvcc was not found when it was built)");
}
#endif

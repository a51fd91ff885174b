/*
 * cuda_probe.c - whether a usable GPU exists. Built without CUDA, the answer
 * is always 0; with CUDA it asks the runtime (kernels/device.cu), which
 * answers 0 on a machine without a GPU or driver instead of failing.
 */
#include "moonrl.h"

#ifdef MOONRL_HAVE_CUDA
int mr_cuda_runtime_device_count(void); /* kernels/device.cu */
int mr_cuda_device_count(void) { return mr_cuda_runtime_device_count(); }
#else
int mr_cuda_device_count(void) { return 0; }
#endif

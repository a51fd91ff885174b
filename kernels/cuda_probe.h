/*
 * cuda_probe.h - how many GPUs this build can use (cuda_probe.c): 0 in a
 * build without CUDA or on a machine without a GPU or driver. It reaches core
 * through the cuda table's device_count.
 */
#ifndef MR_CUDA_PROBE_H
#define MR_CUDA_PROBE_H

int mr_cuda_probe_device_count(void);

#endif /* MR_CUDA_PROBE_H */

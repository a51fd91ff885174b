/*
 * bf16.h - the cpu backend's bf16 support, used by both oneDNN layers
 * (conv_dnnl.c, linear_dnnl.c): whether this CPU has the instructions, and
 * the one fp32 -> bf16 conversion.
 */
#ifndef MR_BF16_H
#define MR_BF16_H
#include <stddef.h>
#include <stdint.h>

/* The bf16 ISA oneDNN will use on this CPU ("avx512_core_bf16",
 * "avx512_core_amx"), or NULL: none (then a bf16 layout refuses). oneDNN
 * reads ONEDNN_MAX_CPU_ISA once per process, which can lower the answer. */
const char *mr_bf16_isa(void);
/* dst[i] = bf16(src[i]), round to nearest even (vcvtneps2bf16: a NaN stays
 * a NaN, so a fault still shows; a denormal input becomes a signed zero, the
 * instruction's DAZ); OpenMP over the elements above a size (elementwise:
 * bits independent of threads). The one fp32 -> bf16 conversion of the cpu
 * backend (conv_dnnl.c's chunks and linear_dnnl.c's operands). Only on a CPU with AVX512-BF16. */
void mr_bf16_from_f32(uint16_t *dst, const float *src, size_t n);

#endif /* MR_BF16_H */

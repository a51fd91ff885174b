/*
 * number_formats.h - the storage types of the CUDA policy network
 * (mr_precision: fp32, bf16, fp16) as MR_HD functions, plain C that also
 * compiles as CUDA C++: a float's bits, bf16 and IEEE half to and from
 * float (rounding to nearest even, the same integer code on the host and
 * the device, so both round identically), and loads, stores and moves of
 * element i of a buffer of either type. The prefix mr_pc_ is the CUDA
 * policy's ("policy, CUDA": policy_layers.h, docs/cuda.md's glossary).
 */
#ifndef MR_NUMBER_FORMATS_H
#define MR_NUMBER_FORMATS_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rng.h"      /* MR_HD */
#include "moonrl.h"   /* MR_FP32, MR_BF16, MR_FP16 */

MR_HD uint32_t mr_pc_fbits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
MR_HD float mr_pc_bitsf(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* bf16: the top half of a float; rounding to nearest even, NaN stays NaN. */
MR_HD float mr_bf16_to_f(uint16_t h) { return mr_pc_bitsf((uint32_t)h << 16); }
MR_HD uint16_t mr_f_to_bf16(float f) {
    uint32_t u = mr_pc_fbits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE half: exact to float; from float rounding to nearest even with
 * subnormals, overflow to inf, NaN stays NaN. The same integer code runs on
 * the host and the device, so both round identically. */
MR_HD float mr_half_to_f(uint16_t h) {
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return mr_pc_bitsf(s | 0x7f800000u | (m << 13));
    if (e) return mr_pc_bitsf(s | ((e + 112u) << 23) | (m << 13));
    const float v = (float)m * 5.9604644775390625e-8f;   /* m * 2^-24, exact */
    return s ? -v : v;
}
MR_HD uint16_t mr_f_to_half(float f) {
    const uint32_t u = mr_pc_fbits(f), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);           /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);          /* >= 65520: inf */
    if (a >= 0x38800000u) {                                          /* normal: >= 2^-14 */
        uint32_t r = a - 0x38000000u;                                /* exponent rebiased 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(s | (r >> 13));
    }
    const uint32_t e = a >> 23;
    if (e < 102u) return (uint16_t)s;                                /* below 2^-25: 0 */
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e;  /* value / 2^-24 = m >> sh */
    uint32_t q = m >> sh;
    const uint32_t rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(s | q);
}

MR_HD int mr_pc_esize(int dt) { return dt == MR_FP32 ? 4 : 2; }

MR_HD float mr_pc_ld(const void *p, size_t i, int dt) {
    if (dt == MR_FP32) return ((const float *)p)[i];
    if (dt == MR_BF16) return mr_bf16_to_f(((const uint16_t *)p)[i]);
    return mr_half_to_f(((const uint16_t *)p)[i]);
}
MR_HD void mr_pc_st(void *p, size_t i, int dt, float v) {
    if (dt == MR_FP32) ((float *)p)[i] = v;
    else if (dt == MR_BF16) ((uint16_t *)p)[i] = mr_f_to_bf16(v);
    else ((uint16_t *)p)[i] = mr_f_to_half(v);
}
/* dst[i] = src[k], bits unchanged. */
MR_HD void mr_pc_mov(void *dst, size_t i, const void *src, size_t k, int dt) {
    if (dt == MR_FP32) ((float *)dst)[i] = ((const float *)src)[k];
    else ((uint16_t *)dst)[i] = ((const uint16_t *)src)[k];
}

#endif /* MR_NUMBER_FORMATS_H */

/*
 * bf16.c - the cpu backend's bf16 support (see bf16.h).
 */
#include "bf16.h"
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>

#define LIN_CVT_PAR_MIN (1 << 16)

const char *mr_bf16_isa(void) {
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx) return "avx512_core_amx";
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16) return "avx512_core_bf16";
    return NULL;
}

__attribute__((target("avx512f,avx512bf16,avx512vl")))
static void cvt_run(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)h);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16((__m256i *)(dst + i), m, (__m256i)h);
    }
}

/* Only called where the CPU has AVX512-BF16 (mr_linear_dnnl_create and conv_dnnl.c checked mr_bf16_isa):
 * vcvtneps2bf16 rounds to nearest even and keeps NaNs NaN, as oneDNN does. */
void mr_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
    if (n < LIN_CVT_PAR_MIN) { cvt_run(dst, src, n); return; }
    const size_t piece = 1 << 14;
    const long np = (long)((n + piece - 1) / piece);
    #pragma omp parallel for schedule(static)
    for (long k = 0; k < np; k++) {
        size_t o = (size_t)k * piece, m = n - o < piece ? n - o : piece;
        cvt_run(dst + o, src + o, m);
    }
}


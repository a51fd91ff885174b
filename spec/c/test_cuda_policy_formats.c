/*
 * test_cuda_policy_formats.c - the CUDA policy's storage formats
 * (kernels/policy_math.h): the bf16 and fp16 conversions the kernels and the
 * emulated schedule both use, against their definitions and, for fp16,
 * against the compiler's _Float16 where it has one.
 *
 * bf16: every one of the 65,536 values round-trips; round to nearest even on
 * ties; NaN stays NaN; FLT_MAX rounds to inf. fp16: every value round-trips;
 * known values, subnormals, ties to even, overflow to inf; then the midpoint
 * of every pair of neighbouring halves, its float neighbours and a million
 * random floats converted by mr_f_to_half and by (_Float16). Also the element
 * access helpers (mr_pc_ld / mr_pc_st / mr_pc_esize). CPU only: the GPU
 * kernels run these very MR_HD functions. MOONRL_TEST_SEED=n draws other
 * random floats.
 */
#include "policy_check.h"

/* ================================================================ CPU: formats */

static void test_formats(void) {
    /* bf16: exact back and forth, round to nearest even, NaN, inf */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = mr_bf16_to_f((uint16_t)h);
        const int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (nan ? f == f : mr_f_to_bf16(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
    CHECK(mr_f_to_bf16(1.0f) == 0x3f80 && mr_f_to_bf16(-2.0f) == 0xc000);
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x3f808000u)) == 0x3f80);   /* tie -> even */
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x3f818000u)) == 0x3f82);   /* tie -> even (up) */
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x3f808001u)) == 0x3f81);   /* above the tie */
    CHECK(mr_f_to_bf16(mr_pc_bitsf(0x7f7fffffu)) == 0x7f80);   /* FLT_MAX rounds to inf */
    const uint16_t bn = mr_f_to_bf16(mr_pc_bitsf(0x7f800001u));
    CHECK((bn & 0x7f80) == 0x7f80 && (bn & 0x7f));              /* a NaN with a low payload stays NaN */
    /* fp16: every half round-trips; known values; ties; subnormals; overflow */
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = mr_half_to_f((uint16_t)h);
        const int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? f == f : mr_f_to_half(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d fp16 values do not round-trip", bad);
    CHECK(mr_half_to_f(0x3c00) == 1.0f && mr_half_to_f(0x7bff) == 65504.0f && mr_half_to_f(0x0001) == 5.9604644775390625e-8f);
    CHECK(mr_half_to_f(0x8400) == -6.103515625e-5f && mr_half_to_f(0x03ff) == 6.09755516052246094e-5f);
    CHECK(mr_f_to_half(65519.99f) == 0x7bff && mr_f_to_half(65520.0f) == 0x7c00 && mr_f_to_half(-1e9f) == 0xfc00);
    CHECK(mr_f_to_half(2.98023223876953125e-8f) == 0x0000);   /* 2^-25: tie between 0 and 2^-24 -> even (0) */
    CHECK(mr_f_to_half(2.98023259e-8f) == 0x0001);            /* just above */
    CHECK(mr_f_to_half(8.94069671630859375e-8f) == 0x0002);   /* 1.5 * 2^-24: tie -> even (2) */
#ifdef __FLT16_MAX__
    /* against the compiler's conversion (round to nearest even) on the
     * midpoints of every pair of neighbouring halves, their neighbours, and
     * random floats */
    bad = 0;
    long tried = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const float a = mr_half_to_f((uint16_t)h), b = mr_half_to_f((uint16_t)(h + 1));
        const float mid = (float)(((double)a + (double)b) / 2.0);
        const uint32_t mb = mr_pc_fbits(mid);
        const float probes[5] = {mid, mr_pc_bitsf(mb - 1), mr_pc_bitsf(mb + 1), -mid, a};
        for (int q = 0; q < 5; q++) {
            const _Float16 ref = (_Float16)probes[q];
            uint16_t rb;
            memcpy(&rb, &ref, 2);
            bad += rb != mr_f_to_half(probes[q]);
            tried++;
        }
    }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = u32rand();
        if (i & 1) u = (u & 0x80000000u) | (0x30000000u + (u & 0x17ffffffu));   /* dense near half's range */
        const float f = mr_pc_bitsf(u);
        if (f != f) continue;
        const _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        bad += rb != mr_f_to_half(f);
        tried++;
    }
    CHECK_MSG(bad == 0, "%d of %ld float -> fp16 conversions differ from _Float16", bad, tried);
#endif
    /* the element access helpers */
    float fv[2] = {1.5f, -3.25f};
    uint16_t hv[2];
    mr_pc_st(hv, 0, MR_BF16, fv[0]);
    mr_pc_st(hv, 1, MR_FP16, fv[1]);
    CHECK(mr_pc_ld(hv, 0, MR_BF16) == 1.5f && mr_pc_ld(hv, 1, MR_FP16) == -3.25f && mr_pc_ld(fv, 1, MR_FP32) == -3.25f);
    CHECK(mr_pc_esize(MR_FP32) == 4 && mr_pc_esize(MR_BF16) == 2 && mr_pc_esize(MR_FP16) == 2);
}

int main(int argc, char **argv) {
    policy_check_init(argc, argv);
    policy_check_at(PC_AT_FORMATS);
    test_formats();
    return check_report("test_cuda_policy_formats");
}

/*
 * build_info.c - what a bug report needs to know about this build and this
 * machine (mr_build_info, `moonrl version`): the commit and compiler it was
 * built with and how, the CUDA toolkit it was compiled against, the BLAS the
 * cpu backend runs and its kernel set, and the CPU features in use.
 */
#include "moonrl.h"
#include "backend.h"   /* the cpu backend says what BLAS it runs */
#include "errors.h"

#include <stdio.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#ifndef MR_BUILD_COMMIT
#define MR_BUILD_COMMIT "unknown"
#endif
#ifndef MR_BUILD_TYPE
#define MR_BUILD_TYPE "unknown"
#endif
#ifndef MR_BUILD_FLAGS
#define MR_BUILD_FLAGS ""
#endif

/* The x86 features the engine's speed depends on, as this CPU reports them. */
static void cpu_features(char *buf, size_t len) {
    buf[0] = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    int avx512f = 0, avx512bf16 = 0, amx_tile = 0, amx_bf16 = 0, avx2 = 0, fma = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) fma = (c >> 12) & 1;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        avx2 = (b >> 5) & 1;
        avx512f = (b >> 16) & 1;
        amx_bf16 = (d >> 22) & 1;
        amx_tile = (d >> 24) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512bf16 = (a >> 5) & 1;
    snprintf(buf, len, "%s%s%s%s%s%s", avx2 ? "avx2 " : "", fma ? "fma " : "", avx512f ? "avx512f " : "",
             avx512bf16 ? "avx512_bf16 " : "", amx_tile ? "amx_tile " : "", amx_bf16 ? "amx_bf16 " : "");
    const size_t n = strlen(buf);
    if (n) buf[n - 1] = 0;
    else snprintf(buf, len, "none of avx2, fma, avx512");
#else
    snprintf(buf, len, "not an x86 CPU");
#endif
}

const char *mr_build_info(void) {
    static _Thread_local char text[1024];
    char features[128];
    cpu_features(features, sizeof features);
    snprintf(text, sizeof text,
             "build: commit %s, %s, %s %s, flags %s\n"
             "cuda: %s\n"
             "blas: %s\n"
             "cpu: %s (compiled for x86-64-v3: avx2, fma)",
             MR_BUILD_COMMIT, MR_BUILD_TYPE,
#if defined(__clang__)
             "clang", __clang_version__,
#elif defined(__GNUC__)
             "gcc", __VERSION__,
#else
             "cc", "?",
#endif
             MR_BUILD_FLAGS,
#ifdef MOONRL_HAVE_CUDA
#ifdef MR_CUDA_VERSION
             "backend built with CUDA " MR_CUDA_VERSION " for sm_90 (cuBLAS and, for cuda.conv, cuDNN loaded at run time)",
#else
             "backend built (CUDA version unknown; cuBLAS and, for cuda.conv, cuDNN loaded at run time)",
#endif
#else
             "no CUDA backend in this build",
#endif
             mr_backend_host()->blas ? mr_backend_host()->blas() : "none", features);
    return text;
}

/* moonrl.h's answers about the machine that the backends know, through their
 * tables (core calls a backend only so). */
const char *mr_blas_kernels(void) {
    const mr_backend *h = mr_backend_host();
    return h->blas_kernels ? h->blas_kernels() : "none";
}

const char *mr_blas_better_kernels(void) {
    const mr_backend *h = mr_backend_host();
    return h->blas_better_kernels ? h->blas_better_kernels() : NULL;
}

int mr_cuda_device_count(void) {
    const mr_backend *c = mr_backend_for(MR_DEVICE_CUDA);
    return c->device_count ? c->device_count() : 0;
}

const char *mr_cuda_cudnn(void) {
    const mr_backend *c = mr_backend_for(MR_DEVICE_CUDA);
    return c->cudnn ? c->cudnn() : "no CUDA backend in this build";
}

mr_status mr_cuda_conv_time(int device, int H, int W, int C, int OC, int chunk, int precision, int reps,
                            mr_cuda_conv_timing *out, mr_error *err) {
    const mr_backend *c = mr_backend_for(MR_DEVICE_CUDA);
    if (!c->conv_time)
        return mr_fail(err, MR_ERR_BACKEND, "mr_cuda_conv_time: %s",
                       c->unavailable ? c->unavailable : "the cuda backend cannot time convolutions");
    return c->conv_time(device, H, W, C, OC, chunk, precision, reps, out, err);
}

/*
 * dynlib.h - loading a CUDA library at run time (dlopen, never linked), as
 * the backend loads cuBLAS (policy.cu), cuBLASLt (gemm_lt.cu) and cuDNN
 * (conv_cudnn.cu): linked, their ~1 GB of shared objects would cost every
 * run of the CPU backend time and resident memory. The soname is the major
 * version the kernels were compiled against; the loader's search path
 * (LD_LIBRARY_PATH, the binaries' RUNPATH) is tried first, then the
 * toolkit's library directory (MR_CUDA_LIBDIR, from CMake). Host code.
 */
#ifndef MR_DYNLIB_H
#define MR_DYNLIB_H
#include <dlfcn.h>
#include <stdio.h>

/* The library `soname` (`what`: its name in messages, "cuDNN"), or NULL
 * with why = "cannot load cuDNN (libcudnn.so.9, also tried DIR/): ...". */
static inline void *mr_dynlib_open(const char *soname, const char *what, char *why, size_t len) {
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", MR_CUDA_LIBDIR, soname);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(why, len, "cannot load %s (%s, also tried %s/): %s", what, soname, MR_CUDA_LIBDIR,
                 e ? e : "not found");
    }
    return h;
}

/* Each of the n symbols names[i] of h into *slots[i]; 1, or 0 with why =
 * "SONAME has no symbol NAME (a different WHAT version?)" for the first
 * one missing. */
static inline int mr_dynlib_symbols(void *h, const char *const *names, void **const *slots, int n,
                                    const char *soname, const char *what, char *why, size_t len) {
    for (int i = 0; i < n; i++) {
        *slots[i] = dlsym(h, names[i]);
        if (!*slots[i]) {
            snprintf(why, len, "%s has no symbol %s (a different %s version?)", soname, names[i], what);
            return 0;
        }
    }
    return 1;
}

#endif /* MR_DYNLIB_H */

/*
 * blas_kernels.h - the OpenBLAS kernel set in use, and the one to ask for on
 * this CPU or NULL (blas_kernels.c): moonrl.h's mr_blas_kernels and
 * mr_blas_better_kernels, which core answers through the backend table
 * (blas_kernels, blas_better_kernels); the rule between them is moonrl.h's
 * mr_blas_pick_kernels.
 */
#ifndef MR_BLAS_KERNELS_H
#define MR_BLAS_KERNELS_H
#include "moonrl.h"   /* mr_blas_pick_kernels */

const char *mr_cpu_blas_kernels(void);
const char *mr_cpu_blas_better_kernels(void);

#endif

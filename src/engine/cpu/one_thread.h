/*
 * one_thread.h - a call on the calling thread only.
 *
 * OpenBLAS and oneDNN size their work split and run parallel sections by the
 * OpenMP thread count they see when called outside a parallel region. The CPU
 * backend parallelises over chunks itself (bits independent of the thread
 * count), so each library call inside must run on its thread alone: outside a
 * parallel region the count is set to 1 for the call and restored after.
 *
 *   int n = mr_one_thread_begin();  ... the call ...  mr_one_thread_end(n);
 */
#ifndef MR_CPU_ONE_THREAD_H
#define MR_CPU_ONE_THREAD_H

#include <omp.h>

static inline int mr_one_thread_begin(void) {
    int n = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (n > 1) omp_set_num_threads(1);
    return n;
}

static inline void mr_one_thread_end(int n) {
    if (n > 1) omp_set_num_threads(n);
}

#endif

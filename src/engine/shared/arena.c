/* arena.c - see arena.h. */
#include "arena.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Large arenas are 2 MiB aligned and asked to use transparent huge pages:
 * the environment grids and activations are touched all over every update,
 * and fewer TLB misses measured about +15% env throughput at 4096 envs. */
#define HUGE_ALIGN (2u << 20)

void *mr_arena_take(mr_arena *a, size_t bytes) {
    size_t n = mr_arena_round(bytes ? bytes : 1);
    if (!a->base) { a->size += n; return NULL; }
    if (a->used + n > a->size) return NULL;
    void *p = a->base + a->used;
    a->used += n;
    return p;
}

int mr_arena_commit(mr_arena *a) {
    if (a->base) return 0;
    size_t n = a->size ? a->size : MR_ARENA_ALIGN;
    void *p = NULL;
    int huge = n >= 2 * (size_t)HUGE_ALIGN;
    if (huge) n = (n + HUGE_ALIGN - 1) & ~(size_t)(HUGE_ALIGN - 1);
    if (posix_memalign(&p, huge ? HUGE_ALIGN : MR_ARENA_ALIGN, n) != 0) return -1;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, n, MADV_HUGEPAGE);
#endif
    memset(p, 0, n);
    a->base = p;
    a->size = n;
    a->used = 0;
    a->allocations++;
    return 0;
}

void mr_arena_release(mr_arena *a) {
    free(a->base);
    a->base = NULL;
    a->size = a->used = 0;
}

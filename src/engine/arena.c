/* arena.c - see arena.h. */
#include "arena.h"
#include <stdlib.h>
#include <string.h>

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
    if (posix_memalign(&p, MR_ARENA_ALIGN, n) != 0) return -1;
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

/*
 * arena.h - the engine's host memory: one block planned at creation.
 *
 * Components lay out their buffers with mr_arena_take() inside a "layout"
 * function that only stores pointers. The trainer runs that function twice:
 * first on a planning arena (take returns NULL and adds up sizes), then on the
 * committed arena (one aligned allocation, carved in the same order). After
 * commit nothing else is allocated, so the steady state allocates nothing;
 * `allocations` counts every real allocation the engine made so a test can
 * check it stays constant.
 */
#ifndef MR_ARENA_H
#define MR_ARENA_H
#include <stddef.h>
#include <stdint.h>

#define MR_ARENA_ALIGN 64

typedef struct mr_arena {
    unsigned char *base;   /* NULL while planning */
    size_t size;           /* bytes planned (planning) or committed */
    size_t used;           /* bytes handed out */
    uint64_t allocations;  /* real allocations made through this arena */
} mr_arena;

/* Bytes aligned up to MR_ARENA_ALIGN. */
static inline size_t mr_arena_round(size_t n) {
    return (n + (MR_ARENA_ALIGN - 1)) & ~(size_t)(MR_ARENA_ALIGN - 1);
}

/* Planning: returns NULL and records the size. Committed: returns zeroed,
 * 64-byte aligned memory, or NULL when the plan is exceeded. */
void *mr_arena_take(mr_arena *a, size_t bytes);
/* Allocates the planned size once. Returns 0 on success. */
int mr_arena_commit(mr_arena *a);
void mr_arena_release(mr_arena *a);

#define MR_TAKE(a, type, count) ((type *)mr_arena_take((a), sizeof(type) * (size_t)(count)))

#endif

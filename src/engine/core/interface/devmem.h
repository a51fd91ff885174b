/*
 * devmem.h - the device memory manager: a caching allocator over a pluggable
 * raw backend.
 *
 * Every device buffer of the CUDA backend comes from here (DESIGN.md "Memory
 * manager"). The allocator logic is plain C and never touches the memory it
 * hands out, so the same code runs over cudaMalloc (kernels/devmem_cuda.cu),
 * over cudaHostAlloc for pinned staging buffers, and over a fake backend in
 * the CPU unit test (spec/c/test_devmem.c).
 *
 * How it works (a small relative of PyTorch's CUDA caching allocator):
 *   - Size classes. A request is rounded up to a multiple of 512 bytes
 *     (mr_devmem_round). Rounded sizes up to 1 MiB are "small" and are carved
 *     from 2 MiB segments; larger ones are "large" and get a segment of their
 *     size rounded up to 2 MiB (mr_devmem_segment_size). The pools never mix.
 *   - Best fit from the cache: the smallest free block of the pool that fits
 *     (ties: lowest address) is reused before the backend is asked again;
 *     such a request counts as a cache hit.
 *   - Bounded splitting: a block is split only when the rest is worth keeping
 *     (>= 512 bytes in the small pool, > 1 MiB in the large pool); otherwise
 *     the request gets the whole block. A free block larger than
 *     max_split_bytes is never split, and serves only a request that wastes
 *     less than 2 MiB of it. Freed blocks merge with free neighbours.
 *   - Limit: memory held from the backend ("reserved") never exceeds
 *     memory_fraction * total_bytes.
 *   - Release threshold: after a free, when reserved exceeds
 *     release_threshold * limit, every wholly free segment is handed back.
 *   - OOM path: when a new segment would pass the limit or the backend
 *     refuses, the cache is released and the request tried once more; if it
 *     still fails, MR_ERR_NOMEM with a message naming the request, the memory
 *     free on the card, what this manager holds, and the largest request that
 *     would fit now.
 *
 * One stream: a block freed here may be handed out again at once, which is
 * safe when every kernel that used it was issued on the same stream as the
 * next user (stream order). Not thread-safe: one manager per trainer thread.
 * Metadata (block descriptors) is recycled, so once the working set has been
 * seen, alloc/free cycles make no host allocations (stats.meta_allocations).
 */
#ifndef MR_DEVMEM_H
#define MR_DEVMEM_H
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MR_DEVMEM_ROUND ((size_t)512)                  /* size-class granule; also the small pool's minimum split */
#define MR_DEVMEM_SMALL_MAX ((size_t)1 << 20)          /* rounded sizes up to this are "small" */
#define MR_DEVMEM_SMALL_SEGMENT ((size_t)2 << 20)      /* the small pool's segment */
#define MR_DEVMEM_LARGE_ROUND ((size_t)2 << 20)        /* large segments are multiples of this */
#define MR_DEVMEM_LARGE_MIN_SPLIT ((size_t)1 << 20)    /* large blocks split only if more than this is left */
#define MR_DEVMEM_OVERSIZE_WASTE ((size_t)2 << 20)     /* an unsplittable block serves requests wasting less */
#define MR_DEVMEM_DEFAULT_MAX_SPLIT ((size_t)256 << 20)

/* The raw memory under the manager. raw_alloc returns NULL on failure and may
 * point *reason at a static string saying why (e.g. cudaGetErrorString). */
typedef struct mr_devmem_backend {
    void *ctx;
    void *(*raw_alloc)(void *ctx, size_t bytes, const char **reason);
    void (*raw_free)(void *ctx, void *p);
    size_t (*free_bytes)(void *ctx);   /* free on the card now */
    size_t total_bytes;                /* the card's capacity */
    const char *name;                  /* for messages, e.g. "GPU 0"; may be NULL */
} mr_devmem_backend;

typedef struct mr_devmem_config {
    double memory_fraction;    /* limit = fraction * total_bytes, in (0, 1]     default 0.9 */
    double release_threshold;  /* release the cache above threshold * limit, [0, 1]  default 0.8 */
    size_t max_split_bytes;    /* free blocks above this are never split        default 256 MiB */
} mr_devmem_config;

typedef struct mr_devmem_stats {
    uint64_t allocated_bytes;       /* live blocks (rounded sizes) */
    uint64_t requested_bytes;       /* live blocks, sizes as asked for */
    uint64_t reserved_bytes;        /* segments held from the backend */
    uint64_t peak_allocated_bytes;
    uint64_t peak_reserved_bytes;
    uint64_t limit_bytes;
    uint64_t allocations;           /* successful mr_devmem_alloc calls */
    uint64_t frees;
    uint64_t cache_hits;            /* allocations served without a raw allocation */
    uint64_t raw_allocations;       /* successful backend allocations (segments) */
    uint64_t raw_frees;
    uint64_t releases;              /* cache releases that returned memory (threshold or OOM) */
    uint64_t oom_retries;           /* requests retried after releasing the cache */
    uint64_t failures;              /* requests that failed */
    uint64_t live_blocks, cached_blocks, segments;
    uint64_t meta_allocations;      /* host allocations for block descriptors */
} mr_devmem_stats;

typedef struct mr_devmem_block mr_devmem_block;   /* internal */

typedef struct mr_devmem {
    mr_devmem_backend be;
    mr_devmem_config cfg;
    size_t limit;
    mr_devmem_block *free_list[2];  /* per pool (0 small, 1 large), sorted by (size, address) */
    mr_devmem_block *live;          /* blocks handed out */
    mr_devmem_block *spare;         /* recycled descriptors */
    mr_devmem_stats st;
} mr_devmem;

void mr_devmem_config_default(mr_devmem_config *cfg);

/* Checks cfg (NULL = defaults) and the backend; the limit is
 * memory_fraction * be->total_bytes. Nothing is allocated yet. */
mr_status mr_devmem_init(mr_devmem *m, const mr_devmem_backend *be, const mr_devmem_config *cfg,
                         mr_error *err);
/* Returns every segment to the backend, live blocks included. */
void mr_devmem_destroy(mr_devmem *m);

/* *out = a block of at least `bytes` (bytes == 0 gives a 512-byte block),
 * aligned like the backend's allocations. `what` names the buffer in the OOM
 * message (may be NULL). */
mr_status mr_devmem_alloc(mr_devmem *m, size_t bytes, const char *what, void **out, mr_error *err);
/* Returns a block to the cache. NULL is a no-op; a pointer this manager did
 * not hand out is MR_ERR_ARG, nothing is changed. */
mr_status mr_devmem_free(mr_devmem *m, void *p, mr_error *err);
/* Hands every wholly free segment back to the backend; returns the bytes released. */
size_t mr_devmem_release_cache(mr_devmem *m);

void mr_devmem_stats_get(const mr_devmem *m, mr_devmem_stats *out);
/* The largest request that would succeed now, counting the cache as
 * releasable (the OOM message's "what would fit"). */
size_t mr_devmem_fits(const mr_devmem *m);

/* Size classes. */
size_t mr_devmem_round(size_t bytes);            /* up to a multiple of 512, at least 512 */
size_t mr_devmem_segment_size(size_t rounded);   /* segment made for a rounded request */

/* The largest n <= max_n (and a multiple of `multiple`, if n >= multiple)
 * with fixed_bytes + n * per_env_bytes <= budget_bytes; 0 when not even one
 * fits. Overflow-safe. Used for num_envs = "auto" and in OOM messages. */
int mr_devmem_largest_num_envs(size_t per_env_bytes, size_t fixed_bytes, size_t budget_bytes,
                               int max_n, int multiple);

/* "1.50 GiB", "512 B": buf gets at most len bytes. Returns buf. */
const char *mr_devmem_format(size_t bytes, char *buf, size_t len);

/* The direction of a copy (mr_cuda_copy, the CUDA trainer's table of GPU
 * operations); in every build, so the trainer and its CPU emulation compile
 * without CUDA too. */
enum { MR_COPY_H2D = 1, MR_COPY_D2H = 2, MR_COPY_D2D = 3 };

/* The CUDA backend's raw allocators, copies and streams are its own
 * (kernels/devmem_cuda.h). */

#ifdef __cplusplus
}
#endif
#endif /* MR_DEVMEM_H */

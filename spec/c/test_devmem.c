/*
 * test_devmem.c - the device memory manager (devmem.h) on the CPU, over a fake
 * raw backend that hands out made-up addresses from a card of a chosen size
 * (never dereferenced), can pretend another process holds memory, and checks
 * every raw free against the segments it handed out.
 *
 * Covers: size classes and rounding, carving small blocks from one segment,
 * best-fit reuse (cache hits), splitting and its bounds (minimum rest,
 * max_split_bytes, oversize waste), merging on free, stats (allocated,
 * requested, reserved, peaks, counts), the limit as a fraction of the card,
 * the release threshold, the OOM path (release the cache and retry; then a
 * message naming the request, the free memory and what fits), bad frees, no
 * host allocation in steady state, destroy, a randomised invariant check, and
 * mr_devmem_largest_num_envs.
 */
#include "check.h"
#include "devmem.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)
#define MAX_SEGS 4096

/* ------------------------------------------------------------ fake backend */
typedef struct fake {
    size_t total, used, other;     /* other: held by "another process" */
    uintptr_t next_addr;
    uintptr_t seg_ptr[MAX_SEGS];
    size_t seg_size[MAX_SEGS];
    int nsegs;
    int raw_allocs, raw_frees, bad_frees, fail_all;
} fake;

static void *fake_alloc(void *ctx, size_t bytes, const char **reason) {
    fake *f = ctx;
    if (f->fail_all || f->used + f->other + bytes > f->total || f->nsegs == MAX_SEGS) {
        *reason = "fake: out of memory";
        return NULL;
    }
    uintptr_t p = f->next_addr;
    f->next_addr += (bytes + 4095) / 4096 * 4096 + 65536;   /* gaps: segments never touch */
    f->seg_ptr[f->nsegs] = p;
    f->seg_size[f->nsegs] = bytes;
    f->nsegs++;
    f->used += bytes;
    f->raw_allocs++;
    return (void *)p;
}

static void fake_free(void *ctx, void *p) {
    fake *f = ctx;
    for (int k = 0; k < f->nsegs; k++)
        if (f->seg_ptr[k] == (uintptr_t)p) {
            f->used -= f->seg_size[k];
            f->seg_ptr[k] = f->seg_ptr[f->nsegs - 1];
            f->seg_size[k] = f->seg_size[f->nsegs - 1];
            f->nsegs--;
            f->raw_frees++;
            return;
        }
    f->bad_frees++;
}

static size_t fake_free_bytes(void *ctx) {
    fake *f = ctx;
    return f->total - f->used - f->other;
}

static mr_devmem_backend fake_backend(fake *f, size_t total) {
    memset(f, 0, sizeof *f);
    f->total = total;
    f->next_addr = 0x100000000ull;
    mr_devmem_backend b = {f, fake_alloc, fake_free, fake_free_bytes, total, "fake GPU"};
    return b;
}

static mr_devmem_config cfg_of(double fraction, double threshold, size_t max_split) {
    mr_devmem_config c;
    mr_devmem_config_default(&c);
    c.memory_fraction = fraction;
    c.release_threshold = threshold;
    if (max_split) c.max_split_bytes = max_split;
    return c;
}

static void *alloc_ok(mr_devmem *m, size_t bytes) {
    void *p = NULL;
    mr_error e;
    mr_status s = mr_devmem_alloc(m, bytes, "test buffer", &p, &e);
    CHECK_MSG(s == MR_OK && p, "alloc %zu: %s", bytes, e.msg);
    return p;
}

static void free_ok(mr_devmem *m, void *p) {
    mr_error e;
    CHECK_MSG(mr_devmem_free(m, p, &e) == MR_OK, "%s", e.msg);
}

static mr_devmem_stats stats(const mr_devmem *m) {
    mr_devmem_stats s;
    mr_devmem_stats_get(m, &s);
    return s;
}

/* ------------------------------------------------------------------ tests */

static void test_size_classes(void) {
    CHECK(mr_devmem_round(0) == 512);
    CHECK(mr_devmem_round(1) == 512);
    CHECK(mr_devmem_round(512) == 512);
    CHECK(mr_devmem_round(513) == 1024);
    CHECK(mr_devmem_round(MiB) == MiB);
    CHECK(mr_devmem_round(MiB + 1) == MiB + 512);
    CHECK(mr_devmem_round(SIZE_MAX) == SIZE_MAX);
    CHECK(mr_devmem_segment_size(512) == 2 * MiB);
    CHECK(mr_devmem_segment_size(MiB) == 2 * MiB);
    CHECK(mr_devmem_segment_size(MiB + 512) == 2 * MiB);
    CHECK(mr_devmem_segment_size(2 * MiB + 512) == 4 * MiB);
    CHECK(mr_devmem_segment_size(3 * MiB) == 4 * MiB);
    CHECK(mr_devmem_segment_size(SIZE_MAX) == SIZE_MAX);
    char buf[32];
    CHECK(strcmp(mr_devmem_format(512, buf, sizeof buf), "512 B") == 0);
    CHECK(strcmp(mr_devmem_format(1536, buf, sizeof buf), "1.50 KiB") == 0);
    CHECK(strcmp(mr_devmem_format((size_t)3 << 30, buf, sizeof buf), "3.00 GiB") == 0);
}

static void test_init_checks(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 100 * MiB);
    mr_devmem m;
    mr_error e;
    mr_devmem_config c = cfg_of(0.0, 0.8, 0);
    CHECK(mr_devmem_init(&m, &b, &c, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "cuda.memory_fraction = 0") != NULL);
    c = cfg_of(1.5, 0.8, 0);
    CHECK(mr_devmem_init(&m, &b, &c, &e) == MR_ERR_ARG);
    c = cfg_of(0.0 / 0.0, 0.8, 0);
    CHECK(mr_devmem_init(&m, &b, &c, &e) == MR_ERR_ARG);
    c = cfg_of(0.9, -0.1, 0);
    CHECK(mr_devmem_init(&m, &b, &c, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "cuda.release_threshold") != NULL);
    c = cfg_of(0.9, 0.8, 4096);
    CHECK(mr_devmem_init(&m, &b, &c, &e) == MR_ERR_ARG);
    mr_devmem_backend nb = b;
    nb.raw_alloc = NULL;
    CHECK(mr_devmem_init(&m, &nb, NULL, &e) == MR_ERR_ARG);
    c = cfg_of(0.5, 0.8, 0);
    CHECK(mr_devmem_init(&m, &b, &c, &e) == MR_OK);
    CHECK(stats(&m).limit_bytes == 50 * MiB);
    CHECK(stats(&m).reserved_bytes == 0 && f.raw_allocs == 0);   /* nothing until asked */
    mr_devmem_destroy(&m);
    CHECK(mr_devmem_init(&m, &b, NULL, &e) == MR_OK);            /* defaults: 0.9 */
    CHECK(stats(&m).limit_bytes == (uint64_t)(100 * MiB * 0.9));
    mr_devmem_destroy(&m);
}

static void test_small_pool_and_reuse(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 1024 * MiB);
    mr_devmem m;
    mr_devmem_config c = cfg_of(1.0, 1.0, 0);
    mr_devmem_init(&m, &b, &c, NULL);

    char *a = alloc_ok(&m, 1000);
    mr_devmem_stats s = stats(&m);
    CHECK(s.raw_allocations == 1 && s.reserved_bytes == 2 * MiB);
    CHECK(s.allocated_bytes == 1024 && s.requested_bytes == 1000);
    CHECK(s.allocations == 1 && s.cache_hits == 0);
    CHECK(((uintptr_t)a) % 4096 == 0);
    char *bb = alloc_ok(&m, 3000);              /* carved from the same segment */
    s = stats(&m);
    CHECK(bb == a + 1024);
    CHECK(s.raw_allocations == 1 && s.cache_hits == 1 && s.segments == 1);
    CHECK(s.allocated_bytes == 1024 + 3072);
    CHECK(s.peak_allocated_bytes == 4096);

    free_ok(&m, a);                             /* 1024 bytes cached at a */
    s = stats(&m);
    CHECK(s.allocated_bytes == 3072 && s.requested_bytes == 3000 && s.reserved_bytes == 2 * MiB);
    CHECK(s.peak_allocated_bytes == 4096 && s.frees == 1);
    char *c1 = alloc_ok(&m, 700);               /* best fit: the 1024 hole, not the big rest */
    CHECK(c1 == a);
    free_ok(&m, c1);
    char *c2 = alloc_ok(&m, 512);               /* splits the 1024 hole: 512 + 512 */
    CHECK(c2 == a);
    char *c3 = alloc_ok(&m, 400);               /* takes the other 512 */
    CHECK(c3 == a + 512);
    s = stats(&m);
    CHECK(s.raw_allocations == 1 && s.cache_hits == s.allocations - 1);

    /* Free everything: the blocks merge back into one 2 MiB free block. */
    free_ok(&m, c2);
    free_ok(&m, bb);
    free_ok(&m, c3);
    s = stats(&m);
    CHECK(s.allocated_bytes == 0 && s.requested_bytes == 0 && s.live_blocks == 0);
    CHECK(s.cached_blocks == 1 && s.segments == 1 && s.reserved_bytes == 2 * MiB);
    char *d = alloc_ok(&m, 2 * 1024 * 512);     /* exactly 1 MiB: still small, whole segment reusable */
    CHECK(d == a);
    CHECK(stats(&m).raw_allocations == 1);
    mr_devmem_destroy(&m);
    CHECK(f.nsegs == 0 && f.bad_frees == 0);
}

static void test_large_pool_and_splitting(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 4096 * MiB);
    mr_devmem m;
    mr_devmem_config c = cfg_of(1.0, 1.0, 8 * MiB);    /* blocks above 8 MiB are never split */
    mr_devmem_init(&m, &b, &c, NULL);

    char *a = alloc_ok(&m, 3 * MiB);            /* 4 MiB segment, rest 1 MiB: not split */
    mr_devmem_stats s = stats(&m);
    CHECK(s.reserved_bytes == 4 * MiB && s.allocated_bytes == 4 * MiB && s.cached_blocks == 0);
    CHECK(s.requested_bytes == 3 * MiB);
    char *g = alloc_ok(&m, 6 * MiB);            /* 6 MiB segment */
    free_ok(&m, g);
    char *h = alloc_ok(&m, 2 * MiB);            /* from the 6 MiB block: rest 4 MiB > 1 MiB, split */
    s = stats(&m);
    CHECK(h == g && s.cache_hits == 1 && s.raw_allocations == 2 && s.cached_blocks == 1);
    CHECK(s.allocated_bytes == 6 * MiB);
    char *h2 = alloc_ok(&m, 3 * MiB + 512);     /* the 4 MiB rest: rest 512 KiB - 512, not split */
    CHECK(h2 == g + 2 * MiB && stats(&m).allocated_bytes == 10 * MiB && stats(&m).cached_blocks == 0);
    free_ok(&m, h);
    free_ok(&m, h2);
    CHECK(stats(&m).cached_blocks == 1);        /* merged to 6 MiB */

    /* Oversize: a 16 MiB free block (> max_split 8 MiB) is not split for 4 MiB... */
    char *big = alloc_ok(&m, 16 * MiB);
    free_ok(&m, big);
    const uint64_t raw0 = stats(&m).raw_allocations;
    char *q = alloc_ok(&m, 7 * MiB);            /* the 6 MiB block is too small, 16 MiB oversize */
    CHECK(q != big && stats(&m).raw_allocations == raw0 + 1);
    /* ...but serves, whole, a request wasting less than 2 MiB of it. */
    char *r = alloc_ok(&m, 15 * MiB);
    s = stats(&m);
    CHECK(r == big && s.raw_allocations == raw0 + 1);
    CHECK(s.allocated_bytes == 4 * MiB + 8 * MiB + 16 * MiB);
    CHECK(s.peak_allocated_bytes == s.allocated_bytes);
    free_ok(&m, a);
    free_ok(&m, q);
    free_ok(&m, r);
    CHECK(stats(&m).allocated_bytes == 0 && stats(&m).peak_allocated_bytes == 28 * MiB);
    CHECK(stats(&m).peak_reserved_bytes == 4 * MiB + 6 * MiB + 16 * MiB + 8 * MiB);
    mr_devmem_destroy(&m);
    CHECK(f.nsegs == 0 && f.bad_frees == 0);
}

static void test_limit(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 100 * MiB);
    mr_devmem m;
    mr_devmem_config c = cfg_of(0.5, 1.0, 0);            /* limit 50 MiB */
    mr_devmem_init(&m, &b, &c, NULL);
    alloc_ok(&m, 40 * MiB);
    void *p = (void *)1;
    mr_error e;
    CHECK(mr_devmem_alloc(&m, 20 * MiB, "rollout buffers", &p, &e) == MR_ERR_NOMEM);
    CHECK(p == NULL && e.status == MR_ERR_NOMEM);
    CHECK_MSG(strstr(e.msg, "cannot allocate 20.00 MiB for rollout buffers (it would pass the memory limit)"),
              "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "fake GPU: ") == e.msg, "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "Free: 60.00 MiB of 100.00 MiB") != NULL, "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "fits now: 10.00 MiB") != NULL, "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "cuda.memory_fraction") != NULL, "%s", e.msg);
    CHECK(mr_devmem_fits(&m) == 10 * MiB);
    mr_devmem_stats s = stats(&m);
    CHECK(s.failures == 1 && s.reserved_bytes == 40 * MiB && f.raw_allocs == 1);
    alloc_ok(&m, 10 * MiB);                              /* exactly what fits */
    CHECK(stats(&m).reserved_bytes == 50 * MiB);
    CHECK(mr_devmem_alloc(&m, 1, "one byte", &p, &e) == MR_ERR_NOMEM);   /* even a small segment */
    CHECK(mr_devmem_alloc(&m, SIZE_MAX, "everything", &p, &e) == MR_ERR_NOMEM);
    mr_devmem_destroy(&m);
    CHECK(f.nsegs == 0);
}

static void test_release_threshold(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 100 * MiB);
    mr_devmem m;
    mr_devmem_config c = cfg_of(1.0, 0.25, 0);           /* release above 25 MiB reserved */
    mr_devmem_init(&m, &b, &c, NULL);
    void *a = alloc_ok(&m, 20 * MiB);
    void *bb = alloc_ok(&m, 8 * MiB);                    /* reserved 28 MiB */
    free_ok(&m, a);                                      /* 28 > 25: A's segment goes back */
    mr_devmem_stats s = stats(&m);
    CHECK(s.reserved_bytes == 8 * MiB && s.raw_frees == 1 && s.releases == 1);
    CHECK(f.used == 8 * MiB && s.cached_blocks == 0);
    free_ok(&m, bb);                                     /* 8 <= 25: kept in the cache */
    s = stats(&m);
    CHECK(s.reserved_bytes == 8 * MiB && s.raw_frees == 1 && s.cached_blocks == 1);
    void *bb2 = alloc_ok(&m, 8 * MiB);
    CHECK(bb2 == bb && stats(&m).cache_hits == 1);
    free_ok(&m, bb2);
    /* The threshold is applied on free: a new segment may pass it... */
    void *big = alloc_ok(&m, 20 * MiB);                  /* 8 cached + 20 > 25 */
    s = stats(&m);
    CHECK(big != NULL && s.reserved_bytes == 28 * MiB && s.raw_frees == 1 && s.cached_blocks == 1);
    free_ok(&m, big);                                    /* ...and the next free releases every free segment */
    s = stats(&m);
    CHECK(s.reserved_bytes == 0 && s.raw_frees == 3 && s.releases == 2 && f.nsegs == 0);
    mr_devmem_destroy(&m);

    /* Threshold 0: nothing is ever kept. */
    c = cfg_of(1.0, 0.0, 0);
    mr_devmem_init(&m, &b, &c, NULL);
    void *z = alloc_ok(&m, 100);
    free_ok(&m, z);
    CHECK(stats(&m).reserved_bytes == 0 && f.nsegs == 0);
    mr_devmem_destroy(&m);
}

static void test_oom_path(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 64 * MiB);
    mr_devmem m;
    mr_devmem_config c = cfg_of(1.0, 1.0, 0);
    mr_error e;

    /* Over the limit with a cache: release, retry, succeed. */
    mr_devmem_init(&m, &b, &c, NULL);
    void *a = alloc_ok(&m, 30 * MiB);
    alloc_ok(&m, 30 * MiB);
    free_ok(&m, a);                                      /* cached: 60 of 64 reserved */
    void *cc = alloc_ok(&m, 32 * MiB);
    mr_devmem_stats s = stats(&m);
    CHECK(cc != NULL && s.oom_retries == 1 && s.raw_frees == 1 && s.reserved_bytes == 62 * MiB);
    mr_devmem_destroy(&m);

    /* The backend refuses (another process holds memory): release, retry, succeed. */
    b = fake_backend(&f, 64 * MiB);
    f.other = 16 * MiB;
    mr_devmem_init(&m, &b, &c, NULL);
    a = alloc_ok(&m, 30 * MiB);
    free_ok(&m, a);
    void *p = alloc_ok(&m, 32 * MiB);                    /* 30 + 16 + 32 > 64 until A goes back */
    s = stats(&m);
    CHECK(p != NULL && s.oom_retries == 1 && f.raw_frees == 1 && s.reserved_bytes == 32 * MiB);

    /* Nothing left to release: fail with a message that says what fits. */
    void *q = (void *)1;
    CHECK(mr_devmem_alloc(&m, 40 * MiB, "policy weights", &q, &e) == MR_ERR_NOMEM);
    CHECK(q == NULL);
    CHECK_MSG(strstr(e.msg, "fake GPU: cannot allocate 40.00 MiB for policy weights") != NULL, "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "Free: 16.00 MiB of 64.00 MiB") != NULL, "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "holds 32.00 MiB (32.00 MiB in use, 0 B cached), limit 64.00 MiB") != NULL, "%s", e.msg);
    CHECK_MSG(strstr(e.msg, "fits now: 16.00 MiB") != NULL, "%s", e.msg);
    s = stats(&m);
    CHECK(s.failures == 1 && s.oom_retries == 1 && s.reserved_bytes == 32 * MiB);
    /* The backend's own reason is passed on. */
    f.fail_all = 1;
    CHECK(mr_devmem_alloc(&m, 4 * MiB, NULL, &q, &e) == MR_ERR_NOMEM);
    CHECK_MSG(strstr(e.msg, "fake: out of memory") != NULL && strstr(e.msg, "a buffer") != NULL, "%s", e.msg);
    f.fail_all = 0;
    CHECK(stats(&m).allocated_bytes == 32 * MiB && stats(&m).failures == 2);
    mr_devmem_destroy(&m);
    CHECK(f.nsegs == 0 && f.bad_frees == 0);

    /* The longest message (TiB-sized numbers, a long name) leaves room in
     * MR_ERROR_LEN for a caller's hint (the env appends how many fit). */
    b = fake_backend(&f, (size_t)150 << 30);
    b.name = "GPU 0";
    mr_devmem_init(&m, &b, NULL, NULL);
    CHECK(mr_devmem_alloc(&m, (size_t)16 << 40, "the environment state", &q, &e) == MR_ERR_NOMEM);
    CHECK_MSG(strlen(e.msg) < 400, "%zu characters: %s", strlen(e.msg), e.msg);
    CHECK_MSG(strstr(e.msg, "GPU 0: cannot allocate 16.00 TiB for the environment state") == e.msg, "%s", e.msg);
    mr_devmem_destroy(&m);
}

static void test_bad_frees_and_destroy(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 256 * MiB);
    mr_devmem m;
    mr_error e;
    mr_devmem_init(&m, &b, NULL, NULL);
    void *a = alloc_ok(&m, 5000);
    void *big = alloc_ok(&m, 5 * MiB);
    CHECK(mr_devmem_free(&m, NULL, &e) == MR_OK);
    CHECK(mr_devmem_free(&m, (char *)a + 512, &e) == MR_ERR_ARG);
    CHECK(strstr(e.msg, "not allocated by this manager") != NULL);
    free_ok(&m, a);
    CHECK(mr_devmem_free(&m, a, &e) == MR_ERR_ARG);       /* double free */
    CHECK(stats(&m).frees == 1 && stats(&m).allocated_bytes == 6 * MiB);   /* rest 1 MiB: not split */
    CHECK(mr_devmem_alloc(&m, 1, NULL, NULL, &e) == MR_ERR_ARG);
    (void)big;
    mr_devmem_destroy(&m);                                /* live block included */
    CHECK(f.nsegs == 0 && f.raw_frees == 2 && f.bad_frees == 0);
}

static void test_steady_state(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 1024 * MiB);
    mr_devmem m;
    mr_devmem_init(&m, &b, NULL, NULL);
    static const size_t sizes[] = {100, 4096, 70000, 3 * MiB, 512, 9 * MiB + 7, 1 << 20};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    void *p[16];
    uint64_t meta = 0, raw = 0, hits = 0;
    for (int round = 0; round < 50; round++) {
        for (int k = 0; k < ns; k++) p[k] = alloc_ok(&m, sizes[k]);
        for (int k = ns - 1; k >= 0; k--) free_ok(&m, p[k]);
        if (round == 0) {
            meta = stats(&m).meta_allocations;
            raw = stats(&m).raw_allocations;
            hits = stats(&m).cache_hits;
        }
    }
    mr_devmem_stats s = stats(&m);
    CHECK(s.meta_allocations == meta && s.raw_allocations == raw);   /* nothing new after warm-up */
    CHECK(s.cache_hits == hits + 49 * (uint64_t)ns);
    CHECK(s.allocations == 50 * (uint64_t)ns && s.allocated_bytes == 0);
    mr_devmem_destroy(&m);
}

/* Random allocs and frees; after each, check the invariants directly. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_random_invariants(void) {
    fake f;
    mr_devmem_backend b = fake_backend(&f, 512 * MiB);
    mr_devmem m;
    mr_devmem_config c = cfg_of(0.75, 0.95, 32 * MiB);
    mr_devmem_init(&m, &b, &c, NULL);
    enum { NLIVE = 64 };
    char *ptr[NLIVE] = {0};
    size_t req[NLIVE] = {0};
    int bad = 0, oom = 0;
    for (int it = 0; it < 20000; it++) {
        int k = (int)(rnd() % NLIVE);
        if (ptr[k]) {
            if (mr_devmem_free(&m, ptr[k], NULL) != MR_OK) bad++;
            ptr[k] = NULL;
        } else {
            size_t sz;
            switch (rnd() % 4) {
            case 0: sz = rnd() % 2048; break;
            case 1: sz = rnd() % (512 * 1024); break;
            case 2: sz = rnd() % (4 * MiB); break;
            default: sz = rnd() % (48 * MiB); break;
            }
            void *p;
            if (mr_devmem_alloc(&m, sz, "random", &p, NULL) == MR_OK) { ptr[k] = p; req[k] = sz; }
            else oom++;
        }
        /* Invariants: live blocks are disjoint and inside a live segment; the
         * books match the backend. */
        uint64_t reqsum = 0;
        for (int i = 0; i < NLIVE; i++) {
            if (!ptr[i]) continue;
            reqsum += req[i];
            const size_t ri = mr_devmem_round(req[i]);
            int inside = 0;
            for (int s = 0; s < f.nsegs; s++)
                if ((uintptr_t)ptr[i] >= f.seg_ptr[s] && (uintptr_t)ptr[i] + ri <= f.seg_ptr[s] + f.seg_size[s] &&
                    ((uintptr_t)ptr[i] - f.seg_ptr[s]) % 512 == 0)
                    inside = 1;
            if (!inside) bad++;
            for (int j = i + 1; j < NLIVE; j++)
                if (ptr[j] && ptr[i] < ptr[j] + mr_devmem_round(req[j]) && ptr[j] < ptr[i] + ri) bad++;
        }
        mr_devmem_stats s = stats(&m);
        if (s.requested_bytes != reqsum || s.reserved_bytes != f.used || s.reserved_bytes > s.limit_bytes ||
            s.allocated_bytes > s.reserved_bytes || s.segments != (uint64_t)f.nsegs)
            bad++;
        if (bad) break;
    }
    CHECK_MSG(bad == 0, "%d invariant violations", bad);
    CHECK(oom > 0);                          /* the limit was reached and survived */
    CHECK_MSG(stats(&m).oom_retries > 0 && stats(&m).cache_hits > 0 && stats(&m).releases > 0,
              "retries %llu hits %llu releases %llu", (unsigned long long)stats(&m).oom_retries,
              (unsigned long long)stats(&m).cache_hits, (unsigned long long)stats(&m).releases);
    for (int i = 0; i < NLIVE; i++) if (ptr[i]) free_ok(&m, ptr[i]);
    mr_devmem_release_cache(&m);
    CHECK(stats(&m).reserved_bytes == 0 && f.nsegs == 0 && stats(&m).cached_blocks == 0);
    mr_devmem_destroy(&m);
    CHECK(f.bad_frees == 0);
}

static void test_largest_num_envs(void) {
    CHECK(mr_devmem_largest_num_envs(1000, 500, 10500, 1000000, 1) == 10);
    CHECK(mr_devmem_largest_num_envs(1000, 500, 10499, 1000000, 1) == 9);
    CHECK(mr_devmem_largest_num_envs(1000, 500, 499, 1000000, 1) == 0);
    CHECK(mr_devmem_largest_num_envs(1000, 500, 1499, 1000000, 1) == 0);
    CHECK(mr_devmem_largest_num_envs(0, 500, 600, 77, 1) == 77);
    CHECK(mr_devmem_largest_num_envs(1, 0, 100000, 1000, 1) == 1000);
    CHECK(mr_devmem_largest_num_envs(1, 0, 100, 1000, 32) == 96);
    CHECK(mr_devmem_largest_num_envs(1, 0, 20, 1000, 32) == 20);       /* below one multiple: as is */
    CHECK(mr_devmem_largest_num_envs(SIZE_MAX / 2, 0, SIZE_MAX, 0, 1) == 2);   /* no overflow */
    CHECK(mr_devmem_largest_num_envs(1, 0, SIZE_MAX, 0, 1) == INT_MAX);
    /* The foraging state is ~16.5 KB per env at 128x128: an 80 GB card at 0.9
     * holds 4.3 M of them, capped by the caller's maximum. */
    const size_t per = 128 * 128 + 121 + 64;
    CHECK(mr_devmem_largest_num_envs(per, 0, (size_t)(80e9 * 0.9), 1048576, 32) == 1048576);
    const int n = mr_devmem_largest_num_envs(per, 1 << 20, (size_t)1 << 30, 1048576, 32);
    CHECK(n % 32 == 0 && (size_t)n * per + (1 << 20) <= ((size_t)1 << 30) &&
          (size_t)(n + 32) * per + (1 << 20) > ((size_t)1 << 30));
}

int main(void) {
    test_size_classes();
    test_init_checks();
    test_small_pool_and_reuse();
    test_large_pool_and_splitting();
    test_limit();
    test_release_threshold();
    test_oom_path();
    test_bad_frees_and_destroy();
    test_steady_state();
    test_random_invariants();
    test_largest_num_envs();
    return check_report("test_devmem");
}

/*
 * devmem.c - the caching allocator of devmem.h: size classes, best fit from
 * per-pool free lists, bounded splitting, merging on free, limit, release
 * threshold and the OOM path.
 *
 * Block descriptors live in host memory and are linked three ways: `prev` /
 * `next` are the address neighbours inside one segment (a segment is a chain
 * whose head has prev == NULL; a wholly free segment is one free block with
 * neither neighbour), and `link` threads a block through exactly one of the
 * per-pool free lists, the live list or the spare list. Lists are short (one
 * entry per buffer of a trainer), so plain linked lists do; nothing here is on
 * the hot path, which allocates nothing at all.
 *
 * The manager never dereferences the memory it manages: pointers are only
 * compared and offset, so device addresses are handled like any other.
 */
#include "devmem.h"
#include "errors.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mr_devmem_block {
    char *ptr;
    size_t size;                    /* bytes of the block (a multiple of 512) */
    size_t requested;               /* as asked for, while live */
    int pool;                       /* 0 small, 1 large */
    int live;
    mr_devmem_block *prev, *next;   /* address neighbours in the segment */
    mr_devmem_block *link;          /* free list, live list or spare list */
};

/* ------------------------------------------------------------ size classes */

size_t mr_devmem_round(size_t bytes) {
    if (bytes == 0) return MR_DEVMEM_ROUND;
    if (bytes > SIZE_MAX - MR_DEVMEM_ROUND) return SIZE_MAX;   /* fails later as too large */
    return (bytes + MR_DEVMEM_ROUND - 1) / MR_DEVMEM_ROUND * MR_DEVMEM_ROUND;
}

size_t mr_devmem_segment_size(size_t rounded) {
    if (rounded <= MR_DEVMEM_SMALL_MAX) return MR_DEVMEM_SMALL_SEGMENT;
    if (rounded > SIZE_MAX - MR_DEVMEM_LARGE_ROUND) return SIZE_MAX;
    return (rounded + MR_DEVMEM_LARGE_ROUND - 1) / MR_DEVMEM_LARGE_ROUND * MR_DEVMEM_LARGE_ROUND;
}

static int pool_of(size_t rounded) { return rounded <= MR_DEVMEM_SMALL_MAX ? 0 : 1; }

const char *mr_devmem_format(size_t bytes, char *buf, size_t len) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, len, "%zu B", bytes);
    else snprintf(buf, len, "%.2f %s", v, unit[u]);
    return buf;
}

int mr_devmem_largest_num_envs(size_t per_env_bytes, size_t fixed_bytes, size_t budget_bytes,
                               int max_n, int multiple) {
    const size_t cap = max_n > 0 ? (size_t)max_n : (size_t)INT_MAX;
    if (fixed_bytes > budget_bytes) return 0;
    size_t n = per_env_bytes ? (budget_bytes - fixed_bytes) / per_env_bytes : cap;
    if (n > cap) n = cap;
    if (multiple > 1 && n >= (size_t)multiple) n -= n % (size_t)multiple;
    return (int)n;
}

/* ------------------------------------------------------------ descriptors */

static mr_devmem_block *desc_new(mr_devmem *m) {
    mr_devmem_block *b = m->spare;
    if (b) m->spare = b->link;
    else {
        b = malloc(sizeof *b);
        if (!b) return NULL;
        m->st.meta_allocations++;
    }
    memset(b, 0, sizeof *b);
    return b;
}

static void desc_recycle(mr_devmem *m, mr_devmem_block *b) {
    b->link = m->spare;
    m->spare = b;
}

/* Free lists are sorted by (size, address): the first block that fits is the
 * best fit, and ties go to the lowest address (a deterministic layout). */
static void free_insert(mr_devmem *m, mr_devmem_block *b) {
    mr_devmem_block **pp = &m->free_list[b->pool];
    while (*pp && ((*pp)->size < b->size || ((*pp)->size == b->size && (*pp)->ptr < b->ptr)))
        pp = &(*pp)->link;
    b->link = *pp;
    *pp = b;
    m->st.cached_blocks++;
}

static void free_remove(mr_devmem *m, mr_devmem_block *b) {
    mr_devmem_block **pp = &m->free_list[b->pool];
    while (*pp && *pp != b) pp = &(*pp)->link;
    if (*pp) { *pp = b->link; m->st.cached_blocks--; }
    b->link = NULL;
}

/* ------------------------------------------------------------------ setup */

void mr_devmem_config_default(mr_devmem_config *cfg) {
    cfg->memory_fraction = 0.9;
    cfg->release_threshold = 0.8;
    cfg->max_split_bytes = MR_DEVMEM_DEFAULT_MAX_SPLIT;
}

mr_status mr_devmem_init(mr_devmem *m, const mr_devmem_backend *be, const mr_devmem_config *cfg,
                         mr_error *err) {
    if (!m) return mr_fail(err, MR_ERR_ARG, "mr_devmem_init: manager is NULL");
    memset(m, 0, sizeof *m);
    if (!be || !be->raw_alloc || !be->raw_free)
        return mr_fail(err, MR_ERR_ARG, "mr_devmem_init: the backend needs raw_alloc and raw_free");
    mr_devmem_config c;
    if (cfg) c = *cfg;
    else mr_devmem_config_default(&c);
    if (!(c.memory_fraction > 0.0 && c.memory_fraction <= 1.0))
        return mr_fail(err, MR_ERR_ARG, "cuda.memory_fraction = %g: must be in (0, 1] (the share of the card "
                       "moonrl may hold)", c.memory_fraction);
    if (!(c.release_threshold >= 0.0 && c.release_threshold <= 1.0))
        return mr_fail(err, MR_ERR_ARG, "cuda.release_threshold = %g: must be in [0, 1] (a fraction of the "
                       "memory limit)", c.release_threshold);
    if (c.max_split_bytes < MR_DEVMEM_SMALL_SEGMENT)
        return mr_fail(err, MR_ERR_ARG, "devmem max_split_bytes = %zu: must be at least %zu (one small "
                       "segment)", c.max_split_bytes, MR_DEVMEM_SMALL_SEGMENT);
    if (be->total_bytes == 0)
        return mr_fail(err, MR_ERR_ARG, "mr_devmem_init: the backend reports 0 bytes in total");
    m->be = *be;
    m->cfg = c;
    m->limit = (size_t)((double)be->total_bytes * c.memory_fraction);
    m->st.limit_bytes = m->limit;
    mr_ok(err);
    return MR_OK;
}

void mr_devmem_destroy(mr_devmem *m) {
    if (!m) return;
    mr_devmem_block *lists[3] = {m->free_list[0], m->free_list[1], m->live};
    /* Each segment is given back once, through its head block. */
    for (int k = 0; k < 3; k++)
        for (mr_devmem_block *b = lists[k]; b; b = b->link)
            if (!b->prev && m->be.raw_free) m->be.raw_free(m->be.ctx, b->ptr);
    lists[0] = m->free_list[0];
    lists[1] = m->free_list[1];
    lists[2] = m->live;
    for (int k = 0; k < 3; k++)
        for (mr_devmem_block *b = lists[k], *nx; b; b = nx) { nx = b->link; free(b); }
    for (mr_devmem_block *b = m->spare, *nx; b; b = nx) { nx = b->link; free(b); }
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ cache */

size_t mr_devmem_release_cache(mr_devmem *m) {
    size_t released = 0;
    for (int pool = 0; pool < 2; pool++) {
        mr_devmem_block **pp = &m->free_list[pool];
        while (*pp) {
            mr_devmem_block *b = *pp;
            if (b->prev || b->next) { pp = &b->link; continue; }
            *pp = b->link;
            m->st.cached_blocks--;
            m->be.raw_free(m->be.ctx, b->ptr);
            m->st.reserved_bytes -= b->size;
            m->st.raw_frees++;
            m->st.segments--;
            released += b->size;
            desc_recycle(m, b);
        }
    }
    if (released) m->st.releases++;
    return released;
}

/* After a free: release the cache when reserved memory is above the threshold. */
static void apply_threshold(mr_devmem *m) {
    if ((double)m->st.reserved_bytes > m->cfg.release_threshold * (double)m->limit) mr_devmem_release_cache(m);
}

static mr_devmem_block *find_free(mr_devmem *m, int pool, size_t r) {
    for (mr_devmem_block *b = m->free_list[pool]; b; b = b->link) {
        if (b->size < r) continue;
        if (b->size > m->cfg.max_split_bytes && b->size - r >= MR_DEVMEM_OVERSIZE_WASTE) continue;
        return b;
    }
    return NULL;
}

/* A new segment of `seg` bytes as one free-standing block (not in a list), or
 * NULL with *reason set. */
static mr_devmem_block *try_segment(mr_devmem *m, int pool, size_t seg, const char **reason) {
    if (seg > m->limit || m->st.reserved_bytes > m->limit - seg) {
        *reason = "it would pass the memory limit";
        return NULL;
    }
    mr_devmem_block *b = desc_new(m);
    if (!b) { *reason = "out of host memory for the allocator's bookkeeping"; return NULL; }
    const char *why = NULL;
    void *p = m->be.raw_alloc(m->be.ctx, seg, &why);
    if (!p) {
        desc_recycle(m, b);
        *reason = why ? why : "the backend refused it";
        return NULL;
    }
    b->ptr = p;
    b->size = seg;
    b->pool = pool;
    m->st.reserved_bytes += seg;
    if (m->st.reserved_bytes > m->st.peak_reserved_bytes) m->st.peak_reserved_bytes = m->st.reserved_bytes;
    m->st.raw_allocations++;
    m->st.segments++;
    return b;
}

/* Cuts b down to r bytes when the rest is worth a block of its own. */
static void maybe_split(mr_devmem *m, mr_devmem_block *b, size_t r) {
    const size_t rest = b->size - r;
    if (b->size > m->cfg.max_split_bytes) return;
    if (b->pool == 0 ? rest < MR_DEVMEM_ROUND : rest <= MR_DEVMEM_LARGE_MIN_SPLIT) return;
    mr_devmem_block *nb = desc_new(m);
    if (!nb) return;   /* no bookkeeping memory: hand out the whole block */
    nb->ptr = b->ptr + r;
    nb->size = rest;
    nb->pool = b->pool;
    nb->prev = b;
    nb->next = b->next;
    if (b->next) b->next->prev = nb;
    b->next = nb;
    b->size = r;
    free_insert(m, nb);
}

size_t mr_devmem_fits(const mr_devmem *m) {
    size_t best = 0, releasable = 0;
    for (int pool = 0; pool < 2; pool++)
        for (const mr_devmem_block *b = m->free_list[pool]; b; b = b->link) {
            if (b->size > best) best = b->size;
            if (!b->prev && !b->next) releasable += b->size;
        }
    const size_t held = m->st.reserved_bytes - releasable;
    size_t room = held < m->limit ? m->limit - held : 0;
    const size_t card = (m->be.free_bytes ? m->be.free_bytes(m->be.ctx) : m->limit) + releasable;
    if (card < room) room = card;
    room = room / MR_DEVMEM_LARGE_ROUND * MR_DEVMEM_LARGE_ROUND;   /* whole new segments only */
    return room > best ? room : best;
}

/* Kept under ~400 characters so a caller can append a hint of its own
 * (e.g. how many environments fit) within MR_ERROR_LEN. */
static mr_status oom(mr_devmem *m, size_t bytes, const char *what, const char *reason, mr_error *err) {
    char a[32], fr[32], tot[32], hold[32], use[32], cache[32], lim[32], fit[32];
    const size_t card_free = m->be.free_bytes ? m->be.free_bytes(m->be.ctx) : 0;
    const size_t cached = m->st.reserved_bytes - m->st.allocated_bytes;
    m->st.failures++;
    return mr_fail(err, MR_ERR_NOMEM,
                   "%s: cannot allocate %s for %s (%s). Free: %s of %s; moonrl holds %s (%s in use, %s cached), "
                   "limit %s (memory_fraction %.2f). Largest that fits now: %s. Make the run smaller (env.num_envs, "
                   "ppo.rollout_steps, policy widths) or raise cuda.memory_fraction.",
                   m->be.name ? m->be.name : "device memory", mr_devmem_format(bytes, a, sizeof a),
                   what ? what : "a buffer", reason, mr_devmem_format(card_free, fr, sizeof fr),
                   mr_devmem_format(m->be.total_bytes, tot, sizeof tot),
                   mr_devmem_format(m->st.reserved_bytes, hold, sizeof hold),
                   mr_devmem_format(m->st.allocated_bytes, use, sizeof use),
                   mr_devmem_format(cached, cache, sizeof cache),
                   mr_devmem_format(m->limit, lim, sizeof lim), m->cfg.memory_fraction,
                   mr_devmem_format(mr_devmem_fits(m), fit, sizeof fit));
}

/* ------------------------------------------------------------ alloc / free */

mr_status mr_devmem_alloc(mr_devmem *m, size_t bytes, const char *what, void **out, mr_error *err) {
    if (!out) return mr_fail(err, MR_ERR_ARG, "mr_devmem_alloc: out is NULL");
    *out = NULL;
    if (!m || !m->be.raw_alloc) return mr_fail(err, MR_ERR_ARG, "mr_devmem_alloc: the manager is not initialised");
    const size_t r = mr_devmem_round(bytes);
    const int pool = pool_of(r);
    mr_devmem_block *b = find_free(m, pool, r);
    if (b) {
        free_remove(m, b);
        m->st.cache_hits++;
    } else {
        const size_t seg = mr_devmem_segment_size(r);
        const char *reason = "it would pass the memory limit";
        if (seg != SIZE_MAX) {
            b = try_segment(m, pool, seg, &reason);
            if (!b && mr_devmem_release_cache(m) > 0) {   /* OOM path: free the cache, retry once */
                m->st.oom_retries++;
                b = try_segment(m, pool, seg, &reason);
            }
        }
        if (!b) return oom(m, bytes, what, reason, err);
    }
    maybe_split(m, b, r);
    b->live = 1;
    b->requested = bytes;
    b->link = m->live;
    m->live = b;
    m->st.live_blocks++;
    m->st.allocations++;
    m->st.allocated_bytes += b->size;
    m->st.requested_bytes += bytes;
    if (m->st.allocated_bytes > m->st.peak_allocated_bytes) m->st.peak_allocated_bytes = m->st.allocated_bytes;
    *out = b->ptr;
    mr_ok(err);
    return MR_OK;
}

mr_status mr_devmem_free(mr_devmem *m, void *p, mr_error *err) {
    if (!p) { mr_ok(err); return MR_OK; }
    if (!m) return mr_fail(err, MR_ERR_ARG, "mr_devmem_free: manager is NULL");
    mr_devmem_block **pp = &m->live;
    while (*pp && (*pp)->ptr != (char *)p) pp = &(*pp)->link;
    if (!*pp)
        return mr_fail(err, MR_ERR_ARG, "mr_devmem_free: %p was not allocated by this manager (or was "
                       "already freed)", p);
    mr_devmem_block *b = *pp;
    *pp = b->link;
    b->link = NULL;
    b->live = 0;
    m->st.live_blocks--;
    m->st.frees++;
    m->st.allocated_bytes -= b->size;
    m->st.requested_bytes -= b->requested;
    b->requested = 0;
    /* Merge with free neighbours of the same segment. */
    mr_devmem_block *pv = b->prev;
    if (pv && !pv->live) {
        free_remove(m, pv);
        pv->size += b->size;
        pv->next = b->next;
        if (b->next) b->next->prev = pv;
        desc_recycle(m, b);
        b = pv;
    }
    mr_devmem_block *nx = b->next;
    if (nx && !nx->live) {
        free_remove(m, nx);
        b->size += nx->size;
        b->next = nx->next;
        if (nx->next) nx->next->prev = b;
        desc_recycle(m, nx);
    }
    free_insert(m, b);
    apply_threshold(m);
    mr_ok(err);
    return MR_OK;
}

void mr_devmem_stats_get(const mr_devmem *m, mr_devmem_stats *out) {
    *out = m->st;
}

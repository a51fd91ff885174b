/*
 * checkpoint_load.c - reading a checkpoint into a trainer, and its parts on
 * their own (config, progress, gradients, ranks); checkpoint_format.h has
 * the format. Loading checks magic, version, length, every CRC and every
 * section's size before touching the trainer, so a damaged file is refused
 * with a message and the trainer is left as it was. What is not a regular
 * file (a FIFO, a directory, a device) is refused from the open fd without
 * blocking, and the header, the file's size against it and the section
 * table are checked before the file is read or memory allocated for it (a
 * huge sparse file costs a few small reads).
 */
#include "checkpoint_format.h"
#include "errors.h"
#include "config.h"
#include "checkpoint_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ load */

typedef struct ck_file {
    uint8_t *buf;
    size_t len;
    uint32_t count;
} ck_file;

/* What a path that is not a regular file is, in words. */
static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "is a directory";
    if (S_ISFIFO(m)) return "is a FIFO (named pipe), not a regular file";
    if (S_ISSOCK(m)) return "is a socket, not a regular file";
    if (S_ISCHR(m)) return "is a character device, not a regular file";
    if (S_ISBLK(m)) return "is a block device, not a regular file";
    return "is not a regular file";
}

/* Reads n bytes at off; 0 on success. */
static int read_at(int fd, void *p, size_t n, uint64_t off) {
    uint8_t *q = p;
    while (n > 0) {
        ssize_t r = pread(fd, q, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = 0;   /* the file ended early */
        if (r <= 0) return -1;
        q += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Opens a checkpoint and checks everything that can be checked without
 * reading its contents: a regular file (a FIFO, a directory or a device is
 * refused at once: the open does not block, the type is the open fd's), its
 * header (magic, version, section count), the size the header records against
 * the file's, and the section table's sizes adding up to it. Nothing is
 * allocated until all of that holds, so a huge or sparse file costs a few
 * small reads. */
static mr_status open_checkpoint(const char *path, int *fd_out, uint64_t *len_out, uint32_t *count_out,
                                 mr_error *err) {
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return mr_fail(err, MR_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        mr_status s = mr_fail(err, MR_ERR_IO, "cannot read checkpoint '%s': %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mr_fail(err, MR_ERR_FORMAT, "checkpoint '%s' %s: a checkpoint is a regular file (update_NNNNNNN.mrck)",
                       path, kind_of(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    const uint64_t len = (uint64_t)st.st_size, head = 8 + 4 + 4 + 8, tail = 4 + 8, sec_head = CK_NAME + 16;
    mr_status s = MR_OK;
    uint8_t h[24];
    if (len < head + tail) {
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' is not a moonrl checkpoint: only %llu bytes", path, (unsigned long long)len);
    } else if (read_at(fd, h, sizeof h, 0) != 0) {
        s = mr_fail(err, MR_ERR_IO, "cannot read checkpoint '%s': %s", path, errno ? strerror(errno) : "short read");
    } else if (memcmp(h, CK_MAGIC, 8) != 0) {
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' is not a moonrl checkpoint (bad magic bytes)", path);
    }
    uint32_t version = 0, count = 0;
    uint64_t total = 0;
    if (!s) {
        memcpy(&version, h + 8, 4);
        memcpy(&count, h + 12, 4);
        memcpy(&total, h + 16, 8);
        if (version != 1u && version != CK_VERSION)
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is checkpoint format version %u; this moonrl reads versions 1 .. %u",
                        path, version, CK_VERSION);
        else if (total != len)
            s = mr_fail(err, MR_ERR_FORMAT,
                        "'%s' is damaged: its header says %llu bytes but the file is %llu bytes (%s)", path,
                        (unsigned long long)total, (unsigned long long)len,
                        len < total ? "truncated" : "oversized: appended to, or not one checkpoint");
        else if (count > CK_MAX_SECTIONS)
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: %u sections (at most %d)", path, count, CK_MAX_SECTIONS);
    }
    /* The section table, header by header: the sizes must add up to the file. */
    uint64_t off = head;
    for (uint32_t i = 0; !s && i < count; i++) {
        uint8_t sh[CK_NAME + 16];
        uint64_t b;
        if (off + sec_head > len - tail || read_at(fd, sh, sizeof sh, off) != 0) {
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section %u of %u lies past its end", path, i + 1, count);
            break;
        }
        memcpy(&b, sh + CK_NAME, 8);
        off += sec_head;
        if (b > len - tail - off) {
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section %u of %u (%llu bytes) lies past its end", path,
                        i + 1, count, (unsigned long long)b);
            break;
        }
        off += b;
    }
    if (!s && off != len - tail)
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: its sections end at byte %llu, its trailer is at %llu", path,
                    (unsigned long long)off, (unsigned long long)(len - tail));
    if (s) { close(fd); return s; }
    *fd_out = fd;
    *len_out = len;
    *count_out = count;
    return MR_OK;
}

static mr_status read_file(const char *path, ck_file *out, mr_error *err) {
    memset(out, 0, sizeof *out);
    int fd = -1;
    uint64_t len64 = 0;
    uint32_t count = 0;
    mr_status s = open_checkpoint(path, &fd, &len64, &count, err);
    if (s) return s;
    const size_t tail = 4 + 8;
    if (len64 > (uint64_t)SIZE_MAX) {
        close(fd);
        return mr_fail(err, MR_ERR_NOMEM, "'%s' (%llu bytes) is larger than this machine can address", path,
                       (unsigned long long)len64);
    }
    const size_t len = (size_t)len64;
    uint8_t *buf = malloc(len);
    if (!buf) {
        close(fd);
        return mr_fail(err, MR_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, len);
    }
    int bad = read_at(fd, buf, len, 0);
    int e = errno;
    close(fd);
    if (bad) {
        free(buf);
        return mr_fail(err, MR_ERR_IO, "short read of '%s': %s", path, e ? strerror(e) : "it shrank while being read");
    }
    uint32_t want;
    memcpy(&want, buf + len - tail, 4);
    if (memcmp(buf + len - 8, CK_END, 8) != 0 || mr_ck_crc32(0, buf, len - tail) != want) {
        free(buf);
        return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: its checksum does not match its contents", path);
    }
    out->buf = buf;
    out->len = len;
    out->count = count;
    return MR_OK;
}

/* Finds a section; checks its size when want_bytes != (size_t)-1. */
#define CK_OPTIONAL ((size_t)-2)   /* find_section's want_bytes: absent is not an error (*data = NULL) */
static mr_status find_section(const ck_file *cf, const char *path, const char *name, size_t want_bytes,
                              const uint8_t **data, size_t *bytes, mr_error *err) {
    size_t off = 24, end = cf->len - 12;
    for (uint32_t i = 0; i < cf->count; i++) {
        if (off + CK_NAME + 16 > end) break;
        char nm[CK_NAME];
        memcpy(nm, cf->buf + off, CK_NAME);
        nm[CK_NAME - 1] = 0;
        uint64_t b;
        uint32_t scrc;
        memcpy(&b, cf->buf + off + CK_NAME, 8);
        memcpy(&scrc, cf->buf + off + CK_NAME + 8, 4);
        off += CK_NAME + 16;
        if (b > end - off) break;
        if (strcmp(nm, name) == 0) {
            if (mr_ck_crc32(0, cf->buf + off, b) != scrc)
                return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section '%s' fails its checksum", path, name);
            if (want_bytes != (size_t)-1 && want_bytes != CK_OPTIONAL && b != want_bytes)
                return mr_fail(err, MR_ERR_FORMAT,
                               "'%s' does not fit this trainer: section '%s' has %llu bytes, expected %zu "
                               "(the checkpoint was written with other shapes or by another engine build)",
                               path, name, (unsigned long long)b, want_bytes);
            *data = cf->buf + off;
            *bytes = b;
            return MR_OK;
        }
        off += b;
    }
    if (want_bytes == CK_OPTIONAL) {
        *data = NULL;
        *bytes = 0;
        return MR_OK;
    }
    return mr_fail(err, MR_ERR_FORMAT, "'%s' has no section '%s' (damaged, or from another version)", path, name);
}

/* The checkpoint's config: its records (version 2), or the raw bytes of version 1. */
static mr_status read_config(const ck_file *cf, const char *path, mr_config *out, mr_error *err) {
    const uint8_t *d;
    size_t n;
    mr_status s = find_section(cf, path, "config.keys", CK_OPTIONAL, &d, &n, err);
    if (!s && d) return mr_ck_config_parse(path, d, n, out, err);
    if (!s) s = find_section(cf, path, "config", mr_ck_config_v1_bytes(), &d, &n, err);
    if (!s) mr_ck_config_from_v1(d, out);
    return s;
}

/* Shapes that must agree between the checkpoint and the trainer (the
 * number of environments only when `envs` is set: a data-parallel load
 * re-seeds the environments it cannot carry). */
static mr_status compatible(const mr_config *a, const mr_config *b, const char *path, int envs, mr_error *err) {
    const mr_env_config *x = &a->env, *y = &b->env;
#define SAME(f, what) if (x->f != y->f) return mr_fail(err, MR_ERR_ARG, \
        "checkpoint '%s' has " what " = %d but this trainer has %d; create the trainer from the checkpoint's config", \
        path, (int)x->f, (int)y->f)
    if (envs) SAME(num_envs, "env.num_envs");
    SAME(grid_size, "env.grid_size");
    SAME(view_range, "env.view_range");
    SAME(name, "env.name (0 foraging, 1 reach)");
#undef SAME
    const mr_policy_config *p = &a->policy, *q = &b->policy;
    int same = p->num_conv == q->num_conv && p->hidden == q->hidden && p->critic_hidden == q->critic_hidden;
    for (int i = 0; same && i < p->num_conv; i++) same = p->conv_channels[i] == q->conv_channels[i];
    if (!same)
        return mr_fail(err, MR_ERR_ARG,
                       "checkpoint '%s' holds a network of other shapes (conv layers %d, hidden %d, critic %d) "
                       "than this trainer (conv layers %d, hidden %d, critic %d)",
                       path, p->num_conv, p->hidden, p->critic_hidden, q->num_conv, q->hidden, q->critic_hidden);
    return MR_OK;
}

mr_status mr_checkpoint_read_config(const char *path, mr_config *out, mr_error *err) {
    if (!path || !out) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_config: path or out is NULL");
    ck_file cf;
    mr_status s = read_file(path, &cf, err);
    if (s) return s;
    s = read_config(&cf, path, out, err);
    free(cf.buf);
    if (!s) s = mr_config_validate(out, err);
    if (!s) mr_ok(err);
    return s;
}

void mr_trainer_keep_gradients(mr_trainer *t, int on) {
    if (t) t->keep_grads = on != 0;
}

mr_status mr_checkpoint_read_gradients(const char *path, float *out, uint64_t n, mr_error *err) {
    if (!path || !out) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_gradients: path or out is NULL");
    ck_file cf;
    mr_status s = read_file(path, &cf, err);
    if (s) return s;
    const uint8_t *d;
    size_t bytes;
    s = find_section(&cf, path, "grads", CK_OPTIONAL, &d, &bytes, err);
    if (!s && !d)
        s = mr_fail(err, MR_ERR_ARG, "'%s' holds no gradients: it was saved without log.histograms "
                    "(mr_trainer_keep_gradients), or before this process ran an update", path);
    else if (!s && bytes != n * sizeof(float))
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' holds %zu bytes of gradients, not the %llu floats asked for", path,
                    bytes, (unsigned long long)n);
    if (!s) {
        memcpy(out, d, bytes);
        mr_ok(err);
    }
    free(cf.buf);
    return s;
}

mr_status mr_checkpoint_read_progress(const char *path, uint64_t *updates, uint64_t *agent_steps,
                                      mr_hot_params *hot, mr_error *err) {
    if (!path) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_progress: path is NULL");
    ck_file cf;
    mr_status s = read_file(path, &cf, err);
    if (s) return s;
    const uint8_t *d;
    size_t n;
    s = find_section(&cf, path, "progress", sizeof(ck_progress), &d, &n, err);
    if (!s) {
        ck_progress pg;
        memcpy(&pg, d, sizeof pg);
        if (updates) *updates = pg.updates;
        if (agent_steps) *agent_steps = pg.agent_steps;
        if (hot) *hot = pg.hot;
        mr_ok(err);
    }
    free(cf.buf);
    return s;
}

/* The section "ranks", or {1, 0, 0} with *has = 0 for a file without it. */
static mr_status read_ranks(const ck_file *cf, const char *path, ck_ranks *rk, int *has, mr_error *err) {
    const uint8_t *d;
    size_t n;
    *rk = (ck_ranks){1, 0, 0};
    mr_status s = find_section(cf, path, "ranks", CK_OPTIONAL, &d, &n, err);
    if (!s && d && n != sizeof *rk)
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section 'ranks' has %zu bytes, expected %zu", path, n,
                    sizeof *rk);
    if (!s && d) memcpy(rk, d, sizeof *rk);
    if (!s && rk->ranks < 1) s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: it says 0 ranks wrote it", path);
    *has = d != NULL;
    return s;
}

mr_status mr_checkpoint_read_ranks(const char *path, mr_ranks_info *out, mr_error *err) {
    if (!path || !out) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_ranks: path or out is NULL");
    ck_file cf;
    mr_status s = read_file(path, &cf, err);
    if (s) return s;
    ck_ranks rk;
    int has = 0;
    s = read_ranks(&cf, path, &rk, &has, err);
    if (!s) {
        out->ranks = (int)rk.ranks;
        out->agent_steps = has ? rk.agent_steps : 0;
        out->has = has;
        mr_ok(err);
    }
    free(cf.buf);
    return s;
}

/* Loads everything; the environments as rank `rank` of `ranks` when the
 * checkpoint holds as many instances as the ranks have (its own ranks x its
 * env.num_envs), else (ranks given) they stay as created: re-seeded.
 * learned_only (population-based training's exploit): the weights, Adam's
 * moments and step and PopArt only; the environments, progress counters,
 * hot parameters and seed stay this trainer's, and env.num_envs may differ. */
static mr_status load_impl(mr_trainer *t, const char *path, int ranks, int rank, int *carried, int learned_only,
                           mr_error *err) {
    ck_file cf;
    mr_status s = read_file(path, &cf, err);
    if (s) return s;
    t->extra_allocations++;
    ck_progress pg;
    ck_section sec[CK_MAX_SECTIONS];
    int ns = mr_ck_sections(t, &pg, NULL, 0, sec);
    const uint8_t *data[CK_MAX_SECTIONS] = {0};
    size_t bytes;
    /* Validate everything first: nothing is changed unless all of it fits. */
    mr_config stored;
    s = read_config(&cf, path, &stored, err);
    ck_ranks rk = {1, 0, 0};
    int has_ranks = 0;
    if (!s) s = read_ranks(&cf, path, &rk, &has_ranks, err);
    /* A plain load (ranks 0) of a one-rank checkpoint wants the same
     * environments, as always; else they are carried when the counts match. */
    uint64_t stored_n = (uint64_t)rk.ranks * (uint64_t)stored.env.num_envs;
    uint64_t mine_n = (uint64_t)(ranks > 0 ? ranks : 1) * (uint64_t)t->cfg.env.num_envs;
    int strict = ranks <= 0 && rk.ranks == 1 && !learned_only;
    int carry = stored_n == mine_n && !learned_only;
    if (!s) s = compatible(&stored, &t->cfg, path, strict, err);
    for (int i = 1; i < ns && !s; i++) {
        size_t want = sec[i].bytes;
        if (learned_only && strcmp(sec[i].name, "grads") == 0) continue;   /* the donor's last gradient: not learned state */
        if (mr_ck_is_env_section(sec[i].name)) {
            if (learned_only) continue;
            want = (size_t)(sec[i].bytes / (size_t)t->cfg.env.num_envs * stored_n);
        }
        s = find_section(&cf, path, sec[i].name, want, &data[i], &bytes, err);
    }
    if (!s) {
        memcpy(&pg, data[1], sizeof pg);
        s = mr_hot_validate(&pg.hot, err);
    }
    if (s) { free(cf.buf); return s; }
    int r = ranks > 0 ? rank : 0;
    /* Environments not carried stay as the backend holds them (as created:
     * fresh from the run's seed, keyed by their global indices; or, learned
     * only, as this run left them); the push below must not overwrite them
     * with stale host copies. */
    if (!carry && (s = mr_trainer_pull(t, MR_SYNC_ALL, err))) { free(cf.buf); return s; }
    for (int i = 2; i < ns; i++) {
        if (!data[i]) continue;   /* not read (learned only) */
        if (!mr_ck_is_env_section(sec[i].name)) memcpy(sec[i].data, data[i], sec[i].bytes);
        else if (carry) memcpy(sec[i].data, data[i] + (size_t)r * sec[i].bytes, sec[i].bytes);
    }
    if (carried) *carried = carry;
    t->adam_step = pg.adam_step;
    t->popart.mean = pg.popart_mean;
    t->popart.std = pg.popart_std;
    t->popart.count = pg.popart_count;
    if (!learned_only) {
        t->updates = pg.updates;
        t->agent_steps = pg.agent_steps;
        t->hot = pg.hot;
        mr_config_apply_hot(&t->cfg, &pg.hot);
        /* The run's random streams continue: the seed is part of the saved state. */
        t->cfg.seed = stored.seed;
        t->env.seed = stored.seed;
    }
    free(cf.buf);
    return mr_trainer_push(t, MR_SYNC_ALL, err);   /* the host copies to the backend */
}

mr_status mr_trainer_load(mr_trainer *t, const char *path, mr_error *err) {
    if (!t || !path) return mr_fail(err, MR_ERR_ARG, "mr_trainer_load: trainer or path is NULL");
    return load_impl(t, path, 0, 0, NULL, 0, err);
}

mr_status mr_trainer_load_learned(mr_trainer *t, const char *path, mr_error *err) {
    if (!t || !path) return mr_fail(err, MR_ERR_ARG, "mr_trainer_load_learned: trainer or path is NULL");
    return load_impl(t, path, 0, 0, NULL, 1, err);
}

mr_status mr_trainer_load_rank(mr_trainer *t, const char *path, int ranks, int rank, int *env_carried,
                               mr_error *err) {
    if (!t || !path) return mr_fail(err, MR_ERR_ARG, "mr_trainer_load_rank: trainer or path is NULL");
    if (ranks < 1 || rank < 0 || rank >= ranks)
        return mr_fail(err, MR_ERR_ARG, "mr_trainer_load_rank: rank %d of %d ranks", rank, ranks);
    return load_impl(t, path, ranks, rank, env_carried, 0, err);
}

/*
 * checkpoint_load.c - reading a checkpoint into a trainer, and its parts on
 * their own (config, progress, gradients, ranks; all a host needs before a
 * load from one read: mr_checkpoint_read_info; whether a file is one at
 * all: mr_checkpoint_is_file); checkpoint_format.h has the format. Loading checks magic, version, length, every CRC and every
 * section's size before touching the trainer, so a damaged file is refused
 * with a message and the trainer is left as it was. What is not a regular
 * file (a FIFO, a directory, a device) is refused from the open fd without
 * blocking, and the header, the file's size against it and the section
 * table are checked before the file is read or memory allocated for it (a
 * huge sparse file costs a few small reads). Then the config (a section of
 * at most CK_CONFIG_TEXT bytes) is read and every other section's size is
 * checked against what the network and environments it describes need (and,
 * loading into a trainer, against the trainer's): a section declaring more
 * is refused before a byte of it is read. Only then is the file read, in
 * chunks of CK_CHUNK bytes with the checksums computed as it goes; a reader
 * keeps only the sections it needs (reading the config of a checkpoint of
 * any size takes a chunk of memory). The weights and Adam's moments are
 * checked finite on the way: a checkpoint holding a NaN or an infinity is
 * refused by every reader, naming the tensor (a run that adopted, resumed
 * from or evaluated one would fail, or keep its NaN as a "good" state).
 */
#include "checkpoint_format.h"
#include "errors.h"
#include "config.h"
#include "checkpoint_config.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ load */

#define CK_CHUNK (1u << 20)   /* bytes read at a time */

/* One section of the file's table. */
typedef struct ck_entry {
    char name[CK_NAME];
    uint64_t off;      /* of its data */
    uint64_t bytes;
    uint32_t crc;
} ck_entry;

/* An open checkpoint: its table, and the sections read (data[i], malloc'd,
 * NULL for those not kept). */
typedef struct ck_file {
    uint64_t len;
    uint32_t version, count;
    ck_entry sec[CK_MAX_SECTIONS];
    uint8_t *data[CK_MAX_SECTIONS];
} ck_file;

static void ck_file_free(ck_file *cf) {
    for (uint32_t i = 0; i < cf->count; i++) { free(cf->data[i]); cf->data[i] = NULL; }
}

static int entry_of(const ck_file *cf, const char *name) {
    for (uint32_t i = 0; i < cf->count; i++)
        if (strcmp(cf->sec[i].name, name) == 0) return (int)i;
    return -1;
}

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
static mr_status open_checkpoint(const char *path, int *fd_out, ck_file *cf, mr_error *err) {
    *fd_out = -1;
    memset(cf, 0, sizeof *cf);
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
        ck_entry *en = &cf->sec[i];
        memcpy(en->name, sh, CK_NAME);
        en->name[CK_NAME - 1] = 0;
        memcpy(&en->crc, sh + CK_NAME + 8, 4);
        for (uint32_t j = 0; j < i && !s; j++)
            if (strcmp(cf->sec[j].name, en->name) == 0)
                s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: it has the section '%s' twice", path, en->name);
        if (s) break;
        off += sec_head;
        en->off = off;
        en->bytes = b;
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
    cf->len = len;
    cf->version = version;
    cf->count = count;
    return MR_OK;
}

/* Finds a kept section; checks its size when want_bytes != (size_t)-1. */
#define CK_OPTIONAL ((size_t)-2)   /* find_section's want_bytes: absent is not an error (*data = NULL) */
static mr_status find_section(const ck_file *cf, const char *path, const char *name, size_t want_bytes,
                              const uint8_t **data, size_t *bytes, mr_error *err) {
    int i = entry_of(cf, name);
    if (i >= 0 && cf->data[i]) {
        uint64_t b = cf->sec[i].bytes;
        if (want_bytes != (size_t)-1 && want_bytes != CK_OPTIONAL && b != want_bytes)
            return mr_fail(err, MR_ERR_FORMAT,
                           "'%s' does not fit this trainer: section '%s' has %llu bytes, expected %zu "
                           "(the checkpoint was written with other shapes or by another engine build)",
                           path, name, (unsigned long long)b, want_bytes);
        *data = cf->data[i];
        *bytes = (size_t)b;
        return MR_OK;
    }
    if (want_bytes == CK_OPTIONAL) {
        *data = NULL;
        *bytes = 0;
        return MR_OK;
    }
    return mr_fail(err, MR_ERR_FORMAT, "'%s' has no section '%s' (damaged, or from another version)", path, name);
}

/* The progress record: this build's ck_progress, or that of a file written
 * when fewer keys were hot. Its hot record (mr_hot_params, in the schema's
 * hot_slot order) is then a prefix of this build's; the members it lacks take
 * the stored config's values, as a key its config records lack takes its
 * default. Every file since version 1 holds at least CK_PROGRESS_MIN_BYTES. */
static int progress_fits(uint64_t bytes) {
    return bytes >= CK_PROGRESS_MIN_BYTES && bytes <= sizeof(ck_progress) && bytes % 8 == 0;
}

static mr_status read_progress(const ck_file *cf, const char *path, const mr_config *stored, ck_progress *pg,
                               mr_error *err) {
    const uint8_t *d = NULL;
    size_t n = 0;
    mr_status s = find_section(cf, path, "progress", (size_t)-1, &d, &n, err);
    if (s) return s;
    if (!progress_fits(n))
        return mr_fail(err, MR_ERR_FORMAT,
                       "'%s' does not fit this trainer: section 'progress' has %zu bytes, expected %zu "
                       "(or, from a build with fewer hot keys, %zu .. %zu)", path, n, sizeof *pg,
                       (size_t)CK_PROGRESS_MIN_BYTES, sizeof *pg);
    memset(pg, 0, sizeof *pg);
    if (stored) mr_config_hot_params(stored, &pg->hot);
    memcpy(pg, d, n);
    return MR_OK;
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


/* Reads section i whole into cf->data[i] (small sections, before the
 * streamed pass) and checks its own CRC. */
static mr_status read_small(int fd, ck_file *cf, int i, const char *path, mr_error *err) {
    const ck_entry *en = &cf->sec[i];
    cf->data[i] = malloc(en->bytes ? (size_t)en->bytes : 1);
    if (!cf->data[i]) return mr_fail(err, MR_ERR_NOMEM, "out of memory reading '%s'", path);
    if (read_at(fd, cf->data[i], (size_t)en->bytes, en->off) != 0)
        return mr_fail(err, MR_ERR_IO, "short read of '%s': %s", path, errno ? strerror(errno) : "it shrank while being read");
    if (mr_ck_crc32(0, cf->data[i], (size_t)en->bytes) != en->crc)
        return mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section '%s' fails its checksum", path, en->name);
    return MR_OK;
}

/* What a caller checks once the stored config is known and before the file
 * is read (loading: the trainer's shapes). */
typedef mr_status (*ck_precheck)(const ck_file *cf, const char *path, const mr_config *stored, uint64_t instances,
                                 void *ctx, mr_error *err);

/* The sections kept in memory beside the small ones (config, progress, ranks). */
enum { CK_KEEP_SMALL, CK_KEEP_GRADS, CK_KEEP_LEARNED /* all but env.* and grads */, CK_KEEP_ALL };

/* Non-finite values found in a per-parameter section. */
typedef struct ck_bad {
    uint64_t count;
    uint64_t *per_tensor;   /* counts by tensor, allocated on the first */
} ck_bad;

static void note_bad(ck_bad *bad, const mr_net_layout *net, uint64_t index) {
    bad->count++;
    if (!bad->per_tensor) bad->per_tensor = calloc(MR_POLICY_MAX_TENSORS, sizeof(uint64_t));
    if (!bad->per_tensor) return;
    for (int k = 0; k < net->n_tensors; k++)
        if (index >= net->tensors[k].offset && index < net->tensors[k].offset + net->tensors[k].count) {
            bad->per_tensor[k]++;
            return;
        }
}

/* "value.w (16 of 16), value.b (1 of 1)" into out. */
static void bad_list(const ck_bad *bad, const mr_net_layout *net, char *out, size_t n) {
    size_t at = 0;
    out[0] = 0;
    for (int k = 0; bad->per_tensor && k < net->n_tensors && at < n; k++) {
        if (!bad->per_tensor[k]) continue;
        int w = snprintf(out + at, n - at, "%s%s (%llu of %llu)", at ? ", " : "", net->tensors[k].name,
                         (unsigned long long)bad->per_tensor[k], (unsigned long long)net->tensors[k].count);
        if (w < 0) break;
        at += (size_t)w;
    }
}

/* Opens and checks a checkpoint (module comment): the table, the config,
 * every section's size against what the config needs, pre (when given),
 * then one streamed pass over the file with every checksum and the weights'
 * finiteness; *stored_out (when given) gets the stored config. On success
 * cf holds the small sections and those `keep` asks for. */
static mr_status read_file(const char *path, ck_file *cf, int keep, ck_precheck pre, void *ctx,
                           mr_config *stored_out, mr_error *err) {
    int fd = -1;
    mr_status s = open_checkpoint(path, &fd, cf, err);
    if (s) return s;
    const uint64_t len = cf->len;
    /* The config, then the ranks: small, bounded, read first. */
    int ic = entry_of(cf, "config.keys"), iv1 = -1;
    if (ic < 0) iv1 = entry_of(cf, "config");
    if (ic >= 0 && cf->sec[ic].bytes > CK_CONFIG_TEXT)
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: its config records declare %llu bytes (at most %d)", path,
                    (unsigned long long)cf->sec[ic].bytes, CK_CONFIG_TEXT);
    else if (ic < 0 && iv1 < 0)
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' has no section 'config.keys' (damaged, or from another version)", path);
    else if (ic < 0 && cf->sec[iv1].bytes != mr_ck_config_v1_bytes())
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' does not fit this trainer: section 'config' has %llu bytes, expected %zu "
                    "(the checkpoint was written with other shapes or by another engine build)", path,
                    (unsigned long long)cf->sec[iv1].bytes, mr_ck_config_v1_bytes());
    if (!s) s = read_small(fd, cf, ic >= 0 ? ic : iv1, path, err);
    mr_config stored;
    if (!s) s = read_config(cf, path, &stored, err);
    if (!s) s = mr_config_validate(&stored, err);
    ck_ranks rk = {1, 0, 0};
    int ir = entry_of(cf, "ranks");
    if (!s && ir >= 0) {
        if (cf->sec[ir].bytes != sizeof rk)
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section 'ranks' has %llu bytes, expected %zu", path,
                        (unsigned long long)cf->sec[ir].bytes, sizeof rk);
        if (!s) s = read_small(fd, cf, ir, path, err);
        if (!s) memcpy(&rk, cf->data[ir], sizeof rk);
        if (!s && (rk.ranks < 1 || rk.ranks > 1u << 20))
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: it says %u ranks wrote it", path, rk.ranks);
    }
    const uint64_t instances = (uint64_t)rk.ranks * (uint64_t)(s ? 0 : stored.env.num_envs);
    /* Every other section against what the config needs, before reading it. */
    mr_net_layout net;
    if (!s) mr_net_layout_init(&net, &stored.policy, mr_config_side(&stored));
    for (uint32_t i = 0; !s && i < cf->count; i++) {
        const ck_entry *en = &cf->sec[i];
        if ((int)i == ic || (int)i == iv1) continue;
        uint64_t want;
        int per_param = 0;
        if (!mr_ck_section_bytes(&stored, instances, en->name, &want, &per_param))
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' has a section '%.31s' this moonrl does not write (damaged, or from "
                        "another version)", path, en->name);
        else if (en->bytes != want && per_param)
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section '%s' declares %llu bytes, but the network its "
                        "config describes has %llu parameters (%llu bytes)", path, en->name,
                        (unsigned long long)en->bytes, (unsigned long long)net.n_params, (unsigned long long)want);
        else if (en->bytes != want && mr_ck_is_env_section(en->name))
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section '%s' declares %llu bytes, but its config's %llu "
                        "environments (%u ranks x env.num_envs %d, a %d x %d grid) need %llu", path, en->name,
                        (unsigned long long)en->bytes, (unsigned long long)instances, rk.ranks, stored.env.num_envs,
                        stored.env.grid_size, stored.env.grid_size, (unsigned long long)want);
        else if (strcmp(en->name, "progress") == 0 ? !progress_fits(en->bytes) : en->bytes != want)
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section '%s' declares %llu bytes, expected %llu", path,
                        en->name, (unsigned long long)en->bytes, (unsigned long long)want);
    }
    if (!s && pre) s = pre(cf, path, &stored, instances, ctx, err);
    /* One pass over the file, a chunk at a time: the file's CRC, each
     * section's, the weights' finiteness; kept sections read in place. */
    uint8_t *chunk = s ? NULL : malloc(CK_CHUNK);
    if (!s && !chunk) s = mr_fail(err, MR_ERR_NOMEM, "out of memory reading '%s'", path);
    uint32_t whole = 0;
    uint64_t pos = 0;
    int first_bad_sec = -1;
    ck_bad bad[3] = {{0, NULL}, {0, NULL}, {0, NULL}};   /* params, adam_m, adam_v */
    static const char *const finite_names[3] = {"params", "adam_m", "adam_v"};
    for (uint32_t i = 0; !s && i <= cf->count; i++) {
        /* the headers before section i's data (or before the trailer) */
        const uint64_t start = i < cf->count ? cf->sec[i].off : len - 12;
        if (start - pos > CK_CHUNK || read_at(fd, chunk, (size_t)(start - pos), pos) != 0) {
            s = mr_fail(err, MR_ERR_IO, "short read of '%s': %s", path, errno ? strerror(errno) : "it shrank while being read");
            break;
        }
        whole = mr_ck_crc32(whole, chunk, (size_t)(start - pos));
        pos = start;
        if (i == cf->count) break;
        ck_entry *en = &cf->sec[i];
        int kept = cf->data[i] != NULL;
        const int is_grads = strcmp(en->name, "grads") == 0;
        int want = !kept && (keep == CK_KEEP_ALL || (keep == CK_KEEP_GRADS && is_grads) ||
                             (keep == CK_KEEP_LEARNED && !is_grads && !mr_ck_is_env_section(en->name)) ||
                             strcmp(en->name, "progress") == 0);
        if (want) {
            cf->data[i] = malloc(en->bytes ? (size_t)en->bytes : 1);
            if (!cf->data[i]) { s = mr_fail(err, MR_ERR_NOMEM, "out of memory reading '%s'", path); break; }
        }
        int fin = -1;
        for (int k = 0; k < 3; k++) if (strcmp(en->name, finite_names[k]) == 0) fin = k;
        uint32_t scrc = 0;
        for (uint64_t done = 0; done < en->bytes;) {
            size_t n = en->bytes - done < CK_CHUNK ? (size_t)(en->bytes - done) : CK_CHUNK;
            uint8_t *dst = kept ? cf->data[i] + done : want ? cf->data[i] + done : chunk;
            if (kept) {
                /* read before: only the file's CRC to continue */
            } else if (read_at(fd, dst, n, pos) != 0) {
                s = mr_fail(err, MR_ERR_IO, "short read of '%s': %s", path, errno ? strerror(errno) : "it shrank while being read");
                break;
            }
            whole = mr_ck_crc32(whole, dst, n);
            scrc = mr_ck_crc32(scrc, dst, n);
            if (fin >= 0) {   /* chunks start at multiples of 4 within the section */
                const uint64_t first = done / 4;
                for (size_t k = 0; k + 4 <= n; k += 4) {
                    float v;
                    memcpy(&v, dst + k, 4);
                    if (!isfinite(v)) note_bad(&bad[fin], &net, first + k / 4);
                }
            }
            done += n;
            pos += n;
        }
        if (!s && scrc != en->crc && first_bad_sec < 0) first_bad_sec = (int)i;   /* said after the file's */
    }
    uint8_t tail[12];
    if (!s && read_at(fd, tail, sizeof tail, len - 12) != 0)
        s = mr_fail(err, MR_ERR_IO, "short read of '%s': %s", path, errno ? strerror(errno) : "it shrank while being read");
    if (!s) {
        uint32_t want_crc;
        memcpy(&want_crc, tail, 4);
        if (memcmp(tail + 4, CK_END, 8) != 0 || whole != want_crc) {
            char which[CK_NAME + 48] = "";
            if (first_bad_sec >= 0)
                snprintf(which, sizeof which, " (section '%s' first)", cf->sec[first_bad_sec].name);
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: its checksum does not match its contents%s", path, which);
        } else if (first_bad_sec >= 0) {
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' is damaged: section '%s' fails its checksum", path,
                        cf->sec[first_bad_sec].name);
        }
    }
    for (int k = 0; !s && k < 3; k++) {
        if (!bad[k].count) continue;
        char list[512];
        bad_list(&bad[k], &net, list, sizeof list);
        s = mr_fail(err, MR_ERR_FORMAT, "'%s' holds %s that %s not finite (NaN or infinite): %s%s; a run "
                    "cannot go on from it (it was written after a non-finite update: use an earlier checkpoint)",
                    path, k == 0 ? "weights" : k == 1 ? "Adam moments (adam_m)" : "Adam moments (adam_v)",
                    bad[k].count == 1 ? "is" : "are", list, k == 0 ? "" : " of those weights");
    }
    if (!s) {
        int ip = entry_of(cf, "progress");
        ck_progress pg;
        if (ip >= 0 && cf->data[ip] && cf->sec[ip].bytes >= CK_PROGRESS_MIN_BYTES) {
            memcpy(&pg, cf->data[ip], offsetof(ck_progress, hot));   /* the counters and PopArt */
            if (!isfinite(pg.popart_mean) || !isfinite(pg.popart_std) || !isfinite(pg.popart_count))
                s = mr_fail(err, MR_ERR_FORMAT, "'%s' holds PopArt statistics that are not finite (mean %g, std %g, "
                            "count %g); a run cannot go on from it (use an earlier checkpoint)", path, pg.popart_mean,
                            pg.popart_std, pg.popart_count);
        }
    }
    for (int k = 0; k < 3; k++) free(bad[k].per_tensor);
    free(chunk);
    close(fd);
    if (!s && stored_out) *stored_out = stored;
    if (s) ck_file_free(cf);
    return s;
}


/* Shapes that must agree between the checkpoint and the trainer (the
 * number of environments only when `envs` is set: a data-parallel load
 * re-seeds the environments it cannot carry): the comparison of
 * mr_checkpoint_config_conflicts (checkpoint_config.c), on the keys the
 * trainer's buffers are laid out from. */
static mr_status compatible(const mr_config *stored, const mr_config *mine, const char *path, int envs,
                            mr_error *err) {
    char diff[MR_ERROR_LEN / 2];
    if (!mr_ck_config_conflicts(stored, mine, envs ? CK_COMPARE_SHAPES_ENVS : CK_COMPARE_SHAPES, diff, sizeof diff))
        return MR_OK;
    return mr_fail(err, MR_ERR_ARG, "checkpoint '%s' holds a run of other shapes than this trainer: %s (the "
                   "checkpoint's vs this trainer's); create the trainer from the checkpoint's config", path, diff);
}

mr_status mr_checkpoint_read_config(const char *path, mr_config *out, mr_error *err) {
    if (!path || !out) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_config: path or out is NULL");
    ck_file cf;
    mr_status s = read_file(path, &cf, CK_KEEP_SMALL, NULL, NULL, out, err);   /* validated */
    if (s) return s;
    ck_file_free(&cf);
    mr_ok(err);
    return s;
}

void mr_trainer_keep_gradients(mr_trainer *t, int on) {
    if (t) t->keep_grads = on != 0;
}

mr_status mr_checkpoint_read_gradients(const char *path, float *out, uint64_t n, mr_error *err) {
    if (!path || !out) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_gradients: path or out is NULL");
    ck_file cf;
    mr_status s = read_file(path, &cf, CK_KEEP_GRADS, NULL, NULL, NULL, err);
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
    ck_file_free(&cf);
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

mr_status mr_checkpoint_read_info(const char *path, mr_checkpoint_info *out, mr_error *err) {
    if (!path || !out) return mr_fail(err, MR_ERR_ARG, "mr_checkpoint_read_info: path or out is NULL");
    memset(out, 0, sizeof *out);
    ck_file cf;
    mr_config stored;
    mr_status s = read_file(path, &cf, CK_KEEP_SMALL, NULL, NULL, &stored, err);
    if (s) return s;
    ck_progress pg;
    ck_ranks rk;
    int has = 0;
    s = read_progress(&cf, path, &stored, &pg, err);
    if (!s) s = read_ranks(&cf, path, &rk, &has, err);
    if (!s) {
        out->config = stored;
        out->updates = pg.updates;
        out->agent_steps = pg.agent_steps;
        out->hot = pg.hot;
        out->ranks.ranks = (int)rk.ranks;
        out->ranks.has = has;
        out->ranks.agent_steps = has ? rk.agent_steps : 0;
        out->version = cf.version;
        out->bytes = cf.len;
        out->sections = (int)cf.count;
        for (uint32_t i = 0; i < cf.count && i < MR_CHECKPOINT_MAX_SECTIONS; i++) {
            snprintf(out->section[i].name, sizeof out->section[i].name, "%s", cf.sec[i].name);
            out->section[i].bytes = cf.sec[i].bytes;
        }
        mr_ok(err);
    }
    ck_file_free(&cf);
    return s;
}

int mr_checkpoint_is_file(const char *path) {
    if (!path) return 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return 0;
    struct stat st;
    uint8_t h[8];
    int yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 8 && read_at(fd, h, sizeof h, 0) == 0 &&
              memcmp(h, CK_MAGIC, 8) == 0;
    close(fd);
    return yes;
}

/* What load_impl checks before the file is read: the trainer's shapes
 * (compatible) and each of its sections in the table at the size the
 * trainer needs. */
typedef struct load_ctx {
    mr_trainer *t;
    int ranks, learned_only;
    uint64_t stored_n;
    int strict, carry;
} load_ctx;

static int skipped_section(const load_ctx *c, const char *name) {
    /* learned only: neither the donor's environments nor its last gradient */
    return c->learned_only && (mr_ck_is_env_section(name) || strcmp(name, "grads") == 0);
}

static mr_status load_precheck(const ck_file *cf, const char *path, const mr_config *stored, uint64_t instances,
                               void *ctx, mr_error *err) {
    load_ctx *c = ctx;
    mr_trainer *t = c->t;
    int rks = (int)(instances / (uint64_t)stored->env.num_envs);
    /* A plain load (ranks 0) of a one-rank checkpoint wants the same
     * environments, as always; else they are carried when the counts match. */
    c->stored_n = instances;
    uint64_t mine_n = (uint64_t)(c->ranks > 0 ? c->ranks : 1) * (uint64_t)t->cfg.env.num_envs;
    c->strict = c->ranks <= 0 && rks == 1 && !c->learned_only;
    c->carry = c->stored_n == mine_n && !c->learned_only;
    mr_status s = compatible(stored, &t->cfg, path, c->strict, err);
    ck_progress pg;
    ck_section sec[CK_MAX_SECTIONS];
    int ns = mr_ck_sections(t, &pg, NULL, 0, sec);
    for (int i = 1; i < ns && !s; i++) {
        if (skipped_section(c, sec[i].name)) continue;
        uint64_t want = sec[i].bytes;
        if (mr_ck_is_env_section(sec[i].name)) want = sec[i].bytes / (uint64_t)t->cfg.env.num_envs * c->stored_n;
        int k = entry_of(cf, sec[i].name);
        if (k < 0)
            s = mr_fail(err, MR_ERR_FORMAT, "'%s' has no section '%s' (damaged, or from another version)", path,
                        sec[i].name);
        else if (strcmp(sec[i].name, "progress") == 0 ? !progress_fits(cf->sec[k].bytes) : cf->sec[k].bytes != want)
            s = mr_fail(err, MR_ERR_FORMAT,
                        "'%s' does not fit this trainer: section '%s' has %llu bytes, expected %llu "
                        "(the checkpoint was written with other shapes or by another engine build)",
                        path, sec[i].name, (unsigned long long)cf->sec[k].bytes, (unsigned long long)want);
    }
    return s;
}

/* Loads everything; the environments as rank `rank` of `ranks` when the
 * checkpoint holds as many instances as the ranks have (its own ranks x its
 * env.num_envs), else (ranks given) they stay as created: re-seeded.
 * learned_only (population-based training's exploit): the weights, Adam's
 * moments and step and PopArt only; the environments, progress counters,
 * hot parameters and seed stay this trainer's, and env.num_envs may differ.
 * Everything is checked (read_file, load_precheck) before the trainer
 * changes. */
static mr_status load_impl(mr_trainer *t, const char *path, int ranks, int rank, int *carried, int learned_only,
                           mr_error *err) {
    ck_file cf;
    load_ctx lc = {t, ranks, learned_only, 0, 0, 0};
    mr_config stored;
    mr_status s = read_file(path, &cf, learned_only ? CK_KEEP_LEARNED : CK_KEEP_ALL, load_precheck, &lc, &stored, err);
    if (s) return s;
    t->extra_allocations++;
    ck_progress pg;
    ck_section sec[CK_MAX_SECTIONS];
    int ns = mr_ck_sections(t, &pg, NULL, 0, sec);
    const uint8_t *data[CK_MAX_SECTIONS] = {0};
    size_t bytes;
    const uint64_t stored_n = lc.stored_n;
    const int carry = lc.carry;
    for (int i = 1; i < ns && !s; i++) {
        if (skipped_section(&lc, sec[i].name)) continue;
        size_t want = sec[i].bytes;
        if (mr_ck_is_env_section(sec[i].name)) want = (size_t)(sec[i].bytes / (size_t)t->cfg.env.num_envs * stored_n);
        if (strcmp(sec[i].name, "progress") == 0) want = (size_t)-1;   /* read_progress, below */
        s = find_section(&cf, path, sec[i].name, want, &data[i], &bytes, err);
    }
    if (!s) s = read_progress(&cf, path, &stored, &pg, err);
    if (!s) s = mr_hot_validate(&pg.hot, err);
    if (s) { ck_file_free(&cf); return s; }
    int r = ranks > 0 ? rank : 0;
    /* Environments not carried stay as the backend holds them (as created:
     * fresh from the run's seed, keyed by their global indices; or, learned
     * only, as this run left them); the push below must not overwrite them
     * with stale host copies. */
    if (!carry && (s = mr_trainer_pull(t, MR_SYNC_ALL, err))) { ck_file_free(&cf); return s; }
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
    ck_file_free(&cf);
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

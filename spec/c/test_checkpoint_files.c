/*
 * test_checkpoint_files.c - the checkpoint loader on paths that are not
 * checkpoints of the right size: a large sparse file (refused from its
 * header, without reading or allocating its size), a FIFO (refused at once,
 * not waiting for a writer: an alarm fails the test if the load blocks), a
 * directory, a truncated and an oversized checkpoint (both sizes named), and
 * a real checkpoint that still loads.
 */
#define _GNU_SOURCE
#include "moonrl.h"
#include "check.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define BIG (1ull << 30)   /* 1 GiB, sparse: no disk, no memory unless read */

static void small_config(mr_config *c) {
    mr_config_default(c);
    c->env.num_envs = 8;
    c->policy.num_conv = 1;
    c->policy.conv_channels[0] = 4;
    c->policy.hidden = 16;
    c->policy.critic_hidden = 16;
    c->ppo.rollout_steps = 8;
    c->threads = 1;
    c->device = MR_DEVICE_CPU;
    c->total_steps = 8 * 8 * 4;
}

static long peak_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* A copy of the first n bytes of src in dst, then dst's size set to size. */
static void copy_head(const char *src, const char *dst, size_t n, unsigned long long size) {
    FILE *f = fopen(src, "rb");
    char *buf = malloc(n);
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    CHECK(got == n);
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(write(fd, buf, n) == (ssize_t)n);
    CHECK(ftruncate(fd, (off_t)size) == 0);
    close(fd);
    free(buf);
}

/* Both entry points refuse path with status want and a message holding the
 * given words; no more than 64 MiB of peak memory is added. */
static void refuses(mr_trainer *t, const char *path, mr_status want, const char *w1, const char *w2) {
    mr_error e;
    mr_config rc;
    long before = peak_rss_kib();
    alarm(120);   /* a load that blocks (a FIFO waiting for a writer) ends the test here */
    mr_status s1 = mr_checkpoint_read_config(path, &rc, &e);
    CHECK_MSG(s1 == want, "read_config(%s) = %d: %s", path, (int)s1, e.msg);
    CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, w1) && (!w2 || strstr(e.msg, w2)),
              "read_config(%s): message '%s' lacks '%s' / '%s'", path, e.msg, w1, w2 ? w2 : "");
    mr_status s2 = mr_trainer_load(t, path, &e);
    CHECK_MSG(s2 == want, "load(%s) = %d: %s", path, (int)s2, e.msg);
    CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, w1) && (!w2 || strstr(e.msg, w2)),
              "load(%s): message '%s' lacks '%s' / '%s'", path, e.msg, w1, w2 ? w2 : "");
    alarm(0);
    long grown = peak_rss_kib() - before;
    CHECK_MSG(grown < 64 * 1024, "refusing %s raised the peak memory by %ld KiB", path, grown);
}

int main(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t;
    CHECK_MSG(mr_trainer_create(&c, &t, &e) == MR_OK, "%s", e.msg);
    const char *good = "test_ckfiles_good.mrck";
    CHECK_MSG(mr_trainer_save(t, good, &e) == MR_OK, "%s", e.msg);
    long n = file_size(good);
    CHECK(n > 100);
    char want_n[32], want_big[32];
    snprintf(want_n, sizeof want_n, "%ld", n);
    snprintf(want_big, sizeof want_big, "%llu", BIG);

    /* A large sparse file of zeros (truncate -s): refused by its magic bytes. */
    const char *sparse = "test_ckfiles_sparse.mrck";
    unlink(sparse);
    int fd = open(sparse, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)BIG) == 0);
    close(fd);
    refuses(t, sparse, MR_ERR_FORMAT, "not a moonrl checkpoint", NULL);

    /* A real header, then a large sparse tail: oversized, both sizes named. */
    const char *big = "test_ckfiles_oversized.mrck";
    copy_head(good, big, 24, BIG);
    refuses(t, big, MR_ERR_FORMAT, want_n, want_big);
    refuses(t, big, MR_ERR_FORMAT, "oversized", NULL);

    /* Truncated: both sizes named. */
    const char *cut = "test_ckfiles_truncated.mrck";
    copy_head(good, cut, (size_t)n / 2, (unsigned long long)n / 2);
    char want_half[32];
    snprintf(want_half, sizeof want_half, "%ld", n / 2);
    refuses(t, cut, MR_ERR_FORMAT, "truncated", want_half);
    refuses(t, cut, MR_ERR_FORMAT, want_n, NULL);

    /* A FIFO with no writer: refused at once, not waited on. */
    const char *fifo = "test_ckfiles_fifo.mrck";
    unlink(fifo);
    CHECK(mkfifo(fifo, 0644) == 0);
    refuses(t, fifo, MR_ERR_FORMAT, "FIFO", "not a regular file");

    /* A directory. */
    const char *dir = "test_ckfiles_dir.mrck";
    rmdir(dir);
    CHECK(mkdir(dir, 0755) == 0);
    refuses(t, dir, MR_ERR_FORMAT, "is a directory", NULL);

    /* A character device. */
    refuses(t, "/dev/zero", MR_ERR_FORMAT, "character device", NULL);

    /* The real checkpoint still loads, and a missing one is an I/O error. */
    CHECK_MSG(mr_trainer_load(t, good, &e) == MR_OK, "%s", e.msg);
    mr_config rc;
    CHECK_MSG(mr_checkpoint_read_config(good, &rc, &e) == MR_OK, "%s", e.msg);
    CHECK(mr_trainer_load(t, "test_ckfiles_missing.mrck", &e) == MR_ERR_IO);

    mr_trainer_free(t);
    unlink(good);
    unlink(sparse);
    unlink(big);
    unlink(cut);
    unlink(fifo);
    rmdir(dir);
    return check_report("test_checkpoint_files");
}

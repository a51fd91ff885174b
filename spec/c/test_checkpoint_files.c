/*
 * test_checkpoint_files.c - the checkpoint loader on paths that are not
 * checkpoints of the right size: a large sparse file (refused from its
 * header, without reading or allocating its size), a FIFO (refused at once,
 * not waiting for a writer: an alarm fails the test if the load blocks), a
 * directory, a truncated and an oversized checkpoint (both sizes named), and
 * a real checkpoint that still loads. And the config as keyed records
 * (format version 2): read back equal to what was saved, a setting missing
 * from the records takes its default, one this build does not know is
 * refused by name, and version 1 files (raw mr_config bytes: the bitcompat
 * fixtures) still load.
 *
 * Crafted files (issue 43): a header and section table that add up, but a
 * section declaring 3 GiB (sparse) where the network its config describes
 * needs kilobytes: refused from the table, before a byte of it is read; a
 * checkpoint holding a NaN weight (written after mr_trainer_debug_poison):
 * refused by every reader, naming the tensor; and a real checkpoint of tens
 * of MiB whose config and progress are read with the checksum streamed
 * (peak memory grows by far less than the file).
 */
#define _GNU_SOURCE
#include "moonrl.h"
#include "check.h"
#include "ckfile.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
    mr_checkpoint_info info;
    mr_status s3 = mr_checkpoint_read_info(path, &info, &e);
    CHECK_MSG(s3 == want, "read_info(%s) = %d: %s", path, (int)s3, e.msg);
    CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, w1) && (!w2 || strstr(e.msg, w2)),
              "read_info(%s): message '%s' lacks '%s' / '%s'", path, e.msg, w1, w2 ? w2 : "");
    mr_status s2 = mr_trainer_load(t, path, &e);
    CHECK_MSG(s2 == want, "load(%s) = %d: %s", path, (int)s2, e.msg);
    CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, w1) && (!w2 || strstr(e.msg, w2)),
              "load(%s): message '%s' lacks '%s' / '%s'", path, e.msg, w1, w2 ? w2 : "");
    alarm(0);
    long grown = peak_rss_kib() - before;
    CHECK_MSG(grown < 64 * 1024, "refusing %s raised the peak memory by %ld KiB", path, grown);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A copy of checkpoint src in dst where section `name` declares `extra`
 * more bytes, the file's header the same many more: the table adds up, the
 * extra bytes are a sparse hole (no disk, no memory unless read). */
static void grow_section(const char *src, const char *dst, const char *name, unsigned long long extra) {
    FILE *f = fopen(src, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n);
    CHECK(fread(b, 1, n, f) == n);
    fclose(f);
    uint64_t total;
    uint32_t count;
    memcpy(&count, b + 12, 4);
    memcpy(&total, b + 16, 8);
    total += extra;
    memcpy(b + 16, &total, 8);
    int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, b, 24) == 24);
    size_t off = 24;
    off_t at = 24;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t len;
        memcpy(&len, b + off + 32, 8);
        int hit = strcmp((char *)b + off, name) == 0;
        uint64_t declared = len + (hit ? extra : 0);
        memcpy(b + off + 32, &declared, 8);
        CHECK(pwrite(fd, b + off, 48 + (size_t)len, at) == (ssize_t)(48 + len));
        at += (off_t)(48 + declared);
        off += 48 + (size_t)len;
    }
    CHECK(pwrite(fd, b + off, n - off, at) == (ssize_t)(n - off));
    close(fd);
    free(b);
}

/* Both readers and the adopting load refuse path within a second, naming w1 and w2. */
static void refuses_fast(mr_trainer *t, const char *path, const char *w1, const char *w2) {
    double t0 = now_s();
    refuses(t, path, MR_ERR_FORMAT, w1, w2);
    mr_error e;
    mr_status s = mr_trainer_load_learned(t, path, &e);
    CHECK_MSG(s == MR_ERR_FORMAT && strstr(e.msg, w1) && (!w2 || strstr(e.msg, w2)),
              "load_learned(%s) = %d: %s", path, (int)s, e.msg);
    double dt = now_s() - t0;
    CHECK_MSG(dt < 1.0, "refusing %s took %.2f s", path, dt);
}

/* A checkpoint of about 40 MiB (4096 environments on a 96 x 96 grid),
 * written by a child process so this one's peak memory stays small; then
 * its config and progress are read here, the checksum streamed: the peak
 * grows by less than 8 MiB. */
static void streamed_reads(void) {
    const char *path = "test_ckfiles_large.mrck";
    pid_t pid = fork();
    if (pid == 0) {
        mr_config c;
        small_config(&c);
        c.env.num_envs = 4096;
        c.env.grid_size = 96;
        mr_error e;
        mr_trainer *t;
        if (mr_trainer_create(&c, &t, &e) != MR_OK || mr_trainer_save(t, path, &e) != MR_OK) {
            fprintf(stderr, "%s\n", e.msg);
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    long n = file_size(path);
    CHECK_MSG(n > 30L * 1024 * 1024, "the large checkpoint has %ld bytes", n);
    long before = peak_rss_kib();
    mr_config rc;
    mr_error e;
    CHECK_MSG(mr_checkpoint_read_config(path, &rc, &e) == MR_OK, "%s", e.msg);
    static mr_checkpoint_info info;
    info.updates = 1;
    CHECK_MSG(mr_checkpoint_read_info(path, &info, &e) == MR_OK, "%s", e.msg);
    CHECK(rc.env.num_envs == 4096 && info.updates == 0 && info.config.env.num_envs == 4096);
    long grown = peak_rss_kib() - before;
    CHECK_MSG(grown < 8 * 1024, "reading the config of a %ld-byte checkpoint raised the peak memory by %ld KiB", n,
              grown);
    unlink(path);
}

#ifndef FIXTURE_DIR
#define FIXTURE_DIR "spec/c/fixtures"
#endif

static uint32_t crc32_of(const unsigned char *p, size_t n, uint32_t crc) {   /* zlib's, bit by bit */
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* A copy of checkpoint src in dst with `from` replaced by `to` (same length)
 * inside the section "config.keys", its checksum and the file's made whole
 * again: an edited but undamaged file. */
static int edit_records(const char *src, const char *dst, const char *from, const char *to) {
    FILE *f = fopen(src, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n);
    int ok = fread(b, 1, n, f) == n;
    fclose(f);
    uint32_t count;
    memcpy(&count, b + 12, 4);
    size_t off = 24;
    int done = 0;
    for (uint32_t i = 0; ok && i < count; i++) {
        uint64_t len;
        memcpy(&len, b + off + 32, 8);
        unsigned char *d = b + off + 48;
        if (strcmp((char *)b + off, "config.keys") == 0) {
            for (size_t k = 0; k + strlen(from) <= len; k++)
                if (memcmp(d + k, from, strlen(from)) == 0) {
                    memcpy(d + k, to, strlen(to));
                    done = 1;
                    break;
                }
            uint32_t c = crc32_of(d, (size_t)len, 0);
            memcpy(b + off + 40, &c, 4);
        }
        off += 48 + (size_t)len;
    }
    uint32_t whole = crc32_of(b, n - 12, 0);
    memcpy(b + n - 12, &whole, 4);
    f = fopen(dst, "wb");
    ok = ok && f && fwrite(b, 1, n, f) == n;
    if (f) fclose(f);
    free(b);
    return ok && done;
}

static void config_records(mr_trainer *t, const char *good, const mr_config *saved) {
    mr_error e;
    mr_config rc;
    /* read back: every setting equal, byte for byte (both start from
     * mr_config_default's zeroed struct; a list keeps only its entries) */
    CHECK_MSG(mr_checkpoint_read_config(good, &rc, &e) == MR_OK, "%s", e.msg);
    mr_config want = *saved;
    for (int i = want.policy.num_conv; i < MR_MAX_CONV; i++) want.policy.conv_channels[i] = 0;
    CHECK_MSG(memcmp(&rc, &want, sizeof rc) == 0, "the config read back differs from the one saved");
    /* a setting missing from the records (commented out) takes its default */
    const char *edited = "test_ckfiles_missing_key.mrck";
    CHECK(edit_records(good, edited, "ppo.rollout_steps = 8\n", "#po.rollout_steps = 8\n"));
    CHECK_MSG(mr_checkpoint_read_config(edited, &rc, &e) == MR_OK, "%s", e.msg);
    mr_config def;
    mr_config_default(&def);
    CHECK_MSG(rc.ppo.rollout_steps == def.ppo.rollout_steps && rc.env.num_envs == saved->env.num_envs,
              "missing ppo.rollout_steps read as %d (default %d)", rc.ppo.rollout_steps, def.ppo.rollout_steps);
    /* ppo.truncation missing (a checkpoint from before it existed) reads as
     * "end", what those runs did, not as the default "auto" */
    CHECK(saved->ppo.truncation == MR_TRUNCATION_AUTO);
    CHECK(edit_records(good, edited, "ppo.truncation = auto\n", "#po.truncation = auto\n"));
    CHECK_MSG(mr_checkpoint_read_config(edited, &rc, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(rc.ppo.truncation == MR_TRUNCATION_END, "missing ppo.truncation read as %d", (int)rc.ppo.truncation);
    /* a setting this build does not know: refused by name, the trainer untouched */
    const char *unknown = "test_ckfiles_unknown_key.mrck";
    CHECK(edit_records(good, unknown, "ppo.epochs =", "ppo.epochz ="));
    refuses(t, unknown, MR_ERR_FORMAT, "'ppo.epochz'", "does not know");
    /* a value that does not parse */
    const char *bad = "test_ckfiles_bad_value.mrck";
    CHECK(edit_records(good, bad, "env.mode = ground_truth", "env.mode = ground_trutx"));
    refuses(t, bad, MR_ERR_FORMAT, "env.mode = ground_trutx", "does not parse");
    unlink(edited);
    unlink(unknown);
    unlink(bad);

    /* version 1: a checkpoint the engine wrote before the records (commit
     * 67898b7, `moonrl train`: proxy mode, 16 envs on a 16x16 grid, convs 4
     * and 8, hidden 32, 2 epochs of 2 minibatches, lr 5e-4 constant, seed 3,
     * after update 2) reads and loads */
    const char *v1 = FIXTURE_DIR "/config_v1_proxy.mrck";
    CHECK_MSG(mr_checkpoint_read_config(v1, &rc, &e) == MR_OK, "%s", e.msg);
    CHECK(rc.env.mode == MR_MODE_PROXY && rc.env.num_envs == 16 && rc.env.grid_size == 16 &&
          rc.policy.num_conv == 2 && rc.policy.conv_channels[0] == 4 && rc.policy.conv_channels[1] == 8 &&
          rc.policy.hidden == 32 && rc.ppo.epochs == 2 && rc.ppo.minibatches == 2 &&
          rc.ppo.lr.kind == MR_SCHED_CONSTANT && rc.ppo.lr.start == 5e-4 && rc.seed == 3);
    CHECK(rc.ppo.truncation == MR_TRUNCATION_END && rc.ppo.reward_clip == 20.0 && rc.ppo.norm_adv == 1);
    mr_trainer *t1;
    CHECK_MSG(mr_trainer_create(&rc, &t1, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_load(t1, v1, &e) == MR_OK, "version 1 checkpoint: %s", e.msg);
    /* and saved again, it is version 2 with the same config */
    const char *again = "test_ckfiles_v1_again.mrck";
    CHECK_MSG(mr_trainer_save(t1, again, &e) == MR_OK, "%s", e.msg);
    mr_config rc2;
    CHECK_MSG(mr_checkpoint_read_config(again, &rc2, &e) == MR_OK, "%s", e.msg);
    CHECK(rc2.env.num_envs == 16 && rc2.policy.conv_channels[1] == 8 && rc2.seed == 3 &&
          rc2.ppo.epochs == rc.ppo.epochs && rc2.ppo.lr.start == rc.ppo.lr.start);
    FILE *f = fopen(again, "rb");
    unsigned char h[12] = {0};
    CHECK(f && fread(h, 1, 12, f) == 12);
    if (f) fclose(f);
    uint32_t version;
    memcpy(&version, h + 8, 4);
    CHECK_MSG(version == 2, "saved as version %u", version);
    unlink(again);
    mr_trainer_free(t1);
}

/* mr_checkpoint_read_info against the test's own reader (ckfile.h: the
 * section table, the progress record's counters) and the run that wrote it;
 * mr_checkpoint_is_file on a checkpoint and on what is not one; and
 * mr_checkpoint_config_conflicts: the settings a resume may not change are
 * named with both values, the hot and the machine's are not. */
static void info_and_conflicts(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t;
    CHECK_MSG(mr_trainer_create(&c, &t, &e) == MR_OK, "%s", e.msg);
    mr_metrics m;
    for (int i = 0; i < 2; i++) CHECK_MSG(mr_trainer_update(t, &m, &e) == MR_OK, "%s", e.msg);
    const char *path = "test_ckfiles_info.mrck";
    CHECK_MSG(mr_trainer_save(t, path, &e) == MR_OK, "%s", e.msg);
    mr_trainer_free(t);

    mr_checkpoint_info info;
    CHECK_MSG(mr_checkpoint_read_info(path, &info, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(info.updates == 2 && info.agent_steps == 2ull * 8 * 8, "updates %llu, agent-steps %llu",
              (unsigned long long)info.updates, (unsigned long long)info.agent_steps);
    CHECK(info.ranks.ranks == 1 && info.ranks.has == 0 && info.version == 2);
    CHECK(info.config.env.num_envs == 8 && info.config.policy.hidden == 16 && info.config.seed == c.seed);
    CHECK(info.hot.lr.start == c.ppo.lr.start && info.hot.total_steps == c.total_steps);
    CHECK(info.bytes == (uint64_t)file_size(path));
    ckfile f;
    CHECK(read_ck(path, &f) == 0);
    CHECK_MSG(info.sections == f.n, "%d sections, the file has %d", info.sections, f.n);
    for (int i = 0; i < f.n && i < info.sections; i++)
        CHECK_MSG(!strcmp(info.section[i].name, f.s[i].name) && info.section[i].bytes == f.s[i].bytes,
                  "section %d: %s %llu, the file's %s %zu", i, info.section[i].name,
                  (unsigned long long)info.section[i].bytes, f.s[i].name, f.s[i].bytes);
    const section *pg = find(&f, "progress");
    uint64_t u = 0;
    CHECK(pg && pg->bytes >= 8);
    if (pg) memcpy(&u, pg->data, 8);
    CHECK(u == info.updates);
    free_ck(&f);

    CHECK(mr_checkpoint_is_file(path) == 1);
    CHECK(mr_checkpoint_is_file("test_ckfiles_missing.mrck") == 0);
    CHECK(mr_checkpoint_is_file("/dev/zero") == 0);
    CHECK(mr_checkpoint_is_file(".") == 0);
    const char *text = "test_ckfiles_text.lua";
    FILE *tf = fopen(text, "wb");
    fputs("return { total_steps = 1 }\n", tf);
    fclose(tf);
    CHECK(mr_checkpoint_is_file(text) == 0);
    unlink(text);

    /* the same config: nothing; hot keys and the machine's: nothing */
    char diff[512];
    CHECK_MSG(mr_checkpoint_config_conflicts(&info.config, &info.config, diff, sizeof diff) == 0, "%s", diff);
    mr_config r = info.config;
    r.ppo.lr.start = 0.5;
    r.ppo.vf_coef = 2;
    r.total_steps *= 2;
    r.device = MR_DEVICE_CUDA;
    r.threads = 3;
    r.cuda.graphs = !r.cuda.graphs;
    CHECK_MSG(mr_checkpoint_config_conflicts(&r, &info.config, diff, sizeof diff) == 0, "%s", diff);
    /* cold keys: named with the run's value, then the checkpoint's */
    r.ppo.gamma = 0.9;
    r.policy.hidden = 32;
    r.env.name = MR_ENV_CARTPOLE;
    r.policy.num_conv = 2;
    r.policy.conv_channels[1] = 8;
    int n = mr_checkpoint_config_conflicts(&r, &info.config, diff, sizeof diff);
    CHECK_MSG(n == 4, "%d conflicts: %s", n, diff);
    CHECK_MSG(strstr(diff, "ppo.gamma: 0.9 vs 0.99") && strstr(diff, "policy.hidden: 32 vs 16") &&
              strstr(diff, "env.name: cartpole vs foraging") && strstr(diff, "policy.conv_channels: 4,8 vs 4") &&
              !strstr(diff, "lr") && !strstr(diff, "device"), "%s", diff);
    /* cut short, not overrun */
    char small[24];
    memset(small, 'x', sizeof small);
    CHECK(mr_checkpoint_config_conflicts(&r, &info.config, small, 20) == 4);
    CHECK_MSG(strlen(small) == 19 && !strcmp(small + 16, "...") && small[20] == 'x', "%s", small);
    CHECK(mr_checkpoint_config_conflicts(&r, &info.config, NULL, 0) == 4);
    unlink(path);
}

int main(void) {
    streamed_reads();   /* first: the peak memory is a high-water mark */
    info_and_conflicts();
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
    config_records(t, good, &c);

    /* A section declaring 3 GiB where the config's network needs kilobytes:
     * refused from the table, naming the section and both sizes. */
    const char *grown = "test_ckfiles_grown.mrck";
    grow_section(good, grown, "params", 3ull << 30);
    refuses_fast(t, grown, "'params'", "parameters");
    const char *grown_env = "test_ckfiles_grown_env.mrck";
    grow_section(good, grown_env, "env.grid", 3ull << 30);
    refuses_fast(t, grown_env, "'env.grid'", "environments");

    /* A NaN weight (the value head's bias): refused by every reader, the
     * tensor named; the trainer keeps what it had. */
    const char *nan = "test_ckfiles_nan.mrck";
    CHECK_MSG(mr_trainer_debug_poison(t, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_save(t, nan, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_load(t, good, &e) == MR_OK, "%s", e.msg);
    refuses_fast(t, nan, "value.b", "not finite");
    static mr_checkpoint_info nan_info;
    CHECK(mr_checkpoint_read_info(nan, &nan_info, &e) == MR_ERR_FORMAT && strstr(e.msg, "value.b"));
    float *w = malloc(sizeof(float) * 100000);
    int nt = mr_trainer_tensor_count(t);
    uint64_t total = 0;
    for (int i = 0; i < nt; i++) {
        mr_tensor ti;
        CHECK(mr_trainer_tensor(t, i, &ti, &e) == MR_OK);
        total += ti.count;
    }
    CHECK(total < 100000 && mr_trainer_read_params(t, w, total, &e) == MR_OK);
    int finite = 1;
    for (uint64_t i = 0; i < total; i++) finite &= isfinite(w[i]) != 0;
    CHECK_MSG(finite, "a refused NaN checkpoint changed the trainer's weights");
    free(w);
    unlink(grown);
    unlink(grown_env);
    unlink(nan);

    mr_trainer_free(t);
    unlink(good);
    unlink(sparse);
    unlink(big);
    unlink(cut);
    unlink(fifo);
    rmdir(dir);
    return check_report("test_checkpoint_files");
}

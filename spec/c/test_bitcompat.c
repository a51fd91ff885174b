/*
 * test_bitcompat.c - the CPU backend's results are those of the code before
 * the one-trainer redesign, bit for bit.
 *
 * spec/c/fixtures/bitcompat_*.mrck are checkpoints written after k updates
 * by the engine at commit 07cb429 (the two-trainer engine, before the
 * redesign), with `test_bitcompat --write spec/c/fixtures`. This test runs
 * the same configurations on today's engine, saves, and compares the two
 * files section by section with its own reader of the checkpoint format
 * (so the engine's loader is not what decides): parameters, Adam moments and
 * step, PopArt statistics, progress and the whole environment state must be
 * equal byte for byte. Each configuration also runs on 1 thread, which must
 * give the same bytes (results independent of the thread count).
 *
 * The fixtures were written with the im2col + sgemm convolutions, so every
 * configuration pins cpu.conv = im2col: this test guards the training loop,
 * not the convolutions' arithmetic (test_conv_dnnl.c and test_policy.c check
 * the oneDNN path against float64 references). With cpu.conv = onednn each
 * configuration must give the same bytes on 1 and 2 threads (whole trainer).
 *
 * OpenBLAS's kernel set changes sgemm's rounding, so ctest runs this with
 * OPENBLAS_CORETYPE=Haswell (AVX2, what every x86-64-v3 CPU this build
 * targets runs), the kernels the fixtures were written with.
 */
#include "moonrl.h"
#include "check.h"
#include "ckfile.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FIXTURE_DIR
#define FIXTURE_DIR "spec/c/fixtures"
#endif

typedef struct fixture {
    const char *name;
    int updates;
    void (*config)(mr_config *c);
} fixture;

/* ground truth, PopArt, 2 threads, 2 minibatches, 2 epochs */
static void cfg_truth(mr_config *c) {
    mr_config_default(c);
    c->env.num_envs = 16;
    c->policy.num_conv = 2;
    c->policy.conv_channels[0] = 4;
    c->policy.conv_channels[1] = 8;
    c->policy.hidden = 32;
    c->policy.critic_hidden = 32;
    c->ppo.rollout_steps = 16;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 2;
    c->threads = 2;
    c->device = MR_DEVICE_CPU;
    c->seed = 3;
    c->total_steps = 16 * 16 * 8;
}

/* proxy (energy frozen), no PopArt, 3 conv layers, small grid, 4 minibatches */
static void cfg_proxy(mr_config *c) {
    mr_config_default(c);
    c->env.mode = MR_MODE_PROXY;
    c->env.num_envs = 12;
    c->env.grid_size = 32;
    c->env.density_min = 8;
    c->env.density_max = 40;
    c->policy.num_conv = 3;
    c->policy.conv_channels[0] = 4;
    c->policy.conv_channels[1] = 4;
    c->policy.conv_channels[2] = 8;
    c->policy.hidden = 24;
    c->policy.critic_hidden = 16;
    c->policy.popart = 0;
    c->ppo.rollout_steps = 8;
    c->ppo.epochs = 3;
    c->ppo.minibatches = 4;
    c->threads = 2;
    c->device = MR_DEVICE_CPU;
    c->seed = 11;
    c->total_steps = 12 * 8 * 6;
}

/* blinded, cosine lr, step entropy, short episodes (truncation inside the
 * rollout), 3 minibatches, a strong entropy floor */
static void cfg_blinded(mr_config *c) {
    mr_config_default(c);
    c->env.mode = MR_MODE_GROUND_TRUTH_BLINDED;
    c->env.num_envs = 24;
    c->env.grid_size = 48;
    c->env.max_episode_steps = 20;
    c->policy.num_conv = 1;
    c->policy.conv_channels[0] = 6;
    c->policy.hidden = 16;
    c->policy.critic_hidden = 20;
    c->ppo.rollout_steps = 8;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 3;
    c->ppo.lr.kind = MR_SCHED_COSINE;
    c->ppo.lr.start = 1e-3;
    c->ppo.lr.end = 1e-4;
    c->ppo.ent_coef.kind = MR_SCHED_STEP;
    c->ppo.ent_coef.start = 0.05;
    c->ppo.ent_coef.end = 0.001;
    c->ppo.ent_coef.gamma = 0.5;
    c->ppo.ent_coef.every = 0.25;
    c->ppo.ent_floor = 2.5;
    c->threads = 2;
    c->device = MR_DEVICE_CPU;
    c->seed = 5;
    c->total_steps = 24 * 8 * 5;
}

static const fixture fixtures[] = {
    {"bitcompat_truth", 3, cfg_truth},
    {"bitcompat_proxy", 3, cfg_proxy},
    {"bitcompat_blinded", 4, cfg_blinded},
};
#define NFIX (int)(sizeof fixtures / sizeof fixtures[0])

/* The checkpoint, read here: ckfile.h. */

/* Every section of the fixture but the config (version 1's raw struct, or
 * version 2's records, which name the thread count that differs between the
 * runs compared) must be in the new file with the same bytes; the progress
 * record may be longer (a key made hot since: mr_hot_params grows at its end,
 * checkpoint_format.h), its first bytes the fixture's. */
static void compare(const char *label, const ckfile *want, const ckfile *got) {
    CHECK_MSG(want->n > 10, "%s: fixture has %d sections", label, want->n);
    for (int i = 0; i < want->n; i++) {
        const section *w = &want->s[i];
        if (strcmp(w->name, "config") == 0 || strcmp(w->name, "config.keys") == 0) continue;
        const section *g = find(got, w->name);
        CHECK_MSG(g != NULL, "%s: section %s missing", label, w->name);
        if (!g) continue;
        const int prefix = strcmp(w->name, "progress") == 0 && g->bytes > w->bytes;
        CHECK_MSG(g->bytes == w->bytes || prefix, "%s: section %s has %zu bytes, fixture %zu", label, w->name,
                  g->bytes, w->bytes);
        if (g->bytes != w->bytes && !prefix) continue;
        size_t first = (size_t)-1;
        for (size_t k = 0; k < w->bytes; k++)
            if (g->data[k] != w->data[k]) {
                first = k;
                break;
            }
        CHECK_MSG(first == (size_t)-1, "%s: section %s differs from the fixture (first at byte %zu of %zu)", label,
                  w->name, first, w->bytes);
    }
}

static int run_and_save(const fixture *fx, int threads, int conv, const char *path) {
    mr_config c;
    fx->config(&c);
    c.cpu.conv = conv;   /* MR_CPU_CONV_IM2COL: the fixtures' convolutions */
    if (threads) c.threads = threads;
    mr_trainer *t;
    mr_error e;
    if (mr_trainer_create(&c, &t, &e) != MR_OK) {
        fprintf(stderr, "%s: create: %s\n", fx->name, e.msg);
        return -1;
    }
    mr_metrics m;
    for (int u = 0; u < fx->updates; u++)
        if (mr_trainer_update(t, &m, &e) != MR_OK) {
            fprintf(stderr, "%s: update %d: %s\n", fx->name, u + 1, e.msg);
            mr_trainer_free(t);
            return -1;
        }
    mr_status s = mr_trainer_save(t, path, &e);
    if (s != MR_OK) fprintf(stderr, "%s: save: %s\n", fx->name, e.msg);
    mr_trainer_free(t);
    return s == MR_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        for (int i = 0; i < NFIX; i++) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s.mrck", argv[2], fixtures[i].name);
            if (run_and_save(&fixtures[i], 0, MR_CPU_CONV_IM2COL, path) != 0) return 1;
            printf("wrote %s\n", path);
        }
        return 0;
    }
    for (int i = 0; i < NFIX; i++) {
        const fixture *fx = &fixtures[i];
        char want_path[512], got_path[512];
        snprintf(want_path, sizeof want_path, "%s/%s.mrck", FIXTURE_DIR, fx->name);
        ckfile want, got;
        int ok = read_ck(want_path, &want) == 0;
        CHECK_MSG(ok, "fixture %s unreadable", want_path);
        if (!ok) continue;
        for (int threads = 0; threads <= 1; threads++) {
            snprintf(got_path, sizeof got_path, "bitcompat_now_%d.mrck", i);
            CHECK(run_and_save(fx, threads, MR_CPU_CONV_IM2COL, got_path) == 0);
            CHECK(read_ck(got_path, &got) == 0);
            char label[96];
            snprintf(label, sizeof label, "%s (%s threads)", fx->name, threads ? "1" : "configured");
            compare(label, &want, &got);
            free(got.buf);
            remove(got_path);
        }
        /* the oneDNN convolutions (cpu.conv = onednn): no fixture, but the
         * same bytes on 1 and on the configured 2 threads, and not the
         * im2col bytes (so the comparison is of the oneDNN path) */
        ckfile two, one;
        char two_path[512];
        snprintf(two_path, sizeof two_path, "bitcompat_dnnl2_%d.mrck", i);
        snprintf(got_path, sizeof got_path, "bitcompat_dnnl1_%d.mrck", i);
        CHECK(run_and_save(fx, 0, MR_CPU_CONV_ONEDNN, two_path) == 0);
        CHECK(run_and_save(fx, 1, MR_CPU_CONV_ONEDNN, got_path) == 0);
        if (read_ck(two_path, &two) == 0 && read_ck(got_path, &one) == 0) {
            char label[96];
            snprintf(label, sizeof label, "%s, onednn, 1 thread against 2", fx->name);
            compare(label, &two, &one);
            const section *a = find(&two, "params"), *b = find(&want, "params");
            CHECK_MSG(a && b && a->bytes == b->bytes && memcmp(a->data, b->data, a->bytes) != 0,
                      "%s: the onednn run has the im2col fixture's parameters", fx->name);
            free(one.buf);
            free(two.buf);
        } else {
            CHECK_MSG(0, "%s: onednn checkpoints unreadable", fx->name);
        }
        remove(two_path);
        remove(got_path);
        free(want.buf);
    }
    return check_report("test_bitcompat");
}

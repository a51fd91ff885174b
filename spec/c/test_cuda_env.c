/*
 * test_cuda_env.c - the GPU foraging environment (kernels/env.cu) against the
 * CPU one (env_cpu.c): same seed, same actions => the same bytes.
 *
 * Always (CPU): the device state plan and the largest num_envs that fits a
 * budget (env_cuda.h), and device = cuda failing with a clear MR_ERR_BACKEND
 * message when there is no GPU or no CUDA build.
 * With a GPU: for every mode and three shapes (the spec's 128x128 grid; a
 * small crowded grid with short episodes, few respawn tries and the
 * full-grid fallback; a grid as small as the view), a few hundred random
 * steps with a mid-run full reset and an energy-freeze toggle; after every
 * step obs, reward, terminated and truncated must match bit for bit, and
 * every 25 steps the whole device state (grid, agent, energy, counters, RNG
 * counters, episode logs) must equal the CPU state byte for byte. Also the
 * GPU log reduction, a bad action, the out-of-memory message, memory stats.
 * snake (envs/snake.h) the same way on two boards.
 * Without a GPU the GPU part prints "skipped: no GPU" and counts as passed.
 */
#include "check.h"
#include "env.h"
#include "env_cuda.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static mr_env_config config(int mode, int n, int grid, int view, int dmin, int dmax, int tries, int max_steps) {
    mr_env_config c = {mode, n, grid, view, dmin, dmax, tries, max_steps, MR_ENV_FORAGING, 0, NULL};
    return c;
}

/* ------------------------------------------------------------ CPU checks */

static void test_plan(void) {
    const mr_env_config shapes[] = {
        config(0, 192, 128, 5, 64, 256, 50, 512),
        config(0, 1, 16, 3, 40, 100, 5, 37),
        config(0, 1, 11, 5, 0, 60, 50, 0),
        config(0, 1, 512, 20, 64, 256, 50, 512),
    };
    for (int k = 0; k < 4; k++) {
        mr_env_config c = shapes[k];
        const size_t G = (size_t)c.grid_size, V = 2 * (size_t)c.view_range + 1;
        /* The plan covers every buffer: at least grid + obs + 18 other fields' bytes per env. */
        c.num_envs = 1000;
        const size_t b1000 = mr_env_cuda_state_bytes(&c);
        CHECK(b1000 >= 1000 * (G * G + V * V + sizeof(mr_env_log)));
        c.num_envs = 64;
        const size_t per = mr_env_cuda_state_bytes(&c) / 64;
        CHECK(per * 64 == mr_env_cuda_state_bytes(&c));
        for (int n = 1; n < 5000; n = n * 3 + 1) {          /* linear with bounded padding */
            c.num_envs = n;
            const size_t b = mr_env_cuda_state_bytes(&c);
            CHECK(b >= per * (size_t)n && b <= per * (size_t)n + 19 * 64);
        }
        const size_t budgets[] = {(size_t)1 << 20, (size_t)3 << 30, (size_t)70 << 30, 12345678};
        for (int j = 0; j < 4; j++) {
            const int n = mr_env_cuda_max_envs(&shapes[k], budgets[j], 1048576);
            c.num_envs = n > 0 ? n : 1;
            CHECK(n >= 0 && n <= 1048576);
            if (n >= 32) CHECK(n % 32 == 0);
            if (n > 0) CHECK(mr_env_cuda_state_bytes(&c) + 512 <= budgets[j]);
            if (n < 1048576 - 64) {                           /* and it is the largest (to a multiple of 32) */
                c.num_envs = n + 64;
                CHECK(mr_env_cuda_state_bytes(&c) > budgets[j]);
            }
        }
    }
    mr_env_config c = shapes[0];
    CHECK(mr_env_cuda_max_envs(&c, (size_t)80000000000ull, 1048576) == 1048576);   /* capped */
    CHECK(mr_env_cuda_max_envs(&c, 1000, 1048576) == 0);
}

static void test_no_gpu_message(void) {
    if (mr_cuda_device_count() > 0) return;
    mr_env_config c = config(0, 8, 16, 3, 4, 8, 50, 64);
    mr_env *e = (mr_env *)1;
    mr_error err;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CUDA, 0, &e, &err) == MR_ERR_BACKEND);
    CHECK(e == NULL && err.status == MR_ERR_BACKEND);
    CHECK_MSG(strstr(err.msg, "device = cuda") && strstr(err.msg, "device = cpu"), "%s", err.msg);
    /* The CPU path is untouched. */
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_OK);
    mr_env_free(e);
}

/* ------------------------------------------------------------ GPU checks */
#ifdef MOONRL_HAVE_CUDA

/* First differing buffer of two states laid out alike, or NULL: every
 * buffer a checkpoint saves (the environment's sections) and the
 * interface's others (reward, end flags, logs). */
static const char *first_diff(const mr_env_state *a, const mr_env_state *b, size_t *at) {
    const size_t n = (size_t)a->n;
    mr_env_section sa[MR_ENV_MAX_SECTIONS + 4], sb[MR_ENV_MAX_SECTIONS + 4];
    int k = mr_env_sections(a, sa);
    mr_env_sections(b, sb);
    const struct { const char *name; const void *pa, *pb; size_t bytes; } more[] = {
        {"reward", a->reward, b->reward, n * 4}, {"terminated", a->terminated, b->terminated, n},
        {"truncated", a->truncated, b->truncated, n}, {"log", a->log, b->log, n * sizeof(mr_env_log)},
    };
    for (int j = 0; j < 4; j++, k++) {
        sa[k] = (mr_env_section){more[j].name, (void *)more[j].pa, more[j].bytes};
        sb[k] = (mr_env_section){more[j].name, (void *)more[j].pb, more[j].bytes};
    }
    for (int j = 0; j < k; j++) {
        const uint8_t *pa = sa[j].data, *pb = sb[j].data;
        for (size_t i = 0; i < sa[j].bytes; i++)
            if (pa[i] != pb[i]) { *at = i; return sa[j].name; }
    }
    return NULL;
}

typedef struct pair {
    mr_env *cpu, *gpu;
    mr_arena host;          /* the GPU state downloaded, laid out like the CPU's */
    mr_env_state hs;
    uint8_t *obs[2], *term[2], *trunc[2];
    float *rew[2];
} pair;

static int pair_open(pair *p, const mr_env_config *c, uint64_t seed) {
    memset(p, 0, sizeof *p);
    mr_error err;
    if (mr_env_create(c, seed, MR_DEVICE_CPU, 2, &p->cpu, &err) != MR_OK) { CHECK_MSG(0, "%s", err.msg); return 0; }
    if (mr_env_create(c, seed, MR_DEVICE_CUDA, 0, &p->gpu, &err) != MR_OK) {
        CHECK_MSG(0, "cuda env: %s", err.msg);
        mr_env_free(p->cpu);
        return 0;
    }
    mr_env_layout(&p->hs, c, seed, &p->host);
    mr_arena_commit(&p->host);
    mr_env_layout(&p->hs, c, seed, &p->host);
    const size_t n = (size_t)c->num_envs, V = 2 * (size_t)c->view_range + 1;
    for (int k = 0; k < 2; k++) {
        p->obs[k] = malloc(n * V * V);
        p->term[k] = malloc(n);
        p->trunc[k] = malloc(n);
        p->rew[k] = malloc(n * sizeof(float));
    }
    return 1;
}

static void pair_close(pair *p) {
    mr_env_free(p->cpu);
    mr_env_free(p->gpu);
    mr_arena_release(&p->host);
    for (int k = 0; k < 2; k++) { free(p->obs[k]); free(p->term[k]); free(p->trunc[k]); free(p->rew[k]); }
}

/* 1 when the step outputs match bit for bit. */
static int same_outputs(pair *p, const char *what, int step) {
    mr_error err;
    const size_t n = (size_t)p->cpu->s.n, VV = (size_t)p->cpu->s.obs_size;   /* V x V codes */
    mr_env *e[2] = {p->cpu, p->gpu};
    for (int k = 0; k < 2; k++) {
        mr_env_view v = {p->obs[k], p->rew[k], p->term[k], p->trunc[k], NULL, NULL, NULL, NULL};
        if (mr_env_read(e[k], &v, &err) != MR_OK) { CHECK_MSG(0, "%s read: %s", what, err.msg); return 0; }
    }
    const int ok = !memcmp(p->obs[0], p->obs[1], n * VV) && !memcmp(p->rew[0], p->rew[1], n * sizeof(float)) &&
                   !memcmp(p->term[0], p->term[1], n) && !memcmp(p->trunc[0], p->trunc[1], n);
    CHECK_MSG(ok, "%s: step outputs differ after step %d", what, step);
    return ok;
}

static int same_state(pair *p, const char *what, int step) {
    mr_error err;
    if (mr_env_pull(p->gpu, &p->hs, &err) != MR_OK) { CHECK_MSG(0, "%s: %s", what, err.msg); return 0; }
    size_t at = 0;
    const char *f = first_diff(&p->cpu->s, &p->hs, &at);
    CHECK_MSG(f == NULL, "%s: state differs after step %d in %s at byte %zu", what, step, f ? f : "", at);
    CHECK(memcmp(p->cpu->block, p->host.base, p->cpu->state_bytes) == 0);   /* padding included */
    return f == NULL;
}

/* Runs `steps` random steps on both; returns the number of episode ends seen. */
static long run_pair(const mr_env_config *c, uint64_t seed, int steps, const char *what) {
    pair p;
    if (!pair_open(&p, c, seed)) return -1;
    mr_error err;
    long ends = 0, truncs = 0;
    uint8_t *act = malloc((size_t)c->num_envs);
    int ok = same_state(&p, what, 0) && same_outputs(&p, what, 0);
    for (int t = 1; ok && t <= steps; t++) {
        for (int i = 0; i < c->num_envs; i++) act[i] = (uint8_t)(u32rand() % (uint32_t)mr_env_num_actions(c->name));
        if (mr_env_step(p.cpu, act, &err) != MR_OK || mr_env_step(p.gpu, act, &err) != MR_OK) {
            CHECK_MSG(0, "%s step: %s", what, err.msg);
            break;
        }
        ok = same_outputs(&p, what, t);
        for (int i = 0; i < c->num_envs; i++) { ends += p.term[0][i] | p.trunc[0][i]; truncs += p.trunc[0][i]; }
        if (ok && (t % 25 == 0 || t == steps)) ok = same_state(&p, what, t);
        if (t == steps / 2) {                                  /* a full reset mid-run */
            CHECK(mr_env_reset(p.cpu, &err) == MR_OK && mr_env_reset(p.gpu, &err) == MR_OK);
            ok = ok && same_state(&p, what, t);
        }
        if (t == (2 * steps) / 3 && c->name == MR_ENV_FORAGING) {   /* flip the energy freeze */
            const int fz = !mr_forage_of(&p.cpu->s)->energy_frozen;
            CHECK(mr_env_set_energy_frozen(p.cpu, fz, &err) == MR_OK);
            CHECK(mr_env_set_energy_frozen(p.gpu, fz, &err) == MR_OK);
        }
    }
    /* The GPU log reduction against the CPU's. */
    mr_env_log lc, lg;
    mr_env_log_reduce(p.cpu->s.log, p.cpu->s.n, &lc);
    CHECK(mr_env_log_summary(p.gpu, &lg, &err) == MR_OK);
    CHECK(lg.episodes == lc.episodes && lg.deaths == lc.deaths && lg.length_sum == lc.length_sum);
    CHECK(lg.count[0] == lc.count[0] && lg.count[1] == lc.count[1] && lg.count_total[0] == lc.count_total[0]);
    CHECK(lg.count_total[1] == lc.count_total[1] && lg.steps_total == lc.steps_total);
    CHECK(lg.return_min == lc.return_min && lg.return_max == lc.return_max);
    CHECK_NEAR(lg.return_sum, lc.return_sum, 1e-3, 1e-5);
    CHECK(lc.steps_total == (int32_t)((long)steps * c->num_envs));
    printf("  %-36s %d envs x %d steps: identical=%s, %ld episode ends (%ld truncated)\n", what, c->num_envs,
           steps, ok ? "yes" : "NO", ends, truncs);
    free(act);
    pair_close(&p);
    return ends;
}

static void test_gpu_matches_cpu(void) {
    static const char *mode_names[] = {"ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy"};
    char what[96];
    for (int mode = 0; mode < 4; mode++) {
        const mr_env_config spec = config(mode, 257, 128, 5, 64, 256, 50, 512);
        const mr_env_config crowded = config(mode, 100, 16, 3, 60, 120, 3, 37);
        const mr_env_config tiny = config(mode, 33, 11, 5, 0, 60, 50, 0);
        snprintf(what, sizeof what, "%s 128x128", mode_names[mode]);
        long ends = run_pair(&spec, 7 + mode, 300, what);
        if (mode != MR_MODE_PROXY) CHECK(ends > 0);           /* starvation after 100 steps happens */
        snprintf(what, sizeof what, "%s 16x16 crowded", mode_names[mode]);
        ends = run_pair(&crowded, 100 + mode, 400, what);
        CHECK(ends > 0);                                       /* truncation at 37 */
        snprintf(what, sizeof what, "%s 11x11 view 5", mode_names[mode]);
        run_pair(&tiny, 200 + mode, 300, what);
    }
    /* snake (envs/snake.h): a small board whose view passes the walls, and a larger one with no step limit */
    mr_env_config sn = config(0, 300, 6, 3, 0, 0, 0, 40);
    sn.name = MR_ENV_SNAKE;
    CHECK(run_pair(&sn, 300, 400, "snake 6x6 view 7") > 0);
    sn = config(0, 97, 16, 5, 0, 0, 0, 0);
    sn.name = MR_ENV_SNAKE;
    CHECK(run_pair(&sn, 301, 300, "snake 16x16 view 11") > 0);
}

static void test_gpu_errors_and_memory(void) {
    mr_error err;
    mr_env *e = NULL;
    mr_env_config c = config(0, 64, 32, 5, 10, 20, 50, 100);
    CHECK(mr_env_create(&c, 3, MR_DEVICE_CUDA, 0, &e, &err) == MR_OK);
    if (!e) return;
    uint8_t act[64] = {0};
    act[63] = 8;
    CHECK(mr_env_step(e, act, &err) == MR_ERR_ARG && strstr(err.msg, "actions[63] = 8"));
    mr_devmem_stats ms;
    CHECK(mr_env_devmem(e, &ms, &err) == MR_OK);
    /* one block (state, actions, episode log: env.c create_on) in one segment */
    CHECK_MSG(ms.allocated_bytes >= mr_env_cuda_state_bytes(&c) && ms.allocations == 1 && ms.raw_allocations == 1,
              "env device memory: %llu bytes (state %zu) in %llu allocations, %llu segments",
              (unsigned long long)ms.allocated_bytes, mr_env_cuda_state_bytes(&c),
              (unsigned long long)ms.allocations, (unsigned long long)ms.raw_allocations);
    mr_env_free(e);

    /* Far too big: 2^20 envs of 4096x4096 = 16 TiB. */
    c = config(0, 1048576, 4096, 5, 64, 256, 50, 512);
    e = (mr_env *)1;
    CHECK(mr_env_create(&c, 3, MR_DEVICE_CUDA, 0, &e, &err) == MR_ERR_NOMEM);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "the environment state") && strstr(err.msg, "At most") &&
              strstr(err.msg, "env.num_envs = 1048576"), "%s", err.msg);
    printf("  out-of-memory message: %s\n", err.msg);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Not a check: a number to read in the log (bench_env is the benchmark). */
static void report_speed(void) {
    mr_env_config c = config(0, 4096, 128, 5, 64, 256, 50, 512);
    mr_env *e;
    mr_error err;
    if (mr_env_create(&c, 1, MR_DEVICE_CUDA, 0, &e, &err) != MR_OK) { CHECK_MSG(0, "%s", err.msg); return; }
    uint8_t *act = malloc(4096);
    for (int i = 0; i < 4096; i++) act[i] = (uint8_t)(u32rand() & 7);
    for (int k = 0; k < 20; k++) mr_env_step(e, act, NULL);
    mr_env_view v = {0};
    mr_env_read(e, &v, NULL);
    const double t0 = now();
    for (int k = 0; k < 500; k++) mr_env_step(e, act, NULL);
    CHECK(mr_env_read(e, &v, &err) == MR_OK);
    printf("  speed: %.3g agent-steps/s (4096 envs, 128x128, incl. the action copies)\n",
           500.0 * 4096 / (now() - t0));
    free(act);
    mr_env_free(e);
}
#endif /* MOONRL_HAVE_CUDA */

int main(void) {
    check_seed(0x2545f4914f6cdd1dull);
    test_plan();
    test_no_gpu_message();
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() > 0) {
        test_gpu_matches_cpu();
        test_gpu_errors_and_memory();
        report_speed();
    } else {
        printf("test_cuda_env: skipped: no GPU (GPU checks not run; CPU checks below)\n");
    }
#else
    printf("test_cuda_env: skipped: no GPU (built without CUDA; CPU checks below)\n");
#endif
    return check_report("test_cuda_env");
}

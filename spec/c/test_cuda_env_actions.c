/*
 * test_cuda_env_actions.c - the environment benchmark's actions drawn where
 * the environment runs (mr_env_step_random; on a GPU inside the step kernel,
 * kernels/env.cu).
 *
 * The reference is written here from rng.h's functions directly: before each
 * step, instance i's action is mr_rng_below(seed, index0 + i, its tick,
 * MR_RNG_ACTION, 0, actions), read from a CPU environment's own tick, and
 * that environment is stepped with mr_env_step on those host-made actions.
 * Always (CPU): a cpu environment stepped by mr_env_step_random draws the
 * same bytes (last_actions) and reaches the same state (observations,
 * rewards, end flags, ticks) after every step, foraging and snake; 37 steps
 * in one call equal 37 single steps; a box environment is refused.
 * With a GPU (the window): the same for a CUDA environment against the host
 * reference, bit for bit, 200 steps of 1,000 foraging and 333 snake
 * instances (a part-filled last block); 100 steps in one call; and the
 * steps/s at 65,536 foraging environments with device-drawn actions against
 * host actions copied each step (printed, not checked).
 */
#include "check.h"
#include "env.h"
#include "rng.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static mr_env_config config(const char *name, int n) {
    mr_config c;
    mr_config_default(&c);
    c.env.name = mr_env_from_name(name);
    c.env.num_envs = n;
    return c.env;
}

/* The host reference's actions for e's next step. */
static void host_draws(const mr_env *e, uint64_t seed, uint8_t *a) {
    const uint32_t na = (uint32_t)mr_env_num_actions(e->cfg.name);
    for (int i = 0; i < e->s.n; i++)
        a[i] = (uint8_t)mr_rng_below(seed, (uint32_t)(e->cfg.index0 + i), e->s.tick[i], MR_RNG_ACTION, 0, na);
}

typedef struct views { mr_env_view v; uint8_t *obs, *term, *trunc; float *rew; } views;
static void views_make(views *w, const mr_env *e) {
    const size_t n = (size_t)e->s.n, ob = (size_t)mr_env_obs_row_bytes(&e->s);
    w->obs = malloc(n * ob);
    w->rew = malloc(4 * n);
    w->term = malloc(n);
    w->trunc = malloc(n);
    memset(&w->v, 0, sizeof w->v);
    w->v.obs = w->obs, w->v.reward = w->rew, w->v.terminated = w->term, w->v.truncated = w->trunc;
}
static void views_free(views *w) { free(w->obs); free(w->rew); free(w->term); free(w->trunc); }

/* a (drawn by mr_env_step_random) against the reference r, `steps` steps
 * at a time; returns the first step where anything differed, or -1. */
static int compare(mr_env *a, mr_env *r, uint64_t seed, int rounds, int steps) {
    const size_t n = (size_t)a->s.n, ob = (size_t)mr_env_obs_row_bytes(&a->s);
    uint8_t *ha = malloc(n), *da = malloc(n);
    views va, vr;
    views_make(&va, a);
    views_make(&vr, r);
    mr_error err;
    int bad = -1;
    for (int k = 0; k < rounds && bad < 0; k++) {
        for (int s = 0; s < steps; s++) {
            host_draws(r, seed, ha);
            if (mr_env_step(r, ha, &err) != MR_OK) CHECK_MSG(0, "%s", err.msg);
        }
        if (mr_env_step_random(a, seed, steps, da, &err) != MR_OK) {
            CHECK_MSG(0, "mr_env_step_random: %s", err.msg);
            bad = k;
            break;
        }
        if (mr_env_read(a, &va.v, &err) != MR_OK || mr_env_read(r, &vr.v, &err) != MR_OK) CHECK_MSG(0, "%s", err.msg);
        if (memcmp(ha, da, n) || memcmp(va.obs, vr.obs, n * ob) || memcmp(va.rew, vr.rew, 4 * n) ||
            memcmp(va.term, vr.term, n) || memcmp(va.trunc, vr.trunc, n))
            bad = k;
    }
    free(ha);
    free(da);
    views_free(&va);
    views_free(&vr);
    return bad;
}

static void pair(const char *name, int n, int device, int rounds, int steps) {
    mr_env_config c = config(name, n);
    mr_env *a = NULL, *r = NULL;
    mr_error err;
    if (mr_env_create(&c, 17, device, device == MR_DEVICE_CPU ? 2 : 0, &a, &err) != MR_OK ||
        mr_env_create(&c, 17, MR_DEVICE_CPU, 2, &r, &err) != MR_OK) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        mr_env_free(a);
        return;
    }
    const int bad = compare(a, r, 99, rounds, steps);
    CHECK_MSG(bad < 0, "%s, %d instances on the %s, %d steps a call: differs from the host's draws at call %d", name,
              n, device == MR_DEVICE_CPU ? "cpu" : "GPU", steps, bad);
    printf("  %s, %d instances on the %s, %d x %d steps: actions and states equal the host draws' run%s\n", name, n,
           device == MR_DEVICE_CPU ? "cpu" : "GPU", rounds, steps, bad < 0 ? "" : " NOT");
    mr_env_free(a);
    mr_env_free(r);
}

static void test_refusals(void) {
    mr_env_config c = config("pendulum", 8);
    mr_env *e = NULL;
    mr_error err;
    if (mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) != MR_OK) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    CHECK(mr_env_step_random(e, 1, 1, NULL, &err) == MR_ERR_ARG && strstr(err.msg, "pendulum"));
    mr_env_free(e);
    c = config("foraging", 8);
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_OK);
    CHECK(mr_env_step_random(e, 1, 0, NULL, &err) == MR_ERR_ARG && strstr(err.msg, "steps = 0"));
    CHECK(mr_env_step_random(NULL, 1, 1, NULL, &err) == MR_ERR_ARG);
    mr_env_free(e);
}

#ifdef MOONRL_HAVE_CUDA
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Steps/s at 65,536 environments: device-drawn actions against host actions
 * copied each step (mr_env_step), alternated 3 times. */
static void gpu_rate(void) {
    mr_env_config c = config("foraging", 65536);
    mr_env *e = NULL;
    mr_error err;
    if (mr_env_create(&c, 5, MR_DEVICE_CUDA, 0, &e, &err) != MR_OK) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    uint8_t *a = malloc(65536);
    for (int i = 0; i < 65536; i++) a[i] = (uint8_t)(i * 7 % mr_env_num_actions(c.name));
    const int steps = 200;
    double dev = 0, host = 0;
    mr_env_step_random(e, 1, 10, NULL, &err);
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        CHECK(mr_env_step_random(e, 1, steps, NULL, &err) == MR_OK);
        double t = 65536.0 * steps / (now() - t0);
        if (t > dev) dev = t;
        t0 = now();
        for (int k = 0; k < steps; k++) mr_env_step(e, a, &err);
        t = 65536.0 * steps / (now() - t0);
        if (t > host) host = t;
    }
    printf("  65,536 foraging environments: %.3g agent-steps/s with device-drawn actions, %.3g with host actions "
           "(best of 3 alternated; ratio %.2f)\n", dev, host, dev / host);
    free(a);
    mr_env_free(e);
}
#endif

int main(void) {
    test_refusals();
    pair("foraging", 300, MR_DEVICE_CPU, 40, 1);
    pair("snake", 77, MR_DEVICE_CPU, 40, 1);
    pair("foraging", 300, MR_DEVICE_CPU, 2, 37);
#ifdef MOONRL_HAVE_CUDA
    if (mr_cuda_device_count() > 0) {
        pair("foraging", 1000, MR_DEVICE_CUDA, 200, 1);
        pair("snake", 333, MR_DEVICE_CUDA, 200, 1);
        pair("foraging", 1000, MR_DEVICE_CUDA, 3, 100);
        gpu_rate();
    } else {
        printf("test_cuda_env_actions: skipped: no GPU (GPU checks not run; CPU checks above)\n");
    }
#else
    printf("test_cuda_env_actions: skipped: no GPU (built without CUDA; CPU checks above)\n");
#endif
    return check_report("test_cuda_env_actions");
}

/*
 * test_trainer_loop_faults.c - the one trainer loop (src/engine/core/trainer.c)
 * when its backend fails, driven on the cpu backend through a wrapper table
 * (backend_wrap.h) that can fail any call:
 *   1. creation with every call failing in turn (each operation of the
 *      table, and the raw allocations under the memory manager): the status
 *      and the injected message come back, *out stays NULL, and nothing the
 *      wrapper saw created (streams, events, networks, memory segments) is
 *      left alive;
 *   2. an update with every call failing in turn (with two minibatches, and
 *      with one, where the rollout's acts keep the first epoch's forward):
 *      the update returns the
 *      status and says which update failed; then updates, saves, snapshots,
 *      evaluation and inference are refused (MR_ERR_STATE, no file written),
 *      a restore does not revive it, and loading a checkpoint saved before
 *      the failure makes the next update equal, bit for bit (parameters,
 *      Adam moments and step, PopArt, environments, metrics), to that of a
 *      trainer on the plain cpu table that never failed. A failed timing
 *      query (event_elapsed) costs the timing only: that update succeeds;
 *   3. out of memory: a wrapper reporting a small device (device_memory's
 *      total and free set to a budget): creation fails with MR_ERR_NOMEM,
 *      names the buffer and says "At most N environments fit"; N creates,
 *      N + 1 does not; a device too small for one environment says so;
 *   4. a checkpoint load (and a restore) with every call failing in turn:
 *      the status comes back and a later good load recovers bit for bit.
 *      A push that fails midway marks the trainer broken (it must not go on
 *      updating from a mix of the checkpoint's state and its own).
 * Every pointer an operation takes is checked to lie in the memory manager's
 * device memory, and copies inside an update in staging memory (backend_wrap.h).
 */
#include "check.h"
#include "moonrl.h"
#include "trainer.h"
#include "backend_wrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[64];

static const char *tmp_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", tmpdir, name);
    return buf;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ================================================================ 1. creation */

static void test_create_faults(void) {
    mr_config c;
    bw_config(&c);
    const mr_backend *w = bw_init(mr_backend_cpu(), "cpu-wrap");
    mr_trainer *t = NULL;
    mr_error e;
    long c0 = BW.calls;
    CHECK_MSG(mr_trainer_create_on(&c, w, "", &t, &e) == MR_OK, "%s", e.msg);
    const long n = BW.calls - c0;
    long seen[BW_NOPS];
    memcpy(seen, BW.count, sizeof seen);
    mr_trainer_free(t);
    CHECK_MSG(bw_nothing_live(), "a freed trainer left streams %ld, events %ld, networks %ld, segments %ld + %ld",
              BW.streams, BW.events, BW.policies, BW.dev.live, BW.stage.live);
    CHECK(seen[BW_policy_create] == 1 && seen[BW_env_reset_all] == 1 && seen[BW_raw_alloc] >= 2);
    int kinds = 0;
    for (int op = 0; op < BW_NOPS; op++) kinds += seen[op] > 0;
    for (long k = 1; k <= n; k++) {
        const mr_status want = k % 2 ? MR_ERR_BACKEND : MR_ERR_IO;   /* any status comes back as it is */
        bw_arm(k, want);
        t = (mr_trainer *)&c;   /* overwritten: NULL on failure */
        e.msg[0] = 0;
        const mr_status s = mr_trainer_create_on(&c, w, "", &t, &e);
        const int op = BW.failed_op;
        bw_disarm();
        if (op < 0) {
            CHECK_MSG(0, "creation call %ld of %ld was never made (creation returned %d: %s)", k, n, s, e.msg);
            if (s == MR_OK) mr_trainer_free(t);
            continue;
        }
        const char *name = bw_names[op];
        if (op == BW_raw_alloc) {   /* the memory manager's own out-of-memory message, with the reason */
            CHECK_MSG(s == MR_ERR_NOMEM && e.status == s, "raw allocation (call %ld): status %d", k, s);
            CHECK_MSG(strstr(e.msg, "injected raw allocation failure") != NULL, "call %ld: %s", k, e.msg);
        } else {
            CHECK_MSG(s == want && e.status == want, "%s failing (call %ld): creation returned %d, not %d: %s", name, k,
                      s, want, e.msg);
            CHECK_MSG(strstr(e.msg, "injected failure of ") && strstr(e.msg, name), "%s (call %ld): message: %s",
                      name, k, e.msg);
        }
        CHECK_MSG(t == NULL, "%s failing (call %ld): *out is not NULL", name, k);
        CHECK_MSG(bw_nothing_live(), "%s failing (call %ld) left streams %ld, events %ld, networks %ld, "
                  "segments %ld + %ld", name, k, BW.streams, BW.events, BW.policies, BW.dev.live, BW.stage.live);
    }
    CHECK_MSG(BW.violations == 0, "%ld bad arguments, the first: %s", BW.violations, BW.first_violation);
    printf("  creation: %ld calls of %d operations, each failed in turn\n", n, kinds);
}

/* ================================================================ 2. an update */

/* A trainer's whole state, pulled to its host copies and kept. */
typedef struct state {
    size_t P, env_bytes;
    float *params, *m, *v;
    int64_t step;
    mr_popart popart;
    unsigned char *env;
    uint64_t updates, agent_steps;
} state;

static int state_get(mr_trainer *t, state *s) {
    mr_error e;
    if (mr_trainer_pull(t, MR_SYNC_ALL, &e) != MR_OK) {
        CHECK_MSG(0, "pull: %s", e.msg);
        return 0;
    }
    s->P = t->net.n_params;
    s->env_bytes = t->plan.env_bytes;
    s->params = malloc(s->P * 4);
    s->m = malloc(s->P * 4);
    s->v = malloc(s->P * 4);
    s->env = malloc(s->env_bytes);
    memcpy(s->params, t->pol.params, s->P * 4);
    memcpy(s->m, t->adam_m, s->P * 4);
    memcpy(s->v, t->adam_v, s->P * 4);
    memcpy(s->env, mr_env_state_base(&t->env), s->env_bytes);
    s->step = t->adam_step;
    s->popart = t->popart;
    s->updates = t->updates;
    s->agent_steps = t->agent_steps;
    return 1;
}

static void state_free(state *s) {
    free(s->params);
    free(s->m);
    free(s->v);
    free(s->env);
    memset(s, 0, sizeof *s);
}

/* Where two states differ ("" when bit for bit the same). */
static const char *state_diff(const state *a, const state *b) {
    if (a->P != b->P || a->env_bytes != b->env_bytes) return "shapes";
    if (memcmp(a->params, b->params, a->P * 4)) return "parameters";
    if (memcmp(a->m, b->m, a->P * 4)) return "Adam m";
    if (memcmp(a->v, b->v, a->P * 4)) return "Adam v";
    if (a->step != b->step) return "Adam step";
    if (memcmp(&a->popart, &b->popart, sizeof a->popart)) return "PopArt";
    if (memcmp(a->env, b->env, a->env_bytes)) return "environments";
    if (a->updates != b->updates || a->agent_steps != b->agent_steps) return "progress";
    return "";
}

/* The metrics an update computes (not its times), bit for bit. */
static int metrics_same(const mr_metrics *a, const mr_metrics *b) {
    const double x[] = {a->episodes, a->episode_return_mean, a->episode_length_mean, a->deaths, a->policy_loss,
                        a->value_loss, a->entropy, a->approx_kl, a->clip_fraction, a->explained_variance,
                        a->grad_norm, a->grad_norm_policy, a->grad_norm_value, a->popart_mean, a->popart_std,
                        a->loss_scale, a->lr, a->progress};
    const double y[] = {b->episodes, b->episode_return_mean, b->episode_length_mean, b->deaths, b->policy_loss,
                        b->value_loss, b->entropy, b->approx_kl, b->clip_fraction, b->explained_variance,
                        b->grad_norm, b->grad_norm_policy, b->grad_norm_value, b->popart_mean, b->popart_std,
                        b->loss_scale, b->lr, b->progress};
    return memcmp(x, y, sizeof x) == 0 && a->update == b->update && a->agent_steps == b->agent_steps &&
           a->skipped_steps == b->skipped_steps && a->nonfinite == b->nonfinite;
}

static void update_faults(int minibatches) {
    mr_config c;
    bw_config(&c);
    c.ppo.rollout_steps = 4;   /* every operation of an update, in fewer calls */
    c.ppo.minibatches = minibatches;   /* 1: the rollout's acts keep the first epoch's forward */
    mr_error e;
    char ck[160], bad[160];
    tmp_path(ck, sizeof ck, "after1.mrck");
    tmp_path(bad, sizeof bad, "broken.mrck");

    /* The reference: the plain cpu table, updates 1 and 2, a checkpoint between. */
    mr_trainer *r = NULL;
    mr_metrics m2;
    state want;
    memset(&want, 0, sizeof want);
    CHECK_MSG(mr_trainer_create_on(&c, mr_backend_cpu(), "", &r, &e) == MR_OK, "%s", e.msg);
    if (!r) return;
    CHECK_MSG(mr_trainer_update(r, NULL, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_save(r, ck, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_update(r, &m2, &e) == MR_OK, "%s", e.msg);
    const int got = state_get(r, &want);
    mr_trainer_free(r);
    if (!got) return;

    /* The trainer that fails: on the wrapper, from the checkpoint. */
    const mr_backend *w = bw_init(mr_backend_cpu(), "cpu-wrap");
    mr_trainer *f = NULL;
    c.seed = 99;   /* the load brings the run's seed */
    CHECK_MSG(mr_trainer_create_on(&c, w, "", &f, &e) == MR_OK, "%s", e.msg);
    if (!f) return;
    CHECK_MSG(mr_trainer_load(f, ck, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(mr_trainer_snapshot(f, &e) == MR_OK, "%s", e.msg);
    /* The wrapper is transparent: a clean update 2 equals the reference's. */
    mr_metrics m;
    long before[BW_NOPS];
    memcpy(before, BW.count, sizeof before);
    long c0 = BW.calls;
    BW.strict = 1;
    CHECK_MSG(mr_trainer_update(f, &m, &e) == MR_OK, "%s", e.msg);
    BW.strict = 0;
    const long n = BW.calls - c0;
    long in_update[BW_NOPS];
    for (int op = 0; op < BW_NOPS; op++) in_update[op] = BW.count[op] - before[op];
    state s;
    if (state_get(f, &s)) {
        CHECK_MSG(strcmp(state_diff(&s, &want), "") == 0, "through the wrapper: %s differ", state_diff(&s, &want));
        state_free(&s);
    }
    CHECK(metrics_same(&m, &m2));
    mr_eval_config ec;
    mr_eval_config_default(&ec);
    ec.num_envs = 4;
    ec.steps = 8;
    uint8_t obs[121] = {0};
    float logits[8];

    int recovered = 0, refused = 0, timing_only = 0;
    for (long k = 1; k <= n; k++) {
        CHECK_MSG(mr_trainer_load(f, ck, &e) == MR_OK, "%s", e.msg);
        const mr_status want_s = k % 2 ? MR_ERR_BACKEND : MR_ERR_IO;
        bw_arm(k, want_s);
        BW.strict = 1;
        const long raw0 = BW.count[BW_raw_alloc];
        mr_status st = mr_trainer_update(f, &m, &e);
        BW.strict = 0;
        const int op = BW.failed_op;
        bw_disarm();
        CHECK_MSG(BW.count[BW_raw_alloc] == raw0, "an update allocated device memory");
        if (op < 0) {
            CHECK_MSG(0, "update call %ld of %ld was never made (the update returned %d: %s)", k, n, st, e.msg);
            continue;
        }
        const char *name = bw_names[op];
        if (op == BW_event_elapsed) {
            /* the timing is advisory: the update went through and the trainer goes on */
            CHECK_MSG(st == MR_OK, "a failed event_elapsed (call %ld) failed the update: %s", k, e.msg);
            timing_only++;
        } else {
            char upd[96];
            snprintf(upd, sizeof upd, "update 2 on the %s backend failed", BW.name);
            CHECK_MSG(st == want_s && e.status == want_s, "%s failing (call %ld): update returned %d, not %d: %s",
                      name, k, st, want_s, e.msg);
            CHECK_MSG(strstr(e.msg, "injected failure of ") && strstr(e.msg, name) && strstr(e.msg, upd),
                      "%s failing (call %ld): message: %s", name, k, e.msg);
            /* refused until a checkpoint is loaded */
            int ok = 1;
            ok &= mr_trainer_update(f, &m, &e) == MR_ERR_STATE;
            ok &= strstr(e.msg, "failed update") != NULL;
            ok &= mr_trainer_save(f, bad, &e) == MR_ERR_STATE && access(bad, F_OK) != 0;
            ok &= mr_trainer_snapshot(f, &e) == MR_ERR_STATE;
            mr_eval_result er;
            ok &= mr_trainer_evaluate(f, &ec, &er, &e) == MR_ERR_STATE;
            ok &= mr_trainer_infer(f, obs, NULL, 1, logits, NULL, &e) == MR_ERR_STATE;
            CHECK_MSG(ok, "%s failing (call %ld): the broken trainer was not refused everything: %s", name, k, e.msg);
            refused += ok;
            if (k == n / 2) {   /* a restore puts weights back, not the environments: still refused */
                CHECK_MSG(mr_trainer_restore(f, &e) == MR_OK, "%s", e.msg);
                CHECK(mr_trainer_update(f, &m, &e) == MR_ERR_STATE);
            }
            CHECK_MSG(mr_trainer_load(f, ck, &e) == MR_OK, "%s failing (call %ld): load: %s", name, k, e.msg);
            st = mr_trainer_update(f, &m, &e);
            CHECK_MSG(st == MR_OK, "%s failing (call %ld): the update after the load: %s", name, k, e.msg);
        }
        if (state_get(f, &s)) {
            const char *d = state_diff(&s, &want);
            CHECK_MSG(d[0] == 0, "%s failing (call %ld): the next update's %s differ from a run that never failed",
                      name, k, d);
            CHECK_MSG(metrics_same(&m, &m2), "%s failing (call %ld): the next update's metrics differ", name, k);
            recovered += d[0] == 0 && metrics_same(&m, &m2);
            state_free(&s);
        }
    }
    CHECK_MSG(timing_only == in_update[BW_event_elapsed] && refused + timing_only == n,
              "%d refused + %d timing-only of %ld calls (%ld event_elapsed)", refused, timing_only, n,
              in_update[BW_event_elapsed]);
    CHECK_MSG(BW.violations == 0, "%ld bad arguments, the first: %s", BW.violations, BW.first_violation);
    mr_trainer_free(f);
    CHECK(bw_nothing_live());
    state_free(&want);
    unlink(ck);
    if (minibatches == 1)
        CHECK_MSG(in_update[BW_policy_act_keep] == c.ppo.rollout_steps && in_update[BW_policy_forward_kept] == 1,
                  "one minibatch: %ld act_keep, %ld forward_kept calls", in_update[BW_policy_act_keep],
                  in_update[BW_policy_forward_kept]);
    printf("  update, %d minibatch%s: %ld calls, each failed in turn: %d refused until a load, %d lost the timing "
           "only; %d recovered bit for bit\n", minibatches, minibatches == 1 ? "" : "es", n, refused, timing_only,
           recovered);
}
static void test_update_faults(void) {
    update_faults(2);
    update_faults(1);
}

/* ================================================================ 3. out of memory */

static mr_status create_budget(const mr_config *c, size_t budget, mr_trainer **t, mr_error *e) {
    const mr_backend *w = bw_init(mr_backend_cpu(), "cpu-small");
    BW.budget = budget;
    return mr_trainer_create_on(c, w, "", t, e);
}

static void test_oom(void) {
    mr_config c;
    bw_config(&c);
    c.env.num_envs = 4096;
    const size_t budget = (size_t)16 << 20;   /* limit 14.4 MiB at memory_fraction 0.9 */
    mr_trainer *t = (mr_trainer *)&c;
    mr_error e;
    mr_status s = create_budget(&c, budget, &t, &e);
    CHECK(s == MR_ERR_NOMEM && e.status == s && t == NULL);
    printf("  out of memory (4096 environments, a 16 MiB device): %s\n", e.msg);
    CHECK_MSG(strstr(e.msg, "cannot allocate") && strstr(e.msg, " for the "), "message: %s", e.msg);
    CHECK(bw_nothing_live());
    const char *p = strstr(e.msg, "At most ");
    int fit = -1;
    CHECK_MSG(p && sscanf(p, "At most %d environments fit", &fit) == 1, "no largest num_envs in: %s", e.msg);
    CHECK_MSG(fit > 0 && fit < 4096, "At most %d", fit);
    if (fit > 0 && fit < 4096) {
        c.env.num_envs = fit;
        t = NULL;
        s = create_budget(&c, budget, &t, &e);
        CHECK_MSG(s == MR_OK, "%d environments were said to fit: %s", fit, e.msg);
        if (s == MR_OK) {
            CHECK_MSG(mr_trainer_update(t, NULL, &e) == MR_OK, "%s", e.msg);   /* and run */
            mr_trainer_free(t);
        }
        CHECK(bw_nothing_live());
        c.env.num_envs = fit + 1;
        while (mr_config_validate(&c, NULL) != MR_OK) c.env.num_envs++;
        t = NULL;
        s = create_budget(&c, budget, &t, &e);
        CHECK_MSG(s == MR_ERR_NOMEM, "%d environments fit, but only %d were said to", c.env.num_envs, fit);
        if (s == MR_OK) mr_trainer_free(t);
        p = strstr(e.msg, "At most ");
        int fit2 = -1;
        CHECK_MSG(p && sscanf(p, "At most %d environments fit", &fit2) == 1 && fit2 == fit, "message: %s", e.msg);
        CHECK(bw_nothing_live());
    }
    /* a device below one memory segment: nothing fits */
    c.env.num_envs = 16;
    s = create_budget(&c, (size_t)1 << 20, &t, &e);
    CHECK(s == MR_ERR_NOMEM);
    CHECK_MSG(strstr(e.msg, "Not even 1 environment fits") != NULL, "message: %s", e.msg);
    CHECK(bw_nothing_live());
    CHECK_MSG(BW.violations == 0, "%ld bad arguments, the first: %s", BW.violations, BW.first_violation);
}

/* ================================================================ 4. a failed load or restore */

static void test_load_faults(void) {
    mr_config c;
    bw_config(&c);
    c.ppo.rollout_steps = 4;
    mr_error e;
    char ck[160];
    tmp_path(ck, sizeof ck, "load1.mrck");
    const mr_backend *w = bw_init(mr_backend_cpu(), "cpu-wrap");
    mr_trainer *t = NULL;
    CHECK_MSG(mr_trainer_create_on(&c, w, "", &t, &e) == MR_OK, "%s", e.msg);
    if (!t) return;
    mr_metrics m2, m;
    CHECK(mr_trainer_update(t, NULL, &e) == MR_OK);
    CHECK_MSG(mr_trainer_save(t, ck, &e) == MR_OK, "%s", e.msg);
    CHECK(mr_trainer_update(t, &m2, &e) == MR_OK);
    state want, s;
    if (!state_get(t, &want)) return;
    long c0 = BW.calls;
    CHECK(mr_trainer_load(t, ck, &e) == MR_OK);
    const long n = BW.calls - c0;
    long still_updates = 0;
    for (long k = 1; k <= n; k++) {
        CHECK(mr_trainer_update(t, NULL, &e) == MR_OK);   /* somewhere else than the checkpoint */
        bw_arm(k, MR_ERR_BACKEND);
        const mr_status st = mr_trainer_load(t, ck, &e);
        const int op = BW.failed_op;
        bw_disarm();
        const char *name = op >= 0 ? bw_names[op] : "?";
        CHECK_MSG(st == MR_ERR_BACKEND && strstr(e.msg, "injected failure of "), "%s failing (load call %ld): %d: %s",
                  name, k, st, e.msg);
        const mr_status su = mr_trainer_update(t, NULL, &e);
        still_updates += su == MR_OK;
        CHECK_MSG(su == MR_ERR_STATE, "%s failing (load call %ld): the trainer still updates (%d) from a half-loaded "
                    "state", name, k, su);
        CHECK_MSG(mr_trainer_load(t, ck, &e) == MR_OK, "%s", e.msg);
        CHECK(mr_trainer_update(t, &m, &e) == MR_OK);
        if (state_get(t, &s)) {
            CHECK_MSG(state_diff(&s, &want)[0] == 0 && metrics_same(&m, &m2),
                      "%s failing (load call %ld): after a good load, %s differ", name, k, state_diff(&s, &want));
            state_free(&s);
        }
    }
    /* a restore */
    CHECK(mr_trainer_snapshot(t, &e) == MR_OK);
    c0 = BW.calls;
    CHECK(mr_trainer_restore(t, &e) == MR_OK);
    const long nr = BW.calls - c0;
    long restore_updates = 0;
    for (long k = 1; k <= nr; k++) {
        CHECK(mr_trainer_update(t, NULL, &e) == MR_OK);
        bw_arm(k, MR_ERR_BACKEND);
        const mr_status st = mr_trainer_restore(t, &e);
        bw_disarm();
        CHECK(st == MR_ERR_BACKEND);
        const mr_status su = mr_trainer_update(t, NULL, &e);
        restore_updates += su == MR_OK;
        CHECK_MSG(su == MR_ERR_STATE, "restore call %ld failing: the trainer still updates from a half-restored "
                    "state", k);
        CHECK_MSG(mr_trainer_load(t, ck, &e) == MR_OK, "%s", e.msg);
    }
    CHECK_MSG(BW.violations == 0, "%ld bad arguments, the first: %s", BW.violations, BW.first_violation);
    mr_trainer_free(t);
    CHECK(bw_nothing_live());
    state_free(&want);
    unlink(ck);
    printf("  load: %ld calls, each failed in turn, then recovered by a good load; a restore: %ld calls\n", n, nr);
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moonrl_test_loop_faults_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    static const struct { const char *name; void (*fn)(void); } tests[] = {
        {"creation faults", test_create_faults}, {"update faults", test_update_faults}, {"out of memory", test_oom},
        {"load faults", test_load_faults},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const double t0 = now_s();
        tests[i].fn();
        printf("  (%s: %.2f s)\n", tests[i].name, now_s() - t0);
    }
    if (rmdir(tmpdir) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report("test_trainer_loop_faults");
}

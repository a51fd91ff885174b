/*
 * test_trainer_loop_state.c - the one trainer loop's state between updates,
 * on the cpu backend (plain and through the wrapper table of backend_wrap.h):
 *   1. steady state: after the first update no host allocation
 *      (mr_trainer_memory), no memory-manager allocation, no raw segment, no
 *      event; the memory manager holds exactly the plan's bytes; timings.
 *      also with a thread count other than the caller's OpenMP count (the
 *      cpu network's per-thread workspaces are planned for the config's);
 *   2. snapshot / restore: the learnable state comes back bit for bit (pulled
 *      and compared), the restored warm-up does not count as progress;
 *      evaluation and saving between updates change nothing; 1 thread and 2
 *      give the same bits;
 *   2b. the kept state (mr_trainer_keep / mr_trainer_restore_kept): device to
 *      device copies only, no wait, no allocation after the first keep; the
 *      learnable state and progress come back bit for bit, also after the
 *      NaN test aid (mr_trainer_debug_poison) and non-finite updates;
 *   3. graphs: on the cpu mr_trainer_graphs_used is 0 with the reason (the
 *      table cannot record; cuda.graphs = false); the fp16 loss-scale hook
 *      mr_trainer_set_loss_scale: values accepted and refused, the value
 *      reaching the optimizer's control block, and fp32 updates unchanged by it.
 */
#include "check.h"
#include "moonrl.h"
#include "trainer.h"
#include "backend_wrap.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mr_trainer *make(const mr_config *c, const mr_backend *be) {
    mr_trainer *t = NULL;
    mr_error e;
    if (mr_trainer_create_on(c, be, "", &t, &e) != MR_OK) CHECK_MSG(0, "create: %s", e.msg);
    return t;
}

static int update(mr_trainer *t, mr_metrics *m) {
    mr_error e;
    const mr_status s = mr_trainer_update(t, m, &e);
    CHECK_MSG(s == MR_OK, "update: %s", e.msg);
    return s == MR_OK;
}

/* The learnable state, pulled: params, m, v (3 P floats), step and PopArt. */
typedef struct learn {
    size_t P;
    float *x;
    int64_t step;
    mr_popart popart;
} learn;

static void learn_get(mr_trainer *t, learn *l) {
    mr_error e;
    CHECK_MSG(mr_trainer_pull(t, MR_SYNC_LEARNABLE, &e) == MR_OK, "pull: %s", e.msg);
    l->P = t->net.n_params;
    l->x = malloc(l->P * 12);
    memcpy(l->x, t->pol.params, l->P * 4);
    memcpy(l->x + l->P, t->adam_m, l->P * 4);
    memcpy(l->x + 2 * l->P, t->adam_v, l->P * 4);
    l->step = t->adam_step;
    l->popart = t->popart;
}

static int learn_same(const learn *a, const learn *b) {
    return a->P == b->P && memcmp(a->x, b->x, a->P * 12) == 0 && a->step == b->step &&
           memcmp(&a->popart, &b->popart, sizeof a->popart) == 0;
}

static long copies_of_kind(int kind) {
    long n = 0;
    for (int i = 0; i < BW.nrec; i++)
        if (BW.rec[i] == BW_REC(BW_copy, kind)) n++;
    return n;
}

/* ================================================================ 1. steady state */

static void test_steady_state(void) {
    mr_config c;
    bw_config(&c);
    c.threads = omp_get_max_threads();
    const mr_backend *w = bw_init(mr_backend_cpu(), "cpu-wrap");
    mr_trainer *t = make(&c, w);
    if (!t) return;
    mr_error e;
    mr_metrics m;
    mr_memory_stats ms0, ms;
    mr_devmem_stats d0, d;
    CHECK(mr_trainer_devmem(t, &d0, &e) == MR_OK);
    CHECK_MSG(d0.requested_bytes == t->plan.device_bytes, "the memory manager holds %llu bytes, the plan says %zu",
              (unsigned long long)d0.requested_bytes, t->plan.device_bytes);
    update(t, &m);
    CHECK(mr_trainer_memory(t, &ms0, &e) == MR_OK);
    CHECK(mr_trainer_devmem(t, &d0, &e) == MR_OK);
    const long raw0 = BW.count[BW_raw_alloc], ev0 = BW.events, ec0 = BW.count[BW_event_create];
    CHECK(m.memory_planned_bytes == t->plan.device_bytes);
    CHECK(m.memory_peak_bytes >= m.memory_planned_bytes && m.memory_peak_bytes <= m.memory_limit_bytes);
    CHECK(ms0.host_planned_bytes > 0 && ms0.host_allocations > 0);
    CHECK(ms0.device_allocated_bytes == 0 && ms0.device_allocations == 0);   /* the cpu's memory is host memory */
    int same = 1;
    for (int u = 2; u <= 5; u++) {
        BW.strict = 1;
        update(t, &m);
        BW.strict = 0;
        CHECK(mr_trainer_memory(t, &ms, &e) == MR_OK);
        CHECK(mr_trainer_devmem(t, &d, &e) == MR_OK);
        same &= ms.host_allocations == ms0.host_allocations && ms.host_peak_bytes == ms0.host_peak_bytes;
        same &= d.allocations == d0.allocations && d.raw_allocations == d0.raw_allocations &&
                d.requested_bytes == t->plan.device_bytes;
        same &= BW.count[BW_raw_alloc] == raw0 && BW.events == ev0 && BW.count[BW_event_create] == ec0;
    }
    CHECK_MSG(same, "updates 2 to 5 allocated: host allocations %llu -> %llu, manager allocations %llu -> %llu, "
              "raw %ld -> %ld, events %ld -> %ld", (unsigned long long)ms0.host_allocations,
              (unsigned long long)ms.host_allocations, (unsigned long long)d0.allocations,
              (unsigned long long)d.allocations, raw0, BW.count[BW_raw_alloc], ev0, BW.events);
    CHECK(m.update == 5 && m.agent_steps == 5 * (uint64_t)(16 * 16));
    /* timings: the cpu's events are timestamps, per-step timing always on */
    mr_trainer_timing tm;
    CHECK(mr_trainer_timing_get(t, &tm, &e) == MR_OK);
    CHECK(tm.rollout > 0.0 && tm.gae >= 0.0 && tm.update > 0.0 && tm.inference > 0.0 && tm.env >= 0.0);
    CHECK_MSG(tm.env + tm.inference <= tm.rollout * 1.001 + 1e-6, "env %.3g + inference %.3g > rollout %.3g", tm.env,
              tm.inference, tm.rollout);
    CHECK(m.time_rollout == tm.rollout && m.time_env == tm.env);
    /* the update's split: every part measured, their sum within the update */
    CHECK(tm.gather > 0.0 && tm.forward > 0.0 && tm.loss > 0.0 && tm.backward > 0.0 && tm.optimizer > 0.0);
    const double parts = tm.gather + tm.forward + tm.loss + tm.backward + tm.optimizer;
    CHECK_MSG(parts <= tm.update * 1.001 + 1e-6 && parts >= 0.5 * tm.update,
              "the update's parts sum to %.3g s, the update took %.3g s", parts, tm.update);
    CHECK(m.time_forward == tm.forward && m.time_optimizer == tm.optimizer);
    CHECK_MSG(BW.violations == 0, "%ld bad arguments, the first: %s", BW.violations, BW.first_violation);
    mr_trainer_free(t);
    CHECK(bw_nothing_live());

    /* another thread count than the calling thread's */
    const int ambient = omp_get_max_threads();
    c.threads = ambient == 1 ? 2 : 1;
    t = make(&c, mr_backend_cpu());
    if (t) {
        CHECK(mr_trainer_devmem(t, &d, &e) == MR_OK);
        CHECK_MSG(d.requested_bytes == t->plan.device_bytes, "threads = %d (the caller's OpenMP count %d): the "
                    "memory manager holds %llu bytes, the plan says %zu", c.threads, ambient,
                    (unsigned long long)d.requested_bytes, t->plan.device_bytes);
        mr_trainer_free(t);
    }
    omp_set_num_threads(ambient);
}

/* ================================================================ 2. snapshot, restore, others */

static void test_keep(void) {
    mr_config c;
    bw_config(&c);
    mr_trainer *t = make(&c, bw_init(mr_backend_cpu(), "cpu-wrap"));
    if (!t) return;
    mr_error e;
    mr_metrics m, m3;
    learn s0, s1;
    CHECK(mr_trainer_restore_kept(t, &e) == MR_ERR_STATE && strstr(e.msg, "mr_trainer_keep") != NULL);
    update(t, NULL);
    update(t, NULL);
    /* the first keep takes its block; the update's loop waits for nothing more */
    CHECK_MSG(mr_trainer_keep(t, &e) == MR_OK, "%s", e.msg);
    mr_devmem_stats d0, d;
    CHECK(mr_trainer_devmem(t, &d0, &e) == MR_OK);
    CHECK(d0.requested_bytes > t->plan.device_bytes);
    update(t, NULL);
    const long sync0 = BW.count[BW_stream_sync] + BW.count[BW_event_sync];
    BW.nrec = 0;
    BW.recording = 1;
    BW.strict = 1;
    CHECK_MSG(mr_trainer_keep(t, &e) == MR_OK, "%s", e.msg);
    BW.strict = 0;
    BW.recording = 0;
    CHECK_MSG(BW.count[BW_stream_sync] + BW.count[BW_event_sync] == sync0, "mr_trainer_keep waited");
    CHECK_MSG(copies_of_kind(MR_COPY_D2D) == 4 && copies_of_kind(MR_COPY_D2H) == 0 &&
              copies_of_kind(MR_COPY_H2D) == 0, "mr_trainer_keep: %ld D2D, %ld D2H, %ld H2D copies",
              copies_of_kind(MR_COPY_D2D), copies_of_kind(MR_COPY_D2H), copies_of_kind(MR_COPY_H2D));
    CHECK(mr_trainer_devmem(t, &d, &e) == MR_OK);
    CHECK_MSG(d.allocations == d0.allocations && d.requested_bytes == d0.requested_bytes,
              "a second keep allocated: %llu -> %llu", (unsigned long long)d0.allocations,
              (unsigned long long)d.allocations);
    learn_get(t, &s0);
    update(t, &m3);
    learn_get(t, &s1);
    CHECK(!learn_same(&s0, &s1));
    free(s1.x);
    CHECK_MSG(mr_trainer_restore_kept(t, &e) == MR_OK, "%s", e.msg);
    learn_get(t, &s1);
    CHECK_MSG(learn_same(&s0, &s1), "restore_kept did not bring the kept learnable state back bit for bit");
    free(s1.x);
    update(t, &m);
    CHECK_MSG(m.update == m3.update && m.agent_steps == m3.agent_steps && m.lr == m3.lr,
              "the undone update counted: update %llu vs %llu", (unsigned long long)m.update,
              (unsigned long long)m3.update);
    free(s0.x);

    /* poisoned: non-finite updates, the trainer not broken; the kept state comes back */
    CHECK(mr_trainer_keep(t, &e) == MR_OK);
    learn_get(t, &s0);
    CHECK(mr_trainer_debug_poison(t, &e) == MR_OK);
    for (int k = 0; k < 2; k++) {
        CHECK(mr_trainer_update(t, &m, &e) == MR_ERR_NUMERIC);
        CHECK(m.nonfinite == 1);
    }
    CHECK_MSG(mr_trainer_restore_kept(t, &e) == MR_OK, "%s", e.msg);
    learn_get(t, &s1);
    CHECK_MSG(learn_same(&s0, &s1), "restore_kept after non-finite updates: not the kept state");
    free(s1.x);
    free(s0.x);
    update(t, &m);
    CHECK(m.nonfinite == 0);
    CHECK_MSG(BW.violations == 0, "%ld bad arguments, the first: %s", BW.violations, BW.first_violation);
    mr_trainer_free(t);
    CHECK(bw_nothing_live());
}

static void test_snapshot(void) {
    mr_config c;
    bw_config(&c);
    mr_trainer *t = make(&c, mr_backend_cpu());
    if (!t) return;
    mr_error e;
    mr_metrics m1, m3, m;
    learn s0, s1;
    update(t, &m1);
    update(t, NULL);
    CHECK(mr_trainer_snapshot(t, &e) == MR_OK);
    learn_get(t, &s0);
    update(t, &m3);
    learn_get(t, &s1);
    CHECK(!learn_same(&s0, &s1) && s1.step == s0.step + 4);   /* the update moved it */
    free(s1.x);
    CHECK(mr_trainer_restore(t, &e) == MR_OK);
    learn_get(t, &s1);
    CHECK_MSG(learn_same(&s0, &s1), "restore did not bring the snapshot's learnable state back bit for bit");
    free(s1.x);
    update(t, &m);
    CHECK_MSG(m.update == m3.update && m.agent_steps == m3.agent_steps && m.progress == m3.progress,
              "the restored update counted: update %llu vs %llu", (unsigned long long)m.update,
              (unsigned long long)m3.update);
    CHECK(m.lr == m3.lr);   /* the schedules' progress came back too */
    CHECK(m.policy_loss != m3.policy_loss);   /* the environments kept going: another rollout */
    /* a second restore of the same snapshot */
    CHECK(mr_trainer_restore(t, &e) == MR_OK);
    learn_get(t, &s1);
    CHECK(learn_same(&s0, &s1));
    free(s1.x);
    free(s0.x);
    mr_trainer_free(t);

    /* evaluation, inference and a save between updates change nothing */
    mr_trainer *a = make(&c, mr_backend_cpu()), *b = make(&c, mr_backend_cpu());
    if (a && b) {
        mr_metrics ma, mb;
        update(a, NULL);
        update(b, NULL);
        mr_eval_config ec;
        mr_eval_config_default(&ec);
        ec.num_envs = 8;
        ec.steps = 32;
        mr_eval_result er;
        CHECK_MSG(mr_trainer_evaluate(a, &ec, &er, &e) == MR_OK, "%s", e.msg);
        uint8_t obs[2 * 121] = {0};
        float logits[16];
        CHECK(mr_trainer_infer(a, obs, NULL, 2, logits, NULL, &e) == MR_OK);
        char path[64];
        snprintf(path, sizeof path, "/tmp/moonrl_loop_state_%d.mrck", (int)getpid());
        CHECK_MSG(mr_trainer_save(a, path, &e) == MR_OK, "%s", e.msg);
        unlink(path);
        update(a, &ma);
        update(b, &mb);
        learn la, lb;
        learn_get(a, &la);
        learn_get(b, &lb);
        CHECK_MSG(learn_same(&la, &lb) && ma.policy_loss == mb.policy_loss && ma.episodes == mb.episodes,
                  "evaluation, inference or a save between updates changed the run");
        free(la.x);
        free(lb.x);
    }
    mr_trainer_free(a);
    mr_trainer_free(b);

    /* the thread count changes no bit */
    mr_config c2 = c;
    c2.threads = 2;
    a = make(&c, mr_backend_cpu());
    b = make(&c2, mr_backend_cpu());
    if (a && b) {
        mr_metrics ma, mb;
        update(a, &ma);
        update(b, &mb);
        learn la, lb;
        learn_get(a, &la);
        learn_get(b, &lb);
        CHECK_MSG(learn_same(&la, &lb) && ma.value_loss == mb.value_loss, "1 thread and 2 threads differ");
        free(la.x);
        free(lb.x);
    }
    mr_trainer_free(a);
    mr_trainer_free(b);
}

/* ================================================================ 3. graphs, loss scale */

static void test_graphs_and_scale(void) {
    mr_config c;
    bw_config(&c);
    mr_error e;
    const char *why = NULL;
    CHECK(mr_trainer_graphs_used(NULL, &why) == 0 && why && strcmp(why, "no trainer") == 0);
    mr_trainer *t = make(&c, mr_backend_cpu());
    if (!t) return;
    CHECK(mr_trainer_graphs_used(t, &why) == 0);
    update(t, NULL);
    update(t, NULL);   /* a later update would replay, where the table records */
    why = NULL;
    CHECK(mr_trainer_graphs_used(t, &why) == 0);
    CHECK_MSG(why && strstr(why, "not available with the cpu operations"), "why not: %s", why ? why : "(null)");
    CHECK(mr_trainer_graphs_used(t, NULL) == 0);
    CHECK_MSG(strstr(mr_trainer_describe(t), "cpu backend") != NULL, "%s", mr_trainer_describe(t));

    /* the scale hook: refused values leave the control block alone */
    CHECK(mr_trainer_set_loss_scale(NULL, 1.0f, &e) == MR_ERR_ARG);
    const float bad[] = {0.0f, -1.0f, -0.0f, NAN, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const mr_status s = mr_trainer_set_loss_scale(t, bad[i], &e);
        CHECK_MSG(s == MR_ERR_ARG && strstr(e.msg, "positive"), "scale %g: %d: %s", (double)bad[i], s, e.msg);
    }
    const float good[] = {1.0f, 1024.0f, 0.5f, 1e30f};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_MSG(mr_trainer_set_loss_scale(t, good[i], &e) == MR_OK, "scale %g: %s", (double)good[i], e.msg);
        CHECK(mr_trainer_pull(t, MR_SYNC_LEARNABLE, &e) == MR_OK);
        CHECK(t->h.opt->s.loss_scale == good[i] && t->h.opt->s.growth_tracker == 0);
    }
    CHECK(mr_trainer_set_loss_scale(t, 0.0f, &e) == MR_ERR_ARG);
    CHECK(mr_trainer_pull(t, MR_SYNC_LEARNABLE, &e) == MR_OK);
    CHECK(t->h.opt->s.loss_scale == 1e30f);
    mr_trainer_free(t);

    /* fp32 does not scale: a huge scale changes no bit of an update */
    mr_trainer *a = make(&c, mr_backend_cpu()), *b = make(&c, mr_backend_cpu());
    if (a && b) {
        mr_metrics ma, mb;
        CHECK(mr_trainer_set_loss_scale(b, 1048576.0f, &e) == MR_OK);
        update(a, &ma);
        update(b, &mb);
        learn la, lb;
        learn_get(a, &la);
        learn_get(b, &lb);
        CHECK_MSG(learn_same(&la, &lb) && ma.grad_norm == mb.grad_norm, "fp32 with a loss scale differs");
        CHECK(mb.skipped_steps == 0 && mb.nonfinite == 0);
        free(la.x);
        free(lb.x);
    }
    mr_trainer_free(a);
    mr_trainer_free(b);

    /* cuda.graphs = false says so; a wrapper table is named */
    c.cuda.graphs = 0;
    t = make(&c, mr_backend_cpu());
    if (t) {
        update(t, NULL);
        CHECK(mr_trainer_graphs_used(t, &why) == 0);
        CHECK_MSG(why && strcmp(why, "off (cuda.graphs = false)") == 0, "why not: %s", why ? why : "(null)");
        mr_trainer_free(t);
    }
    c.cuda.graphs = 1;
    t = make(&c, bw_init(mr_backend_cpu(), "cpu-wrap"));
    if (t) {
        update(t, NULL);
        update(t, NULL);
        CHECK(mr_trainer_graphs_used(t, &why) == 0);
        CHECK_MSG(why && strstr(why, "not available with the cpu-wrap operations"), "why not: %s", why ? why : "");
        CHECK(BW.table.graph_begin == NULL);
        mr_trainer_free(t);
    }
}

int main(int argc, char **argv) {
    static const struct { const char *name; void (*fn)(void); } tests[] = {
        {"steady state", test_steady_state}, {"snapshot, restore", test_snapshot}, {"keep", test_keep},
        {"graphs, loss scale", test_graphs_and_scale},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const double t0 = now_s();
        tests[i].fn();
        printf("  (%s: %.2f s)\n", tests[i].name, now_s() - t0);
    }
    return check_report("test_trainer_loop_state");
}

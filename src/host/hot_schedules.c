/*
 * hot_schedules.c - the hot set in force on the trainer thread, and the
 * schedules the host evaluates (trainer_thread.h).
 *
 * Progress belongs to the host here. Warm-up updates (flagged, not counted)
 * may or may not advance the engine's own counters, so the thread counts real
 * updates itself (trainer_thread.c): metrics.update, agent_steps and progress
 * are rewritten to the real counts, and whenever warm-up ran or a schedule is
 * a Lua function (a table of values per update, made on the loop), the host
 * evaluates the schedules itself at every boundary (`override`) and hands the
 * engine constants (mr_trainer_set_hot), so the value used by update k is
 * exactly schedule(p) at the run's progress p after k - 1 updates, never one
 * update late (host_trainer_progress_after: agent-steps done over the run's
 * agent-steps). The schedule's value is core's mr_schedule_value, the one
 * place it is computed.
 */
#include "trainer_thread.h"

#include <string.h>

static void set_constant(mr_schedule *sc, double v) {
    sc->kind = MR_SCHED_CONSTANT;
    sc->start = sc->end = v;
}

/* Sets the hot parameters for the update about to run (the
 * (real_updates+1)-th). On refusal fills msg and returns -1. */
static int try_apply(host_trainer *s, char *msg, size_t n) {
    mr_hot_params h = s->cur->hot;
    if (s->override) {
        double p = host_trainer_progress_after(s, s->real_updates);
#define SCHED_OF(k, m, f, lo, hi) &h.m,
#define NOT_SCHED(k, m, f, lo, hi)
        mr_schedule *sc[HOST_SCHED_N] = {MR_HOT_KEYS(SCHED_OF, NOT_SCHED, NOT_SCHED, NOT_SCHED)};
#undef SCHED_OF
#undef NOT_SCHED
        for (int i = 0; i < HOST_SCHED_N; i++) {
            double v;
            if (s->cur->table[i] && s->cur->len[i] > 0) {
                size_t k = s->real_updates < s->cur->len[i] ? s->real_updates : s->cur->len[i] - 1;
                v = s->cur->table[i][k];
            } else {
                v = mr_schedule_value(sc[i], p);
            }
            set_constant(sc[i], v);
        }
        /* The engine may count warm-up steps; it must not stop early for them. */
        h.total_steps += s->warm_steps;
    }
    mr_error err = {0};
    if (mr_trainer_set_hot(s->t, &h, &err) != MR_OK) {
        snprintf(msg, n, "hot parameters refused: %s", err.msg);
        return -1;
    }
    s->applied = h;
    return 0;
}

int host_hot_apply(host_trainer *s) {
    char msg[MR_ERROR_LEN + 64];
    if (try_apply(s, msg, sizeof msg) == 0) return 0;
    host_trainer_fail(s, msg);
    return -1;
}

void host_hot_take(host_trainer *s, host_hot *h) {
    s->cur = h;
    mr_config c = s->r->cfg;
    /* The run's updates: every rank's agent-steps count, and those before a
     * resume on another count of ranks (steps_base) are not updates. */
    int64_t left = (int64_t)h->hot.total_steps - s->r->steps_base;
    c.total_steps = left > 0 ? (uint64_t)left : 1;
    c.env.num_envs *= s->ranks;
    s->total_updates = mr_config_total_updates(&c);
    for (int i = 0; i < HOST_SCHED_N; i++)
        if (h->table[i]) s->override = 1;
    /* The engine counts only this rank's steps: the host evaluates the
     * schedules at the run's progress. */
    if (s->ranks > 1 || s->r->steps_base != 0) s->override = 1;
}

/* A new hot set from the mailbox. The engine may still refuse a value the
 * Lua side accepted: then the previous set stays and the refusal is reported
 * as an HEV_HOT event with flag 1; the run goes on. */
static void post_hot(host_trainer *s, int refused, uint64_t seq, const char *msg) {
    host_event ev;
    memset(&ev, 0, offsetof(host_event, text));
    ev.kind = HEV_HOT;
    ev.flag = refused;
    ev.update = s->real_updates;
    ev.seq = seq;
    snprintf(ev.text, sizeof ev.text, "%s", msg);
    host_run_post_event(s->r, &ev);
}

void host_hot_swap(host_trainer *s, host_hot *h) {
    host_hot *prev = s->cur;
    int prev_override = s->override;
    uint64_t seq = h->seq;
    host_hot_take(s, h);
    char msg[MR_ERROR_LEN + 64];
    if (try_apply(s, msg, sizeof msg) != 0) {
        host_hot_free(h);
        s->override = prev_override;
        host_hot_take(s, prev);
        post_hot(s, 1, seq, msg);
        return;
    }
    host_hot_free(prev);
    post_hot(s, 0, seq, "");
}

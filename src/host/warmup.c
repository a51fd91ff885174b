/*
 * warmup.c - the warm-up updates before a run's real ones (trainer_thread.h):
 * they compile, benchmark or capture whatever the backend does on its first
 * updates (warmup.updates), flagged and not counted, and the weights are
 * restored after them when warmup.restore asks. Only a stop is honoured
 * meanwhile; other mail waits for the first boundary.
 *
 * From the end of warm-up on the host owns progress and the schedules
 * (hot_schedules.c): the engine may have counted the warm-up's steps.
 * A resumed run does not warm up again, but its schedules and total are
 * handled as the uninterrupted run handled them after its warm-up, so a
 * resumed CPU run continues bit for bit.
 */
#include "trainer_thread.h"

#include <string.h>

int host_warmup(host_trainer *s) {
    host_run *r = s->r;
    mr_error err = {0};
    if (r->warmup_updates <= 0) return 0;
    if (r->resume_path[0]) {
        s->override = 1;
        s->warm_steps = (uint64_t)r->warmup_updates * s->batch;
        return 0;
    }
    if (r->warmup_restore && host_ranks_call(HOST_OP_SNAPSHOT, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "warm-up snapshot failed: %s", err.msg);
        host_trainer_fail(s, msg);
        return -1;
    }
    if (host_hot_apply(s) != 0) return -1;
    int done = 0;
    for (; done < r->warmup_updates && !host_run_stop_requested(r); done++) {
        host_event ev;
        memset(&ev, 0, offsetof(host_event, text));
        if (host_trainer_update(s, 1, 0, &ev.metrics, &err) != MR_OK) {
            char msg[MR_ERROR_LEN + 64];
            snprintf(msg, sizeof msg, "warm-up update %d failed: %s", done + 1, err.msg);
            host_trainer_fail(s, msg);
            return -1;
        }
        s->warm_steps += s->batch;
        ev.kind = HEV_METRICS;
        ev.flag = 1;
        ev.metrics.update = (uint64_t)done + 1;
        ev.metrics.progress = 0;
        ev.text[0] = 0;
        host_run_post_event(r, &ev);
    }
    if (r->warmup_restore && host_ranks_call(HOST_OP_RESTORE, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "restoring the weights after warm-up failed: %s", err.msg);
        host_trainer_fail(s, msg);
        return -1;
    }
    s->override = 1;
    host_run_post_simple(r, HEV_WARMUP_DONE, r->warmup_restore, (uint64_t)done, "");
    return 0;
}

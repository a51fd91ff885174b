/*
 * bad_updates.c - non-finite updates on the trainer thread
 * (trainer_thread.h; faults.max_bad_updates).
 *
 * The engine skips the optimizer step of an update whose loss or gradient is
 * not finite and returns MR_ERR_NUMERIC; its metrics (nonfinite set) go out
 * as usual and the run goes on. With max_bad_updates > 0 the thread keeps the
 * last good state with mr_trainer_keep (on the backend, no host round trip;
 * before the first update and after every good one), writes no checkpoint
 * from a state a bad update left (run_checkpoints.c: periodic ones wait for
 * a good update, requested ones are refused, a final one is the last good
 * state restored), and after max_bad_updates bad updates in a row restores
 * the last good state, writes it as the final checkpoint and ends the run as
 * failed. The loop counts the bad updates in a row (trainer_thread.c).
 */
#include "trainer_thread.h"

int host_bad_keep_good(host_trainer *s) {
    if (s->r->max_bad_updates <= 0) return 0;
    mr_error err = {0};
    if (host_ranks_call(HOST_OP_KEEP, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "keeping the last good state failed: %s", err.msg);
        host_trainer_fail(s, msg);
        return -1;
    }
    s->have_good = 1;
    s->good_update = s->real_updates;
    return 0;
}

/* Back to the last good state: weights, optimizer, PopArt and progress (the
 * environments keep theirs). */
static int restore_good(host_trainer *s) {
    mr_error err = {0};
    if (!s->have_good || host_ranks_call(HOST_OP_RESTORE_KEPT, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 128];
        snprintf(msg, sizeof msg, "restoring the last good state (after update %llu) failed: %s",
                 (unsigned long long)s->good_update, s->have_good ? err.msg : "none was kept");
        host_trainer_fail(s, msg);
        return -1;
    }
    s->real_updates = s->good_update;
    s->bad = 0;
    return 0;
}

int host_bad_final(host_trainer *s) {
    if (s->bad > 0 && s->r->max_bad_updates > 0 && restore_good(s) != 0) return -1;
    return host_checkpoint_final(s);
}

host_finish_reason host_bad_give_up(host_trainer *s) {
    char which[96];
    if (s->bad > 1)
        snprintf(which, sizeof which, "updates %llu to %llu", (unsigned long long)s->first_bad,
                 (unsigned long long)s->real_updates);
    else
        snprintf(which, sizeof which, "update %llu", (unsigned long long)s->real_updates);
    int n = s->bad;
    if (host_bad_final(s) != 0) return HOST_FAILED;
    char msg[HOST_PATH + 512];
    snprintf(msg, sizeof msg, "%s had a non-finite loss or gradient (%d in a row, faults.max_bad_updates = %d; "
             "their optimizer steps were skipped): stopped with the last good state, after update %llu, as the "
             "final checkpoint %s (try a lower ppo.lr or ppo.max_grad_norm)",
             which, n, s->r->max_bad_updates, (unsigned long long)s->real_updates,
             s->last_ckpt[0] ? s->last_ckpt : "(none)");
    host_trainer_fail(s, msg);
    return HOST_FAILED;
}

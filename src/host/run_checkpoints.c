/*
 * run_checkpoints.c - the checkpoints the trainer thread writes for its run
 * (trainer_thread.h): periodic ones under run_dir/checkpoints/, of which
 * only the newest checkpoint_keep stay (rotation; a resumed run's older ones
 * join it, trainer_thread.c), those asked for through the mailbox, and the
 * final one.
 *
 * None is ever ahead of the metrics rows (host.h, mb_written): before
 * writing, the thread waits for the loop's files to hold the rows of every
 * update it posted; a periodic one is postponed to the first update whose
 * rows are (training goes on meanwhile, the postponement said once), a
 * requested one refused, the final one written with a note that says so.
 * Neither is one written from the state a non-finite update left
 * (bad_updates.c): periodic ones wait for a good update, requested ones are
 * refused, the final one is of the last good state.
 */
#include "trainer_thread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mr_trainer_save, with every rank's environments and the run's agent-steps
 * when the run has ranks or its steps are not updates x batch. */
static mr_status save_file(host_trainer *s, const char *path, mr_error *err) {
    if (s->ranks <= 1 && s->r->steps_base == 0) return mr_trainer_save(s->t, path, err);
    void *states = NULL;
    if (host_ranks_gather_envs(s->t, &states, err->msg, sizeof err->msg) != 0) {
        err->status = MR_ERR_BACKEND;
        return MR_ERR_BACKEND;
    }
    const mr_ranks_info info = {s->ranks, 1, host_trainer_steps_after(s, s->real_updates)};
    mr_status st = mr_trainer_save_ranks(s->t, path, &info, states, err);
    free(states);
    return st;
}

static int ckpt_dir(host_trainer *s, char *out, size_t n) {
    int w = snprintf(out, n, "%s/checkpoints", s->r->run_dir);
    if (w < 0 || (size_t)w >= n) return -1;
    if (mkdir(out, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* Waits at most ms until the loop's files hold the rows of every update
 * posted so far. Returns 1 when they do, else 0 with *written the count
 * they hold: a checkpoint is never written ahead of them (the callers
 * postpone, refuse, or say so). */
static int rows_written(host_trainer *s, int ms, uint64_t *written) {
    return host_run_wait_written(s->r, s->posted, ms, written);
}

/* The update whose rows are the last written, given `written` of the
 * posted rows (the posted ones are the updates up to real_updates). */
static unsigned long long last_row(const host_trainer *s, uint64_t written) {
    return (unsigned long long)(s->real_updates - (s->posted - written));
}

/* Saves to `path`, or to the run's next periodic name when path is "" (those
 * rotate: only the last checkpoint_keep stay). `requested`: asked for through
 * the mailbox (the event says so, for whoever waits on it). Returns 0 or -1
 * (error event posted). */
static int save(host_trainer *s, const char *path, int requested) {
    char auto_path[HOST_PATH];
    int periodic = path[0] == 0;
    if (requested && s->bad > 0 && s->r->max_bad_updates > 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "checkpoint refused: update %llu had a non-finite loss or gradient, so the "
                 "state is not one to keep (the last good one, after update %llu, is written when the run "
                 "ends; a good update lifts this)", (unsigned long long)s->real_updates,
                 (unsigned long long)s->good_update);
        host_run_post_simple(s->r, HEV_CHECKPOINT_FAILED, 0, s->real_updates, msg);
        return -1;
    }
    if (periodic) {
        char dir[HOST_PATH];
        if (ckpt_dir(s, dir, sizeof dir) != 0) {
            char msg[HOST_PATH + 64];
            snprintf(msg, sizeof msg, "cannot create the checkpoint folder under %s: %s",
                     s->r->run_dir, strerror(errno));
            host_trainer_fail(s, msg);
            return -1;
        }
        int w = snprintf(auto_path, sizeof auto_path, "%s/update_%07llu.mrck", dir,
                         (unsigned long long)s->real_updates);
        if (w < 0 || (size_t)w >= sizeof auto_path) {
            host_trainer_fail(s, "checkpoint path too long: choose a shorter run directory");
            return -1;
        }
        path = auto_path;
    }
    mr_error err = {0};
    if (save_file(s, path, &err) != MR_OK) {
        char msg[HOST_PATH + MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "checkpoint %s failed: %s", path, err.msg);
        /* A path someone asked for may just be wrong: say so and train on.
         * The run's own checkpoints failing means the disk is: stop. */
        if (requested) host_run_post_simple(s->r, HEV_CHECKPOINT_FAILED, 0, s->real_updates, msg);
        else host_trainer_fail(s, msg);
        return -1;
    }
    if (periodic) {
        int keep = s->r->checkpoint_keep;
        if (keep > 0) {
            if (s->nkept == keep) {
                unlink(s->kept[0]);
                memmove(s->kept[0], s->kept[1], (size_t)(keep - 1) * sizeof s->kept[0]);
                s->nkept--;
            }
            snprintf(s->kept[s->nkept++], HOST_PATH, "%s", path);
        }
        s->last_ckpt_update = s->real_updates;
    }
    snprintf(s->last_ckpt, sizeof s->last_ckpt, "%s", path);
    host_run_post_simple(s->r, HEV_CHECKPOINT, requested, s->real_updates, path);
    return 0;
}

void host_checkpoint_requested(host_trainer *s, const char *path) {
    uint64_t written;
    if (!rows_written(s, HOST_REQUESTED_WAIT_MS, &written)) {
        char msg[256];
        snprintf(msg, sizeof msg, "checkpoint refused: the event loop has written the metrics up to "
                 "update %llu only, after %d s of waiting (a checkpoint is never ahead of "
                 "metrics.jsonl); ask again later", last_row(s, written), HOST_REQUESTED_WAIT_MS / 1000);
        host_run_post_simple(s->r, HEV_CHECKPOINT_FAILED, 0, s->real_updates, msg);
    } else {
        save(s, path, 1);
    }
}

int host_checkpoint_final(host_trainer *s) {
    if (s->last_ckpt_update == s->real_updates) return 0;
    uint64_t written;
    if (!rows_written(s, HOST_FINAL_WAIT_MS, &written)) {
        char msg[256];
        snprintf(msg, sizeof msg, "the final checkpoint (update %llu) is written ahead of the metrics of updates "
                 "%llu to %llu: the event loop had not written them after %d s (a hook, timer or sink keeps it "
                 "busy); a resume from it says they are missing",
                 (unsigned long long)s->real_updates, last_row(s, written) + 1,
                 (unsigned long long)s->real_updates, HOST_FINAL_WAIT_MS / 1000);
        host_run_post_simple(s->r, HEV_NOTE, 0, s->real_updates, msg);
    }
    return save(s, "", 0);
}

/* A periodic checkpoint once the rows of every update before it are written
 * (waiting HOST_WRITTEN_WAIT_MS at most), else postponed to the next update
 * whose rows are: training goes on meanwhile, and the postponement is said
 * once. */
int host_checkpoint_periodic(host_trainer *s) {
    uint64_t written;
    if (!rows_written(s, HOST_WRITTEN_WAIT_MS, &written)) {
        if (!s->ckpt_due) {
            char msg[320];
            snprintf(msg, sizeof msg, "the checkpoint after update %llu is postponed: the event loop has written "
                     "the metrics up to update %llu only (a hook, timer or sink keeps it busy); it is written "
                     "after the first update whose metrics are all written, so no checkpoint is ahead of "
                     "metrics.jsonl", (unsigned long long)s->real_updates, last_row(s, written));
            host_run_post_simple(s->r, HEV_NOTE, 0, s->real_updates, msg);
        }
        s->ckpt_due = 1;
        return 0;
    }
    s->ckpt_due = 0;
    return save(s, "", 0);
}

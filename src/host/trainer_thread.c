/*
 * trainer_thread.c - one trainer on its own thread and its loop, talking to
 * the event loop through two small structures and nothing else
 * (run_channel.c: the events ring, trainer -> loop, and the mailbox, loop ->
 * trainer). No Lua here, by design: the thread could be driven by any C
 * program. The thread reads its mailbox only between updates (boundary()),
 * so an update always runs with one consistent set of parameters.
 *
 * The thread counts the run's real updates itself (warm-up ones are flagged
 * and not counted; warmup.c): metrics.update, agent_steps and progress are
 * rewritten to the real counts, and the hot set and schedules it gives the
 * engine before each update are hot_schedules.c's. Checkpoints are
 * run_checkpoints.c's; non-finite updates bad_updates.c's (trainer_thread.h
 * lists the files and the way their calls go).
 *
 * Resuming (run_dir's checkpoint in resume_path): the trainer loads it right
 * after creation, before anything runs; the real count starts at the run's
 * own count it holds, and warm-up is not run again (warmup.c), so a resumed
 * CPU run continues bit for bit.
 */
#include "trainer_thread.h"

#include <stdlib.h>
#include <string.h>

/* Takes the learned state of the checkpoint at path (host.h, HEV_ADOPTED):
 * in force from the next update; the state kept for non-finite updates is
 * this one from now on. */
static void adopt(host_trainer *s, const char *path) {
    char msg[HOST_PATH];
    mr_error err = {0};
    if (s->ranks > 1) {
        snprintf(msg, sizeof msg, "adopting another run's weights is not built for a run of %d ranks", s->ranks);
        host_run_post_simple(s->r, HEV_ADOPTED, 1, s->real_updates, msg);
        return;
    }
    if (mr_trainer_load_learned(s->t, path, &err) != MR_OK) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        host_run_post_simple(s->r, HEV_ADOPTED, 1, s->real_updates, msg);
        return;
    }
    s->bad = 0;
    if (host_bad_keep_good(s) != 0) return;
    host_run_post_simple(s->r, HEV_ADOPTED, 0, s->real_updates, path);
}

/* Reads the mailbox at an update boundary: applies a new hot set, writes
 * requested checkpoints (and adopts requested ones), pauses where a pause
 * mark (mb_pause_at) is reached, and waits while paused. Returns 0 to go on,
 * 1 to stop. */
static int boundary(host_trainer *s) {
    host_run *r = s->r;
    int announced_pause = 0;
    /* The hand-shake (host.h, mb_sync): the loop has run the hooks of the
     * update just posted, so whatever they posted is in the mailbox now. */
    pthread_mutex_lock(&r->mb_mu);
    while (r->mb_sync && r->mb_acked < s->posted && !r->mb_stop)
        pthread_cond_wait(&r->mb_cv, &r->mb_mu);
    pthread_mutex_unlock(&r->mb_mu);
    for (;;) {
        pthread_mutex_lock(&r->mb_mu);
        host_hot *h = r->mb_hot;
        r->mb_hot = NULL;
        host_ckpt_req *reqs = r->mb_ckpt_head;
        r->mb_ckpt_head = r->mb_ckpt_tail = NULL;
        int stop = r->mb_stop, paused = r->mb_pause;
        pthread_mutex_unlock(&r->mb_mu);

        if (h) host_hot_swap(s, h);
        for (host_ckpt_req *c = reqs, *n; c; c = n) {
            n = c->next;
            if (c->adopt) adopt(s, c->path);
            else host_checkpoint_requested(s, c->path);
            free(c);
        }
        if (stop) return 1;
        if (!paused) {
            /* a pause mark reached (total_steps as it stands after the hot
             * swap: a complete run ends rather than pause) - a pause like any
             * other from here, which resume ends */
            uint64_t now = host_trainer_steps_after(s, s->real_updates);
            pthread_mutex_lock(&r->mb_mu);
            if (r->mb_pause_at && now >= r->mb_pause_at && now < s->cur->hot.total_steps) {
                r->mb_pause = paused = 1;
                r->mb_pause_at = 0;
            }
            pthread_mutex_unlock(&r->mb_mu);
        }
        if (!paused) {
            if (announced_pause) host_run_post_simple(r, HEV_RESUMED, 0, s->real_updates, "");
            return 0;
        }
        if (!announced_pause) {
            host_run_post_simple(r, HEV_PAUSED, 0, s->real_updates, "");
            announced_pause = 1;
        }
        pthread_mutex_lock(&r->mb_mu);
        while (r->mb_pause && !r->mb_stop && !r->mb_hot && !r->mb_ckpt_head)
            pthread_cond_wait(&r->mb_cv, &r->mb_mu);
        pthread_mutex_unlock(&r->mb_mu);
    }
}

static host_finish_reason train(host_trainer *s) {
    host_run *r = s->r;
    mr_error err = {0};
    if (host_warmup(s) != 0) return HOST_FAILED;
    if (host_hot_apply(s) != 0) return HOST_FAILED;
    if (host_bad_keep_good(s) != 0) return HOST_FAILED;
    for (;;) {
        int b = boundary(s);
        uint64_t real_steps = host_trainer_steps_after(s, s->real_updates);
        /* complete (total_steps as it stands after the boundary's hot swap):
         * done, even when a stop arrived in the same round - nothing is left
         * for the stop to cut short, and a sweep records the trial "done" */
        if (real_steps >= s->cur->hot.total_steps) return HOST_DONE;
        if (b > 0) return HOST_STOPPED;
        if (s->override && host_hot_apply(s) != 0) return HOST_FAILED;

        if (r->inject_nan_at && s->real_updates + 1 == r->inject_nan_at &&
            host_ranks_call(HOST_OP_POISON, s->t, &err) != MR_OK) {
            char msg[MR_ERROR_LEN + 64];
            snprintf(msg, sizeof msg, "debug.inject_nan_at_update failed: %s", err.msg);
            host_trainer_fail(s, msg);
            return HOST_FAILED;
        }
        host_event ev;
        memset(&ev, 0, offsetof(host_event, text));
        mr_status st = host_trainer_update(s, 0, s->real_updates + 1, &ev.metrics, &err);
        int bad = st == MR_ERR_NUMERIC;   /* the update ran; its optimizer steps were skipped */
        if (st != MR_OK && !bad) {
            char msg[MR_ERROR_LEN + 64];
            snprintf(msg, sizeof msg, "update %llu failed (%s): %s",
                     (unsigned long long)s->real_updates + 1, mr_status_name(err.status), err.msg);
            host_trainer_fail(s, msg);
            return HOST_FAILED;
        }
        if (!s->off_known) {
            /* Whatever the engine counted beside the real updates (warm-up
             * that was not restored, in this run or the one resumed). */
            s->engine_off_updates = ev.metrics.update - (s->real_updates + 1);
            s->off_known = 1;
        }
        s->real_updates++;
        s->updates_run++;
        ev.metrics.update -= s->engine_off_updates;
        /* the run's count, not the engine's: each rank's engine counts its
         * own steps (and warm-up ones), none before a resume on another
         * count of ranks */
        ev.metrics.agent_steps = host_trainer_steps_after(s, s->real_updates);
        ev.metrics.progress = host_trainer_progress_after(s, s->real_updates);
        ev.kind = HEV_METRICS;
        ev.flag = 0;
        ev.text[0] = 0;
        host_run_post_event(r, &ev);
        s->posted++;

        if (bad) {
            if (s->bad++ == 0) s->first_bad = s->real_updates;
            if (r->max_bad_updates > 0 && s->bad >= r->max_bad_updates) return host_bad_give_up(s);
            if (r->max_bad_updates > 0) continue;   /* no checkpoint of this state */
        } else {
            s->bad = 0;
            if (host_bad_keep_good(s) != 0) return HOST_FAILED;
        }
        if (s->ckpt_due ||
            (r->checkpoint_interval > 0 && s->real_updates % (uint64_t)r->checkpoint_interval == 0))
            if (host_checkpoint_periodic(s) != 0) return HOST_FAILED;
    }
}

/* Loads the checkpoint a resumed run continues from; its periodic
 * checkpoints join the rotation (the newest checkpoint_keep of them). */
static int resume(host_trainer *s) {
    host_run *r = s->r;
    mr_error err = {0};
    if (mr_trainer_load_rank(s->t, r->resume_path, s->ranks, 0, NULL, &err) != MR_OK) {
        char msg[HOST_PATH + MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "resuming from %s failed (%s): %s", r->resume_path,
                 mr_status_name(err.status), err.msg);
        host_trainer_fail(s, msg);
        return -1;
    }
    s->real_updates = r->resume_update;
    s->updates_run = r->resume_update;   /* the run's count goes on from the checkpoint's */
    s->last_ckpt_update = r->resume_update;
    snprintf(s->last_ckpt, sizeof s->last_ckpt, "%s", r->resume_path);
    int keep = r->checkpoint_keep;
    for (int i = keep > 0 && r->resume_nkept > keep ? r->resume_nkept - keep : 0; keep > 0 && i < r->resume_nkept; i++)
        snprintf(s->kept[s->nkept++], HOST_PATH, "%s", r->resume_kept[i]);
    return 0;
}

static void thread_main(void *arg) {
    host_run *r = arg;
    host_trainer s;
    memset(&s, 0, sizeof s);
    s.r = r;
    s.last_ckpt_update = UINT64_MAX;
    s.ranks = host_ranks_size();
    s.batch = (uint64_t)r->cfg.env.num_envs * (uint64_t)r->cfg.ppo.rollout_steps * (uint64_t)s.ranks;
    s.cur = r->initial_hot;
    r->initial_hot = NULL;
    host_hot_take(&s, s.cur);
    host_finish_reason reason = HOST_FAILED;
    if (r->checkpoint_keep > 0) {
        s.kept = calloc((size_t)r->checkpoint_keep, sizeof *s.kept);
        if (!s.kept) { host_trainer_fail(&s, "out of memory for the checkpoint list"); goto out; }
    }

    mr_error err = {0};
    mr_config cfg = r->cfg;
    host_ranks_threads(&cfg);
    if (mr_trainer_create(&cfg, &s.t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "creating the trainer failed (%s): %s", mr_status_name(err.status), err.msg);
        host_trainer_fail(&s, msg);
        goto out;
    }
    mr_trainer_keep_gradients(s.t, r->keep_gradients);
    if (s.ranks > 1) {
        char msg[1024];
        s.begun = 1;
        if (host_ranks_begin(r, s.t, msg, sizeof msg) != 0) { host_trainer_fail(&s, msg); goto out; }
    }
    if (r->resume_path[0] && resume(&s) != 0) goto out;
    if (r->init_params && mr_trainer_write_params(s.t, r->init_params, r->init_n, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "starting from the given weights (policy.init) failed: %s", err.msg);
        host_trainer_fail(&s, msg);
        goto out;
    }
    char started[1024];
    snprintf(started, sizeof started, "%s%s%s", mr_trainer_describe(s.t), s.ranks > 1 ? "; " : "",
             host_ranks_describe());
    host_run_post_simple(r, HEV_STARTED, 0, 0, started);
    reason = train(&s);
    if (reason != HOST_FAILED) {
        int final_ckpt = 1;
        if (reason == HOST_STOPPED) {
            pthread_mutex_lock(&r->mb_mu);
            final_ckpt = r->mb_stop_checkpoint;
            pthread_mutex_unlock(&r->mb_mu);
        }
        if (final_ckpt && host_bad_final(&s) != 0) reason = HOST_FAILED;
    }
out:
    if (s.begun) {
        char line[256];
        host_ranks_end(line, sizeof line);
        if (line[0]) host_run_post_simple(r, HEV_NOTE, 0, s.updates_run, line);
    }
    /* Freed before FINISHED so the loop's join returns at once. */
    if (s.t) mr_trainer_free(s.t);
    host_run_post_simple(r, HEV_FINISHED, reason, s.updates_run, s.last_ckpt);
    host_hot_free(s.cur);
    free(s.kept);
}

int host_run_start(host_run *r) {
    /* Default 8 MiB stack fits the events built on it; the engine threads
     * its own work (OpenMP) from here. */
    int rc = uv_thread_create(&r->thread, thread_main, r);
    if (rc == 0) r->thread_started = 1;
    return rc;
}

void host_run_join(host_run *r) {
    if (r->thread_started && !r->thread_joined) {
        uv_thread_join(&r->thread);
        r->thread_joined = 1;
    }
}

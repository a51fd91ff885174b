/*
 * trainer_thread.c - one trainer on its own thread, talking to the loop
 * through two small structures and nothing else (run_channel.c: the events
 * ring, trainer -> loop, and the mailbox, loop -> trainer). No Lua here, by
 * design: the thread could be driven by any C program. The thread reads its
 * mailbox only between updates (boundary()), so an update always runs with
 * one consistent set of parameters.
 *
 * Progress belongs to the host here. Warm-up updates (flagged, not counted)
 * may or may not advance the engine's own counters, so the thread counts real
 * updates itself: metrics.update, agent_steps and progress are rewritten to
 * the real counts, and whenever warm-up ran or a schedule is a Lua function,
 * the thread evaluates the schedules itself at every boundary and hands the
 * engine constants (mr_trainer_set_hot), so the value used by update k is
 * exactly schedule(p) at the run's progress p after k - 1 updates, never one
 * update late (progress_after: agent-steps done over the run's agent-steps).
 *
 * Resuming (run_dir's checkpoint in resume_path): the trainer loads it right
 * after creation, before anything runs; the real count starts at the run's
 * own count it holds, and warm-up is not run again, but the schedules and
 * total are handled as the uninterrupted run handled them after its warm-up,
 * so a resumed CPU run continues bit for bit.
 *
 * Non-finite updates. The engine skips the optimizer step of an update whose
 * loss or gradient is not finite and returns MR_ERR_NUMERIC; its metrics
 * (nonfinite set) go out as usual and the run goes on. With max_bad_updates
 * > 0 the thread keeps the last good state with mr_trainer_keep (on the
 * backend, no host round trip; before the first update and after every good
 * one), writes no checkpoint
 * from a state a bad update left (periodic ones wait for a good update,
 * requested ones are refused, a final one is the last good state restored),
 * and after max_bad_updates bad updates in a row restores the last good
 * state, writes it as the final checkpoint and ends the run as failed.
 */
#include "host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ thread */

typedef struct tstate {
    host_run *r;
    mr_trainer *t;
    host_hot *cur;               /* hot parameters in force (owned) */
    uint64_t batch;              /* agent-steps per update */
    uint64_t total_updates;      /* of the real run, for progress */
    uint64_t real_updates;
    uint64_t updates_run;        /* real updates run: real_updates, unless a restore went back */
    uint64_t posted;             /* real-update metrics events posted (the hand-shake's count) */
    uint64_t warm_steps;         /* agent-steps the warm-up took */
    uint64_t engine_off_updates;   /* the engine's update count at the start of the real run */
    int off_known;
    int override;                /* the host evaluates schedules (see the top comment) */
    int stopping;
    /* periodic checkpoints kept for rotation, oldest first */
    char (*kept)[HOST_PATH];
    int nkept;
    uint64_t last_ckpt_update;
    char last_ckpt[HOST_PATH];
    int ckpt_due;                /* a periodic checkpoint postponed until the rows are written (save_periodic) */
    /* non-finite updates (top comment) */
    int bad;                     /* bad updates in a row */
    uint64_t first_bad;          /* the first of them */
    int have_good;               /* the engine keeps the last good state (mr_trainer_keep) */
    uint64_t good_update;        /* real_updates when it was kept */
    /* data-parallel (ranks.c): batch counts every rank's agent-steps */
    int ranks;
    int begun;                   /* the followers have their trainers (END owed) */
    mr_hot_params applied;       /* the set last given to the engine: what every rank's update uses */
} tstate;

/* The run's agent-steps after n real updates (host.h, steps_base). */
static uint64_t steps_after(const tstate *s, uint64_t n) {
    return (uint64_t)(s->r->steps_base + (int64_t)(n * s->batch));
}

/* The run's progress after n real updates: its agent-steps over those it
 * makes in all (total_steps rounded up to whole updates), so it goes on
 * without a jump when a resume changes the agent-steps of an update (ranks,
 * environments). Without such a change it is n / total_updates to the bit:
 * both quotients are of exact integers, rounded once. */
static double progress_after(const tstate *s, uint64_t n) {
    double p = (double)steps_after(s, n) / (double)steps_after(s, s->total_updates);
    return p > 1 ? 1 : p;
}

/* One update of every rank, with the hot set last applied; the metrics are
 * the run's (ranks.c combines them). `update`: the real update it makes
 * (0 for warm-up). */
static mr_status update(tstate *s, int warm, uint64_t upd, mr_metrics *m, mr_error *err) {
    if (s->ranks <= 1) return mr_trainer_update(s->t, m, err);
    mr_status st = MR_OK;
    if (host_ranks_update(&s->applied, warm, upd, s->t, m, &st, err->msg, sizeof err->msg) != 0) {
        err->status = MR_ERR_STATE;
        return MR_ERR_STATE;
    }
    if (st == MR_ERR_NUMERIC) err->status = st;
    return st;
}

/* mr_trainer_save, with every rank's environments and the run's agent-steps
 * when the run has ranks or its steps are not updates x batch. */
static mr_status save_file(tstate *s, const char *path, mr_error *err) {
    if (s->ranks <= 1 && s->r->steps_base == 0) return mr_trainer_save(s->t, path, err);
    void *states = NULL;
    if (host_ranks_gather_envs(s->t, &states, err->msg, sizeof err->msg) != 0) {
        err->status = MR_ERR_BACKEND;
        return MR_ERR_BACKEND;
    }
    const mr_ranks_info info = {s->ranks, 1, steps_after(s, s->real_updates)};
    mr_status st = mr_trainer_save_ranks(s->t, path, &info, states, err);
    free(states);
    return st;
}

static void fail(tstate *s, const char *msg) {
    host_run_post_simple(s->r, HEV_ERROR, 0, s->real_updates, msg);
}

static int ckpt_dir(tstate *s, char *out, size_t n) {
    int w = snprintf(out, n, "%s/checkpoints", s->r->run_dir);
    if (w < 0 || (size_t)w >= n) return -1;
    if (mkdir(out, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* Waits at most ms until the loop's files hold the rows of every update
 * posted so far (host.h, mb_written). Returns 1 when they do, else 0 with
 * *written the count they hold: a checkpoint is never written ahead of them
 * (the callers postpone, refuse, or say so). */
static int rows_written(tstate *s, int ms, uint64_t *written) {
    host_run *r = s->r;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&r->mb_mu);
    while (!r->mb_written_off && r->mb_written < s->posted)
        if (pthread_cond_timedwait(&r->mb_cv, &r->mb_mu, &until) != 0) break;
    int ok = r->mb_written_off || r->mb_written >= s->posted;
    if (written) *written = r->mb_written;
    pthread_mutex_unlock(&r->mb_mu);
    return ok;
}

/* The update whose rows are the last written, given `written` of the
 * posted rows (the posted ones are the updates up to real_updates). */
static unsigned long long last_row(const tstate *s, uint64_t written) {
    return (unsigned long long)(s->real_updates - (s->posted - written));
}

/* Saves to `path`, or to the run's next periodic name when path is "" (those
 * rotate: only the last checkpoint_keep stay). `requested`: asked for through
 * the mailbox (the event says so, for whoever waits on it). Returns 0 or -1
 * (error event posted). */
static int save(tstate *s, const char *path, int requested) {
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
            fail(s, msg);
            return -1;
        }
        int w = snprintf(auto_path, sizeof auto_path, "%s/update_%07llu.mrck", dir,
                         (unsigned long long)s->real_updates);
        if (w < 0 || (size_t)w >= sizeof auto_path) {
            fail(s, "checkpoint path too long: choose a shorter run directory");
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
        else fail(s, msg);
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

static void set_constant(mr_schedule *sc, double v) {
    sc->kind = MR_SCHED_CONSTANT;
    sc->start = sc->end = v;
}

/* Sets the hot parameters for the update about to run (the
 * (real_updates+1)-th). On refusal fills msg and returns -1. */
static int try_apply_hot(tstate *s, char *msg, size_t n) {
    mr_hot_params h = s->cur->hot;
    if (s->override) {
        double p = progress_after(s, s->real_updates);
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

static int apply_hot(tstate *s) {
    char msg[MR_ERROR_LEN + 64];
    if (try_apply_hot(s, msg, sizeof msg) == 0) return 0;
    fail(s, msg);
    return -1;
}

/* The last good state, kept by the engine after a good update (or before
 * the first). Only with the non-finite policy on. */
static int keep_good(tstate *s) {
    if (s->r->max_bad_updates <= 0) return 0;
    mr_error err = {0};
    if (host_ranks_call(HOST_OP_KEEP, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "keeping the last good state failed: %s", err.msg);
        fail(s, msg);
        return -1;
    }
    s->have_good = 1;
    s->good_update = s->real_updates;
    return 0;
}

/* Back to the last good state: weights, optimizer, PopArt and progress (the
 * environments keep theirs). */
static int restore_good(tstate *s) {
    mr_error err = {0};
    if (!s->have_good || host_ranks_call(HOST_OP_RESTORE_KEPT, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 128];
        snprintf(msg, sizeof msg, "restoring the last good state (after update %llu) failed: %s",
                 (unsigned long long)s->good_update, s->have_good ? err.msg : "none was kept");
        fail(s, msg);
        return -1;
    }
    s->real_updates = s->good_update;
    s->bad = 0;
    return 0;
}

/* The final checkpoint: of the last good state when bad updates came last;
 * none when the newest periodic one already holds this state. */
static int save_final(tstate *s) {
    if (s->bad > 0 && s->r->max_bad_updates > 0 && restore_good(s) != 0) return -1;
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
 * once. 0, or -1 when writing failed (error event posted). */
static int save_periodic(tstate *s) {
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

/* max_bad_updates bad updates in a row: the run ends with the last good state. */
static host_finish_reason give_up(tstate *s) {
    char which[96];
    if (s->bad > 1)
        snprintf(which, sizeof which, "updates %llu to %llu", (unsigned long long)s->first_bad,
                 (unsigned long long)s->real_updates);
    else
        snprintf(which, sizeof which, "update %llu", (unsigned long long)s->real_updates);
    int n = s->bad;
    if (save_final(s) != 0) return HOST_FAILED;
    char msg[HOST_PATH + 512];
    snprintf(msg, sizeof msg, "%s had a non-finite loss or gradient (%d in a row, faults.max_bad_updates = %d; "
             "their optimizer steps were skipped): stopped with the last good state, after update %llu, as the "
             "final checkpoint %s (try a lower ppo.lr or ppo.max_grad_norm)",
             which, n, s->r->max_bad_updates, (unsigned long long)s->real_updates,
             s->last_ckpt[0] ? s->last_ckpt : "(none)");
    fail(s, msg);
    return HOST_FAILED;
}

static void take_hot(tstate *s, host_hot *h) {
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
static void post_hot(tstate *s, int refused, uint64_t seq, const char *msg) {
    host_event ev;
    memset(&ev, 0, offsetof(host_event, text));
    ev.kind = HEV_HOT;
    ev.flag = refused;
    ev.update = s->real_updates;
    ev.seq = seq;
    snprintf(ev.text, sizeof ev.text, "%s", msg);
    host_run_post_event(s->r, &ev);
}

static void swap_hot(tstate *s, host_hot *h) {
    host_hot *prev = s->cur;
    int prev_override = s->override;
    uint64_t seq = h->seq;
    take_hot(s, h);
    char msg[MR_ERROR_LEN + 64];
    if (try_apply_hot(s, msg, sizeof msg) != 0) {
        host_hot_free(h);
        s->override = prev_override;
        take_hot(s, prev);
        post_hot(s, 1, seq, msg);
        return;
    }
    host_hot_free(prev);
    post_hot(s, 0, seq, "");
}

/* Takes the learned state of the checkpoint at path (host.h, HEV_ADOPTED):
 * in force from the next update; the state kept for non-finite updates is
 * this one from now on. */
static void adopt(tstate *s, const char *path) {
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
    if (keep_good(s) != 0) return;
    host_run_post_simple(s->r, HEV_ADOPTED, 0, s->real_updates, path);
}

/* Reads the mailbox at an update boundary: applies a new hot set, writes
 * requested checkpoints (and adopts requested ones), and waits while paused. Returns 0 to go on, 1 to
 * stop. */
static int boundary(tstate *s) {
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

        if (h) swap_hot(s, h);
        for (host_ckpt_req *c = reqs, *n; c; c = n) {
            n = c->next;
            uint64_t written;
            if (c->adopt) {
                adopt(s, c->path);
            } else if (!rows_written(s, HOST_REQUESTED_WAIT_MS, &written)) {
                char msg[256];
                snprintf(msg, sizeof msg, "checkpoint refused: the event loop has written the metrics up to "
                         "update %llu only, after %d s of waiting (a checkpoint is never ahead of "
                         "metrics.jsonl); ask again later", last_row(s, written), HOST_REQUESTED_WAIT_MS / 1000);
                host_run_post_simple(r, HEV_CHECKPOINT_FAILED, 0, s->real_updates, msg);
            } else {
                save(s, c->path, 1);
            }
            free(c);
        }
        if (stop) return 1;
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

static int stop_requested(host_run *r) {
    pthread_mutex_lock(&r->mb_mu);
    int stop = r->mb_stop;
    pthread_mutex_unlock(&r->mb_mu);
    return stop;
}

/* Warm-up: compiles/benchmarks/captures whatever the backend does on its
 * first updates. Only a stop is honoured meanwhile; other mail waits. */
static int warmup(tstate *s) {
    host_run *r = s->r;
    mr_error err = {0};
    if (r->warmup_updates <= 0) return 0;
    if (r->resume_path[0]) {
        /* Not again; but as after the first run's warm-up (top comment). */
        s->override = 1;
        s->warm_steps = (uint64_t)r->warmup_updates * s->batch;
        return 0;
    }
    if (r->warmup_restore && host_ranks_call(HOST_OP_SNAPSHOT, s->t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "warm-up snapshot failed: %s", err.msg);
        fail(s, msg);
        return -1;
    }
    if (apply_hot(s) != 0) return -1;
    int done = 0;
    for (; done < r->warmup_updates && !stop_requested(r); done++) {
        host_event ev;
        memset(&ev, 0, offsetof(host_event, text));
        if (update(s, 1, 0, &ev.metrics, &err) != MR_OK) {
            char msg[MR_ERROR_LEN + 64];
            snprintf(msg, sizeof msg, "warm-up update %d failed: %s", done + 1, err.msg);
            fail(s, msg);
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
        fail(s, msg);
        return -1;
    }
    /* From here on the host owns progress and schedules (top comment). */
    s->override = 1;
    host_run_post_simple(r, HEV_WARMUP_DONE, r->warmup_restore, (uint64_t)done, "");
    return 0;
}

static host_finish_reason train(tstate *s) {
    host_run *r = s->r;
    mr_error err = {0};
    if (warmup(s) != 0) return HOST_FAILED;
    if (apply_hot(s) != 0) return HOST_FAILED;
    if (keep_good(s) != 0) return HOST_FAILED;
    for (;;) {
        int b = boundary(s);
        uint64_t real_steps = steps_after(s, s->real_updates);
        /* complete (total_steps as it stands after the boundary's hot swap):
         * done, even when a stop arrived in the same round - nothing is left
         * for the stop to cut short, and a sweep records the trial "done" */
        if (real_steps >= s->cur->hot.total_steps) return HOST_DONE;
        if (b > 0) return HOST_STOPPED;
        if (s->override && apply_hot(s) != 0) return HOST_FAILED;

        if (r->inject_nan_at && s->real_updates + 1 == r->inject_nan_at &&
            host_ranks_call(HOST_OP_POISON, s->t, &err) != MR_OK) {
            char msg[MR_ERROR_LEN + 64];
            snprintf(msg, sizeof msg, "debug.inject_nan_at_update failed: %s", err.msg);
            fail(s, msg);
            return HOST_FAILED;
        }
        host_event ev;
        memset(&ev, 0, offsetof(host_event, text));
        mr_status st = update(s, 0, s->real_updates + 1, &ev.metrics, &err);
        int bad = st == MR_ERR_NUMERIC;   /* the update ran; its optimizer steps were skipped */
        if (st != MR_OK && !bad) {
            char msg[MR_ERROR_LEN + 64];
            snprintf(msg, sizeof msg, "update %llu failed (%s): %s",
                     (unsigned long long)s->real_updates + 1, mr_status_name(err.status), err.msg);
            fail(s, msg);
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
        ev.metrics.agent_steps = steps_after(s, s->real_updates);
        ev.metrics.progress = progress_after(s, s->real_updates);
        ev.kind = HEV_METRICS;
        ev.flag = 0;
        ev.text[0] = 0;
        host_run_post_event(r, &ev);
        s->posted++;

        if (bad) {
            if (s->bad++ == 0) s->first_bad = s->real_updates;
            if (r->max_bad_updates > 0 && s->bad >= r->max_bad_updates) return give_up(s);
            if (r->max_bad_updates > 0) continue;   /* no checkpoint of this state */
        } else {
            s->bad = 0;
            if (keep_good(s) != 0) return HOST_FAILED;
        }
        if (s->ckpt_due ||
            (r->checkpoint_interval > 0 && s->real_updates % (uint64_t)r->checkpoint_interval == 0))
            if (save_periodic(s) != 0) return HOST_FAILED;
    }
}

/* Loads the checkpoint a resumed run continues from; its periodic
 * checkpoints join the rotation (the newest checkpoint_keep of them). */
static int resume(tstate *s) {
    host_run *r = s->r;
    mr_error err = {0};
    if (mr_trainer_load_rank(s->t, r->resume_path, s->ranks, 0, NULL, &err) != MR_OK) {
        char msg[HOST_PATH + MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "resuming from %s failed (%s): %s", r->resume_path,
                 mr_status_name(err.status), err.msg);
        fail(s, msg);
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
    tstate s;
    memset(&s, 0, sizeof s);
    s.r = r;
    s.last_ckpt_update = UINT64_MAX;
    s.ranks = host_ranks_size();
    s.batch = (uint64_t)r->cfg.env.num_envs * (uint64_t)r->cfg.ppo.rollout_steps * (uint64_t)s.ranks;
    s.cur = r->initial_hot;
    r->initial_hot = NULL;
    take_hot(&s, s.cur);
    host_finish_reason reason = HOST_FAILED;
    if (r->checkpoint_keep > 0) {
        s.kept = calloc((size_t)r->checkpoint_keep, sizeof *s.kept);
        if (!s.kept) { fail(&s, "out of memory for the checkpoint list"); goto out; }
    }

    mr_error err = {0};
    mr_config cfg = r->cfg;
    host_ranks_threads(&cfg);
    if (mr_trainer_create(&cfg, &s.t, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "creating the trainer failed (%s): %s", mr_status_name(err.status), err.msg);
        fail(&s, msg);
        goto out;
    }
    mr_trainer_keep_gradients(s.t, r->keep_gradients);
    if (s.ranks > 1) {
        char msg[1024];
        s.begun = 1;
        if (host_ranks_begin(r, s.t, msg, sizeof msg) != 0) { fail(&s, msg); goto out; }
    }
    if (r->resume_path[0] && resume(&s) != 0) goto out;
    if (r->init_params && mr_trainer_write_params(s.t, r->init_params, r->init_n, &err) != MR_OK) {
        char msg[MR_ERROR_LEN + 64];
        snprintf(msg, sizeof msg, "starting from the given weights (policy.init) failed: %s", err.msg);
        fail(&s, msg);
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
        if (final_ckpt && save_final(&s) != 0) reason = HOST_FAILED;
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

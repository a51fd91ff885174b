/*
 * trainer_thread.h - what the trainer thread's files share, and nothing the
 * Lua side sees (that is host.h's host_run). One trainer runs on its own
 * thread; its state is one host_trainer, and each concept is a file, each
 * calling only those below it:
 *
 *   trainer_thread.c   the thread and its loop: creation, resume, the update
 *                      loop, the mailbox at each boundary, adoption, the end
 *   warmup.c           the warm-up updates before the real run
 *   bad_updates.c      non-finite updates: the last good state kept and
 *                      restored, the run given up (faults.max_bad_updates)
 *   run_checkpoints.c  the run's checkpoints: periodic ones and their
 *                      rotation, requested ones, the final one, never
 *                      ahead of the metrics rows
 *   hot_schedules.c    the hot set in force and the schedules the host
 *                      evaluates (progress, warm-up's steps)
 *
 *   trainer_thread.c -> warmup.c -> hot_schedules.c
 *   trainer_thread.c -> bad_updates.c -> run_checkpoints.c
 * (and all of them -> run_channel.c, ranks.c). No Lua here, by design: the
 * thread could be driven by any C program.
 */
#ifndef MOONRL_TRAINER_THREAD_H
#define MOONRL_TRAINER_THREAD_H

#include "host.h"

#include <stdio.h>

typedef struct host_trainer {
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
    int override;                /* the host evaluates schedules (hot_schedules.c) */
    int stopping;
    /* periodic checkpoints kept for rotation, oldest first (run_checkpoints.c) */
    char (*kept)[HOST_PATH];
    int nkept;
    uint64_t last_ckpt_update;
    char last_ckpt[HOST_PATH];
    int ckpt_due;                /* a periodic checkpoint postponed until the rows are written */
    /* non-finite updates (bad_updates.c) */
    int bad;                     /* bad updates in a row */
    uint64_t first_bad;          /* the first of them */
    int have_good;               /* the engine keeps the last good state (mr_trainer_keep) */
    uint64_t good_update;        /* real_updates when it was kept */
    /* data-parallel (ranks.c): batch counts every rank's agent-steps */
    int ranks;
    int begun;                   /* the followers have their trainers (END owed) */
    mr_hot_params applied;       /* the set last given to the engine: what every rank's update uses */
} host_trainer;

/* The run's agent-steps after n real updates (host.h, steps_base). */
static inline uint64_t host_trainer_steps_after(const host_trainer *s, uint64_t n) {
    return (uint64_t)(s->r->steps_base + (int64_t)(n * s->batch));
}

/* The run's progress after n real updates: its agent-steps over those it
 * makes in all (total_steps rounded up to whole updates), so it goes on
 * without a jump when a resume changes the agent-steps of an update (ranks,
 * environments). Without such a change it is n / total_updates to the bit:
 * both quotients are of exact integers, rounded once. */
static inline double host_trainer_progress_after(const host_trainer *s, uint64_t n) {
    double p = (double)host_trainer_steps_after(s, n) / (double)host_trainer_steps_after(s, s->total_updates);
    return p > 1 ? 1 : p;
}

/* The run fails with msg (an HEV_ERROR event; the thread then ends). */
static inline void host_trainer_fail(host_trainer *s, const char *msg) {
    host_run_post_simple(s->r, HEV_ERROR, 0, s->real_updates, msg);
}

/* One update of every rank, with the hot set last applied; the metrics are
 * the run's (ranks.c combines them). `upd`: the real update it makes (0 for
 * warm-up). */
static inline mr_status host_trainer_update(host_trainer *s, int warm, uint64_t upd, mr_metrics *m, mr_error *err) {
    if (s->ranks <= 1) return mr_trainer_update(s->t, m, err);
    mr_status st = MR_OK;
    if (host_ranks_update(&s->applied, warm, upd, s->t, m, &st, err->msg, sizeof err->msg) != 0) {
        err->status = MR_ERR_STATE;
        return MR_ERR_STATE;
    }
    if (st == MR_ERR_NUMERIC) err->status = st;
    return st;
}

/* hot_schedules.c. take: h becomes the set in force (owned), its run's
 * updates counted; apply: gives the engine the set for the next update,
 * the host's schedules evaluated when it owns them (0, or -1 with an error
 * event posted); swap: a set from the mailbox, taken or refused (HEV_HOT
 * says which; the run goes on either way). */
void host_hot_take(host_trainer *s, host_hot *h);
int host_hot_apply(host_trainer *s);
void host_hot_swap(host_trainer *s, host_hot *h);

/* warmup.c: the warm-up updates, or after a resume their bookkeeping alone.
 * 0, or -1 with an error event posted. */
int host_warmup(host_trainer *s);

/* run_checkpoints.c. requested: one asked for through the mailbox (path ""
 * = the run's next periodic name), refused while the rows of the updates
 * before it are not written or the state is a bad update's
 * (HEV_CHECKPOINT_FAILED says why; the run goes on). periodic: the next
 * one, once those rows are written (else postponed); final: the last one,
 * unless the newest periodic one holds this state. Both return 0, or -1
 * when the run must end (an error event posted). */
void host_checkpoint_requested(host_trainer *s, const char *path);
int host_checkpoint_periodic(host_trainer *s);
int host_checkpoint_final(host_trainer *s);

/* bad_updates.c. keep_good: the engine keeps the state after a good update
 * (and before the first; nothing when faults.max_bad_updates = 0); final:
 * the final checkpoint, of the last good state when bad updates came last;
 * give_up: max_bad_updates bad updates in a row end the run there. */
int host_bad_keep_good(host_trainer *s);
int host_bad_final(host_trainer *s);
host_finish_reason host_bad_give_up(host_trainer *s);

#endif

/*
 * run_channel.c - the two small structures between a run's loop and its
 * trainer thread (trainer_thread.c), and nothing else:
 *
 *   events   trainer -> loop: a bounded ring (HOST_QUEUE_CAP). Each push is
 *            followed by uv_async_send; the loop drains the ring in its async
 *            callback. A full ring makes the trainer wait (back-pressure):
 *            metrics are never dropped, and a stalled loop stalls training
 *            instead of growing memory.
 *   mailbox  loop -> trainer: flags, requested checkpoints and adoptions in
 *            order, and a latest-wins hot-parameter set, read by the thread
 *            only between updates. With mb_sync (an on_update hook exists)
 *            the boundary first waits until the loop has handled the metrics
 *            of the update just posted (mb_acked), so what its hooks posted
 *            applies to the next update; otherwise the trainer runs ahead of
 *            the loop and mail applies where it lands. The thread asks
 *            whether a stop is asked for (during warm-up, when no other
 *            mail is read) and waits for the loop's files to hold the rows
 *            of the updates it posted (mb_written: before a checkpoint).
 */
#include "host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

host_hot *host_hot_new(void) { return calloc(1, sizeof(host_hot)); }

void host_hot_free(host_hot *h) {
    if (!h) return;
    for (int i = 0; i < HOST_SCHED_N; i++) free(h->table[i]);
    free(h);
}

host_run *host_run_new(void) {
    host_run *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->q = calloc(HOST_QUEUE_CAP, sizeof *r->q);
    if (!r->q) { free(r); return NULL; }
    pthread_mutex_init(&r->q_mu, NULL);
    pthread_cond_init(&r->q_not_full, NULL);
    pthread_mutex_init(&r->mb_mu, NULL);
    pthread_cond_init(&r->mb_cv, NULL);
    r->mb_stop_checkpoint = 1;
    return r;
}

void host_run_free(host_run *r) {
    if (!r) return;
    host_hot_free(r->initial_hot);
    host_hot_free(r->mb_hot);
    free(r->resume_kept);
    free(r->init_params);
    for (host_ckpt_req *c = r->mb_ckpt_head, *n; c; c = n) { n = c->next; free(c); }
    pthread_mutex_destroy(&r->q_mu);
    pthread_cond_destroy(&r->q_not_full);
    pthread_mutex_destroy(&r->mb_mu);
    pthread_cond_destroy(&r->mb_cv);
    free(r->q);
    free(r);
}

/* ------------------------------------------------------------------ events */

void host_run_post_event(host_run *r, const host_event *ev) {
    pthread_mutex_lock(&r->q_mu);
    while (r->q_count == HOST_QUEUE_CAP && !r->discard)
        pthread_cond_wait(&r->q_not_full, &r->q_mu);
    if (!r->discard) {
        r->q[(r->q_head + r->q_count) % HOST_QUEUE_CAP] = *ev;
        r->q_count++;
    }
    pthread_mutex_unlock(&r->q_mu);
    /* Outside the lock; the loop coalesces sends and drains everything. */
    uv_async_send(r->async);
}

void host_run_post_simple(host_run *r, int kind, int flag, uint64_t update, const char *text) {
    /* host_event is large; a static per-thread buffer would do, but the
     * stack (8 MiB default) holds it easily and keeps this reentrant. */
    host_event ev;
    memset(&ev, 0, offsetof(host_event, text));
    ev.kind = kind;
    ev.flag = flag;
    ev.update = update;
    snprintf(ev.text, sizeof ev.text, "%s", text ? text : "");
    host_run_post_event(r, &ev);
}

int host_run_pop(host_run *r, host_event *out) {
    pthread_mutex_lock(&r->q_mu);
    int got = r->q_count > 0;
    if (got) {
        *out = r->q[r->q_head];
        r->q_head = (r->q_head + 1) % HOST_QUEUE_CAP;
        r->q_count--;
        pthread_cond_signal(&r->q_not_full);
    }
    pthread_mutex_unlock(&r->q_mu);
    return got;
}

void host_run_discard(host_run *r) {
    pthread_mutex_lock(&r->q_mu);
    r->discard = 1;
    r->q_count = 0;
    pthread_cond_broadcast(&r->q_not_full);
    pthread_mutex_unlock(&r->q_mu);
    /* dropped events are never acknowledged: no hand-shake from here on */
    host_run_post_sync(r, 0);
    pthread_mutex_lock(&r->mb_mu);
    r->mb_written_off = 1;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

/* ----------------------------------------------------------------- mailbox */

void host_run_post_hot(host_run *r, host_hot *h) {
    pthread_mutex_lock(&r->mb_mu);
    host_hot_free(r->mb_hot);
    r->mb_hot = h;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

void host_run_post_pause(host_run *r, int paused) {
    pthread_mutex_lock(&r->mb_mu);
    r->mb_pause = paused;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

void host_run_post_pause_at(host_run *r, uint64_t steps) {
    pthread_mutex_lock(&r->mb_mu);
    r->mb_pause_at = steps;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

static int post_request(host_run *r, const char *path, int adopt) {
    size_t n = strlen(path);
    host_ckpt_req *c = malloc(sizeof *c + n + 1);
    if (!c) return -1;
    c->next = NULL;
    c->adopt = adopt;
    memcpy(c->path, path, n + 1);
    pthread_mutex_lock(&r->mb_mu);
    if (r->mb_ckpt_tail) r->mb_ckpt_tail->next = c; else r->mb_ckpt_head = c;
    r->mb_ckpt_tail = c;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
    return 0;
}

int host_run_post_checkpoint(host_run *r, const char *path) { return post_request(r, path, 0); }
int host_run_post_adopt(host_run *r, const char *path) { return post_request(r, path, 1); }

void host_run_post_sync(host_run *r, int on) {
    pthread_mutex_lock(&r->mb_mu);
    r->mb_sync = on != 0;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

void host_run_post_ack(host_run *r) {
    pthread_mutex_lock(&r->mb_mu);
    r->mb_acked++;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

void host_run_post_written(host_run *r) {
    pthread_mutex_lock(&r->mb_mu);
    r->mb_written++;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

void host_run_post_stop(host_run *r, int checkpoint) {
    pthread_mutex_lock(&r->mb_mu);
    if (!r->mb_stop) r->mb_stop_checkpoint = checkpoint;
    r->mb_stop = 1;
    pthread_cond_signal(&r->mb_cv);
    pthread_mutex_unlock(&r->mb_mu);
}

/* ------------------------------------------- mailbox, read by the thread */

int host_run_stop_requested(host_run *r) {
    pthread_mutex_lock(&r->mb_mu);
    int stop = r->mb_stop;
    pthread_mutex_unlock(&r->mb_mu);
    return stop;
}

int host_run_wait_written(host_run *r, uint64_t posted, int ms, uint64_t *written) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&r->mb_mu);
    while (!r->mb_written_off && r->mb_written < posted)
        if (pthread_cond_timedwait(&r->mb_cv, &r->mb_mu, &until) != 0) break;
    int ok = r->mb_written_off || r->mb_written >= posted;
    if (written) *written = r->mb_written;
    pthread_mutex_unlock(&r->mb_mu);
    return ok;
}

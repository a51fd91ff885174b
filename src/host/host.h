/*
 * host.h - what the files of the moonrl executable share.
 *
 * The host is three layers: main.c owns the process (Lua state, libuv loop,
 * exit code); trainer_thread.c runs one trainer per thread and never touches
 * Lua; lua_core.c and lua_run.c are the `moonrl.core` Lua module that starts
 * those threads and turns their events into Lua calls on the loop thread.
 */
#ifndef MOONRL_HOST_H
#define MOONRL_HOST_H

#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include <lua.h>

#include "moonrl.h"

#define HOST_QUEUE_CAP 64      /* events in flight per run; a full queue makes the trainer wait */
#define HOST_PATH 4096

/* ------------------------------------------------------------ trainer thread */

typedef enum host_event_kind {
    HEV_STARTED = 0,     /* text: mr_trainer_describe() */
    HEV_METRICS,         /* metrics; flag 1 = warm-up update (not progress) */
    HEV_WARMUP_DONE,     /* update: warm-up updates run; flag 1 = weights restored */
    HEV_CHECKPOINT,      /* text: path written; update: at which update; flag 1 = asked for (mailbox) */
    HEV_HOT,             /* hot parameters apply from update `update` + 1 on; flag 1 = the engine
                            refused them (text says why) and the previous set stays */
    HEV_CHECKPOINT_FAILED, /* text: why; a requested checkpoint only (the run goes on) */
    HEV_PAUSED,          /* update: updates done */
    HEV_RESUMED,
    HEV_ERROR,           /* text: the engine's (or the host's) message; the run then finishes */
    HEV_FINISHED         /* flag: host_finish_reason; update: updates done; text: last checkpoint or "" */
} host_event_kind;

typedef enum host_finish_reason { HOST_DONE = 0, HOST_STOPPED = 1, HOST_FAILED = 2 } host_finish_reason;

typedef struct host_event {
    int kind;
    int flag;
    uint64_t update;
    mr_metrics metrics;
    char text[HOST_PATH];
} host_event;

/* Hot parameters plus, per scheduled key, the value for every update when the
 * schedule is a Lua function (computed on the loop before sending). */
enum { HOST_SCHED_LR = 0, HOST_SCHED_CLIP = 1, HOST_SCHED_ENT = 2, HOST_SCHED_N = 3 };
typedef struct host_hot {
    mr_hot_params hot;
    double *table[HOST_SCHED_N];   /* NULL: hot's own mr_schedule applies */
    size_t len[HOST_SCHED_N];
} host_hot;

typedef struct host_ckpt_req {
    struct host_ckpt_req *next;
    char path[];                   /* "" = the run's next checkpoint name */
} host_ckpt_req;

typedef struct host_run {
    /* Fixed before the thread starts. */
    mr_config cfg;
    host_hot *initial_hot;         /* owned by the thread once started */
    int warmup_updates, warmup_restore;
    int checkpoint_interval;       /* updates between checkpoints, 0 = only at the end */
    int checkpoint_keep;           /* periodic checkpoints kept, 0 = all */
    char run_dir[HOST_PATH];       /* checkpoints go to run_dir/checkpoints/ */

    /* Events, trainer -> loop. */
    pthread_mutex_t q_mu;
    pthread_cond_t q_not_full;
    host_event *q;
    int q_head, q_count;
    int discard;                   /* shutting down: drop events instead of waiting */
    uv_async_t *async;

    /* Mailbox, loop -> trainer, read between updates. */
    pthread_mutex_t mb_mu;
    pthread_cond_t mb_cv;
    int mb_pause, mb_stop, mb_stop_checkpoint;
    host_hot *mb_hot;              /* the latest set wins: each carries every hot value */
    host_ckpt_req *mb_ckpt_head, *mb_ckpt_tail;

    uv_thread_t thread;
    int thread_started, thread_joined;
} host_run;

host_run *host_run_new(void);
void host_run_free(host_run *r);             /* after host_run_join */
int host_run_start(host_run *r);             /* 0 or a libuv error code */
void host_run_join(host_run *r);
/* Loop side. */
int host_run_pop(host_run *r, host_event *out);   /* 1 when an event was taken */
void host_run_discard(host_run *r);
void host_run_post_hot(host_run *r, host_hot *h); /* takes ownership */
void host_run_post_pause(host_run *r, int paused);
int host_run_post_checkpoint(host_run *r, const char *path);
void host_run_post_stop(host_run *r, int checkpoint);

host_hot *host_hot_new(void);
void host_hot_free(host_hot *h);
uint64_t host_total_updates(const mr_config *cfg, uint64_t total_steps);

/* ---------------------------------------------------------------- Lua side */

/* luv_CFpcall-compatible protected call: errors are printed with a traceback
 * and never end the process. Returns nresults (>= 0) or a negative status. */
int host_pcall(lua_State *L, int nargs, int nresults, int flags);
/* Prints "moonrl: <what>: <message + traceback>" to stderr. */
void host_report(const char *what, const char *msg);

int luaopen_moonrl_core(lua_State *L);
void host_core_set_home(const char *home);
int host_core_exit_code(void);
/* Runs still alive when the loop is left (main script failed, loop stopped):
 * asks each to stop, drops its events and waits for its thread. */
void host_runs_shutdown(void);

/* lua_run.c */
void host_run_open(lua_State *L);          /* adds start/evaluate to the table on top */
extern lua_State *host_main_L;
extern uv_loop_t *host_loop;

#endif

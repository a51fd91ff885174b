/*
 * signal_watchdog.c - a stop signal is answered even when the event loop is
 * held: `core.signal_watchdog{signals = {n, ...}, ms = 2000}` and
 * `core.signal_seen()`.
 *
 * moonrl's signals are handled on the libuv loop (lua/moonrl/runtime/
 * signals.lua): libuv's own handler only writes to a pipe the loop reads. A
 * hook or a script that does not return (a `while true do end` in a config's
 * hook, a blocking call in a timer) holds the loop, and SIGTERM / SIGINT
 * would then wait for it forever; only SIGKILL would end the process.
 *
 * Here, for each stop signal, a handler of our own is put in front of
 * libuv's (sigaction after luv's signal handles started; it only records the
 * signal, async-signal-safe, then calls libuv's). A thread waits for such a
 * record; when the loop has not said it saw the signal (signals.lua calls
 * core.signal_seen() first thing) within `ms`, the thread writes why to
 * stderr and ends the process with 128 + the signal's number, as a second
 * stop signal does (core.exit_now): checkpoints are written atomically, so
 * each run's newest complete checkpoint is whole, and no checkpoint is ahead
 * of its metrics (trainer_thread.c), so nothing is silently lost: the
 * updates since the newest checkpoint are the ones to train again.
 *
 * Armed once per process (again: nothing); without pthreads or sigaction it
 * is simply not armed.
 */
#include "host.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <lauxlib.h>

#define WATCH_MAX_SIGNALS 8

static struct sigaction prev_action[NSIG];
static int wake_pipe[2] = {-1, -1};
static atomic_uint received;   /* stop signals received (handler) */
static atomic_uint seen;       /* ... and seen by the loop (core.signal_seen) */
static atomic_int armed;
static int watch_ms = 2000;

static void on_signal(int sig, siginfo_t *info, void *ctx) {
    const int saved = errno;
    atomic_fetch_add(&received, 1);
    unsigned char b = (unsigned char)sig;
    if (wake_pipe[1] >= 0) (void)!write(wake_pipe[1], &b, 1);
    errno = saved;
    const struct sigaction *p = &prev_action[sig];
    if (p->sa_flags & SA_SIGINFO) {
        if (p->sa_sigaction) p->sa_sigaction(sig, info, ctx);
    } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN && p->sa_handler) {
        p->sa_handler(sig);
    }
}

static void say(const char *s) { (void)!write(2, s, strlen(s)); }

static void *watch(void *arg) {
    (void)arg;
    for (;;) {
        unsigned char b;
        const ssize_t r = read(wake_pipe[0], &b, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r != 1) return NULL;
        const unsigned want = atomic_load(&received);
        for (int waited = 0; waited < watch_ms && atomic_load(&seen) < want; waited += 20) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (atomic_load(&seen) >= want) continue;
        const char *name = b == SIGINT ? "SIGINT" : b == SIGTERM ? "SIGTERM" : b == SIGQUIT ? "SIGQUIT" : "a stop signal";
        char msg[512];
        snprintf(msg, sizeof msg,
                 "\nmoonrl: %s: the event loop has not answered for %.1f s (a hook, a timer or the script "
                 "itself is still running and has not returned): exiting now without a final checkpoint "
                 "(exit %d); each run's newest checkpoint in RUN_DIR/checkpoints is whole and none is ahead of "
                 "its metrics: `moonrl train --resume RUN_DIR` goes on from it\n",
                 name, watch_ms / 1000.0, 128 + b);
        say(msg);
        _exit(128 + b);
    }
}

/* core.signal_watchdog{signals = {n, ...}, ms = N} -> true | false (not armed) */
static int core_signal_watchdog(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    if (atomic_load(&armed)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_getfield(L, 1, "ms");
    if (lua_isnumber(L, -1)) {
        const lua_Number ms = lua_tonumber(L, -1);
        luaL_argcheck(L, ms >= 100 && ms <= 600000, 1, "ms: accepted 100 .. 600000");
        watch_ms = (int)ms;
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "signals");
    luaL_argcheck(L, lua_istable(L, -1), 1, "signals: a list of signal numbers");
    int sigs[WATCH_MAX_SIGNALS], n = 0;
    for (int i = 1; n < WATCH_MAX_SIGNALS; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_isnil(L, -1)) { lua_pop(L, 1); break; }
        const int s = (int)luaL_checkinteger(L, -1);
        luaL_argcheck(L, s > 0 && s < NSIG, 1, "signals: not a signal number");
        sigs[n++] = s;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (pipe(wake_pipe) != 0) {
        lua_pushboolean(L, 0);
        return 1;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the thread takes no signal: they go to the loop's thread or the trainers */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    const int rc = pthread_create(&t, &attr, watch, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
        wake_pipe[0] = wake_pipe[1] = -1;
        lua_pushboolean(L, 0);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
        sigfillset(&sa.sa_mask);
        sigaction(sigs[i], &sa, &prev_action[sigs[i]]);   /* libuv's handler is kept in prev_action */
    }
    atomic_store(&armed, 1);
    lua_pushboolean(L, 1);
    return 1;
}

/* core.signal_seen(): the loop has seen a stop signal (signals.lua) */
static int core_signal_seen(lua_State *L) {
    (void)L;
    atomic_store(&seen, atomic_load(&received));
    return 0;
}

void host_signal_watchdog_open(lua_State *L) {
    lua_pushcfunction(L, core_signal_watchdog);
    lua_setfield(L, -2, "signal_watchdog");
    lua_pushcfunction(L, core_signal_seen);
    lua_setfield(L, -2, "signal_seen");
}

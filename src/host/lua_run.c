/*
 * lua_run.c - Lua's handle on a training run.
 *
 *   core.start(cfg_bytes, opts, handler) -> run
 *       cfg_bytes  the bytes of an mr_config (engine.lua builds it with FFI)
 *       opts       run_dir, hot (bytes of mr_hot_params), schedules
 *                  ({["ppo.lr"]=, ... arrays of per-update values}, keyed
 *                  by the engine's hot schedules: hot_keys.h),
 *                  warmup_updates, warmup_restore, checkpoint_interval,
 *                  checkpoint_keep, keep_gradients (checkpoints also hold
 *                  the last optimizer step's gradient); resuming: resume_checkpoint (loaded
 *                  before the first update), resume_update (the run's
 *                  updates it holds), resume_kept (the run's periodic
 *                  checkpoints up to it, oldest first; steps_base:
 *                  host.h's); init_params (the
 *                  float32 bytes of weights a new run starts from:
 *                  policy.init); max_bad_updates
 *                  (non-finite updates in a row that stop the run, 0 =
 *                  never), inject_nan_at_update
 *                  (a test aid: mr_trainer_debug_poison before that update)
 *       handler    function(kind, ...) called on the loop thread per event:
 *                    "started", describe
 *                    "metrics", metrics_bytes, is_warmup
 *                    "warmup_done", updates, restored
 *                    "checkpoint", path, update, requested
 *                    "checkpoint_failed", message   (a requested one; the run goes on)
 *                    "hot", from_update, refusal_or_nil, seq (the set_hot it answers)
 *                    "paused", update / "resumed", update
 *                    "error", message
 *                    "note", line   (for the run's log)
 *                    "adopted", update, path_or_nil, refusal_or_nil   (run:adopt)
 *                    "finished", reason ("done"|"stopped"|"error"), updates, last_checkpoint_or_nil
 *   run:set_hot(hot_bytes[, schedules]) -> seq (1, 2, ...: each "hot" event names
 *       the one it applied; the mailbox keeps only the latest)
 *   run:pause()   run:resume()
 *   run:pause_at(steps)  pause at the first update boundary where the run's
 *       agent-steps reach steps (host.h, mb_pause_at; 0: no mark; opts.pause_at
 *       at the start); the "paused" event follows as for run:pause()
 *   run:sync(on)  the update hand-shake (host.h, mb_sync; opts.sync_updates
 *       at the start): update k+1 starts after the handler ran for update k
 *   run:checkpoint([path])   run:stop([final_checkpoint=true])   run:alive()
 *   run:adopt(path)  the learned state of that checkpoint from the next update
 *       (mr_trainer_load_learned; population-based training's exploit)
 *   run:written()  the run's files hold one more update's rows (host.h,
 *       mb_written): a checkpoint waits for the rows of its update
 *
 * State: main()'s host_runs (the main Lua state, the loop, the live runs) is
 * upvalue 1 of start, and each run keeps a pointer to it for its callbacks -
 * no globals.
 *
 * Lifetime: the C state of a run outlives both the Lua object and the thread.
 * While the thread runs, the registry holds the Lua object (so the GC never
 * decides when a run ends); on "finished" the thread is joined and the async
 * handle closed explicitly, and the memory goes when both the handle's close
 * callback and the userdata's __gc have happened.
 */
#include "host.h"

#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#define RUN_MT "moonrl.run"

typedef struct lrun {
    host_runs *runs;         /* the main state and loop it reports to */
    host_run *r;
    uv_async_t async;
    int handler_ref, self_ref;
    uint64_t hot_seq;        /* set_hot calls so far */
    int finished;            /* "finished" delivered, thread joined */
    int handle_closed;       /* async close callback ran */
    int userdata_gone;       /* __gc ran */
    struct lrun *prev, *next;
} lrun;

static void live_add(lrun *lr) {
    host_runs *runs = lr->runs;
    lr->next = runs->live;
    if (runs->live) runs->live->prev = lr;
    runs->live = lr;
}

static void live_remove(lrun *lr) {
    host_runs *runs = lr->runs;
    if (lr->prev) lr->prev->next = lr->next; else if (runs->live == lr) runs->live = lr->next;
    if (lr->next) lr->next->prev = lr->prev;
    lr->prev = lr->next = NULL;
}

static void lrun_maybe_free(lrun *lr) {
    if (lr->handle_closed && lr->userdata_gone) {
        host_run_free(lr->r);
        free(lr);
    }
}

static void on_close(uv_handle_t *h) {
    lrun *lr = h->data;
    lr->handle_closed = 1;
    lrun_maybe_free(lr);
}

/* The thread is done (it posted FINISHED, or we stopped it): join, close the
 * handle, and let the GC have the Lua object again. */
static void lrun_end(lua_State *L, lrun *lr) {
    lr->finished = 1;
    host_run_join(lr->r);
    live_remove(lr);
    uv_close((uv_handle_t *)&lr->async, on_close);
    luaL_unref(L, LUA_REGISTRYINDEX, lr->self_ref);
    lr->self_ref = LUA_NOREF;
}

static const char *reason_name(int flag) {
    switch (flag) {
    case HOST_DONE: return "done";
    case HOST_STOPPED: return "stopped";
    default: return "error";
    }
}

/* Pushes the handler and the event's arguments; returns the argument count. */
static int push_event(lua_State *L, lrun *lr, const host_event *ev) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, lr->handler_ref);
    switch (ev->kind) {
    case HEV_STARTED:
        lua_pushliteral(L, "started");
        lua_pushstring(L, ev->text);
        return 2;
    case HEV_METRICS:
        lua_pushliteral(L, "metrics");
        lua_pushlstring(L, (const char *)&ev->metrics, sizeof ev->metrics);
        lua_pushboolean(L, ev->flag);
        return 3;
    case HEV_WARMUP_DONE:
        lua_pushliteral(L, "warmup_done");
        lua_pushnumber(L, (lua_Number)ev->update);
        lua_pushboolean(L, ev->flag);
        return 3;
    case HEV_CHECKPOINT:
        lua_pushliteral(L, "checkpoint");
        lua_pushstring(L, ev->text);
        lua_pushnumber(L, (lua_Number)ev->update);
        lua_pushboolean(L, ev->flag);
        return 4;
    case HEV_CHECKPOINT_FAILED:
        lua_pushliteral(L, "checkpoint_failed");
        lua_pushstring(L, ev->text);
        return 2;
    case HEV_HOT:
        lua_pushliteral(L, "hot");
        lua_pushnumber(L, (lua_Number)ev->update);
        if (ev->flag) lua_pushstring(L, ev->text); else lua_pushnil(L);
        lua_pushnumber(L, (lua_Number)ev->seq);
        return 4;
    case HEV_PAUSED:
    case HEV_RESUMED:
        lua_pushstring(L, ev->kind == HEV_PAUSED ? "paused" : "resumed");
        lua_pushnumber(L, (lua_Number)ev->update);
        return 2;
    case HEV_ERROR:
        lua_pushliteral(L, "error");
        lua_pushstring(L, ev->text);
        return 2;
    case HEV_NOTE:
        lua_pushliteral(L, "note");
        lua_pushstring(L, ev->text);
        return 2;
    case HEV_ADOPTED:
        lua_pushliteral(L, "adopted");
        lua_pushnumber(L, (lua_Number)ev->update);
        if (ev->flag) lua_pushnil(L); else lua_pushstring(L, ev->text);
        if (ev->flag) lua_pushstring(L, ev->text); else lua_pushnil(L);
        return 4;
    case HEV_FINISHED:
    default:
        lua_pushliteral(L, "finished");
        lua_pushstring(L, reason_name(ev->flag));
        lua_pushnumber(L, (lua_Number)ev->update);
        if (ev->text[0]) lua_pushstring(L, ev->text); else lua_pushnil(L);
        return 4;
    }
}

static void on_async(uv_async_t *h) {
    lrun *lr = h->data;
    lua_State *L = lr->runs->L;
    /* Large (a path buffer); one per process is enough since the loop is single-threaded
     * and handlers cannot re-enter this function for the same event. */
    host_event *ev = malloc(sizeof *ev);
    if (!ev) { host_report("out of memory", "dropping a run's events"); return; }
    /* Events for at most HANDLE_NS per wake-up (one at least), then the loop polls
     * its sockets and timers before the rest: a trainer that posts faster than the
     * hooks run must not keep the loop in here (ctl, signals and timers would never
     * answer; seen: a 50 ms timer silent for 2.8 s behind an 8 ms hook). */
    const uint64_t HANDLE_NS = 10 * 1000 * 1000, t0 = uv_hrtime();
    int more = 0;
    while (!lr->finished && host_run_pop(lr->r, ev)) {
        if (ev->kind == HEV_FINISHED) lrun_end(L, lr);
        int n = push_event(L, lr, ev);
        host_pcall(L, n, 0, 0);
        /* its hooks have run (or failed): the trainer may start the next one */
        if (ev->kind == HEV_METRICS && !ev->flag) host_run_post_ack(lr->r);
        if (uv_hrtime() - t0 > HANDLE_NS) { more = 1; break; }
    }
    free(ev);
    if (more && !lr->finished) uv_async_send(&lr->async);   /* the rest, after the loop's other work */
    if (lr->finished && lr->handler_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, lr->handler_ref);
        lr->handler_ref = LUA_NOREF;
    }
}

/* Reads a {["ppo.lr"]=, ...} table of per-update arrays into h: one per hot schedule. */
static void read_schedules(lua_State *L, int idx, host_hot *h) {
#define SCHED_KEY(k, m, f, lo, hi) k,
#define NOT_SCHED(k, m, f, lo, hi)
    static const char *keys[HOST_SCHED_N] = {MR_HOT_KEYS(SCHED_KEY, NOT_SCHED, NOT_SCHED, NOT_SCHED)};
#undef SCHED_KEY
#undef NOT_SCHED
    if (lua_isnoneornil(L, idx)) return;
    luaL_checktype(L, idx, LUA_TTABLE);
    /* a key that is no hot schedule would be dropped without a word */
    for (lua_pushnil(L); lua_next(L, idx) != 0; lua_pop(L, 1)) {
        int known = 0;
        for (int i = 0; i < HOST_SCHED_N && !known; i++)
            known = lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), keys[i]) == 0;
        if (!known) {
            char list[256] = "";
            for (int i = 0; i < HOST_SCHED_N; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", keys[i]);
            luaL_error(L, "bad schedule table key %s (accepted: the engine's hot schedules %s)",
                       lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : luaL_typename(L, -2), list);
        }
    }
    for (int i = 0; i < HOST_SCHED_N; i++) {
        lua_getfield(L, idx, keys[i]);
        if (!lua_isnil(L, -1)) {
            if (!lua_istable(L, -1))
                luaL_error(L, "bad schedule table '%s' (expected an array of numbers, got %s)",
                           keys[i], luaL_typename(L, -1));
            size_t n = lua_objlen(L, -1);
            if (n == 0) luaL_error(L, "bad schedule table '%s' (empty)", keys[i]);
            double *v = malloc(n * sizeof *v);
            if (!v) luaL_error(L, "out of memory for schedule table '%s'", keys[i]);
            h->table[i] = v;
            h->len[i] = n;
            for (size_t k = 0; k < n; k++) {
                lua_rawgeti(L, -1, (int)k + 1);
                if (lua_type(L, -1) != LUA_TNUMBER)
                    luaL_error(L, "bad schedule table '%s' (entry %d is %s, expected a number)",
                               keys[i], (int)k + 1, luaL_typename(L, -1));
                v[k] = lua_tonumber(L, -1);
                lua_pop(L, 1);
            }
        }
        lua_pop(L, 1);
    }
}

/* ----------------------------------------------------------------- start */

/* Builds the host_hot while its allocations are owned by a userdata, so an
 * argument error (a longjmp) frees them through __gc instead of leaking. */
static int hot_box_gc(lua_State *L) {
    host_hot **box = lua_touserdata(L, 1);
    host_hot_free(*box);
    *box = NULL;
    return 0;
}

static host_hot **push_hot_box(lua_State *L) {
    host_hot **box = lua_newuserdata(L, sizeof *box);
    *box = NULL;
    lua_newtable(L);
    lua_pushcfunction(L, hot_box_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    *box = host_hot_new();
    if (!*box) luaL_error(L, "out of memory");
    return box;
}

static int core_start(lua_State *L) {
    host_runs *runs = host_runs_of(L);
    host_check_bytes(L, 1, sizeof(mr_config), "mr_config");
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    mr_config cfg;
    memcpy(&cfg, lua_tostring(L, 1), sizeof cfg);
    /* The followers of a run of several ranks repeat one trainer's calls
     * (ranks.c): one run at a time. */
    for (lrun *l = runs->live; l && host_ranks_size() > 1; l = l->next)
        if (!l->finished)
            return luaL_error(L, "this process is one of %d ranks (mpirun or srun), which train one run at a "
                              "time: wait for the run in %s to finish before starting another",
                              host_ranks_size(), l->r->run_dir);

    lua_getfield(L, 2, "run_dir");
    size_t dlen;
    const char *dir = lua_tolstring(L, -1, &dlen);
    if (!dir || lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "bad option 'run_dir' (expected a string, got %s)", luaL_typename(L, -1));
    if (dlen == 0 || dlen > HOST_PATH - 64)
        return luaL_error(L, "bad option 'run_dir' (expected 1 .. %d characters, got %d)", HOST_PATH - 64, (int)dlen);
    lua_pop(L, 1);
    int warm = (int)host_opt_int(L, 2, "warmup_updates", 0, 0, 1000000);
    int restore = host_opt_bool(L, 2, "warmup_restore", 0);
    int interval = (int)host_opt_int(L, 2, "checkpoint_interval", 0, 0, 1 << 30);
    int keep = (int)host_opt_int(L, 2, "checkpoint_keep", 0, 0, 1 << 20);
    int keep_gradients = host_opt_bool(L, 2, "keep_gradients", 0);
    lua_getfield(L, 2, "resume_checkpoint");
    size_t rlen = 0;
    const char *rpath = "";
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "bad option 'resume_checkpoint' (expected a path, got %s)", luaL_typename(L, -1));
        rpath = lua_tolstring(L, -1, &rlen);
        if (rlen >= HOST_PATH) return luaL_error(L, "bad option 'resume_checkpoint' (longer than %d)", HOST_PATH - 1);
    }
    lua_pop(L, 1);   /* the string stays alive: opts (argument 2) holds it */
    uint64_t rupdate = (uint64_t)host_opt_int(L, 2, "resume_update", 0, 0, (lua_Integer)1 << 52);
    lua_getfield(L, 2, "resume_kept");
    int nkept = 0;
    if (!lua_isnil(L, -1)) {
        luaL_argcheck(L, lua_istable(L, -1), 2, "option 'resume_kept' must be a list of paths");
        nkept = (int)lua_objlen(L, -1);
        for (int i = 1; i <= nkept; i++) {
            lua_rawgeti(L, -1, i);
            size_t n = 0;
            if (lua_type(L, -1) != LUA_TSTRING || (lua_tolstring(L, -1, &n), n >= HOST_PATH))
                return luaL_error(L, "bad option 'resume_kept' (entry %d: expected a path)", i);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    int max_bad = (int)host_opt_int(L, 2, "max_bad_updates", 0, 0, 1 << 30);
    lua_Integer inject = host_opt_int(L, 2, "inject_nan_at_update", 0, 0, 1 << 30);
    int sync_updates = host_opt_bool(L, 2, "sync_updates", 0);
    uint64_t pause_at = (uint64_t)host_opt_int(L, 2, "pause_at", 0, 0, (lua_Integer)1 << 52);

    host_hot **box = push_hot_box(L);
    lua_getfield(L, 2, "hot");
    if (lua_isnil(L, -1)) {
        mr_config_hot_params(&cfg, &(*box)->hot);
    } else {
        host_check_bytes(L, lua_gettop(L), sizeof(mr_hot_params), "mr_hot_params (option 'hot')");
        memcpy(&(*box)->hot, lua_tostring(L, -1), sizeof(mr_hot_params));
    }
    lua_pop(L, 1);
    lua_getfield(L, 2, "schedules");
    read_schedules(L, lua_gettop(L), *box);
    lua_pop(L, 1);

    /* The Lua object first: nothing below may raise while C memory is unowned. */
    lrun **ud = lua_newuserdata(L, sizeof *ud);
    *ud = NULL;
    luaL_getmetatable(L, RUN_MT);
    lua_setmetatable(L, -2);
    host_run *r = host_run_new();
    lrun *lr = r ? calloc(1, sizeof *lr) : NULL;
    if (!lr) { host_run_free(r); return luaL_error(L, "out of memory starting a run"); }
    r->cfg = cfg;
    r->warmup_updates = warm;
    r->warmup_restore = restore;
    r->checkpoint_interval = interval;
    r->checkpoint_keep = keep;
    r->keep_gradients = keep_gradients;
    r->max_bad_updates = max_bad;
    r->inject_nan_at = (uint64_t)inject;
    r->mb_sync = sync_updates;
    r->mb_pause_at = pause_at;
    memcpy(r->run_dir, dir, dlen + 1);
    memcpy(r->resume_path, rpath, rlen + 1);
    r->resume_update = rupdate;
    lua_getfield(L, 2, "steps_base");
    r->steps_base = lua_isnumber(L, -1) ? (int64_t)lua_tonumber(L, -1) : 0;
    lua_pop(L, 1);
    lua_getfield(L, 2, "init_params");   /* a string of float32 (checked by the engine when written) */
    if (!lua_isnil(L, -1)) {
        size_t ilen = 0;
        const char *ip = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &ilen) : NULL;
        if (!ip || ilen == 0 || ilen % sizeof(float) != 0) {
            host_run_free(r);
            free(lr);
            return luaL_error(L, "bad option 'init_params' (expected the float32 bytes of the weights)");
        }
        r->init_params = malloc(ilen);
        if (!r->init_params) { host_run_free(r); free(lr); return luaL_error(L, "out of memory starting a run"); }
        memcpy(r->init_params, ip, ilen);
        r->init_n = ilen / sizeof(float);
    }
    lua_pop(L, 1);
    if (nkept > 0) {
        r->resume_kept = calloc((size_t)nkept, sizeof *r->resume_kept);
        if (!r->resume_kept) { host_run_free(r); free(lr); return luaL_error(L, "out of memory starting a run"); }
        /* Checked above; copied now that the run owns the memory. */
        lua_getfield(L, 2, "resume_kept");
        for (int i = 1; i <= nkept; i++) {
            lua_rawgeti(L, -1, i);
            snprintf(r->resume_kept[i - 1], HOST_PATH, "%s", lua_tostring(L, -1));
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        r->resume_nkept = nkept;
    }
    r->initial_hot = *box;
    *box = NULL;
    lr->runs = runs;
    lr->r = r;
    lr->handler_ref = lr->self_ref = LUA_NOREF;

    int rc = uv_async_init(runs->loop, &lr->async, on_async);
    if (rc != 0) {
        host_run_free(r);
        free(lr);
        return luaL_error(L, "cannot create the run's async handle: %s", uv_strerror(rc));
    }
    lr->async.data = lr;
    r->async = &lr->async;

    *ud = lr;
    lua_pushvalue(L, 3);
    lr->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, -1);
    lr->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);

    rc = host_run_start(r);
    if (rc != 0) {
        lr->finished = 1;
        uv_close((uv_handle_t *)&lr->async, on_close);
        luaL_unref(L, LUA_REGISTRYINDEX, lr->self_ref);
        luaL_unref(L, LUA_REGISTRYINDEX, lr->handler_ref);
        lr->self_ref = lr->handler_ref = LUA_NOREF;
        return luaL_error(L, "cannot start the trainer thread: %s", uv_strerror(rc));
    }
    live_add(lr);
    return 1;
}

/* --------------------------------------------------------------- methods */

static lrun *check_run(lua_State *L) {
    lrun **ud = luaL_checkudata(L, 1, RUN_MT);
    return *ud;
}

/* Mail to a finished run is an error: the caller would otherwise wait for
 * an effect that never comes. */
static lrun *check_live(lua_State *L, const char *what) {
    lrun *lr = check_run(L);
    if (lr->finished) luaL_error(L, "cannot %s: the run has finished", what);
    return lr;
}

static int run_set_hot(lua_State *L) {
    lrun *lr = check_live(L, "set hot parameters");
    host_check_bytes(L, 2, sizeof(mr_hot_params), "mr_hot_params");
    host_hot **box = push_hot_box(L);
    memcpy(&(*box)->hot, lua_tostring(L, 2), sizeof(mr_hot_params));
    read_schedules(L, 3, *box);
    (*box)->seq = ++lr->hot_seq;
    host_run_post_hot(lr->r, *box);
    *box = NULL;
    lua_pushnumber(L, (lua_Number)lr->hot_seq);
    return 1;
}

static int run_pause(lua_State *L) {
    host_run_post_pause(check_live(L, "pause")->r, 1);
    return 0;
}

/* handle:pause_at(steps): pause at the first update boundary where the run's
 * agent-steps reach steps (0: no mark); one mark, the latest wins. */
static int run_pause_at(lua_State *L) {
    lrun *lr = check_live(L, "pause");
    lua_Number n = luaL_checknumber(L, 2);
    luaL_argcheck(L, n >= 0 && n < 9007199254740992.0 && n == (lua_Number)(uint64_t)n, 2,
                  "a whole number of agent-steps >= 0");
    host_run_post_pause_at(lr->r, (uint64_t)n);
    return 0;
}

static int run_resume(lua_State *L) {
    host_run_post_pause(check_live(L, "resume")->r, 0);
    return 0;
}

static int run_checkpoint(lua_State *L) {
    lrun *lr = check_live(L, "checkpoint");
    size_t n = 0;
    const char *path = luaL_optlstring(L, 2, "", &n);
    luaL_argcheck(L, n < HOST_PATH, 2, "path too long");
    if (host_run_post_checkpoint(lr->r, path) != 0) return luaL_error(L, "out of memory");
    return 0;
}

static int run_adopt(lua_State *L) {
    lrun *lr = check_live(L, "adopt");
    size_t n = 0;
    const char *path = luaL_checklstring(L, 2, &n);
    luaL_argcheck(L, n > 0 && n < HOST_PATH, 2, "empty or too long a path");
    if (host_run_post_adopt(lr->r, path) != 0) return luaL_error(L, "out of memory");
    return 0;
}

static int run_sync(lua_State *L) {
    host_run_post_sync(check_live(L, "change the update hand-shake")->r, lua_toboolean(L, 2));
    return 0;
}

/* handle:written(): the run's files hold one more update's rows (host.h,
 * mb_written); after the end it is nothing (nobody waits). */
static int run_written(lua_State *L) {
    lrun *lr = check_run(L);
    if (!lr->finished) host_run_post_written(lr->r);
    return 0;
}

static int run_stop(lua_State *L) {
    lrun *lr = check_run(L);
    if (lr->finished) return 0;   /* stopping twice, or after the end, is harmless */
    int ckpt = lua_isnoneornil(L, 2) ? 1 : lua_toboolean(L, 2);
    host_run_post_stop(lr->r, ckpt);
    return 0;
}

static int run_alive(lua_State *L) {
    lua_pushboolean(L, !check_run(L)->finished);
    return 1;
}

static int run_gc(lua_State *L) {
    lrun **ud = luaL_checkudata(L, 1, RUN_MT);
    lrun *lr = *ud;
    if (!lr) return 0;
    *ud = NULL;
    lr->userdata_gone = 1;
    lrun_maybe_free(lr);
    return 0;
}

static int run_tostring(lua_State *L) {
    lrun *lr = check_run(L);
    lua_pushfstring(L, "moonrl.core.run (%s, %s)", lr->r->run_dir, lr->finished ? "finished" : "running");
    return 1;
}

/* Called by main() once the loop is left with runs still going. */
void host_runs_shutdown(host_runs *runs) {
    lua_State *L = runs->L;
    while (runs->live) {
        lrun *lr = runs->live;
        host_run_post_stop(lr->r, 1);
        host_run_discard(lr->r);
        lrun_end(L, lr);
        if (lr->handler_ref != LUA_NOREF) {
            luaL_unref(L, LUA_REGISTRYINDEX, lr->handler_ref);
            lr->handler_ref = LUA_NOREF;
        }
    }
}

static const luaL_Reg run_methods[] = {
    {"set_hot", run_set_hot},
    {"pause", run_pause},
    {"pause_at", run_pause_at},
    {"resume", run_resume},
    {"checkpoint", run_checkpoint},
    {"adopt", run_adopt},
    {"stop", run_stop},
    {"sync", run_sync},
    {"written", run_written},
    {"alive", run_alive},
    {NULL, NULL},
};

void host_run_open(lua_State *L, host_runs *runs) {
    luaL_newmetatable(L, RUN_MT);
    lua_newtable(L);
    luaL_register(L, NULL, run_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, run_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, run_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_pushlightuserdata(L, runs);
    lua_pushcclosure(L, core_start, 1);
    lua_setfield(L, -2, "start");
}

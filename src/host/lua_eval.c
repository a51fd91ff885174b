/*
 * lua_eval.c - evaluation of a checkpoint off the loop.
 *
 *   core.evaluate(checkpoint_path, eval_cfg_bytes, opts, callback)
 *       runs on libuv's thread pool: reads the checkpoint's config, creates a
 *       trainer sized for evaluation (one rollout step; the cpu unless
 *       opts.device says otherwise; opts.threads), loads, evaluates with
 *       the protocol eval_cfg asks (mr_trainer_eval_protocol);
 *       callback(result_bytes, nil, describe, cfg_bytes, records_bytes,
 *       protocol) or (nil, message). protocol: "survival" (result_bytes the
 *       mr_eval_result, records_bytes the mr_eval_record array only with
 *       opts.records = true, else nil) or "episodic" (result_bytes false,
 *       records_bytes the mr_eval_episode array, always).
 *       opts.progress = function(done, total): steps taken of runs x steps,
 *       on the loop while it works (at most every 1% and at the end).
 *       opts.program: a Lua environment's program (engine.env_program_handle),
 *       attached when the checkpoint's env.name is lua.
 *
 * State: main()'s host_runs is upvalue 1 of evaluate; each evaluation keeps
 * a pointer to it for its callbacks.
 */
#include "host.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

typedef struct eval_req {
    uv_work_t work;
    uv_async_t progress;          /* initialised when progress_ref is set */
    int progress_ref;             /* opts.progress, or LUA_NOREF */
    uv_mutex_t lock;              /* guards progress_open (with a progress handle) */
    int progress_open;            /* the work may wake the loop through `progress` */
    int abandoned;                /* host_evals_shutdown: nothing of Lua is touched again */
    struct eval_req *next;        /* host_runs.evals */
    _Atomic uint64_t done, total; /* written by the work, read by the loop */
    uint64_t told;                /* the last `done` given to opts.progress */
    host_runs *runs;              /* the main state the callback runs on */
    char path[HOST_PATH];
    mr_eval_config ecfg;
    int device, threads;          /* -1 = as in the checkpoint */
    int cb_ref;
    mr_status status;
    mr_error err;
    mr_config cfg;
    mr_eval_result res;
    int records;                  /* opts.records: also collect mr_eval_records */
    const mr_env_program *program;   /* opts.program: a Lua environment's (env.lua), or NULL */
    mr_eval_records recs;
    int protocol;                 /* an mr_eval_protocol, once the trainer is loaded */
    mr_eval_episodes eps;         /* the episodic protocol's records */
    char describe[512];
} eval_req;

/* On the work thread: every 1% (and the end) wakes the loop. */
static void eval_progress(void *user, uint64_t done, uint64_t total) {
    eval_req *q = user;
    uint64_t every = total >= 100 ? total / 100 : 1;
    if (done % every != 0 && done != total) return;
    atomic_store(&q->total, total);
    atomic_store(&q->done, done);
    uv_mutex_lock(&q->lock);
    if (q->progress_open) uv_async_send(&q->progress);
    uv_mutex_unlock(&q->lock);
}

static void evals_unlink(eval_req *q) {
    for (eval_req **p = &q->runs->evals; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            return;
        }
}

/* Closes q's progress handle; the work, if still running, no longer wakes the loop. */
static void progress_close(eval_req *q, uv_close_cb cb) {
    uv_mutex_lock(&q->lock);
    q->progress_open = 0;
    uv_mutex_unlock(&q->lock);
    evals_unlink(q);
    uv_close((uv_handle_t *)&q->progress, cb);
}

void host_evals_shutdown(host_runs *runs) {
    lua_State *L = runs->L;
    while (runs->evals) {
        eval_req *q = runs->evals;
        q->abandoned = 1;
        luaL_unref(L, LUA_REGISTRYINDEX, q->progress_ref);
        luaL_unref(L, LUA_REGISTRYINDEX, q->cb_ref);
        progress_close(q, NULL);   /* q stays allocated: the work may still read it; the process is ending */
    }
}

/* On the loop: tells opts.progress what it has not been told yet. */
static void eval_tell(eval_req *q) {
    uint64_t done = atomic_load(&q->done), total = atomic_load(&q->total);
    if (q->progress_ref == LUA_NOREF || done == q->told) return;
    q->told = done;
    lua_State *L = q->runs->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, q->progress_ref);
    lua_pushnumber(L, (lua_Number)done);
    lua_pushnumber(L, (lua_Number)total);
    host_pcall(L, 2, 0, 0);
}

static void eval_on_progress(uv_async_t *h) { eval_tell(h->data); }

static void eval_free(uv_handle_t *h) {
    eval_req *q = h->data;
    uv_mutex_destroy(&q->lock);
    free(q);
}

static void eval_work(uv_work_t *w) {
    eval_req *q = w->data;
    mr_trainer *t = NULL;
    q->status = mr_checkpoint_read_config(q->path, &q->cfg, &q->err);
    if (q->status != MR_OK) return;
    if (q->cfg.env.name == MR_ENV_LUA) q->cfg.env.program = q->program;   /* NULL: the config check says so */
    /* Evaluation needs the weights, not the training buffers: the trainer is
     * planned for one rollout step in one minibatch (a few MiB instead of the
     * training batch's GiB), on the cpu unless asked otherwise - the CUDA
     * trainer evaluates on a cpu copy of its weights anyway, so a cuda one
     * would only take the card's memory from a run still training on it. */
    q->cfg.device = q->device >= 0 ? q->device : MR_DEVICE_CPU;
    if (q->cfg.device == MR_DEVICE_CPU) q->cfg.precision = MR_FP32;
    q->cfg.ppo.rollout_steps = 1;
    q->cfg.ppo.minibatches = 1;
    if (q->threads >= 0) q->cfg.threads = q->threads;
    q->status = mr_trainer_create(&q->cfg, &t, &q->err);
    if (q->status == MR_OK) q->status = mr_trainer_load(t, q->path, &q->err);
    if (q->status == MR_OK) {
        snprintf(q->describe, sizeof q->describe, "%s", mr_trainer_describe(t));
        mr_eval_progress_fn progress = q->progress_ref != LUA_NOREF ? eval_progress : NULL;
        q->protocol = mr_trainer_eval_protocol(t, &q->ecfg);
        if (q->protocol == MR_EVAL_EPISODIC)
            q->status = mr_trainer_evaluate_episodes(t, &q->ecfg, &q->eps, progress, q, &q->err);
        else
            q->status = mr_trainer_evaluate_records(t, &q->ecfg, &q->res, q->records ? &q->recs : NULL, progress, q,
                                                    &q->err);
    }
    mr_trainer_free(t);
}

static void eval_done(uv_work_t *w, int status) {
    eval_req *q = w->data;
    if (q->abandoned) return;   /* host_evals_shutdown let it go (and keeps q) */
    lua_State *L = q->runs->L;
    if (q->progress_ref != LUA_NOREF && status == 0 && q->status == MR_OK) eval_tell(q);
    lua_rawgeti(L, LUA_REGISTRYINDEX, q->cb_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, q->cb_ref);
    if (status == UV_ECANCELED) {
        lua_pushnil(L);
        lua_pushliteral(L, "evaluation cancelled");
        host_pcall(L, 2, 0, 0);
    } else if (q->status != MR_OK) {
        lua_pushnil(L);
        lua_pushfstring(L, "evaluating %s failed (%s): %s", q->path, mr_status_name(q->status), q->err.msg);
        host_pcall(L, 2, 0, 0);
    } else if (q->protocol == MR_EVAL_EPISODIC) {
        lua_pushboolean(L, 0);
        lua_pushnil(L);
        lua_pushstring(L, q->describe);
        lua_pushlstring(L, (const char *)&q->cfg, sizeof q->cfg);
        lua_pushlstring(L, (const char *)q->eps.ep, sizeof(mr_eval_episode) * q->eps.count);
        lua_pushliteral(L, "episodic");
        host_pcall(L, 6, 0, 0);
    } else {
        lua_pushlstring(L, (const char *)&q->res, sizeof q->res);
        lua_pushnil(L);
        lua_pushstring(L, q->describe);
        lua_pushlstring(L, (const char *)&q->cfg, sizeof q->cfg);
        if (q->records) lua_pushlstring(L, (const char *)q->recs.rec, sizeof(mr_eval_record) * q->recs.count);
        else lua_pushnil(L);
        lua_pushliteral(L, "survival");
        host_pcall(L, 6, 0, 0);
    }
    mr_eval_records_free(&q->recs);
    mr_eval_episodes_free(&q->eps);
    if (q->progress_ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, q->progress_ref);
        q->progress_ref = LUA_NOREF;
        progress_close(q, eval_free);   /* no callback after this */
    } else {
        free(q);
    }
}

static int core_evaluate(lua_State *L) {
    size_t plen;
    const char *path = luaL_checklstring(L, 1, &plen);
    luaL_argcheck(L, plen > 0 && plen < HOST_PATH, 1, "expected a checkpoint path");
    host_check_bytes(L, 2, sizeof(mr_eval_config), "mr_eval_config");
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TFUNCTION);
    int device = (int)host_opt_int(L, 3, "device", -1, -1, MR_DEVICE_CUDA);
    int threads = (int)host_opt_int(L, 3, "threads", -1, -1, 1024);
    eval_req *q = calloc(1, sizeof *q);
    if (!q) return luaL_error(L, "out of memory");
    q->runs = host_runs_of(L);
    memcpy(q->path, path, plen + 1);
    memcpy(&q->ecfg, lua_tostring(L, 2), sizeof q->ecfg);
    q->device = device;
    q->threads = threads;
    lua_getfield(L, 3, "records");
    q->records = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 3, "program");
    q->program = lua_islightuserdata(L, -1) ? lua_touserdata(L, -1) : NULL;
    lua_pop(L, 1);
    q->work.data = q;
    q->progress_ref = LUA_NOREF;
    lua_getfield(L, 3, "progress");
    if (!lua_isnil(L, -1)) {
        if (!lua_isfunction(L, -1)) {
            free(q);
            return luaL_error(L, "bad option 'progress' (expected a function, got %s)", luaL_typename(L, -1));
        }
        int rc = uv_mutex_init(&q->lock);
        if (rc == 0) {
            rc = uv_async_init(q->runs->loop, &q->progress, eval_on_progress);
            if (rc != 0) uv_mutex_destroy(&q->lock);
        }
        if (rc != 0) {
            free(q);
            return luaL_error(L, "cannot create the evaluation's progress handle: %s", uv_strerror(rc));
        }
        q->progress.data = q;
        q->progress_open = 1;
        q->next = q->runs->evals;
        q->runs->evals = q;
        q->progress_ref = luaL_ref(L, LUA_REGISTRYINDEX);   /* pops it */
    } else {
        lua_pop(L, 1);
    }
    lua_pushvalue(L, 4);
    q->cb_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    int rc = uv_queue_work(q->runs->loop, &q->work, eval_work, eval_done);
    if (rc != 0) {
        luaL_unref(L, LUA_REGISTRYINDEX, q->cb_ref);
        if (q->progress_ref != LUA_NOREF) {
            luaL_unref(L, LUA_REGISTRYINDEX, q->progress_ref);
            progress_close(q, eval_free);
        } else {
            free(q);
        }
        return luaL_error(L, "cannot queue the evaluation: %s", uv_strerror(rc));
    }
    return 0;
}

void host_eval_open(lua_State *L, host_runs *runs) {
    lua_pushlightuserdata(L, runs);
    lua_pushcclosure(L, core_evaluate, 1);
    lua_setfield(L, -2, "evaluate");
}

/*
 * lua_core.c - the `moonrl.core` module: the few things Lua cannot do by
 * itself through FFI.
 *
 * Everything that is plain data crossing to the engine (mr_config, metrics,
 * evaluation results) goes through LuaJIT's FFI in lua/moonrl/engine.lua,
 * declared from the header itself (core.cdef()). What lives here is what
 * needs threads or the loop: runs and evaluation off the loop thread
 * (lua_run.c, lua_eval.c), the exit code and error reporting. Its state is main()'s
 * host_core, reached from every function as upvalue 1 - no globals.
 */
#include "host.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

extern const char mr_host_cdef[];   /* generated from moonrl.h (embed_cdef.cmake) */

static host_core *core_of(lua_State *L) {
    return lua_touserdata(L, lua_upvalueindex(1));
}

/* core.report(what, message): the host's own error format, for Lua code that
 * caught an error itself (hooks, coroutines). */
static int core_report(lua_State *L) {
    const char *what = luaL_checkstring(L, 1);
    const char *msg = luaL_checkstring(L, 2);
    host_report(what, msg);
    return 0;
}

static int core_traceback(lua_State *L) {
    /* (co, msg): the traceback of a dead coroutine, as the message handler would. */
    lua_State *co = lua_tothread(L, 1);
    luaL_argcheck(L, co != NULL, 1, "expected a coroutine");
    const char *msg = luaL_checkstring(L, 2);
    if (strstr(msg, "stack traceback:")) { lua_pushstring(L, msg); return 1; }
    luaL_traceback(L, co, msg, 0);
    return 1;
}

static int core_version(lua_State *L) {
    lua_pushstring(L, mr_version());
    return 1;
}

/* core.ranks(): the processes this run spans (mpirun/srun; ranks.c); Lua
 * runs on rank 0 only. */
static int core_ranks(lua_State *L) {
    lua_pushinteger(L, host_ranks_size());
    return 1;
}

static int core_home(lua_State *L) {
    lua_pushstring(L, core_of(L)->home);
    return 1;
}

static int core_cdef(lua_State *L) {
    lua_pushstring(L, mr_host_cdef);
    return 1;
}

static int check_exit_code(lua_State *L, int idx, int def) {
    lua_Integer c = luaL_optinteger(L, idx, def);
    luaL_argcheck(L, c >= 0 && c <= 255, idx, "exit code must be 0 .. 255");
    return (int)c;
}

static int core_set_exit_code(lua_State *L) {
    luaL_checkinteger(L, 1);
    core_of(L)->exit_code = check_exit_code(L, 1, 0);
    return 0;
}

static int core_get_exit_code(lua_State *L) {
    lua_pushinteger(L, core_of(L)->exit_code);
    return 1;
}

/* core.shutdown(code): leave the loop now (the main script failed or the user
 * insisted); main() stops the runs still going and exits with `code`. */
static int core_shutdown(lua_State *L) {
    host_core *core = core_of(L);
    core->exit_code = check_exit_code(L, 1, core->exit_code);
    uv_stop(core->loop);
    return 0;
}

/* core.exit_now(code): the user insisted (a second stop signal): the process
 * ends here, threads and all, without waiting for the runs. Checkpoints are
 * written atomically, so the last complete one is intact; one being written
 * stays a *.tmp. */
static int core_exit_now(lua_State *L) {
    int code = check_exit_code(L, 1, core_of(L)->exit_code);
    fflush(stdout);
    fflush(stderr);
    _exit(code);
    return 0;
}

static const luaL_Reg core_functions[] = {
    {"version", core_version},
    {"home", core_home},
    {"ranks", core_ranks},
    {"cdef", core_cdef},
    {"report", core_report},
    {"traceback", core_traceback},
    {"set_exit_code", core_set_exit_code},
    {"exit_code", core_get_exit_code},
    {"shutdown", core_shutdown},
    {"exit_now", core_exit_now},
    {NULL, NULL},
};

void host_core_open(lua_State *L, host_core *core) {
    lua_newtable(L);
    for (const luaL_Reg *f = core_functions; f->name; f++) {
        lua_pushlightuserdata(L, core);
        lua_pushcclosure(L, f->func, 1);
        lua_setfield(L, -2, f->name);
    }
    core->runs.L = L;
    core->runs.loop = core->loop;
    host_run_open(L, &core->runs);
    host_eval_open(L, &core->runs);
    host_http_open(L);
    host_signal_watchdog_open(L);
    host_env_open(L);
    lua_pushinteger(L, HOST_QUEUE_CAP);
    lua_setfield(L, -2, "queue_capacity");
}

/*
 * lua_core.c - the `moonrl.core` module: the few things Lua cannot do by
 * itself through FFI, and the one protected call every callback goes through.
 *
 * Everything that is plain data crossing to the engine (mr_config, metrics,
 * evaluation results) goes through LuaJIT's FFI in lua/moonrl/engine.lua,
 * declared from the header itself (core.cdef()). What lives here is what
 * needs threads or the loop: runs (lua_run.c), evaluation off the loop
 * thread, the exit code and error reporting.
 */
#include "host.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

extern const char mr_host_cdef[];   /* generated from moonrl.h (embed_cdef.cmake) */

lua_State *host_main_L;
uv_loop_t *host_loop;
static char home_dir[HOST_PATH];
static int core_exit_code;

void host_core_set_home(const char *home) { snprintf(home_dir, sizeof home_dir, "%s", home); }
int host_core_exit_code(void) { return core_exit_code; }

void host_report(const char *what, const char *msg) {
    fprintf(stderr, "moonrl: %s: %s\n", what, msg ? msg : "(no message)");
    fflush(stderr);
}

/* Message handler: the error as text plus the stack where it happened. */
static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    /* A message that already carries a traceback (rethrown) keeps it. */
    if (strstr(msg, "stack traceback:")) {
        lua_pushstring(L, msg);
        return 1;
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* luv calls this for every callback (luv_set_callback) and so do we: an error
 * is reported and swallowed, so one bad callback never takes the process -
 * or a training run - down. Same contract as luv's luv_cfpcall. */
int host_pcall(lua_State *L, int nargs, int nresults, int flags) {
    int base = lua_gettop(L) - nargs;          /* index of the function */
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nresults, base);
    if (rc != 0) {
        host_report(rc == LUA_ERRMEM ? "out of memory in a callback" : "error in a callback",
                    lua_tostring(L, -1));
        lua_pop(L, 1);
        lua_remove(L, base);
        return -rc;
    }
    lua_remove(L, base);
    if (nresults == LUA_MULTRET) nresults = lua_gettop(L) - base + 1;
    return nresults;
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

static int core_home(lua_State *L) {
    lua_pushstring(L, home_dir);
    return 1;
}

static int core_cdef(lua_State *L) {
    lua_pushstring(L, mr_host_cdef);
    return 1;
}

static int core_set_exit_code(lua_State *L) {
    lua_Integer c = luaL_checkinteger(L, 1);
    luaL_argcheck(L, c >= 0 && c <= 255, 1, "exit code must be 0 .. 255");
    core_exit_code = (int)c;
    return 0;
}

static int core_get_exit_code(lua_State *L) {
    lua_pushinteger(L, core_exit_code);
    return 1;
}

/* core.shutdown(code): leave the loop now (the main script failed or the user
 * insisted); main() stops the runs still going and exits with `code`. */
static int core_shutdown(lua_State *L) {
    lua_Integer c = luaL_optinteger(L, 1, core_exit_code);
    luaL_argcheck(L, c >= 0 && c <= 255, 1, "exit code must be 0 .. 255");
    core_exit_code = (int)c;
    uv_stop(host_loop);
    return 0;
}

static const luaL_Reg core_functions[] = {
    {"version", core_version},
    {"home", core_home},
    {"cdef", core_cdef},
    {"report", core_report},
    {"traceback", core_traceback},
    {"set_exit_code", core_set_exit_code},
    {"exit_code", core_get_exit_code},
    {"shutdown", core_shutdown},
    {NULL, NULL},
};

int luaopen_moonrl_core(lua_State *L) {
    lua_newtable(L);
    luaL_register(L, NULL, core_functions);
    host_run_open(L);
    lua_pushinteger(L, HOST_QUEUE_CAP);
    lua_setfield(L, -2, "queue_capacity");
    return 1;
}

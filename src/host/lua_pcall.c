/*
 * lua_pcall.c - the one protected call every callback goes through, and the
 * host's error format.
 *
 * luv calls host_pcall for each of its callbacks (luv_set_callback), and so
 * do the runs, the evaluations and main(): an error is printed with its
 * traceback and swallowed, so one bad callback never takes the process - or
 * a training run - down. Nothing here knows about the rest of the host.
 */
#include "host.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

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

/* Same contract as luv's luv_cfpcall. */
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

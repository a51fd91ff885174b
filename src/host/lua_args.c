/*
 * lua_args.c - reading the arguments of the core functions (lua_run.c,
 * lua_eval.c): options from a table, the bytes of an engine struct, the
 * host_runs upvalue.
 */
#include "host.h"

#include <lauxlib.h>

host_runs *host_runs_of(lua_State *L) {
    return lua_touserdata(L, lua_upvalueindex(1));
}

lua_Integer host_opt_int(lua_State *L, int t, const char *key, lua_Integer def,
                          lua_Integer lo, lua_Integer hi) {
    lua_getfield(L, t, key);
    lua_Integer v = def;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "bad option '%s' (expected an integer, got %s)", key, luaL_typename(L, -1));
        lua_Number n = lua_tonumber(L, -1);
        v = (lua_Integer)n;
        if ((lua_Number)v != n || v < lo || v > hi)
            luaL_error(L, "bad option '%s' = %f (expected an integer in %d .. %d)", key, n, (int)lo, (int)hi);
    }
    lua_pop(L, 1);
    return v;
}

int host_opt_bool(lua_State *L, int t, const char *key, int def) {
    lua_getfield(L, t, key);
    int v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

void host_check_bytes(lua_State *L, int idx, size_t want, const char *what) {
    size_t n;
    luaL_checklstring(L, idx, &n);
    if (n != want)
        luaL_argerror(L, idx, lua_pushfstring(L,
            "expected the %d bytes of an %s, got %d (engine.lua and the binary disagree on moonrl.h: rebuild)",
            (int)want, what, (int)n));
}

/*
 * main.c - the moonrl process: one LuaJIT state, one libuv loop, shared.
 *
 * The loop is ours and handed to luv before luaopen_luv (as Neovim does), so a
 * script's `require "luv"` schedules on the same loop that delivers training
 * metrics. Every luv callback runs through host_pcall, which reports errors
 * with a traceback and never exits. lua/moonrl/cli.lua does the rest: it
 * parses the command line and runs the work as a coroutine on the loop.
 *
 * Where lua/ and configs/ are found (the first that has lua/moonrl/init.lua):
 * $MOONRL_HOME, the parent of the executable's directory (build/moonrl in the
 * source tree, or bin/moonrl in an install), the source dir at compile time.
 */
#include "host.h"

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>
#include <luv.h>

#ifndef MOONRL_SOURCE_DIR
#define MOONRL_SOURCE_DIR "."
#endif

static int is_home(const char *dir) {
    char probe[HOST_PATH];
    int n = snprintf(probe, sizeof probe, "%s/lua/moonrl/init.lua", dir);
    return n > 0 && (size_t)n < sizeof probe && access(probe, R_OK) == 0;
}

static int find_home(char *out, size_t n) {
    const char *env = getenv("MOONRL_HOME");
    if (env && *env) {
        if (is_home(env)) { snprintf(out, n, "%s", env); return 0; }
        fprintf(stderr, "moonrl: MOONRL_HOME=%s has no lua/moonrl/init.lua; looking elsewhere\n", env);
    }
    char exe[HOST_PATH];
    size_t len = sizeof exe;
    if (uv_exepath(exe, &len) == 0) {
        char *dir = dirname(exe);           /* .../build */
        char parent[HOST_PATH];
        snprintf(parent, sizeof parent, "%s", dir);
        char *up = dirname(parent);         /* .../       */
        if (is_home(up)) { snprintf(out, n, "%s", up); return 0; }
    }
    if (is_home(MOONRL_SOURCE_DIR)) { snprintf(out, n, "%s", MOONRL_SOURCE_DIR); return 0; }
    return -1;
}

/* Scripts written for standalone luv end with uv.run(); here the host runs
 * the loop, and a nested uv_run from inside a callback is undefined in
 * libuv, so uv.run is a no-op that says the loop is already running. */
static int uv_run_is_host(lua_State *L) {
    lua_pushboolean(L, 0);
    return 1;
}

static void open_modules(lua_State *L, uv_loop_t *loop, const char *home) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");

    luv_set_loop(L, loop);
    luv_set_callback(L, host_pcall);
    luaopen_luv(L);
    lua_pushcfunction(L, uv_run_is_host);
    lua_setfield(L, -2, "run");
    lua_setfield(L, -2, "luv");

    luaopen_moonrl_core(L);
    lua_setfield(L, -2, "moonrl.core");
    lua_pop(L, 1);

    /* Our library first, then whatever LUA_PATH says (luarocks trees etc). */
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s", home, home, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

/* OpenBLAS picks its kernels when it loads, before main; on CPUs whose
 * AVX-512 it does not know (moonrl.h: mr_blas_better_kernels) the process starts
 * again once with OPENBLAS_CORETYPE set (1.3x training, 1.65x acting on the
 * reference net: BENCHMARKS.md). MOONRL_BLAS_AUTO=0 keeps OpenBLAS's own
 * choice; a failed exec just goes on with it. */
static void reexec_for_blas(char **argv) {
    const char *a = getenv("MOONRL_BLAS_AUTO");
    if (a && strcmp(a, "0") == 0) return;
    const char *k = mr_blas_better_kernels();
    if (!k) return;
    setenv("OPENBLAS_CORETYPE", k, 1);
    setenv("MOONRL_BLAS_AUTO", k, 1);   /* tells the trainer's description who chose */
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("MOONRL_BLAS_AUTO");
}

int main(int argc, char **argv) {
    reexec_for_blas(argv);
    /* A closed pipe (moonrl ... | head) is an error return, not a kill. */
    signal(SIGPIPE, SIG_IGN);

    char home[HOST_PATH];
    if (find_home(home, sizeof home) != 0) {
        fprintf(stderr, "moonrl: cannot find the moonrl Lua library (lua/moonrl/init.lua); "
                        "set MOONRL_HOME to the moonrl source or install directory\n");
        return 1;
    }
    host_core_set_home(home);

    static uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc != 0) {
        fprintf(stderr, "moonrl: cannot create the event loop: %s\n", uv_strerror(rc));
        return 1;
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "moonrl: cannot create the Lua state (out of memory)\n");
        return 1;
    }
    host_main_L = L;
    host_loop = &loop;
    luaL_openlibs(L);
    open_modules(L, &loop, home);

    lua_createtable(L, argc, 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_setglobal(L, "arg");

    char cli[HOST_PATH + 32];
    snprintf(cli, sizeof cli, "%s/lua/moonrl/cli.lua", home);
    if (luaL_loadfile(L, cli) != 0) {
        host_report("cannot load the command line", lua_tostring(L, -1));
        return 1;
    }
    for (int i = 1; i < argc; i++) lua_pushstring(L, argv[i]);
    if (host_pcall(L, argc - 1, 0, 0) < 0) return 1;

    uv_run(&loop, UV_RUN_DEFAULT);

    /* Left early (core.shutdown) or finished: stop what still trains, close
     * what is still open, then let the close callbacks run. */
    host_runs_shutdown();
    /* Our own handles (runs' async) must be gone before luv's walk, which
     * takes every handle for one of its own. */
    uv_run(&loop, UV_RUN_NOWAIT);
    if (luaL_loadstring(L, "local uv = require 'luv'\n"
                           "uv.walk(function(h) if not h:is_closing() then h:close() end end)") == 0)
        host_pcall(L, 0, 0, 0);
    else
        lua_pop(L, 1);
    int code = host_core_exit_code();
    /* A clean end drains everything; an abandoned one (exit code set) does not
     * wait for evaluations still on the thread pool. */
    uv_run(&loop, code == 0 ? UV_RUN_DEFAULT : UV_RUN_NOWAIT);
    fflush(stdout);
    if (uv_loop_alive(&loop)) _exit(code);   /* work still queued: do not run Lua after free */
    lua_close(L);
    uv_loop_close(&loop);
    return code;
}

/*
 * main.c - the moonrl process: one LuaJIT state, one libuv loop, shared.
 *
 * The loop is ours and handed to luv before luaopen_luv (as Neovim does), so a
 * script's `require "luv"` schedules on the same loop that delivers training
 * metrics. Every luv callback runs through host_pcall, which reports errors
 * with a traceback and never exits. lua/moonrl/cli/init.lua does the rest: it
 * parses the command line and runs the work as a coroutine on the loop.
 *
 * The Lua library and configs are the copy embedded at build time, so the
 * binary runs wherever it is copied; `moonrl --lua-path DIR ...` or
 * MOONRL_LUA_PATH=DIR loads them from the source tree DIR instead
 * (lua_library.c). `moonrl version` ends with a line saying which.
 */
#include "host.h"

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

/* Takes a leading `--lua-path DIR` (or --lua-path=DIR) off argv. Returns the
 * index of the first argument left, or -1 when DIR is missing. */
static int take_lua_path(int argc, char **argv, const char **dir) {
    *dir = NULL;
    if (argc < 2) return 1;
    if (strncmp(argv[1], "--lua-path=", 11) == 0) {
        *dir = argv[1] + 11;
        return **dir ? 2 : -1;
    }
    if (strcmp(argv[1], "--lua-path") != 0) return 1;
    if (argc < 3 || !*argv[2]) return -1;
    *dir = argv[2];
    return 3;
}

/* core.home(): a moonrl source tree for what is not embedded (bench --compare's
 * reference scripts): the library's tree when loading from one, else
 * $MOONRL_HOME, else where the sources were at build time. */
static const char *home_dir(const host_library *lib) {
    if (lib->dir[0]) return lib->dir;
    const char *env = getenv("MOONRL_HOME");
    return env && *env ? env : MOONRL_SOURCE_DIR;
}

/* Scripts written for standalone luv end with uv.run(); here the host runs
 * the loop, and a nested uv_run from inside a callback is undefined in
 * libuv, so uv.run is a no-op that says the loop is already running. */
static int uv_run_is_host(lua_State *L) {
    lua_pushboolean(L, 0);
    return 1;
}

static void open_modules(lua_State *L, host_core *core) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");

    luv_set_loop(L, core->loop);
    luv_set_callback(L, host_pcall);
    luaopen_luv(L);
    lua_pushcfunction(L, uv_run_is_host);
    lua_setfield(L, -2, "run");
    lua_setfield(L, -2, "luv");

    host_core_open(L, core);
    lua_setfield(L, -2, "moonrl.core");
    lua_pop(L, 2);
}

/* `moonrl version` (and --version) ends with where the Lua library came from. */
static void print_library(int nargs, char **args, const host_library *lib) {
    if (nargs != 1 || (strcmp(args[0], "version") != 0 && strcmp(args[0], "--version") != 0)) return;
    char line[HOST_PATH + 64];
    host_library_describe(lib, line, sizeof line);
    printf("lua library: %s\n", line);
}

/* OpenBLAS picks its kernels when it loads, before main; on CPUs whose
 * AVX-512 it does not know, or whose model a virtual machine hides
 * (moonrl.h: mr_blas_better_kernels), the process starts
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

static int run(int argc, char **argv);

/* Under mpirun or srun with several tasks, rank 0 is the moonrl below and
 * the others follow its trainer (ranks.c); one process otherwise. */
int main(int argc, char **argv) {
    reexec_for_blas(argv);
    /* A closed pipe (moonrl ... | head) is an error return, not a kill. */
    signal(SIGPIPE, SIG_IGN);
    char why[512];
    if (host_ranks_init(&argc, &argv, why, sizeof why) != 0) {
        fprintf(stderr, "moonrl: %s\n", why);
        return 2;
    }
    if (host_ranks_rank() > 0) {
        /* a follower has no Lua of its own, but a Lua environment's threads load moonrl.env.* (ranks.c) */
        static host_library lib;
        const char *lua_path = NULL;
        if (take_lua_path(argc, argv, &lua_path) >= 0 && host_library_choose(&lib, lua_path, why, sizeof why) == 0)
            host_env_set_library(&lib);
        return host_ranks_follow();
    }
    int code = run(argc, argv);
    host_ranks_finish(code);
    return code;
}

static int run(int argc, char **argv) {

    const char *lua_path;
    int first = take_lua_path(argc, argv, &lua_path);
    if (first < 0) {
        fprintf(stderr, "moonrl: --lua-path needs a directory: the root of a moonrl source tree "
                        "(the one holding lua/moonrl and configs)\n");
        return 2;
    }
    static host_library lib;
    char why[HOST_PATH + 256];
    if (host_library_choose(&lib, lua_path, why, sizeof why) != 0) {
        fprintf(stderr, "moonrl: %s\n", why);
        return 2;
    }

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
    luaL_openlibs(L);
    static host_core core;
    core.loop = &loop;
    core.home = home_dir(&lib);
    open_modules(L, &core);
    if (host_library_open(L, &lib) != 0) {
        fprintf(stderr, "moonrl: this LuaJIT has no package.loaders: cannot install the moonrl module searcher\n");
        return 1;
    }
    host_env_set_library(&lib);

    /* arg[0] is the program, arg[1..] what the command line parser gets. */
    int nargs = argc - first;
    lua_createtable(L, nargs, 1);
    lua_pushstring(L, argv[0]);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < nargs; i++) {
        lua_pushstring(L, argv[first + i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, "arg");

    if (host_library_load(L, &lib, "moonrl.cli") != 0) {
        host_report("cannot load the command line", lua_tostring(L, -1));
        return 1;
    }
    for (int i = 0; i < nargs; i++) lua_pushstring(L, argv[first + i]);
    if (host_pcall(L, nargs, 0, 0) < 0) return 1;

    uv_run(&loop, UV_RUN_DEFAULT);

    /* Left early (core.shutdown) or finished: stop what still trains, close
     * what is still open, then let the close callbacks run. */
    host_runs_shutdown(&core.runs);
    host_evals_shutdown(&core.runs);
    /* Our own handles (runs' async, evaluations' progress) must be gone before luv's walk, which
     * takes every handle for one of its own. */
    uv_run(&loop, UV_RUN_NOWAIT);
    if (luaL_loadstring(L, "local uv = require 'luv'\n"
                           "uv.walk(function(h) if not h:is_closing() then h:close() end end)") == 0)
        host_pcall(L, 0, 0, 0);
    else
        lua_pop(L, 1);
    int code = core.exit_code;
    if (code == 0) print_library(nargs, argv + first, &lib);
    /* A clean end drains everything; an abandoned one (exit code set) does not
     * wait for evaluations still on the thread pool. */
    uv_run(&loop, code == 0 ? UV_RUN_DEFAULT : UV_RUN_NOWAIT);
    fflush(stdout);
    if (uv_loop_alive(&loop)) {   /* work still queued: do not run Lua after free */
        host_ranks_finish(code);
        _exit(code);
    }
    lua_close(L);
    uv_loop_close(&loop);
    return code;
}

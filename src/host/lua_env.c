/*
 * lua_env.c - environments written in Lua (env.name = lua; moonrl.h's
 * mr_env_program, docs/environments.md "An environment in Lua"): the host
 * owns their LuaJIT states, the engine calls them through the program's
 * function pointers and never links LuaJIT.
 *
 * One program per loaded file (its text, kept: the run steps what it was
 * started with, whatever happens to the file). Each OS thread that steps a
 * program gets its own Lua state for it, made on its first call and kept
 * for the process (OpenMP's threads live as long): the text loaded there by
 * moonrl.env.thread, whose loops over the thread's slice are the compiled
 * code. So no state is ever shared between threads, and the loop's main
 * state is never touched from another thread.
 *
 * The bounds (moonrl.env.program's LIMITS, a live file's): each state's
 * allocator refuses memory past memory_kib above what loading the file
 * took (LuaJIT then raises "not enough memory", reported naming the file);
 * the instructions are counted by the instrumented text.
 *
 *   core.env_program(text, label, checks, memory_kib) -> program (lightuserdata: mr_env_program *)
 *                                                       | nil, message
 *       loads the text in this thread's state, which writes what the file
 *       declares into the program; the program is never freed.
 *
 * host_env_program is the same from C (a data-parallel follower makes rank
 * 0's program from the text it is sent: ranks.c), host_env_program_source
 * what a program was made from.
 */
#include "host.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

extern const char mr_host_cdef[];   /* generated from moonrl.h (embed_cdef.cmake) */

#define ENV_MAX_THREADS 1024   /* OS threads that may step one program */

typedef struct env_alloc {
    size_t used, limit;
} env_alloc;

typedef struct env_thread {
    lua_State *L;
    env_alloc mem;
    int step_ref, reset_ref, handler_ref;
} env_thread;

typedef struct env_prog {
    mr_env_program prog;   /* first: the engine's pointer is this struct's */
    char *text;
    size_t len;
    int checks;
    size_t memory;         /* bytes a state may take beyond what loading took */
    env_thread *threads[ENV_MAX_THREADS];
} env_prog;

static const host_library *library;
static atomic_int next_slot;
static _Thread_local int my_slot = -1;

void host_env_set_library(const host_library *lib) { library = lib; }

static void *env_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
    env_alloc *a = ud;
    if (nsize == 0) {
        free(ptr);
        a->used -= ptr ? osize : 0;
        return NULL;
    }
    const size_t old = ptr ? osize : 0;
    if (nsize > old && a->used + (nsize - old) > a->limit) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) a->used = a->used - old + nsize;
    return p;
}

static void message(char *msg, size_t len, const char *fmt, const char *a, const char *b) {
    if (msg && len) snprintf(msg, len, fmt, a ? a : "", b ? b : "");
}

/* This thread's state for p, made on the first call: the library's
 * searcher, the text loaded by moonrl.env.thread; `fill` (the first state
 * only) gets the declarations written into p. NULL with msg on failure. */
static env_thread *thread_state(env_prog *p, int fill, char *msg, size_t len) {
    if (my_slot < 0) my_slot = atomic_fetch_add(&next_slot, 1);
    if (my_slot >= ENV_MAX_THREADS) {
        message(msg, len, "%s: more than 1024 threads have stepped Lua environments in this process%s", p->prog.label,
                NULL);
        return NULL;
    }
    if (p->threads[my_slot]) return p->threads[my_slot];
    env_thread *t = calloc(1, sizeof *t);
    if (!t) {
        message(msg, len, "%s: out of memory for a Lua state%s", p->prog.label, NULL);
        return NULL;
    }
    t->mem.limit = (size_t)-1;   /* loading is bounded by the instructions; then the memory limit */
    lua_State *L = lua_newstate(env_alloc_fn, &t->mem);
    if (!L) {
        free(t);
        message(msg, len, "%s: cannot create a Lua state (out of memory)%s", p->prog.label, NULL);
        return NULL;
    }
    luaL_openlibs(L);
    if (!library || host_library_open(L, library) != 0) {
        message(msg, len, "%s: the moonrl library is not available to a Lua environment's state%s", p->prog.label,
                NULL);
        lua_close(L);
        free(t);
        return NULL;
    }
    lua_getglobal(L, "require");
    lua_pushstring(L, "moonrl.env.thread");
    int rc = lua_pcall(L, 1, 1, 0);
    if (rc == 0) {
        lua_getfield(L, -1, "open");
        lua_pushstring(L, mr_host_cdef);
        lua_pushlstring(L, p->text, p->len);
        lua_pushstring(L, p->prog.label);
        lua_pushboolean(L, p->checks);
        if (fill) lua_pushlightuserdata(L, &p->prog);
        else lua_pushnil(L);
        rc = lua_pcall(L, 5, 3, 0);
    }
    if (rc != 0 || lua_isnil(L, -3)) {
        const char *why = lua_tostring(L, rc != 0 ? -1 : -2);   /* an error, or open's nil, message */
        if (msg && len) snprintf(msg, len, "%s", why ? why : "the Lua environment did not load");
        lua_close(L);
        free(t);
        return NULL;
    }
    t->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    t->reset_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    t->step_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    lua_gc(L, LUA_GCCOLLECT, 0);
    t->mem.limit = t->mem.used + p->memory;
    t->L = L;
    p->threads[my_slot] = t;
    return t;
}

static int call(env_prog *p, const mr_program_io *io, int i0, int i1, const void *actions, int step, char *msg,
                size_t len) {
    env_thread *t = thread_state(p, 0, msg, len);
    if (!t) return -1;
    lua_State *L = t->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->handler_ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, step ? t->step_ref : t->reset_ref);
    lua_pushlightuserdata(L, (void *)io);
    lua_pushinteger(L, i0);
    lua_pushinteger(L, i1);
    int nargs = 3;
    if (step) {
        lua_pushlightuserdata(L, (void *)actions);
        nargs = 4;
    }
    int rc = lua_pcall(L, nargs, 0, 1);
    if (rc == 0) {
        lua_settop(L, 0);
        return 0;
    }
    const char *why = lua_tostring(L, -1);
    if (rc == LUA_ERRMEM || rc == LUA_ERRERR || (why && strstr(why, "not enough memory"))) {
        if (msg && len)
            snprintf(msg, len, "%s: %s of instances %d .. %d went over a Lua environment's memory limit of %zu KiB "
                     "(a live file's)", p->prog.label, step ? "a step" : "a reset", i0, i1 - 1, p->memory / 1024);
    } else if (msg && len) {
        snprintf(msg, len, "%s", why ? why : "the Lua environment failed");
    }
    lua_settop(L, 0);
    lua_gc(L, LUA_GCCOLLECT, 0);
    return -1;
}

static int prog_step(void *user, const mr_program_io *io, int i0, int i1, const void *actions, char *msg, size_t len) {
    return call(user, io, i0, i1, actions, 1, msg, len);
}

static int prog_reset(void *user, const mr_program_io *io, int i0, int i1, char *msg, size_t len) {
    return call(user, io, i0, i1, NULL, 0, msg, len);
}

const mr_env_program *host_env_program(const char *text, size_t len, const char *label, int checks,
                                       size_t memory_kib, char *msg, size_t n) {
    env_prog *p = calloc(1, sizeof *p);
    char *copy = malloc(len + 1);
    if (!p || !copy) {
        free(p);
        free(copy);
        message(msg, n, "%s: out of memory for a Lua environment%s", label, NULL);
        return NULL;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    p->text = copy;
    p->len = len;
    p->checks = checks;
    p->memory = memory_kib * 1024;
    snprintf(p->prog.label, sizeof p->prog.label, "%s", label);
    p->prog.user = p;
    p->prog.step = prog_step;
    p->prog.reset = prog_reset;
    if (!thread_state(p, 1, msg, n)) {
        free(copy);
        free(p);
        return NULL;
    }
    mr_error err;
    if (mr_program_check(&p->prog, &err) != MR_OK) {
        /* its state stays with the thread's slot: the program is dropped, not freed (a state may point at it) */
        message(msg, n, "%s%s", err.msg, NULL);
        return NULL;
    }
    return &p->prog;
}

int host_env_program_source(const mr_env_program *prog, const char **text, size_t *len, int *checks,
                            size_t *memory_kib) {
    if (!prog || prog->step != prog_step) return -1;
    const env_prog *p = prog->user;
    *text = p->text;
    *len = p->len;
    *checks = p->checks;
    *memory_kib = p->memory / 1024;
    return 0;
}

static int core_env_program(lua_State *L) {
    size_t len = 0;
    const char *text = luaL_checklstring(L, 1, &len);
    const char *label = luaL_checkstring(L, 2);
    int checks = lua_toboolean(L, 3);
    lua_Integer kib = luaL_checkinteger(L, 4);
    luaL_argcheck(L, kib > 0, 4, "memory_kib must be > 0");
    char msg[MR_ERROR_LEN];
    const mr_env_program *p = host_env_program(text, len, label, checks, (size_t)kib, msg, sizeof msg);
    if (!p) {
        lua_pushnil(L);
        lua_pushstring(L, msg);
        return 2;
    }
    lua_pushlightuserdata(L, (void *)p);
    return 1;
}

void host_env_open(lua_State *L) {
    lua_pushcfunction(L, core_env_program);
    lua_setfield(L, -2, "env_program");
}

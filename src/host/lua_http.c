/*
 * lua_http.c - `core.http_parser(limits)`: HTTP/1.x request parsing for the
 * dashboard (lua/moonrl/dashboard/http.lua), by Node's http_parser (Debian's
 * libhttp-parser-dev 2.9.4, linked statically so a copied binary needs nothing).
 *
 * Why this shape: the server itself (the TCP socket, limits, timers) is luv
 * in Lua on the host's own loop, like the control socket; only the parsing,
 * which is where an HTTP server's subtle bugs live (chunked bodies, header
 * folding, request smuggling, overflows), is a well-kept C library. It is
 * called through this small C binding rather than LuaJIT's FFI because
 * http_parser calls back (on_url, on_header_field, ...): an FFI callback from
 * C that was called from JIT-compiled code is not allowed by LuaJIT, and the
 * struct's bit fields would be copied by hand into a cdef. Here the callbacks
 * only copy bytes into bounded buffers; Lua gets one table per request.
 *
 *   local p = core.http_parser{ max_head = 16384, max_body = 65536 }
 *   local req, err = p:feed(bytes)
 *     -> nil                 the request is not complete yet (feed more)
 *     -> req                 { method = "GET", url = "/x?y", headers = { ["host"] = "..." },
 *                              body = "...", http_major, http_minor } (header names lower-case;
 *                              a repeated header's values joined with ", ")
 *     -> false, message      a bad or too large request: what was wrong (the connection is
 *                              answered 400/413/431/501 and closed; err_kind says which)
 *   p:err_kind() -> "bad" | "head" | "body" | "coding" after an error
 * One request per parser (the dashboard answers with Connection: close).
 *
 * Strict where RFC 9112 says to refuse, which the Debian build of http_parser
 * (not HTTP_PARSER_STRICT) lets through: a header name that is not a token
 * ("Host : x", whitespace before the colon; 5.1), a line folded onto the one
 * before (obs-fold; 5.2), no Host or two (3.2), Transfer-Encoding in HTTP/1.0
 * (6.1) are "bad" (400); a transfer coding other than exactly "chunked"
 * ("gzip, chunked", chunked twice) is "coding" (501, 6.1). A chunked body's
 * trailer fields are counted against max_head and dropped, never merged
 * into the headers (7.1.2).
 */
#include "host.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <lauxlib.h>

#define MAX_HEADERS 64

typedef struct {
    http_parser p;
    size_t max_head, max_body;
    char *head;          /* url, then header names and values, each 0-terminated */
    size_t head_len;
    char *body;
    size_t body_len;
    size_t url_end;      /* head[0..url_end) is the url */
    size_t name_at[MAX_HEADERS], value_at[MAX_HEADERS];
    int nheaders, in_value, done, failed;
    int headers_done;    /* past the header section: what comes now is a trailer */
    size_t trailer_len;  /* trailer bytes seen (bounded with the head, then dropped) */
    int line_start, lines, head_over;   /* the raw header section as scanned for folds */
    const char *kind;    /* "bad" | "head" | "body" | "coding" */
    char err[320];
} http_req;

static http_req *of(http_parser *p) { return (http_req *)p->data; }

static int fail(http_req *r, const char *kind, const char *msg) {
    r->kind = kind;
    snprintf(r->err, sizeof r->err, "%s", msg);
    return 1;
}

/* Appends to the head buffer (bounded by max_head in all). */
static int head_add(http_req *r, const char *at, size_t n) {
    if (r->head_len + n + 1 > r->max_head) return fail(r, "head", "the request line and headers are too large");
    memcpy(r->head + r->head_len, at, n);
    r->head_len += n;
    r->head[r->head_len] = '\0';
    return 0;
}

static int head_end_string(http_req *r) {
    if (r->head_len + 1 > r->max_head) return fail(r, "head", "the request line and headers are too large");
    r->head[r->head_len++] = '\0';
    r->head[r->head_len] = '\0';
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
    http_req *r = of(p);
    if (head_add(r, at, n)) return 1;
    r->url_end = r->head_len;
    return 0;
}

/* A trailer field (after a chunked body): counted against max_head, dropped. */
static int trailer(http_req *r, size_t n) {
    r->trailer_len += n;
    if (r->head_len + r->trailer_len > r->max_head) return fail(r, "head", "the request line, headers and trailer are too large");
    return 0;
}

static int on_field(http_parser *p, const char *at, size_t n) {
    http_req *r = of(p);
    if (r->headers_done) return trailer(r, n);
    if (r->nheaders == 0 || r->in_value) {   /* a new header name starts */
        if (r->nheaders >= MAX_HEADERS) return fail(r, "head", "more than 64 headers");
        if (head_end_string(r)) return 1;
        r->name_at[r->nheaders] = r->head_len;
        r->value_at[r->nheaders] = (size_t)-1;
        r->nheaders++;
        r->in_value = 0;
    }
    return head_add(r, at, n);
}

static int on_value(http_parser *p, const char *at, size_t n) {
    http_req *r = of(p);
    if (r->headers_done) return trailer(r, n);
    if (!r->in_value) {
        if (head_end_string(r)) return 1;
        r->value_at[r->nheaders - 1] = r->head_len;
        r->in_value = 1;
    }
    return head_add(r, at, n);
}

/* RFC 9110 5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
static int tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* name, as a message may show it: printable ASCII, the rest as \xNN, at most 40 bytes of it */
static void shown(char *out, size_t cap, const char *name) {
    size_t o = 0;
    for (size_t i = 0; name[i] && i < 40 && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02X", c);
    }
    out[o] = '\0';
}

static int ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
        if (x != *b) return 0;
    }
    return *a == *b;
}

/* Refuses what RFC 9112 refuses (see the top): -> 0, or 1 with r->kind and r->err set. */
static int check_head(http_req *r) {
    int hosts = 0, codings = 0, chunked_last = 0, te = 0;
    char what[168];   /* 40 bytes, each at most \\xNN */
    for (int i = 0; i < r->nheaders; i++) {
        const char *name = r->head + r->name_at[i];
        for (const char *c = name; *c; c++) {
            if (!tchar((unsigned char)*c)) {
                shown(what, sizeof what, name);
                snprintf(r->err, sizeof r->err, "malformed HTTP request: the header name \"%s\" holds %s (RFC 9112 5.1: "
                         "a name is a token, right before its colon)", what,
                         (*c == ' ' || *c == '\t') ? "whitespace" : "a character a header name cannot hold");
                r->kind = "bad";
                return 1;
            }
        }
        if (ieq(name, "host")) hosts++;
        if (ieq(name, "transfer-encoding")) {
            te = 1;
            const char *v = r->value_at[i] == (size_t)-1 ? "" : r->head + r->value_at[i];
            /* the codings, comma-separated, each trimmed of whitespace; an empty value is not chunked */
            int here = 0;
            while (*v) {
                while (*v == ' ' || *v == '\t' || *v == ',') v++;
                if (!*v) break;
                const char *e = v;
                while (*e && *e != ',') e++;
                const char *t = e;
                while (t > v && (t[-1] == ' ' || t[-1] == '\t')) t--;
                here++;
                chunked_last = (t - v == 7 && strncasecmp(v, "chunked", 7) == 0);
                v = e;
            }
            if (!here) chunked_last = 0, here = 1;
            codings += here;
        }
    }
    if (hosts > 1) {
        snprintf(r->err, sizeof r->err, "malformed HTTP request: two Host headers (RFC 9112 3.2: exactly one)");
        r->kind = "bad";
        return 1;
    }
    if (hosts == 0 && r->p.http_major == 1 && r->p.http_minor >= 1) {
        snprintf(r->err, sizeof r->err, "malformed HTTP request: no Host header (RFC 9112 3.2: an HTTP/1.1 request "
                 "has a Host header)");
        r->kind = "bad";
        return 1;
    }
    if (te && r->p.http_major == 1 && r->p.http_minor == 0) {
        snprintf(r->err, sizeof r->err, "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1)");
        r->kind = "bad";
        return 1;
    }
    if (te && !(codings == 1 && chunked_last)) {
        snprintf(r->err, sizeof r->err, "unsupported transfer coding: only \"Transfer-Encoding: chunked\" is accepted "
                 "(RFC 9112 6.1)");
        r->kind = "coding";
        return 1;
    }
    return 0;
}

static int on_headers_complete(http_parser *p) {
    http_req *r = of(p);
    if (head_end_string(r)) return 1;
    r->headers_done = 1;
    if (check_head(r)) {
        http_parser_pause(p, 1);   /* as below: returning 1 would mean "no body" */
        return 0;
    }
    if (p->content_length != ULLONG_MAX && p->content_length > r->max_body) {
        /* returning 1 here would mean "no body" to http_parser: stop it instead */
        fail(r, "body", "the request body is too large");
        http_parser_pause(p, 1);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
    http_req *r = of(p);
    if (r->body_len + n > r->max_body) return fail(r, "body", "the request body is too large");
    if (!r->body) {
        r->body = malloc(r->max_body + 1);
        if (!r->body) return fail(r, "body", "out of memory");
    }
    memcpy(r->body + r->body_len, at, n);
    r->body_len += n;
    return 0;
}

static int on_message_complete(http_parser *p) {
    of(p)->done = 1;
    http_parser_pause(p, 1);   /* one request: what follows is not read */
    return 0;
}

static const http_parser_settings settings = {
    .on_url = on_url,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

#define META "moonrl.http_parser"

static http_req *check(lua_State *L) { return luaL_checkudata(L, 1, META); }

static void lower(char *s) {
    for (; *s; s++) if (*s >= 'A' && *s <= 'Z') *s = (char)(*s - 'A' + 'a');
}

static void push_request(lua_State *L, http_req *r) {
    lua_createtable(L, 0, 6);
    lua_pushstring(L, http_method_str((enum http_method)r->p.method));
    lua_setfield(L, -2, "method");
    lua_pushlstring(L, r->head, r->url_end);
    lua_setfield(L, -2, "url");
    lua_pushinteger(L, r->p.http_major);
    lua_setfield(L, -2, "http_major");
    lua_pushinteger(L, r->p.http_minor);
    lua_setfield(L, -2, "http_minor");
    lua_pushlstring(L, r->body ? r->body : "", r->body_len);
    lua_setfield(L, -2, "body");
    lua_createtable(L, 0, r->nheaders);
    for (int i = 0; i < r->nheaders; i++) {
        char *name = r->head + r->name_at[i];
        const char *value = r->value_at[i] == (size_t)-1 ? "" : r->head + r->value_at[i];
        lower(name);
        lua_getfield(L, -1, name);
        if (lua_isstring(L, -1)) {          /* a repeated header: joined as RFC 9110 allows */
            lua_pushstring(L, ", ");
            lua_pushstring(L, value);
            lua_concat(L, 3);
        } else {
            lua_pop(L, 1);
            lua_pushstring(L, value);
        }
        lua_setfield(L, -2, name);
    }
    lua_setfield(L, -2, "headers");
}

/* A header line that starts with whitespace: a line folded onto the one before
 * (obs-fold), or whitespace between the request line and the first header; RFC
 * 9112 5.2 and 2.2 let a server refuse both. Scans the raw header section, up
 * to its blank line (blank lines before the request line are skipped, as
 * http_parser skips them). -> 1 with r->err set. */
static int scan_folds(http_req *r, const char *data, size_t n) {
    for (size_t i = 0; i < n && !r->head_over; i++) {
        char c = data[i];
        if (c == '\r') continue;
        if (c == '\n') {
            if (r->line_start && r->lines > 0) r->head_over = 1;   /* the blank line */
            else if (!r->line_start) r->lines++;
            r->line_start = 1;
            continue;
        }
        if (r->line_start && r->lines > 0 && (c == ' ' || c == '\t')) {
            r->kind = "bad";
            snprintf(r->err, sizeof r->err, "malformed HTTP request: a header line folded onto the one before, or "
                     "starting with whitespace (RFC 9112 5.2: obs-fold is refused)");
            return 1;
        }
        r->line_start = 0;
    }
    return 0;
}

static int parser_feed(lua_State *L) {
    http_req *r = check(L);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    if (r->failed) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, r->err);
        return 2;
    }
    if (r->done) return 0;
    if (scan_folds(r, data, n)) {
        r->failed = 1;
        lua_pushboolean(L, 0);
        lua_pushstring(L, r->err);
        return 2;
    }
    size_t used = http_parser_execute(&r->p, &settings, data, n);
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    if (r->kind) {   /* a callback refused: too large */
        r->failed = 1;
        lua_pushboolean(L, 0);
        lua_pushstring(L, r->err);
        return 2;
    }
    if (r->done) {
        push_request(L, r);
        return 1;
    }
    if (e != HPE_OK || used != n) {
        r->failed = 1;
        if (!r->kind) {
            r->kind = "bad";
            snprintf(r->err, sizeof r->err, "malformed HTTP request: %s (%s)", http_errno_description(e),
                     http_errno_name(e));
        }
        lua_pushboolean(L, 0);
        lua_pushstring(L, r->err);
        return 2;
    }
    return 0;
}

static int parser_err_kind(lua_State *L) {
    http_req *r = check(L);
    lua_pushstring(L, r->kind ? r->kind : "bad");
    return 1;
}

static int parser_gc(lua_State *L) {
    http_req *r = check(L);
    free(r->head);
    free(r->body);
    r->head = r->body = NULL;
    return 0;
}

static size_t opt_size(lua_State *L, const char *key, size_t def, size_t max) {
    lua_getfield(L, 1, key);
    size_t v = def;
    if (lua_isnumber(L, -1)) {
        lua_Number x = lua_tonumber(L, -1);
        if (!(x >= 64 && x <= (lua_Number)max))
            luaL_error(L, "http_parser: %s must be a number of bytes from 64 to %d", key, (int)max);
        v = (size_t)x;
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "http_parser: %s must be a number of bytes", key);
    }
    lua_pop(L, 1);
    return v;
}

static int new_parser(lua_State *L) {
    size_t max_head = 16384, max_body = 65536;
    if (lua_istable(L, 1)) {
        max_head = opt_size(L, "max_head", max_head, 1 << 20);
        max_body = opt_size(L, "max_body", max_body, 16 << 20);
    }
    http_req *r = lua_newuserdata(L, sizeof *r);
    memset(r, 0, sizeof *r);
    r->max_head = max_head;
    r->max_body = max_body;
    r->head = malloc(max_head + 1);
    if (!r->head) return luaL_error(L, "http_parser: out of memory");
    r->head[0] = '\0';
    r->line_start = 1;
    http_parser_init(&r->p, HTTP_REQUEST);
    r->p.data = r;
    luaL_getmetatable(L, META);
    lua_setmetatable(L, -2);
    return 1;
}

void host_http_open(lua_State *L) {
    if (luaL_newmetatable(L, META)) {
        lua_pushcfunction(L, parser_gc);
        lua_setfield(L, -2, "__gc");
        lua_createtable(L, 0, 2);
        lua_pushcfunction(L, parser_feed);
        lua_setfield(L, -2, "feed");
        lua_pushcfunction(L, parser_err_kind);
        lua_setfield(L, -2, "err_kind");
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, new_parser);
    lua_setfield(L, -2, "http_parser");
}

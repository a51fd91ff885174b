/*
 * errors.c - status names and filling mr_error: the one place every message
 * of the engine is formatted (errors.h). Depends on nothing but moonrl.h.
 */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>

const char *mr_version(void) { return MR_VERSION_STRING; }

const char *mr_status_name(mr_status s) {
    switch (s) {
    case MR_OK: return "ok";
    case MR_ERR_ARG: return "bad argument";
    case MR_ERR_NOMEM: return "out of memory";
    case MR_ERR_IO: return "i/o error";
    case MR_ERR_FORMAT: return "bad file format";
    case MR_ERR_BACKEND: return "backend unavailable";
    case MR_ERR_STATE: return "bad state";
    case MR_ERR_NUMERIC: return "non-finite value";
    }
    return "unknown status";
}

mr_status mr_fail(mr_error *err, mr_status s, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = s;
    }
    return s;
}

void mr_ok(mr_error *err) {
    if (err) { err->status = MR_OK; err->msg[0] = 0; }
}


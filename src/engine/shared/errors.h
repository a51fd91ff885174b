/* errors.h - filling mr_error: one helper so every message is built the same way. */
#ifndef MR_ERRORS_H
#define MR_ERRORS_H
#include "moonrl.h"

/* Fills err (if not NULL) with status s and a printf-style message; returns s. */
mr_status mr_fail(mr_error *err, mr_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mr_ok(mr_error *err);

/* Returns the call's status from the enclosing function unless it is MR_OK. */
#define TRY(call)                     \
    do {                              \
        mr_status st_ = (call);       \
        if (st_ != MR_OK) return st_; \
    } while (0)
#endif

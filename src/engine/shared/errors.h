/* errors.h - filling mr_error: one helper so every message is built the same way. */
#ifndef MR_ERRORS_H
#define MR_ERRORS_H
#include "moonrl.h"

/* Fills err (if not NULL) with status s and a printf-style message; returns s. */
mr_status mr_fail(mr_error *err, mr_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mr_ok(mr_error *err);
#endif

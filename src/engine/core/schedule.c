/*
 * schedule.c - a schedule's value at a point of training, the one place it is
 * computed: the trainer (each update's hot values), the host's trainer
 * thread (the tables of Lua-function schedules) and Lua (moonrl.schedule,
 * through the FFI) all call mr_schedule_value (declared in moonrl.h).
 *
 * progress is clamped to [0, 1] (NaN reads as 0). MR_SCHED_STEP: start *
 * gamma^floor(p / every + 1e-9) (the 1e-9 keeps p = k*every, computed as
 * k/total, on the step it names), then clamped so it never passes `end` in
 * the direction of travel (start > end: >= end; start < end: <= end; start
 * == end: = end). every <= 0 means no steps. An unknown kind returns NaN
 * (mr_config_validate rejects it first).
 */
#include "moonrl.h"

#include <math.h>

static const double PI = 3.14159265358979323846;

double mr_schedule_value(const mr_schedule *s, double progress) {
    double p = progress > 0.0 ? progress : 0.0;    /* NaN reads as 0 */
    if (p > 1.0) p = 1.0;
    switch (s->kind) {
    case MR_SCHED_CONSTANT:
        return s->start;
    case MR_SCHED_LINEAR:            /* written so p = 0 and p = 1 are exact */
        return (1.0 - p) * s->start + p * s->end;
    case MR_SCHED_COSINE: {
        double w = 0.5 * (1.0 + cos(PI * p));
        return (1.0 - w) * s->end + w * s->start;
    }
    case MR_SCHED_STEP: {
        /* + 1e-9: progress k/total at a step boundary must land on that step
         * (0.3 / 0.1 is 2.9999999999999996 in double). */
        double k = s->every > 0.0 ? floor(p / s->every + 1e-9) : 0.0;
        double v = s->start * pow(s->gamma, k);
        if (s->start > s->end) { if (v < s->end) v = s->end; }
        else if (s->start < s->end) { if (v > s->end) v = s->end; }
        else v = s->end;
        return v;
    }
    default:
        return NAN;
    }
}

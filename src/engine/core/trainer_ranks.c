/*
 * trainer_ranks.c - what a trainer does as one rank of a data-parallel run
 * (docs/data-parallel.md): the reducer the host gives it, and the update's
 * statistics taken over every rank's samples. The gradient's average is
 * one call in trainer.c's optimise; nothing here knows the transport (MPI in
 * the host, NCCL later).
 */
#include "trainer.h"
#include "errors.h"

#include <math.h>
#include <string.h>

void mr_trainer_set_reducer(mr_trainer *t, const mr_reducer *r) {
    if (!t) return;
    if (r) t->reducer = *r;
    else memset(&t->reducer, 0, sizeof t->reducer);
}

/* Data-parallel statistics: this rank's mean and (unbiased) std of x (B
 * values: returns for PopArt, advantages for their normalisation), summed
 * over the ranks as (count, sum, sum of squares); the global mean and std
 * into out2 (2 doubles on the device); *n the global count. */
mr_status mr_trainer_global_stats(mr_trainer *t, const float *x, double *out2, int64_t *n, mr_error *err) {
    const mr_backend *o = t->be;
    mr_trainer_dev *d = &t->d;
    void *st = t->stream;
    const int64_t B = t->B;
    double ms[2];
    TRY(o->mean_std(x, B, d->partials, out2, st, err));
    TRY(o->copy(ms, out2, sizeof ms, MR_COPY_D2H, st, err));
    TRY(o->stream_sync(st, err));
    const double nb = (double)B;
    double v[3] = {nb, nb * ms[0], ms[1] * ms[1] * (nb - 1.0) + nb * ms[0] * ms[0]};
    TRY(t->reducer.sum(t->reducer.ctx, v, 3, err));
    const double mean = v[1] / v[0], m2 = v[2] - v[0] * mean * mean;
    ms[0] = mean;
    ms[1] = v[0] > 1.0 && m2 > 0.0 ? sqrt(m2 / (v[0] - 1.0)) : 0.0;
    TRY(o->copy(out2, ms, sizeof ms, MR_COPY_H2D, st, err));
    TRY(o->stream_sync(st, err));   /* ms is on this stack */
    *n = (int64_t)v[0];
    return MR_OK;
}


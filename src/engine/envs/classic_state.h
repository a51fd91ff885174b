/*
 * classic_state.h - the own state of the classic-control environments
 * (cartpole.h, pendulum.h): each instance's physical state as `dims`
 * doubles and its full resets (the reset draws' counter), with their
 * layout and checkpoint sections. The interface's buffers (env_state.h)
 * hold the rest: the float observation, reward, end flags, steps, tick,
 * the episode's return, the logs.
 */
#ifndef MR_CLASSIC_STATE_H
#define MR_CLASSIC_STATE_H
#include <stdint.h>
#if !defined(__CUDA_ARCH__)
#include <string.h>
#endif
#include "env_state.h"

typedef struct mr_classic {
    double *state;                  /* (n, dims) */
    uint32_t *resets;               /* (n) */
} mr_classic;

MR_HD mr_classic *mr_classic_of(const mr_env_state *s) { return (mr_classic *)(void *)s->own.bytes; }

/* A new episode's bookkeeping (the caller has drawn the state and writes
 * the observation): the reset counted, the episode's steps and return 0. */
MR_HD void mr_classic_started(const mr_env_state *s, int i) {
    mr_classic_of(s)->resets[i] += 1;
    s->steps[i] = 0;
    s->ep_return[i] = 0.0f;
}

/* The full reset's end flags, after the environment's start. */
MR_HD void mr_classic_fresh(const mr_env_state *s, int i) {
    s->reward[i] = 0.0f;
    s->terminated[i] = 0;
    s->truncated[i] = 0;
}

#if !defined(__CUDACC__)
static inline void mr_classic_layout(mr_env_state *s, int dims, mr_arena *a) {
    mr_classic *c = mr_classic_of(s);
    c->state = MR_TAKE(a, double, (size_t)s->n * (size_t)dims);
    c->resets = MR_TAKE(a, uint32_t, s->n);
}

/* The buffers a checkpoint saves ("env.<name>"); returns their count. */
static inline int mr_classic_sections(const mr_env_state *s, int dims, mr_env_section *o) {
    const mr_classic *c = mr_classic_of(s);
    const size_t n = (size_t)s->n;
    int k = 0;
#define MR_SEC_(nm, p, b) (o[k].name = (nm), o[k].data = (void *)(p), o[k].bytes = (b), k++)
    MR_SEC_("env.state", c->state, n * (size_t)dims * sizeof(double));
    MR_SEC_("env.resets", c->resets, n * sizeof(uint32_t));
    MR_SEC_("env.steps", s->steps, n * sizeof(int32_t));
    MR_SEC_("env.tick", s->tick, n * sizeof(uint32_t));
    MR_SEC_("env.obs", s->obs_f, n * (size_t)s->obs_size * sizeof(float));
    MR_SEC_("env.ep_return", s->ep_return, n * sizeof(float));
#undef MR_SEC_
    return k;
}
#endif

#endif /* MR_CLASSIC_STATE_H */

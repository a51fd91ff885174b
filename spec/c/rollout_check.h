/*
 * rollout_check.h - a trainer's last rollout read back into host arrays
 * (mr_trainer_read_rollout), for the tests that compare rollouts.
 */
#ifndef MR_ROLLOUT_CHECK_H
#define MR_ROLLOUT_CHECK_H
#include "check.h"
#include "trainer.h"

/* A rollout read back with mr_trainer_read_rollout. */
typedef struct roll {
    int T, N, VV, AB;   /* AB: bytes of one action (act is (T*N, AB)) */
    uint8_t *obs, *act, *done;
    float *extra, *logp, *val, *rew, *adv, *ret, *last_value;
} roll;

static inline int roll_read(mr_trainer *t, roll *r) {
    const size_t B = (size_t)t->B;
    r->T = t->T;
    r->N = t->N;
    r->VV = t->VV;
    r->obs = malloc(B * (size_t)t->VV);
    r->AB = t->AB;
    r->act = malloc(B * (size_t)t->AB);
    r->done = malloc(B);
    r->extra = malloc(B * 8);
    r->logp = malloc(B * 4);
    r->val = malloc(B * 4);
    r->rew = malloc(B * 4);
    r->adv = malloc(B * 4);
    r->ret = malloc(B * 4);
    r->last_value = malloc((size_t)t->N * 4);
    mr_rollout_view v = {r->obs, r->act, r->done, r->extra, r->logp, r->val, r->rew, r->adv, r->ret, r->last_value};
    mr_error e;
    const mr_status s = mr_trainer_read_rollout(t, &v, &e);
    CHECK_MSG(s == MR_OK, "read_rollout: %s", e.msg);
    return s == MR_OK;
}

static inline void roll_free(roll *r) {
    free(r->obs); free(r->act); free(r->done); free(r->extra); free(r->logp);
    free(r->val); free(r->rew); free(r->adv); free(r->ret); free(r->last_value);
}

#endif

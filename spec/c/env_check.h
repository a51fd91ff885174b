/*
 * env_check.h - what the foraging environment's tests (test_env_*.c) share:
 * ENV_SPEC.md's reward and action tables written out literally, an env made
 * from a config or the test stops, the count of a code on a grid, and the
 * observation read directly with modulo arithmetic (ENV_SPEC's formula).
 */
#ifndef MR_ENV_CHECK_H
#define MR_ENV_CHECK_H
#include "check.h"
#include "env.h"
#include "registry.h"   /* the environments' own state (mr_forage_of) */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ENV_SPEC's reward table, literally. */
static const float REF_FOOD[4] = {1.0f, 1.0f, 1.0f, 1.0f};
static const float REF_POISON[4] = {-2.0f, -2.0f, 0.5f, 0.5f};
static const float REF_STEP[4] = {-0.01f, -0.01f, 0.0f, 0.0f};
static const float REF_DEATH[4] = {-4.0f, -4.0f, 0.0f, 0.0f};
/* ENV_SPEC's action table, literally. */
static const int REF_DX[8] = {-1, -1, -1, 0, 0, 1, 1, 1};
static const int REF_DY[8] = {-1, 0, 1, -1, 1, -1, 0, 1};

static inline mr_env_config make_cfg(int mode, int n, int grid, int view, int dmin, int dmax, int tries,
                                     int max_steps) {
    mr_env_config c = {mode, n, grid, view, dmin, dmax, tries, max_steps, MR_ENV_FORAGING, 0, NULL};
    return c;
}

static inline mr_env *make_env(const mr_env_config *c, uint64_t seed, int threads) {
    mr_env *e = NULL;
    mr_error err;
    if (mr_env_create(c, seed, MR_DEVICE_CPU, threads, &e, &err) != MR_OK) {
        fprintf(stderr, "mr_env_create failed: %s\n", err.msg);
        exit(1);
    }
    return e;
}

/* Whether a and b hold the same state (every checkpoint section, reward,
 * the end flags, the logs): NULL, or the first differing buffer's name. */
static inline const char *env_first_difference(const mr_env *a, const mr_env *b) {
    mr_env_section sa[MR_ENV_MAX_SECTIONS], sb[MR_ENV_MAX_SECTIONS];
    const int k = mr_env_sections(&a->s, sa);
    mr_env_sections(&b->s, sb);
    for (int j = 0; j < k; j++)
        if (memcmp(sa[j].data, sb[j].data, sa[j].bytes) != 0) return sa[j].name;
    const size_t n = (size_t)a->s.n;
    if (memcmp(a->s.reward, b->s.reward, n * sizeof(float)) != 0) return "reward";
    if (memcmp(a->s.terminated, b->s.terminated, n) != 0) return "terminated";
    if (memcmp(a->s.truncated, b->s.truncated, n) != 0) return "truncated";
    if (memcmp(a->s.log, b->s.log, n * sizeof(mr_env_log)) != 0) return "log";
    return NULL;
}

static inline int count_code(const uint8_t *g, int cells, int code) {
    int k = 0;
    for (int c = 0; c < cells; c++) k += g[c] == code;
    return k;
}

static inline int wrap(int v, int m) { return ((v % m) + m) % m; }

/* err's message has s in it */
static inline int msg_has(const mr_error *e, const char *s) { return strstr(e->msg, s) != NULL; }

/* The observation read directly with modulo arithmetic, ENV_SPEC's formula. */
static inline int obs_matches_grid(const mr_env_state *s, int i) {
    const uint8_t *g = mr_forage_of(s)->grid + (size_t)i * mr_forage_of(s)->H * mr_forage_of(s)->W;
    const uint8_t *o = s->obs + (size_t)i * mr_forage_of(s)->V * mr_forage_of(s)->V;
    for (int a = 0; a < mr_forage_of(s)->V; a++)
        for (int b = 0; b < mr_forage_of(s)->V; b++) {
            int r = wrap(mr_forage_of(s)->y[i] - mr_forage_of(s)->view + a, mr_forage_of(s)->H), c = wrap(mr_forage_of(s)->x[i] - mr_forage_of(s)->view + b, mr_forage_of(s)->W);
            if (o[a * mr_forage_of(s)->V + b] != g[r * mr_forage_of(s)->W + c]) return 0;
        }
    return 1;
}
#endif

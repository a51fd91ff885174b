/*
 * test_env_program.c - an environment the host runs (env.name = lua;
 * moonrl.h's mr_env_program, envs/program.c, cpu/env_cpu.c's slices),
 * driven here by a program written in C with the Lua driver's protocol
 * (lua/moonrl/env/thread.lua: the rules, then mr_program_end_step, a new
 * episode's reset and resets[i] + 1), against a model of the same rules
 * kept on plain arrays beside it:
 *   - the layout: the declared fields (types, counts), their sections;
 *   - every step: reward (clamped), end flags, truncation at the smaller of
 *     the program's limit and env.max_episode_steps, the logs (episodes,
 *     returns, the counters' count and count_total);
 *   - one call per thread's slice, the same bytes for 1 and 2 threads; the
 *     failing slice of the lowest instances reported;
 *   - mr_program_end_steps (a slice ended at once, as a step_slice's driver
 *     does) against mr_program_end_step per instance, byte for byte, and
 *     mr_program_sincos against sin and cos;
 *   - what the check refuses (names, types, counts, sizes, spaces), the
 *     config check (no program, fields over 1 TiB), the cuda refusal, a
 *     program without calls (a checkpoint's stand-in).
 */
#include "env_check.h"
#include "program.h"

#include <stdatomic.h>

/* The rules: pos (int32) moves by +1 (action 1) or -1 (action 0); v (double[2])
 * keeps (steps, the sum of the actions); the reward is 30 x action - 1 (so 29
 * is clamped to 20); the episode terminates at pos = 3; counter 0 ("ones")
 * counts the action-1 steps. A reset: pos = 0, v = (0, resets). */
static atomic_int calls;
static int fail_from = -1, fail_from2 = -1;   /* a step of an instance >= these fails (-1: never) */

static int rules_reset(void *user, const mr_program_io *io, int i0, int i1, char *msg, size_t len) {
    (void)user; (void)msg; (void)len;
    int32_t *pos = io->field[1];   /* the fields in make_program's order: v, pos */
    double *v = io->field[0];
    atomic_fetch_add(&calls, 1);
    for (int i = i0; i < i1; i++) {
        mr_program_begin(io->state, i);
        pos[i] = 0;
        v[2 * i] = 0;
        v[2 * i + 1] = io->resets[i];
        io->obs_f[i] = (float)pos[i];
        io->resets[i] += 1;
    }
    return 0;
}

static int by_slice;   /* 1: the rules as a step_slice steps them: reward and terminated into io's arrays, then
                          mr_program_end_steps once for the slice, then the ended ones' resets */

static void rules_restart(const mr_program_io *io, int i) {
    int32_t *pos = io->field[1];
    double *v = io->field[0];
    pos[i] = 0;
    v[2 * i] = 0;
    v[2 * i + 1] = io->resets[i];
    io->obs_f[i] = 0.0f;
    io->resets[i] += 1;
}

static int rules_step(void *user, const mr_program_io *io, int i0, int i1, const void *actions, char *msg,
                      size_t len) {
    (void)user;
    const uint8_t *a = actions;
    int32_t *pos = io->field[1];
    double *v = io->field[0];
    atomic_fetch_add(&calls, 1);
    for (int i = i0; i < i1; i++) {
        if ((fail_from >= 0 && i >= fail_from) || (fail_from2 >= 0 && i >= fail_from2)) {
            snprintf(msg, len, "failed at instance %d", i);
            return -1;
        }
        pos[i] += a[i] ? 1 : -1;
        v[2 * i] += 1;
        v[2 * i + 1] += a[i];
        if (io->counters > 0) io->count[0][i] += a[i];
        io->obs_f[i] = (float)pos[i];
        if (by_slice) {
            io->reward[i] = 30.0f * a[i] - 1.0f;
            io->terminated[i] = pos[i] == 3;
        } else if (mr_program_end_step(io->state, i, 30.0f * a[i] - 1.0f, pos[i] == 3)) {
            rules_restart(io, i);
        }
    }
    if (by_slice) {
        int32_t ended[4096];
        const int m = mr_program_end_steps(io->state, i0, i1, ended);
        for (int k = 0; k < m; k++) {
            CHECK(ended[k] >= i0 && ended[k] < i1 && (k == 0 || ended[k] > ended[k - 1]));
            rules_restart(io, ended[k]);
        }
    }
    return 0;
}

static mr_env_program make_program(int max_steps) {
    mr_env_program p;
    memset(&p, 0, sizeof p);
    snprintf(p.label, sizeof p.label, "walk.lua");
    p.spaces.obs.kind = MR_SPACE_VECTOR;
    p.spaces.obs.shape[0] = 1;
    p.spaces.obs.shape[1] = p.spaces.obs.shape[2] = 1;
    p.spaces.act.kind = MR_SPACE_DISCRETE;
    p.spaces.act.n = 2;
    p.spaces.counters = 1;
    snprintf(p.counter_name[0], sizeof p.counter_name[0], "ones");
    p.max_steps = max_steps;
    p.fields = 2;
    snprintf(p.field[0].name, sizeof p.field[0].name, "v");
    p.field[0].type = MR_FIELD_DOUBLE;
    p.field[0].count = 2;
    snprintf(p.field[1].name, sizeof p.field[1].name, "pos");
    p.field[1].type = MR_FIELD_INT32;
    p.field[1].count = 1;
    p.step = rules_step;
    p.reset = rules_reset;
    return p;
}

static mr_env_config prog_cfg(const mr_env_program *p, int n, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, 16, 1, 1, 2, 50, max_steps);
    c.name = MR_ENV_LUA;
    c.program = p;
    return c;
}

static void test_check(void) {
    mr_error err;
    mr_env_program p = make_program(10);
    CHECK_MSG(mr_program_check(&p, &err) == MR_OK, "%s", err.msg);
    CHECK(strcmp(p.field[0].section, "env.v") == 0 && strcmp(p.spaces.counter_names[0], "ones") == 0);
    mr_env_program q;
#define REFUSED(stmt, want) do { q = make_program(10); stmt; \
        CHECK_MSG(mr_program_check(&q, &err) == MR_ERR_ARG && msg_has(&err, want) && msg_has(&err, "walk.lua"), \
                  "%s: %s", #stmt, err.msg); } while (0)
    REFUSED(snprintf(q.field[0].name, 32, "1x"), "field '1x'");
    REFUSED(snprintf(q.field[0].name, 32, "obs"), "field 'obs'");
    REFUSED(snprintf(q.field[1].name, 32, "v"), "declared twice");
    REFUSED(snprintf(q.field[1].name, 32, "ones"), "counter's name");
    REFUSED(q.field[0].type = 9, "accepted double, float, int32, uint32, uint8");
    REFUSED(q.field[0].count = 0, "accepted 1 .. 16777216");
    REFUSED(q.field[0].count = MR_PROGRAM_MAX_COUNT + 1, "accepted 1 .. 16777216");
    REFUSED((q.field[0].count = MR_PROGRAM_MAX_COUNT, q.field[1].count = MR_PROGRAM_MAX_COUNT,
             q.field[1].type = MR_FIELD_DOUBLE, q.fields = 3, snprintf(q.field[2].name, 32, "w"),
             q.field[2].type = MR_FIELD_UINT8, q.field[2].count = 1), "bytes per instance");   /* 2^28 + 1 */
    REFUSED(q.fields = MR_PROGRAM_MAX_FIELDS + 1, "accepted 0 .. 16");
    REFUSED(q.spaces.obs.kind = MR_SPACE_CODES, "vector of floats");
    REFUSED(q.spaces.obs.shape[0] = 0, "accepted 1 .. 65536");
    REFUSED(q.spaces.act.n = 9, "accepted 2 .. 8");
    REFUSED((q.spaces.act.kind = MR_SPACE_BOX, q.spaces.act.n = 1, q.spaces.act.low[0] = 1, q.spaces.act.high[0] = 1),
            "low < high");
    REFUSED(q.spaces.act.kind = MR_SPACE_MULTI_DISCRETE, "discrete = N");
    REFUSED(snprintf(q.counter_name[0], 32, "a b"), "expected a name");
    REFUSED((q.spaces.success = MR_SUCCESS_COUNTER, q.spaces.success_counter = 1), "success names counter 2");
    REFUSED(q.spaces.critic_extra = 1, "privileged critic");
    REFUSED(q.step = NULL, "no step or reset");
    REFUSED(q.max_steps = -1, "max_steps = -1");
#undef REFUSED
    /* the config check: a program is needed; all fields of all instances at most 1 TiB */
    mr_env_config c = prog_cfg(&p, 64, 0);
    CHECK(mr_env_config_check(&c, &err) == MR_OK);
    c.program = NULL;
    CHECK(mr_env_config_check(&c, &err) == MR_ERR_ARG && msg_has(&err, "no program is attached"));
    mr_env_program big = make_program(10);
    big.field[0].count = MR_PROGRAM_MAX_COUNT;
    big.field[1].count = MR_PROGRAM_MAX_COUNT;
    CHECK(mr_program_check(&big, &err) == MR_OK);   /* 201 MiB an instance: each alone fits */
    c = prog_cfg(&big, 8192, 0);
    CHECK_MSG(mr_env_config_check(&c, &err) == MR_ERR_ARG && msg_has(&err, "walk.lua") && msg_has(&err, "1 TiB"),
              "%s", err.msg);
    /* cuda is refused by name; a stand-in (no calls) is refused when stepped */
    c = prog_cfg(&p, 64, 0);
    mr_env *e = NULL;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CUDA, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "cpu only"));
    mr_env_program stand = p;
    stand.step = NULL;
    stand.reset = NULL;
    c.program = &stand;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_OK);   /* a reset clears the engine's part */
    uint8_t zeros[64] = {0};
    CHECK(mr_env_step(e, zeros, &err) == MR_ERR_STATE && msg_has(&err, "not attached") && msg_has(&err, "walk.lua"));
    mr_env_free(e);
    mr_env_spaces sp;
    c.program = &p;
    CHECK(mr_env_spaces_of(&c, &sp, &err) == MR_OK && sp.act.n == 2 && sp.obs.shape[0] == 1 && sp.counters == 1);
}

/* The model and the engine, step by step; program limit 10, env.max_episode_steps as given. */
static void test_steps(int max_steps, int limit) {
    enum { N = 40, STEPS = 400 };
    mr_env_program p = make_program(10);
    mr_error err;
    CHECK(mr_program_check(&p, &err) == MR_OK);
    mr_env_config c = prog_cfg(&p, N, max_steps);
    mr_env *e = make_env(&c, 3, 1);
    const mr_env_state *s = &e->s;
    /* the layout and sections */
    mr_env_section sec[MR_ENV_MAX_SECTIONS];
    const int ns = mr_env_sections(s, sec);
    const char *names[] = {"env.steps", "env.tick", "env.obs", "env.ep_return", "env.resets", "env.count.0",
                           "env.counted.0", "env.v", "env.pos"};
    const size_t bytes[] = {4 * N, 4 * N, 4 * N, 4 * N, 4 * N, 4 * N, 4 * N, 16 * N, 4 * N};
    CHECK(ns == 9);
    for (int k = 0; k < ns && k < 9; k++)
        CHECK_MSG(strcmp(sec[k].name, names[k]) == 0 && sec[k].bytes == bytes[k], "%s %zu", sec[k].name, sec[k].bytes);
    int pos[N], steps[N], ones[N], resets[N];
    float ret[N];
    long episodes = 0, deaths = 0, len_sum = 0, ones_ended = 0, ones_total = 0;
    double ret_sum = 0;
    for (int i = 0; i < N; i++) pos[i] = steps[i] = ones[i] = 0, resets[i] = 1, ret[i] = 0;
    uint8_t act[N];
    uint32_t lcg = 5;
    int bad = 0;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++) {
            lcg = lcg * 1664525u + 1013904223u;
            act[i] = (uint8_t)((lcg >> 30) != 0);   /* 3 in 4: a 1 */
        }
        CHECK(mr_env_step(e, act, &err) == MR_OK);
        const mr_program_env *pe = mr_program_of(s);
        for (int i = 0; i < N; i++) {
            pos[i] += act[i] ? 1 : -1;
            steps[i]++;
            ones[i] += act[i];
            ones_total += act[i];
            const float r = act[i] ? 20.0f : -1.0f;   /* 29 clamped to reward_clip = 20 */
            const int term = pos[i] == 3, trunc = !term && steps[i] >= limit;
            ret[i] += r;
            bad += s->reward[i] != r || s->terminated[i] != term || s->truncated[i] != trunc;
            if (term || trunc) {
                episodes++;
                deaths += term;
                len_sum += steps[i];
                ret_sum += ret[i];
                ones_ended += ones[i];
                pos[i] = steps[i] = ones[i] = 0;
                ret[i] = 0;
                resets[i]++;
            }
            const int32_t *ps = pe->field[1];
            const double *v = pe->field[0];
            bad += ps[i] != pos[i] || s->steps[i] != steps[i] || pe->resets[i] != (uint32_t)resets[i] ||
                   pe->count[0][i] != ones[i] || s->obs_f[i] != (float)pos[i] || v[2 * i] != steps[i] ||
                   s->ep_return[i] != ret[i] || s->tick[i] != (uint32_t)(t + 1);
        }
    }
    CHECK_MSG(bad == 0, "%d mismatches (max_steps %d)", bad, max_steps);
    mr_env_log l;
    CHECK(mr_env_log_summary(e, &l, &err) == MR_OK);
    CHECK(l.episodes == episodes && l.deaths == deaths && l.length_sum == len_sum && l.count[0] == ones_ended &&
          l.count_total[0] == ones_total && l.steps_total == N * STEPS);
    CHECK(fabs(l.return_sum - ret_sum) < 1e-3 * (1 + fabs(ret_sum)));
    CHECK(episodes > N && deaths > 0 && deaths < episodes);   /* both ends happened */
    mr_env_free(e);
}

/* One call per thread's slice; the same bytes for 1 and 2 threads; the lowest failing slice reported. */
static void test_threads(void) {
    enum { N = 2048, STEPS = 50 };
    mr_env_program p = make_program(7);
    mr_error err;
    CHECK(mr_program_check(&p, &err) == MR_OK);
    mr_env_config c = prog_cfg(&p, N, 0);
    mr_env *a = make_env(&c, 11, 1), *b = make_env(&c, 11, 2);
    uint8_t act[N];
    uint32_t lcg = 1;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++) act[i] = (uint8_t)((lcg = lcg * 1664525u + 1013904223u) >> 31);
        atomic_store(&calls, 0);
        CHECK(mr_env_step(a, act, &err) == MR_OK);
        CHECK(atomic_load(&calls) == 1);
        atomic_store(&calls, 0);
        CHECK(mr_env_step(b, act, &err) == MR_OK);
        CHECK(atomic_load(&calls) == 2);   /* 2 threads, 1024 instances each, one call each */
    }
    mr_env_section sa[MR_ENV_MAX_SECTIONS], sb[MR_ENV_MAX_SECTIONS];
    const int na = mr_env_sections(&a->s, sa), nb = mr_env_sections(&b->s, sb);
    CHECK(na == nb);
    for (int k = 0; k < na && k < nb; k++)
        CHECK_MSG(sa[k].bytes == sb[k].bytes && memcmp(sa[k].data, sb[k].data, sa[k].bytes) == 0, "%s", sa[k].name);
    CHECK(memcmp(a->s.log, b->s.log, sizeof(mr_env_log) * N) == 0);
    /* failures in both slices: the lowest instances' message, whatever the threads */
    fail_from = 1500;
    fail_from2 = -1;
    CHECK(mr_env_step(b, act, &err) == MR_ERR_STATE && msg_has(&err, "failed at instance 1500"));
    fail_from = 1500;
    fail_from2 = 100;
    CHECK(mr_env_step(b, act, &err) == MR_ERR_STATE && msg_has(&err, "failed at instance 100"));
    fail_from = fail_from2 = -1;
    mr_env_free(a);
    mr_env_free(b);
}

/* mr_program_end_steps (a slice at once) against mr_program_end_step for
 * each instance: the same bytes in every section and log, with and without
 * counters (its loop without them is its own), truncations keeping their
 * final observation. */
static void test_slices(int counters) {
    enum { N = 1500, STEPS = 60 };
    mr_env_program p = make_program(7);
    p.spaces.counters = counters;
    mr_error err;
    CHECK(mr_program_check(&p, &err) == MR_OK);
    mr_env_config c = prog_cfg(&p, N, 0);
    mr_env *a = make_env(&c, 5, 1), *b = make_env(&c, 5, 2);
    static float fa[N], fb[N];
    memset(fa, 0, sizeof fa);
    memset(fb, 0, sizeof fb);
    a->s.final_obs = fa;
    b->s.final_obs = fb;
    uint8_t act[N];
    uint32_t lcg = 7;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++) act[i] = (uint8_t)((lcg = lcg * 1664525u + 1013904223u) >> 31);
        by_slice = 0;
        CHECK(mr_env_step(a, act, &err) == MR_OK);
        by_slice = 1;
        CHECK(mr_env_step(b, act, &err) == MR_OK);
        by_slice = 0;
    }
    mr_env_section sa[MR_ENV_MAX_SECTIONS], sb[MR_ENV_MAX_SECTIONS];
    const int na = mr_env_sections(&a->s, sa), nb = mr_env_sections(&b->s, sb);
    CHECK(na == nb);
    for (int k = 0; k < na && k < nb; k++)
        CHECK_MSG(sa[k].bytes == sb[k].bytes && memcmp(sa[k].data, sb[k].data, sa[k].bytes) == 0, "%s", sa[k].name);
    CHECK(memcmp(a->s.log, b->s.log, sizeof(mr_env_log) * N) == 0);
    CHECK(memcmp(a->s.reward, b->s.reward, sizeof(float) * N) == 0);
    CHECK(memcmp(a->s.truncated, b->s.truncated, N) == 0 && memcmp(a->s.terminated, b->s.terminated, N) == 0);
    CHECK(memcmp(fa, fb, sizeof fa) == 0);
    int kept = 0;
    for (int i = 0; i < N; i++) kept += fa[i] != 0.0f;
    CHECK(kept > 0);   /* truncations happened and kept their last observation */
    a->s.final_obs = b->s.final_obs = NULL;
    mr_env_free(a);
    mr_env_free(b);
}

/* mr_program_sincos against the C library's sin and cos, bit for bit:
 * cartpole's angles, the series' edges, large angles, NaN and infinities. */
static void test_sincos(void) {
    enum { N = 20000 };
    static double x[N], sn[N], cs[N];
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(r >> 11) * 0x1p-53;
        x[i] = i % 4 == 0 ? (u - 0.5) * 0.5 : i % 4 == 1 ? (u - 0.5) * 0.42 : i % 4 == 2 ? (u - 0.5) * 1e-6 : (u - 0.5) * 40;
    }
    x[0] = 0.0, x[1] = -0.0, x[2] = 0.25, x[3] = -0.25, x[4] = 0.2500000000000001, x[5] = NAN, x[6] = INFINITY;
    x[7] = 1e-300, x[8] = 0.125, x[9] = -0.125;
    for (int n = 0; n <= N; n += N / 3 + 1) {   /* lengths that are and are not whole blocks */
        mr_program_sincos(x, n, sn, cs);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            const double s = sin(x[i]), c = cos(x[i]);
            if (memcmp(&s, &sn[i], 8) != 0 || memcmp(&c, &cs[i], 8) != 0) bad++;
        }
        CHECK_MSG(bad == 0, "%d of %d angles differ from sin and cos", bad, n);
    }
}

int main(void) {
    test_check();
    test_steps(0, 10);     /* the program's own limit */
    test_steps(500, 10);   /* a larger setting keeps it */
    test_steps(6, 6);      /* a smaller one truncates sooner */
    test_threads();
    test_slices(1);
    test_slices(0);
    test_sincos();
    printf("test_env_program: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

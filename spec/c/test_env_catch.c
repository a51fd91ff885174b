/*
 * test_env_catch.c - the `catch` environment (envs/catch.h) against its
 * rules as the header's comment states them, written out here
 * independently: a model of each instance (ball column and row, drift,
 * the cell the ball left, the paddle's column, all plain integers) steps
 * with the literal action table (0 left, 1 stay, 2 right; a byte past 2
 * reads as a % 3, hand-set below; the paddle stops at the edges), then moves the ball one
 * row down and dx columns, bouncing off the side walls onto the mirror
 * column with dx negated; the ball in the bottom row ends the episode
 * (terminated), +1 in the paddle's column (counted `caught`), else -1; a
 * new episode draws with the documented keying (ball column on (seed,
 * instance, resets, PLACE, 0) below N, drift on index 1 below 3 minus 1,
 * paddle on index 2 below N). After every step the environment must agree:
 * reward, end flags, the state, and the image pixel by pixel (channel 0:
 * 1.0 on the ball, 0.5 on the cell it left, none at an episode's start;
 * channel 1: 1.0 on the paddle's cell in the bottom row). Then the log,
 * hand-set bounces at both walls, the same bytes on 1 and 2 threads, the
 * spaces it declares, that the CNN takes them (on the cpu and on cuda), and
 * the sizes it refuses.
 */
#include "env_check.h"
#include "registry.h"     /* the environments' own state (mr_catch_of) */
#include "net_layout.h"   /* mr_net_fits_spaces */
#include "policy_math.h"  /* the CUDA network's plan (mr_pc_plan_make), host code */

static const int MOVE[3] = {-1, 0, 1};   /* the paddle's action table, literally */

static mr_env_config catch_cfg(int n, int side, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, side, 1, 1, 2, 50, max_steps);
    c.name = MR_ENV_CATCH;
    return c;
}

typedef struct {
    int bx, by, dx, px, py, paddle, steps;
    uint32_t resets;
    float ret;
} model;

static void model_start(model *m, uint64_t seed, uint32_t key, int N) {
    m->bx = (int)mr_rng_below(seed, key, m->resets, MR_RNG_PLACE, 0, (uint32_t)N);
    m->dx = (int)mr_rng_below(seed, key, m->resets, MR_RNG_PLACE, 1, 3) - 1;
    m->paddle = (int)mr_rng_below(seed, key, m->resets, MR_RNG_PLACE, 2, (uint32_t)N);
    m->by = 0;
    m->px = m->py = -1;
    m->resets++;
    m->steps = 0;
    m->ret = 0.0f;
}

/* the pixel (c, y, x) of the model's image */
static float pixel(const model *m, int N, int c, int y, int x) {
    if (c == 1) return y == N - 1 && x == m->paddle ? 1.0f : 0.0f;
    if (y == m->by && x == m->bx) return 1.0f;
    if (y == m->py && x == m->px) return 0.5f;
    return 0.0f;
}

/* the environment's instance i agrees with the model, image included */
static int agrees(const model *m, const mr_env_state *s, int i, int N) {
    const mr_catch *f = mr_catch_of(s);
    int ok = s->steps[i] == m->steps && f->resets[i] == m->resets && s->ep_return[i] == m->ret;
    ok &= f->ball_x[i] == m->bx && f->ball_y[i] == m->by && f->dx[i] == m->dx && f->paddle[i] == m->paddle;
    const float *im = s->obs_f + (size_t)i * 2 * N * N;
    for (int c = 0; c < 2; c++)
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) ok &= im[(c * N + y) * N + x] == pixel(m, N, c, y, x);
    return ok;
}

static void test_steps(int N, int max_steps) {
    enum { NI = 24, STEPS = 300 };
    const uint64_t seed = 23;
    mr_env_config c = catch_cfg(NI, N, max_steps);
    mr_env *e = make_env(&c, seed, 1);
    const mr_env_state *s = &e->s;
    model m[NI];
    long bad = 0, bad_reset = 0, ends = 0, caught = 0, truncs = 0, bounces = 0, drifts[3] = {0, 0, 0};
    double ret_sum = 0.0;
    memset(m, 0, sizeof m);
    for (int i = 0; i < NI; i++) {
        model_start(&m[i], seed, (uint32_t)i, N);
        bad_reset += !agrees(&m[i], s, i, N);
    }
    CHECK_MSG(bad_reset == 0, "N %d: reset: %d instances differ from the documented draws", N, (int)bad_reset);
    uint32_t lcg = 7;
    uint8_t act[NI];
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < NI; i++) {   /* mostly toward the ball's column (so balls are caught), some random bytes */
            lcg = lcg * 1664525u + 1013904223u;
            act[i] = (uint8_t)((lcg >> 24) % 3);
            if ((lcg >> 20) % 3 != 0) act[i] = (uint8_t)(m[i].paddle < m[i].bx ? 2 : m[i].paddle > m[i].bx ? 0 : 1);
        }
        CHECK(mr_env_step(e, act, NULL) == MR_OK);
        for (int i = 0; i < NI; i++) {
            model *x = &m[i];
            int p = x->paddle + MOVE[act[i] % 3];
            x->paddle = p < 0 ? 0 : p > N - 1 ? N - 1 : p;
            x->px = x->bx;
            x->py = x->by;
            int bx = x->bx + x->dx;
            if (bx < 0) { bx = 1; x->dx = 1; bounces++; }
            if (bx > N - 1) { bx = N - 2; x->dx = -1; bounces++; }
            x->bx = bx;
            x->by++;
            x->steps++;
            const int term = x->by == N - 1, hit = term && x->bx == x->paddle;
            const int trunc = !term && max_steps > 0 && x->steps >= max_steps;
            const float r = term ? (hit ? 1.0f : -1.0f) : 0.0f;
            x->ret += r;
            bad += s->reward[i] != r || s->terminated[i] != term || s->truncated[i] != trunc;
            if (term || trunc) {
                ends++;
                caught += hit;
                truncs += trunc;
                ret_sum += x->ret;
                model_start(x, seed, (uint32_t)i, N);
                drifts[x->dx + 1]++;
            }
            bad += !agrees(x, s, i, N);
        }
    }
    mr_env_log lg;
    mr_env_log_reduce(s->log, NI, &lg);
    CHECK_MSG(bad == 0, "N %d, max_episode_steps %d: %ld differences from the rules", N, max_steps, bad);
    CHECK_MSG(lg.episodes == ends && lg.deaths == ends - truncs, "log: %d episodes, %d deaths (model: %ld, %ld)",
              lg.episodes, lg.deaths, ends, ends - truncs);
    CHECK_MSG(lg.count[MR_CATCH_CAUGHT] == caught && lg.count_total[MR_CATCH_CAUGHT] == caught,
              "log: caught %d in ended episodes, %d in all (model: %ld)", lg.count[0], lg.count_total[0], caught);
    CHECK_NEAR(lg.return_sum, ret_sum, 1e-3, 1e-6);
    CHECK_MSG((max_steps > 0 || (caught > 0 && caught < ends)) && bounces > 0 && drifts[0] && drifts[1] && drifts[2],
              "too weak: %ld catches of %ld episodes, %ld bounces, drifts %ld/%ld/%ld", caught, ends, bounces,
              drifts[0], drifts[1], drifts[2]);
    CHECK_MSG(max_steps > 0 ? truncs > 0 : truncs == 0, "%ld truncations with max_episode_steps %d", truncs, max_steps);
    mr_env_free(e);
}

/* hand-set: a bounce off each wall, the paddle at both edges, a catch */
static void test_hand(void) {
    const int N = 5;
    mr_env_config c = catch_cfg(1, N, 0);
    mr_env *e = make_env(&c, 3, 1);
    mr_env_state *s = &e->s;
    mr_catch *f = mr_catch_of(s);
    f->ball_x[0] = 0; f->ball_y[0] = 0; f->dx[0] = -1; f->paddle[0] = 0;
    f->prev_x[0] = f->prev_y[0] = -1;
    uint8_t a = 0;   /* left at the left edge: stays */
    CHECK(mr_env_step(e, &a, NULL) == MR_OK);
    CHECK(f->paddle[0] == 0 && f->ball_x[0] == 1 && f->ball_y[0] == 1 && f->dx[0] == 1);   /* bounced onto column 1 */
    CHECK(s->obs_f[0 * N + 0] == 0.5f && s->obs_f[1 * N + 1] == 1.0f && s->obs_f[N * N + 4 * N + 0] == 1.0f);
    f->ball_x[0] = 4; f->dx[0] = 1;
    a = 5;   /* 5 % 3 = 2: right (a byte past 2, through the registry's step: the public one refuses it) */
    mr_env_step_at(s, 0, &a);
    CHECK(f->paddle[0] == 1 && f->ball_x[0] == 3 && f->ball_y[0] == 2 && f->dx[0] == -1);   /* bounced onto N-2 */
    f->paddle[0] = 1; f->ball_x[0] = 2; f->dx[0] = -1;
    a = 1;
    CHECK(mr_env_step(e, &a, NULL) == MR_OK);   /* ball to (1, 3) */
    CHECK(mr_env_step(e, &a, NULL) == MR_OK);   /* ball to (0, 4): the bottom row, the paddle at 1: a miss */
    CHECK(s->terminated[0] == 1 && s->reward[0] == -1.0f && s->log[0].count[MR_CATCH_CAUGHT] == 0);
    f->ball_x[0] = 2; f->ball_y[0] = 3; f->dx[0] = 0; f->paddle[0] = 3;
    a = 0;   /* left onto column 2, under the ball: a catch */
    CHECK(mr_env_step(e, &a, NULL) == MR_OK);
    CHECK(s->terminated[0] == 1 && s->reward[0] == 1.0f && s->log[0].count[MR_CATCH_CAUGHT] == 1);
    CHECK(f->ball_y[0] == 0 && f->prev_y[0] == -1 && s->steps[0] == 0);   /* the next episode's start */
    mr_env_free(e);
}

static void test_threads(void) {
    enum { NI = 2048, STEPS = 40 };
    mr_env_config c = catch_cfg(NI, 9, 0);
    mr_env *a = make_env(&c, 8, 1), *b = make_env(&c, 8, 2);
    uint8_t *act = malloc(NI);
    uint32_t lcg = 5;
    long bad = 0;
    for (int t = 0; t < STEPS; t++) {
        for (int j = 0; j < NI; j++) {
            lcg = lcg * 1664525u + 1013904223u;
            act[j] = (uint8_t)((lcg >> 24) % 3);
        }
        CHECK(mr_env_step(a, act, NULL) == MR_OK);
        CHECK(mr_env_step(b, act, NULL) == MR_OK);
        bad += env_first_difference(a, b) != NULL;
    }
    CHECK_MSG(bad == 0, "1 vs 2 threads: %ld steps left a buffer different", bad);
    free(act);
    mr_env_free(a);
    mr_env_free(b);
}

static void test_spaces(void) {
    mr_env_config c = catch_cfg(4, 8, 0);
    mr_env_spaces sp;
    mr_error err;
    CHECK(mr_env_spaces_of(&c, &sp, &err) == MR_OK);
    CHECK(sp.obs.kind == MR_SPACE_IMAGE && sp.obs.shape[0] == 2 && sp.obs.shape[1] == 8 && sp.obs.shape[2] == 8);
    CHECK(sp.act.kind == MR_SPACE_DISCRETE && sp.act.n == 3);
    CHECK(sp.critic_extra == 0 && sp.counters == 1 && !strcmp(sp.counter_names[0], "caught"));
    CHECK(sp.success == MR_SUCCESS_COUNTER && sp.success_counter == 0 && sp.eval == MR_EVAL_EPISODIC);
    CHECK(!strcmp(mr_env_name_of(MR_ENV_CATCH), "catch") && mr_env_from_name("catch") == MR_ENV_CATCH);
    CHECK_MSG(mr_net_fits_spaces(&sp, "catch", &err) == MR_OK, "%s", err.msg);
    /* what the CNN refuses of a float image: not square, too many channels, too many privileged inputs */
    mr_env_spaces bad = sp;
    bad.obs.shape[2] = 7;
    CHECK(mr_net_fits_spaces(&bad, "catch", &err) == MR_ERR_ARG && msg_has(&err, "2 x 8 x 7") &&
          msg_has(&err, "square"));
    bad = sp;
    bad.obs.shape[0] = 17;
    CHECK(mr_net_fits_spaces(&bad, "catch", &err) == MR_ERR_ARG && msg_has(&err, "1 .. 16 channels"));
    bad = sp;
    bad.critic_extra = 3;
    CHECK(mr_net_fits_spaces(&bad, "catch", &err) == MR_ERR_ARG && msg_has(&err, "0 .. 2"));
    /* the board's sizes: 4 .. 32, named */
    mr_env *e = NULL;
    for (int side = 3; side <= 33; side += 30) {
        mr_env_config w = catch_cfg(4, side, 0);
        CHECK(mr_env_create(&w, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.grid_size") &&
              msg_has(&err, "4 .. 32"));
    }
    /* the config follows: the CNN on 2 float channels of side 8 */
    mr_config cfg;
    mr_config_default(&cfg);
    cfg.env = catch_cfg(4, 8, 0);
    mr_config_follow_env(&cfg);
    CHECK(cfg.policy.obs_image == 1 && cfg.policy.obs_channels == 2 && cfg.policy.obs_side == 8 &&
          cfg.policy.obs_vector == 0 && cfg.policy.num_actions == 3);
    cfg.device = MR_DEVICE_CPU;
    CHECK_MSG(mr_config_validate(&cfg, &err) == MR_OK, "%s", err.msg);
    /* the CUDA network takes the image too (test_cuda_policy_net): the config validates on cuda, and
     * its plan (no GPU touched) holds the batch's images: 2 x 8 x 8 floats a sample, not 64 codes */
    cfg.device = MR_DEVICE_CUDA;
    CHECK_MSG(mr_config_validate(&cfg, &err) == MR_OK, "%s", err.msg);
    uint64_t bytes = 0;
    CHECK_MSG(mr_config_device_bytes(&cfg, &bytes, &err) == MR_OK && bytes > 0, "%s", err.msg);
    mr_pc_plan pl;
    CHECK_MSG(mr_pc_plan_make(&pl, &cfg.policy, 8, 100, 0, MR_FP32, &err) == MR_OK, "%s", err.msg);
    CHECK(pl.net.obs_float == 1 && pl.net.obs_row == 4 * 2 * 64 && pl.o_act[0] - pl.o_codes >= 100 * 4 * 2 * 64);
}

int main(void) {
    check_seed(0xca7c4ULL);
    test_steps(8, 0);
    test_steps(5, 3);   /* truncated before the ball lands */
    test_steps(4, 0);
    test_hand();
    test_threads();
    test_spaces();
    return check_report("test_env_catch");
}

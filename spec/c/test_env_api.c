/*
 * test_env_api.c - the foraging environment's public functions (env.h:
 * mr_env_create / _step / _read / _reset / _set_energy_frozen / _free, the
 * log reduction, the state's arena layout) against their documented
 * contracts, and determinism.
 *
 * Bad input: every refused config field, action and NULL, each with a
 * message naming it, and nothing stepped. mr_env_read copies every field it
 * is given and skips NULLs. The arena's planning pass sees NULLs and the
 * committed pass the same total. mr_env_log_reduce: sums, min, max, the
 * empty reduction. Determinism: 600 envs (a thread team) for 200 steps -
 * the same seed twice and 1 vs 2 threads give identical bytes of grid,
 * observations and rewards; another seed another world.
 */
#include "env_check.h"
#include "net_layout.h"   /* mr_net_fits_spaces */
#include "registry.h"   /* the environments' own state (mr_forage_of) */

/* The arena's planning pass sees NULLs and the committed pass the same total. */
static void test_layout(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 5, 16, 2, 0, 4, 50, 0);
    mr_arena a = {0};
    mr_env_state s;
    mr_env_layout(&s, &c, 1, &a);
    CHECK(mr_forage_of(&s)->grid == NULL && s.log == NULL && mr_forage_of(&s)->energy_centi == NULL && a.size > 5 * 256);
    size_t planned = a.size;
    CHECK(mr_arena_commit(&a) == 0);
    mr_env_layout(&s, &c, 1, &a);
    CHECK(mr_forage_of(&s)->grid && s.obs && s.log && mr_forage_of(&s)->energy_centi && mr_forage_of(&s)->x && mr_forage_of(&s)->ep_poison && a.used == planned);
    CHECK(mr_forage_of(&s)->V == 5 && mr_forage_of(&s)->H == 16 && mr_forage_of(&s)->W == 16 && s.reward_clip == 20.0f && mr_forage_of(&s)->energy_frozen == 0);
    mr_arena_release(&a);
}

static void test_log_reduce(void) {
    mr_env_log l[3];
    for (int i = 0; i < 3; i++) mr_env_log_clear(&l[i]);
    CHECK(l[0].return_min > 1e38f && l[0].return_max < -1e38f && l[0].episodes == 0);
    l[0].episodes = 2; l[0].return_sum = 3.0f; l[0].return_min = 1.0f; l[0].return_max = 2.0f; l[0].count[0] = 4;
    l[2].episodes = 1; l[2].return_sum = -5.0f; l[2].return_min = -5.0f; l[2].return_max = -5.0f; l[2].steps_total = 9;
    mr_env_log r;
    mr_env_log_reduce(l, 3, &r);
    CHECK(r.episodes == 3 && r.return_sum == -2.0f && r.return_min == -5.0f && r.return_max == 2.0f);
    CHECK(r.count[0] == 4 && r.steps_total == 9 && r.deaths == 0);
    mr_env_log_reduce(l, 0, &r);
    CHECK(r.episodes == 0 && r.return_min > 1e38f);
}

static void test_bad_input(void) {
    mr_env_config ok = make_cfg(MR_MODE_GROUND_TRUTH, 4, 32, 5, 16, 64, 50, 512), c;
    mr_env *e = (mr_env *)&ok;     /* must be overwritten with NULL on failure */
    mr_error err;
    CHECK(mr_env_create(NULL, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && e == NULL && msg_has(&err, "cfg"));
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CPU, 1, NULL, &err) == MR_ERR_ARG && msg_has(&err, "out"));
    c = ok; c.num_envs = 0;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.num_envs = 0"));
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, NULL) == MR_ERR_ARG);        /* err may be NULL */
    c = ok; c.view_range = 20;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.view_range = 20"));
    c = ok; c.view_range = 0;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.view_range"));
    c = ok; c.grid_size = 100000;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.grid_size"));
    c = ok; c.density_max = 512;     /* 2*512 = 1024 cells: no room for the agent */
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.density_max"));
    c = ok; c.density_min = 65;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.density_max"));
    c = ok; c.density_min = -1;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.density_min"));
    c = ok; c.mode = 4;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.mode"));
    c = ok; c.respawn_tries = -1;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.respawn_tries"));
    c = ok; c.max_episode_steps = -5;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "env.max_episode_steps"));
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CPU, -1, &e, &err) == MR_ERR_ARG && msg_has(&err, "threads"));
    CHECK(mr_env_create(&ok, 1, 7, 1, &e, &err) == MR_ERR_ARG && msg_has(&err, "device"));
#ifndef MOONRL_HAVE_CUDA   /* with CUDA, test_cuda_env covers device = cuda */
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CUDA, 1, &e, &err) == MR_ERR_BACKEND && msg_has(&err, "cuda") && e == NULL);
#endif
    CHECK(mr_env_config_check(&ok, &err) == MR_OK && err.status == MR_OK);

    CHECK(mr_env_create(&ok, 1, MR_DEVICE_AUTO, 1, &e, &err) == MR_OK && e != NULL);
    mr_env_free(e);
    CHECK(mr_env_create(&ok, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_OK && e != NULL);
    uint8_t act[4] = {0, 1, 2, 8};
    CHECK(mr_env_step(e, act, &err) == MR_ERR_ARG && msg_has(&err, "actions[3] = 8"));
    CHECK(e->s.tick[0] == 0);                       /* nothing stepped */
    CHECK(mr_env_step(e, NULL, &err) == MR_ERR_ARG && msg_has(&err, "actions"));
    CHECK(mr_env_step(NULL, act, &err) == MR_ERR_ARG);
    CHECK(mr_env_read(e, NULL, &err) == MR_ERR_ARG);
    CHECK(mr_env_read(NULL, NULL, &err) == MR_ERR_ARG);
    CHECK(mr_env_reset(NULL, &err) == MR_ERR_ARG);
    CHECK(mr_env_set_energy_frozen(e, 2, &err) == MR_ERR_ARG && msg_has(&err, "frozen = 2"));
    CHECK(mr_env_set_energy_frozen(NULL, 1, &err) == MR_ERR_ARG);
    act[3] = 7;
    CHECK(mr_env_step(e, act, &err) == MR_OK && err.status == MR_OK);
    mr_env_free(e);
    mr_env_free(NULL);
}

/* mr_env_read copies every field it is given, and skips NULLs. */
static void test_read(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 5, 16, 2, 4, 8, 50, 0);
    mr_env *e = make_env(&c, 4, 1);
    uint8_t act[5] = {0, 3, 4, 6, 7};
    for (int t = 0; t < 9; t++) mr_env_step(e, act, NULL);
    const mr_env_state *s = &e->s;
    uint8_t obs[5 * 25], term[5], trunc[5], grid[5 * 256];
    float rew[5], en[5];
    int32_t x[5], y[5];
    memset(obs, 0xEE, sizeof obs); memset(term, 0xEE, 5); memset(trunc, 0xEE, 5); memset(grid, 0xEE, sizeof grid);
    memset(rew, 0xEE, sizeof rew); memset(en, 0xEE, sizeof en); memset(x, 0xEE, sizeof x); memset(y, 0xEE, sizeof y);
    mr_env_view v = {obs, rew, term, trunc, grid, x, y, en};
    CHECK(mr_env_read(e, &v, NULL) == MR_OK);
    CHECK(!memcmp(obs, s->obs, sizeof obs) && !memcmp(rew, s->reward, sizeof rew));
    CHECK(!memcmp(term, s->terminated, 5) && !memcmp(trunc, s->truncated, 5));
    CHECK(!memcmp(grid, mr_forage_of(s)->grid, sizeof grid));
    CHECK(!memcmp(x, mr_forage_of(s)->x, sizeof x) && !memcmp(y, mr_forage_of(s)->y, sizeof y) && !memcmp(en, mr_forage_of(s)->energy, sizeof en));
    CHECK(rew[0] == -0.01f || rew[0] == 0.99f || rew[0] == -2.01f);
    mr_env_view none = {0};
    CHECK(mr_env_read(e, &none, NULL) == MR_OK);
    mr_env_free(e);
}


/* Runs 200 steps and returns a hash-free byte record of grid, obs, rewards. */
typedef struct trace { uint8_t *grid, *obs; float *reward; } trace;

static trace record(const mr_env_config *c, uint64_t seed, int threads) {
    mr_env *e = make_env(c, seed, threads);
    const size_t n = (size_t)c->num_envs, VV = (size_t)mr_forage_of(&e->s)->V * mr_forage_of(&e->s)->V, cells = (size_t)c->grid_size * c->grid_size;
    trace tr = {malloc(n * cells), malloc(n * VV * 200), malloc(sizeof(float) * n * 200)};
    uint8_t *act = malloc(n);
    uint64_t z = 77;
    for (int t = 0; t < 200; t++) {
        for (size_t i = 0; i < n; i++) { z = z * 6364136223846793005ULL + 1442695040888963407ULL; act[i] = (uint8_t)(z >> 61); }
        mr_env_step(e, act, NULL);
        mr_env_view v = {tr.obs + t * n * VV, tr.reward + t * n, NULL, NULL, NULL, NULL, NULL, NULL};
        mr_env_read(e, &v, NULL);
    }
    mr_env_view v = {0};
    v.grid = tr.grid;
    mr_env_read(e, &v, NULL);
    free(act);
    mr_env_free(e);
    return tr;
}

static int same_trace(const trace *a, const trace *b, size_t n, size_t VV, size_t cells) {
    return !memcmp(a->grid, b->grid, n * cells) && !memcmp(a->obs, b->obs, n * VV * 200) &&
           !memcmp(a->reward, b->reward, sizeof(float) * n * 200);
}

static void free_trace(trace *t) { free(t->grid); free(t->obs); free(t->reward); }

static void test_determinism(void) {
    /* enough envs for the loop to run on a thread team */
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 600, 32, 5, 16, 64, 50, 64);
    const size_t n = 600, VV = 121, cells = 1024;
    trace a = record(&c, 1, 1), b = record(&c, 1, 1), t2 = record(&c, 1, 2), d = record(&c, 2, 1);
    CHECK_MSG(same_trace(&a, &b, n, VV, cells), "same seed twice: identical bytes");
    CHECK_MSG(same_trace(&a, &t2, n, VV, cells), "1 thread vs 2 threads: identical bytes");
    CHECK_MSG(memcmp(a.grid, d.grid, n * cells) != 0 && memcmp(a.obs, d.obs, n * VV * 200) != 0,
              "different seeds: different worlds");
    free_trace(&a); free_trace(&b); free_trace(&t2); free_trace(&d);
}

/* The spaces each environment declares (mr_env_spaces_of), and the network's
 * check of them (mr_net_fits_spaces): every refusal names the environment and
 * what it declares; the declared spaces of foraging and reach fit. */
static int refused_with(const mr_env_spaces *sp, const char *want) {
    mr_error e = {0};
    if (mr_net_fits_spaces(sp, "probe", &e) != MR_ERR_ARG) return 0;
    if (!strstr(e.msg, "env.name = probe") || !strstr(e.msg, want)) {
        printf("  message: %s (wanted '%s')\n", e.msg, want);
        return 0;
    }
    return 1;
}

static void test_spaces(void) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, 4, 16, 2, 0, 4, 50, 0);
    mr_env_spaces f, r;
    mr_error e = {0};
    CHECK(mr_env_spaces_of(&c, &f, &e) == MR_OK);
    CHECK(f.obs.kind == MR_SPACE_CODES && f.obs.shape[0] == 2 && f.obs.shape[1] == 5 && f.obs.shape[2] == 5 &&
          f.obs.codes == 3);
    CHECK(f.act.kind == MR_SPACE_DISCRETE && f.act.n == 8 && mr_env_num_actions(MR_ENV_FORAGING) == 8);
    CHECK(f.critic_extra == 2 && f.critic_view == 1 && f.counters == 2 && strcmp(f.counter_names[0], "food") == 0 &&
          strcmp(f.counter_names[1], "poison") == 0);
    c.name = MR_ENV_REACH;
    CHECK(mr_env_spaces_of(&c, &r, &e) == MR_OK);
    CHECK(r.act.n == 4 && mr_env_num_actions(MR_ENV_REACH) == 4 && strcmp(r.counter_names[0], "goal") == 0 &&
          strcmp(r.counter_names[1], "pit") == 0 && r.obs.shape[1] == 5);
    CHECK(mr_net_fits_spaces(&f, "foraging", &e) == MR_OK && mr_net_fits_spaces(&r, "reach", &e) == MR_OK);
    c.name = (mr_env_name)MR_ENV_COUNT;
    CHECK(mr_env_spaces_of(&c, &r, &e) == MR_ERR_ARG && strstr(e.msg, "not an environment of this build"));
    CHECK(mr_env_num_actions(MR_ENV_COUNT) == 0 && mr_env_num_actions(-1) == 0);

    mr_env_spaces b = f;   /* a vector: the MLP trunk, without a view for its critic, at most 2 extra inputs */
    b.obs.kind = MR_SPACE_VECTOR; b.obs.shape[0] = 4; b.obs.shape[1] = b.obs.shape[2] = 1;
    CHECK(refused_with(&b, "declares 2 privileged critic inputs and a view: the MLP critic takes 0 .. 2"));
    b.critic_view = 0;
    CHECK(mr_net_fits_spaces(&b, "v", &e) == MR_OK);
    b.obs.shape[0] = 0;
    CHECK(refused_with(&b, "a vector observation of 0 floats"));
    /* a box: the Gaussian head, on a vector only, 1 .. 4 floats, each with finite low < high */
    b.obs.shape[0] = 3; b.act.kind = MR_SPACE_BOX; b.act.n = 1; b.act.low[0] = -2; b.act.high[0] = 2;
    CHECK(mr_net_fits_spaces(&b, "v", &e) == MR_OK);
    b.act.n = 5;
    CHECK(refused_with(&b, "a box of 5 floats: the Gaussian head takes 1 .. 4"));
    b.act.n = 1; b.act.high[0] = -3;
    CHECK(refused_with(&b, "component 0 has bounds [-2, -3]"));
    /* a float image: the CNN on the floats, square, 1 .. 16 channels, 0 .. 2 privileged inputs */
    b = f; b.obs.kind = MR_SPACE_IMAGE;
    CHECK(mr_net_fits_spaces(&b, "img", &e) == MR_OK);
    b.obs.shape[2] = 6;
    CHECK(refused_with(&b, "a float image of 2 x 5 x 6: this build's CNN takes 1 .. 16 channels of a square image"));
    b.obs.shape[2] = 5; b.critic_extra = 3;
    CHECK(refused_with(&b, "declares 3 privileged critic inputs: the CNN's critic takes 0 .. 2 beside the image"));
    /* a kind of observation no trunk takes */
    b = f; b.obs.kind = MR_SPACE_BOX;
    CHECK(refused_with(&b, "an observation of a continuous box"));
    b = f; b.obs.shape[0] = 4; b.obs.codes = 5;   /* C one-hot channels of codes 0 .. C: 1 .. 16 */
    CHECK(mr_net_fits_spaces(&b, "c4", &e) == MR_OK);
    b.obs.shape[0] = 17;
    CHECK(refused_with(&b, "17 x 5 x 5 cell codes: this build's policy takes 1 .. 16 channels"));
    b.obs.shape[0] = 0;
    CHECK(refused_with(&b, "0 x 5 x 5 cell codes"));
    b = f; b.obs.codes = 4;   /* a code the network would read as empty */
    CHECK(refused_with(&b, "declares 4 cell codes for 2 channels"));
    b = f; b.obs.shape[2] = 7;
    CHECK(refused_with(&b, "a square view"));
    b = f; b.act.kind = MR_SPACE_BOX; b.act.n = 1; b.act.low[0] = -2; b.act.high[0] = 2;
    CHECK(refused_with(&b, "a box action with a cell codes observation"));
    b = f; b.act.kind = MR_SPACE_MULTI_DISCRETE; b.act.n = 2;
    CHECK(refused_with(&b, "multi-discrete"));
    b = f; b.act.n = MR_MAX_ACTIONS + 1;
    CHECK(refused_with(&b, "declares 9 actions: the policy's categorical head takes 2 .. 8"));
    b = f; b.act.n = 1;
    CHECK(refused_with(&b, "declares 1 actions"));
    b = f; b.critic_extra = 3;
    CHECK(refused_with(&b, "declares 3 privileged critic inputs"));
    b = f; b.critic_view = 0;
    CHECK(refused_with(&b, "without the view's ground truth"));
}

int main(void) {
    test_spaces();
    test_layout();
    test_log_reduce();
    test_bad_input();
    test_read();
    test_determinism();
    return check_report("test_env_api");
}

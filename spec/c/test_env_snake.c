/*
 * test_env_snake.c - the `snake` environment (envs/snake.h) against its rules
 * as the header's comment states them, written out here independently: a
 * model of each instance (the chain as a plain array, head first, and the
 * food's cell) steps with the literal action table (0 up, 1 down, 2 left,
 * 3 right; the tail moves first unless the head enters the food; a wall or
 * the body ends the episode at -1; food pays +1 and grows the chain by one;
 * max_episode_steps truncates; an ended episode starts a new board) and
 * must agree with the environment after every step: reward, end flags, the
 * chain, the board, the observation (computed here from the model: walls
 * off the board, the tail's own code), the critic's inputs, the log. Where
 * the rules draw (a new food item, a new board) the model takes the
 * environment's draw and checks what the rules require of it (a free cell).
 * Hand-written cases set a board by hand: following the tail, turning into
 * the neck, eating next to a wall. Also: the same bytes on 1 and 2 threads,
 * and the config's refusals.
 */
#include "env_check.h"
#include "registry.h"   /* the environments' own state (mr_snake_of) */
#include "net_layout.h"  /* mr_net_fits_spaces */

/* The rules' action table, literally: up, down, left, right (y is the row). */
static const int SDX[4] = {0, 0, -1, 1};
static const int SDY[4] = {-1, 1, 0, 0};
enum { E_EMPTY = 0, E_FOOD = 1, E_BODY = 2, E_TAIL = 3, E_WALL = 4 };

static mr_env_config snake_cfg(int n, int grid, int view, int max_steps) {
    mr_env_config c = make_cfg(MR_MODE_GROUND_TRUTH, n, grid, view, 0, 0, 0, max_steps);
    c.name = MR_ENV_SNAKE;
    return c;
}

static uint8_t next_action(uint32_t *lcg) {
    *lcg = *lcg * 1664525u + 1013904223u;
    return (uint8_t)(*lcg >> 30);   /* 0 .. 3 */
}

/* the model of one instance: chain[0] is the head */
typedef struct { int len, chain[1024], food; } model;

/* the environment's chain, head first, read from its ring */
static void read_chain(const mr_env_state *s, int i, int *out, int *len) {
    const mr_snake *f = mr_snake_of(s);
    const int cells = f->H * f->W;
    *len = f->len[i];
    for (int k = 0; k < f->len[i]; k++) out[k] = f->body[(size_t)i * cells + ((f->head[i] - k) % cells + cells) % cells];
}

static void model_from(model *m, const mr_env_state *s, int i) {
    read_chain(s, i, m->chain, &m->len);
    m->food = mr_snake_of(s)->food[i];
}

static int in_chain(const model *m, int c) {
    for (int k = 0; k < m->len; k++) if (m->chain[k] == c) return 1;
    return 0;
}

/* The environment agrees with the model: the chain, the board (food, body,
 * nothing else), the observation around the head. */
static int agrees(const model *m, const mr_env_state *s, int i) {
    const mr_snake *f = mr_snake_of(s);
    const int G = f->W, cells = G * G, V = f->V, r = f->view;
    int chain[1024], len;
    read_chain(s, i, chain, &len);
    if (len != m->len || f->food[i] != m->food) return 0;
    for (int k = 0; k < len; k++) if (chain[k] != m->chain[k]) return 0;
    const uint8_t *g = f->grid + (size_t)i * cells;
    for (int c = 0; c < cells; c++) {
        const int want = c == m->food ? E_FOOD : in_chain(m, c) ? E_BODY : E_EMPTY;
        if (g[c] != want) return 0;
    }
    const uint8_t *o = s->obs + (size_t)i * V * V;
    const int hx = m->chain[0] % G, hy = m->chain[0] / G;
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++) {
            const int y = hy - r + a, x = hx - r + b;
            int want = E_WALL;
            if (x >= 0 && x < G && y >= 0 && y < G) {
                const int c = y * G + x;
                want = c == m->food ? E_FOOD : m->len >= 2 && c == m->chain[m->len - 1] ? E_TAIL
                     : in_chain(m, c) ? E_BODY : E_EMPTY;
            }
            if (o[a * V + b] != want) return 0;
        }
    return 1;
}

/* A fresh board as the rules have it: a chain of one, food elsewhere. */
static int fresh(const mr_env_state *s, int i) {
    const mr_snake *f = mr_snake_of(s);
    return f->len[i] == 1 && f->food[i] >= 0 && f->food[i] != f->body[(size_t)i * f->H * f->W + f->head[i]] &&
           s->steps[i] == 0 && s->ep_return[i] == 0.0f;
}

static void test_reset(void) {
    mr_env_config c = snake_cfg(512, 5, 2, 50);
    mr_env *e = make_env(&c, 5, 1);
    const mr_env_state *s = &e->s;
    int ok = 1, seen[25] = {0};
    for (int i = 0; i < 512; i++) {
        model m;
        model_from(&m, s, i);
        ok &= fresh(s, i) && agrees(&m, s, i) && s->reward[i] == 0.0f && !s->terminated[i] && !s->truncated[i];
        seen[m.chain[0]]++;
    }
    CHECK(ok);
    int every = 1;
    for (int k = 0; k < 25; k++) every &= seen[k] > 5;   /* the start cell is drawn over the whole board */
    CHECK(every);
    mr_env_spaces sp;
    mr_error err;
    CHECK(mr_env_spaces_of(&c, &sp, &err) == MR_OK && sp.obs.kind == MR_SPACE_CODES && sp.obs.shape[0] == 4 &&
          sp.obs.shape[1] == 5 && sp.obs.codes == 5 && sp.act.n == 4 && sp.counters == 2 &&
          strcmp(sp.counter_names[0], "food") == 0 && strcmp(sp.counter_names[1], "crash") == 0);
    CHECK(mr_net_fits_spaces(&sp, "snake", &err) == MR_OK);
    mr_env_free(e);
}

/* Random actions against the model, every branch many times. */
static void test_steps(int G, int view, int max_steps, int steps, long min_food) {
    enum { N = 64 };
    mr_env_config c = snake_cfg(N, G, view, max_steps);
    mr_env *e = make_env(&c, 11, 1);
    mr_env_state *s = &e->s;
    mr_error err;
    static model m[N];
    for (int i = 0; i < N; i++) model_from(&m[i], s, i);
    uint8_t act[N];
    float ret[N] = {0};
    int st[N] = {0};   /* the episode's steps */
    long ends = 0, walls = 0, bodies = 0, food = 0, truncs = 0, tail_follows = 0, bad = 0, food_ended = 0;
    long crashes = 0;
    uint32_t lcg = 7;
    /* a chain that turns back (into its neck) or runs straight ahead often: a
     * random walk biased to keep its direction grows longer chains */
    uint8_t last[N] = {0};
    for (int t = 0; t < steps; t++) {
        for (int i = 0; i < N; i++) {
            uint8_t a = next_action(&lcg);
            act[i] = (lcg >> 8) % 3 == 0 ? a : last[i];
            last[i] = act[i];
        }
        if (mr_env_step(e, act, &err) != MR_OK) {
            CHECK_MSG(0, "step: %s", err.msg);
            break;
        }
        for (int i = 0; i < N; i++) {
            model *p = &m[i];
            const int hx = p->chain[0] % G + SDX[act[i]], hy = p->chain[0] / G + SDY[act[i]];
            const int wall = hx < 0 || hx >= G || hy < 0 || hy >= G, nc = hy * G + hx;
            const int eat = !wall && nc == p->food;
            /* the tail moves first unless it eats: the chain without its last cell */
            int body = 0;
            if (!wall)
                for (int k = 0; k < (eat ? p->len : p->len - 1); k++) body |= p->chain[k] == nc;
            const int won = eat && p->len + 1 == G * G;
            const int crash = wall || body, term = crash || won;
            st[i]++;
            const int trunc = !term && max_steps > 0 && st[i] >= max_steps;
            const float want = crash ? -1.0f : eat ? 1.0f : 0.0f;
            int ok = s->reward[i] == want && s->terminated[i] == term && s->truncated[i] == trunc;
            if (!crash) {
                if (!wall && p->len >= 2 && nc == p->chain[p->len - 1] && !eat) tail_follows++;
                for (int k = (eat ? p->len : p->len - 1); k > 0; k--) p->chain[k] = p->chain[k - 1];
                p->chain[0] = nc;
                p->len += eat;
            }
            ret[i] += want;
            const int ended = s->terminated[i] || s->truncated[i];
            if (ended) {
                ends++;
                walls += wall;
                bodies += body;
                crashes += crash;
                truncs += s->truncated[i];
                food_ended += p->len - 1;
                ok &= fresh(s, i);
                model_from(p, s, i);
                ret[i] = 0.0f;
                st[i] = 0;
            } else {
                ok &= s->ep_return[i] == ret[i];
                if (eat) {   /* a new food item on a free cell */
                    const int nf = mr_snake_of(s)->food[i];
                    ok &= nf >= 0 && nf < G * G && !in_chain(p, nf);
                    p->food = nf;
                }
                /* the critic's inputs: the length's share of the board, the episode's share of the limit */
                float x[2] = {-1.0f, -1.0f};
                mr_env_critic_extra_one(s, i, x);
                ok &= x[0] == (float)((double)p->len / (G * G)) && s->steps[i] == st[i] &&
                      x[1] == (max_steps > 0 ? (float)((double)st[i] / max_steps) : 0.0f);
            }
            food += eat;
            ok &= agrees(p, s, i);
            if (!ok && bad++ < 3)
                fprintf(stderr, "  step %d env %d: action %d, head %d, len %d: reward %g term %d trunc %d\n", t, i,
                        act[i], p->chain[0], p->len, (double)s->reward[i], s->terminated[i], s->truncated[i]);
        }
    }
    CHECK_MSG(bad == 0, "%ld steps broke the rules (board %d, view %d)", bad, G, 2 * view + 1);
    CHECK_MSG(walls > 100 && bodies > 20 && food > min_food && tail_follows > 5 && (max_steps == 0 || truncs > 3),
              "branches: walls %ld, body %ld, food %ld, tail follows %ld, truncations %ld", walls, bodies, food,
              tail_follows, truncs);
    mr_env_log sum;
    CHECK(mr_env_log_summary(e, &sum, &err) == MR_OK);
    CHECK_MSG(sum.episodes == ends && sum.deaths == crashes && sum.count[0] == food_ended && sum.count[1] == crashes,
              "log: %d episodes %d deaths, food %d, crashes %d; counted %ld %ld %ld %ld", sum.episodes, sum.deaths,
              sum.count[0], sum.count[1], ends, crashes, food_ended, crashes);
    CHECK(sum.count_total[0] == food && sum.steps_total == (long)N * steps);
    mr_env_free(e);
}

/* Hand-written boards (5 x 5, cells y * 5 + x): one instance's state set
 * by hand, then one step. */
static void set_board(mr_env_state *s, const int *chain, int len, int food) {
    mr_snake *f = mr_snake_of(s);
    memset(f->grid, E_EMPTY, 25);
    for (int k = 0; k < len; k++) {
        f->body[len - 1 - k] = chain[k];   /* the tail at slot 0, the head at slot len - 1 */
        f->grid[chain[k]] = E_BODY;
    }
    f->head[0] = len - 1;
    f->len[0] = len;
    f->food[0] = food;
    if (food >= 0) f->grid[food] = E_FOOD;
    s->steps[0] = 3;
    s->ep_return[0] = 0.0f;
    mr_snake_write_obs(s, 0);
}

static void test_hand(void) {
    mr_env_config c = snake_cfg(1, 5, 2, 0);
    mr_env *e = make_env(&c, 2, 1);
    mr_env_state *s = &e->s;
    mr_error err;
    model m;
    uint8_t a;
    /* a square: head 12, then 13, 18, 17; moving down into 17 (the tail, which moves) is safe */
    const int sq[4] = {12, 13, 18, 17};
    set_board(s, sq, 4, 0);
    model_from(&m, s, 0);
    CHECK(agrees(&m, s, 0));   /* the observation: the tail's own code, walls past the board's edge */
    CHECK(s->obs[2 * 5 + 2] == E_BODY && s->obs[3 * 5 + 2] == E_TAIL && s->obs[0] == E_FOOD);
    a = 1;
    CHECK(mr_env_step(e, &a, &err) == MR_OK);
    CHECK(s->reward[0] == 0.0f && !s->terminated[0] && mr_snake_of(s)->len[0] == 4);
    const int sq2[4] = {17, 12, 13, 18};
    memcpy(m.chain, sq2, sizeof sq2);
    CHECK(agrees(&m, s, 0) && s->steps[0] == 4);
    /* into the neck (13 from 12... here: head 17, neck 12, up): a crash */
    a = 0;
    CHECK(mr_env_step(e, &a, &err) == MR_OK);
    CHECK(s->reward[0] == -1.0f && s->terminated[0] && !s->truncated[0] && fresh(s, 0));
    /* a chain of two turns round into its tail: allowed (the tail moves first) */
    const int two[2] = {6, 7};
    set_board(s, two, 2, 24);
    a = 3;
    CHECK(mr_env_step(e, &a, &err) == MR_OK);
    CHECK(s->reward[0] == 0.0f && !s->terminated[0] && mr_snake_of(s)->len[0] == 2);
    /* eating where the tail was going to leave: the tail stays, so the chain is 3 */
    const int three[3] = {1, 6, 11};
    set_board(s, three, 3, 0);
    a = 2;
    CHECK(mr_env_step(e, &a, &err) == MR_OK);
    CHECK(s->reward[0] == 1.0f && !s->terminated[0] && mr_snake_of(s)->len[0] == 4);
    const int four[4] = {0, 1, 6, 11};
    memcpy(m.chain, four, sizeof four);
    m.len = 4;
    m.food = mr_snake_of(s)->food[0];
    CHECK(m.food >= 0 && !in_chain(&m, m.food) && agrees(&m, s, 0));
    /* the wall: left from column 0 */
    a = 2;
    CHECK(mr_env_step(e, &a, &err) == MR_OK);
    CHECK(s->reward[0] == -1.0f && s->terminated[0] && fresh(s, 0));
    mr_env_log sum;
    CHECK(mr_env_log_summary(e, &sum, &err) == MR_OK);
    /* the food counter is an ended episode's length - 1: 3 and 3 */
    CHECK(sum.episodes == 2 && sum.deaths == 2 && sum.count[0] == 6 && sum.count[1] == 2 && sum.count_total[0] == 1);
    /* the last free cell eaten: the game is won (terminated, no crash). A
     * path row by row, even rows left to right, odd ones right to left:
     * p[0 .. 24]; the chain p[23], p[22], ..., p[0], the food at p[24] */
    int path[25], chain[24];
    for (int k = 0; k < 25; k++) {
        const int y = k / 5, x = y % 2 == 0 ? k % 5 : 4 - k % 5;
        path[k] = y * 5 + x;
    }
    for (int k = 0; k < 24; k++) chain[k] = path[23 - k];
    set_board(s, chain, 24, path[24]);
    CHECK(chain[0] == 23 && path[24] == 24);   /* row 4 runs left to right: the food is right of the head */
    a = 3;
    CHECK(mr_env_step(e, &a, &err) == MR_OK);
    CHECK(s->reward[0] == 1.0f && s->terminated[0] && !s->truncated[0] && fresh(s, 0));
    CHECK(mr_env_log_summary(e, &sum, &err) == MR_OK);
    CHECK(sum.episodes == 3 && sum.deaths == 3 && sum.count[0] == 6 + 24 && sum.count[1] == 2);
    mr_env_free(e);
}

static void test_threads(void) {
    /* above the step loop's parallel threshold, so two threads really split it */
    enum { N = 2048, G = 6, V = 5 };
    mr_env_config c = snake_cfg(N, G, 2, 30);
    mr_env *a = make_env(&c, 3, 1), *b = make_env(&c, 3, 2);
    uint8_t *act = malloc(N);
    uint32_t lcg = 1;
    mr_error err;
    for (int t = 0; t < 200; t++) {
        for (int i = 0; i < N; i++) act[i] = next_action(&lcg);
        CHECK(mr_env_step(a, act, &err) == MR_OK && mr_env_step(b, act, &err) == MR_OK);
    }
    const mr_env_state *p = &a->s, *q = &b->s;
    const mr_snake *fp = mr_snake_of(p), *fq = mr_snake_of(q);
    CHECK(memcmp(fp->grid, fq->grid, (size_t)N * G * G) == 0 && memcmp(p->obs, q->obs, (size_t)N * V * V) == 0);
    CHECK(memcmp(fp->body, fq->body, (size_t)N * G * G * 4) == 0 && memcmp(fp->head, fq->head, N * 4) == 0 &&
          memcmp(fp->len, fq->len, N * 4) == 0 && memcmp(fp->food, fq->food, N * 4) == 0);
    CHECK(memcmp(p->reward, q->reward, N * 4) == 0 && memcmp(p->ep_return, q->ep_return, N * 4) == 0);
    free(act);
    mr_env_free(a);
    mr_env_free(b);
}

static void test_refusals(void) {
    mr_error err;
    mr_env *e = NULL;
    mr_env_config c = snake_cfg(4, 5, 2, 30);
    c.mode = MR_MODE_PROXY;
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG);
    CHECK_MSG(msg_has(&err, "snake has only ground_truth"), "%s", err.msg);
    c = snake_cfg(4, 5, 5, 30);   /* an 11 x 11 view on a 5 x 5 board: more than the board from any cell */
    CHECK(mr_env_create(&c, 1, MR_DEVICE_CPU, 1, &e, &err) == MR_ERR_ARG);
    CHECK_MSG(msg_has(&err, "view of at most 2 * grid_size - 1"), "%s", err.msg);
    c = snake_cfg(4, 5, 4, 30);   /* 9 x 9 on 5 x 5: the whole board from every cell */
    e = make_env(&c, 1, 1);
    uint8_t act[4] = {0, 1, 2, 4};
    CHECK(mr_env_step(e, act, &err) == MR_ERR_ARG);
    CHECK_MSG(msg_has(&err, "actions[3] = 4: accepted 0 .. 3 (snake has 4 actions)"), "%s", err.msg);
    mr_env_free(e);
}

int main(void) {
    test_reset();
    test_steps(5, 2, 12, 3000, 500);
    test_steps(4, 3, 0, 2000, 300);   /* a view past every edge; no step limit */
    test_hand();
    test_threads();
    test_refusals();
    return check_report("test_env_snake");
}

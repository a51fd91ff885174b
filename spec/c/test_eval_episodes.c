/*
 * test_eval_episodes.c - the episodic evaluation protocol
 * (mr_trainer_evaluate_episodes) against a reference written here: the
 * same environments stepped directly through the public mr_env object,
 * seeded as the protocol says (seed + r x 1000003), with the greedy actions
 * worked out here from the policy's logits (mr_trainer_infer over the same
 * batch: argmax, or the Gaussian's mean), each episode's return summed in
 * double from the rewards the environment reports, its length and end
 * counted, its counters and success derived from the rules (reach: a goal
 * pays +0.99, a pit terminates). Checked for every environment kind the
 * engine has beside foraging:
 *   - cartpole (discrete, success = truncated at the step limit), pendulum
 *     (a box: the mean; no success), reach (counters goal and pit, success =
 *     a goal): every record equal to the reference's, in the same order;
 *   - sampled actions: the records tile every instance's steps, cartpole's
 *     return equals its length, success is exactly "truncated", the same
 *     seed gives the same bytes and another seed other episodes;
 *   - episodes = K: K ended episodes per run, instance i at most
 *     (K + i) / N of them, and it stops early;
 *   - foraging keeps its own protocol (mr_trainer_eval_protocol), runs the
 *     episodic one when asked, and what does not fit is refused by name.
 */
#include "moonrl.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 6
#define STEPS 150
#define CP_LIMIT 30

static mr_trainer *make_trainer(mr_env_name name, int max_steps) {
    mr_config c;
    mr_config_default(&c);
    c.env.name = name;
    c.env.num_envs = 4;
    c.env.max_episode_steps = max_steps;
    if (name == MR_ENV_REACH) {
        c.env.grid_size = 8;
        c.env.view_range = 2;
        c.env.density_min = 2;
        c.env.density_max = 4;
        c.policy.num_conv = 1;
        c.policy.conv_channels[0] = 4;
        c.policy.hidden = 16;
    } else {
        c.policy.num_mlp = 2;
        c.policy.mlp_widths[0] = c.policy.mlp_widths[1] = 16;
    }
    mr_config_follow_env(&c);
    c.policy.critic_hidden = 16;
    c.ppo.rollout_steps = 4;
    c.threads = 2;
    c.device = MR_DEVICE_CPU;
    c.seed = 5;
    mr_trainer *t = NULL;
    mr_error e;
    CHECK_MSG(mr_trainer_create(&c, &t, &e) == MR_OK, "%s", e.msg);
    return t;
}

static mr_eval_config eval_cfg(int greedy, uint64_t seed) {
    mr_eval_config ec;
    mr_eval_config_default(&ec);
    ec.num_envs = N;
    ec.steps = STEPS;
    ec.runs = 2;
    ec.seed = seed;
    ec.greedy = greedy;
    return ec;
}

/* The reference: greedy episodes of t's environment, stepped through mr_env. */
static mr_eval_episode *reference(mr_trainer *t, const mr_eval_config *ec, uint64_t *count) {
    const mr_config *tc = mr_trainer_config(t);
    mr_env_config envc = tc->env;
    envc.num_envs = N;
    const int name = envc.name, box = tc->policy.act_box, NA = tc->policy.num_actions;
    mr_eval_episode *out = calloc(4096, sizeof *out);
    uint64_t n = 0;
    for (int run = 0; run < ec->runs; run++) {
        mr_env *e = NULL;
        mr_error err;
        CHECK_MSG(mr_env_create(&envc, ec->seed + (uint64_t)run * 1000003ull, MR_DEVICE_CPU, 2, &e, &err) == MR_OK,
                  "%s", err.msg);
        /* mr_env_create resets every instance: the first draws, as the evaluation's reset */
        uint8_t obs[N * 64], term[N], trunc[N], act[N];
        float reward[N], logits[N * MR_MAX_ACTIONS], value[N], torque[N];
        double ret[N] = {0};
        int start[N] = {0}, goals[N] = {0};
        for (int s = 0; s < ec->steps; s++) {
            mr_env_view v = {obs, reward, term, trunc, NULL, NULL, NULL, NULL};
            CHECK(mr_env_read(e, &v, &err) == MR_OK);
            CHECK_MSG(mr_trainer_infer(t, obs, NULL, N, logits, value, &err) == MR_OK, "%s", err.msg);
            for (int i = 0; i < N; i++) {
                const float *l = logits + (size_t)i * NA;
                if (box) {
                    torque[i] = l[0];   /* the Gaussian's mean */
                } else {
                    int best = 0;
                    for (int k = 1; k < NA; k++)
                        if (l[k] > l[best]) best = k;
                    act[i] = (uint8_t)best;
                }
            }
            CHECK((box ? mr_env_step_box(e, torque, &err) : mr_env_step(e, act, &err)) == MR_OK);
            CHECK(mr_env_read(e, &v, &err) == MR_OK);
            for (int i = 0; i < N; i++) {
                ret[i] += (double)reward[i];
                if (name == MR_ENV_REACH && reward[i] > 0.5f) goals[i]++;   /* -0.01 + 1 */
                if (!term[i] && !trunc[i]) continue;
                mr_eval_episode x;
                memset(&x, 0, sizeof x);
                x.run = run;
                x.env = i;
                x.start = start[i];
                x.length = s + 1 - start[i];
                x.ended = term[i] ? 1 : 2;
                x.ret = ret[i];
                if (name == MR_ENV_REACH) {
                    x.count[0] = goals[i];
                    x.count[1] = term[i];   /* a pit ends it */
                    x.success = goals[i] > 0;
                } else {
                    x.success = name == MR_ENV_CARTPOLE ? !term[i] : -1;
                }
                if (n < 4096) out[n++] = x;
                start[i] = s + 1;
                ret[i] = 0;
                goals[i] = 0;
            }
        }
        for (int i = 0; i < N; i++) {   /* running at the end: length, return; no counters yet */
            if (ec->steps - start[i] <= 0) continue;
            mr_eval_episode x;
            memset(&x, 0, sizeof x);
            x.run = run;
            x.env = i;
            x.start = start[i];
            x.length = ec->steps - start[i];
            x.ret = ret[i];
            x.success = name == MR_ENV_PENDULUM ? -1 : 0;
            if (n < 4096) out[n++] = x;
        }
        mr_env_free(e);
    }
    *count = n;
    return out;
}

static int same_episode(const mr_eval_episode *a, const mr_eval_episode *b) {
    return a->run == b->run && a->env == b->env && a->start == b->start && a->length == b->length &&
           a->ended == b->ended && a->success == b->success && a->ret == b->ret &&
           memcmp(a->count, b->count, sizeof a->count) == 0;
}

/* Greedy evaluation of t against the reference; returns how many ended. */
static void check_greedy(mr_trainer *t, const char *what, int *terminated, int *truncated, int *successes) {
    mr_eval_config ec = eval_cfg(1, 91);
    mr_eval_episodes got;
    mr_error e;
    CHECK_MSG(mr_trainer_evaluate_episodes(t, &ec, &got, NULL, NULL, &e) == MR_OK, "%s: %s", what, e.msg);
    uint64_t nref = 0;
    mr_eval_episode *ref = reference(t, &ec, &nref);
    CHECK_MSG(got.count == nref, "%s: %llu records, the reference %llu", what, (unsigned long long)got.count,
              (unsigned long long)nref);
    uint64_t ended = 0;
    for (uint64_t k = 0; k < got.count && k < nref; k++) {
        const mr_eval_episode *x = &got.ep[k];
        CHECK_MSG(same_episode(x, &ref[k]), "%s record %llu: run %d env %d start %d length %d ended %d success %d "
                  "return %.17g counts %d %d; reference: start %d length %d ended %d success %d return %.17g counts "
                  "%d %d", what, (unsigned long long)k, x->run, x->env, x->start, x->length, x->ended, x->success,
                  x->ret, x->count[0], x->count[1], ref[k].start, ref[k].length, ref[k].ended, ref[k].success,
                  ref[k].ret, ref[k].count[0], ref[k].count[1]);
        ended += x->ended != 0;
        *terminated += x->ended == 1;
        *truncated += x->ended == 2;
        *successes += x->success == 1;
    }
    CHECK(got.ended == ended);
    free(ref);
    mr_eval_episodes_free(&got);
    CHECK(got.ep == NULL && got.count == 0);
}

int main(void) {
    mr_error e;
    int term = 0, trunc = 0, succ = 0;

    /* cartpole: success = truncated at the step limit (here CP_LIMIT, below its 500) */
    mr_trainer *cp = make_trainer(MR_ENV_CARTPOLE, CP_LIMIT);
    if (!cp) return 1;
    CHECK(mr_trainer_eval_protocol(cp, NULL) == MR_EVAL_EPISODIC);
    check_greedy(cp, "cartpole", &term, &trunc, &succ);
    CHECK_MSG(term > 10 && trunc > 3 && succ == trunc, "cartpole: terminated %d truncated %d successes %d", term,
              trunc, succ);

    /* sampled: tiling, return = length, success = truncated, determinism, the seed matters */
    {
        mr_eval_config ec = eval_cfg(0, 7);
        mr_eval_episodes a, b, c;
        CHECK_MSG(mr_trainer_evaluate_episodes(cp, &ec, &a, NULL, NULL, &e) == MR_OK, "%s", e.msg);
        CHECK(mr_trainer_evaluate_episodes(cp, &ec, &b, NULL, NULL, &e) == MR_OK);
        CHECK(a.count == b.count && memcmp(a.ep, b.ep, sizeof(mr_eval_episode) * a.count) == 0);
        ec.seed = 8;
        CHECK(mr_trainer_evaluate_episodes(cp, &ec, &c, NULL, NULL, &e) == MR_OK);
        CHECK(c.count != a.count || memcmp(a.ep, c.ep, sizeof(mr_eval_episode) * a.count) != 0);
        int next[2][N], ok = 1, ended_ok = 1;
        memset(next, 0, sizeof next);
        uint64_t ended = 0;
        for (uint64_t k = 0; k < a.count; k++) {
            const mr_eval_episode *x = &a.ep[k];
            ok &= x->start == next[x->run][x->env] && x->length >= 1;
            next[x->run][x->env] = x->start + x->length;
            ok &= x->ret == (double)x->length;   /* reward 1 a step */
            ended_ok &= x->ended == 0 ? x->success == 0 : x->success == (x->ended == 2);
            ended_ok &= x->ended != 2 || x->length == CP_LIMIT;
            ended += x->ended != 0;
        }
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < N; i++) CHECK_MSG(next[r][i] == STEPS, "run %d env %d tiles %d", r, i, next[r][i]);
        CHECK(ok && ended_ok);
        CHECK(a.ended == ended && ended > 2 * N);
        mr_eval_episodes_free(&a);
        mr_eval_episodes_free(&b);
        mr_eval_episodes_free(&c);
    }

    /* episodes = K: K per run, (K + i) / N per instance, stopping early */
    {
        mr_eval_config ec = eval_cfg(0, 7);
        ec.episodes = 9;
        int done_at = 0;
        mr_eval_episodes a;
        CHECK_MSG(mr_trainer_evaluate_episodes(cp, &ec, &a, NULL, NULL, &e) == MR_OK, "%s", e.msg);
        int per[2][N];
        memset(per, 0, sizeof per);
        for (uint64_t k = 0; k < a.count; k++) {
            const mr_eval_episode *x = &a.ep[k];
            CHECK(x->ended != 0);   /* every instance got its share before the steps ran out */
            per[x->run][x->env]++;
            if (x->start + x->length > done_at) done_at = x->start + x->length;
        }
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < N; i++) CHECK(per[r][i] == (9 + i) / N);
        CHECK(a.count == 18 && a.ended == 18);
        CHECK_MSG(done_at < STEPS, "the last episode ended at step %d", done_at);
        mr_eval_episodes_free(&a);
    }

    /* what does not fit is refused by name */
    {
        mr_eval_config ec = eval_cfg(0, 7);
        mr_eval_result r;
        mr_eval_records recs;
        mr_eval_episodes x;
        CHECK(mr_trainer_evaluate_records(cp, &ec, &r, &recs, NULL, NULL, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "env.name = cartpole: the survival protocol") != NULL, "%s", e.msg);
        ec.protocol = MR_EVAL_SURVIVAL;
        CHECK(mr_trainer_evaluate_episodes(cp, &ec, &x, NULL, NULL, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "mr_trainer_evaluate_records") != NULL, "%s", e.msg);
        ec = eval_cfg(0, 7);
        ec.mode = MR_MODE_PROXY;
        CHECK(mr_trainer_evaluate_episodes(cp, &ec, &x, NULL, NULL, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "has only ground_truth") != NULL, "%s", e.msg);
        ec = eval_cfg(0, 7);
        ec.episodes = -1;
        CHECK(mr_trainer_evaluate_episodes(cp, &ec, &x, NULL, NULL, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "eval episodes = -1") != NULL, "%s", e.msg);
        ec = eval_cfg(2, 7);
        CHECK(mr_trainer_evaluate_episodes(cp, &ec, &x, NULL, NULL, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "eval greedy = 2") != NULL, "%s", e.msg);
        CHECK(x.count == 0 && x.ep == NULL);
    }
    mr_trainer_free(cp);

    /* pendulum: a box, the greedy action is the Gaussian's mean; no success */
    mr_trainer *pd = make_trainer(MR_ENV_PENDULUM, 40);
    term = trunc = succ = 0;
    check_greedy(pd, "pendulum", &term, &trunc, &succ);
    CHECK_MSG(term == 0 && trunc == 2 * N * (STEPS / 40) && succ == 0, "pendulum: terminated %d truncated %d", term,
              trunc);
    mr_trainer_free(pd);

    /* reach: the counters goal and pit, success = a goal */
    mr_trainer *rc = make_trainer(MR_ENV_REACH, 20);
    term = trunc = succ = 0;
    check_greedy(rc, "reach", &term, &trunc, &succ);
    CHECK_MSG(term > 0 && trunc > 0 && succ > 0, "reach: terminated %d truncated %d successes %d", term, trunc, succ);
    mr_trainer_free(rc);

    /* foraging: its own protocol is survival; the episodic one on request, with food and poison counted */
    {
        mr_config c;
        mr_config_default(&c);
        c.env.num_envs = 4;
        c.env.grid_size = 16;
        c.env.density_min = 20;
        c.env.density_max = 40;
        c.env.max_episode_steps = 50;
        c.policy.num_conv = 1;
        c.policy.conv_channels[0] = 4;
        c.policy.hidden = 16;
        c.policy.critic_hidden = 16;
        c.ppo.rollout_steps = 4;
        c.threads = 2;
        c.device = MR_DEVICE_CPU;
        mr_trainer *fg = NULL;
        CHECK_MSG(mr_trainer_create(&c, &fg, &e) == MR_OK, "%s", e.msg);
        CHECK(mr_trainer_eval_protocol(fg, NULL) == MR_EVAL_SURVIVAL);
        mr_eval_config ec = eval_cfg(0, 3);
        ec.protocol = MR_EVAL_EPISODIC;
        CHECK(mr_trainer_eval_protocol(fg, &ec) == MR_EVAL_EPISODIC);
        mr_eval_episodes a;
        CHECK_MSG(mr_trainer_evaluate_episodes(fg, &ec, &a, NULL, NULL, &e) == MR_OK, "%s", e.msg);
        int eaten = 0, ok = 1;
        for (uint64_t k = 0; k < a.count; k++) {
            eaten += a.ep[k].count[0] + a.ep[k].count[1];
            ok &= a.ep[k].success == -1 && (a.ep[k].ended == 0 || a.ep[k].length <= 50);
        }
        CHECK(ok && eaten > 0 && a.ended > 0);
        mr_eval_episodes_free(&a);
        mr_eval_records recs;
        mr_eval_result r;
        CHECK(mr_trainer_evaluate_records(fg, &ec, &r, &recs, NULL, NULL, &e) == MR_ERR_ARG);
        ec.protocol = -1;
        ec.episodes = 5;
        CHECK(mr_trainer_evaluate_records(fg, &ec, &r, &recs, NULL, NULL, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "eval episodes = 5: the survival protocol") != NULL, "%s", e.msg);
        mr_trainer_free(fg);
    }
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

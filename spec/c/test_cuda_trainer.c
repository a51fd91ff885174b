/*
 * test_cuda_trainer.c - what only the GPU path of the one trainer loop
 * (src/engine/core/trainer.c over kernels/backend_cuda.c) has. The loop itself
 * (order, faults, memory, state) is tested on the cpu backend by
 * test_trainer_loop_*.c; here the cuda table's results are held against the
 * cpu table's on the same config.
 *
 * Without a GPU (or without CUDA in the build): "skipped (no GPU)", and the
 * checks of that path: device = cuda is refused with MR_ERR_BACKEND naming
 * cuda and the accepted values, creating on the cuda table fails cleanly,
 * device = auto falls back to the cpu and says so, planning still answers.
 *
 * With a GPU (a CUDA build and mr_cuda_device_count() > 0):
 *   1. the cuda table against the cpu table over 3 updates (ground truth
 *      with PopArt, without PopArt, proxy mode with 1 and with 4
 *      minibatches): the rollouts' obs, actions, rewards, done bits bit for
 *      bit up to an environment's first differing action (a uniform that
 *      falls within the last bits of a boundary; at most 2 environments per
 *      rollout), logp / val / bootstrap values / returns within 1e-6 - 1e-5
 *      (normwise relative, check_relerr), advantages where no environment
 *      diverged; metrics; parameters (per group) and Adam moments within
 *      1e-4 after updates 1 and 3, Adam step and PopArt;
 *   2. checkpoints across backends: a CUDA run's checkpoint loaded into a
 *      cpu trainer (of another seed) and a cpu run's into a cuda trainer
 *      continue like the run they came from;
 *   3. graphs: updates 2 and 3 replay recorded graphs (mr_trainer_graphs_used)
 *      and give the same bits as a trainer with cuda.graphs = 0 (rollout,
 *      metrics, parameters, moments), also after a checkpoint is loaded
 *      into both;
 *   4. bf16 and fp16: finite and near fp32; fp16 with a huge loss scale
 *      skips every step without an error, leaves weights and moments alone
 *      and backs the scale off; a sane scale then trains;
 *   5. a num_envs too large for the card (cuda.memory_fraction 0.02):
 *      MR_ERR_NOMEM with "At most N environments fit"; N creates, N + 1 not;
 *   1b. the MLP trunk the same way: cartpole (categorical) bit for bit as
 *      above; pendulum's Gaussian head (clip, tanh, and bf16, which the MLP
 *      runs in fp32) within 1e-3 (float actions: the dynamics carry a last
 *      bit on), graphs replayed; both again with short step limits, their
 *      truncated steps bootstrapped (ppo.truncation: keep_final, add_final;
 *      those rewards within 1e-5); dials (the multi-discrete head, 2 groups
 *      of 3) bit for bit as cartpole;
 *   1c. a float image (catch): the CNN reading the image, as 1;
 *   6. the kept state (mr_trainer_keep) between replayed updates: what the
 *      update left, brought back bit for bit by mr_trainer_restore_kept after
 *      the NaN test aid's non-finite updates; graphs and eager agree throughout.
 * Every measured difference is printed, to tighten the tolerances from.
 */
#include "check.h"
#include "moonrl.h"
#include "trainer.h"
#include "rollout_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void small_config(mr_config *c) {
    mr_config_default(c);
    c->env.num_envs = 32;
    c->env.grid_size = 16;
    c->env.density_min = 20;
    c->env.density_max = 60;
    c->env.max_episode_steps = 12;   /* episodes end within an update */
    c->policy.num_conv = 2;
    c->policy.conv_channels[0] = 4;
    c->policy.conv_channels[1] = 8;
    c->policy.hidden = 32;
    c->policy.critic_hidden = 24;
    c->ppo.rollout_steps = 16;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 2;
    c->threads = 1;
    c->seed = 7;
    c->total_steps = 16 * 32 * 6;   /* lr, clip, ent_coef move between updates */
}

/* catch's float image on small_config's network */
static void image_config(mr_config *c) {
    small_config(c);
    c->env.name = MR_ENV_CATCH;
    c->env.grid_size = 8;
    mr_config_follow_env(c);
}

/* ================================================================ no GPU */

static void test_without_gpu(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t = (mr_trainer *)&c;
    c.device = MR_DEVICE_CUDA;
    mr_status s = mr_trainer_create(&c, &t, &e);
    CHECK_MSG(s == MR_ERR_BACKEND && e.status == s && t == NULL, "device = cuda without a GPU: %d: %s", s, e.msg);
    CHECK_MSG(strstr(e.msg, "cuda") && strstr(e.msg, "\"cpu\"") && strstr(e.msg, "\"auto\""),
              "the message names neither cuda nor the accepted values: %s", e.msg);
    /* the cuda table itself fails cleanly (no CUDA in the build, or no device to enter) */
    t = (mr_trainer *)&c;
    s = mr_trainer_create_on(&c, mr_backend_cuda(), "", &t, &e);
    CHECK_MSG(s != MR_OK && t == NULL && e.msg[0] != 0, "the cuda table without a GPU: %d: %s", s, e.msg);
    if (s == MR_OK) mr_trainer_free(t);
    /* auto falls back to the cpu and says why */
    c.device = MR_DEVICE_AUTO;
    t = NULL;
    s = mr_trainer_create(&c, &t, &e);
    CHECK_MSG(s == MR_OK, "device = auto: %s", e.msg);
    if (t) {
        CHECK(mr_trainer_config(t)->device == MR_DEVICE_CPU);
        CHECK_MSG(strstr(mr_trainer_describe(t), "cpu backend") && strstr(mr_trainer_describe(t), "device = auto"),
                  "%s", mr_trainer_describe(t));
        mr_trainer_free(t);
    }
    /* planning needs no GPU */
    uint64_t bytes = 0;
    CHECK(mr_config_device_bytes(&c, &bytes, &e) == MR_OK && bytes > 0);
    /* a float image (catch) is no reason of its own: cuda is refused for want of a GPU, auto says so */
    image_config(&c);
    c.device = MR_DEVICE_CUDA;
    t = NULL;
    s = mr_trainer_create(&c, &t, &e);
    CHECK_MSG(s == MR_ERR_BACKEND && t == NULL && !strstr(e.msg, "float image"), "catch on cuda: %d: %s", s, e.msg);
    c.device = MR_DEVICE_AUTO;
    s = mr_trainer_create(&c, &t, &e);
    CHECK_MSG(s == MR_OK, "catch, device = auto: %s", e.msg);
    if (t) {
        CHECK(mr_trainer_config(t)->device == MR_DEVICE_CPU);
        CHECK_MSG(strstr(mr_trainer_describe(t), "device = auto: no usable GPU"), "%s", mr_trainer_describe(t));
        mr_trainer_free(t);
    }
}

#ifdef MOONRL_HAVE_CUDA

static mr_trainer *make(const mr_config *cfg, const mr_backend *be) {
    mr_config c = *cfg;
    c.device = be->device;
    mr_trainer *t = NULL;
    mr_error e;
    if (mr_trainer_create_on(&c, be, "", &t, &e) != MR_OK) CHECK_MSG(0, "%s trainer: %s", be->name, e.msg);
    return t;
}

static int update(mr_trainer *t, mr_metrics *m) {
    mr_error e;
    const mr_status s = mr_trainer_update(t, m, &e);
    CHECK_MSG(s == MR_OK, "update on %s: %s", t->be->name, e.msg);
    return s == MR_OK;
}

static int pull(mr_trainer *t, int what) {
    mr_error e;
    const mr_status s = mr_trainer_pull(t, what, &e);
    CHECK_MSG(s == MR_OK, "pull: %s", e.msg);
    return s == MR_OK;
}


static int roll_bits_equal(const roll *a, const roll *b) {
    const size_t B = (size_t)a->T * (size_t)a->N;
    return !memcmp(a->obs, b->obs, B * (size_t)a->VV) && !memcmp(a->act, b->act, B * (size_t)a->AB) && !memcmp(a->done, b->done, B) &&
           !memcmp(a->extra, b->extra, B * 8) && !memcmp(a->logp, b->logp, B * 4) && !memcmp(a->val, b->val, B * 4) &&
           !memcmp(a->rew, b->rew, B * 4) && !memcmp(a->adv, b->adv, B * 4) && !memcmp(a->ret, b->ret, B * 4) &&
           !memcmp(a->last_value, b->last_value, (size_t)a->N * 4);
}

/* Normwise relative error of a against b over the marked elements. */
static double relerr_masked(const float *a, const float *b, const uint8_t *use, size_t n) {
    double num = 0.0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!use[i]) continue;
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return d;
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return num / den;
}

/* The cuda rollout g against the cpu one c. Per environment everything up
 * to its first differing action is compared (the logits differ in their
 * last bits, so a uniform on a boundary may go another way); returns, the
 * bootstrap value and the advantages only where nothing diverged. Returns
 * the number of diverged environments. */
static int compare_rollout(const char *label, const roll *c, const roll *g, int max_div, double tol_out) {
    const int T = c->T, N = c->N, VV = c->VV;
    const size_t B = (size_t)T * (size_t)N;
    int *div = malloc(sizeof(int) * (size_t)N), ndiv = 0;
    uint8_t *same_state = calloc(B, 1), *whole = calloc(B, 1), *whole_n = calloc((size_t)N, 1);
    for (int n = 0; n < N; n++) {
        div[n] = T;
        for (int t = 0; t < T; t++)
            if (memcmp(c->act + ((size_t)t * N + n) * c->AB, g->act + ((size_t)t * N + n) * c->AB, (size_t)c->AB)) {
                div[n] = t;
                break;
            }
        ndiv += div[n] < T;
        whole_n[n] = div[n] == T;
    }
    long bad_obs = 0, bad_extra = 0, bad_rew = 0, bad_done = 0;
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++) {
            const size_t k = (size_t)t * N + n;
            if (t <= div[n]) {   /* the same state */
                same_state[k] = 1;
                bad_obs += memcmp(c->obs + k * VV, g->obs + k * VV, (size_t)VV) != 0;
                bad_extra += memcmp(c->extra + 2 * k, g->extra + 2 * k, 8) != 0;
            }
            if (t < div[n]) {    /* the same action: the same step (a truncated step's bootstrap
                                  * gamma V(final) is the critic's: equal within its rounding) */
                if (c->done[k] && c->rew[k] != g->rew[k])
                    bad_rew += fabs((double)c->rew[k] - (double)g->rew[k]) > 1e-5 * (1.0 + fabs((double)c->rew[k]));
                else
                    bad_rew += memcmp(c->rew + k, g->rew + k, 4) != 0;
                bad_done += c->done[k] != g->done[k];
            }
            whole[k] = div[n] == T;
        }
    CHECK_MSG(ndiv <= max_div, "%s: %d of %d environments took another action (at most %d accepted)", label, ndiv, N,
              max_div);
    CHECK_MSG(bad_obs == 0, "%s: %ld observation rows differ", label, bad_obs);
    CHECK_MSG(bad_extra == 0, "%s: %ld count-input rows differ", label, bad_extra);
    CHECK_MSG(bad_rew == 0, "%s: %ld rewards differ", label, bad_rew);
    CHECK_MSG(bad_done == 0, "%s: %ld done bits differ", label, bad_done);
    const double e_logp = relerr_masked(g->logp, c->logp, same_state, B);
    const double e_val = relerr_masked(g->val, c->val, same_state, B);
    const double e_ret = relerr_masked(g->ret, c->ret, whole, B);
    const double e_lv = relerr_masked(g->last_value, c->last_value, whole_n, (size_t)N);
    CHECK_MSG(e_logp < tol_out, "%s: logp differs by %.3g (relative)", label, e_logp);
    CHECK_MSG(e_val < tol_out, "%s: values differ by %.3g (relative)", label, e_val);
    CHECK_MSG(e_ret < 1e-5, "%s: returns differ by %.3g (relative)", label, e_ret);
    CHECK_MSG(e_lv < 1e-5, "%s: bootstrap values differ by %.3g (relative)", label, e_lv);
    double e_adv = -1.0;
    if (ndiv == 0) {
        e_adv = check_relerr(g->adv, c->adv, B, 1e-30);
        CHECK_MSG(e_adv < 1e-5, "%s: advantages differ by %.3g (relative)", label, e_adv);
    }
    printf("    %s: %d diverged; logp %.2g, val %.2g, ret %.2g, bootstrap %.2g, adv %.2g\n", label, ndiv, e_logp,
           e_val, e_ret, e_lv, e_adv);
    free(div);
    free(same_state);
    free(whole);
    free(whole_n);
    return ndiv;
}

static void compare_metrics(const char *label, const mr_metrics *g, const mr_metrics *c, int M) {
    CHECK(g->update == c->update && g->agent_steps == c->agent_steps && g->episodes == c->episodes);
    CHECK(g->lr == c->lr && g->clip == c->clip && g->ent_coef == c->ent_coef);
    CHECK(g->skipped_steps == 0 && g->nonfinite == 0 && g->loss_scale == 1.0);
    CHECK_NEAR(g->episode_return_mean, c->episode_return_mean, 1e-6, 1e-6);
    CHECK_NEAR(g->policy_loss, c->policy_loss, 1e-6, 1e-4);
    CHECK_NEAR(g->value_loss, c->value_loss, 1e-7, 1e-4);
    CHECK_NEAR(g->entropy, c->entropy, 0, 1e-4);
    CHECK_NEAR(g->approx_kl, c->approx_kl, 1e-7, 1e-3);
    CHECK_NEAR(g->clip_fraction, c->clip_fraction, 1.01 / M, 0);
    CHECK_NEAR(g->explained_variance, c->explained_variance, 1e-6, 1e-4);
    CHECK_NEAR(g->grad_norm, c->grad_norm, 0, 1e-4);
    CHECK_NEAR(g->popart_mean, c->popart_mean, 1e-9, 1e-4);
    CHECK_NEAR(g->popart_std, c->popart_std, 0, 1e-4);
    (void)label;
}

/* Parameters (per group), Adam moments and step, PopArt. */
static void compare_learnable(const char *label, mr_trainer *g, mr_trainer *c, double tol) {
    if (!pull(g, MR_SYNC_LEARNABLE) || !pull(c, MR_SYNC_LEARNABLE)) return;
    const size_t P = c->net.n_params, Pp = c->net.n_policy;
    const double ep = check_relerr(g->pol.params, c->pol.params, Pp, 1e-30);
    const double ev = check_relerr(g->pol.params + Pp, c->pol.params + Pp, P - Pp, 1e-30);
    const double em = check_relerr(g->adam_m, c->adam_m, P, 1e-30), es = check_relerr(g->adam_v, c->adam_v, P, 1e-30);
    CHECK_MSG(ep < tol, "%s: policy parameters differ by %.3g", label, ep);
    CHECK_MSG(ev < tol, "%s: value parameters differ by %.3g", label, ev);
    CHECK_MSG(em < tol, "%s: Adam m differs by %.3g", label, em);
    CHECK_MSG(es < tol, "%s: Adam v differs by %.3g", label, es);
    CHECK_MSG(g->adam_step == c->adam_step, "%s: Adam step %lld vs %lld", label, (long long)g->adam_step,
              (long long)c->adam_step);
    CHECK_NEAR(g->popart.mean, c->popart.mean, 1e-9, tol);
    CHECK_NEAR(g->popart.std, c->popart.std, 0, tol);
    CHECK(g->popart.count == c->popart.count);
    printf("    %s: parameters %.2g (policy) %.2g (value), Adam m %.2g, v %.2g\n", label, ep, ev, em, es);
}

/* ================================================================ 1. against the cpu table */

static void run_against_cpu(const char *name, const mr_config *cfg) {
    mr_trainer *c = make(cfg, mr_backend_cpu()), *g = make(cfg, mr_backend_cuda());
    if (c && g && pull(c, MR_SYNC_WEIGHTS) && pull(g, MR_SYNC_WEIGHTS))
        CHECK_MSG(!memcmp(g->pol.params, c->pol.params, c->net.n_params * 4), "%s: initial weights differ", name);
    printf("  %s\n", name);
    int diverged = 0;
    char label[160];
    for (int u = 1; c && g && u <= 3; u++) {
        mr_metrics mc, mg;
        if (!update(c, &mc) || !update(g, &mg)) break;
        snprintf(label, sizeof label, "%s, update %d", name, u);
        roll rc, rg;
        if (roll_read(c, &rc) && roll_read(g, &rg)) {
            const int nd = compare_rollout(label, &rc, &rg, 2, u == 1 ? 1e-6 : 1e-5);
            diverged += nd;
            if (nd == 0 && diverged == 0) compare_metrics(label, &mg, &mc, c->M);
            else CHECK_NEAR(mg.entropy, mc.entropy, 0, 1e-2);
            roll_free(&rc);
            roll_free(&rg);
        }
        if (u >= 2) {
            const char *why = NULL;
            CHECK_MSG(mr_trainer_graphs_used(g, &why) == 1, "%s: no graph replay (%s)", label, why ? why : "");
        }
        if (u == 1 || u == 3) compare_learnable(label, g, c, diverged ? 1e-2 : 1e-4);
        CHECK(mg.time_rollout > 0.0 && mg.memory_planned_bytes > 0 && mg.memory_peak_bytes <= mg.memory_limit_bytes);
    }
    mr_trainer_free(c);
    mr_trainer_free(g);
}

static void test_against_cpu(void) {
    mr_config c;
    small_config(&c);
    run_against_cpu("ground truth, PopArt, 2 minibatches", &c);
    small_config(&c);
    c.policy.popart = 0;
    run_against_cpu("ground truth, no PopArt, 2 minibatches", &c);
    small_config(&c);
    c.env.mode = MR_MODE_PROXY;
    c.ppo.minibatches = 1;
    run_against_cpu("proxy, PopArt, 1 minibatch", &c);
    small_config(&c);
    c.env.mode = MR_MODE_PROXY_MORTAL;
    c.env.num_envs = 16;
    c.ppo.minibatches = 4;
    c.ppo.norm_adv = 0;
    run_against_cpu("proxy_mortal, no PopArt, 4 minibatches, raw advantages", &c);
}

/* The MLP trunk (cartpole: categorical; pendulum: the Gaussian head, clip
 * and tanh), small. */
static void mlp_config(mr_config *c, int env, int squash) {
    mr_config_default(c);
    c->env.name = env;
    mr_config_follow_env(c);
    c->env.num_envs = 32;
    c->policy.num_mlp = 2;
    c->policy.mlp_widths[0] = 16;
    c->policy.mlp_widths[1] = 16;
    c->policy.critic_hidden = 16;
    c->policy.box_squash = squash;
    c->ppo.rollout_steps = 32;
    c->ppo.minibatches = 2;
    c->ppo.epochs = 2;
    c->total_steps = 1000000;
    c->threads = 2;
}

/* A box's rollout: the actions are floats whose last bits may differ, and the
 * dynamics carry a difference on, so everything within a tolerance. */
static void run_box_against_cpu(const char *name, const mr_config *cfg) {
    mr_trainer *c = make(cfg, mr_backend_cpu()), *g = make(cfg, mr_backend_cuda());
    printf("  %s\n", name);
    char label[160];
    for (int u = 1; c && g && u <= 3; u++) {
        mr_metrics mc, mg;
        if (!update(c, &mc) || !update(g, &mg)) break;
        snprintf(label, sizeof label, "%s, update %d", name, u);
        roll rc, rg;
        if (roll_read(c, &rc) && roll_read(g, &rg)) {
            const size_t B = (size_t)rc.T * rc.N;
            const double ea = check_relerr((const float *)rg.act, (const float *)rc.act, B * (size_t)rc.AB / 4, 1.0);
            const double eo = check_relerr((const float *)rg.obs, (const float *)rc.obs, B * (size_t)rc.VV / 4, 1.0);
            const double el = check_relerr(rg.logp, rc.logp, B, 1.0), er = check_relerr(rg.ret, rc.ret, B, 1.0);
            printf("    %s: actions %.2g, observations %.2g, logp %.2g, returns %.2g\n", label, ea, eo, el, er);
            CHECK_MSG(ea < 1e-3 && eo < 1e-3 && el < 1e-3 && er < 1e-3,
                      "%s: actions %.3g, observations %.3g, logp %.3g, returns %.3g (relative)", label, ea, eo, el, er);
            roll_free(&rc);
            roll_free(&rg);
        }
        CHECK_NEAR(mg.entropy, mc.entropy, 0, 1e-3);
        CHECK_NEAR(mg.value_loss, mc.value_loss, 1e-6, 1e-2);
        if (u >= 2) {
            const char *why = NULL;
            CHECK_MSG(mr_trainer_graphs_used(g, &why) == 1, "%s: no graph replay (%s)", label, why ? why : "");
        }
        if (u == 1 || u == 3) compare_learnable(label, g, c, 1e-2);
    }
    mr_trainer_free(c);
    mr_trainer_free(g);
}

static void test_mlp_against_cpu(void) {
    mr_config c;
    mlp_config(&c, MR_ENV_CARTPOLE, MR_BOX_SQUASH_CLIP);
    run_against_cpu("cartpole: the MLP trunk, categorical head", &c);
    mlp_config(&c, MR_ENV_PENDULUM, MR_BOX_SQUASH_CLIP);
    run_box_against_cpu("pendulum: the MLP trunk, Gaussian head (clip)", &c);
    mlp_config(&c, MR_ENV_PENDULUM, MR_BOX_SQUASH_TANH);
    run_box_against_cpu("pendulum: the MLP trunk, Gaussian head (tanh)", &c);
    c.precision = MR_BF16;   /* the MLP runs in fp32 whatever the precision */
    run_box_against_cpu("pendulum, precision = bf16 (the MLP in fp32)", &c);
    /* ppo.truncation = auto bootstraps both: short limits put truncations,
     * several per environment, in every rollout (keep_final, add_final) */
    mlp_config(&c, MR_ENV_CARTPOLE, MR_BOX_SQUASH_CLIP);
    c.env.max_episode_steps = 10;
    run_against_cpu("cartpole truncated at 10 steps, bootstrapped", &c);
    mlp_config(&c, MR_ENV_PENDULUM, MR_BOX_SQUASH_CLIP);
    c.env.max_episode_steps = 12;
    run_box_against_cpu("pendulum truncated at 12 steps, bootstrapped", &c);
    /* dials: the multi-discrete head (two groups of 3) on the MLP, its
     * integer environment in the env kernel, truncations bootstrapped */
    mlp_config(&c, MR_ENV_DIALS, MR_BOX_SQUASH_CLIP);
    c.env.max_episode_steps = 20;
    run_against_cpu("dials: the MLP trunk, multi-discrete head", &c);
}

/* A float image (catch, 2 x 8 x 8 floats): the CNN's layer 0 and critic on
 * the image, small. */
static void test_image_against_cpu(void) {
    mr_config c;
    image_config(&c);
    run_against_cpu("catch: the CNN on a float image", &c);
    c.ppo.minibatches = 1;
    c.policy.popart = 0;
    run_against_cpu("catch, no PopArt, 1 minibatch", &c);
}

/* ================================================================ 2. checkpoints */

static char tmpdir[64];

static void across(const char *name, const mr_backend *from, const mr_backend *to) {
    mr_config c;
    small_config(&c);
    char path[160];
    snprintf(path, sizeof path, "%s/%s.mrck", tmpdir, from->name);
    mr_error e;
    mr_trainer *a = make(&c, from), *b = NULL;
    if (!a) return;
    update(a, NULL);
    update(a, NULL);
    CHECK_MSG(mr_trainer_save(a, path, &e) == MR_OK, "%s: save: %s", name, e.msg);
    mr_config c2 = c;
    c2.seed = 99;   /* the load brings the run's seed */
    b = make(&c2, to);
    if (b) {
        CHECK_MSG(mr_trainer_load(b, path, &e) == MR_OK, "%s: load: %s", name, e.msg);
        CHECK(mr_trainer_config(b)->seed == c.seed);
        mr_metrics ma, mb;
        if (update(a, &ma) && update(b, &mb)) {
            CHECK(mb.update == 3 && mb.agent_steps == ma.agent_steps);
            roll ra, rb;
            if (roll_read(a, &ra) && roll_read(b, &rb)) {
                char label[160];
                snprintf(label, sizeof label, "%s, update 3", name);
                const int nd = from == mr_backend_cpu() ? compare_rollout(label, &ra, &rb, 2, 1e-5)
                                                        : compare_rollout(label, &rb, &ra, 2, 1e-5);
                if (from == mr_backend_cpu()) compare_learnable(label, b, a, nd ? 1e-2 : 1e-4);
                else compare_learnable(label, a, b, nd ? 1e-2 : 1e-4);
                roll_free(&ra);
                roll_free(&rb);
            }
        }
        mr_trainer_free(b);
    }
    mr_trainer_free(a);
    unlink(path);
}

static void test_checkpoints(void) {
    printf("  checkpoints\n");
    across("cuda -> cpu", mr_backend_cuda(), mr_backend_cpu());
    across("cpu -> cuda", mr_backend_cpu(), mr_backend_cuda());
}

/* ================================================================ 3. graphs */

static int metrics_bits_equal(const mr_metrics *a, const mr_metrics *b) {
    return a->policy_loss == b->policy_loss && a->value_loss == b->value_loss && a->entropy == b->entropy &&
           a->approx_kl == b->approx_kl && a->clip_fraction == b->clip_fraction && a->grad_norm == b->grad_norm &&
           a->explained_variance == b->explained_variance && a->episodes == b->episodes &&
           a->episode_return_mean == b->episode_return_mean && a->popart_mean == b->popart_mean &&
           a->popart_std == b->popart_std && a->update == b->update;
}

static int learnable_bits_equal(mr_trainer *a, mr_trainer *b) {
    if (!pull(a, MR_SYNC_LEARNABLE) || !pull(b, MR_SYNC_LEARNABLE)) return 0;
    const size_t P = a->net.n_params * 4;
    return !memcmp(a->pol.params, b->pol.params, P) && !memcmp(a->adam_m, b->adam_m, P) &&
           !memcmp(a->adam_v, b->adam_v, P) && a->adam_step == b->adam_step &&
           a->popart.mean == b->popart.mean && a->popart.std == b->popart.std;
}

static void graphs_pair(mr_trainer *g, mr_trainer *e0, int u, const char *when) {
    mr_metrics mg, me;
    if (!update(g, &mg) || !update(e0, &me)) return;
    const char *why = NULL;
    const int used = mr_trainer_graphs_used(g, &why);
    CHECK_MSG(used == (u >= 2), "%s, update %d: graphs used %d (%s)", when, u, used, why ? why : "");
    CHECK(mr_trainer_graphs_used(e0, &why) == 0 && why && strcmp(why, "off (cuda.graphs = false)") == 0);
    roll rg, re;
    if (roll_read(g, &rg) && roll_read(e0, &re)) {
        CHECK_MSG(roll_bits_equal(&rg, &re), "%s, update %d: the replayed rollout differs from the eager one", when, u);
        roll_free(&rg);
        roll_free(&re);
    }
    CHECK_MSG(metrics_bits_equal(&mg, &me), "%s, update %d: the replayed update's metrics differ", when, u);
    CHECK_MSG(learnable_bits_equal(g, e0), "%s, update %d: replayed and eager parameters differ", when, u);
}

static void test_graphs(void) {
    mr_config c;
    small_config(&c);
    mr_config c0 = c;
    c0.cuda.graphs = 0;
    mr_trainer *g = make(&c, mr_backend_cuda()), *e0 = make(&c0, mr_backend_cuda());
    if (g && e0) {
        for (int u = 1; u <= 3; u++) graphs_pair(g, e0, u, "graphs");
        /* a checkpoint of another run into both: the graphs are recorded again */
        char path[160];
        snprintf(path, sizeof path, "%s/graphs.mrck", tmpdir);
        mr_config c2 = c;
        c2.seed = 5;
        mr_trainer *o = make(&c2, mr_backend_cuda());
        mr_error e;
        if (o) {
            update(o, NULL);
            CHECK_MSG(mr_trainer_save(o, path, &e) == MR_OK, "%s", e.msg);
            CHECK_MSG(mr_trainer_load(g, path, &e) == MR_OK, "%s", e.msg);
            CHECK_MSG(mr_trainer_load(e0, path, &e) == MR_OK, "%s", e.msg);
            for (int u = 2; u <= 3; u++) graphs_pair(g, e0, u, "graphs after a load");
            mr_trainer_free(o);
            unlink(path);
        }
    }
    mr_trainer_free(g);
    mr_trainer_free(e0);
}

/* ================================================================ 4. precisions */

static void test_precisions(void) {
    mr_config c;
    small_config(&c);
    mr_trainer *t[3] = {NULL, NULL, NULL};
    mr_metrics m[3];
    roll r[3];
    int have[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        mr_config ck = c;
        ck.precision = (mr_precision)k;
        t[k] = make(&ck, mr_backend_cuda());
        if (t[k] && update(t[k], &m[k])) have[k] = roll_read(t[k], &r[k]);
    }
    const int N = c.env.num_envs;
    static const double tol_first[3] = {0, 3e-2, 4e-3};   /* the first step's logp and values, relative */
    for (int k = 1; k < 3 && have[0]; k++) {
        if (!have[k]) continue;
        const char *nm = k == MR_BF16 ? "bf16" : "fp16";
        int finite = 1;
        const double x[] = {m[k].policy_loss, m[k].value_loss, m[k].entropy, m[k].grad_norm, m[k].approx_kl};
        for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) finite &= isfinite(x[i]);
        if (pull(t[k], MR_SYNC_LEARNABLE))
            for (size_t i = 0; i < t[k]->net.n_params; i++) finite &= isfinite(t[k]->pol.params[i]);
        CHECK_MSG(finite, "%s: a non-finite metric or parameter", nm);
        CHECK(m[k].nonfinite == 0 && m[k].skipped_steps == 0);
        CHECK(m[k].loss_scale == (k == MR_FP16 ? 65536.0 : 1.0));
        CHECK(!memcmp(r[k].obs, r[0].obs, (size_t)N * r[0].VV));   /* the same first states */
        const double el = check_relerr(r[k].logp, r[0].logp, (size_t)N, 1e-30);
        const double ev = check_relerr(r[k].val, r[0].val, (size_t)N, 1e-30);
        int same = 0;
        for (int i = 0; i < N; i++) same += r[k].act[i] == r[0].act[i];
        const double evl = fabs(m[k].value_loss / m[0].value_loss - 1), egn = fabs(m[k].grad_norm / m[0].grad_norm - 1);
        printf("  %s vs fp32: first step logp %.2g, values %.2g, %d of %d first actions alike; update 1: entropy %.2g, "
               "value loss %.2g, grad norm %.2g\n", nm, el, ev, same, N, fabs(m[k].entropy - m[0].entropy), evl, egn);
        CHECK_MSG(el < tol_first[k] && ev < tol_first[k], "%s: first-step logp %.3g, values %.3g", nm, el, ev);
        CHECK_MSG(same >= N * 3 / 4, "%s: only %d of %d first actions alike", nm, same, N);
        CHECK_NEAR(m[k].entropy, m[0].entropy, 0, 1e-2);
        CHECK_MSG(evl < 0.3 && egn < 0.3, "%s: value loss %.3g, grad norm %.3g apart", nm, evl, egn);
    }
    for (int k = 0; k < 3; k++) {
        if (have[k]) roll_free(&r[k]);
        mr_trainer_free(t[k]);
    }

    /* fp16 overflow: every step skipped, no error, the scale backs off once per step */
    mr_config c16 = c;
    c16.precision = MR_FP16;
    c16.policy.popart = 0;   /* PopArt rescales the value head even when every step is skipped */
    mr_trainer *f = make(&c16, mr_backend_cuda());
    if (!f || !pull(f, MR_SYNC_LEARNABLE)) {
        mr_trainer_free(f);
        return;
    }
    const size_t P = f->net.n_params;
    float *p0 = malloc(P * 12);
    memcpy(p0, f->pol.params, P * 4);
    memcpy(p0 + P, f->adam_m, P * 4);
    memcpy(p0 + 2 * P, f->adam_v, P * 4);
    mr_error e;
    CHECK(mr_trainer_set_loss_scale(f, 1e30f, &e) == MR_OK);
    mr_metrics mf;
    const mr_status s = mr_trainer_update(f, &mf, &e);
    CHECK_MSG(s == MR_OK, "fp16 overflow is the scaler's business, not an error: %s", e.msg);
    const int steps = c16.ppo.epochs * c16.ppo.minibatches;
    CHECK_MSG(mf.skipped_steps == (uint64_t)steps, "skipped %llu of %d", (unsigned long long)mf.skipped_steps, steps);
    CHECK(mf.nonfinite == 0);
    CHECK_NEAR(mf.loss_scale, 1e30f * ldexp(1.0, -steps), 0, 1e-6);
    if (pull(f, MR_SYNC_LEARNABLE))
        CHECK_MSG(!memcmp(p0, f->pol.params, P * 4) && !memcmp(p0 + P, f->adam_m, P * 4) &&
                  !memcmp(p0 + 2 * P, f->adam_v, P * 4) && f->adam_step == 0,
                  "skipped steps changed the weights or the optimizer");
    CHECK(mr_trainer_set_loss_scale(f, 65536.0f, &e) == MR_OK);
    CHECK(update(f, &mf));
    CHECK(mf.nonfinite == 0 && mf.skipped_steps == (uint64_t)steps);
    if (pull(f, MR_SYNC_LEARNABLE)) CHECK(f->adam_step == steps && memcmp(p0, f->pol.params, P * 4) != 0);
    printf("  fp16 with scale 1e30: %d of %d steps skipped, scale then %.3g\n", steps, steps,
           1e30 * ldexp(1.0, -steps));
    free(p0);
    mr_trainer_free(f);
}

/* ================================================================ 5. out of memory */

static void test_oom(void) {
    mr_config c;
    small_config(&c);
    c.cuda.memory_fraction = 0.02;
    c.env.num_envs = 1 << 16;
    mr_trainer *t = (mr_trainer *)&c;
    mr_error e;
    mr_status s = mr_trainer_create_on(&c, mr_backend_cuda(), "", &t, &e);
    CHECK(s == MR_ERR_NOMEM && t == NULL);
    printf("  out of memory (65536 environments, memory_fraction 0.02): %s\n", e.msg);
    const char *p = strstr(e.msg, "At most ");
    int fit = -1;
    CHECK_MSG(p && sscanf(p, "At most %d environments fit", &fit) == 1, "no largest num_envs in: %s", e.msg);
    if (s == MR_OK) mr_trainer_free(t);
    if (fit > 0 && fit < (1 << 16)) {
        c.env.num_envs = fit;
        t = NULL;
        s = mr_trainer_create_on(&c, mr_backend_cuda(), "", &t, &e);
        CHECK_MSG(s == MR_OK, "%d environments were said to fit: %s", fit, e.msg);
        if (s == MR_OK) mr_trainer_free(t);
        c.env.num_envs = fit + 1;
        while (mr_config_validate(&c, NULL) != MR_OK) c.env.num_envs++;
        t = NULL;
        s = mr_trainer_create_on(&c, mr_backend_cuda(), "", &t, &e);
        CHECK_MSG(s == MR_ERR_NOMEM, "%d environments fit, but only %d were said to", c.env.num_envs, fit);
        if (s == MR_OK) mr_trainer_free(t);
    }
}

/* ================================================================ 6. kept state */

static void test_keep(void) {
    mr_config c;
    small_config(&c);
    mr_config c0 = c;
    c0.cuda.graphs = 0;
    mr_trainer *g = make(&c, mr_backend_cuda()), *e0 = make(&c0, mr_backend_cuda());
    mr_error e;
    if (g && e0) {
        for (int u = 1; u <= 2; u++) graphs_pair(g, e0, u, "keep");
        CHECK_MSG(mr_trainer_keep(g, &e) == MR_OK, "%s", e.msg);
        CHECK_MSG(mr_trainer_keep(e0, &e) == MR_OK, "%s", e.msg);
        const size_t P = g->net.n_params;
        float *kept = malloc(3 * P * sizeof(float));
        if (kept && pull(g, MR_SYNC_LEARNABLE)) {
            memcpy(kept, g->pol.params, P * 4);
            memcpy(kept + P, g->adam_m, P * 4);
            memcpy(kept + 2 * P, g->adam_v, P * 4);
            const int64_t step = g->adam_step;
            graphs_pair(g, e0, 3, "after a keep");   /* replays queue behind the keep's copies */
            mr_metrics mg, me;
            CHECK(mr_trainer_debug_poison(g, &e) == MR_OK && mr_trainer_debug_poison(e0, &e) == MR_OK);
            CHECK(mr_trainer_update(g, &mg, &e) == MR_ERR_NUMERIC && mg.nonfinite == 1);
            CHECK(mr_trainer_update(e0, &me, &e) == MR_ERR_NUMERIC && me.nonfinite == 1);
            CHECK_MSG(mr_trainer_restore_kept(g, &e) == MR_OK, "%s", e.msg);
            CHECK_MSG(mr_trainer_restore_kept(e0, &e) == MR_OK, "%s", e.msg);
            if (pull(g, MR_SYNC_LEARNABLE))
                CHECK_MSG(!memcmp(kept, g->pol.params, P * 4) && !memcmp(kept + P, g->adam_m, P * 4) &&
                          !memcmp(kept + 2 * P, g->adam_v, P * 4) && g->adam_step == step,
                          "restore_kept did not bring the kept state back bit for bit");
            CHECK(learnable_bits_equal(g, e0));
            graphs_pair(g, e0, 2, "after restore_kept");   /* recorded again, replayed */
        }
        free(kept);
    }
    mr_trainer_free(g);
    mr_trainer_free(e0);
}

static void test_gpu(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moonrl_test_cuda_trainer_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    test_against_cpu();
    test_mlp_against_cpu();
    test_image_against_cpu();
    test_checkpoints();
    test_graphs();
    test_precisions();
    test_oom();
    test_keep();
    if (rmdir(tmpdir) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}
#endif /* MOONRL_HAVE_CUDA */

int main(void) {
    int gpus = mr_cuda_device_count();
    if (gpus <= 0) {
        printf("test_cuda_trainer: skipped (no GPU)\n");
        test_without_gpu();
        return check_report("test_cuda_trainer");
    }
#ifdef MOONRL_HAVE_CUDA
    test_gpu();
#else
    CHECK_MSG(0, "mr_cuda_device_count() = %d in a build without CUDA", gpus);
#endif
    return check_report("test_cuda_trainer");
}

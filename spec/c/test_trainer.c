/*
 * test_trainer.c - the public trainer API end to end on the CPU backend:
 * bad input, steady-state allocation, hot parameters, snapshot/restore
 * (and the NaN test aid, mr_trainer_debug_poison),
 * checkpoint round trip (bit for bit) and damaged checkpoints, adopting
 * another run's learned state (mr_trainer_load_learned), evaluation,
 * and a small run that must visibly learn.
 */
#include "moonrl.h"
#include "check.h"
#include "ckfile.h"
#include "conv_dnnl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void small_config(mr_config *c) {
    mr_config_default(c);
    c->env.num_envs = 16;
    c->policy.num_conv = 2;
    c->policy.conv_channels[0] = 4;
    c->policy.conv_channels[1] = 8;
    c->policy.hidden = 32;
    c->policy.critic_hidden = 32;
    c->ppo.rollout_steps = 16;
    c->ppo.epochs = 2;
    c->ppo.minibatches = 2;
    c->threads = 2;
    c->device = MR_DEVICE_CPU;
    c->total_steps = 16 * 16 * 8;
}

static void test_bad_input(void) {
    mr_config c;
    mr_trainer *t = (mr_trainer *)1;
    mr_error e;
    CHECK(mr_trainer_create(NULL, &t, &e) == MR_ERR_ARG);
    CHECK(t == NULL);
    small_config(&c);
    CHECK(mr_trainer_create(&c, NULL, &e) == MR_ERR_ARG);
    c.env.num_envs = 0;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "num_envs") != NULL, "message: %s", e.msg);
    small_config(&c);
    c.ppo.minibatches = 7;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "minibatches") != NULL, "message: %s", e.msg);
    small_config(&c);
    c.ppo.lr.start = -1;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "ppo.lr") != NULL, "message: %s", e.msg);
    small_config(&c);
    c.precision = MR_FP16;   /* never on the cpu */
    CHECK(mr_trainer_create(&c, &t, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "precision = fp16") != NULL, "message: %s", e.msg);
    small_config(&c);
    c.precision = MR_BF16;   /* on the cpu where oneDNN has bf16 kernels for it (test_policy_bf16.c) */
    if (mr_bf16_isa()) {
        CHECK(mr_trainer_create(&c, &t, &e) == MR_OK);
        CHECK_MSG(t && strstr(mr_trainer_describe(t), "bf16 (oneDNN avx512_core"), "describe: %s",
                  t ? mr_trainer_describe(t) : e.msg);
        mr_trainer_free(t);
        t = NULL;
    } else {
        CHECK(mr_trainer_create(&c, &t, &e) == MR_ERR_ARG);
        CHECK_MSG(strstr(e.msg, "AVX512-BF16 or AMX") != NULL, "message: %s", e.msg);
    }
    small_config(&c);
    c.device = MR_DEVICE_CUDA;
    if (mr_cuda_device_count() == 0) {
        CHECK(mr_trainer_create(&c, &t, &e) == MR_ERR_BACKEND);
        CHECK_MSG(strstr(e.msg, "cuda") != NULL, "message: %s", e.msg);
    }
    CHECK(mr_trainer_update(NULL, NULL, &e) == MR_ERR_ARG);
    CHECK(mr_trainer_save(NULL, "x", &e) == MR_ERR_ARG);
    CHECK(mr_trainer_restore(NULL, &e) == MR_ERR_ARG);
    mr_trainer_free(NULL);
}

static int files_equal(const char *a, const char *b) {
    /* Compares two checkpoint files byte for byte. */
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void test_checkpoint_round_trip(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *a, *b;
    mr_metrics m;
    CHECK(mr_trainer_create(&c, &a, &e) == MR_OK);
    /* k = 2 updates, save, 2 more: the straight run. */
    for (int i = 0; i < 2; i++) CHECK(mr_trainer_update(a, &m, &e) == MR_OK);
    CHECK_MSG(mr_trainer_save(a, "test_trainer_k.mrck", &e) == MR_OK, "%s", e.msg);
    mr_memory_stats ms0, ms1;
    mr_trainer_memory(a, &ms0, &e);
    for (int i = 0; i < 2; i++) CHECK(mr_trainer_update(a, &m, &e) == MR_OK);
    mr_trainer_memory(a, &ms1, &e);
    /* Steady state allocates nothing (the save above counted once). */
    CHECK_MSG(ms1.host_allocations == ms0.host_allocations, "%llu vs %llu",
              (unsigned long long)ms1.host_allocations, (unsigned long long)ms0.host_allocations);
    CHECK(ms0.host_planned_bytes > 0);
    CHECK(mr_trainer_save(a, "test_trainer_straight.mrck", &e) == MR_OK);
    double ret_a = m.episode_return_mean, loss_a = m.value_loss;

    /* The resumed run: a fresh trainer (other seed, to prove the load wins). */
    mr_config c2 = c;
    c2.seed = 99;
    CHECK(mr_trainer_create(&c2, &b, &e) == MR_OK);
    CHECK_MSG(mr_trainer_load(b, "test_trainer_k.mrck", &e) == MR_OK, "%s", e.msg);
    for (int i = 0; i < 2; i++) CHECK(mr_trainer_update(b, &m, &e) == MR_OK);
    CHECK(mr_trainer_save(b, "test_trainer_resumed.mrck", &e) == MR_OK);
    CHECK(m.episode_return_mean == ret_a);
    CHECK(m.value_loss == loss_a);
    /* Bit for bit: the resumed run's checkpoint equals the straight run's
     * (the seed is part of the saved state, so b adopted seed 1). */
    CHECK(files_equal("test_trainer_straight.mrck", "test_trainer_resumed.mrck"));

    /* Reading the config back. */
    mr_config rc;
    CHECK(mr_checkpoint_read_config("test_trainer_k.mrck", &rc, &e) == MR_OK);
    CHECK(rc.env.num_envs == c.env.num_envs && rc.policy.hidden == c.policy.hidden);
    /* And its progress: the updates and agent-steps it was written after, the hot values then. */
    static mr_checkpoint_info ki;
    CHECK_MSG(mr_checkpoint_read_info("test_trainer_k.mrck", &ki, &e) == MR_OK, "%s", e.msg);
    CHECK_MSG(ki.updates == 2 && ki.agent_steps == 2 * (uint64_t)c.env.num_envs * (uint64_t)c.ppo.rollout_steps,
              "progress %llu updates, %llu steps", (unsigned long long)ki.updates, (unsigned long long)ki.agent_steps);
    CHECK(mr_checkpoint_read_info("no_such_file.mrck", &ki, &e) != MR_OK);

    /* Damaged files are refused and leave the trainer untouched. */
    FILE *f = fopen("test_trainer_k.mrck", "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *buf = malloc(len);
    CHECK(fread(buf, 1, len, f) == (size_t)len);
    fclose(f);
    f = fopen("test_trainer_trunc.mrck", "wb");
    fwrite(buf, 1, len / 2, f);
    fclose(f);
    CHECK(mr_trainer_load(b, "test_trainer_trunc.mrck", &e) == MR_ERR_FORMAT);
    CHECK_MSG(strstr(e.msg, "damaged") != NULL, "%s", e.msg);
    buf[len / 2] ^= 0x40;
    f = fopen("test_trainer_flip.mrck", "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(mr_trainer_load(b, "test_trainer_flip.mrck", &e) == MR_ERR_FORMAT);
    CHECK_MSG(strstr(e.msg, "checksum") != NULL, "%s", e.msg);
    f = fopen("test_trainer_junk.mrck", "wb");
    fputs("this is not a checkpoint at all, just some text that is long enough", f);
    fclose(f);
    CHECK(mr_trainer_load(b, "test_trainer_junk.mrck", &e) == MR_ERR_FORMAT);
    CHECK(mr_trainer_load(b, "does/not/exist.mrck", &e) == MR_ERR_IO);
    free(buf);
    /* b still continues exactly like the straight run would have. */
    mr_metrics mb;
    CHECK(mr_trainer_update(b, &mb, &e) == MR_OK);
    CHECK(mr_trainer_update(a, &m, &e) == MR_OK);
    CHECK(mb.policy_loss == m.policy_loss);

    /* A checkpoint of other shapes is refused with a message. */
    mr_config c3 = c;
    c3.policy.hidden = 48;
    mr_trainer *d;
    CHECK(mr_trainer_create(&c3, &d, &e) == MR_OK);
    CHECK(mr_trainer_load(d, "test_trainer_k.mrck", &e) != MR_OK);
    CHECK_MSG(strstr(e.msg, "hidden") != NULL || strstr(e.msg, "shapes") != NULL, "%s", e.msg);
    mr_trainer_free(d);

    mr_trainer_free(a);
    mr_trainer_free(b);
    unlink("test_trainer_k.mrck");
    unlink("test_trainer_straight.mrck");
    unlink("test_trainer_resumed.mrck");
    unlink("test_trainer_trunc.mrck");
    unlink("test_trainer_flip.mrck");
    unlink("test_trainer_junk.mrck");
}

/* Section name's bytes equal in two files read by ckfile.h. */
static int same_section(const ckfile *a, const ckfile *b, const char *name) {
    const section *x = find(a, name), *y = find(b, name);
    return x && y && x->bytes == y->bytes && memcmp(x->data, y->data, x->bytes) == 0;
}

/* Population-based training's exploit: a run adopts another's weights, Adam
 * moments and PopArt, and keeps its own environments, progress and hot
 * parameters. Checked on the files with the test's own reader (ckfile.h). */
static void test_load_learned(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *a, *b;
    mr_metrics m;
    CHECK(mr_trainer_create(&c, &a, &e) == MR_OK);
    for (int i = 0; i < 2; i++) CHECK(mr_trainer_update(a, &m, &e) == MR_OK);
    CHECK(mr_trainer_save(a, "test_learned_a.mrck", &e) == MR_OK);
    /* b: other seed, other count of environments, one update more, another lr */
    mr_config cb = c;
    cb.seed = 7;
    cb.env.num_envs = 8;
    CHECK(mr_trainer_create(&cb, &b, &e) == MR_OK);
    for (int i = 0; i < 3; i++) CHECK(mr_trainer_update(b, &m, &e) == MR_OK);
    mr_hot_params hot;
    CHECK(mr_trainer_get_hot(b, &hot, &e) == MR_OK);
    hot.lr.kind = MR_SCHED_CONSTANT;
    hot.lr.start = hot.lr.end = 5e-4;
    CHECK(mr_trainer_set_hot(b, &hot, &e) == MR_OK);
    CHECK(mr_trainer_save(b, "test_learned_b.mrck", &e) == MR_OK);

    CHECK_MSG(mr_trainer_load_learned(b, "test_learned_a.mrck", &e) == MR_OK, "%s", e.msg);
    CHECK(mr_trainer_save(b, "test_learned_b2.mrck", &e) == MR_OK);
    ckfile fa, fb, fb2;
    CHECK(read_ck("test_learned_a.mrck", &fa) == 0);
    CHECK(read_ck("test_learned_b.mrck", &fb) == 0);
    CHECK(read_ck("test_learned_b2.mrck", &fb2) == 0);
    const char *learned[] = {"params", "adam_m", "adam_v"};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(same_section(&fa, &fb2, learned[i]), "%s: not a's", learned[i]);
        CHECK_MSG(!same_section(&fb, &fb2, learned[i]), "%s: still b's", learned[i]);
    }
    int envs = 0;
    for (int i = 0; i < fb.n; i++) {
        if (strncmp(fb.s[i].name, "env.", 4) != 0) continue;
        envs++;
        CHECK_MSG(same_section(&fb, &fb2, fb.s[i].name), "%s: b's environments changed", fb.s[i].name);
    }
    CHECK(envs > 5);
    static mr_checkpoint_info bi;
    CHECK(mr_checkpoint_read_info("test_learned_b2.mrck", &bi, &e) == MR_OK);
    CHECK_MSG(bi.updates == 3 && bi.agent_steps == 3 * 8ull * (uint64_t)c.ppo.rollout_steps, "progress %llu, %llu",
              (unsigned long long)bi.updates, (unsigned long long)bi.agent_steps);
    CHECK(bi.hot.lr.kind == MR_SCHED_CONSTANT && bi.hot.lr.start == 5e-4);
    /* the weights in force are a's: the engine's own copy agrees with the file */
    uint64_t n = 0;
    for (int i = 0; i < mr_trainer_tensor_count(b); i++) {
        mr_tensor tn;
        CHECK(mr_trainer_tensor(b, i, &tn, &e) == MR_OK);
        n += tn.count;
    }
    float *w = malloc(n * sizeof *w);
    CHECK(mr_trainer_read_params(b, w, n, &e) == MR_OK);
    const section *pa_sec = find(&fa, "params");
    CHECK(pa_sec && pa_sec->bytes == n * sizeof *w && memcmp(w, pa_sec->data, pa_sec->bytes) == 0);
    free(w);
    CHECK(mr_trainer_update(b, &m, &e) == MR_OK);   /* and it trains on */
    CHECK(m.agent_steps == 4 * 8ull * (uint64_t)c.ppo.rollout_steps);

    /* another network's checkpoint, or a damaged one: refused, b untouched */
    mr_config cc = c;
    cc.policy.hidden = 48;
    mr_trainer *d;
    CHECK(mr_trainer_create(&cc, &d, &e) == MR_OK);
    CHECK(mr_trainer_save(d, "test_learned_other.mrck", &e) == MR_OK);
    CHECK(mr_trainer_save(b, "test_learned_b3.mrck", &e) == MR_OK);
    CHECK(mr_trainer_load_learned(b, "test_learned_other.mrck", &e) != MR_OK);
    CHECK_MSG(strstr(e.msg, "shapes") != NULL, "%s", e.msg);
    CHECK(mr_trainer_load_learned(b, "does/not/exist.mrck", &e) == MR_ERR_IO);
    CHECK(mr_trainer_save(b, "test_learned_b4.mrck", &e) == MR_OK);
    ckfile f3, f4;
    CHECK(read_ck("test_learned_b3.mrck", &f3) == 0 && read_ck("test_learned_b4.mrck", &f4) == 0);
    for (int i = 0; i < f3.n; i++) CHECK_MSG(same_section(&f3, &f4, f3.s[i].name), "%s changed", f3.s[i].name);
    free_ck(&fa), free_ck(&fb), free_ck(&fb2), free_ck(&f3), free_ck(&f4);
    mr_trainer_free(d);
    mr_trainer_free(a);
    mr_trainer_free(b);
    const char *files[] = {"a", "b", "b2", "b3", "b4", "other"};
    for (int i = 0; i < 6; i++) {
        char p[64];
        snprintf(p, sizeof p, "test_learned_%s.mrck", files[i]);
        unlink(p);
    }
}

static void test_hot_and_snapshot(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t;
    mr_metrics m1, m2;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_OK);
    mr_hot_params h;
    CHECK(mr_trainer_get_hot(t, &h, &e) == MR_OK);
    h.lr.kind = MR_SCHED_CONSTANT;
    h.lr.start = 1e-3;
    CHECK(mr_trainer_set_hot(t, &h, &e) == MR_OK);
    h.max_grad_norm = -1;
    CHECK(mr_trainer_set_hot(t, &h, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "max_grad_norm") != NULL, "%s", e.msg);
    CHECK(mr_trainer_restore(t, &e) == MR_ERR_STATE);
    CHECK(mr_trainer_snapshot(t, &e) == MR_OK);
    CHECK(mr_trainer_update(t, &m1, &e) == MR_OK);
    CHECK_NEAR(m1.lr, 1e-3, 1e-12, 0);
    CHECK(m1.update == 1);
    CHECK(mr_trainer_restore(t, &e) == MR_OK);
    CHECK(mr_trainer_update(t, &m2, &e) == MR_OK);
    CHECK(m2.update == 1);                 /* the restored warm-up did not count */
    CHECK(m2.agent_steps == m1.agent_steps);
    mr_trainer_free(t);
}

/* The test aid behind debug.inject_nan_at_update: a poisoned weight makes
 * the next updates MR_ERR_NUMERIC (nonfinite set, the trainer not broken);
 * restoring the snapshot taken before brings the same weights back. */
static void test_debug_poison(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t;
    mr_metrics m;
    CHECK(mr_trainer_debug_poison(NULL, &e) == MR_ERR_ARG);
    CHECK(mr_trainer_create(&c, &t, &e) == MR_OK);
    CHECK(mr_trainer_update(t, &m, &e) == MR_OK);
    CHECK(mr_trainer_snapshot(t, &e) == MR_OK);
    enum { N = 3, SIDE = 11 };
    uint8_t obs[N * SIDE * SIDE];
    for (int i = 0; i < N * SIDE * SIDE; i++) obs[i] = (uint8_t)(i % 3);
    float logits0[N * 8], value0[N], logits1[N * 8], value1[N];
    CHECK(mr_trainer_infer(t, obs, NULL, N, logits0, value0, &e) == MR_OK);
    CHECK(mr_trainer_debug_poison(t, &e) == MR_OK);
    CHECK(mr_trainer_infer(t, obs, NULL, N, logits1, value1, &e) == MR_OK);
    CHECK(value1[0] != value1[0]);             /* the value head's bias is NaN */
    for (int k = 0; k < 2; k++) {
        CHECK(mr_trainer_update(t, &m, &e) == MR_ERR_NUMERIC);
        CHECK(e.status == MR_ERR_NUMERIC && strstr(e.msg, "non-finite") != NULL);
        CHECK(m.nonfinite == 1);
        CHECK(m.update == (uint64_t)(2 + k));  /* it ran: not a broken trainer */
    }
    CHECK(mr_trainer_restore(t, &e) == MR_OK);
    CHECK(mr_trainer_infer(t, obs, NULL, N, logits1, value1, &e) == MR_OK);
    CHECK(memcmp(logits0, logits1, sizeof logits0) == 0 && memcmp(value0, value1, sizeof value0) == 0);
    CHECK(mr_trainer_update(t, &m, &e) == MR_OK);
    CHECK(m.nonfinite == 0 && m.update == 2);
    mr_trainer_free(t);
}

static void test_evaluate_bad_input(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_OK);
    mr_eval_config ec;
    mr_eval_config_default(&ec);
    ec.num_envs = 0;
    mr_eval_result r;
    CHECK(mr_trainer_evaluate(t, &ec, &r, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "num_envs") != NULL, "%s", e.msg);
    mr_eval_config_default(&ec);
    ec.num_envs = 32;
    ec.steps = 300;
    CHECK(mr_trainer_evaluate(t, &ec, &r, &e) == MR_OK);
    /* Energy bookkeeping is consistent with the counts. */
    CHECK_NEAR(r.energy_per_1k, r.food_per_1k - 2 * r.poison_per_1k - 10.0, 1e-6, 1e-9);
    CHECK(r.efficiency >= 0 && r.efficiency <= 1);
    CHECK(r.survival > 0 && r.survival <= 300);
    /* A random policy starves: deaths happen within 300 steps. */
    CHECK(r.deaths_per_1k > 0);
    mr_trainer_free(t);
}

/* Progress is told after every step of every run, and changes no bit. */
typedef struct progress_log { uint64_t calls, last_done, total; int in_order; } progress_log;

static void on_progress(void *user, uint64_t done, uint64_t total) {
    progress_log *p = user;
    if (done != p->last_done + 1) p->in_order = 0;
    p->calls++;
    p->last_done = done;
    p->total = total;
}

static void test_evaluate_progress(void) {
    mr_config c;
    small_config(&c);
    mr_error e;
    mr_trainer *t;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_OK);
    mr_eval_config ec;
    mr_eval_config_default(&ec);
    ec.num_envs = 16;
    ec.steps = 40;
    ec.runs = 3;
    mr_eval_result plain, told;
    CHECK(mr_trainer_evaluate(t, &ec, &plain, &e) == MR_OK);
    progress_log p = {0, 0, 0, 1};
    CHECK(mr_trainer_evaluate_progress(t, &ec, &told, on_progress, &p, &e) == MR_OK);
    CHECK(memcmp(&plain, &told, sizeof plain) == 0);
    CHECK_MSG(p.calls == 120 && p.last_done == 120 && p.total == 120 && p.in_order,
              "calls %llu, last %llu of %llu, in order %d", (unsigned long long)p.calls,
              (unsigned long long)p.last_done, (unsigned long long)p.total, p.in_order);
    CHECK(mr_trainer_evaluate_progress(t, &ec, &told, NULL, NULL, &e) == MR_OK);
    CHECK(memcmp(&plain, &told, sizeof plain) == 0);
    mr_trainer_free(t);
}

/* A small ground-truth run must learn: efficiency rises clearly, agents live
 * longer (fewer episodes end per update) and the return rises. Seeds 1..3
 * gave efficiency +0.40..+0.52, episodes -31..-37%, return +0.63..+0.88 (a
 * rounding change in the gradients moves these by a few hundredths); a
 * policy that does not learn stays at about 0.32, 20 episodes, -5.8.
 * In bf16 (the oneDNN layer 8->16 with bf16 operands) the same bounds hold:
 * bf16 must learn as fp32 does, not merely stay finite. */
static void test_learns(mr_precision precision) {
    mr_config c;
    mr_config_default(&c);
    c.env.num_envs = 32;
    c.policy.num_conv = 2;
    c.policy.conv_channels[0] = 8;
    c.policy.conv_channels[1] = 16;
    c.policy.hidden = 64;
    c.policy.critic_hidden = 64;
    c.ppo.rollout_steps = 64;
    c.ppo.epochs = 4;
    c.ppo.lr.kind = MR_SCHED_CONSTANT;
    c.ppo.lr.start = 1e-3;
    c.ppo.ent_coef.kind = MR_SCHED_CONSTANT;
    c.ppo.ent_coef.start = 0.01;
    c.threads = 2;
    c.device = MR_DEVICE_CPU;
    c.precision = precision;
    const int updates = 60;
    c.total_steps = (uint64_t)updates * 32 * 64;
    mr_error e;
    mr_trainer *t;
    CHECK(mr_trainer_create(&c, &t, &e) == MR_OK);
    double eff_first = 0, eff_last = 0, ret_first = 0, ret_last = 0, ep_first = 0, ep_last = 0;
    mr_metrics m;
    for (int u = 0; u < updates; u++) {
        CHECK(mr_trainer_update(t, &m, &e) == MR_OK);
        if (u < 8) {
            eff_first += m.efficiency / 8; ret_first += m.episode_return_mean / 8; ep_first += m.episodes / 8;
        }
        if (u >= updates - 8) {
            eff_last += m.efficiency / 8; ret_last += m.episode_return_mean / 8; ep_last += m.episodes / 8;
        }
    }
    printf("learning (%s): efficiency %.3f -> %.3f, return %.2f -> %.2f, episodes/update %.1f -> %.1f\n",
           precision == MR_BF16 ? "bf16" : "fp32", eff_first, eff_last, ret_first, ret_last, ep_first, ep_last);
    CHECK(mr_trainer_done(t));
    CHECK_MSG(eff_last > eff_first + 0.25, "efficiency %.3f -> %.3f", eff_first, eff_last);
    CHECK_MSG(ep_last < 0.85 * ep_first, "episodes per update %.1f -> %.1f", ep_first, ep_last);
    CHECK_MSG(ret_last > ret_first + 0.3, "return %.2f -> %.2f", ret_first, ret_last);
    mr_trainer_free(t);
}

/* env.num_envs = "auto": the device plan grows with num_envs by at least the
 * grids (H*W bytes each), and the fit is the largest multiple of 64 within
 * the budget whose batch splits into the minibatches. */
static void test_fit_num_envs(void) {
    mr_config c;
    mr_config_default(&c);
    c.policy.num_conv = 3;
    c.policy.conv_channels[0] = 32;
    c.policy.conv_channels[1] = 64;
    c.policy.conv_channels[2] = 64;
    c.policy.hidden = 512;
    c.policy.critic_hidden = 512;
    c.precision = MR_BF16;
    mr_error e;
    uint64_t b1 = 0, b2 = 0, b1024 = 0;
    c.env.num_envs = 192;
    CHECK(mr_config_device_bytes(&c, &b1, &e) == MR_OK);
    c.env.num_envs = 384;
    CHECK(mr_config_device_bytes(&c, &b2, &e) == MR_OK);
    const uint64_t H = (uint64_t)c.env.grid_size;
    CHECK_MSG(b2 - b1 >= 192 * H * H, "%llu -> %llu", (unsigned long long)b1, (unsigned long long)b2);
    c.env.num_envs = 1024;
    CHECK(mr_config_device_bytes(&c, &b1024, &e) == MR_OK);
    int n = 0;
    c.env.num_envs = 7;   /* ignored: the fit chooses */
    CHECK(mr_config_fit_num_envs(&c, b1024, &n, &e) == MR_OK && n == 1024);
    CHECK(mr_config_fit_num_envs(&c, b1024 - 1, &n, &e) == MR_OK && n == 960);
    c.ppo.minibatches = 3;   /* 128 n divisible by 3: n a multiple of 192 */
    uint64_t b3 = 0;
    c.env.num_envs = 1024;   /* 1024 x 128 does not split into 3: refused */
    CHECK(mr_config_device_bytes(&c, &b3, &e) == MR_ERR_ARG);
    c.env.num_envs = 960;
    CHECK(mr_config_device_bytes(&c, &b3, &e) == MR_OK);
    CHECK_MSG(mr_config_fit_num_envs(&c, b3 + 4096, &n, &e) == MR_OK && n == 960, "n = %d", n);
    CHECK_MSG(mr_config_fit_num_envs(&c, b3 - 1, &n, &e) == MR_OK && n == 768, "n = %d", n);
    CHECK(mr_config_fit_num_envs(&c, 1 << 20, &n, &e) == MR_ERR_NOMEM);
    CHECK_MSG(strstr(e.msg, "not even 192 environments fit") != NULL, "%s", e.msg);
    c.ppo.rollout_steps = 0;   /* a refused config is refused by the fit too */
    CHECK(mr_config_fit_num_envs(&c, b3, &n, &e) == MR_ERR_ARG);
    uint64_t fr, tot;
    if (mr_cuda_device_count() == 0)
        CHECK(mr_cuda_device_memory(0, &fr, &tot, &e) == MR_ERR_BACKEND && e.msg[0] != 0);
}

int main(void) {
    test_bad_input();
    test_fit_num_envs();
    test_hot_and_snapshot();
    test_debug_poison();
    test_checkpoint_round_trip();
    test_load_learned();
    test_evaluate_bad_input();
    test_evaluate_progress();
    test_learns(MR_FP32);
    if (mr_bf16_isa()) test_learns(MR_BF16);
    return check_report("test_trainer");
}

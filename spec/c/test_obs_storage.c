/*
 * test_obs_storage.c - env.proxy_obs_storage (mr_policy_config's
 * proxy_obs_storage): with "uint8" the update's forward reads poison as 0 in
 * the modes that observe the proxy, as the original's uint8 rollout buffer
 * did, and nothing else changes.
 *
 *   1. the expansion itself: nn.c's table (cpu) and obs_codes.h's
 *      mr_obs_value / policy_layers.h's mr_pc_obs (the CUDA im2col) agree for
 *      every code, channel and expansion; uint8 differs from the proxy only
 *      at POISON, where it is 0
 *   2. which expansion goes where: the acting policy always gets the mode's,
 *      the training forward the storage's
 *   3. a trainer per mode and storage on the cpu backend whose policy_forward
 *      (the training forward) is wrapped: the expanded input of its first
 *      training forward with "uint8" equals the faithful one except at poison
 *      cells in proxy modes (0 instead of 0.5); in ground_truth the update
 *      gives the same parameters bit for bit, in proxy modes other ones.
 */
#include "moonrl.h"
#include "check.h"
#include "trainer.h"
#include "nn.h"
#include "policy_layers.h"

#include <string.h>

/* ------------------------------------------------------------- wrapper */
static mr_backend W;
static const mr_backend *BASE;
static int fwd_calls, act_bad;
static int fwd_proxy;
static uint8_t fwd_codes[64 * 64 * 121];
static int fwd_n;

static mr_status w_act(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy, float *logits,
                       float *value, void *stream, mr_error *err) {
    if (proxy != MR_EXPAND_TRUTH && proxy != MR_EXPAND_PROXY) act_bad++;
    return BASE->policy_act(p, codes, extra, B, proxy, logits, value, stream, err);
}

static mr_status w_forward(mr_bpolicy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                           float *logits, float *value, void *stream, mr_error *err) {
    if (fwd_calls++ == 0) {
        fwd_proxy = proxy;
        fwd_n = B * 121 <= (int)sizeof fwd_codes ? B * 121 : (int)sizeof fwd_codes;
        memcpy(fwd_codes, codes, (size_t)fwd_n);
    }
    return BASE->policy_forward(p, codes, extra, B, proxy, logits, value, stream, err);
}

static void small(mr_config *c, int mode, int storage) {
    mr_config_default(c);
    c->env.mode = mode;
    c->env.num_envs = 8;
    c->env.grid_size = 24;
    c->env.density_min = 40;
    c->env.density_max = 80;
    c->policy.num_conv = 1;
    c->policy.conv_channels[0] = 4;
    c->policy.hidden = 16;
    c->policy.critic_hidden = 16;
    c->policy.proxy_obs_storage = storage;
    c->ppo.rollout_steps = 8;
    c->threads = 1;
    c->device = MR_DEVICE_CPU;
    c->seed = 5;
    c->total_steps = 8 * 8 * 4;
}

/* One update; the expanded input of its first training forward and the
 * parameters after it. */
static void one_update(int mode, int storage, float *x, int *n, float *params, size_t *np) {
    mr_config c;
    small(&c, mode, storage);
    mr_trainer *t = NULL;
    mr_error e;
    CHECK_MSG(mr_trainer_create_on(&c, &W, "", &t, &e) == MR_OK, "%s", e.msg);
    if (!t) return;
    fwd_calls = 0;
    mr_metrics m;
    CHECK_MSG(mr_trainer_update(t, &m, &e) == MR_OK, "%s", e.msg);
    CHECK(fwd_calls > 0);
    CHECK(mr_trainer_pull(t, MR_SYNC_WEIGHTS, &e) == MR_OK);
    mr_obs_expand_forward(x, fwd_codes, fwd_n / 121, 121, 2, fwd_proxy);
    *n = fwd_n;
    *np = t->net.n_params;
    memcpy(params, t->pol.params, sizeof(float) * t->net.n_params);
    mr_trainer_free(t);
}

int main(void) {
    /* 1. the expansion: cpu table == shared rule; uint8 == proxy except poison */
    for (int expand = 0; expand <= 2; expand++) {
        for (unsigned code = 0; code <= 3; code++) {
            uint8_t cd = (uint8_t)code;
            float out[2];
            mr_obs_expand_forward(out, &cd, 1, 1, 2, expand);
            for (int ch = 0; ch < 2; ch++) {
                CHECK(out[ch] == mr_obs_value(code, ch, expand));
                CHECK(mr_pc_obs(code, ch, expand) == mr_obs_value(code, ch, expand));
            }
        }
    }
    const float want_p[4] = {0.0f, 1.0f, 0.5f, 0.0f}, want_u8[4] = {0.0f, 1.0f, 0.0f, 0.0f};
    for (unsigned code = 0; code <= 3; code++)
        for (int ch = 0; ch < 2; ch++) {
            CHECK(mr_obs_value(code, ch, MR_EXPAND_PROXY) == want_p[code]);
            CHECK(mr_obs_value(code, ch, MR_EXPAND_PROXY_UINT8) == want_u8[code]);
            CHECK(mr_obs_value(code, ch, MR_EXPAND_TRUTH) == (code == (unsigned)ch + 1 ? 1.0f : 0.0f));
        }

    /* 2. acting vs update expansion */
    CHECK(mr_obs_expand_act(MR_MODE_GROUND_TRUTH) == MR_EXPAND_TRUTH);
    CHECK(mr_obs_expand_update(MR_MODE_GROUND_TRUTH, MR_OBS_UINT8) == MR_EXPAND_TRUTH);
    for (int mode = MR_MODE_GROUND_TRUTH_BLINDED; mode <= MR_MODE_PROXY; mode++) {
        CHECK(mr_obs_expand_act(mode) == MR_EXPAND_PROXY);
        CHECK(mr_obs_expand_update(mode, MR_OBS_FAITHFUL) == MR_EXPAND_PROXY);
        CHECK(mr_obs_expand_update(mode, MR_OBS_UINT8) == MR_EXPAND_PROXY_UINT8);
    }
    mr_config c;
    mr_error e;
    mr_config_default(&c);
    CHECK(c.policy.proxy_obs_storage == MR_OBS_FAITHFUL);
    c.policy.proxy_obs_storage = (mr_obs_storage)2;
    CHECK(mr_config_validate(&c, &e) == MR_ERR_ARG);
    CHECK_MSG(strstr(e.msg, "env.proxy_obs_storage") != NULL, "%s", e.msg);

    /* 3. the training forward's input, per mode */
    BASE = mr_backend_cpu();
    W = *BASE;
    W.policy_act = w_act;
    W.policy_forward = w_forward;
    /* every epoch through policy_forward, so the two storages' first
     * training forwards see the same samples in the same order (faithful
     * would otherwise take its first epoch from the rollout's acts) */
    W.policy_act_keep = NULL;
    W.policy_forward_kept = NULL;
    static float xf[sizeof fwd_codes * 2], xu[sizeof fwd_codes * 2];
    static float pf[200000], pu[200000];
    static uint8_t codes_f[sizeof fwd_codes];
    for (int mode = 0; mode <= MR_MODE_PROXY; mode++) {
        int nf = 0, nu = 0;
        size_t npf = 0, npu = 0;
        one_update(mode, MR_OBS_FAITHFUL, xf, &nf, pf, &npf);
        CHECK(fwd_proxy == mr_obs_expand_act(mode));
        memcpy(codes_f, fwd_codes, (size_t)nf);
        one_update(mode, MR_OBS_UINT8, xu, &nu, pu, &npu);
        CHECK(fwd_proxy == mr_obs_expand_update(mode, MR_OBS_UINT8));
        CHECK(act_bad == 0);
        CHECK(nf == nu && nf > 0 && npf == npu && npf < 200000);
        /* the same rollout (the acting policy saw the same values), so the
         * same stored codes */
        CHECK(memcmp(codes_f, fwd_codes, (size_t)nf) == 0);
        int poison = 0, other_diff = 0, poison_ok = 0;
        for (int i = 0; i < nf; i++)
            for (int ch = 0; ch < 2; ch++) {
                float a = xf[2 * i + ch], b = xu[2 * i + ch];
                if (mode != MR_MODE_GROUND_TRUTH && codes_f[i] == 2) {
                    poison++;
                    poison_ok += a == 0.5f && b == 0.0f;
                } else {
                    other_diff += a != b;
                }
            }
        CHECK_MSG(other_diff == 0, "mode %d: %d values differ outside poison cells", mode, other_diff);
        CHECK_MSG(poison_ok == poison, "mode %d: %d of %d poison values are 0.5 -> 0", mode, poison_ok, poison);
        if (mode == MR_MODE_GROUND_TRUTH) {
            CHECK_MSG(memcmp(pf, pu, sizeof(float) * npf) == 0, "ground_truth: uint8 changed the update");
        } else {
            CHECK_MSG(poison > 0, "mode %d: no poison in view", mode);
            CHECK_MSG(memcmp(pf, pu, sizeof(float) * npf) != 0, "mode %d: uint8 did not change the update", mode);
        }
    }
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed != 0;
}

/*
 * policy_mlp_math.h - the MLP trunk's actor-critic on the GPU (the network
 * of cpu/policy_mlp.c, net_layout.h's MR_TRUNK_MLP) written as policy_math.h
 * writes the CNN: a memory plan and the whole forward and backward as plain
 * C over the same three operations (GEMM, elementwise job, copy), so
 * kernels/policy.cu runs it with cuBLAS and its job kernels, and
 * spec/c/test_cuda_policy_mlp.c runs it on the CPU (pc_emu.h) against
 * policy_mlp.c.
 *
 * The network (B samples, D = obs_dim, E = extra_dim, L layers):
 *   h_0 = obs (B, D);  h_{l+1} = tanh(mlp_l(h_l))          act[l] (B, mlp[l+1])
 *   discrete / multi-discrete: logits (B, NA) = actor(h_L)
 *   box of d floats: logits (B, 2d) = [actor(h_L) (d means), log_std (d)]
 *   cin (B, D + E) = obs ++ extra[:, :E];  chid = tanh(critic(cin))
 *   value (B) = vhead(chid)                                 (raw: PopArt outside)
 * Backward: the value head, tanh, the critic's weights (no input gradient);
 * the actor (dlogits' first d columns for a box, its log-std gradient the
 * column sums of the last d, by the bias-gradient reduction); the trunk from
 * its last layer down through dA / dB.
 *
 * Storage: fp32 whatever the precision asked (the MLP's products are tiny:
 * nothing to gain from bf16 / fp16; the fp16 loss scale still applies, it is
 * the optimizer's). The workspace reuses mr_pc_plan's offsets: o_codes holds
 * the observation floats, o_act[l] layer l, o_cin, o_chid, o_dchid, o_dA and
 * o_dB the trunk's gradients, o_part, o_blas.
 *
 * Names: mr_pm_* ("policy, MLP") the MLP trunk's schedule; mr_pn_*
 * ("policy network") either trunk (dispatch on cfg->obs_vector /
 * pl->net.trunk), what kernels/ calls; mr_pc_* ("policy, CUDA") the
 * schedule both share (policy_layers.h). Compiles as C99 and as CUDA C++.
 */
#ifndef MR_POLICY_MLP_MATH_H
#define MR_POLICY_MLP_MATH_H
#include "policy_math.h"

/* The widest layer: trunk widths, the critic's, its input, the actor's row. */
static inline int mr_pm_widest(const mr_net_layout *p) {
    int w = p->critic_hidden > p->cin_dim ? p->critic_hidden : p->cin_dim;
    w = p->num_actions > w ? p->num_actions : w;
    for (int l = 0; l <= p->num_mlp; l++) w = p->mlp[l] > w ? p->mlp[l] : w;
    return w;
}

/* The MLP's plan (cfg->obs_vector > 0): shapes, offsets, bytes. */
static inline mr_status mr_pm_plan_make(mr_pc_plan *pl, const mr_policy_config *cfg, int max_batch, mr_error *err) {
    if (!pl || !cfg) return mr_fail(err, MR_ERR_ARG, "policy plan: the plan or the policy config is missing");
    memset(pl, 0, sizeof *pl);
    if (cfg->num_mlp < 1 || cfg->num_mlp > MR_MAX_MLP)
        return mr_fail(err, MR_ERR_ARG, "policy.mlp_widths has %d layers: accepted 1 .. %d", cfg->num_mlp, MR_MAX_MLP);
    for (int l = 0; l < cfg->num_mlp; l++)
        if (cfg->mlp_widths[l] < 1 || cfg->mlp_widths[l] > 65536)
            return mr_fail(err, MR_ERR_ARG, "policy.mlp_widths[%d] = %d: accepted 1 .. 65536", l, cfg->mlp_widths[l]);
    if (cfg->critic_hidden < 1 || cfg->critic_hidden > 1 << 20)
        return mr_fail(err, MR_ERR_ARG, "policy.critic_hidden = %d: accepted 1 .. %d", cfg->critic_hidden, 1 << 20);
    if (cfg->obs_vector < 1 || cfg->obs_vector > 1 << 20)
        return mr_fail(err, MR_ERR_ARG, "policy obs_vector = %d: a vector observation of 1 .. %d floats",
                       cfg->obs_vector, 1 << 20);
    if (max_batch < 1) return mr_fail(err, MR_ERR_ARG, "policy max_batch = %d: must be at least 1", max_batch);
    mr_net_layout_init_mlp(&pl->net, cfg);
    const mr_net_layout *p = &pl->net;
    if (p->act_box > 0 && 2 * p->act_box != p->num_actions)
        return mr_fail(err, MR_ERR_ARG, "policy: a box of %d floats needs %d actor outputs, not %d", p->act_box,
                       2 * p->act_box, p->num_actions);
    pl->dt = MR_FP32;
    pl->max_batch = max_batch;
    pl->chunk = max_batch;
    const long long MB = max_batch, W = mr_pm_widest(p);
    pl->max_elems = MB * W > (long long)p->n_params ? MB * W : (long long)p->n_params;
    if (pl->max_elems > MR_PC_MAX_ELEMS)
        return mr_fail(err, MR_ERR_ARG, "policy on the GPU: a buffer of %lld elements (max_batch %d) exceeds the "
                       "limit of %lld: lower max_batch", pl->max_elems, max_batch, (long long)MR_PC_MAX_ELEMS);
    size_t o = 0;
#define MR_PM_TAKE(field, bytes) do { pl->field = o; o += mr_pc_round(bytes); } while (0)
    MR_PM_TAKE(o_codes, (size_t)MB * p->obs_dim * sizeof(float));
    for (int l = 0; l < p->num_mlp; l++) MR_PM_TAKE(o_act[l], (size_t)MB * p->mlp[l + 1] * sizeof(float));
    MR_PM_TAKE(o_cin, (size_t)MB * p->cin_dim * sizeof(float));
    MR_PM_TAKE(o_chid, (size_t)MB * p->critic_hidden * sizeof(float));
    MR_PM_TAKE(o_dchid, (size_t)MB * p->critic_hidden * sizeof(float));
    MR_PM_TAKE(o_dA, (size_t)MB * W * sizeof(float));
    MR_PM_TAKE(o_dB, (size_t)MB * W * sizeof(float));
    pl->part_doubles = mr_pc_bias_partials(MB, (int)W);
    MR_PM_TAKE(o_part, pl->part_doubles * sizeof(double));
    MR_PM_TAKE(o_blas, MR_PC_BLAS_WS);
#undef MR_PM_TAKE
    pl->ws_bytes = o;
    pl->param_bytes = sizeof(float) * p->n_params;
    mr_ok(err);
    return MR_OK;
}

static inline void mr_pm_carve(const mr_pc_plan *pl, unsigned char *ws, mr_pc_bufs *b) {
    memset(b, 0, sizeof *b);
    b->codes = ws + pl->o_codes;
    for (int l = 0; l < pl->net.num_mlp; l++) b->act[l] = ws + pl->o_act[l];
    b->cin = ws + pl->o_cin;
    b->chid = ws + pl->o_chid;
    b->dchid = ws + pl->o_dchid;
    b->dA = ws + pl->o_dA;
    b->dB = ws + pl->o_dB;
    b->part = (double *)(void *)(ws + pl->o_part);
    b->blas = ws + pl->o_blas;
    mr_pc_carve_epi(pl, ws, b);
}

/* The actor's outputs per row (the means' count for a box) and the row's width. */
static inline int mr_pm_heads(const mr_net_layout *p) { return p->act_box > 0 ? p->act_box : p->num_actions; }

/* policy_mlp.c's forward: obs (B, D) fp32 (passed as bytes), extra (B, 2)
 * or NULL (zeros) -> logits (B, NA), value (B) raw; keeps what backward
 * needs (the observation is copied). 0 <= B <= max_batch. */
static inline mr_status mr_pm_forward(const mr_pc_ops *o, const mr_pc_plan *pl, const mr_pc_bufs *bf,
                                      const float *params, const uint8_t *obs, const float *extra, int B,
                                      float *logits, float *value, mr_error *err) {
    const mr_net_layout *p = &pl->net;
    const int D = p->obs_dim, L = p->num_mlp, C = p->cin_dim, CH = p->critic_hidden, NA = p->num_actions;
    const int HD = mr_pm_heads(p);
    if (B <= 0) return MR_OK;
    mr_pc_job j;
    float *x = (float *)(void *)bf->codes;
    MR_PC_TRY(o->copy(o->ctx, x, obs, (size_t)B * D * sizeof(float), err));
    const void *h = x;
    int hw = D;
    for (int l = 0; l < L; l++) {
        MR_PC_TRY(mr_pc_linear_forward(o, "mlp forward", MR_FP32, MR_FP32, bf->act[l], p->mlp[l + 1], h, hw,
                                       params + p->mlp_w[l], hw, params + p->mlp_b[l], B, hw, p->mlp[l + 1],
                                       MR_PC_ACT_TANH, err));
        h = bf->act[l];
        hw = p->mlp[l + 1];
    }
    /* the actor: NA logits, or a box's d means in the first d of 2d columns */
    MR_PC_TRY(mr_pc_linear_forward(o, "actor forward", MR_FP32, MR_FP32, logits, NA, h, hw, params + p->actor_w, hw,
                                   params + p->actor_b, B, hw, HD, 0, err));
    if (p->act_box > 0) {   /* the log-stds, the same for every row */
        mr_pc_job_init(&j, MR_PCJ_ROW_FILL, MR_FP32, (long long)B * p->act_box);
        j.rows = B; j.cols = p->act_box; j.ld = NA; j.c0 = p->act_box; j.f = params + p->log_std; j.y = logits;
        MR_PC_TRY(o->job(o->ctx, &j, err));
    }
    mr_pc_job_init(&j, MR_PCJ_MLP_CIN, MR_FP32, (long long)B * C);
    j.rows = B; j.cols = C; j.c0 = D; j.x = x; j.f = extra; j.y = bf->cin;
    MR_PC_TRY(o->job(o->ctx, &j, err));
    MR_PC_TRY(mr_pc_linear_forward(o, "critic forward", MR_FP32, MR_FP32, bf->chid, CH, bf->cin, C,
                                   params + p->critic_w, C, params + p->critic_b, B, C, CH, MR_PC_ACT_TANH, err));
    return mr_pc_linear_forward(o, "value forward", MR_FP32, MR_FP32, value, 1, bf->chid, CH,
                                params + p->value_w_offset, CH, params + p->value_b_offset, B, CH, 1, 0, err);
}

/* policy_mlp.c's backward for the last forward (same B, params): dlogits
 * (B, NA), dvalue (B) fp32; ACCUMULATES into grads (n_params). */
static inline mr_status mr_pm_backward(const mr_pc_ops *o, const mr_pc_plan *pl, const mr_pc_bufs *bf,
                                       const float *params, const float *dlogits, const float *dvalue, int B,
                                       float *grads, mr_error *err) {
    const mr_net_layout *p = &pl->net;
    const int D = p->obs_dim, L = p->num_mlp, C = p->cin_dim, CH = p->critic_hidden, NA = p->num_actions;
    const int HD = mr_pm_heads(p);
    if (B <= 0) return MR_OK;
    mr_pc_job j;
    float *G = grads;
    /* the critic: value head, tanh, its layer's weights */
    MR_PC_TRY(mr_pc_linear_backward(o, "value backward", MR_FP32, bf->dchid, CH, 0.0f, G + p->value_w_offset, CH,
                                    G + p->value_b_offset, bf->part, dvalue, 1, bf->chid, CH,
                                    params + p->value_w_offset, CH, B, CH, 1, err));
    mr_pc_job_init(&j, MR_PCJ_TANH_BACK, MR_FP32, (long long)B * CH);
    j.cols = CH; j.ld = CH; j.ld2 = CH; j.m = bf->chid; j.y = bf->dchid;
    MR_PC_TRY(o->job(o->ctx, &j, err));
    MR_PC_TRY(mr_pc_linear_backward(o, "critic weight gradient", MR_FP32, NULL, 0, 0.0f, G + p->critic_w, C,
                                    G + p->critic_b, bf->part, bf->dchid, CH, bf->cin, C, NULL, 0, B, C, CH, err));
    /* a box's log-stds: the column sums of dlogits' last d columns */
    if (p->act_box > 0)
        MR_PC_TRY(mr_pc_bias_grad(o, MR_FP32, G + p->log_std, bf->part, dlogits + p->act_box, B, p->act_box, NA,
                                  err));
    /* the actor (a box: its means' columns), its input gradient into dA */
    const void *hL = L > 0 ? bf->act[L - 1] : (const void *)bf->codes;
    const int H = p->mlp[L];
    void *cur = bf->dA, *next = bf->dB;
    MR_PC_TRY(mr_pc_linear_backward(o, "actor backward", MR_FP32, cur, H, 0.0f, G + p->actor_w, H, G + p->actor_b,
                                    bf->part, dlogits, NA, hL, H, params + p->actor_w, H, B, H, HD, err));
    for (int l = L - 1; l >= 0; l--) {
        const int out = p->mlp[l + 1], in = p->mlp[l];
        mr_pc_job_init(&j, MR_PCJ_TANH_BACK, MR_FP32, (long long)B * out);
        j.cols = out; j.ld = out; j.ld2 = out; j.m = bf->act[l]; j.y = cur;
        MR_PC_TRY(o->job(o->ctx, &j, err));
        const void *x = l > 0 ? bf->act[l - 1] : (const void *)bf->codes;
        MR_PC_TRY(mr_pc_linear_backward(o, "mlp backward", MR_FP32, l > 0 ? next : NULL, in, 0.0f, G + p->mlp_w[l], in,
                                        G + p->mlp_b[l], bf->part, cur, out, x, in, params + p->mlp_w[l], in, B, in,
                                        out, err));
        void *t = cur;
        cur = next;
        next = t;
    }
    (void)D;
    return MR_OK;
}

/* ---------------------------------------------------- either trunk (mr_pn_) */

static inline mr_status mr_pn_plan_make(mr_pc_plan *pl, const mr_policy_config *cfg, int view, int max_batch,
                                        int chunk, int precision, mr_error *err) {
    if (cfg && cfg->obs_vector > 0) {
        if (precision != MR_FP32 && precision != MR_BF16 && precision != MR_FP16)
            return mr_fail(err, MR_ERR_ARG, "precision = %d: accepted fp32 (%d), bf16 (%d), fp16 (%d)", precision,
                           MR_FP32, MR_BF16, MR_FP16);
        return mr_pm_plan_make(pl, cfg, max_batch, err);
    }
    return mr_pc_plan_make(pl, cfg, view, max_batch, chunk, precision, err);
}

static inline void mr_pn_carve(const mr_pc_plan *pl, unsigned char *ws, mr_pc_bufs *b) {
    if (pl->net.trunk == MR_TRUNK_MLP) mr_pm_carve(pl, ws, b);
    else mr_pc_carve(pl, ws, b);
}

static inline mr_status mr_pn_forward(const mr_pc_ops *o, const mr_pc_plan *pl, const mr_pc_bufs *bf,
                                      const float *params, const uint8_t *codes, const float *extra, int B, int proxy,
                                      float *logits, float *value, mr_error *err) {
    if (pl->net.trunk == MR_TRUNK_MLP) return mr_pm_forward(o, pl, bf, params, codes, extra, B, logits, value, err);
    return mr_pc_forward(o, pl, bf, params, codes, extra, B, proxy, logits, value, err);
}

static inline mr_status mr_pn_backward(const mr_pc_ops *o, const mr_pc_plan *pl, const mr_pc_bufs *bf,
                                       const float *params, const float *dlogits, const float *dvalue, int B,
                                       int proxy, float *grads, mr_error *err) {
    if (pl->net.trunk == MR_TRUNK_MLP) return mr_pm_backward(o, pl, bf, params, dlogits, dvalue, B, grads, err);
    return mr_pc_backward(o, pl, bf, params, dlogits, dvalue, B, proxy, grads, err);
}

#endif /* MR_POLICY_MLP_MATH_H */

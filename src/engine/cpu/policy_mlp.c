/*
 * policy_mlp.c - the MLP trunk's actor-critic on the CPU (net_layout.h's
 * MR_TRUNK_MLP: vector observations), in the same mr_policy as the CNN so
 * initialisation (policy_params.c), checkpoints and the optimizer see one
 * parameter array either way:
 *   h_0 = obs (B, D);  h_{l+1} = tanh(mlp_l(h_l));  logits = actor(h_L)
 *   chid = tanh(critic(obs ++ extra));  value = vhead(chid)   (raw: PopArt outside)
 * A box action (act_box = d) gets the Gaussian head: a row of logits is
 * [actor(h_L) (d means), actor.log_std (d)], and the backward sums the rows'
 * log-std gradients into actor.log_std in row order.
 * The products are nn.c's mr_linear_forward / backward: their bits do not
 * depend on the thread count. act runs MR_POLICY_BLOCK rows at a time in
 * the workspace; the training forward keeps every layer for the backward.
 */
#include "policy.h"
#include "nn.h"
#include <math.h>
#include <string.h>

static int widest(const mr_policy *p) {
    int w = p->critic_hidden > p->cin_dim ? p->critic_hidden : p->cin_dim;
    w = p->num_actions > w ? p->num_actions : w;
    for (int l = 0; l <= p->num_mlp; l++) w = p->mlp[l] > w ? p->mlp[l] : w;
    return w;
}

void mr_policy_mlp_layout(mr_policy *p, const mr_policy_config *cfg, int max_batch, mr_arena *a) {
    memset(p, 0, sizeof *p);
    mr_net_layout_init_mlp(&p->net, cfg);
    p->max_batch = max_batch > 0 ? max_batch : 0;
    p->chunk = 1;
    p->block = MR_POLICY_BLOCK;
    p->fc_rows = MR_POLICY_BLOCK;
    p->params = MR_TAKE(a, float, p->n_params);
    p->grads = MR_TAKE(a, float, p->n_params);
    const size_t MB = (size_t)p->max_batch, W = (size_t)widest(p);
    p->mlp_obs = MR_TAKE(a, float, MB * p->obs_dim);
    for (int l = 0; l < p->num_mlp; l++) p->mlp_act[l] = MR_TAKE(a, float, MB * p->mlp[l + 1]);
    p->cin = MR_TAKE(a, float, MB * p->cin_dim);
    p->chid = MR_TAKE(a, float, MB * p->critic_hidden);
    p->dchid = MR_TAKE(a, float, MB * p->critic_hidden);
    p->mlp_d0 = MR_TAKE(a, float, MB * W);
    p->mlp_d1 = MR_TAKE(a, float, MB * W);
    /* act's block: two ping-pong layers and the critic's input and hidden
     * layer; init reuses the region as the QR scratch */
    const size_t K = (size_t)p->block;
    const size_t need = 4 * mr_policy_round_f(K * W), qr = mr_policy_init_floats(p);
    p->work_floats = need > qr ? need : qr;
    p->work = MR_TAKE(a, float, p->work_floats);
}

static void tanh_rows(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i]);
}

/* cin (B, D + E) = obs ++ the first E of each extra row (MR_POLICY_EXTRA wide) */
static void critic_input(const mr_policy *p, const float *obs, const float *extra, int B, float *cin) {
    const int D = p->obs_dim, E = p->extra_dim, C = p->cin_dim;
    for (int b = 0; b < B; b++) {
        memcpy(cin + (size_t)b * C, obs + (size_t)b * D, sizeof(float) * (size_t)D);
        for (int e = 0; e < E; e++) cin[(size_t)b * C + D + e] = extra ? extra[(size_t)b * MR_POLICY_EXTRA + e] : 0.0f;
    }
}

/* B rows through the network; acts[l] (B, mlp[l+1]) receive the layers,
 * cin and chid the critic's. */
static void forward_rows(const mr_policy *p, const float *obs, const float *extra, int B, float *const *acts,
                         float *cin, float *chid, float *logits, float *value) {
    const float *P = p->params;
    const float *h = obs;
    for (int l = 0; l < p->num_mlp; l++) {
        mr_linear_forward(acts[l], h, P + p->mlp_w[l], P + p->mlp_b[l], B, p->mlp[l], p->mlp[l + 1]);
        tanh_rows(acts[l], (size_t)B * p->mlp[l + 1]);
        h = acts[l];
    }
    if (p->act_box > 0) {   /* [means, log-stds]: the means computed in place, spread from the right */
        const int d = p->act_box;
        mr_linear_forward(logits, h, P + p->actor_w, P + p->actor_b, B, p->hidden, d);
        for (int b = B - 1; b >= 0; b--) {
            for (int j = d - 1; j >= 0; j--) logits[(size_t)b * 2 * d + j] = logits[(size_t)b * d + j];
            for (int j = 0; j < d; j++) logits[(size_t)b * 2 * d + d + j] = P[p->log_std + j];
        }
    } else {
        mr_linear_forward(logits, h, P + p->actor_w, P + p->actor_b, B, p->hidden, p->num_actions);
    }
    critic_input(p, obs, extra, B, cin);
    mr_linear_forward(chid, cin, P + p->critic_w, P + p->critic_b, B, p->cin_dim, p->critic_hidden);
    tanh_rows(chid, (size_t)B * p->critic_hidden);
    mr_linear_forward(value, chid, P + p->value_w_offset, P + p->value_b_offset, B, p->critic_hidden, 1);
}

void mr_policy_mlp_act(mr_policy *p, const float *obs, const float *extra, int B, float *logits, float *value) {
    const size_t K = (size_t)p->block, W = mr_policy_round_f(K * (size_t)widest(p));
    float *ping = p->work, *pong = p->work + W, *cin = p->work + 2 * W, *chid = p->work + 3 * W;
    float *acts[MR_MAX_MLP];
    for (int l = 0; l < p->num_mlp; l++) acts[l] = l % 2 ? pong : ping;
    for (int b0 = 0; b0 < B; b0 += p->block) {
        const int nb = B - b0 < p->block ? B - b0 : p->block;
        forward_rows(p, obs + (size_t)b0 * p->obs_dim, extra ? extra + (size_t)b0 * MR_POLICY_EXTRA : NULL, nb, acts,
                     cin, chid, logits + (size_t)b0 * p->num_actions, value + b0);
    }
}

int mr_policy_mlp_forward(mr_policy *p, const float *obs, const float *extra, int B, float *logits, float *value) {
    if (B < 0 || B > p->max_batch) return -1;
    memcpy(p->mlp_obs, obs, sizeof(float) * (size_t)B * p->obs_dim);
    forward_rows(p, p->mlp_obs, extra, B, p->mlp_act, p->cin, p->chid, logits, value);
    p->fwd_B = B;
    p->keep_rows = 0;
    return 0;
}

/* dz = dh * (1 - h^2), h the tanh's output (in place on dh) */
static void tanh_backward(float *dh, const float *h, size_t n) {
    for (size_t i = 0; i < n; i++) dh[i] *= 1.0f - h[i] * h[i];
}

int mr_policy_mlp_backward(mr_policy *p, const float *dlogits, const float *dvalue, int B) {
    if (B != p->fwd_B || B <= 0) return B == 0 && p->fwd_B == 0 ? 0 : -1;
    const float *P = p->params;
    float *G = p->grads;
    const int CH = p->critic_hidden, L = p->num_mlp;
    /* the critic: value head, tanh, its layer (no gradient into obs) */
    memset(p->dchid, 0, sizeof(float) * (size_t)B * CH);
    mr_linear_backward(p->dchid, G + p->value_w_offset, G + p->value_b_offset, dvalue, p->chid,
                       P + p->value_w_offset, B, CH, 1);
    tanh_backward(p->dchid, p->chid, (size_t)B * CH);
    mr_linear_backward(NULL, G + p->critic_w, G + p->critic_b, p->dchid, p->cin, P + p->critic_w, B, p->cin_dim, CH);
    /* the actor, then the trunk from its last layer down */
    float *d = p->mlp_d0, *dn = p->mlp_d1;
    const float *dout = dlogits;
    int heads = p->num_actions;
    if (p->act_box > 0) {   /* the means' rows into dn (free until the trunk), the log-stds' summed in order */
        heads = p->act_box;
        for (int j = 0; j < heads; j++) {
            double g = 0.0;
            for (int b = 0; b < B; b++) g += (double)dlogits[(size_t)b * 2 * heads + heads + j];
            G[p->log_std + j] += (float)g;
        }
        for (int b = 0; b < B; b++)
            for (int j = 0; j < heads; j++) dn[(size_t)b * heads + j] = dlogits[(size_t)b * 2 * heads + j];
        dout = dn;
    }
    memset(d, 0, sizeof(float) * (size_t)B * p->hidden);
    mr_linear_backward(d, G + p->actor_w, G + p->actor_b, dout, p->mlp_act[L - 1], P + p->actor_w, B, p->hidden,
                       heads);
    for (int l = L - 1; l >= 0; l--) {
        tanh_backward(d, p->mlp_act[l], (size_t)B * p->mlp[l + 1]);
        const float *in = l > 0 ? p->mlp_act[l - 1] : p->mlp_obs;
        if (l > 0) memset(dn, 0, sizeof(float) * (size_t)B * p->mlp[l]);
        mr_linear_backward(l > 0 ? dn : NULL, G + p->mlp_w[l], G + p->mlp_b[l], d, in, P + p->mlp_w[l], B,
                           p->mlp[l], p->mlp[l + 1]);
        float *t = d;
        d = dn;
        dn = t;
    }
    return 0;
}

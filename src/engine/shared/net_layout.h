/*
 * net_layout.h - the actor-critic network's shapes and parameter layout, the
 * same for every device: which tensors there are, their shapes, and where
 * each sits in the ONE contiguous float array of parameters (gradients have
 * the same layout). The policy group (trunk + actor) is the prefix
 * [0, n_policy), the value group (critic) the suffix [n_policy, n_params).
 * The network itself (ENV_SPEC.md "Policy", cpu/policy.h's drawing):
 * conv3x3 layers on the (V,V,C) expanded codes (C = the environment's
 * channels, obs_codes.h) or on a float image (C x V x V floats, read as
 * (V,V,C)), fc to `hidden`, the actor (num_actions logits, the
 * environment's), and the critic over feat ++ extra ++ ground truth (the
 * view's C one-hot channels, or the image itself).
 *
 * A backend's network (cpu/policy.h's mr_policy, kernels' mr_pc_plan) holds
 * one of these, so a params array (a checkpoint's, the host copy's) copies
 * between backends unchanged. Plain data and host code only; no device,
 * no allocation.
 */
#ifndef MR_NET_LAYOUT_H
#define MR_NET_LAYOUT_H
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "moonrl.h"   /* mr_policy_config, MR_MAX_CONV, MR_MAX_ACTIONS, mr_env_spaces */
#include "errors.h"

#define MR_POLICY_MAX_TENSORS (2 * MR_MAX_CONV + 8)   /* >= 2 * MR_MAX_MLP + 6 too */

/* The trunk, chosen from the observation (mr_policy_config.obs_vector):
 * the CNN over cell codes, or an MLP of tanh layers over a float vector,
 *   feat   = tanh(mlp_L(... tanh(mlp_0(obs))))   (B, mlp_widths[L-1])
 *   logits = actor(feat)
 *   value  = vhead(tanh(critic(obs ++ extra)))     the critic's own layer, as
 *            CleanRL's and SB3's separate value networks
 * (parameter names mlp0.w, mlp0.b, ..., actor.*, critic.*, value.*). A box
 * action of d floats (act_box) gets the Gaussian head: actor gives the d
 * means, actor.log_std (d, state-independent) the log-stds, and a row of
 * "logits" is [mean (d), log_std (d)] (shared/gauss_math.h, clip mode: the
 * environment clips the sample to its bounds). */
enum { MR_TRUNK_CONV = 0, MR_TRUNK_MLP = 1 };
#define MR_POLICY_EXTRA 2            /* extra critic inputs: food, poison counts */

/* One parameter tensor inside the flat array. shape[0] is the output dim. */
typedef struct mr_tensor_info {
    char name[24];        /* "conv0.w", "conv0.b", ..., "fc.w", "actor.w", "critic.w", "value.b" */
    size_t offset;        /* in floats, into params / grads */
    size_t count;
    int ndim;
    int shape[4];         /* conv.w (OC,3,3,C); linear w (OC,C); bias (OC) */
} mr_tensor_info;

/* The fields of mr_net_layout, listed once: cpu/policy.h's mr_policy
 * carries them as its first members (an anonymous struct in a union with a
 * named mr_net_layout `net`), so p->hidden and p->net.hidden are the same. */
#define MR_NET_LAYOUT_FIELDS                                                          \
    int trunk;                 /* MR_TRUNK_CONV or MR_TRUNK_MLP */                    \
    /* shapes */                                                                      \
    int num_conv;                                                                     \
    int ch[MR_MAX_CONV + 1];   /* ch[0] = C input channels, ch[l+1] = conv l's output */ \
    int view, VV;              /* V and V*V */                                        \
    int obs_float;             /* 1: the CNN reads C x V x V floats (a float image), 0: codes */ \
    int obs_row;               /* bytes of one observation: VV codes, 4 C VV or 4 obs_dim floats */ \
    int flat;                  /* V*V*ch[num_conv] */                                 \
    int hidden, critic_hidden;                                                        \
    int num_actions;           /* the actor's outputs (cfg->num_actions, 0 = 8) */   \
    int cin_dim;               /* hidden + 2 + C*VV */                                \
    /* parameters */                                                                  \
    size_t n_params, n_policy; /* value group = [n_policy, n_params) */               \
    int n_tensors;                                                                    \
    mr_tensor_info tensors[MR_POLICY_MAX_TENSORS];                                    \
    size_t conv_w[MR_MAX_CONV], conv_b[MR_MAX_CONV];   /* offsets */                  \
    size_t fc_w, fc_b, actor_w, actor_b, critic_w, critic_b;                          \
    size_t value_w_offset, value_b_offset;             /* PopArt rescales these */   \
    /* the MLP trunk (trunk = MR_TRUNK_MLP; the conv fields are unused) */            \
    int obs_dim, extra_dim;    /* the vector's length; the critic's privileged inputs */ \
    int act_box;               /* a box action's floats (num_actions = 2 x), 0 = discrete */ \
    size_t log_std;            /* offset of actor.log_std (act_box > 0) */            \
    int num_mlp;                                                                      \
    int mlp[MR_MAX_MLP + 1];   /* mlp[0] = obs_dim, mlp[l+1] = layer l's width */     \
    size_t mlp_w[MR_MAX_MLP], mlp_b[MR_MAX_MLP];       /* offsets */

typedef struct mr_net_layout {
    MR_NET_LAYOUT_FIELDS
} mr_net_layout;

static inline void mr_net_add_tensor_(mr_net_layout *p, size_t *off, const char *name, int ndim,
                                      int s0, int s1, int s2, int s3) {
    mr_tensor_info *t = &p->tensors[p->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = s0; t->shape[1] = s1; t->shape[2] = s2; t->shape[3] = s3;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)t->shape[i];
    t->offset = *off;
    t->count = n;
    *off += n;
}

/* The value group, from offset off on: the critic's layer over cin_dim
 * inputs, the value head; then the parameter count. */
static inline void mr_net_add_critic_(mr_net_layout *p, size_t off) {
    p->critic_w = off; mr_net_add_tensor_(p, &off, "critic.w", 2, p->critic_hidden, p->cin_dim, 0, 0);
    p->critic_b = off; mr_net_add_tensor_(p, &off, "critic.b", 1, p->critic_hidden, 0, 0, 0);
    p->value_w_offset = off; mr_net_add_tensor_(p, &off, "value.w", 2, 1, p->critic_hidden, 0, 0);
    p->value_b_offset = off; mr_net_add_tensor_(p, &off, "value.b", 1, 1, 0, 0, 0);
    p->n_params = off;
}

/* The actor's output count for cfg: its num_actions (the environment's),
 * 0 or out of range read as MR_MAX_ACTIONS (mr_config_validate refuses those). */
static inline int mr_net_actions(const mr_policy_config *cfg) {
    return cfg->num_actions > 0 && cfg->num_actions <= MR_MAX_ACTIONS ? cfg->num_actions : MR_MAX_ACTIONS;
}

/* The CNN's input channels for cfg: its obs_channels (the environment's
 * C), 0 read as 2 (foraging's, and configs made before the field). */
static inline int mr_net_obs_channels(const mr_policy_config *cfg) {
    return cfg->obs_channels > 0 ? cfg->obs_channels : 2;
}

/* Bytes of one observation as the network takes it (mr_net_layout's
 * obs_row): obs_vector floats, C x V x V floats of a float image, or V x V
 * cell codes. */
static inline int mr_net_obs_row_bytes(const mr_policy_config *cfg, int view) {
    if (cfg->obs_vector > 0) return 4 * cfg->obs_vector;
    return cfg->obs_image ? 4 * mr_net_obs_channels(cfg) * view * view : view * view;
}

/* The MLP trunk's shapes and offsets (cfg->obs_vector > 0; num_mlp clamped
 * to 1 .. MR_MAX_MLP). */
static inline void mr_net_layout_init_mlp(mr_net_layout *p, const mr_policy_config *cfg) {
    memset(p, 0, sizeof *p);
    p->trunk = MR_TRUNK_MLP;
    int L = cfg->num_mlp;
    if (L < 1) L = 1;
    if (L > MR_MAX_MLP) L = MR_MAX_MLP;
    p->num_mlp = L;
    p->obs_dim = cfg->obs_vector;
    p->extra_dim = cfg->critic_extra > 0 ? cfg->critic_extra : 0;
    p->mlp[0] = p->obs_dim;
    for (int l = 0; l < L; l++) p->mlp[l + 1] = cfg->mlp_widths[l] > 0 ? cfg->mlp_widths[l] : 1;
    p->hidden = p->mlp[L];
    p->critic_hidden = cfg->critic_hidden;
    p->num_actions = mr_net_actions(cfg);
    p->cin_dim = p->obs_dim + p->extra_dim;
    p->obs_row = mr_net_obs_row_bytes(cfg, 0);
    size_t off = 0;
    char nm[24];
    for (int l = 0; l < L; l++) {
        snprintf(nm, sizeof nm, "mlp%d.w", l);
        p->mlp_w[l] = off;
        mr_net_add_tensor_(p, &off, nm, 2, p->mlp[l + 1], p->mlp[l], 0, 0);
        snprintf(nm, sizeof nm, "mlp%d.b", l);
        p->mlp_b[l] = off;
        mr_net_add_tensor_(p, &off, nm, 1, p->mlp[l + 1], 0, 0, 0);
    }
    p->act_box = cfg->act_box > 0 ? cfg->act_box : 0;
    const int heads = p->act_box > 0 ? p->act_box : p->num_actions;   /* the actor's outputs */
    p->actor_w = off;  mr_net_add_tensor_(p, &off, "actor.w", 2, heads, p->hidden, 0, 0);
    p->actor_b = off;  mr_net_add_tensor_(p, &off, "actor.b", 1, heads, 0, 0, 0);
    if (p->act_box > 0) {   /* log-stds start at 0 (std 1), as a bias does */
        p->log_std = off;
        mr_net_add_tensor_(p, &off, "actor.log_std", 1, p->act_box, 0, 0, 0);
    }
    p->n_policy = off;
    mr_net_add_critic_(p, off);
}

/* Every shape and offset from cfg: the MLP trunk for a vector observation
 * (cfg->obs_vector > 0), else the CNN (num_conv clamped to 1 ..
 * MR_MAX_CONV); view = V >= 1. */
static inline void mr_net_layout_init(mr_net_layout *p, const mr_policy_config *cfg, int view) {
    if (cfg->obs_vector > 0) {
        mr_net_layout_init_mlp(p, cfg);
        return;
    }
    memset(p, 0, sizeof *p);
    int L = cfg->num_conv;
    if (L < 1) L = 1;
    if (L > MR_MAX_CONV) L = MR_MAX_CONV;
    p->num_conv = L;
    p->ch[0] = mr_net_obs_channels(cfg);
    for (int l = 0; l < L; l++) p->ch[l + 1] = cfg->conv_channels[l];
    p->view = view;
    p->VV = view * view;
    p->obs_float = cfg->obs_image != 0;
    p->extra_dim = cfg->critic_extra > 0 ? cfg->critic_extra : 0;   /* a float image's: 0 .. MR_POLICY_EXTRA */
    p->obs_row = mr_net_obs_row_bytes(cfg, view);
    p->flat = p->VV * p->ch[L];
    p->hidden = cfg->hidden;
    p->critic_hidden = cfg->critic_hidden;
    p->num_actions = mr_net_actions(cfg);
    p->cin_dim = p->hidden + MR_POLICY_EXTRA + p->ch[0] * p->VV;

    /* parameter table: policy group first, value group last */
    size_t off = 0;
    char nm[24];
    for (int l = 0; l < L; l++) {
        snprintf(nm, sizeof nm, "conv%d.w", l);
        p->conv_w[l] = off;
        mr_net_add_tensor_(p, &off, nm, 4, p->ch[l + 1], 3, 3, p->ch[l]);
        snprintf(nm, sizeof nm, "conv%d.b", l);
        p->conv_b[l] = off;
        mr_net_add_tensor_(p, &off, nm, 1, p->ch[l + 1], 0, 0, 0);
    }
    p->fc_w = off;     mr_net_add_tensor_(p, &off, "fc.w", 2, p->hidden, p->flat, 0, 0);
    p->fc_b = off;     mr_net_add_tensor_(p, &off, "fc.b", 1, p->hidden, 0, 0, 0);
    p->actor_w = off;  mr_net_add_tensor_(p, &off, "actor.w", 2, p->num_actions, p->hidden, 0, 0);
    p->actor_b = off;  mr_net_add_tensor_(p, &off, "actor.b", 1, p->num_actions, 0, 0, 0);
    p->n_policy = off;
    mr_net_add_critic_(p, off);
}

/* Whether this network trains an environment that declares `sp` (moonrl.h,
 * mr_env_spaces): a C x H x W observation of cell codes read as
 * C = 1 .. MR_NET_OBS_CHANNELS one-hot channels (codes 0 .. C), square (H = W),
 * with the critic's MR_POLICY_EXTRA privileged inputs and the view's ground
 * truth (the CNN), a square C x V x V float image (the CNN; its critic reads
 * the image and 0 .. MR_POLICY_EXTRA privileged inputs), or a float vector with 0 .. MR_POLICY_EXTRA of them (the
 * MLP); a discrete action of 2 .. MR_MAX_ACTIONS, a multi-discrete one of
 * components of at least 2 choices, MR_MAX_ACTIONS in all (the actor's row
 * is their groups side by side), or (on the MLP) a box of 1 ..
 * MR_MAX_ACTIONS / 2 floats. MR_OK, or MR_ERR_ARG with a message naming the
 * environment, what it declares and what fits. Host code. */
#define MR_NET_OBS_CHANNELS 16
#define MR_NET_IMAGE_SIDE 128   /* a float image's largest side */
static inline mr_status mr_net_fits_spaces(const mr_env_spaces *sp, const char *env, mr_error *err) {
    static const char *const kinds[] = {"cell codes", "a float image", "a vector", "discrete", "multi-discrete",
                                        "a continuous box"};
    const int ok_kind = sp->obs.kind >= 0 && sp->obs.kind <= MR_SPACE_BOX && sp->act.kind >= 0 &&
                        sp->act.kind <= MR_SPACE_BOX;
    if (!ok_kind) return mr_fail(err, MR_ERR_ARG, "env.name = %s declares an unknown space kind", env);
    if (sp->obs.kind == MR_SPACE_VECTOR) {   /* the MLP trunk */
        if (sp->obs.shape[0] < 1)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a vector observation of %d floats: at least 1",
                           env, sp->obs.shape[0]);
        if (sp->critic_extra < 0 || sp->critic_extra > MR_POLICY_EXTRA || sp->critic_view)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares %d privileged critic inputs%s: the MLP critic "
                           "takes 0 .. %d and no view", env, sp->critic_extra, sp->critic_view ? " and a view" : "",
                           MR_POLICY_EXTRA);
    } else if (sp->obs.kind == MR_SPACE_IMAGE) {   /* the CNN on the floats as they are */
        if (sp->obs.shape[0] < 1 || sp->obs.shape[0] > MR_NET_OBS_CHANNELS || sp->obs.shape[1] != sp->obs.shape[2] ||
            sp->obs.shape[1] < 1 || sp->obs.shape[1] > MR_NET_IMAGE_SIDE)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a float image of %d x %d x %d: this build's CNN "
                           "takes 1 .. %d channels of a square image of side 1 .. %d (C x V x V)", env,
                           sp->obs.shape[0], sp->obs.shape[1], sp->obs.shape[2], MR_NET_OBS_CHANNELS,
                           MR_NET_IMAGE_SIDE);
        if (sp->critic_extra < 0 || sp->critic_extra > MR_POLICY_EXTRA)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares %d privileged critic inputs: the CNN's critic "
                           "takes 0 .. %d beside the image", env, sp->critic_extra, MR_POLICY_EXTRA);
    } else if (sp->obs.kind != MR_SPACE_CODES) {
        return mr_fail(err, MR_ERR_ARG, "env.name = %s declares an observation of %s (%d x %d x %d): this build's "
                       "policy takes C x H x W cell codes or floats (a CNN) or a float vector (an MLP)", env,
                       kinds[sp->obs.kind], sp->obs.shape[0], sp->obs.shape[1], sp->obs.shape[2]);
    }
    if (sp->obs.kind == MR_SPACE_CODES &&
        (sp->obs.shape[0] < 1 || sp->obs.shape[0] > MR_NET_OBS_CHANNELS || sp->obs.shape[1] != sp->obs.shape[2] ||
         sp->obs.shape[1] < 1))
        return mr_fail(err, MR_ERR_ARG, "env.name = %s declares an observation of %d x %d x %d cell codes: this "
                       "build's policy takes 1 .. %d channels of a square view (C x V x V)", env, sp->obs.shape[0],
                       sp->obs.shape[1], sp->obs.shape[2], MR_NET_OBS_CHANNELS);
    if (sp->obs.kind == MR_SPACE_CODES && (sp->obs.codes < 2 || sp->obs.codes > sp->obs.shape[0] + 1))
        return mr_fail(err, MR_ERR_ARG, "env.name = %s declares %d cell codes for %d channels: the policy reads "
                       "codes 0 .. C (0 empty, k one-hot channel k-1), so 2 .. %d codes", env, sp->obs.codes,
                       sp->obs.shape[0], sp->obs.shape[0] + 1);
    if (sp->act.kind == MR_SPACE_BOX) {   /* the Gaussian head, on the MLP trunk */
        if (sp->obs.kind != MR_SPACE_VECTOR)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a box action with a %s observation: this build's "
                           "Gaussian head is the MLP trunk's (a vector observation)", env, kinds[sp->obs.kind]);
        if (sp->act.n < 1 || 2 * sp->act.n > MR_MAX_ACTIONS)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a box of %d floats: the Gaussian head takes 1 .. %d",
                           env, sp->act.n, MR_MAX_ACTIONS / 2);
        for (int j = 0; j < sp->act.n; j++)
            if (!(sp->act.low[j] < sp->act.high[j]) || sp->act.low[j] != sp->act.low[j] ||
                sp->act.high[j] - sp->act.low[j] > 3e38f)
                return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a box whose component %d has bounds [%g, %g]: "
                               "each needs finite low < high", env, j, (double)sp->act.low[j], (double)sp->act.high[j]);
        return MR_OK;
    }
    if (sp->act.kind == MR_SPACE_MULTI_DISCRETE) {   /* a categorical per component, side by side */
        int logits = 0;
        if (sp->act.n < 1 || sp->act.n > MR_SPACE_MAX_DIMS)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a multi-discrete action of %d components: the "
                           "multi-discrete head takes 1 .. %d", env, sp->act.n, MR_SPACE_MAX_DIMS);
        for (int k = 0; k < sp->act.n; k++) {
            if (sp->act.nvec[k] < 2)
                return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a multi-discrete component %d of %d choices: "
                               "each takes at least 2", env, k, sp->act.nvec[k]);
            logits += sp->act.nvec[k];
        }
        if (logits > MR_MAX_ACTIONS)
            return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a multi-discrete action of %d choices in all: "
                           "the multi-discrete head takes at most %d (the sum over the components)", env, logits,
                           MR_MAX_ACTIONS);
    } else if (sp->act.kind != MR_SPACE_DISCRETE) {
        return mr_fail(err, MR_ERR_ARG, "env.name = %s declares a %s action of %d components: this build's policy "
                       "has a categorical head (discrete actions), a multi-discrete one and a Gaussian one (a box)",
                       env, kinds[sp->act.kind], sp->act.n);
    } else if (sp->act.n < 2 || sp->act.n > MR_MAX_ACTIONS)
        return mr_fail(err, MR_ERR_ARG, "env.name = %s declares %d actions: the policy's categorical head takes "
                       "2 .. %d", env, sp->act.n, MR_MAX_ACTIONS);
    if (sp->obs.kind == MR_SPACE_CODES && (sp->critic_extra != MR_POLICY_EXTRA || sp->critic_view != 1))
        return mr_fail(err, MR_ERR_ARG, "env.name = %s declares %d privileged critic inputs%s: this build's critic "
                       "takes %d and the view's ground truth", env, sp->critic_extra,
                       sp->critic_view ? " and the view's ground truth" : " without the view's ground truth",
                       MR_POLICY_EXTRA);
    return MR_OK;
}

/* The parameter table entry called `name`, or NULL. */
static inline const mr_tensor_info *mr_net_tensor(const mr_net_layout *p, const char *name) {
    for (int i = 0; i < p->n_tensors; i++)
        if (strcmp(p->tensors[i].name, name) == 0) return &p->tensors[i];
    return NULL;
}

#endif /* MR_NET_LAYOUT_H */

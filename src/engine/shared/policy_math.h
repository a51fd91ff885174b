/*
 * policy_math.h - the CUDA policy network (kernels/policy.cu) written so that
 * everything but the launches runs on the CPU too: the per-element math of
 * every small kernel (MR_HD), the memory plan, and the whole schedule of
 * forward and backward as plain C over a table of three operations (GEMM,
 * elementwise job, copy). policy.cu fills the table with cuBLAS calls and
 * kernel launches; spec/c/test_cuda_policy_*.c fill it with a column-major
 * cblas_sgemm and a loop over the same MR_HD element function, and compares
 * the result with policy.c. So the layouts, leading dimensions, transposes,
 * buffer offsets and the order of operations are checked without a GPU;
 * what only a GPU can check is the launch grid and cuBLAS itself.
 *
 * The network, the parameter layout and the NHWC / (H,W,C) flatten order are
 * the cpu's (cpu/policy.c): both take their shapes and parameter offsets
 * from net_layout.h, so a params array copies between the two.
 *
 * Tensors (T = the storage type: fp32, or bf16 / fp16 in the reduced
 * precisions; parameters, gradients, biases, logits and values stay fp32):
 *   codes   (B, obs_row) bytes, copied from the caller (backward needs them):
 *           VV cell codes, or a float image's C x VV floats (net.obs_float),
 *           which the first layer's im2col reads channels last
 *   act[l]  (B, V, V, C_{l+1}) T, post-ReLU conv outputs
 *   cin     (B, D) T, D = hidden + 2 + C*VV: feat = relu(fc) in columns
 *           [0, hidden) (written there by fc's GEMM with ldc = D, so there is
 *           no separate feature buffer), then extra, then the ground truth
 *           (the codes' one-hot channels, or the image channels last; a
 *           float image's extra columns past its declared critic_extra are 0)
 *   chid    (B, CH) T, post-ReLU critic hidden
 *   dchid   (B, CH) T, dfeat (B, hidden) T
 *   col     (chunk*VV, 9 * max C_l) T: im2col, then dout . w in backward
 *   dA, dB  (chunk*VV, max C_l) T: a conv chunk's activation gradients
 *   part    f64: bias-gradient partial sums (mr_pc_bias_partials)
 *   wlp     (n_params) T: the reduced-precision copy of the weights
 *   dlog, dval (B, 8), (B) T: dlogits, dvalue in T (reduced precisions)
 *   blas    the cuBLAS workspace
 * The convolutions run in chunks of `chunk` samples (chunk*VV rows per GEMM)
 * through one col workspace; the linear layers run over the whole batch.
 *
 * Names: mr_pc_ = "policy, CUDA" (policy_layers.h's top comment; the
 * glossary of docs/cuda.md).
 *
 * What this file deliberately is not: CUDA. No launches, streams or memory
 * management (policy.cu); it compiles as C99 and as CUDA C++.
 */
#ifndef MR_POLICY_MATH_H
#define MR_POLICY_MATH_H
#include "policy_layers.h"   /* formats, element math, operations table, layers */

/* ------------------------------------------------------------ plan */

typedef struct mr_pc_plan {
    mr_net_layout net;        /* shapes and parameter offsets (net_layout.h) */
    int dt;                   /* storage type of activations (mr_precision) */
    int max_batch, chunk;
    /* byte offsets into the workspace */
    size_t o_codes, o_act[MR_MAX_CONV], o_cin, o_chid, o_dchid, o_dfeat, o_col, o_dA, o_dB, o_part;
    size_t o_wlp, o_dlog, o_dval, o_blas;
    size_t o_dnn_ws, o_dnn_dw, dnn_ws_bytes;   /* cuDNN's workspace and, in bf16 / fp16, a weight gradient in T */
    int8_t dnn[MR_MAX_CONV];  /* layer l (>= 1) runs through the conv operation (cuDNN); mr_pc_plan_dnn */
    size_t part_doubles;
    size_t ws_bytes;          /* the workspace */
    size_t param_bytes;       /* params, and grads, each (fp32) */
    long long max_elems;      /* the largest job or GEMM operand, in elements */
    int fc_rows;              /* rows of fc's whole-batch products per GEMM (mr_pc_fc_rows) */
    int epilogue;             /* cuda.epilogue = fused: the regions below (mr_pc_plan_epi) */
    size_t o_aux_feat, o_aux_chid, o_epi_scratch, epi_scratch_floats;
} mr_pc_plan;

typedef struct mr_pc_bufs {
    uint8_t *codes;
    void *act[MR_MAX_CONV];
    void *cin, *chid, *dchid, *dfeat, *col, *dA, *dB;
    double *part;
    void *wlp, *dlog, *dval;   /* NULL in fp32 */
    void *blas;
    void *dnn_ws, *dnn_dw;     /* NULL unless a layer runs through cuDNN (dnn_dw: bf16 / fp16 only) */
    /* cuda.epilogue = fused (NULL otherwise): the ReLU bits of feat (B, hidden)
     * and chid (B, critic_hidden), the bias-gradient scratch of gemm_ep */
    void *aux_feat, *aux_chid;
    float *epi_scratch;
    int *aux_ok;               /* host memory, 2 flags (feat, chid): set by the owner after carving */
} mr_pc_bufs;

static inline size_t mr_pc_round(size_t n) { return (n + MR_PC_ALIGN - 1) / MR_PC_ALIGN * MR_PC_ALIGN; }

/* Checks the arguments and computes every size and offset; no memory is
 * touched. view = V (the observation is V x V); chunk <= 0 means
 * MR_PC_CHUNK; chunk is capped at max_batch. */
static inline mr_status mr_pc_plan_make(mr_pc_plan *pl, const mr_policy_config *cfg, int view, int max_batch,
                                        int chunk, int precision, mr_error *err) {
    if (!pl || !cfg) return mr_fail(err, MR_ERR_ARG, "policy plan: the plan or the policy config is missing");
    memset(pl, 0, sizeof *pl);
    if (cfg->num_conv < 1 || cfg->num_conv > MR_MAX_CONV)
        return mr_fail(err, MR_ERR_ARG, "policy.num_conv = %d: accepted 1 .. %d", cfg->num_conv, MR_MAX_CONV);
    for (int l = 0; l < cfg->num_conv; l++)
        if (cfg->conv_channels[l] < 1 || cfg->conv_channels[l] > 65536)
            return mr_fail(err, MR_ERR_ARG, "policy.conv_channels[%d] = %d: accepted 1 .. 65536", l,
                           cfg->conv_channels[l]);
    if (cfg->hidden < 1 || cfg->hidden > 1 << 20)
        return mr_fail(err, MR_ERR_ARG, "policy.hidden = %d: accepted 1 .. %d", cfg->hidden, 1 << 20);
    if (cfg->critic_hidden < 1 || cfg->critic_hidden > 1 << 20)
        return mr_fail(err, MR_ERR_ARG, "policy.critic_hidden = %d: accepted 1 .. %d", cfg->critic_hidden, 1 << 20);
    if (view < 1 || view > 1023)
        return mr_fail(err, MR_ERR_ARG, "policy view = %d: the observation side must be 1 .. 1023", view);
    if (max_batch < 1) return mr_fail(err, MR_ERR_ARG, "policy max_batch = %d: must be at least 1", max_batch);
    if (precision != MR_FP32 && precision != MR_BF16 && precision != MR_FP16)
        return mr_fail(err, MR_ERR_ARG, "precision = %d: accepted fp32 (%d), bf16 (%d), fp16 (%d)", precision,
                       MR_FP32, MR_BF16, MR_FP16);
    mr_net_layout_init(&pl->net, cfg, view);
    const mr_net_layout *p = &pl->net;
    pl->dt = precision;
    pl->max_batch = max_batch;
    pl->chunk = chunk > 0 ? chunk : MR_PC_CHUNK;
    if (pl->chunk > max_batch) pl->chunk = max_batch;
    const int L = p->num_conv;
    int cmax = 1, cin_max = 2;
    for (int l = 0; l < L; l++) {
        if (p->ch[l + 1] > cmax) cmax = p->ch[l + 1];
        if (p->ch[l] > cin_max) cin_max = p->ch[l];
    }
    int hmax = p->hidden > p->critic_hidden ? p->hidden : p->critic_hidden;
    if (hmax < p->num_actions) hmax = p->num_actions;
    const long long MB = max_batch, CR = (long long)pl->chunk * p->VV;
    /* what one job or one GEMM operand holds: the conv activations of the
     * whole batch (MB * VV * C) are no such thing (a chunk at a time; fc's
     * two whole-batch products run in row blocks, mr_pc_fc_rows) */
    const long long sizes[] = {MB * p->cin_dim, MB * hmax, CR * 9 * cin_max, CR * cmax, (long long)p->n_params,
                               (long long)p->hidden * p->flat, (long long)p->critic_hidden * p->cin_dim};
    static const char *const what[] = {"the critic input (samples x its width)", "a hidden layer (samples x width)",
                                       "a conv chunk's im2col", "a conv chunk's output", "the parameters",
                                       "fc's weights", "the critic's weights"};
    int worst = 0;
    for (int i = 0; i < (int)(sizeof sizes / sizeof sizes[0]); i++)
        if (sizes[i] > pl->max_elems) pl->max_elems = sizes[i], worst = i;
    if (pl->max_elems > MR_PC_MAX_ELEMS)
        return mr_fail(err, MR_ERR_ARG,
                       "policy on the GPU: %s would be %lld elements (max_batch %d, chunk %d, view %d), past the "
                       "kernels' %lld elements per job or product (32-bit indices): lower max_batch (the samples "
                       "of a minibatch or the environments) or chunk",
                       what[worst], pl->max_elems, max_batch, pl->chunk, view, (long long)MR_PC_MAX_ELEMS);
    {
        const long long r = MR_PC_MAX_ELEMS / (p->flat > 0 ? p->flat : 1);
        pl->fc_rows = r < max_batch ? (int)r : max_batch;
    }
    const size_t es = (size_t)mr_pc_esize(precision);
    size_t o = 0;
#define MR_PC_TAKE(field, bytes) do { pl->field = o; o += mr_pc_round(bytes); } while (0)
    MR_PC_TAKE(o_codes, (size_t)MB * p->obs_row);   /* codes, or a float image's floats */
    for (int l = 0; l < L; l++) MR_PC_TAKE(o_act[l], (size_t)MB * p->VV * p->ch[l + 1] * es);
    MR_PC_TAKE(o_cin, (size_t)MB * p->cin_dim * es);
    MR_PC_TAKE(o_chid, (size_t)MB * p->critic_hidden * es);
    MR_PC_TAKE(o_dchid, (size_t)MB * p->critic_hidden * es);
    MR_PC_TAKE(o_dfeat, (size_t)MB * p->hidden * es);
    MR_PC_TAKE(o_col, (size_t)CR * 9 * cin_max * es);
    MR_PC_TAKE(o_dA, (size_t)CR * cmax * es);
    MR_PC_TAKE(o_dB, (size_t)CR * cmax * es);
    {
        size_t a1 = mr_pc_bias_partials(CR, cmax), a2 = mr_pc_bias_partials(MB, hmax);
        pl->part_doubles = a1 > a2 ? a1 : a2;
    }
    MR_PC_TAKE(o_part, pl->part_doubles * sizeof(double));
    if (precision != MR_FP32) {
        MR_PC_TAKE(o_wlp, p->n_params * es);
        MR_PC_TAKE(o_dlog, (size_t)MB * p->num_actions * es);
        MR_PC_TAKE(o_dval, (size_t)MB * es);
    }
    MR_PC_TAKE(o_blas, MR_PC_BLAS_WS);
#undef MR_PC_TAKE
    pl->ws_bytes = o;
    pl->param_bytes = sizeof(float) * p->n_params;
    mr_ok(err);
    return MR_OK;
}

/* Layers l = 1 .. num_conv-1 with layers[l] != 0 run through the conv
 * operation (cuDNN) instead of im2col + GEMM ([0] is ignored: the first
 * layer reads the observation, codes or a float image, in its im2col); the workspace grows by cuDNN's (MR_PC_DNN_WS) and,
 * in bf16 / fp16, by one weight gradient in T. Call once, after
 * mr_pc_plan_make; layers NULL or all 0: nothing changes. */
static inline void mr_pc_plan_dnn(mr_pc_plan *pl, const int8_t *layers) {
    size_t wmax = 0;
    int any = 0;
    for (int l = 1; layers && l < pl->net.num_conv; l++) {
        pl->dnn[l] = layers[l] != 0;
        if (!pl->dnn[l]) continue;
        any = 1;
        const size_t wl = (size_t)pl->net.ch[l + 1] * 9 * (size_t)pl->net.ch[l];
        if (wl > wmax) wmax = wl;
    }
    if (!any) return;
    pl->o_dnn_ws = pl->ws_bytes;
    pl->dnn_ws_bytes = MR_PC_DNN_WS;
    pl->ws_bytes += mr_pc_round(MR_PC_DNN_WS);
    if (pl->dt != MR_FP32) {
        pl->o_dnn_dw = pl->ws_bytes;
        pl->ws_bytes += mr_pc_round(wmax * (size_t)mr_pc_esize(pl->dt));
    }
}

/* cuda.epilogue = fused: the workspace grows by the ReLU bits of feat and
 * chid (mr_pc_aux_bytes: max_batch rows, each padded to 128 bits) and a
 * bias-gradient scratch of the widest layer's floats (gemm_ep's). Call once,
 * after mr_pc_plan_make / mr_pm_plan_make (the MLP keeps no bits: its
 * activations are tanh). */
static inline void mr_pc_plan_epi(mr_pc_plan *pl) {
    const mr_net_layout *p = &pl->net;
    int w = p->hidden > p->critic_hidden ? p->hidden : p->critic_hidden;
    if (p->num_actions > w) w = p->num_actions;
    if (p->cin_dim > w) w = p->cin_dim;
    for (int l = 0; l < p->num_conv; l++) w = p->ch[l + 1] > w ? p->ch[l + 1] : w;
    for (int l = 0; p->trunk == MR_TRUNK_MLP && l <= p->num_mlp; l++) w = p->mlp[l] > w ? p->mlp[l] : w;
    pl->epilogue = 1;
    pl->epi_scratch_floats = (size_t)w;
    pl->o_epi_scratch = pl->ws_bytes;
    pl->ws_bytes += mr_pc_round((size_t)w * sizeof(float));
    if (p->trunk == MR_TRUNK_MLP) return;
    pl->o_aux_feat = pl->ws_bytes;
    pl->ws_bytes += mr_pc_round(mr_pc_aux_bytes(pl->max_batch, p->hidden));
    pl->o_aux_chid = pl->ws_bytes;
    pl->ws_bytes += mr_pc_round(mr_pc_aux_bytes(pl->max_batch, p->critic_hidden));
}

/* The regions of mr_pc_plan_epi in a carved workspace (either trunk). */
static inline void mr_pc_carve_epi(const mr_pc_plan *pl, unsigned char *ws, mr_pc_bufs *b) {
    if (!pl->epilogue) return;
    b->epi_scratch = (float *)(void *)(ws + pl->o_epi_scratch);
    if (pl->o_aux_feat) b->aux_feat = ws + pl->o_aux_feat;
    if (pl->o_aux_chid) b->aux_chid = ws + pl->o_aux_chid;
}

/* Device bytes of a policy: params, grads, workspace. */
static inline size_t mr_pc_plan_bytes(const mr_pc_plan *pl) { return 2 * pl->param_bytes + pl->ws_bytes; }

static inline void mr_pc_carve(const mr_pc_plan *pl, unsigned char *ws, mr_pc_bufs *b) {
    memset(b, 0, sizeof *b);
    b->codes = ws + pl->o_codes;
    for (int l = 0; l < pl->net.num_conv; l++) b->act[l] = ws + pl->o_act[l];
    b->cin = ws + pl->o_cin;
    b->chid = ws + pl->o_chid;
    b->dchid = ws + pl->o_dchid;
    b->dfeat = ws + pl->o_dfeat;
    b->col = ws + pl->o_col;
    b->dA = ws + pl->o_dA;
    b->dB = ws + pl->o_dB;
    b->part = (double *)(void *)(ws + pl->o_part);
    if (pl->dt != MR_FP32) {
        b->wlp = ws + pl->o_wlp;
        b->dlog = ws + pl->o_dlog;
        b->dval = ws + pl->o_dval;
    }
    b->blas = ws + pl->o_blas;
    if (pl->dnn_ws_bytes) {
        b->dnn_ws = ws + pl->o_dnn_ws;
        if (pl->dt != MR_FP32) b->dnn_dw = ws + pl->o_dnn_dw;
    }
    mr_pc_carve_epi(pl, ws, b);
}

/* The ReLU bits of feat (i = 0) or chid (1), or NULL without them. */
static inline const mr_pc_aux *mr_pc_aux_of(const mr_pc_plan *pl, const mr_pc_bufs *b, int i, mr_pc_aux *a) {
    void *bits = i ? b->aux_chid : b->aux_feat;
    if (!bits || !b->aux_ok) return NULL;
    a->bits = bits;
    a->ld = mr_pc_aux_ld(i ? pl->net.critic_hidden : pl->net.hidden);
    a->ok = b->aux_ok + i;
    return a;
}

/* ------------------------------------------------------------ the network */

/* Rows of fc's whole-batch products (its forward over the batch, its weight
 * gradient with the batch as K) per GEMM: the flattened conv output of a
 * block of rows must stay within MR_PC_MAX_ELEMS elements (a batch past
 * that, e.g. 277,000 samples of the reference net, runs in several
 * blocks; below it, one, as before). */
static inline int mr_pc_fc_rows(const mr_pc_plan *pl) {
    return pl->fc_rows > 0 ? pl->fc_rows : pl->max_batch;
}

/* The weights the GEMMs read: the fp32 master array, or its T copy. */
static inline const void *mr_pc_w(const mr_pc_plan *pl, const mr_pc_bufs *b, const float *params, size_t off) {
    return pl->dt == MR_FP32 ? (const void *)(params + off) : mr_pc_cat(b->wlp, off, pl->dt);
}

/* The first layer's observation `proxy` argument: the observation
 * expansion of the codes, or MR_PC_OBS_IMAGE for a float image. */
static inline int mr_pc_obs_proxy(const mr_pc_plan *pl, int proxy) {
    return pl->net.obs_float ? MR_PC_OBS_IMAGE : proxy;
}

/* mr_policy_forward: codes (B,obs_row) (VV u8 codes, or C x VV fp32 of a
 * float image), extra (B,2) fp32 or NULL (zeros) -> logits (B,8) fp32,
 * value (B) fp32 raw; keeps what backward needs. In the reduced precisions
 * it first writes the T copy of params. 1 <= B <= max_batch. */
static inline mr_status mr_pc_forward(const mr_pc_ops *o, const mr_pc_plan *pl, const mr_pc_bufs *bf,
                                      const float *params, const uint8_t *codes, const float *extra, int B, int proxy,
                                      float *logits, float *value, mr_error *err) {
    const mr_net_layout *p = &pl->net;
    const int dt = pl->dt, L = p->num_conv, V = p->view, VV = p->VV, H = p->hidden, D = p->cin_dim;
    const int CH = p->critic_hidden, F = p->flat;
    if (B <= 0) return MR_OK;
    const size_t R = (size_t)p->obs_row;
    const int obs = mr_pc_obs_proxy(pl, proxy);
    mr_pc_job j;
    MR_PC_TRY(o->copy(o->ctx, bf->codes, codes, (size_t)B * R, err));
    if (dt != MR_FP32) {
        mr_pc_job_init(&j, MR_PCJ_CAST, dt, (long long)p->n_params);
        j.f = params; j.y = bf->wlp;
        MR_PC_TRY(o->job(o->ctx, &j, err));
    }
    for (int c0 = 0; c0 < B; c0 += pl->chunk) {
        const int n = B - c0 < pl->chunk ? B - c0 : pl->chunk;
        for (int l = 0; l < L; l++) {
            const void *in = l ? mr_pc_cat(bf->act[l - 1], (size_t)c0 * VV * p->ch[l], dt) : NULL;
            if (l && pl->dnn[l] && o->conv) {
                MR_PC_TRY(mr_pc_dnn_forward(o, dt, l, mr_pc_at(bf->act[l], (size_t)c0 * VV * p->ch[l + 1], dt), in,
                                            mr_pc_w(pl, bf, params, p->conv_w[l]), params + p->conv_b[l], n, V, V,
                                            p->ch[l], p->ch[l + 1], 1, err));
                continue;
            }
            MR_PC_TRY(mr_pc_conv_forward(o, dt, mr_pc_at(bf->act[l], (size_t)c0 * VV * p->ch[l + 1], dt), bf->col,
                                         in, bf->codes + (size_t)c0 * R, obs, mr_pc_w(pl, bf, params, p->conv_w[l]),
                                         params + p->conv_b[l], n, V, V, p->ch[l], p->ch[l + 1], 1, err));
        }
    }
    /* feat = relu(fc(aL)), written into cin's first H columns (in row blocks past 2^31 elements);
     * cuda.epilogue = fused keeps its ReLU bits, and chid's, for the backward */
    mr_pc_aux af, ac;
    const mr_pc_aux *aux_f = mr_pc_aux_of(pl, bf, 0, &af), *aux_c = mr_pc_aux_of(pl, bf, 1, &ac);
    if (aux_f) *aux_f->ok = 1;
    if (aux_c) *aux_c->ok = 1;
    for (int r0 = 0, rb = mr_pc_fc_rows(pl); r0 < B; r0 += rb) {
        mr_pc_aux ab;
        if (aux_f) {
            ab = *aux_f;
            ab.bits = (unsigned char *)aux_f->bits + (size_t)r0 * (size_t)(aux_f->ld / 8);
        }
        MR_PC_TRY(mr_pc_linear_forward_aux(o, "fc forward", dt, dt, mr_pc_at(bf->cin, (size_t)r0 * D, dt), D,
                                           mr_pc_cat(bf->act[L - 1], (size_t)r0 * F, dt), F,
                                           mr_pc_w(pl, bf, params, p->fc_w), F, params + p->fc_b,
                                           B - r0 < rb ? B - r0 : rb, F, H, 1, aux_f ? &ab : NULL, err));
    }
    MR_PC_TRY(mr_pc_linear_forward(o, "actor forward", dt, MR_FP32, logits, p->num_actions, bf->cin, D,
                                   mr_pc_w(pl, bf, params, p->actor_w), H, params + p->actor_b, B, H, p->num_actions,
                                   0, err));
    mr_pc_job_init(&j, p->obs_float ? MR_PCJ_CIN_IMAGE : MR_PCJ_CIN_FILL, dt,
                   (long long)B * (MR_POLICY_EXTRA + p->ch[0] * VV));
    j.H = V; j.W = V; j.C = p->ch[0]; j.ld = D; j.c0 = H; j.f = extra; j.y = bf->cin;
    if (p->obs_float) {   /* the image, and the declared privileged inputs (0 .. 2) */
        j.img = (const float *)(const void *)bf->codes;
        j.cols = p->extra_dim < MR_POLICY_EXTRA ? p->extra_dim : MR_POLICY_EXTRA;
    } else {
        j.codes = bf->codes;
    }
    MR_PC_TRY(o->job(o->ctx, &j, err));
    MR_PC_TRY(mr_pc_linear_forward_aux(o, "critic forward", dt, dt, bf->chid, CH, bf->cin, D,
                                       mr_pc_w(pl, bf, params, p->critic_w), D, params + p->critic_b, B, D, CH, 1,
                                       aux_c, err));
    return mr_pc_linear_forward(o, "value forward", dt, MR_FP32, value, 1, bf->chid, CH,
                                mr_pc_w(pl, bf, params, p->value_w_offset), CH, params + p->value_b_offset, B, CH, 1,
                                0, err);
}

/* mr_policy_backward for the last forward (same B, proxy, params):
 * dlogits (B,8), dvalue (B) fp32; ACCUMULATES into grads (fp32, n_params). */
static inline mr_status mr_pc_backward(const mr_pc_ops *o, const mr_pc_plan *pl, const mr_pc_bufs *bf,
                                       const float *params, const float *dlogits, const float *dvalue, int B,
                                       int proxy, float *grads, mr_error *err) {
    const mr_net_layout *p = &pl->net;
    const int dt = pl->dt, L = p->num_conv, V = p->view, VV = p->VV, H = p->hidden, D = p->cin_dim;
    const int CH = p->critic_hidden, F = p->flat, NA = p->num_actions;
    const size_t R = (size_t)p->obs_row;
    const int obs = mr_pc_obs_proxy(pl, proxy);
    if (B <= 0) return MR_OK;
    mr_pc_job j;
    const void *dl = dlogits, *dv = dvalue;
    if (dt != MR_FP32) {   /* the output gradients in T, for the GEMMs */
        mr_pc_job_init(&j, MR_PCJ_CAST, dt, (long long)B * NA);
        j.f = dlogits; j.y = bf->dlog;
        MR_PC_TRY(o->job(o->ctx, &j, err));
        mr_pc_job_init(&j, MR_PCJ_CAST, dt, B);
        j.f = dvalue; j.y = bf->dval;
        MR_PC_TRY(o->job(o->ctx, &j, err));
        dl = bf->dlog;
        dv = bf->dval;
    }
    float *G = grads;
    mr_pc_aux af, ac;
    const mr_pc_aux *aux_f = mr_pc_aux_of(pl, bf, 0, &af), *aux_c = mr_pc_aux_of(pl, bf, 1, &ac);
    /* value head: dchid through the critic's ReLU, with the critic's bias
     * gradient (one product with cuda.epilogue = fused); its own weights */
    MR_PC_TRY(mr_pc_input_grad_relu(o, "value backward", dt, bf->dchid, CH, 0.0f, dv, 1,
                                    mr_pc_w(pl, bf, params, p->value_w_offset), CH, B, CH, 1, bf->chid, CH,
                                    G + p->critic_b, bf->part, aux_c, err));
    MR_PC_TRY(mr_pc_linear_backward(o, "value backward", dt, NULL, 0, 0.0f, G + p->value_w_offset, CH,
                                    G + p->value_b_offset, bf->part, dv, 1, bf->chid, CH, NULL, 0, B, CH, 1, err));
    /* critic: weights over all D inputs; input gradient only for the features */
    MR_PC_TRY(mr_pc_linear_backward(o, "critic weight gradient", dt, NULL, 0, 0.0f, G + p->critic_w, D, NULL, NULL,
                                    bf->dchid, CH, bf->cin, D, NULL, 0, B, D, CH, err));
    MR_PC_TRY(mr_pc_linear_backward(o, "critic input gradient", dt, bf->dfeat, H, 0.0f, NULL, 0, NULL, NULL,
                                    bf->dchid, CH, NULL, 0, mr_pc_w(pl, bf, params, p->critic_w), D, B, H, CH, err));
    /* actor: its input gradient adds to the critic's share, then feat's ReLU
     * and fc's bias gradient (one product with cuda.epilogue = fused) */
    MR_PC_TRY(mr_pc_input_grad_relu(o, "actor backward", dt, bf->dfeat, H, 1.0f, dl, NA,
                                    mr_pc_w(pl, bf, params, p->actor_w), H, B, H, NA, bf->cin, D, G + p->fc_b,
                                    bf->part, aux_f, err));
    MR_PC_TRY(mr_pc_linear_backward(o, "actor backward", dt, NULL, 0, 0.0f, G + p->actor_w, H, G + p->actor_b,
                                    bf->part, dl, NA, bf->cin, D, NULL, 0, B, H, NA, err));
    /* fc weights over the whole batch (K = B, in blocks of rows past 2^31
     * elements, each adding into the gradient); its input gradient per chunk */
    for (int r0 = 0, rb = mr_pc_fc_rows(pl); r0 < B; r0 += rb)
        MR_PC_TRY(mr_pc_linear_backward(o, "fc weight gradient", dt, NULL, 0, 0.0f, G + p->fc_w, F, NULL, NULL,
                                        mr_pc_cat(bf->dfeat, (size_t)r0 * H, dt), H,
                                        mr_pc_cat(bf->act[L - 1], (size_t)r0 * F, dt), F, NULL, 0,
                                        B - r0 < rb ? B - r0 : rb, F, H, err));
    for (int c0 = 0; c0 < B; c0 += pl->chunk) {
        const int n = B - c0 < pl->chunk ? B - c0 : pl->chunk;
        void *cur = bf->dA, *next = bf->dB;
        MR_PC_TRY(mr_pc_linear_backward(o, "fc input gradient", dt, cur, F, 0.0f, NULL, 0, NULL, NULL,
                                        mr_pc_cat(bf->dfeat, (size_t)c0 * H, dt), H, NULL, 0,
                                        mr_pc_w(pl, bf, params, p->fc_w), F, n, F, H, err));
        mr_pc_job_init(&j, MR_PCJ_RELU_BACK, dt, (long long)n * F);
        j.cols = F; j.ld = F; j.ld2 = F; j.m = mr_pc_cat(bf->act[L - 1], (size_t)c0 * F, dt); j.y = cur;
        MR_PC_TRY(o->job(o->ctx, &j, err));
        for (int l = L - 1; l >= 0; l--) {
            const void *in = l ? mr_pc_cat(bf->act[l - 1], (size_t)c0 * VV * p->ch[l], dt) : NULL;
            if (l && pl->dnn[l] && o->conv)
                MR_PC_TRY(mr_pc_dnn_backward(o, dt, l, next, in, G + p->conv_w[l], G + p->conv_b[l], bf->part, cur,
                                             in, mr_pc_w(pl, bf, params, p->conv_w[l]), n, V, V, p->ch[l],
                                             p->ch[l + 1], err));
            else
                MR_PC_TRY(mr_pc_conv_backward(o, dt, l ? next : NULL, in, G + p->conv_w[l], G + p->conv_b[l],
                                              bf->part, bf->col, cur, in, bf->codes + (size_t)c0 * R, obs,
                                              mr_pc_w(pl, bf, params, p->conv_w[l]), n, V, V, p->ch[l],
                                              p->ch[l + 1], err));
            void *t = cur;
            cur = next;
            next = t;
        }
    }
    return MR_OK;
}

#endif /* MR_POLICY_MATH_H */

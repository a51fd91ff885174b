/*
 * policy.c - the CNN actor-critic on the CPU: act, the training forward and
 * the backward (policy.h has the network, the parameter layout and the
 * memory plan; policy_layout.c lays it out, policy_params.c initialises it).
 *
 * Where the time goes: for the reference net (convs 2->32->64->64 on 11x11,
 * fc 7744->512, critic 756->512) 11.1 M multiply-adds per sample forward, all
 * in sgemm. The rest is memory movement kept chunk-sized (im2col, ReLU,
 * col2im), so it stays in cache next to the sgemm that consumes it.
 *
 * With cpu.conv = onednn (the default) the first conv is computed straight
 * from the codes (nn.c; only food/poison taps cost anything) and the others
 * through oneDNN (conv_dnnl.c), whose weights are reordered into its formats
 * once per act / forward / backward call; a tail chunk shorter than `chunk`
 * takes the im2col path for layers 1.. (oneDNN's primitives exist for the
 * chunk shape only). cpu.conv = winograd is the same but for layers 1..,
 * computed by Winograd F(m x m,3x3) (conv_winograd.c; m by mr_wino_tile_for:
 * 6 on 11 x 11 maps) for every chunk, the
 * tail too, its weights transformed once per act / forward / backward.
 * Each layer 1.. may also take its own of those two (mr_policy_options.
 * layers, from cpu.conv = auto's per-layer search): lconv[l] says which,
 * and a oneDNN layer's tail chunk still goes through im2col.
 *
 * In bf16 (mr_policy.bf16, and oneDNN's matmul started: p->lin) fc's three
 * products run in bf16 too (linear_dnnl.c, 2x OpenBLAS's fp32 rate here):
 * fc.w converted once per act / forward / backward, its input per block in
 * the forward, and the backward goes rblock by rblock in both activation
 * modes, converting the rblock's input and output gradient once for fc.w's
 * gradient and every block's input gradient. Measured (bench_train, 2-core
 * Zen 4): the reference net 796 -> 1,103 agent-steps/s, the small one
 * 7.2 k -> 9.3 k. The critic (3.5% of the work) and the heads stay fp32.
 *
 * Forward (act and training alike): the convs chunk by chunk (im2col of one
 * chunk in one workspace), fc segment by segment (fc_rows samples, policy.h)
 * and the heads and critic block by block (M = block). Training with stored
 * activations runs the trunk over the whole batch into the max_batch
 * buffers, then fc over it, every segment in one OpenMP loop; act, and the
 * training forward that recomputes, run the trunk one segment at a time into
 * act's segment buffer (b_aL) and fc on it. Both cut fc at the same segment
 * starts, so they make the same calls (bit-identical outputs). Recomputing
 * with p->kept > 0 (cpu.activations = auto over its allowance): the first
 * kept samples go as stored ones do, the rest as recomputed ones; the
 * backward reads the kept rblocks and recomputes the others into the act
 * rows after them (recompute_rblock), so the bits are recompute's.
 * Backward: the heads, the critic and fc.w's gradient over the whole batch
 * (one product with K = B each; per rblock when recomputing), then per
 * segment fc's input gradient (into b_aL) and per block, chunk by chunk,
 * the convs (im2col recomputed).
 *
 * fp32 fc (every cpu.conv but im2col, without bf16's p->lin): its three
 * products and the critic's go through nn.c's mr_nn_fc_plan, at most four
 * blocks of at least 256 rows or columns (OpenBLAS repacks the operand that
 * is not split on every call), on segments of MR_POLICY_FC_ROWS = 512
 * samples: the forward in two 256-sample blocks per segment, the input
 * gradient in four column blocks of 1936 (the reference net), the weight
 * gradient likewise. Before, the reference net's fc ran per block of 256
 * samples in 64-column (forward) and 256-column (both gradients) blocks.
 * nn.c has the products' rates. Measured on the 2-core AVX-512 Xeon
 * (moonrl bench train, 64 envs x 64 steps, cpu.conv = onednn, fresh
 * processes alternating, three pairs): the reference net 835-899 -> 935-964
 * agent-steps/s (forward 1.38-1.49 -> 1.22-1.26 s an update, backward
 * 2.73-2.93 -> 2.60-2.70 s), the small one 6.3-6.6 k -> 6.9-7.3 k, for
 * 8.1 MiB (reference) / 3.9 MiB (small) more in the plan at 4096 samples
 * (b_aL and b_feat hold a segment, not a block). With cpu.conv = im2col every call is
 * the engine's old one (fc_rows = block, mr_nn_gemm_plan), bit for bit.
 * On AVX-512, fc and the critic's hidden layer run on gemm.c's kernels in
 * those same blocks (policy.h: fc_own): the forward on one operand
 * transposed (act's few rows, or the weights once per pass), the
 * gradients on the weights and inputs where they lie.
 */
#include "policy.h"
#include "nn.h"
#include "gemm.h"
#include "obs_codes.h"
#include "conv_dnnl.h"
#include "linear_dnnl.h"
#include <omp.h>
#include <string.h>
#include <stdio.h>

#define MR_POLICY_PAR_MIN (1 << 17)   /* copy loops shorter than this stay serial */

void mr_policy_zero_grad(mr_policy *p) {
    memset(p->grads, 0, sizeof(float) * p->n_params);
}

/* ------------------------------------------------------------ forward */

/* The network's input for n observation rows (obs_row bytes each) into x
 * (n,VV,C): the codes' one-hot expansion (proxy: foraging's proxy view), or
 * a float image's C x V x V read as (V,V,C). */
static void obs_input(const mr_policy *p, float *x, const uint8_t *rows, int n, int proxy) {
    if (p->obs_float)
        mr_image_hwc_forward(x, (const float *)(const void *)rows, n, p->VV, p->ch[0]);
    else
        mr_obs_expand_forward(x, rows, n, p->VV, p->ch[0], proxy);
}

/* cin (B,cin_dim) = feat (B,hidden) ++ extra (B,2) ++ ground-truth view
 * (B,VV,C); the view left unwritten where critic_own (nothing reads it:
 * critic_forward and critic_view_grad take it from the codes). A float
 * image's privileged inputs past the declared critic_extra read 0. */
static void build_cin(const mr_policy *p, float *cin, const float *feat, const float *extra,
                      const uint8_t *codes, int B) {
    int H = p->hidden, D = p->cin_dim, E = p->obs_float ? p->extra_dim : MR_POLICY_EXTRA;
    #pragma omp parallel for schedule(static) if ((size_t)B * D >= MR_POLICY_PAR_MIN)
    for (int b = 0; b < B; b++) {
        float *row = cin + (size_t)b * D;
        memcpy(row, feat + (size_t)b * H, sizeof(float) * H);
        row[H] = extra && E > 0 ? extra[2 * b] : 0.0f;
        row[H + 1] = extra && E > 1 ? extra[2 * b + 1] : 0.0f;
        if (!p->critic_own) obs_input(p, row + H + MR_POLICY_EXTRA, codes + (size_t)b * p->obs_row, 1, 0);
    }
}

/* Layer 0 straight from the codes (nn.c's sparse conv): every conv but
 * im2col's, on cell codes; a float image goes through the layers' own path. */
static int codes_first(const mr_policy *p) { return p->conv != MR_CPU_CONV_IM2COL && !p->obs_float; }

/* One thread's chunk workspace (policy.h); t is its index (oneDNN's
 * per-thread memories follow it). */
typedef struct { float *x, *bufA, *bufB, *col; int t; } chunk_ws;

static chunk_ws thread_ws(const mr_policy *p, int t) {
    float *base = p->x + (size_t)t * p->thread_floats;
    chunk_ws w = {base, base + (p->bufA - p->x), base + (p->bufB - p->x), base + (p->col - p->x), t};
    return w;
}

/* Layer l >= 1 through oneDNN: whole chunks only (a tail's size changes
 * with every batch) */
static int use_dnnl(const mr_policy *p, int l, int n) {
    return p->dnnl && p->lconv[l] == MR_CPU_CONV_ONEDNN && n == p->chunk;
}
/* Layer l >= 1 by Winograd: any chunk, the tail too */
static int use_wino(const mr_policy *p, int l) { return p->lconv[l] == MR_CPU_CONV_WINOGRAD; }
/* Some layer by Winograd (its weights are transformed once per pass) */
static int any_wino(const mr_policy *p) { return p->wino.L > 1; }

/* The weight pointers of every conv layer (conv_dnnl's loads). */
static void conv_weights(const mr_policy *p, const float **w) {
    for (int l = 0; l < p->num_conv; l++) w[l] = p->params + p->conv_w[l];
}

/* Threads for a loop over n chunks: at most the workspaces there are. */
static int trunk_threads(const mr_policy *p, int n) {
    int t = omp_get_max_threads();
    if (t > p->nthreads) t = p->nthreads;
    return t < n ? t : n;
}

/* The conv trunk for n <= chunk samples: codes (n,VV) -> outs[l] (n,VV,ch[l+1]),
 * post-ReLU; outs[l] == NULL means the workspace's ping-pong buffers. */
static void trunk_forward(const mr_policy *p, const chunk_ws *w, const uint8_t *codes, int n,
                          int proxy, float *const *outs) {
    const float *in = w->x;
    const float *P = p->params;
    int l = 0;
    if (codes_first(p)) {   /* layer 0 straight from the codes */
        float *out = outs[0] ? outs[0] : w->bufA;
        mr_conv3x3_codes_relu_forward(out, w->col, codes, P + p->conv_w[0], P + p->conv_b[0], n, p->view,
                                      p->view, p->ch[0], p->ch[1], proxy);
        in = out;
        l = 1;
    } else {
        obs_input(p, w->x, codes, n, proxy);
    }
    for (; l < p->num_conv; l++) {
        float *out = outs[l] ? outs[l] : (l & 1) ? w->bufB : w->bufA;
        if (l == 0)   /* a float image's, or im2col's: im2col + sgemm */
            mr_conv3x3_relu_forward(out, w->col, in, P + p->conv_w[0], P + p->conv_b[0], n, p->view, p->view,
                                    p->ch[0], p->ch[1]);
        else if (use_wino(p, l))
            mr_conv_wino_forward(&p->wino, w->t, l, out, in, P + p->conv_b[l], n);
        else if (use_dnnl(p, l, n))
            mr_conv_dnnl_forward(p->dnnl, w->t, l, out, in, P + p->conv_b[l]);
        else
            mr_conv3x3_relu_forward(out, w->col, in, P + p->conv_w[l], P + p->conv_b[l], n, p->view,
                                    p->view, p->ch[l], p->ch[l + 1]);
        in = out;
    }
}

/* The trunk for nb samples, one chunk per task: every chunk's products have
 * the shapes of a chunk whatever the thread count, so the bits do not depend
 * on it. acts: each layer's output for the nb samples (training), or NULL to
 * keep all but the last in the workspaces (act); aL gets the last layer. */
static void trunk_block(const mr_policy *p, const uint8_t *codes, int nb, int proxy,
                        float *const *acts, float *aL) {
    int L = p->num_conv, nchunks = (nb + p->chunk - 1) / p->chunk;
    #pragma omp parallel for schedule(dynamic, 1) num_threads(trunk_threads(p, nchunks))
    for (int k = 0; k < nchunks; k++) {
        int c0 = k * p->chunk, n = nb - c0 < p->chunk ? nb - c0 : p->chunk;
        chunk_ws w = thread_ws(p, omp_get_thread_num());
        float *outs[MR_MAX_CONV];
        for (int l = 0; l < L; l++)
            outs[l] = acts ? acts[l] + (size_t)c0 * p->VV * p->ch[l + 1]
                    : l == L - 1 ? aL + (size_t)c0 * p->flat : NULL;
        trunk_forward(p, &w, codes + (size_t)c0 * p->obs_row, n, proxy, outs);
    }
}

/* fc's products through mr_nn_fc_plan's large blocks: every fp32 path but
 * im2col's (the engine's old calls, bit for bit) */
static int fc_wide(const mr_policy *p) { return p->conv != MR_CPU_CONV_IM2COL && !p->lin; }

/* feat (n,hidden) = relu(fc(x)) for n rows of x, the first at a segment
 * start, segment by segment (fc_rows rows): the same calls for act and the
 * training forward. im2col and bf16 have one block a segment and make the
 * old per-block calls. */
static void fc_forward(mr_policy *p, float *feat, const float *x, int n) {
    const float *P = p->params;
    const int F = p->flat, H = p->hidden;
    if (p->fc_own && !p->fc_wt_fresh && n < H && n <= p->fc_xrows && n % 16 == 0) {
        /* few rows: their transpose (F * n floats) instead of fc.w's (unless
         * this pass has fc.w's already: act_keep's batch) */
        mr_nn_transpose(p->fc_xt, x, n, F);
        mr_fc_relu_forward_xt(feat, p->fc_xt, P + p->fc_w, P + p->fc_b, p->fc_ct, n, F, H);
        return;
    }
    if (fc_wide(p)) {   /* every segment in one OpenMP loop */
        if (p->fc_own && !p->fc_wt_fresh) {
            mr_nn_transpose(p->fc_wt, P + p->fc_w, H, F);
            p->fc_wt_fresh = 1;
        }
        mr_fc_relu_forward(feat, x, P + p->fc_w, p->fc_wt, P + p->fc_b, n, F, H, p->fc_rows);
        return;
    }
    for (int s0 = 0; s0 < n; s0 += p->fc_rows) {
        int ns = n - s0 < p->fc_rows ? n - s0 : p->fc_rows;
        const float *xs = x + (size_t)s0 * F;
        float *fs = feat + (size_t)s0 * H;
        if (p->lin) mr_bf16_from_f32(p->x16, xs, (size_t)ns * F);
        if (!p->lin || mr_linear_bf16_forward(p->lin, fs, p->x16, p->w16, P + p->fc_b, ns, F, H, 1))
            mr_linear_relu_forward(fs, xs, P + p->fc_w, P + p->fc_b, ns, F, H);
    }
}

/* The critic's columns past feat and extra: the ground-truth view, C per
 * cell (one-hot: code k in channel k-1; foraging's FOOD in channel 0,
 * POISON in channel 1, as build_cin expands it). */
static int critic_dense(const mr_policy *p) { return p->hidden + MR_POLICY_EXTRA; }

/* The view's nonzero entry for a cell of code c among C channels
 * (build_cin's expansion, the truth: one-hot): its channel, or -1 (EMPTY or
 * an unknown code). Its value is 1. */
static int view_entry(unsigned c, int C) { return mr_obs_nonzero(c, C) ? (int)c - 1 : -1; }

/* The critic's hidden layer on gemm.c's kernels (critic_own): chid (nb,
 * CH) = relu(b + cin[:, :dense] . W[:, :dense]^T + the view's terms), the
 * view's terms added row by row, cell by cell in order, for each nonzero
 * entry of the codes' expansion (its value times that column's weights):
 * the products skip the view's zeros. Rows in blocks across the threads;
 * each row's bits whatever the blocks. */
static void critic_forward(const mr_policy *p, float *chid, const float *cin, const uint8_t *codes, int nb) {
    const float *P = p->params, *Wt = p->critic_wt;
    const int D = p->cin_dim, CH = p->critic_hidden, K0 = critic_dense(p), VV = p->VV, C = p->ch[0], R = 16;
    const int nblk = (nb + R - 1) / R;
    #pragma omp parallel for schedule(static) if (nblk > 1 && (size_t)nb * CH * D >= MR_POLICY_PAR_MIN)
    for (int k = 0; k < nblk; k++) {
        const int r0 = k * R, nr = nb - r0 < R ? nb - r0 : R;
        for (int r = r0; r < r0 + nr; r++) memcpy(chid + (size_t)r * CH, P + p->critic_b, sizeof(float) * CH);
        mr_gemm(chid + (size_t)r0 * CH, CH, cin + (size_t)r0 * D, D, 1, Wt, CH, nr, CH, K0, 1);
        for (int r = r0; r < r0 + nr; r++) {
            float *h = chid + (size_t)r * CH;
            const uint8_t *cd = codes + (size_t)r * VV;
            for (int i = 0; i < VV; i++) {
                const int ch = view_entry(cd[i], C);
                if (ch < 0) continue;
                const float *w = Wt + (size_t)(K0 + C * i + ch) * CH;
                for (int o = 0; o < CH; o++) h[o] += w[o];
            }
            for (int o = 0; o < CH; o++) h[o] = h[o] > 0.0f ? h[o] : 0.0f;
        }
    }
}

/* critic.w's gradient in the view's columns (critic_own): G[o][dense + j]
 * += sum over the B samples, in order, of view_j * dchid[o], for the
 * nonzero view entries only; critic_vt holds the sums (row j: column j),
 * its cells shared among the threads, each summing every sample. */
static void critic_view_grad(mr_policy *p, float *G, const float *dchid, int B) {
    const int D = p->cin_dim, CH = p->critic_hidden, K0 = critic_dense(p), VV = p->VV, C = p->ch[0];
    float *T = p->critic_vt;
    #pragma omp parallel if ((size_t)B * CH * 8 >= MR_POLICY_PAR_MIN)
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int i0 = (int)((long)VV * t / nt), i1 = (int)((long)VV * (t + 1) / nt);
        memset(T + (size_t)C * i0 * CH, 0, sizeof(float) * C * (size_t)(i1 - i0) * CH);
        for (int s = 0; s < B; s++) {
            const uint8_t *cd = p->codes + (size_t)s * VV;
            const float *g = dchid + (size_t)s * CH;
            for (int i = i0; i < i1; i++) {
                const int ch = view_entry(cd[i], C);
                if (ch < 0) continue;
                float *tj = T + (size_t)(C * i + ch) * CH;
                for (int o = 0; o < CH; o++) tj[o] += g[o];
            }
        }
        for (int o = 0; o < CH; o++)
            for (int j = C * i0; j < C * i1; j++) G[(size_t)o * D + K0 + j] += T[(size_t)j * CH + o];
    }
}

/* The value head (raw) for nb samples of the critic's hidden layer. */
static void value_head(const mr_policy *p, const float *chid, int nb, float *value) {
    const float *P = p->params;
    mr_linear_forward(value, chid, P + p->value_w_offset, P + p->value_b_offset, nb, p->critic_hidden, 1);
}

/* The heads for one block of nb <= block samples (feat given), the same
 * calls for act and forward. */
static void heads_block(mr_policy *p, const uint8_t *codes, const float *extra, int nb, const float *feat,
                        float *cin, float *chid, float *logits, float *value) {
    const float *P = p->params;
    mr_linear_forward(logits, feat, P + p->actor_w, P + p->actor_b, nb, p->hidden, p->num_actions);
    build_cin(p, cin, feat, extra, codes, nb);
    if (p->critic_own)
        critic_forward(p, chid, cin, codes, nb);
    else if (fc_wide(p))
        mr_fc_relu_forward(chid, cin, P + p->critic_w, p->critic_wt, P + p->critic_b, nb, p->cin_dim,
                           p->critic_hidden, 0);
    else
        mr_linear_relu_forward(chid, cin, P + p->critic_w, P + p->critic_b, nb, p->cin_dim,
                               p->critic_hidden);
    value_head(p, chid, nb, value);
}

/* The heads for the ns samples of a segment, block by block: codes, extra
 * (NULL: zeros), feat, logits and value from the segment's first sample;
 * cin and chid the rows kept for the backward (kept = 1: from the
 * segment's first) or act's one-block scratch (kept = 0). */
static void heads_segment(mr_policy *p, const uint8_t *codes, const float *extra, int ns, const float *feat,
                          float *cin, float *chid, int kept, float *logits, float *value) {
    for (int b0 = 0; b0 < ns; b0 += p->block) {
        const int nb = ns - b0 < p->block ? ns - b0 : p->block;
        const size_t k = kept ? (size_t)b0 : 0;
        heads_block(p, codes + (size_t)b0 * p->obs_row, extra ? extra + 2 * (size_t)b0 : NULL, nb,
                    feat + (size_t)b0 * p->hidden, cin + k * p->cin_dim, chid + k * p->critic_hidden,
                    logits + (size_t)b0 * p->num_actions, value + b0);
    }
}

/* fc.w in bf16 for this pass (the weights change between passes) */
static void load_w16(mr_policy *p) {
    if (p->lin) mr_bf16_from_f32(p->w16, p->params + p->fc_w, (size_t)p->hidden * p->flat);
}

/* Before a forward of B samples: the bf16 weights, and oneDNN's forward
 * weights where a chunk of that size goes through oneDNN. */
static void forward_weights(mr_policy *p, int B) {
    load_w16(p);
    p->fc_wt_fresh = 0;   /* fc.w transposed where a call first needs it (fc_forward) */
    p->keep_loaded = 0;
    if (p->critic_own)
        mr_nn_transpose(p->critic_wt, p->params + p->critic_w, p->critic_hidden, p->cin_dim);
    const float *w[MR_MAX_CONV];
    conv_weights(p, w);
    if (p->dnnl && B >= p->chunk) mr_conv_dnnl_load_forward(p->dnnl, w);
    if (any_wino(p) && B > 0) mr_conv_wino_load_forward(&p->wino, w);
}

void mr_policy_act(mr_policy *p, const uint8_t *codes, const float *extra, int B,
                   int proxy, float *logits, float *value) {
    if (p->trunk == MR_TRUNK_MLP) {
        mr_policy_mlp_act(p, (const float *)(const void *)codes, extra, B, logits, value);
        return;
    }
    forward_weights(p, B);
    for (int s0 = 0; s0 < B; s0 += p->fc_rows) {   /* one fc segment at a time */
        int ns = B - s0 < p->fc_rows ? B - s0 : p->fc_rows;
        const uint8_t *cs = codes + (size_t)s0 * p->obs_row;
        trunk_block(p, cs, ns, proxy, NULL, p->b_aL);
        fc_forward(p, p->b_feat, p->b_aL, ns);
        heads_segment(p, cs, extra ? extra + 2 * (size_t)s0 : NULL, ns, p->b_feat, p->b_cin, p->b_chid, 0,
                      logits + (size_t)s0 * p->num_actions, value + s0);
    }
}

/* act_keep's weights: the acts of one batch share them (its kept rows are
 * the first epoch's forward, so the parameters cannot change in between):
 * loaded at the batch's first act (row0 0), fc.w transposed then for all of
 * its acts (the weights' path, the same bits as the inputs' transpose that
 * each of a rollout's 64 acts took), kept until another call loads its own. */
static void keep_weights(mr_policy *p, int B, int row0) {
    if (row0 > 0 && p->keep_loaded) return;
    forward_weights(p, B);
    if (p->fc_own && fc_wide(p)) {
        mr_nn_transpose(p->fc_wt, p->params + p->fc_w, p->hidden, p->flat);
        p->fc_wt_fresh = 1;
    }
    p->keep_loaded = 1;
}

int mr_policy_act_keep(mr_policy *p, const uint8_t *codes, const float *extra, int B, int proxy, float *logits,
                       float *value, int row0) {
    if (p->trunk == MR_TRUNK_MLP) return -1;   /* not offered: the trainer acts and forwards (t->reuse 0) */
    if (B < 0 || row0 < 0 || row0 > p->max_batch - B) return -1;
    const int L = p->num_conv, VV = p->VV;
    const size_t R = (size_t)p->obs_row;
    if (row0 == 0) p->keep_rows = 0;   /* a new batch */
    p->keep_rows += B;
    p->keep_proxy = proxy;
    p->fwd_B = 0;   /* the rows are the next forward's, not the last one's */
    memcpy(p->codes + (size_t)row0 * R, codes, (size_t)B * R);
    keep_weights(p, B, row0);
    /* rows below K keep their conv activations (the training forward's rule) */
    const int K = p->recompute ? p->kept : p->max_batch;
    for (int s0 = 0; s0 < B;) {   /* act's segments, cut where the kept rows end */
        const int r = row0 + s0;
        int ns = B - s0 < p->fc_rows ? B - s0 : p->fc_rows;
        if (r < K && r + ns > K) ns = K - r;
        float *acts[MR_MAX_CONV];
        for (int l = 0; l < L; l++) acts[l] = p->act[l] + (size_t)r * VV * p->ch[l + 1];
        const int keep = r < K;
        float *aL = keep ? acts[L - 1] : p->b_aL, *feat = p->feat + (size_t)r * p->hidden;
        const uint8_t *cs = codes + (size_t)s0 * R;
        trunk_block(p, cs, ns, proxy, keep ? acts : NULL, aL);
        fc_forward(p, feat, aL, ns);
        heads_segment(p, cs, extra ? extra + 2 * (size_t)s0 : NULL, ns, feat, p->cin + (size_t)r * p->cin_dim,
                      p->chid + (size_t)r * p->critic_hidden, 1, logits + (size_t)s0 * p->num_actions, value + s0);
        s0 += ns;
    }
    return 0;
}

int mr_policy_forward_kept(mr_policy *p, int B, int proxy, float *value) {
    if (p->trunk == MR_TRUNK_MLP) return -1;
    if (B <= 0 || B > p->max_batch || p->keep_rows != B || p->keep_proxy != proxy) return -1;
    for (int b0 = 0; b0 < B; b0 += p->block) {   /* heads_block's blocks */
        const int nb = B - b0 < p->block ? B - b0 : p->block;
        value_head(p, p->chid + (size_t)b0 * p->critic_hidden, nb, value + b0);
    }
    p->keep_rows = 0;
    p->fwd_B = B;
    p->fwd_proxy = proxy;
    return 0;
}

int mr_policy_forward(mr_policy *p, const uint8_t *codes, const float *extra, int B,
                      int proxy, float *logits, float *value) {
    if (p->trunk == MR_TRUNK_MLP)
        return mr_policy_mlp_forward(p, (const float *)(const void *)codes, extra, B, logits, value);
    if (B < 0 || B > p->max_batch) return -1;
    p->keep_rows = 0;
    int L = p->num_conv;
    memcpy(p->codes, codes, (size_t)B * p->obs_row);
    forward_weights(p, B);
    /* the trunk for the samples whose activations are kept (all, or the
     * kept rblocks), then fc over them */
    const int K = !p->recompute ? B : p->kept < B ? p->kept : B;
    if (K > 0) {
        trunk_block(p, codes, K, proxy, p->act, p->act[L - 1]);
        fc_forward(p, p->feat, p->act[L - 1], K);
    }
    for (int s0 = 0; s0 < B; s0 += p->fc_rows) {
        int ns = B - s0 < p->fc_rows ? B - s0 : p->fc_rows;
        if (s0 >= K) {   /* act's calls: nothing of the trunk is kept */
            trunk_block(p, codes + (size_t)s0 * p->obs_row, ns, proxy, NULL, p->b_aL);
            fc_forward(p, p->feat + (size_t)s0 * p->hidden, p->b_aL, ns);
        }
        heads_segment(p, codes + (size_t)s0 * p->obs_row, extra ? extra + 2 * (size_t)s0 : NULL, ns,
                      p->feat + (size_t)s0 * p->hidden, p->cin + (size_t)s0 * p->cin_dim,
                      p->chid + (size_t)s0 * p->critic_hidden, 1, logits + (size_t)s0 * p->num_actions, value + s0);
    }
    p->fwd_B = B;
    p->fwd_proxy = proxy;
    return 0;
}

/* ------------------------------------------------------------ backward */

/* Samples [b0, b0 + nb), one block, given fc's input gradient for them in
 * dL: the convs, one chunk per task, each into its own partial gradient;
 * the partials are added to grads in chunk order. The layer outputs of
 * sample c are p->act[l] + (c - a0) * VV * ch[l+1] (a0: the first sample
 * the act buffers hold: 0, or the recomputed rblock's). The oneDNN
 * backward weights are loaded. */
static void conv_backward_block(mr_policy *p, int b0, int nb, float *dL, int a0) {
    const float *P = p->params;
    float *G = p->grads;
    const int L = p->num_conv;
    const size_t CF = p->conv_floats, CFr = mr_policy_round_f(CF);
    const int nchunks = (nb + p->chunk - 1) / p->chunk;
    const int codes0 = codes_first(p);   /* layer 0 from the codes */
    #pragma omp parallel for schedule(dynamic, 1) num_threads(trunk_threads(p, nchunks))
    for (int k = 0; k < nchunks; k++) {
        int c0 = b0 + k * p->chunk, n = b0 + nb - c0 < p->chunk ? b0 + nb - c0 : p->chunk;
        chunk_ws w = thread_ws(p, omp_get_thread_num());
        float *part = p->conv_part + (size_t)k * CFr;
        memset(part, 0, sizeof(float) * CF);
        float *d = dL + (size_t)(c0 - b0) * p->flat;
        mr_relu_backward(d, d, p->act[L - 1] + (size_t)(c0 - a0) * p->flat, (size_t)n * p->flat);
        const uint8_t *cc = p->codes + (size_t)c0 * p->obs_row;
        if (!codes0) obs_input(p, w.x, cc, n, p->fwd_proxy);
        for (int l = L - 1; l >= 0; l--) {
            if (l == 0 && codes0) {   /* weight and bias gradients only, from the codes */
                mr_conv3x3_codes_backward(part + p->conv_w[0], part + p->conv_b[0], (double *)w.col, d,
                                          L > 1 ? p->act[0] + (size_t)(c0 - a0) * p->VV * p->ch[1] : NULL, cc,
                                          n, p->view, p->view, p->ch[0], p->ch[1], p->fwd_proxy);
                break;
            }
            const float *in = l > 0 ? p->act[l - 1] + (size_t)(c0 - a0) * p->VV * p->ch[l] : w.x;
            float *dprev = l == 0 ? NULL : ((L - 1 - l) & 1) ? w.bufB : w.bufA;
            size_t szp = (size_t)n * p->VV * p->ch[l];
            if (l > 0 && use_wino(p, l)) {   /* writes dprev, dw and db (part is fresh) */
                mr_conv_wino_backward(&p->wino, w.t, l, dprev, part + p->conv_w[l], part + p->conv_b[l], d, in, n);
            } else if (l > 0 && use_dnnl(p, l, n)) {   /* writes dprev, dw and db (part is fresh) */
                mr_conv_dnnl_backward(p->dnnl, w.t, l, dprev, part + p->conv_w[l], part + p->conv_b[l], d, in);
            } else {
                if (dprev) memset(dprev, 0, sizeof(float) * szp);
                mr_conv3x3_backward(dprev, part + p->conv_w[l], part + p->conv_b[l], w.col, d, in,
                                    P + p->conv_w[l], n, p->view, p->view, p->ch[l], p->ch[l + 1]);
            }
            /* the first layer's ReLU: in its gradient's pass (the codes') */
            if (dprev && !(l == 1 && codes0)) mr_relu_backward(dprev, dprev, in, szp);
            d = dprev;
        }
    }
    #pragma omp parallel for schedule(static) if (CF * (size_t)nchunks >= MR_POLICY_PAR_MIN)
    for (size_t i = 0; i < CF; i++) {
        float g = G[i];
        for (int k = 0; k < nchunks; k++) g += p->conv_part[(size_t)k * CFr + i];
        G[i] = g;
    }
}

/* fc's input gradient, then the convs, for samples [r0, r0 + nr) (r0 a
 * segment's start; a0 as in conv_backward_block; d0: the sample in d16's
 * row 0). fc_wide: one product per segment (fc_rows rows) into b_aL, then
 * its blocks; else one block at a time, the old calls (bf16: from d16). */
static void trunk_backward(mr_policy *p, int r0, int nr, int a0, int d0) {
    const float *P = p->params;
    const int H = p->hidden, F = p->flat;
    float *dL = p->b_aL;
    if (fc_wide(p)) {
        for (int s0 = r0; s0 < r0 + nr; s0 += p->fc_rows) {
            int ns = r0 + nr - s0 < p->fc_rows ? r0 + nr - s0 : p->fc_rows;
            mr_fc_backward(dL, NULL, NULL, p->dfeat + (size_t)s0 * H, NULL, P + p->fc_w, p->fc_own, ns, F, H);
            for (int b0 = s0; b0 < s0 + ns; b0 += p->block) {
                int nb = s0 + ns - b0 < p->block ? s0 + ns - b0 : p->block;
                conv_backward_block(p, b0, nb, dL + (size_t)(b0 - s0) * F, a0);
            }
        }
        return;
    }
    for (int b0 = r0; b0 < r0 + nr; b0 += p->block) {
        int nb = r0 + nr - b0 < p->block ? r0 + nr - b0 : p->block;
        memset(dL, 0, sizeof(float) * (size_t)nb * F);
        if (!p->lin || mr_linear_bf16_dinp(p->lin, dL, p->d16 + (size_t)(b0 - d0) * H, p->w16, nb, F, H))
            mr_linear_backward(dL, NULL, NULL, p->dfeat + (size_t)b0 * H, NULL, P + p->fc_w, nb, F, H);
        conv_backward_block(p, b0, nb, dL, a0);
    }
}

/* The trunk of samples [r0, r0 + nr) again, into the act buffers' rows
 * after the kept ones (the backward then reads them with a0 = r0 - kept). */
static void recompute_rblock(mr_policy *p, int r0, int nr) {
    float *acts[MR_MAX_CONV];
    for (int l = 0; l < p->num_conv; l++) acts[l] = p->act[l] + (size_t)p->kept * p->VV * p->ch[l + 1];
    trunk_block(p, p->codes + (size_t)r0 * p->obs_row, nr, p->fwd_proxy, acts, acts[p->num_conv - 1]);
}

int mr_policy_backward(mr_policy *p, const float *dlogits, const float *dvalue, int B) {
    if (p->trunk == MR_TRUNK_MLP) return mr_policy_mlp_backward(p, dlogits, dvalue, B);
    if (B != p->fwd_B || B <= 0) return B == 0 && p->fwd_B == 0 ? 0 : -1;
    const float *P = p->params;
    float *G = p->grads;
    int L = p->num_conv, H = p->hidden, CH = p->critic_hidden, D = p->cin_dim;

    /* value head and critic, whole batch */
    memset(p->dchid, 0, sizeof(float) * (size_t)B * CH);
    mr_linear_backward(p->dchid, G + p->value_w_offset, G + p->value_b_offset, dvalue, p->chid,
                       P + p->value_w_offset, B, CH, 1);
    mr_relu_backward(p->dchid, p->dchid, p->chid, (size_t)B * CH);
    /* features: the critic's share (its input gradient's first H columns;
     * nothing flows into the counts or the view), then the actor's */
    if (p->critic_own) {   /* the view's columns from the codes (critic_forward) */
        mr_fc_weight_grad(G + p->critic_w, p->dchid, p->cin, 1, B, D, CH, critic_dense(p));
        critic_view_grad(p, G + p->critic_w, p->dchid, B);
        mr_bias_backward(G + p->critic_b, p->dchid, (size_t)B, CH);
        mr_fc_input_grad(p->dfeat, p->dchid, P + p->critic_w, 1, B, D, CH, H);
    } else if (fc_wide(p)) {   /* dfeat written: only those columns are computed */
        mr_fc_backward(NULL, G + p->critic_w, G + p->critic_b, p->dchid, p->cin, P + p->critic_w, p->critic_own,
                       B, D, CH);
        mr_fc_input_grad(p->dfeat, p->dchid, P + p->critic_w, p->critic_own, B, D, CH, H);
    } else {
        memset(p->dcin, 0, sizeof(float) * (size_t)B * D);
        mr_linear_backward(p->dcin, G + p->critic_w, G + p->critic_b, p->dchid, p->cin,
                           P + p->critic_w, B, D, CH);
        #pragma omp parallel for schedule(static) if ((size_t)B * H >= MR_POLICY_PAR_MIN)
        for (int b = 0; b < B; b++)
            memcpy(p->dfeat + (size_t)b * H, p->dcin + (size_t)b * D, sizeof(float) * H);
    }
    mr_linear_backward(p->dfeat, G + p->actor_w, G + p->actor_b, dlogits, p->feat,
                       P + p->actor_w, B, H, p->num_actions);
    mr_relu_backward(p->dfeat, p->dfeat, p->feat, (size_t)B * H);
    if (p->dnnl && B >= p->chunk) {
        const float *w[MR_MAX_CONV];
        conv_weights(p, w);
        mr_conv_dnnl_load_backward(p->dnnl, w);
        if (p->recompute) mr_conv_dnnl_load_forward(p->dnnl, w);
    }
    if (any_wino(p)) {
        const float *w[MR_MAX_CONV];
        conv_weights(p, w);
        mr_conv_wino_load_backward(&p->wino, w);
        if (p->recompute) mr_conv_wino_load_forward(&p->wino, w);
    }
    if (p->lin) {
        /* bf16: rblock by rblock (kept or recomputed), so the bf16 copies of
         * fc's input and output gradient are one rblock each */
        load_w16(p);
        for (int r0 = 0; r0 < B; r0 += p->rblock) {
            int nr = B - r0 < p->rblock ? B - r0 : p->rblock;
            const int again = p->recompute && r0 >= p->kept;
            int a0 = again ? r0 - p->kept : 0;
            if (again) recompute_rblock(p, r0, nr);
            const float *x = p->act[L - 1] + (size_t)(r0 - a0) * p->flat;
            mr_bf16_from_f32(p->x16, x, (size_t)nr * p->flat);
            mr_bf16_from_f32(p->d16, p->dfeat + (size_t)r0 * H, (size_t)nr * H);
            if (mr_linear_bf16_dw(p->lin, G + p->fc_w, p->d16, p->x16, nr, p->flat, H))
                mr_linear_backward(NULL, G + p->fc_w, NULL, p->dfeat + (size_t)r0 * H, x, P + p->fc_w, nr,
                                   p->flat, H);
            mr_bias_backward(G + p->fc_b, p->dfeat + (size_t)r0 * H, (size_t)nr, H);
            trunk_backward(p, r0, nr, a0, r0);
        }
        return 0;
    }
    if (!p->recompute) {
        /* fc weights over the whole batch (K = B); its input gradient per
         * segment (trunk_backward) */
        if (fc_wide(p))
            mr_fc_backward(NULL, G + p->fc_w, G + p->fc_b, p->dfeat, p->act[L - 1], P + p->fc_w, p->fc_own, B,
                           p->flat, H);
        else
            mr_linear_backward(NULL, G + p->fc_w, G + p->fc_b, p->dfeat, p->act[L - 1], P + p->fc_w, B, p->flat, H);
        trunk_backward(p, 0, B, 0, 0);
        return 0;
    }
    /* recompute: the trunk again, one rblock at a time (the forward's chunk
     * calls, so the forward's bits), past the kept rblocks, which are read;
     * fc's weight gradient rblock by rblock either way */
    for (int r0 = 0; r0 < B; r0 += p->rblock) {
        int nr = B - r0 < p->rblock ? B - r0 : p->rblock;
        const int again = r0 >= p->kept, a0 = again ? r0 - p->kept : 0;
        if (again) recompute_rblock(p, r0, nr);
        const float *x = p->act[L - 1] + (size_t)(r0 - a0) * p->flat;
        if (fc_wide(p))
            mr_fc_backward(NULL, G + p->fc_w, G + p->fc_b, p->dfeat + (size_t)r0 * H, x, P + p->fc_w, p->fc_own,
                           nr, p->flat, H);
        else
            mr_linear_backward(NULL, G + p->fc_w, G + p->fc_b, p->dfeat + (size_t)r0 * H, x, P + p->fc_w, nr,
                               p->flat, H);
        trunk_backward(p, r0, nr, a0, r0);
    }
    return 0;
}

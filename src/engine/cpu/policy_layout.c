/*
 * policy_layout.c - the CPU network's memory: every size computed from the
 * config and the options (mr_policy_layout_with: the batch and conv chunk
 * sizes, what the training forward keeps, which layers run where), every
 * buffer taken from the arena, and the oneDNN and Winograd shares. policy.c
 * holds the forward and backward that use them, policy_params.c the
 * parameters' initial values.
 */
#include "policy.h"
#include "gemm.h"
#include "conv_dnnl.h"
#include "linear_dnnl.h"
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int imax(int a, int b) { return a > b ? a : b; }

/* ------------------------------------------------------------ layout */

void mr_policy_layout_with(mr_policy *p, const mr_policy_config *cfg, int view, int max_batch,
                           const mr_policy_options *o, mr_arena *a) {
    if (cfg->obs_vector > 0) {   /* a vector observation: the MLP trunk (policy_mlp.c) */
        mr_policy_mlp_layout(p, cfg, max_batch, a);
        return;
    }
    const int chunk = o->chunk, conv = o->conv;
    memset(p, 0, sizeof *p);
    mr_net_layout_init(&p->net, cfg, view);
    const int L = p->num_conv;
    p->max_batch = max_batch > 0 ? max_batch : 0;
    p->chunk = chunk > 0 ? chunk : 1;

    p->params = MR_TAKE(a, float, p->n_params);
    p->grads = MR_TAKE(a, float, p->n_params);

    /* training activations */
    size_t MB = (size_t)p->max_batch;
    p->codes = MR_TAKE(a, uint8_t, MB * (size_t)p->obs_row);   /* the batch's observations, as act got them */
    p->nthreads = imax(1, omp_get_max_threads());
    /* the convs' implementation, whole-net then per layer (the arena's
     * oneDNN and Winograd shares are taken below) */
    p->conv = conv == MR_CPU_CONV_IM2COL || conv == MR_CPU_CONV_WINOGRAD ? conv : MR_CPU_CONV_ONEDNN;
    int wino_use[MR_MAX_CONV] = {0}, n_wino = 0, n_dnnl = 0;
    for (int l = 1; l < L; l++) {
        int c = p->conv, own = o->layers[l];
        if (c != MR_CPU_CONV_IM2COL && (own == MR_CPU_CONV_ONEDNN || own == MR_CPU_CONV_WINOGRAD)) c = own;
        p->lconv[l] = (int8_t)c;
        wino_use[l] = c == MR_CPU_CONV_WINOGRAD;
        n_wino += c == MR_CPU_CONV_WINOGRAD;
        n_dnnl += c == MR_CPU_CONV_ONEDNN;
    }
    {   /* the block (below), fc's segment and the rblock, multiples of it */
        size_t blk = (size_t)imax(MR_POLICY_BLOCK, p->chunk * p->nthreads);
        size_t B1 = (size_t)((blk + (size_t)p->chunk - 1) / (size_t)p->chunk * (size_t)p->chunk);
        p->block = (int)B1;
        size_t mb_blocks = (MB + B1 - 1) / B1 * B1;
        /* fc's segment: im2col keeps the engine's old calls (one block), and
         * so does bf16 where asked (linear_dnnl.c's products); else
         * MR_POLICY_FC_ROWS, no more than the batch needs */
        size_t S = B1;
        if (p->conv != MR_CPU_CONV_IM2COL && !(o->bf16 && n_dnnl > 0)) {
            S = ((size_t)MR_POLICY_FC_ROWS + B1 - 1) / B1 * B1;
            if (S > mb_blocks) S = mb_blocks > B1 ? mb_blocks : B1;
        }
        p->fc_rows = (int)S;
        size_t rb = ((size_t)MR_POLICY_RBLOCK + S - 1) / S * S;
        p->rblock = (int)(rb < mb_blocks ? rb : mb_blocks);
    }
    size_t per_sample = 0;   /* the conv activations of one sample */
    for (int l = 0; l < L; l++) per_sample += mr_policy_round_f((size_t)p->VV * p->ch[l + 1]) * sizeof(float);
    const size_t allow = o->keep_bytes ? o->keep_bytes : MR_POLICY_KEEP_MAX;
    p->recompute = o->activations == MR_CPU_ACTIVATIONS_RECOMPUTE ||
                   (o->activations == MR_CPU_ACTIVATIONS_AUTO &&
                    MB > (size_t)p->rblock && (MB - (size_t)p->rblock) * per_sample > allow);
    /* auto's recompute keeps what the allowance holds, whole rblocks (fewer than the batch's) */
    if (p->recompute && o->activations == MR_CPU_ACTIVATIONS_AUTO && per_sample > 0)
        p->kept = (int)(allow / per_sample / (size_t)p->rblock * (size_t)p->rblock);
    size_t AB = p->recompute ? (size_t)p->kept + (size_t)p->rblock : MB;
    for (int l = 0; l < L; l++) p->act[l] = MR_TAKE(a, float, AB * p->VV * p->ch[l + 1]);
    p->feat = MR_TAKE(a, float, MB * p->hidden);
    p->cin = MR_TAKE(a, float, MB * p->cin_dim);
    p->chid = MR_TAKE(a, float, MB * p->critic_hidden);
    p->dfeat = MR_TAKE(a, float, MB * p->hidden);
    /* the critic's whole input gradient: only the old calls (im2col, bf16)
     * make it; the others take its first hidden columns straight into dfeat */
    if (conv == MR_CPU_CONV_IM2COL || o->bf16) p->dcin = MR_TAKE(a, float, MB * p->cin_dim);
    p->dchid = MR_TAKE(a, float, MB * p->critic_hidden);

    /* workspace: per-thread chunk-sized conv buffers, the per-chunk conv
     * gradients, then act's buffers (aL and feat: one fc segment, cin and
     * chid: one block); init reuses the whole region for
     * the QR scratch of every weight at once */
    size_t C = (size_t)p->chunk;
    size_t K = (size_t)p->block;
    int cmax = 2, cin_max = 2;   /* ch[0], the observation's channels, is among the inputs */
    for (int l = 0; l < L; l++) {
        cmax = imax(cmax, p->ch[l + 1]);
        cin_max = imax(cin_max, p->ch[l]);
    }
    size_t o_a = mr_policy_round_f(C * p->VV * p->ch[0]);
    size_t o_b = o_a + mr_policy_round_f(C * p->VV * cmax);
    size_t o_col = o_b + mr_policy_round_f(C * p->VV * cmax);
    /* col doubles as the first layer's table ((9 ch[0] + 1) OC floats) and
     * gradient sums ((9 ch[0] + 1) OC doubles and OC floats) when it is
     * computed from the codes (40 OC floats for foraging's 2 channels) */
    size_t col = C * p->VV * 9 * (size_t)cin_max;
    const size_t codes_ws = (18 * (size_t)p->ch[0] + 4) * (size_t)p->ch[1];
    if (col < codes_ws) col = codes_ws;
    p->thread_floats = o_col + mr_policy_round_f(col);
    p->conv_floats = p->fc_w;
    size_t o_part = p->thread_floats * (size_t)p->nthreads;
    size_t o_aL = o_part + mr_policy_round_f(p->conv_floats) * (K / C);
    size_t S = (size_t)p->fc_rows;   /* act's fc input and output: one segment */
    size_t o_feat = o_aL + mr_policy_round_f(S * p->flat);
    size_t o_cin = o_feat + mr_policy_round_f(S * p->hidden);
    size_t o_chid = o_cin + mr_policy_round_f(K * p->cin_dim);
    size_t need = o_chid + mr_policy_round_f(K * p->critic_hidden);
    const size_t qr = mr_policy_init_floats(p);
    p->work_floats = need > qr ? need : qr;
    p->work = MR_TAKE(a, float, p->work_floats);
    if (p->work) {   /* committed arena: carve; planning: leave NULL */
        p->x = p->work;
        p->bufA = p->work + o_a;
        p->bufB = p->work + o_b;
        p->col = p->work + o_col;
        p->conv_part = p->work + o_part;
        p->b_aL = p->work + o_aL;
        p->b_feat = p->work + o_feat;
        p->b_cin = p->work + o_cin;
        p->b_chid = p->work + o_chid;
    }
    /* the convs' arena shares: oneDNN's comes last, so everything above
     * keeps its place whichever is chosen */
    if (n_wino) {
        mr_conv_wino_layout_layers(&p->wino, p->ch, L, view, view, p->nthreads, mr_wino_tile_for(view, view),
                                   wino_use, a);
        if (o->bf16) snprintf(p->conv_note, sizeof p->conv_note, "Winograd runs in fp32 only");
    }
    /* oneDNN took the convs in bf16: from the layout's answer, so the same on
     * a planning arena (where p->dnnl stays NULL) as on the committed one */
    int bf16_taken = n_dnnl > 0 && o->bf16;
    if (n_dnnl > 0 &&
        mr_conv_dnnl_layout(&p->dnnl, p->ch, L, view, view, p->chunk, p->nthreads, o->bf16, a, p->conv_note,
                            sizeof p->conv_note) != 0) {
        bf16_taken = 0;
        p->dnnl = NULL;   /* layers 1.. run through im2col; conv_note says why */
        /* bf16 refused (no bf16 kernels for this CPU or shape): oneDNN in
         * fp32 is still faster than im2col. A refusal by the descriptors
         * takes nothing from the arena, so planning and commit stay alike. */
        char why[sizeof p->conv_note];
        if (o->bf16 && mr_conv_dnnl_layout(&p->dnnl, p->ch, L, view, view, p->chunk, p->nthreads, 0, a, why,
                                           sizeof why) == 0) {
            char was[sizeof p->conv_note];
            memcpy(was, p->conv_note, sizeof was);
            snprintf(p->conv_note, sizeof p->conv_note, "bf16 refused: %.*s", (int)sizeof p->conv_note - 20, was);
        } else if (o->bf16) {
            p->dnnl = NULL;
        }
    }
    p->bf16 = mr_conv_dnnl_is_bf16(p->dnnl);
    /* bf16: fc's products too (linear_dnnl.h), on bf16 copies from the arena */
    if (bf16_taken) {
        size_t rows = (size_t)imax(p->block, p->rblock);
        p->w16 = MR_TAKE(a, uint16_t, (size_t)p->hidden * p->flat);
        p->x16 = MR_TAKE(a, uint16_t, rows * p->flat);
        p->d16 = MR_TAKE(a, uint16_t, (size_t)p->rblock * p->hidden);
        if (p->w16 && p->x16 && p->d16) p->lin = mr_linear_dnnl_create(p->nthreads);
    }
    /* fp32 fc and critic on gemm.c's kernels (policy.h: fc_own) */
    if (p->conv != MR_CPU_CONV_IM2COL && !bf16_taken) {
        p->fc_own = mr_gemm_wide(p->hidden);
        p->critic_own = !p->obs_float && mr_gemm_wide(p->critic_hidden);   /* its view's terms from the codes */
        if (p->fc_own) {
            p->fc_xrows = p->fc_rows < p->hidden ? p->fc_rows : p->hidden;
            p->fc_wt = MR_TAKE(a, float, (size_t)p->hidden * p->flat);
            p->fc_xt = MR_TAKE(a, float, (size_t)p->flat * p->fc_xrows);
            p->fc_ct = MR_TAKE(a, float, (size_t)p->hidden * p->fc_xrows);
        }
        if (p->critic_own) {
            p->critic_wt = MR_TAKE(a, float, (size_t)p->critic_hidden * p->cin_dim);
            p->critic_vt = MR_TAKE(a, float, (size_t)p->critic_hidden * p->ch[0] * p->VV);
        }
    }
}

void mr_policy_layout(mr_policy *p, const mr_policy_config *cfg, int view,
                      int max_batch, int chunk, int conv, mr_arena *a) {
    const mr_policy_options o = {chunk, conv, MR_CPU_ACTIVATIONS_STORE, 0, {0}, 0};
    mr_policy_layout_with(p, cfg, view, max_batch, &o, a);
}

size_t mr_policy_bytes_with(const mr_policy_config *cfg, int view, int max_batch, const mr_policy_options *o) {
    mr_arena a = {0};
    mr_policy p;
    mr_policy_layout_with(&p, cfg, view, max_batch, o, &a);
    return a.size;
}

size_t mr_policy_bytes(const mr_policy_config *cfg, int view, int max_batch, int chunk, int conv) {
    const mr_policy_options o = {chunk, conv, MR_CPU_ACTIVATIONS_STORE, 0, {0}, 0};
    return mr_policy_bytes_with(cfg, view, max_batch, &o);
}

void mr_policy_free(mr_policy *p) {
    mr_conv_dnnl_free(p->dnnl);
    p->dnnl = NULL;
    mr_linear_dnnl_free(p->lin);
    p->lin = NULL;
}

const mr_tensor_info *mr_policy_tensor(const mr_policy *p, const char *name) { return mr_net_tensor(&p->net, name); }


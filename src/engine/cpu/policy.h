/*
 * policy.h - the CNN actor-critic of ENV_SPEC.md "Policy" on the CPU:
 * forward for acting, forward + backward for training, orthogonal init.
 *
 * Network (widths from mr_policy_config; defaults in brackets):
 *   x      = expand(codes)                 (B,V,V,C0) NHWC, see nn.h; C0 = the
 *                                                     environment's channels [2]
 *   a_l    = relu(conv3x3_l(a_{l-1}))      (B,V,V,C_l)  C = {32,64,64}
 *   feat   = relu(fc(flatten(a_L)))        (B,hidden)   [512], flatten = H,W,C
 *   logits = actor(feat)                   (B,8)
 *   cin    = feat ++ extra ++ gt(codes)    (B,hidden+2+C0 V^2) [756]
 *   ch     = relu(critic(cin))             (B,critic_hidden) [512]
 *   value  = vhead(ch)                     (B) raw (PopArt is applied outside)
 *
 * Layout differences from the PyTorch original, each a fixed permutation of
 * a weight's input columns (the same function class, the same init law):
 *   - flatten is (H,W,C) order, not torch's (C,H,W): fc.w column
 *     (y*V + x)*C_L + c here is torch's column c*V*V + y*V + x;
 *   - conv weights are (OC,3,3,C), torch's are (OC,C,3,3);
 *   - the critic's ground-truth view is (V,V,C0): cin column hidden+2 +
 *     (y*V + x)*C0 + ch here is torch's hidden+2 + ch*V*V + y*V + x.
 * mr_policy_permute_torch() converts a torch-ordered parameter array.
 *
 * Memory: everything comes from the arena in mr_policy_layout (run twice by
 * the trainer: plan, then commit). Parameters and gradients are each ONE
 * contiguous float array with the same layout; the policy group (trunk +
 * actor) is the prefix [0, n_policy), the value group (critic) the suffix
 * [n_policy, n_params). mr_policy_forward keeps the activations of up to
 * max_batch samples for mr_policy_backward.
 *
 * Two batch granularities: the convolutions run in chunks of `chunk` samples
 * (through oneDNN or nn.c's im2col: `conv` below) in one workspace per
 * thread (chunk-sized, so it stays near the cache); the linear layers run in blocks of `block` samples (block = the smallest
 * multiple of chunk >= MR_POLICY_BLOCK), large enough that an sgemm over the
 * 7744 x 512 fc weight is efficient, fc itself in segments of fc_rows
 * samples (a multiple of block: MR_POLICY_FC_ROWS, or one block with
 * cpu.conv = im2col). For the same batch mr_policy_act and
 * mr_policy_forward make exactly the same sgemm calls on the same data, so
 * their outputs are bit-identical; act keeps nothing beyond one fc segment.
 * A sample's last bits can depend on where it sits in a batch (OpenBLAS
 * computes the edge tiles of a product with other kernels), so the rollout's
 * act on N envs and a forward over a shuffled minibatch agree to a few ulps
 * (4e-7 relative measured on the reference net), not bit for bit.
 * mr_policy_backward works on the whole batch for the linear layers (their
 * weight gradients are one sgemm with K = B) and chunk by chunk for the convs.
 *
 * Determinism: every output and gradient is bit-identical for any thread
 * count (see nn.c). A different `chunk` changes the sgemm shapes and so the
 * last bits (forward within ~1e-6 relative, not bit-identical).
 */
#ifndef MR_POLICY_H
#define MR_POLICY_H
#include <stddef.h>
#include <stdint.h>
#include "moonrl.h"
#include "arena.h"
#include "net_layout.h"   /* mr_net_layout, mr_tensor_info, MR_POLICY_EXTRA */
#include "conv_winograd.h"

#define MR_POLICY_BLOCK 256          /* samples per linear-layer block, at least */
#define MR_POLICY_FC_ROWS 512        /* fp32 but im2col: samples per fc segment, at most (see fc_rows) */

typedef struct mr_policy {
    /* shapes and parameter layout (shared/net_layout.h): p->hidden and
     * p->net.hidden are the same field */
    union {
        mr_net_layout net;
        struct { MR_NET_LAYOUT_FIELDS };
    };
    int max_batch, chunk, block;
    /* fc's segment: the rows of one group of fc products (forward and input
     * gradient), a multiple of block. With cpu.conv = im2col, and in bf16
     * where asked, one block (the old calls); else MR_POLICY_FC_ROWS
     * rounded up to whole blocks, or the batch's blocks when fewer. act and
     * the training forward both cut fc's rows at its multiples, so they
     * make the same calls. */
    int fc_rows;
    /* 1: the training forward keeps no conv activation; the backward
     * recomputes the trunk one rblock at a time (see mr_policy_options) */
    int recompute, rblock;
    int kept;                  /* recompute: samples [0, kept) of a batch (whole rblocks) keep their
                                * activations, act[l]'s first rows; the recomputed rblock follows them */

    float *params, *grads;                              /* n_params each */

    /* training activations, max_batch samples, kept from forward to backward */
    int fwd_B;                 /* batch of the last mr_policy_forward, 0 = none */
    int fwd_proxy;
    int keep_rows, keep_proxy; /* rows mr_policy_act_keep kept since the last forward, and their proxy */
    uint8_t *codes;            /* (max_batch, VV) copy of the input */
    float *act[MR_MAX_CONV];   /* (max_batch, VV, ch[l+1]) post-ReLU; with recompute,
                                * (rblock, VV, ch[l+1]): the backward's recomputed rblock */
    float *feat;               /* (max_batch, hidden) post-ReLU */
    float *cin;                /* (max_batch, cin_dim) critic input */
    float *chid;               /* (max_batch, critic_hidden) post-ReLU */
    /* whole-batch gradient scratch for the linear layers */
    float *dfeat, *dcin, *dchid;

    /* workspace: one region, carved as below, and reused by init as QR scratch */
    float *work;
    size_t work_floats;
    /* the conv trunk runs chunk by chunk, one chunk per OpenMP task; each of
     * the nthreads threads has its own chunk workspace, thread t's at
     * x + t * thread_floats (x, bufA, bufB and col are thread 0's) */
    int nthreads;              /* omp_get_max_threads() at layout: the trunk uses at most this many */
    size_t thread_floats;
    float *x;                  /* (chunk, VV, 2) */
    float *bufA, *bufB;        /* (chunk, VV, max ch): conv ping-pong, act and backward */
    float *col;                /* (chunk*VV, 9 * max input ch) im2col */
    /* (block/chunk) partial gradients of the conv tensors, one per chunk of a
     * block, summed into grads in chunk order (thread-count independent) */
    float *conv_part;
    size_t conv_floats;        /* = fc_w: the conv tensors are the first in the array */
    float *b_aL, *b_feat, *b_cin, *b_chid;   /* act's aL and feat (one fc segment), cin and chid
                                             * (one block); backward: b_aL holds fc's input
                                             * gradient for one segment */

    /* how the convs run (cpu.conv, moonrl.h): MR_CPU_CONV_IM2COL = nn.c's
     * im2col + sgemm for every layer; MR_CPU_CONV_ONEDNN = layer 0 from the
     * codes (nn.c) and layers 1.. through oneDNN for whole chunks (a
     * shorter tail chunk through im2col + sgemm); MR_CPU_CONV_WINOGRAD =
     * layer 0 from the codes and layers 1.. by Winograd F(4x4) or F(6x6) (wino,
     * any chunk size, fp32). auto is resolved at layout. lconv[l] (l >=
     * 1) is what layer l runs: conv, or mr_policy_options.layers[l] where
     * that names onednn or winograd (not with im2col); a trunk may mix
     * them, each layer keeping its own implementation's guarantees. */
    int conv;
    int8_t lconv[MR_MAX_CONV];
    mr_conv_wino wino;           /* winograd: layers 1..'s transformed weights and workspaces */
    struct mr_conv_dnnl *dnnl;   /* NULL: no oneDNN layers (im2col, one conv layer, or oneDNN refused) */
    int bf16;                    /* 1: dnnl's layers run in bf16 (mr_policy_options.bf16 and oneDNN took it) */
    /* bf16: fc's three products through oneDNN matmul (linear_dnnl.h) on
     * these bf16 copies; NULL lin: fc in fp32 (OpenBLAS). The copies are
     * made where used: w16 at the start of every act / forward / backward,
     * x16 per block (forward) or rblock (backward), d16 per rblock. */
    struct mr_linear_dnnl *lin;
    uint16_t *w16;               /* (hidden, flat): fc.w */
    uint16_t *x16;               /* (max(block, rblock), flat): fc's input */
    uint16_t *d16;               /* (rblock, hidden): fc's output gradient */
    /* fp32 fc and the critic's hidden layer on AVX-512 (nn.h's mr_fc_*,
     * gemm.c's kernels; fc_own / critic_own 0 where they run on OpenBLAS:
     * im2col, bf16's matmul, no AVX-512, a width not a multiple of 16).
     * The forward needs one operand transposed. fc: a call on fewer rows
     * than fc has outputs (act's) transposes its inputs into fc_xt (and
     * its products go through fc_ct); a larger one (training's segments)
     * transposes fc.w into fc_wt, once per act / forward (fc_wt_fresh).
     * Both give the same bits. The critic (its weights 1.5 MiB at most in
     * the reference net) transposes critic.w at every act / forward.
     * critic_own: the critic's input is dense only in its first hidden + 2
     * columns (feat, extra); its ground-truth view holds one 1 per FOOD or
     * POISON cell (0.8-3% of cells, ENV_SPEC), so the critic's forward and
     * its weight gradient take the view's columns from the codes, cell by
     * cell, not through the products (critic_vt: that gradient's rows). */
    int fc_own, critic_own;
    int fc_xrows;                /* rows fc_xt holds: min(fc_rows, hidden) */
    int fc_wt_fresh;             /* fc_wt holds this pass's fc.w */
    int keep_loaded;             /* act_keep's batch has its weights (policy.c: keep_weights) */
    float *fc_wt;                /* (flat, hidden) */
    float *fc_xt;                /* (flat, fc_xrows) */
    float *fc_ct;                /* (hidden, fc_xrows) */
    float *critic_wt;            /* (cin_dim, critic_hidden) */
    float *critic_vt;            /* (2 VV, critic_hidden): the view columns' weight gradient, transposed */
    char conv_note[160];         /* why oneDNN (or its bf16) is not used when asked for, else "" */
    /* the MLP trunk (trunk = MR_TRUNK_MLP, policy_mlp.c): the training
     * forward's input and each layer's tanh output (max_batch rows), the
     * backward's ping-pong gradients; act runs a block at a time in work */
    float *mlp_obs;              /* (max_batch, obs_dim) */
    float *mlp_act[MR_MAX_MLP];  /* (max_batch, mlp[l+1]) */
    float *mlp_d0, *mlp_d1;      /* (max_batch, widest layer) */
} mr_policy;

/* What the training forward keeps for the backward (mr_policy_options.
 * activations, an mr_cpu_activations, moonrl.h):
 *   MR_CPU_ACTIVATIONS_STORE: every conv layer's output for the whole batch
 *     (4 * max_batch * V^2 * sum(channels) bytes: 1.9 GB for ENV_SPEC's
 *     network and batch); the backward reads them.
 *   MR_CPU_ACTIVATIONS_RECOMPUTE: only the linear layers' activations and the
 *     codes; the backward recomputes the trunk MR_POLICY_RBLOCK samples at a
 *     time (the same chunk calls as the forward, so the same bits) and
 *     accumulates fc's weight gradient rblock by rblock. Costs one more trunk
 *     forward per backward. Every conv gradient is bit-identical to
 *     STORE's; fc.w's (its sum split by rblock) and what depends on it agree
 *     to float rounding.
 *   MR_CPU_ACTIVATIONS_AUTO: store while keeping takes at most
 *     MR_POLICY_KEEP_MAX bytes more than recomputing would (ENV_SPEC's small
 *     net at 64 x 64: 95 MiB, kept), else recompute, keeping the activations
 *     of as many whole rblocks at the batch's start as that allowance holds
 *     (mr_policy.kept): those are read, only the rest recomputed (ENV_SPEC's
 *     network at 192 x 128: 2.2 GiB to keep it all; 3,072 of 24,576 samples
 *     kept in 0.23 GiB). The bits are recompute's either way. An allowance
 *     of 768 MiB (10,240 kept) was measured: 1.24x -> 1.29x of PyTorch
 *     there, but moonrl's peak memory 728 -> 1,484 MiB, over a quarter of
 *     torch.compile's 4,351; the allowance stays 256 MiB. */
#define MR_POLICY_RBLOCK 1024                    /* samples per recomputed block, at least */
#define MR_POLICY_KEEP_MAX ((size_t)256 << 20)   /* auto: the most keeping may take beyond recomputing */

typedef struct mr_policy_options {
    int chunk;         /* samples per conv chunk; < 1 reads as 1 */
    int conv;          /* an mr_cpu_conv (auto = onednn) */
    int activations;   /* an mr_cpu_activations */
    int bf16;          /* 1: the oneDNN layers in bf16 (conv_dnnl.h); the rest stays fp32 */
    int8_t layers[MR_MAX_CONV];   /* layer l >= 1's own mr_cpu_conv (onednn or winograd), 0 = conv's
                                   * (mr_cpu_config.conv_layers); ignored with conv = im2col */
    size_t keep_bytes; /* auto's allowance for keeping activations; 0 = MR_POLICY_KEEP_MAX (tests set less) */
} mr_policy_options;

/* n floats rounded up to whole 64-byte lines: the workspace's pieces (the
 * layout carves them, the backward steps through the per-chunk gradients). */
static inline size_t mr_policy_round_f(size_t n) { return (n + 15) / 16 * 16; }

/* Computes every size from cfg and takes params, grads, activations (for
 * max_batch samples) and workspaces (`chunk` samples for the convs, one block
 * for act's linear layers) from the arena. On a planning arena the pointers
 * are NULL and only sizes add up; nothing is dereferenced. cfg must have
 * passed mr_config_validate; view >= 1. On a committed arena with oneDNN
 * layers it creates their primitives (release them with mr_policy_free).
 * mr_policy_layout is mr_policy_layout_with for {chunk, conv,
 * MR_CPU_ACTIVATIONS_STORE, fp32}. */
void mr_policy_layout_with(mr_policy *p, const mr_policy_config *cfg, int view, int max_batch,
                           const mr_policy_options *o, mr_arena *a);
void mr_policy_layout(mr_policy *p, const mr_policy_config *cfg, int view,
                      int max_batch, int chunk, int conv, mr_arena *a);

/* Bytes mr_policy_layout(_with) takes (arena rounding included). */
size_t mr_policy_bytes_with(const mr_policy_config *cfg, int view, int max_batch, const mr_policy_options *o);
size_t mr_policy_bytes(const mr_policy_config *cfg, int view, int max_batch, int chunk, int conv);

/* Releases what layout created outside the arena (the oneDNN primitives);
 * the arena is the caller's. Safe on a planned or already freed policy. */
void mr_policy_free(mr_policy *p);

/* Orthogonal init (torch.nn.init.orthogonal_ on each weight flattened to
 * (OC, fan_in)), gain sqrt(2) except actor.w 0.01 and value.w 1.0; zero
 * biases. Bit-identical for a seed on any thread count: element e of tensor
 * t's Gaussian matrix is Box-Muller of mr_rng_u64(seed, t, e >> 31,
 * MR_RNG_INIT, 2*(e mod 2^31) + {0,1}) (rng.h), and each QR (LAPACK
 * sgeqrf/sorgqr in float) runs single-threaded, tensors in parallel. Uses the
 * workspace as QR scratch (the workspace is sized for it); grads untouched. */
void mr_policy_init(mr_policy *p, uint64_t seed);
/* The workspace floats mr_policy_init needs (every weight's QR at once),
 * from the tensors' shapes: the layout takes at least this (policy_params.c). */
size_t mr_policy_init_floats(const mr_policy *p);

void mr_policy_zero_grad(mr_policy *p);

/* Inference for the rollout: codes (B,VV), extra (B,2) ->
 * logits (B,8), value (B) raw. Any B >= 0; runs in chunks, keeps nothing. */
void mr_policy_act(mr_policy *p, const uint8_t *codes, const float *extra, int B,
                   int proxy, float *logits, float *value);

/* Training forward for B <= max_batch: the same outputs as mr_policy_act,
 * keeping what mr_policy_backward needs. Returns 0, or -1 when B is out of
 * range (nothing done). */
int mr_policy_forward(mr_policy *p, const uint8_t *codes, const float *extra, int B,
                      int proxy, float *logits, float *value);

/* The rollout's inference that also serves the update's first forward.
 * With one minibatch (the whole batch) the first epoch's forward runs the
 * rollout's parameters on the rollout's samples: what act computed. So act
 * for the B samples that will be rows [row0, row0 + B) of the next
 * training batch (row0 + B <= max_batch): mr_policy_act's outputs, and it
 * keeps at those rows what mr_policy_backward reads (the codes, feat, cin,
 * chid, and the conv activations where the training forward would keep
 * them: all rows, or with recompute the kept rows [0, kept)). Returns 0, or
 * -1 when the rows are out of range (nothing done). */
int mr_policy_act_keep(mr_policy *p, const uint8_t *codes, const float *extra, int B, int proxy, float *logits,
                       float *value, int row0);

/* Stands for mr_policy_forward over rows [0, B) kept by mr_policy_act_keep
 * (which must have covered them, with this proxy, since the last forward):
 * the value head again (value (B) raw, from the kept chid: PopArt may have
 * rescaled the head since the rollout), and the rows become the forward
 * mr_policy_backward reads. The logits are act's. Returns 0, or -1 when the
 * kept rows do not cover [0, B) or were kept with another proxy. */
int mr_policy_forward_kept(mr_policy *p, int B, int proxy, float *value);

/* dlogits (B,8), dvalue (B): gradients of the loss w.r.t. the outputs of the
 * last mr_policy_forward (same B). ACCUMULATES into p->grads (zero them with
 * mr_policy_zero_grad). Returns 0, or -1 when B does not match the forward. */
int mr_policy_backward(mr_policy *p, const float *dlogits, const float *dvalue, int B);

/* The MLP trunk's network (policy_mlp.c; policy.c's entry points call these
 * when p->trunk is MR_TRUNK_MLP): obs are floats (B, obs_dim), extra rows
 * MR_POLICY_EXTRA floats wide (the critic reads the first extra_dim). */
void mr_policy_mlp_layout(mr_policy *p, const mr_policy_config *cfg, int max_batch, mr_arena *a);
void mr_policy_mlp_act(mr_policy *p, const float *obs, const float *extra, int B, float *logits, float *value);
int mr_policy_mlp_forward(mr_policy *p, const float *obs, const float *extra, int B, float *logits, float *value);
int mr_policy_mlp_backward(mr_policy *p, const float *dlogits, const float *dvalue, int B);

/* The parameter table entry called `name`, or NULL. */
const mr_tensor_info *mr_policy_tensor(const mr_policy *p, const char *name);

/* Converts a parameter array in the torch original's column orders (see the
 * top of this file) to ours: dst[ours] = src[torch]. dst != src, n_params each. */
void mr_policy_permute_torch(const mr_policy *p, const float *src, float *dst);

#endif

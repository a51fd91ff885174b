/*
 * conv_dnnl.h - the trunk's 3x3 convolutions (layers 1 .. L-1) through
 * oneDNN (libdnnl, C API), the CPU network's faster alternative to nn.c's
 * im2col + sgemm (BENCHMARKS.md: 1.3-1.8x per layer, one chunk per core).
 *
 * Shapes, for one chunk of n = chunk samples on H x W maps (NHWC, fp32):
 *   inp (n,H,W,C), out (n,H,W,OC), w (OC,3,3,C) = our flat layout (oneDNN's
 *   "ohwi"), b (OC). Forward: out = relu(conv3x3_pad1(inp) + b) (bias and
 *   ReLU fused, a post-op). Backward: dinp (n,H,W,C) = conv^T(dout) (WRITTEN),
 *   dw (OC,3,3,C) and db (OC) WRITTEN (not accumulated: the caller's per-chunk
 *   partials are fresh). dout is the gradient after the ReLU's backward.
 *
 * How it keeps policy.c's guarantees:
 *   - Bits independent of the thread count: every primitive is created and
 *     executed with one OpenMP thread (Debian's libdnnl runs on libgomp, the
 *     runtime we use; inside our parallel loop over chunks oneDNN's own
 *     parallel sections run on the calling thread, and outside one the call
 *     is made with the thread count set to 1 for its duration), one chunk per
 *     call, so a chunk's result never depends on how many threads run.
 *   - Threads share one primitive per layer and pass: with the scratchpad in
 *     user mode (each workspace its own) oneDNN allows one primitive to run
 *     on several threads at once; streams and memory objects are per thread.
 *   - No allocation in the steady state: primitives, streams and memory
 *     objects are created at layout for the chunk shape only; weights in
 *     oneDNN's blocked formats, the weight-gradient buffer and the
 *     scratchpad (user mode) come from the arena. A shorter tail chunk (its
 *     size changes with every batch size) is not computed here: policy.c
 *     runs it through nn.c. oneDNN's execute itself still makes small heap
 *     allocations of its own (an argument map per call), which no counter of
 *     ours sees.
 *   - Weights are reordered from our layout once per pass (mr_conv_dnnl_
 *     load_forward / load_backward), not per chunk; the optimizer and the
 *     checkpoints only ever see the flat layout. oneDNN computes the weight
 *     gradient in its own format; it is reordered (a permutation, exact) into
 *     the caller's flat buffer per chunk.
 *
 * bf16 (the `bf16` flag of the layout, on CPUs with AVX512-BF16 or AMX):
 *   the primitives take src, weights and dout in bf16 and write out, dinp,
 *   dw and db in fp32 (fp32 accumulation inside oneDNN; the bias stays
 *   fp32). The interface stays fp32: each chunk's inp and dout are
 *   converted (round to nearest even) into per-workspace bf16 buffers, the
 *   weights during the per-pass reorders; the fp32 master weights stay the
 *   caller's. Still one chunk per call, one thread: bits are independent of
 *   the thread count in bf16 as in fp32.
 *
 * What it is not: layer 0 (C input channels from codes; nn.c computes it
 * directly), the tail chunk, or anything for the CUDA backend (cuDNN there).
 */
#ifndef MR_CONV_DNNL_H
#define MR_CONV_DNNL_H
#include <stddef.h>
#include "arena.h"
#include "bf16.h"   /* mr_bf16_isa */

typedef struct mr_conv_dnnl mr_conv_dnnl;   /* opaque: oneDNN handles live on the heap */

/* Lays out the oneDNN convolutions for layers 1 .. L-1 of a trunk with
 * channels ch[0..L] (ch[0] = the observation's C), H x W maps, `chunk` samples per call and
 * nthreads threads (one workspace each). Planning arena: creates the
 * primitive descriptors only to size the arena's share, *out = NULL.
 * Committed arena: creates everything, *out = the object (free with
 * mr_conv_dnnl_free). Returns 0, or -1 when oneDNN refuses or offers only
 * its reference kernels (message in why); *out is then NULL. A refusal
 * found by the descriptors takes nothing (planning and commit refuse alike);
 * a failure creating the objects at commit leaves the planned share taken
 * and unused, so the caller's later takes keep their planned places.
 * L < 2 takes nothing and returns 0. */
int mr_conv_dnnl_layout(mr_conv_dnnl **out, const int *ch, int L, int H, int W, int chunk, int nthreads, int bf16,
                        mr_arena *a, char *why, size_t why_len);
void mr_conv_dnnl_free(mr_conv_dnnl *d);

/* Weights of every layer l >= 1 (w_of[l] = (OC,3,3,C), flat) into the
 * forward (backward-data) primitives' format. Before a pass: once per
 * mr_policy_act / forward (backward) call. Not inside a parallel region. */
void mr_conv_dnnl_load_forward(mr_conv_dnnl *d, const float *const *w_of);
void mr_conv_dnnl_load_backward(mr_conv_dnnl *d, const float *const *w_of);

/* One chunk of layer l >= 1 on workspace t (0 <= t < nthreads; one thread
 * per workspace at a time). Forward: out = relu(conv(inp) + b). */
void mr_conv_dnnl_forward(mr_conv_dnnl *d, int t, int l, float *out, const float *inp, const float *b);
/* Backward: dw, db written (either may be NULL to skip both: they come from
 * one primitive, so both or neither), dinp written (NULL: skipped). */
void mr_conv_dnnl_backward(mr_conv_dnnl *d, int t, int l, float *dinp, float *dw, float *db,
                           const float *dout, const float *inp);

/* 1 when d's layers run in bf16. */
int mr_conv_dnnl_is_bf16(const mr_conv_dnnl *d);

/* "brgconv:avx512_core / jit:avx512_core / jit:avx512_core": the
 * implementations oneDNN chose for layer l (forward / backward data /
 * backward weights), for descriptions and benchmarks. */
const char *mr_conv_dnnl_impl(const mr_conv_dnnl *d, int l);

#endif

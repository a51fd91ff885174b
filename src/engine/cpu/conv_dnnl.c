/*
 * conv_dnnl.c - the trunk's convolutions through oneDNN (see conv_dnnl.h for
 * the contract and why it is shaped this way).
 *
 * Per layer: three primitives for the chunk shape (forward training with a
 * ReLU post-op, backward data, backward weights + bias), their weights in
 * the formats oneDNN picks (format_tag_any: with our (OC,3,3,C) = ohwi
 * layout forced it falls back to its reference kernels, ~1000x slower), and
 * three reorders: flat -> forward format, flat -> backward-data format,
 * weight-gradient format -> flat. Per workspace (thread): a stream, the
 * memory objects of every argument (their data pointers are set per call,
 * which allocates nothing), a weight-gradient buffer and a scratchpad.
 */
#include "conv_dnnl.h"
#include "bf16.h"
#include "one_thread.h"
#include "moonrl.h"   /* MR_MAX_CONV */
#include <dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The argument memories of one layer on one workspace. */
enum {
    M_SRC, M_DST, M_B, M_WF, M_SPF,   /* forward */
    M_DDST, M_WB, M_DSRC, M_SPD,      /* backward data (M_DDST shared with weights) */
    M_DWB, M_DB, M_SPW,               /* backward weights: src is M_SRC */
    M_DWU,                            /* the weight gradient in our layout (reorder target) */
    M_KINDS
};

typedef struct layer {
    int C, OC;
    dnnl_primitive_t fwd, bwd_data, bwd_w, r_wf, r_wb, r_dw;
    dnnl_memory_t m_wu, m_wf, m_wb;   /* the loads (outside any parallel region) */
    float *wf, *wb;
    size_t dw_bytes;
    char impl[192];
} layer;

struct mr_conv_dnnl {
    int L, nthreads, chunk, bf16;
    dnnl_engine_t eng;
    dnnl_stream_t *stream;            /* nthreads */
    layer lay[MR_MAX_CONV];
    dnnl_memory_t *mem;               /* [nthreads][MR_MAX_CONV][M_KINDS] */
    float *dwbuf;                     /* per workspace, dw_floats each */
    size_t dw_floats;
    unsigned char *scratch;           /* per workspace, scratch_bytes each */
    size_t scratch_bytes;
    uint16_t *src16, *dd16;           /* bf16: per workspace, the chunk's input / dout (cvt_elems each) */
    size_t cvt_elems;
    int H, W;
};

/* oneDNN picks its kernels and its work split by the thread count it sees
 * when a primitive is created, and runs parallel sections of that many
 * threads when called outside a parallel region: both happen with one
 * (mr_one_thread_begin, one_thread.h). */

#define OK(call) ((call) == dnnl_success)

/* The three primitive descriptors of a layer: forward (bias, ReLU post-op,
 * user scratchpad), backward data and backward weights (hinted by the
 * forward). pd[0..2]; returns 0 or -1 (all destroyed). */
static int make_pds(dnnl_engine_t eng, int n, int H, int W, int C, int OC, int bf16, dnnl_primitive_desc_t pd[3]) {
    dnnl_dims_t sd = {n, C, H, W}, dd = {n, OC, H, W}, wd = {OC, C, 3, 3}, bd = {OC};
    dnnl_dims_t strides = {1, 1}, pad = {1, 1};
    /* bf16: src, weights and dout in bf16; dst, din, dw, db and the bias
     * fp32 (oneDNN accumulates in fp32 and converts on the way out) */
    const dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t src, dst, w, wg, b, dsrc, ddst;   /* wg: the weight gradient, fp32 */
    dnnl_convolution_desc_t fd, bdd, bwd;
    dnnl_primitive_attr_t af = NULL, ab = NULL;
    dnnl_post_ops_t po = NULL;
    pd[0] = pd[1] = pd[2] = NULL;
    int ok = OK(dnnl_memory_desc_init_by_tag(&src, 4, sd, lo, dnnl_nhwc)) &&
             OK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nhwc)) &&
             OK(dnnl_memory_desc_init_by_tag(&dsrc, 4, sd, dnnl_f32, dnnl_nhwc)) &&
             OK(dnnl_memory_desc_init_by_tag(&ddst, 4, dd, lo, dnnl_nhwc)) &&
             OK(dnnl_memory_desc_init_by_tag(&w, 4, wd, lo, dnnl_format_tag_any)) &&
             OK(dnnl_memory_desc_init_by_tag(&wg, 4, wd, dnnl_f32, dnnl_format_tag_any)) &&
             OK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x)) &&
             OK(dnnl_post_ops_create(&po)) && OK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f)) &&
             OK(dnnl_primitive_attr_create(&af)) && OK(dnnl_primitive_attr_set_post_ops(af, po)) &&
             OK(dnnl_primitive_attr_set_scratchpad_mode(af, dnnl_scratchpad_mode_user)) &&
             OK(dnnl_primitive_attr_create(&ab)) &&
             OK(dnnl_primitive_attr_set_scratchpad_mode(ab, dnnl_scratchpad_mode_user)) &&
             OK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src, &w, &b,
                                                   &dst, strides, pad, pad)) &&
             OK(dnnl_primitive_desc_create(&pd[0], &fd, af, eng, NULL)) &&
             OK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &dsrc, &w, &ddst, strides, pad,
                                                         pad)) &&
             OK(dnnl_primitive_desc_create(&pd[1], &bdd, ab, eng, pd[0])) &&
             OK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &src, &wg, &b, &ddst,
                                                            strides, pad, pad)) &&
             OK(dnnl_primitive_desc_create(&pd[2], &bwd, ab, eng, pd[0]));
    if (po) dnnl_post_ops_destroy(po);
    if (af) dnnl_primitive_attr_destroy(af);
    if (ab) dnnl_primitive_attr_destroy(ab);
    if (!ok)
        for (int i = 0; i < 3; i++) {
            if (pd[i]) dnnl_primitive_desc_destroy(pd[i]);
            pd[i] = NULL;
        }
    return ok ? 0 : -1;
}

static const dnnl_memory_desc_t *md(dnnl_primitive_desc_t pd, dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static size_t scratch_of(dnnl_primitive_desc_t pd) { return dnnl_memory_desc_get_size(md(pd, dnnl_query_scratchpad_md)); }

static int reorder(dnnl_engine_t eng, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                   dnnl_primitive_t *out) {
    dnnl_primitive_desc_t pd;
    if (!OK(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL))) return -1;
    int ok = OK(dnnl_primitive_create(out, pd));
    dnnl_primitive_desc_destroy(pd);
    return ok ? 0 : -1;
}

static int mem(dnnl_engine_t eng, const dnnl_memory_desc_t *d, void *p, dnnl_memory_t *out) {
    return OK(dnnl_memory_create(out, d, eng, p ? p : DNNL_MEMORY_NONE)) ? 0 : -1;
}

void mr_conv_dnnl_free(mr_conv_dnnl *d) {
    if (!d) return;
    for (int l = 1; l < d->L; l++) {
        layer *y = &d->lay[l];
        dnnl_primitive_t pr[] = {y->fwd, y->bwd_data, y->bwd_w, y->r_wf, y->r_wb, y->r_dw};
        for (int i = 0; i < 6; i++)
            if (pr[i]) dnnl_primitive_destroy(pr[i]);
        dnnl_memory_t m[] = {y->m_wu, y->m_wf, y->m_wb};
        for (int i = 0; i < 3; i++)
            if (m[i]) dnnl_memory_destroy(m[i]);
    }
    if (d->mem)
        for (size_t i = 0; i < (size_t)d->nthreads * MR_MAX_CONV * M_KINDS; i++)
            if (d->mem[i]) dnnl_memory_destroy(d->mem[i]);
    if (d->stream)
        for (int t = 0; t < d->nthreads; t++)
            if (d->stream[t]) dnnl_stream_destroy(d->stream[t]);
    if (d->eng) dnnl_engine_destroy(d->eng);
    free(d->mem);
    free(d->stream);
    free(d);
}

static dnnl_memory_t *mems(mr_conv_dnnl *d, int t, int l) {
    return d->mem + ((size_t)t * MR_MAX_CONV + (size_t)l) * M_KINDS;
}

/* Creates layer l's primitives, reorders and memories from its pds. */
static int build_layer(mr_conv_dnnl *d, int l, dnnl_primitive_desc_t pd[3]) {
    layer *y = &d->lay[l];
    dnnl_engine_t e = d->eng;
    const dnnl_memory_desc_t *wf = md(pd[0], dnnl_query_weights_md), *wb = md(pd[1], dnnl_query_weights_md);
    const dnnl_memory_desc_t *dwb = md(pd[2], dnnl_query_diff_weights_md);
    const dnnl_memory_desc_t *src = md(pd[0], dnnl_query_src_md), *dst = md(pd[0], dnnl_query_dst_md);
    const dnnl_memory_desc_t *dsrc = md(pd[1], dnnl_query_diff_src_md), *ddst = md(pd[1], dnnl_query_diff_dst_md);
    dnnl_memory_desc_t wu, b;
    dnnl_dims_t wd = {y->OC, y->C, 3, 3}, bd = {y->OC};
    if (!OK(dnnl_memory_desc_init_by_tag(&wu, 4, wd, dnnl_f32, dnnl_ohwi)) ||
        !OK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x)))
        return -1;
    const char *i0 = "?", *i1 = "?", *i2 = "?";
    dnnl_primitive_desc_query(pd[0], dnnl_query_impl_info_str, 0, &i0);
    dnnl_primitive_desc_query(pd[1], dnnl_query_impl_info_str, 0, &i1);
    dnnl_primitive_desc_query(pd[2], dnnl_query_impl_info_str, 0, &i2);
    snprintf(y->impl, sizeof y->impl, "%s / %s / %s", i0, i1, i2);
    if (!OK(dnnl_primitive_create(&y->fwd, pd[0])) || !OK(dnnl_primitive_create(&y->bwd_data, pd[1])) ||
        !OK(dnnl_primitive_create(&y->bwd_w, pd[2])) || reorder(e, &wu, wf, &y->r_wf) || reorder(e, &wu, wb, &y->r_wb) ||
        reorder(e, dwb, &wu, &y->r_dw) || mem(e, &wu, NULL, &y->m_wu) || mem(e, wf, y->wf, &y->m_wf) ||
        mem(e, wb, y->wb, &y->m_wb))
        return -1;
    for (int t = 0; t < d->nthreads; t++) {
        dnnl_memory_t *m = mems(d, t, l);
        void *sp = d->scratch + (size_t)t * d->scratch_bytes;
        if (mem(e, src, NULL, &m[M_SRC]) || mem(e, dst, NULL, &m[M_DST]) || mem(e, &b, NULL, &m[M_B]) ||
            mem(e, wf, y->wf, &m[M_WF]) || mem(e, md(pd[0], dnnl_query_scratchpad_md), sp, &m[M_SPF]) ||
            mem(e, ddst, NULL, &m[M_DDST]) || mem(e, wb, y->wb, &m[M_WB]) || mem(e, dsrc, NULL, &m[M_DSRC]) ||
            mem(e, md(pd[1], dnnl_query_scratchpad_md), sp, &m[M_SPD]) ||
            mem(e, dwb, d->dwbuf + (size_t)t * d->dw_floats, &m[M_DWB]) || mem(e, &b, NULL, &m[M_DB]) ||
            mem(e, md(pd[2], dnnl_query_scratchpad_md), sp, &m[M_SPW]) || mem(e, &wu, NULL, &m[M_DWU]))
            return -1;
    }
    return 0;
}

int mr_conv_dnnl_layout(mr_conv_dnnl **out, const int *ch, int L, int H, int W, int chunk, int nthreads, int bf16,
                        mr_arena *a, char *why, size_t why_len) {
    *out = NULL;
    if (why && why_len) why[0] = 0;
    if (L < 2) return 0;
    if (nthreads < 1) nthreads = 1;
    const int planning = a->base == NULL;
    const int nt = mr_one_thread_begin();
    int rc = -1;
    mr_conv_dnnl *d = calloc(1, sizeof *d);
    dnnl_primitive_desc_t pd[MR_MAX_CONV][3];
    memset(pd, 0, sizeof pd);
    if (!d || !OK(dnnl_engine_create(&d->eng, dnnl_cpu, 0))) {
        if (why) snprintf(why, why_len, "oneDNN: no CPU engine");
        goto done;
    }
    d->L = L;
    d->nthreads = nthreads;
    d->chunk = chunk;
    d->bf16 = bf16 != 0;
    d->H = H;
    d->W = W;
    if (d->bf16 && !mr_bf16_isa()) {
        if (why) snprintf(why, why_len, "this CPU has no bf16 instructions oneDNN uses (AVX512-BF16 or AMX)");
        goto done;
    }
    /* descriptors first: they size the arena's share */
    size_t dw_bytes = 0, sp = 0;
    for (int l = 1; l < L; l++) {
        d->lay[l].C = ch[l];
        d->lay[l].OC = ch[l + 1];
        if (make_pds(d->eng, chunk, H, W, ch[l], ch[l + 1], d->bf16, pd[l])) {
            if (why) snprintf(why, why_len, "oneDNN has no convolution %d->%d on %dx%d maps", ch[l], ch[l + 1], H, W);
            goto done;
        }
        /* oneDNN's reference kernels (no JIT for this CPU or shape) are
         * 100-1000x slower than im2col + sgemm: refuse them */
        for (int i = 0; i < 3; i++) {
            const char *impl = "";
            dnnl_primitive_desc_query(pd[l][i], dnnl_query_impl_info_str, 0, &impl);
            if (strncmp(impl, "ref", 3) == 0) {
                if (why) snprintf(why, why_len, "oneDNN has only its reference kernel (%s) for the convolution %d->%d",
                                  impl, ch[l], ch[l + 1]);
                goto done;
            }
        }
        size_t s = dnnl_memory_desc_get_size(md(pd[l][2], dnnl_query_diff_weights_md));
        const size_t e = (size_t)chunk * H * W * (size_t)(ch[l] > ch[l + 1] ? ch[l] : ch[l + 1]);
        if (d->bf16 && e > d->cvt_elems) d->cvt_elems = e;
        if (s > dw_bytes) dw_bytes = s;
        for (int i = 0; i < 3; i++)
            if (scratch_of(pd[l][i]) > sp) sp = scratch_of(pd[l][i]);
    }
    d->dw_floats = (mr_arena_round(dw_bytes) + sizeof(float) - 1) / sizeof(float);
    d->scratch_bytes = mr_arena_round(sp);
    for (int l = 1; l < L; l++) {
        d->lay[l].wf = mr_arena_take(a, dnnl_memory_desc_get_size(md(pd[l][0], dnnl_query_weights_md)));
        d->lay[l].wb = mr_arena_take(a, dnnl_memory_desc_get_size(md(pd[l][1], dnnl_query_weights_md)));
    }
    d->dwbuf = MR_TAKE(a, float, d->dw_floats * (size_t)nthreads);
    d->scratch = mr_arena_take(a, d->scratch_bytes * (size_t)nthreads + MR_ARENA_ALIGN);
    if (d->bf16) {
        d->cvt_elems = mr_arena_round(d->cvt_elems * sizeof(uint16_t)) / sizeof(uint16_t);
        d->src16 = mr_arena_take(a, d->cvt_elems * sizeof(uint16_t) * (size_t)nthreads);
        d->dd16 = mr_arena_take(a, d->cvt_elems * sizeof(uint16_t) * (size_t)nthreads);
    }
    if (planning) {
        rc = 0;
        goto done;
    }
    if (!d->lay[1].wf || !d->dwbuf || !d->scratch || (d->bf16 && (!d->src16 || !d->dd16))) {
        if (why) snprintf(why, why_len, "oneDNN convolutions: the arena is smaller than planned");
        goto done;
    }
    d->stream = calloc((size_t)nthreads, sizeof *d->stream);
    d->mem = calloc((size_t)nthreads * MR_MAX_CONV * M_KINDS, sizeof *d->mem);
    if (!d->stream || !d->mem) goto done;
    for (int t = 0; t < nthreads; t++)
        if (!OK(dnnl_stream_create(&d->stream[t], d->eng, dnnl_stream_default_flags))) goto done;
    for (int l = 1; l < L; l++)
        if (build_layer(d, l, pd[l])) {
            if (why) snprintf(why, why_len, "oneDNN: creating the convolution %d->%d failed", ch[l], ch[l + 1]);
            goto done;
        }
    *out = d;
    d = NULL;
    rc = 0;
done:
    for (int l = 1; l < L && l < MR_MAX_CONV; l++)
        for (int i = 0; i < 3; i++)
            if (pd[l][i]) dnnl_primitive_desc_destroy(pd[l][i]);
    mr_conv_dnnl_free(d);
    mr_one_thread_end(nt);
    return rc;
}

/* One primitive on workspace t's stream, single-threaded. */
static void run(mr_conv_dnnl *d, int t, dnnl_primitive_t p, int n, const dnnl_exec_arg_t *args) {
    const int nt = mr_one_thread_begin();
    dnnl_primitive_execute(p, d->stream[t], n, args);
    dnnl_stream_wait(d->stream[t]);
    mr_one_thread_end(nt);
}

static void load(mr_conv_dnnl *d, const float *const *w_of, int bwd) {
    for (int l = 1; l < d->L; l++) {
        layer *y = &d->lay[l];
        dnnl_memory_set_data_handle(y->m_wu, (void *)w_of[l]);
        dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, y->m_wu}, {DNNL_ARG_TO, bwd ? y->m_wb : y->m_wf}};
        run(d, 0, bwd ? y->r_wb : y->r_wf, 2, args);
    }
}

void mr_conv_dnnl_load_forward(mr_conv_dnnl *d, const float *const *w_of) { load(d, w_of, 0); }
void mr_conv_dnnl_load_backward(mr_conv_dnnl *d, const float *const *w_of) { load(d, w_of, 1); }

/* The chunk's input of layer l as the primitives take it: itself (fp32),
 * or converted into workspace t's bf16 buffer. */
static void *src_of(mr_conv_dnnl *d, int t, int l, const float *inp) {
    if (!d->bf16) return (void *)inp;
    uint16_t *s = d->src16 + (size_t)t * d->cvt_elems;
    mr_bf16_from_f32(s, inp, (size_t)d->chunk * d->H * d->W * (size_t)d->lay[l].C);
    return s;
}

void mr_conv_dnnl_forward(mr_conv_dnnl *d, int t, int l, float *out, const float *inp, const float *b) {
    dnnl_memory_t *m = mems(d, t, l);
    dnnl_memory_set_data_handle(m[M_SRC], src_of(d, t, l, inp));
    dnnl_memory_set_data_handle(m[M_DST], out);
    dnnl_memory_set_data_handle(m[M_B], (void *)b);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, m[M_SRC]},
                              {DNNL_ARG_WEIGHTS, m[M_WF]},
                              {DNNL_ARG_BIAS, m[M_B]},
                              {DNNL_ARG_DST, m[M_DST]},
                              {DNNL_ARG_SCRATCHPAD, m[M_SPF]}};
    run(d, t, d->lay[l].fwd, 5, args);
}

void mr_conv_dnnl_backward(mr_conv_dnnl *d, int t, int l, float *dinp, float *dw, float *db,
                           const float *dout, const float *inp) {
    dnnl_memory_t *m = mems(d, t, l);
    layer *y = &d->lay[l];
    void *dd = (void *)dout;
    if (d->bf16) {
        dd = d->dd16 + (size_t)t * d->cvt_elems;
        mr_bf16_from_f32(dd, dout, (size_t)d->chunk * d->H * d->W * (size_t)y->OC);
    }
    dnnl_memory_set_data_handle(m[M_DDST], dd);
    if (dw && db) {
        dnnl_memory_set_data_handle(m[M_SRC], src_of(d, t, l, inp));
        dnnl_memory_set_data_handle(m[M_DB], db);
        dnnl_memory_set_data_handle(m[M_DWU], dw);
        dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, m[M_SRC]},
                                  {DNNL_ARG_DIFF_DST, m[M_DDST]},
                                  {DNNL_ARG_DIFF_WEIGHTS, m[M_DWB]},
                                  {DNNL_ARG_DIFF_BIAS, m[M_DB]},
                                  {DNNL_ARG_SCRATCHPAD, m[M_SPW]}};
        run(d, t, y->bwd_w, 5, args);
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, m[M_DWB]}, {DNNL_ARG_TO, m[M_DWU]}};
        run(d, t, y->r_dw, 2, r);
    }
    if (dinp) {
        dnnl_memory_set_data_handle(m[M_DSRC], dinp);
        dnnl_exec_arg_t args[] = {{DNNL_ARG_DIFF_DST, m[M_DDST]},
                                  {DNNL_ARG_WEIGHTS, m[M_WB]},
                                  {DNNL_ARG_DIFF_SRC, m[M_DSRC]},
                                  {DNNL_ARG_SCRATCHPAD, m[M_SPD]}};
        run(d, t, y->bwd_data, 4, args);
    }
}

int mr_conv_dnnl_is_bf16(const mr_conv_dnnl *d) { return d && d->bf16; }

const char *mr_conv_dnnl_impl(const mr_conv_dnnl *d, int l) {
    return d && l >= 1 && l < d->L ? d->lay[l].impl : "";
}

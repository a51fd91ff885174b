/*
 * test_policy_bf16.c - the CPU network with its oneDNN layers in bf16
 * (mr_policy_options.bf16; conv_dnnl.h) against the same network in fp32,
 * on the reference net's trunk (32, 64, 64 channels; two bf16 layers).
 *
 * What is checked:
 *   - forward (logits, value) agree with fp32 normwise within TOL_FWD =
 *     2^-6: a bf16 layer's output is within (2B + B^2) sum|terms| of the
 *     fp32 one per element (B = 2^-8, test_conv_dnnl.c), at most about 2^-7
 *     of the layer's scale, and the forward passes two such layers.
 *   - every parameter tensor's gradient points the same way: 1 - cos <
 *     TOL_COS = 2^-6, and normwise within TOL_GRAD = 2^-2. A gradient is a
 *     sum over the batch of per-sample terms of both signs (random dlogits),
 *     which cancel: |sum| is about sum|terms| / sqrt(B), so the forward's
 *     2^-7 shows up to ~sqrt(200) = 14x larger normwise (measured: 0.06-0.1
 *     even for critic.w and fc.b, which see bf16 only through the forward;
 *     ReLU masks flipping near 0 add to it). The direction, what Adam
 *     follows, barely moves (1 - cos measured <= 0.005). A wrong result has
 *     1 - cos ~ 1 and normwise ~ 1: both bounds catch it.
 *   - bf16 really ran: the results are not the fp32 bits, and their error is
 *     above fp32 rounding's (1e-5).
 *   - 1 and 2 threads give the same bits in bf16 (one chunk per thread).
 *   - where the CPU has no bf16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE, the second
 *     ctest run), the bf16 layout is refused and the network runs oneDNN in
 *     fp32, with a note that says why (planned bytes = taken bytes still).
 */
#include "check.h"
#include "conv_dnnl.h"
#include "moonrl.h"
#include "policy.h"
#include "policy_cfg.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define NA 8
#define TOL_FWD 0.015625
#define TOL_COS 0.015625
#define TOL_GRAD 0.25

static int make(mr_policy *p, mr_arena *a, const mr_policy_config *cfg, int V, int B, int bf16) {
    const mr_policy_options o = {32, MR_CPU_CONV_ONEDNN, MR_CPU_ACTIVATIONS_STORE, bf16, {0}, 0};
    memset(a, 0, sizeof *a);
    mr_policy_layout_with(p, cfg, V, B, &o, a);
    const size_t planned = a->size;
    if (planned != mr_policy_bytes_with(cfg, V, B, &o) || mr_arena_commit(a) != 0) return 0;
    mr_policy_layout_with(p, cfg, V, B, &o, a);
    return a->used == planned;
}

static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb + 1e-300);
}

typedef struct { float *logits, *value, *grads; } outs;

static void run(mr_policy *p, const uint8_t *codes, const float *extra, int B, const float *ga, const float *gc,
                outs *o) {
    o->logits = malloc(sizeof(float) * B * NA);
    o->value = malloc(sizeof(float) * B);
    o->grads = malloc(sizeof(float) * p->n_params);
    mr_policy_forward(p, codes, extra, B, 0, o->logits, o->value);
    mr_policy_zero_grad(p);
    mr_policy_backward(p, ga, gc, B);
    memcpy(o->grads, p->grads, sizeof(float) * p->n_params);
}
static void outs_free(outs *o) { free(o->logits); free(o->value); free(o->grads); }
static int same(const outs *a, const outs *b, int B, size_t np) {
    return !memcmp(a->logits, b->logits, sizeof(float) * B * NA) && !memcmp(a->value, b->value, sizeof(float) * B) &&
           !memcmp(a->grads, b->grads, sizeof(float) * np);
}

int main(void) {
    check_seed(0xbf16bf16bf16ULL);
    omp_set_num_threads(2);
    mr_policy_config cfg;
    ref_cfg(&cfg);
    const int V = 11, VV = V * V, B = 200;   /* 6 chunks of 32 and a tail of 8 (nn.c, fp32) */
    mr_policy p32, p16;
    mr_arena a32, a16;
    CHECK(make(&p32, &a32, &cfg, V, B, 0));
    CHECK(make(&p16, &a16, &cfg, V, B, 1));
    if (!mr_bf16_isa()) {   /* no bf16 here: refused with a reason, oneDNN in fp32 instead */
        CHECK_MSG(p16.dnnl != NULL && !p16.bf16 && strstr(p16.conv_note, "bf16 refused"), "no-bf16 note: '%s'",
                  p16.conv_note);
        CHECK(p32.dnnl != NULL && p32.conv_note[0] == 0);
        printf("test_policy_bf16: no bf16 on this CPU: %s\n", p16.conv_note);
        mr_policy_free(&p32);
        mr_policy_free(&p16);
        mr_arena_release(&a32);
        mr_arena_release(&a16);
        return check_report("test_policy_bf16");
    }
    CHECK(p16.dnnl != NULL && p16.bf16 && p32.dnnl != NULL && !p32.bf16);
    mr_policy_init(&p32, 7);
    memcpy(p16.params, p32.params, sizeof(float) * p32.n_params);
    uint8_t *codes = malloc((size_t)B * VV);
    float *extra = malloc(sizeof(float) * 2 * B), *ga = malloc(sizeof(float) * B * NA), *gc = malloc(sizeof(float) * B);
    for (int i = 0; i < B * VV; i++) {
        double u = urand();
        codes[i] = u < 0.6 ? 0 : u < 0.8 ? 1 : 2;
    }
    for (int i = 0; i < 2 * B; i++) extra[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < B * NA; i++) ga[i] = (float)(2 * urand() - 1) / B;
    for (int i = 0; i < B; i++) gc[i] = (float)(2 * urand() - 1) / B;

    outs r32, r16, r16t1;
    run(&p32, codes, extra, B, ga, gc, &r32);
    run(&p16, codes, extra, B, ga, gc, &r16);
    double el = check_relerr(r16.logits, r32.logits, (size_t)B * NA, 1e-6);
    double ev = check_relerr(r16.value, r32.value, B, 1e-6);
    CHECK_MSG(el < TOL_FWD && ev < TOL_FWD, "bf16 vs fp32 forward: logits %.3g, value %.3g", el, ev);
    CHECK_MSG(el > 1e-5, "bf16 logits within fp32 rounding of fp32 (%.3g): did bf16 run?", el);
    double eg_max = 0, ec_max = 0;
    for (int i = 0; i < p32.n_tensors; i++) {
        const mr_tensor_info *t = &p32.tensors[i];
        double e = check_relerr(r16.grads + t->offset, r32.grads + t->offset, t->count, 1e-12);
        double c = cosine(r16.grads + t->offset, r32.grads + t->offset, t->count);
        CHECK_MSG(e < TOL_GRAD && 1 - c < TOL_COS, "bf16 vs fp32 gradient of %s: normwise %.3g, 1 - cos %.3g",
                  t->name, e, 1 - c);
        if (e > eg_max) eg_max = e;
        if (1 - c > ec_max) ec_max = 1 - c;
    }
    printf("test_policy_bf16 (%s): bf16 vs fp32: logits %.3g, value %.3g; gradients: normwise <= %.3g, "
           "1 - cos <= %.3g\n", mr_bf16_isa(), el, ev, eg_max, ec_max);

    /* act == training forward in bf16 too, and 1 vs 2 threads bit for bit */
    float *al = malloc(sizeof(float) * B * NA), *av = malloc(sizeof(float) * B);
    mr_policy_act(&p16, codes, extra, B, 0, al, av);
    CHECK_MSG(!memcmp(al, r16.logits, sizeof(float) * B * NA) && !memcmp(av, r16.value, sizeof(float) * B),
              "bf16: act and forward differ");
    omp_set_num_threads(1);
    run(&p16, codes, extra, B, ga, gc, &r16t1);
    omp_set_num_threads(2);
    CHECK_MSG(same(&r16t1, &r16, B, p16.n_params), "bf16: 1 and 2 threads differ");

    free(al); free(av);
    outs_free(&r32); outs_free(&r16); outs_free(&r16t1);
    free(codes); free(extra); free(ga); free(gc);
    mr_policy_free(&p32);
    mr_policy_free(&p16);
    mr_arena_release(&a32);
    mr_arena_release(&a16);
    return check_report("test_policy_bf16");
}

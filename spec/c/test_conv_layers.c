/*
 * test_conv_layers.c - a trunk whose conv layers 1.. each run their own
 * implementation (mr_policy_options.layers, from mr_cpu_config.conv_layers:
 * cpu.conv = auto's per-layer choice), and the timing behind that choice
 * (mr_cpu_conv_time):
 *   - a mixed trunk (layer 1 Winograd, layer 2 oneDNN, and the other way
 *     round) really runs each layer as asked: its layer outputs equal, bit
 *     for bit, those of the all-Winograd or all-oneDNN trunk up to the first
 *     layer that differs, and differ after it;
 *   - its outputs and gradients agree with the all-oneDNN trunk's within
 *     the tolerance test_policy.c holds Winograd to (1e-5 on outputs, 1e-4
 *     on gradients, relative);
 *   - act == training forward, and 1 vs 2 threads bit-identical (forward,
 *     act, backward), with a tail chunk that oneDNN leaves to im2col;
 *   - mr_config_validate's rules for conv_layers; mr_cpu_conv_time's answers.
 */
#include "check.h"
#include "policy.h"
#include "arena.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define NA MR_MAX_ACTIONS
enum { V = 11, VV = V * V, B = 100 };   /* chunk 32: three whole chunks and a tail of 4 */

static void cfg3(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->num_conv = 3;
    c->conv_channels[0] = 8;
    c->conv_channels[1] = 16;
    c->conv_channels[2] = 16;
    c->hidden = 32;
    c->critic_hidden = 16;
    c->popart = 1;
}

typedef struct { mr_policy p; mr_arena a; } net;

/* plan, commit, lay out again, as the trainer does; l1, l2: layers 1, 2's own */
static int make(net *n, int conv, int l1, int l2) {
    mr_policy_config cfg;
    cfg3(&cfg);
    mr_policy_options o = {32, conv, MR_CPU_ACTIVATIONS_STORE, 0, {0}, 0};
    o.layers[1] = (int8_t)l1;
    o.layers[2] = (int8_t)l2;
    memset(&n->a, 0, sizeof n->a);
    mr_policy_layout_with(&n->p, &cfg, V, B, &o, &n->a);
    size_t planned = n->a.size;
    if (planned != mr_policy_bytes_with(&cfg, V, B, &o) || mr_arena_commit(&n->a) != 0) return 0;
    mr_policy_layout_with(&n->p, &cfg, V, B, &o, &n->a);
    return n->a.used == planned && n->p.params != NULL;
}

static void params_from(mr_policy *p, uint64_t seed) {
    check_seed(seed);
    for (size_t i = 0; i < p->n_params; i++) p->params[i] = (float)(0.3 * (2 * urand() - 1));
}

typedef struct { float logits[B * NA], value[B], *grads, *act[3]; } result;

static void run(mr_policy *p, const uint8_t *codes, const float *extra, const float *ga, const float *gc,
                result *r) {
    CHECK(mr_policy_forward(p, codes, extra, B, 1, r->logits, r->value) == 0);
    for (int l = 0; l < 3; l++) {
        size_t n = (size_t)B * VV * p->ch[l + 1];
        r->act[l] = malloc(sizeof(float) * n);
        memcpy(r->act[l], p->act[l], sizeof(float) * n);
    }
    mr_policy_zero_grad(p);
    CHECK(mr_policy_backward(p, ga, gc, B) == 0);
    r->grads = malloc(sizeof(float) * p->n_params);
    memcpy(r->grads, p->grads, sizeof(float) * p->n_params);
}

static void result_free(result *r) {
    free(r->grads);
    for (int l = 0; l < 3; l++) free(r->act[l]);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

static void test_mixed(void) {
    static uint8_t codes[B * VV];
    static float extra[2 * B], ga[B * NA], gc[B];
    check_seed(7);
    for (int i = 0; i < B * VV; i++) codes[i] = (uint8_t)(urand() < 0.6 ? 0 : urand() < 0.5 ? 1 : 2);
    for (int i = 0; i < 2 * B; i++) extra[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < B * NA; i++) ga[i] = (float)(2 * urand() - 1) / B;
    for (int i = 0; i < B; i++) gc[i] = (float)(2 * urand() - 1) / B;

    const int W = MR_CPU_CONV_WINOGRAD, O = MR_CPU_CONV_ONEDNN;
    static net all_o, all_w, wo, ow, im;
    CHECK(make(&all_o, O, 0, 0));
    CHECK(make(&all_w, W, 0, 0));
    CHECK(make(&wo, MR_CPU_CONV_AUTO, W, O));   /* layer 1 Winograd, layer 2 oneDNN */
    CHECK(make(&ow, W, O, 0));                  /* layer 1 oneDNN, layer 2 cpu.conv's: Winograd */
    CHECK(make(&im, MR_CPU_CONV_IM2COL, W, O)); /* im2col is whole-network: layers ignored */
    CHECK(wo.p.lconv[1] == W && wo.p.lconv[2] == O && wo.p.dnnl != NULL && wo.p.wino.uf[1] && !wo.p.wino.uf[2]);
    CHECK(ow.p.lconv[1] == O && ow.p.lconv[2] == W && ow.p.dnnl != NULL && !ow.p.wino.uf[1] && ow.p.wino.uf[2]);
    CHECK(im.p.conv == MR_CPU_CONV_IM2COL && im.p.dnnl == NULL && im.p.wino.L == 0);

    params_from(&all_o.p, 11);
    memcpy(all_w.p.params, all_o.p.params, sizeof(float) * all_o.p.n_params);
    memcpy(wo.p.params, all_o.p.params, sizeof(float) * all_o.p.n_params);
    memcpy(ow.p.params, all_o.p.params, sizeof(float) * all_o.p.n_params);
    static result ro, rw, rwo, row, r1;
    run(&all_o.p, codes, extra, ga, gc, &ro);
    run(&all_w.p, codes, extra, ga, gc, &rw);
    run(&wo.p, codes, extra, ga, gc, &rwo);
    run(&ow.p, codes, extra, ga, gc, &row);
    const size_t n1 = (size_t)B * VV * 16, n2 = n1;
    /* each layer as asked: equal to the trunk that runs it the same way up to there */
    CHECK_MSG(same(rwo.act[1], rw.act[1], n1) && !same(rwo.act[1], ro.act[1], n1),
              "winograd-onednn: layer 1 is not Winograd's");
    CHECK_MSG(!same(rwo.act[2], rw.act[2], n2) && !same(rwo.act[2], ro.act[2], n2),
              "winograd-onednn: layer 2 equals a whole-trunk choice's");
    CHECK_MSG(same(row.act[1], ro.act[1], n1) && !same(row.act[1], rw.act[1], n1),
              "onednn-winograd: layer 1 is not oneDNN's");
    /* within Winograd's tolerance of the all-oneDNN trunk */
    const result *mixed[2] = {&rwo, &row};
    for (int k = 0; k < 2; k++) {
        double el = check_relerr(mixed[k]->logits, ro.logits, (size_t)B * NA, 1e-3);
        double ev = check_relerr(mixed[k]->value, ro.value, B, 1e-3);
        double eg = check_relerr(mixed[k]->grads, ro.grads, all_o.p.n_params, 1e-9);
        CHECK_MSG(el < 1e-5 && ev < 1e-5, "mixed %d vs onednn outputs: %g %g", k, el, ev);
        CHECK_MSG(eg < 1e-4, "mixed %d vs onednn gradients: %g", k, eg);
    }
    /* act == forward; 1 vs 2 threads bit for bit */
    static float al[B * NA], av[B], al1[B * NA], av1[B];
    mr_policy_act(&wo.p, codes, extra, B, 1, al, av);
    CHECK_MSG(same(al, rwo.logits, (size_t)B * NA) && same(av, rwo.value, B), "mixed: act and forward differ");
    omp_set_num_threads(1);
    run(&wo.p, codes, extra, ga, gc, &r1);
    mr_policy_act(&wo.p, codes, extra, B, 1, al1, av1);
    omp_set_num_threads(2);
    CHECK_MSG(same(r1.logits, rwo.logits, (size_t)B * NA) && same(r1.value, rwo.value, B),
              "mixed: forward differs between 1 and 2 threads");
    CHECK_MSG(same(r1.grads, rwo.grads, wo.p.n_params), "mixed: gradients differ between 1 and 2 threads");
    CHECK_MSG(same(al1, al, (size_t)B * NA) && same(av1, av, B), "mixed: act differs between 1 and 2 threads");
    result_free(&r1);
    result_free(&ro);
    result_free(&rw);
    result_free(&rwo);
    result_free(&row);
    net *all[5] = {&all_o, &all_w, &wo, &ow, &im};
    for (int i = 0; i < 5; i++) {
        mr_policy_free(&all[i]->p);
        mr_arena_release(&all[i]->a);
    }
}

static void test_validate(void) {
    mr_config c;
    mr_error err;
    mr_config_default(&c);   /* 3 conv layers */
    c.cpu.conv_layers[1] = MR_CPU_CONV_WINOGRAD;
    c.cpu.conv_layers[2] = MR_CPU_CONV_ONEDNN;
    CHECK_MSG(mr_config_validate(&c, &err) == MR_OK, "%s", err.msg);
    c.cpu.conv_layers[0] = MR_CPU_CONV_WINOGRAD;   /* the first layer is the codes' */
    CHECK(mr_config_validate(&c, &err) == MR_ERR_ARG && strstr(err.msg, "cpu.conv_layers[0]"));
    c.cpu.conv_layers[0] = 0;
    c.cpu.conv_layers[3] = MR_CPU_CONV_WINOGRAD;   /* past the last layer */
    CHECK(mr_config_validate(&c, &err) == MR_ERR_ARG && strstr(err.msg, "cpu.conv_layers[3]"));
    c.cpu.conv_layers[3] = 0;
    c.cpu.conv_layers[1] = MR_CPU_CONV_IM2COL;     /* im2col is whole-network */
    CHECK(mr_config_validate(&c, &err) == MR_ERR_ARG);
    c.cpu.conv_layers[1] = MR_CPU_CONV_WINOGRAD;
    c.cpu.conv = MR_CPU_CONV_IM2COL;
    CHECK(mr_config_validate(&c, &err) == MR_ERR_ARG && strstr(err.msg, "im2col"));
}

static void test_time(void) {
    const int convs[3] = {MR_CPU_CONV_ONEDNN, MR_CPU_CONV_WINOGRAD, MR_CPU_CONV_IM2COL};
    double s[3] = {0, 0, 0};
    mr_error err;
    CHECK_MSG(mr_cpu_conv_time(convs, 3, 11, 11, 16, 32, 32, 2, 0, 3, s, &err) == MR_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) CHECK_MSG(s[i] > 0 && s[i] < 10, "candidate %d: %g s", i, s[i]);
    printf("test_conv_layers: 16->32 on 11x11, chunk 32, 2 threads: onednn %.3g ms, winograd %.3g ms, "
           "im2col %.3g ms\n", 1e3 * s[0], 1e3 * s[1], 1e3 * s[2]);
    const int bad[1] = {7};
    CHECK(mr_cpu_conv_time(bad, 1, 11, 11, 16, 32, 32, 2, 0, 3, s, &err) == MR_ERR_ARG && strstr(err.msg, "7"));
    CHECK(mr_cpu_conv_time(convs, 3, 11, 11, 0, 32, 32, 2, 0, 3, s, &err) == MR_ERR_ARG);
}

int main(void) {
    omp_set_num_threads(2);
    test_mixed();
    test_validate();
    test_time();
    return check_report("test_conv_layers");
}

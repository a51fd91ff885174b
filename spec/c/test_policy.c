/*
 * test_policy.c - the whole actor-critic (policy.c) against an independent
 * double-precision re-implementation written here, which reads the same
 * parameter array through the offsets table:
 *   - forward values (both observation modes), and the gradient of
 *     L = sum(a .* logits) + sum(c .* value) against central differences
 *     (an element whose one-sided differences disagree has a ReLU's kink
 *     within the step: counted and left out, at most a tenth of them);
 *   - fc's forward through its inputs' transpose and through the weights':
 *     the same bits;
 *   - act == training forward bit for bit; chunk 3 vs 64 agree; 1 vs 2
 *     threads bit-identical (forward, backward, init);
 *   - init: orthogonality with the right gains, zero biases, determinism;
 *   - the parameter table (reference counts, groups), the layout plan, and
 *     the torch-order permutation.
 */
#include "check.h"
#include "policy.h"
#include "gemm.h"
#include "policy_cfg.h"
#include "obs_codes.h"
#include "arena.h"
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NA MR_MAX_ACTIONS

/* ------------------------------------------------------------ helpers */

static void small_cfg(mr_policy_config *c) {
    memset(c, 0, sizeof *c);
    c->num_conv = 2;
    c->conv_channels[0] = 4;
    c->conv_channels[1] = 8;
    c->hidden = 16;
    c->critic_hidden = 16;
    c->popart = 1;
}

/* the convolutions' implementation every test below runs with (main runs
 * the numeric tests once per implementation) */
static int g_conv = MR_CPU_CONV_IM2COL;

/* plan, commit, lay out again: what the trainer does */
static int make_policy_with(mr_policy *p, mr_arena *a, const mr_policy_config *cfg, int view,
                            int max_batch, int chunk, int activations) {
    const mr_policy_options o = {chunk, g_conv, activations, 0, {0}, 0};
    memset(a, 0, sizeof *a);
    mr_policy_layout_with(p, cfg, view, max_batch, &o, a);
    size_t planned = a->size;
    int ok = p->params == NULL && p->work == NULL && p->x == NULL && p->dnnl == NULL;
    ok &= planned == mr_policy_bytes_with(cfg, view, max_batch, &o);
    if (activations == MR_CPU_ACTIVATIONS_STORE) ok &= planned == mr_policy_bytes(cfg, view, max_batch, chunk, g_conv);
    if (mr_arena_commit(a) != 0) return 0;
    mr_policy_layout_with(p, cfg, view, max_batch, &o, a);
    /* the oneDNN path has its primitives for layers 1..; im2col has none;
     * Winograd its transformed weights */
    ok &= g_conv == MR_CPU_CONV_IM2COL ? p->dnnl == NULL && p->conv == MR_CPU_CONV_IM2COL
        : g_conv == MR_CPU_CONV_WINOGRAD ? p->dnnl == NULL && p->conv == MR_CPU_CONV_WINOGRAD &&
                                               (p->wino.uf[1] != NULL) == (p->num_conv > 1)
                                         : (p->dnnl != NULL) == (p->num_conv > 1) && p->conv == MR_CPU_CONV_ONEDNN;
    ok &= a->used <= a->size && a->used == planned;
    ok &= p->params && p->grads && p->work && p->x && p->col && p->b_aL && p->b_chid;
    for (int l = 0; l < p->num_conv; l++) ok &= p->act[l] != NULL || max_batch == 0;
    ok &= p->recompute == (activations == MR_CPU_ACTIVATIONS_RECOMPUTE);
    return ok;
}
static int make_policy(mr_policy *p, mr_arena *a, const mr_policy_config *cfg, int view,
                       int max_batch, int chunk) {
    return make_policy_with(p, a, cfg, view, max_batch, chunk, MR_CPU_ACTIVATIONS_STORE);
}

/* weights uniform with std ~ 1/sqrt(fan_in) * 1.5, biases small: all paths active */
static void random_params(mr_policy *p) {
    for (int i = 0; i < p->n_tensors; i++) {
        const mr_tensor_info *t = &p->tensors[i];
        float *w = p->params + t->offset;
        if (t->ndim == 1) {
            for (size_t k = 0; k < t->count; k++) w[k] = (float)(0.4 * urand() - 0.2);
        } else {
            double fan = (double)(t->count / (size_t)t->shape[0]);
            double s = 1.5 * sqrt(3.0 / fan);
            for (size_t k = 0; k < t->count; k++) w[k] = (float)(s * (2 * urand() - 1));
        }
    }
}

/* codes 0 .. C (C = 2: foraging's empty, food, poison; more: one-hot
 * channels, and a few C + 1, unknown, which read as empty) */
static void random_inputs_c(uint8_t *codes, float *extra, int B, int VV, int C) {
    for (int i = 0; i < B * VV; i++) {
        double u = urand();
        codes[i] = C == 2 ? (u < 0.6 ? 0 : u < 0.8 ? 1 : 2) : u < 0.5 ? 0 : u < 0.95 ? 1 + (int)((u - 0.5) / 0.45 * C)
                                                                                     : C + 1;
    }
    for (int b = 0; b < B; b++)   /* the centre cell holds the agent: empty */
        codes[b * VV + VV / 2] = 0;
    for (int i = 0; i < 2 * B; i++) extra[i] = (float)(2 * urand() - 1);
}
static void random_inputs(uint8_t *codes, float *extra, int B, int VV) { random_inputs_c(codes, extra, B, VV, 2); }

/* ------------------------------------------------------------ double reference */
/* Independent of policy.c apart from the shapes and the offsets table.
 * torch != 0 reads the parameters in the torch original's orders:
 * conv (OC,C,3,3), flatten (C,H,W), critic view (C,V,V). The observation's
 * C channels: one-hot, code k in 1 .. C is channel k-1 (foraging's C = 2:
 * food, poison), or foraging's proxy (C = 2). */
typedef struct {
    int L, ch[MR_MAX_CONV + 1], V, hidden, CH, D;
    int img, E;   /* img: the input is a float image (C x V x V floats a sample); E: extras the critic reads */
    size_t cw[MR_MAX_CONV], cb[MR_MAX_CONV], fw, fb, aw, ab, qw, qb, vw, vb;
} refnet;

static size_t off(const mr_policy *p, const char *name) {
    const mr_tensor_info *t = mr_policy_tensor(p, name);
    return t ? t->offset : 0;
}

static void refnet_from(refnet *r, const mr_policy *p, const mr_policy_config *cfg, int V) {
    r->L = cfg->num_conv;
    r->ch[0] = cfg->obs_channels > 0 ? cfg->obs_channels : 2;
    for (int l = 0; l < r->L; l++) r->ch[l + 1] = cfg->conv_channels[l];
    r->V = V;
    r->hidden = cfg->hidden;
    r->CH = cfg->critic_hidden;
    r->D = r->hidden + 2 + r->ch[0] * V * V;
    r->img = cfg->obs_image;
    r->E = cfg->obs_image ? cfg->critic_extra : 2;
    char nm[32];
    for (int l = 0; l < r->L; l++) {
        snprintf(nm, sizeof nm, "conv%d.w", l); r->cw[l] = off(p, nm);
        snprintf(nm, sizeof nm, "conv%d.b", l); r->cb[l] = off(p, nm);
    }
    r->fw = off(p, "fc.w"); r->fb = off(p, "fc.b");
    r->aw = off(p, "actor.w"); r->ab = off(p, "actor.b");
    r->qw = off(p, "critic.w"); r->qb = off(p, "critic.b");
    r->vw = off(p, "value.w"); r->vb = off(p, "value.b");
}

static void ref_forward(const refnet *r, const double *P, const uint8_t *codes,
                        const float *extra, int B, int proxy, int torch, double *logits,
                        double *value) {
    int V = r->V, VV = V * V, C0 = r->ch[0], cmax = C0;
    for (int l = 1; l <= r->L; l++) if (r->ch[l] > cmax) cmax = r->ch[l];
    double *a = malloc(sizeof(double) * VV * cmax), *nx = malloc(sizeof(double) * VV * cmax);
    double *feat = malloc(sizeof(double) * r->hidden), *cin = malloc(sizeof(double) * r->D);
    double *chd = malloc(sizeof(double) * r->CH);
    for (int b = 0; b < B; b++) {
        const uint8_t *cd = codes + (size_t)b * VV;
        const float *im = (const float *)(const void *)codes + (size_t)b * C0 * VV;   /* r->img: (C,V,V) */
        for (int q = 0; q < VV; q++) {   /* a[q][c] */
            int k = r->img ? 0 : cd[q];
            if (r->img) for (int c = 0; c < C0; c++) a[q * C0 + c] = im[c * VV + q];
            else if (proxy) a[q * 2] = a[q * 2 + 1] = k == 1 ? 1.0 : k == 2 ? 0.5 : 0.0;
            else for (int c = 0; c < C0; c++) a[q * C0 + c] = k == c + 1;
        }
        for (int l = 0; l < r->L; l++) {
            int C = r->ch[l], OC = r->ch[l + 1];
            for (int y = 0; y < V; y++)
                for (int x = 0; x < V; x++)
                    for (int o = 0; o < OC; o++) {
                        double s = P[r->cb[l] + o];
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int yy = y + ky - 1, xx = x + kx - 1;
                                if (yy < 0 || yy >= V || xx < 0 || xx >= V) continue;
                                for (int c = 0; c < C; c++) {
                                    size_t wi = torch ? (((size_t)o * C + c) * 3 + ky) * 3 + kx
                                                      : (((size_t)o * 3 + ky) * 3 + kx) * C + c;
                                    s += a[(yy * V + xx) * C + c] * P[r->cw[l] + wi];
                                }
                            }
                        nx[(y * V + x) * OC + o] = s > 0 ? s : 0;
                    }
            memcpy(a, nx, sizeof(double) * VV * OC);
        }
        int C = r->ch[r->L], F = VV * C;
        for (int h = 0; h < r->hidden; h++) {
            double s = P[r->fb + h];
            for (int q = 0; q < VV; q++)
                for (int c = 0; c < C; c++) {
                    size_t col = torch ? (size_t)c * VV + q : (size_t)q * C + c;
                    s += a[q * C + c] * P[r->fw + (size_t)h * F + col];
                }
            feat[h] = s > 0 ? s : 0;
        }
        for (int k = 0; k < NA; k++) {
            double s = P[r->ab + k];
            for (int h = 0; h < r->hidden; h++) s += feat[h] * P[r->aw + (size_t)k * r->hidden + h];
            logits[b * NA + k] = s;
        }
        for (int h = 0; h < r->hidden; h++) cin[h] = feat[h];
        cin[r->hidden] = r->E > 0 ? extra[2 * b] : 0.0;
        cin[r->hidden + 1] = r->E > 1 ? extra[2 * b + 1] : 0.0;
        for (int q = 0; q < VV; q++)
            for (int c = 0; c < C0; c++) {
                double v = r->img ? (double)im[c * VV + q] : cd[q] == c + 1;   /* ground truth always */
                cin[r->hidden + 2 + (torch ? c * VV + q : q * C0 + c)] = v;
            }
        for (int j = 0; j < r->CH; j++) {
            double s = P[r->qb + j];
            for (int i = 0; i < r->D; i++) s += cin[i] * P[r->qw + (size_t)j * r->D + i];
            chd[j] = s > 0 ? s : 0;
        }
        double v = P[r->vb];
        for (int j = 0; j < r->CH; j++) v += chd[j] * P[r->vw + j];
        value[b] = v;
    }
    free(a); free(nx); free(feat); free(cin); free(chd);
}

static double ref_loss(const refnet *r, const double *P, const uint8_t *codes,
                       const float *extra, int B, int proxy, const double *ga,
                       const double *gc, double *lg, double *vl) {
    ref_forward(r, P, codes, extra, B, proxy, 0, lg, vl);
    double s = 0;
    for (int i = 0; i < B * NA; i++) s += ga[i] * lg[i];
    for (int b = 0; b < B; b++) s += gc[b] * vl[b];
    return s;
}

static double max_rel(const float *a, const double *b, size_t n, double floor) {
    double num = 0, den = floor;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > num) num = fabs(a[i] - b[i]);
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* ------------------------------------------------------------ table */
static void test_table(void) {
    mr_policy_config cfg;
    ref_cfg(&cfg);
    mr_arena a = {0};
    mr_policy p;
    mr_policy_layout(&p, &cfg, 11, 0, 1, MR_CPU_CONV_IM2COL, &a);   /* planning only */
    CHECK(p.n_params == 4413673);
    CHECK(p.n_policy == 4025576);                 /* ENV_SPEC: about 4.03 M */
    CHECK(p.flat == 7744 && p.cin_dim == 756);
    CHECK(p.n_tensors == 14);
    size_t o = 0;
    int contiguous = 1;
    for (int i = 0; i < p.n_tensors; i++) {
        contiguous &= p.tensors[i].offset == o;
        size_t n = 1;
        for (int d = 0; d < p.tensors[i].ndim; d++) n *= (size_t)p.tensors[i].shape[d];
        contiguous &= n == p.tensors[i].count;
        o += p.tensors[i].count;
    }
    CHECK(contiguous && o == p.n_params);
    const mr_tensor_info *cw = mr_policy_tensor(&p, "critic.w");
    CHECK(cw && cw->offset == p.n_policy && cw->shape[0] == 512 && cw->shape[1] == 756);
    const mr_tensor_info *fw = mr_policy_tensor(&p, "fc.w");
    CHECK(fw && fw->shape[0] == 512 && fw->shape[1] == 7744);
    const mr_tensor_info *c0 = mr_policy_tensor(&p, "conv0.w");
    CHECK(c0 && c0->offset == 0 && c0->shape[0] == 32 && c0->shape[1] == 3 && c0->shape[3] == 2);
    const mr_tensor_info *ab = mr_policy_tensor(&p, "actor.b");
    CHECK(ab && ab->offset + ab->count == p.n_policy);
    const mr_tensor_info *vw = mr_policy_tensor(&p, "value.w"), *vb = mr_policy_tensor(&p, "value.b");
    CHECK(vw && vw->offset == p.value_w_offset && vw->count == 512);
    CHECK(vb && vb->offset == p.value_b_offset && vb->offset == p.n_params - 1);
    CHECK(mr_policy_tensor(&p, "nope") == NULL);
    CHECK(p.block % p.chunk == 0 && p.block >= MR_POLICY_BLOCK);
}

/* ------------------------------------------------------------ init */
/* max |W W^T - g^2 I| (rows <= cols) or |W^T W - g^2 I| (rows > cols), / g^2 */
static double ortho_err(const float *w, int rows, int cols, float gain) {
    int wide = rows <= cols, n = wide ? rows : cols;
    float *G = malloc(sizeof(float) * (size_t)n * n);
    if (wide) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, cols, 1, w, cols, w, cols, 0, G, n);
    else cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, rows, 1, w, cols, w, cols, 0, G, n);
    double e = 0, g2 = (double)gain * gain;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double d = fabs(G[i * n + j] - (i == j ? g2 : 0.0));
            if (d > e) e = d;
        }
    free(G);
    return e / g2;
}

static void check_init(mr_policy *p, const char *what) {
    for (int i = 0; i < p->n_tensors; i++) {
        const mr_tensor_info *t = &p->tensors[i];
        const float *w = p->params + t->offset;
        if (t->ndim == 1) {
            int zero = 1;
            for (size_t k = 0; k < t->count; k++) zero &= w[k] == 0.0f;
            CHECK_MSG(zero, "%s: bias %s is not zero after init", what, t->name);
            continue;
        }
        float gain = strcmp(t->name, "actor.w") == 0 ? 0.01f
                   : strcmp(t->name, "value.w") == 0 ? 1.0f : sqrtf(2.0f);
        int rows = t->shape[0], cols = (int)(t->count / (size_t)rows);
        double e = ortho_err(w, rows, cols, gain);
        CHECK_MSG(e < 2e-5 * sqrt((double)cols) + 1e-5, "%s: %s (%d x %d) not orthogonal x %g: err %g",
                  what, t->name, rows, cols, gain, e);
        /* not degenerate: mean square matches gain^2 * min(r,c) / (r*c) */
        double ms = 0;
        for (size_t k = 0; k < t->count; k++) ms += (double)w[k] * w[k];
        double want = (double)gain * gain * (rows < cols ? rows : cols);
        CHECK_NEAR(ms, want, 0, 1e-4);
    }
}

static void test_init(void) {
    mr_policy_config cfg;
    mr_arena a1, a2;
    mr_policy p1, p2;

    /* reference net: the big QR (7744 x 512), gains, biases */
    ref_cfg(&cfg);
    CHECK(make_policy(&p1, &a1, &cfg, 11, 0, 1));
    for (size_t i = 0; i < p1.n_params; i++) p1.params[i] = 7.0f;   /* init must overwrite */
    mr_policy_init(&p1, 42);
    check_init(&p1, "reference");
    float *keep = malloc(sizeof(float) * p1.n_params);
    memcpy(keep, p1.params, sizeof(float) * p1.n_params);
    omp_set_num_threads(1);
    mr_policy_init(&p1, 42);
    omp_set_num_threads(2);
    CHECK_MSG(memcmp(keep, p1.params, sizeof(float) * p1.n_params) == 0,
              "init differs between 1 and 2 threads");
    mr_policy_init(&p1, 43);
    size_t same = 0;
    for (size_t i = 0; i < p1.n_params; i++) same += keep[i] == p1.params[i] && keep[i] != 0.0f;
    CHECK_MSG(same < 100, "seeds 42 and 43 share %zu weights", same);
    free(keep);
    mr_arena_release(&a1);

    /* small net: same seed twice in two policies -> identical */
    small_cfg(&cfg);
    CHECK(make_policy(&p1, &a1, &cfg, 11, 4, 3));
    CHECK(make_policy(&p2, &a2, &cfg, 11, 4, 64));
    mr_policy_init(&p1, 7);
    mr_policy_init(&p2, 7);
    CHECK(memcmp(p1.params, p2.params, sizeof(float) * p1.n_params) == 0);
    check_init(&p1, "small");

    /* torch's sign fix (Q *= sign(diag R)) makes Q Haar-distributed; without
     * it Householder QR gives W[0][0] = Q[0][0] < 0 always. Over 16 seeds the
     * first element of every weight must take both signs about equally. */
    int pos = 0, tot = 0;
    for (uint64_t seed = 100; seed < 116; seed++) {
        mr_policy_init(&p1, seed);
        for (int i = 0; i < p1.n_tensors; i++)
            if (p1.tensors[i].ndim >= 2) { pos += p1.params[p1.tensors[i].offset] > 0; tot++; }
    }
    CHECK_MSG(pos > tot / 5 && pos < tot * 4 / 5, "W[0][0] > 0 in %d of %d inits", pos, tot);
    mr_arena_release(&a1);
    mr_arena_release(&a2);
}

/* ------------------------------------------------------------ gradient */
/* img: a float image of C channels (and one privileged critic input)
 * instead of cell codes: values in [-1, 1], zeros and grey levels */
static void test_gradient_in(int proxy, int activations, int C, int img) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    cfg.obs_channels = C;
    cfg.obs_image = img;
    cfg.critic_extra = img ? 1 : 0;
    const int V = 11, VV = V * V, B = 5;
    mr_arena ar;
    mr_policy p;
    CHECK(make_policy_with(&p, &ar, &cfg, V, 8, 2, activations));   /* chunk 2: several chunks */
    CHECK(p.obs_row == (img ? 4 * C * VV : VV));
    random_params(&p);
    float imgbuf[B * 4 * VV];   /* C <= 4 */
    uint8_t *cbuf = malloc(B * VV), *codes = img ? (uint8_t *)(void *)imgbuf : cbuf;
    float extra[2 * B], logits[B * NA], value[B], ga[B * NA], gc[B];
    random_inputs_c(cbuf, extra, B, VV, C);
    for (int i = 0; img && i < B * C * VV; i++) {
        const double u = urand();
        imgbuf[i] = u < 0.4 ? 0.0f : u < 0.6 ? 1.0f : (float)(2 * urand() - 1);
    }
    double gad[B * NA], gcd[B];
    for (int i = 0; i < B * NA; i++) gad[i] = ga[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < B; i++) gcd[i] = gc[i] = (float)(2 * urand() - 1);

    CHECK(mr_policy_forward(&p, codes, extra, B, proxy, logits, value) == 0);
    refnet r;
    refnet_from(&r, &p, &cfg, V);
    double *P = malloc(sizeof(double) * p.n_params);
    for (size_t i = 0; i < p.n_params; i++) P[i] = p.params[i];
    double lg[B * NA], vl[B];
    ref_forward(&r, P, codes, extra, B, proxy, 0, lg, vl);
    double el = max_rel(logits, lg, B * NA, 1e-3), ev = max_rel(value, vl, B, 1e-3);
    CHECK_MSG(el < 1e-5, "proxy=%d C=%d img=%d: logits vs double reference: rel err %g", proxy, C, img, el);
    CHECK_MSG(ev < 1e-5, "proxy=%d C=%d img=%d: value vs double reference: rel err %g", proxy, C, img, ev);

    mr_policy_zero_grad(&p);
    CHECK(mr_policy_backward(&p, ga, gc, B) == 0);

    /* central differences of the double loss, every element of the small
     * tensors and 300 random elements of each large one */
    const double eps = 1e-5, l0 = ref_loss(&r, P, codes, extra, B, proxy, gad, gcd, lg, vl);
    int kinks = 0, tried = 0;
    for (int t = 0; t < p.n_tensors; t++) {
        const mr_tensor_info *ti = &p.tensors[t];
        size_t n = ti->count < 300 ? ti->count : 300;
        double num = 0, den = 1e-6;
        int bad = 0;
        for (size_t k = 0; k < n; k++) {
            size_t e = ti->count <= 300 ? k : (size_t)(urand() * ti->count);
            size_t i = ti->offset + e;
            double s = P[i];
            P[i] = s + eps;
            double lp = ref_loss(&r, P, codes, extra, B, proxy, gad, gcd, lg, vl);
            P[i] = s - eps;
            double lm = ref_loss(&r, P, codes, extra, B, proxy, gad, gcd, lg, vl);
            P[i] = s;
            double fd = (lp - lm) / (2 * eps), g = p.grads[i];
            /* a ReLU input within eps of zero: the loss has a kink inside
             * [s - eps, s + eps] and the one-sided differences disagree; the
             * central one is no derivative there (counted, not compared) */
            const double fpl = (lp - l0) / eps, fmi = (l0 - lm) / eps;
            tried++;
            if (fabs(fpl - fmi) > 1e-3 * (fabs(fpl) + fabs(fmi)) + 1e-4) {
                kinks++;
                continue;
            }
            if (fabs(g - fd) > num) num = fabs(g - fd);
            if (fabs(fd) > den) den = fabs(fd);
            if (fabs(g - fd) > 1e-3 * fabs(fd) + 1e-4) bad++;
        }
        CHECK_MSG(num / den < 1e-3 && bad == 0,
                  "proxy=%d activations=%d C=%d img=%d: grad of %s vs differences: max err %g of max %g, %d elements "
                  "off", proxy, activations, C, img, ti->name, num, den, bad);
    }
    CHECK_MSG(kinks * 10 <= tried, "proxy=%d activations=%d C=%d: %d of %d elements at a kink: the check compared too "
              "few", proxy, activations, C, kinks, tried);

    /* backward accumulates: a second call doubles the gradient */
    float *g1 = malloc(sizeof(float) * p.n_params);
    memcpy(g1, p.grads, sizeof(float) * p.n_params);
    CHECK(mr_policy_backward(&p, ga, gc, B) == 0);
    double md = 0, mx = 1e-9;
    for (size_t i = 0; i < p.n_params; i++) {
        if (fabs(p.grads[i] - 2 * g1[i]) > md) md = fabs(p.grads[i] - 2 * g1[i]);
        if (fabs(g1[i]) > mx) mx = fabs(g1[i]);
    }
    CHECK_MSG(md / mx < 1e-5, "second backward did not accumulate: %g", md / mx);
    /* argument checks */
    CHECK(mr_policy_backward(&p, ga, gc, B - 1) == -1);
    CHECK(mr_policy_forward(&p, codes, extra, 9, proxy, logits, value) == -1);
    free(g1);
    free(P);
    free(cbuf);
    mr_arena_release(&ar);
}
static void test_gradient(int proxy, int activations, int C) { test_gradient_in(proxy, activations, C, 0); }

/* ------------------------------------------------------------ act / chunks / threads */
typedef struct { float *logits, *value, *grads; } run_out;

static void run(mr_policy *p, const uint8_t *codes, const float *extra, int B, int proxy,
                const float *ga, const float *gc, run_out *o) {
    o->logits = malloc(sizeof(float) * B * NA);
    o->value = malloc(sizeof(float) * B);
    o->grads = malloc(sizeof(float) * p->n_params);
    mr_policy_forward(p, codes, extra, B, proxy, o->logits, o->value);
    mr_policy_zero_grad(p);
    mr_policy_backward(p, ga, gc, B);
    memcpy(o->grads, p->grads, sizeof(float) * p->n_params);
}
static void run_free(run_out *o) { free(o->logits); free(o->value); free(o->grads); }

static void test_consistency(int C) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    cfg.obs_channels = C;
    const int V = 11, VV = V * V, B = 600;   /* 3 blocks of >= 256, the last partial */
    mr_arena a3, a64;
    mr_policy p3, p64;
    CHECK(make_policy(&p3, &a3, &cfg, V, B, 3));
    CHECK(make_policy(&p64, &a64, &cfg, V, B, 64));
    random_params(&p3);
    memcpy(p64.params, p3.params, sizeof(float) * p3.n_params);
    uint8_t *codes = malloc((size_t)B * VV);
    float *extra = malloc(sizeof(float) * 2 * B), *ga = malloc(sizeof(float) * B * NA),
          *gc = malloc(sizeof(float) * B);
    random_inputs_c(codes, extra, B, VV, C);
    for (int i = 0; i < B * NA; i++) ga[i] = (float)(2 * urand() - 1) / B;
    for (int i = 0; i < B; i++) gc[i] = (float)(2 * urand() - 1) / B;

    for (int proxy = 0; proxy < (C == 2 ? 2 : 1); proxy++) {   /* the proxies are foraging's (C = 2) */
        run_out r3, r64, r1t;
        run(&p3, codes, extra, B, proxy, ga, gc, &r3);
        run(&p64, codes, extra, B, proxy, ga, gc, &r64);

        /* act == training forward, bit for bit, for both chunkings */
        float *al = malloc(sizeof(float) * B * NA), *av = malloc(sizeof(float) * B);
        mr_policy_act(&p3, codes, extra, B, proxy, al, av);
        CHECK_MSG(memcmp(al, r3.logits, sizeof(float) * B * NA) == 0 &&
                  memcmp(av, r3.value, sizeof(float) * B) == 0,
                  "proxy=%d chunk 3: act and forward differ", proxy);
        mr_policy_act(&p64, codes, extra, B, proxy, al, av);
        CHECK_MSG(memcmp(al, r64.logits, sizeof(float) * B * NA) == 0 &&
                  memcmp(av, r64.value, sizeof(float) * B) == 0,
                  "proxy=%d chunk 64: act and forward differ", proxy);
        /* act on a prefix: other sgemm shapes (a block of 37), so a sample's
         * last bits may change with its place in the batch; the values agree */
        mr_policy_act(&p64, codes, extra, 37, proxy, al, av);
        double ep = check_relerr(al, r64.logits, (size_t)37 * NA, 1e-3);
        CHECK_MSG(ep < 1e-5, "proxy=%d: act on 37 samples vs forward on 600: %g", proxy, ep);

        /* chunk 3 vs 64: the same function; sgemm shapes differ, so last bits may */
        double el = check_relerr(r3.logits, r64.logits, (size_t)B * NA, 1e-3);
        double ev = check_relerr(r3.value, r64.value, B, 1e-3);
        double eg = check_relerr(r3.grads, r64.grads, p3.n_params, 1e-9);
        CHECK_MSG(el < 1e-5 && ev < 1e-5, "proxy=%d chunk 3 vs 64 outputs: %g %g", proxy, el, ev);
        CHECK_MSG(eg < 1e-4, "proxy=%d chunk 3 vs 64 gradients: rel err %g", proxy, eg);

        /* 1 vs 2 threads: bit-identical */
        omp_set_num_threads(1);
        run(&p64, codes, extra, B, proxy, ga, gc, &r1t);
        float *al1 = malloc(sizeof(float) * B * NA), *av1 = malloc(sizeof(float) * B);
        mr_policy_act(&p64, codes, extra, B, proxy, al1, av1);
        omp_set_num_threads(2);
        CHECK_MSG(memcmp(r1t.logits, r64.logits, sizeof(float) * B * NA) == 0 &&
                  memcmp(r1t.value, r64.value, sizeof(float) * B) == 0,
                  "proxy=%d: forward differs between 1 and 2 threads", proxy);
        CHECK_MSG(memcmp(r1t.grads, r64.grads, sizeof(float) * p64.n_params) == 0,
                  "proxy=%d: gradients differ between 1 and 2 threads", proxy);
        CHECK_MSG(memcmp(al1, r64.logits, sizeof(float) * B * NA) == 0 &&
                  memcmp(av1, r64.value, sizeof(float) * B) == 0,
                  "proxy=%d: act differs between 1 and 2 threads", proxy);
        free(al); free(av); free(al1); free(av1);
        run_free(&r3); run_free(&r64); run_free(&r1t);
    }
    /* the modes differ (the trunk sees the proxy view) */
    float l0[NA], l1[NA], v0, v1;
    mr_policy_act(&p64, codes, extra, 1, 0, l0, &v0);
    mr_policy_act(&p64, codes, extra, 1, 1, l1, &v1);
    if (C == 2) CHECK(memcmp(l0, l1, sizeof l0) != 0);
    free(codes); free(extra); free(ga); free(gc);
    mr_arena_release(&a3);
    mr_arena_release(&a64);
}

/* ------------------------------------------------------------ recompute */
/* Recomputing the trunk in the backward against keeping it: the forward and
 * every gradient but fc's bit for bit (the same chunk calls), fc's to float
 * rounding (its weight gradient is summed rblock by rblock), on a batch of
 * three rblocks, the last partial; 1 and 2 threads bit-identical; and the
 * memory it saves on ENV_SPEC's network and batch (plans only). */
static void test_recompute(void) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    const int V = 11, VV = V * V, B = 2 * MR_POLICY_RBLOCK + 300;
    mr_arena as, ar;
    mr_policy ps, pr;
    CHECK(make_policy_with(&ps, &as, &cfg, V, B, 32, MR_CPU_ACTIVATIONS_STORE));
    CHECK(make_policy_with(&pr, &ar, &cfg, V, B, 32, MR_CPU_ACTIVATIONS_RECOMPUTE));
    CHECK(pr.rblock >= MR_POLICY_RBLOCK && pr.rblock % pr.block == 0 && pr.rblock < B);
    random_params(&ps);
    memcpy(pr.params, ps.params, sizeof(float) * ps.n_params);
    uint8_t *codes = malloc((size_t)B * VV);
    float *extra = malloc(sizeof(float) * 2 * B), *ga = malloc(sizeof(float) * B * NA),
          *gc = malloc(sizeof(float) * B);
    random_inputs(codes, extra, B, VV);
    for (int i = 0; i < B * NA; i++) ga[i] = (float)(2 * urand() - 1) / B;
    for (int i = 0; i < B; i++) gc[i] = (float)(2 * urand() - 1) / B;
    const mr_tensor_info *fw = mr_policy_tensor(&ps, "fc.w"), *fb = mr_policy_tensor(&ps, "fc.b");
    for (int proxy = 0; proxy < 2; proxy++) {
        run_out s, r, r1;
        run(&ps, codes, extra, B, proxy, ga, gc, &s);
        run(&pr, codes, extra, B, proxy, ga, gc, &r);
        CHECK_MSG(memcmp(s.logits, r.logits, sizeof(float) * B * NA) == 0 &&
                  memcmp(s.value, r.value, sizeof(float) * B) == 0,
                  "proxy=%d: the forward differs between store and recompute", proxy);
        for (int t = 0; t < ps.n_tensors; t++) {
            const mr_tensor_info *ti = &ps.tensors[t];
            if (ti == fw || ti == fb) continue;
            CHECK_MSG(memcmp(s.grads + ti->offset, r.grads + ti->offset, sizeof(float) * ti->count) == 0,
                      "proxy=%d: grad of %s differs between store and recompute", proxy, ti->name);
        }
        double ew = check_relerr(s.grads + fw->offset, r.grads + fw->offset, fw->count, 1e-9);
        double eb = check_relerr(s.grads + fb->offset, r.grads + fb->offset, fb->count, 1e-9);
        CHECK_MSG(ew < 1e-5 && eb < 1e-5, "proxy=%d: fc grads store vs recompute: %g %g", proxy, ew, eb);
        /* gemm.c's kernels (fc_own) sum K in blocks of MR_GEMM_KC from k = 0,
         * and rblocks are whole blocks: the split sums are the same sums.
         * OpenBLAS's (im2col) differ in the last bits: the split happened. */
        if (pr.fc_own && pr.rblock % MR_GEMM_KC == 0)
            CHECK_MSG(ew == 0, "proxy=%d: fc.w's gradient differs between store and recompute on gemm.c", proxy);
        else
            CHECK_MSG(ew > 0, "proxy=%d: fc.w's gradient is bit-identical: the rblock split did not happen", proxy);
        omp_set_num_threads(1);
        run(&pr, codes, extra, B, proxy, ga, gc, &r1);
        omp_set_num_threads(2);
        CHECK_MSG(memcmp(r1.grads, r.grads, sizeof(float) * pr.n_params) == 0,
                  "proxy=%d: recompute's gradients differ between 1 and 2 threads", proxy);
        run_free(&s); run_free(&r); run_free(&r1);
    }
    /* auto recomputing with an allowance of one rblock: the first rblock's
     * activations kept and read, the rest recomputed; recompute's bits */
    {
        size_t per_sample = 0;
        for (int l = 0; l < pr.num_conv; l++) per_sample += ((size_t)VV * pr.ch[l + 1] + 15) / 16 * 16 * sizeof(float);
        mr_policy_options ko = {32, g_conv, MR_CPU_ACTIVATIONS_AUTO, 0, {0}, 0};
        ko.keep_bytes = (size_t)pr.rblock * per_sample + 1;
        mr_arena ak = {0};
        mr_policy pk;
        mr_policy_layout_with(&pk, &cfg, V, B, &ko, &ak);
        const size_t planned = ak.size;
        CHECK(mr_arena_commit(&ak) == 0);
        mr_policy_layout_with(&pk, &cfg, V, B, &ko, &ak);
        CHECK_MSG(pk.recompute && pk.kept == pr.rblock && ak.used == planned,
                  "auto with an allowance of one rblock: recompute %d, kept %d (rblock %d)", pk.recompute, pk.kept,
                  pr.rblock);
        size_t exact = 0;   /* the kept rows of every layer, unrounded; the arena aligns each buffer */
        for (int l = 0; l < pk.num_conv; l++) exact += (size_t)pk.kept * VV * pk.ch[l + 1] * sizeof(float);
        const size_t more = planned - mr_policy_bytes_with(&cfg, V, B, &(mr_policy_options){32, g_conv,
                                                          MR_CPU_ACTIVATIONS_RECOMPUTE, 0, {0}, 0});
        CHECK_MSG(more >= exact && more <= exact + (size_t)pk.num_conv * 4096,
                  "the kept rblock costs %zu bytes more than recomputing, its activations %zu", more, exact);
        memcpy(pk.params, ps.params, sizeof(float) * ps.n_params);
        for (int proxy = 0; proxy < 2; proxy++) {
            run_out r, k;
            run(&pr, codes, extra, B, proxy, ga, gc, &r);
            run(&pk, codes, extra, B, proxy, ga, gc, &k);
            CHECK_MSG(memcmp(r.logits, k.logits, sizeof(float) * B * NA) == 0 &&
                      memcmp(r.grads, k.grads, sizeof(float) * pk.n_params) == 0,
                      "proxy=%d: keeping the first rblock changed recompute's forward or gradients", proxy);
            run_free(&r); run_free(&k);
        }
        mr_policy_free(&pk);
        mr_arena_release(&ak);
    }
    free(codes); free(extra); free(ga); free(gc);
    mr_policy_free(&ps);
    mr_policy_free(&pr);
    mr_arena_release(&as);
    mr_arena_release(&ar);

    /* ENV_SPEC: 192 envs x 128 steps in one minibatch */
    mr_policy_config ref;
    ref_cfg(&ref);
    const mr_policy_options so = {32, g_conv, MR_CPU_ACTIVATIONS_STORE, 0, {0}, 0}, ro = {32, g_conv, MR_CPU_ACTIVATIONS_RECOMPUTE, 0, {0}, 0};
    size_t store = mr_policy_bytes_with(&ref, 11, 192 * 128, &so), rec = mr_policy_bytes_with(&ref, 11, 192 * 128, &ro);
    printf("  ENV_SPEC network, 24,576 samples: store %.0f MiB, recompute %.0f MiB\n", store / 1048576.0,
           rec / 1048576.0);
    CHECK_MSG(store > ((size_t)2 << 30) && rec < ((size_t)600 << 20), "store %zu, recompute %zu bytes", store, rec);
    /* auto: recompute there; keep for the small net at 64 x 64 and for a batch below one rblock */
    const mr_policy_options ao = {32, g_conv, MR_CPU_ACTIVATIONS_AUTO, 0, {0}, 0};
    mr_arena plan = {0};
    mr_policy pa;
    mr_policy_layout_with(&pa, &ref, 11, 192 * 128, &ao, &plan);
    CHECK_MSG(pa.recompute, "auto keeps the reference network's activations at 192 x 128");
    mr_policy_config small;
    small_cfg(&small);
    small.conv_channels[0] = 16;
    small.conv_channels[1] = 32;
    small.hidden = small.critic_hidden = 128;
    memset(&plan, 0, sizeof plan);
    mr_policy_layout_with(&pa, &small, 11, 64 * 64, &ao, &plan);
    CHECK_MSG(!pa.recompute, "auto recomputes the small network's activations at 64 x 64");
    memset(&plan, 0, sizeof plan);
    mr_policy_layout_with(&pa, &ref, 11, 300, &ao, &plan);
    CHECK_MSG(!pa.recompute, "auto recomputes a batch smaller than one rblock");
}

/* ------------------------------------------------------------ act keeping the update's forward */
/* mr_policy_act_keep over a batch in rollout-sized pieces, then
 * mr_policy_forward_kept and the backward, against mr_policy_forward +
 * backward on the same batch (itself checked against float64 above): the
 * outputs act's (bit for bit but where a piece straddles the kept rows'
 * end), and the forward's within float rounding (a
 * sample's last bits may depend on its place in a batch); the gradients
 * within rounding; the value head taken again after it changed (PopArt);
 * with store, recompute, and auto keeping one rblock (pieces straddle the
 * kept rows' end); and the misuses refused. */
static void test_act_keep(void) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    const int V = 11, VV = V * V, B = 2 * MR_POLICY_RBLOCK + 300, N = 100;
    uint8_t *codes = malloc((size_t)B * VV);
    float *extra = malloc(sizeof(float) * 2 * B), *ga = malloc(sizeof(float) * B * NA),
          *gc = malloc(sizeof(float) * B), *kl = malloc(sizeof(float) * B * NA), *kv = malloc(sizeof(float) * B),
          *al = malloc(sizeof(float) * N * NA), *av = malloc(sizeof(float) * N), *fv = malloc(sizeof(float) * B),
          *kg = NULL, *P0 = NULL;
    random_inputs(codes, extra, B, VV);
    for (int i = 0; i < B * NA; i++) ga[i] = (float)(2 * urand() - 1) / B;
    for (int i = 0; i < B; i++) gc[i] = (float)(2 * urand() - 1) / B;
    for (int mode = 0; mode < 3; mode++) {
        mr_arena a;
        mr_policy p;
        if (mode < 2) {
            CHECK(make_policy_with(&p, &a, &cfg, V, B, 32,
                                   mode == 0 ? MR_CPU_ACTIVATIONS_STORE : MR_CPU_ACTIVATIONS_RECOMPUTE));
        } else {   /* auto keeping the first rblock only */
            size_t per_sample = 0;
            for (int l = 0; l < cfg.num_conv; l++)
                per_sample += ((size_t)VV * cfg.conv_channels[l] + 15) / 16 * 16 * sizeof(float);
            mr_policy_options ko = {32, g_conv, MR_CPU_ACTIVATIONS_AUTO, 0, {0}, 0};
            ko.keep_bytes = (size_t)MR_POLICY_RBLOCK * per_sample + 1;
            memset(&a, 0, sizeof a);
            mr_policy_layout_with(&p, &cfg, V, B, &ko, &a);
            CHECK(mr_arena_commit(&a) == 0);
            mr_policy_layout_with(&p, &cfg, V, B, &ko, &a);
            CHECK_MSG(p.recompute && p.kept > 0 && p.kept % N != 0, "auto keeps %d rows", p.kept);
        }
        if (!P0) {
            random_params(&p);
            P0 = malloc(sizeof(float) * p.n_params);
            kg = malloc(sizeof(float) * p.n_params);
            memcpy(P0, p.params, sizeof(float) * p.n_params);
        }
        memcpy(p.params, P0, sizeof(float) * p.n_params);
        const mr_tensor_info *vw = mr_policy_tensor(&p, "value.w"), *vb = mr_policy_tensor(&p, "value.b");
        for (int proxy = 0; proxy < 2; proxy++) {
            memcpy(p.params, P0, sizeof(float) * p.n_params);
            for (int r0 = 0; r0 < B; r0 += N) {
                const int n = B - r0 < N ? B - r0 : N;
                CHECK(mr_policy_act_keep(&p, codes + (size_t)r0 * VV, extra + 2 * r0, n, proxy,
                                         kl + (size_t)r0 * NA, kv + r0, r0) == 0);
                mr_policy_act(&p, codes + (size_t)r0 * VV, extra + 2 * r0, n, proxy, al, av);
                /* a piece across the kept rows' end runs as two (im2col's
                 * sgemm shapes then differ in the last bits) */
                if (p.recompute && r0 < p.kept && r0 + n > p.kept)
                    CHECK_MSG(check_relerr(al, kl + (size_t)r0 * NA, (size_t)n * NA, 1e-3) < 1e-5,
                              "mode %d proxy=%d rows %d..: act_keep's outputs are not act's", mode, proxy, r0);
                else
                    CHECK_MSG(memcmp(al, kl + (size_t)r0 * NA, sizeof(float) * n * NA) == 0 &&
                              memcmp(av, kv + r0, sizeof(float) * n) == 0,
                              "mode %d proxy=%d rows %d..: act_keep's outputs are not act's", mode, proxy, r0);
            }
            CHECK_MSG(mr_policy_backward(&p, ga, gc, B) == -1, "a backward after act_keep, before forward_kept");
            CHECK(mr_policy_forward_kept(&p, B, 1 - proxy, fv) == -1);   /* kept with the other expansion */
            CHECK(mr_policy_forward_kept(&p, B - 1, proxy, fv) == -1);   /* rows not all covered */
            /* the value head rescaled after the rollout, as PopArt does */
            for (size_t k = 0; k < vw->count; k++) p.params[vw->offset + k] *= 0.75f;
            p.params[vb->offset] += 0.125f;
            CHECK(mr_policy_forward_kept(&p, B, proxy, fv) == 0);
            mr_policy_zero_grad(&p);
            CHECK(mr_policy_backward(&p, ga, gc, B) == 0);
            memcpy(kg, p.grads, sizeof(float) * p.n_params);

            run_out f;
            run(&p, codes, extra, B, proxy, ga, gc, &f);
            double el = check_relerr(kl, f.logits, (size_t)B * NA, 1e-3);
            double ev = check_relerr(fv, f.value, B, 1e-3);
            double eg = check_relerr(kg, f.grads, p.n_params, 1e-9);
            CHECK_MSG(el < 1e-5 && ev < 1e-5, "mode %d proxy=%d: kept outputs vs the forward's: %g %g", mode, proxy,
                      el, ev);
            CHECK_MSG(eg < 1e-4, "mode %d proxy=%d: gradients from the kept rows vs the forward's: %g", mode, proxy,
                      eg);
            /* the value head was taken again: its old outputs are far */
            CHECK_MSG(check_relerr(kv, f.value, B, 1e-3) > 1e-2, "mode %d: the value is the rollout's", mode);
            run_free(&f);
        }
        CHECK(mr_policy_act_keep(&p, codes, extra, N, 0, kl, kv, B - N + 1) == -1);   /* past the batch */
        CHECK(mr_policy_act_keep(&p, codes, extra, N, 0, kl, kv, -1) == -1);
        mr_policy_free(&p);
        mr_arena_release(&a);
    }
    free(codes); free(extra); free(ga); free(gc); free(kl); free(kv); free(al); free(av); free(fv); free(kg);
    free(P0);
}

/* fc's forward on gemm.c's kernels (AVX-512): act's few rows through their
 * transpose, more rows through the weights'; the same bits for the same
 * samples either way, and the double reference's values. */
static void test_fc_transposes(void) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    cfg.hidden = 32;
    const int V = 11, VV = V * V, B = 48, H = 32;
    mr_arena ar;
    mr_policy p;
    CHECK(make_policy(&p, &ar, &cfg, V, B, 2));
    if (!mr_gemm_wide(16) || g_conv == MR_CPU_CONV_IM2COL) {   /* OpenBLAS's fc there */
        CHECK(!p.fc_own);
        mr_arena_release(&ar);
        return;
    }
    CHECK(p.fc_own && p.fc_xt && p.fc_wt && p.fc_xrows == H);
    random_params(&p);
    uint8_t *codes = malloc((size_t)B * VV);
    float *extra = malloc(sizeof(float) * 2 * B), *lg = malloc(sizeof(float) * B * NA), *vl = malloc(sizeof(float) * B);
    float *f48 = malloc(sizeof(float) * B * H);
    random_inputs(codes, extra, B, VV);
    mr_policy_act(&p, codes, extra, B, 1, lg, vl);   /* 48 rows >= 32 outputs: the weights transposed */
    memcpy(f48, p.b_feat, sizeof(float) * B * H);
    mr_policy_act(&p, codes, extra, 16, 1, lg, vl);  /* 16 rows: their transpose */
    CHECK_MSG(memcmp(f48, p.b_feat, sizeof(float) * 16 * H) == 0,
              "fc's features of 16 samples differ between the inputs' transpose and the weights'");
    CHECK(mr_policy_forward(&p, codes, extra, 16, 1, lg, vl) == 0);
    refnet r;
    refnet_from(&r, &p, &cfg, V);
    double *P = malloc(sizeof(double) * p.n_params), lgd[16 * NA], vld[16];
    for (size_t i = 0; i < p.n_params; i++) P[i] = p.params[i];
    ref_forward(&r, P, codes, extra, 16, 1, 0, lgd, vld);
    double el = max_rel(lg, lgd, 16 * NA, 1e-3), ev = max_rel(vl, vld, 16, 1e-3);
    CHECK_MSG(el < 1e-5 && ev < 1e-5, "fc through the inputs' transpose vs double: logits %g, value %g", el, ev);
    /* act_keep's batch of 16-row acts: fc.w transposed once at its first act
     * (the weights' path), the same bits as act's inputs' transpose; the
     * next batch, straight after the parameters changed, reads the new ones */
    float *kl = malloc(sizeof(float) * B * NA), *kv = malloc(sizeof(float) * B), *fk = malloc(sizeof(float) * B * H);
    for (int batch = 0; batch < 2; batch++) {
        if (batch) p.params[mr_policy_tensor(&p, "fc.w")->offset + 5] += 0.5f;   /* between the two batches */
        for (int r0 = 0; r0 < B; r0 += 16) {
            CHECK(mr_policy_act_keep(&p, codes + (size_t)r0 * VV, extra + 2 * r0, 16, 1, kl + (size_t)r0 * NA,
                                     kv + r0, r0) == 0);
            CHECK_MSG(p.fc_wt_fresh, "act_keep's rows %d..: not on fc.w's transpose", r0);
            memcpy(fk + (size_t)r0 * H, p.feat + (size_t)r0 * H, sizeof(float) * 16 * H);
        }
    }
    for (int r0 = 0; r0 < B; r0 += 16) {   /* the second batch's */
        mr_policy_act(&p, codes + (size_t)r0 * VV, extra + 2 * r0, 16, 1, lg, vl);
        CHECK_MSG(!p.fc_wt_fresh && !memcmp(fk + (size_t)r0 * H, p.b_feat, sizeof(float) * 16 * H) &&
                      !memcmp(kl + (size_t)r0 * NA, lg, sizeof(float) * 16 * NA) &&
                      !memcmp(kv + r0, vl, sizeof(float) * 16),
                  "rows %d..: act_keep's batch differs from act's inputs' transpose", r0);
    }
    free(kl); free(kv); free(fk);
    free(codes); free(extra); free(lg); free(vl); free(f48); free(P);
    mr_arena_release(&ar);
}

/* ------------------------------------------------------------ torch order */
static void test_permute(void) {
    mr_policy_config cfg;
    small_cfg(&cfg);
    const int V = 11, VV = V * V, B = 3;
    mr_arena ar;
    mr_policy p;
    CHECK(make_policy(&p, &ar, &cfg, V, B, 2));
    random_params(&p);   /* read as torch-ordered */
    float *torch = malloc(sizeof(float) * p.n_params);
    memcpy(torch, p.params, sizeof(float) * p.n_params);
    mr_policy_permute_torch(&p, torch, p.params);
    uint8_t codes[B * VV];
    float extra[2 * B], logits[B * NA], value[B];
    random_inputs(codes, extra, B, VV);
    refnet r;
    refnet_from(&r, &p, &cfg, V);
    double *P = malloc(sizeof(double) * p.n_params);
    for (size_t i = 0; i < p.n_params; i++) P[i] = torch[i];
    double lg[B * NA], vl[B];
    ref_forward(&r, P, codes, extra, B, 1, 1, lg, vl);   /* the torch network */
    mr_policy_act(&p, codes, extra, B, 1, logits, value);
    double el = max_rel(logits, lg, B * NA, 1e-3), ev = max_rel(value, vl, B, 1e-3);
    CHECK_MSG(el < 1e-5 && ev < 1e-5, "permuted torch params: %g %g", el, ev);
    CHECK(memcmp(torch, p.params, sizeof(float) * p.n_params) != 0);
    free(torch);
    free(P);
    mr_arena_release(&ar);
}

int main(void) {
    check_seed(0x5eed5eed12345678ULL);
    omp_set_num_threads(2);
    test_table();
    test_init();
    /* im2col, then oneDNN + the first layer from the codes, then Winograd + the first from the codes */
    const int convs[3] = {MR_CPU_CONV_IM2COL, MR_CPU_CONV_ONEDNN, MR_CPU_CONV_WINOGRAD};
    const char *names[3] = {"im2col", "onednn", "winograd"};
    for (int k = 0; k < 3; k++) {
        g_conv = convs[k];
        int before = check_failed;
        for (int proxy = 0; proxy < 2; proxy++) {
            test_gradient(proxy, MR_CPU_ACTIVATIONS_STORE, 2);
            test_gradient(proxy, MR_CPU_ACTIVATIONS_RECOMPUTE, 2);
        }
        /* more input channels (one-hot codes, snake's 4): the first layer from the codes for each C */
        test_gradient(MR_EXPAND_TRUTH, MR_CPU_ACTIVATIONS_STORE, 4);
        test_gradient(MR_EXPAND_TRUTH, MR_CPU_ACTIVATIONS_RECOMPUTE, 3);
        test_gradient(MR_EXPAND_TRUTH, MR_CPU_ACTIVATIONS_STORE, 1);
        /* a float image (catch's kind): layer 0 on the floats themselves, the critic reading the image */
        test_gradient_in(0, MR_CPU_ACTIVATIONS_STORE, 3, 1);
        test_gradient_in(0, MR_CPU_ACTIVATIONS_RECOMPUTE, 2, 1);
        test_consistency(2);
        test_consistency(4);
        test_recompute();
        test_act_keep();
        test_permute();
        test_fc_transposes();
        if (check_failed != before) printf("  (those failures: cpu.conv = %s)\n", names[k]);
    }
    return check_report("test_policy");
}

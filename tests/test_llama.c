/* test_llama.c — the LLaMA family: its ops against direct formulas (RoPE against a complex-number
 * transcription, RMSNorm against its Jacobian, SwiGLU against its derivative, grouped-query attention
 * against multi-head attention on repeated heads), backward against central finite differences in
 * double on every parameter (grouped-query, tied and untied), the float model against the double one,
 * bit-identical results for 1, 2 and 3 threads, the bf16 model equal to its emulation on the widening
 * path and near it on oneDNN's, initialisation and the loss at init, llama2.c's model file (a file laid
 * out by this test loads with every tensor in place; a saved file is read back by this test's own
 * reader and its logits recomputed by a transcription of llama2.c's forward pass), and bad files and
 * configs with their messages. */
#include "collage.h"
#include "collage_model.h"
#include "graph_model.h"
#include "harness.h"
#include "llama_plan.h"
#include "nn_llama.h"
#include <complex.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ tolerances */
#define ROPE_TOL_F64 1e-14    /* |rope − complex product| / max|x|, double */
#define ROPE_TOL_F32 4e-7     /* the same in float (a few ulp of the products) */
#define OP_TOL_F64 1e-13      /* RMSNorm, SwiGLU against their formulas in double, relative to the largest value */
#define OP_TOL_F32 1e-5       /* the float ops against the double ones, relative */
#define FD_STEP 1e-3          /* 4-point central difference, error O(h^4) */
#define FD_REL_TOL 1e-6
#define FD_ABS_TOL 1e-10
#define F32_GRAD_TOL 1e-4     /* float model vs double: max |Δg| / max |g| per tensor */
#define F32_LOSS_TOL 1e-6
#define ACCUM_TOL 1e-14
#define INIT_LOSS_TOL 0.1     /* |loss at init − ln V| */
#define INIT_STD_REL 0.05     /* sample std of an initialised matrix vs its σ */
#define BF16_PATH_LOSS_REL 1e-3  /* the bf16 model on oneDNN's path vs the emulated one */
#define BF16_PATH_GRAD_COS 0.999
#define BF16_FP64_LOSS_REL 2e-3  /* the bf16 model vs the fp64 one on the same weights (measured 3e-5) */
#define BF16_FP64_GRAD_COS 0.999 /* (measured 0.99999) */
#define F32_FP64_GRAD_COS 0.999999 /* the fp32 model's gradient vs fp64's, llama-tiny */
#define REF_LOGIT_TOL 2e-5    /* collage's float logits vs the double transcription of llama2.c, absolute */

#define SEED 20261126ULL

static collage_model_config micro(int untied) {
    return (collage_model_config){.family = COLLAGE_FAMILY_LLAMA, .vocab_size = 19, .padded_vocab_size = 24,
                                  .max_seq_len = 8, .num_layers = 2, .num_heads = 4, .num_kv_heads = 2,
                                  .channels = 16, .hidden_dim = 24, .untied = untied, .norm_eps = 1e-5,
                                  .rope_theta = 10000.0};
}

static collage_model_config tiny(int untied) {
    collage_model_config c;
    collage_model_preset("llama-tiny", &c);
    c.untied = untied;
    return c;
}

static void set_threads(int n) { collage_set_threads(n); }

/* Random parameters that exercise every path: matrices U(−0.4, 0.4), norms 1 ± 0.2, rounded to float. */
static void random_params(const collage_model_config *c, double *w, unsigned long long seed) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(c, t, COLLAGE_MODEL_MAX_TENSORS);
    h_seed(seed);
    for (int k = 0; k < nt; k++)
        for (size_t i = 0; i < t[k].count; i++) {
            const double u = h_uniform() - 0.5;
            w[t[k].offset + i] = (double)(float)(t[k].decay ? 0.8 * u : 1.0 + 0.4 * u);
        }
}

static void random_tokens(int *tok, int *tgt, int n, int V) {
    for (int i = 0; i < n; i++) { tok[i] = (int)(h_rand32() % (unsigned)V); tgt[i] = (int)(h_rand32() % (unsigned)V); }
}

static double rnd_sym(void) { return 2.0 * h_uniform() - 1.0; }

/* ------------------------------------------------------------------ RoPE */
/* Each pair (x[2i], x[2i+1]) of a head at position t is the complex number x[2i] + i·x[2i+1] times
 * e^{i·t·θ^(−2i/hs)}: llama2.c's (and Meta's) rotation, written with C99 complex numbers. */
static void test_rope_against_complex(void) {
    const int hss[] = {2, 8, 14, 64}, B = 2, T = 37, NHD = 3;
    const double thetas[] = {10000.0, 500000.0};
    double worst64 = 0, worst32 = 0, worst_back = 0, worst_adj = 0;
    h_seed(SEED);
    for (size_t ih = 0; ih < sizeof hss / sizeof hss[0]; ih++)
        for (int it = 0; it < 2; it++) {
            const int hs = hss[ih], ld = NHD * hs + 5, N = B * T;
            const double theta = thetas[it];
            double *x = malloc(sizeof(double) * N * ld), *y = malloc(sizeof(double) * N * ld);
            double *d = malloc(sizeof(double) * N * ld), *cs = malloc(sizeof(double) * T * hs);
            float *xf = malloc(sizeof(float) * N * ld), *csf = malloc(sizeof(float) * T * hs);
            for (int i = 0; i < N * ld; i++) { x[i] = rnd_sym(); d[i] = rnd_sym(); xf[i] = (float)x[i]; }
            nn_rope_table_f64(cs, T, hs, theta);
            nn_rope_table_f32(csf, T, hs, theta);
            memcpy(y, x, sizeof(double) * N * ld);
            nn_rope_forward_f64(y, cs, B, T, ld, NHD, hs, 0, 1);
            nn_rope_forward_f32(xf, csf, B, T, ld, NHD, hs, 0, 1);
            int untouched = 1;
            for (int n = 0; n < N; n++) {
                const int t = n % T;
                for (int j = NHD * hs; j < ld; j++) untouched &= y[n * ld + j] == x[n * ld + j];
                for (int h = 0; h < NHD; h++)
                    for (int i = 0; i < hs / 2; i++) {
                        const int at = n * ld + h * hs + 2 * i;
                        const double complex one_i = (double complex)I; /* I is float complex */
                        const double complex z = (x[at] + one_i * x[at + 1]) * cexp(one_i * ((double)t * pow(theta, -2.0 * i / hs)));
                        worst64 = fmax(worst64, fmax(fabs(y[at] - creal(z)), fabs(y[at + 1] - cimag(z))));
                        worst32 = fmax(worst32, fmax(fabs((double)xf[at] - creal(z)), fabs((double)xf[at + 1] - cimag(z))));
                    }
            }
            CHECK(untouched, "hs %d: columns after the heads changed", hs);
            /* the backward is the transpose: ⟨R x, d⟩ = ⟨x, Rᵀ d⟩, and Rᵀ R x = x */
            double lhs = 0, rhs = 0;
            for (int i = 0; i < N * ld; i++) lhs += y[i] * d[i];
            nn_rope_backward_f64(d, cs, B, T, ld, NHD, hs, 0, 1);
            for (int i = 0; i < N * ld; i++) rhs += x[i] * d[i];
            worst_adj = fmax(worst_adj, fabs(lhs - rhs) / (fabs(lhs) + 1));
            nn_rope_backward_f64(y, cs, B, T, ld, NHD, hs, 0, 1);
            for (int i = 0; i < N * ld; i++) worst_back = fmax(worst_back, fabs(y[i] - x[i]));
            free(x); free(y); free(d); free(cs); free(xf); free(csf);
        }
    printf("    positions 0..36, head sizes 2, 8, 14, 64, theta 1e4 and 5e5: |rope - complex| double %.1e, float %.1e;\n"
           "    backward: adjoint %.1e, R^T R x - x %.1e\n", worst64, worst32, worst_adj, worst_back);
    CHECK(worst64 <= ROPE_TOL_F64, "double rope vs complex: %.3e", worst64);
    CHECK(worst32 <= ROPE_TOL_F32, "float rope vs complex: %.3e", worst32);
    CHECK(worst_adj <= ROPE_TOL_F64 * 100 && worst_back <= ROPE_TOL_F64, "rope backward: adjoint %.3e, inverse %.3e",
          worst_adj, worst_back);
}

/* ------------------------------------------------------------------ RMSNorm */
/* out = w·x·r, r = (Σx²/C + eps)^(−1/2); the backward against the Jacobian ∂out_j/∂x_k = w_j (δ_jk r −
 * x_j x_k r³ / C), summed directly; dw against Σ_n dout·x·r. One row is scaled down to 1e-3, where eps
 * matters. */
static void test_rmsnorm_against_formula(void) {
    enum { N = 5, C = 70 };
    const double eps = 1e-5;
    static double x[N * C], w[C], dout[N * C], out[N * C], rstd[N], dinp[N * C], dw[C];
    static float xf[N * C], wf[C], outf[N * C], rstdf[N];
    h_seed(SEED + 1);
    for (int i = 0; i < N * C; i++) { x[i] = rnd_sym() * (i / C == 2 ? 1e-3 : 1.0); dout[i] = rnd_sym(); }
    for (int j = 0; j < C; j++) w[j] = 1.0 + 0.5 * rnd_sym();
    for (int i = 0; i < N * C; i++) { x[i] = (double)(float)x[i]; xf[i] = (float)x[i]; }
    for (int j = 0; j < C; j++) { w[j] = (double)(float)w[j]; wf[j] = (float)w[j]; }
    nn_rmsnorm_forward_f64(out, rstd, x, w, N, C, eps, 0, 1);
    nn_rmsnorm_forward_f32(outf, rstdf, xf, wf, N, C, (float)eps, 0, 1);
    memset(dw, 0, sizeof dw);
    for (int i = 0; i < N * C; i++) dinp[i] = 0.25; /* accumulate = 1 adds onto it */
    nn_rmsnorm_backward_f64(dinp, dw, dout, x, w, rstd, N, C, 1, 0, 1);
    double worst = 0, worst32 = 0, worst_dx = 0, worst_dw = 0, dwd[C] = {0};
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int j = 0; j < C; j++) ss += x[n * C + j] * x[n * C + j];
        const double r = 1.0 / sqrt(ss / C + eps);
        for (int j = 0; j < C; j++) {
            worst = fmax(worst, fabs(out[n * C + j] - w[j] * x[n * C + j] * r));
            worst32 = fmax(worst32, fabs((double)outf[n * C + j] - out[n * C + j]) / (fabs(out[n * C + j]) + 1e-6));
            dwd[j] += dout[n * C + j] * x[n * C + j] * r;
        }
        for (int k = 0; k < C; k++) {
            double dx = 0;
            for (int j = 0; j < C; j++)
                dx += dout[n * C + j] * w[j] * ((j == k ? r : 0.0) - x[n * C + j] * x[n * C + k] * r * r * r / C);
            worst_dx = fmax(worst_dx, fabs(dinp[n * C + k] - 0.25 - dx) / (fabs(dx) + r * 1e-3));
        }
    }
    for (int j = 0; j < C; j++) worst_dw = fmax(worst_dw, fabs(dw[j] - dwd[j]) / (fabs(dwd[j]) + 1e-3));
    printf("    forward %.1e (float vs double %.1e), dx %.1e, dw %.1e\n", worst, worst32, worst_dx, worst_dw);
    CHECK(worst <= OP_TOL_F64, "forward: %.3e", worst);
    CHECK(worst32 <= OP_TOL_F32, "float forward: %.3e", worst32);
    CHECK(worst_dx <= OP_TOL_F64 * 100 && worst_dw <= OP_TOL_F64, "backward: dx %.3e, dw %.3e", worst_dx, worst_dw);
}

/* ------------------------------------------------------------------ SwiGLU */
/* out = silu(a)·b, silu(a) = a·σ(a); da = dout·b·σ(a)(1 + a(1 − σ(a))), db = dout·silu(a); the ends of
 * the range (a = ±30, ±100) stay finite. */
static void test_swiglu_against_formula(void) {
    enum { N = 3, H = 40 };
    static double in[N * 2 * H], out[N * H], dout[N * H], din[N * 2 * H];
    static float inf32[N * 2 * H], outf[N * H], doutf[N * H], dinf[N * 2 * H];
    const double ends[] = {-100, -30, 0, 30, 100};
    h_seed(SEED + 2);
    for (int i = 0; i < N * 2 * H; i++) in[i] = (double)(float)(4 * rnd_sym());
    for (int k = 0; k < 5; k++) in[k] = ends[k];
    for (int i = 0; i < N * H; i++) { dout[i] = (double)(float)rnd_sym(); doutf[i] = (float)dout[i]; }
    for (int i = 0; i < N * 2 * H; i++) inf32[i] = (float)in[i];
    nn_swiglu_forward_f64(out, in, N, H, 0, 1);
    nn_swiglu_backward_f64(din, dout, in, N, H, 0, 1);
    nn_swiglu_forward_f32(outf, inf32, N, H, 0, 1);
    nn_swiglu_backward_f32(dinf, doutf, inf32, N, H, 0, 1);
    double worst = 0, worst_d = 0, worst32 = 0;
    int finite = 1;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < H; j++) {
            const double a = in[n * 2 * H + j], b = in[n * 2 * H + H + j], s = 1.0 / (1.0 + exp(-a)), dy = dout[n * H + j];
            worst = fmax(worst, fabs(out[n * H + j] - a * s * b) / (fabs(a * s * b) + 1e-12));
            worst_d = fmax(worst_d, fabs(din[n * 2 * H + j] - dy * b * s * (1 + a * (1 - s))) / (fabs(dy * b) * (1 + fabs(a)) + 1e-12));
            worst_d = fmax(worst_d, fabs(din[n * 2 * H + H + j] - dy * a * s) / (fabs(dy * a) + 1e-12));
            worst32 = fmax(worst32, fabs((double)outf[n * H + j] - out[n * H + j]) / (fabs(out[n * H + j]) + 1e-6));
            finite &= isfinite(outf[n * H + j]) && isfinite(dinf[n * 2 * H + j]) && isfinite(dinf[n * 2 * H + H + j]);
        }
    printf("    forward %.1e, backward %.1e, float vs double %.1e\n", worst, worst_d, worst32);
    CHECK(worst <= OP_TOL_F64 && worst_d <= OP_TOL_F64, "forward %.3e, backward %.3e", worst, worst_d);
    CHECK(worst32 <= OP_TOL_F32 && finite, "float: %.3e, finite %d", worst32, finite);
}

/* ------------------------------------------------------------------ grouped-query attention */
/* GQA with NKV key/value heads equals multi-head attention (nn_attention_*, GPT-2's) on the same queries
 * with each key/value head repeated for its NH/NKV query heads: out and att bit for bit; dq bit for bit;
 * dk and dv the sums, in head order, of the repeated heads' gradients, bit for bit. Float and double. */
#define GQA_CHECK(S, real)                                                                                    \
    static int gqa_vs_mha##S(int B, int T, int NH, int NKV, int hs) {                                         \
        const int C = NH * hs, QKV = (NH + 2 * NKV) * hs, rep = NH / NKV, N = B * T;                           \
        real *qkv = malloc(sizeof(real) * N * QKV), *big = malloc(sizeof(real) * N * 3 * C);                   \
        real *o1 = malloc(sizeof(real) * N * C), *o2 = malloc(sizeof(real) * N * C);                           \
        real *a1 = malloc(sizeof(real) * B * NH * T * T), *a2 = malloc(sizeof(real) * B * NH * T * T);          \
        real *dy = malloc(sizeof(real) * N * C), *d1 = malloc(sizeof(real) * N * QKV);                         \
        real *d2 = malloc(sizeof(real) * N * 3 * C), *scr = malloc(sizeof(real) * nn_gqa_scratch(B, T, NH, hs)); \
        for (int i = 0; i < N * QKV; i++) qkv[i] = (real)(2 * rnd_sym());                                    \
        for (int i = 0; i < N * C; i++) dy[i] = (real)rnd_sym();                                             \
        for (int n = 0; n < N; n++)                                                                           \
            for (int h = 0; h < NH; h++)                                                                      \
                for (int i = 0; i < hs; i++) {                                                                \
                    const real *r = qkv + (size_t)n * QKV;                                                    \
                    big[n * 3 * C + h * hs + i] = r[h * hs + i];                                              \
                    big[n * 3 * C + C + h * hs + i] = r[(NH + h / rep) * hs + i];                             \
                    big[n * 3 * C + 2 * C + h * hs + i] = r[(NH + NKV + h / rep) * hs + i];                   \
                }                                                                                             \
        nn_gqa_forward##S(o1, a1, scr, qkv, B, T, NH, NKV, hs, 0, 1);                                         \
        nn_attention_forward##S(o2, a2, scr, big, B, T, C, NH, 0, 1);                                         \
        int bad = memcmp(o1, o2, sizeof(real) * N * C) != 0 || memcmp(a1, a2, sizeof(real) * B * NH * T * T) != 0; \
        nn_gqa_backward##S(d1, scr, dy, qkv, a1, B, T, NH, NKV, hs, 0, 1);                                    \
        nn_attention_backward##S(d2, scr, dy, big, a2, B, T, C, NH, 0, 1);                                    \
        for (int n = 0; n < N; n++)                                                                           \
            for (int g = 0; g < NKV; g++)                                                                     \
                for (int i = 0; i < hs; i++) {                                                                \
                    real sk = 0, sv = 0;                                                                      \
                    for (int r = 0; r < rep; r++) {                                                           \
                        const int h = g * rep + r;                                                            \
                        sk = r ? sk + d2[n * 3 * C + C + h * hs + i] : d2[n * 3 * C + C + h * hs + i];        \
                        sv = r ? sv + d2[n * 3 * C + 2 * C + h * hs + i] : d2[n * 3 * C + 2 * C + h * hs + i]; \
                    }                                                                                         \
                    bad += d1[n * QKV + (NH + g) * hs + i] != sk || d1[n * QKV + (NH + NKV + g) * hs + i] != sv; \
                }                                                                                             \
        for (int n = 0; n < N; n++)                                                                           \
            for (int i = 0; i < C; i++) bad += d1[n * QKV + i] != d2[n * 3 * C + i];                           \
        free(qkv); free(big); free(o1); free(o2); free(a1); free(a2); free(dy); free(d1); free(d2); free(scr);   \
        return bad;                                                                                           \
    }
GQA_CHECK(_f64, double)
GQA_CHECK(_f32, float)

static void test_gqa_against_repeated_heads(void) {
    const int cases[][5] = {{2, 9, 4, 2, 8}, {1, 70, 6, 1, 16}, {2, 5, 3, 3, 4}, {1, 33, 8, 4, 64}};
    h_seed(SEED + 3);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int *c = cases[k];
        CHECK(gqa_vs_mha_f64(c[0], c[1], c[2], c[3], c[4]) == 0, "double: B %d T %d NH %d NKV %d hs %d", c[0], c[1],
              c[2], c[3], c[4]);
        CHECK(gqa_vs_mha_f32(c[0], c[1], c[2], c[3], c[4]) == 0, "float: B %d T %d NH %d NKV %d hs %d", c[0], c[1],
              c[2], c[3], c[4]);
    }
}

/* ------------------------------------------------------------------ gradients */
static double loss_of(collage_model *m, const void *w, const int *tok, const int *tgt, int B, int T) {
    double L = (double)NAN;
    collage_model_forward(m, w, tok, tgt, B, T, &L);
    return L;
}

/* loss_of as h_fd_tensor's loss */
typedef struct { collage_model *m; const int *tok, *tgt; int B, T; } fd_ctx;
static double fd_loss(void *ctx, double *w) {
    const fd_ctx *X = ctx;
    return loss_of(X->m, w, X->tok, X->tgt, X->B, X->T);
}

/* Every parameter of a two-layer model with 4 query heads on 2 key/value heads, tied and untied: the
 * double backward against a 4-point central difference of the double forward. */
static void test_backward_vs_finite_differences(void) {
    for (int untied = 0; untied < 2; untied++) {
        const collage_model_config c = micro(untied);
        const int B = 2, T = 5;
        collage_model *m = NULL;
        CHECK(collage_model_create(&c, COLLAGE_REAL_FP64, B, T, &m) == COLLAGE_OK, "create");
        if (!m) return;
        const size_t n = collage_model_size(m);
        double *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g);
        int tok[10], tgt[10];
        printf("    %s: seed %llu, %zu parameters, B %d T %d\n", untied ? "untied" : "tied", SEED, n, B, T);
        random_params(&c, w, SEED + (unsigned)untied);
        random_tokens(tok, tgt, B * T, c.vocab_size);
        loss_of(m, w, tok, tgt, B, T);
        collage_model_zero_grad(m);
        CHECK(collage_model_backward(m) == COLLAGE_OK, "backward: %s", collage_model_error(m));
        memcpy(g, collage_model_grads(m), n * sizeof *g);
        collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
        const int nt = collage_model_tensors(&c, t, COLLAGE_MODEL_MAX_TENSORS);
        fd_ctx X = {m, tok, tgt, B, T};
        for (int k = 0; k < nt; k++)
            h_fd_tensor(t[k].name, w, g, t[k].offset, t[k].count, fd_loss, &X, FD_STEP, FD_REL_TOL, FD_ABS_TOL);
        free(w); free(g);
        collage_model_free(m);
    }
}

/* The float model against the double one on the same (float) parameters, tied and untied. */
static void test_float_matches_double(void) {
    for (int untied = 0; untied < 2; untied++) {
        const collage_model_config c = micro(untied);
        const int B = 2, T = 7;
        collage_model *md = NULL, *mf = NULL;
        collage_model_create(&c, COLLAGE_REAL_FP64, B, T, &md);
        collage_model_create(&c, COLLAGE_REAL_FP32, B, T, &mf);
        CHECK(md && mf, "create");
        if (!md || !mf) { collage_model_free(md); collage_model_free(mf); return; }
        const size_t n = collage_model_size(md);
        double *w = malloc(n * sizeof *w);
        float *wf = malloc(n * sizeof *wf);
        int tok[14], tgt[14];
        random_params(&c, w, SEED + 7);
        for (size_t i = 0; i < n; i++) wf[i] = (float)w[i];
        random_tokens(tok, tgt, B * T, c.vocab_size);
        const double Ld = loss_of(md, w, tok, tgt, B, T), Lf = loss_of(mf, wf, tok, tgt, B, T);
        CHECK(fabs(Lf - Ld) <= F32_LOSS_TOL * Ld, "loss fp32 %.9g fp64 %.9g", Lf, Ld);
        collage_model_zero_grad(md);
        collage_model_zero_grad(mf);
        collage_model_backward(md);
        collage_model_backward(mf);
        const double *gd = collage_model_grads(md);
        const float *gf = collage_model_grads(mf);
        collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
        const int nt = collage_model_tensors(&c, t, COLLAGE_MODEL_MAX_TENSORS);
        double worst = 0;
        for (int k = 0; k < nt; k++)
            worst = fmax(worst, h_f32_grad_gap(t[k].name, gf, gd, t[k].offset, t[k].count, F32_GRAD_TOL));
        printf("    %s: loss fp64 %.12f fp32 %.12f; worst tensor max|g32-g64|/max|g64| %.1e\n",
               untied ? "untied" : "tied", Ld, Lf, worst);
        free(w); free(wf);
        collage_model_free(md); collage_model_free(mf);
    }
}

/* Gradients accumulate (+=) over backward calls; a model made for a larger batch gives the same result. */
static void test_accumulation_and_partial_batch(void) {
    const collage_model_config c = micro(1);
    collage_model *m = NULL, *big = NULL;
    collage_model_create(&c, COLLAGE_REAL_FP64, 2, 5, &m);
    collage_model_create(&c, COLLAGE_REAL_FP64, 3, 8, &big);
    CHECK(m && big, "create");
    if (!m || !big) { collage_model_free(m); collage_model_free(big); return; }
    const size_t n = collage_model_size(m);
    double *w = malloc(n * sizeof *w), *g1 = malloc(n * sizeof *g1);
    int tok[10], tgt[10];
    random_params(&c, w, SEED + 3);
    random_tokens(tok, tgt, 10, c.vocab_size);
    collage_model_zero_grad(m);
    const double L1 = loss_of(m, w, tok, tgt, 2, 5);
    collage_model_backward(m);
    memcpy(g1, collage_model_grads(m), n * sizeof *g1);
    loss_of(m, w, tok, tgt, 2, 5);
    collage_model_backward(m);
    const double *g2 = collage_model_grads(m);
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) { worst = fmax(worst, fabs(g2[i] - 2 * g1[i])); gmax = fmax(gmax, fabs(g1[i])); }
    CHECK(worst <= ACCUM_TOL * gmax, "two backward passes vs twice one: %.2e of %.2e", worst, gmax);
    collage_model_zero_grad(big);
    CHECK(loss_of(big, w, tok, tgt, 2, 5) == L1, "loss on a larger model");
    collage_model_backward(big);
    CHECK(memcmp(collage_model_grads(big), g1, n * sizeof *g1) == 0, "gradients differ on a larger model");
    free(w); free(g1);
    collage_model_free(m); collage_model_free(big);
}

/* ------------------------------------------------------------------ initialisation */
static void test_init_and_loss(void) {
    const collage_model_config c = tiny(0);
    const size_t n = collage_model_num_params(&c);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    set_threads(1);
    CHECK(collage_model_init_weights(&c, SEED, a, n) == COLLAGE_OK, "init");
    set_threads(2);
    collage_model_init_weights(&c, SEED, b, n);
    set_threads(1);
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "init differs between 1 and 2 threads");
    collage_model_init_weights(&c, SEED + 1, b, n);
    CHECK(memcmp(a, b, n * sizeof *a) != 0, "init ignores the seed");
    CHECK(collage_model_init_weights(&c, SEED, a, n + 1) == COLLAGE_ERR_SIZE, "wrong n accepted");
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(&c, t, COLLAGE_MODEL_MAX_TENSORS);
    for (int k = 0; k < nt; k++) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < t[k].count; i++) { s += (double)a[t[k].offset + i]; s2 += (double)a[t[k].offset + i] * (double)a[t[k].offset + i]; }
        const double mean = s / (double)t[k].count, sd = sqrt(s2 / (double)t[k].count - mean * mean);
        const double want = !t[k].decay ? 0 : !strcmp(t[k].name, "wo") || !strcmp(t[k].name, "w2") ? 0.02 / sqrt(2.0 * c.num_layers) : 0.02;
        if (t[k].decay) CHECK(fabs(sd - want) <= INIT_STD_REL * want, "%s: std %.5f, want %.5f", t[k].name, sd, want);
        else CHECK(mean == 1.0 && sd == 0, "%s: a norm's weights are not 1", t[k].name);
    }
    collage_model *m = NULL;
    const int B = 4, T = 32;
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, B, T, &m) == COLLAGE_OK, "create");
    int tok[128], tgt[128];
    h_seed(SEED);
    random_tokens(tok, tgt, B * T, c.vocab_size);
    const double L = m ? loss_of(m, a, tok, tgt, B, T) : (double)NAN;
    printf("    llama-tiny: %zu parameters, loss at init %.4f, ln V = %.4f\n", n, L, log((double)c.vocab_size));
    CHECK(fabs(L - log((double)c.vocab_size)) < INIT_LOSS_TOL, "loss at init %.4f", L);
    collage_model_free(m);
    free(a); free(b);
}

/* ------------------------------------------------------------------ threads */
static void run_threads(const collage_model_config *c, collage_real p, int th, const void *w, const int *tok,
                        const int *tgt, int B, int T, double *loss, void *g) {
    collage_model *m = NULL;
    set_threads(th);
    CHECK(collage_model_create(c, p, B, T, &m) == COLLAGE_OK, "create");
    if (!m) return;
    collage_model_zero_grad(m);
    *loss = loss_of(m, w, tok, tgt, B, T);
    collage_model_backward(m);
    memcpy(g, collage_model_grads(m), collage_model_size(m) * collage_real_size(p));
    collage_model_free(m);
}

/* B·T·C large enough that every op and product runs its parallel path; the bf16 model on the path this
 * machine takes. */
static void test_thread_count_independence(void) {
    const collage_model_config c = tiny(0);
    const int B = 8, T = 64;
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w), *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    collage_bf16 *w16 = malloc(n * sizeof *w16);
    collage_model_init_weights(&c, SEED, w, n);
    collage_bf16_from_f32_row(w16, w, n);
    static int tok[512], tgt[512];
    h_seed(SEED + 11);
    random_tokens(tok, tgt, B * T, c.vocab_size);
    for (int p = 0; p < 2; p++) {
        const collage_real prec = p ? COLLAGE_REAL_BF16 : COLLAGE_REAL_FP32;
        const void *wp = p ? (const void *)w16 : (const void *)w;
        double L1 = 0, L2 = 0;
        run_threads(&c, prec, 1, wp, tok, tgt, B, T, &L1, g1);
        for (int th = 2; th <= 3; th++) {
            run_threads(&c, prec, th, wp, tok, tgt, B, T, &L2, g2);
            CHECK(L1 == L2, "%s: loss %.17g (1 thread) vs %.17g (%d)", collage_real_name(prec), L1, L2, th);
            CHECK(memcmp(g1, g2, n * collage_real_size(prec)) == 0, "%s: gradients differ between 1 and %d threads",
                  collage_real_name(prec), th);
        }
        printf("    %s: loss %.9f, the same bits on 1, 2 and 3 threads\n", collage_real_name(prec), L1);
    }
    set_threads(1);
    free(w); free(w16); free(g1); free(g2);
}

/* ------------------------------------------------------------------ bf16 */
typedef struct { double loss; float *g; float logits[256]; } bf16_run;

/* One forward + backward of a fresh model (gm_precision p, through graph_model.h so that the emulated
 * model is reachable), the gradients widened to float, and the next-token logits of the first row. */
static bf16_run bf16_once(const collage_model_config *c, gm_precision p, const collage_bf16 *w16, const float *w,
                          const int *tok, const int *tgt, int B, int T) {
    bf16_run r = {.loss = (double)NAN};
    gm_model *m = NULL;
    CHECK(gm_create(&collage__llama_graph, c, p, B, T, &m) == COLLAGE_OK, "create %d", (int)p);
    if (!m) return r;
    const size_t n = gm_size(m);
    double *w64 = p == GM_FP64 ? malloc(n * sizeof *w64) : NULL;
    for (size_t i = 0; w64 && i < n; i++) w64[i] = (double)w[i];
    const void *wp = p == GM_FP32 ? (const void *)w : p == GM_FP64 ? (const void *)w64 : (const void *)w16;
    gm_zero_grad(m);
    CHECK(gm_forward(m, wp, tok, tgt, B, T, &r.loss) == COLLAGE_OK, "forward: %s", gm_error(m));
    CHECK(gm_backward(m) == COLLAGE_OK, "backward");
    r.g = malloc(n * sizeof(float));
    if (p == GM_FP32) memcpy(r.g, gm_grads(m), n * sizeof(float));
    else if (p == GM_FP64) for (size_t i = 0; i < n; i++) r.g[i] = (float)((const double *)gm_grads(m))[i];
    else collage_bf16_to_f32_row(r.g, gm_grads(m), n);
    CHECK(gm_next_logits(m, wp, tok, T, r.logits) == COLLAGE_OK, "next_logits");
    gm_free(m);
    free(w64);
    return r;
}

static double cosine(const float *a, const float *b, size_t n) {
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = (double)a[i], y = (double)b[i];
        dot += x * y; na += x * x; nb += y * y;
    }
    return dot / sqrt(na * nb);
}

/* The bf16 model on the widening path gives the emulated model's values exactly (loss, gradients,
 * logits), tied and untied; its AVX-512 and baseline builds the same bits; oneDNN's path near them; and
 * the bf16 and fp32 models near the fp64 one on the same bf16 weights. */
static void test_bf16_matches_emulation(void) {
    for (int untied = 0; untied < 2; untied++) {
        const collage_model_config c = tiny(untied);
        const int B = 4, T = 32, V = c.vocab_size;
        const size_t n = collage_model_num_params(&c);
        float *w = malloc(n * sizeof *w);
        collage_bf16 *w16 = malloc(n * sizeof *w16);
        collage_model_init_weights(&c, SEED + 3, w, n);
        collage_bf16_from_f32_row(w16, w, n);
        collage_bf16_to_f32_row(w, w16, n);
        static int tok[128], tgt[128];
        h_seed(SEED + 12);
        random_tokens(tok, tgt, B * T, V);
        bf16_run e = bf16_once(&c, GM_BF16_EMULATED, w16, w, tok, tgt, B, T);
        setenv("COLLAGE_BF16_GEMM", "widen", 1);
        bf16_run x = bf16_once(&c, GM_BF16, w16, w, tok, tgt, B, T);
        unsetenv("COLLAGE_BF16_GEMM");
        bf16_run h = bf16_once(&c, GM_BF16, w16, w, tok, tgt, B, T), f = bf16_once(&c, GM_FP32, w16, w, tok, tgt, B, T);
        bf16_run d = bf16_once(&c, GM_FP64, w16, w, tok, tgt, B, T);
        const collage_isa isa = collage_get_isa();
        if (isa == COLLAGE_ISA_AVX512 && collage_set_isa(COLLAGE_ISA_SCALAR) == COLLAGE_OK) {
            /* the graph's two builds on the same products' kernels: the kernels measured for the baseline
             * build's key could be others (the products file keys the machine with collage's ISA) */
            char err[256];
            const char *pin = collage_products_check("fp32=openblas,bf16=onednn", err, sizeof err) == COLLAGE_OK
                                  ? "fp32=openblas,bf16=onednn" : "fp32=openblas,bf16=widen";
            CHECK(collage_products_pin(pin, err, sizeof err) == COLLAGE_OK, "pin %s: %s", pin, err);
            bf16_run s = bf16_once(&c, GM_BF16, w16, w, tok, tgt, B, T);
            collage_set_isa(isa);
            bf16_run v = bf16_once(&c, GM_BF16, w16, w, tok, tgt, B, T);
            collage_products_pin(NULL, err, sizeof err);
            CHECK(s.loss == v.loss && !memcmp(s.g, v.g, n * sizeof(float)) && !memcmp(s.logits, v.logits, sizeof s.logits),
                  "bf16 graph: the AVX-512 and baseline builds differ (products %s)", pin);
            free(s.g);
            free(v.g);
        } else
            printf("    (no AVX-512 here: the bf16 graph's two builds not compared)\n");
        size_t gbad = 0;
        for (size_t i = 0; i < n; i++) gbad += memcmp(&x.g[i], &e.g[i], sizeof(float)) != 0;
        CHECK(x.loss == e.loss, "widening path: loss %.17g vs emulated %.17g", x.loss, e.loss);
        CHECK(gbad == 0, "widening path: %zu of %zu gradients differ from the emulated model's", gbad, n);
        CHECK(!memcmp(x.logits, e.logits, (size_t)V * sizeof(float)), "widening path: next-token logits differ");
        const double ch = cosine(h.g, e.g, n), cd = cosine(h.g, d.g, n), cf = cosine(f.g, d.g, n);
        printf("    %s, %s: loss %.7f, emulated %.7f, fp32 %.7f, fp64 %.7f; gradient cosine vs emulated %.6f;\n"
               "      against fp64: bf16 %.5f, fp32 %.7f\n", untied ? "untied" : "tied", collage_bf16_products(), h.loss,
               e.loss, f.loss, d.loss, ch, cd, cf);
        CHECK(fabs(h.loss - e.loss) <= BF16_PATH_LOSS_REL * e.loss && ch >= BF16_PATH_GRAD_COS,
              "bf16 path: loss %.7f vs %.7f, cosine %.6f", h.loss, e.loss, ch);
        CHECK(fabs(h.loss - d.loss) <= BF16_FP64_LOSS_REL * d.loss && cd >= BF16_FP64_GRAD_COS,
              "bf16 vs fp64: loss %.7f vs %.7f, cosine %.5f", h.loss, d.loss, cd);
        CHECK(fabs(f.loss - d.loss) <= F32_LOSS_TOL * d.loss && cf >= F32_FP64_GRAD_COS,
              "fp32 vs fp64: loss %.9f vs %.9f, cosine %.7f", f.loss, d.loss, cf);
        free(e.g); free(x.g); free(h.g); free(f.g); free(d.g); free(w); free(w16);
    }
}

/* ------------------------------------------------------------------ llama2.c's file */
static char g_dir[64];

/* The value this test puts at element i of file tensor id (exact in float). */
static float tagged(int id, size_t i) { return (float)(id * 1000000 + (int)i); }

/* A llama2.c file of config c laid out here from the format's description: every tensor's elements
 * tagged; the rotary tables (ids 12, 13) too. */
static int write_tagged(const char *path, const collage_model_config *c) {
    const size_t C = (size_t)c->channels, L = (size_t)c->num_layers, H = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t hs = C / (size_t)c->num_heads, kv = (size_t)c->num_kv_heads * hs, T = (size_t)c->max_seq_len;
    const size_t sizes[] = {V * C, L * C, L * C * C, L * kv * C, L * kv * C, L * C * C, L * C, L * H * C, L * C * H,
                            L * H * C, C, T * hs / 2, T * hs / 2, c->untied ? V * C : 0};
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int32_t h[7] = {c->channels, c->hidden_dim, c->num_layers, c->num_heads, c->num_kv_heads,
                          c->untied ? -c->vocab_size : c->vocab_size, c->max_seq_len};
    int bad = fwrite(h, sizeof h, 1, f) != 1;
    for (int id = 1; id <= 14; id++)
        for (size_t i = 0; i < sizes[id - 1]; i++) {
            const float v = tagged(id, i);
            bad |= fwrite(&v, 4, 1, f) != 1;
        }
    return fclose(f) || bad ? -1 : 0;
}

/* Every slab element against the tag the file put there (the padding rows of the embedding and output:
 * 0). */
static int tagged_slab_ok(const collage_model_config *c, const float *w) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(c, t, COLLAGE_MODEL_MAX_TENSORS);
    const size_t C = (size_t)c->channels, H = (size_t)c->hidden_dim, hs = C / (size_t)c->num_heads;
    const size_t kv = (size_t)c->num_kv_heads * hs;
    int bad = 0;
    for (int k = 0; k < nt; k++)
        for (size_t i = 0; i < t[k].count; i++) {
            const float got = w[t[k].offset + i];
            float want;
            const size_t l = t[k].ndim == 3 ? i / (t[k].shape[1] * t[k].shape[2]) : 0;
            const size_t r = t[k].ndim == 3 ? i / C % t[k].shape[1] : 0, col = i % C;
            if ((!strcmp(t[k].name, "tok_embeddings") || !strcmp(t[k].name, "output")) && i >= (size_t)c->vocab_size * C)
                want = 0;
            else if (!strcmp(t[k].name, "wqkv"))
                want = r < C ? tagged(3, l * C * C + r * C + col)
                       : r < C + kv ? tagged(4, l * kv * C + (r - C) * C + col)
                                    : tagged(5, l * kv * C + (r - C - kv) * C + col);
            else if (!strcmp(t[k].name, "w13"))
                want = r < H ? tagged(8, l * H * C + r * C + col) : tagged(10, l * H * C + (r - H) * C + col);
            else {
                static const char *const ids[] = {"", "tok_embeddings", "attention_norm", "", "", "", "wo", "ffn_norm",
                                                  "", "w2", "", "norm", "", "", "output"};
                int id = 0;
                for (int j = 1; j <= 14; j++) id = !strcmp(ids[j], t[k].name) ? j : id;
                want = tagged(id, i);
            }
            if (got != want && bad++ < 3) printf("    %s[%zu] = %.0f, the file put %.0f there\n", t[k].name, i, (double)got, (double)want);
        }
    return bad;
}

/* The whole file at path (NULL when it cannot be read), its length in *len. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = n > 0 ? malloc((size_t)n) : NULL;
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    *len = p ? (size_t)n : 0;
    return p;
}

/* A file written by this test from known tensors loads with every element in place, tied and untied;
 * saved again, it is the same file up to the rotary tables, which hold cos and sin of t·θ^(−2i/hs). */
static void test_llama2c_file_in_place(void) {
    for (int untied = 0; untied < 2; untied++) {
        const collage_model_config c = micro(untied);
        char path[128], back[128], err[1024];
        snprintf(path, sizeof path, "%s/tagged%d.bin", g_dir, untied);
        snprintf(back, sizeof back, "%s/saved%d.bin", g_dir, untied);
        CHECK(write_tagged(path, &c) == 0, "write %s", path);
        collage_model_config r;
        int bf = -1;
        CHECK(collage_model_read_header(path, &r, &bf, err, sizeof err) == COLLAGE_OK, "%s", err);
        collage_model_config want = c; /* the file's model pads its vocabulary its own way (128 rows); c pads to 24 */
        collage_model_config_set_vocab(&want, c.vocab_size);
        CHECK(!memcmp(&r, &want, sizeof c) && want.padded_vocab_size == 128 && bf == 0, "%s: header read as another config",
              untied ? "untied" : "tied");
        const size_t n = collage_model_num_params(&c);
        float *w = malloc(n * sizeof *w), *w2 = malloc(n * sizeof *w2);
        collage_bf16 *w16 = malloc(n * sizeof *w16), *rn = malloc(n * sizeof *rn);
        CHECK(collage_model_load_file(path, &c, w, 0, err, sizeof err) == COLLAGE_OK, "load: %s", err);
        CHECK(tagged_slab_ok(&c, w) == 0, "%s: tensors out of place", untied ? "untied" : "tied");
        CHECK(collage_model_load_file(path, &c, w16, 1, err, sizeof err) == COLLAGE_OK, "load bf16: %s", err);
        collage_bf16_from_f32_row(rn, w, n);
        CHECK(!memcmp(w16, rn, n * sizeof *rn), "read as bf16: not the RN of the floats");
        CHECK(collage_model_save_file(back, &c, w, 0, err, sizeof err) == COLLAGE_OK, "save: %s", err);
        size_t la = 0, lb = 0;
        unsigned char *fa = slurp(path, &la), *fb = slurp(back, &lb);
        /* the rotary tables follow every tensor but the output matrix */
        const size_t hs = (size_t)(c.channels / c.num_heads), half = (size_t)c.max_seq_len * hs / 2;
        const size_t VpC = (size_t)c.padded_vocab_size * c.channels, pad = VpC - (size_t)c.vocab_size * c.channels;
        const size_t rope0 = 28 + 4 * (n - pad - (c.untied ? VpC : 0)), rope1 = rope0 + 8 * half;
        size_t diff = 0;
        double worst_rope = 0;
        CHECK(fa && fb && la == lb, "%s: %zu bytes, %s: %zu", path, la, back, lb);
        for (size_t at = 0; fa && fb && la == lb && at < la; at += 4) {
            if (at < rope0 || at >= rope1) { diff += memcmp(fa + at, fb + at, 4) != 0; continue; }
            float y;
            memcpy(&y, fb + at, 4);
            const size_t k = (at - rope0) / 4, t = k % half / (hs / 2), j = k % half % (hs / 2);
            const double ang = (double)t / pow(c.rope_theta, 2.0 * (double)j / (double)hs);
            worst_rope = fmax(worst_rope, fabs((double)y - (k < half ? cos(ang) : sin(ang))));
        }
        CHECK(diff == 0 && worst_rope <= 1e-7, "%s: %zu floats differ; rotary tables off by %.2e", back, diff, worst_rope);
        free(fa); free(fb);
        /* bf16 weights are widened exactly on the way out */
        collage_bf16_from_f32_row(w16, w, n);
        CHECK(collage_model_save_file(back, &c, w16, 1, err, sizeof err) == COLLAGE_OK &&
                  collage_model_load_file(back, &c, w2, 0, err, sizeof err) == COLLAGE_OK, "bf16 save: %s", err);
        collage_bf16_to_f32_row(w, w16, n);
        CHECK(!memcmp(w, w2, n * sizeof *w), "bf16 weights did not come back exactly");
        free(w); free(w2); free(w16); free(rn);
    }
}

/* llama2.c's forward pass for one position, transcribed in double from its description (a key/value
 * cache per layer, RMSNorm, q and k rotated pair by pair, query head h on key/value head h / (NH/NKV),
 * SwiGLU, the classifier = the embedding when vocab_size > 0), on weights read from a model file by
 * this test's own reader. logits (V) of the token at pos. */
typedef struct {
    int dim, hidden, L, NH, NKV, V, T, shared;
    float *emb, *an, *wq, *wk, *wv, *wo, *fn, *w1, *w2, *w3, *norm, *cls;
    double *kc, *vc; /* (L, T, kv) */
} ref_model;

static int ref_read(const char *path, ref_model *m) {
    FILE *f = fopen(path, "rb");
    int32_t h[7];
    if (!f || fread(h, sizeof h, 1, f) != 1) { if (f) fclose(f); return -1; }
    *m = (ref_model){.dim = h[0], .hidden = h[1], .L = h[2], .NH = h[3], .NKV = h[4], .V = abs(h[5]), .T = h[6],
                     .shared = h[5] > 0};
    const size_t D = (size_t)m->dim, L = (size_t)m->L, hs = D / (size_t)m->NH, kv = hs * (size_t)m->NKV;
    const size_t n[] = {(size_t)m->V * D, L * D, L * D * D, L * D * kv, L * D * kv, L * D * D, L * D,
                        L * D * (size_t)m->hidden, L * D * (size_t)m->hidden, L * D * (size_t)m->hidden, D,
                        (size_t)m->T * hs, m->shared ? 0 : (size_t)m->V * D};
    float **dst[] = {&m->emb, &m->an, &m->wq, &m->wk, &m->wv, &m->wo, &m->fn, &m->w1, &m->w2, &m->w3, &m->norm, NULL,
                     &m->cls};
    int bad = 0;
    for (int k = 0; k < 13; k++) {
        float *p = malloc((n[k] ? n[k] : 1) * sizeof *p);
        bad |= !p || fread(p, sizeof *p, n[k], f) != n[k];
        if (dst[k]) *dst[k] = p;
        else free(p); /* the rotary tables: skipped, as llama2.c does */
    }
    if (m->shared) {
        free(m->cls);
        m->cls = m->emb;
    }
    fclose(f);
    m->kc = calloc(L * (size_t)m->T * kv, sizeof(double));
    m->vc = calloc(L * (size_t)m->T * kv, sizeof(double));
    return bad || !m->kc || !m->vc ? -1 : 0;
}

static void ref_free(ref_model *m) {
    float *all[] = {m->emb, m->an, m->wq, m->wk, m->wv, m->wo, m->fn, m->w1, m->w2, m->w3, m->norm};
    for (int k = 0; k < 11; k++) free(all[k]);
    if (!m->shared) free(m->cls);
    free(m->kc); free(m->vc);
}

static void ref_rmsnorm(double *o, const double *x, const float *w, int n) {
    double ss = 0;
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    ss = 1.0 / sqrt(ss / n + 1e-5);
    for (int j = 0; j < n; j++) o[j] = (double)w[j] * (ss * x[j]);
}

static void ref_matvec(double *o, const double *x, const float *w, int n, int d) { /* W (d,n) · x (n) */
    for (int i = 0; i < d; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += (double)w[(size_t)i * n + j] * x[j];
        o[i] = s;
    }
}

static void ref_forward(ref_model *m, int token, int pos, double *logits) {
    const int D = m->dim, hs = D / m->NH, kv = hs * m->NKV, rep = m->NH / m->NKV, Hd = m->hidden;
    double x[512], xb[512], q[512], k[512], v[512], o[512], hb[2048], hb2[2048], att[512];
    for (int j = 0; j < D; j++) x[j] = (double)m->emb[(size_t)token * D + j];
    for (int l = 0; l < m->L; l++) {
        ref_rmsnorm(xb, x, m->an + (size_t)l * D, D);
        ref_matvec(q, xb, m->wq + (size_t)l * D * D, D, D);
        ref_matvec(k, xb, m->wk + (size_t)l * D * kv, D, kv);
        ref_matvec(v, xb, m->wv + (size_t)l * D * kv, D, kv);
        for (int i = 0; i < D; i += 2) {
            const double ang = pos / pow(10000.0, (double)(i % hs) / hs), c = cos(ang), s = sin(ang);
            double a0 = q[i], a1 = q[i + 1];
            q[i] = a0 * c - a1 * s; q[i + 1] = a0 * s + a1 * c;
            if (i < kv) { a0 = k[i]; a1 = k[i + 1]; k[i] = a0 * c - a1 * s; k[i + 1] = a0 * s + a1 * c; }
        }
        double *kc = m->kc + ((size_t)l * m->T) * kv, *vc = m->vc + ((size_t)l * m->T) * kv;
        memcpy(kc + (size_t)pos * kv, k, sizeof(double) * kv);
        memcpy(vc + (size_t)pos * kv, v, sizeof(double) * kv);
        for (int h = 0; h < m->NH; h++) {
            const int g = h / rep;
            double mx = -(double)INFINITY, sum = 0;
            for (int t = 0; t <= pos; t++) {
                double s = 0;
                for (int i = 0; i < hs; i++) s += q[h * hs + i] * kc[(size_t)t * kv + g * hs + i];
                att[t] = s / sqrt((double)hs);
                mx = fmax(mx, att[t]);
            }
            for (int t = 0; t <= pos; t++) { att[t] = exp(att[t] - mx); sum += att[t]; }
            for (int i = 0; i < hs; i++) {
                double s = 0;
                for (int t = 0; t <= pos; t++) s += att[t] / sum * vc[(size_t)t * kv + g * hs + i];
                xb[h * hs + i] = s;
            }
        }
        ref_matvec(o, xb, m->wo + (size_t)l * D * D, D, D);
        for (int j = 0; j < D; j++) x[j] += o[j];
        ref_rmsnorm(xb, x, m->fn + (size_t)l * D, D);
        ref_matvec(hb, xb, m->w1 + (size_t)l * D * Hd, D, Hd);
        ref_matvec(hb2, xb, m->w3 + (size_t)l * D * Hd, D, Hd);
        for (int i = 0; i < Hd; i++) hb[i] = hb[i] / (1.0 + exp(-hb[i])) * hb2[i];
        ref_matvec(o, hb, m->w2 + (size_t)l * D * Hd, Hd, D);
        for (int j = 0; j < D; j++) x[j] += o[j];
    }
    ref_rmsnorm(xb, x, m->norm, D);
    ref_matvec(logits, xb, m->cls, D, m->V);
}

/* A model saved by collage, read by the transcription above: its logits at every position of a prompt
 * equal collage's next-token logits (fp32) to float accuracy, for grouped-query heads, tied and untied. */
static void test_saved_file_runs_in_llama2c_transcription(void) {
    for (int untied = 0; untied < 2; untied++) {
        collage_model_config c = tiny(untied);
        c.max_seq_len = 16;
        const size_t n = collage_model_num_params(&c);
        float *w = malloc(n * sizeof *w), lg[256];
        double ref[256], worst = 0;
        collage_model_init_weights(&c, SEED + 5, w, n);
        h_seed(SEED + 6);
        for (size_t i = 0; i < n; i++) w[i] += (float)(0.05 * rnd_sym()); /* norms away from 1 */
        char path[128], err[1024];
        snprintf(path, sizeof path, "%s/ref%d.bin", g_dir, untied);
        CHECK(collage_model_save_file(path, &c, w, 0, err, sizeof err) == COLLAGE_OK, "save: %s", err);
        ref_model rm;
        collage_model *m = NULL;
        CHECK(ref_read(path, &rm) == 0, "the test's reader failed on %s", path);
        CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, 1, 16, &m) == COLLAGE_OK, "create");
        int prompt[16];
        for (int t = 0; t < 16; t++) prompt[t] = (int)(h_rand32() % 256u);
        for (int t = 0; t < 16 && m; t++) {
            ref_forward(&rm, prompt[t], t, ref);
            CHECK(collage_model_next_logits(m, w, prompt, t + 1, lg) == COLLAGE_OK, "next_logits");
            for (int i = 0; i < c.vocab_size; i++) worst = fmax(worst, fabs((double)lg[i] - ref[i]));
        }
        printf("    %s: llama2.c's forward on the saved file vs collage, 16 positions: max |logit diff| %.2e\n",
               untied ? "untied" : "tied", worst);
        CHECK(worst <= REF_LOGIT_TOL, "logits differ by %.3e", worst);
        ref_free(&rm);
        collage_model_free(m);
        free(w);
    }
}

/* Bad files: messages that name the file and the problem. */
static void expect_bad(const char *name, const char *needle, const collage_model_config *load_as) {
    char path[128], err[1024] = "";
    collage_model_config r;
    int bf;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    static float none[1]; /* a refused load writes nothing */
    collage_status st = load_as ? collage_model_load_file(path, load_as, none, 0, err, sizeof err)
                                : collage_model_read_header(path, &r, &bf, err, sizeof err);
    CHECK(st != COLLAGE_OK && strstr(err, name) && strstr(err, needle), "%s: status %d, message '%s' (want '%s')", name,
          (int)st, err, needle);
}

static void write_bytes(const char *name, const void *p, size_t len) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(p, 1, len, f); fclose(f); }
}

static void test_bad_files(void) {
    const collage_model_config c = micro(0);
    char path[128], err[1024];
    snprintf(path, sizeof path, "%s/good.bin", g_dir);
    CHECK(write_tagged(path, &c) == 0, "write");
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc(1 << 20);
    const size_t len = f ? fread(buf, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    write_bytes("truncated.bin", buf, len - 4);
    expect_bad("truncated.bin", "truncated", NULL);
    write_bytes("trailing.bin", buf, len + 4);
    expect_bad("trailing.bin", "trailing data", NULL);
    int32_t *h = (int32_t *)(void *)buf;
    h[1] += 8; /* hidden_dim: sizes no longer those of the header */
    write_bytes("hidden.bin", buf, len);
    expect_bad("hidden.bin", "describes", NULL);
    h[1] -= 8;
    h[4] = 3; /* 4 heads on 3 key/value heads: no model's header */
    write_bytes("kvheads.bin", buf, len);
    expect_bad("kvheads.bin", "not a model checkpoint", NULL);
    h[4] = 2;
    h[0] = 12; /* 4 heads of 3 columns: odd head size */
    write_bytes("oddhead.bin", buf, len);
    expect_bad("oddhead.bin", "even", NULL);
    h[0] = 16;
    memcpy(buf, "24ka", 4); /* llama2.c's versioned export: magic 0x616b3432, little-endian */
    write_bytes("versioned.bin", buf, len);
    expect_bad("versioned.bin", "version", NULL);
    write_bytes("short.bin", buf + 8, 20);
    expect_bad("short.bin", "not a model checkpoint", NULL);
    collage_model_config other = micro(1); /* good.bin is tied */
    expect_bad("good.bin", "expected", &other);
    collage_model_config theta = c;
    theta.rope_theta = 500000.0;
    const size_t n = collage_model_num_params(&c);
    float *w = calloc(n, sizeof *w);
    snprintf(path, sizeof path, "%s/theta.bin", g_dir);
    CHECK(collage_model_save_file(path, &theta, w, 0, err, sizeof err) == COLLAGE_ERR_ARG && strstr(err, "theta") &&
              strstr(err, "theta.bin"), "%s", err);
    free(w);
    free(buf);
}

/* ------------------------------------------------------------------ configs */
static void test_configs(void) {
    char msg[256];
    collage_model_config c = micro(0);
    CHECK(collage_model_check(&c, 2, 8, msg, sizeof msg) == COLLAGE_OK, "micro: %s", msg);
    c.num_kv_heads = 3;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK && strstr(msg, "num_kv_heads"), "%s", msg);
    c = micro(0); c.padded_vocab_size = 18;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK && strstr(msg, "padded_vocab_size"), "%s", msg);
    c = micro(0); c.norm_eps = 0;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK && strstr(msg, "norm_eps"), "%s", msg);
    c = micro(0); c.channels = 12;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK && strstr(msg, "even"), "%s", msg);
    c = micro(0);
    CHECK(collage_model_check(&c, 1, 9, msg, sizeof msg) == COLLAGE_ERR_SIZE && strstr(msg, "max_seq_len"), "%s", msg);
    collage_model_preset("tiny", &c);
    c.num_kv_heads = 2;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) == COLLAGE_ERR_ARG && strstr(msg, "gpt2"), "gpt2: %s", msg);
    /* resizing: key/value heads follow the heads where they were equal, the hidden size follows dim */
    collage_model_preset("llama-small", &c);
    collage_model_config_resize(&c, 0, 8, 0, 256, 0);
    CHECK(c.num_heads == 8 && c.num_kv_heads == 8 && c.channels == 256 && c.hidden_dim == 704,
          "llama-small resized: NH %d KV %d C %d hidden %d", c.num_heads, c.num_kv_heads, c.channels, c.hidden_dim);
    collage_model_preset("llama-tiny", &c);
    collage_model_config_resize(&c, 3, 8, 0, 0, 100);
    CHECK(c.num_layers == 3 && c.num_heads == 8 && c.num_kv_heads == 2 && c.hidden_dim == 100 && c.channels == 128,
          "llama-tiny resized: L %d NH %d KV %d hidden %d", c.num_layers, c.num_heads, c.num_kv_heads, c.hidden_dim);
    collage_model_preset("tiny", &c);
    collage_model_config_resize(&c, 0, 2, 0, 64, 0);
    CHECK(c.num_kv_heads == 0 && c.hidden_dim == 0 && collage_model_check(&c, 0, 0, NULL, 0) == COLLAGE_OK,
          "gpt2 resized grew llama sizes");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/collage_test_llama_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    set_threads(1);
    printf("test_llama: seed %llu, files in %s\n", SEED, g_dir);
    RUN(test_rope_against_complex);
    RUN(test_rmsnorm_against_formula);
    RUN(test_swiglu_against_formula);
    RUN(test_gqa_against_repeated_heads);
    RUN(test_backward_vs_finite_differences);
    RUN(test_float_matches_double);
    RUN(test_accumulation_and_partial_batch);
    RUN(test_init_and_loss);
    RUN(test_thread_count_independence);
    RUN(test_bf16_matches_emulation);
    RUN(test_llama2c_file_in_place);
    RUN(test_saved_file_runs_in_llama2c_transcription);
    RUN(test_bad_files);
    RUN(test_configs);
    h_rm_rf(g_dir);
    return h_end();
}

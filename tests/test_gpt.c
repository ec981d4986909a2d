/* test_gpt.c — the GPT-2 family in graph_model.h's object (made by collage__model_object): parameter
 * layout (llm.c's 124M count), initialisation, backward against central finite differences in double on
 * every parameter, the float model against the double one, the loss at init and under SGD,
 * bit-identical results for 1 and 2 threads, the bf16 mode (bf16 activations and gradients, loss near
 * fp32), partial batches, sampling, and bad input. */
#include "collage.h"
#include "collage_model.h"
#include "gpt2_plan.h"
#include "harness.h"
#include "model.h"
#include <cblas.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ tolerances */
#define FD_STEP 1e-3          /* finite-difference step (4-point stencil, error O(h^4)) */
#define FD_REL_TOL 1e-6       /* |analytic - FD| <= FD_REL_TOL |analytic| + FD_ABS_TOL, in double */
#define FD_ABS_TOL 1e-10
#define F32_GRAD_TOL 1e-4     /* float model vs double: max |Δg| / max |g| per tensor */
#define F32_LOSS_TOL 1e-6     /* relative */
#define ACCUM_TOL 1e-14       /* double: g after two backward passes vs 2 g, relative to max |g| */
#define INIT_LOSS_TOL 0.1     /* |loss at init − ln V| */
#define BF16_LOSS_REL 0.02    /* bf16 mode loss vs fp32 loss, relative */
#define BF16_GRAD_COS 0.99    /* cosine similarity of bf16 and fp32 gradients */
#define BF16_PATH_LOSS_REL 1e-3  /* the bf16 model on oneDNN's path vs the emulated one: loss, relative */
#define BF16_PATH_GRAD_COS 0.999 /* and the cosine of their gradients */
#define SGD_STEPS 40
#define SGD_GAIN 0.5          /* loss after SGD_STEPS below this fraction of the first */
#define SAMPLE_DRAWS 20000
#define SAMPLE_SIGMAS 6.0

#define EXP_MAX_ULP 2         /* the float model's exp vs exp in double, rounded */
#define EXP_CASES 1000000

#define SEED 20260507ULL

static collage_model_config small_cfg(void) {
    return (collage_model_config){.family = COLLAGE_FAMILY_GPT2, .vocab_size = 19, .padded_vocab_size = 24,
                                  .max_seq_len = 8, .num_layers = 2, .num_heads = 2, .channels = 16};
}

/* Random parameters of a scale that exercises every path (attention far from uniform, LayerNorm
 * weights and biases away from 1 and 0, padded wte rows nonzero), rounded to float. */
static void random_params(const collage_model_config *c, double *w, unsigned long long seed) {
    collage_tensor_info t[GPT2_NTENSORS];
    gpt2_tensors(c, t, GPT2_NTENSORS);
    h_seed(seed);
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        int lnw = k == GPT2_LN1W || k == GPT2_LN2W || k == GPT2_LNFW;
        for (size_t i = 0; i < t[k].count; i++) {
            double u = h_uniform() - 0.5;
            double v = t[k].decay ? 0.8 * u : lnw ? 1.0 + 0.4 * u : 0.2 * u;
            w[t[k].offset + i] = (double)(float)v;
        }
    }
}

static void random_tokens(int *tok, int *tgt, int n, int V) {
    for (int i = 0; i < n; i++) { tok[i] = (int)(h_rand32() % (unsigned)V); tgt[i] = (int)(h_rand32() % (unsigned)V); }
}

static double loss_f64(gm_model *m, const double *w, const int *tok, const int *tgt, int B, int T) {
    double L = (double)NAN;
    collage_status st = gm_forward(m, w, tok, tgt, B, T, &L);
    CHECK(st == COLLAGE_OK, "forward: %s", gm_error(m));
    return L;
}

/* Threads of the library's loops and of OpenBLAS; n = 0 restores both defaults. */
static int g_blas_default;
static void set_threads(int n) {
    collage_set_threads(n);
    openblas_set_num_threads(n > 0 ? n : g_blas_default);
}

/* ------------------------------------------------------------------ layout and init */
static void test_layout(void) {
    collage_model_config c;
    CHECK(gpt2_preset("gpt2", &c) == COLLAGE_OK, "preset gpt2");
    CHECK(collage_model_num_params(&c) == 124475904u, "gpt2 params %zu, llm.c has 124475904", collage_model_num_params(&c));
    collage_tensor_info t[GPT2_NTENSORS];
    CHECK(gpt2_tensors(&c, t, GPT2_NTENSORS) == GPT2_NTENSORS, "tensor count");
    static const char *names[] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                  "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    static const int decay[] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    size_t off = 0;
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        CHECK(strcmp(t[k].name, names[k]) == 0, "tensor %d is %s", k, t[k].name);
        CHECK(t[k].offset == off, "%s offset %zu, expected %zu", names[k], t[k].offset, off);
        CHECK(t[k].decay == decay[k], "%s decay %d", names[k], t[k].decay);
        off += t[k].count;
    }
    CHECK(t[GPT2_WTE].count == 50304u * 768u, "wte count");
    CHECK(t[GPT2_QKVW].ndim == 3 && t[GPT2_QKVW].shape[0] == 12 && t[GPT2_QKVW].shape[1] == 2304 &&
              t[GPT2_QKVW].shape[2] == 768, "qkvw shape");
    CHECK(t[GPT2_FCPROJW].shape[1] == 768 && t[GPT2_FCPROJW].shape[2] == 3072, "fcprojw shape");
    collage_param_group g[GPT2_NTENSORS];
    CHECK(collage_model_param_groups(&c, 0.1, g, GPT2_NTENSORS) == GPT2_NTENSORS, "groups");
    CHECK(g[GPT2_FCW].weight_decay == 0.1 && g[GPT2_FCB].weight_decay == 0.0 &&
              g[GPT2_LNFW].weight_decay == 0.0 && g[GPT2_WTE].weight_decay == 0.1, "group decay");
    CHECK(gpt2_preset("tiny", &c) == COLLAGE_OK && gpt2_check(&c, 4, 64, NULL, 0) == COLLAGE_OK, "tiny");
    CHECK(gpt2_preset("small", &c) == COLLAGE_OK && gpt2_check(&c, 4, 256, NULL, 0) == COLLAGE_OK, "small");
    CHECK(gpt2_pad_vocab(50257) == 50304 && gpt2_pad_vocab(256) == 256, "pad vocab");
}

static void test_init(void) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    c.vocab_size = 200; /* 56 padded rows */
    size_t n = collage_model_num_params(&c);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    collage_tensor_info t[GPT2_NTENSORS];
    gpt2_tensors(&c, t, GPT2_NTENSORS);
    printf("    seed %llu\n", SEED);
    set_threads(1);
    CHECK(gpt2_init_weights(&c, SEED, a, n) == COLLAGE_OK, "init");
    set_threads(2);
    CHECK(gpt2_init_weights(&c, SEED, b, n) == COLLAGE_OK, "init");
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "init differs between 1 and 2 threads");
    set_threads(0);
    gpt2_init_weights(&c, SEED + 1, b, n);
    CHECK(memcmp(a, b, n * sizeof *a) != 0, "init ignores the seed");
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        const float *x = a + t[k].offset;
        size_t cnt = k == GPT2_WTE ? (size_t)c.vocab_size * c.channels : t[k].count;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < cnt; i++) { s += (double)x[i]; s2 += (double)x[i] * (double)x[i]; }
        double mean = s / (double)cnt, sd = sqrt(s2 / (double)cnt - mean * mean);
        if (t[k].decay) {
            double want = (k == GPT2_ATTPROJW || k == GPT2_FCPROJW) ? 0.02 / sqrt(2.0 * c.num_layers) : 0.02;
            CHECK(fabs(sd - want) < 0.05 * want && fabs(mean) < 0.05 * want, "%s mean %g sd %g, want sd %g",
                  t[k].name, mean, sd, want);
        } else {
            double want = (k == GPT2_LN1W || k == GPT2_LN2W || k == GPT2_LNFW) ? 1.0 : 0.0;
            CHECK(mean == want && sd == 0, "%s mean %g sd %g", t[k].name, mean, sd);
        }
    }
    int pad_nonzero = 0;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < t[GPT2_WTE].count; i++) pad_nonzero += a[i] != 0;
    CHECK(pad_nonzero == 0, "%d nonzero padded wte entries", pad_nonzero);
    CHECK(gpt2_init_weights(&c, SEED, a, n - 1) == COLLAGE_ERR_SIZE, "wrong n accepted");
    free(a);
    free(b);
}

/* ------------------------------------------------------------------ the model's exp */
static uint32_t fbits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

static void test_exp(void) {
    h_seed(SEED);
    printf("    seed %llu, %d cases\n", SEED, EXP_CASES);
    uint32_t worst = 0;
    float worst_x = 0;
    for (int i = 0; i < EXP_CASES; i++) {
        float x = i < 4096 ? -87.33f + (float)i * (176.05f / 4096.0f) : (float)((h_uniform() - 0.5) * 176.1);
        float got = nn_exp_f32(x), want = (float)exp((double)x);
        if (want < 0x1p-126f) continue; /* subnormal results are flushed to 0 by contract */
        uint32_t d = fbits(got) > fbits(want) ? fbits(got) - fbits(want) : fbits(want) - fbits(got);
        if (d > worst) { worst = d; worst_x = x; }
    }
    printf("    worst %u ulp at x = %a\n", worst, (double)worst_x);
    CHECK(worst <= EXP_MAX_ULP, "exp(%a): %u ulp", (double)worst_x, worst);
    CHECK(nn_exp_f32(0.0f) == 1.0f, "exp(0) = %a", (double)nn_exp_f32(0.0f));
    CHECK(nn_exp_f32(-87.4f) == 0.0f && nn_exp_f32(-1e30f) == 0.0f &&
              nn_exp_f32(-INFINITY) == 0.0f, "underflow");
    CHECK(isinf(nn_exp_f32(88.73f)) && isinf(nn_exp_f32(INFINITY)), "overflow");
    CHECK(isfinite(nn_exp_f32(88.72f)), "exp(88.72) overflowed");
    CHECK(isnan(nn_exp_f32(NAN)), "NaN");
}

/* ------------------------------------------------------------------ gradients */
/* loss_f64 as h_fd_tensor's loss */
typedef struct { gm_model *m; const int *tok, *tgt; int B, T; } fd_ctx;
static double fd_loss(void *ctx, double *w) {
    const fd_ctx *X = ctx;
    return loss_f64(X->m, w, X->tok, X->tgt, X->B, X->T);
}

/* Every parameter of a two-layer model: the double backward against a 4-point central difference of
 * the double forward. */
static void test_backward_vs_finite_differences(void) {
    const collage_model_config c = small_cfg();
    const int B = 2, T = 5;
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP64, B, T, &m) == COLLAGE_OK, "create");
    if (!m) return;
    const size_t n = gm_size(m);
    double *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g);
    int tok[10], tgt[10];
    printf("    seed %llu, %zu parameters, B %d T %d\n", SEED, n, B, T);
    random_params(&c, w, SEED);
    random_tokens(tok, tgt, B * T, c.vocab_size);
    double L0 = loss_f64(m, w, tok, tgt, B, T);
    gm_zero_grad(m);
    CHECK(gm_backward(m) == COLLAGE_OK, "backward: %s", gm_error(m));
    memcpy(g, gm_grads(m), n * sizeof *g);
    collage_tensor_info t[GPT2_NTENSORS];
    gpt2_tensors(&c, t, GPT2_NTENSORS);
    fd_ctx X = {m, tok, tgt, B, T};
    for (int k = 0; k < GPT2_NTENSORS; k++)
        h_fd_tensor(t[k].name, w, g, t[k].offset, t[k].count, fd_loss, &X, FD_STEP, FD_REL_TOL, FD_ABS_TOL);
    /* padded wte rows: masked, exactly zero gradient */
    int pad_nonzero = 0;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < t[GPT2_WTE].count; i++) pad_nonzero += g[i] != 0;
    CHECK(pad_nonzero == 0, "%d nonzero gradients on padded wte rows", pad_nonzero);
    CHECK(fabs(loss_f64(m, w, tok, tgt, B, T) - L0) == 0, "loss not reproducible");
    free(w);
    free(g);
    gm_free(m);
}

/* The float model against the double one on the same (float) parameters. */
static void test_float_matches_double(void) {
    const collage_model_config c = small_cfg();
    const int B = 2, T = 5;
    gm_model *md = NULL, *mf = NULL;
    CHECK(collage__model_object(&c, GM_FP64, B, T, &md) == COLLAGE_OK, "create fp64");
    CHECK(collage__model_object(&c, GM_FP32, B, T, &mf) == COLLAGE_OK, "create fp32");
    if (!md || !mf) { gm_free(md); gm_free(mf); return; }
    const size_t n = gm_size(md);
    double *w = malloc(n * sizeof *w);
    float *wf = malloc(n * sizeof *wf);
    int tok[10], tgt[10];
    random_params(&c, w, SEED + 7);
    for (size_t i = 0; i < n; i++) wf[i] = (float)w[i];
    random_tokens(tok, tgt, B * T, c.vocab_size);
    double Ld = 0, Lf = 0;
    CHECK(gm_forward(md, w, tok, tgt, B, T, &Ld) == COLLAGE_OK, "forward fp64");
    CHECK(gm_forward(mf, wf, tok, tgt, B, T, &Lf) == COLLAGE_OK, "forward fp32");
    CHECK(fabs(Lf - Ld) <= F32_LOSS_TOL * Ld, "loss fp32 %.9g fp64 %.9g", Lf, Ld);
    gm_backward(md);
    gm_backward(mf);
    const double *gd = gm_grads(md);
    const float *gf = gm_grads(mf);
    collage_tensor_info t[GPT2_NTENSORS];
    gpt2_tensors(&c, t, GPT2_NTENSORS);
    double worst = 0;
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        double gmax = 0, dmax = 0;
        for (size_t j = t[k].offset; j < t[k].offset + t[k].count; j++) {
            if (fabs(gd[j]) > gmax) gmax = fabs(gd[j]);
            if (fabs((double)gf[j] - gd[j]) > dmax) dmax = fabs((double)gf[j] - gd[j]);
        }
        CHECK(dmax <= F32_GRAD_TOL * gmax, "%s: max |g32 - g64| %.3e, max |g64| %.3e", t[k].name, dmax, gmax);
        if (gmax > 0 && dmax / gmax > worst) worst = dmax / gmax;
    }
    printf("    loss fp64 %.12f fp32 %.12f; worst tensor max|g32-g64|/max|g64| %.1e\n", Ld, Lf, worst);
    free(w);
    free(wf);
    gm_free(md);
    gm_free(mf);
}

/* Gradients accumulate (+=) over backward calls; zero_grad clears them; a model created for a larger
 * batch gives the same result on a smaller one. */
static void test_accumulation_and_partial_batch(void) {
    const collage_model_config c = small_cfg();
    gm_model *m = NULL, *big = NULL;
    CHECK(collage__model_object(&c, GM_FP64, 2, 5, &m) == COLLAGE_OK, "create");
    CHECK(collage__model_object(&c, GM_FP64, 3, 8, &big) == COLLAGE_OK, "create big");
    if (!m || !big) { gm_free(m); gm_free(big); return; }
    const size_t n = gm_size(m);
    double *w = malloc(n * sizeof *w), *g1 = malloc(n * sizeof *g1);
    int tok[10], tgt[10];
    random_params(&c, w, SEED + 3);
    random_tokens(tok, tgt, 10, c.vocab_size);
    double L1 = loss_f64(m, w, tok, tgt, 2, 5), L2 = 0;
    gm_backward(m);
    memcpy(g1, gm_grads(m), n * sizeof *g1);
    CHECK(gm_backward(m) == COLLAGE_ERR_ARG, "second backward accepted");
    loss_f64(m, w, tok, tgt, 2, 5);
    gm_backward(m);
    const double *g2 = gm_grads(m);
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(g2[i] - 2 * g1[i]));
        gmax = fmax(gmax, fabs(g1[i]));
    }
    CHECK(worst <= ACCUM_TOL * gmax, "two backward passes vs twice one: max diff %.2e, max |g| %.2e", worst, gmax);
    gm_zero_grad(m);
    int nz = 0;
    for (size_t i = 0; i < n; i++) nz += g2[i] != 0;
    CHECK(nz == 0, "%d nonzero after zero_grad", nz);
    CHECK(gm_forward(big, w, tok, tgt, 2, 5, &L2) == COLLAGE_OK, "forward big");
    gm_backward(big);
    CHECK(L1 == L2, "loss on a larger model %.17g vs %.17g", L2, L1);
    CHECK(memcmp(gm_grads(big), g1, n * sizeof *g1) == 0, "gradients differ on a larger model");
    free(w);
    free(g1);
    gm_free(m);
    gm_free(big);
}

/* ------------------------------------------------------------------ loss */
static void test_loss_at_init(void) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    const int B = 4, T = 32;
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP32, B, T, &m) == COLLAGE_OK, "create");
    if (!m) return;
    const size_t n = gm_size(m);
    float *w = malloc(n * sizeof *w);
    gpt2_init_weights(&c, SEED, w, n);
    int tok[128], tgt[128];
    h_seed(SEED);
    random_tokens(tok, tgt, B * T, c.vocab_size);
    double L = 0;
    CHECK(gm_forward(m, w, tok, tgt, B, T, &L) == COLLAGE_OK, "forward");
    printf("    tiny preset: loss at init %.4f, ln V = %.4f\n", L, log((double)c.vocab_size));
    CHECK(fabs(L - log((double)c.vocab_size)) < INIT_LOSS_TOL, "loss at init %.4f vs ln V %.4f", L,
          log((double)c.vocab_size));
    free(w);
    gm_free(m);
}

/* SGD on a repeated 8-symbol phrase (a byte vocabulary, a model small enough to run on one thread):
 * the model should learn to continue it. */
static void test_sgd_reduces_loss(void) {
    const collage_model_config c = {.family = COLLAGE_FAMILY_GPT2, .vocab_size = 256, .padded_vocab_size = 256,
                                    .max_seq_len = 32, .num_layers = 2, .num_heads = 4, .channels = 64};
    const int B = 2, T = 32;
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP32, B, T, &m) == COLLAGE_OK, "create");
    if (!m) return;
    const size_t n = gm_size(m);
    float *w = malloc(n * sizeof *w);
    gpt2_init_weights(&c, SEED, w, n);
    int tok[64], tgt[64];
    const char *phrase = "collage ";
    for (int i = 0; i < B * T; i++) { tok[i] = phrase[i % 8]; tgt[i] = phrase[(i + 1) % 8]; }
    double first = 0, last = 0, L = 0;
    for (int s = 0; s < SGD_STEPS; s++) {
        gm_forward(m, w, tok, tgt, B, T, &L);
        gm_zero_grad(m);
        gm_backward(m);
        const float *g = gm_grads(m);
        for (size_t i = 0; i < n; i++) w[i] -= 0.5f * g[i];
        if (s == 0) first = L;
        last = L;
    }
    printf("    loss %.4f -> %.4f in %d steps\n", first, last, SGD_STEPS);
    CHECK(last < SGD_GAIN * first, "loss %.4f -> %.4f", first, last);
    free(w);
    gm_free(m);
}

/* ------------------------------------------------------------------ threads */
/* Every stored activation's bytes, in tensor order, into out (NULL: only the total); returns the bytes. */
static size_t acts_copy(const gm_model *m, unsigned char *out) {
    gm_act at[32];
    int na = gm_act_tensors(m, at, 32);
    size_t off = 0;
    for (int k = 0; k < na; k++) {
        size_t nb = at[k].count * at[k].esize;
        if (out) memcpy(out + off, at[k].data, nb);
        off += nb;
    }
    return off;
}

static void run_threads(gm_precision prec, int threads, const void *w, const int *tok, const int *tgt,
                        int B, int T, double *loss, void *grads, unsigned char *acts) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    gm_model *m = NULL;
    set_threads(threads);
    CHECK(collage__model_object(&c, prec, B, T, &m) == COLLAGE_OK, "create");
    if (!m) return;
    size_t n = gm_size(m), es = prec == GM_BF16 ? 2 : 4;
    gm_forward(m, w, tok, tgt, B, T, loss);
    gm_zero_grad(m);
    gm_backward(m);
    memcpy(grads, gm_grads(m), n * es);
    acts_copy(m, acts);
    gm_free(m);
}

/* B·T·C large enough that every kernel runs its parallel path (src/nn/ops.inc: OPS_PAR_MIN); the bf16
 * model on the path this machine takes (oneDNN's or the widening one). */
static void test_thread_count_independence(void) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    const int B = 8, T = 64;
    size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w);
    collage_bf16 *w16 = malloc(n * sizeof *w16);
    gpt2_init_weights(&c, SEED, w, n);
    collage_bf16_from_f32_row(w16, w, n);
    static int tok[512], tgt[512];
    h_seed(SEED + 11);
    random_tokens(tok, tgt, B * T, c.vocab_size);
    gm_model *probe = NULL;
    collage__model_object(&c, GM_FP32, B, T, &probe);
    size_t nacts = acts_copy(probe, NULL);
    gm_free(probe);
    float *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    unsigned char *a1 = calloc(nacts, 1), *a2 = calloc(nacts, 1);
    for (int p = 0; p < 2; p++) {
        gm_precision prec = p ? GM_BF16 : GM_FP32;
        const void *wp = p ? (const void *)w16 : (const void *)w;
        double L1 = 0, L2 = 0;
        run_threads(prec, 1, wp, tok, tgt, B, T, &L1, g1, a1);
        for (int th = 2; th <= 3; th++) {
            run_threads(prec, th, wp, tok, tgt, B, T, &L2, g2, a2);
            size_t gb = n * (p ? 2 : 4);
            CHECK(L1 == L2, "%s: loss %.17g (1 thread) vs %.17g (%d)", gm_precision_name(prec), L1, L2, th);
            CHECK(memcmp(g1, g2, gb) == 0, "%s: gradients differ between 1 and %d threads",
                  gm_precision_name(prec), th);
            CHECK(memcmp(a1, a2, nacts) == 0, "%s: activations differ (1 and %d threads)",
                  gm_precision_name(prec), th);
        }
        uint64_t hsh = 1469598103934665603ULL; /* FNV-1a of the gradients: compare across builds by eye */
        for (size_t i = 0; i < n * (p ? 2 : 4); i++) hsh = (hsh ^ ((const unsigned char *)g1)[i]) * 1099511628211ULL;
        printf("    %s: loss %.9f, gradient hash %016llx\n", gm_precision_name(prec), L1,
               (unsigned long long)hsh);
    }
    set_threads(0);
    free(w); free(w16); free(g1); free(g2); free(a1); free(a2);
}

/* ------------------------------------------------------------------ bf16 */
/* One forward + backward of a fresh model of precision prec on the tiny preset; the loss, the gradient
 * slab (bf16: widened) and every activation widened to double, in tensor order. */
typedef struct { double loss; float *g; double *a; size_t na; int nbf16, notbf16; } bf16_run;

/* After a backward the float models hold dlogits in "logits" (in place) and the bf16 model holds them in
 * "d_logits": both are left out (the gradients cover them). */
static int act_compared(const char *name) { return strcmp(name, "logits") != 0 && strcmp(name, "d_logits") != 0; }

static void act_values(const gm_model *m, bf16_run *r) {
    gm_act at[32];
    int na = gm_act_tensors(m, at, 32);
    size_t total = 0;
    for (int k = 0; k < na; k++) total += act_compared(at[k].name) ? at[k].count : 0;
    r->a = malloc(total * sizeof(double));
    r->na = total;
    size_t o = 0;
    for (int k = 0; k < na; k++)
        for (size_t i = 0; i < at[k].count && act_compared(at[k].name); i++) {
            double v;
            if (at[k].esize == 2) {
                uint16_t b;
                memcpy(&b, (const char *)at[k].data + 2 * i, 2);
                v = (double)collage_bf16_to_f32((collage_bf16){b});
            } else {
                float f;
                memcpy(&f, (const char *)at[k].data + 4 * i, 4);
                uint32_t u;
                memcpy(&u, &f, 4);
                if (at[k].bf16) { r->nbf16++; r->notbf16 += (u & 0xffffu) != 0; }
                v = (double)f;
            }
            r->a[o++] = v;
        }
}

static bf16_run bf16_once(gm_precision prec, const collage_bf16 *w16, const float *w, const int *tok,
                          const int *tgt, int B, int T) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    bf16_run r = {.loss = (double)NAN};
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, prec, B, T, &m) == COLLAGE_OK, "create %s", gm_precision_name(prec));
    if (!m) return r;
    size_t n = gm_size(m);
    const void *wp = prec == GM_FP32 ? (const void *)w : (const void *)w16;
    CHECK(gm_forward(m, wp, tok, tgt, B, T, &r.loss) == COLLAGE_OK, "forward");
    gm_zero_grad(m);
    CHECK(gm_backward(m) == COLLAGE_OK, "backward");
    r.g = malloc(n * sizeof(float));
    if (prec == GM_FP32) memcpy(r.g, gm_grads(m), n * sizeof(float));
    else collage_bf16_to_f32_row(r.g, gm_grads(m), n);
    act_values(m, &r);
    gm_free(m);
    return r;
}

/* The bf16 model on the widening path gives the values of bf16-emulated (the float model rounding where
 * bf16 is stored) exactly: loss, gradients, every activation. On oneDNN's path they agree to fp32 sums. */
static void test_bf16_matches_emulation(void) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    const int B = 4, T = 64;
    size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w);
    collage_bf16 *w16 = malloc(n * sizeof *w16);
    gpt2_init_weights(&c, SEED + 3, w, n);
    collage_bf16_from_f32_row(w16, w, n);
    static int tok[256], tgt[256];
    h_seed(SEED + 12);
    random_tokens(tok, tgt, B * T, c.vocab_size);
    bf16_run e = bf16_once(GM_BF16_EMULATED, w16, w, tok, tgt, B, T);
    setenv("COLLAGE_BF16_GEMM", "widen", 1);
    bf16_run x = bf16_once(GM_BF16, w16, w, tok, tgt, B, T);
    unsetenv("COLLAGE_BF16_GEMM");
    bf16_run h = bf16_once(GM_BF16, w16, w, tok, tgt, B, T);
    /* the bf16 graph built for AVX-512 and for the baseline ISA gives the same bits */
    const collage_isa isa = collage_get_isa();
    if (isa == COLLAGE_ISA_AVX512 && collage_set_isa(COLLAGE_ISA_SCALAR) == COLLAGE_OK) {
        char perr[256]; /* the two builds on the same products' kernels (the products file keys collage's ISA) */
        const char *pin = collage_products_check("fp32=openblas,bf16=onednn", perr, sizeof perr) == COLLAGE_OK
                              ? "fp32=openblas,bf16=onednn" : "fp32=openblas,bf16=widen";
        CHECK(collage_products_pin(pin, perr, sizeof perr) == COLLAGE_OK, "pin %s: %s", pin, perr);
        bf16_run s = bf16_once(GM_BF16, w16, w, tok, tgt, B, T);
        collage_set_isa(isa);
        bf16_run v = bf16_once(GM_BF16, w16, w, tok, tgt, B, T);
        collage_products_pin(NULL, perr, sizeof perr);
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(&s.g[i], &v.g[i], sizeof(float)) != 0;
        for (size_t i = 0; i < s.na && i < v.na; i++) diff += memcmp(&s.a[i], &v.a[i], sizeof(double)) != 0;
        CHECK(s.loss == v.loss && diff == 0, "bf16 graph: AVX-512 and baseline builds differ (%zu values, products %s)", diff, pin);
        free(s.g); free(s.a); free(v.g); free(v.a);
    } else
        printf("    (no AVX-512 here: the bf16 graph's two builds not compared)\n");
    size_t gbad = 0, abad = 0;
    for (size_t i = 0; i < n; i++) gbad += (double)x.g[i] != (double)e.g[i];
    for (size_t i = 0; i < e.na && i < x.na; i++) abad += !(x.a[i] == e.a[i] || (x.a[i] != x.a[i] && e.a[i] != e.a[i]));
    CHECK(x.loss == e.loss, "widening path: loss %.17g vs emulated %.17g", x.loss, e.loss);
    CHECK(gbad == 0, "widening path: %zu of %zu gradients differ from the emulated model's", gbad, n);
    CHECK(x.na == e.na && abad == 0, "widening path: %zu of %zu activations differ", abad, e.na);
    CHECK(e.nbf16 > 0 && e.notbf16 == 0, "emulated: %d of %d values are not bf16", e.notbf16, e.nbf16);
    /* the hardware path: loss and gradient direction as close as fp32 sums in another order allow */
    double dot = 0, nh = 0, ne = 0, gmax = 0, dmax = 0;
    for (size_t i = 0; i < n; i++) {
        const double hg = (double)h.g[i], eg = (double)e.g[i];
        dot += hg * eg; nh += hg * hg; ne += eg * eg;
        gmax = fmax(gmax, fabs(eg)); dmax = fmax(dmax, fabs(hg - eg));
    }
    double cosine = dot / sqrt(nh * ne);
    printf("    %s: loss %.7f, emulated %.7f; gradient cosine %.6f, max |Δg| %.2e of max |g| %.2e\n",
           collage_bf16_products(), h.loss, e.loss, cosine, dmax, gmax);
    CHECK(fabs(h.loss - e.loss) <= BF16_PATH_LOSS_REL * e.loss, "bf16 path loss %.7f vs emulated %.7f", h.loss, e.loss);
    CHECK(cosine >= BF16_PATH_GRAD_COS, "bf16 path gradient cosine %.6f", cosine);
    free(e.g); free(e.a); free(x.g); free(x.a); free(h.g); free(h.a);
    free(w); free(w16);
}

static void test_bf16_mode(void) {
    collage_model_config c;
    gpt2_preset("tiny", &c);
    const int B = 4, T = 32;
    size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w);
    collage_bf16 *w16 = malloc(n * sizeof *w16);
    gpt2_init_weights(&c, SEED, w, n);
    collage_bf16_from_f32_row(w16, w, n);
    collage_bf16_to_f32_row(w, w16, n); /* both models see the same bf16 weights */
    int tok[128], tgt[128];
    h_seed(SEED + 5);
    for (int i = 0; i < B * T; i++) { tok[i] = (int)(h_rand32() % 64u); tgt[i] = (tok[i] * 7 + 3) % 64; }
    bf16_run b = bf16_once(GM_BF16, w16, w, tok, tgt, B, T);
    bf16_run f = bf16_once(GM_FP32, w16, w, tok, tgt, B, T);
    double dot = 0, nb = 0, nf = 0;
    for (size_t i = 0; i < n; i++) {
        const double bg = (double)b.g[i], fg = (double)f.g[i];
        dot += bg * fg; nb += bg * bg; nf += fg * fg;
    }
    double cosine = dot / sqrt(nb * nf);
    printf("    loss bf16 %.5f fp32 %.5f; gradient cosine %.5f\n", b.loss, f.loss, cosine);
    CHECK(fabs(b.loss - f.loss) <= BF16_LOSS_REL * f.loss, "loss bf16 %.5f vs fp32 %.5f", b.loss, f.loss);
    CHECK(cosine >= BF16_GRAD_COS, "gradient cosine %.5f", cosine);
    free(b.g); free(b.a); free(f.g); free(f.a);
    free(w);
    free(w16);
}

/* ------------------------------------------------------------------ inference */
static void test_next_logits_and_sampling(void) {
    const collage_model_config c = small_cfg();
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP32, 1, 8, &m) == COLLAGE_OK, "create");
    if (!m) return;
    size_t n = gm_size(m);
    double *wd = malloc(n * sizeof *wd);
    float *w = malloc(n * sizeof *w);
    random_params(&c, wd, SEED + 9);
    for (size_t i = 0; i < n; i++) w[i] = (float)wd[i];
    int tok[8] = {1, 5, 18, 0, 7, 7, 3, 2};
    float logits[19];
    CHECK(gm_next_logits(m, w, tok, 6, logits) == COLLAGE_OK, "next_logits: %s", gm_error(m));
    /* the same as the full forward's row T−1 */
    CHECK(gm_forward(m, w, tok, NULL, 1, 6, NULL) == COLLAGE_OK, "forward without targets");
    gm_act at[32];
    int na = gm_act_tensors(m, at, 32);
    const float *full = NULL;
    for (int k = 0; k < na; k++)
        if (strcmp(at[k].name, "logits") == 0) full = (const float *)at[k].data + 5 * 24;
    double dmax = 0;
    for (int i = 0; i < 19 && full; i++) dmax = fmax(dmax, fabs((double)logits[i] - (double)full[i]));
    CHECK(full && dmax <= 1e-5, "next_logits vs forward: max diff %.2e", dmax);
    int am = 0;
    for (int i = 1; i < 19; i++) if (logits[i] > logits[am]) am = i;
    CHECK(collage_sample_logits(logits, 19, 0.0f, 1, 0) == am, "temperature 0 is not the argmax");
    uint64_t key = collage_rand_key(SEED, 0);
    CHECK(collage_sample_logits(logits, 19, 1.0f, key, 42) == collage_sample_logits(logits, 19, 1.0f, key, 42), "sample");
    /* frequencies of a 4-token distribution */
    const float lg[4] = {0.0f, 1.0f, -1.0f, 0.5f};
    double p[4], z = 0;
    for (int i = 0; i < 4; i++) z += exp((double)lg[i] / 0.8);
    for (int i = 0; i < 4; i++) p[i] = exp((double)lg[i] / 0.8) / z;
    int cnt[4] = {0};
    for (int d = 0; d < SAMPLE_DRAWS; d++) {
        int s = collage_sample_logits(lg, 4, 0.8f, key, (uint64_t)d);
        CHECK(s >= 0 && s < 4, "sample %d", s);
        if (s >= 0 && s < 4) cnt[s]++;
    }
    for (int i = 0; i < 4; i++) {
        double e = p[i] * SAMPLE_DRAWS, sd = sqrt(e * (1 - p[i]));
        CHECK(fabs(cnt[i] - e) <= SAMPLE_SIGMAS * sd, "token %d drawn %d times, expected %.0f", i, cnt[i], e);
    }
    const float bad[2] = {0.0f, NAN};
    CHECK(collage_sample_logits(bad, 2, 1.0f, key, 0) == -1 && collage_sample_logits(lg, 0, 1.0f, key, 0) == -1, "bad");
    free(wd);
    free(w);
    gm_free(m);
}

/* ------------------------------------------------------------------ bad input */
static void test_bad_input(void) {
    char msg[200];
    collage_model_config c = small_cfg();
    c.channels = 18; /* 2 heads: fine */
    c.num_heads = 4;  /* 18 % 4 != 0 */
    CHECK(gpt2_check(&c, 1, 1, msg, sizeof msg) == COLLAGE_ERR_SIZE && strstr(msg, "divisible"), "heads: %s", msg);
    gm_model *m = (gm_model *)&c;
    CHECK(collage__model_object(&c, GM_FP32, 1, 4, &m) == COLLAGE_ERR_SIZE && m == NULL, "create bad heads");
    c = small_cfg();
    c.padded_vocab_size = 10;
    CHECK(gpt2_check(&c, 1, 1, msg, sizeof msg) == COLLAGE_ERR_SIZE, "Vp < V");
    c = small_cfg();
    c.num_layers = 0;
    CHECK(gpt2_check(&c, 1, 1, msg, sizeof msg) == COLLAGE_ERR_SIZE, "L = 0");
    c = small_cfg();
    CHECK(collage__model_object(&c, GM_FP32, 1, 9, &m) == COLLAGE_ERR_SIZE, "maxT > max_seq_len");
    CHECK(collage__model_object(&c, GM_FP32, 0, 4, &m) == COLLAGE_ERR_SIZE, "maxB = 0");
    CHECK(collage__model_object(&c, GM_PRECISION_COUNT, 1, 4, &m) == COLLAGE_ERR_ARG, "bad precision");
    CHECK(collage__model_object(NULL, GM_FP32, 1, 4, &m) == COLLAGE_ERR_NULL, "NULL config");
    CHECK(gpt2_preset("huge", &c) == COLLAGE_ERR_ARG, "unknown preset");
    collage_real pr;
    CHECK(collage_real_parse("bf16", &pr) == COLLAGE_OK && gm_precision_of(pr) == GM_BF16, "parse bf16");
    CHECK(collage_real_parse("fp8", &pr) == COLLAGE_OK && gm_precision_of(pr) == GM_FP8, "parse fp8");
    CHECK(collage_real_parse("fp4", &pr) == COLLAGE_OK && gm_precision_of(pr) == GM_FP4, "parse fp4");
    CHECK(collage_real_parse("fp2", &pr) == COLLAGE_ERR_ARG, "parse fp2");
    c = small_cfg();
    CHECK(collage__model_object(&c, GM_FP32, 2, 4, &m) == COLLAGE_OK, "create");
    if (!m) return;
    size_t n = gm_size(m);
    float *w = calloc(n, sizeof *w);
    int tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, tgt[10] = {0};
    double L = 0;
    CHECK(gm_forward(m, w, tok, tgt, 2, 5, &L) == COLLAGE_ERR_SIZE, "T > maxT");
    CHECK(gm_forward(m, w, tok, tgt, 3, 4, &L) == COLLAGE_ERR_SIZE, "B > maxB");
    CHECK(gm_forward(m, w, tok, tgt, 1, 0, &L) == COLLAGE_ERR_SIZE, "T = 0");
    tok[3] = 19;
    CHECK(gm_forward(m, w, tok, tgt, 2, 4, &L) == COLLAGE_ERR_ARG && strstr(gm_error(m), "19"),
          "token = V: %s", gm_error(m));
    tok[3] = -1;
    CHECK(gm_forward(m, w, tok, tgt, 2, 4, &L) == COLLAGE_ERR_ARG, "token -1");
    tok[3] = 4;
    tgt[7] = 25;
    CHECK(gm_forward(m, w, tok, tgt, 2, 4, &L) == COLLAGE_ERR_ARG, "target >= V");
    CHECK(gm_backward(m) == COLLAGE_ERR_ARG, "backward after a failed forward");
    CHECK(gm_forward(m, NULL, tok, tgt, 2, 4, &L) == COLLAGE_ERR_NULL, "NULL params");
    CHECK(gm_forward(m, w, tok, NULL, 2, 4, NULL) == COLLAGE_OK, "forward without targets");
    CHECK(gm_backward(m) == COLLAGE_ERR_ARG, "backward without targets");
    float lg[19];
    CHECK(gm_next_logits(m, w, tok, 5, lg) == COLLAGE_ERR_SIZE, "next_logits T > maxT");
    CHECK(gm_next_logits(m, w, tok, 4, NULL) == COLLAGE_ERR_NULL, "next_logits NULL");
    CHECK(gm_forward(NULL, w, tok, tgt, 2, 4, &L) == COLLAGE_ERR_NULL, "NULL model");
    gm_free(NULL);
    free(w);
    gm_free(m);
}

int main(void) {
    g_blas_default = openblas_get_num_threads();
    printf("test_gpt: seed %llu\n", SEED);
    RUN(test_layout);
    RUN(test_init);
    RUN(test_exp);
    RUN(test_backward_vs_finite_differences);
    RUN(test_float_matches_double);
    RUN(test_accumulation_and_partial_batch);
    RUN(test_loss_at_init);
    RUN(test_sgd_reduces_loss);
    RUN(test_thread_count_independence);
    RUN(test_bf16_mode);
    RUN(test_bf16_matches_emulation);
    RUN(test_next_logits_and_sampling);
    RUN(test_bad_input);
    return h_end();
}

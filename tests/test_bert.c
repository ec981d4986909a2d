/* test_bert.c — the BERT family: the parameter layout, initialisation, backward against central finite
 * differences in double on every parameter of a small model with padding in the batch, the float model
 * against the double one, padding (a padded row equals the row alone; what padding holds is never read),
 * bit-identical results for 1, 2 and 3 threads, the bf16 model equal to its emulation on the widening
 * path and near it on oneDNN's, bf16 near fp32, fp32 and native bf16 against fp64 on bert-tiny's shape,
 * the logits of chosen positions, the masked-LM corruption's statistics and its independence of threads
 * and ranks, and bad input. */
#include "bert_plan.h"
#include "collage.h"
#include "collage_run.h"
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
#define PAD_TOL 1e-12         /* fp64: a padded row vs the row alone (products of other shapes), relative */
#define BF16_LOSS_REL 0.02    /* bf16 model's loss vs fp32's, relative */
#define BF16_GRAD_COS 0.99    /* cosine of the bf16 and fp32 gradients */
#define BF16_F64_LOSS_REL 0.02 /* native bf16 model's loss vs fp64's, relative */
#define BF16_F64_GRAD_COS 0.99  /* cosine of the native bf16 and fp64 gradients */
#define BF16_PATH_LOSS_REL 1e-3  /* the bf16 model on oneDNN's path vs the emulated one: loss, relative */
#define BF16_PATH_GRAD_COS 0.999 /* and the cosine of their gradients */
#define LOGITS_TOL 1e-5       /* logits_at's loss vs forward's, relative */
#define MASK_SIGMAS 4.0       /* the masking fractions within this many standard deviations */
#define MASK_ROWS 2000        /* rows of MASK_T positions drawn for the statistics */
#define MASK_T 64

#define SEED 20260611ULL

/* A two-layer model of 19 tokens (the last the mask), 16 channels, 2 heads, context 8. */
static collage_model_config small_cfg(void) {
    collage_model_config c = {.family = COLLAGE_FAMILY_BERT, .max_seq_len = 8, .num_layers = 2, .num_heads = 2,
                              .channels = 16};
    collage_model_config_set_vocab(&c, 18);
    return c;
}

/* bert-tiny's shape on the byte tokenizer (V 257), context 64. */
static collage_model_config tiny_cfg(void) {
    collage_model_config c;
    bert_preset("bert-tiny", &c);
    collage_model_config_set_vocab(&c, 256);
    c.max_seq_len = 64;
    return c;
}

/* Random parameters of a scale that exercises every path (attention far from uniform, LayerNorm weights
 * and biases away from 1 and 0, padded rows nonzero), rounded to float. */
static void random_params(const collage_model_config *c, double *w, unsigned long long seed) {
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(c, t, BERT_NTENSORS);
    h_seed(seed);
    for (int k = 0; k < BERT_NTENSORS; k++) {
        const int lnw = k == BERT_LNEW || k == BERT_LN1W || k == BERT_LN2W || k == BERT_HEADLNW;
        for (size_t i = 0; i < t[k].count; i++) {
            double u = h_uniform() - 0.5;
            double v = t[k].decay ? 0.8 * u : lnw ? 1.0 + 0.4 * u : 0.2 * u;
            w[t[k].offset + i] = (double)(float)v;
        }
    }
}

/* A batch: random tokens, rows of the given lengths, a target on about one position in three of each row
 * (at least one), COLLAGE_TARGET_NONE elsewhere and on padding. */
static void random_batch(int *tok, int *tgt, const int *len, int B, int T, int V) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int n = b * T + t;
            tok[n] = (int)(h_rand32() % (unsigned)V);
            tgt[n] = t < len[b] && (t == 1 || h_rand32() % 3 == 0) ? (int)(h_rand32() % (unsigned)(V - 1)) : COLLAGE_TARGET_NONE;
        }
}

static double loss_of(gm_model *m, const void *w, const int *tok, const int *tgt, const int *len, int B, int T) {
    const collage_batch b = {.tokens = tok, .targets = tgt, .lengths = len, .B = B, .T = T};
    collage_forward_info fi = {.loss = (double)NAN};
    collage_status st = gm_forward_batch(m, w, &b, &fi);
    CHECK(st == COLLAGE_OK, "forward: %s", gm_error(m));
    return fi.loss;
}

static int g_blas_default;
static void set_threads(int n) {
    collage_set_threads(n);
    openblas_set_num_threads(n > 0 ? n : g_blas_default);
}

/* ------------------------------------------------------------------ layout and init */
static void test_layout(void) {
    collage_model_config c;
    CHECK(bert_preset("bert-base", &c) == COLLAGE_OK, "preset");
    collage_tensor_info t[BERT_NTENSORS];
    CHECK(bert_tensors(&c, t, BERT_NTENSORS) == BERT_NTENSORS, "tensors");
    const size_t V = 50304, C = 768, T = 512, L = 12;
    /* embeddings + LN, 12 blocks (qkv, proj, 2 LN, MLP 4C), head (dense, LN, output bias) */
    const size_t want = V * C + T * C + C + 2 * C + L * (3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                                                        4 * C * C + C + 2 * C) + C * C + C + 2 * C + V;
    const size_t n = t[BERT_NTENSORS - 1].offset + t[BERT_NTENSORS - 1].count;
    printf("    bert-base: %zu parameters (%d tensors)\n", n, BERT_NTENSORS);
    CHECK(n == want, "bert-base has %zu parameters, the architecture %zu", n, want);
    size_t off = 0;
    for (int k = 0; k < BERT_NTENSORS; k++) {
        CHECK(t[k].offset == off, "%s at %zu, expected %zu", t[k].name, t[k].offset, off);
        off += t[k].count;
    }
    CHECK(t[BERT_QKVW].ndim == 3 && t[BERT_QKVW].shape[0] == 12 && t[BERT_QKVW].shape[1] == 2304, "qkvw shape");
    CHECK(t[BERT_HEADW].decay && !t[BERT_OUTB].decay && t[BERT_WTT].decay && !t[BERT_LN2B].decay, "decay flags");
    CHECK(c.vocab_size == 50258 && c.padded_vocab_size == 50304, "vocab %d / %d", c.vocab_size, c.padded_vocab_size);
    collage_model_config b = tiny_cfg();
    CHECK(b.vocab_size == 257 && b.padded_vocab_size == 320 && collage_model_mask_token(&b) == 256 &&
              collage_model_text_vocab(&b) == 256, "byte vocab: %d, padded %d", b.vocab_size, b.padded_vocab_size);
    CHECK(collage_family_objective(COLLAGE_FAMILY_BERT) == COLLAGE_OBJECTIVE_MASKED_LM &&
              !collage_family_generates(COLLAGE_FAMILY_BERT) && collage_family_generates(COLLAGE_FAMILY_GPT2),
          "objective");
}

static void test_init(void) {
    collage_model_config c = tiny_cfg();
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(&c, t, BERT_NTENSORS);
    const size_t n = t[BERT_NTENSORS - 1].offset + t[BERT_NTENSORS - 1].count;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    set_threads(1);
    CHECK(bert_init_weights(&c, SEED, a, n) == COLLAGE_OK, "init");
    set_threads(2);
    bert_init_weights(&c, SEED, b, n);
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "init differs between 1 and 2 threads");
    set_threads(0);
    for (int k = 0; k < BERT_NTENSORS; k++) {
        const size_t cnt = k == BERT_WTE ? (size_t)c.vocab_size * c.channels : t[k].count;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < cnt; i++) {
            const double x = (double)a[t[k].offset + i];
            s += x;
            s2 += x * x;
        }
        const double mean = s / (double)cnt, sd = sqrt(s2 / (double)cnt - mean * mean);
        if (t[k].decay && cnt >= 1000)
            CHECK(fabs(sd - 0.02) < 0.1 * 0.02 && fabs(mean) < 0.1 * 0.02, "%s: mean %g sd %g", t[k].name, mean, sd);
        else if (!t[k].decay) {
            const double v = k == BERT_LNEW || k == BERT_LN1W || k == BERT_LN2W || k == BERT_HEADLNW ? 1.0 : 0.0;
            CHECK(mean == v && sd == 0, "%s: mean %g sd %g", t[k].name, mean, sd);
        }
    }
    int pad = 0;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < t[BERT_WTE].count; i++) pad += a[i] != 0;
    CHECK(pad == 0, "%d nonzero padded wte entries", pad);
    free(a); free(b);
}

/* ------------------------------------------------------------------ gradients */
/* loss_of as h_fd_tensor's loss */
typedef struct { gm_model *m; const int *tok, *tgt, *len; int B, T; } fd_ctx;
static double fd_loss(void *ctx, double *w) {
    const fd_ctx *X = ctx;
    return loss_of(X->m, w, X->tok, X->tgt, X->len, X->B, X->T);
}

/* Every parameter of a two-layer model, two rows (one of them padded): the double backward against a
 * 4-point central difference of the double forward. */
static void test_backward_vs_finite_differences(void) {
    const collage_model_config c = small_cfg();
    const int B = 2, T = 6, len[2] = {6, 4};
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP64, B, T, &m) == COLLAGE_OK, "create");
    if (!m) return;
    const size_t n = gm_size(m);
    double *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g);
    int tok[12], tgt[12];
    random_params(&c, w, SEED);
    random_batch(tok, tgt, len, B, T, c.vocab_size);
    printf("    seed %llu, %zu parameters, B %d T %d, lengths %d and %d\n", SEED, n, B, T, len[0], len[1]);
    loss_of(m, w, tok, tgt, len, B, T);
    gm_zero_grad(m);
    CHECK(gm_backward(m) == COLLAGE_OK, "backward: %s", gm_error(m));
    memcpy(g, gm_grads(m), n * sizeof *g);
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(&c, t, BERT_NTENSORS);
    fd_ctx X = {m, tok, tgt, len, B, T};
    for (int k = 0; k < BERT_NTENSORS; k++)
        h_fd_tensor(t[k].name, w, g, t[k].offset, t[k].count, fd_loss, &X, FD_STEP, FD_REL_TOL, FD_ABS_TOL);
    int pad = 0;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < t[BERT_WTE].count; i++) pad += g[i] != 0;
    for (size_t i = (size_t)c.vocab_size; i < t[BERT_OUTB].count; i++) pad += g[t[BERT_OUTB].offset + i] != 0;
    CHECK(pad == 0, "%d nonzero gradients on padded vocabulary rows", pad);
    free(w); free(g);
    gm_free(m);
}

/* Each tensor's float gradients within F32_GRAD_TOL of max |g64| of the double ones; returns the worst
 * tensor's max |g32 - g64| / max |g64|. */
static double check_f32_grads(const collage_model_config *c, const float *gf, const double *gd) {
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(c, t, BERT_NTENSORS);
    double worst = 0;
    for (int k = 0; k < BERT_NTENSORS; k++)
        worst = fmax(worst, h_f32_grad_gap(t[k].name, gf, gd, t[k].offset, t[k].count, F32_GRAD_TOL));
    return worst;
}

/* The float model against the double one on the same (float) parameters, with padding. */
static void test_float_matches_double(void) {
    const collage_model_config c = small_cfg();
    const int B = 2, T = 6, len[2] = {3, 6};
    gm_model *md = NULL, *mf = NULL;
    CHECK(collage__model_object(&c, GM_FP64, B, T, &md) == COLLAGE_OK &&
              collage__model_object(&c, GM_FP32, B, T, &mf) == COLLAGE_OK,
          "create");
    if (!md || !mf) { gm_free(md); gm_free(mf); return; }
    const size_t n = gm_size(md);
    double *w = malloc(n * sizeof *w);
    float *wf = malloc(n * sizeof *wf);
    int tok[12], tgt[12];
    random_params(&c, w, SEED + 7);
    for (size_t i = 0; i < n; i++) wf[i] = (float)w[i];
    random_batch(tok, tgt, len, B, T, c.vocab_size);
    const double Ld = loss_of(md, w, tok, tgt, len, B, T), Lf = loss_of(mf, wf, tok, tgt, len, B, T);
    CHECK(fabs(Lf - Ld) <= F32_LOSS_TOL * Ld, "loss fp32 %.9g fp64 %.9g", Lf, Ld);
    gm_backward(md);
    gm_backward(mf);
    const double worst = check_f32_grads(&c, gm_grads(mf), gm_grads(md));
    printf("    loss fp64 %.12f fp32 %.12f; worst tensor max|g32-g64|/max|g64| %.1e\n", Ld, Lf, worst);
    free(w); free(wf);
    gm_free(md); gm_free(mf);
}

/* A row padded from 4 to 6 gives the loss and gradients of the same 4 tokens alone (fp64, up to products
 * of another shape); and the tokens at padded positions are never read (bits). */
static void test_padding(void) {
    const collage_model_config c = small_cfg();
    gm_model *m = NULL, *one = NULL;
    CHECK(collage__model_object(&c, GM_FP64, 2, 6, &m) == COLLAGE_OK &&
              collage__model_object(&c, GM_FP64, 1, 4, &one) == COLLAGE_OK,
          "create");
    if (!m || !one) { gm_free(m); gm_free(one); return; }
    const size_t n = gm_size(m);
    double *w = malloc(n * sizeof *w), *g1 = malloc(n * sizeof *g1);
    int tok[12], tgt[12], len[2] = {4, 4};
    random_params(&c, w, SEED + 2);
    random_batch(tok, tgt, len, 2, 6, c.vocab_size);
    int tok1[4], tgt1[4]; /* row 0's 4 tokens alone, as a (1,4) batch */
    memcpy(tok1, tok, sizeof tok1);
    memcpy(tgt1, tgt, sizeof tgt1);
    for (int i = 6; i < 12; i++) tgt[i] = COLLAGE_TARGET_NONE; /* only row 0 scored */
    const double L1 = loss_of(one, w, tok1, tgt1, NULL, 1, 4);
    gm_zero_grad(one);
    gm_backward(one);
    memcpy(g1, gm_grads(one), n * sizeof *g1);
    const double L2 = loss_of(m, w, tok, tgt, len, 2, 6);
    gm_zero_grad(m);
    gm_backward(m);
    const double *g2 = gm_grads(m);
    double dmax = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) { dmax = fmax(dmax, fabs(g2[i] - g1[i])); gmax = fmax(gmax, fabs(g1[i])); }
    CHECK(fabs(L2 - L1) <= PAD_TOL * L1 && dmax <= PAD_TOL * gmax, "padded: loss %.17g vs alone %.17g, max |Δg| %.2e",
          L2, L1, dmax);
    /* other ids on the padding: the same bits */
    double *g3 = malloc(n * sizeof *g3);
    memcpy(g3, g2, n * sizeof *g3);
    for (int t = 4; t < 6; t++) { tok[t] = (tok[t] + 5) % c.vocab_size; tok[6 + t] = (tok[6 + t] + 7) % c.vocab_size; }
    const double L3 = loss_of(m, w, tok, tgt, len, 2, 6);
    gm_zero_grad(m);
    gm_backward(m);
    CHECK(L3 == L2 && memcmp(g3, gm_grads(m), n * sizeof *g3) == 0, "the padding's token ids changed the result");
    printf("    padded row vs alone: loss %.3e apart, gradients %.3e of max |g| %.3e\n", fabs(L2 - L1), dmax, gmax);
    free(w); free(g1); free(g3);
    gm_free(m); gm_free(one);
}

/* ------------------------------------------------------------------ threads and bf16 */
/* One forward + backward of a fresh tiny model of precision prec: the loss, hits, the gradients as float and
 * as double, every stored activation's bytes, and the values of those every precision stores alike (not the
 * logits, which hold the float models' dlogits after a backward and the bf16 model's probabilities, nor
 * d_logits and d_tmp, which only one kind of model has). */
typedef struct { double loss; long long hits; float *g; double *gd; unsigned char *acts; size_t nacts; double *av; size_t nav; } run_out;

static int compared(const char *name) { return strcmp(name, "logits") && strcmp(name, "d_logits") && strcmp(name, "d_tmp"); }

static void acts_of(const gm_model *m, run_out *o) {
    gm_act at[64];
    const int na = gm_act_tensors(m, at, 64);
    o->nacts = 0;
    o->nav = 0;
    for (int k = 0; k < na; k++) o->nacts += at[k].count * at[k].esize;
    for (int k = 0; k < na; k++) o->nav += compared(at[k].name) ? at[k].count : 0;
    o->acts = malloc(o->nacts);
    o->av = malloc(o->nav * sizeof(double));
    size_t off = 0, v = 0;
    for (int k = 0; k < na; k++) {
        memcpy(o->acts + off, at[k].data, at[k].count * at[k].esize);
        off += at[k].count * at[k].esize;
        if (!compared(at[k].name)) continue;
        for (size_t i = 0; i < at[k].count; i++) {
            const char *p = (const char *)at[k].data + i * at[k].esize;
            uint16_t h;
            float f;
            if (at[k].esize == 2) { memcpy(&h, p, 2); o->av[v++] = (double)collage_bf16_to_f32((collage_bf16){h}); }
            else if (at[k].esize == 8) memcpy(&o->av[v++], p, 8);
            else { memcpy(&f, p, 4); o->av[v++] = (double)f; }
        }
    }
}

static run_out run_once(gm_precision prec, const void *w, const int *tok, const int *tgt, const int *len, int B, int T) {
    const collage_model_config c = tiny_cfg();
    run_out o = {.loss = (double)NAN};
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, prec, B, T, &m) == COLLAGE_OK, "create %s", gm_precision_name(prec));
    if (!m) return o;
    const collage_batch b = {.tokens = tok, .targets = tgt, .lengths = len, .B = B, .T = T};
    collage_forward_info fi = {0};
    CHECK(gm_forward_batch(m, w, &b, &fi) == COLLAGE_OK, "forward: %s", gm_error(m));
    gm_zero_grad(m);
    CHECK(gm_backward(m) == COLLAGE_OK, "backward: %s", gm_error(m));
    const size_t n = gm_size(m);
    o.loss = fi.loss;
    o.hits = fi.correct;
    o.g = malloc(n * sizeof(float));
    o.gd = malloc(n * sizeof(double));
    if (prec == GM_FP32) memcpy(o.g, gm_grads(m), n * sizeof(float));
    else if (prec == GM_FP64) memcpy(o.gd, gm_grads(m), n * sizeof(double));
    else collage_bf16_to_f32_row(o.g, gm_grads(m), n);
    for (size_t i = 0; i < n && prec != GM_FP64; i++) o.gd[i] = (double)o.g[i];
    for (size_t i = 0; i < n && prec == GM_FP64; i++) o.g[i] = (float)o.gd[i];
    acts_of(m, &o);
    gm_free(m);
    return o;
}

static void run_free(run_out *o) { free(o->g); free(o->gd); free(o->acts); free(o->av); }

/* The tiny model's batch: 8 rows of 64 (two of them padded), about 15% of the positions scored. */
#define TB 8
#define TT 64
static int g_tok[TB * TT], g_tgt[TB * TT], g_len[TB] = {64, 64, 40, 64, 64, 17, 64, 64};

static void tiny_batch(unsigned long long seed) {
    const collage_model_config c = tiny_cfg();
    int32_t in[TB * TT], tg[TB * TT];
    h_seed(seed);
    for (int i = 0; i < TB * TT; i++) in[i] = (int32_t)(h_rand32() % 256u);
    collage_mlm_mask(collage_mlm_key(seed, 1, 0), in, g_len, TB, TT, 0, collage_model_mask_token(&c), 256, in, tg);
    for (int i = 0; i < TB * TT; i++) { g_tok[i] = in[i]; g_tgt[i] = tg[i]; }
}

/* The tiny model's initial weights in float and rounded to bf16 (malloc'd); returns their count. */
static size_t tiny_weights(unsigned long long seed, float **w, collage_bf16 **w16) {
    const collage_model_config c = tiny_cfg();
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(&c, t, BERT_NTENSORS);
    const size_t n = t[BERT_NTENSORS - 1].offset + t[BERT_NTENSORS - 1].count;
    *w = malloc(n * sizeof **w);
    *w16 = malloc(n * sizeof **w16);
    bert_init_weights(&c, seed, *w, n);
    collage_bf16_from_f32_row(*w16, *w, n);
    return n;
}

/* B·T·C large enough that every kernel runs its parallel path; the bf16 model on this machine's path. */
static void test_thread_count_independence(void) {
    float *w;
    collage_bf16 *w16;
    const size_t n = tiny_weights(SEED, &w, &w16);
    tiny_batch(SEED + 11);
    for (int p = 0; p < 2; p++) {
        const gm_precision prec = p ? GM_BF16 : GM_FP32;
        const void *wp = p ? (const void *)w16 : (const void *)w;
        set_threads(1);
        run_out a = run_once(prec, wp, g_tok, g_tgt, g_len, TB, TT);
        for (int th = 2; th <= 3; th++) {
            set_threads(th);
            run_out b = run_once(prec, wp, g_tok, g_tgt, g_len, TB, TT);
            CHECK(a.loss == b.loss && a.hits == b.hits, "%s: loss %.17g (1 thread) vs %.17g (%d)", gm_precision_name(prec),
                  a.loss, b.loss, th);
            CHECK(memcmp(a.g, b.g, n * sizeof(float)) == 0, "%s: gradients differ (1 and %d threads)",
                  gm_precision_name(prec), th);
            CHECK(a.nacts == b.nacts && memcmp(a.acts, b.acts, a.nacts) == 0, "%s: activations differ (1 and %d threads)",
                  gm_precision_name(prec), th);
            run_free(&b);
        }
        printf("    %s: loss %.9f, %lld hits, the same bits on 1, 2 and 3 threads\n", gm_precision_name(prec), a.loss,
               a.hits);
        run_free(&a);
    }
    set_threads(0);
    free(w); free(w16);
}

/* The bf16 model on the widening path gives bf16-emulated's values exactly; on oneDNN's path, as close as
 * fp32 sums in another order allow; the AVX-512 and baseline builds of the bf16 graph the same bits; and
 * the bf16 model near the fp32 one. */
static void test_bf16(void) {
    float *w;
    collage_bf16 *w16;
    const size_t n = tiny_weights(SEED + 3, &w, &w16);
    collage_bf16_to_f32_row(w, w16, n); /* every model sees the same bf16 weights */
    tiny_batch(SEED + 12);
    run_out e = run_once(GM_BF16_EMULATED, w16, g_tok, g_tgt, g_len, TB, TT);
    setenv("COLLAGE_BF16_GEMM", "widen", 1);
    run_out x = run_once(GM_BF16, w16, g_tok, g_tgt, g_len, TB, TT);
    unsetenv("COLLAGE_BF16_GEMM");
    run_out h = run_once(GM_BF16, w16, g_tok, g_tgt, g_len, TB, TT);
    run_out f = run_once(GM_FP32, w, g_tok, g_tgt, g_len, TB, TT);
    size_t gbad = 0, abad = 0;
    for (size_t i = 0; i < n; i++) gbad += x.g[i] != e.g[i];
    for (size_t i = 0; i < e.nav && i < x.nav; i++) abad += !(x.av[i] == e.av[i] || (x.av[i] != x.av[i] && e.av[i] != e.av[i]));
    CHECK(x.loss == e.loss && x.hits == e.hits, "widening path: loss %.17g vs emulated %.17g", x.loss, e.loss);
    CHECK(gbad == 0, "widening path: %zu of %zu gradients differ from the emulated model's", gbad, n);
    CHECK(x.nav == e.nav && abad == 0, "widening path: %zu of %zu activations differ", abad, e.nav);
    const collage_isa isa = collage_get_isa();
    if (isa == COLLAGE_ISA_AVX512 && collage_set_isa(COLLAGE_ISA_SCALAR) == COLLAGE_OK) {
        char perr[256]; /* the two builds on the same products' kernels (the products file keys collage's ISA) */
        const char *pin = collage_products_check("fp32=openblas,bf16=onednn", perr, sizeof perr) == COLLAGE_OK
                              ? "fp32=openblas,bf16=onednn" : "fp32=openblas,bf16=widen";
        CHECK(collage_products_pin(pin, perr, sizeof perr) == COLLAGE_OK, "pin %s: %s", pin, perr);
        run_out s = run_once(GM_BF16, w16, g_tok, g_tgt, g_len, TB, TT);
        collage_set_isa(isa);
        run_out v = run_once(GM_BF16, w16, g_tok, g_tgt, g_len, TB, TT);
        collage_products_pin(NULL, perr, sizeof perr);
        CHECK(s.loss == v.loss && memcmp(s.g, v.g, n * sizeof(float)) == 0 && s.nacts == v.nacts &&
                  memcmp(s.acts, v.acts, s.nacts) == 0, "bf16 graph: AVX-512 and baseline builds differ (products %s)", pin);
        run_free(&s);
        run_free(&v);
    } else
        printf("    (no AVX-512 here: the bf16 graph's two builds not compared)\n");
    double dot = 0, nh = 0, ne = 0, df = 0, nf = 0;
    for (size_t i = 0; i < n; i++) {
        const double hg = (double)h.g[i], eg = (double)e.g[i], fg = (double)f.g[i];
        dot += hg * eg; nh += hg * hg; ne += eg * eg;
        df += hg * fg; nf += fg * fg;
    }
    const double cos_path = dot / sqrt(nh * ne), cos_fp32 = df / sqrt(nh * nf);
    printf("    %s: loss %.7f, emulated %.7f (cosine %.6f); fp32 %.7f (cosine %.5f)\n", collage_bf16_products(), h.loss,
           e.loss, cos_path, f.loss, cos_fp32);
    CHECK(fabs(h.loss - e.loss) <= BF16_PATH_LOSS_REL * e.loss && cos_path >= BF16_PATH_GRAD_COS,
          "bf16 path: loss %.7f vs emulated %.7f, cosine %.6f", h.loss, e.loss, cos_path);
    CHECK(fabs(h.loss - f.loss) <= BF16_LOSS_REL * f.loss && cos_fp32 >= BF16_GRAD_COS, "bf16 vs fp32: loss %.5f vs %.5f, "
          "cosine %.5f", h.loss, f.loss, cos_fp32);
    run_free(&e); run_free(&x); run_free(&h); run_free(&f);
    free(w); free(w16);
}

/* bert-tiny's shape with padding in the batch: the fp32 model and the native bf16 model (on this machine's
 * path) against the fp64 model, all three on the same bf16-representable random weights. fp32: the loss and every
 * tensor's gradient within rounding of float sums; bf16: the loss within BF16_F64_LOSS_REL and the whole
 * gradient's direction within BF16_F64_GRAD_COS (bf16 activations carry 8 significant bits). */
static void test_against_fp64(void) {
    float *w;
    collage_bf16 *w16;
    const collage_model_config c = tiny_cfg();
    const size_t n = tiny_weights(SEED + 5, &w, &w16);
    double *wd = malloc(n * sizeof *wd);
    random_params(&c, wd, SEED + 5); /* far from the initialisation: attention peaked, LayerNorms off 1 and 0 */
    for (size_t i = 0; i < n; i++) w[i] = (float)wd[i];
    collage_bf16_from_f32_row(w16, w, n);
    collage_bf16_to_f32_row(w, w16, n);
    for (size_t i = 0; i < n; i++) wd[i] = (double)w[i];
    tiny_batch(SEED + 13);
    run_out d = run_once(GM_FP64, wd, g_tok, g_tgt, g_len, TB, TT);
    run_out f = run_once(GM_FP32, w, g_tok, g_tgt, g_len, TB, TT);
    run_out h = run_once(GM_BF16, w16, g_tok, g_tgt, g_len, TB, TT);
    const double worst = check_f32_grads(&c, f.g, d.gd);
    double dot = 0, nh = 0, nd = 0;
    for (size_t i = 0; i < n; i++) { dot += h.gd[i] * d.gd[i]; nh += h.gd[i] * h.gd[i]; nd += d.gd[i] * d.gd[i]; }
    const double cosine = dot / sqrt(nh * nd);
    printf("    fp64 loss %.9f; fp32 %.9f (worst tensor max|g32-g64|/max|g64| %.1e); %s %.7f (gradient cosine %.5f)\n",
           d.loss, f.loss, worst, collage_bf16_products(), h.loss, cosine);
    CHECK(fabs(f.loss - d.loss) <= F32_LOSS_TOL * d.loss, "fp32 loss %.9g, fp64 %.9g", f.loss, d.loss);
    CHECK(fabs(h.loss - d.loss) <= BF16_F64_LOSS_REL * d.loss && cosine >= BF16_F64_GRAD_COS,
          "bf16 vs fp64: loss %.7f vs %.7f, gradient cosine %.5f", h.loss, d.loss, cosine);
    run_free(&d); run_free(&f); run_free(&h);
    free(w); free(w16); free(wd);
}

/* ------------------------------------------------------------------ logits of chosen positions */
static void test_logits_at(void) {
    const collage_model_config c = small_cfg();
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP32, 1, 8, &m) == COLLAGE_OK, "create");
    if (!m) return;
    const size_t n = gm_size(m);
    double *wd = malloc(n * sizeof *wd);
    float *w = malloc(n * sizeof *w);
    random_params(&c, wd, SEED + 9);
    for (size_t i = 0; i < n; i++) w[i] = (float)wd[i];
    const int V = c.vocab_size, tok[7] = {1, 18, 5, 18, 7, 0, 3}, pos[2] = {1, 3}, tgt_at[2] = {9, 2};
    int tgt[7];
    for (int i = 0; i < 7; i++) tgt[i] = COLLAGE_TARGET_NONE;
    tgt[1] = tgt_at[0];
    tgt[3] = tgt_at[1];
    float lg[2 * 19], one[19];
    CHECK(gm_logits_at(m, w, tok, 7, pos, 2, lg) == COLLAGE_OK, "logits_at: %s", gm_error(m));
    CHECK(gm_logits_at(m, w, tok, 7, pos + 1, 1, one) == COLLAGE_OK, "logits_at one");
    double loss = 0, dmax = 0;
    for (int k = 0; k < 2; k++) {
        double mx = -(double)INFINITY, z = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, (double)lg[k * V + i]);
        for (int i = 0; i < V; i++) z += exp((double)lg[k * V + i] - mx);
        loss += log(z) - ((double)lg[k * V + tgt_at[k]] - mx);
    }
    for (int i = 0; i < V; i++) dmax = fmax(dmax, fabs((double)one[i] - (double)lg[V + i]));
    const double L = loss_of(m, w, tok, tgt, NULL, 1, 7);
    CHECK(fabs(loss / 2 - L) <= LOGITS_TOL * L, "the loss of logits_at's logits %.9f, forward's %.9f", loss / 2, L);
    CHECK(dmax <= 1e-5, "one position alone vs two: max diff %.2e", dmax);
    float nl[19];
    CHECK(gm_logits_at(m, w, tok, 7, pos, 0, nl) == COLLAGE_ERR_SIZE, "npos 0");
    const int badpos = 7;
    CHECK(gm_logits_at(m, w, tok, 7, &badpos, 1, nl) == COLLAGE_ERR_ARG && strstr(gm_error(m), "7"), "pos %s",
          gm_error(m));
    free(wd); free(w);
    gm_free(m);
}

/* ------------------------------------------------------------------ the masking */
/* Over MASK_ROWS rows of MASK_T positions (a quarter of them padded to half): 15% of the real positions
 * chosen, of those 80% masked, 10% a random token, 10% unchanged, each within MASK_SIGMAS standard
 * deviations; padding never chosen; the same masks for the whole batch at once and for it cut into 2 or 3
 * ranks' rows, on 1 or 3 threads. */
static void test_masking(void) {
    const int R = MASK_ROWS, T = MASK_T, mask = 256, N = R * T;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N), *in = malloc(sizeof(int32_t) * (size_t)N);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)N), *in2 = malloc(sizeof(int32_t) * (size_t)N);
    int32_t *tg2 = malloc(sizeof(int32_t) * (size_t)N);
    int *len = malloc(sizeof(int) * (size_t)R);
    h_seed(SEED + 21);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(h_rand32() % 200u); /* ids < 200: a random token may exceed them */
    long real = 0;
    for (int r = 0; r < R; r++) { len[r] = r % 4 == 3 ? T / 2 : T; real += len[r]; }
    const uint64_t key = collage_mlm_key(1337, 1, 5);
    const long chosen = collage_mlm_mask(key, tok, len, R, T, 0, mask, 256, in, tg);
    long masked = 0, random = 0, kept = 0, pad_bad = 0, range_bad = 0;
    for (int i = 0; i < N; i++) {
        const int t = i % T, r = i / T;
        if (t >= len[r]) { pad_bad += tg[i] != COLLAGE_TARGET_NONE || in[i] != tok[i]; continue; }
        if (tg[i] == COLLAGE_TARGET_NONE) { range_bad += in[i] != tok[i]; continue; }
        range_bad += tg[i] != tok[i] || in[i] < 0 || in[i] > mask;
        if (in[i] == mask) masked++;
        else if (in[i] != tok[i]) random++;
        else kept++;
    }
    /* a random token equal to the original counts as kept: P(random) = 0.1·(1 − 1/256), P(kept) the rest */
    const double pr = 0.1 * (1.0 - 1.0 / 256), p[4] = {0.15, 0.8, pr, 1.0 - 0.8 - pr};
    const double got[4] = {(double)chosen / real, (double)masked / chosen, (double)random / chosen, (double)kept / chosen};
    const double nn[4] = {(double)real, (double)chosen, (double)chosen, (double)chosen};
    const char *what[4] = {"chosen", "masked", "random", "kept"};
    for (int k = 0; k < 4; k++) {
        const double sd = sqrt(p[k] * (1 - p[k]) / nn[k]);
        printf("    %-7s %.5f (expected %.5f, %.2f sigma)\n", what[k], got[k], p[k], (got[k] - p[k]) / sd);
        CHECK(fabs(got[k] - p[k]) <= MASK_SIGMAS * sd, "%s: %.5f, expected %.5f ± %.5f", what[k], got[k], p[k], sd);
    }
    CHECK(pad_bad == 0 && range_bad == 0, "%ld padded positions chosen or changed, %ld bad ids", pad_bad, range_bad);
    CHECK(chosen == collage_mlm_mask(key, tok, len, R, T, 0, mask, 256, in2, tg2) &&
              !memcmp(in, in2, sizeof(int32_t) * (size_t)N) && !memcmp(tg, tg2, sizeof(int32_t) * (size_t)N),
          "the same key gave other masks");
    for (int P = 2; P <= 3; P++) {
        const int per = R / P + (R % P != 0);
        for (int rank = 0; rank < P; rank++) {
            const int r0 = rank * per, rows = r0 + per <= R ? per : R - r0;
            collage_set_threads(rank == 0 ? 1 : 3);
            collage_mlm_mask(key, tok + (size_t)r0 * T, len + r0, rows, T, (uint64_t)r0, mask, 256,
                             in2 + (size_t)r0 * T, tg2 + (size_t)r0 * T);
        }
        CHECK(!memcmp(in, in2, sizeof(int32_t) * (size_t)N) && !memcmp(tg, tg2, sizeof(int32_t) * (size_t)N),
              "%d ranks' rows masked apart differ from the whole batch", P);
    }
    collage_set_threads(0);
    collage_mlm_mask(collage_mlm_key(1337, 1, 6), tok, len, R, T, 0, mask, 256, in2, tg2);
    CHECK(memcmp(tg, tg2, sizeof(int32_t) * (size_t)N) != 0, "the next step drew the same masks");
    CHECK(collage_mlm_key(1, 0, 3) == collage_mlm_key(2, 0, 3) && collage_mlm_key(1, 1, 3) != collage_mlm_key(2, 1, 3),
          "the evaluation key depends on the seed, or the training key does not");
    free(tok); free(in); free(tg); free(in2); free(tg2); free(len);
}

/* ------------------------------------------------------------------ bad input */
static void test_bad_input(void) {
    char msg[256];
    collage_model_config c = small_cfg();
    c.num_heads = 3;
    CHECK(bert_check(&c, 1, 1, msg, sizeof msg) == COLLAGE_ERR_SIZE && strstr(msg, "divisible"), "heads: %s", msg);
    c = small_cfg();
    c.vocab_size = 1;
    CHECK(bert_check(&c, 1, 1, msg, sizeof msg) == COLLAGE_ERR_SIZE, "V 1");
    c = small_cfg();
    gm_model *m = NULL;
    CHECK(collage__model_object(&c, GM_FP32, 1, 9, &m) == COLLAGE_ERR_SIZE && !m, "maxT > context");
    CHECK(collage__model_object(&c, GM_FP32, 2, 4, &m) == COLLAGE_OK, "create");
    if (!m) return;
    float *w = calloc(gm_size(m), sizeof *w);
    int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tgt[8], len[2] = {4, 2};
    for (int i = 0; i < 8; i++) tgt[i] = COLLAGE_TARGET_NONE;
    collage_batch b = {.tokens = tok, .targets = tgt, .lengths = len, .B = 2, .T = 4};
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_OK, "forward: %s", gm_error(m));
    tgt[7] = 3; /* padding of row 1 */
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_ARG && strstr(gm_error(m), "padding"), "%s", gm_error(m));
    tgt[7] = COLLAGE_TARGET_NONE;
    len[1] = 0;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_ARG && strstr(gm_error(m), "length 0"), "%s", gm_error(m));
    len[1] = 5;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_ARG, "length > T");
    len[1] = 4;
    tok[2] = 19;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_ARG && strstr(gm_error(m), "19"), "%s", gm_error(m));
    tok[2] = 3;
    tgt[2] = -2;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_ARG, "target -2");
    tgt[2] = COLLAGE_TARGET_NONE;
    b.T = 5;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_SIZE && strstr(gm_error(m), "outside"), "T > maxT: %s",
          gm_error(m));
    b.T = 4;
    b.loss_divisor = -1;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_ERR_ARG, "negative divisor");
    CHECK(gm_backward(m) == COLLAGE_ERR_ARG, "backward after a failed forward");
    b.loss_divisor = 0;
    b.targets = NULL;
    CHECK(gm_forward_batch(m, w, &b, NULL) == COLLAGE_OK && gm_backward(m) == COLLAGE_ERR_ARG, "backward without targets");
    free(w);
    gm_free(m);
}

int main(void) {
    g_blas_default = openblas_get_num_threads();
    printf("test_bert: seed %llu\n", SEED);
    RUN(test_layout);
    RUN(test_init);
    RUN(test_backward_vs_finite_differences);
    RUN(test_float_matches_double);
    RUN(test_padding);
    RUN(test_thread_count_independence);
    RUN(test_bf16);
    RUN(test_against_fp64);
    RUN(test_logits_at);
    RUN(test_masking);
    RUN(test_bad_input);
    return h_end();
}

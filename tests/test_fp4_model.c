/* test_fp4_model.c — the model in fp4 (numerics.md §15, "The model in fp4"): the memory report counting
 * what the recipe keeps (NVFP4's weight copies too), to the byte; bad settings refused; the same bits for 1 and 3 threads; the
 * straight-through backward against central differences of F_ST (tests/straight_through.h); and through
 * `collage train --compute fp4`: every family learning below the validation bytes' unigram entropy with
 * collage-light, a run saved and resumed giving the uninterrupted run's model bit for bit, train.state
 * recording the compute, and another compute or recipe on resume refused by name; bad flags of train and
 * of compare's compute axis refused with a message naming the flag. */
#include "collage.h"
#include "collage_model.h"
#include "corpus.h"
#include "harness.h"
#include "gpt2.h"
#include "model.h" /* collage__model_object: the model object and its stored activations */
#include "nn.h"
#include "straight_through.h"
#include <math.h>
#include <string.h>

#define B_TEST 2
#define T_TEST 16

static const char *bin(void) {
    const char *b = getenv("COLLAGE_BIN");
    return b ? b : "build/collage";
}

/* One forward and backward of GPT-2 tiny (random weights from seed 5) on a fixed batch. */
static collage_status step(collage_model *m, const collage_model_config *cfg, const collage_bf16 *w, double *loss) {
    int tok[B_TEST * T_TEST], tgt[B_TEST * T_TEST];
    for (int i = 0; i < B_TEST * T_TEST; i++) tok[i] = (i * 37 + 11) % cfg->vocab_size, tgt[i] = (i * 53 + 7) % cfg->vocab_size;
    collage_model_zero_grad(m);
    collage_status st = collage_model_forward(m, w, tok, tgt, B_TEST, T_TEST, loss);
    return st == COLLAGE_OK ? collage_model_backward(m) : st;
}

static collage_bf16 *weights(const collage_model_config *cfg, size_t n) {
    float *w = malloc(n * sizeof *w);
    collage_bf16 *w16 = malloc(n * sizeof *w16);
    collage_model_init_weights(cfg, 5, w, n);
    for (size_t i = 0; i < n; i++) w16[i] = collage_bf16_from_f32(w[i]);
    free(w);
    return w16;
}

/* The memory report: the fp4 model's scratch is the bf16 model's plus the 4-bit products' buffers, and
 * the Hadamard option adds exactly its fp32 inputs: the dW products' operands, the largest incoming
 * gradient (N × max(Vp, 4C): the logits' or the MLP's) and the largest input (N × 4C, the MLP
 * projection's), 4 bytes each; a
 * step allocates nothing (the report is the same after two steps). Settings refused: an unknown recipe,
 * options other than ,hadamard then ,rn (either twice, or in the other order), bf16_last beyond the linear
 * layers; a bf16 model refuses fp4 settings. */
static void test_fp4_memory_and_settings(void) {
    collage_model_config cfg;
    CHECK(collage_model_preset("tiny", &cfg) == COLLAGE_OK, "preset");
    const size_t n = collage_model_num_params(&cfg);
    collage_bf16 *w = weights(&cfg, n);
    collage_model *m = NULL, *mb = NULL;
    CHECK(collage_model_create(&cfg, COLLAGE_REAL_FP4, B_TEST, T_TEST, &m) == COLLAGE_OK, "create fp4");
    CHECK(collage_model_create(&cfg, COLLAGE_REAL_BF16, B_TEST, T_TEST, &mb) == COLLAGE_OK, "create bf16");
    if (!m || !mb) goto done;
    const int layers = collage_model_fp4_layers(m);
    CHECK(layers == 4 * cfg.num_layers + 1, "linear layers %d", layers);
    collage_model_memory a, b, c, d;
    collage_model_memory_get(mb, &b);
    CHECK(collage_model_fp4_set(m, "nvfp4", 0, 1) == COLLAGE_OK, "set nvfp4");
    collage_model_memory_get(m, &a);
    CHECK(a.scratch > b.scratch + (size_t)2 * B_TEST * T_TEST * cfg.padded_vocab_size * 2,
          "fp4 scratch %zu, bf16 %zu: the products' operands are not counted", a.scratch, b.scratch);
    CHECK(collage_model_fp4_set(m, "nvfp4,hadamard", 0, 1) == COLLAGE_OK, "set nvfp4,hadamard");
    collage_model_memory_get(m, &c);
    const size_t N = B_TEST * T_TEST, C4 = 4 * (size_t)cfg.channels,
                 Vp = (size_t)cfg.padded_vocab_size, hbytes = 4 * N * ((Vp > C4 ? Vp : C4) + C4);
    CHECK(c.scratch == a.scratch + hbytes, "hadamard scratch %zu, without %zu, want + %zu", c.scratch, a.scratch, hbytes);
    double l = 0;
    for (int k = 0; k < 2; k++) CHECK(step(m, &cfg, w, &l) == COLLAGE_OK && isfinite(l), "step %d: %s", k, collage_model_error(m));
    collage_model_memory_get(m, &d);
    CHECK(!memcmp(&c, &d, sizeof c), "a step changed the memory report: scratch %zu then %zu", c.scratch, d.scratch);
    /* NVFP4's weight copies (the forward's quantization kept for dX): 2 bytes per weight of each layer with
     * 4-bit products (12·C² per block, Vp·C for the logits); MXFP4 keeps none */
    const size_t Cc = (size_t)cfg.channels, copies = 2 * (12 * Cc * Cc * (size_t)cfg.num_layers + Vp * Cc);
    collage_model_memory e0, e1, x0, x1;
    CHECK(collage_model_fp4_set(m, "nvfp4", 0, 1) == COLLAGE_OK, "set nvfp4");
    collage_model_memory_get(m, &e0);
    CHECK(collage_model_fp4_set(m, "nvfp4", layers, 1) == COLLAGE_OK, "set nvfp4, all bf16");
    collage_model_memory_get(m, &e1);
    CHECK(e0.scratch == e1.scratch + copies, "nvfp4 scratch %zu, with every layer in bf16 %zu, want + %zu", e0.scratch,
          e1.scratch, copies);
    CHECK(collage_model_fp4_set(m, "mxfp4", 0, 1) == COLLAGE_OK, "set mxfp4");
    collage_model_memory_get(m, &x0);
    CHECK(collage_model_fp4_set(m, "mxfp4", layers, 1) == COLLAGE_OK, "set mxfp4, all bf16");
    collage_model_memory_get(m, &x1);
    CHECK(x0.scratch == x1.scratch && x0.scratch < e0.scratch, "mxfp4 scratch %zu, all bf16 %zu: copies kept",
          x0.scratch, x1.scratch);
    CHECK(collage_model_fp4_set(m, "fp4", 0, 1) == COLLAGE_ERR_ARG && collage_model_fp4_set(m, "nvfp4,hadamar", 0, 1) ==
          COLLAGE_ERR_ARG && collage_model_fp4_set(m, "mxfp4,", 0, 1) == COLLAGE_ERR_ARG, "bad recipes accepted");
    static const char *const BAD[] = {"nvfp4,rn,hadamard", "nvfp4,rn,rn", "nvfp4,hadamard,hadamard", "nvfp4,hadamard,",
                                      "mxfp4,rnx", "nvfp4rn"};
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++)
        CHECK(collage_model_fp4_set(m, BAD[i], 0, 1) == COLLAGE_ERR_ARG, "%s accepted", BAD[i]);
    CHECK(collage_model_fp4_set(m, "nvfp4,rn", 0, 1) == COLLAGE_OK && collage_model_fp4_set(m, "mxfp4,hadamard,rn", 0, 1) ==
          COLLAGE_OK, "the ,rn recipes refused");
    CHECK(collage_model_fp4_set(m, "mxfp4", layers + 1, 1) == COLLAGE_ERR_ARG && collage_model_fp4_set(m, "mxfp4", -1, 1) ==
          COLLAGE_ERR_ARG && collage_model_fp4_set(m, "mxfp4", layers, 1) == COLLAGE_OK, "bf16_last's range");
    CHECK(collage_model_fp4_set(mb, "nvfp4", 0, 1) == COLLAGE_ERR_UNSUPPORTED && collage_model_fp4_key(mb, 1) ==
          COLLAGE_ERR_UNSUPPORTED, "fp4 settings on a bf16 model");
    /* every layer in bf16: the bf16 model's loss and gradients, bit for bit */
    double lb = 0, l4 = 0;
    CHECK(step(mb, &cfg, w, &lb) == COLLAGE_OK && step(m, &cfg, w, &l4) == COLLAGE_OK, "steps");
    CHECK(lb == l4 && !memcmp(collage_model_grads(mb), collage_model_grads(m), n * 2),
          "bf16_last = every layer: loss %.17g, bf16 %.17g, or the gradients differ", l4, lb);
    /* a NaN in a weight: the forward fails by name with a NaN loss */
    collage_model_fp4_set(m, "nvfp4", 0, 1);
    w[n / 2].bits = 0x7FC0;
    CHECK(step(m, &cfg, w, &l) == COLLAGE_ERR_NONFINITE && isnan(l) && strstr(collage_model_error(m), "NaN"),
          "NaN refused: %s", collage_model_error(m));
done:
    collage_model_free(m);
    collage_model_free(mb);
    free(w);
}

/* The fp4 model's loss and gradients are the same for 1 and 3 threads (SR words by index, not thread). */
static void test_fp4_threads(void) {
    collage_model_config cfg;
    CHECK(collage_model_preset("tiny", &cfg) == COLLAGE_OK, "preset");
    const size_t n = collage_model_num_params(&cfg);
    collage_bf16 *w = weights(&cfg, n), *g1 = malloc(n * 2);
    const char *recipes[2] = {"nvfp4,hadamard", "mxfp4"};
    for (int r = 0; r < 2; r++) {
        collage_model *m = NULL;
        double l1 = 0, l3 = 0;
        CHECK(collage_model_create(&cfg, COLLAGE_REAL_FP4, B_TEST, T_TEST, &m) == COLLAGE_OK, "create");
        if (!m) break;
        collage_model_fp4_set(m, recipes[r], 0, 3);
        collage_model_fp4_key(m, 99);
        collage_set_threads(1);
        CHECK(step(m, &cfg, w, &l1) == COLLAGE_OK, "1 thread: %s", collage_model_error(m));
        memcpy(g1, collage_model_grads(m), n * 2);
        collage_set_threads(3);
        CHECK(step(m, &cfg, w, &l3) == COLLAGE_OK, "3 threads: %s", collage_model_error(m));
        CHECK(l1 == l3 && !memcmp(g1, collage_model_grads(m), n * 2), "%s: 3 threads differ from 1 (loss %.17g, %.17g)",
              recipes[r], l3, l1);
        collage_model_fp4_key(m, 100); /* another key: other SR words, other gradients */
        CHECK(step(m, &cfg, w, &l3) == COLLAGE_OK && memcmp(g1, collage_model_grads(m), n * 2), "%s: the key changes nothing",
              recipes[r]);
        collage_set_threads(0);
        collage_model_free(m);
    }
    free(w), free(g1);
}

/* ,rn (the gradients' quantization to nearest, no SR): the forward's loss is the SR recipe's, the
 * gradients differ from it, and no longer depend on the SR key; with ,hadamard too. */
static void test_fp4_grad_rn(void) {
    collage_model_config cfg;
    CHECK(collage_model_preset("tiny", &cfg) == COLLAGE_OK, "preset");
    const size_t n = collage_model_num_params(&cfg);
    collage_bf16 *w = weights(&cfg, n), *gs = malloc(n * 2), *g1 = malloc(n * 2);
    const char *pairs[2][2] = {{"nvfp4", "nvfp4,rn"}, {"nvfp4,hadamard", "nvfp4,hadamard,rn"}};
    for (int r = 0; r < 2; r++) {
        collage_model *m = NULL;
        double ls = 0, l1 = 0, l2 = 0;
        CHECK(collage_model_create(&cfg, COLLAGE_REAL_FP4, B_TEST, T_TEST, &m) == COLLAGE_OK, "create");
        if (!m) break;
        collage_model_fp4_set(m, pairs[r][0], 0, 3);
        collage_model_fp4_key(m, 99);
        CHECK(step(m, &cfg, w, &ls) == COLLAGE_OK, "%s: %s", pairs[r][0], collage_model_error(m));
        memcpy(gs, collage_model_grads(m), n * 2);
        collage_model_fp4_set(m, pairs[r][1], 0, 3);
        CHECK(step(m, &cfg, w, &l1) == COLLAGE_OK, "%s: %s", pairs[r][1], collage_model_error(m));
        memcpy(g1, collage_model_grads(m), n * 2);
        collage_model_fp4_key(m, 100);
        CHECK(step(m, &cfg, w, &l2) == COLLAGE_OK, "%s, another key: %s", pairs[r][1], collage_model_error(m));
        CHECK(ls == l1 && l1 == l2, "%s: the loss moved (%.17g, %.17g, %.17g)", pairs[r][1], ls, l1, l2);
        CHECK(memcmp(gs, g1, n * 2) != 0, "%s: the gradients are the SR recipe's", pairs[r][1]);
        CHECK(!memcmp(g1, collage_model_grads(m), n * 2), "%s: the SR key changed the gradients", pairs[r][1]);
        collage_model_free(m);
    }
    free(w), free(gs), free(g1);
}

/* `collage train --compute fp4` with collage-light: the final validation loss below the validation bytes'
 * unigram entropy h1 by LEARN_MARGIN. Measured margins on 2026-11-29 (this CPU): GPT-2 nvfp4 0.27 after 100
 * steps of 4 × 32 tokens, LLaMA mxfp4,hadamard 0.13, BERT nvfp4,hadamard with the last layer in bf16 (one
 * layer of width 64, masked LM on windows of 8 bytes, lr 3e-3, 300 steps of 64 × 8) 0.17. */
#define LEARN_MARGIN 0.05
static void check_trains(const char *preset, const char *recipe, const char *shape, double h1) {
    char out[65536];
    const int rc = h_sh(out, sizeof out, "%s train --model %s --compute fp4 --fp4-recipe %s %s --threads 1", bin(), preset,
                        recipe, shape);
    const char *val = strstr(out, " val "), *first = strstr(out, "fp4 compute");
    const double v = val ? atof(val + 5) : 99;
    printf("    %-10s %-15s validation loss %.4f (unigram entropy %.4f)\n", preset, recipe, v, h1);
    CHECK(rc == 0 && first && v < h1 - LEARN_MARGIN, "%s %s: rc %d, validation loss %.4f, unigram entropy %.4f\n%s",
          preset, recipe, rc, v, h1, out);
}

static void test_fp4_trains(void) {
    const double h1 = val_unigram_entropy(NULL);
    CHECK(isfinite(h1) && h1 > 2.5 && h1 < 4.5, "unigram entropy of the fortunes' validation bytes: %g", h1);
    check_trains("tiny", "nvfp4", "--steps 100 --batch 4 --seq 32 --eval-every 100", h1);
    if (getenv("COLLAGE_TEST_QUICK")) {
        printf("    COLLAGE_TEST_QUICK: GPT-2 only\n");
        return;
    }
    check_trains("llama-tiny", "mxfp4,hadamard", "--steps 100 --batch 4 --seq 32 --eval-every 100", h1);
    check_trains("bert-tiny", "nvfp4,hadamard", "--fp4-bf16-last 1 --layers 1 --dim 64 --steps 300 --batch 64 --seq 8 "
                 "--lr 3e-3 --eval-every 300", h1);
}

/* Saved at step 6 and resumed: the uninterrupted run's step-12 model, bit for bit; train.state records the
 * compute, a bare resume continues it, another compute, recipe or bf16_last is refused by name. */
static void test_fp4_train_resume(void) {
    char dir[] = "/tmp/collage-fp4-XXXXXX", out[16384];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
#define RUN_FP4 "train --compute fp4 --fp4-recipe nvfp4,hadamard --fp4-bf16-last 1 --steps 12 --batch 4 --seq 32 " \
                "--eval-every 12 --threads 1 --quiet"
    int rc = h_sh(out, sizeof out, "%s " RUN_FP4 " --save %s/a --save-every 6", bin(), dir);
    CHECK(rc == 0, "run a: %s", out);
    rc = h_sh(out, sizeof out, "%s " RUN_FP4 " --resume %s/a/step-00000006 --save %s/b", bin(), dir, dir);
    CHECK(rc == 0, "resume: %s", out);
    rc = h_sh(out, sizeof out, "cmp %s/a/step-00000012/model.bin %s/b/step-00000012/model.bin", dir, dir);
    CHECK(rc == 0, "the resumed run's model differs: %s", out);
    rc = h_sh(out, sizeof out, "grep -qx 'compute fp4' %s/a/step-00000006/train.state && grep -qx 'fp4_recipe nvfp4,hadamard' "
              "%s/a/step-00000006/train.state && grep -qx 'fp4_bf16_last 1' %s/a/step-00000006/train.state && %s train "
              "--steps 12 --eval-every 12 --threads 1 --quiet --resume %s/a/step-00000006 --save %s/c && cmp "
              "%s/a/step-00000012/model.bin %s/c/step-00000012/model.bin", dir, dir, dir, bin(), dir, dir, dir, dir);
    CHECK(rc == 0, "a bare resume of an fp4 run continues it bit for bit: %s", out);
    rc = h_sh(out, sizeof out, "%s train --compute bf16 --steps 12 --threads 1 --resume %s/a/step-00000006", bin(), dir);
    CHECK(rc == 2 && strstr(out, "--compute bf16") && strstr(out, "compute fp4, recipe nvfp4,hadamard"),
          "--compute bf16 on an fp4 run: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --compute fp4 --fp4-recipe mxfp4 --fp4-bf16-last 1 --steps 12 --threads 1 --resume "
              "%s/a/step-00000006", bin(), dir);
    CHECK(rc == 2 && strstr(out, "--fp4-recipe mxfp4"), "another recipe on resume: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --compute fp4 --fp4-recipe nvfp4,hadamard --fp4-bf16-last 2 --steps 12 --threads 1 "
              "--resume %s/a/step-00000006", bin(), dir);
    CHECK(rc == 2 && strstr(out, "--fp4-bf16-last 2"), "another bf16_last on resume: rc %d: %s", rc, out);
#undef RUN_FP4
    h_sh(NULL, 0, "rm -rf %s", dir);
}

/* Bad flags: refused before training, naming the flag. */
static void test_fp4_flags(void) {
    char out[16384];
    const struct { const char *args, *want; } cases[] = {
        {"--compute fp4 --fp4-recipe nvfp8", "--fp4-recipe nvfp8"},
        {"--compute fp4 --fp4-recipe mxfp4,hadamard,x", "--fp4-recipe mxfp4,hadamard,x"},
        {"--compute fp4 --fp4-recipe nvfp4,rn,hadamard", "--fp4-recipe nvfp4,rn,hadamard"},
        {"--fp4-recipe mxfp4", "--fp4-recipe"},
        {"--fp4-bf16-last 2", "--fp4-bf16-last"},
        {"--compute fp4 --fp4-bf16-last -1", "--fp4-bf16-last"},
        {"--compute fp3", "--compute fp3"},
        {"--compute fp4 --fp4-bf16-last 99", "--fp4-bf16-last 99"},
        {"--compute fp4 --precision fp32", "bf16 weights"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int rc = h_sh(out, sizeof out, "%s train %s --steps 2 --threads 1 --quiet", bin(), cases[i].args);
        CHECK(rc != 0 && strstr(out, cases[i].want) && strstr(out, "hint:"), "%s: rc %d: %s", cases[i].args, rc, out);
    }
    /* bench model: the same flags */
    int rc = h_sh(out, sizeof out, "%s bench model --model tiny --fp4-recipe nvfp4 --steps 1", bin());
    CHECK(rc == 2 && strstr(out, "--fp4-recipe") && strstr(out, "without --compute fp4"), "bench: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench model --model tiny --compute fp4 --fp4-recipe hadamard --steps 1", bin());
    CHECK(rc == 2 && strstr(out, "--fp4-recipe hadamard") && strstr(out, "hint:"), "bench: rc %d: %s", rc, out);
    /* compare's compute axis: fp4 recipes by name, each once, only with fp4 in --compute */
    const struct { const char *args, *want; } cmp[] = {
        {"--compute bf16,fp4 --fp4-recipe 'nvfp4;bogus'", "'bogus' is not a recipe"},
        {"--compute bf16,fp4 --fp4-recipe 'mxfp4;mxfp4'", "'mxfp4' is not a recipe or appears twice"},
        {"--compute bf16,fp8 --fp4-recipe nvfp4", "--fp4-recipe without fp4"},
        {"--compute fp4,fp4", "'fp4' appears twice"},
        {"--compute fp4 --precision fp32", "fp8 and fp4 run on bf16 weights"},
    };
    for (size_t i = 0; i < sizeof cmp / sizeof *cmp; i++) {
        rc = h_sh(out, sizeof out, "%s compare %s --steps 1 --out /nonexistent/collage-fp4", bin(), cmp[i].args);
        CHECK(rc != 0 && strstr(out, cmp[i].want) && strstr(out, "hint:"), "compare %s: rc %d: %s", cmp[i].args, rc, out);
    }
}

/* ------------------------------------------------------------------ the straight-through backward */
/* numerics.md §15 "The model in fp4": the fp4 model's gradient at θ0 against central differences of F_ST
 * (numerics.md §13), the fp64 model whose linear layers multiply the operands the fp4 forward quantized
 * (x̂ and Ŵ = v·d·dec, exact in double) as continuous variables. The differences from F_ST are the
 * gradient's quantization (SR to E2M1 in its blocks: up to one E2M1 step an element, a relative error of
 * order 2^-2 in norm), the requantization of X (and, MXFP4, of W) along the other axis for dW and dX, the
 * Hadamard transform's fp32 rounding, and the bf16 model's roundings. ST4_TOL bounds ‖g4 − g_ST‖ /
 * ‖g_ST‖ per kind of tensor (measured on GPT-2 tiny, 2 × 8 tokens: at most 0.23 nvfp4, 0.23 with the
 * Hadamard transform, 0.36 mxfp4; the unquantized fp64 gradient lies 0.08 to 0.29 from g_ST); a wrong
 * backward lies beyond it (a missing tensor factor dec is ≫ 1 off; the transform applied to one operand of
 * dW alone, 1.05 to 1.52; a transposed operand about 1). */
#define ST4_TOL 0.6

/* The dequantized operand v·d·dec (double, exact) of a stored bf16 matrix as operand `which` of a
 * product with transpose flag trans under spec (nn_gemm_fp4's quantization, by the scalar quantizer). */
static void st4_dequant(const void *spec, int which, int trans, const uint16_t *X, int rows, int cols, double *out) {
    const collage_fp4_quant q = nn_fp4_quant_of((const nn_fp4_spec *)spec, which, trans);
    const size_t n = (size_t)rows * cols;
    float *x = malloc(n * sizeof *x);
    uint8_t *codes = malloc(n), *sc = malloc(collage__fp4_blocks(&q, rows, cols));
    for (size_t i = 0; i < n; i++) x[i] = bf16_f32(X[i]);
    collage_fp4_tensor t;
    CHECK(collage__fp4_quantize(&q, x, rows, cols, cols, codes, sc, &t) == COLLAGE_OK, "quantize");
    int br, bc;
    collage__fp4_block_shape(&q, &br, &bc);
    const int gc = (cols + bc - 1) / bc;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            out[(size_t)r * cols + c] = (double)collage_lp_to_f32(COLLAGE_FMT_E2M1, codes[(size_t)r * cols + c]) *
                                        (double)collage__fp4_scale_value(q.recipe, sc[(size_t)(r / br) * gc + c / bc]) *
                                        (double)t.dec;
    free(x), free(codes), free(sc);
}

static void test_fp4_straight_through(void) {
    static const struct { collage_fp4_recipe r; int had; const char *tag; } RS[] = {
        {COLLAGE_FP4_NVFP4, 0, "nvfp4"}, {COLLAGE_FP4_NVFP4, 1, "nvfp4,had"}, {COLLAGE_FP4_MXFP4, 0, "mxfp4"}};
    st_case f;
    if (st_case_make(&f) == 0)
        for (size_t ri = 0; ri < sizeof RS / sizeof *RS; ri++) {
            gm_model *m4 = NULL;
            double l4 = 0;
            CHECK(collage__model_object(&f.c, GM_FP4, ST_B, ST_T, &m4) == COLLAGE_OK &&
                      gm_fp4_set(m4, RS[ri].r, RS[ri].had, 0, 0, 3) == COLLAGE_OK && gm_fp4_key(m4, 17) == COLLAGE_OK &&
                      gm_forward(m4, f.wb, f.tok, f.tgt, ST_B, ST_T, &l4) == COLLAGE_OK && gm_backward(m4) == COLLAGE_OK,
                  "fp4");
            if (!m4) continue;
            const nn_fp4_spec spec = {.recipe = RS[ri].r, .ra = COLLAGE_FP4_ACT, .rb = COLLAGE_FP4_WEIGHT};
            st_operands(&f.s, m4, f.wb, st4_dequant, &spec);
            const double lst = st_loss(&f.s, f.w, 1);
            printf("    %s: loss fp4 %.6f, F_ST %.6f, fp64 %.6f\n", RS[ri].tag, l4, lst, f.l64);
            CHECK(fabs(l4 - lst) <= 1e-2, "%s: the fp4 loss %.6f, F_ST's %.6f", RS[ri].tag, l4, lst);
            st_check_kinds(&f, gm_grads(m4), ST4_TOL, RS[ri].tag);
            gm_free(m4);
        }
    st_case_free(&f);
}

int main(void) {
    RUN(test_fp4_memory_and_settings);
    RUN(test_fp4_threads);
    RUN(test_fp4_grad_rn);
    RUN(test_fp4_straight_through);
    RUN(test_fp4_trains);
    RUN(test_fp4_train_resume);
    RUN(test_fp4_flags);
    return h_end();
}

/* test_fp8_model.c — the fp8 model precision (COLLAGE_REAL_FP8, docs/numerics.md §13 "The model in fp8"):
 * against the bf16 model on the same weights (loss and gradients close, for every recipe, GPT-2, LLaMA
 * and BERT), its backward against central differences of the function §13 says it is the gradient of
 * (the straight-through one, in fp64), the same bits on 1, 2 and 3 threads, the delayed scaling state
 * (its slots, its bytes in the memory report) saved and loaded giving the same next steps bit for bit,
 * an operand with NaN refused and the step's amaxes forgotten, and `collage train --compute fp8` with
 * collage-light learning every family below the default corpus's unigram entropy. */
#include "collage.h"
#include "collage_data.h"
#include "collage_model.h"
#include "gpt2.h"
#include "corpus.h"
#include "harness.h"
#include "model.h" /* collage__model_object: the model object, its activations and the fp8 operands' quantizer */
#include <math.h>
#include <string.h>

#define B_TEST 2
#define T_TEST 16
static const char *const RECIPES[] = {"delayed", "current", "block", "mxfp8"};

typedef struct {
    collage_model_config cfg;
    size_t n;
    collage_bf16 *w;
    int tok[B_TEST * T_TEST], tgt[B_TEST * T_TEST];
} fixture;

/* A preset's weights in bf16 and a batch of tokens. */
static void fixture_make(fixture *f, const char *preset, uint64_t seed) {
    CHECK(collage_model_preset(preset, &f->cfg) == COLLAGE_OK, "preset %s", preset);
    f->n = collage_model_num_params(&f->cfg);
    float *w = malloc(f->n * sizeof *w);
    f->w = malloc(f->n * sizeof *f->w);
    CHECK(w && f->w && collage_model_init_weights(&f->cfg, seed, w, f->n) == COLLAGE_OK, "init");
    collage_bf16_from_f32_row(f->w, w, f->n);
    free(w);
    uint64_t s = seed;
    for (int i = 0; i < B_TEST * T_TEST; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        f->tok[i] = (int)((s >> 33) % (uint64_t)f->cfg.vocab_size);
        f->tgt[i] = (int)((s >> 45) % (uint64_t)f->cfg.vocab_size);
    }
}

/* One forward and backward of model m on f: the loss, and the gradient widened into g (n floats). */
static collage_status step(collage_model *m, const fixture *f, double *loss, float *g) {
    collage_model_zero_grad(m);
    collage_status st = collage_model_forward(m, f->w, f->tok, f->tgt, B_TEST, T_TEST, loss);
    if (st == COLLAGE_OK) st = collage_model_backward(m);
    if (st == COLLAGE_OK && g) collage_bf16_to_f32_row(g, collage_model_grads(m), f->n);
    return st;
}

static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += (double)a[i] * (double)b[i];
        aa += (double)a[i] * (double)a[i];
        bb += (double)b[i] * (double)b[i];
    }
    return ab / sqrt(aa * bb);
}

/* fp8 against bf16 on the same weights: |Δloss| ≤ 0.01 (the loss is about ln V = 5.5; measured ≤ 0.004)
 * and the gradients' cosine ≥ 0.99 (measured ≥ 0.995), yet not the bf16 loss (the products are fp8), for
 * each recipe, hybrid and e4m3 everywhere; delayed after 3 scaling steps (its first step quantizes with
 * scale 1). */
static void check_family_close(const char *preset) {
    fixture f;
    fixture_make(&f, preset, 11);
    float *g16 = malloc(f.n * sizeof(float)), *g8 = malloc(f.n * sizeof(float));
    collage_model *mb = NULL;
    double lb = 0;
    CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_BF16, B_TEST, T_TEST, &mb) == COLLAGE_OK &&
              step(mb, &f, &lb, g16) == COLLAGE_OK, "%s bf16", preset);
    for (int r = 0; r < 4; r++)
        for (int all = 0; all < 2; all++) {
            collage_model *m = NULL;
            double l8 = 0;
            CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK &&
                      collage_model_fp8_set(m, RECIPES[r], all) == COLLAGE_OK, "%s fp8 %s", preset, RECIPES[r]);
            collage_status st = COLLAGE_OK;
            for (int k = 0; k < 4 && st == COLLAGE_OK; k++) {
                st = step(m, &f, &l8, g8);
                if (st == COLLAGE_OK) st = collage_model_fp8_end_step(m, 0);
            }
            const double c = cosine(g16, g8, f.n);
            CHECK(st == COLLAGE_OK && fabs(l8 - lb) <= 0.01 && l8 != lb && c >= 0.99, "%s %s e4m3_all %d: loss %.6f vs bf16 %.6f, "
                  "gradient cosine %.5f (%s)", preset, RECIPES[r], all, l8, lb, c, collage_model_error(m));
            collage_model_free(m);
        }
    collage_model_free(mb);
    free(g16); free(g8); free(f.w);
}

static void test_fp8_close_to_bf16(void) {
    check_family_close("tiny");
    check_family_close("llama-tiny");
    check_family_close("bert-tiny");
}

/* ------------------------------------------------------------------ the straight-through backward */
/* numerics.md §13 "What the fp8 backward is the gradient of": with per-tensor scaling (current), the fp8
 * model's gradient at θ0 is that of F_ST, the fp64 model whose linear layer k multiplies x + cx_k and
 * W + cw_k, with the offsets c = x̂ − x and Ŵ − W frozen at θ0 (x̂, Ŵ: the operands the fp8 model
 * quantized and dequantized there), up to the quantization of the incoming gradient (e5m2: a relative
 * error up to 2^-3 an element; e4m3: 2^-4) and the bf16 model's roundings. The test transcribes GPT-2's
 * forward in fp64 from nn.h's double ops (checked against the fp64 model: the same loss within 1e-12),
 * takes x̂ and Ŵ from the fp8 model's stored bf16 activations and weights through the quantizer, and
 * compares, per kind of tensor, the fp8 model's gradient with central differences of F_ST on
 * ST_PICK entries (those of 64 drawn whose fp64 gradient is largest): ‖g8 − g_ST‖ ≤ tol · ‖g_ST‖. */
/* The tolerance: 1.2 × the unit roundoff of the incoming gradient's format (e5m2 2^-3, e4m3 2^-4), the
 * relative error quantizing dY adds to each of its elements (measured: at most 0.83 u hybrid, 0.53 u e4m3).
 * A wrong backward lies far beyond: an unscaled operand or a missing scale factor is off by the scale
 * (≫ 1), a transposed one by about 1. */
#define ST_TOL_HYBRID (1.2 * 0.125)
#define ST_TOL_E4M3 (1.2 * 0.0625)
#include "straight_through.h"

/* The dequantized operand q·inv (double, exact) of a stored bf16 matrix (rows, cols) as operand `which`
 * of a product with transpose flag trans under spec p (nn_gemm_fp8's quantization). */
static void st_dequant(const void *spec, int which, int trans, const uint16_t *X, int rows, int cols, double *out) {
    const collage_fp8_quant q = nn_fp8_quant_of((const nn_fp8_spec *)spec, which, trans);
    const size_t nb = collage__fp8_blocks(&q, rows, cols);
    uint16_t *v = malloc((size_t)rows * cols * sizeof *v);
    float *s = malloc(nb * sizeof *s), *inv = malloc(nb * sizeof *inv);
    nn_fp8_operand op;
    CHECK(v && s && inv && nn_fp8_operand_make(&op, &q, X, rows, cols, cols, v, s, inv, NULL, 1) == COLLAGE_OK, "quantize");
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const double f = op.dequant ? 1.0 : (double)op.inv[(size_t)(r / op.br) * op.gc + (size_t)(c / op.bc)];
            out[(size_t)r * cols + c] = (double)bf16_f32(v[(size_t)r * cols + c]) * f;
        }
    free(v), free(s), free(inv);
}

static void test_fp8_straight_through(void) {
    st_case f;
    if (st_case_make(&f) == 0)
        for (int all = 0; all < 2; all++) {
            gm_model *m8 = NULL;
            double l8 = 0;
            CHECK(collage__model_object(&f.c, GM_FP8, ST_B, ST_T, &m8) == COLLAGE_OK &&
                      gm_fp8_set(m8, COLLAGE_FP8_CURRENT, all) == COLLAGE_OK &&
                      gm_forward(m8, f.wb, f.tok, f.tgt, ST_B, ST_T, &l8) == COLLAGE_OK && gm_backward(m8) == COLLAGE_OK,
                  "fp8");
            if (!m8) continue;
            const nn_fp8_spec spec = {.recipe = COLLAGE_FP8_CURRENT, .e4m3_all = all, .ra = COLLAGE_FP8_ACT,
                                      .rb = COLLAGE_FP8_WEIGHT};
            st_operands(&f.s, m8, f.wb, st_dequant, &spec);
            const double lst = st_loss(&f.s, f.w, 1);
            const char *tag = all ? "e4m3" : "hybrid";
            printf("    %s: loss fp8 %.6f, F_ST %.6f, fp64 %.6f\n", tag, l8, lst, f.l64);
            CHECK(fabs(l8 - lst) <= 1e-3, "%s: the fp8 loss %.6f, F_ST's %.6f", tag, l8, lst);
            st_check_kinds(&f, gm_grads(m8), all ? ST_TOL_E4M3 : ST_TOL_HYBRID, tag);
            gm_free(m8);
        }
    st_case_free(&f);
}

/* The same loss and gradient bits on 1, 2 and 3 threads (delayed after a scaling step, and block). */
static void check_threads(const char *preset) {
    fixture f;
    fixture_make(&f, preset, 5);
    for (int r = 0; r < 3; r += 2) {
        collage_bf16 *g1 = malloc(f.n * sizeof *g1);
        double l1 = 0;
        for (int nt = 1; nt <= 3; nt++) {
            collage_set_threads(nt);
            collage_model *m = NULL;
            double l = 0, l0 = 0;
            CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK &&
                      collage_model_fp8_set(m, RECIPES[r], 0) == COLLAGE_OK && step(m, &f, &l0, NULL) == COLLAGE_OK &&
                      collage_model_fp8_end_step(m, 0) == COLLAGE_OK && step(m, &f, &l, NULL) == COLLAGE_OK,
                  "%s %s on %d threads", preset, RECIPES[r], nt);
            if (m && nt == 1) { l1 = l; memcpy(g1, collage_model_grads(m), f.n * sizeof *g1); }
            else if (m)
                CHECK(!memcmp(&l, &l1, sizeof l) && !memcmp(g1, collage_model_grads(m), f.n * sizeof *g1),
                      "%s %s: %d threads differ from 1 (loss %.17g vs %.17g)", preset, RECIPES[r], nt, l, l1);
            collage_model_free(m);
        }
        free(g1);
    }
    collage_set_threads(0);
    free(f.w);
}

static void test_fp8_threads(void) {
    check_threads("tiny");
    check_threads("bert-tiny");
}

/* Delayed scaling: the state saved after 2 steps and loaded into a fresh model gives the uninterrupted
 * model's next 2 steps bit for bit (a fresh model without it does not); bytes of another shape refused. */
static void check_state_resume(const char *preset) {
    fixture f;
    fixture_make(&f, preset, 7);
    collage_model *a = NULL, *b = NULL, *c = NULL;
    CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &a) == COLLAGE_OK &&
              collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &b) == COLLAGE_OK &&
              collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &c) == COLLAGE_OK, "create");
    if (!a || !b || !c) goto done;
    double l = 0, la = 0, lb = 0, lc = 0;
    for (int k = 0; k < 2; k++) CHECK(step(a, &f, &l, NULL) == COLLAGE_OK && !collage_model_fp8_end_step(a, 0), "step");
    const size_t nb = collage_model_fp8_state_bytes(a);
    unsigned char *buf = malloc(nb);
    CHECK(nb > 0 && buf && collage_model_fp8_state_save(a, buf, nb) == COLLAGE_OK &&
              collage_model_fp8_state_load(b, buf, nb) == COLLAGE_OK, "save and load %zu bytes", nb);
    CHECK(collage_model_fp8_state_load(b, buf, nb - 1) == COLLAGE_ERR_FORMAT, "truncated state refused");
    for (int k = 0; k < 2; k++) {
        CHECK(step(a, &f, &la, NULL) == COLLAGE_OK && step(b, &f, &lb, NULL) == COLLAGE_OK &&
                  step(c, &f, &lc, NULL) == COLLAGE_OK, "steps");
        CHECK(!memcmp(&la, &lb, sizeof la) &&
                  !memcmp(collage_model_grads(a), collage_model_grads(b), f.n * sizeof(collage_bf16)),
              "%s resumed step %d: loss %.17g vs %.17g", preset, k, lb, la);
        collage_model_fp8_end_step(a, 0); collage_model_fp8_end_step(b, 0); collage_model_fp8_end_step(c, 0);
    }
    CHECK(memcmp(&la, &lc, sizeof la) != 0, "without the state the loss differs (%.17g)", lc);
    collage_model_config other = f.cfg;
    other.num_layers = 1;
    collage_model *d = NULL;
    CHECK(collage_model_create(&other, COLLAGE_REAL_FP8, B_TEST, T_TEST, &d) == COLLAGE_OK &&
              collage_model_fp8_state_load(d, buf, nb) == COLLAGE_ERR_FORMAT, "another shape's state refused");
    collage_model_free(d);
    free(buf);
done:
    collage_model_free(a); collage_model_free(b); collage_model_free(c);
    free(f.w);
}

static void test_fp8_state_resume(void) {
    check_state_resume("llama-tiny");
    check_state_resume("bert-tiny");
}

/* A NaN in a product's weight: forward refused with COLLAGE_ERR_NONFINITE, the skipped step's amaxes
 * forgotten (the state's bytes as before); the other precisions refuse fp8's calls. */
static void test_fp8_nonfinite_and_refusals(void) {
    fixture f;
    fixture_make(&f, "tiny", 3);
    collage_model *m = NULL;
    double l = 0;
    CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK &&
              step(m, &f, &l, NULL) == COLLAGE_OK && collage_model_fp8_end_step(m, 0) == COLLAGE_OK, "create");
    if (m) {
        const size_t nb = collage_model_fp8_state_bytes(m);
        unsigned char *s0 = malloc(nb), *s1 = malloc(nb);
        collage_model_fp8_state_save(m, s0, nb);
        collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
        const int nt = collage_model_tensors(&f.cfg, t, COLLAGE_MODEL_MAX_TENSORS);
        for (int k = 0; k < nt; k++)
            if (t[k].product && strcmp(t[k].name, "wte")) { f.w[t[k].offset + 3].bits = 0x7FC0; break; }
        CHECK(step(m, &f, &l, NULL) == COLLAGE_ERR_NONFINITE && isnan(l) && strstr(collage_model_error(m), "NaN"),
              "NaN refused: %s", collage_model_error(m));
        CHECK(collage_model_backward(m) == COLLAGE_ERR_ARG, "no backward after a refused forward");
        CHECK(collage_model_fp8_end_step(m, 1) == COLLAGE_OK && collage_model_fp8_state_save(m, s1, nb) == COLLAGE_OK &&
                  !memcmp(s0, s1, nb), "a skipped step leaves the state");
        free(s0); free(s1);
    }
    collage_model_free(m);
    collage_model *b = NULL;
    CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_BF16, B_TEST, T_TEST, &b) == COLLAGE_OK &&
              collage_model_fp8_set(b, "delayed", 0) == COLLAGE_ERR_UNSUPPORTED &&
              collage_model_fp8_end_step(b, 0) == COLLAGE_ERR_UNSUPPORTED, "bf16 model: no fp8 calls");
    collage_model_free(b);
    CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK &&
              collage_model_fp8_set(m, "fp4", 0) == COLLAGE_ERR_ARG, "unknown recipe");
    collage_model_free(m);
    free(f.w);
}

/* Bytes of the weight copies of GPT-2 config c's fp8 model under recipe r (numerics.md §13): 2 per weight
 * of the linear layers (qkv, attention projection, fc, fc projection in each of L blocks, the logits' on
 * wte: 12·C² per block and Vp·C) and 8 per block of r (the scale and its inverse): one per matrix for
 * delayed and current, 128×128 blocks for block; none for mxfp8. */
static size_t gpt2_copy_bytes(const collage_model_config *c, const char *r) {
    if (!strcmp(r, "mxfp8")) return 0;
    const size_t C = (size_t)c->channels, L = (size_t)c->num_layers, V = (size_t)c->padded_vocab_size;
    const size_t io[5][3] = {{L, 3 * C, C}, {L, C, C}, {L, 4 * C, C}, {L, C, 4 * C}, {1, V, C}};
    size_t b = 0;
    for (int k = 0; k < 5; k++) {
        const size_t blocks = strcmp(r, "block") ? 1 : ((io[k][1] + 127) / 128) * ((io[k][2] + 127) / 128);
        b += io[k][0] * (2 * io[k][1] * io[k][2] + 8 * blocks);
    }
    return b;
}

/* A model made with recipe r alone (a recipe with weight copies): two steps give the same loss, to the bit,
 * as the model set to every recipe (loss), and its scratch holds no room for a weight operand (its
 * weights are quantized into their copies): it is at least the largest weight's values, less the largest
 * activation of a weight product's operand B, below the scratch of that model (scratch). */
static void fresh_model_check(const fixture *f, int r, double loss, size_t scratch) {
    collage_model *m = NULL;
    collage_model_memory a = {0}, b = {0};
    double l = 0;
    CHECK(collage_model_create(&f->cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK && m &&
              collage_model_fp8_set(m, RECIPES[r], 0) == COLLAGE_OK && collage_model_memory_get(m, &a) == COLLAGE_OK,
          "%s alone: create", RECIPES[r]);
    if (!m) return;
    for (int k = 0; k < 2; k++)
        CHECK(step(m, f, &l, NULL) == COLLAGE_OK && collage_model_fp8_end_step(m, 0) == COLLAGE_OK, "%s alone: step %d",
              RECIPES[r], k);
    const size_t C = (size_t)f->cfg.channels, N = B_TEST * T_TEST, room = 2 * (4 * C * C - N * 4 * C);
    CHECK(collage_model_memory_get(m, &b) == COLLAGE_OK && !memcmp(&a, &b, sizeof a) && l == loss,
          "%s alone: loss %.17g (set to every recipe: %.17g), report changed by the steps: %d", RECIPES[r], l, loss,
          memcmp(&a, &b, sizeof a) != 0);
    CHECK(a.scratch + room <= scratch, "%s alone: scratch %zu bytes, set to every recipe %zu: not %zu less", RECIPES[r],
          a.scratch, scratch, room);
    collage_model_free(m);
}

/* The memory an fp8 model holds is allocated with its setting: for each recipe, GPT-2 tiny's report
 * before any step and after two steps are the same, and its scratch less the mxfp8 model's is the
 * recipe's weight copies (gpt2_copy_bytes) plus its delayed state, to the byte. Each model is set to
 * every recipe before its own, so the products' scratch has grown to all four in each. */
static void test_fp8_memory(void) {
    fixture f;
    fixture_make(&f, "tiny", 5);
    size_t scr[4] = {0}, state[4] = {0};
    for (int r = 3; r >= 0; r--) { /* mxfp8 first: the others' reference */
        collage_model *m = NULL;
        collage_model_memory a = {0}, b = {0};
        double l = 0;
        CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK, "create");
        if (!m) break;
        for (int q = 0; q < 4; q++) CHECK(collage_model_fp8_set(m, RECIPES[q], 0) == COLLAGE_OK, "set %s", RECIPES[q]);
        CHECK(collage_model_fp8_set(m, RECIPES[r], 0) == COLLAGE_OK && collage_model_memory_get(m, &a) == COLLAGE_OK,
              "%s: set", RECIPES[r]);
        for (int k = 0; k < 2; k++)
            CHECK(step(m, &f, &l, NULL) == COLLAGE_OK && collage_model_fp8_end_step(m, 0) == COLLAGE_OK, "%s: step %d: %s",
                  RECIPES[r], k, collage_model_error(m));
        CHECK(collage_model_memory_get(m, &b) == COLLAGE_OK && !memcmp(&a, &b, sizeof a),
              "%s: before the steps scratch %zu, activations %zu bytes; after them %zu, %zu", RECIPES[r], a.scratch,
              a.activations, b.scratch, b.activations);
        scr[r] = a.scratch, state[r] = collage_model_fp8_state_bytes(m);
        if (r < 3) fresh_model_check(&f, r, l, a.scratch);
        CHECK(scr[r] == scr[3] + gpt2_copy_bytes(&f.cfg, RECIPES[r]) + state[r] && (r == 0) == (state[r] > 0),
              "%s: scratch %zu bytes, mxfp8's %zu + weight copies %zu + delayed state %zu", RECIPES[r], scr[r], scr[3],
              gpt2_copy_bytes(&f.cfg, RECIPES[r]), state[r]);
        collage_model_free(m);
    }
    free(f.w);
}

/* BERT in fp8: its delayed state holds 3 slots for each of its 4·L + 2 linear layers (the blocks', the
 * head's dense layer, the logits'), whose bytes (numerics.md §13's layout: a 40-byte header, then per slot
 * 1 + 4 + 4 + 4·1024 bytes) the memory report counts in the scratch; a batch with no scored position runs
 * (loss 0, every gradient 0); a NaN in a weight makes the masked LM's forward fail with
 * COLLAGE_ERR_NONFINITE and a NaN loss. */
static void test_fp8_bert_state_and_nonfinite(void) {
    fixture f;
    fixture_make(&f, "bert-tiny", 3);
    collage_model *m = NULL, *mb = NULL;
    collage_model_memory mem8, mem16;
    CHECK(collage_model_create(&f.cfg, COLLAGE_REAL_FP8, B_TEST, T_TEST, &m) == COLLAGE_OK &&
              collage_model_create(&f.cfg, COLLAGE_REAL_BF16, B_TEST, T_TEST, &mb) == COLLAGE_OK, "create");
    if (!m || !mb) goto done;
    const size_t nb = collage_model_fp8_state_bytes(m);
    const size_t slots = 3 * (4 * (size_t)f.cfg.num_layers + 2);
    unsigned char *buf = malloc(nb);
    CHECK(buf && collage_model_fp8_state_save(m, buf, nb) == COLLAGE_OK, "save");
    const uint32_t saved = buf ? (uint32_t)buf[12] | (uint32_t)buf[13] << 8 | (uint32_t)buf[14] << 16 | (uint32_t)buf[15] << 24 : 0;
    CHECK(saved == slots && nb == 40 + slots * (9 + 4 * 1024), "%u slots, %zu bytes; expected %zu slots", saved, nb, slots);
    CHECK(collage_model_memory_get(m, &mem8) == COLLAGE_OK && collage_model_memory_get(mb, &mem16) == COLLAGE_OK &&
              mem8.scratch >= mem16.scratch + nb, "memory report: fp8 scratch %zu bytes, bf16 %zu, the state %zu",
          mem8.scratch, mem16.scratch, nb);
    free(buf);
    double l = 0;
    CHECK(step(m, &f, &l, NULL) == COLLAGE_OK && isfinite(l), "a finite step");
    int none[B_TEST * T_TEST]; /* a batch with no scored position after a step: no head, every gradient 0 */
    for (int i = 0; i < B_TEST * T_TEST; i++) none[i] = COLLAGE_TARGET_NONE;
    const collage_batch b0 = {.tokens = f.tok, .targets = none, .B = B_TEST, .T = T_TEST};
    for (int k = 0; k < 2; k++) { /* fp8, and bf16 (an empty product is 0 there too) */
        collage_model *x = k ? mb : m;
        collage_forward_info fi;
        if (k) CHECK(step(mb, &f, &l, NULL) == COLLAGE_OK, "a bf16 step");
        collage_model_zero_grad(x);
        CHECK(collage_model_forward_batch(x, f.w, &b0, &fi) == COLLAGE_OK && fi.scored == 0 && fi.loss == 0 &&
                  collage_model_backward(x) == COLLAGE_OK, "no scored position: %s", collage_model_error(x));
        const collage_bf16 *g = collage_model_grads(x);
        size_t nonzero = 0;
        for (size_t i = 0; i < f.n; i++) nonzero += (g[i].bits & 0x7fff) != 0;
        CHECK(nonzero == 0, "%s, no scored position: %zu gradients not 0", k ? "bf16" : "fp8", nonzero);
    }
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(&f.cfg, t, COLLAGE_MODEL_MAX_TENSORS);
    for (int k = 0; k < nt; k++)
        if (!strcmp(t[k].name, "fcw")) f.w[t[k].offset + 5].bits = 0x7FC0;
    CHECK(step(m, &f, &l, NULL) == COLLAGE_ERR_NONFINITE && isnan(l) && strstr(collage_model_error(m), "NaN"),
          "NaN refused: %s", collage_model_error(m));
    CHECK(collage_model_backward(m) == COLLAGE_ERR_ARG, "no backward after a refused forward");
done:
    collage_model_free(m);
    collage_model_free(mb);
    free(f.w);
}

/* `collage train --compute fp8` with collage-light (the default strategy) on the default corpus: the final
 * validation loss below the validation bytes' unigram entropy h1 (about 3.3 nats) by LEARN_MARGIN, from about
 * ln 256 = 5.5 at the start. Measured margins: GPT-2 (delayed) and LLaMA (block) 0.28 after 100 steps of
 * 4 × 32 tokens; BERT (delayed, one layer of width 64, masked LM on windows of 8 bytes, lr 3e-3) 0.18 after
 * 300 steps of 64 × 8. */
#define LEARN_MARGIN 0.05
static void check_trains(const char *preset, const char *recipe, const char *shape, double h1) {
    const char *bin = getenv("COLLAGE_BIN");
    char out[65536];
    const int rc = h_sh(out, sizeof out, "%s train --model %s --compute fp8 --fp8-recipe %s %s --threads 1",
                        bin ? bin : "build/collage", preset, recipe, shape);
    const char *val = strstr(out, " val "), *first = strstr(out, "fp8 compute");
    const double v = val ? atof(val + 5) : 99;
    printf("    %-10s %-7s validation loss %.4f (unigram entropy %.4f)\n", preset, recipe, v, h1);
    CHECK(rc == 0 && first && v < h1 - LEARN_MARGIN, "%s %s: rc %d, validation loss %.4f, unigram entropy %.4f\n%s",
          preset, recipe, rc, v, h1, out);
}

static void test_fp8_trains(void) {
    const double h1 = val_unigram_entropy(NULL);
    CHECK(isfinite(h1) && h1 > 2.5 && h1 < 4.5, "unigram entropy of the fortunes' validation bytes: %g", h1);
    check_trains("tiny", "delayed", "--steps 100 --batch 4 --seq 32 --eval-every 100", h1);
    if (getenv("COLLAGE_TEST_QUICK")) { /* the sanitizer suites: one family (test_fp8_close_to_bf16 runs all three) */
        printf("    COLLAGE_TEST_QUICK: GPT-2 only\n");
        return;
    }
    check_trains("llama-tiny", "block", "--steps 100 --batch 4 --seq 32 --eval-every 100", h1);
    check_trains("bert-tiny", "delayed", "--layers 1 --dim 64 --steps 300 --batch 64 --seq 8 --lr 3e-3 --eval-every 300",
                 h1);
}

/* `collage train --compute fp8` (delayed) saved at step 6 and resumed: the same step-12 model file as the
 * uninterrupted run (the checkpoint holds fp8.state); a resume without --compute fp8 refused. */
static void test_fp8_train_resume(void) {
    const char *bin = getenv("COLLAGE_BIN");
    char dir[] = "/tmp/collage-fp8-XXXXXX", out[16384];
    if (!bin) bin = "build/collage";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
#define RUN_FP8 "train --compute fp8 --steps 12 --batch 4 --seq 32 --eval-every 12 --threads 1 --quiet"
    int rc = h_sh(out, sizeof out, "%s " RUN_FP8 " --save %s/a --save-every 6", bin, dir);
    CHECK(rc == 0, "run a: %s", out);
    rc = h_sh(out, sizeof out, "test -s %s/a/step-00000006/fp8.state && %s " RUN_FP8 " --resume %s/a/step-00000006 --save %s/b",
              dir, bin, dir, dir);
    CHECK(rc == 0, "resume: %s", out);
    rc = h_sh(out, sizeof out, "cmp %s/a/step-00000012/model.bin %s/b/step-00000012/model.bin", dir, dir);
    CHECK(rc == 0, "the resumed run's model differs: %s", out);
    /* train.state records the compute: a bare --resume continues in fp8 with the run's recipe (block here,
     * whose state is not a file: only train.state says it), and another compute is refused by name */
    rc = h_sh(out, sizeof out, "%s " RUN_FP8 " --fp8-recipe block --save %s/c --save-every 6", bin, dir);
    CHECK(rc == 0, "run c: %s", out);
    rc = h_sh(out, sizeof out, "grep -qx 'compute fp8' %s/c/step-00000006/train.state && grep -qx 'fp8_recipe block' "
              "%s/c/step-00000006/train.state && %s train --steps 12 --eval-every 12 --threads 1 --quiet --resume "
              "%s/c/step-00000006 --save %s/d && cmp %s/c/step-00000012/model.bin %s/d/step-00000012/model.bin",
              dir, dir, bin, dir, dir, dir, dir);
    CHECK(rc == 0, "a bare resume of a block-scaled fp8 run continues it bit for bit: %s", out);
    rc = h_sh(out, sizeof out, "%s train --compute bf16 --steps 12 --threads 1 --resume %s/c/step-00000006", bin, dir);
    CHECK(rc == 2 && strstr(out, "--compute bf16") && strstr(out, "compute fp8, recipe block"), "--compute bf16 on an fp8 "
          "run: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --compute fp8 --fp8-recipe mxfp8 --steps 12 --threads 1 --resume %s/c/step-00000006",
              bin, dir);
    CHECK(rc == 2 && strstr(out, "--fp8-recipe mxfp8"), "another recipe on resume: rc %d: %s", rc, out);
#undef RUN_FP8
    h_sh(NULL, 0, "rm -rf %s", dir);
}

int main(void) {
    RUN(test_fp8_close_to_bf16);
    RUN(test_fp8_straight_through);
    RUN(test_fp8_threads);
    RUN(test_fp8_state_resume);
    RUN(test_fp8_nonfinite_and_refusals);
    RUN(test_fp8_memory);
    RUN(test_fp8_bert_state_and_nonfinite);
    RUN(test_fp8_trains);
    RUN(test_fp8_train_resume);
    return h_end();
}

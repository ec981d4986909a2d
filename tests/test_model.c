/* test_model.c — the generic model interface (collage_model.h) against its families, GPT-2 (gpt2.h) and
 * BERT (bert.h), each in graph_model.h's object: the same tensors, groups and parameter counts; forward, backward and
 * the logits (next token, or of chosen positions) through collage_model equal the object's own calls bit for bit in fp32,
 * bf16 and fp64, and what a family does not do is refused with a message; checkpoints of both formats
 * save, read their header and load back exactly (BERT's tensors by name, in any order), and failures name
 * the file; model calls, one at a time or on two threads at once, leave the caller's OpenBLAS thread
 * count as they found it. The LLaMA family through the same interface: its presets, tensors (weight
 * decay on matrices only), what a model of it runs on and holds, its checkpoint found by probing among
 * the families (tests/test_llama.c tests the family itself). Every family in every precision: its table
 * covers the slab, the memory report's gradients are the bytes the table implies, and its checkpoint
 * (fp32, bf16) loads back the bits saved. The profile (GPT-2 tiny in fp32, bf16 and fp8): off, it counts
 * nothing; on, the products and attention take time within the calls' and the products' FLOPs are the
 * tensor table's exactly, the loss and gradients are the bits of a pass without it, and two models
 * profiled on two threads at once count their own. */
#include "collage.h"
#include "collage_data.h"
#include "collage_model.h"
#include "bert_plan.h"
#include "gpt2_plan.h"
#include "harness.h"
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define SEED 20261125ULL
#define B_TEST 2
#define T_TEST 8

static collage_model_config micro_cfg(void) {
    return (collage_model_config){.family = COLLAGE_FAMILY_GPT2, .vocab_size = 19, .padded_vocab_size = 24,
                                  .max_seq_len = 8, .num_layers = 2, .num_heads = 2, .channels = 16};
}

/* ------------------------------------------------------------------ names, configs, tensors */
static void test_names_and_presets(void) {
    collage_family f;
    CHECK(collage_family_name(COLLAGE_FAMILY_GPT2) && strcmp(collage_family_name(COLLAGE_FAMILY_GPT2), "gpt2") == 0,
          "family name");
    CHECK(collage_family_name(COLLAGE_FAMILY_COUNT) == NULL, "unknown family has a name");
    CHECK(collage_family_parse("gpt2", &f) == COLLAGE_OK && f == COLLAGE_FAMILY_GPT2, "parse gpt2");
    CHECK(collage_family_parse("llama", &f) == COLLAGE_OK && f == COLLAGE_FAMILY_LLAMA, "parse llama");
    CHECK(collage_family_parse("bert", &f) == COLLAGE_OK && f == COLLAGE_FAMILY_BERT, "parse bert");
    CHECK(collage_family_parse("roberta", &f) == COLLAGE_ERR_ARG, "parse an unknown family");
    collage_real r;
    for (int k = 0; k < COLLAGE_REAL_COUNT; k++) {
        CHECK(collage_real_parse(collage_real_name((collage_real)k), &r) == COLLAGE_OK && r == (collage_real)k,
              "real %d round trip", k);
        if (k == COLLAGE_REAL_FP16) continue; /* the object runs it as fp16-emulated */
        CHECK(strcmp(collage_real_name((collage_real)k), gm_precision_name(gm_precision_of((collage_real)k))) == 0,
              "real %d named %s", k, collage_real_name((collage_real)k));
    }
    CHECK(!strcmp(collage_real_name(COLLAGE_REAL_FP16), "fp16") &&
              !strcmp(gm_precision_name(gm_precision_of(COLLAGE_REAL_FP16)), "fp16-emulated"), "the fp16 names");
    CHECK(collage_real_size(COLLAGE_REAL_FP32) == 4 && collage_real_size(COLLAGE_REAL_BF16) == 2 &&
              collage_real_size(COLLAGE_REAL_FP64) == 8 && collage_real_size(COLLAGE_REAL_FP16) == 2 &&
              collage_real_size(COLLAGE_REAL_FP8) == 2, "real sizes");
    CHECK(collage_real_parse("fp8", &r) == COLLAGE_OK && r == COLLAGE_REAL_FP8, "parse fp8");
    CHECK(collage_real_parse("fp4", &r) == COLLAGE_OK && r == COLLAGE_REAL_FP4 && collage_real_size(r) == 2, "parse fp4");
    CHECK(collage_real_parse("fp2", &r) == COLLAGE_ERR_ARG, "parse fp2");
    const char *const *names = collage_model_preset_names();
    static const char *want[] = {"tiny", "small", "gpt2", "llama-tiny", "llama-small", "llama-110m", "bert-tiny", "bert-base"};
    int n = 0;
    while (names[n]) n++;
    CHECK(n == 8, "%d presets", n);
    for (int k = 3; k < 6 && k < n; k++) {
        collage_model_config c;
        CHECK(!strcmp(names[k], want[k]) && collage_model_preset(names[k], &c) == COLLAGE_OK &&
                  c.family == COLLAGE_FAMILY_LLAMA && collage_model_check(&c, 1, c.max_seq_len, NULL, 0) == COLLAGE_OK,
              "preset %d: %s", k, names[k]);
    }
    for (int k = 6; k < 8 && k < n; k++) {
        collage_model_config c, b;
        CHECK(strcmp(names[k], want[k]) == 0 && collage_model_preset(names[k], &c) == COLLAGE_OK &&
                  bert_preset(names[k], &b) == COLLAGE_OK && c.family == COLLAGE_FAMILY_BERT && !memcmp(&b, &c, sizeof c),
              "preset %d is %s", k, names[k]);
    }
    CHECK(collage_family_parse("bert", &f) == COLLAGE_OK && f == COLLAGE_FAMILY_BERT, "parse bert");
    for (int k = 0; k < 3 && k < n; k++) {
        collage_model_config c, g;
        CHECK(strcmp(names[k], want[k]) == 0, "preset %d is %s", k, names[k]);
        CHECK(collage_model_preset(names[k], &c) == COLLAGE_OK && gpt2_preset(names[k], &g) == COLLAGE_OK, "%s",
              names[k]);
        CHECK(c.family == COLLAGE_FAMILY_GPT2 && memcmp(&c, &g, sizeof g) == 0, "preset %s differs", names[k]);
    }
    collage_model_config c;
    CHECK(collage_model_preset("huge", &c) == COLLAGE_ERR_ARG, "unknown preset");
    collage_model_preset("gpt2", &c);
    collage_model_config_set_vocab(&c, 257);
    CHECK(c.vocab_size == 257 && c.padded_vocab_size == 384, "set_vocab 257: %d %d", c.vocab_size, c.padded_vocab_size);
}

static void test_check_messages(void) {
    char msg[256];
    collage_model_config c = micro_cfg();
    CHECK(collage_model_check(&c, 4, 8, msg, sizeof msg) == COLLAGE_OK, "micro: %s", msg);
    c.channels = 17;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) == COLLAGE_ERR_SIZE && strstr(msg, "num_heads"), "%s", msg);
    CHECK(collage_model_num_params(&c) == 0 && collage_model_tensors(&c, NULL, 0) == 0, "invalid config has tensors");
    c = micro_cfg();
    c.family = COLLAGE_FAMILY_COUNT;
    CHECK(collage_model_check(&c, 0, 0, msg, sizeof msg) == COLLAGE_ERR_ARG && strstr(msg, "family"), "%s", msg);
    CHECK(collage_model_check(NULL, 0, 0, NULL, 0) == COLLAGE_ERR_NULL, "NULL config");
    collage_model *m = NULL;
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, 1, 4, &m) == COLLAGE_ERR_ARG && !m, "unknown family created");
    c = micro_cfg();
    CHECK(collage_model_create(&c, COLLAGE_REAL_COUNT, 1, 4, &m) == COLLAGE_ERR_ARG && !m, "bad precision");
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, 1, 9, &m) == COLLAGE_ERR_SIZE && !m, "maxT > max_seq_len");
    collage_model_free(NULL);
}

/* The generic tensors and groups equal the family's, for the micro model and the 124M one. */
static void test_tensors_and_groups(void) {
    collage_model_config cs[2] = {micro_cfg()};
    collage_model_preset("gpt2", &cs[1]);
    for (int i = 0; i < 2; i++) {
        collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS], gt[GPT2_NTENSORS];
        const int n = collage_model_tensors(&cs[i], t, COLLAGE_MODEL_MAX_TENSORS);
        CHECK(n == GPT2_NTENSORS && gpt2_tensors(&cs[i], gt, GPT2_NTENSORS) == n, "config %d: %d tensors", i, n);
        CHECK(collage_model_tensors(&cs[i], NULL, 0) == n && collage_model_tensors(&cs[i], t, 3) == n, "count only");
        size_t off = 0;
        for (int k = 0; k < n && k < GPT2_NTENSORS; k++) {
            int same = strcmp(t[k].name, gt[k].name) == 0 && t[k].offset == gt[k].offset && t[k].offset == off &&
                       t[k].count == gt[k].count && t[k].ndim == gt[k].ndim && t[k].decay == gt[k].decay &&
                       t[k].shape[3] == 0;
            for (int d = 0; d < 3; d++) same = same && t[k].shape[d] == gt[k].shape[d];
            CHECK(same, "config %d tensor %d (%s) differs from the family's", i, k, gt[k].name);
            off += t[k].count;
        }
        CHECK(collage_model_num_params(&cs[i]) == off, "config %d: params %zu vs the tensors' %zu", i,
              collage_model_num_params(&cs[i]), off);
        collage_param_group pg[COLLAGE_MODEL_MAX_TENSORS];
        CHECK(collage_model_param_groups(&cs[i], 0.1, pg, COLLAGE_MODEL_MAX_TENSORS) == n, "groups");
        for (int k = 0; k < n && k < GPT2_NTENSORS; k++)
            CHECK(strcmp(pg[k].name, gt[k].name) == 0 && pg[k].offset == gt[k].offset && pg[k].count == gt[k].count &&
                      pg[k].weight_decay == (gt[k].decay ? 0.1 : 0.0), "config %d group %d differs", i, k);
    }
    CHECK(collage_model_num_params(&cs[1]) == 124475904u, "gpt2 has %zu params", collage_model_num_params(&cs[1]));
}

/* LLaMA's tensors: llama2.c's in one slab (wq, wk, wv side by side per layer as wqkv; w1, w3 as w13), the
 * output matrix only when untied; weight decay and the products' flag on matrices, off on the norms (and
 * an untied embedding is no product). The 110M shape with GPT-2's vocabulary padded to 50304 rows:
 * 123,587,328 parameters (123,551,232 in llama2.c's file). */
static void test_llama_tensors_and_groups(void) {
    static const char *names[] = {"tok_embeddings", "attention_norm", "wqkv", "wo", "ffn_norm", "w13", "w2", "norm",
                                  "output"};
    for (int untied = 0; untied < 2; untied++) {
        collage_model_config c;
        collage_model_preset("llama-tiny", &c);
        c.untied = untied;
        collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
        collage_param_group g[COLLAGE_MODEL_MAX_TENSORS];
        const int n = collage_model_tensors(&c, t, COLLAGE_MODEL_MAX_TENSORS);
        CHECK(n == 8 + untied && collage_model_param_groups(&c, 0.1, g, COLLAGE_MODEL_MAX_TENSORS) == n, "%d tensors", n);
        size_t off = 0;
        for (int k = 0; k < n; k++) {
            const int norm = strstr(t[k].name, "norm") != NULL;
            CHECK(!strcmp(t[k].name, names[k]) && t[k].offset == off, "tensor %d: %s at %zu", k, t[k].name, t[k].offset);
            CHECK(t[k].decay == !norm && g[k].weight_decay == (norm ? 0.0 : 0.1) && g[k].offset == t[k].offset,
                  "%s: decay %d, group %g", t[k].name, t[k].decay, g[k].weight_decay);
            CHECK(t[k].product == (!norm && !(k == 0 && untied)), "%s: product %d", t[k].name, t[k].product);
            off += t[k].count;
        }
        CHECK(t[2].shape[0] == 2 && t[2].shape[1] == (4 + 2 * 2) * 32 && t[2].shape[2] == 128, "wqkv shape");
        CHECK(t[5].shape[1] == 2 * 352 && t[6].shape[1] == 128 && t[6].shape[2] == 352, "w13, w2 shapes");
    }
    collage_model_config c;
    collage_model_preset("llama-110m", &c);
    CHECK(collage_model_num_params(&c) == 123587328u && c.padded_vocab_size == 50304,
          "llama-110m has %zu params, %d embedding rows", collage_model_num_params(&c), c.padded_vocab_size);
}

static void test_init_matches_family(void) {
    const collage_model_config c = micro_cfg();
    const size_t n = collage_model_num_params(&c);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    CHECK(collage_model_init_weights(&c, SEED, a, n) == COLLAGE_OK, "init");
    CHECK(gpt2_init_weights(&c, SEED, b, n) == COLLAGE_OK, "family init");
    CHECK(memcmp(a, b, n * sizeof *a) == 0, "init differs from the family's");
    CHECK(collage_model_init_weights(&c, SEED, a, n + 1) == COLLAGE_ERR_SIZE, "wrong n accepted");
    free(a);
    free(b);
}

/* ------------------------------------------------------------------ the model against the family */
/* Weights in precision p from float ones: float as is, bf16 by RN, double exactly. */
static void *weights_in(collage_real p, const float *w, size_t n) {
    void *out = malloc(n * collage_real_size(p));
    if (!out) return NULL;
    if (p == COLLAGE_REAL_FP32) memcpy(out, w, n * sizeof(float));
    else if (p == COLLAGE_REAL_BF16 || p == COLLAGE_REAL_FP8 || p == COLLAGE_REAL_FP4) collage_bf16_from_f32_row(out, w, n);
    else if (p == COLLAGE_REAL_FP16) collage_fp16_from_f32_row(out, w, n);
    else for (size_t i = 0; i < n; i++) ((double *)out)[i] = (double)w[i];
    return out;
}

/* One precision: two steps (forward, backward) with and without zero_grad, then next_logits. */
static void compare_precision(collage_real p, const float *w32, const int *tok, const int *tgt) {
    const collage_model_config c = micro_cfg();
    collage_model *m = NULL;
    gm_model *f = NULL;
    const gm_precision fp = gm_precision_of(p);
    CHECK(collage_model_create(&c, p, B_TEST, T_TEST, &m) == COLLAGE_OK, "%s: create", collage_real_name(p));
    CHECK(gm_create(&collage__gpt2_graph, &c, fp, B_TEST, T_TEST, &f) == COLLAGE_OK, "family create");
    if (!m || !f) { collage_model_free(m); gm_free(f); return; }
    const size_t n = collage_model_size(m), es = collage_real_size(p);
    CHECK(n == gm_size(f) && collage_model_precision(m) == p, "size or precision");
    CHECK(collage_model_get_config(m)->num_layers == c.num_layers, "config");
    void *w = weights_in(p, w32, n);
    for (int step = 0; step < 2; step++) {
        double lm = 0, lf = 1;
        if (step == 0) { collage_model_zero_grad(m); gm_zero_grad(f); }
        CHECK(collage_model_forward(m, w, tok, tgt, B_TEST, T_TEST - step, &lm) == COLLAGE_OK, "%s", collage_model_error(m));
        CHECK(gm_forward(f, w, tok, tgt, B_TEST, T_TEST - step, &lf) == COLLAGE_OK, "%s", gm_error(f));
        CHECK(memcmp(&lm, &lf, sizeof lm) == 0, "%s step %d: loss %.17g vs family %.17g", collage_real_name(p), step, lm, lf);
        CHECK(collage_model_backward(m) == COLLAGE_OK && gm_backward(f) == COLLAGE_OK, "backward");
        CHECK(memcmp(collage_model_grads(m), gm_grads(f), n * es) == 0, "%s step %d: gradients differ",
              collage_real_name(p), step);
    }
    float lgm[19], lgf[19];
    CHECK(collage_model_next_logits(m, w, tok, 5, lgm) == COLLAGE_OK && gm_next_logits(f, w, tok, 5, lgf) == COLLAGE_OK,
          "next_logits");
    CHECK(memcmp(lgm, lgf, sizeof lgm) == 0, "%s: next-token logits differ", collage_real_name(p));
    CHECK(collage_sample_logits(lgm, 19, 0.8f, 7, 3) == collage_sample_logits(lgf, 19, 0.8f, 7, 3), "sample");
    CHECK(collage_model_backward(m) == COLLAGE_ERR_ARG && strstr(collage_model_error(m), "forward"),
          "backward after next_logits: %s", collage_model_error(m));
    free(w);
    collage_model_free(m);
    gm_free(f);
}

static void test_model_matches_family(void) {
    const collage_model_config c = micro_cfg();
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w);
    int tok[B_TEST * T_TEST], tgt[B_TEST * T_TEST];
    h_seed(SEED);
    for (int i = 0; i < B_TEST * T_TEST; i++) { tok[i] = (int)(h_rand32() % 19u); tgt[i] = (int)(h_rand32() % 19u); }
    collage_model_init_weights(&c, SEED, w, n);
    for (size_t i = 0; i < n; i++) w[i] += (float)(0.1 * (h_uniform() - 0.5)); /* LayerNorm and biases away from 1, 0 */
    printf("    seed %llu\n", SEED);
    for (int p = 0; p < COLLAGE_REAL_COUNT; p++) compare_precision((collage_real)p, w, tok, tgt);
    free(w);
}

/* The bf16 products' door against float64: every (ta, tb), shapes that split into several tiles, on this
 * machine's path and on the widening one. Products of two bf16 values are exact in fp32, so the error
 * is that of fp32 sums: |C − exact| ≤ K·2⁻²³·Σ|a·b| bounds any order of summation. */
static void test_bf16_matmul(void) {
    const int M = 300, N = 520, K = 77;
    collage_bf16 *A = malloc(sizeof *A * M * K), *Bm = malloc(sizeof *Bm * K * N);
    float *C = malloc(sizeof *C * M * N);
    h_seed(99);
    for (int i = 0; i < M * K; i++) A[i] = collage_bf16_from_f32((float)(h_uniform() * 2 - 1));
    for (int i = 0; i < K * N; i++) Bm[i] = collage_bf16_from_f32((float)(h_uniform() * 2 - 1));
    for (int path = 0; path < 2; path++) {
        if (path) setenv("COLLAGE_BF16_GEMM", "widen", 1);
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1, lda = ta ? M : K, ldb = tb ? K : N;
            CHECK(collage_bf16_matmul(ta, tb, M, N, K, A, lda, Bm, ldb, C, N) == COLLAGE_OK, "matmul");
            double worst = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double e = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        double a = (double)collage_bf16_to_f32(ta ? A[k * lda + i] : A[i * lda + k]);
                        double b = (double)collage_bf16_to_f32(tb ? Bm[j * ldb + k] : Bm[k * ldb + j]);
                        e += a * b;
                        mag += fabs(a * b);
                    }
                    double r = fabs((double)C[i * N + j] - e) / (K * ldexp(mag, -23) + 1e-300);
                    if (r > worst) worst = r;
                }
            CHECK(worst <= 1.0, "%s, ta %d tb %d: error %.2f of the fp32 bound", collage_bf16_products(), ta, tb, worst);
        }
        if (path) unsetenv("COLLAGE_BF16_GEMM");
    }
    CHECK(collage_bf16_matmul(0, 0, M, N, K, A, K - 1, Bm, N, C, N) == COLLAGE_ERR_SIZE, "lda < K accepted");
    free(A); free(Bm); free(C);
}

/* What a model says it runs its products on, and the memory it holds: 2-byte bf16 gradients and
 * activations, no fp32 copy of the weights. */
static void test_products_and_memory(void) {
    const collage_model_config c = micro_cfg();
    collage_model *f = NULL, *b = NULL, *w = NULL;
    setenv("COLLAGE_BF16_GEMM", "widen", 1);
    CHECK(collage_model_create(&c, COLLAGE_REAL_BF16, B_TEST, T_TEST, &w) == COLLAGE_OK, "create widen");
    unsetenv("COLLAGE_BF16_GEMM");
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, B_TEST, T_TEST, &f) == COLLAGE_OK, "create fp32");
    CHECK(collage_model_create(&c, COLLAGE_REAL_BF16, B_TEST, T_TEST, &b) == COLLAGE_OK, "create bf16");
    if (!f || !b || !w) { collage_model_free(f); collage_model_free(b); collage_model_free(w); return; }
    /* the fp32 kernel named and the same in every model of these shapes; the widening path pinned */
    const char *fs = collage_model_products_spec(f), *ws = collage_model_products_spec(w), *bs = collage_model_products_spec(b);
    CHECK(!strncmp(fs, "fp32=", 5) && strstr(collage_model_products(f), "sgemm") && !strncmp(ws, fs, strlen(fs)) &&
              !strncmp(bs, fs, strlen(fs)), "fp32: %s / %s, widen %s, bf16 %s", collage_model_products(f), fs, ws, bs);
    CHECK(strstr(ws, "bf16=widen") && strstr(collage_model_products(w), "widened") &&
              strstr(collage_model_products(w), "pinned"), "widen: %s", collage_model_products(w));
    CHECK(strstr(bs, "bf16=") && (strstr(collage_model_products(b), "measured") || strstr(collage_model_products(b), "remembered") ||
                                   strstr(collage_model_products(b), "pinned")),
          "bf16: %s", collage_model_products(b));
    printf("    products here: fp32 %s; bf16 %s\n", collage_model_products(f), collage_model_products(b));
    collage_model_memory mf, mb;
    CHECK(collage_model_memory_get(f, &mf) == COLLAGE_OK && collage_model_memory_get(b, &mb) == COLLAGE_OK, "memory");
    const size_t n = collage_model_size(f);
    CHECK(mf.gradients == n * 4, "fp32 gradients %zu bytes for %zu parameters", mf.gradients, n);
    CHECK(mb.gradients >= n * 2 && mb.gradients < n * 3, "bf16 gradients %zu bytes for %zu parameters", mb.gradients, n);
    CHECK(mb.activations < mf.activations, "bf16 activations %zu bytes, fp32 %zu", mb.activations, mf.activations);
    collage_model_free(f); collage_model_free(b); collage_model_free(w);
}

static void test_bad_input(void) {
    const collage_model_config c = micro_cfg();
    collage_model *m = NULL;
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, 1, 4, &m) == COLLAGE_OK, "create");
    if (!m) return;
    float *w = calloc(collage_model_size(m), sizeof *w);
    int tok[4] = {1, 2, 19, 3}, tgt[4] = {0};
    CHECK(collage_model_forward(m, w, tok, tgt, 1, 4, NULL) == COLLAGE_ERR_ARG && strstr(collage_model_error(m), "19"),
          "token = V: %s", collage_model_error(m));
    CHECK(collage_model_forward(m, w, tok, tgt, 1, 5, NULL) == COLLAGE_ERR_SIZE, "T > maxT");
    CHECK(collage_model_forward(NULL, w, tok, tgt, 1, 4, NULL) == COLLAGE_ERR_NULL, "NULL model");
    CHECK(collage_model_backward(NULL) == COLLAGE_ERR_NULL && collage_model_grads(NULL) == NULL, "NULL model");
    CHECK(strcmp(collage_model_error(NULL), "no model") == 0, "NULL model error");
    free(w);
    collage_model_free(m);
}

/* ------------------------------------------------------------------ the BERT family through collage_model */
static collage_model_config bert_micro(void) {
    collage_model_config c = {.family = COLLAGE_FAMILY_BERT, .max_seq_len = 8, .num_layers = 2, .num_heads = 2,
                              .channels = 16};
    collage_model_config_set_vocab(&c, 18); /* 18 tokens and the mask: V 19, padded 64 */
    return c;
}

/* Whether n tensor infos are equal field by field (a struct copy need not keep the padding after ndim). */
static int same_tensors(const collage_tensor_info *a, const collage_tensor_info *b, int n) {
    for (int k = 0; k < n; k++)
        if (a[k].name != b[k].name || a[k].offset != b[k].offset || a[k].count != b[k].count || a[k].ndim != b[k].ndim ||
            memcmp(a[k].shape, b[k].shape, sizeof a[k].shape) || a[k].decay != b[k].decay || a[k].product != b[k].product)
            return 0;
    return 1;
}

/* Tensors, initialisation, forward with padding, backward and the logits of chosen positions through
 * collage_model equal bert.h's calls bit for bit, in every precision. */
static void test_bert_matches_family(void) {
    const collage_model_config c = bert_micro();
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS], bt[BERT_NTENSORS];
    const int nt = collage_model_tensors(&c, t, COLLAGE_MODEL_MAX_TENSORS);
    CHECK(nt == BERT_NTENSORS && bert_tensors(&c, bt, BERT_NTENSORS) == nt && same_tensors(t, bt, nt), "tensors");
    CHECK(c.vocab_size == 19 && c.padded_vocab_size == 64 && collage_model_mask_token(&c) == 18, "vocab");
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w), *b = malloc(n * sizeof *b);
    CHECK(collage_model_init_weights(&c, SEED, w, n) == COLLAGE_OK && bert_init_weights(&c, SEED, b, n) == COLLAGE_OK &&
              !memcmp(w, b, n * sizeof *w), "init");
    h_seed(SEED + 1);
    for (size_t i = 0; i < n; i++) w[i] += (float)(0.1 * (h_uniform() - 0.5));
    int tok[B_TEST * T_TEST], tgt[B_TEST * T_TEST], len[B_TEST] = {T_TEST, 5};
    for (int i = 0; i < B_TEST * T_TEST; i++) {
        tok[i] = (int)(h_rand32() % 19u);
        tgt[i] = i % T_TEST < len[i / T_TEST] && i % 3 == 1 ? (int)(h_rand32() % 18u) : COLLAGE_TARGET_NONE;
    }
    for (int p = 0; p < COLLAGE_REAL_COUNT; p++) {
        collage_model *m = NULL;
        gm_model *f = NULL;
        const gm_precision bp = gm_precision_of((collage_real)p);
        CHECK(collage_model_create(&c, (collage_real)p, B_TEST, T_TEST, &m) == COLLAGE_OK &&
                  gm_create(&collage__bert_graph, &c, bp, B_TEST, T_TEST, &f) == COLLAGE_OK, "create");
        if (!m || !f) { collage_model_free(m); gm_free(f); continue; }
        void *wp = weights_in((collage_real)p, w, n);
        const collage_batch bb = {.tokens = tok, .targets = tgt, .lengths = len, .B = B_TEST, .T = T_TEST, .loss_divisor = 3};
        collage_forward_info a, z;
        CHECK(collage_model_forward_batch(m, wp, &bb, &a) == COLLAGE_OK && gm_forward_batch(f, wp, &bb, &z) == COLLAGE_OK,
              "%s: %s", collage_real_name((collage_real)p), collage_model_error(m));
        CHECK(!memcmp(&a, &z, sizeof a) && a.scored > 0 && a.correct >= 0, "%s: forward differs", collage_real_name((collage_real)p));
        collage_model_zero_grad(m);
        gm_zero_grad(f);
        CHECK(collage_model_backward(m) == COLLAGE_OK && gm_backward(f) == COLLAGE_OK &&
                  !memcmp(collage_model_grads(m), gm_grads(f), n * collage_real_size((collage_real)p)), "%s: gradients",
              collage_real_name((collage_real)p));
        const int pos[2] = {2, 6};
        float lm[2 * 19], lf[2 * 19];
        CHECK(collage_model_logits_at(m, wp, tok, T_TEST, pos, 2, lm) == COLLAGE_OK &&
                  gm_logits_at(f, wp, tok, T_TEST, pos, 2, lf) == COLLAGE_OK && !memcmp(lm, lf, sizeof lm), "%s: logits_at",
              collage_real_name((collage_real)p));
        CHECK(collage_model_next_logits(m, wp, tok, 4, lm) == COLLAGE_ERR_UNSUPPORTED &&
                  strstr(collage_model_error(m), "does not generate"), "next_logits: %s", collage_model_error(m));
        free(wp);
        collage_model_free(m);
        gm_free(f);
    }
    free(w); free(b);
}

/* What GPT-2 does not do is refused with a message: padding, a loss divisor, masked positions' logits;
 * full rows through forward_batch equal forward. */
static void test_gpt2_batch_calls(void) {
    const collage_model_config c = micro_cfg();
    collage_model *m = NULL;
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, B_TEST, T_TEST, &m) == COLLAGE_OK, "create");
    if (!m) return;
    float *w = calloc(collage_model_size(m), sizeof *w), lg[19];
    collage_model_init_weights(&c, SEED, w, collage_model_size(m));
    int tok[B_TEST * T_TEST], len[B_TEST] = {T_TEST, 3}, pos = 1;
    for (int i = 0; i < B_TEST * T_TEST; i++) tok[i] = i % 19;
    collage_batch b = {.tokens = tok, .targets = tok, .B = B_TEST, .T = T_TEST};
    collage_forward_info fi;
    double loss = 0;
    CHECK(collage_model_forward_batch(m, w, &b, &fi) == COLLAGE_OK && collage_model_forward(m, w, tok, tok, B_TEST, T_TEST,
                                                                                          &loss) == COLLAGE_OK &&
              fi.loss == loss && fi.scored == B_TEST * T_TEST && fi.correct == -1, "full rows");
    b.lengths = len;
    CHECK(collage_model_forward_batch(m, w, &b, &fi) == COLLAGE_ERR_UNSUPPORTED && strstr(collage_model_error(m), "padding"),
          "padding: %s", collage_model_error(m));
    b.lengths = NULL;
    b.loss_divisor = 2;
    CHECK(collage_model_forward_batch(m, w, &b, &fi) == COLLAGE_ERR_UNSUPPORTED, "divisor");
    CHECK(collage_model_logits_at(m, w, tok, 4, &pos, 1, lg) == COLLAGE_ERR_UNSUPPORTED &&
              strstr(collage_model_error(m), "next token"), "logits_at: %s", collage_model_error(m));
    CHECK(collage_model_next_logits(m, w, tok, 4, lg) == COLLAGE_OK && collage_model_error(m)[0] == 0, "next_logits after");
    free(w);
    collage_model_free(m);
}

/* ------------------------------------------------------------------ OpenBLAS's thread count */
static void test_blas_threads_restored(void) {
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(2);
    if (openblas_get_num_threads() != 2) {
        printf("    OpenBLAS holds %d threads at most here: set 2, got %d; nothing to check\n", before,
               openblas_get_num_threads());
        return;
    }
    const collage_model_config c = micro_cfg();
    collage_model *m = NULL;
    gm_model *f = NULL;
    collage_model_create(&c, COLLAGE_REAL_FP32, 1, 4, &m);
    gm_create(&collage__gpt2_graph, &c, GM_FP32, 1, 4, &f);
    if (!m || !f) { CHECK(0, "create"); collage_model_free(m); gm_free(f); return; }
    float *w = calloc(collage_model_size(m), sizeof *w), lg[19];
    int tok[4] = {1, 2, 3, 4};
    CHECK(collage_model_forward(m, w, tok, tok, 1, 4, NULL) == COLLAGE_OK, "forward");
    CHECK(openblas_get_num_threads() == 2, "after collage_model_forward: %d threads", openblas_get_num_threads());
    CHECK(collage_model_backward(m) == COLLAGE_OK, "backward");
    CHECK(openblas_get_num_threads() == 2, "after collage_model_backward: %d threads", openblas_get_num_threads());
    CHECK(collage_model_next_logits(m, w, tok, 4, lg) == COLLAGE_OK, "next_logits");
    CHECK(openblas_get_num_threads() == 2, "after collage_model_next_logits: %d", openblas_get_num_threads());
    CHECK(gm_forward(f, w, tok, tok, 1, 4, NULL) == COLLAGE_OK && gm_backward(f) == COLLAGE_OK &&
              gm_next_logits(f, w, tok, 4, lg) == COLLAGE_OK, "family calls");
    CHECK(openblas_get_num_threads() == 2, "after the family's calls: %d threads", openblas_get_num_threads());
    free(w);
    collage_model_free(m);
    gm_free(f);
    openblas_set_num_threads(before);
}

/* Two host threads run forwards on models of their own at once: every loss is the one of a forward run
 * alone, and the count the host set is back when both are done. */
typedef struct { const float *w; const int *tok; double loss[8]; int ok; } blas_job;

static void *blas_worker(void *arg) {
    blas_job *j = arg;
    const collage_model_config c = micro_cfg();
    collage_model *m = NULL;
    j->ok = collage_model_create(&c, COLLAGE_REAL_FP32, 1, 4, &m) == COLLAGE_OK;
    for (int k = 0; k < 8 && j->ok; k++)
        j->ok = collage_model_forward(m, j->w, j->tok, j->tok, 1, 4, &j->loss[k]) == COLLAGE_OK;
    collage_model_free(m);
    return NULL;
}

static void test_blas_threads_concurrent(void) {
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(2);
    if (openblas_get_num_threads() != 2) { printf("    OpenBLAS cannot hold 2 threads here; nothing to check\n"); return; }
    const collage_model_config c = micro_cfg();
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w);
    int tok[4] = {3, 1, 4, 1};
    collage_model_init_weights(&c, SEED, w, n);
    blas_job alone = {.w = w, .tok = tok}, jobs[2] = {{.w = w, .tok = tok}, {.w = w, .tok = tok}};
    blas_worker(&alone);
    pthread_t th[2];
    int started[2];
    for (int i = 0; i < 2; i++) started[i] = pthread_create(&th[i], NULL, blas_worker, &jobs[i]) == 0;
    for (int i = 0; i < 2; i++) if (started[i]) pthread_join(th[i], NULL);
    CHECK(alone.ok && started[0] && started[1] && jobs[0].ok && jobs[1].ok, "the threads' forwards failed");
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 8; k++)
            CHECK(memcmp(&jobs[i].loss[k], &alone.loss[0], sizeof(double)) == 0, "thread %d forward %d: loss %.17g vs %.17g",
                  i, k, jobs[i].loss[k], alone.loss[0]);
    CHECK(openblas_get_num_threads() == 2, "after concurrent model calls: %d threads", openblas_get_num_threads());
    free(w);
    openblas_set_num_threads(before);
}

/* ------------------------------------------------------------------ the profile */
#define PROF_B 2
#define PROF_T 16

/* 2·M·N·K summed over every product of a forward and backward on B·T tokens, from the tensor table: three
 * (M,N,K) products of each matrix a token goes through (forward, and the backward's two), per layer. */
static double exact_product_flops(const collage_model_config *c, int BT) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(c, t, COLLAGE_MODEL_MAX_TENSORS);
    double f = 0;
    for (int k = 0; k < nt; k++) {
        if (!t[k].product) continue;
        const int layered = t[k].ndim == 3;
        f += 6.0 * (double)(layered ? t[k].shape[0] : 1) * (double)t[k].shape[layered] * (double)t[k].shape[layered + 1] * BT;
    }
    return f;
}

/* One forward and backward of m after zero_grad; its loss and a copy of its gradients (es bytes each). */
static unsigned char *profiled_pass(collage_model *m, const void *w, const int *tok, double *loss, double *wall) {
    const size_t bytes = collage_model_size(m) * collage_real_size(collage_model_precision(m));
    unsigned char *g = malloc(bytes);
    const double t0 = h_now();
    collage_model_zero_grad(m);
    CHECK(collage_model_forward(m, w, tok, tok + 1, PROF_B, PROF_T, loss) == COLLAGE_OK, "%s", collage_model_error(m));
    CHECK(collage_model_backward(m) == COLLAGE_OK, "%s", collage_model_error(m));
    *wall = h_now() - t0;
    if (g) memcpy(g, collage_model_grads(m), bytes);
    return g;
}

/* GPT-2 tiny in one precision: profiling off counts nothing; on, the products and attention take time
 * within the calls', the products' FLOPs are the tensor table's exactly (fp8: its bf16 products inside its
 * door counted once), and the loss and gradients are the bits of the pass without it. */
static void check_profile(collage_real p, const float *w32, const int *tok) {
    collage_model_config c;
    collage_model_preset("tiny", &c);
    collage_model *m = NULL;
    CHECK(collage_model_create(&c, p, PROF_B, PROF_T, &m) == COLLAGE_OK, "%s: create", collage_real_name(p));
    if (!m || (p == COLLAGE_REAL_FP8 && collage_model_fp8_set(m, "current", 0) != COLLAGE_OK)) { CHECK(0, "fp8"); collage_model_free(m); return; }
    const size_t bytes = collage_model_size(m) * collage_real_size(p);
    void *w = weights_in(p, w32, collage_model_size(m));
    double loss_off, loss_on, wall_off, wall_on;
    unsigned char *g_off = profiled_pass(m, w, tok, &loss_off, &wall_off);
    collage_model_profile pr;
    CHECK(collage_model_profile_get(m, &pr) == COLLAGE_OK && pr.seconds == 0 && pr.products_seconds == 0 &&
              pr.products_flops == 0 && pr.products == 0 && pr.attention_seconds == 0 && pr.attention_ops == 0,
          "%s, off: %g s, products %g s %g FLOPs %lld, attention %g s %lld", collage_real_name(p), pr.seconds,
          pr.products_seconds, pr.products_flops, pr.products, pr.attention_seconds, pr.attention_ops);
    collage_model_profile_set(m, 1);
    unsigned char *g_on = profiled_pass(m, w, tok, &loss_on, &wall_on);
    collage_model_profile_get(m, &pr);
    const double want = exact_product_flops(&c, PROF_B * PROF_T);
    CHECK(pr.products_seconds > 0 && pr.attention_seconds > 0 && pr.products > 0 && pr.attention_ops == 2 * c.num_layers,
          "%s: products %g s (%lld), attention %g s (%lld)", collage_real_name(p), pr.products_seconds, pr.products,
          pr.attention_seconds, pr.attention_ops);
    CHECK(pr.products_seconds + pr.attention_seconds <= pr.seconds && pr.seconds <= wall_on, "%s: %g + %g s of calls %g s, wall %g s",
          collage_real_name(p), pr.products_seconds, pr.attention_seconds, pr.seconds, wall_on);
    CHECK(pr.products_flops == want, "%s: product FLOPs %.17g, the shapes give %.17g", collage_real_name(p), pr.products_flops, want);
    CHECK(memcmp(&loss_on, &loss_off, sizeof loss_on) == 0 && g_on && g_off && memcmp(g_on, g_off, bytes) == 0,
          "%s: profiling changed the loss (%.17g vs %.17g) or the gradients", collage_real_name(p), loss_on, loss_off);
    collage_model_profile_set(m, 0); /* off: the counts stay as they were */
    double l;
    free(profiled_pass(m, w, tok, &l, &wall_off));
    collage_model_profile q;
    collage_model_profile_get(m, &q);
    CHECK(q.seconds == pr.seconds && q.products_flops == pr.products_flops, "%s: counted while off", collage_real_name(p));
    printf("    %s: products %.2f ms (%lld), attention %.2f ms, calls %.2f ms\n", collage_real_name(p), 1e3 * pr.products_seconds,
           pr.products, 1e3 * pr.attention_seconds, 1e3 * pr.seconds);
    free(g_on); free(g_off); free(w);
    collage_model_free(m);
}

/* Tokens and weights of GPT-2 tiny, for the profile's tests (tok: PROF_B·PROF_T + 1, targets from 1 on). */
static float *profile_inputs(collage_model_config *c, int *tok) {
    collage_model_preset("tiny", c);
    const size_t n = collage_model_num_params(c);
    float *w = malloc(n * sizeof *w);
    if (w) collage_model_init_weights(c, SEED, w, n);
    for (int i = 0; i <= PROF_B * PROF_T; i++) tok[i] = (i * 37 + 11) % c->vocab_size;
    return w;
}

static void test_profile(void) {
    collage_model_config c;
    int tok[PROF_B * PROF_T + 1];
    float *w = profile_inputs(&c, tok);
    const collage_real precs[] = {COLLAGE_REAL_FP32, COLLAGE_REAL_BF16, COLLAGE_REAL_FP8};
    for (size_t i = 0; w && i < sizeof precs / sizeof *precs; i++) check_profile(precs[i], w, tok);
    collage_model_profile pr;
    CHECK(collage_model_profile_get(NULL, &pr) == COLLAGE_ERR_NULL, "NULL model");
    collage_model_profile_set(NULL, 1); /* nothing */
    free(w);
}

/* Two threads profile a model each at once: each counts its own products and attention ops, as one alone. */
typedef struct { const float *w; const int *tok; collage_model_profile pr; int ok; } prof_job;

static void *prof_worker(void *arg) {
    prof_job *j = arg;
    collage_model_config c;
    collage_model_preset("tiny", &c);
    collage_model *m = NULL;
    j->ok = collage_model_create(&c, COLLAGE_REAL_FP32, PROF_B, PROF_T, &m) == COLLAGE_OK;
    if (j->ok) collage_model_profile_set(m, 1);
    for (int k = 0; k < 3 && j->ok; k++)
        j->ok = collage_model_forward(m, j->w, j->tok, j->tok + 1, PROF_B, PROF_T, NULL) == COLLAGE_OK &&
                collage_model_backward(m) == COLLAGE_OK;
    if (j->ok) collage_model_profile_get(m, &j->pr);
    collage_model_free(m);
    return NULL;
}

static void test_profile_threads(void) {
    collage_model_config c;
    int tok[PROF_B * PROF_T + 1];
    float *w = profile_inputs(&c, tok);
    prof_job alone = {.w = w, .tok = tok}, jobs[2] = {{.w = w, .tok = tok}, {.w = w, .tok = tok}};
    if (w) prof_worker(&alone);
    pthread_t th[2];
    int started[2];
    for (int i = 0; i < 2; i++) started[i] = w && pthread_create(&th[i], NULL, prof_worker, &jobs[i]) == 0;
    for (int i = 0; i < 2; i++) if (started[i]) pthread_join(th[i], NULL);
    CHECK(alone.ok && started[0] && started[1] && jobs[0].ok && jobs[1].ok, "the threads' passes failed");
    const double want = 3 * exact_product_flops(&c, PROF_B * PROF_T);
    for (int i = 0; i < 2; i++)
        CHECK(jobs[i].pr.products_flops == want && jobs[i].pr.products == alone.pr.products &&
                  jobs[i].pr.attention_ops == 6 * c.num_layers && jobs[i].pr.products_seconds + jobs[i].pr.attention_seconds <= jobs[i].pr.seconds,
              "thread %d: %.17g FLOPs (want %.17g), %lld products (alone %lld), %lld attention ops", i, jobs[i].pr.products_flops,
              want, jobs[i].pr.products, alone.pr.products, jobs[i].pr.attention_ops);
    free(w);
}

/* ------------------------------------------------------------------ checkpoints */
static char g_dir[64];

static void test_checkpoint_round_trip(void) {
    const collage_model_config c = micro_cfg();
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w), *back = malloc(n * sizeof *back);
    collage_bf16 *wb = malloc(n * sizeof *wb), *backb = malloc(n * sizeof *backb), *rn = malloc(n * sizeof *rn);
    collage_model_init_weights(&c, SEED, w, n);
    collage_bf16_from_f32_row(wb, w, n);
    char path[128], fam_path[128], err[COLLAGE_ERR_LEN];
    for (int bf = 0; bf < 2; bf++) {
        snprintf(path, sizeof path, "%s/model%d.bin", g_dir, bf);
        snprintf(fam_path, sizeof fam_path, "%s/family%d.bin", g_dir, bf);
        const void *src = bf ? (const void *)wb : (const void *)w;
        CHECK(collage_model_save_file(path, &c, src, bf, err, sizeof err) == COLLAGE_OK, "save: %s", err);
        CHECK(gpt2_ckpt_save(fam_path, &c, src, bf, err, sizeof err) == COLLAGE_OK, "family save: %s", err);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, fam_path);
        CHECK(h_sh(NULL, 0, "%s", cmd) == 0, "bf16 %d: the file differs from the family's", bf);
        collage_model_config r;
        int file_bf16 = -1;
        memset(&r, 0xff, sizeof r);
        CHECK(collage_model_read_header(path, &r, &file_bf16, err, sizeof err) == COLLAGE_OK, "read_header: %s", err);
        CHECK(memcmp(&r, &c, sizeof c) == 0 && file_bf16 == bf, "bf16 %d: header config or precision differs", bf);
        CHECK(collage_model_load_file(path, &c, back, 0, err, sizeof err) == COLLAGE_OK, "load fp32: %s", err);
        CHECK(collage_model_load_file(path, &c, backb, 1, err, sizeof err) == COLLAGE_OK, "load bf16: %s", err);
        if (bf) {
            float *wide = malloc(n * sizeof *wide);
            collage_bf16_to_f32_row(wide, wb, n);
            CHECK(memcmp(back, wide, n * sizeof *back) == 0, "bf16 file read as fp32 is not exact");
            CHECK(memcmp(backb, wb, n * sizeof *wb) == 0, "bf16 file read as bf16 differs");
            free(wide);
        } else {
            collage_bf16_from_f32_row(rn, w, n);
            CHECK(memcmp(back, w, n * sizeof *w) == 0, "fp32 file read as fp32 differs");
            CHECK(memcmp(backb, rn, n * sizeof *rn) == 0, "fp32 file read as bf16 is not RN");
        }
    }
    free(w); free(back); free(wb); free(backb); free(rn);
}

static void expect_fail(collage_status got, collage_status want, const char *err, const char *name, const char *what) {
    CHECK(got == want, "%s: status %s, expected %s", what, collage_status_str(got), collage_status_str(want));
    CHECK(strstr(err, name) != NULL, "%s: the message does not name %s: '%s'", what, name, err);
}

static void test_checkpoint_errors(void) {
    collage_model_config c = micro_cfg(), r;
    const size_t n = collage_model_num_params(&c);
    float *w = calloc(n, sizeof *w);
    char path[128], err[COLLAGE_ERR_LEN];
    int bf;
    snprintf(path, sizeof path, "%s/missing.bin", g_dir);
    expect_fail(collage_model_read_header(path, &r, &bf, err, sizeof err), COLLAGE_ERR_IO, err, "missing.bin", "missing");
    snprintf(path, sizeof path, "%s/garbage.bin", g_dir);
    FILE *f = fopen(path, "wb");
    if (f) { fputs("not a checkpoint, not a checkpoint", f); fclose(f); }
    expect_fail(collage_model_read_header(path, &r, &bf, err, sizeof err), COLLAGE_ERR_FORMAT, err, "garbage.bin", "garbage");
    CHECK(strstr(err, "20240326") != NULL && strstr(err, "collbert") != NULL, "the message names no known format: '%s'", err);
    expect_fail(collage_model_load_file(path, &c, w, 0, err, sizeof err), COLLAGE_ERR_FORMAT, err, "garbage.bin", "load garbage");
    snprintf(path, sizeof path, "%s/empty.bin", g_dir);
    f = fopen(path, "wb");
    if (f) fclose(f);
    expect_fail(collage_model_read_header(path, &r, &bf, err, sizeof err), COLLAGE_ERR_FORMAT, err, "empty.bin", "empty");
    /* the right magic, then too short: the family's reader names the problem */
    snprintf(path, sizeof path, "%s/short.bin", g_dir);
    f = fopen(path, "wb");
    int32_t magic = GPT2_LLMC_MAGIC, version = GPT2_LLMC_VERSION_FP32;
    if (f) { fwrite(&magic, 4, 1, f); fwrite(&version, 4, 1, f); fclose(f); }
    expect_fail(collage_model_read_header(path, &r, &bf, err, sizeof err), COLLAGE_ERR_FORMAT, err, "short.bin", "short");
    /* a valid file of another shape */
    snprintf(path, sizeof path, "%s/shape.bin", g_dir);
    CHECK(collage_model_save_file(path, &c, w, 0, err, sizeof err) == COLLAGE_OK, "save: %s", err);
    c.num_layers = 1;
    expect_fail(collage_model_load_file(path, &c, w, 0, err, sizeof err), COLLAGE_ERR_FORMAT, err, "shape.bin", "shape");
    c = micro_cfg();
    c.family = COLLAGE_FAMILY_COUNT;
    snprintf(path, sizeof path, "%s/nofamily.bin", g_dir);
    expect_fail(collage_model_save_file(path, &c, w, 0, err, sizeof err), COLLAGE_ERR_ARG, err, "nofamily.bin", "family");
    free(w);
}

/* The collbert file's records as (offset, length) in the file, in their order; returns their count. */
static int bert_records(const unsigned char *file, size_t len, size_t es, size_t *off, size_t *rl) {
    size_t at = 256;
    int k = 0;
    while (at + 4 <= len && k < BERT_NTENSORS) {
        uint32_t nl, nd;
        memcpy(&nl, file + at, 4);
        memcpy(&nd, file + at + 4 + nl, 4);
        size_t count = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t dim;
            memcpy(&dim, file + at + 8 + nl + 8 * d, 8);
            count *= (size_t)dim;
        }
        off[k] = at;
        rl[k] = 8 + nl + 8 * nd + count * es;
        at += rl[k++];
    }
    return at == len ? k : -1;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *b = NULL;
    if (f && !fseek(f, 0, SEEK_END)) {
        *len = (size_t)ftell(f);
        rewind(f);
        b = malloc(*len);
        if (b && fread(b, 1, *len, f) != *len) { free(b); b = NULL; }
    }
    if (f) fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(b, 1, len, f); fclose(f); }
}

/* BERT's file: saved in fp32 and bf16, its header read back, its weights loaded exactly either way; with
 * the records in reverse order it loads the same weights (tensors by name). */
static void test_bert_checkpoint_round_trip(void) {
    const collage_model_config c = bert_micro();
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w), *back = malloc(n * sizeof *back), *wide = malloc(n * sizeof *wide);
    collage_bf16 *wb = malloc(n * sizeof *wb), *backb = malloc(n * sizeof *backb);
    collage_model_init_weights(&c, SEED, w, n);
    collage_bf16_from_f32_row(wb, w, n);
    collage_bf16_to_f32_row(wide, wb, n);
    char path[128], rev[128], err[COLLAGE_ERR_LEN];
    for (int bf = 0; bf < 2; bf++) {
        snprintf(path, sizeof path, "%s/bert%d.bin", g_dir, bf);
        CHECK(collage_model_save_file(path, &c, bf ? (const void *)wb : (const void *)w, bf, err, sizeof err) == COLLAGE_OK,
              "save: %s", err);
        collage_model_config r;
        int file_bf16 = -1;
        memset(&r, 0xff, sizeof r);
        CHECK(collage_model_read_header(path, &r, &file_bf16, err, sizeof err) == COLLAGE_OK && !memcmp(&r, &c, sizeof c) &&
                  file_bf16 == bf, "bf16 %d: header: %s", bf, err);
        CHECK(collage_model_load_file(path, &c, back, 0, err, sizeof err) == COLLAGE_OK &&
                  !memcmp(back, bf ? wide : w, n * sizeof *back), "bf16 %d: read as fp32: %s", bf, err);
        CHECK(collage_model_load_file(path, &c, backb, 1, err, sizeof err) == COLLAGE_OK &&
                  !memcmp(backb, wb, n * sizeof *wb), "bf16 %d: read as bf16: %s", bf, err);
        size_t len = 0, off[BERT_NTENSORS], rl[BERT_NTENSORS];
        unsigned char *file = slurp(path, &len), *out = malloc(len);
        const int nr = file && out ? bert_records(file, len, bf ? 2 : 4, off, rl) : -1;
        CHECK(nr == BERT_NTENSORS, "bf16 %d: %d records", bf, nr);
        if (nr == BERT_NTENSORS) {
            size_t at = 256;
            memcpy(out, file, 256);
            for (int k = nr - 1; k >= 0; k--) { memcpy(out + at, file + off[k], rl[k]); at += rl[k]; }
            snprintf(rev, sizeof rev, "%s/bert%d-reversed.bin", g_dir, bf);
            spit(rev, out, len);
            memset(back, 0, n * sizeof *back);
            CHECK(collage_model_load_file(rev, &c, back, 0, err, sizeof err) == COLLAGE_OK &&
                      !memcmp(back, bf ? wide : w, n * sizeof *back), "bf16 %d: the records reversed: %s", bf, err);
        }
        free(file); free(out);
    }
    free(w); free(back); free(wide); free(wb); free(backb);
}

/* A damaged BERT file is refused with a message naming the file and the problem. */
static void test_bert_checkpoint_errors(void) {
    const collage_model_config c = bert_micro();
    const size_t n = collage_model_num_params(&c);
    float *w = calloc(n, sizeof *w);
    char path[128], bad[128], err[COLLAGE_ERR_LEN];
    snprintf(path, sizeof path, "%s/bert-ok.bin", g_dir);
    snprintf(bad, sizeof bad, "%s/bert-bad.bin", g_dir);
    CHECK(collage_model_save_file(path, &c, w, 0, err, sizeof err) == COLLAGE_OK, "save: %s", err);
    size_t len = 0;
    unsigned char *file = slurp(path, &len);
    if (!file) { CHECK(0, "cannot read %s", path); free(w); return; }
    collage_model_config r;
    int bf;
    const uint32_t v2 = 2;
    struct { const char *what, *needle; size_t at, cut; const void *bytes; size_t nb; } cases[] = {
        {"truncated", "truncated", 0, len - 3, NULL, 0},
        {"version 2", "version 2", 8, len, &v2, 4},
        {"unknown tensor", "unknown tensor 'xte'", 260, len, "x", 1},   /* the first record's name: wte */
        {"another shape", "shape", 256 + 4 + 3 + 4, len, "A", 1},     /* its first size: 64 → 65 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *b = malloc(len);
        memcpy(b, file, len);
        if (cases[i].bytes) memcpy(b + cases[i].at, cases[i].bytes, cases[i].nb);
        spit(bad, b, cases[i].cut);
        free(b);
        collage_status st = collage_model_read_header(bad, &r, &bf, err, sizeof err);
        if (st == COLLAGE_OK) st = collage_model_load_file(bad, &c, w, 0, err, sizeof err);
        expect_fail(st, COLLAGE_ERR_FORMAT, err, "bert-bad.bin", cases[i].what);
        CHECK(strstr(err, cases[i].needle) != NULL, "%s: '%s' does not say '%s'", cases[i].what, err, cases[i].needle);
    }
    /* a BERT file given for a GPT-2 model, and a GPT-2 file for a BERT one */
    const collage_model_config g = micro_cfg();
    expect_fail(collage_model_load_file(path, &g, w, 0, err, sizeof err), COLLAGE_ERR_FORMAT, err, "bert-ok.bin", "family");
    CHECK(strstr(err, "bert") && strstr(err, "gpt2"), "family: '%s'", err);
    snprintf(bad, sizeof bad, "%s/gpt-ok.bin", g_dir);
    CHECK(collage_model_save_file(bad, &g, w, 0, err, sizeof err) == COLLAGE_OK, "save gpt2");
    expect_fail(collage_model_load_file(bad, &c, w, 0, err, sizeof err), COLLAGE_ERR_FORMAT, err, "gpt-ok.bin", "family");
    free(file);
    free(w);
}

/* A LLaMA model through the interface: its file is found among the families' formats and round-trips;
 * its products and memory are reported like GPT-2's; a GPT-2 file refuses to load as a llama. */
static void test_llama_checkpoint_and_products(void) {
    collage_model_config c, r;
    collage_model_preset("llama-tiny", &c);
    const size_t n = collage_model_num_params(&c);
    float *w = malloc(n * sizeof *w), *back = malloc(n * sizeof *back);
    char path[128], gpath[128], err[COLLAGE_ERR_LEN];
    int bf = -1;
    collage_model_init_weights(&c, SEED, w, n);
    snprintf(path, sizeof path, "%s/llama.bin", g_dir);
    CHECK(collage_model_save_file(path, &c, w, 0, err, sizeof err) == COLLAGE_OK, "save: %s", err);
    CHECK(collage_model_read_header(path, &r, &bf, err, sizeof err) == COLLAGE_OK && !memcmp(&r, &c, sizeof c) && bf == 0,
          "read_header: %s", err);
    CHECK(collage_model_load_file(path, &c, back, 0, err, sizeof err) == COLLAGE_OK && !memcmp(back, w, n * sizeof *w),
          "load: %s", err);
    const collage_model_config g = micro_cfg();
    snprintf(gpath, sizeof gpath, "%s/gpt.bin", g_dir);
    float *wg = calloc(collage_model_num_params(&g), sizeof *wg);
    CHECK(collage_model_save_file(gpath, &g, wg, 0, err, sizeof err) == COLLAGE_OK, "save gpt2: %s", err);
    expect_fail(collage_model_load_file(gpath, &c, back, 0, err, sizeof err), COLLAGE_ERR_FORMAT, err, "gpt.bin", "family");
    CHECK(strstr(err, "gpt2") && strstr(err, "llama"), "%s", err);
    collage_model *m32 = NULL, *m16 = NULL;
    CHECK(collage_model_create(&c, COLLAGE_REAL_FP32, 2, 16, &m32) == COLLAGE_OK &&
              collage_model_create(&c, COLLAGE_REAL_BF16, 2, 16, &m16) == COLLAGE_OK, "create");
    collage_model_memory a, b;
    if (m32 && m16 && collage_model_memory_get(m32, &a) == COLLAGE_OK && collage_model_memory_get(m16, &b) == COLLAGE_OK) {
        CHECK(strstr(collage_model_products(m32), "sgemm") && strstr(collage_model_products_spec(m16), "bf16="),
              "products: %s, %s", collage_model_products(m32), collage_model_products(m16));
        CHECK(a.gradients == n * 4 && b.gradients >= n * 2 && b.gradients < n * 3 && b.activations < a.activations,
              "memory: gradients %zu / %zu, activations %zu / %zu", a.gradients, b.gradients, a.activations, b.activations);
    }
    collage_model_free(m32); collage_model_free(m16);
    free(w); free(back); free(wg);
}

/* ------------------------------------------------------------------ every family and precision */
/* Bytes of the gradients a model of precision p holds for n parameters, fs of them in tensors no product
 * writes (their float sums in the bf16 model): the slab, and in bf16 the sums, in fp16 the fp32
 * accumulator beside the fp16 slab. */
static size_t grad_bytes(collage_real p, size_t n, size_t fs) {
    const int bf16 = p == COLLAGE_REAL_BF16 || p == COLLAGE_REAL_FP8 || p == COLLAGE_REAL_FP4;
    return p == COLLAGE_REAL_FP32 ? 4 * n : p == COLLAGE_REAL_FP64 ? 8 * n : bf16 ? 2 * n + 4 * fs : 6 * n;
}

/* The same configuration, field by field (the struct has padding). */
static int same_config(const collage_model_config *a, const collage_model_config *b) {
    return a->family == b->family && a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
           a->max_seq_len == b->max_seq_len && a->num_layers == b->num_layers && a->num_heads == b->num_heads &&
           a->channels == b->channels && a->num_kv_heads == b->num_kv_heads && a->hidden_dim == b->hidden_dim &&
           a->untied == b->untied && a->norm_eps == b->norm_eps && a->rope_theta == b->rope_theta;
}

/* Bytes of scratch a model of precision p holds besides the products' tiles (which only the bf16 model
 * has): the fp16 model's fp32 copy of its weights. */
static size_t scratch_bytes(collage_real p, size_t n) { return p == COLLAGE_REAL_FP16 ? 4 * n : 0; }

/* Bytes of an fp8 model's weight copies under recipe r (numerics.md §13): 2 per weight of its linear layers
 * (the tensors tokens go through: product ≠ 0) and 8 per block of r (the scale and its inverse, floats):
 * one block per matrix for delayed and current, 128×128 blocks for block; none for mxfp8. */
static size_t fp8_copy_bytes(const collage_model_config *c, const char *r) {
    if (!strcmp(r, "mxfp8")) return 0;
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(c, t, COLLAGE_MODEL_MAX_TENSORS);
    size_t b = 0;
    for (int k = 0; k < nt; k++) {
        if (!t[k].product) continue;
        const int lay = t[k].ndim == 3;
        const size_t rows = t[k].shape[lay], cols = t[k].shape[lay + 1];
        const size_t blocks = strcmp(r, "block") ? 1 : ((rows + 127) / 128) * ((cols + 127) / 128);
        b += 2 * t[k].count + 8 * (lay ? t[k].shape[0] : 1) * blocks;
    }
    return b;
}

/* The fp8 model's memory report under each recipe, set in turn with no step taken: its scratch less
 * mxfp8's is the recipe's weight copies (fp8_copy_bytes) plus its delayed state, to the byte. Every
 * recipe is set once before the readings, so the products' scratch has grown to all four. */
static void check_fp8_memory(const collage_model_config *c, collage_model *m, const char *fam) {
    static const char *const R[] = {"delayed", "current", "block", "mxfp8"};
    size_t scr[4] = {0}, state[4] = {0};
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < 4; r++) {
            collage_model_memory mem = {0};
            CHECK(collage_model_fp8_set(m, R[r], 0) == COLLAGE_OK && collage_model_memory_get(m, &mem) == COLLAGE_OK,
                  "%s fp8 %s: set", fam, R[r]);
            scr[r] = mem.scratch, state[r] = collage_model_fp8_state_bytes(m);
        }
    for (int r = 0; r < 4; r++)
        CHECK(scr[r] == scr[3] + fp8_copy_bytes(c, R[r]) + state[r] && (r == 0) == (state[r] > 0),
              "%s fp8 %s: scratch %zu bytes, mxfp8's %zu + weight copies %zu + delayed state %zu", fam, R[r], scr[r],
              scr[3], fp8_copy_bytes(c, R[r]), state[r]);
}

/* One family in one precision: its table covers the slab, the memory report counts the gradients and the
 * weight copy the table implies (fp8: the weight copies of each recipe, check_fp8_memory), and (fp32, bf16: the kinds the formats take) the checkpoint saves the
 * config and the bits and loads them back. */
static void check_family_precision(const collage_model_config *c, collage_real p, const char *file) {
    const char *fam = collage_family_name(c->family), *pn = collage_real_name(p);
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(c, t, COLLAGE_MODEL_MAX_TENSORS);
    size_t off = 0, fs = 0;
    for (int k = 0; k < nt; k++) {
        CHECK(t[k].offset == off, "%s: tensor %s at %zu, expected %zu", fam, t[k].name, t[k].offset, off);
        off += t[k].count;
        fs += t[k].product ? 0 : t[k].count;
    }
    collage_model *m = NULL;
    CHECK(collage_model_create(c, p, B_TEST, T_TEST, &m) == COLLAGE_OK, "%s %s: create", fam, pn);
    if (!m) return;
    const size_t n = collage_model_size(m);
    collage_model_memory mem;
    CHECK(nt > 0 && n == off && n == collage_model_num_params(c), "%s %s: %zu parameters, the table %zu", fam, pn, n, off);
    CHECK(collage_model_memory_get(m, &mem) == COLLAGE_OK && mem.gradients == grad_bytes(p, n, fs) && mem.activations > 0,
          "%s %s: gradients %zu bytes, the table implies %zu", fam, pn, mem.gradients, grad_bytes(p, n, fs));
    const int lowp = p == COLLAGE_REAL_BF16 || p == COLLAGE_REAL_FP8 || p == COLLAGE_REAL_FP4;
    CHECK(lowp ? mem.scratch > 0 : mem.scratch == scratch_bytes(p, n), "%s %s: scratch %zu bytes", fam, pn, mem.scratch);
    if (p == COLLAGE_REAL_FP8) check_fp8_memory(c, m, fam);
    collage_model_free(m);
    if (p != COLLAGE_REAL_FP32 && p != COLLAGE_REAL_BF16) return;
    float *w = malloc(n * sizeof *w);
    CHECK(w && collage_model_init_weights(c, SEED, w, n) == COLLAGE_OK, "%s: init", fam);
    void *wp = w ? weights_in(p, w, n) : NULL, *back = calloc(n, collage_real_size(p));
    collage_model_config h = {0};
    int bf = -1;
    char err[512] = "";
    const int bf16 = p == COLLAGE_REAL_BF16; /* llama2.c's file holds fp32: bf16 weights go in and come back exactly */
    CHECK(wp && back && collage_model_save_file(file, c, wp, bf16, err, sizeof err) == COLLAGE_OK &&
              collage_model_read_header(file, &h, &bf, err, sizeof err) == COLLAGE_OK && (bf == bf16 || !bf) &&
              same_config(&h, c) && collage_model_num_params(&h) == n &&
              collage_model_load_file(file, &h, back, bf16, err, sizeof err) == COLLAGE_OK &&
              !memcmp(back, wp, n * collage_real_size(p)), "%s %s: checkpoint round trip: %s", fam, pn, err);
    free(w); free(wp); free(back);
}

static void test_every_family_and_precision(void) {
    collage_model_config llama;
    CHECK(collage_model_preset("llama-tiny", &llama) == COLLAGE_OK, "llama-tiny");
    const collage_model_config cfgs[] = {micro_cfg(), bert_micro(), llama};
    char file[1200];
    snprintf(file, sizeof file, "%s/every.bin", g_dir);
    for (size_t f = 0; f < sizeof cfgs / sizeof cfgs[0]; f++)
        for (int p = 0; p < COLLAGE_REAL_COUNT; p++) check_family_precision(&cfgs[f], (collage_real)p, file);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/collage_test_model_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    printf("test_model: seed %llu, files in %s\n", SEED, g_dir);
    RUN(test_names_and_presets);
    RUN(test_check_messages);
    RUN(test_tensors_and_groups);
    RUN(test_llama_tensors_and_groups);
    RUN(test_init_matches_family);
    RUN(test_model_matches_family);
    RUN(test_bf16_matmul);
    RUN(test_products_and_memory);
    RUN(test_bad_input);
    RUN(test_blas_threads_restored);
    RUN(test_blas_threads_concurrent);
    RUN(test_profile);
    RUN(test_profile_threads);
    RUN(test_checkpoint_round_trip);
    RUN(test_checkpoint_errors);
    RUN(test_bert_matches_family);
    RUN(test_gpt2_batch_calls);
    RUN(test_bert_checkpoint_round_trip);
    RUN(test_bert_checkpoint_errors);
    RUN(test_llama_checkpoint_and_products);
    RUN(test_every_family_and_precision);
    h_rm_rf(g_dir);
    return h_end();
}

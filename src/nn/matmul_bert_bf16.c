/* matmul_bert_bf16.c — the bf16 products an encoder adds to matmul_bf16.c's (nn_bert.h): the logits with
 * their bias, and the gradient of a layer's input where the residual path and the branch meet. Each
 * tile's fp32 sums go through an epilogue that rounds where ops_bert.inc's float ops round in bf16 mode,
 * so with the widening path they give the float model's bits. Their fp8 twins run the fp8 products of the
 * same operands (nn_gemm_fp8, numerics.md §13) through the same epilogues. */
#include "nn_bert.h"

typedef struct {
    float *outf;            /* fp32 result holding bf16 values, or */
    uint16_t *out;          /* bf16 result, read first (out = rnd(out + rnd(t))) */
    int ldo;
    const uint16_t *bias;   /* per column */
} bert_ep;

static inline float rnd(float v) { return nn_rnd_f32(1, v); }
static inline uint16_t st(float v) { return (uint16_t)(f32_bits(nn_rnd_f32(1, v)) >> 16); }

/* outf = rnd(t + bias). */
static void ep_logits_bias(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const bert_ep *c = p;
    for (int i = i0; i < i1; i++) {
        const float *ti = t + (size_t)(i - i0) * ldt - j0;
        float *o = c->outf + (size_t)i * c->ldo;
#pragma omp simd
        for (int j = j0; j < j1; j++) o[j] = rnd(ti[j] + bf16_f32(c->bias[j]));
    }
}

/* out = rnd(out + rnd(t)): the residual's gradient already in out, the branch's added. */
static void ep_add_rounded(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const bert_ep *c = p;
    for (int i = i0; i < i1; i++) {
        const float *ti = t + (size_t)(i - i0) * ldt - j0;
        uint16_t *o = c->out + (size_t)i * c->ldo;
#pragma omp simd
        for (int j = j0; j < j1; j++) o[j] = st(bf16_f32(o[j]) + rnd(ti[j]));
    }
}

void NN_BF16_NAME(nn_matmul_logits_bias_bf16)(float *out, const uint16_t *inp, const uint16_t *w, const uint16_t *bias,
                                              int N, int C, int OC, nn_ws *ws, nn_bf16_path path, int nt) {
    bert_ep c = {.outf = out, .ldo = OC, .bias = bias};
    nn_gemm_bf16(0, 1, N, OC, C, inp, C, w, C, ep_logits_bias, &c, ws, path, nt);
}

void NN_BF16_NAME(nn_matmul_backward_input_res_bf16)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N,
                                                     int C, int OC, nn_ws *ws, nn_bf16_path path, int nt) {
    bert_ep c = {.out = dinp, .ldo = C};
    nn_gemm_bf16(0, 0, N, C, OC, dout, OC, w, C, ep_add_rounded, &c, ws, path, nt);
}

/* ---------------------------------------------------------------- the same ops on fp8 products */
/* The product's quantization: operand A is the layer's slot slot_a in role ra, B its slot slot_b in rb
 * (matmul_bf16.c's layer_spec: slot + 0 the input, + 1 the weight, + 2 the incoming gradient). */
static nn_fp8_spec fp8_spec(const nn_fp8_layer *L, collage_fp8_role ra, int slot_a, collage_fp8_role rb, int slot_b) {
    return (nn_fp8_spec){.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = ra, .rb = rb, .scaling = L->scaling,
                         .slot_a = L->slot + slot_a, .slot_b = L->slot + slot_b};
}

collage_status NN_BF16_NAME(nn_matmul_logits_bias_fp8)(float *out, const uint16_t *inp, const uint16_t *w,
                                                       const uint16_t *bias, int N, int C, int OC,
                                                       const nn_fp8_layer *L, nn_fp8_ws *ws, nn_bf16_path path,
                                                       int nt) {
    bert_ep c = {.outf = out, .ldo = OC, .bias = bias};
    const nn_fp8_spec p = fp8_spec(L, COLLAGE_FP8_ACT, 0, COLLAGE_FP8_WEIGHT, 1);
    return nn_gemm_fp8_w(&p, 0, 1, N, OC, C, inp, C, w, C, ep_logits_bias, &c, ws, L->wc, 0, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_backward_input_res_fp8)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,
                                                              int N, int C, int OC, const nn_fp8_layer *L,
                                                              nn_fp8_ws *ws, nn_bf16_path path, int nt) {
    bert_ep c = {.out = dinp, .ldo = C};
    const nn_fp8_spec p = fp8_spec(L, COLLAGE_FP8_GRAD, 2, COLLAGE_FP8_WEIGHT, 1);
    return nn_gemm_fp8_w(&p, 0, 0, N, C, OC, dout, OC, w, C, ep_add_rounded, &c, ws, L->wc, 1, path, nt);
}

/* ---------------------------------------------------------------- the same ops on 4-bit products */
collage_status NN_BF16_NAME(nn_matmul_logits_bias_fp4)(float *out, const uint16_t *inp, const uint16_t *w,
                                                       const uint16_t *bias, int N, int C, int OC,
                                                       const nn_fp4_layer *L, nn_fp4_ws *ws, nn_bf16_path path,
                                                       int nt) {
    bert_ep c = {.outf = out, .ldo = OC, .bias = bias};
    const nn_fp4_spec p = nn_fp4_layer_spec(L, 0);
    return nn_gemm_fp4_w(&p, 0, 1, N, OC, C, inp, C, w, C, ep_logits_bias, &c, ws, L->wc, 0, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_backward_input_res_fp4)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,
                                                              int N, int C, int OC, const nn_fp4_layer *L,
                                                              nn_fp4_ws *ws, nn_bf16_path path, int nt) {
    bert_ep c = {.out = dinp, .ldo = C};
    const nn_fp4_spec p = nn_fp4_layer_spec(L, 1);
    return nn_gemm_fp4_w(&p, 0, 0, N, C, OC, dout, OC, w, C, ep_add_rounded, &c, ws, L->wc, 1, path, nt);
}

/* matmul_bf16.c — the matrix products of the bf16 model: bf16 operands, fp32 sums (nn_gemm_bf16), and
 * what each op does with a tile of fp32 results before it is stored — round it to bf16, add a bias, add
 * a residual, add rows of the embedding's gradient — so no fp32 matrix of the product's size exists.
 * Each value is rounded where ops_f32.c rounds it in bf16 mode (bf = 1): with the widening path these
 * ops give the bits of the float ops on the widened values. The fp8 ops are the same ops on the fp8
 * products of their operands (nn_gemm_fp8, numerics.md §13), the same epilogues after them. */
#include "nn.h"

typedef struct {
    uint16_t *out;          /* bf16 result (row stride ldo), or */
    float *outf;            /* fp32 result holding bf16 values */
    int ldo;
    const uint16_t *bias;   /* per column, or NULL */
    const uint16_t *res;    /* residual, row stride ldo, or NULL */
    int add;                /* 1: out = rnd(out + result) */
    const int *tok;         /* rows of dtok scattered onto rows tok[n] of the result (NULL: none) */
    const uint16_t *dtok;   /* (ntok, ldo) */
    int ntok;
} ep_ctx;

#define EP_CHUNK 256 /* elements of a row rounded at a time before they are stored */

static inline float rnd(float v) { return nn_rnd_f32(1, v); }
static inline uint16_t st(float v) { return (uint16_t)(f32_bits(nn_rnd_f32(1, v)) >> 16); }

/* out = rnd(t + bias), or rnd(res + rnd(t + bias)) with a residual. */
static void ep_forward(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const ep_ctx *c = p;
    for (int i = i0; i < i1; i++) {
        const float *ti = t + (size_t)(i - i0) * ldt - j0;
        uint16_t *o = c->out + (size_t)i * c->ldo;
        const uint16_t *r = c->res ? c->res + (size_t)i * c->ldo : NULL, *b = c->bias;
        if (r && b) {
#pragma omp simd
            for (int j = j0; j < j1; j++) o[j] = st(bf16_f32(r[j]) + rnd(ti[j] + bf16_f32(b[j])));
        } else if (r) {
#pragma omp simd
            for (int j = j0; j < j1; j++) o[j] = st(bf16_f32(r[j]) + rnd(ti[j]));
        } else if (b) {
#pragma omp simd
            for (int j = j0; j < j1; j++) o[j] = st(ti[j] + bf16_f32(b[j]));
        } else {
#pragma omp simd
            for (int j = j0; j < j1; j++) o[j] = st(ti[j]);
        }
    }
}

/* outf = rnd(t): fp32 storage of bf16 values (the logits, which the fp32 softmax overwrites). */
static void ep_round_f32(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const ep_ctx *c = p;
    for (int i = i0; i < i1; i++) {
        const float *ti = t + (size_t)(i - i0) * ldt - j0;
        float *o = c->outf + (size_t)i * c->ldo;
#pragma omp simd
        for (int j = j0; j < j1; j++) o[j] = rnd(ti[j]);
    }
}

/* A weight gradient: the tile's sums (plus the scattered rows, in n order), rounded once; with add,
 * added to the gradient already there first. */
static void ep_weight(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const ep_ctx *c = p;
    float *tw = (float *)t; /* the tile is this thread's scratch */
    if (c->tok)
        for (int n = 0; n < c->ntok; n++) {
            const int i = c->tok[n];
            if (i < i0 || i >= i1) continue;
            float *ti = tw + (size_t)(i - i0) * ldt - j0;
            const uint16_t *d = c->dtok + (size_t)n * c->ldo;
#pragma omp simd
            for (int j = j0; j < j1; j++) ti[j] += bf16_f32(d[j]);
        }
    uint16_t row[EP_CHUNK]; /* the assigned gradient leaves through row, with streaming stores */
    for (int i = i0; i < i1; i++) {
        const float *ti = t + (size_t)(i - i0) * ldt - j0;
        uint16_t *o = c->out + (size_t)i * c->ldo;
        if (c->add) {
#pragma omp simd
            for (int j = j0; j < j1; j++) o[j] = st(bf16_f32(o[j]) + ti[j]);
        } else
            for (int a = j0; a < j1; a += EP_CHUNK) {
                const int w = j1 - a < EP_CHUNK ? j1 - a : EP_CHUNK;
#pragma omp simd
                for (int j = 0; j < w; j++) row[j] = st(ti[a + j]);
                nn_copy_stream(o + a, row, (size_t)w);
            }
    }
    nn_stream_fence();
}

void NN_BF16_NAME(nn_matmul_forward_bf16)(uint16_t *out, const uint16_t *inp, const uint16_t *w, const uint16_t *bias,
                            const uint16_t *res, int N, int C, int OC, nn_ws *ws, nn_bf16_path path, int nt) {
    ep_ctx c = {.out = out, .ldo = OC, .bias = bias, .res = res};
    nn_gemm_bf16(0, 1, N, OC, C, inp, C, w, C, ep_forward, &c, ws, path, nt);
}

void NN_BF16_NAME(nn_matmul_logits_bf16)(float *out, const uint16_t *inp, const uint16_t *w, int N, int C, int OC, nn_ws *ws,
                           nn_bf16_path path, int nt) {
    ep_ctx c = {.outf = out, .ldo = OC};
    nn_gemm_bf16(0, 1, N, OC, C, inp, C, w, C, ep_round_f32, &c, ws, path, nt);
}

void NN_BF16_NAME(nn_matmul_backward_input_bf16)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N, int C, int OC,
                                   nn_ws *ws, nn_bf16_path path, int nt) {
    ep_ctx c = {.out = dinp, .ldo = C};
    nn_gemm_bf16(0, 0, N, C, OC, dout, OC, w, C, ep_forward, &c, ws, path, nt);
}

void NN_BF16_NAME(nn_matmul_backward_weight_bf16)(uint16_t *dw, int add, const uint16_t *dout, const uint16_t *inp, int N, int C,
                                    int OC, const int *tok, const uint16_t *dtok, int ntok, nn_ws *ws,
                                    nn_bf16_path path, int nt) {
    ep_ctx c = {.out = dw, .ldo = C, .add = add, .tok = tok, .dtok = dtok, .ntok = ntok};
    nn_gemm_bf16(1, 0, OC, C, N, dout, OC, inp, C, ep_weight, &c, ws, path, nt);
}

/* ---------------------------------------------------------------- the same ops on fp8 products */
static nn_fp8_spec layer_spec(const nn_fp8_layer *L, collage_fp8_role ra, int slot_a, collage_fp8_role rb, int slot_b) {
    return (nn_fp8_spec){.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = ra, .rb = rb, .scaling = L->scaling,
                         .slot_a = L->slot + slot_a, .slot_b = L->slot + slot_b};
}

collage_status NN_BF16_NAME(nn_matmul_forward_fp8)(uint16_t *out, const uint16_t *inp, const uint16_t *w,
                                                   const uint16_t *bias, const uint16_t *res, int N, int C, int OC,
                                                   const nn_fp8_layer *L, nn_fp8_ws *ws, nn_bf16_path path, int nt) {
    ep_ctx c = {.out = out, .ldo = OC, .bias = bias, .res = res};
    const nn_fp8_spec p = layer_spec(L, COLLAGE_FP8_ACT, 0, COLLAGE_FP8_WEIGHT, 1);
    return nn_gemm_fp8_w(&p, 0, 1, N, OC, C, inp, C, w, C, ep_forward, &c, ws, L->wc, 0, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_logits_fp8)(float *out, const uint16_t *inp, const uint16_t *w, int N, int C,
                                                  int OC, const nn_fp8_layer *L, nn_fp8_ws *ws, nn_bf16_path path,
                                                  int nt) {
    ep_ctx c = {.outf = out, .ldo = OC};
    const nn_fp8_spec p = layer_spec(L, COLLAGE_FP8_ACT, 0, COLLAGE_FP8_WEIGHT, 1);
    return nn_gemm_fp8_w(&p, 0, 1, N, OC, C, inp, C, w, C, ep_round_f32, &c, ws, L->wc, 0, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_backward_input_fp8)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N,
                                                          int C, int OC, const nn_fp8_layer *L, nn_fp8_ws *ws,
                                                          nn_bf16_path path, int nt) {
    ep_ctx c = {.out = dinp, .ldo = C};
    const nn_fp8_spec p = layer_spec(L, COLLAGE_FP8_GRAD, 2, COLLAGE_FP8_WEIGHT, 1);
    return nn_gemm_fp8_w(&p, 0, 0, N, C, OC, dout, OC, w, C, ep_forward, &c, ws, L->wc, 1, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_backward_weight_fp8)(uint16_t *dw, int add, const uint16_t *dout,
                                                           const uint16_t *inp, int N, int C, int OC, const int *tok,
                                                           const uint16_t *dtok, int ntok, const nn_fp8_layer *L,
                                                           nn_fp8_ws *ws, nn_bf16_path path, int nt) {
    ep_ctx c = {.out = dw, .ldo = C, .add = add, .tok = tok, .dtok = dtok, .ntok = ntok};
    const nn_fp8_spec p = layer_spec(L, COLLAGE_FP8_GRAD, 2, COLLAGE_FP8_ACT, 0);
    return nn_gemm_fp8(&p, 1, 0, OC, C, N, dout, OC, inp, C, ep_weight, &c, ws, path, nt);
}

/* ---------------------------------------------------------------- the same ops on 4-bit products */
collage_status NN_BF16_NAME(nn_matmul_forward_fp4)(uint16_t *out, const uint16_t *inp, const uint16_t *w,
                                                   const uint16_t *bias, const uint16_t *res, int N, int C, int OC,
                                                   const nn_fp4_layer *L, nn_fp4_ws *ws, nn_bf16_path path, int nt) {
    ep_ctx c = {.out = out, .ldo = OC, .bias = bias, .res = res};
    const nn_fp4_spec p = nn_fp4_layer_spec(L, 0);
    return nn_gemm_fp4_w(&p, 0, 1, N, OC, C, inp, C, w, C, ep_forward, &c, ws, L->wc, 0, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_logits_fp4)(float *out, const uint16_t *inp, const uint16_t *w, int N, int C,
                                                  int OC, const nn_fp4_layer *L, nn_fp4_ws *ws, nn_bf16_path path,
                                                  int nt) {
    ep_ctx c = {.outf = out, .ldo = OC};
    const nn_fp4_spec p = nn_fp4_layer_spec(L, 0);
    return nn_gemm_fp4_w(&p, 0, 1, N, OC, C, inp, C, w, C, ep_round_f32, &c, ws, L->wc, 0, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_backward_input_fp4)(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N,
                                                          int C, int OC, const nn_fp4_layer *L, nn_fp4_ws *ws,
                                                          nn_bf16_path path, int nt) {
    ep_ctx c = {.out = dinp, .ldo = C};
    const nn_fp4_spec p = nn_fp4_layer_spec(L, 1);
    return nn_gemm_fp4_w(&p, 0, 0, N, C, OC, dout, OC, w, C, ep_forward, &c, ws, L->wc, 1, path, nt);
}

collage_status NN_BF16_NAME(nn_matmul_backward_weight_fp4)(uint16_t *dw, int add, const uint16_t *dout,
                                                           const uint16_t *inp, int N, int C, int OC, const int *tok,
                                                           const uint16_t *dtok, int ntok, const nn_fp4_layer *L,
                                                           nn_fp4_ws *ws, nn_bf16_path path, int nt) {
    ep_ctx c = {.out = dw, .ldo = C, .add = add, .tok = tok, .dtok = dtok, .ntok = ntok};
    const nn_fp4_spec p = nn_fp4_layer_spec(L, 2);
    return nn_gemm_fp4(&p, 1, 0, OC, C, N, dout, OC, inp, C, ep_weight, &c, ws, path, nt);
}

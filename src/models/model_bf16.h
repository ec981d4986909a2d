/* model_bf16.h — what the families' bf16 graphs share (gpt2_bf16.c, bert_bf16.c): the op of this build,
 * the accessors of a plan's slabs (its p, pl, gs, a, al arrays), and the scratch a transformer step's
 * products need. Private; included after the family's plan header and internal.h. */
#ifndef COLLAGE_MODEL_BF16_H
#define COLLAGE_MODEL_BF16_H

#include "graph_model.h"
#include "nn.h"
#include "nn_bert.h" /* the encoder's two products (mb_logits_bias, mb_backward_input_res) */

#define OPB(op) NN_BF16_NAME(nn_##op##_bf16) /* the bf16 op of this build (baseline or AVX-512) */
#define W(k, l) (w + P->p[k] + (size_t)(l) * P->pl[k])    /* parameter tensor k of layer l (bf16) */
#define G(k, l) (g16 + P->p[k] + (size_t)(l) * P->pl[k])  /* its gradient, for the products' matrices */
#define GS(k, l) (gs + P->gs[k] + (size_t)(l) * P->pl[k]) /* the float sum of the others' gradients */
#define H(k, l) (a16 + P->a[k] + (size_t)(l) * P->al[k])  /* bf16 activation k of layer l */
#define F(k, l) (a32 + P->a[k] + (size_t)(l) * P->al[k])  /* float activation */

/* Scratch for every product of a step on N tokens of a transformer of width C (MLP 4C) and output
 * width Vp: (M, N, K) of nn_gemm_bf16, forward, activation gradients, weight gradients. 0, or -1. */
static inline int model_bf16_reserve(nn_ws *ws, int N, int C, int Vp, int nt, nn_bf16_path path) {
    const int shapes[][3] = {
        {N, 3 * C, C}, {N, C, C}, {N, 4 * C, C}, {N, C, 4 * C}, {N, Vp, C},
        {N, C, Vp}, {N, C, 3 * C},
        {Vp, C, N}, {C, 4 * C, N}, {4 * C, C, N}, {C, C, N}, {3 * C, C, N}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (nn_gemm_bf16_reserve(ws, shapes[i][0], shapes[i][1], shapes[i][2], nt, path)) return -1;
    return 0;
}

/* ---------------------------------------------------------------- the products, bf16, fp8 or fp4 */
/* The four products of linear layer k (0 … the family's fp8_layers − 1) on the environment's products:
 * the bf16 ops; with e->fp8 the fp8 ops of nn.h (numerics.md §13) on the layer's three delayed slots
 * 3k, 3k + 1, 3k + 2; with e->fp4 the 4-bit ops (numerics.md §15) with the layer's SR key
 * collage_rand_key(key, k), except the last bf16_last layers, which keep the bf16 ops. An 8- or 4-bit op's
 * status other than COLLAGE_OK is kept in e->fp8->st or e->fp4->st (the first one of the call: the model's
 * call fails with it). */
static inline nn_fp8_layer mb_layer(const gm_env *e, int k) {
    return (nn_fp8_layer){.recipe = e->fp8->recipe, .e4m3_all = e->fp8->e4m3_all, .scaling = e->fp8->scaling,
                          .slot = 3 * k, .wc = k < e->fp8->nwc ? &e->fp8->wc[k] : NULL};
}
static inline nn_fp4_layer mb_layer4(const gm_env *e, int k) {
    return (nn_fp4_layer){.recipe = e->fp4->recipe, .hadamard = e->fp4->hadamard, .grad_rn = e->fp4->grad_rn,
                          .signs = e->fp4->signs,
                          .key = collage_rand_key(e->fp4->key, (uint64_t)k),
                          .wc = k < e->fp4->nwc ? &e->fp4->wc[k] : NULL};
}
/* Which products layer k runs: 0 bf16, 8 fp8, 4 fp4. */
static inline int mb_kind(const gm_env *e, int k) {
    if (e->fp4) return k < e->fp4->layers - e->fp4->bf16_last ? 4 : 0;
    return e->fp8 ? 8 : 0;
}
static inline void mb_note(const gm_env *e, collage_status st) {
    collage_status *keep = e->fp4 ? &e->fp4->st : &e->fp8->st;
    if (st != COLLAGE_OK && *keep == COLLAGE_OK) *keep = st;
}
static inline void mb_forward(const gm_env *e, int k, uint16_t *out, const uint16_t *inp, const uint16_t *w,
                              const uint16_t *bias, const uint16_t *res, int N, int C, int OC) {
    const int kind = mb_kind(e, k);
    if (!kind) {
        OPB(matmul_forward)(out, inp, w, bias, res, N, C, OC, e->ws, e->path, e->nt);
    } else if (kind == 4) {
        const nn_fp4_layer L = mb_layer4(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_forward_fp4)(out, inp, w, bias, res, N, C, OC, &L, &e->fp4->ws, e->path, e->nt));
    } else {
        const nn_fp8_layer L = mb_layer(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_forward_fp8)(out, inp, w, bias, res, N, C, OC, &L, &e->fp8->ws, e->path, e->nt));
    }
}
static inline void mb_logits(const gm_env *e, int k, float *out, const uint16_t *inp, const uint16_t *w, int N, int C,
                             int OC) {
    const int kind = mb_kind(e, k);
    if (!kind) {
        OPB(matmul_logits)(out, inp, w, N, C, OC, e->ws, e->path, e->nt);
    } else if (kind == 4) {
        const nn_fp4_layer L = mb_layer4(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_logits_fp4)(out, inp, w, N, C, OC, &L, &e->fp4->ws, e->path, e->nt));
    } else {
        const nn_fp8_layer L = mb_layer(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_logits_fp8)(out, inp, w, N, C, OC, &L, &e->fp8->ws, e->path, e->nt));
    }
}
static inline void mb_backward_input(const gm_env *e, int k, uint16_t *dinp, const uint16_t *dout, const uint16_t *w,
                                     int N, int C, int OC) {
    const int kind = mb_kind(e, k);
    if (!kind) {
        OPB(matmul_backward_input)(dinp, dout, w, N, C, OC, e->ws, e->path, e->nt);
    } else if (kind == 4) {
        const nn_fp4_layer L = mb_layer4(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_backward_input_fp4)(dinp, dout, w, N, C, OC, &L, &e->fp4->ws, e->path, e->nt));
    } else {
        const nn_fp8_layer L = mb_layer(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_backward_input_fp8)(dinp, dout, w, N, C, OC, &L, &e->fp8->ws, e->path, e->nt));
    }
}
static inline void mb_backward_weight(const gm_env *e, int k, uint16_t *dw, int add, const uint16_t *dout,
                                      const uint16_t *inp, int N, int C, int OC, const int *tok,
                                      const uint16_t *dtok, int ntok) {
    const int kind = mb_kind(e, k);
    if (!kind) {
        OPB(matmul_backward_weight)(dw, add, dout, inp, N, C, OC, tok, dtok, ntok, e->ws, e->path, e->nt);
    } else if (kind == 4) {
        const nn_fp4_layer L = mb_layer4(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_backward_weight_fp4)(dw, add, dout, inp, N, C, OC, tok, dtok, ntok, &L,
                                                               &e->fp4->ws, e->path, e->nt));
    } else {
        const nn_fp8_layer L = mb_layer(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_backward_weight_fp8)(dw, add, dout, inp, N, C, OC, tok, dtok, ntok, &L,
                                                               &e->fp8->ws, e->path, e->nt));
    }
}
/* The encoder's two products (nn_bert.h), bf16, fp8 or fp4, as the four above. */
static inline void mb_logits_bias(const gm_env *e, int k, float *out, const uint16_t *inp, const uint16_t *w,
                                  const uint16_t *bias, int N, int C, int OC) {
    const int kind = mb_kind(e, k);
    if (!kind) {
        OPB(matmul_logits_bias)(out, inp, w, bias, N, C, OC, e->ws, e->path, e->nt);
    } else if (kind == 4) {
        const nn_fp4_layer L = mb_layer4(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_logits_bias_fp4)(out, inp, w, bias, N, C, OC, &L, &e->fp4->ws, e->path, e->nt));
    } else {
        const nn_fp8_layer L = mb_layer(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_logits_bias_fp8)(out, inp, w, bias, N, C, OC, &L, &e->fp8->ws, e->path, e->nt));
    }
}
static inline void mb_backward_input_res(const gm_env *e, int k, uint16_t *dinp, const uint16_t *dout,
                                         const uint16_t *w, int N, int C, int OC) {
    const int kind = mb_kind(e, k);
    if (!kind) {
        OPB(matmul_backward_input_res)(dinp, dout, w, N, C, OC, e->ws, e->path, e->nt);
    } else if (kind == 4) {
        const nn_fp4_layer L = mb_layer4(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_backward_input_res_fp4)(dinp, dout, w, N, C, OC, &L, &e->fp4->ws, e->path,
                                                                  e->nt));
    } else {
        const nn_fp8_layer L = mb_layer(e, k);
        mb_note(e, NN_BF16_NAME(nn_matmul_backward_input_res_fp8)(dinp, dout, w, N, C, OC, &L, &e->fp8->ws, e->path,
                                                                  e->nt));
    }
}
/* gm_graph.fp8_layers of a family numbering its linear layers 4·l + k (k < 4, blk[k]) in L blocks, then
 * nh more (head[j], number 4·L + j): their number, and with in and out non-NULL, each one's inputs and
 * outputs ({in, out} in blk and head). */
static inline int mb_fp8_layers(int L, const int blk[4][2], int nh, const int head[][2], int *in, int *out) {
    const int n = 4 * L + nh;
    for (int k = 0; in && out && k < n; k++) {
        const int *io = k < 4 * L ? blk[k % 4] : head[k - 4 * L];
        in[k] = io[0], out[k] = io[1];
    }
    return n;
}
/* Grows the fp8 or fp4 scratch for a product (N, C) → (N, OC); 0 with neither; -1 when out of memory. */
static inline int mb_fp8_reserve(const gm_env *e, int N, int C, int OC) {
    if (e->fp4) {
        const nn_fp4_layer L4 = {.recipe = e->fp4->recipe, .hadamard = e->fp4->hadamard};
        return nn_fp4_layer_reserve(&e->fp4->ws, &L4, N, C, OC, e->nt, e->path);
    }
    if (!e->fp8) return 0;
    const nn_fp8_layer L = mb_layer(e, 0);
    return nn_fp8_layer_reserve(&e->fp8->ws, &L, N, C, OC, e->nt, e->path);
}

#endif

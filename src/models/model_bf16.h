/* model_bf16.h — what the families' bf16 graphs share (gpt2_bf16.c, bert_bf16.c): the op of this build,
 * the accessors of a plan's slabs (its p, pl, gs, a, al arrays), and the scratch a transformer step's
 * products need. Private; included after the family's plan header and internal.h. */
#ifndef COLLAGE_MODEL_BF16_H
#define COLLAGE_MODEL_BF16_H

#include "nn.h"

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

#endif

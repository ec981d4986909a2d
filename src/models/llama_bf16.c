/* llama_bf16.c — LLaMA's forward and backward on bf16 storage: bf16 weights, activations, activation
 * gradients and matrix gradients; products with bf16 operands and fp32 sums (src/nn/matmul_bf16.c);
 * RMSNorm statistics, the softmax of the loss, the losses and the sums of the norms' gradients (and of
 * an untied embedding's) in float. The same ops in the same order as llama_graph.inc in bf16 mode, so
 * every value is rounded where the float model in bf16 mode rounds it (docs/numerics.md §10). */
#include "internal.h"
#include "llama_plan.h"
#include "model_bf16.h" /* OPB, W, G, GS and the products, bf16 or fp8 */
#define A16(k, l) (a16 + P->a[k] + (size_t)(l) * P->al[k]) /* bf16 activation k of layer l */
#define A32(k, l) (a32 + P->a[k] + (size_t)(l) * P->al[k]) /* float activation */

/* Every product of a step on N tokens: (M, N, K) of nn_gemm_bf16. */
int NN_BF16_NAME(llama_bf16_reserve)(const void *plan, int N, const gm_env *e) {
    const llama_plan *P = plan;
    const int C = P->C, V = P->Vp, H2 = 2 * P->H, H = P->H, Q = P->QKV;
    const int shapes[][3] = {
        {N, Q, C}, {N, C, C}, {N, H2, C}, {N, C, H}, {N, V, C},        /* forward */
        {N, C, V}, {N, H, C}, {N, C, H2}, {N, C, Q},                   /* activation gradients */
        {V, C, N}, {C, H, N}, {H2, C, N}, {C, C, N}, {Q, C, N}};       /* weight gradients */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (nn_gemm_bf16_reserve(e->ws, shapes[i][0], shapes[i][1], shapes[i][2], e->nt, e->path)) return -1;
    if (mb_fp8_reserve(e, N, C, Q) || mb_fp8_reserve(e, N, C, C) || mb_fp8_reserve(e, N, C, H2) ||
        mb_fp8_reserve(e, N, H, C) || mb_fp8_reserve(e, N, C, V))
        return -1;
    return 0;
}

/* The linear layers in the fp8 build's numbering: four per block, then the logits'. */
enum { LIN_QKV, LIN_WO, LIN_W13, LIN_W2, LIN_PER_BLOCK };
#define LIN(l, k) ((l) * LIN_PER_BLOCK + (k))
#define LIN_HEAD(P) ((P)->L * LIN_PER_BLOCK)
int NN_BF16_NAME(llama_fp8_layers)(const void *plan, int *in, int *out) {
    const llama_plan *P = plan;
    const int C = P->C, H = P->H;
    const int blk[LIN_PER_BLOCK][2] = {[LIN_QKV] = {C, P->QKV}, [LIN_WO] = {C, C}, [LIN_W13] = {C, 2 * H},
                                       [LIN_W2] = {H, C}};
    const int head[1][2] = {{C, P->Vp}};
    return mb_fp8_layers(P->L, blk, 1, head, in, out);
}

static void trunk(const llama_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, int B, int T,
                  const gm_env *e) {
    const int C = P->C, N = B * T, H = P->H, Q = P->QKV, nt = e->nt;
    OPB(embed_forward)(A16(LA_ENC, 0), tok, W(LT_EMB, 0), N, C, nt);
    for (int l = 0; l < P->L; l++) {
        const uint16_t *res = l ? A16(LA_RES2, l - 1) : A16(LA_ENC, 0);
        OPB(rmsnorm_forward)(A16(LA_LN1, l), A32(LA_RSTD1, l), res, W(LT_ATTN_NORM, l), N, C, P->eps32, 1, nt);
        mb_forward(e, LIN(l, LIN_QKV), A16(LA_QKV, l), A16(LA_LN1, l), W(LT_WQKV, l), NULL, NULL, N, C, Q);
        OPB(rope_forward)(A16(LA_QKV, l), P->rope32, B, T, Q, P->NH + P->NKV, P->hs, 1, nt);
        OPB(gqa_forward)(A16(LA_ATTY, l), A16(LA_ATT, l), A32(LA_SCR, 0), A16(LA_QKV, l), B, T, P->NH, P->NKV, P->hs,
                         1, nt);
        mb_forward(e, LIN(l, LIN_WO), A16(LA_RES1, l), A16(LA_ATTY, l), W(LT_WO, l), NULL, res, N, C, C);
        OPB(rmsnorm_forward)(A16(LA_LN2, l), A32(LA_RSTD2, l), A16(LA_RES1, l), W(LT_FFN_NORM, l), N, C, P->eps32, 1,
                             nt);
        mb_forward(e, LIN(l, LIN_W13), A16(LA_H13, l), A16(LA_LN2, l), W(LT_W13, l), NULL, NULL, N, C, 2 * H);
        OPB(swiglu_forward)(A16(LA_HG, l), A16(LA_H13, l), N, H, 1, nt);
        mb_forward(e, LIN(l, LIN_W2), A16(LA_RES2, l), A16(LA_HG, l), W(LT_W2, l), NULL, A16(LA_RES1, l), N, H, C);
    }
    OPB(rmsnorm_forward)(A16(LA_LNF, 0), A32(LA_RSTDF, 0), A16(LA_RES2, P->L - 1), W(LT_NORM, 0), N, C, P->eps32, 1,
                         nt);
}

double NN_BF16_NAME(llama_forward_bf16)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok,
                                        const int *tgt, int B, int T, const gm_env *e) {
    const llama_plan *P = plan;
    const int N = B * T;
    trunk(P, w, a16, a32, tok, B, T, e);
    mb_logits(e, LIN_HEAD(P), A32(LA_LOGITS, 0), A16(LA_LNF, 0), W(LT_OUT, 0), N, P->C, P->Vp);
    if (!tgt) return (double)NAN;
    return OPB(crossentropy_forward)(A32(LA_LOGITS, 0), A32(LA_LOSSES, 0), tgt, N, P->V, P->Vp, e->nt);
}

/* One bias-free linear layer's backward: dinp = rnd(dout·w) and the weight's gradient. */
static void linear_backward(int k, uint16_t *dinp, uint16_t *dw, int add, const uint16_t *dout, const uint16_t *inp,
                            const uint16_t *wt, int N, int C, int OC, const gm_env *e) {
    mb_backward_input(e, k, dinp, dout, wt, N, C, OC);
    mb_backward_weight(e, k, dw, add, dout, inp, N, C, OC, NULL, NULL, 0);
}

/* The float sums into the bf16 gradient slab: g = rnd(s), or rnd(g + s) with add. */
static void round_sums(const llama_plan *P, uint16_t *g16, const float *gs, int add) {
    for (int k = 0; k < LT_COUNT; k++) {
        if (!P->n[k] || llama_product_weight(P, k)) continue;
        uint16_t *g = g16 + P->p[k];
        const float *s = gs + P->gs[k];
        for (size_t j = 0; j < P->n[k]; j++) g[j] = bf16_rn_bits(add ? bf16_f32(g[j]) + s[j] : s[j]);
    }
}

/* One block's backward (layer l): dres is d res2 on entry, d res on return. */
static void block_backward(const llama_plan *P, int l, const uint16_t *w, uint16_t *g16, float *gs, int add,
                           uint16_t *a16, float *a32, int B, int T, const gm_env *e) {
    const int C = P->C, N = B * T, H = P->H, Q = P->QKV, nt = e->nt;
    uint16_t *dres = A16(LA_DRES, 0), *dln = A16(LA_DLN, 0), *datty = A16(LA_DATTY, 0), *dqkv = A16(LA_DQKV, 0);
    uint16_t *dhg = A16(LA_DHG, 0), *dh13 = A16(LA_DH13, 0);
    const uint16_t *res = l ? A16(LA_RES2, l - 1) : A16(LA_ENC, 0);
    linear_backward(LIN(l, LIN_W2), dhg, G(LT_W2, l), add, dres, A16(LA_HG, l), W(LT_W2, l), N, H, C, e);
    OPB(swiglu_backward)(dh13, dhg, A16(LA_H13, l), N, H, 1, nt);
    linear_backward(LIN(l, LIN_W13), dln, G(LT_W13, l), add, dh13, A16(LA_LN2, l), W(LT_W13, l), N, C, 2 * H, e);
    OPB(rmsnorm_backward)(dres, GS(LT_FFN_NORM, l), dln, A16(LA_RES1, l), W(LT_FFN_NORM, l), A32(LA_RSTD2, l), N, C, 1,
                          1, nt);
    linear_backward(LIN(l, LIN_WO), datty, G(LT_WO, l), add, dres, A16(LA_ATTY, l), W(LT_WO, l), N, C, C, e);
    OPB(gqa_backward)(dqkv, A32(LA_SCR, 0), datty, A16(LA_QKV, l), A16(LA_ATT, l), B, T, P->NH, P->NKV, P->hs, 1, nt);
    OPB(rope_backward)(dqkv, P->rope32, B, T, Q, P->NH + P->NKV, P->hs, 1, nt);
    linear_backward(LIN(l, LIN_QKV), dln, G(LT_WQKV, l), add, dqkv, A16(LA_LN1, l), W(LT_WQKV, l), N, C, Q, e);
    OPB(rmsnorm_backward)(dres, GS(LT_ATTN_NORM, l), dln, res, W(LT_ATTN_NORM, l), A32(LA_RSTD1, l), N, C, 1, 1, nt);
}

void NN_BF16_NAME(llama_backward_bf16)(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add,
                                       uint16_t *a16, float *a32, const int *tok, const int *tgt, int B, int T,
                                       const gm_env *e) {
    const llama_plan *P = plan;
    const int C = P->C, N = B * T, nt = e->nt;
    uint16_t *dres = A16(LA_DRES, 0), *dln = A16(LA_DLN, 0), *dlogits = A16(LA_DLOGITS, 0);
    memset(gs, 0, P->ngs * sizeof *gs);
    OPB(crossentropy_backward)(dlogits, A32(LA_LOGITS, 0), tgt, N, P->V, P->Vp, 1.0f / (float)N, 1, nt);
    mb_backward_input(e, LIN_HEAD(P), dln, dlogits, W(LT_OUT, 0), N, C, P->Vp);
    OPB(rmsnorm_backward)(dres, GS(LT_NORM, 0), dln, A16(LA_RES2, P->L - 1), W(LT_NORM, 0), A32(LA_RSTDF, 0), N, C, 0,
                          1, nt);
    for (int l = P->L - 1; l >= 0; l--) block_backward(P, l, w, g16, gs, add, a16, a32, B, T, e);
    if (P->tied) /* the logits' product and the embedding's rows, summed in float and rounded once */
        mb_backward_weight(e, LIN_HEAD(P), G(LT_EMB, 0), add, dlogits, A16(LA_LNF, 0), N, C, P->Vp, tok, dres, N);
    else {
        mb_backward_weight(e, LIN_HEAD(P), G(LT_OUT, 0), add, dlogits, A16(LA_LNF, 0), N, C, P->Vp, NULL, NULL, 0);
        OPB(embed_backward)(GS(LT_EMB, 0), dres, tok, N, C, nt);
    }
    round_sums(P, g16, gs, add);
}

void NN_BF16_NAME(llama_last_logits_bf16)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32,
                                          const int *tok, int T, const gm_env *e) {
    const llama_plan *P = plan;
    trunk(P, w, a16, a32, tok, 1, T, e);
    mb_logits(e, LIN_HEAD(P), A32(LA_LOGITS, 0), A16(LA_LNF, 0) + (size_t)(T - 1) * P->C, W(LT_OUT, 0), 1, P->C,
              P->Vp);
}

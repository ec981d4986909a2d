/* gpt2_bf16.c — GPT-2's forward and backward on bf16 storage: bf16 weights, activations, activation
 * gradients and matrix gradients; products with bf16 operands and fp32 sums (src/nn/matmul_bf16.c);
 * LayerNorm statistics, the softmax of the loss, the losses and the sums of the bias and norm gradients
 * in float. The same ops in the same order as gpt2_graph.inc in bf16 mode, so every value is rounded
 * where the float model in bf16 mode rounds it (docs/numerics.md §10). */
#include "internal.h"
#include "gpt2_plan.h"
#include "model_bf16.h"

/* Every product of a step on N tokens. */
int NN_BF16_NAME(gpt_bf16_reserve)(const void *plan, int N, const gm_env *e) {
    const gpt_plan *P = plan;
    const int C = P->C;
    if (mb_fp8_reserve(e, N, C, 3 * C) || mb_fp8_reserve(e, N, C, C) || mb_fp8_reserve(e, N, C, 4 * C) ||
        mb_fp8_reserve(e, N, 4 * C, C) || mb_fp8_reserve(e, N, C, P->Vp))
        return -1;
    return model_bf16_reserve(e->ws, N, C, P->Vp, e->nt, e->path);
}

/* The linear layers in the fp8 build's numbering: four per block, then the logits' (tied to wte). */
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, LIN_PER_BLOCK };
#define LIN(l, k) ((l) * LIN_PER_BLOCK + (k))
#define LIN_HEAD(P) ((P)->L * LIN_PER_BLOCK)
int NN_BF16_NAME(gpt_fp8_layers)(const void *plan, int *in, int *out) {
    const gpt_plan *P = plan;
    const int C = P->C;
    const int blk[LIN_PER_BLOCK][2] = {[LIN_QKV] = {C, 3 * C}, [LIN_ATTPROJ] = {C, C}, [LIN_FC] = {C, 4 * C},
                                       [LIN_FCPROJ] = {4 * C, C}};
    const int head[1][2] = {{C, P->Vp}};
    return mb_fp8_layers(P->L, blk, 1, head, in, out);
}

static void trunk(const gpt_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, int B, int T,
                  const gm_env *e) {
    const int C = P->C, N = B * T, nt = e->nt;
    OPB(encoder_forward)(H(A_ENC, 0), tok, W(GPT2_WTE, 0), W(GPT2_WPE, 0), B, T, C, 1, nt);
    for (int l = 0; l < P->L; l++) {
        const uint16_t *res = l ? H(A_RES3, l - 1) : H(A_ENC, 0);
        OPB(layernorm_forward)(H(A_LN1, l), F(A_LN1_MEAN, l), F(A_LN1_RSTD, l), res, W(GPT2_LN1W, l),
                                  W(GPT2_LN1B, l), N, C, 1, nt);
        mb_forward(e, LIN(l, LIN_QKV), H(A_QKV, l), H(A_LN1, l), W(GPT2_QKVW, l), W(GPT2_QKVB, l), NULL, N, C,
                   3 * C);
        OPB(attention_forward)(H(A_ATTY, l), H(A_ATT, l), F(A_SCR, 0), H(A_QKV, l), B, T, C, P->NH, 1, nt);
        mb_forward(e, LIN(l, LIN_ATTPROJ), H(A_RES2, l), H(A_ATTY, l), W(GPT2_ATTPROJW, l), W(GPT2_ATTPROJB, l),
                   res, N, C, C);
        OPB(layernorm_forward)(H(A_LN2, l), F(A_LN2_MEAN, l), F(A_LN2_RSTD, l), H(A_RES2, l),
                                  W(GPT2_LN2W, l), W(GPT2_LN2B, l), N, C, 1, nt);
        mb_forward(e, LIN(l, LIN_FC), H(A_FCH, l), H(A_LN2, l), W(GPT2_FCW, l), W(GPT2_FCB, l), NULL, N, C, 4 * C);
        OPB(gelu_forward)(H(A_FCH_GELU, l), H(A_FCH, l), (size_t)N * 4 * C, 1, nt);
        mb_forward(e, LIN(l, LIN_FCPROJ), H(A_RES3, l), H(A_FCH_GELU, l), W(GPT2_FCPROJW, l), W(GPT2_FCPROJB, l),
                   H(A_RES2, l), N, 4 * C, C);
    }
    OPB(layernorm_forward)(H(A_LNF, 0), F(A_LNF_MEAN, 0), F(A_LNF_RSTD, 0), H(A_RES3, P->L - 1),
                              W(GPT2_LNFW, 0), W(GPT2_LNFB, 0), N, C, 1, nt);
}

double NN_BF16_NAME(gpt_forward_bf16)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok,
                                      const int *tgt, int B, int T, const gm_env *e) {
    const gpt_plan *P = plan;
    const int N = B * T;
    trunk(P, w, a16, a32, tok, B, T, e);
    mb_logits(e, LIN_HEAD(P), F(A_LOGITS, 0), H(A_LNF, 0), W(GPT2_WTE, 0), N, P->C, P->Vp);
    if (!tgt) return (double)NAN;
    return OPB(crossentropy_forward)(F(A_LOGITS, 0), F(A_LOSSES, 0), tgt, N, P->V, P->Vp, e->nt);
}

/* One linear layer's backward: dinp = rnd(dout·w), the weight's gradient, the bias's sum. */
static void linear_backward(int k, uint16_t *dinp, uint16_t *dw, int add, float *db, const uint16_t *dout,
                            const uint16_t *inp, const uint16_t *wt, int N, int C, int OC, const gm_env *e) {
    mb_backward_input(e, k, dinp, dout, wt, N, C, OC);
    mb_backward_weight(e, k, dw, add, dout, inp, N, C, OC, NULL, NULL, 0);
    OPB(bias_backward)(db, dout, N, OC, e->nt);
}

/* The float sums into the bf16 gradient slab: g = rnd(s), or rnd(g + s) with add. */
static void round_sums(const gpt_plan *P, uint16_t *g16, const float *gs, int add) {
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        if (gpt_product_weight(k)) continue;
        const size_t n = k + 1 < GPT2_NTENSORS ? P->p[k + 1] - P->p[k] : P->nparams - P->p[k];
        uint16_t *g = g16 + P->p[k];
        const float *s = gs + P->gs[k];
        for (size_t i = 0; i < n; i++) g[i] = bf16_rn_bits(add ? bf16_f32(g[i]) + s[i] : s[i]);
    }
}

void NN_BF16_NAME(gpt_backward_bf16)(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add,
                                     uint16_t *a16, float *a32, const int *tok, const int *tgt, int B, int T,
                                     const gm_env *e) {
    const gpt_plan *P = plan;
    const int C = P->C, N = B * T, L = P->L, nt = e->nt;
    uint16_t *dres = H(A_DRES, 0), *dln = H(A_DLN, 0), *datty = H(A_DATTY, 0), *dqkv = H(A_DQKV, 0);
    uint16_t *dfch = H(A_DFCH, 0), *dlogits = H(A_DLOGITS, 0);
    memset(gs, 0, P->ngs * sizeof *gs);
    OPB(crossentropy_backward)(dlogits, F(A_LOGITS, 0), tgt, N, P->V, P->Vp, 1.0f / (float)N, 1, nt);
    mb_backward_input(e, LIN_HEAD(P), dln, dlogits, W(GPT2_WTE, 0), N, C, P->Vp);
    OPB(layernorm_backward)(dres, GS(GPT2_LNFW, 0), GS(GPT2_LNFB, 0), dln, H(A_RES3, L - 1),
                               W(GPT2_LNFW, 0), F(A_LNF_MEAN, 0), F(A_LNF_RSTD, 0), N, C, 0, 1, nt);
    for (int l = L - 1; l >= 0; l--) {
        const uint16_t *res = l ? H(A_RES3, l - 1) : H(A_ENC, 0);
        linear_backward(LIN(l, LIN_FCPROJ), dfch, G(GPT2_FCPROJW, l), add, GS(GPT2_FCPROJB, l), dres, H(A_FCH_GELU, l),
                        W(GPT2_FCPROJW, l), N, 4 * C, C, e);
        OPB(gelu_backward)(dfch, H(A_FCH, l), (size_t)N * 4 * C, 1, nt);
        linear_backward(LIN(l, LIN_FC), dln, G(GPT2_FCW, l), add, GS(GPT2_FCB, l), dfch, H(A_LN2, l),
                        W(GPT2_FCW, l), N, C, 4 * C, e);
        OPB(layernorm_backward)(dres, GS(GPT2_LN2W, l), GS(GPT2_LN2B, l), dln, H(A_RES2, l),
                                   W(GPT2_LN2W, l), F(A_LN2_MEAN, l), F(A_LN2_RSTD, l), N, C, 1, 1, nt);
        linear_backward(LIN(l, LIN_ATTPROJ), datty, G(GPT2_ATTPROJW, l), add, GS(GPT2_ATTPROJB, l), dres, H(A_ATTY, l),
                        W(GPT2_ATTPROJW, l), N, C, C, e);
        OPB(attention_backward)(dqkv, F(A_SCR, 0), datty, H(A_QKV, l), H(A_ATT, l), B, T, C, P->NH, 1, nt);
        linear_backward(LIN(l, LIN_QKV), dln, G(GPT2_QKVW, l), add, GS(GPT2_QKVB, l), dqkv, H(A_LN1, l),
                        W(GPT2_QKVW, l), N, C, 3 * C, e);
        OPB(layernorm_backward)(dres, GS(GPT2_LN1W, l), GS(GPT2_LN1B, l), dln, res,
                                   W(GPT2_LN1W, l), F(A_LN1_MEAN, l), F(A_LN1_RSTD, l), N, C, 1, 1, nt);
    }
    OPB(encoder_backward)(NULL, GS(GPT2_WPE, 0), dres, tok, B, T, C, nt);
    /* wte: the logits' product and the embedding's rows, summed in float and rounded once */
    mb_backward_weight(e, LIN_HEAD(P), G(GPT2_WTE, 0), add, dlogits, H(A_LNF, 0), N, C, P->Vp, tok, dres, N);
    round_sums(P, g16, gs, add);
}

void NN_BF16_NAME(gpt_last_logits_bf16)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32,
                                        const int *tok, int T, const gm_env *e) {
    const gpt_plan *P = plan;
    trunk(P, w, a16, a32, tok, 1, T, e);
    mb_logits(e, LIN_HEAD(P), F(A_LOGITS, 0), H(A_LNF, 0) + (size_t)(T - 1) * P->C, W(GPT2_WTE, 0), 1, P->C,
              P->Vp);
}

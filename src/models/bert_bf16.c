/* bert_bf16.c — the BERT family's forward and backward on bf16 storage: bf16 weights, activations,
 * activation gradients and matrix gradients; products with bf16 operands and fp32 sums (src/nn/matmul_bf16.c,
 * matmul_bert_bf16.c), or with gm_env.fp8 on fp8 operands (numerics.md §13); LayerNorm statistics, the
 * softmax of the loss, the losses and the sums of the bias, norm, position and token-type gradients in
 * float. The same ops in the same order as bert_graph.inc in bf16 mode, so every value is rounded where
 * the float model in bf16 mode rounds it (docs/numerics.md §10). */
#include "internal.h"
#include "bert_plan.h"
#include "model_bf16.h"

/* Every product of a step on N tokens (the head's on at most N rows). */
int NN_BF16_NAME(bert_bf16_reserve)(const void *plan, int N, const gm_env *e) {
    const bert_plan *P = plan;
    const int C = P->C;
    if (mb_fp8_reserve(e, N, C, 3 * C) || mb_fp8_reserve(e, N, C, C) || mb_fp8_reserve(e, N, C, 4 * C) ||
        mb_fp8_reserve(e, N, 4 * C, C) || mb_fp8_reserve(e, N, C, P->Vp))
        return -1;
    return model_bf16_reserve(e->ws, N, C, P->Vp, e->nt, e->path);
}

/* The linear layers in the fp8 build's numbering: four per block, then the head's dense layer, then the
 * logits' (tied to wte, with the output bias). */
enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, LIN_PER_BLOCK };
#define LIN(l, k) ((l) * LIN_PER_BLOCK + (k))
#define LIN_DENSE(P) ((P)->L * LIN_PER_BLOCK)
#define LIN_LOGITS(P) ((P)->L * LIN_PER_BLOCK + 1)
int NN_BF16_NAME(bert_fp8_layers)(const void *plan, int *in, int *out) {
    const bert_plan *P = plan;
    const int C = P->C;
    const int blk[LIN_PER_BLOCK][2] = {[LIN_QKV] = {C, 3 * C}, [LIN_ATTPROJ] = {C, C}, [LIN_FC] = {C, 4 * C},
                                       [LIN_FCPROJ] = {4 * C, C}};
    const int head[2][2] = {{C, C}, {C, P->Vp}}; /* LIN_DENSE, LIN_LOGITS */
    return mb_fp8_layers(P->L, blk, 2, head, in, out);
}

static void trunk(const bert_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const gm_io *io,
                  const gm_env *e) {
    const int C = P->C, B = io->B, T = io->T, N = B * T, nt = e->nt;
    OPB(embed3_forward)(H(BA_EMB, 0), io->tok, W(BERT_WTE, 0), W(BERT_WPE, 0), W(BERT_WTT, 0), B, T, C, 1, nt);
    OPB(layernorm_forward)(H(BA_X0, 0), F(BA_X0_MEAN, 0), F(BA_X0_RSTD, 0), H(BA_EMB, 0), W(BERT_LNEW, 0),
                           W(BERT_LNEB, 0), N, C, 1, nt);
    for (int l = 0; l < P->L; l++) {
        const uint16_t *x = l ? H(BA_X, l - 1) : H(BA_X0, 0);
        mb_forward(e, LIN(l, LIN_QKV), H(BA_QKV, l), x, W(BERT_QKVW, l), W(BERT_QKVB, l), NULL, N, C, 3 * C);
        OPB(attention_bidir_forward)(H(BA_ATTY, l), H(BA_ATT, l), F(BA_SCR, 0), H(BA_QKV, l), io->len, B, T, C, P->NH,
                                     1, nt);
        mb_forward(e, LIN(l, LIN_ATTPROJ), H(BA_R1, l), H(BA_ATTY, l), W(BERT_ATTPROJW, l), W(BERT_ATTPROJB, l), x,
                   N, C, C);
        OPB(layernorm_forward)(H(BA_H, l), F(BA_H_MEAN, l), F(BA_H_RSTD, l), H(BA_R1, l), W(BERT_LN1W, l),
                               W(BERT_LN1B, l), N, C, 1, nt);
        mb_forward(e, LIN(l, LIN_FC), H(BA_FCH, l), H(BA_H, l), W(BERT_FCW, l), W(BERT_FCB, l), NULL, N, C, 4 * C);
        OPB(gelu_forward)(H(BA_FCH_GELU, l), H(BA_FCH, l), (size_t)N * 4 * C, 1, nt);
        mb_forward(e, LIN(l, LIN_FCPROJ), H(BA_R2, l), H(BA_FCH_GELU, l), W(BERT_FCPROJW, l), W(BERT_FCPROJB, l),
                   H(BA_H, l), N, 4 * C, C);
        OPB(layernorm_forward)(H(BA_X, l), F(BA_X_MEAN, l), F(BA_X_RSTD, l), H(BA_R2, l), W(BERT_LN2W, l),
                               W(BERT_LN2B, l), N, C, 1, nt);
    }
}

static void head(const bert_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const gm_io *io,
                 const gm_env *e) {
    const int C = P->C, K = io->K, nt = e->nt;
    OPB(gather_rows)(H(BA_HX, 0), H(BA_X, P->L - 1), io->rows, K, C, nt);
    mb_forward(e, LIN_DENSE(P), H(BA_HU, 0), H(BA_HX, 0), W(BERT_HEADW, 0), W(BERT_HEADB, 0), NULL, K, C, C);
    OPB(gelu_forward)(H(BA_HG, 0), H(BA_HU, 0), (size_t)K * C, 1, nt);
    OPB(layernorm_forward)(H(BA_HLN, 0), F(BA_HLN_MEAN, 0), F(BA_HLN_RSTD, 0), H(BA_HG, 0), W(BERT_HEADLNW, 0),
                           W(BERT_HEADLNB, 0), K, C, 1, nt);
    mb_logits_bias(e, LIN_LOGITS(P), F(BA_LOGITS, 0), H(BA_HLN, 0), W(BERT_WTE, 0), W(BERT_OUTB, 0), K, C, P->Vp);
}

double NN_BF16_NAME(bert_forward_bf16)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32,
                                       const gm_io *io, const gm_env *e) {
    const bert_plan *P = plan;
    trunk(P, w, a16, a32, io, e);
    if (io->K == 0) return 0;
    head(P, w, a16, a32, io, e);
    if (!io->tgt) return 0;
    OPB(crossentropy_forward)(F(BA_LOGITS, 0), F(BA_LOSSES, 0), io->tgt, io->K, P->V, P->Vp, e->nt);
    const float *losses = F(BA_LOSSES, 0);
    double sum = 0;
    for (int k = 0; k < io->K; k++) sum += (double)losses[k];
    return sum;
}

/* Linear layer k's backward: dinp = rnd(dout·w) (res: rnd(dinp + rnd(dout·w))), the weight's gradient,
 * the bias's sum. */
static void linear_backward(int k, uint16_t *dinp, int res, uint16_t *dw, int add, float *db, const uint16_t *dout,
                            const uint16_t *inp, const uint16_t *wt, int N, int C, int OC, const gm_env *e) {
    if (res) mb_backward_input_res(e, k, dinp, dout, wt, N, C, OC);
    else mb_backward_input(e, k, dinp, dout, wt, N, C, OC);
    mb_backward_weight(e, k, dw, add, dout, inp, N, C, OC, NULL, NULL, 0);
    OPB(bias_backward)(db, dout, N, OC, e->nt);
}

/* The float sums into the bf16 gradient slab: g = rnd(s), or rnd(g + s) with add. */
static void round_sums(const bert_plan *P, uint16_t *g16, const float *gs, int add) {
    for (int k = 0; k < BERT_NTENSORS; k++) {
        if (bert_product_weight(k)) continue;
        const size_t n = k + 1 < BERT_NTENSORS ? P->p[k + 1] - P->p[k] : P->nparams - P->p[k];
        uint16_t *g = g16 + P->p[k];
        const float *s = gs + P->gs[k];
        for (size_t i = 0; i < n; i++) g[i] = bf16_rn_bits(add ? bf16_f32(g[i]) + s[i] : s[i]);
    }
}

/* The head's backward into dh1 (K,C): the logits' gradient, the output bias's sum, the head's LayerNorm,
 * GELU and dense layer. The output matrix's gradient waits for the embedding's rows (the end). */
static void head_backward(const bert_plan *P, const uint16_t *w, uint16_t *g16, float *gs, int add, uint16_t *a16,
                          float *a32, const gm_io *io, const gm_env *e) {
    const int C = P->C, K = io->K, nt = e->nt;
    uint16_t *dlogits = H(BA_DLOGITS, 0), *dh1 = H(BA_DH1, 0), *dh2 = H(BA_DH2, 0);
    OPB(crossentropy_backward)(dlogits, F(BA_LOGITS, 0), io->tgt, K, P->V, P->Vp, (float)(1.0 / io->divisor), 1, nt);
    mb_backward_input(e, LIN_LOGITS(P), dh1, dlogits, W(BERT_WTE, 0), K, C, P->Vp);
    OPB(bias_backward)(GS(BERT_OUTB, 0), dlogits, K, P->Vp, nt);
    OPB(layernorm_backward)(dh2, GS(BERT_HEADLNW, 0), GS(BERT_HEADLNB, 0), dh1, H(BA_HG, 0), W(BERT_HEADLNW, 0),
                            F(BA_HLN_MEAN, 0), F(BA_HLN_RSTD, 0), K, C, 0, 1, nt);
    OPB(gelu_backward)(dh2, H(BA_HU, 0), (size_t)K * C, 1, nt);
    linear_backward(LIN_DENSE(P), dh1, 0, G(BERT_HEADW, 0), add, GS(BERT_HEADB, 0), dh2, H(BA_HX, 0), W(BERT_HEADW, 0),
                    K, C, C, e);
}

void NN_BF16_NAME(bert_backward_bf16)(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add,
                                      uint16_t *a16, float *a32, const gm_io *io, const gm_env *e) {
    const bert_plan *P = plan;
    const int C = P->C, B = io->B, T = io->T, N = B * T, K = io->K, nt = e->nt;
    uint16_t *dres = H(BA_DRES, 0), *dln = H(BA_DLN, 0), *datty = H(BA_DATTY, 0), *dqkv = H(BA_DQKV, 0);
    uint16_t *dfch = H(BA_DFCH, 0);
    memset(gs, 0, P->ngs * sizeof *gs);
    if (K > 0) head_backward(P, w, g16, gs, add, a16, a32, io, e);
    else if (!add) memset(G(BERT_HEADW, 0), 0, (size_t)C * C * sizeof(uint16_t)); /* no scored row: its gradient is 0 */
    OPB(scatter_rows)(dres, H(BA_DH1, 0), io->rows, K, N, C, nt);
    for (int l = P->L - 1; l >= 0; l--) {
        const uint16_t *x = l ? H(BA_X, l - 1) : H(BA_X0, 0);
        OPB(layernorm_backward)(dln, GS(BERT_LN2W, l), GS(BERT_LN2B, l), dres, H(BA_R2, l), W(BERT_LN2W, l),
                                F(BA_X_MEAN, l), F(BA_X_RSTD, l), N, C, 0, 1, nt);
        linear_backward(LIN(l, LIN_FCPROJ), dfch, 0, G(BERT_FCPROJW, l), add, GS(BERT_FCPROJB, l), dln, H(BA_FCH_GELU, l),
                        W(BERT_FCPROJW, l), N, 4 * C, C, e);
        OPB(gelu_backward)(dfch, H(BA_FCH, l), (size_t)N * 4 * C, 1, nt);
        linear_backward(LIN(l, LIN_FC), dln, 1, G(BERT_FCW, l), add, GS(BERT_FCB, l), dfch, H(BA_H, l), W(BERT_FCW, l), N,
                        C, 4 * C, e);
        OPB(layernorm_backward)(dres, GS(BERT_LN1W, l), GS(BERT_LN1B, l), dln, H(BA_R1, l), W(BERT_LN1W, l),
                                F(BA_H_MEAN, l), F(BA_H_RSTD, l), N, C, 0, 1, nt);
        linear_backward(LIN(l, LIN_ATTPROJ), datty, 0, G(BERT_ATTPROJW, l), add, GS(BERT_ATTPROJB, l), dres, H(BA_ATTY, l),
                        W(BERT_ATTPROJW, l), N, C, C, e);
        OPB(attention_bidir_backward)(dqkv, F(BA_SCR, 0), datty, H(BA_QKV, l), H(BA_ATT, l), io->len, B, T, C, P->NH,
                                      1, nt);
        linear_backward(LIN(l, LIN_QKV), dres, 1, G(BERT_QKVW, l), add, GS(BERT_QKVB, l), dqkv, x, W(BERT_QKVW, l), N, C,
                        3 * C, e);
    }
    OPB(layernorm_backward)(dln, GS(BERT_LNEW, 0), GS(BERT_LNEB, 0), dres, H(BA_EMB, 0), W(BERT_LNEW, 0),
                            F(BA_X0_MEAN, 0), F(BA_X0_RSTD, 0), N, C, 0, 1, nt);
    OPB(encoder_backward)(NULL, GS(BERT_WPE, 0), dln, io->tok, B, T, C, nt);
    OPB(bias_backward)(GS(BERT_WTT, 0), dln, N, C, nt);
    /* wte: the logits' product and the embedding's rows, summed in float and rounded once (no scored row:
     * the rows alone, through the bf16 op, whose empty product is the fp8 one's 0 without operands to scale) */
    if (K > 0)
        mb_backward_weight(e, LIN_LOGITS(P), G(BERT_WTE, 0), add, H(BA_DLOGITS, 0), H(BA_HLN, 0), K, C, P->Vp, io->tok,
                           dln, N);
    else
        OPB(matmul_backward_weight)(G(BERT_WTE, 0), add, H(BA_DLOGITS, 0), H(BA_HLN, 0), 0, C, P->Vp, io->tok, dln, N,
                                    e->ws, e->path, nt);
    round_sums(P, g16, gs, add);
}

/* nn_bert.h — the layer ops an encoder (the BERT family) adds to nn.h: the embedding with a token-type
 * row, bidirectional attention over the valid keys of each sequence (an attention mask for padding),
 * the row gathers of the masked-LM head, the hit count of its predictions, and the products with a
 * residual in the backward and a bias on the logits. Written once over (real, act) in ops_bert.inc and
 * instantiated beside ops.inc by ops_f32.c, ops_f64.c and ops_bf16.c; the bf16 products and their fp8
 * twins are matmul_bert_bf16.c's. Conventions (argument order, shapes, bf, nt, thread independence):
 * nn.h. Private to the library and its tests. */
#ifndef COLLAGE_NN_BERT_H
#define COLLAGE_NN_BERT_H

#include "nn.h"

/* Contracts:
 *
 * embed3_forward: out[b,t,:] = rnd(wte[tok[b,t],:] + wpe[t,:] + wtt[:]), summed in that order in real.
 *   out (B,T,C); tok (B,T) in [0, rows of wte); wte (Vp,C), wpe (≥T,C), wtt (C).
 * attention_bidir_forward: multi-head attention of every query over the keys t2 < len[b] of its sequence
 *   (len NULL: all T), head h in columns h·hs of q, k, v (hs = C/NH): att = softmax(q·kᵀ/sqrt(hs)) over
 *   those keys, exactly 0 on the others; out = att·v. Each score rounded as the causal op rounds it
 *   (rnd(q·k·scale)), the softmax in real, att and out rounded once. out (B,T,C), att (B,NH,T,T), scr
 *   nn_attention_scratch(B,T,C,NH) reals; qkv (B,T,3C); len (B), each in [1, T].
 * attention_bidir_backward: dqkv assigned from datty, with qkv and att of the forward: per query t, datt =
 *   datty·vᵀ and dpre = att ⊙ (datt − Σ att·datt)/sqrt(hs) over the valid keys, dq = dpre·k; per key t2,
 *   in increasing t over all T queries, dk = Σ dpre[t,t2]·q[t], dv = Σ att[t,t2]·datty[t] (0 for a
 *   padded key). dqkv (B,T,3C), scr as in the forward; datty (B,T,C), qkv (B,T,3C), att (B,NH,T,T).
 * gather_rows: out[k,:] = inp[rows[k],:] (exact copies).  out (K,C); inp (N,C); rows (K) in [0,N).
 * scatter_rows: dinp[rows[k],:] = dout[k,:], every other row of dinp 0 (assigned; rows distinct).
 *   dinp (N,C); dout (K,C); rows (K).
 * argmax_hits: the number of rows k whose largest probability over the first V columns (the first on
 *   ties) is at column tgt[k].  probs (K,Vp); tgt (K) in [0,V).
 *
 * The float and double models' product with a residual in the backward (the gradient of a layer's input
 * where the residual path and the branch meet, before the post-norm LayerNorm's backward):
 * matmul_backward_res: dinp = rnd(dinp + rnd(dout·w)) (scr holds dout·w: N·C reals), dw += doutᵀ·inp,
 *   db += Σ_n dout.  dinp (N,C) in place; dw (OC,C), db (OC); dout (N,OC), inp (N,C), w (OC,C).
 *
 * The bf16 model's products (matmul_bert_bf16.c), rounding where the float ops round:
 * matmul_logits_bias_bf16: out = rnd(inp·wᵀ + bias) as floats (the input of the fp32 softmax).
 *   out (N,OC); inp (N,C), w (OC,C), bias (OC).
 * matmul_backward_input_res_bf16: dinp = rnd(dinp + rnd(dout·w)).  dinp (N,C) in place; dout (N,OC),
 *   w (OC,C). */
#define NN_BERT_OPS(S, real, act)                                                                              \
    void nn_embed3_forward##S(act *out, const int *tok, const act *wte, const act *wpe, const act *wtt, int B,   \
                              int T, int C, int bf, int nt);                                                  \
    void nn_attention_bidir_forward##S(act *out, act *att, real *scr, const act *qkv, const int *len, int B,     \
                                       int T, int C, int NH, int bf, int nt);                                 \
    void nn_attention_bidir_backward##S(act *dqkv, real *scr, const act *datty, const act *qkv, const act *att, \
                                        const int *len, int B, int T, int C, int NH, int bf, int nt);          \
    void nn_gather_rows##S(act *out, const act *inp, const int *rows, int K, int C, int nt);                   \
    void nn_scatter_rows##S(act *dinp, const act *dout, const int *rows, int K, int N, int C, int nt);         \
    long nn_argmax_hits##S(const real *probs, const int *tgt, int K, int V, int Vp, int nt);
NN_BERT_OPS(_f32, float, float)
NN_BERT_OPS(_f64, double, double)
NN_BERT_OPS(_bf16, float, uint16_t)
NN_BERT_OPS(_bf16_avx512, float, uint16_t)

#define NN_BERT_REAL_PRODUCTS(S, real)                                                                          \
    void nn_matmul_backward_res##S(real *dinp, real *scr, real *dw, real *db, const real *dout, const real *inp, \
                                   const real *w, int N, int C, int OC, int bf, int nt);
NN_BERT_REAL_PRODUCTS(_f32, float)
NN_BERT_REAL_PRODUCTS(_f64, double)

#define NN_BERT_BF16_PRODUCTS(S)                                                                                \
    void nn_matmul_logits_bias_bf16##S(float *out, const uint16_t *inp, const uint16_t *w, const uint16_t *bias, \
                                       int N, int C, int OC, nn_ws *ws, nn_bf16_path path, int nt);             \
    void nn_matmul_backward_input_res_bf16##S(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N,    \
                                              int C, int OC, nn_ws *ws, nn_bf16_path path, int nt);
NN_BERT_BF16_PRODUCTS()
NN_BERT_BF16_PRODUCTS(_avx512)

/* The same two products on 4-bit operands (nn.h's fp4 ops' rules, numerics.md §15 "The model in fp4"). */
#define NN_BERT_FP4_PRODUCTS(S)                                                                                \
    collage_status nn_matmul_logits_bias_fp4##S(float *out, const uint16_t *inp, const uint16_t *w,              \
                                                const uint16_t *bias, int N, int C, int OC,                      \
                                                const nn_fp4_layer *L, nn_fp4_ws *ws, nn_bf16_path path, int nt); \
    collage_status nn_matmul_backward_input_res_fp4##S(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, \
                                                       int N, int C, int OC, const nn_fp4_layer *L,             \
                                                       nn_fp4_ws *ws, nn_bf16_path path, int nt);
NN_BERT_FP4_PRODUCTS()
NN_BERT_FP4_PRODUCTS(_avx512)

/* The same two products on fp8 operands (numerics.md §13, "A linear layer in fp8"), nn.h's fp8 ops' rules:
 * the input and weight in e4m3, the incoming gradient in e5m2 (e4m3 with e4m3_all), quantized by the
 * layer's recipe and scaled by its delayed slots (slot: input, slot + 1: weight, slot + 2: gradient), the
 * same epilogues as the bf16 ops above. COLLAGE_ERR_NONFINITE: NaN or Inf in an operand, nothing stored,
 * nothing recorded. ws: reserved by nn_fp8_layer_reserve for the layer's shape.
 * matmul_logits_bias_fp8: out = rnd(Q(inp)·Q(w)ᵀ + bias) as floats.  Shapes as matmul_logits_bias_bf16.
 * matmul_backward_input_res_fp8: dinp = rnd(dinp + rnd(Q(dout)·Q(w))).  Shapes as
 *   matmul_backward_input_res_bf16. */
#define NN_BERT_FP8_PRODUCTS(S)                                                                                 \
    collage_status nn_matmul_logits_bias_fp8##S(float *out, const uint16_t *inp, const uint16_t *w,              \
                                                const uint16_t *bias, int N, int C, int OC,                      \
                                                const nn_fp8_layer *L, nn_fp8_ws *ws, nn_bf16_path path, int nt); \
    collage_status nn_matmul_backward_input_res_fp8##S(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, \
                                                       int N, int C, int OC, const nn_fp8_layer *L,             \
                                                       nn_fp8_ws *ws, nn_bf16_path path, int nt);
NN_BERT_FP8_PRODUCTS()
NN_BERT_FP8_PRODUCTS(_avx512)

#endif

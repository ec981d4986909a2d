/* nn_llama.h — the layer ops of the LLaMA family: token embedding without positions, RMSNorm, the
 * rotary position embedding, the SwiGLU gate, causal grouped-query attention and the bias-free residual
 * add. Written once in ops_llama.inc over (real, act) beside ops.inc and instantiated by the same files
 * (ops_f32.c, ops_f64.c, ops_bf16.c and its AVX-512 twin), with nn.h's conventions: outputs, inputs,
 * sizes; row-major shapes; bf = 1 rounds every stored value to bf16 once (float ops; the double ops
 * ignore it, the bf16 ops always round); disjoint output ranges per thread and sums in a fixed order, so
 * results are bit-identical for any thread count. Private to the library and its tests.
 *
 * embed_forward: out[n,:] = wte[tok[n],:] (a copy: exact).  out (N,C); tok (N), each in [0, rows of wte).
 * embed_backward: dwte[tok[n],:] += dout[n,:] for n = 0 … N−1 in order.  dwte (V,C) real; dout (N,C).
 * rmsnorm_forward: per row rstd = 1/sqrt(Σx²/C + eps), out = (rstd·x)·w.  out (N,C), rstd (N) unrounded;
 *   inp (N,C), w (C).
 * rmsnorm_backward: dw += Σ_n dout·norm in row order (norm = x·rstd); dinp = rnd(dx) (accumulate = 0) or
 *   rnd(dinp + rnd(dx)) (1), dx = rstd·(w·dout − norm·mean(w·dout·norm)).  dinp (N,C), dw (C) real;
 *   dout (N,C), inp (N,C), w (C), rstd (N). dinp ≠ dout.
 * rope_forward: in place, per row n (position t = n mod T) and head h < nheads, each adjacent pair
 *   (x[2i], x[2i+1]) of the head's hs columns rotated by the angle t·θ^(−2i/hs):
 *   (x0·cos − x1·sin, x0·sin + x1·cos), the cos and sin from cs[(t·hs/2 + i)·2 + 0, 1].  x: B·T rows of
 *   stride ld, the heads in columns [0, nheads·hs); cs (≥T, hs/2, 2) from nn_rope_table.
 * rope_backward: in place, the transposed rotation of the gradient: (d0·cos + d1·sin, −d0·sin + d1·cos).
 * swiglu_forward: out[n,j] = silu(a)·b, silu(a) = a/(1 + e^{−a}), a = inp[n,j], b = inp[n,H+j].
 *   out (N,H); inp (N,2H) = [w1·x | w3·x] per row.
 * swiglu_backward: dinp[n,j] = dout·b·silu'(a), dinp[n,H+j] = dout·silu(a) (assigned), silu'(a) =
 *   s + a·s·(1 − s), s = σ(a).  dinp (N,2H); dout (N,H), inp (N,2H).
 * gqa_forward: causal attention, query head h on key/value head h / (NH/NKV); each row of qkv (B,T,QKV),
 *   QKV = (NH + 2·NKV)·hs, holds [q (NH·hs) | k (NKV·hs) | v (NKV·hs)], heads in blocks of hs columns:
 *   att = softmax(q·kᵀ/sqrt(hs)) with zeros above the diagonal, out = att·v.  out (B,T,NH·hs),
 *   att (B,NH,T,T), scr nn_gqa_scratch(B,T,NH,hs) reals. With NKV = NH it computes what
 *   nn_attention_forward computes on [q | k | v], value for value.
 * gqa_backward: dqkv assigned from datty, with qkv and att of the forward: per query head dq, and per
 *   key/value head dk and dv summed over the heads of its group in increasing h (each head's sum over the
 *   queries as in nn_attention_backward), rounded once.  dqkv (B,T,QKV), scr as in the forward.
 * residual_forward (float and double): out = rnd(res + rnd(out)), the residual add after a projection
 *   written into out.  out, res (N,C). */
#ifndef COLLAGE_NN_LLAMA_H
#define COLLAGE_NN_LLAMA_H

#include "nn.h"

static inline size_t nn_gqa_scratch(int B, int T, int NH, int hs) { return nn_attention_scratch(B, T, NH * hs, NH); }

/* cos and sin of t·θ^(−2i/hs) for t < T, i < hs/2, computed in double and rounded to the table's type:
 * (T, hs/2, 2) interleaved. */
void nn_rope_table_f32(float *cs, int T, int hs, double theta);
void nn_rope_table_f64(double *cs, int T, int hs, double theta);

#define NN_LLAMA_OPS(S, real, act)                                                                            \
    void nn_embed_forward##S(act *out, const int *tok, const act *wte, int N, int C, int nt);                 \
    void nn_embed_backward##S(real *dwte, const act *dout, const int *tok, int N, int C, int nt);              \
    void nn_rmsnorm_forward##S(act *out, real *rstd, const act *inp, const act *w, int N, int C, real eps,     \
                               int bf, int nt);                                                               \
    void nn_rmsnorm_backward##S(act *dinp, real *dw, const act *dout, const act *inp, const act *w,            \
                                const real *rstd, int N, int C, int accumulate, int bf, int nt);              \
    void nn_rope_forward##S(act *x, const real *cs, int B, int T, int ld, int nheads, int hs, int bf, int nt); \
    void nn_rope_backward##S(act *d, const real *cs, int B, int T, int ld, int nheads, int hs, int bf, int nt); \
    void nn_swiglu_forward##S(act *out, const act *inp, int N, int H, int bf, int nt);                        \
    void nn_swiglu_backward##S(act *dinp, const act *dout, const act *inp, int N, int H, int bf, int nt);     \
    void nn_gqa_forward##S(act *out, act *att, real *scr, const act *qkv, int B, int T, int NH, int NKV, int hs, \
                           int bf, int nt);                                                                   \
    void nn_gqa_backward##S(act *dqkv, real *scr, const act *datty, const act *qkv, const act *att, int B, int T, \
                            int NH, int NKV, int hs, int bf, int nt);
NN_LLAMA_OPS(_f32, float, float)
NN_LLAMA_OPS(_f64, double, double)
NN_LLAMA_OPS(_bf16, float, uint16_t)
NN_LLAMA_OPS(_bf16_avx512, float, uint16_t)
void nn_residual_forward_f32(float *out, const float *res, int N, int C, int bf, int nt);
void nn_residual_forward_f64(double *out, const double *res, int N, int C, int bf, int nt);

#endif

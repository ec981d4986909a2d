/* nn.h — the layer ops of the library's models (llm.c's math): forward/backward pairs over flat arrays,
 * compiled once per real type (ops.inc, instantiated by ops_f32.c and ops_f64.c), the matrix products'
 * one door (gemm.c), the guard that keeps OpenBLAS single-threaded for the length of a library call,
 * and the scalar helpers the kernels inline. Private to the library and its tests.
 *
 * Conventions of every op (llm.c's): arguments go outputs, inputs, sizes; shapes in the comments are
 * row-major, e.g. (B,T,C); a backward adds (+=) into weight gradients and assigns activation gradients
 * unless its comment says otherwise. Aliasing: none unless stated.
 * bf: 1 emulates bf16 hardware in the float ops: every stored activation and activation gradient is
 * rounded to the nearest bf16 (nn_rnd_f32), once per op; products and sums stay fp32. The double ops
 * take bf and ignore it. nt: the OpenMP threads (collage_set_threads). Every loop gives each thread a
 * disjoint output range and sums run in a fixed order, so results are bit-identical for any nt and
 * with OpenMP off. */
#ifndef COLLAGE_NN_H
#define COLLAGE_NN_H

#include "internal.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- scalar helpers (inlined in hot loops) */
/* Branch-free selects: a where m is all ones, else b. Under GCC's default -ftrapping-math a float `?:`
 * is control flow that blocks vectorisation; masks on the bits are not, and give the same values. */
static inline float nn_sel_f32(uint32_t m, float a, float b) { return bits_f32((m & f32_bits(a)) | (~m & f32_bits(b))); }
static inline uint32_t nn_lt_f32(float a, float b) { return 0u - (uint32_t)(a < b); }

/* bf ? the bf16 nearest to v (RN, ties to even, NaN kept quiet: bf16_rn_bits) : v. */
static inline float nn_rnd_f32(int bf, float v) {
    const uint32_t u = f32_bits(v);
    const uint32_t rn = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u, nan = (u | 0x00400000u) & 0xffff0000u;
    const uint32_t is_nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u), on = 0u - (uint32_t)(bf != 0);
    return bits_f32((on & ((is_nan & nan) | (~is_nan & rn))) | (~on & u));
}
static inline double nn_rnd_f64(int bf, double v) { (void)bf; return v; }
static inline float nn_min_f32(float a, float b) { return nn_sel_f32(nn_lt_f32(b, a), b, a); } /* NaN a: a */
static inline double nn_min_f64(double a, double b) { return b < a ? b : a; }

/* e^x in float without a libm call, so loops over it vectorise and give the same bits in every build
 * and with every libm. x = k·ln2 + r (Cody–Waite: ln2 = L2HI + L2LO, k·L2HI exact for |k| < 2^9),
 * |r| ≤ ln2/2 + ε, e^r by its degree-7 Taylor polynomial (truncation < 6e-9 relative), times 2^k as
 * two exact scalings 2^(k>>1)·2^(k−(k>>1)) so no factor leaves the normal range. Error ≤ 2 ulp
 * (test_gpt measures it against exp in double). Result 0 below −87.33654 (where e^x < 2^−126, the
 * subnormals are flushed), +Inf above 88.72283, NaN for NaN. */
static inline float nn_exp_f32(float x) {
    const float L2HI = 0.693145751953125f, L2LO = 1.428606765330187e-6f, SHIFTER = 12582912.0f;
    float xc = nn_sel_f32(nn_lt_f32(x, -87.5f), -87.5f, x);
    xc = nn_sel_f32(nn_lt_f32(88.8f, xc), 88.8f, xc);
    xc = nn_sel_f32(0u - (uint32_t)(x != x), 0.0f, xc); /* keep the integer conversion below defined */
    const float kf = (xc * 1.44269504088896341f + SHIFTER) - SHIFTER; /* nearest integer, |k| ≤ 129 */
    const float r = (xc - kf * L2HI) - kf * L2LO;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t k = (int32_t)kf, k1 = k >> 1, k2 = k - k1;
    float y = (p * bits_f32((uint32_t)(k1 + 127) << 23)) * bits_f32((uint32_t)(k2 + 127) << 23);
    y = nn_sel_f32(nn_lt_f32(x, -87.33654f), 0.0f, y);
    y = nn_sel_f32(nn_lt_f32(88.72283f, x), (float)INFINITY, y);
    return nn_sel_f32(0u - (uint32_t)(x != x), x, y);
}

/* ---------------------------------------------------------------- the matrix products' one door (gemm.c) */
/* C = op(A)·op(B) + beta·C, row-major (ta, tb: 1 = transposed; op(A) (M,K), op(B) (K,N), C (M,N)), as a
 * grid of tiles over the larger of M and N that depends on the shape only; each tile is one
 * single-threaded BLAS call, the tiles spread over nt OpenMP threads. Every element of C is the same
 * for any nt. OpenBLAS must be single-threaded (nn_blas_begin) while this runs. C may not alias A, B. */
void nn_gemm_f32(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc, int nt);
void nn_gemm_f64(int ta, int tb, int M, int N, int K, const double *A, int lda, const double *B, int ldb,
                 double beta, double *C, int ldc, int nt);

/* OpenBLAS keeps one process-wide thread count. Every library call that reaches nn_gemm brackets its
 * work with nn_blas_begin / nn_blas_end: the count is 1 from the first begin until the last end (calls
 * may nest and run on several threads at once), then the caller's value again. */
void nn_blas_begin(void);
void nn_blas_end(void);

/* ---------------------------------------------------------------- layer ops, float (ops_f32.c) and double (ops_f64.c) */
/* Embedding: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:].
 * out (B,T,C); tok (B,T), each in [0, rows of wte); wte (Vp,C); wpe (≥T,C). */
void nn_encoder_forward_f32(float *out, const int *tok, const float *wte, const float *wpe, int B, int T, int C, int bf, int nt);
void nn_encoder_forward_f64(double *out, const int *tok, const double *wte, const double *wpe, int B, int T, int C, int bf, int nt);
/* dwte[tok[n],:] += dout[n,:], dwpe[t,:] += dout[n,:], in the order n = 0 … B·T−1 for every element.
 * dwte (Vp,C), dwpe (≥T,C); dout (B,T,C); tok (B,T). */
void nn_encoder_backward_f32(float *dwte, float *dwpe, const float *dout, const int *tok, int B, int T, int C, int nt);
void nn_encoder_backward_f64(double *dwte, double *dwpe, const double *dout, const int *tok, int B, int T, int C, int nt);

/* LayerNorm per row: out = (x − mean)·rstd·w + b, rstd = 1/sqrt(var + 1e-5) (two-pass variance).
 * out (N,C), mean (N), rstd (N); inp (N,C), w (C), b (C). mean and rstd stay unrounded (statistics). */
void nn_layernorm_forward_f32(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C, int bf, int nt);
void nn_layernorm_forward_f64(double *out, double *mean, double *rstd, const double *inp, const double *w,
                              const double *b, int N, int C, int bf, int nt);
/* dw += Σ_n norm·dout, db += Σ_n dout (row order); dinp = dx (accumulate = 0) or rnd(dinp + dx) (1),
 * dx = rstd·(w·dout − mean(w·dout) − norm·mean(w·dout·norm)).
 * dinp (N,C), dw (C), db (C); dout (N,C), inp (N,C), w (C), mean (N), rstd (N). dinp may not alias dout. */
void nn_layernorm_backward_f32(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C, int accumulate, int bf, int nt);
void nn_layernorm_backward_f64(double *dinp, double *dw, double *db, const double *dout, const double *inp,
                               const double *w, const double *mean, const double *rstd, int N, int C, int accumulate,
                               int bf, int nt);

/* out = inp·wᵀ (+ bias), rounded once. out (N,OC); inp (N,C), w (OC,C), bias (OC) or NULL. */
void nn_matmul_forward_f32(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                           int bf, int nt);
void nn_matmul_forward_f64(double *out, const double *inp, const double *w, const double *bias, int N, int C, int OC,
                           int bf, int nt);
/* dinp = rnd(dout·w) (assigned), dw += doutᵀ·inp, db += Σ_n dout (db may be NULL).
 * dinp (N,C), dw (OC,C), db (OC); dout (N,OC), inp (N,C), w (OC,C). */
void nn_matmul_backward_f32(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                            int N, int C, int OC, int bf, int nt);
void nn_matmul_backward_f64(double *dinp, double *dw, double *db, const double *dout, const double *inp,
                            const double *w, int N, int C, int OC, int bf, int nt);
/* db[j] += Σ_n dout[n,j] in row order. db (OC); dout (N,OC). */
void nn_bias_backward_f32(float *db, const float *dout, int N, int OC, int nt);
void nn_bias_backward_f64(double *db, const double *dout, int N, int OC, int nt);

/* The residual add after a projection written into out: out = rnd(res + rnd(out + bias)).
 * out (N,C) in place; res (N,C), bias (C). */
void nn_residual_bias_forward_f32(float *out, const float *res, const float *bias, int N, int C, int bf, int nt);
void nn_residual_bias_forward_f64(double *out, const double *res, const double *bias, int N, int C, int bf, int nt);
/* In place: x = rnd(x) (bf16 mode only; nothing when bf = 0). x (n). */
void nn_round_inplace_f32(float *x, size_t n, int bf, int nt);
void nn_round_inplace_f64(double *x, size_t n, int bf, int nt);

/* GELU, tanh approximation, as x·σ(2u) = x / (1 + e^{−2u}), u = sqrt(2/π)(x + 0.044715 x³).
 * out (n); inp (n). */
void nn_gelu_forward_f32(float *out, const float *inp, size_t n, int bf, int nt);
void nn_gelu_forward_f64(double *out, const double *inp, size_t n, int bf, int nt);
/* In place: d = rnd(d·gelu'(x)). d (n); inp (n), the forward's input. */
void nn_gelu_backward_f32(float *d, const float *inp, size_t n, int bf, int nt);
void nn_gelu_backward_f64(double *d, const double *inp, size_t n, int bf, int nt);

/* Causal multi-head attention, head h in columns h·hs of each of q, k, v (hs = C/NH):
 * att = softmax(q·kᵀ/sqrt(hs)) with zeros above the diagonal, out = att·v.
 * out (B,T,C), att (B,NH,T,T), scr (B·NH·(hs·T + T)) scratch; qkv (B,T,3C) = [q | k | v] per row. */
void nn_attention_forward_f32(float *out, float *att, float *scr, const float *qkv, int B, int T, int C, int NH,
                              int bf, int nt);
void nn_attention_forward_f64(double *out, double *att, double *scr, const double *qkv, int B, int T, int C, int NH,
                              int bf, int nt);
/* dqkv assigned from datty, with qkv and att of the forward.
 * dqkv (B,T,3C), scr as in the forward; datty (B,T,C), qkv (B,T,3C), att (B,NH,T,T). */
void nn_attention_backward_f32(float *dqkv, float *scr, const float *datty, const float *qkv, const float *att,
                               int B, int T, int C, int NH, int bf, int nt);
void nn_attention_backward_f64(double *dqkv, double *scr, const double *datty, const double *qkv, const double *att,
                               int B, int T, int C, int NH, int bf, int nt);

/* In place: logits (N,Vp) → probabilities over the first V columns (columns ≥ V set to 0);
 * losses (N): log Σ exp(x − max) − (x[target] − max); tgt (N) in [0,V). Returns the mean loss, summed
 * in row order in double. The probabilities are not rounded (fp32 softmax in bf16 mode too). */
double nn_crossentropy_forward_f32(float *logits, float *losses, const int *tgt, int N, int V, int Vp, int nt);
double nn_crossentropy_forward_f64(double *logits, double *losses, const int *tgt, int N, int V, int Vp, int nt);
/* In place: probabilities (N,Vp) → dlogits = rnd((p − onehot(target))·dloss); columns ≥ V stay 0. */
void nn_crossentropy_backward_f32(float *probs, const int *tgt, int N, int V, int Vp, float dloss, int bf, int nt);
void nn_crossentropy_backward_f64(double *probs, const int *tgt, int N, int V, int Vp, double dloss, int bf, int nt);

#endif

/* adamw_elem.h — one element's step of AdamW, Lion and SGD for every strategy, written once for the host
 * (C, gcc or clang) and the device (CUDA C++, nvcc): numerics.md §6 and §14 line by line, each operation
 * in fp32 rounded once, the same conversions and EFTs as eft.h, the 8-bit block codes of qcode.c, the Σg²
 * lanes of adamw.c. These lines are the scalar reference: adamw_ref.c runs them over the slabs (there is
 * no other scalar version), src/cuda/ runs them in its kernels, and tests/test_adamw_elem.c checks the
 * device's driver around them on the host. Only collage.h is included: nvcc compiles this header as C++.
 * Build with no contraction (-ffp-contract=off, nvcc --fmad=false): a fused multiply-add would change
 * the results. */
#ifndef COLLAGE_ADAMW_ELEM_H
#define COLLAGE_ADAMW_ELEM_H

#include "collage.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#define COLLAGE_HD __host__ __device__
#else
#define COLLAGE_HD
#endif
#define CE_INL static inline COLLAGE_HD
#ifdef __CUDA_ARCH__
#define CE_UNROLL _Pragma("unroll")
#else
#define CE_UNROLL
#endif
#ifdef __CUDACC__
#define CE_FINL static __forceinline__ COLLAGE_HD /* the MCF operations: nvcc made calls of them */
#else
#define CE_FINL static inline
#endif

#if defined(__clang__) && !defined(__CUDACC__)
#pragma STDC FP_CONTRACT OFF
#endif

#define CE_BLOCK ((size_t)1 << 14) /* adamw.c BLOCK: the step's blocks, the Σg² chunks, the EDQ sums */
#define CE_QBLOCK 256              /* COLLAGE_QBLOCK: an 8-bit word's elements per fp32 scale */

/* ------------------------------------------------------------------ bits and formats */
CE_INL uint32_t ce_f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u; memcpy(&u, &x, 4); return u;
#endif
}
CE_INL float ce_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x; memcpy(&x, &u, 4); return x;
#endif
}
/* bf16 RN of fp32 (internal.h bf16_rn_bits): nearest, ties to even; NaN quiet with sign and payload. */
CE_INL uint16_t ce_bf16_rn_bits(float x) {
    const uint32_t u = ce_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* bf16 RN of fp32 as the lines use it, as fp32 bits whose low half is zero: on the host
 * ce_bf16_rn_bits shifted; on the device the packed conversion instruction with a zero low half
 * (cvt.rn.bf16x2.f32 d, x, 0: F2FP, the multiprocessor's fast 16-bit converter, where the single
 * cvt.rn.bf16.f32 compiles to F2F, of the slow conversion unit, and needs a shift to widen). The same bits for every x
 * that is not a NaN (test_cuda --exhaustive compares all 2^32), and a NaN becomes the canonical NaN
 * 0x7fff: its sign and payload are not kept (docs/cuda.md, "Where the bits can differ"). */
CE_INL uint32_t ce_bf16_rn_hi(float x) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(x), "f"(0.0f));
    return d;
#else
    return (uint32_t)ce_bf16_rn_bits(x) << 16;
#endif
}
CE_INL uint16_t ce_bf16_rn(float x) { return (uint16_t)(ce_bf16_rn_hi(x) >> 16); }
/* bf16 SR (internal.h bf16_sr_bits): away from zero iff the dropped 16 bits + r's top 16 carry. */
CE_INL uint16_t ce_bf16_sr(float x, uint32_t r) {
    const uint32_t u = ce_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    return (uint16_t)((u + (r >> 16)) >> 16);
}
CE_INL float ce_bf16_f32(uint16_t b) { return ce_bits_f32((uint32_t)b << 16); }
/* fp16 RN of fp32 (internal.h fp16_rn_bits): ties to even, subnormals kept, ±Inf from 65520 up. */
CE_INL uint16_t ce_fp16_rn(float x) {
    const uint32_t u = ce_f32_bits(x), a = u & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) return (uint16_t)(sign | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10)));
    return (uint16_t)(sign | (uint16_t)((ce_bits_f32(a) * 0x1p24f + 8388608.0f) - 8388608.0f));
}
/* fp16 to fp32, exact; NaN quiet with its payload (internal.h fp16_f32). */
CE_INL float ce_fp16_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return ce_bits_f32(sign | (m ? 0x7fc00000u : 0x7f800000u) | (m << 13));
    if (e == 0) return ce_bits_f32(sign | ce_f32_bits((float)m * 0x1p-24f));
    return ce_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
/* A 16-bit format f (COLLAGE_FMT_BF16 or COLLAGE_FMT_FP16): RN from fp32, exact widening. */
CE_INL uint16_t ce_rn(int f, float x) { return f == COLLAGE_FMT_FP16 ? ce_fp16_rn(x) : ce_bf16_rn(x); }
CE_INL float ce_f32(int f, uint16_t x) { return f == COLLAGE_FMT_FP16 ? ce_fp16_f32(x) : ce_bf16_f32(x); }
/* The 16-bit lines carry a format-f value as the fp32 number it is (exactly): ce_round(f, x) is RN_f(x)
 * so, ce_f32(f, ce_rn(f, x)) with no word between (on the device one instruction for bf16), and
 * ce_word16(f, v) the word of such a value v (for bf16 its high half). */
CE_INL float ce_round(int f, float x) {
    return f == COLLAGE_FMT_FP16 ? ce_fp16_f32(ce_fp16_rn(x)) : ce_bits_f32(ce_bf16_rn_hi(x));
}
CE_INL uint16_t ce_word16(int f, float v) {
    return f == COLLAGE_FMT_FP16 ? ce_fp16_rn(v) : (uint16_t)(ce_f32_bits(v) >> 16);
}

/* RN_f(√x) and RN_f(a / b) of format-f values (as ce_round's): the fp32 operation (IEEE's, correctly
 * rounded) rounded to f. On the device for bf16 the fast fp32 square root (sqrt.approx.f32) and quotient
 * (a times rcp.approx.ftz.f32 of b: the reciprocal within 1 ulp, the product rounded once) are within
 * 2^-22 of the exact value, and rounded to bf16 they give the same bits: an exact bf16 square root or
 * quotient of bf16 values is either a bf16 value or at least 2^-19 of itself away from every bf16
 * rounding boundary (its 9-bit midpoints), so any value that close rounds alike. A zero dividend gives
 * the exact ±0 (a zero moment: a parameter with no gradient yet). Other quotients outside [2^-125, 2^126)
 * and divisors outside [2^-125, 2^125] (subnormal results, the reciprocal's flushed range; NaN and ±∞
 * fail these tests too) take the IEEE quotient. test_cuda --exhaustive checks both
 * against the IEEE lines for every bf16 x and every pair (a, b) (2^32). */
CE_INL float ce_sqrt_rn(int f, float x) {
#ifdef __CUDA_ARCH__
    if (f == COLLAGE_FMT_BF16) {
        float r;
        asm("sqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
        return ce_round(f, r);
    }
#endif
    return ce_round(f, sqrtf(x));
}
CE_INL float ce_div_rn(int f, float a, float b) {
#ifdef __CUDA_ARCH__
    if (f == COLLAGE_FMT_BF16) {
        float r;
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
        const float q = __fmul_rn(a, r);
        if ((fabsf(q) >= 0x1p-125f || a == 0.0f) && fabsf(q) < 0x1p126f && fabsf(b) >= 0x1p-125f &&
            fabsf(b) <= 0x1p125f)
            return ce_round(f, q);
        return ce_round(f, __fdiv_rn(a, b));
    }
#endif
    return ce_round(f, a / b);
}

/* collage_rand32(key, index) (internal.h lowbias32, rand_k1, rand_k2, rand_bits). */
CE_INL uint32_t ce_lowbias32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
CE_INL uint32_t ce_rand32(uint64_t key, uint64_t index) {
    const uint32_t k1 = ce_lowbias32((uint32_t)key ^ ce_lowbias32((uint32_t)(index >> 32) + 0x9e3779b9u));
    const uint32_t k2 = (uint32_t)(key >> 32) * 0x9e3779b9u;
    return ce_lowbias32(((uint32_t)index ^ k1) + k2);
}

/* ------------------------------------------------------------------ single ops and EFTs (eft.h) */
/* Format-f values as ce_round's (fp32 numbers); each operation the fp32 one rounded to f. */
typedef struct { float hi, lo; } ce_pair;
CE_INL ce_pair ce_pair_of(float hi, float lo) { ce_pair p; p.hi = hi; p.lo = lo; return p; }
CE_INL float ce_add(int f, float a, float b) { return ce_round(f, a + b); }
CE_INL float ce_sub(int f, float a, float b) { return ce_round(f, a - b); }
CE_INL float ce_mul(int f, float a, float b) { return ce_round(f, a * b); }
/* bf16-remainder's master (adamw_impl.h rem_join, rem_theta, rem_low). */
CE_INL float ce_rem_join(uint16_t th, uint16_t rem) {
    return ce_bits_f32(((uint32_t)th << 16) + (uint32_t)(int32_t)(int16_t)rem);
}
CE_INL uint16_t ce_rem_theta(float master) { return (uint16_t)((ce_f32_bits(master) + 0x8000u) >> 16); }
CE_INL uint16_t ce_rem_low(float master, uint16_t th) { return (uint16_t)(ce_f32_bits(master) - ((uint32_t)th << 16)); }

/* ------------------------------------------------------------------ what a strategy is made of */
/* A strategy's parts as the lines need them (strategy.h parts_word, parts_arith, the generic path's gdesc). */
typedef struct {
    int w;                /* collage_weight_scheme */
    int wf, mf, vf;       /* θ's, m's, v's (hi word) collage_word_format */
    int arith;            /* what the lines round to: COLLAGE_WORD_FP32, _BF16 or _FP16 */
    int tf;               /* θ's 16-bit collage_format (its δθ and rounding) */
    int v_pair, v1;       /* v is an MCF pair; collage-plus-v1's MultMC */
    int sr_states;        /* 8-bit moments re-quantized stochastically (q=sr) */
    int mq, vq;           /* the collage_qcode of an 8-bit m, v; −1 otherwise */
    int has_v;            /* the optimizer keeps v (AdamW; Lion and SGD do not: ce_desc_no_v) */
} ce_desc;

CE_INL int ce_moment_word(int f) {
    return f == COLLAGE_MOMENT_FP32 ? COLLAGE_WORD_FP32
           : (f == COLLAGE_MOMENT_BF16 || f == COLLAGE_MOMENT_MCF) ? COLLAGE_WORD_BF16
           : (f == COLLAGE_MOMENT_FP16 || f == COLLAGE_MOMENT_FP16_MCF) ? COLLAGE_WORD_FP16
           : f == COLLAGE_MOMENT_INT8 ? COLLAGE_WORD_INT8 : COLLAGE_WORD_E4M3;
}
CE_INL int ce_is_q8(int wf) { return wf == COLLAGE_WORD_INT8 || wf == COLLAGE_WORD_E4M3; }
CE_INL int ce_has_master(int w) { return w == COLLAGE_SCHEME_MASTER || w == COLLAGE_SCHEME_FP16_MASTER; }
/* The schemes with a 16-bit compensation word (δθ, Kahan's c, the remainder) and with a correction byte. */
CE_INL int ce_has_comp(int w) {
    return w == COLLAGE_SCHEME_MCF || w == COLLAGE_SCHEME_FP16_MCF || w == COLLAGE_SCHEME_KAHAN || w == COLLAGE_SCHEME_REMAINDER;
}
CE_INL int ce_has_corr(int w) { return w == COLLAGE_SCHEME_C8; }
/* The description of the strategy with weight scheme w, moment formats m and v (collage_moment_format),
 * q=sr when sr, collage-plus-v1's MultMC when v1: the rules of strategy.h, so that a kernel whose
 * arguments are constants folds every question. */
CE_INL ce_desc ce_desc_make(int w, int m, int v, int sr, int v1) {
    ce_desc D;
    D.w = w;
    D.wf = w == COLLAGE_SCHEME_FP32 ? COLLAGE_WORD_FP32
           : (w == COLLAGE_SCHEME_FP16 || w == COLLAGE_SCHEME_FP16_MCF || w == COLLAGE_SCHEME_FP16_MASTER) ? COLLAGE_WORD_FP16
                                                                                                            : COLLAGE_WORD_BF16;
    D.mf = ce_moment_word(m);
    D.vf = ce_moment_word(v);
    D.arith = (D.wf == COLLAGE_WORD_FP32 || ce_has_master(w)) ? COLLAGE_WORD_FP32
              : (D.mf == D.wf && D.vf == D.wf) ? D.wf : COLLAGE_WORD_FP32;
    D.tf = D.wf == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16;
    D.v_pair = v == COLLAGE_MOMENT_MCF || v == COLLAGE_MOMENT_FP16_MCF;
    D.v1 = v1;
    D.sr_states = sr;
    D.mq = !ce_is_q8(D.mf) ? -1 : D.mf == COLLAGE_WORD_E4M3 ? COLLAGE_QCODE_E4M3 : COLLAGE_QCODE_DYN_SIGNED;
    D.vq = !ce_is_q8(D.vf) ? -1 : D.vf == COLLAGE_WORD_E4M3 ? COLLAGE_QCODE_E4M3 : COLLAGE_QCODE_DYN_UNSIGNED;
    D.has_v = 1;
    return D;
}
/* D for an optimizer that keeps no v (Lion, SGD): v and δv are neither read nor written. */
CE_INL ce_desc ce_desc_no_v(ce_desc D) {
    D.has_v = 0;
    D.v_pair = 0;
    D.vq = -1;
    return D;
}
CE_INL int ce_desc_q8(const ce_desc *D) { return D->mq >= 0 || D->vq >= 0; }
CE_INL int ce_fmt_of(int wf) { return wf == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16; }

/* ------------------------------------------------------------------ the step's scalars */
/* A step's scalars for one tensor (adamw_impl.h adamw_k), each converted to fp32 once on the host. */
typedef struct {
    float b1, omb1, b2, omb2, eps, neg_step, lrwd;
    float eco;                       /* ECO's feedback factor fp32((1/β1 − 1) / ns), 0 when ns = 0 (adamw_k's) */
    uint16_t b2hi, b2lo, h2hi, h2lo; /* β2 split in bf16 and in fp16 */
    uint64_t key;                    /* collage_rand_key(seed, t) */
    /* Lion and SGD (numerics.md §14; adamw_k's): neg_step is fp32(−lr); SGD's b1 is fp32(μ), omb1
     * fp32(1 − dampening), wd fp32(wd) (its L2 decay); first: the first step (the buffer starts as g) */
    int opt;                         /* collage_optimizer */
    float wd;
    int first, nesterov, decoupled;
} ce_k;
/* The gradient's factor (clipping and loss scaling) and whether it applies (adamw_k coef, clip). */
typedef struct {
    float coef;
    int clip;
} ce_coef;

/* sign(x): ±1, 0 for ±0, NaN for NaN (exact in every format). */
CE_INL float ce_sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == 0.0f ? 0.0f : x; }

/* The lines of lines.inc on one fp32 value (ce_line_*): their vocabulary is this header's roundings. */
#define L float
#define LR uint32_t
#define LK ce_k
#define LN(x) ce_line_##x
#define LINE_FN CE_FINL
#define L_RN(f, x) ce_round(f, x)
#define L_RN_ANY(f, x) ce_round(f, x)
#define L_RNK(f, x, k) ((void)(k), ce_round(f, x))
#define L_RNB(f, x, k) ((void)(k), ce_round(f, x))
#define L_SQRT_RN(f, x, k) ((void)(k), ce_sqrt_rn(f, x))
#define L_DIV_RN(f, a, b) ce_div_rn(f, a, b)
#define L_SQRT(x) sqrtf(x)
#define L_SR(x, r) ce_bf16_f32(ce_bf16_sr(x, r))
#define L_BITS(x) ce_f32_bits(x)
#define L_OF_BITS(u) ce_bits_f32(u)
#define LR_MASK(c) (0u - (uint32_t)(c))
#define L_SIGN(x) ce_sign(x)
#define L_LION_A(f, c, k) ce_round(f, (k)->neg_step * ce_sign(c))
#define L_FIRST(k, a, b) ((k)->first ? (a) : (b))
#define LK_MOM(k) ((k)->b1 != 0.0f)
#define LK_NEST(k) ((k)->nesterov)
#define LK_L2(k) (!(k)->decoupled && (k)->wd != 0.0f)
#define LK_DEC(k) ((k)->decoupled)
#include "lines.inc"

/* GrowAddcmul and MultMC on pairs (lines.inc grow_addcmul, mcf_mul). */
CE_FINL ce_pair ce_grow_addcmul(int f, ce_pair y, float t1, float t2, float c) {
    ce_line_grow_addcmul(f, &y.hi, &y.lo, t1, t2, c);
    return y;
}
CE_FINL ce_pair ce_mcf_mul(int f, ce_pair x, ce_pair b, const ce_k *k) {
    ce_line_mcf_mul(f, &x.hi, &x.lo, b.hi, b.lo, k);
    return x;
}
CE_FINL ce_pair ce_mcf_mul_v1(int f, ce_pair x, ce_pair b, const ce_k *k) {
    ce_line_mcf_mul_v1(f, &x.hi, &x.lo, b.hi, b.lo, k);
    return x;
}

/* The clipping of a step from the gradient's Σg² (adamw.c step_begin): gnorm = √Σ / scale; the factor
 * clip / (gnorm + 1e-6) where gnorm > clip (clip > 0); the gradient is multiplied by fp32(factor / scale).
 * *skip = 1 where the step is skipped (a non-finite Σ and skip_nonfinite). sumsq is ignored (gnorm NaN)
 * when neither clipping nor skipping asks for it. All in double, as on the host. */
CE_INL ce_coef ce_clip(double sumsq, double clip, int skip_nonfinite, double gscale, double *gnorm, double *coef_out,
                       int *skip) {
    double coef = 1.0, gn = (double)NAN;
    *skip = 0;
    if (clip > 0 || skip_nonfinite) {
        const int bad = !isfinite(sumsq);
        gn = sqrt(sumsq) / gscale;
        if (bad && skip_nonfinite) *skip = 1;
        else if (clip > 0 && gn > clip) coef = clip / (gn + 1e-6);
    }
    *gnorm = gn;
    *coef_out = coef;
    ce_coef c;
    c.coef = (float)(coef / gscale);
    c.clip = coef / gscale != 1.0;
    return c;
}

/* ------------------------------------------------------------------ one element */
/* The words of one element as values: 16-bit words in their low bits, fp32 words as their bits. */
typedef struct {
    uint32_t w, m, v;   /* θ, m, v (the hi word of a pair; an 8-bit code) */
    uint16_t comp, dv;  /* δθ, Kahan's c or the remainder; δv */
    float master;
    int8_t corr;        /* bf16-c8's correction byte */
} ce_state;

/* EDQ terms of one element (numerics.md §7): d the intended update, de the change of θ, ds the
 * change of the kept value. */
typedef struct {
    double d, de, ds;
} ce_terms;

CE_INL float ce_word_get(int wf, uint32_t bits) {
    return wf == COLLAGE_WORD_FP32 ? ce_bits_f32(bits) : ce_f32(ce_fmt_of(wf), (uint16_t)bits);
}
CE_INL uint32_t ce_word_put(int wf, float x) {
    return wf == COLLAGE_WORD_FP32 ? ce_f32_bits(x) : (uint32_t)ce_rn(ce_fmt_of(wf), x);
}

/* The 16-bit lines in format f (numerics.md §6): m = m ⊗ β1; m = RN(m + fp32(1−β1)·g); v likewise (an MCF
 * pair: MultMC then GrowAddcmul); den = √v ⊕ eps; raw = ((m ⊗ (−step)) ⊘ den) ⊖ (θ ⊗ (lr·wd)). m, v (and
 * (v, δv)) in s, raw returned (a format-f value). */
CE_INL float ce_lp_raw(const ce_desc *D, int f, ce_state *s, uint16_t gw, const ce_k *k, ce_coef c) {
    float g = ce_f32(f, gw);
    if (c.clip) g = ce_line_lp_clip(f, g, c.coef, k);
    float mm = ce_f32(f, (uint16_t)s->m), vh = ce_f32(f, (uint16_t)s->v);
    if (D->v_pair) {
        mm = ce_round(f, ce_round(f, mm * k->b1) + k->omb1 * g);
        const ce_pair beta = f == COLLAGE_FMT_FP16 ? ce_pair_of(ce_f32(f, k->h2hi), ce_f32(f, k->h2lo))
                                                   : ce_pair_of(ce_f32(f, k->b2hi), ce_f32(f, k->b2lo));
        ce_pair x = ce_pair_of(ce_f32(f, (uint16_t)s->v), ce_f32(f, s->dv));
        x = D->v1 ? ce_mcf_mul_v1(f, x, beta, k) : ce_mcf_mul(f, x, beta, k);
        x = ce_grow_addcmul(f, x, g, g, k->omb2);
        vh = x.hi;
        s->dv = ce_word16(f, x.lo);
    } else {
        ce_line_lp_moments(f, g, &mm, &vh, k);
    }
    s->m = ce_word16(f, mm);
    s->v = ce_word16(f, vh);
    return ce_line_lp_update(f, mm, vh, ce_f32(f, (uint16_t)s->w), k);
}

/* The fp32 lines (numerics.md §6), each operation rounded to fp32: the moments, and the update from them. */
CE_INL void ce_f32_moments(float g, float *m, float *v, const ce_k *k, ce_coef c) {
    if (c.clip) g = g * c.coef;
    ce_line_f32_moments(g, m, v, k);
}
CE_INL float ce_f32_update(float wdec, float m, float v, const ce_k *k) { return ce_line_f32_update(wdec, m, v, k); }
/* The value the fp32 lines' decay multiplies: the master where the scheme has one, else θ. */
CE_INL float ce_decay_base(const ce_desc *D, const ce_state *s) {
    return ce_has_master(D->w) ? s->master : ce_word_get(D->wf, s->w);
}

/* bf16-c8 (c8.h, numerics.md §6): the kept value q of (θ, e), exactly; q + raw rounded once to 16
 * significant bits (TwoSum's error moves a sum at an fp24 midpoint to its side first); θ of q (ties away
 * from zero) and its byte. The same lines as c8_join, c8_add, c8_theta, c8_byte. */
CE_INL float ce_c8_join(uint16_t th, int8_t e) { return ce_bits_f32(((uint32_t)th << 16) + (uint32_t)((int32_t)e * 256)); }
CE_INL float ce_c8_add(float q, float raw) { return ce_line_c8_add(q, raw); }
CE_INL uint16_t ce_c8_theta(float q) { return (uint16_t)(ce_f32_bits(ce_line_c8_theta(q)) >> 16); }
CE_INL int8_t ce_c8_byte(float q, uint16_t th) { return (int8_t)(uint8_t)((ce_f32_bits(q) - ((uint32_t)th << 16)) >> 8); }

/* θ (and its compensation or master) += raw by the weight scheme (numerics.md §6, "Applying raw"); index: the
 * element's slab index, which keys stochastic rounding. EDQ's Δ_eff, Δ_state in t->de, t->ds. Returns ECO's
 * rounding error e (the weight's, for lines.inc eco_feed: the step functions feed it into m before m is
 * rounded to its format, with den the update's denominator, 1 for SGD), 0 for every other scheme. */
CE_INL float ce_apply(const ce_desc *D, ce_state *s, float raw, const ce_k *k, uint64_t index, ce_terms *t) {
    const int f = D->tf;
    if (D->w == COLLAGE_SCHEME_FP32) {
        const float old = ce_bits_f32(s->w), nw = old + raw;
        s->w = ce_f32_bits(nw);
        t->de = t->ds = (double)nw - (double)old;
        return 0.0f;
    }
    const uint16_t old = (uint16_t)s->w;
    const float th = ce_f32(f, old);
    float nw, e = 0.0f; /* θ's new value; ECO's error */
    double ds = 0;
    if (D->w == COLLAGE_SCHEME_SR) {
        nw = ce_line_apply_sr(th, raw, ce_rand32(k->key, index));
    } else if (D->w == COLLAGE_SCHEME_ECO) {
        nw = ce_line_apply_eco(th, raw, ce_rand32(k->key, index), &e);
    } else if (D->w == COLLAGE_SCHEME_MCF || D->w == COLLAGE_SCHEME_FP16_MCF || D->w == COLLAGE_SCHEME_KAHAN) {
        const float cold = ce_f32(f, s->comp); /* Grow or Kahan's lines, raw in fp32 */
        float cnew = cold;
        nw = th;
        if (D->w == COLLAGE_SCHEME_KAHAN) ce_line_apply_kahan(f, &nw, &cnew, raw);
        else ce_line_apply_grow(f, &nw, &cnew, raw);
        s->comp = ce_word16(f, cnew);
        ds = (double)cnew - (double)cold;
    } else if (D->w == COLLAGE_SCHEME_REMAINDER) {
        const float mold = ce_rem_join(old, s->comp);
        float mnew = mold;
        nw = ce_line_apply_remainder(&mnew, raw);
        s->comp = ce_rem_low(mnew, (uint16_t)(ce_f32_bits(nw) >> 16));
        ds = (double)mnew - (double)mold;
    } else if (D->w == COLLAGE_SCHEME_C8) {
        const float qold = ce_c8_join(old, s->corr), qnew = ce_c8_add(qold, raw);
        const uint16_t w = ce_c8_theta(qnew);
        s->corr = ce_c8_byte(qnew, w);
        nw = ce_f32(f, w);
        ds = (double)qnew - (double)qold;
    } else if (ce_has_master(D->w)) {
        const float mold = s->master;
        nw = ce_line_apply_master(f, &s->master, raw);
        ds = (double)s->master - (double)mold;
    } else {
        nw = ce_line_apply_rn(f, th, raw); /* bf16, fp16 */
    }
    s->w = ce_word16(f, nw);
    t->de = (double)nw - (double)th;
    if (D->w == COLLAGE_SCHEME_BF16 || D->w == COLLAGE_SCHEME_FP16 || D->w == COLLAGE_SCHEME_SR || D->w == COLLAGE_SCHEME_ECO)
        t->ds = t->de;
    else if (D->w == COLLAGE_SCHEME_MCF || D->w == COLLAGE_SCHEME_FP16_MCF || D->w == COLLAGE_SCHEME_KAHAN) t->ds = ds + t->de;
    else t->ds = ds;
    return e;
}

/* One element of AdamW for a strategy without 8-bit moments (numerics.md §6; tests/test_compose.c holds
 * it to each preset's lines transcribed case by case): s updated in place from the gradient's bits g;
 * the EDQ terms in *t. */
CE_INL void ce_step(const ce_desc *D, ce_state *s, uint32_t g, const ce_k *k, ce_coef c, uint64_t index, ce_terms *t) {
    if (D->arith == COLLAGE_WORD_FP32) {
        float m = ce_word_get(D->mf, s->m), v = ce_word_get(D->vf, s->v);
        if (D->v_pair) v = v + ce_f32(ce_fmt_of(D->vf), s->dv);
        ce_f32_moments(ce_word_get(D->wf, g), &m, &v, k, c);
        const float raw = ce_f32_update(ce_decay_base(D, s), m, v, k);
        t->d = (double)raw;
        const float e = ce_apply(D, s, raw, k, index, t);
        if (D->w == COLLAGE_SCHEME_ECO) m = ce_line_eco_feed(m, e, ce_line_f32_den(v, k), k);
        s->m = ce_word_put(D->mf, m);
        s->v = ce_word_put(D->vf, v);
        if (D->v_pair) s->dv = ce_rn(ce_fmt_of(D->vf), v - ce_word_get(D->vf, s->v));
    } else {
        const int f = ce_fmt_of(D->arith);
        const float raw = ce_lp_raw(D, f, s, (uint16_t)g, k, c);
        t->d = (double)raw;
        const float e = ce_apply(D, s, raw, k, index, t);
        if (D->w == COLLAGE_SCHEME_ECO) {
            const float den = ce_line_lp_den(f, ce_f32(f, (uint16_t)s->v), k);
            s->m = ce_word16(f, ce_round(f, ce_line_eco_feed(ce_f32(f, (uint16_t)s->m), e, den, k)));
        }
    }
}

/* ------------------------------------------------------------------ 8-bit moments (qcode.c) */
/* The codes' tables as the device keeps them: value[c][q] (collage_qcode_value) and the dynamic codes'
 * thresholds thr[u][k] = fp32((V[k] + V[k + 1]) / 2) in double. */
typedef struct {
    float value[COLLAGE_QCODE_COUNT][256];
    float thr[2][255];
} ce_qtab;

/* A moment's fp32 value from its words: the word, the pair hi + lo (one fp32 addition), or code × scale. */
CE_INL float ce_moment_get(const ce_qtab *T, int wf, int q, uint32_t bits, uint16_t lo, int pair, float scale) {
    if (q >= 0) return T->value[q][bits & 0xffu] * scale;
    const float x = ce_word_get(wf, bits);
    return pair ? x + ce_f32(ce_fmt_of(wf), lo) : x;
}
/* The moments' new fp32 values of one element of an 8-bit strategy (numerics.md §11, the block's first pass):
 * m, v from s (an 8-bit word's code times its block's scale ms, vs). */
CE_INL void ce_q8_moments(const ce_desc *D, const ce_qtab *T, const ce_state *s, uint32_t g, float ms, float vs,
                          const ce_k *k, ce_coef c, float *m, float *v) {
    *m = ce_moment_get(T, D->mf, D->mq, s->m, 0, 0, ms);
    *v = ce_moment_get(T, D->vf, D->vq, s->v, s->dv, D->v_pair, vs);
    ce_f32_moments(ce_word_get(D->wf, g), m, v, k, c);
}
/* The rest of the element from the moments' new values: the update applied (ECO's feedback into *m);
 * a moment that is not 8-bit stored into its word (an 8-bit one is stored by the block, ce_q_code). */
CE_INL void ce_q8_update(const ce_desc *D, ce_state *s, float *m, float v, const ce_k *k, uint64_t index, ce_terms *t) {
    const float raw = ce_f32_update(ce_decay_base(D, s), *m, v, k);
    t->d = (double)raw;
    const float e = ce_apply(D, s, raw, k, index, t);
    if (D->w == COLLAGE_SCHEME_ECO) /* before m is stored or its block quantized */
        *m = ce_line_eco_feed(*m, e, ce_line_f32_den(v, k), k);
    if (D->mq < 0) s->m = ce_word_put(D->mf, *m);
    if (D->vq < 0) {
        s->v = ce_word_put(D->vf, v);
        if (D->v_pair) s->dv = ce_rn(ce_fmt_of(D->vf), v - ce_word_get(D->vf, s->v));
    }
}

/* ------------------------------------------------------------------ Lion and SGD (numerics.md §14) */
/* Lion in fp32 (lines.inc lion_f32), the gradient clipped first: g = fp32(g·coef). */
CE_INL float ce_lion_f32(float g, float *m, float w, const ce_k *k, ce_coef cf) {
    if (cf.clip) g = g * cf.coef;
    return ce_line_lion_f32(w, g, m, k);
}
/* SGD in fp32 (lines.inc sgd_f32), the gradient clipped first. */
CE_INL float ce_sgd_f32(float g, float *m, float w, const ce_k *k, ce_coef cf) {
    if (cf.clip) g = g * cf.coef;
    return ce_line_sgd_f32(w, g, m, k);
}
/* Lion and SGD in the 16-bit format f (lines.inc lion_lp, sgd_lp), the gradient clipped first: g = RN(g·coef). */
CE_INL float ce_lion_lp(int f, float th, float g, float *m, const ce_k *k, ce_coef cf) {
    if (cf.clip) g = ce_round(f, g * cf.coef);
    return ce_line_lion_lp(f, th, g, m, k);
}
CE_INL float ce_sgd_lp(int f, float th, float g, float *m, const ce_k *k, ce_coef cf) {
    if (cf.clip) g = ce_round(f, g * cf.coef);
    return ce_line_sgd_lp(f, th, g, m, k);
}
/* Lion's or SGD's (k->opt) fp32 update from the gradient's bits g and m's fp32 value *m (updated). */
CE_INL float ce_optim_f32(const ce_desc *D, const ce_state *s, uint32_t g, float *m, const ce_k *k, ce_coef c) {
    const float gv = ce_word_get(D->wf, g), w = ce_decay_base(D, s);
    return k->opt == COLLAGE_OPTIM_LION ? ce_lion_f32(gv, m, w, k, c) : ce_sgd_f32(gv, m, w, k, c);
}
/* One element of Lion or SGD (D from ce_desc_no_v) whose m is not 8-bit: the update in the strategy's
 * arithmetic, m into its word, the update applied by the weight scheme; the EDQ terms in *t. */
CE_INL void ce_optim_step(const ce_desc *D, ce_state *s, uint32_t g, const ce_k *k, ce_coef c, uint64_t index,
                          ce_terms *t) {
    float raw, m = ce_word_get(D->mf, s->m);
    const int lp = D->arith != COLLAGE_WORD_FP32, f = ce_fmt_of(D->arith);
    if (!lp) {
        raw = ce_optim_f32(D, s, g, &m, k, c);
    } else {
        const float th = ce_f32(f, (uint16_t)s->w), gv = ce_f32(f, (uint16_t)g);
        raw = k->opt == COLLAGE_OPTIM_LION ? ce_lion_lp(f, th, gv, &m, k, c) : ce_sgd_lp(f, th, gv, &m, k, c);
    }
    t->d = (double)raw;
    const float e = ce_apply(D, s, raw, k, index, t);
    if (D->w == COLLAGE_SCHEME_ECO) { /* SGD's buffer (ECO refuses Lion and SGD without momentum) */
        m = ce_line_eco_feed(m, e, 1.0f, k);
        if (lp) m = ce_round(f, m);
    }
    /* m goes back as its word (a value of f on the 16-bit lines); SGD without momentum leaves it as it is */
    if (!lp) s->m = ce_word_put(D->mf, m);
    else if (k->opt == COLLAGE_OPTIM_LION || k->b1 != 0.0f) s->m = ce_word16(f, m);
}

/* The block's scale and the factor its values are multiplied by (qcode.c collage__q_scale): 0 for a
 * block stored as zeros (NaN, Inf or absmax < 2^-100). */
CE_INL int ce_q_scale(int c, float absmax, int has_nan, float *scale, float *recip) {
    *recip = 0.0f;
    if (has_nan) { *scale = ce_bits_f32(0x7fc00000u); return 0; }
    if (absmax == ce_bits_f32(0x7f800000u)) { *scale = absmax; return 0; }
    if (absmax < 0x1p-100f) { *scale = 0.0f; return 0; }
    if (c == COLLAGE_QCODE_E4M3) { *scale = absmax / 448.0f; *recip = 448.0f / absmax; }
    else { *scale = absmax; *recip = 1.0f / absmax; }
    return 1;
}
CE_INL uint8_t ce_q_zero(int c) { return c == COLLAGE_QCODE_DYN_SIGNED ? 127 : 0; }

CE_INL int ce_clz64(uint64_t x) {
#ifdef __CUDA_ARCH__
    return __clzll((long long)x);
#else
    return __builtin_clzll(x);
#endif
}
/* e4m3 of a finite fp32 x with |x| ≤ 448 (lowp.c encode for COLLAGE_FMT_E4M3): RN ties to even
 * (sr = 0) or SR with the bits r, subnormals on their grid; RN past the largest saturates to it, SR
 * past it gives NaN, as the generic encoder's LP_SAT and LP_SR. */
CE_INL uint8_t ce_e4m3(float x, int sr, uint32_t r) {
    const uint32_t u = ce_f32_bits(x), ef = (u >> 23) & 0xffu, mf = u & 0x7fffffu;
    const uint8_t sign = (uint8_t)((u >> 31) << 7);
    if (ef == 0 && mf == 0) return sign;
    uint64_t sig = ef ? (mf | 0x800000u) : mf;
    const int e2 = (ef ? (int)ef : 1) - 127 - 23, lz = ce_clz64(sig);
    sig <<= lz;
    const int E = e2 - lz + 63, emin = 1 - 7;
    const int d = 64 - 4 + (E < emin ? emin - E : 0);
    uint64_t kept, rem;
    int sticky = 0;
    if (d < 64) { kept = sig >> d; rem = sig << (64 - d); }
    else if (d == 64) { kept = 0; rem = sig; }
    else if (d < 128) { kept = 0; rem = sig >> (d - 64); sticky = (sig << (128 - d)) != 0; }
    else { kept = 0; rem = 0; sticky = 1; }
    int up;
    if (sr) up = ((rem >> 32) + (uint64_t)r) >> 32 != 0;
    else up = (int)(rem >> 63) && ((rem << 1) != 0 || sticky || (kept & 1));
    kept += (uint64_t)up;
    const uint64_t mag = E >= emin ? ((uint64_t)(E + 7) << 3) + (kept - 8u) : kept;
    if (mag > 0x7eu) return (uint8_t)(sign | (sr ? 0x7fu : 0x7eu));
    return (uint8_t)(sign | mag);
}
/* The code of a normalized value y (qcode.c collage__q_code_rn, collage__q_code_sr). */
CE_INL uint8_t ce_q_code(const ce_qtab *T, int c, float y, int sr, uint32_t r) {
    if (c == COLLAGE_QCODE_E4M3) return ce_e4m3(fminf(fmaxf(y, -448.0f), 448.0f), sr, r);
    if (!sr) {
        const float *thr = T->thr[c == COLLAGE_QCODE_DYN_UNSIGNED];
        y = fminf(fmaxf(y, -1.0f), 1.0f);
        int lo = 0;
        for (int step = 128; step; step >>= 1) lo += (thr[lo + step - 1] < y) ? step : 0;
        return (uint8_t)lo;
    }
    const float *V = T->value[c];
    y = fminf(fmaxf(y, V[0]), 1.0f);
    int lo = 0;
    for (int step = 128; step; step >>= 1) lo += (V[lo + step] <= y) ? step : 0;
    if (lo == 255 || V[lo] == y) return (uint8_t)lo;
    const float p = (y - V[lo]) / (V[lo + 1] - V[lo]);
    return (uint8_t)(lo + ((double)r < (double)p * 4294967296.0));
}
/* The random-bit key of the stochastic re-quantization of m (role 1) or v (role 2) (qcode.h q_state_key). */
CE_INL uint64_t ce_q_state_key(uint64_t key, int role) {
    return key ^ (role == 1 ? 0x6d6d6d6d6d6d6d6dull : 0x7676767676767676ull);
}

/* ------------------------------------------------------------------ Σg² (adamw.c collage__sumsq_ref) */
/* Element i of a gradient of θ's format wf, in double (exact). */
CE_INL double ce_grad_f64(int wf, const void *g, size_t i) {
    return wf == COLLAGE_WORD_FP32 ? (double)((const float *)g)[i] : (double)ce_f32(ce_fmt_of(wf), ((const uint16_t *)g)[i]);
}
/* Lane j (0..15) of the Σg² of g[a, b): the squares of elements a + j, a + j + 16, … added in that order,
 * the elements read 16 at a time ahead of their additions (on the device: 16 loads in flight a thread,
 * the kernel's reach into memory; the order of the additions is the same). */
CE_INL double ce_sumsq_lane(int wf, const void *g, size_t a, size_t b, int j) {
    double l = 0;
    size_t i = a + (size_t)j;
    for (; i + 15 * 16 < b; i += 16 * 16) {
        double d[16];
        CE_UNROLL
        for (int u = 0; u < 16; u++) d[u] = ce_grad_f64(wf, g, i + 16 * (size_t)u);
        CE_UNROLL
        for (int u = 0; u < 16; u++) l += d[u] * d[u];
    }
    for (; i < b; i += 16) {
        const double d = ce_grad_f64(wf, g, i);
        l += d * d;
    }
    return l;
}
/* The 16 lanes added as the fixed tree l[j] += l[j + w], w = 8, 4, 2, 1; l is overwritten. */
CE_INL double ce_sumsq_tree(double *l) {
    for (int w = 8; w; w >>= 1)
        for (int j = 0; j < w; j++) l[j] += l[j + w];
    return l[0];
}

/* ------------------------------------------------------------------ blocks */
/* EDQ sums of a block (adamw_impl.h adamw_acc), added element by element in order. */
typedef struct {
    double dot, dot_state, nn;
    uint64_t lost, nonzero;
} ce_acc;
CE_INL void ce_acc_add(ce_acc *a, const ce_terms *t) {
    if (t->d == 0.0) return;
    a->dot += t->de * t->d;
    a->dot_state += t->ds * t->d;
    a->nn += t->d * t->d;
    a->nonzero++;
    a->lost += t->de == 0.0;
}
/* The step's blocks over a tensor of n elements whose element 0 is slab element index0 (adamw.c
 * make_blocks, block_end, with the tensor as one range): CE_BLOCK elements each from element 0; for an
 * 8-bit strategy each ends at a multiple of CE_BLOCK in slab coordinates. The count, and block r's range. */
CE_INL size_t ce_first_end(int q8, uint64_t index0, size_t n) {
    const size_t e = q8 ? (size_t)((index0 / CE_BLOCK + 1) * CE_BLOCK - index0) : CE_BLOCK;
    return e < n ? e : n;
}
CE_INL size_t ce_n_blocks(int q8, uint64_t index0, size_t n) {
    if (n == 0) return 0;
    const size_t e0 = ce_first_end(q8, index0, n);
    return 1 + (n - e0 + CE_BLOCK - 1) / CE_BLOCK;
}
CE_INL void ce_block_range(int q8, uint64_t index0, size_t n, size_t r, size_t *a, size_t *b) {
    const size_t e0 = ce_first_end(q8, index0, n);
    *a = r == 0 ? 0 : e0 + (r - 1) * CE_BLOCK;
    *b = r == 0 ? e0 : (*a + CE_BLOCK < n ? *a + CE_BLOCK : n);
}

/* ------------------------------------------------------------------ an element's words in memory */
/* A tensor's slabs by role (adamw_impl.h adamw_slabs): NULL where the strategy has no such word; an
 * 8-bit word's codes in m or v and its block scales in mscale, vscale (scale of element i: i / 256, the
 * tensor's slab index0 being a multiple of 256). */
typedef struct {
    void *w;
    const void *g;
    void *m, *v;
    uint16_t *comp, *dv;
    float *master, *mscale, *vscale;
    int8_t *corr;       /* bf16-c8's correction bytes */
} ce_ptrs;

CE_INL uint32_t ce_load_word(int wf, const void *p, size_t i) {
    return wf == COLLAGE_WORD_FP32 ? ((const uint32_t *)p)[i]
           : ce_is_q8(wf) ? (uint32_t)((const uint8_t *)p)[i] : (uint32_t)((const uint16_t *)p)[i];
}
CE_INL void ce_store_word(int wf, void *p, size_t i, uint32_t x) {
    if (wf == COLLAGE_WORD_FP32) ((uint32_t *)p)[i] = x;
    else if (ce_is_q8(wf)) ((uint8_t *)p)[i] = (uint8_t)x;
    else ((uint16_t *)p)[i] = (uint16_t)x;
}
/* Element i's words. The compensation word is δθ, Kahan's c or the remainder, whichever the scheme has. */
CE_INL ce_state ce_load(const ce_desc *D, const ce_ptrs *P, size_t i) {
    ce_state s;
    s.w = ce_load_word(D->wf, P->w, i);
    s.m = ce_load_word(D->mf, P->m, i);
    s.v = D->has_v ? ce_load_word(D->vf, P->v, i) : 0;
    s.comp = ce_has_comp(D->w) ? P->comp[i] : 0;
    s.dv = D->v_pair ? P->dv[i] : 0;
    s.master = ce_has_master(D->w) ? P->master[i] : 0.0f;
    s.corr = ce_has_corr(D->w) ? P->corr[i] : 0;
    return s;
}
/* Element i's words of the weight scheme back: θ and its compensation, master or correction byte. */
CE_INL void ce_store_weights(const ce_desc *D, const ce_ptrs *P, size_t i, const ce_state *s) {
    ce_store_word(D->wf, P->w, i, s->w);
    if (ce_has_comp(D->w)) P->comp[i] = s->comp;
    if (ce_has_master(D->w)) P->master[i] = s->master;
    if (ce_has_corr(D->w)) P->corr[i] = s->corr;
}
/* Element i's words back; with q8 set, the 8-bit moments are left to the block's store. */
CE_INL void ce_store(const ce_desc *D, const ce_ptrs *P, size_t i, const ce_state *s) {
    ce_store_weights(D, P, i, s);
    if (D->mq < 0) ce_store_word(D->mf, P->m, i, s->m);
    if (D->has_v && D->vq < 0) ce_store_word(D->vf, P->v, i, s->v);
    if (D->v_pair) P->dv[i] = s->dv;
}

/* ------------------------------------------------------------------ 8 elements at a time */
/* Elements i … i + 7 of a tensor whose slabs all start on 16 bytes, i a multiple of 8: every word read and
 * written 16 bytes at a time (two for an fp32 word), as the CUDA kernel's plain step does; the values are
 * ce_load's and ce_store's. */
#define CE_VEC 8
CE_INL void ce_ld16(const void *p, uint32_t *out) {
#ifdef __CUDA_ARCH__
    const uint4 v = *(const uint4 *)p;
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
#else
    memcpy(out, p, 16);
#endif
}
CE_INL void ce_st16(void *p, const uint32_t *in) {
#ifdef __CUDA_ARCH__
    uint4 v;
    v.x = in[0]; v.y = in[1]; v.z = in[2]; v.w = in[3];
    *(uint4 *)p = v;
#else
    memcpy(p, in, 16);
#endif
}
/* The 8 words of format wf (fp32 or 16-bit) at elements i … i + 7 of p, each in the low bits of out[k]. */
CE_INL void ce_load_word8(int wf, const void *p, size_t i, uint32_t *out) {
    uint32_t q[8];
    if (wf == COLLAGE_WORD_FP32) {
        ce_ld16((const uint32_t *)p + i, q);
        ce_ld16((const uint32_t *)p + i + 4, q + 4);
        for (int k = 0; k < 8; k++) out[k] = q[k];
    } else {
        ce_ld16((const uint16_t *)p + i, q);
        for (int k = 0; k < 8; k++) out[k] = (q[k / 2] >> (16 * (k & 1))) & 0xffffu;
    }
}
CE_INL void ce_store_word8(int wf, void *p, size_t i, const uint32_t *in) {
    uint32_t q[8];
    if (wf == COLLAGE_WORD_FP32) {
        for (int k = 0; k < 8; k++) q[k] = in[k];
        ce_st16((uint32_t *)p + i, q);
        ce_st16((uint32_t *)p + i + 4, q + 4);
    } else {
        for (int k = 0; k < 4; k++) q[k] = (in[2 * k] & 0xffffu) | (in[2 * k + 1] << 16);
        ce_st16((uint16_t *)p + i, q);
    }
}
/* Whether the slabs of a strategy without 8-bit moments allow ce_load8 (every one on 16 bytes). */
CE_INL int ce_vec_ok(const ce_desc *D, const ce_ptrs *P) {
    const void *p[7] = {P->w, P->g, P->m, P->v, P->comp, D->v_pair ? (const void *)P->dv : NULL,
                        ce_has_master(D->w) ? (const void *)P->master : NULL};
    for (int k = 0; k < 7; k++)
        if (p[k] && ((uintptr_t)p[k] & 15u)) return 0;
    return !ce_desc_q8(D) && !ce_has_corr(D->w); /* bf16-c8's bytes go one element at a time */
}
/* Elements i … i + 7 (i a multiple of 8, ce_vec_ok): their words into s and the gradient's bits into g. */
CE_INL void ce_load8(const ce_desc *D, const ce_ptrs *P, size_t i, ce_state *s, uint32_t *g) {
    uint32_t x[8];
    ce_load_word8(D->wf, P->g, i, g);
    ce_load_word8(D->wf, P->w, i, x);
    for (int k = 0; k < 8; k++) s[k].w = x[k];
    ce_load_word8(D->mf, P->m, i, x);
    for (int k = 0; k < 8; k++) s[k].m = x[k];
    ce_load_word8(D->vf, P->v, i, x);
    for (int k = 0; k < 8; k++) s[k].v = x[k];
    if (ce_has_comp(D->w)) ce_load_word8(COLLAGE_WORD_BF16, P->comp, i, x);
    for (int k = 0; k < 8; k++) s[k].comp = ce_has_comp(D->w) ? (uint16_t)x[k] : 0;
    if (D->v_pair) ce_load_word8(COLLAGE_WORD_BF16, P->dv, i, x);
    for (int k = 0; k < 8; k++) s[k].dv = D->v_pair ? (uint16_t)x[k] : 0;
    if (ce_has_master(D->w)) ce_load_word8(COLLAGE_WORD_FP32, P->master, i, x);
    for (int k = 0; k < 8; k++) s[k].master = ce_has_master(D->w) ? ce_bits_f32(x[k]) : 0.0f;
}
CE_INL void ce_store8(const ce_desc *D, const ce_ptrs *P, size_t i, const ce_state *s) {
    uint32_t x[8];
    for (int k = 0; k < 8; k++) x[k] = s[k].w;
    ce_store_word8(D->wf, P->w, i, x);
    for (int k = 0; k < 8; k++) x[k] = s[k].m;
    ce_store_word8(D->mf, P->m, i, x);
    for (int k = 0; k < 8; k++) x[k] = s[k].v;
    ce_store_word8(D->vf, P->v, i, x);
    if (ce_has_comp(D->w)) {
        for (int k = 0; k < 8; k++) x[k] = s[k].comp;
        ce_store_word8(COLLAGE_WORD_BF16, P->comp, i, x);
    }
    if (D->v_pair) {
        for (int k = 0; k < 8; k++) x[k] = s[k].dv;
        ce_store_word8(COLLAGE_WORD_BF16, P->dv, i, x);
    }
    if (ce_has_master(D->w)) {
        for (int k = 0; k < 8; k++) x[k] = ce_f32_bits(s[k].master);
        ce_store_word8(COLLAGE_WORD_FP32, P->master, i, x);
    }
}

/* ------------------------------------------------------------------ the host's part (not COLLAGE_HD) */
/* A step's scalars for a tensor at step t (the steps taken, this one included) with learning rate lr and
 * weight decay wd, exactly as adamw.c step_begin and group_lrwd convert them (host only: libcollage's
 * β2 split and random key). */
static inline ce_k ce_k_make(double lr, double beta1, double beta2, double eps, double wd, uint64_t t, uint64_t seed) {
    ce_k k;
    const double step_size = lr * sqrt(1.0 - pow(beta2, (double)t)) / (1.0 - pow(beta1, (double)t));
    k.b1 = (float)beta1; k.omb1 = (float)(1.0 - beta1);
    k.b2 = (float)beta2; k.omb2 = (float)(1.0 - beta2);
    k.eps = (float)eps;
    k.neg_step = (float)-step_size;
    k.eco = step_size != 0.0 && beta1 > 0.0 ? (float)((1.0 / beta1 - 1.0) / -step_size) : 0.0f;
    k.lrwd = (float)(lr * wd);
    const collage_lp_pair sp = collage_lp_split(COLLAGE_FMT_BF16, beta2), sh = collage_lp_split(COLLAGE_FMT_FP16, beta2);
    k.b2hi = sp.hi; k.b2lo = sp.lo;
    k.h2hi = sh.hi; k.h2lo = sh.lo;
    k.key = collage_rand_key(seed, t);
    k.opt = COLLAGE_OPTIM_ADAMW;
    k.wd = (float)wd;
    k.first = t == 1;
    k.nesterov = k.decoupled = 0;
    return k;
}
/* The description of strategy s (a preset or a composition); COLLAGE_ERR_ARG for an unknown one,
 * COLLAGE_ERR_UNSUPPORTED for a part these lines do not have (a weight scheme after bf16-c8, a moment
 * format after e4m3: teach ce_apply / ce_step its lines first). */
static inline collage_status ce_desc_of(collage_strategy s, ce_desc *D) {
    collage_composition p;
    collage_status st = collage_strategy_parts(s, &p);
    if (st != COLLAGE_OK) return st;
    if (((int)p.weights > (int)COLLAGE_SCHEME_FP16_MASTER && p.weights != COLLAGE_SCHEME_C8 &&
         p.weights != COLLAGE_SCHEME_ECO) ||
        (int)p.m > (int)COLLAGE_MOMENT_E4M3 ||
        (int)p.v > (int)COLLAGE_MOMENT_E4M3)
        return COLLAGE_ERR_UNSUPPORTED;
    *D = ce_desc_make((int)p.weights, (int)p.m, (int)p.v, p.sr_states, s == COLLAGE_PLUS_V1);
    return COLLAGE_OK;
}
/* The codes' tables (ce_qtab) from libcollage's (collage_qcode_value), thresholds as qcode.c makes them. */
static inline void ce_qtab_fill(ce_qtab *T) {
    for (int c = 0; c < COLLAGE_QCODE_COUNT; c++)
        for (int q = 0; q < 256; q++) T->value[c][q] = collage_qcode_value((collage_qcode)c, (uint8_t)q);
    for (int u = 0; u < 2; u++) {
        const float *V = T->value[u ? COLLAGE_QCODE_DYN_UNSIGNED : COLLAGE_QCODE_DYN_SIGNED];
        for (int q = 0; q < 255; q++) T->thr[u][q] = (float)(((double)V[q] + (double)V[q + 1]) * 0.5);
    }
}

#endif

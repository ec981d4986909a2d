/* eft.h — single low-precision operations and error-free transforms, written once for every format.
 * Each op is numerics.md §1-3: evaluate the one operation in fp32, round once to the format. The EFTs and
 * MCF updates follow numerics.md §4-5 line by line. static inline: with a constant format the compiler
 * specialises them, so bf16 callers get the bit-trick rounding and no generic encoder.
 * Build with -ffp-contract=off: a contracted fma would change the error terms (and the results). */
#ifndef COLLAGE_EFT_H
#define COLLAGE_EFT_H

#include "internal.h"
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

typedef collage_format fmt_t;

/* a ⊕ b, a ⊖ b, a ⊗ b, a ⊘ b, √a: correctly rounded (24 ≥ 2p + 2 for every format here). */
static inline uint16_t lp_add_(fmt_t f, uint16_t a, uint16_t b) { return lp_rn(f, lp_f32(f, a) + lp_f32(f, b)); }
static inline uint16_t lp_sub_(fmt_t f, uint16_t a, uint16_t b) { return lp_rn(f, lp_f32(f, a) - lp_f32(f, b)); }
static inline uint16_t lp_mul_(fmt_t f, uint16_t a, uint16_t b) { return lp_rn(f, lp_f32(f, a) * lp_f32(f, b)); }
static inline uint16_t lp_div_(fmt_t f, uint16_t a, uint16_t b) { return lp_rn(f, lp_f32(f, a) / lp_f32(f, b)); }
static inline uint16_t lp_sqrt_(fmt_t f, uint16_t a) { return lp_rn(f, sqrtf(lp_f32(f, a))); }

/* Fast2Sum. Needs |a| ≥ |b| or a = 0. Then s + e = a + b exactly (barring overflow).
 * s = a ⊕ b; e = b ⊖ (s ⊖ a). */
static inline collage_lp_pair lp_fast_two_sum_(fmt_t f, uint16_t a, uint16_t b) {
    uint16_t s = lp_add_(f, a, b);
    uint16_t e = lp_sub_(f, b, lp_sub_(f, s, a));
    return (collage_lp_pair){s, e};
}

/* TwoSum (Knuth/Møller). No precondition: s + e = a + b exactly (barring overflow). */
static inline collage_lp_pair lp_two_sum_(fmt_t f, uint16_t a, uint16_t b) {
    uint16_t s = lp_add_(f, a, b);
    uint16_t bv = lp_sub_(f, s, a);
    uint16_t av = lp_sub_(f, s, bv);
    uint16_t e = lp_add_(f, lp_sub_(f, a, av), lp_sub_(f, b, bv));
    return (collage_lp_pair){s, e};
}

/* TwoProd. p = a ⊗ b; e = RN(fp32(a·b) − p). a·b has ≤ 2p ≤ 22 bits, so fp32(a·b) is exact unless
 * it underflows fp32's normal range; then p + e = a·b exactly whenever a·b − p is representable. */
static inline collage_lp_pair lp_two_prod_(fmt_t f, uint16_t a, uint16_t b) {
    float ab = lp_f32(f, a) * lp_f32(f, b);
    uint16_t p = lp_rn(f, ab);
    uint16_t e = lp_rn(f, ab - lp_f32(f, p));
    return (collage_lp_pair){p, e};
}

/* Grow((m, r), d), Collage's weight update, in the exact order of numerics.md §4-5:
 * s = m ⊕ d; r = r ⊕ (d ⊖ (s ⊖ m)); m' = s ⊕ r; r' = r ⊖ (m' ⊖ s).
 * Invariant: the result is normalised (m' = RN(m' + r')) whenever no overflow occurs. */
static inline collage_lp_pair lp_grow_(fmt_t f, collage_lp_pair x, uint16_t d) {
    uint16_t s = lp_add_(f, x.hi, d);
    uint16_t r = lp_add_(f, x.lo, lp_sub_(f, d, lp_sub_(f, s, x.hi)));
    uint16_t m = lp_add_(f, s, r);
    r = lp_sub_(f, r, lp_sub_(f, m, s));
    return (collage_lp_pair){m, r};
}

/* GrowAddcmul((m, r), t1, t2, c): adds c·t1·t2.
 * x = RN(fp32(c)·fp32(t1·t2)); s = m ⊕ x; x = x ⊕ (m ⊖ s); x = x ⊕ r; m' = s ⊕ x; r' = x ⊖ (m' ⊖ s). */
static inline collage_lp_pair lp_grow_addcmul_(fmt_t f, collage_lp_pair y, uint16_t t1, uint16_t t2, float c) {
    uint16_t x = lp_rn(f, c * (lp_f32(f, t1) * lp_f32(f, t2)));
    uint16_t s = lp_add_(f, y.hi, x);
    x = lp_add_(f, x, lp_sub_(f, y.hi, s));
    x = lp_add_(f, x, y.lo);
    uint16_t m = lp_add_(f, s, x);
    uint16_t r = lp_sub_(f, x, lp_sub_(f, m, s));
    return (collage_lp_pair){m, r};
}

/* MultMC((m, r), (bh, bl)), the corrected product of an MCF by an MCF scalar:
 * (p, e) = TwoProd(m, bh); r = r ⊗ bh; r = RN(fp32(r) + fp32(m·bl)); r = r ⊕ e;
 * m' = p ⊕ r; r' = r ⊖ (m' ⊖ p). */
static inline collage_lp_pair lp_mcf_mul_(fmt_t f, collage_lp_pair x, collage_lp_pair b) {
    collage_lp_pair pe = lp_two_prod_(f, x.hi, b.hi);
    uint16_t r = lp_mul_(f, x.lo, b.hi);
    r = lp_rn(f, lp_f32(f, r) + lp_f32(f, x.hi) * lp_f32(f, b.lo));
    r = lp_add_(f, r, pe.lo);
    uint16_t m = lp_add_(f, pe.hi, r);
    r = lp_sub_(f, r, lp_sub_(f, m, pe.hi));
    return (collage_lp_pair){m, r};
}

/* The published MultMC (Collage code, MultMC_), kept only to reproduce the paper. It multiplies m
 * in place, so the error term is RN(fp32(p·bh) − p) and the cross term uses p·bl instead of m·bl,
 * and its last line subtracts (m' − m') = 0:
 * p = m ⊗ bh; e = RN(fp32(p·bh) − p); r = r ⊗ bh; r = RN(fp32(r) + fp32(p·bl)); r = r ⊕ e;
 * m' = p ⊕ r; r' = r. */
static inline collage_lp_pair lp_mcf_mul_v1_(fmt_t f, collage_lp_pair x, collage_lp_pair b) {
    uint16_t p = lp_mul_(f, x.hi, b.hi);
    float pf = lp_f32(f, p);
    uint16_t e = lp_rn(f, -pf + pf * lp_f32(f, b.hi));
    uint16_t r = lp_mul_(f, x.lo, b.hi);
    r = lp_rn(f, lp_f32(f, r) + pf * lp_f32(f, b.lo));
    r = lp_add_(f, r, e);
    uint16_t m = lp_add_(f, p, r);
    return (collage_lp_pair){m, r};
}

#endif

/* c8.h — bf16-c8's weight (numerics.md §6, "bf16-c8"): θ in bf16 and a correction byte e, which
 * together hold the kept value q to 16 significant bits ("fp24": the fp32 whose low 8 bits are zero).
 * The byte is the remainder of bf16-remainder cut to its upper 8 bits, so the pair decodes exactly
 * (integer arithmetic on the bits, no product by a scale), binade boundaries and subnormals included;
 * q is updated by one correctly rounded addition. The scalar reference (adamw_ref.c) and the vector
 * kernels (adamw_kernel.inc, adamw_q8.inc) both follow these lines bit for bit. */
#ifndef COLLAGE_C8_H
#define COLLAGE_C8_H

#include "internal.h"

/* The kept value of (θ, e): the fp32 whose bits are θ·2^16 + e·2^8, e signed. Exact: no rounding.
 * Since fp32 bits order magnitudes, e moves q away from zero (e > 0) or toward it (e < 0) by e units of
 * its 16th significant bit (2^-141 in the subnormals), and |q − θ| ≤ half an ulp of θ (below a power of
 * two θ, the units are the lower binade's). The encoders below never pair θ = ±0 with e < 0 (that
 * would decode to a NaN); θ = ±Inf with e < 0 is the rounding of a finite q above bf16's largest value
 * by half its ulp or more, and decodes back to that q. */
static inline float c8_join(uint16_t th, int8_t e) {
    return bits_f32(((uint32_t)th << 16) + (uint32_t)((int32_t)e * 256));
}

/* RN16(u): fp32 bits u rounded to a multiple of 2^8 (16 significant bits), ties to even; the carry
 * goes into the exponent, so a value rounds up into the next binade, and above the largest fp24 value
 * (0x7f7fff00) by half its ulp or more to Inf, as IEEE rounding does. A NaN with a zero low byte (every
 * NaN fp32 arithmetic on the step's values makes) is left as it is. */
static inline uint32_t c8_rn16_bits(uint32_t u) { return (u + 0x7fu + ((u >> 8) & 1u)) & 0xffffff00u; }

/* RN16(q + raw), correctly rounded (one rounding of the exact sum), for q an fp24 value and raw any
 * fp32. s = fp32(q + raw) and its TwoSum error t (s + t = q + raw exactly, for a finite s); rounding s
 * to 16 bits gives the exact sum's rounding except where s lies exactly halfway between two fp24
 * values (low byte 0x80) and t ≠ 0: the exact sum is then off the midpoint on t's side, and s is first
 * moved one fp32 step toward it (up in magnitude when t has s's sign). Elsewhere s and the exact sum
 * lie on the same side of every fp24 midpoint, which are fp32 values (|s − (q + raw)| ≤ half an fp32
 * step). So |RN16(q + raw) − (q + raw)| ≤ 2^-9·ulp_bf16(result). Not finite s: s itself (TwoSum's t is
 * then NaN, but s's low byte is zero). */
static inline float c8_add(float q, float raw) {
    const float s = q + raw, bb = s - q, t = (q - (s - bb)) + (raw - bb);
    uint32_t u = f32_bits(s);
    if ((u & 0xffu) == 0x80u && t != 0.0f) u += ((f32_bits(t) ^ u) >> 31) ? 0xffffffffu : 1u;
    return bits_f32(c8_rn16_bits(u));
}

/* θ of an fp24 q: its bits rounded to 16, ties away from zero (so that every e fits in [−128, 127]:
 * q − θ in bits is in [−0x8000, 0x7f00]). θ is a nearest bf16 value to q; it is RN_bf16(q) except at
 * q exactly halfway between two bf16 values, where it takes the one of larger magnitude. */
static inline uint16_t c8_theta(float q) { return (uint16_t)((f32_bits(q) + 0x8000u) >> 16); }
/* e of an fp24 q and its θ = c8_theta(q): (bits(q) − θ·2^16) / 2^8, exactly; c8_join(θ, e) == q. */
static inline int8_t c8_byte(float q, uint16_t th) {
    return (int8_t)(uint8_t)((f32_bits(q) - ((uint32_t)th << 16)) >> 8);
}

#endif

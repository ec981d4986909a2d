/* qcode.h — the 8-bit block codes' tables and scalar steps (qcode.c, numerics.md §11), shared by the
 * public block and row calls, the optimizer's scalar reference and its vector kernels. */
#ifndef COLLAGE_QCODE_H
#define COLLAGE_QCODE_H

#include "internal.h"

/* Magnitude buckets of the dynamic codes: bucket b covers fp32 bit patterns [(b − 1 + Q_B0) << 16,
 * (b + Q_B0) << 16) (7 bits of fraction: 128 buckets per binade from 2^-24 up), bucket 0 everything
 * below 2^-24, the last everything from 1 up. Each holds at most one of the code's positive thresholds
 * (checked when the tables are built): below[b] thresholds lie under the bucket, thr[b] is the one
 * inside it (+Inf if none). So #{t < m} = below + (thr < m) and #{t ≤ m} = below + (thr ≤ m). The
 * stochastic rounding searches the code's positive values the same way (vbelow, vbthr: the signed
 * code's V[128..255], the unsigned code's V[1..255]; at most one per bucket, checked likewise). */
#define Q_B0 0x3380u                    /* 2^-24 >> 16 */
#define Q_NB (0x3F80u - Q_B0 + 2u)      /* through [1, 2) */
static inline uint32_t q_bucket(float m) {  /* m ≥ 0 or +0 */
    uint32_t hi = f32_bits(m) >> 16;
    return hi < Q_B0 ? 0u : hi >= 0x3F80u ? Q_NB - 1u : hi - Q_B0 + 1u;
}

typedef struct {
    float value[COLLAGE_QCODE_COUNT][256];      /* code → value at scale 1 */
    float thr[2][255];                           /* dynamic codes: the midpoints, rounded to fp32 */
    int32_t below[2][Q_NB];                      /* signed: over its 128 positive thresholds; unsigned: 255 */
    float bthr[2][Q_NB];
    int32_t vbelow[2][Q_NB];                     /* the positive values: signed 128, unsigned 255 */
    float vbthr[2][Q_NB];
} q_tables;
/* The tables, built once (thread-safe). */
const q_tables *collage__q_tables(void);

/* The block's scale and the factor its values are multiplied by before rounding (numerics.md §11):
 * returns 0 for a block stored as zeros (scale 0, NaN or Inf: *scale set, every code the zero code). */
int collage__q_scale(collage_qcode c, float absmax, int has_nan, float *scale, float *recip);
/* The code of a normalized value y (already multiplied by recip), to nearest or stochastically with
 * the 32 random bits r. */
uint8_t collage__q_code_rn(const q_tables *T, collage_qcode c, float y);
uint8_t collage__q_code_sr(const q_tables *T, collage_qcode c, float y, uint32_t r);
/* The vector twins of the block quantizer, to nearest and stochastically, and of the dequantizer (the
 * optimizer's kernel units): the same bits as collage_qblock_quantize (sr, key and index0 as there)
 * and collage_qblock_dequantize, for every input. */
void collage__qblock_quantize_avx512(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scale, int sr,
                                     uint64_t key, uint64_t index0);
void collage__qblock_quantize_avx2(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scale, int sr,
                                   uint64_t key, uint64_t index0);
void collage__qblock_dequantize_avx512(collage_qcode c, const uint8_t *q, float scale, size_t n, float *x);
void collage__qblock_dequantize_avx2(collage_qcode c, const uint8_t *q, float scale, size_t n, float *x);
/* The random-bit key of the stochastic re-quantization of the optimizer's m (role 1) or v (role 2)
 * in the step whose key is key. */
static inline uint64_t q_state_key(uint64_t key, int role) {
    return key ^ (role == 1 ? 0x6d6d6d6d6d6d6d6dull : 0x7676767676767676ull);
}

#endif

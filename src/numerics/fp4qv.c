/* fp4qv.c — the 4-bit quantizer's vector driver (fp4q.h, numerics.md §15 "The vector quantizer"): the
 * loops of fp4q_kernel.inc for the ISA in force, shared among threads, giving the scalar fp4q.c's tensor
 * scale, scale bytes and codes bit for bit, and each element's value times its block scale in bf16 for the
 * 4-bit products. */
#include "fp4q.h"
#include "fp8q.h" /* collage__fp8q_sat_row */
#include <float.h>
#include <math.h>

#define FP4Q_NAME(x) x##_ref
#include "fp4q_kernel.inc"
#undef FP4Q_NAME

typedef struct {
    uint32_t (*amax_f)(const float *x, int ld, int r0, int r1, int c0, int c1);
    void (*blockmax_f)(const float *x, int n, int bc, uint32_t *m);
    void (*blockmax_b)(const uint16_t *x, int n, int bc, uint32_t *m);
    void (*colmax_f)(const float *x, int ld, int r0, int r1, int c0, int c1, uint32_t *m);
    void (*run_f)(int sr, const float *x, int n, float enc, float d, uint32_t k1, uint32_t k2, uint32_t lo0,
                  uint8_t *codes, uint16_t *vals);
    void (*run_cols_f)(int sr, const float *x, int n, const float *enc, const float *d, uint32_t k1, uint32_t k2,
                       uint32_t lo0, uint8_t *codes, uint16_t *vals);
    uint32_t (*amax_b)(const uint16_t *x, int ld, int r0, int r1, int c0, int c1);
    void (*colmax_b)(const uint16_t *x, int ld, int r0, int r1, int c0, int c1, uint32_t *m);
    void (*run_b)(int sr, const uint16_t *x, int n, float enc, float d, uint32_t k1, uint32_t k2, uint32_t lo0,
                  uint8_t *codes, uint16_t *vals);
    void (*run_cols_b)(int sr, const uint16_t *x, int n, const float *enc, const float *d, uint32_t k1, uint32_t k2,
                       uint32_t lo0, uint8_t *codes, uint16_t *vals);
    void (*run_blocks_f)(int sr, const float *x, int n, int bc, const float *enc, const float *d, uint32_t k1,
                         uint32_t k2, uint32_t lo0, uint8_t *codes, uint16_t *vals);
    void (*run_blocks_b)(int sr, const uint16_t *x, int n, int bc, const float *enc, const float *d, uint32_t k1,
                         uint32_t k2, uint32_t lo0, uint8_t *codes, uint16_t *vals);
} fp4q_kernels;

#define FP4Q_KERNELS(S)                                                                                        \
    (fp4q_kernels){collage__fp4q_amax_f32##S,  collage__fp4q_blockmax_f32##S, collage__fp4q_blockmax_bf16##S,   \
                   collage__fp4q_colmax_f32##S,  collage__fp4q_run_f32##S,                                      \
                   collage__fp4q_run_cols_f32##S, collage__fp4q_amax_bf16##S, collage__fp4q_colmax_bf16##S,      \
                   collage__fp4q_run_bf16##S, collage__fp4q_run_cols_bf16##S, collage__fp4q_run_blocks_f32##S,       \
                   collage__fp4q_run_blocks_bf16##S}
static fp4q_kernels kernels_of(collage_isa isa) {
    switch (isa) {
    case COLLAGE_ISA_AVX512: return FP4Q_KERNELS(_avx512);
    case COLLAGE_ISA_AVX2: return FP4Q_KERNELS(_avx2);
    default: return FP4Q_KERNELS(_ref);
    }
}

void collage__fp4q_round_row(collage_isa isa, int sr, const float *y, const uint32_t *r, int n, uint8_t *codes,
                             uint32_t *bits) {
    if (isa == COLLAGE_ISA_AVX512) collage__fp4q_round_row_avx512(sr, y, r, n, codes, bits);
    else if (isa == COLLAGE_ISA_AVX2) collage__fp4q_round_row_avx2(sr, y, r, n, codes, bits);
    else collage__fp4q_round_row_ref(sr, y, r, n, codes, bits);
}

/* The input tensor: fp32 or bf16 rows, and the loops for it. */
typedef struct {
    fp4q_kernels k;
    const float *f;
    const uint16_t *b;
    int ld;
} fp4_in;

static uint32_t in_amax(const fp4_in *in, int r0, int r1, int c0, int c1) {
    return in->b ? in->k.amax_b(in->b, in->ld, r0, r1, c0, c1) : in->k.amax_f(in->f, in->ld, r0, r1, c0, c1);
}
static void in_colmax(const fp4_in *in, int r0, int r1, int c0, int c1, uint32_t *m) {
    if (in->b) in->k.colmax_b(in->b, in->ld, r0, r1, c0, c1, m);
    else in->k.colmax_f(in->f, in->ld, r0, r1, c0, c1, m);
}

/* Block row [r0, r1)'s amaxes into am[0 … gc) (as fp32 values); returns their largest bits. Blocks one
 * column wide, and 2-D blocks (NVFP4's 16 × 16 weight blocks), are taken a row at a time over COLMAX_CHUNK
 * columns (each column's max over the block row), a 2-D block's then over its bc columns' maxima; blocks
 * one row high along the row by the blockmax loop, COLMAX_CHUNK blocks at a time. A max of magnitude bits
 * is exact in any order, so every grouping gives the same amaxes. */
#define COLMAX_CHUNK 1024
#define RUN_CHUNK 256
static uint32_t amax_block_row(const fp4_in *in, int r0, int r1, int cols, int bc, float *am) {
    uint32_t top = 0;
    if (r1 - r0 == 1 && bc > 1) {
        uint32_t m[COLMAX_CHUNK];
        const int gc = (cols + bc - 1) / bc;
        for (int g0 = 0; g0 < gc; g0 += COLMAX_CHUNK) {
            const int ng = gc - g0 < COLMAX_CHUNK ? gc - g0 : COLMAX_CHUNK, c0 = g0 * bc;
            const int n = cols - c0 < ng * bc ? cols - c0 : ng * bc;
            const size_t o = (size_t)r0 * in->ld + (size_t)c0;
            if (in->b) in->k.blockmax_b(in->b + o, n, bc, m);
            else in->k.blockmax_f(in->f + o, n, bc, m);
            for (int g = 0; g < ng; g++) am[g0 + g] = bits_f32(m[g]), top = m[g] > top ? m[g] : top;
        }
        return top;
    }
    if (COLMAX_CHUNK % bc == 0) {
        uint32_t m[COLMAX_CHUNK];
        for (int c0 = 0; c0 < cols; c0 += COLMAX_CHUNK) {
            const int n = cols - c0 < COLMAX_CHUNK ? cols - c0 : COLMAX_CHUNK;
            memset(m, 0, (size_t)n * sizeof *m);
            in_colmax(in, r0, r1, c0, c0 + n, m);
            for (int c = 0, g = c0 / bc; c < n; g++) { /* block g: the maxima of its columns */
                uint32_t a = 0;
                for (const int end = c + bc < n ? c + bc : n; c < end; c++) a = m[c] > a ? m[c] : a;
                am[g] = bits_f32(a), top = a > top ? a : top;
            }
        }
        return top;
    }
    for (int c0 = 0, g = 0; c0 < cols; c0 += bc, g++) {
        const uint32_t a = in_amax(in, r0, r1, c0, c0 + bc < cols ? c0 + bc : cols);
        am[g] = bits_f32(a), top = a > top ? a : top;
    }
    return top;
}

/* n elements of row r from column c0 (an element's factors at enc[i], d[i] when cols_mode, else enc[0],
 * d[0]), SR's words collage_rand32(key, idx + i): a run is cut where idx's high half changes, so each piece
 * has one rand_k1. */
typedef struct {
    const fp4_in *in;
    int sr, cols_mode;
    uint64_t key;
} run_ctx;

static void run_piece(const run_ctx *rc, size_t off, int n, uint64_t idx, const float *enc, const float *d,
                      uint8_t *codes, uint16_t *vals) {
    const uint32_t k2 = rand_k2(rc->key);
    const fp4q_kernels *k = &rc->in->k;
    while (n > 0) {
        const uint32_t lo = (uint32_t)idx;
        const uint64_t room = ((uint64_t)1 << 32) - lo;
        const int m = (uint64_t)n < room ? n : (int)room;
        const uint32_t k1 = rand_k1(rc->key, (uint32_t)(idx >> 32));
        if (rc->cols_mode) {
            if (rc->in->b) k->run_cols_b(rc->sr, rc->in->b + off, m, enc, d, k1, k2, lo, codes, vals);
            else k->run_cols_f(rc->sr, rc->in->f + off, m, enc, d, k1, k2, lo, codes, vals);
            enc += m, d += m;
        } else if (rc->in->b) {
            k->run_b(rc->sr, rc->in->b + off, m, enc[0], d[0], k1, k2, lo, codes, vals);
        } else {
            k->run_f(rc->sr, rc->in->f + off, m, enc[0], d[0], k1, k2, lo, codes, vals);
        }
        off += (size_t)m, idx += (uint64_t)m, n -= m;
        if (codes) codes += m;
        if (vals) vals += m;
    }
}

/* The value of an e4m3 code c (0 … 0x7E: a block scale is never negative nor NaN), from its fields. */
static inline float e4m3_value(uint32_t c) {
    const uint32_t e = c >> 3, m = c & 7u;
    return e ? bits_f32(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
}

/* Each block's scale byte, element factor (into enc, which holds the amaxes first) and scale value d:
 * collage__fp4_block_scale's and collage__fp4_scale_value's results by a shorter road, blocks shared
 * among the threads. NVFP4: the same fp32 operations, e4m3's rounding by the ISA's fp8 row loop
 * (collage__fp8q_sat_row: collage_lp_from_f32_sat's codes, test_fp8), and from each of the 127 bytes a
 * block can take (never a NaN: SAT) its value, from the code's fields, and its factor, in tables made once
 * per tensor. MXFP4: floor(log2 a) from the exponent field, exact for a normal a; a subnormal or zero a
 * gives a field of 0 and E = −129, clamped to −127 as ilogbf's (at most −127) would be. */
#define SCALE_CHUNK 512
static void block_scales(collage_isa isa, collage_fp4_recipe r, const collage_fp4_tensor *t, size_t nb,
                         uint8_t *scales, float *enc, float *d, int nt) {
    (void)nt; /* OpenMP off */
    if (r == COLLAGE_FP4_MXFP4) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nb >= 16384)
        for (size_t b = 0; b < nb; b++) {
            int e = (int)((f32_bits(enc[b]) >> 23) & 0xffu) - 127 - COLLAGE_FP4_MX_EMAX;
            e = e < -127 ? -127 : e > 125 ? 125 : e;
            scales[b] = (uint8_t)(e + 127);
            enc[b] = bits_f32((uint32_t)(127 - e) << 23);
            d[b] = e == -127 ? bits_f32(0x00400000u) : bits_f32((uint32_t)(e + 127) << 23);
        }
        return;
    }
    float dv[0x7f], fv[0x7f];
    for (uint32_t c = 0; c < 0x7f; c++) {
        const float f = 1.0f / (e4m3_value(c) * t->dec);
        dv[c] = e4m3_value(c), fv[c] = isinf(f) ? FLT_MAX : f;
    }
    const float per = t->enc * (1.0f / 6.0f);
    const long chunks = (long)((nb + SCALE_CHUNK - 1) / SCALE_CHUNK);
#pragma omp parallel for schedule(static) num_threads(nt) if (nb >= 16384)
    for (long ch = 0; ch < chunks; ch++) {
        const size_t b0 = (size_t)ch * SCALE_CHUNK, n = nb - b0 < SCALE_CHUNK ? nb - b0 : SCALE_CHUNK;
        float y[SCALE_CHUNK];
        for (size_t i = 0; i < n; i++) y[i] = enc[b0 + i] * per;
        collage__fp8q_sat_row(isa, COLLAGE_FMT_E4M3, y, (int)n, scales + b0);
        for (size_t i = 0; i < n; i++) d[b0 + i] = dv[scales[b0 + i]], enc[b0 + i] = fv[scales[b0 + i]];
    }
}

static collage_status check_v(const collage_fp4_quant *q, const float *xf, const uint16_t *xb, int rows, int cols,
                              int ld) {
    if ((unsigned)q->recipe >= COLLAGE_FP4_RECIPE_COUNT || (unsigned)q->role > COLLAGE_FP4_GRAD ||
        (q->k_axis != 0 && q->k_axis != 1) || (!xf == !xb))
        return COLLAGE_ERR_ARG;
    if (rows < 1 || cols < 1 || ld < cols) return COLLAGE_ERR_SIZE;
    return COLLAGE_OK;
}

/* Every block's amax into enc (row-major over the grid), block rows shared among the threads; returns the
 * largest magnitude bits. */
static uint32_t amax_grid(const fp4_in *in, int rows, int cols, int br, int bc, float *am, int nt) {
    const int gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
    uint32_t top = 0;
    (void)nt; /* OpenMP off */
#pragma omp parallel for schedule(static) num_threads(nt) reduction(max : top) if (gr > 1 && (size_t)rows * cols >= 16384)
    for (int b = 0; b < gr; b++) {
        const int r0 = b * br, r1 = r0 + br < rows ? r0 + br : rows;
        const uint32_t a = amax_block_row(in, r0, r1, cols, bc, am + (size_t)b * gc);
        top = a > top ? a : top;
    }
    return top;
}

collage_status collage__fp4_quantize_isa(collage_isa isa, const collage_fp4_quant *q, const float *xf,
                                         const uint16_t *xb, int rows, int cols, int ld, uint8_t *codes,
                                         uint16_t *vals, uint8_t *scales, float *enc, float *d,
                                         collage_fp4_tensor *t, int nt) {
    if (!q || !scales || !enc || !d || !t) return COLLAGE_ERR_NULL;
    const collage_status st = check_v(q, xf, xb, rows, cols, ld);
    if (st != COLLAGE_OK) return st;
    const fp4_in in = {kernels_of(isa), xf, xb, ld};
    int br, bc;
    collage__fp4_block_shape(q, &br, &bc);
    const int gc = (cols + bc - 1) / bc;
    const size_t nb = collage__fp4_blocks(q, rows, cols);
    const uint32_t top = amax_grid(&in, rows, cols, br, bc, enc, nt);
    if (top >= 0x7f800000u) return COLLAGE_ERR_NONFINITE;
    const collage_fp4_tensor ts = collage__fp4_tensor_scale(q->recipe, bits_f32(top));
    block_scales(isa, q->recipe, &ts, nb, scales, enc, d, nt);
    const run_ctx rc = {&in, q->sr, 1, q->key}; /* every run takes per-element factors */
    (void)nt;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)rows * cols >= 32768)
    for (int r = 0; r < rows; r++) {
        const size_t g0 = (size_t)(r / br) * gc, o = (size_t)r * cols;
        const uint64_t idx = q->index0 + (uint64_t)o;
        if (bc == 1) {
            run_piece(&rc, (size_t)r * ld, cols, idx, enc + g0, d + g0, codes ? codes + o : NULL, vals ? vals + o : NULL);
            continue;
        }
        if (FP4Q_CHUNK % bc == 0 && (idx & 0xffffffffu) + (uint64_t)cols <= (uint64_t)1 << 32) {
            /* one rand_k1 for the row: its blocks' factors spread in the loop */
            const uint32_t k1 = rand_k1(q->key, (uint32_t)(idx >> 32)), k2 = rand_k2(q->key), lo = (uint32_t)idx;
            uint8_t *co = codes ? codes + o : NULL;
            uint16_t *va = vals ? vals + o : NULL;
            if (in.b) in.k.run_blocks_b(q->sr, in.b + (size_t)r * ld, cols, bc, enc + g0, d + g0, k1, k2, lo, co, va);
            else in.k.run_blocks_f(q->sr, in.f + (size_t)r * ld, cols, bc, enc + g0, d + g0, k1, k2, lo, co, va);
            continue;
        }
        float ee[RUN_CHUNK], de[RUN_CHUNK]; /* the row's block factors spread over its elements, a chunk at a time */
        for (int c0 = 0; c0 < cols; c0 += RUN_CHUNK) {
            const int n = cols - c0 < RUN_CHUNK ? cols - c0 : RUN_CHUNK;
            for (int c = 0, g = c0 / bc, e = bc - c0 % bc; c < n; g++, e = bc) /* block g's e elements */
                for (const int end = c + e < n ? c + e : n; c < end; c++) ee[c] = enc[g0 + (size_t)g], de[c] = d[g0 + (size_t)g];
            run_piece(&rc, (size_t)r * ld + c0, n, idx + (uint64_t)c0, ee, de, codes ? codes + o + c0 : NULL,
                      vals ? vals + o + c0 : NULL);
        }
    }
    *t = ts;
    return COLLAGE_OK;
}

collage_status collage__fp4_quantize_v(const collage_fp4_quant *q, const float *xf, const uint16_t *xb, int rows,
                                       int cols, int ld, uint8_t *codes, uint16_t *vals, uint8_t *scales, float *enc,
                                       float *d, collage_fp4_tensor *t, int nt) {
    return collage__fp4_quantize_isa(collage_get_isa(), q, xf, xb, rows, cols, ld, codes, vals, scales, enc, d, t, nt);
}

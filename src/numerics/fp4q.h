/* fp4q.h — the 4-bit block formats (numerics.md §15): NVFP4 (E2M1 codes in blocks of 16, each block with an
 * E4M3 scale, and one fp32 scale per tensor; weights in 16×16 blocks) and MXFP4 (E2M1 codes in blocks of 32
 * with an E8M0 power-of-two scale). The scalar quantizer (fp32 → codes and scales, round to nearest or
 * stochastic) and dequantizer: the twin that vector loops and 4-bit products are tested against.
 * Private to the library and its tests. */
#ifndef COLLAGE_FP4Q_H
#define COLLAGE_FP4Q_H

#include "internal.h"

typedef enum {
    COLLAGE_FP4_NVFP4 = 0, /* NVIDIA (arXiv 2509.25149, Transformer Engine): 16 along K, E4M3 scales, fp32 tensor scale */
    COLLAGE_FP4_MXFP4,     /* OCP Microscaling v1.0: 32 along K, E8M0 scales */
    COLLAGE_FP4_RECIPE_COUNT
} collage_fp4_recipe;

/* What a tensor is to its product: NVFP4 gives a weight 16×16 blocks. */
typedef enum { COLLAGE_FP4_ACT = 0, COLLAGE_FP4_WEIGHT, COLLAGE_FP4_GRAD } collage_fp4_role;

#define COLLAGE_FP4_NV 16   /* NVFP4's block length along K, and its weight blocks' side */
#define COLLAGE_FP4_MX 32   /* MXFP4's block length along K */
#define COLLAGE_FP4_MX_EMAX 2 /* the exponent of E2M1's largest power of two (4): OCP's emax_elem */

const char *collage__fp4_recipe_name(collage_fp4_recipe r); /* "nvfp4", "mxfp4"; NULL if unknown */
collage_status collage__fp4_recipe_parse(const char *name, collage_fp4_recipe *out);

/* One quantization's settings. The tensor is row-major (rows, cols); k_axis 1: the product's K runs along
 * a row, 0: down a column (as in fp8q.h). sr = 1 rounds each element stochastically, element (r, c) with
 * the bits collage_rand32(key, index0 + r·cols + c) (the recipes do so for gradients); sr = 0 to nearest. */
typedef struct {
    collage_fp4_recipe recipe;
    collage_fp4_role role;
    int k_axis;
    int sr;
    uint64_t key, index0;
} collage_fp4_quant;

/* The per-tensor scale. NVFP4: amax = max |x| over the tensor; enc = fp32(6·448 / amax), FLT_MAX where that
 * overflows, 1 for amax = 0; dec = fp32(1 / enc). MXFP4 has none: enc = dec = 1 (amax still recorded). */
typedef struct { float amax, enc, dec; } collage_fp4_tensor;

/* The block shape (br rows × bc columns): NVFP4 1×16 or 16×1 along K (a weight 16×16), MXFP4 1×32 or 32×1.
 * Blocks start at row 0 and column 0; the last ones are shorter where a size is not a multiple. */
void collage__fp4_block_shape(const collage_fp4_quant *q, int *br, int *bc);
/* Blocks in the grid: ceil(rows/br) × ceil(cols/bc), numbered row-major (block (r/br, c/bc)). */
size_t collage__fp4_blocks(const collage_fp4_quant *q, int rows, int cols);

/* The per-tensor scale of a tensor whose amax is a (finite, ≥ 0), as above. */
collage_fp4_tensor collage__fp4_tensor_scale(collage_fp4_recipe r, float a);

/* A block's scale byte from its amax a (finite, ≥ 0), and in *enc the fp32 factor its elements are
 * multiplied by before rounding (numerics.md §15):
 *   NVFP4: byte = SAT_RN_e4m3(fp32(a · fp32(t.enc · fp32(1/6)))), its value d;
 *          enc = fp32(1 / fp32(d · t.dec)), FLT_MAX where that overflows (d = 0 gives FLT_MAX).
 *   MXFP4: E = floor(log2 a) − 2 (a = 0: −127), clamped to [−127, 125]; byte = E + 127; enc = 2^−E, exact.
 * MXFP4's clamps: every v·2^E (v an E2M1 value) is then finite in fp32 and a bf16 value; a finite fp32 amax
 * never reaches the upper one (floor(log2 FLT_MAX) − 2 = 125). */
uint8_t collage__fp4_block_scale(collage_fp4_recipe r, const collage_fp4_tensor *t, float a, float *enc);

/* The value a block's scale byte stands for: NVFP4 the e4m3 value d, MXFP4 2^(byte − 127); NaN for a byte
 * that is no scale (an e4m3 NaN or negative value; an E8M0 byte above 252, outside the clamps, 0xFF being
 * E8M0's NaN). */
float collage__fp4_scale_value(collage_fp4_recipe r, uint8_t byte);

/* Quantizes x (rows, cols, row stride ld; fp32) with q: the tensor's scale into *t, each block's scale byte
 * into scales (row-major over the grid: collage__fp4_blocks bytes), and each element's E2M1 code into codes
 * (one code a byte, row-major, row stride cols):
 *   y = fp32(x · enc_b);   code = SAT_RN_e2m1(y), or with sr SR_e2m1(y, collage_rand32(key, index)),
 * saturating at ±6 (collage_lp_from_f32_sat / _sr). A bf16 tensor widens to fp32 exactly first.
 * NaN or ±Inf anywhere in x: COLLAGE_ERR_NONFINITE with nothing written. COLLAGE_ERR_ARG for an unknown
 * recipe or role or k_axis not 0 or 1; COLLAGE_ERR_SIZE for rows, cols < 1 or ld < cols; COLLAGE_ERR_NULL.
 * Nothing is allocated; x may not alias an output. */
collage_status collage__fp4_quantize(const collage_fp4_quant *q, const float *x, int rows, int cols, int ld,
                                     uint8_t *codes, uint8_t *scales, collage_fp4_tensor *t);

/* The values codes and scales stand for, into y (rows, cols, row stride ldy), element (r, c) of block b:
 *   NVFP4: fp32(fp32(v · d_b) · t.dec)   (v · d_b is exact: 2 and 4 significant bits);
 *   MXFP4: v · 2^E_b                     (exact, and a bf16 value: numerics.md §15),
 * v the code's E2M1 value. COLLAGE_ERR_ARG (nothing written) for a code above 0xF or a scale byte that is
 * no scale; sizes and recipe as for quantize. */
collage_status collage__fp4_dequantize(const collage_fp4_quant *q, const uint8_t *codes, const uint8_t *scales,
                                       const collage_fp4_tensor *t, int rows, int cols, float *y, int ldy);

/* ---------------------------------------------------------------- the vector quantizer */
/* collage__fp4_quantize by loops built for the CPU's instruction set (fp4q_kernel.inc: the scalar reference,
 * AVX2, AVX-512; collage_get_isa) and shared among nt threads: the same tensor scale, scale bytes and codes
 * for any ISA and nt (test_fp4). The input is fp32 (xf) or bf16 bits (xb), exactly one of them non-NULL.
 * Outputs (row stride cols): codes (one a byte), or NULL; vals, each element's E2M1 value times its block's
 * scale value d (NVFP4: the e4m3 scale; MXFP4: 2^E) as bf16 bits, exact (numerics.md §15), or NULL;
 * scales (required, collage__fp4_blocks bytes); enc, d: each block's element factor and scale value
 * (required, collage__fp4_blocks floats each; scratch when the call fails); *t the tensor scale.
 * Statuses as collage__fp4_quantize's (NaN or ±Inf: COLLAGE_ERR_NONFINITE, nothing written to codes, vals,
 * scales or *t). Nothing is allocated. The input may not alias an output. */
collage_status collage__fp4_quantize_v(const collage_fp4_quant *q, const float *xf, const uint16_t *xb, int rows,
                                       int cols, int ld, uint8_t *codes, uint16_t *vals, uint8_t *scales, float *enc,
                                       float *d, collage_fp4_tensor *t, int nt);
/* The same with the loops of a given ISA (for tests; one the CPU lacks must not be asked for). */
collage_status collage__fp4_quantize_isa(collage_isa isa, const collage_fp4_quant *q, const float *xf,
                                         const uint16_t *xb, int rows, int cols, int ld, uint8_t *codes,
                                         uint16_t *vals, uint8_t *scales, float *enc, float *d,
                                         collage_fp4_tensor *t, int nt);

#define FP4Q_DECLARE_T(S, SUF, T)                                                                              \
    uint32_t collage__fp4q_amax##SUF##S(const T *x, int ld, int r0, int r1, int c0, int c1);                 \
    void collage__fp4q_colmax##SUF##S(const T *x, int ld, int r0, int r1, int c0, int c1, uint32_t *m);      \
    void collage__fp4q_blockmax##SUF##S(const T *x, int n, int bc, uint32_t *m);                              \
    void collage__fp4q_run##SUF##S(int sr, const T *x, int n, float enc, float d, uint32_t k1, uint32_t k2,    \
                                   uint32_t lo0, uint8_t *codes, uint16_t *vals);                            \
    void collage__fp4q_run_blocks##SUF##S(int sr, const T *x, int n, int bc, const float *enc, const float *d, \
                                          uint32_t k1, uint32_t k2, uint32_t lo0, uint8_t *codes,            \
                                          uint16_t *vals);                                                    \
    void collage__fp4q_run_cols##SUF##S(int sr, const T *x, int n, const float *enc, const float *d,          \
                                        uint32_t k1, uint32_t k2, uint32_t lo0, uint8_t *codes, uint16_t *vals);
#define FP4Q_DECLARE(S)                                                                                        \
    FP4Q_DECLARE_T(S, _f32, float)                                                                             \
    FP4Q_DECLARE_T(S, _bf16, uint16_t)                                                                         \
    void collage__fp4q_round_row##S(int sr, const float *y, const uint32_t *r, int n, uint8_t *codes,        \
                                    uint32_t *bits);
FP4Q_DECLARE(_ref)
FP4Q_DECLARE(_avx2)
FP4Q_DECLARE(_avx512)
/* E2M1 codes of n fp32 values (none a NaN) by the given ISA's rounding lanes: to nearest, or with sr the SR
 * words r[i], into codes; or, codes NULL, the values' fp32 bits (sign kept) into bits by the lanes of the
 * loops that want values alone (for tests). */
void collage__fp4q_round_row(collage_isa isa, int sr, const float *y, const uint32_t *r, int n, uint8_t *codes,
                             uint32_t *bits);

/* ---------------------------------------------------------------- the 16×16 random Hadamard transform */
#define COLLAGE_FP4_RHT 16 /* the transform's length along K */
#define COLLAGE_FP4_RHT_STREAM 0x52485446ull /* collage_rand_key stream of a run seed's Hadamard signs ("RHTF") */
/* The transform's 16 signs as a mask (bit j set: s_j = −1): bit j is the top bit of collage_rand32(key, j). */
uint16_t collage__fp4_rht_signs(uint64_t key);
/* y = the random Hadamard transform of x along K (numerics.md §15 "The random Hadamard transform"): each
 * group of 16 consecutive elements along K (k_axis 0: rows 16g … 16g + 15 of a column; 1: columns of a row)
 * becomes (1/4)·H16·D·x (D = diag(s)), inverse = 1 its inverse (1/4)·D·H16·x, in fp32 in this order: the
 * signs (exact), four butterfly stages h = 1, 2, 4, 8 each replacing (z_i, z_{i+h}) for i with bit h clear
 * by (fp32(z_i + z_{i+h}), fp32(z_i − z_{i+h})), then fp32(0.25·z) (exact above 2^-124); the inverse takes
 * the butterflies first and the signs last. Elements past the last whole group are copied. x is fp32 (xf)
 * or bf16 bits (xb), exactly one non-NULL, (rows, cols, row stride ld); y (rows, cols, row stride ldy)
 * may not alias x. Groups and column chunks are shared among nt threads; every element is computed by one
 * thread in the order above, so any nt and any vector width give the same bits. */
void collage__fp4_rht(uint16_t signs, int inverse, const float *xf, const uint16_t *xb, int rows, int cols, int ld,
                      int k_axis, float *y, int ldy, int nt);

#endif

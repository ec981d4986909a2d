/* fp8q.h — fp8 compute's quantization (numerics.md §13): a bf16 tensor cut into blocks along the matrix
 * product's inner dimension K, each block given a scale by its recipe (per-tensor delayed or current
 * scaling, DeepSeek-V3's block scaling, MXFP8), its values rounded to e4m3 or e5m2 with saturation; and the
 * amax histories of delayed scaling as a small checkpointable object. Private to the library and its tests. */
#ifndef COLLAGE_FP8Q_H
#define COLLAGE_FP8Q_H

#include "internal.h"

typedef enum {
    COLLAGE_FP8_DELAYED = 0, /* per tensor, scale from the amax history (Transformer Engine's DelayedScaling) */
    COLLAGE_FP8_CURRENT,     /* per tensor, scale from the tensor's amax now (Float8CurrentScaling) */
    COLLAGE_FP8_BLOCK,       /* DeepSeek-V3: 1×128 tiles along K (activations, gradients), 128×128 weight blocks */
    COLLAGE_FP8_MXFP8,       /* OCP MX: 32 elements along K, a power-of-two (E8M0) scale rounded up */
    COLLAGE_FP8_RECIPE_COUNT
} collage_fp8_recipe;

/* What a tensor is to its product: the block recipe gives weights 128×128 blocks; the hybrid format gives
 * gradients e5m2 (collage__fp8_format). */
typedef enum { COLLAGE_FP8_ACT = 0, COLLAGE_FP8_WEIGHT, COLLAGE_FP8_GRAD } collage_fp8_role;

const char *collage__fp8_recipe_name(collage_fp8_recipe r); /* "delayed", "current", "block", "mxfp8"; NULL */
collage_status collage__fp8_recipe_parse(const char *name, collage_fp8_recipe *out);
/* The format of a role: e5m2 for a gradient in the hybrid scheme (e4m3_all = 0), else e4m3. */
collage_format collage__fp8_format(collage_fp8_role role, int e4m3_all);

#define COLLAGE_FP8_TILE 128 /* the block recipe's tile length along K, and its weight blocks' side */
#define COLLAGE_FP8_MX 32    /* MXFP8's block length along K */

/* One quantization's settings. The tensor is row-major (rows, cols) with row stride ld; k_axis says where
 * the product's K runs: 1 along a row (the tensor is (·, K), as X and W in Y = X·Wᵀ), 0 down a column
 * (the tensor is (K, ·), as W in dX = dY·W). */
typedef struct {
    collage_fp8_recipe recipe;
    collage_format fmt;     /* COLLAGE_FMT_E4M3 or COLLAGE_FMT_E5M2 */
    collage_fp8_role role;
    int k_axis;
    float scale;            /* DELAYED only: the scale in force (collage__fp8_scaling_scale) */
} collage_fp8_quant;

/* The block shape (br rows × bc columns) of a (rows, cols) tensor: the whole tensor for the per-tensor
 * recipes; 1×128 or 128×1 tiles along K (128×128 for a weight) for BLOCK; 1×32 or 32×1 for MXFP8.
 * Blocks start at row 0 and column 0; the last ones are shorter where a size is not a multiple. */
void collage__fp8_block_shape(const collage_fp8_quant *q, int rows, int cols, int *br, int *bc);
/* Blocks in the grid: ceil(rows/br) × ceil(cols/bc), numbered row-major (block (r/br, c/bc)). */
size_t collage__fp8_blocks(const collage_fp8_quant *q, int rows, int cols);

/* The scale s (values are multiplied by s before rounding) and the dequantization factor inv (the value of
 * a code q is q·inv) of a block whose amax is a (finite, ≥ 0), for each recipe (numerics.md §13):
 *   CURRENT:  a = 0: s = 1; else s = fp32(F/a), FLT_MAX where that overflows.    inv = fp32(1/s)
 *   BLOCK:    a = 0: s = inv = 1; else s = fp32(F/a), FLT_MAX where it overflows;  inv = fp32(a/F)
 *   MXFP8:    E = the least integer with a ≤ F·2^E (exactly; a = 0: −∞), clamped to [Elo, Ehi], the range where
 *             every q·2^E is a bf16 value (e4m3 [−124, 119], e5m2 [−117, 112]); s = 2^−E, inv = 2^E, both exact
 *   DELAYED:  s = the given scale; inv = fp32(1/s)
 * F is the format's largest value (448, 57344). */
void collage__fp8_block_scale(const collage_fp8_quant *q, float amax, float *s, float *inv);

/* SAT_RN_f(y) for f e4m3 or e5m2 and y not a NaN: collage_lp_from_f32_sat's code by a faster road. */
uint8_t collage__fp8_sat(collage_format f, float y);

/* Quantizes x (rows, cols, row stride ld; bf16 bits) with q: for each block, its amax a, its s and inv
 * (collage__fp8_block_scale), and each element's code SAT_RN(fp32(x·s)): the nearest fp8 value to the fp32
 * product, ties to even, ±F beyond ±F. Outputs (codes and vals packed: row stride cols):
 *   codes:  the fp8 codes, or NULL;
 *   vals:   the codes' values as bf16 bits (every e4m3 and e5m2 value is a bf16 value), or NULL; with
 *           dequant = 1 (MXFP8 only) the dequantized q·inv instead, also exact in bf16 (numerics.md §13);
 *   s, inv: each block's scale and dequantization factor, row-major over the block grid (required:
 *           collage__fp8_blocks floats each);
 *   amax:   the tensor's largest |x| (for the delayed history), or NULL.
 * NaN or ±Inf anywhere in x: COLLAGE_ERR_NONFINITE; codes, vals and amax are not written (s and inv are
 * scratch then). COLLAGE_ERR_ARG for a format other than e4m3/e5m2, an unknown recipe or role, a DELAYED
 * scale that is not finite and positive, or dequant with a recipe other than MXFP8; COLLAGE_ERR_SIZE for
 * rows, cols < 1 or ld < cols. Nothing is allocated. The blocks' amaxes and the rows are shared among nt
 * threads; every output is the same for any nt. x may not alias an output. */
collage_status collage__fp8_quantize(const collage_fp8_quant *q, const uint16_t *x, int rows, int cols, int ld,
                                     uint8_t *codes, uint16_t *vals, int dequant, float *s, float *inv, float *amax,
                                     int nt);

/* The quantizer's loops (fp8q_kernel.inc), built as the scalar reference (_ref, fp8q.c) and for AVX2 and
 * AVX-512 (fp8q_avx2.c, fp8q_avx512.c; entered only when the CPU has them, through collage_get_isa):
 * bit for bit the same results (test_fp8 checks every ISA). collage__fp8_quantize uses the ISA in force. */
#define FP8Q_DECLARE(S)                                                                                        \
    unsigned collage__fp8q_amax##S(const uint16_t *x, int ld, int r0, int r1, int c0, int c1);                 \
    void collage__fp8q_colmax##S(const uint16_t *x, int ld, int r0, int r1, int c0, int c1, uint16_t *m);      \
    void collage__fp8q_run##S(int e5m2, const uint16_t *x, int n, float s, float inv, uint8_t *codes,          \
                              uint16_t *vals, int dequant);                                                    \
    void collage__fp8q_run_cols##S(int e5m2, const uint16_t *x, int n, const float *s, const float *inv,       \
                                   uint8_t *codes, uint16_t *vals, int dequant);                               \
    void collage__fp8q_sat_row##S(int e5m2, const float *y, int n, uint8_t *codes);
FP8Q_DECLARE(_ref)
FP8Q_DECLARE(_avx2)
FP8Q_DECLARE(_avx512)
/* SAT_RN_f of n fp32 values (none a NaN) to codes with the given ISA's loop (for tests). */
void collage__fp8q_sat_row(collage_isa isa, collage_format f, const float *y, int n, uint8_t *codes);

/* ---------------------------------------------------------------- delayed scaling's state */
/* The scales of a model's per-tensor delayed scaling: one slot per quantized tensor (a layer's input,
 * weight and incoming gradient), each with its format, its scale in force (1 at start), the amax of the
 * step under way and a history of the last `history` steps' amaxes. A step quantizes with the scales in
 * force and records each slot's amax (the max over every quantization of the slot in the step: micro-
 * batches, ranks); collage__fp8_scaling_step then writes the step's amaxes into the histories and sets
 * each scale from the max over its history (Transformer Engine's "max" algorithm):
 *   h = max(history); s = fp32(fp32(F/h) / 2^margin) if h > 0 and finite (FLT_MAX where it overflows),
 *   else the old s.
 * The object is plain data: save / load give the same bits back, so a resumed run quantizes as the
 * uninterrupted one. */
typedef struct collage__fp8_scaling collage__fp8_scaling;

/* slots ≥ 1 formats (e4m3 or e5m2), history ≥ 1 (Transformer Engine's default 1024), margin in [0, 64].
 * NULL on bad arguments or out of memory. */
collage__fp8_scaling *collage__fp8_scaling_create(const collage_format *fmts, int slots, int history, int margin);
void  collage__fp8_scaling_free(collage__fp8_scaling *st);
int   collage__fp8_scaling_slots(const collage__fp8_scaling *st);
float collage__fp8_scaling_scale(const collage__fp8_scaling *st, int slot);
/* The slot's amax of the step under way becomes max(it, amax) (amax finite, ≥ 0; others are ignored).
 * A slot outside [0, slots) is a broken invariant (COLLAGE_ASSERT), here and in _scale. */
void  collage__fp8_scaling_record(collage__fp8_scaling *st, int slot, float amax);
/* The step's amaxes, one per slot (for a data-parallel run to take their max over the ranks before
 * collage__fp8_scaling_step: max is exact in any order, so N ranks give one process's bits). */
float *collage__fp8_scaling_current(collage__fp8_scaling *st);
/* Ends a step: histories, then scales, as above; the step's amaxes back to 0. */
void  collage__fp8_scaling_step(collage__fp8_scaling *st);
/* A skipped step: its amaxes are forgotten, nothing else changes. */
void  collage__fp8_scaling_discard(collage__fp8_scaling *st);
/* Steps ended so far. */
uint64_t collage__fp8_scaling_steps(const collage__fp8_scaling *st);

/* The state as bytes (little-endian, magic "CLF8SCAL", version 1): collage__fp8_scaling_bytes of them. */
size_t collage__fp8_scaling_bytes(const collage__fp8_scaling *st);
collage_status collage__fp8_scaling_save(const collage__fp8_scaling *st, void *buf, size_t cap);
/* Loads bytes saved by an object of the same slots, formats, history and margin; any other content
 * (another shape, a bad magic or version, a scale that is not finite and positive, an amax that is not
 * finite and ≥ 0, a truncated or longer buffer) is refused with COLLAGE_ERR_FORMAT and a message in err,
 * st unchanged. */
collage_status collage__fp8_scaling_load(collage__fp8_scaling *st, const void *buf, size_t len, char *err,
                                         size_t cap);

#endif

/* fp4q.c — the 4-bit block formats' scalar quantizer and dequantizer (fp4q.h, numerics.md §15): NVFP4's
 * per-tensor and E4M3 block scales as Transformer Engine computes them, MXFP4's E8M0 block exponents as
 * the OCP Microscaling spec defines them, and each element rounded to E2M1 (to nearest or stochastically,
 * saturating at ±6) with lowp.c's encoder. */
#include "fp4q.h"
#include "fp8q.h" /* collage__fp8_sat: e4m3 rounding with saturation */
#include <float.h>
#include <math.h>

static const char *const RECIPE_NAMES[COLLAGE_FP4_RECIPE_COUNT] = {"nvfp4", "mxfp4"};

const char *collage__fp4_recipe_name(collage_fp4_recipe r) {
    return (unsigned)r < COLLAGE_FP4_RECIPE_COUNT ? RECIPE_NAMES[r] : NULL;
}

collage_status collage__fp4_recipe_parse(const char *name, collage_fp4_recipe *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int i = 0; i < COLLAGE_FP4_RECIPE_COUNT; i++)
        if (!strcmp(name, RECIPE_NAMES[i])) return *out = (collage_fp4_recipe)i, COLLAGE_OK;
    return COLLAGE_ERR_ARG;
}

void collage__fp4_block_shape(const collage_fp4_quant *q, int *br, int *bc) {
    const int nv = q->recipe == COLLAGE_FP4_NVFP4;
    const int along = nv ? COLLAGE_FP4_NV : COLLAGE_FP4_MX;
    const int across = nv && q->role == COLLAGE_FP4_WEIGHT ? COLLAGE_FP4_NV : 1;
    *br = q->k_axis ? across : along;
    *bc = q->k_axis ? along : across;
}

size_t collage__fp4_blocks(const collage_fp4_quant *q, int rows, int cols) {
    int br, bc;
    collage__fp4_block_shape(q, &br, &bc);
    return (size_t)((rows + br - 1) / br) * (size_t)((cols + bc - 1) / bc);
}

/* Each step one fp32 operation: the division is written as one so no caller folds it. */
static float fp32_div(float a, float b) { return a / b; }
static float fp32_mul(float a, float b) { return a * b; }

#define E2M1_MAX 6.0f
#define E4M3_MAX 448.0f
#define MX_ELO (-127)
#define MX_EHI 125

collage_fp4_tensor collage__fp4_tensor_scale(collage_fp4_recipe r, float a) {
    collage_fp4_tensor t = {a, 1.0f, 1.0f};
    if (r != COLLAGE_FP4_NVFP4 || a == 0.0f) return t;
    t.enc = fp32_div(E4M3_MAX * E2M1_MAX, a); /* 2688, exact */
    if (isinf(t.enc)) t.enc = FLT_MAX;
    t.dec = fp32_div(1.0f, t.enc);
    return t;
}

/* OCP's shared exponent floor(log2 a) − emax_elem, exactly (ilogbf is exact, subnormals included). */
static int mx_exponent(float a) {
    const int e = a == 0.0f ? MX_ELO : ilogbf(a) - COLLAGE_FP4_MX_EMAX;
    return e < MX_ELO ? MX_ELO : e > MX_EHI ? MX_EHI : e;
}

uint8_t collage__fp4_block_scale(collage_fp4_recipe r, const collage_fp4_tensor *t, float a, float *enc) {
    if (r == COLLAGE_FP4_MXFP4) {
        const int e = mx_exponent(a);
        *enc = ldexpf(1.0f, -e);
        return (uint8_t)(e + 127);
    }
    const float per = fp32_mul(t->enc, fp32_div(1.0f, E2M1_MAX));
    const uint8_t byte = collage__fp8_sat(COLLAGE_FMT_E4M3, fp32_mul(a, per)); /* = collage_lp_from_f32_sat's (test_fp8) */
    *enc = fp32_div(1.0f, fp32_mul(collage_lp_to_f32(COLLAGE_FMT_E4M3, byte), t->dec));
    if (isinf(*enc)) *enc = FLT_MAX;
    return byte;
}

float collage__fp4_scale_value(collage_fp4_recipe r, uint8_t byte) {
    if (r == COLLAGE_FP4_MXFP4) return byte <= MX_EHI + 127 ? ldexpf(1.0f, (int)byte - 127) : NAN;
    return byte & 0x80u ? NAN : collage_lp_to_f32(COLLAGE_FMT_E4M3, byte); /* 0x7F is e4m3's NaN */
}

static collage_status check_args(const collage_fp4_quant *q, int rows, int cols, int ld) {
    if ((unsigned)q->recipe >= COLLAGE_FP4_RECIPE_COUNT || (unsigned)q->role > COLLAGE_FP4_GRAD ||
        (q->k_axis != 0 && q->k_axis != 1))
        return COLLAGE_ERR_ARG;
    if (rows < 1 || cols < 1 || ld < cols) return COLLAGE_ERR_SIZE;
    return COLLAGE_OK;
}

/* The largest |x| of rows [r0, r1) × columns [c0, c1); -1 if a NaN or an infinity is among them. */
static float block_amax(const float *x, int ld, int r0, int r1, int c0, int c1) {
    float m = 0.0f;
    for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++) {
            const float a = fabsf(x[(size_t)r * ld + c]);
            if (!(a <= FLT_MAX)) return -1.0f;
            m = a > m ? a : m;
        }
    return m;
}

/* One block's codes: y = fp32(x · enc), rounded to E2M1 with saturation, to nearest or stochastically. */
static void block_codes(const collage_fp4_quant *q, const float *x, int ld, int cols, int r0, int r1, int c0,
                        int c1, float enc, uint8_t *codes) {
    for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++) {
            const size_t i = (size_t)r * cols + c;
            const float y = fp32_mul(x[(size_t)r * ld + c], enc);
            codes[i] = (uint8_t)(q->sr ? collage_lp_from_f32_sr(COLLAGE_FMT_E2M1, y, collage_rand32(q->key, q->index0 + i))
                                       : collage_lp_from_f32_sat(COLLAGE_FMT_E2M1, y));
        }
}

collage_status collage__fp4_quantize(const collage_fp4_quant *q, const float *x, int rows, int cols, int ld,
                                     uint8_t *codes, uint8_t *scales, collage_fp4_tensor *t) {
    if (!q || !x || !codes || !scales || !t) return COLLAGE_ERR_NULL;
    const collage_status st = check_args(q, rows, cols, ld);
    if (st != COLLAGE_OK) return st;
    const float amax = block_amax(x, ld, 0, rows, 0, cols);
    if (amax < 0.0f) return COLLAGE_ERR_NONFINITE;
    const collage_fp4_tensor ts = collage__fp4_tensor_scale(q->recipe, amax);
    int br, bc;
    collage__fp4_block_shape(q, &br, &bc);
    size_t b = 0;
    for (int r0 = 0; r0 < rows; r0 += br)
        for (int c0 = 0; c0 < cols; c0 += bc, b++) {
            const int r1 = r0 + br < rows ? r0 + br : rows, c1 = c0 + bc < cols ? c0 + bc : cols;
            float enc;
            scales[b] = collage__fp4_block_scale(q->recipe, &ts, block_amax(x, ld, r0, r1, c0, c1), &enc);
            block_codes(q, x, ld, cols, r0, r1, c0, c1, enc, codes);
        }
    *t = ts;
    return COLLAGE_OK;
}

collage_status collage__fp4_dequantize(const collage_fp4_quant *q, const uint8_t *codes, const uint8_t *scales,
                                       const collage_fp4_tensor *t, int rows, int cols, float *y, int ldy) {
    if (!q || !codes || !scales || !t || !y) return COLLAGE_ERR_NULL;
    const collage_status st = check_args(q, rows, cols, ldy);
    if (st != COLLAGE_OK) return st;
    const size_t nb = collage__fp4_blocks(q, rows, cols), n = (size_t)rows * cols;
    for (size_t b = 0; b < nb; b++)
        if (isnan(collage__fp4_scale_value(q->recipe, scales[b]))) return COLLAGE_ERR_ARG;
    for (size_t i = 0; i < n; i++)
        if (codes[i] > 0xFu) return COLLAGE_ERR_ARG;
    int br, bc;
    collage__fp4_block_shape(q, &br, &bc);
    const int gc = (cols + bc - 1) / bc;
    const int nv = q->recipe == COLLAGE_FP4_NVFP4;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const float d = collage__fp4_scale_value(q->recipe, scales[(size_t)(r / br) * gc + c / bc]);
            const float vd = fp32_mul(collage_lp_to_f32(COLLAGE_FMT_E2M1, codes[(size_t)r * cols + c]), d);
            y[(size_t)r * ldy + c] = nv ? fp32_mul(vd, t->dec) : vd;
        }
    return COLLAGE_OK;
}

/* test_fp4.c — the 4-bit block formats (numerics.md §15): NVFP4 and MXFP4 quantization and dequantization
 * against an independent float64 transcription of §15 (e2m1 and e4m3 rounding from their value tables,
 * the tensor and block scales step by step), on random tensors of odd sizes for every role, K axis and
 * rounding; values on the grid round-trip exactly; zeros, one huge value, saturation; NaN and Inf refused
 * with nothing written, and bad codes and scales refused by the dequantizer; SR's mean over a fixed set of
 * keys within a 6-sigma bound of x. */
#include "harness.h"
#include "fp4q.h"
#include "nn.h"
#include <float.h>

#define SEED 51u
#define SR_KEYS 4096      /* keys of the SR mean test */
#define SR_SIGMAS 6.0     /* its bound, in standard errors of the mean (fixed keys: cannot flake) */
#define SR_REL 0x1p-20    /* the mean's expectation is x up to the fp32 roundings of the scales */

static uint64_t rng = SEED;
static uint32_t rnd32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}
static double urand(void) { return (double)(rnd32() >> 8) * 0x1p-24; } /* [0, 1) */

/* ---------------------------------------------------------------- the oracle: §15 in float64 */
static double E2M1[8], E4M3[127]; /* the positive values by code, from the fields */

static void tables_init(void) {
    for (int c = 0; c < 8; c++) E2M1[c] = (c >> 1) ? ldexp(2 + (c & 1), (c >> 1) - 2) : 0.5 * (c & 1);
    for (int c = 0; c < 127; c++) E4M3[c] = (c >> 3) ? ldexp(8 + (c & 7), (c >> 3) - 10) : ldexp(c & 7, -9);
}

/* The code of the value nearest |y| in the table vals[0 … n) (ascending), ties to the even code, the last
 * one for anything beyond it (saturation); y is not a NaN. */
static int o_nearest(const double *vals, int n, double y) {
    const double a = fabs(y);
    for (int c = 0; c + 1 < n; c++) {
        const double mid = 0.5 * (vals[c] + vals[c + 1]);
        if (a < mid || (a == mid && !(c & 1))) return c;
    }
    return n - 1;
}
static int o_e2m1(double y) { return o_nearest(E2M1, 8, y) | (signbit(y) ? 8 : 0); }
static double o_e2m1_value(int code) { return (code & 8) ? -E2M1[code & 7] : E2M1[code & 7]; }

static float f32(double x) { return (float)x; } /* one rounding to fp32 */

typedef struct { float amax, enc, dec; } o_tensor;
typedef struct { int byte; double d; float enc; } o_block;

static o_tensor o_tensor_scale(collage_fp4_recipe r, double amax) {
    o_tensor t = {f32(amax), 1.0f, 1.0f};
    if (r == COLLAGE_FP4_MXFP4 || amax == 0) return t;
    t.enc = f32(2688.0 / amax);
    if (isinf(t.enc)) t.enc = FLT_MAX;
    t.dec = f32(1.0 / (double)t.enc);
    return t;
}

static o_block o_block_scale(collage_fp4_recipe r, const o_tensor *t, double a) {
    o_block b;
    if (r == COLLAGE_FP4_MXFP4) {
        int e = -127;
        if (a > 0) {
            (void)frexp(a, &e); /* a in [2^(e−1), 2^e) */
            e = e - 1 - 2;
        }
        e = e < -127 ? -127 : e > 125 ? 125 : e;
        b.byte = e + 127, b.d = ldexp(1, e), b.enc = f32(ldexp(1, -e));
        return b;
    }
    const float per = f32((double)t->enc * (double)f32(1.0 / 6.0));
    b.byte = o_nearest(E4M3, 127, (double)f32(a * (double)per));
    b.d = E4M3[b.byte];
    b.enc = f32(1.0 / (double)f32(b.d * (double)t->dec));
    if (isinf(b.enc)) b.enc = FLT_MAX;
    return b;
}

static double o_dequant(collage_fp4_recipe r, const o_tensor *t, const o_block *b, int code) {
    const double v = o_e2m1_value(code) * b->d; /* exact */
    return r == COLLAGE_FP4_MXFP4 ? v : (double)f32(v * (double)t->dec);
}

static double o_max_abs(const float *x, int r0, int r1, int c0, int c1, int ld) {
    double a = 0;
    for (int r = r0; r < r1; r++)
        for (int c = c0; c < c1; c++) a = fmax(a, fabs((double)x[(size_t)r * ld + c]));
    return a;
}

/* The e2m1 code toward zero from y: the largest table value ≤ |y|, with y's sign. */
static int o_floor(double y) {
    const int n = o_nearest(E2M1, 8, y);
    return (n - (E2M1[n] > fabs(y))) | (signbit(y) ? 8 : 0);
}

/* ---------------------------------------------------------------- checking one quantization */
static const char *rname(collage_fp4_recipe r) { return collage__fp4_recipe_name(r); }

/* The block shape §15 gives (independent of collage__fp4_block_shape). */
static void o_shape(const collage_fp4_quant *q, int *br, int *bc) {
    const int along = q->recipe == COLLAGE_FP4_NVFP4 ? 16 : 32;
    const int across = q->recipe == COLLAGE_FP4_NVFP4 && q->role == COLLAGE_FP4_WEIGHT ? 16 : 1;
    *br = q->k_axis ? across : along, *bc = q->k_axis ? along : across;
}

/* One element against the oracle: its code (RN; SR: the library's SR of the oracle's y with the element's
 * bits, which must be one of y's two neighbours) and its dequantized value. Returns 1 on a mismatch. */
static int check_elem(const collage_fp4_quant *q, const o_tensor *t, const o_block *b, float x, size_t i,
                      int code, float deq) {
    const float y = f32((double)x * (double)b->enc);
    int want = o_e2m1((double)y);
    if (q->sr) {
        want = collage_lp_from_f32_sr(COLLAGE_FMT_E2M1, y, collage_rand32(q->key, q->index0 + i));
        const int lo = o_floor((double)y);
        CHECK(want == lo || want == ((lo & 7) < 7 ? lo + 1 : lo), "SR code 0x%x of y %a is not a neighbour", want,
              (double)y);
    }
    const double wd = o_dequant(q->recipe, t, b, want);
    const int bad = code != want || (double)deq != wd;
    CHECK(!bad, "%s element %zu: x %a y %a: code 0x%x value %a, want 0x%x %a", rname(q->recipe), i, (double)x,
          (double)y, code, (double)deq, want, wd);
    return bad;
}

/* Quantizes x (rows, cols, row stride ld) with q, dequantizes, and checks the tensor scale, every block's
 * scale byte and every element against the oracle; returns the mismatches. */
static int check_quant(const collage_fp4_quant *q, const float *x, int rows, int cols, int ld) {
    int br, bc, ebr, ebc, bad = 0;
    o_shape(q, &br, &bc);
    collage__fp4_block_shape(q, &ebr, &ebc);
    CHECK(ebr == br && ebc == bc, "%s role %d k_axis %d: blocks %dx%d want %dx%d", rname(q->recipe), q->role,
          q->k_axis, ebr, ebc, br, bc);
    const int gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
    CHECK(collage__fp4_blocks(q, rows, cols) == (size_t)gr * gc, "block count");
    uint8_t *codes = malloc((size_t)rows * cols), *scales = malloc((size_t)gr * gc);
    float *y = malloc((size_t)rows * cols * sizeof(float));
    collage_fp4_tensor t;
    CHECK(collage__fp4_quantize(q, x, rows, cols, ld, codes, scales, &t) == COLLAGE_OK, "quantize");
    CHECK(collage__fp4_dequantize(q, codes, scales, &t, rows, cols, y, cols) == COLLAGE_OK, "dequantize");
    const o_tensor ot = o_tensor_scale(q->recipe, o_max_abs(x, 0, rows, 0, cols, ld));
    CHECK(t.amax == ot.amax && t.enc == ot.enc && t.dec == ot.dec, "%s tensor: amax %a enc %a dec %a, want %a %a %a",
          rname(q->recipe), (double)t.amax, (double)t.enc, (double)t.dec, (double)ot.amax, (double)ot.enc,
          (double)ot.dec);
    for (int b = 0; b < gr * gc; b++) {
        const int r0 = b / gc * br, c0 = b % gc * bc;
        const int r1 = r0 + br < rows ? r0 + br : rows, c1 = c0 + bc < cols ? c0 + bc : cols;
        const double a = o_max_abs(x, r0, r1, c0, c1, ld);
        const o_block ob = o_block_scale(q->recipe, &ot, a);
        bad += scales[b] != ob.byte;
        CHECK(scales[b] == ob.byte, "%s block %d (amax %a): scale 0x%02x want 0x%02x", rname(q->recipe), b, a,
              scales[b], ob.byte);
        CHECK(collage__fp4_scale_value(q->recipe, scales[b]) == (float)ob.d, "block %d: scale value", b);
        for (int r = r0; r < r1; r++)
            for (int c = c0; c < c1; c++) {
                const size_t i = (size_t)r * cols + c;
                bad += check_elem(q, &ot, &ob, x[(size_t)r * ld + c], i, codes[i], y[i]);
            }
    }
    free(codes), free(scales), free(y);
    return bad;
}

/* x (n) with random signs and magnitudes 2^[lo, hi) with a random significand. */
static void fill(float *x, size_t n, int lo, int hi) {
    for (size_t i = 0; i < n; i++) {
        const double m = ldexp(1.0 + urand(), lo + (int)(rnd32() % (uint32_t)(hi - lo)));
        x[i] = (float)(rnd32() & 1 ? -m : m);
    }
}

/* ---------------------------------------------------------------- tests */
/* Every recipe, role, K axis and rounding on random tensors of odd sizes (partial last blocks both ways, a
 * row stride wider than the row), values over 2^±12 (so blocks reach e2m1's subnormal and NVFP4's scales
 * their small values). */
static void test_random(void) {
    const int shapes[6][3] = {{1, 1, 1}, {3, 300, 301}, {257, 5, 5}, {33, 47, 50}, {16, 16, 16}, {130, 129, 129}};
    for (int si = 0; si < 6; si++) {
        const int rows = shapes[si][0], cols = shapes[si][1], ld = shapes[si][2];
        float *x = malloc((size_t)rows * ld * sizeof(float));
        fill(x, (size_t)rows * ld, -12, 12);
        for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
            for (int role = 0; role <= COLLAGE_FP4_GRAD; role++)
                for (int ka = 0; ka < 2; ka++)
                    for (int sr = 0; sr < 2; sr++) {
                        const collage_fp4_quant q = {.recipe = (collage_fp4_recipe)ri, .role = (collage_fp4_role)role,
                                                     .k_axis = ka, .sr = sr, .key = 7u + (uint64_t)si, .index0 = 1000};
                        CHECK(check_quant(&q, x, rows, cols, ld) == 0, "%s %dx%d role %d k_axis %d sr %d", rname(q.recipe),
                              rows, cols, role, ka, sr);
                    }
        free(x);
    }
}

/* Values on the grid come back exactly: NVFP4 blocks of e2m1 values times an e4m3 value d, each block
 * holding ±6d, one block 6·448 = 2688 (so the tensor scale is 1); MXFP4 blocks of e2m1 values times 2^k
 * holding ±6·2^k or ±4·2^k. */
static void test_grid_roundtrip(void) {
    enum { R = 5, C = 96 };
    float x[R * C], y[R * C];
    uint8_t codes[R * C], scales[R * C];
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
        for (int trial = 0; trial < 20; trial++) {
            const collage_fp4_recipe r = (collage_fp4_recipe)ri;
            const int len = r == COLLAGE_FP4_NVFP4 ? 16 : 32;
            for (int b = 0; b < R * C / len; b++) {
                const double d = r == COLLAGE_FP4_MXFP4 ? ldexp(1, (int)(rnd32() % 200) - 100)
                                 : b == 0               ? 448.0
                                                        : E4M3[1 + rnd32() % 126];
                for (int k = 0; k < len; k++) x[b * len + k] = (float)(o_e2m1_value((int)(rnd32() % 16)) * d);
                x[b * len + (int)(rnd32() % len)] = (float)((rnd32() & 1 ? -1 : 1) * (rnd32() & 1 ? 6 : 4) * d);
                if (r == COLLAGE_FP4_NVFP4) x[b * len] = (float)(6 * d); /* amax 6d exactly */
            }
            const collage_fp4_quant q = {.recipe = r, .role = COLLAGE_FP4_ACT, .k_axis = 1};
            collage_fp4_tensor t;
            collage__fp4_quantize(&q, x, R, C, C, codes, scales, &t);
            collage__fp4_dequantize(&q, codes, scales, &t, R, C, y, C);
            int bad = 0;
            for (int i = 0; i < R * C; i++) bad += memcmp(&x[i], &y[i], 4) != 0;
            CHECK(bad == 0 && (r == COLLAGE_FP4_MXFP4 || (t.enc == 1.0f && t.dec == 1.0f)),
                  "%s trial %d: %d values moved (tensor enc %a)", rname(r), trial, bad, (double)t.enc);
            check_quant(&q, x, R, C, C);
        }
}

/* Zeros (codes 0, MXFP4's smallest exponent, NVFP4's scale 0); one huge value among ones: per tensor
 * NVFP4 flushes the ones' blocks to scale 0 (its range below the tensor's amax is 448·6/2^-9), MXFP4 keeps
 * them; the huge value takes the largest code. */
static void test_zeros_and_huge(void) {
    enum { R = 2, C = 64 };
    float x[R * C];
    uint8_t codes[R * C], scales[R * C];
    collage_fp4_tensor t;
    memset(x, 0, sizeof x);
    x[5] = -0.0f;
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++) {
        const collage_fp4_quant q = {.recipe = (collage_fp4_recipe)ri, .role = COLLAGE_FP4_WEIGHT, .k_axis = 1};
        CHECK(check_quant(&q, x, R, C, C) == 0, "%s zeros", rname(q.recipe));
        collage__fp4_quantize(&q, x, R, C, C, codes, scales, &t);
        CHECK(codes[0] == 0 && codes[5] == 8 && scales[0] == 0 && t.amax == 0.0f && t.enc == 1.0f,
              "%s zeros: code 0x%x, −0 0x%x, scale 0x%02x", rname(q.recipe), codes[0], codes[5], scales[0]);
    }
    for (int i = 0; i < R * C; i++) x[i] = 1.0f;
    x[C + 40] = 1e30f;
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++) {
        const collage_fp4_quant q = {.recipe = (collage_fp4_recipe)ri, .role = COLLAGE_FP4_ACT, .k_axis = 1};
        CHECK(check_quant(&q, x, R, C, C) == 0, "%s one huge value", rname(q.recipe));
        float y[R * C];
        collage__fp4_quantize(&q, x, R, C, C, codes, scales, &t);
        collage__fp4_dequantize(&q, codes, scales, &t, R, C, y, C);
        CHECK(codes[C + 40] == 7 && fabs((double)y[C + 40] / 1e30 - 1) < 0.25, "%s: the huge value's code 0x%x, %g",
              rname(q.recipe), codes[C + 40], (double)y[C + 40]);
        CHECK(ri == COLLAGE_FP4_NVFP4 ? y[0] == 0.0f && scales[0] == 0 : y[0] == 1.0f, "%s: a one far from it: %g",
              rname(q.recipe), (double)y[0]);
    }
}

/* Saturation: MXFP4's floor exponent puts a block's largest value in [4, 8), so 7·2^k (the tie with 8) and
 * 7.9·2^k saturate to ±6·2^k, to nearest and stochastically; NVFP4 saturates its e4m3 scales at 448. */
static void test_saturation(void) {
    const float big[4] = {0x1.cp2f, -0x1.f99999p2f, 0x1.cp-100f, 1.0f};
    for (int sr = 0; sr < 2; sr++) {
        const collage_fp4_quant q = {.recipe = COLLAGE_FP4_MXFP4, .k_axis = 1, .sr = sr, .key = 3};
        float x[32];
        uint8_t codes[32], scale;
        collage_fp4_tensor t;
        for (int b = 0; b < 3; b++) {
            for (int i = 0; i < 32; i++) x[i] = big[b] * (i ? 0.25f : 1.0f);
            collage__fp4_quantize(&q, x, 1, 32, 32, codes, &scale, &t);
            CHECK((codes[0] & 7) == 7 && collage__fp4_scale_value(q.recipe, scale) * 4 <= fabsf(big[b]),
                  "mxfp4 sr %d: %a gives code 0x%x, scale 2^%d", sr, (double)big[b], codes[0], scale - 127);
            CHECK(check_quant(&q, x, 1, 32, 32) == 0, "mxfp4 saturation");
        }
    }
    /* NVFP4's block scale saturates at e4m3's 448 (a block amax above the tensor's, as a caller's own
     * tensor scale may give: RN alone would give e4m3's NaN) */
    const collage_fp4_tensor t = collage__fp4_tensor_scale(COLLAGE_FP4_NVFP4, 1.0f);
    float enc;
    const uint8_t byte = collage__fp4_block_scale(COLLAGE_FP4_NVFP4, &t, 2.0f, &enc);
    CHECK(byte == 0x7e && enc == (float)(1.0 / (448.0 * (double)t.dec)), "nvfp4 block scale of amax 2 over a tensor's 1: "
          "0x%02x, enc %a", byte, (double)enc);
}

/* NaN or ±Inf anywhere: COLLAGE_ERR_NONFINITE, codes, scales and the tensor scale untouched; bad arguments;
 * the dequantizer refuses codes above 0xF and bytes that are no scale, writing nothing. */
static void test_refusals(void) {
    const float bad[4] = {NAN, -NAN, INFINITY, -INFINITY};
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
        for (int bi = 0; bi < 4; bi++)
            for (int at = 0; at < 300; at += 149) {
                float x[300];
                fill(x, 300, -3, 3);
                x[at] = bad[bi];
                uint8_t codes[300], scales[300];
                collage_fp4_tensor t = {-1.0f, -1.0f, -1.0f};
                memset(codes, 0xa5, sizeof codes), memset(scales, 0xa5, sizeof scales);
                const collage_fp4_quant q = {.recipe = (collage_fp4_recipe)ri, .k_axis = 1};
                const collage_status st = collage__fp4_quantize(&q, x, 3, 100, 100, codes, scales, &t);
                int touched = t.amax != -1.0f || t.enc != -1.0f || t.dec != -1.0f;
                for (int i = 0; i < 300; i++) touched |= codes[i] != 0xa5 || scales[i] != 0xa5;
                CHECK(st == COLLAGE_ERR_NONFINITE && !touched, "%s, %g at %d: status %d, outputs touched %d",
                      rname(q.recipe), (double)bad[bi], at, st, touched);
            }
    float x[4] = {0}, y[4] = {0};
    uint8_t codes[4] = {0}, scales[4] = {0};
    collage_fp4_tensor t = {0, 1, 1};
    collage_fp4_quant q = {.recipe = COLLAGE_FP4_RECIPE_COUNT, .k_axis = 1};
    CHECK(collage__fp4_quantize(&q, x, 1, 4, 4, codes, scales, &t) == COLLAGE_ERR_ARG, "unknown recipe");
    q.recipe = COLLAGE_FP4_NVFP4, q.k_axis = 2;
    CHECK(collage__fp4_quantize(&q, x, 1, 4, 4, codes, scales, &t) == COLLAGE_ERR_ARG, "k_axis 2");
    q.k_axis = 1, q.role = (collage_fp4_role)3;
    CHECK(collage__fp4_quantize(&q, x, 1, 4, 4, codes, scales, &t) == COLLAGE_ERR_ARG, "role 3");
    q.role = COLLAGE_FP4_ACT;
    CHECK(collage__fp4_quantize(&q, x, 1, 4, 3, codes, scales, &t) == COLLAGE_ERR_SIZE, "ld < cols");
    CHECK(collage__fp4_quantize(&q, x, 0, 4, 4, codes, scales, &t) == COLLAGE_ERR_SIZE, "no rows");
    CHECK(collage__fp4_quantize(&q, x, 1, 4, 4, NULL, scales, &t) == COLLAGE_ERR_NULL, "NULL codes");
    const struct { collage_fp4_recipe r; uint8_t code, scale; } DQ[] = {
        {COLLAGE_FP4_NVFP4, 0x10, 0x38}, {COLLAGE_FP4_NVFP4, 0, 0x7f}, {COLLAGE_FP4_NVFP4, 0, 0x80},
        {COLLAGE_FP4_MXFP4, 0, 0xff}, {COLLAGE_FP4_MXFP4, 0, 253}, {COLLAGE_FP4_MXFP4, COLLAGE_E2M1_NAN, 127}};
    for (size_t i = 0; i < sizeof DQ / sizeof *DQ; i++) {
        q.recipe = DQ[i].r;
        codes[2] = DQ[i].code, scales[0] = DQ[i].scale, y[2] = 7.0f;
        CHECK(collage__fp4_dequantize(&q, codes, scales, &t, 1, 4, y, 4) == COLLAGE_ERR_ARG && y[2] == 7.0f,
              "%s: code 0x%x scale 0x%02x not refused", rname(q.recipe), DQ[i].code, DQ[i].scale);
    }
    collage_fp4_recipe r;
    CHECK(collage__fp4_recipe_parse("nvfp4", &r) == COLLAGE_OK && r == COLLAGE_FP4_NVFP4 &&
              collage__fp4_recipe_parse("mxfp4", &r) == COLLAGE_OK && r == COLLAGE_FP4_MXFP4 &&
              collage__fp4_recipe_parse("fp4", &r) == COLLAGE_ERR_ARG,
          "recipe names");
}

/* SR is unbiased: over SR_KEYS fixed keys the mean of each dequantized element lies within SR_SIGMAS
 * standard errors (σ ≤ half the gap between its two dequantized neighbours) of x, plus the fp32 roundings
 * of the scales (SR_REL·|x|); an element whose scaled value reaches ±6 saturates under every key (MXFP4's
 * floor exponent puts a block's largest in [4, 8); NVFP4's rounded block scale can put it just above 6).
 * Deterministic: the keys are fixed. */
/* For element (r, c) of x (R, C), K along rows: the gap between the two dequantized values SR chooses
 * from, or, where the scaled value reaches ±6 (saturation: SR is biased there by design), 0 and in *sat
 * the ±6 code's dequantized value. */
static double o_sr_gap(collage_fp4_recipe rc, const float *x, int R, int C, int r, int c, double *sat) {
    const int len = rc == COLLAGE_FP4_NVFP4 ? 16 : 32, c0 = c / len * len;
    const o_tensor ot = o_tensor_scale(rc, o_max_abs(x, 0, R, 0, C, C));
    const o_block ob = o_block_scale(rc, &ot, o_max_abs(x, r, r + 1, c0, c0 + len < C ? c0 + len : C, C));
    const int lo = o_floor((double)f32((double)x[r * C + c] * (double)ob.enc));
    *sat = (lo & 7) == 7 ? o_dequant(rc, &ot, &ob, lo) : (double)NAN;
    return (lo & 7) == 7 ? 0 : fabs(o_dequant(rc, &ot, &ob, lo + 1) - o_dequant(rc, &ot, &ob, lo));
}

static void test_sr_mean(void) {
    enum { R = 2, C = 64 };
    float x[R * C], y[R * C];
    uint8_t codes[R * C], scales[R * C];
    fill(x, R * C, -6, 6);
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++) {
        double sum[R * C] = {0};
        for (int k = 0; k < SR_KEYS; k++) {
            const collage_fp4_quant q = {.recipe = (collage_fp4_recipe)ri, .role = COLLAGE_FP4_GRAD, .k_axis = 1,
                                         .sr = 1, .key = collage_rand_key(SEED, (uint64_t)k)};
            collage_fp4_tensor t;
            collage__fp4_quantize(&q, x, R, C, C, codes, scales, &t);
            collage__fp4_dequantize(&q, codes, scales, &t, R, C, y, C);
            for (int i = 0; i < R * C; i++) sum[i] += (double)y[i];
        }
        int bad = 0, saturated = 0;
        for (int i = 0; i < R * C; i++) {
            double sat;
            const double mean = sum[i] / SR_KEYS, gap = o_sr_gap((collage_fp4_recipe)ri, x, R, C, i / C, i % C, &sat);
            if (!isnan(sat)) {
                saturated++;
                CHECK(mean == sat, "%s element %d: x %a saturates to %a, SR mean %a", rname((collage_fp4_recipe)ri), i,
                      (double)x[i], sat, mean);
                continue;
            }
            const double tol = SR_SIGMAS * 0.5 * gap / sqrt((double)SR_KEYS) + SR_REL * fabs((double)x[i]) + gap * 0x1p-30;
            if (fabs(mean - (double)x[i]) > tol && bad++ < 5)
                CHECK(0, "%s element %d: x %a, SR mean %a (tol %a)", rname((collage_fp4_recipe)ri), i, (double)x[i],
                      mean, tol);
        }
        CHECK(bad == 0 && saturated < R * C / 4, "%s: %d biased elements, %d saturated", rname((collage_fp4_recipe)ri),
              bad, saturated);
    }
}

/* ---------------------------------------------------------------- the vector quantizer */
static const collage_isa ISAS[3] = {COLLAGE_ISA_SCALAR, COLLAGE_ISA_AVX2, COLLAGE_ISA_AVX512};

/* The lanes of isa on y[0 … n) (SR words r[i] with sr), both roads: the codes against the generic
 * encoder's, and the values-alone bits against those codes' values (sign kept, −0 included). Returns the
 * mismatches, the first few reported. */
static int lanes_differ(collage_isa isa, int sr, const float *y, const uint32_t *r, int n) {
    static uint8_t got[65536];
    static uint32_t bits[65536];
    int bad = 0;
    COLLAGE_ASSERT(n <= 65536);
    collage__fp4q_round_row(isa, sr, y, r, n, got, NULL);
    collage__fp4q_round_row(isa, sr, y, r, n, NULL, bits);
    for (int i = 0; i < n; i++) {
        const int want = sr ? collage_lp_from_f32_sr(COLLAGE_FMT_E2M1, y[i], r[i])
                            : collage_lp_from_f32_sat(COLLAGE_FMT_E2M1, y[i]);
        const uint32_t wbits = f32_bits(collage_lp_to_f32(COLLAGE_FMT_E2M1, (uint16_t)want));
        if ((got[i] != want || bits[i] != wbits) && bad++ < 5)
            CHECK(0, "%s %s y %a r %u: 0x%x (value bits 0x%08x), want 0x%x (0x%08x)", collage_isa_name(isa),
                  sr ? "SR" : "RN", (double)y[i], sr ? r[i] : 0u, got[i], bits[i], want, wbits);
    }
    return bad;
}

/* The rounding lanes of every ISA the CPU has against the generic encoder (collage_lp_from_f32_sat / _sr):
 * every e2m1 value, midpoint and quarter point with four fp32 ulps either side, fp32 subnormals, values far
 * beyond 6, ±Inf, ±0, and random fp32 values of every binade; SR with the threshold word 2^32 − F of each
 * input, its neighbours, both ends and random words; every bf16 value to nearest. Codes and values alone. */
static void test_round_lanes(void) {
    enum { MAXN = 8192 };
    static float y[MAXN];
    static uint32_t r[MAXN];
    int n = 0;
    const float pts[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f,
                         6.0f, 7.0f, 7.5f, 8.0f, 0.125f, 0.375f, 0.625f, 2.25f, 2.75f, 4.5f, 5.5f, 6.5f, 12.0f};
    for (size_t i = 0; i < sizeof pts / sizeof *pts; i++)
        for (int d = -4; d <= 4; d++)
            for (int sg = 0; sg < 2; sg++) {
                const uint32_t u = f32_bits(pts[i]);
                if (d < 0 && u < (uint32_t)-d) continue;
                const float v = bits_f32(u + (uint32_t)d);
                y[n++] = sg ? -v : v;
            }
    const float special[] = {INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0x1p-149f, -0x1p-149f, 0x1p-127f, 1e30f};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) y[n++] = special[i];
    while (n < MAXN / 4) y[n++] = bits_f32(rnd32() & 0xff7fffffu) * 1.0f; /* finite: exponent ≤ 254 */
    for (int i = 0; i < n; i++)
        if (isnan(y[i])) y[i] = 1.0f;
    const int base = n;
    /* SR copies: each input with its threshold word, the words either side, 0, 2^32 − 1 */
    for (int i = 0; i < base && n + 4 <= MAXN; i++) {
        const uint16_t lo = collage_lp_from_f32_sr(COLLAGE_FMT_E2M1, y[i], 0u);
        uint32_t T = 0; /* the least word that rounds away from zero, found by bisection on the generic encoder */
        uint64_t a = 0, b = (uint64_t)1 << 32;
        while (a < b) {
            const uint64_t m = (a + b) / 2;
            if (collage_lp_from_f32_sr(COLLAGE_FMT_E2M1, y[i], (uint32_t)m) != lo) b = m; else a = m + 1;
        }
        T = (uint32_t)a;
        const uint32_t w[4] = {T, T - 1u, T + 1u, rnd32()};
        for (int j = 0; j < 4; j++) y[n] = y[i], r[n++] = w[j];
    }
    static float yb[65536]; /* and every bf16 pattern but the NaNs, to nearest */
    int nb = 0;
    for (uint32_t u = 0; u < 65536; u++)
        if (!isnan(bf16_f32((uint16_t)u))) yb[nb++] = bf16_f32((uint16_t)u);
    for (int ii = 0; ii < 3; ii++) {
        if (!collage_isa_supported(ISAS[ii])) {
            printf("  %s: not on this CPU, skipped\n", collage_isa_name(ISAS[ii]));
            continue;
        }
        const int bad = lanes_differ(ISAS[ii], 0, y, r, base) + lanes_differ(ISAS[ii], 1, y + base, r + base, n - base) +
                        lanes_differ(ISAS[ii], 0, yb, NULL, nb);
        CHECK(bad == 0, "%s: %d codes or values differ from the generic encoder", collage_isa_name(ISAS[ii]), bad);
    }
}

/* One vector quantization (fp32 or bf16 input) against the scalar quantizer of the same values: the tensor
 * scale, every scale byte and code equal, every value equal to fp32(v·d) in bf16 bits, with and without
 * the codes asked for. */
static int check_vector(collage_isa isa, const collage_fp4_quant *q, const float *x, const uint16_t *xb, int rows,
                        int cols, int ld, int nt) {
    const size_t n = (size_t)rows * cols, nb = collage__fp4_blocks(q, rows, cols);
    uint8_t *c0 = malloc(n), *c1 = malloc(n), *s0 = malloc(nb), *s1 = malloc(nb);
    uint16_t *v = malloc(n * 2);
    float *enc = malloc(nb * 4), *d = malloc(nb * 4), *xf = malloc((size_t)rows * ld * 4);
    for (size_t i = 0; i < (size_t)rows * ld; i++) xf[i] = xb ? bf16_f32(xb[i]) : x[i];
    collage_fp4_tensor t0, t1;
    int bad = collage__fp4_quantize(q, xf, rows, cols, ld, c0, s0, &t0) != COLLAGE_OK;
    bad |= collage__fp4_quantize_isa(isa, q, xb ? NULL : x, xb, rows, cols, ld, c1, v, s1, enc, d, &t1, nt) != COLLAGE_OK;
    uint16_t *v2 = malloc(n * 2); /* values alone (codes NULL, as the products ask): the same values */
    bad |= collage__fp4_quantize_isa(isa, q, xb ? NULL : x, xb, rows, cols, ld, NULL, v2, s1, enc, d, &t1, nt) != COLLAGE_OK;
    if (!bad && memcmp(v, v2, n * 2) != 0) {
        bad++;
        CHECK(0, "values alone differ from the values with codes");
    }
    free(v2);
    if (!bad) {
        bad |= memcmp(&t0, &t1, sizeof t0) != 0;
        bad |= memcmp(s0, s1, nb) != 0;
        int br, bc;
        collage__fp4_block_shape(q, &br, &bc);
        const int gc = (cols + bc - 1) / bc;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                const size_t i = (size_t)r * cols + c;
                const float dv = collage__fp4_scale_value(q->recipe, s0[(size_t)(r / br) * gc + c / bc]);
                const float want = collage_lp_to_f32(COLLAGE_FMT_E2M1, c0[i]) * dv;
                if ((c0[i] != c1[i] || f32_bits(want) != ((uint32_t)v[i] << 16)) && bad++ < 3)
                    CHECK(0, "(%d,%d) x %a: code 0x%x value %a, scalar 0x%x %a", r, c, (double)xf[(size_t)r * ld + c],
                          c1[i], (double)bf16_f32(v[i]), c0[i], (double)want);
            }
    }
    free(c0), free(c1), free(s0), free(s1), free(v), free(enc), free(d), free(xf);
    return bad;
}

/* Every ISA the CPU has, 1 to 3 threads, fp32 and bf16 input, every recipe, role, K axis and rounding on
 * odd shapes (one large enough for the threads to share it), and SR with index0 just below 2^32 and 2^33
 * (the runs cut where the index's high half changes), with rows of zeros, subnormals and huge values: bit
 * for bit the scalar quantizer. */
static void test_vector(void) {
    const int shapes[5][3] = {{1, 1, 1}, {3, 300, 301}, {257, 5, 5}, {33, 47, 50}, {300, 257, 260}};
    const uint64_t idx0[3] = {1000, 0xfffffff0ull, 0x1ffffff00ull};
    for (int si = 0; si < 5; si++) {
        const int rows = shapes[si][0], cols = shapes[si][1], ld = shapes[si][2];
        float *x = malloc((size_t)rows * ld * sizeof(float));
        uint16_t *xb = malloc((size_t)rows * ld * 2);
        fill(x, (size_t)rows * ld, -12, 12);
        if (rows >= 33) /* rows of zeros, fp32 subnormals and huge values: MXFP4's clamps, NVFP4's flushed blocks */
            for (int c = 0; c < cols; c++)
                x[c] = 0.0f, x[ld + c] = (c & 1 ? 1e-40f : -3e-39f) * (float)(c % 7), x[2 * (size_t)ld + c] = c & 1 ? 1.5e38f : -1e37f;
        for (size_t i = 0; i < (size_t)rows * ld; i++) xb[i] = (uint16_t)(f32_bits(x[i] * 1.7f) >> 16);
        for (int ii = 0; ii < 3; ii++) {
            if (!collage_isa_supported(ISAS[ii])) continue;
            for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
                for (int role = 0; role <= COLLAGE_FP4_GRAD; role++)
                    for (int ka = 0; ka < 2; ka++)
                        for (int sr = 0; sr < 2; sr++)
                            for (int nt = 1; nt <= 3; nt++) {
                                const collage_fp4_quant q = {.recipe = (collage_fp4_recipe)ri,
                                                             .role = (collage_fp4_role)role, .k_axis = ka, .sr = sr,
                                                             .key = 9u + (uint64_t)si, .index0 = idx0[(si + nt) % 3]};
                                for (int in = 0; in < 2; in++)
                                    CHECK(check_vector(ISAS[ii], &q, x, in ? xb : NULL, rows, cols, ld, nt) == 0,
                                          "%s %s %dx%d role %d k_axis %d sr %d nt %d %s", collage_isa_name(ISAS[ii]),
                                          rname(q.recipe), rows, cols, role, ka, sr, nt, in ? "bf16" : "fp32");
                            }
        }
        free(x), free(xb);
    }
}

/* NaN or ±Inf anywhere: refused by every ISA with nothing written to codes, values, scales or the tensor. */
static void test_vector_refusals(void) {
    enum { R = 20, C = 70 };
    float x[R * C];
    fill(x, R * C, -3, 3);
    const float bad_vals[3] = {NAN, INFINITY, -INFINITY};
    for (int ii = 0; ii < 3; ii++) {
        if (!collage_isa_supported(ISAS[ii])) continue;
        for (int bi = 0; bi < 3; bi++)
            for (int ka = 0; ka < 2; ka++) {
                float y[R * C];
                memcpy(y, x, sizeof y);
                y[(size_t)(R - 1) * C + C - 2] = bad_vals[bi];
                uint8_t codes[R * C], scales[R * C];
                uint16_t vals[R * C];
                float enc[R * C], d[R * C];
                memset(codes, 0xAB, sizeof codes), memset(scales, 0xAB, sizeof scales), memset(vals, 0xAB, sizeof vals);
                collage_fp4_tensor t = {-1.0f, -1.0f, -1.0f};
                const collage_fp4_quant q = {.recipe = COLLAGE_FP4_NVFP4, .role = COLLAGE_FP4_ACT, .k_axis = ka};
                const collage_status st =
                    collage__fp4_quantize_isa(ISAS[ii], &q, y, NULL, R, C, C, codes, vals, scales, enc, d, &t, 2);
                int touched = t.amax != -1.0f;
                for (int i = 0; i < R * C; i++) touched |= codes[i] != 0xAB || scales[i] != 0xAB || vals[i] != 0xABAB;
                CHECK(st == COLLAGE_ERR_NONFINITE && !touched, "%s %a k_axis %d: status %d, written %d",
                      collage_isa_name(ISAS[ii]), (double)bad_vals[bi], ka, st, touched);
            }
    }
}

/* ---------------------------------------------------------------- the random Hadamard transform */
#define RHT_ERR 8.0 /* the bound on each output's error, in units of 2^-24 · Σ|x_j| / 4 (4 stages of sums) */

/* (1/4)·H16·D·x in double for group element i (H_ij = (−1)^popcount(i & j)), and (1/4)·Σ|x_j|. */
static double o_rht(uint16_t signs, const double *x, int i, double *mag) {
    double s = 0, m = 0;
    for (int j = 0; j < 16; j++) {
        const double v = ((signs >> j & 1) ? -x[j] : x[j]) * (__builtin_popcount((unsigned)(i & j)) & 1 ? -1 : 1);
        s += v, m += fabs(v);
    }
    *mag = m / 4;
    return s / 4;
}

/* Against the transform in double on both K axes (partial groups copied), fp32 and bf16 input, 1-3 threads
 * giving the same bits; the inverse returns x within twice the bound; inner products of two columns are
 * kept (orthogonal up to fp32 rounding); a unit vector gives ±1/4 exactly; the signs are a function of the
 * key. */
static void test_rht(void) {
    enum { R = 37, C = 70 }; /* two whole groups and 5 rows (6 columns) left over */
    float x[R * C], y[R * C], z[R * C], y2[R * C];
    uint16_t xb[R * C];
    fill(x, R * C, -20, 10);
    for (int i = 0; i < R * C; i++) xb[i] = (uint16_t)(f32_bits(x[i]) >> 16);
    const uint16_t signs = collage__fp4_rht_signs(12345u);
    CHECK(signs == collage__fp4_rht_signs(12345u) && signs != collage__fp4_rht_signs(12346u) && signs != 0 &&
              signs != 0xffffu, "signs 0x%04x", signs);
    for (int ka = 0; ka < 2; ka++)
        for (int in = 0; in < 2; in++) {
            collage__fp4_rht(signs, 0, in ? NULL : x, in ? xb : NULL, R, C, C, ka, y, C, 1);
            int bad = 0;
            const int groups = ka ? C / 16 : R / 16, lines = ka ? R : C;
            for (int l = 0; l < lines; l++)
                for (int g = 0; g < groups; g++) {
                    double xv[16];
                    for (int j = 0; j < 16; j++) {
                        const size_t e = ka ? (size_t)l * C + 16 * g + j : (size_t)(16 * g + j) * C + l;
                        xv[j] = in ? (double)bf16_f32(xb[e]) : (double)x[e];
                    }
                    for (int i = 0; i < 16; i++) {
                        const size_t e = ka ? (size_t)l * C + 16 * g + i : (size_t)(16 * g + i) * C + l;
                        double mag;
                        const double want = o_rht(signs, xv, i, &mag);
                        if (!(fabs((double)y[e] - want) <= RHT_ERR * 0x1p-24 * mag) && bad++ < 3)
                            CHECK(0, "k_axis %d line %d group %d elem %d: %a, want %a", ka, l, g, i, (double)y[e], want);
                    }
                }
            for (int r = 0; r < R; r++) /* the elements past the last group are copied */
                for (int c = 0; c < C; c++)
                    if ((ka ? c >= C / 16 * 16 : r >= R / 16 * 16) &&
                        f32_bits(y[(size_t)r * C + c]) != f32_bits(in ? bf16_f32(xb[(size_t)r * C + c]) : x[(size_t)r * C + c]))
                        bad++;
            for (int nt = 2; nt <= 3; nt++) {
                collage__fp4_rht(signs, 0, in ? NULL : x, in ? xb : NULL, R, C, C, ka, y2, C, nt);
                bad += memcmp(y, y2, sizeof y) != 0;
            }
            CHECK(bad == 0, "k_axis %d %s: %d differences", ka, in ? "bf16" : "fp32", bad);
            if (in) continue;
            collage__fp4_rht(signs, 1, y, NULL, R, C, C, ka, z, C, 2);
            bad = 0;
            for (int i = 0; i < R * C; i++) {
                const int r = i / C, c = i % C; /* the bound of the group holding element i: 2 transforms */
                double mag = 0;
                for (int j = 0; j < 16; j++) {
                    const int rr = ka ? r : (r / 16) * 16 + j, cc = ka ? (c / 16) * 16 + j : c;
                    if (rr < R && cc < C) mag += fabs((double)x[(size_t)rr * C + cc]) / 4;
                }
                if (!(fabs((double)z[i] - (double)x[i]) <= 2 * RHT_ERR * 0x1p-24 * mag) && bad++ < 3)
                    CHECK(0, "k_axis %d inverse (%d,%d): %a, x %a", ka, r, c, (double)z[i], (double)x[i]);
            }
            CHECK(bad == 0, "k_axis %d: inverse off in %d elements", ka, bad);
        }
    /* inner products of columns 3 and 8 over the two whole groups, before and after (k_axis 0) */
    collage__fp4_rht(signs, 0, x, NULL, R, C, C, 0, y, C, 1);
    double ip_x = 0, ip_y = 0, n3 = 0, n8 = 0;
    for (int r = 0; r < 32; r++) {
        const double a = (double)x[r * C + 3], b = (double)x[r * C + 8];
        ip_x += a * b, ip_y += (double)y[r * C + 3] * (double)y[r * C + 8], n3 += a * a, n8 += b * b;
    }
    CHECK(fabs(ip_y - ip_x) <= 4 * RHT_ERR * 0x1p-24 * sqrt(n3 * n8), "inner product %.9e, was %.9e", ip_y, ip_x);
    float e[16 * 1], u[16];
    for (int j = 0; j < 16; j++) {
        for (int i = 0; i < 16; i++) e[i] = i == j ? 1.0f : 0.0f;
        collage__fp4_rht(signs, 0, e, NULL, 16, 1, 1, 0, u, 1, 1);
        for (int i = 0; i < 16; i++) {
            const float want = ((signs >> j & 1) ^ (__builtin_popcount((unsigned)(i & j)) & 1)) ? -0.25f : 0.25f;
            CHECK(f32_bits(u[i]) == f32_bits(want), "unit %d: element %d %a, want %a", j, i, (double)u[i], (double)want);
        }
    }
}

/* ---------------------------------------------------------------- the 4-bit product */
typedef struct { float *C; int ldc; int calls; } keep_ctx;
static void keep_tile(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    keep_ctx *c = p;
#pragma omp atomic
    c->calls++;
    for (int i = i0; i < i1; i++) memcpy(c->C + (size_t)i * c->ldc + j0, t + (size_t)(i - i0) * ldt, (size_t)(j1 - j0) * 4);
}

/* bf16 values with random signs and magnitudes 2^[lo, hi). */
static void fill_bf16(uint16_t *x, size_t n, int lo, int hi) {
    for (size_t i = 0; i < n; i++) {
        float v;
        fill(&v, 1, lo, hi);
        x[i] = (uint16_t)(f32_bits(v) >> 16);
    }
}

/* The double product of the operands dequantized by the scalar quantizer (value · dec, exact in double),
 * and Σ|a·b| per element, for the error bound. */
static void o_product(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                      double *D, double *S) {
    const int rows[2] = {ta ? K : M, tb ? N : K}, cols[2] = {ta ? M : K, tb ? K : N};
    const uint16_t *X[2] = {A, B};
    double *dq[2];
    for (int w = 0; w < 2; w++) {
        const collage_fp4_quant q = nn_fp4_quant_of(p, w, w ? tb : ta);
        const size_t n = (size_t)rows[w] * cols[w];
        float *x = malloc(n * 4), *y = malloc(n * 4);
        uint8_t *codes = malloc(n), *sc = malloc(collage__fp4_blocks(&q, rows[w], cols[w]));
        if (p->hadamard) collage__fp4_rht(p->signs, 0, NULL, X[w], rows[w], cols[w], cols[w], q.k_axis, x, cols[w], 1);
        else for (size_t i = 0; i < n; i++) x[i] = bf16_f32(X[w][i]);
        collage_fp4_tensor t;
        collage__fp4_quantize(&q, x, rows[w], cols[w], cols[w], codes, sc, &t);
        collage__fp4_dequantize(&q, codes, sc, &t, rows[w], cols[w], y, cols[w]); /* fp32(fp32(v·d)·dec) */
        int br, bc;
        collage__fp4_block_shape(&q, &br, &bc);
        dq[w] = malloc(n * sizeof(double));
        for (int r = 0; r < rows[w]; r++)
            for (int c = 0; c < cols[w]; c++) {
                const size_t i = (size_t)r * cols[w] + c;
                const double vd = (double)collage_lp_to_f32(COLLAGE_FMT_E2M1, codes[i]) *
                                  (double)collage__fp4_scale_value(q.recipe, sc[(size_t)(r / br) * ((cols[w] + bc - 1) / bc) + c / bc]);
                dq[w][i] = vd * (double)t.dec; /* y[i] is this rounded once to fp32 */
                CHECK((double)y[i] == (double)f32(dq[w][i]), "dequantized value");
            }
        free(x), free(y), free(codes), free(sc);
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = 0, s2 = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? dq[0][(size_t)k * M + i] : dq[0][(size_t)i * K + k];
                const double b = tb ? dq[1][(size_t)j * K + k] : dq[1][(size_t)k * N + j];
                d += a * b, s2 += fabs(a * b);
            }
            D[(size_t)i * N + j] = d, S[(size_t)i * N + j] = s2;
        }
    free(dq[0]), free(dq[1]);
}

typedef struct { int ta, tb; collage_fp4_role ra, rb; int sr_a, had; const char *name; } fp4_kind;
static const fp4_kind FP4_KINDS[3] = {{0, 1, COLLAGE_FP4_ACT, COLLAGE_FP4_WEIGHT, 0, 0, "Y = X·Wᵀ"},
                                      {0, 0, COLLAGE_FP4_GRAD, COLLAGE_FP4_WEIGHT, 1, 0, "dX = dY·W"},
                                      {1, 0, COLLAGE_FP4_GRAD, COLLAGE_FP4_ACT, 1, 1, "dW = dYᵀ·X"}};

/* For both recipes, with and without the Hadamard transform on dW, and each of a linear layer's three
 * products at odd sizes (SR on the gradient): the door on the reference sgemm (widening path) and on
 * collage's fma kernel (its fused sums in k order equal the twin's, the products being exact) equals the
 * scalar twin bit for bit on 1, 2 and 3 threads; every available path is within fp32-sum error of the
 * double product of the dequantized operands: |c − d| ≤ (K + 4)·2^-24·Σ|a·b|. */
static void test_product(void) {
    enum { NT = 300, OC = 70, CH = 260 }; /* tokens, outputs, inputs */
    uint16_t *X = malloc(NT * CH * 2), *W = malloc(OC * CH * 2), *dY = malloc(NT * OC * 2);
    fill_bf16(X, NT * CH, -4, 3), fill_bf16(W, OC * CH, -8, -2), fill_bf16(dY, NT * OC, -30, -22);
    char err[160];
    CHECK(nn_products_pin("ref", err, sizeof err) == 0, "pin: %s", err);
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
        for (int had = 0; had < 2; had++)
            for (int ki = 0; ki < 3; ki++) {
                const fp4_kind *pk = &FP4_KINDS[ki];
                if (had && !pk->had) continue;
                const int M = ki == 2 ? OC : NT, N = ki == 0 ? OC : CH, K = ki == 0 ? CH : ki == 1 ? OC : NT;
                const uint16_t *A = ki == 0 ? X : dY, *B = ki == 0 ? W : ki == 1 ? W : X;
                const int lda = ki == 0 ? CH : OC, ldb = CH;
                const nn_fp4_spec p = {.recipe = (collage_fp4_recipe)ri, .ra = pk->ra, .rb = pk->rb, .sr_a = pk->sr_a,
                                       .key = 77u, .hadamard = had, .signs = collage__fp4_rht_signs(5u)};
                float *R = malloc((size_t)M * N * 4), *C = malloc((size_t)M * N * 4);
                keep_ctx kr = {.C = R, .ldc = N};
                CHECK(nn_gemm_fp4_ref(&p, pk->ta, pk->tb, M, N, K, A, lda, B, ldb, keep_tile, &kr) == COLLAGE_OK, "ref");
                double *D = malloc((size_t)M * N * 8), *S = malloc((size_t)M * N * 8);
                o_product(&p, pk->ta, pk->tb, M, N, K, A, B, D, S);
                for (int path = 0; path < NN_BF16_COUNT; path++) {
                    if (!nn_bf16_available((nn_bf16_path)path)) continue;
                    for (int nt = 1; nt <= 3; nt++) {
                        nn_fp4_ws ws = {0};
                        CHECK(nn_gemm_fp4_reserve(&ws, &p, pk->ta, pk->tb, M, N, K, nt, (nn_bf16_path)path) == 0, "reserve");
                        memset(C, 0xff, (size_t)M * N * 4);
                        keep_ctx kc = {.C = C, .ldc = N};
                        CHECK(nn_gemm_fp4(&p, pk->ta, pk->tb, M, N, K, A, lda, B, ldb, keep_tile, &kc, &ws,
                                          (nn_bf16_path)path, nt) == COLLAGE_OK, "product");
                        int diff = 0, over = 0;
                        for (size_t e = 0; e < (size_t)M * N; e++) {
                            diff += memcmp(&C[e], &R[e], 4) != 0;
                            over += !(fabs((double)C[e] - D[e]) <= (K + 4) * 0x1p-24 * S[e]);
                        }
                        if (path == NN_BF16_WIDEN || path == NN_BF16_FMA) /* sums in k order, exact products */
                            CHECK(diff == 0, "%s%s %s %s nt %d: %d elements differ from the scalar twin", rname(p.recipe),
                                  had ? ",hadamard" : "", pk->name, nn_bf16_name((nn_bf16_path)path), nt, diff);
                        CHECK(over == 0, "%s%s %s %s nt %d: %d elements beyond the bound of the double product",
                              rname(p.recipe), had ? ",hadamard" : "", pk->name, nn_bf16_name((nn_bf16_path)path), nt, over);
                        nn_fp4_ws_free(&ws);
                    }
                }
                free(R), free(C), free(D), free(S);
            }
    nn_products_pin(NULL, err, sizeof err);
    free(X), free(W), free(dY);
}

/* NaN or Inf in either operand: COLLAGE_ERR_NONFINITE and ep never called, by the door and the twin. */
static void test_product_nonfinite(void) {
    enum { M = 40, N = 24, K = 130 };
    uint16_t A[M * K], B[N * K];
    fill_bf16(A, M * K, -2, 2), fill_bf16(B, N * K, -2, 2);
    const uint16_t bad[2] = {0x7fc0, 0xff80};
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
        for (int which = 0; which < 2; which++)
            for (int bi = 0; bi < 2; bi++) {
                uint16_t *X = which ? B : A, keep = X[77];
                X[77] = bad[bi];
                const nn_fp4_spec p = {.recipe = (collage_fp4_recipe)ri, .ra = COLLAGE_FP4_ACT, .rb = COLLAGE_FP4_WEIGHT};
                float C[M * N];
                keep_ctx kc = {.C = C, .ldc = N};
                nn_fp4_ws ws = {0};
                CHECK(nn_gemm_fp4_reserve(&ws, &p, 0, 1, M, N, K, 2, NN_BF16_WIDEN) == 0, "reserve");
                const collage_status s1 = nn_gemm_fp4(&p, 0, 1, M, N, K, A, K, B, K, keep_tile, &kc, &ws, NN_BF16_WIDEN, 2);
                const collage_status s2 = nn_gemm_fp4_ref(&p, 0, 1, M, N, K, A, K, B, K, keep_tile, &kc);
                CHECK(s1 == COLLAGE_ERR_NONFINITE && s2 == COLLAGE_ERR_NONFINITE && kc.calls == 0,
                      "%s operand %d 0x%04x: %d %d, %d tiles", rname(p.recipe), which, bad[bi], s1, s2, kc.calls);
                nn_fp4_ws_free(&ws);
                X[77] = keep;
            }
}

/* A layer's weight copy (nn_fp4_wcopy, numerics.md §15 "The model in fp4"): NVFP4's forward quantization
 * of W serves dX (16×16 blocks along either K), MXFP4's does not; dX through the copy the forward made is
 * dX without a copy, bit for bit, on every path, for sides that are not multiples of 16; dX takes the
 * copy's values (zeroed, dX is zero) while the copy is of its weight, and another matrix is quantized anew. */
static void test_weight_copy(void) {
    enum { NT = 40, OC = 24, CH = 40 }; /* tokens, outputs, inputs */
    uint16_t *X = malloc(NT * CH * 2), *W = malloc(OC * CH * 2), *W2 = malloc(OC * CH * 2), *dY = malloc(NT * OC * 2);
    uint16_t *Y = malloc(NT * OC * 2), *d0 = malloc(NT * CH * 2), *d1 = malloc(NT * CH * 2);
    fill_bf16(X, NT * CH, -4, 3), fill_bf16(W, OC * CH, -8, -2), fill_bf16(dY, NT * OC, -30, -22);
    memcpy(W2, W, OC * CH * 2);
    for (int ri = 0; ri < COLLAGE_FP4_RECIPE_COUNT; ri++)
        for (int had = 0; had < 2; had++) {
            nn_fp4_layer L = {.recipe = (collage_fp4_recipe)ri, .hadamard = had, .signs = collage__fp4_rht_signs(5u),
                              .key = 31u};
            CHECK(nn_fp4_wcopy_serves(&L) == (ri == COLLAGE_FP4_NVFP4), "%s%s: the copy serves dX: %d", rname(L.recipe),
                  had ? ",hadamard" : "", nn_fp4_wcopy_serves(&L));
            if (!nn_fp4_wcopy_serves(&L)) continue;
            for (int path = 0; path < NN_BF16_COUNT; path++) {
                if (!nn_bf16_available((nn_bf16_path)path)) continue;
                const nn_bf16_path pa = (nn_bf16_path)path;
                nn_fp4_ws ws = {0};
                nn_fp4_wcopy wc = {0};
                CHECK(nn_fp4_layer_reserve(&ws, &L, NT, CH, OC, 2, pa) == 0 && nn_fp4_wcopy_alloc(&wc, CH, OC) == 0, "alloc");
                CHECK(nn_matmul_backward_input_fp4(d0, dY, W, NT, CH, OC, &L, &ws, pa, 2) == COLLAGE_OK, "dX");
                nn_fp4_layer Lc = L;
                Lc.wc = &wc;
                CHECK(nn_matmul_forward_fp4(Y, X, W, NULL, NULL, NT, CH, OC, &Lc, &ws, pa, 2) == COLLAGE_OK &&
                      wc.valid && wc.w == W, "forward with the copy");
                memset(d1, 0xff, NT * CH * 2);
                CHECK(nn_matmul_backward_input_fp4(d1, dY, W, NT, CH, OC, &Lc, &ws, pa, 2) == COLLAGE_OK &&
                      !memcmp(d0, d1, NT * CH * 2), "%s %s: dX through the copy differs", had ? "hadamard" : "",
                      nn_bf16_name(pa));
                memset(wc.v, 0, wc.cap * 2);
                int nz = 0;
                CHECK(nn_matmul_backward_input_fp4(d1, dY, W, NT, CH, OC, &Lc, &ws, pa, 2) == COLLAGE_OK, "dX, zeroed");
                for (int i = 0; i < NT * CH; i++) nz += d1[i] != 0;
                CHECK(nz == 0, "%s: dX did not take the copy (%d nonzero)", nn_bf16_name(pa), nz);
                memset(d1, 0xff, NT * CH * 2);
                CHECK(nn_matmul_backward_input_fp4(d1, dY, W2, NT, CH, OC, &Lc, &ws, pa, 2) == COLLAGE_OK &&
                      !memcmp(d0, d1, NT * CH * 2) && wc.w == W2, "%s: another matrix took the copy", nn_bf16_name(pa));
                nn_fp4_wcopy_free(&wc);
                nn_fp4_ws_free(&ws);
            }
        }
    free(X), free(W), free(W2), free(dY), free(Y), free(d0), free(d1);
}

int main(void) {
    tables_init();
    printf("test_fp4: seed %u\n", SEED);
    RUN(test_random);
    RUN(test_grid_roundtrip);
    RUN(test_zeros_and_huge);
    RUN(test_saturation);
    RUN(test_refusals);
    RUN(test_sr_mean);
    RUN(test_round_lanes);
    RUN(test_vector);
    RUN(test_vector_refusals);
    RUN(test_rht);
    RUN(test_product);
    RUN(test_product_nonfinite);
    RUN(test_weight_copy);
    return h_end();
}

/* test_fp8.c — fp8 compute (numerics.md §13): every e4m3 and e5m2 value through bf16; each recipe's scales,
 * codes and saturation against transcriptions of §13 on constructed and random tensors (zeros, one huge
 * value, NaN and Inf refused with nothing written, blocks at odd sizes); delayed scaling's history over
 * steps, its bytes saved and resumed bit for bit and bad bytes refused; the fp8 product against its scalar
 * twin bit for bit on the reference sgemm for 1, 2 and 3 threads, and against a double product of the
 * dequantized operands on every path; a linear layer's four fp8 ops and the encoder's two through their
 * bf16 epilogues. */
#include "harness.h"
#include "nn.h"
#include "nn_bert.h" /* the encoder's two products */
#include <float.h>
#include "internal.h"

#define SEED 36u
static uint64_t rng = SEED;
static uint32_t rnd32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}
static float urand(void) { return (float)(rnd32() >> 8) * 0x1p-24f; } /* [0, 1) */
static uint16_t bf(float x) { return collage_bf16_from_f32(x).bits; }
static float f(uint16_t b) { return collage_bf16_to_f32((collage_bf16){b}); }

/* x (n) filled with bf16 values: sign random, magnitude 2^[lo, hi) with a random significand. */
static void fill(uint16_t *x, size_t n, int lo, int hi) {
    for (size_t i = 0; i < n; i++) {
        const float m = ldexpf(1.0f + urand(), lo + (int)(rnd32() % (uint32_t)(hi - lo)));
        x[i] = bf(rnd32() & 1 ? -m : m);
    }
}

static const collage_format FMTS[2] = {COLLAGE_FMT_E4M3, COLLAGE_FMT_E5M2};

/* Every finite e4m3 and e5m2 value is a bf16 value: widened, rounded to bf16 and back it is unchanged;
 * rounded back to the format (saturating) it is its own code; quantized with scale 1 it keeps its code. */
static void test_roundtrip(void) {
    for (int fi = 0; fi < 2; fi++) {
        const collage_format fm = FMTS[fi];
        uint16_t x[256];
        uint8_t want[256];
        int n = 0;
        for (int c = 0; c < 256; c++) {
            const float v = collage_lp_to_f32(fm, (uint16_t)c);
            if (!isfinite(v)) continue;
            const uint16_t b = bf(v);
            CHECK(f(b) == v && signbit(f(b)) == signbit(v), "%s code 0x%02x: %g through bf16 gives %g",
                  collage_format_get(fm)->name, c, (double)v, (double)f(b));
            CHECK(collage_lp_from_f32_sat(fm, f(b)) == c, "%s code 0x%02x back 0x%02x", collage_format_get(fm)->name,
                  c, collage_lp_from_f32_sat(fm, f(b)));
            x[n] = b, want[n++] = (uint8_t)c;
        }
        CHECK(n == (fi ? 248 : 254), "%d finite values", n);
        const collage_fp8_quant q = {.recipe = COLLAGE_FP8_DELAYED, .fmt = fm, .k_axis = 1, .scale = 1.0f};
        uint8_t codes[256];
        uint16_t vals[256];
        float s, inv, amax;
        CHECK(collage__fp8_quantize(&q, x, 1, n, n, codes, vals, 0, &s, &inv, &amax, 1) == COLLAGE_OK, "quantize");
        for (int i = 0; i < n; i++)
            CHECK(codes[i] == want[i] && vals[i] == x[i], "code 0x%02x: quantized 0x%02x value 0x%04x", want[i],
                  codes[i], vals[i]);
        CHECK(s == 1.0f && inv == 1.0f && amax == collage_format_get(fm)->max_value, "s %g inv %g amax %g", (double)s,
              (double)inv, (double)amax);
    }
}

/* The fast saturating rounding equals the generic encoder's (collage_lp_from_f32_sat, tested against MPFR)
 * on every fp32 sign, exponent and top 7 fraction bits with the low 16 bits at the patterns that sit on and
 * next to each rounding boundary of e4m3 and e5m2 (their midpoints have 0x…80000 or 0x…100000 low bits),
 * ±Inf, and 2^20 random patterns. */
static void test_sat_fast(void) {
    static const uint32_t low[8] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff, 0x5555};
    int bad = 0;
    for (int fi = 0; fi < 2; fi++) {
        for (uint32_t hi = 0; hi < 0x10000u; hi++) {
            if ((hi & 0x7f80u) == 0x7f80u && (hi & 0x7fu)) continue; /* NaN: never rounded (refused before) */
            for (int l = 0; l < 8; l++) {
                const uint32_t u = hi << 16 | low[l];
                if ((u & 0x7fffffffu) > 0x7f800000u) continue;
                const float y = bits_f32(u);
                const uint8_t want = (uint8_t)collage_lp_from_f32_sat(FMTS[fi], y), got = collage__fp8_sat(FMTS[fi], y);
                if (want != got && bad++ < 10)
                    CHECK(want == got, "%s: y %a (0x%08x): 0x%02x, the encoder 0x%02x", collage_format_get(FMTS[fi])->name,
                          (double)y, u, got, want);
            }
        }
        for (int i = 0; i < (1 << 20); i++) {
            const uint32_t u = rnd32();
            if ((u & 0x7fffffffu) > 0x7f800000u) continue;
            const float y = bits_f32(u);
            const uint8_t want = (uint8_t)collage_lp_from_f32_sat(FMTS[fi], y), got = collage__fp8_sat(FMTS[fi], y);
            if (want != got && bad++ < 10)
                CHECK(want == got, "%s: y %a: 0x%02x, the encoder 0x%02x", collage_format_get(FMTS[fi])->name, (double)y,
                      got, want);
        }
    }
    CHECK(bad == 0, "%d mismatches", bad);
}

/* ---------------------------------------------------------------- the oracle of §13's scales */
/* The least E with a ≤ F·2^E, by search in double (exact scalings), clamped to the bf16-exact range. */
static int mx_exp_oracle(collage_format fm, double a) {
    const collage_format_info *F = collage_format_get(fm);
    const int lo = fm == COLLAGE_FMT_E4M3 ? -124 : -117, hi = fm == COLLAGE_FMT_E4M3 ? 119 : 112;
    if (a == 0) return lo;
    int e = -200;
    while (a > ldexp((double)F->max_value, e)) e++;
    return e < lo ? lo : e > hi ? hi : e;
}

/* The s and inv §13 gives a block of amax a (an independent transcription: fp32 quotients by double
 * division rounded once, innocuous by Figueroa's theorem). */
static void scale_oracle(const collage_fp8_quant *q, double a, float *s, float *inv) {
    const double F = (double)collage_format_get(q->fmt)->max_value;
    if (q->recipe == COLLAGE_FP8_MXFP8) {
        const int e = mx_exp_oracle(q->fmt, a);
        *s = (float)ldexp(1, -e), *inv = (float)ldexp(1, e);
    } else if (q->recipe == COLLAGE_FP8_DELAYED) {
        *s = q->scale, *inv = (float)(1.0 / (double)q->scale);
    } else if (a == 0) {
        *s = *inv = 1.0f;
    } else {
        const double sd = F / a;
        *s = (float)sd;
        if (isinf(*s)) *s = FLT_MAX;
        *inv = q->recipe == COLLAGE_FP8_BLOCK ? (float)(a / F) : (float)(1.0 / (double)*s);
    }
}

/* Quantizes x (rows, cols) with q on nt threads and checks every block's s, inv and every code against
 * the oracle (block shape br × bc as §13 says); returns the failures. */
static int check_quant(const collage_fp8_quant *q, const uint16_t *x, int rows, int cols, int br, int bc, int nt) {
    int ebr, ebc, bad = 0;
    collage__fp8_block_shape(q, rows, cols, &ebr, &ebc);
    CHECK(ebr == br && ebc == bc, "%s k_axis %d role %d: blocks %dx%d, want %dx%d", collage__fp8_recipe_name(q->recipe),
          q->k_axis, q->role, ebr, ebc, br, bc);
    const int gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
    CHECK(collage__fp8_blocks(q, rows, cols) == (size_t)gr * gc, "block count");
    uint8_t *codes = malloc((size_t)rows * cols);
    uint16_t *vals = malloc((size_t)rows * cols * 2);
    float *s = malloc((size_t)gr * gc * 4), *inv = malloc((size_t)gr * gc * 4), amax;
    const int dq = q->recipe == COLLAGE_FP8_MXFP8;
    CHECK(collage__fp8_quantize(q, x, rows, cols, cols, codes, vals, dq, s, inv, &amax, nt) == COLLAGE_OK, "quantize");
    double top = 0;
    for (int b = 0; b < gr * gc; b++) {
        const int r0 = b / gc * br, c0 = b % gc * bc;
        double a = 0;
        for (int r = r0; r < rows && r < r0 + br; r++)
            for (int c = c0; c < cols && c < c0 + bc; c++) a = fmax(a, fabs((double)f(x[(size_t)r * cols + c])));
        top = fmax(top, a);
        float ws, wi;
        scale_oracle(q, a, &ws, &wi);
        if (s[b] != ws || inv[b] != wi) bad++;
        CHECK(s[b] == ws && inv[b] == wi, "%s block %d (amax %g): s %a inv %a, want %a %a",
              collage__fp8_recipe_name(q->recipe), b, a, (double)s[b], (double)inv[b], (double)ws, (double)wi);
        for (int r = r0; r < rows && r < r0 + br; r++)
            for (int c = c0; c < cols && c < c0 + bc; c++) {
                const size_t i = (size_t)r * cols + c;
                const uint8_t want = (uint8_t)collage_lp_from_f32_sat(q->fmt, f(x[i]) * ws);
                const double qv = (double)collage_lp_to_f32(q->fmt, want);
                const uint16_t wv = bf((float)(dq ? qv * (double)wi : qv));
                if (codes[i] != want || vals[i] != wv) bad++;
                CHECK(codes[i] == want && vals[i] == wv, "(%d,%d) x %g: code 0x%02x value 0x%04x, want 0x%02x 0x%04x",
                      r, c, (double)f(x[i]), codes[i], vals[i], want, wv);
                if (dq) CHECK((double)f(vals[i]) == qv * (double)wi, "(%d,%d): dequantized value not exact", r, c);
            }
    }
    CHECK((double)amax == top, "amax %g want %g", (double)amax, top);
    free(codes), free(vals), free(s), free(inv);
    return bad;
}

static const collage_fp8_recipe RECIPES[4] = {COLLAGE_FP8_DELAYED, COLLAGE_FP8_CURRENT, COLLAGE_FP8_BLOCK,
                                              COLLAGE_FP8_MXFP8};

/* Each recipe's blocks, scales and codes on random tensors of odd sizes, K along rows and along columns,
 * every role and format, values over 2^±20 (so the fp8 subnormals and saturation are reached). */
static void test_recipes_random(void) {
    const int shapes[3][2] = {{3, 300}, {257, 5}, {130, 129}};
    for (int si = 0; si < 3; si++) {
        const int rows = shapes[si][0], cols = shapes[si][1];
        uint16_t *x = malloc((size_t)rows * cols * 2);
        fill(x, (size_t)rows * cols, -20, 20);
        for (int ri = 0; ri < 4; ri++)
            for (int role = 0; role < 3; role++)
                for (int ka = 0; ka < 2; ka++)
                    for (int fi = 0; fi < 2; fi++) {
                        const collage_fp8_quant q = {.recipe = RECIPES[ri], .fmt = FMTS[fi], .role = role, .k_axis = ka,
                                                     .scale = 0x1p-3f};
                        int br = rows, bc = cols;
                        if (RECIPES[ri] == COLLAGE_FP8_BLOCK) {
                            const int across = role == COLLAGE_FP8_WEIGHT ? 128 : 1;
                            br = ka ? across : 128, bc = ka ? 128 : across;
                        } else if (RECIPES[ri] == COLLAGE_FP8_MXFP8) {
                            br = ka ? 1 : 32, bc = ka ? 32 : 1;
                        }
                        check_quant(&q, x, rows, cols, br, bc, 1 + (ri + role + ka) % 3);
                    }
        free(x);
    }
}

/* Zeros; one huge value among ordinary ones; saturation; amaxes that make F/a overflow fp32; MXFP8's
 * exponents at a power-of-two boundary and at both clamps. */
static void test_recipes_constructed(void) {
    enum { R = 2, C = 256 };
    uint16_t x[R * C];
    memset(x, 0, sizeof x);
    for (int ri = 0; ri < 4; ri++) {
        const collage_fp8_quant q = {.recipe = RECIPES[ri], .fmt = COLLAGE_FMT_E4M3, .k_axis = 1, .scale = 1.0f};
        CHECK(check_quant(&q, x, R, C, ri < 2 ? R : 1, ri < 2 ? C : ri == 2 ? 128 : 32, 1) == 0, "zeros, %s",
              collage__fp8_recipe_name(RECIPES[ri]));
    }
    /* ones, and 1e30 at (1, 200): per tensor it takes the whole scale (the ones flush to 0), in a block only
     * its own tile's */
    for (int i = 0; i < R * C; i++) x[i] = bf(1.0f);
    x[C + 200] = bf(1e30f);
    for (int ri = 0; ri < 4; ri++)
        for (int fi = 0; fi < 2; fi++) {
            const collage_fp8_quant q = {.recipe = RECIPES[ri], .fmt = FMTS[fi], .k_axis = 1, .scale = 1.0f};
            check_quant(&q, x, R, C, ri < 2 ? R : 1, ri < 2 ? C : ri == 2 ? 128 : 32, 2);
            uint8_t codes[R * C];
            float s[R * C], inv[R * C];
            collage__fp8_quantize(&q, x, R, C, C, codes, NULL, 0, s, inv, NULL, 1);
            const uint8_t maxc = (uint8_t)collage_format_get(FMTS[fi])->max_bits;
            /* it takes the largest code, or with MXFP8's power-of-two scale a value in (F/2, F] */
            const float F = collage_format_get(FMTS[fi])->max_value, v = collage_lp_to_f32(FMTS[fi], codes[C + 200]);
            CHECK(RECIPES[ri] == COLLAGE_FP8_MXFP8 ? v > F / 2 && v <= F : codes[C + 200] == maxc,
                  "%s: the huge value's code 0x%02x", collage__fp8_recipe_name(RECIPES[ri]), codes[C + 200]);
            if (RECIPES[ri] == COLLAGE_FP8_CURRENT) CHECK(codes[0] == 0, "a one beside 1e30 per tensor: 0x%02x", codes[0]);
            if (RECIPES[ri] >= COLLAGE_FP8_BLOCK)
                CHECK(codes[0] != 0 && codes[C] != 0 && codes[C + 100] != 0, "ones in other blocks kept");
        }
    /* saturation: the delayed scale in force puts values past F */
    const float big[4] = {500.0f, -1e5f, 3.3e38f, -3.3e38f};
    for (int fi = 0; fi < 2; fi++) {
        const collage_fp8_quant q = {.recipe = COLLAGE_FP8_DELAYED, .fmt = FMTS[fi], .k_axis = 1, .scale = 1.0f};
        uint16_t b[4];
        uint8_t codes[4];
        float s, inv;
        for (int i = 0; i < 4; i++) b[i] = bf(big[i]);
        collage__fp8_quantize(&q, b, 1, 4, 4, codes, NULL, 0, &s, &inv, NULL, 1);
        const uint8_t mx = (uint8_t)collage_format_get(FMTS[fi])->max_bits;
        CHECK((fi || codes[0] == mx) && codes[2] == mx && codes[1] == (mx | 0x80) && codes[3] == (mx | 0x80),
              "%s saturation: %02x %02x %02x %02x", collage_format_get(FMTS[fi])->name, codes[0], codes[1], codes[2],
              codes[3]);
    }
    /* a tiny amax: F/a overflows fp32, the scale is FLT_MAX (Transformer Engine's rule) */
    const uint16_t tiny[2] = {0x0001, 0x8000}; /* 2^-133 and −0 */
    for (int ri = 1; ri < 3; ri++) {
        const collage_fp8_quant q = {.recipe = RECIPES[ri], .fmt = COLLAGE_FMT_E4M3, .k_axis = 1};
        float s, inv;
        collage__fp8_quantize(&q, tiny, 1, 2, 2, NULL, NULL, 0, &s, &inv, NULL, 1);
        CHECK(s == FLT_MAX, "%s: s %g for amax 2^-133", collage__fp8_recipe_name(RECIPES[ri]), (double)s);
        check_quant(&q, tiny, 1, 2, 1, ri == 1 ? 2 : 128, 1);
    }
    /* MXFP8: amax = F·2^E exactly takes E, one bf16 ulp above takes E + 1; the clamps */
    const struct { float a; int e; } mx[] = {{448.0f, 0}, {0x1.c4p8f, 1}, {1.0f, -8}, {0x1.cp-1f, -9},
                                             {0x1p-133f, -124}, {3.3e38f, 119}, {1e-38f, -124}};
    for (size_t i = 0; i < sizeof mx / sizeof *mx; i++) {
        const collage_fp8_quant q = {.recipe = COLLAGE_FP8_MXFP8, .fmt = COLLAGE_FMT_E4M3, .k_axis = 1};
        float s, inv;
        collage__fp8_block_scale(&q, f(bf(mx[i].a)), &s, &inv);
        CHECK(inv == ldexpf(1.0f, mx[i].e) && s == ldexpf(1.0f, -mx[i].e), "mxfp8 amax %a: inv %a, want 2^%d",
              (double)mx[i].a, (double)inv, mx[i].e);
    }
}

/* MXFP8's exponent, the least E with a ≤ F·2^E, equals Transformer Engine's way of computing it (the fp32
 * product a·fp32(1/F) rounded up to a power of two) for every positive finite bf16 amax, where in range. */
static void test_mx_exponent_te(void) {
    for (int fi = 0; fi < 2; fi++) {
        const collage_fp8_quant q = {.recipe = COLLAGE_FP8_MXFP8, .fmt = FMTS[fi], .k_axis = 1};
        const float rcp = 1.0f / collage_format_get(FMTS[fi])->max_value;
        const int lo = fi ? -117 : -124, hi = fi ? 112 : 119;
        int n = 0;
        for (uint32_t b = 1; b < 0x7f80u; b++) {
            const float a = f((uint16_t)b), r = a * rcp;
            int e = ilogbf(r);
            if (ldexpf(1.0f, e) < r) e++; /* rounded up to a power of two */
            if (e < lo || e > hi) continue;
            float s, inv;
            collage__fp8_block_scale(&q, a, &s, &inv);
            n++;
            CHECK(inv == ldexpf(1.0f, e), "%s amax %a: 2^%d, Transformer Engine's 2^%d", collage_format_get(FMTS[fi])->name,
                  (double)a, ilogbf(inv), e);
        }
        CHECK(n > 20000, "%d amaxes compared", n);
    }
}

/* NaN or ±Inf anywhere: COLLAGE_ERR_NONFINITE for every recipe, codes, values and amax untouched; bad
 * arguments refused. */
static void test_nonfinite(void) {
    const uint16_t bad[4] = {0x7fc0, 0xffc0, 0x7f80, 0xff80};
    for (int ri = 0; ri < 4; ri++)
        for (int bi = 0; bi < 4; bi++)
            for (int at = 0; at < 300; at += 149) {
                uint16_t x[300];
                fill(x, 300, -3, 3);
                x[at] = bad[bi];
                uint8_t codes[300];
                uint16_t vals[300];
                float s[300], inv[300], amax = -1.0f;
                memset(codes, 0xa5, sizeof codes), memset(vals, 0xa5, sizeof vals);
                const collage_fp8_quant q = {.recipe = RECIPES[ri], .fmt = COLLAGE_FMT_E4M3, .k_axis = 1, .scale = 1.0f};
                const collage_status st = collage__fp8_quantize(&q, x, 3, 100, 100, codes, vals,
                                                                RECIPES[ri] == COLLAGE_FP8_MXFP8, s, inv, &amax, 2);
                int touched = amax != -1.0f;
                for (int i = 0; i < 300; i++) touched |= codes[i] != 0xa5 || vals[i] != 0xa5a5;
                CHECK(st == COLLAGE_ERR_NONFINITE && !touched, "%s, 0x%04x at %d: status %d, outputs touched %d",
                      collage__fp8_recipe_name(RECIPES[ri]), bad[bi], at, st, touched);
            }
    uint16_t x[4] = {0};
    float s[4], inv[4];
    collage_fp8_quant q = {.recipe = COLLAGE_FP8_CURRENT, .fmt = COLLAGE_FMT_BF16, .k_axis = 1};
    CHECK(collage__fp8_quantize(&q, x, 1, 4, 4, NULL, NULL, 0, s, inv, NULL, 1) == COLLAGE_ERR_ARG, "bf16 refused");
    q.fmt = COLLAGE_FMT_E4M3;
    CHECK(collage__fp8_quantize(&q, x, 1, 4, 4, NULL, NULL, 1, s, inv, NULL, 1) == COLLAGE_ERR_ARG, "dequant refused");
    CHECK(collage__fp8_quantize(&q, x, 1, 4, 3, NULL, NULL, 0, s, inv, NULL, 1) == COLLAGE_ERR_SIZE, "ld < cols");
    q.recipe = COLLAGE_FP8_DELAYED, q.scale = NAN;
    CHECK(collage__fp8_quantize(&q, x, 1, 4, 4, NULL, NULL, 0, s, inv, NULL, 1) == COLLAGE_ERR_ARG, "NaN scale");
    collage_fp8_recipe r;
    CHECK(collage__fp8_recipe_parse("mxfp8", &r) == COLLAGE_OK && r == COLLAGE_FP8_MXFP8 &&
              collage__fp8_recipe_parse("mx", &r) == COLLAGE_ERR_ARG,
          "recipe names");
}

/* ---------------------------------------------------------------- the quantizer's loops per ISA */
/* Every ISA the CPU has runs fp8q_kernel.inc's loops: their saturating rounding gives the scalar
 * collage__fp8_sat's codes (tested against the encoder above) on test_sat_fast's boundary patterns and 2^18
 * random ones, and the quantizer meets the oracle on the random and constructed tensors and refuses NaN and
 * Inf as above (test_recipes_random and test_recipes_constructed cover per-row and one-column-wide blocks,
 * test_nonfinite the refusal). */
static void test_isas(void) {
    static const uint32_t low[8] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff, 0x5555};
    enum { NY = 0x10000 * 8 + (1 << 18) };
    float *y = malloc(NY * sizeof *y);
    uint8_t *got = malloc(NY);
    size_t n = 0;
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (int l = 0; l < 8; l++) {
            const uint32_t u = hi << 16 | low[l];
            if ((u & 0x7fffffffu) <= 0x7f800000u) y[n++] = bits_f32(u);
        }
    while (n < NY) {
        const uint32_t u = rnd32();
        if ((u & 0x7fffffffu) <= 0x7f800000u) y[n++] = bits_f32(u);
    }
    const collage_isa isas[3] = {COLLAGE_ISA_SCALAR, COLLAGE_ISA_AVX2, COLLAGE_ISA_AVX512};
    for (int ii = 0; ii < 3; ii++) {
        if (!collage_isa_supported(isas[ii])) {
            printf("  %s: not on this CPU, skipped\n", collage_isa_name(isas[ii]));
            continue;
        }
        for (int fi = 0; fi < 2; fi++) {
            collage__fp8q_sat_row(isas[ii], FMTS[fi], y, (int)n, got);
            int bad = 0;
            for (size_t i = 0; i < n; i++) {
                const uint8_t want = collage__fp8_sat(FMTS[fi], y[i]);
                if (got[i] != want && bad++ < 5)
                    CHECK(0, "%s %s: y %a: 0x%02x, scalar 0x%02x", collage_isa_name(isas[ii]),
                          collage_format_get(FMTS[fi])->name, (double)y[i], got[i], want);
            }
            CHECK(bad == 0, "%s %s: %d codes differ", collage_isa_name(isas[ii]), collage_format_get(FMTS[fi])->name, bad);
        }
        CHECK(collage_set_isa(isas[ii]) == COLLAGE_OK, "set %s", collage_isa_name(isas[ii]));
        test_recipes_random();
        test_recipes_constructed();
        test_nonfinite();
        collage_set_isa(COLLAGE_ISA_AUTO);
    }
    free(y), free(got);
}

/* ---------------------------------------------------------------- delayed scaling */
/* The scale after each step against max over the last H recorded amaxes (zeros and non-finite keep the
 * scale), margin 1; a discarded step changes nothing; save at step 5 and resume gives the same bytes at
 * step 12; damaged bytes are refused with st unchanged. */
static void test_delayed_history(void) {
    enum { H = 4, STEPS = 12 };
    const collage_format fm[2] = {COLLAGE_FMT_E4M3, COLLAGE_FMT_E5M2};
    collage__fp8_scaling *st = collage__fp8_scaling_create(fm, 2, H, 1), *re = NULL;
    CHECK(st && collage__fp8_scaling_scale(st, 0) == 1.0f && collage__fp8_scaling_scale(st, 1) == 1.0f, "create");
    CHECK(!collage__fp8_scaling_create(fm, 2, 0, 0) && !collage__fp8_scaling_create(fm, 0, 4, 0), "bad shapes refused");
    const float amax[STEPS] = {0, 2, 8, 1, 0.5f, 1, 1, 0, 3, 0, 0, 0};
    double hist[2][STEPS];
    float want[2] = {1, 1};
    unsigned char *saved = NULL, *at_end = NULL;
    const size_t nbytes = collage__fp8_scaling_bytes(st);
    for (int t = 0; t < STEPS; t++) {
        for (int s = 0; s < 2; s++) {
            const float a = s ? amax[t] * 1000 : amax[t];
            collage__fp8_scaling_record(st, s, a / 2);
            collage__fp8_scaling_record(st, s, NAN); /* ignored */
            collage__fp8_scaling_record(st, s, a);   /* the max of the step's records */
            hist[s][t] = (double)a;
            double h = 0;
            for (int j = t - H + 1; j <= t; j++) h = j >= 0 ? fmax(h, hist[s][j]) : h;
            if (h > 0) want[s] = (float)((double)collage_format_get(fm[s])->max_value / h) / 2;
        }
        if (t == 3) { /* a skipped step between: its records are forgotten */
            collage__fp8_scaling_record(st, 0, 1e6f);
            const float before = collage__fp8_scaling_current(st)[0];
            collage__fp8_scaling_discard(st);
            CHECK(collage__fp8_scaling_current(st)[0] == 0 && before == 1e6f, "discard");
            collage__fp8_scaling_record(st, 0, amax[t]), collage__fp8_scaling_record(st, 1, amax[t] * 1000);
        }
        collage__fp8_scaling_step(st);
        for (int s = 0; s < 2; s++)
            CHECK(collage__fp8_scaling_scale(st, s) == want[s], "step %d slot %d: scale %a want %a", t, s,
                  (double)collage__fp8_scaling_scale(st, s), (double)want[s]);
        if (t == 4) {
            saved = malloc(nbytes);
            CHECK(collage__fp8_scaling_save(st, saved, nbytes) == COLLAGE_OK, "save");
            CHECK(collage__fp8_scaling_save(st, saved, nbytes - 1) == COLLAGE_ERR_SIZE, "short buffer");
        }
    }
    CHECK(collage__fp8_scaling_steps(st) == STEPS, "steps");
    at_end = malloc(nbytes);
    collage__fp8_scaling_save(st, at_end, nbytes);
    /* resume from step 5 */
    re = collage__fp8_scaling_create(fm, 2, H, 1);
    char err[200] = "";
    CHECK(collage__fp8_scaling_load(re, saved, nbytes, err, sizeof err) == COLLAGE_OK, "load: %s", err);
    for (int t = 5; t < STEPS; t++) {
        collage__fp8_scaling_record(re, 0, amax[t]), collage__fp8_scaling_record(re, 1, amax[t] * 1000);
        collage__fp8_scaling_step(re);
    }
    unsigned char *again = malloc(nbytes);
    collage__fp8_scaling_save(re, again, nbytes);
    CHECK(!memcmp(again, at_end, nbytes), "resumed state differs from the uninterrupted one");
    /* bad bytes, each refused with a message and re unchanged: (offset, width, value, length) */
    struct { size_t off; int width; uint32_t val; size_t len; const char *what; } bad[] = {
        {0, 1, 'X', nbytes, "magic"}, {8, 4, 2, nbytes, "version"}, {12, 4, 3, nbytes, "slots"},
        {20, 4, 0, nbytes, "margin"}, {24, 4, H, nbytes, "position"}, {40, 1, COLLAGE_FMT_E5M2, nbytes, "format"},
        {41, 4, 0x7fc00000u, nbytes, "scale NaN"}, {41, 4, 0, nbytes, "scale 0"},
        {45, 4, 0xbf800000u, nbytes, "amax -1"}, {53, 4, 0x7f800000u, nbytes, "history amax Inf"},
        {0, 0, 0, nbytes - 1, "truncated"}, {0, 0, 0, nbytes + 1, "longer"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unsigned char *b = malloc(nbytes + 1);
        memcpy(b, saved, nbytes);
        b[nbytes] = 0;
        for (int k = 0; k < bad[i].width; k++) b[bad[i].off + k] = (unsigned char)(bad[i].val >> (8 * k));
        err[0] = 0;
        const collage_status s = collage__fp8_scaling_load(re, b, bad[i].len, err, sizeof err);
        collage__fp8_scaling_save(re, again, nbytes);
        CHECK(s == COLLAGE_ERR_FORMAT && err[0] && !memcmp(again, at_end, nbytes), "%s: status %d (%s), state kept %d",
              bad[i].what, s, err, !memcmp(again, at_end, nbytes));
        free(b);
    }
    collage__fp8_scaling *other = collage__fp8_scaling_create(fm, 2, H + 1, 1);
    CHECK(collage__fp8_scaling_load(other, saved, nbytes, err, sizeof err) == COLLAGE_ERR_FORMAT, "another history");
    collage__fp8_scaling_free(other);
    free(saved), free(at_end), free(again);
    collage__fp8_scaling_free(st), collage__fp8_scaling_free(re);
}

/* ---------------------------------------------------------------- the product */
typedef struct { float *C; int ldc; int calls; } keep_ctx;
static void keep_tile(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    keep_ctx *c = p;
#pragma omp atomic
    c->calls++;
    for (int i = i0; i < i1; i++) memcpy(c->C + (size_t)i * c->ldc + j0, t + (size_t)(i - i0) * ldt, (size_t)(j1 - j0) * 4);
}

/* The three products of a linear layer Y = X·Wᵀ (N, OC, C): (ta, tb, M, N, K, roles). */
typedef struct { int ta, tb; collage_fp8_role ra, rb; const char *name; } prod_kind;
static const prod_kind KINDS[3] = {{0, 1, COLLAGE_FP8_ACT, COLLAGE_FP8_WEIGHT, "Y = X·Wᵀ"},
                                   {0, 0, COLLAGE_FP8_GRAD, COLLAGE_FP8_WEIGHT, "dX = dY·W"},
                                   {1, 0, COLLAGE_FP8_GRAD, COLLAGE_FP8_ACT, "dW = dYᵀ·X"}};

/* The double product of the dequantized operands (each element q·inv, from the quantizer's codes and
 * factors) and Σ|a·b| per element, for the error bound. */
static void dequant_ref(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, const uint16_t *B,
                        double *D, double *S) {
    const int rows[2] = {ta ? K : M, tb ? N : K}, cols[2] = {ta ? M : K, tb ? K : N};
    const uint16_t *X[2] = {A, B};
    double *dq[2];
    for (int w = 0; w < 2; w++) {
        const collage_fp8_quant q = nn_fp8_quant_of(p, w, w ? tb : ta);
        const size_t n = (size_t)rows[w] * cols[w], nb = collage__fp8_blocks(&q, rows[w], cols[w]);
        uint8_t *codes = malloc(n);
        float *s = malloc(nb * 4), *inv = malloc(nb * 4);
        collage__fp8_quantize(&q, X[w], rows[w], cols[w], cols[w], codes, NULL, 0, s, inv, NULL, 1);
        int br, bc;
        collage__fp8_block_shape(&q, rows[w], cols[w], &br, &bc);
        dq[w] = malloc(n * sizeof(double));
        for (int r = 0; r < rows[w]; r++)
            for (int c = 0; c < cols[w]; c++)
                dq[w][(size_t)r * cols[w] + c] = (double)collage_lp_to_f32(q.fmt, codes[(size_t)r * cols[w] + c]) *
                                                 (double)inv[(size_t)(r / br) * ((cols[w] + bc - 1) / bc) + c / bc];
        free(codes), free(s), free(inv);
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = 0, s = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? dq[0][(size_t)k * M + i] : dq[0][(size_t)i * K + k];
                const double b = tb ? dq[1][(size_t)j * K + k] : dq[1][(size_t)k * N + j];
                d += a * b, s += fabs(a * b);
            }
            D[(size_t)i * N + j] = d, S[(size_t)i * N + j] = s;
        }
    free(dq[0]), free(dq[1]);
}

/* For every recipe and each of a linear layer's three products at odd sizes: the door on the reference
 * sgemm (widening path) equals the scalar twin bit for bit on 1, 2 and 3 threads; every available path
 * is within fp32-sum error of the double product of the dequantized operands:
 * |c − d| ≤ (K + 8)·2^-24·Σ|a·b| (the block sums' roundings, the scales' and the folds'). */
static void test_product(void) {
    enum { NT = 300, OC = 70, CH = 260 }; /* tokens, outputs, inputs */
    uint16_t *X = malloc(NT * CH * 2), *W = malloc(OC * CH * 2), *dY = malloc(NT * OC * 2);
    fill(X, NT * CH, -4, 3), fill(W, OC * CH, -8, -2), fill(dY, NT * OC, -30, -22);
    char err[160];
    CHECK(nn_products_pin("ref", err, sizeof err) == 0, "pin: %s", err);
    const collage_format fm[3] = {COLLAGE_FMT_E4M3, COLLAGE_FMT_E4M3, COLLAGE_FMT_E5M2};
    collage__fp8_scaling *sc = collage__fp8_scaling_create(fm, 3, 16, 0);
    const uint16_t *T[3] = {X, W, dY}; /* the delayed scales from one step's amaxes: slots act, weight, grad */
    const size_t tn[3] = {NT * CH, OC * CH, NT * OC};
    for (int s = 0; s < 3; s++) {
        float a = 0;
        for (size_t i = 0; i < tn[s]; i++) a = fmaxf(a, fabsf(f(T[s][i])));
        collage__fp8_scaling_record(sc, s, a);
    }
    collage__fp8_scaling_step(sc);
    for (int ri = 0; ri < 4; ri++)
        for (int ki = 0; ki < 3; ki++) {
            const prod_kind *pk = &KINDS[ki];
            const int M = ki == 2 ? OC : NT, N = ki == 0 ? OC : CH, K = ki == 0 ? CH : ki == 1 ? OC : NT;
            const uint16_t *A = ki == 0 ? X : dY, *B = ki == 0 ? W : ki == 1 ? W : X;
            const int lda = ki == 0 ? CH : OC, ldb = CH;
            nn_fp8_spec p = {.recipe = RECIPES[ri], .ra = pk->ra, .rb = pk->rb, .scaling = sc,
                             .slot_a = pk->ra == COLLAGE_FP8_GRAD ? 2 : 0, .slot_b = pk->rb == COLLAGE_FP8_WEIGHT ? 1 : 0};
            float *R = malloc((size_t)M * N * 4), *C = malloc((size_t)M * N * 4);
            keep_ctx kr = {.C = R, .ldc = N};
            CHECK(nn_gemm_fp8_ref(&p, pk->ta, pk->tb, M, N, K, A, lda, B, ldb, keep_tile, &kr) == COLLAGE_OK, "ref");
            double *D = malloc((size_t)M * N * 8), *S = malloc((size_t)M * N * 8);
            dequant_ref(&p, pk->ta, pk->tb, M, N, K, A, B, D, S);
            for (int path = 0; path < NN_BF16_COUNT; path++) {
                if (!nn_bf16_available((nn_bf16_path)path)) continue;
                for (int nt = 1; nt <= 3; nt++) {
                    nn_fp8_ws ws = {0};
                    CHECK(nn_gemm_fp8_reserve(&ws, &p, pk->ta, pk->tb, M, N, K, nt, (nn_bf16_path)path) == 0, "reserve");
                    memset(C, 0xff, (size_t)M * N * 4);
                    keep_ctx kc = {.C = C, .ldc = N};
                    CHECK(nn_gemm_fp8(&p, pk->ta, pk->tb, M, N, K, A, lda, B, ldb, keep_tile, &kc, &ws, (nn_bf16_path)path,
                                      nt) == COLLAGE_OK, "product");
                    int diff = 0, over = 0;
                    for (size_t e = 0; e < (size_t)M * N; e++) {
                        diff += memcmp(&C[e], &R[e], 4) != 0;
                        over += !(fabs((double)C[e] - D[e]) <= (K + 8) * 0x1p-24 * S[e]);
                    }
                    if (path == NN_BF16_WIDEN)
                        CHECK(diff == 0, "%s %s nt %d: %d elements differ from the scalar twin",
                              collage__fp8_recipe_name(RECIPES[ri]), pk->name, nt, diff);
                    CHECK(over == 0, "%s %s %s nt %d: %d elements beyond the bound of the double product",
                          collage__fp8_recipe_name(RECIPES[ri]), pk->name, nn_bf16_name((nn_bf16_path)path), nt, over);
                    nn_fp8_ws_free(&ws);
                }
            }
            free(R), free(C), free(D), free(S);
        }
    collage__fp8_scaling_free(sc);
    nn_products_pin(NULL, err, sizeof err);
    free(X), free(W), free(dY);
}

/* NaN or Inf in either operand: COLLAGE_ERR_NONFINITE, ep never called, the delayed state's amaxes as
 * they were; finite operands record their amaxes. */
static void test_product_nonfinite(void) {
    enum { M = 40, N = 24, K = 130 };
    uint16_t A[M * K], B[N * K];
    fill(A, M * K, -2, 2), fill(B, N * K, -2, 2);
    const collage_format fm[2] = {COLLAGE_FMT_E4M3, COLLAGE_FMT_E4M3};
    collage__fp8_scaling *sc = collage__fp8_scaling_create(fm, 2, 8, 0);
    float C[M * N];
    for (int ri = 0; ri < 4; ri++)
        for (int which = 0; which < 3; which++) {
            nn_fp8_spec p = {.recipe = RECIPES[ri], .ra = COLLAGE_FP8_ACT, .rb = COLLAGE_FP8_WEIGHT, .scaling = sc,
                             .slot_a = 0, .slot_b = 1};
            nn_fp8_ws ws = {0};
            nn_gemm_fp8_reserve(&ws, &p, 0, 1, M, N, K, 2, NN_BF16_WIDEN);
            collage__fp8_scaling_discard(sc);
            uint16_t *X = which == 1 ? B : A, keep = X[77];
            if (which < 2) X[77] = 0xff80;
            keep_ctx kc = {.C = C, .ldc = N};
            const collage_status st = nn_gemm_fp8(&p, 0, 1, M, N, K, A, K, B, K, keep_tile, &kc, &ws, NN_BF16_WIDEN, 2);
            const float *cur = collage__fp8_scaling_current(sc);
            if (which < 2)
                CHECK(st == COLLAGE_ERR_NONFINITE && kc.calls == 0 && cur[0] == 0 && cur[1] == 0,
                      "%s, Inf in %c: status %d, %d tiles, amaxes %g %g", collage__fp8_recipe_name(RECIPES[ri]), 'A' + which,
                      st, kc.calls, (double)cur[0], (double)cur[1]);
            else
                CHECK(st == COLLAGE_OK && kc.calls > 0 && (ri != 0 || (cur[0] > 0 && cur[1] > 0)),
                      "%s finite: status %d", collage__fp8_recipe_name(RECIPES[ri]), st);
            X[77] = keep;
            nn_fp8_ws_free(&ws);
        }
    collage__fp8_scaling_free(sc);
}

/* ---------------------------------------------------------------- a linear layer's fp8 ops */

/* The scalar twin's fp32 result of one of the layer's products (rows × cols). */
static float *twin(const nn_fp8_layer *L, collage_fp8_role ra, int sa, collage_fp8_role rb, int sb, int ta, int tb, int M,
                   int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb) {
    nn_fp8_spec p = {.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = ra, .rb = rb, .scaling = L->scaling,
                     .slot_a = L->slot + sa, .slot_b = L->slot + sb};
    float *c = malloc((size_t)M * N * 4);
    keep_ctx g = {.C = c, .ldc = N};
    nn_gemm_fp8_ref(&p, ta, tb, M, N, K, A, lda, B, ldb, keep_tile, &g);
    return c;
}

static double cosine(const uint16_t *a, const uint16_t *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = (double)f(a[i]), y = (double)f(b[i]);
        ab += x * y, aa += x * x, bb += y * y;
    }
    return ab / sqrt(aa * bb);
}

/* The four ops against the scalar twin's products through the bf16 epilogues' roundings, bit for bit on
 * the reference sgemm (and the AVX-512 build equal to the baseline); near the bf16 ops (gradient cosine
 * above MIN_COSINE: the fp8 rounding of each operand, 2^-4 relative at most, is all that differs); the
 * delayed slots recorded where the spec says; a NaN leaves the output as it was. */
#define MIN_COSINE 0.995
static void test_layer_ops(void) {
    enum { N = 150, C = 200, OC = 136, LAYER = 1 };
    uint16_t *X = malloc(N * C * 2), *W = malloc(OC * C * 2), *dY = malloc(N * OC * 2), *bias = malloc(OC * 2),
             *res = malloc(N * OC * 2);
    fill(X, N * C, -2, 2), fill(W, OC * C, -7, -3), fill(dY, N * OC, -20, -14), fill(bias, OC, -4, -2),
        fill(res, N * OC, -2, 1);
    char err[160];
    nn_products_pin("ref", err, sizeof err);
    collage_format fm[6];
    nn_fp8_slot_formats(fm, 2, 0);
    CHECK(fm[3] == COLLAGE_FMT_E4M3 && fm[4] == COLLAGE_FMT_E4M3 && fm[5] == COLLAGE_FMT_E5M2, "slot formats");
    uint16_t *o = malloc(N * C * 2), *o2 = malloc(N * C * 2), *ob = malloc(N * C * 2);
    float *lg = malloc(N * OC * 4);
    nn_ws bws = {0};
    nn_gemm_bf16_reserve(&bws, N, OC, C, 2, NN_BF16_WIDEN);
    nn_gemm_bf16_reserve(&bws, N, C, OC, 2, NN_BF16_WIDEN);
    nn_gemm_bf16_reserve(&bws, OC, C, N, 2, NN_BF16_WIDEN);
    const int avx = collage_isa_supported(COLLAGE_ISA_AVX512);
    for (int ri = 0; ri < 4; ri++) {
        collage__fp8_scaling *sc = collage__fp8_scaling_create(fm, 6, 8, 0);
        nn_fp8_layer L = {.recipe = RECIPES[ri], .scaling = sc, .slot = 3 * LAYER};
        const uint16_t *T[3] = {X, W, dY};
        const size_t tn[3] = {N * C, OC * C, N * OC};
        for (int k = 0; k < 3; k++) { /* one step's amaxes for the delayed scales */
            float a = 0;
            for (size_t i = 0; i < tn[k]; i++) a = fmaxf(a, fabsf(f(T[k][i])));
            collage__fp8_scaling_record(sc, 3 * LAYER + k, a);
        }
        collage__fp8_scaling_step(sc);
        nn_fp8_ws ws = {0};
        CHECK(nn_fp8_layer_reserve(&ws, &L, N, C, OC, 2, NN_BF16_WIDEN) == 0, "reserve");
        const char *rn = collage__fp8_recipe_name(RECIPES[ri]);
        /* forward with bias and residual; logits */
        float *c = twin(&L, COLLAGE_FP8_ACT, 0, COLLAGE_FP8_WEIGHT, 1, 0, 1, N, OC, C, X, C, W, C);
        CHECK(nn_matmul_forward_fp8(o, X, W, bias, res, N, C, OC, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_OK, "forward");
        int bad = 0;
        for (int i = 0; i < N * OC; i++)
            bad += o[i] != bf(f(res[i]) + f(bf(c[i] + f(bias[i % OC]))));
        CHECK(bad == 0, "%s forward: %d elements differ from rnd(res + rnd(c + b))", rn, bad);
        const float *cur = collage__fp8_scaling_current(sc);
        if (RECIPES[ri] == COLLAGE_FP8_DELAYED)
            CHECK(cur[3] > 0 && cur[4] > 0 && cur[5] == 0 && cur[0] == 0, "forward's slots: %g %g %g", (double)cur[3],
                  (double)cur[4], (double)cur[5]);
        if (avx) {
            nn_matmul_forward_fp8_avx512(o2, X, W, bias, res, N, C, OC, &L, &ws, NN_BF16_WIDEN, 3);
            CHECK(!memcmp(o, o2, N * OC * 2), "%s forward: the AVX-512 build differs", rn);
        }
        nn_matmul_forward_bf16(ob, X, W, bias, res, N, C, OC, &bws, NN_BF16_WIDEN, 2);
        CHECK(cosine(o, ob, N * OC) > MIN_COSINE, "%s forward: cosine to bf16 %.6f", rn, cosine(o, ob, N * OC));
        CHECK(nn_matmul_logits_fp8(lg, X, W, N, C, OC, &L, &ws, NN_BF16_WIDEN, 1) == COLLAGE_OK, "logits");
        bad = 0;
        for (int i = 0; i < N * OC; i++) bad += lg[i] != f(bf(c[i]));
        CHECK(bad == 0, "%s logits: %d elements differ", rn, bad);
        free(c);
        /* dX = rnd(Q(dY)·Q(W)) */
        c = twin(&L, COLLAGE_FP8_GRAD, 2, COLLAGE_FP8_WEIGHT, 1, 0, 0, N, C, OC, dY, OC, W, C);
        CHECK(nn_matmul_backward_input_fp8(o, dY, W, N, C, OC, &L, &ws, NN_BF16_WIDEN, 3) == COLLAGE_OK, "dX");
        bad = 0;
        for (int i = 0; i < N * C; i++) bad += o[i] != bf(c[i]);
        CHECK(bad == 0, "%s dX: %d elements differ", rn, bad);
        if (RECIPES[ri] == COLLAGE_FP8_DELAYED) CHECK(cur[5] > 0, "dX records the gradient's slot");
        nn_matmul_backward_input_bf16(ob, dY, W, N, C, OC, &bws, NN_BF16_WIDEN, 2);
        CHECK(cosine(o, ob, N * C) > MIN_COSINE, "%s dX: cosine to bf16 %.6f", rn, cosine(o, ob, N * C));
        free(c);
        /* dW = rnd(dW + Q(dY)ᵀ·Q(X)) */
        c = twin(&L, COLLAGE_FP8_GRAD, 2, COLLAGE_FP8_ACT, 0, 1, 0, OC, C, N, dY, OC, X, C);
        memcpy(o, W, OC * C * 2), memcpy(ob, W, OC * C * 2);
        CHECK(nn_matmul_backward_weight_fp8(o, 1, dY, X, N, C, OC, NULL, NULL, 0, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_OK,
              "dW");
        bad = 0;
        for (int i = 0; i < OC * C; i++) bad += o[i] != bf(f(W[i]) + c[i]);
        CHECK(bad == 0, "%s dW (add): %d elements differ", rn, bad);
        CHECK(nn_matmul_backward_weight_fp8(o, 0, dY, X, N, C, OC, NULL, NULL, 0, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_OK,
              "dW");
        bad = 0;
        for (int i = 0; i < OC * C; i++) bad += o[i] != bf(c[i]);
        CHECK(bad == 0, "%s dW: %d elements differ", rn, bad);
        nn_matmul_backward_weight_bf16(ob, 0, dY, X, N, C, OC, NULL, NULL, 0, &bws, NN_BF16_WIDEN, 2);
        CHECK(cosine(o, ob, OC * C) > MIN_COSINE, "%s dW: cosine to bf16 %.6f", rn, cosine(o, ob, OC * C));
        free(c);
        /* a NaN in the gradient: refused, dX as it was */
        const uint16_t keep = dY[5];
        dY[5] = 0x7fc0;
        memcpy(o2, o, N * C * 2);
        CHECK(nn_matmul_backward_input_fp8(o, dY, W, N, C, OC, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_ERR_NONFINITE &&
                  !memcmp(o, o2, N * C * 2),
              "%s: NaN in dY not refused, or dX written", rn);
        dY[5] = keep;
        nn_fp8_ws_free(&ws);
        collage__fp8_scaling_free(sc);
    }
    nn_ws_free(&bws);
    nn_products_pin(NULL, err, sizeof err);
    free(X), free(W), free(dY), free(bias), free(res), free(o), free(o2), free(ob), free(lg);
}

/* The encoder's two fp8 ops (nn_bert.h) against the scalar twin through their bf16 epilogues, bit for bit
 * on the reference sgemm (the AVX-512 build equal to the baseline): the logits with their bias,
 * rnd(c + b), and the input's gradient added to the residual's, rnd(dinp + rnd(c)); near the bf16 ops; the
 * delayed slots each records; a NaN refused with the output as it was. */
static void test_encoder_ops(void) {
    enum { N = 70, C = 200, OC = 136, LAYER = 1 };
    uint16_t *X = malloc(N * C * 2), *W = malloc(OC * C * 2), *dY = malloc(N * OC * 2), *bias = malloc(OC * 2);
    uint16_t *d0 = malloc(N * C * 2), *o = malloc(N * C * 2), *o2 = malloc(N * C * 2), *ob = malloc(N * C * 2);
    float *lg = malloc(N * OC * 4), *lg2 = malloc(N * OC * 4), *lgb = malloc(N * OC * 4);
    fill(X, N * C, -2, 2), fill(W, OC * C, -7, -3), fill(dY, N * OC, -20, -14), fill(bias, OC, -4, -2);
    fill(d0, N * C, -12, -8);
    char err[160];
    nn_products_pin("ref", err, sizeof err);
    collage_format fm[6];
    nn_fp8_slot_formats(fm, 2, 0);
    nn_ws bws = {0};
    nn_gemm_bf16_reserve(&bws, N, OC, C, 2, NN_BF16_WIDEN);
    nn_gemm_bf16_reserve(&bws, N, C, OC, 2, NN_BF16_WIDEN);
    const int avx = collage_isa_supported(COLLAGE_ISA_AVX512);
    for (int ri = 0; ri < 4; ri++) {
        collage__fp8_scaling *sc = collage__fp8_scaling_create(fm, 6, 8, 0);
        nn_fp8_layer L = {.recipe = RECIPES[ri], .scaling = sc, .slot = 3 * LAYER};
        nn_fp8_ws ws = {0};
        CHECK(nn_fp8_layer_reserve(&ws, &L, N, C, OC, 2, NN_BF16_WIDEN) == 0, "reserve");
        const char *rn = collage__fp8_recipe_name(RECIPES[ri]);
        const float *cur = collage__fp8_scaling_current(sc);
        float *c = twin(&L, COLLAGE_FP8_ACT, 0, COLLAGE_FP8_WEIGHT, 1, 0, 1, N, OC, C, X, C, W, C);
        CHECK(nn_matmul_logits_bias_fp8(lg, X, W, bias, N, C, OC, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_OK, "logits");
        int bad = 0;
        for (int i = 0; i < N * OC; i++) bad += lg[i] != f(bf(c[i] + f(bias[i % OC])));
        CHECK(bad == 0, "%s logits with bias: %d elements differ from rnd(c + b)", rn, bad);
        if (RECIPES[ri] == COLLAGE_FP8_DELAYED)
            CHECK(cur[3] > 0 && cur[4] > 0 && cur[5] == 0, "logits' slots: %g %g %g", (double)cur[3], (double)cur[4],
                  (double)cur[5]);
        if (avx) {
            nn_matmul_logits_bias_fp8_avx512(lg2, X, W, bias, N, C, OC, &L, &ws, NN_BF16_WIDEN, 3);
            CHECK(!memcmp(lg, lg2, N * OC * 4), "%s logits: the AVX-512 build differs", rn);
        }
        nn_matmul_logits_bias_bf16(lgb, X, W, bias, N, C, OC, &bws, NN_BF16_WIDEN, 2);
        double ab = 0, aa = 0, bb = 0;
        for (int i = 0; i < N * OC; i++)
            ab += (double)lg[i] * (double)lgb[i], aa += (double)lg[i] * (double)lg[i], bb += (double)lgb[i] * (double)lgb[i];
        CHECK(ab / sqrt(aa * bb) > MIN_COSINE, "%s logits: cosine to bf16 %.6f", rn, ab / sqrt(aa * bb));
        free(c);
        c = twin(&L, COLLAGE_FP8_GRAD, 2, COLLAGE_FP8_WEIGHT, 1, 0, 0, N, C, OC, dY, OC, W, C);
        memcpy(o, d0, N * C * 2), memcpy(o2, d0, N * C * 2), memcpy(ob, d0, N * C * 2);
        CHECK(nn_matmul_backward_input_res_fp8(o, dY, W, N, C, OC, &L, &ws, NN_BF16_WIDEN, 3) == COLLAGE_OK, "dX res");
        bad = 0;
        for (int i = 0; i < N * C; i++) bad += o[i] != bf(f(d0[i]) + f(bf(c[i])));
        CHECK(bad == 0, "%s dX with the residual's: %d elements differ from rnd(d + rnd(c))", rn, bad);
        if (RECIPES[ri] == COLLAGE_FP8_DELAYED) CHECK(cur[5] > 0, "dX records the gradient's slot");
        if (avx) {
            nn_matmul_backward_input_res_fp8_avx512(o2, dY, W, N, C, OC, &L, &ws, NN_BF16_WIDEN, 2);
            CHECK(!memcmp(o, o2, N * C * 2), "%s dX res: the AVX-512 build differs", rn);
        }
        nn_matmul_backward_input_res_bf16(ob, dY, W, N, C, OC, &bws, NN_BF16_WIDEN, 2);
        CHECK(cosine(o, ob, N * C) > MIN_COSINE, "%s dX res: cosine to bf16 %.6f", rn, cosine(o, ob, N * C));
        free(c);
        const uint16_t keep = dY[5];
        dY[5] = 0x7fc0;
        memcpy(o2, o, N * C * 2);
        CHECK(nn_matmul_backward_input_res_fp8(o, dY, W, N, C, OC, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_ERR_NONFINITE &&
                  !memcmp(o, o2, N * C * 2), "%s: NaN in dY not refused, or dX written", rn);
        dY[5] = keep;
        const uint16_t kx = X[9];
        X[9] = 0x7f80;
        memcpy(lg2, lg, N * OC * 4);
        CHECK(nn_matmul_logits_bias_fp8(lg, X, W, bias, N, C, OC, &L, &ws, NN_BF16_WIDEN, 2) == COLLAGE_ERR_NONFINITE &&
                  !memcmp(lg, lg2, N * OC * 4), "%s: Inf in X not refused, or logits written", rn);
        X[9] = kx;
        nn_fp8_ws_free(&ws);
        collage__fp8_scaling_free(sc);
    }
    nn_ws_free(&bws);
    nn_products_pin(NULL, err, sizeof err);
    free(X), free(W), free(dY), free(bias), free(d0), free(o), free(o2), free(ob), free(lg), free(lg2), free(lgb);
}

int main(void) {
    printf("seed %u\n", SEED);
    RUN(test_roundtrip);
    RUN(test_sat_fast);
    RUN(test_recipes_random);
    RUN(test_recipes_constructed);
    RUN(test_mx_exponent_te);
    RUN(test_nonfinite);
    RUN(test_isas);
    RUN(test_delayed_history);
    RUN(test_product);
    RUN(test_product_nonfinite);
    RUN(test_layer_ops);
    RUN(test_encoder_ops);
    return h_end();
}
